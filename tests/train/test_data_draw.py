"""Runs that draw their own data (`[training] data_draw = "run"`): each seed trains and is tested on its own draw —
MNIST-1D samples of the generator's pool, a new train/test split of other sources (or your factory's own draw
where it takes `seed`), its own data fraction and split over nodes — and the certificate covers that randomness.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from depl.plan import Plan
from depl.scenario import parse_scenario, scenario_dict as as_dict
from depl.store import Store
from depl.train.task import data as data_mod
from depl.train.engine import execute
from depl.train.backends import executors
from depl.train.loops.certify import covers
from depl.train.engine import federation
from depl.train.engine.federation import job_from_plan, node_data
from trainkit import SWITCH_PLAN, make_plan, scenario_dict

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not


def drawn_plan(schedule, **kw) -> Plan:
    p = make_plan(schedule, **kw)
    d = dict(p.scenario_spec)
    d["training"] = {**d["training"], "data_draw": "run"}
    p.scenario_spec = d
    return p


def test_each_seed_draws_its_own_data_and_the_same_seed_the_same():
    job = job_from_plan(drawn_plan(SWITCH_PLAN[:2], source="digits", net="cnn2d"))
    fixed = job_from_plan(make_plan(SWITCH_PLAN[:2], source="digits", net="cnn2d"))
    assert job.data.draws == "run" and not job.stackable and fixed.stackable and fixed.seeded(3) is fixed
    a, b, a2 = job.seeded(0).data, job.seeded(1).data, job.seeded(0).data
    assert a.draw is not None and a.draw != b.draw and a == a2
    xa, ya = federation.test_data(a)
    xb, _ = federation.test_data(b)
    assert not np.array_equal(xa.numpy(), xb.numpy())          # another test set
    np.testing.assert_array_equal(xa.numpy(), federation.test_data(a2)[0].numpy())
    src, own = fixed.data.load(), a.load()
    assert own.x_train.shape == src.x_train.shape and own.x_test.shape == src.x_test.shape  # the same sizes
    # a new split of the same 1,797 images: together they are the source's, each image once
    every = lambda s: sorted(map(bytes, np.concatenate([s.x_train, s.x_test]).reshape(len(s.y_train) + len(s.y_test), -1)))
    assert every(own) == every(src)
    # the node split follows the draw too
    n0 = node_data(a, 2, True, 0)[1].numpy()
    n1 = node_data(b, 2, True, 0)[1].numpy()
    assert len(n0) + len(node_data(a, 2, True, 1)[1]) == len(data_mod.select(a)[1]) and not np.array_equal(n0, n1)


def test_mnist1d_draws_come_from_the_generators_pool_not_the_canonical_samples():
    spec = data_mod.DataSpec("mnist1d", ((0.0, 1.0),), draws="run").seeded(5)
    own, canon = spec.load(), data_mod.mnist1d()
    assert own.x_train.shape == canon.x_train.shape and own.x_test.shape == canon.x_test.shape
    pool_x, _ = data_mod.mnist1d_pool()
    rows = {bytes(r) for r in pool_x.reshape(len(pool_x), -1)}
    assert all(bytes(r) in rows for r in own.x_train.reshape(len(own.x_train), -1)[:200])
    assert not any(bytes(r) in rows for r in canon.x_train.reshape(len(canon.x_train), -1)[:200])
    train = {bytes(r) for r in own.x_train.reshape(len(own.x_train), -1)}
    assert not any(bytes(r) in train for r in own.x_test.reshape(len(own.x_test), -1))  # train and test apart
    assert abs(float(pool_x.mean())) < 0.1 and abs(float(pool_x.std()) - 1.0) < 0.1  # normalised as the source


def test_a_dirichlet_partition_is_drawn_per_run():
    s = data_mod.DataSpec("mnist1d", ((0.0, 0.5),), alpha=0.5, draws="run")
    counts = [np.bincount(node_data(s.seeded(seed), 4, False, 0)[1].numpy(), minlength=10) for seed in (0, 1)]
    assert not np.array_equal(*counts)
    fixed = replace(s, draws="fixed")
    assert np.array_equal(node_data(fixed, 4, False, 0)[1].numpy(), node_data(fixed.seeded(7), 4, False, 0)[1].numpy())


def test_every_executor_trains_a_drawn_seed_the_same_and_resumes_it(tmp_path):
    job = job_from_plan(drawn_plan(SWITCH_PLAN[:3], source="digits", net="cnn2d", width=8))
    rid = execute.run_id_for(job, "local")
    assert rid != execute.run_id_for(job_from_plan(make_plan(SWITCH_PLAN[:3], source="digits", net="cnn2d", width=8)),
                                      "local")   # another kind of run: another identity
    seeds = [0, 1, 2]
    out = {}
    for name in ("loop", "stack", "processes"):
        with Store(tmp_path / f"{name}.sqlite") as st:
            execute.register(st, rid, "plan", job)
            executors.run_all(st, [(rid, job, seeds)], executor=name, workers=2, seed_batch=3)
            out[name] = {s: [r.test_loss for r in st.trajectory(rid, s)] for s in seeds}
    # a stack trains every seed on its own draw (vectorised.StackData): the loop's trajectory to float rounding
    # (its batched products sum in another order); the workers cut the seeds into a stack and a loop
    for s in seeds:
        assert out["stack"][s] == pytest.approx(out["loop"][s], rel=1e-5)
        assert out["processes"][s] == pytest.approx(out["loop"][s], rel=1e-5)
    assert out["stack"] != out["loop"]
    assert len({v[-1] for v in out["loop"].values()}) == 3


def factory_code(name: str, signature: str, n: int) -> str:
    """The source of a data factory `name(signature)`: n samples of 8 values in 3 classes drawn from `seed`,
    the first two thirds to train on."""
    cut = 2 * n // 3
    return (f"import torch\ndef {name}({signature}):\n"
            "    g = torch.Generator().manual_seed(seed)\n"
            f"    x = torch.randn({n}, 1, 8, generator=g)\n"
            f"    y = torch.arange({n}) % 3\n"
            f"    return (x[:{cut}], y[:{cut}]), (x[{cut}:], y[{cut}:])\n")


def test_your_factory_draws_with_its_seed_or_is_split_anew(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPL_CODE", str(tmp_path))
    (tmp_path / "mydata.py").write_text(factory_code("seeded", "seed=0", 60) + "def plain():\n    return seeded(0)\n")
    a = data_mod.load_source("mydata:seeded", None, str(tmp_path), draw=11)
    b = data_mod.load_source("mydata:seeded", None, str(tmp_path), draw=12)
    assert not np.array_equal(a.x_train, b.x_train)
    base = data_mod.load_source("mydata:plain", None, str(tmp_path))
    c = data_mod.load_source("mydata:plain", None, str(tmp_path), draw=11)
    assert c.x_train.shape == base.x_train.shape and not np.array_equal(c.x_test, base.x_test)
    assert sorted(map(bytes, np.concatenate([c.x_train, c.x_test]))) == \
        sorted(map(bytes, np.concatenate([base.x_train, base.x_test])))


def test_the_certificate_says_what_it_covers():
    fixed = parse_scenario(scenario_dict(), "t")
    d = scenario_dict()
    d["training"]["data_draw"] = "run"
    drawn = parse_scenario(d, "t")
    assert "are the same as in these runs" in covers(fixed)
    assert "its own MNIST-1D train and test samples" in covers(drawn) and "same as" not in covers(drawn)
    assert "data_draw" not in as_dict(fixed)["training"] and as_dict(drawn)["training"]["data_draw"] == "run"


def test_a_calibration_of_another_draw_certifies_nothing(tmp_path):
    from depl.scenario import load_scenario

    s = load_scenario("mnist1d-noniid")
    d = as_dict(s)
    other = "fixed" if s.training.data_draw == "run" else "run"
    d["calibration"]["data_draw"] = other
    d["target"]["alpha"] = 0.05
    t = parse_scenario(d, "noniid, calibrated on another draw")
    why = t.calibration_mismatch()
    assert why is not None and "certify nothing" in why and f'data_draw = "{s.training.data_draw}"' in why
    from depl.loss import loss_model_for

    assert loss_model_for(t).certified_schedules == {}
    if s.calibration is not None and s.calibration.data_draw == s.training.data_draw:
        assert s.calibration_mismatch() is None


def test_the_closed_loop_spends_no_slack_that_runs_of_another_draw_would_back():
    from depl.adaptive import Policy
    from depl.planners import make_plan

    d = as_dict(__import__("depl.scenario", fromlist=["load_scenario"]).load_scenario("mnist1d-small"))
    d["training"]["data_draw"] = "fixed"            # its calibration ran on drawn data
    s = parse_scenario(d, "fixed draw, drawn calibration")
    assert s.calibration_mismatch()
    p = make_plan(s)
    assert "certificate" not in p.info
    slack = Policy(p).slack_record
    assert slack.delta == 0.0 and slack.source == "none"


def test_a_factory_that_always_draws_gives_its_draw_0_where_one_fixed_draw_is_needed(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPL_CODE", str(tmp_path))
    (tmp_path / "always.py").write_text(factory_code("load", "seed", 30))
    fixed = data_mod.load_source("always:load", None, str(tmp_path))
    np.testing.assert_array_equal(fixed.x_train, data_mod.load_source("always:load", None, str(tmp_path), draw=0).x_train)
    assert not np.array_equal(fixed.x_train, data_mod.load_source("always:load", None, str(tmp_path), draw=5).x_train)


def test_calibrating_on_runs_of_another_draw_is_refused(depl_cli, tmp_path):
    from depl.fit.report import toml_dumps
    from depl.scenario import load_scenario

    d = as_dict(load_scenario("digits-small"))
    assert d["training"]["data_draw"] == "run"
    r = depl_cli("profile", "digits-small", "--epochs", "2", "--seeds", "2", "--version", "pruned-0.5", "--nodes", "2",
                 "--out", tmp_path / "p")
    assert r.returncode == 0, r.stderr
    d["training"]["data_draw"] = "fixed"
    (tmp_path / "fixed.toml").write_text(toml_dumps(d))
    r = depl_cli("calibrate", tmp_path / "fixed.toml", tmp_path / "p" / "runs.sqlite", "--out", tmp_path / "c.toml")
    assert r.returncode == 2 and 'data_draw = "run"' in r.stderr and "depl profile SCENARIO" in r.stderr, r.stderr
    assert not (tmp_path / "c.toml").exists()
