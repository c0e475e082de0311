"""The command line as a user runs it: real processes, exit codes, files."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

KEYS = {"format", "method", "scenario", "feasible", "datasets", "epochs", "cost", "time",
        "loss_quantile", "loss_mean", "solve_seconds"}


def test_scenarios_lists_the_builtins(depl_cli):
    r = depl_cli("scenarios")
    assert r.returncode == 0
    assert "paper-alexnet" in r.stdout and "paper-mobilenet" in r.stdout


def test_plan_then_simulate(depl_cli, tmp_path):
    out, png = tmp_path / "plan.json", tmp_path / "band.png"
    # the plan and its simulation in one start-up, each from main(); the simulation again in a process of its own
    r, simulated = depl_cli.each([["plan", "paper-mobilenet", "--method", "depl", "--out", out],
                                  ["simulate", out, "--runs", "5000", "--png", png, "--seed", "3"]])
    assert r.returncode == 0, r.stderr
    for words in ["datasets: cifar10", "cost", "solve time", "0.99-quantile", "expected"]:
        assert words in r.stdout
    plan = json.loads(out.read_text())
    assert KEYS <= set(plan) and plan["format"] == "depl.plan/1" and plan["feasible"] is True
    assert plan["scenario"] == "paper-mobilenet"
    assert [e["epoch"] for e in plan["epochs"]] == list(range(1, len(plan["epochs"]) + 1))
    assert set(plan["epochs"][0]) == {"epoch", "model", "cluster", "compute"}
    r = simulated
    assert r.returncode == 0, r.stderr
    assert "P(ℓ(K) ≤ 9)" in r.stdout and ("law's Monte Carlo: holds" in r.stdout or "undecided" in r.stdout)
    verdict = r.stdout.split("law's Monte Carlo:")[1].splitlines()[0]
    assert "certified" not in verdict   # a word kept for real runs
    assert "one-sided 95 % lower bound" in verdict or "one-sided 95 % bounds" in verdict  # the bound it tests
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    again = depl_cli("simulate", str(out), "--runs", "5000", "--png", str(png), "--seed", "3")
    assert again.stdout == r.stdout  # same seed, same numbers


def test_simulate_judges_at_the_plans_alpha(depl_cli, tmp_path):
    """A plan made at α = 0.01 is judged by its Monte Carlo at one-sided 99 % bounds, the bound beside the verdict."""
    out, png = tmp_path / "plan.json", tmp_path / "band.png"
    planned, r, text = depl_cli.each([["plan", "paper-mobilenet", "--alpha", "0.01", "--out", out],
                                      ["simulate", out, "--runs", "2000", "--png", png, "--json"],
                                      ["simulate", out, "--runs", "2000", "--png", png]])
    assert planned.returncode == 0, planned.stderr
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["alpha"] == 0.01 and d["p_meet_ci"][0] >= 0.99 and d["verdict"] == "holds"   # as the text says
    r = text
    assert f"holds (one-sided 99 % lower bound {d['p_meet_ci'][0]:.4f} ≥ ω = 0.99" in r.stdout


def test_plan_help_says_max_runs_counts_runs_per_candidate_not_runs_trained(depl_cli):
    r = depl_cli("plan", "--help", env={"COLUMNS": "400"})
    said = " ".join(r.stdout.split())
    assert "the most runs each candidate's test counts" in said and "not the runs trained" in said


@pytest.mark.parametrize("method", ["optimal", "best-exp"])
def test_other_methods_from_a_toml_path(depl_cli, tmp_path, method):
    from importlib import resources

    src = resources.files("depl.scenarios").joinpath("paper-alexnet.toml").read_text()
    p = tmp_path / "mine.toml"
    p.write_text(src.replace("loss = 9.0", "loss = 12.0").replace('name = "paper-alexnet"', 'name = "mine"'))
    r = depl_cli("plan", str(p), "--method", method, "--out", str(tmp_path / "p.json"))
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "p.json").read_text())["method"] == method


def test_simulate_of_a_calibrated_plan_shows_infinite_epochs_as_infinite_and_warns_nothing(depl_cli, tmp_path):
    """mnist1d-small's pooled calibration scores (its experiments' left out: the plan is read at the marginal rank)
    lie above every loss the law allows for some runs at epoch 1, so some Monte Carlo runs are +∞ there: the band's
    mean and 99th percentile are +∞ (not NaN, with numpy's "invalid value" on stderr), the text and the plot say
    at which epochs and draw the rest, and the JSON writes +∞ as null — only there — and lists those epochs."""
    from depl.fit.report import toml_dumps
    from depl.scenario import load_scenario, scenario_dict

    d = scenario_dict(load_scenario("mnist1d-small"))
    d["calibration"].pop("experiments")
    pooled = tmp_path / "pooled.toml"
    pooled.write_text(toml_dumps(d))
    plan, png = tmp_path / "plan.json", tmp_path / "band.png"
    r, as_json, text = depl_cli.each([["plan", pooled, "--out", plan],
                                      ["simulate", plan, "--runs", "2000", "--png", png, "--json"],
                                      ["simulate", plan, "--runs", "2000", "--png", png]])
    assert r.returncode == 0 and "not certified yet" in r.stdout, r.stderr
    r = as_json
    assert r.returncode == 0, r.stderr
    assert "Warning" not in r.stderr and "invalid value" not in r.stderr
    band = json.loads(r.stdout)["band"]
    inf = band["infinite"]
    assert inf["mean"][0] == 1 and inf["high"] and inf["low"] == []
    for key in ("mean", "low", "high"):
        assert [k for k, x in enumerate(band[key]) if x is None] == inf[key]     # null is +∞, and only +∞
    assert any(x is not None for x in band["mean"]) and png.stat().st_size > 10_000   # the rest is drawn
    r = text
    assert r.returncode == 0 and "Warning" not in r.stderr
    m = inf["mean"]
    shown = "1" if m == [1] else ", ".join(map(str, m)) if len(m) > 1 and m[1] > 2 else \
        f"1–{m[-1]}"   # one epoch as itself, a run of epochs as a range, others one by one
    assert f"mean +∞ at epoch{'s' * (len(inf['mean']) > 1)} {shown}" in r.stdout and "drawn where finite" in r.stdout


def test_bad_scenario_exits_2_with_one_message(depl_cli, tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text('name = "x"\ninitial_loss = 10.0\n[target]\nloss = 5.0\nquantile = 2.0\ndeadline = 10.0\n')
    r = depl_cli("plan", str(p))
    assert r.returncode == 2
    assert str(p) in r.stderr and "target.quantile = 2.0" in r.stderr
    assert "Traceback" not in r.stderr


def test_unknown_method_exits_2(depl_cli):
    r = depl_cli("plan", "paper-alexnet", "--method", "magic")
    assert r.returncode == 2 and "magic" in r.stderr


def test_infeasible_target_exits_3_and_says_what_is_reachable(depl_cli, tmp_path):
    from importlib import resources

    src = resources.files("depl.scenarios").joinpath("paper-alexnet.toml").read_text()
    p = tmp_path / "hard.toml"
    p.write_text(src.replace("loss = 9.0", "loss = 1.0").replace("deadline = 60000.0", "deadline = 20000.0"))
    r = depl_cli("plan", str(p), "--eta", "60")
    assert r.returncode == 3
    assert "lowest reachable 0.99-quantile" in r.stderr
    assert "Traceback" not in r.stderr


def test_simulate_bad_plan_file_exits_2(depl_cli, tmp_path):
    p = tmp_path / "p.json"
    p.write_text('{"format": "other"}')
    r, missing = depl_cli.each([["simulate", p], ["simulate", tmp_path / "missing.json"]])
    assert r.returncode == 2 and "depl.plan/1" in r.stderr
    r = missing
    assert r.returncode == 2 and "no such plan file" in r.stderr


def test_names_that_look_like_markup_are_printed_verbatim(depl_cli, tmp_path):
    from importlib import resources

    src = resources.files("depl.scenarios").joinpath("paper-alexnet.toml").read_text()
    # a scenario with markup-like names plans, and prints them as they are
    p = tmp_path / "marked.toml"
    p.write_text(src.replace('name = "A1"', 'name = "[/bold]"').replace('"A1"', '"[/bold]"')
                 .replace('name = "paper-alexnet"', 'name = "[/]"').replace('"slow-steady"', '"[/x]"')
                 .replace('"fast-unsteady"', '"[/y]"').replace('"intermediate"', '"[red]"'))
    # an error message quoting such a name keeps every bracket
    bad = tmp_path / "bad.toml"
    bad.write_text(src.replace('name = "A2"', 'name = "[/bold]"').replace('name = "A1"', 'name = "[/bold]"'))
    share = tmp_path / "share.toml"
    share.write_text(src.replace('name = "cifar10"', 'name = "cifar10"\nshare = [0.7, 0.5]', 1))
    r, refused, shared = depl_cli.each([["plan", p, "--eta", "40"], ["plan", bad], ["plan", share]])
    assert r.returncode == 0, r.stderr
    k_line = next(line for line in r.stdout.splitlines() if "K = " in line)
    assert "plan for [/]:" in r.stdout and "[/" in k_line.split("epochs:")[1] and "MarkupError" not in r.stderr
    r = refused
    assert r.returncode == 2 and "'[/bold]'" in r.stderr and "Traceback" not in r.stderr
    r = shared
    assert r.returncode == 2 and "[0.7, 0.5]" in r.stderr


@pytest.mark.parametrize("args,fragment", [
    (["simulate", "x.json", "--runs", "1000000000"], "--runs"),
    (["simulate", "x.json", "--seed", "-1"], "--seed"),
    (["plan", "paper-alexnet", "--out", "no/such/folder/p.json"], "does not exist"),
    (["fit", "x.sqlite", "--omega", "1.5"], "--omega"),
    (["run", "x.json", "--seeds", "1000000000"], "--seeds"),
    (["run", "x.json", "--first-seed", str(10**20)], "--first-seed"),
])
def test_out_of_range_arguments_exit_2_before_any_work(depl_cli, tmp_path, args, fragment):
    r = depl_cli(*args, cwd=tmp_path)
    assert r.returncode == 2 and fragment in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not any(tmp_path.iterdir())  # nothing written


# Run as `depl` with every distribution that pyproject's `dependencies` do not declare out of depl's reach: an
# import made by depl's own code of anything but the standard library, depl and a declared dependency fails as
# on a plain `pip install depl` (typer's own imports are typer's business). `import click` in depl passed on a
# typer that brought click along, and crashed every command where typer no longer installs it.
PLAIN_INSTALL = r'''
import builtins, re, sys, tomllib
from importlib.metadata import packages_distributions

deps = tomllib.load(open(PYPROJECT, "rb"))["project"]["dependencies"]
declared = {re.split(r"[\s\[<>=!~;]", d, maxsplit=1)[0].lower().replace("_", "-") for d in deps}
where = packages_distributions()
ok = set(sys.stdlib_module_names) | {"depl"}
real_import = builtins.__import__

def plain_import(name, globals=None, locals=None, fromlist=(), level=0):
    top = name.partition(".")[0]
    if level == 0 and (globals or {}).get("__name__", "").partition(".")[0] == "depl" and top not in ok \
            and not any(d.lower().replace("_", "-") in declared for d in where.get(top, [])):
        print(f"undeclared import: {globals['__name__']} imports {name}", file=sys.stderr)
        raise ModuleNotFoundError(f"No module named {top!r} (not a declared dependency)", name=top)
    return real_import(name, globals, locals, fromlist, level)

builtins.__import__ = plain_import
'''


@pytest.mark.slow
def test_the_planning_commands_need_nothing_undeclared(depl_cli, tmp_path):
    from functools import partial
    from pathlib import Path

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    # the commands one after another in one start-up under the guard (a module is imported once: by the first
    # command that needs it), the training command last
    plain = partial(depl_cli.each, cwd=tmp_path, prelude=PLAIN_INSTALL.replace("PYPROJECT", repr(str(pyproject))))

    plan = tmp_path / "p.json"
    commands = (["--version"], ["--help"], ["scenarios"], ["plan", "paper-alexnet", "--out", str(plan)],
                ["simulate", str(plan), "--runs", "1000"], ["predict", "paper-alexnet", "fast-unsteady:10,intermediate:6"],
                ["plan", "--help"])
    *done, r = plain([*commands, ["run", str(plan), "--seeds", "1", "--out", str(tmp_path / "o")]])
    for args, ok in zip(commands, done):
        assert ok.returncode == 0 and "undeclared import" not in ok.stderr, (args, ok.stderr[-2000:])
    # the guard does refuse: a training command reaches for torch, declared by the `train` extra only
    assert r.returncode == 2 and "depl[train]" in r.stderr and "undeclared import" in r.stderr, r.stderr


def test_python_m_depl_and_version(depl_cli):
    from importlib.metadata import version

    r = subprocess.run([sys.executable, "-m", "depl", "--version"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == f"depl {version('depl')}", (r.stdout, r.stderr)
    r = subprocess.run([sys.executable, "-m", "depl", "scenarios"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "paper-alexnet" in r.stdout
    assert "--version" in depl_cli("--help").stdout


def test_every_import_of_depl_is_a_declared_dependency():
    """Each module depl's code imports (at the top or inside a function) is the standard library's, depl's, or a
    distribution pyproject declares: in `dependencies` or an extra (one reached only through another's, as Ray
    through flwr[simulation], is declared too). Modules not installed here cannot be told apart: left out."""
    import ast
    import re
    import tomllib
    from importlib.metadata import packages_distributions
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    declared = {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower().replace("_", "-") for r in reqs}
    where = packages_distributions()
    undeclared = set()
    for f in (root / "src" / "depl").rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
            for name in names:
                top = name.partition(".")[0]
                dists = {d.lower().replace("_", "-") for d in where.get(top, [])}
                if top not in sys.stdlib_module_names and top != "depl" and dists and not dists & declared:
                    undeclared.add(f"{f.relative_to(root)}: {name} ({', '.join(sorted(dists))})")
    assert not undeclared, sorted(undeclared)


def test_an_infeasible_plan_says_an_earlier_plan_at_out_is_left_as_it_was(depl_cli, tmp_path):
    out = tmp_path / "p.json"
    made, refused = depl_cli.each([["plan", "paper-alexnet", "--out", out],
                                   ["plan", "paper-alexnet", "--deadline", "10", "--out", out, "--json"]])
    assert made.returncode == 0, made.stderr
    before = out.read_text()
    assert refused.returncode == 3 and out.read_text() == before
    said = json.loads(refused.stdout)["reason"]
    assert said.endswith(f"No plan written: {out} is an earlier call's, left as it was.") and said in refused.stderr
