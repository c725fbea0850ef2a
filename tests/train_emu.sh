#!/usr/bin/env bash
# examples/train.c end to end on the emulated CUDA device (tests/cuda_emu.h runs the kernels on the
# CPU): every printed loss, validation loss and the greedy sample must equal the CPU run's; with
# --precision bf16 the losses stay within 2% of them, and checkpoints resume across the two (below).
# Uses build/emu/train_emu (made by `make test`). Prints ok/FAIL lines and the runner's summary.
set -u
cd "$(dirname "$0")/.."
BIN=${TRAIN_EMU:-build/emu/train_emu}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
ok()  { echo "ok   $1"; pass=$((pass+1)); }
bad() { echo "FAIL $1"; shift; printf '    %s\n' "$@" | head -12; fail=$((fail+1)); }
awk 'BEGIN { srand(3); split("the king and queen of a land far away spoke to the people who listened", w, " ");
             for (i = 0; i < 2500; i++) printf "%s%s", w[int(rand() * 15) + 1], (i % 12 == 11 ? ".\n" : " ") }' > "$tmp/text.txt"
# The two runs print the same lines word for word, except that a number may differ from the CPU's
# by 1e-5 of its size (the parity suites' bound): the device sums in other orders (GEMM blocks, row
# reductions), so a loss can round to a neighbouring last printed digit.
same_run() {
    awk 'function num(w) { return w ~ /^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$/ }
         function abs(v) { return v < 0 ? -v : v }
         NR == FNR { line[FNR] = $0; n = FNR; next }
         { m = FNR; ca = split(line[FNR], a); cb = split($0, b)
           if (ca != cb) { bad = 1; next }
           for (i = 1; i <= ca; i++)
               if (a[i] != b[i] && !(num(a[i]) && num(b[i]) && abs(a[i] - b[i]) <= 1e-5 * (abs(a[i]) > abs(b[i]) ? abs(a[i]) : abs(b[i]))))
                   bad = 1 }
         END { exit (bad || n != m) }' "$1" "$2"
}
# one run per mixer and memory model: "name|its options"
# (linear with elu+1 features: DPFP nu 1 starts this tiny model with nearly disjoint features, whose
#  ~eps denominators make its 7th printed digit depend on the summation order)
MODELS=("sdpa|--mixer sdpa" "metric|--mixer metric" "pool|--mixer pool"
        "relative|--mixer relative --mem-len 16" "compressive|--compressive --mem-len 16 --c-mem-len 8 --compression-rate 2"
        "fast_weights|--mixer fast_weights" "linear|--mixer linear --feature elu1"
        "feedback|--feedback" "feedback_kv|--feedback-kv")
for model in "${MODELS[@]}"; do
    mixer=${model%%|*}
    args="$tmp/text.txt ${model#*|} --d-model 32 --heads 2 --layers 2 --d-ff 48 --seq-len 24 --batch 3 --steps 8 --log-every 2 --eval-every 4 --eval-batches 2 --dropout 0.1 --sample 30"
    # drop what legitimately differs (speed, timing)
    "$BIN" $args --device cpu  2>&1 | sed -e 's/ *[0-9.]* tok\/s.*//' -e 's/ in [0-9.]* s.*//' > "$tmp/cpu.txt"
    "$BIN" $args --device cuda 2>&1 | sed -e 's/ *[0-9.]* tok\/s.*//' -e 's/ in [0-9.]* s.*//' > "$tmp/cuda.txt"
    if grep -q "valid loss" "$tmp/cpu.txt" && same_run "$tmp/cpu.txt" "$tmp/cuda.txt"; then
        ok "train.c $mixer: the emulated CUDA device prints the CPU's losses (to 1e-5) and sample"
    else bad "train.c $mixer: emulated CUDA vs CPU" "$(diff "$tmp/cpu.txt" "$tmp/cuda.txt")"; fi
done

