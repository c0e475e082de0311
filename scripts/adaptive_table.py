"""The closed loop on the coverage table's tasks: adaptive runs of each cell's calibrated plan, against the open loop.

For each cell (task, ω) it runs, on the held-out seeds of the open-loop coverage table (docs/coverage.md,
seeds 10000..10199, never used to fit or calibrate),

    depl validate TASK PLAN --adaptive --rule slack --seeds N --first-seed F --out OUT/CELL --json

(PLAN: the cell's committed plan, docs/coverage-store/plans/TASK-wΩ-calibrated.json) and sets its outcome
beside the open loop's on the same seeds (docs/coverage-store/runs.sqlite): coverage with Clopper–Pearson,
the stops, mean cost, and the seeds one execution covers and the other does not.  A seed's adaptive run
trains the open loop's epochs until it stops (same seed, same data: on MNIST-1D, whose validation split is
fresh samples), so the pairs show what each stop cost or saved.

    python scripts/adaptive_table.py --out DIR --md TABLE.md   # 18 min from scratch, 2 jobs
    python scripts/adaptive_table.py --out DIR --gap-from docs/adaptive-store   # stops by the gap measured there
    python scripts/adaptive_table.py --rule conditional --cells mnist1d-small:1.5@0.9 --out DIR   # 29 min
    python scripts/adaptive_table.py --out docs/adaptive-store --stored --md TABLE.md   # the committed runs, judged

Resumes: a cell's runs already in OUT are not trained again (depl validate resumes).  `--stored` trains nothing:
it judges the one adaptive run each cell's store holds, whichever rule it was run by (docs/adaptive-store: the
runs of 2026-11, δ = the point estimate V₀ − ω, the gap modelled).  Exit 4 if any cell's adaptive coverage is
refuted.
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from depl.certificate import DEFAULT_ALPHA, Certificate
from depl.paths import relative
from depl.plan import Plan
from depl.store import Store
from depl.train.loops import adaptive as ad
from depl.validate import coverage

ROOT = Path(__file__).resolve().parent.parent
CELLS = [("mnist1d-small:1.5", 0.9), ("mnist1d-small:1.5", 0.95), ("digits-small", 0.9), ("digits-small", 0.95),
         ("mnist1d-noniid", 0.9), ("mnist1d-noniid", 0.95)]


def cell_name(task: str, omega: float) -> str:
    return f"{task.split(':')[0]}-w{omega:g}-calibrated"


def run_cell(task: str, omega: float, args) -> dict:
    name = cell_name(task, omega)
    plan = args.store / "plans" / f"{name}.json"
    out = args.out / name
    if args.stored:
        return {"task": task, "omega": omega, "name": name, **stored(out, args), **paired(task, omega, out, args)}
    cmd = [sys.executable, "-m", "depl.cli", "validate", task.split(":")[0], str(plan), "--adaptive", "--rule", args.rule,
           "--seeds", str(args.seeds), "--first-seed", str(args.first_seed), "--out", str(out), "--json",
           "--threads", "1"]
    if args.gap_from:
        cmd += ["--gap-from", str(args.gap_from / name)]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode not in (0, 4):
        raise SystemExit(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stderr[-2000:]}")
    report = figures(json.loads(r.stdout))
    report["plan_file"] = relative(plan, args.out / "adaptive.json")   # relative to adaptive.json (depl.paths)
    shown = [str(Path(a).relative_to(ROOT)) if a.startswith(str(ROOT) + "/") else a for a in cmd[3:]]
    return {"task": task, "omega": omega, "name": name, "command": " ".join(["depl", *shown]),
            "seconds": time.perf_counter() - t0, **report, **paired(task, omega, out, args, report["run_id"])}


def the_run(st: Store, run_id: str | None = None) -> dict:
    """The cell's adaptive run in its store: `run_id`, or the only one there."""
    runs = [r for r in st.runs() if r["run_id"].startswith("adaptive") and run_id in (None, r["run_id"])]
    if len(runs) != 1:
        raise SystemExit(f"{st.path}: {len(runs)} adaptive runs{'' if run_id is None else ' named ' + run_id}; "
                         "expected one")
    return runs[0]


def stored(out: Path, args) -> dict:
    """`depl validate --adaptive --json`'s figures of the run in the cell's store, read without training."""
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    with Store(str(out / "runs.sqlite"), readonly=True) as st:
        run = the_run(st)
        finals, costs, actions = ad.outcome(st, run["run_id"], seeds)
    plan = Plan.from_json(run["spec"]["plan"])
    c = coverage(finals, plan.loss_target, plan.omega, plan.alpha)
    cert = c.certificate(seeds, coverage=c.rate, mean_cost=float(np.nanmean(costs)), plan_cost=plan.cost,
                         actions=actions, adaptive=run["spec"].get("adaptive") or {}, run_id=run["run_id"])
    return figures(cert.to_json())


def figures(d: dict) -> dict:
    """A row's figures from the certificate `depl validate --adaptive --json` prints (kind validation)."""
    c = Certificate.from_json({k: v for k, v in d.items() if k != "exit_code"}, "depl validate --adaptive --json")
    e = c.evidence
    return {"adaptive": True, "runs": c.runs, "hits": c.hits, "coverage": e["coverage"], "ci_low": c.lower_bound,
            "ci_high": e["upper_bound"], "alpha": c.alpha, "omega": c.omega, "target": c.loss_target,
            "not_refuted": c.verdict.not_refuted, "mean_cost": e["mean_cost"], "plan_cost": e["plan_cost"],
            "actions": e["actions"], "rule": e["adaptive"], "run_id": e["run_id"]}


