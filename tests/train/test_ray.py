"""Profiling seeds over a real Ray cluster on loopback: a head and one worker node started (and stopped) here."""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not

pytest.importorskip("ray")

from depl.scenario import load_scenario  # noqa: E402
from depl.store import Store  # noqa: E402
from depl.train.engine import profile as prof  # noqa: E402
from depl.train.engine.federation import LocalFederation, walk_plan  # noqa: E402
from test_bad_factories import CASES, LATE_PRELUDE, SCENARIO, refused, write_factory  # noqa: E402

RAY = Path(sys.executable).parent / "ray"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_profile_seeds_run_on_a_loopback_ray_cluster(depl_cli, tmp_path):
    port = free_port()
    # Ray's files live in tmp_path, reached through a short link: its socket paths must stay under 107 bytes
    (tmp_path / "r").mkdir()
    link = Path(tempfile.mkdtemp(prefix="depl-ray-", dir="/tmp")) / "r"
    link.symlink_to(tmp_path / "r")
    own = tmp_path / "own"   # a project of your own code (a data factory drawn per run), allowed on the nodes
    own.mkdir()
    (own / "s.toml").write_text(SCENARIO)
    write_factory(own, {3}, CASES["raises"][1])
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "DEPL_CODE": str(own)}
    common = ["--block", "--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats"]
    procs = []

    def start(name, *args):
        log = open(tmp_path / f"{name}.log", "w")
        # --block: the command lives as long as its node and takes the node's processes down when stopped
        procs.append(subprocess.Popen([str(RAY), "start", *args, *common], env=env, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True))

    try:
        start("head", "--head", f"--port={port}", f"--temp-dir={link}", "--include-dashboard=false",
              f"--ray-client-server-port={free_port()}", f"--node-manager-port={free_port()}",
              f"--object-manager-port={free_port()}")
        deadline = time.time() + 90
        while "Ray runtime started" not in (tmp_path / "head.log").read_text():
            assert time.time() < deadline and procs[0].poll() is None, (tmp_path / "head.log").read_text()
            time.sleep(0.5)
        start("worker", f"--address=127.0.0.1:{port}")
        out = tmp_path / "p"
        cmd = ["profile", "mnist1d-small", "--epochs", "2", "--seeds", "4", "--version", "pruned-0.75", "--out", out,
               "--ray-address", f"127.0.0.1:{port}"]
        # a seed's own draw of your data that fails in a Ray task (checked there: its draw too dear to check
        # ahead) is told as the user's line, exit 2, after the task in flight beside it has ended and been written
        bad = ["profile", own / "s.toml", "--epochs", "2", "--seeds", "6", "--out", own / "p", "--ray-address",
               f"127.0.0.1:{port}"]
        # one start-up for the three, each command as the installed script runs it (main() anew); the prelude makes
        # every draw of your data too dear to check ahead (the built-in mnist1d-small's are never checked ahead)
        r, again, late = depl_cli.each([cmd, cmd, bad], env=env, timeout=600, cwd=own, prelude=LATE_PRELUDE)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        with Store(out / "runs.sqlite") as st:
            (run,) = st.runs("profile")
            got = st.losses(run["run_id"])
        # two batches of 2 seeds (the cluster's 2 CPUs); each seed on its own draw of the data (mnist1d-small draws
        # per run), the draws of a batch stacked: the local per-seed loop's trajectory to float rounding
        s = load_scenario("mnist1d-small")
        job = prof.experiment_job(s, [d.name for d in s.datasets], prof.Experiment("version", "pruned-0.75"), 2)
        assert not job.stackable and job.stacks
        for seed in range(4):
            assert got[seed] == pytest.approx([r.test_loss for r in walk_plan(job, seed, LocalFederation())], rel=1e-5)
        assert again.returncode == 0 and "8 of 8 epochs done" in again.stdout.replace("\n", " ")
        refused(late, 3, CASES["raises"][2])
        with Store(own / "p" / "runs.sqlite") as st:
            (run,) = st.runs("profile")
            assert {s: len(v) for s, v in st.losses(run["run_id"]).items()} == {0: 2, 1: 2, 2: 2}
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        link.unlink()
        link.parent.rmdir()


def test_an_unreachable_ray_address_is_bad_input(depl_cli, tmp_path):
    r = depl_cli("profile", "mnist1d-small", "--epochs", "1", "--seeds", "2", "--version", "pruned-0.75", "--out",
                 tmp_path, "--ray-address", f"127.0.0.1:{free_port()}", timeout=300)
    assert r.returncode == 2 and "--ray-address" in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
