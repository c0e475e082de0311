"""A scenario's [calibration] table: the loss law recalibrated on runs it was not fitted on (written by `depl fit`
and `depl calibrate`, read by depl.loss.calibrated), and the rule that picks a plan's scores by its length."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import AllowInfNan, Field, field_validator, model_validator

from ..certificate import conformal
from ..laws import calibrator_names
from ..omega import Omega
from .base import Strict, _out_of_range

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


class Mismatch(NamedTuple):
    """A condition of calibration runs that differs from what they would certify: the field, the value wanted (the
    scenario's, or the plan's) and the runs' value."""

    field: str
    wanted: Any
    runs: Any

    def words(self, wanted: str = "the scenario") -> str:
        return f"{self.field}: {wanted} has {_shown(self.wanted)}, the calibration runs had {_shown(self.runs)}"


def _shown(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, (list, tuple, set, frozenset)):
        return "[" + ", ".join(_shown(x) for x in v) + "]"
    return "unset" if v is None else str(v)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or a == b and type(a) is type(b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    return a == b


Share = tuple[float, float]


class Conditions(Strict):
    """What calibration runs trained under, read from their run spec (`depl.runspec`, the job `depl profile` ran):
    a run of a plan is like them — and certified by them — only under the same conditions.  The one record and
    comparison of conditions: `depl calibrate` refuses runs whose conditions differ from the scenario's
    (`mismatch(scenario)`), and a plan is certified by an experiment only when its own job's are the same
    (`mismatch(scenario, nodes=…, data=…)`: the nodes of its clusters and its datasets)."""

    nodes: int = Field(ge=1, description="nodes per cluster (FedAvg over them every epoch)")
    source: str = Field(min_length=1, description="the data source (depl.train.task.data) the runs trained on")
    shares: list[Share] = Field(min_length=1, description="the shares [start, end) of the source's training "
                                "data, one per dataset, sorted")
    fraction: float = Field(default=1.0, gt=0.0, le=1.0, description="the fraction of those datasets trained on")
    epochs: int = Field(ge=1, description="the epochs each run trained")
    training: dict[str, bool | int | float | str] = Field(
        default_factory=dict, description="the runs' [training] options as recorded (lr, momentum, batch_size, iid, "
        "dirichlet_alpha, data_draw, and any other key of the run spec); an unset option is absent; where your code "
        "lay (code_dir) is no condition: what it is is (`code`)")
    networks: dict[str, str] = Field(default_factory=dict, description="the network each version of the runs "
                                     "trained, in words (`network_words`), by version name")
    code: dict[str, str] = Field(default_factory=dict, description="sha256 of each file of your code the runs ran "
                                 "(network, data factory, loss), by its path in its folder: the keys of a scenario's "
                                 "code_hashes")

    @field_validator("shares")
    @classmethod
    def _sorted(cls, v: list[Share]) -> list[Share]:
        return sorted((float(a), float(b)) for a, b in v)

    @classmethod
    def of_job(cls, job: dict[str, Any], code: dict[str, str] | None = None) -> "Conditions":
        """The conditions of a stored job (`runs.spec` job: `depl.train.engine.federation.Job.to_json`) and of the
        code it ran (`runs.spec` code: sha256 by path).  The Dirichlet partition and the data draw travel with its data
        (alpha, draws); here they are [training] options, as the scenario states them; where the run chose the
        device, and the folder its code was imported from, are no conditions of its losses: the code's files are."""
        data = dict(job.get("data") or {})
        training = {k: v for k, v in dict(job.get("options") or {}).items()
                    if k not in ("device", "code_dir") and v is not None}
        networks = {str(name): network_words(v["net"], v.get("width"), float(v.get("ratio", 0.0)),
                                             json.loads(v.get("net_args") or "{}"))
                    for name, v in dict(job.get("versions") or {}).items()}
        if data.get("alpha") is not None:
            training["dirichlet_alpha"] = float(data["alpha"])
        training["data_draw"] = str(data.get("draws", "fixed"))
        if data.get("subset") is not None:
            training["data_subset"] = int(data["subset"])
        return cls(nodes=int(next(iter((job.get("nodes") or {}).values()), 1)), source=str(data["source"]),
                   shares=[tuple(s) for s in data["shares"]], fraction=float(data.get("fraction", 1.0)),
                   epochs=len(job.get("epochs") or []), training=training, networks=networks,
                   code=dict(code or {}))

    def mismatch(self, scenario, *, nodes=None, data=None) -> Mismatch | None:
        """The first condition these runs differ from `scenario`'s in (`mismatches`), or None."""
        return next(iter(self.mismatches(scenario, nodes=nodes, data=data)), None)

    def mismatches(self, scenario, *, nodes=None, data=None) -> list[Mismatch]:
        """Every condition these runs differ from `scenario`'s in: nodes, data, then [training] options by name.

        Without `nodes` and `data`, what `depl calibrate` asks: one of the scenario's clusters' node counts, datasets of
        it, and its [training] options.  With them, what a plan asks of the runs that would certify it: `nodes`, the
        node counts of the plan's clusters (each must be the runs'); `data`, the plan's datasets as (source, share)
        pairs (the runs' whole data, every dataset of it at fraction 1)."""
        out: list[Mismatch] = []
        if nodes is None:
            counts = sorted({int(c.nodes) for c in scenario.clusters})
            if self.nodes not in counts:
                out.append(Mismatch("nodes per cluster", counts[0] if len(counts) == 1 else counts, self.nodes))
        else:
            other = sorted({int(n) for n in nodes} - {self.nodes})
            if other:
                out.append(Mismatch("nodes per cluster", other[0], self.nodes))
        if data is None:
            known = {(d.source, tuple(float(x) for x in d.share)) for d in scenario.datasets}
            sources = sorted({s for s, _ in known})
            if self.source not in sources:
                out.append(Mismatch("data source", sources[0] if len(sources) == 1 else sources, self.source))
            else:
                shares = sorted(s for src, s in known if src == self.source)
                bad = [list(sh) for sh in self.shares if sh not in shares]
                if bad:
                    out.append(Mismatch("dataset share", [list(sh) for sh in shares], bad[0]))
        else:
            data = sorted((str(s), tuple(float(x) for x in sh)) for s, sh in data)
            sources = sorted({s for s, _ in data})
            if sources != [self.source]:
                out.append(Mismatch("data source", sources[0] if len(sources) == 1 else sources, self.source))
            elif [sh for _, sh in data] != self.shares:
                out.append(Mismatch("datasets (shares of the source)", [list(sh) for _, sh in data],
                                    [list(sh) for sh in self.shares]))
            elif self.fraction != 1.0:
                out.append(Mismatch("data fraction", 1.0, self.fraction))
        options = scenario.training
        fields = type(options).model_fields
        for key in sorted(set(fields) | set(self.training)):
            if key not in fields:
                out.append(Mismatch(f"[training] {key}", None, self.training[key]))
                continue
            want = getattr(options, key)
            have = self.training.get(key, fields[key].default)  # absent: the run was made before the key (its default)
            if not _same(want, have):
                out.append(Mismatch(f"[training] {key}", want, have))
        models = {m.name: m.train for m in scenario.models}
        for name, words in sorted(self.networks.items()):
            train = models.get(name)
            if train is not None:
                want = network_words(train.net, train.width, float(train.prune_ratio), train.net_args)
                if want != words:
                    out.append(Mismatch(f"models {name!r} train (the network)", want, words))
        pinned = scenario.code_hashes or {}
        for path, digest in sorted(self.code.items()):
            if path in pinned and pinned[path] != digest:
                out.append(Mismatch(f"your code {path} (sha256)", _short(pinned[path]), _short(digest)))
        return out


def network_words(net: str, width: int | None, ratio: float, net_args: dict[str, Any]) -> str:
    """A version's network in words, as a run's job records it and as a scenario's `train` states it: the one form
    both are compared in (`mymodel:make_net(hidden=32) pruned 0.5`, `cnn1d width 16`)."""
    if ":" in net:
        words = net + "(" + ", ".join(f"{k}={json.dumps(v, sort_keys=True)}" for k, v in sorted(net_args.items())) + ")"
    else:
        words = net if width is None else f"{net} width {width}"
    return words + (f" pruned {ratio:g}" if ratio else "")


def _short(digest: str) -> str:
    """A file's sha256 as a message shows it (its first 12 hex digits)."""
    return digest.removeprefix("sha256:")[:12]


Loss = Annotated[float, AllowInfNan(True)]


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
    losses: list[list[Loss]] | None = Field(
        default=None, description="losses[i][k-1]: the test loss ℓ(k) of the run of seeds[i] (inf: it diverged or "
        "stopped before epoch k — a run that did not meet any ℓmax); a certificate counts ℓ(K) ≤ ℓmax on them")
    conditions: Conditions | None = Field(default=None, description="what its runs trained under (their run spec): "
                                          "a plan is certified by them only under the same")

    @field_validator("*", mode="after")
    @classmethod
    def _bounded(cls, v: Any, info) -> Any:
        """Every field bounded as in every table (Strict), but a run's loss may be +inf (it stopped or diverged)."""
        seen = [[x for x in row if x != math.inf] for row in v] if info.field_name == "losses" and v else v
        why = _out_of_range(seen)
        if why:
            raise ValueError(why)
        return v

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
        if self.losses is not None:
            if self.seeds is None or len(self.losses) != len(self.seeds):
                raise ValueError(f"experiment {self.label!r}: one row of losses per seed (seeds lists them), got "
                                 f"{len(self.losses)} rows for {len(self.seeds or [])} seeds")
            E = sum(self.epochs)
            for seed, row in zip(self.seeds, self.losses):
                if len(row) != E:
                    raise ValueError(f"experiment {self.label!r}: losses of seed {seed}: one per epoch ({E}), got "
                                     f"{len(row)} (inf where the run stopped or diverged)")
                bad = [x for x in row if not (x > 0.0)]   # nan fails too
                if bad:
                    raise ValueError(f"experiment {self.label!r}: losses of seed {seed}: a loss is positive (inf: the "
                                     f"run did not reach that epoch), got {bad[0]!r}")
        return self

    @property
    def schedule(self) -> tuple[str, ...]:
        return tuple(v for v, n in zip(self.versions, self.epochs) for _ in range(n))

    def seed_ranges(self) -> list[list[int]]:
        """Its seeds as [first, last] ranges of consecutive seeds (for a certificate's record of the runs it used)."""
        out: list[list[int]] = []
        for s in sorted(self.seeds or []):
            if out and s == out[-1][1] + 1:
                out[-1][1] = s
            else:
                out.append([s, s])
        return out


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

    def digest(self) -> str:
        """A hash of the table (every score, loss, seed and condition): which calibration runs a certificate used."""
        text = json.dumps(self.model_dump(), sort_keys=True, separators=(",", ":"))  # inf as Infinity
        return hashlib.sha256(text.encode()).hexdigest()

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
