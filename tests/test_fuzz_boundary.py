"""Fuzzing the input boundary: hostile scenario and plan documents are refused with a user
error (exit 2) or an infeasible target (exit 3), never a traceback, and nothing is written."""

from __future__ import annotations

import copy
import json
import math
import os
import pickle
import tomllib
from importlib import resources

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from depl.plan import Plan, PlanError
from depl.scenario import ScenarioError, parse_scenario

SCEN = tomllib.loads(resources.files("depl.scenarios").joinpath("mnist1d-small.toml").read_text())

HOSTILE = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, 0.0, -1.0, 1e-308, 10**20, -(10**20),
                     True, "", "[/]", "[/bold]", "[nan, 0.5]", "../../etc", None]),
    st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.text(max_size=8),
    st.lists(st.floats(), max_size=3), st.dictionaries(st.text(max_size=3), st.floats(), max_size=2),
)


def _paths(d, path=()):
    if isinstance(d, dict):
        for k, v in d.items():
            yield path + (k,)
            yield from _paths(v, path + (k,))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield path + (i,)
            yield from _paths(v, path + (i,))


SCEN_PATHS = list(_paths(SCEN))


def _set(d, path, v):
    for p in path[:-1]:
        d = d[p]
    d[path[-1]] = v


@pytest.mark.slow  # 300 fuzzed documents
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(SCEN_PATHS), value=HOSTILE)
def test_a_hostile_value_anywhere_in_a_scenario_is_accepted_or_refused_with_a_scenario_error(path, value):
    d = copy.deepcopy(SCEN)
    _set(d, path, value)
    try:
        s = parse_scenario(d, "fuzz.toml")
    except ScenarioError as e:
        assert "\n" not in str(e) and str(e).startswith("fuzz.toml")
        return
    # what is accepted is usable: finite and within range
    for m in s.models:
        assert math.isfinite(m.noise.frozen.mean()) and math.isfinite(m.noise.frozen.var())
    assert 0 < s.target.loss < s.initial_loss <= 1e12


@pytest.fixture(scope="module")
def plan_doc(tmp_path_factory):
    from depl.planners import Options, make_plan
    from depl.scenario import load_scenario

    return json.loads(json.dumps(make_plan(load_scenario("mnist1d-small"), "depl", Options(eta=40)).to_json()))


@pytest.fixture(scope="module")
def uncalibrated_doc():
    """A plan of the law as fitted: its data may be swapped (to CIFAR-10) without its calibration runs' conditions
    (MNIST-1D) refusing the plan first."""
    from depl.planners import Options, make_plan
    from depl.scenario import load_scenario

    s = load_scenario("mnist1d-small").uncalibrated()
    return json.loads(json.dumps(make_plan(s, "depl", Options(eta=40)).to_json()))


@pytest.mark.slow  # 300 fuzzed documents
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_hostile_value_anywhere_in_a_plan_is_refused_before_any_work(plan_doc, data):
    doc = copy.deepcopy(plan_doc)
    paths = [p for p in _paths(doc) if p[0] != "info"]
    path = data.draw(st.sampled_from(paths))
    value = data.draw(HOSTILE)
    _set(doc, path, value)
    try:
        p = Plan.from_json(doc, "fuzz.json")
        p.scenario_object()
    except (PlanError, ScenarioError) as e:
        assert "\n" not in str(e)
        return
    # accepted: the plan still agrees with its scenario
    s = p.scenario_object()
    assert [e.epoch for e in p.epochs] == list(range(1, len(p.epochs) + 1))
    assert len(set(p.datasets)) == len(p.datasets) > 0 and isinstance(p.feasible, bool)
    assert all(0 < e.compute <= s.clusters[s.cluster_index[e.cluster]].capacity * (1 + 1e-9) for e in p.epochs)


CORPUS = {
    "binary.toml": b"\x00\xff\xfe" * 100,
    "huge-number.toml": b"name = \"x\"\ninitial_loss = 1e308\n",
    "nan-target.toml": None,  # filled below
    "plan-not-object.json": b"[1, 2, 3]",
    "plan-nan.json": b'{"format": "depl.plan/1", "cost": NaN}',
    "plan-deep.json": b"[" * 100000 + b"]" * 100000,
    "plan-utf16.json": "{}".encode("utf-16"),
}


def _used_cluster(doc: dict) -> dict:
    return next(c for c in doc["scenario_spec"]["clusters"] if c["name"] == doc["epochs"][0]["cluster"])


def _altered(doc: dict, change) -> bytes:
    doc = copy.deepcopy(doc)
    change(doc)
    return json.dumps(doc).encode()


