import pytest
import torch

from depl.train.task.nets import NETS, build_net

SHAPES = {"cnn1d": (1, 40), "cnn2d": (1, 8, 8), "alexnet": (3, 32, 32), "mobilenet": (3, 32, 32),
          "alexnet28": (1, 28, 28)}


@pytest.mark.parametrize("name", NETS)
def test_every_net_maps_its_input_to_class_scores(name):
    net = build_net(name, 8, SHAPES[name], 10)
    out = net(torch.randn(3, *SHAPES[name]))
    assert out.shape == (3, 10)
    assert torch.isfinite(out).all()


def test_alexnet28_takes_square_images_down_to_15_pixels():
    for side in (15, 28, 32):
        assert build_net("alexnet28", 4, (1, side, side), 10)(torch.randn(2, 1, side, side)).shape == (2, 10)
    with pytest.raises(ValueError, match="at least 15 × 15 pixels"):
        build_net("alexnet28", 4, (1, 14, 14), 10)


def test_width_sets_the_channels():
    narrow, wide = build_net("cnn1d", 8, (1, 40), 10), build_net("cnn1d", 80, (1, 40), 10)
    assert narrow.features[0].out_channels == 8 and wide.features[0].out_channels == 80
    assert sum(p.numel() for p in wide.parameters()) > 20 * sum(p.numel() for p in narrow.parameters())


def test_wrong_shape_and_unknown_net_are_refused():
    with pytest.raises(ValueError, match="1-D signals"):
        build_net("cnn1d", 8, (3, 32, 32), 10)
    with pytest.raises(ValueError, match="unknown network"):
        build_net("resnet", 8, (3, 32, 32), 10)
