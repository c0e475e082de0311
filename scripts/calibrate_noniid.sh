#!/usr/bin/env bash
# The built-in mnist1d-noniid calibrated for its certificate, by one command: profile full, pruned-0.5 and
# the switch full → pruned-0.5 after 3 epochs (all the data, 4 nodes, 14 epochs) on 64 seeds from 300000 —
# each run on its own draw of the data and of its Dirichlet partition ([training] data_draw = "run") —,
# then `depl calibrate` the built-in on them: the law unchanged, its [calibration] table with each
# experiment's own runs, which certify a plan of that experiment's first K epochs with confidence 1 − α
# (docs/certificate.md, "The planner's own certificate").
#
#   scripts/calibrate_noniid.sh [WORK]      # WORK: the runs store (default /tmp/depl-calib-noniid)
#
# Resumes: a killed profile continues where it stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-64}           # new seeds per experiment
FIRST=${FIRST:-300000}       # seeds no earlier step used (docs/certificate.md lists them)
WORKERS=${WORKERS:-2}
scripts/calibrate_builtin.sh mnist1d-noniid docs/example-noniid "${1:-/tmp/depl-calib-noniid}" "${OMEGA:-0.9}" -- \
    --epochs 14 --seeds "$SEEDS" --first-seed "$FIRST" --fractions 1 --nodes 4 \
    --version full --version pruned-0.5 --switch full:pruned-0.5:3 --workers "$WORKERS"
