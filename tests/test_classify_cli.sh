#!/usr/bin/env bash
# The classification example (examples/classify.c) end to end: the generated "repeat" task reaches a
# stated held-out accuracy with a fixed seed while a model without token mixing stays near chance;
# a tiny labelled file (LABEL<TAB>TEXT, byte and character tokens) trains; --save / --load give the
# same accuracy; bad files and options exit 1 with a message that names the problem.
# Needs build/classify (make build/classify). Prints ok/FAIL lines and the runner's summary line.
set -u
cd "$(dirname "$0")/.."
CLS=${CLS:-$PWD/build/classify}
# shellcheck source=tests/lib.sh
. tests/lib.sh
start_test "$CLS" "make build/classify"

acc() { sed -n 's/^held-out accuracy: \([0-9.]*\)%.*/\1/p' "$1"; }          # the final accuracy
at_least() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "" && a + 0 >= b) }'; }

# ==== 1. the generated task: attention solves it, no token mixing cannot ====
"$CLS" --threads 1 --seed 1 > repeat.out 2>&1; rc=$?
if [ $rc -eq 0 ] && at_least "$(acc repeat.out)" 90; then ok "repeat task: quadratic mixer, held-out accuracy $(acc repeat.out)% >= 90%"
else bad "repeat task: quadratic mixer reaches 90%" "rc $rc" "$(cat repeat.out)"; fi
"$CLS" --threads 1 --seed 1 --mixer identity > identity.out 2>&1; rc=$?
if [ $rc -eq 0 ] && ! at_least "$(acc identity.out)" 65; then ok "repeat task: identity mixer stays near chance ($(acc identity.out)%)"
else bad "repeat task: identity mixer stays below 65%" "rc $rc" "$(cat identity.out)"; fi

# ==== 1b. --seeds: models of several initialisations on the same data; the first is the single run ====
"$CLS" --threads 1 --seed 1 --steps 200 --eval-every 200 > one.out 2>&1
"$CLS" --threads 1 --seed 1 --steps 200 --eval-every 200 --seeds 3 > seeds.out 2>&1; rc=$?
accs=$(acc seeds.out | tr '\n' ' ')
line=$(grep '^held-out accuracy over 3 seeds: ' seeds.out)
if [ $rc -eq 0 ] && [ "$(echo "$accs" | wc -w)" -eq 3 ] && [ "${accs%% *}" = "$(acc one.out)" ] &&
   awk -v a="$accs" -v l="$line" 'BEGIN { split(a, v, " "); m = (v[1] + v[2] + v[3]) / 3; split(l, w, " ");
       got = w[6] + 0; exit !((got - m) ^ 2 < 0.01 && l ~ /± [0-9.]+ \(95% interval \[[0-9.-]+, [0-9.]+\]\)$/) }'
then ok "--seeds 3: three models (the first = the single run, $(acc one.out)%), their mean ± sd and 95% interval"
else bad "--seeds 3: three models and their statistics" "rc $rc" "$(cat seeds.out)"; fi
expect_error "--seeds with --save" "--seeds 2 trains 2 models; --save takes one" "$CLS" --seeds 2 --save x.safetensors
# --precision bf16 (a check of the option; bf16's numerics are tests/test_bf16.c's): the same run on the
# CPU's bf16 products learns as well
"$CLS" --threads 1 --seed 1 --steps 200 --eval-every 200 --precision bf16 > bf16.out 2>&1; rc=$?
if [ $rc -eq 0 ] && awk -v a="$(acc bf16.out)" -v b="$(acc one.out)" 'BEGIN { exit !(a - b <= 5 && b - a <= 5) }'
then ok "--precision bf16: accuracy $(acc bf16.out)% against fp32's $(acc one.out)% (within 5 points)"
else bad "--precision bf16 learns as fp32 does" "rc $rc" "$(tail -n 3 bf16.out)"; fi

