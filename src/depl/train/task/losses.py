"""The loss a run trains on and is tested with: `[training] loss` (docs/scenario-format.md).

Built in: ``cross_entropy`` (class logits against class indices, today's
default), ``mse`` and ``l1`` (predictions against real-valued targets) and
``bce_with_logits`` (logits against targets in [0, 1], one or several per
sample); or your own ``MODULE:FUNCTION``, imported like your own network
(depl.train.task.custom: from a folder you allowed, its file's digest pinned in a
plan), called as ``FUNCTION(outputs, targets)`` on a mini-batch and returning
one loss per sample, shape (batch,).  depl reduces: the mean over a batch is
what a step minimises, the mean over the test set is the run's test loss.
Before any training it is computed once on the first batch (`check`): a
finite floating value per sample, differentiable back to the outputs, and
none below 0 unless `[training] loss_may_be_negative = true`.

Every back end computes its losses here (the per-seed loop and Flower's
ClientApps through `federation.local_epoch`, the vectorised stack per seed,
the closed loop's validation split), so a run's loss is the same whichever
trains it.  Accuracy is a classification loss's only: the share of argmax
hits (cross_entropy) or of signs that match the 0/1 targets
(bce_with_logits); elsewhere it is None (stored NULL).

What the data must hold (`source.fit_targets`, checked when the data is loaded):
class indices 0..C-1 for cross_entropy; finite real numbers, shape (n,) or
(n, d), for mse and l1 (in [0, 1] for bce_with_logits); your own loss gets
the labels as your source gives them (whole numbers as int64, others as
float32).  A network's outputs are compared with the targets' shape: a
(batch, 1) output against (batch,) targets is read as (batch,).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F

from .source import DataError, targets_of
from .custom import resolve


class LossError(DataError):
    """Your own loss that does not return one finite value per sample that training can differentiate (or is
    negative where the scenario does not say it may be); the message names `training.loss`."""


LOSSES = ("cross_entropy", "mse", "l1", "bce_with_logits")  # depl.scenario.BUILTIN_LOSSES (a test keeps them equal)


@lru_cache(maxsize=16)
def _own(ref: str, code_dir: str | None):
    return resolve(ref, code_dir)


@dataclass(frozen=True)
class Loss:
    """One loss, by its name in the scenario (and where your own is imported from)."""

    name: str = "cross_entropy"
    code_dir: str | None = None

    @property
    def targets(self) -> str:
        return targets_of(self.name)

    @property
    def own(self) -> bool:
        return self.name not in LOSSES

    @property
    def classification(self) -> bool:
        """Whether accuracy means something for this loss."""
        return self.name in ("cross_entropy", "bce_with_logits")

    def shaped(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """A network's outputs in the targets' shape where they only differ by a trailing 1 ((batch, 1) for (batch,))."""
        if self.name == "cross_entropy" or out.shape == y.shape:
            return out
        if y.dim() == 1 and out.dim() == 2 and out.shape == (len(y), 1):
            return out.view(len(y))
        if out.shape[:y.dim()] == y.shape and all(s == 1 for s in out.shape[y.dim():]):
            return out.view(y.shape)
        return out

    def per_sample(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The loss of every sample, shape (batch,)."""
        if self.name == "cross_entropy":
            return F.cross_entropy(out, y, reduction="none")
        out = self.shaped(out, y)
        if self.own:
            got = _own(self.name, self.code_dir)(out, y)
            if not isinstance(got, torch.Tensor) or tuple(got.shape) != (len(y),):
                shown = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
                raise LossError(f"training.loss = {self.name!r}: it returned {shown} on a batch of {len(y)}; a loss "
                                f"returns one value per sample, shape ({len(y)},) (depl takes the mean)")
            return got
        if self.name == "mse":
            per = F.mse_loss(out, y, reduction="none")
        elif self.name == "l1":
            per = F.l1_loss(out, y, reduction="none")
        else:
            per = F.binary_cross_entropy_with_logits(out, y, reduction="none")
        return per.reshape(len(y), -1).mean(1)

    def mean(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The batch mean a step minimises (the built-ins as torch reduces them: cross_entropy as it always was)."""
        if self.name == "cross_entropy":
            return F.cross_entropy(out, y)
        if self.own:
            return self.per_sample(out, y).mean()
        out = self.shaped(out, y)
        fn = {"mse": F.mse_loss, "l1": F.l1_loss, "bce_with_logits": F.binary_cross_entropy_with_logits}[self.name]
        return fn(out, y)

    def total(self, out: torch.Tensor, y: torch.Tensor) -> float:
        """The sum of the batch's per-sample losses (the test loss is the total over the test set / its size)."""
        if self.name == "cross_entropy":
            return float(F.cross_entropy(out, y, reduction="sum"))
        return float(self.per_sample(out, y).double().sum())

    def hits(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor | None:
        """Per sample, the share of its predictions that are right (None where accuracy means nothing)."""
        if self.name == "cross_entropy":
            return (out.argmax(-1) == y).double()
        if self.name == "bce_with_logits":
            out = self.shaped(out, y)
            return ((out > 0) == (y > 0.5)).double().reshape(len(y), -1).mean(1)
        return None


NEGATIVE_OPTION = "loss_may_be_negative"   # [training] loss_may_be_negative = true: your loss may go below 0


def check(loss: Loss, out: torch.Tensor, y: torch.Tensor, may_be_negative: bool = False) -> None:
    """`loss` on a network's outputs `out` for a first batch (computed with gradients on), before any training:
    one finite floating value per sample that the outputs' gradient flows through, and — your own loss, unless
    `may_be_negative` (`[training] loss_may_be_negative = true`) — none below 0.  DataError (the outputs do not
    fit a built-in loss's targets) or LossError naming `training.loss` and why otherwise."""
    if loss.name == "cross_entropy":
        return
    if not loss.own and loss.shaped(out, y).shape != y.shape:  # your own loss reads the outputs as it likes
        raise DataError(f"on inputs of {len(y)} samples it returns {tuple(out.shape)}; loss {loss.name!r} compares "
                        f"it with targets of shape {tuple(y.shape)}")
    name = f"training.loss = {loss.name!r}"
    try:
        per = loss.per_sample(out, y)
    except DataError:
        raise
    except Exception as e:  # your own loss failed on the batch
        raise LossError(f"{name}: it failed on a batch of {len(y)}: {type(e).__name__}: {e}") from None
    if not per.is_floating_point():
        raise LossError(f"{name}: it returned {str(per.dtype).removeprefix('torch.')} values on a batch of {len(y)}; "
                        "a loss is a floating tensor (e.g. float32) computed from the network's outputs, which "
                        "training differentiates")
    bad = int((~torch.isfinite(per.detach())).sum())
    if bad:
        raise LossError(f"{name}: it is not finite on the first batch ({bad} of its {len(y)} samples: NaN or "
                        "infinite)")
    if not per.requires_grad or per.grad_fn is None or (
            out.requires_grad and torch.autograd.grad(per.sum(), out, allow_unused=True)[0] is None):
        raise LossError(f"{name}: its value does not depend on the network's outputs (no gradient flows from it to "
                        "them: a detached tensor, .item(), a new tensor, torch.no_grad()?); training needs a loss "
                        "computed from the outputs with torch operations")
    low = float(per.detach().min())
    if loss.own and low < 0 and not may_be_negative:
        raise LossError(f"{name}: it is negative on the first batch ({low:.4g} at its lowest): a test loss below 0 "
                        f"is one no loss law plans for and `depl fit` refuses; if your loss may be negative, say so "
                        f"with [training] {NEGATIVE_OPTION} = true")
