"""`depl certify`'s workflow: a plan run on fresh seeds until a sequential test certifies or refutes it
(depl.train.loops.certify), its certificate written as OUT/PLAN-certificate.json."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from ..certificate import DEFAULT_ALPHA, DEFAULT_PRIOR, PRIORS, Certificate, Outcome, check_alpha
from .common import Training, check_folder, start_training
from .errors import as_bad_input, training_errors
from ..jsonout import dumps
from ..paths import relative_files
from ..plan import Plan
from ..train.loops.certify import certify as sequential, prepare, seeds_for

if TYPE_CHECKING:
    from ..train.loops.certify import Decided


@dataclass(frozen=True)
class Certified:
    """What the runs decided (`decided`) and its certificate (`certificate`, bounds searched once), written at
    `report`."""

    decided: "Decided"
    certificate: Certificate
    report: Path

    @property
    def verdict(self) -> Outcome:
        """certified, refuted or undecided."""
        return self.certificate.verdict

    def to_json(self) -> dict:
        return {**self.certificate.to_json(), "report": str(self.report)}


def prepare_certify(plan_file: str | Path, alpha: Optional[float] = None, *, out: str | Path = Path("depl-certify"),
                    training: Training = Training(), store: Optional[str] = None, first_seed: Optional[int] = None,
                    max_runs: int = 500, prior: Optional[str] = None) -> Any:
    """The plan, its certificate text, its code, α, the e-process and the seeds checked before anything is written
    (depl.train.loops.certify.Prepared, its first seed chosen: `first_seed`, or the plan's first free seed; seeds its
    lineage used, or another α or first seed than a resumed run began with, are refused).  `alpha` None: the
    plan's (its scenario's [target] alpha, else DEFAULT_ALPHA)."""
    plan_file, out = Path(plan_file), Path(out)
    dev = start_training(training.threads, training.device)

    check_folder("--out", out)
    with as_bad_input(*training_errors(), ValueError, OSError):
        if alpha is None:
            alpha = Plan.load(plan_file).alpha
        check_alpha(alpha, "--alpha")
        if prior is not None and prior not in PRIORS:
            raise ValueError(f"--prior {prior}: must be one of {', '.join(PRIORS)} (the sequential test's e-process)")
        return seeds_for(prepare(plan_file, alpha, dev, prior or DEFAULT_PRIOR), store or out / "runs.sqlite",
                         first_seed, max_runs)


def run_certify(prep: Any, *, out: str | Path = Path("depl-certify"), store: Optional[str] = None,
                first_seed: Optional[int] = None, max_runs: int = 500, batch: int = 32, training: Training = Training(),
                progress: Optional[Callable] = None, on_decision: Optional[Callable] = None) -> Certified:
    """Train seeds F, F+1, … `batch` at a time until the test decides or `max_runs` are counted; write the
    certificate.  F: `first_seed`, else the one `prepare_certify` chose. progress(run_id, seed, epoch, result) after every epoch, on_decision(verdict) after every batch."""

    out = Path(out)
    with as_bad_input(*training_errors(), ValueError, OSError):
        out.mkdir(parents=True, exist_ok=True)
        c = sequential(prep, store=store or out / "runs.sqlite", first_seed=first_seed, max_runs=max_runs,
                       batch=batch, options=training.seed_options(), progress=progress, on_decision=on_decision)
    report = out / f"{prep.plan_file.stem}-certificate.json"
    cert = c.certificate()  # the bounds are searched once, for the file, the text and --json alike
    # the plan and the store recorded relative to the certificate's folder (depl.paths): the folder moves whole
    kept = cert.with_evidence(**relative_files(cert.evidence, ("plan_file", "store"), report))
    report.write_text(dumps(kept.to_json()) + "\n", encoding="utf-8")
    return Certified(c, cert, report)


def certify(plan_file: str | Path, alpha: Optional[float] = None, *, out: str | Path = Path("depl-certify"),
            store: Optional[str] = None,
            first_seed: Optional[int] = None, max_runs: int = 500, batch: int = 32, training: Training = Training(),
            progress: Optional[Callable] = None, on_decision: Optional[Callable] = None,
            prior: Optional[str] = None) -> Certified:
    """Certify a plan on fresh real runs (`depl certify`): "with probability ≥ 1 − α, it meets ℓmax with
    probability ≥ ω" (seeds from `first_seed`, default: the plan's first free seed, depl.ledger). Resumes."""
    prep = prepare_certify(plan_file, alpha, out=out, training=training, store=store, first_seed=first_seed,
                           max_runs=max_runs, prior=prior)
    return run_certify(prep, out=out, store=store, first_seed=first_seed, max_runs=max_runs, batch=batch,
                       training=training, progress=progress, on_decision=on_decision)
