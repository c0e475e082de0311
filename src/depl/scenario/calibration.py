"""A scenario's [calibration] table: the loss law recalibrated on runs it was not fitted on (written by `depl fit`
and `depl calibrate`, read by depl.loss.calibrated), and the rule that picks a plan's scores by its length."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from ..certificate import conformal
from ..laws import calibrator_names
from ..omega import Omega
from .base import Strict

CALIBRATION_METHODS = ("conformal-pit",)
"""The built-in calibrators (depl.laws registers them; a scenario may name any registered one)."""


def scores_at(scores, epoch_scores, epoch: int):
    """The calibration scores of ℓ(epoch): row min(epoch, rows) of `epoch_scores` (epoch ≥ 1), or `scores` (the
    last epoch's) without them — the one rule of a [calibration] table and of depl.loss.calibrated's law."""
    if not epoch_scores:
        return scores
    return epoch_scores[min(max(int(epoch), 1), len(epoch_scores)) - 1]


def _score_rows(rows: list[list[float]], where: str = "") -> list[list[float]]:
    """Rows of PIT scores, one per epoch, each non-empty and in [0, 1] (else a ValueError naming the row), sorted."""
    for k, row in enumerate(rows, 1):
        if not row:
            raise ValueError(f"{where}epoch_scores row {k} (epoch {k}) is empty: every scored epoch needs scores")
        bad = [x for x in row if not 0.0 <= x <= 1.0]
        if bad:
            raise ValueError(f"{where}epoch_scores row {k} (epoch {k}): scores are probabilities in [0, 1], "
                             f"got {bad[0]!r}")
    return [sorted(row) for row in rows]


class CalibrationExperiment(Strict):
    """One calibration experiment's own scores (written by `depl calibrate` and `depl fit`): a plan whose schedule
    is this experiment's first K epochs, at its data factor φ, is a run like the experiment's seeds — exchangeable
    with them — and is certified by their epoch-K scores where they reach ω (depl.loss.calibrated)."""

    label: str = Field(min_length=1, description="the experiment, as depl fit names it (e.g. full→pruned-0.5@1)")
    versions: list[str] = Field(min_length=1, description="the versions it trained, in order")
    epochs: list[int] = Field(min_length=1, description="how many epochs of each of `versions`")
    phi: float = Field(gt=0.0, description="the data factor φ of its training samples (scenario.phi)")
    epoch_scores: list[list[float]] = Field(min_length=1, description="epoch_scores[k-1]: PIT of ℓ(k) of each of "
                                            "its seeds under the law of its first k epochs")

    seeds: list[int] | None = Field(default=None, max_length=1_000_000, description="the seed of each of its runs, "
                                    "each once: the distinct runs a certificate counts (depl fit writes them)")

    @model_validator(mode="after")
    def _shape(self) -> "CalibrationExperiment":
        if len(self.versions) != len(self.epochs) or any(e < 1 for e in self.epochs):
            raise ValueError(f"experiment {self.label!r}: versions and epochs pair up (one count ≥ 1 per version), "
                             f"got {len(self.versions)} versions and epochs {self.epochs}")
        if len(self.epoch_scores) != sum(self.epochs):
            raise ValueError(f"experiment {self.label!r}: one row of epoch_scores per epoch ({sum(self.epochs)}), "
                             f"got {len(self.epoch_scores)}")
        _score_rows(self.epoch_scores, f"experiment {self.label!r}, ")
        if self.seeds is not None:
            if len(set(self.seeds)) != len(self.seeds):
                raise ValueError(f"experiment {self.label!r}: a seed is listed twice in seeds (each run counts once)")
            if len(self.seeds) != max(len(r) for r in self.epoch_scores):
                raise ValueError(f"experiment {self.label!r}: {len(self.seeds)} seeds for "
                                 f"{max(len(r) for r in self.epoch_scores)} runs scored (one seed per run)")
        return self

    @property
    def schedule(self) -> tuple[str, ...]:
        return tuple(v for v, n in zip(self.versions, self.epochs) for _ in range(n))


class CalibrationTable(Strict):
    """The loss law recalibrated on runs it was not fitted on (depl.loss.calibrated; written by `depl fit`).

    `scores` are the PIT values F(ℓ(E)) of the held-out runs at their last epoch under the law; the certified
    ω-quantile is the law's quantile at the ⌈(n+1)·ω⌉-th smallest score (split conformal), which needs
    n ≥ ω/(1−ω) scores.  `epoch_scores[k-1]` (written since; optional) are the PIT values of ℓ(k) of the same
    runs under the law of their schedule's first k epochs: a K-epoch plan is certified at the level of the
    epoch-K scores (past the scored epochs, the last scored epoch's); without them, every K at `scores`'."""

    method: str = Field(default="conformal-pit", description="conformal-pit: split conformal on PIT scores")
    use: bool = Field(default=True, description="false: plan with the uncalibrated law (the scores stay for the record)")
    omega: Omega | None = Field(default=None, description="the ω the fit calibrated for (a record)")
    scores: list[float] = Field(min_length=1, description="PIT of each held-out (experiment, seed) at its last epoch")
    epoch_scores: list[list[float]] | None = Field(
        default=None, description="epoch_scores[k-1]: PIT of ℓ(k) of each held-out (experiment, seed) under the law "
        "of its schedule's first k epochs; a K-epoch plan is calibrated by row min(K, rows)")
    experiments: list[CalibrationExperiment] | None = Field(
        default=None, description="each calibration experiment's own epoch scores: a plan whose schedule is an "
        "experiment's first K epochs (same φ) is certified by the epoch-K scores of the experiments it matches, at "
        "the levels they reach")
    data_draw: Literal["fixed", "run"] = Field(
        default="fixed", description="the calibration runs' data: the same for every run (fixed), or each run's own "
        "draw ([training] data_draw = \"run\"); a certificate holds only for runs of the same kind")

    @field_validator("method")
    @classmethod
    def _method(cls, v: str) -> str:
        if v not in calibrator_names():
            raise ValueError(f"method must be one of {', '.join(calibrator_names())}, got {v!r}")
        return v

    @field_validator("scores")
    @classmethod
    def _scores(cls, v: list[float]) -> list[float]:
        bad = [x for x in v if not 0.0 <= x <= 1.0]
        if bad:
            raise ValueError(f"scores are probabilities in [0, 1], got {bad[0]!r}")
        return sorted(v)

    @field_validator("epoch_scores")
    @classmethod
    def _epoch_scores(cls, v: list[list[float]] | None) -> list[list[float]] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("epoch_scores: one row of scores per epoch 1, 2, …; got no row (omit the key instead)")
        return _score_rows(v)

    def scores_at(self, epoch: int) -> list[float]:
        """The scores that calibrate ℓ(epoch): row min(epoch, rows) of epoch_scores; `scores` without them."""
        return scores_at(self.scores, self.epoch_scores, epoch)

    def fewest(self) -> tuple[int, int | None]:
        """(the fewest scores of any scored epoch, that epoch; None without epoch_scores: then len(scores))."""
        if not self.epoch_scores:
            return len(self.scores), None
        k = min(range(len(self.epoch_scores)), key=lambda i: len(self.epoch_scores[i]))
        return min(len(self.scores), len(self.epoch_scores[k])), k + 1

    @staticmethod
    def needed(omega: Omega) -> int:
        """The fewest scores that reach ω: ⌈(n+1)ω⌉ ≤ n ⇔ n ≥ ω/(1−ω)."""
        return conformal.scores_needed(omega)
