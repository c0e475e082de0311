"""The system model: clusters of nodes (N), datasets (D), model versions (M) and the switches between them, the
target, and the records a fit leaves (what was measured, the calibration); `parse_scenario` validates one.

Each table checks its own values; `Scenario` then runs the checks across tables (checks.py).  The loss laws'
own tables are fields of `ModelVersion` and `Switch` made from the registry of parameter models
(parameters.py), so the modules registering them (level.py) are imported before the models are made."""

from __future__ import annotations

import math
from functools import cached_property

import numpy as np
from pydantic import Field, ValidationError, create_model, field_validator, model_validator

from ..omega import Omega
from . import level  # noqa: F401 - its laws register their tables (parameters.py) before the models below are made
from .base import ScenarioError, Strict, plain_name
from .calibration import CalibrationTable
from ..certificate import DEFAULT_ALPHA, Alpha

MAX_EPOCHS = 10_000   # the most epochs a scenario's max_epochs (and so a plan) may have
from .checks import CHECKS
from .code import BUILTIN_SOURCES, builtin_or_reference
from .distributions import DistSpec
from .documents import MAX_NESTING, too_deep, validation_error
from .increments import Progress, expected_progress
from .parameters import table_fields
from .training import RECIPE_DEFAULTS, TrainSpec, TrainingOptions




class Target(Strict):
    loss: float = Field(gt=0.0, description="ℓmax: the bound on the ω-quantile of the final test loss")
    quantile: Omega
    deadline: float = Field(gt=0.0, description="Tmax")
    alpha: Alpha | None = Field(default=DEFAULT_ALPHA, description="α: a calibrated law certifies "
                                "a plan with confidence 1 − α over its held-out runs (the runs of the plan's own "
                                "schedule, each counted once, the planner's choice among them included); a calibration "
                                "without each experiment's runs certifies nothing and plans with the marginal "
                                "split-conformal rank, an estimate without a confidence (said with the plan)")


class DataLaw(Strict):
    """φ(S) = ln(1+S/s0) / ln(1+reference_samples/s0): how progress scales with data."""

    s0: float = Field(gt=0.0)
    reference_samples: float = Field(gt=0.0)

    def phi(self, samples: float) -> float:
        return math.log1p(samples / self.s0) / math.log1p(self.reference_samples / self.s0)


class Cluster(Strict):
    name: str = Field(min_length=1)
    _name = field_validator("name")(plain_name)
    capacity: float = Field(gt=0.0, description="r(n): compute per node, work units per second")
    bandwidth: float = Field(gt=0.0, description="b(n): size units per second, node to coordinator")
    unit_cost: float = Field(gt=0.0, description="κ(n): cost of one unit of allocated compute for one epoch")
    nodes: int = Field(default=1, ge=1)


