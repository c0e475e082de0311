"""The measured-level loss model: a median curve times log-normal noise.

Measured on real training (docs/fitting.md), the loss does not move by
independent increments: it fluctuates around a curve that decays to a floor.
This model describes the loss *level* after every epoch:

    ℓ(k) = μ(k)·exp(σ(k)·Z_k),   Z_k = √ρ·U + √(1−ρ)·E_k,   U, E_k ~ N(0, 1)

with μ the median curve of the version trained at epoch k, evaluated at the
effective epoch φ·k (the data law stretches time, and less data raises the
floor: floor·φ^(−γ)), σ(k) = σ0 + σ1·ln(ℓ(0)/μ(k)) + σ2·|d ln μ/d ln t|
(the spread grows as the loss falls, and where the curve is steep: seeds
leave a plateau at different times), and U a per-seed effect (share ρ of the
log-variance).  A switch a → b between epochs k1 and k1+1 puts the median at
(1+δ)·μ_b, the offset decaying by a factor r per epoch, and adds log-variance
τ²·r^(2j) j epochs after it.

With memory (`loss_model = "level-memory"`, LevelMemoryModel), a switch
a → b does not jump to b's curve at the global epoch: b continues from the
level the run has reached, from the time t0 at which its own curve is at
that level (μ_b(t0) = μ(k1)), so that the median after the switch is
(1 + δ·r^j)·μ_b(t0 + φ·(j+1)) — what was trained before a switch matters (a
run that trained the big version long switches from a lower level).  The
noise is b's at that point of its curve.  Fitted like the level law, the
switch's δ, r, τ against that baseline (depl.fit.level).

Whatever the schedule, ℓ(K) is exactly log-normal: `distribution` is the
grid law of one term μ(K)·LogNormal(σ(K)), certified like any other (depl.dist).

The planners' expanded graph adds cumulants along a schedule.  Here they
*telescope*: epoch k of version m contributes κ_i(ℓ_m(k)) − κ_i(ℓ_m(k−1)), so
along a one-version schedule they sum to the exact cumulants of ℓ(K); a switch
contributes the mean (over the epochs) of κ_i(ℓ_b(k)) − κ_i(ℓ_a(k)), an
approximation used only to rank schedules — every plan is certified with the
exact `distribution`.

Given a run's state (depl.state.RunState: k0 epochs of the versions
`start.past`, losses ℓ(1..k0) observed), the law conditions through the
per-seed effect U, the only thing the epochs of one seed share.  Along the
whole schedule (past, then next), ln ℓ(j) = ln μ(j) + a_j·U + b_j·E_j with
a_j = √ρ·σ(j) (the shared part) and b_j² = σ_tot(j)² − a_j² (the epoch's own
part, a switch's extra variance included).  With U ~ N(0, 1) a priori, the
residuals r_j = ln ℓ(j) − ln μ(j) give the Gaussian posterior

    U | r ~ N(m, v),   1/v = 1 + Σ a_j²/b_j²,   m = v·Σ a_j·r_j/b_j²,

and ℓ(k0+K) is again log-normal: median μ(k0+K)·e^(a·m), log-sd
√(a²·v + b²) at the last epoch.  Assumptions: the observed losses are draws of
this law (the same test split, no drift of the law during the run), the
epochs' own parts E_j are independent (so only U carries the past), and the
data factor φ is the same before and after.  A state with no observed loss
gives the unconditional law of ℓ(k0+K) along the whole schedule.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..dist import Term
from ..families import Frozen
from ..scenario import LevelLaw, Scenario
from ..state import RunState
from .base import LossModel, started


def decay(curve: str, u):
    """The fraction of (ℓ0 − floor) left at scaled time u = t/scale (shape applied by the caller)."""
    u = np.asarray(u, dtype=float)
    return 1.0 / (1.0 + u) if curve == "power" else np.exp(-u)


def median_curve(law: LevelLaw, l0: float, t, phi: float = 1.0):
    """μ(t) = f + (ℓ0 − f)·D((t/scale)^shape), f = floor·φ^(−floor_exponent) (less data, higher floor)."""
    u = (np.maximum(np.asarray(t, dtype=float), 0.0) / law.scale) ** law.shape
    f = min(law.floor * phi ** (-law.floor_exponent), l0)
    return f + (l0 - f) * decay(law.curve, u)


def elasticity(law: LevelLaw, l0: float, t, phi: float = 1.0):
    """|d ln μ / d ln t| of the median curve: how fast the loss falls, per unit of log-time."""
    t = np.maximum(np.asarray(t, dtype=float), 0.0)
    u = (t / law.scale) ** law.shape
    f = min(law.floor * phi ** (-law.floor_exponent), l0)
    slope = 1.0 / (1.0 + u) ** 2 if law.curve == "power" else np.exp(-u)   # −D'(u)
    return (l0 - f) * slope * law.shape * u / median_curve(law, l0, t, phi)


def log_sd(law: LevelLaw, l0: float, mu, el=0.0):
    """σ = σ0 + σ1·ln(ℓ0/μ) + σ2·|d ln μ/d ln t|, never below 0.

    The last term is the spread of seeds leaving a plateau at different
    times: a random shift of log-time moves ln μ by its slope."""
    return np.maximum(law.sigma0 + law.sigma1 * np.log(l0 / np.asarray(mu, dtype=float)) + law.sigma2 * np.asarray(el), 0.0)


def lognormal_cumulants(mu, sigma) -> np.ndarray:
    """κ1, κ2, κ3 of μ·exp(σZ) (last axis)."""
    mu, s2 = np.asarray(mu, dtype=float), np.asarray(sigma, dtype=float) ** 2
    m1, m2, m3 = mu * np.exp(s2 / 2), mu**2 * np.exp(2 * s2), mu**3 * np.exp(4.5 * s2)
    return np.stack([m1, m2 - m1**2, m3 - 3 * m2 * m1 + 2 * m1**3], axis=-1)


def time_at_level(law: LevelLaw, l0: float, level: float, phi: float = 1.0) -> float:
    """t0 with μ(t0) = level on the version's median curve: 0 at or above ℓ(0); at or below the floor, the
    time the curve is within 0.1% of it (a version cannot go below its floor)."""
    f = min(law.floor * phi ** (-law.floor_exponent), l0)
    if level >= l0 or l0 <= f:
        return 0.0
    frac = max((level - f) / (l0 - f), 1e-3)
    u = 1.0 / frac - 1.0 if law.curve == "power" else -np.log(frac)
    return float(law.scale * u ** (1.0 / law.shape))


class LevelBase(LossModel):
    """The level law's machinery; the two laws differ in where a version's curve resumes after a switch."""

    memory = False
    """True: a switch resumes the new version's curve at the median reached, which already holds what the
    earlier switches did — their offsets stop applying."""

    def clock_shift(self, m: str, reached: float, k: int, phi: float, shift: float) -> float:
        """The shift of the time t = φ·k + shift on version m's curve, when m starts at epoch k
        after the run has reached median `reached`.  The level law: none (the global epoch)."""
        return shift

    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        self.initial_loss = scenario.initial_loss
        self.model_names = [m.name for m in scenario.models]
        self._law = {m.name: m.level for m in scenario.models}
        self._switch = {k: s.level for k, s in scenario.switch_map.items()}
        self._ref_epochs = scenario.max_epochs or 20
        self._cache: dict = {}

    # -- the law of ℓ(k) along a schedule ----------------------------------- #
    def path(self, schedule: Sequence[str], phi: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(median, total log-sd, log-sd of the per-seed effect) of ℓ(k), k = 0..K."""
        K, l0 = len(schedule), self.initial_loss
        mu, var, shared = np.full(K + 1, l0), np.zeros(K + 1), np.zeros(K + 1)
        switches: list[tuple[int, object]] = []  # (first epoch of the new version, LevelSwitch)
        shift = 0.0
        for k in range(1, K + 1):
            m = schedule[k - 1]
            if k > 1 and schedule[k - 2] != m:
                if self.memory:
                    switches.clear()
                switches.append((k, self._switch[(schedule[k - 2], m)]))
                shift = self.clock_shift(m, float(mu[k - 1]), k, phi, shift)
            law = self._law[m]
            t = phi * k + shift
            base = float(median_curve(law, l0, t, phi))
            s = float(log_sd(law, l0, base, elasticity(law, l0, t, phi)))
            factor, extra = 1.0, 0.0
            for k1, sw in switches:
                decay_j = sw.recovery ** (k - k1)
                factor *= 1.0 + sw.offset * decay_j
                extra += (sw.sigma * decay_j) ** 2
            mu[k] = base * factor
            var[k] = s**2 + extra
            shared[k] = law.seed_share * s**2
        return mu, np.sqrt(var), np.sqrt(shared)

    def final(self, schedule: Sequence[str], phi: float = 1.0, *, start: RunState | None = None) -> tuple[float, float]:
        """(median, log-sd) of the log-normal ℓ(K) (given `start`: of ℓ(start.epoch + K) given the run's state)."""
        if not started(start):
            mu, sd, _ = self.path(schedule, phi)
            return float(mu[-1]), float(sd[-1])
        mu, sd, shared = self.path(start.past + tuple(schedule), phi)
        m, v = self.seed_posterior(mu, sd, shared, start)
        if not schedule and start.losses:
            return float(start.losses[-1]), 0.0   # ℓ(k0) is observed
        own2 = max(sd[-1] ** 2 - shared[-1] ** 2, 0.0)
        return float(mu[-1] * np.exp(shared[-1] * m)), float(np.sqrt(shared[-1] ** 2 * v + own2))

    def seed_posterior(self, mu, sd, shared, start: RunState) -> tuple[float, float]:
        """Mean and variance of the per-seed effect U given the losses observed (prior N(0, 1))."""
        if not start.losses:
            return 0.0, 1.0
        j = np.arange(1, start.epoch + 1)
        r = np.log(np.asarray(start.losses, dtype=float)) - np.log(mu[j])
        a = shared[j]
        # an epoch with no own noise pins U; 1e-18 keeps it finite
        b2 = np.maximum(sd[j] ** 2 - a**2, 1e-18)
        v = 1.0 / (1.0 + float(np.sum(a**2 / b2)))
        return v * float(np.sum(a * r / b2)), v

    def terms(self, schedule: Sequence[str], phi: float = 1.0, *, start: RunState | None = None) -> list[Term]:
        return self.law_parts(schedule, phi, start=start)[0]

    def law_parts(self, schedule: Sequence[str], phi: float = 1.0, *, start: RunState | None = None):
        mu, sd = self.final(schedule, phi, start=start)
        exact = Frozen("lognorm", (max(sd, 1e-6),), 0.0, mu)
        if sd <= 0:
            return [Term(0.0, None, mu)], exact
        return [Term(mu, self._lognorm(sd))], exact

    def _lognorm(self, s: float):
        # one frozen object per σ so that depl.dist's lattice cache (keyed by the object) is reused
        key = round(s, 12)
        if key not in self._cache:
            if len(self._cache) > 20_000:
                self._cache.clear()
            self._cache[key] = Frozen("lognorm", (s,))
        return self._cache[key]

    def simulate(self, schedule: Sequence[str], phi: float, runs: int, rng: np.random.Generator, *,
                 start: RunState | None = None) -> np.ndarray:
        k0 = start.epoch if started(start) else 0
        full = start.past + tuple(schedule) if k0 else schedule
        mu, sd, shared = self.path(full, phi)
        own = np.sqrt(np.maximum(sd**2 - shared**2, 0.0))
        m, v = self.seed_posterior(mu, sd, shared, start) if k0 else (0.0, 1.0)
        u = m + np.sqrt(v) * rng.standard_normal((runs, 1)) if k0 else rng.standard_normal((runs, 1))
        out = rng.standard_normal((runs, mu.size))
        # mu·exp(shared·u + own·e) in place: the same numbers, no temporaries of runs × epochs
        out *= own
        out += shared * u
        np.exp(out, out=out)
        out *= mu
        out[:, 0] = self.initial_loss
        if k0:
            out = out[:, k0:]
            if start.losses:
                out[:, 0] = start.losses[-1]
        return out

    def mean_path(self, schedule: Sequence[str], phi: float = 1.0) -> np.ndarray:
        mu, sd, _ = self.path(schedule, phi)
        return mu * np.exp(sd**2 / 2)

    # -- telescoping cumulants for the expanded graph ------------------------ #
    def _level_cumulants(self, m: str, K: int, phi: float) -> np.ndarray:
        """κ1..κ3 of ℓ(k), k = 0..K, along the one-version schedule of m."""
        law = self._law[m]
        mu = median_curve(law, self.initial_loss, phi * np.arange(K + 1), phi)
        mu[0] = self.initial_loss
        sd = log_sd(law, self.initial_loss, mu, elasticity(law, self.initial_loss, phi * np.arange(K + 1), phi))
        sd[0] = 0.0  # ℓ(0) is given
        return lognormal_cumulants(mu, sd)

    def epoch_cumulants(self, K: int, phi: float = 1.0) -> np.ndarray:
        return np.stack([np.diff(self._level_cumulants(m, K, phi), axis=0) for m in self.model_names])

    def switch_cumulants(self, a: str, b: str, phi: float = 1.0) -> np.ndarray:
        K = self._ref_epochs
        ka, kb = self._level_cumulants(a, K, phi)[1:], self._level_cumulants(b, K, phi)[1:]
        sw = self._switch[(a, b)]
        # the offset's effect on ℓ(K), averaged over how long before K the switch comes
        lasting = np.mean(sw.recovery ** np.arange(K))
        diff = kb - ka
        diff[:, 0] += sw.offset * lasting * kb[:, 0]
        return diff.mean(axis=0)

    def can_switch(self, a: str, b: str) -> bool:
        return a == b or (a, b) in self._switch

    def progress_is_monotone(self) -> bool:
        return False


class LevelModel(LevelBase):
    """The level law: a version's curve at the global epoch (a switch forgets what was trained before)."""

    def median_floor(self, phi: float, K: int, switches: np.ndarray) -> np.ndarray | None:
        """ℓ(k) = μ·exp(σZ): its median is the last version's median curve times (1 + δ·r^j) per switch, each
        factor at least 1 + min(δ, 0) — so at least the lowest curve times (1 + min δ)^switches."""
        low = min((sw.offset for sw in self._switch.values()), default=0.0)
        if low <= -1:
            return None
        k = np.arange(1, K + 1)
        return np.min([median_curve(self._law[m], self.initial_loss, phi * k, phi) for m in self.model_names],
                      axis=0) * (1 + min(low, 0.0)) ** switches

    def memoryless_switches(self) -> dict | None:
        return {pair: (sw, self._law[pair[1]]) for pair, sw in self._switch.items()}


class LevelMemoryModel(LevelBase):
    """The level law with memory: after a switch the new version resumes its curve at the level reached."""

    memory = True

    def clock_shift(self, m: str, reached: float, k: int, phi: float, shift: float) -> float:
        return time_at_level(self._law[m], self.initial_loss, reached, phi) - phi * (k - 1)
