"""The fitting side of a loss law, as `depl fit` sees it (registered with the law in depl.laws).

`depl fit` runs every registered law that has a fitting side, in
registration order, on the same split of the profiles: each is fitted on the
fitting seeds, scored on the held-out ones through the law's own density
(depl.fit.compare), refitted on every seed, and written into the scenario.
A scenario's sections are shared: the first law (the paper's increments)
writes the versions and switches every scenario needs (progress, noise,
jump); the others add their own tables to them; the chosen law also writes
the data law.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np

from .runs import Profile


V = TypeVar("V")
S = TypeVar("S")


@dataclass
class LawFit(Generic[V, S]):
    """What a law's fit found: ℓ(0), each version's fit, each switch's, and the data law (s0, reference samples;
    s0 None: no data law measured)."""

    initial_loss: float
    versions: dict[str, V] = field(default_factory=dict)
    switches: dict[tuple[str, str], S] = field(default_factory=dict)
    s0: float | None = None
    reference_samples: float | None = None


class LawFitter(ABC):
    name: str
    fields: tuple[str, ...] = ()
    """The keys of a version's table this law writes (a base scenario's own values of them are dropped)."""

    @abstractmethod
    def fit(self, fit: Profile, held: Profile, l0: float, *, bootstrap: int, rng: np.random.Generator,
            earlier: dict | None = None) -> Any:
        """The law fitted on the fitting seeds (`held`: to score alternatives inside the fit, if it has some;
        `earlier`: the laws registered before it, already fitted, to build on)."""

    @abstractmethod
    def refit(self, prof: Profile, first: Any, l0: float, earlier: dict | None = None) -> Any:
        """The law refitted on every seed, keeping what `first` chose (families, data law)."""

    @abstractmethod
    def write(self, data: dict, fitted: Any, chosen: bool) -> None:
        """Put the law's sections into the scenario dict `data` (and the data law if it is the `chosen` one)."""

    def describe(self, fitted: Any) -> list[str]:
        """Lines of the fit report."""
        return []
