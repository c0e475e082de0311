"""`depl plan SCENARIO --certify`: the certified search's command-line side (depl.workflows.search)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..certificate import DEFAULT_ALPHA, Outcome
from .console import (choice, console, epoch_progress, err_console,
                      print_json, refusals)
from .training import KeepModels
from ..workflows.errors import BadInput
from .. import workflows
from ..certificate.search import HORIZON as HORIZON_DEFAULT, MAX_RUNS


# `depl plan`'s options for --certify (one object per option)
CERTIFY = typer.Option(False, "--certify", help="train candidate plans, fixed in advance, on fresh seeds and return "
                       f"the cheapest one the runs certify with confidence 1 − α [default α {DEFAULT_ALPHA:g}] (docs/certificate.md, "
                       "\"The certified search\"); exits 3 when none is certified within --max-runs, 4 when every "
                       "candidate is refuted")
MAX_RUNS_SEARCH = typer.Option(None, "--max-runs", min=1, max=100_000, help="--certify: the most runs each "
                               "candidate's test counts (the search pauses there, undecided; a batch a candidate started it "
                               "counts whole) — not the runs trained: the search "
                               "trains whole batches, --batch seeds for every job in the race, so it trains at least "
                               f"one batch and may train more runs than it counts [default: {MAX_RUNS}, or what the store's "
                               "search went on to; a rerun may only raise it, and goes on where it stopped, as one search with "
                               "that --max-runs would have]")
FIRST_SEED = typer.Option(None, "--first-seed", min=0, max=2**31 - 1, help="--certify: F, the first fresh seed "
                          "(F, F+1, … in order) [default: above every seed the scenario's fit and calibration used; "
                          "those are refused]")
PRIOR = typer.Option(None, "--prior", help="--certify: each candidate's e-process [default: spiked; uniform: the "
                     "mixture of depl 0.1.0] (docs/certificate.md)")
ALLOCATION = typer.Option(None, "--allocation", help="--certify: which candidates in the race count each batch: "
                          "focus (the cheapest first, a costlier one only once those look unlikely to certify) or all "
                          "(every one, every seed) [default: as the store's runs were counted, else focus]")
BATCH = typer.Option(None, "--batch", min=1, max=4096, help="--certify: seeds trained together between two looks at "
                     "the tests [default: 32, or the store's search's]")
STORE = typer.Option(None, "--store", help="--certify: the runs store [default: the folder of --out (else "
                     "depl-search)/runs.sqlite]")
USES = typer.Option(None, "--uses", min=1, max=1e12, help="--certify: how many times you will run the plan "
                    "returned: the search weighs what its runs cost against what a cheaper plan saves over these "
                    "uses, and stops pushing a cheaper candidate whose runs cost more than it would save [default "
                    "1000: a plan is run many times between two certificates; or the store's search's]")
HORIZON = typer.Option(None, "--horizon", min=1, max=100_000, help="--certify: the runs the search's decisions "
                      "reckon with — dropping a candidate, pricing it out, the shares of α, the price printed — "
                      "fixed before the first run and recorded with the search; at least --max-runs, which only "
                      "pauses the "
                      f"search [default: {HORIZON_DEFAULT}, or the first --max-runs where larger: long enough that a "
                      "candidate near ω is judged on the runs it would really take, and a rerun with a larger "
                      "--max-runs, up to the horizon, decides as one search with that cap from the start; a rerun "
                      "takes the store's search's]")
PNG = typer.Option(None, "--png", help="--certify: draw the candidates (cost against the certified lower bound) here")
KEEP_SEARCH = typer.Option(None, "--keep-models", **choice(KeepModels, "--keep-models"), help="--certify: the "
                           "models the search's runs train, kept as depl run keeps them (STORE's folder/models/RUN_ID; "
                           "depl runs models, depl.load_model); once decided only the returned plan's stay: all, "
                           "best (the lowest final test loss) or none [default: best]")

def search_only(given: dict) -> None:
    """Refuse the search's options on a plan without --certify (exit 2), where they would do nothing."""
    said = [flag for flag, v in given.items() if v is not None]
    with refusals():
        if said:
            raise BadInput(f"{', '.join(said)}: used only by --certify (the certified search on real runs); add "
                           "--certify, or drop it")


