"""results.md's sections on the two readings of best-exp, the two cost models and the map (issue 13).

Everything here is read from finished `Results`: the sweep under both cost
models and the map's records.
"""

from __future__ import annotations

import math

import numpy as np

from ..experiments.config import COMBINATIONS, COST_MODELS, PAPER_SAVING, READINGS
from ..experiments.findings import findings, saving_over_best_exp
from ..experiments.map import BUILT_IN, GRIDS, LABELS, PARAMS, MapSummary, summary
from ..experiments.results import Results
from .md import cost_cell, pct, segs, table

# The claims of findings(), in its order, named without the reading of best-exp
CLAIMS = ("loose target → DepL trains \"intermediate\" only (Fig. 7)",
          "tight target → DepL trains all three versions (Fig. 7)",
          "best-exp leans on \"fast-unsteady\" more than DepL (Figs. 7–8)",
          "best-exp runs more epochs than DepL",
          "DepL saves over 27% of best-exp's cost",
          "best-exp's 1st–99th percentile band is wider (Fig. 9)")
MAP_CLAIM = {0: "share_loose_int", 1: "share_tight_all", 4: "share_points_27"}  # claim index -> MapSummary field


def combo(reading: str, cost_model: str) -> str:
    return f"{reading} × {cost_model}"


def savings(r: Results, network: str, reading: str, cost_model: str) -> list[float]:
    """DepL's saving over `reading` at every target where both planned."""
    out = [saving_over_best_exp(r, network, t, reading=reading, cost_model=cost_model) for t in r.config.targets]
    return [s for s in out if not math.isnan(s)]


def _range(s: list[float]) -> str:
    if not s:
        return "—"
    return (f"{min(s):.1%} … {max(s):.1%}, ≥ 27% at {sum(x >= PAPER_SAVING - 1e-12 for x in s)} of {len(s)} targets")


def summaries(r: Results) -> dict[tuple[str, str], MapSummary]:
    return {(b, c): summary(r.map, b, c) for b, c in COMBINATIONS} if r.map else {}


def readings_headline(r: Results) -> list[str]:
    """One line per combination: DepL's saving on both networks and in the map."""
    sums = summaries(r)
    out = []
    for b, c in COMBINATIONS:
        s = [x for net in r.config.networks for x in savings(r, net, b, c)]
        line = f"* **{combo(b, c)}** — DepL saves {_range(s)} (both networks)"
        if (b, c) in sums:
            m = sums[(b, c)]
            line += (f"; in the map ≥ 27% at {m.share_points_27:.0%} of {m.points} parameter points "
                     f"(largest {m.max_saving:.1%})")
        out.append(line + ".")
    return out


def readings_section(r: Results) -> list[str]:
    L = ["## Both readings of best-exp × both cost models", "",
         "*best-exp* is SPEC's reading: the cost-minimising planner against a mean target tightened until the",
         "99th percentile meets ℓmax. *best-exp-loss* is the paper's words (\"optimizes the expected loss\"):",
         "the versions of the lowest expected loss, cost-blind, then the fewest epochs meeting the quantile at",
         "the cheapest placement (docs/planner.md). *per-epoch* is eq. (2) as printed (κ·x per epoch, whatever",
         "the epoch lasts); *resource-time* charges κ·x·T(k) per epoch (what a cloud bill charges), plus β.",
         "DepL and the best-exps plan under the same cost model in each column.", ""]
    for net in r.config.networks:
        rows = [[b, *[_range(savings(r, net, b, c)) for c in COST_MODELS]] for b in READINGS]
        L += [f"### {net}: DepL's saving over best-exp", ""]
        L += table(["reading of best-exp", *COST_MODELS], rows)
        rows = []
        for c in COST_MODELS:
            for t in r.config.targets:
                os_ = [r.outcome(net, t, m, c) for m in ("depl", *READINGS)]
                rows.append([c, f"{t:g}", *[cost_cell(o) for o in os_],
                             *[pct(saving_over_best_exp(r, net, t, reading=b, cost_model=c)) for b in READINGS],
                             " / ".join(str(o.K) if o.feasible else "—" for o in os_),
                             " / ".join(segs(o) for o in os_)])
        L += table(["cost model", "ℓmax", "cost depl", *[f"cost {b}" for b in READINGS],
                    *[f"saving vs {b}" for b in READINGS], "K (depl / " + " / ".join(READINGS) + ")",
                    "schedule (depl / " + " / ".join(READINGS) + ")"], rows)
    return L


