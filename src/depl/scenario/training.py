"""What real training (`depl run`) reads of a scenario: each version's network, and the optimiser and batching."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from .base import Strict
from .code import BUILTIN_LOSSES, BUILTIN_NETS, builtin_or_reference


class TrainSpec(Strict):
    """How a model version maps to a real network (used by `depl run`)."""

    net: str = Field(min_length=1, description="a network of depl.train.task.nets (e.g. cnn1d) or MODULE:FUNCTION")
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


# the recipe's keys and their defaults: a run trained with these is today's training, and its identity leaves them out
RECIPE_DEFAULTS: dict[str, Any] = {"loss": "cross_entropy", "optimizer": "sgd", "weight_decay": 0.0,
                                   "schedule": "constant", "step_every": None, "step_gamma": 0.1, "local_epochs": 1,
                                   "clip": None}


class TrainingOptions(Strict):
    """Options of real training (`depl run`): the loss, the optimiser and its schedule, and batching."""

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
    data_subset: int | None = Field(
        default=None, ge=1, le=10_000_000, description="the training samples each run draws from its source (its "
        "train and test samples pooled), with a test set in the source's proportion (Fashion-MNIST: 1 test sample "
        "for 6 training ones), drawn anew by every run where data_draw = \"run\", once for all where \"fixed\"; "
        "the datasets' shares are slices of these; unset: all the source's samples")

    loss: str = Field(default="cross_entropy", min_length=1, description="the loss trained and tested: "
                      "cross_entropy, mse, l1, bce_with_logits, or your own per-sample loss MODULE:FUNCTION")
    loss_may_be_negative: bool = Field(default=False, description="your own loss (MODULE:FUNCTION) may go below "
                                       "0; unset, a negative loss on the first batch stops the command before "
                                       "training (no loss law plans for one, and `depl fit` refuses it)")
    optimizer: Literal["sgd", "adam", "adamw"] = Field(default="sgd", description="sgd (with `momentum`), adam or "
                                                       "adamw (betas 0.9, 0.999)")
    weight_decay: float = Field(default=0.0, ge=0.0, le=1.0, description="L2 penalty (sgd, adam) or decoupled "
                                "weight decay (adamw)")
    schedule: Literal["constant", "cosine", "step"] = Field(
        default="constant", description="the learning rate over the plan's epochs: constant; cosine (from lr down to "
        "0 over the plan's K epochs); step (multiplied by step_gamma every step_every epochs)")
    step_every: int | None = Field(default=None, ge=1, le=1_000_000, description="schedule = \"step\": epochs "
                                   "between two decays")
    step_gamma: float = Field(default=0.1, gt=0.0, le=1.0, description="schedule = \"step\": the factor of a decay")
    local_epochs: int = Field(default=1, ge=1, le=1000, description="passes over its data each node makes in one "
                              "FedAvg round (one plan epoch)")
    clip: float | None = Field(default=None, gt=0.0, description="clip the gradient's norm (over all parameters of "
                               "a model) to this value before each step; unset: no clipping")

    _loss = field_validator("loss")(builtin_or_reference("loss", BUILTIN_LOSSES))

    @model_validator(mode="after")
    def _recipe(self) -> "TrainingOptions":
        # a scenario written back (a plan's scenario_spec) holds every key at its value: only a value other than the
        # default is one given for nothing
        if self.optimizer != "sgd" and self.momentum != 0.9:
            raise ValueError(f"momentum applies to optimizer = \"sgd\"; {self.optimizer} has its own (betas 0.9, "
                             "0.999): leave momentum out")
        if self.dirichlet_alpha is not None and self.loss in ("mse", "l1", "bce_with_logits"):
            raise ValueError(f"dirichlet_alpha splits every class over the nodes; loss = \"{self.loss}\" trains on "
                             "real-valued targets, which have no classes (iid = false without dirichlet_alpha gives "
                             "each node a range of the targets)")
        if self.loss_may_be_negative and ":" not in self.loss:
            raise ValueError(f"loss_may_be_negative applies to your own loss (loss = \"MODULE:FUNCTION\"); "
                             f"loss = \"{self.loss}\" is never negative")
        if self.schedule == "step" and self.step_every is None:
            raise ValueError("schedule = \"step\" needs step_every (the epochs between two decays of the learning "
                             "rate, e.g. step_every = 10)")
        if self.schedule != "step" and (self.step_every is not None or self.step_gamma != 0.1):
            raise ValueError(f"step_every and step_gamma belong to schedule = \"step\"; the schedule is "
                             f"{self.schedule!r}")
        return self

    def lr_at(self, epoch: int, epochs: int) -> float:
        """The learning rate of plan epoch `epoch` (1-based) of `epochs`: constant within an epoch."""
        if self.schedule == "cosine":
            return self.lr * 0.5 * (1.0 + math.cos(math.pi * (epoch - 1) / max(epochs, 1)))
        if self.schedule == "step":
            return self.lr * self.step_gamma ** ((epoch - 1) // int(self.step_every or 1))
        return self.lr
