"""What the planners share: the context of one dataset choice, certification, the result.

A `Context` is a scenario with its datasets chosen *and* the state the plan
starts from (`depl.state.RunState`): before training, epoch 0 at ℓ(0) with the
whole deadline; during a run (closed loop), the epochs already trained, the
last observed loss and the time already used.  Everything the searches read —
the deadline, the horizon, the epoch cumulants, the starting loss, the switch
out of the version last trained, the exact law of ℓ(K) — comes from here, so
a planner that only talks to its Context plans the remaining epochs unchanged.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Callable

import numpy as np

from ..loss import LossModel, loss_model_for
from ..loss.base import segments  # noqa: F401  (the planners read a schedule's runs from here)
from ..plan import Plan, with_scenario
from ..scenario import Scenario
from ..scenario.model import MAX_EPOCHS
from ..state import START, RunState
from .placement import ClusterTable, Placement, PlacementInfeasible, place
from .schedule import GraphSpec, Surrogate, cornish_fisher
from ..families import norm_ppf


LONGEST = MAX_EPOCHS  # the longest horizon planned: the most a scenario's max_epochs may say


@dataclass(frozen=True)
class Options:
    """Options every planner takes (some ignore some)."""

    eta: int = 200
    max_iter: int = 12
    polish: bool = True
    tol: float | None = None  # width of the certified quantile bracket; None = 1% of σ
    dataset_rule: str = "cost"  # "cost": ranked by eq. (2) (depl.planners.bounds); "paper": eq. (7)
    dataset_candidates: int = 6  # feasible dataset choices taken through stages 2–3 (the paper: 1)
    dataset_slack: float = 2.0  # ... among those whose ranking score is within this factor of the best
    time_limit: float | None = None  # optimal: seconds before it returns its incumbent and a lower bound
    on_status: Callable[[str], None] | None = field(default=None, compare=False)  # optimal's live status line


class Infeasible(Exception):
    """No plan meets the target; says which constraint and what is reachable."""

    def __init__(self, message: str, *, best_quantile: float | None = None, shortest_time: float | None = None,
                 witness: tuple | None = None, target: str | None = None, detail: tuple[str, ...] = ()):
        super().__init__(message)
        self.detail = tuple(detail)   # what the message only counts (each calibration chain's first test), a line each
        self.target = target   # the message's sentence naming the target alone (reach.infeasible sets it)
        self.best_quantile = best_quantile
        self.shortest_time = shortest_time
        # (Context, Candidate) meeting the target, found by the reachability search
        # after the planner's own search missed it (depl.planners.reach)
        self.witness = witness


CERTIFIED_KEPT = 64


@dataclass
class Context:
    """A scenario with its datasets chosen: everything stages 2–3 need."""

    scenario: Scenario
    datasets: list[str]
    loss: LossModel = field(default=None)  # type: ignore[assignment]
    options: Options = field(default_factory=Options)
    start: RunState = START
    # What the dataset choices of one planning call share (depl.planners.choices.Problem):
    # answers that depend on the datasets only through φ(S) — certified quantiles, graph searches.
    shared: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        if self.loss is None:
            self.loss = loss_model_for(self.scenario)
        if self.start.model is not None and self.start.model not in self.loss.model_names:
            raise ValueError(f"the run's last version {self.start.model!r} is not a version of the scenario")

    @cached_property
    def initial_loss(self) -> float:
        """The loss the graph starts from: ℓ(0), the run's last observed loss, or (nothing
        observed) its expected loss so far.  The exact law (`distribution`) is the loss
        law's own conditioning on the run."""
        if not self.start.started:
            return self.loss.initial_loss
        if self.start.last_loss is not None:
            return float(self.start.last_loss)
        return float(self.loss.mean_path(list(self.start.past), self.phi)[-1])

    @property
    def moments_exact(self) -> bool:
        """Whether the additive cumulants give ℓ(K)'s exact mean and variance (the increments
        law, from ℓ(0) or an observed loss), so that Cantelli's bound may rule schedules out."""
        return self.loss.cumulants_exact() and (not self.start.started or self.start.last_loss is not None)

    @property
    def base_loss(self) -> LossModel:
        """The law the certified quantiles are taken from: a calibrated law's base (depl.loss.calibrated),
        else the law itself."""
        return self.loss.uncalibrated()

    @cached_property
    def levels(self) -> np.ndarray | None:
        """(max_epochs,): where the law is calibrated, the level of its base law at which a plan of
        K = 1..max_epochs epochs has its ω-quantile certified — the conformal level of the scores of
        the epoch it ends at (1: the scores cannot reach ω, nothing of that length is certified);
        None for a law as fitted.  With per-epoch scores these levels jump about with K, so the
        certified quantile of a schedule need not fall as it grows (a longer plan may be certified
        where a shorter one is not)."""
        return self.loss.certified_levels(self.start.epoch + np.arange(1, self.max_epochs + 1), self.omega)

    @cached_property
    def level_z(self) -> np.ndarray | None:
        """(max_epochs,): z(u_K), the standard normal quantile of each length's calibrated level (`levels`);
        +inf where u_K = 1 (nothing of that length is certified); None for a law as fitted."""
        if self.levels is None:
            return None

        u = self.levels
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(u < 1.0, norm_ppf(np.minimum(u, 1 - 1e-16)), np.inf)

    @property
    def quantile_monotone(self) -> bool:
        """Whether one more epoch at the end never raises the certified ω-quantile: the law's progress
        is monotone (positive noise support) and, calibrated, its levels do not rise with K (and are not
        read from per-experiment scores).  Searches may bisect on a last run's length only then."""
        if not self.loss.progress_is_monotone():
            return False
        if self.loss.levels_follow_schedule():
            return False   # a schedule's level comes from the runs of its own kind: it may rise with K anywhere
        return self.levels is None or bool(np.all(np.diff(self.levels) <= 0))

    @cached_property
    def first_allowed(self) -> np.ndarray | None:
        """(|M|,) bool: the versions the first planned epoch may use (None: any).  A started
        run continues its last version or switches out of it along an allowed switch."""
        if self.start.model is None:
            return None
        return self.allowed[self.loss.model_names.index(self.start.model)].copy()

    @cached_property
    def first_switch(self) -> np.ndarray:
        """(|M|, 3): the cumulants the first planned epoch adds by switching out of the run's last version."""
        if self.start.model is None:
            return np.zeros((len(self.loss.model_names), 3))
        return self.switch_cumulants[self.loss.model_names.index(self.start.model)]

    @cached_property
    def samples(self) -> float:
        return self.scenario.samples(self.datasets)

    @cached_property
    def phi(self) -> float:
        return self.scenario.phi(self.samples)

    @cached_property
    def table(self) -> ClusterTable:
        return ClusterTable.build(self.scenario, self.samples)

    @property
    def omega(self) -> float:
        return self.scenario.target.quantile

    @property
    def target(self) -> float:
        return self.scenario.target.loss

    @property
    def deadline(self) -> float:
        """The time left: Tmax minus what the run has already used."""
        return self.scenario.target.deadline - self.start.time_spent

    @cached_property
    def tmin(self) -> np.ndarray:
        return self.table.min_time()

    @cached_property
    def deadline_epochs(self) -> int:
        """The most epochs that fit in the deadline (the fastest version, full speed, best cluster)."""
        return max(1, int(math.floor(max(self.deadline, 0.0) / float(self.tmin.min()) + 1e-9)))

    @cached_property
    def max_epochs(self) -> int:
        """The horizon: what the deadline allows, and at most the law's max_epochs, else at most LONGEST (the most
        a scenario's max_epochs may say: a deadline of 10⁹ time units would otherwise ask for 10⁸ epochs)."""
        k = min(self.deadline_epochs, LONGEST - self.start.epoch)
        if self.scenario.max_epochs is not None:
            k = min(k, self.scenario.max_epochs - self.start.epoch)
        return max(1, k)

    @cached_property
    def epoch_cumulants(self) -> np.ndarray:
        return self.cumulants_ahead(self.max_epochs)

    def cumulants_ahead(self, K: int) -> np.ndarray:
        """(|M|, K, 3): the cumulants of the next K epochs, numbered from start.epoch + 1."""
        k0 = self.start.epoch
        cum = self.loss.epoch_cumulants(k0 + K, self.phi)
        return cum[:, k0:] if k0 else cum

    @cached_property
    def switch_cumulants(self) -> np.ndarray:
        names = self.loss.model_names
        out = np.zeros((len(names), len(names), 3))
        for a, na in enumerate(names):
            for b, nb in enumerate(names):
                if a != b and self.loss.can_switch(na, nb):
                    out[a, b] = self.loss.switch_cumulants(na, nb, self.phi)
        return out

    @cached_property
    def allowed(self) -> np.ndarray:
        names = self.loss.model_names
        return np.array([[self.loss.can_switch(a, b) for b in names] for a in names])

    def cumulants(self, K: int) -> np.ndarray:
        """Epoch cumulants (|M|, K, 3), also beyond the deadline's horizon."""
        if K <= self.max_epochs:
            return self.epoch_cumulants[:, :K]
        return self.cumulants_ahead(K)

    def spec(self, surrogate: Surrogate, weight: np.ndarray, target: float, *,
             deadline: float | None = None, eta: int | None = None, horizon: int | None = None,
             targets: np.ndarray | None = None) -> GraphSpec:
        """The expanded graph's spec; `targets` (≥ the horizon long): a loss bound per path length."""
        du_epoch = surrogate(self.cumulants(horizon or self.max_epochs))
        if self.start.model is not None:  # the first epoch carries the switch out of the run's last version
            du_epoch = du_epoch.copy()
            du_epoch[:, 0] += surrogate(self.first_switch)
        return GraphSpec(
            models=list(self.loss.model_names), l0=self.initial_loss,
            du_epoch=du_epoch,
            du_switch=surrogate(self.switch_cumulants),
            allowed=self.allowed, weight=np.asarray(weight, float), tmin=self.tmin,
            deadline=self.deadline if deadline is None else deadline,
            target=target, eta=eta or self.options.eta, allowed_start=self.first_allowed,
            targets=None if targets is None else np.asarray(targets, float)[:du_epoch.shape[1]],
        )

    def can_begin(self, schedule) -> bool:
        """Whether `schedule` may follow the run's last version."""
        m = self.start.model
        return m is None or not schedule or self.loss.can_switch(m, schedule[0])

    # -- exact answers for one schedule ------------------------------------ #
    def distribution(self, schedule, **lattice):
        """The law of ℓ(start.epoch + len(schedule)) given the run's state (`lattice`: h, cache)."""
        if not self.start.started:
            return self.loss.distribution(schedule, self.phi, tol=self.options.tol, **lattice)
        return self.loss.distribution(schedule, self.phi, start=self.start, tol=self.options.tol, **lattice)

    def certify(self, schedule) -> tuple[float, object]:
        """(certified upper bound of the ω-quantile, the distribution); inf where the law
        cannot certify anything (see `physical`)."""
        cache = self.shared.setdefault("certified", {})
        key = (self.samples, tuple(schedule))
        hit = cache.get(key)
        if hit is not None:
            return hit
        d = self.distribution(schedule)
        q = d.quantile_bounds(self.omega)[1]
        out = cache[key] = (q if self.physical(d, q) else math.inf), d
        if len(cache) > CERTIFIED_KEPT:  # a lattice law can take megabytes: keep the latest few
            del cache[next(iter(cache))]
        return out

    unphysical_seen = False  # (not a field) a schedule was refused because its law predicts a negative loss

    def physical(self, d, q: float | None = None) -> bool:
        """Whether the law of ℓ(K) can certify: its mean and ω-quantile are finite and not
        negative.  A loss is never below 0; a law that says otherwise (the increments law
        extrapolated far past its data) is out of its range, and a plan on it is not a plan."""
        q = d.quantile_bounds(self.omega)[1] if q is None else q
        m = float(d.mean())
        if not (math.isfinite(q) and math.isfinite(m)):
            return False
        if q < 0 or m < 0:
            self.unphysical_seen = True
            return False
        return True

    def place(self, schedule) -> Placement | None:
        try:
            return place(self.scenario, list(schedule), self.datasets, deadline=self.deadline, table=self.table,
                         first_epoch=self.start.epoch + 1)
        except PlacementInfeasible:
            return None

    def additive_cumulants(self, schedule) -> np.ndarray:
        """κ1..κ3 of ℓ(K) − ℓ(0) as the graph adds them along `schedule` (exact for the
        increments law; an approximation where switches do not add, as in the level law)."""
        idx = {m: i for i, m in enumerate(self.loss.model_names)}
        s = np.array([idx[m] for m in schedule])
        cum = self.cumulants(len(s))[s, np.arange(len(s))].sum(axis=0)
        for a, b in zip(s, s[1:]):
            if a != b:
                cum = cum + self.switch_cumulants[a, b]
        if self.start.model is not None and len(s):
            cum = cum + self.first_switch[s[0]]
        return cum

    def cornish_fisher(self, schedule) -> tuple[float, float]:
        """(Cornish–Fisher ω-quantile, σ) of ℓ(K) from the additive cumulants."""
        q, sigma = cornish_fisher(self.initial_loss, self.additive_cumulants(schedule), self.omega)
        return float(q), float(sigma)


