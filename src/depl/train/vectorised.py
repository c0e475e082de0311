"""Many seeds of one plan trained as one batched computation (torch.func).

The per-seed loop (`federation.walk_plan` + `LocalFederation`) trains one
small model at a time; most of a CPU's vector width and every core but one
sit idle.  Here S seeds of the same model version are one *stack*: every
parameter and buffer gets a leading seed dimension, and one forward/backward
pass trains all S at once: as batched matrix products over the seed axis
(`GemmNet`) when every layer of the net has that form, else
`torch.func.functional_call` under `torch.vmap`.

The mathematics is the per-seed loop's, seed by seed:

* initialisation: seed s's weights are `federation.initial_model(job, s)`,
  stacked;
* data order: seed s, epoch k, node i visits its node's samples in the order
  `randperm(n, derive_seed(s, TRAIN_STREAM, k, i))` — the same permutation
  the loop draws; mini-batch j of the stack is batch j of every seed;
* loss: each seed's batch mean of the scenario's loss (`depl.train.losses`:
  its per-sample losses over the stack's S × batch samples, averaged per
  seed); the stack minimises their *sum*, whose gradient with respect to seed
  s's parameters is seed s's own gradient (the seeds share no parameter);
* the optimiser: SGD with momentum, Adam and AdamW, weight decay included,
  are element-wise (no coupling across elements), so one optimiser over
  stacked tensors is S independent optimisers; it is created afresh every
  round at the round's learning rate, like the loop's; a gradient-norm clip
  is taken per seed (each seed's norm over its own parameters, as
  `torch.nn.utils.clip_grad_norm_` does for one model);
* FedAvg: each node trains its own copy of the stack; `federation.fedavg` is
  element-wise too, so averaging stacks averages every seed's nodes;
* a switch unstacks the trained models, prunes each with `prune.switch`
  (Torch-Pruning picks each seed's own channels) and re-stacks them: the
  pruned shapes are equal by construction (`prune.py`);
* the nets have no dropout (`nets.py`); if one had, `vmap(randomness=
  "different")` would draw each seed's own mask.

Only floating-point rounding differs from the loop (the batched convolutions
and matrix products are other kernels, summing in another order), so a seed's trajectory here equals its loop trajectory to
float tolerance, and is bit-for-bit deterministic for the same seeds in the
same stack (tests/train/test_vectorised.py).
"""

from __future__ import annotations

import copy
import itertools
import math
import time
from typing import Callable, Iterable

import numpy as np
import torch
import torch.fx
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, stack_module_state

from .federation import (TRAIN_STREAM, EpochResult, Job, TrainOptions, derive_seed, fedavg, initial_model,
                         model_from_bytes, node_data, on_device, optimizer, pass_seed, test_data)
from .losses import Loss
from ..store import diverges
from .prune import VersionSpec, build_version, switch

# activations are held for S seeds × a mini-batch; evaluation is chunked so
# that S × chunk stays below this many samples (≈100 MB for mnist1d-small's net)
EVAL_SAMPLES = 16_384
# how a stack computes: "gemm" (batched matrix products, nets whose every layer has that form), "vmap"
# (torch.func over any net), "auto" (gemm where it applies, else vmap)
KERNELS = ("auto", "gemm", "vmap")


# ---- the batched-GEMM form of a stack ----------------------------------------------------------------------------
#
# Under vmap a convolution of S stacked models becomes one grouped convolution (S groups), and oneDNN's grouped
# backward on CPU is slow: it was two thirds of a stacked step.  A net made only of convolutions, linear layers,
# ReLU, max-pooling and flattening is instead run here as batched matrix products over the seed axis: every
# convolution is im2col (a channels-last patch matrix of the S × batch samples) times the stacked weights, one
# `torch.baddbmm` per layer, whose backward is two more.  Activations stay channels-last between convolutions
# (the patch copy is then contiguous rows of channels); a flatten returns them to PyTorch's channels-first order,
# so a linear head sees the features in the order it was trained on.  Any other layer (batch norm, a depthwise
# convolution, your own code) keeps the whole net on vmap.

CF, CL = "channels-first", "channels-last"   # (S, B, C, *spatial) / (S, B, *spatial, C)


