"""scripts/real_comparison.py, DepL against its baselines on real runs: the scenarios it plans with load (the law as
fitted; the one-model reference with its first version only), and `--stored` rewrites the committed table from the
committed files — the same table docs/results/real-fashion.md shows — without training anything."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

from depl.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "real_comparison.py"
RESULTS = ROOT / "docs" / "results" / "real-fashion"


def _script():
    spec = importlib.util.spec_from_file_location("real_comparison", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_methods_plan_with_the_law_as_fitted_and_the_reference_has_one_version(tmp_path):
    whole, one = _script().scenarios("fashion-small", tmp_path)
    s, o = load_scenario(str(whole)), load_scenario(str(one))
    assert s.calibration is None and o.calibration is None
    assert [m.name for m in s.models] == [m.name for m in load_scenario("fashion-small").models]
    assert [m.name for m in o.models] == ["full"] and not o.switches
    assert (s.target, s.clusters, s.datasets) == (o.target, o.clusters, o.datasets)


def test_the_stored_table_is_rewritten_from_the_committed_files_without_training(tmp_path):
    out = tmp_path / "real"
    # only the JSON the table is made of: no store travels, so nothing could resume or train
    for f in [*RESULTS.rglob("*.json"), RESULTS / "scenario.toml"]:
        if f.name == "comparison.json":
            continue
        (out / f.relative_to(RESULTS)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, out / f.relative_to(RESULTS))
    done = subprocess.run([sys.executable, str(SCRIPT), "fashion-small", "--out", str(out), "--stored"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    table = (out / "comparison.md").read_text()
    assert table == (RESULTS / "comparison.md").read_text()
    assert not list(out.rglob("*.sqlite"))
    page = (ROOT / "docs" / "results" / "real-fashion.md").read_text()
    for line in table.splitlines():
        if line.startswith("| "):
            assert line in page, f"docs/results/real-fashion.md lacks the table's row {line!r}"
