#!/usr/bin/env bash
# build/study_text --quick (seconds): the next-token study on a small text this test writes. report.md
# has a row per mixer (sdpa, metric, quadratic, pool, identity) with the losses as mean ± sd and
# their 95% intervals, links its figures, has a sample per mixer from the prompt and the metric heads'
# table; the SVG figures are well-formed (xmllint where installed) with one panel per metric head;
# --jobs 1 and --jobs 2 give the same numbers and samples; a prompt character outside the text's
# vocabulary is left out with a note; with gnuplot both figures are PNG too, without it none; a
# tokenizer file works; bad options and missing files exit 1
# with a message. Needs build/study_text (make examples). Prints ok/FAIL lines and the summary line.
set -u
cd "$(dirname "$0")/.."
STUDY=${STUDY:-$PWD/build/study_text}
# shellcheck source=tests/lib.sh
. tests/lib.sh
start_test "$STUDY" "make build/study_text"

# about 8 KB of text from a fixed word list (the prompt's characters all occur in it)
awk 'BEGIN { split("the meaning of life is a sea king queen lord and my good sir thou shalt not fear this night we go home", w, " ");
             s = 7; for (l = 0; l < 160; l++) { line = ""; for (k = 0; k < 9; k++) { s = (s * 1103515245 + 12345) % 2147483648;
             line = line (k ? " " : "") w[1 + int(s / 65536) % 24] } print (l % 4 ? line "," : "The meaning of life is " line ".") } }' > text.txt
size=$(wc -c < text.txt)
[ "$size" -gt 4000 ] || bad "the generated text has a few KB" "$size bytes"

"$STUDY" --data text.txt --quick --seeds 2 --jobs 1 --threads 1 --out j1 > j1.out 2> j1.err; rc=$?
missing=""
for f in report.md loss.svg metric_heads.svg metric_heads_init.svg loss.gp loss.dat metric_heads.gp metric_heads.dat metric_heads_init.gp; do [ -s "j1/$f" ] || missing="$missing $f"; done
if [ $rc -eq 0 ] && [ -z "$missing" ]; then ok "study_text --quick --seeds 2 writes report.md, the figures and their gnuplot files"
else bad "study_text --quick writes report.md and the figures" "rc $rc, missing:$missing" "$(cat j1.out j1.err)"; fi

bad_svg=""
for f in loss.svg metric_heads.svg metric_heads_init.svg; do
    [ -s "j1/$f" ] || continue
    if [ "$(grep -c '<svg ' "j1/$f")" != 1 ] || [ "$(tail -1 "j1/$f")" != "</svg>" ] || grep -q 'nan\|inf' "j1/$f"; then
        bad_svg="$bad_svg $f"
    elif command -v xmllint > /dev/null && ! xmllint --noout "j1/$f" 2> /dev/null; then bad_svg="$bad_svg $f"; fi
done
# --quick: 1 layer of 2 heads; the loss chart: a line and a band per mixer
panels=$(cat j1/metric_heads.svg j1/metric_heads_init.svg | grep -c '>layer 0 head [01]<')
lines=$(grep -c '<polyline' j1/loss.svg); bands=$(grep -c '<polygon' j1/loss.svg)
if [ -z "$bad_svg" ] && [ "$panels" = 4 ] && [ "$lines" = 5 ] && [ "$bands" = 5 ]
then ok "the SVGs are well-formed: a panel per metric head, a mean line and a seed band per mixer"
else bad "the SVGs are well-formed with their panels, lines and bands" "bad:$bad_svg panels $panels lines $lines bands $bands"; fi

num='[0-9]+\.[0-9]+'
rows=$(grep -cE "^\| (sdpa|metric|quadratic|pool|identity) \| [0-9]+ \| $num ± $num \| \[-?$num, $num\] \| $num ± $num \| \[-?$num, $num\] \| $num ± $num \| (-|no|yes, lower|yes, higher) \| $num \|\$" j1/report.md)
links=0
for f in loss metric_heads metric_heads_init; do grep -q "($f.svg)" j1/report.md && links=$((links + 1)); done
# what training changed in the heads, next to two initialisations (1 layer)
changed=$(grep -cE "^\| 0 \| $num ± $num \| $num ± $num \| $num ± $num \|\$" j1/report.md)
if [ "$rows" = 5 ] && [ "$links" = 3 ] && [ "$changed" = 1 ] && grep -q "^## Losses over 2 seeds" j1/report.md && grep -q "Next to the seed's claims" j1/report.md &&
   [ "$(grep -c '^| 0 | [01] | [0-9]* | [0-9]* | [0-9]* |$' j1/report.md)" = 2 ]
