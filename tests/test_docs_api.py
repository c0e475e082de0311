"""docs/api.md runs as written: every ```python block, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

API = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def blocks() -> list[tuple[int, str]]:
    text = API.read_text(encoding="utf-8")
    return [(text[: m.start()].count("\n") + 2, m.group(1)) for m in re.finditer(r"```python\n(.*?)```", text, re.S)]


def test_the_api_page_runs(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")      # the last section trains
    torch.set_num_threads(1)                  # as the CLI's --threads 1: no oversubscribed cores in CI
    monkeypatch.chdir(tmp_path)
    found = blocks()
    assert len(found) >= 8
    namespace: dict = {"__name__": "api_md"}
    for line, code in found:
        # compiled under the page's name and line, so a failure points at docs/api.md:LINE
        exec(compile("\n" * (line - 1) + code, str(API), "exec"), namespace)
