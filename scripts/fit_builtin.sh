#!/usr/bin/env bash
# Profile a built-in scenario under its plans' conditions, fit its loss law, and write the fitted
# scenario back as the built-in — the recipe shared by scripts/example_digits.sh and
# scripts/example_noniid.sh (each says what it profiles).
#
#   scripts/fit_builtin.sh NAME DOCS WORK TARGET OMEGA DEADLINE -- PROFILE-ARGS... < HEADER
#
# NAME: the built-in scenario (src/depl/scenarios/NAME.toml: its clusters, data and training are the
# base; its loss sections are replaced). DOCS: where the fit report and plots go. WORK: the runs store
# (profiling resumes: a killed run continues where it stopped). TARGET/OMEGA/DEADLINE: the [target]
# written. Standard input: the comment block put on top of the fitted built-in. VALIDATE=N: then
# validate the plan on N held-out real runs (DOCS/validate.txt, DOCS/plan-validate.png).
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=$1 DOCS=$2 WORK=$3 TARGET=$4 OMEGA=$5 DEADLINE=$6
shift 6
HEADER=$(cat)
[ "${1:-}" = "--" ] && shift
DEPL=${DEPL:-.venv/bin/depl}
OUT=src/depl/scenarios/$NAME.toml
mkdir -p "$WORK" "$DOCS"
export COLUMNS=200

echo "== 1. profile $NAME: $*"
nice -n 5 "$DEPL" profile "$NAME" --out "$WORK/profile" "$@" 2>/dev/null | tail -1

echo "== 2. fit both loss models, choose by held-out fit"
# --scenario OUT: the base is the built-in as shipped (clusters, data, training), whatever the store names
"$DEPL" fit "$WORK/profile/runs.sqlite" --scenario "$OUT" --out "$DOCS/scenario.toml" --png "$DOCS" \
    --bootstrap 200 --name "$NAME" --omega "$OMEGA" --target-loss "$TARGET" --deadline "$DEADLINE" \
    | tee "$DOCS/fit-report.txt"

echo "== 3. the fitted scenario becomes the built-in $OUT"
{ printf "%s\n\n" "$HEADER"; cat "$DOCS/scenario.toml"; } > "$OUT.new"
mv "$OUT.new" "$OUT"

echo "== 4. plan it"
# exit 3 where the fit's own held-out runs are too few to certify a plan: then the law as fitted (a
# calibration on fresh seeds — scripts/calibrate_*.sh — is the next step)
"$DEPL" plan "$NAME" --out "$DOCS/plan.json" | tee "$DOCS/plan.txt" \
    || "$DEPL" plan "$NAME" --uncalibrated --out "$DOCS/plan.json" | tee "$DOCS/plan.txt"

if [ "${VALIDATE:-0}" -gt 0 ]; then
    echo "== 5. validate the plan for real on $VALIDATE held-out seeds (1000 ..)"
    nice -n 5 "$DEPL" validate "$NAME" "$DOCS/plan.json" --seeds "$VALIDATE" --first-seed 1000 \
        --workers "${VALIDATE_WORKERS:-1}" --out "$WORK/validate" --png "$DOCS/plan-validate.png" 2>&1 \
        | tr '\r' '\n' | grep -v "━" | tee "$DOCS/validate.txt"
fi
