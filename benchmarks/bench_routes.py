"""Three routes to a certified plan on one fitted task, on real runs: the certified search (`depl plan --certify`)
against the calibration route and against `depl plan --uncalibrated` + `depl certify`.

For a fitted scenario (default: the tutorial's own task, docs/certificate-store/search/my-digits/fitted.toml):

1. **K certified searches** through the workflow of `depl plan SCENARIO --certify` (depl.workflows.search), search
   i on its own first seed F + 10000·i, each with its own store under `--out` (search-i/): exit code, the
   candidate returned, its cost, runs trained, seed-epochs, seeds, wall time.  The candidates are a function of
   the scenario and the options: the script checks that every search proposed the same list and says so.
2. **The calibration route**: `depl plan SCENARIO` refuses (exit 3), saying how many runs per experiment would
   certify a schedule; that many calibration seeds per experiment are profiled (`depl profile --first-seed`, the
   experiments of the fit's own profile, read from the scenario's `[[calibration.experiments]]`), `depl calibrate`,
   `depl plan` — while it still refuses, more seeds are profiled (at most `--calib-rounds` rounds; each round
   spends α on the calibration runs again: it is the route as a person takes it, not one statement).
3. **The route `--uncalibrated` + `depl certify`**: `depl plan SCENARIO --uncalibrated`, then `depl certify PLAN
   --first-seed 3500000 --max-runs M`: its plan, cost, verdict, runs.
4. **True coverage** of every candidate and of the two routes' plans, on N fresh seeds (default 400 from
   3300000): the plans are grouped as the search groups them (depl.train.loops.search.group: one run of a schedule
   yields every prefix), each group's longest job trains once on those seeds (store truth/runs.sqlite), and
   each plan reads ℓ(K) at its own length; hits/N with a 95 % Clopper–Pearson interval and the one-sided 95 %
   lower and upper bounds (depl.certificate.bounds).

It prints a markdown table to stdout and writes JSON (`--json`, default OUT/routes.json): per search (plan
returned, cost, runs trained, seed-epochs, true coverage, below ω?), and the summary — searches whose plan's true
coverage is below ω (point estimate; and with the one-sided upper bound below ω), mean runs of a search against
the calibration route's, mean cost against the cheapest candidate whose true coverage reaches ω (and whose
one-sided lower bound does), the other two routes' cost and runs.  Progress lines with an ETA go to stderr.
Resumable: every step keeps its store under `--out`, and a finished search or route is read back, not rerun.

    PYTHONPATH=src python benchmarks/bench_routes.py --out docs/certificate-store/search/my-digits/routes \
        --md docs/certificate-store/search/my-digits/routes/routes.md        # 10 searches, 400 fresh seeds
    PYTHONPATH=src python benchmarks/bench_routes.py --searches 2 --truth 100 --out /tmp/depl-routes-medium
    PYTHONPATH=src python benchmarks/bench_routes.py --small --out /tmp/depl-routes-small   # CI size

Exit 0 when the study ran (whatever it found), 2 on bad input (a file, a flag).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from depl.certificate import Certificate  # noqa: E402
from depl.paths import relative, resolved  # noqa: E402
from depl.certificate.bounds import (clopper_pearson_interval, clopper_pearson_lower,  # noqa: E402
                                     clopper_pearson_upper)

TASK = ROOT / "docs" / "certificate-store" / "search" / "my-digits"
STRIDE = 10_000          # search i starts at F + STRIDE·i


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Clock:
    """Progress with an ETA: `steps` units of work, each step's share known in advance (seed-epochs)."""

    def __init__(self, total: float):
        self.total, self.done, self.t0 = max(total, 1e-9), 0.0, time.perf_counter()
        self.spent = 0.0       # work that was already done (read back), not timed

    def tick(self, amount: float, skipped: bool = False) -> None:
        self.done += amount
        if skipped:
            self.spent += amount

    def line(self, what: str) -> str:
        dt = time.perf_counter() - self.t0
        timed = self.done - self.spent
        left = self.total - self.done
        eta = f", ETA ~{left * dt / timed / 60:.1f} min" if timed > 0 and left > 0 else ""
        return f"[{100 * self.done / self.total:5.1f} %, {dt / 60:.1f} min{eta}] {what}"


# ---------------------------------------------------------------------------------------------- the command line

def depl_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "depl", *args]


