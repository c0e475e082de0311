"""The executor walks a plan that may be replaced between epochs (the closed-loop seam)."""

import pytest

from depl.state import RunState
from depl.train.task.source import JobError
from depl.train.engine.federation import LocalFederation, job_from_plan, walk_plan
from trainkit import SWITCH_PLAN, make_plan


def losses(results):
    return [r.test_loss for r in results]


def test_a_decide_hook_that_keeps_the_plan_changes_nothing_and_sees_where_the_run_stands():
    job = job_from_plan(make_plan(SWITCH_PLAN))
    seen: list[RunState] = []

    def keep(state, results):
        seen.append(state)
        return None

    plain = walk_plan(job, 0, LocalFederation())
    watched = walk_plan(job, 0, LocalFederation(), decide=keep)
    assert losses(watched) == losses(plain)  # bit for bit
    assert [s.epoch for s in seen] == [1, 2, 3, 4]
    assert [s.model for s in seen] == ["full", "full", "half", "quarter"]
    assert seen[-1].losses == tuple(losses(plain))
    assert seen[-1].time_spent == pytest.approx(sum(r.seconds for r in watched))


def test_a_replaced_rest_is_trained_exactly_as_if_it_had_been_the_plan():
    """Every random choice derives from (seed, epoch, node): re-planning after epoch 2
    to 'half on B' twice gives the trajectory of the plan that said so from the start."""
    job = job_from_plan(make_plan(SWITCH_PLAN))
    direct = walk_plan(job_from_plan(make_plan([("full", "A"), ("full", "A"), ("half", "B"), ("half", "B")])),
                       3, LocalFederation())

    def replan(state, results):
        return [(3, "half", "B"), (4, "half", "B")] if state.epoch == 2 else None

    walked = walk_plan(job, 3, LocalFederation(), decide=replan)
    assert [(r.epoch, r.model, r.cluster) for r in walked] == [(1, "full", "A"), (2, "full", "A"),
                                                                (3, "half", "B"), (4, "half", "B")]
    assert losses(walked) == losses(direct)


def test_an_empty_rest_stops_the_run_and_a_rest_the_job_cannot_train_is_refused():
    job = job_from_plan(make_plan(SWITCH_PLAN))
    stopped = walk_plan(job, 0, LocalFederation(), decide=lambda st, res: [] if st.epoch == 1 else None)
    assert len(stopped) == 1
    with pytest.raises(JobError, match="cannot grow them back"):  # quarter -> half un-prunes
        walk_plan(job, 0, LocalFederation(), decide=lambda st, res: [(2, "quarter", "A"), (3, "half", "A")])
    with pytest.raises(JobError, match="epoch 5 where 2"):
        walk_plan(job, 0, LocalFederation(), decide=lambda st, res: [(5, "full", "A")])
