"""DepL against its baselines on real runs: every method's plan certified by real training, then run on fresh seeds.

    python scripts/real_comparison.py fashion-small --out docs/results/real-fashion --first-seed 4000000
    python scripts/real_comparison.py fashion-small --out docs/results/real-fashion-1.1 --loss 1.1 --first-seed 4500000
    python scripts/real_comparison.py fashion-small --out docs/results/real-fashion --stored   # the table, no training

For each method — depl, optimal, best-exp and best-exp-loss (the two readings of the paper's best-exp,
docs/planner.md) and the one-model reference (depl on the scenario with its first version only: no pruning, no
switch) — at the scenario's ω, ℓmax and deadline:

1. the law's plan (`depl plan SCENARIO --method M`): what the paper's model-based comparison compares;
2. the certified search restricted to that method's plans (`depl plan SCENARIO --certify --method M`): its
   candidates are M's plans at stricter levels and targets, the cheapest the runs certify is returned (exit 3: none
   within --max-runs; 4: every candidate refuted);
3. the plan returned, on `--fresh` seeds no search saw (`depl validate`): its true coverage, one-sided lower bound.

Seeds, declared before they train (docs/certificate.md, "Seeds used"): method i (in the order above) searches from
F + 20000·i and is run fresh on F + 20000·i + 10000 … + N − 1.  Each step is a depl command, so a killed run
resumes where it stopped, and a rerun on complete stores trains nothing.  Writes OUT/METHOD/ (plan-law.json,
plan.json, runs.sqlite, search-candidates.json, fresh/), OUT/comparison.json, OUT/comparison.md and
OUT/comparison.png.  `--stored` rewrites the last three from the committed files, without depl training anything.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from depl.certificate import Certificate
from depl.fit.report import toml_dumps
from depl.loss.base import segments
from depl.scenario import ScenarioError, load_scenario as load, scenario_dict

METHODS = ("depl", "optimal", "best-exp", "best-exp-loss", "one-model")
WHAT = {"depl": "DepL", "optimal": "optimal (MILP)", "best-exp": "best-exp (cost-minimising, tightened mean)",
        "best-exp-loss": "best-exp-loss (paper's words: lowest expected loss)",
        "one-model": "one-model reference (first version only, depl's planner)"}
STRIDE, FRESH_AT = 20000, 10000


def scenarios(name: str, out: Path, loss: float | None = None) -> tuple[Path, Path]:
    """OUT/scenario.toml, the scenario with its law as fitted (no [calibration]: its table certifies only the
    schedules profiled for it, a route of its own, and the one-model scenario cannot keep the other versions'
    experiments), which every method plans with; OUT/one-model/scenario.toml, the same with its first model version
    only (no pruned version, no switch): the one-model reference.  `loss`: ℓmax instead of the scenario's."""
    d = scenario_dict(load(name))
    d.pop("calibration", None)
    if loss is not None:
        d["target"] = {**d["target"], "loss": loss}
    one = {**d, "models": d["models"][:1], "switches": [], "name": f"{d['name']}-one-model"}
    paths = out / "scenario.toml", out / "one-model" / "scenario.toml"
    for path, doc, what in ((paths[0], d, "its law as fitted (no [calibration])"),
                            (paths[1], one, f"its first version only ({one['models'][0]['name']}), the law as fitted")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(toml_dumps(doc, header=f"{name} with {what}: written by scripts/real_comparison.py"))
    return paths


def depl(*args: str, err: bool = False) -> subprocess.CompletedProcess:
    """A depl command, its progress on this terminal (`err`: its standard error kept instead), its --json on stdout."""
    cmd = [sys.executable, "-m", "depl", *args]
    print("$ depl " + " ".join(args), file=sys.stderr, flush=True)
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE if err else None, text=True,
                          env={**os.environ, "COLUMNS": "120"})


def schedule(plan: dict) -> str:
    """A plan file's epochs as a person reads them: version ×epochs on cluster, in order."""
    return ", ".join(f"{m} ×{n} on {c}" for (m, c), n in segments([(e["model"], e["cluster"]) for e in plan["epochs"]]))


