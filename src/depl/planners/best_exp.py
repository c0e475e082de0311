"""best-exp: the expectation-focused state of the art (PACT, INFOCOM 2023).

It makes the same decisions as DepL (the same stages, graph and placement)
but reasons only with the *expected* loss: it plans for E[ℓ(K)] ≤ ℓ' and,
since the guarantee is on the ω-quantile, tightens ℓ' until its plan's true
(certified) ω-quantile meets ℓmax — as in the paper, where every method meets
the constraint.  The tightening is a bisection on ℓ'; the cheapest plan whose
certified quantile is ≤ ℓmax is returned.
"""

from __future__ import annotations

import time

from ..loss import LossModel
from ..plan import Plan
from ..scenario import Scenario
from .common import Candidate, Context, Options, make_plan
from .datasets import ranked_subsets
from .depl import Criterion, infeasible, search
from .schedule import Surrogate

MEAN = Criterion(
    surrogate=lambda omega, sigma: Surrogate.expectation(),
    exact=lambda c: c.dist.mean(),
    estimate=lambda ctx, s: (float(ctx.loss.mean_path(s, ctx.phi)[-1]), 0.0),
)


def tightest_mean_plan(ctx: Context, steps: int = 40) -> tuple[Candidate | None, float | None]:
    """(cheapest plan meeting ℓmax found by tightening the mean target, that target)."""
    lmax = ctx.target
    best: tuple[Candidate, float] | None = None

    def attempt(limit: float) -> Candidate | None:
        """The plan for E[ℓ(K)] ≤ limit (None if the mean cannot go that low); keeps the best that meets ℓmax."""
        nonlocal best
        cand = search(ctx, MEAN, limit)
        if cand is not None and cand.quantile <= lmax and (best is None or cand.cost < best[0].cost):
            best = (cand, limit)
        return cand

    def meets(cand: Candidate | None) -> bool:
        return cand is not None and cand.quantile <= lmax

    hi = lmax  # plans for E ≤ hi miss the quantile target (or hi = ℓmax itself works)
    if meets(attempt(hi)):
        return best[0], hi  # type: ignore[index]
    step, lo = 0.05 * (ctx.loss.initial_loss - lmax), None
    for _ in range(steps):  # walk down until a mean target is tight enough
        cand_lo = hi - step
        cand = attempt(cand_lo)
        if meets(cand):
            lo = cand_lo
            break
        if cand is None:
            return None, None  # the mean cannot go that low: nothing tighter works
        hi, step = cand_lo, step * 2
    if lo is None:
        return None, None
    for _ in range(steps):  # bisection between a working lo and a failing hi
        if hi - lo < 1e-4 * ctx.loss.initial_loss:
            break
        mid = (lo + hi) / 2
        if meets(attempt(mid)):
            lo = mid
        else:
            hi = mid
    return (best[0] if best is not None else None), lo

def plan_best_exp(s: Scenario, options: Options | None = None, loss: LossModel | None = None) -> Plan:
    options = options or Options()
    t0 = time.perf_counter()
    tried = []
    for datasets in ranked_subsets(s, loss):
        ctx = Context(s, list(datasets), loss=loss, options=options)
        cand, mean_target = tightest_mean_plan(ctx)
        if cand is not None:
            return make_plan("best-exp", s, ctx, cand, t0, eta=options.eta, mean_target=mean_target,
                             blacklisted=tried)
        tried.append(list(datasets))
    raise infeasible(s, options, loss)
