"""The networks a model version is made of, before pruning.

Every network is a plain `nn.Module` without dropout (training is then a
function of the seed and the data order only) and is built by `build_net`
from a name, a width and the shape of its data:

* ``cnn1d``: a 1-D CNN for MNIST-1D (three strided convolutions, a linear head);
  `width` is the number of channels of every convolution (default 32).
* ``cnn2d``: a small 2-D CNN for scikit-learn's 8×8 digits (default width 16).
* ``alexnet``: AlexNet-style, CIFAR-10 sized (five convolutions, three linear
  layers; default width 64, i.e. 64-192-384-256-256 channels).
* ``mobilenet``: MobileNet-style, CIFAR-10 sized (depthwise-separable blocks
  with batch norm; default width 32).
* ``alexnet28``: AlexNet-style, sized for 28×28 grey images such as
  Fashion-MNIST (a strided 5×5 convolution and three 3×3 ones in three
  convolution–ReLU–pooling blocks, three linear layers; default width 16,
  i.e. 16-32-64-32 channels and 128 hidden units).

>>> net = build_net("cnn1d", width=8, input_shape=(1, 40), n_classes=10)
>>> tuple(net(torch.zeros(2, 1, 40)).shape)
(2, 10)
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

NETS = ("cnn1d", "cnn2d", "alexnet", "mobilenet", "alexnet28")
DEFAULT_WIDTH = {"cnn1d": 32, "cnn2d": 16, "alexnet": 64, "mobilenet": 32, "alexnet28": 16}


class CNN1D(nn.Module):
    """Three strided 1-D convolutions and a linear head (MNIST-1D: length 40)."""

    def __init__(self, width: int = 32, length: int = 40, n_classes: int = 10, in_channels: int = 1):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(in_channels, width, 5, stride=2, padding=2), nn.ReLU(),
            nn.Conv1d(width, width, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv1d(width, width, 3, stride=2, padding=1), nn.ReLU(),
        )
        out_len = length
        for _ in range(3):
            out_len = (out_len + 1) // 2
        self.head = nn.Linear(width * out_len, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(x), 1))


class CNN2D(nn.Module):
    """Two 3×3 convolutions, a 2×2 pooling and two linear layers (digits: 8×8)."""

    def __init__(self, width: int = 16, side: int = 8, n_classes: int = 10, in_channels: int = 1):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1), nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(2 * width * (side // 2) ** 2, 4 * width), nn.ReLU(),
            nn.Linear(4 * width, n_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class AlexNetCifar(nn.Module):
    """AlexNet's shape (5 conv + 3 linear) scaled to 32×32 inputs."""

    def __init__(self, width: int = 64, side: int = 32, n_classes: int = 10, in_channels: int = 3):
        super().__init__()
        w = width
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(w, 3 * w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(3 * w, 6 * w, 3, padding=1), nn.ReLU(),
            nn.Conv2d(6 * w, 4 * w, 3, padding=1), nn.ReLU(),
            nn.Conv2d(4 * w, 4 * w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(4 * w * (side // 8) ** 2, 16 * w), nn.ReLU(),
            nn.Linear(16 * w, 16 * w), nn.ReLU(),
            nn.Linear(16 * w, n_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class AlexNet28(nn.Module):
    """AlexNet's shape scaled to 28×28: a strided 5×5 convolution (AlexNet's first is a strided 11×11), then 3×3
    ones, in three convolution–ReLU–max-pooling blocks (28 → 14 → 7 → 3 → 1), and three linear layers."""

    def __init__(self, width: int = 16, side: int = 28, n_classes: int = 10, in_channels: int = 1):
        super().__init__()
        w = width
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, w, 5, stride=2, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(w, 2 * w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(2 * w, 4 * w, 3, padding=1), nn.ReLU(),
            nn.Conv2d(4 * w, 2 * w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(2 * w * (((side + 1) // 2) // 8) ** 2, 8 * w), nn.ReLU(),
            nn.Linear(8 * w, 8 * w), nn.ReLU(),
            nn.Linear(8 * w, n_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def _separable(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cin, 3, stride=stride, padding=1, groups=cin, bias=False),
        nn.BatchNorm2d(cin), nn.ReLU(),
        nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
    )


class MobileNetCifar(nn.Module):
    """MobileNet (v1) style: a stem and depthwise-separable blocks, for 32×32 inputs."""

    def __init__(self, width: int = 32, side: int = 32, n_classes: int = 10, in_channels: int = 3):
        super().__init__()
        w = width
        plan = [(w, 2 * w, 1), (2 * w, 4 * w, 2), (4 * w, 4 * w, 1), (4 * w, 8 * w, 2),
                (8 * w, 8 * w, 1), (8 * w, 16 * w, 2)]
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, w, 3, padding=1, bias=False), nn.BatchNorm2d(w), nn.ReLU(),
            *[_separable(a, b, s) for a, b, s in plan],
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(16 * w, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(x), 1))


def build_net(name: str, width: int | None, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """The full (unpruned) network `name` for inputs of `input_shape` (without batch)."""
    w = width or DEFAULT_WIDTH.get(name, 0)
    if name == "cnn1d":
        if len(input_shape) != 2:
            raise ValueError(f"cnn1d takes 1-D signals (channels, length); this data has shape {input_shape}")
        return CNN1D(w, length=input_shape[1], n_classes=n_classes, in_channels=input_shape[0])
    if name in ("cnn2d", "alexnet", "mobilenet", "alexnet28"):
        if len(input_shape) != 3 or input_shape[1] != input_shape[2]:
            raise ValueError(f"{name} takes square images (channels, side, side); this data has shape {input_shape}")
        least = {"alexnet": 8, "alexnet28": 15}.get(name, 1)
        if input_shape[1] < least:
            raise ValueError(f"{name} halves its images {'four' if name == 'alexnet28' else 'three'} times: it takes "
                             f"images of at least {least} × {least} pixels; this data has shape {input_shape}")
        cls = {"cnn2d": CNN2D, "alexnet": AlexNetCifar, "mobilenet": MobileNetCifar, "alexnet28": AlexNet28}[name]
        return cls(w, side=input_shape[1], n_classes=n_classes, in_channels=input_shape[0])
    raise ValueError(f"unknown network {name!r} (known: {', '.join(NETS)})")


@contextmanager
def seeded(seed: int):
    """Run a block with torch's global RNG seeded, restoring it afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield
