"""`Policy`: what a run has measured, the law conditioned on its state, the re-planning view of the world as measured,
and the decision after every epoch — its rule's (rules.py), spending the slack certified for the plan (slack.py)."""

from __future__ import annotations

import copy
import math
from dataclasses import replace
from typing import Sequence

from scipy import stats

from ..gap import MeasuredGap
from ..loss import LossModel, loss_model_for
from ..omega import OMEGA_MAX
from ..plan import Epoch, Plan, epoch_cost, epoch_time
from ..planners import Infeasible, Options, make_plan
from ..scenario import Dataset, Scenario, ScenarioError
from ..state import START, RunState
from .decision import Decision
from .rules import ConditionalRule, StoppingRule
from .slack import SOURCES, Slack, check_certificate, promise, slack_for

RUN_DATA = "run-data"  # the one dataset of a re-plan: the run's own data (re-planning never changes it)
CAP = OMEGA_MAX  # the highest level a re-plan is asked for (ω's bound)


class Policy:
    """The closed loop for one plan (depl.adaptive), and what one run has measured so far.

    `loss`: the law decisions condition on (default: the plan's scenario's);
    `rule`: which decisions it may take (a `StoppingRule`; default: the conditional rule's, all of them);
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
                 rule: StoppingRule = ConditionalRule(), samples: float | None = None, method: str = "depl",
                 options: Options | None = None, gap_sd: float = 0.0, slow: dict[str, float] | None = None,
                 slack: float | None = None, gap: MeasuredGap | None = None, certificate: dict | None = None,
                 certificate_source: str | None = None):
        self.plan = plan
        self.scenario = scenario or plan.scenario_object(loss)
        self.loss = loss or loss_model_for(self.scenario)
        self.samples = float(self.scenario.samples(plan.datasets) if samples is None else samples)
        self.phi = self.scenario.phi(self.samples)
        self.target, self.omega = plan.loss_target, promise(plan)
        # the certificate file's JSON, read once into its Certificate (refused where it is not of this plan)
        self.certificate = (None if certificate is None else
                            check_certificate(plan, certificate, certificate_source or "the certificate"))
        self.certificate_source = certificate_source
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
        self.given_slack = slack
        self._slack: dict[str, Slack] = {"slack": SOURCES["given"].read(self)} if slack is not None else {}
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

    def time_of(self, e: Epoch) -> float:  # at the measured speed
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

    def replan(self, state: RunState, level: float) -> list[Epoch] | None:
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
            self._slack["slack"] = slack_for(f, f._initial())
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
        return {"decisions": self.rule.to_json(), "slack": self.slack_record.to_json(), "gap": self.gap_record(),
                "statement": self.statement()}

    def statement(self) -> str:
        """The run's guarantee in words: which part is a confidence (the certificate's), which is marginal (the gap)."""
        return self.slack_record.statement(self.gap)

    def rehearsed_seconds(self, e: Epoch, slow: dict[str, float]) -> float:
        """An epoch's time in the scenario's units where clusters are simulated: its planned T(k) times the
        factor by which `slow` says its cluster runs slower (a rehearsal of a slow node)."""
        return self.planned_time(e) * slow.get(e.cluster, 1.0)

    def step(self, state: RunState, epoch: Epoch, observed: float, seconds: float, rest: Sequence[Epoch], *,
             gap_sd: float | None = None, decide: bool = True) -> tuple[RunState, Decision | None]:
        """One epoch of the closed loop: `epoch` took `seconds` (scenario units) and its model's loss was `observed`
        (with the validation–test gap `gap_sd`); returns the run's state after it and the decision on `rest`, the
        epochs planned after it ("end" when none is; None when `decide` is False: an epoch replayed, skipped or
        diverged).  The simulated loop (`monte_carlo`) and real runs (depl.train.loops.adaptive) both step by it."""
        self.observe(epoch, seconds)
        after = state.after(epoch.model, observed, seconds, self.cost_of(epoch, state.clusters), epoch.cluster)
        if not decide:
            return after, None
        if not rest:
            return after, Decision(after.epoch, observed, math.nan, math.nan, math.nan, "end", ())
        return after, self.decide(after, rest, gap_sd)

    def decide(self, state: RunState, rest: Sequence[Epoch], gap_sd: float | None = None) -> Decision:
        """What to do after `state.epoch` epochs with `rest` still planned (`gap_sd`: as in `stop_probability`):
        the rule's decision (`StoppingRule.decide`); with nothing left, the current model kept."""
        rest = tuple(rest)
        if rest:
            return self.rule.decide(self, state, rest, gap_sd)
        p, obs = self.stop_probability(state, gap_sd), state.last_loss
        return Decision(state.epoch, obs, p, p, obs if obs is not None else math.nan, "continue", rest)

    def initial(self) -> Decision:
        """Before the first epoch: the plan as the run will train it (its data, its clusters' speeds), re-planned
        at ω if it no longer certifies ω (less data after a carved validation split is held out)."""
        d = self._initial()
        if "slack" not in self._slack and not self._planned:  # δ is the plan's before any epoch is measured
            self._slack["slack"] = slack_for(self, d)
        return d

    def _initial(self) -> Decision:
        rest = tuple(self.plan.epochs)
        lo, hi, q = self.probability(rest, START)
        if lo >= self.omega * (1 - 1e-12) and self.fits(rest, START):
            return Decision(0, None, lo, lo, q, "continue", rest)
        why = (f"the plan on the run's data certifies P = {lo:.4g} < ω" if lo < self.omega * (1 - 1e-12) else
               "the plan overruns the deadline at the clusters' speeds")
        new = self.replan(START, self.omega)
        if new is not None and self.fits(new, START):
            nlo, _, nq = self.probability(new, START)
            return Decision(0, None, lo, nlo, nq, "replan", tuple(new), self.rest_cost(rest, ()) - self.rest_cost(new, ()),
                            why + "; re-planned at ω")
        return Decision(0, None, lo, lo, q, "deadline-miss", rest, 0.0,
                        f"the plan on the run's data certifies P = {lo:.4g} < ω and no re-plan reaches ω")


