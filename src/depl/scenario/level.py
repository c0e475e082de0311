"""The parameter tables of the measured-level laws (depl.loss.level: `level` and `level-memory`): a version's
median curve and log-normal noise, a switch's jump and recovery; both laws read the table `level`."""

from __future__ import annotations

from pydantic import Field, field_validator

from .base import Strict
from .parameters import register_parameters


# The largest log-sd of the level law: exp(σ·Z) with σ = 50 is NaN in float
# arithmetic; σ = 10 already spreads the loss over e^±20.
LOG_SD_MAX = 10.0


class LevelLaw(Strict):
    """The measured-level loss law of one version (depl.loss.level).

    ℓ(k) = μ(φ·k)·exp(σ(k)·Z): a median curve from ℓ(0) down to a floor
    times log-normal noise, σ(k) = sigma0 + sigma1·ln(ℓ(0)/μ) + sigma2·|d ln μ/d ln t|, a share
    `seed_share` of the log-variance shared by all epochs of a seed.
    """

    curve: str = Field(description="power: μ = f + (ℓ0−f)/(1+(t/scale)^shape); exp: μ = f + (ℓ0−f)·exp(−(t/scale)^shape)")
    floor: float = Field(ge=0.0, description="the floor at φ = 1; at data factor φ it is floor·φ^(−floor_exponent)")
    # Upper bounds: beyond them exp()/powers of the law overflow (shape 100 exhausts memory,
    # a log-sd of 50 gives NaN); a fitted law is far inside them (shape < 5, sigma < 1).
    floor_exponent: float = Field(default=0.0, ge=0.0, le=10.0)
    scale: float = Field(gt=0.0, description="epochs (at φ = 1)")
    shape: float = Field(gt=0.0, le=20.0)
    sigma0: float = Field(default=0.0, ge=0.0, le=LOG_SD_MAX)
    sigma1: float = Field(default=0.0, ge=0.0, le=LOG_SD_MAX)
    sigma2: float = Field(default=0.0, ge=0.0, le=LOG_SD_MAX, description="log-sd per unit of the curve's elasticity |d ln μ/d ln t| (seeds leaving a plateau at different times)")
    seed_share: float = Field(default=0.0, ge=0.0, le=1.0)

    @field_validator("curve")
    @classmethod
    def _curve(cls, v: str) -> str:
        if v not in ("power", "exp"):
            raise ValueError(f"curve must be 'power' or 'exp', got {v!r}")
        return v


class LevelSwitch(Strict):
    """A switch under the level law: the median jumps to (1+offset)× the new
    version's curve and recovers geometrically (factor `recovery` per epoch);
    the jump adds log-variance `sigma`², decaying alike."""

    offset: float = Field(gt=-1.0)
    recovery: float = Field(default=0.0, ge=0.0, le=1.0)
    sigma: float = Field(default=0.0, ge=0.0, le=LOG_SD_MAX)


for _law in ("level", "level-memory"):
    register_parameters(_law, table="level", version=LevelLaw, switch=LevelSwitch,
                        version_about="the level law (used when loss_model = 'level')",
                        switch_about="the switch under the level law")
