import os
import signal
import subprocess
import sys
import time

import pytest

from depl.store import EpochRow, Store, StoreError, store_path
from trainkit import SWITCH_PLAN, make_plan

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not


def row(k, loss=1.0):
    return EpochRow(k, "full", "A", loss, 0.5, 1.5, 0.01)


def test_an_epoch_is_never_counted_twice_nor_skipped(tmp_path):
    s = Store(tmp_path / "s.sqlite")
    s.start_run("r", "plan", {"a": 1})
    s.record_epoch("r", 0, row(1), checkpoint=b"one")
    with pytest.raises(StoreError, match="after epoch 1"):
        s.record_epoch("r", 0, row(1))
    with pytest.raises(StoreError, match="after epoch 1"):
        s.record_epoch("r", 0, row(3))
    s.record_epoch("r", 0, row(2), checkpoint=b"two")
    assert s.done_epochs("r", 0) == 2 and s.checkpoint("r", 0) == (2, b"two")
    s.record_epoch("r", 0, row(3), final=True)
    assert s.checkpoint("r", 0) is None and s.count_epochs("r") == 3


def test_a_failed_write_leaves_nothing_half_done(tmp_path):
    s = Store(tmp_path / "s.sqlite")
    s.start_run("r", "plan", {})
    s.record_epoch("r", 0, row(1), checkpoint=b"one")
    with pytest.raises(Exception):
        s.record_epoch("r", 0, EpochRow(2, "full", "A", None, 0.5, 1.5, 0.01), checkpoint=b"two")  # NOT NULL
    assert s.done_epochs("r", 0) == 1 and s.checkpoint("r", 0) == (1, b"one")


def test_the_store_is_reopened_with_its_runs(tmp_path):
    url = f"sqlite:///{tmp_path}/s.sqlite"
    with Store(url) as s:
        s.start_run("r", "profile", {"x": [1, 2]})
        s.record_epoch("r", 4, row(1, 2.0))
    with Store(url) as s:
        assert [r["run_id"] for r in s.runs("profile")] == ["r"]
        assert s.losses("r") == {4: [2.0]}
        s.start_run("r", "profile", {"x": [1, 2]})  # same spec: fine
        with pytest.raises(StoreError, match="another specification"):
            s.start_run("r", "profile", {"x": [1, 3]})


def test_a_plan_made_again_is_the_same_run_its_timings_apart(tmp_path):
    """`depl plan` (or `depl plan --certify` resumed) writes the plan again with other timings: `depl run` of it
    resumes the run it began, while a plan that trains anything else is another specification."""
    plan = {"epochs": [["full", "A"]], "solve_seconds": 0.07,
            "info": {"certificate": {"runs": 48, "evidence": {"seconds": 16.1}}}}
    again = {**plan, "solve_seconds": 0.06, "info": {"certificate": {"runs": 48, "evidence": {"seconds": 0.04}}}}
    with Store(tmp_path / "s.sqlite") as s:
        s.start_run("r", "plan", {"backend": "local", "plan": plan})
        s.start_run("r", "plan", {"backend": "local", "plan": again})
        assert s.runs("plan")[0]["spec"]["plan"]["solve_seconds"] == 0.07  # the record as first written
        for other in ({**plan, "epochs": [["half", "A"]]}, {**plan, "info": {"certificate": {"runs": 47, "evidence": {"seconds": 16.1}}}}):
            with pytest.raises(StoreError, match="another specification"):
                s.start_run("r", "plan", {"backend": "local", "plan": other})
        with pytest.raises(StoreError, match="another specification"):
            s.start_run("r", "plan", {"backend": "flower", "plan": plan})


def test_a_plan_whose_folder_moved_is_the_same_run(tmp_path):
    """A plan read from another copy of its folder names its certified search's store, kept models and α ledger
    at other paths (depl.plan.with_paths): where they lie is not what a run of it trains."""
    def plan(at: str) -> dict:
        ev = {"store": f"{at}/runs.sqlite", "models": {"folder": f"{at}/runs/models/plan-1", "kept": 2},
              "alpha_ledger": {"path": f"{at}/x.alpha.json"}, "first_seed": 5}
        return {"epochs": [["full", "A"]], "info": {"certificate": {"kind": "search", "evidence": ev}}}

    with Store(tmp_path / "s.sqlite") as s:
        s.start_run("r", "plan", {"backend": "local", "plan": plan("/home/a/project")})
        s.start_run("r", "plan", {"backend": "local", "plan": plan("/srv/clone/project")})
        other = plan("/home/a/project")
        other["info"]["certificate"]["evidence"]["first_seed"] = 6
        with pytest.raises(StoreError, match="another specification"):
            s.start_run("r", "plan", {"backend": "local", "plan": other})


