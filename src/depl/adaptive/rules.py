"""The closed loop's rules: what a run may do after an epoch, one class each behind `StoppingRule` (as Optuna's
pruners: one call a decision), registered by the name a run passes (`--rule`) in `RULES`.

* `SlackRule` ("slack", the default of `depl run --adaptive`): stops that spend the plan's certified slack δ, and a
  deadline's re-plan; nothing else changes the plan.  Its guarantee rests on the open-loop certificate and the
  validation–test gap alone.
* `ConditionalRule` ("conditional"): also the stops, cuts (`truncate`) and re-plans (`replan`) the loss law
  conditioned on the run says are no less likely to succeed than the rest of the plan.
* `NaiveRule` (the Python API only): the conditional rule accepting any rest at conditional P ≥ ω — the unsound
  rule, kept to show that it is (tests/test_adaptive.py).

docs/adaptive.md has the argument for each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Protocol

from .decision import Decision

if TYPE_CHECKING:
    from ..plan import Epoch
    from ..state import RunState
    from .policy import Policy


class StoppingRule(Protocol):
    """A closed loop's rule: after `state.epoch` epochs with `rest` (not empty) still planned, what to do."""

    name: str

    def decide(self, policy: Policy, state: RunState, rest: tuple[Epoch, ...], gap_sd: float | None) -> Decision:
        """The decision on `rest` (`gap_sd`: the validation–test gap's sd of the current model, as in
        `Policy.stop_probability`)."""

    def to_json(self) -> dict:
        """Which decisions the rule may take, as recorded with a run."""


def _risk(policy: Policy, state: RunState, gap_sd: float | None) -> float:
    return policy.stop_risk(state, gap_sd) if state.started else 1.0


def slack_stop(policy: Policy, state: RunState, rest: tuple[Epoch, ...], risk: float) -> Decision | None:
    """A stop that spends at most δ (P(test loss > ℓmax) ≤ δ): sound without the law's conditional statements
    (depl.adaptive); None when the current model is not that sure."""
    obs = state.last_loss
    if obs is None or risk > policy.slack:
        return None
    lo, q = policy.probability(rest, state)[0::2] if policy.record else (math.nan, math.nan)
    gap = f"the gap measured on {policy.gap.seeds} seeds" if policy.gap is not None else "the gap modelled"
    return Decision(state.epoch, obs, lo, 1.0 - risk, obs, "stop", (), policy.rest_cost(rest, state.clusters),
                    f"P(test loss > ℓmax) = {risk:.3g} ≤ δ = {policy.slack:.3g}, the plan's slack "
                    f"({policy.slack_record.source}; {gap})")


def keep(policy: Policy, state: RunState, rest: tuple[Epoch, ...], lo: float = math.nan,
         q: float = math.nan) -> Decision:
    """Go on with the plan in force (`lo`: its conditional probability, NaN where no action needed it)."""
    return Decision(state.epoch, state.last_loss, lo, lo, q, "continue", rest)


def deadline(policy: Policy, state: RunState, rest: tuple[Epoch, ...], lo: float, hi: float, q: float) -> Decision:
    """The rest overruns Tmax at the measured speeds: re-planned as surely as the plan, else at ω (the guarantee is
    conditional from there), else a recorded miss."""
    old = policy.rest_cost(rest, state.clusters)
    for level, how in ((hi, "as surely as the plan"), (policy.omega, "at ω only (the guarantee is conditional from here)")):
        new = policy.replan(state, level)
        if new is not None and policy.fits(new, state):
            nlo, _, nq = policy.probability(new, state)
            return Decision(state.epoch, state.last_loss, lo, nlo, nq, "deadline-replan", tuple(new),
                            old - policy.rest_cost(new, state.clusters),
                            f"the rest overran the deadline on slow clusters; re-planned {how}")
    need = state.time_spent + sum(policy.time_of(e) for e in rest)
    return Decision(state.epoch, state.last_loss, lo, lo, q, "deadline-miss", tuple(rest), 0.0,
                    f"at the measured speeds the plan ends at {need:.4g} > Tmax = {policy.deadline:g}, "
                    "and no re-plan meets the loss target by then")


@dataclass(frozen=True)
class SlackRule:
    """Stops that spend the plan's slack δ only, and a deadline's re-plan: the closed loop whose guarantee rests on the
    open-loop certificate alone."""

    name = "slack"

    def decide(self, policy: Policy, state: RunState, rest: tuple[Epoch, ...], gap_sd: float | None) -> Decision:
        stop = slack_stop(policy, state, rest, _risk(policy, state, gap_sd))
        if stop is not None:
            return stop
        if not policy.record and policy.fits(rest, state):
            return keep(policy, state, rest)  # only a stop could change the rest: the plan's probability is not needed
        lo, hi, q = policy.probability(rest, state)
        if not policy.fits(rest, state):
            return deadline(policy, state, rest, lo, hi, q)
        return keep(policy, state, rest, lo, q)

    def to_json(self) -> dict:
        return {"conditional": False, "truncate": False, "replan": False, "naive": False}


