"""The flower back end on Flower's simulation engine: same seed, same trajectory as `local`."""

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from depl.store import Store  # noqa: E402
from depl.train.federation import LocalFederation, job_from_plan, walk_plan  # noqa: E402
from trainkit import SWITCH_PLAN, make_plan  # noqa: E402


def test_flower_simulation_follows_the_local_trajectory(tmp_path):
    plan = make_plan(SWITCH_PLAN)  # cluster A: 2 nodes (FedAvg), then B: 1 node, two switches
    plan.save(tmp_path / "plan.json")
    # a short folder: Ray's socket paths under it must stay below 107 characters
    out = Path(tempfile.mkdtemp(prefix="depl-fl-", dir="/tmp"))
    try:
        _check(plan, tmp_path, out)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _listeners(root: int, out: Path) -> set[tuple[str, str]]:
    """(process name, local address) of every TCP listener of `root`'s process tree or of a process
    whose command line names `out` (Ray's detached processes), from `ss -ltnp` and /proc."""
    parent, named = {}, set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            stat = (proc / "stat").read_text()
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        parent[int(proc.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        if str(out) in cmd:
            named.add(int(proc.name))
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, pp in parent.items() if pp in tree} - tree
        tree |= more
        grew = bool(more)
    got = set()
    for line in subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout.splitlines():
        for pid in tree | named:
            if f"pid={pid}," in line:
                got.add((line.split('"')[1], line.split()[3]))
    return got


def _is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]").removeprefix("::ffff:")
    return host.startswith("127.") or host == "::1"


def _check(plan, tmp_path, out):
    import time

    p = subprocess.Popen([sys.executable, "-c", "from depl.cli import main; main()", "run", str(tmp_path / "plan.json"),
                          "--seeds", "2", "--backend", "flower", "--out", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: set[tuple[str, str]] = set()
    while p.poll() is None:  # what listens while the simulation runs: SuperLink, Ray, Flower's processes
        seen |= _listeners(p.pid, out) if shutil.which("ss") else set()
        time.sleep(1.0)
    stdout, stderr = p.communicate(timeout=600)
    r = subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)
    assert r.returncode == 0, r.stderr[-3000:]
    if shutil.which("ss"):  # nothing of the simulation is reachable from another machine
        assert any(name in ("gcs_server", "raylet") for name, _ in seen), seen  # Ray was seen running
        assert [x for x in seen if not _is_loopback(x[1])] == [], seen
    # Flower's current API (flwr run), not the deprecated run_simulation; Flower's and Ray's chatter stays in OUT
    for noise in ("deprecat", "FutureWarning", "run_simulation", "WARNING"):
        assert noise.lower() not in (r.stdout + r.stderr).lower(), noise
    job = job_from_plan(plan)
    with Store(out / "runs.sqlite") as s:
        (run,) = s.runs("plan")
        assert run["spec"]["backend"] == "flower"
        flower = s.losses(run["run_id"])
    assert sorted(flower) == [0, 1]
    for seed in (0, 1):
        local = [x.test_loss for x in walk_plan(job, seed, LocalFederation())]
        assert flower[seed] == pytest.approx(local, rel=1e-5, abs=1e-6)
    # Flower's and Ray's state stay in the run folder
    assert any((out / "ray").iterdir())
    assert (out / "flower").is_dir()


def test_an_exported_app_runs_with_flwr_run_on_flowers_local_simulation(tmp_path):
    """`depl export-app` then plain `flwr run DIR` (Flower's default `local` connection starts a
    simulation SuperLink): the same trajectory as the local back end, in the app's store."""
    import os
    import signal
    import socket
    import time

    plan = make_plan(SWITCH_PLAN)
    plan.save(tmp_path / "plan.json")
    out = Path(tempfile.mkdtemp(prefix="depl-ex-", dir="/tmp"))  # Ray's socket paths must stay short
    app = out / "app"
    r = subprocess.run([sys.executable, "-c", "from depl.cli import main; main()", "export-app",
                        str(tmp_path / "plan.json"), str(app), "--seeds", "1"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "[tool.flwr.app.components]" in (app / "pyproject.toml").read_text()

    def port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return str(s.getsockname()[1])

    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "FLWR_HOME": str(out / "flower"), "FLWR_TELEMETRY_ENABLED": "0", "RAY_TMPDIR": str(out / "ray"),
           "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": port(), "FLWR_LOCAL_CONTROL_API_PORT": port(),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    try:
        # one virtual SuperNode for cluster A's two nodes: it trains both shares of each round
        r = subprocess.run([str(bin_dir / "flwr"), "run", str(app), "--stream", "--federation-config", "num-supernodes=1"],
                           env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        with Store(app / "runs.sqlite") as s:
            (run,) = s.runs("plan")
            flower = s.losses(run["run_id"])
        local = [x.test_loss for x in walk_plan(job_from_plan(plan), 0, LocalFederation())]
        assert flower[0] == pytest.approx(local, rel=1e-5, abs=1e-6)
    finally:  # flwr leaves its local SuperLink running, detached: stop the one it started for us
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                cmd = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(c.endswith(b"flower-superlink") for c in cmd) and str(out).encode() in b" ".join(cmd):
                try:
                    os.kill(int(proc.name), signal.SIGTERM)
                except ProcessLookupError:
                    pass
        time.sleep(1)
        shutil.rmtree(out, ignore_errors=True)
