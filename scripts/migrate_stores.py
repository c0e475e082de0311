"""Bring the committed stores and plan files to today's formats once, without training (depl 0.1.0).

Stores (every committed ``*.sqlite``): the tables a store of today's schema has and it lacks are created,
``epochs`` is rebuilt with ``test_accuracy`` nullable where it was NOT NULL, the seeds a judging command trained
before stores recorded them are recorded in ``seed_uses`` (each from the command that trained them, as written in
the docs: `USES`), and ``user_version`` becomes `depl.store.SCHEMA_VERSION`; a store is then VACUUMed where that
shrinks it.  Every row of the tables it had is compared before and after: losses and seeds unchanged, byte for
byte.

Plan files (every committed ``depl.plan/1`` file): a ``[[calibration.experiments]]`` table of its scenario that
records neither its runs' losses nor their conditions gets both from the store holding those runs
(`CALIBRATION_STORES`, found by the experiment's seeds and schedule), as `depl calibrate` writes them; a plan whose
calibration runs are not committed (`AS_FITTED`) becomes the plan of its schedule under its scenario's law as fitted.
Any other plan's ``info.certificate`` is left as it is.

Stored specifications (``runs.spec`` of every committed store): a run whose spec holds a certificate in an older
shape — the plan a certified search returned recorded its ``info.certificate`` as a ``depl.search/1`` dict, the
calibration's and ``depl certify``'s likewise — gets it in today's (``depl.certificate/2``), rewritten as
``scripts/migrate_certificates.py`` rewrote the plan files (its `walk`); a run of `PLAN_FILES`, whose plan file
was migrated after it trained (calibration experiments given their losses, certificate recomputed), records that
file's plan as it is now, once the file is seen to train the very job the run trained.  So a command that resumes
the run with the plan file finds its own specification.  Nothing else changes: the spec's job and back end, from
which the run's id is derived (depl.train.engine.execute.run_id_for), are compared before and after, and so is the
rest of the spec but its plan's certificates, `certified_by` and calibration experiments' losses and conditions.

    python scripts/migrate_stores.py            # migrate, then say what changed
    python scripts/migrate_stores.py --check    # change nothing; exit 1 if anything is left to migrate
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

from depl.scenario.calibration import Conditions
from depl.store import COLUMNS, SCHEMA, SCHEMA_VERSION, untimed, without_key

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from migrate_certificates import walk as certificates_today  # noqa: E402  (a script beside this one)

# (store, run id prefix) → (command, first seed, last seed, α): what the judging command that trained the runs
# began with, as its command line in the docs says (the seeds it was given, --seeds/--runs/--max-runs long)
USES = {
    # docs/coverage.md, "The earlier table": depl coverage … --runs 200 --first-seed 10000 --out docs/coverage-store
    ("docs/coverage-store/runs.sqlite", "plan-"): ("coverage", 10000, 10199, None),
    # docs/coverage.md: depl coverage … --runs 200 --first-seed 500000 --out docs/certificate-store/coverage
    ("docs/certificate-store/coverage/runs.sqlite", "plan-"): ("coverage", 500000, 500199, None),
    # docs/certificate.md: depl validate NAME …-default.json --seeds 200 --first-seed 400000
    ("docs/certificate-store/fresh/digits/runs.sqlite", "plan-"): ("validate", 400000, 400199, None),
    ("docs/certificate-store/fresh/mnist1d/runs.sqlite", "plan-"): ("validate", 400000, 400199, None),
    ("docs/certificate-store/fresh/noniid/runs.sqlite", "plan-"): ("validate", 400000, 400199, None),
    # docs/certificate.md: depl certify …-default.json --first-seed 6X0000 --max-runs 400 (α 0.05, the plans')
    ("docs/certificate-store/certify/mnist1d-small/runs.sqlite", "certify-"): ("certify", 600000, 600399, 0.05),
    ("docs/certificate-store/certify/digits-small/runs.sqlite", "certify-"): ("certify", 610000, 610399, 0.05),
    ("docs/certificate-store/certify/mnist1d-noniid/runs.sqlite", "certify-"): ("certify", 620000, 620399, 0.05),
}

# a scenario's calibration runs, by the scenario's name (docs/certificate.md, "The built-ins, certified")
CALIBRATION_STORES = {
    "digits-small": "docs/certificate-store/calibration/digits/runs.sqlite",
    "mnist1d-small": "docs/certificate-store/calibration/mnist1d/runs.sqlite",
    "mnist1d-noniid": "docs/certificate-store/calibration/noniid/runs.sqlite",
}

# plan files whose calibration runs are not committed, so their losses cannot be recorded and the calibrated law
# certifies no quantile for their epochs: each becomes the plan of its schedule under its scenario's law as fitted
# (`as_fitted`), as `depl plan --uncalibrated` writes one — its calibration table kept with use = false, its
# certified quantile, bracket, mean and sd those of the law as fitted, and no calibration certificate
AS_FITTED = {
    # docs/certificate.md, "What it costs, on mnist1d-noniid": 8 experiments of 52 runs, no seeds recorded
    "docs/certificate-store/plans/mnist1d-noniid-w0.9-alpha0.05.json",
}


# stores whose runs trained a plan file that was migrated after they trained (its calibration experiments given
# their runs' losses and conditions, above, and its certificate recomputed: scripts/recompute_plan_certificates.py):
# each run's spec records the plan as the file holds it now, as the command that made the store, run today, writes
# it (docs/certificate.md, "The built-ins, certified"); only where the file trains the very job the runs trained
PLAN_FILES = {
    "docs/certificate-store/fresh/digits/runs.sqlite": "docs/certificate-store/plans/digits-small-default.json",
    "docs/certificate-store/fresh/mnist1d/runs.sqlite": "docs/certificate-store/plans/mnist1d-small-default.json",
    "docs/certificate-store/fresh/noniid/runs.sqlite": "docs/certificate-store/plans/mnist1d-noniid-default.json",
    "docs/certificate-store/fresh/mnist1d-2/runs.sqlite": "docs/certificate-store/plans/mnist1d-small-default-2.json",
    "docs/certificate-store/certify/digits-small/runs.sqlite": "docs/certificate-store/plans/digits-small-default.json",
    "docs/certificate-store/certify/mnist1d-small/runs.sqlite":
        "docs/certificate-store/plans/mnist1d-small-default.json",
    "docs/certificate-store/certify/mnist1d-noniid/runs.sqlite":
        "docs/certificate-store/plans/mnist1d-noniid-default.json",
}


class Refused(Exception):
    """A file this script cannot migrate; the message says which and why."""


def committed(pattern: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", pattern], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / line for line in out.splitlines()]


# -- stores ------------------------------------------------------------------------------------------------------ #
def _rows_digest(db: sqlite3.Connection, tables: list[str]) -> str:
    """sha256 of every row of `tables` in key order, values as SQLite gives them (floats by their bits); the runs'
    specs are left to `_spec_digest` (their certificates may change shape)."""
    h = hashlib.sha256()
    for t in tables:
        cols = [c for c in COLUMNS[t] if (t, c) != ("runs", "spec")]
        for row in db.execute(f"SELECT {', '.join(cols)} FROM {t} ORDER BY {', '.join(cols[:3])}"):
            h.update(repr(tuple(x.hex() if isinstance(x, float) else x for x in row)).encode())
    return h.hexdigest()


def _kept(spec: dict) -> dict:
    """A run's spec without what its migration may change (its plan's certificates and `certified_by`, and its
    calibration experiments' recorded losses and conditions): the rest, its job and back end first among it (its
    run id is theirs, depl.train.engine.execute.run_id_for), stays as it was."""
    spec = without_key(spec, "certificate")
    plan = spec.get("plan")
    if isinstance(plan, dict):
        plan = json.loads(json.dumps(plan))
        plan.get("info", {}).pop("certified_by", None)
        for e in ((plan.get("scenario_spec") or {}).get("calibration") or {}).get("experiments") or []:
            e.pop("losses", None)
            e.pop("conditions", None)
        spec = {**spec, "plan": plan}
    return spec


def _spec_digest(db: sqlite3.Connection) -> str:
    """sha256 of every run's id, job, back end and the rest of its spec that its migration may not change, in
    run order."""
    h = hashlib.sha256()
    for run_id, text in db.execute("SELECT run_id, spec FROM runs ORDER BY run_id"):
        spec = json.loads(text)
        h.update(json.dumps([run_id, spec.get("job"), spec.get("backend"), _kept(spec)], sort_keys=True).encode())
    return h.hexdigest()


def _plan_file(rel: str, spec: dict) -> dict:
    """The plan `PLAN_FILES` gives the store at `rel`, as the command that made it records it today; Refused where
    that file trains another job than the run's or differs from its recorded plan beyond what `_kept` leaves out."""
    from depl.plan import Plan
    from depl.train.engine.federation import job_from_plan

    p = Plan.load(ROOT / PLAN_FILES[rel])
    if job_from_plan(p, "cpu").to_json() != spec.get("job"):
        raise Refused(f"{rel}: {PLAN_FILES[rel]} trains another job than its runs did")
    plan = p.to_json()
    if _kept({"plan": plan}) != _kept({"plan": spec.get("plan")}):
        raise Refused(f"{rel}: {PLAN_FILES[rel]} differs from the plan its runs recorded beyond its certificate")
    return plan


