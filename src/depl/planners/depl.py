"""DepL: the three stages of the paper's Fig. 3, with backtracking.

1. datasets (`ranked_subsets`, eq. 7), best first;
2. the schedule of versions on the expanded graph (`lowest_cost_path`), with
   the loss in the transformed domain (additive cumulants);
3. placement of every epoch (`place`), convex, within (1+ε) of its optimum.

Stages 2 and 3 meet in a short fixed-point loop: the graph's edge weights use
the marginal cost of time λ of the latest exact placement, its loss bound uses
the spread σ0 of the latest schedule, and the bias of that bound against the
exact distribution (FFT) of the schedule is subtracted from the target.  Every
schedule found is certified exactly; the cheapest certified one is kept, then
polished by a local search over segment lengths with exact certification.

If no schedule meets the target with the chosen datasets, that choice is
blacklisted and the next is tried (Fig. 3); if none works, `Infeasible` says
which constraint fails and what is reachable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..plan import Plan
from .bounds import late_switches, subset_lower_bound, version_proxy_costs
from .choices import ChoicePlanner, Problem, Walk
from .common import Candidate, Context, Infeasible, evaluate, segments, to_plan
from .exhaustive import Exhaustive, cost_bound
from . import reach
from .schedule import Surrogate, lowest_cost_path
from ..families import norm_ppf


def level_shifts(ctx: Context) -> np.ndarray | None:
    """(max_epochs,): where the law is calibrated per epoch with levels that vary with K
    (Context.levels), z(u_K) − z(ω) for a plan of K epochs — the certified ω-quantile of a
    K-epoch plan is its base law's u_K-quantile, about σ·(z(u_K) − z(ω)) above the ω-quantile
    the graph's surrogate bounds (+inf where u_K = 1: nothing of that length is certified);
    None otherwise (a constant level is a constant shift, which the bias correction absorbs)."""
    u = ctx.levels
    if u is None or np.ptp(u) == 0:
        return None

    return ctx.level_z - float(norm_ppf(ctx.omega))


def estimate(ctx: Context, schedule) -> tuple[float, float]:
    """(Cornish–Fisher estimate of the certified ω-quantile, σ): at the calibrated level of the
    schedule's length where that level varies with K (`level_shifts`), else at ω."""
    q, sigma = ctx.cornish_fisher(schedule)
    shift = level_shifts(ctx)
    if shift is not None and schedule and math.isfinite(shift[len(schedule) - 1]):
        q += sigma * float(shift[len(schedule) - 1])
    return q, sigma


def full_speed_price(ctx: Context) -> float:
    """A time price at which every version runs at full speed on its best cluster."""
    return ctx.table.full_speed_price()


@dataclass(frozen=True)
class Start:
    sigma0: float  # spread of the regime's schedule
    price: float  # λ of its placement
    bias: float  # exact ω-quantile minus the Cornish–Fisher estimate, for that schedule
    plan: Candidate | None  # the cheapest certified plan with this version alone


def _starts(ctx: Context, exact: bool, incumbent: Candidate | None = None) -> list[Start]:
    """Where to start the loop from: one start per version, cheapest first.

    The loop has one fixed point per regime — a steady schedule makes the
    variance dear (small σ0), a noisy one cheap (large σ0) — and the tangent
    bound's bias differs between regimes (Cornish–Fisher misjudges skewed
    noise), so the loop is started from every version's regime with that
    regime's own σ0, λ and bias.  With `exact`, each version's cheapest
    certified single-version plan is found exactly (bisection on its length)
    and is a candidate too, unless it cannot beat `incumbent` (or a cheaper
    version's plan): versions are searched by increasing proxy cost, so the
    first plan found bounds the others' searches.
    """
    mean = ctx.epoch_cumulants[:, :, 0].cumsum(axis=1) + ctx.initial_loss + ctx.first_switch[:, None, 0]
    bar = incumbent
    starts = []
    for i in np.argsort(version_proxy_costs(ctx), kind="stable") if exact else range(len(ctx.loss.model_names)):
        name = ctx.loss.model_names[i]
        if not ctx.can_begin([name]):
            continue  # a started run cannot switch to it
        alone = exhaust(ctx, bar, [[int(i)]]) if exact else None
        if alone is not None:
            bar = alone
            sched, p = alone.schedule, alone.placement
            bias = alone.quantile - estimate(ctx, sched)[0]
        else:
            ok = np.flatnonzero(mean[i] <= ctx.target)
            sched = [name] * (int(ok[0] + 1) if ok.size else ctx.max_epochs)
            p, bias = ctx.place(sched), 0.0
        sigma = ctx.cornish_fisher(sched)[1]
        starts.append((p.cost if p else math.inf, Start(max(sigma, 1e-6), p.price if p else full_speed_price(ctx),
                                                         bias, alone)))
    starts.sort(key=lambda t: t[0])
    return [st for _, st in starts]


