"""The trained models of a run: each seed's final model kept in the run folder, loaded back, exported.

Where: ``RUN_FOLDER/models/RUN_ID/seed-N.pt`` with its sidecar ``seed-N.json`` (one folder per run: a run
folder may hold the runs of several plans).  The parent process, the store's one writer, writes them
(`ModelKeeper`, called by `depl.train.engine.seeds.Writer` before the seed's last epoch is committed), from what the
worker that trained the seed sends back with that epoch (`final_payload`: a stacked batch unstacks each
seed's weights first).  A model is written before its epoch's transaction: after a kill in between, the
resumed run retrains that epoch from its checkpoint and writes the same model again; a seed the store has
finished is never retrained, so its file is never written twice.

The ``.pt`` file is a `torch.save` of plain data only — a dict of str, int, float, lists and tensors — and
is read with ``torch.load(weights_only=True)``: no pickled code.  It holds

* ``state_dict``: the weights (on the CPU);
* ``layers``: for every layer whose size pruning changes, its type and its sizes (``in_channels``,
  ``out_channels``, ``groups``, ``in_features``, ``out_features``, ``num_features``, …) as trained;
* ``spec``: the model version (`depl.train.task.prune.VersionSpec`: network, width, pruning ratio, input shape,
  classes; for your own network its reference, arguments and code folder).

`rebuild` makes the model from these against the network the run recorded: the version of ``spec`` is built
(the full network pruned to its ratio: its shapes do not depend on how the ratio was reached), its layer sizes
must be the recorded ones, and every weight must be there with its shape and dtype, and finite, before the
weights are loaded strictly; anything else is `ModelError` naming the file, the layer or weight, and how it
differs.  The sidecar (JSON) says what the model is: run, seed, version,
parameters, epochs, final test loss and accuracy, the loss trained with (``loss``: what the outputs are), the
plan (file name, SHA-256, method, scenario), the ``.pt`` file (``seed-N.pt`` beside it: no other is read) and its
SHA-256, and for your own network the
digests of its code files (checked on loading).

An adaptive run (`depl run --adaptive`, depl.train.loops.adaptive) keeps, per seed, the model of the epoch the
closed loop ended it at — its version then (pruned where it pruned) —: ``epochs`` is that epoch and ``stop``
(`stop_record`) says why (``stop``: the guarantee allowed it; ``end``: the plan's last epoch).

Which models are kept (`KEEP`): ``all``, ``best`` (the one with the lowest final test loss, ties to the
lower seed), or ``none``; `default_keep` is ``all`` for up to `ALL_UP_TO` seeds, ``best`` above.
A diverged seed (non-finite loss) leaves no model.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import logging
import math
import os
import shutil
import tempfile
import warnings
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from torch import nn

from ...paths import relative, resolved
from .nets import seeded
from .prune import VersionSpec, build_version, n_parameters
from .source import DataError
from .custom import CODE_ENV, CodeRefused, allow, digests

FORMAT = "depl.model/1"
KEEP = ("none", "best", "all")
ALL_UP_TO = 16   # seeds of a run up to which every model is kept by default; above it, the best only
FOLDER = "models"

# the sizes of a layer that pruning changes (Torch-Pruning sets them on the layers it slices)
SIZES = ("in_channels", "out_channels", "groups", "in_features", "out_features", "num_features",
         "normalized_shape", "num_embeddings", "embedding_dim")


class ModelError(DataError):
    """A model file that cannot be read or rebuilt, or a model asked for that is not there; the message says
    which file and why."""


def default_keep(n_seeds: int) -> str:
    """--keep-models when not given: every model for a run of up to ALL_UP_TO seeds, else the best one."""
    return "all" if n_seeds <= ALL_UP_TO else "best"


def models_folder(run_folder: str | os.PathLike, run_id: str | None = None) -> Path:
    base = Path(run_folder) / FOLDER
    return base if run_id is None else base / run_id


# --------------------------------------------------------------------------- #
# What a worker sends back with a seed's last epoch
# --------------------------------------------------------------------------- #

def layer_sizes(model: nn.Module) -> dict[str, dict[str, Any]]:
    """Every layer with a size pruning may change: {module name: {"type": class name, size: value}}."""
    out = {}
    for name, m in model.named_modules():
        sizes = {}
        for a in SIZES:
            v = getattr(m, a, None)
            if isinstance(v, int) and not isinstance(v, bool):
                sizes[a] = v
            elif isinstance(v, (tuple, list)) and all(isinstance(i, int) for i in v):
                sizes[a] = [int(i) for i in v]
        if sizes:
            out[name] = {"type": type(m).__name__, **sizes}
    return out


def final_payload(model: nn.Module) -> dict[str, Any]:
    """A trained model as plain data for the writer: its weights (torch.save bytes, CPU), layer sizes and
    parameter count."""
    buf = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, buf)
    return {"state": buf.getvalue(), "layers": layer_sizes(model), "parameters": n_parameters(model)}


# --------------------------------------------------------------------------- #
# Writing them (the parent process)
# --------------------------------------------------------------------------- #

def plan_summary(plan_file: str | os.PathLike, plan) -> dict[str, Any]:
    """What a model's sidecar says of the plan it was trained by: file name, SHA-256 of the file, method,
    scenario, epochs."""
    path = Path(plan_file)
    return {"file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "method": plan.method,
            "scenario": plan.scenario, "epochs": len(plan.epochs)}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _atomic(path: Path, write) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def code_digests(spec: VersionSpec) -> dict[str, str] | None:
    """The digests of your own network's code files (None for a built-in network)."""
    if not spec.own:
        return None

    return digests(spec.net, spec.code_dir)


