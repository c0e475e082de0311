"""The seed ledger: every seed a plan's lineage used, so that the seeds that judge a plan are used once; and the
plan's certificate as its calibration runs give it, never as its file says.

A plan's lineage used seeds at every step: its loss law was fitted on some
(`fitted_seeds`, written by `depl fit`), calibrated on others
(`[[calibration.experiments]].seeds`, written by `depl fit` and `depl
calibrate`), and, in a store, judged on others again — `depl certify`'s run
(its seeds; its α and first seed in the store's `seed_uses`), `depl
validate`'s and `depl coverage`'s (their seed ranges), and whatever else
trained the plan's job there (`depl run`).  A command that judged the plan on
one of these seeds would report a run already seen as a new one: a
calibration run counted as held out, a certificate's final losses its own
calibration's.  So `depl certify`, `depl validate` and `depl coverage` refuse
a seed range that meets the ledger (`SeedsUsed`: the overlapping seeds as
ranges, what used them, the first free seed), and their default first seed
lies above every seed of the ledger (`Ledger.default`): certify from B,
validate from B + 100000, coverage from B + 200000, the certified search
(`depl plan --certify`) from B + 300000, where B is the ledger's highest seed
+ 1 rounded up to two significant digits, and at least 100000 — four blocks
apart, so the defaults of the four commands never meet.

The seeds a command judged with are also kept per *task* — the data, the
networks and the training recipe, whatever the plan, the store or the file
(`task_key`) — in the task's seed book (`TaskSeeds`, a JSON file in the
user's data folder): a certified search, `depl certify`, `depl validate` and
`depl coverage` record there the seeds they drew and the store that holds
them.  A certified search judged every candidate it proposed, so its seeds
are refused to any other store's search, certify, validate or coverage of the
task; a certify, validate or coverage run judged one plan's job, so its seeds
are refused to that job in any other store (other plans of the task may share
seeds, as a coverage table's cells do).

A command resumes only with what it began with: a store's certify run of a
plan records its α and first seed, a validation or coverage run its seed
range; another `--alpha` or `--first-seed`, or fewer `--seeds` than it began
with (a prefix of its seeds judged again), is refused, saying the values it
began with (`began_with`); more seeds go on.

`recomputed_certificate` gives a plan's `info.certified_by` and
`info.certificate` from its own scenario's calibration runs
(`depl.planners.certify_by_calibration`); `check_certificate` refuses a plan
file whose recorded text differs, so no command prints a certificate as read.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from .certificate import Certificate, CertificateError, Kind, Outcome, Sequential
from .jsonout import alike
from .planners import certify_by_calibration
from .scenario import scenario_dict
from .store import Store, StoreError

if TYPE_CHECKING:
    from .plan import Plan
    from .scenario import Scenario

FLOOR = 100_000          # the defaults start at least here: above `depl profile`'s seeds 0.. and the examples'
# each command's block above B (a closed-loop validation, `depl validate --adaptive`, takes the open loop's)
OFFSETS = {"certify": 0, "validate": 100_000, "validate-adaptive": 100_000, "coverage": 200_000, "search": 300_000}
RULE = "docs/certificate.md, \"Seeds are used once\""
# a command as the user types it, where its ledger name is not that
SAID = {"search": "plan --certify", "validate-adaptive": "validate --adaptive"}


class SeedsUsed(ValueError):
    """A seed range that meets the ledger, or a resumed command given other values than it began with; the message
    names the seeds, what used them and the first free seed, in one short line.  Where many uses meet the range,
    the line names the first and counts the rest: `detail` holds every use in a line each (printed by
    `depl --verbose`) and `result` the same as data (the JSON object of a command's --json)."""

    def __init__(self, message: str, uses: list[dict] | None = None):
        super().__init__(message)
        self.detail = tuple(f"seeds {ranges_text(map(tuple, u['seeds']), len(u['seeds']))} by {u['what']}"
                            for u in uses or ())
        self.result = {"error": message, "seeds_used": uses} if uses else None


def as_ranges(seeds: Iterable[int]) -> tuple[tuple[int, int], ...]:
    """Sorted distinct seeds as closed ranges: [1, 2, 3, 7] → ((1, 3), (7, 7))."""
    out: list[list[int]] = []
    for s in sorted({int(x) for x in seeds}):
        if out and s == out[-1][1] + 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return tuple((a, b) for a, b in out)


def _merged(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Closed ranges merged where they meet or touch: ((5, 9), (1, 3), (4, 4)) → [(1, 9)]."""
    out: list[list[int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def ranges_text(ranges: Iterable[tuple[int, int]], most: int = 6) -> str:
    """((1, 3), (7, 7)) → "1..3, 7" (the first `most`, then how many more)."""
    r = list(ranges)
    words = [f"{a}..{b}" if a != b else str(a) for a, b in r[:most]]
    return ", ".join(words) + (f" and {len(r) - most} more ranges" if len(r) > most else "")


def round_up(x: int) -> int:
    """x rounded up to two significant digits: 300064 → 310000, 1064 → 1100, 20 → 20."""
    if x <= 0:
        return 0
    step = 10 ** max(len(str(int(x))) - 2, 0)
    return -(-int(x) // step) * step


@dataclass(frozen=True)
class Use:
    """Seeds one step of a plan's lineage used: `kind` fit, calibration, certify, validate, coverage or runs."""

    kind: str
    what: str                              # in words, for the refusal: "calibration experiment full (…)"
    seeds: tuple[tuple[int, int], ...]     # closed ranges, sorted
    run_id: str = ""
    first: int | None = None               # a judging command's recorded start (its seed_uses row)
    last: int | None = None
    alpha: float | None = None

    def overlap(self, first: int, last: int) -> tuple[tuple[int, int], ...]:
        return tuple((max(a, first), min(b, last)) for a, b in self.seeds if a <= last and b >= first)

    @property
    def highest(self) -> int | None:
        return self.seeds[-1][1] if self.seeds else None

    def to_json(self) -> dict:
        return {"kind": self.kind, "what": self.what, "seeds": [list(r) for r in self.seeds],
                **({"run_id": self.run_id} if self.run_id else {})}


@dataclass
class Ledger:
    """The seeds of a plan's lineage (`uses`), from its scenario and, where given, a store."""

    uses: list[Use] = field(default_factory=list)

    def __add__(self, other: "Ledger") -> "Ledger":
        """Both ledgers' uses; a use of the same kind on the same seeds (one scenario's calibration read twice,
        from the plan and from the scenario given) once."""
        have = {(u.kind, u.seeds, u.run_id, u.what.split(" (")[0]) for u in self.uses}
        return Ledger(self.uses + [u for u in other.uses if (u.kind, u.seeds, u.run_id, u.what.split(" (")[0])
                                   not in have])

    def without(self, *uses: Use) -> "Ledger":
        return Ledger([u for u in self.uses if u not in uses])

    def highest(self) -> int | None:
        h = [u.highest for u in self.uses if u.highest is not None]
        return max(h) if h else None

    def base(self) -> int:
        """B: the ledger's highest seed + 1 rounded up to two significant digits, at least FLOOR."""
        h = self.highest()
        return max(FLOOR, round_up(h + 1) if h is not None else 0)

    def default(self, command: str) -> int:
        """The command's default first seed: B plus its block (OFFSETS)."""
        return self.base() + OFFSETS[command]

    def overlaps(self, first: int, last: int) -> list[tuple[Use, tuple[tuple[int, int], ...]]]:
        return [(u, o) for u in self.uses for o in [u.overlap(first, last)] if o]

    def check(self, first: int, last: int, asked: str, command: str) -> None:
        """Refuse seeds first..last (`asked`: the options that gave them) where they meet the ledger."""
        hits = self.overlaps(first, last)
        if not hits:
            return
        first_use, first_seeds = hits[0]
        said = f"seeds {ranges_text(first_seeds, 2)} by {first_use.what}"
        if len(hits) > 1:
            kinds = Counter(u.kind for u, _ in hits[1:])
            union = _merged(r for _, o in hits for r in o)
            said += (f" and {len(hits) - 1} more use{'s' * (len(hits) > 2)} ("
                     + ", ".join(f"{k} ×{n}" if n > 1 else k for k, n in kinds.items())
                     + f": {union[0][0]}..{union[-1][1]} in all; `depl --verbose` lists each)")
        raise SeedsUsed(f"{asked} (seeds {first}..{last}): the plan's lineage used {said}; seeds judge a plan once "
                        f"({RULE}): the first free seed is {self.default(command)}, "
                        f"`depl {SAID.get(command, command)}`'s default",
                        [{"kind": u.kind, "what": u.what, "seeds": [list(r) for r in o],
                          **({"run_id": u.run_id} if u.run_id else {})} for u, o in hits])

    def to_json(self) -> list[dict]:
        return [u.to_json() for u in self.uses]

    def words(self) -> str:
        """The seeds kept clear of, in a line: "kept clear of the plan's lineage: fit 0..14; calibration …"."""
        if not self.uses:
            return "the plan's lineage records no seeds"
        # uses of one kind on the same seeds (a scenario's experiments of one calibration) are said once, with how
        # many; uses of one kind whose seeds overlap (a search's counted seeds and the batches its seed book holds)
        # once, their seeds merged
        seen: list[list] = []   # [kind, ranges, how many]
        for u in self.uses:
            same = next((s for s in seen if s[0] == u.kind and s[1] == tuple(u.seeds)), None)
            if same:
                same[2] += 1
                continue
            near = next((s for s in seen if s[0] == u.kind != "calibration"
                         and any(a <= d and c <= b for a, b in s[1] for c, d in u.seeds)), None)
            if near:
                near[1] = tuple(_merged([*near[1], *u.seeds]))
            else:
                seen.append([u.kind, tuple(u.seeds), 1])

        def times(kind: str, n: int) -> str:
            return "" if n == 1 else f" ({n} experiments)" if kind == "calibration" else f" (×{n})"

        said = [f"{kind} {ranges_text(seeds, 2)}{times(kind, n)}" for kind, seeds, n in seen]
        most = 5   # a line: the rest counted (--json lists every use: the command's `ledger`)
        return ("kept clear of the plan's lineage: " + "; ".join(said[:most])
                + (f"; and {len(said) - most} more" if len(said) > most else ""))


def lineage(s: "Scenario", whose: str = "the plan's scenario") -> Ledger:
    """The seeds a scenario records: its law's fit (fitted_seeds) and its calibration experiments' seeds."""
    uses = []
    if s.fitted_seeds is not None:
        a, b = s.fitted_seeds
        uses.append(Use("fit", f"the law's fit ({whose} {s.name!r}, fitted_seeds)", ((int(a), int(b)),)))
    c = s.calibration
    for e in (c.experiments or []) if c is not None else []:
        if e.seeds:
            uses.append(Use("calibration", f"calibration experiment {e.label} ({whose} {s.name!r})",
                            as_ranges(e.seeds)))
    return Ledger(uses)


def plan_lineage(plan: "Plan", s: "Scenario", whose: str = "the plan's scenario") -> Ledger:
    """`lineage` of the plan's scenario, and the seeds of the certified search that returned the plan (its
    `info.certificate` of kind search): a search's runs judged the plan, so they never judge it again."""
    ledger = lineage(s, whose)
    cert = Certificate.of_plan(plan.info)
    if cert is not None and cert.kind is Kind.SEARCH and cert.seeds:
        ledger = ledger + Ledger([Use("search", f"the certified search that returned the plan (info.certificate, "
                                      f"store {cert.store})", cert.seeds)])
    return ledger


def store_uses(store: "Store", plan_run: str, certify_run: str) -> Ledger:
    """The seeds a store used on a plan's job: its certify run (with the α and first seed it began with), the
    validation and coverage ranges recorded on its plan run, and the plan run's other trained seeds."""
    uses: list[Use] = []
    where = f"in {store.path}"
    recs = {(r["run_id"], r["command"]): r for r in store.uses(plan_run) + store.uses(certify_run)}
    cert = recs.get((certify_run, "certify"))
    trained = store.seeds(certify_run)
    if cert is None and trained:   # `depl certify` records its seeds and α before it trains any
        ranges = ", ".join(f"{a}..{b}" for a, b in as_ranges(trained))
        raise StoreError(f"{store.path}: seed_uses has no certify record of run {certify_run}, which trained seeds "
                         f"{ranges}: a store written before depl recorded what its judging commands began with; "
                         "migrate it (python scripts/migrate_stores.py)")
    if cert is not None:
        uses.append(Use("certify", f"certify run {certify_run} {where} (α {cert['alpha']:g}, from seed "
                        f"{cert['first']})", as_ranges(trained), certify_run, cert["first"], cert["last"],
                        cert["alpha"]))
    for (rid, cmd), r in recs.items():
        if rid != plan_run:
            continue
        uses.append(Use(cmd, f"{cmd} run {plan_run} {where} (seeds {r['first']}..{r['last']})",
                        ((r["first"], r["last"]),), plan_run, r["first"], r["last"]))
    spans = [(u.first, u.last) for u in uses if u.run_id == plan_run]
    rest = [x for x in store.seeds(plan_run) if not any(a <= x <= b for a, b in spans)]
    if rest:
        uses.append(Use("runs", f"runs of the plan's job {plan_run} {where} (`depl run`)", as_ranges(rest), plan_run))
    return Ledger(uses)


# -- the task's seed book ------------------------------------------------------------------------------------ #
SEEDS_FORMAT = "depl.seeds/1"


def task_key(s: "Scenario") -> dict:
    """What makes two runs the same task whatever plan trains them: where the data come from (each dataset's
    source and share), each version's network and the training recipe.  Not the nodes, data fraction, versions'
    schedule or switch points (they differ between the plans of one task), nor the scenario's name or file."""
    d = scenario_dict(s)
    return {"data": sorted([str(x.get("source")), json.dumps(x.get("share"))] for x in d.get("datasets") or []),
            "networks": sorted(json.dumps(m.get("train"), sort_keys=True) for m in d.get("models") or []),
            "training": d.get("training") or {}}


def task_digest(s: "Scenario") -> str:
    return hashlib.sha256(json.dumps(task_key(s), sort_keys=True).encode()).hexdigest()[:16]


def seeds_folder() -> Path:
    """$DEPL_SEED_LEDGER, else $XDG_DATA_HOME/depl/seeds, else ~/.local/share/depl/seeds."""
    if os.environ.get("DEPL_SEED_LEDGER"):
        return Path(os.environ["DEPL_SEED_LEDGER"]).expanduser()
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data).expanduser() / "depl" / "seeds"


@dataclass(frozen=True)
class TaskSeeds:
    """The seed book of one task (`task_key`): every range of seeds a judging command drew for it — a certified
    search's (which judged every candidate it proposed), a certify, validate or coverage run's (which judged one
    plan's job) — with the store that holds the runs, so that no other store judges them again.  One JSON file
    (`depl.seeds/1`) per task in `seeds_folder()`, rewritten whole (a temporary file, then renamed)."""

    path: Path
    task: str          # the scenario's name, for a person reading the file

    @classmethod
    def of(cls, s: "Scenario") -> "TaskSeeds":
        return cls(seeds_folder() / f"task-{task_digest(s)}.json", s.name)

    def entries(self) -> list[dict]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as e:
            raise SeedsUsed(f"{self.path}: the task's seed book cannot be read ({getattr(e, 'strerror', None) or e}); "
                            "it lists the seeds already used: mend or restore it") from None
        rows = data.get("entries") if isinstance(data, dict) else None
        return [r for r in rows or [] if isinstance(r, dict) and isinstance(r.get("seeds"), list)]

    def ledger(self, store: str, job: str | None = None, search: str | None = None) -> Ledger:
        """The seeds other stores used that may not judge again here: every certified search's (it judged every
        candidate of the task it proposed), and any command's on the same plan's job `job`.  `store`'s own are
        its ledger's (`store_uses`), not repeated; a search's own only while `store` still holds it (`search`: the
        digest of its manifest) — a store deleted and made again is another analysis of the same seeds."""
        uses = []
        for r in self.entries():
            mine = r.get("store") == where(store) and (r.get("kind") != "search" or r.get("manifest") == search)
            if mine or not (r.get("kind") == "search" or (job and r.get("job") == job)):
                continue
            try:
                a, b = (int(x) for x in r["seeds"])
            except (TypeError, ValueError):
                continue
            # no run id: a use in another store is never the one a command resumes (`began_with`)
            # the book's own path is not said: docs/certificate.md, "The task's seed book", says where books lie
            uses.append(Use(str(r.get("kind")), f"{r.get('kind')} in {r.get('store', '?')} (the task's seed book)",
                            ((a, b),)))
        return Ledger(uses)

    def record(self, kind: str, first: int, last: int, store: str, job: str | None = None,
               alpha: float | None = None, search: str | None = None) -> None:
        """Record (or widen) a range of `kind` in `store` (on the plan's job `job`, the search's none): the union
        of what it recorded before and first..last.  OSError where the book cannot be written."""
        rows, store = self.entries(), where(store)
        key = (kind, store, job, search)
        mine = [r for r in rows if (r.get("kind"), r.get("store"), r.get("job"), r.get("manifest")) == key]
        if mine:
            a, b = (int(x) for x in mine[0]["seeds"])
            first, last = min(first, a), max(last, b)
            if (first, last) == (a, b):
                return
        rows = [r for r in rows if (r.get("kind"), r.get("store"), r.get("job"), r.get("manifest")) != key]
        rows.append({"kind": kind, "store": store, **({"job": job} if job else {}),
                     **({"manifest": search} if search else {}), "seeds": [int(first), int(last)],
                     **({} if alpha is None else {"alpha": float(alpha)}),
                     "at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"{self.path.stem}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"format": SEEDS_FORMAT, "task": self.task, "entries": rows}, indent=1) + "\n",
                       encoding="utf-8")
        tmp.replace(self.path)


