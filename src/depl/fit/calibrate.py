"""Calibration of a fitted law on runs it was not fitted on (`depl fit --calibration-seeds`, `depl calibrate`).

Each calibration run (an experiment's seed that no fit saw) gives, for every
epoch k it ran, one score: the PIT u(k) = F_e,k(ℓ(k)) of its loss at epoch k
under the fitted law of the experiment's schedule truncated to k epochs.  A
plan of K epochs is calibrated by the epoch-K scores (`epoch_scores`); the
last-epoch scores (`scores`) are kept for files and readers before them.  One
score per run and epoch — a run is its seed, the schedule it trained so far
and its φ, so a switch experiment's epochs before its switch, the same runs
as its first version's, count once (`_pooled`) —, so that for each fixed k the
scores of different seeds are independent draws; the epochs of one seed are
not (depl.loss.calibrated states the guarantee and its price).

Also here: the reliability of a law on held-out runs before and after
calibration (cross-fitted: each half of the calibration runs is judged by the
calibration of the other half, so "after" is measured on runs it did not
see), the PIT values per version and per switch for the report's histograms,
and the comparison with the alternatives (no calibration, isotonic
recalibration of the CDF) that docs/fitting-results.md reports.
"""

from __future__ import annotations

import json

from dataclasses import dataclass, field

import numpy as np

from ..loss import loss_model_for
from ..loss.base import segments
from ..certificate import conformal
from ..scenario import Scenario
from .runs import FitError, Profile

LEVELS = np.round(np.arange(0.05, 1.0, 0.05), 2)


@dataclass
class Scores:
    """The PIT of each run's last loss under a law: by experiment label, with the kind of experiment."""

    values: dict[str, np.ndarray] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)

    @property
    def all(self) -> np.ndarray:
        return np.sort(np.concatenate(list(self.values.values()))) if self.values else np.empty(0)

    @property
    def n(self) -> int:
        return int(sum(v.size for v in self.values.values()))

    def groups(self) -> dict[str, np.ndarray]:
        """Per version (its experiments at every data fraction) and 'switches' (every switch experiment)."""
        out: dict[str, list] = {}
        for label, v in self.values.items():
            key = "switches" if self.kinds[label] == "switch" else label.split("@")[0]
            out.setdefault(key, []).append(v)
        return {k: np.concatenate(v) for k, v in out.items()}


def _scored(scenario: Scenario, prof: Profile, *, calibrated: bool = False, last: bool = False):
    """[(experiment, φ, [u(k) for its epochs k = 1..E, or only E with `last`])] for every experiment of `prof` the
    scenario's law (uncalibrated unless asked) can score: u(k) = F_e,k(ℓ(k)), the PIT of each seed's ℓ(k) under
    the law of the schedule's first k epochs — the one computation behind every score here."""
    law = loss_model_for(scenario, calibrated=calibrated)
    known = set(law.model_names)
    out = []
    for e in prof.experiments:
        if not set(e.schedule) <= known or e.losses.shape[0] == 0:
            continue
        phi = scenario.phi(e.samples)
        ks = [e.epochs] if last else range(1, e.epochs + 1)
        out.append((e, phi, [_pit(law.distribution(e.schedule[:k], phi), e.losses[:, k - 1]) for k in ks]))
    return out


def _pit(dist, losses: np.ndarray) -> np.ndarray:
    """F(ℓ) of each loss, in [0, 1]; 1 for a run that stopped or diverged before (ℓ = +inf: beyond every level)."""
    losses = np.asarray(losses, dtype=float)
    finite = np.isfinite(losses)
    out = np.ones(losses.shape)
    if finite.any():
        out[finite] = np.clip(dist.cdf(losses[finite]), 0.0, 1.0)
    return out


def _pits(scored) -> Scores:
    out = Scores()
    for e, _, rows in scored:
        out.values[e.label] = np.concatenate(rows)
        out.kinds[e.label] = e.kind
    return out


