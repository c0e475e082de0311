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


def _check(plan, tmp_path, out):
    r = subprocess.run([sys.executable, "-c", "from depl.cli import main; main()", "run", str(tmp_path / "plan.json"),
                        "--seeds", "2", "--backend", "flower", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
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
