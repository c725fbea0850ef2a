#!/usr/bin/env bash
# A mixer of your own in the example programs (examples/custom_mixer.c, docs/library.md): the
# program alone trains it on a text file, saves and samples; build/train-custom (build/train with it
# linked in) lists it, takes its field with --fields and refuses a wrong one, and its checkpoint
# samples with build/sample-custom while build/sample (without the mixer) refuses it naming the fix;
# build/ablate-custom has its row in the table, build/bench_model-custom its benchmark row. Bit-exact
# resume of it is in tests/test_resume.sh. Needs the programs (make build/custom_mixer
# build/train-custom build/sample-custom build/ablate-custom build/bench_model-custom).
set -u
cd "$(dirname "$0")/.."
B=$PWD/build
# shellcheck source=tests/lib.sh
. tests/lib.sh
start_test "$B/train-custom" "make build/train-custom"

awk 'BEGIN { srand(3); split("a mixer of your own trains here like the ones the library has built in", w, " ");
             for (i = 0; i < 900; i++) printf "%s%s", w[int(rand() * 14) + 1], (i % 12 == 11 ? ".\n" : " ") }' > text.txt
TINY=(text.txt --d-model 16 --heads 2 --layers 1 --d-ff 32 --seq-len 12 --batch 4 --threads 1 --eval-every 10
      --eval-batches 2 --log-every 5)

# 1. the example alone
"$B/custom_mixer" text.txt 60 alone.st > alone.out 2>&1; rc=$?
first=$(awk '$1 == "step" && $2 == 1 { print $4 }' alone.out); last=$(awk '$1 == "step" && $2 == 50 { print $4 }' alone.out)
if [ $rc -eq 0 ] && [ -s alone.st ] && grep -q '^sample: ' alone.out && awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1) }'
then ok "build/custom_mixer trains ALiBi on a text file (loss $first -> $last at step 50), saves and samples"
else bad "build/custom_mixer trains, saves and samples" "rc $rc" "$(cat alone.out)"; fi

# 2. linked into build/train: listed, trained with its field, recorded in the checkpoint
if "$B/train-custom" --list-mixers | grep -qx alibi && ! "$B/train" --list-mixers | grep -qx alibi
then ok "train-custom --list-mixers lists alibi after the library's mixers; build/train does not"
else bad "train-custom --list-mixers lists alibi" "$("$B/train-custom" --list-mixers | tr '\n' ' ')"; fi
"$B/train-custom" "${TINY[@]}" --mixer alibi --pos none --fields alibi_max=5 --steps 20 --save a.st --sample 30 > a.out 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q '^model: alibi mixer' a.out && grep -q 'step 20: valid loss' a.out && grep -q -- '--- sample' a.out
then ok "train-custom --mixer alibi --fields alibi_max=5 trains, validates, saves and samples"
else bad "train-custom --mixer alibi --fields alibi_max=5 trains" "rc $rc" "$(tail -5 a.out)"; fi
expect_error "a field the mixer lacks is named, with the mixer's fields" 'alibi_max (default 8' \
    "$B/train-custom" "${TINY[@]}" --mixer alibi --fields slope=3 --steps 1
expect_error "a field out of its range" 'alibi_max = 99 must be a number in \[0, 32\]' \
    "$B/train-custom" "${TINY[@]}" --mixer alibi --fields alibi_max=99 --steps 1
expect_error "--fields on a built-in mixer" 'the sdpa mixer has no fields of its own' \
    "$B/train-custom" "${TINY[@]}" --mixer sdpa --fields alibi_max=3 --steps 1
if "$B/train-custom" "${TINY[@]}" --mixer alibi --attn-dropout 0.1 --steps 2 > ad.out 2>&1
then ok "train-custom --mixer alibi --attn-dropout 0.1: a field of the library's table the mixer reads (model_fields)"
else bad "train-custom --mixer alibi --attn-dropout 0.1" "$(tail -3 ad.out)"; fi
expect_error "a field of the table it does not read" '--pool-size: .*applies only to the pool mixer' \
    "$B/train-custom" "${TINY[@]}" --mixer alibi --pool-size 5 --steps 1
expect_error "--fields that is not name=number" 'is not name=number' \
    "$B/train-custom" "${TINY[@]}" --mixer alibi --fields alibi_max --steps 1

# 3. its checkpoint: sampled by the program that has the mixer, refused by the one that lacks it
if "$B/sample-custom" a.st --tokens 20 --prompt "a " > s.out 2>&1 && grep -q -- '--- sample' s.out
then ok "sample-custom continues a prompt from the alibi checkpoint"
else bad "sample-custom continues a prompt from the alibi checkpoint" "$(cat s.out)"; fi
expect_error "build/sample without the mixer names it, its fields and the fix" \
    'holds a model of the mixer "alibi" (alibi alibi_max=5), which this program lacks.*EXTRA_MIXERS' "$B/sample" a.st
expect_error "build/train --resume without the mixer too" 'which this program lacks' "$B/train" text.txt --resume a.st

# 4. ablate: a row of its own
if "$B/ablate-custom" --models sdpa,alibi --quick --steps 20 --threads 1 --out ab > ab.out 2>&1 &&
   grep -q '^| alibi ' ab.md && grep -q '^alibi,' ab.csv && "$B/ablate-custom" --help 2>&1 | grep -q 'feedback_kv, alibi'
then ok "ablate-custom trains alibi beside sdpa and gives it a row in the table and the CSV"
else bad "ablate-custom gives alibi a row" "$(tail -5 ab.out)"; fi

# 5. bench_model: the mixer is one of its rows, its FLOPs from its flops hook (the q, k, v, out
# products and the attention: sdpa's count at the same sizes)
BM=(--steps 1 --warmup 1 --seq 16 --batch 2 --d-model 32 --heads 4 --layers 1 --d-ff 64 --threads 1 --pos none)
fa=$("$B/bench_model-custom" --mixer alibi "${BM[@]}" 2>&1 | sed -n 's/^RESULT.* mflop_tok=\([0-9.]*\).*/\1/p')
fs=$("$B/bench_model-custom" --mixer sdpa "${BM[@]}" 2>&1 | sed -n 's/^RESULT.* mflop_tok=\([0-9.]*\).*/\1/p')
if "$B/bench_model-custom" --list-mixers | grep -qx alibi && [ -n "$fa" ] && [ "$fa" = "$fs" ] && [ "$fa" != 0.0000 ]
then ok "bench_model-custom runs alibi, counting its FLOPs through its hook ($fa MFLOP/token, as sdpa's $fs)"
else bad "bench_model-custom runs alibi with its FLOPs" "alibi '$fa', sdpa '$fs'"; fi
finish