def _corpus(tmp_path, plan_doc):
    src = resources.files("depl.scenarios").joinpath("mnist1d-small.toml").read_text()
    assert "initial_loss = " in src and "reference_samples = 4000.0" in src
    files = dict(CORPUS)
    files["nan-target.toml"] = src.replace("loss = 1.5", "loss = nan").encode()
    # Python reads at most 4300 digits of an integer (ValueError, not a TOML/JSON error)
    files["huge-integer.toml"] = src.replace("initial_loss = ", "initial_loss = " + "1" * 5001 + " #", 1).encode()
    # tomllib recurses once per nested table: a RecursionError
    files["deep-tables.toml"] = (src + "\nzz = " + "{a = " * 5000 + "1" + "}" * 5000 + "\n").encode()
    # φ = 2e303: the laws' sums were NaN, then int(NaN) in the planner
    files["tiny-reference.toml"] = src.replace("reference_samples = 4000.0", "reference_samples = 1e-300").encode()
    files["bell-in-name.toml"] = src.replace('name = "mnist1d-small"', 'name = "mnist\\u0007small"', 1).encode()
    text = json.dumps(plan_doc)
    files["plan-huge-integer.json"] = text.replace('"solve_seconds": ', '"solve_seconds": ' + "1" * 5001 + ', "x": ', 1).encode()
    files["plan-huge-cost.json"] = _altered(plan_doc, lambda d: d.__setitem__("cost", 10**4000))
    files["plan-deep-info.json"] = text.replace('"info": {', '"info": {"deep": ' + "[" * 600 + "]" * 600 + ", ", 1).encode()
    # silently wrong before: simulate reported the file's figures, never recomputed
    files["plan-cost-altered.json"] = _altered(plan_doc, lambda d: d.__setitem__("cost", d["cost"] / 2))
    files["plan-time-altered.json"] = _altered(plan_doc, lambda d: d.__setitem__("time", d["time"] / 2))
    files["plan-quantile-negative.json"] = _altered(plan_doc, lambda d: d.__setitem__("loss_quantile", -1.0))
    files["plan-nodes-altered.json"] = _altered(plan_doc, lambda d: _used_cluster(d).__setitem__("nodes", 7))
    for name, blob in files.items():
        (tmp_path / name).write_bytes(blob)
    return sorted(files)


def test_a_corpus_of_hostile_files_exits_2_without_traceback_and_writes_nothing(depl_cli, tmp_path, plan_doc):
    names = _corpus(tmp_path, plan_doc)
    before = set(os.listdir(tmp_path))
    # one start-up for them all: each command runs as the script runs it, from main()
    done = depl_cli.each([["plan", name, "--out", "out.json"] if name.endswith(".toml") else
                          ["simulate", name, "--png", "b.png"] for name in names], cwd=tmp_path, env={"COLUMNS": None},
                         timeout=600)
    for name, r in zip(names, done):
        assert r.returncode in (2, 3), (name, r.returncode, r.stderr[-500:])
        assert "Traceback" not in r.stderr and r.stderr.count("\n") <= 2, (name, r.stderr[-500:])
        if name not in CORPUS:  # the new cases: exit 2, one line naming the file, not beyond a terminal's width twice
            lines = [x for x in r.stderr.splitlines() if x.strip()]
            assert r.returncode == 2 and len(lines) == 1 and name in lines[0] and len(lines[0]) < 400, (name, r.stderr)
    assert set(os.listdir(tmp_path)) == before  # nothing written on failure


def run_each_plan(depl_cli, n: int, folder) -> list:
    """`depl run` on p0.json … p{n-1}.json in FOLDER, in one process (one start-up), the data folder being FOLDER
    itself ($DEPL_DATA unset): each command's result."""
    return depl_cli.each([["run", f"p{i}.json", "--out", "o"] for i in range(n)], cwd=folder,
                         env={"COLUMNS": None, "DEPL_DATA": None}, timeout=300)


def test_a_plan_whose_data_path_escapes_the_data_folder_is_refused_before_anything_is_read(depl_cli, plan_doc,
                                                                                           tmp_path):
    """The plan carries its scenario: a dataset `path` of `..`s, an absolute path or a symlink out of
    the data folder (the current one; $DEPL_DATA) stops `depl run` with the field and the value."""
    pytest.importorskip("torch")
    (tmp_path / "out-link").symlink_to("/etc")
    hostile = ["../../../../etc", "/etc", "out-link"]
    for i, path in enumerate(hostile):
        doc = copy.deepcopy(plan_doc)
        for d in doc["scenario_spec"]["datasets"]:
            d["path"] = path
        (tmp_path / f"p{i}.json").write_text(json.dumps(doc))
    before = set(os.listdir(tmp_path))
    # one process for the three: each must fail alone, as the CLI would
    for path, r in zip(hostile, run_each_plan(depl_cli, len(hostile), tmp_path)):
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
        lines = r.stderr.strip().splitlines()
        assert any(f"datasets[0].path = {path!r}" in x and "outside the data folder" in x for x in lines), (path, lines)
    assert set(os.listdir(tmp_path)) == before  # nothing written: no run folder, no store


