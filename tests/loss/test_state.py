"""The loss side of the state seam: the law of ℓ(k0 + K) given a run's state, against Monte Carlo.

Trajectories of the whole schedule (past, then next) are simulated from the start; those near the
observed state are kept, and the quantiles of their final loss must be those of
`distribution(next, start=state)`."""

from __future__ import annotations

import numpy as np
import pytest

from depl.loss import loss_model_for
from depl.scenario import load_scenario
from depl.state import RunState

QS = (0.1, 0.5, 0.9)


def conditional_check(model, past, nxt, observed, keep, runs, seed, tol):
    """Monte Carlo conditional quantiles of ℓ(K) vs the law; `keep(traj)` selects the runs near the state."""
    full = list(past) + list(nxt)
    tr = model.simulate(full, 1.0, runs, np.random.default_rng(seed))
    kept = tr[keep(tr), -1]
    assert kept.size > 2000, kept.size
    state = RunState(len(past), past[-1], tuple(observed), schedule=tuple(past))
    d = model.distribution(nxt, 1.0, start=state)
    uncond = model.distribution(full, 1.0)
    for q in QS:
        emp = np.quantile(kept, q)
        assert d.quantile(q) == pytest.approx(emp, abs=tol), q
    # the state matters: the conditional law is not the unconditional one (the test can fail)
    assert abs(d.quantile(0.5) - uncond.quantile(0.5)) > 3 * tol
    # and simulate(start=) draws the same law, from the observed loss
    sim = model.simulate(nxt, 1.0, 200_000, np.random.default_rng(seed + 1), start=state)
    assert np.all(sim[:, 0] == observed[-1]) and sim.shape[1] == len(nxt) + 1
    for q in QS:
        assert np.quantile(sim[:, -1], q) == pytest.approx(d.quantile(q), abs=tol)
    return d


def test_increments_law_given_the_observed_loss():
    s = load_scenario("paper-mobilenet")
    m = loss_model_for(s)
    past, nxt = ["fast-unsteady"] * 4, ["fast-unsteady"] * 2 + ["intermediate"] * 6
    tr = m.simulate(past, 1.0, 100_000, np.random.default_rng(0))
    x = float(np.quantile(tr[:, -1], 0.9))          # a slow run
    w = 0.01 * float(tr[:, -1].std())
    sd = m.distribution(nxt, 1.0, start=RunState(4, past[-1], (x,) * 4)).std()
    conditional_check(m, past, nxt, [x] * 4, lambda t: np.abs(t[:, 4] - x) < w, 1_000_000, 1, tol=0.03 * sd)


def test_level_law_given_the_observed_losses_through_the_seed_effect():
    s = load_scenario("mnist1d-small")   # fitted on real runs: a per-seed effect, a switch
    m = loss_model_for(s, calibrated=False)   # the level law as fitted (the built-in ships calibrated)
    past, nxt = ["full"] * 2, ["full"] * 3 + ["pruned-0.5"] * 5
    mu, sd, _ = m.path(past, 1.0)
    observed = mu[1:] * np.exp(1.0 * sd[1:])        # a seed one sd above the median at every epoch so far
    w = 0.2 * sd[1:]

    def keep(t):
        return np.all(np.abs(np.log(t[:, 1:3] / observed)) < w, axis=1)

    d = m.distribution(nxt, 1.0, start=RunState(2, "full", tuple(observed), schedule=tuple(past)))
    conditional_check(m, past, nxt, observed, keep, 1_000_000, 2, tol=0.04 * d.std())
    assert d.exact is not None and d.exact.median() == pytest.approx(d.quantile(0.5), abs=2 * d.error_bound + 1e-4)


@pytest.mark.parametrize("name", ["paper-mobilenet", "mnist1d-small"])
def test_no_state_is_todays_law_bit_for_bit(name):
    m = loss_model_for(load_scenario(name), calibrated=False)   # the law's lattice (mnist1d-small ships calibrated)
    sched = [m.model_names[0]] * 5 + [m.model_names[1]] * 3
    a, b = m.distribution(sched), m.distribution(sched, start=RunState())
    assert np.array_equal(a.pmf, b.pmf) and (a.i0, a.h, a.offset) == (b.i0, b.h, b.offset)
    ra = m.simulate(sched, 1.0, 100, np.random.default_rng(3))
    rb = m.simulate(sched, 1.0, 100, np.random.default_rng(3), start=RunState())
    assert np.array_equal(ra, rb)


@pytest.mark.parametrize("name", ["paper-mobilenet", "mnist1d-small"])
def test_a_state_without_observed_losses_is_the_whole_schedule(name):
    m = loss_model_for(load_scenario(name))
    past, nxt = [m.model_names[0]] * 3, [m.model_names[0]] * 4
    d = m.distribution(nxt, start=RunState(3, past[-1], schedule=tuple(past)))
    whole = m.distribution(past + nxt)
    assert d.quantile(0.9) == pytest.approx(whole.quantile(0.9), abs=2 * whole.error_bound + 1e-9)
