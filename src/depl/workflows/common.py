"""What the workflows share: output files checked before any work, the `train` extra and its device, the
store of a run folder, and how seeds are trained (`Training`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from .errors import BadInput, as_bad_input, training_errors
from ..store import Store, StoreError
from ..train.backends import executors
from ..train.task.custom import allow
from ..train.task.data import DATA_ENV
from ..train.backends.executors import run_all
from ..train.backends.ray_pool import RayError, probe

MAX_SEEDS = 100_000  # seeds of one command (each trains the whole plan)
MAX_SEED = 2**31 - 1  # seeds are SQLite integers and inputs of numpy's SeedSequence


@dataclass(frozen=True)
class Training:
    """How seeds are trained: torch threads per process, the device (cpu, cuda or auto), seeds stacked in one
    vectorised computation, worker processes, and a Ray cluster to spread the batches on.

    `executor` names the executor that trains them (`depl.train.backends.executors.get`); left None, it and threads,
    seed_batch and workers left None are chosen where the seeds train (`depl.train.backends.executors.decide`:
    measured on this machine, or the fixed defaults — 1 thread, batches of 32, one worker per core — when any of
    them is given)."""

    threads: Optional[int] = None
    device: str = "cpu"
    seed_batch: Optional[int] = None
    workers: Optional[int] = None
    ray_address: Optional[str] = None
    executor: Optional[str] = None   # a registered executor's name (depl.train.backends.executors); None: decided

    def seed_options(self) -> dict:
        """The keyword arguments of `depl.train.backends.executors.run_all`."""
        return dict(seed_batch=self.seed_batch, workers=self.workers, threads=self.threads,
                    ray_address=self.ray_address, executor=self.executor)


def check_executor(name: Optional[str]) -> Optional[str]:
    """An executor's name, refused unless registered (depl.train.backends.executors.names(): the built-ins and any
    registered since)."""
    if name is not None:
        with as_bad_input(ValueError, prefix="--executor: "):
            executors.get(name)
    return name


def check_training(training: Training, backend: str = "local") -> None:
    """Options of how seeds train that would do nothing here, refused: the local back end's batching, workers and
    executor on Flower (its apps train each node's share), worker processes for an executor that trains in this
    process."""
    given = [f for f, v in (("--seed-batch", training.seed_batch), ("--workers", training.workers),
                            ("--executor", training.executor)) if v is not None]
    if backend != "local" and given:
        raise BadInput(f"{', '.join(given)}: how the local back end trains its seeds; they do not apply to "
                       f"--backend {backend} (its apps train each node's share)")
    if training.executor in ("loop", "stack") and (training.workers or 1) > 1:
        raise BadInput(f"--workers {training.workers}: the {training.executor} executor trains in this process; "
                       "--executor processes trains in worker processes")


def check_output_file(flag: str, path: Path, make_folders: bool = True) -> None:
    """Refuse an output file that cannot be written, before any work (so a long computation is never
    lost to it): a folder, under a file, or in a folder we may not write; `make_folders`: missing
    folders on its way are made when it is written."""
    if path.is_dir():
        example = {"--png": "band.png", "--md": "coverage.md"}.get(flag, "plan.json")
        raise BadInput(f"{flag} {path}: is a folder; give the file to write, e.g. {path / example}")
    parent = path.parent
    if not make_folders and not parent.is_dir():
        raise BadInput(f"{flag} {path}: the folder {parent} does not exist")
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise BadInput(f"{flag} {path}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK):
        raise BadInput(f"{flag} {path}: the folder {parent} is not writable")


def check_folder(flag: str, folder: Path) -> None:
    """An output folder that exists as something else is refused."""
    if folder.exists() and not folder.is_dir():
        raise BadInput(f"{flag} {folder}: exists and is not a folder")


def need_training_extra() -> None:
    try:
        import torch  # noqa: F401
        import torch_pruning  # noqa: F401
    except ImportError as e:
        raise BadInput(f"real training needs the `train` extra (pip install 'depl[train]'): {e}") from None


def start_training(threads: Optional[int], device: str) -> str:
    """Check the `train` extra, set torch's threads (None: 1 until the seeds' own are decided), and return the
    torch device of `device`."""
    need_training_extra()
    import torch

    torch.set_num_threads(max(1, threads or 1))
    return resolve_device(device)


def resolve_device(device: str) -> str:
    """The torch device of cpu, cuda or auto; cuda asked for but absent is bad input."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        built = torch.version.cuda or "none: a CPU-only build"
        raise BadInput(f"--device cuda: torch {torch.__version__} sees no CUDA device (CUDA in this build: {built}); "
                       "use --device cpu or auto")
    return device


def allow_code(folders: Optional[list[Path]], command: Optional[list[str]] = None) -> None:
    """The folders of your own code (net/source = MODULE:FUNCTION) this process, and those it starts, may import;
    `command`: the command line being run, which a refusal to import code repeats with --allow-code FOLDER."""
    allow(folders, command)


def data_folders(folders: Optional[list[Path]]) -> None:
    """--data DIR: folders data is read from for this process and those it starts, before $DEPL_DATA's
    (depl.train.task.data.data_roots); a source without a `path` (Fashion-MNIST, CIFAR-10) is looked for in them."""
    if folders:
        given = [str(Path(f).expanduser().resolve()) for f in folders]
        before = [x for x in os.environ.get(DATA_ENV, "").split(os.pathsep) if x.strip()]
        os.environ[DATA_ENV] = os.pathsep.join(given + [x for x in before if x not in given])


def check_ray_address(address: Optional[str]) -> Optional[str]:
    """A Ray cluster's address, refused where no cluster answers (before any work: a store made, a line printed)."""
    if address is not None:
        try:
            probe(address)
        except RayError as e:
            raise BadInput(str(e)) from None
    return address


def open_store(store: Optional[str], out: Path):
    """The run folder's store (or `store`), the folder created first."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(f"--out {out}: cannot create the run folder ({e.strerror or e})") from None
    return Store(store or out / "runs.sqlite")


def run_seeds(st, runs, training: Training, progress: Optional[Callable] = None,
              said: Optional[Callable[[str], None]] = None, keep: Optional[Callable] = None):
    """`depl.train.backends.executors.run_all` over `runs` [(run id, job, seeds)]; a Ray cluster that cannot be used
    is bad input, and so is data that cannot be used (a seed's own draw of your data: the seeds trained before it stay
    in the store). progress(run_id, seed, epoch, result) after every epoch; said(text): how the seeds train, one line
    (and before it, that a measurement starts when one does); keep(item): every batch-epoch before it is written
    (depl.train.task.models.ModelKeeper). Returns how they trained (executors.Decision)."""
    check_executor(training.executor)
    try:
        with as_bad_input(*training_errors()):
            return run_all(st, runs, progress=progress, said=said, keep=keep, **training.seed_options())
    except RayError as e:
        raise BadInput(str(e)) from None


def seed_range(first_seed: int, seeds: int) -> list[int]:
    """Seeds F..F+N-1; BadInput where the last is beyond MAX_SEED (a seed no later command could name)."""
    if first_seed + seeds - 1 > MAX_SEED:
        raise BadInput(f"--first-seed {first_seed} with {seeds} seeds ends at {first_seed + seeds - 1}: seeds are at "
                       f"most {MAX_SEED}; start at {MAX_SEED - seeds + 1} or lower")
    return list(range(first_seed, first_seed + seeds))
