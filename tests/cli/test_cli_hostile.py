"""The CLI as a hostile new user meets it: every --help shows its brackets, bad input gets one line and exit 2."""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import re
import sys

import pytest
import typer
from typer.testing import CliRunner

import depl.cli as cli
from depl.store import Store

BRACKET = re.compile(r"\[[^\[\]]+\]")
# export-app checks the `train` extra first: without torch its refusals are that one line
NEEDS_TRAIN = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs the train extra (torch)")


def _one_line_error(r) -> str:
    """Exit 2, one plain line on stderr, no traceback."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


def _commands(command, path=()):
    """Every command of typer's command tree (a group's have `commands`), with its path."""
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def _flat(text: str) -> str:
    """Help text without rich's box drawing and wrapping."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def test_every_help_keeps_its_square_brackets():
    # rich markup ate "[tool.flwr.app]", "[target]" and "[default: OUT/runs.sqlite]" from the help texts
    root = typer.main.get_command(cli.app)
    runner = CliRunner()
    checked = 0
    for path, command in _commands(root):
        r = runner.invoke(cli.app, [*path, "--help"], env={"COLUMNS": "250"})
        assert r.exit_code == 0, (path, r.output)
        shown = _flat(r.output)
        assert "\\[" not in shown, (path, shown)  # an escaped bracket shown as typed: markup not parsed
        texts = [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]
        for text in texts:
            for bracket in BRACKET.findall(inspect.cleandoc(text)):
                assert _flat(bracket) in shown, (path, bracket)
                checked += 1
    assert checked >= 10  # the scan did see the bracketed help texts it is about


def test_every_argument_and_option_has_help():
    # 12 of them had none: `depl plan --help` listed SCENARIO with nothing beside it
    missing = [(" ".join(path) or "depl", p.name) for path, command in _commands(typer.main.get_command(cli.app))
               for p in command.params if not (getattr(p, "help", None) or "").strip()]
    assert not missing, missing


def test_error_messages_keep_square_brackets(depl_cli, tmp_path):
    # a file name like "[run]scenario.toml" used to lose its "[run]" in the error line
    line = _one_line_error(depl_cli("plan", "[run]scenario.toml", cwd=tmp_path))
    assert "[run]scenario.toml" in line


def _invoke(*args):
    """In-process run (cheap); an escaped exception is a traceback the user would have seen."""
    r = CliRunner().invoke(cli.app, list(map(str, args)), env={"COLUMNS": "250"})
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r


def _bad_input(r) -> str:
    assert r.exit_code == 2, (r.exit_code, r.output)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    return lines[0]


@pytest.mark.parametrize("schedule, why", [
    ("", "VERSION:EPOCHS"),
    (",,", "VERSION:EPOCHS"),
    ("full:0", "at least one epoch"),
    ("full:-3", "whole number"),
    ("full:1e9", "whole number"),
    ("full:10**9", "whole number"),
    ("full:3_000", "whole number"),          # int() takes it: 3000 epochs, minutes of CPU
    ("full:٣", "whole number"),              # int() takes Arabic-Indic digits too
    ("full:1000000000", "K ≤ 1000"),         # used to build a list of 10⁹ names, then the law epoch by epoch
    ("full:600,pruned-0.5:600", "K = 1200"),
    ("nope:3", "not a model"),
])
def test_predict_bad_schedule_is_one_line(schedule, why):
    assert why in _bad_input(_invoke("predict", "mnist1d-small", schedule))


@pytest.mark.parametrize("q", ["nan", "inf", "-inf", "1.5", "0", "1", "-0.1"])
def test_predict_bad_quantile_is_one_line(q):
    assert "quantile" in _bad_input(_invoke("predict", "mnist1d-small", "full:3", "--quantile", q))


def test_predict_missing_scenario_is_one_line(tmp_path):
    assert "nope.toml" in _bad_input(_invoke("predict", tmp_path / "nope.toml", "full:3"))


def _log_rows(spread: bool = True) -> list[str]:
    """A valid log: run a of model full, 6 seeds, epochs 0..6."""
    rows = ["run,seed,epoch,model,test_loss"]
    for s in range(6):
        for e in range(7):
            rows.append(f"a,{s},{e},full,{2.3 * 0.85 ** e * (1 + (0.01 * ((s * 7 + e) % 5) if spread else 0)):.6f}")
    return rows


