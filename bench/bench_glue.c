/* bench/bench_glue.c - forward timings of the transformer block's glue ops one call at a time
 * (#21): the residual add, the head split (permute), LayerNorm and the cross-entropy, at the
 * sizes of make bench's small row (B 12, T 64, D 128, 4 heads, vocab 65) and its d 256 rows.
 * Each op runs N times on the same inputs (no autograd); the report is the minimum, the 10th
 * percentile and the median of the single calls: calls of a few microseconds mostly fit between
 * other processes' time slices, so these hold up on a shared machine where a training step's
 * wall time does not. A/B two headers by building this file against each:
 *   gcc -O3 -march=native -fopenmp -I. bench/bench_glue.c -o /tmp/glue_b -lm
 *   gcc -O3 -march=native -fopenmp -I/path/to/other bench/bench_glue.c -o /tmp/glue_a -lm
 *   /tmp/glue_a 2; /tmp/glue_b 2      (the argument: threads, default 2)
 */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#include <stdio.h>
#include <stdlib.h>

enum { N_CALLS = 3000 };
enum { OP_ADD_SMALL, OP_ADD_D256, OP_PERMUTE, OP_CE_SMALL, OP_CE_D256, OP_LAYERNORM, N_OPS };
static const char *const op_names[N_OPS] = {"add 768x128", "add 2048x256", "permute 12x64x4x32 (0 2 1 3)",
                                            "cross_entropy 768x65", "cross_entropy 2048x65", "layernorm 768x128"};

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    static double t[N_CALLS];
    mf_ctx *c = mf_ctx_new(1);
    int s_small[2] = {768, 128}, s_d256[2] = {2048, 256}, s_heads[4] = {12, 64, 4, 32}, perm[4] = {0, 2, 1, 3};
    int s_ce[2] = {768, 65}, s_ce256[2] = {2048, 65}, i, k;
    int32_t tg[2048];
    mf_tensor *a, *b, *a2, *b2, *h, *l, *l2;
    if (!c) return 1;
    mf_set_threads(c, argc > 1 ? atoi(argv[1]) : 2);
    mf_set_grad(c, 0);
    a = mf_param(c, "a", 2, s_small); b = mf_param(c, "b", 2, s_small);
    a2 = mf_param(c, "a2", 2, s_d256); b2 = mf_param(c, "b2", 2, s_d256);
    h = mf_param(c, "h", 4, s_heads); l = mf_param(c, "l", 2, s_ce); l2 = mf_param(c, "l2", 2, s_ce256);
    for (i = 0; i < 2048; i++) tg[i] = (i * 7) % 65;
    for (k = 0; k < N_OPS && mf_ok(c); k++) {
        for (i = 0; i < N_CALLS; i++) {
            double t0 = mf_time();
            switch (k) {
            case OP_ADD_SMALL: mf_add(c, a, b); break;
            case OP_ADD_D256: mf_add(c, a2, b2); break;
            case OP_PERMUTE: mf_permute(c, h, perm); break;
            case OP_CE_SMALL: mf_cross_entropy(c, l, tg, -1); break;
            case OP_CE_D256: mf_cross_entropy(c, l2, tg, -1); break;
            default: mf_layernorm(c, a, NULL, NULL, 1e-5f); break;
            }
            t[i] = mf_time() - t0;
            mf_reset(c);
        }
        qsort(t, N_CALLS, sizeof t[0], by_value);
        printf("%-30s min %8.2f us  p10 %8.2f us  median %8.2f us\n", op_names[k], t[0] * 1e6,
               t[N_CALLS / 10] * 1e6, t[N_CALLS / 2] * 1e6);
    }
    if (!mf_ok(c)) fprintf(stderr, "bench_glue: %s\n", mf_error(c));
    k = mf_ok(c) ? 0 : 1;
    mf_ctx_free(c);
    return k;
}
