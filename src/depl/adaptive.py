"""The closed loop: after every epoch, keep the plan, stop, or re-plan the rest — without weakening the guarantee.

A plan promises P(ℓ(K) ≤ ℓmax) ≥ ω before training.  During a run the loss
is observed after every epoch (on a validation split, depl.train.adaptive),
and the loss law conditions on it (`LossModel.distribution(..., start=state)`):
p(π | state) = P(ℓ_final ≤ ℓmax | the run's state, the rest π is trained).

**The rule** (docs/adaptive.md has the argument): an action may replace the
rest π of the plan by π' (stop = the empty rest, keeping the current model)
only if

    p(π' | state) ≥ p(π | state)            (certified: π's upper bound, π''s lower bound)

and it is taken only when π' is cheaper.  With V_k the conditional success
probability of the plan in force after epoch k, V is a martingale between
decisions (the law is right) and jumps up at them, so P(success) = E[V_K] ≥
V_0 = p(plan) ≥ ω: the open-loop guarantee holds marginally.  The tempting rule
"any continuation whose conditional probability is ≥ ω" does not keep it (it
spends on the lucky runs the slack that paid for the unlucky ones); the Monte
Carlo of `monte_carlo` shows both (tests/test_adaptive.py).

**Spending the plan's slack on stops.**  A plan whose success probability is
certified at least L > ω with confidence 1 − α has δ = L − ω to spare (`Slack`):
L = ω′ where the planner certified the plan at a stricter ω′ = ω + D through the
calibration runs' fixed sequence (`depl plan --slack D`), or L = the anytime lower
bound of fresh runs of the plan (a `depl certify` certificate) — never a bound read
after the planner's choice from the runs that made it, which the fixed sequence
does not protect; δ = 0 otherwise.  A run may also stop when the current model's test
loss exceeds ℓmax with probability at most δ (1 − P(stop) ≤ δ): a run stops
once, so the stops lose at most δ of the open loop's success probability,
P(success) ≥ L − δ = ω — an argument that needs the open-loop certificate
and the validation–test gap (measured on runs that log both losses,
depl.gap; else modelled from sample counts), not the law's conditional
statements (docs/adaptive.md).  Without it a tight plan saves nothing: its
runs cross ℓmax only in their last epochs, where P(stop) is about ½.

**Deadlines.** Epoch times are measured in the scenario's units (a cluster
running `f` times slower than the scenario says takes f·T(k)); when the rest
no longer fits in Tmax minus the time spent, the rest is re-planned on the
clusters as measured — at p(π) if reachable (sound), else at ω (the guarantee
from here on is then conditional), else the run goes on with a recorded notice
that the deadline cannot be met.

Kept below the training code (no torch): the policy is pure computation, and
`monte_carlo` checks it on the law itself.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Sequence

import numpy as np
from scipy import stats

from .certificate import DEFAULT_ALPHA, Certificate, Kind, anytime_lower
from .gap import MeasuredGap
from .loss import LossModel, loss_model_for
from .omega import OMEGA_MAX
from .plan import Epoch, Plan, epoch_cost, epoch_time
from .planners import Infeasible, Options, make_plan
from .scenario import Dataset, Scenario, ScenarioError
from .state import START, RunState
from .validate import coverage as measured_coverage  # one Clopper–Pearson for the Monte Carlo and for real runs

ACTIONS = ("continue", "stop", "replan", "deadline-replan", "deadline-miss", "end")
RUN_DATA = "run-data"  # the one dataset of a re-plan: the run's own data (re-planning never changes it)
CAP = OMEGA_MAX  # the highest level a re-plan is asked for (ω's bound)


@dataclass(frozen=True)
class Decision:
    """What the policy did after `epoch` (0: before the first epoch)."""

    epoch: int
    observed: float | None   # the loss observed after the epoch (validation split in a real run)
    p_plan: float            # P(ℓ_final ≤ ℓmax | state) of the plan in force (certified lower bound)
    p_new: float             # ... of what the decision keeps (= p_plan for continue)
    quantile: float          # the conditional ω-quantile of ℓ_final under what is kept (upper bound)
    action: str              # one of ACTIONS
    rest: tuple[Epoch, ...]  # the remaining epochs after the decision
    saved: float = 0.0       # cost of the old rest − cost of the new one
    note: str = ""

    def to_json(self) -> dict:
        return {"epoch": self.epoch, "observed": self.observed, "p_plan": self.p_plan, "p_new": self.p_new,
                "quantile": self.quantile, "action": self.action, "saved": self.saved, "note": self.note,
                "rest": [[e.epoch, e.model, e.cluster, e.compute] for e in self.rest]}


@dataclass(frozen=True)
class Rule:
    """Which decisions the closed loop may take (the module's docstring; docs/adaptive.md).

    `conditional`: decide on the law's conditional statements (stop, cut, re-plan wherever the rest is no less
    likely to succeed); False keeps only the stops that spend the slack and a deadline's re-plan: the closed
    loop whose guarantee rests on the open-loop certificate alone.  `truncate`: consider ending the plan after
    fewer of its epochs; `replan`: look for a cheaper rest through the planner; `naive`: accept a rest at
    conditional P ≥ ω instead of ≥ the plan's (the unsound rule, kept to show that it is)."""

    conditional: bool = True
    truncate: bool = True
    replan: bool = True
    naive: bool = False


