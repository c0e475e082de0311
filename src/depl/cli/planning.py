"""Planning commands: scenarios, plan, simulate, predict (no training, no torch)."""

from __future__ import annotations

import math
import shlex
import sys
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from ..workflows.planning import MAX_RUNS, certify_price
from ..workflows.common import Training
from ..workflows.errors import Unreachable
from ..certificate import DEFAULT_ALPHA, Certificate, Outcome, confidence_words, fewest_runs
from .console import JSON_HELP, console, err_console, json_option, print_json, refusals, warn
from .search import (ALLOCATION, BATCH, CERTIFY, FIRST_SEED, HORIZON, KEEP_SEARCH, MAX_RUNS_SEARCH, PNG, PRIOR, STORE,
                     USES, KeepModels, plan_certified, search_only)
from .training import trains_seeds
from ..planners.status import status_line
from ..predict import signed
from ..scenario import builtin_names, load_scenario
from ..workflows import plan as make, predict as ask, simulate as monte_carlo


def scenarios() -> None:
    """List the built-in scenarios (any command also takes a path to a TOML file)."""
    from rich.table import Table

    t = Table(title="built-in scenarios")
    t.add_column("name")
    t.add_column("models")
    t.add_column("clusters")
    t.add_column("description")
    for name in builtin_names():
        s = load_scenario(name)
        t.add_row(name, str(len(s.models)), str(len(s.clusters)), s.description)
    console.print(t)


def _summary(plan, out: Optional[Path] = None) -> None:
    """Print a plan as a person reads it (`out`: where it was written)."""
    from collections import Counter

    from rich.table import Table

    status = "[green]feasible[/]" if plan.feasible else "[red]infeasible[/]"
    console.print(f"[bold]{escape(plan.method)}[/] plan for [bold]{escape(plan.scenario)}[/]: {status}")
    console.print(f"  datasets: {', '.join(plan.datasets)}", markup=False)
    t = Table(title="epochs per model version and cluster", show_lines=False)
    t.add_column("epochs")
    t.add_column("model version")
    t.add_column("cluster")
    t.add_column("compute x per node", justify="right")
    groups: list[list] = []
    for e in plan.epochs:  # consecutive runs, in order
        if groups and groups[-1][1] == e.model and groups[-1][2] == e.cluster:
            groups[-1][3] = e.epoch
            groups[-1][4].append(e.compute)
        else:
            groups.append([e.epoch, e.model, e.cluster, e.epoch, [e.compute]])
    for first, model, cluster, last, xs in groups:
        span = f"{first}" if first == last else f"{first}–{last}"
        xtxt = f"{xs[0]:.4g}" if max(xs) - min(xs) < 1e-9 * max(xs) else f"{min(xs):.4g}–{max(xs):.4g}"
        t.add_row(span, escape(model), escape(cluster), xtxt)
    console.print(t)
    counts = Counter(e.model for e in plan.epochs)
    console.print("  K = " + str(len(plan.epochs)) + " epochs: " + ", ".join(f"{m} ×{n}" for m, n in counts.items()),
                  markup=False)
    lo, hi = plan.loss_quantile_bounds or (plan.loss_quantile, plan.loss_quantile)
    model = (plan.scenario_spec or {}).get("cost_model") or "per-epoch"
    console.print(f"  cost            {plan.cost:.6g}  ({model}: {COST_WORDS[model]})")
    console.print(f"  time            {plan.time:.6g}  (deadline {plan.deadline:g})")
    console.print(f"  {plan.omega:g}-quantile of ℓ(K)  ≤ {plan.loss_quantile:.5g}  (the law's, exact bracket "
                  f"[{lo:.5g}, {hi:.5g}]; target ℓmax {plan.loss_target:g} — a certificate is about ℓmax, not this "
                  "number)")
    console.print(f"  expected ℓ(K)   {plan.loss_mean:.5g}")
    _certify_price(plan)
    if plan.info.get("certified_by"):  # the law's calibration, not a certificate with its confidence
        console.print(f"  calibrated on   {plan.info['certified_by']}", markup=False)
    cert = Certificate.of_plan(plan.info)
    if cert is not None and cert.promise is not None:
        console.print(f"  slack           certified at ω′ = {cert.omega:g}, promises ω = "
                      f"{cert.promise:g}: `depl run --adaptive` may spend δ = "
                      f"{cert.omega - cert.promise:.4g}", markup=False)
    _real_runs(plan, out)
    console.print(f"  solve time      {plan.solve_seconds:.3f} s")


