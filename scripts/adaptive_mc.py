"""The closed-loop policy on the loss law itself: the Monte Carlo tables of docs/adaptive.md.

    python scripts/adaptive_mc.py

mnist1d-small's plan under the level and the increments law; for each policy,
the coverage and mean cost of the closed loop and of the open loop on the same
simulated runs (depl.adaptive.monte_carlo); the slack-stop rows observe each
epoch's loss through a validation split's noise (gap sd 0.05).  An
uncalibrated law's plan has no certified slack: the rows "δ = V₀ − ω" give
the law's own P − ω by hand (the law is the truth here, but nothing certifies
it); the rows "δ = L − ω" count a certificate on 1,000 fresh runs of the law
(as `depl certify` writes it) and spend its anytime-valid lower bound at
α = 0.05; the rows "gap measured" read a stop's risk from the gap measured on
1,000 other runs (depl.adaptive.simulated_gap, as depl.gap measures real
runs).  Then mnist1d-small's shipped calibrated plans: at ω = 0.9 (no
certified slack) and made by `depl plan --slack 0.02` (certified at 0.92, δ =
0.02); then how often a bound overstates the plan's slack over the draw of the
runs that certify it.
"""

from dataclasses import replace

import numpy as np

from depl.adaptive import ConditionalRule, NaiveRule, Policy, SlackRule, monte_carlo, simulated_gap
from depl.certificate import Certificate, Kind, anytime_lower, clopper_pearson_lower, fixed_n_verdict
from depl.planners import make_plan
from depl.scenario import load_scenario, parse_scenario, scenario_dict

# `--rule slack`: the stops that spend the slack
STOPS = dict(rule=SlackRule())
ROWS = (  # (policy label, Policy options, runs, decide every, gap sd of the observed loss)
    ("stop", dict(rule=ConditionalRule(replan=False, truncate=False)), 200, 1, 0.0),
    ("stop + cut, every 4 epochs", dict(rule=ConditionalRule(replan=False)), 300, 4, 0.0),
    ("naive (cut at P ≥ ω), every 4", dict(rule=NaiveRule(replan=False)), 300, 4, 0.0),
    ("slack stops, no certified slack (δ = 0)", STOPS, 2000, 1, 0.05),
    ("slack stops, δ = V₀ − ω given (not certified)", dict(STOPS, own=True), 2000, 1, 0.05),
    ("slack stops, δ = L − ω", dict(STOPS, certificate=1000), 2000, 1, 0.05),
    ("slack stops, δ = V₀ − ω given, gap measured", dict(STOPS, own=True, measured=1000), 2000, 1, 0.05),
    ("slack stops, δ = 0 (sure stops)", dict(STOPS, slack=0.0), 2000, 1, 0.05),
    ("slack stops, δ = 0.3 (more than the plan has)", dict(STOPS, slack=0.3), 2000, 1, 0.05),
)


def certificate(plan, s, runs: int, seed: int = 11) -> dict:
    """A `depl certify` certificate of the plan counted on `runs` fresh runs of the law (another stream than the
    Monte Carlo's)."""
    pol = Policy(plan, s)
    final = pol.loss.simulate(plan.schedule, pol.phi, runs, np.random.default_rng([seed, 7]))[:, -1]
    hits, alpha = int(np.sum(final <= plan.loss_target)), 0.05
    return Certificate(Kind.SEQUENTIAL, fixed_n_verdict(hits, runs, plan.omega, alpha), plan.omega, plan.loss_target,
                       alpha, alpha, runs, hits, evidence={"scenario": plan.scenario, "method": plan.method,
                                                           "epochs": len(plan.epochs)}).to_json()


def line(law, label, pol, mc, gap, runs):
    print(f"| {law} | {label} | {gap:g} | {runs} | {mc.coverage:.3f} | {mc.open_coverage:.3f} | "
          f"{mc.cost.mean():.1f} | {mc.open_cost:.1f} |", flush=True)


print("| law | policy | observed with gap sd | runs | coverage | open loop (same draws) | mean cost | open-loop cost |")
print("|---|---|---|---|---|---|---|---|")
truth = {}
for law in ("level", "increments"):
    d = scenario_dict(load_scenario("mnist1d-small"))
    d.pop("calibration", None)  # the laws as fitted: the table is about conditioning the level and increments laws
    d["loss_model"] = law
    s = parse_scenario(d)
    plan = make_plan(s, "depl")
    for label, kw, runs, every, gap in ROWS:
        kw = dict(kw)
        if "certificate" in kw:
            kw["certificate"] = certificate(plan, s, kw.pop("certificate"))
        if kw.pop("own", False):
            kw["slack"] = Policy(plan, s).initial().p_new - plan.omega
        if "measured" in kw:
            kw["gap"] = simulated_gap(Policy(plan, s), kw.pop("measured"), gap, seed=2)
        pol = Policy(plan, s, **kw)
        mc = monte_carlo(pol, runs, 1, every=every, gap=gap)
        r = pol.slack_record
        label = label.replace("V₀ − ω", f"V₀ − ω = {pol.slack:.4f}")
        if r.source == "certificate":
            label = label.replace("L − ω", f"L − ω = {pol.slack:.4f} (a certificate: {r.met}/{r.runs} fresh runs "
                                  f"met ℓmax, anytime L = {r.lower:.4f})")
        if "gap" in kw:
            label += f" ({kw['gap'].seeds} runs)"
        line(law, label, pol, mc, gap, runs)
    truth[law] = (plan, s)

from depl.workflows.planning import plan as plan_workflow  # noqa: E402

s = load_scenario("mnist1d-small")  # as shipped: calibrated, α = 0.05
for d in (None, 0.02):
    made = plan_workflow(s, slack=d)
    pol = Policy(made.plan, made.scenario, **STOPS)
    pol.initial()
    r = pol.slack_record
    label = (f"slack stops, the ω = {pol.omega:g} plan: no certified slack (δ = 0)" if d is None else
             f"slack stops, `--slack {d:g}`: certified at ω′ = {r.lower:g}, δ = {pol.slack:.4f}")
    line("calibrated", label, pol, monte_carlo(pol, 2000, 1, gap=0.05), 0.05, 2000)

print()
print("| law | runs certifying | true P | P(met/runs > P) | P(L > P): Clopper–Pearson | P(L > P): anytime | "
      "mean V̂ − ω | mean δ = max(0, L − ω), anytime L |")
print("|---|---|---|---|---|---|---|---|")
rng = np.random.default_rng(17)
for law, (plan, s) in truth.items():
    pol = Policy(plan, s)
    p = float(np.mean(pol.loss.simulate(plan.schedule, pol.phi, 200_000, np.random.default_rng(3))[:, -1]
                      <= plan.loss_target))
    for n in (52, 144, 1000):
        met = rng.binomial(n, p, size=4000)
        lower = np.array([clopper_pearson_lower(int(h), n, 0.05) for h in met])
        bound = {int(h): anytime_lower(int(h), n, 0.05) for h in np.unique(met)}
        anytime = np.array([bound[int(h)] for h in met])
        print(f"| {law} | {n} | {p:.4f} | {np.mean(met / n > p):.3f} | {np.mean(lower > p):.3f} | "
              f"{np.mean(anytime > p):.3f} | {np.mean(met / n - plan.omega):+.4f} | "
              f"{np.mean(np.maximum(0, anytime - plan.omega)):.4f} |", flush=True)
