#!/usr/bin/env bash
# examples/train.c end to end on the emulated CUDA device (tests/cuda_emu.h runs the kernels on the
# CPU): every printed loss, validation loss and the greedy sample must equal the CPU run's.
# Uses build/emu/train_emu (made by `make test`). Prints ok/FAIL lines and the runner's summary.
set -u
cd "$(dirname "$0")/.."
BIN=${TRAIN_EMU:-build/emu/train_emu}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
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
        echo "ok   train.c $mixer: the emulated CUDA device prints the CPU's losses (to 1e-5) and sample"; pass=$((pass+1))
    else
        echo "FAIL train.c $mixer: emulated CUDA vs CPU"; diff "$tmp/cpu.txt" "$tmp/cuda.txt" | head -10; fail=$((fail+1))
    fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
