#!/usr/bin/env bash
# Training on token shards vs on the text file: tokens/s of build/train on the same tokens, same
# model and sequence length, runs alternated so that a noisy machine affects both alike.
#   bench/shards_vs_text.sh TEXT [PAIRS]      (e.g. Tiny Shakespeare's input.txt; PAIRS default 6)
# The shards are the text's character ids (build/tokenize --chars: build/train's own vocabulary).
set -euo pipefail
cd "$(dirname "$0")/.."
TEXT=${1:?usage: bench/shards_vs_text.sh TEXT [PAIRS]}
PAIRS=${2:-6}
make -s build/train build/tokenize
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
build/tokenize --chars "$TEXT" --out "$tmp/c" >/dev/null
C="--d-model 64 --heads 4 --layers 2 --d-ff 256 --seq-len 64 --batch 16 --steps 150 --eval-every 0 --eval-batches 1
   --sample 0 --threads 1 --log-every 100"
rate() { sed -n 's/^trained.*(\([0-9]*\) tokens\/s).*/\1/p'; }
echo "| pair | text tok/s | shards tok/s | shards / text |"
echo "|---|---:|---:|---:|"
for r in $(seq "$PAIRS"); do
    # shellcheck disable=SC2086
    t=$(build/train "$TEXT" $C | rate)
    # shellcheck disable=SC2086
    s=$(build/train --data "$tmp/c_train.bin" --valid "$tmp/c_val.bin" --tokenizer "$tmp/c.tok" $C | rate)
    echo "| $r | $t | $s | $(awk -v a="$s" -v b="$t" 'BEGIN { printf "%.3f", a / b }') |"
done
