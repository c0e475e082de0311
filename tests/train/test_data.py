import os
import pickle

import numpy as np
import pytest

from depl.scenario import parse_scenario
from depl.train import data
from trainkit import scenario_dict


def test_mnist1d_is_generated_in_memory_the_same_every_time(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    import mnist1d.data as m1d

    data.mnist1d.cache_clear()
    a = data.mnist1d()
    b = m1d.make_dataset(m1d.get_dataset_args())  # the package's own function, canonical arguments
    assert a.x_train.shape == (4000, 1, 40) and a.x_test.shape == (1000, 1, 40)
    assert np.array_equal(a.x_train[:, 0], b["x"].astype(np.float32)) and np.array_equal(a.y_train, b["y"])
    assert np.array_equal(a.x_test[:, 0], b["x_test"].astype(np.float32)) and np.array_equal(a.y_test, b["y_test"])
    assert sorted(np.unique(a.y_train)) == list(range(10))
    assert os.listdir(tmp_path) == []  # nothing downloaded or cached on disk


def test_generating_mnist1d_leaves_numpys_global_rng_alone():
    np.random.seed(123)
    expected = np.random.rand()
    np.random.seed(123)
    data.mnist1d.cache_clear()
    data.mnist1d()
    assert np.random.rand() == expected


def test_digits_come_from_sklearns_bundled_copy():
    d = data.digits()
    assert d.x_train.shape[1:] == (1, 8, 8)
    assert len(d.y_train) + len(d.y_test) == 1797
    assert 0.0 <= d.x_train.min() and d.x_train.max() <= 1.0


def _fake_cifar(folder, n=20, seed=0):
    rng = np.random.default_rng(seed)
    folder.mkdir()
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
                 b"labels": list(rng.integers(0, 10, size=n))}
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f)


def test_cifar10_is_read_from_a_local_folder_in_its_python_format(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPL_DATA", str(tmp_path))
    _fake_cifar(tmp_path / "cifar-10-batches-py")
    src = data.load_source("cifar10", str(tmp_path))  # the parent folder works too
    assert src.x_train.shape == (100, 3, 32, 32) and src.x_test.shape == (20, 3, 32, 32)
    assert src.x_train.dtype == np.float32
    assert abs(float(src.x_train.mean())) < 0.5  # normalised with CIFAR's channel means


def test_a_missing_or_broken_cifar_folder_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPL_DATA", str(tmp_path))
    with pytest.raises(data.DataError, match="never downloaded"):
        data.load_source("cifar10", str(tmp_path / "nowhere"))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "data_batch_1").write_bytes(b"not a pickle")
    with pytest.raises(data.DataError, match="not a CIFAR-10 python batch"):
        data.cifar10.cache_clear()
        data.load_source("cifar10", str(tmp_path / "c"))


def test_the_selected_shares_are_concatenated_and_a_fraction_kept():
    s = parse_scenario(scenario_dict(share_to=0.5))
    spec = data.data_spec(s, ["d1", "d2"])
    x, y = data.select(spec)
    assert len(y) == 2000
    x1, _ = data.select(data.data_spec(s, ["d1"]))
    assert len(x1) == 1000 and np.array_equal(x1, data.mnist1d().x_train[:1000])
    xh, _ = data.select(data.data_spec(s, ["d1", "d2"], fraction=0.25))
    assert len(xh) == 500


def test_a_dataset_without_source_cannot_be_trained():
    d = scenario_dict()
    del d["datasets"][0]["source"]
    with pytest.raises(data.DataError, match="no `source`"):
        data.data_spec(parse_scenario(d), ["d1", "d2"])


def test_iid_shares_are_equal_disjoint_and_cover_the_data():
    y = np.repeat(np.arange(10), 30)
    shares = data.node_shares(y, 3, iid=True)
    assert [len(s) for s in shares] == [100, 100, 100]
    assert sorted(np.concatenate(shares)) == list(range(300))
    assert all(len(set(y[s])) == 10 for s in shares)


def test_non_iid_shares_give_each_node_few_classes():
    y = np.repeat(np.arange(10), 30)
    shares = data.node_shares(y, 5, iid=False)
    assert [len(s) for s in shares] == [60] * 5
    assert sorted(np.concatenate(shares)) == list(range(300))
    assert all(len(set(y[s])) <= 4 for s in shares)


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):  # what a hostile "batch" does on unpickling: run a callable
        return (open, (self.marker, "w"))


def test_a_cifar_batch_that_runs_code_is_refused_and_runs_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPL_DATA", str(tmp_path))
    _fake_cifar(tmp_path / "c")
    marker = tmp_path / "pwned"
    with open(tmp_path / "c" / "data_batch_1", "wb") as f:
        pickle.dump({b"data": _Payload(str(marker)), b"labels": []}, f)
    data.cifar10.cache_clear()
    with pytest.raises(data.DataError, match="refused to load"):
        data.load_source("cifar10", str(tmp_path / "c"))
    assert not marker.exists()


def test_data_is_read_only_inside_the_data_folder(tmp_path, monkeypatch):
    """`..`, an absolute path or a symlink out of $DEPL_DATA (default: the current folder) is refused,
    before any file is opened; inside it, a symlink is fine."""
    data_dir, outside = tmp_path / "data", tmp_path / "elsewhere"
    data_dir.mkdir()
    _fake_cifar(outside)
    _fake_cifar(data_dir / "cifar")
    (data_dir / "link-out").symlink_to(outside)
    (data_dir / "link-in").symlink_to(data_dir / "cifar")
    monkeypatch.chdir(data_dir)
    monkeypatch.delenv("DEPL_DATA", raising=False)
    for path in ("../elsewhere", str(outside), "link-out", "cifar/../../elsewhere", "~"):
        with pytest.raises(data.DataError, match=r"outside the data folder .*set DEPL_DATA"):
            data.load_source("cifar10", path)
    assert data.load_source("cifar10", "link-in").x_train.shape == (100, 3, 32, 32)
    monkeypatch.setenv("DEPL_DATA", f"{tmp_path / 'nothing'}:{outside}")  # several folders
    assert data.load_source("cifar10", str(outside)).x_test.shape == (20, 3, 32, 32)
    with pytest.raises(data.DataError, match="outside the data folders"):
        data.load_source("cifar10", str(data_dir / "cifar"))
