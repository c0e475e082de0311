"""What the closed loop decided after an epoch (`Decision`), and the actions it may take."""

from __future__ import annotations

from dataclasses import dataclass

from ..plan import Epoch

ACTIONS = ("continue", "stop", "replan", "deadline-replan", "deadline-miss", "end")


@dataclass(frozen=True)
class Decision:
    """What the policy did after `epoch` (0: before the first epoch)."""

    epoch: int
    observed: float | None   # the loss observed after the epoch (validation split in a real run)
    p_plan: float            # P(ℓ_final ≤ ℓmax | state) of the plan in force (certified lower bound)
    p_new: float             # ... of what the decision keeps (= p_plan for continue)
    quantile: float          # the conditional ω-quantile of ℓ_final under what is kept (upper bound)
    action: str              # one of ACTIONS
    rest: tuple[Epoch, ...]  # the remaining epochs after the decision
    saved: float = 0.0       # cost of the old rest − cost of the new one
    note: str = ""

    def to_json(self) -> dict:
        return {"epoch": self.epoch, "observed": self.observed, "p_plan": self.p_plan, "p_new": self.p_new,
                "quantile": self.quantile, "action": self.action, "saved": self.saved, "note": self.note,
                "rest": [[e.epoch, e.model, e.cluster, e.compute] for e in self.rest]}
