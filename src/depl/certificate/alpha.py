"""α: the chance a certificate is wrong, one type with one range, one default and one message.

A certificate says "with probability ≥ 1 − α over the runs it was built from, this plan meets ℓmax with
probability ≥ ω".  `[target] alpha`, `depl plan --alpha`, `depl certify --alpha`, the closed loop's bound and
every statistic of `depl.certificate` take α from here.

The range is (0, 0.5]: α = 0 certifies nothing (no finite number of runs reaches it) and α above one half is a
statement less likely right than wrong.

>>> check_alpha(0.05, "--alpha")
0.05
>>> alpha_problem(0.7, "--alpha")
'--alpha 0.7: must be in (0, 0.5] (α, the chance the certificate is wrong; 0.05 by default)'
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

ALPHA_MAX = 0.5
DEFAULT_ALPHA = 0.05
"""The α of every certificate that names none."""

ALPHA_RULE = f"in (0, {ALPHA_MAX:g}] (α, the chance the certificate is wrong; {DEFAULT_ALPHA:g} by default)"
"""What a message says α must be."""

Alpha = Annotated[float, Field(gt=0.0, le=ALPHA_MAX, description="α: the chance the certificate is wrong")]
"""α in a pydantic model: refused outside (0, ALPHA_MAX] (and NaN) with pydantic's own message."""


def alpha_problem(value: float, where: str = "α =") -> str | None:
    """Why `value` (given as `where`, e.g. a flag) is not a usable α; None when it is (NaN is refused)."""
    if 0.0 < value <= ALPHA_MAX:
        return None
    return f"{where} {value:g}: must be {ALPHA_RULE}"


def alpha_or_default(value: float | None) -> float:
    """The α a verdict is judged at: `value` (a plan's or scenario's [target] alpha, or a command's --alpha), the
    default where it names none (a plan certified by the marginal rank records α = None).

    >>> alpha_or_default(None), alpha_or_default(0.01)
    (0.05, 0.01)
    """
    return DEFAULT_ALPHA if value is None else float(value)


def confidence_words(alpha: float) -> str:
    """1 − α as a percentage, as every command prints a one-sided bound's confidence.

    >>> confidence_words(0.05), confidence_words(0.001)
    ('95 %', '99.9 %')
    """
    return f"{100 * (1 - alpha):.6g} %"


def check_alpha(value: float, where: str = "α =") -> float:
    """`value` when it is a usable α; else ValueError with `alpha_problem`'s one line."""
    why = alpha_problem(value, where)
    if why:
        raise ValueError(why)
    return float(value)