# ==== 2. a tiny labelled file: the label is the case of the text ====
awk 'BEGIN {
    n = split("alpha|bravo|charlie|delta|echo|foxtrot|golf|hotel|india|juliet|kilo|lima", w, "|");
    for (i = 0; i < 200; i++) {
        t = w[i % n + 1] " " w[(i * 7 + 3) % n + 1] " " w[(i * 5 + 1) % n + 1];
        if (i % 2) printf "upper\t%s\n", toupper(t); else printf "lower\t%s%s\n", t, i % 10 == 4 ? "\r" : "";
        if (i == 50) printf "\n";
    }
}' > labelled.tsv
"$CLS" labelled.tsv --threads 1 --steps 300 --seq-len 32 --save bytes.safetensors > bytes.out 2>&1; rc=$?
if [ $rc -eq 0 ] && at_least "$(acc bytes.out)" 95 && grep -q '200 examples (180 train, 20 held out), 2 classes, vocabulary 256' bytes.out
then ok "labelled file, byte tokens: $(acc bytes.out)% held out"
else bad "labelled file, byte tokens: 200 examples, >= 95%" "rc $rc" "$(cat bytes.out)"; fi
"$CLS" labelled.tsv --threads 1 --steps 300 --seq-len 8 --tokens chars --mixer sdpa --save chars.safetensors > chars.out 2>&1; rc=$?
if [ $rc -eq 0 ] && at_least "$(acc chars.out)" 95 && grep -q '200 texts were longer than --seq-len 8' chars.out
then ok "labelled file, character tokens, texts cut to 8: $(acc chars.out)% held out"
else bad "labelled file, character tokens" "rc $rc" "$(cat chars.out)"; fi

# ==== 3. --save / --load: the same model, the same accuracy; its settings come from the file ====
for kind in bytes chars; do
    "$CLS" labelled.tsv --threads 1 --load $kind.safetensors --steps 0 > load_$kind.out 2>&1; rc=$?
    if [ $rc -eq 0 ] && [ "$(grep '^held-out accuracy' load_$kind.out)" = "$(grep '^held-out accuracy' $kind.out)" ]
    then ok "--load $kind: $(grep '^held-out accuracy' load_$kind.out)"
    else bad "--load $kind gives the saved model's accuracy" "rc $rc" "$(cat load_$kind.out)"; fi
done
"$CLS" --threads 1 --steps 50 --save task.safetensors > /dev/null 2>&1
"$CLS" --threads 1 --load task.safetensors --steps 0 > load_task.out 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q '^repeat: 2000 examples' load_task.out; then ok "--load of a task model: the stored task"
else bad "--load of a task model evaluates on its own task" "rc $rc" "$(cat load_task.out)"; fi
expect_error "--load with another --task" "give --task repeat or drop --task" "$CLS" --load task.safetensors --task majority
expect_error "--load with a model option" "the model's settings come from the checkpoint" "$CLS" --load task.safetensors --d-model 16
expect_error "--load of a task model on a text file" "was trained on the generated task repeat; drop the text file" "$CLS" labelled.tsv --load task.safetensors
expect_error "--load of a text model without a file" "was trained on a labelled text file (bytes tokens)" "$CLS" --load bytes.safetensors
printf 'lower\tabc\nother\tdef\n' > newlabel.tsv
expect_error "--load: a label the model lacks" "label \"other\" is not one of the model's classes" "$CLS" newlabel.tsv --load bytes.safetensors
printf 'lower\tzzz\nupper\tQQQ\n' > newchars.tsv
expect_error "--load: a character outside the vocabulary" "newchars.tsv\" line 1" "$CLS" newchars.tsv --load chars.safetensors
printf 'not a checkpoint' > junk.safetensors
expect_error "--load of a file that is no checkpoint" "--load:" "$CLS" --load junk.safetensors

# ==== 4. bad files and options ====
: > empty.tsv
expect_error "empty file" "is empty" "$CLS" empty.tsv
printf 'lower abc\n' > notab.tsv
expect_error "a line without a tab" "line 1 has no tab" "$CLS" notab.tsv
printf 'a\tx\n\tyy\n' > nolabel.tsv
expect_error "an empty label" "line 2 has an empty label" "$CLS" nolabel.tsv
printf 'a\tx\nb\t\n' > notext.tsv
expect_error "an empty text" "line 2 has an empty text" "$CLS" notext.tsv
printf 'a\tx\na\ty\n' > onelabel.tsv
expect_error "a single label" "a classifier needs at least 2" "$CLS" onelabel.tsv
printf 'a\tx\n' > oneline.tsv
expect_error "a single example" "give at least 2" "$CLS" oneline.tsv
printf 'a\tx\0y\nb\tz\n' > binary.tsv
expect_error "a binary file" "looks binary" "$CLS" binary.tsv
expect_error "a missing file" "cannot open" "$CLS" missing.tsv
expect_error "--task with a file" "give one of them" "$CLS" labelled.tsv --task majority
expect_error "--tokens without a file" "--tokens applies to a text file" "$CLS" --tokens chars
expect_error "a recurrent mixer without a non-causal form" "no non-causal form" "$CLS" --mixer fast_weights --steps 1
expect_error "unknown task" "unknown --task" "$CLS" --task nope
finish
