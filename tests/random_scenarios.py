"""Random small scenarios (not in the repo) for the planner tests."""

from __future__ import annotations

import numpy as np

from depl.scenario import Scenario, parse_scenario


def random_scenario(seed: int, *, n_models: int = 3, n_clusters: int = 2, n_datasets: int = 1,
                    target_frac: float | None = None) -> Scenario:
    """A paper-size instance with random numbers; the target is reachable in the mean."""
    rng = np.random.default_rng(seed)
    l0 = float(rng.uniform(5, 30))
    models = []
    for i in range(n_models):
        mean = float(rng.uniform(0.9, 1.05))
        models.append({
            "name": f"v{i}",
            "size": float(rng.uniform(0.1, 20)),
            "work": float(rng.uniform(0.5, 3.0)),
            "progress": {"A": float(l0 * rng.uniform(0.05, 0.15)), "B": float(rng.uniform(0, 3))},
            "noise": {"family": "invgamma", "mean": mean, "var": float(rng.uniform(0.003, 0.04))},
        })
    switches = []
    for a in range(n_models):
        for b in range(a + 1, n_models):  # pruning goes one way
            if rng.random() < 0.8:
                fam = rng.choice(["t", "norm"])
                loc, scale = float(l0 * rng.uniform(0, 0.03)), float(l0 * rng.uniform(0.002, 0.01))
                jump = ({"family": "t", "params": {"df": float(rng.uniform(3, 8)), "loc": loc, "scale": scale}}
                        if fam == "t" else {"family": "norm", "params": {"loc": loc, "scale": scale}})
                switches.append({"from": f"v{a}", "to": f"v{b}", "jump": jump})
    clusters = [{"name": f"n{j}", "capacity": float(rng.uniform(20, 150)), "bandwidth": float(rng.uniform(1, 100)),
                 "unit_cost": float(rng.uniform(0.5, 2.0)), "nodes": int(rng.integers(1, 4))}
                for j in range(n_clusters)]
    datasets = [{"name": f"d{j}", "samples": float(rng.integers(2_000, 30_000)),
                 "transfer_cost": {c["name"]: float(rng.uniform(0, 5)) for c in clusters if rng.random() < 0.5}}
                for j in range(n_datasets)]
    total = sum(d["samples"] for d in datasets)
    frac = float(rng.uniform(0.3, 0.6)) if target_frac is None else target_frac
    data = {
        "name": f"random-{seed}", "initial_loss": l0,
        "target": {"loss": l0 * (1 - frac), "quantile": float(rng.choice([0.9, 0.95, 0.99])), "deadline": 1.0},
        "clusters": clusters, "datasets": datasets, "models": models, "switches": switches,
    }
    if n_datasets > 1:
        data["data_law"] = {"s0": float(rng.uniform(2_000, 20_000)), "reference_samples": total / 2}
    # A deadline that lets ~40 epochs of the slowest version run at full speed on the best cluster.
    best = max(clusters, key=lambda c: c["capacity"])
    slow = max(m["work"] for m in models)
    data["target"]["deadline"] = 40 * (slow * total / best["nodes"] / best["capacity"] + 1.0) * float(rng.uniform(0.6, 1.5))
    return parse_scenario(data, f"random-{seed}")


def random_instance(seed: int, *, max_epochs: int = 12) -> Scenario:
    """A tiny but varied instance (edge/cloud): 1–3 clusters with 1–4 nodes and
    transfer costs β, 1–3 datasets of very different sizes, the data law on or
    off, 2–3 versions with pruning switches, the increments or the level law.
    `max_epochs` keeps exhaustive checks cheap."""
    rng = np.random.default_rng(10_000 + seed)
    level = bool(rng.random() < 0.4)
    n_models, n_clusters, n_datasets = int(rng.integers(2, 4)), int(rng.integers(1, 4)), int(rng.integers(1, 4))
    l0 = float(rng.uniform(2, 3)) if level else float(rng.uniform(5, 30))
    clusters = [{"name": f"n{j}", "capacity": float(rng.uniform(20, 150)), "bandwidth": float(rng.uniform(1, 100)),
                 "unit_cost": float(rng.uniform(0.5, 2.0)), "nodes": int(rng.integers(1, 5))}
                for j in range(n_clusters)]
    sizes = (10 ** rng.uniform(2.5, 4.5, n_datasets)).round()  # 300 to 30,000 samples
    datasets = [{"name": f"d{j}", "samples": float(sizes[j]),
                 "transfer_cost": {c["name"]: float(rng.uniform(0, 20)) for c in clusters if rng.random() < 0.6}}
                for j in range(n_datasets)]
    models, switches = [], []
    for i in range(n_models):
        m = {"name": f"v{i}", "size": float(rng.uniform(0.1, 20)), "work": float(rng.uniform(0.5, 3.0))}
        if level:
            m["level"] = {"curve": str(rng.choice(["power", "exp"])), "floor": float(l0 * rng.uniform(0.15, 0.4)),
                          "floor_exponent": float(rng.uniform(0, 0.3)), "scale": float(rng.uniform(1.5, 5)),
                          "shape": float(rng.uniform(0.8, 2)), "sigma0": float(rng.uniform(0.01, 0.06)),
                          "sigma1": float(rng.uniform(0, 0.05)), "seed_share": float(rng.uniform(0, 0.7))}
        # the increments law's keys are required under either law
        m["progress"] = {"A": float(l0 * rng.uniform(0.05, 0.15)), "B": float(rng.uniform(0, 3))}
        m["noise"] = {"family": "invgamma", "mean": float(rng.uniform(0.9, 1.05)),
                      "var": float(rng.uniform(0.003, 0.04))}
        models.append(m)
    for a in range(n_models):
        for b in range(a + 1, n_models):
            if rng.random() < 0.8:
                sw = {"from": f"v{a}", "to": f"v{b}"}
                if level:
                    sw["level"] = {"offset": float(rng.uniform(-0.03, 0.08)), "recovery": float(rng.uniform(0.3, 0.95)),
                                   "sigma": float(rng.uniform(0, 0.04))}
                loc, scale = float(l0 * rng.uniform(0, 0.03)), float(l0 * rng.uniform(0.002, 0.01))
                sw["jump"] = {"family": "t", "params": {"df": float(rng.uniform(3, 8)), "loc": loc, "scale": scale}}
                switches.append(sw)
    total = float(sizes.sum())
    data = {"name": f"instance-{seed}", "initial_loss": l0, "max_epochs": max_epochs,
            "target": {"loss": 0.0, "quantile": float(rng.choice([0.9, 0.95, 0.99])), "deadline": 1.0},
            "clusters": clusters, "datasets": datasets, "models": models, "switches": switches}
    if level:
        data["loss_model"] = "level"
    if n_datasets > 1 and rng.random() < 0.7:
        data["data_law"] = {"s0": float(rng.uniform(500, 10_000)), "reference_samples": total / 2}
    best = max(clusters, key=lambda c: c["capacity"])
    slow = max(m["work"] for m in models)
    data["target"]["deadline"] = max_epochs * (slow * total / best["nodes"] / best["capacity"] + 1.0) \
        * float(rng.uniform(0.6, 1.2))
    # A target some version reaches in its median within about half the horizon.
    s = parse_scenario({**data, "target": {**data["target"], "loss": l0 * 0.99}}, f"instance-{seed}")
    from depl.loss import loss_model_for

    loss = loss_model_for(s)
    phi = s.phi(total)
    ends = [float(loss.mean_path([m.name] * max_epochs, phi)[int(max_epochs * rng.uniform(0.3, 0.8))])
            for m in s.models]
    data["target"]["loss"] = float(min(ends))
    return parse_scenario(data, f"instance-{seed}")


