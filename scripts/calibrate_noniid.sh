#!/usr/bin/env bash
# The built-in mnist1d-noniid calibrated on new runs shaped like its plans, by one command: profile its
# versions at data fractions 1/0.5 and the switch full → pruned-0.5 after 1, 2, 3 and 6 epochs (the planners
# switch early: the law gives every switch epoch one distribution, the runs do not) on seeds 16..67, which its
# law was not fitted on (fitted_seeds = [0, 11]), then `depl calibrate` the built-in on them — the law
# unchanged; its [calibration] table with every experiment's own scores ([[calibration.experiments]]), so
# that a plan shaped like an experiment is certified by that experiment's 52 runs (docs/fitting.md,
# "Calibration by the plan's own kind of runs").
#
#   scripts/calibrate_noniid.sh [WORK]      # WORK: the runs store (default /tmp/depl-calib-noniid)
#
# Resumes: a killed profile continues where it stopped. Measured here (2 shared cores): 8 experiments × 52
# seeds × 14 epochs = 5,824 seed-epochs, about 10 min; the calibration itself a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-52}           # new seeds per experiment
FIRST=${FIRST:-16}           # the first of them: past the law's fitted_seeds and its first calibration's 12..15
scripts/calibrate_builtin.sh mnist1d-noniid docs/example-noniid "${1:-/tmp/depl-calib-noniid}" "${OMEGA:-0.9}" -- \
    --epochs 14 --seeds "$SEEDS" --first-seed "$FIRST" --fractions 1,0.5 --nodes 4 \
    --switch full:pruned-0.5:1 --switch full:pruned-0.5:2 --switch full:pruned-0.5:3 --switch full:pruned-0.5:6
