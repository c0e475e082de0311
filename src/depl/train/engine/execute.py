"""Run a plan for real over seeds, into the store, resuming what a killed run left.

A run's identity is a hash of what determines its trajectories (the job:
data, versions, clusters, epochs, options) and the back end, so starting the
same `depl run` again finds the same run in the store and continues it: seeds
already finished are skipped, an unfinished seed restarts from its last
checkpoint (written with its last epoch, in one transaction).
"""

from __future__ import annotations

import hashlib
import json
from typing import Callable

import torch

from ...runspec import RunSpec
from ...store import EpochRow, Store
from .federation import EpochResult, Job, LocalFederation, RoundFn, state_bytes, walk_plan

OnEpoch = Callable[[int, int, EpochResult | None], None]  # (seed, epochs done, last result)
KeepFinal = Callable[[int, EpochRow, torch.nn.Module], None]  # (seed, its last epoch, its trained model)


def run_id_for(job: Job, backend: str, prefix: str = "plan") -> str:
    text = json.dumps({"job": job.identity(), "backend": backend}, sort_keys=True)
    return f"{prefix}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def register(store: Store, run_id: str, kind: str, job: Job, extra: dict | None = None) -> None:
    """Record the run with its spec (`depl.runspec.RunSpec`: the job, the digests of your code it runs and the
    `extra` keys)."""
    store.start_run(run_id, kind, RunSpec.from_json({**(extra or {}), "job": job.to_json(), "code": job.code()}).to_json())


def pending(store: Store, run_id: str, job: Job, seeds: list[int]) -> list[int]:
    """The seeds of `seeds` that still have epochs to train (a diverged seed has none)."""
    gone = store.diverged(run_id)
    return [s for s in seeds if s not in gone and store.done_epochs(run_id, s) < len(job.epochs)]


def recorder(store: Store, run_id: str, seed: int, n_epochs: int, progress: OnEpoch | None = None,
             keep: KeepFinal | None = None):
    """The on_epoch hook that writes an epoch and its checkpoint in one transaction; `keep(seed, row, model)`
    hears the seed's last epoch before it is written (depl.train.task.models.ModelKeeper.final)."""

    def on_epoch(r: EpochResult, model: torch.nn.Module) -> None:
        final = r.epoch == n_epochs
        row = EpochRow(r.epoch, r.model, r.cluster, r.test_loss, r.test_accuracy, r.train_loss, r.seconds)
        if final and keep is not None:
            keep(seed, row, model)
        store.record_epoch(run_id, seed, row, checkpoint=None if final else state_bytes(model), final=final)
        if progress is not None:
            progress(seed, r.epoch, r)

    return on_epoch


def run_seed(store: Store, run_id: str, job: Job, seed: int, train_round: RoundFn,
             progress: OnEpoch | None = None, keep: KeepFinal | None = None) -> None:
    """Train one seed to the end of the job, resuming from the store; `keep`: as `recorder`'s."""
    done = store.done_epochs(run_id, seed)
    if done >= len(job.epochs) or store.diverged_at(run_id, seed) is not None:
        return
    start = store.resume_point(run_id, seed)  # checked: epochs 1..done, checkpoint of epoch done
    walk_plan(job, seed, train_round, recorder(store, run_id, seed, len(job.epochs), progress, keep), start)


def run_local(store: Store, run_id: str, job: Job, seeds: list[int], progress: OnEpoch | None = None) -> None:
    """The ``local`` back end over seeds, one after the other."""
    fed = LocalFederation()
    for seed in seeds:
        run_seed(store, run_id, job, seed, fed, progress)
