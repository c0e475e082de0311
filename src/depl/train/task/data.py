"""Real data, never downloaded: MNIST-1D generated offline, scikit-learn's
bundled digits, CIFAR-10 from a local folder.

A source gives a fixed train/test split as float32 arrays ``(N, C, ...)`` and
int64 labels.  A scenario's dataset is a slice ``[from, to)`` of its source's
training set; a plan's selected datasets are concatenated, and every node of
the cluster that trains an epoch holds a share of them (`node_shares`): an
equal random one (IID), or a non-IID one — label shards, or a Dirichlet label
partition of concentration `[training] dirichlet_alpha`.
The test loss is measured on the source's whole test set.

MNIST-1D is generated in memory by `mnist1d.data.make_dataset` with its
canonical arguments (5,000 samples, 4,000 train, seed 42); nothing is written
to disk and no URL is ever fetched.  An adaptive run's validation samples come
from the same generator at another seed (`mnist1d_fresh`); a source that cannot
generate more gives them out of the plan's training samples (`validation`).
"""

from __future__ import annotations

import io
import math
import os
import pickle
import pickletools
import re
import stat
import zlib
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from .source import CLASSES, DataError, Source, targets_of  # noqa: F401  (DataError, Source re-exported: their home is below data and custom)
from .cachedir import default_cache_dir, write_whole
from .custom import CodeRefused, check_repeatable, load_source as own, takes_seed

SOURCES = ("mnist1d", "digits", "cifar10", "fashion-mnist")
FILE_SOURCES = ("cifar10", "fashion-mnist")  # the sources read from files under a dataset's `path`
PARTITION_SEED = 20240601  # node shares are a property of the system, not of a run's seed (unless runs draw data)
DRAWS = ("fixed", "run")  # [training] data_draw: every run on the same data, or each run its own draw


DATA_ENV = "DEPL_DATA"


def data_roots() -> list[Path]:
    """The folders data may be read from: $DEPL_DATA (several joined by ':'), else the current folder.

    A plan file carries its scenario, and with it every dataset's `path`; a plan
    from elsewhere must not make depl read (CIFAR-10 batches are pickles) from
    wherever it names, so a `path` has to lie inside one of these folders, and
    so does every file and folder read under it (`confined_file`).
    """
    given = [x for x in os.environ.get(DATA_ENV, "").split(os.pathsep) if x.strip()]
    return [Path(x).expanduser().resolve() for x in given] or [Path.cwd().resolve()]


def _outside(shown: str, real: Path, roots: list[Path]) -> DataError:
    folders = ", ".join(map(str, roots))
    return DataError(f"{shown} resolves to {real}, outside the data folder{'s' if len(roots) > 1 else ''} {folders}; "
                     f"data is read only from there (set {DATA_ENV} to the folder holding your data)")


def _inside(real: Path, roots: list[Path]) -> bool:
    return any(real == r or real.is_relative_to(r) for r in roots)


def confined(path: str) -> Path:
    """`path` resolved (`..` and symlinks followed) if that lies inside a data root; DataError otherwise."""
    real = Path(path).expanduser().resolve()
    roots = data_roots()
    if not _inside(real, roots):
        raise _outside(f"path = {path!r}", real, roots)
    return real


def confined_file(path: Path, roots: list[Path] | None = None) -> Path:
    """The file or folder `path` with every symlink followed, if it exists and lies inside a data root
    (`roots`: those folders instead, e.g. a system folder a source is installed in: `SYSTEM_FOLDERS`).

    Checked on each file and folder data.py reads, right before reading it: the folder a
    scenario names may lie inside a data root while a batch file or a subfolder in it is a
    link to elsewhere.  FileNotFoundError if there is nothing there; DataError otherwise."""
    try:
        real = Path(path).resolve(strict=True)
    except FileNotFoundError:
        raise
    except (OSError, RuntimeError) as e:  # a symlink loop (RuntimeError before Python 3.13), no permission
        why = getattr(e, "strerror", None) or "a symlink loop"
        raise DataError(f"{path}: cannot be followed to a file ({why})") from None
    roots = data_roots() if roots is None else roots
    if not _inside(real, roots):
        raise _outside(str(path), real, roots)
    return real


