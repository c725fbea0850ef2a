#!/usr/bin/env bash
# The ablation study (examples/ablate.c) end to end with a tiny budget (seconds): a row
# per model in the table, the CSV and the Markdown; every model trains to finite losses; the CSV
# parses; the loss curves are drawn; a model that cannot be built or diverges is reported in its
# row while the other runs go on; bad options exit 1 with a message naming them.
# Needs build/ablate (make examples). Prints ok/FAIL lines and the runner's summary line.
set -u
cd "$(dirname "$0")/.."
ABLATE=${ABLATE:-$PWD/build/ablate}
HEADER=$PWD/metaformer.h
# shellcheck source=tests/lib.sh
. tests/lib.sh
start_test "$ABLATE" "make examples"

# every model: the library's mixers in their order, each followed by its variants (compressive after
# relative: the VARIANT rows of MF_MODEL_FIELDS); ablate --help lists them from the library
ALL=$("$ABLATE" --help 2>&1 | sed -n 's/^models: \(.*\) (compressive:.*/\1/p' | sed 's/, / /g')
if [ -n "$ALL" ] && [ "$(echo "$ALL" | tr ' ' '\n' | grep -vx compressive | tr '\n' ' ')" = "$(library_mixers "$HEADER" | tr '\n' ' ')" ] &&
   echo " $ALL " | grep -q ' relative compressive '
then ok "its models: the library's mixers in their order, compressive after relative"
else bad "its models: the library's mixers in their order" "models: $ALL" "rows: $(library_mixers "$HEADER" | tr '\n' ' ')"; fi
TINY=(--steps 12 --batch 8 --d-model 16 --heads 2 --layers 1 --d-ff 32 --eval-batches 2)

# CSV -> one line per record, fields separated by tabs (quoted fields may hold commas);
# "BAD" for a record with an unbalanced quote
csv_fields() {
    awk '{ out = ""; f = ""; q = 0
           for (i = 1; i <= length($0); i++) {
               c = substr($0, i, 1)
               if (c == "\"") q = !q
               else if (c == "," && !q) { out = out f "\t"; f = "" }
               else f = f c
           }
           print (q ? "BAD" : out f) }' "$1"
}
is_number() { awk -v v="$1" 'BEGIN { exit !(v ~ /^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$/) }'; }

# 1. the sorter, every model
"$ABLATE" "${TINY[@]}" --out ab > all.out 2> all.err; rc=$?
if [ $rc -eq 0 ] && [ -s ab.csv ] && [ -s ab.md ] && [ -s ab_curves.csv ] && [ -s ab.svg ]
then ok "the sorter ablation of all 11 models runs and writes ab.csv, ab.md, ab_curves.csv, ab.svg"
else bad "the sorter ablation of all 11 models runs and writes its files" "rc $rc" "$(cat all.out all.err)"; fi

csv_fields ab.csv > ab.tsv
header=$(head -1 ab.tsv)
if [ "$header" = "$(printf 'model\tparams\ttrain_loss\tvalid_loss\taccuracy_pct\ttokens_per_s\tpeak_rss_mb\twall_s\tstep\tstatus')" ] &&
   awk -F '\t' 'NR > 1 && NF != 10 { exit 1 }' ab.tsv && ! grep -q '^BAD$' ab.tsv
then ok "the CSV parses: 10 columns in the header and in every row"
else bad "the CSV parses: 10 columns in the header and in every row" "$(cat ab.csv)"; fi
if [ "$(tail -n +2 ab.tsv | cut -f1 | tr '\n' ' ')" = "$ALL " ]
then ok "a CSV row per model, in the table's order"
else bad "a CSV row per model, in the table's order" "$(cut -f1 ab.tsv)"; fi
md_rows=$(grep -c '^| [a-z_]* *| ' ab.md)
out_rows=$(grep -c '^| [a-z_]* *| ' all.out)
if [ "$md_rows" -eq 12 ] && [ "$out_rows" -eq 12 ] && grep -q '!\[loss curves\](ab.svg)' ab.md &&
   grep -q '^Command: `.*ablate ' ab.md