@dataclass
class ModelKeeper:
    """Writes the final models of run `run_id` into `run_folder`/models/`run_id`, as `keep` says (all or best).

    Called with every `depl.train.engine.seeds.Item` before the store commits it (`Writer`)."""

    run_folder: Path
    run_id: str
    job: Any                       # depl.train.engine.federation.Job
    plan: dict[str, Any]           # plan_summary(...)
    keep: str = "all"
    written: list[int] = field(default_factory=list)   # seeds whose model this keeper wrote

    def __post_init__(self) -> None:
        if self.keep not in ("best", "all"):
            raise ValueError(f"keep {self.keep!r}: a keeper keeps best or all (none: no keeper)")
        self.folder = models_folder(self.run_folder, self.run_id)
        self._code = None

    def __call__(self, item) -> None:
        """The final models a batch-epoch (`depl.train.engine.seeds.Item`) brings."""
        if item.run_id != self.run_id or not item.models:
            return
        rows = {seed: row for seed, row, _, final in item.entries if final}
        stops = {seed: stop_record(d) for seed, d in item.decisions}   # an adaptive run's: why the seed ended there
        for seed, payload in item.models:
            if seed in rows:
                self.final(seed, rows[seed], payload, stops.get(seed))

    def final(self, seed: int, row, payload: dict[str, Any], stop: dict[str, Any] | None = None) -> None:
        """Seed `seed` has finished with `row` (its last epoch) and the model `payload` (`final_payload`): kept as
        `keep` says (a diverged seed: never); `stop`: an adaptive seed's `stop_record`."""
        if not (math.isfinite(row.test_loss) and math.isfinite(row.train_loss)):
            return
        if self.keep == "best" and not self._better(seed, row.test_loss):
            return
        self.write(seed, row, payload, stop)
        if self.keep == "best":
            for other in list_run(self.folder):
                if other["seed"] != seed:
                    remove(self.folder, other["seed"])

    def _better(self, seed: int, loss: float) -> bool:
        kept = [(m["final_test_loss"], m["seed"]) for m in list_run(self.folder) if m["seed"] != seed]
        return not kept or (loss, seed) < min(kept)

    def write(self, seed: int, row, payload: dict[str, Any], stop: dict[str, Any] | None = None) -> Path:
        spec = self.job.versions[row.model]
        state = torch.load(io.BytesIO(payload["state"]), weights_only=True, map_location="cpu")
        self.folder.mkdir(parents=True, exist_ok=True)
        pt = self.folder / f"seed-{seed}.pt"
        recorded = recorded_spec(spec, self.folder)
        content = {"format": FORMAT, "run": self.run_id, "seed": int(seed), "version": row.model,
                   "spec": recorded, "layers": payload["layers"], "state_dict": state}
        _atomic(pt, lambda f: torch.save(content, f))
        if self._code is None and spec.own:
            self._code = code_digests(spec)
        side = {"format": FORMAT, "run": self.run_id, "seed": int(seed), "version": row.model,
                "spec": recorded, "parameters": int(payload["parameters"]), "epochs": int(row.epoch),
                "final_test_loss": float(row.test_loss), "final_test_accuracy": None if row.test_accuracy is None else float(row.test_accuracy),
                "loss": self.job.options.loss,   # what its outputs are: class logits, a prediction, ...
                "plan": self.plan, "file": pt.name, "sha256": _sha256(pt), "code": self._code}
        if stop is not None:
            side["stop"] = stop
        _atomic(self.folder / f"seed-{seed}.json",
                lambda f: f.write((json.dumps(side, indent=1, sort_keys=True) + "\n").encode()))
        self.written.append(int(seed))
        return pt


