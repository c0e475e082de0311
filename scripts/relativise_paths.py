"""Rewrite the committed files that recorded absolute paths of the machine they were made on (run once, kept).

depl records a path it follows relative to the folder of the file that records it, and says where an
informational path was without this machine's layout (depl.paths).  The files committed before that rule held
absolute paths (/work/…, /tmp/…, /root/…) and paths relative to the folder a command ran in; this script
rewrites them into that form, once, in place:

* model files (``runs/models/RUN/seed-N.json`` and ``seed-N.pt``): ``spec.code_dir`` relative to the models
  folder, in the ``.pt`` file too (its spec must equal the sidecar's), and the sidecar's ``sha256`` of the
  rewritten ``.pt``.  The sidecar's ``code`` digests are keyed by path inside code_dir: unchanged;
* plans (``depl.plan/1``): ``scenario_spec.code_dir`` relative to the plan's folder (a run's identity leaves
  code_dir out, depl.store.drop_code_dirs, and `plan_hash` reads epochs and datasets only: no digest changes);
  a certified search's ``store`` and kept ``models.folder``, recorded relative to the folder the search ran in,
  relative to the plan's (the search's manifest binds candidates, α and seeds, not where its store lay); the α
  ledger's ``path`` as ~/…;
* certificates (``depl.certificate/2``): ``plan_file`` and ``store`` relative to the certificate's folder; a
  store that was not committed with it (it lay in /tmp) becomes null;
* the routes study (``depl.bench-routes/1``): ``scenario`` and each route's ``plan`` relative to routes.json (a
  route's ``result.json``: its ``plan`` relative to it), and a route's key names the scenario by its digest (what
  benchmarks/bench_routes.py's `scenario_digest` writes);
* validation reports (``*-validate.json``): ``plan_file``, recorded relative to the folder `depl validate` ran in,
  relative to the report's folder;
* coverage tables (``depl.coverage/1``): each cell's ``plan_file`` relative to coverage.json;
* docs/adaptive-store/adaptive.json: each row's ``plan_file`` relative to it;
* the seeds' executor choice (``cache``): ~/…;
* the header of a fitted scenario (``Written by `depl fit STORE```): the store as …/profile/runs.sqlite.

A path made on another machine (/work/exp2/docs/…) is taken as the same file of this repository (the part from
docs/ on).  Values are replaced as JSON text, so every other byte of a file is kept.

    python scripts/relativise_paths.py          # rewrite; prints each file it changed
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOME = re.compile(r"^/(?:root|home/[^/]+)/")
ELSEWHERE = re.compile(r"^/(?:work|tmp|home|root)/")


def tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z", *patterns], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / p for p in out.decode().split("\0") if p]


def in_repo(value: str) -> Path | None:
    """An absolute path of the machine a file was made on, as the file of this repository it named."""
    i = value.find("/docs/")
    return ROOT / value[i + 1:] if i >= 0 else None


def relative_to(target: Path, file: Path) -> str:
    return Path(os.path.relpath(target, file.parent)).as_posix()


def replace_value(text: str, key: str, old, new) -> str:
    """`"key": old` → `"key": new` (JSON text, either separator style)."""
    pattern = re.compile(rf'("{re.escape(key)}":\s*){re.escape(json.dumps(old))}')
    return pattern.sub(lambda m: m.group(1) + json.dumps(new), text)


def home_form(value: str) -> str:
    return HOME.sub("~/", value)


def code_dir_of(value: str, file: Path) -> str | None:
    if not value.startswith("/"):
        return None
    target = in_repo(value)
    if target is None or not target.is_dir():
        raise SystemExit(f"{file}: code_dir = {value!r}: no such folder in this repository")
    return relative_to(target, file)


def models() -> list[Path]:
    import torch

    changed = []
    for side in tracked("*/models/*/seed-*.json"):
        d = json.loads(side.read_text())
        if d.get("format") != "depl.model/1":
            continue
        old = (d.get("spec") or {}).get("code_dir")
        new = code_dir_of(old, side) if isinstance(old, str) else None
        if new is None:
            continue
        pt = side.with_suffix(".pt")
        content = torch.load(pt, weights_only=True, map_location="cpu")
        content["spec"]["code_dir"] = new
        torch.save(content, pt)
        d["spec"]["code_dir"] = new
        d["sha256"] = hashlib.sha256(pt.read_bytes()).hexdigest()
        side.write_text(json.dumps(d, indent=1, sort_keys=True) + "\n")   # as depl.train.task.models writes it
        changed += [side, pt]
    return changed


def base_of(value: str, file: Path) -> Path | None:
    """The folder a path relative to the folder a command ran in was relative to: the repository's root, or
    the nearest folder above the file where it names a file."""
    return next((base / value for base in (ROOT, *file.parents) if (base / value).exists()), None)


def json_file(path: Path) -> bool:
    text = path.read_text(encoding="utf-8")
    try:
        d = json.loads(text)
    except ValueError:
        return False
    new = text
    if isinstance(d, dict) and d.get("format") == "depl.plan/1":
        spec = d.get("scenario_spec") or {}
        if isinstance(spec.get("code_dir"), str):
            rel = code_dir_of(spec["code_dir"], path)
            if rel is not None:
                new = replace_value(new, "code_dir", spec["code_dir"], rel)
        ev = ((d.get("info") or {}).get("certificate") or {}).get("evidence") or {}
        for key, v in (("store", ev.get("store")), ("folder", (ev.get("models") or {}).get("folder"))):
            target = base_of(v, path) if isinstance(v, str) and not v.startswith("/") else None
            if target is not None:   # a certified search's store and models, from the folder the search ran in
                new = replace_value(new, key, v, relative_to(target, path))
    if isinstance(d, dict) and d.get("format") == "depl.certificate/2":
        ev = d.get("evidence") or {}
        for key in ("plan_file", "store"):
            v = ev.get(key)
            if not isinstance(v, str):
                continue
            target = in_repo(v) if v.startswith("/") else base_of(v, path)
            if target is None or not target.exists():
                if ELSEWHERE.match(v) or v.startswith("docs/"):
                    new = replace_value(new, key, v, None)   # not committed with the certificate
                continue
            new = replace_value(new, key, v, relative_to(target, path))
    if isinstance(d, dict) and path.name.endswith("-validate.json") and isinstance(d.get("plan_file"), str):
        target = base_of(d["plan_file"], path)   # the plan, from the folder `depl validate` ran in
        if target is not None:
            new = replace_value(new, "plan_file", d["plan_file"], relative_to(target, path))
    if isinstance(d, dict) and d.get("format") == "depl.coverage/1":
        for cell in d.get("cells") or []:
            v = cell.get("plan_file")
            target = base_of(v, path) if isinstance(v, str) and v else None
            if target is not None:   # from the folder `depl coverage` ran in
                new = replace_value(new, "plan_file", v, relative_to(target, path))
    if isinstance(d, dict) and d.get("format") == "depl.bench-routes/1":
        scenario = in_repo(d["scenario"]) if d["scenario"].startswith("/") else None
        if scenario is not None:   # written whole, as the study writes it (json.dumps, indent 1)
            d["scenario"] = relative_to(scenario, path)
            digest = hashlib.sha256(scenario.read_bytes()).hexdigest()[:16]
            for route in ("calibration_route", "uncalibrated_route"):
                key = (d.get(route) or {}).get("key") or {}
                if isinstance(key.get("scenario"), str) and key["scenario"].startswith("/"):
                    key["scenario"] = digest
            new = json.dumps(d, indent=1) + "\n"
        for route in ("calibration_route", "uncalibrated_route"):
            v = (d.get(route) or {}).get("plan")
            target = base_of(v, path) if isinstance(v, str) else None
            if target is not None:   # a route's plan, from the folder the study ran in
                new = replace_value(new, "plan", v, relative_to(target, path))
    if isinstance(d, dict) and path.name == "result.json" and "key" in d and isinstance(d.get("plan"), str):
        target = base_of(d["plan"], path)
        if target is not None:   # a route's result file
            new = replace_value(new, "plan", d["plan"], relative_to(target, path))
    if path.name == "adaptive.json" and isinstance(d, list):
        for row in d:
            v = row.get("plan_file")
            if isinstance(v, str) and v.startswith("/"):
                new = replace_value(new, "plan_file", v, relative_to(in_repo(v), path))
    for key in ("path", "cache"):   # the α ledger, the executor choice's cache: the user's own files
        for m in set(re.findall(rf'"{key}":\s*"((?:/root|/home/[^/"]+)/[^"]*)"', new)):
            new = replace_value(new, key, m, home_form(m))
    if new != text:
        path.write_text(new, encoding="utf-8")
        return True
    return False


def toml_file(path: Path) -> bool:
    text = path.read_text(encoding="utf-8")
    new = re.sub(r"(Written by `depl fit )(/[^`]*)`",
                 lambda m: m.group(1) + "…/" + "/".join(Path(m.group(2)).parts[-2:]) + "`", text)
    if new != text:
        path.write_text(new, encoding="utf-8")
        return True
    return False


def main() -> int:
    changed = models()
    changed += [p for p in tracked("*.json") if p not in changed and json_file(p)]
    changed += [p for p in tracked("*.toml") if toml_file(p)]
    for p in changed:
        print(p.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
