#!/usr/bin/env bash
# The built-in mnist1d-small calibrated on new runs, by one command: profile the 12 experiments of
# scripts/example_mnist1d.sh step 1 (the same flags) on seeds 20..31, which its law was not fitted on
# (fitted_seeds = [0, 19]), then `depl calibrate` the built-in on them — the law unchanged, only its
# [calibration] table and the header lines about it written (docs/fitting.md, "The built-in tasks").
#
#   scripts/calibrate_mnist1d.sh [WORK]     # WORK: the runs store (default /tmp/depl-calib-mnist1d)
#
# Resumes: a killed profile continues where it stopped. Measured here (2 shared cores, --workers 1):
# profiling ≈ 15–25 min of one core; the calibration itself a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${1:-/tmp/depl-calib-mnist1d}
DOCS=docs/example-mnist1d
OUT=src/depl/scenarios/mnist1d-small.toml
SEEDS=${SEEDS:-12}           # new seeds per experiment
FIRST=${FIRST:-20}           # the first of them: past the law's fitted_seeds
OMEGA=${OMEGA:-0.9}          # ω (the scores certify any ω they reach)
WORKERS=${WORKERS:-1}
DEPL=${DEPL:-.venv/bin/depl}
mkdir -p "$WORK" "$DOCS"
export COLUMNS=200

echo "== 1. profile mnist1d-small as scripts/example_mnist1d.sh does, on seeds $FIRST..$((FIRST + SEEDS - 1))"
nice -n 5 "$DEPL" profile mnist1d-small --epochs 20 --seeds "$SEEDS" --first-seed "$FIRST" --fractions 1,0.5,0.25 \
    --nodes 2 --switch full:pruned-0.5:8 --switch pruned-0.5:pruned-0.75:8 --switch full:pruned-0.75:8 \
    --workers "$WORKERS" --out "$WORK/profile" 2>/dev/null | tail -1

echo "== 2. calibrate the built-in's law on them (not refitted)"
"$DEPL" calibrate "$OUT" "$WORK/profile/runs.sqlite" --out "$OUT.new" --omega "$OMEGA" --png "$DOCS" \
    | tee "$DOCS/calibration.txt"
mv "$OUT.new" "$OUT"

echo "== 3. plan it"
for w in 0.8 0.9 0.95; do
    echo "-- ω = $w: calibrated, then as fitted (--uncalibrated)"
    "$DEPL" plan mnist1d-small --quantile "$w" | grep -E "^  (K =|cost|[0-9.]+-quantile)"
    "$DEPL" plan mnist1d-small --quantile "$w" --uncalibrated | grep -E "^  (K =|cost|[0-9.]+-quantile)"
done | tee -a "$DOCS/calibration.txt"
