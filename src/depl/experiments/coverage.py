"""The coverage table (`depl coverage`): does a plan's guarantee hold on real training, per task, ω and loss law?

A cell is (task, ω, law).  Its plan is made with the task's scenario, the
target quantile set to ω and the loss law set to the cell's law; the plan's
cost and certified ω-quantile are recorded, and the plan is run for real on
held-out seeds (by the caller: `depl.train.loops.validation`, the pipeline of `depl
validate`) and judged by `depl.validate`: coverage P(ℓ(K) ≤ ℓmax) with its
Clopper–Pearson interval, the measured ω-quantile and mean, and a verdict.

The laws of a cell: any registered law (depl.laws) — the paper's
`increments`, `level`, `level-memory` — used *as fitted*, and `calibrated`:
the scenario's own law recalibrated by its `[calibration]` scores (split
conformal, depl.loss.calibrated).  A cell exists only where the scenario has
fitted parameters for its law: `increments` (every scenario carries the
paper's progress/noise tables; `depl fit` writes them beside the chosen law),
the scenario's own `loss_model`, and `calibrated` when the scenario has a
`[calibration]` with enough scores for ω.  Every other cell is *missing*, with
the reason; so is a cell whose plan is infeasible (the planner's message).

Cells whose plans train the same job (the same datasets, versions, clusters
and epochs: `depl.train.engine.execute.run_id_for`) share their runs: the store
holds one run per job, so a second cell costs no training.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..certificate import (DEFAULT_ALPHA, VERDICTS, Outcome, alpha_or_default, bound_words, clopper_pearson_lower,
                           clopper_pearson_upper, fixed_n_verdict)
from ..laws import law_names
from ..ledger import check_certificate, recomputed_certificate
from ..loss.base import segments
from ..plan import Plan, PlanError
from ..scenario import (Scenario, ScenarioError, load_scenario, omega_problem, parse_scenario, scenario_dict,
                        with_target)
from ..validate import Validation
from ..jsonout import clean
from ..planners import Infeasible, certify_by_calibration, infeasible_reason, make_plan

CALIBRATED = "calibrated"
CERTIFIED = Outcome.CERTIFIED
DEFAULT_LAWS = ("increments", "level", CALIBRATED)
DEFAULT_OMEGAS = (0.8, 0.9, 0.95)

# The three built-in real tasks with the target each was profiled for (docs/fitting.md): mnist1d-small's
# shipped target (q0.99 ≤ 0.9) is infeasible under its fitted law, so its task is the example's ℓmax = 1.5
# (scripts/example_mnist1d.sh); the other two plan for their own [target] loss.
DEFAULT_TASKS = ("mnist1d-small:1.5", "digits-small", "mnist1d-noniid")

# Held-out seeds: by default above every seed of the tasks' lineages (depl.ledger: their fits, their
# calibrations), in `depl coverage`'s own block (Ledger.default("coverage")); a range that meets a task's
# lineage, or the store's other runs of a cell's plan, is refused.


class CoverageError(ValueError):
    """Bad input for the coverage table (a task, ω or law that cannot be used); the message is for the user."""


@dataclass(frozen=True)
class Task:
    spec: str                 # as given: NAME_OR_TOML[:LOSS]
    name: str                 # the scenario's name
    scenario: Scenario        # as loaded, target loss applied
    source: str               # the scenario's name or file


def parse_task(spec: str) -> Task:
    """`NAME_OR_TOML[:LOSS]`: a built-in scenario or a TOML file, optionally with its target loss ℓmax replaced."""
    where, _, loss = spec.rpartition(":") if ":" in spec else (spec, "", "")
    try:
        target = float(loss) if loss else None
    except ValueError:
        raise CoverageError(f"--tasks {spec!r}: {loss!r} after ':' is not a loss target (NAME[:LOSS])") from None
    if target is not None and not (0 < target < math.inf):
        raise CoverageError(f"--tasks {spec!r}: the loss target must be a positive number")
    try:
        s = load_scenario(where)
        if target is not None:
            s = parse_scenario(with_target(scenario_dict(s), loss=target), f"{where} with target loss {target:g}")
    except ScenarioError as e:
        raise CoverageError(f"--tasks {spec!r}: {e}") from None
    return Task(spec, s.name, s, where)


def check_omegas(omegas: list[float]) -> list[float]:
    for w in omegas:
        why = omega_problem(w, "--omegas")
        if why:
            raise CoverageError(why)
    return list(dict.fromkeys(omegas))


def check_laws(laws: list[str]) -> list[str]:
    known = law_names() + [CALIBRATED]
    for law in laws:
        if law not in known:
            raise CoverageError(f"--laws {law!r}: choose among {', '.join(known)}")
    return list(dict.fromkeys(laws))


def cell_scenario(task: Task, omega: float, law: str) -> tuple[Scenario | None, str]:
    """The scenario a cell plans with, or None and why the cell is missing."""
    s = task.scenario
    own = s.loss_model or "increments"
    data = with_target(scenario_dict(s), quantile=omega)
    if law == CALIBRATED:
        c = s.calibration
        if c is None:
            return None, (f"{task.name} has no [calibration] (refit with `depl fit --calibration-seeds N` "
                          "on its profiles)")
        have, k = c.fewest()   # at every scored epoch
        if have < c.needed(omega):
            return None, (f"{task.name}'s calibration has {have} scores" + (f" at epoch {k}" if k else "")
                          + f"; split conformal needs {c.needed(omega)} to certify ω = {omega:g}")
        data["calibration"] = {**data["calibration"], "use": True}
    elif law != "increments" and law != own:
        # a law's tables in another law's file were fitted for that law (e.g. switches), not for this one
        return None, (f"{task.name} is fitted for the {own} law (and the paper's increments); the {law} law "
                      f"needs its own fit (`depl fit --model {law}`)")
    else:
        data["loss_model"] = law
        data.pop("calibration", None)  # the law as fitted
    try:
        return parse_scenario(data, f"{task.name} ({law}, ω = {omega:g})"), ""
    except ScenarioError as e:
        return None, str(e)


@dataclass
class Cell:
    task: str
    omega: float
    law: str
    target: float
    base_law: str = ""               # the law behind `calibrated`; the law itself otherwise
    missing: str = ""                # why there is no plan (no fitted law, infeasible); "" when planned
    plan_file: str = ""
    run_id: str = ""                 # the store's run of the plan's job ("" until registered)
    schedule: str = ""               # e.g. "pruned-0.75 ×12 on far-edge; data a+b"
    alpha: float = DEFAULT_ALPHA     # the task's α ([target] alpha; the plan's where planned): each bound at 1 − α
    epochs: int = 0
    cost: float = math.nan
    certified_quantile: float = math.nan
    planned_mean: float = math.nan
    extrapolated: bool = False       # the plan runs the law past its fitted epochs
    certified_by: str = ""           # the plan's own certificate, in words (its calibration runs: `depl plan`)
    shares_with: list[str] = field(default_factory=list)  # other cells training the same job
    # measured (filled by judge)
    runs: int = 0
    hits: int = 0
    coverage: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan
    measured_quantile: float = math.nan
    measured_mean: float = math.nan
    measured_sd: float = math.nan
    diverged: int = 0

    @property
    def key(self) -> str:
        return f"{self.task} ω={self.omega:g} {self.law}"

    @property
    def planned(self) -> bool:
        return not self.missing

    @property
    def lower(self) -> float:
        """The one-sided (1 − α) Clopper–Pearson lower bound on P(ℓ(K) ≤ ℓmax) from the cell's held-out runs."""
        return clopper_pearson_lower(self.hits, self.runs, self.alpha) if self.runs else math.nan

    @property
    def upper(self) -> float:
        """The one-sided (1 − α) upper bound."""
        return clopper_pearson_upper(self.hits, self.runs, self.alpha) if self.runs else math.nan

    @property
    def verdict(self) -> str:
        """certified, refuted or undecided (`depl.certificate.fixed_n_verdict` at the one-sided (1 − α) bounds, the
        words of every command); missing / pending where the cell has no plan / no runs yet."""
        if not self.planned:
            return "missing"
        if self.runs == 0:
            return "pending"
        return fixed_n_verdict(self.hits, self.runs, self.omega, self.alpha)

    @property
    def bound_words(self) -> str:
        """The bound behind the verdict (`depl.validate.Coverage.bound_words`); "" without runs."""
        if self.verdict not in VERDICTS:
            return ""
        return bound_words(self.verdict, self.lower, self.upper, self.alpha)

    def judge(self, v: Validation) -> None:
        c = v.coverage
        self.runs, self.hits, self.coverage, (self.ci_low, self.ci_high) = c.runs, c.hits, c.rate, c.ci
        self.measured_quantile, self.measured_mean, self.measured_sd = v.final_quantile, v.final_mean, v.final_sd
        self.diverged = len(v.diverged)

    def to_json(self) -> dict:
        return {**asdict(self), "key": self.key, "verdict": self.verdict, "lower": self.lower, "upper": self.upper}


