"""A loss law recalibrated on held-out runs: split conformal on PIT scores, around any registered law.

`depl fit` keeps n runs apart that no law is fitted on (the calibration
seeds) and scores each under the fitted law F_e of its experiment e (the law
of ℓ(E) for the experiment's schedule): the probability integral transform
u_i = F_e(ℓ_i(E)).  Were the law right, the u_i would be uniform; they are
what the law gets wrong, whatever the law.  Sorted, u_(1) ≤ … ≤ u_(n), they
recalibrate the law's levels:

    q̃_ω = F⁻¹(u_(j)),   j = ⌈(n+1)·ω⌉,   and q̃_ω = +∞ when j > n.

A calibration written since keeps such scores per epoch: for each epoch k,
the PIT u_i(k) = F_e,k(ℓ_i(k)) of every held-out run under the law of its
schedule's first k epochs (one per run and k).  A plan of K epochs is then
recalibrated by the epoch-K scores, so that its new run is exchangeable with
runs scored at the same epoch, not at the profiled last one (a run scored at
epoch 20 says little about where the law errs at epoch 11).

Guarantee (split conformal, Vovk et al. 2005; Lei et al. 2018): if a new
run's score F(ℓ(K)) and the n calibration scores are exchangeable — seeds
drawn alike, a plan's run like a calibration run — then
P(F(ℓ(K)) ≤ u_(j)) ≥ ω, i.e. P(ℓ(K) ≤ q̃_ω) ≥ ω, for any n and any law F,
however misspecified — for each K fixed in advance.  A planner that picks
K among many after seeing every epoch's level selects among guarantees; see
docs/fitting.md ("Calibration at the plan's length").  The price is the finite sample: ω is reachable only
with n ≥ ⌈ω/(1−ω)⌉ scores (9 for ω = 0.9, 19 for 0.95), and below that the
law certifies nothing (its quantile is +∞) instead of certifying wrongly.

The recalibrated law G∘F has the cdf  #{u_i ≤ F(x)}/(n+1)  (a step in the
level: the conformal rank; mass 1/(n+1) beyond every level) — `cdf`, `ppf`,
`quantile_bounds` (the base law's certified bracket at level u_(j)) answer
it.  Its `pdf`, `rvs`, `mean` and `var`, and the trajectories of `simulate`,
are those of the continuous recalibration through the points
(u_(i), i/(n+1)) — the same law without the mass at +∞ (no finite mean has
it).  The planners rank schedules with the base law's cumulants, bound each
length K at its calibrated level (depl.planners.common.Context.levels), and
certify with `distribution`, which is the calibrated one.

Pooled over experiments, the scores certify a run of *some* experiment, as
the calibration mix draws them, not a run of the plan.  A calibration that
keeps each experiment's own scores (`[[calibration.experiments]]`) certifies
a plan by the runs of its own kind (`CalibratedModel.own_groups`): the
experiments whose first K epochs are the plan's schedule, at its φ — runs
exchangeable with the plan's, so the split-conformal guarantee above holds
with its assumption met; each by its own runs, the worst of them, since a
profile runs every experiment on the same seeds —; failing those, the worst of the experiments that
train the same versions in the same order; failing those, the pooled scores.  Given a run's state, the
same level map is applied to the conditional law (not covered by the
guarantee: the scores are of unconditioned runs).
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import Sequence

import numpy as np

from ..certificate import conformal
from ..certificate import clopper_pearson_lower
from ..scenario import scores_at
from ..state import RunState
from .base import LossModel, segments


def _words(schedule) -> str:
    """A schedule as its runs of one version: `full ×1, pruned-0.5 ×13`."""
    return ", ".join(f"{v} ×{n}" for v, n in segments(schedule))


def _epochs(k: int) -> str:
    return "epoch" if k == 1 else f"{k} epochs"


def _path(schedule) -> tuple[str, ...]:
    """The versions a schedule trains, in order, each once (full, full, pruned → full, pruned)."""
    return tuple(v for v, _ in segments(schedule))


UNRECORDED = "its runs' conditions were not recorded"
DIFFER = "its runs differ from the scenario's conditions"
AS_FITTED = ", or plan `--uncalibrated` (the law as fitted, no certificate)"
"""How a calibration that certifies nothing ends its words (`shortfall`, `unusable`): the other way to plan."""


def _problem(e, scenario) -> str | None:
    """Why calibration experiment `e` cannot certify a plan of `scenario` with a confidence (None: it can)."""
    if e.losses is None:
        return (f"{UNRECORDED}, nor their losses (a calibration table written before they were): recalibrate "
                "with `depl calibrate SCENARIO RUNS`")
    if e.conditions is None:
        return (f"{UNRECORDED} (runs read from training logs, which do not say them): profile calibration runs of "
                "the scenario (`depl profile SCENARIO --first-seed N`), then `depl calibrate SCENARIO RUNS`")
    if scenario is not None:
        differ = e.conditions.mismatches(scenario)
        if differ:
            return f"{DIFFER} — " + "; ".join(m.words() for m in differ)
    return None


class CalibratedDistribution:
    """The base law (a depl.dist.GridDistribution) with its levels recalibrated by sorted PIT scores.

    `own`: groups of scores of calibration experiments like this law's schedule (CalibratedModel.own_groups).
    Each group decides every level it reaches (q ≤ its top level, `conformal.top`); above, the pooled `scores`
    decide, never below the group's highest score; the certified level is the highest of the groups' (so the
    quantile is monotone in q and `cdf` its inverse).  `alpha`: the groups' levels are read at the PAC rank
    (confidence 1 − α, `conformal.pac_rank`) instead of the marginal one.  `refused`: a level from which on
    nothing is certified (the schedule was not certified at the target in the fixed sequence of
    CalibratedModel.certified_schedules); None: no such level."""

    def __init__(self, base, scores: np.ndarray, own: Sequence[np.ndarray] = (), *, alpha: float | None = None,
                 refused: float | None = None):
        self.base, self.scores = base, np.sort(np.asarray(scores, dtype=float))
        self.own = [np.sort(np.asarray(g, dtype=float)) for g in own if len(g)]
        self.alpha = alpha if self.own else None
        self.refused = refused
        knots = self.scores if not self.own else max(self.own, key=len)
        n = knots.size
        # the continuous recalibration: knots (u_(i), i/(n+1)), from (0, 0) to (1, 1) — of the own scores if any
        self._u = np.concatenate([[0.0], knots, [1.0]])
        self._p = np.concatenate([[0.0], np.arange(1, n + 1) / (n + 1), [1.0]])
        self.error_bound = base.error_bound

    def level(self, q):
        """The base law's level that the calibrated q-quantile is taken at (1: beyond the scores)."""
        out = pooled = conformal.level(self.scores, q)
        if self.own:
            levels = [np.where(lv < 1.0, lv, np.maximum(pooled, g[-1])) for g in self.own
                      for lv in [conformal.level(g, q, self.alpha)]]
            out = np.max(levels, axis=0)
        # refused at ω: a schedule no calibration run certifies (with no experiment of its own, nor of its kind,
        # as much as with one that does not pass) is never certified by the pooled scores instead
        return out if self.refused is None else np.where(np.asarray(q) >= self.refused - 1e-12, 1.0, out)

    def _rank(self, u):
        """The calibrated cdf at base level u: the inverse of `level`."""
        out = pooled = conformal.cdf_rank(self.scores, u)
        if self.own:
            ranks = []
            for g in self.own:
                r = conformal.cdf_rank(g, u, self.alpha)
                ranks.append(np.where(r < conformal.top(g.size, self.alpha), r, np.maximum(r, pooled)))
            out = np.min(ranks, axis=0)
        return out if self.refused is None else np.minimum(out, np.nextafter(self.refused, 0.0))

    def quantile(self, q):
        u = self.level(q)
        return np.where(u >= 1.0, np.inf, self.base.quantile(np.minimum(u, 1.0)))

    ppf = quantile

    def quantile_bounds(self, q) -> tuple[float, float]:
        u = float(self.level(q))
        if u >= 1.0:
            return math.inf, math.inf
        return self.base.quantile_bounds(u)

    def cdf(self, x):
        return self._rank(self.base.cdf(x))

    def sf(self, x):
        return 1.0 - self.cdf(x)

    def cdf_bounds(self, x) -> tuple[float, float]:
        lo, hi = self.base.cdf_bounds(x)
        return float(self._rank(lo)), float(self._rank(hi))

    def success_bound(self, x: float, alpha: float) -> tuple[float, int, int]:
        """(L, h, n): the one-sided (1 − α) Clopper–Pearson lower bound of P(ℓ ≤ x) from the n calibration runs that
        decide `cdf_bounds`' lower end, h of which are at or below it — `_rank` with every count (the pooled one
        too) read by Clopper–Pearson instead of as h/(n+1), the point estimate.  Refused: below the refused level."""
        u = self.base.cdf_bounds(x)[0]

        def count(g: np.ndarray) -> tuple[float, int, int]:
            return float(conformal.cdf_rank(g, u, alpha)), int(np.searchsorted(g, u, side="right")), int(g.size)

        out = pooled = count(self.scores)
        if self.own:
            each = [c if c[0] < conformal.top(g.size, alpha) else max(c, pooled, key=lambda t: t[0])
                    for g in self.own for c in [count(g)]]
            out = min(each, key=lambda t: t[0])
        if self.refused is not None and out[0] >= self.refused:
            out = (float(np.nextafter(self.refused, 0.0)), out[1], out[2])
        return out

    # -- the continuous recalibration (density, samples, moments) ----------- #
    def smooth_level(self, p):
        """G⁻¹(p) of the continuous recalibration."""
        return np.interp(p, self._p, self._u)

    def pdf(self, x):
        u = np.clip(self.base.cdf(x), 0.0, 1.0)
        slope = np.diff(self._p) / np.maximum(np.diff(self._u), 1e-12)
        i = np.clip(np.searchsorted(self._u, u, side="right") - 1, 0, slope.size - 1)
        return slope[i] * self.base.pdf(x)

    def logpdf(self, x):
        with np.errstate(divide="ignore"):
            return np.log(self.pdf(x))

    @cached_property
    def _top(self) -> float:
        """The highest level the base law has a finite quantile at (a lattice law's mass stops short of 1 by its
        truncation; runs scored beyond it are at the law's top, not at +∞)."""
        pmf = getattr(self.base, "pmf", None)
        mass = float(np.sum(pmf)) if pmf is not None else 1.0
        return min(1 - 1e-12, mass - 1e-12)

    def rvs(self, size=None, random_state=None):
        rng = np.random.default_rng(random_state)
        return self.base.quantile(np.clip(self.smooth_level(rng.random(size)), 1e-12, self._top))

    def _grid(self):
        p = (np.arange(2000) + 0.5) / 2000
        return self.base.quantile(np.clip(self.smooth_level(p), 1e-12, self._top))

    def mean(self) -> float:
        return float(np.mean(self._grid()))

    def var(self) -> float:
        return float(np.var(self._grid()))

    def std(self) -> float:
        return math.sqrt(self.var())