def _old_specs(db: sqlite3.Connection, rel: str) -> list[tuple[str, str]]:
    """(run id, today's spec as the store writes it) of each run whose spec holds a certificate of an older shape,
    or, in a store of `PLAN_FILES`, a plan other than that file's."""
    out = []
    if "runs" not in _tables(db):
        return out
    for run_id, text in db.execute("SELECT run_id, spec FROM runs ORDER BY run_id"):
        spec = json.loads(text)
        now = certificates_today(spec)
        if rel in PLAN_FILES and "plan" in now:
            now = {**now, "plan": _plan_file(rel, now)}
        if untimed(now) != untimed(spec):
            out.append((run_id, json.dumps(now, sort_keys=True)))   # as depl.store.Store.start_run writes it
    return out


def _tables(db: sqlite3.Connection) -> list[str]:
    have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return [t for t in COLUMNS if t in have]


def _outdated(db: sqlite3.Connection, rel: str) -> list[str]:
    """What the store at `rel` lacks of today's schema and of its recorded uses, in words ([] when nothing)."""
    out = []
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version != SCHEMA_VERSION:
        out.append(f"schema version {version}")
    missing = [t for t in COLUMNS if t not in _tables(db)]
    if missing:
        out.append("no " + ", ".join(missing))
    if any(r[1] == "test_accuracy" and r[3] for r in db.execute("PRAGMA table_info(epochs)")):
        out.append("epochs.test_accuracy NOT NULL")
    old = _old_specs(db, rel)
    if old:
        out.append(f"a plan of an older shape or content in the spec of {', '.join(r for r, _ in old)}")
    for (where, prefix), (command, *_rest) in USES.items():
        if where == rel and "seed_uses" in _tables(db):
            runs = [r[0] for r in db.execute("SELECT run_id FROM runs WHERE run_id LIKE ?", (prefix + "%",))]
            if any(db.execute("SELECT 1 FROM seed_uses WHERE run_id = ? AND command = ?", (r, command)).fetchone()
                   is None for r in runs):
                out.append(f"no recorded {command} use")
    return out


