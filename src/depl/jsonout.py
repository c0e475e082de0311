"""Strict JSON for `--json` outputs: what a script's parser accepts.

Python's json writes NaN and Infinity, which are not JSON; they become null.
numpy scalars and arrays become numbers and lists.
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