class CalibratedModel(LossModel):
    """Any loss law, its distribution of ℓ(K) recalibrated by the scenario's [calibration] scores: by the scores
    of epoch K when the calibration has them (`epoch_scores[K-1]`; past the scored epochs, the last scored
    epoch's), else by the last-epoch `scores` at every K."""

    def __init__(self, base: LossModel, scores: Sequence[float], method: str = "conformal-pit",
                 epoch_scores: Sequence[Sequence[float]] | None = None, experiments: Sequence | None = None, *,
                 alpha: float | None = None, target: tuple[float, float] | None = None, scenario=None):
        """`alpha`: the runs of a schedule's own kind certify it with confidence 1 − α (None: the marginal
        split-conformal rank); `target`: (ℓmax, ω) — with `alpha`, a schedule is certified at ω only if it is
        among `certified_schedules`, the fixed sequence at ℓmax that makes the certificate hold for the plan a
        planner picks among them; `scenario`: the scenario planned — an experiment whose runs' conditions differ
        from its (`depl.scenario.Conditions`) certifies nothing of it."""
        self.alpha, self.target, self.scenario = alpha, target, scenario
        self.base = base
        self.scores = np.sort(np.asarray(scores, dtype=float))
        self.epoch_scores = [np.sort(np.asarray(r, dtype=float)) for r in epoch_scores] if epoch_scores else None
        self.method = method
        # why each calibration experiment cannot certify a plan of `scenario` (None: it can): its runs' conditions
        # differ from the scenario's, or (a table written before they were) were not recorded, nor its losses
        problems = [_problem(e, scenario) for e in experiments or ()]
        # the experiments whose runs were of other conditions certify nothing here; the others, as before
        kept = [(e, why) for e, why in zip(experiments or (), problems) if why is None or why.startswith(UNRECORDED)]
        # (schedule, φ, sorted epoch rows) of each calibration experiment (depl.scenario.CalibrationExperiment)
        self.experiments = [(e.schedule, float(e.phi), [np.sort(np.asarray(r, dtype=float)) for r in e.epoch_scores])
                            for e, _ in kept]
        self.records = [e for e, _ in kept]
        self.problems = [why for _, why in kept]
        self.refused_experiments = [(e.label, why) for e, why in zip(experiments or (), problems)
                                    if why is not None and not why.startswith(UNRECORDED)]
        # each experiment's runs' losses, (seeds, epochs), +inf where a run stopped or diverged; None: not recorded
        self.losses = [None if e.losses is None else np.asarray(e.losses, dtype=float) for e, _ in kept]
        self.initial_loss = base.initial_loss
        self.model_names = base.model_names

    def scores_at(self, epoch: int) -> np.ndarray:
        """The sorted scores that calibrate ℓ(epoch)."""
        return scores_at(self.scores, self.epoch_scores, epoch)

    def scored_epoch(self, epoch: int) -> int | None:
        """The epoch whose scores calibrate ℓ(epoch) (`scores_at`): `epoch` itself, or the last scored epoch when
        the calibration runs stopped short of it; None without per-epoch scores (the profiled runs' last)."""
        if not self.epoch_scores:
            return None
        return min(max(int(epoch), 1), len(self.epoch_scores))

    def pooled_scores_label(self, epoch: int) -> str:
        """Which pooled scores calibrate ℓ(epoch), in words: the epoch named is the one actually read."""
        used = self.scored_epoch(epoch)
        if used is None:
            return f"the {self.scores_at(epoch).size} pooled calibration runs' last-epoch scores"
        if used == epoch:
            return f"the {self.scores_at(epoch).size} pooled calibration runs' epoch-{epoch} scores"
        return (f"the {self.scores_at(epoch).size} pooled calibration runs' epoch-{used} scores (they were scored "
                f"to epoch {used} only; K = {epoch})")

    def own_groups(self, schedule, phi: float = 1.0) -> list[np.ndarray]:
        """The calibration experiments' epoch-K scores (K = len(schedule)) that certify `schedule` at data factor φ.

        The experiments whose first K epochs are `schedule`, at the same φ, are runs exchangeable with a run of
        it: each is a group (not pooled: a profile runs every experiment on the same seeds, so full ×1 of the
        full run and of each switch experiment is one run per seed, not one per experiment — pooled, they would
        count each seed several times and certify below the level its runs reach; each alone certifies, and
        the worst of them is used).  Without such an experiment, each experiment at the same φ
        that trains the same versions in the same order (another switch epoch, another length), for at least
        K epochs, is a group of its own: a schedule between profiled ones is held to the worst of them.
        None of either: no group (the pooled calibration alone)."""
        same, kin = self._matches(schedule, phi)
        return same or kin

    def _matches(self, schedule, phi: float) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(the epoch-K rows of the experiments whose first K epochs are `schedule`, those of the experiments that
        train its versions in its order for at least K epochs) — both at φ; the second empty when the first is not."""
        sched, K = tuple(schedule), len(schedule)
        if K == 0:
            return [], []
        near = [(s, r[K - 1]) for s, f, r in self.experiments if len(s) >= K and math.isclose(f, phi, rel_tol=1e-6)]
        same = [row for s, row in near if s[:K] == sched]
        if same:
            return same, []
        path = _path(sched)
        return [], [row for s, row in near if _path(s[:K]) == path]

    @cached_property
    def certified_schedules(self) -> dict[tuple[tuple[str, ...], float], tuple[bool, int, int]]:
        """(schedule, the experiment's φ) → (certified, runs, runs that met ℓmax) for every schedule a calibration
        experiment ran (its first K epochs, for every scored K), at the target (ℓmax, ω) with confidence 1 − α.

        Each schedule is a hypothesis "P(ℓ(K) ≤ ℓmax) < ω", tested on its own runs (the worst of the experiments
        that ran it, each run once: `own_groups`) by the exact binomial rule (`conformal.certifies`).  Each of the
        E experiments is a chain: its schedules tested in the order of the law as fitted — its P(ℓ(K) ≤ ℓmax),
        highest first, which no calibration run decides —, each at level α/E, stopping at the first one not
        certified (`conformal.fixed_sequence`).  The chance that any certified schedule meets ℓmax less often
        than ω is then ≤ E·α/E = α (Bonferroni over the chains, the fixed sequence within each), so whichever
        of them the planner returns holds.  A chain stops at its own failure only: one experiment whose law
        is off does not stop the others.  Empty without `alpha` and `target`."""
        if self.alpha is None or self.target is None or not self.usable:
            return {}
        loss, omega = self.target
        each = self.alpha / len(self.usable)
        tested: dict[tuple[tuple[str, ...], float], tuple[float, int, int]] = {}
        out: dict[tuple[tuple[str, ...], float], tuple[bool, int, int]] = {}
        self._heads = []   # each chain's first test: experiment, (schedule, φ), runs, runs that met ℓmax (`shortfall`)
        for i in self.usable:
            sched, phi, rows = self.experiments[i]
            chain = []
            for K in range(1, min(len(sched), len(rows)) + 1):
                key = self._known(tuple(sched[:K]), phi, tested) or (tuple(sched[:K]), phi)
                if key not in tested:
                    fitted = float(self.base.distribution(list(key[0]), phi).cdf(loss))
                    # each run that started counts, by its own loss ℓ(K) (+inf: it diverged or stopped): the law
                    # as fitted only orders the chain, the runs decide
                    counts = [(int(np.sum(self.losses[j][:, K - 1] <= loss)), int(self.losses[j].shape[0]))
                              for j in self._same(key[0], phi)]
                    hits, n = min(counts, key=lambda c: clopper_pearson_lower(c[0], c[1], each))  # the worst
                    tested[key] = (fitted, n, hits)
                chain.append(key)
            passes = np.array([conformal.certifies(tested[k][2], tested[k][1], omega, each) for k in chain])
            order = np.array(sorted(range(len(chain)), key=lambda i: -tested[chain[i]][0]), dtype=int)
            if len(order):
                head = chain[order[0]]
                self._heads.append((i, head, tested[head][1], tested[head][2]))
            for k, ok in zip(chain, conformal.fixed_sequence(passes, order)):
                out[k] = (bool(ok) or out.get(k, (False,))[0], tested[k][1], tested[k][2])
        return out

    @property
    def usable(self) -> list[int]:
        """The calibration experiments that may certify with a confidence: their runs' conditions and losses
        recorded, the conditions the scenario's."""
        return [i for i, why in enumerate(self.problems) if why is None]

    def _same(self, schedule, phi: float) -> list[int]:
        """The usable experiments whose first K epochs are `schedule`, at φ."""
        K = len(schedule)
        return [i for i in self.usable if tuple(self.experiments[i][0][:K]) == tuple(schedule)
                and len(self.experiments[i][0]) >= K and math.isclose(self.experiments[i][1], phi, rel_tol=1e-6)]

    def certifying(self, schedule, phi: float) -> list:
        """The calibration experiments (depl.scenario.CalibrationExperiment) whose runs certify `schedule` at φ."""
        return [self.records[i] for i in self._same(tuple(schedule), phi)]

    def job_mismatch(self, schedule, phi: float, *, nodes, data) -> str | None:
        """Why the runs that certify `schedule` at φ do not certify a plan of it on clusters of `nodes` nodes and the
        datasets `data` ((source, share) pairs): the field that differs, the plan's value and the runs'; None when
        every experiment that certifies it ran under the plan's conditions (or none certifies it)."""
        if self.scenario is None:
            return None
        for e in self.certifying(schedule, phi):
            m = e.conditions.mismatch(self.scenario, nodes=nodes, data=data)
            if m is not None:
                return (f"not certified: the calibration runs of {e.label} differ from the plan's job — "
                        f"{m.words('the plan')}; only runs of the plan's own conditions certify it")
        return None

    def unusable(self) -> str | None:
        """Why no calibration experiment may certify with a confidence, in words; None when one may."""
        if self.usable:
            return None
        by: dict[str, list[str]] = {}
        for label, why in [(e.label, why) for e, why in zip(self.records, self.problems)] + self.refused_experiments:
            by.setdefault(why, []).append(label)
        differ = any(why.startswith(DIFFER) for why in by)
        return "no calibration experiment may certify a plan with a confidence: " + "; ".join(
            f"{', '.join(labels[:4])}{', …' if len(labels) > 4 else ''}: {why}" for why, labels in by.items()) + (
            "; profile calibration runs of the scenario as it is (`depl profile SCENARIO --first-seed N`, then "
            "`depl calibrate SCENARIO RUNS`)" + AS_FITTED if differ else "")

    def shortfall(self) -> str | None:
        """Why no schedule is certified at (ℓmax, ω) with confidence 1 − α, and how many runs would do, in words;
        None when some schedule is (or without α)."""
        if self.alpha is not None and self.target is not None and (self.experiments or self.refused_experiments):
            why = self.unusable()
            if why is not None:
                return why
        cert = self.certified_schedules
        if not cert or any(ok for ok, _, _ in cert.values()):
            return None
        loss, omega = self.target
        E = len(self.usable)
        need = conformal.pac_scores_needed(omega, self.alpha / E)
        have = min(n for _, n, _ in cert.values())
        # one chain named, the nearest to certifying (the highest lower bound); how the chains are tested and each
        # chain's first test under `depl --verbose` (shortfall_detail)
        nearest = max(self._heads, key=lambda h: self._lower(h, E))
        i, key, n, met = nearest
        return ("the calibration runs certify no schedule: "
                + ("the nearest, " if E > 1 else "") + f"{self.records[i].label!r} ({_words(key[0])}), {met} of {n} "
                f"met ℓmax, lower bound {self._lower(nearest, E):.3f} at α/{E}; a certificate takes ≥ {need} runs "
                f"({have} here; each test: `depl --verbose`); profile more seeds (`depl profile --first-seed N`, "
                "`depl calibrate`)" + AS_FITTED)

    def _lower(self, head, E: int) -> float:
        _, _, n, met = head
        return clopper_pearson_lower(met, n, self.alpha / E)

    def shortfall_detail(self) -> tuple[str, ...]:
        """Where no schedule is certified (`shortfall` names the nearest chain): how the chains are tested, then each
        chain's first test — the experiment, the schedule tested, its runs, those that met ℓmax and the lower bound
        at α/E; () where something is certified."""
        cert = self.certified_schedules
        if self.alpha is None or not cert or any(ok for ok, _, _ in cert.values()):
            return ()
        E = len(self.usable)
        how = (f"each experiment is a chain of its schedules tested on its own runs at α/{E} = {self.alpha / E:.3g}, "
               "the law's likeliest first, a chain stopping at its first failure; every chain failed its first test:")
        return (how, *(f"{self.experiment_words(i)}: its first {_epochs(len(key[0]))} ({_words(key[0])}, the law's "
                       f"likeliest): {met} of {n} met ℓmax, lower bound {self._lower((i, key, n, met), E):.3f}"
                       for i, key, n, met in self._heads))

    def experiment_words(self, i: int) -> str:
        """Calibration experiment `i` by what sets it apart from the others: its label, the versions it trained
        (and so its switch point), its φ, the fraction of the data and the nodes its runs trained on."""
        e = self.records[i]
        sched, phi, _ = self.experiments[i]
        c = e.conditions
        share = "all" if c is not None and c.fraction == 1 else f"{c.fraction:g}" if c is not None else ""
        where = "" if c is None else f", {share} of the data, {c.nodes} node{'s' if c.nodes != 1 else ''}"
        return f"experiment {e.label!r} ({_words(sched)}; φ {phi:.4g}{where})"

    def certificate(self, schedule, phi: float) -> tuple[bool, int, int] | None:
        """(certified, runs, runs that met ℓmax) of `schedule` at φ in `certified_schedules`; None where no
        calibration experiment ran it (nothing measured certifies it)."""
        key = self._known(tuple(schedule), phi, self.certified_schedules)
        return None if key is None else self.certified_schedules[key]

    @staticmethod
    def _known(schedule: tuple[str, ...], phi: float, table: dict) -> tuple[tuple[str, ...], float] | None:
        """The key of `table` for `schedule` at a φ equal to `phi` as `_matches` compares them (relative 1e-6: a
        plan's φ is computed from its samples, an experiment's was written to 12 digits); None if there is none."""
        return next((k for k in table if k[0] == schedule and math.isclose(k[1], phi, rel_tol=1e-6)), None)

    def certified_by(self, schedule, phi: float, omega: float) -> str:
        """Which calibration runs certify the ω-quantile of `schedule` at φ, in words (for `depl plan`)."""
        text = self._certified_by(schedule, phi, omega)
        if self.refused_experiments:   # runs of other conditions than the scenario's: left out, and said
            text += "; not used: " + "; ".join(f"{label} ({why})" for label, why in self.refused_experiments)
        return text

    def _certified_by(self, schedule, phi: float, omega: float) -> str:
        K = len(schedule)
        same, kin = self._matches(schedule, phi)
        pooled = self.pooled_scores_label(K)
        cert = self.certificate(schedule, phi) if self.target is not None and omega == self.target[1] else None
        if cert is not None:
            ok, n, hits = cert
            E = len(self.usable)
            where = f" (α/{E} each: {E} profiled experiments, each a fixed sequence)" if E > 1 else ""
            lower = clopper_pearson_lower(hits, n, self.alpha / E)
            verdict = "certified" if ok else "not certified"
            return (f"{n} held-out runs of this schedule, {hits} of them met ℓmax (each run that started, by its own "
                    f"loss): {verdict} P ≥ {omega:g} with confidence {1 - self.alpha:g}{where}; lower bound "
                    f"{lower:.3f}")
        unrecorded = [self.records[i].label for i, why in enumerate(self.problems)
                      if why is not None and tuple(self.experiments[i][0][:K]) == tuple(schedule)]
        note = (f"; {', '.join(unrecorded)}: {UNRECORDED} — recalibrate with `depl calibrate` to certify with a "
                "confidence" if unrecorded else "")
        if same:
            n = min(row.size for row in same)
            need = conformal.scores_needed(omega)
            reach = "" if n >= need else f"; ω = {omega:g} needs {need}: above n/(n+1) by {pooled}"
            whose = "its profiled experiment" if len(same) == 1 else \
                f"the worst of {len(same)} profiled experiments that ran it, on the same seeds"
            return f"{n} held-out runs of this schedule ({whose}), their epoch-{K} scores{reach}{note}"
        if kin:
            return (f"the worst of {len(kin)} profiled experiments training the same versions in the same order "
                    f"({', '.join(str(row.size) for row in kin)} runs): this schedule itself was not profiled{note}")
        return pooled + " (no profiled experiment has this schedule)"

    def distribution(self, schedule, phi: float = 1.0, *, start: RunState | None = None, **kw) -> CalibratedDistribution:
        epoch = (start.epoch if start is not None else 0) + len(schedule)
        whole = (tuple(start.past) if start is not None else ()) + tuple(schedule)
        own = self.own_groups(whole, phi) if self.experiments and len(whole) == epoch else ()
        refused = None
        if self.alpha is not None and self.target is not None and start is None and \
                (self.experiments or self.refused_experiments):
            # with α, only a schedule its own runs certify (none, where no experiment may certify: unrecorded or
            # other conditions) — never the pooled scores instead
            cert = self.certificate(schedule, phi)
            refused = self.target[1] if cert is None or not cert[0] else None
        return CalibratedDistribution(self.base.distribution(schedule, phi, start=start, **kw), self.scores_at(epoch),
                                      own, alpha=self.alpha, refused=refused)

    def terms(self, schedule, phi: float = 1.0, *, start: RunState | None = None):
        raise TypeError("a calibrated law is not a sum of independent terms; use distribution()")

    def simulate(self, schedule, phi: float, runs: int, rng: np.random.Generator, *,
                 start: RunState | None = None) -> np.ndarray:
        """The base law's trajectories, each epoch's loss moved to the same level of the recalibrated law.  A level
        beyond the highest the base law has a finite quantile at (`_top`: a lattice law's mass stops short of 1 by
        its truncation) is +∞ — a calibration run scored above every loss the law allows, the safe side —, where
        `mean` and `rvs` take the law's top instead (`beyond_top` says at which epochs)."""
        tr = self.base.simulate(schedule, phi, runs, rng, start=start) if start is not None else \
            self.base.simulate(schedule, phi, runs, rng)
        out = tr.copy()
        for k in range(1, tr.shape[1]):
            d = self.distribution(schedule[:k], phi, start=start)
            p = np.clip(d.base.cdf(tr[:, k]), 1e-12, 1 - 1e-12)
            out[:, k] = d.base.quantile(np.clip(np.interp(p, d._p, d._u), 1e-12, 1 - 1e-12))
        return out

    def beyond_top(self, schedule, phi: float = 1.0) -> list[tuple[int, float]]:
        """(epoch k, the share of levels) for every epoch whose recalibrated levels reach beyond the base law's top
        (`_top`): there `simulate` draws +∞ for that share of the runs, while the law's `mean` takes its top."""
        out = []
        for k in range(1, len(schedule) + 1):
            d = self.distribution(schedule[:k], phi)
            share = 1.0 - float(np.interp(d._top, d._u, d._p))
            if share > 0:
                out.append((k, share))
        return out

    def mean_path(self, schedule, phi: float = 1.0) -> np.ndarray:
        return np.array([self.initial_loss] + [self.distribution(schedule[:k], phi).mean()
                                               for k in range(1, len(schedule) + 1)])

    def epoch_cumulants(self, K: int, phi: float = 1.0) -> np.ndarray:
        return self.base.epoch_cumulants(K, phi)

    def switch_cumulants(self, a: str, b: str, phi: float = 1.0) -> np.ndarray:
        return self.base.switch_cumulants(a, b, phi)

    def can_switch(self, a: str, b: str) -> bool:
        return self.base.can_switch(a, b)

    def uncalibrated(self) -> LossModel:
        return self.base

    def certified_levels(self, ends: np.ndarray, omega: float) -> np.ndarray:
        """The conformal level of the scores of the epoch each plan ends at (1: they cannot reach ω).  With
        per-epoch scores these levels jump about with K, so the certified quantile of a schedule need not fall
        as it grows (a longer plan may be certified where a shorter one is not)."""
        return np.array([float(conformal.level(self.scores_at(int(e)), omega)) for e in ends])

    def levels_follow_schedule(self) -> bool:
        return bool(self.experiments)   # a schedule's level comes from the runs of its own kind

    def progress_is_monotone(self) -> bool:
        return self.base.progress_is_monotone()
