"""Scenarios from files and by name: the built-in TOML files, a user's file (with the digests of the code it
references), and a scenario's [target] changed before it is validated again."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from .base import ScenarioError
from .code import code_hashes, references_code
from .documents import read_toml
from .model import Scenario, parse_scenario

BUILTIN_PACKAGE = "depl.scenarios"


def builtin_names() -> list[str]:
    """The names of the scenarios that ship with depl."""
    files = resources.files(BUILTIN_PACKAGE)
    return sorted(p.name[:-5] for p in files.iterdir() if p.name.endswith(".toml"))


def load_scenario(name_or_path: str | Path) -> Scenario:
    """Load a built-in scenario by name, or a TOML file by path."""
    text, source = scenario_source(name_or_path)
    data = read_toml(text, source)
    if Path(source).is_file() and references_code(data):
        # user code is found next to the scenario file, wherever the plan made from it is run
        here = Path(source).resolve().parent
        given = data.get("code_dir")
        code_dir = here if not isinstance(given, str) else (here / given).resolve()
        data = {**data, "code_dir": str(code_dir), "code_hashes": code_hashes(data, code_dir)}
    return parse_scenario(data, source)


def scenario_source(name_or_path: str | Path) -> tuple[str, str]:
    """(the TOML text, where it is from) of a built-in scenario by name, or of a file by path."""
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists() or "/" in str(name_or_path):
        if not p.is_file():
            raise ScenarioError(f"{p}: no such scenario file (built-in scenarios: {', '.join(builtin_names())})")
        try:
            return p.read_text(encoding="utf-8"), str(p)
        except (OSError, UnicodeDecodeError) as e:
            raise ScenarioError(f"{p}: cannot be read: {e}") from None
    name = str(name_or_path)
    if name not in builtin_names():
        raise ScenarioError(f"{name!r} is neither a file nor a built-in scenario (built-in: {', '.join(builtin_names())})")
    return resources.files(BUILTIN_PACKAGE).joinpath(f"{name}.toml").read_text(encoding="utf-8"), f"{name} (built-in)"


def with_target(data: dict, loss: float | None = None, quantile: float | None = None,
                deadline: float | None = None, name: str | None = None, alpha: float | None = None) -> dict:
    """A copy of scenario `data` with the [target] keys (and the name) that are given replaced; not validated."""
    given = {"loss": loss, "quantile": quantile, "deadline": deadline, "alpha": alpha}
    out = {**data, "target": {**data["target"], **{k: v for k, v in given.items() if v is not None}}}
    if name is not None:
        out["name"] = name
    return out