def exhaust(ctx: Context, bar: Candidate | None, paths, windows=None) -> Candidate | None:
    """Exhaustive search on this choice for a plan cheaper than `bar` (which may be another
    choice's plan: it only prunes); None if there is none."""
    got = Exhaustive(ctx, bar, paths, windows).run()
    return None if got is bar else got


def horizon_below(ctx: Context, bar: Candidate | None) -> int:
    """The most epochs a plan on this choice may have and still cost less than `bar`
    (the admissible bound of depl.planners.bounds grows with the epochs)."""
    K = ctx.max_epochs
    if bar is None:
        return K
    cb = cost_bound(ctx)
    if cb.for_epochs(K) < bar.cost:
        return K
    lo, hi = 0, K  # for_epochs(lo) < bar (0 epochs: nothing), for_epochs(hi) ≥ bar
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if cb.for_epochs(mid) < bar.cost else (lo, mid)
    return lo


@dataclass(frozen=True)
class Criterion:
    """What a search bounds: its additive surrogate, the exact value, an estimate."""

    surrogate: Callable[[float, float], Surrogate]  # (ω, σ0) -> Surrogate
    exact: Callable[[Candidate], float]
    estimate: Callable[[Context, list[str]], tuple[float, float]]  # -> (additive estimate, σ)


QUANTILE = Criterion(
    surrogate=Surrogate.for_quantile,
    exact=lambda c: c.quantile,
    estimate=estimate,
)


def search(ctx: Context, criterion: Criterion = QUANTILE, limit: float | None = None,
           incumbent: Candidate | None = None) -> Candidate | None:
    """Stages 2–3 for one dataset choice: the cheapest schedule found whose
    `criterion` (by default the certified ω-quantile) is at most `limit`.

    `incumbent` (a plan found on another choice) only prunes: searches stop
    where the admissible cost bound reaches it, and the graph is cut at the
    epochs it allows.  If nothing cheaper is found, the incumbent itself is
    returned (the choice was searched, not found infeasible)."""
    limit = ctx.target if limit is None else limit
    own_target = criterion is QUANTILE and limit == ctx.target
    best: Candidate | None = None

    def bar() -> Candidate | None:
        return best if incumbent is None or (best is not None and best.cost < incumbent.cost) else incumbent

    seen: set[tuple] = set()
    starts = _starts(ctx, exact=own_target, incumbent=incumbent)
    if criterion is not QUANTILE:
        starts = starts[:1]  # the expected loss has no spread to start from
    for st in starts:
        if st.plan is not None and (best is None or st.plan.cost < best.cost):
            best = st.plan
    for st in starts:
        horizon = horizon_below(ctx, bar())
        if horizon < 1:
            break
        cand = _fixed_point(ctx, criterion, limit, st, seen, horizon)
        if cand is not None and (best is None or cand.cost < best.cost):
            best = cand
    if own_target:
        best = _late_switches(ctx, best, bar())
    if best is not None and ctx.options.polish:
        best = polish(ctx, best, lambda c: criterion.exact(c) <= limit, window=own_target)
    if incumbent is not None and (best is None or best.cost >= incumbent.cost):
        return incumbent
    return best


