#!/usr/bin/env bash
# Calibrate a built-in scenario's law on new runs, without refitting it — the recipe shared by
# scripts/calibrate_mnist1d.sh and scripts/calibrate_noniid.sh (each says what it profiles and why):
# profile on seeds the law was not fitted on, `depl calibrate` the built-in on them, plan it at ω 0.8/0.9/0.95.
#
#   scripts/calibrate_builtin.sh NAME DOCS WORK OMEGA -- PROFILE-ARGS...
#
# NAME: the built-in (src/depl/scenarios/NAME.toml, rewritten: its [calibration] and the header lines about
# it). DOCS: where calibration.txt and calibration.png go. WORK: the runs store (profiling resumes).
# OMEGA: the ω calibrated for (the file keeps every score: any ω they reach can be planned).
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=$1 DOCS=$2 WORK=$3 OMEGA=$4
shift 4
[ "${1:-}" = "--" ] && shift
DEPL=${DEPL:-.venv/bin/depl}
OUT=src/depl/scenarios/$NAME.toml
mkdir -p "$WORK" "$DOCS"
export COLUMNS=200

echo "== 1. profile $NAME: $*"
nice -n 5 "$DEPL" profile "$NAME" "$@" --out "$WORK/profile" 2>/dev/null | tail -1


echo "== 2. calibrate the built-in's law on them (not refitted)"
"$DEPL" calibrate "$OUT" "$WORK/profile/runs.sqlite" --out "$OUT.new" --omega "$OMEGA" --png "$DOCS" \
    | tee "$DOCS/calibration.txt"
mv "$OUT.new" "$OUT"

echo "== 3. plan it"
for w in 0.8 0.9 0.95; do
    echo "-- ω = $w: certified at α 0.05 by the runs of the plan's own schedule, then as fitted (--uncalibrated)"
    "$DEPL" plan "$NAME" --omega "$w" --alpha 0.05 | grep -E "^  (K =|cost|[0-9.]+-quantile|calibrated on)" || true
    "$DEPL" plan "$NAME" --omega "$w" --uncalibrated | grep -E "^  (K =|cost|[0-9.]+-quantile)"
done | tee -a "$DOCS/calibration.txt"
