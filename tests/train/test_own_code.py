"""Your own network and data (net / source = "MODULE:FUNCTION"), and the tutorial that uses them.

The end-to-end test runs docs/tutorial-own-model.md itself, in a small
version: it writes the tutorial's files to a temporary folder and runs its
commands (profile → fit → plan --certify → run → validate, the calibration route beside it, the model kept,
loaded and exported) with fewer seeds and epochs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import sys
import sysconfig
from pathlib import Path

import pytest
import torch
from torch import nn

from depl.plan import Plan
from depl.scenario import ScenarioError, load_scenario
from depl.store import Store
from depl.train.task import custom
from depl.train.task.data import DataError, data_spec
from depl.train.task.source import JobError
from depl.train.engine.federation import job_from_plan, version_specs
from depl.train.task.prune import build_version, switch
from depl.certificate import Certificate
from trainkit import predicts_as_exported, search_fields

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial-own-model.md"


def tutorial_files() -> dict[str, str]:
    """The files the tutorial asks the reader to write: fenced blocks starting with '# file: NAME'."""
    blocks = re.findall(r"```\w*\n(.*?)```", TUTORIAL.read_text(encoding="utf-8"), flags=re.S)
    return {m.group(1): b for b in blocks if (m := re.match(r"# file: (\S+)\n", b))}


REGRESSION = "## A regression task"


def tutorial_commands(regression: bool = False) -> list[str]:
    """The commands of the tutorial's main part, or of its section "A regression task" (tests/train/test_recipe.py)."""
    text = TUTORIAL.read_text(encoding="utf-8")
    head, _, tail = text.partition(REGRESSION)
    text = tail.partition("\n## ")[0] if regression else head
    return [line.strip() for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)
            for line in b.splitlines() if line.strip().startswith("depl ")]


# the small version CI runs: same commands, fewer seeds and epochs; the search at ω 0.5, which a few runs certify
# (ω 0.9 takes at least 34 runs even when every one meets ℓmax), in batches of 8, as JSON, for 10 uses of its plan
# (at 1000 uses a cheaper candidate near ω is worth the hundreds of runs its horizon allows: the search would pause
# at --max-runs 24 with it)
SMALL = [(r"--epochs \d+", "--epochs 6"), (r"--switch full:half:\d+", "--switch full:half:3"),
         (r"profile (.*)--seeds 20\b", r"profile \1--seeds 5"), (r"run (.*)--seeds \d+", r"run \1--seeds 2"),
         # the calibration route at ω 0.5, which 8 calibration runs of a schedule certify at α/5 (ω 0.9 takes 44 here)
         (r"--seeds 44\b", "--seeds 8"), (r"^(depl (?:calibrate|plan) calibration/.*)$", r"\1 --omega 0.5"),
         (r"validate (.*)--seeds \d+", r"validate \1--seeds 8"), (r"^depl fit (.*)$", r"depl fit \1 --bootstrap 0"),
         (r"--max-runs \d+", "--max-runs 4"),
         (r"^(depl plan .*--certify.*)$", r"\1 --omega 0.5 --max-runs 24 --batch 8 --uses 10 --json")]


