"""The fitting workflows: `fit` (the loss laws fitted to profiled runs or training logs, written as a
scenario) and `calibrate` (a scenario's fitted law recalibrated on new runs, the law untouched)."""

from __future__ import annotations

import time
import tomllib
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from .common import check_output_file
from .errors import BadInput, Failed, as_bad_input, fitting_errors, writing
from ..fit.bands import law_bands
from ..fit.calibrate import recalibrate, reliability, with_calibration, with_code_dir
from ..fit.logs import base_scenario, is_log_file, read_logs
from ..fit.report import fit_profile, report_lines, run_fit, toml_dumps  # noqa: F401 (report_lines: `depl fit` prints them)
from ..fit.runs import FitError, load_profile
from ..report.plots import plot_calibration, plot_fit, plot_multipliers, plot_reliability
from ..paths import informational, relative, resolved
from ..runspec import run_spec
from ..scenario import OMEGA_RULE, CalibrationTable, load_scenario, name_problem, omega_problem, scenario_source
from ..scenario import parse_scenario, with_target
from ..store import Store

if TYPE_CHECKING:
    import numpy as np

    from ..fit.report import FitResult
    from ..scenario import Scenario

RELIABILITY_LEVELS = (0.5, 0.8, 0.9, 0.95)


def fitted_name(base: str, name: str | None = None) -> str:
    """The fitted scenario's name: `name`, else BASE-fitted (a plan of it never passes for one of the base)."""
    if name is not None:
        return name
    return base if base.endswith("-fitted") else f"{base}-fitted"


def sibling(out: Path, tag: str) -> Path:
    """Where one law's scenario is written beside `out`: NAME.TAG.toml."""
    return out.with_name(f"{out.stem}.{tag}{out.suffix or '.toml'}")


def fitted_seeds(profile) -> list[int]:
    """[first, last] of the seeds the laws were fitted on (every experiment's; the calibration seeds are apart)."""
    seeds = [int(x) for e in profile.experiments for x in e.seeds]
    return [min(seeds), max(seeds)]


@dataclass(frozen=True)
class Fitted:
    """The laws fitted (`result`) to profiled runs or logs over `base`; the scenario files and plots written."""

    result: "FitResult"
    base: "Scenario"
    logs: bool                      # fitted to training logs, not a store of `depl profile`
    template: bool                  # the base is a one-cluster template of the logs' setting (no scenario given)
    seconds: float
    plots: tuple[Path, ...] = ()
    out: Optional[Path] = None      # the chosen law's scenario
    chosen: Optional[str] = None    # the law written at `out`
    name: Optional[str] = None      # the fitted scenario's name
    siblings: tuple[Path, ...] = ()  # every law's scenario


def check_scenario_out(out: Path, inputs: tuple[Optional[str], ...], example: str) -> None:
    """A scenario file to write: a .toml file (a store, your code or a plan is never overwritten with TOML), and
    none of the command's own inputs."""
    if out.suffix.lower() != ".toml":
        raise BadInput(f"--out {out}: a scenario is written as TOML: give a .toml file, e.g. "
                       f"{out.with_name(example)}")
    for given in inputs:
        if given is not None and out.exists() and Path(given.removeprefix("sqlite:///")).resolve() == out.resolve():
            raise BadInput(f"--out {out}: is the file this command reads; write the new scenario beside it, e.g. "
                           f"{out.with_name(example)}")


def not_a_folder(path: str, other: str = "") -> None:
    """BadInput where the store given is a folder (a run folder): its runs.sqlite named where it holds one."""
    if Path(path).is_dir():
        inside = Path(path) / "runs.sqlite"
        raise BadInput(f"{path}: a folder; give the store" + (f", {inside}" if inside.is_file() else
                                                                 f" (RUN_FOLDER/runs.sqlite){other}"))


def write_text(out: Path, text: str, flag: str = "--out") -> None:
    """Write `text` at `out` (its folders made), or BadInput naming it where it cannot be written."""
    with writing(flag, out):
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")


