"""`depl plan SCENARIO --certify`: the cheapest plan that fresh runs certify, in one command.

1. **Candidates, fixed before any certifying run** (`propose`): the planner's cheapest plan, with the loss law as
   fitted (a calibrated law may refuse what runs could certify), at a ladder of levels ω, ω + (1 − ω)/5, …,
   ω + 4(1 − ω)/5 and of targets ℓmax, ℓmax − 0.1|ℓmax|, ℓmax − 0.2|ℓmax|, plus the calibrated law's own plan at
   the target where it has one; candidates that train the same thing (the same data and (version, cluster) per
   epoch) are one — the cheapest — and they are ordered by cost.  Each gets an equal share of α.  The list is
   part of the output and is a function of the scenario and the options only: no run feeds it.
2. **The certified search** (`depl.certificate.search`): every candidate has its own anytime-valid test at its
   share of α, on the same fresh seeds F, F+1, …; hopeless ones are dropped; the search stops when the
   cheapest candidate neither dropped nor refuted is certified, and returns it.
3. **Training** (`depl.train.loops.search`): one run of a schedule yields every prefix, so each group of candidates
   whose jobs nest trains, each batch, only its longest candidate still in the race.

The plan returned carries the scenario's own target (ω, ℓmax) and `info.certificate`: the statement's α, the
runs counted for it and by the whole search, the seeds, and every candidate's verdict.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from ..certificate import (alpha_or_default, Certificate, check_alpha, DEFAULT_PRIOR, Kind, more_runs_if_all_meet,
                           Outcome, PRIORS)
from .common import Training, check_output_file, start_training
from .errors import BadInput, Unreachable, as_bad_input, training_errors
from .planning import law_of, load, p_meet, price_row, retarget, save_plan
from .training import check_keep
from ..certificate.search import (ALLOCATIONS, DEFAULT_ALLOCATION, HORIZON, MAX_RUNS, USES, ladder, Search, Spending,
                                  value_shares)
from ..jsonout import alike, dumps
from ..ledger import TaskSeeds, digest, lineage
from ..paths import informational
from ..planners import Infeasible, Options, infeasible_reason, make_plan
from ..report.mpl import save
from ..report.plots import plot_search
from ..scenario import parse_scenario, scenario_dict, ScenarioError
from ..store import Store
from .alpha_spent import ledger_path, plan_hash, record
from ..train.loops.search import (bind, bound, check_bound, make_candidate, manifest, run_ids, run_search as train,
                                  SearchKeeper)

if TYPE_CHECKING:
    from ..plan import Plan
    from ..scenario import Scenario
    from ..train.loops.search import Candidate, Searched

LEVELS = 5                    # ω, ω + (1 − ω)/5, …: the levels candidates are planned at
TIGHTER = (1.0, 0.9, 0.8)     # ℓmax − (1 − t)|ℓmax|: the targets


def _training_key(p: "Plan") -> tuple:
    return tuple(p.datasets), tuple((e.model, e.cluster) for e in p.epochs)


def propose(s: "Scenario", method: str = "depl", eta: int = 200) -> list[tuple["Plan", dict]]:
    """The candidate plans for `s`'s target (module docstring), cheapest first, each with what it was planned at;
    Unreachable when the planner finds none."""
    omega, loss = s.target.quantile, s.target.loss
    asks = [(s.uncalibrated(), w, loss - (1.0 - t) * abs(loss), "as fitted") for w in ladder(omega, LEVELS)
            for t in TIGHTER]
    if s.calibration is not None and s.calibration.use:
        asks.append((s, omega, loss, "calibrated"))
    found: dict[tuple, tuple] = {}
    last = None
    for base, w, l, law in asks:
        try:
            p = make_plan(retarget(base, loss=l, quantile=w), method, Options(eta=eta))
        except (Infeasible, BadInput) as e:
            last = e
            continue
        key = _training_key(p)
        if p.feasible and p.epochs and (key not in found or p.cost < found[key][0].cost):
            found[key] = (p, {"omega": w, "loss": l, "law": law})
    if not found:
        why = infeasible_reason(last, s) if isinstance(last, Infeasible) else str(last)
        raise Unreachable(f"no candidate plan for the search: {why}")
    return sorted(found.values(), key=lambda c: (c[0].cost, len(c[0].epochs), str(_training_key(c[0]))))


def as_target(p: "Plan", s: "Scenario", proposed: dict) -> "Plan":
    """A candidate with the scenario's own target: the search tests it at ω and ℓmax, whatever it was planned at;
    its figures (the ω-quantile's bracket and the mean of ℓ(K)) those of the law it was planned with, at ω."""
    law_s = s if proposed["law"] == "calibrated" else s.uncalibrated()
    d = law_of(p, law_s)
    lo, hi = (float(x) for x in d.quantile_bounds(s.target.quantile))
    proposed["law_p"] = p_meet(d, s.target.loss)   # P(ℓ(K) ≤ ℓmax) by that law: its price
    return dataclasses.replace(p, omega=s.target.quantile, loss_target=s.target.loss, loss_quantile=hi,
                               loss_quantile_bounds=(lo, hi), loss_mean=float(d.mean()),
                               scenario_spec=scenario_dict(law_s), info={**p.info, "proposed_at": proposed})


@dataclass(frozen=True)
class Prepared:
    scenario: "Scenario"
    candidates: list["Candidate"]
    alpha: float
    device: str = "cpu"
    given: Optional[str] = None        # the scenario as named (a file's path: its α ledger lies beside it)
    began: dict = field(default_factory=dict)   # the manifest of the search the store is bound to ({}: none yet)
    caps: tuple = ()                   # its --max-runs record [(seeds drawn, max_runs)]


def prepare_search(scenario: "str | Scenario", method: str = "depl", *, eta: int = 200,
                   loss: Optional[float] = None, quantile: Optional[float] = None, deadline: Optional[float] = None,
                   alpha: Optional[float] = None, out: Optional[Path] = None, store: Optional[Path] = None,
                   png: Optional[Path] = None, training: Training = Training(),
                   rerun: Optional[dict] = None) -> Prepared:
    """Everything checked and the candidates made (and their code and data checked), nothing written.  `rerun`:
    the `run_search` keywords the search will run with (first_seed, max_runs, batch, prior, allocation, uses,
    horizon): where the store is bound to a search already, what of them and of ω, ℓmax and α differs from it is
    refused here, before the candidates are planned (`run_search` checks the whole manifest)."""

    if alpha is not None:
        with as_bad_input(ValueError):
            check_alpha(alpha, "--alpha")
    for flag, path in (("--out", out), ("--png", png)):
        if path is not None:
            check_output_file(flag, Path(path))
    if store is not None and Path(store).is_dir():
        raise BadInput(f"--store {store}: is a folder; give the store's file, e.g. {Path(store) / 'runs.sqlite'}")
    s = retarget(load(scenario), loss, quantile, deadline)
    alpha = alpha_or_default(s.target.alpha if alpha is None else alpha)   # --alpha, else the scenario's
    began, caps = _refuse_another_search(store_path(store, out), s, alpha, rerun or {})
    dev = start_training(training.threads, training.device)
    plans = propose(s, method, eta)
    with as_bad_input(*training_errors(), ValueError, OSError):
        cands = [make_candidate(as_target(p, s, why), why, dev) for p, why in plans]
    return Prepared(s, cands, alpha, dev, scenario if isinstance(scenario, str) else None, began, tuple(caps))


def store_path(store: Optional[Path], out: Optional[Path]) -> Path:
    """The search's store: `store`, else runs.sqlite in the folder of `out` (else depl-search)."""
    return Path(store) if store else (Path(out).parent if out else Path("depl-search")) / "runs.sqlite"


def _refuse_another_search(store: Path, s: "Scenario", alpha: float, rerun: dict) -> tuple[dict, list]:
    """BadInput where `store` is bound to a search whose ω, ℓmax, α or one of the options given in `rerun` differs
    (depl.train.loops.search.check_bound), or where `rerun`'s horizon is no search's (`check_horizon`): what
    planning does not change, checked before it.  Returns the store's manifest ({}: not bound yet) and --max-runs
    record."""

    theirs, seg = None, []
    if store.is_file():
        with as_bad_input(ValueError, OSError):
            with Store(store, readonly=True) as st:
                theirs, seg = bound(st)
    if rerun.get("horizon") is not None:
        check_horizon(rerun["horizon"], None if theirs else rerun.get("max_runs") or MAX_RUNS, rerun.get("max_runs"))
    if theirs is None:
        return {}, []
    with as_bad_input(ValueError, OSError):
        # a value no search takes (a --prior or --allocation of none of the choices, --uses nan) is refused as
        # that, later
        known = {"first_seed": None, "batch": None, "prior": PRIORS.__contains__,
                 "allocation": ALLOCATIONS.__contains__, "uses": lambda u: 1 <= u < float("inf"), "horizon": None}
        given = {k: rerun[k] for k, ok in known.items()
                 if rerun.get(k) is not None and (ok is None or ok(rerun[k]))}
        if "uses" in given:
            given["uses"] = check_uses(given["uses"])
        if "horizon" in given:
            given["horizon"] = int(given["horizon"])
        check_bound(store, theirs, seg, {"omega": float(s.target.quantile), "loss_target": float(s.target.loss),
                                         "alpha": alpha, **given}, rerun.get("max_runs"))
    return theirs, seg


@dataclass(frozen=True)
class SearchResult:
    """The search (`searched`), the plan returned (None where none was certified), its certificate, files."""

    searched: "Searched"
    plan: "Optional[Plan]"
    certificate: Certificate
    out: Optional[Path]
    png: Optional[Path]

    @property
    def outcome(self) -> Outcome:
        return self.certificate.verdict


PROPOSALS = 3       # candidates the search may propose from its own runs (depl.certificate.search.Spending)
FIRST = 0.75        # the share of α of the candidates fixed before any run; the proposed share the rest
MARGIN_RUNS = 10    # the fewest runs of a candidate whose losses say what margin a proposal needs
STRICTER = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5)   # the margin's target × these, until a plan is not a candidate yet