def run_cli(args: list[str], log: Path) -> tuple[int, str, str]:
    """Run a depl command (this tree's src first on the path), its stdout and stderr kept in `log`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
           "COLUMNS": "200", "FLWR_TELEMETRY_ENABLED": "0", "MPLBACKEND": "Agg"}
    r = subprocess.run(depl_cmd(*args), capture_output=True, text=True, env=env)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a", encoding="utf-8") as f:
        f.write(f"$ depl {' '.join(args)}\n{r.stdout}{r.stderr}exit {r.returncode}\n\n")
    return r.returncode, r.stdout, r.stderr


def training_flags(a) -> list[str]:
    out = []
    for flag, v in (("--workers", a.workers), ("--threads", a.threads)):
        if v is not None:
            out += [flag, str(v)]
    return out


def bad_input(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr)
    raise SystemExit(2)


# ---------------------------------------------------------------------------------------------------- searches

def search_key(a, i: int) -> dict:
    return {"scenario": scenario_digest(a), "first_seed": a.first_search_seed + STRIDE * i,
            "max_runs": a.max_runs, "batch": a.batch, "alpha": a.alpha}


def run_searches(a, clock: Clock) -> list[dict]:
    """K searches, each through `depl plan --certify`'s workflow on its own seeds and store; a finished one (its
    result.json with the same arguments) is read back."""
    from depl.workflows.common import Training
    from depl.workflows.search import candidate_rows, prepare_search, run_search

    training = Training(threads=a.threads, workers=a.workers, seed_batch=a.batch)
    out = []
    prep = None
    for i in range(a.searches):
        folder = a.out / f"search-{i}"
        done = folder / "result.json"
        key = search_key(a, i)
        if done.is_file() and json.loads(done.read_text())["key"] == key:
            r = json.loads(done.read_text())
            out.append(r)
            clock.tick(a.search_work, skipped=True)
            say(clock.line(f"search {i}: read back ({r['outcome']}, exit {r['exit_code']})"))
            continue
        if prep is None:
            prep = prepare_search(str(a.scenario), alpha=a.alpha, training=training)
        t0 = time.perf_counter()

        def looked(search, seeds, seconds, i=i):
            runs = sum(x.test.runs for x in search.arms)
            say(clock.line(f"search {i}: {seeds} seeds, {runs} runs counted, {len(search.alive())} of "
                           f"{len(search.arms)} candidates in the race"))

        res = run_search(prep, out=folder / "plan.json", store=folder / "runs.sqlite", first_seed=key["first_seed"],
                         max_runs=a.max_runs, batch=a.batch, training=training, on_batch=looked)
        c = res.certificate
        r = {"key": key, "search": i, "exit_code": c.exit_code(), "outcome": c.verdict.value,
             "returned": c.returned, "cost": None if c.returned is None else
             c.candidates[c.returned]["cost"], "runs_trained": c.evidence["runs_trained"],
             "seed_epochs": c.evidence["seed_epochs"], "runs_counted": c.runs,
             "seeds": list(c.seeds[0]) if c.seeds else [],
             "seconds": time.perf_counter() - t0,
             "candidates": [{k: row[k] for k in ("index", "schedule", "cost", "epochs", "proposed_at")}
                            for row in candidate_rows(prep)],
             "verdicts": [{k: row[k] for k in ("index", "verdict", "runs", "met", "lower_bound")}
                          for row in c.candidates]}
        done.write_text(json.dumps(r, indent=1) + "\n", encoding="utf-8")
        out.append(r)
        clock.tick(a.search_work)
        say(clock.line(f"search {i}: {r['outcome']} (exit {r['exit_code']}), returned {r['returned']}, "
                       f"{r['runs_trained']} runs trained, {r['seconds']:.0f} s"))
    return out


# ---------------------------------------------------------------------------------------- the calibration route

def profile_args(scenario: Path) -> tuple[list[str], list[str]]:
    """`depl profile`'s experiment flags that redo the fit's own profile (its `[[calibration.experiments]]`:
    versions, fractions, switches, epochs, nodes), and their labels."""
    d = tomllib.loads(scenario.read_text(encoding="utf-8"))
    exps = (d.get("calibration") or {}).get("experiments") or []
    if not exps:
        bad_input(f"{scenario}: [calibration] has no experiments; the calibration route redoes the fit's "
                  "profile experiments (fit it with `depl fit --calibration-seeds`)")
    epochs = int(d.get("fitted_epochs") or d["max_epochs"])
    versions, fractions, switches, nodes = [], [], [], set()
    for e in exps:
        c = e.get("conditions") or {}
        nodes.add(int(c.get("nodes", 1)))
        if len(e["versions"]) == 1:
            if e["versions"][0] not in versions:
                versions.append(e["versions"][0])
            f = float(c.get("fraction", 1.0))
            if f not in fractions:
                fractions.append(f)
        elif len(e["versions"]) == 2:
            switches.append(f"{e['versions'][0]}:{e['versions'][1]}:{e['epochs'][0]}")
        else:
            bad_input(f"{scenario}: calibration experiment {e['label']}: {len(e['versions'])} versions; only "
                      "single versions and one switch are profiled again here")
    if len(nodes) != 1:
        bad_input(f"{scenario}: calibration experiments on {sorted(nodes)} nodes; one node count expected")
    args = ["--epochs", str(epochs), "--fractions", ",".join(f"{f:g}" for f in sorted(fractions, reverse=True)),
            "--nodes", str(nodes.pop())]
    for v in versions:
        args += ["--version", v]
    for s in switches:
        args += ["--switch", s]
    return args, [e["label"] for e in exps]


NEED = re.compile(r"a certificate takes ≥ (\d+) runs \(")
HEADS = re.compile(r"(\d+) of (\d+) met ℓmax")


def runs_to_certify(stderr: str, omega: float, alpha: float, experiments: int) -> int | None:
    """Runs per experiment that certify a schedule, from `depl plan`'s refusal: where the chains' heads missed
    none, the refusal's own count; else the fewest n at which the head with the fewest misses certifies if no
    run misses again (depl.certificate.conformal.certifies)."""
    from depl.certificate.conformal import certifies

    m = NEED.search(stderr)
    if m is None:
        return None
    need = int(m.group(1))
    heads = [(int(h), int(n)) for h, n in HEADS.findall(stderr)]
    if not heads:
        return need
    misses = min(n - h for h, n in heads)
    have = max(n for _, n in heads)
    n = max(need, have + 1)
    while not certifies(n - misses, n, omega, alpha / experiments):
        n += 1
    return n


def scenario_digest(a) -> str:
    """The fitted scenario a result was made from, by content (the folder may move; the file may not change)."""
    return hashlib.sha256(a.scenario.read_bytes()).hexdigest()[:16]


def route_folder(a, clock: Clock, name: str, what: str, key: dict, work: float):
    """A route's folder, command log, result file and key, and its result where one of that key is there."""
    folder = a.out / name
    folder.mkdir(parents=True, exist_ok=True)
    done = folder / "result.json"
    key = {"scenario": scenario_digest(a), **key}
    if done.is_file() and json.loads(done.read_text())["key"] == key:
        clock.tick(work, skipped=True)
        say(clock.line(f"{what}: read back"))
        back = json.loads(done.read_text())
        if back.get("plan"):   # recorded relative to the result file: a path of this machine again
            back["plan"] = str(resolved(back["plan"], done))
        return folder, folder / "commands.log", done, key, back
    return folder, folder / "commands.log", done, key, None


