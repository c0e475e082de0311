"""A plan as a Flower app and a Flower deployment's network face: `depl export-app`, `depl run-app` and
`depl fleet-gateway` (the workflows: depl.workflows.apps; docs/flower-deployment.md)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape

from .console import choice, command_line, console, epoch_progress, json_option, next_step, print_json, refusals, warn
from .training import ALLOW_CODE, AppDevice, KeepModels, summary
from .. import workflows

APP_PLAN = typer.Argument(..., metavar="PLAN.json", help="a plan file (JSON, from `depl plan`)")
APP_FOLDER = typer.Argument(..., metavar="DIR", help="the app folder to write")
APP_SEEDS = typer.Option(1, "--seeds", min=1, help="seeds F..F+N-1 (the run config's `seeds`)")
APP_FIRST_SEED = typer.Option(0, "--first-seed", min=0, help="F: the first seed (the run config's `first-seed`)")
APP_STORE = typer.Option(None, "--store", help="where the ServerApp writes [default: DIR/runs.sqlite]")
APP_DEVICE = typer.Option(AppDevice.cpu.value, "--device", **choice(AppDevice, "--device"),
                          help="cpu or cuda: where the ClientApps train (not auto: the nodes' devices are not known "
                          "here)")
APP_KEEP = typer.Option(None, "--keep-models", **choice(KeepModels, "--keep-models"),
                        help="the seeds' final models the ServerApp keeps, next to the store (models/RUN_ID): all, "
                        "best or none [default: all for up to 16 seeds, best above]")
APP_JSON = json_option("print the app folder and the commands that run it as one JSON object on stdout (nothing "
                       "else there)")


def export_app(
    plan: Path = APP_PLAN, folder: Path = APP_FOLDER, seeds: int = APP_SEEDS, first_seed: int = APP_FIRST_SEED,
    store: Optional[str] = APP_STORE, device: str = APP_DEVICE, allow: Optional[List[Path]] = ALLOW_CODE,
    keep_models: Optional[str] = APP_KEEP, as_json: bool = APP_JSON,
) -> None:
    """Write the plan as a Flower app (pyproject.toml with [tool.flwr.app]) for `flwr run DIR`."""
    with refusals():
        app = workflows.export_app(plan, folder, seeds, first_seed, store=store, device=device, keep_models=keep_models,
                     allow_code=allow, command=command_line())
    if as_json:
        print_json(app.to_json())
        return
    console.print(f"Flower app written to {app.folder}/pyproject.toml (the plan is embedded in its run config)\n"
                  + "\n".join(f"  {cmd}\n      # {what}" for cmd, what in app.commands),
                  highlight=False, markup=False, soft_wrap=True)


RUN_APP_FOLDER = typer.Argument(..., metavar="DIR", help="an app folder written by `depl export-app`")
SUPERNODES = typer.Option(None, "--supernodes", min=1, max=1024,
                          help="virtual SuperNodes of the simulation [default: the largest cluster's nodes]")
APP_THREADS = typer.Option(1, "--threads", min=1, help="torch threads per process")


def run_app(
    folder: Path = RUN_APP_FOLDER, supernodes: Optional[int] = SUPERNODES, threads: int = APP_THREADS,
    allow: Optional[List[Path]] = ALLOW_CODE,
) -> None:
    """Run an app of `depl export-app` with `flwr run` on Flower's simulation engine, here. Resumes.

    A SuperLink of its own on 127.0.0.1, its state in DIR/.flwr (never ~/.flwr), stopped with all it started."""
    with refusals():
        a = workflows.prepare_app_run(folder, threads, allow_code=allow, command=command_line())
    console.print(f"run [bold]{a.run_id}[/] · app {escape(str(folder))} · {a.epochs} epochs × {len(a.seeds)} seeds · "
                  f"flwr run on Flower's simulation engine ({a.device}) · store {escape(a.store)}", highlight=False)
    with epoch_progress() as bar, refusals():
        task = bar.add_task("flower", total=a.epochs * len(a.seeds))

        def progress(seed, epoch, loss):
            bar.update(task, advance=1, description=f"flower seed {seed} epoch {epoch} loss {loss:.3f}")

        done = workflows.train_app_run(a, supernodes, threads, progress)
    with done.store as st:
        console.print(f"done in {done.seconds:.1f} s · the SuperLink and all it started are stopped")
        summary(st, done.run_id, f"app {folder}", list(done.seeds))
    next_step(f"depl runs show {done.store.path}")


LISTEN = typer.Option(..., "--listen", help="HOST:PORT the SuperNodes dial (the network address)")
GW_SUPERLINK = typer.Option("127.0.0.1:9093", "--superlink", help="the SuperLink, listening on loopback")
CERTFILE = typer.Option(..., "--ssl-certfile", help="the server certificate (the SuperLink's)")
KEYFILE = typer.Option(..., "--ssl-keyfile", help="its private key")
CA = typer.Option(None, "--ssl-ca-certfile", help="the CA that signed the SuperLink's certificate [default: the "
                  "system's]")
GW_PLAN = typer.Option(None, "--plan", metavar="PLAN.json", help="the plan the deployment runs: sizes --max-body "
                       "from its largest model (2 × its weights + 4 MiB)")
MAX_BODY = typer.Option(None, "--max-body", metavar="SIZE", help="the largest request body passed on, e.g. 64MiB "
                        "(413 over it) [default: from --plan, else 64MiB]")
HEADER_TIMEOUT = typer.Option(10.0, "--header-timeout", metavar="SECONDS",
                              help="for the TLS handshake, then for a request's line and headers")
BODY_TIMEOUT = typer.Option(30.0, "--body-timeout", metavar="SECONDS",
                            help="for a request's body, plus 1 s per --body-min-rate bytes received")
BODY_MIN_RATE = typer.Option("64KiB", "--body-min-rate", metavar="SIZE",
                             help="bytes per second a body must keep up after --body-timeout")
KEEP_ALIVE = typer.Option(5, "--keep-alive", metavar="SECONDS", help="idle time between requests")
MAX_CONNECTIONS = typer.Option(100, "--max-connections", metavar="N",
                               help="open connections at once (503 and closed over it)")


def fleet_gateway(
    listen: str = LISTEN, superlink: str = GW_SUPERLINK, certfile: Path = CERTFILE, keyfile: Path = KEYFILE,
    ca: Optional[Path] = CA, plan: Optional[Path] = GW_PLAN, max_body: Optional[str] = MAX_BODY,
    header_timeout: float = HEADER_TIMEOUT, body_timeout: float = BODY_TIMEOUT, body_min_rate: str = BODY_MIN_RATE,
    keep_alive: int = KEEP_ALIVE, max_connections: int = MAX_CONNECTIONS,
) -> None:
    """Serve a SuperLink's Fleet API (SuperNodes only) on the network; its Control API stays on loopback."""
    with refusals():
        g = workflows.prepare_gateway(listen, superlink, certfile=certfile, keyfile=keyfile, ca=ca, plan=plan,
                                      max_body=max_body, header_timeout=header_timeout, body_timeout=body_timeout,
                                      body_min_rate=body_min_rate, keep_alive=keep_alive,
                                      max_connections=max_connections)
    if g.note:
        warn(g.note)
    with refusals():
        workflows.serve_gateway(g)
