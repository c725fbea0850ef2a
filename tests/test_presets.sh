#!/usr/bin/env bash
# The experiment presets (examples/common.h [presets], docs/math.md §21) in build/train and
# build/ablate: --list-presets names every preset, --preset NAME prints the exact options it
# expands to and later options override them, an unknown preset is refused with the list.
# Needs build/train and build/ablate (make examples). Prints ok/FAIL lines and the summary line.
set -u
cd "$(dirname "$0")/.."
TRAIN=${TRAIN:-$PWD/build/train}
ABLATE=${ABLATE:-$PWD/build/ablate}
# shellcheck source=tests/lib.sh
. tests/lib.sh
start_test "$TRAIN" "make examples"
[ -x "$ABLATE" ] || { bad "$ABLATE is missing: run make examples first"; finish; exit 1; }

NAMES="xl compressive fast_weights feedback feedback_kv metaformer mha"
awk 'BEGIN { for (i = 0; i < 300; i++) printf "It is the %s of the %s, my lord.\n", (i % 3 ? "king" : "queen"), (i % 7 ? "sea" : "night") }' > text.txt
SIZES=(--d-model 16 --heads 2 --layers 1 --d-ff 32 --seq-len 16 --batch 4 --threads 1)
TINY=("${SIZES[@]}" --eval-batches 1)

# 1. --list-presets: every preset with its options, in both programs
for prog in "$TRAIN" "$ABLATE"; do
    "$prog" --list-presets > list.out 2>&1; rc=$?
    listed=$(awk '/^  [a-z_]+ / {print $1}' list.out | tr '\n' ' ')
    if [ $rc -eq 0 ] && [ "$listed" = "$NAMES " ]; then ok "$(basename "$prog") --list-presets: $NAMES"
    else bad "$(basename "$prog") --list-presets names every preset" "rc $rc" "$(cat list.out)"; fi
done

# 2. train --preset fast_weights expands as documented; later options override it
FW="--mixer fast_weights --pos none --act relu --clone-layers --optimizer adam_labml --schedule noam --lr 1 --warmup 2000 \
--clip 1 --dropout 0 --d-model 512 --heads 8 --layers 6 --d-ff 2048 --seq-len 128 --batch 16 --epochs 128 \
--inner-iterations 25 --prompt \"It is\" --sample 25 --greedy"
"$TRAIN" text.txt --preset fast_weights "${TINY[@]}" --epochs 0 --steps 3 > fw.out 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -qxF "preset fast_weights (labml fast-weights experiment (docs/math.md §14)): $FW" fw.out
then ok "train --preset fast_weights prints the options it expands to"
else bad "train --preset fast_weights prints the options it expands to" "rc $rc" "$(cat fw.out)"; fi
if grep -q '^model: fast_weights mixer (dpfp-nu 1, chunk 0), d_model 16, 2 heads, 1 layers, d_ff 32, T 16' fw.out &&
   grep -q '^train: adam_labml, noam schedule, lr 1, warmup 2000, batch 4, 3 steps' fw.out &&
   grep -q -- '--- sample (greedy) ---' fw.out && grep -q '^It is' fw.out
then ok "the options after --preset override it (sizes, --epochs 0 --steps 3); its schedule and greedy sample stay"
else bad "the options after --preset override it" "$(cat fw.out)"; fi

# 3. --epochs: steps = epochs x the loader's batches per epoch; xl validates by labml's protocol (no
#    --eval-batches: its parts are 1/--inner-iterations of the validation stream)
"$TRAIN" text.txt --preset xl "${SIZES[@]}" --epochs 1 --inner-iterations 2 --sample 0 > xl.out 2>&1; rc=$?
steps=$(sed -n 's/^train: .* batch 4, \([0-9]*\) steps$/\1/p' xl.out)
if [ $rc -eq 0 ] && [ -n "$steps" ] && [ "$steps" -gt 10 ] && [ "$(grep -c 'valid loss' xl.out)" -eq 2 ] &&
   grep -q '^loader: sequential, 4 columns' xl.out && grep -q "^step $steps: valid loss .*\[labml part 2/2: " xl.out
then ok "--preset xl --epochs 1: one pass of the sequential loader ($steps steps), validated per inner iteration (labml)"
else bad "--preset xl --epochs 1: one pass, validated per inner iteration" "rc $rc" "$(cat xl.out)"; fi

# 4. the MetaFormer preset with another mixer: its sdpa-only --attn-bias 0 does not stop it
"$TRAIN" text.txt --preset metaformer --mixer metric "${TINY[@]}" --steps 3 --warmup 1 --sample 0 > mf.out 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q '^model: metric mixer' mf.out && grep -q '^train: adamw, cosine schedule, lr 0.001' mf.out
then ok "train --preset metaformer --mixer metric trains (AdamW, cosine)"
else bad "train --preset metaformer --mixer metric trains" "rc $rc" "$(cat mf.out)"; fi

# 5. ablate --preset: the preset's models with its seed and size options
"$ABLATE" text.txt --preset fast_weights "${TINY[@]}" --steps 2 --out ab > ab.out 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q '^preset fast_weights (.*): --models fast_weights,linear --pos none --act relu --clone-layers' ab.out &&
   ! grep -q -- '--epochs' ab.out && grep -q '^| fast_weights ' ab.md && grep -q '^| linear ' ab.md
then ok "ablate --preset fast_weights: models fast_weights and linear, without train's options"
else bad "ablate --preset fast_weights: models fast_weights and linear" "rc $rc" "$(cat ab.out)"; fi

# 6. errors
LIST="choose one of xl, compressive, fast_weights, feedback, feedback_kv, metaformer, mha"
expect_error "train: an unknown preset is refused with the list" "unknown --preset \"nope\"; $LIST" "$TRAIN" text.txt --preset nope
expect_error "ablate: an unknown preset is refused with the list" "unknown --preset \"nope\"; $LIST" "$ABLATE" --preset=nope
expect_error "two presets" "--preset is given twice" "$TRAIN" text.txt --preset xl --preset mha
expect_error "--preset without a name" "option --preset needs a value" "$TRAIN" text.txt --preset
finish
