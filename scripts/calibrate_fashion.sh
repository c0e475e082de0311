#!/usr/bin/env bash
# The built-in fashion-small calibrated for its certificate, by one command: profile the three versions
# (all the data, 2 nodes, 12 epochs) on 64 seeds from 4200000 — each run its own 2,000 images
# ([training] data_draw = "run") —, then `depl calibrate` the built-in on them: the law unchanged, its
# [calibration] table with each experiment's own runs, which certify a plan of that experiment's first
# K epochs with confidence 1 − α (docs/certificate.md, "The planner's own certificate"). Three experiments:
# each is a chain tested at α/3, and 64 runs per chain certify ω 0.9 at α 0.05.
#
#   scripts/calibrate_fashion.sh [WORK]     # WORK: the runs store (default /tmp/depl-calib-fashion)
#
# Resumes: a killed profile continues where it stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-64}           # new seeds per experiment
FIRST=${FIRST:-4200000}      # seeds no earlier step used (docs/certificate.md lists them)
WORKERS=${WORKERS:-2}
scripts/calibrate_builtin.sh fashion-small docs/example-fashion "${1:-/tmp/depl-calib-fashion}" "${OMEGA:-0.9}" -- \
    --epochs 12 --seeds "$SEEDS" --first-seed "$FIRST" --fractions 1 --nodes 2 \
    --version pruned-0.75 --version pruned-0.5 --version full --workers "$WORKERS" --seed-batch 16 --threads 1
