"""The level law with memory (`loss_model = "level-memory"`): after a switch the new version resumes its
own curve at the level the run has reached, so what was trained before the switch matters."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from depl.fit.compare import score
from depl.fit.report import fit_profile
from depl.fit.runs import ProfiledExperiment, Profile
from depl.loss import LevelMemoryModel, LevelModel, loss_model_for
from depl.scenario import parse_scenario

from fit.conftest import LEVEL  # tests/ is on the path: the package of the level-law fixtures


def scenario(law: str, offset: float = 0.0, recovery: float = 0.5):
    d = copy.deepcopy(LEVEL)
    d["loss_model"] = law
    d["switches"][0]["level"] = {"offset": offset, "recovery": recovery, "sigma": 0.0}
    return parse_scenario(d, law)


def test_training_before_a_switch_matters_only_with_memory():
    long_big, short_big = ["full"] * 16 + ["small"] * 2, ["full"] * 2 + ["small"] * 16
    mem, lev = loss_model_for(scenario("level-memory")), loss_model_for(scenario("level"))
    assert isinstance(mem, LevelMemoryModel) and isinstance(lev, LevelModel)
    # the level law: ℓ(18) is small's curve at epoch 18 either way; with memory, 16 epochs of the better
    # version leave the run lower than 2 epochs of it followed by 16 of the worse one
    assert lev.final(long_big)[0] == pytest.approx(lev.final(short_big)[0])
    assert mem.final(long_big)[0] < mem.final(short_big)[0] - 0.02
    # and the same state, reached either way, is continued alike: the curve resumes where the run is
    mu, _, _ = mem.path(["full"] * 6 + ["small"] * 4)
    assert np.all(np.diff(mu[6:]) < 0) and mu[7] < mu[6]   # no offset: the decay goes on from ℓ(6)


def test_a_version_never_goes_below_its_floor_after_a_switch():
    m = loss_model_for(scenario("level-memory"))
    mu, _, _ = m.path(["full"] * 29 + ["small"])
    small = LEVEL["models"][1]["level"]
    assert mu[-1] >= small["floor"] * 0.99   # full's level is below small's floor: small stays at it


def _experiments(model, phi: float, seeds: int, rng) -> list[ProfiledExperiment]:
    out = []
    for kind, v, to, k1, sched in (("version", "full", None, 0, ["full"] * 12), ("version", "small", None, 0, ["small"] * 12),
                                   ("switch", "full", "small", 6, ["full"] * 6 + ["small"] * 6)):
        tr = model.simulate(sched, phi, seeds, rng)[:, 1:]
        out.append(ProfiledExperiment(kind, v, 1.0, to, k1, 4000.0, 2, np.arange(seeds), tr))
    return out


def test_fitted_on_one_switch_point_it_predicts_another():
    """Fitted on a switch after 6 epochs (data from the law with memory, offset 0.15), the law with memory
    recovers the switch and predicts held-out runs that switch after 2 epochs; the memoryless level law,
    whose offset was fitted at epoch 6, does not."""
    truth = loss_model_for(scenario("level-memory", offset=0.15, recovery=0.6))
    rng = np.random.default_rng(0)
    prof = Profile("synthetic", _experiments(truth, 1.0, 30, rng))
    r = fit_profile(prof, scenario("level"), bootstrap=0, calibration_seeds=0)
    sw = r.fits["level-memory"].switches[("full", "small")]
    assert sw.offset == pytest.approx(0.15, abs=0.05) and sw.recovery == pytest.approx(0.6, abs=0.2)
    written = r.scenarios["level-memory"]
    assert written.loss_model == "level-memory" and written.switches[0].level.offset == pytest.approx(0.15, abs=0.05)
    early = ["full"] * 2 + ["small"] * 10
    held = Profile("held", [ProfiledExperiment("switch", "full", 1.0, "small", 2, 4000.0, 2, np.arange(30),
                                       truth.simulate(early, 1.0, 30, rng)[:, 1:])])
    mem, lev = score(written, held, "level-memory"), score(r.scenarios["level"], held, "level")
    assert mem.loglik > lev.loglik + 0.5, (mem.loglik, lev.loglik)
