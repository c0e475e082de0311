"""`depl fit` end to end: fit every registered law (depl.laws), score them on
held-out seeds, choose, report, plot, and write the scenario sections
`depl plan` reads."""

from __future__ import annotations

import math
import re
import unicodedata
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from ..scenario import Scenario, scenario_dict
from ..store import Store
from .compare import Score, build, parse_fitted, scenario_data, score
from .gof import pvalue_text
from .calibrate import Calibration, Scores, calibrate_with_pits
from .registry import fitters
from .runs import FitError, Profile, load_profile


@dataclass
class FitResult:
    profile: Profile
    fits: dict[str, Any]               # law → fitted on the fitting seeds (scored, reported)
    scores: dict[str, Score]
    level_ks: dict[str, tuple[float, float | None]]   # experiment → (plain KS p, bootstrap p) of log ℓ(E) ~ normal
    chosen: str
    why: str
    scenarios: dict[str, Scenario]     # refitted on all seeds, ready for `depl plan`
    data: dict[str, dict]              # the same as plain dicts (for the TOML files)
    apart: Profile | None = None       # the runs set apart for calibration (no fit saw them)
    calibration: dict[str, Calibration] = field(default_factory=dict)   # law → its calibration on `apart`
    pit: dict[str, Scores] = field(default_factory=dict)                # law → PIT of ℓ(k), every epoch of `apart`

    @property
    def increments(self):
        return self.fits.get("increments")

    @property
    def level(self):
        return self.fits.get("level")


def _level_ks(profile: Profile, bootstrap: int, rng) -> dict[str, tuple[float, float | None]]:
    out = {}
    for e in profile.experiments:
        y = np.log(e.losses[:, -1])
        if y.size < 4:
            continue
        plain = float(stats.kstest(y, stats.norm(y.mean(), y.std(ddof=1)).cdf).pvalue)
        boot = None
        if bootstrap > 0:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                boot = float(stats.goodness_of_fit(stats.norm, y, statistic="ks", n_mc_samples=bootstrap,
                                                   random_state=rng).pvalue)
        out[e.label] = (plain, boot)
    return out


def run_fit(store: Store, base: Scenario, **kw) -> FitResult:
    return fit_profile(load_profile(store, base), base, **kw)


TIE = 0.01          # nats per held-out observation: laws closer than this are not told apart
MIN_FIT_SEEDS = 3   # per experiment: two to fit, one held out to choose the law


