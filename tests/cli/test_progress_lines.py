"""A progress line written to a file or a pipe is whole: rich would cut it at 80 columns with an ellipsis."""

from __future__ import annotations

import os
import subprocess
import sys

LINE = ("5 of 5 candidates in the race (3 counting), 64 seeds, 200 runs; best certified: [2] cost 123.456, "
        "ETA ~3.2 min")

CODE = f"""
from depl.cli.console import epoch_progress
with epoch_progress() as bar:
    task = bar.add_task("search", total=None)
    bar.update(task, advance=1, description={LINE!r})
"""


def test_the_progress_line_is_whole_when_stderr_is_not_a_terminal(tmp_path):
    with open(tmp_path / "err.txt", "w") as err:
        r = subprocess.run([sys.executable, "-c", CODE], stderr=err, stdout=subprocess.PIPE, text=True,
                           env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 0
    text = (tmp_path / "err.txt").read_text()
    assert LINE in text and "…" not in text, text
