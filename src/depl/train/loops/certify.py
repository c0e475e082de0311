"""`depl certify`'s pipeline: a plan run on fresh seeds until a sequential test decides "P(ℓ(K) ≤ ℓmax) ≥ ω".

The plan has been chosen already — by the planner, with whatever runs it
looked at — so the runs that certify it are new ones, used for nothing else:
confirmation runs of the plan returned.  Whatever chose the plan, the
statement "with probability ≥ 1 − α over these runs, the plan meets ℓmax with
probability ≥ ω on a new run" then holds for it, because these runs were
drawn after the choice and are independent of it (docs/certificate.md).

Seeds F, F+1, … train in batches (the vectorised stack, the worker
processes, a Ray cluster: `depl.train.backends.executors.run_all`), and their outcomes
feed `depl.certificate.Sequential` in seed order; the test stops at the first
seed after which it can decide, so a batch's later seeds may be trained and
not counted.  Runs go to the store under their own run id (`certify-…`),
never shared with `depl run` or `depl validate`; a rerun resumes and replays
the same seeds in the same order to the same decision.

The seeds are fresh by construction, not by promise: `seeds_for` reads the
plan's seed ledger (depl.ledger: its law's fitting seeds, its calibration
runs, the store's runs of the plan) and refuses a first seed whose range
meets it; the default is the ledger's first free seed.  The store records the
α and the first seed the run began with, and a resumed run given others is
refused (its test's level and seeds were fixed before its first run).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from ...certificate import (DEFAULT_ALPHA, DEFAULT_PRIOR, Certificate, Kind, Outcome, Sequential, Verdict, expected_runs,
                           more_runs_if_all_meet, seed_ranges)
from ...ledger import Ledger, TaskSeeds, check_certificate, plan_lineage, resolve, store_uses
from ...plan import Plan
from ...scenario import Scenario
from ...store import Store, store_path
from ..engine import execute
from ..task.data import MNIST1D_POOL
from ..engine.federation import Job, job_from_plan
from ..backends.executors import run_all


def covers(scenario: Scenario) -> str:
    """What randomness the certificate covers: a new seed draws the initialisation and the data order, and where
    runs draw their own data ([training] data_draw = "run"), the data, its split over nodes and the test set."""
    t = scenario.training
    node_split = ("its Dirichlet(α = %g) partition over nodes" % t.dirichlet_alpha
                  if t.dirichlet_alpha is not None and not t.iid else "its split over nodes")
    if t.data_draw == "run":
        sources = {d.source for d in scenario.datasets}
        if sources == {"mnist1d"}:
            data = (f"its own MNIST-1D train and test samples (drawn from {MNIST1D_POOL:,} samples of the "
                    "generator)")
        else:
            data = "its own train/test split of the data (or your source's own draw where its factory takes `seed`)"
        return (f"a new run: the network's initialisation, the order of the data, {data}, its data fraction "
                f"and {node_split}")
    return ("a new seed: the network's initialisation and the order of the data; the data drawn, "
            f"{node_split} and the test set are the same as in these runs")


@dataclass
class Decided:
    """What `certify` decided, on which runs, and what it cost (`certificate()`: its depl.certificate.Certificate)."""

    plan_file: str
    plan: Plan
    scenario: Scenario
    verdict: Verdict
    first_seed: int
    counted: list[int]                  # the seeds the test counted, in order
    finals: dict[int, float]            # ℓ(K) of every trained seed (+inf: diverged)
    trained_after: list[int]            # seeds trained in the last batch after the decision, not counted
    run_id: str
    store: str
    seconds: float                      # training and testing time of this command (a resumed run adds none)
    max_runs: int
    more: dict = field(default_factory=dict)  # undecided: the runs still expected at the observed rate
    rule: str = ""                      # the e-process that decided (`Sequential.rule`)
    ledger: list = field(default_factory=list)  # the seeds of the plan's lineage it kept clear of (depl.ledger)

    @property
    def seed_epochs(self) -> int:
        return (len(self.counted) + len(self.trained_after)) * len(self.plan.epochs)

    def statement(self) -> str:
        v, p = self.verdict, self.plan
        seeds = f"seeds {self.counted[0]}..{self.counted[-1]}" if self.counted else "no seeds"
        if v.verdict is Outcome.CERTIFIED:
            return (f"with probability ≥ {1 - v.alpha:g} over the {v.runs} runs it was built from ({seeds}), this "
                    f"plan meets ℓmax = {p.loss_target:g} with probability ≥ ω = {v.omega:g} on a new run — "
                    f"{covers(self.scenario)}")
        if v.verdict is Outcome.REFUTED:
            return (f"with probability ≥ {1 - v.alpha:g} over the {v.runs} runs ({seeds}), this plan meets "
                    f"ℓmax = {p.loss_target:g} with probability < ω = {v.omega:g}: its guarantee is refuted")
        return (f"after {v.runs} runs ({seeds}), {v.hits} of which met ℓmax = {p.loss_target:g}, the test can "
                f"neither certify nor refute ω = {v.omega:g} at α = {v.alpha:g}")

    def certificate(self) -> Certificate:
        """The certificate (kind `sequential`), its evidence the runs: their finals, run id and store, the plan
        and what the test covers (the bounds are searched here, once)."""
        v, p = self.verdict, self.plan
        test = v.to_json()
        evidence = {"plan_file": self.plan_file, "method": p.method, "scenario": p.scenario, "epochs": len(p.epochs),
                    "prior": v.prior, **{k: test[k] for k in ("upper_bound", "e_value_certify", "e_value_refute",
                                                             "clopper_pearson_lower")},
                    "statement": self.statement(), "covers": covers(self.scenario),
                    "rule": f"{self.rule}, runs in seed order, stopped at the first decision",
                    "first_seed": self.first_seed, "finals": [self.finals[s] for s in self.counted],
                    "trained_not_counted": self.trained_after, "seed_epochs": self.seed_epochs,
                    "seconds": self.seconds, "max_runs": self.max_runs, "run_id": self.run_id, "store": self.store,
                    "expected_more_runs": self.more or None, "ledger": self.ledger}
        return Certificate(Kind.SEQUENTIAL, v.verdict, v.omega, p.loss_target, v.alpha, v.alpha, v.runs, v.hits,
                           seed_ranges((s, s) for s in self.counted), test["lower_bound"], evidence)


@dataclass
class Prepared:
    """A plan checked for certifying — its scenario, its training job, the test at its ω and α — nothing written."""

    plan_file: Path
    plan: Plan
    scenario: Scenario
    job: Job
    test: Sequential
    first_seed: int | None = None     # the seeds' start, once checked against the ledger (`seeds_for`)
    ledger: Ledger = field(default_factory=Ledger)


def prepare(plan_file: Path, alpha: float = DEFAULT_ALPHA, device: str = "cpu",
            prior: str = DEFAULT_PRIOR) -> Prepared:
    """Load and check the plan (its figures, its certificate text, its code, its data) and the test's levels and
    prior (`depl.certificate.PRIORS`; "uniform" decides as depl 0.1.0 did); writes nothing.
    Raises ValueError (PlanError, DataError, JobError, CodeRefused …) with a message for the user."""
    p = Plan.load(plan_file)
    if not p.feasible or not p.epochs:
        raise ValueError(f"{plan_file}: the plan is infeasible or empty; nothing to certify")
    test = Sequential(p.omega, alpha, prior)
    s = p.scenario_object()
    check_certificate(p, str(plan_file), s)
    return Prepared(Path(plan_file), p, s, job_from_plan(p, device), test)


def run_ids(job: Job) -> tuple[str, str]:
    """The store's run ids of a plan's job: its plan run (`depl run`, `depl validate`, `depl coverage`) and its
    certify run."""
    return execute.run_id_for(job, "local"), execute.run_id_for(job, "local", prefix="certify")


def seeds_for(prep: Prepared, store: str | Path, first_seed: int | None, max_runs: int) -> Prepared:
    """The prepared plan with its first seed: `first_seed` (None: the ledger's first free seed, or the first seed
    a resumed run began with) checked against the plan's seed ledger and the store's record of its certify run —
    seeds first..first+max_runs-1 none of the lineage used, and the α and first seed a resumed run began with.
    Reads the store only (nothing written).  Raises depl.ledger.SeedsUsed, StoreError."""
    plan_run, cert_run = run_ids(prep.job)
    where = store_path(store)
    ledger = plan_lineage(prep.plan, prep.scenario) + TaskSeeds.of(prep.scenario).ledger(where, plan_run)
    if where != ":memory:" and Path(where).is_file():
        with Store(where, readonly=True) as st:
            ledger = ledger + store_uses(st, plan_run, cert_run)
    asked = "" if first_seed is None else f"--first-seed {first_seed} --max-runs {max_runs}"
    first = resolve(ledger, "certify", cert_run, first_seed, max_runs, asked, alpha=prep.test.alpha)
    return replace(prep, first_seed=first, ledger=ledger)


def certify(prep: Prepared, *, store: str | Path | Store, first_seed: int | None = None, max_runs: int = 500,
            batch: int = 32, options: dict | None = None, progress=None, on_decision=None) -> Decided:
    """Run the prepared plan on seeds first_seed, first_seed+1, … (`batch` at a time) until its sequential test
    decides whether P(ℓ(K) ≤ ℓmax) ≥ the plan's ω, or `max_runs` runs are counted.  The seeds are checked
    against the plan's ledger first (`seeds_for`; None: its first free seed), and the run records the α and
    first seed it began with.

    `options`: `depl.train.backends.executors.run_all`'s keywords (workers, threads, ray_address);
    `progress(run_id, seed, epoch, result)` after every epoch; `on_decision(verdict)` after every batch.
    Raises ValueError (StoreError …) with a message for the user.
    """
    p, job, test, alpha = prep.plan, prep.job, prep.test, prep.test.alpha
    path = store.path if isinstance(store, Store) else store
    if prep.first_seed is None or (first_seed is not None and first_seed != prep.first_seed):
        prep = seeds_for(prep, path, first_seed, max_runs)
    first_seed = prep.first_seed
    st = store if isinstance(store, Store) else Store(store)
    run_id = run_ids(job)[1]
    execute.register(st, run_id, "certify", job, {"backend": "local", "plan": p.to_json()})
    st.record_use(run_id, "certify", first_seed, first_seed + max_runs - 1, alpha)
    TaskSeeds.of(prep.scenario).record("certify", first_seed, first_seed + max_runs - 1, st.path, run_ids(job)[0],
                                       alpha)
    n_epochs, counted, finals = len(p.epochs), [], {}
    t0, start, after = time.perf_counter(), first_seed, []
    while not test.decided and test.runs < max_runs:
        seeds = list(range(start, start + min(batch, max_runs - test.runs)))
        run_all(st, [(run_id, job, seeds)], progress=progress, **{**(options or {}), "seed_batch": batch})
        losses, gone = st.losses(run_id), st.diverged(run_id)
        for s in seeds:
            finals[s] = float("inf") if s in gone else float(losses[s][n_epochs - 1])
            if test.decided:
                after.append(s)
                continue
            test.add(finals[s] <= p.loss_target)
            counted.append(s)
        start += len(seeds)
        if on_decision is not None:
            on_decision(test.state)
    more = {}
    if not test.decided:  # what going on would cost, from here, at the rate observed (a Laplace estimate)
        rate = (test.hits + 1) / (test.runs + 2)
        need = expected_runs(rate, p.omega, alpha, max_runs=10 * max(max_runs, 100), hits=test.hits, runs=test.runs,
                             prior=test.prior)
        more = {"rate": rate, "mean_more_runs": need.mean_runs, "median_more_runs": need.median_runs,
                "p_certify": need.certify, "p_refute": need.refute,
                # the fewest more runs that certify, each meeting ℓmax (the least going on can take)
                "if_all_meet": more_runs_if_all_meet(test.hits, test.runs, p.omega, alpha, test.prior)}
    return Decided(str(prep.plan_file), p, prep.scenario, test.state, first_seed, counted, finals, after, run_id,
                       str(st.path), time.perf_counter() - t0, max_runs, more, test.rule,
                       [u.to_json() for u in prep.ledger.uses if u.run_id != run_id])
