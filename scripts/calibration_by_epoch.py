"""The split-conformal level of a scenario's law (as fitted) on a profile store's runs, scored at each epoch k
instead of the last: is the last epoch's calibration that of a plan ending earlier?

    PYTHONPATH=src python scripts/calibration_by_epoch.py SCENARIO RUNS.sqlite [K ...]

One PIT score per (experiment, seed) at epoch k (the experiment's schedule cut at k); the level at which
split conformal reads the certified ω-quantile, for ω = 0.8, 0.9, 0.95, and the observed P(PIT ≤ 0.5, 0.9).
`depl calibrate` and `depl fit --calibration-seeds` now write every row (`[calibration] epoch_scores`, by
depl.fit.calibrate.calibrate_with_pits); a K-epoch plan reads row K. This script remains the check by hand.
"""

from __future__ import annotations

import sys

import numpy as np

from depl.fit.runs import load_profile
from depl.loss import loss_model_for
from depl.certificate.conformal import level as conformal_level
from depl.scenario import load_scenario
from depl.store import Store


def main(scenario: str, store: str, epochs: list[int]) -> None:
    s = load_scenario(scenario)
    prof = load_profile(Store(store, readonly=True), s)
    law = loss_model_for(s, calibrated=False)
    last = min(e.epochs for e in prof.experiments)
    print(f"{s.name}: {sum(e.seeds.size for e in prof.experiments)} runs of {len(prof.experiments)} experiments, {store}")
    print("| epoch k | runs | level at ω = 0.8 | 0.9 | 0.95 | P(PIT ≤ 0.5) | P(PIT ≤ 0.9) |")
    print("|---|---|---|---|---|---|---|")
    for k in epochs or range(1, last + 1):
        u = np.sort(np.concatenate([
            np.clip(law.distribution(e.schedule[:k], s.phi(e.samples)).cdf(e.losses[:, k - 1]), 0.0, 1.0)
            for e in prof.experiments]))
        lv = " | ".join(f"{float(conformal_level(u, w)):.3f}" for w in (0.8, 0.9, 0.95))
        print(f"| {k} | {u.size} | {lv} | {np.mean(u <= 0.5):.3f} | {np.mean(u <= 0.9):.3f} |")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], [int(k) for k in sys.argv[3:]])
