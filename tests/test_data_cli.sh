#!/usr/bin/env bash
# build/train on token shards and build/sample, end to end (docs/math.md §17.6): a small text is
# written as shards of byte ids (llm.c's format and raw uint16, by perl: no build/tokenize needed),
# trained on with --data/--valid/--tokenizer bytes, evaluated with --eval-only, sampled, resumed
# bit-identically, and every mismatch or bad file is refused with a message that names it.
# Needs build/train and build/sample. Prints ok/FAIL lines and the runner's summary line.
set -u
cd "$(dirname "$0")/.."
TRAIN=${TRAIN:-$PWD/build/train}
SAMPLE=${SAMPLE:-$PWD/build/sample}
# shellcheck source=tests/lib.sh
. tests/lib.sh
[ -x "$SAMPLE" ] || { echo "FAIL $SAMPLE is missing: run make build/sample first"; echo "0 passed, 1 failed"; exit 1; }
start_test "$TRAIN" "make build/train"

awk 'BEGIN {
    n = split("The king|A queen|My lord|The old fool|Good sir|The people", s, "|");
    m = split("speaks of|dreams of|fights for|laughs at|waits for", v, "|");
    k = split("the crown|the sea|his honour|a red rose|the moon", o, "|");
    for (i = 0; i < 200; i++) printf "%s %s %s.\n", s[i % n + 1], v[(i * 7 + int(i / 3)) % m + 1], o[(i * 5 + 3) % k + 1];
}' > text.txt
head -c 3000 text.txt > part1.txt; tail -c +3001 text.txt | head -c 1500 > part2.txt; tail -c +4501 text.txt > valid.txt
# byte ids as shards: raw uint16 (nanoGPT) and llm.c's (a 1024-byte header: magic, version 1, count)
raw()  { perl -0777 -ne 'print pack("v*", unpack("C*", $_))' "$1"; }
llmc() { perl -0777 -ne 'print pack("V3", 20240520, 1, length($_)), "\0" x 1012, pack("v*", unpack("C*", $_))' "$1"; }
llmc part1.txt > train_000.bin; raw part2.txt > train_001.bin; llmc valid.txt > val.bin

TINY=(--d-model 16 --heads 2 --layers 1 --d-ff 32 --seq-len 16 --batch 4 --threads 1 --log-every 1 --eval-batches 2)
SHARDS=(--data 'train_*.bin' --valid val.bin --tokenizer bytes)
losses() { grep -E '^step [0-9]+/[0-9]+ ' "$1" | awk '{print $2, $4}'; }

# 1. it trains on the two shards (a glob) as one stream, validates in bits per byte and samples
"$TRAIN" "${SHARDS[@]}" "${TINY[@]}" --steps 30 --lr 1e-2 --schedule constant --sample 20 --save ck.st > learn.out 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q 'data: 2 shards, 4500 tokens train / 1 shard, [0-9]* valid; vocabulary 256 (tokenizer bytes)' learn.out &&
   losses learn.out | awk 'NR <= 5 {a += $2} NR > 25 {b += $2} END {exit !(NR == 30 && b < a - 0.5)}'
then ok "--data with a glob: 2 shards as one stream of 4500 tokens; the loss falls"
else bad "--data with a glob: 2 shards as one stream of 4500 tokens; the loss falls" "rc $rc" "$(cat learn.out)"; fi
if grep -q 'valid loss [0-9.]*, perplexity [0-9.]*, [0-9.]* bits/byte' learn.out && grep -q -- '--- sample (temperature 0.8, top-k 200) ---' learn.out
then ok "validation: loss, perplexity and bits per byte; a decoded sample"
else bad "validation: loss, perplexity and bits per byte; a decoded sample" "$(cat learn.out)"; fi
# bytes: one byte per token, so bits per byte = loss / ln 2
if grep 'step 30: valid' learn.out | awk '{l = $5 + 0; b = $8 + 0; exit !(sqrt((l / log(2) - b) ^ 2) < 1e-3)}'
then ok "byte tokens: bits per byte = loss / ln 2"
else bad "byte tokens: bits per byte = loss / ln 2" "$(grep 'step 30: valid' learn.out)"; fi

# 2. --eval-only reports the same validation loss as the end of training; on other --valid files too
"$TRAIN" --resume ck.st --eval-only --valid val.bin --eval-batches 2 > eval.out 2>&1; rc=$?
want=$(sed -n 's/^step 30: \(valid loss [0-9.]*\).*/\1/p' learn.out)
if [ $rc -eq 0 ] && [ -n "$want" ] && grep -q "eval of \"ck.st\" at step 30: $want" eval.out
then ok "--eval-only: the checkpoint's validation loss, as at the end of training"
else bad "--eval-only: the checkpoint's validation loss, as at the end of training" "rc $rc" "$want" "$(cat eval.out)"; fi
raw part1.txt > other_valid.bin
if "$TRAIN" --resume ck.st --eval-only --valid other_valid.bin > eval2.out 2>&1 && grep -q 'bits/byte' eval2.out
then ok "--eval-only --valid FILES: another validation set"
else bad "--eval-only --valid FILES: another validation set" "$(cat eval2.out)"; fi

