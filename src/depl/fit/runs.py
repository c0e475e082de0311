"""The profiling experiments of a runs store, as arrays ready to fit.

A profile run (`depl profile`) is one experiment: a version trained from
scratch at a fraction of the data, or a switch experiment (K1 epochs of one
version, then the next).  Seeds are split once into a fitting set and a
held-out set (every third seed held out), so that every goodness-of-fit
figure can be measured on runs the fit never saw; before that, the last
seeds of each experiment can be set apart for calibration (no fit sees them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from ..runspec import run_spec
from ..scenario import Conditions, Scenario
from ..store import Store


class FitError(ValueError):
    """Runs that cannot be fitted; the message is meant for the user."""


# The largest test loss a fit takes.  A loss is positive (the laws fit its logarithm or its decrease from ℓ(0));
# cross-entropy and squared errors in sensible units stay far below 1e6, and one value of 1e300 among a thousand
# would move every fitted mean (and every plan made from the fit) without a word.
LOSS_MAX = 1e6


def loss_problem(loss: float) -> str | None:
    """Why `loss` cannot be fitted; None when it can."""
    if not math.isfinite(loss):
        return "not a finite number"
    if loss <= 0:
        return "a loss must be positive"
    if loss > LOSS_MAX:
        return f"beyond {LOSS_MAX:g}, the largest loss depl fits (rescale the losses, or drop the run)"
    return None


@dataclass(frozen=True)
class ProfiledExperiment:
    kind: str               # "version" or "switch"
    version: str
    fraction: float
    to: str | None
    switch_after: int
    samples: float          # training samples (all nodes)
    nodes: int
    seeds: np.ndarray       # (n,)
    losses: np.ndarray      # (n, E): test loss after epochs 1..E
    draws: str = "fixed"    # the runs' data: "fixed" (the same for every seed) or "run" (each seed its own draw)
    conditions: Conditions | None = None   # what the runs trained under (their run spec)
    # seeds that started and did not finish (diverged, or stopped): not fitted, but runs a calibration counts, each
    # with its losses to where it stopped and +inf after (a run that met no ℓmax)
    unfinished: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=int))
    unfinished_losses: np.ndarray = field(default_factory=lambda: np.empty((0, 0)))

    @property
    def epochs(self) -> int:
        return self.losses.shape[1]

    @property
    def schedule(self) -> list[str]:
        if self.kind == "switch":
            return [self.version] * self.switch_after + [self.to] * (self.epochs - self.switch_after)
        return [self.version] * self.epochs

    @property
    def label(self) -> str:
        if self.kind == "switch":
            return f"{self.version}→{self.to}@{self.switch_after}"
        return self.version if self.fraction == 1.0 else f"{self.version}@{self.fraction:g}"

    def split(self, held_out: bool) -> "ProfiledExperiment":
        """The fitting seeds (held_out=False) or the held-out ones (every third seed)."""
        return self.subset((np.arange(self.seeds.size) % 3 == 2) == held_out)

    def subset(self, mask: np.ndarray) -> "ProfiledExperiment":
        """The finished runs of `mask`; no unfinished run (`every_run` adds those to a calibration's)."""
        return replace(self, seeds=self.seeds[mask], losses=self.losses[mask], unfinished=np.empty(0, dtype=int),
                       unfinished_losses=np.empty((0, self.epochs)))

    def every_run(self, after: int | None = None) -> "ProfiledExperiment":
        """Every run that started, finished or not (an unfinished one's losses +inf from where it stopped), sorted by
        seed — the runs a calibration counts; `after`: only the unfinished seeds above it (the set-apart ones)."""
        if self.unfinished.size == 0:
            return self
        keep = self.unfinished > (-math.inf if after is None else after)
        seeds = np.concatenate([self.seeds, self.unfinished[keep]])
        losses = np.concatenate([self.losses.reshape(-1, self.epochs), self.unfinished_losses[keep]])
        order = np.argsort(seeds, kind="stable")
        return replace(self, seeds=seeds[order], losses=losses[order], unfinished=np.empty(0, dtype=int),
                       unfinished_losses=np.empty((0, self.epochs)))


@dataclass
class Profile:
    scenario: str
    experiments: list[ProfiledExperiment] = field(default_factory=list)
    diverged: int = 0       # seeds left out because their loss became non-finite (`depl.store`)

    @property
    def reference_samples(self) -> float:
        return max(e.samples for e in self.experiments)

    def versions(self, fraction: float | None = 1.0) -> list[ProfiledExperiment]:
        return [e for e in self.experiments if e.kind == "version" and (fraction is None or e.fraction == fraction)]

    def switches(self) -> list[ProfiledExperiment]:
        return [e for e in self.experiments if e.kind == "switch"]

    def split(self, held_out: bool) -> "Profile":
        return Profile(self.scenario, [e.split(held_out) for e in self.experiments])

    def set_apart(self, seeds: int) -> tuple["Profile", "Profile"]:
        """(the runs to fit, the runs kept apart for calibration): the last `seeds` seeds of every experiment
        (by seed number, so that resuming a profile with more seeds keeps the same runs apart); the runs apart
        with every unfinished seed above the fitted ones (each a run the calibration counts, as a miss)."""
        keep, apart = [], []
        for e in self.experiments:
            mask = np.arange(e.seeds.size) >= e.seeds.size - seeds
            keep.append(e.subset(~mask))
            fitted = int(e.seeds[~mask].max()) if (~mask).any() else None
            apart.append(replace(e.subset(mask), unfinished=e.unfinished, unfinished_losses=e.unfinished_losses)
                         .every_run(fitted) if seeds else e.subset(mask))
        return Profile(self.scenario, keep), Profile(self.scenario, apart)

    def every_run(self) -> "Profile":
        """Every run that started, finished or not (`ProfiledExperiment.every_run`): what a calibration counts."""
        return Profile(self.scenario, [e.every_run() for e in self.experiments], self.diverged)


def _samples(scenario: Scenario, data: dict) -> float:
    """Training samples of a job's data, from the scenario's datasets with the same source and shares."""
    shares = [tuple(s) for s in data["shares"]]
    by_share = {(d.source, tuple(d.share)): d.samples for d in scenario.datasets}
    try:
        total = sum(by_share[(data["source"], s)] for s in shares)
    except KeyError:
        raise FitError(f"the profiled data {data['source']} {shares} are not datasets of scenario "
                       f"{scenario.name!r}; give the scenario the runs were profiled with (--scenario)") from None
    return float(total) * float(data.get("fraction", 1.0))


def _conditions(job: dict, code: dict | None, where: str, run_id: str) -> Conditions:
    """The conditions a stored job (and the code it ran) trained under; FitError naming the run where its spec
    cannot say them."""
    try:
        return Conditions.of_job(job, code)
    except (KeyError, TypeError, ValueError) as e:
        raise FitError(f"{where}: runs.spec of run {run_id!r} does not say its data or options as depl writes them "
                       f"({type(e).__name__}: {str(e).splitlines()[0]})") from None


def load_profile(store: Store, scenario: Scenario, min_seeds: int = 3) -> Profile:
    """Every complete profiling experiment of `store` (seeds with all epochs)."""
    out = Profile(scenario.name)
    for run in store.runs("profile"):
        spec = run_spec(run, store.path)
        exp = spec.experiment
        if exp is None or not spec.epochs:
            continue
        E = spec.epochs
        losses = store.losses(run["run_id"])
        gone = store.diverged(run["run_id"])  # a law of finite losses cannot be fitted to them: counted, skipped
        out.diverged += len(gone)
        done = sorted(s for s, v in losses.items() if len(v) == E and s not in gone)
        # every other seed that started: not fitted; a calibration counts it as a run that met no ℓmax
        rest = sorted((set(losses) | set(gone)) - set(done))
        if len(done) < min_seeds:
            continue
        for s in done + rest:
            bad = next(((k, x, loss_problem(x)) for k, x in enumerate(losses.get(s, [])[:E], 1) if loss_problem(x)),
                       None)
            if bad is not None:
                raise FitError(f"{store.path}: epochs.test_loss of run {run['run_id']!r}, seed {s}, epoch {bad[0]} = "
                               f"{bad[1]!r}: {bad[2]}")
        out.experiments.append(ProfiledExperiment(
            exp.kind, exp.version, exp.fraction, exp.to, exp.switch_after,
            _samples(scenario, spec.data), spec.nodes, np.array(done), np.array([losses[s] for s in done]),
            str(spec.data.get("draws", "fixed")), _conditions(spec.job, spec.code, store.path, run["run_id"]),
            np.array(rest, dtype=int),
            np.array([(list(losses.get(s, []))[:E] + [math.inf] * E)[:E] for s in rest], dtype=float).reshape(-1, E)))
    if not out.versions(None):
        raise FitError(f"{store.path}: no complete profiling experiment with at least {min_seeds} seeds "
                       "(run `depl profile` first)")
    nodes = {e.nodes for e in out.experiments}
    if len(nodes) > 1:
        raise FitError(f"{store.path}: the experiments were profiled on different numbers of nodes {sorted(nodes)}; "
                       "fit one setting at a time (one store per --nodes)")
    draws = {e.draws for e in out.experiments}
    if len(draws) > 1:
        raise FitError(f"{store.path}: some experiments kept the data fixed and others drew it per run "
                       "([training] data_draw); fit one kind at a time (one store per data_draw)")
    if not out.versions(1.0):
        top = max(e.fraction for e in out.versions(None))
        raise FitError(f"{store.path}: no experiment at the full data (fraction 1; the largest is {top})")
    return out
