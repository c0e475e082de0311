"""δ, the success probability a run's stops may spend, and where it comes from: one `SlackSource` per kind of
evidence, registered by name in `SOURCES` (the name a run records as its slack's `source`).

Only slack certified for the plan the run trains counts — nothing read after the planner's choice from the runs
that made it (docs/adaptive.md):

* "plan" (`PlanLevel`): the calibrated planner certified the plan at ω′ = ω + D by the calibration runs' fixed
  sequence (`depl plan --slack D`: the certificate's ω = ω′, its `promise` = ω): δ = ω′ − ω = D, with
  confidence 1 − α over the calibration runs — the fixed sequence covers the choice among schedules;
* "certificate" (`FreshRuns`): fresh runs of the plan (`depl certify`, its certificate file: runs made after the
  choice): δ = max(0, L − ω), L the anytime-valid lower bound at the certificate's α;
* "given" (`Given`): δ set by the caller (the Python API, the law's Monte Carlo): **not certified**;
* "none" (`NoSlack`): no certified slack (`why`): δ = 0.

`slack_for` asks them in that order for what a run's epoch-0 decision will train.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Protocol

from ..certificate import Certificate, Kind, anytime_lower

if TYPE_CHECKING:
    from ..gap import MeasuredGap
    from ..plan import Plan
    from .decision import Decision
    from .policy import Policy


@dataclass(frozen=True)
class Slack:
    """δ and what certifies it, as recorded with the run: `source` names its `SlackSource` (`SOURCES`); `lower` is
    ω′ (plan) or L (certificate); `omega` the promise ω."""

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
        return SOURCES[self.source].describe(self)

    def statement(self, gap: MeasuredGap | None = None) -> str:
        """What a run by this slack is promised, saying which part is a confidence and which is marginal."""
        if self.delta <= 0:
            return SOURCES["none"].statement(self, "")
        if gap is not None:
            risk = (f"each stop's risk P(test loss > ℓmax) ≤ δ bounded marginally over the {gap.seeds} gap runs "
                    "(split conformal: on average over the draw of those runs)")
        else:
            risk = ("each stop's risk P(test loss > ℓmax) ≤ δ under the modelled Gaussian gap (not measured: "
                    "holds only if the model is right)")
        return SOURCES[self.source].statement(self, risk)


class SlackSource(Protocol):
    """One kind of evidence for δ: whether it has any for a policy's plan, the δ it certifies, and its words."""

    name: str

    def offers(self, policy: Policy) -> bool:
        """Whether this source has slack for the policy's plan (read only if the run trains the plan as certified)."""

    def read(self, policy: Policy) -> Slack:
        """δ for the policy's plan, and what backs it."""

    def describe(self, s: Slack) -> str:
        """δ and where it comes from, in words."""

    def statement(self, s: Slack, risk: str) -> str:
        """What a run spending δ > 0 is promised (`risk`: what bounds each stop's risk)."""


def no_slack(omega: float, why: str) -> Slack:
    return Slack(0.0, "none", omega=omega, why=why)


class NoSlack:
    """δ = 0, and why: nothing certifies slack for the run."""

    name = "none"

    def offers(self, policy: Policy) -> bool:
        return True

    def read(self, policy: Policy) -> Slack:
        return no_slack(policy.omega, "the plan was certified at its ω only (plan with `depl plan --slack D` to "
                        "certify ω + D, or give `--certificate FILE` of its fresh runs)")

    def describe(self, s: Slack) -> str:
        return f"δ = 0, no certified slack: {s.why}"

    def statement(self, s: Slack, risk: str) -> str:
        w = f"{s.omega if s.omega is not None else math.nan:g}"
        if s.why and s.why.startswith(OFF_PLAN):   # the run is not the plan as certified: its guarantee is not this
            return (f"no certified slack: no stop spends any (δ = 0), and no guarantee: {s.why}, so the plan's "
                    f"P(ℓ_test ≤ ℓmax) ≥ ω = {w} is not this run's")
        return (f"no certified slack: no stop spends any (δ = 0), the run keeps the plan's own guarantee "
                f"P(ℓ_test ≤ ℓmax) ≥ ω = {w}")


class Given:
    """δ set by the caller (`Policy(slack=…)`): not certified."""

    name = "given"

    def offers(self, policy: Policy) -> bool:
        return policy.given_slack is not None

    def read(self, policy: Policy) -> Slack:
        return Slack(max(0.0, float(policy.given_slack)), self.name, omega=policy.omega)

    def describe(self, s: Slack) -> str:
        return f"δ = {s.delta:.4g}, given by the caller: not certified"

    def statement(self, s: Slack, risk: str) -> str:
        return f"δ = {s.delta:.4g} given, not certified: nothing backs P(success) ≥ ω; {risk}"


