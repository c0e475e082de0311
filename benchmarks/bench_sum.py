"""The law of a long schedule, two orders of convolution side by side (not a timed test).

`depl.dist.sum_distribution` convolves the lattice masses of a schedule's terms two shortest first (Huffman's
order); the order it replaced took them into one running sum, narrowest first.  Both are timed here on the same
terms — an increments law (one term per epoch and node, the noise multiplier of each) along one-version schedules
of K epochs, at the lattice step the planners certify with — and their certified quantile brackets printed: the
two must agree to the sums' round-off (both brackets are certified; δ counts each order's trimmed tails).

    PYTHONPATH=src .venv/bin/python benchmarks/bench_sum.py [--epochs 16 64 160] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from depl.dist import GridDistribution, _term_pmf, _trim, fft_convolve, sum_distribution  # noqa: E402
from depl.loss import loss_model_for  # noqa: E402
from depl.scenario import load_scenario, parse_scenario, scenario_dict  # noqa: E402


def running_sum(terms, h: float, eps: float = 1e-7, trim: float = 1e-14) -> GridDistribution:
    """The replaced order: narrowest first, each into one running sum (the baseline, kept only here)."""
    random = [t for t in terms if t.dist is not None and t.coef != 0.0]
    offset = float(sum(t.shift for t in terms))
    pieces = sorted((_term_pmf(t, h, eps) for t in random), key=lambda p: p[1].size)
    i0, pmf = pieces[0]
    for j, p in pieces[1:]:
        pmf = fft_convolve(pmf, p) if min(pmf.size, p.size) > 64 else np.convolve(pmf, p)
        np.clip(pmf, 0.0, None, out=pmf)
        i0, pmf = _trim(i0 + j, pmf, trim)
    return GridDistribution(offset, h, i0, pmf, len(random), max(0.0, 1.0 - float(pmf.sum())), 0.0, 0.0)


def best_of(repeat: int, f):
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t0)
    return min(times), out


def at_least_one(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n}: at least 1")
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=at_least_one, nargs="+", default=[16, 64, 160])
    ap.add_argument("--repeat", type=at_least_one, default=2)
    a = ap.parse_args()
    d = scenario_dict(load_scenario("mnist1d-small"))
    d.pop("calibration", None)
    d["loss_model"] = "increments"
    s = parse_scenario(d)
    law = loss_model_for(s)
    version = s.models[0].name
    omega = s.target.quantile
    print(f"mnist1d-small under its increments law, version {version}, ω {omega}; best of {a.repeat}")
    print(f"{'K':>4} {'terms':>6} {'points':>8} {'running s':>10} {'pairs s':>8} {'ratio':>6}  brackets (running | pairs)")
    for K in a.epochs:
        terms, _ = law.law_parts([version] * K)
        n = sum(1 for t in terms if t.dist is not None and t.coef != 0.0)
        coarse = sum_distribution(terms)                 # the default lattice: tol = 1 % of the sum's sd
        h = coarse.h / 10                                # a bracket ten times narrower, as a certified plan's
        t_old, old = best_of(a.repeat, lambda: running_sum(terms, h))
        t_new, new = best_of(a.repeat, lambda: sum_distribution(terms, h=h))
        (lo_o, hi_o), (lo_n, hi_n) = old.quantile_bounds(omega), new.quantile_bounds(omega)
        print(f"{K:>4} {n:>6} {new.pmf.size:>8} {t_old:>10.3f} {t_new:>8.3f} {t_old / t_new:>5.1f}×  "
              f"[{lo_o:.9f}, {hi_o:.9f}] | [{lo_n:.9f}, {hi_n:.9f}]")


if __name__ == "__main__":
    main()
