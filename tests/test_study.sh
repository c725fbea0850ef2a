#!/usr/bin/env bash
# build/study --quick (seconds): the sorting study writes report.md and its SVG figures, every SVG
# is well-formed (one <svg> element, closed; xmllint checks it where installed), the report has
# its accuracy table with a row per mixer and form and links every figure; every figure's gnuplot
# script and data are there; with gnuplot installed every PNG is drawn (PNG signature) and linked;
# run where gnuplot cannot be found (PATH without it), the study says so once, draws no PNG, removes
# an older run's and links none; a bad option exits 1.
# Needs build/study (make examples). Prints ok/FAIL lines and the runner's summary line.
set -u
cd "$(dirname "$0")/.."
STUDY=${STUDY:-$PWD/build/study}
SORT=${SORT:-$PWD/build/sort}
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

rows=$(grep -cE '^\| (sdpa|metric|quadratic) \| (seed|solvable|relabeled) \| [0-9]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+% \|' quick/report.md)
links=0
for f in $FIGS; do grep -q "($f)" quick/report.md && links=$((links + 1)); done
if [ "$rows" = 9 ] && [ "$links" = 7 ] && grep -q "Next to the seed's claims" quick/report.md
then ok "report.md: 9 accuracy rows (3 mixers x seed, solvable, relabeled form), links to the 7 figures, the seed's claims"
else bad "report.md: 9 accuracy rows, 7 figure links, the seed's claims" "rows $rows, links $links" "$(cat quick/report.md)"; fi

# the seeds (--quick runs the default 5): the accuracy over them, and each claim per seed, trained and at initialisation
five='[0-9]( [0-9]){4}'
claims=$(grep -cE "^\| (sdpa|metric|quadratic) \| $five \| $five \| $five \| $five \| [01]( [01]){4} \| [01]( [01]){4} \| $five \| $five \|\$" quick/report.md)
seeded=$(grep -cE '^\| (sdpa|metric|quadratic) \| (seed|solvable|relabeled) \| .* \| [0-9.]+ ± [0-9.]+ \| [0-9.]+% ± [0-9.]+ \| \[-?[0-9.]+%, [0-9.]+%\] \|$' quick/report.md)
if [ "$claims" = 3 ] && [ "$seeded" = 9 ] && grep -q '^## The claims over 5 seeds, trained and at initialisation' quick/report.md &&
   [ "$(grep -c ' seed [1-5]  last-epoch' run.out)" = 45 ]
then ok "5 seeds by default: every mixer's accuracy over them with its interval, each claim per seed next to its count at initialisation"
else bad "5 seeds: the accuracy over them and the claims per seed" "claims rows $claims, seeded rows $seeded" "$(grep -A6 'claims over' quick/report.md)"; fi

# the controls: per mixer the counts per seed (mean ± sd), Welch's verdicts and the chance level
cell="$five \([0-9.]+ ± [0-9.]+\)"
controls=$(grep -cE "^\| (sdpa|metric|quadratic) \| $cell \| $cell \| (same|differs) \| [0-9.]+ ± [0-9.]+ \| $cell \| $cell \| (same|differs) \| $cell \| $cell \| $cell \| $cell \|\$" quick/report.md)
if [ "$controls" = 3 ] && grep -q '^## Controls: the same sequences with the tokens renamed' quick/report.md &&
   grep -q 'after training / at initialisation / by chance' quick/report.md
then ok "the controls: the relabeled task's counts, at initialisation, Welch's verdict and chance, per mixer"
else bad "the controls table" "rows $controls" "$(grep -A6 '^## Controls' quick/report.md)"; fi