# 3. build/sample: the stored tokenizer, greedy is reproducible, a prompt
"$SAMPLE" ck.st --tokens 30 --greedy --prompt 'The king' > s1.out 2>&1; rc=$?
"$SAMPLE" ck.st --tokens 30 --greedy --prompt 'The king' --tokenizer bytes > s2.out 2>&1
if [ $rc -eq 0 ] && grep -q -- '--- sample (greedy) ---' s1.out && grep -q '^The king' s1.out && cmp -s s1.out s2.out
then ok "build/sample: greedy continuation of a prompt, the stored tokenizer"
else bad "build/sample: greedy continuation of a prompt, the stored tokenizer" "$(cat s1.out s2.out)"; fi
"$TRAIN" "${SHARDS[@]}" "${TINY[@]}" --vocab 256 --tokenizer bytes --steps 2 --sample 0 > /dev/null 2>&1 || bad "--vocab equal to the tokenizer's is accepted"

# 4. --resume continues bit-identically on shards
RUN=("$TRAIN" "${SHARDS[@]}" "${TINY[@]}" --steps 24 --dropout 0.1 --sample 0)
"${RUN[@]}" > full.out 2>&1
"${RUN[@]}" --save part.st --stop-after 9 > p1.out 2>&1
"${RUN[@]}" --resume part.st > p2.out 2>&1
if [ "$(losses full.out | wc -l)" -eq 24 ] && [ "$(losses full.out)" = "$(cat <(losses p1.out) <(losses p2.out))" ]
then ok "9 steps + --resume for 15 more: losses bit-identical to 24 uninterrupted steps"
else bad "9 steps + --resume for 15 more: losses bit-identical to 24 uninterrupted steps" "$(cat p1.out p2.out)"; fi
"$TRAIN" "${SHARDS[@]}" "${TINY[@]}" --mixer relative --mem-len 8 --steps 6 --sample 8 > rel.out 2>&1 &&
    grep -q 'loader: sequential, 4 columns of 1125 tokens' rel.out && ok "a memory model reads the shards sequentially" ||
    bad "a memory model reads the shards sequentially" "$(cat rel.out)"

# 5. errors
printf 'abc' > odd.bin
head -c 1100 train_000.bin > trunc.bin
printf '\x01\x01\x02\x01' > big.bin          # ids 257 and 258 (little-endian)
python_ids=""
expect_error "no vocabulary"             "need their vocabulary"            "$TRAIN" --data train_000.bin --valid val.bin "${TINY[@]}"
expect_error "--data without --valid"    "--data needs --valid"             "$TRAIN" --data train_000.bin --tokenizer bytes "${TINY[@]}"
expect_error "--data and a text file"    "drop the text file"               "$TRAIN" text.txt "${SHARDS[@]}" "${TINY[@]}"
expect_error "a glob that matches nothing" "matches no file"                "$TRAIN" --data 'nothing_*.bin' --valid val.bin --tokenizer bytes "${TINY[@]}"
expect_error "a missing shard"           "cannot open the shard \"missing.bin\"" "$TRAIN" --data missing.bin --valid val.bin --tokenizer bytes "${TINY[@]}"
expect_error "odd-sized shard"           "odd size (3 bytes)"               "$TRAIN" --data odd.bin --valid val.bin --tokenizer bytes "${TINY[@]}"
expect_error "truncated llm.c shard"     "should have 7024 bytes, but it has 1100 (truncated?)" "$TRAIN" --data trunc.bin --valid val.bin --tokenizer bytes "${TINY[@]}"
expect_error "a text file as a shard"    "looks like text"                  "$TRAIN" --data text.txt --valid val.bin --tokenizer bytes "${TINY[@]}"
expect_error "ids outside the vocabulary" "token id 257 at position 0 of the stream (token 0 of \"big.bin\") is outside the vocabulary of 256 ids"     "$TRAIN" --data big.bin --valid big.bin --tokenizer bytes "${TINY[@]}" --seq-len 1 --batch 1 --steps 2
expect_error "--vocab against the tokenizer" "differs from the 256 ids"     "$TRAIN" "${SHARDS[@]}" "${TINY[@]}" --vocab 300
expect_error "--eval-only without --resume" "--eval-only needs --resume"    "$TRAIN" --valid val.bin --eval-only --tokenizer bytes
expect_error "resume shards with a text"  "trained on token shards"        "$TRAIN" text.txt --resume ck.st
expect_error "resume with another vocabulary" "differs from the checkpoint's vocabulary of 256 ids"                "$TRAIN" --data 'train_*.bin' --valid val.bin --vocab 300 --resume ck.st
expect_error "sample: not a checkpoint"   "cannot sample"                   "$SAMPLE" text.txt
perl -0777 -pe 's/"train\./"other./g' ck.st > other.st   # the same checkpoint with another program's metadata keys
expect_error "sample: another program's checkpoint" "not written by build/train" "$SAMPLE" other.st
expect_error "sample: an empty prompt"    "--prompt is empty"               "$SAMPLE" ck.st --prompt ''
expect_error "sample: no checkpoint"      "no checkpoint given"             "$SAMPLE" --tokens 3
# a character-level checkpoint: its stored characters decode; a prompt outside them is refused
"$TRAIN" text.txt "${TINY[@]}" --steps 3 --sample 0 --save char.st > /dev/null 2>&1
expect_error "sample: a prompt outside the characters" "is not in the" "$SAMPLE" char.st --prompt 'xyz@'
expect_error "sample: a tokenizer for a text checkpoint" "drop --tokenizer" "$SAMPLE" char.st --tokenizer bytes
if "$SAMPLE" char.st --tokens 10 --prompt 'The' > cs.out 2>&1 && grep -q '^The' cs.out
then ok "build/sample: a character-level checkpoint decodes with its stored vocabulary"
else bad "build/sample: a character-level checkpoint decodes with its stored vocabulary" "$(cat cs.out)"; fi
finish
