"""`depl certify`: a plan run on fresh seeds until a sequential test certifies or refutes it
(depl.train.loops.certify)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .console import console, epoch_progress, err_console, json_option, next_step, print_json, refusals
from ..certificate import ALPHA_RULE, DEFAULT_ALPHA, DEFAULT_PRIOR, PRIORS
from ..workflows.common import Training
from .training import trains_seeds
from .. import workflows


@trains_seeds(seed_batch=False)
def certify(
    plan_file: Path = typer.Argument(..., metavar="PLAN.json", help="a plan written by `depl plan --out`"),
    alpha: Optional[float] = typer.Option(None, "--alpha",
                                          help=f"the certificate's risk: it is wrong with probability at most α, "
                                          f"{ALPHA_RULE} [default: the plan's α, its scenario's [target] alpha, else "
                                          f"{DEFAULT_ALPHA}]"),
    first_seed: Optional[int] = typer.Option(None, "--first-seed", min=0, max=2**31 - 1,
                                             help="F: the first fresh seed (F, F+1, … in order); seeds the plan's "
                                             "lineage used (its fit, its calibration, the store's runs of it) are "
                                             "refused [default: the plan's first free seed, above all of them]"),
    max_runs: int = typer.Option(500, "--max-runs", min=1, max=100_000,
                                 help="stop undecided (exit 3) after this many runs"),
    batch: int = typer.Option(32, "--batch", min=1, max=4096,
                              help="seeds trained together between two looks at the test (one vectorised stack)"),
    prior: str = typer.Option(DEFAULT_PRIOR, "--prior",
                              help=f"the sequential test's e-process, one of {', '.join(PRIORS)}; \"uniform\" "
                                   "decides as depl 0.1.0 did (docs/certificate.md)"),
    out: Path = typer.Option(Path("depl-certify"), "--out", help="folder for the store and PLAN-certificate.json"),
    store: Optional[str] = typer.Option(None, "--store", help="the runs store [default: OUT/runs.sqlite]"),
    as_json: bool = json_option("print the certificate (as in the file) on stdout as one JSON object, nothing "
                                "else there"),
    training: Training = None,
) -> None:
    """Certify a plan on fresh real runs: "with probability ≥ 1 − α, it meets ℓmax with probability ≥ ω". Resumes.

    Seeds F, F+1, … are trained in batches and counted in order by an anytime-valid sequential test, which
    stops as soon as it can decide (docs/certificate.md). Exits 0 certified, 4 refuted, 3 undecided after
    --max-runs (it says how many more runs it expects to need)."""
    with refusals():  # every refusal before anything is written or drawn
        prep = workflows.prepare_certify(plan_file, alpha, out=out, training=training, store=store,
                                         first_seed=first_seed, max_runs=max_runs, prior=prior)
    (err_console if as_json else console).print(
        f"certifying {plan_file} on seeds from {prep.first_seed} (at most {prep.first_seed}..."
        f"{prep.first_seed + max_runs - 1}); {prep.ledger.words()}", markup=False)
    with epoch_progress() as bar, refusals():
        task = bar.add_task("certify", total=None)

        def progress(rid, seed, epoch, r):
            bar.update(task, advance=1, description=f"seed {seed} epoch {epoch} loss {r.test_loss:.3f}")

        def looked(v):
            bar.update(task, description=f"{v.runs} runs, {v.hits} met ℓmax: {v.verdict}")

        done = workflows.run_certify(prep, out=out, store=store, max_runs=max_runs, batch=batch,
                                     training=training, progress=progress, on_decision=looked)
    _print(err_console if as_json else console, done.decided, done.certificate, done.report)
    code = done.certificate.exit_code()
    next_step(f"depl run {plan_file} --seeds N", err_console, when=done.certificate.certified)
    if as_json:
        print_json({**done.to_json(), "exit_code": code})
    raise typer.Exit(code)


def going_on(hits: int, runs: int, max_runs: int, more: dict) -> str:
    """What going on would take, by the counts observed: where every run met ℓmax, how many more such runs
    certify (Laplace's rate, (hits + 1)/(runs + 2), reads 4 of 4 as 0.83: no advice to give up on it); else
    the test's expected runs at that rate, and the advice its chance of certifying gives."""
    need, med = more.get("if_all_meet"), more["median_more_runs"]
    if hits == runs:
        return (f"every run so far met ℓmax ({hits} of {runs}): the test certifies after {need} more runs if each "
                f"meets ℓmax too; rerun with a larger --max-runs ({runs + need} or more) to go on where this stopped"
                if need is not None else f"every run so far met ℓmax ({hits} of {runs}), and the test's bound needs "
                "more runs than depl counts: certify at a larger α or a smaller ω")
    rate = (f"{hits} of {runs} met ℓmax; taken as ({hits} + 1)/({runs} + 2) = {more['rate']:.3f}, "
            "Laplace's rule, so that no run count reads as certainty")
    advice = ("rerun with a larger --max-runs to go on where this stopped" if more["p_certify"] >= 0.5 else
              "at this rate it is unlikely to be certified: plan one that meets ℓmax more often (a "
              "stricter --omega or --loss), and certify it on new seeds")
    return (f"at the rate observed ({rate}) the test expects about {more['mean_more_runs']:.0f} more runs "
            f"(median {med if med is not None else 'beyond ' + str(10 * max(max_runs, 100))}) and would "
            f"certify with probability {more['p_certify']:.2f}: {advice}")


def _print(con, c, cert, report: Path) -> None:
    v, test = c.verdict, cert.evidence
    con.print(f"{c.plan_file}: {c.plan.method} plan, {len(c.plan.epochs)} epochs, ℓmax {c.plan.loss_target:g}, "
              f"ω {v.omega:g}, α {v.alpha:g}, prior {v.prior}", markup=False)
    con.print(f"  {v.runs} runs counted (seeds {c.first_seed}..{c.first_seed + v.runs - 1}), {v.hits} met ℓmax; "
              f"P(ℓ(K) ≤ ℓmax) ≥ {cert.lower_bound:.3f} (anytime-valid {1 - v.alpha:g} lower bound; upper "
              f"{test['upper_bound']:.3f}); e-values {min(test['e_value_certify'], 1e12):.3g} for, "
              f"{min(test['e_value_refute'], 1e12):.3g} against (decide at {1 / v.alpha:g})", markup=False)
    con.print(f"  cost: {v.runs + len(c.trained_after)} runs trained ({c.seed_epochs} seed-epochs"
              + (f"; {len(c.trained_after)} after the decision, not counted" if c.trained_after else "")
              + f"), {c.seconds / 60:.1f} min in this command", markup=False)
    if c.more:
        con.print("  " + going_on(v.hits, v.runs, c.max_runs, c.more), markup=False)
    con.print(f"  certificate written to {report}", markup=False)
    con.print(f"{v.verdict}: {c.statement()}", markup=False)
