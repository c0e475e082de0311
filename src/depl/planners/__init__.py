"""Planners: one protocol, one registry, one `Plan`.

>>> from depl.scenario import load_scenario
>>> plan = make_plan(load_scenario("paper-alexnet"), "depl")
>>> plan.feasible and plan.loss_quantile <= plan.loss_target
True
"""

from __future__ import annotations

import itertools
import time

from ..certificate import Certificate, Kind, Outcome, seed_ranges
from ..loss import LossModel, loss_model_for
from ..loss.calibrated import AS_FITTED
from ..plan import Plan
from ..scenario import Scenario
from ..state import START, RunState
from .common import Infeasible, Options, to_plan
from .registry import Planner, get_planner, planner_names, register
from .datasets import ENUMERATE_UP_TO


def make_plan(scenario: Scenario, method: str = "depl", options: Options | None = None,
              loss: LossModel | None = None, start: RunState = START) -> Plan:
    """Plan `scenario` with the registered planner `method`; raises `Infeasible` when no plan meets the target.

    `loss` replaces the scenario's own loss model (any depl.loss.LossModel);
    `start` is where a run stands (default: not started): the plan covers the
    remaining epochs, numbered from start.epoch + 1, within the time left.
    """
    planner = get_planner(method)
    options = options or Options()
    scenario = measured_only(scenario)
    t0 = time.perf_counter()
    try:
        return planner.plan(scenario, options, start, loss)
    except Infeasible as e:
        # The reachability search behind the message found a plan that meets the
        # target: answer with it rather than call the target infeasible.
        if e.witness is None:
            raise

        ctx, cand = e.witness
        return to_plan(method, ctx, cand, t0, eta=options.eta, found_by="reachability search")


def measured_only(scenario: Scenario) -> Scenario:
    """A fitted scenario's [measured] conditions as the planners' space: only clusters of the measured node count
    (`Scenario.measured_only`); Infeasible, saying what to profile, when nothing measured is left.  The dataset
    choices are kept to measured amounts of data where they are enumerated (datasets.all_subsets)."""
    if scenario.measured is None:
        return scenario
    try:
        restricted = scenario.measured_only()
    except ValueError as e:
        raise Infeasible(str(e)) from None

    names = [d.name for d in scenario.datasets]
    if len(names) <= ENUMERATE_UP_TO and not any(scenario.measured_data(c) for r in range(1, len(names) + 1)
                                    for c in itertools.combinations(names, r)):
        sizes = ", ".join(f"{d.name}: {d.samples:g}" for d in scenario.datasets)
        raise Infeasible(f"scenario {scenario.name!r}: its loss law was measured on {scenario.measured.words()} "
                         f"([measured]), and no choice of its datasets holds that much ({sizes}); profile the data "
                         "the plans may use (depl profile SCENARIO --dataset NAME … --fractions …), then depl fit")
    return restricted


__all__ = ["make_plan", "planner_names", "get_planner", "register", "Planner", "Options", "Infeasible", "Plan",
           "certify_by_calibration", "infeasible_reason", "binding"]


def certify_by_calibration(s: Scenario, p: Plan, promise: float | None = None) -> None:
    """With a calibration in use: which runs certify the plan (its own kind, or the pooled scores), in its info (and
    so its JSON); with α and per-experiment scores its certificate too.  `promise`: the ω the plan promises where
    it was planned at a stricter ω′ = its quantile (`depl plan --slack`): the certificate records both
    (its ω = ω′, `promise` = ω in its evidence), the slack ω′ − ω a closed loop may spend (depl.adaptive.Slack)."""
    c = s.calibration
    if c is None or not c.use:
        return
    mismatch = s.calibration_mismatch()
    if mismatch:
        p.info["certified_by"] = mismatch
        return
    law = loss_model_for(s)
    schedule, phi = [e.model for e in p.epochs], s.phi(s.samples(p.datasets))
    words = law.certified_by(schedule, phi, p.omega)
    if words:
        p.info["certified_by"] = words
    cert = law.certificate(schedule, phi) if s.target.alpha is not None else None
    if cert is not None:   # with a confidence (docs/certificate.md): the runs of this schedule, each once
        ok, runs, met = cert
        # the runs certify the plan only where its own job ran under their conditions: its clusters' nodes, its data
        nodes = {c.nodes for c in s.clusters if c.name in {e.cluster for e in p.epochs}}
        data = [(d.source, tuple(d.share)) for d in s.datasets if d.name in set(p.datasets)]
        check = getattr(law, "job_mismatch", None)   # a calibrator of your own may not compare conditions
        refused = check(schedule, phi, nodes=nodes, data=data) if ok and check else None
        if refused:
            ok = False
            p.info["certified_by"] = refused
        used = [law.records[i] for i in getattr(law, "usable", [])]
        runs_of = [{"experiment": e.label, "seeds": e.seed_ranges(), "runs": len(e.seeds or [])} for e in used]
        evidence = {"experiments": len(used) or len(c.experiments),
                    "calibration": {"digest": c.digest(), "loss": s.target.loss, "omega": s.target.quantile,
                                    "certified_by": [e.label for e in getattr(law, "certifying", lambda *a: [])(
                                        schedule, phi)],
                                    "runs": runs_of}}
        if refused:
            evidence["refused"] = refused
        if promise is not None:
            evidence["promise"] = promise
        # the α this certificate spends (its share), on which calibration runs: every experiment's chain is tested at
        # α/E, so the certificate draws on them all (depl.workflows.alpha_spent keeps the account)
        p.info["certificate"] = Certificate(
            Kind.CALIBRATION, Outcome.CERTIFIED if ok else Outcome.UNDECIDED, p.omega, s.target.loss,
            s.target.alpha, s.target.alpha, runs, met,
            seed_ranges(tuple(r) for row in runs_of for r in row["seeds"]), None, evidence).to_json()


def infeasible_reason(e: Infeasible, s: Scenario, method: str = "depl", options: Options | None = None) -> str:
    """Why no plan meets the target, in one message (`binding`)."""
    return str(binding(e, s, method, options))


def binding(e: Infeasible, s: Scenario, method: str = "depl", options: Options | None = None) -> Infeasible:
    """The reason that binds, first, with the figures it speaks of: where a calibrated law certifies nothing with
    its α, the law as fitted is planned too (`method`, `options`); if it cannot reach the target either, that binds
    (its lowest reachable quantile, its earliest time), and the calibration's failing is said after it; if it can,
    the calibration binds: the target, then why its runs certify nothing and what would."""
    if s.target.alpha is None or s.calibration is None or not s.calibration.use:
        return e
    mismatch = s.calibration_mismatch()
    law = loss_model_for(s)
    why = mismatch or law.shortfall()
    if why is None:
        return e
    detail = () if mismatch else law.shortfall_detail()
    try:
        make_plan(s.uncalibrated(), method, options)
    except Infeasible as fitted:
        # ... nor is planning with it a way out: the calibration's words end without it
        return Infeasible(f"{fitted} Besides, {why.removesuffix(AS_FITTED)}.", best_quantile=fitted.best_quantile,
                          shortest_time=fitted.shortest_time, target=fitted.target, detail=detail)
    # nothing certified: every schedule's quantile is the law's ceiling, and what the planner's message says of
    # reaching the target would be about that ceiling, not the law; its sentence naming the target is kept
    head = str(e) if mismatch else (e.target or str(e))
    return Infeasible(f"{head} {why[0].upper()}{why[1:]}.", target=e.target, detail=detail)
