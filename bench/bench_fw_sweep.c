/* bench_fw_sweep.c - the fast-weights (delta rule) and linear-attention kernels alone: recurrent vs
   chunkwise, forward + backward, over sequence lengths. Decides MF__FW_AUTO_T / MF__FW_AUTO_C in
   metaformer.h ([mf:fastweights]).
     gcc -O2 -march=native -fopenmp -I. bench/bench_fw_sweep.c -o build/bench_fw_sweep -lm
     build/bench_fw_sweep [--threads N] [--heads H] [--dk dk] [--nu nu] [--linear]
                          [--tokens N] [--reps R] [--chunks "16 32 64 128"] [--lengths "128 256 ..."]
   Defaults: the bench model's attention (H 8, dk 32, DPFP nu 1: d_dot 64), T = 128 .. 2048.
   Every run processes --tokens tokens (default 8192: B = 8192 / T sequences, at least 1) so the
   rows are comparable: the table shows ms per fwd+bwd and tokens/s; the best form is marked.
   Inputs: DPFP features of N(0,1) projections, beta = sigmoid(N(0,2)), v N(0,1). */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* seconds: wall clock, or with one thread the process's CPU time (robust to a machine shared with
   other jobs: time the process waits for a core does not count) */
static double now(int threads) { return threads == 1 ? (double)clock() / CLOCKS_PER_SEC : mf_time(); }

static int H = 8, DK = 32, NU = 1, LINEAR = 0, THREADS = 0, REPS = 5, TOKENS = 8192;

/* best seconds of forward and of forward + backward for one form (chunk 1 = recurrent) */
static void run(int T, int Bt, int chunk, double *fwd, double *total) {
    mf_ctx *ctx = mf_ctx_new(1);
    int dd = 2 * DK * NU, sf[4] = {Bt, T, H, dd}, sv[4] = {Bt, T, H, DK}, sb[3] = {Bt, T, H}, rep;
    mf_tensor *q, *k, *v, *beta, *xq, *xk, *bl;
    mf_set_threads(ctx, THREADS);
    /* the op's inputs as parameters (so it computes every input gradient), made once */
    q = mf_param(ctx, "q", 4, sf); k = mf_param(ctx, "k", 4, sf); v = mf_param(ctx, "v", 4, sv);
    beta = mf_param(ctx, "beta", 3, sb);
    mf_init_normal(ctx, v, 0, 1);
    {
        int sx[4] = {Bt, T, H, DK};
        mf_tensor *t;
        int grad = mf_set_grad(ctx, 0);
        xq = mf_new(ctx, 4, sx); xk = mf_new(ctx, 4, sx); bl = mf_new(ctx, 3, sb);
        for (rep = 0; rep < xq->ne; rep++) {
            xq->data[rep] = 2 * mf__uniform(1, 1, (uint64_t)rep) - 1;
            xk->data[rep] = 2 * mf__uniform(1, 2, (uint64_t)rep) - 1;
        }
        for (rep = 0; rep < bl->ne; rep++) bl->data[rep] = 4 * mf__uniform(1, 3, (uint64_t)rep) - 2;
        t = mf_dpfp(ctx, xq, NU, 1e-6f); memcpy(q->data, t->data, (size_t)q->ne * sizeof(float));
        t = mf_dpfp(ctx, xk, NU, 1e-6f); memcpy(k->data, t->data, (size_t)k->ne * sizeof(float));
        t = mf_sigmoid(ctx, bl); memcpy(beta->data, t->data, (size_t)beta->ne * sizeof(float));
        mf_set_grad(ctx, grad);
        mf_reset(ctx);
    }
    *fwd = *total = 1e30;
    for (rep = -1; rep < REPS; rep++) {
        double t0 = now(THREADS), t1, t2;
        mf_tensor *o = LINEAR ? mf_linear_attention(ctx, q, k, v, 1e-6f, chunk) : mf_fast_weights(ctx, q, k, v, beta, chunk);
        mf_tensor *loss = mf_sum(ctx, o);
        t1 = now(THREADS);
        mf_backward(ctx, loss);
        t2 = now(THREADS);
        if (rep >= 0) {
            if (t1 - t0 < *fwd) *fwd = t1 - t0;
            if (t2 - t0 < *total) *total = t2 - t0;
        }
        mf_zero_grad(ctx);
        mf_reset(ctx);
    }
    if (!mf_ok(ctx)) { fprintf(stderr, "bench_fw_sweep: %s\n", mf_error(ctx)); exit(1); }
    mf_ctx_free(ctx);
}

static int parse_list(const char *s, int *out, int max) {
    int n = 0;
    char *end;
    while (*s && n < max) {
        long v = strtol(s, &end, 10);
        if (end == s) { s++; continue; }
        out[n++] = (int)v;
        s = end;
    }
    return n;
}

int main(int argc, char **argv) {
    int lengths[32] = {128, 256, 512, 1024, 2048}, nl = 5, chunks[16] = {16, 32, 64, 128}, nc = 4, i, j;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--linear")) { LINEAR = 1; continue; }
        if (!v) { fprintf(stderr, "bench_fw_sweep: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--threads")) THREADS = atoi(v);
        else if (!strcmp(a, "--heads")) H = atoi(v);
        else if (!strcmp(a, "--dk")) DK = atoi(v);
        else if (!strcmp(a, "--nu")) NU = atoi(v);
        else if (!strcmp(a, "--reps")) REPS = atoi(v);
        else if (!strcmp(a, "--tokens")) TOKENS = atoi(v);
        else if (!strcmp(a, "--chunks")) nc = parse_list(v, chunks, 16);
        else if (!strcmp(a, "--lengths")) nl = parse_list(v, lengths, 32);
        else { fprintf(stderr, "bench_fw_sweep: unknown option %s (see the comment at the top)\n", a); return 2; }
        i++;
    }
    printf("%s kernel, fwd+bwd of the op alone: H=%d dk=%d d_dot=%d (nu %d), %d tokens per run, threads=%d (0 = all; 1: CPU time), best of %d\n",
           LINEAR ? "linear attention" : "fast weights (delta rule)", H, DK, 2 * DK * NU, NU, TOKENS, THREADS, REPS);
    printf("%6s %4s | %12s", "T", "B", "recurrent");
    /* the columns: ms per forward + backward of the whole batch */
    for (j = 0; j < nc; j++) printf(" | chunk %-6d", chunks[j]);
    printf(" | best\n");
    for (i = 0; i < nl; i++) {
        int T = lengths[i], Bt = TOKENS / T < 1 ? 1 : TOKENS / T, best = 1;
        double f, t, bt;
        run(T, Bt, 1, &f, &t);
        bt = t;
        printf("%6d %4d | %9.2f ms", T, Bt, t * 1e3);
        for (j = 0; j < nc; j++) {
            run(T, Bt, chunks[j], &f, &t);
            printf(" | %9.2f ms", t * 1e3);
            if (t < bt) { bt = t; best = chunks[j]; }
        }
        if (best == 1) printf(" | recurrent (%.0f ktok/s)\n", Bt * T / bt * 1e-3);
        else printf(" | chunk %d (%.0f ktok/s)\n", best, Bt * T / bt * 1e-3);
        fflush(stdout);
    }
    return 0;
}