@dataclass(frozen=True)
class Slack:
    """δ, the success probability a run's stops may spend, and what certifies it (recorded with the run).

    Only slack certified for the plan the run trains counts — nothing read after the planner's choice from the
    runs that made it:

    * "plan": the calibrated planner certified the plan at ω′ = ω + D by the calibration runs' fixed sequence
      (`depl plan --slack D`: `info.certificate.omega_certified` = ω′, `promise` = ω): δ = ω′ − ω = D, with
      confidence 1 − α over the calibration runs — the fixed sequence covers the choice among schedules;
    * "certificate": fresh runs of the plan (`depl certify`, its certificate file: runs made after the choice):
      δ = max(0, L − ω), L the anytime-valid lower bound at the certificate's α;
    * "given": δ set by the caller (the Python API, the law's Monte Carlo): **not certified**;
    * "none": no certified slack (`why`): δ = 0.

    `lower` is ω′ (plan) or L (certificate); `omega` the promise ω."""

    delta: float
    source: str
    lower: float | None = None   # ω′ or L: the level certified, with confidence 1 − α, that the stops spend down to ω
    alpha: float | None = None   # the level of that confidence
    runs: int | None = None      # the runs it is counted on ...
    met: int | None = None       # ... and how many of them met ℓmax
    omega: float | None = None   # the promise ω
    why: str | None = None       # "none": why there is no certified slack; "certificate": the file

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    def describe(self) -> str:
        """δ and where it comes from, in words (the run's header, a stop's note)."""
        if self.source == "given":
            return f"δ = {self.delta:.4g}, given by the caller: not certified"
        if self.source == "none":
            return f"δ = 0, no certified slack: {self.why}"
        if self.source == "plan":
            return (f"δ = {self.delta:.4g} = ω′ − ω: the plan is certified at ω′ = {self.lower:g} by the calibration "
                    f"runs' fixed sequence with confidence {1 - self.alpha:g} ({self.met} of {self.runs} runs of its "
                    f"schedule met ℓmax); it promises ω = {self.omega:g}")
        head = f"δ = {self.delta:.4g} = L − ω" if self.delta > 0 else f"δ = 0, no slack (L < ω = {self.omega:g})"
        return (f"{head}: L = {self.lower:.4f}, the anytime-valid lower bound at α = {self.alpha:g} from {self.met} "
                f"of {self.runs} fresh runs of this plan meeting ℓmax (its certificate{', ' + self.why if self.why else ''})")

    def statement(self, gap: MeasuredGap | None = None) -> str:
        """What a run by this slack is promised, saying which part is a confidence and which is marginal."""
        if self.source == "none" or self.delta <= 0:
            return (f"no certified slack: no stop spends any (δ = 0), the run keeps the plan's own guarantee "
                    f"P(ℓ_test ≤ ℓmax) ≥ ω = {self.omega if self.omega is not None else math.nan:g}")
        if gap is not None:
            risk = (f"each stop's risk P(test loss > ℓmax) ≤ δ bounded marginally over the {gap.seeds} gap runs "
                    "(split conformal: on average over the draw of those runs)")
        else:
            risk = ("each stop's risk P(test loss > ℓmax) ≤ δ under the modelled Gaussian gap (not measured: "
                    "holds only if the model is right)")
        if self.source == "given":
            return f"δ = {self.delta:.4g} given, not certified: nothing backs P(success) ≥ ω; {risk}"
        whose = ("the calibration runs (the planner's fixed sequence)" if self.source == "plan"
                 else f"the certificate's {self.runs} fresh runs")
        return (f"with confidence {1 - self.alpha:g} over {whose}, P(success) ≥ {self.lower:.4g} for the plan; the "
                f"stops spend at most δ = {self.delta:.4g}, {risk}; so P(ℓ_test ≤ ℓmax) ≥ ω = {self.omega:g}")


def promise(plan: Plan) -> float:
    """The ω a plan promises: its quantile, or, for a plan certified at a stricter ω′ to leave slack (`depl plan
    --slack`), the `promise` its certificate records."""
    c = Certificate.of_plan(plan.info)
    return c.promise if c is not None and c.promise is not None else plan.omega


