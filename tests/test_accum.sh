#!/usr/bin/env bash
# Gradient accumulation in build/train (docs/math.md §18.2): --batch 2 --grad-accum 2 trains like
# --batch 4 (the same windows, the loss of the whole batch each step: the training losses agree to
# the 6 printed decimals, within 2e-6 for rounding) for one model of each family, the memory models
# included; the validation loss too (validation batches are the rows of a step, so both read the same
# windows, the memory models' columns included).
# A checkpoint records --grad-accum: a resumed run keeps it (and continues bit-identically), another
# value is refused. Needs build/train (make examples).
set -u
cd "$(dirname "$0")/.."
TRAIN=${TRAIN:-$PWD/build/train}
# shellcheck source=tests/lib.sh
. tests/lib.sh
start_test "$TRAIN" "make examples"

awk 'BEGIN { srand(3); split("the king and queen of a land far away spoke to the people who listened", w, " ");
             for (i = 0; i < 700; i++) printf "%s%s", w[int(rand() * 15) + 1], (i % 12 == 11 ? ".\n" : " ") }' > text.txt
TINY=(text.txt --d-model 16 --heads 2 --layers 2 --d-ff 32 --seq-len 12 --threads 1 --log-every 1 --steps 5
      --eval-every 0 --sample 0 --lr 3e-3 --pos none)
losses() { grep -E '^step [0-9]+/[0-9]+ ' "$1" | awk '{ print $4 }'; }
valid() { grep -E '^step [0-9]+: valid loss' "$1" | awk '{ print $5 }'; }
# the two columns of numbers agree within 2e-6 (and have 5 rows)
close() { paste <(echo "$1") <(echo "$2") | awk 'function abs(v) { return v < 0 ? -v : v }
    { n++; if (abs($1 - $2) > 2e-6) bad++ } END { exit !(n == 5 && bad == 0) }'; }

for v in "sdpa|--mixer sdpa" "relative|--mixer relative --mem-len 6" \
         "compressive|--compressive --mem-len 4 --c-mem-len 4 --compression-rate 2" \
         "fast_weights|--mixer fast_weights" "feedback|--mixer feedback"; do
    name=${v%%|*}
    # shellcheck disable=SC2086
    "$TRAIN" "${TINY[@]}" ${v#*|} --batch 4 --eval-batches 2 > "$name.big" 2>&1 &&
    "$TRAIN" "${TINY[@]}" ${v#*|} --batch 2 --grad-accum 2 --eval-batches 2 > "$name.acc" 2>&1 ||
        { bad "$name: a run failed" "$(tail -3 "$name.big" "$name.acc")"; continue; }
    if close "$(losses "$name.big")" "$(losses "$name.acc")" && grep -q "batch 2 x 2 accumulated micro-batches" "$name.acc"; then
        ok "$name: --batch 2 --grad-accum 2 gives the training losses of --batch 4: $(losses "$name.acc" | tr '\n' ' ')"
    else bad "$name: --batch 2 --grad-accum 2 against --batch 4" "$(paste <(losses "$name.big") <(losses "$name.acc"))"; fi
    if awk -v a="$(valid "$name.big")" -v b="$(valid "$name.acc")" 'BEGIN { d = a - b; exit !(a != "" && d * d <= 4e-12) }'; then
        ok "$name: the same validation loss $(valid "$name.acc")"
    else bad "$name: validation loss" "$(valid "$name.big") $(valid "$name.acc")"; fi
done

# checkpoints: --grad-accum is a saved setting
"$TRAIN" "${TINY[@]}" --mixer relative --mem-len 6 --batch 2 --grad-accum 2 --steps 6 --save full.st > full.out 2>&1 &&
"$TRAIN" "${TINY[@]}" --mixer relative --mem-len 6 --batch 2 --grad-accum 2 --steps 6 --save part.st --stop-after 3 > p1.out 2>&1 &&
"$TRAIN" "${TINY[@]}" --steps 6 --resume part.st > p2.out 2>&1
if [ "$(losses full.out)" = "$(cat <(losses p1.out) <(losses p2.out))" ] && cmp -s full.st part.st; then
    ok "relative with --grad-accum 2: 3 steps + --resume = 6 steps, bit for bit (the checkpoint keeps --grad-accum)"
else bad "relative with --grad-accum 2: resume" "$(diff <(losses full.out) <(cat <(losses p1.out) <(losses p2.out)))" "$(tail -3 p2.out)"; fi
expect_error "--resume with another --grad-accum" "grad-accum" "$TRAIN" "${TINY[@]}" --steps 8 --resume part.st --grad-accum 3
expect_error "--grad-accum 0" "--grad-accum must be >= 1" "$TRAIN" "${TINY[@]}" --grad-accum 0
if "$TRAIN" --help | grep -q -- "--grad-accum"; then ok "--help lists --grad-accum"; else bad "--help lists --grad-accum"; fi
finish