@dataclass
class Candidate:
    """A schedule with its exact certification and placement."""

    schedule: list[str]
    quantile: float  # certified upper bound
    placement: Placement
    dist: object
    info: dict = field(default_factory=dict)  # what the planner adds to the plan's info

    @property
    def cost(self) -> float:
        return self.placement.cost


def evaluate(ctx: Context, schedule) -> Candidate | None:
    """Certify and place `schedule`; None if it misses the deadline."""
    p = ctx.place(schedule)
    if p is None:
        return None
    q, d = ctx.certify(schedule)
    return Candidate(list(schedule), q, p, d)


def check_plan(plan: Plan) -> None:
    """Raise Infeasible unless every number of `plan` is finite and its loss is not negative:
    a plan that says "feasible" is one that can be run and trusted."""
    numbers = {"cost": plan.cost, "time": plan.time, "loss_quantile": plan.loss_quantile,
               "loss_mean": plan.loss_mean, "loss_quantile_bounds": plan.loss_quantile_bounds}
    numbers.update({f"epochs[{e.epoch}].compute": e.compute for e in plan.epochs})
    numbers.update({f"info.{k}": v for k, v in plan.info.items() if isinstance(v, (int, float))})
    for name, v in numbers.items():
        vals = v if isinstance(v, (tuple, list)) else [v]
        if any(x is None or not math.isfinite(float(x)) for x in vals):
            raise Infeasible(f"{plan.method} produced a plan with {name} = {v}: not a number a plan may hold, "
                             "so no plan is certified (check the scenario's numbers)")
    if plan.loss_quantile < 0 or plan.loss_mean < 0:
        raise Infeasible(f"{plan.method}: the only plans found need the loss law where it predicts a negative "
                         f"loss (the {plan.omega:g}-quantile {plan.loss_quantile:.4g}, mean {plan.loss_mean:.4g}): "
                         f"the law does not hold there; target.loss {plan.loss_target:g} cannot be certified")
    if not all(e.compute > 0 for e in plan.epochs):
        raise Infeasible(f"{plan.method} produced a plan with a non-positive compute allocation")


