/* bench_reduce.c - the column reductions of a training step alone: the bias gradient (a broadcast
   add's backward: the same kernels as linear's, conv1d's and the feedback layers' bias), LayerNorm's
   gamma / beta gradients, the embedding gradient (a scatter by token id) and sum_axis, at the
   row x column shapes of a step (rows = B*T). On a GPU these are metaformer_cuda.cuh's two-pass
   reductions (mf__cu_colred_run, mf__k_embed_bwd): the table shows each op's time and the bandwidth
   of the values it reads (rows x cols floats), so a reduction that leaves the GPU idle shows as a
   small GB/s next to the device's (about 4800 GB/s on an H200).
     make build/cuda/bench_reduce   (the library compiled by nvcc, this file by cc)
     build/cuda/bench_reduce --device cuda [--reps R]
     gcc -O2 -fopenmp -I. bench/bench_reduce.c -o build/bench_reduce -lm && build/bench_reduce [--reps R]
   Each op is timed by the op profiler (mf_set_profile: the device is synchronised around the op, so a
   time is the kernels' plus launch latency), best of R (default 10) after 2 warm-up runs. The CPU
   run uses smaller shapes (its default) so that it ends in seconds. */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { K_BIAS, K_LN, K_EMBED, K_SUM_AXIS };
typedef struct { int kind; long long rows; int cols, vocab; const char *what; } red_case;

/* the GPU's shapes: B*T rows of a GPT-2-small-like step (d 768, d_ff 3072) and of the model
   (d 512, d_ff 2048), a char vocabulary and a BPE one */
static const red_case GPU_CASES[] = {
    {K_BIAS, 8192, 768, 0, "bias grad (linear d 768)"},
    {K_BIAS, 8192, 3072, 0, "bias grad (linear d_ff 3072)"},
    {K_BIAS, 16384, 512, 0, "bias grad (linear d 512)"},
    {K_BIAS, 16384, 2048, 0, "bias grad (linear d_ff 2048)"},
    {K_BIAS, 65536, 64, 0, "bias grad (narrow: 64 cols)"},
    {K_BIAS, 1 << 20, 1, 0, "bias grad (one column)"},
    {K_LN, 8192, 768, 0, "layernorm gamma/beta grad"},
    {K_LN, 16384, 512, 0, "layernorm gamma/beta grad"},
    {K_EMBED, 16384, 512, 256, "embedding grad (V 256)"},
    {K_EMBED, 8192, 768, 50257, "embedding grad (V 50257)"},
    {K_SUM_AXIS, 16384, 512, 0, "sum_axis over T ([16, T, 512])"},
};
static const red_case CPU_CASES[] = {
    {K_BIAS, 2048, 256, 0, "bias grad"},
    {K_LN, 2048, 256, 0, "layernorm gamma/beta grad"},
    {K_EMBED, 2048, 256, 256, "embedding grad (V 256)"},
    {K_SUM_AXIS, 2048, 256, 0, "sum_axis over T"},
};

static int REPS = 10;

/* the op's seconds (best of REPS) of the profiled region: the backward for the gradients, the
   forward for sum_axis */
