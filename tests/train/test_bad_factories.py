"""Your data factory, drawn per run (`data_draw = "run"`, a `seed` parameter), failing for some seeds: every seed's
draw is checked where it is drawn (not raising, not None, the networks' input shape, the dtypes of the data they
were built on, labels among their classes, finite values; the first seed's draw made twice is the same data) and a
bad one stops the command with exit 2 and one line naming the factory, the seed and what is wrong — before any epoch
where the draws are cheap, else when that seed starts, with the seeds trained before it kept in the store. Runs
whose losses go non-finite are counted at the end.

Real training throughout, tiny: 60 samples of 8 values in 3 classes, an MLP, 2 epochs.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from depl.store import Store
from depl.train.task.data import derive_seed

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not

NET_AND_DRAW = '''import torch
from torch import nn

def make_net(hidden: int = 8):
    return nn.Sequential(nn.Flatten(), nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 3))

def draw(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(60, 1, 8, generator=g)
    y = torch.arange(60) % 3
    return (x[:40], y[:40]), (x[40:], y[40:])

'''

# what `load(seed)` does for the draws of the run seeds in BAD (its body, indented), else it returns draw(seed)
CASES = {
    "raises": ({3}, 'raise ValueError("the archive of this draw is missing")',
               ["calling it failed: ValueError: the archive of this draw is missing"]),
    "none": ({2}, "return None", ["it returned a NoneType; expected (train, test)"]),
    "shape": ({1}, "(a, b), (c, d) = draw(seed)\n    return (a[..., :6], b), (c[..., :6], d)",
              ["its train inputs have shape (1, 6) per sample, not (1, 8) as the data the networks were built on"]),
    "labels": ({2}, "(a, b), test = draw(seed)\n    return (a, b + 2), test",
               ["its train labels include 4; the networks output 3 classes (labels 0..2)"]),
    "dtype": ({1}, "(a, b), (c, d) = draw(seed)\n    return (a.double(), b), (c.double(), d)",
              ["it gives float64 inputs and int64 labels, not float32 and int64"]),
    "nan": ({1, 3}, "(a, b), test = draw(seed)\n    a[5, 0, 2] = float('nan')\n    return (a, b), test",
            ["its train inputs hold 1 NaN value (of 320, in 1 of its 40 samples)"]),
    # the first seed's draw is made twice: noise from torch's global generator makes two draws of one seed differ
    "global": ({0}, "(a, b), test = draw(seed)\n    return (a + torch.rand(1), b), test",
               [f"it returned different data for the same seed (called twice as load(seed={derive_seed(0, 0)}): its "
                "train inputs differ) — uses a global random generator?"]),
}

SCENARIO = '''name = "own-draws"
initial_loss = 1.1
max_epochs = 10

[target]
loss = 1.0
quantile = 0.9
deadline = 100.0

[training]
lr = 0.05
batch_size = 16
data_draw = "run"

[[clusters]]
name = "edge"
capacity = 100.0
bandwidth = 10.0
unit_cost = 1.0
nodes = 1

[[datasets]]
name = "a"
samples = 40
source = "mydata:load"
share = [0.0, 1.0]

[[models]]
name = "full"
size = 1.0
work = 1.0
progress = { A = 0.5, B = 1.0 }
noise = { family = "invgamma", mean = 1.0, var = 0.01 }
train = { net = "mydata:make_net" }
'''

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial-own-model.md"

# the command line with every seed's draw found too dear to check ahead: each is checked when its seed starts
# (LATE_PRELUDE: the same for depl_cli.each)
LATE_PRELUDE = "import depl.train.task.data as d; d.CHECK_AHEAD_SECONDS = 0.0"
LATE = f"{LATE_PRELUDE}; from depl.cli import main; main()"


def write_factory(folder, bad: set[int], body: str) -> None:
    """mydata.py: `load(seed)` runs `body` for the draws of the run seeds in `bad` (a run's factory is called
    with its seed's own draw, derive_seed(seed, 0)), else returns draw(seed)."""
    draws = sorted(derive_seed(s, 0) for s in bad)
    (folder / "mydata.py").write_text(NET_AND_DRAW + f"BAD = {set(draws) or 'set()'}\n\ndef load(seed):\n"
                                      f"    if seed not in BAD:\n        return draw(seed)\n    {body}\n")


@pytest.fixture
def project(tmp_path):
    (tmp_path / "s.toml").write_text(SCENARIO)
    write_factory(tmp_path, set(), "pass")
    return tmp_path


def refused(r, seed: int, what: list[str]) -> str:
    """Exit 2, one line on stderr naming the factory, the seed and the problem; no traceback. The line."""
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("error: ")]
    assert line.startswith(f"error: your data factory mydata:load fails for seed {seed} (called as "
                           f"load(seed={derive_seed(seed, 0)}), the seed's own draw): "), line
    assert all(w in line for w in what), line
    return line


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_draw_stops_the_profile_before_any_epoch(depl_cli, project, case):
    bad, body, what = CASES[case]
    write_factory(project, bad, body)
    r = depl_cli("profile", "s.toml", "--epochs", "2", "--seeds", "5", "--out", "p", "--allow-code", ".", cwd=project)
    line = refused(r, min(bad), what)
    with Store(project / "p" / "runs.sqlite", readonly=True) as st:
        assert st.count_epochs() == 0  # checked up front: nothing trained
    if case == "labels":  # the tutorial shows this one as it is printed
        assert f"\n{line}\n" in TUTORIAL.read_text(encoding="utf-8")


