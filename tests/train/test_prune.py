import copy

import pytest
import torch
from torch import nn

from depl.train.engine.federation import TrainOptions, local_epoch, node_data
from depl.train.task.data import DataSpec
from depl.train.task.prune import VersionSpec, build_version, n_parameters, prune_to, switch

SHAPES = {"cnn1d": (1, 40), "cnn2d": (1, 8, 8), "alexnet": (3, 32, 32), "mobilenet": (3, 32, 32)}


def shapes(model):
    return [tuple(p.shape) for p in model.state_dict().values()]


@pytest.mark.parametrize("net", list(SHAPES))
def test_a_version_has_the_same_shape_however_it_is_reached(net):
    spec = lambda r: VersionSpec(net, 8, r, SHAPES[net], 10)  # noqa: E731
    direct = build_version(spec(0.75), seed=0)
    via_half = switch(build_version(spec(0.5), seed=1), spec(0.5), 0.75)
    assert shapes(direct) == shapes(via_half)
    assert n_parameters(direct) < n_parameters(build_version(spec(0.5), seed=0)) < n_parameters(build_version(spec(0.0), seed=0))
    out = via_half(torch.randn(2, *SHAPES[net]))
    assert out.shape == (2, 10)


def test_ratio_keeps_the_stated_share_of_channels():
    m = build_version(VersionSpec("cnn1d", 64, 0.75, (1, 40), 10), seed=0)
    assert [c.out_channels for c in m.features if isinstance(c, nn.Conv1d)] == [16, 16, 16]
    assert m.head.out_features == 10  # the output layer is never pruned


def test_a_switch_prunes_the_trained_model_and_survivors_keep_their_weights():
    spec = VersionSpec("cnn1d", 16, 0.0, (1, 40), 10)
    model = build_version(spec, seed=3)
    x, y = node_data(DataSpec("mnist1d", ((0.0, 0.25),)), 1, True, 0)
    local_epoch(model, x, y, TrainOptions(lr=0.05), seed=0)  # trained, not fresh
    before = copy.deepcopy(model)
    kept = prune_to(model, spec, 0.5)
    c0, c1, c2 = (kept[f"features.{i}"] for i in (0, 2, 4))
    assert len(c0) == len(c1) == len(c2) == 8
    f_old, f_new = before.features, model.features
    assert torch.equal(f_new[0].weight, f_old[0].weight[c0])
    assert torch.equal(f_new[0].bias, f_old[0].bias[c0])
    assert torch.equal(f_new[2].weight, f_old[2].weight[c1][:, c0])
    assert torch.equal(f_new[4].weight, f_old[4].weight[c2][:, c1])
    # the head reads 5 positions per channel: its surviving columns are the kept channels' ones
    cols = torch.tensor([ch * 5 + p for ch in c2 for p in range(5)])
    assert torch.equal(model.head.weight, before.head.weight[:, cols])


def test_pruning_removes_channels_without_reinitialising():
    spec = VersionSpec("cnn2d", 8, 0.5, (1, 8, 8), 10)
    a = build_version(spec, seed=5)
    b = build_version(spec, seed=5)
    c = build_version(spec, seed=6)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), c.parameters()))
