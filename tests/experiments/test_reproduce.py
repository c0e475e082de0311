"""`depl reproduce`: the quick run once, and the relations between its plans and results asserted on it.

The paper's qualitative findings (Figs. 7–9) are *reported* in results.md as
holding or not; they are not asserted here, because with the built-in
scenarios they do not hold (results.md explains why).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from depl.experiments import (
    Config,
    findings,
    growth_exponent,
    mc_seed,
    plan_and_check,
    run,
    with_extra_clusters,
    with_extra_versions,
)
from depl.experiments.config import COST_MODELS, READINGS, sweep_methods
from depl.experiments.map import BUILT_IN, GRIDS, load_records, map_jobs, map_scenario, record_key, verdicts
from depl.experiments.results import Results
from depl.report.results_md import TIMING_MARKER, write
from depl.scenario import load_scenario

pytestmark = pytest.mark.slow  # its module fixture runs a `depl reproduce --quick` sweep

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("reproduce")
    # One sweep target of the quick run's three (`depl reproduce --quick` keeps them all): every path and
    # relation below is still exercised, in a third of the time CI spent on it.
    cfg = dataclasses.replace(Config.quick(seed=0), targets=(11.0,), band_targets=(11.0,))
    results = run(cfg, finish=lambda r: write(r, out), map_file=out / "map.jsonl")
    return results, out


def pairs(results):
    cfg = results.config
    return [(n, t) for n in cfg.networks for t in cfg.targets]


def test_depl_never_costlier_than_best_exp(quick):
    results, _ = quick
    for net, t in pairs(results):
        d, b = results.outcome(net, t, "depl"), results.outcome(net, t, "best-exp")
        assert d.feasible and b.feasible, (net, t)
        assert d.cost <= b.cost * (1 + 1e-9), (net, t, d.cost, b.cost)


def test_depl_within_one_percent_of_optimal(quick):
    results, _ = quick
    for net, t in pairs(results):
        d, o = results.outcome(net, t, "depl"), results.outcome(net, t, "optimal")
        assert o.cost <= d.cost * (1 + 1e-9), "optimal is never costlier than depl"
        assert d.cost <= o.cost * 1.01, (net, t, d.cost, o.cost)


def test_every_plan_meets_its_target_by_monte_carlo(quick):
    results, _ = quick
    outcomes = list(results.sweep.values()) + list(results.sensitivity.values())
    assert len(results.sweep) == len(pairs(results)) * sum(len(sweep_methods(c)) for c in COST_MODELS)
    for o in outcomes:
        assert o.feasible, (o.scenario, o.target, o.method, o.message)
        assert o.loss_quantile <= o.target + 1e-9  # the certified bound
        assert o.meets, (o.scenario, o.target, o.method, o.p_meet_ci)
        assert o.mc_quantile_ci[0] <= o.target, "the Monte Carlo 99th percentile is not clearly above ℓmax"


def test_figures_are_pngs(quick):
    _, out = quick
    names = {p.name for p in out.glob("*.png")}
    for net in ("alexnet", "mobilenet"):
        for fig in ("epochs-per-version", "cost-per-version", "loss-bands"):
            assert any(n.endswith(f"{net}-{fig}.png") for n in names), (net, fig, names)
    assert {"fig5-alexnet-cost-loss-eta.png", "fig6-mobilenet-cost-loss-eta.png", "planner-solve-time.png",
            "sensitivity-variants.png"} <= names
    for p in out.glob("*.png"):
        data = p.read_bytes()
        assert data.startswith(PNG) and len(data) > 5_000, p


def test_results_md_has_the_headline_table_and_the_checked_findings(quick):
    results, out = quick
    md = (out / "results.md").read_text(encoding="utf-8")
    head, _, timing = md.partition(TIMING_MARKER)
    assert timing, "the timing section is separate, after the marker"
    assert "## Headline" in head and "depl saving vs best-exp" in head and "depl gap to optimal" in head
    for net, t in pairs(results):
        assert f"### {net}" in head
        assert f"\n| {t:g} | " in head
    assert "27%" in head and "## Why" in head
    assert "VARIANTS, not the paper reproduction" in head
    for net in results.config.networks:
        fs = findings(results, net)
        assert len(fs) == 6
        for f in fs:
            assert f.holds in ("holds", "partly", "does not hold")
            assert f.claim in head
    assert "solve time" not in head.split("## Figures")[0].lower().replace("solve times are in the timing", "")
    assert "fitted exponent" in timing and "\\|M\\|" in timing


def test_same_seed_same_outcome_except_solve_time():
    s = load_scenario("paper-mobilenet")
    cfg = Config.quick(seed=7)
    a = plan_and_check(s, "depl", 13.0, cfg, tag="t", keep_band=True)
    b = plan_and_check(s, "depl", 13.0, cfg, tag="t", keep_band=True)
    da, db = dataclasses.asdict(a), dataclasses.asdict(b)
    for d in (da, db):
        d.pop("solve_seconds")
        d.pop("band")
    assert da == db
    assert np.array_equal(a.band.high, b.band.high)
    assert mc_seed(7, "x", 13.0) == mc_seed(7, "x", 13.0) != mc_seed(8, "x", 13.0)


def test_growth_exponent_recovers_a_power_law():
    x = np.array([3, 4, 6, 8, 16])
    assert growth_exponent(x, 0.01 * x**2.5) == pytest.approx(2.5)
    assert np.isnan(growth_exponent([4], [1.0]))


def test_synthetic_growth_keeps_a_valid_scenario():
    s = load_scenario("paper-alexnet")
    m = with_extra_versions(s, 6)
    assert len(m.models) == 6 and len({x.name for x in m.models}) == 6
    works = [x.work for x in m.models]
    assert works == sorted(works, reverse=True)
    assert len(m.switches) == 6 * 5 // 2  # every forward (further-pruning) switch
    n = with_extra_clusters(s, 9)
    assert len(n.clusters) == 9 and len({c.name for c in n.clusters}) == 9
    assert len({(c.capacity, c.unit_cost) for c in n.clusters}) == 2 + 5  # the 5 extra ones all differ


def test_cli_rejects_an_out_that_is_a_file(depl_cli, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    r = depl_cli("reproduce", "--out", f, "--quick", timeout=120)
    assert r.returncode == 2 and "--out" in r.stderr
    r = depl_cli("reproduce", "--out", tmp_path / "o", "--map", "huge", timeout=120)
    assert r.returncode == 2 and "--map 'huge'" in r.stderr and not (tmp_path / "o").exists()


def test_full_and_quick_configs_say_which_they_are():
    assert Config.full(0).is_quick is False
    assert Config.quick(0).is_quick is True


def test_quick_reports_both_readings_under_both_cost_models(quick):
    """The 2 × 2 table: DepL against each reading of best-exp under each cost model, on both networks."""
    results, out = quick
    head = (out / "results.md").read_text(encoding="utf-8").partition(TIMING_MARKER)[0]
    assert "## Both readings of best-exp × both cost models" in head
    for net, t in pairs(results):
        for cm in COST_MODELS:
            d = results.outcome(net, t, "depl", cm)
            assert d.cost_model == cm
            for b in READINGS:
                o = results.outcome(net, t, b, cm)
                assert o.feasible and o.cost_model == cm and o.meets, (net, t, b, cm)
                # both planners guarantee the same quantile; DepL minimises the cost among such plans
                assert d.cost <= o.cost * (1 + 1e-6), (net, t, b, cm, d.cost, o.cost)
    for net in results.config.networks:
        table = head.split(f"### {net}: DepL's saving over best-exp")[1]
        assert "| reading of best-exp | per-epoch | resource-time |" in table
        assert "\n| best-exp | " in table and "\n| best-exp-loss | " in table
    assert "## Claim by claim" in head
    for b in READINGS:
        for cm in COST_MODELS:
            assert f"{b} × {cm}" in head
    # the per-epoch and resource-time plans of one method differ somewhere (the cost model is honoured)
    costs = {cm: [results.outcome(n, t, "depl", cm).cost for n, t in pairs(results)] for cm in COST_MODELS}
    assert costs["per-epoch"] != costs["resource-time"]


def test_quick_writes_the_map(quick):
    results, out = quick
    grid = GRIDS["tiny"]
    lines = (out / "map.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == grid.size == len(results.map)
    for cm in COST_MODELS:
        for b in READINGS:
            png = out / f"map-{b}-{cm}.png"
            assert png.read_bytes().startswith(PNG) and png.stat().st_size > 10_000, png
    md = (out / "results.md").read_text(encoding="utf-8")
    assert "## The map" in md and "map-best-exp-loss-resource-time.png" in md
    assert "depl reproduce --out docs/results --map full" in md


def test_an_interrupted_map_resumes_where_it_stopped(quick, tmp_path):
    """Finished plans are not planned again; a line cut off by a kill is."""
    results, out = quick
    grid = GRIDS["tiny"]
    path = tmp_path / "map.jsonl"
    lines = (out / "map.jsonl").read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2], encoding="utf-8")
    todo = map_jobs(grid, results.config.eta, path)
    assert len(todo) == 1 + 1  # the loader and the one plan whose line was cut
    r = Results(results.config)
    for job in todo:
        job.run(r)
    assert len(r.map) == grid.size
    assert sorted(map(record_key, r.map)) == sorted(map(record_key, results.map))
    assert [record_key(x) for x in load_records(path)][-1] == record_key(json.loads(lines[-1]))


def test_map_point_changes_only_what_it_names():
    s = load_scenario("paper-alexnet")
    same = map_scenario(s, BUILT_IN)
    assert [m.progress for m in same.models] == [m.progress for m in s.models]
    assert [w.jump for w in same.switches] == [w.jump for w in s.switches]
    assert same.target == s.target
    p = map_scenario(s, {"a_fu": 1.0, "a_ss": 1.0, "b": 2.0, "jump": 0.5, "tmax": 2.0})
    assert {m.progress.A for m in p.models} == {1.5}
    assert [m.progress.B for m in p.models] == [2 * m.progress.B for m in s.models]
    assert [w.jump.params["loc"] for w in p.switches] == [0.5 * w.jump.params["loc"] for w in s.switches]
    assert [w.jump.params["df"] for w in p.switches] == [w.jump.params["df"] for w in s.switches]
    assert p.target.deadline == 2 * s.target.deadline
    assert [(m.work, m.noise) for m in p.models] == [(m.work, m.noise) for m in s.models]


def test_map_verdicts_read_the_records():
    """The 27% threshold and the two Fig. 7 patterns, on hand-made records of one point."""
    point = dict(BUILT_IN)

    def rec(t, method, cost, epochs):
        return {"network": "paper-alexnet", **point, "target": t, "method": method, "cost_model": "per-epoch",
                "eta": 200, "feasible": True, "cost": cost, "K": sum(epochs.values()), "epochs": epochs, "seconds": 0}

    records = [rec(13.0, "depl", 70.0, {"intermediate": 8}), rec(13.0, "best-exp", 100.0, {"fast-unsteady": 8}),
               rec(5.0, "depl", 90.0, {"fast-unsteady": 9, "intermediate": 9, "slow-steady": 1}),
               rec(5.0, "best-exp", 100.0, {"fast-unsteady": 20})]
    [v] = verdicts(records, "best-exp", "per-epoch")
    assert v.reaches and v.loose_intermediate_only and v.tight_all_three and v.story
    assert v.max_saving == pytest.approx(0.30)
    records[0]["cost"] = 74.0  # 26% < 27%
    [v] = verdicts(records, "best-exp", "per-epoch")
    assert not v.reaches and not v.story
    assert verdicts(records, "best-exp-loss", "per-epoch") == []  # no such plans: no verdict