@dataclass(frozen=True)
class ConditionalRule:
    """Decide on the law's conditional statements too: stop, cut the plan short (`truncate`) or re-plan its rest
    through the planner (`replan`) wherever what replaces the rest is no less likely to succeed, and costs less."""

    truncate: bool = True
    replan: bool = True
    name = "conditional"
    spends_slack = True   # the stops that spend δ are taken first

    def bar(self, policy: Policy, hi: float) -> float:
        """The conditional probability a replacement must reach: the plan's (its upper bound `hi`)."""
        return hi

    def decide(self, policy: Policy, state: RunState, rest: tuple[Epoch, ...], gap_sd: float | None) -> Decision:
        risk = _risk(policy, state, gap_sd)
        stop = slack_stop(policy, state, rest, risk) if self.spends_slack else None
        if stop is not None:
            return stop
        p_stop, obs = 1.0 - risk, state.last_loss
        if not policy.record and not (self.truncate or self.replan) and p_stop < 1.0 and policy.fits(rest, state):
            return keep(policy, state, rest)  # only a sure stop could be taken (p_stop ≥ any p): no p needed
        lo, hi, q = policy.probability(rest, state)
        if not policy.fits(rest, state):
            return deadline(policy, state, rest, lo, hi, q)
        bar = self.bar(policy, hi)
        old_cost = policy.rest_cost(rest, state.clusters)
        if obs is not None and p_stop >= bar:
            return Decision(state.epoch, obs, lo, p_stop, obs, "stop", (), old_cost,
                            "the current model meets ℓmax as surely as the rest of the plan would")
        for new, how in self.candidates(policy, state, rest, bar):
            nlo, _, nq = policy.probability(new, state)
            new_cost = policy.rest_cost(new, state.clusters)
            if nlo >= bar and new_cost < old_cost * (1 - 1e-9) and policy.fits(new, state):
                return Decision(state.epoch, obs, lo, nlo, nq, "replan", tuple(new), old_cost - new_cost,
                                f"{how}: {len(new)} epochs at conditional P ≥ {bar:.4g}")
        return keep(policy, state, rest, lo, q)

    def candidates(self, policy: Policy, state: RunState, rest: tuple[Epoch, ...],
                   level: float) -> Iterator[tuple[tuple[Epoch, ...] | list[Epoch], str]]:
        """Cheaper rests to try, cheapest first: the plan cut short, then the planner's."""
        if self.truncate and len(rest) > 1:
            # the shortest cut that reaches `level`, by bisection (a cut's probability mostly grows with its
            # length; where it does not, bisection only misses a saving: each cut is checked on its own)
            lo, hi = 1, len(rest) - 1
            if policy.probability(rest[:hi], state)[0] >= level:
                while lo < hi:
                    mid = (lo + hi) // 2
                    if policy.probability(rest[:mid], state)[0] >= level:
                        hi = mid
                    else:
                        lo = mid + 1
                yield rest[:hi], f"the plan cut after epoch {rest[hi - 1].epoch}"
        if self.replan:
            new = policy.replan(state, level)
            if new is not None:
                yield new, f"re-planned by {policy.method}"

    def to_json(self) -> dict:
        return {"conditional": True, "truncate": self.truncate, "replan": self.replan, "naive": False}


@dataclass(frozen=True)
class NaiveRule(ConditionalRule):
    """The tempting rule: any rest whose conditional probability is ≥ ω (not ≥ the plan's), and no slack stops.  It
    spends on the lucky runs the slack that paid for the unlucky ones: unsound, kept to show that it is."""

    name = "naive"
    spends_slack = False

    def bar(self, policy: Policy, hi: float) -> float:
        return min(hi, policy.omega)

    def to_json(self) -> dict:
        return {**super().to_json(), "naive": True}


# the rules a run may name (`--rule`); docs/adaptive.md has why slack is the default
RULES: dict[str, type[StoppingRule]] = {"slack": SlackRule, "conditional": ConditionalRule}
DEFAULT_RULE = "slack"


def rule_named(name: str) -> StoppingRule:
    """The rule a run names, with its defaults; ValueError naming the choices for another name."""
    try:
        return RULES[name]()
    except KeyError:
        raise ValueError(f"rule {name!r}: expected one of {', '.join(RULES)}") from None