def plan_certified(scenario: str, method: str, eta: int, out: Optional[Path], loss, quantile, deadline, alpha,
                   as_json: bool, opts: dict) -> None:
    """Propose the candidates, say them, train them on fresh seeds until the search finishes, and say what it
    returned; exit 0 certified, 3 none certified within --max-runs, 4 every candidate refuted."""
    con = err_console if as_json else console
    unused = [flag for flag, v in opts.pop("unused", {}).items() if v is not None]
    with refusals():  # every refusal before anything is written or trained
        if unused:
            raise BadInput(f"{', '.join(unused)}: not used by --certify (it plans its candidates with the law as "
                           "fitted and certifies on real runs); drop it, or plan without --certify")
        prep = workflows.prepare_search(scenario, method, eta=eta, loss=loss, quantile=quantile, deadline=deadline,
                                        alpha=alpha, out=out, store=opts["store"], png=opts["png"],
                                        training=opts["training"], rerun=opts)
        prices = workflows.price(prep, opts["max_runs"], opts["uses"], opts["horizon"])
    _candidates(con, prep, workflows.candidate_rows(prep), prices)
    with epoch_progress("epochs") as bar, refusals():
        task = bar.add_task("search", total=None)

        def progress(rid, seed, epoch, r):
            bar.update(task, advance=1)

        def looked(search, seeds, seconds):
            bar.update(task, description=_line(search, seeds, seconds))

        done = workflows.run_search(prep, out=out, progress=progress, on_batch=looked, **opts)
    _result(con, done)
    code = done.certificate.exit_code()
    if as_json:
        print_json({**(done.plan.to_json() if done.plan else {"feasible": False, "reason": reason(done.certificate)}),
                    "certificate": done.certificate.to_json(), "exit_code": code})
    raise typer.Exit(code)


def _candidates(con, prep, rows: list[dict], prices: list[dict]) -> None:
    s = prep.scenario
    con.print(f"certified search for {s.name}: P(ℓ(K) ≤ {s.target.loss:g}) ≥ ω = {s.target.quantile:g} with "
              f"confidence {1 - prep.alpha:g}; {len(rows)} candidates fixed before any run, α shared where it buys "
              "most",
              markup=False, highlight=False)
    for r, pr in zip(rows, prices):
        at = r["proposed_at"]
        con.print(f"  [{r['index']}] cost {r['cost']:.6g}, K = {r['epochs']}: {r['schedule']} (planned at ω "
                  f"{at['omega']:.4g}, ℓmax {at['loss']:.4g}, law {at['law']}); {_price(pr)}",
                  markup=False, highlight=False)
    # the order the search tries them in: their shares of α halve along it (depl.certificate.search.value_shares)
    order = sorted(range(len(prices)), key=lambda i: (-prices[i]["share"], i))
    tried = next((order[:k + 1] for k, i in enumerate(order) if prices[i]["p_certify"] >= 0.5), None)
    if tried is None:
        con.print(f"  price, by the law: no candidate is likely to certify within the horizon, "
                  f"{prices[0]['horizon'] if prices else HORIZON_DEFAULT} runs", markup=False)
        return
    b = tried[-1]
    runs = sum(prices[i]["expected_runs"] for i in tried)
    cost = sum(prices[i]["expected_cost"] for i in tried)
    con.print(f"  price, by the law: [{b}] (cost {rows[b]['cost']:.6g} per use) certified after about {runs:.0f} "
              f"runs counted (horizon {prices[b]['horizon']} runs), runs' cost ~{cost:.3g}; the law is a guess the "
              "runs may refute", markup=False,
              highlight=False)


def _price(pr: dict) -> str:
    """A candidate's expected price, as the law sees it."""
    return (f"α×{pr['share']:.3g}, law p {pr['law_p']:.3f}: ~{pr['expected_runs']:.0f} runs to decide (certified with probability "
            f"{pr['p_certify']:.2f}), runs' cost ~{pr['expected_cost']:.3g}")


def _line(search, seeds: int, seconds: float) -> str:
    """The live line: candidates in the race, seeds and runs, the best certified so far, an ETA."""
    alive = search.alive()
    runs = sum(a.test.runs for a in search.arms)
    b = search.best()
    best = f"best certified: [{b}] cost {search.arms[b].cost:.6g}" if b is not None else "none certified yet"
    eta = ""
    if alive and seeds:
        a = search.arms[alive[0]]
        left = search.max_runs - a.test.runs
        more = min(search.more_runs(alive[0], horizon=max(left, 1))["mean_more_runs"], left)
        eta = f", ETA ~{more * seconds / seeds / 60:.1f} min"
    return (f"{len(alive)} of {len(search.arms)} candidates in the race ({len(search.counting())} counting), "
            f"{seeds} seeds, {runs} runs; {best}{eta}")


def cost_line(cert) -> str:
    """What the search trained, and what --max-runs counted where the two differ (it caps the runs each candidate
    counts; the search trains whole batches for every job in the race)."""
    c = cert.evidence
    counted = max((r["runs"] for r in cert.candidates), default=0)
    differ = (f"; --max-runs {c['max_runs']} caps the runs each candidate counts (the most counted: {counted}), not "
              f"those trained: each batch trains --batch seeds for every job in the race"
              if c["runs_trained"] > c["max_runs"] else "")
    seeds = "..".join(map(str, cert.seeds[0])) if cert.seeds else "none"
    return (f"  cost: {c['runs_trained']} runs trained ({c['seed_epochs']} seed-epochs, runs' cost "
            f"{c['runs_cost']:.4g}), seeds {seeds}, store {cert.store}, "
            f"{c['seconds'] / 60:.1f} min in this command{differ}")


