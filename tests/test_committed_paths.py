"""The files committed under docs/ and src/ hold no absolute path of the machine they were made on: a clone in
another folder (CI's, a user's) reads them as they are (depl.paths; scripts/relativise_paths.py migrated them)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ABSOLUTE = re.compile(r"(?<![\w.~/:-])/(?:work|tmp|home|root)/[^\s\"'`]*")


def test_no_tracked_json_or_toml_under_docs_or_src_holds_an_absolute_path():
    files = subprocess.run(["git", "ls-files", "-z", "--", "docs/*.json", "docs/*.toml", "src/*.json", "src/*.toml"],
                           cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    files = [f for f in files if f]
    assert len(files) > 100   # the listing found the committed files (plans, sidecars, scenarios, certificates)
    found = [f"{f}:{n}: {m.group(0)}" for f in files
             for n, line in enumerate((ROOT / f).read_text(encoding="utf-8").splitlines(), 1)
             for m in ABSOLUTE.finditer(line)]
    assert not found, "\n".join(found[:20])


# a path depl follows (a plan, a store) recorded as the folder a command ran in saw it: from the repository's root
FROM_ROOT = re.compile(r'"(?:plan|plan_file|store)":\s*"(docs/[^"]*)"')


def test_no_tracked_json_under_docs_names_a_file_it_follows_from_the_repositorys_root():
    """Reports, certificates and studies name their plan and store relative to their own folder, so that a copy of
    the folder, or a command run in another one, finds them."""
    files = subprocess.run(["git", "ls-files", "-z", "--", "docs/*.json"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    found = [f"{f}: {m.group(0)}" for f in files if f and (ROOT / f).is_file()
             for m in FROM_ROOT.finditer((ROOT / f).read_text(encoding="utf-8"))]
    assert not found, "\n".join(found[:20])
    assert FROM_ROOT.search('"store": "docs/results/x/runs.sqlite"') and not FROM_ROOT.search('"store": "runs.sqlite"')


def test_the_scan_finds_what_it_looks_for():
    assert ABSOLUTE.search('"code_dir": "/work/main/docs/x"') and ABSOLUTE.search("`depl fit /tmp/a/runs.sqlite`")
    assert ABSOLUTE.search('"path": "/root/.local/share/depl/alpha/x.json"')
    assert not ABSOLUTE.search('"code_dir": "../../.."') and not ABSOLUTE.search('"cache": "~/.cache/depl/x.json"')
    assert not ABSOLUTE.search("`depl fit …/profile/runs.sqlite`")


def test_a_committed_plan_names_its_code_and_its_search_store_relative_to_itself(tmp_path, monkeypatch):
    """Read from another folder, every committed plan's code folder and certified search's store are found: they
    are taken from the plan's own folder, not from the folder the command runs in."""
    from depl.plan import Plan

    monkeypatch.chdir(tmp_path)
    files = subprocess.run(["git", "ls-files", "-z", "--", "docs/*.json"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    plans = [Plan.load(ROOT / f) for f in files if f and '"format": "depl.plan/1"' in (ROOT / f).read_text()[:200]]
    code = [p.scenario_spec["code_dir"] for p in plans if (p.scenario_spec or {}).get("code_dir")]
    stores = [c["evidence"]["store"] for p in plans if (c := p.info.get("certificate") or {}).get("kind") == "search"]
    assert len(code) >= 20 and len(stores) >= 20
    assert [c for c in code if not Path(c).is_dir()] == [] and [s for s in stores if not Path(s).is_file()] == []
