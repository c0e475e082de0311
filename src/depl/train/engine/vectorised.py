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
* data: one data every seed trains on, or (runs that draw their own data, draws of one size: `Job.stacks`)
  every seed's own draw stacked along the seed axis (`StackData`), each mini-batch gathered from its seed's;
* data order: seed s, epoch k, node i visits its node's samples in the order
  `randperm(n, derive_seed(s, TRAIN_STREAM, k, i))` — the same permutation
  the loop draws; mini-batch j of the stack is batch j of every seed;
* loss: each seed's batch mean of the scenario's loss (`depl.train.task.losses`:
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
from ..task.losses import Loss
from ...store import diverges
from ..task.prune import VersionSpec, build_version, switch

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
# (the patch copy is then contiguous rows of channels); a flatten keeps their order (a view, FLAT_CL) and the
# linear head after it takes its weight's columns in that order, so it computes what it was trained to on PyTorch's
# channels-first features.  The convolutions' weights train laid out kernel-major (`kernel_major`), so no step
# rearranges them.  Any other layer (batch norm, a depthwise convolution, your own code) keeps the whole net on
# vmap.

CF, CL = "channels-first", "channels-last"   # (S, B, C, *spatial) / (S, B, *spatial, C)
# a third layout: channels-last activations flattened in their own order, (S, B, spatial·C), as the tuple
# (FLAT_CL, spatial shape, C); a linear layer reading them takes its weight's columns in that order instead of
# the activations in PyTorch's (a copy of the small weight, not of the activations: and their gradient comes back
# in the layout the convolution before wrote)
FLAT_CL = "channels-last, flattened"


def _to(layout: str, v: tuple[torch.Tensor, str | tuple]) -> torch.Tensor:
    h, has = v
    if isinstance(has, tuple):
        _, spatial, c = has
        return h.view(*h.shape[:2], *spatial, c).movedim(-1, 2).flatten(2) if layout == CF else h
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


# A strided 1-D convolution whose input length is `stride` × its output length (MNIST-1D's: 40 → 20 → 10 → 5) needs
# no patch matrix: the channels-last input (S, B, L, C) seen as (S, B·out, stride·C) holds in row j the positions
# stride·j … stride·j + stride − 1, so every tap at the same shift q (position stride·(j + q) + r) is a slice of
# columns of that one view, and the convolution is one product per shift (2 for kernel 3 at stride 2, 3 for kernel
# 5) added into the output shifted by q positions.  It reads the activations where they are: no padding copy, no
# patch copy, no col2im in the backward — those copies were about half of a stack's step.  The products are the
# same sums of the same terms as im2col's, in another order (float rounding).
SLAB_MIN_CHANNELS = 8   # below this many input channels a shift's product is too thin; im2col (_Patches) then


def kernel_major(w: torch.Tensor) -> torch.Tensor:
    """A copy of stacked convolution weights (S, O, C, *kernel) of the same shape and values, laid out in memory
    as (S, *kernel, C, O): every product's weight matrix (S, taps·C, O) is then a view, and so is its gradient's."""
    k = w.movedim(1, -1).movedim(1, -2).clone(memory_format=torch.contiguous_format)   # (S, *kernel, C, O)
    return k.movedim(-1, 1).movedim(-1, 2)


def _kernel_major(w: torch.Tensor) -> torch.Tensor:
    """(S, O, C, *kernel) → (S, *kernel, C, O), a view where `kernel_major` laid the weights out, else a copy."""
    return w.movedim(1, -1).movedim(1, -2).contiguous()


def _slab_groups(kernel: int, stride: int, padding: int) -> list[tuple[int, int, list[int]]]:
    """[(shift q, first position r0 in the row, the taps in order of r)] of a 1-D convolution's taps (the taps of
    one shift are consecutive: a slice of the kernel)."""
    groups: dict[int, list[tuple[int, int]]] = {}
    for t in range(kernel):
        q, r = divmod(t - padding, stride)
        groups.setdefault(q, []).append((r, t))
    return [(q, g[0][0], [t for _, t in g]) for q, g in sorted(groups.items(), key=lambda kv: (kv[0] != 0, kv[0]))]


def _slab_ok(m: nn.Module, h: torch.Tensor) -> bool:
    if len(m.kernel_size) != 1 or h.dim() != 4 or h.shape[-1] < SLAB_MIN_CHANNELS or not h.is_contiguous():
        return False
    (k,), (s,), (p,) = m.kernel_size, m.stride, m.padding
    length = h.shape[2]
    out = (length + 2 * p - k) // s + 1
    groups = _slab_groups(k, s, p)
    return (length == s * out and groups[0][0] == 0 and all(abs(q) < out for q, _, _ in groups)
            and all(len(taps) > 0 for _, _, taps in groups))


class _SlabConv1d(torch.autograd.Function):
    """A 1-D convolution of channels-last (S, B, L, C) → (S, B, out, O), L = stride · out (`_slab_ok`).

    A shift q ≠ 0 adds row j + q of a slice of columns to output row j: over the flat (B·out) rows that is one
    product on row ranges of the views (`baddbmm_` in place, no shifted copy), which also pairs each sample's |q|
    edge rows with its neighbour's; those rows of the output (of the input's gradient) are kept aside and put back,
    and the weight gradient takes off the straddling pairs' small product."""

    @staticmethod
    def forward(ctx, h, w, b, stride, padding):
        S, B, L, C = h.shape
        O, k = w.shape[1], w.shape[3]
        out = L // stride
        N = B * out
        hv = h.view(S, N, stride * C)
        groups = _slab_groups(k, stride, padding)
        y = h.new_empty(S, B, out, O)
        yv = y.view(S, N, O)
        wk = _kernel_major(w)
        for q, r0, taps in groups:
            a = hv[..., r0 * C:(r0 + len(taps)) * C]
            wq = wk[:, taps[0]:taps[-1] + 1].view(S, len(taps) * C, O)
            if q == 0:
                if b is None:
                    torch.bmm(a, wq, out=yv)
                else:
                    torch.baddbmm(b.unsqueeze(1), a, wq, out=yv)
            else:   # y[j] += a[j + q] wq where 0 ≤ j, j + q < out
                edge = slice(0, -q) if q < 0 else slice(out - q, out)
                kept = y[:, :, edge].clone()
                if q < 0:
                    yv[:, -q:].baddbmm_(a[:, :N + q], wq)
                else:
                    yv[:, :N - q].baddbmm_(a[:, q:], wq)
                y[:, :, edge] = kept
        ctx.save_for_backward(h, wk)
        ctx.geometry = (stride, groups, b is not None)
        return y

    @staticmethod
    def backward(ctx, g):
        h, wk = ctx.saved_tensors
        stride, groups, has_bias = ctx.geometry
        S, B, L, C = h.shape
        O = wk.shape[-1]
        out = L // stride
        N = B * out
        g = g.contiguous()
        gv = g.view(S, N, O)
        hv = h.view(S, N, stride * C)
        h4 = h.view(S, B, out, stride * C)
        gwk = torch.empty_like(wk)      # (S, k, C, O): each shift's product written in place
        gh = None
        for q, r0, taps in groups:
            cols = slice(r0 * C, (r0 + len(taps)) * C)
            a = hv[..., cols]
            gwq = gwk[:, taps[0]:taps[-1] + 1].view(S, len(taps) * C, O)
            if q == 0:
                torch.bmm(a.transpose(1, 2), gv, out=gwq)
            elif q < 0:   # Σ_j a[j + q]ᵀ g[j]: the flat rows' product less the pairs across two samples
                torch.bmm(a[:, :N + q].transpose(1, 2), gv[:, -q:], out=gwq)
                if B > 1:
                    gwq.baddbmm_(h4[:, :-1, out + q:, cols].reshape(S, -1, len(taps) * C).transpose(1, 2),
                                 g[:, 1:, :-q].reshape(S, -1, O), alpha=-1)
            else:
                torch.bmm(a[:, q:].transpose(1, 2), gv[:, :N - q], out=gwq)
                if B > 1:
                    gwq.baddbmm_(h4[:, 1:, :q, cols].reshape(S, -1, len(taps) * C).transpose(1, 2),
                                 g[:, :-1, out - q:].reshape(S, -1, O), alpha=-1)
            if ctx.needs_input_grad[0]:
                wt = wk[:, taps[0]:taps[-1] + 1].view(S, len(taps) * C, O).transpose(1, 2)
                if gh is None and q == 0 and len(taps) == stride:
                    gh = torch.bmm(gv, wt)          # (S, B·out, stride·C)
                    continue
                if gh is None:
                    gh = h.new_zeros(S, N, stride * C)
                ghc = gh[..., cols]
                if q == 0:
                    ghc.baddbmm_(gv, wt)
                    continue
                # the input's row i takes g[i − q] wqᵀ where 0 ≤ i − q < out; each sample's edge rows kept aside
                edge = slice(out + q, out) if q < 0 else slice(0, q)
                gh4 = gh.view(S, B, out, stride * C)
                kept = gh4[:, :, edge, cols].clone()
                if q < 0:
                    ghc[:, :N + q].baddbmm_(gv[:, -q:], wt)
                else:
                    ghc[:, q:].baddbmm_(gv[:, :N - q], wt)
                gh4[:, :, edge, cols] = kept
        gb = g.sum((1, 2)) if has_bias else None
        # the weight's gradient laid out as the weight (kernel-major where `kernel_major` laid it out)
        return (None if gh is None else gh.view(S, B, L, C)), gwk.permute(0, 3, 2, 1), gb, None, None


def _conv(m: nn.Module, w: torch.Tensor, b: torch.Tensor | None, h: torch.Tensor) -> torch.Tensor:
    if _slab_ok(m, h):
        return _SlabConv1d.apply(h, w, b, m.stride[0], m.padding[0])
    nd = w.dim() - 3
    cols = _Patches.apply(h, tuple(m.kernel_size), tuple(m.stride), tuple(m.padding))
    wt = w.movedim(1, -1).movedim(1, -2).reshape(w.shape[0], -1, w.shape[1])  # (S, kernel·C, out channels)
    y = torch.bmm(cols, wt) if b is None else torch.baddbmm(b.unsqueeze(1), cols, wt)
    out = [(n + 2 * p - k) // s + 1 for n, k, s, p in zip(h.shape[2:2 + nd], m.kernel_size, m.stride, m.padding)]
    # not a view (`_unsafe_view`, as torch.matmul's): a ReLU in place on it then needs no as_strided backward
    return torch.ops.aten._unsafe_view(y, (h.shape[0], h.shape[1], *out, w.shape[1]))


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


def _flatten(v: tuple[torch.Tensor, str | tuple]) -> tuple[torch.Tensor, str | tuple]:
    """flatten(1) of a stacked (S, B, ...) value; channels-last ones stay in their order (FLAT_CL), a view."""
    h, layout = v
    if layout == CL and h.dim() >= 4:
        return h.flatten(2), (FLAT_CL, tuple(h.shape[2:-1]), h.shape[-1])
    return _to(CF, v).flatten(2), CF


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
        # the convolutions' weights, trained laid out kernel-major (`kernel_major`)
        self.conv_weights = {f"{k}.weight" for k, m in self.mods.items() if isinstance(m, (nn.Conv1d, nn.Conv2d))}

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
                if isinstance(layout, tuple):     # (S, O, C·spatial) → the columns in order spatial·C
                    _, spatial, c = layout
                    w = w.view(w.shape[0], w.shape[1], c, *spatial).movedim(2, -1).reshape(w.shape)
                    return _linear(w, b, h), CF
                return _linear(w, b, _to(CF, v)), CF
            if isinstance(m, nn.MaxPool2d):
                return _maxpool(m, h, layout), layout
            if isinstance(m, nn.Identity):
                return v
            if isinstance(m, nn.Flatten):
                return _flatten(v)
            return self._relu(n, h), layout
        if n.target in ("flatten",) or n.target in _FLATTEN:
            return _flatten(v)
        return self._relu(n, h), layout

    def _relu(self, n, h: torch.Tensor) -> torch.Tensor:
        # in place on a product only it reads: one pass and one allocation fewer (its backward needs no output)
        src = n.args[0]
        fresh = (src.op == "call_module" and len(src.users) == 1
                 and isinstance(self.mods[src.target], (nn.Conv1d, nn.Conv2d, nn.Linear)))
        return _ReluInPlace.apply(h) if fresh else torch.relu(h)


class _ReluInPlace(torch.autograd.Function):
    """ReLU in place on a product only it reads; its backward masks the incoming gradient in place where that is a
    dense tensor (the product's gradient the next layer's backward just made), one pass and no new tensor."""

    @staticmethod
    def forward(ctx, h):
        ctx.mark_dirty(h)
        h.relu_()
        ctx.save_for_backward(h)
        return h

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        if g.is_contiguous() and g.shape == y.shape:
            return torch.ops.aten.threshold_backward.grad_input(g, y, 0, grad_input=g)
        return torch.ops.aten.threshold_backward(g, y, 0)


# A stack's step allocates activations of megabytes and frees them again: glibc's malloc gives such blocks back to
# the system (mmap, or trimming the top of the heap) and takes fresh pages for the next step, each page faulted in
# on first touch — a fifth of a 16-seed step of mnist1d-small's net.  The stack keeps them in its heap instead.
HEAP_TRIM_BYTES = 1 << 30      # freed memory kept before the top of the heap is given back
HEAP_MMAP_BYTES = 32 << 20     # blocks up to this size come from the heap (glibc's largest such threshold)
_heap_kept = False


def keep_heap() -> bool:
    """Have glibc's malloc keep freed blocks for reuse (`mallopt`), once per process; False where this is not glibc."""
    global _heap_kept
    if not _heap_kept:
        _heap_kept = True
        try:
            import ctypes

            libc = ctypes.CDLL("libc.so.6")
            M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
            return bool(libc.mallopt(M_TRIM_THRESHOLD, HEAP_TRIM_BYTES)
                        and libc.mallopt(M_MMAP_THRESHOLD, HEAP_MMAP_BYTES))
        except (OSError, AttributeError):   # not glibc (macOS, musl): its own allocator as it is
            return False
    return True


class Stack:
    """S models of one version: parameters and buffers stacked along a leading seed dimension."""

    def __init__(self, models: list[nn.Module], kernels: str = "auto"):
        if kernels not in KERNELS:
            raise ValueError(f"unknown kernels {kernels!r} (known: {', '.join(KERNELS)})")
        keep_heap()
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

    def trainable(self) -> dict[str, torch.Tensor]:
        """Fresh copies of the parameters to train (the optimiser updates them in place); under the GEMM kernels the
        convolutions' weights laid out kernel-major, so that no step rearranges them."""
        lay = self.gemm.conv_weights if self.gemm is not None else set()
        return {k: (kernel_major(v) if k in lay else v.clone()).requires_grad_() for k, v in self.params.items()}

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
                      seeds: list[int], epoch: int = 1, epochs: int = 1, own: bool = False) -> torch.Tensor:
    """`federation.local_epoch` for every model of the stack at once (seed i's order from seeds[i]); `own`: x and
    y hold every seed's own samples, (S, n, ...), else one data all seeds train on, (n, ...)."""
    stack.base.train()
    params = stack.trainable()
    opt = optimizer(list(params.values()), options, options.lr_at(epoch, epochs))
    criterion = options.criterion
    n = y.shape[1] if own else len(y)
    bs = options.batch_size
    total = torch.zeros(stack.n, device=x.device)
    rows = torch.arange(stack.n, device=x.device).unsqueeze(1)
    for p in range(options.local_epochs):
        orders = torch.stack([torch.randperm(n, generator=torch.Generator().manual_seed(pass_seed(s, p)))
                              for s in seeds]).to(x.device)
        for i in range(0, n, bs):
            idx = orders[:, i:i + bs]
            xb, yb = (x[rows, idx], y[rows, idx]) if own else (x[idx], y[idx])   # (S, batch, ...)
            losses = per_seed_mean(stack.forward(params, stack.buffers, xb), yb, criterion)
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
def evaluate_stack(stack: Stack, x: torch.Tensor, y: torch.Tensor, criterion: Loss = Loss(),
                   own: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
    """Every model's mean loss (cross-entropy unless given) and accuracy on (x, y); None for a loss without one.
    `own`: x and y hold every seed's own test set, (S, n, ...), else one test set of every seed, (n, ...)."""
    stack.base.eval()
    chunk = max(1, EVAL_SAMPLES // stack.n)
    loss = np.zeros(stack.n)
    correct = np.zeros(stack.n)
    n = y.shape[1] if own else len(y)
    for i in range(0, n, chunk):
        if own:
            xb, ys = x[:, i:i + chunk], y[:, i:i + chunk].flatten(0, 1)
            out = stack.forward(stack.params, stack.buffers, xb)
        else:
            xb, yb = x[i:i + chunk], y[i:i + chunk]
            out = stack.forward(stack.params, stack.buffers, xb, shared=True)
            ys = yb.repeat(stack.n) if criterion.name == "cross_entropy" else yb.expand(stack.n, *yb.shape).flatten(0, 1)
        if criterion.name == "cross_entropy":
            per = F.cross_entropy(out.flatten(0, 1), ys, reduction="none").view(stack.n, -1)
        else:
            per = criterion.per_sample(out.flatten(0, 1), ys).view(stack.n, -1)
        loss += per.sum(1).double().cpu().numpy()
        hits = criterion.hits(out.flatten(0, 1), ys)
        if hits is not None:
            correct += hits.view(stack.n, -1).sum(1).cpu().numpy()
    return loss / n, (correct / n if criterion.classification else None)


class StackData:
    """The data of a stack's seeds: one data every seed trains and is tested on (`Job.stackable`), or every
    seed's own draw (`Job.stacks`), stacked along a leading seed dimension — each seed's draw exactly as the
    per-seed loop makes it (`job.seeded(seed)`, `node_data`, `test_data`), loaded once per walk."""

    def __init__(self, job: Job, seeds: list[int]):
        self.job, self.seeds = job, list(seeds)
        self.own = not job.stackable and len(seeds) > 1
        self.loaded: dict = {}

    def _get(self, key, one: Callable[[Job], tuple[torch.Tensor, torch.Tensor]]):
        if key not in self.loaded:
            if not self.own:
                self.loaded[key] = on_device(one(self.job), self.job.options.device)
            else:
                parts = [one(self.job.seeded(s)) for s in self.seeds]
                shapes = [(tuple(x.shape), tuple(y.shape)) for x, y in parts]
                for s, shape in zip(self.seeds, shapes):
                    if shape != shapes[0]:
                        raise ValueError(f"seed {s}'s own draw of the data has samples and labels of shapes "
                                         f"{shape}, seed {self.seeds[0]}'s {shapes[0]}: draws of different sizes "
                                         f"train one by one (federation.walk_plan), not as one stack")
                self.loaded[key] = on_device((torch.stack([x for x, _ in parts]), torch.stack([y for _, y in parts])),
                                             self.job.options.device)
        return self.loaded[key]

    def node(self, nodes: int, node: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self._get(("node", nodes, node), lambda j: node_data(j.data, nodes, j.options.iid, node))

    def test(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._get(("test",), lambda j: test_data(j.data))

    def keep(self, rows: list[int]) -> None:
        """Only these seeds go on (`Stack.keep`)."""
        self.seeds = [self.seeds[i] for i in rows]
        if self.own:
            idx = torch.tensor(rows, dtype=torch.long)
            self.loaded = {k: tuple(t.index_select(0, idx.to(t.device)) for t in v) for k, v in self.loaded.items()}


def federated_round(stack: Stack, job: Job, cluster: str, epoch: int, seeds: list[int],
                    data: StackData | None = None) -> np.ndarray:
    """`LocalFederation` for every seed of the stack: each node trains a copy, FedAvg per seed."""
    data = data or StackData(job, seeds)
    nodes = job.nodes[cluster]
    if nodes == 1:
        x, y = data.node(1, 0)
        return local_epoch_stack(stack, x, y, job.options, [derive_seed(s, TRAIN_STREAM, epoch, 0) for s in seeds],
                                 epoch, len(job.epochs), data.own).cpu().numpy()
    start = stack.params
    states, weights, losses = [], [], []
    for node in range(nodes):
        x, y = data.node(nodes, node)
        stack.params = start
        losses.append(local_epoch_stack(stack, x, y, job.options,
                                        [derive_seed(s, TRAIN_STREAM, epoch, node) for s in seeds],
                                        epoch, len(job.epochs), data.own).cpu().numpy())
        states.append(stack.state())
        # every seed's draw holds as many samples per node (StackData): one weight per node, as the loop's
        weights.append(float(y.shape[1] if data.own else len(y)))
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
    if not job.stacks and len(seeds) > 1:
        raise ValueError("these runs draw their own data of sizes that may differ (your factory's draws, or a "
                         "Dirichlet split over nodes): their seeds train one by one (federation.walk_plan), "
                         "not as one stack")
    job = job.seeded(seeds[0]) if len(seeds) == 1 else job
    dev = job.options.device
    data = StackData(job, seeds)
    x_test, y_test = data.test()
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
        train_loss = federated_round(stack, job, cluster, epoch, seeds, data)
        loss, acc = evaluate_stack(stack, x_test, y_test, job.options.criterion, data.own)
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
            data.keep(alive)
            x_test, y_test = data.test()
            seeds = [seeds[i] for i in alive]
    return out
