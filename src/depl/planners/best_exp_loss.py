"""best-exp-loss: best-exp as the paper's own sentences describe it.

The paper (Sec. VI): best-exp "accounts for the expected loss instead of any
quantile thereof"; "as best-exp optimizes the expected loss, it utilizes the
'fast-unsteady' model as much as possible, which results in a higher number
of epochs to run".  Read literally, that is a planner whose *versions* are
chosen for the lowest expected loss, cost-blind, and which then runs just
enough epochs for the guarantee and places them as cheaply as it can:

1. datasets: the paper's stage 1 (eq. 7), first choice on which a plan exists;
2. for K = 1, 2, … the schedule of K epochs with the lowest E[ℓ(K)]
   (`lowest_mean_schedules`, a dynamic programme over (epoch, version) with
   the switch jumps' means: exact under the increments law, whose mean adds
   up along a schedule; the graph's additive approximation under the level
   law); the first K whose schedule's certified ω-quantile meets ℓmax and
   that fits the deadline is the plan;
3. its cheapest placement (stage 3).

`best-exp` (best_exp.py) is SPEC's reading: cost-minimising like DepL but
planning against a tightened expected-loss target.
"""

from __future__ import annotations

import math
from typing import Iterator

import numpy as np

from ..plan import Plan
from .best_exp import missed_by_mean
from .bounds import cantelli_factor
from .choices import ChoicePlanner, Problem, Walk
from .common import Candidate, Context, to_plan


def lowest_mean_schedules(ctx: Context) -> Iterator[list[str]]:
    """For K = 1 .. the horizon, the K-epoch schedule with the lowest additive E[ℓ(K)]
    (ties to the version listed first)."""
    names = ctx.loss.model_names
    M, K = len(names), ctx.max_epochs
    step = ctx.epoch_cumulants[:, :, 0]  # (M, K) mean change of epoch k per version
    jump = np.where(ctx.allowed & ~np.eye(M, dtype=bool), ctx.switch_cumulants[:, :, 0], 0.0)
    move = np.where(ctx.allowed, jump, np.inf)  # (from, to)
    start_ok = np.ones(M, bool) if ctx.first_allowed is None else ctx.first_allowed
    value = np.where(start_ok, ctx.first_switch[:, 0] + step[:, 0], np.inf)
    back: list[np.ndarray] = []
    for k in range(K):
        if k:
            total = value[:, None] + move  # (from, to)
            prev = np.argmin(total, axis=0)
            value = total[prev, np.arange(M)] + step[:, k]
            back.append(prev)
        m = int(np.argmin(value))
        if not math.isfinite(value[m]):
            return
        sched = [m]
        for prev in reversed(back):
            sched.append(int(prev[sched[-1]]))
        yield [names[i] for i in reversed(sched)]


def lowest_mean_plan(ctx: Context) -> Candidate | None:
    """The fewest-epoch lowest-mean schedule whose certified ω-quantile meets ℓmax within
    the deadline, at its cheapest placement; None if there is none within the horizon."""
    moments = ctx.moments_exact  # exact mean and variance: Cantelli rules out cheaply
    factor = cantelli_factor(ctx.omega)
    idx = {m: i for i, m in enumerate(ctx.loss.model_names)}
    for sched in lowest_mean_schedules(ctx):
        if sum(ctx.tmin[idx[m]] for m in sched) > ctx.deadline * (1 + 1e-12):
            continue  # cannot run in time even at full speed
        if moments:
            cum = ctx.additive_cumulants(sched)
            if ctx.initial_loss + cum[0] - factor * math.sqrt(max(cum[1], 0.0)) > ctx.target:
                continue  # its ω-quantile is surely above ℓmax (Cantelli)
        q, d = ctx.certify(sched)
        if q > ctx.target:
            continue
        p = ctx.place(sched)
        if p is not None:
            return Candidate(list(sched), q, p, d, info={"lowest_mean": float(d.mean())})
    return None


class BestExpLossPlanner(ChoicePlanner):
    """best-exp in the paper's words (module docstring)."""

    name = "best-exp-loss"

    def solve(self, problem: Problem, t0: float) -> Plan:
        walk = Walk(problem.by_time).run(lambda ctx, incumbent: lowest_mean_plan(ctx))
        if walk.best is None:
            raise missed_by_mean(problem, None, self.name)
        ctx, cand = walk.best
        return to_plan(self.name, ctx, cand, t0, blacklisted=walk.tried)


BEST_EXP_LOSS = BestExpLossPlanner()
