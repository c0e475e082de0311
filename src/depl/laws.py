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

The built-in laws are declared here by name (with their tables), so that
depl.scenario, which sits below the laws (depl.loss imports the scenario),
checks names without importing them; their classes are registered by the
packages that define them, at import (`provide`: depl.loss registers the
models and the calibrator, depl.fit's law modules their fitting sides), so every edge is an
import the layers contract sees.  Kept in a module of its own at the bottom
of the house, beside depl.state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFAULT = "increments"
"""The law of a scenario that names none: the paper's eq. 8."""


@dataclass
class Law:
    name: str
    model: Any = None     # the LossModel class (None: declared, its package not imported yet)
    fit: Any = None       # the fitting side (an object); None: `depl fit` does not fit it
    tables: tuple[str, ...] = ()
    about: str = ""

    @property
    def model_class(self):
        if self.model is None:
            raise LookupError(f"the law {self.name!r} is declared but its class is not registered "
                              "(import depl.loss, which registers the built-in ones)")
        return self.model

    @property
    def fitter(self):
        return self.fit


_LAWS: dict[str, Law] = {}


def register_law(name: str, model=None, *, fit=None, tables: tuple[str, ...] = (), about: str = "") -> Law:
    """Make `loss_model = name` mean `model` (replacing an earlier law of that name); `model=None` declares the
    name and its tables, the class registered later by `provide`."""
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


def provide(name: str, *, model=None, fit=None, calibrator=None) -> None:
    """Register the class (`model`), the fitting side (`fit`) of the declared law `name`, or the class of the
    declared calibrator `name` (`calibrator`): called by the package that defines it, when it is imported."""
    entry = (_CALIBRATORS if calibrator is not None else _LAWS).get(name)
    if entry is None:
        raise KeyError(f"provide: nothing called {name!r} is declared")
    if model is not None:
        entry.model = model
    if fit is not None:
        entry.fit = fit
    if calibrator is not None:
        entry.model = calibrator


register_law("increments", about="the paper's model (eq. 8)")
register_law("level", tables=("level",),
             about="the measured level: a median curve to a floor times log-normal noise")
register_law("level-memory", tables=("level",),
             about="the level law with memory: after a switch, the new version resumes its curve at the level reached")


# --------------------------------------------------------------------------- #
# Calibrators: `[calibration] method = NAME` → the class that wraps a law
# --------------------------------------------------------------------------- #

_CALIBRATORS: dict[str, Law] = {}


def register_calibrator(name: str, model=None, *, about: str = "") -> Law:
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


register_calibrator("conformal-pit", about="split conformal on the PIT scores of held-out runs")
