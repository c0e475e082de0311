"""Shared fixtures of the real-training tests: small scenarios and hand-written plans.

Everything here trains for real on MNIST-1D (generated in memory) with a
narrow 1-D CNN, so a test takes seconds on two cores.
"""

from __future__ import annotations

import os

os.environ["FLWR_TELEMETRY_ENABLED"] = "0"
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from trainkit import SWITCH_PLAN, make_plan  # noqa: E402


@pytest.fixture
def plan_file(tmp_path):
    p = tmp_path / "plan.json"
    make_plan(SWITCH_PLAN).save(p)
    return p
