#!/usr/bin/env bash
# The built-in mnist1d-small calibrated on new runs, by one command: profile the 12 experiments of
# scripts/example_mnist1d.sh step 1 (the same flags) on seeds 20..31, which its law was not fitted on
# (fitted_seeds = [0, 19]), then `depl calibrate` the built-in on them — the law unchanged, only its
# [calibration] table and the header lines about it written (docs/fitting-results.md, "The built-in tasks").
#
#   scripts/calibrate_mnist1d.sh [WORK]     # WORK: the runs store (default /tmp/depl-calib-mnist1d)
#
# Resumes: a killed profile continues where it stopped. Measured here (2 shared cores, --workers 1):
# profiling ≈ 15–25 min of one core; the calibration itself a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-12}           # new seeds per experiment
FIRST=${FIRST:-20}           # the first of them: past the law's fitted_seeds
WORKERS=${WORKERS:-1}
scripts/calibrate_builtin.sh mnist1d-small docs/example-mnist1d "${1:-/tmp/depl-calib-mnist1d}" "${OMEGA:-0.9}" -- \
    --epochs 20 --seeds "$SEEDS" --first-seed "$FIRST" --fractions 1,0.5,0.25 --nodes 2 \
    --switch full:pruned-0.5:8 --switch pruned-0.5:pruned-0.75:8 --switch full:pruned-0.75:8 --workers "$WORKERS"