@pytest.mark.parametrize("args, why", [
    (["--listen", "9092"], "--listen '9092' is not HOST:PORT"),
    (["--listen", "0.0.0.0:99999"], "is not HOST:PORT"),
    (["--listen", "0.0.0.0:9092", "--superlink", "192.0.2.7:9093"], "must listen on loopback"),
    (["--listen", "0.0.0.0:9092", "--ssl-certfile", "nosuch.pem"], "--ssl-certfile nosuch.pem: no such file"),
    (["--listen", "0.0.0.0:9092", "--ssl-certfile", "junk", "--ssl-keyfile", "junk"], "not a certificate and its key"),
    (["--listen", "0.0.0.0:9092", "--ssl-ca-certfile", "junk"], "--ssl-ca-certfile"),
    (["--listen", "0.0.0.0:9092", "--plan", "nosuch.json"], "--plan nosuch.json: no such file"),
])
def test_the_fleet_gateway_refuses_bad_arguments_in_one_line_before_listening(tmp_path, monkeypatch, args, why):
    from typer.testing import CliRunner

    from depl import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "junk").write_bytes(b"\x00not a PEM")
    full = ["fleet-gateway", *args]
    for flag in ("--ssl-certfile", "--ssl-keyfile"):  # required: default to junk files unless given
        if flag not in full:
            full += [flag, "junk"]
    r = CliRunner().invoke(cli.app, full, env={"COLUMNS": "250"})
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and why in lines[0], (r.exit_code, r.stderr)


@pytest.mark.parametrize("args, why", [
    (["--max-body", "lots"], "--max-body 'lots' is not a size in bytes"),
    (["--max-body", "0"], "--max-body '0' is not a size"),
    (["--body-min-rate", "-1KiB"], "--body-min-rate '-1KiB' is not a size"),
    (["--header-timeout", "0"], "--header-timeout 0: expected a number > 0"),
    (["--body-timeout", "nan"], "--body-timeout nan: expected a number > 0"),
    (["--max-connections", "0"], "--max-connections 0: expected a number > 0"),
])
def test_the_fleet_gateway_refuses_bad_limits_in_one_line_before_listening(tmp_path, monkeypatch, args, why):
    """With a certificate that loads: the limits are checked next, each refused in one line (exit 2)."""
    import shutil
    import subprocess as sp

    from typer.testing import CliRunner

    from depl import cli

    if not shutil.which("openssl"):
        pytest.skip("needs openssl to make a certificate")
    monkeypatch.chdir(tmp_path)
    sp.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", "k.pem", "-out",
            "c.pem", "-subj", "/CN=127.0.0.1"], capture_output=True, check=True, timeout=60)
    full = ["fleet-gateway", "--listen", "127.0.0.1:9092", "--ssl-certfile", "c.pem", "--ssl-keyfile", "k.pem", *args]
    r = CliRunner().invoke(cli.app, full, env={"COLUMNS": "250"})
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and why in lines[0], (r.exit_code, r.stderr)


def test_the_fleet_gateway_passes_on_only_what_a_supernode_sends():
    """Hostile requests at the network face: Control and runtime API paths, other methods, dot segments
    (encoded too) get 403 and are never forwarded; a Fleet request is forwarded (here to a SuperLink that
    is down: 502, which a SuperNode retries)."""
    import warnings

    from depl.train.apps.fleet_gateway import Limits, make_app

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Starlette's test client on httpx: a deprecation notice
        # starlette (and the httpx its test client runs on) come with the `train` extra only
        TestClient = pytest.importorskip("starlette.testclient").TestClient

        client = TestClient(make_app("127.0.0.1:1", None))
        refused = [("POST", "/v1/control/start-run"), ("POST", "/v1/control/register-node"),
                   ("POST", "/v1/runtime/acquire-task"), ("GET", "/v1/fleet/pull-messages"),
                   ("PUT", "/v1/fleet/push-messages"), ("POST", "/v1/fleet/../control/list-runs"),
                   ("POST", "/v1/fleet/%2e%2e/control/list-runs"), ("POST", "/v1/fleetx/register-node"),
                   ("POST", "/"), ("GET", "/docs")]
        for method, path in refused:
            assert client.request(method, path, content=b"x").status_code == 403, (method, path)
        assert client.post("/v1/fleet/register-node", content=b"x").status_code == 502
        # a path the SuperLink's client could not even build (it raised httpx.InvalidURL: 500), or over-long: 400
        for path in ("/v1/fleet/%00", "/v1/fleet/a%0Ab", "/v1/fleet/a%20b", "/v1/fleet/" + "a" * 300):
            assert client.post(path, content=b"x").status_code == 400, path
        # a body over the limit: 413, by its Content-Length or as it streams in (chunked)
        small = TestClient(make_app("127.0.0.1:1", None, Limits(max_body=1000)))
        assert small.post("/v1/fleet/push-messages", content=b"x" * 1001).status_code == 413
        assert small.post("/v1/fleet/push-messages", content=iter([b"x" * 600] * 2)).status_code == 413
        assert small.post("/v1/fleet/push-messages", content=b"x" * 1000).status_code == 502


