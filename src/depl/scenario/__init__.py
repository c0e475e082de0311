"""The system model: a validated scenario, read once from TOML.

A scenario names the clusters of nodes (N), the datasets (D), the model
versions (M) with their loss law, the allowed switches between versions, and
the target: the ω-quantile of the final test loss at or below ℓmax by Tmax.

Everything is checked here, at the boundary (pydantic); the planners trust a
`Scenario` and never re-check it.  A bad file raises `ScenarioError`, whose
message names the file, the field, the bad value and why.

The package, by what each part is about: base.py (the strict base of every
table, names, the errors), documents.py (reading text: TOML, nesting, one-line
errors), model.py (the system model and `parse_scenario`), checks.py (the checks
across its tables), increments.py and level.py (each loss law's parameter
tables; parameters.py registers a law's own tables), distributions.py (noise
and jumps), training.py (`depl run`'s options), calibration.py (the
[calibration] table), code.py (references to code), load.py (files and
built-in scenarios).  ω's type and range are depl.omega's.

>>> s = load_scenario("paper-alexnet")
>>> s.target.quantile
0.99
"""

from __future__ import annotations

from ..omega import OMEGA_MAX, OMEGA_MIN, OMEGA_RULE, Omega, check_omega, omega_problem
from .base import MAGNITUDE, FieldError, ScenarioError, Strict, control_character, name_problem
from .calibration import CALIBRATION_METHODS, CalibrationExperiment, CalibrationTable, Conditions, Mismatch, scores_at
from .checks import COST_MODELS, PHI_MAX
from .code import BUILTIN_LOSSES, BUILTIN_NETS, BUILTIN_SOURCES
from .distributions import DistSpec
from .documents import MAX_NESTING, read_toml, shown_value, too_deep, unreadable_text
from .increments import Progress, expected_progress
from .level import LOG_SD_MAX, LevelLaw, LevelSwitch
from .load import BUILTIN_PACKAGE, builtin_names, load_scenario, scenario_source, with_target
from .model import Cluster, DataLaw, Dataset, Measured, ModelVersion, Scenario, Switch, Target, parse_scenario, scenario_dict
from .parameters import LawParameters, register_parameters
from .training import TrainingOptions, TrainSpec

__all__ = [
    "BUILTIN_LOSSES", "BUILTIN_NETS", "BUILTIN_PACKAGE", "BUILTIN_SOURCES", "CALIBRATION_METHODS", "COST_MODELS", "LOG_SD_MAX",
    "MAGNITUDE", "MAX_NESTING", "OMEGA_MAX", "OMEGA_MIN", "OMEGA_RULE", "PHI_MAX",
    "CalibrationExperiment", "CalibrationTable", "Cluster", "Conditions", "Mismatch", "DataLaw", "Dataset", "DistSpec", "FieldError", "LawParameters",
    "LevelLaw", "LevelSwitch", "Measured", "ModelVersion", "Omega", "Progress", "Scenario", "ScenarioError",
    "Strict", "Switch", "Target", "TrainSpec", "TrainingOptions",
    "builtin_names", "check_omega", "control_character", "expected_progress", "load_scenario", "name_problem",
    "omega_problem", "parse_scenario", "read_toml", "register_parameters", "scenario_dict", "scenario_source",
    "scores_at", "shown_value", "too_deep", "unreadable_text", "with_target",
]
