"""A kept model is checked when it is read: against the network its run recorded (layer sizes, weight shapes and
dtypes), for finite weights, and for a sidecar that names its own file.  A model that fails is `depl.ModelError`
from `depl.load_model` (a BadInput) and one line, exit 2, from `depl export-model` — never a traceback, never an
export.

One tiny regression of your own (4 inputs, an MLP, 2 epochs, 1 seed) trained once; each test changes a copy of its
model file and writes the SHA-256 of the changed file into the sidecar, as someone who meant it would.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

import depl
from trainkit import write_regression

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not


@pytest.fixture(scope="module")
def kept(depl_cli, tmp_path_factory):
    """The regression's project folder, with its run folder r/ (one seed's model kept)."""
    project = write_regression(tmp_path_factory.mktemp("kept") / "project", "column")
    r = depl_cli("run", "plan.json", "--seeds", "1", "--out", "r", "--allow-code", ".", "--workers", "1", cwd=project)
    assert r.returncode == 0, r.stderr
    return project


def changed(kept, to, content=None, sidecar=None):
    """A copy of the project (its code, and its run folder whose seed-0 model file `content(c)` changed (c: the
    file's dict) and whose sidecar `sidecar(d)` changed, its SHA-256 that of the changed file) in `to`, whose code
    the models name (relative to their folder): the copy's run folder."""
    shutil.copytree(kept, to, ignore=lambda folder, names: ["r"] if Path(folder) == kept else [], dirs_exist_ok=True)
    run = to / "r"
    shutil.copytree(kept / "r" / "models", run / "models")
    (side,) = run.rglob("seed-0.json")
    pt = side.with_suffix(".pt")
    if content is not None:
        c = torch.load(pt, weights_only=True)
        content(c)
        torch.save(c, pt)
    d = json.loads(side.read_text())
    d["sha256"] = hashlib.sha256(pt.read_bytes()).hexdigest()
    if sidecar is not None:
        sidecar(d)
    side.write_text(json.dumps(d))
    return run


def one_line(r, want: str) -> str:
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert want in r.stderr, r.stderr
    return r.stderr


def _set(key, value):
    def change(c):
        c["state_dict"][key] = value(c["state_dict"][key])
    return change


def _nan(t):
    t = t.clone()
    t[0, 0] = float("nan")
    return t


def _claims_a_million_outputs(c):
    c["layers"]["2"]["out_features"] = 10 ** 6


# what is changed in the model file, and what the refusal says after the file's name
CASES = {
    "layer sizes": (_claims_a_million_outputs,
                    "layer '2': the file records a Linear (in_features 8, out_features 1000000); the network the run "
                    "recorded (tinyreg:make_net) has a Linear (in_features 8, out_features 1)"),
    "nan": (_set("0.weight", _nan), "weight '0.weight' holds 1 NaN value (of 32)"),
    "inf": (_set("2.bias", lambda t: torch.full_like(t, float("inf"))),
            "weight '2.bias' holds 1 infinite value (of 1)"),
    "shape": (_set("0.weight", lambda t: torch.zeros(9, 4)),
              "weight '0.weight' has shape (9, 4); the network the run recorded (tinyreg:make_net) has (8, 4) there"),
    "dtype": (_set("0.weight", lambda t: t.double()), "weight '0.weight' is float64; the network the run recorded "
                                                       "(tinyreg:make_net) has float32 there"),
    "integers": (_set("0.weight", lambda t: t.long()), "weight '0.weight' is int64"),
    "extra weight": (lambda c: c["state_dict"].update({"5.weight": torch.zeros(3)}),
                     "weight '5.weight': the network the run recorded (tinyreg:make_net) has no such weight"),
    "missing weight": (lambda c: c["state_dict"].pop("0.bias"),
                       "weight '0.bias' of the network the run recorded (tinyreg:make_net) is missing"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_model_file_that_is_not_its_runs_network_or_not_finite_is_a_model_error(kept, tmp_path, case):
    content, why = CASES[case]
    run = changed(kept, tmp_path, content)
    (pt,) = run.rglob("seed-0.pt")
    with pytest.raises(depl.ModelError) as e:
        depl.load_model(run, seed=0, allow_code=[run.parent])
    assert str(e.value).startswith(f"{pt}: {why}"), str(e.value)
    assert "\n" not in str(e.value)


def test_the_model_as_kept_loads_and_a_model_error_is_a_bad_input(kept):
    from depl.workflows import BadInput, ModelError

    assert ModelError is depl.ModelError and issubclass(ModelError, BadInput)
    model = depl.load_model(kept / "r", seed=0, allow_code=[kept])
    assert tuple(model(torch.zeros(3, 4)).shape) == (3, 1)
    with pytest.raises(depl.ModelError, match="no model of seed 5"):
        depl.load_model(kept / "r", seed=5, allow_code=[kept])


def test_export_model_refuses_them_in_one_line_and_writes_nothing(depl_cli, kept, tmp_path):
    run = changed(kept, tmp_path / "nan", CASES["nan"][0])
    r = depl_cli("export-model", run, "--seed", "0", "--out", tmp_path / "m.pt2", "--allow-code", run.parent, "--json")
    one_line(r, CASES["nan"][1])
    assert json.loads(r.stdout)["exit_code"] == 2
    run = changed(kept, tmp_path / "out", sidecar=lambda d: d.update(file="../../../plan.json"))
    r = depl_cli("export-model", run, "--seed", "0", "--out", tmp_path / "m.pt2", "--allow-code", run.parent)
    one_line(r, "file = '../../../plan.json': a model's sidecar names the model file beside it, 'seed-0.pt'")
    assert not (tmp_path / "m.pt2").exists()


def test_a_sidecar_naming_another_file_than_its_own_is_refused(kept, tmp_path):
    """A sidecar whose `file` leads out of the models folder (to the plan, three folders up) or to another seed's;
    `depl runs models` reads the sidecars and says the same line."""
    from depl.workflows import BadInput, list_models

    run = changed(kept, tmp_path, sidecar=lambda d: d.update(file="../../../plan.json"))
    (side,) = run.rglob("seed-0.json")
    why = f"{side}: file = '../../../plan.json': a model's sidecar names the model file beside it, 'seed-0.pt'"
    with pytest.raises(depl.ModelError) as e:
        depl.load_model(run, seed=0, allow_code=[run.parent])
    assert str(e.value) == why
    with pytest.raises(BadInput) as e:
        list_models(run)
    assert str(e.value) == why
    side.write_text(side.read_text().replace('"../../../plan.json"', '"seed-1.pt"'))
    with pytest.raises(depl.ModelError, match="file = 'seed-1.pt': a model's sidecar names the model file beside it"):
        depl.load_model(run, seed=0, allow_code=[run.parent])
    side.write_text(side.read_text().replace('"seed": 0', '"seed": "0"'))
    with pytest.raises(depl.ModelError, match=r"seed = '0': expected a seed, a whole number"):
        depl.load_model(run, seed=0, allow_code=[run.parent])


@pytest.mark.parametrize("key, value, seed", [("version", "half", 0), ("seed", 7, 7), ("run", "plan-000000000000", 0)])
def test_a_sidecar_that_names_another_seed_version_or_run_than_its_model_file_is_refused(kept, tmp_path, key, value,
                                                                                         seed):
    """The model file records its run, seed and version too: a sidecar edited to say another (seed 0's model
    exported as seed 7's) is a model error, not an export of the wrong model."""
    run = changed(kept, tmp_path, sidecar=lambda d: d.update({key: value}))
    (pt,) = run.rglob("seed-0.pt")
    with pytest.raises(depl.ModelError) as e:
        depl.load_model(run, seed=seed, allow_code=[run.parent])
    assert str(e.value).startswith(f"{pt}: the model file is of {key} ") and f"its sidecar says {value!r}" in str(e.value)


def test_a_sidecar_whose_model_file_was_removed_is_not_listed_as_a_kept_model(kept, tmp_path):
    from depl.workflows import BadInput, list_models

    run = changed(kept, tmp_path)
    (pt,) = run.rglob("seed-0.pt")
    pt.unlink()
    with pytest.raises(BadInput, match=r"seed-0.json: its model file seed-0.pt is missing"):
        list_models(run)
    with pytest.raises(depl.ModelError, match=r"seed-0.json: its model file seed-0.pt is missing"):
        depl.load_model(run, seed=0, allow_code=[run.parent])


def test_load_model_says_what_its_arguments_take(kept):
    """seed '0' was looked up and reported 'no model of seed 0 (seeds kept: 0, …)'; allow_code=True a bare
    TypeError."""
    import numpy as np

    for kw, why in ((dict(seed="0"), "seed = '0': a whole number (int), e.g. seed=0"),
                    (dict(seed=True), "seed = True: a whole number"),
                    (dict(seed=0, allow_code=True), "allow_code = True: a list of the folders")):
        with pytest.raises(depl.ModelError, match=why.replace("(", r"\(").replace(")", r"\)")):
            depl.load_model(kept / "r", **({"allow_code": [kept]} | kw))
    assert depl.load_model(kept / "r", seed=np.int64(0), allow_code=str(kept)) is not None   # numpy's int, a str