def margins(prep: Prepared, outcomes: dict[int, list[float]], cands: list["Candidate"]) -> list[dict]:
    """How optimistic the law was, from the search's own runs: for each candidate that counted at least MARGIN_RUNS
    runs, its runs' ℓ(K) at the stricter level ω′ = ω + (1 − ω)/2 (the margin a proposal plans with) against the
    law's ω-quantile for it, as a ratio (None where a loss can be ≤ 0) and a shift, with the version its schedule
    ends in (the one whose model the runs scored)."""
    import numpy as np

    omega = float(prep.scenario.target.quantile)
    level = omega + (1.0 - omega) / 2.0
    found = []
    for i, losses in outcomes.items():
        law = float(cands[i].plan.loss_quantile)
        if len(losses) < MARGIN_RUNS or not np.isfinite(law):
            continue
        seen = float(np.quantile(np.asarray(losses, float), level, method="higher"))   # +inf: a diverged run
        if not np.isfinite(seen):
            continue
        ratio = seen / law if law > 0 and seen > 0 else None
        found.append({"ratio": ratio, "shift": seen - law, "candidate": i, "seen": seen, "law": law, "level": level,
                      "version": cands[i].plan.epochs[-1].model})
    return found


def _worst(ms: list[dict]) -> Optional[dict]:
    return max(ms, key=lambda m: m["ratio"] if m["ratio"] is not None else 1.0 + m["shift"], default=None)


