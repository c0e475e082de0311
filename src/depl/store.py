"""The store of real runs: SQLite (stdlib `sqlite3`), chosen by a path or a ``sqlite:///`` URL.

Tables:

* ``runs``: one row per run (a plan executed over seeds, or one profiling
  experiment), with its kind, its specification (the plan, the versions, the
  data, the options) as JSON, and when it was created.  A run started again
  must have the same specification, but for the timings its plan file
  records (`untimed`): a plan made again trains the same run.
* ``epochs``: one row per (run, seed, epoch): the model version and cluster of
  the epoch, the test loss and accuracy after it, the mean training loss, and
  its timing (seconds of wall time, finish time).
* ``checkpoints``: the latest trained weights of every unfinished (run, seed),
  so that a run killed hard resumes at the epoch where it stopped.
* ``decisions``: what the closed loop (`depl run --adaptive`, depl.adaptive)
  decided after an epoch of a (run, seed): the validation loss observed, the
  conditional probabilities of meeting ℓmax with the plan in force and with
  what was kept, the conditional quantile, the action, and as JSON the rest of
  the plan after it, the time and cost spent, the cost saved and a note.
  Written in the epoch's own transaction.
* ``batches``: how the seeds of a run were cut into batches trained together
  (one vectorised stack; a batch of one is the per-seed loop): every seed
  with the first seed of its batch, written before the seed trains, so a
  resumed run stacks its seeds as the first attempt did whatever batching
  its options (or the automatic choice) would make now.
* ``diverged``: the (run, seed)s whose loss became non-finite, with the epoch
  where it did and the losses as text ("nan", "inf"; SQLite stores NaN as
  NULL).  A diverged seed is finished: it is not resumed, its epochs before
  the divergence stay in ``epochs``, and its final loss counts as +inf.
* ``seed_uses``: what a judging command (`depl certify`, `depl validate`,
  `depl coverage`) began a run with — its seeds first..last and its α — so a
  later command knows which seeds judged the plan (depl.ledger); a closed-loop
  validation (`depl validate --adaptive`) records its seeds on the run id of
  the plan's job, as the open loop does, whose run it does not train.

The schema has one version, SQLite's ``user_version`` (`SCHEMA_VERSION`): a store of
any other version was written by another version of depl and is refused, in one line, whether it
is read or written; depl reads and writes no other schema (from the first tagged release on, a
change of schema comes with an explicit migration command; before it, the committed stores were
migrated once, scripts/migrate_stores.py).  A new store is an empty SQLite file: its writer creates
the tables and sets the version.

``epochs.test_accuracy`` is NULL where the run's loss has no accuracy (a
regression: [training] loss = "mse", depl.train.task.losses).

An epoch's row and its checkpoint are written in one transaction: after a
``kill -9`` either both are there or neither, so a restarted run neither loses
an epoch nor counts one twice.

>>> s = Store(":memory:")
>>> s.start_run("r1", "plan", {"epochs": 2})
>>> s.record_epoch("r1", 0, EpochRow(1, "full", "A", 1.9, 0.3, 2.0, 0.01), checkpoint=b"w")
>>> s.done_epochs("r1", 0), s.checkpoint("r1", 0)
(1, (1, b'w'))
"""

from __future__ import annotations

import functools
import json
import math
import sqlite3
import time
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any, Iterator

