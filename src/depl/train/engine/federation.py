"""FedAvg within a cluster and hand-offs between clusters: the plan walked epoch by epoch.

One plan epoch k on cluster n with model version m (paper Sec. III):

1. if m differs from the previous epoch's version, the current *trained*
   model is pruned further to m's ratio (a switch, `prune.switch`);
2. every node of n trains `local_epochs` passes (one by default) over its
   equal share of the selected data, starting from the current weights:
   mini-batches in a seeded order, the scenario's loss (`depl.train.task.losses`)
   and optimiser (SGD with momentum by default, Adam, AdamW; weight decay, a
   learning-rate schedule over the plan's epochs, gradient-norm clipping);
3. the weights are averaged, weighted by the nodes' sample counts (FedAvg);
4. the test loss (the scenario's loss) is measured on the source's test set.

The model is then handed to the cluster of epoch k+1.  `walk_plan` is the loop;
how a round is carried out is a parameter: `LocalFederation` does it in
process (the ``local`` back end), `depl.train.apps.flower_app` through Flower
messages.  Both call `local_epoch` and `fedavg`, so for the same seed they
follow the same trajectory.

Every random choice is derived from (seed, epoch, node) by `derive_seed`, not
drawn from a running generator: a run resumed at epoch k continues exactly as
an uninterrupted one.
"""

from __future__ import annotations

import copy
import io
import json
import time
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Callable

import numpy as np
import torch
from torch import nn

from ...scenario import TrainingOptions
from ...scenario.training import RECIPE_DEFAULTS
from ...state import RunState
from ...store import EpochRow, diverges, drop_code_dirs
from ..task import data as data_mod
from ..task.custom import CodeRefused, check_code, digests
from ..task.losses import Loss, LossError, check as check_loss
from ..task.prune import VersionSpec, build_version, switch
from ..task.source import JobError


class TrainOptions(TrainingOptions):
    """The scenario's [training] options and where the tensors live."""

    device: str = "cpu"  # cpu or cuda (`--device`; not part of a cpu run's identity)
    code_dir: str | None = None  # where your own loss (loss = "MODULE:FUNCTION") is imported from

    @classmethod
    def of(cls, training: TrainingOptions, device: str = "cpu", code_dir: str | None = None) -> "TrainOptions":
        d = training.model_dump()
        if training.optimizer != "sgd":  # adam's own betas: no momentum to carry (nor to refuse)
            del d["momentum"]
        return cls(**d, device=device, code_dir=code_dir if ":" in training.loss else None)

    @property
    def criterion(self) -> Loss:
        """The loss trained and tested (`depl.train.task.losses`)."""
        return Loss(self.loss, self.code_dir)


def _options_json(o: TrainOptions) -> dict:
    d = o.model_dump()
    if d["device"] == "cpu":  # runs made before --device existed keep their identity
        del d["device"]
    # the Dirichlet partition travels with the data (DataSpec.alpha, which node_data reads); here it would
    # only change the identity of every run made before the key existed
    d.pop("dirichlet_alpha", None)
    d.pop("data_draw", None)  # likewise: it travels as DataSpec.draws
    d.pop("loss_may_be_negative", None)  # what the first batch's check allows (check_version), not how runs train
    d.pop("data_subset", None)  # likewise: DataSpec.subset
    # the recipe (loss, optimizer, weight_decay, schedule, step_every, step_gamma, local_epochs, clip): only what
    # differs from the default training, so that every run made before these keys existed keeps its identity
    for k, v in RECIPE_DEFAULTS.items():
        if d[k] == v:
            del d[k]
    if o.optimizer != "sgd":
        d.pop("momentum", None)
    if d.get("code_dir") is None:
        d.pop("code_dir", None)
    return d


