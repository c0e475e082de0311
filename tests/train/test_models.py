"""The trained models `depl run` keeps: one per seed in OUT/models/RUN_ID, loaded back by `depl.load_model` (its
test loss recomputed on the run's own test data is the stored one), listed by `depl runs models`, exported by
`depl export-model` as a program that loads without depl; kept bit for bit by a resumed run; --keep-models."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import depl
from depl.plan import Plan
from depl.store import Store
from depl.train.federation import evaluate, job_from_plan
from depl.train.federation import test_data as run_test_data
from depl.train.prune import make_net


def finals(folder) -> dict[int, float]:
    with Store(folder / "runs.sqlite") as st:
        (run,) = st.runs("plan")
        return {s: v[-1] for s, v in st.losses(run["run_id"]).items()}


def model_files(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((folder / "models").rglob("seed-*"))}


@pytest.fixture(scope="module")
def digits(depl_cli, tmp_path_factory):
    """digits-small's default plan run for 2 seeds (worker processes: the default with two cores or more)."""
    folder = tmp_path_factory.mktemp("models")
    r = depl_cli("plan", "digits-small", "--out", "p.json", cwd=folder)
    assert r.returncode == 0, r.stderr
    r = depl_cli("run", "p.json", "--seeds", "2", "--out", "r", "--workers", "2", cwd=folder)
    assert r.returncode == 0, r.stderr
    assert "models (all)" in r.stdout and "2 written now" in r.stdout
    return folder


def test_a_run_keeps_every_seeds_model_and_it_loads_with_the_stored_test_loss(digits):
    run = digits / "r"
    (run_dir,) = (run / "models").iterdir()
    assert sorted(p.name for p in run_dir.iterdir()) == ["seed-0.json", "seed-0.pt", "seed-1.json", "seed-1.pt"]
    stored = finals(run)
    job = job_from_plan(Plan.load(digits / "p.json"))
    for seed in (0, 1):
        model = depl.load_model(run, seed=seed)
        assert isinstance(model, torch.nn.Module) and not model.training
        x, y = run_test_data(job.seeded(seed).data)   # the run's own test data for that seed
        loss, acc = evaluate(model, x, y)
        side = json.loads((run_dir / f"seed-{seed}.json").read_text())
        assert loss == pytest.approx(side["final_test_loss"], abs=1e-6)
        assert side["final_test_loss"] == pytest.approx(stored[seed], abs=1e-12)
        assert acc == pytest.approx(side["final_test_accuracy"], abs=1e-9)
        assert side["plan"]["file"] == "p.json" and side["plan"]["scenario"] == "digits-small"
        assert side["seed"] == seed and side["epochs"] == len(job.epochs)
        assert side["parameters"] == sum(p.numel() for p in model.parameters())
    # the two seeds' models differ: each file is its own seed's
    a, b = depl.load_model(run, seed=0), depl.load_model(run, seed=1)
    assert not torch.equal(next(a.parameters()), next(b.parameters()))


def test_a_changed_model_file_is_refused(digits, tmp_path):
    import shutil

    from depl.workflows import BadInput

    copy = tmp_path / "copy"
    shutil.copytree(digits / "r" / "models", copy / "models")
    (pt,) = copy.rglob("seed-0.pt")
    pt.write_bytes(pt.read_bytes()[:-1] + b"x")
    with pytest.raises(BadInput, match="SHA-256"):
        depl.load_model(copy, seed=0)


def test_the_model_file_is_plain_data(digits):
    (pt,) = (digits / "r" / "models").rglob("seed-0.pt")
    content = torch.load(pt, weights_only=True)
    assert set(content) >= {"format", "state_dict", "layers", "spec", "seed", "version"}
    assert all(isinstance(v, torch.Tensor) for v in content["state_dict"].values())
    # the pruned version's sizes are recorded: fewer channels than the full network's
    spec = content["spec"]
    assert spec["ratio"] == 0.5 and content["layers"]["features.0"]["out_channels"] == round(0.5 * spec["width"])