from .jsonout import alike

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id   TEXT PRIMARY KEY,
    kind     TEXT NOT NULL,
    spec     TEXT NOT NULL,
    created  REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS epochs (
    run_id        TEXT NOT NULL REFERENCES runs(run_id),
    seed          INTEGER NOT NULL,
    epoch         INTEGER NOT NULL,
    model         TEXT NOT NULL,
    cluster       TEXT NOT NULL,
    test_loss     REAL NOT NULL,
    test_accuracy REAL,
    train_loss    REAL NOT NULL,
    seconds       REAL NOT NULL,
    finished      REAL NOT NULL,
    PRIMARY KEY (run_id, seed, epoch)
);
CREATE TABLE IF NOT EXISTS checkpoints (
    run_id  TEXT NOT NULL REFERENCES runs(run_id),
    seed    INTEGER NOT NULL,
    epoch   INTEGER NOT NULL,
    state   BLOB NOT NULL,
    PRIMARY KEY (run_id, seed)
);
CREATE TABLE IF NOT EXISTS diverged (
    run_id      TEXT NOT NULL REFERENCES runs(run_id),
    seed        INTEGER NOT NULL,
    epoch       INTEGER NOT NULL,
    test_loss   TEXT NOT NULL,
    train_loss  TEXT NOT NULL,
    finished    REAL NOT NULL,
    PRIMARY KEY (run_id, seed)
);
CREATE TABLE IF NOT EXISTS decisions (
    run_id    TEXT NOT NULL REFERENCES runs(run_id),
    seed      INTEGER NOT NULL,
    epoch     INTEGER NOT NULL,
    observed  REAL,
    p_plan    REAL,
    p_new     REAL,
    quantile  REAL,
    action    TEXT NOT NULL,
    detail    TEXT NOT NULL,
    finished  REAL NOT NULL,
    PRIMARY KEY (run_id, seed, epoch)
);
CREATE TABLE IF NOT EXISTS batches (
    run_id  TEXT NOT NULL REFERENCES runs(run_id),
    seed    INTEGER NOT NULL,
    batch   INTEGER NOT NULL,
    PRIMARY KEY (run_id, seed)
);
CREATE TABLE IF NOT EXISTS seed_uses (
    run_id   TEXT NOT NULL REFERENCES runs(run_id),
    command  TEXT NOT NULL,
    first    INTEGER NOT NULL,
    last     INTEGER NOT NULL,
    alpha    REAL,
    created  REAL NOT NULL,
    PRIMARY KEY (run_id, command)
);
"""
SCHEMA_VERSION = 4



# what a plan file records of the time it took to make (`depl plan` again, `depl plan --certify` resumed): not
# part of what a run of it trains, so a run's specification is compared without it
PLAN_TIMINGS = (("solve_seconds",), ("info", "certificate", "evidence", "seconds"))
# ... nor where the records of its certificate lie (a certified search's store and kept models, the α ledger): paths,
# read from the plan file's folder (depl.plan.with_paths), that are not what a run of it trains
PLAN_PLACES = (("info", "certificate", "evidence", "store"), ("info", "certificate", "evidence", "models"),
               ("info", "certificate", "evidence", "alpha_ledger"))


def untimed(spec: dict[str, Any]) -> dict[str, Any]:
    """`spec` without its plan's timings and places (PLAN_TIMINGS, PLAN_PLACES): what two specifications of one
    run must share."""
    plan = spec.get("plan") if isinstance(spec, dict) else None
    if not isinstance(plan, dict):
        return spec
    plan = json.loads(json.dumps(plan))
    for *where, key in PLAN_TIMINGS + PLAN_PLACES:
        d = plan
        for k in where:
            d = d.get(k) if isinstance(d, dict) else None
        if isinstance(d, dict):
            d.pop(key, None)
    return {**spec, "plan": plan}


def without_key(value, key: str):
    """`value` (JSON) without any `key` key, at any depth."""
    if isinstance(value, dict):
        return {k: without_key(v, key) for k, v in value.items() if k != key}
    if isinstance(value, list):
        return [without_key(v, key) for v in value]
    return value


def drop_code_dirs(value):
    """`value` (JSON) without any `code_dir` key, at any depth: where a run's code lies is not what it trains."""
    return without_key(value, "code_dir")


def _same_run(spec: dict[str, Any]) -> Any:
    """What two specifications of one run must share: the spec without its plan's timings, the folders its code
    lay in, and the digests of that code (its run id holds them: a run of other code is another run)."""
    return drop_code_dirs(untimed({k: v for k, v in spec.items() if k != "code"}))


class StoreError(ValueError):
    """A store that cannot be used; the message is meant for the user."""


@dataclass(frozen=True)
class EpochRow:
    epoch: int
    model: str
    cluster: str
    test_loss: float
    test_accuracy: float | None  # None: the run's loss has no accuracy (a regression)
    train_loss: float
    seconds: float


def diverges(row: EpochRow) -> bool:
    """A non-finite test or training loss: the seed has diverged (lr too large, say) and is over."""
    return not (math.isfinite(row.test_loss) and math.isfinite(row.train_loss))


def _real(x):
    """A number for SQLite/JSON: NaN and ±inf are stored as NULL (SQLite turns NaN into NULL anyway)."""
    return None if x is None or not math.isfinite(float(x)) else float(x)


