"""The command line as a user runs it: real processes, exit codes, files."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

DEPL = [sys.executable, "-m", "depl.cli"]
KEYS = {"format", "method", "scenario", "feasible", "datasets", "epochs", "cost", "time",
        "loss_quantile", "loss_mean", "solve_seconds"}


def run(*args, cwd=None):
    env = {**os.environ, "COLUMNS": "200", "MPLBACKEND": "Agg"}
    return subprocess.run([*DEPL, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


def test_scenarios_lists_the_builtins():
    r = run("scenarios")
    assert r.returncode == 0
    assert "paper-alexnet" in r.stdout and "paper-mobilenet" in r.stdout


def test_plan_then_simulate(tmp_path):
    out = tmp_path / "plan.json"
    r = run("plan", "paper-mobilenet", "--method", "depl", "--out", str(out))
    assert r.returncode == 0, r.stderr
    for words in ["datasets: cifar10", "cost", "solve time", "0.99-quantile", "expected"]:
        assert words in r.stdout
    plan = json.loads(out.read_text())
    assert KEYS <= set(plan) and plan["format"] == "depl.plan/1" and plan["feasible"] is True
    assert plan["scenario"] == "paper-mobilenet"
    assert [e["epoch"] for e in plan["epochs"]] == list(range(1, len(plan["epochs"]) + 1))
    assert set(plan["epochs"][0]) == {"epoch", "model", "cluster", "compute"}
    png = tmp_path / "band.png"
    r = run("simulate", str(out), "--runs", "5000", "--png", str(png), "--seed", "3")
    assert r.returncode == 0, r.stderr
    assert "P(ℓ(K) ≤ 9)" in r.stdout and "not refuted" in r.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    again = run("simulate", str(out), "--runs", "5000", "--png", str(png), "--seed", "3")
    assert again.stdout == r.stdout  # same seed, same numbers


@pytest.mark.parametrize("method", ["optimal", "best-exp"])
def test_other_methods_from_a_toml_path(tmp_path, method):
    from importlib import resources

    src = resources.files("depl.scenarios").joinpath("paper-alexnet.toml").read_text()
    p = tmp_path / "mine.toml"
    p.write_text(src.replace("loss = 9.0", "loss = 12.0").replace('name = "paper-alexnet"', 'name = "mine"'))
    r = run("plan", str(p), "--method", method, "--out", str(tmp_path / "p.json"))
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "p.json").read_text())["method"] == method


def test_simulate_of_a_calibrated_plan_shows_infinite_epochs_as_infinite_and_warns_nothing(tmp_path):
    """mnist1d-small ships calibrated; at its plan's early epochs some calibration runs lay above every loss the law
    allows, so some Monte Carlo runs are +∞ there: the band's mean and 99th percentile are +∞ (not NaN, with
    numpy's "invalid value" on stderr), the text and the plot say at which epochs and draw the rest, and the
    JSON writes +∞ as null — only there — and lists those epochs."""
    plan = tmp_path / "plan.json"
    assert run("plan", "mnist1d-small", "--out", str(plan)).returncode == 0
    png = tmp_path / "band.png"
    r = run("simulate", str(plan), "--runs", "2000", "--png", str(png), "--json")
    assert r.returncode == 0, r.stderr
    assert "Warning" not in r.stderr and "invalid value" not in r.stderr
    band = json.loads(r.stdout)["band"]
    inf = band["infinite"]
    assert inf["mean"][0] == 1 and inf["high"] and inf["low"] == []
    for key in ("mean", "low", "high"):
        assert [k for k, x in enumerate(band[key]) if x is None] == inf[key]     # null is +∞, and only +∞
    assert band["mean"][-1] is not None and png.stat().st_size > 10_000
    r = run("simulate", str(plan), "--runs", "2000", "--png", str(png))
    assert r.returncode == 0 and "Warning" not in r.stderr
    assert f"mean +∞ at epochs 1–{inf['mean'][-1]}" in r.stdout and "drawn where finite" in r.stdout


def test_bad_scenario_exits_2_with_one_message(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text('name = "x"\ninitial_loss = 10.0\n[target]\nloss = 5.0\nquantile = 2.0\ndeadline = 10.0\n')
    r = run("plan", str(p))
    assert r.returncode == 2
    assert str(p) in r.stderr and "target.quantile = 2.0" in r.stderr
    assert "Traceback" not in r.stderr


def test_unknown_method_exits_2():
    r = run("plan", "paper-alexnet", "--method", "magic")
    assert r.returncode == 2 and "magic" in r.stderr


def test_infeasible_target_exits_3_and_says_what_is_reachable(tmp_path):
    from importlib import resources

    src = resources.files("depl.scenarios").joinpath("paper-alexnet.toml").read_text()
    p = tmp_path / "hard.toml"
    p.write_text(src.replace("loss = 9.0", "loss = 1.0").replace("deadline = 60000.0", "deadline = 20000.0"))
    r = run("plan", str(p), "--eta", "60")
    assert r.returncode == 3
    assert "lowest reachable 0.99-quantile" in r.stderr
    assert "Traceback" not in r.stderr


def test_simulate_bad_plan_file_exits_2(tmp_path):
    p = tmp_path / "p.json"
    p.write_text('{"format": "other"}')
    r = run("simulate", str(p))
    assert r.returncode == 2 and "depl.plan/1" in r.stderr
    r = run("simulate", str(tmp_path / "missing.json"))
    assert r.returncode == 2 and "no such plan file" in r.stderr


def test_names_that_look_like_markup_are_printed_verbatim(tmp_path):
    from importlib import resources

    src = resources.files("depl.scenarios").joinpath("paper-alexnet.toml").read_text()
    # a scenario with markup-like names plans, and prints them as they are
    p = tmp_path / "marked.toml"
    p.write_text(src.replace('name = "A1"', 'name = "[/bold]"').replace('"A1"', '"[/bold]"')
                 .replace('name = "paper-alexnet"', 'name = "[/]"').replace('"slow-steady"', '"[/x]"')
                 .replace('"fast-unsteady"', '"[/y]"').replace('"intermediate"', '"[red]"'))
    r = run("plan", str(p), "--eta", "40")
    assert r.returncode == 0, r.stderr
    k_line = next(line for line in r.stdout.splitlines() if "K = " in line)
    assert "plan for [/]:" in r.stdout and "[/" in k_line.split("epochs:")[1] and "MarkupError" not in r.stderr
    # an error message quoting such a name keeps every bracket
    bad = tmp_path / "bad.toml"
    bad.write_text(src.replace('name = "A2"', 'name = "[/bold]"').replace('name = "A1"', 'name = "[/bold]"'))
    r = run("plan", str(bad))
    assert r.returncode == 2 and "'[/bold]'" in r.stderr and "Traceback" not in r.stderr
    share = tmp_path / "share.toml"
    share.write_text(src.replace('name = "cifar10"', 'name = "cifar10"\nshare = [0.7, 0.5]', 1))
    r = run("plan", str(share))
    assert r.returncode == 2 and "[0.7, 0.5]" in r.stderr


@pytest.mark.parametrize("args,fragment", [
    (["simulate", "x.json", "--runs", "1000000000"], "--runs"),
    (["simulate", "x.json", "--seed", "-1"], "--seed"),
    (["plan", "paper-alexnet", "--out", "no/such/folder/p.json"], "does not exist"),
    (["fit", "x.sqlite", "--omega", "1.5"], "--omega"),
    (["run", "x.json", "--seeds", "1000000000"], "--seeds"),
    (["run", "x.json", "--first-seed", str(10**20)], "--first-seed"),
])
def test_out_of_range_arguments_exit_2_before_any_work(tmp_path, args, fragment):
    r = run(*args, cwd=tmp_path)
    assert r.returncode == 2 and fragment in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not any(tmp_path.iterdir())  # nothing written
