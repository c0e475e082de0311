"""The measured-level model fitted from profiles (depl.loss.level).

Per version: the median curve μ(t) = f + (ℓ0−f)·D((t/scale)^shape), power
law D(u) = 1/(1+u) or exponential D(u) = e^(−u), chosen by least squares on
the mean log-loss of the fitting seeds; t = φ(S)·k, with S0 of the data law
shared by all versions and chosen (grid search) by the same least squares
over every data fraction.  The log-sd σ(k) = σ0 + σ1·ln(ℓ0/μ(k)) by
non-negative least squares on the per-epoch log-sd across seeds; the
per-seed share of the log-variance by a one-way ANOVA of the standardised
residuals (second half of the epochs).  A switch a → b: the mean log-ratio of
the measured loss to b's curve after the switch, log(1 + δ·r^j), fitted for
δ, r; the extra log-variance τ² from the first epoch after the switch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize

from ..loss.level import decay, elasticity, log_sd, median_curve, time_at_level
from ..scenario import LOG_SD_MAX, LevelLaw
from .increments import phi_of, write_data_law
from ..laws import provide
from .laws import LawFit, LawFitter
from .runs import ProfiledExperiment, Profile

CURVES = ("power", "exp")


@dataclass
class Curve:
    kind: str
    floor: float
    scale: float
    shape: float
    sse: float
    floor_exponent: float = 0.0

    def __call__(self, t, l0: float, phi=1.0):
        u = (np.maximum(np.asarray(t, dtype=float), 0.0) / self.scale) ** self.shape
        f = np.minimum(self.floor * np.asarray(phi, dtype=float) ** (-self.floor_exponent), l0)
        return f + (l0 - f) * decay(self.kind, u)


@dataclass
class LevelVersionFit:
    name: str
    curve: Curve
    alternatives: dict[str, float]   # curve kind → SSE of the log mean
    sigma0: float
    sigma1: float
    sigma2: float
    seed_share: float

    def law(self):
        c = self.curve
        return LevelLaw(curve=c.kind, floor=c.floor, floor_exponent=c.floor_exponent, scale=c.scale, shape=c.shape,
                        sigma0=self.sigma0, sigma1=self.sigma1, sigma2=self.sigma2, seed_share=self.seed_share)

    def sigma(self, t, l0: float, phi: float = 1.0):
        law = self.law()
        return log_sd(law, l0, median_curve(law, l0, t, phi), elasticity(law, l0, t, phi))


@dataclass
class LevelSwitchFit:
    a: str
    b: str
    offset: float
    recovery: float
    sigma: float
    log_ratio: np.ndarray            # mean log(measured / b's curve), epochs after the switch


@dataclass
class LevelFit(LawFit[LevelVersionFit, LevelSwitchFit]):
    reference_samples: float = 1.0

    def phi(self, samples: float) -> float:
        return 1.0 if self.s0 is None else float(phi_of(samples, self.s0, self.reference_samples))


def fit_curve(kind: str, t: np.ndarray, phi: np.ndarray, logy: np.ndarray, l0: float, gamma: float = 0.0) -> Curve:
    """Least squares of log μ(t) against the mean log-loss (several starts); floor·φ^(−γ) with γ given."""
    fmax = float(np.min(np.exp(logy) * phi**gamma))

    def unpack(p):
        return fmax / (1 + math.exp(-p[0])), math.exp(p[1]), math.exp(p[2])

    scaled = phi ** (-gamma)
    cap = l0 * (1 - 1e-9)

    def parts(p):
        f, sc, sh = unpack(p)
        raw = f * scaled
        fl = np.minimum(raw, cap)
        u = (t / sc) ** sh
        D = decay(kind, u)
        return f, sh, raw, fl, u, D, fl + (l0 - fl) * D

    def resid(p):
        return np.log(parts(p)[-1]) - logy

    def jac(p):
        # ∂/∂(logit f, ln scale, ln shape) of ln μ, by hand: scipy's finite differences took a third of `depl fit`
        f, sh, raw, fl, u, D, mu = parts(p)
        dD = -1.0 / (1.0 + u) ** 2 if kind == "power" else -D        # dD/du
        s = 1.0 / (1.0 + math.exp(-p[0]))
        dfl = np.where(raw < cap, scaled * f * (1.0 - s), 0.0)      # the floor's cap has no slope
        du_dlnsc = -sh * u
        du_dlnsh = sh * u * np.log(t / math.exp(p[1]))
        g = (l0 - fl) * dD / mu
        return np.column_stack([dfl * (1.0 - D) / mu, g * du_dlnsc, g * du_dlnsh])

    best = None
    for f0 in (-1.0, 1.5):
        for sc0 in (math.log(max(t.max(), 1.0) / 3),):
            for sh0 in (0.0, 0.7):
                try:
                    r = optimize.least_squares(resid, [f0, sc0, sh0], jac=jac, bounds=([-30, -5, -3], [30, 12, 2.5]))
                except ValueError:
                    continue
                if best is None or r.cost < best.cost:
                    best = r
    f, sc, sh = unpack(best.x)
    return Curve(kind, f, sc, sh, float(2 * best.cost), gamma)


def _stack(exps: list[ProfiledExperiment], phi) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t = np.concatenate([phi(e.samples) * np.arange(1, e.epochs + 1) for e in exps])
    p = np.concatenate([np.full(e.epochs, phi(e.samples)) for e in exps])
    y = np.concatenate([np.log(e.losses).mean(axis=0) for e in exps])
    return t, p, y


GAMMAS = (0.0, 0.3, 0.6, 1.0, 1.5)


def fit_level(fit: Profile, l0: float, data_law: tuple[float | None, float] | None = None) -> LevelFit:
    """Fit every version and switch; `data_law` = (S0, γ) fixes the data law instead of searching it."""
    out = LevelFit(l0, reference_samples=fit.reference_samples)
    names = sorted({e.version for e in fit.versions(1.0)})
    by_version = {n: [e for e in fit.versions(None) if e.version == n] for n in names}
    sizes = np.unique([e.samples for e in fit.versions(None)])
    grid: list[tuple[float | None, float]] = [(None, 0.0)]
    if data_law is not None:
        grid = [data_law]
    elif sizes.size >= 2:
        grid = [(float(s0), g) for s0 in np.geomspace(out.reference_samples / 30, out.reference_samples * 100, 11)
                for g in GAMMAS]
    best = None
    for s0, gamma in grid:
        def phi(S, s0=s0):
            return 1.0 if s0 is None else float(phi_of(S, s0, out.reference_samples))
        curves = {}
        for n in names:
            t, p, y = _stack(by_version[n], phi)
            curves[n] = {k: fit_curve(k, t, p, y, l0, gamma) for k in CURVES}
        total = sum(min(c.sse for c in cs.values()) for cs in curves.values())
        if best is None or total < best[0]:
            best = (total, s0, curves)
    _, out.s0, curves = best
    for n in names:
        chosen = min(curves[n].values(), key=lambda c: c.sse)
        s0_, s1_, s2_, rho = _fit_noise(by_version[n], chosen, out, l0)
        out.versions[n] = LevelVersionFit(n, chosen, {k: c.sse for k, c in curves[n].items()}, s0_, s1_, s2_, rho)
    for e in fit.switches():
        if e.version in out.versions and e.to in out.versions:
            out.switches[(e.version, e.to)] = _fit_switch(e, out, l0)
    return out


def _fit_noise(exps: list[ProfiledExperiment], curve: Curve, fit: LevelFit, l0: float) -> tuple[float, float, float, float]:
    """σ0, σ1, σ2 by non-negative least squares on the per-epoch log-sd; the per-seed share."""
    law = LevelLaw(curve=curve.kind, floor=curve.floor, floor_exponent=curve.floor_exponent, scale=curve.scale,
                   shape=curve.shape)
    X, y = [], []
    for e in exps:
        ph = fit.phi(e.samples)
        t = ph * np.arange(1, e.epochs + 1)
        mu = median_curve(law, l0, t, ph)
        X.append(np.column_stack([np.ones_like(mu), np.log(l0 / mu), elasticity(law, l0, t, ph)]))
        y.append(np.log(e.losses).std(axis=0, ddof=1))
    # bounded like the scenario's σ: an epoch range where the elasticity is ~0 leaves σ2 unidentified,
    # and plain NNLS then returns 1e15
    coef = optimize.lsq_linear(np.concatenate(X), np.concatenate(y), bounds=(0.0, LOG_SD_MAX)).x
    s0, s1, s2 = (float(c) for c in coef)
    # per-seed effect: one-way ANOVA of the standardised residuals, second half of the epochs
    rhos, weights = [], []
    for e in exps:
        ph = fit.phi(e.samples)
        t = ph * np.arange(1, e.epochs + 1)
        mu = median_curve(law, l0, t, ph)
        sd = np.maximum(s0 + s1 * np.log(l0 / mu) + s2 * elasticity(law, l0, t, ph), 1e-9)
        z = (np.log(e.losses) - np.log(e.losses).mean(axis=0)) / sd
        z = z[:, e.epochs // 2:]
        n, m = z.shape
        if n < 3 or m < 2:
            continue
        msb = m * np.var(z.mean(axis=1), ddof=1)
        msw = float(np.sum((z - z.mean(axis=1, keepdims=True)) ** 2) / (n * (m - 1)))
        rhos.append((msb - msw) / (msb + (m - 1) * msw))
        weights.append(n)
    rho = float(np.clip(np.average(rhos, weights=weights), 0.0, 1.0)) if rhos else 0.0
    return s0, s1, s2, rho


def _fit_switch(e: ProfiledExperiment, fit: LevelFit, l0: float, memory: bool = False) -> LevelSwitchFit:
    """δ, r, τ of a switch against b's curve at the global epoch, or (memory) resumed at the level reached."""
    vb = fit.versions[e.to]
    k1, E = e.switch_after, e.epochs
    ph = fit.phi(e.samples)
    k = np.arange(k1 + 1, E + 1)
    t = ph * k
    if memory:  # b resumes where its curve is at a's median after k1 epochs
        t = time_at_level(vb.law(), l0, float(fit.versions[e.version].curve(ph * k1, l0, ph)), ph) + ph * (k - k1)
    mu_b = vb.curve(t, l0, ph)
    R = np.log(e.losses[:, k1:]) - np.log(mu_b)
    m = R.mean(axis=0)
    j = np.arange(m.size)

    def resid(p):
        d, r = math.exp(p[0]) - 1.0, 1.0 / (1.0 + math.exp(-p[1]))
        return np.log1p(d * r**j) - m

    best = None
    for p0 in ([0.0, 0.0], [0.5, -2.0], [-0.2, 3.0], [1.0, 1.0]):
        r = optimize.least_squares(resid, p0, bounds=([-8, -12], [4, 12]))
        if best is None or r.cost < best.cost:
            best = r
    d, r = math.exp(best.x[0]) - 1.0, 1.0 / (1.0 + math.exp(-best.x[1]))
    extra = float(np.var(R[:, 0], ddof=1) - vb.sigma(t[0], l0, ph) ** 2)
    return LevelSwitchFit(e.version, e.to, float(max(d, -0.99)), float(r), min(math.sqrt(max(extra, 0.0)), LOG_SD_MAX), m)


