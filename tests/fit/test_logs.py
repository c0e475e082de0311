"""`depl fit LOGS.csv`: a user's own training logs, fitted and planned with, without torch."""

from __future__ import annotations

import json

import numpy as np
import pytest

from depl.fit.logs import read_logs
from depl.fit.runs import FitError
from depl.loss import LevelModel
from depl.plan import Plan
from depl.scenario import load_scenario

from .logs_law import L0, LAW, median, rows, write_csv

# the CLI in a fresh interpreter that reports, on exit, whether torch was ever imported
CLI = ("import atexit, sys; atexit.register(lambda: print('torch imported:', 'torch' in sys.modules, file=sys.stderr));"
       "from depl.cli import main; main()")


@pytest.mark.slow
def test_a_handwritten_csv_is_fitted_without_torch_and_planned_with(depl_cli, tmp_path):
    logs = tmp_path / "logs.csv"
    write_csv(logs, rows())
    out = tmp_path / "mine.toml"
    # three seeds of each experiment set apart for calibration: with two, its pre-switch epochs hold 8 distinct
    # runs (the switch experiment's first epochs are its parent's), too few to use at all
    r = depl_cli("fit", logs, "--target-loss", "0.7", "--deadline", "12", "--bootstrap", "0", "--calibration-seeds",
                 "3", "--out", out, code=CLI)
    assert r.returncode == 0, r.stderr
    assert "torch imported: False" in r.stderr and "one-cluster template" in r.stdout
    s = load_scenario(out)
    assert [m.name for m in s.models] == ["big", "small"]       # the log's model names are the versions
    assert s.initial_loss == pytest.approx(L0) and s.max_epochs == 12 and s.clusters[0].nodes == 2
    assert s.name == "logs-fitted" and s.fitted_epochs == 12     # its own name; the epochs the law was fitted on
    assert s.loss_model == "level"                               # the law that generated the logs
    assert {(w.from_, w.to) for w in s.switches} == {("big", "small")}
    fitted = LevelModel(s)
    for m in LAW:                                                # the fitted median follows the true one
        mu, _, _ = fitted.path([m] * 12, 1.0)
        np.testing.assert_allclose(mu[1:], median(m, np.arange(1, 13)), rtol=0.08)
    plan = tmp_path / "plan.json"
    # with confidence 0.95 (the default α) its calibration certifies no schedule; the law as fitted plans, without
    # a certificate
    r = depl_cli("plan", out, "--out", plan, code=CLI)
    # (logs do not say what their runs trained under — nodes, data, [training] options —, so their calibration runs
    # certify no plan with a confidence: refused, saying so and what would)
    assert r.returncode == 3 and "conditions were not recorded (runs read from training logs" in r.stderr, r.stderr
    assert "`depl calibrate SCENARIO RUNS`" in r.stderr
    r = depl_cli("plan", out, "--out", plan, "--uncalibrated", code=CLI)
    assert r.returncode == 0, r.stderr
    p = Plan.load(plan)
    assert p.feasible and p.loss_quantile <= 0.7 and set(p.schedule) <= {"big", "small"}
    assert "warning" not in r.stderr
    # max_epochs raised past the fitted epochs: allowed, but every use of the law beyond them is said on stderr
    longer = tmp_path / "longer.toml"
    longer.write_text(out.read_text().replace("max_epochs = 12", "max_epochs = 20"))
    r = depl_cli("predict", longer, "big:16", "--json", code=CLI)
    assert r.returncode == 0 and json.loads(r.stdout)["beyond_fitted_epochs"] is True
    assert "warning: K = 16 epochs runs the loss law of 'logs-fitted' beyond the 12 epochs it was fitted on" in r.stderr


def test_parquet_reads_as_the_csv(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    data = rows(seeds=3, epochs=4, switch_at=2)
    write_csv(tmp_path / "l.csv", data)
    pq.write_table(pa.Table.from_pylist(data), tmp_path / "l.parquet")
    a, b = read_logs(tmp_path / "l.csv"), read_logs(tmp_path / "l.parquet")
    assert a.models == b.models == ["big", "small"] and a.nodes == b.nodes == 2
    for run in a.runs:
        np.testing.assert_array_equal(a.runs[run]["losses"], b.runs[run]["losses"])
    exps = {e.label: e for e in a.profile(100.0).experiments}
    assert exps["big→small@2"].schedule == ["big", "big", "small", "small"]
    assert exps["big@0.5"].samples == 50.0


def _edit(data, run, seed, epoch, **change):
    for r in data:
        if (r["run"], r["seed"], r["epoch"]) == (run, seed, epoch):
            r.update(change)
    return data


BAD = [
    ("missing column", lambda d: d, ["run", "seed", "epoch", "model"], "column 'test_loss' is missing"),
    ("not a number", lambda d: _edit(d, "big-full", 1, 3, test_loss="n/a"), None,
     "column test_loss: 'n/a': not a number"),
    ("NaN", lambda d: _edit(d, "big-full", 1, 3, test_loss="nan"), None, "column test_loss: 'nan': not a finite number"),
    ("duplicate", lambda d: d + [dict(d[5])], None, "repeats line 7"),
    ("gap", lambda d: [r for r in d if (r["run"], r["seed"], r["epoch"]) != ("small-full", 2, 3)], None,
     "run 'small-full', seed 2: epoch 3 is missing"),
    ("no epoch 0", lambda d: [r for r in d if (r["run"], r["seed"], r["epoch"]) != ("small-full", 0, 0)], None,
     "epoch 0 (the untrained network, ℓ(0)) is missing"),
    ("two switches", lambda d: _edit(d, "big-to-small", 0, 4, model="big"), None, "switches a second time"),
    ("seeds disagree", lambda d: _edit(d, "big-full", 1, 2, model="small"), None, "every seed of a run follows one schedule"),
    ("fraction", lambda d: _edit(d, "big-full", 0, 1, data_fraction=1.5), None, "data_fraction: '1.5': must be in (0, 1]"),
    ("few seeds", lambda d: [r for r in d if r["seed"] < 2], None, "at least 3 are needed"),
]


@pytest.mark.parametrize("what,edit,columns,message", BAD, ids=[b[0] for b in BAD])
def test_a_bad_log_names_the_file_the_row_and_why(tmp_path, what, edit, columns, message):
    path = tmp_path / "bad.csv"
    write_csv(path, edit(rows(seeds=3, epochs=5, switch_at=2)), columns)
    with pytest.raises(FitError) as e:
        read_logs(path)
    assert str(e.value).startswith(str(path)) and message in str(e.value), str(e.value)


def test_bad_log_exits_2_with_one_line(depl_cli, tmp_path):
    path = tmp_path / "bad.csv"
    write_csv(path, _edit(rows(seeds=3, epochs=3, switch_at=1), "big-half", 2, 2, test_loss="oops"))
    r = depl_cli("fit", path, code=CLI)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{path}: line " in r.stderr and "column test_loss: 'oops': not a number" in r.stderr
    r = depl_cli("fit", tmp_path / "absent.csv", code=CLI)
    assert r.returncode == 2 and "no such log file" in r.stderr
