/* bench_fw_sweep.c - the fast-weights (delta rule) and linear-attention kernels alone: recurrent vs
   chunkwise, forward + backward, over sequence lengths. Decides MF__FW_AUTO_T / MF__FW_AUTO_C in
   metaformer.h ([mf:fastweights]).
     gcc -O2 -march=native -fopenmp -I. bench/bench_fw_sweep.c -o build/bench_fw_sweep -lm
     build/bench_fw_sweep [--threads N] [--heads H] [--dk dk] [--nu nu] [--linear]
                          [--tokens N] [--reps R] [--chunks "16 32 64 128"] [--lengths "128 256 ..."]
   Defaults: the bench model's attention (H 8, dk 32, DPFP nu 1: d_dot 64), T = 128 .. 2048.
   Every run processes --tokens tokens (default 8192: B = 8192 / T sequences, at least 1) so the
   rows are comparable: the table shows ms per fwd+bwd and tokens/s; the best form is marked.
   Inputs: DPFP features of uniform(-1, 1) projections, beta = sigmoid(uniform(-2, 2)), v uniform(-1, 1).

   On a GPU (the CUDA kernels of [cu:fastweights] in metaformer_cuda.cuh):
     make build/cuda/bench_fw_sweep        (nvcc -x cu -DMETAFORMER_CUDA ...)
     build/cuda/bench_fw_sweep --device cuda [--batch B] [--precision fp32|tf32|bf16] [the options above]
   With --device cuda the defaults are the GPU model: d_model 512, 8 heads (dk 64, DPFP
   d_dot 128), batch 16 (--batch; --tokens is not used), T = 1024, 2048, 4096, chunks of 16, best of
   3; the device is synchronised around every timed region. The table adds tokens/s of both forms
   and the chunkwise speed-up (recurrent ms / chunkwise ms; the goal: >= 5 at T = 4096). */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(METAFORMER_CUDA) && !defined(MF_CUDA_EMU)
#include <cuda_runtime_api.h> /* this file may be compiled as C, the library by nvcc (make build/cuda/bench_fw_sweep) */
#endif

static int H = 8, DK = 32, NU = 1, LINEAR = 0, THREADS = 0, REPS = 5, TOKENS = 8192, DEVICE = 0, BATCH = 16;
static mf_precision PREC = MF_PREC_FP32; /* --precision: the CUDA context's arithmetic */

/* seconds: wall clock, or with one thread the process's CPU time (robust to a machine shared with
   other jobs: time the process waits for a core does not count); on the GPU: wall clock after the
   device has finished everything queued */
static double now(int threads) {
#ifdef METAFORMER_CUDA
    if (DEVICE) { cudaDeviceSynchronize(); return mf_time(); }
#endif
    return threads == 1 ? (double)clock() / CLOCKS_PER_SEC : mf_time();
}

/* the inputs, made on a CPU context: q, k = DPFP features, v, beta */
static float *make_inputs(int T, int Bt, float **k, float **v, float **beta) {
    mf_ctx *ctx = mf_ctx_new(1);
    int sx[4] = {Bt, T, H, DK}, sb[3] = {Bt, T, H};
    int64_t nf = (int64_t)Bt * T * H * 2 * DK * NU, nv = (int64_t)Bt * T * H * DK, nb = (int64_t)Bt * T * H;
    mf_tensor *xq, *xk, *bl, *t;
    float *q = (float *)malloc((size_t)nf * sizeof(float));
    *k = (float *)malloc((size_t)nf * sizeof(float));
    *v = (float *)malloc((size_t)nv * sizeof(float));
    *beta = (float *)malloc((size_t)nb * sizeof(float));
    if (!q || !*k || !*v || !*beta) { fprintf(stderr, "bench_fw_sweep: out of memory\n"); exit(1); }
    mf_set_threads(ctx, THREADS);
    mf_set_grad(ctx, 0);
    xq = mf_new(ctx, 4, sx); xk = mf_new(ctx, 4, sx); bl = mf_new(ctx, 3, sb);
    if (!xq || !xk || !bl) { fprintf(stderr, "bench_fw_sweep: %s\n", mf_error(ctx)); exit(1); }
    mf_init_uniform(ctx, xq, -1, 1); mf_init_uniform(ctx, xk, -1, 1); mf_init_uniform(ctx, bl, -2, 2);
    t = mf_dpfp(ctx, xq, NU, 1e-6f); if (t) memcpy(q, t->data, (size_t)nf * sizeof(float));
    t = mf_dpfp(ctx, xk, NU, 1e-6f); if (t) memcpy(*k, t->data, (size_t)nf * sizeof(float));
    t = mf_sigmoid(ctx, bl); if (t) memcpy(*beta, t->data, (size_t)nb * sizeof(float));
    t = mf_new(ctx, 4, sx); if (t && mf_init_uniform(ctx, t, -1, 1) == 0) memcpy(*v, t->data, (size_t)nv * sizeof(float));
    if (!mf_ok(ctx)) { fprintf(stderr, "bench_fw_sweep: %s\n", mf_error(ctx)); exit(1); }
    mf_ctx_free(ctx);
    return q;
}