# --precision bf16 (mixed precision on the device): every printed loss within 2% of the CPU's fp32
# run (bf16 operands over 8 steps of a tiny model), for sdpa and for fast_weights in chunks of 4 (its
# chunkwise kernels in bf16); a CPU asked for bf16 trains on its bf16 products; a bf16 checkpoint
# resumes on the CPU (in bf16) and a CPU checkpoint resumes in bf16.
losses() { awk '/^step [0-9]+\/[0-9]+ +loss / { print $2, $4 } /^step [0-9]+: valid loss / { print $1 $2, $5 }' "$1"; }
near() { # REF RUN: every loss REF prints (at least 5), RUN prints at the same step within 2% (a run
          # stopped by --stop-after adds a validation at its stop)
    awk 'NR == FNR { ref[$1] = $2; next } ($1 in ref) { d = $2 - ref[$1]; if (d < 0) d = -d; if (d <= 0.02 * ref[$1]) ok[$1] = 1 }
         END { for (k in ref) { n++; if (!(k in ok)) bad = 1 } exit bad || n < 5 }' <(losses "$1") <(losses "$2")
}
TINY="$tmp/text.txt --d-model 32 --heads 2 --layers 2 --d-ff 48 --seq-len 24 --batch 3 --steps 8 --log-every 1 --eval-every 4 --eval-batches 2 --sample 0"
for model in "sdpa|--mixer sdpa" "fast_weights|--mixer fast_weights --chunk 4"; do
    mixer=${model%%|*}
    # shellcheck disable=SC2086
    "$BIN" $TINY ${model#*|} --device cpu > "$tmp/cpu_$mixer.txt" 2>&1
    # shellcheck disable=SC2086
    "$BIN" $TINY ${model#*|} --device cuda --precision bf16 > "$tmp/bf16.txt" 2>&1
    # (and bf16 must show: some loss off the CPU's by more than fp32's 1e-5)
    if near "$tmp/cpu_$mixer.txt" "$tmp/bf16.txt" && ! same_run <(losses "$tmp/cpu_$mixer.txt") <(losses "$tmp/bf16.txt"); then
        ok "train.c $mixer --precision bf16: every loss within 2% of the CPU's fp32 run, not equal to it"
    else bad "train.c $mixer --precision bf16 vs the CPU's fp32 losses" "$(paste <(losses "$tmp/cpu_$mixer.txt") <(losses "$tmp/bf16.txt"))" "$(tail -3 "$tmp/bf16.txt")"; fi
done
# shellcheck disable=SC2086
"$BIN" $TINY --device cpu --precision bf16 > "$tmp/cpu_bf16.txt" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && grep -q "^precision: bf16 products on the CPU's" "$tmp/cpu_bf16.txt" && near "$tmp/cpu_sdpa.txt" "$tmp/cpu_bf16.txt"; then
    ok "train.c --device cpu --precision bf16: the CPU's bf16 kernel, every loss within 2% of fp32's"
else bad "train.c --device cpu --precision bf16 (status $rc)" "$(cat "$tmp/cpu_bf16.txt")"; fi
# bf16 for 3 steps, the CPU to step 6, bf16 again to the end (sdpa); against the CPU's uninterrupted run
# shellcheck disable=SC2086
{ "$BIN" $TINY --device cuda --precision bf16 --save "$tmp/ck.st" --stop-after 3 > "$tmp/r1.txt" 2>&1 &&
  "$BIN" $TINY --device cpu --resume "$tmp/ck.st" --stop-after 3 > "$tmp/r2.txt" 2>&1 &&
  "$BIN" $TINY --device cuda --precision bf16 --resume "$tmp/ck.st" > "$tmp/r3.txt" 2>&1; }
rc=$?
cat "$tmp/r1.txt" "$tmp/r2.txt" "$tmp/r3.txt" > "$tmp/r.txt"
# (the CPU continues in bf16)
if [ "$rc" -eq 0 ] && grep -q "^precision: bf16 products on the CPU's" "$tmp/r2.txt" &&
   grep -q "resumed from .* at step 3" "$tmp/r2.txt" && grep -q "resumed from .* at step 6" "$tmp/r3.txt" &&
   [ "$(losses "$tmp/r.txt" | grep -c '^[0-9]*/8 ')" -eq 8 ] && near "$tmp/cpu_sdpa.txt" "$tmp/r.txt"; then
    ok "train.c: bf16 on the device -> --resume on the CPU (with a note) -> --resume in bf16: the CPU run's losses within 2%"
else bad "train.c: bf16 -> CPU -> bf16 resume (status $rc)" "$(paste <(losses "$tmp/cpu_sdpa.txt") <(losses "$tmp/r.txt"))" "$(tail -n 2 "$tmp/r2.txt" "$tmp/r3.txt")"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
