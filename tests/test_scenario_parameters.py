"""Each loss law's parameter tables are registered beside it in depl.scenario, and ω has one range and message."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from depl.scenario import (LevelLaw, LevelSwitch, ModelVersion, ScenarioError, Switch, check_omega, load_scenario,
                           omega_problem, parse_scenario, register_parameters, scenario_dict, with_target)
from depl.scenario.parameters import _BY_LAW


def test_the_level_laws_tables_are_fields_of_every_version_and_switch():
    assert ModelVersion.model_fields["level"].annotation == LevelLaw | None
    assert Switch.model_fields["level"].annotation == LevelSwitch | None
    assert list(ModelVersion.model_fields)[-1] == "level" and list(Switch.model_fields)[-1] == "level"
    assert {"level", "level-memory"} <= set(_BY_LAW) and _BY_LAW["level-memory"].table == "level"


def test_another_law_may_read_a_registered_table_but_no_new_table_comes_after_the_models():
    try:
        register_parameters("level-again", table="level", version=LevelLaw, switch=LevelSwitch,
                            version_about="", switch_about="")
        with pytest.raises(ValueError, match="with other parameter models"):
            register_parameters("level-other", table="level", version=LevelSwitch, switch=LevelSwitch,
                                version_about="", switch_about="")
    finally:
        _BY_LAW.pop("level-again", None)

    class Mine(BaseModel):
        x: float

    with pytest.raises(ValueError, match="after the scenario's models were made"):
        register_parameters("mine", table="mine", version=Mine, switch=Mine, version_about="", switch_about="")
    assert "mine" not in _BY_LAW and "mine" not in ModelVersion.model_fields


@pytest.mark.parametrize("value, ok", [(1e-6, True), (0.5, True), (1 - 1e-6, True), (0.0, False), (1e-7, False),
                                       (1 - 1e-7, False), (1.0, False), (float("nan"), False), (-0.5, False)])
def test_omega_has_one_range_for_the_scenario_and_for_everything_else(value, ok):
    base = scenario_dict(load_scenario("paper-alexnet"))
    if ok:
        assert check_omega(value, "--omega") == value and omega_problem(value) is None
        assert parse_scenario(with_target(base, quantile=value)).target.quantile == value
    else:
        assert omega_problem(value, "--omega") == (f"--omega {value}: must be in [1e-6, 1 - 1e-6] "
                                                   "(ω, as [target] quantile)")
        with pytest.raises(ValueError, match=r"must be in \[1e-6, 1 - 1e-6\]"):
            check_omega(value)
        with pytest.raises(ScenarioError, match="target.quantile"):
            parse_scenario(with_target(base, quantile=value))
