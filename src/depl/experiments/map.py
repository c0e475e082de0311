"""A map over the parameters the paper leaves out: where do its claims hold?

The paper gives Table I's E[x], Var[x] and work per version; it leaves out
A_m, B_m, Tmax and the switch jumps.  A map point rescales them on
`paper-alexnet` (every other number of the built-in file is kept):

* `a_fu`, `a_ss` — A of fast-unsteady and of slow-steady over intermediate's
  A (1.5, kept); the built-in file has 2.0/1.5 = 4/3 and 1.2/1.5 = 0.8;
* `b` — every version's B_m times this (built-in 0.5, 1, 2);
* `jump` — every switch jump's location and scale times this;
* `tmax` — the deadline times this (built-in 60,000).

At every point and target ℓmax, DepL and both readings of best-exp plan under
both cost models.  Each plan is one JSON line appended to a file as soon as it
is made, and a line already in the file is not planned again: an interrupted
map resumes where it stopped.  Only the planners' certified costs enter the
map (no Monte Carlo: the sweep checks the planners by Monte Carlo already).

>>> len(GRIDS["tiny"].points()), GRIDS["tiny"].size
(1, 12)
"""

from __future__ import annotations

import itertools
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

from ..planners import Infeasible, Options, make_plan
from ..scenario import Scenario, load_scenario, parse_scenario, scenario_dict
from .config import COST_MODELS, PAPER_SAVING, READINGS, VERSIONS
from .results import Step, Results
from .variants import with_cost_model, with_loss_target

PARAMS = ("a_fu", "a_ss", "b", "jump", "tmax")
LABELS = {"a_fu": "A_fu / A_int", "a_ss": "A_ss / A_int", "b": "B_m × (built-in B_m)",
          "jump": "jump × (loc, scale)", "tmax": "Tmax × 60,000", "target": "target ℓmax"}
BUILT_IN = {"a_fu": 2.0 / 1.5, "a_ss": 1.2 / 1.5, "b": 1.0, "jump": 1.0, "tmax": 1.0}
MAP_METHODS = ("depl",) + READINGS


@dataclass(frozen=True)
class MapGrid:
    """The values of every parameter (tuples) and the targets planned at every point."""

    name: str
    a_fu: tuple[float, ...]
    a_ss: tuple[float, ...]
    b: tuple[float, ...]
    jump: tuple[float, ...]
    tmax: tuple[float, ...]
    targets: tuple[float, ...]  # the loosest is "loose", the tightest "tight" in the patterns
    network: str = "paper-alexnet"
    star: bool = False  # B, jump and Tmax one at a time around the built-in values, not all combinations

    def points(self) -> list[dict[str, float]]:
        """Every A ratio pair × (every combination of B, jump, Tmax, or with `star` one changed at a time)."""
        rest = PARAMS[2:]
        if self.star:
            others = [{p: BUILT_IN[p] for p in rest}]
            others += [{**others[0], p: v} for p in rest for v in getattr(self, p) if not math.isclose(v, BUILT_IN[p])]
        else:
            others = [dict(zip(rest, v)) for v in itertools.product(*(getattr(self, p) for p in rest))]
        return [{"a_fu": a, "a_ss": b, **o} for a in self.a_fu for b in self.a_ss for o in others]

    @property
    def size(self) -> int:
        """How many plans the map makes."""
        return len(self.points()) * len(self.targets) * len(MAP_METHODS) * len(COST_MODELS)


GRIDS = {
    # CI: one point (equal A for fast-unsteady and intermediate), two targets
    "tiny": MapGrid("tiny", a_fu=(1.0,), a_ss=(0.8,), b=(1.0,), jump=(1.0,), tmax=(1.0,), targets=(11.0, 13.0)),
    # committed in docs/results (what fits in ~20 min on a loaded machine): the A ratios crossed, B, jumps
    # and Tmax each halved or doubled alone, the loosest and the tightest target
    "medium": MapGrid("medium", a_fu=(1.0, 4 / 3), a_ss=(0.8, 1.0), b=(0.5, 1.0), jump=(0.5, 1.0),
                      tmax=(1.0, 2.0), targets=(5.0, 13.0), star=True),
    "full": MapGrid("full", a_fu=(0.9, 1.0, 1.15, 4 / 3, 1.6), a_ss=(0.6, 0.8, 1.0), b=(0.5, 1.0, 2.0),
                    jump=(0.25, 0.5, 1.0, 2.0), tmax=(0.75, 1.0, 2.0), targets=(5.0, 7.0, 9.0, 11.0, 13.0)),
}