def run_method(method: str, i: int, out: Path, a: argparse.Namespace, whole: Path, one: Path) -> None:
    """`method`'s law plan, certified search and fresh runs (module docstring); `whole`, `one`: `scenarios`."""
    folder = out / method
    folder.mkdir(parents=True, exist_ok=True)
    scen, planner = (str(one), "depl") if method == "one-model" else (str(whole), method)
    law = depl("plan", scen, "--method", planner, "--out", str(folder / "plan-law.json"), "--json", err=True)
    if law.returncode != 0:   # no plan of this method at the target: its certified search has no candidate either
        why = law.stderr.strip().splitlines()[0] if law.stderr.strip() else f"exit {law.returncode}"
        (folder / "search.json").write_text(json.dumps({"exit": law.returncode, "no_plan": why}) + "\n")
        return
    first = a.first_seed + STRIDE * i
    search = depl("plan", scen, "--certify", "--method", planner, "--first-seed", str(first),
                  "--max-runs", str(a.max_runs), "--batch", str(a.batch), "--workers", str(a.workers),
                  "--keep-models", "none", "--store", str(folder / "runs.sqlite"), "--out", str(folder / "plan.json"),
                  "--png", str(folder / "candidates.png"), "--json")
    if search.returncode not in (0, 3, 4):   # 3: undecided within --max-runs, 4: every candidate refuted
        raise SystemExit(f"depl plan --certify --method {planner} exited {search.returncode}: see its message above")
    (folder / "search.json").write_text(json.dumps({"exit": search.returncode}) + "\n")
    if search.returncode != 0:
        return
    fresh = depl("validate", scen, str(folder / "plan.json"), "--seeds", str(a.fresh),
                 "--first-seed", str(first + FRESH_AT), "--workers", str(a.workers), "--seed-batch", str(a.batch),
                 "--out", str(folder / "fresh"), "--png", str(folder / "fresh" / "plan-validate.png"), "--json")
    if fresh.returncode not in (0, 4):
        raise SystemExit(f"depl validate of {folder / 'plan.json'} exited {fresh.returncode}")


def row(out: Path, method: str) -> dict:
    folder = out / method
    r: dict = {"method": method, "what": WHAT[method]}
    if (folder / "plan-law.json").is_file():
        law = json.loads((folder / "plan-law.json").read_text())
        r.update(law_cost=law["cost"], law_schedule=schedule(law))
    status = json.loads((folder / "search.json").read_text()) if (folder / "search.json").is_file() else {}
    r["search_exit"] = status.get("exit")
    if "no_plan" in status:
        r["no_plan"] = status["no_plan"]
    if (folder / "plan.json").is_file() and status.get("exit") == 0:
        p = json.loads((folder / "plan.json").read_text())
        c = Certificate.from_json(p["info"]["certificate"], str(folder / "plan.json"))
        e = c.evidence
        r.update(cost=p["cost"], schedule=schedule(p), certified_runs=c.runs, certified_hits=c.hits,
                 certified_lower=c.lower_bound, alpha=c.alpha, runs_trained=e["runs_trained"],
                 seed_epochs=e["seed_epochs"], runs_cost=e["runs_cost"], search_seconds=e["seconds"],
                 candidates=len(e["candidates"]))
    val = folder / "fresh" / "plan-validate.json"
    if val.is_file():
        v = Certificate.from_json(json.loads(val.read_text()), str(val))
        r.update(fresh_runs=v.runs, fresh_hits=v.hits, fresh_lower=v.lower_bound, fresh_verdict=v.verdict.value,
                 fresh_seeds=v.seeds)
    return r


