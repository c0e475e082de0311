"""A regression of your own whose data factory gives targets of shape (N, 1) — what `nn.MSELoss` expects beside an
(N, 1) output —, (N,) or (N, 3): the automatic choice of how seeds train measures on them, stacks train and test on
them as the per-seed loop does, and `depl profile` trains them with the automatic choice on."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from depl.plan import Plan
from depl.store import Store
from depl.train.engine.autochoice import MAX_STEPS, _first_epoch_data, probe
from depl.train.engine.federation import LocalFederation, job_from_plan, node_data, walk_plan
from depl.train.engine.vectorised import walk_plan_stack
from trainkit import write_regression

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not


def regression_job(folder, targets: str, monkeypatch):
    monkeypatch.setenv("DEPL_CODE", str(folder))   # the user allows their project's code
    return job_from_plan(Plan.load(write_regression(folder, targets) / "plan.json"))


@pytest.mark.parametrize("targets, shape", [("column", (1,)), ("flat", ()), ("wide", (3,))])
def test_the_automatic_choices_data_repeats_targets_of_any_shape_along_their_samples_only(tmp_path, monkeypatch,
                                                                                           targets, shape):
    job = regression_job(tmp_path / targets, targets, monkeypatch)
    x0, y0 = node_data(job.data, 1, job.options.iid, 0)
    assert tuple(y0.shape) == (120, *shape)
    x, y, x_test, y_test, per_epoch = _first_epoch_data(job)
    need = (MAX_STEPS + 1) * job.options.batch_size   # more than the node's 120 samples: they come again
    assert tuple(x.shape) == (need, 4) and tuple(y.shape) == (need, *shape)
    rows = torch.arange(need) % len(y0)   # sample i is sample i mod 120, its target with it
    assert torch.equal(x, x0[rows]) and torch.equal(y, y0[rows])
    assert tuple(y_test.shape) == (40, *shape) and per_epoch == math.ceil(120 / job.options.batch_size)
    # the per-seed loop the choice probes trains and tests on them: a finite estimate of the job
    est = probe(job, 2, data=(x, y, x_test, y_test, per_epoch))
    assert math.isfinite(est.seconds) and est.seconds > 0 and est.rate > 0


@pytest.mark.parametrize("targets", ["column", "wide"])
def test_a_stack_trains_and_tests_two_dimensional_targets_as_the_loop_does(tmp_path, monkeypatch, targets):
    job = regression_job(tmp_path / targets, targets, monkeypatch)
    stacked = walk_plan_stack(job, [0, 1])
    for i, seed in enumerate((0, 1)):
        loop = walk_plan(job, seed, LocalFederation())
        assert [r.test_accuracy for r in loop] == [None, None] and all(math.isfinite(r.test_loss) for r in loop)
        np.testing.assert_allclose([e[i].test_loss for e in stacked], [r.test_loss for r in loop], rtol=2e-4)
        np.testing.assert_allclose([e[i].train_loss for e in stacked], [r.train_loss for r in loop], rtol=2e-4)


def test_depl_profile_with_the_automatic_choice_on_trains_targets_of_shape_n_1(depl_cli, tmp_path):
    project = write_regression(tmp_path / "project", "column")
    auto = {"DEPL_AUTOCHOICE": "1", "DEPL_CACHE": str(tmp_path / "cache")}   # on, with a cache of this test's own
    r = depl_cli("profile", "column.toml", "--epochs", "2", "--seeds", "3", "--out", "prof", "--allow-code", ".",
                 cwd=project, env=auto)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    said = r.stdout.replace("\n", " ")
    assert "seeds: the per-seed loop × 1 worker × 1 thread — nothing measured: the job ≈ " in said   # decided
    with Store(project / "prof" / "runs.sqlite", readonly=True) as st:
        (run,) = st.runs("profile")
        trajectories = [st.trajectory(run["run_id"], s) for s in range(3)]
    assert [len(t) for t in trajectories] == [2, 2, 2]
    assert all(math.isfinite(e.test_loss) and e.test_accuracy is None for t in trajectories for e in t)



def test_a_network_giving_one_prediction_per_sample_as_n_trains_loads_and_exports(depl_cli, tmp_path):
    """Targets of shape (N,) beside a network whose output is (N,) (its last layer flattened), as the tutorial allows:
    trained, its kept model loads and exports (they were refused after training: 'outputs of shape (1,), expected
    (1, 1)'), and predicts one number per sample, as the export does."""
    project = write_regression(tmp_path / "project", "flat", net="make_flat_net")
    ran, exported = depl_cli.each([["run", "plan.json", "--seeds", "1", "--out", "runs", "--allow-code", "."],
                                   ["export-model", "runs", "--seed", "0", "--out", "m.pt2", "--allow-code", "."]],
                                  cwd=project)
    assert ran.returncode == 0 and exported.returncode == 0, ran.stderr + exported.stderr
    import depl

    model = depl.load_model(project / "runs", seed=0, allow_code=[project])
    x = torch.randn(3, 4)
    with torch.no_grad():
        y = model(x)
    assert tuple(y.shape) == (3,)
    torch.testing.assert_close(torch.export.load(project / "m.pt2").module()(x), y)


def test_a_network_torch_export_cannot_trace_is_one_line_without_torchs_graph_dump(depl_cli, tmp_path):
    """A branch on the data's values: export-model says so in one line (torch printed 20 lines of its graph and
    logs before it, and ONNX's line was cut at its own "Next steps:")."""
    project = write_regression(tmp_path / "project", "column", net="make_branchy_net")
    ran, exported = depl_cli.each([["run", "plan.json", "--seeds", "1", "--out", "runs", "--allow-code", "."],
                                   ["export-model", "runs", "--seed", "0", "--out", "m.pt2", "--allow-code", "."]],
                                  cwd=project)
    assert ran.returncode == 0, ran.stderr
    assert exported.returncode == 2 and len(exported.stderr.strip().splitlines()) == 1, exported.stderr
    assert "torch-export cannot export this network: GuardOnDataDependentSymNode: " in exported.stderr
    assert not exported.stdout.strip() and not (project / "m.pt2").exists()
