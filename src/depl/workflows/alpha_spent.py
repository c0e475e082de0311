"""The α a calibration has spent: every certificate `depl plan` drew from the same calibration runs, recorded.

A calibrated law certifies a plan with confidence 1 − α from the runs of its [calibration] table
(depl.loss.calibrated.CalibratedModel.certified_schedules).  Planning again on the same runs — another ℓmax, ω or
α — tests them again: each certificate holds with its own 1 − α, but the chance that *some* of them is wrong is
only bounded by the sum of their α (Bonferroni).  So `depl plan` appends each certificate it issues to a ledger
of the calibration it used, and warns when that calibration has certified other plans before, with the total.
Nothing is refused: the ledger says what was spent.

The ledger is a JSON file (format ``depl.alpha/1``): beside a scenario file, ``NAME.alpha.json`` (for
``NAME.toml``); for a built-in scenario (its file is the package's), ``$DEPL_ALPHA_LEDGER/NAME.alpha.json``,
else ``$XDG_DATA_HOME/depl/alpha/``, else ``~/.local/share/depl/alpha/``.  Each entry: the calibration table's
hash (`CalibrationTable.digest`; a recalibrated table starts afresh), ℓmax, ω, α, the plan's hash, when.  A
certificate issued again (same calibration, ℓmax, ω, α and plan) is the same certificate: it spends nothing new.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = "depl.alpha/1"


def ledger_path(scenario: str | None, name: str) -> Path:
    """Where the ledger of a scenario's calibration is kept: beside its file, or in the user's data folder."""
    if scenario is not None and scenario.endswith(".toml") and Path(scenario).is_file():
        p = Path(scenario)
        return p.with_name(f"{p.stem}.alpha.json")
    base = os.environ.get("DEPL_ALPHA_LEDGER")
    if not base:
        data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        base = str(Path(data) / "depl" / "alpha")
    return Path(base) / f"{name}.alpha.json"


def plan_hash(plan) -> str:
    """What a plan trains (every epoch's version and cluster, its datasets): the plan a certificate is of."""
    what = {"epochs": [[e.model, e.cluster] for e in plan.epochs], "datasets": sorted(plan.datasets)}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Spent:
    """The certificates of one calibration: `before` (other certificates, before this one), `total` (their α and
    this one's), where the ledger is, and whether it could be written."""

    path: Path
    before: int
    total: float
    written: bool
    why: str = ""

    def warning(self, calibration: str) -> str | None:
        """The warning `depl plan` prints; None when this calibration certified nothing before (and was recorded)."""
        if not self.written:
            return (f"the α spent on {calibration} could not be recorded at {self.path} ({self.why}): a later plan "
                    "on the same calibration runs will not know of this certificate")
        if self.before == 0:
            return None
        return (f"{calibration} has certified {self.before} other plan{'s' if self.before > 1 else ''} before "
                f"(another ℓmax, ω, α or plan; {self.path}): α spent in all {self.total:.4g} — the chance that some "
                f"of these {self.before + 1} certificates is wrong is ≤ {min(self.total, 1.0):.4g}, not each one's α; "
                "fresh calibration runs (`depl profile --first-seed N`, `depl calibrate`) start a new account")


def _read(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError):
        return []   # an unreadable ledger is replaced by this certificate's (the warning below would not know)
    entries = data.get("entries") if isinstance(data, dict) else None
    return [e for e in entries or [] if isinstance(e, dict)]


def record(path: Path, entry: dict[str, Any]) -> Spent:
    """Append `entry` (calibration, loss, omega, alpha, plan) to the ledger at `path` unless the same certificate
    is there; what this calibration has spent, this certificate included."""
    entries = _read(path)
    key = ("calibration", "loss", "omega", "alpha", "plan")
    same = [e for e in entries if e.get("calibration") == entry["calibration"]]
    known = any(all(e.get(k) == entry[k] for k in key) for e in same)
    others = [e for e in same if not all(e.get(k) == entry[k] for k in key)]
    total = sum(float(e.get("alpha") or 0.0) for e in others) + float(entry["alpha"])
    if known:
        return Spent(path, len(others), total, True)
    entries.append({**entry, "at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")})
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"format": FORMAT, "entries": entries}, indent=1) + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError as e:
        return Spent(path, len(others), total, False, e.strerror or str(e))
    return Spent(path, len(others), total, True)
