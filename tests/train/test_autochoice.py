"""The automatic choice of how to train many seeds: the measured fastest, cached per network, data and machine."""

import json
import math

import pytest

from depl.train.autochoice import Candidate, Choice, cache_file, choose, default_candidates, usable_cores
from depl.train.federation import job_from_plan
from trainkit import make_plan


def test_the_choice_is_the_fastest_of_what_it_measured_and_the_second_call_reads_the_cache(tmp_path):
    job = job_from_plan(make_plan([("full", "B")], width=4, share_to=0.1))
    cands = [Candidate(1, 1), Candidate(2, 1), Candidate(4, 1)]
    if usable_cores() >= 2:
        cands.append(Candidate(2, 2))
    first = choose(job, 4, cands, cache_dir=tmp_path)
    assert not first.cached
    assert set(first.rates) == {c.label for c in cands}
    assert all(math.isfinite(r) and r > 0 for r in first.rates.values())
    assert first.rates[first.picked.label] == max(first.rates.values())
    assert math.isfinite(first.loop_rate) and first.loop_rate > 0
    assert first.key["machine"]["cores"] == usable_cores()
    assert first.why.startswith(f"fastest of {len(cands)} measured")
    path = cache_file(tmp_path, first.key)
    assert json.loads(path.read_text())["picked"] == {"seed_batch": first.picked.seed_batch,
                                                       "workers": first.picked.workers, "threads": 1}
    again = choose(job, 4, cands, cache_dir=tmp_path)
    assert again.cached
    assert again == first  # the same record, read back


def test_a_cache_file_of_another_key_or_unreadable_is_not_used(tmp_path):
    from depl.train.autochoice import _read

    key = {"job": {"net": "cnn1d"}, "machine": {"cpu": "x"}, "candidates": []}
    rec = Choice(Candidate(2, 1), {Candidate(2, 1).label: 5.0}, 2.0, key, 1.0)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(rec.to_json()))
    assert _read(path, key) == rec
    assert _read(path, {**key, "machine": {"cpu": "y"}}) is None
    path.write_text("{not json")
    assert _read(path, key) is None


def test_default_candidates_are_the_loop_and_stacks_no_larger_than_a_workers_share():
    cands = default_candidates(6, cores=2)
    assert Candidate(1, 1, 1) in cands and Candidate(1, 2, 1) in cands and Candidate(1, 1, 2) in cands
    assert Candidate(6, 1, 1) in cands and Candidate(3, 2, 1) in cands
    assert all(c.seed_batch <= math.ceil(6 / c.workers) and c.workers * c.threads <= 2 for c in cands)
    assert len(set(cands)) == len(cands)


def test_a_candidate_beyond_the_cores_is_refused():
    job = job_from_plan(make_plan([("full", "B")], width=4, share_to=0.1))
    with pytest.raises(ValueError, match="workers × threads"):
        choose(job, 4, [Candidate(2, usable_cores() + 1)])


def test_default_candidates_have_no_more_workers_than_batches():
    assert default_candidates(1, cores=2) == [Candidate(1, 1, 1), Candidate(1, 1, 2)]
    assert all(c.workers <= math.ceil(3 / c.seed_batch) for c in default_candidates(3, cores=4))