# --jobs: the seeds run at once give the same numbers as one after another (only the seconds differ)
numbers() { sed -E 's/  [0-9.]+ s$//' "$1" | grep ' seed [0-9]' | sort; }
"$STUDY" --quick --seeds 3 --jobs 1 --out j1 > j1.out 2>&1; rc1=$?
"$STUDY" --quick --seeds 3 --jobs 3 --out j3 > j3.out 2>&1; rc3=$?
# the report without its timings: the header line and the accuracy table's seconds column
strip() { grep -v '^`make study`' "$1" | sed -E 's/^(\| [a-z]+ \| (seed|solvable|relabeled) \|([^|]*\|){5})[^|]*\|/\1 s |/'; }
if [ $rc1 -eq 0 ] && [ $rc3 -eq 0 ] && [ "$(numbers j1.out | wc -l)" = 27 ] && [ "$(numbers j1.out)" = "$(numbers j3.out)" ] &&
   [ "$(strip j1/report.md)" = "$(strip j3/report.md)" ]
then ok "--jobs 3 gives the numbers and claims of --jobs 1"
else bad "--jobs 3 gives the numbers of --jobs 1" "rc $rc1 $rc3" "$(diff <(numbers j1.out) <(numbers j3.out) | head -5)" \
         "$(diff <(strip j1/report.md) <(strip j3/report.md) | head -5)"; fi

STEMS=$(echo "$FIGS" | sed 's/\.svg//g')
missing=""
for f in $STEMS; do [ -s "quick/$f.gp" ] && [ -s "quick/$f.dat" ] || missing="$missing $f"; done
if [ -z "$missing" ]; then ok "every figure has its gnuplot script and data (.gp, .dat)"
else bad "every figure has its gnuplot script and data" "missing:$missing"; fi

check_gnuplot_figures quick run.out run.err $STEMS

# no gnuplot on the PATH: said once, no PNG (an older run's removed), none linked
touch quick/loss.png
PATH=/nonexistent "$STUDY" --quick --out quick > nognu.out 2> nognu.err; rc=$?
n=$(count_pngs quick $STEMS); ls quick/*.png > /dev/null 2>&1 && n="$n (files: $(ls quick/*.png))"
if [ $rc -eq 0 ] && [ "$n" = 0 ] && [ "$(grep -c 'no gnuplot: no PNG' nognu.out nognu.err | awk -F: '{ s += $2 } END { print s }')" = 1 ] &&
   ! grep -q '\.png' quick/report.md && [ -s quick/loss.gp ]
then ok "without gnuplot: said once, no PNG left, none linked, the scripts kept"
else bad "without gnuplot: said once, no PNG left, none linked" "rc $rc, PNG: $n" "$(cat nognu.out nognu.err | tail -3)"; fi

# --precision bf16: the products in bf16, said in the report; the numbers move off fp32's
"$STUDY" --quick --seeds 1 --precision bf16 --out bf16 > bf16.out 2>&1; rc=$?
"$STUDY" --quick --seeds 1 --out fp32 > fp32.out 2>&1
if [ $rc -eq 0 ] && grep -q 'bf16 products' bf16/report.md && grep -q 'fp32 products' fp32/report.md &&
   [ "$(grep ' seed 1  last-epoch' bf16.out | sed -E 's/  [0-9.]+ s$//')" != "$(grep ' seed 1  last-epoch' fp32.out | sed -E 's/  [0-9.]+ s$//')" ]
then ok "--precision bf16 trains every run with bf16 products (the report says so, the losses differ from fp32's)"
else bad "--precision bf16" "rc $rc" "$(tail -3 bf16.out)"; fi
"$SORT" --steps 20 --precision bf16 > sort.out 2>&1; rc=$?
"$SORT" --steps 20 --precision fp16 > sortbad.out 2>&1; rcb=$?
if [ $rc -eq 0 ] && grep -q 'bf16$' sort.out && grep -q 'token accuracy' sort.out && [ $rcb -ne 0 ] &&
   grep -q 'unknown precision "fp16"' sortbad.out
then ok "build/sort --precision bf16 trains; an unknown precision is refused naming the choices"
else bad "build/sort --precision" "rc $rc, bad $rcb" "$(tail -n 2 sort.out sortbad.out)"; fi

"$STUDY" --epochs 0 > bad.out 2>&1; rc=$?
if [ $rc -eq 1 ] && grep -q -- "--epochs must be >= 1" bad.out; then ok "a bad option exits 1 naming it"
else bad "a bad option exits 1 naming it" "rc $rc" "$(cat bad.out)"; fi
finish