def _late_switches(ctx: Context, best: Candidate | None, bar: Candidate | None) -> Candidate | None:
    """The level law's late switches (bounds.late_switches): each switch's cheapest
    closed-form plan, searched exactly within `WINDOW` epochs of its first run
    (the last run in full).  The graph's switch terms are averages over when a
    switch comes, so the graph search undervalues a switch in the last epochs."""
    for _, a, b, qa, _ in late_switches(ctx):
        if bar is not None and subset_lower_bound(ctx) >= bar.cost:
            break
        found = exhaust(ctx, bar, [[a, b]], {0: [(qa - WINDOW, qa + WINDOW)]})
        if found is not None:
            best = bar = found
    return best


def _fixed_point(ctx: Context, criterion: Criterion, limit: float, start: Start,
                 seen: set[tuple], horizon: int | None = None) -> Candidate | None:
    """Graph search ↔ exact certification and placement, until the schedule repeats."""
    sigma0, lam, bias = start.sigma0, start.price, (start.bias if criterion is QUANTILE else 0.0)
    best: Candidate | None = None
    for _ in range(ctx.options.max_iter):
        sur = criterion.surrogate(ctx.omega, sigma0)
        target = limit - bias - sur.const
        shift = level_shifts(ctx) if criterion is QUANTILE else None
        targets = None  # per plan length (calibrated per epoch); -inf where nothing of that length is certified
        if shift is not None:
            targets = np.full(shift.shape, -math.inf)
            ok = np.isfinite(shift)
            targets[ok] = target - sigma0 * shift[ok]
        spec = ctx.spec(sur, ctx.table.epoch_weight(lam), target, horizon=horizon, targets=targets)
        path = cached_path(ctx, spec)
        if path is None:
            if bias > 0:
                bias /= 2  # the correction overshot: relax it
                continue
            break
        key = (tuple(path.schedule), round(math.log(lam), 3), round(bias, 6))
        if key in seen:
            break
        seen.add(key)
        cand = evaluate(ctx, path.schedule)
        if cand is None:  # misses the deadline once compute is priced in
            lam *= 4.0
            continue
        if criterion.exact(cand) <= limit and (best is None or cand.cost < best.cost):
            best = cand
        est, sigma0 = criterion.estimate(ctx, path.schedule)
        bias = criterion.exact(cand) - est
        lam = cand.placement.price
    return best


def cached_path(ctx: Context, spec) -> object:
    """lowest_cost_path(spec), shared by the choices of one planning call: choices with the
    same samples and a placement at the same time price search the same graph."""
    key = ("path", ctx.samples, spec.l0, spec.deadline, spec.target, spec.eta,
           *(a.tobytes() for a in (spec.du_epoch, spec.du_switch, spec.weight, spec.tmin, spec.allowed)),
           *(None if a is None else a.tobytes() for a in (spec.allowed_start, spec.targets)))
    if key not in ctx.shared:
        ctx.shared[key] = lowest_cost_path(spec)
    return ctx.shared[key]


def _neighbours(ctx: Context, schedule: list[str]):
    """Schedules one epoch away: a segment one shorter/longer, or a boundary moved."""
    segs = segments(schedule)
    out = []
    for i, (m, n) in enumerate(segs):
        for d in (-1, 1):
            s2 = list(segs)
            s2[i] = (m, n + d)
            out.append(s2)
    for i in range(len(segs) - 1):
        for d in (-1, 1):
            s2 = list(segs)
            s2[i] = (segs[i][0], segs[i][1] + d)
            s2[i + 1] = (segs[i + 1][0], segs[i + 1][1] - d)
            out.append(s2)
    for s2 in out:
        s2 = [(m, n) for m, n in s2 if n > 0]
        if not s2 or sum(n for _, n in s2) > ctx.max_epochs:
            continue
        if any(a == b or not ctx.loss.can_switch(a, b) for (a, _), (b, _) in zip(s2, s2[1:])):
            continue
        if not ctx.can_begin([s2[0][0]]):
            continue
        yield [m for m, n in s2 for _ in range(n)]


def polish(ctx: Context, best: Candidate, ok: Callable[[Candidate], bool], *, window: bool = False,
           max_evals: int = 60) -> Candidate:
    """Local search with exact certification: first-improvement moves of one
    epoch, then (for the ω-quantile) an exact search of the run lengths within
    `WINDOW` epochs of the plan's, along its path of versions and the paths
    with one run left out (`window`: only where `ok` is "certified ω-quantile ≤ ℓmax")."""
    best = _one_epoch_moves(ctx, best, ok, max_evals)
    if window:
        best = _window_search(ctx, best)
    return best