def pit_scores(scenario: Scenario, prof: Profile, *, calibrated: bool = False, epochs: str = "last") -> Scores:
    """PIT of every run of `prof` under the scenario's law (uncalibrated unless asked): F_e(ℓ(E)), or with
    epochs='all' the PIT of ℓ(k) at every epoch (for the histograms, not for calibration: dependent)."""
    return _pits(_scored(scenario, prof, calibrated=calibrated, last=epochs != "all"))


def _experiment_table(e, phi: float, rows: list[np.ndarray]) -> dict:
    """An experiment's own epoch scores: its [[calibration.experiments]] table (depl.scenario.CalibrationExperiment),
    which certifies a plan of the experiment's schedule by its own runs."""
    runs = segments(e.schedule)
    order = np.argsort(e.seeds, kind="stable")
    out = {"label": e.label, "versions": [v for v, _ in runs], "epochs": [n for _, n in runs],
            "phi": float(f"{float(phi):.12g}"),  # significant digits: a plan's φ matches at rel 1e-6 however small
            "epoch_scores": [[round(float(u), EPOCH_DIGITS) + 0.0 for u in rounded(np.sort(r))] for r in rows],
            "seeds": [int(e.seeds[i]) for i in order],   # each run once: what a certificate counts
            # each run's own losses, by seed (inf: it diverged or stopped there): a certificate counts ℓ(K) ≤ ℓmax
            "losses": [[float(x) for x in e.losses[i]] for i in order]}
    if e.conditions is not None:
        out["conditions"] = e.conditions.model_dump(exclude_defaults=False)
        out["conditions"]["shares"] = [list(sh) for sh in out["conditions"]["shares"]]
    return out


EPOCH_DIGITS = 6   # epoch_scores are written to 6 decimals, as `scores`


def rounded(u: np.ndarray, digits: int = EPOCH_DIGITS) -> np.ndarray:
    """Scores to `digits` decimals, as `scores` are written. A score within 5e-7 of 1 becomes 1 (a run at the
    top of a lattice law, whose mass stops 1e-7 or so short of 1, is beyond it: its level certifies nothing,
    the safe side); within 5e-7 of 0, 0 (low quantiles only: the conformal bound is upper)."""
    return np.round(np.asarray(u, dtype=float), digits)