@dataclass
class Job:
    """Everything needed to train a plan (or a profiling experiment) for one seed; plain data."""

    data: data_mod.DataSpec
    versions: dict[str, VersionSpec]
    nodes: dict[str, int]                   # cluster -> number of nodes
    epochs: list[tuple[int, str, str]]      # (epoch, model version, cluster)
    options: TrainOptions = field(default_factory=TrainOptions)
    init_version: str | None = None         # the first epoch's version unless given

    def to_json(self) -> dict:
        return {"data": self.data.to_json(), "versions": {k: v.to_json() for k, v in self.versions.items()},
                "nodes": dict(self.nodes), "epochs": [list(e) for e in self.epochs],
                "options": _options_json(self.options), "init_version": self.init_version}

    def identity(self) -> dict:
        """What makes two runs of this job the same run: `to_json` with the folders your code is imported from
        (`code_dir`) replaced by the sha256 of every file of your code the job runs — the network, the data
        factory, the loss — so that a store reads back wherever its folder was moved to or cloned, and a changed
        file is a new run.  A built-in job's identity is its `to_json`.  Where the code cannot be read (a folder
        not allowed here, a file gone) the folder itself stands for it, as before."""
        d = self.to_json()
        code = self._digests()
        if not code:
            return d
        return {**drop_code_dirs(d), "code": {f"{ref} {path}": h for (ref, path), h in code.items()}}

    def code(self) -> dict[str, str] | None:
        """sha256 of every file of your code the job runs, by its path in its folder (the keys of a scenario's
        `code_hashes`), as its run spec records them (`depl.runspec`, ``code``); None for a built-in job or where
        the code cannot be read."""
        code = self._digests()
        return {path: h for (_, path), h in sorted(code.items())} if code else None

    def _digests(self) -> dict[tuple[str, str], str] | None:
        """{(reference, path): sha256} of the files of your code the job runs; None where there is none or it cannot
        be read (a folder not allowed here, a file gone)."""
        refs = {(v.net, v.code_dir) for v in self.versions.values() if v.own}
        if self.data.code_dir is not None and ":" in self.data.source:
            refs.add((self.data.source, self.data.code_dir))
        if self.options.code_dir is not None and ":" in self.options.loss:
            refs.add((self.options.loss, self.options.code_dir))
        if not refs:
            return None
        try:
            return {(ref, path): h for ref, folder in sorted(refs, key=str) for path, h in digests(ref, folder).items()}
        except (data_mod.DataError, OSError, ImportError):  # CodeRefused is a DataError
            return None

    @classmethod
    def from_json(cls, d: dict) -> "Job":
        return cls(data_mod.DataSpec.from_json(d["data"]),
                   {k: VersionSpec.from_json(v) for k, v in d["versions"].items()},
                   {k: int(v) for k, v in d["nodes"].items()},
                   [(int(e[0]), str(e[1]), str(e[2])) for e in d["epochs"]],
                   TrainOptions(**d["options"]), d.get("init_version"))

    @property
    def stackable(self) -> bool:
        """Whether several seeds can train as one vectorised stack: only on one shared data (runs that draw their
        own data train seed by seed, `seeded`)."""
        return self.data.draws == "fixed"

    @property
    def stacks(self) -> bool:
        """Whether several seeds can train as one stack (`vectorised.walk_plan_stack`): on one shared data
        (`stackable`), or each on its own draw where every draw has the same shapes — a built-in source's draw
        (MNIST-1D samples of the generator's pool, or a new split of fixed samples: the same sizes each time),
        split over nodes other than by a Dirichlet partition (whose node sizes change with the draw).  Your
        factory's own draws may differ in size: their seeds train one by one."""
        d = self.data
        if d.draws == "fixed":
            return True
        return ":" not in d.source and (self.options.iid or d.alpha is None
                                        or all(n == 1 for n in self.nodes.values()))

    def seeded(self, seed: int) -> "Job":
        """The job as seed `seed` trains it: on its own draw of the data where runs draw theirs (DataSpec.seeded)."""
        data = self.data.seeded(seed)
        return self if data is self.data else replace(self, data=data)


def version_specs(scenario, source: data_mod.Source, names) -> dict[str, VersionSpec]:
    """The scenario's model versions as real networks for `source`'s data, each checked on a
    batch of it (so a network that rejects the data stops the command before any training)."""
    out = {}
    index = {m.name: i for i, m in enumerate(scenario.models)}
    for name in names:
        m = scenario.models[index[name]]
        if m.train is None:
            raise JobError(f"model {name!r} of scenario {scenario.name!r} has no `train` table "
                           "(e.g. train = {{ net = \"cnn1d\", prune_ratio = 0.5 }}); it cannot be trained for real")
        own = ":" in m.train.net
        spec = VersionSpec(m.train.net, m.train.width, float(m.train.prune_ratio), source.input_shape, source.n_classes,
                           json.dumps(m.train.net_args, sort_keys=True) if own else "",
                           scenario.code_dir if own else None)
        try:
            check_version(spec, source, Loss(scenario.training.loss, scenario.code_dir),
                          min(scenario.training.batch_size, LOSS_BATCH), scenario.training.loss_may_be_negative)
        except CodeRefused:  # about code_dir, not this network: the caller names the file
            raise
        except LossError as e:  # about your own loss, not this network
            raise JobError(f"scenario {scenario.name!r}: {e}") from None
        except ValueError as e:
            raise JobError(f"scenario {scenario.name!r}: models[{index[name]}].train.net = {m.train.net!r} "
                           f"(model {name!r}): {e}") from None
        out[name] = spec
    return out