def test_store_urls():
    assert store_path("sqlite:///runs.db") == "runs.db"
    assert store_path("sqlite:////tmp/runs.db") == "/tmp/runs.db"
    with pytest.raises(StoreError, match="only SQLite"):
        store_path("postgresql://host/db")


# default: two worker processes, each a vectorised batch of 3 seeds; --workers 1: one batch of 6 seeds cut by the kill
@pytest.mark.parametrize("options", [[], ["--workers", "1"]], ids=["workers", "one-batch"])
def test_a_run_killed_hard_resumes_without_losing_or_repeating_an_epoch(depl_cli, tmp_path, options):
    plan = tmp_path / "plan.json"
    make_plan(SWITCH_PLAN).save(plan)
    seeds, n = 6, len(SWITCH_PLAN)
    db = tmp_path / "killed.sqlite"
    args = lambda out: ["run", str(plan), "--seeds", str(seeds), "--out", str(tmp_path / out), *options]  # noqa: E731
    run = args("o")
    proc = depl_cli.start(*run, "--store", str(db))
    deadline = time.time() + 300
    while time.time() < deadline:  # kill it in the middle of the run
        time.sleep(0.2)
        try:
            with Store(db, readonly=True) as s:  # a reader does not lock the running writer out
                if s.count_epochs() >= 7:
                    break
        except StoreError:  # not there yet, or created but its schema not yet committed
            continue
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with Store(db) as s:
        killed_at = s.count_epochs()
    assert 7 <= killed_at < seeds * n, "the run was not killed in the middle"

    again = depl_cli.start(*run, "--store", str(db))
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert "resuming" in out
    ref_db = tmp_path / "ref.sqlite"
    ref = depl_cli.start(*args("ref"), "--store", str(ref_db))
    assert ref.communicate(timeout=300) and ref.returncode == 0
    with Store(db) as s, Store(ref_db) as r:
        (run,) = s.runs()
        assert s.count_epochs() == seeds * n
        assert s.seeds(run["run_id"]) == list(range(seeds))
        # the resumed trajectories are those of an uninterrupted run
        assert s.losses(run["run_id"]) == r.losses(run["run_id"])
    # and so are the final models, bit for bit (a model written before its epoch's commit is written again, the same)
    kept = {p.name: p.read_bytes() for p in (tmp_path / "o" / "models" / run["run_id"]).iterdir()}
    uninterrupted = {p.name: p.read_bytes() for p in (tmp_path / "ref" / "models" / run["run_id"]).iterdir()}
    assert sorted(kept) == sorted(f"seed-{k}.{x}" for k in range(seeds) for x in ("json", "pt"))
    assert kept == uninterrupted


def test_a_batch_of_seeds_is_recorded_whole_or_not_at_all(tmp_path):
    s = Store(tmp_path / "s.sqlite")
    s.start_run("r", "plan", {})
    s.record_epochs("r", [(0, row(1), b"a0", False), (1, row(1), b"a1", False)])
    assert [s.done_epochs("r", k) for k in (0, 1)] == [1, 1] and s.checkpoint("r", 1) == (1, b"a1")
    with pytest.raises(StoreError, match="seed 1: epoch 3"):  # seed 1's row is wrong: seed 0's goes too
        s.record_epochs("r", [(0, row(2), b"b0", False), (1, row(3), b"b1", False)])
    assert [s.done_epochs("r", k) for k in (0, 1)] == [1, 1] and s.checkpoint("r", 0) == (1, b"a0")