# --------------------------------------------------------------------------- #
# The fitting side of the law (registered in depl.laws)
# --------------------------------------------------------------------------- #

class LevelFitter(LawFitter):
    name = "level"
    fields = ("level",)
    memory = False

    def fit(self, fit: Profile, held: Profile, l0: float, *, bootstrap: int, rng, earlier=None) -> LevelFit:
        return fit_level(fit, l0)

    def refit(self, prof: Profile, first: LevelFit, l0: float, earlier=None) -> LevelFit:
        gamma = next(iter(first.versions.values())).curve.floor_exponent
        return fit_level(prof, l0, data_law=(first.s0, gamma))

    def write(self, data: dict, lev: LevelFit, chosen: bool) -> None:
        if self.memory and not chosen:
            return  # the level law's tables are the level fit's; its own file gets the memory fit's
        for entry in data["models"]:
            lv = lev.versions.get(entry["name"])
            if lv is not None:
                c = lv.curve
                entry["level"] = {"curve": c.kind, "floor": c.floor, "floor_exponent": c.floor_exponent,
                                  "scale": c.scale, "shape": c.shape, "sigma0": lv.sigma0, "sigma1": lv.sigma1,
                                  "sigma2": lv.sigma2, "seed_share": lv.seed_share}
        for entry in data["switches"]:
            ls = lev.switches.get((entry["from"], entry["to"]))
            if ls is not None:
                entry["level"] = {"offset": ls.offset, "recovery": ls.recovery, "sigma": ls.sigma}
        if chosen:
            write_data_law(data, lev.s0, lev.reference_samples)

    def describe(self, lev: LevelFit) -> list[str]:
        L = []
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
        return L