LOSS_BATCH = 64   # the most samples of a first batch the loss is checked on before training (check_version)


def check_version(spec: VersionSpec, source: data_mod.Source, loss: Loss = Loss(), batch: int = 2,
                  may_be_negative: bool = False) -> None:
    """Build `spec` (pruned) and run it on two test inputs: it must give (2, classes) logits — or, for any other
    loss than cross_entropy, outputs on the first `batch` training samples, computed with gradients on, whose loss
    (`losses.check`) is a finite floating value per sample that training can differentiate, not negative unless
    `may_be_negative`."""
    try:
        model = build_version(spec)
    except data_mod.DataError:
        raise
    except Exception as e:  # the user's constructor or Torch-Pruning on a network it cannot trace
        what = f"pruning it to {spec.ratio} with Torch-Pruning" if spec.ratio > 0 else "building it"
        raise ValueError(f"{what} failed: {type(e).__name__}: {e}") from None
    model.eval()
    x = torch.from_numpy(source.x_test[:2])
    with torch.no_grad():
        try:
            out = model(x)
        except Exception as e:
            raise ValueError(f"it rejects a batch of the data, inputs of shape {tuple(x.shape)}: "
                             f"{type(e).__name__}: {e}") from None
    if loss.name != "cross_entropy" and isinstance(out, torch.Tensor):
        xb = torch.from_numpy(source.x_train[:batch])
        try:
            out = model(xb)   # gradients on: the loss must let them flow back to the outputs
        except Exception as e:
            raise ValueError(f"it rejects a batch of the data, inputs of shape {tuple(xb.shape)}: "
                             f"{type(e).__name__}: {e}") from None
        check_loss(loss, out, torch.from_numpy(source.y_train[:batch]), may_be_negative)
        return
    want = (len(x), source.n_classes)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"on inputs of shape {tuple(x.shape)} it returns {got}; expected class logits of shape "
                         f"{want} (the data has {source.n_classes} class{'es' * (source.n_classes != 1)})")


def check_switches(versions: dict[str, VersionSpec], schedule: list[str]) -> None:
    """A switch prunes further: same network, a ratio at least as large."""
    for a, b in zip(schedule, schedule[1:]):
        if a == b:
            continue
        va, vb = versions[a], versions[b]
        if (va.net, va.width, va.net_args) != (vb.net, vb.width, vb.net_args):
            raise JobError(f"the plan switches from {a!r} ({va.net}, width {va.width}) to {b!r} "
                           f"({vb.net}, width {vb.width}); a switch prunes one network, it cannot change it")
        if vb.ratio < va.ratio:
            raise JobError(f"the plan switches from {a!r} (pruned {va.ratio}) to {b!r} (pruned {vb.ratio}); "
                           "pruning removes channels, it cannot grow them back")


def job_from_plan(plan, device: str = "cpu") -> Job:
    """The training job of a `depl.plan.Plan` (validated: raises JobError or DataError)."""
    scenario = plan.scenario_object()
    if not plan.epochs:
        raise JobError("the plan has no epochs")
    schedule = [e.model for e in plan.epochs]
    try:
        # before anything is imported: the code is the user's to run, and the code the plan was made with
        check_code(scenario, pinned=plan.scenario_spec is not None)
        spec = data_mod.data_spec(scenario, plan.datasets)
        source = spec.load()
        versions = version_specs(scenario, source, sorted(set(schedule)))
    except CodeRefused as e:  # a plan from elsewhere names the folder its code comes from
        raise CodeRefused(f"{plan.source}: {'scenario_spec.' if plan.scenario_spec is not None else ''}{e}",
                          e.folder) from None
    check_switches(versions, schedule)
    clusters = {c.name: c.nodes for c in scenario.clusters}
    nodes = {e.cluster: clusters[e.cluster] for e in plan.epochs}
    return Job(spec, versions, nodes, [(e.epoch, e.model, e.cluster) for e in plan.epochs],
               TrainOptions.of(scenario.training, device, scenario.code_dir))


# --------------------------------------------------------------------------- #
# The pieces every back end shares
# --------------------------------------------------------------------------- #

derive_seed = data_mod.derive_seed  # one derivation of every stream of a run (its home is below: data.py)


INIT_STREAM, TRAIN_STREAM = 1, 2