def check_certificate(plan: Plan, cert: dict, source: str = "the certificate") -> Certificate:
    """The `depl certify` certificate `cert` holds, or ValueError naming the field where it is not one (kind
    sequential) or not of this plan: its scenario, method, ℓmax, ω and epochs must be the plan's (the run id of its
    runs is checked where the job is known)."""
    c = Certificate.from_json(cert, source)
    if c.kind is not Kind.SEQUENTIAL:
        raise ValueError(f"{source}: kind = {c.kind.value!r}: expected 'sequential' (a `depl certify` certificate)")
    want = {"scenario": (c.evidence.get("scenario"), plan.scenario), "method": (c.evidence.get("method"), plan.method),
            "loss_target": (c.loss_target, plan.loss_target), "omega": (c.omega, plan.omega),
            "epochs": (c.evidence.get("epochs"), len(plan.epochs))}
    for key, (got, value) in want.items():
        same = (isinstance(got, (int, float)) and math.isclose(float(got), float(value), rel_tol=1e-9, abs_tol=1e-12)
                if isinstance(value, (int, float)) else got == value)
        if not same:
            raise ValueError(f"{source}: {key} = {got!r}, the plan's is {value!r}: a certificate of another plan "
                             "certifies nothing here")
    return c


# the rules a run may name (`--rule`); docs/adaptive.md has why slack is the default
RULES = {"slack": Rule(conditional=False), "conditional": Rule()}
DEFAULT_RULE = "slack"


def rule_named(name: str) -> Rule:
    try:
        return RULES[name]
    except KeyError:
        raise ValueError(f"rule {name!r}: expected one of {', '.join(RULES)}") from None


