#!/usr/bin/env bash
# make fuzz: build the libFuzzer targets of tests/fuzz/ (clang: fuzzer + ASan + UBSan), make their
# seed corpora with the project's own programs, run each target for FUZZ_SECONDS, and write the
# results to bench/results/fuzz_<date>.md.
#
#   tests/fuzz/run.sh [TARGET...]     default: every tests/fuzz/fuzz_*.c
#   FUZZ_SECONDS=120                  seconds per target
#   FUZZ_DATE=YYYY-MM-DD              the report's date (default today)
#   FUZZ_NICE=10                      the runs' nice level
#
# Under build/fuzz/: bin/ the fuzzers, seeds/ the seed inputs (made once), corpus/TARGET the corpus
# libFuzzer grows (kept between runs, out of the repository), crashes/TARGET what a run found,
# totals.tsv the executions of every run so far (the report gives both this run's and the total).
# A crash is copied to tests/fuzz/regress/TARGET/, where `make test` replays it (build/fuzz/replay/)
# once the bug is fixed and the input committed.
set -u
cd "$(dirname "$0")/../.."
SECONDS_EACH=${FUZZ_SECONDS:-120}
DATE=${FUZZ_DATE:-$(date +%Y-%m-%d)}
NICE=${FUZZ_NICE:-10}
B=build/fuzz
REPORT=bench/results/fuzz_$DATE.md

if ! command -v clang >/dev/null; then
    echo "make fuzz needs clang with its fuzzer runtime: apt-get install clang (Debian 12 / Ubuntu 22.04:"
    echo "clang-14 and libclang-rt-14-dev where the runtime is a package of its own)"; exit 1
fi
unset MAKEFLAGS MFLAGS MAKELEVEL
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=($(ls tests/fuzz/fuzz_*.c | xargs -n1 basename | sed 's/\.c$//'))
nice -n "$NICE" make -s -j2 fuzz-build build/tests/test_tokenizer || exit 1

