#!/usr/bin/env bash
# Non-finite values and memory caps in build/train: a loss that goes NaN (lr 1e30) stops
# training with the step and the values, and the checkpoint on disk is the last good one, byte for
# byte the checkpoint of a run stopped before that step; --skip-nonfinite N skips N such steps, each
# with a line, and stops at the next; --check-finite names the op; --memory-limit too small fails
# naming the cap, one large enough changes no loss. Needs build/train. Prints ok/FAIL lines and the
# runner's summary line.
set -u
cd "$(dirname "$0")/.."
TRAIN=${TRAIN:-$PWD/build/train}
# shellcheck source=tests/lib.sh
. tests/lib.sh
start_test "$TRAIN" "make examples"

awk 'BEGIN { for (i = 0; i < 120; i++) printf "The king speaks of the crown %d times; the sea waits.\n", i }' > text.txt
TINY=(text.txt --d-model 16 --heads 2 --layers 1 --d-ff 32 --seq-len 16 --batch 4 --threads 1 --log-every 1
      --eval-batches 2 --sample 0)
losses() { grep -E '^step [0-9]+/[0-9]+ ' "$1" | awk '{print $2, $4}'; }
NONFINITE='the loss is \(NaN\|[-+]Inf\) and the gradient norm \(NaN\|[-+]Inf\|[0-9.e+-]*\): not finite'

# 1. lr 1e30: step 1 is finite, then the weights overflow; training stops at the first non-finite
#    step and the checkpoint saved every step is the one of the step before, unchanged
DIVERGE=("$TRAIN" "${TINY[@]}" --steps 6 --lr 1e30 --schedule constant)
"${DIVERGE[@]}" --save ck.st --save-every 1 > div.out 2> div.err; rc=$?
stop=$(sed -n 's/^train: error: step \([0-9]*\): the loss is.*/\1/p' div.err)
name="a NaN loss stops training with the step and the values, naming the last good checkpoint"
if [ $rc -eq 1 ] && [ -n "$stop" ] && grep -q "$NONFINITE" div.err &&
   grep -q "the checkpoint \"ck.st\" of step $((stop - 1)) is the last good one" div.err &&
   [ "$(losses div.out | wc -l)" -eq $((stop - 1)) ]
then ok "$name (step $stop)"
else bad "$name" "rc $rc" "$(cat div.out div.err)"; fi
[ -n "$stop" ] || stop=2
"${DIVERGE[@]}" --save ref.st --stop-after $((stop - 1)) > ref.out 2>&1
if [ -s ck.st ] && cmp -s ck.st ref.st
then ok "the checkpoint on disk after the stop is the last good one (byte for byte a run stopped at step $((stop - 1)))"
else bad "the checkpoint on disk after the stop is the last good one" "$(ls -l ck.st ref.st 2>&1)" "$(cat ref.out)"; fi

# 2. --skip-nonfinite 2: two lines "skipped ... 1 of / 2 of", then the third stops
"${DIVERGE[@]}" --skip-nonfinite 2 > skip.out 2> skip.err; rc=$?
name="--skip-nonfinite 2: two steps skipped, each with a line, and the third non-finite one stops"
if [ $rc -eq 1 ] && [ "$(grep -c 'not finite, skipped (no update, gradients zeroed); [12] of --skip-nonfinite 2' skip.out)" -eq 2 ] &&
   grep -q '2 of --skip-nonfinite 2' skip.out && grep -q "budget is spent" skip.err && grep -q "$NONFINITE" skip.err
then ok "$name"
else bad "$name" "rc $rc" "$(cat skip.out skip.err)"; fi
"$TRAIN" "${TINY[@]}" --steps 4 --skip-nonfinite 3 > clean.out 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q '^skipped 0 non-finite steps (--skip-nonfinite 3)$' clean.out && ! grep -q 'not finite' clean.out
then ok "--skip-nonfinite on a finite run: nothing skipped, the count in the summary"
else bad "--skip-nonfinite on a finite run: the count in the summary" "rc $rc" "$(cat clean.out)"; fi

# 3. --check-finite names the op where the value starts (and changes no finite loss)
"${DIVERGE[@]}" --check-finite > check.out 2> check.err; rc=$?
if [ $rc -eq 1 ] && grep -q "training step $stop failed: non-finite value (check mode): op [a-z_0-9]* made" check.err
then ok "--check-finite names the op that made the first non-finite value"
else bad "--check-finite names the op that made the first non-finite value" "rc $rc" "$(cat check.out check.err)"; fi
"$TRAIN" "${TINY[@]}" --steps 4 > plain.out 2>&1
"$TRAIN" "${TINY[@]}" --steps 4 --check-finite > checked.out 2>&1; rc=$?
if [ $rc -eq 0 ] && [ "$(losses plain.out | wc -l)" -eq 4 ] && [ "$(losses plain.out)" = "$(losses checked.out)" ]
then ok "--check-finite on a finite run: the same losses"
else bad "--check-finite on a finite run: the same losses" "rc $rc" "$(cat checked.out)"; fi

# 4. --memory-limit: 1 MiB does not hold this run (the cap and who asked are named); 64 MiB does,
#    with the same losses
expect_error "--memory-limit 1: names the cap and what asked for more" "memory limit: .* asks for [0-9]* more bytes, but the context already uses [0-9]* of its 1048576-byte cap" \
    "$TRAIN" "${TINY[@]}" --steps 4 --memory-limit 1
"$TRAIN" "${TINY[@]}" --steps 4 --memory-limit 64 > capped.out 2>&1; rc=$?
if [ $rc -eq 0 ] && [ "$(losses capped.out)" = "$(losses plain.out)" ]
then ok "--memory-limit 64: the same losses as without a cap"
else bad "--memory-limit 64: the same losses as without a cap" "rc $rc" "$(cat capped.out)"; fi

finish