def recorded_spec(spec: VersionSpec, folder: Path) -> dict[str, Any]:
    """A version spec as a model's files record it: your code's folder (`code_dir`) relative to the models folder
    `folder` (`depl.paths`), so that a run folder copied with the code it names loads from the copy (`read`)."""
    d = spec.to_json()
    if isinstance(d.get("code_dir"), str):
        d["code_dir"] = relative(d["code_dir"], folder / "seed.json")
    return d


def stop_record(decision: dict[str, Any]) -> dict[str, Any]:
    """What an adaptive seed's sidecar says of where and why it ended, from the record of its last decision
    (depl.train.loops.adaptive.record): the epoch, the action (stop: the guarantee allowed it; end: the plan's last
    epoch), the policy's note, the validation loss it decided on, and the cost and time it spent."""
    keys = ("epoch", "action", "note", "observed", "p_new", "cost_spent", "time_spent")
    finite = (lambda v: None if isinstance(v, float) and not math.isfinite(v) else v)  # noqa: E731  (JSON: null)
    return {k: finite(decision.get(k)) for k in keys if k in decision}


def remove(folder: Path, seed: int) -> None:
    """A model no longer kept: its sidecar first (a listing reads sidecars), then its file."""
    for suffix in (".json", ".pt"):
        (folder / f"seed-{seed}{suffix}").unlink(missing_ok=True)


# --------------------------------------------------------------------------- #
# Reading them
# --------------------------------------------------------------------------- #

def _sidecar(path: Path) -> dict[str, Any]:
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ModelError(f"{path}: not a model's sidecar ({type(e).__name__}: {e})") from None
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise ModelError(f"{path}: format {d.get('format') if isinstance(d, dict) else None!r}, expected {FORMAT!r}")
    for key in ("run", "seed", "version", "file", "final_test_loss", "spec"):
        if key not in d:
            raise ModelError(f"{path}: the field {key!r} is missing")
    for key, kind, words in (("run", str, "a run's id"), ("version", str, "a model version's name"),
                             ("seed", int, "a seed, a whole number"), ("final_test_loss", (int, float), "a number")):
        if not isinstance(d[key], kind) or isinstance(d[key], bool):
            raise ModelError(f"{path}: {key} = {d[key]!r}: expected {words}")
    own = path.with_suffix(".pt").name   # the keeper writes seed-N.pt beside seed-N.json: nothing else is read
    if d["file"] != own:
        raise ModelError(f"{path}: file = {d['file']!r}: a model's sidecar names the model file beside it, {own!r}")
    if not path.with_name(own).is_file():
        raise ModelError(f"{path}: its model file {own} is missing (removed after the run kept it); remove the "
                         "sidecar too, or train the seed again in a new run folder")
    d["path"] = str(path.with_name(own))
    return d


def list_run(folder: Path) -> list[dict[str, Any]]:
    """The sidecars of one run's models folder, by seed."""
    if not folder.is_dir():
        return []
    return sorted((_sidecar(p) for p in folder.glob("seed-*.json")), key=lambda d: d["seed"])