def paired(task: str, omega: float, out: Path, args, run_id: str | None = None) -> dict:
    """The adaptive seeds' stops and costs, and the open loop's outcome on the same seeds."""
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    st = Store(str(out / "runs.sqlite"), readonly=True)
    run = the_run(st, run_id)
    run_id = run["run_id"]
    finals, costs, actions = ad.outcome(st, run_id, seeds)
    ds = {s: st.decisions(run_id, s) for s in seeds}
    stopped = np.array([d[-1]["action"] == "stop" for d in ds.values()])
    epochs = np.array([d[-1]["epoch"] for d in ds.values()])
    # δ as the run recorded it (its spec); a run made before δ was recorded spent V₀ − ω, its epoch-0 P
    rule = run["spec"].get("adaptive") or {}
    slack = float(rule["slack"]["delta"]) if "slack" in rule else float(ds[seeds[0]][0]["p_new"]) - omega
    cov = json.loads((args.store / "coverage.json").read_text())
    (cell,) = [c for c in cov["cells"] if c["task"] == task.split(":")[0] and c["omega"] == omega
               and c["law"] == "calibrated"]
    db = sqlite3.connect(f"file:{args.store / 'runs.sqlite'}?mode=ro", uri=True)
    open_final = dict(db.execute("SELECT seed, test_loss FROM epochs WHERE run_id = ? AND epoch = ?",
                                 (cell["run_id"], cell["epochs"])).fetchall())
    opened = np.array([open_final.get(s, math.inf) for s in seeds])
    target = cell["target"]
    ok_a, ok_o = finals <= target, opened <= target
    c = coverage(opened, target, omega, float(cell.get("alpha", DEFAULT_ALPHA)))
    return {"slack": slack, "stops": int(stopped.sum()), "mean_epochs": float(epochs.mean()),
            "planned_epochs": int(cell["epochs"]), "open_cost": float(cell["cost"]), "open_hits": int(c.hits),
            "open_coverage": c.rate, "open_ci": list(c.ci), "lost": int((ok_o & ~ok_a).sum()),
            "gained": int((ok_a & ~ok_o).sum()), "stopped_failed": int((stopped & ~ok_a).sum()),
            "mean_final": float(np.mean(finals[np.isfinite(finals)])),
            "mean_open_final": float(np.mean(opened[np.isfinite(opened)]))}


def markdown(rows: list[dict], seeds: int, first: int, rule: str = "slack") -> str:
    head = (f"{seeds} held-out seeds ({first}..{first + seeds - 1}) per cell, the calibrated law's plan; "
            f"adaptive = `depl validate TASK PLAN --adaptive --rule {rule}`\n\n"
            "| task | ω | plan (open loop) | δ spent | open-loop coverage | adaptive coverage [one-sided 1 − α bounds] "
            "| verdict | stops | mean epochs | mean cost: open → adaptive | saved | seeds lost / gained |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        verdict = "holds" if r["not_refuted"] else "**refuted**"
        lines.append(
            f"| {r['task']} | {r['omega']:g} | {r['planned_epochs']} epochs, {r['open_cost']:.1f} | {r['slack']:.4f} "
            f"| {r['open_coverage']:.3f} ({r['open_hits']}/{r['runs']}) | {r['coverage']:.3f} ({r['hits']}/{r['runs']}) "
            f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}] | {verdict} | {r['stops']} | {r['mean_epochs']:.2f} "
            f"| {r['open_cost']:.1f} → {r['mean_cost']:.1f} | {100 * (1 - r['mean_cost'] / r['open_cost']):.1f} % "
            f"| {r['lost']} / {r['gained']} |")
    return head + "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True, help="folder for the cells' adaptive stores")
    p.add_argument("--store", type=Path, default=ROOT / "docs" / "coverage-store", help="the open-loop table's store")
    p.add_argument("--seeds", type=int, default=200)
    p.add_argument("--first-seed", type=int, default=10000)
    p.add_argument("--jobs", type=int, default=2, help="cells trained at once")
    p.add_argument("--rule", default="slack", choices=["slack", "conditional"], help="the closed loop's rule")
    p.add_argument("--cells", default="", help="TASK@OMEGA,... (default: the 6 cells of mnist1d-small:1.5, "
                                               "digits-small, mnist1d-noniid at ω 0.9 and 0.95)")
    p.add_argument("--md", type=Path, help="write the table here")
    p.add_argument("--gap-from", type=Path, help="a folder of the cells' stores (as --out writes them) the validation–"
                                                 "test gap is measured on (depl validate --gap-from DIR/CELL)")
    p.add_argument("--stored", action="store_true", help="train nothing: judge the adaptive run each cell's store "
                                                         "in OUT holds")
    args = p.parse_args()
    try:
        cells = CELLS if not args.cells else [(t, float(w)) for t, w in (c.split("@") for c in args.cells.split(","))]
    except ValueError:
        p.error(f"--cells {args.cells!r}: expected TASK@OMEGA,... (e.g. mnist1d-small:1.5@0.9)")
    missing = [cell_name(t, w) for t, w in cells if not (args.store / "plans" / f"{cell_name(t, w)}.json").is_file()]
    if missing:
        p.error(f"no plan for {', '.join(missing)} in {args.store / 'plans'} (cells of the coverage table only)")
    args.out.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda c: run_cell(*c, args), cells))
    if not args.stored:   # the runs' record (commands, seconds): written by the runs that trained them
        (args.out / "adaptive.json").write_text(json.dumps(rows, indent=1))
    md = markdown(rows, args.seeds, args.first_seed, args.rule)
    print(md)
    if args.md:
        args.md.write_text(md)
    return 4 if any(not r["not_refuted"] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