def _optimistic(m: dict) -> bool:
    """The runs' ω′-quantile above the law's ω-quantile: the law was optimistic about this candidate."""
    return m["ratio"] > 1.0 if m["ratio"] is not None else m["shift"] > 0.0


def margin(prep: Prepared, outcomes: dict[int, list[float]], cands: list["Candidate"]) -> Optional[dict]:
    """The worst (largest) of `margins`: the ratio, or shift where a loss can be ≤ 0.  None: no candidate has the
    runs to say."""
    return _worst(margins(prep, outcomes, cands))


def without_versions(s: "Scenario", drop: set[str]) -> Optional["Scenario"]:
    """`s` with the law as fitted and without the model versions `drop` (and every switch to or from one): None
    where no version would be left or what is left is no scenario."""
    d = scenario_dict(s)
    d["models"] = [m for m in d["models"] if m["name"] not in drop]
    d["switches"] = [w for w in d.get("switches", []) if w["from"] not in drop and w["to"] not in drop]
    d.pop("calibration", None)   # its table names the versions it was made for
    if not d["models"]:
        return None
    try:
        return parse_scenario(d, f"{s.name} without {', '.join(sorted(drop))}")
    except ScenarioError:
        return None


def _tightened(loss: float, m: Optional[dict]) -> float:
    """ℓmax less the margin `m` showed (ℓmax / ratio, or ℓmax − shift); 10 % stricter where the runs met the law by
    a ratio (a margin all the same); ℓmax itself where they met it by a shift, or no runs say (None)."""
    if m is None:
        return loss
    if _optimistic(m):
        return loss / m["ratio"] if m["ratio"] is not None else loss - m["shift"]
    return loss - 0.1 * abs(loss) if m["ratio"] is not None else loss