REFINE = 1  # lattices, each 10× finer, a final certification may try before it falls back on the planner's


def final_certification(ctx: Context, cand: Candidate) -> Candidate:
    """The candidate certified once more, the same way whichever planner found it: its schedule's law on the
    planners' own lattice (`Context.certify`), whose bracket is the one reported.

    The searches decide many schedules on coarser lattices (depl.planners.exhaustive: a bracket already on
    one side of ℓmax settles the question), and a candidate carries the law it was decided with; reported as
    it was, the same schedule had different quantiles under different methods, the coarse ones up to ~1% of
    the loss range above the plan's own Monte Carlo quantile.  Certified here, the quantile is the upper end of
    the planners' bracket (its width 1% of the sd unless `Options.tol` says otherwise), whatever the method.
    Should that bracket end above ℓmax where the planner's own (a coarser lattice's, also certified) did not,
    a 10× finer lattice is tried (REFINE), and failing it the planner's bracket stands: the one case where the
    reported quantile depends on the method."""
    q, d = ctx.certify(cand.schedule)
    if math.isfinite(q) and (q <= ctx.target or cand.quantile > ctx.target):
        return replace(cand, quantile=q, dist=d)
    h = getattr(getattr(d, "base", d), "h", None)
    for i in range(1, REFINE + 1 if h else 0):
        fine = ctx.distribution(cand.schedule, h=h / 10**i)
        qf = fine.quantile_bounds(ctx.omega)[1]
        if ctx.physical(fine, qf) and qf <= ctx.target:
            return replace(cand, quantile=qf, dist=fine)
    return cand


