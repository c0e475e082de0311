"""`depl validate`'s workflow: a plan run for real on held-out seeds and judged (open loop: coverage of ℓ(K)
and the planned band; closed loop: coverage of the final test loss and the mean cost)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from .common import Training, check_folder, check_output_file, run_seeds, seed_range, start_training
from .errors import BadInput, as_bad_input, training_errors
from .training import AdaptiveResult, AdaptiveRun, run_adaptive
from ..certificate import Certificate
from ..ledger import TaskSeeds, check_certificate, lineage, plan_lineage, resolve
from ..plan import Plan
from ..report.plots import plot_validation
from ..scenario import load_scenario
from ..store import store_path
from ..validate import coverage, law_mismatch
from ..train.engine.execute import run_id_for
from ..train.engine.federation import job_from_plan
from ..train.loops.validation import prepare, record_range, store_ledger, write_report
from ..adaptive import promise

# the seeds a closed-loop validation (`depl validate --adaptive`) judged the plan on, as its store and the task's
# seed book name them (depl.ledger)
ADAPTIVE = "validate-adaptive"

if TYPE_CHECKING:
    from ..validate import Coverage, Validation


@dataclass(frozen=True)
class HeldOut:
    """A plan's run on held-out seeds registered in its store (`run`: depl.train.loops.validation.HeldOutRun), and
    where its report and band plot go."""

    run: Any
    report: Path
    png: Path


@dataclass(frozen=True)
class Validated:
    """The plan judged (`validation`): its certificate (kind validation, the verdict; written as `report`), and
    its band drawn at `png`."""

    validation: "Validation"
    certificate: Certificate
    report: Path
    png: Path
    seconds: float
    seed_training: Any = None   # how the seeds trained (depl.train.backends.executors.Decision)

    def to_json(self) -> dict:
        """The certificate, as its file holds it, with where the report and band are and how the seeds trained."""
        return {**self.certificate.to_json(), "report": str(self.report), "png": str(self.png),
                "seed_training": None if self.seed_training is None else self.seed_training.to_json()}


def prepare_validation(scenario: str, plan_file: str | Path, seeds: list[int] | int, *,
                       out: str | Path = Path("depl-validate"),
                       store: Optional[str] = None, png: str | Path | None = None,
                       training: Training = Training(), asked: str = "") -> HeldOut:
    """Check the scenario (it must have the plan's loss law), the plan, the seeds (a range F..F+N-1, or their
    count N from the plan's first free seed: depl.ledger) and the outputs; register the run."""
    plan_file, out, png = Path(plan_file), Path(out), None if png is None else Path(png)
    dev = start_training(training.threads, training.device)

    check_folder("--out", out)
    if png is not None:  # checked now: the plot is drawn after the training
        check_output_file("--png", png)
    with as_bad_input(*training_errors(), ValueError, OSError):
        h = prepare(scenario, plan_file, seeds, store or out / "runs.sqlite", dev, folder=out, asked=asked)
    return HeldOut(h, out / f"{plan_file.stem}-validate.json", png or out / f"{plan_file.stem}-validate.png")


def train_validation(held: HeldOut, training: Training = Training(),
                     progress: Optional[Callable] = None, said: Optional[Callable[[str], None]] = None) -> Validated:
    """Train the pending seeds (progress(run_id, seed, epoch, result) after every epoch; said(text): how they
    train, `run_seeds`), judge the plan by them, and write its report and band plot."""

    h = held.run
    t0 = time.perf_counter()
    how = run_seeds(h.store, [(h.run_id, h.job, h.seeds)], training, progress, said)
    v = h.judge()
    cert = v.certificate(scenario=h.plan.scenario, run_id=h.run_id, store=str(h.store.path))
    seconds = time.perf_counter() - t0
    write_report(cert, held.report)
    plot_validation(v, held.png)
    return Validated(v, cert, held.report, held.png, seconds, how)


def validate(scenario: str, plan_file: str | Path, seeds: list[int] | int, *, out: str | Path = Path("depl-validate"),
             store: Optional[str] = None, png: str | Path | None = None, training: Training = Training(),
             progress: Optional[Callable] = None) -> Validated:
    """Run a plan for real on held-out seeds (a range, or their count from the plan's first free seed); coverage
    P(ℓ(K) ≤ ℓmax) with a Clopper–Pearson interval vs ω (`depl validate`). Resumes."""
    held = prepare_validation(scenario, plan_file, seeds, out=out, store=store, png=png, training=training)
    return train_validation(held, training, progress)


@dataclass(frozen=True)
class AdaptiveValidated:
    """The closed loop's runs judged: coverage of their final test loss (`certificate`: kind validation, the
    verdict), and their mean cost."""

    plan_file: Path
    plan: "Plan"
    coverage: "Coverage"
    certificate: Certificate
    mean_cost: float
    actions: dict = field(hash=False)
    rule: dict = field(default_factory=dict, hash=False)   # what decided the stops (the run spec's `adaptive`)
    run_id: str = ""
    run: Optional[AdaptiveResult] = field(default=None, hash=False, compare=False)   # the seeds' outcomes

    def to_json(self) -> dict:
        """The certificate, in the one shape."""
        return self.certificate.to_json()


def check_same_law(scenario: str, plan_file: Path, store: str | Path, first_seed: Optional[int] = None,
                   count: int = 0, asked: str = "", device: str = "cpu") -> tuple[int, str]:
    """SCENARIO must have the plan's loss law (as for an open-loop validation): the closed loop decides with it.
    The plan's certificate text is checked, and the seeds first_seed..+count-1 against every use that judged the
    plan before (depl.ledger): its lineage's (the fit's, the calibration's, its search's), the task's seed book
    (validations, certificates and searches in other stores) and `store`'s own uses of the plan's job; returns
    the first seed (None: the one this store's closed-loop validation of the plan began with, else the first free
    one: depl.ledger.resolve, as for the open loop) and the run id of the plan's job, which the range is recorded
    on (`record_range`, once the closed loop's run is registered)."""
    with as_bad_input(*training_errors(), ValueError, OSError):
        p = Plan.load(plan_file)
        own, given = p.scenario_object(), load_scenario(scenario)
        check_certificate(p, str(plan_file), own)
        why = law_mismatch(p, own, given, str(scenario))
        if why:
            raise BadInput(why)
        job = job_from_plan(p, device)
        plan_run = run_id_for(job, "local")   # the plan's job, as an open-loop validation of it names it
        here = store_path(store)
        ledger = (plan_lineage(p, own) + lineage(given, "the scenario given") + TaskSeeds.of(own).ledger(here, plan_run)
                  + store_ledger(here, plan_run, run_id_for(job, "local", prefix="certify")))
        first = resolve(ledger, ADAPTIVE, plan_run, first_seed, count, asked)
        return first, plan_run


def judge_adaptive(plan_file: str | Path, done: AdaptiveResult) -> AdaptiveValidated:
    """The closed loop's seeds judged against the plan's target and the ω it promises (a plan certified at a
    stricter ω′ to leave slack promises ω: depl.adaptive.promise)."""
    import numpy as np

    p = done.plan

    c, mean_cost = coverage(done.finals, p.loss_target, promise(p), p.alpha), float(np.nanmean(done.costs))
    cert = c.certificate(done.seeds, plan_file=str(plan_file), method=p.method, scenario=p.scenario,
                         epochs=len(p.epochs), coverage=c.rate, mean_cost=mean_cost, plan_cost=p.cost,
                         actions=done.actions, adaptive=done.spec, run_id=done.run_id)
    return AdaptiveValidated(plan_file, p, c, cert, mean_cost, done.actions, done.spec, done.run_id, done)


def validate_adaptive(scenario: str, plan_file: str | Path, seeds: list[int] | int, *,
                      out: str | Path = Path("depl-validate"), store: Optional[str] = None,
                      training: Training = Training(), validation: Optional[float] = None, rule: str = "slack",
                      progress: Optional[Callable] = None, gap_from: Optional[list[str | Path]] = None,
                      certificate: Optional[str | Path] = None, asked: str = "",
                      started: Optional[Callable[[AdaptiveRun], None]] = None) -> AdaptiveValidated:
    """`depl validate --adaptive`: the seeds (a range F..F+N-1, or their count N from the plan's first free seed:
    depl.ledger; `asked`: how the user named them, for a refusal) run by the closed loop (`run_adaptive`, with its
    `started` and `progress`), judged. Resumes."""
    plan_file = Path(plan_file)
    here = store or Path(out) / "runs.sqlite"
    count = seeds if isinstance(seeds, int) else len(seeds)
    first, plan_run = check_same_law(scenario, plan_file, here, None if isinstance(seeds, int) else seeds[0], count,
                                     asked, training.device)
    seeds = seed_range(first, count)

    def one_rule(a: AdaptiveRun) -> None:
        """Seeds that judged the plan's closed loop under one rule never judge it under another (a choice of
        rule made after seeing both would not be covered): another closed-loop run in this store on them is
        refused before any seed trains."""
        for r in a.store.runs("plan"):
            other = r["run_id"] != a.run_id and r["run_id"].startswith("adaptive-")
            both = sorted(set(a.store.seeds(r["run_id"])) & set(a.seeds)) if other else []
            if both:
                raise BadInput(f"seeds {both[0]}..{both[-1]} already judged this plan's closed loop in {a.store.path}"
                               f" (run {r['run_id']}, another rule, validation split or slack); another rule takes "
                               f"fresh seeds in another store (--out DIR, from the first free seed)")
        with as_bad_input(OSError):
            record_range(a.store, TaskSeeds.of(a.plan.scenario_object()), ADAPTIVE, plan_run, first, count)
        if started is not None:
            started(a)

    done = run_adaptive(plan_file, seeds, store=store, out=out, training=training, validation=validation,
                        rule=rule, progress=progress, gap_from=gap_from, certificate=certificate, started=one_rule)
    return judge_adaptive(plan_file, done)
