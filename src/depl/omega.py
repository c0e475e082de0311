"""ω: the probability with which a plan meets its target, one type with one range and one message.

A scenario's [target] quantile, `depl fit --omega`, `depl calibrate --omega`, `depl coverage --omegas`, the
certificate's sequential test and the measured coverage all take ω from here.  The range is where the loss
laws' numeric distributions certify a quantile: a quantile further in a tail has an unbounded bracket, and a
plan holding ±inf cannot be written.  At the bottom of the layers (pydantic only), so that depl.certificate
checks the ω it is given with the rule the scenario reads it with.

>>> check_omega(0.9, "--omega")
0.9
>>> omega_problem(1.5, "--omegas")
'--omegas 1.5: must be in [1e-6, 1 - 1e-6] (ω, as [target] quantile)'
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

OMEGA_MIN = 1e-6
OMEGA_MAX = 1 - 1e-6
OMEGA_RULE = "in [1e-6, 1 - 1e-6] (ω, as [target] quantile)"
"""What a message says ω must be."""

Omega = Annotated[float, Field(ge=OMEGA_MIN, le=OMEGA_MAX, description="ω")]
"""ω in a pydantic model: refused outside [OMEGA_MIN, OMEGA_MAX] (and NaN) with pydantic's own message."""


def omega_problem(value: float, where: str = "ω =") -> str | None:
    """Why `value` (given as `where`, e.g. a flag) is not a usable ω; None when it is.  NaN is refused too
    (every comparison with it is false)."""
    if OMEGA_MIN <= value <= OMEGA_MAX:
        return None
    return f"{where} {value}: must be {OMEGA_RULE}"


def check_omega(value: float, where: str = "ω =") -> float:
    """`value` when it is a usable ω; else ValueError with `omega_problem`'s one line."""
    why = omega_problem(value, where)
    if why:
        raise ValueError(why)
    return value
