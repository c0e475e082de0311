"""plot_* functions over finished results: Monte Carlo and measured loss bands, fits, validations.

Each takes results that are already computed and draws them; none trains,
plans or simulates.  The figures of `depl reproduce` are in `figures.py`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..band import Band
from ..plan import Plan
from .mpl import pyplot, save

if TYPE_CHECKING:  # only for annotations: fit/ and validate sit beside report/, not below it
    from ..certificate import Certificate
    from ..fit.report import FitResult
    from ..validate import Validation


def plot_loss_band(bands: Sequence[tuple[str, Band]], *, target: float | None = None,
                   switches: Sequence[Sequence[int]] = (), title: str = "", ax=None):
    """Expected loss (line) and 1st–99th percentile (shaded) per epoch — paper Fig. 9 style.  Where a band is +∞
    (some runs are: a calibrated law's runs beyond every loss it allows) it is drawn where finite, and a note
    in the plot says where it is not (`Band.infinite_note`)."""
    fig = None
    if ax is None:
        fig, ax = pyplot().subplots(figsize=(6.4, 4.0), dpi=120)
    notes = []
    for i, (label, band) in enumerate(bands):
        k = range(band.mean.size)
        note = band.infinite_note()
        # where some of it is +∞, points too: a finite epoch between +∞ ones is no line
        line, = ax.plot(k, band.finite("mean"), label=f"{label}: expected", lw=1.8, marker="." if note else None)
        low, high = band.finite("low"), band.finite("high")
        ax.fill_between(k, low, high, where=np.isfinite(low) & np.isfinite(high), color=line.get_color(), alpha=0.25,
                        label=f"{label}: 1st–99th pct")
        if note:  # each end where it is finite, also where the other is +∞
            for edge in (low, high):
                ax.plot(k, edge, color=line.get_color(), lw=0.8, alpha=0.6, marker=".", ms=3)
        for sw in (switches[i] if i < len(switches) else ()):
            ax.axvline(sw, color=line.get_color(), ls=":", lw=0.8)
        if note:
            notes.append(f"{label}: {note}" if len(bands) > 1 else note)
    _note(ax, notes)
    if target is not None:
        ax.axhline(target, color="k", ls="--", lw=1.0, label=f"target ℓmax = {target:g}")
    ax.set_xlabel("epoch k")
    ax.set_ylabel("test loss ℓ(k)")
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    return fig or ax.figure


def _note(ax, notes: Sequence[str]) -> None:
    """Say in the plot what it cannot draw (a band's +∞ epochs)."""
    if notes:
        ax.text(0.01, 0.01, "\n".join(notes), transform=ax.transAxes, fontsize=6.5, va="bottom", ha="left",
                color="0.25", wrap=True)


def switch_epochs(plan: Plan) -> list[int]:
    """Epochs after which the plan switches version (where Fig. 9's peaks are)."""
    s = plan.schedule
    return [k for k in range(1, len(s)) if s[k] != s[k - 1]]


DECISION_MARKERS = {"stop": "v", "replan": "D", "deadline-replan": "s", "deadline-miss": "X"}


def plot_measured_bands(bs: list[Band], path: str | Path,
                        title: str = "measured test loss: mean and 1st–99th percentile",
                        decisions: dict[str, list[dict]] | None = None) -> None:
    """Fig. 2 style: one shaded 1–99% band and a mean line per run of a store, and the band widths.

    `decisions` (run id → the closed loop's decisions, `Store.decisions`): each one that changed a plan is
    marked at its epoch and observed validation loss, by action."""
    fig, axes = pyplot().subplots(1, 2, figsize=(12, 4.5))
    ax, ax2 = axes
    for i, b in enumerate(bs):
        c = f"C{i % 10}"
        ax.fill_between(b.epochs, b.low, b.high, color=c, alpha=0.25, linewidth=0)
        ax.plot(b.epochs, b.mean, color=c, label=f"{b.label} ({b.runs} seeds)")
        ax2.plot(b.epochs, b.high - b.low, color=c, label=b.label)
        for action, marker in DECISION_MARKERS.items():
            pts = [(d["epoch"], d["observed"]) for d in (decisions or {}).get(b.run_id, [])
                   if d["action"] == action and d["observed"] is not None]
            if pts:
                ax.scatter(*zip(*pts), marker=marker, color=c, edgecolor="black", s=30, zorder=3,
                           label=f"{action} ({len(pts)})")
    ax.set_xlabel("epoch")
    ax.set_ylabel("test loss")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("width of the 1–99% band")
    ax2.set_yscale("log")
    ax2.set_title("spread per version", fontsize=10)
    save(fig, path, dpi=120)


def plot_fit(r: "FitResult", law_bands: Sequence[dict[str, Band]], path: Path) -> None:
    """Per experiment: the measured band (mean, 1–99%) over each law's band (`law_bands`, one {law: Band} per
    experiment in the profile's order: depl.fit.bands.law_bands, its Monte Carlo)."""
    exps = r.profile.experiments
    cols = min(3, len(exps))
    rows = math.ceil(len(exps) / cols)
    fig, axes = pyplot().subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False, sharey=True)
    colors = dict(zip(r.scenarios, ["tab:red", "tab:blue", "tab:green", "tab:purple", "tab:brown"]))
    for ax, e, laws in zip(axes.ravel(), exps, law_bands):
        k = np.arange(0, e.epochs + 1)
        meas = np.concatenate([np.full((e.losses.shape[0], 1), next(iter(r.scenarios.values())).initial_loss), e.losses], axis=1)
        for m, b in laws.items():
            ax.fill_between(k, b.low, b.high, color=colors[m], alpha=0.18, label=f"{m} 1–99%")
            ax.plot(k, b.mean, color=colors[m], lw=1)
        lo, hi = np.quantile(meas, [0.01, 0.99], axis=0)
        ax.plot(k, meas.mean(axis=0), "k-", lw=1.5, label="measured mean")
        ax.plot(k, lo, "k--", lw=0.8, label="measured 1–99%")
        ax.plot(k, hi, "k--", lw=0.8)
        ax.set_title(f"{e.label} ({e.samples:g} samples)", fontsize=9)
        ax.set_xlabel("epoch")
    for ax in axes.ravel()[len(exps):]:
        ax.axis("off")
    axes[0, 0].set_ylabel("test loss")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle("measured (black) vs each fitted law's band (colours in the legend)")
    save(fig, path, dpi=110)


def plot_multipliers(r: "FitResult", path: Path) -> None:
    """Histograms of the paper's x per version with the fitted densities."""
    from ..fit.increments import multipliers   # depl.fit imports scipy.optimize and scipy.stats: never on `depl plan`
    vs = list(r.increments.versions.values())
    fig, axes = pyplot().subplots(1, len(vs), figsize=(4.2 * len(vs), 3.0), squeeze=False)
    for ax, v in zip(axes[0], vs):
        e = next(x for x in r.profile.split(False).versions(1.0) if x.version == v.name)
        x = multipliers(e.losses, r.level.initial_loss, v.A, v.B).ravel()
        lo, hi = np.quantile(x, [0.01, 0.99])
        ax.hist(x, bins=60, range=(lo, hi), density=True, color="0.7")
        grid = np.linspace(lo, hi, 400)
        for f in v.families:
            ax.plot(grid, f.frozen.pdf(grid), lw=1, label=f.family)
        ax.set_title(f"{v.name}: x = (ℓ(k−1)−ℓ(k))/g(k)", fontsize=9)
    axes[0, 0].legend(fontsize=7)
    save(fig, path, dpi=110)


def plot_calibration(r: "FitResult", path: Path) -> None:
    """Per law: the reliability on the runs set apart (nominal level p vs observed P(ℓ(E) ≤ the p-quantile),
    before and after calibration, the latter cross-fitted so that no run judges its own calibration) and
    the PIT histograms of ℓ(k) per version and for the switches (flat when the law is right)."""
    plot_reliability(r.calibration, r.pit, path)


def plot_reliability(calibration: dict, pit: dict, path: Path, runs: str = "runs set apart") -> None:
    """`plot_calibration` of {law: Calibration} and {law: Scores (PIT of ℓ(k), every epoch)} of some runs
    (`depl fit`'s runs set apart, or `depl calibrate`'s new runs)."""
    from ..fit.calibrate import LEVELS, reliability   # depl.fit imports scipy.stats: never on `depl plan`
    laws = list(calibration)
    groups = sorted({g for m in laws for g in pit[m].groups()}, key=lambda g: (g == "switches", g))
    cols = 1 + len(groups)
    fig, axes = pyplot().subplots(len(laws), cols, figsize=(3.4 * cols, 3.0 * len(laws)), squeeze=False)
    for row, m in zip(axes, laws):
        u = calibration[m].scores
        ax = row[0]
        ax.plot([0, 1], [0, 1], color="0.6", lw=0.8)
        ax.plot(LEVELS, reliability(u, LEVELS, "none"), "o-", color="tab:red", ms=3, label="as fitted")
        ax.plot(LEVELS, reliability(u, LEVELS, "conformal"), "s-", color="tab:blue", ms=3,
                label="calibrated (cross-fitted)")
        ax.set_xlabel("nominal level p")
        ax.set_ylabel("observed P(ℓ(E) ≤ p-quantile)")
        ax.set_title(f"{m}: reliability, {u.size} {runs}", fontsize=9)
        ax.legend(fontsize=7)
        pits = pit[m].groups()
        for ax, g in zip(row[1:], groups):
            if g in pits:
                ax.hist(pits[g], bins=10, range=(0, 1), density=True, color="0.6")
                ax.axhline(1.0, color="k", lw=0.8)
                ax.set_title(f"{m}: PIT of ℓ(k), {g} ({pits[g].size})", fontsize=9)
            else:
                ax.axis("off")
    fig.tight_layout()
    save(fig, path, dpi=110)


def plot_validation(v: "Validation", path: Path, title: str = "") -> None:
    """The measured band (mean, 1–99%) over the planned one."""
    k = np.arange(v.measured.mean.size)
    fig, ax = pyplot().subplots(figsize=(6.4, 4.0))
    for band, color, alpha, label in ((v.planned, "tab:blue", 0.2, "planned 1–99% (loss model)"),
                                      (v.measured, "k", 0.15, "measured 1–99%")):
        low, high = band.finite("low"), band.finite("high")  # drawn where finite; the note says where it is +∞
        ax.fill_between(k, low, high, where=np.isfinite(low) & np.isfinite(high), color=color, alpha=alpha, label=label)
    # the legend quotes the plan's own mean ℓ(K), the number the text reports, beside the band of the same law
    ax.plot(k, v.planned.finite("mean"), color="tab:blue", lw=1.2, label=f"planned mean (ℓ(K) = {v.planned_mean:.4g})")
    ax.plot(k, v.measured.finite("mean"), "k-", lw=1.5, label="measured mean")
    _note(ax, [f"{who}: {n}" for who, b in (("planned", v.planned), ("measured", v.measured))
               for n in [b.infinite_note()] if n])
    ax.axhline(v.coverage.target, color="tab:red", ls="--", lw=1, label=f"ℓmax = {v.coverage.target:g}")
    c = v.coverage
    ax.set_title(title or f"{v.loss_model} plan: coverage {c.rate:.3f} [{c.ci[0]:.3f}, {c.ci[1]:.3f}] vs ω = {c.omega:g}",
                 fontsize=10)
    ax.set_xlabel("epoch")
    ax.set_ylabel("test loss")
    ax.legend(fontsize=8)
    save(fig, path, dpi=110)


__all__ = ["plot_loss_band", "switch_epochs", "plot_measured_bands", "plot_fit", "plot_multipliers",
           "plot_validation", "save"]


SEARCH_COLOURS = {"certified": "tab:green", "refuted": "tab:red", "dropped": "tab:grey", "undecided": "tab:orange"}


def plot_search(cert: "Certificate", title: str = ""):
    """A certified search's candidates (`info.certificate` of `depl plan --certify`): cost against the
    anytime-valid lower bound on P(ℓ(K) ≤ ℓmax) each one's runs reached, coloured by verdict, ω as a line and the
    plan returned ringed."""
    fig, ax = pyplot().subplots(figsize=(6.4, 4.0), dpi=120)
    rows = cert.candidates
    for verdict, colour in SEARCH_COLOURS.items():
        mine = [r for r in rows if r["verdict"] == verdict]
        if mine:
            ax.scatter([r["cost"] for r in mine], [r["lower_bound"] for r in mine], color=colour, s=36,
                       label=f"{verdict} ({len(mine)})", zorder=3)
    if cert.returned is not None:
        r = rows[cert.returned]
        ax.scatter([r["cost"]], [r["lower_bound"]], s=160, facecolors="none", edgecolors="black", zorder=4,
                   label="returned")
    ax.axhline(cert.omega, color="black", lw=0.8, ls="--", label=f"ω = {cert.omega:g}")
    ax.set_xlabel("cost")
    ax.set_ylabel("anytime-valid lower bound on P(ℓ(K) ≤ ℓmax)")
    ax.set_ylim(0.0, 1.02)
    ax.set_title(title or "certified search", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    return fig