def optimizer(params, options: TrainOptions, lr: float) -> torch.optim.Optimizer:
    """The scenario's optimiser over `params` at learning rate `lr` (made afresh for each node's round)."""
    if options.optimizer == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=options.weight_decay)
    if options.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=options.weight_decay)
    return torch.optim.SGD(params, lr=lr, momentum=options.momentum, weight_decay=options.weight_decay)


def pass_seed(seed: int, p: int) -> int:
    """The data order of a round's pass `p` (0-based): the round's own seed for its first pass."""
    return seed if p == 0 else derive_seed(seed, p)


def local_epoch(model: nn.Module, x: torch.Tensor, y: torch.Tensor, options: TrainOptions, seed: int,
                epoch: int = 1, epochs: int = 1) -> float:
    """Train `model` in place for one round over (x, y) — `options.local_epochs` passes, one optimiser, at plan
    epoch `epoch` of `epochs` (the learning rate's schedule) —; returns the mean training loss."""
    model.train()
    opt = optimizer(model.parameters(), options, options.lr_at(epoch, epochs))
    criterion = options.criterion
    n = len(y)
    bs = options.batch_size
    total = torch.zeros((), device=x.device)
    for p in range(options.local_epochs):
        order = torch.randperm(n, generator=torch.Generator().manual_seed(pass_seed(seed, p)))
        for i in range(0, n, bs):
            idx = order[i:i + bs]
            loss = criterion.mean(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if options.clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), options.clip)
            opt.step()
            total += loss.detach() * len(idx)
    return float(total) / (n * options.local_epochs)


def fedavg(states: list[dict[str, torch.Tensor]], weights: list[float]) -> dict[str, torch.Tensor]:
    """FedAvg: the sample-weighted mean of the nodes' weights (integer buffers: the first node's)."""
    if len(states) == 1:
        return states[0]
    w = torch.tensor(weights, dtype=torch.float64)
    w = w / w.sum()
    out = {}
    for key, first in states[0].items():
        if not torch.is_floating_point(first):
            out[key] = first.clone()
            continue
        acc = torch.zeros_like(first, dtype=torch.float64)
        for s, wi in zip(states, w):
            acc += s[key].to(torch.float64) * wi
        out[key] = acc.to(first.dtype)
    return out


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 2048,
             criterion: Loss = Loss()) -> tuple[float, float | None]:
    """The mean loss (cross-entropy unless given) and the accuracy on (x, y); None for a loss without one."""
    model.eval()
    loss, correct = 0.0, 0.0
    for i in range(0, len(y), batch):
        out = model(x[i:i + batch])
        loss += criterion.total(out, y[i:i + batch])
        hits = criterion.hits(out, y[i:i + batch])
        correct += float(hits.sum()) if hits is not None else 0.0
    return loss / len(y), (correct / len(y) if criterion.classification else None)


