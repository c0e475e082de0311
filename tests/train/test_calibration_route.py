"""The calibration route with your own code: profile → fit → profile again on new seeds → calibrate → plan.

A task of your own (tests/train/trainkit.py: a Friedman #1 regression, an MLP, a Huber loss of its own,
`[training] loss = "friedman:huber"`, all in friedman.py beside friedman.toml).  The runs record what their code
is (the networks, the loss, the sha256 of friedman.py), not where it lay: the scenario they were profiled from
takes them, and `depl plan` on the calibrated file is certified by them.  Runs of other code — another network,
other arguments, another loss, an edited file — are refused, saying what to profile.
"""

from __future__ import annotations

import json
import re

import pytest
import tomllib

from depl.certificate import Certificate

from trainkit import predicts_as_exported, write_own_loss_task

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not


def cli(*args) -> tuple[int, str, str]:
    """depl in this process (no interpreter to start per command): exit code, stdout, stderr."""
    from typer.testing import CliRunner

    import depl.cli

    r = CliRunner().invoke(depl.cli.app, list(map(str, args)), env={"COLUMNS": "250"})
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r.exit_code, r.stdout, r.stderr.strip()


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """The project folder after the chain, run from it as the user would: profile (seeds 0..5), fit (the last one
    set apart), profile the fitted scenario on seeds 100..105, calibrate on them, plan the calibrated file, run
    the plan (seed 200) and export its model."""
    project = write_own_loss_task(tmp_path_factory.mktemp("own-loss"))
    mp = pytest.MonkeyPatch()
    mp.chdir(project)
    mp.setenv("DEPL_CODE", str(project))  # --allow-code sets it for the command and the processes it starts
    try:
        chain = [["profile", "friedman.toml", "--epochs", 3, "--seeds", 6, "--out", "profile", "--allow-code", "."],
                 ["fit", "profile/runs.sqlite", "--scenario", "friedman.toml", "--out", "fitted.toml", "--bootstrap", 0],
                 ["profile", "fitted.toml", "--epochs", 3, "--seeds", 6, "--first-seed", 100, "--out", "calibration",
                  "--allow-code", "."],
                 ["calibrate", "fitted.toml", "calibration/runs.sqlite", "--out", "calibrated.toml"],
                 ["plan", "calibrated.toml", "--out", "plan.json"],
                 ["run", "plan.json", "--seeds", 1, "--first-seed", 200, "--out", "run", "--allow-code", "."],
                 ["export-model", "run", "--seed", 200, "--out", "model.pt2", "--allow-code", "."]]
        for args in chain:
            code, out, err = cli(*args)
            assert code == 0, f"depl {' '.join(map(str, args))}\n{out}\n{err}"
        yield project
    finally:
        mp.undo()


def test_runs_of_your_own_loss_calibrate_the_scenario_they_were_profiled_from(calibrated):
    table = tomllib.loads((calibrated / "calibrated.toml").read_text())
    (e,) = table["calibration"]["experiments"]
    c = e["conditions"]
    # what the runs trained, not where the code lay
    assert "code_dir" not in c["training"] and c["training"]["loss"] == "friedman:huber"
    assert c["networks"] == {"full": "friedman:make_net(hidden=16)"}
    assert list(c["code"]) == ["friedman.py"] and c["code"]["friedman.py"].startswith("sha256:")
    assert e["seeds"] == list(range(100, 106))
    plan = json.loads((calibrated / "plan.json").read_text())
    cert = Certificate.of_plan(plan["info"])
    assert cert.certified and cert.runs == 6 and cert.hits == 6
    assert plan["scenario_spec"]["training"]["loss"] == "friedman:huber"


def test_a_calibrated_file_written_into_another_folder_still_names_your_code(calibrated, monkeypatch):
    """`depl calibrate fitted.toml RUNS --out sub/calibrated.toml`: the file's code_dir is relative to where it is
    written, so it names the project's code, not sub/ (a plan of it runs); written beside its scenario, the text's
    own code_dir is kept as it was."""
    from depl.scenario import load_scenario

    monkeypatch.chdir(calibrated)
    code, out, err = cli("calibrate", "fitted.toml", "calibration/runs.sqlite", "--out", "sub/deeper/calibrated.toml")
    assert code == 0, err
    text = (calibrated / "sub" / "deeper" / "calibrated.toml").read_text()
    assert 'code_dir = "../.."' in text
    assert load_scenario(calibrated / "sub" / "deeper" / "calibrated.toml").code_dir == str(calibrated.resolve())
    beside = tomllib.loads((calibrated / "calibrated.toml").read_text()).get("code_dir")
    assert beside == tomllib.loads((calibrated / "fitted.toml").read_text()).get("code_dir")


