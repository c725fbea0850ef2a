#!/usr/bin/env bash
# The train example (examples/train.c) end to end: it learns and samples, --save + --resume
# continues bit-identically, and every user error exits 1 with a message that names it.
# Needs build/train (make examples). Prints ok/FAIL lines and the runner's summary line.
set -u
cd "$(dirname "$0")/.."
TRAIN=${TRAIN:-$PWD/build/train}
# shellcheck source=tests/lib.sh
. tests/lib.sh
start_test "$TRAIN" "make examples"

# a few KB of English-ish text: 160 varied sentences
awk 'BEGIN {
    n = split("The king|A queen|My lord|The old fool|Good sir|The people|Her brother|That soldier", s, "|");
    m = split("speaks of|dreams of|fights for|laughs at|waits for|sings to|weeps for", v, "|");
    k = split("the crown|the sea|his honour|a red rose|the long night|the town|our fortune|the moon", o, "|");
    split(".|!|?|;|,", p, "|");
    for (i = 0; i < 160; i++) printf "%s %s %s%s\n", s[i % n + 1], v[(i * 7 + int(i / 3)) % m + 1], o[(i * 5 + 3) % k + 1], p[i % 5 + 1];
}' > text.txt

TINY=(--d-model 16 --heads 2 --layers 1 --d-ff 32 --seq-len 16 --batch 4 --threads 1 --log-every 1
      --eval-batches 2 --sample 40)
losses() { grep -E '^step [0-9]+/[0-9]+ ' "$1" | awk '{print $2, $4}'; }   # "N/M loss" per step

# 0. every config field of the library's table (MF_MODEL_FIELDS) has its option in build/train's
# --help, and build/ablate has every one but the variant (compressive: one of its models)
ROOT=$(cd "$(dirname "$TRAIN")/.." && pwd)
ABLATE_BIN=$(dirname "$TRAIN")/ablate
fields=$(config_fields "$ROOT/metaformer.h")
"$TRAIN" --help > help_train.txt 2>&1
"$ABLATE_BIN" --help > help_ablate.txt 2>&1
missing=""
while read -r member opt; do
    grep -q -- "--$opt " help_train.txt || missing="$missing train:$opt"
    [ "$opt" = compressive ] || grep -q -- "--$opt " help_ablate.txt || missing="$missing ablate:$opt"
done <<< "$fields"
if [ -n "$fields" ] && [ -z "$missing" ]; then ok "every config field of the table ($(echo "$fields" | wc -l)) has its option in build/train and build/ablate"
else bad "every config field of the table has its option" "fields: $(echo $fields)" "without one:$missing"; fi

# 1. it learns: the last losses are below the first ones, and it validates and samples
"$TRAIN" text.txt "${TINY[@]}" --steps 40 --lr 1e-2 --schedule constant > learn.out 2> learn.err; rc=$?
if [ $rc -eq 0 ] && losses learn.out | awk 'NR <= 5 {a += $2} NR > 35 {b += $2} END {exit !(NR == 40 && b < a - 0.5)}'
then ok "40 steps: the loss falls (first 5 vs last 5 steps)"
else bad "40 steps: the loss falls (first 5 vs last 5 steps)" "rc $rc" "$(cat learn.out learn.err)"; fi
if grep -q 'valid loss [0-9.]* ([0-9.]* bits/char)' learn.out && grep -q -- '--- sample (temperature 0.8, top-k 200) ---' learn.out &&
   [ "$(sed -n '/^--- sample/{n;p;}' learn.out | wc -c)" -gt 40 ]
then ok "prints the validation loss in bits/char and a 40-character sample"
else bad "prints the validation loss in bits/char and a 40-character sample" "$(cat learn.out)"; fi
if ! grep -q $'\r' learn.out && [ "$(losses learn.out | wc -l)" -eq 40 ]
then ok "stdout not a terminal: one plain progress line per --log-every step"
else bad "stdout not a terminal: one plain progress line per --log-every step"; fi
if "$TRAIN" text.txt "${TINY[@]}" --steps 20 --log-every 5 > every5.out 2>&1 &&
   [ "$(losses every5.out | awk '{print $1}' | tr '\n' ' ')" = "1/20 5/20 10/20 15/20 20/20 " ]
then ok "--log-every 5 prints steps 1, 5, 10, 15, 20"
else bad "--log-every 5 prints steps 1, 5, 10, 15, 20" "$(cat every5.out)"; fi

