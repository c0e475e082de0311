"""`--device cpu|cuda|auto` on every training command."""

import torch

from depl.store import Store
from trainkit import make_plan
import pytest

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not


def test_auto_is_cpu_without_a_gpu_and_cuda_is_refused_unless_there_is_one(depl_cli, tmp_path):
    make_plan([("half", "B")]).save(tmp_path / "plan.json")
    out = str(tmp_path / "o")
    r = depl_cli("run", str(tmp_path / "plan.json"), "--out", out, "--device", "auto")
    assert r.returncode == 0, r.stderr
    with Store(tmp_path / "o" / "runs.sqlite") as s:
        (run,) = s.runs("plan")
        assert ("device" in run["spec"]["job"]["options"]) == torch.cuda.is_available()
    r = depl_cli("run", str(tmp_path / "plan.json"), "--out", out, "--device", "cpu")
    if not torch.cuda.is_available():  # auto was cpu: the same run, found done
        assert r.returncode == 0 and "resuming (1 epochs done)" in r.stdout.replace("\n", " ")
    for cmd in (["run", str(tmp_path / "plan.json")], ["profile", "mnist1d-small"],
                ["validate", "mnist1d-small", str(tmp_path / "plan.json")]):
        r = depl_cli(*cmd, "--out", out, "--device", "cuda")
        if torch.cuda.is_available():
            continue  # nothing to refuse on a machine with a GPU
        assert r.returncode == 2 and "--device cuda" in r.stderr and "no CUDA device" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    r = depl_cli("profile", "mnist1d-small", "--out", out, "--device", "tpu")
    assert r.returncode == 2 and "--device 'tpu': choose cpu, cuda or auto" in r.stderr
