"""A newcomer's first steps, each answered with what to do next: the file, the field, the value and why."""

from __future__ import annotations

import json


def test_a_plan_without_its_scenario_names_the_file_the_field_and_what_to_do(tmp_path, depl_cli):
    r = depl_cli("plan", "paper-alexnet", "--out", "p.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    d = json.loads((tmp_path / "p.json").read_text())
    d.pop("scenario_spec")
    d["scenario"] = "my-cancer-fitted"
    (tmp_path / "nospec.json").write_text(json.dumps(d))
    r = depl_cli("simulate", "nospec.json", "--runs", "100", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "nospec.json: scenario_spec: missing" in r.stderr and "depl plan SCENARIO --out" in r.stderr


def test_a_planning_only_plan_does_not_send_the_user_to_certify_it(tmp_path, depl_cli):
    """paper-alexnet trains on CIFAR-10, read from the user's disk: the plan says so instead of suggesting
    `depl certify`, which would stop at the missing folder."""
    r = depl_cli("plan", "paper-alexnet", "--out", "demo-plan.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "depl certify" not in r.stdout and "give dataset 'cifar10' a `path`" in r.stdout
