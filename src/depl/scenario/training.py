"""What real training (`depl run`) reads of a scenario: each version's network, and the optimiser and batching."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from .base import Strict
from .code import BUILTIN_NETS, builtin_or_reference


class TrainSpec(Strict):
    """How a model version maps to a real network (used by `depl run`)."""

    net: str = Field(min_length=1, description="a network of depl.train.nets (e.g. cnn1d) or MODULE:FUNCTION")
    prune_ratio: float = Field(default=0.0, ge=0.0, lt=1.0)
    width: int | None = Field(default=None, ge=1, le=100_000)
    net_args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of a MODULE:FUNCTION net")

    _net = field_validator("net")(builtin_or_reference("network", BUILTIN_NETS))

    @model_validator(mode="after")
    def _args_for_own_nets(self) -> "TrainSpec":
        own = ":" in self.net
        if self.net_args and not own:
            raise ValueError(f"net_args are passed to your own network (net = \"MODULE:FUNCTION\"); {self.net!r} is built in")
        if self.width is not None and own:
            raise ValueError("width applies to the built-in networks; give your own network its size in net_args")
        return self


class TrainingOptions(Strict):
    """Options of real training (`depl run`): optimiser and batching."""

    lr: float = Field(default=1e-2, gt=0.0)
    momentum: float = Field(default=0.9, ge=0.0, lt=1.0)
    batch_size: int = Field(default=64, ge=1, le=1_000_000)
    iid: bool = True
    dirichlet_alpha: float | None = Field(default=None, gt=0.0, le=1e6, description="with iid = false: each class "
                                          "split over a cluster's nodes by shares drawn from Dirichlet(α) "
                                          "(small α: few classes per node); unset: label-sorted shards")
    data_draw: Literal["fixed", "run"] = Field(
        default="fixed", description="fixed: every run trains on the same data, node split and test set; run: each "
        "run (seed) draws its own — MNIST-1D samples from the generator's pool, a new train/test split of other "
        "sources (or your source's own draw where it takes `seed`), a new fraction and split over nodes")
