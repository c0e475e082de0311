"""A plan as a Flower app (`export_app`), an app run on Flower's simulation engine here (`prepare_app_run`,
`train_app_run`), and the Fleet API gateway of a Flower deployment (`prepare_gateway`, `serve_gateway`):
`depl export-app`, `depl run-app` and `depl fleet-gateway`.  docs/flower-deployment.md says how they fit."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from .common import allow_code as allow, start_training
from .errors import BadInput, ExternalFailure, as_bad_input, training_errors
from ..store import Store
from ..train.apps.fleet_gateway import (check_tls, GatewayError, is_loopback, Limits, parse_size, plan_body_limit,
                                        serve, split_address)
from ..train.apps.flower_app import (app_commands, app_run_config, AppError, export_app as export, job_of_run_config,
                                     run_app)
from ..train.engine import execute


@dataclass(frozen=True)
class ExportedApp:
    """A plan written as a Flower app folder (pyproject.toml with [tool.flwr.app], the plan in its run config),
    with the commands that run it (command, what it does)."""

    folder: Path
    commands: tuple[tuple[str, str], ...]

    def to_json(self) -> dict:
        return {"folder": str(self.folder), "pyproject": str(self.folder / "pyproject.toml"),
                "commands": [{"command": c, "what": w} for c, w in self.commands]}


def export_app(plan_file: str | Path, folder: str | Path, seeds: int = 1, first_seed: int = 0, *,
               store: Optional[str] = None, device: str = "cpu", keep_models: Optional[str] = None,
               allow_code: Optional[list[Path]] = None, command: Optional[list[str]] = None) -> ExportedApp:
    """Write the plan as a Flower app in `folder` for `flwr run DIR`: seeds F..F+N-1, the ServerApp writing to
    `store` [default: DIR/runs.sqlite] and keeping the seeds' final models (`keep_models`), the ClientApps
    training on `device` (cpu or cuda).  `allow_code`: folders of your own code (net/source = MODULE:FUNCTION);
    `command`: the command line, repeated by a refusal to import code."""
    allow(allow_code, command)

    with as_bad_input(*training_errors()):
        try:
            app = export(Path(plan_file), Path(folder), seeds, first_seed, store, device, keep_models)
        except OSError as e:  # DIR is a file, or cannot be created or written; nothing is left behind
            raise BadInput(f"{e.filename or folder}: {e.strerror or e}") from None
    return ExportedApp(Path(app), tuple(app_commands(app)))


@dataclass(frozen=True)
class AppRun:
    """An app folder of `depl export-app`, read and ready to run (`prepare_app_run`)."""

    folder: Path
    job: Any                    # depl.train.engine.federation.Job
    run_id: str
    seeds: tuple[int, ...]
    store: str
    device: str

    @property
    def epochs(self) -> int:
        return len(self.job.epochs)


@dataclass(frozen=True)
class AppRan:
    """An app's run, finished: its store (read only), its seeds and the seconds it took."""

    run_id: str
    folder: Path
    store: Any                  # depl.store.Store, read only
    seeds: tuple[int, ...]
    seconds: float

    def to_json(self) -> dict:
        return {"run_id": self.run_id, "app": str(self.folder), "store": str(self.store.path),
                "seeds": list(self.seeds), "seconds": self.seconds}


def prepare_app_run(folder: str | Path, threads: int = 1, allow_code: Optional[list[Path]] = None,
                    command: Optional[list[str]] = None) -> AppRun:
    """Read the app's run config (its plan, seeds, store and device), checked before anything runs."""

    folder = Path(folder)
    with as_bad_input(AppError, *training_errors()):
        rc = app_run_config(folder)
        dev = start_training(threads, str(rc.get("device", "cpu")))
        allow(allow_code, command)
        job, run_id, _ = job_of_run_config(rc)
    first = int(rc.get("first-seed", 0))
    seeds = tuple(range(first, first + int(rc.get("seeds", 1))))
    return AppRun(folder, job, run_id, seeds, str(rc.get("store", folder / "runs.sqlite")), dev)


def train_app_run(a: AppRun, supernodes: Optional[int] = None, threads: int = 1,
                  progress: Optional[Callable[[int, int, float], None]] = None) -> AppRan:
    """`flwr run` of the app on Flower's simulation engine, here: a SuperLink of its own on 127.0.0.1, its state in
    DIR/.flwr (never ~/.flwr), stopped with all it started; `supernodes` virtual SuperNodes [default: the largest
    cluster's nodes]. Resumes.  progress(seed, epoch, test loss) after every epoch.  A run that fails, or ends with
    seeds unfinished, is ExternalFailure (Flower's logs are in DIR/.flwr)."""

    t0 = time.perf_counter()
    try:
        run_app(a.folder, supernodes, progress, threads)
    except RuntimeError as e:
        raise ExternalFailure(str(e)) from None
    try:
        st = Store(a.store, readonly=True)
    except training_errors() as e:
        raise ExternalFailure(str(e)) from None
    left = execute.pending(st, a.run_id, a.job, list(a.seeds))
    if left:
        st.close()
        raise ExternalFailure(f"flwr run ended but seeds {left} are unfinished; Flower's logs: {a.folder / '.flwr'}")
    return AppRan(a.run_id, a.folder, st, a.seeds, time.perf_counter() - t0)