def check_fit_options(omega, target_loss, deadline, name, out: Optional[Path], png: Optional[Path]) -> None:
    """The options of a fit, refused before it runs (not after minutes of it)."""
    for flag, v, ok, rule in (("--omega", omega, lambda x: omega_problem(x) is None, OMEGA_RULE),
                              ("--target-loss", target_loss, lambda x: 0 < x < 1e12, "> 0"),
                              ("--deadline", deadline, lambda x: 0 < x < 1e12, "> 0")):
        if v is not None and not ok(v):  # also refuses nan (every comparison is false)
            raise BadInput(f"{flag} {v}: must be {rule}")
    if name is not None and (name_problem(name) or not name.strip()):
        raise BadInput(f"--name {name!r}: {name_problem(name) or 'empty'}")
    if png is not None and png.exists() and not png.is_dir():
        raise BadInput(f"--png {png}: exists and is not a folder (the plots are written into a folder)")
    if out is not None:
        if out.is_dir():
            raise BadInput(f"--out {out}: is a folder; give the scenario file to write, e.g. {out / 'fitted.toml'}")
        check_output_file("--out", out)
    if png is not None:
        check_output_file("--png", png / "fit-bands.png")


def fit(store: str, scenario: Optional[str] = None, *, out: str | Path | None = None, png: str | Path | None = None,
        model: str = "auto", bootstrap: int = 200, seed: int = 0, target_loss: Optional[float] = None,
        omega: Optional[float] = None, deadline: Optional[float] = None, name: Optional[str] = None,
        calibration_seeds: Optional[int] = None) -> Fitted:
    """Fit the loss laws to profiled runs (a store of `depl profile`) or training logs (.csv, .parquet), choose
    one by held-out fit (`model`: auto, or a law to write), plot them into `png`, and write the chosen law's
    scenario at `out` and every law's beside it (`depl fit`)."""
    out, png = (None if x is None else Path(x) for x in (out, png))
    check_fit_options(omega, target_loss, deadline, name, out, png)
    if out is not None:
        check_scenario_out(out, (store, scenario), "fitted.toml")

    path = store.removeprefix("sqlite:///")
    logs = is_log_file(path)
    not_a_folder(path, " or a log file")
    if not Path(path).is_file():
        raise BadInput(f"{path}: no such {'log file' if logs else 'store (run `depl profile` first)'}")
    t0 = time.perf_counter()
    base, r = fit_laws(store, scenario, logs, bootstrap, seed, name, target_loss, omega, deadline, calibration_seeds)
    seconds = time.perf_counter() - t0
    with writing("--png", png):
        plots = draw_fit(r, png) if png is not None else ()
    if out is None:
        return Fitted(r, base, logs, logs and scenario is None, seconds, plots)
    chosen = r.chosen if model == "auto" else model
    fitted = fitted_name(base.name, name)
    for tag in r.data:
        text = fitted_text(r, tag, base, fitted, store, out, logs, scenario is None, (target_loss, omega, deadline))
        for p in ([out] if tag == chosen else []) + [sibling(out, tag)]:
            write_text(p, text)
    return Fitted(r, base, logs, logs and scenario is None, seconds, plots, out, chosen, fitted,
                  tuple(sibling(out, t) for t in r.data))


def fit_laws(store: str, scenario: Optional[str], logs: bool, bootstrap: int, seed: int, name, target_loss, omega,
             deadline, calibration_seeds: Optional[int]) -> tuple["Scenario", "FitResult"]:
    """(the base scenario, the fit) of a store's profiles or of logs."""
    import numpy as np

    path = store.removeprefix("sqlite:///")
    try:
        with warnings.catch_warnings(), as_bad_input(*fitting_errors()):
            # a degenerate fit is reported, once; numpy's RuntimeWarnings would only add noise to stderr
            warnings.simplefilter("ignore", RuntimeWarning)
            if logs:
                return fit_logs(path, scenario, bootstrap, seed, name, target_loss, omega, deadline, calibration_seeds)
            return fit_store(store, scenario, bootstrap, seed, omega, calibration_seeds)
    except (ValueError, ArithmeticError, np.linalg.LinAlgError) as e:  # from scipy/numpy inside a fit
        raise BadInput(f"{path}: the loss laws cannot be fitted to these runs ({e}); are the test losses on a sane "
                       "scale?") from None


