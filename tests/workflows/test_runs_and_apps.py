"""The workflows of `depl runs show` and `depl fleet-gateway`, called from Python: what they refuse is a
WorkflowError with the command's one line, before anything is made or served."""

from __future__ import annotations

import pytest

from depl import workflows


def test_show_runs_refuses_an_absent_store_and_makes_none(tmp_path):
    with pytest.raises(workflows.BadInput, match="no such store"):
        workflows.show_runs(tmp_path / "runs.sqlite")
    assert not any(tmp_path.iterdir())
    with pytest.raises(workflows.BadInput, match="--kind 'nope'"):
        workflows.show_runs(tmp_path / "runs.sqlite", kind="nope")


def test_show_runs_of_an_empty_store_is_an_empty_list(tmp_path):
    from depl.store import Store

    with Store(tmp_path / "runs.sqlite"):
        pass
    shown = workflows.show_runs(tmp_path / "runs.sqlite")
    assert shown.to_json() == {"store": str(tmp_path / "runs.sqlite"), "runs": []}


def test_the_gateway_refuses_a_superlink_off_loopback_and_missing_files(tmp_path):
    with pytest.raises(workflows.BadInput, match="must listen on loopback"):
        workflows.prepare_gateway("0.0.0.0:9092", "10.0.0.5:9093", certfile=tmp_path / "c.pem",
                                  keyfile=tmp_path / "k.pem")
    with pytest.raises(workflows.BadInput, match="--ssl-certfile .*: no such file"):
        workflows.prepare_gateway("0.0.0.0:9092", certfile=tmp_path / "c.pem", keyfile=tmp_path / "k.pem")
    with pytest.raises(workflows.BadInput, match="--listen 'nope' is not HOST:PORT"):
        workflows.prepare_gateway("nope", certfile=tmp_path / "c.pem", keyfile=tmp_path / "k.pem")
