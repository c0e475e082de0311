"""Image data read from files: Fashion-MNIST's idx files (gzipped or not), CIFAR-10's binary batches, a run's own
subset of them ([training] data_subset), and the built-in fashion-small trained for real."""

from __future__ import annotations

import gzip
import json
import pickle
import struct

import numpy as np
import pytest

from depl.plan import Epoch, Plan, with_figures
from depl.scenario import load_scenario, parse_scenario, scenario_dict
from depl.store import Store
from depl.train.task import data
from trainkit import make_plan, needs_fashion

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not


def _idx_images(x: np.ndarray) -> bytes:
    return struct.pack(">IIII", 2051, *x.shape) + x.astype(np.uint8).tobytes()


def _idx_labels(y: np.ndarray) -> bytes:
    return struct.pack(">II", 2049, len(y)) + y.astype(np.uint8).tobytes()


def write_idx(folder, n_train: int = 60, n_test: int = 20, side: int = 28, gz: bool = True, seed: int = 0):
    """A folder of the four MNIST-format idx files of random images (every class present); returns the arrays."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for which, n in (("train", n_train), ("t10k", n_test)):
        x = rng.integers(0, 256, size=(n, side, side), dtype=np.uint8)
        y = np.arange(n) % 10
        for kind, blob in (("images-idx3", _idx_images(x)), ("labels-idx1", _idx_labels(y))):
            name = f"{which}-{kind}-ubyte"
            if gz:
                (folder / f"{name}.gz").write_bytes(gzip.compress(blob))
            else:
                (folder / name).write_bytes(blob)
        out[which] = (x, y)
    return out


def cli(*args) -> tuple[int, str, str]:
    """depl in this process (cheap): exit code, stdout and stderr; an escaped exception fails the test.  (--data
    sets $DEPL_DATA for the process: a test that passes it has set the variable with monkeypatch first.)"""
    from typer.testing import CliRunner

    import depl.cli

    r = CliRunner().invoke(depl.cli.app, list(map(str, args)), env={"COLUMNS": "250"})
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r.exit_code, r.stdout, r.stderr.strip()


def _load(folder):
    data.fashion_images.cache_clear()
    data.fashion_mnist.cache_clear()
    return data.load_source("fashion-mnist", str(folder))


def test_idx_files_are_read_gzipped_or_not_and_normalised(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPL_DATA", str(tmp_path))
    arrays = write_idx(tmp_path / "gz", gz=True)
    write_idx(tmp_path / "plain", gz=False)
    a, b = _load(tmp_path / "gz"), _load(tmp_path / "plain")
    assert a.x_train.shape == (60, 1, 28, 28) and a.x_test.shape == (20, 1, 28, 28) and a.x_train.dtype == np.float32
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_test, b.y_test)
    assert np.array_equal(a.y_train, arrays["train"][1]) and a.y_train.dtype == np.int64
    want = (arrays["train"][0][3] / 255.0 - 0.2860) / 0.3530
    assert np.allclose(a.x_train[3, 0], want, atol=1e-5)


def _refusal(tmp_path, monkeypatch, match: str):
    monkeypatch.setenv("DEPL_DATA", str(tmp_path))
    with pytest.raises(data.DataError, match=match) as e:
        _load(tmp_path / "f")
    assert "\n" not in str(e.value)
    return str(e.value)


def test_a_truncated_idx_file_is_refused_naming_it(tmp_path, monkeypatch):
    write_idx(tmp_path / "f", gz=False)
    f = tmp_path / "f" / "train-images-idx3-ubyte"
    f.write_bytes(f.read_bytes()[:-100])
    msg = _refusal(tmp_path, monkeypatch, r"train-images-idx3-ubyte: its header says 60 × 28 × 28 images "
                                          r"\(47,040 bytes\) but 46,940 bytes follow it \(truncated\)")
    assert msg.startswith(str(f))


def test_a_truncated_gzip_file_is_refused(tmp_path, monkeypatch):
    write_idx(tmp_path / "f")
    f = tmp_path / "f" / "t10k-labels-idx1-ubyte.gz"
    f.write_bytes(f.read_bytes()[:-12])
    _refusal(tmp_path, monkeypatch, r"t10k-labels-idx1-ubyte.gz: a truncated gzip file")


def test_a_wrong_magic_number_is_refused(tmp_path, monkeypatch):
    write_idx(tmp_path / "f", gz=False)
    f = tmp_path / "f" / "train-labels-idx1-ubyte"
    f.write_bytes(struct.pack(">I", 2051) + f.read_bytes()[4:])  # an images' magic on a labels file
    _refusal(tmp_path, monkeypatch, r"train-labels-idx1-ubyte: magic number 2051, not 2049")


def test_a_label_out_of_range_is_refused(tmp_path, monkeypatch):
    write_idx(tmp_path / "f", gz=False)
    f = tmp_path / "f" / "t10k-labels-idx1-ubyte"
    blob = bytearray(f.read_bytes())
    blob[8 + 7] = 10
    f.write_bytes(bytes(blob))
    _refusal(tmp_path, monkeypatch, r"t10k-labels-idx1-ubyte: label 10 at position 7; the classes are 0..9")


def test_images_and_labels_of_different_counts_are_refused(tmp_path, monkeypatch):
    write_idx(tmp_path / "f", gz=False)
    (tmp_path / "f" / "train-labels-idx1-ubyte").write_bytes(_idx_labels(np.arange(59) % 10))
    _refusal(tmp_path, monkeypatch, r"train-labels-idx1-ubyte: 59 labels for the 60 images of train-images-idx3-ubyte")


def test_a_folder_without_the_files_says_where_it_looked_and_how_to_install(tmp_path, monkeypatch):
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("DEPL_DATA", str(tmp_path / "empty"))
    monkeypatch.setitem(data.SYSTEM_FOLDERS, data.FASHION, tmp_path / "not-installed")
    with pytest.raises(data.DataError) as e:
        data.load_source("fashion-mnist")
    msg = str(e.value)
    assert "\n" not in msg and str(tmp_path / "empty") in msg and str(tmp_path / "not-installed") in msg
    assert "apt-get install dataset-fashion-mnist" in msg and "--data DIR" in msg
    with pytest.raises(data.DataError, match=r"empty/train-images-idx3-ubyte\(.gz\): missing"):
        _load(tmp_path / "empty")  # a dataset's own `path`: looked for there only


def test_data_finds_a_source_without_a_path_in_the_data_folders_first(tmp_path, monkeypatch):
    write_idx(tmp_path / "fashion-mnist", n_train=30)
    monkeypatch.setenv("DEPL_DATA", str(tmp_path))
    data.fashion_images.cache_clear()
    assert data.source_folder("fashion-mnist", None) == (str(tmp_path / "fashion-mnist"), False)
    assert len(data.file_images("fashion-mnist", None).y_train) == 30


def test_a_subset_is_each_runs_own_draw_of_the_same_sizes(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPL_DATA", str(tmp_path))
    write_idx(tmp_path / "f", n_train=120, n_test=20)
    data.fashion_images.cache_clear()
    a = data.load_source("fashion-mnist", str(tmp_path / "f"), draw=1, subset=30)
    b = data.load_source("fashion-mnist", str(tmp_path / "f"), draw=2, subset=30)
    again = data.load_source("fashion-mnist", str(tmp_path / "f"), draw=1, subset=30)
    assert a.x_train.shape == b.x_train.shape == (30, 1, 28, 28) and len(a.y_test) == len(b.y_test) == 5  # 6:1
    assert not np.array_equal(a.x_train, b.x_train) and np.array_equal(a.x_train, again.x_train)
    flat = lambda s: {r.tobytes() for r in np.concatenate([s.x_train, s.x_test])}  # noqa: E731
    assert len(flat(a)) == 35  # drawn without replacement: train and test disjoint
    fixed = data.load_source("fashion-mnist", str(tmp_path / "f"), subset=30)
    assert np.array_equal(fixed.x_train, data.load_source("fashion-mnist", str(tmp_path / "f"), subset=30).x_train)
    with pytest.raises(data.DataError, match=r"data_subset = 130: the source holds 140 samples"):
        data.load_source("fashion-mnist", str(tmp_path / "f"), draw=1, subset=130)
    spec = data.DataSpec("fashion-mnist", ((0.0, 1.0),), str(tmp_path / "f"), draws="run", subset=30)
    assert data.DataSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    assert len(data.select(spec.seeded(4))[1]) == 30


# ---- CIFAR-10's binary version ------------------------------------------------------------------------------------

def write_cifar_bin(folder, n: int = 4, seed: int = 0):
    """CIFAR-10's binary version in miniature: data_batch_1..5.bin and test_batch.bin of `n` 3,073-byte records."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    out = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        x = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        y = (np.arange(n) + rng.integers(0, 10)) % 10
        (folder / f"{name}.bin").write_bytes(np.concatenate([y[:, None].astype(np.uint8), x], axis=1).tobytes())
        out[name] = (x, y)
    return out


