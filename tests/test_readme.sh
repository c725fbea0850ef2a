#!/usr/bin/env bash
# The README's commands, run as a new user types them: every line of its ```sh blocks (a line ending
# in a backslash continues on the next) that needs no data, GPU or MPI, in the repository root, and
# the complete program of its ```c block saved as lm.c beside a copy of the header, where the
# commands that name lm.c run. Each command must exit 0; the claims the README makes about their
# output are checked too (the demo reaches 100% token accuracy, the program learns its sentence).
# Skipped, with a line each: `make test` (this suite) and commands that read data the project does
# not ship (input.txt, GPT-2's files), need a GPU (cuda, gpu) or MPI (mpirun, train-mpi).
#   bash tests/test_readme.sh              in this checkout (make test builds the examples first)
#   FRESH=1 bash tests/test_readme.sh      in a fresh clone of HEAD (git clone; everything built anew)
# Prints ok/FAIL lines and the runner's summary line.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
README=$ROOT/README.md
LIMIT=${LIMIT:-600}   # seconds per command
# shellcheck source=tests/lib.sh
. tests/lib.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if [ "${FRESH:-0}" = 1 ]; then
    git clone -q "$ROOT" "$tmp/clone" || { echo "FAIL git clone of $ROOT"; echo "0 passed, 1 failed"; exit 1; }
    ROOT=$tmp/clone
fi

# the program of the ```c block, beside the header, as the README says
mkdir -p "$tmp/prog"
awk '/^```c$/ { f = 1; n++; next } /^```$/ { f = 0 } f && n == 1' "$README" > "$tmp/prog/lm.c"
cp "$ROOT/metaformer.h" "$ROOT/metaformer_cuda.cuh" "$tmp/prog/"
if [ -s "$tmp/prog/lm.c" ] && grep -q 'int main' "$tmp/prog/lm.c"
then ok "the README's program: one \`\`\`c block with main ($(wc -l < "$tmp/prog/lm.c") lines)"
else bad "the README's program: one \`\`\`c block with main"; fi

# the commands of the ```sh blocks, one per line (continuations joined)
awk '/^```sh$/ { f = 1; next } /^```$/ { f = 0 }
     f { if (sub(/\\$/, "")) { cont = cont $0; next } print cont $0; cont = "" }' "$README" |
    sed -e 's/^[[:space:]]*//' | grep -v -e '^#' -e '^$' > "$tmp/commands"
n_run=0
while IFS= read -r cmd; do
    case "$cmd" in
        "make test"|"make test "*) echo "skip $cmd (the test suite itself)"; continue ;;
    esac
    if echo "$cmd" | grep -q -E 'input\.txt|gpt2|data/'; then echo "skip $cmd (needs data the project does not ship)"; continue; fi
    if echo "$cmd" | grep -q -i -E 'cuda|gpu'; then echo "skip $cmd (needs a GPU)"; continue; fi
    if echo "$cmd" | grep -q -E 'mpirun|train-mpi'; then echo "skip $cmd (needs MPI)"; continue; fi
    dir=$ROOT; case "$cmd" in *lm.c*|*./lm*) dir=$tmp/prog ;; esac
    n_run=$((n_run + 1))
    out=$tmp/out_$n_run.txt
    (cd "$dir" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL timeout "$LIMIT" bash -c "$cmd") > "$out" 2>&1 < /dev/null; rc=$?
    name="\`${cmd%%  #*}\` exits 0"
    if [ $rc -eq 0 ]; then ok "$name"; else bad "$name" "rc $rc (in $dir)" "$(tail -n 20 "$out")"; fi
    case "$cmd" in
        "make demo"*)
            if grep -q 'token accuracy 100.0%' "$out"; then ok "make demo: 100% token accuracy, as the README says"
            else bad "make demo: 100% token accuracy, as the README says" "$(tail -n 5 "$out")"; fi ;;
        *./lm*)
            if awk '/^step [0-9]+ loss/ { l = $4 } END { exit !(l != "" && l < 0.5) }' "$out" &&
               grep -q 'quick brown fox' "$out"
            then ok "the program learns its sentence (last loss < 0.5, the sample continues it)"
            else bad "the program learns its sentence (last loss < 0.5, the sample continues it)" "$(cat "$out")"; fi ;;
    esac
done < "$tmp/commands"
if [ $n_run -ge 5 ]; then ok "$n_run of the README's commands run"
else bad "$n_run of the README's commands run (want at least 5: has the README lost its \`\`\`sh blocks?)"; fi

finish
