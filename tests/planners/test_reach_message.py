"""An infeasibility message names what binds: a law that certifies nothing useful is not a deadline too short."""

from __future__ import annotations

import tomllib
from importlib.resources import files

import pytest

from depl.planners import make_plan
from depl.planners.common import Infeasible
from depl.scenario import parse_scenario


def _mnist1d_small(**calibration):
    d = tomllib.loads(files("depl.scenarios").joinpath("mnist1d-small.toml").read_text())
    d["calibration"] = {**d.get("calibration", {}), **calibration}
    d["calibration"].pop("epoch_scores", None)
    d["calibration"].pop("experiments", None)   # the pooled scores alone
    return parse_scenario(d)


def test_a_calibration_that_reaches_no_level_is_not_called_a_deadline_too_short():
    # every held-out run above the law's whole range: the conformal level is 1, no finite ω-quantile
    s = _mnist1d_small(scores=[1.0] * 12, use=True)
    with pytest.raises(Infeasible) as e:
        make_plan(s, "depl")
    msg = str(e.value)
    assert "certifies no 0.9-quantile below" in msg and "cannot even run" not in msg


def test_a_deadline_no_epoch_fits_in_is_said_so():
    s = _mnist1d_small(use=False)
    s = s.model_copy(update={"target": s.target.model_copy(update={"deadline": 1e-6})})
    with pytest.raises(Infeasible) as e:
        make_plan(s, "depl")
    assert "No schedule can even run within the deadline" in str(e.value)
