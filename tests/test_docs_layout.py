"""docs/architecture.md's "The layout" names every module of src/depl and nothing else: a module added, removed or
renamed without the page fails here, naming it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "src" / "depl"

# a module as the layout names it: `name.py`, or `package/name.py` relative to src/depl
MODULE = re.compile(r"(?<![\w./-])((?:[a-z_]+/)?[a-z_]+\.py)\b")


def layout() -> dict[str, list[str]]:
    """Each entry of the layout's block (a line starting with `src/depl/…`) and the modules its text names, as
    paths relative to src/depl: `x.py` in a package's entry is that package's, `pkg/x.py` anywhere is src/depl's."""
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("\n## The layout\n", 1)
    assert len(section) == 2, f"{PAGE}: no '## The layout' section"
    block = re.search(r"```text\n(.*?)```", section[1], re.S)
    assert block, f"{PAGE}: 'The layout' has no ```text block"
    entries: dict[str, list[str]] = {}
    current = None
    for line in block.group(1).splitlines():
        head = re.match(r"(\S+)\s", line + " ")
        if head and not line.startswith(" "):
            current = head.group(1) if head.group(1).startswith("src/depl/") else None
            if current:
                assert current not in entries, f"{PAGE}: {current} is listed twice"
                entries[current] = []
            line = line[len(head.group(1)):]
        if current:
            entries[current].append(line)
    named: dict[str, list[str]] = {}
    for entry, lines in entries.items():
        rel = entry.removeprefix("src/depl/")
        folder = rel if rel.endswith("/") else ""
        for token in MODULE.findall(" ".join(lines)):
            named.setdefault(token if "/" in token else folder + token, []).append(entry)
        if not folder:
            named.setdefault(rel, []).append(entry)
    return {"entries": sorted(entries), "modules": sorted(named)}


def test_the_layout_lists_every_module_and_no_other():
    found = layout()
    on_disk = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
               if p.name != "__init__.py" and "__pycache__" not in p.parts}
    listed = {m for m in found["modules"] if not m.endswith("__init__.py")}
    missing, extra = sorted(on_disk - listed), sorted(listed - on_disk)
    assert not missing, f"docs/architecture.md, 'The layout', does not name: {', '.join(missing)}"
    assert not extra, f"docs/architecture.md, 'The layout', names modules that do not exist: {', '.join(extra)}"


def test_the_layout_has_an_entry_for_every_package_folder():
    found = {e.removeprefix("src/depl/") for e in layout()["entries"] if e.endswith("/")}
    folders = {p.relative_to(PACKAGE).as_posix() + "/" for p in PACKAGE.rglob("*")
               if p.is_dir() and p.name != "__pycache__"}
    assert found == folders, (f"docs/architecture.md, 'The layout': folders without an entry "
                              f"{sorted(folders - found)}, entries without a folder {sorted(found - folders)}")
