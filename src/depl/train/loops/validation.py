"""`depl validate`'s pipeline: train a plan for real on held-out seeds, into a store, then judge it.

The judging itself (coverage, Clopper–Pearson, the planned band) is
`depl.validate`, which needs no torch; this module adds the training.
Runs resume like `depl run`: a seed already finished in the store is not
trained again.

The held-out seeds are checked against the plan's seed ledger before the run
is registered (depl.ledger): seeds its law was fitted or calibrated on, or
that the store's runs of the plan used (a certificate's, another
validation's), are refused; the default first seed is the ledger's first
free one; the store records the range a validation began with.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...certificate import Certificate
from ...ledger import Ledger, TaskSeeds, check_certificate, lineage, plan_lineage, resolve, store_uses
from ...paths import relative_files
from ...plan import Plan
from ...scenario import Scenario, load_scenario
from ...store import Store, store_path
from ...validate import Validation, law_mismatch, validate
from ..engine import execute
from ..engine.federation import Job, job_from_plan


@dataclass
class HeldOutRun:
    """A plan's run on held-out seeds, registered in its store; `scenario` is the plan's own."""

    scenario: Scenario
    plan: Plan
    plan_file: Path
    job: Job
    store: Store
    run_id: str
    seeds: list[int]
    extrapolated: str | None = None     # why the plan runs its law past the fitted epochs (a warning)
    ledger: Ledger = field(default_factory=Ledger)   # the seeds of the plan's lineage, kept clear of

    @property
    def epochs(self) -> int:
        return len(self.job.epochs)

    def pending(self) -> list[int]:
        """The seeds with epochs still to train."""
        return execute.pending(self.store, self.run_id, self.job, self.seeds)

    def done_epochs(self) -> int:
        return sum(min(self.store.done_epochs(self.run_id, s), self.epochs) for s in self.seeds)

    def judge(self) -> Validation:
        """The plan judged by the trajectories in the store (every seed trained to the end)."""
        losses, gone = self.store.losses(self.run_id), self.store.diverged(self.run_id)
        ok = [x for x in self.seeds if x not in gone]
        traj = np.array([[self.scenario.initial_loss] + losses[x][:self.epochs] for x in ok]).reshape(len(ok), self.epochs + 1)
        return validate(self.plan, self.scenario, traj, self.seeds, str(self.plan_file),
                        diverged=[x for x in self.seeds if x in gone])


def prepare(scenario: str | Scenario, plan_file: Path, seeds: list[int] | int, store: str | Path | Store,
            device: str = "cpu", spec: dict | None = None, folder: Path | None = None,
            command: str = "validate", asked: str = "", also: Ledger | None = None) -> HeldOutRun:
    """Load and check the scenario and plan (its certificate text too: depl.ledger.check_certificate), check the
    seeds against the plan's seed ledger, make `folder` (the run folder), and register the run in `store` (a
    path, or a Store open already), recording the seed range `command` began it with.

    `seeds`: the held-out seeds (a range F..F+N-1), or their count N (F: the ledger's first free seed, or the
    first seed this command began the run with); `asked`: the options that gave them, for a refusal
    (depl.ledger.SeedsUsed); `also`: more of the plan's lineage (a coverage cell's task, whose calibration its
    plan's scenario may have dropped).

    `scenario` (a name, a TOML file or a Scenario) must have the loss law the plan was made with
    (`depl.validate.law_mismatch`).  `spec`: what the store records with the run beside its job
    [default: the back end and the plan]; runs shared by several plans record none of them.

    Raises ValueError (or one of its subclasses: PlanError, ScenarioError,
    StoreError, DataError, JobError) with a message for the user.
    """
    given = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    p = Plan.load(plan_file)
    if not p.feasible or not p.epochs:
        raise ValueError(f"{plan_file}: the plan is infeasible or empty; nothing to validate")
    unknown = set(p.schedule) - {m.name for m in given.models}
    if unknown:
        raise ValueError(f"{plan_file}: versions {sorted(unknown)} of the plan are not models of {given.name!r}")
    own = p.scenario_object()
    check_certificate(p, str(plan_file), own)
    why = law_mismatch(p, own, given, scenario if isinstance(scenario, str) else given.name)
    if why:
        raise ValueError(why)
    job = job_from_plan(p, device)
    run_id = execute.run_id_for(job, "local")
    where = store.path if isinstance(store, Store) else store_path(store)
    book = TaskSeeds.of(own)
    ledger = plan_lineage(p, own) + lineage(given, "the scenario given") + (also or Ledger()) + book.ledger(where, run_id)
    stored = store_ledger(store, run_id, execute.run_id_for(job, "local", prefix="certify"))
    count = seeds if isinstance(seeds, int) else len(seeds)
    first = resolve(ledger + stored, command, run_id, None if isinstance(seeds, int) else seeds[0], count, asked)
    if folder is not None:  # made only now, when nothing was refused: a refused command writes nothing
        folder.mkdir(parents=True, exist_ok=True)
    st = store if isinstance(store, Store) else Store(store)
    execute.register(st, run_id, "plan", job, {"backend": "local", "plan": p.to_json()} if spec is None else spec)
    record_range(st, book, command, run_id, first, count)
    return HeldOutRun(own, p, Path(plan_file), job, st, run_id, list(range(first, first + count)),
                      given.extrapolated(len(p.epochs)) or own.extrapolated(len(p.epochs)), ledger + stored)


def record_range(st: Store, book: TaskSeeds, command: str, plan_run: str, first: int, count: int) -> None:
    """Record the seeds first..first+count-1 that `command` judges the plan's job `plan_run` on: in the store
    (`seed_uses`, what a resumption there keeps: depl.ledger.resolve over `store_ledger`) and in the task's seed
    book (what keeps other stores off them).  A resumption with fewer seeds keeps the range it began with."""
    began = [u["last"] for u in st.uses(plan_run) if u["command"] == command and u["first"] == first]
    last = max([first + count - 1, *began])
    st.record_use(plan_run, command, first, last)
    book.record(command, first, last, st.path, plan_run)


def store_ledger(store: str | Path | Store, plan_run: str, certify_run: str) -> Ledger:
    """What `store` (a path, or a Store open already; none yet: nothing) used on a plan's job (depl.ledger)."""
    if isinstance(store, Store):
        return store_uses(store, plan_run, certify_run)
    where = store_path(store)
    if where == ":memory:" or not Path(where).is_file():
        return Ledger()
    with Store(where, readonly=True) as st:
        return store_uses(st, plan_run, certify_run)


def write_report(cert: Certificate, report: Path) -> None:
    """The validation's certificate (depl.validate.Validation.certificate) as its JSON file (`report`), its plan
    file and store relative to the report's folder (depl.paths: the folder moves whole); its band plot is drawn by
    depl.report.plots.plot_validation."""
    cert = cert.with_evidence(**relative_files(cert.evidence, ("plan_file", "store"), report))
    report.write_text(json.dumps(cert.to_json(), indent=1, allow_nan=False), encoding="utf-8")