def test_run_validate_and_certify_refuse_a_bad_draw_too(depl_cli, project):
    write_factory(project, {3}, CASES["raises"][1])  # the plan pins the file's digest: written before the plan
    r = depl_cli("plan", "s.toml", "--uncalibrated", "--out", "plan.json", cwd=project)
    assert r.returncode == 0, r.stderr
    what = CASES["raises"][2]
    *commands, r = depl_cli.each([   # one start-up for them all
        ["run", "plan.json", "--seeds", "5", "--out", "r", "--allow-code", "."],
        ["run", "plan.json", "--adaptive", "--seeds", "5", "--out", "a", "--allow-code", "."],
        ["validate", "s.toml", "plan.json", "--seeds", "4", "--first-seed", "0", "--out", "v", "--allow-code", "."],
        ["run", "plan.json", "--seeds", "5", "--out", "r", "--allow-code", ".", "--json"]], cwd=project)
    for refusal in commands:
        refused(refusal, 3, what)
    assert r.returncode == 2 and json.loads(r.stdout)["error"].startswith("your data factory mydata:load fails for "
                                                                          "seed 3"), r.stdout
    # seed 3 again, as another user would (the validation above put 0..3 in this task's seed book)
    refused(depl_cli("certify", "plan.json", "--first-seed", "0", "--max-runs", "5", "--batch", "5", "--out", "c",
                     "--allow-code", ".", cwd=project, env={"DEPL_SEED_LEDGER": str(project / "another-book")}), 3,
            what)


@pytest.mark.parametrize("how", [["--workers", "1", "--seed-batch", "1"], ["--workers", "2"]],
                         ids=["per-seed-loop", "worker-processes"])
def test_a_draw_checked_when_its_seed_starts_keeps_the_seeds_before_it_and_a_rerun_resumes(depl_cli, project, how):
    write_factory(project, {3}, CASES["raises"][1])
    args = ["profile", "s.toml", "--epochs", "2", "--seeds", "6", "--out", "p", "--allow-code", ".", *how]
    # the run, then the same code again in the same interpreter: it resumes, and stops at seed 3 again
    first, r = depl_cli.each([args, args], cwd=project, prelude=LATE_PRELUDE)
    refused(first, 3, CASES["raises"][2])
    refused(r, 3, CASES["raises"][2])
    assert "resuming (6 of 12 epochs done)" in r.stdout, r.stdout + r.stderr[-2000:]   # the first kept 6 epochs
    with Store(project / "p" / "runs.sqlite", readonly=True) as st:
        (run,) = st.runs()
        kept = {s: len(v) for s, v in st.losses(run["run_id"]).items()}
    assert 3 not in kept and all(n == 2 for n in kept.values())
    # the per-seed loop trains 0, 1, 2 before 3; two workers take seeds 0-2 and 3-5, and the first ends its batch
    assert set(kept) == {0, 1, 2}
    # the factory mended is other code: a run of its own (a run is identified by its code's sha256), every seed
    # trained by the mended factory; the runs of the earlier code stay as they were, never mixed in
    write_factory(project, set(), "pass")
    r = depl_cli(*args, cwd=project, code=LATE)
    assert r.returncode == 0 and "resuming" not in r.stdout, r.stdout + r.stderr[-2000:]
    with Store(project / "p" / "runs.sqlite", readonly=True) as st:
        runs = {x["run_id"]: {s: len(v) for s, v in st.losses(x["run_id"]).items()} for x in st.runs()}
    assert runs.pop(run["run_id"]) == kept
    assert list(runs.values()) == [{s: 2 for s in range(6)}]