@pytest.mark.parametrize("case, content, why", [
    ("empty", b"", "column 'run' is missing"),
    ("header only", b"run,seed,epoch,model,test_loss\n", "no rows"),
    ("binary", bytes(range(256)) * 8, "cannot be read as CSV"),
    ("inf", "\n".join(_log_rows()).replace(",2.300000", ",inf", 1).encode(), "not a finite number"),
    # every loss at 1e300 or equal across seeds: the noise fit was 0/0 = NaN, then a pydantic line and warnings
    ("same loss on every seed", "\n".join(_log_rows(spread=False)).encode(), "every seed has the same test_loss"),
    ("huge losses", "\n".join(r if i == 0 else r.rsplit(",", 1)[0] + f",{float(r.rsplit(',', 1)[1]) * 1e200!r}"
                              for i, r in enumerate(_log_rows())).encode(), "the largest loss depl fits"),
    # one absurd loss among the rows changed every fitted mean, and the plan made from the fit, without a word
    ("one loss of 1e300", "\n".join(_log_rows()).replace(",1.694985", ",1e300", 1).encode(),
     "line 4, column test_loss: '1e300': beyond 1e+06, the largest loss depl fits"),
    ("negative loss", "\n".join(_log_rows()).replace(",1.694985", ",-1.694985", 1).encode(), "a loss must be positive"),
    # the last of two test_loss columns was read without a word
    ("test_loss twice", "\n".join([_log_rows()[0] + ",test_loss"] + [r + ",9.9" for r in _log_rows()[1:]]).encode(),
     "column 'test_loss' appears 2 times in the header (columns 5, 6)"),
    # a newline in a version's name, or a negative seed, failed after the fit, writing the scenario (exit 1)
    ("newline in a model name", "\n".join(_log_rows()).replace(",full,", ',"fu\nll",', 1).encode(),
     "column model: 'fu\\nll': a name holds no control character"),
    ("escape in a model name", "\n".join(_log_rows()).replace(",full,", ",fu\x1bll,", 1).encode(),
     "a name holds no control character"),
    ("negative seed", "\n".join(_log_rows()).replace("a,0,", "a,-1,").encode(), "column seed: '-1': a seed is a whole number ≥ 0"),
])
def test_fit_bad_log_file_is_one_line(tmp_path, case, content, why):
    logs = tmp_path / "logs.csv"
    logs.write_bytes(content)
    line = _bad_input(_invoke("fit", logs, "--target-loss", "0.5", "--bootstrap", "0"))
    assert why in line and "logs.csv" in line, (case, line)


def test_fit_refuses_control_characters_in_names_before_fitting(tmp_path):
    logs = tmp_path / "logs.csv"
    logs.write_text("\n".join(_log_rows()) + "\n")
    line = _bad_input(_invoke("fit", logs, "--target-loss", "0.5", "--name", "a\nb", "--out", tmp_path / "f.toml"))
    assert "--name 'a\\nb': a name holds no control character" in line
    odd = tmp_path / "lo\ngs.csv"
    odd.write_text("\n".join(_log_rows()) + "\n")
    line = _bad_input(_invoke("fit", odd, "--target-loss", "0.5", "--out", tmp_path / "f.toml"))
    assert "lo\\ngs.csv" in line and "the file name holds the control character '\\n'" in line
    assert not list(tmp_path.glob("f*.toml"))


def test_fit_escapes_quotes_and_backslashes_in_names(tmp_path):
    logs = tmp_path / "logs.csv"
    logs.write_text("\n".join(_log_rows()).replace(",full,", ',"f\\u""ll",') + "\n")
    r = _invoke("fit", logs, "--target-loss", "0.5", "--bootstrap", "0", "--name", 'my "fit" \\ 1',
                "--out", tmp_path / "fitted.toml")
    assert r.exit_code == 0, r.output
    from depl.scenario import load_scenario

    s = load_scenario(tmp_path / "fitted.toml")
    assert s.name == 'my "fit" \\ 1' and [m.name for m in s.models] == ['f\\u"ll']


