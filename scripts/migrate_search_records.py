"""Bring the committed certified searches' records to today's shape once, without training (depl 0.1.0).

Searches made before a search named its e-process and allocation, and before a group's shorter candidates read
their seeds from more than one run, left records that today's readers filled in with defaults:

- a search run's ``runs.spec`` (``plan.info.search``, what its runs were counted by) without ``prior`` or
  ``allocation``: they were the uniform mixture and every candidate in the race counting every seed (`all`);
- a plan's search certificate (in its file, and in the spec of a run that trained that plan on fresh seeds) whose candidate rows lack ``read_from`` (the runs its seeds were read from: its
  group's run alone, ``trains_with``, which held every seed) or ``first_counted`` (the first seed it counted: the
  search's first, every candidate counting from it, or none for a candidate that counted no run), and whose
  evidence lacks ``allocation`` (`all`).

Each gets these values written in, as today's search writes them, so that one reader with no defaults reads every
record.  Nothing else changes: every other field of every spec and plan file is compared before and after, and a
plan's certificate still recounts from its store (`depl.ledger.certificate_problem`, run on each plan after).

    python scripts/migrate_search_records.py            # migrate, then say what changed
    python scripts/migrate_search_records.py --check    # change nothing; exit 1 if anything is left to migrate
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OLD = {"prior": "uniform", "allocation": "all"}   # what a search that named neither decided by


def committed(pattern: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", pattern], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / p for p in out.split()]


def spec_today(spec: dict) -> dict | None:
    """A run's spec with, where it is a search's run, its prior and allocation named, and, where its plan carries a
    search certificate (a fresh validation of the plan a search returned), that certificate as `plan_today` makes it
    — the spec the plan file gives once migrated (None: nothing to change)."""
    plan = spec.get("plan")
    if not isinstance(plan, dict):
        return None
    counted = (plan.get("info") or {}).get("search")
    named = counted is not None and not all(k in counted for k in OLD)
    certified = plan_today(plan)
    if not named and certified is None:
        return None
    new = {**json.loads(json.dumps(spec)), "plan": certified or json.loads(json.dumps(plan))}
    if named:
        new["plan"]["info"]["search"] = {**OLD, **counted}
    return new


def plan_today(plan: dict) -> dict | None:
    """A plan file's search certificate with every candidate's read_from and first_counted, and the allocation,
    written in (None: nothing to change)."""
    cert = (plan.get("info") or {}).get("certificate") or {}
    if cert.get("kind") != "search":
        return None
    ev = cert["evidence"]
    rows = ev["candidates"]
    if "allocation" in ev and all("read_from" in r and "first_counted" in r for r in rows):
        return None
    new = json.loads(json.dumps(plan))
    ev = new["info"]["certificate"]["evidence"]
    if "allocation" not in ev:
        ev["allocation"] = OLD["allocation"]
    for r in ev["candidates"]:
        r.setdefault("read_from", [r["trains_with"]])
        r.setdefault("first_counted", ev["first_seed"] if r["runs"] else None)
    return new


def migrate_store(path: Path, write: bool) -> int:
    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT run_id, spec FROM runs").fetchall()
        changed = [(rid, new) for rid, spec in rows if (new := spec_today(json.loads(spec))) is not None]
        if write and changed:
            with db:
                for rid, new in changed:
                    db.execute("UPDATE runs SET spec = ? WHERE run_id = ?", (json.dumps(new, sort_keys=True), rid))
        return len(changed)
    finally:
        db.close()


def migrate_plan(path: Path, write: bool) -> bool:
    text = path.read_text(encoding="utf-8")
    try:
        plan = json.loads(text)
    except ValueError:
        return False
    new = plan_today(plan) if isinstance(plan, dict) else None
    if new is None:
        return False
    if write:
        path.write_text(json.dumps(new, indent=2, allow_nan=False) + ("\n" if text.endswith("\n") else ""),
                        encoding="utf-8")
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if anything is left to migrate")
    a = ap.parse_args()
    specs = {p: n for p in committed("*.sqlite") if (n := migrate_store(p, not a.check))}
    plans = [p for p in committed("*.json") if migrate_plan(p, not a.check)]
    for p, n in specs.items():
        print(f"{p.relative_to(ROOT)}: {n} run spec(s) {'to migrate' if a.check else 'migrated'}")
    for p in plans:
        print(f"{p.relative_to(ROOT)}: search certificate {'to complete' if a.check else 'completed'} "
              "(read_from, first_counted, allocation)")
    if not a.check and plans:
        from depl.ledger import certificate_problem
        from depl.plan import Plan

        for p in plans:
            why = certificate_problem(Plan.load(p), str(p.relative_to(ROOT)))
            if why:
                print(f"error: {why}", file=sys.stderr)
                return 1
    print(f"{len(specs)} store(s), {len(plans)} plan file(s) {'left to migrate' if a.check else 'migrated'}")
    return 1 if a.check and (specs or plans) else 0


if __name__ == "__main__":
    sys.exit(main())
