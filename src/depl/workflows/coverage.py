"""`depl coverage`'s workflow: the coverage table — per task × ω × loss law, a plan run for real on held-out
seeds and judged.

The cells are made and described by depl.experiments.coverage, trained and
judged through the pipeline of `depl validate` (depl.train.loops.validation), and
written by depl.report.coverage_md. Everything trained goes to one store, so
an interrupted table continues where it stopped and no run is trained twice.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from .common import Training, check_output_file, run_seeds, seed_range, start_training
from .errors import BadInput, as_bad_input, training_errors
from ..experiments.coverage import CALIBRATED, Table, calibration_cost, link_shared, plan_cell as make_cell
from ..experiments.coverage import CoverageError, check_laws, check_omegas, parse_task
from ..ledger import Ledger, SeedsUsed, lineage
from ..paths import relative
from ..planners import planner_names
from ..report.coverage_md import coverage_markdown
from ..store import Store
from ..train.loops.validation import prepare


@dataclass(frozen=True)
class CoverageRuns:
    """The table's cells planned, and their runs registered in one store (`prepare_coverage`): `held` maps a
    cell's key to its HeldOutRun, `groups` a run id to the cells that share it (one job, one run)."""

    table: "Table"
    held: dict = field(hash=False)
    groups: dict = field(hash=False)
    store: "Store"
    seeds: tuple[int, ...]
    out: Path
    md: Path
    train: bool

    def first(self, run_id: str) -> Any:
        """The HeldOutRun that trains `run_id` (its group's first cell's)."""
        return self.held[self.groups[run_id][0].key]

    @property
    def total_epochs(self) -> int:
        return sum(self.first(rid).epochs * len(self.seeds) for rid in self.groups)

    def done_epochs(self) -> int:
        return sum(self.first(rid).done_epochs() for rid in self.groups)


@dataclass(frozen=True)
class CoverageResult:
    """The table judged (every cell), written to OUT/coverage.json and `md`."""

    table: "Table"
    json_file: Path
    md: Path
    seed_training: dict = field(default_factory=dict)   # run id → how its seeds trained (executors.Decision)

    @property
    def refuted(self) -> list:
        return self.table.refuted

    def to_json(self) -> dict:
        return {**self.table.to_json(), "seed_training": {rid: d.to_json() for rid, d in self.seed_training.items()}}


def command_line(tasks: list[str], omegas: list[float], laws: list[str], runs: int, first_seed: int, method: str,
                 out: Path, md: Path, train: bool) -> str:
    """The command that regenerates this table (the training options change how fast, not what)."""
    return " ".join(["depl coverage", *map(shlex.quote, [
        "--tasks", ",".join(tasks), "--omegas", ",".join(f"{w:g}" for w in omegas),
        "--laws", ",".join(laws), "--runs", str(runs), "--first-seed", str(first_seed),
        *(["--method", method] if method != "depl" else []), "--out", str(out), "--md", str(md),
        *([] if train else ["--no-train"])])])


def check_cells(tasks: list[str], omegas: list[float], laws: list[str], method: str) -> tuple[list, list, list]:
    """The tasks parsed (SCENARIO[:LOSS]), the ω and the laws checked, the planner known."""
    if method not in planner_names():
        raise BadInput(f"--method {method!r}: choose one of {', '.join(planner_names())}")
    with as_bad_input(CoverageError):
        task_list = [parse_task(t) for t in tasks]
        omega_list = check_omegas(list(omegas))
        law_list = check_laws(list(laws))
    if not task_list or not omega_list or not law_list:
        raise BadInput("--tasks, --omegas and --laws each need at least one value")
    return task_list, omega_list, law_list


def prepare_coverage(tasks: list[str], omegas: list[float], laws: list[str], *, runs: int = 200,
                     first_seed: Optional[int] = None, method: str = "depl", out: str | Path = Path("depl-coverage"),
                     md: str | Path | None = None, train: bool = True, training: Training = Training()) -> CoverageRuns:
    """Plan every cell (plans in OUT/plans, reused when still the plan the planner makes; a plan file's
    certificate text is recomputed, and refused where it differs) and register its run on seeds F..F+runs-1 in
    OUT/runs.sqlite — F: `first_seed`, or the first seed the table began with, or the tasks' first free seed
    (`default_first_seed`); seeds a cell's lineage used are refused (depl.ledger)."""
    out, md = Path(out), None if md is None else Path(md)
    task_list, omega_list, law_list = check_cells(tasks, omegas, laws, method)
    if md is not None:  # checked now, not after the planning and the training
        check_output_file("--md", md)
    dev = start_training(training.threads, training.device)
    asked = "" if first_seed is None else f"--first-seed {first_seed} --runs {runs}"
    first_seed = default_first_seed(task_list, out) if first_seed is None else first_seed
    seeds = seed_range(first_seed, runs)

    with as_bad_input(SeedsUsed):  # the tasks' fits and calibrations, before anything is written
        tasks_ledger(task_list).check(seeds[0], seeds[-1], asked or f"--first-seed {first_seed}", "coverage")
    store = coverage_store(out)
    md = md or out / "coverage.md"
    command = command_line([t.spec for t in task_list], omega_list, law_list, runs, first_seed, method, out, md, train)
    table = Table([], [t.spec for t in task_list], omega_list, law_list, runs, first_seed, command, method,
                  trained=train)
    held = {}  # cell key -> HeldOutRun
    for task in task_list:
        for omega in omega_list:
            for law in law_list:
                with as_bad_input(*training_errors(), ValueError, OSError, prefix=f"{task.spec}, ω = {omega:g}, {law}: "):
                    table.cells.append(plan_cell(task, omega, law, out / "plans", method, seeds, store, dev, held,
                                                 as_stored=not train, asked=asked))

    table.costs = {t.name: calibration_cost(t.scenario) for t in task_list if CALIBRATED in law_list}

    groups = link_shared(table.cells)
    return CoverageRuns(table, held, groups, store, tuple(seeds), out, md, train)


