"""The specification recorded with each run in a store (`runs.spec`, a JSON object).

A run's spec says what was trained, so that `depl runs show`, `depl fit` and
the plots can read a store without the code that wrote it (and without torch).
Its keys, all written by `depl.train.engine.execute.register`:

``job``
    the training job (`depl.train.engine.federation.Job.to_json`: data, versions,
    nodes per cluster, ``epochs`` as [epoch, version, cluster] rows, options);
    kept as JSON here so that reading a store needs no torch.  Its
    ``options`` hold ``lr``, ``momentum`` (sgd only), ``batch_size``, ``iid``
    and the recipe keys that differ from the defaults (absent: the default;
    `recipe` reads them with their defaults): ``loss``, ``optimizer``,
    ``weight_decay``, ``schedule``, ``step_every``, ``step_gamma``,
    ``local_epochs``, ``clip``, and ``code_dir`` for your own loss; a
    regression's ``data`` holds ``loss`` too (its labels are read as targets).
``code``
    runs of your own code (a network, data factory or loss ``MODULE:FUNCTION``): the sha256 of each file of it
    the run ran, by its path in its folder (``{"mymodel.py": "sha256:…"}``, the keys of a scenario's
    ``code_hashes``); what the run trained, where the job's ``code_dir`` says only where it lay.
``backend``
    plan runs: ``local`` or ``flower``.
``plan``
    plan runs: the plan it trains (`depl.plan.Plan.to_json`, ``depl.plan/1``).
``experiment``
    profile runs: the profiling experiment (:class:`Experiment`).
``scenario``
    profile runs: the name of the scenario that was profiled.
``adaptive``
    closed-loop runs (`depl run --adaptive`; runs made before it was recorded have none): the rule by name
    (``rule``), the decisions it may take (``decisions``), the slowdowns injected (``slow``), δ and what it
    rests on (``slack``: ``delta``, ``source`` — plan, certificate, given or none —, the level ``lower`` certified
    at ``alpha`` from ``runs`` of which ``met`` met ℓmax, the promise ``omega``, ``why`` — depl.adaptive.Slack),
    the validation–test gap its stops allow for (``gap``: ``model`` measured — on ``seeds`` seeds of ``source`` —
    or sampling), and the run's guarantee in words (``statement``: which part is a confidence, which marginal).

Keys that are absent are not written, so the JSON of a run made before this
record existed is unchanged (a run's spec is part of its identity in the store).

>>> s = RunSpec.from_json({"job": {"epochs": [[1, "full", "A"]], "nodes": {"A": 2}},
...                        "experiment": {"kind": "version", "version": "full", "fraction": 0.5}})
>>> s.epochs, s.nodes, s.experiment.label
(1, 2, 'full @ 0.5 of the data')
>>> RunSpec.from_json(s.to_json()) == s
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The training recipe's keys in a job's options and their defaults (depl.scenario.training.RECIPE_DEFAULTS, which a
# test keeps equal): a run's options leave out the ones at their default, so that runs made before keep their identity
RECIPE_DEFAULTS: dict[str, Any] = {"loss": "cross_entropy", "optimizer": "sgd", "weight_decay": 0.0,
                                   "schedule": "constant", "step_every": None, "step_gamma": 0.1, "local_epochs": 1,
                                   "clip": None}


@dataclass(frozen=True)
class Experiment:
    """A profiling experiment: a version from scratch at a data fraction, or a switch after K1 epochs."""

    kind: str                   # "version" or "switch"
    version: str                # the (first) version
    fraction: float = 1.0
    to: str | None = None       # switch: the version after the switch
    switch_after: int = 0       # switch: K1, epochs before the switch

    @property
    def label(self) -> str:
        if self.kind == "switch":
            return f"{self.version} →{self.to} after {self.switch_after}"
        return self.version if self.fraction == 1.0 else f"{self.version} @ {self.fraction:g} of the data"

    def to_json(self) -> dict:
        return {"kind": self.kind, "version": self.version, "fraction": self.fraction, "to": self.to,
                "switch_after": self.switch_after}

    @classmethod
    def from_json(cls, d: dict) -> "Experiment":
        return cls(str(d["kind"]), str(d["version"]), float(d.get("fraction", 1.0)), d.get("to"),
                   int(d.get("switch_after") or 0))


@dataclass(frozen=True)
class RunSpec:
    """What a run trains; see the module docstring for each key."""

    job: dict[str, Any]
    backend: str | None = None
    plan: dict[str, Any] | None = None
    experiment: Experiment | None = None
    scenario: str | None = None
    adaptive: dict[str, Any] | None = None
    code: dict[str, str] | None = None

    @property
    def epochs(self) -> int:
        """K: the epochs every seed of the run trains."""
        return len(self.job.get("epochs", []))

    @property
    def nodes(self) -> int:
        """The nodes of the job's first cluster (a profile run has one cluster)."""
        return int(next(iter(self.job.get("nodes", {}).values()), 1))

    @property
    def data(self) -> dict[str, Any]:
        return self.job.get("data", {})

    @property
    def recipe(self) -> dict[str, Any]:
        """How the run trained: every recipe key of the job's options, the default where absent (all of them for a
        run made before the keys existed), and ``momentum`` (None unless the optimizer is sgd).

        >>> r = RunSpec({"options": {"lr": 0.01, "momentum": 0.9}}).recipe
        >>> r["loss"], r["optimizer"], r["local_epochs"], r["clip"], r["momentum"]
        ('cross_entropy', 'sgd', 1, None, 0.9)
        """
        options = self.job.get("options") or {}
        out = {k: options.get(k, v) for k, v in RECIPE_DEFAULTS.items()}
        out["momentum"] = options.get("momentum", 0.9) if out["optimizer"] == "sgd" else None
        return out

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"job": self.job, "backend": self.backend, "plan": self.plan,
                             "experiment": None if self.experiment is None else self.experiment.to_json(),
                             "scenario": self.scenario, "adaptive": self.adaptive, "code": self.code}
        return {k: v for k, v in d.items() if v is not None}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "RunSpec":
        """The record of a stored spec; keys it does not know are ignored (a store may be newer than the reader)."""
        exp = d.get("experiment")
        adaptive = d.get("adaptive")
        code = d.get("code")
        return cls(dict(d.get("job") or {}), d.get("backend"), d.get("plan"),
                   Experiment.from_json(exp) if exp else None, d.get("scenario"),
                   dict(adaptive) if isinstance(adaptive, dict) else None,
                   {str(k): str(v) for k, v in code.items()} if isinstance(code, dict) else None)


class SpecError(ValueError):
    """A stored run spec that is not one depl writes (the store was altered); the message names it."""


def run_spec(run: dict[str, Any], where: str) -> RunSpec:
    """The spec of a run as `Store.runs` gives it, checked; SpecError naming `where` (the store) otherwise."""
    try:
        spec = RunSpec.from_json(run["spec"])
        spec.epochs, spec.nodes, dict(spec.data)  # noqa: B018  the fields every reader uses, read once here
        if spec.experiment is not None:
            spec.experiment.label  # noqa: B018
        return spec
    except (KeyError, TypeError, ValueError, AttributeError, StopIteration) as e:
        raise SpecError(f"{where}: runs.spec of run {run.get('run_id')!r} is not one depl writes "
                        f"({type(e).__name__}: {e}); the store was altered") from None

