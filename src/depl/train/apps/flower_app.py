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

The app is a folder with a ``pyproject.toml`` (`export_app`, ``depl
export-app``) that ``flwr run`` runs — Flower's current way of running an app:

* on the simulation engine (Ray) on this machine: ``depl run-app DIR``
  (`run_app`) or ``depl run --backend flower``, which run ``flwr run`` on a
  SuperLink of their own (`simulate_app`: 127.0.0.1, Flower's state and Ray's
  temp files in DIR/.flwr or the run folder, stopped with everything it
  started when the run ends) — plain ``flwr run DIR`` also works, on a
  SuperLink Flower starts and leaves running (docs/flower-deployment.md);
* on a deployment — SuperLink and SuperNodes started by hand, the app
  submitted with ``flwr run DIR CONNECTION`` (docs/flower-deployment.md).
  Each SuperNode declares its cluster(s) and its index in them with
  ``--node-config "cluster='edge' node=0"`` (or ``cluster='edge,far-edge'``).
"""

from __future__ import annotations

import errno
import json
import os
import re
import threading
import time
from functools import lru_cache
from pathlib import Path

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from ...store import Store, store_path
from ..engine import execute
from ..task.custom import CODE_ENV, code_roots
from ..engine.federation import TRAIN_STREAM, Job, derive_seed, fedavg, job_from_plan, local_epoch, node_data, on_device
from ..task.prune import build_version
from ...plan import Plan
from ..task.models import ModelKeeper, default_keep, final_payload

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
    job = _job(str(cfg["job"])).seeded(int(cfg["seed"]))
    version, nodes, node = str(cfg["version"]), int(cfg["nodes"]), int(cfg["node"])
    model = build_version(job.versions[version]).to(job.options.device)
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    x, y = on_device(node_data(job.data, nodes, job.options.iid, node), job.options.device)
    epoch = int(cfg["epoch"])
    loss = local_epoch(model, x, y, job.options, derive_seed(int(cfg["seed"]), TRAIN_STREAM, epoch, node), epoch,
                       len(job.epochs))
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
        deadline = time.monotonic() + wait
        asked: dict[int, list[tuple[str, int]]] = {}  # SuperNode id -> the (cluster, index) it declared
        while True:
            ids = sorted(self.grid.get_node_ids())
            new = [i for i in ids if i not in asked]
            if new:  # ask each SuperNode once (in a deployment every query starts a ClientApp process)
                asked.update(self._declared(new, wait))
            declared: dict[str, dict[int, int]] = {}
            for node_id, pairs in asked.items():
                for c, k in pairs:
                    declared.setdefault(c, {})[k] = node_id
            if asked and not declared:
                # simulation: interchangeable virtual SuperNodes; a node's share is named in its
                # message, so one SuperNode may train several shares of a round
                sim = sorted(asked)
                return {c: [sim[k % len(sim)] for k in range(n)] for c, n in job.nodes.items()}
            missing = [(c, k) for c, n in job.nodes.items() for k in range(n) if k not in declared.get(c, {})]
            if ids and not missing:  # a deployment: the SuperNodes said which cluster they are in
                return {c: [declared[c][k] for k in range(n)] for c, n in job.nodes.items()}
            if time.monotonic() > deadline:
                if not ids:
                    raise RuntimeError(f"no SuperNode connected within {wait:.0f} s")
                c, k = missing[0]
                raise RuntimeError(f"cluster {c!r} needs nodes 0..{job.nodes[c] - 1}; no SuperNode declared "
                                   f"node={k} (start it with --node-config \"cluster='{c}' node={k}\")")
            time.sleep(1.0)

    def _declared(self, ids: list[int], wait: float) -> dict[int, list[tuple[str, int]]]:
        """SuperNode id -> the (cluster, node index) pairs its --node-config declares (none in a simulation)."""
        replies = self.grid.send_and_receive(
            [Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=i, message_type="query", group_id="hello")
             for i in ids],
            timeout=wait)
        out: dict[int, list[tuple[str, int]]] = {}  # a SuperNode that did not answer is asked again
        for r in replies:
            if r.has_error():
                continue
            c = r.content["config"]
            out[r.metadata.src_node_id] = [(name, int(c["node"])) for name in
                                           filter(None, (x.strip() for x in str(c["cluster"]).split(",")))]
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


def serve(grid: Grid, job: Job, seeds: list[int], store_url: str, run_id: str, progress=None,
          keeper=None) -> FlowerRound:
    """The ServerApp's main loop: every seed, every epoch of the plan, into the store; each seed's final model
    to `keeper` (a depl.train.task.models.ModelKeeper) before its last epoch is written."""
    keep = None if keeper is None else (lambda seed, row, model: keeper.final(seed, row, final_payload(model)))
    fed = FlowerRound(grid, job)
    with Store(store_url) as store:  # a connection of this thread
        for seed in seeds:
            execute.run_seed(store, run_id, job, seed, fed, progress, keep)
    return fed


def app_keeper(rc, job: Job, run_id: str, plan: dict):
    """The run config's model keeper: the seeds' final models into `models`/models/RUN_ID as `keep-models`
    says (none: no keeper; a config written before models were kept: none)."""
    keep, folder = str(rc.get("keep-models", "none")), str(rc.get("models", ""))
    if keep == "none" or not folder:
        return None
    summary = {"file": str(rc.get("plan-file", "")), "sha256": str(rc.get("plan-sha256", "")),
               "method": plan.get("method"), "scenario": plan.get("scenario"), "epochs": len(job.epochs)}
    return ModelKeeper(Path(folder), run_id, job, summary, keep)


server_app = ServerApp()


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    """The app's entry point: the plan (or job), the seeds and the store come from the run config."""
    job, run_id, extra = job_of_run_config(context.run_config)
    rc = context.run_config
    store_url = str(rc.get("store", "depl-runs/runs.sqlite"))
    seeds = list(range(int(rc.get("first-seed", 0)), int(rc.get("first-seed", 0)) + int(rc.get("seeds", 1))))
    with Store(store_url) as store:
        execute.register(store, run_id, "plan", job, extra)
        todo = execute.pending(store, run_id, job, seeds)

    def log(seed, epoch, r):
        print(f"{PROGRESS_TAG} seed {seed} epoch {epoch} {r.model} on {r.cluster}: test loss {r.test_loss:.6f}", flush=True)

    serve(grid, job, todo, store_url, run_id, log, app_keeper(rc, job, run_id, extra["plan"]))