def random_level_scenario(seed: int, *, n_models: int = 3, n_clusters: int = 2, n_datasets: int = 2) -> Scenario:
    """A random instance under the level law (depl.loss.level): versions with
    floors, scales and spreads drawn at random, pruning switches with offsets;
    the target is a loss the most accurate version reaches in the median by
    about half its horizon."""
    rng = np.random.default_rng(seed)
    l0 = float(rng.uniform(1.5, 4.0))
    models, floors = [], []
    for i in range(n_models):
        floor = float(l0 * rng.uniform(0.1, 0.5)) * (1 + 0.4 * i)
        floors.append(floor)
        models.append({
            "name": f"v{i}", "size": float(rng.uniform(1, 40)), "work": float(rng.uniform(0.3, 1.0) / (1 + i)),
            "progress": {"A": 0.2, "B": 1.0}, "noise": {"family": "norm", "params": {"loc": 1.0, "scale": 0.5}},
            "level": {"curve": str(rng.choice(["power", "exp"])), "floor": floor,
                      "floor_exponent": float(rng.uniform(0, 0.6)), "scale": float(rng.uniform(3, 15)),
                      "shape": float(rng.uniform(0.7, 2.5)), "sigma0": float(rng.uniform(0.003, 0.05)),
                      "sigma1": float(rng.uniform(0, 0.08)), "sigma2": float(rng.uniform(0, 0.15)),
                      "seed_share": float(rng.uniform(0, 0.7))},
        })
    switches = [{"from": f"v{a}", "to": f"v{b}",
                 "jump": {"family": "norm", "params": {"loc": 0.05, "scale": 0.02}},
                 "level": {"offset": float(rng.uniform(-0.08, 0.3)), "recovery": float(rng.uniform(0.3, 1.0)),
                           "sigma": float(rng.uniform(0, 0.1))}}
                for a in range(n_models) for b in range(a + 1, n_models) if rng.random() < 0.8]
    clusters = [{"name": f"n{j}", "capacity": float(rng.uniform(100, 500)), "bandwidth": float(rng.uniform(20, 300)),
                 "unit_cost": float(rng.uniform(0.5, 2.0)), "nodes": int(rng.integers(1, 4))}
                for j in range(n_clusters)]
    datasets = [{"name": f"d{j}", "samples": float(rng.integers(1_000, 8_000)),
                 "transfer_cost": {c["name"]: float(rng.uniform(0, 20)) for c in clusters if rng.random() < 0.5}}
                for j in range(n_datasets)]
    total = sum(d["samples"] for d in datasets)
    max_epochs = int(rng.integers(15, 40))
    best = max(clusters, key=lambda c: c["capacity"])
    epoch = models[0]["work"] * total / best["nodes"] / best["capacity"] + models[0]["size"] / best["bandwidth"]
    data = {
        "name": f"random-level-{seed}", "initial_loss": l0, "loss_model": "level", "max_epochs": max_epochs,
        "target": {"loss": float(floors[0] + (l0 - floors[0]) * rng.uniform(0.25, 0.5)),
                   "quantile": float(rng.choice([0.9, 0.95, 0.99])),
                   "deadline": float(max_epochs * epoch * rng.uniform(0.6, 1.2))},
        "data_law": {"s0": float(rng.uniform(1_000, 20_000)), "reference_samples": total},
        "clusters": clusters, "datasets": datasets, "models": models, "switches": switches,
    }
    return parse_scenario(data, f"random-level-{seed}")
