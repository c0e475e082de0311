"""What a certificate costs in runs: `depl certify`'s sequential test against a fixed-n Clopper–Pearson test.

For each cell of the committed coverage table (`--table`, by default docs/certificate-store/coverage/coverage.json:
a built-in task's plan at ω, 200 held-out real runs), take the measured success rate p as if it were the plan's true one and compute,
exactly (depl.certificate.sequential: dynamic programmes over hit counts, no simulation), at level α:

* the sequential test (`depl certify`): its mean and median number of runs, and P(certified);
* a fixed-n test (n runs decided in advance, one-sided Clopper–Pearson): the n with the same power as the
  sequential test, and the n with 80 % power.

    python benchmarks/bench_certify.py [--alpha 0.05] [--prior spiked] [--table coverage.json] [--md runs.md]

prints the table and the ratio fixed-n (same power) / sequential mean; `--md` writes it as markdown.

    python benchmarks/bench_certify.py --replay

replays the committed certificates' counted runs (docs/certificate-store/**/*-certificate.json, their seeds'
ℓ(K) in seed order) through each e-process: where it would have stopped on the same runs, or how many more
runs, all meeting ℓmax, it would have needed after them.

    python benchmarks/bench_certify.py --priors [--alpha 0.05]

prints the trade-off between the sequential test's e-processes (depl.certificate.PRIORS), exactly: the runs
that certify when every run meets ℓmax (ω 0.8, 0.9, 0.95) against the fixed-n floor ⌈log α / log ω⌉, and the
mean runs where p is near ω (ω + 0.03, ω + 0.05) or well above it, each against the uniform prior's.  For
comparison, two predictable plug-in betting e-processes (aGRAPA, Waudby-Smith and Ramdas 2023, "Estimating
means of bounded random variables by betting", sec. B.3): the capital Π (1 + λ_t (X_t − ω)), X_t = 1 where run
t met ℓmax, with λ_t = (μ̂ − ω)/(σ̂² + (μ̂ − ω)²) from the runs before t, clipped to [0, c/ω] (each factor
≥ 1 − c > 0; a supermartingale for every p ≤ ω since λ_t ≥ 0 and E[X_t − ω] ≤ 0).  Its stopping time depends on
the order of the runs, not only on their counts, so its figures are Monte Carlo (`--reps` paths per p; the
test refutes as `depl certify` does, by θ uniform on [0, ω]).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from depl.certificate import (DEFAULT_PRIOR, PRIORS, boundaries, expected_runs, fewest_runs,  # noqa: E402
                              fixed_n_for)

ROOT = Path(__file__).resolve().parents[1]
MAX_RUNS = 3000


TABLE = ROOT / "docs" / "certificate-store" / "coverage" / "coverage.json"


def rows(alpha: float, path: Path = TABLE, prior: str = DEFAULT_PRIOR) -> list[dict]:
    table = json.loads(path.read_text(encoding="utf-8"))
    out = []
    for c in table["cells"]:
        if not c.get("runs"):
            continue
        p, omega = c["hits"] / c["runs"], c["omega"]
        seq = expected_runs(p, omega, alpha, MAX_RUNS, prior=prior) if p > 0 else None
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


def markdown(rs: list[dict], alpha: float, prior: str = DEFAULT_PRIOR) -> str:
    lines = ["| cell | measured p (runs) | sequential: mean runs | median | P(certified) | P(refuted) "
             "| fixed n, same power | ratio | fixed n, 80 % power |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rs:
        ratio = (r["fixed_same"] / r["seq_mean"]) if r["fixed_same"] and r["seq_mean"] else None
        lines.append(f"| {r['cell']} | {r['p']:.3f} ({r['hits']}/{r['runs']}) | {fmt(r['seq_mean'])} | "
                     f"{fmt(r['seq_median'], 'd') if r['seq_median'] else '—'} | {r['p_certify']:.3f} | "
                     f"{r['p_refute']:.3f} | {fmt(r['fixed_same'], 'd') if r['fixed_same'] else '—'} | "
                     f"{fmt(ratio, '.2f')} | {fmt(r['fixed_80'], 'd') if r['fixed_80'] else '—'} |")
    return "\n".join(lines) + (f"\n\nα = {alpha:g}; prior {prior!r}; runs capped at {MAX_RUNS}; where p ≤ ω no test "
                               "may certify, and the sequential columns say how fast it refutes.\n")


ALL_MEET = (0.8, 0.9, 0.95)
NEAR = ((0.9, (0.93, 0.95, 0.97, 0.99)), (0.8, (0.83, 0.85)), (0.95, (0.98,)))  # ω: p = ω + 0.03, ω + 0.05, …


def agrapa(p: float, omega: float, alpha: float, cap: float, reps: int, seed: int = 0) -> float:
    """aGRAPA's mean runs (module docstring) by Monte Carlo: `reps` paths of Bernoulli(p) runs, up to MAX_RUNS."""
    rng = np.random.default_rng(seed)
    _, ref = boundaries(omega, alpha, MAX_RUNS, "uniform")
    log_k, hits, ssq = np.zeros(reps), np.zeros(reps), np.full(reps, 0.25)
    mu, var = np.full(reps, 0.5), np.full(reps, 0.25)
    alive, stop, bar = np.ones(reps, bool), np.full(reps, MAX_RUNS), math.log(1 / alpha)
    for t in range(1, MAX_RUNS + 1):
        lam = np.clip((mu - omega) / (var + (mu - omega) ** 2), 0.0, cap / omega)  # from runs 1..t−1 only
        x = (rng.random(reps) < p).astype(float)
        log_k += np.log1p(lam * (x - omega))
        hits += x
        mu = (0.5 + hits) / (t + 1)
        ssq += (x - mu) ** 2
        var = ssq / (t + 1)
        done = alive & ((log_k >= bar) | (hits <= ref[t]))
        stop[done] = t
        alive &= ~done
        if not alive.any():
            break
    return float(stop.mean())