def job_of_run_config(rc) -> tuple[Job, str, dict]:
    """(job, run id, run spec extras) from the run config: a plan (JSON text or a path)."""
    text = str(rc["plan"])
    plan = Plan.from_json(json.loads(text), "the app's plan") if text.lstrip().startswith("{") else Plan.load(text)
    job = job_from_plan(plan, str(rc.get("device", "cpu")))
    return job, execute.run_id_for(job, "flower"), {"backend": "flower", "plan": plan.to_json()}


PROGRESS_TAG = "[depl]"


# --------------------------------------------------------------------------- #
# The app folder: what `depl export-app` writes and `flwr run` runs
# --------------------------------------------------------------------------- #

APP_PYPROJECT = """\
# A Flower app that runs a depl plan: FedAvg within a cluster, hand-offs between
# clusters, pruning switches.  Written by `depl export-app` (or `depl run --backend flower`).
#
#   depl run-app .                  Flower's simulation engine on this machine: `flwr run` on a
#                                   SuperLink of its own (127.0.0.1), stopped when the run ends;
#                                   Flower's state in .flwr/ (FLWR_HOME), never in ~/.flwr
#   flwr run . CONNECTION --stream  a deployment (docs/flower-deployment.md)
#
# The simulation may have fewer virtual SuperNodes than a cluster has nodes: the
# message names the share a node trains (--federation-config "num-supernodes=N").
# It has no dependencies of its own: SuperLink and SuperNodes run it in the
# environment where depl[train] is installed (the SuperLink started with
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
serverapp = "depl.train.apps.flower_app:server_app"
clientapp = "depl.train.apps.flower_app:client_app"

[tool.flwr.app.config]
{config}
"""


def write_app(folder: Path, config: dict) -> Path:
    """The app folder for `flwr run`: a pyproject.toml pointing at this module's apps, the run config given."""
    import shutil
    import tempfile

    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise FileExistsError(errno.EEXIST, "exists and is not a folder", str(folder))
    created = next((d for d in reversed([folder, *folder.parents]) if not d.exists()), None)
    lines = [f"{k} = {json.dumps(v)}" for k, v in config.items()]  # JSON strings and numbers are TOML ones
    tmp = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # written whole or not at all: flwr must never find a truncated pyproject.toml
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=folder, prefix=".pyproject.", suffix=".tmp",
                                         delete=False) as f:
            tmp = Path(f.name)
            f.write(APP_PYPROJECT.format(config="\n".join(lines)))
        tmp.chmod(0o644)  # NamedTemporaryFile makes it 0600; a SuperLink under another user reads it
        os.replace(tmp, folder / "pyproject.toml")
    except BaseException:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        if created is not None:  # only the folders this call made
            shutil.rmtree(created, ignore_errors=True)
        raise
    return folder