def _profile_store(path, losses) -> None:
    """A store of one profiling experiment of mnist1d-small's `full` (seeds × epochs test losses)."""
    from depl.store import EpochRow

    with Store(path) as st:
        E = len(losses[0])
        st.start_run("p", "profile", {
            "experiment": {"kind": "version", "version": "full", "fraction": 1.0, "to": None, "switch_after": 0},
            "job": {"data": {"source": "mnist1d", "shares": [[0.0, 0.5], [0.5, 1.0]], "fraction": 1.0, "path": None},
                    "epochs": [[k + 1, "full", "profile"] for k in range(E)], "nodes": {"profile": 2}},
            "scenario": "mnist1d-small"})
        for s, row in enumerate(losses):
            for k, loss in enumerate(row, start=1):
                st.record_epoch("p", s, EpochRow(k, "full", "profile", loss, 0.5, 1.0, 0.1), final=k == E)


def test_a_store_with_negative_losses_is_refused_by_fit_naming_the_epoch(tmp_path):
    # the level fit met log(−3): an AttributeError on None after a failed optimisation
    _profile_store(tmp_path / "runs.sqlite", [[2.0 - 0.6 * k - 0.01 * s for k in range(6)] for s in range(4)])
    line = _bad_input(_invoke("fit", tmp_path / "runs.sqlite", "--bootstrap", "0"))
    assert "epochs.test_loss of run 'p', seed 0, epoch 5 = -0.39" in line and "a loss must be positive" in line


@pytest.mark.parametrize("column, value, why", [
    ("test_loss", "'abc'", "epochs.test_loss of run 'p', seed 1, epoch 2 = 'abc': not a finite number"),
    ("test_loss", "9e999", "epochs.test_loss of run 'p', seed 1, epoch 2 = inf: not a finite number"),
    ("seconds", "x'00'", "epochs.seconds of run 'p', seed 1, epoch 2 = '<1 bytes>': not a finite number"),
    ("model", "x'00'", "epochs.model of run 'p', seed 1, epoch 2 = '<1 bytes>': not text"),
])
def test_a_store_whose_numbers_were_altered_is_one_line_for_every_reader(tmp_path, column, value, why):
    import sqlite3

    path = tmp_path / "runs.sqlite"
    _profile_store(path, [[2.0 - 0.1 * k - 0.01 * s for k in range(4)] for s in range(3)])
    with sqlite3.connect(path) as db:
        db.execute(f"UPDATE epochs SET {column} = {value} WHERE seed = 1 AND epoch = 2")
    for args in (["runs", "show", "--store", path], ["runs", "show", "--store", path, "--json"],
                 ["fit", path, "--bootstrap", "0"]):
        assert why in _bad_input(_invoke(*args)), args


def test_a_switch_between_a_network_and_a_misspelt_one_says_the_name_is_unknown(tmp_path):
    # it said "the versions are different networks (mymodels:make_net width None, mymodels:make_nte width None)"
    from importlib import resources

    (tmp_path / "mymodels.py").write_text("import torch\n\n\ndef make_net(width=8):\n    return None\n")
    src = resources.files("depl.scenarios").joinpath("mnist1d-small.toml").read_text()
    own = re.sub(r'train = \{ net = "cnn1d", prune_ratio = ([0-9.]+), width = 64 \}',
                 r'train = { net = "mymodels:make_net", prune_ratio = \1 }', src)
    assert own.count("mymodels:make_net") == 3
    (tmp_path / "good.toml").write_text(own)
    assert _invoke("predict", tmp_path / "good.toml", "full:3").exit_code == 0
    for typo, why in (("mymodels:make_nte", "mymodels.py defines no 'make_nte' (is it misspelt? it defines make_net"),
                      ("mymodel:make_net", "module 'mymodel' not found in")):
        (tmp_path / "typo.toml").write_text(own.replace("mymodels:make_net", typo, 2).replace(typo, "mymodels:make_net", 1))
        line = _bad_input(_invoke("plan", tmp_path / "typo.toml"))
        assert f"models[1].train.net = {typo!r}: no network of this name: " in line and why in line, line
        assert "different networks" not in line


@pytest.mark.parametrize("make", ["missing", "directory"])
def test_fit_log_path_that_is_no_file_is_one_line(tmp_path, make):
    logs = tmp_path / "logs.csv"
    if make == "directory":
        logs.mkdir()
    said = _bad_input(_invoke("fit", logs, "--target-loss", "0.5"))
    assert ("a folder; give the store (RUN_FOLDER/runs.sqlite) or a log file" if make == "directory" else
            "no such log file") in said


