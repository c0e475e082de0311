"""The figures of `depl reproduce` (paper Figs. 5–9), drawn from finished `Results`.

Each plot_* function takes the results and returns a matplotlib Figure;
`write_all` saves them as PNGs (dpi 100) and returns {key: file name}.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..experiments.config import METHODS, VERSIONS
from ..experiments.findings import growth_exponent, perf_series
from ..experiments.results import Results
from ..experiments.variants import VARIANTS
from .mpl import pyplot, save

DPI = 100
STYLE = {"optimal": dict(color="k", marker="o", ls="-"),
         "depl": dict(color="tab:blue", marker="s", ls="--"),
         "best-exp": dict(color="tab:red", marker="^", ls=":")}
VERSION_COLOR = {"fast-unsteady": "tab:red", "intermediate": "tab:orange", "slow-steady": "tab:green"}


def short(network: str) -> str:
    return network.removeprefix("paper-")


def _series(r: Results, network: str, method: str, value):
    xs, ys = [], []
    for t in r.config.targets:
        o = r.outcome(network, t, method)
        if o.feasible:
            xs.append(t)
            ys.append(value(o))
    return xs, ys


def plot_performance(r: Results, network: str):
    """Fig. 5/6: cost vs target (left), expected loss / optimum's (centre), effect of η (right)."""
    fig, axes = pyplot().subplots(1, 3, figsize=(13.5, 3.8), dpi=DPI)
    ax = axes[0]
    for m in METHODS:
        ax.plot(*_series(r, network, m, lambda o: o.cost), label=m, ms=5, **STYLE[m])
    ax.set(xlabel="target ℓmax on the 99th percentile", ylabel="cost (eq. 2)", title="cost")
    if _coincide(r, network):
        ax.text(0.03, 0.04, "the three methods' plans coincide", transform=ax.transAxes, fontsize=8)
    ax = axes[1]
    for m in ("depl", "best-exp"):
        xs, ys = [], []
        for t in r.config.targets:
            o, opt = r.outcome(network, t, m), r.outcome(network, t, "optimal")
            if o.feasible and opt.feasible:
                xs.append(t)
                ys.append(o.loss_mean / opt.loss_mean)
        ax.plot(xs, ys, label=m, ms=5, **STYLE[m])
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set(xlabel="target ℓmax on the 99th percentile", ylabel="E[ℓ(K)] / optimum's E[ℓ(K)]",
           title="normalised expected loss")
    ax = axes[2]
    tax = ax.twinx()
    for i, t in enumerate(r.config.eta_targets):
        pts = sorted((e.eta, e.cost, e.solve_seconds) for e in r.eta if e.scenario == network and e.target == t)
        if not pts:
            continue
        opt = r.outcome(network, t, "optimal") if (network, t, "optimal") in r.sweep else None
        ref = opt.cost if opt is not None and opt.feasible else pts[-1][1]
        eta, cost, secs = map(np.array, zip(*pts))
        c = pyplot().cm.viridis(i / max(1, len(r.config.eta_targets) - 1) * 0.8)
        ax.plot(eta, cost / ref, marker="o", color=c, label=f"cost/optimal, ℓmax={t:g}")
        tax.plot(eta, secs, marker="x", ls=":", color=c, label=f"solve time, ℓmax={t:g}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(r.config.eta_values), [str(e) for e in r.config.eta_values])
    ax.minorticks_off()
    ax.set(xlabel="η (expanded-graph discretisation)", ylabel="DepL cost / optimal cost", title="effect of η on DepL")
    tax.set_ylabel("DepL solve time (s)")
    tax.set_yscale("log")
    _plain_log_y(tax)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = tax.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=6.5, loc="center right", framealpha=0.85)
    for a in axes[:2]:
        a.legend(fontsize=8)
    for a in axes:
        a.grid(alpha=0.3)
    fig.suptitle(f"{short(network)}: DepL vs optimal vs best-exp", fontsize=11)
    return fig


def _coincide(r: Results, network: str) -> bool:
    return all(len({tuple(map(tuple, r.outcome(network, t, m).segments)) for m in METHODS}) == 1
               for t in r.config.targets)


