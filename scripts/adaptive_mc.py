"""The closed-loop policy on the loss law itself: the Monte Carlo table of docs/adaptive.md.

    python scripts/adaptive_mc.py

mnist1d-small's plan under the level and the increments law; for each policy,
the coverage and mean cost of the closed loop and of the open loop on the same
simulated runs (depl.adaptive.monte_carlo).
"""

from depl.adaptive import Policy, monte_carlo
from depl.planners import make_plan
from depl.scenario import load_scenario, parse_scenario, scenario_dict

ROWS = (  # (policy label, Policy options, runs, decide every)
    ("stop", dict(replan=False, truncate=False), 200, 1),
    ("stop + cut, every 4 epochs", dict(replan=False), 300, 4),
    ("naive (cut at P ≥ ω), every 4", dict(replan=False, naive=True), 300, 4),
)

print("| law | policy | runs | coverage | open loop (same draws) | mean cost | open-loop cost |")
print("|---|---|---|---|---|---|---|")
for law in ("level", "increments"):
    d = scenario_dict(load_scenario("mnist1d-small"))
    d.pop("calibration", None)  # the laws as fitted: the table is about conditioning the level and increments laws
    d["loss_model"] = law
    s = parse_scenario(d)
    plan = make_plan(s, "depl")
    for label, kw, runs, every in ROWS:
        mc = monte_carlo(Policy(plan, s, **kw), runs, 1, every=every)
        print(f"| {law} | {label} | {runs} | {mc.coverage:.3f} | {mc.open_coverage:.3f} | {mc.cost.mean():.1f} | "
              f"{mc.open_cost:.1f} |", flush=True)