then ok "the Markdown table (file and stdout): a header and a row per model, the command and the plot"
else bad "the Markdown table: a header and a row per model" "md $md_rows, stdout $out_rows" "$(cat ab.md)"; fi

trained=""
for model in $ALL; do
    row=$(awk -F '\t' -v m="$model" '$1 == m' ab.tsv)
    status=$(printf '%s' "$row" | cut -f10)
    IFS=$'\t' read -r _ params train valid acc toks rss wall step _ <<< "$row"
    if [ "${status%%,*}" = ok ] && is_number "$params" && is_number "$train" && is_number "$valid" && is_number "$acc" &&
       is_number "$toks" && is_number "$rss" && is_number "$wall" && [ "$step" = 12 ] &&
       awk -v t="$train" -v v="$valid" -v a="$acc" 'BEGIN { exit !(t > 0 && v > 0 && t < 5 && v < 5 && a >= 0 && a <= 100) }' &&
       [ "$(awk -F, -v m="$model" '$1 == m' ab_curves.csv | wc -l)" -eq 12 ]
    then ok "$model: trains 12 steps with finite losses, accuracy, speed, memory, and 12 curve points"; trained="$trained $model"
    else bad "$model: trains 12 steps with finite losses" "$row" "$(grep -A3 "$model" all.err | head -5)"; fi
done
polylines=$(grep -c '<polyline' ab.svg)
if head -c 4 ab.svg | grep -q '<svg' && tail -1 ab.svg | grep -q '</svg>' && [ "$polylines" -eq "$(echo $trained | wc -w)" ] &&
   for m in $trained; do grep -q ">$m</text>" ab.svg || exit 1; done
then ok "the SVG plot: axes, a polyline and a legend entry per trained model"
else bad "the SVG plot: a polyline and a legend entry per trained model" "$polylines polylines for:$trained"; fi
if grep -q "wrote ab.md, ab.csv, ab_curves.csv, ab.svg" all.out; then ok "the file names are printed at the end"
else bad "the file names are printed at the end" "$(tail -3 all.out)"; fi
if command -v gnuplot > /dev/null 2>&1; then
    if [ "$(head -c 4 ab.png | tail -c 3)" = PNG ] && grep -q "ab.svg, ab.png" all.out; then ok "gnuplot is installed: the PNG plot too"
    else bad "gnuplot is installed: the PNG plot too" "$(tail -1 all.out)"; fi
fi

# 2. a model that cannot be built is reported in its row; the others go on
"$ABLATE" "${TINY[@]}" --heads 3 --models sdpa,pool,identity --out heads > heads.out 2>&1; rc=$?
csv_fields heads.csv > heads.tsv
if [ $rc -eq 0 ] && awk -F '\t' '$1 == "sdpa" && $10 ~ /^cannot build: .*not divisible by n_heads 3/ && $3 == ""' heads.tsv | grep -q . &&
   [ "$(awk -F '\t' '($1 == "pool" || $1 == "identity") && $10 == "ok"' heads.tsv | wc -l)" -eq 2 ]
then ok "a model that cannot be built: its row says why, the other runs go on"
else bad "a model that cannot be built: its row says why, the other runs go on" "rc $rc" "$(cat heads.out)"; fi

# 3. a diverging run (NaN/Inf loss or gradient norm) is reported with its step; every run is attempted
"$ABLATE" "${TINY[@]}" --lr 1e30 --models sdpa,pool --out div > div.out 2>&1; rc=$?
csv_fields div.csv > div.tsv
if [ $rc -eq 0 ] && [ "$(awk -F '\t' 'NR > 1 && $10 ~ /^diverged at step [0-9]+ \((loss|gradient norm) (NaN|[-+]Inf)\)$/ && $9 >= 1' div.tsv | wc -l)" -eq 2 ] &&
   [ -s div.svg ]
then ok "diverging runs: each row says at which step, and the table and plot are still written"
else bad "diverging runs: each row says at which step" "rc $rc" "$(cat div.out)"; fi