def plan_cell(task: Task, omega: float, law: str, plans_dir: Path, method: str = "depl",
              as_stored: bool = False) -> tuple[Cell, Plan | None]:
    """Plan one cell and write its plan to `plans_dir` (the plan file the validation pipeline reads).
    `as_stored` (--no-train): a plan the store already holds for the cell is judged as it was planned, even where
    the task's scenario has changed since (its runs are of that plan; a new plan would have none)."""
    s = task.scenario
    cell = Cell(task.name, omega, law, s.target.loss, base_law=(s.loss_model or "increments") if law == CALIBRATED else law,
                alpha=alpha_or_default(s.target.alpha))
    sc, why = cell_scenario(task, omega, law)
    if sc is None:
        cell.missing = why
        return cell, None
    path = plans_dir / f"{task.name}-w{omega:g}-{law}.json"
    p = _earlier_plan(path, None if as_stored else sc, method)
    if p is not None and as_stored:
        sc = p.scenario_object()
    if p is None:
        try:
            p = make_plan(sc, method)
        except Infeasible as e:
            cell.missing = f"infeasible: {infeasible_reason(e, sc)}"
            return cell, None
        certify_by_calibration(sc, p)   # as `depl plan` does: which runs certify it, in its file
        p.save(path)
        p.source = str(path)
    else:   # a plan file read: its certificate text is its calibration runs', or it is refused (never printed)
        check_certificate(p, str(path))
    cell.plan_file, cell.epochs, cell.alpha = str(path), len(p.epochs), p.alpha
    cell.schedule = schedule_text(p)
    cell.cost, cell.certified_quantile, cell.planned_mean = float(p.cost), float(p.loss_quantile), float(p.loss_mean)
    cell.extrapolated = sc.extrapolated(len(p.epochs)) is not None
    cell.certified_by = str(recomputed_certificate(p).get("certified_by", ""))   # recomputed, never as read
    return cell, p


