"""What is checked once before any training: your own loss on the first batch (a finite floating value per sample
that training can differentiate, never below 0 unless `[training] loss_may_be_negative = true`), and your data
factory called twice for one seed (the same data).  Each refusal is one line naming the field and the function
(exit 2 on the command line); nothing is trained.

A tiny regression of your own (trainkit.write_regression: 4 inputs, an MLP, 160 samples) throughout.
"""

from __future__ import annotations

import pytest

from depl.plan import Plan
from depl.train.task.source import JobError
from depl.train.engine.federation import LocalFederation, job_from_plan, walk_plan
from depl.train.task.source import DataError
from trainkit import write_regression

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not

LOSSES = '''import torch


def squared(out, y):
    return ((out - y) ** 2).reshape(len(y), -1).mean(1)


def detached(out, y):
    return squared(out, y).detach()


def counted(out, y):
    return (squared(out, y) > 1.0).long()


def constant(out, y):
    return torch.ones(len(y), requires_grad=True)


def shifted(out, y):
    return squared(out, y) - 50.0


def infinite(out, y):
    return squared(out, y) / 0.0
'''

NOT_FROM_THE_OUTPUTS = ("its value does not depend on the network's outputs (no gradient flows from it to them: a "
                        "detached tensor, .item(), a new tensor, torch.no_grad()?)")
CASES = {
    "detached": NOT_FROM_THE_OUTPUTS,
    "constant": NOT_FROM_THE_OUTPUTS,
    "counted": "it returned int64 values on a batch of 16; a loss is a floating tensor (e.g. float32) computed from "
               "the network's outputs, which training differentiates",
    "infinite": "it is not finite on the first batch (16 of its 16 samples: NaN or infinite)",
    "shifted": "it is negative on the first batch (-",   # squared errors less 50: about -50 at its lowest
}


def project_with_loss(folder, fn: str, training: str = ""):
    """The regression trained on mylosses:`fn` (the module written before the plan, which pins its digest)."""
    folder.mkdir(parents=True)
    (folder / "mylosses.py").write_text(LOSSES, encoding="utf-8")
    return write_regression(folder, loss=f"mylosses:{fn}", training=training)


@pytest.mark.parametrize("fn", list(CASES))
def test_a_loss_training_cannot_use_is_refused_before_training_naming_it(tmp_path, monkeypatch, fn):
    project = project_with_loss(tmp_path / "p", fn)
    monkeypatch.setenv("DEPL_CODE", str(project))
    with pytest.raises(JobError) as e:
        job_from_plan(Plan.load(project / "plan.json"))
    said = str(e.value)
    assert said.startswith(f"scenario 'tiny-regression': training.loss = 'mylosses:{fn}': {CASES[fn]}"), said
    assert "\n" not in said


def test_a_negative_loss_is_refused_unless_the_scenario_says_it_may_be(depl_cli, tmp_path, monkeypatch):
    project = project_with_loss(tmp_path / "p", "shifted")
    r = depl_cli("run", "plan.json", "--seeds", "1", "--out", "r", "--allow-code", ".", cwd=project)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert "training.loss = 'mylosses:shifted': it is negative on the first batch" in line
    assert line.endswith("if your loss may be negative, say so with [training] loss_may_be_negative = true")
    assert not (project / "r" / "runs.sqlite").exists()   # refused before the run's store is made
    # declared: it trains, and its test losses are what the loss says (below 0)
    allowed = project_with_loss(tmp_path / "q", "shifted", training="loss_may_be_negative = true\n")
    monkeypatch.setenv("DEPL_CODE", str(allowed))
    job = job_from_plan(Plan.load(allowed / "plan.json"))
    assert all(r.test_loss < 0 for r in walk_plan(job, 0, LocalFederation()))
    # the declaration does not change how runs train: the same run as without it
    same = project_with_loss(tmp_path / "s", "squared")
    plain = project_with_loss(tmp_path / "t", "squared", training="loss_may_be_negative = true\n")
    monkeypatch.setenv("DEPL_CODE", f"{same}:{plain}")
    a, b = (job_from_plan(Plan.load(f / "plan.json")) for f in (same, plain))
    # (each project's own folder aside: a run's identity leaves code_dir out, depl.store.drop_code_dirs)
    assert ({k: v for k, v in a.to_json()["options"].items() if k != "code_dir"}
            == {k: v for k, v in b.to_json()["options"].items() if k != "code_dir"})


GLOBAL = '''

def load_global():
    """Noise from torch's global generator: each call its own data."""
    x = torch.randn(160, 4)
    y = x.sum(1, keepdim=True)
    return (x[:120], y[:120]), (x[120:], y[120:])
'''


def test_a_data_factory_that_returns_other_data_when_called_again_is_refused(tmp_path, monkeypatch):
    from depl.scenario import load_scenario
    from depl.train.task.data import data_spec

    project = write_regression(tmp_path / "p")
    (project / "tinyreg.py").write_text((project / "tinyreg.py").read_text() + GLOBAL, encoding="utf-8")
    toml = (project / "column.toml").read_text().replace("tinyreg:load_column", "tinyreg:load_global")
    (project / "global.toml").write_text(toml, encoding="utf-8")
    monkeypatch.setenv("DEPL_CODE", str(project))
    with pytest.raises(DataError) as e:
        data_spec(load_scenario(project / "global.toml"), ["a"])
    assert str(e.value) == (
        "scenario 'tiny-regression': datasets[0].source = 'tinyreg:load_global': it returned different data for the "
        "same call (called twice as load_global(): its train inputs differ) — uses a global random generator? draw "
        "from the seed it is given, or from a fixed one (e.g. torch.Generator().manual_seed(seed), "
        "numpy.random.default_rng(seed))")
    data_spec(load_scenario(project / "column.toml"), ["a"])   # its own generator, seeded: the same data each call
