"""Rewrite the committed certificates in the one shape of depl.certificate.Certificate (format depl.certificate/2).

Run once from the repository's root: `python scripts/migrate_certificates.py [FILE …]` (default: every JSON file
git tracks).  It rewrites, in place, every certificate it finds — a plan's `info.certificate` (the calibration's
and the certified search's), `depl certify`'s file, the certificates the benchmarks' reports hold, and `depl
validate`'s report (OUT/PLAN-validate.json, now a certificate of kind validation) — and leaves a file with none
untouched.  Each one written is read back by `Certificate.from_json`.  depl itself reads the one
shape only.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from depl.certificate import DEFAULT_ALPHA, Certificate, Kind, fixed_n_verdict, one_sided_bounds, seed_ranges
from depl.jsonout import dumps
from depl.validate import RULE

SEARCH, SEQUENTIAL = "depl.search/1", "depl.certificate/1"


def uniform_unless_named(evidence: dict) -> dict:
    """The e-process's prior: a certificate written before it was named used depl 0.1.0's, the uniform one."""
    evidence.setdefault("prior", "uniform")
    return evidence


def calibration(c: dict, plan: dict | None) -> dict:
    """`depl plan --alpha`'s certificate: certified or not by the calibration runs of the plan's schedule."""
    cal = c.get("calibration") or {}
    omega = c.get("omega_certified", cal.get("omega", plan["omega"] if plan else None))
    loss = cal.get("loss", plan["loss_target"] if plan else None)
    ranges = [tuple(r) for row in cal.get("runs") or [] for r in row.get("seeds") or []]
    core = ("alpha", "certified", "runs", "met", "alpha_spent", "omega_certified")
    return {"format": "depl.certificate/2", "kind": Kind.CALIBRATION.value,
            "verdict": "certified" if c["certified"] else "undecided", "omega": omega, "loss_target": loss,
            "alpha": c["alpha"], "alpha_share": c.get("alpha_spent", c["alpha"]), "runs": c["runs"], "hits": c["met"],
            "seeds": [list(r) for r in seed_ranges(ranges)], "lower_bound": None,
            "evidence": {k: v for k, v in c.items() if k not in core}}


def search(c: dict) -> dict:
    """`depl plan --certify`'s certificate (depl.search/1); one written before the e-process was named used the
    uniform prior (depl 0.1.0's)."""
    b = c.get("returned")
    row = c["candidates"][b] if b is not None else None
    core = ("format", "certified", "outcome", "alpha", "omega", "loss_target", "runs", "met", "seeds")
    return {"format": "depl.certificate/2", "kind": Kind.SEARCH.value, "verdict": c["outcome"], "omega": c["omega"],
            "loss_target": c["loss_target"], "alpha": c["alpha"], "alpha_share": row["alpha"] if row else None,
            "runs": c["runs"], "hits": c["met"], "seeds": [list(c["seeds"])] if c.get("seeds") else [],
            "lower_bound": row["lower_bound"] if row else None,
            "evidence": uniform_unless_named({k: v for k, v in c.items() if k not in core})}


def sequential(c: dict) -> dict:
    """`depl certify`'s file (depl.certificate/1); the prior as in `search`."""
    core = ("format", "verdict", "omega", "loss_target", "alpha", "runs", "hits", "seeds", "lower_bound")
    return {"format": "depl.certificate/2", "kind": Kind.SEQUENTIAL.value, "verdict": c["verdict"],
            "omega": c["omega"], "loss_target": c["loss_target"], "alpha": c["alpha"], "alpha_share": c["alpha"],
            "runs": c["runs"], "hits": c["hits"], "seeds": [list(r) for r in seed_ranges((s, s) for s in c["seeds"])],
            "lower_bound": c["lower_bound"],
            "evidence": uniform_unless_named({k: v for k, v in c.items() if k not in core})}


REPORT = ("ci_low", "ci_high", "runs", "hits", "omega", "target", "seeds", "measured_band", "planned_band")
"""The keys every `depl validate` report had before it was a certificate."""
PRINTED = ("report", "png", "seed_training", "exit_code")
"""What `depl validate --json` prints beside the certificate."""


def validation(r: dict) -> dict:
    """`depl validate`'s report before it was a certificate: its verdict recomputed from its runs and hits by the
    one-sided Clopper–Pearson bounds at depl's default α (these reports were judged at 95 % and recorded no α) —
    refused where that verdict differs from the one the report recorded."""
    alpha = r.get("alpha", DEFAULT_ALPHA)
    verdict = fixed_n_verdict(r["hits"], r["runs"], r["omega"], alpha)
    said = r.get("guarantee")
    if (said in ("certified", "refuted", "undecided") and said != verdict.value) or \
            verdict.not_refuted != r["not_refuted"]:
        raise ValueError(f"validate report of {r['plan_file']}: it recorded {said or r['not_refuted']!r}, "
                         f"its runs give {verdict.value!r} at α {alpha:g}")
    low, high = one_sided_bounds(r["hits"], r["runs"], alpha)
    core = ("runs", "hits", "omega", "target", "seeds", "alpha", "ci_low", "ci_high", "not_refuted", "guarantee")
    evidence = {"upper_bound": high, "rule": RULE, **{("law_quantile" if k == "certified_quantile" else k): v
                                                      for k, v in r.items() if k not in core + PRINTED}}
    return {"format": "depl.certificate/2", "kind": Kind.VALIDATION.value, "verdict": verdict.value,
            "omega": r["omega"], "loss_target": r["target"], "alpha": alpha, "alpha_share": alpha, "runs": r["runs"],
            "hits": r["hits"], "seeds": [list(x) for x in seed_ranges((s, s) for s in r["seeds"])],
            "lower_bound": low, "evidence": evidence, **{k: r[k] for k in PRINTED if k in r}}


def migrated(c: dict, plan: dict | None) -> dict:
    if c.get("format") == "depl.certificate/2":
        return c
    if c.get("format") == SEARCH:
        return search(c)
    if c.get("format") == SEQUENTIAL:
        return sequential(c)
    if "certified" in c and "met" in c:
        return calibration(c, plan)
    raise ValueError(f"not a certificate: {sorted(c)}")


def walk(d, plan: dict | None = None):
    """Every certificate in a JSON document migrated; a plan's own (`info`) read with the plan at hand."""
    if isinstance(d, list):
        return [walk(x, plan) for x in d]
    if not isinstance(d, dict):
        return d
    if d.get("format") == SEQUENTIAL:
        return sequential(d)
    if all(k in d for k in REPORT):
        return validation(d)
    here = d if "info" in d and "omega" in d and "loss_target" in d else plan
    out = {}
    for k, v in d.items():
        out[k] = migrated(v, here) if k == "certificate" and isinstance(v, dict) else walk(v, here)
    return out


def main(paths: list[str]) -> None:
    if not paths:
        paths = [p for p in subprocess.run(["git", "ls-files", "*.json"], capture_output=True, text=True,
                                           check=True).stdout.split() if Path(p).is_file()]
    for p in map(Path, paths):
        text = p.read_text(encoding="utf-8")
        if "certificate" not in text and "ci_low" not in text:
            continue
        try:
            doc = json.loads(text)
        except ValueError:
            continue
        new = walk(doc)
        if new == doc:
            continue
        found = []

        def check(d):
            if isinstance(d, dict):
                if d.get("format") == "depl.certificate/2":   # a --json capture: without what it printed beside
                    found.append(Certificate.from_json({k: v for k, v in d.items() if k not in PRINTED}, str(p)))
                for v in d.values():
                    check(v)
            elif isinstance(d, list):
                for v in d:
                    check(v)

        check(new)
        lines = text.split("\n", 2)
        indent = len(lines[1]) - len(lines[1].lstrip(" ")) if text.startswith("{\n") else None
        body = dumps(new) if indent is None else json.dumps(new, indent=indent, allow_nan=False)
        p.write_text(body + ("\n" if text.endswith("\n") else ""), encoding="utf-8")
        print(f"{p}: {len(found)} certificate(s) rewritten")


if __name__ == "__main__":
    main(sys.argv[1:])
