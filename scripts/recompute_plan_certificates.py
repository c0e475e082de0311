"""Bring the committed plans' recorded certificates to what today's depl recomputes from their own runs.

Run once from the repository's root: `python scripts/recompute_plan_certificates.py [--check]`.  A plan's
certificate is recomputed, never taken as written (depl.ledger.certificate_problem); plans made before the
calibration tables recorded their runs' losses and conditions, or whose certificate words changed since, are
refused by the commands that judge them.  For each committed plan file whose certificate differs, this rewrites
`info.certified_by` and `info.certificate` with the recomputed ones — only where the numbers are the same (verdict,
runs, runs that met ℓmax, α, α's share), so no verdict changes; a certified search's plan whose certificate names
a store other than the one beside it is pointed at that one, if the store beside it then gives the same counts;
a certified search's α-ledger account (`evidence.alpha_ledger.account`, named `search:` and the digest of its store's
manifest, depl.workflows.search) is named again from the manifest its store holds now (the committed manifests were
given their `horizon` after their searches ran).  `--check` lists what it would change and exits 1 if anything is
left.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from depl.certificate import Certificate, Kind
from depl.ledger import CERTIFICATE_KEYS, certificate_problem, digest, recomputed_certificate
from depl.paths import resolved
from depl.plan import Plan
from depl.store import Store

NUMBERS = ("verdict", "runs", "hits", "alpha", "alpha_share", "omega", "loss_target")


def plan_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*.json"], capture_output=True, text=True, check=True).stdout.split()
    def is_plan(f: str) -> bool:
        data = json.loads(Path(f).read_text())
        return isinstance(data, dict) and data.get("format") == "depl.plan/1"

    return [Path(f) for f in out if is_plan(f)]


def ledger_account(data: dict, path: Path) -> tuple[str, str] | None:
    """A certified search's plan (its JSON, read from `path`): the α-ledger account its certificate names and the
    one its store's manifest names (`search:` and the manifest's digest, as depl.workflows.search names it); None
    where its certificate is no search's, names no account, or its store (relative to the plan) holds no manifest."""
    cert = (data.get("info") or {}).get("certificate") or {}
    ev = cert.get("evidence") or {}
    store = resolved(ev["store"], path) if ev.get("store") else None
    if cert.get("kind") != "search" or not ev.get("alpha_ledger") or store is None or not store.is_file():
        return None
    with Store(store, readonly=True) as st:
        bound = st.runs("search-manifest")
    return (ev["alpha_ledger"]["account"], f"search:{digest(bound[0]['spec'])}") if bound else None


def fixed(path: Path) -> dict | None:
    """The plan file's JSON with its certificate recomputed (and its α-ledger account named from its store's
    manifest), or None when nothing needs changing; ValueError where the numbers would change."""
    plan = Plan.load(path)
    data = json.loads(path.read_text())
    account = ledger_account(data, path)
    if account is not None and account[0] != account[1]:
        data["info"]["certificate"]["evidence"]["alpha_ledger"]["account"] = account[1]
    if certificate_problem(plan, str(path)) is None:
        return data if account is not None and account[0] != account[1] else None
    cert = Certificate.of_plan(plan.info)
    if cert is not None and cert.kind is Kind.SEARCH:
        beside = path.parent / "runs.sqlite"
        if not beside.is_file() or Path(cert.store).resolve() == beside.resolve():
            raise ValueError(f"{path}: its search certificate differs from its store's runs")
        data["info"]["certificate"]["evidence"]["store"] = beside.name   # relative to the plan's folder (depl.plan)
        return data
    got = recomputed_certificate(plan, plan.scenario_object())
    have, want = plan.info.get("certificate") or {}, got.get("certificate") or {}
    moved = [k for k in NUMBERS if have.get(k) != want.get(k)]
    if moved:
        raise ValueError(f"{path}: recomputing would change {', '.join(moved)}: left as it is")
    for k in CERTIFICATE_KEYS:
        data["info"][k] = got.get(k)
    return data


def main(argv: list[str]) -> int:
    check, left = "--check" in argv, 0
    for path in plan_files():
        try:
            data = fixed(path)
        except ValueError as e:
            print(f"left: {e}")
            left += 1
            continue
        if data is None:
            continue
        left += 1
        print(f"{'would rewrite' if check else 'rewrote'} {path}")
        if not check:
            path.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")
            if certificate_problem(Plan.load(path), str(path)) is not None:
                print(f"  still differs: {certificate_problem(Plan.load(path), str(path))}")
    return 1 if check and left else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
