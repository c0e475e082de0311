"""depl's per-user cache folder: what is slow to make and the same every time on one machine (measured choices of
how to train many seeds, generated MNIST-1D samples) is kept there between processes."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """$DEPL_CACHE, else $XDG_CACHE_HOME/depl, else ~/.cache/depl."""
    if os.environ.get("DEPL_CACHE"):
        return Path(os.environ["DEPL_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "depl"


def write_whole(path: Path, write) -> bool:
    """`write(tmp_path)` then rename onto `path`: the file is whole or absent, whoever else writes it at once.
    False when the folder cannot be written (a cache that cannot be kept is made again next time)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp{path.suffix}")
        write(tmp)
        tmp.replace(path)
        return True
    except OSError:
        return False
