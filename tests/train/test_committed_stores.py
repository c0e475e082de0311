"""The committed fresh-run stores of the certified searches answer their own `depl validate` from the runs they hold:
the command that made each (docs/certificate.md, docs/tutorial-own-model.md), run again on a copy of its folder,
finds its run's specification as recorded (scripts/migrate_stores.py brought the stored plans' certificates to
today's shape once), trains no seed, and gives the verdict and hits of the report committed beside the store."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from depl.store import Store

ROOT = Path(__file__).resolve().parents[2]
SEARCH = Path("docs") / "certificate-store" / "search"

# (scenario, plan file, first seed, --out, --allow-code) of each `depl validate … --seeds 200` of the docs
FRESH = [
    ("digits-small", "digits-small-2/plan.json", 730000, "digits-small-2/fresh", None),
    ("digits-small", "digits-small-3/plan.json", 1610000, "digits-small-3/fresh", None),
    ("digits-small", "digits-small-uses-100/plan.json", 1710000, "digits-small-uses-100/fresh", None),
    ("mnist1d-small", "mnist1d-small/plan.json", 750000, "mnist1d-small/fresh", None),
    ("mnist1d-small", "mnist1d-small-2/plan.json", 1810000, "mnist1d-small-2/fresh", None),
    ("mnist1d-noniid", "mnist1d-noniid/plan.json", 910000, "mnist1d-noniid/fresh", None),
    ("mnist1d-noniid", "mnist1d-noniid-2/plan.json", 1910000, "mnist1d-noniid-2/fresh", None),
    # docs/tutorial-own-model.md, in the task's folder: depl validate fitted.toml plan.json … --allow-code .
    ("my-digits/fitted.toml", "my-digits/plan.json", 950000, "my-digits/validation", "my-digits"),
    ("my-digits/fitted.toml", "my-digits/allocation-all/plan.json", 930000, "my-digits/allocation-all/validation",
     "my-digits"),
]


def _copy(to: Path) -> None:
    """Each store's folder, its plan and what that plan reads (the tutorial's scenario and code), as committed."""
    for scenario, plan, _, out, code in FRESH:
        shutil.copytree(ROOT / SEARCH / out, to / SEARCH / out, dirs_exist_ok=True)
        shutil.copy2(ROOT / SEARCH / plan, to / SEARCH / plan)
        if code:
            for name in ("fitted.toml", "mymodel.py"):
                shutil.copy2(ROOT / SEARCH / code / name, to / SEARCH / code / name)


def _epochs(store: Path) -> int:
    with Store(store, readonly=True) as st:
        return st.count_epochs()


def test_each_committed_fresh_store_resumes_from_its_stored_runs_without_training(depl_cli, tmp_path):
    _copy(tmp_path)
    commands = []
    for scenario, plan, first, out, code in FRESH:
        given = str(SEARCH / scenario) if scenario.endswith(".toml") else scenario
        commands.append(["validate", given, SEARCH / plan, "--seeds", 200, "--first-seed", first, "--out",
                         SEARCH / out, "--json", *(["--allow-code", SEARCH / code] if code else [])])
    before = {out: _epochs(tmp_path / SEARCH / out / "runs.sqlite") for *_, out, _ in FRESH}
    results = depl_cli.each(commands, cwd=tmp_path)
    for (_, plan, first, out, _), r in zip(FRESH, results):
        committed = json.loads((ROOT / SEARCH / out / "plan-validate.json").read_text())
        assert r.returncode == 0 and "another specification" not in r.stderr, (plan, r.stderr[-800:])
        said = json.loads(r.stdout)
        assert _epochs(tmp_path / SEARCH / out / "runs.sqlite") == before[out], plan   # no epoch trained
        assert (said["verdict"], said["runs"], said["hits"], said["seeds"]) == \
            (committed["verdict"], committed["runs"], committed["hits"], committed["seeds"]) == \
            ("certified", 200, committed["hits"], [[first, first + 199]])
