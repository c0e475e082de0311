"""The built-in real tasks beyond mnist1d-small: each plans feasibly and its plan trains for real."""

import json

import numpy as np
import pytest

from depl.plan import Plan, with_figures
from depl.scenario import builtin_names, load_scenario, parse_scenario
from depl.store import Store

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not

TASKS = {"digits-small": ("digits", None), "mnist1d-noniid": ("mnist1d", 0.5)}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_a_builtin_task_plans_feasibly_and_its_plan_trains_for_real(depl_cli, name, tmp_path):
    assert name in builtin_names()
    s = load_scenario(name)
    assert s.max_epochs and all(m.train is not None for m in s.models)  # fitted on profiles, trainable
    plan_file = tmp_path / "plan.json"
    r = depl_cli("plan", name, "--out", plan_file)
    assert r.returncode == 0, r.stderr
    plan = json.loads(plan_file.read_text())
    assert plan["feasible"] and plan["loss_quantile"] <= s.target.loss
    assert plan["time"] <= s.target.deadline * (1 + 1e-9)  # eq. (1) summed over epochs: float rounding only
    # the plan's first epoch, trained for real on one seed (a whole plan is validate's business)
    # (a plan cut short is another plan: its figures are recomputed, or reading it refuses the old ones)
    p = Plan.from_json(plan)
    p.epochs = p.epochs[:1]
    one = tmp_path / "one-epoch.json"
    # (one epoch is no schedule its calibration runs certify: its figures are the law's as fitted)
    spec = {**plan["scenario_spec"], "calibration": {**plan["scenario_spec"]["calibration"], "use": False}}
    with_figures(p, parse_scenario(spec)).save(one)
    r = depl_cli("run", one, "--seeds", "1", "--workers", "1", "--out", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    with Store(tmp_path / "out" / "runs.sqlite") as st:
        (run,) = st.runs("plan")
        data = run["spec"]["job"]["data"]
        source, alpha = TASKS[name]
        assert data["source"] == source and data.get("alpha") == alpha and data["draws"] == "run"
        (row,) = st.trajectory(run["run_id"], 0)
        assert np.isfinite(row.test_loss) and row.test_loss < s.initial_loss + 0.1
