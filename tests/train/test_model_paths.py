"""A kept model of your own network names its code relative to its models folder (depl.paths): the committed
my-digits run, copied with its code to another folder, loads from the copy; without its code, one line says so."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

import depl
from depl.train.task.models import read

TASK = Path(__file__).resolve().parents[2] / "docs" / "certificate-store" / "search" / "my-digits"
RUN = "plan-990105f2361e"


def copy_task(to: Path, code: bool = True) -> Path:
    """The committed run folder (and its code) as a clone elsewhere would have them."""
    shutil.copytree(TASK / "runs" / "models", to / "runs" / "models")
    if code:
        shutil.copy2(TASK / "mymodel.py", to / "mymodel.py")
    return to


def test_a_committed_model_loads_from_a_copy_of_its_folder_with_the_code_found_beside_it(tmp_path):
    copy = copy_task(tmp_path / "elsewhere" / "my-digits")
    side = json.loads((copy / "runs" / "models" / RUN / "seed-0.json").read_text())
    assert not Path(side["spec"]["code_dir"]).is_absolute()
    model = depl.load_model(copy / "runs", seed=0, allow_code=[copy])
    assert tuple(model(torch.zeros(2, 64)).shape) == (2, 10)
    spec, _ = read({**side, "path": str(copy / "runs" / "models" / RUN / "seed-0.pt")})
    assert spec.code_dir == str(copy.resolve())   # the copy's code, not the folder the run was made in
    with pytest.raises(depl.ModelError, match="outside the folders you allowed"):
        depl.load_model(copy / "runs", seed=0, allow_code=[TASK])   # the original folder is not the one named


def recorded_elsewhere(run: Path, code_dir: str) -> None:
    """Seed 0's model files naming `code_dir` (both files agree, the sidecar's digest is the new file's)."""
    side_file, pt = run / "models" / RUN / "seed-0.json", run / "models" / RUN / "seed-0.pt"
    content = torch.load(pt, weights_only=True)
    content["spec"]["code_dir"] = code_dir
    torch.save(content, pt)
    side = json.loads(side_file.read_text())
    side["spec"]["code_dir"], side["sha256"] = code_dir, hashlib.sha256(pt.read_bytes()).hexdigest()
    side_file.write_text(json.dumps(side, indent=1, sort_keys=True))


def test_a_model_whose_code_folder_is_missing_is_refused_in_one_line(tmp_path, depl_cli):
    copy = copy_task(tmp_path / "my-digits", code=False)
    recorded_elsewhere(copy / "runs", "../../../code")
    side = copy / "runs" / "models" / RUN / "seed-0.json"
    with pytest.raises(depl.ModelError) as e:
        depl.load_model(copy / "runs", seed=0, allow_code=[copy])
    assert str(e.value).startswith(f"{side}: spec.code_dir = '../../../code': no such folder")
    r = depl_cli("export-model", copy / "runs", "--seed", "0", "--out", tmp_path / "m.pt2", "--allow-code", copy)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "spec.code_dir = '../../../code': no such folder" in r.stderr and "Traceback" not in r.stderr
