"""Every committed plan file loads — its figures recomputed from its scenario (depl.plan_check), its certificate
read (depl.certificate.Certificate) — and its certificate is what today's depl recomputes from its own runs (its
store's runs for a certified search), so every command that judges a committed plan reads it
(scripts/recompute_plan_certificates.py brought them there once; scripts/migrate_stores.py planned the one whose
calibration runs are not kept under its law as fitted; scripts/migrate_search_records.py completed the records of the
searches made before a search recorded every field it writes today)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("recompute", ROOT / "scripts" / "recompute_plan_certificates.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_committed_plan_carries_the_certificate_its_runs_give(monkeypatch):
    monkeypatch.chdir(ROOT)
    script = _script()
    plans = script.plan_files()   # every one: `fixed` loads it (Plan.load, its scenario, its certificate)
    assert len(plans) >= 20
    assert [str(p) for p in plans if script.fixed(p) is not None] == []


def test_every_committed_search_plan_names_the_alpha_ledger_account_of_its_stores_manifest(monkeypatch):
    """A certified search's α goes to the task's α ledger in an account named by its store's manifest
    (depl.workflows.search): a committed plan's account is the one its committed store names."""
    import json

    monkeypatch.chdir(ROOT)
    script = _script()
    named = {str(p): script.ledger_account(json.loads(p.read_text()), p) for p in script.plan_files()}
    accounts = {p: a for p, a in named.items() if a is not None}
    assert len(accounts) >= 2
    assert {p: have for p, (have, want) in accounts.items() if have != want} == {}


def test_every_committed_search_record_is_in_todays_shape():
    """scripts/migrate_search_records.py brought the searches made before a search named its e-process and
    allocation, and its candidates' runs read and first seed counted, to today's shape once: nothing is left to
    migrate, so every reader takes these fields as written, with no default."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "migrate_search_records.py"), "--check"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and "0 store(s), 0 plan file(s) left to migrate" in r.stdout, r.stdout + r.stderr