# 3b. the mixers' own fields and the precision reach the runs, and the report says so; a bad value is refused
"$ABLATE" "${TINY[@]}" --models metric,pool --metric-form softmax_tril --pool-size 5 --precision bf16 --out fields \
    > fields.out 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q "; the mixers. fields: mem-len [0-9]*, c-mem-len [0-9]*, metric-form softmax_tril, pool-size 5; bf16 products (--precision)" fields.md &&
   [ "$(csv_fields fields.csv | awk -F '\t' 'NR > 1 && $10 == "ok"' | wc -l)" -eq 2 ]
then ok "--metric-form, --pool-size and --precision: both runs train, the report names the settings"
else bad "--metric-form, --pool-size, --precision" "rc $rc" "$(tail -n 5 fields.out)" "$(sed -n 3p fields.md 2>/dev/null)"; fi
expect_error "--metric-form of another name" "unknown --metric-form" "$ABLATE" --metric-form cosine

# 4. a text file: bits per character, the memory models on the sequential loader
awk 'BEGIN { srand(5); split("the king and queen of a land far away spoke to the people who listened", w, " ");
             for (i = 0; i < 3000; i++) printf "%s%s", w[int(rand() * 15) + 1], (i % 12 == 11 ? ".\n" : " ") }' > text.txt
"$ABLATE" text.txt "${TINY[@]}" --seq-len 16 --models sdpa,relative,compressive,pool --out txt > txt.out 2>&1; rc=$?
csv_fields txt.csv > txt.tsv
if [ $rc -eq 0 ] && [ "$(sed -n 1p txt.tsv | cut -f5)" = bits_per_char ] &&
   awk -F '\t' '$1 == "sdpa" || $1 == "pool" { n++; if ($10 != "ok" || !($4 > 0) || $5 - $4 / log(2) > 1e-3 || $4 / log(2) - $5 > 1e-3) bad = 1 }
                END { exit bad || n != 2 }' txt.tsv
then ok "a text file: validation loss and bits per character (= loss / ln 2) per model"
else bad "a text file: validation loss and bits per character" "rc $rc" "$(cat txt.out)"; fi
for model in relative compressive; do
    status=$(awk -F '\t' -v m="$model" '$1 == m { print $10 }' txt.tsv)
    if [ "${status%%,*}" = ok ] && { [ $model = relative ] || printf '%s' "$status" | grep -q 'reconstruction loss [0-9.]*$'; }
    then ok "a text file: $model trains on the sequential loader${status#ok}"
    else bad "a text file: $model trains on the sequential loader" "$status" "$(cat txt.out)"; fi
done

# 4b. --seed-configs: each model also in its seed's configuration (row MODEL/seed, right after MODEL)
"$ABLATE" text.txt "${TINY[@]}" --seq-len 16 --models sdpa,relative --seed-configs --out seed > seed.out 2>&1; rc=$?
csv_fields seed.csv > seed.tsv
if [ $rc -eq 0 ] && [ "$(tail -n +2 seed.tsv | cut -f1 | tr '\n' ' ')" = "sdpa sdpa/seed relative relative/seed " ] &&
   awk -F '\t' 'NR > 1 && $10 !~ /^ok/ { exit 1 }' seed.tsv &&
   awk -F '\t' '$1 == "sdpa" { a = $2 } $1 == "sdpa/seed" { b = $2 } END { exit !(b > 0 && a - b == 4 * 16 * 1) }' seed.tsv &&
   grep -q 'Rows MODEL/seed: each model in its seed' seed.md && grep -q 'relative, compressive: none' seed.md
then ok "--seed-configs: MODEL and MODEL/seed rows; sdpa/seed is the MetaFormer baseline without its 4 biases of 16"
else bad "--seed-configs: MODEL and MODEL/seed rows" "rc $rc" "$(cat seed.out)"; fi

