#!/usr/bin/env bash
# build/study --quick (seconds): the sorting study writes report.md and its SVG figures, every SVG
# is well-formed (one <svg> element, closed; xmllint checks it where installed), the report has
# its accuracy table with a row per mixer and form and links every figure; a bad option exits 1.
# Needs build/study (make examples). Prints ok/FAIL lines and the runner's summary line.
set -u
cd "$(dirname "$0")/.."
STUDY=${STUDY:-$PWD/build/study}
# shellcheck source=tests/lib.sh
. tests/lib.sh
start_test "$STUDY" "make examples"

FIGS="embeddings.svg scores_sdpa.svg scores_metric.svg scores_quadratic.svg forms_head.svg forms_model.svg loss.svg"
"$STUDY" --quick --out quick > run.out 2> run.err; rc=$?
missing=""
for f in report.md $FIGS; do [ -s "quick/$f" ] || missing="$missing $f"; done
if [ $rc -eq 0 ] && [ -z "$missing" ]; then ok "study --quick writes report.md and the figures"
else bad "study --quick writes report.md and the figures" "rc $rc, missing:$missing" "$(cat run.out run.err)"; fi

bad_svg=""
for f in $FIGS; do
    [ -s "quick/$f" ] || continue
    if [ "$(grep -c '<svg ' "quick/$f")" != 1 ] || [ "$(tail -1 "quick/$f")" != "</svg>" ] || grep -q 'nan\|inf' "quick/$f"; then
        bad_svg="$bad_svg $f"
    elif command -v xmllint > /dev/null && ! xmllint --noout "quick/$f" 2> /dev/null; then bad_svg="$bad_svg $f"; fi
done
if [ -z "$bad_svg" ]; then ok "every SVG is one closed, well-formed <svg> without NaN or Inf"
else bad "every SVG is well-formed" "bad:$bad_svg" "$(head -c 400 "quick/${bad_svg# }" 2>/dev/null)"; fi

rows=$(grep -cE '^\| (sdpa|metric|quadratic) \| (seed|solvable) \| [0-9]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+% \|' quick/report.md)
links=0
for f in $FIGS; do grep -q "($f)" quick/report.md && links=$((links + 1)); done
if [ "$rows" = 6 ] && [ "$links" = 7 ] && grep -q "Next to the seed's claims" quick/report.md
then ok "report.md: 6 accuracy rows, links to the 7 figures, the seed's claims"
else bad "report.md: 6 accuracy rows, 7 figure links, the seed's claims" "rows $rows, links $links" "$(cat quick/report.md)"; fi

"$STUDY" --epochs 0 > bad.out 2>&1; rc=$?
if [ $rc -eq 1 ] && grep -q -- "--epochs must be >= 1" bad.out; then ok "a bad option exits 1 naming it"
else bad "a bad option exits 1 naming it" "rc $rc" "$(cat bad.out)"; fi
finish
