"""Each fitted law's Monte Carlo band over every profiled experiment: what `depl fit --png` draws beside the measured
band (depl.report.plots.plot_fit draws these finished bands; it simulates nothing)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..band import Band
from ..loss import loss_model_for

if TYPE_CHECKING:  # an annotation only
    from .report import FitResult


def law_bands(r: "FitResult", runs: int = 4000, seed: int = 0) -> list[dict[str, Band]]:
    """Per experiment of the profile (in its order): {law: the band (mean, 1st–99th percentile, epochs 0..E) of
    `runs` trajectories the law simulates of the experiment's schedule}, for every fitted law whose versions cover
    the schedule.  Each law's runs draw from their own generator seeded `seed`."""
    out = []
    for e in r.profile.experiments:
        per_law = {}
        for name, s in r.scenarios.items():
            model = loss_model_for(s)
            if not set(e.schedule) <= set(model.model_names):
                continue
            tr = model.simulate(e.schedule, s.phi(e.samples), runs, np.random.default_rng(seed))
            per_law[name] = Band.of(tr, label=name)
        out.append(per_law)
    return out
