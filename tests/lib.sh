# tests/lib.sh - what the shell tests of the built programs share (test_cli.sh, test_ablate.sh,
# test_embed.sh, test_gpu_report.sh, ...). Source it from the repository root, then call start_test
# (or scratch_tmp, for a test that stays in the root).
# shellcheck shell=bash

pass=0; fail=0

# start_test PROGRAM HOW: without the executable PROGRAM, a FAIL line naming HOW to build it and the
# runner's summary, exit 1; else continue in a new temporary folder ($tmp), removed on exit
start_test() {
    if [ ! -x "$1" ]; then
        echo "FAIL $1 is missing: run $2 first"; echo "0 passed, 1 failed"; exit 1
    fi
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    cd "$tmp" || exit 1
}

# scratch_tmp: for the tests that stay in the repository root: a temporary folder $tmp, removed on
# exit unless KEEP_TMP is set (then its path is printed, for a look at what the test left)
scratch_tmp() {
    tmp=$(mktemp -d)
    if [ -n "${KEEP_TMP:-}" ]; then echo "(KEEP_TMP: the files stay in $tmp)"; else trap 'rm -rf "$tmp"' EXIT; fi
}

ok()  { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; shift; [ $# -gt 0 ] && printf '%s\n' "$@" | head -20; fail=$((fail + 1)); }

# expect_error NAME PHRASE COMMAND...: COMMAND exits 1 with a message that contains PHRASE
expect_error() {
    local name=$1 phrase=$2; shift 2
    "$@" > err.out 2>&1; local rc=$?
    if [ $rc -eq 1 ] && grep -q -- "$phrase" err.out; then ok "error: $name"
    else bad "error: $name (want exit 1 and \"$phrase\")" "rc $rc" "$(cat err.out)"; fi
}

# stub_train_cuda FILE: a stand-in for build/train-cuda on a machine without a GPU (the GPU scripts'
# tests): the CPU trainer next to FILE, the device options dropped
stub_train_cuda() {
    cat > "$1" <<'EOF'
#!/usr/bin/env bash
a=(); skip=0
for x in "$@"; do
    if [ "$skip" = 1 ]; then skip=0; continue; fi
    case "$x" in --device|--precision) skip=1 ;; *) a+=("$x") ;; esac
done
exec "$(dirname "$0")/train" "${a[@]}" --device cpu
EOF
    chmod +x "$1"
}

# check NAME COMMAND...: ok when COMMAND succeeds, else a FAIL line
check() { local name=$1; shift; if "$@"; then ok "$name"; else bad "$name"; fi; }

# the closing line "N passed, N failed"; the status is 1 when a check failed
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; }

# header_section FILE NAME: the lines of the header's section [mf:NAME] (after its title line)
header_section() { awk -v s="$2" 'index($0, "/* ==== [mf:") == 1 { on = index($0, "[mf:" s "]") > 0; next } on' "$1"; }
# config_fields FILE: the mixers' config fields of the header's one table (MF_MODEL_FIELDS), "member
# option" per line
config_fields() { sed -n '/^#define MF_MODEL_FIELDS(X, A)/,/[^\\]$/p' "$1" |
                  sed -n 's/^ *X(A, [A-Z_]*, \([a-z_]*\), [^"]*"\([a-z-]*\)".*/\1 \2/p'; }
# library_mixers FILE: the built-in mixers' names in the order of the header's rows ([mf:mixers])
library_mixers() { header_section "$1" mixers | sed -n 's/^ *{"\([a-z_]*\)", *MF_MIXER_.*/\1/p'; }
# count_pngs DIR STEM...: how many of DIR/STEM.png exist and start with the PNG signature
count_pngs() {
    local dir=$1 n=0 sig f
    shift
    sig=$(printf '\211PNG\r\n\032\n' | od -An -tx1 | tr -d ' \n')
    for f in "$@"; do [ "$(head -c 8 "$dir/$f.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = "$sig" ] && n=$((n + 1)); done
    echo $n
}
# check_gnuplot_figures DIR OUT ERR STEM...: a study run into DIR (its stdout OUT, stderr ERR) drew
# every figure as a PNG through gnuplot and linked each from DIR/report.md; a skip line without gnuplot
check_gnuplot_figures() {
    local dir=$1 out=$2 err=$3 n links
    shift 3
    if ! command -v gnuplot > /dev/null 2>&1; then
        echo "skip gnuplot is not installed: no PNG to check (apt-get install gnuplot-nox)"; return
    fi
    n=$(count_pngs "$dir" "$@"); links=$(grep -c '(\[PNG\](.*\.png))' "$dir/report.md")
    if [ "$n" = $# ] && [ "$links" = $# ] && grep -q "the same as .png through gnuplot" "$out" && [ ! -s "$err" ]
    then ok "gnuplot is installed: the $# figures as PNG, each linked from the report"
    else bad "gnuplot is installed: the $# figures as PNG, each linked" "$n PNG, $links links" "$(tail -2 "$out")" "$(cat "$err")"; fi
}