class Policy:
    """The decision rule for one plan (see the module's docstring), and what one run has measured so far.

    `loss`: the law decisions condition on (default: the plan's scenario's);
    `rule`: which decisions it may take (`Rule`; default: all of the conditional rule's);
    `samples`: the samples the run trains on (a real adaptive run whose
    validation split is carved out of the plan's data: less data, a lower φ);
    `method`, `options`: the planner of its re-plans; `gap`: the validation–test gap measured on runs that
    log both losses (depl.gap.MeasuredGap, at the plan's ℓmax), which a stop's P(test loss > ℓmax) is read from;
    without it, `gap_sd`: the sd of test loss − validation loss of one model in a Gaussian model of the gap (0:
    the observed loss *is* the loss the guarantee is about, as in the law's own Monte Carlo; a real run passes
    each model's from the split's sample counts); `slow`: cluster → factor the policy already knows (it also
    learns factors from `observe`); `slack`: δ, the success probability stops may give up, given by the
    caller and not certified (None: the slack certified for the plan, `Slack`: ω′ − ω of a plan certified at a
    stricter ω′, or L − ω of `certificate`, a `depl certify` certificate of the plan's fresh runs — read from
    `certificate_source` —, else 0; 0: stop only by the conditional rule).  The run's ω is the plan's promise
    (`promise`: its quantile, or the ω a plan certified at ω′ promises).
    """

    def __init__(self, plan: Plan, scenario: Scenario | None = None, loss: LossModel | None = None, *,
                 rule: Rule = Rule(), samples: float | None = None, method: str = "depl",
                 options: Options | None = None, gap_sd: float = 0.0, slow: dict[str, float] | None = None,
                 slack: float | None = None, gap: MeasuredGap | None = None, certificate: dict | None = None,
                 certificate_source: str | None = None):
        self.plan = plan
        self.scenario = scenario or plan.scenario_object(loss)
        self.loss = loss or loss_model_for(self.scenario)
        self.samples = float(self.scenario.samples(plan.datasets) if samples is None else samples)
        self.phi = self.scenario.phi(self.samples)
        self.target, self.omega = plan.loss_target, promise(plan)
        if certificate is not None:
            check_certificate(plan, certificate, certificate_source or "the certificate")
        self.certificate, self.certificate_source = certificate, certificate_source
        self.deadline = self.scenario.target.deadline
        self.rule, self.method = rule, method
        self.record = True  # compute the plan's conditional probability where no action needs it (`simulating`: no)
        self.options = options or Options(eta=60, dataset_candidates=1)
        self.gap_sd = float(gap_sd)
        if gap is not None and not math.isclose(gap.target, self.target, rel_tol=1e-9, abs_tol=1e-12):
            raise ValueError(f"the validation–test gap was measured at ℓmax = {gap.target:g}, the plan's is "
                             f"{self.target:g}: measure it at the plan's (depl.gap.measure)")
        self.gap = gap
        self.slow = dict(slow or {})
        # δ, shared with every `fresh` copy (it is the plan's, before anything is measured): computed once
        self._slack: dict[str, Slack] = {} if slack is None else \
            {"slack": Slack(max(0.0, float(slack)), "given", omega=self.omega)}
        self._planned: dict[str, float] = {}   # scenario seconds planned / measured, per cluster
        self._measured: dict[str, float] = {}

    def fresh(self) -> "Policy":
        """The same policy for another run: nothing measured yet (δ, once known, and the re-planning views kept)."""
        c = copy.copy(self)
        c._planned, c._measured = {}, {}
        return c

    def simulating(self, gap_sd: float) -> "Policy":
        """The policy as the Monte Carlo runs it: the losses observed with a validation split's noise `gap_sd`,
        and nothing computed that no action needs."""
        c = self.fresh()
        c.gap_sd, c.record = float(gap_sd), False
        return c

    # -- the world as measured ------------------------------------------------ #
    def factor(self, cluster: str) -> float:
        """How many times slower than the scenario says `cluster` has run (1 until measured)."""
        if cluster in self._planned and self._planned[cluster] > 0:
            return max(self._measured[cluster] / self._planned[cluster], 1e-9)
        return self.slow.get(cluster, 1.0)

    def planned_time(self, e: Epoch) -> float:
        """T(k) of eq. (1) for epoch `e` on the run's data, as the scenario says."""
        return epoch_time(self.scenario, e.model, e.cluster, e.compute, self.samples)

    def observe(self, e: Epoch, seconds: float) -> None:
        """Record an epoch's measured time, in the scenario's time units."""
        self._planned[e.cluster] = self._planned.get(e.cluster, 0.0) + self.planned_time(e)
        self._measured[e.cluster] = self._measured.get(e.cluster, 0.0) + float(seconds)

    def time_of(self, e: Epoch) -> float:
        return self.planned_time(e) * self.factor(e.cluster)

    def cost_of(self, e: Epoch, paid: Sequence[str] = ()) -> float:
        """Compute cost of `e` (at its measured speed) plus β if its cluster's data is not transferred yet."""
        f = self.factor(e.cluster)
        v = self.view(paid)
        return epoch_cost(v, e.model, e.cluster, e.compute / f, self.samples) + \
            (0.0 if e.cluster in paid else v.transfer_cost([RUN_DATA], e.cluster))

    def rest_cost(self, rest: Sequence[Epoch], paid: Sequence[str]) -> float:
        paid, total = list(paid), 0.0
        for e in rest:
            total += self.cost_of(e, paid)
            if e.cluster not in paid:
                paid.append(e.cluster)
        return total

    def view(self, paid: Sequence[str] = (), quantile: float | None = None) -> Scenario:
        """The scenario a re-plan sees: one dataset (the run's data, β already paid on `paid`), every
        cluster at its measured speed (f times slower: capacity and bandwidth / f, κ·f per unit delivered,
        so that time and cost of an allocation are the real ones), and the target at `quantile`."""
        key = (tuple(paid), quantile, tuple(self.factor(c.name) for c in self.scenario.clusters))
        cache = self.__dict__.setdefault("_views", {})
        if key not in cache:
            cache[key] = self._view(paid, quantile)
        return cache[key]

    def _view(self, paid: Sequence[str], quantile: float | None) -> Scenario:
        """`view`, copied from the validated scenario rather than parsed again (tens of ms a view, one per new
        measured speed): the copy's new numbers are checked here, and its cross-field rules by the scenario's own
        check — a view at a level its calibration cannot certify is refused, as parsing refused it."""
        s = self.scenario
        chosen = [x for x in s.datasets if x.name in self.plan.datasets]
        beta = {c.name: 0.0 if c.name in paid else sum(x.transfer_cost.get(c.name, 0.0) for x in chosen)
                for c in s.clusters}
        clusters = []
        for c in s.clusters:
            f = self.factor(c.name)
            scaled = dict(capacity=c.capacity / f, bandwidth=c.bandwidth / f, unit_cost=c.unit_cost * f)
            bad = [k for k, v in scaled.items() if not 0.0 < v < math.inf]
            if bad:
                raise ScenarioError(f"the re-planning view: clusters.{c.name}.{bad[0]} = {scaled[bad[0]]!r} at a "
                                    f"measured slowdown of {f:g}: not a positive finite number")
            clusters.append(c.model_copy(update=scaled))
        update = {"datasets": [Dataset(name=RUN_DATA, samples=self.samples, transfer_cost=beta)], "clusters": clusters}
        if quantile is not None:
            update["target"] = s.target.model_copy(update={"quantile": quantile})  # within [1e-6, CAP]: `_replan`
        v = s.model_copy(update=update)
        try:
            v._cross_references()  # the scenario's after-validator: what a copy does not run
        except ValueError as e:
            raise ScenarioError(f"the re-planning view: {e}") from None
        return v

    # -- the law, conditioned ------------------------------------------------ #
    def stop_probability(self, state: RunState, gap_sd: float | None = None) -> float:
        """P(test loss of the current model ≤ ℓmax | state): the observed loss, up to the validation–test gap —
        the measured one's conformal bound (`gap`, depl.gap: 0 above ℓmax), else the Gaussian model's (`gap_sd`:
        this model's, from the validation split's sample counts; None: the policy's)."""
        return 1.0 - self.stop_risk(state, gap_sd)

    def stop_risk(self, state: RunState, gap_sd: float | None = None) -> float:
        """P(test loss of the current model > ℓmax | state) (`stop_probability`'s complement, computed directly: a
        stop compares it with δ)."""
        last = state.last_loss
        gap = self.gap_sd if gap_sd is None else gap_sd
        if last is None:
            return 1.0
        if self.gap is not None:
            return self.gap.exceed(last)
        if gap <= 0:
            return 0.0 if last <= self.target else 1.0
        return float(stats.norm.sf((self.target - last) / gap))

    def probability(self, rest: Sequence[Epoch], state: RunState) -> tuple[float, float, float]:
        """(lower, upper) bounds of P(ℓ_final ≤ ℓmax | state) if `rest` is trained, and the conditional
        ω-quantile's upper bound."""
        if not rest:
            p = self.stop_probability(state)
            return p, p, state.last_loss if state.last_loss is not None else math.nan
        try:
            d = self.loss.distribution([e.model for e in rest], self.phi, start=state if state.started else None)
            lo, hi = d.cdf_bounds(self.target)
            q = float(d.quantile_bounds(self.omega)[1])
        except (ValueError, OverflowError, FloatingPointError):
            # the law cannot be conditioned on this state (a loss outside every loss it allows, e.g. a calibrated
            # law's early epochs, whose levels sit at 0 or 1): it says nothing, so nothing may replace the plan —
            # [0, 1] makes every replacement and every stop short of a sure one fail the bar
            return 0.0, 1.0, math.nan
        if not (math.isfinite(lo) and math.isfinite(hi)):
            return 0.0, 1.0, math.nan
        return float(lo), float(hi), q

    def fits(self, rest: Sequence[Epoch], state: RunState) -> bool:
        return state.time_spent + sum(self.time_of(e) for e in rest) <= self.deadline * (1 + 1e-9)

    def _replan(self, state: RunState, level: float) -> list[Epoch] | None:
        """The planner's cheapest rest from `state` certified at `level`, on the world as measured; None if none."""
        try:
            q = make_plan(self.view(state.clusters, min(max(level, 1e-6), CAP)), self.method, self.options,
                          loss=self.loss, start=state)
        except (Infeasible, ValueError):
            return None
        if not q.feasible:
            return None
        # allocations back to the real cluster's units (the view counts compute delivered)
        return [replace(e, compute=e.compute * self.factor(e.cluster)) for e in q.epochs]

    @property
    def slack(self) -> float:
        """δ = max(0, L − ω): the success probability a stop may give up (`slack_record`)."""
        return self.slack_record.delta

    @property
    def slack_record(self) -> Slack:
        """δ and what it rests on (`Slack`: L, the lower confidence bound of `initial`'s plan's success
        probability).  Fixed before the first epoch: read first after epochs were observed (a resumed seed's new
        policy), it is still the plan's at the speeds known before the run (those of a `fresh` copy), not a
        re-plan's at the measured ones."""
        if "slack" not in self._slack:
            f = self.fresh()
            self._slack["slack"] = f._delta(f._initial())
        return self._slack["slack"]

    def gap_record(self) -> dict:
        """The validation–test gap a stop allows for, as recorded with the run."""
        if self.gap is not None:
            out = self.gap.to_json()
            t = self.gap.threshold(self.slack)
            out["threshold"] = t if math.isfinite(t) else None  # a stop needs the validation loss below ℓmax − this
            return out
        return {"model": "sampling", "note": "not measured: test − validation ~ N(0, gap_sd²), gap_sd from the "
                "per-sample loss sd on the validation split × √(1/n_val + 1/n_test), each model's"}

    def rule_record(self) -> dict:
        """What decides a run's stops, as recorded with it (the run's spec, its epoch-0 decisions): which decisions
        it may take, δ and its source, the gap model and where it was measured."""
        return {"decisions": asdict(self.rule), "slack": self.slack_record.to_json(), "gap": self.gap_record(),
                "statement": self.statement()}

    def statement(self) -> str:
        """The run's guarantee in words: which part is a confidence (the certificate's), which is marginal (the gap)."""
        return self.slack_record.statement(self.gap)

    # -- the decision --------------------------------------------------------- #
    def rehearsed_seconds(self, e: Epoch, slow: dict[str, float]) -> float:
        """An epoch's time in the scenario's units where clusters are simulated: its planned T(k) times the
        factor by which `slow` says its cluster runs slower (a rehearsal of a slow node)."""
        return self.planned_time(e) * slow.get(e.cluster, 1.0)

    def step(self, state: RunState, epoch: Epoch, observed: float, seconds: float, rest: Sequence[Epoch], *,
             gap_sd: float | None = None, decide: bool = True) -> tuple[RunState, Decision | None]:
        """One epoch of the closed loop: `epoch` took `seconds` (scenario units) and its model's loss was `observed`
        (with the validation–test gap `gap_sd`); returns the run's state after it and the decision on `rest`, the
        epochs planned after it ("end" when none is; None when `decide` is False: an epoch replayed, skipped or
        diverged).  The simulated loop (`monte_carlo`) and real runs (depl.train.adaptive) both step by it."""
        self.observe(epoch, seconds)
        after = state.after(epoch.model, observed, seconds, self.cost_of(epoch, state.clusters), epoch.cluster)
        if not decide:
            return after, None
        if not rest:
            return after, Decision(after.epoch, observed, math.nan, math.nan, math.nan, "end", ())
        return after, self.decide(after, rest, gap_sd)

    def decide(self, state: RunState, rest: Sequence[Epoch], gap_sd: float | None = None) -> Decision:
        """What to do after `state.epoch` epochs with `rest` still planned (`gap_sd`: as in `stop_probability`)."""
        rest = tuple(rest)
        obs = state.last_loss
        rule = self.rule
        if not rest:
            p = self.stop_probability(state, gap_sd)
            return Decision(state.epoch, obs, p, p, obs if obs is not None else math.nan, "continue", rest)
        risk = self.stop_risk(state, gap_sd) if state.started else 1.0
        p_stop = 1.0 - risk
        if obs is not None and not rule.naive and risk <= self.slack:
            # a stop that spends at most δ: sound without the law's conditional statements (module docstring)
            lo, q = self.probability(rest, state)[0::2] if self.record else (math.nan, math.nan)
            gap = f"the gap measured on {self.gap.seeds} seeds" if self.gap is not None else "the gap modelled"
            return Decision(state.epoch, obs, lo, p_stop, obs, "stop", (), self.rest_cost(rest, state.clusters),
                            f"P(test loss > ℓmax) = {risk:.3g} ≤ δ = {self.slack:.3g}, the plan's slack "
                            f"({self.slack_record.source}; {gap})")
        if not self.record and not (rule.truncate or rule.replan) and (p_stop < 1.0 or not rule.conditional) \
                and self.fits(rest, state):
            # only a sure stop could be taken (p_stop ≥ any p): the plan's own probability is not needed
            return Decision(state.epoch, obs, math.nan, math.nan, math.nan, "continue", rest)
        lo, hi, q = self.probability(rest, state)
        if not self.fits(rest, state):
            return self._deadline(state, rest, lo, hi, q)
        bar = min(hi, self.omega) if rule.naive else hi  # what a replacement must reach
        old_cost = self.rest_cost(rest, state.clusters)
        if obs is not None and p_stop >= bar and rule.conditional:
            return Decision(state.epoch, obs, lo, p_stop, obs, "stop", (), old_cost,
                            "the current model meets ℓmax as surely as the rest of the plan would")
        for new, how in self._candidates(state, rest, bar) if rule.conditional else ():
            nlo, _, nq = self.probability(new, state)
            new_cost = self.rest_cost(new, state.clusters)
            if nlo >= bar and new_cost < old_cost * (1 - 1e-9) and self.fits(new, state):
                return Decision(state.epoch, obs, lo, nlo, nq, "replan", tuple(new), old_cost - new_cost,
                                f"{how}: {len(new)} epochs at conditional P ≥ {bar:.4g}")
        return Decision(state.epoch, obs, lo, lo, q, "continue", rest)

    def _candidates(self, state: RunState, rest: tuple[Epoch, ...], level: float):
        """Cheaper rests to try, cheapest first: the plan cut short, then the planner's."""
        if self.rule.truncate and len(rest) > 1:
            # the shortest cut that reaches `level`, by bisection (a cut's probability mostly grows with its
            # length; where it does not, bisection only misses a saving: each cut is checked on its own)
            lo, hi = 1, len(rest) - 1
            if self.probability(rest[:hi], state)[0] >= level:
                while lo < hi:
                    mid = (lo + hi) // 2
                    if self.probability(rest[:mid], state)[0] >= level:
                        hi = mid
                    else:
                        lo = mid + 1
                yield rest[:hi], f"the plan cut after epoch {rest[hi - 1].epoch}"
        if self.rule.replan:
            new = self._replan(state, level)
            if new is not None:
                yield new, f"re-planned by {self.method}"

    def _deadline(self, state: RunState, rest, lo: float, hi: float, q: float) -> Decision:
        old = self.rest_cost(rest, state.clusters)
        for level, how in ((hi, "as surely as the plan"), (self.omega, "at ω only (the guarantee is conditional from here)")):
            new = self._replan(state, level)
            if new is not None and self.fits(new, state):
                nlo, _, nq = self.probability(new, state)
                return Decision(state.epoch, state.last_loss, lo, nlo, nq, "deadline-replan", tuple(new),
                                old - self.rest_cost(new, state.clusters),
                                f"the rest overran the deadline on slow clusters; re-planned {how}")
        need = state.time_spent + sum(self.time_of(e) for e in rest)
        return Decision(state.epoch, state.last_loss, lo, lo, q, "deadline-miss", tuple(rest), 0.0,
                        f"at the measured speeds the plan ends at {need:.4g} > Tmax = {self.deadline:g}, "
                        "and no re-plan meets the loss target by then")

    def initial(self) -> Decision:
        """Before the first epoch: the plan as the run will train it (its data, its clusters' speeds), re-planned
        at ω if it no longer certifies ω (less data after a carved validation split is held out)."""
        d = self._initial()
        if "slack" not in self._slack and not self._planned:  # δ is the plan's before any epoch is measured
            self._slack["slack"] = self._delta(d)
        return d

    def _delta(self, d: Decision) -> Slack:
        """δ for what `initial` decided to run (`Slack`): only slack certified for the plan returned — its
        certificate file's fresh runs (L − ω), else the stricter level ω′ the planner certified it at (ω′ − ω),
        else none.  Either holds only where the run trains the plan as certified: the plan itself, on its own
        data (a carved validation split trains less data, a re-plan another schedule: no slack)."""
        w = self.omega
        if d.action == "deadline-miss":
            return Slack(0.0, "none", omega=w, why="the plan cannot be run as certified (no re-plan meets the deadline)")
        if self.scenario.calibration_mismatch():  # calibration runs of another draw certify nothing here: no slack
            return Slack(0.0, "none", omega=w, why="the plan's calibration runs are of another data draw")
        plan_phi = self.scenario.phi(self.scenario.samples(self.plan.datasets))
        as_certified = (d.action == "continue" and list(d.rest) == list(self.plan.epochs)
                        and math.isclose(plan_phi, self.phi, rel_tol=1e-6))
        c = Certificate.of_plan(self.plan.info)
        stricter = c is not None and c.promise is not None
        if self.certificate is None and not stricter:
            return Slack(0.0, "none", omega=w, why="the plan was certified at its ω only (plan with `depl plan "
                         "--slack D` to certify ω + D, or give `--certificate FILE` of its fresh runs)")
        if not as_certified:
            return Slack(0.0, "none", omega=w, why="the run does not train the plan as certified (" + (
                d.note or "another φ: a carved validation split trains on less data") + ")")
        if self.certificate is not None:
            k = self.certificate
            lower = anytime_lower(int(k["hits"]), int(k["runs"]), float(k["alpha"]))
            return Slack(max(0.0, lower - w), "certificate", lower, float(k["alpha"]), int(k["runs"]),
                         int(k["hits"]), w, self.certificate_source)
        high = c.omega
        if not (c.certified and math.isclose(high, self.plan.omega, rel_tol=1e-12)):
            return Slack(0.0, "none", omega=w, why=f"the plan's certificate does not certify ω′ = {high:g} "
                         f"(certified: {c.certified}, the plan's quantile {self.plan.omega:g})")
        return Slack(max(0.0, high - w), "plan", high, c.alpha, c.runs, c.hits, w)

    def _initial(self) -> Decision:
        rest = tuple(self.plan.epochs)
        lo, hi, q = self.probability(rest, START)
        if lo >= self.omega * (1 - 1e-12) and self.fits(rest, START):
            return Decision(0, None, lo, lo, q, "continue", rest)
        why = (f"the plan on the run's data certifies P = {lo:.4g} < ω" if lo < self.omega * (1 - 1e-12) else
               "the plan overruns the deadline at the clusters' speeds")
        new = self._replan(START, self.omega)
        if new is not None and self.fits(new, START):
            nlo, _, nq = self.probability(new, START)
            return Decision(0, None, lo, nlo, nq, "replan", tuple(new), self.rest_cost(rest, ()) - self.rest_cost(new, ()),
                            why + "; re-planned at ω")
        return Decision(0, None, lo, lo, q, "deadline-miss", rest, 0.0,
                        f"the plan on the run's data certifies P = {lo:.4g} < ω and no re-plan reaches ω")


