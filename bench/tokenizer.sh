#!/usr/bin/env bash
# bench/tokenizer.sh - GPT-2's BPE in metaformer.h against GPT-2's reference ids and tiktoken.
#
#   bash bench/tokenizer.sh [--rounds N] [--out FILE] GPT2_DIR TEXT...
#
# GPT2_DIR holds GPT-2's encoder.json and vocab.bpe, and may hold sample_*.txt with the reference ids
# sample_*.gpt2.u16 (little-endian uint16 from GPT-2's own encoder). The script
#   1. builds build/bench_tokenizer (cc -O2 -march=native) and a venv build/venv-tok with tiktoken
#      (python3 -m venv; pip install tiktoken from PyPI);
#   2. checks every sample_*.txt in GPT2_DIR: each id equals GPT-2's, decoding gives the text back;
#   3. for each TEXT and for their concatenation (repeated 4 times, a larger text): our ids equal
#      tiktoken's (GPT-2's encoding built offline from the two files, bench/tokenizer_tiktoken.py);
#   4. times both on one thread, side by side: N rounds (default 5), each runs ours (median of 3
#      encodes, each with a freshly loaded tokenizer: an empty pre-token cache) then tiktoken's
#      (median of 3 encode_ordinary calls); the table has the median MB/s of each side and the
#      median of the per-round ratios ours / tiktoken.
# Exit status 1 when any check fails. --out FILE also writes the table as markdown.
set -u
cd "$(dirname "$0")/.." || exit 1
ROUNDS=5
OUT=
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d'; exit 0 ;;
        *) break ;;
    esac
done
[ $# -ge 2 ] || { echo "usage: bash bench/tokenizer.sh [--rounds N] [--out FILE] GPT2_DIR TEXT..." >&2; exit 2; }
GPT2=$1; shift
for f in "$GPT2/encoder.json" "$GPT2/vocab.bpe" "$@"; do [ -r "$f" ] || { echo "tokenizer.sh: cannot read $f" >&2; exit 2; }; done

mkdir -p build
${CC:-cc} -std=c99 -O2 -march=native -Wall -Wextra -pedantic -Werror bench/bench_tokenizer.c -o build/bench_tokenizer -lm || exit 1
VENV=build/venv-tok
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import tiktoken" 2>/dev/null; then
    python3 -m venv "$VENV" && "$VENV/bin/pip" install -q tiktoken || { echo "tokenizer.sh: cannot install tiktoken into $VENV" >&2; exit 1; }
fi
PY="$VENV/bin/python"
export RAYON_NUM_THREADS=1 OMP_NUM_THREADS=1
fail=0

echo "== GPT-2's reference ids ($GPT2/sample_*.txt)"
for txt in "$GPT2"/sample_*.txt; do
    [ -e "$txt" ] || continue
    build/bench_tokenizer "$GPT2" check "$txt" "${txt%.txt}.gpt2.u16" || fail=1
done

TMP=build/tokenizer_bench
mkdir -p "$TMP"
CONCAT=$TMP/concat_x4.txt
for r in 1 2 3 4; do cat "$@"; done > "$CONCAT"
TEXTS=("$@" "$CONCAT")

echo "== ids equal tiktoken's"
for txt in "${TEXTS[@]}"; do
    build/bench_tokenizer "$GPT2" ids "$txt" "$TMP/ids.u32" && "$PY" bench/tokenizer_tiktoken.py "$GPT2" check "$txt" "$TMP/ids.u32" || fail=1
done

field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }
median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print ""; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
echo "== speed, one thread, $ROUNDS rounds side by side"
TABLE="| text | MB | tokens | metaformer.h MB/s | metaformer.h Mtok/s | tiktoken MB/s | tiktoken Mtok/s | ratio (median) |
|---|---:|---:|---:|---:|---:|---:|---:|"
for txt in "${TEXTS[@]}"; do
    : > "$TMP/c.txt"; : > "$TMP/t.txt"; : > "$TMP/ratio.txt"
    for ((r = 0; r < ROUNDS; r++)); do
        c=$(build/bench_tokenizer "$GPT2" time "$txt" 3 | grep '^RESULT') || { fail=1; break; }
        t=$("$PY" bench/tokenizer_tiktoken.py "$GPT2" time "$txt" 3 | grep '^RESULT') || { fail=1; break; }
        echo "$c" >> "$TMP/c.txt"; echo "$t" >> "$TMP/t.txt"
        awk -v a="$(echo "$c" | field mb_s)" -v b="$(echo "$t" | field mb_s)" 'BEGIN {printf "%.3f\n", a / b}' >> "$TMP/ratio.txt"
    done
    [ -s "$TMP/ratio.txt" ] || continue
    row="| $(basename "$txt") | $(awk -v b="$(head -n1 "$TMP/c.txt" | field bytes)" 'BEGIN {printf "%.2f", b / 1e6}') | $(head -n1 "$TMP/c.txt" | field tokens) | $(field mb_s < "$TMP/c.txt" | median) | $(field tok_s < "$TMP/c.txt" | median | awk '{printf "%.2f", $1 / 1e6}') | $(field mb_s < "$TMP/t.txt" | median) | $(field tok_s < "$TMP/t.txt" | median | awk '{printf "%.2f", $1 / 1e6}') | $(median < "$TMP/ratio.txt") |"
    echo "$row"
    TABLE="$TABLE
$row"
done
TIKTOKEN_VERSION=$(head -n1 "$TMP/t.txt" 2>/dev/null | field tiktoken)
echo
echo "$TABLE"
echo "tiktoken ${TIKTOKEN_VERSION:-?}; ratio = metaformer.h MB/s / tiktoken MB/s per round, median over $ROUNDS rounds"
if [ -n "$OUT" ]; then
    { echo "$TABLE"; echo; echo "tiktoken ${TIKTOKEN_VERSION:-?}; ratio = metaformer.h MB/s / tiktoken MB/s per round, median over $ROUNDS rounds."; } > "$OUT"
fi
[ $fail = 0 ] && echo "all checks passed" || echo "SOME CHECKS FAILED"
exit $fail
