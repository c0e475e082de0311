"""What is reachable when no plan is found, and the infeasibility message that says so.

`reachable` answers two questions with the planner's own search: the lowest
certified ω-quantile by the deadline (bisection on the target), and the
shortest time that meets the target (the same graph with time as the edge
weight and no deadline).  The message built from them must agree with them:
if the bisection finds a plan whose certified quantile meets ℓmax, the target
*is* reachable and that plan is returned (`Infeasible.witness`), never an
"infeasible" that quotes a reachable quantile below the target.

Horizons are the scenario's: plans have at most `max_epochs` epochs (the law
is not extrapolated) or what the deadline allows; the message says when the
horizon, not the target or the deadline, is what binds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .choices import Problem
from .common import LONGEST, Candidate, Context, Infeasible, Options
from .schedule import Surrogate, cornish_fisher, lowest_cost_path


@dataclass
class Reach:
    best_quantile: float | None = None  # lowest certified ω-quantile by the deadline
    witness: tuple[Context, Candidate] | None = None  # a plan with that quantile
    shortest_time: float | None = None  # earliest time the target is met at full speed
    horizon: int = 0  # epochs searched for the shortest time
    horizon_binds: bool = False  # the lowest quantile's plan uses every epoch max_epochs allows
    deadline_epochs: int = 0  # epochs the deadline alone would allow
    unphysical: bool = False  # plans below that quantile exist only where the law predicts a negative loss
    unbounded: bool = False  # schedules run by the deadline, but the law certifies none of them below `ceiling`
    ceiling: float = math.inf  # the loss limit of that last search: 4·|ℓ(0)| + 1, ℓ(0) the search's start


def time_horizon(ctx: Context) -> int:
    """Epochs for the shortest-time search: the law's max_epochs, else four times the
    epochs the best version alone needs for its (Cornish–Fisher) ω-quantile — or, if
    none gets there, its mean — to meet the target, and at least 400."""
    if ctx.scenario.max_epochs is not None:
        return int(ctx.scenario.max_epochs) - ctx.start.epoch
    cum = np.cumsum(ctx.cumulants_ahead(LONGEST), axis=1)
    q, _ = cornish_fisher(ctx.initial_loss, cum, ctx.omega)
    hit = np.flatnonzero((q <= ctx.target).any(axis=0))
    if not hit.size:  # no version alone gets there: its mean, then
        hit = np.flatnonzero((ctx.initial_loss + cum[:, :, 0] <= ctx.target).any(axis=0))
    # Cornish–Fisher is an estimate: leave room (4×) for the exact law's quantile
    return min(LONGEST, max(400, 4 * int(hit[0] + 1))) if hit.size else LONGEST


def reachable(problem: Problem, search) -> Reach:
    """`search(ctx, limit=...)`: the planner's own search (depl.planners.depl.search, passed in: depl imports this module)."""
    out = Reach()
    quick = Options(eta=min(problem.options.eta, 100), polish=False)  # coarser than the planner's own
    for choice in problem.by_time:
        ctx = Context(problem.scenario, list(choice.datasets), loss=problem.loss, options=quick, start=problem.start)
        out.deadline_epochs = max(out.deadline_epochs, ctx.deadline_epochs)
        # Lowest quantile: bisection on the target with the planner's own search.
        l0 = ctx.initial_loss
        lo, hi = min(0.0, ctx.target), l0
        found: Candidate | None = None
        for _ in range(30):
            mid = (lo + hi) / 2
            cand = search(ctx, limit=mid)
            if cand is not None:
                found, hi = cand, min(mid, cand.quantile)
            else:
                lo = mid
            if hi - lo < 1e-3 * abs(l0):
                break
        if found is None and float(ctx.tmin.min()) <= ctx.deadline:  # an epoch fits; none is certified below ℓ(0)
            out.ceiling = 4 * abs(l0) + 1
            found = search(ctx, limit=out.ceiling)
            out.unbounded |= found is None
        if found is not None and (out.best_quantile is None or found.quantile < out.best_quantile):
            out.best_quantile, out.witness = found.quantile, (ctx, found)
            out.horizon_binds = (len(found.schedule) >= ctx.max_epochs
                                 and ctx.max_epochs < ctx.deadline_epochs)
        # Shortest time: the same graph with time as the edge weight and no deadline.
        H = time_horizon(ctx)
        out.horizon = max(out.horizon, H)
        sigma0 = ctx.cornish_fisher([ctx.loss.model_names[0]] * min(H, ctx.max_epochs))[1]
        bias = 0.0
        for _ in range(6):
            sur = Surrogate.for_quantile(ctx.omega, max(sigma0, 1e-6))
            spec = ctx.spec(sur, ctx.tmin, ctx.target - bias - sur.const, deadline=float(ctx.tmin.max()) * H,
                            horizon=H)
            path = lowest_cost_path(spec)
            if path is None:
                break
            q = ctx.certify(path.schedule)[0]
            cf, sigma0 = ctx.cornish_fisher(path.schedule)
            if q <= ctx.target and (out.shortest_time is None or path.time < out.shortest_time):
                out.shortest_time = path.time
            if not math.isfinite(q):
                break
            bias = q - cf
        out.unphysical |= ctx.unphysical_seen
    return out