def agrapa_all_meet(omega: float, alpha: float, cap: float) -> int:
    """aGRAPA's runs to certify when every run meets ℓmax (one path: exact)."""
    log_k, mu, ssq = 0.0, 0.5, 0.25
    for t in range(1, 100_000):
        d = mu - omega
        log_k += math.log1p(min(max(d / ((ssq / t) + d * d), 0.0), cap / omega) * (1 - omega))
        mu = (0.5 + t) / (t + 1)
        ssq += (1 - mu) ** 2
        if log_k >= math.log(1 / alpha):
            return t
    raise RuntimeError("never certifies")


def tradeoff(alpha: float, reps: int = 4000, caps: tuple[float, ...] = (0.5, 0.9)) -> str:
    """The e-processes side by side: the mixtures exactly (`fewest_runs` and the dynamic programme
    `expected_runs`), aGRAPA by Monte Carlo."""
    floors = {w: math.ceil(math.log(alpha) / math.log(w)) for w in ALL_MEET}
    cols = [f"all meet, ω {w:g}" for w in ALL_MEET] + [f"ω {w:g}, p = {p:g}" for w, ps in NEAR for p in ps]
    lines = ["| e-process | " + " | ".join(cols) + " | worst ratio, ω 0.9 |", "|---|" + "---:|" * (len(cols) + 1)]
    lines.append("| fixed-n floor ⌈log α / log ω⌉ | " + " | ".join(str(floors[w]) for w in ALL_MEET)
                 + " |" + " — |" * (len(cols) - len(ALL_MEET) + 1))
    base = {(w, p): expected_runs(p, w, alpha, MAX_RUNS, prior="uniform").mean_runs for w, ps in NEAR for p in ps}
    for name, pr in PRIORS.items():
        cells = []
        for w in ALL_MEET:
            n = fewest_runs(w, alpha, name)
            cells.append(f"{n} ({n / floors[w]:.2f}×)")
        worst = 0.0
        for w, ps in NEAR:
            for p in ps:
                r = expected_runs(p, w, alpha, MAX_RUNS, prior=name)
                ratio = r.mean_runs / base[w, p]
                worst = max(worst, ratio) if w == 0.9 else worst
                cells.append(f"{r.mean_runs:.0f} ({ratio:.3f})")
        label = f"mixture {name!r}{' (default)' if name == DEFAULT_PRIOR else ''}"
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {worst:.3f} |")
    for cap in caps:
        cells = []
        for w in ALL_MEET:
            n = agrapa_all_meet(w, alpha, cap)
            cells.append(f"{n} ({n / floors[w]:.2f}×)")
        worst = 0.0
        for w, ps in NEAR:
            for p in ps:
                mean = agrapa(p, w, alpha, cap, reps, seed=int(p * 1000))
                worst = max(worst, mean / base[w, p]) if w == 0.9 else worst
                cells.append(f"{mean:.0f} ({mean / base[w, p]:.3f})")
        lines.append(f"| aGRAPA, c = {cap:g} (Monte Carlo) | " + " | ".join(cells) + f" | {worst:.3f} |")
    legend = "\n".join(f"* mixture {name!r}: {pr.about}" for name, pr in PRIORS.items())
    return "\n".join(lines) + (f"\n\nα = {alpha:g}; all meet: the runs that certify when every run meets ℓmax (× the "
                               f"floor); p: the mean runs (capped at {MAX_RUNS}) when each run meets ℓmax with "
                               f"probability p (× the uniform prior's), exact for the mixtures, over {reps} paths for "
                               f"aGRAPA.\n\n{legend}\n")


