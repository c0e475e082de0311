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


def test_the_scan_finds_what_it_looks_for():
    assert ABSOLUTE.search('"code_dir": "/work/main/docs/x"') and ABSOLUTE.search("`depl fit /tmp/a/runs.sqlite`")
    assert ABSOLUTE.search('"path": "/root/.local/share/depl/alpha/x.json"')
    assert not ABSOLUTE.search('"code_dir": "../../.."') and not ABSOLUTE.search('"cache": "~/.cache/depl/x.json"')
    assert not ABSOLUTE.search("`depl fit …/profile/runs.sqlite`")