# ---- seeds, made by the project's own programs (once; rm -rf build/fuzz/seeds to remake) ----
seed() { mkdir -p "$B/seeds/$1"; printf '%s' "$2" > "$B/seeds/$1/$3"; }
make_seeds() {
    local S=$B/seeds w=$B/work
    mkdir -p "$S" "$w"
    # a text of 16 distinct characters (the vocabulary of fuzz_ckpt's model)
    awk 'BEGIN { s = "abcdefghijklmnop"; srand(1); for (i = 0; i < 4000; i++) { printf "%s", substr(s, int(rand() * 16) + 1, 1); if (i % 60 == 59) printf "\n" } }' | tr '\n' 'p' > "$w/text16.txt"
    ./build/train "$w/text16.txt" --d-model 8 --heads 2 --layers 1 --d-ff 16 --seq-len 8 --batch 2 --steps 2 \
        --save "$w/tiny.ckpt" > /dev/null || return 1
    mkdir -p "$S/fuzz_ckpt" "$S/fuzz_golden" "$S/fuzz_text" "$S/fuzz_tokens" "$S/fuzz_tokenizer" "$S/fuzz_gpt2" "$S/fuzz_bpe"
    cp "$w/tiny.ckpt" "$S/fuzz_ckpt/train.ckpt"; cp "$w/tiny.ckpt" "$S/fuzz_golden/train.ckpt"
    cp tests/goldens/*.safetensors "$S/fuzz_golden/" 2>/dev/null
    # shards and tokenizer files of build/tokenize, from a bit of this repository's text
    head -c 6000 README.md > "$w/readme.txt"
    ./build/tokenize --chars "$w/readme.txt" --out "$w/chars" > /dev/null &&
    ./build/tokenize --bytes --format raw16 "$w/readme.txt" --out "$w/bytes" > /dev/null &&
    ./build/tokenize --train-bpe 300 "$w/readme.txt" --out "$w/bpe" > /dev/null || return 1
    for t in chars bytes bpe; do cp "$w/$t.tok" "$S/fuzz_tokenizer/$t.tok"; done
    # fuzz_tokens: a format byte, then the files cut by @@SHARD@@ (shortened: the fuzzer grows them)
    head -c 1100 "$w/chars_train.bin" > "$w/a.bin"; head -c 200 "$w/bytes_train.bin" > "$w/b.bin"
    { printf '\0'; cat "$w/a.bin"; } > "$S/fuzz_tokens/llmc"
    { printf '\2'; cat "$w/b.bin"; } > "$S/fuzz_tokens/raw16"
    { printf '\4'; cat "$w/a.bin"; printf '@@SHARD@@'; head -c 1060 "$w/bpe_val.bin"; } > "$S/fuzz_tokens/two_llmc_vocab"
    # fuzz_gpt2: the small GPT-2-format vocabulary that tests/test_tokenizer.c writes
    [ -f build/test_tokenizer_encoder.json ] || ./build/tests/test_tokenizer > /dev/null
    { cat build/test_tokenizer_encoder.json; printf '@@MERGES@@'; cat build/test_tokenizer_vocab.bpe; } > "$S/fuzz_gpt2/small"
    head -c 3000 "$w/readme.txt" > "$S/fuzz_text/readme"; head -c 500 "$w/text16.txt" > "$S/fuzz_text/text16"
    head -c 1000 "$w/readme.txt" > "$S/fuzz_bpe/readme"; printf 'caf\303\251 \342\200\224 \377\376 12.5' > "$S/fuzz_bpe/utf8"
    # command lines: arguments separated by NUL bytes
    nul() { local f=$1; shift; mkdir -p "$(dirname "$f")"; printf '%s\0' "$@" > "$f"; }
    nul "$S/fuzz_cli_train/text" x.txt --mixer relative --mem-len 8 --d-model 64 --heads 4 --steps 100 --lr 3e-4
    nul "$S/fuzz_cli_train/shards" --data 'a_*.bin' --valid b.bin --tokenizer t.tok --compressive --c-mem-len 4 --save c.ckpt
    nul "$S/fuzz_cli_train/resume" --resume c.ckpt --eval-only --sample 10 --prompt=Hi --greedy --feedback
    nul "$S/fuzz_cli_sample/a" c.ckpt --prompt "It is" --temperature 0.8 --top-k 5 -n 20
    nul "$S/fuzz_cli_sample/b" c.ckpt --greedy --help
    nul "$S/fuzz_cli_ablate/a" x.txt --quick --models sdpa,relative,metric --steps 10 --out o
    nul "$S/fuzz_cli_ablate/b" --models all --batch 4 --seq-len 16
    nul "$S/fuzz_cli_tokenize/a" --train-bpe 512 a.txt b.txt --out build/x --format raw16 --val-fraction 0.2
    nul "$S/fuzz_cli_tokenize/b" --gpt2 dir --chars a.txt --out p --min-frequency 3
    touch "$S/.done"
}
[ -f "$B/seeds/.done" ] || make_seeds || { echo "making the seeds failed"; exit 1; }

# ---- runs ----
touch "$B/totals.tsv"
rows=()
for t in "${targets[@]}"; do
    corpus=$B/corpus/$t crashes=$B/crashes/$t log=$B/logs/$t.log
    mkdir -p "$corpus" "$crashes" "$(dirname "$log")"
    extra=(-rss_limit_mb=2048 -timeout=20 -max_len=65536)
    case $t in fuzz_cli_*) extra+=(-close_fd_mask=3 -max_len=512) ;; esac
    before=$(ls "$crashes" | wc -l)
    echo "== $t: $SECONDS_EACH s"
    dirs=("$corpus")
    for d in "$B/seeds/$t" "tests/fuzz/seeds/$t" "tests/fuzz/regress/$t"; do [ -d "$d" ] && dirs+=("$d"); done
    nice -n "$NICE" "$B/bin/$t" "${extra[@]}" -max_total_time="$SECONDS_EACH" -print_final_stats=1 \
        -artifact_prefix="$crashes/" "${dirs[@]}" > "$log" 2>&1
    rc=$?
    execs=$(awk '/^stat::number_of_executed_units:/ { print $2 }' "$log" | tail -n 1)
    rate=$(awk '/^stat::average_exec_per_sec:/ { print $2 }' "$log" | tail -n 1)
    last=$(grep -E '^#[0-9]+' "$log" | grep 'cov:' | tail -n 1)
    cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<< "$last"); ft=$(sed -n 's/.*ft: \([0-9]*\).*/\1/p' <<< "$last")
    corp=$(ls "$corpus" | wc -l)
    found=$(( $(ls "$crashes" | wc -l) - before ))
    if [ "$found" -gt 0 ] || [ "$rc" -ne 0 ]; then
        mkdir -p "tests/fuzz/regress/$t"; cp "$crashes"/* "tests/fuzz/regress/$t/" 2>/dev/null
        echo "   CRASH (exit $rc): $(grep -m1 -E 'ERROR|runtime error|property failed' "$log"); inputs copied to tests/fuzz/regress/$t/"
    fi
    execs=${execs:-0}
    echo -e "$t\t$DATE\t$SECONDS_EACH\t$execs" >> "$B/totals.tsv"
    total=$(awk -F'\t' -v t="$t" '$1 == t { s += $4 } END { printf "%d", s }' "$B/totals.tsv")
    runs=$(awk -F'\t' -v t="$t" '$1 == t { n++ } END { print n + 0 }' "$B/totals.tsv")
    echo "   $execs executions ($rate/s), cov $cov, ft $ft, corpus $corp, crashes $found; all runs: $total executions"
    rows+=("| $t | $SECONDS_EACH | $execs | $rate | $cov | $ft | $corp | $found | $total ($runs runs) |")
done

mkdir -p bench/results
{
    echo "# Fuzzing, $DATE"
    echo
    echo "\`make fuzz\` (tests/fuzz/run.sh): each libFuzzer target of tests/fuzz/ built by $(clang --version | head -n 1)"
    echo "with -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all, run for FUZZ_SECONDS=$SECONDS_EACH s"
    echo "under nice on $(nproc) cores (load when it ended: $(cut -d' ' -f1-3 /proc/loadavg)). The corpus grows under"
    echo "build/fuzz/corpus/ and is kept between runs; \"all runs\" adds up the executions of every run on this"
    echo "machine (build/fuzz/totals.tsv). cov / ft: libFuzzer's covered edges and features at the end of the run."
    echo
    echo "| target | seconds | executions | exec/s | cov | ft | corpus | crashes | all runs |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    printf '%s\n' "${rows[@]}"
    echo
    echo "Crash inputs kept in the repository (tests/fuzz/regress/, replayed by \`make test\` with the seeds):"
    echo
    find tests/fuzz/regress -type f | sort | sed 's/^/- /'
} > "$REPORT.tmp"
# a report of several runs on one day: the earlier tables stay below the newest
[ -f "$REPORT" ] && { echo; echo "## earlier run"; tail -n +2 "$REPORT"; } >> "$REPORT.tmp"
mv "$REPORT.tmp" "$REPORT"
echo "written $REPORT"
