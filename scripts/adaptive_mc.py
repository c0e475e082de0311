"""The closed-loop policy on the loss law itself: the Monte Carlo tables of docs/adaptive.md.

    python scripts/adaptive_mc.py

mnist1d-small's plan under the level and the increments law; for each policy,
the coverage and mean cost of the closed loop and of the open loop on the same
simulated runs (depl.adaptive.monte_carlo); the slack-stop rows observe each
epoch's loss through a validation split's noise (gap sd 0.05).  An
uncalibrated law's δ is its own P − ω (no runs back it); the rows "δ = L − ω"
count a certificate on 1,000 other runs of the law and spend its one-sided
95 % Clopper–Pearson lower bound; the rows "gap measured" read a stop's risk
from the gap measured on 1,000 other runs (depl.adaptive.simulated_gap, as
depl.gap measures real runs).  Then mnist1d-small's shipped calibrated plan,
whose δ is read from its 144 calibration runs; then how often δ overstates the
plan's slack over the draw of the runs that certify it.
"""

from dataclasses import replace

import numpy as np

from depl.adaptive import Policy, Rule, monte_carlo, simulated_gap
from depl.certificate import clopper_pearson_lower
from depl.planners import make_plan
from depl.scenario import load_scenario, parse_scenario, scenario_dict

# `--rule slack`: the stops that spend the slack
STOPS = dict(rule=Rule(replan=False, truncate=False, conditional=False))
ROWS = (  # (policy label, Policy options, runs, decide every, gap sd of the observed loss)
    ("stop", dict(rule=Rule(replan=False, truncate=False)), 200, 1, 0.0),
    ("stop + cut, every 4 epochs", dict(rule=Rule(replan=False)), 300, 4, 0.0),
    ("naive (cut at P ≥ ω), every 4", dict(rule=Rule(replan=False, naive=True)), 300, 4, 0.0),
    ("slack stops, δ = V₀ − ω", STOPS, 2000, 1, 0.05),
    ("slack stops, δ = L − ω", dict(STOPS, certificate=1000), 2000, 1, 0.05),
    ("slack stops, δ = V₀ − ω, gap measured", dict(STOPS, measured=1000), 2000, 1, 0.05),
    ("slack stops, δ = 0 (sure stops)", dict(STOPS, slack=0.0), 2000, 1, 0.05),
    ("slack stops, δ = 0.3 (more than the plan has)", dict(STOPS, slack=0.3), 2000, 1, 0.05),
)


def certified(plan, s, runs: int, seed: int = 11):
    """The plan with a certificate counted on `runs` runs of the law (another stream than the Monte Carlo's)."""
    pol = Policy(plan, s)
    final = pol.loss.simulate(plan.schedule, pol.phi, runs, np.random.default_rng([seed, 7]))[:, -1]
    met = int(np.sum(final <= plan.loss_target))
    return replace(plan, info={**plan.info, "certificate": {"alpha": 0.05, "certified": True, "runs": runs,
                                                            "met": met, "experiments": 1}})


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
        p = certified(plan, s, kw.pop("certificate")) if "certificate" in kw else plan
        if "measured" in kw:
            kw["gap"] = simulated_gap(Policy(plan, s), kw.pop("measured"), gap, seed=2)
        pol = Policy(p, s, **kw)
        mc = monte_carlo(pol, runs, 1, every=every, gap=gap)
        r = pol.slack_record
        label = label.replace("V₀ − ω", f"V₀ − ω = {pol.slack:.4f}")
        if r.source == "certificate":
            label = label.replace("L − ω", f"L − ω = {pol.slack:.4f} ({r.met}/{r.runs} met ℓmax, L = {r.lower:.4f})")
        if "gap" in kw:
            label += f" ({kw['gap'].seeds} runs)"
        line(law, label, pol, mc, gap, runs)
    truth[law] = (plan, s)

s = load_scenario("mnist1d-small")  # as shipped: calibrated on 144 held-out runs
plan = make_plan(s, "depl")
lcb = Policy(plan, s, **STOPS)
for label, pol in ((f"slack stops, δ = L − ω = {lcb.slack:.4f} ({lcb.slack_record.met}/{lcb.slack_record.runs} "
                    f"calibration runs, L = {lcb.slack_record.lower:.4f})", lcb),
                   ("slack stops, δ = V₀ − ω = {:.4f} (the point estimate, as before)", None)):
    if pol is None:
        v0 = lcb.initial().p_new
        pol = Policy(plan, s, **STOPS, slack=v0 - plan.omega)
        label = label.format(pol.slack)
    line("calibrated", label, pol, monte_carlo(pol, 2000, 1, gap=0.05), 0.05, 2000)

print()
print("| law | runs certifying | true P | P(met/runs > P) | P(L > P) | mean V̂ − ω | mean δ = max(0, L − ω) |")
print("|---|---|---|---|---|---|---|")
rng = np.random.default_rng(17)
for law, (plan, s) in truth.items():
    pol = Policy(plan, s)
    p = float(np.mean(pol.loss.simulate(plan.schedule, pol.phi, 200_000, np.random.default_rng(3))[:, -1]
                      <= plan.loss_target))
    for n in (52, 144, 1000):
        met = rng.binomial(n, p, size=4000)
        lower = np.array([clopper_pearson_lower(int(h), n, 0.05) for h in met])
        print(f"| {law} | {n} | {p:.4f} | {np.mean(met / n > p):.3f} | {np.mean(lower > p):.3f} | "
              f"{np.mean(met / n - plan.omega):+.4f} | {np.mean(np.maximum(0, lower - plan.omega)):.4f} |", flush=True)
