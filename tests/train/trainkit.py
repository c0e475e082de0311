"""Small scenarios and hand-written plans for the real-training tests."""

from __future__ import annotations

from depl.plan import Epoch, Plan, with_figures
from depl.scenario import parse_scenario


def scenario_dict(width: int = 16, nodes: tuple[int, int] = (2, 1), share_to: float = 0.5, iid: bool = True,
                  source: str = "mnist1d", net: str = "cnn1d", path: str | None = None, lr: float = 0.05,
                  training: dict | None = None) -> dict:
    law = {"progress": {"A": 0.3, "B": 1.0}, "noise": {"family": "invgamma", "mean": 1.0, "var": 0.01}}
    ds = [{"name": "d1", "samples": 1000, "source": source, "share": [0.0, share_to / 2]},
          {"name": "d2", "samples": 1000, "source": source, "share": [share_to / 2, share_to]}]
    if path:
        for d in ds:
            d["path"] = path
    return {
        "name": "tiny", "initial_loss": 2.3, "target": {"loss": 1.0, "quantile": 0.99, "deadline": 1000.0},
        "training": {"lr": lr, "momentum": 0.9, "batch_size": 64, "iid": iid, **(training or {})},
        "clusters": [{"name": "A", "capacity": 100, "bandwidth": 10, "unit_cost": 1.0, "nodes": nodes[0]},
                     {"name": "B", "capacity": 50, "bandwidth": 10, "unit_cost": 1.2, "nodes": nodes[1]}],
        "datasets": ds,
        "models": [
            {"name": "full", "size": 1, "work": 1, **law, "train": {"net": net, "width": width, "prune_ratio": 0.0}},
            {"name": "half", "size": 1, "work": 0.5, **law, "train": {"net": net, "width": width, "prune_ratio": 0.5}},
            {"name": "quarter", "size": 1, "work": 0.3, **law, "train": {"net": net, "width": width, "prune_ratio": 0.75}},
        ],
        # pruning goes one way: full -> half -> quarter
        "switches": [{"from": a, "to": b, "jump": {"family": "norm", "mean": 0.0, "var": 0.01}}
                     for a, b in (("full", "half"), ("half", "quarter"), ("full", "quarter"))],
    }


def make_plan(schedule: list[tuple[str, str]], **kw) -> Plan:
    """A plan (as `depl plan` would write it: its figures computed) with epochs (model, cluster)."""
    s = parse_scenario(scenario_dict(**kw), "test scenario")
    epochs = [Epoch(k + 1, m, c, 1.0) for k, (m, c) in enumerate(schedule)]
    return with_figures(Plan("hand", "tiny", True, ["d1", "d2"], epochs, 0.0, 0.0, 0.0, 0.0, 0.0), s)


SWITCH_PLAN = [("full", "A"), ("full", "A"), ("half", "B"), ("quarter", "B")]