def infeasible(problem: Problem, search, *, method: str = "depl") -> Infeasible:
    """The Infeasible to raise; it carries a witness plan if the target turns out to be reachable."""
    r = reachable(problem, search)
    s = problem.scenario
    tgt = s.target
    w = f"{tgt.quantile:g}-quantile"
    if r.witness is not None and r.best_quantile is not None and r.best_quantile <= tgt.loss:
        return Infeasible(f"{method} found no plan, but plans meeting the target exist "
                          f"(the lowest reachable {w} is {r.best_quantile:.4g} ≤ {tgt.loss:g})",
                          best_quantile=r.best_quantile, shortest_time=r.shortest_time, witness=r.witness)
    target = f"no plan meets the target: the {w} of the final loss ≤ {tgt.loss:g} by the deadline {tgt.deadline:g}."
    parts = [target]
    horizon_said = r.best_quantile is not None and r.horizon_binds   # then its sentence says what no schedule reaches
    if r.best_quantile is not None:
        parts.append(f"By the deadline the lowest reachable {w} is {r.best_quantile:.4g} (constraint (3), target.loss).")
        if horizon_said:
            parts.append(f"The horizon binds, not the deadline: that plan uses all max_epochs = {s.max_epochs} epochs "
                         f"the loss law is given for (the deadline alone would allow {r.deadline_epochs})"
                         + (", and no schedule of at most that many reaches the loss target." if r.shortest_time is None
                            else "."))
    elif r.unbounded:
        parts.append(f"Schedules run within the deadline, but the loss law certifies no {w} below "
                     f"{r.ceiling:g} (4·|ℓ(0)| + 1) for any of them — a calibrated law whose scores "
                     "do not reach ω, or a law whose spread swamps its progress (constraint (3), target.loss).")
    else:
        parts.append("No schedule can even run within the deadline (constraint (4), target.deadline).")
    if r.unphysical:
        parts.append("Some schedules were not certified: there the loss law predicts a negative loss "
                     "(its mean or ω-quantile below 0), where it does not hold.")
    if r.shortest_time is not None:
        parts.append(f"The loss target is reached at the earliest after {r.shortest_time:.6g} time units at full speed "
                     "(constraint (4), target.deadline).")
    elif not horizon_said:
        src = (f"max_epochs = {s.max_epochs}" if s.max_epochs is not None
               else "4× what the best version alone needs, at least 400" if r.horizon < LONGEST else "the longest horizon")
        parts.append(f"No schedule of at most {r.horizon} epochs ({src}) reaches the loss target, whatever the deadline.")
    return Infeasible(" ".join(parts), best_quantile=r.best_quantile, shortest_time=r.shortest_time, target=target)