def propose_from_runs(prep: Prepared, dev: str = "cpu") -> Callable:
    """The rule that proposes candidates from the search's own runs (`depl.train.loops.search.run_search`'s `propose`),
    fixed before the first run: the planner's cheapest plan, with the law as fitted, of two asks —

    - its whole space (data, versions, switches, clusters) for the target ℓmax tightened by the worst margin the
      runs showed (`margin`: ℓmax divided by the worst ratio of the runs' ω′-quantile to the law's, or less the worst
      shift);
    - where the runs found the law optimistic about the schedules ending in some versions (`margins`, by the version
      a schedule ends in) and not about others: the space without those versions, for ℓmax tightened by the worst
      margin of the versions left (the law as fitted where no run of theirs says otherwise) — a law that misprices
      one version is not held against the plans that never train it;

    each at ω and at ω′, stricter (STRICTER) until a plan is not a candidate already.  Its guess of P(meets ℓmax) is
    the law's at its tightened target."""

    s = prep.scenario

    def propose(search, outcomes, cands, drawn) -> list:
        ms = margins(prep, outcomes, cands)
        worst = _worst(ms)
        if worst is None:
            return []
        loss = s.target.loss
        asks = [(s.uncalibrated(), _tightened(loss, worst), worst, [])]
        bad = {m["version"] for m in ms if _optimistic(m)}
        if bad and (rest := without_versions(s, bad)) is not None:
            left = _worst([m for m in ms if m["version"] not in bad])
            asks.append((rest, _tightened(loss, left), left, sorted(bad)))
        have = {_training_key(c.plan) for c in cands}
        found = []
        for f in STRICTER:   # the margin's target first, stricter ones where its plan is a candidate already
            for base, tight, m, dropped in asks:
                for w in (s.target.quantile, worst["level"]):
                    asked = tight * f if tight > 0 else tight - (1 - f) * abs(loss)
                    try:
                        p = make_plan(retarget(base, loss=asked, quantile=w), "depl", Options(eta=200))
                    except (Infeasible, BadInput):
                        continue
                    if p.feasible and p.epochs and _training_key(p) not in have:
                        found.append((p, w, p.loss_target, tight, m, dropped))
            if found:
                break
        if not found:
            return []
        p, w, asked, tight, m, dropped = min(found, key=lambda x: x[0].cost)
        why = {"omega": w, "loss": asked, "law": "as fitted, with the runs' margin", "after_seeds": int(drawn),
               "margin": None if m is None else {k: v for k, v in m.items() if k not in ("level", "version")}}
        if dropped:
            why["without"] = dropped
        c = make_candidate(as_target(p, s, why), why, dev)
        c.proposed["guess"] = p_meet(law_of(p, s.uncalibrated()), tight)   # the law, less the runs' margin, of ℓmax
        return [c]

    return propose


def check_uses(uses: float) -> float:
    """`uses` as a float (1000 and 1000.0 are one value, in the manifest and the certificate), a finite number at
    least 1, or BadInput."""
    if not 1 <= uses < float("inf"):   # NaN fails every comparison
        raise BadInput(f"--uses {uses:g}: how many times the plan will be run, a finite number at least 1")
    return float(uses)


