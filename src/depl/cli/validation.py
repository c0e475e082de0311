"""`depl validate`: a plan run for real on held-out seeds and judged (the workflow: depl.workflows.validation)."""

from __future__ import annotations

from pathlib import Path
from typing import List, NoReturn, Optional

import typer
from rich.markup import escape

from ..workflows.common import Training, seed_range
from ..certificate import Certificate, Outcome, bound_words, confidence_words
from .console import (choice, console, epoch_progress, err_console, fail, json_option,
                      next_step, print_json, refusals, warn)
from .training import (CERTIFICATE_HELP, GAP_FROM_HELP, RULE_HELP, VALIDATION_HELP, AdaptiveShow, Rule, diverged_line,
                       refuse_adaptive_options, said, trains_seeds)
from .. import workflows


@trains_seeds()
def validate(
    scenario: str = typer.Argument(..., help="the scenario whose loss model draws the planned band (a name or TOML file)"),
    plan_file: Path = typer.Argument(..., metavar="PLAN.json", help="a plan written by `depl plan --out`"),
    seeds: int = typer.Option(200, "--seeds", min=2, max=100_000, help="held-out seeds F..F+N-1"),
    first_seed: Optional[int] = typer.Option(None, "--first-seed", min=0, max=2**31 - 1,
                                             help="F: the first seed; seeds the plan's lineage used (its fit, its "
                                             "calibration, the store's runs of it) are refused [default: the plan's "
                                             "first free seed, above all of them]"),
    out: Path = typer.Option(Path("depl-validate"), "--out", help="folder for the store, the report and the PNG"),
    store: Optional[str] = typer.Option(None, "--store", help="SQLite path or sqlite:/// URL [default: OUT/runs.sqlite]"),
    png: Optional[Path] = typer.Option(None, "--png", help="band plot [default: OUT/PLAN-validate.png]"),
    as_json: bool = json_option("print the report (as in OUT/PLAN-validate.json) on stdout "
                                 "as one JSON object, nothing else there"),
    adaptive: bool = typer.Option(False, "--adaptive", help="run the seeds by the closed loop (depl run --adaptive) "
                                  "and judge its coverage and mean cost (docs/adaptive.md)"),
    validation: Optional[float] = typer.Option(None, "--validation", min=0.01, max=4.0,
                                     help=VALIDATION_HELP),
    rule: Optional[str] = typer.Option(None, "--rule", **choice(Rule, "--rule"), help=RULE_HELP + " [default: slack]"),
    gap_from: Optional[List[Path]] = typer.Option(None, "--gap-from", metavar="STORE", help=GAP_FROM_HELP),
    certificate: Optional[Path] = typer.Option(None, "--certificate", metavar="FILE", help=CERTIFICATE_HELP),
    training: Training = None,
) -> None:
    """Run a plan for real on held-out seeds; coverage P(ℓ(K) ≤ ℓmax) with Clopper–Pearson bounds vs ω. Resumes.

    SCENARIO must have the loss law the plan was made with. Exits 4 when the guarantee is refuted (the one-sided
    1 − α upper bound lies below ω, α the plan's), 0 when it is not; the last line says which, with the bound."""
    con = err_console if as_json else console  # with --json, stdout carries the JSON object only
    asked = "" if first_seed is None else f"--first-seed {first_seed} --seeds {seeds}"
    if adaptive:  # what the closed loop does not use is refused, as `depl run --adaptive` does, before any work
        if training.ray_address:
            fail("--adaptive runs on the local back end (each seed's rest may change on its own)")
        if png is not None:
            fail("--png: an adaptive validation draws no band (its seeds stop at different epochs)")
        return _validate_adaptive(scenario, plan_file, seeds if first_seed is None else seed_range(first_seed, seeds),
                                  asked, store, out, training, validation, rule or Rule.slack.value, con, as_json,
                                  gap_from, certificate)
    refuse_adaptive_options(rule, validation, "validations", gap_from, certificate)

    with refusals():
        held = workflows.prepare_validation(scenario, plan_file,
                                            seeds if first_seed is None else seed_range(first_seed, seeds),
                                            out=out, store=store, png=png, training=training, asked=asked)
    _say_start(held.run, plan_file, con)
    v = _train(held, training, con)
    _print_validation(v, held.run, plan_file, con)
    code = _said_verdict(v.certificate, v.to_json() if as_json else None, con)
    next_step(f"depl certify {plan_file}", err_console, when=v.certificate.verdict is Outcome.UNDECIDED)
    raise typer.Exit(code)


