"""Fitting recovers the law that generated the runs, and chooses the model that did."""

from __future__ import annotations

import tomllib

import numpy as np
import pytest

from depl.fit.increments import fit_progress, fit_s0, multipliers, phi_of
from depl.fit.report import report_lines, run_fit, toml_dumps
from depl.loss import IncrementsModel, LevelModel
from depl.scenario import load_scenario, parse_scenario
from depl.store import EpochRow, Store

BASE = load_scenario("mnist1d-small")
SHARES = [[0.0, 0.5], [0.5, 1.0]]


def _store(trajectories: dict, tmp_path) -> Store:
    """A store of profiling runs: {(kind, version, fraction, to, k1): array (seeds, E)}."""
    st = Store(tmp_path / "runs.sqlite")
    for (kind, version, fraction, to, k1), losses in trajectories.items():
        E = losses.shape[1]
        sched = [version] * k1 + [to] * (E - k1) if kind == "switch" else [version] * E
        rid = f"profile-{kind}-{version}-{to}-{fraction}"
        st.start_run(rid, "profile", {
            "experiment": {"kind": kind, "version": version, "fraction": fraction, "to": to, "switch_after": k1},
            "job": {"data": {"source": "mnist1d", "shares": SHARES, "fraction": fraction, "path": None},
                    "epochs": [[k + 1, m, "profile"] for k, m in enumerate(sched)], "nodes": {"profile": 2}},
            "scenario": "mnist1d-small"})
        for s, row in enumerate(losses):
            for k, loss in enumerate(row, start=1):
                st.record_epoch(rid, s, EpochRow(k, sched[k - 1], "profile", float(loss), 0.5, 1.0, 0.1), final=k == E)
    return st


def _level_truth():
    data = {k: v for k, v in __import__("depl.scenario", fromlist=["scenario_dict"]).scenario_dict(BASE).items()}
    data["loss_model"] = "level"
    data["data_law"] = {"s0": 3000.0, "reference_samples": 4000.0}
    laws = {"full": ("exp", 0.3, 6.0, 1.0, 0.01, 0.05, 0.2), "pruned-0.5": ("exp", 0.3, 8.0, 1.0, 0.01, 0.06, 0.3),
            "pruned-0.75": ("power", 0.25, 10.0, 1.3, 0.02, 0.07, 0.5)}
    for m in data["models"]:
        c, f, sc, sh, s0, s1, rho = laws[m["name"]]
        m["level"] = {"curve": c, "floor": f, "floor_exponent": 0.5, "scale": sc, "shape": sh, "sigma0": s0,
                      "sigma1": s1, "seed_share": rho}
    for sw in data["switches"]:
        sw["level"] = {"offset": 0.25, "recovery": 0.5, "sigma": 0.05}
    return parse_scenario(data, "truth")


def _simulate(model, seeds=24, E=16, rng=None):
    rng = rng or np.random.default_rng(0)
    s = model.scenario
    out = {}
    for frac in (1.0, 0.5, 0.25):
        phi = s.phi(4000 * frac)
        for m in model.model_names:
            out[("version", m, frac, None, 0)] = model.simulate([m] * E, phi, seeds, rng)[:, 1:]
    for a, b in (("full", "pruned-0.5"), ("pruned-0.5", "pruned-0.75")):
        out[("switch", a, 1.0, b, 6)] = model.simulate([a] * 6 + [b] * (E - 6), 1.0, seeds, rng)[:, 1:]
    return out


def test_paper_progress_and_multipliers_are_recovered():
    k = np.arange(1, 21)
    l0, A, B = 2.3, 0.1, 3.0
    rng = np.random.default_rng(0)
    x = rng.gamma(20.0, 1 / 20.0, size=(50, 20))
    losses = l0 - np.cumsum(A / np.sqrt(k + B) * x, axis=1)
    A_hat, B_hat = fit_progress(losses, l0)
    assert A_hat == pytest.approx(A, rel=0.05) and B_hat == pytest.approx(B, abs=1.0)
    np.testing.assert_allclose(multipliers(losses, l0, A, B), x, rtol=1e-9)


def test_data_law_s0_is_recovered():
    S = np.array([1000.0, 2000.0, 4000.0])
    assert fit_s0(S, phi_of(S, 1500.0, 4000.0), 4000.0) == pytest.approx(1500.0, rel=0.03)
    assert fit_s0(np.array([4000.0]), np.array([1.0]), 4000.0) is None


@pytest.mark.slow
def test_level_runs_are_fitted_and_the_level_model_is_chosen(tmp_path):
    truth = LevelModel(_level_truth())
    st = _store(_simulate(truth), tmp_path)
    r = run_fit(st, BASE, bootstrap=0)
    assert r.chosen == "level"
    lv = r.level.versions["full"]
    assert lv.curve.kind == "exp"
    # the fitted law's final-epoch quantiles are close to the truth's
    fitted = LevelModel(r.scenarios["level"])
    for m in truth.model_names:
        q_true = truth.distribution([m] * 16, 1.0).quantile(0.9)
        assert fitted.distribution([m] * 16, 1.0).quantile(0.9) == pytest.approx(q_true, rel=0.06)
    assert r.level.switches[("full", "pruned-0.5")].offset == pytest.approx(0.25, abs=0.1)
    text = "\n".join(report_lines(r))
    assert "chosen: level" in text and "held-out" in text
    # what is written loads back as a scenario, with the base's other sections
    for tag, data in r.data.items():
        s = parse_scenario(tomllib.loads(toml_dumps(data, "header")), tag)
        assert s.loss_model == tag and [c.name for c in s.clusters] == [c.name for c in BASE.clusters]
        assert s.training == BASE.training


@pytest.mark.slow
def test_increments_runs_make_the_increments_model_win(tmp_path):
    data = __import__("depl.scenario", fromlist=["scenario_dict"]).scenario_dict(BASE)
    data["loss_model"] = "increments"
    data["data_law"] = {"s0": 2000.0, "reference_samples": 4000.0}
    for m, (A, B, var) in zip(data["models"], [(0.29, 1.0, 0.03), (0.27, 1.5, 0.02), (0.25, 2.5, 0.015)]):
        m["progress"] = {"A": A, "B": B}
        m["noise"] = {"family": "invgamma", "mean": 1.0, "var": var}
    for sw in data["switches"]:
        sw.pop("level", None)
        sw["jump"] = {"family": "t", "params": {"df": 4.0, "loc": 0.1, "scale": 0.05}}
    truth = IncrementsModel(parse_scenario(data, "increments truth"))  # independent increments
    rng = np.random.default_rng(1)
    st = _store({k: v for k, v in _simulate(truth, rng=rng).items()}, tmp_path)
    r = run_fit(st, BASE, bootstrap=0)
    assert r.chosen == "increments", "\n".join(report_lines(r))


def test_a_jump_law_never_runs_off_to_a_degenerate_skew():
    """Maximum likelihood drives a skew-normal's shape to ±1e7 on samples with a sharp edge (a half-normal's);
    the fit holds it at the bound instead, and still fits the data."""
    import numpy as np

    from depl.fit.gof import SHAPE_BOUNDS, fit_family

    rng = np.random.default_rng(0)
    edge = -np.abs(rng.standard_normal(400)) * 0.3 - 0.1   # every jump below −0.1: an edge the law must reach
    f = fit_family("skewnorm", edge[:300], edge[300:])
    assert f is not None and abs(f.params["a"]) <= SHAPE_BOUNDS["skewnorm"][1] and f.params["a"] < 0
    assert f.impossible == 0 and np.isfinite(f.heldout)
