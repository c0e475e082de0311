"""Training logs written by any tool, as a profile `depl fit` can fit.

Long format, one row per (run, seed, epoch) — CSV, or Parquet when pyarrow
is installed:

    run, seed, epoch, model, test_loss            required
    data_fraction, nodes, test_accuracy           optional (1, 1, unused)

Epoch 0 is the untrained network: its loss is ℓ(0).  A run's schedule is its
`model` column over epochs 1..E; a run of one version is trained from
scratch, a run whose model changes once is a switch experiment (the paper's
K1 epochs of one version, then the next).  Every seed of a run must have the
same schedule and every epoch 0..E, exactly once.

Nothing here imports torch: logs are fitted without the `train` extra.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ..scenario import control_character, name_problem, parse_scenario, scenario_dict, with_target
from .runs import ProfiledExperiment, FitError, Profile, loss_problem

REQUIRED = ("run", "seed", "epoch", "model", "test_loss")
OPTIONAL = ("data_fraction", "nodes", "test_accuracy")
SUFFIXES = (".csv", ".parquet", ".pq")


def is_log_file(path: str | Path) -> bool:
    return Path(str(path)).suffix.lower() in SUFFIXES


@dataclass
class Logs:
    path: str
    models: list[str]          # the versions, in order of first appearance
    initial_loss: float        # mean ℓ(0) over every (run, seed)
    nodes: int
    epochs: int                # the longest run
    runs: dict[str, dict]      # run → {"schedule", "fraction", "seeds", "losses" (seeds × E+1)}

    def profile(self, reference_samples: float) -> Profile:
        """The runs as experiments; `reference_samples` = the samples at data_fraction 1."""
        out = Profile(Path(self.path).stem)
        for r in self.runs.values():
            sched = r["schedule"]
            first = sched[0]
            k1 = next((k for k, m in enumerate(sched) if m != first), 0)
            kind, to = ("switch", sched[k1]) if k1 else ("version", None)
            out.experiments.append(ProfiledExperiment(kind, first, r["fraction"], to, k1, reference_samples * r["fraction"],
                                              self.nodes, np.asarray(r["seeds"]), r["losses"][:, 1:]))
        return out


def _rows(path: Path) -> tuple[list[str], Iterator[tuple[str, dict[str, Any]]]]:
    """The column names and the rows, each with where a user finds it ("line 7" of a CSV, "row 6" of Parquet)."""
    if path.suffix.lower() == ".csv":
        f = path.open(newline="", encoding="utf-8-sig")
        reader = csv.DictReader(f)
        cols = [c.strip() for c in (reader.fieldnames or [])]
        reader.fieldnames = cols

        def it():
            with f:
                for row in reader:
                    yield f"line {reader.line_num}", row
        return cols, it()
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise FitError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow), or write the logs as CSV") from None
    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises several types for a file that is not Parquet
        raise FitError(f"{path}: not a readable Parquet file ({e})") from None
    return list(table.column_names), ((f"row {i}", row) for i, row in enumerate(table.to_pylist(), start=1))


def _number(path: Path, where: str, col: str, value: Any, *, integer: bool = False) -> float:
    bad = f"{path}: {where}, column {col}: {value!r}: "
    if value is None or (isinstance(value, str) and not value.strip()):
        raise FitError(bad + "empty; a number is needed")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise FitError(bad + "not a number") from None
    if not math.isfinite(x):
        raise FitError(bad + "not a finite number")
    if integer and not x.is_integer():
        raise FitError(bad + "not a whole number")
    return x


def read_logs(path: str | Path, min_seeds: int = 3) -> Logs:
    """Read and check a log file; every problem is a FitError naming the file, the row, the column and why."""
    p = Path(path)
    c = control_character(str(p))
    if c is not None:  # the file's name goes into the written scenario's name and comments, and into every message
        raise FitError(f"{ascii(str(p))}: the file name holds the control character {c!r}; rename the file")
    if not p.is_file():
        raise FitError(f"{p}: no such log file")
    try:
        cols, rows = _rows(p)
        twice = next((c for i, c in enumerate(cols) if c in cols[:i]), None)
        if twice is not None:
            at = [i + 1 for i, c in enumerate(cols) if c == twice]
            raise FitError(f"{p}: column {twice!r} appears {len(at)} times in the header (columns "
                           f"{', '.join(map(str, at))}); which one to read is not said: keep one")
        missing = [c for c in REQUIRED if c not in cols]
        if missing:
            raise FitError(f"{p}: column {missing[0]!r} is missing (columns found: {', '.join(cols) or 'none'}; "
                           f"required: {', '.join(REQUIRED)}; optional: {', '.join(OPTIONAL)})")
        seen: dict[tuple[str, int, int], str] = {}
        by_seed: dict[tuple[str, int], dict[int, tuple[str, float, str]]] = {}
        fraction: dict[str, tuple[float, str]] = {}
        nodes: tuple[int, str] | None = None
        for where, row in rows:
            run = str(row["run"] if row["run"] is not None else "").strip()
            if not run:
                raise FitError(f"{p}: {where}, column run: empty; every row names its run")
            seed = int(_number(p, where, "seed", row["seed"], integer=True))
            if seed < 0:
                raise FitError(f"{p}: {where}, column seed: {row['seed']!r}: a seed is a whole number ≥ 0")
            epoch = int(_number(p, where, "epoch", row["epoch"], integer=True))
            if epoch < 0:
                raise FitError(f"{p}: {where}, column epoch: {epoch}: an epoch cannot be negative (0 = the untrained network)")
            model = str(row["model"] if row["model"] is not None else "").strip()
            if not model:
                raise FitError(f"{p}: {where}, column model: empty; every row names the model version trained")
            why = name_problem(model)
            if why:  # the version becomes a model of the written scenario
                raise FitError(f"{p}: {where}, column model: {model!r}: {why}")
            loss = _number(p, where, "test_loss", row["test_loss"])
            why = loss_problem(loss)
            if why:
                raise FitError(f"{p}: {where}, column test_loss: {row['test_loss']!r}: {why}")
            key = (run, seed, epoch)
            if key in seen:
                raise FitError(f"{p}: {where}: run {run!r}, seed {seed}, epoch {epoch} repeats {seen[key]}; "
                               "one row per (run, seed, epoch)")
            seen[key] = where
            if "data_fraction" in cols and row["data_fraction"] not in (None, ""):
                f = _number(p, where, "data_fraction", row["data_fraction"])
                if not 0 < f <= 1:
                    raise FitError(f"{p}: {where}, column data_fraction: {row['data_fraction']!r}: must be in (0, 1]")
            else:
                f = 1.0
            if run in fraction and fraction[run][0] != f:
                raise FitError(f"{p}: {where}, column data_fraction: {f:g}: run {run!r} has {fraction[run][0]:g} "
                               f"at {fraction[run][1]}; a run trains on one data fraction")
            fraction.setdefault(run, (f, where))
            if "nodes" in cols and row["nodes"] not in (None, ""):
                n = int(_number(p, where, "nodes", row["nodes"], integer=True))
                if n < 1:
                    raise FitError(f"{p}: {where}, column nodes: {n}: at least one node")
            else:
                n = 1
            if nodes is not None and nodes[0] != n:
                raise FitError(f"{p}: {where}, column nodes: {n}: {nodes[1]} has {nodes[0]}; fit one setting "
                               "at a time (one file per number of nodes)")
            nodes = nodes or (n, where)
            if "test_accuracy" in cols and row["test_accuracy"] not in (None, ""):
                _number(p, where, "test_accuracy", row["test_accuracy"])
            by_seed.setdefault((run, seed), {})[epoch] = (model, loss, where)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise FitError(f"{p}: cannot be read as {p.suffix.lstrip('.').upper()}: {e}") from None
    if not by_seed:
        raise FitError(f"{p}: no rows")
    return _assemble(p, by_seed, {r: f for r, (f, _) in fraction.items()}, nodes[0], min_seeds)


def _assemble(p: Path, by_seed: dict, fraction: dict[str, float], nodes: int, min_seeds: int) -> Logs:
    runs: dict[str, dict] = {}
    models: list[str] = []
    l0: list[float] = []
    for (run, seed), epochs in sorted(by_seed.items()):
        ks = sorted(epochs)
        if ks[0] != 0:
            raise FitError(f"{p}: run {run!r}, seed {seed}: epoch 0 (the untrained network, ℓ(0)) is missing")
        gap = next((k for i, k in enumerate(ks) if k != i), None)
        if gap is not None:
            raise FitError(f"{p}: run {run!r}, seed {seed}: epoch {ks[ks.index(gap) - 1] + 1} is missing "
                           f"(the next given is {gap}, at {epochs[gap][2]}); every epoch 0..E is needed")
        if len(ks) < 2:
            raise FitError(f"{p}: run {run!r}, seed {seed}: only epoch 0; at least one trained epoch is needed")
        sched = [epochs[k][0] for k in ks[1:]]
        losses = [epochs[k][1] for k in ks]
        l0.append(losses[0])
        r = runs.setdefault(run, {"schedule": sched, "fraction": fraction[run], "seeds": [], "losses": [],
                                  "first": seed})
        if len(sched) != len(r["schedule"]):
            raise FitError(f"{p}: run {run!r}: seed {seed} has epochs 0..{len(sched)}, seed {r['first']} has "
                           f"0..{len(r['schedule'])}; every seed of a run has the same epochs")
        diff = next((k for k, (a, b) in enumerate(zip(sched, r["schedule"]), start=1) if a != b), None)
        if diff is not None:
            raise FitError(f"{p}: {epochs[diff][2]}, column model: {sched[diff - 1]!r}: run {run!r} seed {seed} "
                           f"trains this at epoch {diff}, seed {r['first']} trains {r['schedule'][diff - 1]!r}; "
                           "every seed of a run follows one schedule")
        switches = [k for k in range(1, len(sched)) if sched[k] != sched[k - 1]]
        if len(switches) > 1:
            k = switches[1] + 1
            raise FitError(f"{p}: {epochs[k][2]}, column model: {sched[k - 1]!r}: run {run!r} switches a second "
                           f"time (at epochs {switches[0] + 1} and {k}); fitting uses runs of one version from "
                           "scratch and runs with one switch")
        r["seeds"].append(seed)
        r["losses"].append(losses)
        for m in sched:
            if m not in models:
                models.append(m)
    for run, r in runs.items():
        if len(r["seeds"]) < min_seeds:
            raise FitError(f"{p}: run {run!r} has {len(r['seeds'])} seed(s); at least {min_seeds} are needed "
                           "(a third of the seeds are held out to score the fit)")
        r["losses"] = np.array(r["losses"], dtype=float)
        if np.all(r["losses"][:, 1:] == r["losses"][0, 1:]):
            # the noise laws are fitted on the seed-to-seed spread: none leaves them 0/0 (NaN)
            raise FitError(f"{p}: run {run!r}: every seed has the same test_loss at every epoch; the loss law's "
                           "noise is fitted on how seeds differ (log each seed's own run)")
        del r["first"]
    scratch = {r["schedule"][0] for r in runs.values() if len(set(r["schedule"])) == 1}
    full = {r["schedule"][0] for r in runs.values() if len(set(r["schedule"])) == 1 and r["fraction"] == 1.0}
    for m in models:
        if m not in scratch:
            raise FitError(f"{p}: model {m!r} is only trained after a switch; fitting its law needs a run of "
                           f"{m!r} from scratch (one model in every row of the run)")
        if m not in full:
            raise FitError(f"{p}: model {m!r} has no run at the full data (data_fraction 1); its law is fitted "
                           "there and scaled to the other fractions")
    return Logs(str(p), models, float(np.mean(l0)), nodes, max(len(r["schedule"]) for r in runs.values()), runs)


def base_scenario(logs: Logs, base=None, *, name: str | None = None, target_loss: float | None = None,
                  omega: float | None = None, deadline: float | None = None):
    """The scenario the fitted loss sections go into, and the training samples at data_fraction 1.

    With `base`, its system sections (clusters, datasets, the versions' size,
    work and train table) are kept; every version of the log must be one of its
    models.  Without, one cluster like the logs' setting: `nodes` nodes, one
    dataset of `nodes` samples, work 1 and capacity 1, so an epoch at full
    compute takes one time unit and a deadline counts epochs; size 0 (no
    transfer time).  Edit them to plan for another system.
    """
    placeholder = {"progress": {"A": 1.0, "B": 0.0}, "noise": {"family": "norm", "params": {"loc": 1.0, "scale": 0.1}}}
    if base is not None:
        data = scenario_dict(base)
        data.pop("code_hashes", None)  # the code's digests are taken whenever the file is read
        data.pop("measured", None)  # the base's profile, not these logs
        by_name = {m["name"]: m for m in data["models"]}
        unknown = [m for m in logs.models if m not in by_name]
        if unknown:
            raise FitError(f"{logs.path}: model {unknown[0]!r} of the logs is not a model of scenario {base.name!r} "
                           f"(its models: {', '.join(by_name)}); the written scenario's versions are the log's models")
        data["models"] = [{k: v for k, v in by_name[m].items() if k != "level"} for m in logs.models]
        reference = base.samples([d.name for d in base.datasets])
    else:
        if target_loss is None:
            raise FitError(f"{logs.path}: give --target-loss (the loss to reach), or --scenario with a [target]")
        data = {"name": Path(logs.path).stem, "initial_loss": logs.initial_loss,
                "description": f"fitted by depl fit from {Path(logs.path).name}; clusters and datasets are a "
                               "one-cluster template of the logs' setting",
                "target": {"loss": target_loss, "quantile": 0.9, "deadline": float(logs.epochs)},
                "clusters": [{"name": "local", "capacity": 1.0, "bandwidth": 1.0, "unit_cost": 1.0,
                              "nodes": logs.nodes}],
                "datasets": [{"name": "data", "samples": float(logs.nodes)}],
                "models": [{"name": m, "size": 0.0, "work": 1.0, **placeholder} for m in logs.models]}
        reference = float(logs.nodes)
    data.update(initial_loss=logs.initial_loss, switches=[])
    data.pop("loss_model", None)
    data.pop("data_law", None)
    data = with_target(data, target_loss, omega, deadline, name)
    return parse_scenario(data, f"the scenario for {logs.path}"), reference
