#!/usr/bin/env bash
# build/classify on text with a tokenizer, in parallel and as the seed's ablation
# (examples/classify.c): a generated LABEL<TAB>TEXT file encoded by a BPE tokenizer that
# build/tokenize trains here learns, and its checkpoint refuses another tokenizer; --jobs 1 and
# --jobs 2 print the same bytes; --mixers writes the table (each run the same as alone, the means
# those of the runs) and tells a mixer that solves the "repeat" task from one that cannot; bad
# --mixers / --tokenizer uses exit 1 naming the fix. No network, no word lists.
# Needs build/classify and build/tokenize. Prints ok/FAIL lines and the runner's summary line.
set -u
cd "$(dirname "$0")/.."
CLS=${CLS:-$PWD/build/classify}
TOK=${TOK:-$PWD/build/tokenize}
# shellcheck source=tests/lib.sh
. tests/lib.sh
[ -x "$TOK" ] || { echo "FAIL $TOK is missing: run make build/tokenize first"; echo "0 passed, 1 failed"; exit 1; }
start_test "$CLS" "make build/classify"

acc() { sed -n 's/^held-out accuracy: \([0-9.]*\)%.*/\1/p' "$1"; }
at_least() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "" && a + 0 >= b) }'; }

# ==== 1. a labelled file: the label is whether a word of the "animal" set occurs (anywhere) ====
awk 'BEGIN {
    n = split("stone|river|cloud|table|paper|glass|field|light|water|metal|north|sugar", w, "|");
    m = split("horse|tiger|eagle|otter|camel|zebra", a, "|");
    for (i = 0; i < 240; i++) {
        t = w[i % n + 1] " " w[(i * 7 + 3) % n + 1] " " w[(i * 5 + 1) % n + 1] " " w[(i * 11 + 2) % n + 1];
        if (i % 2) { k = (i * 3) % 4; split(t, p, " "); p[k + 1] = a[(i * 13) % m + 1]; t = p[1] " " p[2] " " p[3] " " p[4];
                     printf "animal\t%s\n", t } else printf "thing\t%s\n", t;
    }
}' > labelled.tsv
cut -f2 labelled.tsv > texts.txt
"$TOK" --train-bpe 300 texts.txt --out bpe > tok1.out 2>&1 &&
    { sed 's/stone/stones/' texts.txt > texts2.txt; "$TOK" --train-bpe 300 texts2.txt --out other > tok2.out 2>&1; }
rc=$?
if [ $rc -eq 0 ] && [ -s bpe.tok ] && [ -s other.tok ] && ! cmp -s bpe.tok other.tok; then ok "build/tokenize trains two BPE tokenizers"
else bad "build/tokenize --train-bpe 300" "rc $rc" "$(cat tok1.out tok2.out 2>/dev/null | tail -5)"; fi

# ==== 2. --tokenizer: the texts are its ids (shorter than the bytes), the model learns ====
"$CLS" labelled.tsv --tokenizer bpe.tok --threads 1 --steps 300 --seq-len 12 --mixer sdpa --save bpe.safetensors > bpe.out 2>&1; rc=$?
if [ $rc -eq 0 ] && at_least "$(acc bpe.out)" 95 && grep -q '240 examples (216 train, 24 held out), 2 classes, vocabulary 300' bpe.out &&
   ! grep -q 'texts were longer' bpe.out
then ok "--tokenizer (BPE of 300 ids): four words fit 12 tokens, $(acc bpe.out)% held out"
else bad "--tokenizer: vocabulary 300, no text cut at 12 tokens, >= 95%" "rc $rc" "$(cat bpe.out)"; fi
"$CLS" labelled.tsv --threads 1 --steps 1 --seq-len 12 > bytes.out 2>&1
if grep -q '240 texts were longer than --seq-len 12' bytes.out; then ok "the same texts as bytes do not fit 12 tokens"
else bad "the texts as bytes are longer than 12" "$(cat bytes.out)"; fi