# 2. --save + --resume continues bit-identically (dropout on, so the dropout RNG counts too),
#    interrupted mid-epoch and exactly at the end of the loader's first epoch
RUN=("$TRAIN" text.txt "${TINY[@]}" --batch 16 --steps 30 --eval-every 5 --dropout 0.1)
"${RUN[@]}" > full.out 2>&1
n_train=$(sed -n 's/.* \([0-9]*\) train \/ .*/\1/p' full.out)
epoch=$(( ((n_train - 1) / 16 + 15) / 16 ))   # batches per epoch: windows (n_train - 1) / T, 16 per batch
for stop in 8 $epoch; do
    rm -f ck.st
    "${RUN[@]}" --save ck.st --stop-after $stop > part1.out 2>&1; rc1=$?
    cp ck.st ck_step$stop.st
    "${RUN[@]}" --save ck.st --resume ck.st > part2.out 2>&1; rc2=$?
    name="$stop steps + --resume for $((30 - stop)) more: losses bit-identical to 30 uninterrupted steps"
    if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ "$(losses full.out | wc -l)" -eq 30 ] &&
       [ "$(losses full.out)" = "$(cat <(losses part1.out) <(losses part2.out))" ] &&
       [ "$(grep 'valid loss' full.out | tail -1)" = "$(grep 'valid loss' part2.out | tail -1)" ]
    then ok "$name"
    else bad "$name" "rc $rc1 $rc2" "$(diff <(losses full.out) <(cat <(losses part1.out) <(losses part2.out)))" \
             "$(cat part1.out part2.out)"; fi
done
if grep -q "resumed from \"ck.st\" at step $epoch" part2.out; then ok "the resumed run reports its start step"
else bad "the resumed run reports its start step" "$(head -5 part2.out)"; fi
# the same command line plus --resume works; a changed model option does not
"$TRAIN" text.txt --resume ck_step8.st --d-model 32 > conflict.out 2>&1; rc=$?
if [ $rc -eq 1 ] && grep -q 'differs from the checkpoint' conflict.out; then ok "--resume with a different --d-model is refused"
else bad "--resume with a different --d-model is refused" "rc $rc" "$(cat conflict.out)"; fi

# 3. errors: exit status 1 and a message naming the problem
: > empty.txt
printf 'just some text\0with a NUL byte\n%.0s' $(seq 50) > nul.bin
awk 'BEGIN { for (i = 0; i < 3000; i++) printf "%c", (i % 3 ? 65 + i % 26 : 1 + i % 8) }' > ctrl.bin
head -c 100 text.txt > short.txt
mkdir adir
cp text.txt other.txt; echo 'Zebra #42' >> other.txt
head -c 3000 ck_step8.st > trunc.st; cp trunc.st trunc_copy.st
printf 'this is not a checkpoint at all, just text that fills some bytes\n' > garbage.st
before=$(cksum < ck_step8.st)

# bf16 on the CPU: trains on the CPU's bf16 kernel and says which; tf32 is refused on the CPU
if "$TRAIN" text.txt "${TINY[@]}" --steps 3 --precision bf16 > bf16.out 2>&1 &&
   grep -q "^precision: bf16 products on the CPU's" bf16.out; then ok "bf16 on the CPU trains and names its kernel"
