"""`depl coverage`, small but real: plans made, trained for real on held-out seeds, judged, written — and resumed.

One task (digits-small with a loose target, so its plan is a few epochs) and
a copy of it whose level law is deliberately optimistic (its floor far below
what the network reaches), so one cell's guarantee is refuted by real runs.
"""

import json
import sqlite3

import pytest
import tomli_w
from typer.testing import CliRunner

from depl.cli import app
from depl.ledger import lineage
from depl.plan import Plan
from depl.scenario import load_scenario, scenario_dict

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not


@pytest.fixture
def optimistic(tmp_path):
    """digits-small whose level law promises, after an epoch or two, a loss the network reaches only much later."""
    d = scenario_dict(load_scenario("digits-small"))
    d["name"] = "digits-optimistic"
    for m in d["models"]:
        m["level"].update(floor=0.005, scale=0.05)
    d["target"]["loss"] = 0.1
    path = tmp_path / "optimistic.toml"
    path.write_text(tomli_w.dumps(d), encoding="utf-8")
    return path


def coverage(out, optimistic, runs, *more):
    return CliRunner().invoke(app, ["coverage", "--tasks", f"digits-small:0.5,{optimistic}", "--omegas", "0.9,0.95",
                                    "--laws", "level,level-memory", "--out", str(out), "--workers", "1",
                                    "--runs", str(runs), *more], env={"COLUMNS": "250"})


def epochs(store):
    with sqlite3.connect(store) as db:
        return db.execute("SELECT run_id, seed, epoch, test_loss, finished FROM epochs ORDER BY 1, 2, 3").fetchall()


def test_the_table_is_made_from_real_runs_and_resumes_without_training_twice(tmp_path, optimistic):
    out = tmp_path / "cov"
    r = coverage(out, optimistic, 2)
    # the optimistic law is refuted by the real runs: exit 4, naming the cell
    assert r.exit_code == 4, r.output
    assert "refuted: digits-optimistic ω=0.9 level" in r.output

    table = json.loads((out / "coverage.json").read_text())
    # the held-out seeds: above every seed of the tasks' lineages (digits-small's calibration ends at 300063), in
    # `depl coverage`'s block (depl.ledger)
    first = lineage(load_scenario("digits-small")).default("coverage")
    assert first == 310_000 + 200_000
    assert table["format"] == "depl.coverage/1" and table["seeds"] == [first, first + 1]
    cells = {c["key"]: c for c in table["cells"]}
    assert len(cells) == 2 * 2 * 2
    # level-memory was not fitted for these scenarios: missing, and why
    for key in ("digits-small ω=0.9 level-memory", "digits-optimistic ω=0.95 level-memory"):
        assert "needs its own fit" in cells[key]["missing"] and cells[key]["verdict"] == "missing"
    planned = [c for c in cells.values() if not c["missing"]]
    assert len(planned) == 4
    finals = {}
    for run_id, seed, epoch, loss, _ in epochs(out / "runs.sqlite"):
        finals.setdefault(run_id, {})[seed] = loss  # rows in epoch order: the last is ℓ(K)
    for c in planned:
        # the plan file the cell wrote is a valid plan of its own scenario, with the cell's ω and law
        p = Plan.load(out / c["plan_file"])   # relative to coverage.json
        s = p.scenario_object()
        assert (p.omega, s.loss_model, p.cost, p.loss_quantile) == (c["omega"], c["law"], c["cost"], c["certified_quantile"])
        # judged on the store's runs: every held-out seed to the plan's last epoch
        final = finals[c["run_id"]]
        assert sorted(final) == [first, first + 1]
        assert c["runs"] == 2 and c["hits"] == sum(v <= p.loss_target for v in final.values())
    bad = cells["digits-optimistic ω=0.9 level"]
    assert bad["hits"] == 0 and bad["upper"] < 0.9 and bad["verdict"] == "refuted"
    # ω 0.9 and 0.95 of one task plan the same job here: one run, shared, and the table says so
    a, b = cells["digits-small ω=0.9 level"], cells["digits-small ω=0.95 level"]
    assert a["run_id"] == b["run_id"] and a["shares_with"] == [b["key"]]
    md = (out / "coverage.md").read_text()
    assert "depl coverage --tasks" in md and "**Shared runs.**" in md and "**Refuted cells:** digits-optimistic" in md
    assert "| digits-small | 0.9 | level | 0.5 |" in md

    (out / "coverage.md").write_text(md + "Notes by hand.\n")  # kept below the generated table when rewritten

    # resumed with more runs: only the new seed is trained; nothing already in the store is trained again
    before = epochs(out / "runs.sqlite")
    r = coverage(out, optimistic, 3)
    assert r.exit_code == 4, r.output
    after = epochs(out / "runs.sqlite")
    assert set(before) <= set(after)
    new = [row for row in after if row not in before]
    assert {row[1] for row in new} == {first + 2}
    one_per_run = {c["run_id"]: c["plan_file"] for c in planned}
    assert len(new) == sum(len(Plan.load(out / f).epochs) for f in one_per_run.values())
    assert all(c["runs"] == 3 for c in json.loads((out / "coverage.json").read_text())["cells"] if not c["missing"])
    md = (out / "coverage.md").read_text()
    assert md.endswith("Notes by hand.\n") and "| 3 | 0 (0.000) |" in md
    # and once more: nothing at all to train
    r = coverage(out, optimistic, 3)
    assert epochs(out / "runs.sqlite") == after and "already in" in r.output
    # a partial table of a bigger one: nothing trained, each cell judged on the runs the store has
    r = coverage(out, optimistic, 50, "--no-train")
    assert epochs(out / "runs.sqlite") == after
    table = json.loads((out / "coverage.json").read_text())
    assert not table["trained"] and {c["runs"] for c in table["cells"] if not c["missing"]} == {3}
    assert "**A partial table**" in (out / "coverage.md").read_text() and "--no-train" in table["command"]


