"""depl.paths: how a written file records a path — relative to its own folder where a command follows it, said
without this machine's layout where none does."""

from __future__ import annotations

from pathlib import Path

from depl.paths import informational, relative, resolved


def test_a_path_is_recorded_relative_to_the_files_folder_and_read_back_from_it(tmp_path):
    file = tmp_path / "project" / "runs" / "models" / "plan-1" / "seed-0.json"
    assert relative(tmp_path / "project", file) == "../../.."
    assert relative(file.parent, file) == "."
    assert relative(tmp_path / "code", file) == "../../../../code"
    moved = tmp_path / "clone" / "runs" / "models" / "plan-1" / "seed-0.json"   # the folder copied whole
    assert resolved("../../..", moved) == (tmp_path / "clone").resolve()
    assert resolved(str(tmp_path / "abs"), moved) == (tmp_path / "abs").resolve()   # written by hand: as it is


def test_an_informational_path_names_no_folder_of_this_machine():
    assert informational(Path.home() / ".cache" / "depl" / "autochoice-1.json") == "~/.cache/depl/autochoice-1.json"
    assert informational("/tmp/depl-example/profile/runs.sqlite") == "…/profile/runs.sqlite"
    assert informational("runs/profile/runs.sqlite") == "runs/profile/runs.sqlite"   # relative: as given
