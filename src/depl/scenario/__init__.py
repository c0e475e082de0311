"""The system model: a validated scenario, read once from TOML.

A scenario names the clusters of nodes (N), the datasets (D), the model
versions (M) with their loss law, the allowed switches between versions, and
the target: the ω-quantile of the final test loss at or below ℓmax by Tmax.

Everything is checked here, at the boundary (pydantic); the planners trust a
`Scenario` and never re-check it.  A bad file raises `ScenarioError`, whose
message names the file, the field, the bad value and why.

>>> s = load_scenario("paper-alexnet")
>>> s.target.quantile
0.99
"""

from __future__ import annotations

import math
import re
import tomllib
import types
import typing
import unicodedata
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .. import codefiles, families

BUILTIN_PACKAGE = "depl.scenarios"


class ScenarioError(ValueError):
    """A scenario that cannot be used; the message is meant for the user."""


# Every number of a scenario lies within ±MAGNITUDE: beyond it the planners'
# sums of squares and cubes of progress overflow a float (1e308), and no
# physical quantity of a training system needs more than 12 decimal digits of
# range once its unit is chosen sensibly.
MAGNITUDE = 1e12
# The data factor φ(S) multiplies the laws' progress (and their time axis): within ±6 orders of magnitude of 1 a
# fitted law stays in floating point; φ = 1e300 (reference_samples = 1e-300) turns its sums into NaN.
PHI_MAX = 1e6

# The networks and data sources depl builds itself (depl.train.nets.NETS and
# depl.train.data.SOURCES; a test keeps the lists equal).  They are named here
# so that a scenario is checked without importing torch.  A value with a ':'
# is the user's own MODULE:FUNCTION, checked where it is imported.
BUILTIN_NETS = ("cnn1d", "cnn2d", "alexnet", "mobilenet")
BUILTIN_SOURCES = ("mnist1d", "digits", "cifar10")

# The largest log-sd of the level law: exp(σ·Z) with σ = 50 is NaN in float
# arithmetic; σ = 10 already spreads the loss over e^±20.
LOG_SD_MAX = 10.0


def _out_of_range(value: Any, where: str = "") -> str | None:
    """Why `value` (a number, or numbers in a dict/tuple/list) is not usable; None when it is."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        if abs(value) > MAGNITUDE:
            return (f"{where}{value!r} is beyond ±{MAGNITUDE:g}; depl's arithmetic overflows there "
                    "(choose units in which the numbers are smaller)")
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (tuple, list)) else ()
    for k, v in items:
        why = _out_of_range(v, f"{k} = " if isinstance(value, dict) else f"[{k}] = ")
        if why:
            return why
    return None


def control_character(text: str) -> str | None:
    """The first control character (a newline, a tab, an escape, …: Unicode category Cc) of `text`, or None."""
    return next((c for c in text if unicodedata.category(c) == "Cc"), None)


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a scenario, a cluster, a dataset or a model version; None when it can.  A control
    character would break the one-line messages, the tables and the TOML files that carry the name."""
    c = control_character(name)
    if c is not None:
        return f"a name holds no control character (newline, tab, …); found {c!r}"
    return None


def _plain_name(v: str) -> str:
    why = name_problem(v)
    if why:
        raise ValueError(why)
    return v


# Scenario and plan documents nest a few levels (a plan's scenario_spec.calibration.epoch_scores: 5); Python's
# parsers and pydantic recurse once per level, and a document nested thousands deep stops them with a RecursionError.
MAX_NESTING = 32
# Python reads at most 4300 digits of a whole number (sys.get_int_max_str_digits); no field takes such a number.
_HUGE_INTEGER = re.compile(r"[0-9][0-9_]{4300,}")


def too_deep(data: Any, limit: int = MAX_NESTING) -> str | None:
    """The path (`models[0].train.net_args.a`) of the first value of `data` nested more than `limit` lists or
    tables deep, found without recursion; None when there is none."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        v, where, depth = stack.pop()
        if isinstance(v, dict):
            items = [(f"{where}.{k}" if where else str(k), x) for k, x in v.items()]
        elif isinstance(v, (list, tuple)):
            items = [(f"{where}[{i}]", x) for i, x in enumerate(v)]
        else:
            continue
        if depth >= limit:
            return where or "the document"
        stack.extend((x, w, depth + 1) for w, x in reversed(items))
    return None


def unreadable_text(text: str, source: str, e: Exception, kind: str, what: str) -> str:
    """One line saying why `text` (TOML or JSON) could not be parsed: where an integer is too long for Python or
    the nesting too deep for its parser, the line and the key; else the parser's own message."""
    if isinstance(e, ValueError) and "digits" in str(e):
        m = _HUGE_INTEGER.search(text)
        if m:
            line = text.count("\n", 0, m.start()) + 1
            head = text[text.rfind("\n", 0, m.start()) + 1:m.start()]
            named = re.search(r'"((?:[^"\\]|\\.)*)"\s*:\s*\[?\s*$' if kind == "JSON" else r"([\w.\-\"']+)\s*=\s*\[?\s*$",
                              head)
            key = named.group(1) if named else "a value"
            return (f"{source}: line {line}: {key} = an integer of {len(m.group().replace('_', ''))} digits: Python "
                    "reads at most 4300 digits of a number, and no field takes one so large")
    if isinstance(e, RecursionError):
        depth, line = 0, 1
        for c in text:
            if c == "\n":
                line += 1
            elif c in "[{":
                depth += 1
                if depth > MAX_NESTING:
                    break
            elif c in "]}":
                depth -= 1
        where = f"line {line}: " if depth > MAX_NESTING else ""
        return (f"{source}: {where}lists or tables nested too deep to be read (a {what} nests a few levels; "
                f"{MAX_NESTING} at most)")
    return f"{source}: not valid {kind}: {e}"