def _said_verdict(cert: Certificate, printed: dict | None, con) -> int:
    """`printed` (--json: the certificate and where its files are) with the exit code on stdout, then the last
    line, what a script gating on the exit code is told: the verdict (certified, refuted, undecided: one word in
    every command) and the bound behind it, at the plan's α; returns the exit code (the promise's: undecided is
    not refuted)."""
    code = cert.exit_code("promise")
    if printed is not None:
        print_json({**printed, "exit_code": code})
    v = cert.verdict
    word = {Outcome.CERTIFIED: "[green]certified[/]", Outcome.REFUTED: "[red]refuted[/]"}.get(v, str(v))
    bound = bound_words(v, cert.lower_bound, cert.evidence["upper_bound"], cert.alpha, cert.omega)
    tail = "; the runs cannot tell the coverage from ω; not refuted" if v is Outcome.UNDECIDED else ""
    con.print(f"guarantee: {word} ({escape(bound)}{tail}); exit {code}", markup=True)
    return code


def _bounds(c) -> str:
    """The two one-sided Clopper–Pearson bounds the verdict tests, at the plan's α."""
    return f"Clopper–Pearson one-sided {confidence_words(c.alpha)} bounds [{c.ci[0]:.3f}, {c.ci[1]:.3f}]"


def _say_start(h, plan_file: Path, con) -> None:
    """What is about to be trained (the plan, its seeds, the run and its store), and why its law is stretched."""
    if h.extrapolated:
        warn(h.extrapolated)
    seeds, todo = len(h.seeds), h.pending()
    con.print(f"validating {plan_file} ({h.plan.method}, {h.epochs} epochs) on seeds {h.seeds[0]}..{h.seeds[-1]}"
              f" · run {h.run_id} · store {h.store.path}"
              + (f" · {seeds - len(todo)} seeds already done" if len(todo) < seeds else ""), markup=False)
    con.print(f"  seeds {h.ledger.words()}", markup=False)


def _train(held, training, con):
    """The held-out seeds trained under a progress bar, and the plan judged (depl.workflows.validation)."""
    with epoch_progress() as bar, refusals():
        task = bar.add_task("validate", total=held.run.epochs * len(held.run.seeds), completed=held.run.done_epochs())

        def progress(rid, seed, epoch, r):
            bar.update(task, advance=1, description=f"seed {seed} epoch {epoch} loss {r.test_loss:.3f}")

        return workflows.train_validation(held, training, progress, said(con))


def _print_validation(done, h, plan_file: Path, con) -> None:
    v, p = done.validation, h.plan
    c = v.coverage
    con.print(f"[bold]validation[/] of {escape(str(plan_file))}: {escape(p.method)} plan with the {v.loss_model} "
              f"loss model of {escape(h.scenario.name)}, "
              f"cost {p.cost:.4g}, {h.epochs} epochs; {c.runs} real runs in {done.seconds:.0f} s", markup=True)
    con.print(f"  coverage P(ℓ(K) ≤ {c.target:g}) = {c.rate:.3f} ({c.hits}/{c.runs})   {_bounds(c)}   ω = {c.omega:g}",
              markup=False)
    if v.diverged:
        gone = h.store.diverged(h.run_id)
        con.print("  " + diverged_line(len(h.seeds), [("", {s: gone[s] for s in v.diverged})])
                  + "; each counted as a run that missed ℓmax", markup=False, highlight=False)
    con.print(f"  measured ℓ(K): mean {v.final_mean:.4f}, sd {v.final_sd:.4f}, {c.omega:g}-quantile {v.final_quantile:.4f}"
              f"   (plan: mean {v.planned_mean:.4f}, the law's {c.omega:g}-quantile {v.law_quantile:.4f})", markup=False)
    con.print(f"  band written to {done.png}; report to {done.report}", markup=False)


def _validate_adaptive(scenario: str, plan_file: Path, seeds: list[int] | int, asked: str, store, out: Path, training,
                       validation: float | None, rule: str, con, as_json: bool, gap_from=None,
                       certificate=None) -> NoReturn:
    """Coverage of the final test loss and mean cost of adaptive runs on held-out seeds (the workflow
    `validate_adaptive`), said as they train; exit 4 when refuted."""
    with AdaptiveShow(con) as show, refusals():
        r = workflows.validate_adaptive(scenario, plan_file, seeds, out=out, store=store, training=training,
                                        validation=validation, rule=rule, gap_from=gap_from, certificate=certificate,
                                        asked=asked, started=show.started, progress=show.progress)
    show.done(r.run)
    c = r.coverage
    con.print(f"  adaptive coverage P(ℓ_test ≤ {c.target:g}) = {c.rate:.3f} ({c.hits}/{c.runs})   {_bounds(c)}"
              f"   ω = {c.omega:g}   mean cost {r.mean_cost:.4g} (open-loop plan "
              f"{r.plan.cost:.4g})", markup=False)
    raise typer.Exit(_said_verdict(r.certificate, r.to_json() if as_json else None, con))
