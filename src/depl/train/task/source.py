"""A data source's arrays, and the errors meant for the user below the engine: data that cannot be used
(DataError), a plan or scenario that cannot be trained (JobError).

Below both the built-in sources (data.py) and a user's own (custom.py):
data.py dispatches `source = "MODULE:FUNCTION"` to custom.py, and custom.py
returns a Source, so neither imports the other for these.  Here too: what a
loss (depl.train.task.losses) needs of a source's labels (`fit_targets`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


class DataError(ValueError):
    """Data that cannot be used; the message is meant for the user."""


class JobError(ValueError):
    """A plan or scenario that cannot be trained for real; the message is meant for the user."""


@dataclass(frozen=True)
class Source:
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    n_classes: int = 10
    # your factory's inputs and labels as it gave them, before they became float32 and int64 (None: a built-in
    # source); a run's own draw of your data is checked against them (depl.train.task.data.checked_draw)
    given_dtypes: tuple[str, str] | None = field(default=None, compare=False)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


CLASSES, VALUES, GIVEN = "classes", "values", "given"  # what a loss trains against (DataSpec.targets)
# what each built-in loss of depl.train.task.losses trains against; your own loss (MODULE:FUNCTION): the labels as given
_KIND = {"cross_entropy": CLASSES, "mse": VALUES, "l1": VALUES, "bce_with_logits": VALUES}


def targets_of(loss: str) -> str:
    """What the labels of the data must be for `loss`: class indices, real values, or as given (your own loss)."""
    return _KIND.get(loss, GIVEN)


def fit_targets(y: np.ndarray, targets: str, which: str, loss: str = "") -> np.ndarray:
    """`y` (a source's train or test labels) as the loss reads them, or DataError saying why they do not fit."""
    name = loss or {CLASSES: "cross_entropy", VALUES: "mse"}.get(targets, "your own")
    y = np.asarray(y)
    if y.dtype == np.bool_:
        y = y.astype(np.int64)
    if y.dtype.kind not in "iuf":
        raise DataError(f"its {which} labels are of type {y.dtype}; expected numbers")
    if y.ndim not in (1, 2) or (y.ndim == 2 and y.shape[1] == 0):
        raise DataError(f"its {which} labels have shape {tuple(y.shape)}; expected (samples,) or (samples, outputs)")
    if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
        raise DataError(f"its {which} labels include NaN or infinity")
    if targets == CLASSES:
        if y.ndim == 2 and y.shape[1] == 1:  # one label per sample, held in a column
            y = y[:, 0]
        if y.ndim != 1:
            raise DataError(f"its {which} labels have shape {tuple(y.shape)}; loss {name!r} trains a classifier on "
                            "one class index per sample (real-valued targets: [training] loss = \"mse\")")
        if y.dtype.kind == "f" and not np.all(y == np.round(y)):
            raise DataError(f"its {which} labels are not whole numbers; loss {name!r} trains a classifier on class "
                            "indices 0..C-1 (for a regression set [training] loss = \"mse\" or \"l1\")")
        y = y.astype(np.int64)
        if len(y) and int(y.min()) < 0:
            raise DataError(f"its {which} labels include {int(y.min())}; class indices start at 0")
        return y
    if targets == VALUES:
        y = y.astype(np.float32)
        if name == "bce_with_logits" and len(y) and not (0.0 <= float(y.min()) and float(y.max()) <= 1.0):
            raise DataError(f"its {which} labels lie in [{float(y.min()):g}, {float(y.max()):g}]; loss "
                            "'bce_with_logits' needs targets in [0, 1]")
        return y
    return y.astype(np.int64) if y.dtype.kind in "iu" else y.astype(np.float32)


def outputs(y: np.ndarray) -> int:
    """The outputs a network needs per sample for real-valued targets: their width (1 for (samples,) targets)."""
    return 1 if y.ndim == 1 else int(y.shape[1])
