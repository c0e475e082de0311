"""A workflow called from Python returns what its command prints and writes (depl.workflows).

The plan `depl plan --out` writes is the plan `depl.workflows.plan` returns,
`certified_by` included (mnist1d-noniid's calibration scores experiments);
a run of `depl run` trains the same losses into its store as
`depl.workflows.run`, which reports every epoch through its callback; `depl
validate --adaptive --json` prints `depl.workflows.validate_adaptive`'s result.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from depl import workflows
from depl.jsonout import dumps
from depl.plan import Plan
from depl.store import Store


def depl(*args, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "depl.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=600)


def without_time(plan: dict) -> dict:
    """A plan's JSON less its solve time (the one field two solves may differ in)."""
    return {k: v for k, v in plan.items() if k != "solve_seconds"}


def test_plan_from_python_is_the_plan_the_command_writes(tmp_path):
    r = depl("plan", "mnist1d-noniid", "--out", tmp_path / "cli.json", "--json")
    assert r.returncode == 0, r.stderr
    planned = workflows.plan("mnist1d-noniid", out=tmp_path / "api.json")
    written = json.loads((tmp_path / "cli.json").read_text())
    assert "held-out runs" in planned.plan.info["certified_by"]   # set by the workflow, not by the command
    assert without_time(planned.plan.to_json()) == without_time(written) == without_time(json.loads(r.stdout))
    assert without_time(Plan.load(tmp_path / "api.json").to_json()) == without_time(written)


def test_plan_refusals_are_workflow_errors_with_the_commands_message():
    with pytest.raises(workflows.Unreachable) as e:
        workflows.plan("paper-alexnet", loss=0.001)
    assert e.value.result["feasible"] is False and e.value.result["lowest_reachable_quantile"] > 0.001
    r = depl("plan", "paper-alexnet", "--loss", "0.001")
    assert r.returncode == 3 and str(e.value) in r.stderr.replace("\n", " ")
    with pytest.raises(workflows.BadInput, match="--method 'magic'"):
        workflows.plan("paper-alexnet", "magic")


@pytest.mark.slow
def test_run_from_python_trains_what_the_command_trains(tmp_path):
    pytest.importorskip("torch")
    plan_file = tmp_path / "plan.json"
    K = len(workflows.plan("digits-small", quantile=0.5, loss=1.0, out=plan_file).plan.epochs)  # a few epochs
    r = depl("run", plan_file, "--seeds", "2", "--out", tmp_path / "cli")
    assert r.returncode == 0, r.stderr
    seen = []
    done = workflows.run(plan_file, 2, out=tmp_path / "api", progress=lambda seed, epoch, loss: seen.append((seed, epoch)))
    assert isinstance(done, workflows.RunResult) and done.run_id in r.stdout
    assert sorted(seen) == [(s, k) for s in (0, 1) for k in range(1, K + 1)]
    with Store(tmp_path / "cli" / "runs.sqlite") as cli, Store(tmp_path / "api" / "runs.sqlite") as api:
        assert [x["run_id"] for x in cli.runs("plan")] == [x["run_id"] for x in api.runs("plan")] == [done.run_id]
        assert cli.losses(done.run_id) == api.losses(done.run_id) == done.store.losses(done.run_id)


@pytest.mark.slow
def test_validate_adaptive_from_python_judges_what_the_command_prints(tmp_path, monkeypatch):
    """`depl validate --adaptive --json` is `workflows.validate_adaptive`'s result, exit code aside: the same seeds
    (the plan's first free ones) trained by the closed loop into the same run, judged alike. (Each with its own
    seed book: in one book the second validation of the plan would take fresh seeds.)"""
    pytest.importorskip("torch")
    plan_file = tmp_path / "plan.json"
    workflows.plan("digits-small", quantile=0.5, loss=1.0, out=plan_file)
    r = depl("validate", "digits-small", plan_file, "--adaptive", "--seeds", "2", "--out", tmp_path / "cli", "--json")
    assert r.returncode in (0, 4), r.stderr
    started, seen = [], []
    monkeypatch.setenv("DEPL_SEED_LEDGER", str(tmp_path / "another-seed-book"))
    v = workflows.validate_adaptive("digits-small", plan_file, 2, out=tmp_path / "api", started=started.append,
                                    progress=lambda seed, epoch, result, decision: seen.append((seed, decision)))
    assert [a.run_id for a in started] == [v.run_id] and v.run.seeds == started[0].seeds
    assert {seed for seed, _ in seen} == set(v.run.seeds) and all(not d.rest for s, d in seen if d.action == "stop")
    printed = json.loads(r.stdout)
    assert printed.pop("exit_code") == v.certificate.exit_code("promise") == (0 if v.certificate.verdict.not_refuted else 4)
    assert printed == json.loads(dumps(v.to_json()))   # strict JSON, as printed