def variant(project, name: str, pattern: str, replacement: str, source: str = "fitted.toml") -> str:
    text = (project / source).read_text()
    changed = re.sub(pattern, replacement, text, count=1, flags=re.M)
    assert changed != text
    (project / name).write_text(changed)
    return name


@pytest.mark.parametrize("pattern, replacement, field, wanted, had", [
    (r'net = "friedman:make_net"', 'net = "friedman:make_wide"', "models 'full' train (the network)",
     '"friedman:make_wide(hidden=16)"', '"friedman:make_net(hidden=16)"'),
    (r"hidden = 16", "hidden = 32", "models 'full' train (the network)",
     '"friedman:make_net(hidden=32)"', '"friedman:make_net(hidden=16)"'),
    (r'^loss = "friedman:huber"$', 'loss = "mse"', "[training] loss", '"mse"', '"friedman:huber"'),
])
def test_runs_of_another_network_or_loss_are_refused_saying_what_to_profile(
        calibrated, monkeypatch, pattern, replacement, field, wanted, had):
    monkeypatch.chdir(calibrated)
    other = variant(calibrated, "other.toml", pattern, replacement)
    code, _, err = cli("calibrate", other, "calibration/runs.sqlite", "--out", "no.toml")
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"{field}: the scenario has {wanted}, the calibration runs had {had}" in err
    assert "profile calibration runs of the scenario as it is (`depl profile SCENARIO --first-seed N`)" in err
    assert not (calibrated / "no.toml").exists()


def test_runs_of_an_edited_file_of_your_code_are_refused(calibrated, tmp_path, monkeypatch):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(calibrated, copy)
    monkeypatch.chdir(copy)
    assert cli("calibrate", "fitted.toml", "calibration/runs.sqlite", "--out", "again.toml")[0] == 0  # a copy: same code
    (copy / "friedman.py").write_text((copy / "friedman.py").read_text() + "\n# edited\n")
    code, _, err = cli("calibrate", "fitted.toml", "calibration/runs.sqlite", "--out", "no.toml")
    assert code == 2 and "your code friedman.py (sha256): the scenario has" in err, err


def test_a_calibration_of_another_network_certifies_nothing_and_plan_says_one_reason(calibrated, monkeypatch):
    monkeypatch.chdir(calibrated)
    other = variant(calibrated, "other-calibrated.toml", r'net = "friedman:make_net"', 'net = "friedman:make_wide"',
                    source="calibrated.toml")
    code, out, err = cli("plan", other, "--json")
    assert code == 3 and err.startswith("error: ") and len(err.splitlines()) == 1, err
    said = json.loads(out)
    assert said["reason"] == err.removeprefix("error: ")
    assert "its runs differ from the scenario's conditions — models 'full' train (the network)" in said["reason"]
    assert "`depl profile SCENARIO --first-seed N`, then `depl calibrate SCENARIO RUNS`" in said["reason"]


def test_the_calibrated_plan_runs_to_a_loaded_and_exported_model(calibrated):
    predicts_as_exported(calibrated, "run", 200, calibrated / "model.pt2")


def test_the_certified_search_on_the_same_task_runs_to_a_loaded_and_exported_model(calibrated, monkeypatch):
    """The other route on the same task: `depl plan fitted.toml --certify`, then run and export its plan."""
    monkeypatch.chdir(calibrated)
    for args in (["plan", "fitted.toml", "--certify", "--quantile", "0.5", "--max-runs", 12, "--batch", 6,
                  "--first-seed", 300, "--out", "search/plan.json"],
                 ["run", "search/plan.json", "--seeds", 1, "--first-seed", 400, "--out", "search-run",
                  "--allow-code", "."],
                 ["export-model", "search-run", "--seed", 400, "--out", "search-model.pt2", "--allow-code", "."]):
        code, out, err = cli(*args)
        assert code == 0, f"depl {' '.join(map(str, args))}\n{out}\n{err}"
    assert Certificate.of_plan(json.loads((calibrated / "search" / "plan.json").read_text())["info"]).certified
    predicts_as_exported(calibrated, "search-run", 400, calibrated / "search-model.pt2")