def _real_runs(plan, out: Optional[Path]) -> None:
    """The plan summary's `real runs` line: what reads its data, or how `depl certify` certifies it (at the plan's α)."""
    spec = plan.scenario_spec or {}
    trainable = {m.get("name") for m in spec.get("models", []) if m.get("train")}
    pathless = [d.get("name") for d in spec.get("datasets", [])
                if d.get("name") in plan.datasets and d.get("source") == "cifar10" and not d.get("path")]
    if plan.feasible and plan.epochs and {e.model for e in plan.epochs} <= trainable and pathless:
        console.print(f"  real runs       the plan trains on CIFAR-10, read from your disk: run it with --data DIR, a "
                      "folder holding its binary version (cifar-10-batches-bin) or python version "
                      f"(cifar-10-batches-py), or give dataset {pathless[0]!r} a `path`", markup=False)
    elif plan.feasible and plan.epochs and {e.model for e in plan.epochs} <= trainable:  # it can run for real
        alpha = plan.alpha
        shown = (shlex.quote(str(out)) if out else "PLAN.json") + ("" if alpha == DEFAULT_ALPHA else f" --alpha {alpha:g}")
        cert = Certificate.of_plan(plan.info)
        by_runs = cert is not None and cert.certified
        state = "certified by its calibration runs above; fresh seeds confirm it" if by_runs else "not certified yet"
        console.print(f"  real runs       {state}: `depl certify {shown}` runs fresh seeds until it can say "
                      f"P(ℓ(K) ≤ {plan.loss_target:g}) ≥ {plan.omega:g} with confidence {1 - alpha:g} (at least "
                      f"{fewest_runs(plan.omega, alpha)} runs: that many if every one meets the target)", markup=False)


COST_WORDS = {"per-epoch": "eq. (2), κ·x·nodes per epoch", "resource-time": "κ·x·nodes·T(k) per epoch"}


@trains_seeds(seed_batch=False)
def plan(
    scenario: str = typer.Argument(..., help="a built-in scenario name (see `depl scenarios`) or a TOML file"),
    method: str = typer.Option("depl", "--method", "-m",
                               help="a planner: depl, optimal, best-exp, best-exp-loss (depl.planners.registry)"),
    eta: int = typer.Option(200, "--eta", min=2, max=1000,
                            help="discretisation of the expanded graph (paper: η); memory grows as η²"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="write the plan here (JSON, depl.plan/1)"),
    loss: Optional[float] = typer.Option(None, "--loss", help="ℓmax: override the scenario's [target] loss"),
    quantile: Optional[float] = typer.Option(None, "--omega", "--quantile",
                                             help="ω: override the scenario's [target] quantile (--omega, as fit, "
                                             "calibrate and coverage name it; --quantile also accepted)"),
    deadline: Optional[float] = typer.Option(None, "--deadline", help="Tmax: override the scenario's [target] deadline"),
    alpha: Optional[float] = typer.Option(None, "--alpha", help="α: a calibrated law certifies the plan with "
                                          "confidence 1 − α by runs of its own schedule, the planner's choice "
                                          "included (docs/certificate.md); overrides the scenario's [target] alpha"),
    slack: Optional[float] = typer.Option(None, "--slack", metavar="D", help="certify the plan at ω′ = ω + D (a "
                                          "calibrated law's runs, confidence 1 − α) and record that it promises ω: "
                                          "`depl run --adaptive` may spend the slack D on early stops "
                                          "(docs/adaptive.md)"),
    as_json: bool = json_option(JSON_HELP + ": the plan (depl.plan/1)"),
    time_limit: Optional[float] = typer.Option(None, "--time-limit", min=1.0, help="optimal: seconds before it "
                                               "returns its best plan with a certified lower bound (default 600)"),
    uncalibrated: bool = typer.Option(False, "--uncalibrated", help="plan with the loss law as fitted, not the one "
                                      "recalibrated on held-out runs (the scenario's [calibration])"),
    certify: bool = CERTIFY,
    max_runs: Optional[int] = MAX_RUNS_SEARCH,
    first_seed: Optional[int] = FIRST_SEED,
    prior: Optional[str] = PRIOR,
    allocation: Optional[str] = ALLOCATION,
    batch: Optional[int] = BATCH,
    uses: Optional[float] = USES,
    horizon: Optional[int] = HORIZON,
    store: Optional[Path] = STORE,
    png: Optional[Path] = PNG,
    keep_models: Optional[KeepModels] = KEEP_SEARCH,
    training: Training = None,
) -> None:
    """Plan the cheapest training whose ω-quantile of the final loss meets the target; with --certify, the cheapest
    plan fresh real runs certify (P(ℓ(K) ≤ ℓmax) ≥ ω, confidence 1 − α), resumable."""
    keep = None if keep_models is None else keep_models.value
    if certify:
        opts = dict(max_runs=max_runs, first_seed=first_seed, batch=batch, store=store, png=png, prior=prior,
                    allocation=allocation, uses=uses, horizon=horizon, training=training, keep_models=keep,
                    unused={"--slack": slack, "--time-limit": time_limit, "--uncalibrated": uncalibrated or None})
        return plan_certified(scenario, method, eta, out, loss, quantile, deadline, alpha, as_json, opts)
    search_only({"--max-runs": max_runs, "--first-seed": first_seed, "--prior": prior, "--allocation": allocation,
                 "--batch": batch, "--uses": uses, "--horizon": horizon, "--store": store, "--png": png,
                 "--keep-models": keep})

    with refusals(), planner_status(method, err_console if as_json else console) as say:
        try:
            planned = make(scenario, method, eta=eta, loss=loss, quantile=quantile, deadline=deadline,
                           time_limit=time_limit, uncalibrated_law=uncalibrated, out=out, on_status=say, alpha=alpha,
                           slack=slack)
        except Unreachable as e:   # a plan file of an earlier call at --out is not this call's: say so
            if out is None or not out.exists():
                raise
            raise Unreachable(f"{e} No plan written: {out} is an earlier call's, left as it was.", e.result,
                              e.detail) from None
    _planned(planned, method, out, as_json)