def map_scenario(base: Scenario, point: dict[str, float]) -> Scenario:
    """`base` with the point's A ratios, B, jump and Tmax scales (validated like a scenario file)."""
    d = scenario_dict(base)
    a_int = next(m for m in d["models"] if m["name"] == "intermediate")["progress"]["A"]
    for m in d["models"]:
        ratio = {"fast-unsteady": point["a_fu"], "slow-steady": point["a_ss"]}.get(m["name"])
        if ratio is not None:
            m["progress"]["A"] = a_int * ratio
        m["progress"]["B"] *= point["b"]
    for w in d["switches"]:
        for k in ("loc", "scale"):
            w["jump"]["params"][k] *= point["jump"]
    d["target"]["deadline"] *= point["tmax"]
    d["name"] = f"{base.name}/map:" + ",".join(f"{p}={point[p]:.4g}" for p in PARAMS)
    return parse_scenario(d, d["name"])


def record_key(rec: dict) -> tuple:
    """What identifies a plan of the map (floats rounded: they went through JSON)."""
    return (rec["network"], *(round(float(rec[p]), 9) for p in PARAMS), round(float(rec["target"]), 9),
            rec["method"], rec["cost_model"], int(rec["eta"]))


def load_records(path: Path | None) -> list[dict]:
    """The map's lines so far; a last line cut off by an interruption is dropped."""
    if path is None or not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line half-written when the run was killed: planned again
    return out


def plan_point(base: Scenario, point: dict, target: float, method: str, cost_model: str, eta: int,
               network: str) -> dict:
    """One plan of the map as a JSON-able record."""
    s = with_cost_model(with_loss_target(map_scenario(base, point), target), cost_model)
    rec = {"network": network, **point, "target": target, "method": method, "cost_model": cost_model, "eta": eta}
    t0 = time.perf_counter()
    try:
        plan = make_plan(s, method, Options(eta=eta))
    except Infeasible:
        return {**rec, "feasible": False, "cost": None, "K": None, "epochs": {}, "seconds": time.perf_counter() - t0}
    epochs = {v: 0 for v in VERSIONS}
    for e in plan.epochs:
        epochs[e.model] = epochs.get(e.model, 0) + 1
    return {**rec, "feasible": True, "cost": plan.cost, "K": len(plan.epochs), "epochs": epochs,
            "seconds": plan.solve_seconds}