# --------------------------------------------------------------------------- #
# The policy checked on the law itself
# --------------------------------------------------------------------------- #

@dataclass
class MonteCarlo:
    """Closed loop against open loop on the same simulated runs of the law."""

    final: np.ndarray         # ℓ_final per run, closed loop
    cost: np.ndarray          # its cost
    open_final: np.ndarray    # the plan's ℓ(K) on the same runs' draws
    open_cost: float
    actions: dict[str, int] = field(default_factory=dict)
    target: float = 0.0
    omega: float = 0.0
    alpha: float = DEFAULT_ALPHA   # the plan's α: the confidence of `interval`'s bounds

    @property
    def coverage(self) -> float:
        return float(np.mean(self.final <= self.target))

    @property
    def open_coverage(self) -> float:
        return float(np.mean(self.open_final <= self.target))

    def interval(self, closed: bool = True) -> tuple[float, float]:
        """The one-sided (1 − α) Clopper–Pearson bounds of the closed (or open) loop's coverage at the plan's α, as
        `depl validate` computes them."""
        return measured_coverage(self.final if closed else self.open_final, self.target, self.omega, self.alpha).ci


def monte_carlo(policy: Policy, runs: int, seed: int = 0, *, every: int = 1,
                slow: dict[str, float] | None = None, gap: float = 0.0) -> MonteCarlo:
    """Simulate `runs` runs of the law along the plan, the policy deciding after every `every`-th epoch.

    A run follows the plan's simulated trajectory until a decision changes
    its rest; it then continues by the law conditioned on its state
    (`simulate(..., start=state)`, exact for the laws here).  `slow`: the
    clusters that really run slower (the policy learns it from the epoch times).
    `gap`: the policy observes each epoch's loss plus N(0, gap²) noise (a validation split's) and
    knows gap as its `gap_sd`; the run's outcome is the loss itself (its test loss).  (A run whose rest
    changes goes on from its state as observed: with gap > 0, from a noisy loss.)"""
    rng = np.random.default_rng(seed)
    noise = np.random.default_rng([seed, 1])  # the observation noise: its own stream, the paths stay the same
    sim = policy.simulating(gap)
    plan, loss, phi = policy.plan, policy.loss, policy.phi
    paths = loss.simulate(plan.schedule, phi, runs, rng)
    slow = slow or {}
    finals, costs, actions = np.empty(runs), np.empty(runs), {}
    for i in range(runs):
        run = sim.fresh()
        rest, path, at, state, true = list(plan.epochs), paths[i], 0, START, math.nan
        while rest:
            e, rest = rest[0], rest[1:]
            true = float(path[state.epoch + 1 - at])
            seen = true + gap * float(noise.standard_normal()) if gap > 0 else true
            state, d = run.step(state, e, seen, run.rehearsed_seconds(e, slow), rest,
                                decide=bool(rest) and (state.epoch + 1) % every == 0)
            if d is None:
                continue
            actions[d.action] = actions.get(d.action, 0) + 1
            if d.action == "stop":
                break
            if list(d.rest) != list(rest):
                rest, at = list(d.rest), state.epoch
                path = loss.simulate([x.model for x in rest], phi, 1, rng, start=state)[0]
        finals[i], costs[i] = true, state.cost_spent
    return MonteCarlo(finals, costs, paths[:, -1], float(plan.cost), actions, policy.target, policy.omega, plan.alpha)


def simulated_gap(policy: Policy, runs: int, gap: float, seed: int = 0) -> MeasuredGap:
    """The validation–test gap as depl.gap measures it on real runs, measured instead on `runs` runs of the law along
    the plan whose losses are observed through N(0, gap²) noise (as `monte_carlo(gap=)` observes them): per run, its
    largest test − validation loss over the epochs whose validation loss is ≤ ℓmax."""
    rng = np.random.default_rng([seed, 5])
    test = policy.loss.simulate(policy.plan.schedule, policy.phi, runs, rng)[:, 1:]
    val = test + gap * rng.standard_normal(test.shape)
    most = np.where(val <= policy.target, test - val, -np.inf).max(axis=1)
    return MeasuredGap(tuple(sorted(float(x) for x in most[np.isfinite(most)])), policy.target, int(test.size),
                       f"{runs} runs of the law observed with gap sd {gap:g}")
