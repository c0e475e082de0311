"""The ``flower`` back end: the plan executor as a Flower ServerApp, node training as a ClientApp.

Flower owns the distribution (messaging, processes, TLS, node
authentication); depl only says what each message carries.  The ServerApp's
main loop is the same `federation.walk_plan` the local back end uses: for
every epoch of the plan it picks the SuperNodes of that epoch's cluster,
sends each the current — possibly just pruned — weights (an ``ArrayRecord``)
and what to train (a ``ConfigRecord``: the job, the version, the node's index
in its cluster, the seed and epoch), and averages the replies with the same
`fedavg`.  A ClientApp trains one local epoch on its share with the same
`local_epoch`, so the same seed gives the same trajectory on both back ends.

Two ways to run it:

* `run_simulation` — Flower's simulation engine (Ray) on this machine, one
  engine start for all the seeds of a `depl run` (started by
  ``depl run --backend flower``);
* a deployment — SuperLink and SuperNodes started by hand, the app submitted
  with ``flwr run``; `server_app` and `client_app` below are the objects the
  app's ``pyproject.toml`` points at (docs/flower-deployment.md).  Each
  SuperNode declares its cluster(s) and its index in them with
  ``--node-config "cluster='edge' node=0"`` (or ``cluster='edge,far-edge'``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from functools import lru_cache
from pathlib import Path

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from ..store import Store
from . import execute
from .federation import TRAIN_STREAM, Job, derive_seed, fedavg, local_epoch, node_data
from .prune import build_version

# --------------------------------------------------------------------------- #
# ClientApp: one local epoch on this node's share
# --------------------------------------------------------------------------- #

client_app = ClientApp()


@lru_cache(maxsize=8)
def _job(text: str) -> Job:
    return Job.from_json(json.loads(text))


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    torch.set_num_threads(int(os.environ.get("DEPL_TORCH_THREADS", "1")))
    cfg = msg.content["config"]
    job = _job(str(cfg["job"]))
    version, nodes, node = str(cfg["version"]), int(cfg["nodes"]), int(cfg["node"])
    model = build_version(job.versions[version])
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    x, y = node_data(job.data, nodes, job.options.iid, node)
    loss = local_epoch(model, x, y, job.options, derive_seed(int(cfg["seed"]), TRAIN_STREAM, int(cfg["epoch"]), node))
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()),
                          "metrics": MetricRecord({"num-examples": len(y), "train_loss": loss, "node": node})})
    return Message(content=content, reply_to=msg)


@client_app.query()
def query(msg: Message, context: Context) -> Message:
    """Which cluster this SuperNode belongs to (from its --node-config), if it says."""
    nc = context.node_config
    cfg = ConfigRecord({"cluster": str(nc.get("cluster", "")), "node": int(nc.get("node", -1))})
    return Message(content=RecordDict({"config": cfg}), reply_to=msg)


# --------------------------------------------------------------------------- #
# ServerApp: walk the plan, one FedAvg round per epoch on that epoch's cluster
# --------------------------------------------------------------------------- #

class FlowerRound:
    """A `RoundFn` that trains a cluster's round through Flower messages."""

    name = "flower"

    def __init__(self, grid: Grid, job: Job, wait: float = 120.0):
        self.grid = grid
        self.job_text = json.dumps(job.to_json(), sort_keys=True)
        self.members = self._clusters(job, wait)
        self.messages = 0

    def _clusters(self, job: Job, wait: float) -> dict[str, list[int]]:
        """SuperNode ids of every cluster's nodes 0..n-1."""
        need = max(job.nodes.values())
        deadline = time.monotonic() + wait
        while True:
            ids = sorted(self.grid.get_node_ids())
            if len(ids) >= need or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        replies = self.grid.send_and_receive(
            [Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=i, message_type="query", group_id="hello")
             for i in ids],
            timeout=wait)
        declared: dict[str, dict[int, int]] = {}
        for r in replies:
            if r.has_error():
                continue
            c = r.content["config"]
            for name in filter(None, (x.strip() for x in str(c["cluster"]).split(","))):
                declared.setdefault(name, {})[int(c["node"])] = r.metadata.src_node_id
        out = {}
        for cluster, n in job.nodes.items():
            if declared:  # a deployment: the SuperNodes said which cluster they are in
                have = declared.get(cluster, {})
                missing = [k for k in range(n) if k not in have]
                if missing:
                    raise RuntimeError(f"cluster {cluster!r} needs nodes 0..{n - 1}; no SuperNode declared "
                                       f"node={missing[0]} (start it with --node-config \"cluster='{cluster}' node={missing[0]}\")")
                out[cluster] = [have[k] for k in range(n)]
            else:  # simulation: interchangeable virtual SuperNodes
                if len(ids) < n:
                    raise RuntimeError(f"cluster {cluster!r} has {n} nodes but only {len(ids)} SuperNodes are connected")
                out[cluster] = ids[:n]
        return out

    def __call__(self, model: torch.nn.Module, job: Job, cluster: str, epoch: int, seed: int) -> float:
        version = next(m for k, m, _ in job.epochs if k == epoch)
        arrays = ArrayRecord(model.state_dict())
        msgs = []
        for node, node_id in enumerate(self.members[cluster]):
            cfg = ConfigRecord({"job": self.job_text, "version": version, "nodes": len(self.members[cluster]),
                                "node": node, "seed": seed, "epoch": epoch})
            msgs.append(Message(RecordDict({"arrays": arrays, "config": cfg}), dst_node_id=node_id,
                                message_type="train", group_id=f"seed{seed}-epoch{epoch}"))
        replies = list(self.grid.send_and_receive(msgs))
        self.messages += len(msgs)
        errors = [r.error.reason for r in replies if r.has_error()]
        if errors or len(replies) != len(msgs):
            raise RuntimeError(f"epoch {epoch} on {cluster!r}: {len(replies)} of {len(msgs)} replies; {errors[:1]}")
        replies.sort(key=lambda r: int(r.content["metrics"]["node"]))  # average in node order, as `local` does
        states = [r.content["arrays"].to_torch_state_dict() for r in replies]
        weights = [float(r.content["metrics"]["num-examples"]) for r in replies]
        model.load_state_dict(fedavg(states, weights))
        losses = [float(r.content["metrics"]["train_loss"]) for r in replies]
        return sum(l * w for l, w in zip(losses, weights)) / sum(weights)


