"""Every confidence of a verdict is the plan's, the scenario's or a command's α (depl.certificate.alpha_or_default),
never a literal: outside depl/certificate, no 0.95, 0.05, 0.975 or 0.025 in code and no "95 %" in a message, but for
the places named below, where such a number is something else (a percentile, an ω, a step, a bar width)."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "depl"
NUMBER = re.compile(r"(?<![\w.])0?\.(95|05|975|025)(?![\d])")   # 0.95, .05, 0.975, 0.025, not 0.955 or 10.05
WORDS = re.compile(r"(?<![\d.])(95|97\.5|5)\s?%")   # a confidence in words: "95 %", "95%", "5 %"

# (file, the line as written, stripped) -> what the number is there
NOT_CONFIDENCES = {
    ("fit/calibrate.py", "LEVELS = np.round(np.arange(0.05, 1.0, 0.05), 2)"):
        "the calibration's quantile levels 0.05, 0.10, …, 0.95",
    ("workflows/fitting.py", "RELIABILITY_LEVELS = (0.5, 0.8, 0.9, 0.95)"): "the reliability diagram's ω levels",
    ("cli/coverage.py", 'fail(f"{flag} {text!r}: give numbers separated by commas, e.g. 0.8,0.9,0.95")'):
        "an example of --omegas",
    ("cli/coverage.py", 'omegas: str = typer.Option("0.8,0.9,0.95", "--omegas", help="target quantiles ω, '
                        'comma-separated"),'): "the ω of the coverage table",
    ("experiments/coverage.py", "DEFAULT_OMEGAS = (0.8, 0.9, 0.95)"): "the ω of the coverage table",
    ("experiments/variants.py", '"family": "t", "params": {"df": 4.0, "loc": 0.2 + 0.6 * step, "scale": 0.05 + '
                                '0.1 * step}}}))'): "a variant's jump law",
    ("planners/best_exp.py", "step = 0.05 * max(l0 - lmax, abs(lmax), tiny)"): "a search step",
    ("report/figures.py", "ax.bar(np.arange(len(ts)) + (j - 1) * width, h, width * 0.95, bottom=bottom,"):
        "a bar's width",
    ("dist.py", ">>> round(float(d.quantile(0.975)), 2)   # N(0, 2): 1.96·√2 = 2.77"): "a quantile in a doctest",
    ("loss/calibrated.py", "with n ≥ ⌈ω/(1−ω)⌉ scores (9 for ω = 0.9, 19 for 0.95), and below that the"):
        "an ω in a docstring",
}


def confidence_literals() -> list[tuple[str, int, str]]:
    """(file, line, text) of each line outside depl/certificate with a number or words that read as a confidence
    (in code, a message, a docstring or a comment alike), but for NOT_CONFIDENCES."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("certificate/"):
            continue
        for row, line in enumerate(path.read_text().splitlines(), 1):
            line = line.strip()
            if (NUMBER.search(line) or WORDS.search(line)) and (rel, line) not in NOT_CONFIDENCES:
                found.append((rel, row, line))
    return found


def test_no_confidence_is_a_literal_outside_the_certificate():
    found = confidence_literals()
    assert not found, "a confidence written as a literal (take α from the plan, the scenario or --alpha through " \
        "depl.certificate.alpha_or_default):\n" + "\n".join(f"src/depl/{f}:{n}: {t}" for f, n, t in found)


def test_every_exception_still_exists():
    """An exception whose line changed or went away is dropped, so the list cannot hide a new literal."""
    for rel, line in NOT_CONFIDENCES:
        assert line in (x.strip() for x in (SRC / rel).read_text().splitlines()), (rel, line)