def undecided_hint(m: dict, r: dict) -> str:
    """What going on with the candidate likeliest to certify takes (`m`: the certificate's `expected_more_runs`;
    `r`: that candidate's row): with no run counted yet, the fewest runs that certify it and, at its law's guess,
    the runs the search expects it to need; where every run it counted met ℓmax, the more runs that certify it if
    each meets ℓmax too (Laplace's rate would read 4 of 4 as 0.83); else the runs expected at its observed rate."""
    need, i = m.get("if_all_meet"), m["candidate"]
    if r["runs"] == 0:
        fewest = (f"it certifies after {need} runs at the fewest, if each meets ℓmax" if need is not None else
                  "its test's bound needs more runs than depl counts")
        guess = (f"; at its law's guess (P(ℓ(K) ≤ ℓmax) ≈ {r['law_p']:.3f}) the search expects about "
                 f"{m['outlook_runs']:.0f} runs to decide it within its {m['runs_left']} runs left, certifying with "
                 f"probability {m['outlook_p_certify']:.2f}" if r.get("law_p") is not None else "")
        return f"candidate [{i}] has no runs counted yet: {fewest}{guess}"
    if r["met"] == r["runs"] and need is not None:
        return (f"candidate [{i}]: every run it counted met ℓmax ({r['met']} of {r['runs']}), it certifies after "
                f"{need} more runs if each meets ℓmax too")
    return (f"candidate [{i}] at its rate ({m['rate']:.3f}) expects about {m['mean_more_runs']:.0f} more runs "
            f"(certifies with probability {m['p_certify']:.2f})")


def _result(con, done) -> None:
    cert = done.certificate
    for r in cert.candidates:
        said = ("priced out" if r.get("priced_out") else "paused" if r["index"] in cert.evidence["paused"]
                else r["verdict"])
        new = (f" — proposed from the runs after {r['proposed_at'].get('after_seeds')} seeds (ℓmax tightened to "
               f"{r['proposed_at'].get('loss'):.4g})" if r.get("proposal") else "")
        con.print(f"  [{r['index']}] {said:<10} {r['met']}/{r['runs']} met ℓmax, lower bound "
                  f"{r['lower_bound']:.3f} (α {r['alpha']:.3g}), cost {r['cost']:.6g}: {r['schedule']}{new}",
                  markup=False, highlight=False)
    con.print(cost_line(cert), markup=False, highlight=False)
    if done.png is not None:
        con.print(f"  candidates drawn at {done.png}", markup=False)
    if cert.models:
        m = cert.models
        con.print(f"  models ({m['keep']}) of the plan returned: {m['kept']} in {m['folder']} (depl runs models "
                  f"{Path(m['folder']).parent.parent})", markup=False, highlight=False)
    if cert.certified:
        r = cert.candidates[cert.returned]
        con.print(f"certified: with probability ≥ {1 - cert.alpha:g} over the runs of the search, the plan returned "
                  f"([{r['index']}], cost {r['cost']:.6g}: {r['schedule']}) meets ℓmax = {cert.loss_target:g} with "
                  f"probability ≥ ω = {cert.omega:g} on a new run ({r['met']} of {r['runs']} runs met it)"
                  + (f"; written to {done.out}" if done.out else ""), markup=False, highlight=False)
        if cert.evidence["paused"]:
            con.print(f"  cheaper candidates paused at --max-runs {cert.evidence['max_runs']}: "
                      f"{', '.join(f'[{i}]' for i in cert.evidence['paused'])}; a rerun with a larger --max-runs goes "
                      "on with them where this stopped (and may return a cheaper plan)", markup=False, highlight=False)
    else:
        con.print(reason(cert), markup=False, highlight=False)


def reason(cert) -> str:
    """Why a search returned no plan (refuted or undecided), as its last line says and --json's `reason`."""
    if cert.verdict is Outcome.REFUTED:
        return (f"refuted: every candidate meets ℓmax = {cert.loss_target:g} with probability < ω = {cert.omega:g} "
                f"(each at its share of α = {cert.alpha:g}); no plan written")
    m = cert.evidence["expected_more_runs"]
    hint = "; " + undecided_hint(m, cert.candidates[m["candidate"]]) if m else ""
    return (f"undecided: no candidate certified within --max-runs {cert.evidence['max_runs']} runs counted "
            f"each{hint}: rerun with a larger --max-runs to go on where this stopped; no plan written")
