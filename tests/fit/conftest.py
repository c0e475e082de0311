"""A small scenario under the level law, shared by the loss-model and planner tests."""

from __future__ import annotations

import copy

import pytest

from depl.scenario import parse_scenario

LEVEL = {
    "name": "level-toy",
    "initial_loss": 2.3,
    "loss_model": "level",
    "max_epochs": 30,
    "target": {"loss": 0.9, "quantile": 0.9, "deadline": 200.0},
    "data_law": {"s0": 4000.0, "reference_samples": 4000.0},
    "clusters": [
        {"name": "edge", "capacity": 400.0, "bandwidth": 50.0, "unit_cost": 1.0, "nodes": 2},
        {"name": "far-edge", "capacity": 200.0, "bandwidth": 200.0, "unit_cost": 0.8, "nodes": 2},
    ],
    "datasets": [{"name": "a", "samples": 2000.0}, {"name": "b", "samples": 2000.0}],
    "models": [
        {"name": "full", "size": 30.0, "work": 1.0, "progress": {"A": 0.25, "B": 1.0},
         "noise": {"family": "norm", "params": {"loc": 1.0, "scale": 1.0}},
         "level": {"curve": "exp", "floor": 0.3, "floor_exponent": 0.6, "scale": 6.0, "shape": 1.0,
                   "sigma0": 0.01, "sigma1": 0.05, "seed_share": 0.2}},
        {"name": "small", "size": 2.0, "work": 0.1, "progress": {"A": 0.2, "B": 1.0},
         "noise": {"family": "norm", "params": {"loc": 1.0, "scale": 1.0}},
         "level": {"curve": "power", "floor": 0.25, "floor_exponent": 0.6, "scale": 9.0, "shape": 1.2,
                   "sigma0": 0.02, "sigma1": 0.07, "seed_share": 0.5}},
    ],
    "switches": [{"from": "full", "to": "small", "jump": {"family": "norm", "params": {"loc": 0.1, "scale": 0.05}},
                  "level": {"offset": 0.3, "recovery": 0.5, "sigma": 0.08}}],
}


@pytest.fixture
def level_data():
    return copy.deepcopy(LEVEL)


@pytest.fixture
def level_scenario(level_data):
    return parse_scenario(level_data, "level-toy")