def test_cifar10s_binary_version_reads_as_its_python_version(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPL_DATA", str(tmp_path))
    arrays = write_cifar_bin(tmp_path / "cifar-10-batches-bin")
    (tmp_path / "py").mkdir()
    for name, (x, y) in arrays.items():
        (tmp_path / "py" / name).write_bytes(pickle.dumps({b"data": x, b"labels": [int(v) for v in y]}))
    data.cifar10.cache_clear()
    data.cifar10_images.cache_clear()
    binary, python = data.load_source("cifar10", str(tmp_path)), data.load_source("cifar10", str(tmp_path / "py"))
    assert binary.x_train.shape == (20, 3, 32, 32) and binary.x_test.shape == (4, 3, 32, 32)
    for a, b in zip((binary.x_train, binary.y_train, binary.x_test, binary.y_test),
                    (python.x_train, python.y_train, python.x_test, python.y_test)):
        assert np.array_equal(a, b)


def test_a_pickle_or_a_cut_record_where_binary_batches_are_expected_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPL_DATA", str(tmp_path))
    write_cifar_bin(tmp_path / "c")
    f = tmp_path / "c" / "data_batch_2.bin"
    f.write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 1]}, protocol=2))
    data.cifar10_images.cache_clear()
    with pytest.raises(data.DataError, match=r"data_batch_2.bin: a pickle \(CIFAR-10's python version\), not the "
                                             r"binary version's 3,073-byte records"):
        data.load_source("cifar10", str(tmp_path / "c"))
    f.write_bytes(b"\x03" * 3000)
    with pytest.raises(data.DataError, match=r"data_batch_2.bin: 3,000 bytes, not a whole number of 3,073-byte"):
        data.load_source("cifar10", str(tmp_path / "c"))
    f.write_bytes(b"\x0b" * 3073)
    with pytest.raises(data.DataError, match=r"data_batch_2.bin: record 0 has label 11"):
        data.load_source("cifar10", str(tmp_path / "c"))