def _to(layout: str, v: tuple[torch.Tensor, str]) -> torch.Tensor:
    h, has = v
    if has == layout or h.dim() < 4:
        return h
    return h.movedim(2, -1) if layout == CL else h.movedim(-1, 2)


class _Patches(torch.autograd.Function):
    """im2col of channels-last (S, B, *spatial, C) → (S, B·positions, kernel·C); backward is col2im."""

    @staticmethod
    def forward(ctx, h, kernel, stride, padding):
        pad = [0, 0]
        for p in reversed(padding):
            pad += [p, p]
        hp = F.pad(h, pad)
        win = hp
        for d, (k, s) in enumerate(zip(kernel, stride)):
            win = win.unfold(2 + d, k, s)        # (S, B, *out, C, *kernel), a view
        nd = len(kernel)
        out = win.shape[2:2 + nd]
        ctx.geometry = (tuple(hp.shape), tuple(h.shape), out, kernel, stride, padding)
        win = win.movedim(2 + nd, -1)            # (S, B, *out, *kernel, C)
        return win.reshape(h.shape[0], -1, math.prod(kernel) * h.shape[-1])

    @staticmethod
    def backward(ctx, g):
        padded, shape, out, kernel, stride, padding = ctx.geometry
        g = g.reshape(*padded[:2], *out, *kernel, padded[-1])
        gp = g.new_zeros(padded)
        for offs in itertools.product(*(range(k) for k in kernel)):
            dst = gp[(slice(None), slice(None)) + tuple(slice(o, o + s * (n - 1) + 1, s)
                                                         for o, s, n in zip(offs, stride, out))]
            dst += g[(Ellipsis,) + offs + (slice(None),)]
        inner = tuple(slice(p, p + n) for p, n in zip(padding, shape[2:-1]))
        return gp[(slice(None), slice(None)) + inner], None, None, None


