"""A seed whose loss becomes non-finite is recorded as diverged at its epoch; the run goes on.

Before: a NaN test loss hit `epochs.test_loss NOT NULL` and the run died at the same epoch on
every resume.  Now the seed is over (not resumed), `runs show` lists it, `validate` counts it as
a miss (ℓ(K) = +inf), `fit` skips it, and the other seeds — also those stacked with it in one
vectorised batch — train exactly as they would have without it.
"""

from __future__ import annotations

import io
import json
import math
from importlib import resources

import pytest
import torch

from depl.store import EpochRow, Store, StoreError
from depl.train.engine import execute
from depl.train.engine.federation import job_from_plan
from depl.train.backends.executors import run_all
from depl.train.engine.vectorised import walk_plan_stack
from trainkit import SWITCH_PLAN, make_plan

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not


def test_a_run_with_a_huge_learning_rate_records_every_seed_as_diverged_and_resumes_cleanly(depl_cli, tmp_path):
    scen = resources.files("depl.scenarios").joinpath("mnist1d-small.toml").read_text()
    assert "\nlr = 0.02\n" in scen
    (tmp_path / "huge.toml").write_text(scen.replace("\nlr = 0.02\n", "\nlr = 100000.0\n"))
    r = depl_cli("plan", "huge.toml", "--uncalibrated", "--out", "plan.json", cwd=tmp_path)  # lr not the calibration runs'
    assert r.returncode == 0, r.stderr
    # two seeds: one vectorised batch of 2 with --workers 1
    r = depl_cli("run", "plan.json", "--seeds", "2", "--out", "o", "--workers", "1", cwd=tmp_path)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "2 of 2 runs diverged (seed 0 at epoch 1, seed 1 at epoch 1)" in r.stdout
    with Store(tmp_path / "o" / "runs.sqlite", readonly=True) as st:
        (run,) = st.runs()
        assert st.diverged(run["run_id"]) == {0: 1, 1: 1}
        assert st.count_epochs() == 0 and st.checkpoint(run["run_id"], 0) is None
    again = depl_cli("run", "plan.json", "--seeds", "2", "--out", "o", cwd=tmp_path)  # used to die on every resume
    assert again.returncode == 0 and "resuming" in again.stdout, again.stderr[-2000:]
    shown = json.loads(depl_cli("runs", "show", "--out", "o", "--json", cwd=tmp_path).stdout)
    assert shown["runs"][0]["diverged"] == [{"seed": 0, "epoch": 1}, {"seed": 1, "epoch": 1}]
    assert shown["runs"][0]["seeds"] == 0
    # validate: a diverged seed is a run that missed ℓmax; the report stays strict JSON
    v = depl_cli("validate", "huge.toml", "plan.json", "--seeds", "2", "--first-seed", "400010", "--out", "val",
                 "--seed-batch", "1", cwd=tmp_path)
    assert v.returncode in (0, 4) and "Traceback" not in v.stderr, v.stderr[-2000:]
    assert "2 of 2 runs diverged (seed 400010 at epoch 1, seed 400011 at epoch 1)" in v.stdout and "refuted" in v.stdout
    rep = json.loads((tmp_path / "val" / "plan-validate.json").read_text())
    assert (rep["runs"], rep["hits"], rep["evidence"]["diverged"], rep["seeds"]) == (2, 0, [400010, 400011],
                                                                                    [[400010, 400011]])
    assert rep["verdict"] == "refuted" and rep["evidence"]["final_quantile"] is None  # +inf, written as null
    # the plan and the store as the report's folder sees them, not the folder the command ran in (depl.paths)
    assert (rep["evidence"]["plan_file"], rep["evidence"]["store"]) == ("../plan.json", "runs.sqlite")


def _first_epoch(store: Store, run_id: str, job, seeds: list[int]) -> None:
    """Epoch 1 of every seed, recorded with its checkpoint (as a run killed after it leaves the store)."""
    from depl.train.engine.federation import state_bytes
    from depl.train.engine.seeds import as_row

    class Stop(Exception):
        pass

    def keep(ss, results, models):
        store.record_epochs(run_id, [(s, as_row(r), state_bytes(m), False) for s, r, m in zip(ss, results, models())])
        raise Stop

    with pytest.raises(Stop):
        walk_plan_stack(job, seeds, keep)


