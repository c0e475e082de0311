"""A live status line for long searches (optimal): one line, rewritten in place on a terminal."""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterator, TextIO


@contextlib.contextmanager
def status_line(stream: TextIO, every: float = 1.0) -> Iterator[Callable[[str], None]]:
    """Yield `say(line)`: on a terminal the line is redrawn in place; elsewhere
    (a log file, CI) a line is written at most every `every` seconds, and the last one always."""
    tty = stream.isatty()
    state = {"last": "", "at": 0.0, "shown": ""}

    def say(line: str) -> None:
        state["last"] = line
        now = time.monotonic()
        if tty:
            stream.write("\r\033[K" + line)
            stream.flush()
        elif now - state["at"] >= every:
            state["at"], state["shown"] = now, line
            stream.write(line + "\n")
            stream.flush()

    try:
        yield say
    finally:
        if tty:
            stream.write("\n")
        elif state["last"] and state["last"] != state["shown"]:
            stream.write(state["last"] + "\n")
        stream.flush()