def export_app(plan_file: Path, folder: Path, seeds: int = 1, first_seed: int = 0, store: str | None = None,
               device: str = "cpu", keep_models: str | None = None, models: Path | None = None) -> Path:
    """`depl export-app`: the plan (embedded, so the app stands alone) as a Flower app folder.  The ServerApp keeps
    the seeds' final models (`keep_models`: none, best or all [default: all up to 16 seeds, else best]) in
    `models`/models/RUN_ID [default: the store's folder]."""
    import hashlib

    plan = Plan.load(plan_file)
    job_from_plan(plan, device)  # a plan that cannot be trained is refused now, not on the SuperLink
    folder = Path(folder)
    store = store or str((folder / "runs.sqlite").resolve())
    if "://" not in store:
        store = str(Path(store).resolve())
    models = Path(models) if models is not None else Path(store_path(store)).parent
    return write_app(folder, {"plan": json.dumps(plan.to_json(), sort_keys=True), "seeds": int(seeds),
                              "first-seed": int(first_seed), "store": store, "device": device,
                              "keep-models": keep_models or default_keep(int(seeds)),
                              "models": str(models.resolve()), "plan-file": Path(plan_file).name,
                              "plan-sha256": hashlib.sha256(Path(plan_file).read_bytes()).hexdigest()})


# --------------------------------------------------------------------------- #
# Running the app: `flwr run`, on a SuperLink of ours (simulation) or a deployment's
# --------------------------------------------------------------------------- #

def flower_environment(out: Path, home: Path | None = None) -> dict[str, str]:
    """Telemetry off; Flower's state (FLWR_HOME: `home`, default OUT/flower) and Ray's inside the run
    folder; Ray on loopback only."""
    out = Path(out).resolve()
    home = Path(home).resolve() if home is not None else out / "flower"
    env = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_HOME": str(home), "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_DISABLE_DOCKER_CPU_WARNING": "1", "RAY_DEDUP_LOGS": "0", "RAY_TMPDIR": str(out / "ray"),
           "FLWR_DISABLE_UPDATE_CHECK": "1", "PYTHONWARNINGS": "ignore::FutureWarning,ignore::DeprecationWarning",
           # Ray's single-machine mode (its default on macOS and Windows): the node's address is
           # 127.0.0.1, so GCS, raylets and workers listen on loopback, not on every interface.
           # Flower's federation config cannot pass ray.init(_node_ip_address=...), and Ray 2.55
           # turns a loopback node address into the routable one unless this mode is on.
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           # the Flower processes import your code from the folders this command allowed, whatever their folder
           CODE_ENV: os.pathsep.join(map(str, code_roots()))}
    for d in (home, out / "ray"):
        d.mkdir(parents=True, exist_ok=True)
    return env


def _bin(name: str) -> str:
    import sys

    return str(Path(sys.executable).parent / name)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def flwr_run(app: Path, connection: str, env: dict[str, str], federation_config: str | None = None,
             progress=None, timeout: float | None = None):
    """`flwr run APP CONNECTION --stream`; the ServerApp's progress lines go to `progress(seed, epoch, loss)`.

    Returns (exit code, everything flwr printed)."""
    import subprocess

    cmd = [_bin("flwr"), "run", str(app), connection, "--stream"]
    if federation_config:
        cmd += ["--federation-config", federation_config]
    e = {**os.environ, **env}
    e["PATH"] = str(Path(_bin("flwr")).parent) + os.pathsep + e.get("PATH", "")
    pattern = re.compile(re.escape(PROGRESS_TAG) + r" seed (\d+) epoch (\d+) .*test loss ([0-9.eE+-]+|nan|inf)")
    lines: list[str] = []
    with subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as p:
        t0 = time.monotonic()
        for line in p.stdout:  # type: ignore[union-attr]
            lines.append(line)
            m = pattern.search(line)
            if m and progress is not None:
                progress(int(m.group(1)), int(m.group(2)), float(m.group(3)))
            if timeout is not None and time.monotonic() - t0 > timeout:
                p.kill()
                break
        code = p.wait()
    return code, "".join(lines)