def read_confined(path: Path, limit: int, what: str = "the file", roots: list[Path] | None = None) -> bytes:
    """The bytes of the regular file at `path`, if it resolves inside a data root (`confined_file`)
    and holds at most `limit` bytes (`what` says what it should be): the only way data.py reads a file.

    The file is opened at its resolved path without following a link there, and on Linux the file
    actually opened is checked again, so a link swapped in after the check is not followed out of
    the data folder; a FIFO or a device is refused, and an oversized file is refused on its size,
    before a byte of it is read."""
    real = confined_file(path, roots)
    roots = data_roots() if roots is None else roots
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(real, flags)
    except OSError as e:
        raise DataError(f"{path}: cannot be opened ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise DataError(f"{path}: not a regular file")
        opened = _opened_path(fd)
        if opened is not None and not _inside(opened, roots):  # a link swapped in since `confined_file`
            raise _outside(str(path), opened, roots)
        if st.st_size > limit:
            raise DataError(f"{path}: {st.st_size:,} bytes, more than {what} holds (at most {limit:,} are read)")
        with os.fdopen(os.dup(fd), "rb") as f:
            blob = f.read(limit + 1)
        if len(blob) > limit:  # it grew since
            raise DataError(f"{path}: more than {what} holds (at most {limit:,} bytes are read)")
        return blob
    finally:
        os.close(fd)


def _opened_path(fd: int) -> Path | None:
    """Where the open file `fd` lies, as the kernel tells it (Linux's /proc); None where it cannot."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return None


def _mnist1d_raw(num_samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`_mnist1d_generate`'s samples, kept in the per-user cache folder (`cachedir.default_cache_dir()`):
    the generator makes one Python call per sample (20,000 samples: 8 s, in every process and every worker
    that trains a run drawing MNIST-1D data), reading them back takes milliseconds.  The file is named by
    what the samples are a function of (the count, the seed, mnist1d's and numpy's versions) and is checked
    on reading (its shape and dtype); one that is unreadable or wrong is made again."""
    import importlib.metadata as md
    import zipfile

    key = f"mnist1d-{num_samples}-{seed}-{md.version('mnist1d')}-{np.__version__}"
    path = default_cache_dir() / "data" / f"{key}.npz"
    try:
        with np.load(path) as f:
            raw, y = f["x"], f["y"]
        if raw.ndim == 2 and raw.shape[0] == len(y) == 10 * (num_samples // 10) and raw.dtype == np.float64:
            return raw, y
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):   # BadZipFile: a cut-off file
        pass
    raw, y = _mnist1d_generate(num_samples, seed)
    write_whole(path, lambda tmp: np.savez(tmp, x=raw, y=y))
    return raw, y


def _mnist1d_generate(num_samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`mnist1d.data.make_dataset`'s samples before its normalisation (and before its train/test cut):
    the same templates, transforms, draws and shuffle, from the same seed (checked against
    `mnist1d()` by tests/train/test_adaptive_run.py). Python's and numpy's global RNGs are left alone."""
    import random

    import mnist1d.data as m1d

    args = m1d.get_dataset_args()
    args.num_samples, args.seed = num_samples, seed
    templates = m1d.get_templates()
    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        random.seed(seed)
        np.random.seed(seed)
        xs, ys = [], []
        for label_ix in range(len(templates["y"])):
            for _ in range(num_samples // len(templates["y"])):
                x, _t = m1d.transform(templates["x"][label_ix], templates["t"], args)
                xs.append(x)
                ys.append(templates["y"][label_ix])
        order = np.random.permutation(len(ys))
        if args.shuffle_seq:  # not MNIST-1D's canonical arguments; refused rather than half-replicated
            raise DataError("mnist1d's shuffle_seq is not supported")
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)
    return np.stack(xs)[order], np.stack(ys)[order]


MNIST1D_FRESH_SEED = 20261125  # the generator seed of fresh MNIST-1D validation samples (not 42, the source's)


_SCALE: dict[tuple[int, int], tuple[float, float]] = {}  # (num_samples, seed) → make_dataset's mean and sd


def _mnist1d_scale() -> tuple[float, float]:
    """The mean and sd `make_dataset` normalised the canonical MNIST-1D with (its 5,000 raw samples)."""
    if (5000, 42) not in _SCALE:
        mnist1d.cache_clear()  # generating it records them
        mnist1d()
    return _SCALE[(5000, 42)]


@lru_cache(maxsize=4)
def mnist1d_fresh(n: int, seed: int = MNIST1D_FRESH_SEED) -> tuple[np.ndarray, np.ndarray]:
    """`n` MNIST-1D samples the source does not hold: the same generator (templates, transforms) from
    another seed, normalised with the canonical dataset's mean and sd, so they follow the law of its
    train and test samples; class-balanced up to the last class (n rounded up to a multiple of 10, cut)."""
    if n < 1:
        raise DataError(f"{n} fresh MNIST-1D samples: need at least one")
    if seed == 42:
        raise DataError("seed 42 generates MNIST-1D's own samples, not fresh ones")
    raw, y = _mnist1d_raw(10 * -(-n // 10), seed)
    mean, sd = _mnist1d_scale()
    x = ((raw - mean) / sd)[:n, None, :].astype(np.float32)
    return x, y[:n].astype(np.int64)


@lru_cache(maxsize=2)
def mnist1d(num_samples: int = 5000, seed: int = 42) -> Source:
    """MNIST-1D, generated in memory (no download, no file): `make_dataset`'s samples (`_mnist1d_raw`),
    normalised to mean 0 and sd 1 over all of them and cut 80/20 into train and test, as it does."""
    raw, y = _mnist1d_raw(num_samples, seed)
    mean, sd = float(raw.mean()), float(raw.std())
    _SCALE[(num_samples, seed)] = (mean, sd)
    x = ((raw - mean) / sd)[:, None, :].astype(np.float32)
    y = y.astype(np.int64)
    cut = int(len(y) * 0.8)
    return Source(x[:cut], y[:cut], x[cut:], y[cut:])


MNIST1D_POOL, MNIST1D_POOL_SEED = 20_000, 20261126  # what a run that draws its data draws MNIST-1D samples from
DRAW_SPLIT, DRAW_FRACTION, DRAW_NODES = 1, 2, 3  # the streams of a run's draw: train/test, data fraction, node split


def derive_seed(*parts: int) -> int:
    """A 31-bit seed from integers (numpy's SeedSequence: well mixed, stable across versions): a run's streams
    (its initialisation and batch order, depl.train.engine.federation; its draw of the data and that draw's streams)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0] & 0x7FFFFFFF)


@lru_cache(maxsize=1)
def mnist1d_pool() -> tuple[np.ndarray, np.ndarray]:
    """MNIST1D_POOL samples of MNIST-1D's generator at its own seed, normalised as the canonical dataset.

    Generating 5,000 samples takes the generator 1.5–2.5 s (one Python call per sample), longer than a
    small run trains; so a run draws its samples from this pool (generated once per machine: `_mnist1d_raw`)
    rather than from the generator itself: the runs are independent given the pool, which is what a
    certificate counts."""
    raw, y = _mnist1d_raw(MNIST1D_POOL, MNIST1D_POOL_SEED)
    mean, sd = _mnist1d_scale()
    return ((raw - mean) / sd)[:, None, :].astype(np.float32), y.astype(np.int64)


def mnist1d_drawn(draw: int) -> Source:
    """A run's own MNIST-1D: as many train and test samples as the canonical dataset, drawn without
    replacement from `mnist1d_pool` (none of them the canonical dataset's, nor the fresh validation samples')."""
    x, y = mnist1d_pool()
    canon = mnist1d()
    n_train, n_test = len(canon.y_train), len(canon.y_test)
    idx = np.random.default_rng(derive_seed(draw, DRAW_SPLIT)).choice(len(y), n_train + n_test, replace=False)
    tr, te = idx[:n_train], idx[n_train:]
    return Source(x[tr], y[tr], x[te], y[te], canon.n_classes)


def resplit(src: Source, draw: int) -> Source:
    """A run's own train/test split of a source's samples: the same sizes, drawn anew (`draw`)."""
    x = np.concatenate([src.x_train, src.x_test])
    y = np.concatenate([src.y_train, src.y_test])
    order = np.random.default_rng(derive_seed(draw, DRAW_SPLIT)).permutation(len(y))
    tr, te = np.sort(order[:len(src.y_train)]), np.sort(order[len(src.y_train):])
    return Source(x[tr], y[tr], x[te], y[te], src.n_classes)


@lru_cache(maxsize=1)
def digits() -> Source:
    """scikit-learn's bundled 8×8 digits (1,797 images), 80/20 split with a fixed permutation."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None, :, :]
    y = d.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(y))
    cut = int(0.8 * len(y))
    tr, te = order[:cut], order[cut:]
    return Source(x[tr], y[tr], x[te], y[te])


_CIFAR_MEAN = np.array([0.4914, 0.4822, 0.4465], dtype=np.float32)[:, None, None]
_CIFAR_STD = np.array([0.2470, 0.2435, 0.2616], dtype=np.float32)[:, None, None]


MAX_BATCH_BYTES = 40 * 2**20  # a CIFAR-10 batch file: 10,000 images of 3,072 bytes, labels, names (about 31 MB)
MAX_PICKLE_OPS = 250_000  # pickle opcodes in one batch (a real one has about 35,000: one per label and name)


class _Refused(pickle.UnpicklingError):
    """What a batch may not hold; the message says so in our words, never with the file's bytes."""


class _StandIn:
    """What a name a batch loads stands for: a callable of ours, or (`numpy.ndarray`) only the class
    argument of `_reconstruct`.  BUILD may not set anything on it (it would outlive this batch)."""

    __slots__ = ("call",)

    def __init__(self, call=None):
        self.call = call

    def __call__(self, *args):
        if self.call is None:
            raise _Refused("numpy.ndarray called directly, not through numpy's array reconstruction")
        return self.call(*args)

    def __setstate__(self, state):
        raise _Refused("a state given to numpy's reconstruction functions themselves")


_ArrayType = _StandIn()


class _Dtype:
    """A numpy dtype as a batch pickles it (`dtype(code, align, copy)`, then its byte order by BUILD):
    only plain booleans, integers and floats, never objects, records or subarrays."""

    __slots__ = ("code", "order")
    CODE = re.compile(r"b1|[iu][1248]|f[248]")

    def __init__(self, code, align=False, copy=False):
        code = code.decode("latin-1") if isinstance(code, bytes) else code
        if not (isinstance(code, str) and self.CODE.fullmatch(code)):
            raise _Refused("an array type other than booleans, integers or floats")
        self.code, self.order = code, "="

    def __setstate__(self, state):
        if not (isinstance(state, tuple) and len(state) >= 3):
            raise _Refused("a malformed array type")
        order = state[1].decode("latin-1") if isinstance(state[1], bytes) else state[1]
        if order not in ("<", ">", "|", "=") or any(x is not None for x in state[2:5]):  # subarray, names, fields
            raise _Refused("an array type other than booleans, integers or floats")
        self.order = order

    @property
    def numpy(self) -> np.dtype:
        dt = np.dtype(self.code)
        return dt.newbyteorder(self.order) if self.order in "<>" else dt


class _Array:
    """A numpy array as a batch pickles it (`_reconstruct`, then BUILD with its shape, type and bytes, or
    protocol 5's `_frombuffer`): a view of bytes the file holds, so it never costs more than the file."""

    __slots__ = ("value",)

    def __init__(self):
        self.value: np.ndarray | None = None

    def __setstate__(self, state):
        if not (isinstance(state, tuple) and len(state) in (4, 5)):
            raise _Refused("a malformed array")
        shape, dtype, fortran, raw = state[-4:]
        self.value = self.of(raw, dtype, shape, "F" if fortran else "C")

    @staticmethod
    def of(raw, dtype, shape, order) -> np.ndarray:
        if not isinstance(dtype, _Dtype):
            raise _Refused("an array of another type than booleans, integers or floats")
        if not (isinstance(shape, tuple) and all(type(n) is int and n >= 0 for n in shape) and len(shape) <= 32):
            raise _Refused("an array of a malformed shape")
        if not isinstance(raw, (bytes, bytearray)):
            raise _Refused("an array whose data are not bytes")
        dt = dtype.numpy
        count = 1
        for n in shape:
            count *= n
            if count > len(raw):  # no product of the numbers a hostile shape may hold
                break
        if count * dt.itemsize != len(raw):  # the shape is checked against the bytes there, before any array
            raise _Refused("an array whose shape does not match its data")
        if order not in ("C", "F", b"C", b"F"):
            raise _Refused("an array of a malformed memory order")
        return np.frombuffer(raw, dtype=dt).reshape(shape, order="F" if order in ("F", b"F") else "C")


def _reconstruct(cls, shape, typecode) -> _Array:
    if cls is not _ArrayType:
        raise _Refused("an array of a class other than numpy.ndarray")
    return _Array()  # its shape, type and data come by BUILD (`_Array.__setstate__`)


def _frombuffer(buf, dtype, shape, order) -> _Array:
    arr = _Array()
    arr.value = _Array.of(buf, dtype, shape, order)
    return arr


def _scalar(dtype, raw) -> int | float | bool:
    if not isinstance(dtype, _Dtype) or not isinstance(raw, bytes):
        raise _Refused("a numpy number other than a boolean, integer or float")
    dt = dtype.numpy
    if len(raw) != dt.itemsize:
        raise _Refused("a numpy number whose data do not match its type")
    return np.frombuffer(raw, dtype=dt)[0].item()


class _ArraysOnly(pickle.Unpickler):
    """Unpickles CIFAR-10's batches and nothing else: a pickle names the callables it runs, and a batch
    needs only numpy's array, dtype and scalar reconstruction (dicts, lists, bytes need none).  Those
    are not numpy's own functions but stand-ins here that build nothing from the pickle but views of the
    bytes it holds: numpy's would allocate whatever shape a tiny pickle asks for."""

    ALLOWED = {**{(m, f): _StandIn(call) for m in ("numpy.core.multiarray", "numpy._core.multiarray")
                  for f, call in (("_reconstruct", _reconstruct), ("scalar", _scalar))},
               **{(m, "_frombuffer"): _StandIn(_frombuffer) for m in ("numpy.core.numeric", "numpy._core.numeric")},
               ("numpy", "ndarray"): _ArrayType, ("numpy", "dtype"): _StandIn(_Dtype)}

    def find_class(self, module: str, name: str):
        try:
            return self.ALLOWED[(module, name)]
        except (KeyError, TypeError):
            raise _Refused("refused to load a callable other than numpy's array reconstruction: a CIFAR-10 batch "
                           "holds only arrays, lists, dicts and bytes") from None


# what a CIFAR-10 batch never holds: sets, class instances, persistent ids, extension codes, out-of-band buffers
_NOT_IN_A_BATCH = frozenset({"EMPTY_SET", "ADDITEMS", "FROZENSET", "INST", "OBJ", "NEWOBJ", "NEWOBJ_EX", "PERSID",
                             "BINPERSID", "EXT1", "EXT2", "EXT4", "NEXT_BUFFER", "READONLY_BUFFER"})
_MEMO_PUTS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})


def _scan_pickle(blob: bytes) -> None:
    """Read `blob`'s opcodes before anything is built from them: a whole pickle, at most MAX_PICKLE_OPS
    opcodes (each builds at most one small object, or one the size of bytes it holds), no memo index
    beyond them (the unpickler sizes its memo to the largest index: 10 bytes could ask for gigabytes),
    nothing a CIFAR-10 batch never holds."""
    try:
        for n, (op, arg, _pos) in enumerate(pickletools.genops(io.BytesIO(blob))):
            if n >= MAX_PICKLE_OPS:
                raise _Refused(f"more than {MAX_PICKLE_OPS:,} pickle opcodes (a CIFAR-10 batch has about 35,000)")
            if op.name in _NOT_IN_A_BATCH:
                raise _Refused("objects other than arrays, lists, dicts and bytes")
            if op.name in _MEMO_PUTS and not (isinstance(arg, int) and 0 <= arg <= n):
                raise _Refused("a memo index beyond its opcodes")
    except (ValueError, OverflowError):  # pickletools' reasons quote the file's bytes: not shown
        raise _Refused("not a pickle, or a damaged or truncated one") from None


def _field(d: dict, key: str):
    for k in (key.encode(), key):  # Python 2's pickles (CIFAR-10's own) have bytes keys
        if k in d:
            return d[k]
    raise _Refused(f"no {key!r} entry")


def _cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A CIFAR-10 batch file's images (uint8, N×3×32×32) and labels (int64), or DataError naming the file
    and why, never quoting it."""
    try:
        blob = read_confined(path, MAX_BATCH_BYTES, "a CIFAR-10 batch (about 31 MB)")
    except FileNotFoundError:
        raise DataError(f"{path}: missing; a CIFAR-10 folder holds data_batch_1 … data_batch_5 and test_batch "
                        "(the 'python version' of CIFAR-10)") from None
    try:
        _scan_pickle(blob)
        try:
            d = _ArraysOnly(io.BytesIO(blob), encoding="bytes").load()
        except _Refused:
            raise
        except Exception:  # pickle's and numpy's reasons may quote the file: not shown
            raise _Refused("its pickle does not unpickle to a batch (damaged, or not CIFAR-10's)") from None
        if not isinstance(d, dict):
            raise _Refused("it holds no dict")
        data, labels = _field(d, "data"), _field(d, "labels")
        if not isinstance(data, _Array) or data.value is None:
            raise _Refused("its 'data' is not a numpy array with its pixels")
        data = data.value
        if data.dtype != np.uint8 or data.size % 3072:
            raise _Refused(f"its 'data' is an array of {data.dtype} of shape {data.shape}, not of uint8 pixels, "
                           "3,072 per image")
        if isinstance(labels, _Array) and labels.value is not None:
            labels = labels.value.tolist() if labels.value.ndim == 1 else None
        if not isinstance(labels, list) or not all(type(v) is int and 0 <= v < 10 for v in labels):
            raise _Refused("its 'labels' are not a list of classes 0 … 9")
    except _Refused as e:
        raise DataError(f"{path}: not a CIFAR-10 python batch: {e}") from None
    data, labels = data.reshape(-1, 3, 32, 32), np.asarray(labels, dtype=np.int64)
    if len(data) != len(labels):
        raise DataError(f"{path}: {len(data)} images but {len(labels)} labels")
    return data, labels


CIFAR_FOLDERS = ("cifar-10-batches-bin", "cifar-10-batches-py")  # the binary and the python version, extracted
CIFAR_RECORD = 3073  # a record of CIFAR-10's binary version: the label byte, then 3 × 32 × 32 pixels


def _cifar_binary(path: Path, roots: list[Path] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A batch of CIFAR-10's binary version (records of a label byte and 3,072 pixels): its images (uint8,
    N×3×32×32) and labels (int64), or DataError naming the file and why."""
    try:
        blob = read_confined(path, MAX_BATCH_BYTES, "a CIFAR-10 binary batch (30,730,000 bytes)", roots)
    except FileNotFoundError:
        raise DataError(f"{path}: missing; CIFAR-10's binary version holds data_batch_1.bin … data_batch_5.bin and "
                        "test_batch.bin") from None
    if blob[:1] == b"\x80" or (blob[-1:] == b"." and blob[:1] in (b"(", b"}", b"]")):
        raise DataError(f"{path}: a pickle (CIFAR-10's python version), not the binary version's 3,073-byte records; "
                        "the python batches are named data_batch_1 … test_batch, without .bin")
    if not blob or len(blob) % CIFAR_RECORD:
        raise DataError(f"{path}: {len(blob):,} bytes, not a whole number of 3,073-byte records (a label byte and "
                        "3,072 pixels each): truncated, or not CIFAR-10's binary version")
    records = np.frombuffer(blob, dtype=np.uint8).reshape(-1, CIFAR_RECORD)
    labels = records[:, 0]
    bad = np.flatnonzero(labels > 9)
    if bad.size:
        raise DataError(f"{path}: record {int(bad[0])} has label {int(labels[bad[0]])}; CIFAR-10's classes are 0..9")
    return records[:, 1:].reshape(-1, 3, 32, 32), labels.astype(np.int64)


def _cifar_folder(root: Path) -> Path:
    """The folder of CIFAR-10's batches under `root`: its cifar-10-batches-bin or -py subfolder where one is there
    (each checked to lie inside the data folder before it is looked into), else `root` itself."""
    for name in CIFAR_FOLDERS:
        sub = root / name
        if os.path.lexists(sub):
            try:
                real = confined_file(sub)
            except FileNotFoundError:  # a broken link
                continue
            if real.is_dir():
                return real
    return root


def _cifar_is_binary(folder: Path) -> bool:
    return any(os.path.lexists(folder / f) for f in ("data_batch_1.bin", "test_batch.bin"))


@lru_cache(maxsize=2)
def cifar10_images(folder: str) -> "Images":
    """CIFAR-10's images as stored (uint8) from a local folder holding its binary version (data_batch_1.bin …
    test_batch.bin) or its python version (data_batch_1 … test_batch, pickles read by `_cifar_batch`), or a folder
    above either; `load_source` confines the folder, `confined_file` every folder and file read under it."""
    root = _cifar_folder(Path(folder).expanduser())
    if not root.is_dir():
        raise DataError(f"{folder}: no such folder (CIFAR-10 is never downloaded; point `path` or --data at its "
                        "extracted binary version, cifar-10-batches-bin, or python version, cifar-10-batches-py)")
    if _cifar_is_binary(root):
        parts = [_cifar_binary(root / f"data_batch_{i}.bin") for i in range(1, 6)]
        xt, yt = _cifar_binary(root / "test_batch.bin")
    else:
        parts = [_cifar_batch(root / f"data_batch_{i}") for i in range(1, 6)]
        xt, yt = _cifar_batch(root / "test_batch")
    return Images(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), xt, yt,
                  tuple(_CIFAR_MEAN.ravel().tolist()), tuple(_CIFAR_STD.ravel().tolist()))


@lru_cache(maxsize=2)
def cifar10(folder: str) -> Source:
    """CIFAR-10 from a local folder (`cifar10_images`), normalised with its channel means and sds."""
    return cifar10_images(folder).source()


@dataclass(frozen=True)
class Images:
    """A file source's images as stored (uint8, N×C×H×W) and labels (int64), and the per-channel mean and sd
    (of pixels scaled to [0, 1]) that make them a network's inputs."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def inputs(self, x: np.ndarray) -> np.ndarray:
        mean = np.asarray(self.mean, dtype=np.float32)[:, None, None]
        std = np.asarray(self.std, dtype=np.float32)[:, None, None]
        return ((x.astype(np.float32) / np.float32(255.0)) - mean) / std

    def source(self) -> Source:
        return Source(self.inputs(self.x_train), self.y_train, self.inputs(self.x_test), self.y_test)

    def take(self, train: np.ndarray, test: np.ndarray) -> Source:
        """The samples at `train` and `test`, positions in the training images followed by the test images."""
        def pick(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            idx = np.sort(idx)
            cut = np.searchsorted(idx, len(self.y_train))
            a, b = idx[:cut], idx[cut:] - len(self.y_train)
            return (self.inputs(np.concatenate([self.x_train[a], self.x_test[b]])),
                    np.concatenate([self.y_train[a], self.y_test[b]]))

        (xa, ya), (xb, yb) = pick(train), pick(test)
        return Source(xa, ya, xb, yb)


# ---- MNIST-format idx files: Fashion-MNIST -----------------------------------------------------------------------

# Fashion-MNIST (Zalando Research, MIT licence): 60,000 training and 10,000 test images, 28×28 grey, 10 classes, in
# four MNIST-format idx files, gzipped or not; Debian and Ubuntu install them with `apt-get install
# dataset-fashion-mnist`.  Never downloaded: read from that folder, from --data DIR / $DEPL_DATA, or a dataset's `path`.
FASHION = "fashion-mnist"
IDX_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
             "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
IDX_MAGIC = {"images": 2051, "labels": 2049}  # unsigned bytes in 3 dimensions (N, rows, columns) / in 1 (N,)
MAX_IDX_BYTES = 64 * 2**20  # an idx file, uncompressed (Fashion-MNIST's training images: 47,040,016 bytes)
_FASHION_MEAN, _FASHION_STD = 0.2860, 0.3530  # Fashion-MNIST's training pixels (scaled to [0, 1]): mean and sd
SYSTEM_FOLDERS = {FASHION: Path("/usr/share/datasets/fashion-mnist")}  # where a package of the system installs it
INSTALL = {FASHION: "apt-get install dataset-fashion-mnist"}


def _gunzip(path: Path, blob: bytes, limit: int) -> bytes:
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(blob, limit + 1)
    except zlib.error:
        raise DataError(f"{path}: a damaged gzip file (it does not decompress)") from None
    if len(out) > limit:
        raise DataError(f"{path}: decompresses to more than an idx file of images holds (at most {limit:,} bytes)")
    if not d.eof:
        raise DataError(f"{path}: a truncated gzip file (it ends before its data does)")
    return out


def _idx_blob(folder: Path, name: str, roots: list[Path] | None) -> tuple[Path, bytes]:
    """The bytes of idx file `name` in `folder` (NAME.gz, decompressed, or NAME), and which file they came from."""
    for path in (folder / f"{name}.gz", folder / name):
        if os.path.lexists(path):
            blob = read_confined(path, MAX_IDX_BYTES, "an idx file", roots)
            if blob[:2] == b"\x1f\x8b":
                return path, _gunzip(path, blob, MAX_IDX_BYTES)
            if path.suffix == ".gz":
                raise DataError(f"{path}: not a gzip file (it does not start as one)")
            return path, blob
    names = ", ".join(n for pair in IDX_FILES.values() for n in pair)
    raise DataError(f"{folder / name}(.gz): missing; an MNIST-format folder holds {names} (each gzipped or not)")


def _idx_array(path: Path, blob: bytes, kind: str) -> np.ndarray:
    """An idx file's array (uint8) after checking its magic number and that its size is what its header says."""
    dims = 3 if kind == "images" else 1
    magic, header = IDX_MAGIC[kind], 4 * (1 + dims)
    if len(blob) < header:
        raise DataError(f"{path}: {len(blob)} bytes, shorter than the header of an idx file of {kind} ({header} bytes)")
    head = np.frombuffer(blob, dtype=">u4", count=1 + dims)
    if int(head[0]) != magic:
        raise DataError(f"{path}: magic number {int(head[0])}, not {magic} (an idx file of {kind}: unsigned bytes in "
                        f"{dims} dimension{'s' if dims > 1 else ''})")
    shape = tuple(int(v) for v in head[1:])
    need = math.prod(shape)
    got = len(blob) - header
    if got != need:
        raise DataError(f"{path}: its header says {' × '.join(f'{v:,}' for v in shape)} {kind} ({need:,} bytes) but "
                        f"{got:,} bytes follow it ({'truncated' if got < need else 'too many'})")
    if kind == "images" and not (shape[1] == shape[2] >= 1):
        raise DataError(f"{path}: images of {shape[1]} × {shape[2]} pixels; square ones are expected")
    return np.frombuffer(blob, dtype=np.uint8, offset=header).reshape(shape)


def _idx_split(folder: Path, which: str, roots: list[Path] | None) -> tuple[np.ndarray, np.ndarray]:
    (ipath, iblob), (lpath, lblob) = (_idx_blob(folder, n, roots) for n in IDX_FILES[which])
    x, y = _idx_array(ipath, iblob, "images"), _idx_array(lpath, lblob, "labels")
    bad = np.flatnonzero(y > 9)
    if bad.size:
        raise DataError(f"{lpath}: label {int(y[bad[0]])} at position {int(bad[0])}; the classes are 0..9")
    if len(x) != len(y):
        raise DataError(f"{lpath}: {len(y):,} labels for the {len(x):,} images of {ipath.name}")
    return x[:, None], y.astype(np.int64)


@lru_cache(maxsize=1)
def fashion_images(folder: str, system: bool = False) -> Images:
    """Fashion-MNIST's images as stored (uint8, N×1×28×28) from a folder of its four idx files (`system`: a folder of
    SYSTEM_FOLDERS, read only inside itself; else inside the data folders)."""
    root = Path(folder)
    roots = [root.resolve()] if system else None
    if not root.is_dir():
        raise DataError(f"{folder}: no such folder (Fashion-MNIST is never downloaded: `{INSTALL[FASHION]}`, or "
                        "--data DIR, a folder holding its four idx files)")
    xa, ya = _idx_split(root, "train", roots)
    xb, yb = _idx_split(root, "test", roots)
    if xa.shape[1:] != xb.shape[1:]:
        raise DataError(f"{root}: training images of {xa.shape[2]} × {xa.shape[3]} pixels but test images of "
                        f"{xb.shape[2]} × {xb.shape[3]}")
    return Images(xa, ya, xb, yb, (_FASHION_MEAN,), (_FASHION_STD,))


@lru_cache(maxsize=1)
def fashion_mnist(folder: str, system: bool = False) -> Source:
    return fashion_images(folder, system).source()


def _holds(source: str, folder: Path) -> bool:
    if source == FASHION:
        first = IDX_FILES["train"][0]
        return any(os.path.lexists(folder / f) for f in (f"{first}.gz", first))
    return any(os.path.lexists(folder / f) for f in ("data_batch_1.bin", "data_batch_1"))


def source_folder(source: str, path: str | None) -> tuple[str, bool]:
    """Where a file source (FILE_SOURCES) is read from: the dataset's `path` (confined to the data folders), else
    the first of the data folders given by --data DIR / $DEPL_DATA that holds it (itself, or its subfolder named
    after the source), else the folder a system package installs it in (SYSTEM_FOLDERS).  Returns the folder and
    whether it is a system folder (read inside itself only); DataError saying where it looked otherwise."""
    if path:
        return str(confined(path)), False
    names = {FASHION: (FASHION,), "cifar10": CIFAR_FOLDERS}[source]
    looked: list[str] = []
    given = [x for x in os.environ.get(DATA_ENV, "").split(os.pathsep) if x.strip()]
    for root in (data_roots() if given else []):
        for folder in [root / n for n in names] + [root]:
            looked.append(str(folder))
            if folder.is_dir() and _holds(source, folder):
                return str(folder), False
    system = SYSTEM_FOLDERS.get(source)
    if system is not None:
        looked.append(str(system))
        if system.is_dir() and _holds(source, system):
            return str(system), True
    where = f" (looked in {', '.join(looked)})" if looked else f" (${DATA_ENV} is not set)"
    if source == FASHION:
        raise DataError(f"its idx files are not on this machine{where}; Fashion-MNIST is never downloaded: "
                        f"install it (`{INSTALL[FASHION]}`, Debian/Ubuntu) or give --data DIR, a folder holding "
                        "train-images-idx3-ubyte.gz and its three other idx files")
    raise DataError(f"no CIFAR-10 batches{where}; CIFAR-10 is never downloaded: give --data DIR, a folder "
                    "holding its extracted binary version (cifar-10-batches-bin) or python version "
                    "(cifar-10-batches-py), or the dataset a `path`")


def file_images(source: str, path: str | None) -> Images:
    """A file source's images as stored (`source_folder` says where from)."""
    folder, system = source_folder(source, path)
    return fashion_images(folder, system) if source == FASHION else cifar10_images(folder)


def load_source(source: str, path: str | None = None, code_dir: str | None = None,
                draw: int | None = None, seed: int | None = None, loss: str = "cross_entropy",
                subset: int | None = None) -> Source:
    """A source's data: its own fixed split, or (`draw`) run `seed`'s own draw of it (`drawn`); its labels as `loss`
    reads them (`source.fit_targets`: the built-in sources hold class labels, for a classification loss).
    `subset`: `subset` training samples and a test set in the source's proportion (`_subset`), drawn from all of its
    samples by the run's draw (a fixed draw without one)."""
    if targets_of(loss) != CLASSES and ":" not in source:
        raise DataError(f"{source!r} holds class labels; [training] loss = {loss!r} trains on real-valued targets "
                        "(your own source, MODULE:FUNCTION, gives them; see docs/tutorial-own-model.md)")
    if subset is not None:
        return _subset(source, path, code_dir, draw, seed, loss, int(subset))
    if draw is not None:
        return _drawn(source, path, code_dir, int(draw), seed, loss)
    if ":" in source:  # MODULE:FUNCTION, your own data (depl.train.task.custom)
        return own(source, code_dir, loss=loss)
    if source == "mnist1d":
        return mnist1d()
    if source == "digits":
        return digits()
    if source == "cifar10":  # the folder checked on every call, not only on the first (cached) one
        return cifar10(source_folder(source, path)[0])
    if source == FASHION:
        return fashion_mnist(*source_folder(source, path))
    raise DataError(f"unknown data source {source!r} (known: {', '.join(SOURCES)}, or MODULE:FUNCTION)")


SUBSET_SEED = 20261129  # the draw of a subset of data kept fixed for every run (data_draw = "fixed")


def subset_sizes(n_train: int, n_test: int, subset: int) -> tuple[int, int]:
    """The training and test samples of a subset of `subset` training samples of a source of n_train + n_test:
    the test set in the source's proportion (at least one sample)."""
    test = max(1, int(round(subset * n_test / n_train)))
    if subset < 1 or subset + test > n_train + n_test:
        raise DataError(f"data_subset = {subset}: the source holds {n_train + n_test:,} samples, fewer than "
                        f"{subset:,} to train on and {test:,} to test on")
    return subset, test


def _subset(source: str, path: str | None, code_dir: str | None, draw: int | None, seed: int | None, loss: str,
            subset: int) -> Source:
    """`subset` training samples and their test samples (`subset_sizes`) drawn without replacement from all the
    source's samples, train and test (a file source's as stored: only the drawn ones become float inputs)."""
    rng = np.random.default_rng(derive_seed(SUBSET_SEED if draw is None else draw, DRAW_SPLIT))
    if source in FILE_SOURCES:
        images = file_images(source, path)
        n_train, n_test = subset_sizes(len(images.y_train), len(images.y_test), subset)
        idx = rng.choice(len(images.y_train) + len(images.y_test), n_train + n_test, replace=False)
        return images.take(idx[:n_train], idx[n_train:])
    src = load_source(source, path, code_dir, draw, seed, loss)  # the run's own draw, where the source has one
    n_train, n_test = subset_sizes(len(src.y_train), len(src.y_test), subset)
    x = np.concatenate([src.x_train, src.x_test])
    y = np.concatenate([src.y_train, src.y_test])
    idx = rng.choice(len(y), n_train + n_test, replace=False)
    tr, te = np.sort(idx[:n_train]), np.sort(idx[n_train:])
    return Source(x[tr], y[tr], x[te], y[te], src.n_classes, src.given_dtypes)


def _drawn(source: str, path: str | None, code_dir: str | None, draw: int, seed: int | None = None,
           loss: str = "cross_entropy") -> Source:
    """Run `draw`'s data: MNIST-1D samples of the generator's pool; your source's own draw where its factory
    takes `seed` (checked: `checked_draw`); else the source's samples split anew into train and test (the same
    sizes)."""
    if source == "mnist1d":
        return mnist1d_drawn(draw)
    if ":" in source:
        if takes_seed(source, code_dir):
            base = load_source(source, path, code_dir, loss=loss)  # what the networks were built and checked on
            try:
                return checked_draw(own(source, code_dir, seed=draw, loss=loss), base)
            except DataError as e:
                raise DrawError(source, seed, draw, str(e)) from None
    return resplit(load_source(source, path, code_dir, loss=loss), draw)  # once per run: its data is cached by its spec


class DrawError(DataError):
    """A run's own draw of your data that cannot be used: the message names the factory, the run's seed and why;
    `seed` is that seed (None where the draw was asked for without one)."""

    def __init__(self, source: str, seed: int | None, draw: int, why: str):
        who = f"seed {seed}" if seed is not None else f"the draw seed={draw}"
        called = f" (called as {source.partition(':')[2]}(seed={draw}), the seed's own draw)" if seed is not None else ""
        super().__init__(f"your data factory {source} fails for {who}{called}: {why}")
        self.seed, self.source, self.draw, self.why = seed, source, draw, why

    def __reduce__(self):  # crosses a process boundary (a worker, a Ray task) as itself
        return DrawError, (self.source, self.seed, self.draw, self.why)


def checked_draw(got: Source, base: Source) -> Source:
    """`got`, a run's own draw of your data, if the networks built on `base` (your factory's data as called
    without a seed: seed 0's where `seed` has no default) can train on it: the same input shape per sample, the
    dtypes your factory gave `base` in, and labels among the networks' classes. (custom.py has checked that it is
    a pair of finite inputs and whole labels ≥ 0.) DataError saying what differs otherwise."""
    for which, x in (("train", got.x_train), ("test", got.x_test)):
        if x.shape[1:] != base.x_train.shape[1:]:
            raise DataError(f"its {which} inputs have shape {tuple(x.shape[1:])} per sample, not "
                            f"{tuple(base.x_train.shape[1:])} as the data the networks were built on")
    if base.given_dtypes is not None and got.given_dtypes != base.given_dtypes:
        (xa, ya), (xb, yb) = got.given_dtypes, base.given_dtypes
        raise DataError(f"it gives {xa} inputs and {ya} labels, not {xb} and {yb} as the data the networks were "
                        "built on")
    for which, y in (("train", got.y_train), ("test", got.y_test)):
        if y.dtype.kind not in "iu":  # real-valued targets: no classes to stay among
            continue
        top = int(y.max())
        if top >= base.n_classes:
            raise DataError(f"its {which} labels include {top}; the networks output {base.n_classes} classes "
                            f"(labels 0..{base.n_classes - 1}), as many as the data they were built on has")
    return got


CHECK_AHEAD_SECONDS = 10.0  # what checking every seed's draw of your data before the first epoch may cost


def check_draws(specs, budget: float | None = None) -> int:
    """Every seed's own draw of your data checked before any of them trains, where that is cheap: `specs`
    [(DataSpec, seeds)]; DrawError (naming the seed) at the first draw that cannot be used.  Returns how many
    seeds' draws were checked (0: none here, each seed's is checked where it is drawn, when it starts).

    Only your factory that takes `seed` can fail for one seed and not another (a built-in draw, or a new split
    of your fixed data, is the checked data cut anew).  Its draws are checked ahead if the first one, timed, says
    that all of them take at most `budget` seconds [default: CHECK_AHEAD_SECONDS]: a draw that costs more (a
    factory that reads files or generates data per seed) would hold the first epoch back by minutes for a few
    thousand seeds, and every draw is made again when its seed trains (only the last few are cached) — so then
    each seed's draw is checked where it is drawn (`_drawn`), and a failure stops the command at that seed,
    with the seeds trained before it in the store (a rerun resumes them).  The first seed's draw is made twice
    and must be the same data (`custom.check_repeatable`: a factory that draws from a global random generator
    gives every process its own)."""
    import time

    todo: dict[tuple, tuple[DataSpec, dict[int, None]]] = {}   # one factory's draws once, whatever the fractions
    for spec, seeds in specs:
        if spec.draws == "run" and ":" in spec.source and seeds and takes_seed(spec.source, spec.code_dir):
            todo.setdefault((spec.source, spec.path, spec.code_dir), (spec, {}))[1].update(dict.fromkeys(seeds))
    budget = CHECK_AHEAD_SECONDS if budget is None else budget
    checked = 0
    for spec, ordered in todo.values():
        seeds = list(ordered)
        t0 = time.perf_counter()
        first = spec.seeded(seeds[0])
        first.load()
        took = time.perf_counter() - t0
        try:   # the first seed's draw made again: the same data (once per process)
            check_repeatable(spec.source, spec.code_dir, first.draw, spec.loss)
        except DataError as e:
            raise DrawError(spec.source, first.seed, first.draw, str(e)) from None
        if took * len(seeds) > budget:
            continue
        for s in seeds[1:]:
            spec.seeded(s).load()
        checked += len(seeds)
    return checked


@dataclass(frozen=True)
class DataSpec:
    """The real data behind a plan: one source and the slices of it the plan selected."""

    source: str
    shares: tuple[tuple[float, float], ...]
    path: str | None = None
    fraction: float = 1.0  # of the selected samples (the profiler's data fractions)
    code_dir: str | None = None  # where a MODULE:FUNCTION source is imported from first
    alpha: float | None = None  # [training] dirichlet_alpha: how the data is split over a cluster's nodes
    validation: float = 0.0  # the validation split's size, as a share of the selected samples (`validation`)
    split: str = "carved"  # where it comes from: "carved" out of the selected samples, or "fresh" samples (SPLITS)
    draws: str = "fixed"  # [training] data_draw (DRAWS): "run" gives each run (seed) its own draw (`seeded`)
    draw: int | None = None  # this run's draw (None: the source's own data); a function of the seed, never stored
    loss: str = "cross_entropy"  # [training] loss: the labels as it reads them (class indices, or real values)
    seed: int | None = field(default=None, compare=False)  # the run whose draw it is (named when the draw fails)
    subset: int | None = None  # [training] data_subset: the training samples drawn from the source (`_subset`)

    def load(self) -> Source:
        return load_source(self.source, self.path, self.code_dir, self.draw, self.seed, self.loss, self.subset)

    def seeded(self, seed: int) -> "DataSpec":
        """The data run `seed` trains and is tested on: its own draw where runs draw their data, else this."""
        if self.draws not in DRAWS:
            raise DataError(f"data_draw {self.draws!r}: expected one of {', '.join(DRAWS)}")
        return self if self.draws == "fixed" else replace(self, draw=derive_seed(seed, 0), seed=int(seed))

    def stream_seed(self, stream: int, fixed: int = PARTITION_SEED) -> int:
        """The seed of one random choice on this data (a fraction, a node split): `fixed`, or this run's draw's."""
        return fixed if self.draw is None else derive_seed(self.draw, stream)

    def to_json(self) -> dict:
        d = {"source": self.source, "shares": [list(s) for s in self.shares], "path": self.path,
             "fraction": self.fraction}
        if self.code_dir is not None:  # only then: built-in runs keep their identity
            d["code_dir"] = self.code_dir
        if self.alpha is not None:  # likewise
            d["alpha"] = self.alpha
        if self.validation:  # likewise: only adaptive runs hold a validation split out
            d["validation"] = self.validation
            if self.split != "carved":  # likewise: runs with a carved split (all before fresh ones) keep theirs
                d["split"] = self.split
        if self.draws != "fixed":  # likewise: runs on fixed data (all before drawn ones) keep their identity
            d["draws"] = self.draws
        if self.loss != "cross_entropy":  # likewise: the labels of a classification are read as they always were
            d["loss"] = self.loss
        if self.subset is not None:  # likewise: runs on all of a source's samples keep their identity
            d["subset"] = self.subset
        return d

    @classmethod
    def from_json(cls, d: dict) -> "DataSpec":
        return cls(d["source"], tuple((float(a), float(b)) for a, b in d["shares"]), d.get("path"),
                   float(d.get("fraction", 1.0)), d.get("code_dir"), d.get("alpha"), float(d.get("validation", 0.0)),
                   str(d.get("split", "carved")), str(d.get("draws", "fixed")), None,
                   str(d.get("loss", "cross_entropy")), subset=None if d.get("subset") is None else int(d["subset"]))


def data_spec(scenario, dataset_names: list[str], fraction: float = 1.0) -> DataSpec:
    """The real data of a scenario's selected datasets (they must share one source)."""
    by_name = {d.name: d for d in scenario.datasets}
    chosen = [by_name[n] for n in dataset_names]
    missing = [d.name for d in chosen if d.source is None]
    if missing:
        raise DataError(f"dataset(s) {missing} of scenario {scenario.name!r} have no `source`: "
                        f"real training needs one of {', '.join(SOURCES)}, or your own MODULE:FUNCTION")
    sources = {(d.source, d.path) for d in chosen}
    if len(sources) != 1:
        raise DataError(f"the selected datasets {dataset_names} come from several sources {sorted(map(str, sources))}; "
                        "one run trains on one source (one input shape, one test set)")
    source, path = sources.pop()
    i = next(i for i, d in enumerate(scenario.datasets) if d.name == chosen[0].name)
    subset = scenario.training.data_subset
    if path is not None:  # refused before anything is read
        try:
            confined(path)
        except DataError as e:
            raise DataError(f"scenario {scenario.name!r}: datasets[{i}].{e}") from None
    if source in FILE_SOURCES:  # read now (then cached), so a bad file is told with the field that led to it
        field_ = f"path = {path!r}" if path is not None else f"source = {source!r}"
        try:
            images = load_source(source, path) if subset is None else file_images(source, path)
        except DataError as e:
            raise DataError(f"scenario {scenario.name!r}: datasets[{i}].{field_}: {e}") from None
        if subset is not None:
            try:
                subset_sizes(len(images.y_train), len(images.y_test), subset)
            except DataError as e:
                raise DataError(f"scenario {scenario.name!r}: [training] {e}") from None
    code_dir = None
    loss = scenario.training.loss
    if ":" in source:  # your own data: load it now, so a bad factory stops the command before any training
        code_dir = scenario.code_dir

        try:
            load_source(source, path, code_dir, loss=loss)
            check_repeatable(source, code_dir, loss=loss)   # called again: the same data (once per process)
        except CodeRefused:  # about code_dir, not this source: the caller names the file
            raise
        except DataError as e:
            i = next(i for i, d in enumerate(scenario.datasets) if d.name == chosen[0].name)
            raise DataError(f"scenario {scenario.name!r}: datasets[{i}].source = {source!r}: {e}") from None
    elif targets_of(loss) != CLASSES:
        i = next(i for i, d in enumerate(scenario.datasets) if d.name == chosen[0].name)
        raise DataError(f"scenario {scenario.name!r}: datasets[{i}].source = {source!r} holds class labels; "
                        f"[training] loss = {loss!r} trains on real-valued targets (your own source, MODULE:FUNCTION, "
                        "gives them; see docs/tutorial-own-model.md)")
    if subset is not None and source not in FILE_SOURCES:
        try:
            load_source(source, path, code_dir, loss=loss, subset=subset)
        except DataError as e:
            raise DataError(f"scenario {scenario.name!r}: [training] {e}") from None
    return DataSpec(source, tuple(tuple(d.share) for d in chosen), path, fraction, code_dir,
                    scenario.training.dirichlet_alpha, draws=scenario.training.data_draw, loss=loss, subset=subset)


MAX_CARVED_SHARE, MAX_FRESH_SHARE = 0.5, 4.0  # a carved split leaves half to train on; fresh ones cost forward passes
VALIDATION_SEED = 20261123  # the validation split is a property of the data selected, not of a run's seed
SPLITS = ("carved", "fresh")
FRESH_SOURCES = ("mnist1d",)  # the sources that can generate samples they do not hold


def split_kind(source: str) -> str:
    """The validation split a source gives: "fresh" where it can generate more samples of its own law
    (MNIST-1D: `mnist1d_fresh`), else "carved" out of the plan's selected samples (less training data)."""
    return "fresh" if source in FRESH_SOURCES else "carved"


def select(spec: DataSpec) -> tuple[np.ndarray, np.ndarray]:
    """The selected training samples: the shares concatenated, the fraction kept, a carved validation split left out."""
    x, y = _selected(spec)
    if spec.validation and _split(spec) == "carved":
        keep = np.ones(len(y), bool)
        keep[validation_indices(len(y), spec.validation)] = False
        return x[keep], y[keep]
    return x, y


def validation(spec: DataSpec) -> tuple[np.ndarray, np.ndarray]:
    """The validation split: round(`spec.validation` × the selected samples) samples, never trained on,
    apart from the test set (the guarantee's own); the same for every seed and every resumed run.

    "fresh" (MNIST-1D): new samples of the source's generator (`mnist1d_fresh`, its own fixed seed),
    so every selected sample is trained on.  "carved" (a source that cannot give more: scikit-learn's
    digits, CIFAR-10, your own): a fixed permutation (VALIDATION_SEED) of the selected samples, which
    `select` then leaves out."""
    if not spec.validation:
        raise DataError("this data has no validation split (DataSpec.validation = 0)")
    x, y = _selected(spec)
    if _split(spec) == "fresh":  # any size: the generator gives as many as asked
        if not 0.0 < spec.validation <= MAX_FRESH_SHARE:
            raise DataError(f"validation share {spec.validation}: a fresh split must lie in (0, {MAX_FRESH_SHARE:g}] "
                            "(times the selected samples)")
        return mnist1d_fresh(max(1, int(round(spec.validation * len(y)))))
    if not 0.0 < spec.validation <= MAX_CARVED_SHARE:
        raise DataError(f"validation share {spec.validation}: a carved split holds out more than 0 and at most "
                        f"{MAX_CARVED_SHARE:g} of the selected samples ({spec.source!r} cannot generate more; only "
                        "mnist1d's split is fresh)")
    idx = validation_indices(len(y), spec.validation)
    return x[idx], y[idx]


def _split(spec: DataSpec) -> str:
    if spec.split not in SPLITS:
        raise DataError(f"validation split {spec.split!r}: expected one of {', '.join(SPLITS)}")
    if spec.split == "fresh" and spec.source not in FRESH_SOURCES:
        raise DataError(f"a fresh validation split needs a source that generates samples ({', '.join(FRESH_SOURCES)}); "
                        f"{spec.source!r} cannot, so its split is carved out of the training samples")
    return spec.split


def validation_indices(n: int, share: float) -> np.ndarray:
    if not 0.0 < share < 1.0:
        raise DataError(f"validation share {share}: must lie strictly between 0 and 1")
    size = max(1, int(round(share * n)))
    if size >= n:
        raise DataError(f"a validation split of {share} leaves no training sample of {n}")
    return np.sort(np.random.default_rng(VALIDATION_SEED).permutation(n)[:size])


def _selected(spec: DataSpec) -> tuple[np.ndarray, np.ndarray]:
    src = spec.load()
    n = len(src.y_train)
    idx = np.concatenate([np.arange(int(round(a * n)), int(round(b * n))) for a, b in spec.shares])
    idx = np.unique(idx)  # overlapping shares hold each sample once
    if spec.fraction < 1.0:
        keep = np.random.default_rng(spec.stream_seed(DRAW_FRACTION)).permutation(len(idx))[: max(1, int(round(spec.fraction * len(idx))))]
        idx = idx[np.sort(keep)]
    return src.x_train[idx], src.y_train[idx]


def node_shares(labels: np.ndarray, nodes: int, iid: bool = True, alpha: float | None = None,
                seed: int = PARTITION_SEED) -> list[np.ndarray]:
    """Indices of the samples each of `nodes` nodes holds; a function of (labels, nodes, iid, alpha, seed).

    IID: a fixed random permutation cut in equal parts.  Non-IID with
    `alpha`: a Dirichlet label partition (`dirichlet_shares`).  Non-IID
    without: samples sorted by label, cut in 2·nodes shards, each node taking
    two shards far apart (McMahan et al.'s pathological split), so a node sees
    few classes.
    """
    n = len(labels)
    if nodes > n:
        raise DataError(f"{nodes} nodes but only {n} training samples")
    rng = np.random.default_rng(seed)
    if iid or nodes == 1:
        return [np.sort(p) for p in np.array_split(rng.permutation(n), nodes)]
    if alpha is not None:
        return dirichlet_shares(labels, nodes, alpha, rng)
    order = np.argsort(labels if labels.ndim == 1 else labels[:, 0], kind="stable")  # targets (n, d): by the first
    shards = np.array_split(order, 2 * nodes)
    return [np.sort(np.concatenate([shards[i], shards[2 * nodes - 1 - i]])) for i in range(nodes)]


MIN_NODE_SAMPLES = 10  # a node must hold at least this many samples (Flower Datasets' default too)
DIRICHLET_TRIES = 10


def dirichlet_shares(labels: np.ndarray, nodes: int, alpha: float, rng: np.random.Generator) -> list[np.ndarray]:
    """The Dirichlet label partition (Hsu et al. 2019, "Measuring the effects of non-identical data
    distribution"): for every class, the shares of its samples the nodes get are drawn from
    Dir(α, …, α); small α gives each node few classes, large α tends to an IID split.

    This is the algorithm of Flower Datasets' `DirichletPartitioner`, written here on numpy because
    flwr-datasets partitions Hugging Face `datasets.Dataset` objects: for one partition of an array we
    already hold it would add `datasets` (pyarrow, huggingface-hub, fsspec, …) to the `train` extra.
    As there, a draw that leaves a node fewer than MIN_NODE_SAMPLES samples is drawn again (bounded);
    unlike its default, there is no self-balancing (which zeroes a node's share of the later classes once
    it holds the average: the split then no longer follows Dir(α) — its own comment says so).
    """
    if not alpha > 0:
        raise DataError(f"dirichlet_alpha = {alpha}: the concentration of a Dirichlet partition must be > 0")
    classes = [np.flatnonzero(labels == c) for c in np.unique(labels)]
    for _ in range(DIRICHLET_TRIES):
        parts: list[list[np.ndarray]] = [[] for _ in range(nodes)]
        for idx in classes:
            idx = rng.permutation(idx)
            cuts = (np.cumsum(rng.dirichlet(np.full(nodes, float(alpha))))[:-1] * len(idx)).astype(int)
            for node, piece in enumerate(np.split(idx, cuts)):
                parts[node].append(piece)
        shares = [np.sort(np.concatenate(p)) for p in parts]
        if min(map(len, shares)) >= MIN_NODE_SAMPLES:
            return shares
    raise DataError(f"a Dirichlet partition with dirichlet_alpha = {alpha} over {nodes} nodes left a node fewer "
                    f"than {MIN_NODE_SAMPLES} of the {len(labels)} samples in {DIRICHLET_TRIES} draws; "
                    "raise dirichlet_alpha or use fewer nodes")


def cache_info() -> str:  # pragma: no cover - debugging aid
    return f"mnist1d {mnist1d.cache_info()}, digits {digits.cache_info()}, cifar10 {cifar10.cache_info()}, pid {os.getpid()}"