def serve(grid: Grid, job: Job, seeds: list[int], store_url: str, run_id: str, progress=None) -> FlowerRound:
    """The ServerApp's main loop: every seed, every epoch of the plan, into the store."""
    fed = FlowerRound(grid, job)
    with Store(store_url) as store:  # a connection of this thread
        for seed in seeds:
            execute.run_seed(store, run_id, job, seed, fed, progress)
    return fed


server_app = ServerApp()


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    """Deployment entry point: the plan, the seeds and the store come from the run config."""
    from ..plan import Plan
    from .federation import job_from_plan

    rc = context.run_config
    plan = Plan.load(str(rc["plan"]))
    job = job_from_plan(plan)
    store_url = str(rc.get("store", "depl-runs/runs.sqlite"))
    seeds = list(range(int(rc.get("first-seed", 0)), int(rc.get("first-seed", 0)) + int(rc.get("seeds", 1))))
    with Store(store_url) as store:
        run_id = execute.run_id_for(job, "flower")
        execute.register(store, run_id, "plan", job, {"backend": "flower", "plan": plan.to_json()})
        todo = execute.pending(store, run_id, job, seeds)

    def log(seed, epoch, r):
        print(f"[depl] seed {seed} epoch {epoch} {r.model} on {r.cluster}: test loss {r.test_loss:.4f}", flush=True)

    serve(grid, job, todo, store_url, run_id, log)


# --------------------------------------------------------------------------- #
# Flower's simulation engine, once per `depl run`
# --------------------------------------------------------------------------- #

def flower_environment(out: Path) -> dict[str, str]:
    """Telemetry off; Flower's and Ray's state inside the run folder."""
    out = Path(out).resolve()
    env = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_HOME": str(out / "flower"), "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_DISABLE_DOCKER_CPU_WARNING": "1", "RAY_DEDUP_LOGS": "0"}
    (out / "flower").mkdir(parents=True, exist_ok=True)
    os.environ.update(env)
    return env