class _Certified:
    """A source that certifies L ≥ ω + δ with confidence 1 − α over runs (`whose`)."""

    def whose(self, s: Slack) -> str:
        raise NotImplementedError

    def statement(self, s: Slack, risk: str) -> str:
        return (f"with confidence {1 - s.alpha:g} over {self.whose(s)}, P(success) ≥ {s.lower:.4g} for the plan; the "
                f"stops spend at most δ = {s.delta:.4g}, {risk}; so P(ℓ_test ≤ ℓmax) ≥ ω = {s.omega:g}")


class FreshRuns(_Certified):
    """A `depl certify` certificate of the plan (`Policy(certificate=…)`): δ = max(0, L − ω), L its anytime-valid
    lower bound."""

    name = "certificate"

    def offers(self, policy: Policy) -> bool:
        return policy.certificate is not None

    def read(self, policy: Policy) -> Slack:
        c, w = policy.certificate, policy.omega
        lower = anytime_lower(c.hits, c.runs, c.alpha)
        return Slack(max(0.0, lower - w), self.name, lower, c.alpha, c.runs, c.hits, w, policy.certificate_source)

    def describe(self, s: Slack) -> str:
        head = f"δ = {s.delta:.4g} = L − ω" if s.delta > 0 else f"δ = 0, no slack (L < ω = {s.omega:g})"
        return (f"{head}: L = {s.lower:.4f}, the anytime-valid lower bound at α = {s.alpha:g} from {s.met} "
                f"of {s.runs} fresh runs of this plan meeting ℓmax (its certificate{', ' + s.why if s.why else ''})")

    def whose(self, s: Slack) -> str:
        return f"the certificate's {s.runs} fresh runs"


class PlanLevel(_Certified):
    """The plan certified at a stricter ω′ by the calibration runs' fixed sequence (`depl plan --slack D`)."""

    name = "plan"

    @staticmethod
    def _certificate(policy: Policy) -> Certificate | None:
        return Certificate.of_plan(policy.plan.info)

    def offers(self, policy: Policy) -> bool:
        c = self._certificate(policy)
        return c is not None and c.promise is not None

    def read(self, policy: Policy) -> Slack:
        c, w, plan = self._certificate(policy), policy.omega, policy.plan
        high = c.omega
        if not (c.certified and math.isclose(high, plan.omega, rel_tol=1e-12)):
            return no_slack(w, f"the plan's certificate does not certify ω′ = {high:g} "
                            f"(certified: {c.certified}, the plan's quantile {plan.omega:g})")
        return Slack(max(0.0, high - w), self.name, high, c.alpha, c.runs, c.hits, w)

    def describe(self, s: Slack) -> str:
        return (f"δ = {s.delta:.4g} = ω′ − ω: the plan is certified at ω′ = {s.lower:g} by the calibration "
                f"runs' fixed sequence with confidence {1 - s.alpha:g} ({s.met} of {s.runs} runs of its "
                f"schedule met ℓmax); it promises ω = {s.omega:g}")

    def whose(self, s: Slack) -> str:
        return "the calibration runs (the planner's fixed sequence)"


# every source by the name a run records; `slack_for` asks the certified ones in this order, `NoSlack` last
SOURCES: dict[str, SlackSource] = {s.name: s for s in (Given(), FreshRuns(), PlanLevel(), NoSlack())}
CERTIFIED = (SOURCES["certificate"], SOURCES["plan"], SOURCES["none"])


# why a run has no slack where it does not train the plan as certified (`slack_for`): no guarantee carries over
OFF_PLAN = ("the plan cannot be run as certified", "the run does not train the plan as certified",
            "the plan's calibration runs are of another data draw")


def slack_for(policy: Policy, d: Decision) -> Slack:
    """δ for what the policy's epoch-0 decision `d` runs: only slack certified for the plan returned — its certificate
    file's fresh runs (L − ω), else the stricter level ω′ the planner certified it at (ω′ − ω), else none.  Either
    holds only where the run trains the plan as certified: the plan itself, on its own data (a carved validation
    split trains less data, a re-plan another schedule: no slack)."""
    w, plan = policy.omega, policy.plan
    if d.action == "deadline-miss":
        return no_slack(w, "the plan cannot be run as certified (no re-plan meets the deadline)")
    if policy.scenario.calibration_mismatch():  # calibration runs of another draw certify nothing here: no slack
        return no_slack(w, "the plan's calibration runs are of another data draw")
    source = next(s for s in CERTIFIED if s.offers(policy))
    plan_phi = policy.scenario.phi(policy.scenario.samples(plan.datasets))
    as_certified = (d.action == "continue" and list(d.rest) == list(plan.epochs)
                    and math.isclose(plan_phi, policy.phi, rel_tol=1e-6))
    if source.name != "none" and not as_certified:
        return no_slack(w, "the run does not train the plan as certified (" + (
            d.note or "another φ: a carved validation split trains on less data") + ")")
    return source.read(policy)


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
