"""Many seeds of one plan trained as one batched computation (torch.func).

The per-seed loop (`federation.walk_plan` + `LocalFederation`) trains one
small model at a time; most of a CPU's vector width and every core but one
sit idle.  Here S seeds of the same model version are one *stack*: every
parameter and buffer gets a leading seed dimension, and one forward/backward
pass of `torch.func.functional_call` under `torch.vmap` trains all S at once.

The mathematics is the per-seed loop's, seed by seed:

* initialisation: seed s's weights are `federation.initial_model(job, s)`,
  stacked;
* data order: seed s, epoch k, node i visits its node's samples in the order
  `randperm(n, derive_seed(s, TRAIN_STREAM, k, i))` — the same permutation
  the loop draws; mini-batch j of the stack is batch j of every seed;
* loss: the batch mean cross-entropy of each seed; the stack minimises their
  *sum*, whose gradient with respect to seed s's parameters is seed s's own
  gradient (the seeds share no parameter);
* SGD with momentum: `torch.optim.SGD` is element-wise (no weight decay, no
  coupling across elements), so one optimiser over stacked tensors is S
  independent optimisers; it is created afresh every local epoch, like the
  loop's;
* FedAvg: each node trains its own copy of the stack; `federation.fedavg` is
  element-wise too, so averaging stacks averages every seed's nodes;
* a switch unstacks the trained models, prunes each with `prune.switch`
  (Torch-Pruning picks each seed's own channels) and re-stacks them: the
  pruned shapes are equal by construction (`prune.py`);
* the nets have no dropout (`nets.py`); if one had, `vmap(randomness=
  "different")` would draw each seed's own mask.

Only floating-point rounding differs from the loop (the batched convolutions
are other kernels), so a seed's trajectory here equals its loop trajectory to
float tolerance, and is bit-for-bit deterministic for the same seeds in the
same stack (tests/train/test_vectorised.py).
"""

from __future__ import annotations

import copy
import time
from typing import Callable, Iterable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, stack_module_state

from .federation import (TRAIN_STREAM, EpochResult, Job, TrainOptions, derive_seed, fedavg, initial_model,
                         model_from_bytes, node_data, on_device, test_data)
from ..store import diverges
from .prune import VersionSpec, build_version, switch

# activations are held for S seeds × a mini-batch; evaluation is chunked so
# that S × chunk stays below this many samples (≈100 MB for mnist1d-small's net)
EVAL_SAMPLES = 16_384


class Stack:
    """S models of one version: parameters and buffers stacked along a leading seed dimension."""

    def __init__(self, models: list[nn.Module]):
        self.n = len(models)
        params, buffers = stack_module_state(models)
        self.params = {k: v.detach() for k, v in params.items()}
        self.buffers = {k: v.detach().clone() for k, v in buffers.items()}
        # the architecture only; functional_call supplies every tensor
        self.base = copy.deepcopy(models[0]).to("meta")

    def state(self) -> dict[str, torch.Tensor]:
        return {**self.params, **self.buffers}

    def load(self, state: dict[str, torch.Tensor]) -> None:
        self.params = {k: state[k] for k in self.params}
        self.buffers = {k: state[k] for k in self.buffers}

    def keep(self, rows: list[int]) -> None:
        """Only these models go on (the others diverged); the survivors' tensors are unchanged."""
        idx = torch.tensor(rows, dtype=torch.long)
        self.params = {k: v.index_select(0, idx.to(v.device)) for k, v in self.params.items()}
        self.buffers = {k: v.index_select(0, idx.to(v.device)) for k, v in self.buffers.items()}
        self.n = len(rows)

    def models(self, spec: VersionSpec) -> list[nn.Module]:
        """The S models as separate modules (for pruning and checkpoints)."""
        out = []
        for i in range(self.n):
            m = build_version(spec)
            m.load_state_dict({k: v[i] for k, v in self.state().items()})
            out.append(m)
        return out

    def forward(self, params, buffers, x: torch.Tensor, shared: bool = False) -> torch.Tensor:
        """x: (S, batch, ...), or (batch, ...) seen by every model if `shared` → logits (S, batch, classes)."""
        return torch.vmap(lambda p, b, xx: functional_call(self.base, (p, b), (xx,)),
                          in_dims=(0, 0, None if shared else 0), randomness="different")(params, buffers, x)


