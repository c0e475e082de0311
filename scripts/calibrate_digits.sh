#!/usr/bin/env bash
# The built-in digits-small calibrated for its certificate, by one command: profile its two versions (all the
# data, 2 nodes, 14 epochs) on 64 seeds from 300000 — each run on its own train/test split and node split
# ([training] data_draw = "run") —, then `depl calibrate` the built-in on them: the law unchanged, its
# [calibration] table with each experiment's own runs, which certify a plan of that experiment's first K
# epochs with confidence 1 − α (docs/certificate.md, "The planner's own certificate").
#
#   scripts/calibrate_digits.sh [WORK]      # WORK: the runs store (default /tmp/depl-calib-digits)
#
# Resumes: a killed profile continues where it stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-64}           # new seeds per experiment
FIRST=${FIRST:-300000}       # seeds no earlier step used (docs/certificate.md lists them)
WORKERS=${WORKERS:-2}
scripts/calibrate_builtin.sh digits-small docs/example-digits "${1:-/tmp/depl-calib-digits}" "${OMEGA:-0.9}" -- \
    --epochs 14 --seeds "$SEEDS" --first-seed "$FIRST" --fractions 1 --nodes 2 \
    --version full --version pruned-0.5 --workers "$WORKERS"