def write_route(done: Path, r: dict) -> dict:
    """A route's result file, its plan relative to it (the folder moves whole); `r` as it was."""
    rel = {**r, "plan": relative(r["plan"], done)} if r.get("plan") else r
    done.write_text(json.dumps(rel, indent=1) + "\n", encoding="utf-8")
    return r


def calibration_route(a, clock: Clock) -> dict:
    """`depl plan` refuses → profile that many calibration seeds per experiment → `depl calibrate` → `depl plan`,
    more seeds while it still refuses (at most --calib-rounds rounds, each capped at --calib-max-seeds)."""
    folder, log, done, key, back = route_folder(a, clock, "calibration", "calibration route", {
        "first_seed": a.calib_seed, "rounds": a.calib_rounds, "max_seeds": a.calib_max_seeds}, a.calib_work)
    if back is not None:
        return back
    d = tomllib.loads(a.scenario.read_text(encoding="utf-8"))
    omega, alpha = d["target"]["quantile"], d["target"].get("alpha", 0.05)
    code, _, err = run_cli(["plan", str(a.scenario)], log)
    r: dict = {"key": key, "first_refusal": {"exit_code": code, "says": err.strip()}}
    if code == 0:
        bad_input(f"{a.scenario}: `depl plan` already returns a plan; the calibration route starts from its refusal")
    flags, labels = profile_args(a.scenario)
    n = runs_to_certify(err, omega, alpha, len(labels))
    if n is None:
        bad_input(f"{a.scenario}: `depl plan` refused (exit {code}) without the runs that would certify: {err.strip()}")
    r["runs_per_experiment_asked"] = n
    # the scenario beside the calibrated one, its code folder relative to it (`depl calibrate` keeps the text)
    text = a.scenario.read_text(encoding="utf-8")
    rel = Path(os.path.relpath(a.code.resolve(), folder.resolve())).as_posix()
    text = re.sub(r'(?m)^code_dir = ".*"$', f'code_dir = "{rel}"', text)
    base = folder / "fitted.toml"
    base.write_text(text, encoding="utf-8")
    rounds = []
    plan_out = folder / "plan.json"
    for rnd in range(a.calib_rounds):
        seeds = min(n, a.calib_max_seeds)
        say(clock.line(f"calibration route, round {rnd + 1}: profiling {seeds} seeds per experiment from "
                       f"{a.calib_seed} ({len(labels)} experiments)"))
        t0 = time.perf_counter()
        code, out, err = run_cli(["profile", str(a.base), *flags, "--seeds", str(seeds), "--first-seed",
                                  str(a.calib_seed), "--out", str(folder / "profile"), "--allow-code", str(a.code),
                                  "--json", *training_flags(a)], log)
        if code != 0:
            raise SystemExit(f"depl profile exited {code} (see {log}): {err.strip()[-400:]}")
        prof = json.loads(out)
        code, _, err = run_cli(["calibrate", str(base), str(folder / "profile" / "runs.sqlite"), "--out",
                                str(folder / "calibrated.toml")], log)
        if code != 0:
            raise SystemExit(f"depl calibrate exited {code} (see {log}): {err.strip()[-400:]}")
        code, out, err = run_cli(["plan", str(folder / "calibrated.toml"), "--out", str(plan_out), "--json"], log)
        made = Certificate.of_plan(json.loads(plan_out.read_text(encoding="utf-8")).get("info"), str(plan_out))
        if code == 0 and not (made is not None and made.certified):
            # too few calibration runs to use at all: the table is kept unused and `depl plan` plans with the law
            # as fitted, "not certified yet" — not a certified plan; the route needs more runs
            code, err = 3, ("the calibration runs are too few to use (the plan is not certified yet); a "
                            f"certificate takes ≥ {n} runs ({seeds} per experiment here)")
        table = tomllib.loads((folder / "calibrated.toml").read_text(encoding="utf-8"))["calibration"]
        rounds.append({"seeds_per_experiment": seeds, "plan_exit_code": code, "seconds": time.perf_counter() - t0,
                       "profiled": [x["experiment"] for x in prof["runs"]], "profile_runs": prof["runs_trained"],
                       "experiments": [e["label"] for e in table.get("experiments", [])],
                       "refusal": None if code == 0 else err.strip()})
        if sorted(rounds[-1]["experiments"]) != sorted(labels):
            raise SystemExit(f"the calibration runs' experiments {rounds[-1]['experiments']} are not the fit's "
                             f"{labels} (see {log})")
        if code == 0 or seeds >= a.calib_max_seeds:
            break
        more = runs_to_certify(err, omega, alpha, len(labels))
        if more is None or more <= seeds:
            break
        n = more
    last = rounds[-1]
    r["rounds"] = rounds
    r["experiments"] = labels
    r["seeds_per_experiment"] = last["seeds_per_experiment"]
    r["calibration_runs"] = last["seeds_per_experiment"] * len(labels)
    epochs = int(d.get("fitted_epochs") or d["max_epochs"])
    r["seed_epochs"] = r["calibration_runs"] * epochs
    r["seeds"] = [a.calib_seed, a.calib_seed + last["seeds_per_experiment"] - 1]
    r["seconds"] = sum(x["seconds"] for x in rounds)     # of this call: a resumed route counts only its own
    r["exit_code"] = last["plan_exit_code"]
    if last["plan_exit_code"] == 0:
        p = json.loads(plan_out.read_text(encoding="utf-8"))
        r["plan"] = str(plan_out)
        r["cost"] = p["cost"]
        made = Certificate.of_plan(p.get("info"), str(plan_out))
        r["certificate"] = made.to_json() if made is not None else None
    else:
        r["plan"] = None
        r["cost"] = None
    write_route(done, r)
    clock.tick(a.calib_work)
    say(clock.line(f"calibration route: {'plan cost ' + format(r['cost'], '.6g') if r['cost'] is not None else 'refused'}"
                   f" after {r['calibration_runs']} calibration runs"))
    return r