# ==== 3. --load: the stored tokenizer, and no other ====
"$CLS" labelled.tsv --threads 1 --load bpe.safetensors --steps 0 > load.out 2>&1; rc=$?
if [ $rc -eq 0 ] && [ "$(grep '^held-out accuracy' load.out)" = "$(grep '^held-out accuracy' bpe.out)" ]
then ok "--load without --tokenizer: the checkpoint's tokenizer, the same accuracy"
else bad "--load of a tokenizer model" "rc $rc" "$(cat load.out)"; fi
"$CLS" labelled.tsv --threads 1 --load bpe.safetensors --tokenizer "$PWD/bpe.tok" --steps 0 > load2.out 2>&1; rc=$?
if [ $rc -eq 0 ] && [ "$(acc load2.out)" = "$(acc bpe.out)" ]; then ok "--load with the same tokenizer under another path"
else bad "--load --tokenizer (the same file)" "rc $rc" "$(cat load2.out)"; fi
expect_error "--load with another tokenizer (same size)" "is not the tokenizer checkpoint \"bpe.safetensors\" was trained with (\"bpe.tok\": its FNV-1a differs), so its ids would mean other text: give --tokenizer bpe.tok" \
    "$CLS" labelled.tsv --load bpe.safetensors --tokenizer other.tok
expect_error "--load with the byte tokenizer" "another vocabulary size" "$CLS" labelled.tsv --load bpe.safetensors --tokenizer bytes
mkdir moved && mv bpe.tok moved/
expect_error "--load when the tokenizer moved" "which cannot be read here (No such file or directory): give --tokenizer FILE" \
    "$CLS" labelled.tsv --load bpe.safetensors
"$CLS" labelled.tsv --threads 1 --load bpe.safetensors --tokenizer moved/bpe.tok --steps 0 > load3.out 2>&1; rc=$?
if [ $rc -eq 0 ] && [ "$(acc load3.out)" = "$(acc bpe.out)" ]; then ok "--load --tokenizer where it is now"
else bad "--load --tokenizer moved/bpe.tok" "rc $rc" "$(cat load3.out)"; fi
"$CLS" labelled.tsv --threads 1 --steps 20 --save chars.safetensors --tokens chars > /dev/null 2>&1
expect_error "--tokenizer on a model of character tokens" "was trained on chars tokens, not with a tokenizer; drop --tokenizer" \
    "$CLS" labelled.tsv --load chars.safetensors --tokenizer moved/bpe.tok
expect_error "--tokens on a model of a tokenizer" "was trained with the tokenizer" "$CLS" labelled.tsv --load bpe.safetensors --tokens chars
expect_error "--tokenizer and --tokens" "drop --tokens" "$CLS" labelled.tsv --tokenizer moved/bpe.tok --tokens chars
expect_error "--tokenizer without a file" "--tokenizer applies to a text file" "$CLS" --tokenizer moved/bpe.tok
expect_error "--tokenizer that is no tokenizer" "--tokenizer \"labelled.tsv\"" "$CLS" labelled.tsv --tokenizer labelled.tsv

# ==== 4. --jobs: the same output for any number of models at once ====
"$CLS" --threads 1 --steps 60 --eval-every 20 --seeds 3 --jobs 1 > jobs1.out 2>&1; rc1=$?
"$CLS" --threads 1 --steps 60 --eval-every 20 --seeds 3 --jobs 2 > jobs2.out 2>&1; rc2=$?
"$CLS" --steps 60 --eval-every 20 --seeds 3 --jobs 3 > jobs3.out 2>&1; rc3=$?
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ $rc3 -eq 0 ] && cmp -s jobs1.out jobs2.out && cmp -s jobs1.out jobs3.out &&
   [ "$(grep -c '^--- seed' jobs1.out)" -eq 3 ]
then ok "--seeds 3: --jobs 1, --jobs 2 and --jobs 3 (all threads) print the same bytes"
else bad "--jobs 1 / 2 / 3 give the same output" "rc $rc1 $rc2 $rc3" "$(diff jobs1.out jobs2.out | head; diff jobs1.out jobs3.out | head)"; fi

# ==== 5. --mixers: the ablation table ====
"$CLS" labelled.tsv --tokens chars --threads 1 --steps 20 --eval-every 20 --seq-len 32 --seeds 2 --jobs 2 \
    --mixers sdpa,metric,quadratic,pool,identity --metric-form softmax_tril --report report.md > ab.out 2>&1; rc=$?
rows=$(grep -c '^| \(sdpa\|metric\|quadratic\|pool\|identity\) | [0-9]* | [0-9.]*% ± [0-9.]* | \[' ab.out)
if [ $rc -eq 0 ] && [ "$rows" -eq 5 ] && [ "$(grep -c '^--- [a-z]*, seed [12] ([12] of 2)' ab.out)" -eq 10 ] &&
   grep -q '^| sdpa | .* | (reference) |' ab.out && grep -q '^Within the 95% interval\|^No mixer matches sdpa' ab.out &&
   grep -q 'metric: the softmax_tril form of M' report.md &&
   [ "$(sed -n '/^| mixer | parameters/,$p' ab.out)" = "$(sed -n '/^| mixer | parameters/,/^$/p' report.md | sed '$d'; echo;
                                                        grep '^Within\|^No mixer' report.md; echo "wrote report.md")" ]
