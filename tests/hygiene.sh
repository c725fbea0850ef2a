#!/usr/bin/env bash
# Header hygiene: the header must compile cleanly in every supported configuration.
# Prints one ok/FAIL line per build and the runner's summary line.
set -u
cd "$(dirname "$0")/.."
# shellcheck source=tests/lib.sh
. tests/lib.sh # header_section, config_fields (its check and counters are redefined below)
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
# check NAME COMMAND EXT SOURCE: compiles the source with the command (-c: an object, through the
# whole compiler); syntax_check: the same through the front end only (-fsyntax-only: every
# diagnostic of the language and of -Wall -Wextra but those of code generation, such as a missing
# return, about a third of the time). Each configuration below is compiled at least one way, and
# the plain C and C++ ones (and every test's own build) through the whole compiler.
check() { # name, compiler command, file extension, source text
    printf '%s\n' "$4" > "$tmp/src.$3"
    if out=$(eval "$2 -I. ${MODE:--c} $tmp/src.$3 -o $tmp/obj.o" 2>&1); then echo "ok   $1"; pass=$((pass+1))
    else echo "FAIL $1"; printf '%s\n' "$out" | head -5; fail=$((fail+1)); fi
}
syntax_check() { MODE=-fsyntax-only check "$@"; }
check "c99 pedantic"            "gcc -std=c99 -pedantic $W"                c "$impl
$main_fn"
syntax_check "c99 pedantic openmp"     "gcc -std=c99 -pedantic -fopenmp $W"       c "$impl
$main_fn"
syntax_check "c99 avx2 only"           "gcc -std=c99 -pedantic -mavx2 -mfma $W"   c "$impl
$main_fn"
syntax_check "c99 no simd"             "gcc -std=c99 -pedantic -march=native -DMETAFORMER_NO_SIMD $W" c "$impl
$main_fn"
syntax_check "c11 openmp disabled"     "gcc -std=c11 -pedantic -fopenmp -DMETAFORMER_NO_OPENMP $W" c "$impl
$main_fn"
check "c++11"                   "g++ -std=c++11 $W"                        cpp "$impl
$main_fn"
syntax_check "c++11 openmp native"     "g++ -std=c++11 -fopenmp -march=native $W" cpp "$impl
$main_fn"
syntax_check "static mode"             "gcc -std=c99 -pedantic -DMETAFORMER_STATIC $W" c "$impl
$main_fn"
check "custom allocator"        "gcc -std=c99 -pedantic $W"                c "$alloc
$impl
$main_fn"
syntax_check "without data (NO_DATA)"  "gcc -std=c99 -pedantic -DMETAFORMER_NO_DATA $W" c "$impl
$main_fn"
syntax_check "without data (C++)"      "g++ -std=c++11 -DMETAFORMER_NO_DATA $W"  cpp "$impl
$main_fn"
syntax_check "shards by stdio (NO_MMAP)" "gcc -std=c99 -pedantic -DMETAFORMER_NO_MMAP $W" c "$impl
$main_fn"
syntax_check "declarations only (C)"   "gcc -std=c99 -pedantic $W"                c "$use"
# the data-parallel section ([mf:dist]) with MPI's compiler wrappers, where Open MPI is installed
if command -v mpicc > /dev/null && command -v mpicxx > /dev/null; then
    # (c99 -pedantic -O2 with mpicc: build/dist/test_dist)
    check "mpi c++11"               "mpicxx -std=c++11 -DMETAFORMER_MPI $W" cpp "$impl
$main_fn"
    check "mpi static mode"         "mpicc -std=c99 -pedantic -DMETAFORMER_MPI -DMETAFORMER_STATIC $W" c "$impl
$main_fn"
    check "mpi custom allocator, no data" "mpicc -std=c99 -pedantic -DMETAFORMER_MPI -DMETAFORMER_NO_DATA $W" c "$alloc