def replay(root: Path = ROOT / "docs" / "certificate-store",
           priors: tuple[str, ...] = ("uniform", DEFAULT_PRIOR)) -> str:
    """Each committed certificate's counted runs fed, in seed order, to the test under each prior."""
    from depl.certificate import Certificate, Sequential

    lines = ["| certificate | ω, α | runs (met ℓmax), as committed | " + " | ".join(priors) + " |",
             "|---|---|---|" + "---|" * len(priors)]
    for f in sorted(root.rglob("*-certificate.json")):
        c = Certificate.from_json(json.loads(f.read_text(encoding="utf-8")), str(f))
        met = [x <= c.loss_target for x in c.evidence["finals"]]
        cells = []
        for name in priors:
            t = Sequential(c.omega, c.alpha, name)
            for m in met:
                if t.decided:
                    break
                t.add(m)
            if t.decided:
                cells.append(f"{t.state.verdict} after {t.runs} ({t.hits})")
                continue
            more = 0
            while not t.decided:
                t.add(True)
                more += 1
            cells.append(f"undecided after {len(met)}; certified after {more} more if all meet ℓmax")
        lines.append(f"| {f.relative_to(ROOT)} | {c.omega:g}, {c.alpha:g} | {c.runs} ({c.hits}) | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--table", type=Path, default=TABLE, help="a `depl coverage` table's coverage.json")
    ap.add_argument("--md", type=Path, help="write the table as markdown here")
    ap.add_argument("--prior", default=DEFAULT_PRIOR, choices=list(PRIORS), help="the sequential test's e-process")
    ap.add_argument("--priors", action="store_true", help="print the e-processes' trade-off table instead")
    ap.add_argument("--reps", type=int, default=4000, help="--priors: Monte Carlo paths per p for aGRAPA")
    ap.add_argument("--replay", action="store_true", help="replay the committed certificates under each prior")
    a = ap.parse_args()
    if a.replay:
        print(replay())
        return
    if a.priors:
        text = tradeoff(a.alpha, a.reps)
        print(text)
        if a.md:
            a.md.write_text(text, encoding="utf-8")
        return
    rs = rows(a.alpha, a.table, a.prior)
    text = markdown(rs, a.alpha, a.prior)
    print(text)
    if a.md:
        a.md.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