/* best seconds of forward and of forward + backward for one form (chunk 1 = recurrent) */
static void run(int T, int Bt, int chunk, double *fwd, double *total) {
    mf_ctx *ctx = mf_ctx_new(1);
    int dd = 2 * DK * NU, sf[4] = {Bt, T, H, dd}, sv[4] = {Bt, T, H, DK}, sb[3] = {Bt, T, H}, rep;
    mf_tensor *q, *k, *v, *beta;
    float *hq, *hk, *hv, *hb;
#ifdef METAFORMER_CUDA
    if (DEVICE && (mf_ctx_set_device(ctx, MF_DEVICE_CUDA) < 0 || mf_cuda_set_precision(ctx, PREC) < 0)) {
        fprintf(stderr, "bench_fw_sweep: %s\n", mf_error(ctx));
        exit(1);
    }
#endif
    mf_set_threads(ctx, THREADS);
    /* the op's inputs as parameters (so it computes every input gradient), made once */
    q = mf_param(ctx, "q", 4, sf); k = mf_param(ctx, "k", 4, sf); v = mf_param(ctx, "v", 4, sv);
    beta = mf_param(ctx, "beta", 3, sb);
    hq = make_inputs(T, Bt, &hk, &hv, &hb);
    mf_set_data(ctx, q, hq); mf_set_data(ctx, k, hk); mf_set_data(ctx, v, hv); mf_set_data(ctx, beta, hb);
    free(hq); free(hk); free(hv); free(hb);
    *fwd = *total = 1e30;
    for (rep = -1; rep < REPS && mf_ok(ctx); rep++) {
        double t0 = now(THREADS), t1, t2;
        mf_tensor *o = LINEAR ? mf_linear_attention(ctx, q, k, v, 0, 1e-6f, chunk) : mf_fast_weights(ctx, q, k, v, beta, chunk);
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

#ifdef METAFORMER_CUDA
/* --device cuda: the recurrent and the chunkwise kernels side by side at the GPU shapes */
static void device_table(const int *lengths, int nl, const int *chunks, int nc) {
    int i, j;
    printf("CUDA %s kernels, fwd+bwd of the op alone (device synchronised): B=%d H=%d dk=%d d_dot=%d (nu %d), %s, best of %d\n",
           LINEAR ? "linear attention" : "fast weights (delta rule)", BATCH, H, DK, 2 * DK * NU, NU, mf_precision_name(PREC), REPS);
    printf("%6s %4s | %11s %12s", "T", "B", "recurrent", "ktok/s");
    for (j = 0; j < nc; j++) printf(" | chunk %-4d %12s %9s", chunks[j], "ktok/s", "speed-up");
    printf("\n");
    for (i = 0; i < nl; i++) {
        int T = lengths[i];
        double f, rec, t, tok = (double)BATCH * T;
        run(T, BATCH, 1, &f, &rec);
        printf("%6d %4d | %8.2f ms %12.0f", T, BATCH, rec * 1e3, tok / rec * 1e-3);
        for (j = 0; j < nc; j++) {
            run(T, BATCH, chunks[j], &f, &t);
            printf(" | %7.2f ms %12.0f %8.2fx", t * 1e3, tok / t * 1e-3, rec / t);
        }
        printf("\n");
        fflush(stdout);
    }
}
#endif

int main(int argc, char **argv) {
    int lengths[32] = {128, 256, 512, 1024, 2048}, nl = 5, chunks[16] = {16, 32, 64, 128}, nc = 4, i, j;
    int set_len = 0, set_chunks = 0, set_h = 0, set_dk = 0, set_reps = 0;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--linear")) { LINEAR = 1; continue; }
        if (!v) { fprintf(stderr, "bench_fw_sweep: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--threads")) THREADS = atoi(v);
        else if (!strcmp(a, "--heads")) { H = atoi(v); set_h = 1; }
        else if (!strcmp(a, "--dk")) { DK = atoi(v); set_dk = 1; }
        else if (!strcmp(a, "--nu")) NU = atoi(v);
        else if (!strcmp(a, "--reps")) { REPS = atoi(v); set_reps = 1; }
        else if (!strcmp(a, "--tokens")) TOKENS = atoi(v);
        else if (!strcmp(a, "--batch")) BATCH = atoi(v);
        else if (!strcmp(a, "--chunks")) { nc = parse_list(v, chunks, 16); set_chunks = 1; }
        else if (!strcmp(a, "--lengths")) { nl = parse_list(v, lengths, 32); set_len = 1; }
        else if (!strcmp(a, "--precision")) {
            if (mf_precision_from_name(v) < 0) { fprintf(stderr, "bench_fw_sweep: --precision %s: fp32, tf32 or bf16\n", v); return 2; }
            PREC = (mf_precision)mf_precision_from_name(v);
        } else if (!strcmp(a, "--device")) {
            if (!strcmp(v, "cuda")) DEVICE = 1;
            else if (strcmp(v, "cpu")) { fprintf(stderr, "bench_fw_sweep: --device %s: cpu or cuda\n", v); return 2; }
        } else { fprintf(stderr, "bench_fw_sweep: unknown option %s (see the comment at the top)\n", a); return 2; }
        i++;
    }
    if (!DEVICE && PREC != MF_PREC_FP32) {
        fprintf(stderr, "bench_fw_sweep: --precision %s is a CUDA setting; add --device cuda\n", mf_precision_name(PREC));
        return 2;
    }
    if (DEVICE) {
        if (!set_h) H = 8;
        if (!set_dk) DK = 64; /* d_model 512 / 8 heads */
        if (!set_reps) REPS = 3;
        if (!set_len) { lengths[0] = 1024; lengths[1] = 2048; lengths[2] = 4096; nl = 3; }
        if (!set_chunks) { chunks[0] = 16; nc = 1; }
#ifdef METAFORMER_CUDA
        device_table(lengths, nl, chunks, nc);
        return 0;
#else
        fprintf(stderr, "bench_fw_sweep: --device cuda needs the CUDA build (make build/cuda/bench_fw_sweep)\n");
        return 2;
#endif
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