def _append(path: Path, line: str) -> None:
    """Append one line; after a line cut off by a kill, on a line of its own."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+b") as f:  # appends go to the end whatever the read position
        end = f.seek(0, 2)
        cut = False
        if end:
            f.seek(end - 1)
            cut = f.read(1) != b"\n"
        f.write((("\n" if cut else "") + line + "\n").encode())


def map_jobs(grid: MapGrid, eta: int, path: Path | None) -> list[Step]:
    """A job per plan not yet in `path` (each appends its line), after one that loads the finished ones."""
    base = load_scenario(grid.network)
    want = {}
    for point in grid.points():
        for t in grid.targets:
            for cm in COST_MODELS:
                for m in MAP_METHODS:
                    rec = {"network": grid.network, **point, "target": t, "method": m, "cost_model": cm, "eta": eta}
                    want[record_key(rec)] = (point, t, m, cm)
    done = {}
    for rec in load_records(path):
        if record_key(rec) in want:
            done[record_key(rec)] = rec

    def load(r: Results) -> None:
        r.map.extend(done.values())

    out = [Step(f"map ({grid.name}): {len(done)} of {len(want)} plans already in "
               f"{path.name if path else 'memory'}", 0.0, load)]
    for key, (point, t, m, cm) in want.items():
        if key in done:
            continue

        def job(r: Results, point=point, t=t, m=m, cm=cm) -> None:
            rec = plan_point(base, point, t, m, cm, eta, grid.network)
            if path is not None:
                _append(path, json.dumps(rec))
            r.map.append(rec)
        # guessed like the sweep: best-exp bisects on the mean target, the others plan once
        weight = (2.0 * math.exp(0.19 * max(0.0, 13.0 - t))) if m == "best-exp" else 0.15 + 0.08 * max(0.0, 13.0 - t)
        out.append(Step(f"map {grid.name} " + " ".join(f"{p}={point[p]:.3g}" for p in PARAMS)
                       + f" ℓmax={t:g} {m} {cm}", weight, job))
    return out


# --------------------------------------------------------------------------- #
# Reading the map
# --------------------------------------------------------------------------- #

@dataclass(frozen=True)
class MapCell:
    """One point and target, under one cost model and one reading of best-exp."""

    point: dict
    target: float
    saving: float  # DepL's saving over the reading's cost (nan: one of the two infeasible)
    depl_versions: tuple[str, ...]  # the versions DepL's plan trains
    baseline_versions: tuple[str, ...]


def cells(records: list[dict], reading: str, cost_model: str) -> list[MapCell]:
    """Every (point, target) of the map with DepL and `reading` both planned under `cost_model`."""
    by = {}
    for rec in records:
        if rec["cost_model"] == cost_model and rec["method"] in ("depl", reading):
            key = (tuple(round(float(rec[p]), 9) for p in PARAMS), float(rec["target"]))
            by.setdefault(key, {})[rec["method"]] = rec
    out = []
    for (pt, t), recs in sorted(by.items()):
        d, b = recs.get("depl"), recs.get(reading)
        if d is None or b is None:
            continue
        ok = d["feasible"] and b["feasible"] and b["cost"] > 0
        out.append(MapCell(dict(zip(PARAMS, pt)), t, (b["cost"] - d["cost"]) / b["cost"] if ok else math.nan,
                           _used(d), _used(b)))
    return out


def _used(rec: dict) -> tuple[str, ...]:
    return tuple(v for v in VERSIONS if rec["epochs"].get(v, 0) > 0) if rec["feasible"] else ()


@dataclass(frozen=True)
class PointVerdict:
    """The paper's three claims at one point (over its targets), for one reading and cost model."""

    point: dict
    max_saving: float
    reaches: bool  # DepL saves ≥ 27% at some target
    loose_intermediate_only: bool  # at the loosest target DepL trains "intermediate" only
    tight_all_three: bool  # at the tightest target DepL trains all three versions

    @property
    def story(self) -> bool:
        """All three claims at one point: the paper's Figs. 7–8 and its 27%."""
        return self.reaches and self.loose_intermediate_only and self.tight_all_three


def verdicts(records: list[dict], reading: str, cost_model: str) -> list[PointVerdict]:
    cs = cells(records, reading, cost_model)
    out = []
    for key in sorted({tuple(c.point[p] for p in PARAMS) for c in cs}):
        mine = [c for c in cs if tuple(c.point[p] for p in PARAMS) == key]
        loose, tight = max(mine, key=lambda c: c.target), min(mine, key=lambda c: c.target)
        s = [c.saving for c in mine if not math.isnan(c.saving)]
        top = max(s) if s else math.nan
        out.append(PointVerdict(dict(zip(PARAMS, key)), top, bool(s) and top >= PAPER_SAVING - 1e-12,
                                loose.depl_versions == ("intermediate",),
                                len(tight.depl_versions) == len(VERSIONS)))
    return out


@dataclass(frozen=True)
class MapSummary:
    reading: str
    cost_model: str
    points: int
    cells: int  # (point, target) pairs with both plans feasible
    share_cells_27: float  # of those, the share where DepL saves ≥ 27%
    share_points_27: float  # points where the saving reaches 27% at some target
    max_saving: float
    share_loose_int: float
    share_tight_all: float
    share_story: float
    built_in_max_saving: float  # at the built-in point (nan when the grid misses it)


def summary(records: list[dict], reading: str, cost_model: str) -> MapSummary:
    cs = [c for c in cells(records, reading, cost_model) if not math.isnan(c.saving)]
    vs = verdicts(records, reading, cost_model)
    n = max(len(vs), 1)
    built = [v.max_saving for v in vs if all(math.isclose(v.point[p], BUILT_IN[p]) for p in PARAMS)]
    return MapSummary(
        reading, cost_model, len(vs), len(cs),
        sum(c.saving >= PAPER_SAVING - 1e-12 for c in cs) / max(len(cs), 1),
        sum(v.reaches for v in vs) / n, max((c.saving for c in cs), default=math.nan),
        sum(v.loose_intermediate_only for v in vs) / n, sum(v.tight_all_three for v in vs) / n,
        sum(v.story for v in vs) / n, built[0] if built else math.nan)


__all__ = ["MapGrid", "GRIDS", "PARAMS", "LABELS", "BUILT_IN", "MAP_METHODS", "map_scenario", "map_jobs",
           "load_records", "record_key", "plan_point", "cells", "verdicts", "summary", "MapCell", "PointVerdict",
           "MapSummary"]