def _numeric(annotation: Any) -> bool:
    """Whether a field holds numbers only (int, float, and lists, tuples, dicts and optionals of them)."""
    if annotation in (int, float):
        return True
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin is dict:
        return len(args) == 2 and _numeric(args[1])
    return origin in (list, tuple, typing.Union, types.UnionType) and bool(args) and \
        all(a is Ellipsis or _numeric(a) for a in args)


def _has_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_bool(x) for x in value)
    return isinstance(value, dict) and any(_has_bool(x) for x in value.values())


class _Strict(BaseModel):
    # allow_inf_nan=False: NaN and ±inf are refused in every float, dict and tuple of floats
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, v: Any, info: ValidationInfo) -> Any:
        # pydantic reads true/false as 1/0 where a number is expected (lax mode, which ints in TOML need).  Only a
        # field of numbers is scanned: a nested model's values are checked by its own fields
        if _numeric(cls.model_fields[info.field_name].annotation) and _has_bool(v):
            raise ValueError("expected a number, not true/false" if isinstance(v, bool) else
                             "expected numbers, got true/false among them")
        return v

    @field_validator("*", mode="after")
    @classmethod
    def _bounded(cls, v: Any) -> Any:
        why = _out_of_range(v)
        if why:
            raise ValueError(why)
        return v


# --------------------------------------------------------------------------- #
# Distributions: scipy.stats families with their parameters, or mean/var.
# --------------------------------------------------------------------------- #

def _solve_mean_var(family: str, mean: float, var: float, given: dict[str, float]) -> dict[str, float]:
    """Parameters of `family` with the given mean and variance (closed forms)."""
    if var <= 0:
        raise ValueError(f"var must be > 0, got {var}")
    if family == "invgamma":
        if mean <= 0:
            raise ValueError(f"an Inverse-Gamma has a positive mean, got mean = {mean}")
        a = mean**2 / var + 2.0
        return {"a": a, "scale": mean * (a - 1.0)}
    if family == "gamma":
        if mean <= 0:
            raise ValueError(f"a Gamma has a positive mean, got mean = {mean}")
        return {"a": mean**2 / var, "scale": var / mean}
    if family == "norm":
        return {"loc": mean, "scale": math.sqrt(var)}
    if family == "lognorm":
        if mean <= 0:
            raise ValueError(f"a log-normal has a positive mean, got mean = {mean}")
        s2 = math.log1p(var / mean**2)
        return {"s": math.sqrt(s2), "scale": mean * math.exp(-s2 / 2)}
    if family == "t":
        df = given.get("df")
        if df is None or df <= 2:
            raise ValueError("a Student-t given by mean/var needs params.df > 2 (its variance is finite only then)")
        return {"df": df, "loc": mean, "scale": math.sqrt(var * (df - 2) / df)}
    raise ValueError(
        f"mean/var can be solved for invgamma, gamma, norm, lognorm and t (with df); "
        f"give `params` for family {family!r}"
    )


class DistSpec(_Strict):
    """A scipy.stats distribution: `family` with `params`, or with `mean` and `var`."""

    family: str
    params: dict[str, float] = Field(default_factory=dict)
    mean: float | None = None
    var: float | None = None

    @field_validator("family")
    @classmethod
    def _known_family(cls, v: str) -> str:
        if not families.is_family(v):
            raise ValueError(f"{v!r} is not a continuous distribution of scipy.stats (e.g. invgamma, gamma, norm, lognorm, t)")
        return v

    @model_validator(mode="after")
    def _resolvable(self) -> "DistSpec":
        if (self.mean is None) != (self.var is None):
            raise ValueError("give both `mean` and `var`, or neither")
        if self.mean is not None:
            # mean/var fix two parameters; only a Student-t's df may be given besides them
            extra = sorted(set(self.params) - ({"df"} if self.family == "t" else set()))
            if extra:
                raise ValueError(f"give either `params` or `mean` and `var`, not both: params {extra} "
                                 f"would be ignored (mean/var determine {self.family}'s parameters)")
        try:
            frozen = self.frozen
            m, v = frozen.mean(), frozen.var()
        except (TypeError, ValueError) as e:
            raise ValueError(f"{self.family} with these parameters: {e}") from None
        if not np.isfinite(m):
            raise ValueError(f"{self.family} with parameters {self.resolved_params} has no finite mean")
        if not np.isfinite(v):
            raise ValueError(f"{self.family} with parameters {self.resolved_params} has no finite variance")
        return self

    @property
    def resolved_params(self) -> dict[str, float]:
        if self.mean is not None and self.var is not None:
            return _solve_mean_var(self.family, self.mean, self.var, self.params)
        return dict(self.params)

    @property
    def frozen(self):
        """The distribution: a depl.families.Frozen for the families the laws use (scipy.stats' face and
        numbers without importing scipy.stats), else the frozen scipy.stats distribution."""
        params = self.resolved_params
        shapes = list(families.shape_names(self.family))
        unknown = set(params) - set(shapes) - {"loc", "scale"}
        if unknown:
            raise ValueError(f"unknown parameter(s) {sorted(unknown)}; {self.family} takes {shapes + ['loc', 'scale']}")
        missing = [s for s in shapes if s not in params]
        if missing:
            raise ValueError(f"missing shape parameter(s) {missing} for {self.family}")
        frozen = families.frozen(self.family, params)
        if not families.in_domain(frozen):
            raise ValueError(f"parameters {params} are outside the domain of {self.family}")
        return frozen


