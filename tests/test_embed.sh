#!/usr/bin/env bash
# examples/embed, the program a user copies, run as a user runs it: it trains (the loss falls), the
# checkpoint it writes loads into a new context with the same loss (the program compares the two
# itself and exits 1 when they differ), and greedy generation continues its text. `make test` builds
# it with its own Makefile (make -C examples/embed; the CUDA build is tests/cuda_build.sh's).
# Needs build/embed/embed. Prints ok/FAIL lines and the runner's summary line.
set -u
cd "$(dirname "$0")/.."
EMBED=${EMBED:-$PWD/build/embed/embed}
# shellcheck source=tests/lib.sh
. tests/lib.sh
start_test "$EMBED" "make test (or make -C examples/embed)"

"$EMBED" > out.txt 2> err.txt; rc=$?
if [ $rc -eq 0 ] && [ ! -s err.txt ] && grep -q '^device: cpu, 2 layers, [0-9]* parameters$' out.txt
then ok "runs on the CPU and exits 0 without messages"
else bad "runs on the CPU and exits 0 without messages" "rc $rc" "$(cat out.txt err.txt)"; fi
# 150 steps of Adam on a 45-character cycle: from ~ln 28 = 3.3 to well under 0.5
first=$(awk '$1 == "step" && $2 == 0 { print $4 }' out.txt)
last=$(awk '$1 == "step" { v = $4 } END { print v }' out.txt)
if [ -n "$first" ] && [ -n "$last" ] && awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 3 && b < 0.5) }'
then ok "trains: the loss falls from $first to $last"
else bad "trains: the loss falls (first step > 3, last < 0.5)" "$(cat out.txt)"; fi
if [ -s embed.safetensors ] && grep -q '^loaded embed.safetensors: loss \([0-9.]*\) (saved model \1, first step ' out.txt
then ok "the checkpoint loads into a new context: the same loss as the saved model"
else bad "the checkpoint loads into a new context: the same loss as the saved model" "$(cat out.txt)"; fi
# the model has learned the text: greedy generation from "the " goes on with it. After "the " both
# "quick" and "lazy" occur, so any continuation that appears in the (repeating) text counts.
text=$(sed -n 's/^static const char text\[\] = "\(.*\)";.*/\1/p' "$OLDPWD/examples/embed/main.c")
gen=$(sed -n 's/^generated: //p' out.txt)
if [ -n "$text" ] && [ ${#gen} -ge 24 ] && case "$text$text" in *"${gen:0:24}"*) true ;; *) false ;; esac
then ok "greedy generation continues the text: \"$gen\""
else bad "greedy generation continues the text (24 characters of it)" "text: \"$text\"" "$(cat out.txt)"; fi

finish