else bad "bf16 on the CPU trains and names its kernel" "$(tail -n 3 bf16.out)"; fi
expect_error "tf32 on the CPU" "tf32 is a format of NVIDIA's tensor cores" "$TRAIN" text.txt "${TINY[@]}" --steps 1 --precision tf32
expect_error "missing file"                 "cannot open"               "$TRAIN" no_such_file.txt "${TINY[@]}"
expect_error "unreadable file (a directory)" "cannot read"              "$TRAIN" adir "${TINY[@]}"
expect_error "empty file"                   "is empty"                  "$TRAIN" empty.txt "${TINY[@]}"
expect_error "binary file (NUL bytes)"      "looks binary"              "$TRAIN" nul.bin "${TINY[@]}"
expect_error "binary file (control bytes)"  "control characters"        "$TRAIN" ctrl.bin "${TINY[@]}"
expect_error "file too short for seq-len"   "needs at least 161"        "$TRAIN" short.txt "${TINY[@]}"
expect_error "d-model not divisible by heads" "not divisible by --heads" "$TRAIN" text.txt "${TINY[@]}" --heads 3
expect_error "unknown mixer"                'unknown --mixer "fancy"'   "$TRAIN" text.txt "${TINY[@]}" --mixer fancy
mixers=$("$TRAIN" --list-mixers 2>&1 | tr '\n' ' ')
rows=$(library_mixers "$ROOT/metaformer.h" | tr '\n' ' ')
if [ -n "$rows" ] && [ "$mixers" = "$rows" ]
then ok "--list-mixers: the library's mixers, one per line (the rows of [mf:mixers])"
else bad "--list-mixers: the library's mixers, one per line" "listed: $mixers" "rows: $rows"; fi
expect_error "unknown optimizer"            'unknown --optimizer'       "$TRAIN" text.txt "${TINY[@]}" --optimizer lion
expect_error "unknown schedule"             'unknown --schedule'        "$TRAIN" text.txt "${TINY[@]}" --schedule linear
expect_error "unknown option"               'unknown option "--frobnicate"' "$TRAIN" text.txt --frobnicate 3
expect_error "non-numeric --lr"             "--lr expects a number"     "$TRAIN" text.txt "${TINY[@]}" --lr fast
expect_error "non-integer --steps"          "--steps expects an integer" "$TRAIN" text.txt "${TINY[@]}" --steps 1.5
expect_error "negative --batch"             "--batch must be >= 1"      "$TRAIN" text.txt "${TINY[@]}" --batch -2
expect_error "option without value"         "--steps needs a value"     "$TRAIN" text.txt --steps
expect_error "no file given"                "no text file given"        "$TRAIN" --steps 3
expect_error "prompt char not in the text"  "never occurs"              "$TRAIN" text.txt "${TINY[@]}" --prompt 'xyz@'
expect_error "unwritable --save path"       "cannot write the checkpoint" "$TRAIN" text.txt "${TINY[@]}" --save no_dir/ck.st
expect_error "truncated checkpoint"         "truncated"                 "$TRAIN" text.txt "${TINY[@]}" --resume trunc.st --save trunc.st
expect_error "not a checkpoint"             "cannot resume"             "$TRAIN" text.txt "${TINY[@]}" --resume garbage.st
expect_error "missing checkpoint"           "cannot resume"             "$TRAIN" text.txt "${TINY[@]}" --resume nothing.st
expect_error "checkpoint of other vocabulary" "vocabulary"              "$TRAIN" other.txt --resume ck_step8.st --threads 1
if cmp -s trunc.st trunc_copy.st && [ "$(cksum < ck_step8.st)" = "$before" ] && [ ! -e trunc.st.tmp ]
then ok "a rejected --resume leaves the checkpoint files untouched"
else bad "a rejected --resume leaves the checkpoint files untouched"; fi

# 4. the mixer families' options: bad combinations are refused, --feedback is --mixer feedback
expect_error "--mem-len without a memory mixer"  "--mem-len: model config: mem_len = 8 applies only to the relative mixer" "$TRAIN" text.txt "${TINY[@]}" --mem-len 8
expect_error "--compressive without --mem-len"   "--compressive needs --mem-len"     "$TRAIN" text.txt "${TINY[@]}" --compressive
expect_error "--compressive without --c-mem-len" "--compressive needs --c-mem-len"   "$TRAIN" text.txt "${TINY[@]}" --compressive --mem-len 8
expect_error "--compressive with another mixer" "not of --mixer sdpa"              "$TRAIN" text.txt "${TINY[@]}" --compressive --mixer sdpa --mem-len 8 --c-mem-len 8
expect_error "--c-mem-len without --compressive" "--c-mem-len applies to --compressive only" "$TRAIN" text.txt "${TINY[@]}" --mixer relative --c-mem-len 8
expect_error "--dpfp-nu with sdpa"              "--dpfp-nu: model config: dpfp_nu = 2 applies only to the fast_weights and linear mixers" "$TRAIN" text.txt "${TINY[@]}" --dpfp-nu 2
expect_error "--feature with fast_weights"      "--feature: model config: linear_feature = 1 applies only to the linear mixer" "$TRAIN" text.txt "${TINY[@]}" --mixer fast_weights --feature elu1
expect_error "--dpfp-nu with elu1 features"     "--feature elu1 has none"           "$TRAIN" text.txt "${TINY[@]}" --mixer linear --feature elu1 --dpfp-nu 2
expect_error "--chunk with pool"                "--chunk: model config: chunk_size = 4 applies only to the fast_weights and linear mixers" "$TRAIN" text.txt "${TINY[@]}" --mixer pool --chunk 4
expect_error "unknown --feature"                'unknown --feature "relu"'          "$TRAIN" text.txt "${TINY[@]}" --mixer linear --feature relu
expect_error "--feedback against --mixer"       "contradict"                        "$TRAIN" text.txt "${TINY[@]}" --feedback --mixer sdpa
expect_error "--compressive=2"                  "--compressive expects 0 or 1"      "$TRAIN" text.txt "${TINY[@]}" --compressive=2
"$TRAIN" text.txt "${TINY[@]}" --steps 3 --feedback-kv > alias.out 2>&1
if grep -q 'feedback_kv mixer' alias.out
then ok "--feedback-kv selects --mixer feedback_kv"
else bad "--feedback-kv selects --mixer feedback_kv" "$(cat alias.out)"; fi