# 4c. --seeds: every model several times; the rows' mean, sd and 95% interval, the runs one by one
# (seed 1's run is the run of --seed 1 alone, to the digit), the ranking, the mean curves with bands
"$ABLATE" "${TINY[@]}" --models sdpa,identity --seeds 3 --out seeds > seeds.out 2>&1; rc=$?
csv_fields seeds.csv > seeds.tsv; csv_fields seeds_runs.csv > runs.tsv
one=$(awk -F '\t' '$1 == "sdpa" { print $4 }' ab.tsv)
if [ $rc -eq 0 ] && [ "$(head -1 seeds.tsv | cut -f1-9)" = "$(printf 'model\tparams\truns_ok\truns\ttrain_loss_mean\ttrain_loss_sd\tvalid_loss_mean\tvalid_loss_sd\tvalid_loss_ci95')" ] &&
   [ "$(tail -n +2 seeds.tsv | cut -f1,3,4 | tr '\n\t' '; ')" = "sdpa 3 3;identity 3 3;" ] &&
   awk -F '\t' 'NR > 1 { for (i = 5; i <= 13; i++) if ($i == "") exit 1; if (!($8 > 0 && $9 > $8)) exit 1 }' seeds.tsv &&
   [ "$(tail -n +2 runs.tsv | cut -f1,11 | tr '\n\t' '; ')" = "sdpa 1;sdpa 2;sdpa 3;identity 1;identity 2;identity 3;" ] &&
   [ -n "$one" ] && [ "$(awk -F '\t' '$1 == "sdpa" && $11 == 1 { print $4 }' runs.tsv)" = "$one" ] &&
   awk -F '\t' -v m="$(awk -F '\t' '$1 == "sdpa" { print $7 }' seeds.tsv)" '$1 == "sdpa" { s += $4; n++ } END { exit !(n == 3 && (s / n - m) ^ 2 < 1e-10) }' runs.tsv &&
   grep -q '^Ranking by validation loss, mean of 3 seeds' seeds.md && grep -q ' ± ' seeds.md &&
   [ "$(grep -c '<polygon' seeds.svg)" -eq 2 ] && [ "$(tail -n +2 seeds_curves.csv | cut -d, -f1 | sort -u | wc -l)" -eq 2 ]
then ok "--seeds 3: mean, sd and 95% interval per model, the runs one by one (seed 1 = the single run), the ranking, mean curves with bands"
else bad "--seeds 3: statistics over the seeds" "rc $rc" "$(cat seeds.out)" "$(cat seeds.csv)"; fi

# 4d. --jobs: the same runs two at a time give the same losses and accuracies (speeds and sizes aside)
"$ABLATE" "${TINY[@]}" --models sdpa,identity --seeds 3 --jobs 2 --out jobs > jobs.out 2>&1; rc=$?
csv_fields jobs_runs.csv > jobs.tsv
if [ $rc -eq 0 ] && [ "$(wc -l < jobs.tsv)" = 7 ] && [ "$(cut -f1-5,9- runs.tsv)" = "$(cut -f1-5,9- jobs.tsv)" ] &&
   grep -q '2 runs at once' jobs.md && [ "$(grep -c '^\[[1-6]/6\] ' jobs.out)" = 6 ]
then ok "--jobs 2: the runs two at a time give every loss and accuracy of --jobs 1, the report says so"
else bad "--jobs 2 gives the losses of --jobs 1" "rc $rc" "$(diff <(cut -f1-5,9- runs.tsv) <(cut -f1-5,9- jobs.tsv))" "$(tail -5 jobs.out)"; fi

# 5. errors: exit status 1 and a message naming the problem
expect_error "unknown model"          'unknown model "gpt" in --models'  "$ABLATE" "${TINY[@]}" --models sdpa,gpt
expect_error "a model named twice"    'names "pool" twice'              "$ABLATE" "${TINY[@]}" --models pool,pool
expect_error "--seq-len on the sorter" '--seq-len applies to a text file' "$ABLATE" "${TINY[@]}" --seq-len 8
expect_error "unwritable --out"       'cannot write'                    "$ABLATE" "${TINY[@]}" --out no_dir/ab
expect_error "missing text file"      'cannot open'                     "$ABLATE" no_such.txt "${TINY[@]}"
if "$ABLATE" --help > help.out 2>&1 && grep -q -- '--models' help.out && grep -q -- '--quick' help.out
then ok "--help lists the options"
else bad "--help lists the options" "$(cat help.out)"; fi

finish
