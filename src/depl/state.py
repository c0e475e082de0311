"""Where a run stands between two epochs: the seam for decisions made during training.

A plan made before training starts from `RunState()` (epoch 0, ℓ(0), nothing
spent).  A decision taken after epoch k of a real run (closed loop: stop,
re-plan the rest, move to a faster cluster) starts from the state the run has
reached instead:

* the loss side conditions the law of the final loss on it
  (`LossModel.distribution(schedule, phi, start=state)` is the law of
  ℓ(state.epoch + len(schedule)) given the run's state);
* the planner side plans only the remaining epochs, numbered from
  `state.epoch + 1`, against the deadline minus `state.time_spent`, and adds
  `state.cost_spent` to nothing it optimises (sunk cost), but reports it;
* the executor walks a plan that may be replaced between epochs.

Kept in a module of its own, below both the loss laws and the planners, so
that neither imports the other to share it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RunState:
    """A run after `epoch` epochs.  The default is a run that has not started."""

    epoch: int = 0
    """Epochs already trained (0 = none)."""
    model: str | None = None
    """The version trained in the last epoch (None before the first)."""
    losses: tuple[float, ...] = field(default=())
    """Observed losses ℓ(1..epoch) of this run (validation split during a run), oldest first; may be empty."""
    time_spent: float = 0.0
    """Seconds of the deadline already used."""
    cost_spent: float = 0.0
    """Cost already paid (sunk: reported, never optimised)."""
    schedule: tuple[str, ...] = field(default=())
    """The versions trained in epochs 1..epoch, oldest first; empty = `model` all along.  A loss law whose
    future depends on the past (the level law: curves at the global epoch, switch offsets that decay) reads it."""
    clusters: tuple[str, ...] = field(default=())
    """The clusters the run has trained on: their data transfer (β) is paid, a re-plan does not charge it again."""

    def __post_init__(self):
        if self.epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {self.epoch}")
        if self.losses and len(self.losses) != self.epoch:
            raise ValueError(f"{len(self.losses)} observed losses for {self.epoch} epochs")
        if self.time_spent < 0 or self.cost_spent < 0:
            raise ValueError("time and cost spent must be >= 0")
        if self.schedule and (len(self.schedule) != self.epoch or (self.model is not None and self.schedule[-1] != self.model)):
            raise ValueError(f"a schedule of {len(self.schedule)} epochs ending with {self.schedule[-1]!r} for "
                             f"{self.epoch} epochs of {self.model!r}")

    @property
    def started(self) -> bool:
        return self.epoch > 0

    @property
    def last_loss(self) -> float | None:
        return self.losses[-1] if self.losses else None

    @property
    def past(self) -> tuple[str, ...]:
        """The versions of epochs 1..epoch (`schedule`, or `model` repeated when it was not recorded)."""
        if self.schedule or not self.epoch:
            return self.schedule
        if self.model is None:
            raise ValueError(f"a run after {self.epoch} epochs with no version named (give model or schedule)")
        return (self.model,) * self.epoch

    def after(self, model: str, loss: float | None, seconds: float, cost: float,
              cluster: str | None = None) -> "RunState":
        """The state one epoch later (`cluster`: where that epoch trained)."""
        losses = self.losses + (loss,) if loss is not None and (self.losses or self.epoch == 0) else ()
        schedule = self.schedule + (model,) if self.schedule or self.epoch == 0 else ()
        clusters = self.clusters + (cluster,) if cluster is not None and cluster not in self.clusters else self.clusters
        return RunState(self.epoch + 1, model, losses, self.time_spent + seconds, self.cost_spent + cost, schedule,
                        clusters)


START = RunState()
