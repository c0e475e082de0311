"""Each built-in's shipped [calibration] is what `depl calibrate` makes today from its committed calibration runs.

The four built-ins that ship a calibration were calibrated by scripts/calibrate_*.sh on runs kept in
docs/certificate-store/calibration/; recalibrating each from its store (no training) must write the shipped file
byte for byte, so a shipped table can never predate the rule that scores its runs (each run counted once)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from depl.workflows.fitting import calibrate

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = {"digits-small": "digits", "mnist1d-small": "mnist1d-2", "mnist1d-noniid": "noniid", "fashion-small": "fashion"}


@pytest.mark.parametrize("name,store", SHIPPED.items())
def test_a_shipped_calibration_is_its_committed_runs_calibrated_today(name, store, tmp_path):
    runs = shutil.copy(ROOT / "docs" / "certificate-store" / "calibration" / store / "runs.sqlite", tmp_path)
    shipped = ROOT / "src" / "depl" / "scenarios" / f"{name}.toml"
    calibrate(str(shipped), str(runs), tmp_path / f"{name}.toml", omega=0.9)
    assert (tmp_path / f"{name}.toml").read_text(encoding="utf-8") == shipped.read_text(encoding="utf-8")


def test_every_built_in_that_ships_a_calibration_is_checked_above():
    import tomllib

    from depl.scenario import builtin_names

    calibrated = {n for n in builtin_names()
                  if "calibration" in tomllib.loads((ROOT / "src" / "depl" / "scenarios" / f"{n}.toml").read_text())}
    assert calibrated == set(SHIPPED)