class Dataset(Strict):
    name: str = Field(min_length=1)
    _name = field_validator("name")(plain_name)
    samples: float = Field(gt=0.0)
    transfer_cost: dict[str, float] = Field(default_factory=dict, description="β(d, n); a missing cluster = 0")
    source: str | None = Field(default=None, description="real data: mnist1d, digits, cifar10, fashion-mnist or MODULE:FUNCTION (for `depl run`)")
    share: tuple[float, float] = Field(default=(0.0, 1.0), description="the slice [from, to) of the source's training set")
    path: str | None = Field(default=None, description="a local folder (CIFAR-10, Fashion-MNIST); unset: the first "
                             "of --data DIR / $DEPL_DATA that holds the source, or its system folder (Fashion-MNIST)")

    @field_validator("transfer_cost")
    @classmethod
    def _nonnegative(cls, v: dict[str, float]) -> dict[str, float]:
        for k, c in v.items():
            if c < 0:
                raise ValueError(f"transfer cost to {k!r} is {c}; a cost cannot be negative")
        return v

    _source = field_validator("source")(builtin_or_reference("data source", BUILTIN_SOURCES))

    @field_validator("share")
    @classmethod
    def _share(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not (0.0 <= v[0] < v[1] <= 1.0):
            raise ValueError(f"share must be [from, to) with 0 <= from < to <= 1, got {list(v)}")
        return v


class _Version(Strict):
    name: str = Field(min_length=1)
    _name = field_validator("name")(plain_name)
    size: float = Field(ge=0.0, description="s(m)")
    work: float = Field(gt=0.0, description="w(m): compute per sample")
    progress: Progress
    noise: DistSpec = Field(description="X_m, the multiplier of the expected progress")
    train: TrainSpec | None = None

    def g(self, k: np.ndarray | int, phi: float = 1.0):
        """Expected progress of epoch k (1-based, global): A·φ/√(k+B)."""
        return expected_progress(k, self.progress.A, self.progress.B, phi)


ModelVersion = create_model("ModelVersion", __base__=_Version, __module__=__name__, **table_fields("version"))
"""A model version: its size, work, the increments law's progress and noise, its network, the laws' own tables."""


class _Switch(Strict):
    from_: str = Field(alias="from", min_length=1)
    to: str = Field(min_length=1)
    jump: DistSpec


Switch = create_model("Switch", __base__=_Switch, __module__=__name__, **table_fields("switch"))
"""A switch between two versions: the increments law's jump, the laws' own tables."""


class Measured(Strict):
    """What the profile behind a fitted law measured (written by `depl fit`): a plan is made of these conditions
    only — clusters of the measured node count, datasets holding a measured amount of training data."""

    nodes: int = Field(ge=1, le=1_000_000, description="the nodes per cluster every profiled run trained on (FedAvg)")
    samples: list[float] = Field(min_length=1, max_length=1000,
                                 description="the training samples (all nodes) the profiled runs trained on: a plan's "
                                 "datasets must hold between the fewest and the most of them")

    @field_validator("samples")
    @classmethod
    def _positive(cls, v: list[float]) -> list[float]:
        if not all(math.isfinite(x) and x > 0 for x in v):
            raise ValueError("every amount of samples must be a positive number")
        return v

    def allows_samples(self, samples: float) -> bool:
        """Whether `samples` training samples lie within what was measured (relative tolerance 1e-9)."""
        return min(self.samples) * (1 - 1e-9) <= samples <= max(self.samples) * (1 + 1e-9)

    def words(self) -> str:
        lo, hi = min(self.samples), max(self.samples)
        amount = f"{lo:g} training samples" if lo == hi else f"{lo:g} to {hi:g} training samples"
        return f"{self.nodes} node{'s' if self.nodes > 1 else ''} per cluster, {amount}"


class Scenario(Strict):
    name: str = Field(min_length=1)
    _name = field_validator("name")(plain_name)
    description: str = ""
    initial_loss: float = Field(gt=0.0, description="ℓ(0)")
    loss_model: str | None = Field(default=None, description="increments (the paper's eq. 8, the default), level, "
                                   "level-memory, or a law registered in depl.laws")
    cost_model: str | None = Field(default=None, description="per-epoch (eq. 2 as printed: κ·x per epoch, the default) "
                                   "or resource-time (κ·x·T(k) per epoch)")
    target: Target
    data_law: DataLaw | None = None
    max_epochs: int | None = Field(default=None, ge=1, le=MAX_EPOCHS, description="an upper bound on K for the search")
    fitted_epochs: int | None = Field(default=None, ge=1, le=MAX_EPOCHS,
                                      description="the last epoch the loss law was fitted on (written by `depl fit`); "
                                      "a plan longer than it extrapolates the law, and the commands warn")
    fitted_seeds: list[int] | None = Field(default=None, min_length=2, max_length=2,
                                           description="[first, last]: the seeds the loss law was fitted on (written by "
                                           "`depl fit`, every experiment's, calibration seeds excluded); "
                                           "`depl calibrate` refuses runs on them")
    clusters: list[Cluster] = Field(min_length=1)
    datasets: list[Dataset] = Field(min_length=1)
    models: list[ModelVersion] = Field(min_length=1)
    switches: list[Switch] = Field(default_factory=list)
    training: TrainingOptions = Field(default_factory=TrainingOptions)
    calibration: CalibrationTable | None = Field(default=None, description="the law recalibrated on held-out runs "
                                            "(depl fit --calibration-seeds); depl plan uses it unless use = false")
    code_dir: str | None = Field(default=None, description="the folder MODULE:FUNCTION references are imported from "
                                 "first (default: the scenario file's folder)")
    measured: Measured | None = Field(default=None, description="what the profile behind a fitted law measured "
                                      "(written by `depl fit`); plans are made of these conditions only")
    code_hashes: dict[str, str] | None = Field(
        default=None, description="sha256 of each file of your code the references run, by its path in code_dir: "
        "computed when the scenario file is read (a value in the file is replaced), carried by every plan made "
        "from it; running a plan with other code is refused")

    @model_validator(mode="after")
    def _cross_references(self) -> "Scenario":
        for check in CHECKS:
            check(self)
        return self

    def extrapolated(self, epochs: int) -> str | None:
        """Why a K-epoch schedule runs the loss law past the epochs it was fitted on; None when it does not."""
        if self.fitted_epochs is not None and epochs > self.fitted_epochs:
            also = self.calibration_beyond(epochs)
            return (f"K = {epochs} epochs runs the loss law of {self.name!r} beyond the {self.fitted_epochs} epochs it "
                    "was fitted on (fitted_epochs): past them the law is extrapolated, not measured"
                    + (f"; {also}" if also else ""))
        return None

    def uncalibrated(self) -> "Scenario":
        """The scenario with its law as fitted: its [calibration], if any, not used (`depl plan --uncalibrated`)."""
        if self.calibration is None or not self.calibration.use:
            return self
        return self.model_copy(update={"calibration": self.calibration.model_copy(update={"use": False})})

    def calibration_mismatch(self) -> str | None:
        """Why the [calibration]'s runs cannot certify this scenario's runs (they drew their data otherwise, [training]
        data_draw); None when they can (or there is no calibration)."""
        c = self.calibration
        if c is None or c.data_draw == self.training.data_draw:
            return None
        how = {"fixed": "kept the data fixed (every run on the same data, node split and test set)",
               "run": "each drew its own data"}
        return (f"the calibration runs of {self.name!r} {how[c.data_draw]}, but its runs "
                f"{'draw their own' if self.training.data_draw == 'run' else 'keep the data fixed'} ([training] "
                f"data_draw = \"{self.training.data_draw}\"): they certify nothing here; profile calibration runs "
                f"with data_draw = \"{self.training.data_draw}\" (`depl profile SCENARIO --first-seed N`, then "
                "`depl calibrate`)")

    def calibration_beyond(self, epochs: int) -> str | None:
        """Why a K-epoch schedule is calibrated by the scores of an earlier epoch; None when it is not."""
        c = self.calibration
        if c is None or not c.use or not c.epoch_scores or epochs <= len(c.epoch_scores):
            return None
        n = len(c.epoch_scores)
        return (f"the [calibration] of {self.name!r} scored epochs 1..{n} only: K = {epochs} is calibrated with the "
                f"epoch-{n} scores, not at K")

    @property
    def resource_time(self) -> bool:
        """Whether an epoch costs κ·x·nodes·T(k) (resource-time) rather than κ·x·nodes (eq. 2 as printed)."""
        return self.cost_model == "resource-time"

    # -- lookups the planners use ------------------------------------------ #
    @cached_property
    def model_index(self) -> dict[str, int]:
        return {m.name: i for i, m in enumerate(self.models)}

    @cached_property
    def cluster_index(self) -> dict[str, int]:
        return {c.name: i for i, c in enumerate(self.clusters)}

    @cached_property
    def switch_map(self) -> dict[tuple[str, str], Switch]:
        return {(s.from_, s.to): s for s in self.switches}

    def phi(self, samples: float) -> float:
        """φ(S); 1 when the scenario has no data law."""
        return 1.0 if self.data_law is None else self.data_law.phi(samples)

    def samples(self, dataset_names) -> float:
        by_name = {d.name: d for d in self.datasets}
        return float(sum(by_name[n].samples for n in dataset_names))

    def measured_data(self, dataset_names) -> bool:
        """Whether a choice of datasets holds an amount of training data the profile measured (always, without
        a [measured] table)."""
        return self.measured is None or self.measured.allows_samples(self.samples(dataset_names))

    def measured_only(self) -> "Scenario":
        """The scenario with only the clusters of the measured node count (their transfer costs too); itself when
        nothing is dropped.  ValueError, saying what to profile, when no cluster is left."""
        if self.measured is None or all(c.nodes == self.measured.nodes for c in self.clusters):
            return self
        keep = [c.name for c in self.clusters if c.nodes == self.measured.nodes]
        if not keep:
            have = ", ".join(f"{c.name}: {c.nodes}" for c in self.clusters)
            nodes = sorted({c.nodes for c in self.clusters})
            raise ValueError(f"scenario {self.name!r}: its loss law was measured on {self.measured.nodes} node(s) per "
                             f"cluster ([measured] nodes), and no cluster has that many ({have}); to plan on them, "
                             f"profile on {' or '.join(map(str, nodes))} node(s): depl profile SCENARIO --nodes "
                             f"{nodes[0]} …, then depl fit")
        data = scenario_dict(self)
        data["clusters"] = [c for c in data["clusters"] if c["name"] in keep]
        for d in data["datasets"]:
            d["transfer_cost"] = {k: v for k, v in d.get("transfer_cost", {}).items() if k in keep}
        return parse_scenario(data, f"{self.name} (its measured clusters)")

    def transfer_cost(self, dataset_names, cluster_name: str) -> float:
        by_name = {d.name: d for d in self.datasets}
        return float(sum(by_name[n].transfer_cost.get(cluster_name, 0.0) for n in dataset_names))


def parse_scenario(data: dict, source: str = "<scenario>") -> Scenario:
    """Validate a scenario given as a dict (the content of a TOML file)."""
    deep = too_deep(data)
    if deep:
        raise ScenarioError(f"{source}: {deep}: lists or tables nested more than {MAX_NESTING} deep; a scenario "
                            "nests a few levels")
    try:
        return Scenario.model_validate(data)
    except RecursionError:  # pragma: no cover - too_deep refuses what would recurse this far
        raise ScenarioError(f"{source}: nested too deep to be read") from None
    except ValidationError as e:
        raise validation_error(e, data, source) from None


def scenario_dict(s: Scenario) -> dict:
    """The scenario as plain data (round-trips through `parse_scenario`). A data draw at its default ("fixed") and
    the training recipe's keys at their defaults (`RECIPE_DEFAULTS`) are left out, so a scenario written before
    those keys existed reads the same (a plan's `scenario_spec`, and the stores whose runs record it)."""
    d = s.model_dump(mode="json", by_alias=True, exclude_none=True)
    for table in ("training", "calibration"):
        if d.get(table, {}).get("data_draw") == "fixed":
            del d[table]["data_draw"]
    training = d.get("training", {})
    for key, default in RECIPE_DEFAULTS.items():
        if key in training and training[key] == default:
            del training[key]
    return d