def table(rows: list[dict], scenario: str, omega: float, lmax: float) -> str:
    d = next((r for r in rows if r["method"] == "depl"), {})
    lines = [f"DepL against its baselines on real runs: {scenario}, ω = {omega:g}, ℓmax = {lmax:g} "
             "(scripts/real_comparison.py).", "",
             "| method | the law's plan: cost | certified plan | certified cost | search: runs trained (runs' cost) | "
             "fresh runs meeting ℓmax (one-sided lower bound) | DepL's saving, certified | DepL's saving, by the law |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        law = f"{r['law_cost']:.1f}" if "law_cost" in r else "no plan"
        if "cost" in r:
            cert = r["schedule"]
            cost = f"{r['cost']:.1f}"
            search = f"{r['runs_trained']} ({r['runs_cost']:,.0f})"
        else:
            cert = ("no plan at the target" if "no_plan" in r
                    else {3: "undecided", 4: "refuted"}.get(r.get("search_exit"), "—"))
            cost, search = "—", "—"
        fresh = (f"{r['fresh_hits']}/{r['fresh_runs']} ({r['fresh_lower']:.3f})" if "fresh_runs" in r else "—")
        saving = (f"{(r['cost'] - d['cost']) / r['cost']:+.1%}" if "cost" in r and "cost" in d
                  and r["method"] != "depl" else "—")
        by_law = (f"{(r['law_cost'] - d['law_cost']) / r['law_cost']:+.1%}" if "law_cost" in r and "law_cost" in d
                  and r["method"] != "depl" else "—")
        lines.append(f"| {r['what']} | {law} | {cert} | {cost} | {search} | {fresh} | {saving} | {by_law} |")
    return "\n".join(lines) + "\n"


def figure(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    names = [r["method"] for r in rows]
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r.get("law_cost", 0) for r in rows], 0.4, label="the law's plan")
    ax.bar([x + 0.2 for x in xs], [r.get("cost", 0) for r in rows], 0.4, label="certified on real runs")
    ax.set_xticks(list(xs), names, rotation=20)
    ax.set_ylabel("cost of the plan (eq. 2)")
    ax.legend()
    for x, r in zip(xs, rows):
        if "no_plan" in r:
            ax.text(x, 0, "no plan", ha="center", va="bottom", rotation=90, color="grey")
        if "fresh_runs" in r:
            cov = r["fresh_hits"] / r["fresh_runs"]
            bx.errorbar(x, cov, yerr=[[cov - r["fresh_lower"]], [0]], fmt="o", capsize=4, color="C1")
    omega = rows[0].get("omega")
    if omega is not None:
        bx.axhline(omega, ls="--", color="grey", label=f"ω = {omega:g}")
        bx.legend()
    bx.set_xticks(list(xs), names, rotation=20)
    bx.set_ylabel("fresh runs meeting ℓmax\n(bar: one-sided lower bound)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scenario")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--first-seed", type=int, default=4000000)
    ap.add_argument("--fresh", type=int, default=200, help="fresh seeds per certified plan")
    ap.add_argument("--loss", type=float, help="ℓmax instead of the scenario's [target] loss")
    ap.add_argument("--max-runs", type=int, default=500)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--stored", action="store_true", help="write the table from the files in OUT; train nothing")
    a = ap.parse_args()
    methods = [m for m in a.methods.split(",") if m]
    for m in methods:
        if m not in METHODS:
            ap.error(f"--methods: {m!r} is not one of {', '.join(METHODS)}")
    if a.stored and not (a.out / "scenario.toml").is_file():
        ap.error(f"--stored: {a.out} holds no comparison (no scenario.toml): run it without --stored first")
    if not a.stored:
        try:
            whole, one = scenarios(a.scenario, a.out, a.loss)
        except ScenarioError as e:
            ap.error(str(e))
        for m in methods:
            run_method(m, METHODS.index(m), a.out, a, whole, one)
    s = load(str(a.out / "scenario.toml"))   # the target the methods planned for
    rows = [row(a.out, m) for m in methods]
    for r in rows:
        r["omega"] = s.target.quantile
    (a.out / "comparison.json").write_text(json.dumps({"scenario": a.scenario, "omega": s.target.quantile,
                                                        "loss_target": s.target.loss, "rows": rows}, indent=1) + "\n")
    text = table(rows, a.scenario, s.target.quantile, s.target.loss)
    (a.out / "comparison.md").write_text(text)
    figure(rows, a.out / "comparison.png", f"{a.scenario}: certified cost and fresh-run coverage per method")
    print(text)


if __name__ == "__main__":
    main()