def check_horizon(horizon: int, max_runs: Optional[int], asked: Optional[int] = None) -> int:
    """`horizon`, a whole number of runs at least 1 and, for a new search, at least `max_runs` (the cap it starts
    with: --max-runs `asked`, else its default), or BadInput.  None: a search bound already (a rerun's cap may grow
    past its horizon)."""
    if isinstance(horizon, bool) or not isinstance(horizon, (int, float)) or not float(horizon).is_integer() \
            or horizon < 1:
        raise BadInput(f"--horizon {horizon}: the runs the search's decisions reckon with, a whole number at least 1")
    if max_runs is not None and horizon < max_runs:
        cap = f"--max-runs {max_runs}" + ("" if asked else " (its default)")
        raise BadInput(f"--horizon {int(horizon)}: below {cap}, the most runs a candidate counts; the search's "
                       f"decisions reckon with at least those: give --horizon {max_runs} or more, or a smaller "
                       "--max-runs")
    return int(horizon)


def settings(began: dict, caps: list, max_runs: Optional[int] = None, uses: Optional[float] = None,
             horizon: Optional[int] = None) -> tuple[int, float, int]:
    """The --max-runs, --uses and horizon a search runs with, from the options given and the store's search
    (`began`, its manifest, {} where none; `caps`, its --max-runs record): what is given, else the store's, else
    the defaults (MAX_RUNS; USES; HORIZON, or the first --max-runs where larger).  A value given that differs from
    the store's is refused when the search binds (depl.train.loops.search.bind)."""
    uses = check_uses(uses or began.get("uses") or USES)
    asked, max_runs = max_runs, max_runs or (caps[-1][1] if caps else MAX_RUNS)
    first = caps[0][1] if caps else max_runs
    if horizon is not None:
        return max_runs, uses, check_horizon(horizon, None if began else first, asked)
    return max_runs, uses, int(began.get("horizon") or max(HORIZON, first))


def shares(prep: Prepared, uses: Optional[float] = USES, horizon: int = HORIZON) -> list[float]:
    """Each candidate's share of α, fixed before any run where it buys most
    (`depl.certificate.search.value_shares`: halving in the order the search will try them, at the law's guesses
    and `uses`, reckoning with `horizon` runs: the search's horizon)."""
    costs = [float(c.plan.cost) for c in prep.candidates]
    return [float(w) for w in value_shares(costs, guesses(prep), float(prep.scenario.target.quantile), prep.alpha,
                                           uses, horizon)]


def guesses(prep: Prepared) -> list[float]:
    """Each candidate's P(ℓ(K) ≤ ℓmax) by the law it was planned with (`law_p`), before any run."""
    omega = float(prep.scenario.target.quantile)
    return [float(c.proposed.get("law_p", omega)) for c in prep.candidates]


def price(prep: Prepared, max_runs: Optional[int] = None, uses: Optional[float] = None,
          horizon: Optional[int] = None) -> list[dict]:
    """What certifying each candidate is expected to take, before any run, with the settings the search takes
    (`settings`: the options given, else the store's search's, else the defaults): at the probability its law gives
    of meeting ℓmax (`law_p`), its test at its share of α (`shares`, at the search's horizon) — the mean runs to a
    decision within the horizon (the runs the search's decisions reckon with; --max-runs only pauses it),
    P(certified within them) — and their cost (each run trains the candidate's plan once: runs × its cost).  The
    law's p is a guess the runs may refute; where it is optimistic the runs are more."""
    _, uses, horizon = settings(prep.began, list(prep.caps), max_runs, uses, horizon)
    omega = float(prep.scenario.target.quantile)
    # the candidates fixed in advance hold FIRST of α between them (the rest is the proposals'): each its share of it
    return [{"share": FIRST * w, "horizon": horizon, **price_row(p, omega, prep.alpha * FIRST * w, horizon, c.plan.cost)}
            for c, w, p in zip(prep.candidates, shares(prep, uses, horizon), guesses(prep))]


def candidate_rows(prep: Prepared) -> list[dict]:
    """The candidates as written before any run: schedule, cost, epochs, what they were planned at."""
    return [{"index": i, "schedule": c.words(), "cost": c.plan.cost, "epochs": c.epochs, "proposed_at": c.proposed}
            for i, c in enumerate(prep.candidates)]