@dataclass(frozen=True)
class Gateway:
    """The Fleet API gateway, checked and ready to serve: where it listens, the SuperLink it passes on to (on
    loopback), its TLS files and its limits (depl.train.apps.fleet_gateway.Limits); `note`: what the user should know
    about the limits (a --max-body below what the plan's largest model needs), or None."""

    listen: str
    superlink: str
    certfile: Path
    keyfile: Path
    ca: Optional[Path]
    limits: Any
    note: Optional[str] = None

    def to_json(self) -> dict:
        lim = self.limits
        return {"listen": self.listen, "superlink": self.superlink, "max_body": lim.max_body,
                "header_timeout": lim.header_timeout, "body_timeout": lim.body_timeout,
                "body_min_rate": lim.body_min_rate, "keep_alive": lim.keep_alive,
                "max_connections": lim.max_connections}


def prepare_gateway(listen: str, superlink: str = "127.0.0.1:9093", *, certfile: str | Path, keyfile: str | Path,
                    ca: Optional[str | Path] = None, plan: Optional[str | Path] = None, max_body: Optional[str] = None,
                    header_timeout: float = 10.0, body_timeout: float = 30.0, body_min_rate: str = "64KiB",
                    keep_alive: float = 5, max_connections: float = 100) -> Gateway:
    """Check the gateway's addresses (the SuperLink's on loopback: the gateway is its only network face), its
    files and the TLS they make, and its limits; --max-body sized from `plan`'s largest model (2 × its weights +
    4 MiB) where a plan is given.  Sizes are texts (64MiB, 100MB, 1048576)."""
    for flag, v in (("--listen", listen), ("--superlink", superlink)):
        with as_bad_input(ValueError, prefix=f"{flag} "):
            split_address(v)
    if not is_loopback(split_address(superlink)[0]):
        raise BadInput(f"--superlink {superlink}: the SuperLink must listen on loopback (--host 127.0.0.1), "
                       "the gateway is its only network face")
    certfile, keyfile = Path(certfile), Path(keyfile)
    ca, plan = (None if ca is None else Path(ca)), (None if plan is None else Path(plan))
    for flag, f in (("--ssl-certfile", certfile), ("--ssl-keyfile", keyfile), ("--ssl-ca-certfile", ca),
                    ("--plan", plan)):
        if f is not None and not f.is_file():
            raise BadInput(f"{flag} {f}: no such file")
    with as_bad_input(ValueError):
        check_tls(str(certfile), str(keyfile), str(ca) if ca else None)
    sizes = {}
    for flag, v in (("--max-body", max_body), ("--body-min-rate", body_min_rate)):
        with as_bad_input(ValueError, prefix=f"{flag} "):
            sizes[flag] = None if v is None else parse_size(v)
    for flag, v in (("--header-timeout", header_timeout), ("--body-timeout", body_timeout),
                    ("--keep-alive", keep_alive), ("--max-connections", max_connections)):
        if not (math.isfinite(v) and v > 0):
            raise BadInput(f"{flag} {v:g}: expected a number > 0")
    limit, note = (sizes["--max-body"], None) if plan is None else _plan_body_limit(plan, sizes["--max-body"])
    limits = Limits(**({} if limit is None else {"max_body": limit}), header_timeout=header_timeout,
                    body_timeout=body_timeout, body_min_rate=sizes["--body-min-rate"], keep_alive=keep_alive,
                    max_connections=max_connections)
    return Gateway(listen, superlink, certfile, keyfile, ca, limits, note)


def _plan_body_limit(plan: Path, limit: Optional[int]) -> tuple[int, Optional[str]]:
    """(--max-body, a note): from the plan's largest model (2 × its weights + 4 MiB), or said to be below it."""
    with as_bad_input(*training_errors()):
        need, weights = plan_body_limit(plan)
    if limit is None:
        return need, None
    if limit < need:
        return limit, (f"--max-body {limit} bytes is below what the plan's largest model needs ({need} bytes: "
                       f"2 × {weights} bytes of weights + 4 MiB); its messages may be refused (413)")
    return limit, None


def serve_gateway(g: Gateway) -> None:
    """Serve the SuperLink's Fleet API (SuperNodes only) on `g.listen` until stopped; an address that cannot be
    bound is BadInput (the server's log says why)."""
    with as_bad_input(GatewayError):
        serve(g.listen, g.superlink, str(g.certfile), str(g.keyfile), str(g.ca) if g.ca else None, g.limits)