def test_fit_good_log_still_fits(tmp_path):
    logs = tmp_path / "logs.csv"
    logs.write_text("\n".join(_log_rows()) + "\n")
    r = _invoke("fit", logs, "--target-loss", "0.5", "--bootstrap", "0", "--out", tmp_path / "fitted.toml")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "fitted.toml").is_file()


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    assert _invoke("plan", "mnist1d-small", "--out", out).exit_code == 0
    return out


def _files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@NEEDS_TRAIN
@pytest.mark.parametrize("case", ["missing plan", "invalid JSON", "binary plan", "plan is a folder"])
def test_export_app_bad_plan_is_one_line(tmp_path, case):
    plan = tmp_path / "plan.json"
    if case == "invalid JSON":
        plan.write_text('{"method":')
    elif case == "binary plan":
        plan.write_bytes(b"\x00\xff\xfe" * 10)
    elif case == "plan is a folder":
        plan.mkdir()
    line = _bad_input(_invoke("export-app", plan, tmp_path / "app"))
    assert "plan.json" in line
    assert not (tmp_path / "app").exists()


@NEEDS_TRAIN
def test_export_app_dir_that_is_a_file_is_one_line(tmp_path, plan_file):
    (tmp_path / "app").write_text("mine")
    assert "exists and is not a folder" in _bad_input(_invoke("export-app", plan_file, tmp_path / "app"))
    assert (tmp_path / "app").read_text() == "mine"
    assert "Not a directory" in _bad_input(_invoke("export-app", plan_file, tmp_path / "app" / "sub"))


@NEEDS_TRAIN
def test_export_app_failure_leaves_nothing_behind(tmp_path, plan_file):
    # new/deeper are made, then the last name is too long for the file system: both must be gone again
    line = _bad_input(_invoke("export-app", plan_file, tmp_path / "new" / "deeper" / ("x" * 300)))
    assert "too long" in line
    assert _files(tmp_path) == []


@NEEDS_TRAIN
@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes through directory permissions")
def test_export_app_unwritable_dir_is_one_line(tmp_path, plan_file):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        assert "ro" in _bad_input(_invoke("export-app", plan_file, ro / "app"))
        assert "Permission denied" in _bad_input(_invoke("export-app", plan_file, ro))
        assert _files(ro) == []
    finally:
        ro.chmod(0o755)


@NEEDS_TRAIN
def test_export_app_writes_a_whole_pyproject(tmp_path, plan_file):
    r = _invoke("export-app", plan_file, tmp_path / "app")
    assert r.exit_code == 0, r.output
    assert _files(tmp_path / "app") == ["pyproject.toml"]  # no temporary file left
    assert "[tool.flwr.app.config]" in (tmp_path / "app" / "pyproject.toml").read_text()
    # what to run next, with this environment's absolute paths (its bin/ need not be on PATH)
    (run_app,) = [ln.split() for ln in r.stdout.splitlines() if " run-app " in ln]
    assert os.path.isabs(run_app[0]) and run_app[-1] == str((tmp_path / "app").resolve()), run_app


@pytest.mark.parametrize("case", ["no folder", "no pyproject", "not TOML", "not an app of depl", "bad plan"])
def test_run_app_on_a_folder_that_is_not_an_exported_app_is_one_line_and_writes_nothing(tmp_path, case):
    app = tmp_path / "app"
    text = {"not TOML": "[tool", "not an app of depl": '[project]\nname = "x"\n',
            "bad plan": '[tool.flwr.app.config]\nplan = "{\\"method\\": 1}"\n'}.get(case)
    if case != "no folder":
        app.mkdir()
    if text is not None:
        (app / "pyproject.toml").write_text(text)
    before = _files(tmp_path)
    line = _bad_input(_invoke("run-app", app))
    assert ("plan" if case == "bad plan" else "pyproject.toml") in line, line
    assert _files(tmp_path) == before  # no .flwr, no store


