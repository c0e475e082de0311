"""The flower back end on Flower's simulation engine: same seed, same trajectory as `local`."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not

pytest.importorskip("flwr")

import depl  # noqa: E402
import depl.workflows  # noqa: E402
from depl.store import Store  # noqa: E402
from depl.train.engine.federation import LocalFederation, evaluate, job_from_plan, walk_plan  # noqa: E402
from depl.train.engine.federation import test_data as run_test_data  # noqa: E402
from trainkit import SWITCH_PLAN, make_plan  # noqa: E402


# a recipe of every option at once (docs/scenario-format.md, [training]); the default training runs on Flower's
# simulation engine in the exported app's test below and on SuperNodes in test_flower_deployment.py and test_netns.py,
# each against the local back end's trajectory
RECIPE = {"optimizer": "adamw", "lr": 0.005, "weight_decay": 0.01, "schedule": "cosine", "local_epochs": 2, "clip": 1.0}


def test_flower_simulation_follows_the_local_trajectory(depl_cli, tmp_path):
    plan = make_plan(SWITCH_PLAN, training=RECIPE)  # cluster A: 2 nodes (FedAvg), then B: 1 node, two switches
    plan.save(tmp_path / "plan.json")
    # a short folder: Ray's socket paths under it must stay below 107 characters
    out = Path(tempfile.mkdtemp(prefix="depl-fl-", dir="/tmp"))
    try:
        _check(depl_cli, plan, tmp_path, out)
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


def _check(depl_cli, plan, tmp_path, out):
    import time

    p = depl_cli.start("run", tmp_path / "plan.json", "--seeds", "2", "--backend", "flower", "--out", out)
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
        # the ServerApp kept the seed's final model (pruned to the quarter version) next to the store
        model = depl.load_model(out, seed=seed)
        assert evaluate(model, *run_test_data(job.data))[0] == pytest.approx(flower[seed][-1], abs=1e-6)
    assert sorted(p.name for p in (out / "models" / run["run_id"]).iterdir()) == [
        "seed-0.json", "seed-0.pt", "seed-1.json", "seed-1.pt"]
    # Flower's and Ray's state stay in the run folder
    assert any((out / "ray").iterdir())
    assert (out / "flower").is_dir()


def _processes_naming(text: str) -> dict[int, str]:
    """pid -> command line of every process but this one whose command line or environment names `text`."""
    found = {}
    for proc in Path("/proc").glob("[0-9]*"):
        if int(proc.name) == os.getpid():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            env = (proc / "environ").read_bytes().decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and (text in cmd or text in env):
            found[int(proc.name)] = cmd
    return found


def test_an_exported_app_runs_the_way_the_readme_says_and_leaves_nothing_running(tmp_path):
    """`depl export-app PLAN DIR`, then the command it prints (`depl run-app DIR`, with this environment's
    absolute paths, its bin/ not on PATH): `flwr run` on Flower's simulation engine gives the local back end's
    trajectory in the app's store; no Flower or Ray process is left; Flower's config is in DIR/.flwr, ~/.flwr
    is not written."""
    import shlex
    import signal
    import threading
    import time

    plan = make_plan(SWITCH_PLAN)  # cluster A: 2 nodes, then B: 1 node; 4 epochs, 1 seed
    plan.save(tmp_path / "plan.json")
    out = Path(tempfile.mkdtemp(prefix="depl-ex-", dir="/tmp"))  # Ray's socket paths must stay short
    app, home = out / "app", out / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLWR_", "RAY_"))}
    env.update(HOME=str(home), FLWR_TELEMETRY_ENABLED="0", PATH="/usr/local/bin:/usr/bin:/bin",
               PYTHONPATH=os.pathsep.join(sys.path))  # this checkout's depl, whatever bin/depl was installed from
    seen: dict[int, str] = {}
    done = threading.Event()

    def watch():  # what runs while the app does: the SuperLink must be seen, or the check below is vacuous
        while not done.is_set():
            seen.update(_processes_naming(str(out)))
            time.sleep(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    try:
        r = subprocess.run([sys.executable, "-m", "depl.cli", "export-app", str(tmp_path / "plan.json"), str(app),
                            "--seeds", "1"], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        (line,) = [x.strip() for x in r.stdout.splitlines() if " run-app " in x]
        cmd = shlex.split(line)
        assert Path(cmd[0]).is_absolute() and cmd[-1] == str(app.resolve()), line
        watcher.start()
        t0 = time.monotonic()
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        elapsed = time.monotonic() - t0
        done.set()
        watcher.join()
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        left = _processes_naming(str(out))
        assert left == {}, left  # SuperLink, SuperExec, simulation, Ray: all stopped when the command ends
        assert any("flower-superlink" in c for c in seen.values()), seen
        with Store(app / "runs.sqlite") as s:
            (run,) = s.runs("plan")
            assert run["spec"]["backend"] == "flower"
            flower = s.losses(run["run_id"])
        local = [x.test_loss for x in walk_plan(job_from_plan(plan), 0, LocalFederation())]
        assert flower[0] == pytest.approx(local, rel=1e-5, abs=1e-6)
        # run-app keeps the seed's model next to the app's store, with the plan file's name
        (model,) = depl.workflows.list_models(app)
        assert (model["seed"], model["plan"]["file"], model["version"]) == (0, "plan.json", "quarter")
        assert model["final_test_loss"] == pytest.approx(flower[0][-1], abs=1e-12)
        assert (app / ".flwr" / "config.toml").is_file()  # Flower's config and state in the app folder
        assert not (home / ".flwr").exists(), list(home.rglob("*"))
        assert elapsed < 600
    finally:
        done.set()
        for pid in _processes_naming(str(out)):  # a failed run leaves nothing behind either
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(out, ignore_errors=True)