def claims_section(r: Results) -> list[str]:
    """Claim by claim, which reading and cost model reproduce it (on both networks, and in the map)."""
    sums = summaries(r)
    nets = r.config.networks
    verdict = {(b, c, net): findings(r, net, b, c) for b, c in COMBINATIONS for net in nets}
    L = ["## Claim by claim: which reading and cost model reproduce the paper", "",
         "Each cell: the claim on the sweep's targets (holds at every target / partly / does not hold), for "
         "each network; where the map measures the claim, the share of its parameter points where it appears.",
         ""]
    rows, lines = [], []
    for i, claim in enumerate(CLAIMS):
        row = [claim]
        full, part = [], []
        for b, c in COMBINATIONS:
            fs = [verdict[(b, c, net)][i].holds if len(verdict[(b, c, net)]) > i else "—" for net in nets]
            text = " / ".join(fs)
            if i in MAP_CLAIM and (b, c) in sums:
                text += f"; map {getattr(sums[(b, c)], MAP_CLAIM[i]):.0%}"
            row.append(text)
            if all(f == "holds" for f in fs):
                full.append(combo(b, c))
            elif any(f in ("holds", "partly") for f in fs):
                part.append(combo(b, c))
        rows.append(row)
        said = (f"**reproduced** on both networks under {', '.join(full)}" if full else
                "**not reproduced** on both networks under any of the four combinations")
        if part:
            said += f"; partly (some targets or one network) under {', '.join(part)}"
        lines.append(f"* {claim}: {said}.")
    L += table(["claim (" + " / ".join(nets) + ")", *[combo(b, c) for b, c in COMBINATIONS]], rows)
    L += lines + [""]
    L.append("DepL against the optimum is checked under eq. (2) as printed only (the optimum is run there): see the "
             "headline.")
    return L + [""]


def map_section(r: Results, names: dict) -> list[str]:
    if not r.map:
        return []
    g = GRIDS[r.config.map_grid]
    sums = summaries(r)
    L = ["## The map: where the paper's claims hold over the parameters it leaves out", "",
         f"`{g.network}` with Table I's E[x], Var[x] and work kept; grid *{g.name}* ({len(g.points())} points × "
         f"{len(g.targets)} targets × DepL and both best-exps × both cost models = {g.size} plans; "
         "`depl.experiments.map`). The built-in file is the point "
         + ", ".join(f"{LABELS[p]} = {BUILT_IN[p]:.3g}" for p in PARAMS) + "."
         + (" Every A ratio pair is crossed with the built-in B, jump and Tmax and with each of them changed "
            "alone (not all their combinations)." if g.star else " Every combination of the values below is a point."),
         ""]
    L += table(["parameter", "values"], [[LABELS[p], ", ".join(f"{v:.3g}" for v in getattr(g, p))] for p in PARAMS]
               + [[LABELS["target"], ", ".join(f"{t:g}" for t in g.targets)]])
    L += ["A point *reaches 27%* when DepL saves ≥ 27% over that best-exp at one of its targets; *loose → "
          "intermediate only* when DepL trains only \"intermediate\" at the loosest target; *tight → all three* "
          "when it trains all three versions at the tightest; *all at once* when the three hold at one point.", ""]
    rows = []
    for (b, c), m in sums.items():
        rows.append([b, c, str(m.points), f"{m.share_points_27:.1%}", f"{m.share_cells_27:.1%} of {m.cells}",
                     f"{m.max_saving:.1%}", f"{m.built_in_max_saving:.1%}" if not math.isnan(m.built_in_max_saving)
                     else "—", f"{m.share_loose_int:.1%}", f"{m.share_tight_all:.1%}", f"{m.share_story:.1%}"])
    L += table(["reading", "cost model", "points", "reaches 27%", "(point, target) pairs ≥ 27%", "largest saving",
                "largest saving at the built-in point", "loose → intermediate only", "tight → all three",
                "all at once"], rows)
    for b, c in COMBINATIONS:
        key = f"map-{b}-{c}"
        if key in names:
            L += [f"**{key}** — DepL's saving over {b} under the {c} cost model (top: largest saving over the "
                  "parameters not shown, the share of cells at ≥ 27% written in each) and where the patterns of "
                  "Fig. 7 appear (bottom: share of points)", "", f"![{key}]({names[key]})", ""]
    L += ["The full grid: `depl reproduce --out docs/results --map full` (progress and ETA on stderr; every plan "
          "is appended to `map.jsonl` as it is made, and a rerun skips the plans already there). Its expected "
          "duration is in the timing section.", ""]
    return L


def map_timing(r: Results) -> list[str]:
    """How long the map's plans took, and what the other grids would take at that pace."""
    if not r.map:
        return []
    secs = np.array([rec["seconds"] for rec in r.map], float)
    per = float(secs.mean())
    L = ["### The map", "",
         f"{len(secs)} plans, {secs.sum() / 60:.1f} min of solve time ({per:.2f} s per plan on average, one core); "
         "at that pace:", ""]
    L += table(["grid", "plans", "expected time"],
               [[name, str(g.size), f"{g.size * per / 3600:.1f} h" if g.size * per > 3600 else f"{g.size * per / 60:.0f} min"]
                for name, g in GRIDS.items()])
    return L


__all__ = ["CLAIMS", "readings_headline", "readings_section", "claims_section", "map_section", "map_timing",
           "summaries", "savings"]