$impl
$main_fn"
    check "mpi declarations only (C++)" "mpicxx -std=c++11 -DMETAFORMER_MPI $W" cpp "$use"
else
    echo "skip the METAFORMER_MPI builds: Open MPI is not installed (tools/install_mpi.sh)"
fi
syntax_check "declarations only (C++)" "g++ -std=c++11 $W"                        cpp "$use"
# the per-family switches: the header compiles without each family (C and C++), a program trains a
# mixer of another family one step and generates, and every left-out mixer is refused by name
family_prog='#include <stdio.h>
#include <string.h>
int main(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    mf_model_config c = mf_model_config_default();
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 1e-3f);
    mf_sampler greedy = {0.0f, 0, 1};
    const int32_t ids[8] = {1, 2, 3, 0, 1, 2, 3, 0}, tg[8] = {2, 3, 0, 1, 2, 3, 0, 1};
    int32_t out[3];
    int k, off = 0, bad = 0;
    mf_model *m;
    c.vocab = 4; c.d_model = 8; c.n_heads = 2; c.n_layers = 2; c.d_ff = 8; c.max_seq = 8; c.dropout = 0.1f;
    for (k = 0; k < MF_MIXER_COUNT; k++) {
        mf_ctx *probe = mf_ctx_new(1);
        c.mixer = (mf_mixer_kind)k;
        if (!mf_mixer_compiled(c.mixer)) {
            off++;
            bad |= mf_model_check(probe, &c) == 0 || !strstr(mf_error(probe), "METAFORMER_NO_");
        } else bad |= mf_model_check(probe, &c) != 0;
        mf_ctx_free(probe);
    }
    c.mixer = TRAIN_MIXER;
    m = mf_model_new(ctx, &c);
    mf_backward(ctx, mf_model_loss(m, ids, tg, 1, 8));
    mf_optimizer_step(ctx, &opt);
    mf_reset(ctx);
    mf_model_generate(m, ids, 2, 3, &greedy, out);
    if (!mf_ok(ctx)) printf("%s\n", mf_error(ctx));
    mf_model_free(m);
    k = mf_ok(ctx);
    mf_ctx_free(ctx);
    return k && !bad && off == LEFT_OUT ? 0 : 1;
}'
for fam in "XL:MF_MIXER_FAST_WEIGHTS:1" "FASTWEIGHTS:MF_MIXER_RELATIVE:2" "FEEDBACK:MF_MIXER_METRIC:2" \
           "XL -DMETAFORMER_NO_FASTWEIGHTS -DMETAFORMER_NO_FEEDBACK:MF_MIXER_POOL:5"; do
    sw=${fam%%:*}; rest=${fam#*:}; mixer=${rest%%:*}; left=${rest#*:}
    D="-DMETAFORMER_NO_$sw -DTRAIN_MIXER=$mixer -DLEFT_OUT=$left"
    name="NO_$sw"; [ "$left" = 5 ] && name="NO_XL, NO_FASTWEIGHTS and NO_FEEDBACK"
    syntax_check "c99 pedantic $name" "gcc -std=c99 -pedantic -march=native $D $W" c "$impl
$family_prog"
    syntax_check "c++11 $name" "g++ -std=c++11 -pedantic $D $W" cpp "$impl
$family_prog"
    printf '%s\n' "$impl" "$family_prog" > "$tmp/f.c"
    if gcc -std=c99 -O0 -I. $D "$tmp/f.c" -o "$tmp/f" -lm 2>/dev/null && "$tmp/f" > "$tmp/f.out"
    then echo "ok   $name: ${mixer#MF_MIXER_} trains a step and generates, the left-out mixers are refused"; pass=$((pass+1))
    else echo "FAIL $name: a remaining mixer trains, the left-out ones are refused"; head -5 "$tmp/f.out" 2>/dev/null; fail=$((fail+1)); fi
done
# the same switches on the CUDA backend (metaformer_cuda.cuh on the emulator): it compiles without
# each family; without all three, every op left in mf__ops still has its CUDA row and passes its
# CPU-vs-CUDA parity (the ops of one family do not depend on another's: one run covers the tables)
for sw in XL FASTWEIGHTS FEEDBACK; do
    syntax_check "CUDA backend (emulated) without $sw: compiles" "g++ -std=c++14 $W -DMETAFORMER_NO_$sw -Itests" cpp \
        "$(cat tests/test_cuda_ops.cpp)"
done
D="-DMETAFORMER_NO_XL -DMETAFORMER_NO_FASTWEIGHTS -DMETAFORMER_NO_FEEDBACK"
if g++ -std=c++14 -O0 $W $D -I. -Itests tests/test_cuda_ops.cpp -o "$tmp/cu" -lm 2>"$tmp/cu.err" &&
   "$tmp/cu" > "$tmp/cu.out" 2>&1 && grep -q '^[1-9][0-9]* passed, 0 failed$' "$tmp/cu.out"
then echo "ok   CUDA backend (emulated) without any family: every remaining op has its kernels and parity"; pass=$((pass+1))
else echo "FAIL CUDA backend (emulated) without any family"; head -5 "$tmp/cu.err" "$tmp/cu.out"; fail=$((fail+1)); fi
# the custom allocator is really used: link and count
printf '%s\n' "$alloc" "$impl" 'int main(void) { mf_ctx *c = mf_ctx_new(1); mf_ctx_free(c); return n_alloc > 0 ? 0 : 1; }' > "$tmp/a.c"
if gcc -std=c99 -I. "$tmp/a.c" -o "$tmp/a" -lm 2>/dev/null && "$tmp/a"; then echo "ok   custom allocator is called"; pass=$((pass+1))
else echo "FAIL custom allocator is called"; fail=$((fail+1)); fi
# defining only some allocator macros is refused at compile time
printf '%s\n' '#define MF_MALLOC(sz) malloc(sz)' "$impl" > "$tmp/b.c"
if ! gcc -std=c99 -I. -c "$tmp/b.c" -o "$tmp/b.o" 2>/dev/null; then echo "ok   partial allocator rejected"; pass=$((pass+1))
else echo "FAIL partial allocator rejected"; fail=$((fail+1)); fi
# The generic sections know no mixer: with their comments removed, [mf:model], [mf:layers], [mf:io],
# [mf:optim], [mf:data] and [mf:tokenizer] name no mixer (MF_MIXER_<NAME>, a mixer's name), no compile
# switch of a family and none of the mixers' config fields; the names are read from the header's own
# tables (the rows of [mf:mixers], MF_MODEL_FIELDS)
mixers=$(library_mixers metaformer.h | paste -sd'|')
fields=$(config_fields metaformer.h | cut -d' ' -f1 | paste -sd'|')
switches=$(header_section metaformer.h mixers | grep -o '"METAFORMER_NO_[A-Z]*"' | tr -d '"' | sort -u | paste -sd'|')
for sec in model layers io optim data tokenizer; do
    header_section metaformer.h $sec | perl -0777 -pe 's{/\*.*?\*/}{}gs' > "$tmp/$sec.c"
    named=$(grep -nE "MF_MIXER_[A-Z_]+|\b($switches)\b|\b($mixers)\b|(->|\.)($fields)\b" "$tmp/$sec.c" | grep -v 'MF_MIXER_COUNT')
    if [ -n "$mixers" ] && [ -n "$fields" ] && [ -n "$switches" ] && [ -s "$tmp/$sec.c" ] && [ -z "$named" ]
    then echo "ok   [mf:$sec] names no mixer, family switch or mixer field (the families and [mf:config] do)"; pass=$((pass+1))
    else echo "FAIL [mf:$sec] names a mixer, a family switch or a mixer field (or the tables were not found: mixers '$mixers', fields '$fields', switches '$switches')"
         printf '%s\n' "$named" | head -10; fail=$((fail+1)); fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
