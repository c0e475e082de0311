"""What a closed-loop run of each coverage-table cell may spend: δ, what certifies it, and the gap a stop must clear
(docs/adaptive.md).

    python scripts/adaptive_slack.py [--gap-from docs/adaptive-store] [--md TABLE.md]

For each cell, the built-in scenario as shipped (its calibration: per-experiment scores, the fixed sequence) at the
cell's ℓmax and ω with α = 0.05, its plan as `depl run --adaptive` would run it (its validation split, its
epoch-0 decision): the slack the earlier rule read after the planner's choice from the runs that made it
(δ = max(0, L − ω), L their one-sided Clopper–Pearson lower bound at α/E), and today's δ for that plan (none: it is
certified at ω only); then the plan `depl plan --slack D` makes for D = 0.01 and 0.02 (certified at ω + D by the
calibration runs' fixed sequence): whether it is, its cost against the ω plan's, and the δ a run of it spends (0
where the run does not train it as certified — a carved validation split).  With `--gap-from`, the margin t a stop's
validation loss must clear at that δ (v < ℓmax − t) by the gap measured on the cell's committed adaptive runs
(depl.gap; "other data" where today's plan trains other data than those runs did) against the sample-count
Gaussian's z₁₋δ · gap_sd (gap_sd: the median of the runs' recorded per-model sd).
Trains nothing.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
from scipy import stats

from depl.certificate import Certificate, clopper_pearson_lower
from depl.gap import measure
from depl.plan import Plan
from depl.store import Store
from depl.train.loops import adaptive as ad
from depl.workflows.errors import BadInput, Unreachable
from depl.workflows.planning import load, retarget
from depl.workflows.planning import plan as plan_workflow

ROOT = Path(__file__).resolve().parent.parent
CELLS = ["mnist1d-small-w0.9", "mnist1d-small-w0.95", "digits-small-w0.9", "digits-small-w0.95",
         "mnist1d-noniid-w0.9", "mnist1d-noniid-w0.95"]
SLACKS = (0.01, 0.02)
ALPHA = 0.05


def margin(delta: float, sd: float) -> float:
    return math.inf if delta <= 0 else float(stats.norm.isf(delta) * sd)


def show(t: float) -> str:
    return "none" if not math.isfinite(t) else f"{t:.4f}"


def row(cell: str, gap_from: Path | None) -> str:
    committed = Plan.load(ROOT / "docs" / "coverage-store" / "plans" / f"{cell}-calibrated.json")
    task, omega = cell.rsplit("-w", 1)
    # the built-in as shipped (its calibration scores each experiment: the fixed sequence), at the cell's ℓmax and ω
    scenario = retarget(load(task), loss=committed.loss_target, quantile=float(omega), alpha=ALPHA)
    try:
        plan = plan_workflow(scenario).plan   # certified at ω with confidence 1 − α
    except Unreachable:
        n = len(SLACKS) * (4 if gap_from else 3) + (2 if gap_from else 0)
        return "| " + " | ".join([cell.replace("-w", " ω "), f"no schedule certified at ω (α = {ALPHA:g})", "–", "0"]
                                 + ["–"] * n) + " |"
    job = ad.adaptive_job(plan)
    c = Certificate.of_plan(plan.info)
    after = (max(0.0, clopper_pearson_lower(c.hits, c.runs, c.alpha / c.evidence["experiments"]) - plan.omega)
             if c is not None and c.runs else math.nan)
    pol = ad.policy_for(plan, job)
    pol.initial()
    cells = [cell.replace("-w", " ω "), f"{c.hits}/{c.runs}" if c is not None else "None/None", f"{after:.4f}", f"{pol.slack:.4f}"]
    gap = sd = None
    if gap_from is not None:
        store = gap_from / f"{cell}-calibrated"
        try:
            gap = measure([store], plan.loss_target, job.data.to_json())
        except ValueError:   # the committed runs are of other data than today's plan: the gap is not theirs
            gap = None
        with Store(str(store / "runs.sqlite"), readonly=True) as st:
            (run,) = st.runs()
            sds = [d["gap_sd"] for d in st.decisions(run["run_id"]) if d["epoch"] > 0 and d.get("gap_sd")]
        sd = float(np.median(sds))
    for d in SLACKS:
        try:
            made = plan_workflow(scenario, slack=d).plan
        except (Unreachable, BadInput) as e:
            cells += ["not certified" if isinstance(e, Unreachable) else "refused", "–", "0"]
            cells += ["–"] if gap_from is not None else []
            continue
        p = ad.policy_for(made, ad.adaptive_job(made))
        p.initial()
        r = p.slack_record
        cells += [f"{made.info['certificate']['met']}/{made.info['certificate']['runs']}",
                  f"{made.cost:.1f} vs {plan.cost:.1f} ({made.cost / plan.cost - 1:+.1%})",
                  f"{r.delta:.4f}" + ("" if r.delta > 0 else f" ({r.why.split('(')[0].strip()})")]
        if gap_from is not None:
            measured = show(gap.threshold(r.delta)) if gap is not None else "other data"
            cells += [f"{measured} vs {show(margin(r.delta, sd))}"]
    if gap_from is not None:
        cells.insert(4, f"{gap.seeds}" if gap is not None else "other data")
        cells.insert(5, f"{np.median(gap.maxima):+.4f} / {max(gap.maxima):+.4f}" if gap is not None else "–")
    return "| " + " | ".join(cells) + " |"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gap-from", type=Path, help="a folder of the cells' adaptive stores (docs/adaptive-store)")
    p.add_argument("--md", type=Path, help="write the table here")
    args = p.parse_args()
    head = ["cell", "met/runs (at ω)", "δ read after selection (before)", "δ today"]
    if args.gap_from:
        head += ["gap seeds", "largest gap per seed: median / max"]
    for d in SLACKS:
        head += [f"--slack {d:g}: met/runs at ω + {d:g}", "cost vs the ω plan's", "δ"]
        head += ["margin t at δ: measured vs Gaussian"] if args.gap_from else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += [row(c, args.gap_from) for c in CELLS]
    md = "\n".join(lines) + "\n"
    print(md)
    if args.md:
        args.md.write_text(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
