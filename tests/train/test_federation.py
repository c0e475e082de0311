import numpy as np
import pytest
import torch

from depl.train.task.source import JobError
from depl.train.engine.federation import (LocalFederation, TrainOptions, derive_seed, evaluate, fedavg,
                                   initial_model, job_from_plan, local_epoch, node_data, state_bytes, walk_plan)
from trainkit import SWITCH_PLAN, make_plan


def losses(results):
    return [r.test_loss for r in results]


def test_same_seed_same_trajectory_other_seed_other_trajectory():
    job = job_from_plan(make_plan(SWITCH_PLAN))
    a = walk_plan(job, 0, LocalFederation())
    b = walk_plan(job, 0, LocalFederation())
    c = walk_plan(job, 1, LocalFederation())
    assert losses(a) == losses(b)
    assert losses(a) != losses(c)
    assert [r.switched for r in a] == [False, False, True, True]
    assert [r.model for r in a] == ["full", "full", "half", "quarter"]


def test_training_lowers_the_test_loss():
    job = job_from_plan(make_plan([("full", "A")] * 4))
    res = walk_plan(job, 0, LocalFederation())
    assert res[-1].test_loss < res[0].test_loss < np.log(10) + 0.05
    assert res[-1].test_accuracy > 0.2  # chance is 0.1


def test_fedavg_is_the_sample_weighted_mean():
    a = {"w": torch.tensor([0.0, 2.0]), "n": torch.tensor(3)}
    b = {"w": torch.tensor([4.0, 6.0]), "n": torch.tensor(5)}
    avg = fedavg([a, b], [1.0, 3.0])
    assert torch.allclose(avg["w"], torch.tensor([3.0, 5.0]))
    assert int(avg["n"]) == 3  # integer buffers are not averaged


def test_a_round_on_two_nodes_is_fedavg_of_their_local_epochs():
    job = job_from_plan(make_plan([("full", "A")]))  # cluster A has 2 nodes
    start = initial_model(job, 7)
    model = initial_model(job, 7)
    LocalFederation()(model, job, "A", 1, 7)
    states, weights = [], []
    for node in range(2):
        m = initial_model(job, 7)
        x, y = node_data(job.data, 2, True, node)
        local_epoch(m, x, y, job.options, derive_seed(7, 2, 1, node))
        states.append(m.state_dict())
        weights.append(len(y))
    expected = fedavg(states, weights)
    for k, v in model.state_dict().items():
        assert torch.allclose(v, expected[k], atol=1e-6)
    assert not torch.equal(model.state_dict()["head.weight"], start.state_dict()["head.weight"])


def test_node_shares_split_the_selected_data():
    job = job_from_plan(make_plan([("full", "A")]))
    (x0, y0), (x1, y1) = node_data(job.data, 2, True, 0), node_data(job.data, 2, True, 1)
    assert len(y0) == len(y1) == 1000
    assert not any(torch.equal(x0[0], r) for r in x1[:50])


def test_a_run_resumed_from_a_checkpoint_continues_exactly():
    job = job_from_plan(make_plan(SWITCH_PLAN))
    full = walk_plan(job, 3, LocalFederation())
    saved = {}

    def keep(r, model):
        saved[r.epoch] = state_bytes(model)

    first = walk_plan(job, 3, LocalFederation(), on_epoch=keep)
    rest = walk_plan(job, 3, LocalFederation(), start=(3, saved[3]))  # epoch 3 switched to "half"
    assert [r.epoch for r in rest] == [4]
    assert losses(first[:3]) + losses(rest) == losses(full)


def test_a_switch_cannot_grow_a_model_back():
    from depl.plan import PlanError

    # the scenario allows no such switch (pruning goes one way): refused before training
    with pytest.raises(PlanError, match="no switch half -> full"):
        job_from_plan(make_plan([("half", "A"), ("full", "A")]))


def test_a_model_without_train_table_is_refused():
    plan = make_plan([("full", "A")])
    del plan.scenario_spec["models"][0]["train"]
    with pytest.raises(JobError, match="no `train` table"):
        job_from_plan(plan)


def test_evaluate_reports_cross_entropy_and_accuracy():
    job = job_from_plan(make_plan([("full", "A")]))
    model = initial_model(job, 0)
    x, y = node_data(job.data, 1, True, 0)
    loss, acc = evaluate(model, x[:100], y[:100])
    expected = torch.nn.functional.cross_entropy(model(x[:100]), y[:100]).item()
    assert loss == pytest.approx(expected, rel=1e-5)
    assert 0.0 <= acc <= 1.0
