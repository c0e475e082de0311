"""Training across a real network boundary: Linux network namespaces on this machine, each cluster's link shaped
to the scenario's bandwidth (benchmarks/bench_netns_handoff.py's `Lab`: a head namespace with a bridge at
10.77.0.1, one namespace per cluster on a veth pair to it, both ends `tc ... tbf` at bandwidth × 4,000 bytes/s).

A Ray head (no CPUs of its own) and one Ray worker node per cluster namespace profile seeds of mnist1d-small, the
driver in the head's namespace; a Flower SuperLink and two SuperNodes run a plan; a model-sized payload is handed
from one cluster to the other and timed beside eq. (1)'s s/b.  Skipped where namespaces cannot be made (not root,
no `ip netns`, no `tc`); everything is stopped and the namespaces deleted however a test ends.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from depl.scenario import load_scenario, parse_scenario
from depl.store import Store
from depl.train.engine.federation import LocalFederation, job_from_plan, walk_plan
from trainkit import make_plan, scenario_dict

pytestmark = pytest.mark.slow  # Ray and Flower across network namespaces: make test runs it, test-fast not

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_netns_handoff.py"
_spec = importlib.util.spec_from_file_location("bench_netns_handoff", SCRIPT)
netlab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(netlab)
Lab, BYTES_PER_UNIT = netlab.Lab, netlab.BYTES_PER_UNIT
BIN = Path(sys.executable).parent
WAIT = 180  # seconds any one wait may take on a busy machine


@pytest.fixture(scope="module")
def namespaces():
    why = netlab.unavailable()
    if why:
        pytest.skip(why)


def wait_for(predicate, what, proc=None, log=None, timeout=WAIT):
    deadline = time.time() + timeout
    while not predicate():
        alive = proc is None or proc.poll() is None
        if time.time() > deadline or not alive:
            tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
            raise AssertionError(f"{'timed out waiting for' if alive else 'exited before'} {what}\n{tail}")
        time.sleep(0.5)


def text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def sent_bytes(lab, i: int) -> int:
    """Bytes that left namespace i through its shaped link (its eth0's tbf counter)."""
    out = subprocess.run(lab.argv(i, "tc", "-s", "qdisc", "show", "dev", "eth0"), capture_output=True, text=True,
                         timeout=60).stdout
    return int(out.split(" Sent ", 1)[1].split()[0])


def in_lab(lab, i, depl_cli, *args, env, timeout=WAIT * 2):
    """`depl ARGS` run inside namespace i."""
    return subprocess.run(lab.argv(i, *depl_cli.argv(*args)), capture_output=True, text=True,
                          env=depl_cli.environ(env), timeout=timeout)


def test_profile_seeds_train_on_ray_nodes_behind_shaped_links(namespaces, depl_cli, tmp_path):
    s = load_scenario("mnist1d-small")
    # w1 is the edge cluster's node (50 size units/s: 200 kB/s), w2 the far-edge's (200: 800 kB/s)
    rates = [c.bandwidth * BYTES_PER_UNIT for c in s.clusters]
    # Ray's files live in tmp_path, reached through a short link: its socket paths must stay under 107 bytes
    (tmp_path / "r").mkdir()
    link = Path(tempfile.mkdtemp(prefix="depl-ray-", dir="/tmp")) / "r"
    link.symlink_to(tmp_path / "r")
    env = {"RAY_USAGE_STATS_ENABLED": "0"}
    ray = [BIN / "ray", "start", "--block", "--disable-usage-stats"]
    cmd = ["profile", "mnist1d-small", "--epochs", "2", "--seeds", "4", "--version", "pruned-0.75"]
    try:
        with Lab(rates) as lab:
            head = lab.start(0, *ray, "--head", f"--node-ip-address={lab.ip(0)}", "--port=6379", "--num-cpus=0",
                             f"--temp-dir={link}", "--include-dashboard=false", env=depl_cli.environ(env),
                             log=tmp_path / "head.log")
            wait_for(lambda: "Ray runtime started" in text(tmp_path / "head.log"), "the Ray head", head,
                     tmp_path / "head.log")
            # one CPU per worker node, none on the head: every batch trains behind a shaped link.  A node whose
            # raylet has not registered with the head within Ray's fixed 30 s (a loaded machine) stops: started again
            for i in (1, 2):
                for attempt in (1, 2):
                    log = tmp_path / f"w{i}-{attempt}.log"
                    node = lab.start(i, *ray, f"--address={lab.ip(0)}:6379", f"--node-ip-address={lab.ip(i)}",
                                     "--num-cpus=1", env=depl_cli.environ(env), log=log)
                    wait_for(lambda: "Ray runtime started" in text(log) or node.poll() is not None, f"Ray node w{i}")
                    if node.poll() is None:
                        break
                assert node.poll() is None, text(log)[-3000:]
            before = [sent_bytes(lab, i) for i in (1, 2)]
            # the driver in the head's namespace; --workers 2: two batches of 2 seeds, as the two nodes' CPUs cut
            # them; then the same seeds in this machine's own process (no Ray), cut into the same batches of 2 (one
            # torch thread, as a Ray task): one start-up for both, each command as the installed script runs it
            r, local = depl_cli.each([
                [*cmd, "--out", tmp_path / "ray", "--ray-address", f"{lab.ip(0)}:6379", "--workers", "2"],
                [*cmd, "--out", tmp_path / "local", "--seed-batch", "2", "--workers", "1"]],
                env=env, timeout=WAIT * 3, prefix=lab.argv(0))
            assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
            after = [sent_bytes(lab, i) for i in (1, 2)]
        assert all(b > a for a, b in zip(before, after)), (before, after)  # both nodes sent through their links
    finally:
        link.unlink()
        link.parent.rmdir()
    assert local.returncode == 0, local.stdout[-2000:] + local.stderr[-3000:]
    got = {}
    for where in ("ray", "local"):
        with Store(tmp_path / where / "runs.sqlite") as st:
            (run,) = st.runs("profile")
            got[where] = st.batches(run["run_id"]), st.losses(run["run_id"])
    assert got["ray"][0] == got["local"][0] == {0: 0, 1: 0, 2: 2, 3: 2}
    # the same stacks on the same code and CPU: bit for bit, whichever machine's namespace trained them
    assert got["ray"][1] == got["local"][1] and all(len(v) == 2 for v in got["ray"][1].values())


def test_a_plan_runs_on_flower_supernodes_behind_shaped_links(namespaces, depl_cli, tmp_path):
    plan = make_plan([("full", "A"), ("half", "B")])  # FedAvg on 2 nodes of A, hand-off, switch, B's one node
    plan.save(tmp_path / "plan.json")
    clusters = {c.name: c for c in parse_scenario(scenario_dict(), "test scenario").clusters}
    # w1 is node 0 of A and of B (A's bandwidth, = B's), w2 node 1 of A
    rates = [clusters["A"].bandwidth * BYTES_PER_UNIT, clusters["A"].bandwidth * BYTES_PER_UNIT]
    assert clusters["A"].bandwidth == clusters["B"].bandwidth
    env = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_HOME": str(tmp_path / "flwr"),
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    (tmp_path / "flwr").mkdir()
    # the SuperLink listens on every address of the head namespace: its Fleet API on the lab's network for the
    # SuperNodes, the Control API (Flower 1.41 serves both on one port) reached by the operator on the head's
    # loopback; no TLS inside the lab
    (tmp_path / "flwr" / "config.toml").write_text(
        '[superlink]\ndefault = "lab"\n\n[superlink.lab]\naddress = "127.0.0.1:9093"\ninsecure = true\n')
    with Lab(rates) as lab:
        link = lab.start(0, BIN / "flower-superlink", "--insecure", "--disable-runtime-dependency-installation",
                         "--database", "state.db", "--host", "0.0.0.0", "--port", "9093", cwd=tmp_path,
                         env=depl_cli.environ(env), log=tmp_path / "superlink.log")
        wait_for(lambda: "Uvicorn running on" in text(tmp_path / "superlink.log"), "the SuperLink", link,
                 tmp_path / "superlink.log")
        for i, conf in ((1, "cluster='A,B' node=0"), (2, "cluster='A' node=1")):
            lab.start(i, BIN / "flower-supernode", "--insecure", "--superlink", f"{lab.ip(0)}:9093", "--node-config",
                      conf, "--port", "9094", cwd=tmp_path, env=depl_cli.environ(env), log=tmp_path / f"node{i}.log")

        def online() -> int:
            r = subprocess.run(lab.argv(0, BIN / "flwr", "supernode", "list", "lab"), capture_output=True, text=True,
                               cwd=tmp_path, env=depl_cli.environ(env), timeout=WAIT)
            return r.stdout.count("online")

        wait_for(lambda: online() >= 2, "two SuperNodes online", link, tmp_path / "superlink.log")
        r = in_lab(lab, 0, depl_cli, "run", tmp_path / "plan.json", "--backend", "flower", "--superlink", "lab",
                   "--insecure", "--out", tmp_path / "out", env=env)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        assert "[depl] seed 0 epoch 2 half on B" in r.stdout
        assert min(sent_bytes(lab, i) for i in (1, 2)) > 0
    with Store(tmp_path / "out" / "runs.sqlite") as s:
        (run_row,) = s.runs("plan")
        got = s.losses(run_row["run_id"])[0]
    local = [x.test_loss for x in walk_plan(job_from_plan(plan), 0, LocalFederation())]
    assert got == pytest.approx(local, rel=1e-5, abs=1e-6)


def test_a_model_is_handed_from_one_cluster_to_the_other_across_its_link(namespaces):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, str(SCRIPT), "mnist1d-small", "--repeats", "1", "--json"], env=env,
                       capture_output=True, text=True, timeout=WAIT)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(r.stdout)
    s = load_scenario("mnist1d-small")
    assert (rep["from"], rep["to"]) == ("edge", "far-edge")
    assert rep["rates"] == {c.name: c.bandwidth * BYTES_PER_UNIT for c in s.clusters}
    assert [(v["version"], v["bytes"]) for v in rep["versions"]] == [(m.name, round(m.size * BYTES_PER_UNIT))
                                                                    for m in s.models]
    for v in rep["versions"]:  # no bound on the time (no timed tests): it is printed beside eq. (1)'s s/b
        assert v["seconds"] > 0 and v["eq1_seconds"] == pytest.approx(v["size"] / 50.0)
        print(f"hand-off edge → far-edge of {v['version']} ({v['bytes']} bytes): {v['seconds']:.3f} s measured, "
              f"s/b = {v['eq1_seconds']:.3f} s, ratio {v['ratio']:.2f}")
