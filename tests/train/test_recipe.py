"""The loss and the training recipe of `[training]`: loss, optimizer, weight_decay, schedule, local_epochs, clip.

The defaults are today's training, step for step; every option changes training; every back end computes the
same loss; a bad value stops the command with one line; labels that do not fit the loss are named with their
source; the recipe is part of a run's identity.  The regression section of docs/tutorial-own-model.md runs, chain
and stored MSEs, in tests/train/test_regression_chain.py.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from depl.plan import Epoch, Plan, with_figures
from depl.scenario import ScenarioError, load_scenario, parse_scenario
from depl.train.task.custom import CodeRefused
from depl.train.engine.execute import run_id_for
from depl.train.task.source import JobError
from depl.train.engine.federation import (LocalFederation, TrainOptions, derive_seed, evaluate, initial_model,
                                   job_from_plan, local_epoch, node_data, walk_plan)
from depl.train.task.losses import LOSSES, Loss
from depl.train.engine.vectorised import walk_plan_stack
from test_own_code import write_project
from trainkit import make_plan

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not

DEFAULT_PLAN = [("full", "B"), ("full", "B")]  # cluster B: one node


def with_options(job, **changes):
    return replace(job, options=TrainOptions(**{**job.options.model_dump(), **changes}))


def losses(results):
    return [r.test_loss for r in results]


# ---- the defaults are today's training ---------------------------------------------------------------------------

def old_local_epoch(model, x, y, options, seed):
    """The local epoch every run trained before the recipe could be chosen (SGD with momentum, cross-entropy)."""
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=options.lr, momentum=options.momentum)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    for i in range(0, len(y), options.batch_size):
        idx = order[i:i + options.batch_size]
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def test_the_default_recipe_trains_and_tests_bit_for_bit_as_before():
    job = job_from_plan(make_plan(DEFAULT_PLAN))
    assert job.options.loss == "cross_entropy" and job.options.optimizer == "sgd" and job.options.local_epochs == 1
    x, y = node_data(job.data, 1, True, 0)
    seed = derive_seed(3, 2, 1, 0)
    new, old = initial_model(job, 3), initial_model(job, 3)
    local_epoch(new, x, y, job.options, seed, 1, 2)
    old_local_epoch(old, x, y, job.options, seed)
    for (k, a), b in zip(new.state_dict().items(), old.state_dict().values()):
        assert torch.equal(a, b), k
    xt, yt = torch.from_numpy(job.data.load().x_test), torch.from_numpy(job.data.load().y_test)
    loss, acc = evaluate(new, xt, yt)
    with torch.no_grad():
        out = new.eval()(xt)
    assert loss == float(F.cross_entropy(out, yt, reduction="sum")) / len(yt)
    assert acc == int((out.argmax(1) == yt).sum()) / len(yt)


def test_a_default_run_keeps_its_identity_and_another_recipe_has_another():
    job = job_from_plan(make_plan(DEFAULT_PLAN))
    options = job.to_json()["options"]
    assert set(options) == {"lr", "momentum", "batch_size", "iid"}  # as before the recipe's keys existed
    assert "loss" not in job.to_json()["data"]
    ids = {run_id_for(job, "local")}
    for change in ({"optimizer": "adam"}, {"weight_decay": 1e-4}, {"schedule": "cosine"}, {"local_epochs": 2},
                   {"clip": 1.0}, {"schedule": "step", "step_every": 1}, {"loss": "mse"}):
        other = with_options(job, **change)
        assert all(other.to_json()["options"][k] == v for k, v in change.items())
        ids.add(run_id_for(other, "local"))
    assert len(ids) == 8
    adam = with_options(job, optimizer="adam").to_json()["options"]
    assert "momentum" not in adam  # adam has no momentum: a value there would be one of another run


# ---- every option changes training ---------------------------------------------------------------------------------

@pytest.mark.parametrize("change", [
    {"optimizer": "adam", "lr": 0.005}, {"optimizer": "adamw", "lr": 0.005, "weight_decay": 0.1},
    {"weight_decay": 0.05}, {"clip": 0.05}, {"local_epochs": 2}, {"schedule": "cosine"},
    {"schedule": "step", "step_every": 1, "step_gamma": 0.5},
])
def test_every_option_changes_training(change):
    job = job_from_plan(make_plan(DEFAULT_PLAN))
    base = losses(walk_plan(job, 0, LocalFederation()))
    assert base == losses(walk_plan(job, 0, LocalFederation()))
    other = losses(walk_plan(with_options(job, **change), 0, LocalFederation()))
    assert all(np.isfinite(other)) and other != base
    if "schedule" in change:  # the first epoch trains at lr itself: only the later ones differ
        assert other[0] == base[0] and other[1] != base[1]


def test_the_vectorised_stack_trains_the_recipe_as_the_loop_does():
    job = with_options(job_from_plan(make_plan([("full", "A"), ("full", "B")])), optimizer="adam", lr=0.005,
                       weight_decay=0.01, clip=0.5, local_epochs=2, schedule="cosine")
    stacked = walk_plan_stack(job, [0, 1])
    for i, seed in enumerate((0, 1)):
        loop = walk_plan(job, seed, LocalFederation())
        np.testing.assert_allclose([e[i].test_loss for e in stacked], losses(loop), rtol=2e-4)
        np.testing.assert_allclose([e[i].train_loss for e in stacked], [r.train_loss for r in loop], rtol=2e-4)


def test_clipping_bounds_every_seeds_own_gradient_norm():
    from depl.train.engine.vectorised import clip_per_seed

    g = [torch.tensor([[3.0, 4.0], [0.3, 0.4]]), torch.tensor([[[0.0]], [[0.0]]])]
    params = [torch.zeros_like(x, requires_grad=True) for x in g]
    for p, x in zip(params, g):
        p.grad = x.clone()
    clip_per_seed(params, 1.0)
    assert torch.allclose(params[0].grad[0], torch.tensor([0.6, 0.8]), atol=1e-6)  # norm 5 → 1
    assert torch.equal(params[0].grad[1], torch.tensor([0.3, 0.4]))  # norm 0.5: untouched


# ---- one line, exit 2, for every bad value ---------------------------------------------------------------------------

BAD = [
    ('loss = "mse"', 'loss = "hinge"', "training.loss = 'hinge': no such loss; choose one of cross_entropy, mse"),
    ('loss = "mse"', 'loss = "mymodule:"', "training.loss = 'mymodule:': a reference to your own code is MODULE"),
    ('optimizer = "adam"', 'optimizer = "rmsprop"', "training.optimizer = 'rmsprop': Input should be 'sgd', 'adam'"),
    ('optimizer = "adam"', 'optimizer = "adam"\nmomentum = 0.5', "training: momentum applies to optimizer = \"sgd\""),
    ('batch_size = 32', 'batch_size = 32\nweight_decay = -0.1', "training.weight_decay = -0.1: Input should be greater"),
    ('batch_size = 32', 'batch_size = 32\nschedule = "linear"', "training.schedule = 'linear': Input should be"),
    ('batch_size = 32', 'batch_size = 32\nschedule = "step"', "training: schedule = \"step\" needs step_every"),
    ('batch_size = 32', 'batch_size = 32\nstep_every = 5', "training: step_every and step_gamma belong to schedule"),
    ('batch_size = 32', 'batch_size = 32\nschedule = "step"\nstep_every = 5\nstep_gamma = 1.5',
     "training.step_gamma = 1.5: Input should be less than or equal to 1"),
    ('batch_size = 32', 'batch_size = 32\nlocal_epochs = 0', "training.local_epochs = 0: Input should be greater"),
    ('batch_size = 32', 'batch_size = 32\nclip = 0', "training.clip = 0: Input should be greater than 0"),
    ('batch_size = 32', 'batch_size = 32\nclip = true', "training.clip = True: expected a number"),
    ('batch_size = 32', 'batch_size = 32\nloss_may_be_negative = true',
     "training: loss_may_be_negative applies to your own loss (loss = \"MODULE:FUNCTION\"); loss = \"mse\" is never "
     "negative"),
    ('batch_size = 32', 'batch_size = 32\niid = false\ndirichlet_alpha = 0.5',
     "training: dirichlet_alpha splits every class over the nodes; loss = \"mse\" trains on real-valued targets"),
]


@pytest.fixture
def project(tmp_path, monkeypatch):
    folder = write_project(tmp_path / "project")
    monkeypatch.setenv("DEPL_CODE", str(folder))
    return folder


def variant(project: Path, old: str, new: str, name: str = "bad.toml") -> Path:
    text = (project / "my-diabetes.toml").read_text(encoding="utf-8")
    assert old in text
    p = project / name
    p.write_text(text.replace(old, new, 1), encoding="utf-8")
    return p


@pytest.mark.parametrize("old, new, why", BAD)
def test_a_bad_recipe_is_refused_with_one_line(project, old, new, why):
    with pytest.raises(ScenarioError) as e:
        load_scenario(variant(project, old, new))
    assert why in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("old, new, why", [BAD[0], BAD[3], BAD[6], BAD[10]])
def test_a_bad_recipe_exits_2_with_one_line(depl_cli, project, old, new, why):
    r = depl_cli("plan", variant(project, old, new), cwd=project)
    assert r.returncode == 2 and why in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.parametrize("old, new, why", [
    ('loss = "mse"\n', "", "datasets[0].source = 'myregression:load_data': its train labels are not whole numbers; "
                           "loss 'cross_entropy' trains a classifier"),
    ('loss = "mse"', 'loss = "bce_with_logits"', "datasets[0].source = 'myregression:load_data': its train labels "
                                                  "lie in ["),
    ('source = "myregression:load_data"\nshare = [0.0, 0.5]', 'source = "digits"\nshare = [0.0, 0.5]',
     "datasets[0].source = 'digits' holds class labels; [training] loss = 'mse' trains on real-valued targets"),
])
def test_labels_that_do_not_fit_the_loss_are_named_with_their_source(depl_cli, project, tmp_path, old, new, why):
    bad = variant(project, old, new)
    if "digits" in new:
        bad.write_text(bad.read_text().replace('source = "myregression:load_data"', 'source = "digits"'))
    r = depl_cli("profile", bad, "--epochs", "1", "--seeds", "1", "--out", tmp_path / "o", cwd=project)
    assert r.returncode == 2 and why in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "o" / "runs.sqlite").exists() or "epochs" not in r.stdout


# ---- a regression: every back end's loss, the stored test loss, your own loss -----------------------------------------

def regression_plan(project: Path, schedule=(("full", "edge"), ("full", "edge")), name="my-diabetes.toml") -> Plan:
    s = load_scenario(project / name)
    epochs = [Epoch(k + 1, m, c, 1.0) for k, (m, c) in enumerate(schedule)]
    return with_figures(Plan("hand", s.name, True, ["a", "b"], epochs, 0.0, 0.0, 0.0, 0.0, 0.0), s)


def test_a_regression_trains_on_real_valued_targets_alike_in_the_loop_and_the_stack(project):
    variant(project, 'data_draw = "run"\n', "", "fixed.toml")  # every run on one split: seeds stack
    job = job_from_plan(regression_plan(project, name="fixed.toml"))
    assert job.data.load().y_train.dtype == np.float32 and job.options.criterion == Loss("mse")
    loop = walk_plan(job, 0, LocalFederation())
    assert [r.test_accuracy for r in loop] == [None, None] and loop[1].test_loss < loop[0].test_loss < 1.5
    stacked = walk_plan_stack(job, [0, 1])
    np.testing.assert_allclose([e[0].test_loss for e in stacked], losses(loop), rtol=2e-4)
    assert stacked[0][1].test_accuracy is None


def test_your_own_per_sample_loss_is_imported_pinned_and_used(project):
    (project / "mylosses.py").write_text(
        "def squared(out, y):\n    return ((out - y) ** 2).reshape(len(y), -1).mean(1)\n\n"
        "def summed(out, y):\n    return ((out - y) ** 2).sum()\n", encoding="utf-8")
    own = variant(project, 'loss = "mse"', 'loss = "mylosses:squared"', "own.toml")
    plan = regression_plan(project, name="own.toml")
    assert "mylosses.py" in (plan.scenario_object().code_hashes or {})
    mine = walk_plan(job_from_plan(plan), 0, LocalFederation())
    mse = walk_plan(job_from_plan(regression_plan(project)), 0, LocalFederation())
    np.testing.assert_allclose(losses(mine), losses(mse), rtol=1e-5)
    assert [r.test_accuracy for r in mine] == [None, None]
    # the plan runs the very file it was made with
    (project / "mylosses.py").write_text((project / "mylosses.py").read_text() + "\n# changed\n", encoding="utf-8")
    with pytest.raises(CodeRefused, match=r"training.loss = 'mylosses:squared': mylosses.py is not the file"):
        job_from_plan(plan)
    own.write_text(own.read_text().replace("mylosses:squared", "mylosses:summed"), encoding="utf-8")
    with pytest.raises(JobError, match=r"scenario 'my-diabetes': training.loss = 'mylosses:summed': it returned \(\) on "
                                       r"a batch of 32; a loss returns one value per sample"):
        job_from_plan(regression_plan(project, name="own.toml"))


def test_your_own_loss_on_class_labels_trains_as_cross_entropy_does_in_the_loop_and_the_stack(project):
    (project / "mylosses.py").write_text("import torch.nn.functional as F\n\n\ndef ce(out, y):\n"
                                         "    return F.cross_entropy(out, y, reduction='none')\n", encoding="utf-8")
    text = (project / "my-digits.toml").read_text(encoding="utf-8")
    (project / "own-ce.toml").write_text(text.replace("[training]\n", "[training]\nloss = \"mylosses:ce\"\n"),
                                         encoding="utf-8")
    own = job_from_plan(regression_plan(project, name="own-ce.toml"))
    base = job_from_plan(regression_plan(project, name="my-digits.toml"))
    assert own.data.load().y_train.dtype == np.int64 and own.options.code_dir == str(project.resolve())
    mine, theirs = walk_plan(own, 0, LocalFederation()), walk_plan(base, 0, LocalFederation())
    np.testing.assert_allclose(losses(mine), losses(theirs), rtol=1e-5)
    assert mine[0].test_accuracy is None and theirs[0].test_accuracy is not None  # your loss: no accuracy assumed
    np.testing.assert_allclose([e[0].test_loss for e in walk_plan_stack(own, [0])], losses(mine), rtol=2e-4)


def test_the_scenario_knows_the_losses_depl_computes():
    from depl import runspec
    from depl.scenario import BUILTIN_LOSSES, training

    assert set(BUILTIN_LOSSES) == set(LOSSES)
    assert runspec.RECIPE_DEFAULTS == training.RECIPE_DEFAULTS
    assert {k: v for k, v in TrainOptions().model_dump().items() if k in training.RECIPE_DEFAULTS} == training.RECIPE_DEFAULTS
    assert parse_scenario({**_tiny(), "training": {"loss": "l1"}}).training.loss == "l1"


def _tiny() -> dict:
    from trainkit import scenario_dict

    return scenario_dict()
