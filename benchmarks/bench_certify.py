"""What a certificate costs in runs: `depl certify`'s sequential test against a fixed-n Clopper–Pearson test.

For each cell of the committed coverage table (`--table`, by default docs/certificate-store/coverage/coverage.json:
a built-in task's plan at ω, 200 held-out real runs), take the measured success rate p as if it were the plan's true one and compute,
exactly (depl.certificate.sequential: dynamic programmes over hit counts, no simulation), at level α:

* the sequential test (`depl certify`): its mean and median number of runs, and P(certified);
* a fixed-n test (n runs decided in advance, one-sided Clopper–Pearson): the n with the same power as the
  sequential test, and the n with 80 % power.

    python benchmarks/bench_certify.py [--alpha 0.05] [--table coverage.json] [--md docs/certificate-runs.md]

prints the table and the ratio fixed-n (same power) / sequential mean; `--md` writes it as markdown.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from depl.certificate import expected_runs, fixed_n_for  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MAX_RUNS = 3000


TABLE = ROOT / "docs" / "certificate-store" / "coverage" / "coverage.json"


def rows(alpha: float, path: Path = TABLE) -> list[dict]:
    table = json.loads(path.read_text(encoding="utf-8"))
    out = []
    for c in table["cells"]:
        if not c.get("runs"):
            continue
        p, omega = c["hits"] / c["runs"], c["omega"]
        seq = expected_runs(p, omega, alpha, MAX_RUNS) if p > 0 else None
        row = {"cell": c["key"], "p": p, "hits": c["hits"], "runs": c["runs"], "omega": omega}
        if seq is None or p <= omega:  # the test should refute: how fast it does
            row.update(seq_mean=None if seq is None else seq.mean_runs, seq_median=None if seq is None else
                       seq.median_runs, p_certify=0.0 if seq is None else seq.certify,
                       p_refute=1.0 if seq is None else seq.refute, fixed_same=None, fixed_80=None)
        else:
            same = min(seq.certify, 0.999)
            row.update(seq_mean=seq.mean_runs, seq_median=seq.median_runs, p_certify=seq.certify, p_refute=seq.refute,
                       fixed_same=fixed_n_for(p, omega, alpha, same, MAX_RUNS),
                       fixed_80=fixed_n_for(p, omega, alpha, 0.8, MAX_RUNS))
        out.append(row)
    return out


def fmt(x, spec=".0f") -> str:
    return "—" if x is None else format(x, spec)


def markdown(rs: list[dict], alpha: float) -> str:
    lines = ["| cell | measured p (runs) | sequential: mean runs | median | P(certified) | P(refuted) "
             "| fixed n, same power | ratio | fixed n, 80 % power |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rs:
        ratio = (r["fixed_same"] / r["seq_mean"]) if r["fixed_same"] and r["seq_mean"] else None
        lines.append(f"| {r['cell']} | {r['p']:.3f} ({r['hits']}/{r['runs']}) | {fmt(r['seq_mean'])} | "
                     f"{fmt(r['seq_median'], 'd') if r['seq_median'] else '—'} | {r['p_certify']:.3f} | "
                     f"{r['p_refute']:.3f} | {fmt(r['fixed_same'], 'd') if r['fixed_same'] else '—'} | "
                     f"{fmt(ratio, '.2f')} | {fmt(r['fixed_80'], 'd') if r['fixed_80'] else '—'} |")
    return "\n".join(lines) + (f"\n\nα = {alpha:g}; runs capped at {MAX_RUNS}; where p ≤ ω no test may certify, "
                               "and the sequential columns say how fast it refutes.\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--table", type=Path, default=TABLE, help="a `depl coverage` table's coverage.json")
    ap.add_argument("--md", type=Path, help="write the table as markdown here")
    a = ap.parse_args()
    rs = rows(a.alpha, a.table)
    text = markdown(rs, a.alpha)
    print(text)
    if a.md:
        a.md.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
