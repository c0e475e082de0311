"""The `size` and `work` of a scenario's model versions, measured: parameters (thousands) and
multiply-adds per sample relative to the first trainable version (torch's FlopCounterMode on one
sample of the scenario's data; a multiply-add counts as 2 FLOPs either way, so the ratio is the same).

    python scripts/version_costs.py digits-small        # or a scenario file
"""

from __future__ import annotations

import sys

import torch
from torch.utils.flop_counter import FlopCounterMode

from depl.scenario import load_scenario
from depl.train.task.data import data_spec
from depl.train.engine.federation import version_specs
from depl.train.task.prune import build_version


def costs(name: str) -> list[tuple[str, float, float]]:
    scenario = load_scenario(name)
    source = data_spec(scenario, [d.name for d in scenario.datasets[:1]]).load()
    trainable = [m.name for m in scenario.models if m.train is not None]
    out = []
    for version, spec in version_specs(scenario, source, trainable).items():
        model = build_version(spec).eval()
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model(torch.from_numpy(source.x_test[:1]))
        out.append((version, sum(p.numel() for p in model.parameters()) / 1000, counter.get_total_flops()))
    return [(v, size, flops / out[0][2]) for v, size, flops in out]


if __name__ == "__main__":
    for version, size, work in costs(sys.argv[1] if len(sys.argv) > 1 else "digits-small"):
        print(f"{version:<14} size = {size:.1f}   work = {work:.3f}")
