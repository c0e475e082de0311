"""The executors of the local back end: one protocol, one registry (depl.train.backends.executors).

A back end is one class and one `register`: the toy below, registered here, trains a real job through the
one entry point (`executors.run_all`) and writes what the per-seed loop writes.  Adaptive runs are tasks of
the same protocol: their batches on worker processes write what they write in this process.
"""

from __future__ import annotations

import pytest

from depl.plan import Epoch, Plan, with_figures
from depl.scenario import parse_scenario
from depl.store import Store
from depl.train.loops import adaptive as ad
from depl.train.engine import execute, seeds
from depl.train.backends import executors, ray_pool
from depl.train.task.source import JobError
from depl.train.engine.federation import job_from_plan
from trainkit import SWITCH_PLAN, make_plan, scenario_dict


class Backwards:
    """A toy back end: every seed on its own (the loop's batching), the tasks in reverse order, in this process."""

    name = "test-backwards"

    def batch(self, n_seeds: int, options: executors.Options) -> int:
        return 1

    def run(self, tasks, writer, options: executors.Options) -> None:
        for t in reversed(list(tasks)):
            writer.load(t).run(writer.write)


executors.register(Backwards())


def rows(st: Store, rid: str, seeds) -> dict:
    """Every seed's recorded epochs, but the wall seconds (not a result)."""
    return {s: [(r.epoch, r.model, r.cluster, r.test_loss, r.test_accuracy, r.train_loss) for r in st.trajectory(rid, s)]
            for s in seeds}


def test_a_registered_toy_executor_trains_a_real_job_and_writes_the_loops_rows(tmp_path):
    job = job_from_plan(make_plan(SWITCH_PLAN[:3]))  # FedAvg over 2 nodes, then a pruning switch
    seeds = [0, 1, 2]
    rid = execute.run_id_for(job, "local")
    out, seen = {}, {}
    for name in ("loop", "test-backwards"):
        with Store(tmp_path / f"{name}.sqlite") as st:
            execute.register(st, rid, "plan", job)
            shown = seen[name] = []
            executors.run_all(st, [(rid, job, seeds)], executor=name,
                              progress=lambda run_id, seed, epoch, row, shown=shown: shown.append((seed, epoch)))
            out[name] = rows(st, rid, seeds)
            assert execute.pending(st, rid, job, seeds) == []
            assert all(st.checkpoint(rid, s) is None for s in seeds)  # the last epoch drops the checkpoint
    assert seen["test-backwards"][0] == (2, 1) and seen["loop"][0] == (0, 1)  # the toy really ran them
    assert sorted(seen["test-backwards"]) == sorted(seen["loop"]) and len(seen["loop"]) == 9
    assert out["test-backwards"] == out["loop"]
    assert all(len(v) == 3 for v in out["loop"].values())


def test_without_a_name_the_choice_is_the_options_rule_and_names_are_checked():
    O = executors.Options
    assert executors.fixed_rule(O(workers=1)).name == "stack"
    assert executors.fixed_rule(O(workers=3)).name == "processes"
    assert executors.fixed_rule(O(workers=1, ray_address="127.0.0.1:6379")).name == "ray"
    given = executors.decide([], workers=1)   # any option given: the rule, nothing measured
    assert (given.executor.name, given.how, given.options.seed_batch, given.options.threads) == ("stack", "named", 32, 1)
    assert executors.decide([], executor="loop", seed_batch=8).executor.name == "loop"
    assert executors.names()[:4] == ["loop", "stack", "processes", "ray"] and "test-backwards" in executors.names()
    with pytest.raises(ValueError, match="executor 'nope': expected one of loop, stack, processes, ray"):
        executors.get("nope")
    with pytest.raises(ValueError, match="registered already"):
        executors.register(Backwards())
    with pytest.raises(ValueError, match="cpus per task 0"):
        O(cpus_per_task=0)


def test_each_executor_cuts_its_own_batches_and_ray_counts_a_tasks_cpus():
    O = executors.Options
    assert executors.get("loop").batch(10, O()) == 1
    assert executors.get("stack").batch(10, O(workers=4)) == 10           # one process: one stack of all
    assert executors.get("stack").batch(100, O()) == executors.DEFAULT_SEED_BATCH
    assert executors.get("processes").batch(10, O(workers=4)) == 3        # every worker gets a batch

    class Cluster:  # what ray_pool reads of a cluster
        def cluster_resources(self):
            return {"CPU": 8.0}

    assert ray_pool.slots(Cluster(), 1.0) == 8 and ray_pool.slots(Cluster(), 2.0) == 4
    assert ray_pool.slots(Cluster(), 16.0) == 1