def test_a_damaged_or_foreign_store_is_refused_on_open(tmp_path):
    import sqlite3

    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"\x00garbage" * 1000)
    with pytest.raises(StoreError, match="not a usable SQLite store"):
        Store(junk, readonly=True)
    foreign = tmp_path / "foreign.sqlite"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE runs (a, b)")
    with pytest.raises(StoreError, match="no schema version .* not a depl store"):
        Store(foreign)
    with sqlite3.connect(foreign) as db:
        db.execute("PRAGMA user_version = 4")
    with pytest.raises(StoreError, match="table 'runs' has columns"):
        Store(foreign)
    ok = tmp_path / "spec.sqlite"
    with Store(ok) as s:
        s.start_run("r", "plan", {})
        s._db.execute("UPDATE runs SET spec = '{not json'")
    with Store(ok, readonly=True) as s, pytest.raises(StoreError, match="runs.spec of run 'r'.*not a JSON object"):
        s.runs()


@pytest.mark.parametrize("version", [1, 3, 5])
def test_a_store_of_another_schema_version_is_refused_in_one_line_and_left_as_it_is(tmp_path, version):
    """One schema: a store another version of depl wrote (older or newer) is neither read nor migrated."""
    import sqlite3

    path = tmp_path / "other.sqlite"
    with Store(path) as s:
        s.start_run("r", "plan", {})
        s.record_epoch("r", 0, row(1))
        s._db.execute("DROP TABLE seed_uses")   # a table that version had not, say
        s._db.execute(f"PRAGMA user_version = {version}")
        s._db.execute("PRAGMA journal_mode = DELETE")
    before = path.read_bytes()
    for readonly in (True, False):
        with pytest.raises(StoreError) as e:
            Store(path, readonly=readonly)
        assert str(e.value) == (f"{path}: a store of schema version {version}, written by another version of depl "
                                "(this one reads schema version 4 only); read it with the depl that wrote it")
    assert path.read_bytes() == before
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 0")   # as stores were before versions were kept
    with pytest.raises(StoreError, match="no schema version .* written by another version of depl"):
        Store(path)


def test_a_store_whose_columns_differ_from_the_schema_is_refused(tmp_path):
    """Same names, other constraints: test_accuracy NOT NULL (a regression's epoch has no accuracy) is refused on
    open, naming the column, not when the first such epoch is written."""
    import sqlite3

    path = tmp_path / "s.sqlite"
    Store(path).close()
    db = sqlite3.connect(path)
    ddl = db.execute("SELECT sql FROM sqlite_master WHERE name = 'epochs'").fetchone()[0]
    db.executescript("DROP TABLE epochs; " + ddl.replace("test_accuracy REAL", "test_accuracy REAL NOT NULL"))
    db.close()
    with pytest.raises(StoreError, match=r"column epochs.test_accuracy is REAL NOT NULL, not REAL as in depl's schema"):
        Store(path, readonly=True)


def test_an_empty_file_becomes_a_store_when_written_and_is_refused_when_read(tmp_path):
    path = tmp_path / "new.sqlite"
    path.write_bytes(b"")
    with pytest.raises(StoreError, match="an empty SQLite file, not a depl store"):
        Store(path, readonly=True)
    with Store(path) as s:
        s.start_run("r", "plan", {})
    with Store(path, readonly=True) as s:
        assert [r["run_id"] for r in s.runs()] == ["r"]


def test_resume_refuses_a_gap_or_a_stale_checkpoint(tmp_path):
    s = Store(tmp_path / "s.sqlite")
    s.start_run("r", "plan", {})
    for k in (1, 2, 3):
        s.record_epoch("r", 0, row(k), checkpoint=b"w%d" % k)
    assert s.resume_point("r", 0) == (3, b"w3")
    s._db.execute("UPDATE checkpoints SET epoch = 2")
    with pytest.raises(StoreError, match="checkpoint is of epoch 2"):
        s.resume_point("r", 0)
    s._db.execute("DELETE FROM epochs WHERE epoch = 2")
    with pytest.raises(StoreError, match="between 1 and 3"):
        s.resume_point("r", 0)


def test_a_second_writer_is_told_the_store_is_in_use_and_readers_are_not(tmp_path):
    db = tmp_path / "s.sqlite"
    with Store(db) as s:
        s.start_run("r", "plan", {})
        code = ("from depl.store import Store, StoreError\n"
                f"try:\n    Store({str(db)!r})\nexcept StoreError as e:\n    print(e)\n"
                f"print(len(Store({str(db)!r}, readonly=True).runs()))")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert "store in use" in r.stdout and r.stdout.strip().endswith("1"), r.stdout + r.stderr
    with Store(db):  # released on close
        pass