# ----------------------------------------------------------------------- the route --uncalibrated + depl certify

def uncalibrated_route(a, clock: Clock) -> dict:
    folder, log, done, key, back = route_folder(a, clock, "uncalibrated", "route --uncalibrated + depl certify", {
        "first_seed": a.certify_seed, "max_runs": a.certify_max_runs, "batch": a.batch}, a.certify_work)
    if back is not None:
        return back
    plan = folder / "plan.json"
    code, _, err = run_cli(["plan", str(a.scenario), "--uncalibrated", "--out", str(plan)], log)
    if code != 0:
        raise SystemExit(f"depl plan --uncalibrated exited {code} (see {log}): {err.strip()[-400:]}")
    say(clock.line(f"route --uncalibrated: depl certify from seed {a.certify_seed}, at most {a.certify_max_runs} runs"))
    t0 = time.perf_counter()
    code, out, err = run_cli(["certify", str(plan), "--first-seed", str(a.certify_seed), "--max-runs",
                              str(a.certify_max_runs), "--batch", str(a.batch), "--out", str(folder / "certify"),
                              "--allow-code", str(a.code), "--json", *training_flags(a)], log)
    if code not in (0, 3, 4):
        raise SystemExit(f"depl certify exited {code} (see {log}): {err.strip()[-400:]}")
    c = Certificate.from_json({k: v for k, v in json.loads(out).items() if k not in ("report", "exit_code")},
                              "depl certify --json")
    p = json.loads(plan.read_text(encoding="utf-8"))
    r = {"key": key, "plan": str(plan), "cost": p["cost"], "epochs": len(p["epochs"]), "exit_code": code,
         "verdict": c.verdict.value, "runs_counted": c.runs, "met": c.hits,
         "runs_trained": c.runs + len(c.evidence["trained_not_counted"]), "seed_epochs": c.evidence["seed_epochs"],
         "lower_bound": c.lower_bound, "seconds": time.perf_counter() - t0}
    write_route(done, r)
    clock.tick(a.certify_work)
    say(clock.line(f"route --uncalibrated + depl certify: {r['verdict']} (exit {code}) after {r['runs_counted']} runs"))
    return r