static double run_case(const red_case *c, int cuda) {
    mf_ctx *ctx = mf_ctx_new(3);
    const char *name = c->kind == K_BIAS ? "add" : c->kind == K_LN ? "layernorm" : c->kind == K_EMBED ? "embedding" : "sum_axis";
    double best = 1e30;
    int rep, cols = c->cols, rows = (int)c->rows;
    int32_t *ids = NULL;
    if (cuda && mf_ctx_set_device(ctx, MF_DEVICE_CUDA) < 0) { fprintf(stderr, "bench_reduce: %s\n", mf_error(ctx)); exit(1); }
    if (c->kind == K_EMBED) {
        ids = (int32_t *)malloc((size_t)rows * sizeof(int32_t));
        if (!ids) { fprintf(stderr, "bench_reduce: out of memory\n"); exit(1); }
        for (rep = 0; rep < rows; rep++) ids[rep] = (int32_t)(((unsigned)rep * 2654435761u) % (unsigned)c->vocab);
    }
    {
        int sx[2] = {rows, cols}, sv[1] = {cols}, st[2] = {c->vocab, cols}, s3[3] = {16, rows / 16, cols};
        mf_tensor *x = NULL, *p = NULL, *q = NULL;
        if (c->kind == K_EMBED) p = mf_param(ctx, "table", 2, st);
        else if (c->kind == K_SUM_AXIS) x = mf_param(ctx, "x", 3, s3);
        else {
            x = mf_param(ctx, "x", 2, sx);
            mf_param_set_trainable(x, 0); /* no gradient: the op's backward is the reduction only */
            p = mf_param(ctx, "p", 1, sv);
            if (c->kind == K_LN) q = mf_param(ctx, "q", 1, sv);
        }
        if (x) mf_init_uniform(ctx, x, -1, 1);
        if (p) mf_init_uniform(ctx, p, -1, 1);
        if (q) mf_init_uniform(ctx, q, -1, 1);
        for (rep = -2; rep < REPS && mf_ok(ctx); rep++) {
            mf_profile_entry e[64];
            int n, i;
            mf_tensor *y;
            mf_set_profile(ctx, 1);
            y = c->kind == K_BIAS ? mf_add(ctx, x, p)
                : c->kind == K_LN ? mf_layernorm(ctx, x, p, q, 1e-5f)
                : c->kind == K_EMBED ? mf_embedding(ctx, p, ids, 1, &rows)
                : mf_sum_axis(ctx, x, 1);
            if (c->kind != K_SUM_AXIS) mf_backward(ctx, mf_sum(ctx, y));
            n = mf_profile_entries(ctx, e, 64);
            for (i = 0; i < n && i < 64; i++)
                if (!strcmp(e[i].name, name) && rep >= 0) {
                    double t = c->kind == K_SUM_AXIS ? e[i].fwd_s : e[i].bwd_s;
                    if (t < best) best = t;
                }
            mf_set_profile(ctx, 0);
            mf_zero_grad(ctx);
            mf_reset(ctx);
        }
    }
    if (!mf_ok(ctx)) { fprintf(stderr, "bench_reduce: %s\n", mf_error(ctx)); exit(1); }
    free(ids);
    mf_ctx_free(ctx);
    return best;
}

int main(int argc, char **argv) {
    int cuda = 0, i, n;
    const red_case *cases;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            i++;
            if (!strcmp(argv[i], "cuda")) cuda = 1;
            else if (strcmp(argv[i], "cpu")) { fprintf(stderr, "--device cpu or --device cuda\n"); return 2; }
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) REPS = atoi(argv[++i]) > 0 ? atoi(argv[i]) : 1;
        else { fprintf(stderr, "usage: bench_reduce [--device cpu|cuda] [--reps R]\n"); return 2; }
    }
    if (cuda) {
        char why[256];
        if (!mf_cuda_available(why, sizeof why)) {
            fprintf(stderr, "bench_reduce --device cuda: %s\n", why[0] ? why : "this build has no CUDA (make build/cuda/bench_reduce)");
            return 1;
        }
    }
    cases = cuda ? GPU_CASES : CPU_CASES;
    n = cuda ? (int)(sizeof GPU_CASES / sizeof GPU_CASES[0]) : (int)(sizeof CPU_CASES / sizeof CPU_CASES[0]);
    printf("# column reductions on the %s, best of %d: ms of the op's reduction, GB/s of the rows x cols floats it reads\n",
           cuda ? "GPU" : "CPU", REPS);
    printf("%-34s %8s %6s %7s %10s %9s\n", "reduction", "rows", "cols", "vocab", "ms", "GB/s");
    for (i = 0; i < n; i++) {
        double t = run_case(&cases[i], cuda), bytes = (double)cases[i].rows * cases[i].cols * sizeof(float);
        if (cases[i].kind == K_LN) bytes *= 2; /* the output gradient and x */
        printf("%-34s %8lld %6d %7d %10.4f %9.1f\n", cases[i].what, cases[i].rows, cases[i].cols, cases[i].vocab,
               t * 1e3, bytes / t / 1e9);
        fflush(stdout);
    }
    return 0;
}