# 5. the families train
family() { # out file, args...: the exit status of train
    local out=$1; shift
    "$TRAIN" text.txt "${TINY[@]}" "$@" > "$out" 2>&1
}
falls() { losses "$1" | awk 'NR <= 5 {a += $2} NR > 15 {b += $2} END {exit !(NR == 20 && b < a - 0.2)}'; }
for args in "--mixer fast_weights" "--mixer fast_weights --chunk 1" "--mixer linear" "--mixer linear --feature elu1" \
            "--feedback" "--feedback-kv"; do
    family fam.out $args --steps 20 --lr 1e-2 --schedule constant; rc=$?
    if [ $rc -eq 0 ] && falls fam.out && grep -q 'valid loss' fam.out && grep -q -- '--- sample' fam.out
    then ok "$args: 20 steps, the loss falls, it validates and samples"
    else bad "$args: 20 steps, the loss falls, it validates and samples" "rc $rc" "$(cat fam.out)"; fi
done
family rel.out --mixer relative --mem-len 8 --steps 20 --lr 1e-2 --schedule constant --eval-every 10; rc=$?
if [ $rc -eq 0 ] && falls rel.out && grep -q '^loader: sequential, 4 columns' rel.out && [ "$(grep -c 'valid loss' rel.out)" -eq 2 ]
then ok "--mixer relative --mem-len 8: the sequential loader, the loss falls, validation on its own memory"
else bad "--mixer relative --mem-len 8: the sequential loader" "rc $rc" "$(cat rel.out)"; fi
rm -f rel.st
"$TRAIN" text.txt "${TINY[@]}" --mixer relative --mem-len 8 --steps 20 --save rel.st --stop-after 10 > rel1.out 2>&1
"$TRAIN" text.txt "${TINY[@]}" --mixer relative --mem-len 8 --steps 20 --resume rel.st > rel2.out 2>&1; rc=$?
if [ $rc -eq 0 ] && ! grep -q 'memories start empty' rel2.out && grep -q 'resumed from "rel.st" at step 10' rel2.out &&
   [ "$(losses rel2.out | wc -l)" -eq 10 ]
then ok "--mixer relative: --resume continues with its memories (tests/test_resume.sh: bit for bit)"
else bad "--mixer relative: --resume continues" "rc $rc" "$(cat rel1.out rel2.out)"; fi
expect_error "--resume a relative model with another --mem-len" "--mem-len 4 differs from the checkpoint's 8" \
    "$TRAIN" text.txt --resume rel.st --mem-len 4
family cmp.out --compressive --mem-len 8 --c-mem-len 8 --steps 20 --lr 1e-2 --schedule constant; rc=$?
if [ $rc -eq 0 ] && falls cmp.out && grep -q 'relative mixer (mem-len 8, compressive 1, c-mem-len 8, compression-rate 2, attn-dropout 0)' cmp.out &&
   grep -E '^step [0-9]+/' cmp.out | awk '{ l = $4; c = $6; a = $9; sub(/\)/, "", a); n++
                                       if ($5 != "(ce" || $7 != "+" || $8 != "ar" || (c + a - l) ^ 2 > 1e-10) bad = 1 }
                                       END { exit bad || n != 20 }' &&
   grep -q 'valid loss [0-9.]* ([0-9.]* bits/char)  reconstruction loss [0-9.]*$' cmp.out
then ok "--compressive: the loss falls, and every line shows loss = ce + ar, validation its reconstruction loss"
else bad "--compressive: loss = ce + ar on every line" "rc $rc" "$(cat cmp.out)"; fi

# 6. --help
if "$TRAIN" --help > help.out 2>&1 && grep -q -- "--mixer $(echo $rows | tr ' ' '|')" help.out &&
   grep -q -- '--resume' help.out && grep -q -- '--compressive' help.out && grep -q 'Checkpoints hold the memories' help.out
then ok "--help lists the options"
else bad "--help lists the options" "$(cat help.out)"; fi

finish
