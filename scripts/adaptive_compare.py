"""Adaptive against open loop on the same held-out seeds, from their stores (docs/adaptive.md).

    python scripts/adaptive_compare.py ADAPTIVE_STORE OPEN_STORE

Counts only the seeds the adaptive run has finished (a run still going is
summarised as far as it got) and the open-loop runs of those same seeds.
"""

from __future__ import annotations

import sys

import numpy as np

from depl.certificate import confidence_words
from depl.plan import Plan
from depl.store import Store
from depl.train.loops.adaptive import finished, outcome
from depl.validate import coverage


def main(adaptive_store: str, open_store: str) -> None:
    a, o = Store(adaptive_store, readonly=True), Store(open_store, readonly=True)
    (arun,) = [r for r in a.runs("plan") if r["run_id"].startswith("adaptive-")]
    (orun,) = [r for r in o.runs("plan") if not r["run_id"].startswith("adaptive-")]
    plan = arun["spec"]["plan"]
    target, omega, K = plan["loss_target"], plan["omega"], len(plan["epochs"])
    seeds = [s for s in a.seeds(arun["run_id"]) if finished(a, arun["run_id"], s)]
    finals, costs, actions = outcome(a, arun["run_id"], seeds)
    losses, gone = o.losses(orun["run_id"]), o.diverged(orun["run_id"])
    ofinal = np.array([np.inf if s in gone else losses[s][K - 1] for s in seeds])
    print(f"{len(seeds)} held-out seeds ({min(seeds)}..{max(seeds)}), ℓmax {target:g}, ω {omega:g}")
    alpha = Plan.from_json(plan).alpha
    print(f"| execution | coverage | Clopper–Pearson one-sided {confidence_words(alpha)} bounds | mean final test loss "
          "| mean cost |")
    print("|---|---|---|---|---|")
    for name, f, c in (("open loop", ofinal, np.full(len(seeds), plan["cost"])), ("adaptive", finals, costs)):
        cv = coverage(f, target, omega, alpha)
        print(f"| {name} | {cv.rate:.3f} ({cv.hits}/{cv.runs}) | [{cv.ci[0]:.3f}, {cv.ci[1]:.3f}] | "
              f"{np.mean(f[np.isfinite(f)]):.4f} | {np.mean(c):.1f} |")
    print("decisions: " + ", ".join(f"{k} {v}" for k, v in sorted(actions.items())))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(*sys.argv[1:])