def test_runs_models_lists_them_as_json(depl_cli, digits):
    r = depl_cli("runs", "models", "r", "--json", cwd=digits)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert [m["seed"] for m in got["models"]] == [0, 1]
    stored = finals(digits / "r")
    for m in got["models"]:
        assert m["final_test_loss"] == pytest.approx(stored[m["seed"]], abs=1e-12)
        assert m["version"] == "pruned-0.5" and m["parameters"] > 0 and m["path"].endswith(f"seed-{m['seed']}.pt")
    table = depl_cli("runs", "models", "r", cwd=digits)
    assert table.returncode == 0 and "pruned-0.5" in table.stdout


def test_export_model_loads_in_an_interpreter_without_depl(depl_cli, digits, tmp_path):
    r = depl_cli("export-model", "r", "--seed", "1", "--out", tmp_path / "m.pt2", "--json", cwd=digits)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["dynamic_batch"] is True
    job = job_from_plan(Plan.load(digits / "p.json"))
    x = run_test_data(job.data)[0][:7]
    torch.save({"x": x, "want": depl.load_model(digits / "r", seed=1)(x).detach()}, tmp_path / "io.pt")
    check = ("import importlib.util, os, sys\n"
             "sys.path = [p for p in sys.path if not os.path.isdir(os.path.join(p, 'depl'))]  # no src, no install\n"
             "assert importlib.util.find_spec('depl') is None, sys.path\n"
             "sys.modules['depl'] = None  # and any import of depl fails\n"
             "import torch\n"
             f"io = torch.load({str(tmp_path / 'io.pt')!r}, weights_only=True)\n"
             f"m = torch.export.load({str(tmp_path / 'm.pt2')!r}).module()\n"
             "got = m(io['x'])\n"
             "assert torch.allclose(got, io['want'], atol=1e-5), (got - io['want']).abs().max()\n"
             "print('ok', tuple(got.shape))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-I", "-c", check], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok (7, 10)"


def test_a_resumed_run_keeps_the_finished_models_bit_for_bit(depl_cli, digits):
    before = model_files(digits / "r")
    stamps = {p.name: p.stat().st_mtime_ns for p in (digits / "r" / "models").rglob("seed-*")}
    r = depl_cli("run", "p.json", "--seeds", "3", "--out", "r", cwd=digits)
    assert r.returncode == 0, r.stderr
    after = model_files(digits / "r")
    assert set(after) == set(before) | {"seed-2.pt", "seed-2.json"}
    assert all(after[k] == v for k, v in before.items())
    assert all(p.stat().st_mtime_ns == stamps[p.name] for p in (digits / "r" / "models").rglob("seed-*")
               if p.name in stamps)


def test_a_stacked_batch_unstacks_each_seeds_pruned_model(depl_cli, plan_file, tmp_path):
    """The switch plan (full → half → quarter) as one stack of 3 seeds in this process."""
    out = tmp_path / "s"
    r = depl_cli("run", plan_file, "--seeds", "3", "--seed-batch", "3", "--workers", "1", "--out", out)
    assert r.returncode == 0, r.stderr
    assert "stacks of 3 seeds" in r.stdout
    stored = finals(out)
    job = job_from_plan(Plan.load(plan_file))
    x, y = run_test_data(job.data)
    for seed in range(3):
        model = depl.load_model(out, seed=seed)
        assert [m.out_channels for m in model.features if hasattr(m, "out_channels")] == [4, 4, 4]  # 16 × 0.25
        loss, _ = evaluate(model, x, y)
        assert loss == pytest.approx(stored[seed], abs=1e-6)   # the stack evaluates with its own kernels: ~1e-7 apart


def test_keep_models_best_and_none(depl_cli, plan_file, tmp_path):
    r = depl_cli("run", plan_file, "--seeds", "3", "--keep-models", "best", "--out", tmp_path / "b")
    assert r.returncode == 0, r.stderr
    stored = finals(tmp_path / "b")
    best = min(stored, key=lambda s: (stored[s], s))
    assert sorted(model_files(tmp_path / "b")) == [f"seed-{best}.json", f"seed-{best}.pt"]
    r = depl_cli("run", plan_file, "--seeds", "2", "--keep-models", "none", "--out", tmp_path / "n")
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "n" / "models").exists()
    r = depl_cli("runs", "models", tmp_path / "n")
    assert r.returncode == 2 and "no trained models" in r.stderr and "Traceback" not in r.stderr