def test_a_tasks_device_is_resolved_where_it_trains():
    import torch

    spec = job_from_plan(make_plan(SWITCH_PLAN[:1])).to_json()
    here = "cuda" if torch.cuda.is_available() else "cpu"
    assert seeds.job_here(spec, "auto").options.device == here
    assert seeds.job_here(spec, None).options.device == "cpu"  # None: the job's own
    if not torch.cuda.is_available():
        with pytest.raises(JobError, match="device cuda: .* on this worker sees no CUDA device"):
            seeds.job_here(spec, "cuda")


def adaptive_plan(tmp_path) -> Plan:
    d = scenario_dict(lr=0.2)
    d["target"] = {**d["target"], "loss": 2.0, "quantile": 0.9}
    s = parse_scenario(d)
    p = with_figures(Plan("hand", "tiny", True, ["d1", "d2"], [Epoch(k + 1, "full", "A", 100.0) for k in range(4)],
                          0.0, 0.0, 0.0, 0.0, 0.0), s)
    p.save(tmp_path / "plan.json")
    return Plan.load(tmp_path / "plan.json")


def test_adaptive_batches_on_worker_processes_write_what_they_write_here(tmp_path):
    plan = adaptive_plan(tmp_path)
    job = ad.adaptive_job(plan, validation=0.1)
    rid = ad.adaptive_run_id(job, {}, "slack")
    seeds = [1, 2, 3]
    out = {}
    for name, options in (("stack", None), ("processes", executors.Options(workers=2))):
        with Store(tmp_path / f"{name}.sqlite") as st:
            st.start_run(rid, "plan", {"adaptive": True})
            # δ given (the law's plan has no certified slack): what matters here is where the seeds train
            ad.run_batches(st, rid, job, plan, [[1, 2], [3]], executor=name, options=options, **ad.RULES["slack"],
                           slack=0.2)
            assert ad.pending(st, rid, seeds) == []
            out[name] = ({s: st.decisions(rid, s) for s in seeds}, rows(st, rid, seeds))
    assert out["processes"] == out["stack"]
    decisions = out["stack"][0]
    assert decisions[1][0]["stack"] == [1, 2]  # seeds 1 and 2 started as one stack
    assert any(d["action"] == "stop" for s in seeds for d in decisions[s])  # the slack rule stopped some seed


def test_the_command_line_trains_by_the_executor_it_names(tmp_path):
    """`depl run --executor NAME` (every training command takes it): the toy above, registered in this process, is
    chosen by its name, trains every seed and writes what the per-seed loop writes; a name no executor has is
    refused (exit 2) naming the registered ones, the toy's among them."""
    import json

    from typer.testing import CliRunner

    from depl.cli import app

    plan = tmp_path / "plan.json"
    make_plan(SWITCH_PLAN[:3]).save(plan)
    out = {}
    for name in ("loop", "test-backwards"):
        r = CliRunner().invoke(app, ["run", str(plan), "--seeds", "2", "--executor", name, "--json",
                                     "--keep-models", "none", "--out", str(tmp_path / name)])
        assert r.exit_code == 0, r.output
        done = json.loads(r.stdout)
        assert done["seed_training"]["executor"] == name and done["finished"] == 2
        with Store(done["store"]) as st:
            out[name] = rows(st, done["run_id"], [0, 1])
    assert out["test-backwards"] == out["loop"] and all(len(v) == 3 for v in out["loop"].values())
    r = CliRunner().invoke(app, ["profile", "mnist1d-small", "--executor", "nope", "--out", str(tmp_path / "p")])
    assert r.exit_code == 2 and "executor 'nope'" in r.output and "test-backwards" in r.output


def test_worker_processes_are_spawned_once_the_parent_started_cuda_or_several_threads():
    """A process forked after its parent started CUDA cannot use CUDA (nor a forked OpenMP pool its threads)."""
    import multiprocessing as mp

    from depl.train.engine.seeds import _start_method

    assert _start_method(1, cuda_started=True) == "spawn" and _start_method(4) == "spawn"
    assert _start_method(1) == ("fork" if "fork" in mp.get_all_start_methods() else "spawn")
