"""A data source's arrays, and the error of data that cannot be used.

Below both the built-in sources (data.py) and a user's own (custom.py):
data.py dispatches `source = "MODULE:FUNCTION"` to custom.py, and custom.py
returns a Source, so neither imports the other for these.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


class DataError(ValueError):
    """Data that cannot be used; the message is meant for the user."""


@dataclass(frozen=True)
class Source:
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    n_classes: int = 10
    # your factory's inputs and labels as it gave them, before they became float32 and int64 (None: a built-in
    # source); a run's own draw of your data is checked against them (depl.train.data.checked_draw)
    given_dtypes: tuple[str, str] | None = field(default=None, compare=False)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])