def _planned(planned, method: str, out: Optional[Path], as_json: bool) -> None:
    """What `depl plan` prints of the plan it made: its warnings, then its JSON or its summary."""
    for line in planned.warnings:
        warn(line)
    p = planned.plan
    if as_json:
        print_json(p.to_json())
        return
    _summary(p, out)
    if method == "optimal":
        _proof(p, planned.time_limit)
    if out is not None:
        console.print(f"  plan written to {out}", markup=False)


def _certify_price(plan) -> None:
    """What certifying the plan on real runs is expected to take, by its law (a guess the runs may refute)."""
    pr = certify_price(plan)
    if pr is None:
        return
    console.print(f"  to certify      by the law, P(ℓ(K) ≤ ℓmax) = {pr['law_p']:.3f}: a certificate on real runs "
                  f"takes ~{pr['expected_runs']:.0f} runs at α {pr['alpha']:g} (certified with probability "
                  f"{pr['p_certify']:.2f} within {pr['horizon']} runs, a certified search's horizon), runs' cost "
                  f"~{pr['expected_cost']:.4g}",
                  markup=False, highlight=False)


@contextmanager
def planner_status(method: str, shown):
    """What the planner is doing, as it does it: optimal's live line on stderr (incumbent, bound, gap, elapsed),
    or a spinner on a terminal (rich draws none on a pipe or a file, and importing it costs ~20 ms)."""
    if method == "optimal":
        with status_line(sys.stderr) as say:
            yield say
        return
    with ExitStack() as spinner:
        yield lambda line: (spinner.enter_context(shown.status(escape(line), spinner="dots"))
                            if shown.is_terminal else None)


def _proof(p, time_limit: Optional[float]) -> None:
    """Whether `optimal` proved its plan optimal, and the certified lower bound when it did not."""
    if p.optimal_proven:
        console.print(f"  proven optimal (every plan costs at least {p.lower_bound:.6g})")
        return
    why = (f"the time limit of {time_limit:g} s was reached" if p.info.get("time_limit_reached")
           else "the switch graph has a cycle and schedules revisiting a version were not searched")
    lb = "none" if p.lower_bound is None else f"{p.lower_bound:.6g}"
    gap = "" if p.lower_bound is None else f" (gap {(p.cost - p.lower_bound) / p.cost:.2%})"
    console.print(f"  [yellow]not proven optimal[/]: {why}; certified lower bound {lb}{gap}")


def simulate(
    plan_file: Path = typer.Argument(..., metavar="PLAN.json", help="a plan written by `depl plan --out`"),
    runs: int = typer.Option(10_000, "--runs", "-n", min=100, max=MAX_RUNS, help="Monte Carlo trajectories"),
    seed: int = typer.Option(0, "--seed", min=0, max=2**63 - 1, help="random seed (same seed, same numbers)"),
    png: Optional[Path] = typer.Option(None, "--png", help="loss band plot (default: next to the plan)"),
    as_json: bool = json_option(JSON_HELP),
) -> None:
    """Check a plan by Monte Carlo: P(ℓ(K) ≤ ℓmax), the ω-quantile with a CI, the loss band.

    Exits 4 when the guarantee is refuted (the one-sided 1 − α upper bound on P(ℓ(K) ≤ ℓmax) lies below ω, α the
    plan's); the verdict's line names the bound."""
    with refusals():
        r = monte_carlo(plan_file, runs, seed, png)
    for line in r.warnings:
        warn(line)
    if as_json:
        print_json(r.to_json())
    else:
        _simulation_text(r)
    if r.verdict.exit_code("promise"):
        raise typer.Exit(r.verdict.exit_code("promise"))


