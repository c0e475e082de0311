"""The docs example's table: cost and coverage of each loss model's plan (from the files the example wrote)."""

import json
import sys
from pathlib import Path

from depl.certificate import Certificate
from depl.loss.base import segments

docs = Path(sys.argv[1])
rows = ["| loss model | plan (versions × epochs, cluster) | cost | certified q_ω(ℓ(K)) | measured mean ℓ(K) (sd) | "
        "measured q_ω | coverage P(ℓ(K) ≤ ℓmax) | one-sided 1 − α bounds | verdict |",
        "|---|---|---|---|---|---|---|---|---|"]
for m in ("increments", "level"):
    plan_f, val_f = docs / f"plan-{m}.json", docs / f"plan-{m}-validate.json"
    if not plan_f.is_file():
        rows.append(f"| {m} | infeasible (see plan-{m}.txt) | — | — | — | — | — | — | — |")
        continue
    p = json.loads(plan_f.read_text())
    runs = segments([(e["model"], e["cluster"]) for e in p["epochs"]])
    sched = ", ".join(f"{mod} ×{n} on {cl}" for (mod, cl), n in runs) + f"; data {'+'.join(p['datasets'])}"
    if not val_f.is_file():
        rows.append(f"| {m} | {sched} | {p['cost']:.1f} | {p['loss_quantile']:.3f} | not validated | | | | |")
        continue
    c = Certificate.from_json(json.loads(val_f.read_text()), str(val_f))   # depl validate's report: its certificate
    v = c.evidence
    verdict = "not refuted" if c.verdict.not_refuted else "**refuted**"
    rows.append(f"| {m} | {sched} | {p['cost']:.1f} | {p['loss_quantile']:.3f} | {v['final_mean']:.3f} ({v['final_sd']:.3f}) | "
                f"{v['final_quantile']:.3f} | {v['coverage']:.3f} ({c.hits}/{c.runs}) | "
                f"[{c.lower_bound:.3f}, {v['upper_bound']:.3f}] | {verdict} |")
print("\n".join(rows))
