"""The fitting sides `depl fit` runs: every registered law that has one (depl.laws), the built-ins registered by
their own modules when imported (depl.laws.provide) — imported here, so that depl.fit.laws, which they build on,
does not import them back."""

from __future__ import annotations

from ..laws import get_law, law_names
from . import increments, level  # noqa: F401  (each registers its fitting side when imported)
from .laws import LawFitter


def fitters() -> dict[str, LawFitter]:
    """The registered laws that `depl fit` fits, by name, in registration order."""
    out = {}
    for n in law_names():
        f = get_law(n).fitter
        if f is not None:
            out[n] = f
    return out