@dataclass
class Calibration:
    scores: np.ndarray       # sorted PIT scores of the calibration runs at their last epoch
    omega: float
    runs: int                # calibration runs (experiment, seed)
    needed: int              # runs split conformal needs to reach ω
    epochs: list[np.ndarray] = field(default_factory=list)   # [k-1]: sorted PIT scores of ℓ(k)
    experiments: list[dict] = field(default_factory=list)     # each experiment's own ([[calibration.experiments]])
    data_draw: str = "fixed"  # what the runs' data was: the same for every seed, or each run's own draw

    @property
    def reaches(self) -> bool:
        """Whether ω is reached at the last epoch and at every scored epoch (each epoch's runs ≥ needed)."""
        return self.runs >= self.needed and all(r.size >= self.needed for r in self.epochs)

    @property
    def level(self) -> float:
        """The base law's level at which the calibrated ω-quantile of the last epoch is taken (1: none)."""
        return float(conformal.level(self.scores, self.omega))

    def levels(self, omega: float | None = None) -> np.ndarray:
        """[k-1]: the base law's level at which a k-epoch plan's calibrated ω-quantile is taken (1: none)."""
        w = self.omega if omega is None else omega
        return np.array([float(conformal.level(r, w)) for r in self.epochs])

    def _short(self) -> list[tuple[int, int]]:
        return [(k, r.size) for k, r in enumerate(self.epochs, 1) if r.size < self.needed]

    def message(self, runs: str = "held-out runs",
                more: str = "more seeds per experiment with --calibration-seeds, or more profiled seeds") -> str:
        if self.reaches:
            text = (f"calibrated on {self.runs} {runs}: the certified {self.omega:g}-quantile is the law's "
                    f"{self.level:.3f}-quantile at the last epoch")
            if self.epochs:
                lv = self.levels()
                n = len(lv)
                shown = ", ".join(f"{k}: {lv[k - 1]:.3f}" for k in sorted({1, max(1, n // 4), max(1, n // 2),
                                                                             max(1, 3 * n // 4), n}))
                text += (f"; a K-epoch plan at the epoch-K scores' level (epoch {shown}; "
                         f"range {lv.min():.3f}–{lv.max():.3f})")
            return text + " (split conformal on PIT scores)"
        short = [(k, n) for k, n in self._short() if n < self.runs]  # epochs fewer runs reached than the last
        fewest = min([self.runs] + [n for _, n in short])
        where = ""
        if short:
            ks = [k for k, _ in short]
            where = (f" at epoch{'s' if len(ks) > 1 else ''} {ks[0]}" + (f"..{ks[-1]}" if len(ks) > 1 else "")
                     + " (split conformal needs enough runs at every scored epoch)")
        return (f"calibration cannot reach ω = {self.omega:g} with {fewest} {runs}{where}: split conformal needs "
                f"n ≥ {self.needed} ({self.needed - fewest} more; {more}); the file keeps "
                f"the scores with use = false, and plans with the uncalibrated law")

    def table(self, method: str = "conformal-pit") -> dict:
        """The scenario's [calibration] table."""
        out = {"method": method, "use": bool(self.reaches), "omega": float(self.omega),
               "scores": [round(float(u), 6) for u in self.scores]}
        if self.epochs:
            out["epoch_scores"] = [[round(float(u), EPOCH_DIGITS) + 0.0 for u in rounded(r)] for r in self.epochs]
        if self.experiments:
            out["experiments"] = self.experiments
        if self.data_draw != "fixed":  # a table of runs on fixed data reads as it always did
            out["data_draw"] = self.data_draw
        return out


def _pooled(scored, k: int | None) -> np.ndarray:
    """The sorted epoch-k scores (None: each experiment's last epoch) of every run that ran epoch k, each run once.

    A run is its seed, the schedule it trained up to epoch k and its φ: a switch experiment's epochs before its
    switch are the same runs as those of the experiment of its first version at that φ (a profile trains both
    from the same seeds — their losses are the same), and an experiment profiled twice repeats its runs.  Such
    a score is counted once (the first experiment's, in the profile's order): counted again it would add no
    independent draw, only inflate the runs split conformal counts."""
    seen: set = set()
    out = []
    for e, phi, rows in scored:
        K = len(rows) if k is None else k
        if K > len(rows):
            continue
        key_of = (tuple(e.schedule[:K]) if k is not None else tuple(e.schedule), float(f"{float(phi):.12g}"))
        seeds = _run_seeds(e, rows[K - 1].size)
        for seed, u in zip(seeds, rows[K - 1]):
            key = (seed, *key_of)
            if key not in seen:
                seen.add(key)
                out.append(u)
    return np.sort(np.asarray(out, dtype=float))


def _run_seeds(e, n: int) -> list:
    """The seed of each of an experiment's `n` scored runs, in the order of its losses (None where unknown: then
    each run counts on its own)."""
    seeds = getattr(e, "seeds", None)
    if seeds is None or len(seeds) != n:
        return [("run", id(e), i) for i in range(n)]
    return [int(x) for x in seeds]


def calibrate_with_pits(scenario: Scenario, calib: Profile, omega: float) -> tuple[Calibration, Scores]:
    """The calibration of the scenario's law (uncalibrated) on the runs of `calib`: the last-epoch scores, every
    epoch's, and each experiment's own (the one implementation behind `depl fit --calibration-seeds` and
    `depl calibrate`); and the PIT of ℓ(k) of every run at every epoch (for the histograms), from one scoring."""
    scored = _scored(scenario, calib)
    s = _pooled(scored, None)
    depth = max((len(rows) for _, _, rows in scored), default=0)
    # [k-1]: the epoch-k scores of every run that ran epoch k, each run once, as the file keeps them
    epochs = [rounded(_pooled(scored, k)) for k in range(1, depth + 1)]
    cal = Calibration(s, float(omega), int(s.size), conformal.scores_needed(omega), epochs,
                      [_experiment_table(e, phi, rows) for e, phi, rows in scored],
                      next((e.draws for e, _, _ in scored), "fixed"))
    return cal, _pits(scored)


# --------------------------------------------------------------------------- #
# Reliability, and the alternatives
# --------------------------------------------------------------------------- #

def isotonic_level(scores: np.ndarray, omega):
    """The level isotonic recalibration of the CDF (Kuleshov et al. 2018) takes the ω-quantile at: the
    isotonic fit of the empirical frequency P̂(u ≤ p) on p, inverted at ω (no finite-sample correction)."""
    from sklearn.isotonic import IsotonicRegression

    u = np.sort(np.asarray(scores, dtype=float))
    freq = np.arange(1, u.size + 1) / u.size
    iso = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True).fit(u, freq)
    grid = np.linspace(0.0, 1.0, 10_001)
    cal = iso.predict(grid)
    omega = np.atleast_1d(np.asarray(omega, dtype=float))
    idx = np.searchsorted(cal, omega - 1e-12, side="left")
    return np.where(idx >= grid.size, 1.0, grid[np.minimum(idx, grid.size - 1)])


LEVEL_RULES = {
    "none": lambda fit, p: np.asarray(p, dtype=float),
    "isotonic": isotonic_level,
    "conformal": conformal.level,
}


def reliability(scores: np.ndarray, levels=LEVELS, rule: str = "none", rng=None, folds: int = 2,
                repeats: int = 50) -> np.ndarray:
    """Observed frequency of ℓ ≤ the rule's p-quantile, for each nominal p, on runs the rule did not see
    (random halves of the runs: calibrate on one, count on the other; averaged over `repeats` splits)."""
    u = np.asarray(scores, dtype=float)
    if rule == "none":
        return np.array([np.mean(u <= p) for p in levels])
    rng = rng or np.random.default_rng(0)
    out = np.zeros(len(levels))
    for _ in range(repeats):
        perm = rng.permutation(u.size)
        parts = np.array_split(perm, folds)
        for i in range(folds):
            test = u[parts[i]]
            fit = np.sort(u[np.concatenate([parts[j] for j in range(folds) if j != i])])
            lv = np.asarray(LEVEL_RULES[rule](fit, np.asarray(levels)), dtype=float)
            out += np.array([np.mean(test <= lv_p) if lv_p < 1 else 1.0 for lv_p in lv]) / (folds * repeats)
    return np.clip(out, 0.0, 1.0)   # a mean of 100 fractions of 1 sums to 1.0000000000000007: a frequency is ≤ 1


# --------------------------------------------------------------------------- #
# Recalibrating a scenario's law on new runs (`depl calibrate`)
# --------------------------------------------------------------------------- #

def check_new_runs(scenario: Scenario, prof: Profile) -> None:
    """Refuse (FitError, for the user) runs that cannot calibrate the scenario's law: runs on the seeds it was
    fitted on (its own fitting runs would judge it: no guarantee), or experiments it cannot evaluate."""
    where = f"scenario {scenario.name!r}"
    if scenario.fitted_seeds is None:
        raise FitError(f"{where} does not say which seeds its law was fitted on (fitted_seeds = [first, last]; "
                       "docs/scenario-format.md): runs on them would judge the law on its own fit, so none is used")
    first, last = scenario.fitted_seeds
    known = {m.name for m in scenario.models}
    epochs = scenario.fitted_epochs or scenario.max_epochs
    for e in prof.experiments:
        unknown = sorted(set(e.schedule) - known)
        if unknown:
            raise FitError(f"experiment {e.label}: version {unknown[0]!r} is not a model of {where} "
                           f"(models: {', '.join(sorted(known))}); its law cannot score these runs")
        if e.fraction != 1.0 and scenario.data_law is None:
            raise FitError(f"experiment {e.label}: data fraction {e.fraction:g}, but {where} has no [data_law]: "
                           "its law is of the full data only; profile at --fractions 1")
        differ = e.conditions.mismatches(scenario) if e.conditions is not None else []
        if differ:
            raise FitError(f"experiment {e.label}: its runs were not trained under the conditions of {where}: "
                           + "; ".join(m.words("the scenario") for m in differ)
                           + ". Runs of other conditions certify nothing of it: profile calibration runs of the "
                           "scenario as it is (`depl profile SCENARIO --first-seed N`)")
        if epochs is not None and e.epochs > epochs:
            raise FitError(f"experiment {e.label}: {e.epochs} epochs, beyond the {epochs} epochs the law of {where} "
                           "describes (fitted_epochs/max_epochs); profile at most that many (--epochs)")
    bad = sorted({int(s) for e in prof.experiments for s in e.seeds if first <= s <= last})
    if bad:
        shown = ", ".join(map(str, bad[:12])) + (", …" if len(bad) > 12 else "")
        raise FitError(f"the runs include seeds {shown}, which the law of {where} was fitted on (fitted_seeds = "
                       f"[{first}, {last}]): calibrate on other seeds, e.g. `depl profile --first-seed {last + 1}`")


def recalibrate(scenario: Scenario, prof: Profile, omega: float) -> tuple[Calibration, Scores]:
    """The calibration `depl fit --calibration-seeds` writes, of the scenario's law (uncalibrated) on new runs;
    with the PIT of ℓ(k) at every epoch (for the histograms)."""
    check_new_runs(scenario, prof)
    return calibrate_with_pits(scenario, prof, omega)


def _code(line: str) -> tuple[str, int]:
    """A TOML line without its comment, and its '[' minus ']' outside strings (one scan of its quotes)."""
    n, quote = 0, None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            return line[:i], n
        elif ch == "[":
            n += 1
        elif ch == "]":
            n -= 1
    return line, n


def with_code_dir(text: str, code_dir: str) -> str:
    r"""The scenario file `text` with its top-level `code_dir` set to `code_dir` (a TOML string): the line replaced
    where the file has one, else added before the first table; every other line as it was.

    >>> with_code_dir('name = "x"\ncode_dir = "."\n[target]\nloss = 1\n', "..")
    'name = "x"\ncode_dir = ".."\n[target]\nloss = 1\n'
    >>> with_code_dir('# mine\nname = "x"\n\n[target]\ncode_dir = 2\n', "../a b")
    '# mine\nname = "x"\ncode_dir = "../a b"\n\n[target]\ncode_dir = 2\n'
    """
    line = f"code_dir = {json.dumps(code_dir, ensure_ascii=False)}"
    lines = text.splitlines(keepends=True)
    depth, last = 0, 0   # last: the line after the top level's last key (before its first table)
    for i, raw in enumerate(lines):
        head = raw.strip()
        code, brackets = _code(head)
        if depth == 0 and head.startswith("["):
            break
        if depth == 0 and code.split("=", 1)[0].strip() == "code_dir":
            return "".join(lines[:i] + [line + "\n"] + lines[i + 1:])
        depth += brackets
        if code.strip():
            last = i + 1
    return "".join(lines[:last] + [line + "\n"] + lines[last:])


def with_calibration(text: str, table: str, comment: list[str]) -> str:
    """The scenario file `text` with its [calibration] table (and the header lines about it) replaced by
    `table` (its TOML text, `[calibration]` first) and `comment`; every other line as it was (the law, its
    comments, the layout)."""
    lines = text.splitlines()
    out, skip, depth = [], False, 0   # depth: inside a multi-line array (epoch_scores' rows are not headers)
    for line in lines:
        head = line.strip()
        opened = depth
        code, brackets = _code(head)
        depth += brackets
        if opened == 0 and head.startswith("["):
            # a header without its spaces and trailing comment (`[[calibration.experiments]]  # note`)
            skip = code.replace(" ", "").replace("\t", "") in ("[calibration]", "[[calibration.experiments]]")
            if skip:
                while out and not out[-1].strip():
                    out.pop()
                continue
        if skip:
            continue
        if head.startswith(("# [calibration]", "# `depl plan` plans with the calibrated law")):
            continue
        out.append(line)
    top = 0  # the header: the comment block the file opens with
    while top < len(out) and out[top].startswith("#"):
        top += 1
    out[top:top] = [f"# {c}" for c in comment]
    while out and not out[-1].strip():
        out.pop()
    return "\n".join(out) + "\n\n" + table.strip("\n") + "\n"
