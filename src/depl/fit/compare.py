"""Both fitted models as scenarios, scored on the held-out seeds, and the choice.

Each fit becomes the loss sections of a scenario (the base scenario's other
sections kept), so it is scored through the very `LossModel` the planners
use: for every held-out seed of every experiment and every epoch k, the
log-density the model gives the measured ℓ(k) (the marginal law of ℓ(k) for
the experiment's schedule).  The model with the higher mean held-out
log-likelihood is chosen.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from ..loss import IncrementsModel, LevelModel
from ..scenario import Scenario, parse_scenario
from .gof import grid_logpdf
from .increments import IncrementsFit
from .level import LevelFit
from .runs import Profile

LOSS_SECTIONS = ("models", "switches", "data_law", "loss_model", "max_epochs")


def _dist_spec(f, fallback: np.ndarray | None = None) -> dict:
    if f is not None:
        return {"family": f.family, "params": {k: float(v) for k, v in f.params.items()}}
    m, v = (float(np.mean(fallback)), float(np.var(fallback))) if fallback is not None else (0.0, 1e-4)
    return {"family": "norm", "params": {"loc": m, "scale": math.sqrt(max(v, 1e-8))}}


def scenario_data(base: dict, inc: IncrementsFit, lev: LevelFit | None, loss_model: str, epochs: int) -> dict:
    """The base scenario (a dict) with its loss sections replaced by the fits."""
    out = copy.deepcopy(base)
    models = []
    for m in base["models"]:
        v = inc.versions.get(m["name"])
        if v is None:
            continue  # not profiled: no law to plan with
        entry = {k: val for k, val in m.items() if k not in ("progress", "noise", "level")}
        entry["progress"] = {"A": float(v.A), "B": float(v.B)}
        entry["noise"] = _dist_spec(v.chosen)
        if lev is not None and m["name"] in lev.versions:
            lv = lev.versions[m["name"]]
            entry["level"] = {"curve": lv.curve.kind, "floor": lv.curve.floor,
                              "floor_exponent": lv.curve.floor_exponent, "scale": lv.curve.scale,
                              "shape": lv.curve.shape, "sigma0": lv.sigma0, "sigma1": lv.sigma1, "sigma2": lv.sigma2,
                              "seed_share": lv.seed_share}
        models.append(entry)
    out["models"] = models
    switches = []
    for (a, b), sw in inc.switches.items():
        entry = {"from": a, "to": b, "jump": _dist_spec(sw.chosen, sw.jumps)}
        if lev is not None and (a, b) in lev.switches:
            ls = lev.switches[(a, b)]
            entry["level"] = {"offset": ls.offset, "recovery": ls.recovery, "sigma": ls.sigma}
        switches.append(entry)
    out["switches"] = switches
    s0 = lev.s0 if loss_model == "level" and lev is not None else inc.s0
    ref = lev.reference_samples if loss_model == "level" and lev is not None else inc.reference_samples
    if s0 is not None:
        out["data_law"] = {"s0": float(s0), "reference_samples": float(ref)}
    else:
        out.pop("data_law", None)
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


def _level_logpdf(model: LevelModel, schedule, phi, x: np.ndarray) -> np.ndarray:
    mu, sd, _ = model.path(schedule, phi)
    return stats.lognorm(s=max(sd[-1], 1e-6), scale=mu[-1]).logpdf(x)


def score(scenario: Scenario, held: Profile, name: str) -> Score:
    model = LevelModel(scenario) if scenario.loss_model == "level" else IncrementsModel(scenario)
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
            if isinstance(model, LevelModel):
                lp = _level_logpdf(model, sched[:k], phi, x)
                bad = int(np.sum(lp < math.log(1e-12)))
                lp = np.maximum(lp, math.log(1e-12))
            else:
                lp, bad = grid_logpdf(model.distribution(sched[:k], phi), x)
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


def build(base: dict, inc: IncrementsFit, lev: LevelFit, epochs: int, source: str) -> dict[str, Scenario]:
    """The two fitted scenarios, validated like any file."""
    return {m: parse_scenario(scenario_data(base, inc, lev, m, epochs), f"{source} ({m} fit)")
            for m in ("increments", "level")}