def default_calibration_seeds(seeds: int) -> int:
    """A quarter of each experiment's seeds, leaving MIN_FIT_SEEDS to fit."""
    return max(0, min(seeds // 4, seeds - MIN_FIT_SEEDS))


def measured(prof: Profile) -> dict:
    """The [measured] table of a fitted scenario: the node count and the amounts of training data its profile ran."""
    return {"nodes": int(prof.experiments[0].nodes), "samples": sorted({float(e.samples) for e in prof.experiments})}


def fit_profile(prof: Profile, base: Scenario, *, bootstrap: int = 200, seed: int = 0,
                calibration_seeds: int | None = None, omega: float | None = None) -> FitResult:
    """Fit every registered law to `prof` (from a store or from logs); `base` gives ℓ(0) and the other sections.

    The last `calibration_seeds` seeds of every experiment (default: a quarter) are set apart: no law is
    fitted on them; each fitted law is calibrated on them for ω = `omega` (default: the base's target)."""
    rng = np.random.default_rng(seed)
    l0 = base.initial_loss
    fewest = min(e.seeds.size for e in prof.experiments)
    n_cal = default_calibration_seeds(fewest) if calibration_seeds is None else calibration_seeds
    if n_cal and fewest - n_cal < MIN_FIT_SEEDS:
        small = min(prof.experiments, key=lambda e: e.seeds.size)
        raise FitError(f"--calibration-seeds {n_cal}: experiment {small.label} has {small.seeds.size} seeds, which "
                       f"leaves fewer than {MIN_FIT_SEEDS} to fit; give at most {max(fewest - MIN_FIT_SEEDS, 0)}")
    prof, apart = prof.set_apart(n_cal)
    fit_part, held = prof.split(False), prof.split(True)
    laws = fitters()
    fits: dict[str, Any] = {}
    for n, f in laws.items():  # in registration order: a law may build on those before it
        fits[n] = f.fit(fit_part, held, l0, bootstrap=bootstrap, rng=rng, earlier=dict(fits))
    epochs = max(e.epochs for e in prof.experiments)
    base_data = scenario_dict(base)
    base_data.pop("code_hashes", None)  # the code's digests are taken whenever the file is read
    trial = build(base_data, fits, epochs, base.name)
    scores = {m: score(s, held, m) for m, s in trial.items()}
    # Within TIE nats per observation of the best, the first registered law (the simpler: the level law with
    # memory has the level law's versions and differs only where switches do) — one switch point cannot
    # tell them apart, and noise alone should not pick the more flexible one.
    best = max(s.loglik_late for s in scores.values())
    chosen = next(m for m, s in scores.items() if s.loglik_late >= best - TIE)
    n = next(iter(scores.values())).n

    def listing(attr):
        return ", ".join(f"{m} {getattr(s, attr):.3f}" for m, s in scores.items())
    why = (f"mean held-out log-likelihood of ℓ(k) per observation over the second half of the epochs, where plans end: "
           f"{listing('loglik_late')}; the higher wins (within {TIE:g}: the first listed). Over every epoch: {listing('loglik')}; at the last epoch: "
           f"{listing('loglik_final')} ({n} held-out losses of {len(held.experiments)} experiments)")
    if max(scores, key=lambda m: scores[m].loglik) != chosen:
        why += ("; NOTE: over every epoch another model scores higher — the chosen one fits the early epochs "
                "(the initial plateau) worse")
    # the files are written from fits on every seed (no bootstrap: the p-values above are the report's)
    fits_all: dict[str, Any] = {}
    for n, f in laws.items():
        fits_all[n] = f.refit(prof, fits[n], l0, earlier=dict(fits_all))
    data = {m: scenario_data(base_data, fits_all, m, epochs) for m in fits_all}
    for d in data.values():  # what the runs measured: the planner keeps to it (Scenario.measured)
        d["measured"] = measured(prof)
    final = parse_fitted(data, base.name)
    r = FitResult(prof, fits, scores, _level_ks(fit_part, bootstrap, rng), chosen, why, final, data)
    if n_cal:
        omega = base.target.quantile if omega is None else omega
        r.apart = apart
        for m, s in final.items():
            r.calibration[m], r.pit[m] = calibrate_with_pits(s, apart, omega)
            data[m]["target"]["quantile"] = omega
            data[m]["calibration"] = r.calibration[m].table()
        r.scenarios = parse_fitted(data, base.name)
    return r


# --------------------------------------------------------------------------- #
# The printed report
# --------------------------------------------------------------------------- #

def report_lines(r: FitResult) -> list[str]:
    L = []
    p = r.profile
    L.append(f"profile of {p.scenario}: {len(p.experiments)} experiments, "
             f"{p.experiments[0].nodes} node(s), {sum(e.seeds.size for e in p.experiments)} seed-runs; "
             f"fitting seeds = 2/3, held-out = every third seed"
             + (f"; set apart for calibration (no fit sees them): the last {r.apart.experiments[0].seeds.size} "
                f"seeds of each experiment, {sum(e.seeds.size for e in r.apart.experiments)} runs" if r.apart else ""))
    L.append("")
    titles = {"increments": "The paper's model (eq. 8)", "level": "The level model"}
    for n, f in fitters().items():
        if n in r.fits:
            L.append(f"## {titles.get(n, f'The {n} law')}, fitted on the fitting seeds")
            L += f.describe(r.fits[n])
            L.append("")
    L.pop()
    L.append("log ℓ(E) normal? KS p naive / bootstrap: " + "; ".join(
        f"{k} {pvalue_text(a)}/{pvalue_text(b)}" for k, (a, b) in r.level_ks.items()))
    L.append("")
    L.append("## Held-out comparison (seeds the fits never saw): mean log-density of the measured ℓ(k)")
    L.append(f"{'model':<11} {'all epochs':>10} {'2nd half':>10} {'last epoch':>10} {'impossible':>10}   KS p of held-out ℓ(E) (no refit); var ratio predicted/measured of ℓ(E)")
    for m, s in r.scores.items():
        ks = ", ".join(f"{k} {pvalue_text(v)}" for k, v in s.ks_final.items())
        vr = ", ".join(f"{k} {v:.3g}" for k, v in s.var_ratio.items())
        L.append(f"{m:<11} {s.loglik:10.3f} {s.loglik_late:10.3f} {s.loglik_final:10.3f} {s.impossible:>10}   KS: {ks}")
        L.append(f"{'':<56}   var ratio: {vr}")
    L.append("")
    L.append(f"chosen: {r.chosen} — {r.why}")
    if r.calibration:
        L.append("")
        L.append("## Calibration on the runs set apart (split conformal on the PIT of ℓ(E), one score per run)")
        for m, c in r.calibration.items():
            u = c.scores
            share = ", ".join(f"{np.mean(u <= p):.2f}" for p in (0.1, 0.5, 0.9))
            L.append(f"{m}: {c.message()}; observed P(PIT ≤ 0.1, 0.5, 0.9) = {share} (a calibrated law: 0.1, 0.5, 0.9)")
    L.append("the scenario files are written from a refit of every law on every seed (the level laws with the "
             "data law S0, γ found above); the figures above are those of the fitting seeds")
    return L


# --------------------------------------------------------------------------- #
# Files (the plots are depl.report.plots.plot_fit, plot_multipliers and plot_calibration)
# --------------------------------------------------------------------------- #

def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return repr(float(v)) if math.isfinite(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, str):
        return _toml_string(v)
    if isinstance(v, (list, tuple)):
        if v and all(isinstance(x, (list, tuple)) for x in v):  # an array of arrays: one row a line
            return "[\n" + "".join(f"  {_toml_value(x)},\n" for x in v) + "]"
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


_TOML_ESCAPES = {"\\": "\\\\", '"': '\\"', "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _toml_string(s: str) -> str:
    """A TOML basic string: quotes and backslashes escaped, every control character too (TOML allows none in a
    string but tab; \\uXXXX for those without a short escape)."""
    return '"' + "".join(_TOML_ESCAPES.get(c) or (f"\\u{ord(c):04x}" if unicodedata.category(c) == "Cc" else c)
                         for c in s) + '"'


def _key(k: str) -> str:
    return k if _BARE_KEY.fullmatch(k) else _toml_string(k)


def _comment(line: str) -> str:
    """A header line as a TOML comment: control characters (TOML allows none in a comment but tab) escaped."""
    return "".join(c if c == "\t" or unicodedata.category(c) != "Cc" else repr(c)[1:-1] for c in line)


def toml_dumps(data: dict, header: str = "") -> str:
    """A scenario dict as TOML: scalars, then tables, then arrays of tables (nested tables inline)."""
    lines = [f"# {_comment(h)}" if h else "#" for h in header.splitlines()] if header else []
    scalars = {k: v for k, v in data.items() if not isinstance(v, (dict, list)) or
               (isinstance(v, list) and not (v and isinstance(v[0], dict)))}
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    arrays = {k: v for k, v in data.items() if isinstance(v, list) and v and isinstance(v[0], dict)}
    lines += [f"{_key(k)} = {_toml_value(v)}" for k, v in scalars.items()]
    for k, t in tables.items():
        sub = {a: b for a, b in t.items() if isinstance(b, list) and b and isinstance(b[0], dict)}
        lines += ["", f"[{_key(k)}]"] + [f"{_key(a)} = {_toml_value(b)}" for a, b in t.items() if a not in sub]
        for a, arr in sub.items():   # a table's arrays of tables ([[calibration.experiments]]) after it
            for item in arr:
                lines += ["", f"[[{_key(k)}.{_key(a)}]]"] + [f"{_key(x)} = {_toml_value(y)}" for x, y in item.items()]
    for k, arr in arrays.items():
        for item in arr:
            lines += ["", f"[[{_key(k)}]]"] + [f"{_key(a)} = {_toml_value(b)}" for a, b in item.items()]
    return "\n".join(lines) + "\n"
