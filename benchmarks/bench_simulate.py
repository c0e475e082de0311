"""Monte Carlo speed, side by side with numpy drawing the same numbers (not a timed test).

For the depl plan of each built-in scenario: trajectory-epochs per second of
`depl.simulate` (the loss model's `simulate`, and the whole `simulate_plan`
with its band and confidence intervals) against numpy's raw rate for the
same law — the same count of draws from the same distributions with numpy's
own generators (Inverse-Gamma as 1/Gamma) and nothing else.  The ratio is
how much slower depl is than drawing the numbers.  `--scipy` adds scipy's
own samplers (`rvs`, the old path) for comparison.

Run:  .venv/bin/python benchmarks/bench_simulate.py  [--quick] [--scipy]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from depl.dist import draw  # noqa: E402
from depl.loss import loss_model_for  # noqa: E402
from depl.planners import Options, make_plan  # noqa: E402
from depl.scenario import load_scenario  # noqa: E402
from depl.simulate import simulate_plan, simulate_schedule  # noqa: E402


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times) if repeat > 2 else statistics.median(times)


def raw_numpy(loss, schedule, runs: int, rng, scipy: bool = False) -> None:
    """The draws the law needs and nothing else: every epoch's noise, every switch's jump."""
    # scipy's own sampler of the same law (a depl.families.Frozen samples with numpy: ask scipy.stats' object)
    sample = (lambda d, size: getattr(d, "as_scipy", lambda: d)().rvs(size=size, random_state=rng)) if scipy \
        else (lambda d, size: draw(d, size, rng))
    if hasattr(loss, "_noise"):  # the increments law
        for m in set(schedule):
            sample(loss._noise[m], (runs, schedule.count(m)))
        for a, b in zip(schedule, schedule[1:]):
            if a != b:
                sample(loss._jump[(a, b)], runs)
    else:  # the level law: one shared and one own normal per epoch
        rng.standard_normal((runs, 1))
        rng.standard_normal((runs, len(schedule) + 1))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--scipy", action="store_true", help="also time scipy's rvs for the same draws")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 when a law's ratio is above 3 (a timing: read it on a quiet machine, not in tests)")
    args = ap.parse_args()
    runs, repeat = (20_000, 3) if args.quick else (100_000, 5)
    print(f"python {sys.version.split()[0]}, one thread, {runs} runs; CPU seconds (process_time), best of {repeat}")
    print(f"{'scenario':<28} {'K':>4} {'numpy draws':>12} {'simulate':>10} {'ratio':>6} "
          f"{'simulate_plan':>14} {'ratio':>6}" + (f" {'scipy rvs':>10} {'ratio':>6}" if args.scipy else ""))
    worst = 0.0
    # mnist1d-small ships a [calibration]: its law as fitted (the level law) is what the ≤ 3 target is about; the
    # calibrated law moves every epoch's draw through the base law's cdf and quantile, a cost of its own (its row)
    for name, calibrated in (("paper-alexnet", False), ("paper-mobilenet", False), ("mnist1d-small", False),
                             ("mnist1d-small", True)):
        s = load_scenario(name)
        loss = loss_model_for(s, calibrated=calibrated)
        plan = make_plan(s, "depl", Options(eta=100), loss=loss)
        label = name + (" (calibrated)" if calibrated else "")
        phi = s.phi(s.samples(plan.datasets))
        sched = plan.schedule
        rng = np.random.default_rng(0)
        t_raw = best_of(lambda: raw_numpy(loss, sched, runs, rng), repeat)
        t_sim = best_of(lambda: simulate_schedule(loss, sched, phi, runs, 1), repeat)
        t_plan = best_of(lambda: simulate_plan(plan, runs=runs, seed=1, loss=loss), repeat)
        rate = runs * len(sched)
        row = (f"{label:<28} {len(sched):>4} {rate / t_raw / 1e6:>8.1f} M/s {rate / t_sim / 1e6:>6.1f} M/s "
               f"{t_sim / t_raw:>6.2f} {rate / t_plan / 1e6:>10.1f} M/s {t_plan / t_raw:>6.2f}")
        if args.scipy:
            t_sp = best_of(lambda: raw_numpy(loss, sched, runs, rng, scipy=True), repeat)
            row += f" {rate / t_sp / 1e6:>6.1f} M/s {t_sp / t_raw:>6.2f}"
        print(row)
        if not calibrated:
            worst = max(worst, t_sim / t_raw)
    print(f"\nworst ratio simulate / numpy draws, the laws as fitted: {worst:.2f} (target ≤ 3)")
    return 1 if args.strict and worst > 3 else 0


if __name__ == "__main__":
    sys.exit(main())