def _nan_weights(blob: bytes) -> bytes:
    state = torch.load(io.BytesIO(blob), weights_only=True)
    first = next(k for k, v in state.items() if v.is_floating_point())
    state[first] = torch.full_like(state[first], math.nan)
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


@pytest.mark.parametrize("seed_batch", [3, 1], ids=["one-stack", "per-seed"])
def test_a_seed_that_diverges_does_not_touch_the_others(tmp_path, seed_batch):
    job = job_from_plan(make_plan(SWITCH_PLAN[:3]))  # full A (2 nodes FedAvg) ×2, then a pruning switch on B
    seeds = [0, 1, 2]
    rid = execute.run_id_for(job, "local")
    out = {}
    for name in ("clean", "poisoned"):
        st = Store(tmp_path / f"{name}.sqlite")
        execute.register(st, rid, "plan", job)
        _first_epoch(st, rid, job, seeds)
        if name == "poisoned":  # seed 1's weights go NaN, as a too-large step makes them
            st._db.execute("UPDATE checkpoints SET state = ? WHERE seed = 1",
                           (_nan_weights(st.checkpoint(rid, 1)[1]),))
        run_all(st, [(rid, job, seeds)], seed_batch=seed_batch, workers=1)
        out[name] = (st.losses(rid), st.diverged(rid))
        assert execute.pending(st, rid, job, seeds) == []
        st.close()
    (clean, none), (poisoned, gone) = out["clean"], out["poisoned"]
    assert none == {} and gone == {1: 2}
    assert len(poisoned[1]) == 1  # its epoch 1, nothing after the divergence
    for s in (0, 2):
        assert all(math.isfinite(x) for x in poisoned[s]) and len(poisoned[s]) == 3
        # epoch 2 was trained in the same stack as the NaN seed: bit for bit the clean result
        assert poisoned[s][:2] == clean[s][:2]
        # epoch 3 in a stack without it (other batched kernels): the same to float tolerance
        assert poisoned[s][2] == pytest.approx(clean[s][2], rel=1e-5)


def row(k, loss=1.0, train=1.5):
    return EpochRow(k, "full", "A", loss, 0.5, train, 0.01)


def test_the_store_records_a_divergence_once_and_nothing_after_it(tmp_path):
    s = Store(tmp_path / "s.sqlite")
    s.start_run("r", "plan", {})
    s.record_epoch("r", 0, row(1), checkpoint=b"w1")
    s.record_epoch("r", 0, row(2, math.nan, math.inf), checkpoint=b"nan weights")
    assert s.diverged("r") == {0: 2} and s.diverged_at("r", 0) == 2
    assert s.checkpoint("r", 0) is None and s.done_epochs("r", 0) == 1 and s.seeds("r") == [0]
    assert s._db.execute("SELECT test_loss, train_loss FROM diverged").fetchone() == ("nan", "inf")
    with pytest.raises(StoreError, match="after the seed diverged at epoch 2"):
        s.record_epoch("r", 0, row(2))
    s.record_epoch("r", 5, row(1, math.inf))  # diverged at its first epoch: a seed with no epoch row
    assert s.seeds("r") == [0, 5]


def test_fit_skips_diverged_seeds_and_says_how_many(tmp_path):
    from depl.fit.runs import load_profile
    from depl.scenario import load_scenario
    from depl.train.engine import profile as prof

    s = load_scenario("mnist1d-small")
    job = prof.experiment_job(s, [d.name for d in s.datasets], prof.Experiment("version", "pruned-0.75"), 2)
    with Store(tmp_path / "p.sqlite") as st:
        rid = prof.experiment_run_id(s.name, prof.Experiment("version", "pruned-0.75"), job)
        execute.register(st, rid, "profile", job, {"experiment": prof.Experiment("version", "pruned-0.75").to_json(),
                                                   "scenario": s.name})
        for seed in range(4):
            st.record_epoch(rid, seed, row(1, 2.0 - 0.1 * seed))
            st.record_epoch(rid, seed, row(2, 1.8 - 0.1 * seed if seed != 2 else math.nan))
        p = load_profile(st, s)
    assert p.diverged == 1 and list(p.experiments[0].seeds) == [0, 1, 3]