def store_path(url: str | Path) -> str:
    """The SQLite file behind a path or a ``sqlite:///path`` URL (``:memory:`` stays)."""
    u = str(url)
    if u.startswith("sqlite:///"):
        u = u[len("sqlite:///"):]
        # sqlite:////abs/path has a 4th slash; sqlite:///rel/path is relative
    elif "://" in u:
        raise StoreError(f"{url}: only SQLite stores are supported (a path or a sqlite:/// URL)")
    if not u:
        raise StoreError("empty store path")
    return u


COLUMNS = {"runs": ["run_id", "kind", "spec", "created"],
           "epochs": ["run_id", "seed", "epoch", "model", "cluster", "test_loss", "test_accuracy", "train_loss",
                      "seconds", "finished"],
           "checkpoints": ["run_id", "seed", "epoch", "state"],
           "diverged": ["run_id", "seed", "epoch", "test_loss", "train_loss", "finished"],
           "decisions": ["run_id", "seed", "epoch", "observed", "p_plan", "p_new", "quantile", "action", "detail",
                         "finished"],
           "batches": ["run_id", "seed", "batch"],
           "seed_uses": ["run_id", "command", "first", "last", "alpha", "created"]}

_NUMBER = ("real", "integer")
_WHOLE = ("integer",)
# (table, the columns that name a row, the typed columns and the SQLite types each may hold)
_TYPED = (
    ("runs", ("run_id",), {"kind": ("text",), "spec": ("text",)}),
    ("epochs", ("run_id", "seed", "epoch"), {"seed": _WHOLE, "epoch": _WHOLE, "model": ("text",), "cluster": ("text",),
                                             "test_loss": _NUMBER, "test_accuracy": (*_NUMBER, "null"), "train_loss": _NUMBER,
                                             "seconds": _NUMBER}),
    ("checkpoints", ("run_id", "seed"), {"seed": _WHOLE, "epoch": _WHOLE}),
    ("diverged", ("run_id", "seed"), {"seed": _WHOLE, "epoch": _WHOLE}),
    ("decisions", ("run_id", "seed", "epoch"), {"seed": _WHOLE, "epoch": _WHOLE, "observed": (*_NUMBER, "null"),
                                                "p_plan": (*_NUMBER, "null"), "p_new": (*_NUMBER, "null"),
                                                "quantile": (*_NUMBER, "null"), "action": ("text",),
                                                "detail": ("text",)}),
    ("batches", ("run_id", "seed"), {"seed": _WHOLE, "batch": _WHOLE}),
    ("seed_uses", ("run_id", "command"), {"command": ("text",), "first": _WHOLE, "last": _WHOLE,
                                          "alpha": (*_NUMBER, "null")}),
)


@functools.cache
def _shape() -> dict[str, list[tuple]]:
    """Every table's columns as `SCHEMA` makes them: (name, type, NOT NULL, place in the primary key)."""
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(SCHEMA)
        return {t: [(r[1], r[2], r[3], r[5]) for r in db.execute(f"PRAGMA table_info({t})")] for t in COLUMNS}
    finally:
        db.close()


def _words(column: tuple) -> str:
    """A column of `_shape` in words: "REAL NOT NULL"."""
    _, kind, notnull, key = column
    return f"{kind}{' NOT NULL' if notnull else ''}{' (key)' if key else ''}"


# One writer per store file: a second `depl run` into the same folder would interleave
# epochs with the first.  flock locks belong to an open file, so the lock is held once per
# process (the Flower back end opens a second connection in its ServerApp thread).
_locks: dict[str, list] = {}


def _lock(path: str) -> None:
    import fcntl

    key = str(Path(path).resolve())
    held = _locks.get(key)
    if held is not None:
        held[1] += 1
        return
    f = open(key + ".lock", "a")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise StoreError(f"{path}: store in use by another depl process (one writer at a time); wait for it "
                         "to finish or give another --store") from None
    _locks[key] = [f, 1]


def _unlock(path: str) -> None:
    key = str(Path(path).resolve())
    held = _locks.get(key)
    if held is None:
        return
    held[1] -= 1
    if held[1] == 0:
        held[0].close()
        del _locks[key]


