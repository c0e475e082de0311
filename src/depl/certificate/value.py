"""One certificate, one type: what a plan's runs certify, the way every command writes and reads it.

A `Certificate` says, of one plan: with confidence 1 − α over `runs` runs (`hits` of which met ℓmax), P(ℓ(K) ≤
ℓmax) ≥ ω is `certified`, `refuted` or `undecided` (`Outcome`).  Four procedures issue one (`Kind`):

* `calibration` — `depl plan --alpha`: the calibration runs of the plan's own schedule
  (depl.planners.certify_by_calibration; it certifies or leaves undecided, it never refutes);
* `search`      — `depl plan --certify`: the certified search over candidates fixed in advance
  (depl.certificate.search; the plan returned is the cheapest certified);
* `sequential`  — `depl certify`: fresh seeds of a plan already chosen, until the sequential test decides;
* `validation`  — `depl validate`: a number of held-out seeds fixed in advance, judged by the one-sided (1 − α)
  Clopper–Pearson bounds (depl.validate; its question is whether the plan's promise is refuted).

Every kind has the same fields — ω, ℓmax, α and the share of α its test spent, runs, hits, the seeds (ranges),
the lower bound where its test has one, the verdict — and its own `evidence` (the calibration's digest and runs,
the search's candidates, store and kept models, the fresh runs' finals and run id, the held-out runs' bands).
A plan file carries it as `info.certificate`, `depl certify` and `depl validate` write it as their file:
`to_json` / `from_json`, in one shape, with a format version; `from_json` refuses an unknown version or a
malformed field with one line naming the field.

The verdict's exit code is `Outcome.exit_code`, the one map every command's exit status is read from: 0 (ok),
3 (not certified: undecided) and 4 (refuted).  `depl validate` asks another question of the same verdict — is the
plan's promise refuted? — where undecided is *not refuted* (exit 0): `Outcome.exit_code("promise")`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Literal, Mapping

from .alpha import alpha_problem

FORMAT = "depl.certificate/2"

EXIT_OK = 0
EXIT_NOT_CERTIFIED = 3      # the command line's EXIT_INFEASIBLE: not certifiable, or undecided
EXIT_REFUTED = 4

Question = Literal["certify", "promise"]


class Kind(str, Enum):
    """Which procedure issued the certificate."""

    CALIBRATION = "calibration"
    SEARCH = "search"
    SEQUENTIAL = "sequential"
    VALIDATION = "validation"

    def __str__(self) -> str:
        return self.value


class Outcome(str, Enum):
    """The one word every command gives a promise "P(ℓ(K) ≤ ℓmax) ≥ ω" judged on runs: certified (with
    confidence 1 − α, p ≥ ω), refuted (with confidence 1 − α, p < ω), undecided (the runs cannot tell p from ω).

    >>> Outcome("refuted").exit_code(), Outcome.UNDECIDED.exit_code(), Outcome.UNDECIDED.exit_code("promise")
    (4, 3, 0)
    """

    CERTIFIED = "certified"
    REFUTED = "refuted"
    UNDECIDED = "undecided"

    def __str__(self) -> str:
        return self.value

    @property
    def not_refuted(self) -> bool:
        """The plan's promise stands: certified, or the runs cannot tell (what `depl validate` gates on)."""
        return self is not Outcome.REFUTED

    def exit_code(self, question: Question = "certify") -> int:
        """The command's exit status for this verdict: `certify` (depl certify, depl plan --certify: is the plan
        certified?) or `promise` (depl validate: is the plan's promise refuted?)."""
        return EXIT_CODES[question][self]


EXIT_CODES: dict[str, dict[Outcome, int]] = {
    "certify": {Outcome.CERTIFIED: EXIT_OK, Outcome.UNDECIDED: EXIT_NOT_CERTIFIED, Outcome.REFUTED: EXIT_REFUTED},
    "promise": {Outcome.CERTIFIED: EXIT_OK, Outcome.UNDECIDED: EXIT_OK, Outcome.REFUTED: EXIT_REFUTED},
}
"""The verdict → exit code map, the only one: 0 ok, 3 not certified (undecided), 4 refuted."""


class CertificateError(ValueError):
    """A certificate's JSON that is not one: one line naming the field, the value and why."""


def _fail(source: str, key: str, value: Any, why: str) -> CertificateError:
    shown = repr(value)
    return CertificateError(f"{source}: {key} = {shown if len(shown) <= 80 else shown[:77] + '...'}: {why}")


def _number(d: Mapping, key: str, source: str, *, optional: bool = False, lo: float = -math.inf,
            hi: float = math.inf) -> float | None:
    v = d.get(key)
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise _fail(source, key, v, f"expected a number in [{lo:g}, {hi:g}]" if math.isfinite(hi) else
                    "expected a finite number")
    return float(v)


def _count(d: Mapping, key: str, source: str) -> int:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise _fail(source, key, v, "expected a count (an integer ≥ 0)")
    return v


def _seeds(v: Any, source: str) -> tuple[tuple[int, int], ...]:
    ok = isinstance(v, list) and all(
        isinstance(r, (list, tuple)) and len(r) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in r)
        and 0 <= r[0] <= r[1] for r in v)
    if not ok:
        raise _fail(source, "seeds", v, "expected a list of [first, last] seed ranges")
    return tuple((int(a), int(b)) for a, b in v)


