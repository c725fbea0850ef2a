/* bench_attention.c - fused mf_attention vs the composed matmul / scale / softmax / matmul,
   forward + backward (causal).
     gcc -O3 -march=native -fopenmp -I. bench/bench_attention.c -o build/bench_attention -lm
     build/bench_attention [B H T dk [threads]]        (default 8 8 256 32, all threads) */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"

#include <stdio.h>
#include <stdlib.h>

static int B = 8, H = 8, T = 256, DK = 32;

/* ms per forward (fwd) and per forward + backward (total), best of `reps` after a warm-up */
static void run(int fused, int threads, double *fwd, double *total, size_t *peak) {
    mf_ctx *ctx = mf_ctx_new(1);
    int shape[4] = {B, H, T, DK}, rep, reps = 10;
    mf_tensor *q, *k, *v;
    float scale = 1.0f / sqrtf((float)DK);
    *fwd = *total = 1e30;
    mf_set_threads(ctx, threads);
    q = mf_param(ctx, "q", 4, shape); k = mf_param(ctx, "k", 4, shape); v = mf_param(ctx, "v", 4, shape);
    mf_init_normal(ctx, q, 0, 1); mf_init_normal(ctx, k, 0, 1); mf_init_normal(ctx, v, 0, 1);
    for (rep = -2; rep < reps; rep++) {
        double t0 = mf_time(), t1, t2;
        mf_tensor *o = fused ? mf_attention(ctx, q, k, v, scale, 1)
                             : mf_matmul(ctx, mf_softmax(ctx, mf_scale(ctx, mf_matmul(ctx, q, k, 0, 1), scale), 1), v, 0, 0);
        mf_tensor *loss = mf_mean(ctx, o);
        t1 = mf_time();
        mf_backward(ctx, loss);
        t2 = mf_time();
        if (rep >= 0) {
            if (t1 - t0 < *fwd) *fwd = t1 - t0;
            if (t2 - t0 < *total) *total = t2 - t0;
        }
        mf_zero_grad(ctx);
        mf_reset(ctx);
    }
    if (!mf_ok(ctx)) { fprintf(stderr, "error: %s\n", mf_error(ctx)); exit(1); }
    *peak = mf_activation_peak_bytes(ctx);
    *fwd *= 1e3; *total *= 1e3;
    mf_ctx_free(ctx);
}

int main(int argc, char **argv) {
    int threads = 0;
    double ff, ft, cf, ct;
    size_t fp, cp;
    if (argc >= 5) { B = atoi(argv[1]); H = atoi(argv[2]); T = atoi(argv[3]); DK = atoi(argv[4]); }
    if (argc >= 6) threads = atoi(argv[5]);
    run(1, threads, &ff, &ft, &fp);
    run(0, threads, &cf, &ct, &cp);
    printf("attention B=%d H=%d T=%d dk=%d causal, threads=%d (0 = all)\n", B, H, T, DK, threads);
    printf("  fused    : fwd %8.2f ms  fwd+bwd %8.2f ms  arena peak %8.2f MiB\n", ff, ft, fp / 1048576.0);
    printf("  composed : fwd %8.2f ms  fwd+bwd %8.2f ms  arena peak %8.2f MiB\n", cf, ct, cp / 1048576.0);
    printf("  speedup  : fwd %8.2fx    fwd+bwd %8.2fx\n", cf / ff, ct / ft);
    return 0;
}
