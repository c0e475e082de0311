"""Model versions: a network pruned structurally with Torch-Pruning.

A version is (network, width, pruning ratio ρ).  Its architecture keeps
``max(1, round((1-ρ)·C))`` output channels of every prunable layer whose full
network has C (the output layer is never pruned), so a version's shape does
not depend on how it was reached: pruning the full net to 0.75 directly, or
to 0.5 and later to 0.75 (a *switch*), gives the same shapes.

A switch prunes the current *trained* model: in every coupled group of layers
the channels with the smallest L2 magnitude (Torch-Pruning's
`GroupMagnitudeImportance`) go, and the surviving channels keep their trained
weights (Torch-Pruning slices the tensors; nothing is re-initialised).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch_pruning as tp
from torch import nn

from .nets import build_net, seeded
from .custom import build_net as own


@dataclass(frozen=True)
class VersionSpec:
    """Everything needed to build a model version for a data set."""

    net: str
    width: int | None
    ratio: float
    input_shape: tuple[int, ...]
    n_classes: int
    net_args: str = ""          # your own network (net = MODULE:FUNCTION): its keyword arguments, as JSON
    code_dir: str | None = None  # ... and the folder its module is imported from first

    @property
    def own(self) -> bool:
        return ":" in self.net

    def full(self) -> "VersionSpec":
        return VersionSpec(self.net, self.width, 0.0, self.input_shape, self.n_classes, self.net_args, self.code_dir)

    def to_json(self) -> dict:
        d = {"net": self.net, "width": self.width, "ratio": self.ratio,
             "input_shape": list(self.input_shape), "n_classes": self.n_classes}
        if self.own:  # only then: built-in runs keep their identity
            d.update(net_args=self.net_args, code_dir=self.code_dir)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "VersionSpec":
        return cls(d["net"], d.get("width"), float(d["ratio"]), tuple(int(v) for v in d["input_shape"]), int(d["n_classes"]),
                   d.get("net_args", ""), d.get("code_dir"))


def make_net(spec: VersionSpec) -> nn.Module:
    """The full network of `spec`: a built-in one, or FUNCTION(**net_args) of your own module."""
    if spec.own:
        return own(spec.net, json.loads(spec.net_args or "{}"), spec.code_dir)
    return build_net(spec.net, spec.width, spec.input_shape, spec.n_classes)


PRUNABLE = (nn.Conv1d, nn.Conv2d, nn.Linear)


def _output_layers(model: nn.Module, spec: VersionSpec, example: torch.Tensor) -> list[nn.Module]:
    """The layers that must keep their outputs: the class logits."""
    out = [m for m in model.modules() if isinstance(m, nn.Linear) and m.out_features == spec.n_classes]
    if spec.own:  # a network we do not know: also the last prunable layer a forward pass runs
        ran: list[nn.Module] = []
        hooks = [m.register_forward_hook(lambda mod, i, o: ran.append(mod)) for m in model.modules()
                 if isinstance(m, PRUNABLE)]
        try:
            with torch.no_grad():
                model(example)
        finally:
            for h in hooks:
                h.remove()
        if ran and ran[-1] not in out:
            out.append(ran[-1])
    return out


@lru_cache(maxsize=64)
def _full_channels(spec: VersionSpec) -> dict[str, int]:
    """Output channels of every prunable layer of the full network, by module name."""
    model = make_net(spec)
    out = {}
    for name, m in model.named_modules():
        if isinstance(m, (nn.Conv1d, nn.Conv2d)):
            out[name] = m.out_channels
        elif isinstance(m, nn.Linear):
            out[name] = m.out_features
    return out


def prune_to(model: nn.Module, spec: VersionSpec, ratio: float) -> dict[str, list[int]]:
    """Prune `model` (a version of `spec`'s network) in place down to `ratio`.

    Returns, for every pruned group's root layer, the indices of the output
    channels that survived (in the model as it was before this call).
    """
    full = _full_channels(spec.full())
    names = {m: n for n, m in model.named_modules()}
    example = torch.zeros(1, *spec.input_shape, device=next(model.parameters()).device)
    was_training = model.training
    model.eval()
    graph = tp.DependencyGraph().build_dependency(model, example_inputs=example)
    scorer = tp.importance.GroupMagnitudeImportance(p=2)
    kept: dict[str, list[int]] = {}
    for group in graph.get_all_groups(ignored_layers=_output_layers(model, spec, example),
                                      root_module_types=PRUNABLE):
        root = group[0].dep.target.module
        name = names[root]
        now = len(group[0].idxs)
        target = max(1, round((1.0 - ratio) * full[name]))
        if target >= now:
            continue
        with torch.no_grad():
            score = scorer(group)
        # stable order: ties (e.g. zero channels) broken by index
        order = sorted(range(now), key=lambda i: (float(score[i]), i))
        drop = sorted(order[: now - target])
        group.prune(idxs=drop)
        kept[name] = [i for i in range(now) if i not in set(drop)]
    model.train(was_training)
    return kept


@lru_cache(maxsize=64)
def _skeleton(spec: VersionSpec) -> nn.Module:
    model = make_net(spec)
    if spec.ratio > 0:
        prune_to(model, spec, spec.ratio)
    return model


def build_version(spec: VersionSpec, seed: int | None = None) -> nn.Module:
    """A fresh version: the full network initialised from `seed`, pruned to `spec.ratio`.

    With `seed=None` the weights are arbitrary (use it as a skeleton to load a
    state dict into).
    """
    if seed is None:
        return copy.deepcopy(_skeleton(spec))
    with seeded(seed):
        model = make_net(spec)
    if spec.ratio > 0:
        prune_to(model, spec, spec.ratio)
    return model


def switch(model: nn.Module, spec: VersionSpec, to_ratio: float) -> nn.Module:
    """The *trained* `model` pruned further to `to_ratio` (a copy; `model` is kept)."""
    new = copy.deepcopy(model)
    prune_to(new, spec, to_ratio)
    return new


def n_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
