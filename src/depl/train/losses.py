"""The loss a run trains on and is tested with: `[training] loss` (docs/scenario-format.md).

Built in: ``cross_entropy`` (class logits against class indices, today's
default), ``mse`` and ``l1`` (predictions against real-valued targets) and
``bce_with_logits`` (logits against targets in [0, 1], one or several per
sample); or your own ``MODULE:FUNCTION``, imported like your own network
(depl.train.custom: from a folder you allowed, its file's digest pinned in a
plan), called as ``FUNCTION(outputs, targets)`` on a mini-batch and returning
one loss per sample, shape (batch,).  depl reduces: the mean over a batch is
what a step minimises, the mean over the test set is the run's test loss.

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


class LossError(DataError):
    """Your own loss that does not return one finite value per sample; the message names `training.loss`."""


LOSSES = ("cross_entropy", "mse", "l1", "bce_with_logits")  # depl.scenario.BUILTIN_LOSSES (a test keeps them equal)


@lru_cache(maxsize=16)
def _own(ref: str, code_dir: str | None):
    from .custom import resolve

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


def check(loss: Loss, out: torch.Tensor, y: torch.Tensor) -> None:
    """`loss` on a network's outputs for two samples: a finite value per sample, or DataError saying why not."""
    if loss.name == "cross_entropy":
        return
    if not loss.own and loss.shaped(out, y).shape != y.shape:  # your own loss reads the outputs as it likes
        raise DataError(f"on inputs of {len(y)} samples it returns {tuple(out.shape)}; loss {loss.name!r} compares "
                        f"it with targets of shape {tuple(y.shape)}")
    try:
        per = loss.per_sample(out, y)
    except DataError:
        raise
    except Exception as e:  # your own loss failed on the batch
        raise LossError(f"training.loss = {loss.name!r}: it failed on a batch of {len(y)}: {type(e).__name__}: {e}") from None
    if not bool(torch.isfinite(per.detach()).all()):
        raise LossError(f"training.loss = {loss.name!r}: it is not finite on the first test samples")