def test_the_default_is_all_up_to_16_seeds_then_best(depl_cli):
    from depl.train.models import default_keep

    assert (default_keep(16), default_keep(17)) == ("all", "best")
    r = depl_cli("run", "--help", env={"COLUMNS": "400"})
    assert "all for up to 16 seeds" in r.stdout


def test_a_missing_model_is_refused_in_one_line(depl_cli, digits, tmp_path):
    r = depl_cli("export-model", "r", "--seed", "9", "--out", tmp_path / "x.pt2", cwd=digits)
    assert r.returncode == 2 and "no model of seed 9" in r.stderr and "Traceback" not in r.stderr
    r = depl_cli("export-model", "r", "--seed", "0", "--out", tmp_path / "x.onnx", "--format", "onnx", cwd=digits)
    try:
        import onnx  # noqa: F401
    except ImportError:
        assert r.returncode == 2 and "onnx" in r.stderr and "Traceback" not in r.stderr
    from depl.workflows import BadInput

    r = depl_cli("export-model", "r", "--seed", "0", "--out", tmp_path, cwd=digits)   # a folder
    assert r.returncode == 2 and "is a folder" in r.stderr and "Traceback" not in r.stderr
    r = depl_cli("runs", "models", tmp_path / "nowhere", "--json")
    assert r.returncode == 2 and json.loads(r.stdout)["exit_code"] == 2
    with pytest.raises(BadInput, match="no model of seed 9"):
        depl.load_model(digits / "r", seed=9)


def test_planning_never_imports_torch_for_load_model():
    r = subprocess.run([sys.executable, "-c", "import sys, depl; f = depl.load_model; "
                        "print('torch' in sys.modules, callable(f))"], capture_output=True, text=True)
    assert r.stdout.split() == ["False", "True"], r.stderr


def test_your_own_networks_model_loads_only_from_allowed_unchanged_code(depl_cli, tmp_path, monkeypatch):
    """The tutorial's network (net = "mymodel:make_net"), pruned: loaded with allow_code, refused without it or
    once its file changed."""
    from test_own_code import write_project

    from depl.plan import Epoch, with_figures
    from depl.scenario import load_scenario
    from depl.workflows import BadInput

    project = write_project(tmp_path / "project")
    monkeypatch.delenv("DEPL_CODE", raising=False)
    s = load_scenario(project / "my-digits.toml")
    version = s.models[-1].name   # the tutorial's most pruned version
    p = with_figures(Plan("hand", s.name, True, ["a"], [Epoch(1, version, "edge", 1.0)], 0, 0, 0, 0, 0), s)
    p.save(tmp_path / "plan.json")
    r = depl_cli("run", tmp_path / "plan.json", "--seeds", "1", "--out", tmp_path / "o", "--allow-code", project)
    assert r.returncode == 0, r.stderr
    with pytest.raises(BadInput, match="allow"):
        depl.load_model(tmp_path / "o", seed=0)
    model = depl.load_model(tmp_path / "o", seed=0, allow_code=[project])
    assert "DEPL_CODE" not in os.environ   # allowed for the call only
    monkeypatch.setenv("DEPL_CODE", str(project))
    job = job_from_plan(Plan.load(tmp_path / "plan.json"))
    loss, _ = evaluate(model, *run_test_data(job.seeded(0).data))
    assert loss == pytest.approx(finals(tmp_path / "o")[0], abs=1e-6)
    full = make_net(job.versions[version])   # the unpruned network
    assert job.versions[version].ratio > 0
    assert sum(q.numel() for q in model.parameters()) < sum(q.numel() for q in full.parameters())
    r = depl_cli("export-model", tmp_path / "o", "--seed", "0", "--out", tmp_path / "own.pt2", "--allow-code", project)
    assert r.returncode == 0, r.stderr
    (project / "mymodel.py").write_text((project / "mymodel.py").read_text() + "\n# changed\n")
    with pytest.raises(BadInput, match="not the file this model was trained with"):
        depl.load_model(tmp_path / "o", seed=0)