def default_first_seed(tasks: list, out: Path) -> int:
    """The table's first seed when none is given: the one the table in OUT began with (its store's record), else
    above every seed of the tasks' lineages (their fits and calibrations), in `depl coverage`'s block
    (depl.ledger.Ledger.default)."""
    store = out / "runs.sqlite"
    if store.is_file():
        with as_bad_input(*training_errors()), Store(store, readonly=True) as st:
            began = [u["first"] for u in st.uses() if u["command"] == "coverage"]
        if began:
            return began[0]
    return tasks_ledger(tasks).default("coverage")


def tasks_ledger(tasks: list):
    """The seeds the tasks' scenarios record: their fits and calibrations (depl.ledger.lineage)."""
    ledger = Ledger()
    for t in tasks:
        ledger = ledger + lineage(t.scenario, f"task {t.spec}:")
    return ledger


def coverage_store(out: Path) -> "Store":
    """OUT/runs.sqlite, with OUT/plans made."""
    try:
        (out / "plans").mkdir(parents=True, exist_ok=True)
        with as_bad_input(*training_errors()):
            return Store(out / "runs.sqlite")
    except OSError as e:
        raise BadInput(f"--out {out}: cannot create the folder ({e.strerror or e})") from None


def plan_cell(task, omega: float, law: str, plans: Path, method: str, seeds: list[int], store, device: str,
              held: dict, as_stored: bool = False, asked: str = ""):
    """One cell planned (`as_stored`: the store's plan for it as it was planned), its run registered (into `held`, by
    the cell's key) when it has a plan, its seeds checked against the plan's ledger (`asked`: the options that gave
    them, for a refusal)."""

    cell, plan = make_cell(task, omega, law, plans, method, as_stored)
    if plan is not None:
        # the spec records no plan: cells with one job share one run (and a re-plan changes nothing)
        h = prepare(plan.scenario_object(), Path(cell.plan_file), seeds, store, device,
                    spec={"backend": "local", "kind": "depl coverage"}, command="coverage", asked=asked,
                    also=lineage(task.scenario, f"task {task.spec}:"))
        cell.run_id, held[cell.key] = h.run_id, h
    return cell


def train_coverage(c: CoverageRuns, training: Training = Training(),
                   progress: Optional[Callable] = None, said: Optional[Callable[[str], None]] = None) -> CoverageResult:
    """Train each distinct run (unless --no-train) and judge its cells, each against its own plan's ω and
    target, writing the table after every run (an interrupted table keeps what is done).
    progress(cell key, seed, epoch, result) after every epoch; said(text): how each run's seeds train."""
    t0 = time.perf_counter()
    how = {}
    for rid, cells in c.groups.items():
        h, label = c.first(rid), cells[0].key
        if c.train:
            how[rid] = run_seeds(c.store, [(rid, h.job, list(c.seeds))], training,
                                 None if progress is None else
                                 lambda _rid, seed, epoch, r, label=label: progress(label, seed, epoch, r), said)
        todo = set(h.pending())
        finished = [x for x in c.seeds if x not in todo]
        for cell in cells:
            if len(finished) >= 2:  # (--no-train: those the store has; else every seed)
                cell.judge(dataclasses.replace(c.held[cell.key], seeds=finished).judge())
        c.table.seconds = time.perf_counter() - t0
        write_table(c)
    write_table(c)
    return CoverageResult(c.table, c.out / "coverage.json", c.md, how)


def write_table(c: CoverageRuns) -> None:
    """OUT/coverage.json (each cell's plan file relative to it, depl.paths), and the markdown table into `md` (its
    text around the table kept)."""
    file, d = c.out / "coverage.json", c.table.to_json()
    d["cells"] = [{**x, "plan_file": relative(x["plan_file"], file)} if x.get("plan_file") else x for x in d["cells"]]
    file.write_text(json.dumps(d, indent=1, allow_nan=False), encoding="utf-8")
    c.md.parent.mkdir(parents=True, exist_ok=True)
    c.md.write_text(coverage_markdown(c.table, c.md.read_text(encoding="utf-8") if c.md.is_file() else ""),
                    encoding="utf-8")


def coverage(tasks: list[str], omegas: list[float], laws: list[str], *, runs: int = 200,
             first_seed: Optional[int] = None,
             method: str = "depl", out: str | Path = Path("depl-coverage"), md: str | Path | None = None,
             train: bool = True,
             training: Training = Training(), progress: Optional[Callable] = None) -> CoverageResult:
    """The coverage table (`depl coverage`): for each task × ω × loss law, plan, run on held-out seeds, judge."""
    c = prepare_coverage(tasks, omegas, laws, runs=runs, first_seed=first_seed, method=method, out=out, md=md,
                         train=train, training=training)
    return train_coverage(c, training, progress)
