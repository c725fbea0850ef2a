#!/usr/bin/env bash
# bpe_train.sh - BPE training: mf_tokenizer_train_bpe against Hugging Face `tokenizers`, side by side.
#
#   bench/bpe_train.sh FILE VOCAB_SIZE...          e.g. bench/bpe_train.sh build/corpus.txt 1024 8192
#
# For each vocabulary size: build/bench_bpe_train (ours, one thread) then bench/bpe_train_hf.py
# (tokenizers' BpeTrainer with the ByteLevel pre-tokenizer, RAYON_NUM_THREADS=1), REPS times
# (default 1) in turn, so both see the same machine load; the table gives the fastest run of each
# and the ratio, then how many of the first merges agree. They differ on ties (ours: the smaller
# (left, right) ids; HF: its own symbol ids, which are not byte values) and wherever the two
# pre-tokenizers differ. The venv build/venv-tok is made when missing and gets `tokenizers` when it
# lacks it (other benchmarks may share it). bench/bpe_corpus.py makes a large FILE.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ] || [ "$1" = "--help" ]; then sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2; fi
FILE=$1; shift
REPS=${REPS:-1}
[ -s "$FILE" ] || { echo "bpe_train.sh: $FILE is missing or empty" >&2; exit 1; }
VENV=build/venv-tok
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -c 'import tokenizers' 2>/dev/null || "$VENV/bin/pip" install -q tokenizers
mkdir -p build/bench_bpe
gcc -std=c99 -O2 -march=native -Wall -Wextra -pedantic bench/bench_bpe_train.c -o build/bench_bpe_train -lm
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }
best() { sort -g | head -n 1; }

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "file: $FILE ($(stat -c %s "$FILE") bytes); tokenizers $("$VENV/bin/python" -c 'import tokenizers; print(tokenizers.__version__)'); reps $REPS"
TABLE="| vocab | merges (ours / hf) | ours s | ours MB/s | ours merges/s | hf s | hf MB/s | hf / ours |"
TABLE="$TABLE"$'\n'"|---|---|---|---|---|---|---|---|"
for V in "$@"; do
    OURS=build/bench_bpe/ours_$V.txt HF=build/bench_bpe/hf_$V.txt
    : > "$OURS.log"; : > "$HF.log"
    for r in $(seq "$REPS"); do
        echo "== vocab $V, run $r"
        ./build/bench_bpe_train "$FILE" "$V" --merges build/bench_bpe/ours_$V.merges 2>/dev/null | tee -a "$OURS.log"
        RAYON_NUM_THREADS=1 "$VENV/bin/python" bench/bpe_train_hf.py "$FILE" "$V" --merges build/bench_bpe/hf_$V.merges \
            --compare build/bench_bpe/ours_$V.merges | tee -a "$HF.log"
    done
    o=$(grep '^RESULT' "$OURS.log" | field total_s | best); h=$(grep '^RESULT' "$HF.log" | field total_s | best)
    om=$(grep '^RESULT' "$OURS.log" | head -n1 | field merges); hm=$(grep '^RESULT' "$HF.log" | head -n1 | field merges)
    mb=$(grep '^RESULT' "$OURS.log" | head -n1 | field mb)
    ms=$(grep '^RESULT' "$OURS.log" | field merge_s | best)
    TABLE="$TABLE"$'\n'"| $V | $om / $hm | $o | $(awk "BEGIN{printf \"%.1f\", $mb/$o}") | $(awk "BEGIN{printf \"%.0f\", $om/$ms}") | $h | $(awk "BEGIN{printf \"%.1f\", $mb/$h}") | $(awk "BEGIN{printf \"%.2f\", $h/$o}") |"
done
echo
echo "$TABLE"
