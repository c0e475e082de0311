"""Your own training logs predict: `depl fit LOGS.csv` then `depl predict` gives the law's q-quantile, labelled as
an estimate with the true reason no certificate holds, and held-out runs of the same experiments lie above it
about as often as 1 − q says."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from depl.store import Store

pytestmark = pytest.mark.slow  # fits the laws on real runs' logs

STORE = Path(__file__).resolve().parents[2] / "docs/certificate-store/calibration/mnist1d/runs.sqlite"
FIT_SEEDS = 20


def _logs(path: Path) -> dict[tuple[str, int], list[float]]:
    """Real MNIST-1D logs (3 widths × 20 seeds × 20 epochs) written as a user's CSV; the held-out runs returned."""
    st = Store(STORE, readonly=True)
    held: dict[tuple[str, int], list[float]] = {}
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "seed", "epoch", "model", "test_loss"])
        for r in st.runs():
            version = r["spec"]["experiment"]["version"]
            losses = st.losses(r["run_id"])
            seeds = sorted(losses)
            for s in seeds[:FIT_SEEDS]:
                w.writerow([version, s, 0, version, math.log(10)])  # ℓ(0) of an untrained 10-class network
                for k, x in enumerate(losses[s], 1):
                    w.writerow([version, s, k, version, x])
            for s in seeds[FIT_SEEDS:]:
                held[(version, s)] = losses[s]
    return held


def test_fitted_logs_predict_the_laws_quantile_labelled(tmp_path, depl_cli):
    held = _logs(tmp_path / "logs.csv")
    r = depl_cli("fit", "logs.csv", "--target-loss", "1.5", "--out", "fitted.toml", "--bootstrap", "0", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().splitlines()[-1] == "next: depl plan fitted.toml --out plan.json"  # logs: nothing to train
    above = total = 0
    for version, K in (("full", 20), ("pruned-0.5", 20), ("pruned-0.75", 20), ("pruned-0.5", 12), ("full", 14)):
        r = depl_cli("predict", "fitted.toml", f"{version}:{K}", "--quantile", "0.9", "--json", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        p = json.loads(r.stdout)
        assert p["quantile_range"] == "above" and p["loss_quantile"] is None  # nothing certified by 5 runs …
        assert "takes at least 29" in p["notes"][0]                           # … and the true reason why
        assert p["estimate"] is not None and "marginal" in p["estimate_by"]    # the law's estimate, labelled
        x = np.array([losses[K - 1] for (v, _), losses in held.items() if v == version])
        above, total = above + int(np.sum(x > p["estimate"])), total + x.size
        text = depl_cli("predict", "fitted.toml", f"{version}:{K}", "--quantile", "0.9", cwd=tmp_path).stdout
        assert "the law's estimate" in text and "takes at least 29" in " ".join(text.split())
    assert above / total <= 0.15, f"{above} of {total} held-out runs above the law's 0.9-quantile"
