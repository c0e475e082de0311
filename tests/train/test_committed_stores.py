"""The committed stores of fresh runs answer the command that made them from the runs they hold: each command as
docs/certificate.md and docs/tutorial-own-model.md give it (the certified searches' plans and the tutorial's on
fresh seeds, the built-ins' default plans validated and certified), run again on a copy of what it reads, finds its
run's specification as recorded (scripts/migrate_stores.py brought the stored plans to the plan files as they are
now, once), trains no seed, and gives the verdict, runs, hits and seeds of the certificate committed beside the
store."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from depl.store import Store

ROOT = Path(__file__).resolve().parents[2]
CS = "docs/certificate-store"
SEARCH = f"{CS}/search"
PLANS = f"{CS}/plans"


def _validate(scenario: str, plan: str, first: int, out: str, *more: str) -> tuple:
    """`depl validate … --seeds 200 --first-seed F --out OUT`: (argv, its store, its committed report)."""
    store = more[more.index("--store") + 1] if "--store" in more else f"{out}/runs.sqlite"
    argv = ["validate", scenario, plan, "--seeds", "200", "--first-seed", str(first), "--out", out, *more]
    return argv, store, f"{Path(store).parent}/{Path(plan).stem}-validate.json"   # the report beside the store


def _certify(plan: str, first: int, out: str) -> tuple:
    """`depl certify PLAN --prior uniform --first-seed F --batch 8 --max-runs 400 --out OUT` (docs/certificate.md)."""
    argv = ["certify", plan, "--prior", "uniform", "--first-seed", str(first), "--batch", "8", "--max-runs", "400",
            "--out", out]
    return argv, f"{out}/runs.sqlite", f"{out}/{Path(plan).stem}-certificate.json"


MY = f"{SEARCH}/my-digits"
REG = f"{CS}/regression/my-diabetes"
COMMANDS = [
    _validate("digits-small", f"{SEARCH}/digits-small-2/plan.json", 730000, f"{SEARCH}/digits-small-2/fresh"),
    _validate("digits-small", f"{SEARCH}/digits-small-3/plan.json", 1610000, f"{SEARCH}/digits-small-3/fresh"),
    _validate("digits-small", f"{SEARCH}/digits-small-uses-100/plan.json", 1710000,
              f"{SEARCH}/digits-small-uses-100/fresh"),
    _validate("mnist1d-small", f"{SEARCH}/mnist1d-small/plan.json", 750000, f"{SEARCH}/mnist1d-small/fresh"),
    _validate("mnist1d-small", f"{SEARCH}/mnist1d-small-2/plan.json", 1810000, f"{SEARCH}/mnist1d-small-2/fresh"),
    _validate("mnist1d-noniid", f"{SEARCH}/mnist1d-noniid/plan.json", 910000, f"{SEARCH}/mnist1d-noniid/fresh"),
    _validate("mnist1d-noniid", f"{SEARCH}/mnist1d-noniid-2/plan.json", 1910000, f"{SEARCH}/mnist1d-noniid-2/fresh"),
    # docs/tutorial-own-model.md, in the task's folder: depl validate fitted.toml plan.json … --allow-code .
    _validate(f"{MY}/fitted.toml", f"{MY}/plan.json", 950000, f"{MY}/validation", "--allow-code", MY),
    _validate(f"{MY}/fitted.toml", f"{MY}/allocation-all/plan.json", 930000, f"{MY}/allocation-all/validation",
              "--allow-code", MY),
    _validate(f"{MY}/fitted.toml", f"{MY}/today/plan.json", 4910000, f"{MY}/today/fresh", "--allow-code", MY),
    # its regression section: each route's plan on fresh seeds
    _validate(f"{REG}/reg-fitted.toml", f"{REG}/reg-search/plan.json", 9500, f"{REG}/reg-search/fresh",
              "--allow-code", REG),
    _validate(f"{REG}/reg-calibration/calibrated.toml", f"{REG}/reg-calibration/plan.json", 9700,
              f"{REG}/reg-calibration/fresh", "--allow-code", REG),
    # docs/certificate.md, "The built-ins, certified" (mnist1d-small's first default plan was made with a law the
    # built-in no longer has: its validation is refused for that, and mnist1d-small-default-2 is the one of today's)
    _validate("digits-small", f"{PLANS}/digits-small-default.json", 400000, "o-digits",
              "--store", f"{CS}/fresh/digits/runs.sqlite"),
    _validate("mnist1d-noniid", f"{PLANS}/mnist1d-noniid-default.json", 400000, "o-noniid",
              "--store", f"{CS}/fresh/noniid/runs.sqlite"),
    _validate("mnist1d-small", f"{PLANS}/mnist1d-small-default-2.json", 810000, f"{CS}/fresh/mnist1d-2"),
    _certify(f"{PLANS}/mnist1d-small-default.json", 600000, f"{CS}/certify/mnist1d-small"),
    _certify(f"{PLANS}/digits-small-default.json", 610000, f"{CS}/certify/digits-small"),
    _certify(f"{PLANS}/mnist1d-noniid-default.json", 620000, f"{CS}/certify/mnist1d-noniid"),
]


def _copy(to: Path) -> None:
    """What each command reads and writes, as committed: its plan (with the tutorial's scenario and code), its store
    and the report beside it."""
    files = {f"{MY}/mymodel.py", f"{REG}/myregression.py"}
    for argv, store, report in COMMANDS:
        files |= {*argv[1:3 if argv[0] == "validate" else 2], store, report}
    files = {f for f in files if "/" in f}   # a built-in scenario is a name, not a file
    for f in files:
        (to / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, to / f)


def _epochs(store: Path) -> int:
    with Store(store, readonly=True) as st:
        return st.count_epochs()


def test_each_committed_fresh_store_resumes_from_its_stored_runs_without_training(depl_cli, tmp_path):
    _copy(tmp_path)
    before = {store: _epochs(tmp_path / store) for _, store, _ in COMMANDS}
    results = depl_cli.each([[*argv, "--json"] for argv, _, _ in COMMANDS], cwd=tmp_path)
    for (argv, store, report), r in zip(COMMANDS, results):
        assert r.returncode == 0 and "another specification" not in r.stderr, (argv, r.stderr[-800:])
        assert _epochs(tmp_path / store) == before[store], argv   # no epoch trained
        said, committed = json.loads(r.stdout), json.loads((ROOT / report).read_text())
        assert [said[k] for k in ("verdict", "runs", "hits", "seeds")] == \
            [committed[k] for k in ("verdict", "runs", "hits", "seeds")], argv
        assert said["verdict"] == "certified" and said["seeds"][0][0] == int(argv[argv.index("--first-seed") + 1])
