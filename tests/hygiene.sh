#!/usr/bin/env bash
# Header hygiene: the header must compile cleanly in every supported configuration.
# Prints one ok/FAIL line per build and the runner's summary line.
set -u
cd "$(dirname "$0")/.."
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
W="-Wall -Wextra -Werror"
impl='#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"'
use='#include "metaformer.h"
int use_it(void) { mf_ctx *c = mf_ctx_new(1); int ok = mf_ok(c); mf_ctx_free(c); return ok; }'
alloc='#include <stdlib.h>
static size_t n_alloc;
static void *my_malloc(size_t n) { n_alloc++; return malloc(n); }
#define MF_MALLOC(sz) my_malloc(sz)
#define MF_REALLOC(p, sz) realloc(p, sz)
#define MF_FREE(p) free(p)'
main_fn='int main(void) { return 0; }'
check() { # name, compiler command, file extension, source text
    printf '%s\n' "$4" > "$tmp/src.$3"
    if out=$(eval "$2 -I. -c $tmp/src.$3 -o $tmp/obj.o" 2>&1); then echo "ok   $1"; pass=$((pass+1))
    else echo "FAIL $1"; printf '%s\n' "$out" | head -5; fail=$((fail+1)); fi
}
check "c99 pedantic"            "gcc -std=c99 -pedantic $W"                c "$impl
$main_fn"
check "c99 pedantic openmp"     "gcc -std=c99 -pedantic -fopenmp $W"       c "$impl
$main_fn"
check "c99 avx2 only"           "gcc -std=c99 -pedantic -mavx2 -mfma $W"   c "$impl
$main_fn"
check "c99 native O2"           "gcc -std=c99 -pedantic -march=native -O2 $W" c "$impl
$main_fn"
check "c99 no simd"             "gcc -std=c99 -pedantic -march=native -DMETAFORMER_NO_SIMD $W" c "$impl
$main_fn"
check "c11 openmp disabled"     "gcc -std=c11 -pedantic -fopenmp -DMETAFORMER_NO_OPENMP $W" c "$impl
$main_fn"
check "c++11"                   "g++ -std=c++11 $W"                        cpp "$impl
$main_fn"
check "c++11 openmp native"     "g++ -std=c++11 -fopenmp -march=native $W" cpp "$impl
$main_fn"
check "static mode"             "gcc -std=c99 -pedantic -DMETAFORMER_STATIC $W" c "$impl
$main_fn"
check "custom allocator"        "gcc -std=c99 -pedantic $W"                c "$alloc
$impl
$main_fn"
check "declarations only (C)"   "gcc -std=c99 -pedantic $W"                c "$use"
check "declarations only (C++)" "g++ -std=c++11 $W"                        cpp "$use"
# the custom allocator is really used: link and count
printf '%s\n' "$alloc" "$impl" 'int main(void) { mf_ctx *c = mf_ctx_new(1); mf_ctx_free(c); return n_alloc > 0 ? 0 : 1; }' > "$tmp/a.c"
if gcc -std=c99 -I. "$tmp/a.c" -o "$tmp/a" -lm 2>/dev/null && "$tmp/a"; then echo "ok   custom allocator is called"; pass=$((pass+1))
else echo "FAIL custom allocator is called"; fail=$((fail+1)); fi
# defining only some allocator macros is refused at compile time
printf '%s\n' '#define MF_MALLOC(sz) malloc(sz)' "$impl" > "$tmp/b.c"
if ! gcc -std=c99 -I. -c "$tmp/b.c" -o "$tmp/b.o" 2>/dev/null; then echo "ok   partial allocator rejected"; pass=$((pass+1))
else echo "FAIL partial allocator rejected"; fail=$((fail+1)); fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