def _earlier_plan(path: Path, sc: Scenario | None, method: str) -> Plan | None:
    """The plan an earlier run of the table wrote to `path`, if it was made for this very scenario (None: whatever
    scenario) and method (a rerun then plans nothing again: the same plan file, the same runs)."""
    if not path.is_file():
        return None
    try:
        p = Plan.load(path)
    except PlanError:
        return None
    return p if p.method == method and (sc is None or p.scenario_spec == scenario_dict(sc)) else None


def calibration_cost(s: Scenario) -> dict | None:
    """What the runs that certify `s`'s plans cost: its calibration experiments, their runs, seed-epochs; None
    without per-experiment calibration runs (no certificate)."""
    c = s.calibration
    exps = (c.experiments or []) if c is not None else []
    if not exps:
        return None
    runs = [max(len(r) for r in e.epoch_scores) for e in exps]
    return {"experiments": len(exps), "runs": sum(runs), "seed_epochs": sum(n * len(e.schedule) for n, e in zip(runs, exps)),
            "each": [f"{e.label} ×{len(e.schedule)}: {n} runs" for n, e in zip(runs, exps)],
            "data_draw": c.data_draw}


def schedule_text(p: Plan) -> str:
    """The plan in a few words: each run of one version on one cluster, and the datasets."""
    runs = segments([(e.model, e.cluster) for e in p.epochs])
    return ", ".join(f"{m} ×{n} on {c}" for (m, c), n in runs) + f"; data {'+'.join(p.datasets)}"


def link_shared(cells: list[Cell]) -> dict[str, list[Cell]]:
    """Group the planned cells by the run of their job; each cell lists the others sharing its runs."""
    groups: dict[str, list[Cell]] = {}
    for c in cells:
        if c.planned and c.run_id:
            groups.setdefault(c.run_id, []).append(c)
    for group in groups.values():
        for c in group:
            c.shares_with = [o.key for o in group if o is not c]
    return groups


@dataclass
class Table:
    """The whole table: its cells and how it was made."""

    cells: list[Cell]
    tasks: list[str]
    omegas: list[float]
    laws: list[str]
    runs: int                       # held-out runs asked per cell
    first_seed: int
    command: str = ""
    method: str = "depl"
    seconds: float = 0.0            # training time of this invocation
    trained: bool = True            # False: judged on what the store had (--no-train), a partial table
    costs: dict = field(default_factory=dict)   # task → what its calibration (the plans' certificate) cost

    @property
    def judged(self) -> list[Cell]:
        return [c for c in self.cells if c.planned and c.runs]

    def joint_lower(self, c: Cell) -> float:
        """`c`'s lower bound for all m judged cells at once (Bonferroni: each one-sided at its α/m; together at
        1 − α where the cells share α)."""
        m = max(1, len(self.judged))
        return clopper_pearson_lower(c.hits, c.runs, c.alpha / m) if c.runs else math.nan

    @property
    def refuted(self) -> list[Cell]:
        return [c for c in self.cells if c.verdict == Outcome.REFUTED]

    def to_json(self) -> dict:
        return clean({"format": "depl.coverage/1", "command": self.command, "method": self.method,
                       "tasks": self.tasks, "omegas": self.omegas, "laws": self.laws, "runs": self.runs, "trained": self.trained,
                       "seeds": [self.first_seed, self.first_seed + self.runs - 1], "seconds": self.seconds,
                       "refuted": [c.key for c in self.refuted], "costs": self.costs,
                       "cells": [{**c.to_json(), "joint_lower": self.joint_lower(c)} for c in self.cells]})
