"""Seed batches over a Ray cluster (`--ray-address`); the results come back here and go to the store.

Each task (a `seeds.Task`: the job as JSON, the seeds, their checkpoints) runs
as a Ray task with `cpus` CPUs (one by default) on whichever node has them free; every
batch-epoch it finishes is put on a `ray.util.queue.Queue` and written to the
store by this process, one transaction per batch-epoch, as with local worker
processes (`depl.train.engine.seeds` says why only one process writes).  Every node
needs depl with the `train` extra installed (the same version): the task
code is imported there, not shipped.

Only as many tasks are in flight as the cluster has CPUs, so checkpoints are
read from the store just before their task is sent.
"""

from __future__ import annotations

import os
import queue as queue_mod
import socket

from ..engine.seeds import Task, Writer
from ..task.data import DrawError
from ..task.source import DataError


class RayError(RuntimeError):
    """A Ray cluster that cannot be used; the message is meant for the user."""


def _remote_task(task: Task, results, threads: int):
    """The seeds trained, or the DataError that stopped the task (data that cannot be used: the user's message,
    returned rather than raised, so that it crosses back as itself and not in a traceback)."""
    import torch

    torch.set_num_threads(threads)
    try:
        task.run(lambda item: results.put(("epoch", item)))
    except DataError as e:
        return e if isinstance(e, DrawError) else DataError(str(e))  # both pickle whole
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


def slots(ray, cpus: float) -> int:
    """How many tasks of `cpus` CPUs the cluster runs at once."""
    return max(1, int(ray.cluster_resources().get("CPU", 1) // cpus))


def run_on_ray(ray, tasks: list[Task], slots: int, threads: int, writer: Writer, cpus: float = 1.0) -> None:
    """The tasks as Ray tasks of `cpus` CPUs each, at most `slots` in flight; every batch-epoch is written here
    (`writer`) as it arrives, each task's checkpoints read just before it is sent."""
    from ray.util.queue import Queue

    results = Queue(actor_options={"num_cpus": 0})
    remote = ray.remote(num_cpus=cpus, max_retries=0)(_remote_task)
    pending = list(tasks)
    inflight = []

    def drain(block: bool) -> None:
        while True:
            try:
                kind, item = results.get(block=block, timeout=1.0 if block else None)
            except queue_mod.Empty:
                return
            writer.write(item)
            block = False

    refused = None  # a task's DataError: no task is sent after it, those in flight end and are written first
    try:
        while pending or inflight:
            while pending and refused is None and len(inflight) < slots:
                inflight.append(remote.remote(writer.load(pending.pop(0)), results, threads))
            if not inflight:
                break
            drain(block=True)
            finished, inflight = ray.wait(inflight, num_returns=len(inflight), timeout=0)
            for ref in finished:
                out = ray.get(ref)  # a task's failure surfaces here, with its traceback
                if isinstance(out, Exception):
                    refused = refused or out
            drain(block=False)  # a finished task's last epochs were put before it returned
        if refused is not None:
            raise refused
    finally:
        for ref in inflight:
            ray.cancel(ref, force=True)
        ray.shutdown()