def to_plan(method: str, ctx: Context, cand: Candidate, t0: float, **info) -> Plan:
    """The `Plan` of a candidate found in `ctx` (its epochs numbered from the start state's), its quantile and
    mean from one final certification of its schedule (`final_certification`)."""
    scenario = ctx.scenario
    cand = final_certification(ctx, cand)
    lo, hi = cand.dist.quantile_bounds(ctx.omega)
    if ctx.start.started:
        info = {"start_epoch": ctx.start.epoch, "time_spent": ctx.start.time_spent,
                "cost_spent": ctx.start.cost_spent, **info}
    plan = Plan(
        method=method, scenario=scenario.name, feasible=True, datasets=list(ctx.datasets),
        epochs=cand.placement.epochs, cost=cand.placement.cost, time=cand.placement.time,
        loss_quantile=float(hi), loss_mean=float(cand.dist.mean()),
        solve_seconds=time.perf_counter() - t0, omega=ctx.omega, loss_target=ctx.target,
        deadline=ctx.deadline, loss_quantile_bounds=(float(lo), float(hi)),
        info={"placement_gap": cand.placement.gap, "loss_std": cand.dist.std(),
              "segments": [[m, n] for m, n in segments(cand.schedule)], **cand.info, **info},
    )
    check_plan(plan)
    return with_scenario(plan, scenario)