then ok "report.md: a row per mixer with mean ± sd and 95% intervals, the figures linked, the heads' tables (eigenvalues; trained vs initialisation vs two initialisations), the claims"
else bad "report.md: 5 rows with ± and intervals, 3 figure links, the heads' tables" "rows $rows, links $links, change rows $changed" "$(cat j1/report.md)"; fi

samples=$(awk '/^```text$/ { getline; if (index($0, "The meaning of life is") == 1 && length($0) > 22) n++ } END { print n + 0 }' j1/report.md)
if [ "$samples" = 5 ] && grep -q 'temperature 0.8, no top-k, the sampler seeded with 1' j1/report.md
then ok "a sample per mixer continues the prompt \"The meaning of life is\", the sampler stated"
else bad "a sample per mixer continues the prompt" "samples $samples" "$(sed -n '/## Samples/,$p' j1/report.md)"; fi

# one thread per run: the seeds trained one after the other or side by side (the tiny models gain
# nothing from threads, and lose much on a machine busy with other tests)
"$STUDY" --data text.txt --quick --seeds 2 --jobs 2 --threads 1 --out j2 > j2.out 2>&1; rc=$?
table() { grep -E '^\| (sdpa|metric|quadratic|pool|identity) \|' "$1" | cut -d'|' -f1-9; sed -n '/^## Samples/,/^## Next/p' "$1"; }
if [ $rc -eq 0 ] && [ -n "$(table j1/report.md)" ] && [ "$(table j1/report.md)" = "$(table j2/report.md)" ] &&
   [ "$(grep -c ' seed [12]  train loss' j2.out)" = 10 ]
then ok "--jobs 2 gives the same numbers and samples as --jobs 1"
else bad "--jobs 2 gives the same numbers as --jobs 1" "rc $rc" "$(diff <(table j1/report.md) <(table j2/report.md) | head)"; fi

check_gnuplot_figures j1 j1.out j1.err loss metric_heads metric_heads_init

# without gnuplot on the PATH; a prompt with characters the text lacks
PATH=/nonexistent "$STUDY" --data text.txt --quick --seeds 1 --threads 1 --sample 5 --prompt "The meaning of life is 42?" --out p > p.out 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q 'characters "42?" do not occur' p.out && grep -q 'characters "42?" do not occur in the text' p/report.md &&
   grep -q 'cannot tell (1 seed)' p/report.md && grep -q '^| 0 | [0-9.]* ± [0-9.]* | - (one seed) | - |$' p/report.md
then ok "a prompt's characters outside the vocabulary are left out with a note; one seed cannot be tested"
else bad "a prompt's characters outside the vocabulary are left out with a note" "rc $rc" "$(cat p.out)"; fi
if [ $rc -eq 0 ] && [ "$(count_pngs p loss metric_heads metric_heads_init)" = 0 ] && [ "$(grep -c 'no gnuplot: no PNG' p.out)" = 1 ] && ! grep -q '\.png' p/report.md && [ -s p/loss.gp ]
then ok "without gnuplot: said once, no PNG, none linked, the scripts kept"
else bad "without gnuplot: said once, no PNG, none linked" "rc $rc" "$(tail -3 p.out)"; fi

"$STUDY" --data text.txt --quick --seeds 1 --threads 1 --sample 5 --tokenizer bytes --out b > b.out 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q '(a tokenizer file, vocabulary 256)' b/report.md
then ok "--tokenizer bytes: the 256 byte ids"
else bad "--tokenizer bytes" "rc $rc" "$(cat b.out)" "$(head -5 b/report.md 2>/dev/null)"; fi

expect_error "no --data" "no text given: --data FILE" "$STUDY" --quick
expect_error "a missing file" 'cannot open "nothere.txt"' "$STUDY" --data nothere.txt --quick
expect_error "--steps 0" "--steps must be >= 1" "$STUDY" --data text.txt --steps 0
expect_error "an unknown option" 'unknown option "--bogus"' "$STUDY" --data text.txt --bogus
expect_error "a missing GPT-2 directory" "encoder.json" "$STUDY" --data text.txt --quick --gpt2 nodir
expect_error "a prompt without one of the text's characters" "none of the characters of --prompt" "$STUDY" --data text.txt --quick --prompt "42?"
expect_error "a text too short for --seq-len" "is too short" "$STUDY" --data text.txt --quick --seq-len 4000
finish