def drop_inherited_locks() -> None:
    """In a forked child: let go of the parent's store locks without releasing them.

    A forked worker shares its parent's lock files; if it kept them, a parent killed
    with -9 would leave its store locked until every orphaned worker noticed.  Closing
    the child's copy drops only its reference (flock is released when the last one goes).
    """
    for f, _ in _locks.values():
        f.close()
    _locks.clear()


class Store:
    """Runs and their per-epoch trajectories in one SQLite file.

    `readonly`: for commands that only read (``runs show``, ``fit``): no
    write access needed, no lock taken, nothing created.
    """

    def __init__(self, url: str | Path, readonly: bool = False):
        self.path = store_path(url)
        self.readonly = readonly
        self._locked = False
        if self.path != ":memory:":
            parent = Path(self.path).parent
            if not parent.is_dir():
                raise StoreError(f"{url}: the folder {parent} does not exist")
            if readonly and not Path(self.path).is_file():
                raise StoreError(f"{url}: no such store")
        try:
            if readonly:
                self._db = sqlite3.connect(f"file:{Path(self.path).resolve()}?mode=ro", uri=True, timeout=30.0,
                                           isolation_level=None)
            else:
                if self.path != ":memory:":
                    try:
                        _lock(self.path)
                    except PermissionError as e:
                        raise StoreError(f"{url}: cannot write here ({e.strerror})") from None
                    self._locked = True
                self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
                new = self._empty()
                if not new:
                    self._check_version()   # a store of another version is refused before anything is written
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")  # durable across a process kill
                if new:
                    # one transaction: a reader never sees half a schema
                    self._db.executescript(f"BEGIN IMMEDIATE; {SCHEMA}; PRAGMA user_version = {SCHEMA_VERSION}; "
                                           "COMMIT;")
            self._check()
        except sqlite3.DatabaseError as e:
            self._release()
            raise StoreError(f"{url}: not a usable SQLite store ({e})") from None
        except StoreError:
            self._release()
            raise

    def _empty(self) -> bool:
        """A file with no table and no version yet: a new store."""
        return (int(self._db.execute("PRAGMA user_version").fetchone()[0]) == 0
                and self._db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone() is None)

    def _check_version(self) -> None:
        v = int(self._db.execute("PRAGMA user_version").fetchone()[0])
        if v == 0:   # SQLite's default: no depl store says it
            raise StoreError(f"{self.path}: no schema version (SQLite user_version 0): not a depl store, or one "
                             f"written by another version of depl (this one reads schema version {SCHEMA_VERSION} "
                             "only)")
        if v != SCHEMA_VERSION:
            raise StoreError(f"{self.path}: a store of schema version {v}, written by another version of depl (this "
                             f"one reads schema version {SCHEMA_VERSION} only); read it with the depl that wrote it")

    def _check(self) -> None:
        """Schema and integrity, before anything is read or written."""
        if self._empty():
            raise StoreError(f"{self.path}: an empty SQLite file, not a depl store")
        self._check_version()
        for table, cols in COLUMNS.items():
            info = [(r[1], r[2], r[3], r[5]) for r in self._db.execute(f"PRAGMA table_info({table})")]
            have = [r[0] for r in info]
            if have != cols:
                raise StoreError(f"{self.path}: table {table!r} has columns {have}, not depl's {cols}; "
                                 "not a depl store (or one of another version)")
            other = next((c for c, want in zip(info, _shape()[table]) if c != want), None)
            if other is not None:
                raise StoreError(f"{self.path}: column {table}.{other[0]} is {_words(other)}, not "
                                 f"{_words(_shape()[table][have.index(other[0])])} as in depl's schema; a store "
                                 "of another version of depl (or altered)")
        bad = self._db.execute("PRAGMA quick_check").fetchone()[0]
        if bad != "ok":
            raise StoreError(f"{self.path}: the SQLite file is damaged ({bad}); restore it from a copy")
        self._check_values()

    def _check_values(self) -> None:
        """Every recorded number is one: SQLite keeps whatever a column is given (the text 'abc' in a REAL
        column), so an altered store is refused here, naming the table, column, row and value, before any
        command reads a loss.  depl writes finite numbers only (a non-finite loss goes to `diverged`)."""
        for table, key, cols in _TYPED:
            tests = [f"typeof({c}) NOT IN ({', '.join(repr(k) for k in kinds)})"
                     + (f" OR abs({c}) > 1.7976931348623157e308" if "real" in kinds else "") for c, kinds in cols.items()]
            names = list(cols)
            row = self._db.execute(f"SELECT {', '.join(key + tuple(names))}, {', '.join(f'typeof({c})' for c in names)} "
                                   f"FROM {table} WHERE {' OR '.join(f'({x})' for x in tests)} LIMIT 1").fetchone()
            if row is None:
                continue
            values, types = row[len(key):len(key) + len(names)], row[len(key) + len(names):]
            for col, value, kind in zip(names, values, types):
                kinds = cols[col]
                if kind in kinds and not (kind == "real" and not math.isfinite(value)):
                    continue
                where = ", ".join(f"{k.removesuffix('_id')} {v!r}" for k, v in zip(key, row))
                value = value if not isinstance(value, bytes) else f"<{len(value)} bytes>"
                shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
                want = "a whole number" if kinds == _WHOLE else "a finite number" if "real" in kinds else "text"
                raise StoreError(f"{self.path}: {table}.{col} of {where} = {shown}: not {want}; the store was "
                                 "altered")

    def _release(self) -> None:
        if self._locked:
            _unlock(self.path)
            self._locked = False

    def close(self) -> None:
        self._db.close()
        self._release()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- runs ---------------------------------------------------------------- #
    def start_run(self, run_id: str, kind: str, spec: dict[str, Any]) -> None:
        """Register a run, or check that an existing one has the same specification."""
        text = json.dumps(spec, sort_keys=True)
        row = self._db.execute("SELECT kind, spec FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            self._db.execute("INSERT INTO runs VALUES (?, ?, ?, ?)", (run_id, kind, text, time.time()))
        elif row[0] != kind or not alike(_same_run(self._spec(run_id, row[1])), _same_run(json.loads(text))):
            raise StoreError(f"run {run_id!r} already exists in {self.path} with another specification; "
                             "train it into another store (--store, or another --out folder)")

    def _spec(self, run_id: str, text: str) -> dict[str, Any]:
        try:
            spec = json.loads(text)
        except (TypeError, ValueError):
            spec = None
        if not isinstance(spec, dict):
            raise StoreError(f"{self.path}: runs.spec of run {run_id!r} = {str(text)[:60]!r}: not a JSON object; "
                             "the store was altered")
        return spec

    def runs(self, kind: str | None = None) -> list[dict[str, Any]]:
        q = "SELECT run_id, kind, spec, created FROM runs"
        rows = self._db.execute(q + (" WHERE kind = ?" if kind else "") + " ORDER BY created, run_id",
                                (kind,) if kind else ()).fetchall()
        return [{"run_id": r[0], "kind": r[1], "spec": self._spec(r[0], r[2]), "created": r[3]} for r in rows]

    # -- epochs -------------------------------------------------------------- #
    def record_epoch(self, run_id: str, seed: int, row: EpochRow, checkpoint: bytes | None = None,
                     final: bool = False) -> None:
        """Add one epoch of one seed, with its checkpoint, atomically.

        The row's epoch must follow the last recorded one: an epoch is never
        counted twice, and none is skipped.  `final` drops the checkpoint.
        A row whose test or training loss is not finite records the seed as
        diverged at that epoch (and drops its checkpoint): the seed is over.
        """
        self.record_epochs(run_id, [(seed, row, checkpoint, final)])

    def record_epochs(self, run_id: str, items: list[tuple[int, EpochRow, bytes | None, bool]],
                      decisions: list[tuple[int, dict]] = ()) -> None:
        """`record_epoch` for several seeds (seed, row, checkpoint, final) in ONE transaction.

        A batch of seeds trained together checkpoints together: after a kill
        either every seed of the batch has the epoch or none has.  `decisions`:
        (seed, the closed loop's decision after that epoch, `Decision.to_json()`
        plus time_spent, cost_spent), in the same transaction.
        """
        with self._transaction():
            for seed, d in decisions:
                detail = {k: v for k, v in d.items() if k not in ("epoch", "observed", "p_plan", "p_new", "quantile",
                                                                  "action")}
                self._db.execute("INSERT OR REPLACE INTO decisions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                 (run_id, seed, int(d["epoch"]), _real(d["observed"]), _real(d["p_plan"]),
                                  _real(d["p_new"]), _real(d["quantile"]), str(d["action"]),
                                  json.dumps(detail, allow_nan=False, default=_real), time.time()))
            for seed, row, checkpoint, final in items:
                last = self.done_epochs(run_id, seed)
                gone = self.diverged_at(run_id, seed)
                if gone is not None:
                    raise StoreError(f"run {run_id!r} seed {seed}: epoch {row.epoch} recorded after the seed "
                                     f"diverged at epoch {gone}")
                if row.epoch != last + 1:
                    raise StoreError(f"run {run_id!r} seed {seed}: epoch {row.epoch} recorded after epoch {last}")
                if not diverges(row):
                    self._db.execute("INSERT INTO epochs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                     (run_id, seed, *astuple(row), time.time()))
                else:
                    self._db.execute("INSERT INTO diverged VALUES (?, ?, ?, ?, ?, ?)",
                                     (run_id, seed, row.epoch, repr(float(row.test_loss)), repr(float(row.train_loss)),
                                      time.time()))
                if final or diverges(row):
                    self._db.execute("DELETE FROM checkpoints WHERE run_id = ? AND seed = ?", (run_id, seed))
                elif checkpoint is not None:
                    self._db.execute("INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?, ?)",
                                     (run_id, seed, row.epoch, sqlite3.Binary(checkpoint)))

    def decisions(self, run_id: str, seed: int | None = None) -> list[dict[str, Any]]:
        """The closed loop's decisions of a run (of one seed), by seed and epoch."""
        q = ("SELECT seed, epoch, observed, p_plan, p_new, quantile, action, detail FROM decisions WHERE run_id = ?"
             + (" AND seed = ?" if seed is not None else "") + " ORDER BY seed, epoch")
        out = []
        for s, k, obs, pp, pn, qu, action, detail in self._db.execute(q, (run_id,) if seed is None else (run_id, seed)):
            try:
                extra = json.loads(detail)
            except ValueError:
                extra = None
            if not isinstance(extra, dict):
                raise StoreError(f"{self.path}: decisions.detail of run {run_id!r} seed {s} epoch {k}: not a JSON "
                                 "object; the store was altered")
            out.append({"seed": int(s), "epoch": int(k), "observed": obs, "p_plan": pp, "p_new": pn, "quantile": qu,
                        "action": action, **extra})
        return out

    def record_batches(self, run_id: str, batches: dict[int, int]) -> None:
        """Record how seeds are cut into batches: seed → the first seed of its batch (seeds with the same one
        train as one stack).  A seed's batch is recorded once: a seed already recorded keeps its batch."""
        if not batches:
            return
        with self._transaction():
            self._db.executemany("INSERT OR IGNORE INTO batches VALUES (?, ?, ?)",
                                 [(run_id, int(s), int(b)) for s, b in batches.items()])

    def batches(self, run_id: str) -> dict[int, int]:
        """Every seed of the run whose batch is recorded → the first seed of its batch."""
        return {int(s): int(b) for s, b in self._db.execute(
            "SELECT seed, batch FROM batches WHERE run_id = ? ORDER BY seed", (run_id,))}

    def record_use(self, run_id: str, command: str, first: int, last: int, alpha: float | None = None) -> None:
        """What a judging command (`certify`, `validate`, `coverage`) began `run_id` with: its seeds first..last and
        its α (depl.ledger); a later call for the same run and command replaces it (a larger --max-runs)."""
        self._db.execute("INSERT OR REPLACE INTO seed_uses VALUES (?, ?, ?, ?, ?, ?)",
                         (run_id, command, int(first), int(last), None if alpha is None else float(alpha), time.time()))

    def uses(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """The recorded uses of seeds (`record_use`), of one run or all, oldest first."""
        q = "SELECT run_id, command, first, last, alpha FROM seed_uses"
        rows = self._db.execute(q + (" WHERE run_id = ?" if run_id else "") + " ORDER BY created, run_id",
                                (run_id,) if run_id else ()).fetchall()
        return [{"run_id": r[0], "command": r[1], "first": int(r[2]), "last": int(r[3]), "alpha": r[4]} for r in rows]

    def diverged(self, run_id: str) -> dict[int, int]:
        """The seeds of a run that diverged, each with the epoch where its loss became non-finite."""
        return {int(s): int(k) for s, k in self._db.execute(
            "SELECT seed, epoch FROM diverged WHERE run_id = ? ORDER BY seed", (run_id,))}

    def diverged_at(self, run_id: str, seed: int) -> int | None:
        """The epoch where (run, seed) diverged; None if it did not."""
        r = self._db.execute("SELECT epoch FROM diverged WHERE run_id = ? AND seed = ?", (run_id, seed)).fetchone()
        return None if r is None else int(r[0])

    def done_epochs(self, run_id: str, seed: int) -> int:
        """The last epoch recorded for (run, seed); 0 when none."""
        r = self._db.execute("SELECT MAX(epoch) FROM epochs WHERE run_id = ? AND seed = ?", (run_id, seed)).fetchone()
        return int(r[0] or 0)

    def resume_point(self, run_id: str, seed: int) -> tuple[int, bytes] | None:
        """(epochs done, their checkpoint) for a seed to resume, None to start; checked: the recorded
        epochs are 1..done without a gap and the checkpoint is that of epoch `done`."""
        n, lo, hi = self._db.execute("SELECT COUNT(*), MIN(epoch), MAX(epoch) FROM epochs WHERE run_id = ? AND seed = ?",
                                     (run_id, seed)).fetchone()
        if not n:
            return None
        if lo != 1 or hi != n:
            raise StoreError(f"{self.path}: run {run_id!r} seed {seed} has {n} epochs recorded between {lo} and {hi}; "
                             "a gap means the store was altered, it cannot be resumed")
        ck = self.checkpoint(run_id, seed)
        if ck is None or ck[0] != hi:
            raise StoreError(f"{self.path}: run {run_id!r} seed {seed}: {hi} epochs recorded but the checkpoint is "
                             f"{'missing' if ck is None else 'of epoch ' + str(ck[0])}; it cannot be resumed")
        return ck

    def checkpoint(self, run_id: str, seed: int) -> tuple[int, bytes] | None:
        r = self._db.execute("SELECT epoch, state FROM checkpoints WHERE run_id = ? AND seed = ?",
                             (run_id, seed)).fetchone()
        return None if r is None else (int(r[0]), bytes(r[1]))

    def seeds(self, run_id: str) -> list[int]:
        """Every seed with an epoch recorded, or diverged (possibly at its first epoch)."""
        got = {int(r[0]) for r in self._db.execute("SELECT DISTINCT seed FROM epochs WHERE run_id = ?", (run_id,))}
        return sorted(got | set(self.diverged(run_id)))

    def trajectory(self, run_id: str, seed: int) -> list[EpochRow]:
        rows = self._db.execute(
            "SELECT epoch, model, cluster, test_loss, test_accuracy, train_loss, seconds FROM epochs "
            "WHERE run_id = ? AND seed = ? ORDER BY epoch", (run_id, seed)).fetchall()
        return [EpochRow(*r) for r in rows]

    def losses(self, run_id: str) -> dict[int, list[float]]:
        """Test loss after every epoch, by seed."""
        out: dict[int, list[float]] = {}
        for seed, loss in self._db.execute(
                "SELECT seed, test_loss FROM epochs WHERE run_id = ? ORDER BY seed, epoch", (run_id,)):
            out.setdefault(int(seed), []).append(float(loss))
        return out

    def seconds_per_epoch(self, run_id: str) -> float | None:
        """The mean wall time of the run's recorded epochs (None before its first epoch)."""
        r = self._db.execute("SELECT AVG(seconds) FROM epochs WHERE run_id = ?", (run_id,)).fetchone()[0]
        return None if r is None else float(r)

    def count_epochs(self, run_id: str | None = None) -> int:
        if run_id is None:
            return int(self._db.execute("SELECT COUNT(*) FROM epochs").fetchone()[0])
        return int(self._db.execute("SELECT COUNT(*) FROM epochs WHERE run_id = ?", (run_id,)).fetchone()[0])

    # -- helpers ------------------------------------------------------------- #
    def _transaction(self):
        db = self._db

        class _Tx:
            def __enter__(self_inner):
                db.execute("BEGIN IMMEDIATE")

            def __exit__(self_inner, exc_type, exc, tb):
                db.execute("COMMIT" if exc_type is None else "ROLLBACK")
                return False

        return _Tx()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.runs())