# --------------------------------------------------------------------------- #
# The system model
# --------------------------------------------------------------------------- #

class Target(_Strict):
    loss: float = Field(gt=0.0, description="ℓmax: the bound on the ω-quantile of the final test loss")
    # ω within [1e-6, 1 − 1e-6]: the loss laws' numeric distributions certify quantiles there; a quantile
    # further in a tail has an unbounded bracket, and a plan holding ±inf cannot be written
    quantile: float = Field(ge=1e-6, le=1 - 1e-6, description="ω")
    deadline: float = Field(gt=0.0, description="Tmax")


class DataLaw(_Strict):
    """φ(S) = ln(1+S/s0) / ln(1+reference_samples/s0): how progress scales with data."""

    s0: float = Field(gt=0.0)
    reference_samples: float = Field(gt=0.0)

    def phi(self, samples: float) -> float:
        return math.log1p(samples / self.s0) / math.log1p(self.reference_samples / self.s0)


class Cluster(_Strict):
    name: str = Field(min_length=1)
    _name = field_validator("name")(_plain_name)
    capacity: float = Field(gt=0.0, description="r(n): compute per node, work units per second")
    bandwidth: float = Field(gt=0.0, description="b(n): size units per second, node to coordinator")
    unit_cost: float = Field(gt=0.0, description="κ(n): cost of one unit of allocated compute for one epoch")
    nodes: int = Field(default=1, ge=1)


def _reference(v: str | None) -> str | None:
    """A `MODULE:FUNCTION` reference to user code must name both parts."""
    if v is not None and ":" in v:
        module, _, func = v.partition(":")
        if not module.strip() or not func.strip() or ":" in func:
            raise ValueError("a reference to your own code is MODULE:FUNCTION, e.g. mymodels:make_net")
    return v


def _builtin_or_reference(kind: str, builtins: tuple[str, ...]):
    """A validator: one of `builtins`, or a well-formed MODULE:FUNCTION reference."""
    def check(v: str | None) -> str | None:
        if v is not None and ":" not in v and v not in builtins:
            raise ValueError(f"no such {kind}; choose one of {', '.join(builtins)} (or MODULE:FUNCTION)")
        return _reference(v)
    return check


class TrainSpec(_Strict):
    """How a model version maps to a real network (used by `depl run`)."""

    net: str = Field(min_length=1, description="a network of depl.train.nets (e.g. cnn1d) or MODULE:FUNCTION")
    prune_ratio: float = Field(default=0.0, ge=0.0, lt=1.0)
    width: int | None = Field(default=None, ge=1, le=100_000)
    net_args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of a MODULE:FUNCTION net")

    _net = field_validator("net")(_builtin_or_reference("network", BUILTIN_NETS))

    @model_validator(mode="after")
    def _args_for_own_nets(self) -> "TrainSpec":
        own = ":" in self.net
        if self.net_args and not own:
            raise ValueError(f"net_args are passed to your own network (net = \"MODULE:FUNCTION\"); {self.net!r} is built in")
        if self.width is not None and own:
            raise ValueError("width applies to the built-in networks; give your own network its size in net_args")
        return self


