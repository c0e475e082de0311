"""Running the reproduction: plan with every method, check every plan by Monte Carlo.

The work is a list of `Step`s so that a caller (the CLI) can show progress;
this module never prints and never draws (`depl.report` writes the figures
and results.md from the finished `Results`).  Everything but solve times is
a function of the configuration and the seed: the Monte Carlo seed of each
plan is derived from the seed and the plan's name.
"""

from __future__ import annotations

import math
import time
import zlib
from pathlib import Path
from typing import Callable

from ..plan import Plan, epoch_costs
from ..planners import Infeasible, Options, make_plan
from ..scenario import Scenario, load_scenario
from ..simulate import simulate_plan
from .config import COST_MODELS, METHODS, Config, sweep_methods
from .map import GRIDS, map_jobs
from .results import EtaPoint, Step, Outcome, PerfPoint, Results, SingleVersion
from .variants import VARIANTS, with_cost_model, with_extra_clusters, with_extra_versions, with_loss_target
from ..loss import loss_model_for
from ..planners.placement import PlacementInfeasible, place


def mc_seed(seed: int, *parts) -> int:
    """A seed per plan that depends only on the run's seed and the plan's name."""
    return zlib.crc32(repr((seed, *parts)).encode()) ^ (seed & 0xFFFFFFFF)


def per_version(plan: Plan, s: Scenario) -> tuple[dict, dict]:
    """Epochs and compute cost (eq. (2) without β, under the scenario's cost model) per model version."""
    epochs = {m.name: 0 for m in s.models}
    cost = {m.name: 0.0 for m in s.models}
    for e, c in zip(plan.epochs, epoch_costs(s, plan.datasets, plan.epochs)):
        epochs[e.model] += 1
        cost[e.model] += c
    return epochs, cost


def plan_and_check(s: Scenario, method: str, target: float, cfg: Config, *, tag: str,
                   keep_band: bool, eta: int | None = None, cost_model: str = "per-epoch") -> Outcome:
    st = with_cost_model(with_loss_target(s, target), cost_model)
    try:
        plan = make_plan(st, method, Options(eta=eta or cfg.eta))
    except Infeasible as e:
        return Outcome(s.name, target, method, False, message=str(e), omega=st.target.quantile,
                       cost_model=cost_model)
    epochs, cost = per_version(plan, st)
    # Common random numbers: the three methods' plans for one target share a seed, so equal
    # schedules get equal trajectories and differences between bands are the plans', not noise.
    sim = simulate_plan(plan, runs=cfg.mc_runs, seed=mc_seed(cfg.seed, tag, s.name, target))
    return Outcome(
        scenario=s.name, target=target, method=method, feasible=True, cost=plan.cost,
        loss_mean=plan.loss_mean, loss_quantile=plan.loss_quantile, solve_seconds=plan.solve_seconds,
        segments=[tuple(x) for x in plan.info["segments"]], epochs_per_version=epochs,
        cost_per_version=cost, p_meet=sim.p_meet, p_meet_ci=sim.p_meet_ci, mc_quantile=sim.quantile,
        mc_quantile_ci=sim.quantile_ci, mc_runs=sim.runs, omega=plan.omega,
        band=sim.band if keep_band else None, cost_model=cost_model,
    )


def single_version_rows(s: Scenario, target: float) -> list[SingleVersion]:
    """Per version: the fewest epochs of that version alone meeting ℓmax, and its cost.

    This is the model's arithmetic behind which version wins (results.md, "why").
    """
    st = with_loss_target(s, target)
    loss = loss_model_for(st)
    datasets = [d.name for d in st.datasets]
    phi = st.phi(st.samples(datasets))
    q = st.target.quantile
    out = []
    for m in st.models:
        kq = km = None
        margin = math.nan
        for K in range(1, 400):
            sched = [m.name] * K
            if km is None and loss.mean_path(sched, phi)[-1] <= target:
                km = K
            d = loss.distribution(sched, phi) if kq is None else None
            if d is not None and d.quantile_bounds(q)[1] <= target:
                kq, margin = K, d.quantile_bounds(q)[1] - d.mean()
            if kq is not None and km is not None:
                break

        def cost(K):
            if K is None:
                return math.nan
            try:
                return place(st, [m.name] * K, datasets).cost
            except PlacementInfeasible:
                return math.inf

        out.append(SingleVersion(s.name, target, m.name, kq, cost(kq), km, cost(km), margin))
    return out


def _guess_seconds(method: str, target: float, scale: float = 1.0) -> float:
    """Rough solve times measured on the paper scenarios (only for the progress bar's ETA)."""
    d = max(0.0, 13.0 - target)
    guess = {"depl": 0.15 + 0.08 * d, "optimal": 0.35 * math.exp(0.4 * d), "best-exp": 2.0 * math.exp(0.19 * d)}
    return scale * guess.get(method, guess["depl"])