def search_certificate(r: "Searched") -> Certificate:
    """info.certificate (kind `search`): the verdict, α, the runs counted for the plan returned and by the whole
    search, the runs
    trained (each run of the store, its epochs and the search's seeds it holds), the seeds, and every candidate
    (schedule, cost, weight, verdict, runs, met, anytime-valid lower bound, its group's run `trains_with` and the
    runs its seeds were read from, `read_from`, the longest first)."""
    s, cands = r.search, r.candidates
    b = s.best()
    rows = []
    for a, c in zip(s.arms, cands):
        v = a.state
        rows.append({"index": a.index, "schedule": c.words(), "cost": c.plan.cost, "epochs": c.epochs,
                     "weight": a.weight, "alpha": v.alpha, "verdict": a.status, "runs": v.runs, "met": v.hits,
                     "lower_bound": v.lower, "upper_bound": v.upper, "proposed_at": c.proposed,
                     "trains_with": r.run_ids[c.group], "read_from": r.read_from.get(a.index, []),
                     "first_counted": r.first_counted.get(a.index), "dropped_after": a.dropped_after,
                     "priced_out": a.priced_out, "law_p": a.guess, "proposal": a.proposal})
    more = expected_more(s) if b is None else None
    won = s.arms[b].state if b is not None else None
    seeds = ((r.first_seed, r.first_seed + r.seeds - 1),) if r.seeds else ()
    return Certificate(Kind.SEARCH, s.outcome, float(s.omega), cands[0].plan.loss_target, s.alpha,
                       won.alpha if won else None, won.runs if won else 0, won.hits if won else 0, seeds,
                       won.lower if won else None, {
            "returned": b, "runs_trained": r.runs_trained, "seed_epochs": r.seed_epochs, "runs_cost": runs_cost(r),
            "trained": [{"run": rid, "epochs": r.epochs[rid], "seeds": n} for rid, n in sorted(r.trained.items())],
            "first_seed": r.first_seed, "max_runs": s.max_runs,
            "drop_below": s.drop_below, "store": r.store, "seconds": r.seconds, "prior": s.prior,
            "allocation": s.allocation, "uses": s.uses, "horizon": s.horizon, "paused": s.paused,
            "rule": f"weighted e-Bonferroni over the candidates fixed in advance and those proposed from the runs "
                    f"(spending: {s.spending.first:g} of α to the first, halving in the order the search tries them): "
                    f"each a sequential mixture test ({s.prior} prior) at its share of α on fresh seeds, "
                    f"{ALLOCATION_WORDS[s.allocation]}"
                    + (f", weighing its runs' cost against {s.uses:g} uses of the plan" if s.uses else "")
                    + "; dropping never certifies (depl.certificate.search)",
            "candidates": rows, "expected_more_runs": more})


def expected_more(s: Search) -> Optional[dict]:
    """What going on with an undecided search takes, for the candidate likeliest to certify (None if every one is
    refuted): the runs at its observed rate (`Search.more_runs`), the fewest more runs that certify it if each meets
    ℓmax (`if_all_meet`: the least going on takes), and what the search's own decisions expect of it within its
    runs left (`outlook_runs`, `outlook_p_certify`: at its law's guess until it has counted the runs its test needs,
    `Search.outlook`)."""
    i = s.likeliest() if s.outcome is Outcome.UNDECIDED else None
    if i is None:
        return None
    t = s.arms[i].test
    outlook_runs, outlook_p = s.outlook(i)
    return {"candidate": i, **s.more_runs(i),
            "if_all_meet": more_runs_if_all_meet(t.hits, t.runs, float(s.omega), t.alpha, s.prior),
            "outlook_runs": float(outlook_runs), "outlook_p_certify": float(outlook_p), "runs_left": s.left(i)}


def runs_cost(r: "Searched") -> float:
    """What the search's runs cost: each run trained, the cost of the plan its job trains (a group's run trains
    its longest candidate's plan; one that stopped short, a shorter candidate's)."""

    cost = {rid: float(r.candidates[i].plan.cost) for i, rid in run_ids(r.candidates).items()}
    return float(sum(n * cost[rid] for rid, n in r.trained.items()))


ALLOCATION_WORDS = {"focus": "the cheapest candidates in the race counting first, a costlier one only once "
                               "those look unlikely to certify",
                    "all": "every candidate in the race counting every seed"}


