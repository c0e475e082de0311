"""README.md runs as written: every shell command of its code blocks, its Python block and the output it shows.

Run for real, as written: `depl scenarios`, `depl plan digits-small`, `depl simulate` (20,000 Monte Carlo runs),
`depl runs models`, `depl export-model`, the Python block (`depl.load_model`, a prediction), and `make demo`'s
depl commands.  Run smaller: `depl run --seeds 3` trains 1 seed (3 take ~25 s of a loaded 2-core machine).  Run up
to its price: `depl plan digits-small --certify` is stopped once it has printed its candidates and the price line
— every line the README shows must be in what it printed, numbers included — because its search trains hundreds of
runs (minutes).  `make test` is checked with `make -n` (it runs the whole suite).  The commands table must list
exactly the commands `depl --help` has."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs the README's commands, a run and a search among them: make test runs it, make test-fast does not

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def commands() -> list[str]:
    """The shell commands of the README's ```sh blocks, comments dropped, in order."""
    found = []
    for block in blocks("sh"):
        for line in block.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line and not line.startswith("#"):
                found.append(line)
    return found


def depl_args(command: str) -> list[str]:
    words = shlex.split(command)
    assert words[0] == "depl", command
    return words[1:]


def test_the_readme_is_short_and_every_command_is_one_this_test_runs():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 150, "README.md: keep it to 150 lines"
    known = {"make demo", "make test", "depl scenarios", "depl plan", "depl simulate", "depl run", "depl runs",
             "depl export-model"}
    for command in commands():
        assert " ".join(command.split()[:2]) in known, f"README.md: {command!r} is run by no test: add it here"


def test_the_commands_table_lists_every_command():
    import typer

    from depl import cli

    app = {f"depl {name}" for name in typer.main.get_command(cli.app).commands}
    table = set(re.findall(r"^\| `(depl [a-z-]+)` \|", README.read_text(encoding="utf-8"), re.M))
    assert table == app, f"README.md's table: missing {sorted(app - table)}, not commands {sorted(table - app)}"


def test_make_test_runs_the_suite_and_make_demo_plans(depl_cli, tmp_path):
    if not shutil.which("make"):
        pytest.skip("no make here")
    assert {"make demo", "make test"} <= set(commands())
    dry = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True)
    assert dry.returncode == 0 and "lint-imports" in dry.stdout and "pytest" in dry.stdout, dry.stdout + dry.stderr
    dry = subprocess.run(["make", "-n", "demo"], cwd=ROOT, capture_output=True, text=True)
    demo = [line.split("/depl ", 1)[1] for line in dry.stdout.splitlines() if "/depl " in line]
    assert len(demo) == 3, dry.stdout
    for command in demo:   # make demo's own depl commands, for real
        r = depl_cli(*shlex.split(command), cwd=tmp_path)
        assert r.returncode == 0, (command, r.stderr)
    assert (tmp_path / "demo-plan.json").is_file() and (tmp_path / "demo-plan.png").is_file()


def test_the_five_minute_path_runs(depl_cli, tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")   # it trains
    torch.set_num_threads(1)
    ran = []
    for command in commands():
        if command.startswith("make ") or "--certify" in command:
            continue
        args = depl_args(command)
        if args[0] == "run":   # 1 seed instead of 3: the same command, a third of the training
            args[args.index("--seeds") + 1] = "1"
        r = depl_cli(*args, cwd=tmp_path)
        assert r.returncode == 0, (command, r.stdout[-2000:], r.stderr[-2000:])
        ran.append(args[0])
    assert ran == ["scenarios", "plan", "simulate", "run", "runs", "export-model"], ran
    assert (tmp_path / "band.png").is_file() and (tmp_path / "model.pt2").is_file()
    (code,) = blocks("python")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "readme"}
    exec(compile(code, str(README), "exec"), namespace)
    assert tuple(namespace["model"](namespace["x"]).shape) == (4, 10)


def test_the_certified_search_prints_the_price_the_readme_shows(depl_cli, tmp_path):
    (command,) = [c for c in commands() if "--certify" in c]
    shown = [line for block in blocks("text") if block.startswith("certified search") for line in block.splitlines()]
    assert shown and shown[-1].lstrip().startswith("price, by the law"), shown
    proc = depl_cli.start(*depl_args(command), cwd=tmp_path, stderr=subprocess.DEVNULL)
    printed = []
    try:
        for line in proc.stdout:   # the candidates and the price come before the first seed trains
            printed.append(line.rstrip("\n"))
            if line.lstrip().startswith("price, by the law") or len(printed) > 50:
                break
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    for line in shown:
        if line.strip() != "…":
            assert line in printed, f"README.md shows {line!r}; depl printed:\n" + "\n".join(printed)