def list_models(run_folder: str | os.PathLike) -> list[dict[str, Any]]:
    """Every model kept in a run folder (all its runs), by run and seed; ModelError if it has no models folder."""
    base = models_folder(run_folder)
    if not Path(run_folder).is_dir():
        raise ModelError(f"{run_folder}: no such run folder")
    if not base.is_dir():
        raise ModelError(f"{run_folder}: no trained models here (no {FOLDER}/ folder: `depl run PLAN --out "
                         f"{run_folder}` keeps them, unless --keep-models none)")
    return [m for run in sorted(p for p in base.iterdir() if p.is_dir()) for m in list_run(run)]


def find(run_folder: str | os.PathLike, seed: int, run: str | None = None) -> dict[str, Any]:
    """The sidecar of seed `seed`'s model (of run `run`: needed where the folder keeps several runs' models)."""
    models = [m for m in list_models(run_folder) if run is None or m["run"] == run]
    runs = sorted({m["run"] for m in models})
    if run is None and len(runs) > 1:
        raise ModelError(f"{run_folder}: models of {len(runs)} runs ({', '.join(runs)}); say which run (--run)")
    hit = [m for m in models if m["seed"] == seed]
    if not hit:
        have = ", ".join(str(m["seed"]) for m in models[:20]) or "none"
        raise ModelError(f"{run_folder}: no model of seed {seed}" + (f" in run {run}" if run else "")
                         + f" (seeds kept: {have}; --keep-models best keeps one, a diverged seed none)")
    return hit[0]


@contextmanager
def allowed(folders) -> Any:
    """Your own code's folders allowed for the duration (added to $DEPL_CODE, restored after)."""
    before = os.environ.get(CODE_ENV)
    try:
        allow(folders or [])
        yield
    finally:
        if before is None:
            os.environ.pop(CODE_ENV, None)
        else:
            os.environ[CODE_ENV] = before


def _shown(sizes: dict[str, Any] | None) -> str:
    """A layer's recorded type and sizes, in words."""
    if sizes is None:
        return "no such layer"
    return f"a {sizes.get('type')} (" + ", ".join(f"{k} {v}" for k, v in sizes.items() if k != "type") + ")"


def _network(spec: VersionSpec) -> str:
    """The network of a version spec, in words (what a model is checked against)."""
    return f"{spec.net}" + (f" pruned to {spec.ratio:g}" if spec.ratio > 0 else "")


def rebuild(spec: VersionSpec, layers: Any, state: Any, where: str = "the model file") -> nn.Module:
    """The network the run recorded (`spec`: the full network pruned to its ratio, whose shapes do not depend on
    how the ratio was reached, depl.train.task.prune) with the kept weights `state`, in eval mode.

    Nothing of the file is trusted: its recorded layer sizes must be the network's, every weight of the network
    must be there with the network's shape and dtype (and no other), and every value must be finite — else
    ModelError naming `where`, the first layer or weight that differs, and how."""
    with seeded(0):   # the skeleton's arbitrary initial weights are overwritten: leave the caller's RNG alone
        model = build_version(spec)
    net = _network(spec)
    if not isinstance(layers, dict) or not all(isinstance(v, dict) for v in layers.values()):
        raise ModelError(f"{where}: its layers are a {type(layers).__name__}, not a table of layers and their sizes")
    want = layer_sizes(model)
    for name in sorted(set(layers) | set(want)):
        if layers.get(name) != want.get(name):
            raise ModelError(f"{where}: layer {name!r}: the file records {_shown(layers.get(name))}; the network the "
                             f"run recorded ({net}) has {_shown(want.get(name))}")
    if not isinstance(state, dict) or not all(isinstance(t, torch.Tensor) for t in state.values()):
        raise ModelError(f"{where}: its weights are not a table of tensors")
    expected = model.state_dict()
    for key in sorted(set(state) | set(expected)):
        got, ref = state.get(key), expected.get(key)
        if ref is None:
            raise ModelError(f"{where}: weight {key!r}: the network the run recorded ({net}) has no such weight")
        if got is None:
            raise ModelError(f"{where}: weight {key!r} of the network the run recorded ({net}) is missing")
        if tuple(got.shape) != tuple(ref.shape):
            raise ModelError(f"{where}: weight {key!r} has shape {tuple(got.shape)}; the network the run recorded "
                             f"({net}) has {tuple(ref.shape)} there")
        if got.dtype != ref.dtype:
            raise ModelError(f"{where}: weight {key!r} is {str(got.dtype).removeprefix('torch.')}; the network the "
                             f"run recorded ({net}) has {str(ref.dtype).removeprefix('torch.')} there")
        if got.is_floating_point() or got.is_complex():
            bad = int((~torch.isfinite(got)).sum())
            if bad:
                nans = int(torch.isnan(got).sum())
                what = " and ".join(w for w, k in (("NaN", nans), ("infinite", bad - nans)) if k)
                raise ModelError(f"{where}: weight {key!r} holds {bad:,} {what} value{'s' * (bad > 1)} (of "
                                 f"{got.numel():,}); a kept model's weights are finite (a diverged seed keeps none)")
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:   # checked above: not expected
        raise ModelError(f"{where}: the weights do not load into {net}: {str(e).splitlines()[0]}") from None
    return model.eval()


