"""Adaptive runs for real (tiny): validation split, decisions in the store, stop, resume, `runs show`."""

import json
import subprocess
import sys

import numpy as np

from depl.plan import Epoch, Plan, with_scenario
from depl.scenario import parse_scenario
from depl.store import Store
from depl.train import adaptive as ad
from depl.train import data as data_mod
from trainkit import scenario_dict


def plan_file(tmp_path, target: float, epochs: int = 4):
    d = scenario_dict(lr=0.2)
    d["target"] = {**d["target"], "loss": target, "quantile": 0.9}
    s = parse_scenario(d)
    p = with_scenario(Plan("hand", "tiny", True, ["d1", "d2"], [Epoch(k + 1, "full", "A", 100.0) for k in range(epochs)],
                           0.0, 0.0, 0.0, 0.0, 0.0, omega=0.9, loss_target=target, deadline=s.target.deadline), s)
    f = tmp_path / "plan.json"
    p.save(f)
    return Plan.load(f)


def depl(*args):
    return subprocess.run([sys.executable, "-c", "from depl.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=600)


def test_the_validation_split_is_held_out_deterministically_and_apart_from_training():
    spec = data_mod.DataSpec("mnist1d", ((0.0, 0.5),), validation=0.1)
    xv, yv = data_mod.validation(spec)
    xt, yt = data_mod.select(spec)
    assert len(yv) == 200 and len(yt) == 1800
    train_rows = {r.tobytes() for r in xt}
    assert not any(r.tobytes() in train_rows for r in xv)       # never trained on
    assert np.array_equal(data_mod.validation(spec)[1], yv)     # the same split every time
    assert data_mod.DataSpec("mnist1d", ((0.0, 0.5),)).to_json().get("validation") is None  # old runs keep their identity


def test_an_adaptive_seed_decides_after_every_epoch_on_the_validation_split_and_records_it(tmp_path):
    plan = plan_file(tmp_path, target=2.0)
    job = ad.adaptive_job(plan)
    with Store(tmp_path / "runs.sqlite") as st:
        rid = ad.run_id_for(job, {}, True)
        st.start_run(rid, "plan", {"adaptive": True})
        taken = ad.run_seed(st, rid, job, plan, 7)
        traj = st.trajectory(rid, 7)
        ds = st.decisions(rid, 7)
        assert [d["epoch"] for d in ds] == list(range(len(traj) + 1)) and ds[-1]["rest"] == []
        assert ds[-1]["action"] in ("stop", "end") and [d.action for d in taken] == [d["action"] for d in ds]
        # decided on the validation split, not the test set
        assert all(d["observed"] != r.test_loss for d, r in zip(ds[1:], traj))
        for d in taken[:-1]:  # the rule: no decision lowers the conditional probability of meeting ℓmax
            assert d.p_new >= d.p_plan
        assert ds[-1]["cost_spent"] > 0 and ds[-1]["time_spent"] > 0
        assert ad.finished(st, rid, 7) and ad.run_seed(st, rid, job, plan, 7) == []   # nothing left to train
    r = depl("runs", "show", "--store", str(tmp_path / "runs.sqlite"), "--json")
    assert r.returncode == 0, r.stderr
    (run,) = json.loads(r.stdout)["runs"]
    assert [d["action"] for d in run["decisions"]] == [d["action"] for d in ds]


def test_run_adaptive_refuses_bad_input_with_one_line(tmp_path):
    f = tmp_path / "plan.json"
    plan_file(tmp_path, target=2.25)
    for bad, why in ((["--slow", "nope:2"], "no such cluster"), (["--slow", "A:0"], "CLUSTER:FACTOR"),
                     (["--backend", "flower"], "local back end")):
        r = depl("run", str(f), "--adaptive", *bad, "--out", str(tmp_path / "o"))
        assert r.returncode == 2 and why in r.stderr and "Traceback" not in r.stderr
