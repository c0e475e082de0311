"""Seed batches over a Ray cluster (`--ray-address`); the results come back here and go to the store.

Each task (`seeds.Task`: the job as JSON, the seeds, their checkpoints) runs
as a Ray task with one CPU on whichever node has one free; every
batch-epoch it finishes is put on a `ray.util.queue.Queue` and written to the
store by this process, one transaction per batch-epoch, as with local worker
processes (`depl.train.seeds` says why only one process writes).  Every node
needs depl with the `train` extra installed (the same version): the task
code is imported there, not shipped.

Only as many tasks are in flight as the cluster has CPUs, so checkpoints are
read from the store just before their task is sent.
"""

from __future__ import annotations

import os
import queue as queue_mod
import socket
from typing import TYPE_CHECKING, Callable

from ..store import Store

if TYPE_CHECKING:  # seeds imports this module (lazily, for --ray-address): the functions are passed in
    from .seeds import Item, Task


class RayError(RuntimeError):
    """A Ray cluster that cannot be used; the message is meant for the user."""


def _remote_task(task: Task, results, threads: int, run_task: Callable) -> int:
    import torch

    torch.set_num_threads(threads)
    run_task(task, lambda item: results.put(("epoch", item)))
    return len(task.seeds)


def probe(address: str) -> None:
    """RayError unless something answers at `address` (HOST:PORT of a cluster's head); it imports no Ray."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RayError(f"--ray-address {address}: not HOST:PORT (the address of a cluster's head, e.g. 127.0.0.1:6379)")
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except (OSError, ValueError) as e:
        raise RayError(f"--ray-address {address}: no Ray cluster answers there ({e}); "
                       "start one with `ray start --head` and give its address (HOST:PORT)") from None


def connect(address: str):
    """Join the cluster at `address` (HOST:PORT of its head) as its driver."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    probe(address)  # Ray aborts the whole process after a minute when nobody answers; ask first
    import ray

    if ray.is_initialized():
        return ray
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    except Exception as e:  # Ray raises ConnectionError, RuntimeError, ValueError… by version and cause
        raise RayError(f"--ray-address {address}: cannot join a Ray cluster there ({type(e).__name__}: "
                       f"{str(e).strip().splitlines()[0] if str(e).strip() else 'no reply'})") from None
    return ray


def run_on_ray(ray, store: Store, tasks: list[Task], slots: int, threads: int,
               write_item: Callable[[Item], None], load: Callable, run_task: Callable) -> None:
    """The tasks as Ray tasks, at most `slots` in flight; every batch-epoch is written here as it arrives.

    `load(store, task)` fills a task's checkpoints, `run_task(task, put)` trains it (depl.train.seeds)."""
    from ray.util.queue import Queue

    results = Queue(actor_options={"num_cpus": 0})
    remote = ray.remote(num_cpus=1, max_retries=0)(_remote_task)
    pending = list(tasks)
    inflight = []

    def drain(block: bool) -> None:
        while True:
            try:
                kind, item = results.get(block=block, timeout=1.0 if block else None)
            except queue_mod.Empty:
                return
            write_item(item)
            block = False

    try:
        while pending or inflight:
            while pending and len(inflight) < slots:
                inflight.append(remote.remote(load(store, pending.pop(0)), results, threads, run_task))
            drain(block=True)
            finished, inflight = ray.wait(inflight, num_returns=len(inflight), timeout=0)
            for ref in finished:
                ray.get(ref)  # a task's failure surfaces here, with its traceback
            drain(block=False)  # a finished task's last epochs were put before it returned
    finally:
        for ref in inflight:
            ray.cancel(ref, force=True)
        ray.shutdown()
