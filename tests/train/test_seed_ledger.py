"""Seeds that judge a plan are used once, and a plan file's certificate is never printed as read — each attack run
as a user would run it (digits-small: its law fitted on seeds 0..14, calibrated on 300000..300063; a 3-epoch plan
at ω 0.5 so that certify and validate train a few seeds at most)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from depl.certificate import Certificate, Kind, Outcome
from depl.ledger import lineage, round_up
from depl.scenario import load_scenario
from depl.store import Store

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not

FORGED = "FORGED: 10000 held-out runs"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def plan(depl_cli, tmp_path_factory):
    folder = tmp_path_factory.mktemp("ledger")
    r = depl_cli("plan", "digits-small", "--quantile", "0.5", "--loss", "1.0", "--out", "plan.json", cwd=folder)
    assert r.returncode == 0, r.stderr
    return folder / "plan.json"


def test_the_defaults_lie_above_the_lineage_in_blocks_apart():
    s = load_scenario("digits-small")
    ledger = lineage(s)
    assert s.fitted_seeds == [0, 14] and ledger.highest() == 300_063
    assert (ledger.default("certify"), ledger.default("validate"), ledger.default("coverage")) == \
        (310_000, 410_000, 510_000)
    assert [round_up(x) for x in (1, 20, 1064, 300_064, 99_001)] == [1, 20, 1100, 310_000, 100_000]


LINEAGE = [
    ("certify", "300010", "300010..300063", "calibration experiment full"),     # certified on its calibration runs
    ("certify", "0", "0..14", "the law's fit"),                                 # on the law's fitting seeds
    ("validate", "300000", "300000..300001", "calibration experiment"),         # its calibration runs as held out
    ("validate", "13", "13..14", "the law's fit"),
    ("validate --adaptive", "300062", "300062..300063", "calibration experiment"),  # the closed loop's seeds too
]


def test_seeds_of_the_plans_lineage_are_refused_naming_them(depl_cli, plan):
    commands = [[*(["certify", plan, "--max-runs", "100"] if command == "certify"
                   else ["validate", "digits-small", plan, "--seeds", "2", *command.split()[1:]]),
                 "--first-seed", first, "--out", "refused"] for command, first, _, _ in LINEAGE]
    for r, (command, first, seeds, used_by) in zip(depl_cli.each(commands, cwd=plan.parent), LINEAGE):  # one start-up
        assert r.returncode == 2, (command, first, r.stdout + r.stderr)
        assert f"seeds {seeds} by {used_by}" in r.stderr and "the first free seed is" in r.stderr, (command, r.stderr)
        assert "Traceback" not in r.stderr, r.stderr
    assert not (plan.parent / "refused").exists()   # each refused before any work


def test_a_refusal_is_one_line_and_lists_every_use_under_verbose_or_json(depl_cli, plan):
    """Both calibration experiments of digits-small ran on 300000..300063: the refusal names the first and counts
    the other; `depl --verbose` lists each on a line of its own, --json as data."""
    args = ("certify", plan, "--max-runs", "100", "--first-seed", "300010", "--out", "refused")
    r, loud, j = depl_cli.each([args, ("--verbose", *args), (*args, "--json")], cwd=plan.parent)   # one start-up
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "seeds 300010..300063 by calibration experiment full" in r.stderr
    assert "and 1 more use (calibration: 300010..300063 in all;" in r.stderr
    lines = loud.stderr.strip().splitlines()
    assert loud.returncode == 2 and lines[0] == r.stderr.strip().splitlines()[0] and len(lines) == 3, loud.stderr
    assert lines[2].strip().startswith("seeds 300010..300063 by calibration experiment pruned-0.5")
    d = json.loads(j.stdout)
    assert d["exit_code"] == 2 and [u["seeds"] for u in d["seeds_used"]] == [[[300010, 300063]]] * 2


def test_certify_takes_free_seeds_by_default_and_resumes_only_as_it_began(depl_cli, plan):
    others = (["--alpha", "0.1"], ["--first-seed", "700000"])
    r, *refused, taken, same = depl_cli.each(   # one start-up for them all, one after another as a user runs them
        [["certify", plan, "--batch", "2", "--max-runs", "2", "--out", "c", "--json"]] +
        [["certify", plan, "--batch", "2", "--max-runs", "4", "--out", "c", *other] for other in others] +
        [["validate", "digits-small", plan, "--seeds", "2", "--first-seed", "310001", "--store", "c/runs.sqlite",
          "--out", "v"],
         ["certify", plan, "--batch", "2", "--max-runs", "2", "--out", "c", "--json"]], cwd=plan.parent)
    assert r.returncode in (0, 3, 4), r.stderr
    out = json.loads(r.stdout)
    cert = Certificate.from_json({k: v for k, v in out.items() if k not in ("report", "exit_code")})
    assert cert.evidence["first_seed"] == 310_000 and cert.seed_list[0] == 310_000      # above the calibration's 300063
    assert "certifying" in r.stderr and "on seeds from 310000" in r.stderr
    assert {u["kind"] for u in cert.evidence["ledger"]} == {"fit", "calibration"}
    # a resumed certificate with another α, or another first seed: refused, saying what it began with
    for again in refused:
        assert again.returncode == 2, again.stdout
        assert "began with α 0.05 and first seed 310000" in again.stderr and "Traceback" not in again.stderr
    # the certificate's seeds are in the ledger now: a validation on them in that store is refused
    assert taken.returncode == 2 and "seeds 310001 by certify run certify-" in taken.stderr
    # the same α and seeds resume (nothing trained again: the same seeds, the same outcomes)
    assert same.returncode == r.returncode and json.loads(same.stdout)["evidence"]["finals"] == cert.evidence["finals"]


def test_validate_takes_free_seeds_by_default_and_resumes_only_from_its_first_seed(depl_cli, plan):
    args = ["validate", "digits-small", plan, "--seeds", "2", "--out", "v"]
    r, again, apart, same = depl_cli.each(   # one start-up for them all, one after another as a user runs them
        [[*args, "--json"], [*args, "--first-seed", "410001"], [*args, "--first-seed", "900000"], [*args, "--json"]],
        cwd=plan.parent)
    assert r.returncode in (0, 4), r.stderr
    report = json.loads(r.stdout)
    assert report["seeds"] == [[410_000, 410_001]], report.get("seeds")
    assert "on seeds 410000..410001" in r.stderr and "kept clear of the plan's lineage" in r.stderr
    # another range in the same store: refused, saying the range the validation began with
    assert again.returncode == 2 and "seeds 410001 by validate run plan-" in again.stderr
    assert apart.returncode == 2 and "began with seeds 410000..410001" in apart.stderr
    # its own seeds resume (judged again, nothing trained)
    assert same.returncode == r.returncode and json.loads(same.stdout)["evidence"]["coverage"] == report["evidence"]["coverage"]


def test_a_validation_resumed_with_fewer_seeds_is_refused_not_judged_on_a_prefix(depl_cli, plan):
    """A validation judges every seed it began with: rerun with fewer, it would judge a prefix and drop what the
    others said (a refutation on 3 seeds undone on 2) — refused, the report left as it was; the same seeds again
    judge the same."""
    args = ["validate", "digits-small", plan, "--out", "v", "--json"]
    r, fewer, same = depl_cli.each([[*args, "--seeds", "3"], [*args, "--seeds", "2"], [*args, "--seeds", "3"]],
                                   cwd=plan.parent)
    assert r.returncode in (0, 4), r.stderr
    report = (plan.parent / "v" / f"{plan.stem}-validate.json").read_text()
    assert fewer.returncode == 2 and "began with seeds 410000..410002 and judges every one of them: rerun with 3 " \
        "seeds or more" in fewer.stderr, fewer.stderr
    assert len([x for x in fewer.stderr.splitlines() if x.startswith("error:")]) == 1
    assert (plan.parent / "v" / f"{plan.stem}-validate.json").read_text() == report
    assert same.returncode == r.returncode and json.loads(same.stdout)["evidence"]["coverage"] == \
        json.loads(r.stdout)["evidence"]["coverage"]


def forge(path: Path, **info) -> None:
    d = json.loads(path.read_text(encoding="utf-8"))
    d.setdefault("info", {}).update(info)
    path.write_text(json.dumps(d), encoding="utf-8")


@pytest.mark.parametrize("info", [{"certified_by": FORGED},
                                  {"certificate": Certificate(Kind.CALIBRATION, Outcome.CERTIFIED, 0.9, 0.3, 0.05, 0.05,
                                                              10000, 10000, evidence={"experiments": 1}).to_json()}])
def test_a_forged_certificate_in_a_plan_file_is_never_printed(depl_cli, plan, tmp_path, info):
    forged = tmp_path / "forged.json"
    shutil.copy(plan, forged)
    forge(forged, **info)
    key = next(iter(info))
    commands = (["certify", forged, "--max-runs", "2"], ["validate", "digits-small", forged, "--seeds", "2"],
                ["validate", "digits-small", forged, "--seeds", "2", "--adaptive"])
    for r in depl_cli.each([[*args, "--out", "o"] for args in commands], cwd=tmp_path):
        assert r.returncode == 2, r.stdout + r.stderr
        assert f"the plan's info.{key} is not what its calibration runs give" in r.stderr
        assert FORGED not in r.stdout + r.stderr and "'runs': 10000" not in r.stdout + r.stderr
        assert not (tmp_path / "o").exists()


def test_coverage_refuses_a_forged_certificate_of_its_stored_plans(depl_cli, tmp_path):
    """docs/coverage.md's command on a copy of its committed store, one of whose plans says FORGED: the plan's
    certificate is recomputed from the calibration runs its file records, the forgery refused (exit 2) before
    anything is judged or written, and never printed — as for a plan made today (the certify and validate tests
    above)."""
    store = tmp_path / "store"
    shutil.copytree(ROOT / "docs" / "certificate-store" / "coverage", store)
    victim = store / "plans" / "digits-small-w0.9-calibrated.json"
    forge(victim, certified_by=FORGED)
    # the forged plan's own cell (digits-small, ω 0.9) of docs/coverage.md's grid
    r = depl_cli("coverage", "--tasks", "digits-small", "--omegas", "0.9", "--laws", "calibrated", "--runs", "200",
                 "--out", store, "--md", tmp_path / "c.md", "--no-train", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "digits-small-w0.9-calibrated.json: the plan's info.certified_by is not what its calibration runs give" \
        in r.stderr and "63 of them met ℓmax" in r.stderr
    assert FORGED not in r.stdout + r.stderr and not (tmp_path / "c.md").exists()


def test_coverage_refuses_seeds_of_a_tasks_lineage_even_where_its_law_is_the_fitted_one(depl_cli, tmp_path):
    """A level-law cell's plan carries no calibration, but its task was calibrated on 300000..300063: those runs
    judge none of the task's plans."""
    r = depl_cli("coverage", "--tasks", "digits-small:0.5", "--omegas", "0.9", "--laws", "level", "--runs", "3",
                 "--first-seed", "299999", "--out", "o", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "seeds 300000..300001 by calibration experiment full (task digits-small:0.5:" in r.stderr
    assert "the first free seed is 510000" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()   # refused before anything is written


def test_the_task_seed_book_refuses_a_jobs_seeds_in_another_store_and_lets_each_store_resume(depl_cli, plan,
                                                                                              tmp_path):
    """The seed book: the same plan validated in a second store on the first store's seeds is refused; on seeds
    of its own it runs; and each store then resumes its own validation (a use in another store is never the one
    a command resumes)."""
    book = {"DEPL_SEED_LEDGER": str(tmp_path / "book")}

    def validate(*runs):   # (folder, first seed) each, one after another in one interpreter
        return depl_cli.each([["validate", "digits-small", plan, "--seeds", "2", "--first-seed", str(first), "--out",
                               str(tmp_path / out)] for out, first in runs], cwd=tmp_path, env=book)

    first, other = validate(("a", 1200000), ("b", 1200000))
    assert first.returncode in (0, 4), first.stderr
    assert other.returncode == 2 and "seed book" in other.stderr and not (tmp_path / "b").exists()
    own, again = validate(("b", 1200010), ("a", 1200000))
    assert own.returncode in (0, 4), own.stderr
    assert again.returncode in (0, 4), again.stderr


def test_closed_loop_validations_take_fresh_seeds_and_one_rule_per_seed(depl_cli, plan, tmp_path):
    """`depl validate --adaptive` keeps to the seed book and to its store's record as the open loop does: a second
    closed-loop validation in another folder takes seeds above the first's (not the same ones again), a resumption
    in the same store keeps its seeds, another rule on them in that store is refused, and an open-loop validation
    on them likewise, in another store (by the seed book) and in the same one (by the store's record)."""
    first, other, resumed, rule, open_loop, same_store = depl_cli.each([
        ["validate", "digits-small", plan, "--seeds", "2", "--adaptive", "--out", "loop-a", "--json"],
        ["validate", "digits-small", plan, "--seeds", "2", "--adaptive", "--out", "loop-b", "--json"],
        ["validate", "digits-small", plan, "--seeds", "2", "--adaptive", "--out", "loop-a", "--json"],
        ["validate", "digits-small", plan, "--seeds", "2", "--adaptive", "--out", "loop-a", "--rule", "conditional"],
        ["validate", "digits-small", plan, "--seeds", "2", "--first-seed", "410000", "--out", "open"],
        ["validate", "digits-small", plan, "--seeds", "2", "--first-seed", "410000", "--out", "loop-a"]],
        cwd=plan.parent)
    seeds = [[tuple(x) for x in json.loads(r.stdout)["seeds"]] for r in (first, other, resumed)]
    assert seeds[0] == [(410_000, 410_001)] and seeds[1][0][0] > 410_001 and seeds[2] == seeds[0], seeds
    assert rule.returncode == 2 and "already judged this plan's closed loop" in rule.stderr, rule.stderr
    assert open_loop.returncode == 2 and "validate-adaptive" in open_loop.stderr, open_loop.stderr
    assert not (plan.parent / "open").exists()
    # each store records its closed loop's range on the plan's job (depl.ledger.resolve reads it, as the open loop's)
    with Store(plan.parent / "loop-b" / "runs.sqlite", readonly=True) as st:
        (use,) = [u for u in st.uses() if u["command"] == "validate-adaptive"]
    assert (use["first"], use["last"]) == seeds[1][0] and use["run_id"].startswith("plan-"), use
    assert same_store.returncode == 2, same_store.stderr
    assert f"validate-adaptive run {use['run_id']} in loop-a/runs.sqlite (seeds 410000..410001)" in same_store.stderr
    # the store's record alone resumes it: with an empty seed book, loop-b keeps its seeds (not the first free ones)
    again = depl_cli("validate", "digits-small", plan, "--seeds", "2", "--adaptive", "--out", "loop-b", "--json",
                     cwd=plan.parent, env={"DEPL_SEED_LEDGER": str(tmp_path / "empty-book")})
    assert again.returncode in (0, 4), again.stderr
    assert [tuple(x) for x in json.loads(again.stdout)["seeds"]] == seeds[1]
