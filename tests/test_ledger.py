"""depl.ledger without training: the ranges, the defaults, what a resumed command may change, and a store's
record of what a command began with."""

from __future__ import annotations

import pytest

from depl.ledger import Ledger, SeedsUsed, Use, as_ranges, ranges_text, resolve, store_uses
from depl.store import EpochRow, Store, StoreError


def test_seeds_are_shown_as_ranges():
    assert as_ranges([7, 1, 3, 2, 2]) == ((1, 3), (7, 7))
    assert ranges_text(((1, 3), (7, 7))) == "1..3, 7"
    assert ranges_text(tuple((i * 10, i * 10) for i in range(9)), most=2) == "0, 10 and 7 more ranges"


FIT = Use("fit", "the law's fit", ((0, 19),))
CAL = Use("calibration", "calibration experiment full", ((300_000, 300_063),))


def test_the_lineage_line_names_experiments_on_the_same_seeds_once():
    cals = [Use("calibration", f"calibration experiment {v}", ((15, 19),)) for v in ("full", "pruned", "switch")]
    words = Ledger([Use("fit", "the law's fit", ((0, 14),)), *cals]).words()
    assert words == "kept clear of the plan's lineage: fit 0..14; calibration 15..19 (3 experiments)"
    assert Ledger([FIT, CAL]).words() == "kept clear of the plan's lineage: fit 0..19; calibration 300000..300063"
    # a search's counted seeds and the batches its seed book holds: one use of the seeds, merged
    search = [Use("search", "search in runs.sqlite", ((4_900_000, 4_900_095),)),
              Use("search", "search in the task's seed book", ((4_900_000, 4_900_127),))]
    assert Ledger([FIT, *search]).words() == "kept clear of the plan's lineage: fit 0..19; search 4900000..4900127"


def test_a_refusal_that_meets_many_uses_is_one_short_line_with_every_use_behind_it():
    """Twelve searches in other stores, each on its own seeds, met by one range: the line names the first use and
    counts the rest (their seeds' first, last and number); `detail` (depl --verbose) and `result` (--json) list
    each use with its seeds, and the lineage line is capped too."""
    uses = [Use("search", f"search in /data/experiments/run-{i:02d}/runs.sqlite (the task's seed book)",
                as_ranges([400_000 + 10 * i + k for k in (0, 1, 3, 5, 7)])) for i in range(12)]
    with pytest.raises(SeedsUsed) as e:
        Ledger([FIT, *uses]).check(400_000, 400_199, "--first-seed 400000 --seeds 200", "validate")
    line = str(e.value)
    assert "\n" not in line and len(line) < 420, len(line)
    assert line.startswith("--first-seed 400000 --seeds 200 (seeds 400000..400199): the plan's lineage used seeds "
                           "400000..400001, 400003 and 2 more ranges by search in /data/experiments/run-00/")
    assert "and 11 more uses (search ×11: 400000..400117 in all; `depl --verbose` lists each)" in line
    assert "the first free seed is" in line and "--verbose" in line
    assert len(e.value.detail) == 12 and e.value.detail[11].startswith(
        "seeds 400110..400111, 400113, 400115, 400117 by search in /data/experiments/run-11/runs.sqlite")
    assert [u["seeds"] for u in e.value.result["seeds_used"]][0] == [[400000, 400001], [400003, 400003],
                                                                    [400005, 400005], [400007, 400007]]
    assert e.value.result["error"] == line
    words = Ledger(uses).words()
    assert len(words) < 300 and words.endswith("; and 7 more")


def test_a_new_range_must_miss_the_ledger_and_the_default_does():
    ledger = Ledger([FIT, CAL])
    assert resolve(ledger, "validate", "plan-x", None, 200, "") == 410_000
    assert resolve(ledger, "validate", "plan-x", 1000, 200, "--first-seed 1000") == 1000
    with pytest.raises(SeedsUsed, match=r"seeds 300000\.\.300005 by calibration experiment full.*first free seed "
                                        r"is 410000"):
        resolve(ledger, "validate", "plan-x", 299_900, 106, "--first-seed 299900")


def test_a_certify_run_resumes_with_its_alpha_and_first_seed_only():
    began = Use("certify", "certify run certify-x in s (α 0.05, from seed 310000)", ((310_000, 310_031),),
                "certify-x", 310_000, 310_499, 0.05)
    ledger = Ledger([FIT, CAL, began])
    assert resolve(ledger, "certify", "certify-x", None, 500, "", alpha=0.05) == 310_000     # resumed
    assert resolve(ledger, "certify", "certify-x", 310_000, 900, "", alpha=0.05) == 310_000  # a larger --max-runs
    for first, alpha in ((None, 0.1), (400_000, 0.05)):
        with pytest.raises(SeedsUsed, match="began with α 0.05 and first seed 310000"):
            resolve(ledger, "certify", "certify-x", first, 500, "", alpha=alpha)