def fit_store(store: str, scenario: Optional[str], bootstrap: int, seed: int, omega, calibration_seeds):
    """Fit a store's profiles; the base scenario is `scenario`, else the one its runs name."""
    path = store.removeprefix("sqlite:///")
    st = Store(store, readonly=True)  # fit only reads the profiles
    if scenario is None:
        names = {run_spec(r, path).scenario for r in st.runs("profile")} - {None}
        if len(names) != 1:
            raise FitError(f"{path}: cannot tell which scenario the runs were profiled with ({sorted(names)}); "
                           "give --scenario")
        scenario = names.pop()
    base = load_scenario(scenario)
    return base, run_fit(st, base, bootstrap=bootstrap, seed=seed, calibration_seeds=calibration_seeds, omega=omega)


def fit_logs(path: str, scenario: Optional[str], bootstrap: int, seed: int, name, target_loss, omega, deadline,
             calibration_seeds: Optional[int] = None):
    """Fit logs (CSV/Parquet); the base scenario is `scenario`'s system or a template of the logs' setting."""
    logs = read_logs(path)
    base, reference = base_scenario(logs, load_scenario(scenario) if scenario else None, name=name,
                                    target_loss=target_loss, omega=omega, deadline=deadline)
    return base, fit_profile(logs.profile(reference), base, bootstrap=bootstrap, seed=seed,
                             calibration_seeds=calibration_seeds)


def draw_fit(r: "FitResult", png: Path) -> tuple[Path, ...]:
    """The fit's plots in `png`: bands, multipliers, and with calibration the reliability and PIT histograms."""
    with warnings.catch_warnings():  # a version with few runs gives empty quantiles: numpy's warnings are noise
        warnings.simplefilter("ignore", RuntimeWarning)
        png.mkdir(parents=True, exist_ok=True)
        plot_fit(r, law_bands(r), png / "fit-bands.png")  # the laws' Monte Carlo here: the plot only draws
        plot_multipliers(r, png / "fit-multipliers.png")
        if not r.calibration:
            return (png / "fit-bands.png", png / "fit-multipliers.png")
        plot_calibration(r, png / "fit-calibration.png")
        return (png / "fit-bands.png", png / "fit-multipliers.png", png / "fit-calibration.png")


def fitted_text(r: "FitResult", tag: str, base: "Scenario", fitted: str, store: str, out: Path, logs: bool,
                no_scenario: bool, targets: tuple) -> str:
    """One law's scenario file: its header saying how it was made, the base's other sections, the law;
    `targets`: (loss, quantile, deadline) set in its [target] (None: the base's)."""
    seeds = fitted_seeds(r.profile)
    data = {**with_target(r.data[tag], *targets, fitted),
            "fitted_epochs": max(e.epochs for e in r.profile.experiments), "fitted_seeds": seeds}
    template = logs and no_scenario
    header = (f"Written by `depl fit {informational(store)}` ({tag} model{', chosen by held-out fit' if tag == r.chosen else ''}).\n"
              f"Base scenario: {base.name}; loss sections (models' progress/noise/level, switches, data_law,\n"
              f"loss_model, max_epochs = fitted_epochs = the profiled epochs) fitted from {len(r.profile.experiments)} "
              f"{'logged runs' if logs else 'profiling experiments'} on seeds {seeds[0]}..{seeds[1]} "
              "(fitted_seeds; `depl calibrate` refuses runs on them)."
              + ("\nThe clusters and datasets are a template of the logs' setting (an epoch at full compute = one time\n"
                 "unit): edit them, and the versions' size and work, to plan for your system." if template else "")
              + (f"\n[calibration]: {r.calibration[tag].message()}.\n"
                 "`depl plan` plans with the calibrated law while use = true; `depl plan --uncalibrated` "
                 "(or use = false) with the law as fitted." if tag in r.calibration else ""))
    if isinstance(data.get("code_dir"), str) and Path(data["code_dir"]).is_absolute():
        # your code's folder relative to the written file (read relative to it): the project moves whole
        data = {**data, "code_dir": relative(data["code_dir"], out)}
    text = toml_dumps(data, header)
    try:
        parse_scenario(tomllib.loads(text), str(out))  # what we write must load
    except Exception as e:  # pragma: no cover - a bug, not a user error
        raise Failed(f"the fitted scenario does not validate: {e}") from None
    return text