# ------------------------------------------------------------------------------------------------ true coverage

def true_coverage(a, plans: list[tuple[str, object]], clock: Clock) -> dict[str, dict]:
    """Each named plan's hits on the N fresh seeds: the plans grouped as the search groups candidates, each
    group's longest job trained once on those seeds, each plan read at its own length."""
    from depl.store import Store
    from depl.train.engine import execute
    from depl.train.backends.executors import run_all
    from depl.train.loops.search import final_loss, group, make_candidate

    cands = [make_candidate(p, {}, "cpu") for _, p in plans]
    group(cands)
    (a.out / "truth").mkdir(parents=True, exist_ok=True)
    st = Store(str(a.out / "truth" / "runs.sqlite"))
    groups = sorted({c.group for c in cands})
    run_ids = {g: execute.run_id_for(cands[g].job, "local", prefix="truth") for g in groups}
    for g, rid in run_ids.items():
        execute.register(st, rid, "truth", cands[g].job, {"backend": "local"})   # the job is its identity
    seeds = list(range(a.truth_seed, a.truth_seed + a.truth))
    work = sum(cands[g].epochs for g in groups) * a.truth
    say(clock.line(f"true coverage: {len(plans)} plans in {len(groups)} groups ({', '.join(str(cands[g].epochs) for g in groups)} "
                   f"epochs), {a.truth} seeds from {a.truth_seed}: {work} seed-epochs"))
    t0 = time.perf_counter()
    count = [0]
    step = max(1, work // 10)

    def progress(rid, seed, epoch, r):
        count[0] += 1
        if count[0] % step == 0:
            clock.tick(step)
            say(clock.line(f"true coverage: {count[0]} seed-epochs trained"))

    run_all(st, [(run_ids[g], cands[g].job, seeds) for g in groups], progress=progress,
            seed_batch=a.batch, workers=a.workers, threads=a.threads)
    clock.tick(work - (count[0] // step) * step, skipped=count[0] == 0)
    read = {g: (st.losses(run_ids[g]), st.diverged(run_ids[g])) for g in groups}
    out = {}
    for (name, p), c in zip(plans, cands):
        losses = [final_loss(*read[c.group], s, c.epochs) for s in seeds]
        hits = sum(x <= p.loss_target for x in losses)
        lo, hi = clopper_pearson_interval(hits, len(seeds), 0.95)
        out[name] = {"hits": hits, "runs": len(seeds), "rate": hits / len(seeds), "cp95": [lo, hi],
                     "lower95": clopper_pearson_lower(hits, len(seeds), 0.05),
                     "upper95": clopper_pearson_upper(hits, len(seeds), 0.05),
                     "epochs": c.epochs, "schedule": c.words(), "cost": p.cost, "trained_with": run_ids[c.group]}
    say(clock.line(f"true coverage: done ({count[0]} seed-epochs trained here, {time.perf_counter() - t0:.0f} s)"))
    return out


# -------------------------------------------------------------------------------------------------- the report

def summarize(a, searches, cands, calib, uncal, truth, omega) -> dict:
    lists = {json.dumps(s["candidates"], sort_keys=True) for s in searches}
    same = len(lists) == 1
    cov = {i: truth[f"candidate {i}"] for i in range(len(cands))}
    rows = []
    for s in searches:
        t = cov[s["returned"]] if s["returned"] is not None else None
        rows.append({**{k: s[k] for k in ("search", "exit_code", "outcome", "returned", "cost", "runs_trained",
                                          "seed_epochs", "seeds", "seconds")},
                     "true_coverage": t, "below_omega": None if t is None else t["rate"] < omega,
                     "surely_below_omega": None if t is None else t["upper95"] < omega})
    ok = [r for r in rows if r["returned"] is not None]
    good = [c for c in cands if cov[c["index"]]["rate"] >= omega]
    sure = [c for c in cands if cov[c["index"]]["lower95"] >= omega]
    cheapest = min(good, key=lambda c: c["cost"]) if good else None
    cheapest_sure = min(sure, key=lambda c: c["cost"]) if sure else None
    mean_runs = sum(r["runs_trained"] for r in rows) / len(rows)
    mean_cost = sum(r["cost"] for r in ok) / len(ok) if ok else None
    summary = {
        "omega": omega, "searches": len(rows), "certified": len(ok), "same_candidates_in_every_search": same,
        "below_omega": sum(bool(r["below_omega"]) for r in ok),
        "surely_below_omega": sum(bool(r["surely_below_omega"]) for r in ok),
        "mean_runs_trained": mean_runs, "mean_seed_epochs": sum(r["seed_epochs"] for r in rows) / len(rows),
        "calibration_runs": calib.get("calibration_runs"), "calibration_seed_epochs": calib.get("seed_epochs"),
        "runs_ratio": mean_runs / calib["calibration_runs"] if calib.get("calibration_runs") else None,
        "mean_cost": mean_cost,
        "cheapest_covering": None if cheapest is None else {"index": cheapest["index"], "cost": cheapest["cost"]},
        "cost_ratio": None if cheapest is None or mean_cost is None else mean_cost / cheapest["cost"],
        "cheapest_surely_covering": None if cheapest_sure is None else {"index": cheapest_sure["index"],
                                                                          "cost": cheapest_sure["cost"]},
        "cost_ratio_sure": None if cheapest_sure is None or mean_cost is None else mean_cost / cheapest_sure["cost"],
        "calibration_route": {k: calib.get(k) for k in ("exit_code", "cost", "calibration_runs", "seed_epochs",
                                                          "seeds_per_experiment", "seconds")}
        | {"rounds": len(calib.get("rounds", [])), "true_coverage": truth.get("calibration route")},
        "uncalibrated_route": {k: uncal.get(k) for k in ("exit_code", "cost", "verdict", "runs_counted",
                                                           "runs_trained", "seed_epochs", "seconds")}
        | {"true_coverage": truth.get("uncalibrated route")},
    }
    # the scenario relative to the report's folder (depl.paths): the folder moves whole
    return {"format": "depl.bench-routes/1", "scenario": relative(a.scenario, a.json), "alpha": a.alpha, "omega": omega,
            "truth_seeds": [a.truth_seed, a.truth_seed + a.truth - 1], "candidates":
            [{**c, "true_coverage": cov[c["index"]]} for c in cands], "searches": rows, "summary": summary}


def cov_words(t) -> str:
    if t is None:
        return "–"
    return f"{t['hits']}/{t['runs']} = {t['rate']:.3f} [{t['cp95'][0]:.3f}, {t['cp95'][1]:.3f}]"


def fmt(x, spec=".6g") -> str:
    return "–" if x is None else format(x, spec)


def _sched(route: dict) -> str:
    t = route.get("true_coverage")
    return f"{t['schedule']}, " if t else ""


def markdown(rep: dict) -> str:
    s, w = rep["summary"], rep["omega"]
    lines = [f"Candidates (the same in every search: {'yes' if s['same_candidates_in_every_search'] else 'NO'}), "
             f"true coverage on {rep['candidates'][0]['true_coverage']['runs']} fresh seeds "
             f"{rep['truth_seeds'][0]}..{rep['truth_seeds'][1]} (95 % Clopper–Pearson):", "",
             "| candidate | schedule | cost | true coverage [95 % CP] | one-sided 95 % lower |", "|---|---|---:|---|---:|"]
    for c in rep["candidates"]:
        t = c["true_coverage"]
        lines.append(f"| [{c['index']}] | {c['schedule']} | {c['cost']:.6g} | {cov_words(t)} | {t['lower95']:.3f} |")
    lines += ["", f"| search | seeds | exit | returned | cost | runs trained | seed-epochs | wall (s) | true coverage "
              f"[95 % CP] | below ω = {w:g}? |", "|---:|---|---:|---|---:|---:|---:|---:|---|---|"]
    for r in rep["searches"]:
        below = "–" if r["below_omega"] is None else ("yes" + (" (upper bound too)" if r["surely_below_omega"]
                                                                else "") if r["below_omega"] else "no")
        lines.append(f"| {r['search']} | {'..'.join(map(str, r['seeds']))} | {r['exit_code']} | "
                     f"{'–' if r['returned'] is None else '[' + str(r['returned']) + ']'} | {fmt(r['cost'])} | "
                     f"{r['runs_trained']} | {r['seed_epochs']} | {r['seconds']:.0f} | {cov_words(r['true_coverage'])} "
                     f"| {below} |")
    cr, ur = s["calibration_route"], s["uncalibrated_route"]
    ch, cs = s["cheapest_covering"], s["cheapest_surely_covering"]
    lines += ["", f"* searches certified: {s['certified']} of {s['searches']}; returned plan's true coverage below ω: "
              f"{s['below_omega']} (point estimate), {s['surely_below_omega']} with the one-sided 95 % upper bound "
              "below ω",
              f"* runs trained per search (mean): {s['mean_runs_trained']:.1f} ({s['mean_seed_epochs']:.0f} "
              f"seed-epochs) against the calibration route's {fmt(s['calibration_runs'])} calibration runs "
              f"({fmt(s['calibration_seed_epochs'])} seed-epochs): ratio {fmt(s['runs_ratio'], '.3f')}",
              f"* mean cost of the plans returned: {fmt(s['mean_cost'])}; the cheapest candidate whose true coverage "
              f"≥ ω: {'none' if ch is None else '[' + str(ch['index']) + '] ' + format(ch['cost'], '.6g')} (ratio "
              f"{fmt(s['cost_ratio'], '.4f')}); whose one-sided lower bound ≥ ω: "
              f"{'none' if cs is None else '[' + str(cs['index']) + '] ' + format(cs['cost'], '.6g')} (ratio "
              f"{fmt(s['cost_ratio_sure'], '.4f')})",
              f"* calibration route: `depl plan` exit {fmt(cr['exit_code'])}, plan {_sched(cr)}cost {fmt(cr['cost'])}, "
              f"{fmt(cr['calibration_runs'])} calibration runs ({fmt(cr['seeds_per_experiment'])} per experiment, "
              f"{cr['rounds']} round(s)), {fmt(cr['seed_epochs'])} seed-epochs; true coverage "
              f"{cov_words(cr['true_coverage'])}",
              f"* `--uncalibrated` + `depl certify`: plan {_sched(ur)}cost {fmt(ur['cost'])}, {ur['verdict']} (exit "
              f"{ur['exit_code']}) after {fmt(ur['runs_counted'])} runs counted ({fmt(ur['runs_trained'])} trained, "
              f"{fmt(ur['seed_epochs'])} seed-epochs); true coverage {cov_words(ur['true_coverage'])}"]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", type=Path, default=TASK / "fitted.toml", help="the fitted scenario")
    ap.add_argument("--base", type=Path, default=TASK / "my-digits.toml",
                    help="the scenario the fit's profile ran (the calibration route profiles it again)")
    ap.add_argument("--allow-code", dest="code", type=Path, default=None,
                    help="the folder of the task's own code [default: the scenario's folder]")
    ap.add_argument("--out", type=Path, default=Path("depl-routes"), help="the stores and results (resumable)")
    ap.add_argument("--json", type=Path, default=None, help="the report [default: OUT/routes.json]")
    ap.add_argument("--md", type=Path, default=None, help="also write the markdown tables here")
    ap.add_argument("--searches", type=int, default=10)
    ap.add_argument("--first-search-seed", type=int, default=3_100_000, help=f"search i starts at F + {STRIDE}·i")
    ap.add_argument("--max-runs", type=int, default=500, help="a search's --max-runs")
    ap.add_argument("--batch", type=int, default=16, help="seeds trained together (search, certify, truth)")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--truth", type=int, default=400, help="N: fresh seeds of every candidate's true coverage")
    ap.add_argument("--truth-seed", type=int, default=3_300_000)
    ap.add_argument("--calib-seed", type=int, default=3_400_000, help="the calibration route's first seed")
    ap.add_argument("--calib-rounds", type=int, default=4, help="profile more while `depl plan` still refuses")
    ap.add_argument("--calib-max-seeds", type=int, default=400, help="calibration seeds per experiment, at most")
    ap.add_argument("--certify-seed", type=int, default=3_500_000)
    ap.add_argument("--certify-max-runs", type=int, default=500)
    ap.add_argument("--workers", type=int, default=None, help="worker processes [default: as depl decides]")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--small", action="store_true",
                    help="CI size: 2 searches of at most 8 runs, 16 fresh seeds, 2 calibration seeds per "
                         "experiment (one round), certify at most 8 runs, batches of 8, one worker")
    a = ap.parse_args(argv)
    if a.small:
        a.searches, a.max_runs, a.truth, a.batch = 2, 8, 16, 8
        a.calib_rounds, a.calib_max_seeds, a.certify_max_runs = 1, 2, 8
        a.workers = a.workers or 1
    for flag in ("scenario", "base"):
        p = getattr(a, flag)
        if not p.is_file():
            bad_input(f"--{flag} {p}: no such file")
    for flag in ("searches", "max_runs", "batch", "truth", "calib_rounds", "calib_max_seeds", "certify_max_runs"):
        if getattr(a, flag) < 1:
            bad_input(f"--{flag.replace('_', '-')} {getattr(a, flag)}: must be at least 1")
    a.code = a.code or a.scenario.parent
    a.json = a.json or a.out / "routes.json"
    a.out.mkdir(parents=True, exist_ok=True)

    from depl.train.task.custom import allow

    allow([a.code.resolve()])
    from depl.plan import Plan
    from depl.workflows.search import candidate_rows, prepare_search
    from depl.workflows.common import Training

    prep = prepare_search(str(a.scenario), alpha=a.alpha, training=Training(threads=a.threads, workers=a.workers,
                                                                            seed_batch=a.batch))
    cands = candidate_rows(prep)
    omega = prep.scenario.target.quantile
    longest = sum(sorted({c.epochs for c in prep.candidates}))   # a rough share of each step's work, for the ETA
    a.search_work = 6 * a.batch * longest
    nexp = len(profile_args(a.scenario)[1])
    a.calib_work = nexp * min(45, a.calib_max_seeds) * prep.scenario.max_epochs
    a.certify_work = 4 * a.batch * prep.candidates[0].epochs
    clock = Clock(a.searches * a.search_work + a.calib_work + a.certify_work + longest * a.truth)
    say(f"{prep.scenario.name}: {len(cands)} candidates, ω {omega:g}, ℓmax {prep.scenario.target.loss:g}, α {a.alpha:g}; "
        f"{a.searches} searches from seed {a.first_search_seed} (+{STRIDE}·i), {a.truth} fresh seeds from "
        f"{a.truth_seed}; stores under {a.out}")

    searches = run_searches(a, clock)
    calib = calibration_route(a, clock)
    uncal = uncalibrated_route(a, clock)

    plans: list[tuple[str, object]] = [(f"candidate {c['index']}", p.plan) for c, p in zip(cands, prep.candidates)]
    for name, r in (("calibration route", calib), ("uncalibrated route", uncal)):
        if r.get("plan"):
            plans.append((name, Plan.load(r["plan"])))   # its code_dir taken from its folder
    truth = true_coverage(a, plans, clock)
    rep = summarize(a, searches, cands, calib, uncal, truth, omega)
    # each route's plan relative to the report (depl.paths), as its scenario
    rep["calibration_route"], rep["uncalibrated_route"] = (
        {**r, "plan": relative(r["plan"], a.json)} if r.get("plan") else r for r in (calib, uncal))
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(rep, indent=1) + "\n", encoding="utf-8")
    md = markdown(rep)
    print(md)
    if a.md is not None:
        a.md.parent.mkdir(parents=True, exist_ok=True)
        a.md.write_text(md + "\n", encoding="utf-8")
    say(f"written {a.json}" + (f" and {a.md}" if a.md else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
