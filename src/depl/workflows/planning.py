"""The planning workflows: plan, simulate (Monte Carlo of a plan), predict (the law of ℓ(K) for a schedule).
None of them trains or imports torch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from .common import check_output_file
from .errors import BadInput, Unreachable, as_bad_input, writing
from ..certificate import Certificate, Outcome, alpha_or_default, expected_runs, fixed_n_verdict
from ..certificate.search import HORIZON
from ..loss import loss_model_for
from ..omega import OMEGA_MAX
from ..paths import informational
from ..plan import Plan, PlanError
from ..planners import Infeasible, Options, binding, certify_by_calibration, make_plan, planner_names
from ..planners.optimal import DEFAULT_TIME_LIMIT
from ..predict import ScheduleError, parse_schedule, predict as ask
from ..report.plots import plot_loss_band, save, switch_epochs
from ..scenario import Scenario, ScenarioError, load_scenario, parse_scenario, scenario_dict, with_target as in_target
from ..simulate import simulate_plan
from .alpha_spent import ledger_path, plan_hash, record

if TYPE_CHECKING:
    from ..predict import Prediction
    from ..simulate import Simulation

MAX_RUNS = 1_000_000  # Monte Carlo trajectories; with K epochs they take runs·(K+1)·8 bytes
MAX_CELLS = 50_000_000  # 400 MB of trajectories at most


@dataclass(frozen=True)
class Planned:
    """A plan (`certified_by` in its info where the scenario's calibration scores experiments), the scenario it
    was made for (with the targets given), where it was written, and what a person should be warned of."""

    plan: "Plan"
    scenario: "Scenario"
    out: Optional[Path] = None
    time_limit: Optional[float] = None    # optimal's, in seconds
    warnings: tuple[str, ...] = ()


def load(scenario: "str | Scenario") -> "Scenario":
    """A scenario: a built-in name, a TOML file, or one loaded already."""
    if isinstance(scenario, Scenario):
        return scenario
    with as_bad_input(ScenarioError):
        return load_scenario(scenario)


def retarget(s: "Scenario", loss: Optional[float] = None, quantile: Optional[float] = None,
                deadline: Optional[float] = None, alpha: Optional[float] = None) -> "Scenario":
    """The scenario with these in its [target], validated like the file (named as the options that set them)."""
    if loss is None and quantile is None and deadline is None and alpha is None:
        return s

    given = {"loss": loss, "quantile": quantile, "deadline": deadline, "alpha": alpha}
    flags = " ".join(f"--{k} {v!r}" for k, v in given.items() if v is not None)
    with as_bad_input(ScenarioError):
        return parse_scenario(in_target(scenario_dict(s), **given), f"{s.name} with {flags}")


def extrapolation_warnings(s: "Scenario", epochs: int) -> tuple[str, ...]:
    """A plan longer than the epochs its law was fitted on is allowed (max_epochs says so), but said."""
    why = s.extrapolated(epochs) or s.calibration_beyond(epochs)
    return (why,) if why else ()


def infeasible_result(s: "Scenario", method: str, e) -> dict:
    """What an infeasible target can reach, as its message says it (null where it says nothing)."""
    return {"feasible": False, "reason": str(e), "scenario": s.name, "method": method,
            "target": {"loss": s.target.loss, "quantile": s.target.quantile, "deadline": s.target.deadline},
            "lowest_reachable_quantile": e.best_quantile, "earliest_time": e.shortest_time,
            "detail": list(e.detail)}


def check_time_limit(method: str, time_limit: Optional[float]) -> Optional[float]:
    """optimal's time limit [default: its own]; the other planners take none (their modules are not imported)."""
    if time_limit is None:
        if method == "optimal":
            return DEFAULT_TIME_LIMIT
    elif time_limit != time_limit:  # NaN passes a `>= 1` check (every comparison with it is false)
        raise BadInput("--time-limit nan: give a number of seconds >= 1 (inf: no limit)")
    return time_limit


def plan(scenario: "str | Scenario", method: str = "depl", *, eta: int = 200, loss: Optional[float] = None,
         quantile: Optional[float] = None, deadline: Optional[float] = None, time_limit: Optional[float] = None,
         uncalibrated_law: bool = False, out: str | Path | None = None,
         on_status: Optional[Callable[[str], None]] = None, alpha: Optional[float] = None,
         slack: Optional[float] = None) -> Planned:
    """Plan the cheapest training whose ω-quantile of the final loss meets the target (`depl plan`).

    `loss`, `quantile`, `deadline`, `alpha` override the scenario's [target] (`alpha`: a calibrated law
    certifies with confidence 1 − α, docs/certificate.md); `uncalibrated_law`: plan with the law as
    fitted. `slack` D: certify the plan at ω′ = ω + D (the calibration runs' fixed sequence at ω′) and record
    that it promises ω — the slack D a closed loop may spend (docs/adaptive.md). `out`: write the plan there (checked before solving). `on_status(line)`: what the planner is doing
    (optimal: its incumbent, bound and gap as they change). Raises Unreachable when no plan meets the target,
    BadInput for a scenario or option that cannot be used.
    """
    out = None if out is None else Path(out)
    time_limit = check_time_limit(method, time_limit)
    if method not in planner_names():
        raise BadInput(f"--method {method!r}: choose one of {', '.join(planner_names())}")
    if out is not None:  # checked before solving, so a long solve is never lost
        check_output_file("--out", out, make_folders=False)
    s = load(scenario)
    if uncalibrated_law:
        s = s.uncalibrated()
    s = retarget(s, loss, quantile, deadline, alpha)
    promise = None
    if slack is not None:
        promise = s.target.quantile
        s = retarget(s, quantile=stricter(s, slack))
    say = on_status or (lambda line: None)
    options = Options(eta=eta, time_limit=time_limit, on_status=say) if method == "optimal" else Options(eta=eta)
    try:
        if method != "optimal":  # optimal has its own live status: incumbent, bound, gap, elapsed
            say(f"planning {s.name} with {method} (η = {eta}) …")
        p = make_plan(s, method, options)
    except Infeasible as e:
        why = binding(e, s, method, options)   # one reason, the binding one first: on stderr and in --json alike
        raise Unreachable(str(why), infeasible_result(s, method, why), why.detail) from None
    certify_by_calibration(s, p, promise)

    cert = Certificate.of_plan(p.info)
    if promise is not None and not (cert is not None and cert.certified):
        raise Unreachable(f"--slack {slack:g}: the plan at ω′ = {p.omega:g} is not certified by the calibration runs "
                          f"with confidence 1 − α ({p.info.get('certified_by') or 'no certificate'}): no slack to "
                          "spend", infeasible_result(s, method, Infeasible("not certified")))
    spent = spend_alpha(scenario, s, p)   # before the plan is written: its certificate names the account
    if out is not None:
        save_plan(p, out)
    return Planned(p, s, out, time_limit, extrapolation_warnings(s, len(p.epochs)) + ((spent,) if spent else ()))


def spend_alpha(given: "str | Scenario", s: "Scenario", p: "Plan") -> Optional[str]:
    """Record a certificate with a confidence in the ledger of its calibration (depl.workflows.alpha_spent); the
    warning when that calibration certified other plans before (the α spent in all), else None."""
    cert = Certificate.of_plan(p.info)
    if cert is None or not cert.certified or not cert.calibration:
        return None

    cal = cert.calibration
    spent = record(ledger_path(given if isinstance(given, str) else None, s.name),
                   {"calibration": cal["digest"], "loss": cal["loss"], "omega": cal["omega"],
                    "alpha": cert.alpha_share, "plan": plan_hash(p)})
    # where the ledger is, said only (informational: the ledger of this machine, outside the plan's folder)
    p.info["certificate"] = cert.with_evidence(alpha_ledger={
        "path": informational(spent.path), "certificates_before": spent.before, "alpha_total": spent.total}).to_json()
    return spent.warning(f"the calibration of {s.name!r} (table {cal['digest'][:12]})")


def stricter(s: "Scenario", slack: float) -> float:
    """ω′ = ω + D for `--slack D`: only with a calibrated law and α (the runs that certify ω′ with confidence
    1 − α), and ω′ a level a plan can be asked for."""
    if not (isinstance(slack, (int, float)) and 0.0 < slack < 1.0):
        raise BadInput(f"--slack {slack!r}: expected D with 0 < D < 1 (the plan is certified at ω + D)")
    if s.calibration is None or not s.calibration.use:
        raise BadInput(f"--slack {slack:g}: scenario {s.name!r} plans with an uncalibrated law, whose plans no runs "
                       "certify: there is no slack to certify (calibrate it, docs/calibration.md)")
    if s.target.alpha is None:
        raise BadInput(f"--slack {slack:g}: the certificate needs a confidence: give --alpha (or [target] alpha)")
    high = s.target.quantile + slack
    if high > OMEGA_MAX:
        raise BadInput(f"--slack {slack:g}: ω′ = ω + D = {s.target.quantile:g} + {slack:g} = {high:g} is above "
                       f"{OMEGA_MAX:g}: choose D < {OMEGA_MAX - s.target.quantile:.6g}")
    return high


def save_plan(p: "Plan", out: Path) -> None:
    with as_bad_input(PlanError), writing("--out", out):
        p.save(out)


@dataclass(frozen=True)
class Simulated:
    """A plan's Monte Carlo (`simulation`), its loss band drawn at `png`."""

    plan_file: Path
    plan: "Plan"
    simulation: "Simulation"
    runs: int
    seed: int
    png: Path
    warnings: tuple[str, ...] = ()

    @property
    def verdict(self) -> "Outcome":
        """The law's Monte Carlo judging the plan's ω, in the words of every command: certified, refuted or undecided
        (`depl.certificate.fixed_n_verdict`: the one-sided bounds `p_meet_ci` at the plan's α)."""
        hits = int(round(self.simulation.p_meet * self.runs))
        return fixed_n_verdict(hits, self.runs, self.plan.omega, self.simulation.alpha)

    @property
    def not_refuted(self) -> bool:
        """The guarantee stands: the Monte Carlo does not refute it (`verdict`)."""
        return self.verdict.not_refuted

    @property
    def infinite_why(self) -> str:
        """Why the band's mean is +∞ at some epochs, in words ("" where it is finite, or where no calibrated level
        lies beyond the law's top): some runs' recalibrated level lies beyond every loss the law allows."""
        inf = self.simulation.band.infinite()["mean"]
        if not inf:
            return ""

        s = self.plan.scenario_object()
        law = loss_model_for(s)
        beyond = getattr(law, "beyond_top", None)
        if beyond is None:
            return ""
        shares = dict(beyond(self.plan.schedule, s.phi(s.samples(self.plan.datasets))))
        said = [f"epoch {k}: {100 * shares[k]:.2g} % of the calibrated levels" for k in inf if k in shares]
        if not said:
            return ""
        return ("the mean is +∞ where runs drew a calibrated level beyond every loss the law allows (a calibration "
                "run scored above its top: +∞, the safe side) — " + "; ".join(said) + "; the plan's expected ℓ(K) "
                f"({self.plan.loss_mean:.5g}) is the law's mean with those levels at its top")

    def to_json(self) -> dict:
        p, sim = self.plan, self.simulation
        return {"plan": str(self.plan_file), "method": p.method, "scenario": p.scenario, "epochs": len(p.epochs),
                "runs": self.runs, "seed": self.seed, "omega": p.omega, "target": p.loss_target,
                "p_meet": sim.p_meet, "p_meet_ci": list(sim.p_meet_ci), "quantile": sim.quantile,
                "quantile_ci": list(sim.quantile_ci), "alpha": sim.alpha, "law_quantile": p.loss_quantile,
                "mean": float(sim.final.mean()), "planned_mean": p.loss_mean, "not_refuted": self.not_refuted,
                # "certified" is kept for real runs: the law's Monte Carlo says the plan holds by the law
                "verdict": "holds" if self.verdict is Outcome.CERTIFIED else self.verdict.value,
                "cost": sim.cost, "cost_model": sim.cost_model, "band": sim.band.to_json(),
                "infinite_why": self.infinite_why, "png": str(self.png)}


def simulate(plan_file: str | Path, runs: int = 10_000, seed: int = 0, png: str | Path | None = None) -> Simulated:
    """Check a plan by Monte Carlo: P(ℓ(K) ≤ ℓmax), the ω-quantile with a CI, the loss band drawn at `png`
    [default: next to the plan] (`depl simulate`)."""
    plan_file = Path(plan_file)
    png = Path(png) if png else plan_file.with_suffix(".png")
    check_output_file("--png", png)
    with as_bad_input(PlanError, ScenarioError):
        p = Plan.load(plan_file)
        warnings = extrapolation_warnings(p.scenario_object(), len(p.epochs))  # checks the plan against its scenario
        points = len(p.epochs) + 1
        if runs * points > MAX_CELLS:
            raise PlanError(f"--runs {runs}: {runs} trajectories of {points} points need "
                            f"{runs * points * 8 / 2**30:.1f} GiB; use at most {MAX_CELLS // points} runs for this plan")
        sim = simulate_plan(p, runs=runs, seed=seed)
    fig = plot_loss_band([(p.method, sim.band)], target=p.loss_target, switches=[switch_epochs(p)],
                         title=f"{p.scenario}: loss band of the {p.method} plan ({runs} runs)")
    try:
        save(fig, png)
    except OSError as e:
        raise BadInput(f"--png {png}: {e.strerror or e}") from None
    return Simulated(plan_file, p, sim, runs, seed, png, warnings)


@dataclass(frozen=True)
class Predicted:
    """The law of ℓ(K) for a written schedule (`prediction`), and whether K lies past what the law was fitted on."""

    scenario: "Scenario"
    prediction: "Prediction"
    beyond_max_epochs: bool
    beyond_fitted_epochs: bool
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {**self.prediction.to_json(), "beyond_max_epochs": self.beyond_max_epochs,
                "beyond_fitted_epochs": self.beyond_fitted_epochs}


def predict(scenario: "str | Scenario", schedule: str, quantile: Optional[float] = None,
            datasets: Optional[list[str]] = None) -> Predicted:
    """What will the loss be? The certified q-quantile, the mean and the 1st–99th percentiles of ℓ(K) for
    `schedule` (VERSION:EPOCHS,… as `depl predict` reads it) on `datasets` [default: all]."""
    s = load(scenario)
    with as_bad_input(ScheduleError):
        r = ask(s, parse_schedule(schedule), quantile, datasets or None)
    beyond = s.max_epochs is not None and r.epochs > s.max_epochs
    if beyond:
        also = s.calibration_beyond(r.epochs)
        warnings = (f"K = {r.epochs} epochs is beyond the scenario's max_epochs = {s.max_epochs}: "
                    "the law is extrapolated past the epochs it was fitted on" + (f"; {also}" if also else ""),)
    else:
        warnings = extrapolation_warnings(s, r.epochs)
    return Predicted(s, r, beyond, s.extrapolated(r.epochs) is not None, warnings)


def law_of(p: "Plan", s: "Scenario"):
    """The distribution of plan p's final loss ℓ(K) under scenario s's loss law."""
    return loss_model_for(s).distribution([e.model for e in p.epochs], s.phi(s.samples(p.datasets)))


def p_meet(d, loss: float) -> float:
    """P(ℓ(K) ≤ loss) under the distribution d, kept in [0, 1]."""
    return min(max(float(d.cdf(loss)), 0.0), 1.0)


def price_row(p: float, omega: float, alpha: float, horizon: int, cost: float) -> dict:
    """The sequential test's expected runs to a decision within `horizon` runs and P(certified) at success
    probability p, and those runs' cost (each trains the plan once)."""
    need = expected_runs(min(p, 1.0 - 1e-12), omega, alpha, max_runs=horizon)
    return {"law_p": p, "expected_runs": need.mean_runs, "p_certify": need.certify,
            "expected_cost": need.mean_runs * float(cost)}


def certify_price(plan: "Plan", alpha: Optional[float] = None, horizon: int = HORIZON) -> Optional[dict]:
    """What a certificate of `plan` on real runs is expected to take, from the probability its own law gives of
    meeting ℓmax: the mean runs of the sequential test at `alpha` [default: the scenario's α, else depl's] within
    `horizon` runs [default: a new certified search's, depl.certificate.search.HORIZON], P(certified within them),
    and their cost (runs × the plan's cost); None where the plan has no law to ask (infeasible, empty, no scenario)."""
    if not plan.feasible or not plan.epochs:
        return None
    try:
        s = plan.scenario_object()
        p = p_meet(law_of(plan, s), plan.loss_target)
        alpha = alpha_or_default(alpha if alpha is not None else s.target.alpha)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return {"alpha": alpha, "horizon": horizon, **price_row(p, plan.omega, alpha, horizon, plan.cost)}