@dataclass(frozen=True)
class Calibrated:
    """A scenario's law recalibrated on new runs (`calibration`, their PIT scores `pit`), written at `out` with
    [calibration] use = `use`; reliability before and after at `levels`."""

    base: "Scenario"
    source: str
    store: str
    out: Path
    experiments: tuple[str, ...]
    seeds: tuple[int, int]
    calibration: Any                # depl.loss.calibrated's Calibration
    pit: Any = field(hash=False)
    use: bool
    levels: tuple[float, ...]
    before: "np.ndarray" = field(hash=False)
    after: "np.ndarray" = field(hash=False)
    more: str                       # how to get more runs, if the calibration wants them
    written: "Scenario"
    png: Optional[Path] = None
    unfinished: int = 0             # runs that diverged or stopped before their last epoch: counted, as misses

    def to_json(self) -> dict:
        cal = self.calibration
        return {"scenario": self.base.name, "source": self.source, "store": self.store, "out": str(self.out),
                "experiments": list(self.experiments), "runs": cal.runs, "unfinished": self.unfinished,
                "seeds": list(self.seeds),
                "fitted_seeds": self.base.fitted_seeds, "omega": cal.omega, "needed": cal.needed,
                "reaches": cal.reaches, "use": self.use, "level": cal.level if cal.reaches else None,
                "epoch_levels": cal.levels().tolist() if cal.reaches else None,
                "reliability": {"levels": list(self.levels), "before": self.before.tolist(),
                                "after": self.after.tolist()},
                "png": str(self.png) if self.png is not None else None}


def calibration_use(cal, base: "Scenario") -> bool:
    """Whether a plan uses the calibration (its [calibration] use): as `depl fit`, not below ω's runs; also not
    below the runs the scenario's own target quantile needs, which it must load with, at every scored epoch."""
    fewest = min([cal.runs] + [r.size for r in cal.epochs])  # at every scored epoch (docs/fitting.md)
    return bool(cal.reaches and fewest >= CalibrationTable.needed(base.target.quantile))


def check_calibrate_options(omega: Optional[float], out: Path, png: Optional[Path]) -> None:
    if omega is not None and (why := omega_problem(omega, "--omega")):
        raise BadInput(why)
    if out.is_dir():
        raise BadInput(f"--out {out}: is a folder; give the scenario file to write, e.g. {out / 'calibrated.toml'}")
    check_output_file("--out", out)
    if png is not None:
        if png.exists() and not png.is_dir():
            raise BadInput(f"--png {png}: exists and is not a folder (the plot is written into a folder)")
        check_output_file("--png", png / "calibration.png")