def read(sidecar: dict[str, Any]) -> tuple[VersionSpec, dict[str, Any]]:
    """The version and the content of a model's .pt file (read with weights_only=True: plain data only)."""
    pt = Path(sidecar["path"])
    try:
        content = torch.load(pt, weights_only=True, map_location="cpu")
    except Exception as e:
        raise ModelError(f"{pt}: cannot be read as a model file ({type(e).__name__}: {e})") from None
    if not isinstance(content, dict) or content.get("format") != FORMAT:
        raise ModelError(f"{pt}: not a {FORMAT} model file")
    if sidecar.get("sha256") and _sha256(pt) != sidecar["sha256"]:
        raise ModelError(f"{pt}: its SHA-256 is not the one its sidecar records (the file was changed)")
    missing = [k for k in ("spec", "layers", "state_dict") if k not in content]
    if missing:
        raise ModelError(f"{pt}: the model file has no {missing[0]!r}")
    try:
        spec = VersionSpec.from_json(content["spec"])
    except (KeyError, TypeError, ValueError) as e:
        raise ModelError(f"{pt}: its version spec is unreadable ({type(e).__name__}: {e})") from None
    if content["spec"] != sidecar["spec"]:
        raise ModelError(f"{pt}: its version spec is not the one its sidecar records ({sidecar['spec']})")
    for key in ("run", "seed", "version"):   # what the model is, in both files: an edited sidecar names another
        if content.get(key) != sidecar.get(key):
            raise ModelError(f"{pt}: the model file is of {key} {content.get(key)!r}, its sidecar says "
                             f"{sidecar.get(key)!r} (the sidecar was changed)")
    if spec.code_dir is not None:   # recorded relative to the models folder (`recorded_spec`)
        code = resolved(spec.code_dir, pt)
        if not code.is_dir():
            raise ModelError(f"{pt.with_suffix('.json')}: spec.code_dir = {spec.code_dir!r}: no such folder ({code}, "
                             "taken from the sidecar's folder): copy the run folder together with the code it was "
                             "trained with")
        spec = replace(spec, code_dir=str(code))
    return spec, content


def load(run_folder: str | os.PathLike, seed: int, run: str | None = None, allow_code=None) -> nn.Module:
    """Seed `seed`'s final model of the run folder, in eval mode.  Your own network is imported only from
    `allow_code` folders (or $DEPL_CODE), and only if its files are those it was trained with."""
    side = find(run_folder, seed, run)
    spec, content = read(side)
    with allowed(allow_code):
        if spec.own:
            found = code_digests(spec)  # the folder allowed, the files found: CodeRefused otherwise
            want = side.get("code") or {}
            changed = sorted(p for p in set(found) | set(want) if found.get(p) != want.get(p))
            if changed:
                raise CodeRefused(f"{side['path']}: {spec.net!r}: {changed[0]} is not the file this model was "
                                  "trained with (its digest differs from the sidecar's)")
        model = rebuild(spec, content["layers"], content["state_dict"], side["path"])
    x = torch.zeros(1, *spec.input_shape)
    with torch.no_grad():
        out = model(x)
    # (1, d); a regression network with one output may give (1,) — what its targets of shape (N,) trained it to
    if tuple(out.shape) != (1, spec.n_classes) and not (spec.n_classes == 1 and tuple(out.shape) == (1,)):
        raise ModelError(f"{side['path']}: the rebuilt model gives outputs of shape {tuple(out.shape)}, expected "
                         f"{(1, spec.n_classes)}")
    return model


