"""Every benchmark script still runs, at its smallest size.

The benchmarks are how speed claims in README/docs are checked; one that
breaks silently (a changed API, a stricter plan check) would leave those
claims unmeasurable.  The sizes here are far too small to mean anything as
measurements: these tests check that each script runs end to end and prints
its ratios, not what the ratios are.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# bench_certify.py runs in the tests of the doc's tables below (its default run, --priors, --replay)
CASES = {
    "bench_adaptive.py": ["--seeds", "2", "--target", "2.2"],
    "bench_seeds.py": ["--seeds", "3", "--samples", "128", "--loop-seeds", "1", "--workers", "1"],
    "bench_train.py": ["--epochs", "1", "--repeats", "1"],
    "bench_simulate.py": ["--quick"],
    "bench_sum.py": ["--epochs", "16", "--repeat", "1"],
    # --before-src: the side-by-side process timing, here against this same tree
    "bench_planner.py": ["--quick", "--skip-scaling", "--repeat", "1", "--before-src", str(ROOT / "src")],
    "bench_datasets.py": ["--n", "1", "--time-limit", "5", "--eta", "20"],
    "bench_optimal.py": ["--n", "1", "--time-limit", "5"],
    "bench_search.py": ["--quick", "--max-runs", "100"],
    "bench_search_price.py": ["--quick", "--reps", "1"],
    "bench_selection.py": ["--quick", "--reps", "100"],
    # digits-small: no MNIST-1D pool to generate (13 s of CPU), so --cold-data: the cells load what they train on
    "bench_profile.py": ["--scenario", "digits-small", "--seeds", "1,2", "--epochs", "1", "--rounds", "1",
                         "--cold-data"],
    "ab_stack_step.py": ["--base", "HEAD", "--seeds", "2", "--repeats", "1"],   # this tree's kernels against HEAD's
}


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(CASES))
def test_benchmark_runs(script, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "FLWR_TELEMETRY_ENABLED": "0", "MPLBACKEND": "Agg"}
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *CASES[script]], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    assert r.stdout.strip(), "a benchmark prints its table"


def test_the_certificate_doc_shows_the_table_bench_certify_prints():
    """docs/certificate.md's runs table is the script's output on the committed coverage table, line for line."""
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_certify.py")], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert r.returncode == 0, r.stderr[-2000:]
    doc = (ROOT / "docs" / "certificate.md").read_text(encoding="utf-8")
    rows = [line for line in r.stdout.splitlines() if line.startswith("| ")]
    assert len(rows) >= 7 and all(line in doc for line in rows)   # the header and a row per cell


def test_the_certificate_doc_shows_the_priors_table_bench_certify_prints():
    """docs/certificate.md's trade-off between the e-processes is the script's `--priors` output, line for line
    (the mixtures exact, aGRAPA's Monte Carlo at fixed seeds), and its replay of the committed certificates."""
    doc = (ROOT / "docs" / "certificate.md").read_text(encoding="utf-8")
    for args, least in ((["--priors"], 8), (["--replay"], 8)):
        r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_certify.py"), *args], capture_output=True,
                           text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
        assert r.returncode == 0, r.stderr[-2000:]
        rows = [line for line in r.stdout.splitlines() if line.startswith("| ")]
        assert len(rows) >= least and all(line in doc for line in rows)