def _uses(db: sqlite3.Connection, rel: str) -> list[tuple]:
    """The seed_uses rows `USES` gives the store at `rel`, each checked against the seeds its run trained."""
    rows = []
    for (where, prefix), (command, first, last, alpha) in USES.items():
        if where != rel:
            continue
        runs = db.execute("SELECT run_id, created FROM runs WHERE run_id LIKE ?", (prefix + "%",)).fetchall()
        if not runs:
            raise Refused(f"{rel}: no run {prefix}…, whose {command} use USES records")
        for run_id, created in runs:
            lo, hi = db.execute("SELECT MIN(seed), MAX(seed) FROM epochs WHERE run_id = ?", (run_id,)).fetchone()
            if lo != first or hi > last:
                raise Refused(f"{rel}: run {run_id} trained seeds {lo}..{hi}, not within the {command} use "
                              f"{first}..{last} USES gives it")
            rows.append((run_id, command, first, last, alpha, created))
    return rows


def migrate_store(path: Path) -> str | None:
    """Bring the store at `path` to today's schema; what changed, in words (None: nothing to)."""
    rel = path.relative_to(ROOT).as_posix()
    db = sqlite3.connect(path, isolation_level=None)
    try:
        why = _outdated(db, rel)
        if not why:
            return None
        had = [t for t in _tables(db) if t != "seed_uses"]   # the rows the migration may not change: all but uses
        before, specs = _rows_digest(db, had), _spec_digest(db)
        db.execute("BEGIN IMMEDIATE")
        for stmt in SCHEMA.split(";"):
            if stmt.strip():
                db.execute(stmt)
        if any(r[1] == "test_accuracy" and r[3] for r in db.execute("PRAGMA table_info(epochs)")):
            ddl = SCHEMA[SCHEMA.index("CREATE TABLE IF NOT EXISTS epochs"):]
            db.execute(ddl[:ddl.index(");") + 2].replace("IF NOT EXISTS epochs", "epochs_now"))
            db.execute("INSERT INTO epochs_now SELECT * FROM epochs")
            db.execute("DROP TABLE epochs")
            db.execute("ALTER TABLE epochs_now RENAME TO epochs")
        db.executemany("INSERT OR IGNORE INTO seed_uses VALUES (?, ?, ?, ?, ?, ?)", _uses(db, rel))
        db.executemany("UPDATE runs SET spec = ? WHERE run_id = ?", [(text, r) for r, text in _old_specs(db, rel)])
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        if _rows_digest(db, had) != before or _spec_digest(db) != specs:
            db.execute("ROLLBACK")
            raise Refused(f"{rel}: its rows would change; nothing written")
        db.execute("COMMIT")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.execute("PRAGMA journal_mode = DELETE")   # one file, as committed
    finally:
        db.close()
    return f"{rel}: {'; '.join(why)} → version {SCHEMA_VERSION}{_vacuumed(path)}"