def calibrate(scenario: str, store: str, out: str | Path, *, omega: Optional[float] = None,
              png: str | Path | None = None) -> Calibrated:
    """Calibrate a scenario's fitted law on new runs (a store of `depl profile` on seeds the law was not fitted
    on), without refitting it: write SCENARIO's text at `out` with its [calibration] replaced (`depl calibrate`).
    `omega`: the ω to calibrate for [default: the scenario's target quantile]; `png`: folder for the plot."""
    out, png = Path(out), None if png is None else Path(png)
    check_calibrate_options(omega, out, png)
    check_scenario_out(out, (scenario, store), "calibrated.toml")
    path = store.removeprefix("sqlite:///")
    not_a_folder(path)
    if not Path(path).is_file():
        raise BadInput(f"{path}: no such store (run `depl profile --first-seed N` first)")
    import numpy as np

    with as_bad_input(*fitting_errors()):
        text, source = scenario_source(scenario)
        base = load_scenario(scenario)   # with the digests of your code it names: the runs' must be the same
        omega = base.target.quantile if omega is None else omega
        # every run that started counts: one that diverged or stopped is a run that met no ℓmax (+inf)
        prof = load_profile(Store(store, readonly=True), base, min_seeds=1).every_run()
        drawn = prof.experiments[0].draws
        if drawn != base.training.data_draw:   # runs of another draw would certify nothing of this scenario
            raise BadInput(f"{store}: its runs' data was {'drawn per run' if drawn == 'run' else 'fixed'} "
                           f"(data_draw = \"{drawn}\"), but {source} says [training] data_draw = "
                           f"\"{base.training.data_draw}\": profile calibration runs of the scenario as it is "
                           "(`depl profile SCENARIO --first-seed N`)")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            cal, pit = recalibrate(base, prof, omega)
    seeds = sorted({int(s) for e in prof.experiments for s in e.seeds})
    use = calibration_use(cal, base)
    levels = tuple(sorted(set(RELIABILITY_LEVELS) | {round(float(omega), 6)}))
    before = reliability(cal.scores, list(levels), "none")
    after = reliability(cal.scores, list(levels), "conformal") if cal.runs >= 2 else np.full(len(levels), np.nan)
    more = f"profile more seeds past the law's: `depl profile --first-seed {max(seeds[-1], base.fitted_seeds[1]) + 1}`"
    runs = (f"runs ({len(prof.experiments)} experiments, seeds {seeds[0]}..{seeds[-1]}; the law was fitted on seeds "
            f"{base.fitted_seeds[0]}..{base.fitted_seeds[1]}) by `depl calibrate`")
    written = write_calibrated(rebased(text, base.code_dir, out), cal, use, runs, more, out)
    if png is not None:
        law = written.loss_model or "increments"
        with writing("--png", png):
            png.mkdir(parents=True, exist_ok=True)
            plot_reliability({law: cal}, {law: pit}, png / "calibration.png", "new runs")
    unfinished = int(sum(np.isinf(e.losses[:, -1]).sum() for e in prof.experiments))
    return Calibrated(base, source, path, out, tuple(e.label for e in prof.experiments), (seeds[0], seeds[-1]), cal,
                      pit, use, levels, before, after, more, written, png / "calibration.png" if png else None,
                      unfinished)


def rebased(text: str, code_dir: str | None, out: Path) -> str:
    """The scenario's text with its `code_dir` relative to `out`, where it is written: the folder of your code the
    scenario names (`code_dir`, resolved from its own file), not the one beside `out` (a calibrated file written
    into another folder still runs your code; the text as it was where it already names that folder)."""
    if code_dir is None:
        return text
    given = tomllib.loads(text).get("code_dir", ".")
    if isinstance(given, str) and resolved(given, out) == Path(code_dir).resolve():
        return text
    return with_code_dir(text, relative(code_dir, out))


def write_calibrated(text: str, cal, use: bool, runs: str, more: str, out: Path) -> "Scenario":
    """The scenario's text with its [calibration] table replaced, written at `out` (checked to load, with the
    same law, first); the scenario it is."""
    table = {**cal.table(), "use": use}
    comment = [f"[calibration]: {cal.message(runs, more)}.",
               "[calibration]: `depl plan` plans with the calibrated law while use = true; `depl plan --uncalibrated` "
               "(or use = false) with the law as fitted."]
    new = with_calibration(text, toml_dumps({"calibration": table}), comment)
    try:
        written = parse_scenario(tomllib.loads(new), str(out))  # what we write must load, with the same law
    except Exception as e:  # pragma: no cover - a bug, not a user error
        raise Failed(f"the calibrated scenario does not validate: {e}") from None
    same = {k: v for k, v in tomllib.loads(new).items() if k != "calibration"}
    if same != {k: v for k, v in tomllib.loads(text).items() if k != "calibration"}:  # pragma: no cover - a bug
        raise Failed("the calibrated scenario's law differs from the scenario's: not written")
    write_text(out, new)
    return written
