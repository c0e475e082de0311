import json
import subprocess
import sys

from depl.store import Store
import pytest

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not


def test_the_commands_module_does_not_import_torch():
    r = subprocess.run([sys.executable, "-c", "import sys, depl.cli; "
                        "print('torch' in sys.modules)"], capture_output=True, text=True)
    assert r.stdout.strip() == "False"


def test_the_local_back_end_trains_where_flower_is_not_installed(depl_cli, tmp_path):
    """A machine without flwr (a GPU image with torch alone) profiles and runs on the local back end: Flower is
    imported only by a run on --backend flower."""
    block = "sys.modules.update(dict.fromkeys(['flwr', 'ray'], None))   # `import flwr` raises ImportError"
    profile = ["profile", "digits-small", "--epochs", "1", "--seeds", "1", "--fractions", "1", "--version", "full",
               "--out", str(tmp_path / "p")]
    (r,) = depl_cli.each([profile], prelude=block)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    with Store(tmp_path / "p" / "runs.sqlite") as st:
        assert [len(v) for r in st.runs() for v in st.losses(r["run_id"]).values()] == [1]


def test_bad_input_exits_2_with_one_message(depl_cli, tmp_path):
    r = depl_cli("run", str(tmp_path / "missing.json"), "--out", str(tmp_path))
    assert r.returncode == 2 and "no such plan file" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "depl.plan/1"}))
    r = depl_cli("run", str(bad), "--out", str(tmp_path))
    assert r.returncode == 2 and "is missing" in r.stderr and "Traceback" not in r.stderr
    r = depl_cli("profile", "mnist1d-small", "--switch", "full:nope:3", "--out", str(tmp_path))
    assert r.returncode == 2 and "'nope'" in r.stderr and "Traceback" not in r.stderr
    # a switch to the same version, an empty fraction: typos, refused (they were run as a third experiment, skipped)
    for flag, value, why in (("--switch", "full:full:1", "FROM and TO are the same version"),
                             ("--fractions", "1,,0.5", "expected numbers separated by commas")):
        r = depl_cli("profile", "mnist1d-small", flag, value, "--out", str(tmp_path / "typo"))
        assert r.returncode == 2 and why in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not (tmp_path / "typo").exists()


def test_run_writes_every_epoch_of_every_seed(depl_cli, plan_file, tmp_path):
    r = depl_cli("run", str(plan_file), "--seeds", "2", "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().splitlines()[-1] == f"next: depl runs models {tmp_path / 'out'}"  # what to run next
    with Store(tmp_path / "out" / "runs.sqlite") as s:
        (run,) = s.runs("plan")
        assert run["spec"]["backend"] == "local" and run["spec"]["plan"]["method"] == "hand"
        traj = s.trajectory(run["run_id"], 1)
        assert [(t.epoch, t.model, t.cluster) for t in traj] == [(1, "full", "A"), (2, "full", "A"),
                                                                  (3, "half", "B"), (4, "quarter", "B")]
        assert all(t.seconds > 0 for t in traj)


def test_profile_then_runs_show_draws_the_bands(depl_cli, tmp_path):
    out = tmp_path / "p"
    r = depl_cli("profile", "mnist1d-small", "--epochs", "3", "--seeds", "3", "--version", "pruned-0.5",
                 "--version", "pruned-0.75", "--fractions", "1,0.5", "--switch", "pruned-0.5:pruned-0.75:2",
                 "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().splitlines()[-1] == f"next: depl fit {out / 'runs.sqlite'} --out fitted.toml"
    with Store(out / "runs.sqlite") as s:
        runs = s.runs("profile")
        assert len(runs) == 5
        assert all(s.count_epochs(x["run_id"]) == 9 for x in runs)
        sw = [x for x in runs if x["spec"]["experiment"]["kind"] == "switch"][0]
        assert [t.model for t in s.trajectory(sw["run_id"], 0)] == ["pruned-0.5", "pruned-0.5", "pruned-0.75"]
    again = depl_cli("profile", "mnist1d-small", "--epochs", "3", "--seeds", "3", "--version", "pruned-0.5",
                     "--version", "pruned-0.75", "--fractions", "1,0.5", "--switch", "pruned-0.5:pruned-0.75:2",
                     "--out", str(out))
    assert again.returncode == 0 and "45 of 45 epochs done" in again.stdout.replace("\n", " ")
    png = tmp_path / "bands.png"
    r = depl_cli("runs", "show", "--out", str(out), "--png", str(png))
    assert r.returncode == 0, r.stderr
    assert png.stat().st_size > 10_000 and "pruned-0.75" in r.stdout
    by_name = depl_cli("runs", "show", str(out / "runs.sqlite"), "--json")  # the store as an argument, as `depl fit`
    assert by_name.returncode == 0, by_name.stderr
    assert len(json.loads(by_name.stdout)["runs"]) == 5
    both = depl_cli("runs", "show", str(out / "runs.sqlite"), "--store", str(tmp_path / "other.sqlite"))
    assert both.returncode == 2 and "name the store once" in both.stderr


def test_profiles_next_step_never_writes_over_the_scenario_it_profiled(tmp_path, monkeypatch):
    """`depl profile fitted.toml …` names `--out fitted-2.toml` for the fit, not the file it read."""
    from depl.cli.profile import fit_out

    (tmp_path / "fitted.toml").write_text("")
    monkeypatch.chdir(tmp_path)
    assert fit_out("fitted.toml") == "fitted-2.toml" and fit_out("digits-small") == "fitted.toml"
    assert fit_out(str(tmp_path / "fitted.toml")) == "fitted-2.toml"


def test_options_of_how_seeds_train_that_would_do_nothing_are_refused(depl_cli, plan_file, tmp_path):
    """--seed-batch on Flower (its apps train each node's share) and --workers 3 with an executor that trains in
    this process were accepted and did nothing (it printed '× 1 worker')."""
    for args, why in ((["--backend", "flower", "--seed-batch", "4"], "--seed-batch: how the local back end trains"),
                      (["--workers", "3", "--executor", "loop"], "--workers 3: the loop executor trains in this")):
        r = depl_cli("run", plan_file, "--seeds", "1", *args, "--out", tmp_path / "o")
        assert r.returncode == 2 and why in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not (tmp_path / "o").exists()