def _stacked(r: Results, network: str, value, ylabel: str, title: str):
    fig, axes = pyplot().subplots(1, 3, figsize=(13.5, 3.6), dpi=DPI, sharey=True)
    ts = list(r.config.targets)
    x = np.arange(len(ts))
    for ax, m in zip(axes, METHODS):
        bottom = np.zeros(len(ts))
        for v in VERSIONS:
            h = np.array([value(r.outcome(network, t, m), v) if r.outcome(network, t, m).feasible else 0.0
                          for t in ts], float)
            ax.bar(x, h, bottom=bottom, color=VERSION_COLOR[v], label=v, width=0.7)
            bottom += h
        ax.set_xticks(x, [f"{t:g}" for t in ts])
        ax.set(xlabel="target ℓmax on the 99th percentile", title=m)
        ax.grid(alpha=0.3, axis="y")
    axes[0].set_ylabel(ylabel)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{short(network)}: {title}", fontsize=11)
    return fig


def plot_epochs_per_version(r: Results, network: str):
    """Fig. 7: epochs spent with each model version, per method."""
    return _stacked(r, network, lambda o, v: o.epochs_per_version.get(v, 0), "epochs",
                    "epochs per model version (optimal | DepL | best-exp)")


def plot_cost_per_version(r: Results, network: str):
    """Fig. 8: cost (Σ κ·x·nodes over the version's epochs) per model version."""
    return _stacked(r, network, lambda o, v: o.cost_per_version.get(v, 0.0), "cost",
                    "cost per model version (optimal | DepL | best-exp)")


