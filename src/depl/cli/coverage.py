"""`depl coverage`: the coverage table — per task × ω × loss law, a plan run for real on held-out seeds and judged.

The cells are made and described by depl.experiments.coverage, trained and
judged through the pipeline of `depl validate` (depl.train.validation), and
written by depl.report.coverage_md.  Everything trained goes to one store, so
an interrupted table continues where it stopped and no run is trained twice.
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape

from .console import (EXIT_OK, EXIT_REFUTED, check_output_file, console, epoch_progress, err_console, fail, json_option,
                      print_json)
from .training import (ALLOW_CODE, DEVICE, RAY_ADDRESS, SEED_BATCH, THREADS, WORKERS, allow_code, run_seeds,
                       seed_options, start_training, training_errors)


def _split(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _floats(text: str, flag: str) -> list[float]:
    try:
        return [float(x) for x in _split(text)]
    except ValueError:
        fail(f"{flag} {text!r}: give numbers separated by commas, e.g. 0.8,0.9,0.95")


def coverage(
    tasks: str = typer.Option("mnist1d-small:1.5,digits-small,mnist1d-noniid", "--tasks",
                              help="tasks, comma-separated: a built-in scenario or TOML file, with ':LOSS' to set its "
                                   "target loss ℓmax (mnist1d-small's own target is infeasible under its fitted law)"),
    omegas: str = typer.Option("0.8,0.9,0.95", "--omegas", help="target quantiles ω, comma-separated"),
    laws: str = typer.Option("increments,level,calibrated", "--laws",
                             help="loss laws, comma-separated: increments (the paper's), level, level-memory, or "
                                  "calibrated (the scenario's own law recalibrated by its [calibration])"),
    runs: int = typer.Option(200, "--runs", min=2, max=100_000, help="held-out real runs per cell"),
    first_seed: int = typer.Option(10_000, "--first-seed", min=0, max=2**31 - 1,
                                   help="the first held-out seed (the built-ins were profiled on seeds 0..19)"),
    method: str = typer.Option("depl", "--method", help="the planner of every cell"),
    out: Path = typer.Option(Path("depl-coverage"), "--out",
                             help="folder for the store (runs.sqlite), the plans (plans/), coverage.json and coverage.md"),
    md: Optional[Path] = typer.Option(None, "--md", help="write the markdown table here [default: OUT/coverage.md]"),
    train: bool = typer.Option(True, "--train/--no-train", help="--no-train: train nothing; judge each cell on the "
                               "held-out seeds the store has finished (a partial table, its run counts per cell)"),
    as_json: bool = json_option("print the table (as in OUT/coverage.json) on stdout as one "
                                 "JSON object, nothing else there"),
    threads: int = THREADS,
    device: str = DEVICE,
    seed_batch: int = SEED_BATCH,
    workers: Optional[int] = WORKERS,
    ray_address: Optional[str] = RAY_ADDRESS,
    allow: Optional[List[Path]] = ALLOW_CODE,
) -> None:
    """The coverage table: for each task × ω × loss law, plan, run on held-out seeds, judge. Resumes.

    Writes OUT/coverage.json and the markdown table; exits 4 when a cell's guarantee is refuted (the Clopper–Pearson
    interval lies below ω; the cells are named), 0 otherwise."""
    from ..experiments.coverage import (CoverageError, Table, check_laws, check_omegas, link_shared, parse_task,
                                        plan_cell)
    from ..planners import planner_names

    allow_code(allow)
    con = err_console if as_json else console
    if method not in planner_names():
        fail(f"--method {method!r}: choose one of {', '.join(planner_names())}")
    try:
        task_list = [parse_task(t) for t in _split(tasks)]
        omega_list = check_omegas(_floats(omegas, "--omegas"))
        law_list = check_laws(_split(laws))
    except CoverageError as e:
        fail(str(e))
    if not task_list or not omega_list or not law_list:
        fail("--tasks, --omegas and --laws each need at least one value")
    if md is not None:  # checked now, not after the planning and the training
        check_output_file("--md", md)
    dev = start_training(threads, device)
    from ..report.coverage_md import coverage_markdown
    from ..store import Store
    from ..train.validation import prepare

    seeds = list(range(first_seed, first_seed + runs))
    plans = out / "plans"
    try:
        plans.mkdir(parents=True, exist_ok=True)
        store = Store(out / "runs.sqlite")
    except OSError as e:
        fail(f"--out {out}: cannot create the folder ({e.strerror or e})")
    except training_errors() as e:
        fail(str(e))
    md = md or out / "coverage.md"
    # the command that regenerates this table (the training options change how fast, not what)
    command = " ".join(["depl coverage", *map(shlex.quote, [
        "--tasks", ",".join(t.spec for t in task_list), "--omegas", ",".join(f"{w:g}" for w in omega_list),
        "--laws", ",".join(law_list), "--runs", str(runs), "--first-seed", str(first_seed),
        *(["--method", method] if method != "depl" else []), "--out", str(out), "--md", str(md),
        *([] if train else ["--no-train"])])])
    table = Table([], [t.spec for t in task_list], omega_list, law_list, runs, first_seed, command, method, trained=train)

    held = {}  # cell key -> HeldOutRun
    with con.status("planning the cells …", spinner="dots"):
        for task in task_list:
            for omega in omega_list:
                for law in law_list:
                    try:
                        cell, plan = plan_cell(task, omega, law, plans, method)
                        if plan is not None:
                            # the spec records no plan: cells with one job share one run (and a re-plan changes nothing)
                            h = prepare(plan.scenario_object(), Path(cell.plan_file), seeds, store, dev,
                                        spec={"backend": "local", "kind": "depl coverage"})
                            cell.run_id, held[cell.key] = h.run_id, h
                    except (*training_errors(), ValueError, OSError) as e:
                        fail(f"{task.spec}, ω = {omega:g}, {law}: {e}")
                    table.cells.append(cell)
    groups = link_shared(table.cells)
    for c in table.cells:
        what = (f"{c.schedule}, cost {c.cost:.1f}, certified q{c.omega:g} {c.certified_quantile:.4f}"
                + (f" (runs shared with {', '.join(c.shares_with)})" if c.shares_with else "")) if c.planned \
            else f"missing: {c.missing}"
        con.print(f"  {c.key}: {what}", markup=False)

    def write() -> None:
        (out / "coverage.json").write_text(json.dumps(table.to_json(), indent=1, allow_nan=False), encoding="utf-8")
        md.parent.mkdir(parents=True, exist_ok=True)
        md.write_text(coverage_markdown(table, md.read_text(encoding="utf-8") if md.is_file() else ""), encoding="utf-8")

    first = {rid: held[cells[0].key] for rid, cells in groups.items()}
    total = sum(h.epochs * runs for h in first.values())
    done = sum(h.done_epochs() for h in first.values())
    con.print(f"{len(table.cells)} cells, {len(groups)} distinct runs to train × {runs} seeds "
              f"({first_seed}..{first_seed + runs - 1}): {total} epochs, {done} already in {store.path}", markup=False)
    options = seed_options(seed_batch, workers, ray_address, threads)
    t0 = time.perf_counter()
    with epoch_progress() as bar:
        task_bar = bar.add_task("coverage", total=total, completed=done)
        for rid, cells in groups.items():
            h = first[rid]
            label = cells[0].key

            def progress(_rid, seed, epoch, r, label=label):
                bar.update(task_bar, advance=1, description=f"{label} · seed {seed} epoch {epoch} loss {r.test_loss:.3f}")

            if train:
                run_seeds(store, [(rid, h.job, seeds)], options, progress)
            todo = set(h.pending())
            finished = [x for x in seeds if x not in todo]
            for c in cells:  # each cell judged against its own plan's ω and target
                if len(finished) >= 2:  # (--no-train: those the store has; else every seed)
                    held[c.key].seeds = finished
                    c.judge(held[c.key].judge())
            table.seconds = time.perf_counter() - t0
            write()  # after every run: an interrupted table keeps what is done
    write()
    _summary(table, con)
    con.print(f"written to {out / 'coverage.json'} and {md}", markup=False)
    refuted = table.refuted
    code = EXIT_REFUTED if refuted else EXIT_OK
    if as_json:
        print_json({**table.to_json(), "exit_code": code})
    con.print(("[red]refuted[/]: " + escape(", ".join(c.key for c in refuted)) + f"; exit {code}") if refuted
              else f"no cell refuted; exit {code}", markup=True)
    raise typer.Exit(code)


def _summary(table, con) -> None:
    from rich.table import Table as RichTable

    t = RichTable(title="coverage on held-out real runs")
    for col in ("task", "ω", "law", "plan", "cost", "cert. q_ω", "runs", "coverage", "Clopper–Pearson", "meas. q_ω",
                "meas. mean", "verdict"):
        t.add_column(col)
    for c in table.cells:
        if not c.planned:
            t.add_row(c.task, f"{c.omega:g}", c.law, "missing", "", "", "", "", "", "", "", "missing")
            continue
        t.add_row(c.task, f"{c.omega:g}", c.law, escape(c.schedule), f"{c.cost:.1f}", f"{c.certified_quantile:.4f}",
                  str(c.runs), f"{c.coverage:.3f}" if c.runs else "—",
                  f"[{c.ci_low:.3f}, {c.ci_high:.3f}]" if c.runs else "—",
                  f"{c.measured_quantile:.4f}" if c.runs else "—", f"{c.measured_mean:.4f}" if c.runs else "—",
                  c.verdict)
    con.print(t)