# --------------------------------------------------------------------------- #
# Exporting
# --------------------------------------------------------------------------- #

# each export format and the extension its file takes: torch.export.save writes a PT2 archive, named .pt2 (.pt is
# torch.save's, the kept models' own); ONNX, .onnx
EXPORT_FORMATS = {"torch-export": ".pt2", "onnx": ".onnx"}


@contextmanager
def _quiet() -> Any:
    """torch.export and the ONNX exporter log, warn and print as they trace (a graph dump of 20 lines where a
    network cannot be exported, the exporter's steps): none of it reaches the user, who gets depl's one line."""
    logging.disable(logging.ERROR)
    try:
        with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(logging.NOTSET)


def export(model: nn.Module, spec: VersionSpec, out: Path, fmt: str = "torch-export") -> dict[str, Any]:
    """Write `model` as a deployable program: a torch.export program (`torch.export.save`; load it with
    `torch.export.load(out).module()`, without depl) or ONNX (only where the `onnx` package is installed).
    The batch dimension is dynamic where torch.export can keep it so.  `out` is written whole or left as it was
    (`write_new`): OSError if it cannot be."""
    example = (torch.zeros(2, *spec.input_shape),)
    dims = ({0: torch.export.Dim.AUTO},)
    if fmt == "onnx":
        missing = [name for name in ("onnx", "onnxscript") if importlib.util.find_spec(name) is None]
        if missing:
            raise ModelError(f"ONNX export needs {' and '.join(f'`{m}`' for m in missing)}, not installed here: "
                             "pip install \"depl[onnx]\"; or use the torch-export format (torch.export.load reads it)")
        with _quiet():
            data = write_onnx(out, lambda path: torch.onnx.export(model, example, str(path), dynamo=True,
                                                                  verbose=False, dynamic_shapes=dims))
        return {"format": "onnx", "file": str(out), "input_shape": ["batch", *spec.input_shape],
                "data_file": str(data) if data else None}
    with _quiet():
        program = torch.export.export(model, example, dynamic_shapes=dims)
    archive = io.BytesIO()   # in memory: torch's own file writer aborts the process (SIGABRT) when a write fails
    torch.export.save(program, archive)
    write_new(out, lambda tmp: tmp.write_bytes(archive.getvalue()))
    batch = _batch_dynamic(program)
    return {"format": "torch-export", "file": str(out), "input_shape": ["batch" if batch else 2, *spec.input_shape],
            "n_classes": spec.n_classes, "dynamic_batch": batch}


def write_new(path: Path, write: Callable[[Path], Any]) -> None:
    """`write(tmp)` into a new temporary file in `path`'s folder, synced, then renamed onto `path`: `path` is then
    the whole new file, or — when anything fails (a full disk, a file-size limit) — as it was, and the temporary
    file is removed.  The file gets the permissions a new file gets (0666 less the umask)."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}")
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_onnx(out: Path, export: Callable[[Path], Any]) -> Optional[Path]:
    """`export(path)` writes an ONNX model at `path` and, where it keeps the weights apart, `path`.data beside it,
    which the model names.  Both are written under `out`'s own name in a new folder beside `out` (so the model names
    `out`.data, not a temporary name), synced, and moved onto `out`.data and `out`, the weights first; a `out`.data
    of an earlier export that this one does not write is removed.  Returns `out`.data where it was written.  When
    anything fails, `out` is as it was and the new folder removed."""
    folder = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.stem}.", suffix=".tmp"))
    try:
        made = folder / out.name
        export(made)
        weights = made.with_name(made.name + ".data")
        written = [f for f in (weights, made) if f.exists()]
        for f in written:
            with open(f, "rb") as handle:
                os.fsync(handle.fileno())
            os.chmod(f, 0o666 & ~_umask())
        data = out.with_name(out.name + ".data")
        if weights.exists():
            os.replace(weights, data)
        else:
            data.unlink(missing_ok=True)
        os.replace(made, out)
        return data if weights in written else None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _batch_dynamic(program) -> bool:
    """Whether the exported program's input keeps a symbolic batch size."""
    user = set(program.graph_signature.user_inputs)
    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name in user:
            return not isinstance(node.meta["val"].shape[0], int)
    return False
