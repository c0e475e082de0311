"""A recorded certified search (a folder of docs/certificate-store/search/) read back from a copy of its store with
its candidates as recorded (`depl.train.loops.search.recorded_candidates`): the decisions the store gives, that nothing
trained, the seed-epochs its store holds, and the seed-epochs the same seeds and decisions cost where each group
trains, each batch, only its longest candidate still in the race.

    python scripts/search_replay.py docs/certificate-store/search/mnist1d-small [--batch 16]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from depl.certificate import Certificate
from depl.certificate.search import Search
from depl.store import Store
from depl.train.loops.search import recorded_candidates, run_search


def replay(folder: Path, batch: int) -> dict:
    cert = Certificate.of_plan(json.loads((folder / "plan.json").read_text())["info"], str(folder / "plan.json"))
    rows, ev = cert.candidates, cert.evidence
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "runs.sqlite"
        shutil.copy(folder / "runs.sqlite", store)
        with Store(store) as st:
            cands = recorded_candidates(st, cert)
            held = st.count_epochs()
        s = Search([c["cost"] for c in rows], cert.omega, cert.alpha, shares=[c["weight"] for c in rows],
                   max_runs=ev["max_runs"], drop_below=ev["drop_below"], prior=ev["prior"],
                   allocation=ev["allocation"])
        alive = [s.alive()]                                   # each batch's candidates in the race
        r = run_search(cands, s, store=store, first_seed=ev["first_seed"], batch=batch,
                       on_batch=lambda search, seeds, seconds: alive.append(search.alive()))
        with Store(store) as st:
            trained_now = st.count_epochs() - held
    short = sum(batch * max(cands[i].epochs for i in a if cands[i].group == g)
                for a in alive[:-1] for g in {cands[i].group for i in a})
    same = [[a.status, a.test.runs, a.test.hits] for a in s.arms] == [[c["verdict"], c["runs"], c["met"]] for c in rows]
    return {"search": str(folder), "same_decisions": same and s.best() == cert.returned,
            "epochs_trained_by_the_replay": trained_now, "seeds": r.seeds, "runs": r.runs_trained,
            "seed_epochs_held": r.seed_epochs, "seed_epochs_recorded": ev["seed_epochs"],
            "seed_epochs_stopping_short": short}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--batch", type=int, default=16, help="the search's --batch (16 for the committed ones)")
    a = ap.parse_args()
    out = replay(a.folder, a.batch)
    print(json.dumps(out, indent=1))
    return 0 if out["same_decisions"] and out["epochs_trained_by_the_replay"] == 0 else 4


if __name__ == "__main__":
    sys.exit(main())
