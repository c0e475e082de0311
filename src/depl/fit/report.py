"""`depl fit` end to end: fit both models, score them on held-out seeds,
choose, report, plot, and write the scenario sections `depl plan` reads."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ..scenario import Scenario, scenario_dict
from ..store import Store
from .compare import Score, build, score
from .increments import IncrementsFit, fit_increments
from .level import LevelFit, fit_level
from .runs import Profile, load_profile


@dataclass
class FitResult:
    profile: Profile
    increments: IncrementsFit          # on the fitting seeds (scored, reported)
    level: LevelFit
    scores: dict[str, Score]
    level_ks: dict[str, tuple[float, float | None]]   # experiment → (plain KS p, bootstrap p) of log ℓ(E) ~ normal
    chosen: str
    why: str
    scenarios: dict[str, Scenario]     # refitted on all seeds, ready for `depl plan`
    data: dict[str, dict]              # the same as plain dicts (for the TOML files)


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


def run_fit(store: Store, base: Scenario, *, bootstrap: int = 200, seed: int = 0) -> FitResult:
    return fit_profile(load_profile(store, base), base, bootstrap=bootstrap, seed=seed)


def fit_profile(prof: Profile, base: Scenario, *, bootstrap: int = 200, seed: int = 0) -> FitResult:
    """Fit both models to `prof` (from a store or from logs); `base` gives ℓ(0) and the other sections."""
    rng = np.random.default_rng(seed)
    l0 = base.initial_loss
    fit_part, held = prof.split(False), prof.split(True)
    inc = fit_increments(fit_part, held, l0, bootstrap=bootstrap, rng=rng)
    lev = fit_level(fit_part, l0)
    epochs = max(e.epochs for e in prof.experiments)
    base_data = scenario_dict(base)
    trial = build(base_data, inc, lev, epochs, base.name)
    scores = {m: score(s, held, m) for m, s in trial.items()}
    a, b = scores["increments"], scores["level"]
    chosen = "level" if b.loglik_late > a.loglik_late else "increments"
    why = (f"mean held-out log-likelihood of ℓ(k) per observation over the second half of the epochs, where plans end: "
           f"level {b.loglik_late:.3f}, increments {a.loglik_late:.3f}; the higher wins. Over every epoch: level "
           f"{b.loglik:.3f}, increments {a.loglik:.3f}; at the last epoch: level {b.loglik_final:.3f}, "
           f"increments {a.loglik_final:.3f} ({b.n} held-out losses of {len(held.experiments)} experiments)")
    if (b.loglik > a.loglik) != (chosen == "level"):
        why += ("; NOTE: over every epoch the other model scores higher — the chosen one fits the early epochs "
                "(the initial plateau) worse")
    # the files are written from fits on every seed (no bootstrap: the p-values above are the report's)
    inc_all = fit_increments(prof, Profile(prof.scenario, []), l0)
    gamma = next(iter(lev.versions.values())).curve.floor_exponent
    lev_all = fit_level(prof, l0, data_law=(lev.s0, gamma))
    from .compare import scenario_data
    data = {m: scenario_data(base_data, inc_all, lev_all, m, epochs) for m in ("increments", "level")}
    final = build(base_data, inc_all, lev_all, epochs, base.name)
    return FitResult(prof, inc, lev, scores, _level_ks(fit_part, bootstrap, rng), chosen, why, final, data)


# --------------------------------------------------------------------------- #
# The printed report
# --------------------------------------------------------------------------- #

def _p(x) -> str:
    if x is None:
        return "—"
    return f"{x:.2g}" if x >= 1e-3 else f"{x:.1e}"


def report_lines(r: FitResult) -> list[str]:
    L = []
    p = r.profile
    L.append(f"profile of {p.scenario}: {len(p.experiments)} experiments, "
             f"{p.experiments[0].nodes} node(s), {sum(e.seeds.size for e in p.experiments)} seed-runs; "
             f"fitting seeds = 2/3, held-out = every third seed")
    L.append("")
    L.append("## The paper's model (eq. 8), fitted on the fitting seeds")
    for v in r.increments.versions.values():
        L.append(f"{v.name}: A = {v.A:.4g}, B = {v.B:.4g}; x ≤ 0 in {100 * v.negative_share:.0f}% of epochs; "
                 f"Spearman(x, epoch) = {v.spearman_epoch:+.2f}; lag-1 autocorrelation of x = {v.lag1:+.2f}")
        for f in v.families:
            params = ", ".join(f"{k}={val:.3g}" for k, val in f.params.items())
            mark = " ← used" if v.chosen is f else ""
            usable = "" if f.usable else " (infinite mean/variance: unusable)"
            L.append(f"    X ~ {f.family:<8} {params:<42} KS p naive {_p(f.p_naive):>7}, bootstrap {_p(f.p_boot):>7}; "
                     f"held-out loglik {f.heldout:8.3f} ({f.impossible}/{f.heldout_n} impossible){usable}{mark}")
    for sw in r.increments.switches.values():
        L.append(f"switch {sw.a} → {sw.b}: {sw.jumps.size} jumps, mean {sw.jumps.mean():+.3f}, sd {sw.jumps.std():.3f}")
        for f in sw.families:
            params = ", ".join(f"{k}={val:.3g}" for k, val in f.params.items())
            mark = " ← used" if sw.chosen is f else ""
            L.append(f"    jump ~ {f.family:<8} {params:<42} KS p naive {_p(f.p_naive):>7}, bootstrap {_p(f.p_boot):>7}; "
                     f"held-out loglik {f.heldout:8.3f}{mark}")
    if r.increments.s0 is not None:
        L.append(f"data law: S0 = {r.increments.s0:.4g} (A at each data size / A at {r.increments.reference_samples:g}: "
                 + ", ".join(f"{s:g}: {v:.3f}" for s, v in sorted(r.increments.phi_measured.items())) + ")")
    L.append("")
    L.append("## The level model, fitted on the fitting seeds")
    lev = r.level
    for v in lev.versions.values():
        c = v.curve
        alt = ", ".join(f"{k} {sse:.3g}" for k, sse in v.alternatives.items())
        L.append(f"{v.name}: {c.kind} curve, floor {c.floor:.3f}·φ^-{c.floor_exponent:g}, scale {c.scale:.3g}, shape {c.shape:.3g} "
                 f"(SSE of log mean: {alt}); log-sd {v.sigma0:.3f} + {v.sigma1:.3f}·ln(ℓ0/μ) + {v.sigma2:.3f}·|dlnμ/dlnt|; "
                 f"per-seed share {v.seed_share:.2f}")
    for sw in lev.switches.values():
        L.append(f"switch {sw.a} → {sw.b}: offset {sw.offset:+.3f} × {sw.b}'s curve, recovery {sw.recovery:.2f}/epoch, "
                 f"extra log-sd {sw.sigma:.3f}")
    if lev.s0 is not None:
        L.append(f"data law (time scaled by φ): S0 = {lev.s0:.4g}, reference {lev.reference_samples:g} samples")
    L.append("log ℓ(E) normal? KS p naive / bootstrap: " + "; ".join(
        f"{k} {_p(a)}/{_p(b)}" for k, (a, b) in r.level_ks.items()))
    L.append("")
    L.append("## Held-out comparison (seeds the fits never saw): mean log-density of the measured ℓ(k)")
    L.append(f"{'model':<11} {'all epochs':>10} {'2nd half':>10} {'last epoch':>10} {'impossible':>10}   KS p of held-out ℓ(E) (no refit); var ratio predicted/measured of ℓ(E)")
    for m, s in r.scores.items():
        ks = ", ".join(f"{k} {_p(v)}" for k, v in s.ks_final.items())
        vr = ", ".join(f"{k} {v:.3g}" for k, v in s.var_ratio.items())
        L.append(f"{m:<11} {s.loglik:10.3f} {s.loglik_late:10.3f} {s.loglik_final:10.3f} {s.impossible:>10}   KS: {ks}")
        L.append(f"{'':<56}   var ratio: {vr}")
    L.append("")
    L.append(f"chosen: {r.chosen} — {r.why}")
    L.append("the scenario files are written from a refit of both models on every seed (the level law with the "
             "data law S0, γ found above); the figures above are those of the fitting seeds")
    return L


# --------------------------------------------------------------------------- #
# Files (the plots are depl.report.plots.plot_fit and plot_multipliers)
# --------------------------------------------------------------------------- #

def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return repr(float(v)) if math.isfinite(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def _key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else _toml_value(k)


def toml_dumps(data: dict, header: str = "") -> str:
    """A scenario dict as TOML: scalars, then tables, then arrays of tables (nested tables inline)."""
    lines = [f"# {h}" if h else "#" for h in header.splitlines()] if header else []
    scalars = {k: v for k, v in data.items() if not isinstance(v, (dict, list)) or
               (isinstance(v, list) and not (v and isinstance(v[0], dict)))}
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    arrays = {k: v for k, v in data.items() if isinstance(v, list) and v and isinstance(v[0], dict)}
    lines += [f"{_key(k)} = {_toml_value(v)}" for k, v in scalars.items()]
    for k, t in tables.items():
        lines += ["", f"[{_key(k)}]"] + [f"{_key(a)} = {_toml_value(b)}" for a, b in t.items()]
    for k, arr in arrays.items():
        for item in arr:
            lines += ["", f"[[{_key(k)}]]"] + [f"{_key(a)} = {_toml_value(b)}" for a, b in item.items()]
    return "\n".join(lines) + "\n"
