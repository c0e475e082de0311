"""Strict JSON for `--json` outputs: what a script's parser accepts.

Python's json writes NaN and Infinity, which are not JSON; they become null.
numpy scalars and arrays become numbers and lists.

Where a number may be infinite, null is that infinity, and the output says
which: a loss band (`depl.band.Band.to_json`: `simulate`'s band, `validate`'s
planned and measured bands) is +∞ at the epochs its `infinite` lists — a
calibrated law's runs beyond every loss it allows — and never NaN; `predict`'s
quantile is −∞ or +∞ as its `quantile_range` says ("below"/"above" the law's
range, with `notes` in words).  A band with no runs at all (every seed
diverged) is null throughout with nothing in `infinite`.
"""

from __future__ import annotations

import json
import math
from typing import Any


def clean(x: Any) -> Any:
    """`x` as strict JSON values: numpy to Python, a non-finite float to None (JSON has no NaN/Infinity)."""
    if isinstance(x, dict):
        return {str(k): clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    if hasattr(x, "tolist"):          # numpy arrays and scalars
        return clean(x.tolist())
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def dumps(obj: Any) -> str:
    return json.dumps(clean(obj), allow_nan=False, ensure_ascii=False)


# numbers depl computes and records (a law's P(meets ℓmax), a cost, a share of α, a lower bound) differ between
# machines in their last digits (numpy's vectorised loops differ by CPU): two records equal to this are the same
RTOL = 1e-9


def alike(a, b) -> bool:
    """Whether two records (JSON values) are the same: their numbers equal to RTOL (or within 1e-12 of each other),
    everything else exactly."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(alike(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(alike(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b)):
            return False
        return math.isclose(a, b, rel_tol=RTOL, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))
    return a == b and type(a) is type(b)