WINDOW = 3


def _window_search(ctx: Context, best: Candidate) -> Candidate:
    idx = {m: i for i, m in enumerate(ctx.loss.model_names)}
    segs = [(idx[m], n) for m, n in segments(best.schedule)]
    paths, windows = [], {}
    # The plan's own path, the paths with one run left out, and those with one short run of a
    # version it does not use put in (random_instance seed 20305: one epoch of the cheaper
    # version first saved 1.9%); the last run is searched in full.
    variants = [[sg for i, sg in enumerate(segs) if i != drop] for drop in [None, *range(len(segs))]]
    used = {m for m, _ in segs}
    variants += [segs[:at] + [(m, WINDOW)] + segs[at:] for at in range(len(segs) + 1)
                 for m in range(len(idx)) if m not in used]
    for kept in variants:
        path = [m for m, _ in kept]
        if not path or path in paths or any(not ctx.allowed[a, b] for a, b in zip(path, path[1:])):
            continue
        if ctx.first_allowed is not None and not ctx.first_allowed[path[0]]:
            continue
        windows[len(paths)] = [(n - WINDOW, n + WINDOW) for _, n in kept[:-1]]
        paths.append(path)
    return Exhaustive(ctx, best, paths, windows).run() or best


def _one_epoch_moves(ctx: Context, best: Candidate, ok: Callable[[Candidate], bool], max_evals: int) -> Candidate:
    evals = 0
    improved = True
    while improved and evals < max_evals:
        improved = False
        options = []
        for s in _neighbours(ctx, best.schedule):
            p = ctx.place(s)
            if p is not None and p.cost < best.cost * (1 - 1e-9):
                options.append((p.cost, s))
        options.sort(key=lambda t: t[0])
        for _, s in options:
            evals += 1
            cand = evaluate(ctx, s)
            if cand is not None and ok(cand):
                best, improved = cand, True
                break
            if evals >= max_evals:
                break
    return best


class DeplPlanner(ChoicePlanner):
    """DepL (Fig. 3): datasets → schedule → placement, with backtracking.

    The dataset choices are taken through stages 2–3 best-ranked first: by
    default ranked by eq. (2) itself (`Problem.by_cost`: the cost of the
    cheapest one-version, one-cluster plan), the paper's eq. (7) proxy with
    `options.dataset_rule = "paper"`.  The paper stops at the first choice
    that stages 2–3 make feasible; depl also takes the next-ranked choices
    whose score is within `options.dataset_slack` of the best (at most
    `options.dataset_candidates` feasible ones) and keeps the cheapest plan;
    with the cost ranking, a choice whose admissible lower bound
    (depl.planners.bounds) is above the best plan found is skipped.
    """

    name = "depl"

    def solve(self, problem: Problem, t0: float) -> Plan:
        walk = depl_walk(problem)
        if walk.best is None:
            raise infeasible(problem)
        ctx, cand = walk.best
        o = problem.options
        return to_plan(self.name, ctx, cand, t0, eta=o.eta, blacklisted=walk.tried, dataset_rule=o.dataset_rule)


def depl_walk(problem: Problem) -> Walk:
    """DepL's walk over the dataset choices: its `best` is DepL's plan (None if none is found)."""
    o = problem.options
    by_cost = o.dataset_rule == "cost"
    walk = Walk(problem.ranked(o.dataset_rule), take=o.dataset_candidates, slack=o.dataset_slack, by_cost=by_cost,
                bound=(lambda choice: subset_lower_bound(choice.ctx)) if by_cost else None)
    return walk.run(lambda ctx, incumbent: search(ctx, incumbent=incumbent))


DEPL = DeplPlanner()


def infeasible(problem: Problem, *, method: str = "depl") -> Infeasible:
    """Why no plan was found (reach.infeasible with this planner's own search)."""
    return reach.infeasible(problem, search, method=method)