def digest(data: dict) -> str:
    """A short sha256 of JSON data (a search's manifest), as the seed book names it."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def where(store: str | Path) -> str:
    """A store as the seed book names it: its absolute path."""
    return str(store) if str(store) == ":memory:" else str(Path(store).resolve())


def began_with(ledger: Ledger, command: str, run_id: str) -> Use | None:
    """The recorded use of `command` on `run_id` (what a resumed command began with), if any."""
    return next((u for u in ledger.uses if u.kind == command and u.run_id == run_id), None)


def resolve(ledger: Ledger, command: str, run_id: str, first: int | None, count: int, asked: str,
            alpha: float | None = None) -> int:
    """The first seed of a judging command on `run_id` for `count` seeds (`first`: --first-seed, None: the
    default), checked against the ledger: a resumed command (its recorded use) keeps its first seed and α, and
    its seeds; a new one takes seeds nothing used.  Raises SeedsUsed."""
    own = began_with(ledger, command, run_id)
    if command == "certify" and own is None:
        own = next((u for u in ledger.uses if u.kind == "certify" and u.run_id == run_id), None)
    if own is not None and own.first is not None:
        if command == "certify":
            other = []
            if first is not None and first != own.first:
                other.append(f"--first-seed {first}")
            if alpha is not None and own.alpha is not None and abs(alpha - own.alpha) > 1e-12:
                other.append(f"--alpha {alpha:g}")
            if other:
                raise SeedsUsed(f"{' and '.join(other)}: {own.what.split(' (')[0]} began with "
                                + (f"α {own.alpha:g} and " if own.alpha is not None else "")
                                + f"first seed {own.first}, and resumes only with them (fixed before its first "
                                "run): rerun with "
                                + (f"--alpha {own.alpha:g} " if own.alpha is not None else "")
                                + f"--first-seed {own.first}, or certify in another store (--out) from seed "
                                f"{max(ledger.default('certify'), round_up((own.last or own.first) + 1))}")
            return _checked(ledger.without(own), own.first, own.first + count - 1, asked or f"--first-seed {own.first}",
                            command)
        f = own.first if first is None else first
        if f == own.first and own.last is not None and f + count - 1 < own.last:
            # a judgement on a prefix of its seeds would drop the ones after it, whatever they said
            raise SeedsUsed(f"{asked or f'{count} seeds'} (seeds {f}..{f + count - 1}): {own.what.split(' (')[0]} "
                            f"began with seeds {own.first}..{own.last} and judges every one of them: rerun with "
                            f"{own.last - own.first + 1} seeds or more")
        if f == own.first:   # a resumption (with more seeds), or the same runs judged again
            return _checked(ledger.without(own), f, f + count - 1, asked, command)
        _checked(ledger, f, f + count - 1, asked, command)   # seeds another step used: named first
        raise SeedsUsed(f"{asked or f'--first-seed {f}'} (seeds {f}..{f + count - 1}): {own.what.split(' (')[0]} "
                        f"began with seeds {own.first}..{own.last} and resumes only from --first-seed {own.first}; "
                        f"another {SAID.get(command, command)} of the plan takes another store (--out) and free "
                        f"seeds: the first is {ledger.default(command)}")
    first = ledger.default(command) if first is None else first
    return _checked(ledger, first, first + count - 1, asked, command)


def _checked(ledger: Ledger, first: int, last: int, asked: str, command: str) -> int:
    ledger.check(first, last, asked or f"--first-seed {first}", command)
    return first


# -- the plan's certificate, recomputed ------------------------------------------------------------------------ #
CERTIFICATE_KEYS = ("certified_by", "certificate")
ACCOUNT_KEYS = ("alpha_ledger",)   # where `depl plan` recorded the α spent (depl.workflows.alpha_spent), not recomputed


def recomputed_certificate(plan: "Plan", scenario: "Scenario | None" = None) -> dict:
    """`info.certified_by` and `info.certificate` as the plan's own scenario's calibration runs give them
    (`depl.planners.certify_by_calibration`); {} where its scenario uses no calibration."""
    s = scenario if scenario is not None else plan.scenario_object()
    q = dataclasses.replace(plan, info={k: v for k, v in plan.info.items() if k not in CERTIFICATE_KEYS})
    cert = Certificate.of_plan(plan.info)
    certify_by_calibration(s, q, cert.promise if cert is not None else None)
    return {k: q.info[k] for k in CERTIFICATE_KEYS if k in q.info}


def certificate_problem(plan: "Plan", where: str, scenario: "Scenario | None" = None) -> str | None:
    """Why the plan file's certificate text is not what its calibration runs give (None: it is, or the file has
    none: a plan written before plans said it, whose certificate is then the recomputed one)."""
    try:
        cert = Certificate.of_plan(plan.info, where)
    except CertificateError as e:
        return str(e)
    if cert is not None and cert.kind is Kind.SEARCH:
        return search_problem(plan, where, cert)
    s = scenario if scenario is not None else plan.scenario_object()
    got = recomputed_certificate(plan, s)
    for k in CERTIFICATE_KEYS:
        have, want = plan.info.get(k), got.get(k)
        if k == "certificate" and cert is not None:   # the α account kept beside it, not a claim of runs
            have = cert.without_evidence(*ACCOUNT_KEYS).to_json()
        if have is not None and not alike(json.loads(json.dumps(have)), json.loads(json.dumps(want))):
            # the file's text is not repeated: what a command prints of a certificate is recomputed
            return (f"{where}: the plan's info.{k} is not what its calibration runs give: they give "
                    f"{_given(have, want)}; a plan's certificate is recomputed, never taken as written (make the "
                    "plan again with `depl plan --out`)")
    return None


def _given(have, want, most: int = 3) -> str:
    """What the runs give where the file differs: a text cut to 100 characters (`depl plan` prints it whole), a
    certificate's differing fields (at most `most`, each value cut to 40 characters), never the file's values."""
    if not (isinstance(have, dict) and isinstance(want, dict)):
        return "nothing" if want is None else t if len(t := repr(want)) <= 100 else t[:97] + "..."

    def flat(d, head=""):
        out = {}
        for key, v in d.items():
            out.update(flat(v, f"{head}{key}.") if isinstance(v, dict) else {f"{head}{key}": v})
        return out

    h, w = flat(have), flat(want)
    keys = [key for key in sorted(set(h) | set(w), key=lambda k: (k.count("."), k))   # the top fields first
            if json.dumps(h.get(key)) != json.dumps(w.get(key))]
    shown = [f"{key} {'nothing' if key not in w else (t if len(t := repr(w[key])) <= 40 else t[:37] + '...')}"
             for key in keys[:most]]
    return ", ".join(shown) + (f" and {len(keys) - most} more fields" if len(keys) > most else "")


def search_problem(plan: "Plan", where: str, c: Certificate) -> str | None:
    """Why a certified search's certificate in a plan file is not what its runs give: its store's runs of the plan
    returned, recounted (runs, met ℓmax) and its sequential test replayed at its share of α (None: it is; the
    store is not at hand: the certificate is then not printed as certified by a command that judges the plan)."""
    import math
    from pathlib import Path

    try:
        ev = c.evidence
        row = c.candidates[c.returned]
        store, runs, met, prior = Path(c.store), c.runs, c.hits, str(ev["prior"])
        K, a = int(row["epochs"]), float(row["alpha"])
        # the runs its seeds were read from, the longest first; its seeds are consecutive from the first it counted
        rids, first = [str(x) for x in row["read_from"]], int(row["first_counted"])
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return f"{where}: info.certificate: not a certified search's record (kind search): make the plan again"
    if not store.is_file():
        return None
    with Store(store, readonly=True) as st:
        read = [(st.losses(x), st.diverged(x)) for x in rids]
        bound = st.runs("search-manifest")
        later = sorted((r["spec"] for r in st.runs("search-proposal")), key=lambda r: r["proposal"])
    if bound:
        m = bound[0]["spec"]
        why = _not_as_bound(plan, c, {**m, "candidates": list(m.get("candidates") or []) + later})
        if why:
            return (f"{where}: info.certificate: {why}, not what its search store {store} bound before its first "
                    "run; a plan's certificate is recomputed, never taken as written: run the search again "
                    "(`depl plan --certify`)")
    test = Sequential(c.omega, a, prior)
    for seed in range(first, first + runs):
        if test.decided:
            break
        # the first run holding the seed to epoch K or that saw it diverge (depl.train.loops.search.source)
        losses, gone = next(((ls, g) for ls, g in read if seed in g or len(ls.get(seed) or []) >= K), read[0])
        row_losses = losses.get(seed) or []
        x = math.inf if (seed in gone and gone[seed] <= K) or len(row_losses) < K else float(row_losses[K - 1])
        test.add(x <= plan.loss_target)
    bounds = (c.lower_bound, float(row.get("lower_bound", -1.0)))
    if (test.runs, test.hits, test.state.verdict) != (runs, met, Outcome.CERTIFIED) or not c.certified or \
            row.get("verdict") != Outcome.CERTIFIED.value or bounds[0] is None or \
            any(abs(x - test.state.lower) > 1e-9 for x in bounds):
        return (f"{where}: info.certificate: its search store {store} gives {test.hits} of {test.runs} runs meeting "
                f"ℓmax ({test.state.verdict}) for the plan returned, not what the file says; a plan's certificate is "
                "recomputed, never taken as written: run the search again (`depl plan --certify`)")
    return None


def _not_as_bound(plan: "Plan", cert: Certificate, m: dict) -> str | None:
    """What of a search's certificate differs from its store's manifest (depl.train.loops.search.manifest): α, ω,
    ℓmax, the e-process, the first seed, a candidate's schedule, cost or share of α, or the plan's own schedule and
    cost from the candidate returned; None where nothing does."""
    def same(x, y) -> bool:
        try:
            return abs(float(x) - float(y)) <= 1e-12 * max(1.0, abs(float(y)))
        except (TypeError, ValueError):
            return False

    c = {**cert.evidence, "alpha": cert.alpha, "omega": cert.omega, "loss_target": cert.loss_target}
    for key, words in (("alpha", "α"), ("omega", "ω"), ("loss_target", "ℓmax"), ("first_seed", "the first seed")):
        if not same(c.get(key), m.get(key)):
            return f"{words} {c.get(key)!r} where the search's was {m.get(key)!r}"
    if c.get("prior") != m.get("prior") or c.get("allocation") != m.get("allocation"):
        return f"the e-process or allocation {c.get('prior')!r}/{c.get('allocation')!r}"
    rows, bound = cert.candidates, m.get("candidates") or []
    if len(rows) != len(bound) or not (cert.seeds[0][0] if cert.seeds else None) == m.get("first_seed"):
        return "another list of candidates or seeds"
    if sum(float(b["share"]) for b in bound) > 1.0 + 1e-9:
        return "shares of α summing to more than 1"
    for r, b in zip(rows, bound):
        if not (same(r.get("weight"), b["share"]) and same(r.get("alpha"), b["share"] * m["alpha"])
                and same(r.get("cost"), b["cost"]) and r.get("epochs") == b["epochs"]
                and r.get("schedule") == b["schedule"]):
            return f"candidate [{b['index']}] with another schedule, cost or share of α"
    b = bound[cert.returned]
    if not same(plan.cost, b["cost"]) or len(plan.epochs) != b["epochs"]:
        return f"a plan other than candidate [{b['index']}] it returned"
    return None


def check_certificate(plan: "Plan", where: str, scenario: "Scenario | None" = None) -> None:
    """Raise ValueError where the plan's recorded certificate is not what its calibration runs give."""
    why = certificate_problem(plan, where, scenario)
    if why:
        raise ValueError(why)
