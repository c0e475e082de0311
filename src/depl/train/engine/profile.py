"""Profiling experiments: the many-seed loss trajectories the loss model is fitted from.

* **version** experiments: a model version trained from scratch for E epochs,
  at a fraction of the selected data (the data law's S0 is fitted from
  several fractions);
* **switch** experiments: version m for K1 epochs, then pruned to m' (the
  trained weights, structurally) and trained on to E epochs in all — the
  jump l_sw is the loss after the switch minus the loss before it.

Each experiment is one run in the store (kind ``profile``) whose
specification names the experiment, so `depl runs show` and the fitting code
find them; runs resume like `depl run`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from ...runspec import Experiment
from ..task import data as data_mod
from ..task.custom import check_code
from .federation import Job, TrainOptions, check_switches, version_specs
from ..task.source import JobError

PROFILE_CLUSTER = "profile"


def parse_switch(text: str) -> tuple[str, str, int]:
    """'m:m2:K1' → (m, m2, K1)."""
    parts = text.split(":")
    if len(parts) != 3:
        raise JobError(f"--switch {text!r}: expected FROM:TO:K1, e.g. full:pruned-0.5:10")
    try:
        k1 = int(parts[2])
    except ValueError:
        raise JobError(f"--switch {text!r}: K1 = {parts[2]!r} is not a whole number of epochs") from None
    if parts[0] == parts[1]:   # no switch: the version's own experiment, trained a second time
        raise JobError(f"--switch {text!r}: FROM and TO are the same version; a switch goes to another, e.g. "
                       "full:pruned-0.5:10")
    return parts[0], parts[1], k1


def experiments(scenario, versions: list[str] | None, fractions: list[float],
                switches: list[tuple[str, str, int]], epochs: int) -> list[Experiment]:
    trainable = [m.name for m in scenario.models if m.train is not None]
    if not trainable:
        raise JobError(f"no model of scenario {scenario.name!r} has a `train` table; nothing can be profiled")
    chosen = versions or trainable
    for v in chosen:
        if v not in trainable:
            raise JobError(f"--version {v!r}: not a trainable model of {scenario.name!r} (trainable: {', '.join(trainable)})")
    for f in fractions:
        if not 0.0 < f <= 1.0:
            raise JobError(f"--fractions: {f} is not in (0, 1]")
    out = [Experiment("version", v, f) for f in fractions for v in chosen]
    for a, b, k1 in switches:
        for v in (a, b):
            if v not in trainable:
                raise JobError(f"--switch {a}:{b}:{k1}: {v!r} is not a trainable model (trainable: {', '.join(trainable)})")
        if not 0 < k1 < epochs:
            raise JobError(f"--switch {a}:{b}:{k1}: K1 must be between 1 and epochs-1 = {epochs - 1}")
        out.append(Experiment("switch", a, 1.0, b, k1))
    return out


def experiment_job(scenario, datasets: list[str], exp: Experiment, epochs: int, nodes: int = 1,
                   device: str = "cpu") -> Job:
    check_code(scenario, pinned=False)  # before anything is imported: the scenario's code is the user's to run
    spec = data_mod.data_spec(scenario, datasets, exp.fraction)
    source = spec.load()
    full = len(data_mod.select(replace(spec, fraction=1.0))[1])
    kept = int(round(exp.fraction * full))  # `select` would keep one sample of a fraction that rounds to none
    if kept < nodes:
        raise JobError(f"--fractions {exp.fraction:g}: keeps {kept} of the {full} selected samples, fewer than the "
                       f"{nodes} node(s) (--nodes) that share them; each node needs at least one")
    names = [exp.version] + ([exp.to] if exp.to else [])
    versions = version_specs(scenario, source, names)
    if exp.kind == "switch":
        schedule = [exp.version] * exp.switch_after + [exp.to] * (epochs - exp.switch_after)
        check_switches(versions, schedule)
    else:
        schedule = [exp.version] * epochs
    return Job(spec, versions, {PROFILE_CLUSTER: nodes},
               [(k + 1, m, PROFILE_CLUSTER) for k, m in enumerate(schedule)],
               TrainOptions.of(scenario.training, device, scenario.code_dir))


def experiment_run_id(scenario_name: str, exp: Experiment, job: Job) -> str:
    text = json.dumps({"job": job.identity(), "exp": exp.to_json()}, sort_keys=True)
    tag = exp.version if exp.kind == "version" else f"{exp.version}-to-{exp.to}-k{exp.switch_after}"
    frac = "" if exp.fraction == 1.0 else f"-f{exp.fraction:g}"
    return f"profile-{scenario_name}-{tag}{frac}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"