def test_runs_whose_losses_go_non_finite_are_counted_at_the_end(depl_cli, project):
    # finite inputs of 1e30 for the draws of seeds 0 and 2: the first step's loss is finite, the weights then are not
    write_factory(project, {0, 2}, "(a, b), (c, d) = draw(seed)\n    return (a * 1e30, b), (c * 1e30, d)")
    profile = ["profile", "s.toml", "--epochs", "2", "--seeds", "4", "--out", "p", "--allow-code", "."]
    shown, again, planned, ran, validated = depl_cli.each([   # one start-up for them all
        profile, [*profile, "--json"], ["plan", "s.toml", "--uncalibrated", "--out", "plan.json"],
        ["run", "plan.json", "--seeds", "4", "--out", "r", "--allow-code", ".", "--json"],
        ["validate", "s.toml", "plan.json", "--seeds", "4", "--first-seed", "0", "--out", "v", "--allow-code", ".",
         "--json"]], cwd=project)
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr[-3000:]
    assert "2 of 4 runs diverged (seed 0 at epoch 1, seed 2 at epoch 1): their losses went non-finite" in shown.stdout
    out = json.loads(again.stdout)
    assert again.returncode == 0 and out["diverged_runs"] == 2 and out["runs"][0]["diverged"] == [0, 2]
    assert out["runs_trained"] == 4
    assert planned.returncode == 0, planned.stderr
    assert ran.returncode == 0 and json.loads(ran.stdout)["diverged"] == [0, 2], ran.stderr[-2000:]
    assert "2 of 4 runs diverged (seed 0 at epoch 1, seed 2 at epoch 1)" in ran.stderr
    assert validated.returncode in (0, 4) and json.loads(validated.stdout)["evidence"]["diverged"] == [0, 2], \
        validated.stderr[-2000:]
    assert "2 of 4 runs diverged (seed 0 at epoch 1, seed 2 at epoch 1)" in validated.stderr


def test_every_draw_is_checked_ahead_only_where_that_is_cheap(project, monkeypatch):
    from depl.scenario import load_scenario
    from depl.train.task import custom, data as data_mod

    monkeypatch.setenv("DEPL_CODE", str(project))
    write_factory(project, {4}, CASES["none"][1])
    spec = data_mod.data_spec(load_scenario(project / "s.toml"), ["a"])
    assert data_mod.check_draws([(spec, [0, 1, 2, 3])]) == 4                   # cheap: all four checked
    assert data_mod.check_draws([(spec, [0, 1, 2, 3, 4])], budget=0.0) == 0    # too dear: each when it starts
    custom._load_source.cache_clear()
    with pytest.raises(data_mod.DrawError) as e:
        data_mod.check_draws([(spec, [0, 1]), (replace(spec, fraction=0.5), [1, 4, 5])])  # one factory, its seeds
    assert e.value.seed == 4 and "it returned a NoneType" in str(e.value)
    with pytest.raises(data_mod.DrawError, match="fails for seed 4"):
        spec.seeded(4).load()   # where it is drawn, whatever checked it ahead


def test_your_fixed_data_with_a_nan_is_refused_with_its_field(project, monkeypatch):
    from depl.scenario import load_scenario
    from depl.train.task import data as data_mod

    monkeypatch.setenv("DEPL_CODE", str(project))
    (project / "fixed.py").write_text(NET_AND_DRAW + "def load():\n    (a, b), (c, d) = draw(0)\n"
                                      "    c[2, 0, 1] = float('inf')\n    return (a, b), (c, d)\n")
    (project / "f.toml").write_text(SCENARIO.replace('"mydata:load"', '"fixed:load"').replace('data_draw = "run"\n', ""))
    with pytest.raises(data_mod.DataError, match=r"datasets\[0\]\.source = 'fixed:load': its test inputs hold 1 "
                                                 r"infinite value \(of 160, in 1 of its 20 samples\)"):
        data_mod.data_spec(load_scenario(project / "f.toml"), ["a"])
