"""The paper's loss model fitted faithfully (Sec. VI-A, eq. 8).

    ℓ(k) = ℓ(k−1) − A_m·φ/√(k+B_m)·x_k + jump

(i) A_m, B_m by least squares under x = 1 (on every fitting seed's
trajectory); (ii) X_m by maximum likelihood on x_k = (ℓ(k−1) − ℓ(k))/g(k):
Inverse-Gamma, as in the paper, and the alternatives Gamma, log-normal (on
the positive x only — they cannot produce a rise of the loss) and normal;
(iii) the switch jump l_sw = ℓ(k1+1) − ℓ(k1) + g_b(k1+1)·E[x] by maximum
likelihood: Student-t, as in the paper, and normal, log-normal, skew-normal.
The data law φ(S) from the ratio of A fitted at each data fraction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize, stats

from ..scenario import expected_progress
from .gof import FamilyFit, best_usable, fit_family, pvalue_text
from ..laws import provide
from .laws import LawFit, LawFitter
from .runs import ProfiledExperiment, Profile

NOISE_FAMILIES = ("invgamma", "gamma", "lognorm", "norm")
JUMP_FAMILIES = ("t", "norm", "lognorm", "skewnorm")


def cumulative_g(k: np.ndarray, A: float, B: float) -> np.ndarray:
    """Σ_{j≤k} g(j) at φ = 1."""
    return A * np.cumsum(expected_progress(k, 1.0, B))


def fit_progress(losses: np.ndarray, l0: float, B: float | None = None) -> tuple[float, float]:
    """A, B by least squares of ℓ(k) = ℓ0 − A·Σ_{j≤k} 1/√(j+B) over all seeds (B given: A only)."""
    E = losses.shape[1]
    k = np.arange(1, E + 1, dtype=float)
    drop = (l0 - losses).ravel()

    def resid(p):
        A, b = math.exp(p[0]), (B if B is not None else math.exp(p[1]))
        return np.tile(cumulative_g(k, A, b), losses.shape[0]) - drop

    best = None
    for b0 in ([B] if B is not None else [0.1, 1.0, 5.0, 20.0]):
        A0 = max(float(np.mean(drop[-losses.shape[0]:])) / float(np.sum(1 / np.sqrt(k + b0))), 1e-4)
        x0 = [math.log(A0)] + ([] if B is not None else [math.log(b0)])
        r = optimize.least_squares(resid, x0, bounds=([-20] + ([] if B is not None else [-10]),
                                                      [5] + ([] if B is not None else [math.log(1e4)])))
        if best is None or r.cost < best.cost:
            best = r
    A = math.exp(best.x[0])
    return A, (B if B is not None else math.exp(best.x[1]))


def multipliers(losses: np.ndarray, l0: float, A: float, B: float, phi: float = 1.0) -> np.ndarray:
    """x_{s,k} = (ℓ(k−1) − ℓ(k))/g(k), shape (seeds, E)."""
    E = losses.shape[1]
    prev = np.concatenate([np.full((losses.shape[0], 1), l0), losses[:, :-1]], axis=1)
    return (prev - losses) / expected_progress(np.arange(1, E + 1), A, B, phi)


@dataclass
class VersionFit:
    name: str
    A: float
    B: float
    families: list[FamilyFit]
    chosen: FamilyFit | None
    negative_share: float       # share of x ≤ 0
    spearman_epoch: float       # Spearman correlation of x with the epoch
    lag1: float                 # lag-1 autocorrelation of x within a seed


@dataclass
class SwitchFit:
    a: str
    b: str
    families: list[FamilyFit]
    chosen: FamilyFit | None
    jumps: np.ndarray


@dataclass
class IncrementsFit(LawFit[VersionFit, SwitchFit]):
    phi_measured: dict[float, float] = field(default_factory=dict)  # samples → A_f / A_ref


def _lag1(x: np.ndarray) -> float:
    a, b = x[:, :-1].ravel(), x[:, 1:].ravel()
    return float(np.corrcoef(a, b)[0, 1]) if a.size > 2 else math.nan


def fit_increments(fit: Profile, held: Profile, l0: float, *, bootstrap: int = 0,
                   rng: np.random.Generator | None = None) -> IncrementsFit:
    out = IncrementsFit(l0)
    held_by = {e.label: e for e in held.experiments}
    for e in fit.versions(1.0):
        A, B = fit_progress(e.losses, l0)
        x = multipliers(e.losses, l0, A, B)
        hx = multipliers(held_by[e.label].losses, l0, A, B) if e.label in held_by else np.empty((0, e.epochs))
        pos = x[x > 0].ravel()
        fams = [fit_family(f, pos, hx.ravel(), fixed={"loc": 0.0}, bootstrap=bootstrap, rng=rng)
                for f in NOISE_FAMILIES if f != "norm"]
        fams.append(fit_family("norm", x.ravel(), hx.ravel(), bootstrap=bootstrap, rng=rng))
        fams = [f for f in fams if f is not None]
        k = np.tile(np.arange(1, e.epochs + 1), x.shape[0])
        out.versions[e.version] = VersionFit(
            e.version, A, B, fams, best_usable(fams), float(np.mean(x <= 0)),
            float(stats.spearmanr(k, x.ravel()).statistic), _lag1(x))
    for e in fit.switches():
        if e.version not in out.versions or e.to not in out.versions:
            continue
        out.switches[(e.version, e.to)] = _fit_switch(e, held_by.get(e.label), out, bootstrap, rng)
    _fit_data_law(fit, out, l0)
    return out


def _jumps(e: ProfiledExperiment, fit: IncrementsFit) -> np.ndarray:
    vb = fit.versions[e.to]
    mean_x = float(vb.chosen.frozen.mean()) if vb.chosen is not None else 1.0
    k1 = e.switch_after
    g = expected_progress(k1 + 1, vb.A, vb.B)
    return e.losses[:, k1] - e.losses[:, k1 - 1] + g * mean_x


def _fit_switch(e: ProfiledExperiment, held: ProfiledExperiment | None, fit: IncrementsFit, bootstrap: int, rng) -> SwitchFit:
    j = _jumps(e, fit)
    hj = _jumps(held, fit) if held is not None else np.empty(0)
    fams = [fit_family(f, j, hj, bootstrap=bootstrap, rng=rng) for f in JUMP_FAMILIES]
    fams = [f for f in fams if f is not None]
    return SwitchFit(e.version, e.to, fams, best_usable(fams), j)


def phi_of(samples, s0: float, reference: float):
    return np.log1p(np.asarray(samples, dtype=float) / s0) / math.log1p(reference / s0)


def fit_s0(samples: np.ndarray, phi: np.ndarray, reference: float) -> float | None:
    """S0 of φ(S) = ln(1+S/S0)/ln(1+Sref/S0) by least squares (None: fewer than two data sizes)."""
    if np.unique(samples).size < 2:
        return None
    grid = np.geomspace(reference / 1000, reference * 1000, 400)
    err = [float(np.sum((phi_of(samples, s0, reference) - phi) ** 2)) for s0 in grid]
    return float(grid[int(np.argmin(err))])


def _fit_data_law(fit: Profile, out: IncrementsFit, l0: float) -> None:
    ref = fit.reference_samples
    out.reference_samples = ref
    S, P = [], []
    for e in fit.versions(None):
        v = out.versions.get(e.version)
        if v is None:
            continue
        A_f, _ = fit_progress(e.losses, l0, B=v.B)
        S.append(e.samples)
        P.append(A_f / v.A)
    S, P = np.array(S), np.array(P)
    for s in np.unique(S):
        out.phi_measured[float(s)] = float(np.mean(P[S == s]))
    out.s0 = fit_s0(S, P, ref)


# --------------------------------------------------------------------------- #
# The fitting side of the law (registered in depl.laws)
# --------------------------------------------------------------------------- #

def dist_spec(f: FamilyFit | None, fallback: np.ndarray | None = None) -> dict:
    """A fitted family as a scenario's {family, params} (no usable fit: a normal of the data's moments)."""
    if f is not None:
        return {"family": f.family, "params": {k: float(v) for k, v in f.params.items()}}
    m, v = (float(np.mean(fallback)), float(np.var(fallback))) if fallback is not None else (0.0, 1e-4)
    return {"family": "norm", "params": {"loc": m, "scale": math.sqrt(max(v, 1e-8))}}


class IncrementsFitter(LawFitter):
    name = "increments"
    fields = ("progress", "noise")

    def fit(self, fit: Profile, held: Profile, l0: float, *, bootstrap: int, rng, earlier=None) -> IncrementsFit:
        return fit_increments(fit, held, l0, bootstrap=bootstrap, rng=rng)

    def refit(self, prof: Profile, first: IncrementsFit, l0: float, earlier=None) -> IncrementsFit:
        return fit_increments(prof, Profile(prof.scenario, []), l0)

    def write(self, data: dict, inc: IncrementsFit, chosen: bool) -> None:
        """The versions profiled (the others have no law to plan with) and every switch, from this fit."""
        models = []
        for m in data["models"]:
            v = inc.versions.get(m["name"])
            if v is None:
                continue
            entry = dict(m)
            entry["progress"] = {"A": float(v.A), "B": float(v.B)}
            entry["noise"] = dist_spec(v.chosen)
            models.append(entry)
        data["models"] = models
        data["switches"] = [{"from": a, "to": b, "jump": dist_spec(sw.chosen, sw.jumps)}
                            for (a, b), sw in inc.switches.items()]
        if chosen:
            write_data_law(data, inc.s0, inc.reference_samples)

    def describe(self, inc: IncrementsFit) -> list[str]:
        L = []
        for v in inc.versions.values():
            L.append(f"{v.name}: A = {v.A:.4g}, B = {v.B:.4g}; x ≤ 0 in {100 * v.negative_share:.0f}% of epochs; "
                     f"Spearman(x, epoch) = {v.spearman_epoch:+.2f}; lag-1 autocorrelation of x = {v.lag1:+.2f}")
            for f in v.families:
                params = ", ".join(f"{k}={val:.3g}" for k, val in f.params.items())
                mark = " ← used" if v.chosen is f else ""
                usable = "" if f.usable else " (infinite mean/variance: unusable)"
                L.append(f"    X ~ {f.family:<8} {params:<42} KS p naive {pvalue_text(f.p_naive):>7}, bootstrap {pvalue_text(f.p_boot):>7}; "
                         f"held-out loglik {f.heldout:8.3f} ({f.impossible}/{f.heldout_n} impossible){usable}{mark}")
        for sw in inc.switches.values():
            L.append(f"switch {sw.a} → {sw.b}: {sw.jumps.size} jumps, mean {sw.jumps.mean():+.3f}, sd {sw.jumps.std():.3f}")
            for f in sw.families:
                params = ", ".join(f"{k}={val:.3g}" for k, val in f.params.items())
                mark = " ← used" if sw.chosen is f else ""
                L.append(f"    jump ~ {f.family:<8} {params:<42} KS p naive {pvalue_text(f.p_naive):>7}, bootstrap {pvalue_text(f.p_boot):>7}; "
                         f"held-out loglik {f.heldout:8.3f}{mark}")
        if inc.s0 is not None:
            L.append(f"data law: S0 = {inc.s0:.4g} (A at each data size / A at {inc.reference_samples:g}: "
                     + ", ".join(f"{s:g}: {v:.3f}" for s, v in sorted(inc.phi_measured.items())) + ")")
        return L


def write_data_law(data: dict, s0: float | None, reference: float | None) -> None:
    if s0 is not None:
        data["data_law"] = {"s0": float(s0), "reference_samples": float(reference)}
    else:
        data.pop("data_law", None)


FITTER = IncrementsFitter()
provide("increments", fit=FITTER)