@lru_cache(maxsize=32)
def node_data(spec: data_mod.DataSpec, nodes: int, iid: bool, node: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The training samples node `node` of a `nodes`-node cluster holds."""
    x, y = data_mod.select(spec)
    idx = data_mod.node_shares(y, nodes, iid, spec.alpha, spec.stream_seed(data_mod.DRAW_NODES))[node]
    return torch.from_numpy(np.ascontiguousarray(x[idx])), torch.from_numpy(np.ascontiguousarray(y[idx]))


@lru_cache(maxsize=4)
def test_data(spec: data_mod.DataSpec) -> tuple[torch.Tensor, torch.Tensor]:
    src = spec.load()
    return torch.from_numpy(src.x_test), torch.from_numpy(src.y_test)


def state_bytes(model: nn.Module) -> bytes:
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    return buf.getvalue()


def model_from_bytes(spec: VersionSpec, blob: bytes, device: str = "cpu") -> nn.Module:
    model = build_version(spec).to(device)
    model.load_state_dict(torch.load(io.BytesIO(blob), weights_only=True, map_location=device))
    return model


def on_device(xy: tuple[torch.Tensor, torch.Tensor], device: str) -> tuple[torch.Tensor, torch.Tensor]:
    return xy if device == "cpu" else (xy[0].to(device), xy[1].to(device))


# --------------------------------------------------------------------------- #
# The loop over the plan's epochs
# --------------------------------------------------------------------------- #

@dataclass(frozen=True)
class EpochResult(EpochRow):
    """A stored epoch (depl.store.EpochRow) and whether the version changed at it."""

    switched: bool = False


# train_round(model, job, cluster, epoch, seed) -> mean train loss; trains `model` in place
RoundFn = Callable[[nn.Module, Job, str, int, int], float]
EpochHook = Callable[[EpochResult, nn.Module], None]


def initial_model(job: Job, seed: int) -> nn.Module:
    """Seed `seed`'s starting point: the full network initialised from the seed, pruned to the first version."""
    first = job.init_version or job.epochs[0][1]
    return build_version(job.versions[first], derive_seed(seed, INIT_STREAM))


def walk_plan(job: Job, seed: int, train_round: RoundFn, on_epoch: EpochHook | None = None,
              start: tuple[int, bytes] | None = None, decide: DecideHook | None = None) -> list[EpochResult]:
    """Train the job's epochs for one seed; `start` = (epochs done, their checkpoint) resumes.

    Stops after an epoch whose loss is not finite (`depl.store.diverges`): that
    epoch is the last result.

    `decide(state, results)`, if given, is asked after every epoch where the run
    stands (a `depl.state.RunState`: epochs done, the version trained last, the
    test losses seen by this call, the seconds spent) and may replace the
    remaining epochs: it returns the new rest of the plan as (epoch, version,
    cluster), numbered on from the epochs done (an empty list stops the run),
    or None to keep the plan.  Without it the walk is the plan, unchanged.
    """
    job = job.seeded(seed)
    device = job.options.device
    x_test, y_test = on_device(test_data(job.data), device)
    done = 0
    if start is None:
        model = initial_model(job, seed).to(device)
        current = job.init_version or job.epochs[0][1]
    else:
        done, blob = start
        current = job.epochs[done - 1][1]
        model = model_from_bytes(job.versions[current], blob, device)
    results = []
    plan = list(job.epochs)
    state = RunState(done, None if start is None else current)
    while done < len(plan):
        epoch, version, cluster = plan[done]
        t0 = time.perf_counter()
        switched = version != current
        if switched:
            model = switch(model, job.versions[current], job.versions[version].ratio)
            current = version
        train_loss = train_round(model, job, cluster, epoch, seed)
        loss, acc = evaluate(model, x_test, y_test, criterion=job.options.criterion)
        r = EpochResult(epoch, version, cluster, loss, acc, train_loss, time.perf_counter() - t0, switched)
        results.append(r)
        if on_epoch is not None:
            on_epoch(r, model)  # the store records a non-finite loss as the seed's divergence
        if diverges(r):  # NaN weights only stay NaN: the seed is over, nothing to decide
            break
        done += 1
        if decide is not None:
            state = state.after(version, loss, r.seconds, 0.0)
            rest = decide(state, results)
            if rest is not None:
                plan = plan[:done] + _checked_rest(job, current, done, rest)
    return results


# decide(state, results) -> the remaining epochs [(epoch, version, cluster)], or None to keep the plan
DecideHook = Callable[[RunState, list[EpochResult]], "list[tuple[int, str, str]] | None"]


def _checked_rest(job: Job, current: str, done: int, rest) -> list[tuple[int, str, str]]:
    """A replacement for the remaining epochs, refused unless the job can train it."""
    rest = [(int(e), str(m), str(n)) for e, m, n in rest]
    for i, (epoch, version, cluster) in enumerate(rest):
        if epoch != done + 1 + i:
            raise JobError(f"the replacement plan numbers epoch {epoch} where {done + 1 + i} comes next")
        if version not in job.versions:
            raise JobError(f"the replacement plan trains version {version!r}, which this job has not built")
        if cluster not in job.nodes:
            raise JobError(f"the replacement plan uses cluster {cluster!r}, which this job has not set up")
    check_switches(job.versions, [current] + [m for _, m, _ in rest])
    return rest


class LocalFederation:
    """The ``local`` back end: FedAvg among a cluster's nodes, in this process."""

    name = "local"

    def __call__(self, model: nn.Module, job: Job, cluster: str, epoch: int, seed: int) -> float:
        nodes = job.nodes[cluster]
        if nodes == 1:  # no copy, no averaging: one node trains the model itself
            x, y = on_device(node_data(job.data, 1, job.options.iid, 0), job.options.device)
            return local_epoch(model, x, y, job.options, derive_seed(seed, TRAIN_STREAM, epoch, 0), epoch,
                               len(job.epochs))
        states, weights, losses = [], [], []
        for node in range(nodes):
            x, y = on_device(node_data(job.data, nodes, job.options.iid, node), job.options.device)
            m = copy.deepcopy(model)
            losses.append(local_epoch(m, x, y, job.options, derive_seed(seed, TRAIN_STREAM, epoch, node), epoch,
                                      len(job.epochs)))
            states.append(m.state_dict())
            weights.append(float(len(y)))
        model.load_state_dict(fedavg(states, weights))
        return float(np.average(losses, weights=weights))