def run_search(prep: Prepared, *, out: Optional[Path] = None, store: Optional[Path] = None,
               first_seed: Optional[int] = None, max_runs: Optional[int] = None, batch: Optional[int] = None,
               png: Optional[Path] = None, training: Training = Training(), progress: Optional[Callable] = None,
               on_batch: Optional[Callable] = None, prior: Optional[str] = None,
               allocation: Optional[str] = None, uses: Optional[float] = None, horizon: Optional[int] = None,
               keep_models: Optional[str] = None) -> SearchResult:
    """Train the candidates' groups on seeds F, F+1, … until the search finishes; write the plan returned (with
    its certificate) at `out` and the candidates' picture at `png`.  `uses`: how many times the plan returned will
    be run [default USES, or the store's search's]: the search minimises its runs' expected cost plus `uses` × the
    plan's cost (depl.certificate.search, "The price").  `horizon`: the runs its decisions reckon with, at least
    the first `max_runs` [default HORIZON, or the first `max_runs` where larger, or the store's search's];
    `max_runs` only pauses the search (depl.certificate.search, "The horizon and the cap").  `keep_models`: none,
    best or all [default best] of the models its runs train for each candidate, kept as `depl run` keeps them, in
    the store's folder's models/<run id>; once the search is decided only the returned plan's stay (the
    certificate's `models`).

    The store is bound to this search before its first run (`depl.train.loops.search.bind`): a rerun takes what
    it began with — its first seed, batch, e-process (`prior`), allocation, uses and horizon are the defaults of a
    rerun, any other value is refused — and only a larger `max_runs` goes on, where the recorded runs stop.  For a
    new search,
    `first_seed` None is the first seed above every seed the task's lineage and seed book used (depl.ledger),
    `max_runs` None MAX_RUNS, `batch` None 32, `prior` None depl.certificate.DEFAULT_PRIOR, `allocation` None focus;
    seeds the task used are refused, and the seeds drawn go to the task's seed book as they are drawn."""

    store = store_path(store, out)
    book = TaskSeeds.of(prep.scenario)
    with as_bad_input(ValueError, OSError):
        began, seg = None, []
        if store.is_file():
            with Store(store, readonly=True) as st:
                began, seg = bound(st)
        began = began or {}
        asked = "" if first_seed is None else f"--first-seed {first_seed}"
        ledger = lineage(prep.scenario) + book.ledger(str(store), search=digest(began) if began else None)
        first_seed = began.get("first_seed", ledger.default("search")) if first_seed is None else first_seed
        allocation = allocation or began.get("allocation") or DEFAULT_ALLOCATION
        if allocation not in ALLOCATIONS:
            raise ValueError(f"--allocation {allocation!r}: must be one of {', '.join(ALLOCATIONS)}")
        prior = prior or began.get("prior") or DEFAULT_PRIOR
        batch = batch or began.get("batch") or 32
        # depl run's check of --keep-models; a search's default is best whatever its seeds (how many is not known)
        keep_models = check_keep(keep_models or "best", 0, "local")
        max_runs, uses, horizon = settings(began, seg, max_runs, uses, horizon)
        # `all` draws at most max_runs seeds; `focus` may start the candidates one after another
        drawn = max_runs * (1 if allocation == "all" else len(prep.candidates))
        ledger.check(first_seed, first_seed + drawn - 1, asked or f"--first-seed {first_seed}", "search")
    with as_bad_input(*training_errors(), ValueError, OSError):
        store.parent.mkdir(parents=True, exist_ok=True)
        first_max = seg[0][1] if seg else max_runs
        search = Search([c.plan.cost for c in prep.candidates], prep.scenario.target.quantile, prep.alpha,
                        shares=shares(prep, uses, horizon), max_runs=first_max, prior=prior, allocation=allocation,
                        uses=uses, guesses=guesses(prep), spending=Spending(FIRST), horizon=horizon)
        mine = manifest(prep.candidates, search, run_ids(prep.candidates), first_seed, batch)
        with Store(store) as st:
            seg = bind(st, mine, max_runs)
        if began:   # bound to this search: its recorded numbers, equal to these to rounding (`bind`), decide
            mine = began
            search.take([c["share"] for c in began["candidates"]], [c["guess"] for c in began["candidates"]])
        _write_candidates(prep, store.parent / "search-candidates.json", mine)
        mark = digest(mine)
        book.record("search", first_seed, first_seed + batch - 1, str(store), alpha=prep.alpha, search=mark)

        def looked(search, seeds, seconds):
            book.record("search", first_seed, first_seed + seeds + batch - 1, str(store), alpha=prep.alpha,
                        search=mark)
            if on_batch is not None:
                on_batch(search, seeds, seconds)

        keeper = None if keep_models == "none" else SearchKeeper(store.parent, keep_models)
        r = train(prep.candidates, search, store=str(store), first_seed=first_seed, batch=batch,
                  options=training.seed_options(), progress=progress, on_batch=looked, max_runs=seg,
                  grow_to=max_runs, propose=propose_from_runs(prep, prep.device), proposals=PROPOSALS, keep=keeper)
    cert = search_certificate(r)
    b = search.best()
    if b is not None:
        cert = cert.with_evidence(alpha_ledger=_spend(prep, cert, mark, r.candidates[b].plan))
    if keeper is not None and b is not None:
        folder = keeper.folder(b)
        cert = cert.with_evidence(models={"folder": str(folder), "run": folder.name, "keep": keep_models,
                                          "kept": len(list(folder.glob("seed-*.json")))})
    plan = None
    if b is not None:
        plan = dataclasses.replace(r.candidates[b].plan)
        plan.info = {**plan.info, "certificate": cert.to_json()}
        if out is not None:
            save_plan(plan, Path(out))
    if png is not None:
        _draw(cert, Path(png), prep.scenario.name)
    return SearchResult(r, plan, cert, Path(out) if out and plan else None, Path(png) if png else None)


