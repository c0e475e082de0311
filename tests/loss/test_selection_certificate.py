"""The certificate holds for the plan picked, not only for a plan fixed in advance: Monte Carlo over the
calibration runs of synthetic landscapes where many cheaper schedules meet ℓmax a little less often than ω
(benchmarks/bench_selection.py: the landscapes, and the table in docs/certificate.md at full size).

The planner returns the cheapest schedule the calibrated law certifies at (ℓmax, ω).  Over fresh draws of the
calibration runs, P(its true coverage < ω) must be ≤ α (within Monte Carlo error) — checked against the exact
coverages the landscape was built with, not against the code under test.  The marginal split-conformal count
fails the same check: the test sees the difference.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from depl.certificate import clopper_pearson_lower

_spec = importlib.util.spec_from_file_location(
    "bench_selection", Path(__file__).resolve().parents[2] / "benchmarks" / "bench_selection.py")
bench = sys.modules["bench_selection"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def _wrong(n, cheap, alpha, reps, seed, experiments=1):
    p, predicted = bench.landscape(cheap + 12, cheap)
    rng = np.random.default_rng(seed)
    got = np.array([bench.picked(p, predicted, n, rng, alpha, experiments) for _ in range(reps)])
    return int(np.sum(got < bench.OMEGA)), float(np.mean(np.isfinite(got)))


@pytest.mark.slow  # a Monte Carlo of selections
@pytest.mark.parametrize("n,cheap,experiments", [(40, 12, 1), (80, 30, 1), (60, 16, 3)])
def test_the_returned_plan_meets_omega_with_confidence(n, cheap, experiments):
    reps = 1500
    wrong, certified = _wrong(n, cheap, bench.ALPHA, reps, 20261126 + n, experiments)
    # P(wrong) ≤ α, refuted only where the one-sided 99.9% Clopper–Pearson lower bound of its frequency passes α
    assert clopper_pearson_lower(wrong, reps, 0.001) <= bench.ALPHA, (wrong, reps)
    assert certified > 0.5   # and it certifies something most of the time (power)


def test_the_marginal_count_fails_after_selection():
    wrong, _ = _wrong(80, 30, None, 800, 7)
    assert clopper_pearson_lower(wrong, 800, 0.001) > 2 * bench.ALPHA   # what the confidence rule prevents


def test_on_real_runs_the_returned_plan_meets_omega_with_confidence():
    """The same on real trajectories: the coverage table's plans (docs/coverage-store), each prefix a candidate,
    n = 30 of their 200 held-out runs per draw, the truth the share of all 200 that met ℓmax."""
    root = Path(__file__).resolve().parents[2]
    cells = bench.real_cells(str(root / "docs" / "coverage-store"))
    assert len(cells) >= 20
    rng = np.random.default_rng(30)
    for c in cells:
        got = np.array([bench.picked_real(c, 30, rng, bench.ALPHA) for _ in range(60)])
        wrong = int(np.sum(got < c["omega"]))
        assert clopper_pearson_lower(wrong, got.size, 0.001) <= bench.ALPHA, (c["key"], wrong)
