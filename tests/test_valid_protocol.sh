#!/usr/bin/env bash
# build/train --valid-protocol fixed|labml (docs/training.md "Validation"):
#   1. the default is the fixed protocol, and writes no protocol into the checkpoint;
#   2. labml walks the validation stream: with --inner-iterations 4 and --lr 0 (the weights stay the
#      initial ones) the 4 validations of a pass cover batches 1-3, 4-6, 7-9, 10-12 of the 12 without
#      overlap, their token-weighted mean equals one --eval-only --valid-protocol labml pass over the
#      whole stream with memories carried (to the 6 printed decimals: each of the 5 numbers is
#      rounded by at most 5e-7, so they agree within 1e-6), and the second pass repeats the first
#      exactly (its memories emptied when it starts). A validation that did not move on, or that
#      emptied the memories of a memory model, misses the whole-stream loss;
#   3. a run stopped (--stop-after) mid-part and at a part's end, then resumed without repeating
#      the protocol options, prints the training and validation lines of the uninterrupted run and
#      ends with the same checkpoint byte for byte (the validation memories are in it), for the
#      memory models (relative, compressive, with dropout) and a shuffled-loader model (sdpa);
#   4. a checkpoint that validated otherwise resumes under labml with its validation memories emptied,
#      and says so; the options labml replaces or needs are refused with the fix.
# Needs build/train (make build/train). Prints ok/FAIL lines and the summary line.
set -u
cd "$(dirname "$0")/.."
TRAIN=${TRAIN:-$PWD/build/train}
# shellcheck source=tests/lib.sh
. tests/lib.sh
start_test "$TRAIN" "make build/train"

awk 'BEGIN { srand(5); split("the king and queen of a land far away spoke to the people who listened", w, " ");
             for (i = 0; i < 900; i++) printf "%s%s", w[int(rand() * 15) + 1], (i % 12 == 11 ? ".\n" : " ") }' > text.txt
# 3 columns: 107 training batches of 12 per pass, 12 validation batches (the last 9 long)
TINY=(text.txt --d-model 16 --heads 2 --layers 2 --d-ff 32 --seq-len 12 --batch 3 --threads 1 --log-every 1 --sample 0)
REL=(--mixer relative --mem-len 5)
CMP=(--compressive --mem-len 5 --c-mem-len 4 --compression-rate 2)
LABML=(--valid-protocol labml --inner-iterations 4)
valid_lines() { grep -E '^step [0-9]+: valid loss' "$1"; }

# 1. the default
"$TRAIN" "${TINY[@]}" "${REL[@]}" --steps 6 --eval-every 2 --eval-batches 2 --save d.st > d.out 2>&1; rc=$?
"$TRAIN" "${TINY[@]}" "${REL[@]}" --steps 6 --eval-every 2 --eval-batches 2 --valid-protocol fixed > f.out 2>&1
if [ $rc -eq 0 ] && [ "$(valid_lines d.out | wc -l)" -eq 3 ] && [ "$(valid_lines d.out)" = "$(valid_lines f.out)" ] &&
   ! grep -q labml d.out && ! grep -aq 'train.valid_protocol' d.st
then ok "the default is --valid-protocol fixed (--eval-every, --eval-batches), and the checkpoint holds no protocol"
else bad "the default is --valid-protocol fixed" "rc $rc" "$(cat d.out)"; fi