def _paper_alexnet_plan(path, epochs: int = 1) -> None:
    """paper-alexnet's plan of `epochs` epochs of its version pruned 0.5, its AlexNet at width 8 (not 64: the
    test is about the data, and pruning the full-width net alone takes seconds)."""
    spec = scenario_dict(load_scenario("paper-alexnet"))
    for m in spec["models"]:
        m["train"]["width"] = 8
    s = parse_scenario(spec)
    schedule = [Epoch(k + 1, "fast-unsteady", "A1", 1.0) for k in range(epochs)]
    with_figures(Plan("hand", s.name, True, ["cifar10"], schedule, 0.0, 0.0, 0.0, 0.0, 0.0), s).save(path)


def test_paper_alexnet_trains_on_cifar10s_binary_batches_found_by_data(tmp_path, monkeypatch):
    """paper-alexnet names CIFAR-10 without a `path`: --data DIR finds its binary version there."""
    write_cifar_bin(tmp_path / "data" / "cifar-10-batches-bin", n=6)
    _paper_alexnet_plan(tmp_path / "plan.json")
    monkeypatch.setenv("DEPL_DATA", str(tmp_path / "elsewhere"))
    monkeypatch.chdir(tmp_path)
    code, _, err = cli("run", "plan.json", "--seeds", "1", "--workers", "1", "--data", tmp_path / "data",
                       "--out", "out")
    assert code == 0, err
    with Store(tmp_path / "out" / "runs.sqlite") as st:
        (run,) = st.runs("plan")
        assert run["spec"]["job"]["data"]["source"] == "cifar10"
        (row,) = st.trajectory(run["run_id"], 0)
        assert np.isfinite(row.test_loss)


def test_a_pickle_where_binary_batches_are_expected_stops_the_run_in_one_line(tmp_path, monkeypatch):
    write_cifar_bin(tmp_path / "data" / "cifar-10-batches-bin")
    (tmp_path / "data" / "cifar-10-batches-bin" / "test_batch.bin").write_bytes(pickle.dumps({b"labels": []}, 2))
    _paper_alexnet_plan(tmp_path / "plan.json")
    monkeypatch.setenv("DEPL_DATA", str(tmp_path / "elsewhere"))
    monkeypatch.chdir(tmp_path)
    code, _, err = cli("run", "plan.json", "--seeds", "1", "--data", tmp_path / "data", "--out", "out")
    assert code == 2 and "Traceback" not in err
    (line,) = err.splitlines()
    assert "test_batch.bin: a pickle (CIFAR-10's python version)" in line and "datasets[0]" in line
    assert not (tmp_path / "out" / "runs.sqlite").exists()


# ---- on the command line: one line, exit 2, nothing trained -------------------------------------------------------