# Ray's socket paths (RAY_TMPDIR/ray/session_<date>_<pid>/sockets/plasma_store) must fit in an
# AF_UNIX address (107 bytes on Linux, 103 on macOS): a longer RAY_TMPDIR is replaced by a
# short temporary folder, removed when the SuperLink stops.
RAY_TMPDIR_MAX = 36


class LocalSuperLink:
    """A SuperLink of ours in simulation mode, on 127.0.0.1 only, its state in `home` (default OUT/flower),
    stopped on exit with every process it started (SuperExec, simulation, Ray: `stop`)."""

    def __init__(self, out: Path, threads: int = 1, home: Path | None = None):
        import subprocess
        import tempfile

        self.out = Path(out).resolve()
        self.env = {**flower_environment(self.out, home), "DEPL_TORCH_THREADS": str(threads)}
        self.env[MARK_ENV] = f"{os.getpid()}-{id(self):x}-{time.time_ns()}"
        self.mark = f"{MARK_ENV}={self.env[MARK_ENV]}"
        self.ray_tmp = None
        if len(self.env["RAY_TMPDIR"].encode()) > RAY_TMPDIR_MAX:
            self.ray_tmp = Path(tempfile.mkdtemp(prefix="depl-ray-", dir="/tmp" if os.path.isdir("/tmp") else None))
            self.env["RAY_TMPDIR"] = str(self.ray_tmp)
        self.port = _free_port()
        self.connection = "depl-simulation"
        home = Path(self.env["FLWR_HOME"])
        (home / "config.toml").write_text(
            f'[superlink]\ndefault = "{self.connection}"\n\n[superlink.{self.connection}]\n'
            f'address = "127.0.0.1:{self.port}"\ninsecure = true\n', encoding="utf-8")
        self.log = home / "superlink.log"
        self.proc = subprocess.Popen(
            [_bin("flower-superlink"), "--insecure", "--simulation", "--isolation", "subprocess",
             "--host", "127.0.0.1", "--port", str(self.port), "--database", str(home / "state.db"),
             "--disable-runtime-dependency-installation"],
            env={**os.environ, **self.env, "PATH": str(Path(_bin("flwr")).parent) + os.pathsep + os.environ.get("PATH", "")},
            stdout=open(self.log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_ready(60.0)

    def _wait_ready(self, timeout: float) -> None:
        import socket

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"flower-superlink exited with code {self.proc.returncode}; see {self.log}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"flower-superlink did not start within {timeout:.0f} s; see {self.log}")

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the SuperLink and every process it started: SuperExec, the simulation, Ray's processes.

        SIGTERM to the SuperLink's process group; then to every process still carrying this SuperLink's
        mark in its environment (SuperExec starts a session of its own, and Ray's workers outlive the
        simulation for a few seconds); SIGKILL to what is left after `timeout` seconds."""
        import shutil
        import signal
        import subprocess

        try:
            os.killpg(self.proc.pid, signal.SIGTERM)  # start_new_session: the SuperLink leads its own group
        except OSError:
            pass
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        left = marked_processes(self.mark)
        _signal(left, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = marked_processes(self.mark)
        _signal(left, signal.SIGKILL)
        if self.ray_tmp is not None:
            shutil.rmtree(self.ray_tmp, ignore_errors=True)

    def __enter__(self) -> "LocalSuperLink":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


MARK_ENV = "DEPL_FLOWER_SUPERLINK"  # in the environment of a LocalSuperLink and of every process it starts


def marked_processes(mark: str) -> list[int]:
    """The live processes, this one aside, whose environment holds `mark` (a NAME=VALUE entry) (from /proc;
    none where there is no /proc)."""
    entry = mark.encode()
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        if int(proc.name) == os.getpid():
            continue
        try:
            if entry not in (proc / "environ").read_bytes().split(b"\0"):
                continue
            if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue  # a zombie has ended; its parent has yet to reap it
        except (OSError, IndexError):
            continue
        found.append(int(proc.name))
    return found


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def simulate_app(app: Path, out: Path, num_supernodes: int, progress=None, threads: int = 1,
                 cpus: int | None = None, device: str = "cpu", home: Path | None = None) -> dict[str, float]:
    """Run an app folder with `flwr run` on Flower's simulation engine (a SuperLink of ours, Flower's state in
    `home`, default OUT/flower).

    Returns timings: the first epoch done (engine start-up included) and the total."""
    cpus = cpus or min(2, os.cpu_count() or 1)
    per_node = max(1, cpus // max(1, num_supernodes))
    # Ray hides the GPU from an actor that asks for none: on cuda the virtual SuperNodes share one
    gpus = 1.0 / max(1, num_supernodes) if device == "cuda" else 0.0
    fed = (f"num-supernodes={int(num_supernodes)} client-resources-num-cpus={per_node} "
           f"client-resources-num-gpus={gpus} init-args-num-cpus={cpus} init-args-logging-level='ERROR' "
           "init-args-log-to-driver=false")
    timing: dict[str, float] = {}
    t0 = time.perf_counter()

    def timed(seed, epoch, loss):
        timing.setdefault("first_epoch_done", time.perf_counter() - t0)
        if progress is not None:
            progress(seed, epoch, loss)

    with _lock, LocalSuperLink(out, threads, home) as link:
        timing["superlink_up"] = time.perf_counter() - t0
        code, text = flwr_run(app, link.connection, link.env, fed, timed)
    timing["total"] = time.perf_counter() - t0
    if code != 0:
        raise RuntimeError(f"flwr run failed (exit {code}): {text.strip()[-3000:]}")
    return timing


# --------------------------------------------------------------------------- #
# An exported app folder: its run config, how to run it, `depl run-app`
# --------------------------------------------------------------------------- #

APP_HOME = ".flwr"  # FLWR_HOME of `depl run-app DIR`: DIR/.flwr, which Flower leaves out of the app it sends


class AppError(Exception):
    """A folder that is not an app `depl export-app` wrote (the message names the file and why)."""


def app_run_config(app: Path) -> dict:
    """The run config of an app folder (`[tool.flwr.app.config]` of DIR/pyproject.toml)."""
    import tomllib

    path = Path(app) / "pyproject.toml"
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as e:
        raise AppError(f"{path}: not a Flower app folder ({e.strerror or e})") from None
    except tomllib.TOMLDecodeError as e:
        raise AppError(f"{path}: not TOML ({e})") from None
    rc = doc.get("tool", {}).get("flwr", {}).get("app", {}).get("config")
    if not isinstance(rc, dict) or "plan" not in rc:
        raise AppError(f"{path}: no [tool.flwr.app.config] with a plan (write the app with `depl export-app`)")
    return rc


def app_commands(app: Path) -> list[tuple[str, str]]:
    """(command, what it does) for an exported app: the absolute paths of this environment's `depl` and
    `flwr`, so they work whether or not its bin/ is on PATH."""
    import shlex
    import sys

    app = Path(app).resolve()
    depl = _bin("depl") if Path(_bin("depl")).exists() else f"{sys.executable} -m depl.cli"
    store = str(app_run_config(app).get("store", app / "runs.sqlite"))
    q = shlex.quote
    return [(f"{depl} run-app {q(str(app))}",
             f"Flower's simulation engine here: flwr run on a SuperLink of its own (127.0.0.1), stopped "
             f"when the run ends; Flower's state in {app / APP_HOME}"),
            (f"{_bin('flwr')} run {q(str(app))} CONNECTION --stream", "a deployment (docs/flower-deployment.md)"),
            (f"{depl} runs show --store {q(store)}", "the runs")]


def run_app(app: Path, num_supernodes: int | None = None, progress=None, threads: int = 1) -> dict[str, float]:
    """`depl run-app DIR`: an exported app on Flower's simulation engine with `flwr run`, on a SuperLink of
    ours whose state is in DIR/.flwr (FLWR_HOME; never ~/.flwr), stopped with all it started when the run ends.

    Virtual SuperNodes: `num_supernodes`, default the largest cluster's nodes.  Returns `simulate_app`'s timings."""
    app = Path(app).resolve()
    rc = app_run_config(app)
    job, _, _ = job_of_run_config(rc)
    n = num_supernodes or max(job.nodes.values())
    home = app / APP_HOME
    return simulate_app(app, home, n, progress, threads, device=str(rc.get("device", "cpu")), home=home)


def run_deployment(app: Path, superlink: str, env: dict[str, str] | None = None, timeout: float | None = None):
    """Submit the app to a running SuperLink (`flwr run APP SUPERLINK --stream`) and wait for it."""
    import subprocess

    e = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", **(env or {})}
    e["PATH"] = str(Path(_bin("flwr")).parent) + os.pathsep + e.get("PATH", "")
    return subprocess.run([_bin("flwr"), "run", str(app), superlink, "--stream"], env=e, timeout=timeout,
                          capture_output=True, text=True)


_lock = threading.Lock()  # one simulation at a time per process (Ray is process-global)