# 2. the walk over the stream, for a memory model and one without memories
# shellcheck disable=SC2086 # the options in $v are words
for v in "relative|${REL[*]}" "sdpa|--mixer sdpa"; do
    name=${v%%|*}
    "$TRAIN" "${TINY[@]}" ${v#*|} "${LABML[@]}" --epochs 2 --lr 0 --schedule constant --save "$name.st" > "$name.w" 2>&1; rc=$?
    "$TRAIN" text.txt ${v#*|} --resume "$name.st" --eval-only --valid-protocol labml > "$name.e" 2>&1
    parts=$(valid_lines "$name.w" | sed -n 's/.*valid loss \([0-9.]*\) .*\[labml part \([0-9]*\)\/4: validation batches \([0-9]*\)-\([0-9]*\) of 12, \([0-9]*\) tokens\]$/\1 \2 \3 \4 \5/p')
    whole=$(sed -n 's/.*: valid loss \([0-9.]*\) .*/\1/p' "$name.e")
    tokens=$(sed -n 's/^(\([0-9]*\) validation tokens: the whole stream in order, 12 batches of 3 columns.*/\1/p' "$name.e")
    verdict=$(printf '%s\n' "$parts" | awk -v whole="$whole" -v tokens="$tokens" '
        { n++; if (n <= 4) { want = n; first = last + 1; line[n] = $0; s += $1 * $5; t += $5 }
          else { want = n - 4; first = (n == 5 ? 1 : last + 1); if ($0 != line[n - 4]) { print "pass 2 differs: " $0; bad = 1; exit } }
          if ($2 != want || $3 != first) { print "part " n " is " $0 ", not part " want " from batch " first; bad = 1; exit }
          last = $4 }
        END { if (bad) exit
              if (n != 8 || last != 12) { print n " parts ending at batch " last; exit }
              d = s / t - whole; if (d < 0) d = -d
              if (d > 1e-6 || t != tokens) printf "mean of the parts %.7f over %d tokens, whole stream %s over %s tokens\n", s / t, t, whole, tokens
              else print "ok" }')
    if [ $rc -eq 0 ] && [ "$verdict" = ok ]
    then ok "$name, labml: 4 validations per pass walk the 12 batches in order; their mean is the whole stream's ($whole); pass 2 repeats pass 1"
    else bad "$name, labml: the validations walk the stream" "rc $rc" "$verdict" "$(valid_lines "$name.w")" "$(cat "$name.e")"; fi
done

# 3. bit-exact resume: stopped mid-part (150: part 2 of pass 2 ends at 160) and at a part's end (80)
losses() { grep -E '^step [0-9]+/[0-9]+ ' "$1" | awk '{ s = $2 " " $4; if ($5 == "(ce") s = s " " $6 " " $9; print s }'; }
# shellcheck disable=SC2086 # the options in $opts are words
for v in "relative|150|${REL[*]} --dropout 0.1" "relative|80|${REL[*]} --dropout 0.1" "compressive|150|${CMP[*]}" \
         "sdpa|150|--mixer sdpa --dropout 0.1"; do
    name=${v%%|*}; rest=${v#*|}; stop=${rest%%|*}; opts=${rest#*|}
    "$TRAIN" "${TINY[@]}" $opts "${LABML[@]}" --epochs 2 --save full.st > full.out 2>&1 &&
    "$TRAIN" "${TINY[@]}" $opts "${LABML[@]}" --epochs 2 --save part.st --stop-after "$stop" > p1.out 2>&1 &&
    "$TRAIN" "${TINY[@]}" $opts --resume part.st > p2.out 2>&1; rc=$?
    if [ $rc -eq 0 ] && [ "$(losses full.out | wc -l)" -eq 214 ] && [ "$(valid_lines full.out | wc -l)" -eq 8 ] &&
       [ "$(losses full.out)" = "$(cat <(losses p1.out) <(losses p2.out))" ] &&
       [ "$(valid_lines full.out)" = "$(cat <(valid_lines p1.out) <(valid_lines p2.out))" ] &&
       grep -q "^validation: labml's protocol" p2.out && cmp -s full.st part.st
    then ok "$name, labml: stopped at step $stop and resumed = the uninterrupted run (losses, 8 validations, checkpoint)"
    else bad "$name, labml: stopped at step $stop and resumed = the uninterrupted run" "rc $rc" \
             "$(diff <(valid_lines full.out) <(cat <(valid_lines p1.out) <(valid_lines p2.out)))" "$(tail -3 p2.out)"; fi
done
if grep -q '^no validation at step 150: --valid-protocol labml validates at the end of each of the 4 parts of a pass (the next 10 steps on)$' p1.out
then ok "a run that stops between two parts says that it does not validate there, and when the next part ends"
else bad "a run that stops between two parts says so" "$(tail -3 p1.out)"; fi

# 4. a change of protocol on resume; the refusals
"$TRAIN" "${TINY[@]}" "${REL[@]}" --steps 30 --eval-every 0 --save old.st > old.out 2>&1 &&
"$TRAIN" "${TINY[@]}" "${REL[@]}" --resume old.st --steps 60 "${LABML[@]}" > new.out 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q 'note: the checkpoint validated otherwise .*: the validation memories start empty' new.out &&
   grep -q '^step 53: valid loss .*\[labml part 2/4: validation batches 4-6 of 12' new.out
then ok "a checkpoint of the fixed protocol resumes under labml, its validation memories emptied, and says so"
else bad "a checkpoint of the fixed protocol resumes under labml" "rc $rc" "$(cat new.out)"; fi
expect_error "labml without --inner-iterations" "valid-protocol labml needs --inner-iterations K" \
    "$TRAIN" "${TINY[@]}" --valid-protocol labml --steps 2
expect_error "labml with --eval-every" "drop --eval-every (or use --valid-protocol fixed)" \
    "$TRAIN" "${TINY[@]}" "${LABML[@]}" --eval-every 5 --steps 2
expect_error "labml with --eval-batches" "drop --eval-batches (or use --valid-protocol fixed)" \
    "$TRAIN" "${TINY[@]}" "${LABML[@]}" --eval-batches 2 --steps 2
expect_error "more parts than training batches" "use --inner-iterations 107 or fewer" \
    "$TRAIN" "${TINY[@]}" --valid-protocol labml --inner-iterations 108 --steps 2
expect_error "more parts than validation batches" "use --inner-iterations 12 or fewer, or more validation data" \
    "$TRAIN" "${TINY[@]}" --valid-protocol labml --inner-iterations 13 --steps 2
expect_error "an unknown protocol" 'unknown --valid-protocol "last"; choose one of fixed|labml' \
    "$TRAIN" "${TINY[@]}" --valid-protocol last
finish
