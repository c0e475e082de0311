"""The vectorised multi-seed path trains each seed as the per-seed loop does."""

import numpy as np
import pytest
from scipy import stats

from depl.train.engine.federation import LocalFederation, job_from_plan, walk_plan
from depl.train.engine.vectorised import walk_plan_stack
from trainkit import SWITCH_PLAN, make_plan


def test_every_seed_follows_its_loop_trajectory_through_fedavg_and_switches():
    job = job_from_plan(make_plan(SWITCH_PLAN))  # 2-node FedAvg on A, then switches to half and quarter on B
    seeds = [0, 11]
    stacked = walk_plan_stack(job, seeds)
    for i, seed in enumerate(seeds):
        loop = walk_plan(job, seed, LocalFederation())
        first = stacked[0][i]
        assert first.test_loss == pytest.approx(loop[0].test_loss, rel=1e-5, abs=1e-6)
        assert first.train_loss == pytest.approx(loop[0].train_loss, rel=1e-5, abs=1e-6)
        assert first.test_accuracy == loop[0].test_accuracy
        for a, b in zip(loop, (epoch[i] for epoch in stacked)):
            assert (a.epoch, a.model, a.cluster, a.switched) == (b.epoch, b.model, b.cluster, b.switched)
            assert b.test_loss == pytest.approx(a.test_loss, rel=1e-4)
    # different seeds, different trajectories
    assert len({r.test_loss for r in stacked[-1]}) == len(seeds)


def test_the_stack_is_deterministic_for_the_same_seeds():
    job = job_from_plan(make_plan(SWITCH_PLAN[:3]))
    a = walk_plan_stack(job, [3, 4])
    b = walk_plan_stack(job, [3, 4])
    assert [[r.test_loss for r in e] for e in a] == [[r.test_loss for r in e] for e in b]


def test_a_stack_resumed_from_checkpoints_continues_exactly():
    from depl.train.engine.federation import state_bytes

    job = job_from_plan(make_plan(SWITCH_PLAN))
    saved = {}

    def keep(seeds, results, models):
        saved[results[0].epoch] = [state_bytes(m) for m in models()]

    full = walk_plan_stack(job, [1, 2], on_epochs=keep)
    rest = walk_plan_stack(job, [1, 2], start=(3, saved[3]))  # epoch 3 switched to "half"
    assert [[r.test_loss for r in e] for e in rest] == [[r.test_loss for r in e] for e in full[3:]]


def test_over_100_seeds_the_final_loss_has_the_loops_distribution():
    # tiny: 400 samples on one node, a 4-channel net, 2 epochs
    job = job_from_plan(make_plan([("full", "B"), ("full", "B")], width=4, share_to=0.1))
    seeds = list(range(100))
    vec = np.array([r.test_loss for r in walk_plan_stack(job, seeds)[-1]])
    loop = np.array([walk_plan(job, s, LocalFederation())[-1].test_loss for s in seeds])
    assert vec.std() > 1e-3  # the seeds do spread
    assert stats.ks_2samp(vec, loop).pvalue > 0.05


def _drawn(plan):
    d = dict(plan.scenario_spec)
    d["training"] = {**d["training"], "data_draw": "run"}
    plan.scenario_spec = d
    return plan


@pytest.mark.slow  # trains for real
def test_seeds_that_draw_their_own_data_stack_and_follow_their_loop_trajectories():
    """Each seed of a stack trains and is tested on its own draw (vectorised.StackData), through FedAvg over two
    nodes and the switches, as the per-seed loop trains it on that draw: to float rounding (rel 1e-4)."""
    job = job_from_plan(_drawn(make_plan(SWITCH_PLAN)))
    assert not job.stackable and job.stacks
    seeds = [0, 11, 5]
    stacked = walk_plan_stack(job, seeds)
    for i, seed in enumerate(seeds):
        loop = walk_plan(job, seed, LocalFederation())
        assert stacked[0][i].test_accuracy == loop[0].test_accuracy
        for a, b in zip(loop, (epoch[i] for epoch in stacked), strict=True):
            assert (a.epoch, a.model, a.cluster, a.switched) == (b.epoch, b.model, b.cluster, b.switched)
            assert b.test_loss == pytest.approx(a.test_loss, rel=1e-4)
            assert b.train_loss == pytest.approx(a.train_loss, rel=1e-4)
    # the same seed on the shared data trains otherwise: the draw is what the stack followed
    fixed = walk_plan_stack(job_from_plan(make_plan(SWITCH_PLAN)), seeds)
    assert fixed[0][0].test_loss != pytest.approx(stacked[0][0].test_loss, rel=1e-4)


def test_a_seed_leaving_a_drawn_stack_leaves_its_data_with_it():
    job = job_from_plan(_drawn(make_plan(SWITCH_PLAN[:3])))
    gone = walk_plan_stack(job, [4, 7, 9], on_epochs=lambda seeds, results, models: [7] if 7 in seeds else ())
    alone = walk_plan_stack(job, [4, 9])
    assert [len(e) for e in gone] == [3, 2, 2]
    for e_gone, e_alone in zip(gone, alone, strict=True):
        kept = [r for r in e_gone if len(e_gone) == 2] or [e_gone[0], e_gone[2]]
        assert [r.test_loss for r in kept] == pytest.approx([r.test_loss for r in e_alone], rel=1e-5)


def test_draws_of_different_sizes_do_not_stack():
    from dataclasses import replace

    job = job_from_plan(_drawn(make_plan(SWITCH_PLAN[:2])))
    dirichlet = replace(job, data=replace(job.data, alpha=0.3), options=job.options.model_copy(update={"iid": False}))
    assert not dirichlet.stacks
    with pytest.raises(ValueError, match="one by one"):
        walk_plan_stack(dirichlet, [0, 1])
