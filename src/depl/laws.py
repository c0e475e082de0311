"""The registry of loss laws: `loss_model = NAME` in a scenario → the law's class, and its fitting side.

A law is a `depl.loss.LossModel` subclass built from a Scenario; its fitting
side (optional) is an object `depl fit` runs on the profiles (depl.fit.laws
describes what it must answer).  Adding a law is one module and one line:

    register_law("mine", MyModel, fit=MY_FITTER, tables=("level",))

`tables` names the optional per-version and per-switch tables of the
scenario the law reads (`models[i].level`, `switches[i].level`); a scenario
that names the law and lacks one is refused when it is read.

A calibrator wraps a law as fitted and recalibrates its levels on held-out
runs (`[calibration] method = NAME`); it is registered beside the laws:

    register_calibrator("mine", MyCalibratedModel)

and built as `MyCalibratedModel(law, scores, method, epoch_scores,
experiments)` (depl.loss.calibrated.CalibratedModel is the built-in one).

The built-in laws are registered here by dotted path, resolved on first use:
depl.scenario checks names against this registry, and sits below the laws
(depl.loss imports the scenario), so it must know the names without
importing them.  Kept in a module of its own at the bottom of the house,
beside depl.state.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

DEFAULT = "increments"
"""The law of a scenario that names none: the paper's eq. 8."""


@dataclass
class Law:
    name: str
    model: Any            # the LossModel class, or "module:attribute" until first use
    fit: Any = None       # the fitting side (an object, or "module:attribute"); None: `depl fit` does not fit it
    tables: tuple[str, ...] = ()
    about: str = ""

    def _resolve(self, attr: str):
        v = getattr(self, attr)
        if isinstance(v, str):
            module, _, name = v.partition(":")
            v = getattr(importlib.import_module(module), name)
            setattr(self, attr, v)
        return v

    @property
    def model_class(self):
        return self._resolve("model")

    @property
    def fitter(self):
        return self._resolve("fit") if self.fit is not None else None


_LAWS: dict[str, Law] = {}


def register_law(name: str, model, *, fit=None, tables: tuple[str, ...] = (), about: str = "") -> Law:
    """Make `loss_model = name` mean `model` (replacing an earlier law of that name)."""
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"a law's name is a plain word, got {name!r}")
    _LAWS[name] = law = Law(name, model, fit, tuple(tables), about)
    return law


def unregister_law(name: str) -> None:
    _LAWS.pop(name, None)


def law_names() -> list[str]:
    """Registered law names, in registration order (the built-ins first)."""
    return list(_LAWS)


def get_law(name: str | None) -> Law:
    """The law called `name` (None: the default); KeyError naming the known ones otherwise."""
    name = name or DEFAULT
    try:
        return _LAWS[name]
    except KeyError:
        raise KeyError(f"no loss law {name!r} (known: {', '.join(_LAWS)})") from None


register_law("increments", "depl.loss.increments:IncrementsModel", fit="depl.fit.increments:FITTER",
             about="the paper's model (eq. 8)")
register_law("level", "depl.loss.level:LevelModel", fit="depl.fit.level:FITTER", tables=("level",),
             about="the measured level: a median curve to a floor times log-normal noise")
register_law("level-memory", "depl.loss.level:LevelMemoryModel", fit="depl.fit.level:MEMORY_FITTER", tables=("level",),
             about="the level law with memory: after a switch, the new version resumes its curve at the level reached")


# --------------------------------------------------------------------------- #
# Calibrators: `[calibration] method = NAME` → the class that wraps a law
# --------------------------------------------------------------------------- #

_CALIBRATORS: dict[str, Law] = {}


def register_calibrator(name: str, model, *, about: str = "") -> Law:
    """Make `[calibration] method = name` mean `model` (a class built as model(law, scores, method,
    epoch_scores, experiments); replacing an earlier calibrator of that name)."""
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"a calibrator's name is a plain word, got {name!r}")
    _CALIBRATORS[name] = cal = Law(name, model, about=about)
    return cal


def unregister_calibrator(name: str) -> None:
    _CALIBRATORS.pop(name, None)


def calibrator_names() -> list[str]:
    """Registered calibrator names, the built-in first."""
    return list(_CALIBRATORS)


def get_calibrator(name: str) -> Law:
    """The calibrator called `name`; KeyError naming the known ones otherwise."""
    try:
        return _CALIBRATORS[name]
    except KeyError:
        raise KeyError(f"no calibration method {name!r} (known: {', '.join(_CALIBRATORS)})") from None


register_calibrator("conformal-pit", "depl.loss.calibrated:CalibratedModel",
                    about="split conformal on the PIT scores of held-out runs")