def _conv(m: nn.Module, w: torch.Tensor, b: torch.Tensor | None, h: torch.Tensor) -> torch.Tensor:
    nd = w.dim() - 3
    cols = _Patches.apply(h, tuple(m.kernel_size), tuple(m.stride), tuple(m.padding))
    wt = w.movedim(1, -1).movedim(1, -2).reshape(w.shape[0], -1, w.shape[1])  # (S, kernel·C, out channels)
    y = torch.bmm(cols, wt) if b is None else torch.baddbmm(b.unsqueeze(1), cols, wt)
    out = [(n + 2 * p - k) // s + 1 for n, k, s, p in zip(h.shape[2:2 + nd], m.kernel_size, m.stride, m.padding)]
    return y.view(h.shape[0], h.shape[1], *out, w.shape[1])


def _linear(w: torch.Tensor, b: torch.Tensor | None, h: torch.Tensor) -> torch.Tensor:
    flat = h.reshape(h.shape[0], -1, h.shape[-1])
    y = torch.bmm(flat, w.transpose(1, 2)) if b is None else torch.baddbmm(b.unsqueeze(1), flat, w.transpose(1, 2))
    return y.view(*h.shape[:-1], w.shape[1])


def _maxpool(m: nn.Module, h: torch.Tensor, layout: str) -> torch.Tensor:
    s, b = h.shape[:2]
    if layout == CF:
        y = F.max_pool2d(h.flatten(0, 1), m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode)
        return y.view(s, b, *y.shape[1:])
    y = F.max_pool2d(h.flatten(0, 1).permute(0, 3, 1, 2), m.kernel_size, m.stride, m.padding, m.dilation,
                     m.ceil_mode)  # a channels_last tensor: the permute back is contiguous
    return y.permute(0, 2, 3, 1).view(s, b, *y.shape[2:], y.shape[1])


def _gemm_conv(m: nn.Module) -> bool:
    return (isinstance(m, (nn.Conv1d, nn.Conv2d)) and m.groups == 1 and m.padding_mode == "zeros"
            and not isinstance(m.padding, str) and set(m.dilation) == {1})


_RELU = (torch.relu, F.relu)
_FLATTEN = (torch.flatten,)


def _node_ok(n: torch.fx.Node, mods: dict[str, nn.Module]) -> bool:
    """Whether GemmNet computes this node of a traced forward as the module would."""
    if n.op == "call_module":
        m = mods[n.target]
        return (_gemm_conv(m) or isinstance(m, (nn.Linear, nn.ReLU, nn.Identity))
                or (isinstance(m, nn.MaxPool2d) and not m.return_indices)
                or (isinstance(m, nn.Flatten) and m.start_dim == 1 and m.end_dim == -1))
    if n.op == "call_function":
        return n.target in _RELU or (n.target in _FLATTEN and tuple(n.args[1:]) in ((1,), (1, -1)) and not n.kwargs)
    if n.op == "call_method":  # x.relu(), x.flatten(1); x.flatten() would merge the batch too
        return (n.target == "relu" and len(n.args) == 1) or (n.target == "flatten" and not n.kwargs
                                                              and tuple(n.args[1:]) in ((1,), (1, -1)))
    if n.op == "output":  # one tensor of logits
        return isinstance(n.args[0], torch.fx.Node)
    return n.op == "placeholder"


def _supported(gm: torch.fx.GraphModule) -> bool:
    mods = dict(gm.named_modules())
    nodes = list(gm.graph.nodes)
    return sum(n.op == "placeholder" for n in nodes) == 1 and all(_node_ok(n, mods) for n in nodes)


class GemmNet:
    """A stacked net's forward as batched GEMMs, or None (`of`) when a layer has no such form here."""

    def __init__(self, gm: torch.fx.GraphModule):
        self.graph = gm.graph
        self.mods = dict(gm.named_modules())

    @classmethod
    def of(cls, model: nn.Module) -> "GemmNet | None":
        try:
            gm = torch.fx.symbolic_trace(model)
        except Exception:  # noqa: BLE001 - a forward FX cannot trace (control flow on values) stays on vmap
            return None
        return cls(gm) if _supported(gm) else None

    def __call__(self, params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """x: (S, B, *input shape) → logits (S, B, classes)."""
        env: dict = {}
        for n in self.graph.nodes:
            if n.op == "placeholder":
                env[n] = (x, CF)
            elif n.op == "output":
                return _to(CF, env[n.args[0]])
            else:
                env[n] = self._apply(n, env[n.args[0]], params)
        raise AssertionError("an FX graph ends with its output")

    def _apply(self, n, v: tuple[torch.Tensor, str], params) -> tuple[torch.Tensor, str]:
        h, layout = v
        if n.op == "call_module":
            m = self.mods[n.target]
            w, b = params.get(f"{n.target}.weight"), params.get(f"{n.target}.bias")
            if isinstance(m, (nn.Conv1d, nn.Conv2d)):
                return _conv(m, w, b, _to(CL, v)), CL
            if isinstance(m, nn.Linear):
                return _linear(w, b, _to(CF, v)), CF
            if isinstance(m, nn.MaxPool2d):
                return _maxpool(m, h, layout), layout
            if isinstance(m, nn.Identity):
                return v
            if isinstance(m, nn.Flatten):
                return _to(CF, v).flatten(2), CF
            return self._relu(n, h), layout
        if n.target in ("flatten",) or n.target in _FLATTEN:
            return _to(CF, v).flatten(2), CF
        return self._relu(n, h), layout

    def _relu(self, n, h: torch.Tensor) -> torch.Tensor:
        # in place on a product only it reads: one pass and one allocation fewer (its backward needs no output)
        src = n.args[0]
        fresh = (src.op == "call_module" and len(src.users) == 1
                 and isinstance(self.mods[src.target], (nn.Conv1d, nn.Conv2d, nn.Linear)))
        return h.relu_() if fresh else torch.relu(h)


class Stack:
    """S models of one version: parameters and buffers stacked along a leading seed dimension."""

    def __init__(self, models: list[nn.Module], kernels: str = "auto"):
        if kernels not in KERNELS:
            raise ValueError(f"unknown kernels {kernels!r} (known: {', '.join(KERNELS)})")
        self.n = len(models)
        self.kernels = kernels
        params, buffers = stack_module_state(models)
        self.params = {k: v.detach() for k, v in params.items()}
        self.buffers = {k: v.detach().clone() for k, v in buffers.items()}
        # the architecture only; functional_call supplies every tensor
        self.base = copy.deepcopy(models[0]).to("meta")
        # batched GEMMs where every layer has that form, else vmap
        self.gemm = GemmNet.of(self.base) if kernels != "vmap" else None
        if kernels == "gemm" and self.gemm is None:
            raise ValueError(f"{type(models[0]).__name__} has a layer without a batched-GEMM form; use vmap")

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

    def restacked(self, models: list[nn.Module]) -> "Stack":
        """A stack of other models (a switch's pruned ones) on the same kernels."""
        return Stack(models, self.kernels)

    def forward(self, params, buffers, x: torch.Tensor, shared: bool = False) -> torch.Tensor:
        """x: (S, batch, ...), or (batch, ...) seen by every model if `shared` → logits (S, batch, classes)."""
        if self.gemm is not None:
            return self.gemm(params, x.expand(self.n, *x.shape) if shared else x)
        return torch.vmap(lambda p, b, xx: functional_call(self.base, (p, b), (xx,)),
                          in_dims=(0, 0, None if shared else 0), randomness="different")(params, buffers, x)


def local_epoch_stack(stack: Stack, x: torch.Tensor, y: torch.Tensor, options: TrainOptions,
                      seeds: list[int], epoch: int = 1, epochs: int = 1) -> torch.Tensor:
    """`federation.local_epoch` for every model of the stack at once (seed i's order from seeds[i])."""
    stack.base.train()
    params = {k: v.clone().requires_grad_() for k, v in stack.params.items()}
    opt = optimizer(list(params.values()), options, options.lr_at(epoch, epochs))
    criterion = options.criterion
    n = len(y)
    bs = options.batch_size
    total = torch.zeros(stack.n, device=x.device)
    for p in range(options.local_epochs):
        orders = torch.stack([torch.randperm(n, generator=torch.Generator().manual_seed(pass_seed(s, p)))
                              for s in seeds])
        for i in range(0, n, bs):
            idx = orders[:, i:i + bs]
            losses = per_seed_mean(stack.forward(params, stack.buffers, x[idx]), y[idx], criterion)
            opt.zero_grad(set_to_none=True)
            losses.sum().backward()
            if options.clip is not None:
                clip_per_seed(list(params.values()), options.clip)
            opt.step()
            total += losses.detach() * idx.shape[1]
    stack.params = {k: v.detach() for k, v in params.items()}
    return total / (n * options.local_epochs)


def clip_per_seed(params: list[torch.Tensor], max_norm: float) -> None:
    """`torch.nn.utils.clip_grad_norm_` for every seed of a stack: seed s's gradients (row s of every parameter)
    scaled by max_norm / (their norm + 1e-6) where that is below 1."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    norms = torch.stack([g.flatten(1).norm(2, dim=1) for g in grads]).norm(2, dim=0)  # (S,)
    coef = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef.view(-1, *([1] * (g.dim() - 1))))


def per_seed_mean(out: torch.Tensor, y: torch.Tensor, criterion: Loss = Loss()) -> torch.Tensor:
    """(S, batch, outputs), (S, batch, ...) → each seed's batch mean of the loss, (S,)."""
    if criterion.name == "cross_entropy":  # the one kernel over S × batch samples, as before the loss was chosen
        return per_seed_mean_ce(out, y)
    return criterion.per_sample(out.flatten(0, 1), y.flatten(0, 1)).view(y.shape[:2]).mean(1)


def per_seed_mean_ce(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(S, batch, classes), (S, batch) → each seed's mean cross-entropy, (S,)."""
    return F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(y.shape).mean(1)


@torch.no_grad()
def evaluate_stack(stack: Stack, x: torch.Tensor, y: torch.Tensor,
                   criterion: Loss = Loss()) -> tuple[np.ndarray, np.ndarray | None]:
    """Every model's mean loss (cross-entropy unless given) and accuracy on (x, y); None for a loss without one."""
    stack.base.eval()
    chunk = max(1, EVAL_SAMPLES // stack.n)
    loss = np.zeros(stack.n)
    correct = np.zeros(stack.n)
    for i in range(0, len(y), chunk):
        xb, yb = x[i:i + chunk], y[i:i + chunk]
        out = stack.forward(stack.params, stack.buffers, xb, shared=True)
        if criterion.name == "cross_entropy":
            per = F.cross_entropy(out.flatten(0, 1), yb.repeat(stack.n), reduction="none").view(stack.n, -1)
        else:
            ys = yb.expand(stack.n, *yb.shape).flatten(0, 1)
            per = criterion.per_sample(out.flatten(0, 1), ys).view(stack.n, -1)
        loss += per.sum(1).double().cpu().numpy()
        hits = criterion.hits(out.flatten(0, 1), yb.expand(stack.n, *yb.shape).flatten(0, 1))
        if hits is not None:
            correct += hits.view(stack.n, -1).sum(1).cpu().numpy()
    return loss / len(y), (correct / len(y) if criterion.classification else None)


def federated_round(stack: Stack, job: Job, cluster: str, epoch: int, seeds: list[int]) -> np.ndarray:
    """`LocalFederation` for every seed of the stack: each node trains a copy, FedAvg per seed."""
    nodes = job.nodes[cluster]
    if nodes == 1:
        x, y = on_device(node_data(job.data, 1, job.options.iid, 0), job.options.device)
        return local_epoch_stack(stack, x, y, job.options, [derive_seed(s, TRAIN_STREAM, epoch, 0) for s in seeds],
                                 epoch, len(job.epochs)).cpu().numpy()
    start = stack.params
    states, weights, losses = [], [], []
    for node in range(nodes):
        x, y = on_device(node_data(job.data, nodes, job.options.iid, node), job.options.device)
        stack.params = start
        losses.append(local_epoch_stack(stack, x, y, job.options,
                                        [derive_seed(s, TRAIN_STREAM, epoch, node) for s in seeds],
                                        epoch, len(job.epochs)).cpu().numpy())
        states.append(stack.state())
        weights.append(float(len(y)))
    stack.load(fedavg(states, weights))
    return np.average(np.array(losses), axis=0, weights=weights)


# on_epochs(seeds: those trained this epoch, results: one EpochResult per seed, models: () -> their trained models)
# -> None, or the seeds that leave the stack now (an adaptive run's seeds whose rest changed)
StackHook = Callable[[list[int], list[EpochResult], Callable[[], list[nn.Module]]], "Iterable[int] | None"]


def walk_plan_stack(job: Job, seeds: list[int], on_epochs: StackHook | None = None,
                    start: tuple[int, list[bytes]] | None = None, kernels: str = "auto") -> list[list[EpochResult]]:
    """`federation.walk_plan` for several seeds at once; `start` = (epochs done, each seed's checkpoint).

    Returns the results epoch by epoch (one list of per-seed results per epoch, in the order of
    `seeds`).  A seed whose loss becomes non-finite (`depl.store.diverges`) leaves the stack after
    that epoch, as `walk_plan` stops, and so does every seed `on_epochs` returns: the later lists
    are shorter and the others train on untouched (no operation mixes seeds: per-seed losses, an
    element-wise optimiser and FedAvg, and the gradient of a sum is each term's own).
    """
    if not job.stackable and len(seeds) > 1:
        raise ValueError("these runs draw their own data: their seeds train one by one (federation.walk_plan), "
                         "not as one stack")
    job = job.seeded(seeds[0]) if len(seeds) == 1 else job
    dev = job.options.device
    x_test, y_test = on_device(test_data(job.data), dev)
    done = 0
    if start is None:
        current = job.init_version or job.epochs[0][1]
        stack = Stack([initial_model(job, s).to(dev) for s in seeds], kernels)
    else:
        done, blobs = start
        current = job.epochs[done - 1][1]
        stack = Stack([model_from_bytes(job.versions[current], b, dev) for b in blobs], kernels)
    out = []
    for epoch, version, cluster in job.epochs[done:]:
        t0 = time.perf_counter()
        switched = version != current
        if switched:
            stack = stack.restacked([switch(m, job.versions[current], job.versions[version].ratio).to(dev)
                                     for m in stack.models(job.versions[current])])
            current = version
        train_loss = federated_round(stack, job, cluster, epoch, seeds)
        loss, acc = evaluate_stack(stack, x_test, y_test, job.options.criterion)
        # the stack's wall time shared evenly: seconds per seed-epoch, as the loop records
        secs = (time.perf_counter() - t0) / len(seeds)
        results = [EpochResult(epoch, version, cluster, float(loss[i]), None if acc is None else float(acc[i]),
                               float(train_loss[i]), secs, switched) for i in range(len(seeds))]
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