def local_epoch_stack(stack: Stack, x: torch.Tensor, y: torch.Tensor, options: TrainOptions,
                      seeds: list[int]) -> torch.Tensor:
    """`federation.local_epoch` for every model of the stack at once (seed i's order from seeds[i])."""
    stack.base.train()
    params = {k: v.clone().requires_grad_() for k, v in stack.params.items()}
    opt = torch.optim.SGD(list(params.values()), lr=options.lr, momentum=options.momentum)
    n = len(y)
    orders = torch.stack([torch.randperm(n, generator=torch.Generator().manual_seed(s)) for s in seeds])
    bs = options.batch_size
    total = torch.zeros(stack.n, device=x.device)
    per_seed_ce = torch.vmap(F.cross_entropy)
    for i in range(0, n, bs):
        idx = orders[:, i:i + bs]
        losses = per_seed_ce(stack.forward(params, stack.buffers, x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        losses.sum().backward()
        opt.step()
        total += losses.detach() * idx.shape[1]
    stack.params = {k: v.detach() for k, v in params.items()}
    return total / n


@torch.no_grad()
def evaluate_stack(stack: Stack, x: torch.Tensor, y: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Every model's mean cross-entropy and accuracy on (x, y)."""
    stack.base.eval()
    chunk = max(1, EVAL_SAMPLES // stack.n)
    loss = np.zeros(stack.n)
    correct = np.zeros(stack.n, dtype=np.int64)
    for i in range(0, len(y), chunk):
        xb, yb = x[i:i + chunk], y[i:i + chunk]
        out = stack.forward(stack.params, stack.buffers, xb, shared=True)
        ce = F.cross_entropy(out.flatten(0, 1), yb.repeat(stack.n), reduction="none").view(stack.n, -1)
        loss += ce.sum(1).double().cpu().numpy()
        correct += (out.argmax(2) == yb).sum(1).cpu().numpy()
    return loss / len(y), correct / len(y)


def federated_round(stack: Stack, job: Job, cluster: str, epoch: int, seeds: list[int]) -> np.ndarray:
    """`LocalFederation` for every seed of the stack: each node trains a copy, FedAvg per seed."""
    nodes = job.nodes[cluster]
    if nodes == 1:
        x, y = on_device(node_data(job.data, 1, job.options.iid, 0), job.options.device)
        return local_epoch_stack(stack, x, y, job.options,
                                 [derive_seed(s, TRAIN_STREAM, epoch, 0) for s in seeds]).cpu().numpy()
    start = stack.params
    states, weights, losses = [], [], []
    for node in range(nodes):
        x, y = on_device(node_data(job.data, nodes, job.options.iid, node), job.options.device)
        stack.params = start
        losses.append(local_epoch_stack(stack, x, y, job.options,
                                        [derive_seed(s, TRAIN_STREAM, epoch, node) for s in seeds]).cpu().numpy())
        states.append(stack.state())
        weights.append(float(len(y)))
    stack.load(fedavg(states, weights))
    return np.average(np.array(losses), axis=0, weights=weights)


# on_epochs(seeds: those trained this epoch, results: one EpochResult per seed, models: () -> their trained models)
# -> None, or the seeds that leave the stack now (an adaptive run's seeds whose rest changed)
StackHook = Callable[[list[int], list[EpochResult], Callable[[], list[nn.Module]]], "Iterable[int] | None"]


def walk_plan_stack(job: Job, seeds: list[int], on_epochs: StackHook | None = None,
                    start: tuple[int, list[bytes]] | None = None) -> list[list[EpochResult]]:
    """`federation.walk_plan` for several seeds at once; `start` = (epochs done, each seed's checkpoint).

    Returns the results epoch by epoch (one list of per-seed results per epoch, in the order of
    `seeds`).  A seed whose loss becomes non-finite (`depl.store.diverges`) leaves the stack after
    that epoch, as `walk_plan` stops, and so does every seed `on_epochs` returns: the later lists
    are shorter and the others train on untouched (no operation mixes seeds: per-seed losses, an
    element-wise optimiser and FedAvg, and the gradient of a sum is each term's own).
    """
    dev = job.options.device
    x_test, y_test = on_device(test_data(job.data), dev)
    done = 0
    if start is None:
        current = job.init_version or job.epochs[0][1]
        stack = Stack([initial_model(job, s).to(dev) for s in seeds])
    else:
        done, blobs = start
        current = job.epochs[done - 1][1]
        stack = Stack([model_from_bytes(job.versions[current], b, dev) for b in blobs])
    out = []
    for epoch, version, cluster in job.epochs[done:]:
        t0 = time.perf_counter()
        switched = version != current
        if switched:
            stack = Stack([switch(m, job.versions[current], job.versions[version].ratio).to(dev)
                           for m in stack.models(job.versions[current])])
            current = version
        train_loss = federated_round(stack, job, cluster, epoch, seeds)
        loss, acc = evaluate_stack(stack, x_test, y_test)
        # the stack's wall time shared evenly: seconds per seed-epoch, as the loop records
        secs = (time.perf_counter() - t0) / len(seeds)
        results = [EpochResult(epoch, version, cluster, float(loss[i]), float(acc[i]), float(train_loss[i]), secs,
                               switched) for i in range(len(seeds))]
        out.append(results)
        leave: set[int] = set()
        if on_epochs is not None:
            spec = job.versions[current]
            leave = set(on_epochs(list(seeds), results, lambda: stack.models(spec)) or ())
        alive = [i for i, r in enumerate(results) if not diverges(r) and seeds[i] not in leave]
        if len(alive) < len(seeds):
            if not alive:
                break
            stack.keep(alive)
            seeds = [seeds[i] for i in alive]
    return out