class Dataset(_Strict):
    name: str = Field(min_length=1)
    _name = field_validator("name")(_plain_name)
    samples: float = Field(gt=0.0)
    transfer_cost: dict[str, float] = Field(default_factory=dict, description="β(d, n); a missing cluster = 0")
    source: str | None = Field(default=None, description="real data: mnist1d, digits, cifar10 or MODULE:FUNCTION (for `depl run`)")
    share: tuple[float, float] = Field(default=(0.0, 1.0), description="the slice [from, to) of the source's training set")
    path: str | None = Field(default=None, description="a local folder (CIFAR-10)")

    @field_validator("transfer_cost")
    @classmethod
    def _nonnegative(cls, v: dict[str, float]) -> dict[str, float]:
        for k, c in v.items():
            if c < 0:
                raise ValueError(f"transfer cost to {k!r} is {c}; a cost cannot be negative")
        return v

    _source = field_validator("source")(_builtin_or_reference("data source", BUILTIN_SOURCES))

    @field_validator("share")
    @classmethod
    def _share(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not (0.0 <= v[0] < v[1] <= 1.0):
            raise ValueError(f"share must be [from, to) with 0 <= from < to <= 1, got {list(v)}")
        return v


def expected_progress(k, A: float, B: float, phi: float = 1.0):
    """g_m(k) = A·φ(S)/√(k + B): the expected progress of epoch k (1-based, counted from the start of the run,
    whatever version trained the epochs before).  The one definition: the law, its fit and its cumulants use it."""
    return A * phi / np.sqrt(np.asarray(k, dtype=float) + B)


class Progress(_Strict):
    """g_m(k) = A·φ(S)/√(k + B), k the global epoch index (`expected_progress`)."""

    A: float = Field(gt=0.0)
    B: float = Field(ge=0.0)


class LevelLaw(_Strict):
    """The measured-level loss law of one version (depl.loss.level).

    ℓ(k) = μ(φ·k)·exp(σ(k)·Z): a median curve from ℓ(0) down to a floor
    times log-normal noise, σ(k) = sigma0 + sigma1·ln(ℓ(0)/μ) + sigma2·|d ln μ/d ln t|, a share
    `seed_share` of the log-variance shared by all epochs of a seed.
    """

    curve: str = Field(description="power: μ = f + (ℓ0−f)/(1+(t/scale)^shape); exp: μ = f + (ℓ0−f)·exp(−(t/scale)^shape)")
    floor: float = Field(ge=0.0, description="the floor at φ = 1; at data factor φ it is floor·φ^(−floor_exponent)")
    # Upper bounds: beyond them exp()/powers of the law overflow (shape 100 exhausts memory,
    # a log-sd of 50 gives NaN); a fitted law is far inside them (shape < 5, sigma < 1).
    floor_exponent: float = Field(default=0.0, ge=0.0, le=10.0)
    scale: float = Field(gt=0.0, description="epochs (at φ = 1)")
    shape: float = Field(gt=0.0, le=20.0)
    sigma0: float = Field(default=0.0, ge=0.0, le=LOG_SD_MAX)
    sigma1: float = Field(default=0.0, ge=0.0, le=LOG_SD_MAX)
    sigma2: float = Field(default=0.0, ge=0.0, le=LOG_SD_MAX, description="log-sd per unit of the curve's elasticity |d ln μ/d ln t| (seeds leaving a plateau at different times)")
    seed_share: float = Field(default=0.0, ge=0.0, le=1.0)

    @field_validator("curve")
    @classmethod
    def _curve(cls, v: str) -> str:
        if v not in ("power", "exp"):
            raise ValueError(f"curve must be 'power' or 'exp', got {v!r}")
        return v


class LevelSwitch(_Strict):
    """A switch under the level law: the median jumps to (1+offset)× the new
    version's curve and recovers geometrically (factor `recovery` per epoch);
    the jump adds log-variance `sigma`², decaying alike."""

    offset: float = Field(gt=-1.0)
    recovery: float = Field(default=0.0, ge=0.0, le=1.0)
    sigma: float = Field(default=0.0, ge=0.0, le=LOG_SD_MAX)


class ModelVersion(_Strict):
    name: str = Field(min_length=1)
    _name = field_validator("name")(_plain_name)
    size: float = Field(ge=0.0, description="s(m)")
    work: float = Field(gt=0.0, description="w(m): compute per sample")
    progress: Progress
    noise: DistSpec = Field(description="X_m, the multiplier of the expected progress")
    train: TrainSpec | None = None
    level: LevelLaw | None = Field(default=None, description="the level law (used when loss_model = 'level')")

    def g(self, k: np.ndarray | int, phi: float = 1.0):
        """Expected progress of epoch k (1-based, global): A·φ/√(k+B)."""
        return expected_progress(k, self.progress.A, self.progress.B, phi)


class Switch(_Strict):
    from_: str = Field(alias="from", min_length=1)
    to: str = Field(min_length=1)
    jump: DistSpec
    level: LevelSwitch | None = Field(default=None, description="the switch under the level law")


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


class CalibrationExperiment(_Strict):
    """One calibration experiment's own scores (written by `depl calibrate` and `depl fit`): a plan whose schedule
    is this experiment's first K epochs, at its data factor φ, is a run like the experiment's seeds — exchangeable
    with them — and is certified by their epoch-K scores where they reach ω (depl.loss.calibrated)."""

    label: str = Field(min_length=1, description="the experiment, as depl fit names it (e.g. full→pruned-0.5@1)")
    versions: list[str] = Field(min_length=1, description="the versions it trained, in order")
    epochs: list[int] = Field(min_length=1, description="how many epochs of each of `versions`")
    phi: float = Field(gt=0.0, description="the data factor φ of its training samples (scenario.phi)")
    epoch_scores: list[list[float]] = Field(min_length=1, description="epoch_scores[k-1]: PIT of ℓ(k) of each of "
                                            "its seeds under the law of its first k epochs")

    @model_validator(mode="after")
    def _shape(self) -> "CalibrationExperiment":
        if len(self.versions) != len(self.epochs) or any(e < 1 for e in self.epochs):
            raise ValueError(f"experiment {self.label!r}: versions and epochs pair up (one count ≥ 1 per version), "
                             f"got {len(self.versions)} versions and epochs {self.epochs}")
        if len(self.epoch_scores) != sum(self.epochs):
            raise ValueError(f"experiment {self.label!r}: one row of epoch_scores per epoch ({sum(self.epochs)}), "
                             f"got {len(self.epoch_scores)}")
        _score_rows(self.epoch_scores, f"experiment {self.label!r}, ")
        return self

    @property
    def schedule(self) -> tuple[str, ...]:
        return tuple(v for v, n in zip(self.versions, self.epochs) for _ in range(n))


class Calibration(_Strict):
    """The loss law recalibrated on runs it was not fitted on (depl.loss.calibrated; written by `depl fit`).

    `scores` are the PIT values F(ℓ(E)) of the held-out runs at their last epoch under the law; the certified
    ω-quantile is the law's quantile at the ⌈(n+1)·ω⌉-th smallest score (split conformal), which needs
    n ≥ ω/(1−ω) scores.  `epoch_scores[k-1]` (written since; optional) are the PIT values of ℓ(k) of the same
    runs under the law of their schedule's first k epochs: a K-epoch plan is certified at the level of the
    epoch-K scores (past the scored epochs, the last scored epoch's); without them, every K at `scores`'."""

    method: str = Field(default="conformal-pit", description="conformal-pit: split conformal on PIT scores")
    use: bool = Field(default=True, description="false: plan with the uncalibrated law (the scores stay for the record)")
    omega: float | None = Field(default=None, gt=0.0, lt=1.0, description="the ω the fit calibrated for (a record)")
    scores: list[float] = Field(min_length=1, description="PIT of each held-out (experiment, seed) at its last epoch")
    epoch_scores: list[list[float]] | None = Field(
        default=None, description="epoch_scores[k-1]: PIT of ℓ(k) of each held-out (experiment, seed) under the law "
        "of its schedule's first k epochs; a K-epoch plan is calibrated by row min(K, rows)")
    experiments: list[CalibrationExperiment] | None = Field(
        default=None, description="each calibration experiment's own epoch scores: a plan whose schedule is an "
        "experiment's first K epochs (same φ) is certified by the epoch-K scores of the experiments it matches, at "
        "the levels they reach")

    @field_validator("method")
    @classmethod
    def _method(cls, v: str) -> str:
        if v not in CALIBRATION_METHODS:
            raise ValueError(f"method must be one of {', '.join(CALIBRATION_METHODS)}, got {v!r}")
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
    def needed(omega: float) -> int:
        """The fewest scores that reach ω: ⌈(n+1)ω⌉ ≤ n ⇔ n ≥ ω/(1−ω)."""
        return max(1, math.ceil(omega / (1.0 - omega) - 1e-9))


CALIBRATION_METHODS = ("conformal-pit",)


class Measured(_Strict):
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


class TrainingOptions(_Strict):
    """Options of real training (`depl run`): optimiser and batching."""

    lr: float = Field(default=1e-2, gt=0.0)
    momentum: float = Field(default=0.9, ge=0.0, lt=1.0)
    batch_size: int = Field(default=64, ge=1, le=1_000_000)
    iid: bool = True
    dirichlet_alpha: float | None = Field(default=None, gt=0.0, le=1e6, description="with iid = false: each class "
                                          "split over a cluster's nodes by shares drawn from Dirichlet(α) "
                                          "(small α: few classes per node); unset: label-sorted shards")


COST_MODELS = (None, "per-epoch", "resource-time")


class Scenario(_Strict):
    name: str = Field(min_length=1)
    _name = field_validator("name")(_plain_name)
    description: str = ""
    initial_loss: float = Field(gt=0.0, description="ℓ(0)")
    loss_model: str | None = Field(default=None, description="increments (the paper's eq. 8, the default), level, "
                                   "level-memory, or a law registered in depl.laws")
    cost_model: str | None = Field(default=None, description="per-epoch (eq. 2 as printed: κ·x per epoch, the default) "
                                   "or resource-time (κ·x·T(k) per epoch)")
    target: Target
    data_law: DataLaw | None = None
    max_epochs: int | None = Field(default=None, ge=1, le=10_000, description="an upper bound on K for the search")
    fitted_epochs: int | None = Field(default=None, ge=1, le=10_000,
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
    calibration: Calibration | None = Field(default=None, description="the law recalibrated on held-out runs "
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
        for what, items in (("clusters", self.clusters), ("datasets", self.datasets), ("models", self.models)):
            seen: set[str] = set()
            for i, it in enumerate(items):
                if it.name in seen:
                    raise _FieldError(f"{what}[{i}].name", it.name, f"another entry of {what} has this name; names must be unique")
                seen.add(it.name)
        clusters = {c.name for c in self.clusters}
        for i, d in enumerate(self.datasets):
            for c in d.transfer_cost:
                if c not in clusters:
                    raise _FieldError(f"datasets[{i}].transfer_cost", c, f"no cluster has this name (clusters: {sorted(clusters)})")
        models = {m.name for m in self.models}
        pairs: set[tuple[str, str]] = set()
        for i, s in enumerate(self.switches):
            for field, v in (("from", s.from_), ("to", s.to)):
                if v not in models:
                    raise _FieldError(f"switches[{i}].{field}", v, f"no model has this name (models: {sorted(models)})")
            if s.from_ == s.to:
                raise _FieldError(f"switches[{i}].to", s.to, "a switch must go to another model")
            if (s.from_, s.to) in pairs:
                raise _FieldError(f"switches[{i}]", f"{s.from_} -> {s.to}", "this switch is listed twice")
            pairs.add((s.from_, s.to))
        self._switches_followable()
        if self.cost_model not in COST_MODELS:
            raise _FieldError("cost_model", self.cost_model, "choose 'per-epoch' (eq. 2 as printed: κ·x·nodes per "
                              "epoch, the default) or 'resource-time' (κ·x·nodes·T(k) per epoch)")
        from ..laws import get_law, law_names

        if self.loss_model is not None and self.loss_model not in law_names():
            known = law_names()
            raise _FieldError("loss_model", self.loss_model, "choose " + ", ".join(f"'{n}'" for n in known[:-1])
                              + f" or '{known[-1]}'" + " ('increments' is the paper's model)")
        law = get_law(self.loss_model)
        for table in law.tables:  # the tables the law reads, for every model and switch
            for i, m in enumerate(self.models):
                if getattr(m, table, None) is None:
                    raise _FieldError(f"models[{i}].{table}", None, f'loss_model = "{law.name}" needs a `{table}` table for every model ("{m.name}" has none)')
            for i, sw in enumerate(self.switches):
                if getattr(sw, table, None) is None:
                    raise _FieldError(f"switches[{i}].{table}", None, f'loss_model = "{law.name}" needs a `{table}` table for every switch ({sw.from_} -> {sw.to} has none)')
        if self.fitted_seeds is not None and not 0 <= self.fitted_seeds[0] <= self.fitted_seeds[1]:
            raise _FieldError("fitted_seeds", self.fitted_seeds, "expected [first, last] with 0 ≤ first ≤ last")
        c = self.calibration
        if c is not None and c.use and c.fewest()[0] < c.needed(self.target.quantile):
            need, (have, k) = c.needed(self.target.quantile), c.fewest()
            where = "calibration.scores" if k is None or len(c.scores) == have else f"calibration.epoch_scores[{k - 1}]"
            raise _FieldError(where, f"{have} scores" + (f" (epoch {k})" if k is not None else ""),
                              f"split conformal needs at least {need} held-out runs at every scored epoch to certify "
                              f"ω = {self.target.quantile:g} ({need - have} more); refit with more calibration "
                              "seeds, or set calibration.use = false to plan with the uncalibrated law")
        names = {m.name for m in self.models}
        for i, e in enumerate(c.experiments or () if c is not None else ()):
            unknown = [v for v in e.versions if v not in names]
            if unknown:
                raise _FieldError(f"calibration.experiments[{i}].versions", unknown[0],
                                  f"experiment {e.label!r} trained a version the scenario has no model of "
                                  f"(models: {', '.join(sorted(names))})")
        if self.training.dirichlet_alpha is not None and self.training.iid:
            raise _FieldError("training.iid", True, "dirichlet_alpha partitions the data non-IID: set iid = false")
        self._data_law_usable()
        if self.target.loss >= self.initial_loss:
            raise _FieldError("target.loss", self.target.loss, f"must be below initial_loss = {self.initial_loss}: the target is met before training")
        return self

    def extrapolated(self, epochs: int) -> str | None:
        """Why a K-epoch schedule runs the loss law past the epochs it was fitted on; None when it does not."""
        if self.fitted_epochs is not None and epochs > self.fitted_epochs:
            also = self.calibration_beyond(epochs)
            return (f"K = {epochs} epochs runs the loss law of {self.name!r} beyond the {self.fitted_epochs} epochs it "
                    "was fitted on (fitted_epochs): past them the law is extrapolated, not measured"
                    + (f"; {also}" if also else ""))
        return None

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

    def _data_law_usable(self) -> None:
        """φ(S) of every choice of datasets within [1/PHI_MAX, PHI_MAX] (φ grows with S: the smallest dataset and
        all of them bound it); a φ of 1e300 (reference_samples = 1e-300) makes the laws' sums NaN."""
        if self.data_law is None:
            return
        sizes = [d.samples for d in self.datasets]
        for what, S in (("its smallest dataset", min(sizes)), ("all its datasets", float(sum(sizes)))):
            try:
                phi = self.data_law.phi(S)
            except (ZeroDivisionError, OverflowError):
                phi = math.nan
            if not 1 / PHI_MAX <= phi <= PHI_MAX:
                raise _FieldError("data_law.reference_samples", self.data_law.reference_samples,
                                  f"gives φ = {phi:g} for {what} ({S:g} samples, s0 = {self.data_law.s0:g}); the data "
                                  f"law scales progress by a factor within [{1 / PHI_MAX:g}, {PHI_MAX:g}] "
                                  "(reference_samples: the samples the law was measured with)")

    def _switches_followable(self) -> None:
        """A switch prunes the trained model further (paper Sec. III): versions are ordered, so
        the switches form no cycle, and where both ends are real networks the pruning can be done."""
        by_name = {m.name: m for m in self.models}
        for i, sw in enumerate(self.switches):
            a, b = by_name[sw.from_].train, by_name[sw.to].train
            if a is None or b is None:
                continue
            if (a.net, a.width) != (b.net, b.width):
                for j, m in ((self.model_index[sw.from_], a), (self.model_index[sw.to], b)):
                    why = _unknown_network(m.net, self.code_dir) if a.net != b.net else None
                    if why:  # a misspelt name: say so, rather than that the switch changes networks
                        raise _FieldError(f"models[{j}].train.net", m.net, why)
                raise _FieldError(f"switches[{i}]", f"{sw.from_} -> {sw.to}",
                                  f"the versions are different networks ({a.net} width {a.width}, {b.net} width "
                                  f"{b.width}); a switch prunes one network, it cannot change it")
            if b.prune_ratio < a.prune_ratio:
                raise _FieldError(f"switches[{i}]", f"{sw.from_} -> {sw.to}",
                                  f"goes from prune_ratio {a.prune_ratio} to {b.prune_ratio}; pruning removes "
                                  "channels, it cannot grow them back")
        nxt: dict[str, list[str]] = {}
        for sw in self.switches:
            nxt.setdefault(sw.from_, []).append(sw.to)
        state: dict[str, int] = {}  # 1 on the current path, 2 done

        def visit(m: str, path: list[str]) -> None:
            state[m] = 1
            for t in nxt.get(m, ()):
                if state.get(t) == 1:
                    cyc = path[path.index(t):] + [m, t] if t in path else [m, t]
                    i = next(j for j, sw in enumerate(self.switches) if (sw.from_, sw.to) == (m, t))
                    raise _FieldError(f"switches[{i}]", f"{m} -> {t}",
                                      f"closes the cycle {' -> '.join(cyc)}; switches prune further, so a "
                                      "version cannot be reached again")
                if t not in state:
                    visit(t, path + [m])
            state[m] = 2

        for m in self.models:
            if m.name not in state:
                visit(m.name, [])

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


def _unknown_network(net: str, code_dir: str | None) -> str | None:
    """Why the MODULE:FUNCTION network `net` names nothing in `code_dir`, found by reading its file, not running
    it; None when it may exist (a built-in name, a function the file defines, no folder to look in, a file the
    reading cannot settle: a syntax error, ``import *``, names made at run time)."""
    if ":" not in net or not code_dir:
        return None
    module, _, attr = net.partition(":")
    if not all(p.isidentifier() for p in module.split(".")):
        return None
    try:
        files = codefiles.module_files(module, Path(code_dir))
        defined = codefiles.top_level_names(files[-1]) if files else None
    except codefiles.NotFound as e:
        return f"no network of this name: {e}"
    except (OSError, ValueError, SyntaxError, RecursionError):
        return None
    head = attr.split(".")[0].strip()
    if defined is None or head in defined:
        return None
    return (f"no network of this name: {files[-1]} defines no {head!r} (is it misspelt? it defines "
            f"{', '.join(sorted(n for n in defined if not n.startswith('_'))[:8]) or 'no public name'})")


class _FieldError(ValueError):
    """A cross-field error that knows its field path (raised inside validators)."""

    def __init__(self, loc: str, value: Any, why: str):
        super().__init__(f"{loc} = {value!r}: {why}")
        self.loc, self.value, self.why = loc, value, why


# --------------------------------------------------------------------------- #
# Loading
# --------------------------------------------------------------------------- #

def builtin_names() -> list[str]:
    """The names of the scenarios that ship with depl."""
    files = resources.files(BUILTIN_PACKAGE)
    return sorted(p.name[:-5] for p in files.iterdir() if p.name.endswith(".toml"))


def _format_loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _lookup(data: Any, loc: tuple) -> Any:
    for part in loc:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _name_hint(data: dict, loc: tuple) -> str:
    """' (models[1] is "intermediate")' — so a user finds the entry."""
    if len(loc) >= 2 and isinstance(loc[1], int):
        entry = _lookup(data, loc[:2])
        if isinstance(entry, dict) and "name" in entry:
            return f' ({_format_loc(loc[:2])} is "{entry["name"]}")'
    return ""


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
        err = e.errors(include_url=False)[0]
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        ctx_err = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_err, _FieldError):
            raise ScenarioError(f"{source}: {ctx_err.loc} = {shown_value(ctx_err.value)}: {ctx_err.why}") from None
        msg = err["msg"].removeprefix("Value error, ")
        field = _format_loc(loc)
        if err["type"] == "missing":
            raise ScenarioError(f"{source}: {field}: this field is required{_name_hint(data, loc)}") from None
        if err["type"] == "extra_forbidden":
            raise ScenarioError(f"{source}: {field}: unknown field{_name_hint(data, loc)}; see docs/scenario-format.md for the keys") from None
        value = err.get("input")
        shown = "" if isinstance(value, dict) else f" = {shown_value(value)}"
        more = f"; {len(e.errors())-1} more error(s) after this one" if len(e.errors()) > 1 else ""
        raise ScenarioError(f"{source}: {field}{shown}: {msg}{_name_hint(data, loc)}{more}") from None


def shown_value(value: Any, width: int = 80) -> str:
    """`value` as a message shows it: its repr, cut to `width` characters (a 4000-digit number stays one line)."""
    try:
        text = repr(value)
    except ValueError:  # an int beyond Python's 4300 digits has no repr
        return "<an integer of more than 4300 digits>"
    return text if len(text) <= width else text[:width - 3] + "..."


def load_scenario(name_or_path: str | Path) -> Scenario:
    """Load a built-in scenario by name, or a TOML file by path."""
    text, source = _read(name_or_path)
    data = read_toml(text, source)
    if Path(source).is_file() and _references_code(data):
        # user code is found next to the scenario file, wherever the plan made from it is run
        here = Path(source).resolve().parent
        given = data.get("code_dir")
        code_dir = here if not isinstance(given, str) else (here / given).resolve()
        data = {**data, "code_dir": str(code_dir), "code_hashes": _code_hashes(data, code_dir)}
    return parse_scenario(data, source)


def read_toml(text: str, source: str) -> dict:
    """The TOML document `text` (read from `source`); ScenarioError in one line when it cannot be parsed — invalid
    TOML, an integer of more digits than Python reads, tables nested deeper than its parser recurses."""
    try:
        return tomllib.loads(text)
    except (ValueError, RecursionError) as e:  # TOMLDecodeError is a ValueError; so is int()'s digit limit
        raise ScenarioError(unreadable_text(text, source, e, "TOML", "scenario")) from None


def _code_hashes(data: dict, code_dir: Path) -> dict[str, str] | None:
    """The digests of the files the scenario's references run, found in `code_dir` by reading, not importing
    (a file not found there is left out: running the scenario says so); None if none is found."""
    out: dict[str, str] = {}
    for ref in _references(data):
        module = ref.partition(":")[0]
        if not module or not all(p.isidentifier() for p in module.split(".")):
            continue  # the reference itself is refused when it is used
        try:
            files = codefiles.module_files(module, code_dir)
            out.update(codefiles.file_digests(files, code_dir))
        except (codefiles.NotFound, OSError, ValueError):
            continue
    return out or None


def _references(data: dict) -> list[str]:
    """The MODULE:FUNCTION networks and data a scenario (as read from TOML) names."""
    def ref(v: Any) -> str | None:
        return v if isinstance(v, str) and ":" in v else None

    models = data.get("models") if isinstance(data.get("models"), list) else []
    datasets = data.get("datasets") if isinstance(data.get("datasets"), list) else []
    found = [ref(m["train"].get("net")) for m in models if isinstance(m, dict) and isinstance(m.get("train"), dict)]
    found += [ref(d.get("source")) for d in datasets if isinstance(d, dict)]
    return [r for r in found if r]


def _references_code(data: dict) -> bool:
    """Whether a scenario (as read from TOML) names MODULE:FUNCTION networks or data."""
    return bool(_references(data))


def _read(name_or_path: str | Path) -> tuple[str, str]:
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists() or "/" in str(name_or_path):
        if not p.is_file():
            raise ScenarioError(f"{p}: no such scenario file (built-in scenarios: {', '.join(builtin_names())})")
        try:
            return p.read_text(encoding="utf-8"), str(p)
        except (OSError, UnicodeDecodeError) as e:
            raise ScenarioError(f"{p}: cannot be read: {e}") from None
    name = str(name_or_path)
    if name not in builtin_names():
        raise ScenarioError(f"{name!r} is neither a file nor a built-in scenario (built-in: {', '.join(builtin_names())})")
    return resources.files(BUILTIN_PACKAGE).joinpath(f"{name}.toml").read_text(encoding="utf-8"), f"{name} (built-in)"


def scenario_source(name_or_path: str | Path) -> tuple[str, str]:
    """(the TOML text, where it is from) of a built-in scenario by name, or of a file by path."""
    return _read(name_or_path)


def scenario_dict(s: Scenario) -> dict:
    """The scenario as plain data (round-trips through `parse_scenario`)."""
    return s.model_dump(mode="json", by_alias=True, exclude_none=True)




def with_target(data: dict, loss: float | None = None, quantile: float | None = None,
                deadline: float | None = None, name: str | None = None) -> dict:
    """A copy of scenario `data` with the [target] keys (and the name) that are given replaced; not validated."""
    given = {"loss": loss, "quantile": quantile, "deadline": deadline}
    out = {**data, "target": {**data["target"], **{k: v for k, v in given.items() if v is not None}}}
    if name is not None:
        out["name"] = name
    return out