def test_hostile_cifar10_batches_under_the_data_folder_stop_run_in_one_line_without_showing_them(depl_cli,
                                                                                                   uncalibrated_doc,
                                                                                                   tmp_path):
    """A plan's CIFAR-10 folder lies inside the data folder, but what is in it does not: a batch linked out
    of it (to a file whose bytes must not show), its cifar-10-batches-py linked out, tiny pickles that
    would build huge objects, an oversized batch.  `depl run` stops with exit 2, one line naming the
    field, the file and why, before anything is trained or written."""
    pytest.importorskip("torch")
    import numpy as np

    from depl.train.task.data import MAX_BATCH_BYTES

    secret = b"<<depl-secret-7d1f>>"
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (outside / "hostname").write_bytes(secret)
    good = pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 1]})
    nested = (b"\x80\x02}q\x00(U\x04data]q\x01(" + b"K\x00" * 10 + b"e0"
              + b"".join(b"]q%c(" % k + b"h%c" % (k - 1) * 10 + b"e" + (b"0" if k < 8 else b"") for k in range(2, 9))
              + b"U\x06labels]q\x09(K\x00eu.")
    cases = {"link-out": None, "folder-out": None, "nested-list": nested, "memo-index": b"\x80\x02]r\x00\xc2\xeb\x0b.",
             "oversized": b"", "not-a-pickle": secret}
    for name, blob in cases.items():
        folder = work / name / "cifar-10-batches-py"
        if name == "folder-out":
            (work / name).mkdir()
            folder.symlink_to(outside)
            continue
        folder.mkdir(parents=True)
        for batch in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
            (folder / batch).write_bytes(good)
        if name == "link-out":
            (folder / "data_batch_2").unlink()
            (folder / "data_batch_2").symlink_to(outside / "hostname")
        else:
            (folder / "data_batch_2").write_bytes(blob)
            if name == "oversized":
                os.truncate(folder / "data_batch_2", MAX_BATCH_BYTES + 1)
    for i, name in enumerate(cases):
        doc = copy.deepcopy(uncalibrated_doc)
        for d in doc["scenario_spec"]["datasets"]:
            d["source"], d["path"] = "cifar10", name
        (work / f"p{i}.json").write_text(json.dumps(doc))
    before = set(os.listdir(work))
    done = run_each_plan(depl_cli, len(cases), work)
    assert all(r.returncode == 2 and "Traceback" not in r.stderr for r in done), [r.stderr[-2000:] for r in done]
    errors = [r.stderr.strip().splitlines() for r in done]
    assert all(len(e) == 1 for e in errors), errors
    errors = [e[0] for e in errors]
    whys = {"link-out": "data_batch_2 resolves to", "folder-out": "cifar-10-batches-py resolves to",
            "nested-list": "data_batch_2: not a CIFAR-10 python batch", "memo-index": "a memo index",
            "oversized": f"data_batch_2: {MAX_BATCH_BYTES + 1:,} bytes, more than a CIFAR-10 batch",
            "not-a-pickle": "not a pickle"}
    for line, name in zip(errors, cases):
        assert f"datasets[0].path = {name!r}" in line and whys[name] in line, (name, line)
        assert "depl-secret" not in line and "'<'" not in line, (name, line)
    assert set(os.listdir(work)) == before  # nothing written: no run folder, no store


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=12), key=st.text(min_size=1, max_size=6))
def test_what_depl_fit_writes_is_toml_that_reads_back_the_same(text, key):
    """Names, descriptions and keys with quotes, backslashes, newlines or other control characters are escaped
    (the writer used to leave a newline raw: the fitted scenario did not load, exit 1 after the whole fit)."""
    from depl.fit.report import toml_dumps

    data = {"name": text, "t": {key: text}, "rows": [{"name": text, "m": {key: 1.0}}]}
    assert tomllib.loads(toml_dumps(data, f"header {text}\n{key}")) == data
