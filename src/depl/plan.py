"""`Plan`: what every planner returns, its JSON file (`depl.plan/1`), and eqs. (1)–(2).

A plan says which datasets to use and, for every epoch, the model version,
the cluster and the compute x each of its nodes commits.  Its time and cost
follow from the scenario alone:

    T(k) = c(k)/x(k) + s(m_k)/b(n_k),  c(k) = w(m_k)·S/nodes(n_k)      (eq. 1)
    cost = Σ_k κ(n_k)·x(k)·nodes(n_k) + Σ_{n used} Σ_{d ∈ D̂} β(d, n)   (eq. 2)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .scenario import Scenario, ScenarioError, parse_scenario, scenario_dict

FORMAT = "depl.plan/1"


@dataclass(frozen=True)
class Epoch:
    epoch: int
    model: str
    cluster: str
    compute: float  # x(k): compute allocated per node


@dataclass
class Plan:
    method: str
    scenario: str
    feasible: bool
    datasets: list[str]
    epochs: list[Epoch]
    cost: float
    time: float
    loss_quantile: float  # certified upper bound on the ω-quantile of l(K)
    loss_mean: float
    solve_seconds: float
    omega: float = 0.99
    loss_target: float = 0.0
    deadline: float = 0.0
    loss_quantile_bounds: tuple[float, float] | None = None
    info: dict[str, Any] = field(default_factory=dict)
    optimal_proven: bool = False  # method optimal: no plan is cheaper (the search finished)
    lower_bound: float | None = None  # method optimal: certified: no plan costs less
    scenario_spec: dict[str, Any] | None = None  # the whole scenario, so a plan file stands alone

    @property
    def schedule(self) -> list[str]:
        """The model of every epoch, in order."""
        return [e.model for e in self.epochs]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d = {"format": FORMAT, **d}
        if self.loss_quantile_bounds is not None:
            d["loss_quantile_bounds"] = list(self.loss_quantile_bounds)
        return d

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def from_json(cls, d: dict[str, Any], source: str = "<plan>") -> "Plan":
        if d.get("format") != FORMAT:
            raise PlanError(f"{source}: format = {d.get('format')!r}: expected {FORMAT!r}")
        try:
            epochs = [Epoch(int(e["epoch"]), str(e["model"]), str(e["cluster"]), float(e["compute"])) for e in d["epochs"]]
            b = d.get("loss_quantile_bounds")
            return cls(
                method=str(d["method"]), scenario=str(d["scenario"]), feasible=bool(d["feasible"]),
                datasets=[str(x) for x in d["datasets"]], epochs=epochs, cost=float(d["cost"]),
                time=float(d["time"]), loss_quantile=float(d["loss_quantile"]), loss_mean=float(d["loss_mean"]),
                solve_seconds=float(d["solve_seconds"]), omega=float(d.get("omega", 0.99)),
                loss_target=float(d.get("loss_target", 0.0)), deadline=float(d.get("deadline", 0.0)),
                loss_quantile_bounds=tuple(b) if b else None, info=dict(d.get("info") or {}),
                optimal_proven=bool(d.get("optimal_proven", False)),
                lower_bound=None if d.get("lower_bound") is None else float(d["lower_bound"]),
                scenario_spec=d.get("scenario_spec"),
            )
        except KeyError as e:
            raise PlanError(f"{source}: the key {e.args[0]!r} is missing") from None
        except (TypeError, ValueError) as e:
            raise PlanError(f"{source}: a value has the wrong type: {e}") from None

    @classmethod
    def load(cls, path: str | Path) -> "Plan":
        p = Path(path)
        try:
            d = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise PlanError(f"{p}: no such plan file") from None
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
            raise PlanError(f"{p}: not valid JSON: {e}") from None
        return cls.from_json(d, str(p))

    def scenario_object(self) -> Scenario:
        """The scenario this plan was made for (embedded in the plan file)."""
        if self.scenario_spec is None:
            from .scenario import load_scenario
            return load_scenario(self.scenario)
        return parse_scenario(self.scenario_spec, f"plan for {self.scenario}")


class PlanError(ValueError):
    """A plan file that cannot be used; the message is meant for the user."""


# --------------------------------------------------------------------------- #
# eqs. (1) and (2)
# --------------------------------------------------------------------------- #

def compute_needed(s: Scenario, model: str, cluster: str, samples: float) -> float:
    """c(k, m, D̂): the work one node of `cluster` does in one epoch of `model`."""
    m = s.models[s.model_index[model]]
    n = s.clusters[s.cluster_index[cluster]]
    return m.work * samples / n.nodes


def epoch_time(s: Scenario, model: str, cluster: str, compute: float, samples: float) -> float:
    """T(k) of eq. (1)."""
    m = s.models[s.model_index[model]]
    n = s.clusters[s.cluster_index[cluster]]
    return compute_needed(s, model, cluster, samples) / compute + m.size / n.bandwidth


def plan_time(s: Scenario, datasets: list[str], epochs: list[Epoch]) -> float:
    S = s.samples(datasets)
    return float(sum(epoch_time(s, e.model, e.cluster, e.compute, S) for e in epochs))


def plan_cost(s: Scenario, datasets: list[str], epochs: list[Epoch]) -> float:
    """Eq. (2): compute cost of every epoch plus β once per (dataset, cluster used)."""
    compute = sum(s.clusters[s.cluster_index[e.cluster]].unit_cost * e.compute
                  * s.clusters[s.cluster_index[e.cluster]].nodes for e in epochs)
    used = sorted({e.cluster for e in epochs})
    return float(compute + sum(s.transfer_cost(datasets, n) for n in used))


def with_scenario(plan: Plan, s: Scenario) -> Plan:
    plan.scenario_spec = scenario_dict(s)
    return plan


__all__ = ["Plan", "Epoch", "PlanError", "FORMAT", "epoch_time", "plan_time", "plan_cost",
           "compute_needed", "with_scenario", "ScenarioError"]