def _spend(prep: Prepared, cert: Certificate, mark: str, plan: "Plan") -> dict:
    """The search's α in the task's α ledger (depl.workflows.alpha_spent), its account the search's manifest: the
    certificate it issued, beside the calibrations' ones.  A search's seeds are its own (the seed book), so its
    account holds this certificate alone; a rerun issues the same one and spends nothing new."""
    spent = record(ledger_path(prep.given, prep.scenario.name),
                   {"calibration": f"search:{mark}", "loss": cert.loss_target, "omega": cert.omega,
                    "alpha": cert.alpha, "plan": plan_hash(plan)})
    # where the ledger is, said only (informational: the ledger of this machine, outside the plan's folder)
    return {"path": informational(spent.path), "account": f"search:{mark}", "written": spent.written}


def _write_candidates(prep: Prepared, path: Path, bound: dict) -> None:
    """The candidates and their shares of α (`depl.search-candidates/1`), written once, before the first run is
    trained: a file there that says other candidates, shares or α is refused (the store's manifest binds them)."""
    data = {"format": "depl.search-candidates/1", "scenario": prep.scenario.name, "alpha": prep.alpha,
            "omega": prep.scenario.target.quantile, "loss_target": prep.scenario.target.loss,
            "candidates": [{**r, "weight": m["share"]} for r, m in zip(candidate_rows(prep), bound["candidates"])]}
    text = dumps(data) + "\n"
    if path.is_file():
        try:
            was = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            was = None
        if not alike(was, json.loads(text)):   # the same but for the last digits of a number: written already
            raise BadInput(f"{path}: lists other candidates than this search's (another search wrote it, or it was "
                           "edited); the candidates are written once, before the first run: give this search its "
                           "own folder (--out, --store)")
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _draw(cert: Certificate, png: Path, name: str) -> None:
    try:
        save(plot_search(cert, title=f"{name}: candidates of the certified search"), png)
    except OSError as e:
        raise BadInput(f"--png {png}: {e.strerror or e}") from None


def plan_certified(scenario: "str | Scenario", method: str = "depl", **kwargs: Any) -> SearchResult:
    """`depl plan SCENARIO --certify` in one call: `prepare_search`'s and `run_search`'s keywords."""
    keys = ("eta", "loss", "quantile", "deadline", "alpha", "out", "store", "png", "training")
    prep = prepare_search(scenario, method, rerun=kwargs, **{k: v for k, v in kwargs.items() if k in keys})
    return run_search(prep, **{k: v for k, v in kwargs.items() if k not in keys[:5]})