@pytest.mark.parametrize("args, says", [
    (["--omegas", "0.9,1.5"], "--omegas 1.5: must be in [1e-6, 1 - 1e-6] (ω, as [target] quantile)"),
    (["--laws", "level,magic"], "--laws 'magic': choose among increments, level, level-memory, calibrated"),
    (["--tasks", "no-such-task"], "--tasks 'no-such-task'"),
    (["--tasks", "digits-small:abc"], "'abc' after ':' is not a loss target"),
])
def test_bad_input_exits_2_with_one_line(args, says, tmp_path):
    r = CliRunner().invoke(app, ["coverage", "--out", str(tmp_path / "o"), *args], env={"COLUMNS": "250"})
    assert r.exit_code == 2 and says in r.output and "Traceback" not in r.output
    assert not (tmp_path / "o").exists()  # refused before anything is written


def test_the_committed_table_is_what_the_command_makes_from_the_committed_runs(tmp_path):
    """docs/coverage.md's rows come from `depl coverage --no-train` on docs/certificate-store/coverage (a copy: the command
    writes beside its store): the built-ins' plans remade or reused, every cell judged on the runs stored."""
    import re
    import shutil
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "coverage.md").read_text(encoding="utf-8")
    command = re.search(r"^depl coverage (.*)$", doc, re.M).group(1).split()
    assert "--no-train" in command and "docs/certificate-store/coverage" in command
    store = tmp_path / "store"
    shutil.copytree(root / "docs" / "certificate-store" / "coverage", store)
    args = [a.replace("docs/certificate-store/coverage", str(store)).replace("docs/coverage.md", str(tmp_path / "c.md"))
            for a in command]
    r = CliRunner().invoke(app, ["coverage", *args], env={"COLUMNS": "250"})
    assert r.exit_code in (0, 4), r.output
    rows = lambda text: [line for line in text.splitlines() if line.startswith("| ")]  # noqa: E731
    made = (tmp_path / "c.md").read_text(encoding="utf-8")
    assert rows(made) and rows(made) == rows(doc.split("<!-- written by hand")[0])
    # exit 4 exactly when the table names refuted cells
    assert (r.exit_code == 4) == ("**Refuted cells:**" in made)


def test_the_closed_loops_table_is_what_its_script_makes_from_the_committed_runs(tmp_path):
    """docs/adaptive.md's table of adaptive runs comes from scripts/adaptive_table.py on docs/adaptive-store (a
    copy, `--stored`: the runs each cell's store holds, judged without training — they were made by the rule of
    2026-11, whose δ was the point estimate V₀ − ω; a run by today's rule is another run), paired with the open
    loop's runs in docs/coverage-store."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    store = tmp_path / "store"
    shutil.copytree(root / "docs" / "adaptive-store", store)
    r = subprocess.run([sys.executable, str(root / "scripts" / "adaptive_table.py"), "--out", str(store), "--stored",
                        "--md", str(tmp_path / "t.md")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = lambda text: [line for line in text.splitlines() if line.startswith("| ")]  # noqa: E731
    made = rows((tmp_path / "t.md").read_text(encoding="utf-8"))
    doc = (root / "docs" / "adaptive.md").read_text(encoding="utf-8")
    assert len(made) == 7 and set(made) <= set(rows(doc))   # the header and the 6 cells
    assert "| holds |" in made[1] and "**refuted**" not in "".join(made)


def test_a_cell_the_calibration_cannot_certify_says_how_many_runs_would(tmp_path):
    """mnist1d-small at ω 0.95: its 64 calibration runs per experiment cannot reach ω at α/3, and the missing cell
    says so with the runs it would take (as `depl plan` does); at ω 0.9 the cell's plan names its certificate."""
    from depl.experiments.coverage import parse_task, plan_cell

    task = parse_task("mnist1d-small")
    cell, plan = plan_cell(task, 0.95, "calibrated", tmp_path)
    assert plan is None and cell.verdict == "missing"
    assert "certify no schedule" in cell.missing and "a certificate takes ≥ 80 runs" in cell.missing
    cell, plan = plan_cell(task, 0.9, "calibrated", tmp_path)
    assert plan is not None and "certified P ≥ 0.9 with confidence 0.95" in cell.certified_by
