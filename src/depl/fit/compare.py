"""The fitted laws as scenarios, scored on the held-out seeds, and the choice.

Each fit becomes the loss sections of a scenario (the base scenario's other
sections kept), so it is scored through the very `LossModel` the planners
use: for every held-out seed of every experiment and every epoch k, the
log-density the model gives the measured ℓ(k) (the marginal law of ℓ(k) for
the experiment's schedule, its own `logpdf`).  The law with the highest mean
held-out log-likelihood is chosen.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from ..loss import loss_model_for
from ..scenario import Scenario, parse_scenario
from .gof import heldout_logpdf
from .registry import fitters
from .runs import Profile


def scenario_data(base: dict, fits: dict, loss_model: str, epochs: int) -> dict:
    """The base scenario (a dict) with its loss sections replaced by the fits (law name → fitted law)."""
    out = copy.deepcopy(base)
    out.pop("calibration", None)  # the base's calibration was of another law
    fs = fitters()
    drop = {k for n in fits for k in fs[n].fields}
    out["models"] = [{k: v for k, v in m.items() if k not in drop} for m in base["models"]]
    for n, fitted in fits.items():  # registration order: the first writes the versions and switches
        fs[n].write(out, fitted, n == loss_model)
    out["loss_model"] = loss_model
    out["max_epochs"] = int(epochs)
    return out


@dataclass
class Score:
    model: str
    loglik: float                 # mean held-out log-density of ℓ(k), all experiments and epochs
    loglik_final: float           # the same at the last epoch only
    impossible: int               # held-out observations the model gives (almost) no density
    n: int
    loglik_late: float = 0.0      # the same over the second half of the epochs (k > E/2), where plans end
    ks_final: dict[str, float] = field(default_factory=dict)      # experiment → KS p of held-out ℓ(E) (no refit)
    var_ratio: dict[str, float] = field(default_factory=dict)     # experiment → predicted / measured var of ℓ(E)


def score(scenario: Scenario, held: Profile, name: str) -> Score:
    """The scenario's law scored on the held-out seeds by its own density of ℓ(k)."""
    model = loss_model_for(scenario)
    known = set(model.model_names)
    total, final, late, n, nf, nl, impossible = 0.0, 0.0, 0.0, 0, 0, 0, 0
    out = Score(name, 0.0, 0.0, 0, 0)
    for e in held.experiments:
        if not set(e.schedule) <= known or e.losses.shape[0] == 0:
            continue
        phi = scenario.phi(e.samples)
        sched = e.schedule
        for k in range(1, e.epochs + 1):
            x = e.losses[:, k - 1]
            lp, bad = heldout_logpdf(model.distribution(sched[:k], phi), x)
            total += float(lp.sum())
            n += x.size
            if k > e.epochs // 2:
                late += float(lp.sum())
                nl += x.size
            impossible += bad
            if k == e.epochs:
                final += float(lp.sum())
                nf += x.size
                d = model.distribution(sched, phi)
                out.ks_final[e.label] = float(stats.kstest(x, d.cdf).pvalue)
        out.var_ratio[e.label] = float(model.distribution(sched, phi).var() / max(np.var(e.losses[:, -1], ddof=1), 1e-12))
    out.loglik, out.loglik_final, out.impossible, out.n = total / max(n, 1), final / max(nf, 1), impossible, n
    out.loglik_late = late / max(nl, 1)
    return out


def build(base: dict, fits: dict, epochs: int, source: str) -> dict[str, Scenario]:
    """The fitted scenarios, one per law fitted, validated like any file."""
    return parse_fitted({m: scenario_data(base, fits, m, epochs) for m in fits}, source)


def parse_fitted(data: dict[str, dict], source: str) -> dict[str, Scenario]:
    return {m: parse_scenario(d, f"{source} ({m} fit)") for m, d in data.items()}
