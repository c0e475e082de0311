"""The validation–test gap, measured on runs that log both losses: what a closed-loop stop must allow for.

A stop keeps the current model on the strength of its validation loss v; the guarantee is about its test loss
v + g.  The gap g = test − validation loss of one model depends on the two splits (fixed for a task: the same
validation samples and test set for every seed) and on the model, so it is measured, not modelled, on runs of
the same data that log both losses after every epoch — the adaptive runs' stores do (`decisions.observed`, the
validation loss; `epochs.test_loss`).

**What is measured, and why it makes a stop safe.**  A stop after epoch k with validation loss v_k ≤ ℓmax
fails (test loss > ℓmax) only if g_k > ℓmax − v_k.  Per seed, take

    M = max { g_k : epochs k of the seed with v_k ≤ ℓmax }

(the epochs where a stop can be taken at all: `Policy` never stops above ℓmax with a measured gap).  A stop
rule "stop once ℓmax − v_k > t" then fails only on seeds with M > t, whichever epoch it stops at — the choice
of the epoch (low validation losses, perhaps lucky ones) is covered by the maximum.  The n measured seeds'
maxima and a new seed's are exchangeable (independent seeds, the same splits), so with

    P(test loss > ℓmax | v) ≤ (1 + #{M_i ≥ ℓmax − v}) / (n + 1)        (`MeasuredGap.exceed`)

a stop taken where this is ≤ δ is one with ℓmax − v > M_(j), j = ⌈(n+1)(1−δ)⌉, and fails with probability
≤ 1 − j/(n+1) ≤ δ (split conformal; on average over the measured runs).  Seeds whose validation loss never
reached ℓmax cannot stop, so only the seeds that did are counted (the bound then holds given that a seed
reaches ℓmax, hence also without it).  A seed measured in several runs of the same data (the same seed under
two plans) counts once, at its largest gap.

**What it assumes.** The measured runs are like the new one: the same data spec (source, selection,
validation split — `data` must be equal, checked here) and runs of a comparable plan (the gap depends on the
model).  Runs that stopped early logged no epoch after their stop: a new run that stops later than they did
is measured on fewer of its epochs than it may stop at (docs/adaptive.md says how to measure without that).

Pure computation on a store (no torch).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from .certificate import conformal
from .store import Store, StoreError


@dataclass(frozen=True)
class MeasuredGap:
    """Per measured seed, its largest test − validation loss over its epochs with validation loss ≤ `target`."""

    maxima: tuple[float, ...]   # sorted
    target: float               # the ℓmax the maxima were taken at
    pairs: int = 0              # the (seed, epoch) pairs they come from
    source: str = ""            # where they were measured, in words

    @property
    def seeds(self) -> int:
        return len(self.maxima)

    def exceed(self, observed: float) -> float:
        """The conformal bound on P(test loss > ℓmax | validation loss `observed`): 1 above ℓmax."""
        if not observed <= self.target:
            return 1.0
        m = np.asarray(self.maxima)
        over = m.size - int(np.searchsorted(m, self.target - observed, side="left"))  # #{M_i ≥ ℓmax − v}
        return (1 + over) / (m.size + 1)

    def threshold(self, delta: float) -> float:
        """t: a stop with P(test loss > ℓmax) ≤ δ needs the validation loss below ℓmax − t (+∞: none can)."""
        if delta <= 0:
            return math.inf
        return conformal.upper(np.asarray(self.maxima), 1.0 - delta)

    @property
    def digest(self) -> str:
        """A short hash of the maxima: a run's identity includes the gap it stops by."""
        text = json.dumps([self.target, [float(x) for x in self.maxima]])
        return hashlib.sha256(text.encode()).hexdigest()[:8]

    def to_json(self) -> dict:
        m = np.asarray(self.maxima)
        return {"model": "measured", "target": self.target, "seeds": self.seeds, "pairs": self.pairs,
                "source": self.source, "digest": self.digest,
                "max_gap": {"median": float(np.median(m)), "max": float(m.max())} if m.size else None}


def pairs(store: Store, run_id: str) -> dict[int, list[tuple[float, float]]]:
    """seed → [(validation loss, test loss)] after each epoch a decision recorded a validation loss for."""
    out: dict[int, list[tuple[float, float]]] = {}
    gone = store.diverged(run_id)
    for seed in store.seeds(run_id):
        if seed in gone:
            continue
        seen = {int(d["epoch"]): d["observed"] for d in store.decisions(run_id, seed)}
        both = [(float(seen[r.epoch]), float(r.test_loss)) for r in store.trajectory(run_id, seed)
                if seen.get(r.epoch) is not None and math.isfinite(float(seen[r.epoch]))]
        if both:
            out[seed] = both
    return out


def measure(stores: Iterable[str | Path], target: float, data: dict | None = None) -> MeasuredGap:
    """The gap measured on every run in `stores` (store files or run folders holding runs.sqlite) that logged
    validation and test losses on `data` (a job's data spec as JSON; None: any), at ℓmax = `target`.
    ValueError naming the stores when none did."""
    by_seed: dict[int, float] = {}
    n_pairs, runs, where = 0, [], []
    for s in stores:
        path = Path(s)
        path = path / "runs.sqlite" if path.is_dir() else path
        where.append(str(s))
        try:
            st = Store(str(path), readonly=True)
        except StoreError as e:
            raise ValueError(str(e)) from None
        with st:
            for run in st.runs("plan"):
                if data is not None and (run["spec"].get("job") or {}).get("data") != data:
                    continue
                logged = pairs(st, run["run_id"])
                if not logged:
                    continue
                runs.append(run["run_id"])
                for seed, both in logged.items():
                    n_pairs += len(both)
                    near = [t - v for v, t in both if v <= target]
                    if near:
                        by_seed[seed] = max(by_seed.get(seed, -math.inf), max(near))
    if not runs:
        raise ValueError(f"{', '.join(where)}: no run logs validation and test losses"
                         + (" on this run's data (the same source, selection and validation split)" if data else ""))
    source = (f"{len(runs)} run(s) of {', '.join(where)}: {len(by_seed)} seeds reached validation loss ≤ {target:g}"
              f" ({n_pairs} epochs logged)")
    return MeasuredGap(tuple(sorted(by_seed.values())), float(target), n_pairs, source)
