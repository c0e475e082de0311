"""`Plan`: what every planner returns, its JSON file (`depl.plan/1`), and eqs. (1)–(2).

A plan says which datasets to use and, for every epoch, the model version,
the cluster and the compute x each of its nodes commits.  Its time and cost
follow from the scenario alone:

    T(k) = c(k)/x(k) + s(m_k)/b(n_k),  c(k) = w(m_k)·S/nodes(n_k)      (eq. 1)
    cost = Σ_k κ(n_k)·x(k)·nodes(n_k) + Σ_{n used} Σ_{d ∈ D̂} β(d, n)   (eq. 2)

or, with the scenario's `cost_model = "resource-time"`, κ(n_k)·x(k)·nodes(n_k)·T(k)
per epoch (compute paid for as long as the epoch holds it), β unchanged.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from .certificate import alpha_or_default
from .paths import relative, resolved
from .plan_check import PlanError, check_figures, check_plan, check_types
from .scenario import (MAX_NESTING, Scenario, ScenarioError, parse_scenario, scenario_dict, shown_value, too_deep,
                       unreadable_text)
from .loss import loss_model_for
from .scenario import builtin_names, load_scenario

FORMAT = "depl.plan/1"


TARGET_KEYS = {"omega": "ω, the quantile the plan promises", "loss_target": "ℓmax, the loss it promises",
               "deadline": "Tmax, the time it must end by"}


def _target_key(d: dict[str, Any], key: str, source: str) -> Any:
    """A target value of a plan file: never a default standing in for a missing one (a plan promises what it says)."""
    if key not in d:
        raise PlanError(f"{source}: the key {key!r} is missing ({TARGET_KEYS[key]}): a plan without it promises "
                        "nothing; plan again with `depl plan`")
    return d[key]


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
    source: str = field(default="<plan>", repr=False, compare=False)  # the file it was read from

    @property
    def schedule(self) -> list[str]:
        """The model of every epoch, in order."""
        return [e.model for e in self.epochs]

    @property
    def alpha(self) -> float:
        """The α the plan is judged at (its scenario's [target] alpha, as planned or given by --alpha), the default
        where it records none (`depl.certificate.alpha_or_default`): the confidence of every verdict on it."""
        return alpha_or_default(((self.scenario_spec or {}).get("target") or {}).get("alpha"))

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("source")
        d = {"format": FORMAT, **d}
        if self.loss_quantile_bounds is not None:
            d["loss_quantile_bounds"] = list(self.loss_quantile_bounds)
        return d

    def save(self, path: str | Path) -> None:
        """Write strict JSON: NaN and Infinity are not JSON, and a plan holding one is not written.  The paths it
        holds (`with_paths`: the folder of your code, a certified search's store and kept models) are written
        relative to the plan's own folder ("." where it is that folder), and `load` takes them from there: a plan
        kept with its code and runs works from any copy of that folder, on any machine (your code once its folder
        is allowed, docs/security.md)."""
        d = with_paths(self.to_json(), lambda v: relative(v, path))
        try:
            text = json.dumps(d, indent=2, allow_nan=False)
        except ValueError:
            bad = _non_finite(d)
            raise PlanError(f"{path}: the plan is not written: {bad} is not a finite number") from None
        Path(path).write_text(text + "\n", encoding="utf-8")

    @classmethod
    def from_json(cls, d: dict[str, Any], source: str = "<plan>") -> "Plan":
        if not isinstance(d, dict):
            raise PlanError(f"{source}: a plan file holds a JSON object, not {type(d).__name__}")
        if d.get("format") != FORMAT:
            raise PlanError(f"{source}: format = {shown_value(d.get('format'))}: expected {FORMAT!r}")
        deep = too_deep(d, MAX_NESTING + 1)  # the scenario it embeds nests as deep as a scenario may, one level down
        if deep:
            raise PlanError(f"{source}: {deep}: lists or objects nested more than {MAX_NESTING + 1} deep; a plan "
                            "nests a few levels")
        try:
            check_types(d, source)
            epochs = [Epoch(int(e["epoch"]), str(e["model"]), str(e["cluster"]), float(e["compute"])) for e in d["epochs"]]
            b = d.get("loss_quantile_bounds")
            return cls(
                method=str(d["method"]), scenario=str(d["scenario"]), feasible=d["feasible"],
                datasets=[str(x) for x in d["datasets"]], epochs=epochs, cost=float(d["cost"]),
                time=float(d["time"]), loss_quantile=float(d["loss_quantile"]), loss_mean=float(d["loss_mean"]),
                solve_seconds=float(d["solve_seconds"]), omega=float(_target_key(d, "omega", source)),
                loss_target=float(_target_key(d, "loss_target", source)),
                deadline=float(_target_key(d, "deadline", source)),
                loss_quantile_bounds=tuple(b) if b else None, info=dict(d.get("info") or {}),
                optimal_proven=bool(d.get("optimal_proven", False)),
                lower_bound=None if d.get("lower_bound") is None else float(d["lower_bound"]),
                scenario_spec=d.get("scenario_spec"),
            )
        except KeyError as e:
            raise PlanError(f"{source}: the key {e.args[0]!r} is missing") from None
        except PlanError:
            raise
        except (TypeError, ValueError, OverflowError) as e:
            raise PlanError(f"{source}: a value has the wrong type: {e}") from None

    @classmethod
    def load(cls, path: str | Path) -> "Plan":
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise PlanError(f"{p}: no such plan file") from None
        except UnicodeDecodeError as e:
            raise PlanError(f"{p}: not valid JSON: {e}") from None
        except OSError as e:
            raise PlanError(f"{p}: cannot be read: {e.strerror or e}") from None
        try:
            d = json.loads(text)
        except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError; so is int()'s digit limit
            raise PlanError(unreadable_text(text, str(p), e, "JSON", "plan")) from None
        if isinstance(d, dict):   # its paths recorded relative to its folder (`save`), as paths of this machine
            d = with_paths(d, lambda v: str(resolved(v, p)))
        plan = cls.from_json(d, str(p))
        plan.source = str(p)
        return plan

    def __setattr__(self, name: str, value: Any) -> None:
        # the checked scenario (`scenario_object`) is of the plan's content: a field assigned anew drops it
        if name != "source":
            self.__dict__.pop("_checked", None)
        object.__setattr__(self, name, value)

    def scenario_object(self, loss=None) -> Scenario:
        """The scenario this plan was made for (embedded in the plan file), the plan checked against it: its
        references and epochs (`check_plan`), then its cost, time and certified quantile recomputed
        (`check_figures`; the quantile on `loss`, a LossModel, when the plan was made with a law given in code
        rather than the scenario's).  Parsed once and checked once per law, kept on the plan until one of its
        fields is assigned anew (a plan's lists and its scenario table are not edited in place once asked for:
        `dataclasses.replace` makes another plan)."""
        memo = self.__dict__.setdefault("_checked", {"scenario": None, "laws": []})
        for law, s in memo["laws"]:
            if law is loss:
                return s
        if memo["scenario"] is None:
            memo["scenario"] = self._parsed_scenario()
        s = memo["scenario"]
        check_plan(self, s, self.source)
        check_figures(self, s, self.source, plan_cost(s, self.datasets, self.epochs),
                      plan_time(s, self.datasets, self.epochs), loss)
        memo["laws"].append((loss, s))
        return s

    def _parsed_scenario(self) -> Scenario:
        if self.scenario_spec is None:
            if self.scenario not in builtin_names() and not Path(self.scenario).is_file():
                raise PlanError(f"{self.source}: scenario_spec: missing, and scenario = {self.scenario!r} is neither "
                                "a file nor a built-in scenario: the plan cannot be checked against the scenario it "
                                "was made for; plan again with `depl plan SCENARIO --out PLAN.json`, which embeds it")
            try:
                return load_scenario(self.scenario)
            except ScenarioError as e:
                raise PlanError(f"{self.source}: scenario_spec: missing, and the scenario it names cannot be read: "
                                f"{e}") from None
        if not isinstance(self.scenario_spec, dict):
            raise PlanError(f"{self.source}: scenario_spec: not a table of the scenario")
        spec = self.scenario_spec
        target = spec.get("target")
        if isinstance(target, dict) and "alpha" not in target:
            # a plan's scenario records its α unless it was None (planned with the marginal rule: scenario_dict
            # leaves None out): read it so, not at today's default
            spec = {**spec, "target": {**target, "alpha": None}}
        return parse_scenario(spec, f"{self.source}: scenario_spec (the plan's scenario)")


def with_paths(d: dict[str, Any], change) -> dict[str, Any]:
    """Plan JSON `d` with `change(path)` in place of each path it holds: `scenario_spec.code_dir` (your code's
    folder) and, in a certified search's `info.certificate`, `evidence.store` (its runs; not a store URL) and
    `evidence.models.folder` (the models it kept)."""
    out = dict(d)
    spec = d.get("scenario_spec")
    if isinstance(spec, dict) and isinstance(spec.get("code_dir"), str):
        out["scenario_spec"] = {**spec, "code_dir": change(spec["code_dir"])}
    info = d.get("info")
    cert = info.get("certificate") if isinstance(info, dict) else None
    ev = cert.get("evidence") if isinstance(cert, dict) else None
    if isinstance(ev, dict):
        ev = dict(ev)
        store = ev.get("store")
        if isinstance(store, str) and store != ":memory:" and "://" not in store:
            ev["store"] = change(store)
        models = ev.get("models")
        if isinstance(models, dict) and isinstance(models.get("folder"), str):
            ev["models"] = {**models, "folder": change(models["folder"])}
        out["info"] = {**info, "certificate": {**cert, "evidence": ev}}
    return out


def _non_finite(d, where: str = "") -> str:
    """The first field of a JSON-like value holding NaN or ±inf, as a path (`epochs[3].compute`)."""
    if isinstance(d, dict):
        items = ((f"{where}.{k}" if where else str(k), v) for k, v in d.items())
    elif isinstance(d, (list, tuple)):
        items = ((f"{where}[{i}]", v) for i, v in enumerate(d))
    else:
        return f"{where} = {d}" if isinstance(d, float) and not math.isfinite(d) else ""
    for w, v in items:
        found = _non_finite(v, w)
        if found:
            return found
    return ""


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


def epoch_cost(s: Scenario, model: str, cluster: str, compute: float, samples: float) -> float:
    """The compute cost of one epoch: κ(n)·x(k)·nodes(n) (eq. 2), times T(k) under resource-time."""
    n = s.clusters[s.cluster_index[cluster]]
    if s.resource_time:
        return n.unit_cost * compute * n.nodes * epoch_time(s, model, cluster, compute, samples)
    return n.unit_cost * compute * n.nodes


def epoch_costs(s: Scenario, datasets: list[str], epochs: list[Epoch]) -> list[float]:
    """The compute cost of every epoch (eq. 2 without β), in order."""
    S = s.samples(datasets)
    return [epoch_cost(s, e.model, e.cluster, e.compute, S) for e in epochs]


def plan_cost(s: Scenario, datasets: list[str], epochs: list[Epoch]) -> float:
    """Eq. (2): compute cost of every epoch plus β once per (dataset, cluster used)."""
    compute = sum(epoch_costs(s, datasets, epochs))
    used = sorted({e.cluster for e in epochs})
    return float(compute + sum(s.transfer_cost(datasets, n) for n in used))


def with_scenario(plan: Plan, s: Scenario) -> Plan:
    plan.scenario_spec = scenario_dict(s)
    return plan


def with_figures(plan: Plan, s: Scenario) -> Plan:
    """`plan` with the figures `depl plan` writes computed from its epochs and scenario `s` — cost and time (eqs.
    (1)–(2)), the certified ω-quantile of ℓ(K) with its bracket and E[ℓ(K)] (the loss law, as the planners certify a
    schedule), the target and the scenario embedded — so that a plan written by hand, or edited, passes the check of
    its figures when read (`Plan.scenario_object`).  Feasibility is not judged: `feasible` is kept."""
    out = replace(plan, scenario=s.name, omega=s.target.quantile, loss_target=s.target.loss, deadline=s.target.deadline)
    check_plan(out, s, out.source)  # its epochs first: a version, cluster or switch the scenario lacks has no figures
    d = loss_model_for(s).distribution(out.schedule, s.phi(s.samples(out.datasets)))
    lo, hi = d.quantile_bounds(out.omega)
    out = replace(out, cost=plan_cost(s, out.datasets, out.epochs), time=plan_time(s, out.datasets, out.epochs),
                  loss_quantile=float(hi), loss_quantile_bounds=(float(lo), float(hi)), loss_mean=float(d.mean()))
    return with_scenario(out, s)


__all__ = ["Plan", "Epoch", "PlanError", "FORMAT", "epoch_time", "epoch_cost", "epoch_costs", "plan_time", "plan_cost",
           "compute_needed", "with_scenario", "with_figures", "ScenarioError"]