def _simulation_text(r) -> None:
    p, sim = r.plan, r.simulation
    lo, hi = sim.p_meet_ci
    qlo, qhi = sim.quantile_ci
    pct = f"one-sided {confidence_words(sim.alpha)}"
    console.print(f"[bold]Monte Carlo[/] of {escape(str(r.plan_file))} ({escape(p.method)}, {len(p.epochs)} epochs), "
                  f"{r.runs} runs, seed {r.seed}")
    console.print(f"  P(ℓ(K) ≤ {p.loss_target:g}) = {sim.p_meet:.4f}   {pct} bounds [{lo:.4f}, {hi:.4f}]   "
                  f"(ω = {p.omega:g}, α = {sim.alpha:g})")
    console.print(f"  {p.omega:g}-quantile of ℓ(K) = {sim.quantile:.5g}   {pct} bounds [{qlo:.5g}, {qhi:.5g}]"
                  f"   (the law's for the plan: {p.loss_quantile:.5g})")
    console.print(f"  mean ℓ(K) = {sim.final.mean():.5g}   (plan: {p.loss_mean:.5g})")
    console.print(f"  cost {sim.cost:.6g} ({sim.cost_model}, from the plan's epochs; plan: {p.cost:.6g})")
    # "certified" is kept for real runs: the law's own Monte Carlo says the law's plan holds by the law
    bound = {Outcome.CERTIFIED: f"{pct} lower bound {lo:.4f} ≥ ω = {p.omega:g}",
             Outcome.REFUTED: f"{pct} upper bound {hi:.4f} < ω = {p.omega:g}",
             Outcome.UNDECIDED: f"{pct} bounds [{lo:.4f}, {hi:.4f}] hold ω = {p.omega:g}"}[r.verdict]
    word = {Outcome.CERTIFIED: "[green]holds[/]", Outcome.UNDECIDED: "undecided",
            Outcome.REFUTED: "[red]refuted[/]"}[r.verdict]
    console.print(f"  by the law's Monte Carlo: {word} ({bound}; a certificate takes real runs)")
    note = sim.band.infinite_note()
    console.print(f"  loss band written to {r.png}" + (f"; {note}" if note else ""), markup=False)
    if r.infinite_why:
        console.print(f"  {r.infinite_why}", markup=False)


def predict(
    scenario: str = typer.Argument(..., help="a built-in scenario name or a TOML file (its loss law)"),
    schedule: str = typer.Argument(..., metavar="SCHEDULE",
                                   help="the model versions trained, in order: VERSION:EPOCHS segments separated by "
                                   "commas, e.g. full:10,pruned-0.5:20 (10 epochs of full, then 20 of pruned-0.5); "
                                   "the versions are the scenario's models"),
    quantile: Optional[float] = typer.Option(None, "--quantile", "-q", help="q (default: the scenario's ω)"),
    datasets: Optional[list[str]] = typer.Option(None, "--dataset", help="train on these datasets (repeatable) "
                                                 "(default: all of the scenario's); they set φ(S)"),
    as_json: bool = json_option(JSON_HELP),
) -> None:
    """What will the loss be? The law's q-quantile (a bound exact for the law; where its calibration certifies none,
    the law's estimate, labelled, with why), the mean and the 1st–99th percentiles of ℓ(K)."""
    with refusals():
        answer = ask(scenario, schedule, quantile, datasets or None)
    for line in answer.warnings:
        warn(line)
    if as_json:
        print_json(answer.to_json())
        return
    s, r = answer.scenario, answer.prediction
    segs = ", ".join(f"{m} ×{n}" for m, n in r.schedule)
    console.print(f"[bold]{escape(s.name)}[/]: K = {r.epochs} epochs ({segs}) on {', '.join(r.datasets)} (φ = {r.phi:.4g})",
                  highlight=False)
    console.print(f"  {r.quantile:.10g}-quantile of ℓ(K)  {r.quantile_words()}", highlight=False, markup=False)
    console.print(f"  mean ℓ(K)        {r.loss_mean:.5g}  (sd {r.loss_std:.4g})", highlight=False)
    for line in r.notes[1:] if r.quantile_range != "within" else r.notes:
        console.print(f"  note: {line}", highlight=False, markup=False)
    note = ("" if r.band_low_law == "law" else "  (1st: the law as fitted — calibration certifies upper quantiles "
            "only; 99th: calibrated" + (", +∞: over 1% of the calibration runs at this epoch lay above every loss "
                                        "the law allows" if math.isinf(r.band[1]) else "") + ")")
    console.print(f"  1st–99th pct     {signed(r.band[0])} – {signed(r.band[1])}{note}", highlight=False, markup=False)
    console.print(f"  P(ℓ(K) ≤ {r.target:g}) in [{r.p_meet[0]:.4f}, {r.p_meet[1]:.4f}]  (the scenario's target)",
                  highlight=False)