def seed_ranges(ranges) -> tuple[tuple[int, int], ...]:
    """[first, last] seed ranges merged where they meet or overlap, sorted.

    >>> seed_ranges([(9, 9), (3, 4), (5, 5), (4, 6)])
    ((3, 6), (9, 9))
    """
    out: list[list[int]] = []
    for a, b in sorted((int(a), int(b)) for a, b in ranges):
        if out and a <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple((a, b) for a, b in out)


@dataclass(frozen=True)
class Certificate:
    """One plan's certificate (the module's docstring): its kind, verdict, ω, ℓmax, α and the share of α its test
    spent, runs and hits, seeds (ranges), lower bound (None: its test gives none) and its kind's evidence."""

    kind: Kind
    verdict: Outcome
    omega: float
    loss_target: float
    alpha: float
    alpha_share: float | None
    runs: int
    hits: int
    seeds: tuple[tuple[int, int], ...] = ()
    lower_bound: float | None = None
    evidence: dict = field(default_factory=dict, hash=False)

    @property
    def certified(self) -> bool:
        return self.verdict is Outcome.CERTIFIED

    def exit_code(self, question: Question = "certify") -> int:
        return self.verdict.exit_code(question)

    @property
    def seed_list(self) -> list[int]:
        """Every seed of `seeds`, in order."""
        return [s for a, b in self.seeds for s in range(a, b + 1)]

    # the evidence a command reads, by name
    @property
    def calibration(self) -> dict | None:
        """calibration: the calibration's digest, ℓmax, ω, the experiments that certify and their runs."""
        return self.evidence.get("calibration")

    @property
    def promise(self) -> float | None:
        """calibration at ω′ = `omega` (depl plan --slack): the ω the plan promises (None: it promises `omega`)."""
        v = self.evidence.get("promise")
        return None if v is None else float(v)

    @property
    def candidates(self) -> list[dict]:
        """search: every candidate's row (schedule, cost, weight, verdict, runs, met, bounds …), cheapest first."""
        return list(self.evidence.get("candidates") or [])

    @property
    def returned(self) -> int | None:
        """search: the index of the candidate returned (None: none certified)."""
        return self.evidence.get("returned")

    @property
    def store(self) -> str | None:
        """search, sequential, validation: the store of the runs."""
        return self.evidence.get("store")

    @property
    def models(self) -> dict | None:
        """search with --keep-models: where the plan returned's models were kept."""
        return self.evidence.get("models")

    @property
    def run_id(self) -> str | None:
        """sequential, validation: the store's run id of the fresh (held-out) runs."""
        return self.evidence.get("run_id")

    def with_evidence(self, **more: Any) -> "Certificate":
        """This certificate with more evidence (the α account, the models kept)."""
        return replace(self, evidence={**self.evidence, **more})

    def without_evidence(self, *keys: str) -> "Certificate":
        return replace(self, evidence={k: v for k, v in self.evidence.items() if k not in keys})

    def to_json(self) -> dict:
        return {"format": FORMAT, "kind": self.kind.value, "verdict": self.verdict.value, "omega": self.omega,
                "loss_target": self.loss_target, "alpha": self.alpha, "alpha_share": self.alpha_share,
                "runs": self.runs, "hits": self.hits, "seeds": [list(r) for r in self.seeds],
                "lower_bound": self.lower_bound, "evidence": dict(self.evidence)}

    @classmethod
    def from_json(cls, d: Any, source: str = "certificate") -> "Certificate":
        """The certificate a JSON object holds, or CertificateError (one line: `source`, the field, the value, why)."""
        if not isinstance(d, dict):
            raise _fail(source, "certificate", type(d).__name__, "expected a JSON object")
        if d.get("format") != FORMAT:
            raise _fail(source, "format", d.get("format"), f"expected {FORMAT!r} (a depl certificate)")
        unknown = sorted(set(d) - set(_KEYS))
        if unknown:
            raise _fail(source, unknown[0], d[unknown[0]], "not a field of a certificate")
        kinds, words = [k.value for k in Kind], [o.value for o in Outcome]
        if d.get("kind") not in kinds:
            raise _fail(source, "kind", d.get("kind"), f"expected one of {', '.join(kinds)}")
        if d.get("verdict") not in words:
            raise _fail(source, "verdict", d.get("verdict"), f"expected one of {', '.join(words)}")
        alpha = _number(d, "alpha", source, lo=0.0, hi=1.0)
        why = alpha_problem(alpha, f"{source}: alpha =")
        if why:
            raise CertificateError(why)
        runs, hits = _count(d, "runs", source), _count(d, "hits", source)
        if hits > runs:
            raise _fail(source, "hits", hits, f"more than runs = {runs}")
        evidence = d.get("evidence")
        if not isinstance(evidence, dict):
            raise _fail(source, "evidence", evidence, "expected a JSON object")
        return cls(Kind(d["kind"]), Outcome(d["verdict"]), _number(d, "omega", source, lo=0.0, hi=1.0),
                   _number(d, "loss_target", source), alpha,
                   _number(d, "alpha_share", source, optional=True, lo=0.0, hi=alpha), runs, hits,
                   _seeds(d.get("seeds"), source), _number(d, "lower_bound", source, optional=True, lo=0.0, hi=1.0),
                   evidence)

    @classmethod
    def of_plan(cls, info: Any, source: str = "the plan") -> "Certificate | None":
        """The certificate a plan's `info` carries (None: it has none)."""
        if not isinstance(info, dict) or info.get("certificate") is None:
            return None
        return cls.from_json(info["certificate"], f"{source}: info.certificate")


_KEYS = ("format", "kind", "verdict", "omega", "loss_target", "alpha", "alpha_share", "runs", "hits", "seeds",
         "lower_bound", "evidence")