def jobs(cfg: Config, map_file: Path | None = None) -> list[Step]:
    """Everything `run` does, in order, as jobs with a guessed weight (the map's finished plans skipped)."""
    out: list[Step] = []
    scen = {n: load_scenario(n) for n in cfg.networks}
    band_targets = set(cfg.band_targets)

    for cost_model in COST_MODELS:
        for name in cfg.networks:
            for t in cfg.targets:
                for method in sweep_methods(cost_model):
                    def job(r: Results, name=name, t=t, method=method, cost_model=cost_model):
                        r.sweep[(name, t, method, cost_model)] = plan_and_check(
                            scen[name], method, t, cfg, tag="sweep", keep_band=t in band_targets,
                            cost_model=cost_model)
                    label = f"{name} ℓmax={t:g} {method}" + ("" if cost_model == "per-epoch" else f" {cost_model}")
                    out.append(Step(label, _guess_seconds(method, t), job))

    for name in cfg.networks:
        for t in cfg.eta_targets:
            for eta in cfg.eta_values:
                def job(r: Results, name=name, t=t, eta=eta):
                    p = make_plan(with_loss_target(scen[name], t), "depl", Options(eta=eta))
                    r.eta.append(EtaPoint(name, t, eta, p.cost, p.solve_seconds))
                out.append(Step(f"{name} ℓmax={t:g} depl η={eta}", _guess_seconds("depl", t, eta / 200), job))

    base = scen[cfg.networks[0]]
    for axis, sizes, opt_max, grow in (("|M|", cfg.perf_versions, cfg.perf_versions_optimal, with_extra_versions),
                                       ("|N|", cfg.perf_clusters, cfg.perf_clusters_optimal, with_extra_clusters)):
        for size in sizes:
            for method in ("depl", "optimal"):
                if method == "optimal" and size > opt_max:
                    continue

                def job(r: Results, axis=axis, size=size, method=method, grow=grow):
                    s = with_loss_target(grow(base, size), cfg.perf_target)
                    p = make_plan(s, method, Options(eta=cfg.eta))
                    r.perf.append(PerfPoint(axis, size, method, p.solve_seconds, p.cost, len(p.epochs)))
                scale = (size / 3) ** 2 if method == "optimal" else size / 3
                out.append(Step(f"perf {axis}={size} {method}", _guess_seconds(method, cfg.perf_target, scale), job))

    for name in cfg.networks:
        for t in (min(cfg.targets), max(cfg.targets)):
            def job(r: Results, name=name, t=t):
                r.single.extend(single_version_rows(scen[name], t))
            out.append(Step(f"{name} ℓmax={t:g} single-version plans", 0.3, job))

    for key, (_, make) in VARIANTS.items():
        variant = make(scen["paper-alexnet"] if "paper-alexnet" in scen else load_scenario("paper-alexnet"))
        for t in cfg.sensitivity_targets:
            for method in METHODS:
                def job(r: Results, key=key, variant=variant, t=t, method=method):
                    r.sensitivity[(key, t, method)] = plan_and_check(
                        variant, method, t, cfg, tag=f"variant:{key}", keep_band=True)
                out.append(Step(f"variant {key} ℓmax={t:g} {method}", 3 * _guess_seconds(method, t), job))

    if cfg.map_grid != "none":
        out += map_jobs(GRIDS[cfg.map_grid], cfg.eta, map_file)
    return out


def run(cfg: Config, progress: Callable[[str, float, float], None] | None = None,
        finish: Callable[[Results], None] | None = None, map_file: Path | None = None) -> Results:
    """Run every job, then `finish(results)` (the caller's writing of figures and results.md).

    `progress(label, done, total)` is called before each job, before `finish`
    and once at the end; `results.seconds` covers the whole of it.  The map's
    plans are appended to `map_file` (JSON lines) and those already there are
    not planned again.
    """
    todo = jobs(cfg, map_file)
    total = sum(j.weight for j in todo) + 1.0
    results = Results(cfg)
    t0 = time.perf_counter()
    done = 0.0
    for j in todo:
        if progress:
            progress(j.label, done, total)
        j.run(results)
        done += j.weight
    if progress:
        progress("figures and results.md", done, total)
    results.seconds = time.perf_counter() - t0
    if finish:
        finish(results)
        results.seconds = time.perf_counter() - t0
    if progress:
        progress("done", total, total)
    return results


__all__ = ["mc_seed", "per_version", "plan_and_check", "single_version_rows", "jobs", "run"]