BREAKS = {
    "truncated": lambda f: (f / "train-images-idx3-ubyte").write_bytes(
        (f / "train-images-idx3-ubyte").read_bytes()[:-1]),
    "magic": lambda f: (f / "t10k-images-idx3-ubyte").write_bytes(
        struct.pack(">I", 2049) + (f / "t10k-images-idx3-ubyte").read_bytes()[4:]),
    "label": lambda f: (f / "train-labels-idx1-ubyte").write_bytes(_idx_labels(np.full(60, 10))),
    "missing": lambda f: (f / "t10k-labels-idx1-ubyte").unlink(),
}
WHY = {"truncated": "train-images-idx3-ubyte: its header says", "magic": "t10k-images-idx3-ubyte: magic number 2049",
       "label": "train-labels-idx1-ubyte: label 10 at position 0", "missing": "t10k-labels-idx1-ubyte(.gz): missing"}


@pytest.mark.parametrize("broken", sorted(BREAKS))
def test_a_bad_idx_file_stops_depl_run_in_one_line_with_exit_2(tmp_path, monkeypatch, broken):
    folder = tmp_path / "data" / "fashion"
    write_idx(folder, gz=False)
    BREAKS[broken](folder)
    make_plan([("full", "A")], source="fashion-mnist", net="alexnet28", path=str(folder), width=2).save(
        tmp_path / "plan.json")
    monkeypatch.setenv("DEPL_DATA", str(tmp_path / "elsewhere"))
    monkeypatch.chdir(tmp_path)
    code, _, err = cli("run", "plan.json", "--seeds", "1", "--data", tmp_path / "data", "--out", "out")
    assert code == 2 and "Traceback" not in err, err
    (line,) = err.splitlines()
    assert WHY[broken] in line and "datasets[0].path" in line and str(folder) in line
    assert not (tmp_path / "out" / "runs.sqlite").exists()


def test_a_path_outside_the_data_folders_stops_depl_run(tmp_path, monkeypatch):
    write_idx(tmp_path / "fashion")
    make_plan([("full", "A")], source="fashion-mnist", net="alexnet28", path=str(tmp_path / "fashion"),
              width=2).save(tmp_path / "plan.json")
    monkeypatch.setenv("DEPL_DATA", str(tmp_path / "elsewhere"))
    monkeypatch.chdir(tmp_path)
    code, _, err = cli("run", "plan.json", "--seeds", "1", "--out", "out")
    assert code == 2 and "outside the data folder" in err and len(err.splitlines()) == 1


# ---- the built-in fashion-small -------------------------------------------------------------------------------------

def test_fashion_small_plans_and_is_listed(tmp_path):
    code, out, err = cli("scenarios")
    assert code == 0 and "fashion-small" in out
    code, _, err = cli("plan", "fashion-small", "--out", tmp_path / "plan.json")
    assert code == 0, err
    plan = json.loads((tmp_path / "plan.json").read_text())
    s = load_scenario("fashion-small")
    assert plan["feasible"] and plan["loss_quantile"] <= s.target.loss
    assert {m.train.net for m in s.models} == {"alexnet28"} and [m.train.prune_ratio for m in s.models] == [0, .5, .75]
    assert s.training.data_draw == "run" and s.training.data_subset


@needs_fashion
def test_fashion_small_trains_for_real_on_a_small_subset(tmp_path, monkeypatch):
    """Three epochs of fashion-small (the full net, then a switch to the one pruned 0.5) on 600 images a run (its
    data_subset shrunk), read from the system's Fashion-MNIST; two seeds as one stack, each on its own draw."""
    spec = scenario_dict(load_scenario("fashion-small"))
    spec["training"]["data_subset"] = 600
    spec.pop("calibration", None)   # a hand-made schedule: the law as fitted gives its figures
    s = parse_scenario(spec)
    schedule = [Epoch(1, "full", "edge", 1.0), Epoch(2, "full", "cloud", 1.0), Epoch(3, "pruned-0.5", "cloud", 1.0)]
    with_figures(Plan("hand", s.name, True, ["fashion-a", "fashion-b"], schedule, 0, 0, 0, 0, 0), s).save(
        tmp_path / "plan.json")
    monkeypatch.chdir(tmp_path)
    code, _, err = cli("run", "plan.json", "--seeds", "2", "--seed-batch", "2", "--workers", "1", "--out", "out")
    assert code == 0, err
    with Store(tmp_path / "out" / "runs.sqlite") as st:
        (run,) = st.runs("plan")
        d = run["spec"]["job"]["data"]
        assert (d["source"], d["subset"], d["draws"]) == ("fashion-mnist", 600, "run")
        finals = []
        for seed in (0, 1):
            rows = st.trajectory(run["run_id"], seed)
            assert [(r.epoch, r.model) for r in rows] == [(1, "full"), (2, "full"), (3, "pruned-0.5")]
            finals.append(rows[-1].test_loss)
        assert all(np.isfinite(finals)) and max(finals) < s.initial_loss - 0.3 and finals[0] != finals[1]
