"""The closed-loop policy on the loss law itself: the Monte Carlo table of docs/adaptive.md.

    python scripts/adaptive_mc.py

mnist1d-small's plan under the level and the increments law; for each policy,
the coverage and mean cost of the closed loop and of the open loop on the same
simulated runs (depl.adaptive.monte_carlo); the slack-stop rows observe each
epoch's loss through a validation split's noise (gap sd 0.05).
"""

from depl.adaptive import Policy, Rule, monte_carlo
from depl.planners import make_plan
from depl.scenario import load_scenario, parse_scenario, scenario_dict

# `--rule slack`: the stops that spend the slack
STOPS = dict(rule=Rule(replan=False, truncate=False, conditional=False))
ROWS = (  # (policy label, Policy options, runs, decide every, gap sd of the observed loss)
    ("stop", dict(rule=Rule(replan=False, truncate=False)), 200, 1, 0.0),
    ("stop + cut, every 4 epochs", dict(rule=Rule(replan=False)), 300, 4, 0.0),
    ("naive (cut at P ≥ ω), every 4", dict(rule=Rule(replan=False, naive=True)), 300, 4, 0.0),
    ("slack stops, δ = V₀ − ω", STOPS, 2000, 1, 0.05),
    ("slack stops, δ = 0 (sure stops)", dict(STOPS, slack=0.0), 2000, 1, 0.05),
    ("slack stops, δ = 0.3 (more than the plan has)", dict(STOPS, slack=0.3), 2000, 1, 0.05),
)

print("| law | policy | observed with gap sd | runs | coverage | open loop (same draws) | mean cost | open-loop cost |")
print("|---|---|---|---|---|---|---|---|")
for law in ("level", "increments"):
    d = scenario_dict(load_scenario("mnist1d-small"))
    d.pop("calibration", None)  # the laws as fitted: the table is about conditioning the level and increments laws
    d["loss_model"] = law
    s = parse_scenario(d)
    plan = make_plan(s, "depl")
    for label, kw, runs, every, gap in ROWS:
        pol = Policy(plan, s, **kw)
        mc = monte_carlo(pol, runs, 1, every=every, gap=gap)
        label = label.replace("V₀ − ω", f"V₀ − ω = {pol.slack:.4f}")
        print(f"| {law} | {label} | {gap:g} | {runs} | {mc.coverage:.3f} | {mc.open_coverage:.3f} | "
              f"{mc.cost.mean():.1f} | {mc.open_cost:.1f} |", flush=True)
