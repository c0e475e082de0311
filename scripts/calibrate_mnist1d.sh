#!/usr/bin/env bash
# The built-in mnist1d-small calibrated for its certificate, by one command: profile the three versions
# (all the data, 2 nodes, 20 epochs) on 64 seeds from 300000 — each run on its own draw of the data
# ([training] data_draw = "run") —, then `depl calibrate` the built-in on them: the law unchanged, its
# [calibration] table with each experiment's own runs, which certify a plan of that experiment's first
# K epochs with confidence 1 − α (docs/certificate.md, "The planner's own certificate"). Three experiments,
# not the fit's twelve: each is a chain tested at α/E, and 64 runs per chain certify ω 0.9 at α 0.05.
#
#   scripts/calibrate_mnist1d.sh [WORK]     # WORK: the runs store (default /tmp/depl-calib-mnist1d)
#
# Resumes: a killed profile continues where it stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-64}           # new seeds per experiment
FIRST=${FIRST:-300000}       # seeds no earlier step used (docs/certificate.md lists them)
WORKERS=${WORKERS:-2}
scripts/calibrate_builtin.sh mnist1d-small docs/example-mnist1d "${1:-/tmp/depl-calib-mnist1d}" "${OMEGA:-0.9}" -- \
    --epochs 20 --seeds "$SEEDS" --first-seed "$FIRST" --fractions 1 --nodes 2 \
    --version pruned-0.75 --version pruned-0.5 --version full --workers "$WORKERS"
