import os
import pickle

import numpy as np
import pytest

from depl.scenario import parse_scenario
from depl.train.task import data
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
    assert os.listdir(tmp_path) == []  # nothing downloaded, nothing written to the working folder


def test_generated_mnist1d_samples_are_kept_in_the_cache_and_read_back_the_same(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPL_CACHE", str(tmp_path))
    made = data._mnist1d_generate(50, 7)
    first = data._mnist1d_raw(50, 7)          # generated, then written
    (kept,) = (tmp_path / "data").iterdir()
    assert kept.name.startswith("mnist1d-50-7-") and kept.suffix == ".npz"
    again = data._mnist1d_raw(50, 7)          # read back
    for a, b, c in zip(made, first, again):
        assert a.dtype == b.dtype == c.dtype and np.array_equal(a, b) and np.array_equal(a, c)
    whole = kept.read_bytes()
    kept.write_bytes(b"not an npz")            # a broken file is made again, not used
    assert np.array_equal(data._mnist1d_raw(50, 7)[0], made[0])
    kept.write_bytes(whole[:len(whole) // 2])  # nor one cut off (a full disk, a copy stopped half way)
    assert np.array_equal(data._mnist1d_raw(50, 7)[0], made[0])
    np.savez(kept, x=made[0][:10], y=made[1])  # nor one of the wrong shape
    assert np.array_equal(data._mnist1d_raw(50, 7)[0], made[0])
    with np.load(kept) as f:
        assert np.array_equal(f["x"], made[0])


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


# --------------------------------------------------------------------------- #
# Every file read under the data folder, and pickles that would build too much
# --------------------------------------------------------------------------- #

def _spy_opens(monkeypatch) -> list[str]:
    """The files data.py opens from now on (it opens them with os.open only)."""
    opened, real_open = [], os.open

    def spy(path, *args, **kwargs):
        opened.append(os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(data.os, "open", spy)
    return opened


def test_a_batch_file_linked_out_of_the_data_folder_is_refused_and_nothing_is_read(tmp_path, monkeypatch):
    """The folder a scenario names lies inside $DEPL_DATA, one batch in it is a link out: each file is
    checked (links followed) right before it is opened, not only the folder."""
    data_dir, outside = tmp_path / "data", tmp_path / "elsewhere"
    data_dir.mkdir()
    _fake_cifar(outside)
    _fake_cifar(data_dir / "c")
    (data_dir / "c" / "data_batch_3").unlink()
    (data_dir / "c" / "data_batch_3").symlink_to(outside / "data_batch_3")
    monkeypatch.setenv("DEPL_DATA", str(data_dir))
    opened = _spy_opens(monkeypatch)
    data.cifar10.cache_clear()
    with pytest.raises(data.DataError, match=r"data_batch_3 resolves to .*elsewhere/data_batch_3, outside the data "
                                             r"folder .*set DEPL_DATA") as e:
        data.load_source("cifar10", str(data_dir / "c"))
    assert "\n" not in str(e.value)
    assert opened and not any("elsewhere" in p for p in opened), opened
    assert all(os.path.realpath(p).startswith(str(data_dir)) for p in opened)


def test_a_cifar_subfolder_linked_out_of_the_data_folder_is_refused(tmp_path, monkeypatch):
    """`path = "sub"` inside $DEPL_DATA whose sub/cifar-10-batches-py links elsewhere."""
    data_dir, outside = tmp_path / "data", tmp_path / "elsewhere"
    (data_dir / "sub").mkdir(parents=True)
    _fake_cifar(outside)
    (data_dir / "sub" / "cifar-10-batches-py").symlink_to(outside)
    monkeypatch.setenv("DEPL_DATA", str(data_dir))
    opened = _spy_opens(monkeypatch)
    data.cifar10.cache_clear()
    with pytest.raises(data.DataError, match=r"cifar-10-batches-py resolves to .*elsewhere, outside the data folder"):
        data.load_source("cifar10", str(data_dir / "sub"))
    assert opened == []


def test_an_error_never_shows_what_the_file_holds(tmp_path, monkeypatch):
    """A link to a file outside is refused unread; a file inside that is no pickle, or a pickle that is
    no batch, is named with the reason, never with its bytes or what unpickling found."""
    secret = b"<<depl-secret-7d1f>> host"
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (tmp_path / "hostname").write_bytes(secret)
    monkeypatch.setenv("DEPL_DATA", str(data_dir))
    cases = {"link-out": None, "not-a-pickle": secret, "not-a-batch": pickle.dumps({b"data": secret.decode()}),
             "bad-labels": pickle.dumps({b"data": np.zeros((1, 3072), np.uint8), b"labels": [secret]})}
    for name, blob in cases.items():
        _fake_cifar(data_dir / name)
        batch = data_dir / name / "data_batch_1"
        batch.unlink()
        if blob is None:
            batch.symlink_to(tmp_path / "hostname")
        else:
            batch.write_bytes(blob)
        data.cifar10.cache_clear()
        with pytest.raises(data.DataError) as e:
            data.load_source("cifar10", str(data_dir / name))
        msg = str(e.value)
        assert str(batch) in msg and "\n" not in msg, msg
        for shown in ("depl-secret", "'<'", "<<", "host'"):
            assert shown not in msg, (name, msg)


def _nested_list_bomb(levels: int = 8, width: int = 10) -> bytes:
    """A ~240-byte pickle whose 'data' is a list of 10 references to a list of 10 references … : 10**8
    elements once numpy turns it into an array (memo references cost two bytes each)."""
    out = [b"\x80\x02}q\x00(U\x04data", b"]q\x01(" + b"K\x00" * width + b"e0"]
    for level in range(2, levels + 1):
        out.append(b"]q%c(" % level + b"h%c" % (level - 1) * width + b"e" + (b"0" if level < levels else b""))
    out.append(b"U\x06labels]q%c(K\x00K\x00eu." % (levels + 1))
    return b"".join(out)


class _Calls:
    def __init__(self, f, args):
        self.f, self.args = f, args

    def __reduce__(self):
        return self.f, self.args


def _bombs() -> dict[str, bytes]:
    """Tiny pickles that asked the old unpickler (or numpy through it) for hundreds of megabytes."""
    from numpy.core.multiarray import _reconstruct

    n = 10**8
    objects = np.dtype(("O", (10**4, n // 10**4)))  # a dtype of 10**8 objects in one element
    return {"nested-list": _nested_list_bomb(),
            "object-array": pickle.dumps({b"data": _Calls(_reconstruct, (np.ndarray, (n,), b"O")), b"labels": [0]}),
            "ndarray-call": pickle.dumps({b"data": _Calls(np.ndarray, ((n,), "f8")), b"labels": [0]}),
            "memo-index": b"\x80\x02]r" + (200_000_000).to_bytes(4, "little") + b".",
            "subarray-dtype": pickle.dumps({b"data": _Calls(_reconstruct, (np.ndarray, (1,), objects)), b"labels": [0]})}


def test_tiny_pickles_that_would_build_huge_objects_are_refused_at_once(tmp_path):
    """Each bomb is refused in well under a second, the process growing by a few megabytes at most
    (measured in a fresh process: its peak resident size)."""
    import json
    import subprocess
    import sys
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # numpy.core's import path
        bombs = _bombs()
    for name, blob in bombs.items():
        _fake_cifar(tmp_path / name)
        (tmp_path / name / "data_batch_1").write_bytes(blob)
    assert len(bombs["nested-list"]) < 300 and len(bombs["memo-index"]) < 16
    code = """if True:
        import json, resource, sys, time
        from depl.train.task import data
        out = {}
        for name in sys.argv[1:]:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            t = time.perf_counter()
            try:
                data.load_source("cifar10", name)
                out[name] = "read"
            except data.DataError as e:
                out[name] = [str(e), time.perf_counter() - t,
                             (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024]
        print(json.dumps(out))
    """
    env = {**os.environ, "DEPL_DATA": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", code, *bombs], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    results = json.loads(r.stdout)
    for name, (msg, seconds, grown_mb) in results.items():
        assert "data_batch_1: not a CIFAR-10 python batch" in msg, (name, msg)
        assert seconds < 1.0 and grown_mb < 20, (name, seconds, grown_mb)


def test_an_oversized_batch_is_refused_on_its_size_before_a_byte_is_unpickled(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPL_DATA", str(tmp_path))
    _fake_cifar(tmp_path / "c")
    with open(tmp_path / "c" / "data_batch_1", "r+b") as f:
        f.truncate(data.MAX_BATCH_BYTES + 1)  # sparse: nothing written
    unpickled = []
    monkeypatch.setattr(data, "_scan_pickle", lambda blob: unpickled.append(len(blob)))
    monkeypatch.setattr(data._ArraysOnly, "load", lambda self: unpickled.append(self))
    data.cifar10.cache_clear()
    too_big = (r"data_batch_1: 41,943,041 bytes, more than a CIFAR-10 batch \(about 31 MB\) holds "
               r"\(at most 41,943,040 are read\)")
    with pytest.raises(data.DataError, match=too_big):
        data.load_source("cifar10", str(tmp_path / "c"))
    assert unpickled == []
    assert 30_000_000 < data.MAX_BATCH_BYTES < 50_000_000  # a real batch (~31 MB) fits


def test_a_batch_of_more_opcodes_than_a_real_one_is_refused_before_it_is_unpickled(tmp_path, monkeypatch):
    """Within the size cap, a pickle of one-byte opcodes (an empty list each) would build tens of
    millions of objects; a batch's opcodes are counted first."""
    monkeypatch.setenv("DEPL_DATA", str(tmp_path))
    monkeypatch.setattr(data, "MAX_PICKLE_OPS", 1000)
    _fake_cifar(tmp_path / "c")
    (tmp_path / "c" / "data_batch_1").write_bytes(b"\x80\x02(" + b"]" * 1000 + b"l.")
    monkeypatch.setattr(data._ArraysOnly, "load", lambda self: pytest.fail("unpickled"))
    data.cifar10.cache_clear()
    with pytest.raises(data.DataError, match=r"data_batch_1: not a CIFAR-10 python batch: more than 1,000 pickle"):
        data.load_source("cifar10", str(tmp_path / "c"))


def test_batches_in_each_pickle_format_are_read(tmp_path, monkeypatch):
    """CIFAR-10's own (Python 2, protocol 2: bytes as str, read as bytes), protocol 4 with numpy
    scalars as labels (as numpy pickles them), protocol 5 (numpy's `_frombuffer`), an array of labels."""
    import io
    import struct

    class Py2(pickle._Pickler):  # writes bytes and str as Python 2's str, as CIFAR-10's batches were written
        dispatch = dict(pickle._Pickler.dispatch)

        def save_py2_str(self, obj):
            obj = obj.encode("latin-1") if isinstance(obj, str) else obj
            n = len(obj)
            head = pickle.SHORT_BINSTRING + bytes([n]) if n < 256 else pickle.BINSTRING + struct.pack("<i", n)
            self.write(head + obj)
            self.memoize(obj)

        dispatch[bytes] = dispatch[str] = save_py2_str

    def py2(obj):
        f = io.BytesIO()
        Py2(f, protocol=2).dump(obj)
        return f.getvalue()

    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, size=(7, 3072), dtype=np.uint8)
    labels = rng.integers(0, 10, size=7)
    blobs = [py2({"batch_label": "training batch 1 of 5", "labels": [int(v) for v in labels], "data": images,
                  "filenames": ["a.png"] * 7}),
             pickle.dumps({b"data": images, b"labels": list(labels)}, protocol=4),
             pickle.dumps({b"data": images, b"labels": list(labels)}, protocol=5),
             pickle.dumps({b"data": np.asfortranarray(images), b"labels": labels.astype(np.int32)}, protocol=4)]
    monkeypatch.setenv("DEPL_DATA", str(tmp_path))
    for i, blob in enumerate(blobs):
        folder = tmp_path / f"f{i}" / "cifar-10-batches-py"
        folder.mkdir(parents=True)
        for name in [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]:
            (folder / name).write_bytes(blob)
        data.cifar10.cache_clear()
        src = data.load_source("cifar10", str(tmp_path / f"f{i}"))
        assert src.x_train.shape == (35, 3, 32, 32) and np.array_equal(src.y_test, labels), i
        assert np.array_equal(src.x_test, data.cifar10.__wrapped__(str(tmp_path / "f0")).x_test), i