def _vacuumed(path: Path) -> str:
    """VACUUM the store where that makes it smaller; what it did, in words."""
    with tempfile.TemporaryDirectory() as tmp:
        packed = Path(tmp) / "packed.sqlite"
        db = sqlite3.connect(path)
        try:
            db.execute("VACUUM INTO ?", (str(packed),))
        finally:
            db.close()
        size, small = path.stat().st_size, packed.stat().st_size
        if small >= size:
            return f", {size} bytes"
        shutil.copyfile(packed, path)
        return f", {size} → {small} bytes (VACUUM)"


# -- plan files -------------------------------------------------------------------------------------------------- #
def _expanded(versions: list, epochs: list) -> list[str]:
    return [v for v, n in zip(versions, epochs) for _ in range(int(n))]


def _runs_of(store: Path, schedule: list[str], fraction: float, seeds: list[int]) -> tuple[dict, dict]:
    """(losses by seed, the run's spec) of the profiling run of `store` that trained `schedule` at `fraction`."""
    db = sqlite3.connect(f"file:{store}?mode=ro&immutable=1", uri=True)
    try:
        found = []
        for run_id, text in db.execute("SELECT run_id, spec FROM runs WHERE kind = 'profile'"):
            spec = json.loads(text)
            job = spec["job"]
            if [e[1] for e in job["epochs"]] == schedule and math.isclose(float(job["data"].get("fraction", 1.0)),
                                                                        fraction):
                found.append((run_id, spec))
        if len(found) != 1:
            raise Refused(f"{store}: {len(found)} profiling runs of {schedule[0]}… ×{len(schedule)}, not one")
        run_id, spec = found[0]
        losses = {}
        for seed in seeds:
            row = [float(x) for (x,) in db.execute("SELECT test_loss FROM epochs WHERE run_id = ? AND seed = ? "
                                                    "ORDER BY epoch", (run_id, seed))]
            if not row:
                raise Refused(f"{store}: run {run_id} has no epoch of seed {seed}")
            losses[seed] = row + [math.inf] * (len(schedule) - len(row))   # diverged or stopped: met no ℓmax
    finally:
        db.close()
    return losses, spec


def _conditions(spec: dict) -> dict:
    """An experiment's conditions as `depl calibrate` writes them (depl.fit.calibrate._experiment_table)."""
    out = Conditions.of_job(spec["job"], spec.get("code")).model_dump(exclude_defaults=False)
    out["shares"] = [list(sh) for sh in out["shares"]]
    return out


def unrecorded(d: dict) -> list[dict]:
    """The calibration experiments of a plan file's scenario (`d`) that record neither their runs' losses nor their
    conditions, where its target has an α (without one, such a table's levels are read as today's depl reads
    them, and nothing certifies)."""
    spec = d.get("scenario_spec") or {}
    if (spec.get("target") or {}).get("alpha") is None:
        return []
    exps = ((spec.get("calibration") or {}).get("experiments")) or []
    return [e for e in exps if e.get("losses") is None and e.get("conditions") is None]