def plot_bands(r: Results, network: str, table: str = "sweep"):
    """Fig. 9: expected loss and 1st–99th percentile band for three targets, three methods overlaid."""
    from matplotlib import ticker

    if table == "sweep":
        ts, get = list(r.config.band_targets), (lambda t, m: r.outcome(network, t, m))
    else:  # a variant: its first, middle and last target
        all_t = sorted({t for k, t, _ in r.sensitivity if k == network})
        ts = sorted({all_t[0], all_t[len(all_t) // 2], all_t[-1]})
        get = (lambda t, m: r.sensitivity[(network, t, m)])
    fig, axes = pyplot().subplots(1, len(ts), figsize=(max(4.6 * len(ts), 8.0), 3.8), dpi=DPI, sharey=True)
    axes = np.atleast_1d(axes)
    for ax, t in zip(axes, ts):
        for m in METHODS:
            o = get(t, m)
            if not (o.feasible and o.band is not None):
                continue
            st, k = STYLE[m], np.arange(o.band.mean.size)
            ax.fill_between(k, o.band.low, o.band.high, color=st["color"], alpha=0.12, lw=0)
            ax.plot(k, o.band.low, color=st["color"], lw=0.6, ls=st["ls"])
            ax.plot(k, o.band.high, color=st["color"], lw=0.6, ls=st["ls"])
            ax.plot(k, o.band.mean, color=st["color"], lw=1.8, ls=st["ls"], label=f"{m} (K = {o.K})")
            e = 0
            for _, n in o.segments[:-1]:  # switches: where the paper's peaks are
                e += n
                ax.axvline(e, color=st["color"], lw=0.8, ls=(0, (1, 3)))
        ax.axhline(t, color="k", ls="--", lw=1.0, label=f"target ℓmax = {t:g}")
        ax.set(xlabel="epoch k", title=f"ℓmax = {t:g}")
        ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    axes[0].set_ylabel("test loss ℓ(k)")
    if table == "sweep":
        fig.suptitle(f"{short(network)}: expected loss (thick) and 1st–99th percentile band (shaded), "
                     f"{r.config.mc_runs:,} Monte Carlo runs per plan", fontsize=11)
    else:
        fig.suptitle(f"VARIANT {network} (not the paper's scenario): expected loss and 1st–99th pct band",
                     fontsize=10)
    return fig


def plot_sensitivity(r: Results):
    """Variants (not the reproduction): cost vs target and epochs per version."""
    keys = [k for k in VARIANTS if any(k == key for key, _, _ in r.sensitivity)]
    ts = sorted({t for _, t, _ in r.sensitivity})
    fig, axes = pyplot().subplots(len(keys), 2, figsize=(11, 3.4 * len(keys)), dpi=DPI, squeeze=False)
    for row, key in zip(axes, keys):
        ax = row[0]
        for m in METHODS:
            pts = [(t, r.sensitivity[(key, t, m)].cost) for t in ts if r.sensitivity[(key, t, m)].feasible]
            if pts:
                ax.plot(*zip(*pts), label=m, ms=5, **STYLE[m])
        ax.set(xlabel="target ℓmax on the 99th percentile", ylabel="cost", title=f"VARIANT {key}: cost")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ax = row[1]
        width = 0.26
        for j, m in enumerate(METHODS):
            bottom = np.zeros(len(ts))
            for v in VERSIONS:
                h = np.array([r.sensitivity[(key, t, m)].epochs_per_version.get(v, 0) for t in ts], float)
                ax.bar(np.arange(len(ts)) + (j - 1) * width, h, width * 0.95, bottom=bottom,
                       color=VERSION_COLOR[v], label=v if j == 0 else None, edgecolor="k", lw=0.3)
                bottom += h
            for i, b in enumerate(bottom):
                ax.text(i + (j - 1) * width, b, m[0].upper(), ha="center", va="bottom", fontsize=7)
        ax.set_xticks(np.arange(len(ts)), [f"{t:g}" for t in ts])
        ax.set(xlabel="target ℓmax (bars: O = optimal, D = depl, B = best-exp)", ylabel="epochs",
               title=f"VARIANT {key}: epochs per version")
        ax.legend(fontsize=8)
        ax.margins(y=0.12)
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle("Sensitivity study on variants of paper-alexnet (not the paper's scenario)", fontsize=11)
    return fig


def plot_perf(r: Results):
    """Solve time of depl and optimal as K, |M|, |N| and η grow (log–log, fitted exponent)."""
    from matplotlib import ticker

    series = perf_series(r)
    axes_names = ["K", "|M|", "|N|", "η"]
    fig, axes = pyplot().subplots(1, 4, figsize=(14, 3.4), dpi=DPI)
    for ax, a in zip(axes, axes_names):
        for m in ("depl", "optimal"):
            pts = series.get((a, m), [])
            if not pts:
                continue
            x, y = map(np.array, zip(*pts))
            p = growth_exponent(x, y)
            lab = f"{m} (∝ {a}^{p:.2f})" if not math.isnan(p) else m
            ax.loglog(x, y, label=lab, ms=5, **{k: v for k, v in STYLE[m].items() if k != "ls"})
        sizes = sorted({x for m in ("depl", "optimal") for x, _ in series.get((a, m), [])})
        ax.set_xticks(sizes, [f"{v:g}" for v in sizes])
        ax.xaxis.set_minor_locator(ticker.NullLocator())
        _plain_log_y(ax)
        ax.set(xlabel=a, ylabel="solve time (s)", title=f"solve time vs {a}")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.suptitle("planner solve time (one core); exponents by least squares on log–log", fontsize=11)
    return fig


def _plain_log_y(ax) -> None:
    """Log axis labelled 0.2, 0.5, 1, 2 rather than 2×10⁻¹."""
    from matplotlib import ticker

    ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())


def write_all(r: Results, out: Path) -> dict[str, str]:
    """Save every figure into `out`; {key: file name}."""
    names: dict[str, str] = {}

    def put(key: str, fig) -> None:
        name = f"{key}.png"
        save(fig, out / name, dpi=DPI)
        names[key] = name

    for i, net in enumerate(r.config.networks):
        s = short(net)
        put(f"fig{5 + i}-{s}-cost-loss-eta", plot_performance(r, net))
        put(f"fig7-{s}-epochs-per-version", plot_epochs_per_version(r, net))
        put(f"fig8-{s}-cost-per-version", plot_cost_per_version(r, net))
        put(f"fig9-{s}-loss-bands", plot_bands(r, net))
    if r.sensitivity:
        put("sensitivity-variants", plot_sensitivity(r))
        if any(k == "noisy-fast" for k, _, _ in r.sensitivity):
            put("sensitivity-noisy-fast-loss-bands", plot_bands(r, "noisy-fast", table="sensitivity"))
    put("planner-solve-time", plot_perf(r))
    return names