then ok "--mixers: five mixers, two seeds each (--metric-form for the metric mixer alone), one table row each and the sentence, in the report as printed"
else bad "--mixers sdpa,metric,quadratic,pool,identity --seeds 2" "rc $rc" "$(tail -n 12 ab.out)"; fi
# each row's mean is the mean of its runs, and a run is the same model as when trained alone
means_ok=$(awk -F'|' '/^Held-out accuracy \(%\) of each seed/ { seeds = 1 }
    seeds && /^\| [a-z]+ \|/ && $2 !~ /mixer/ { n = 0; s = 0; for (i = 3; i < NF; i++) { s += $i; n++ }; m[$2] = s / n }
    !seeds && /^\| [a-z]+ \| [0-9]+ \| [0-9.]+%/ { t[$2] = $4 + 0 }
    END { bad = 0; k = 0; for (x in t) { k++; if (!(x in m) || (m[x] - t[x]) ^ 2 > 0.0026) bad = 1 }
          print (k == 5 && !bad) ? "yes" : "no" }' report.md)
"$CLS" labelled.tsv --tokens chars --threads 1 --steps 20 --eval-every 20 --seq-len 32 --mixer pool --seeds 2 > alone.out 2>&1
pool=$(awk -F'|' '$2 == " pool " && NF == 5 { print $3 + 0, $4 + 0 }' report.md)
if [ "$means_ok" = yes ] && [ -n "$pool" ] && [ "$pool" = "$(acc alone.out | awk '{ printf "%s%g", (NR > 1 ? " " : ""), $1 }')" ] &&
   grep -q '^Command: `.*--mixers sdpa,metric,quadratic,pool,identity' report.md && grep -q '^Data: labelled.tsv, 240 examples' report.md
then ok "--report: the command, the data, the means of the per-seed table; pool's seeds = pool trained alone ($pool)"
else bad "--report's numbers" "means $means_ok, pool: report $pool, alone $(acc alone.out | tr '\n' ' ')" "$(cat report.md)"; fi
# the test tells: on "repeat" sdpa solves it and identity cannot; every model alike: no difference
"$CLS" --threads 1 --seeds 2 --mixers sdpa,identity > rep.out 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q '^| identity | .* | differs |$' rep.out &&
   grep -q '^No mixer matches sdpa within the 95% interval (Welch.s test, 5% level): identity below it\.$' rep.out
then ok "--mixers on repeat: identity differs from sdpa, below it"
else bad "--mixers sdpa,identity on repeat: identity differs" "rc $rc" "$(tail -n 6 rep.out)"; fi
"$CLS" --threads 1 --seeds 2 --steps 1 --lr 0 --mixers sdpa,pool > same.out 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q '^Within the 95% interval, pool matches sdpa' same.out; then ok "--mixers: untrained models alike match"
else bad "--mixers with --lr 0: pool matches sdpa" "rc $rc" "$(tail -n 6 same.out)"; fi
"$CLS" --threads 1 --steps 10 --mixers sdpa,pool > one.out 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q 'cannot tell (fewer than 2 seeds)' one.out && grep -q 'give --seeds 2 or more' one.out
then ok "--mixers with one seed: no test, and the fix"
else bad "--mixers with one seed says it cannot tell" "rc $rc" "$(tail -n 6 one.out)"; fi

# ==== 6. bad --mixers ====
expect_error "--mixers: an unknown mixer" "\"sdpaa\" is not a mixer; the mixers are" "$CLS" --mixers sdpa,sdpaa
expect_error "--mixers: a mixer twice" "pool is named twice" "$CLS" --mixers sdpa,pool,pool
expect_error "--mixers: an empty name" "an empty name" "$CLS" --mixers sdpa,,pool
expect_error "--mixers with --mixer" "--mixer and --mixers given" "$CLS" --mixers sdpa,pool --mixer pool
expect_error "--mixers with --save" "--save takes one: drop --mixers" "$CLS" --mixers sdpa,pool --save x.safetensors
expect_error "--report without --mixers" "--report writes the table of --mixers" "$CLS" --report x.md
expect_error "--mixers: a mixer without a non-causal form" "no non-causal form" "$CLS" --mixers sdpa,fast_weights --steps 1
expect_error "--report into a missing folder" "--report: cannot write" "$CLS" --mixers sdpa,pool --steps 1 --report no/such/dir.md
finish
