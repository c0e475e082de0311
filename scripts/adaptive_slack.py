"""What a closed-loop run of each coverage-table cell may spend: δ and the gap a stop must clear (docs/adaptive.md).

    python scripts/adaptive_slack.py [--gap-from docs/adaptive-store] [--md TABLE.md]

For each cell's calibrated plan (docs/coverage-store/plans), as `depl run --adaptive` would run it (its
validation split, its epoch-0 decision): the plan's P(ℓ(K) ≤ ℓmax) as the law reads it (V₀, the point estimate
the stops spent before), the runs it is counted on, its one-sided 95 % Clopper–Pearson lower bound L, and
δ = max(0, L − ω) against V₀ − ω; then the validation–test gap measured on the cell's committed adaptive runs
(depl.gap: per seed, the largest test − validation loss over its epochs with validation loss ≤ ℓmax) and the
margin t a stop's validation loss must clear (v < ℓmax − t) at δ, against the sample-count Gaussian's
z₁₋δ · gap_sd (gap_sd: the median of the runs' recorded per-model sd).  Trains nothing.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
from scipy import stats

from depl.gap import measure
from depl.plan import Plan
from depl.store import Store
from depl.train import adaptive as ad

ROOT = Path(__file__).resolve().parent.parent
CELLS = ["mnist1d-small-w0.9", "mnist1d-small-w0.95", "digits-small-w0.9", "digits-small-w0.95",
         "mnist1d-noniid-w0.9", "mnist1d-noniid-w0.95"]


def margin(delta: float, sd: float) -> float:
    return math.inf if delta <= 0 else float(stats.norm.isf(delta) * sd)


def row(cell: str, gap_from: Path | None) -> str:
    plan = Plan.load(ROOT / "docs" / "coverage-store" / "plans" / f"{cell}-calibrated.json")
    job = ad.adaptive_job(plan)
    pol = ad.policy_for(plan, job)
    d0 = pol.initial()
    r = pol.slack_record
    old = max(0.0, d0.p_new - plan.omega)
    cells = [cell.replace("-w", " ω "), f"{d0.p_new:.4f}" + (" (re-planned)" if d0.action == "replan" else ""),
             f"{r.met}/{r.runs}", f"{r.lower:.4f}", f"{old:.4f}", f"{r.delta:.4f}"]
    if gap_from is None:
        return "| " + " | ".join(cells) + " |"
    store = gap_from / f"{cell}-calibrated"
    gap = measure([store], plan.loss_target, job.data.to_json())
    with Store(str(store / "runs.sqlite"), readonly=True) as st:
        (run,) = st.runs()
        sds = [d["gap_sd"] for d in st.decisions(run["run_id"]) if d["epoch"] > 0 and d.get("gap_sd")]
    sd = float(np.median(sds))
    show = lambda t: "none" if not math.isfinite(t) else f"{t:.4f}"  # noqa: E731
    cells += [f"{gap.seeds}", f"{np.median(gap.maxima):+.4f} / {max(gap.maxima):+.4f}",
              f"{show(gap.threshold(old))} vs {show(margin(old, sd))}",
              f"{show(gap.threshold(r.delta))} vs {show(margin(r.delta, sd))}"]
    return "| " + " | ".join(cells) + " |"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gap-from", type=Path, help="a folder of the cells' adaptive stores (docs/adaptive-store)")
    p.add_argument("--md", type=Path, help="write the table here")
    args = p.parse_args()
    head = ["cell", "V₀ (point)", "met/runs", "L (95 %)", "V₀ − ω (spent before)", "δ = max(0, L − ω)"]
    if args.gap_from:
        head += ["seeds measured", "largest gap per seed: median / max", "margin t at V₀ − ω: measured vs Gaussian",
                 "margin t at δ: measured vs Gaussian"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += [row(c, args.gap_from) for c in CELLS]
    md = "\n".join(lines) + "\n"
    print(md)
    if args.md:
        args.md.write_text(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