def migrate_plan(path: Path) -> str | None:
    """Record the losses and conditions of the plan's `unrecorded` calibration experiments; what changed."""
    rel = path.relative_to(ROOT).as_posix()
    text = path.read_text(encoding="utf-8")
    d = json.loads(text)
    old = unrecorded(d)
    if not old:
        return None
    name = d["scenario_spec"].get("name")
    store = CALIBRATION_STORES.get(name)
    if store is None or any(not e.get("seeds") for e in old):
        raise Refused(f"{rel}: its calibration experiments record no seeds, or no committed store holds the "
                      f"calibration runs of {name!r}: their losses cannot be recorded")
    for e in old:
        schedule = _expanded(e["versions"], e["epochs"])
        losses, run = _runs_of(ROOT / store, schedule, float(e.get("fraction", 1.0)), [int(s) for s in e["seeds"]])
        e["losses"] = [losses[int(s)] for s in e["seeds"]]
        e["conditions"] = _conditions(run)
    path.write_text(json.dumps(d, indent=_indent(text), ensure_ascii=_ascii(text))
                    + ("\n" if text.endswith("\n") else ""), encoding="utf-8")
    return f"{rel}: {len(old)} calibration experiments given their runs' losses and conditions ({store})"


def as_fitted(path: Path) -> str | None:
    """The plan of `AS_FITTED` under its scenario's law as fitted (its calibration not used); what changed."""
    from depl.loss import loss_model_for
    from depl.plan import Plan
    from depl.scenario import parse_scenario

    rel = path.relative_to(ROOT).as_posix()
    text = path.read_text(encoding="utf-8")
    d = json.loads(text)
    cal = (d["scenario_spec"].get("calibration") or {})
    if not cal.get("use", True):
        return None
    d["scenario_spec"]["calibration"] = {**cal, "use": False}
    s = parse_scenario(d["scenario_spec"], rel)
    law = loss_model_for(s).distribution([e["model"] for e in d["epochs"]], s.phi(s.samples(d["datasets"])))
    lo, hi = (float(x) for x in law.quantile_bounds(d["omega"]))
    if not hi <= d["loss_target"]:
        raise Refused(f"{rel}: the law as fitted puts the {d['omega']:g}-quantile of ℓ(K) at {hi:.6g}, above "
                      f"ℓmax = {d['loss_target']:g}: no plan of this schedule to keep")
    d.update(loss_quantile=hi, loss_quantile_bounds=[lo, hi], loss_mean=float(law.mean()))
    d["info"] = {k: v for k, v in d["info"].items() if k not in ("certified_by", "certificate")}
    d["info"]["loss_std"] = float(law.std())
    path.write_text(json.dumps(d, indent=_indent(text), ensure_ascii=_ascii(text))
                    + ("\n" if text.endswith("\n") else ""), encoding="utf-8")
    Plan.load(path).scenario_object()   # it reads back, its figures recomputed
    return (f"{rel}: planned with its scenario's law as fitted (its calibration runs are not kept): "
            f"{d['omega']:g}-quantile of ℓ(K) {hi:.6g} ≤ ℓmax {d['loss_target']:g}")


def _ascii(text: str) -> bool:
    """Whether the file was written with non-ASCII characters escaped."""
    return text.isascii()


def _indent(text: str) -> int | None:
    """The indent the file was written with (None: one line)."""
    second = text.split("\n", 2)[1] if text.count("\n") > 1 else ""
    return (len(second) - len(second.lstrip(" "))) or None if second else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if anything is left to migrate")
    args = p.parse_args(argv)
    left = []
    try:
        for path in committed("*.sqlite"):
            if args.check:
                db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
                why = _outdated(db, path.relative_to(ROOT).as_posix())
                db.close()
                left += [f"{path.relative_to(ROOT)}: {'; '.join(why)}"] if why else []
            elif (said := migrate_store(path)) is not None:
                print(said)
        for path in committed("*.json"):
            try:
                d = json.loads(path.read_text(encoding="utf-8"))
            except ValueError:
                continue
            if not (isinstance(d, dict) and d.get("format") == "depl.plan/1"):
                continue
            if path.relative_to(ROOT).as_posix() in AS_FITTED:
                if args.check and (d["scenario_spec"].get("calibration") or {}).get("use", True):
                    left.append(f"{path.relative_to(ROOT)}: its calibration runs are not kept (to plan as fitted)")
                elif not args.check and (said := as_fitted(path)) is not None:
                    print(said)
                continue
            if args.check:
                if unrecorded(d):
                    left.append(f"{path.relative_to(ROOT)}: calibration experiments without losses or conditions")
            elif (said := migrate_plan(path)) is not None:
                print(said)
    except Refused as e:
        print(f"migrate_stores: {e}", file=sys.stderr)
        return 2
    for line in left:
        print(line)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