def write_project(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in tutorial_files().items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def model_blocks() -> list[str]:
    """The Python of step 4 (the model: load, predict, the exported files), in order."""
    text = TUTORIAL.read_text(encoding="utf-8").split("## 4. The model", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_the_tutorial_end_to_end_in_a_small_version(depl_cli, tmp_path, monkeypatch):
    project = write_project(tmp_path / "project")
    assert {"mymodel.py", "my-digits.toml"} <= set(tutorial_files())
    commands = tutorial_commands()
    # step 3 with the certified search, the calibration route beside it (profile on new seeds, calibrate, plan, run,
    # export), step 4 on the search's plan
    assert [c.split()[1] for c in commands] == ["profile", "fit", "plan", "run", "validate",
                                                "profile", "calibrate", "plan", "run", "export-model",
                                                "runs", "export-model", "export-model"]
    assert "--certify" in commands[2].split() and "--format onnx" in commands[-1]
    onnx = all(importlib.util.find_spec(m) for m in ("onnx", "onnxscript"))   # the `onnx` extra
    small = []
    for cmd in commands:
        for pat, rep in SMALL:
            cmd = re.sub(pat, rep, cmd)
        small.append(cmd)
    # one start-up for them all, each command as the installed script runs it (main() anew); safe_path: the working
    # folder is not on the path, as with the installed `depl` script; the user's module must be found through the
    # scenario file's folder (every command locates it there before importing: custom.locate)
    done = depl_cli.each([shlex.split(cmd)[1:] for cmd in small], cwd=project, safe_path=True)
    out = {}   # each command's first call: the search route's profile and plan
    for cmd, r in zip(small, done):
        out.setdefault(cmd.split()[1], r)
        if "--format onnx" in cmd and not onnx:   # without the extra: one line saying what to install
            assert r.returncode == 2 and 'pip install "depl[onnx]"' in r.stderr, r.stderr
            continue
        assert r.returncode == 0, f"{cmd}\n{r.stdout}\n{r.stderr}"
        assert "Traceback" not in r.stderr
    # step 4: the model in Python, and the exported files without depl (the ONNX pair where the extra is installed)
    assert (project / "model.pt2").is_file() and (project / "model.onnx.data").is_file() is onnx
    model_code = model_blocks()
    assert len(model_code) == 3
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    monkeypatch.delitem(sys.modules, "mymodel", raising=False)   # this project's, not another test's
    namespace: dict = {"__name__": "tutorial"}
    for code in model_code[:3 if onnx else 2]:
        exec(code, namespace)
    assert tuple(namespace["program"](namespace["x"][:8]).shape) == (8, 10)
    # the calibration route: its plan certified by the calibration runs of its schedule, run, loaded and exported
    calibrated = Plan.load(project / "calibration" / "plan.json")
    cert = Certificate.of_plan(calibrated.info)
    assert cert.kind == "calibration" and cert.certified and cert.runs == 8 and calibrated.omega == 0.5
    predicts_as_exported(project, "calibration/runs", 0, project / "calibration" / "model.pt2")

    # each step names the page's next one: the profile the fit as printed, the fit the certified search
    assert out["profile"].stdout.rstrip().splitlines()[-1] == f"next: {commands[1]}"
    said = out["fit"].stdout.rstrip().splitlines()[-1]
    assert said.startswith("next: depl plan fitted.toml --certify --out plan.json --allow-code ., then depl run plan.json")
    # the search: its candidates fixed and written before any run, trained on seeds from 940000, the cheapest
    # certified returned in plan.json with its certificate, which the store's runs bear out
    found = json.loads(out["plan"].stdout)
    cert = search_fields(found["certificate"])
    assert found["exit_code"] == 0 and cert["certified"] and cert["outcome"] == "certified"
    assert cert["first_seed"] == 940000 and cert["seeds"][0] == 940000 and cert["runs_trained"] <= 24 * len(cert["candidates"])
    written = json.loads((project / "search-candidates.json").read_text())
    assert [c["schedule"] for c in written["candidates"]] == [c["schedule"] for c in cert["candidates"]]
    assert (project / "candidates.png").stat().st_size > 0
    best = cert["candidates"][cert["returned"]]
    assert best["verdict"] == "certified" and cert["omega"] == 0.5 and cert["loss_target"] == 0.6
    assert all(c["verdict"] != "certified" for c in cert["candidates"] if c["cost"] < best["cost"])  # the cheapest
    plan = Plan.load(project / "plan.json")
    assert search_fields(plan.info["certificate"])["returned"] == cert["returned"] and plan.cost == best["cost"]
    assert len(plan.epochs) == best["epochs"] and plan.omega == 0.5
    with Store(project / "runs.sqlite") as st:   # each seed from the run of its group that holds it, longest first
        held = [st.losses(rid) for rid in best["read_from"]]
    start = best["first_counted"]
    seeds = range(start, start + best["runs"])
    losses = {s: next(ls[s] for ls in held if len(ls.get(s, [])) >= best["epochs"]) for s in seeds}
    assert best["met"] == sum(losses[s][best["epochs"] - 1] <= 0.6 for s in seeds)

    # the profile trained the user's network on the user's data, pruned and switched
    with Store(project / "profile" / "runs.sqlite") as st:
        runs = {x["spec"]["experiment"]["kind"] + ":" + x["spec"]["experiment"]["version"]: x for x in st.runs("profile")}
        job = runs["version:half"]["spec"]["job"]
        assert job["versions"]["half"]["net"] == "mymodel:make_net" and job["data"]["source"] == "mymodel:load_data"
        assert job["data"]["code_dir"] == str(project.resolve())
        sw = runs["switch:full"]
        losses = st.losses(sw["run_id"])
        assert len(losses) == 5 and all(len(v) == 6 for v in losses.values())
    # the fitted scenario still points at the user's code, wherever it is read from
    fitted = load_scenario(project / "fitted.toml")
    assert fitted.models[0].train.net == "mymodel:make_net" and fitted.code_dir == str(project.resolve())
    assert 'code_dir = "."' in (project / "fitted.toml").read_text(encoding="utf-8")  # relative: the folder moves whole
    assert plan.feasible and plan.epochs
    with Store(project / "runs" / "runs.sqlite") as st:
        (run,) = st.runs("plan")
        assert [len(v) for v in st.losses(run["run_id"]).values()] == [len(plan.epochs)] * 2
    report = json.loads(next((project / "validation").glob("*-validate.json")).read_text())
    assert report["runs"] == 8 and 0.0 <= report["evidence"]["coverage"] <= 1.0
    assert report["seeds"][0][0] == 950000


@pytest.fixture
def project(tmp_path, monkeypatch):
    folder = write_project(tmp_path / "project")
    monkeypatch.setenv("DEPL_CODE", str(folder))  # the user allows their project's code (the tests run elsewhere)
    (folder / "broken.py").write_text(
        "import torch\nfrom torch import nn\n\n"
        "def three_items():\n    return 1, 2, 3\n\n"
        "def no_pairs():\n    return (torch.zeros(10, 4), torch.zeros(10, 4)), (torch.zeros(5, 4), torch.zeros(5))\n\n"
        "def not_a_net():\n    return 'mlp'\n\n"
        "def wrong_width():\n    return nn.Sequential(nn.Flatten(), nn.Linear(40, 10))\n\n"
        "def three_classes():\n    return nn.Sequential(nn.Flatten(), nn.Linear(64, 3))\n\n"
        "class Slice(nn.Module):\n    def forward(self, x):\n        return x.flatten(1)[:, :10]\n\n"
        "def no_weights():\n    return Slice()\n\n"
        "def frozen():\n    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))\n    net.requires_grad_(False)\n"
        "    return net\n", encoding="utf-8")
    return folder


def scenario_with(project: Path, net: str | None = None, source: str | None = None) -> Path:
    text = (project / "my-digits.toml").read_text(encoding="utf-8")
    if net:
        text = text.replace('net = "mymodel:make_net", net_args = { hidden = 32 }', f'net = "{net}"')
    if source:
        text = text.replace('"mymodel:load_data"', f'"{source}"')
    p = project / "bad.toml"
    p.write_text(text, encoding="utf-8")
    return p


@pytest.mark.parametrize("source, why", [
    ("nomodule:load", "module 'nomodule' not found in"),
    ("mymodel:nothing", "has no 'nothing'"),
    ("broken:three_items", "it returned a tuple; expected (train, test)"),
    ("broken:no_pairs", "its train labels have shape (10, 4)"),
])
def test_a_bad_data_factory_is_named_before_training(project, source, why):
    s = load_scenario(scenario_with(project, source=source))
    with pytest.raises(DataError) as e:
        data_spec(s, ["a", "b"])
    assert f"datasets[0].source = '{source}': " in str(e.value) and why in str(e.value)


@pytest.mark.parametrize("net, why", [
    ("broken:not_a_net", "it returned a str, not a torch.nn.Module"),
    ("broken:wrong_width", "it rejects a batch of the data, inputs of shape (2, 64)"),
    ("broken:three_classes", "it returns (2, 3); expected class logits of shape (2, 10)"),
    ("broken:no_weights", "it returned a network with no trainable parameters"),
    ("broken:frozen", "it returned a network with no trainable parameters"),
])
def test_a_network_that_does_not_fit_the_data_is_named_before_training(project, net, why):
    s = load_scenario(scenario_with(project, net=net))
    spec = data_spec(s, ["a", "b"])
    with pytest.raises(JobError) as e:
        version_specs(s, spec.load(), ["full"])
    assert f"models[0].train.net = '{net}' (model 'full'): " in str(e.value) and why in str(e.value)


def test_bad_factories_exit_2_with_one_line_before_any_training(depl_cli, project, tmp_path):
    bad = scenario_with(project, net="broken:three_classes")
    r = depl_cli("profile", bad, "--epochs", "1", "--seeds", "1", "--out", tmp_path / "o", cwd=tmp_path, safe_path=True)
    assert r.returncode == 2 and "models[0].train.net = 'broken:three_classes'" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()  # nothing written: no run folder, no store


def test_net_args_and_references_are_checked_when_the_scenario_is_read(project):
    text = (project / "my-digits.toml").read_text(encoding="utf-8")
    for old, new, why in [('"mymodel:make_net", net_args', '"cnn1d", net_args', "net_args are passed to your own network"),
                          ('"mymodel:load_data"', '"mymodel:"', "MODULE:FUNCTION"),
                          ("net_args = { hidden = 32 }", "width = 8", "width applies to the built-in networks")]:
        p = project / "x.toml"
        p.write_text(text.replace(old, new, 1), encoding="utf-8")
        with pytest.raises(ScenarioError, match=why):
            load_scenario(p)


def test_own_network_is_pruned_like_a_built_in_one_and_switches_keep_trained_weights(project):
    s = load_scenario(project / "my-digits.toml")
    spec = data_spec(s, ["a", "b"])
    v = version_specs(s, spec.load(), ["full", "half"])
    full, half = build_version(v["full"], seed=1), build_version(v["half"], seed=1)
    widths = lambda m: [x.out_features for x in m.modules() if isinstance(x, nn.Linear)]  # noqa: E731
    assert widths(full) == [32, 32, 10] and widths(half) == [16, 16, 10]  # the logits layer is kept
    with torch.no_grad():
        full[1].weight[:8].mul_(10.0)  # the 8 largest channels of the first layer must survive the switch
    pruned = switch(full, v["full"], 0.5)
    assert widths(pruned) == [16, 16, 10]
    assert torch.equal(pruned[1].weight[:8], full[1].weight[:8])


def test_the_module_next_to_the_scenario_wins_over_one_of_the_same_name(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPL_CODE", str(tmp_path))
    for tag in ("a", "b"):
        (tmp_path / tag).mkdir()
        (tmp_path / tag / "samename.py").write_text(f"def which():\n    return {tag!r}\n", encoding="utf-8")
    assert custom.resolve("samename:which", str(tmp_path / "a"))() == "a"
    assert custom.resolve("samename:which", str(tmp_path / "b"))() == "b"


def test_a_plan_of_your_own_network_runs_the_same_job_from_any_folder(project, tmp_path, monkeypatch):
    """The plan embeds code_dir: run from elsewhere, the job is the same."""
    from depl.plan import Epoch, with_figures

    s = load_scenario(project / "my-digits.toml")
    p = with_figures(Plan("hand", s.name, True, ["a"], [Epoch(1, "full", "edge", 1.0)], 0, 0, 0, 0, 0), s)
    p.save(tmp_path / "plan.json")
    monkeypatch.chdir(tmp_path)
    job = job_from_plan(Plan.load(tmp_path / "plan.json"))
    assert job.versions["full"].code_dir == str(project.resolve()) and job.data.code_dir == str(project.resolve())


def test_a_plan_names_its_code_relative_to_itself_and_runs_from_a_copy_of_the_folder(project, tmp_path, monkeypatch):
    """A plan records its code's folder relative to its own ("." beside it); read, it is taken from the plan's
    folder: a copy of the folder, allowed, runs the copy's code, and a plan moved away from its code is refused
    in one line naming the field and its value."""
    import os
    import shutil

    from depl.plan import Epoch, with_figures

    s = load_scenario(project / "my-digits.toml")
    p = with_figures(Plan("hand", s.name, True, ["a"], [Epoch(1, "full", "edge", 1.0)], 0, 0, 0, 0, 0), s)
    p.save(project / "plan.json")
    (tmp_path / "plans").mkdir()
    p.save(tmp_path / "plans" / "elsewhere.json")
    assert json.loads((project / "plan.json").read_text())["scenario_spec"]["code_dir"] == "."
    beside = os.path.relpath(project.resolve(), (tmp_path / "plans").resolve())
    assert json.loads((tmp_path / "plans" / "elsewhere.json").read_text())["scenario_spec"]["code_dir"] == beside
    copy = shutil.copytree(project, tmp_path / "copy")
    monkeypatch.setenv("DEPL_CODE", str(copy))
    job = job_from_plan(Plan.load(copy / "plan.json"))
    assert job.versions["full"].code_dir == job.data.code_dir == str(copy.resolve())   # the copy, not the original
    first = job.identity()   # with the digests of the copy's files
    monkeypatch.setenv("DEPL_CODE", str(project))
    assert first == job_from_plan(Plan.load(tmp_path / "plans" / "elsewhere.json")).identity()  # the same code
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.copy2(tmp_path / "plans" / "elsewhere.json", moved / "plan.json")   # its code is not where it says
    (moved / "plan.json").write_text((moved / "plan.json").read_text().replace(json.dumps(beside), '"../gone"'))
    monkeypatch.chdir(tmp_path)
    code, line = route("run", moved / "plan.json")
    assert code == 2 and len(line.splitlines()) == 1 and "no such folder" in line, line
    assert f"code_dir = '{(tmp_path / 'gone').resolve()}'" in line, line


# --------------------------------------------------------------------------- #
# A plan from elsewhere runs no code from wherever it names
# --------------------------------------------------------------------------- #

def evil_plan(project: Path, where: Path, attacker: Path, net: str = "mymodel:make_net",
              net_args: dict | None = None) -> Path:
    """The tutorial's plan, rewritten by someone else: code_dir points at `attacker`, whose
    modules would write a marker file when imported or called."""
    from depl.plan import Epoch, with_figures

    attacker.mkdir(parents=True, exist_ok=True)
    marker = attacker / "MARKER"
    for name in ("mymodel", "evil"):
        (attacker / f"{name}.py").write_text(
            f"open({str(marker)!r}, 'w').write('imported')\n"
            f"def make_net(**kw):\n    open({str(marker)!r}, 'w').write('called')\n"
            f"load_data = make_net\n", encoding="utf-8")
    s = load_scenario(project / "my-digits.toml")
    p = with_figures(Plan("hand", s.name, True, ["a"], [Epoch(1, "full", "edge", 1.0)], 0, 0, 0, 0, 0), s)
    d = p.to_json()
    d["scenario_spec"]["code_dir"] = str(attacker)
    for m in d["scenario_spec"]["models"]:
        m["train"] = {**m["train"], "net": net, "net_args": net_args or {"hidden": 32}}
    where.mkdir(parents=True, exist_ok=True)
    (where / "plan.json").write_text(json.dumps(d), encoding="utf-8")
    return where / "plan.json"


def cli(*args) -> tuple[int, str]:
    """depl in this process (cheap): exit code and stderr; an escaped exception fails the test."""
    from typer.testing import CliRunner

    import depl.cli

    r = CliRunner().invoke(depl.cli.app, list(map(str, args)), env={"COLUMNS": "250"})
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r.exit_code, r.stderr.strip()


ROUTES = {"run": ["run", "{plan}", "--seeds", "1", "--out", "o"],
          "run --adaptive": ["run", "{plan}", "--seeds", "1", "--out", "o", "--adaptive"],
          "validate": ["validate", "my-digits.toml", "{plan}", "--seeds", "2", "--out", "o"],
          "validate --adaptive": ["validate", "my-digits.toml", "{plan}", "--seeds", "2", "--out", "o", "--adaptive"],
          "export-app": ["export-app", "{plan}", "app"]}


def route(command: str, plan: Path, *more) -> tuple[int, str]:
    return cli(*[str(plan) if a == "{plan}" else a for a in ROUTES[command]], *more)


@pytest.mark.parametrize("command", list(ROUTES))
def test_a_plans_code_dir_outside_the_allowed_folders_is_refused_and_nothing_is_imported(
        project, tmp_path, monkeypatch, command):
    attacker = tmp_path / "elsewhere"
    plan = evil_plan(project, project, attacker)
    monkeypatch.chdir(project)  # the user allowed their own project (DEPL_CODE); the plan's folder is not
    code, line = route(command, plan)
    assert code == 2 and len(line.splitlines()) == 1, line
    assert line.startswith(f"error: {plan}: scenario_spec.models[0].train.net = 'mymodel:make_net': "
                           f"code_dir = '{attacker}' is outside the folders you allowed ({project})"), line
    assert f"--allow-code {attacker}" in line and f"DEPL_CODE={attacker}" in line
    assert not (attacker / "MARKER").exists()


def test_nothing_is_allowed_by_default_not_even_the_current_folder(project, tmp_path, monkeypatch):
    monkeypatch.delenv("DEPL_CODE")
    monkeypatch.chdir(project)
    with pytest.raises(custom.CodeRefused, match=f"--allow-code {project}"):
        custom.resolve("mymodel:make_net", str(project))
    with pytest.raises(custom.CodeRefused, match="no folder of code is allowed"):
        custom.resolve("mymodel:make_net", None)
    monkeypatch.setenv("DEPL_CODE", f"{tmp_path / 'nothing'}:{project}")
    assert callable(custom.resolve("mymodel:make_net", str(project)))
    assert callable(custom.resolve("mymodel:make_net", None))  # no code_dir: the allowed folders themselves


def test_allow_code_allows_a_folder_for_one_command_and_the_processes_it_starts(project, monkeypatch):
    monkeypatch.delenv("DEPL_CODE")
    monkeypatch.chdir(project)
    code, line = cli("profile", "my-digits.toml", "--epochs", "1", "--seeds", "1", "--out", "o", "--version", "half")
    assert code == 2 and "--allow-code" in line, line
    code, line = cli("profile", "my-digits.toml", "--epochs", "1", "--seeds", "1", "--out", "o", "--version", "half",
                     "--allow-code", ".")
    assert code == 0, line
    assert [Path(x) for x in os.environ["DEPL_CODE"].split(os.pathsep)] == [project.resolve()]  # what workers inherit


def test_a_relative_code_dir_is_taken_from_the_allowed_folder_not_the_current_one(project, tmp_path, monkeypatch):
    (project / "sub").mkdir()
    (project / "sub" / "netmod.py").write_text("def which():\n    return 'allowed'\n", encoding="utf-8")
    cwd = tmp_path / "cwd"
    (cwd / "sub").mkdir(parents=True)
    (cwd / "sub" / "netmod.py").write_text(f"open({str(cwd / 'MARKER')!r}, 'w')\ndef which():\n    return 'cwd'\n",
                                           encoding="utf-8")
    monkeypatch.chdir(cwd)
    assert custom.resolve("netmod:which", "sub")() == "allowed"
    assert not (cwd / "MARKER").exists()


def installed_probe(tmp_path: Path, monkeypatch, where: str) -> tuple[Path, str, dict, Path]:
    """A plan's code in installed Python code, reached from a folder the user allowed that holds it:
    (allowed folder, net, net_args, code_dir) as the probes of real installs found them."""
    marker = tmp_path / "MARKER"
    if where == "venv":  # the README's set-up: the project folder holds its .venv; setuptools' spawn runs a command
        site = Path(importlib.util.find_spec("setuptools").origin).parents[1]
        venv = next(p for p in site.parents if (p / "pyvenv.cfg").is_file())
        return venv.parent, "setuptools._distutils.spawn:spawn", {"cmd": ["touch", str(marker)]}, site
    if where == "venv-root":  # the virtual environment itself allowed
        site = Path(importlib.util.find_spec("setuptools").origin).parents[1]
        venv = next(p for p in site.parents if (p / "pyvenv.cfg").is_file())
        return venv, "setuptools._distutils.spawn:spawn", {"cmd": ["touch", str(marker)]}, site
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()  # DEPL_CODE=$HOME, a pyenv Python under it
    return stdlib.parents[1], "subprocess:run", {"args": ["touch", str(marker)]}, stdlib


@pytest.mark.parametrize("where", ["venv", "venv-root", "stdlib"])
@pytest.mark.parametrize("command", ["run", "export-app"])
def test_installed_code_is_not_yours_even_inside_a_folder_you_allowed(project, tmp_path, monkeypatch, where, command):
    allowed, net, net_args, code_dir = installed_probe(tmp_path, monkeypatch, where)
    plan = evil_plan(project, tmp_path / "plan", tmp_path / "unused", net=net, net_args=net_args)
    d = json.loads(plan.read_text())
    d["scenario_spec"]["code_dir"] = str(code_dir)
    plan.write_text(json.dumps(d))
    monkeypatch.setenv("DEPL_CODE", str(allowed))
    monkeypatch.chdir(tmp_path)
    code, line = route(command, plan)
    assert code == 2 and len(line.splitlines()) == 1, line
    assert "installed code" in line and "not yours" in line and "--allow-code" in line, line
    assert not (tmp_path / "MARKER").exists()


def test_the_probe_of_a_relative_code_dir_into_the_projects_venv_is_refused(project, tmp_path, monkeypatch):
    """code_dir = "../…/.venv/lib/python3.11/site-packages", taken from the plan's folder, into the virtual
    environment of the folder the user allowed."""
    import os

    site = Path(importlib.util.find_spec("setuptools").origin).parents[1]
    venv = next(p for p in site.parents if (p / "pyvenv.cfg").is_file())
    plan = evil_plan(project, tmp_path / "plan", tmp_path / "unused", net="setuptools._distutils.spawn:spawn",
                     net_args={"cmd": ["touch", str(tmp_path / "MARKER")]})
    d = json.loads(plan.read_text())
    d["scenario_spec"]["code_dir"] = os.path.relpath(site, plan.resolve().parent)
    plan.write_text(json.dumps(d))
    monkeypatch.setenv("DEPL_CODE", str(venv.parent))
    code, line = route("run", plan)
    assert code == 2 and "installed code" in line, line
    assert not (tmp_path / "MARKER").exists()


def test_a_module_symlinked_out_of_the_allowed_folder_is_refused_before_import(project, tmp_path, monkeypatch):
    attacker = tmp_path / "elsewhere"
    plan = evil_plan(project, project, attacker, net="linked:make_net")
    (project / "linked.py").symlink_to(attacker / "evil.py")
    d = json.loads(plan.read_text())
    d["scenario_spec"]["code_dir"] = str(project)
    plan.write_text(json.dumps(d))
    monkeypatch.chdir(project)
    code, line = route("run", plan)
    assert code == 2 and "a symlink out of it" in line, line
    assert not (attacker / "MARKER").exists()


def test_a_function_imported_into_the_named_module_is_refused(project, monkeypatch):
    (project / "helper.py").write_text(f"def make_net(**kw):\n    open({str(project / 'MARKER')!r}, 'w')\n",
                                       encoding="utf-8")
    (project / "reexport.py").write_text("from helper import make_net\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"is defined in 'helper' \(.*helper.py\), not in .*reexport.py"):
        custom.resolve("reexport:make_net", str(project))
    assert not (project / "MARKER").exists()


def test_a_plan_runs_only_the_code_it_was_made_with(project, tmp_path, monkeypatch):
    from depl.plan import Epoch, with_figures

    s = load_scenario(project / "my-digits.toml")
    assert set(s.code_hashes) == {"mymodel.py"} and s.code_hashes["mymodel.py"].startswith("sha256:")
    p = with_figures(Plan("hand", s.name, True, ["a"], [Epoch(1, "full", "edge", 1.0)], 0, 0, 0, 0, 0), s)
    p.save(tmp_path / "plan.json")
    assert job_from_plan(Plan.load(tmp_path / "plan.json")).versions["full"].net == "mymodel:make_net"
    mine = project / "mymodel.py"
    mine.write_text(mine.read_text(encoding="utf-8")
                    + f"\nopen({str(project / 'MARKER')!r}, 'w')\n", encoding="utf-8")
    code, line = route("run", tmp_path / "plan.json")
    assert code == 2 and "mymodel.py is not the file this plan was made with" in line and "depl plan" in line, line
    d = json.loads((tmp_path / "plan.json").read_text())
    del d["scenario_spec"]["code_hashes"]  # a plan edited: nothing pins its code
    (tmp_path / "plan.json").write_text(json.dumps(d))
    code, line = route("run", tmp_path / "plan.json")
    assert code == 2 and "the plan records no digest of mymodel.py" in line, line
    assert not (project / "MARKER").exists()


def test_a_scenario_file_outside_the_allowed_folders_is_refused_by_profile(project, tmp_path, monkeypatch):
    attacker = tmp_path / "elsewhere"
    evil_plan(project, project, attacker)
    (attacker / "evil.toml").write_text((project / "my-digits.toml").read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.chdir(attacker)  # even run from its own folder
    code, line = cli("profile", attacker / "evil.toml", "--epochs", "1", "--seeds", "1", "--out", "o")
    assert code == 2 and line.startswith(f"error: {attacker / 'evil.toml'}: models[0].train.net"), line
    assert f"--allow-code {attacker}" in line
    assert not (attacker / "MARKER").exists()


@pytest.mark.parametrize("net, net_args, why", [
    ("os:system", {"command": "touch MARKER"}, "module 'os' not found in"),             # the Python path is not searched
    ("mymodel:torch.manual_seed", {"seed": 1}, "is defined in 'torch"),                 # reaching past the user's code
    ("mymodel:nn.Identity", {}, "is defined in 'torch"),
    ("mymodel:make_net.__class__", {}, "is not a public name"),
])
def test_a_plan_names_only_functions_the_allowed_code_defines(project, monkeypatch, net, net_args, why):
    plan = evil_plan(project, project, project / "sub", net=net, net_args=net_args)
    d = json.loads(plan.read_text())
    d["scenario_spec"]["code_dir"] = str(project)  # allowed: the user's own folder
    plan.write_text(json.dumps(d))
    monkeypatch.chdir(project)
    code, line = cli("run", plan, "--seeds", "1", "--out", "o")
    assert code == 2 and why in line and len(line.splitlines()) == 1, line
    assert not (project / "MARKER").exists() and not (project / "sub" / "MARKER").exists()


def test_a_scenario_whose_code_dir_is_not_allowed_is_refused_by_profile(project, tmp_path, monkeypatch):
    attacker = tmp_path / "elsewhere"
    evil_plan(project, project, attacker)
    text = (project / "my-digits.toml").read_text(encoding="utf-8")
    (project / "far.toml").write_text(f"code_dir = {json.dumps(str(attacker))}\n" + text, encoding="utf-8")
    monkeypatch.chdir(project)
    code, line = cli("profile", "far.toml", "--epochs", "1", "--seeds", "1", "--out", "o")
    assert code == 2 and line.startswith(f"error: far.toml: models[0].train.net = 'mymodel:make_net': "
                                         f"code_dir = '{attacker}'"), line
    assert not (attacker / "MARKER").exists()


def test_the_flower_simulation_imports_from_the_folders_this_command_allowed(tmp_path, monkeypatch):
    # its SuperLink and ClientApps are other processes, started elsewhere: they get the allow-list, not the folder
    from depl.train.task.custom import code_roots
    from depl.train.apps.flower_app import flower_environment

    monkeypatch.setenv("DEPL_CODE", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    assert flower_environment(tmp_path / "out")["DEPL_CODE"] == f"{tmp_path / 'a'}:{tmp_path / 'b'}"
    monkeypatch.delenv("DEPL_CODE")
    monkeypatch.chdir(tmp_path)
    assert flower_environment(tmp_path / "out")["DEPL_CODE"] == "" and code_roots() == []  # nothing allowed


def test_a_store_of_your_own_code_reads_back_after_its_folder_moved_and_a_changed_file_is_a_new_run(tmp_path, monkeypatch):
    """A run's identity holds the sha256 of your code's files, not the folder they lie in: a project (its scenario,
    code and store) copied elsewhere reads its runs back without training; an edited network trains anew."""
    import shutil

    a = write_project(tmp_path / "a")
    monkeypatch.setenv("DEPL_CODE", str(tmp_path))
    monkeypatch.chdir(a)
    args = ["profile", "my-digits.toml", "--epochs", "1", "--seeds", "2", "--version", "half", "--out", "o"]
    code, err = cli(*args)
    assert code == 0, err
    with Store(a / "o" / "runs.sqlite") as st:
        (before,) = [(r["run_id"], st.done_epochs(r["run_id"], 0)) for r in st.runs("profile")]
    b = tmp_path / "b"
    shutil.copytree(a, b)
    monkeypatch.chdir(b)
    code, err = cli(*args)
    assert code == 0, err
    with Store(b / "o" / "runs.sqlite") as st:
        runs = st.runs("profile")
        assert [r["run_id"] for r in runs] == [before[0]]         # the same run: read back, not a second one
        assert len(st.losses(before[0])) == 2
    (b / "mymodel.py").write_text((b / "mymodel.py").read_text() + "\n# edited\n", encoding="utf-8")
    code, err = cli(*args)
    assert code == 0, err
    with Store(b / "o" / "runs.sqlite") as st:
        assert len(st.runs("profile")) == 2                       # the edited code is another run


def test_a_jobs_identity_falls_back_to_its_folder_where_its_code_cannot_be_read(tmp_path, monkeypatch):
    """No module there (or a folder not allowed): the run is identified by the folder, as the docstring says —
    never an exception from working out a run id."""
    from depl.train.task.data import DataSpec
    from depl.train.engine.federation import Job
    from depl.train.task.prune import VersionSpec

    monkeypatch.setenv("DEPL_CODE", str(tmp_path))
    v = VersionSpec("nomodule:make_net", None, 0.0, (4,), 2, "{}", str(tmp_path))
    job = Job(DataSpec("digits", ((0.0, 1.0),)), {"full": v}, {"edge": 1}, [(1, "full", "edge")])
    assert job.identity() == job.to_json() and job.to_json()["versions"]["full"]["code_dir"] == str(tmp_path)
