"""The parameter tables of the paper's increments law (eq. 8), which every scenario has: each version's expected
progress g_m(k) and noise X_m (`ModelVersion.progress`, `.noise`), each switch's jump (`Switch.jump`).  Every
law's fit writes them (depl.fit.laws), so they are fields of the system model rather than a registered table."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from .base import Strict


def expected_progress(k, A: float, B: float, phi: float = 1.0):
    """g_m(k) = A·φ(S)/√(k + B): the expected progress of epoch k (1-based, counted from the start of the run,
    whatever version trained the epochs before).  The one definition: the law, its fit and its cumulants use it."""
    return A * phi / np.sqrt(np.asarray(k, dtype=float) + B)


class Progress(Strict):
    """g_m(k) = A·φ(S)/√(k + B), k the global epoch index (`expected_progress`)."""

    A: float = Field(gt=0.0)
    B: float = Field(ge=0.0)