@pytest.mark.parametrize("store", ["missing.sqlite", "sqlite:///missing.sqlite", "folder.sqlite", "text.sqlite"])
def test_runs_show_json_bad_store_is_one_line_and_creates_nothing(tmp_path, monkeypatch, store):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder.sqlite").mkdir()
    (tmp_path / "text.sqlite").write_text("not a database\n")
    r = _invoke("runs", "show", "--store", store, "--json")
    line = _bad_input(r)
    assert json.loads(r.stdout) == {"error": line.removeprefix("error: "), "exit_code": 2}  # the refusal, as JSON
    assert not (tmp_path / "missing.sqlite").exists()  # a sqlite:/// URL used to create the store it could not find


def test_runs_show_json_empty_store_is_valid_json(tmp_path):
    import json

    Store(tmp_path / "runs.sqlite").close()  # a depl store with no runs yet
    r = _invoke("runs", "show", "--store", tmp_path / "runs.sqlite", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["runs"] == []


def test_runs_show_refuses_unknown_kind_and_json_then_error(tmp_path):
    Store(tmp_path / "runs.sqlite").close()  # a depl store with no runs yet
    assert "--kind" in _bad_input(_invoke("runs", "show", "--store", tmp_path / "runs.sqlite", "--kind", "plans"))
    r = _invoke("runs", "show", "--store", tmp_path / "runs.sqlite", "--json", "--png", tmp_path / "b.png")
    assert "no finished epochs" in _bad_input(r)
    assert json.loads(r.stdout) == {"error": "no finished epochs to draw", "exit_code": 2}  # no result: the refusal


def test_fit_messages_keep_brackets_and_bad_outputs_are_refused_first(tmp_path):
    logs = tmp_path / "logs.csv"
    logs.write_text("\n".join(_log_rows()) + "\n")
    assert "--scenario with a [target]" in _bad_input(_invoke("fit", logs))
    assert "--png" in _bad_input(_invoke("fit", logs, "--target-loss", "0.5", "--png", logs))
    (tmp_path / "dir.toml").mkdir()
    assert "is a folder" in _bad_input(_invoke("fit", logs, "--target-loss", "0.5", "--out", tmp_path / "dir.toml"))


def test_a_wrong_method_names_every_registered_planner():
    # --method is checked against the planner registry: a planner registered later is a choice too
    from depl.planners import planner_names

    line = _bad_input(_invoke("plan", "paper-alexnet", "--method", "magic"))
    assert line == f"error: --method 'magic': choose one of {', '.join(planner_names())}"


@pytest.mark.parametrize("args, line", [
    (("fit", "x.sqlite", "--model", "cubic"), "--model 'cubic': choose auto, increments, level or level-memory"),
    (("run", "p.json", "--backend", "ray"), "--backend 'ray': choose local or flower"),
    (("validate", "s", "p.json", "--device", "tpu"), "--device 'tpu': choose cpu, cuda or auto"),
    (("export-app", "p.json", "app", "--device", "auto"), "--device 'auto': choose cpu or cuda"),
])
def test_a_wrong_choice_is_one_line_naming_every_choice(args, line):
    assert _bad_input(_invoke(*args)) == f"error: {line}"


@pytest.mark.parametrize("plan", ["missing.json", "folder.json", "bad.json"])
def test_validate_refused_writes_nothing(tmp_path, monkeypatch, plan):
    # the run folder used to be made before the plan was read: a refused validate left depl-validate/ behind
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder.json").mkdir()
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    before = set(os.listdir(tmp_path))
    line = _bad_input(_invoke("validate", "mnist1d-small", plan, "--seeds", "2"))
    assert plan in line
    assert set(os.listdir(tmp_path)) == before


@pytest.mark.parametrize("args, fragments", [
    # typer's own wording differs between its releases (click's up to 0.2x, its own after): what each line names
    (["plan", "mnist1d-small", "--eta", "-1"], ["Invalid value for '--eta'", "(see `depl plan --help`)"]),
    (["simulate", "p.json", "--runs", "1e9"], ["Invalid value for '--runs'", "valid integer"]),
    (["plan"], ["Missing argument", "SCENARIO"]),
    (["plan", "mnist1d-small", "--bogus"], ["No such option", "--bogus"]),
    (["runs", "nope"], ["No such command 'nope'."]),
    (["plan", "mnist1d-small", "--method", "optimal", "--time-limit", "nan"], ["--time-limit"]),
])
def test_a_usage_error_is_one_line_not_a_box(monkeypatch, capsys, args, fragments):
    # what the parser refuses itself (ranges, types, unknown options) was a box of several lines
    monkeypatch.setattr(sys, "argv", ["depl", *args])
    with pytest.raises(SystemExit) as e:
        cli.main()
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    for fragment in fragments:
        assert fragment.lower() in err.lower(), (fragment, err)


@pytest.mark.parametrize("typo, suggestion", [("plna", "'plan'"), ("rn", "'run', 'runs'"), ("runs shwo", "'show'")])
def test_a_mistyped_command_is_suggested_once(monkeypatch, capsys, typo, suggestion):
    # click ≥ 8.4 suggests a command itself, and typer added the same sentence again
    monkeypatch.setattr(sys, "argv", ["depl", *typo.split()])
    with pytest.raises(SystemExit) as e:
        cli.main()
    err = capsys.readouterr().err
    # (typer before 0.15 on click before 8.4 suggests none)
    assert e.value.code == 2 and err.count("Did you mean") <= 1 and len(err.strip().splitlines()) == 1, err
    assert "Did you mean" not in err or suggestion in err, err


def test_help_and_a_good_command_keep_their_exit_codes(monkeypatch, capsys):
    for args, code in ((["--help"], 0), (["scenarios"], 0), ([], 2), (["predict", "mnist1d-small", "full:3", "--quantile", "0.9"], 0)):
        monkeypatch.setattr(sys, "argv", ["depl", *args])
        with pytest.raises(SystemExit) as e:
            cli.main()
        assert e.value.code == code, (args, capsys.readouterr())


@pytest.mark.parametrize("command", ["simulate", "runs show"])
def test_a_png_that_is_a_folder_is_refused_before_any_work(tmp_path, plan_file, command):
    # simulate wrote "FOLDER.png" beside it and said it wrote FOLDER
    (tmp_path / "pics").mkdir()
    args = ["simulate", plan_file] if command == "simulate" else ["runs", "show", "--store", tmp_path / "none.sqlite"]
    line = _bad_input(_invoke(*args, "--png", tmp_path / "pics"))
    assert f"--png {tmp_path / 'pics'}: is a folder" in line
    assert _files(tmp_path) == ["pics"]


def test_a_plot_is_written_where_it_is_asked_for(tmp_path, plan_file):
    r = _invoke("simulate", plan_file, "--png", tmp_path / "band", "--runs", "200")
    assert r.exit_code == 0, r.output
    assert _files(tmp_path) == ["band"] and (tmp_path / "band").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("args, why", [
    (["--fractions", ""], "--fractions '': expected numbers"),                      # was 0 experiments, exit 0
    (["--fractions", "1e-300"], "--fractions 1e-300: keeps 0 of the 4000 selected samples"),   # trained on 1 sample
    (["--nodes", "100000000"], "fewer than the 100000000 node(s) (--nodes)"),      # a traceback in the workers
])
def test_profile_refuses_data_no_node_could_hold_and_writes_nothing(tmp_path, args, why):
    pytest.importorskip("torch")
    line = _bad_input(_invoke("profile", "mnist1d-small", "--epochs", "1", "--seeds", "1", "--out", tmp_path / "o", *args))
    assert why in line
    assert not (tmp_path / "o").exists()


def test_fit_refuses_outputs_it_cannot_write_before_fitting(tmp_path):
    logs = tmp_path / "logs.csv"
    logs.write_text("\n".join(_log_rows()) + "\n", encoding="utf-8")
    for flag, target in (("--out", logs / "fitted.toml"), ("--png", logs / "pics")):  # under a file: a traceback after the fit
        line = _bad_input(_invoke("fit", logs, "--target-loss", "0.5", "--bootstrap", "0", flag, target))
        assert line.startswith(f"error: {flag} {target}") and f"{logs} is a file" in line
    r = _invoke("fit", logs, "--target-loss", "0.5", "--bootstrap", "10000000000000")  # 291 TiB, a MemoryError
    assert r.exit_code == 2 and "'--bootstrap'" in r.stderr
    assert _files(tmp_path) == ["logs.csv"]


def test_validate_out_that_is_a_file_is_named(tmp_path, plan_file):
    pytest.importorskip("torch")
    (tmp_path / "f").write_text("x")
    assert _bad_input(_invoke("validate", "mnist1d-small", plan_file, "--seeds", "2", "--out", tmp_path / "f")) \
        == f"error: --out {tmp_path / 'f'}: exists and is not a folder"


@pytest.mark.parametrize("spec", ["not json", json.dumps({"job": {"epochs": [[1, "full", "A"]], "nodes": {"A": 1}},
                                                           "experiment": {"kind": "version"}, "scenario": "mnist1d-small"}),
                                  json.dumps({"job": {"epochs": 3}, "experiment": {"kind": "version", "version": "full"}})])
def test_a_store_whose_run_spec_was_altered_is_one_line(tmp_path, spec):
    # an experiment without its version was a KeyError traceback in runs show and fit
    import sqlite3

    path = tmp_path / "runs.sqlite"
    Store(path).close()
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO runs VALUES ('r1', 'profile', ?, '2026-01-01')", (spec,))
    for args in (["runs", "show", "--store", path], ["runs", "show", "--json", "--store", path],
                 ["fit", path, "--bootstrap", "0", "--scenario", "mnist1d-small"]):
        line = _bad_input(_invoke(*args))
        assert line.startswith(f"error: {path}: runs.spec of run 'r1'") and "the store was altered" in line, (args, line)


def test_coverage_md_that_is_a_folder_is_refused_before_planning(tmp_path):
    # a traceback once the cells were planned
    (tmp_path / "md").mkdir()
    line = _bad_input(_invoke("coverage", "--no-train", "--md", tmp_path / "md", "--out", tmp_path / "o"))
    assert line.startswith(f"error: --md {tmp_path / 'md'}: is a folder")
    assert _files(tmp_path) == ["md"]


CHECKED = [
    # a factor past 1e6 passed, and broke the re-planning view (capacity / 1e308 = 0) once the run had started
    (["run", "p.json", "--adaptive", "--slow", "far-edge:1e308"], "--slow 'far-edge:1e308'"),
    (["run", "p.json", "--adaptive", "--slow", "far-edge:1e-300"], "--slow 'far-edge:1e-300'"),
    (["run", "p.json", "--adaptive", "--slow", "far-edge:nan"], "--slow 'far-edge:nan'"),
    # no cluster there: refused once the store was made and the run's first line printed
    (["run", "p.json", "--ray-address", "127.0.0.1:{closed}"], "--ray-address 127.0.0.1:{closed}: no Ray cluster answers"),
    (["run", "p.json", "--ray-address", "head-node"], "--ray-address head-node: not HOST:PORT"),
    (["profile", "mnist1d-small", "--ray-address", "127.0.0.1:{closed}"], "no Ray cluster answers"),
    (["validate", "mnist1d-small", "p.json", "--ray-address", "127.0.0.1:{closed}"], "no Ray cluster answers"),
    (["coverage", "--ray-address", "127.0.0.1:{closed}"], "no Ray cluster answers"),
    # what an adaptive validation does not use is refused, not ignored
    (["validate", "mnist1d-small", "p.json", "--adaptive", "--ray-address", "127.0.0.1:{open}"], "local back end"),
    (["validate", "mnist1d-small", "p.json", "--adaptive", "--png", "b.png"], "--png"),
]


@pytest.fixture(scope="module")
def checked(depl_cli, tmp_path_factory):
    """Each of CHECKED in a folder holding only p.json, one start-up for them all: the results, the ports, the
    folder."""
    import socket

    folder = tmp_path_factory.mktemp("checked")
    (folder / "p.json").write_text("{}")
    with socket.create_server(("127.0.0.1", 0)) as listening, socket.create_server(("127.0.0.1", 0)) as closed:
        ports = {"open": listening.getsockname()[1], "closed": closed.getsockname()[1]}
        closed.close()  # a port nobody answers on
        done = depl_cli.each([[*[a.format(**ports) for a in args], "--out", folder / "o"] for args, _ in CHECKED],
                             cwd=folder)
    return done, ports, folder


@pytest.mark.parametrize("i", range(len(CHECKED)), ids=[" ".join(args) for args, _ in CHECKED])
def test_options_are_checked_before_any_work(checked, i):
    done, ports, folder = checked
    line = _one_line_error(done[i])
    assert CHECKED[i][1].format(**ports) in line
    assert sorted(os.listdir(folder)) == ["p.json"]  # no run folder, no store (of any of them)