def test_a_validation_resumes_from_its_first_seed_and_names_the_range_it_began_with():
    began = Use("validate", "validate run plan-x in s (seeds 410000..410199)", ((410_000, 410_199),), "plan-x",
                410_000, 410_199)
    ledger = Ledger([FIT, began])
    assert resolve(ledger, "validate", "plan-x", None, 300, "") == 410_000                   # more seeds: resumed
    with pytest.raises(SeedsUsed, match=r"seeds 410100\.\.410199 by validate run plan-x"):
        resolve(ledger, "validate", "plan-x", 410_100, 200, "--first-seed 410100")
    with pytest.raises(SeedsUsed, match=r"began with seeds 410000\.\.410199"):
        resolve(ledger, "validate", "plan-x", 900_000, 200, "--first-seed 900000")


def test_a_store_says_what_each_command_began_with(tmp_path):
    with Store(tmp_path / "runs.sqlite") as st:
        for rid, kind in (("plan-x", "plan"), ("certify-x", "certify")):
            st.start_run(rid, kind, {"job": {}})
        for seed in (5, 6, 410_000):
            st.record_epoch("plan-x", seed, EpochRow(1, "full", "A", 1.0, 0.5, 1.0, 0.1))
        st.record_epoch("certify-x", 310_000, EpochRow(1, "full", "A", 1.0, 0.5, 1.0, 0.1))
        st.record_use("certify-x", "certify", 310_000, 310_499, 0.05)
        st.record_use("plan-x", "validate", 410_000, 410_199)
    with Store(tmp_path / "runs.sqlite", readonly=True) as st:
        uses = {u.kind: u for u in store_uses(st, "plan-x", "certify-x").uses}
    assert uses["certify"].seeds == ((310_000, 310_000),) and uses["certify"].alpha == 0.05
    assert "α 0.05, from seed 310000" in uses["certify"].what
    assert uses["validate"].seeds == ((410_000, 410_199),)
    assert uses["runs"].seeds == ((5, 6),)           # trained, recorded by no judging command (`depl run`)


def test_a_certify_run_whose_seeds_no_use_records_is_refused_naming_the_store_and_the_migration(tmp_path):
    """`depl certify` records its seeds and α before it trains any: a store whose certify run trained seeds it never
    recorded was written before uses were, and is refused in one line, never read by a second rule."""
    with Store(tmp_path / "runs.sqlite") as st:
        st.start_run("certify-x", "certify", {"job": {}})
        st.record_epoch("certify-x", 310_000, EpochRow(1, "full", "A", 1.0, 0.5, 1.0, 0.1))
    with Store(tmp_path / "runs.sqlite", readonly=True) as st, pytest.raises(StoreError) as e:
        store_uses(st, "plan-x", "certify-x")
    line = str(e.value)
    assert "\n" not in line and str(tmp_path / "runs.sqlite") in line and "seed_uses" in line
    assert "certify-x" in line and "310000..310000" in line and "scripts/migrate_stores.py" in line


def test_a_plans_certificate_equal_to_its_runs_but_for_the_last_digits_is_its_certificate():
    """A certificate recomputed on another machine differs from the file's in the last digits of its numbers (numpy's
    vectorised loops differ by CPU): the same certificate; a number that differs more is not what the runs give."""
    import json
    from pathlib import Path

    from depl.ledger import certificate_problem
    from depl.plan import Plan

    d = json.loads((Path(__file__).parents[1] / "docs/certificate-store/plans/digits-small-default.json").read_text())
    assert certificate_problem(Plan.from_json(d), "p.json") is None
    for factor, same in ((1 - 1e-13, True), (1 - 1e-6, False)):
        c = json.loads(json.dumps(d))
        c["info"]["certificate"]["alpha_share"] *= factor
        why = certificate_problem(Plan.from_json(c), "p.json")
        assert (why is None) == same and (same or "alpha_share" in why), why


def test_a_run_registered_again_with_its_plans_numbers_to_their_last_digits_is_the_same_run(tmp_path):
    """A rerun plans again, and a plan's figures computed on another machine differ in their last digits (numpy's
    vectorised loops differ by CPU): the same run; a figure that differs more is another specification."""
    spec = {"backend": "local", "plan": {"cost": 299.2786334511485, "epochs": [{"compute": 12.5}]}, "job": {"k": 1}}
    with Store(tmp_path / "runs.sqlite") as st:
        st.start_run("plan-x", "plan", spec)
        st.start_run("plan-x", "plan", {**spec, "plan": {**spec["plan"], "cost": 299.2786334511485 * (1 + 1e-13)}})
        with pytest.raises(StoreError, match="another specification"):
            st.start_run("plan-x", "plan", {**spec, "plan": {**spec["plan"], "cost": 299.2786334511485 * (1 + 1e-6)}})


def test_a_seed_range_past_the_largest_seed_is_refused_before_any_run():
    """`depl run --first-seed 2147483647 --seeds 2` kept a model of seed 2147483648, which no command could name."""
    from depl.workflows.common import MAX_SEED, seed_range
    from depl.workflows.errors import BadInput

    assert seed_range(MAX_SEED - 1, 2) == [MAX_SEED - 1, MAX_SEED]
    with pytest.raises(BadInput, match="ends at 2147483648: seeds are at most 2147483647; start at 2147483646"):
        seed_range(MAX_SEED, 2)
