"""The trained models `depl run` keeps: one per seed in OUT/models/RUN_ID, loaded back by `depl.load_model` (its
test loss recomputed on the run's own test data is the stored one), listed by `depl runs models`, exported by
`depl export-model` as a program that loads without depl; kept bit for bit by a resumed run; --keep-models."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import depl
from depl.plan import Plan
from depl.store import Store
from depl.train.engine.federation import evaluate, job_from_plan
from depl.train.engine.federation import test_data as run_test_data
from depl.train.task.prune import make_net

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not


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
    from depl.train.task.models import default_keep

    assert (default_keep(16), default_keep(17)) == ("all", "best")
    r = depl_cli("run", "--help", env={"COLUMNS": "400"})
    assert "all for up to 16 seeds" in r.stdout


def test_onnx_export_writes_the_model_and_its_weights_as_a_pair_that_runs_where_it_is_moved(depl_cli, digits,
                                                                                            tmp_path):
    pytest.importorskip("onnxscript")   # the `onnx` extra: onnx and onnxscript
    onnx = pytest.importorskip("onnx")
    from onnx.reference import ReferenceEvaluator

    (tmp_path / "m.onnx.data").write_text("weights of yours")   # no export's: refused, left as it was
    r = depl_cli("export-model", "r", "--seed", "0", "--out", tmp_path / "m.onnx", "--format", "onnx", cwd=digits)
    assert r.returncode == 2 and "m.onnx.data beside it" in r.stderr, r.stderr
    assert (tmp_path / "m.onnx.data").read_text() == "weights of yours"
    (tmp_path / "m.onnx.data").unlink()
    r = depl_cli("export-model", "r", "--seed", "0", "--out", tmp_path / "m.onnx", "--format", "onnx", cwd=digits)
    assert r.returncode == 0, r.stderr   # an earlier export and its weights: the next one replaces both
    r = depl_cli("export-model", "r", "--seed", "1", "--out", tmp_path / "m.onnx", "--format", "onnx", "--json",
                 cwd=digits)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["data_file"] == str(tmp_path / "m.onnx.data")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data"]   # no temporary file left
    model = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    assert {e.value for i in model.graph.initializer for e in i.external_data if e.key == "location"} == \
        {"m.onnx.data"}
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    for name in ("m.onnx", "m.onnx.data"):
        (tmp_path / name).rename(moved / name)
    x = run_test_data(job_from_plan(Plan.load(digits / "p.json")).data)[0][:5]
    session = ReferenceEvaluator(str(moved / "m.onnx"))
    (got,) = session.run(None, {session.input_names[0]: x.numpy()})
    want = depl.load_model(digits / "r", seed=1)(x).detach().numpy()
    assert got.shape == (5, 10) and abs(got - want).max() < 1e-4


def test_a_missing_model_is_refused_in_one_line(depl_cli, digits, tmp_path):
    r = depl_cli("export-model", "r", "--seed", "9", "--out", tmp_path / "x.pt2", cwd=digits)
    assert r.returncode == 2 and "no model of seed 9" in r.stderr and "Traceback" not in r.stderr
    r = depl_cli("export-model", "r", "--seed", "0", "--out", tmp_path / "x.onnx", "--format", "onnx", cwd=digits)
    if not all(importlib.util.find_spec(m) for m in ("onnx", "onnxscript")):   # what `depl[onnx]` installs
        assert r.returncode == 2 and 'pip install "depl[onnx]"' in r.stderr and "Traceback" not in r.stderr
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


# ---- export-model never destroys work: what it will not write over, its file's name, written whole or not at all ----

def copied_run(digits, to):
    """The digits run folder and its plan, copied: a test whose export could write over them harms no other."""
    import shutil

    shutil.copytree(digits / "r", to / "r")
    shutil.copy(digits / "p.json", to / "p.json")
    return to / "r"


def files_of(folder) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_export_model_never_writes_over_a_kept_model_a_store_a_plan_or_its_own_input(depl_cli, digits, tmp_path):
    import shutil

    from depl.workflows import BadInput, export_model

    run = copied_run(digits, tmp_path)
    (models,) = (run / "models").iterdir()
    shutil.copy(run / "runs.sqlite", tmp_path / "store.pt2")   # a store and a plan under a program's name:
    shutil.copy(tmp_path / "p.json", tmp_path / "plan.pt2")    # known by what they hold
    before = files_of(tmp_path)
    # seed 1 exported over its own kept model: refused in one line, exit 2
    r = depl_cli("export-model", "r", "--seed", "1", "--out", models / "seed-1.pt", "--json", cwd=tmp_path)
    assert r.returncode == 2 and json.loads(r.stdout)["exit_code"] == 2, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert f"{models / 'seed-1.pt'}: is seed 1's kept model of run {models.name}, the one being exported" in r.stderr
    for out, why in [(models / "seed-0.pt", f"is a file in {models.parent}, where a run keeps its seeds' models"),
                     (models / "new.pt2", f"lies in {models.parent}, where a run keeps its seeds' models"),
                     (models / "seed-1.json", "is seed 1's kept model"),
                     (run / "runs.sqlite", "is a runs store (SQLite)"),
                     (tmp_path / "store.pt2", "is a runs store (SQLite)"),
                     (tmp_path / "p.json", "is a plan (depl.plan/1)"),
                     (tmp_path / "plan.pt2", "is a plan (depl.plan/1)")]:
        with pytest.raises(BadInput) as e:
            export_model(run, 1, out)
        assert str(e.value).startswith(f"--out {out}: {why}") and "\n" not in str(e.value)
    assert files_of(tmp_path) == before   # every file as it was, none added
    assert depl.load_model(run, seed=1) is not None and depl.load_model(run, seed=0) is not None


def test_export_model_refuses_a_file_name_its_format_does_not_write(digits, tmp_path):
    from depl.workflows import BadInput, export_model

    for out, fmt, said in [
            ("m.onnx", "torch-export", "ends in .onnx; --format torch-export writes a .pt2 file: name it m.pt2, or "
                                       "--format onnx for a .onnx file"),
            ("m.pt", "torch-export", "ends in .pt; --format torch-export writes a .pt2 file: name it m.pt2"),
            ("m.pt", "onnx", "ends in .pt; --format onnx writes a .onnx file: name it m.onnx"),
            ("m", "torch-export", "has no extension; --format torch-export writes a .pt2 file: name it m.pt2")]:
        with pytest.raises(BadInput) as e:
            export_model(digits / "r", 0, tmp_path / out, fmt=fmt)
        assert str(e.value) == f"--out {tmp_path / out}: {said}"
    assert not list(tmp_path.iterdir())


def test_export_model_writes_its_file_whole_or_leaves_the_target_as_it_was(depl_cli, digits, tmp_path):
    import stat

    from depl.workflows import BadInput, export_model

    out = tmp_path / "out"
    out.mkdir()
    # a file of yours under the export's name: refused, never replaced (only an earlier export is)
    (out / "m.pt2").write_bytes(b"my precious")
    r = depl_cli("export-model", "r", "--seed", "0", "--out", out / "m.pt2", cwd=digits)
    assert r.returncode == 2 and "exists and is not an earlier torch-export export" in r.stderr, r.stderr
    assert files_of(out) == {Path("m.pt2"): b"my precious"}
    (out / "m.pt2").unlink()
    r = depl_cli("export-model", "r", "--seed", "1", "--out", out / "m.pt2", cwd=digits)
    assert r.returncode == 0, r.stderr
    earlier = (out / "m.pt2").read_bytes()
    # a write that fails half way (a file-size limit of 4 KB, real): one line, exit 2, the earlier export as it was
    limited = ("import resource, signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
               "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\nfrom depl.cli import main; main()")
    r = depl_cli("export-model", "r", "--seed", "0", "--out", out / "m.pt2", cwd=digits, code=limited)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"--out {out / 'm.pt2'}: cannot be written (File too large); left as it was" in r.stderr
    assert files_of(out) == {Path("m.pt2"): earlier}   # no temporary file left
    # a device: refused (never written into, never replaced)
    if os.path.exists("/dev/full"):
        r = depl_cli("export-model", "r", "--seed", "0", "--out", "/dev/full", cwd=digits)
        assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
        assert "--out /dev/full: is a character device, not a regular file" in r.stderr
        assert stat.S_ISCHR(os.stat("/dev/full").st_mode)
    # a folder that does not exist: refused, and not made
    with pytest.raises(BadInput, match=r"nowhere/m.pt2: the folder .*nowhere does not exist"):
        export_model(digits / "r", 0, tmp_path / "nowhere" / "m.pt2")
    assert not (tmp_path / "nowhere").exists()
    read_only = tmp_path / "read-only"
    read_only.mkdir(mode=0o555)
    if not os.access(read_only, os.W_OK):   # root writes it anyway
        with pytest.raises(BadInput, match="is not writable"):
            export_model(digits / "r", 0, read_only / "m.pt2")
        assert not list(read_only.iterdir())
    # the earlier export replaced whole: the new program, nothing beside it
    done = export_model(digits / "r", 0, out / "m.pt2")
    assert sorted(p.name for p in out.iterdir()) == ["m.pt2"]
    program = torch.export.load(out / "m.pt2").module()
    assert tuple(program(torch.zeros(3, *done.input_shape[1:])).shape) == (3, 10)


def test_export_model_says_a_regressions_output_is_its_prediction_and_a_classifiers_its_class_logits(
        depl_cli, digits, tmp_path):
    """A tiny regression of your own with targets of shape (N, 1): trained, kept, exported; the exported program's
    MSE on the test targets is the stored final test loss."""
    import importlib.util

    from depl.workflows import export_model
    from trainkit import write_regression

    project = write_regression(tmp_path / "project", "column")
    r = depl_cli("run", "plan.json", "--seeds", "1", "--out", "r", "--allow-code", ".", cwd=project)
    assert r.returncode == 0, r.stderr
    r = depl_cli("export-model", "r", "--seed", "0", "--out", "m.pt2", "--allow-code", ".", cwd=project)
    assert r.returncode == 0, r.stderr
    assert "; inputs batch×4 → the prediction" in r.stdout and "logits" not in r.stdout
    (side,) = (project / "r" / "models").rglob("seed-0.json")
    side = json.loads(side.read_text())
    assert side["loss"] == "mse" and side["final_test_accuracy"] is None   # what the sidecar says it was trained on
    spec = importlib.util.spec_from_file_location("tinyreg_exported", project / "tinyreg.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    _, (x_test, y_test) = mod.load_column()
    assert tuple(y_test.shape) == (40, 1)
    with torch.no_grad():
        pred = torch.export.load(project / "m.pt2").module()(x_test)
    assert tuple(pred.shape) == (40, 1)
    assert float(((pred.double() - y_test.double()) ** 2).mean()) == pytest.approx(side["final_test_loss"], rel=1e-5)
    done = export_model(digits / "r", 0, tmp_path / "digits.pt2")
    assert (done.loss, done.outputs, done.output) == ("cross_entropy", 10, "class logits (10 classes)")
    assert done.to_json()["output"] == "class logits (10 classes)"


def test_a_resumed_run_says_which_finished_seeds_keep_no_model(depl_cli, digits):
    """Seeds a first call finished with --keep-models none have no model to keep: a second call with all (or
    best) keeps the models of the seeds it trains and says which seeds it could not keep (it said `models (all)`
    of a folder holding none of them, and called the one model of the seeds trained now the best)."""
    args = ["run", "p.json", "--out", "unkept", "--workers", "1"]
    none, every, best = depl_cli.each([[*args, "--seeds", "2", "--keep-models", "none"],
                                       [*args, "--seeds", "2", "--keep-models", "all"],
                                       [*args, "--seeds", "3", "--keep-models", "best"]], cwd=digits)
    assert none.returncode == every.returncode == best.returncode == 0, none.stderr + every.stderr + best.stderr
    said = "2 seeds finished before this call keep no model (0..1"
    assert f"{said}): train them in a new run folder (--out) to keep them" in every.stdout, every.stdout
    assert f"{said}; best compares only the models kept)" in best.stdout, best.stdout
    assert sorted(p.name for p in (digits / "unkept" / "models").rglob("*.json")) == ["seed-2.json"]