class LevelMemoryFitter(LevelFitter):
    """The level law with memory: the level law's versions, its switches refitted against the resumed curve."""

    name = "level-memory"
    memory = True

    def fit(self, fit: Profile, held: Profile, l0: float, *, bootstrap: int, rng, earlier=None) -> LevelFit:
        return self._switches(fit, (earlier or {}).get("level") or fit_level(fit, l0), l0)

    def refit(self, prof: Profile, first: LevelFit, l0: float, earlier=None) -> LevelFit:
        lev = (earlier or {}).get("level") or LevelFitter.refit(self, prof, first, l0)
        return self._switches(prof, lev, l0)

    @staticmethod
    def _switches(prof: Profile, lev: LevelFit, l0: float) -> LevelFit:
        out = LevelFit(lev.initial_loss, dict(lev.versions), {}, lev.s0, lev.reference_samples)
        for e in prof.switches():
            if e.version in out.versions and e.to in out.versions:
                out.switches[(e.version, e.to)] = _fit_switch(e, out, l0, memory=True)
        return out

    def describe(self, lev: LevelFit) -> list[str]:
        return [f"switch {sw.a} → {sw.b}: {sw.b} resumes its curve at the level reached; offset {sw.offset:+.3f}, "
                f"recovery {sw.recovery:.2f}/epoch, extra log-sd {sw.sigma:.3f} (versions: the level law's)"
                for sw in lev.switches.values()]


FITTER = LevelFitter()
MEMORY_FITTER = LevelMemoryFitter()
provide("level", fit=FITTER)
provide("level-memory", fit=MEMORY_FITTER)