def run_simulation(store: Store, run_id: str, job: Job, seeds: list[int], out: Path, progress=None,
                   threads: int = 1, cpus: int | None = None) -> dict[str, float]:
    """Run `seeds` of a job on Flower's simulation engine (one engine start for all of them).

    Returns timings: the engine's start-up (until the first round's replies)
    and the total wall time.
    """
    from flwr.simulation import run_simulation as flwr_run_simulation

    if store.path == ":memory:":
        raise ValueError("the flower back end needs a store file (its ServerApp runs in another thread)")
    flower_environment(out)
    os.environ["DEPL_TORCH_THREADS"] = str(threads)
    ray_tmp = Path(out).resolve() / "ray"
    ray_tmp.mkdir(parents=True, exist_ok=True)
    cpus = cpus or min(2, os.cpu_count() or 1)
    n_nodes = max(job.nodes.values())
    timing: dict[str, float] = {}
    failure: list[BaseException] = []
    t0 = time.perf_counter()

    def timed_progress(seed, epoch, r):
        timing.setdefault("first_epoch_done", time.perf_counter() - t0)
        if progress is not None:
            progress(seed, epoch, r)

    app = ServerApp()

    @app.main()
    def _main(grid: Grid, context: Context) -> None:
        try:
            timing["engine_up"] = time.perf_counter() - t0
            fed = serve(grid, job, seeds, store.path, run_id, timed_progress)
            timing["messages"] = fed.messages
        except BaseException as e:  # surfaced after the engine stops
            failure.append(e)
            raise

    flwr_run_simulation(
        server_app=app, client_app=client_app, num_supernodes=n_nodes,
        backend_config={"client_resources": {"num_cpus": max(1, cpus // max(1, n_nodes)), "num_gpus": 0.0},
                        # loopback only: Ray's head and workers must not listen on the machine's interfaces
                        "init_args": {"num_cpus": cpus, "_temp_dir": str(ray_tmp), "logging_level": "ERROR",
                                      "_node_ip_address": "127.0.0.1", "include_dashboard": False,
                                      "log_to_driver": False}},
    )
    timing["total"] = time.perf_counter() - t0
    if failure:
        raise RuntimeError(f"the Flower ServerApp failed: {failure[0]}") from failure[0]
    return timing


# --------------------------------------------------------------------------- #
# A Flower deployment: the app folder `flwr run` submits
# --------------------------------------------------------------------------- #

APP_PYPROJECT = """\
# A Flower app that runs a depl plan.  Written by `depl run --backend flower --superlink ...`.
# It has no dependencies of its own: the SuperLink and SuperNodes run it in the
# environment where depl[train] is installed (start the SuperLink with
# --disable-runtime-dependency-installation), so nothing is installed with uv.
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "depl-plan"
version = "1.0.0"
description = "Run a depl plan: FedAvg per cluster, hand-offs, pruning switches"
license = "MIT"
dependencies = []

[tool.flwr.app]
publisher = "depl"

[tool.flwr.app.components]
serverapp = "depl.train.flower_app:server_app"
clientapp = "depl.train.flower_app:client_app"

[tool.flwr.app.config]
plan = {plan}
seeds = {seeds}
first-seed = {first_seed}
store = {store}
"""


def write_app(folder: Path, plan: Path, seeds: int, first_seed: int, store: str) -> Path:
    """The app folder for `flwr run`: a pyproject.toml pointing at this module's apps."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    q = lambda v: json.dumps(str(v))  # noqa: E731 - a TOML basic string
    (folder / "pyproject.toml").write_text(APP_PYPROJECT.format(
        plan=q(Path(plan).resolve()), seeds=int(seeds), first_seed=int(first_seed),
        store=q(Path(store).resolve() if "://" not in str(store) else store)), encoding="utf-8")
    return folder


def run_deployment(app: Path, superlink: str, env: dict[str, str] | None = None, timeout: float | None = None):
    """Submit the app to a running SuperLink (`flwr run APP SUPERLINK --stream`) and wait for it."""
    import subprocess
    import sys

    bin_dir = str(Path(sys.executable).parent)
    e = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", **(env or {})}
    e["PATH"] = bin_dir + os.pathsep + e.get("PATH", "")
    flwr = str(Path(bin_dir) / "flwr")
    return subprocess.run([flwr, "run", str(app), superlink, "--stream"], env=e, timeout=timeout,
                          capture_output=True, text=True)


_lock = threading.Lock()  # one simulation at a time per process (Ray is process-global)
