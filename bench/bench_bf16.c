/* bench_bf16.c - the CPU's bf16 products (mf_bgemm, on each kernel this CPU runs) against the fp32
 * engine (mf_sgemm), at the shapes of make bench's training step and one large square product.
 *
 *   make build/bench_bf16 && build/bench_bf16 [--threads N] [--portable]
 *
 * One Markdown table on stdout: GFLOP/s per kernel and the ratio bf16 / fp32, the CPU's features
 * and the kernel a context picks first. --portable adds the portable kernel (slow). Each cell: the
 * median of 5 timings, each of repeated calls for >= 0.2 s after a warm-up. bench/torch_mm.py
 * times torch.mm in fp32 and bf16 at the same shapes (make bench-bf16 runs both). */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define METAFORMER_IMPLEMENTATION
#include "../metaformer.h"

typedef struct { const char *name; int tA, tB, M, N, K; } shape;
/* make bench's MetaFormer row: B 8 x T 256 = 2048 tokens, d_model 512, d_ff 2048 (bench/run.sh) */
static const shape shapes[] = {
    {"qkv / out proj  y = x W^T", 0, 1, 2048, 512, 512},
    {"ffn up          y = x W^T", 0, 1, 2048, 2048, 512},
    {"ffn down        y = x W^T", 0, 1, 2048, 512, 2048},
    {"ffn down dx     dx = dy W", 0, 0, 2048, 2048, 512},
    {"ffn up dW       dW = dy^T x", 1, 0, 2048, 512, 2048},
    {"square 2048^3", 0, 0, 2048, 2048, 2048},
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
/* GFLOP/s of one product: kernel MF_BF16_NONE is mf_sgemm */
static double rate(const shape *s, mf_bf16_kernel k, const float *A, const float *B, float *C, int threads) {
    double t[5], flops = 2.0 * s->M * s->N * s->K;
    int lda = s->tA ? s->M : s->K, ldb = s->tB ? s->K : s->N, r, n;
    for (r = -1; r < 5; r++) {
        double t0 = now(), dt;
        n = 0;
        do {
            if (k == MF_BF16_NONE)
                mf_sgemm(s->tA, s->tB, s->M, s->N, s->K, 1.0f, A, lda, B, ldb, 0.0f, C, s->N, threads);
            else
                mf_bgemm(k, s->tA, s->tB, s->M, s->N, s->K, 1.0f, A, lda, B, ldb, 0.0f, C, s->N, threads);
            n++;
            dt = now() - t0;
        } while (dt < 0.2 || (k == MF_BF16_PORTABLE && n < 1));
        if (r >= 0) t[r] = dt / n;
    }
    qsort(t, 5, sizeof t[0], cmp_d);
    return flops / t[2] * 1e-9;
}

int main(int argc, char **argv) {
    int threads = 0, portable = 0, a, i, j, nk = 0;
    mf_bf16_kernel ks[5];
    size_t big = (size_t)2048 * 2048;
    float *A = malloc(big * sizeof(float)), *B = malloc(big * sizeof(float)), *C = malloc(big * sizeof(float));
    for (a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--threads") && a + 1 < argc) threads = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--portable")) portable = 1;
        else { fprintf(stderr, "usage: bench_bf16 [--threads N] [--portable]\n"); return 2; }
    }
    if (!A || !B || !C) return 1;
    for (i = 0; i < (int)big; i++) { A[i] = (float)(i % 17) / 17 - 0.5f; B[i] = (float)(i % 13) / 13 - 0.5f; }
    if (mf_bgemm(MF_BF16_AMX, 0, 0, 1, 1, 1, 1.0f, A, 1, B, 1, 0.0f, C, 1, 1) == 0) ks[nk++] = MF_BF16_AMX;
    ks[nk++] = MF_BF16_FMA;
    if (mf_bgemm(MF_BF16_AVX512, 0, 0, 1, 1, 1, 1.0f, A, 1, B, 1, 0.0f, C, 1, 1) == 0) ks[nk++] = MF_BF16_AVX512;
    if (portable) ks[nk++] = MF_BF16_PORTABLE;
    printf("cpu: %s; a bf16 context's kernel: %s; threads %d\n\n", mf_cpu_features(),
           mf_bf16_kernel_name(mf_cpu_bf16_kernel()), threads);
    printf("| product | M x N x K | fp32 GFLOP/s |");
    for (j = 0; j < nk; j++) printf(" bf16 %s | / fp32 |", mf_bf16_kernel_name(ks[j]));
    printf("\n|---|---|---|");
    for (j = 0; j < nk; j++) printf("---|---|");
    printf("\n");
    for (i = 0; i < (int)(sizeof shapes / sizeof shapes[0]); i++) {
        const shape *s = &shapes[i];
        double f = rate(s, MF_BF16_NONE, A, B, C, threads);
        printf("| %s | %d x %d x %d | %.0f |", s->name, s->M, s->N, s->K, f);
        for (j = 0; j < nk; j++) {
            double g = rate(s, ks[j], A, B, C, threads);
            printf(" %.0f | %.2f |", g, g / f);
        }
        printf("\n");
        fflush(stdout);
    }
    free(A); free(B); free(C);
    return 0;
}
