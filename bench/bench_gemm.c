/* bench_gemm.c - SGEMM throughput of mf_sgemm / mf_sgemm_batched against OpenBLAS.
 *
 *   gcc -O3 -march=native -fopenmp bench/bench_gemm.c -o build/bench_gemm -lopenblas -lm
 *   ./build/bench_gemm [TEXT]     (Markdown table on stdout; TEXT: only the rows whose name has it)
 *
 * OpenBLAS picks its kernels from the CPU model; a CPU newer than the OpenBLAS build
 * (e.g. 0.3.21 on Sapphire/Emerald Rapids) falls back to "Prescott" SSE3 kernels.
 * OPENBLAS_CORETYPE=SkylakeX ./build/bench_gemm compares against its AVX-512 kernels.
 * Each cell: median of 5 timings after a warm-up, each timing >= ~0.2 s of repeated calls. */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <cblas.h>

#define METAFORMER_IMPLEMENTATION
#include "../metaformer.h"
#ifdef _OPENMP
#include <omp.h>
#endif

/* not every cblas.h declares these OpenBLAS extras */
void openblas_set_num_threads(int num_threads);
char *openblas_get_corename(void);

typedef struct {
    const char *name;
    int tA, tB, M, N, K, batch;
} shape;

typedef struct {
    const shape *s;
    const float *A, *B;
    float *C;
    int threads, lib;  /* lib 0: mf, 1: OpenBLAS own threads, 2: OpenBLAS 1 thread per batch item */
} job;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void run_once(const job *j)
{
    const shape *s = j->s;
    int lda = s->tA ? s->M : s->K, ldb = s->tB ? s->K : s->N, ldc = s->N, b;
    long long sA = (long long)s->M * s->K, sB = (long long)s->K * s->N, sC = (long long)s->M * s->N;
    if (j->lib == 0) {
        if (s->batch == 1)
            mf_sgemm(s->tA, s->tB, s->M, s->N, s->K, 1.0f, j->A, lda, j->B, ldb, 0.0f, j->C, ldc, j->threads);
        else
            mf_sgemm_batched(s->tA, s->tB, s->M, s->N, s->K, 1.0f, j->A, lda, sA, j->B, ldb, sB,
                             0.0f, j->C, ldc, sC, s->batch, j->threads);
    } else {
/* OpenBLAS on batch item i */
#define BLAS_ITEM(i) cblas_sgemm(CblasRowMajor, s->tA ? CblasTrans : CblasNoTrans, s->tB ? CblasTrans : CblasNoTrans, \
                                 s->M, s->N, s->K, 1.0f, j->A + sA * (i), lda, j->B + sB * (i), ldb, 0.0f, j->C + sC * (i), ldc)
        if (j->lib == 1) {
            for (b = 0; b < s->batch; ++b) BLAS_ITEM(b);
        } else {
#ifdef _OPENMP
#pragma omp parallel for num_threads(j->threads) schedule(static)
#endif
            for (b = 0; b < s->batch; ++b) BLAS_ITEM(b);
        }
#undef BLAS_ITEM
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* GFLOP/s: warm-up, pick reps so one timing is >= 0.2 s, median of 5 */
static double measure(const job *j)
{
    const shape *s = j->s;
    double flops = 2.0 * s->M * s->N * s->K * s->batch, t, times[5];
    int reps = 1, r, i;
    if (j->lib == 1) openblas_set_num_threads(j->threads);
    if (j->lib == 2) openblas_set_num_threads(1);
    run_once(j);
    t = now();
    run_once(j);
    t = now() - t;
    if (t < 0.2) reps = (int)(0.2 / (t > 1e-7 ? t : 1e-7)) + 1;
    for (r = 0; r < 5; ++r) {
        t = now();
        for (i = 0; i < reps; ++i) run_once(j);
        times[r] = (now() - t) / reps;
    }
    qsort(times, 5, sizeof(double), cmp_double);
    return flops / times[2] * 1e-9;
}

static float *rand_buf(long n)
{
    float *p = (float *)malloc(sizeof(float) * (size_t)n);
    long i;
    unsigned x = 12345u;
    for (i = 0; i < n; ++i) { x = x * 1664525u + 1013904223u; p[i] = (float)(x >> 8) / 16777216.0f - 0.5f; }
    return p;
}

int main(int argc, char **argv)
{
    static const shape shapes[] = {
        {"64^3", 0, 0, 64, 64, 64, 1},
        {"128^3", 0, 0, 128, 128, 128, 1},
        {"256^3", 0, 0, 256, 256, 256, 1},
        {"512^3", 0, 0, 512, 512, 512, 1},
        {"1024^3", 0, 0, 1024, 1024, 1024, 1},
        {"2048^3", 0, 0, 2048, 2048, 2048, 1},
        /* the linear layers of the reference model (BT 2048, D 256, d_ff 1024; weight [out, in]):
           forward y = x W^T (tB), backward dx = dy W and dW = dy^T x (tA) */
        {"fwd  x W^T      (2048x256x256, tB)", 0, 1, 2048, 256, 256, 1},
        {"fwd  x W^T      (2048x1024x256, tB)", 0, 1, 2048, 1024, 256, 1},
        {"fwd  x W^T      (2048x256x1024, tB)", 0, 1, 2048, 256, 1024, 1},
        {"bwd  dy W       (2048x256x1024)", 0, 0, 2048, 256, 1024, 1},
        {"bwd  dy W       (2048x1024x256)", 0, 0, 2048, 1024, 256, 1},
        {"bwd  dy^T x     (1024x256x2048, tA)", 1, 0, 1024, 256, 2048, 1},
        {"bwd  dy^T x     (256x1024x2048, tA)", 1, 0, 256, 1024, 2048, 1},
        {"bwd  dy^T x     (256x256x2048, tA)", 1, 0, 256, 256, 2048, 1},
        /* the small-model regime of #21 (d 128, d_ff 512, B 12 x T 64 = 768 tokens) */
        {"small fwd x W^T (768x384x128, tB)", 0, 1, 768, 384, 128, 1},
        {"small fwd x W^T (768x512x128, tB)", 0, 1, 768, 512, 128, 1},
        {"small fwd x W^T (768x128x512, tB)", 0, 1, 768, 128, 512, 1},
        {"small bwd dy W  (768x128x512)", 0, 0, 768, 128, 512, 1},
        {"small bwd dy W  (768x512x128)", 0, 0, 768, 512, 128, 1},
        {"small bwd dy^T x (512x128x768, tA)", 1, 0, 512, 128, 768, 1},
        {"small bwd dy^T x (128x512x768, tA)", 1, 0, 128, 512, 768, 1},
        {"QK^T T x T x dk (256x256x32, tB) x64", 0, 1, 256, 256, 32, 64},
        {"PV   T x dk x T (256x32x256) x64", 0, 0, 256, 32, 256, 64},
    };
    int ns = (int)(sizeof(shapes) / sizeof(shapes[0])), i, th;
    printf("SGEMM, row-major, C = A @ B (M x N x K; GFLOP/s). OpenBLAS core: %s\n\n", openblas_get_corename());
    printf("| shape (M x N x K) | threads | mf GFLOP/s | OpenBLAS GFLOP/s | mf / OpenBLAS |\n");
    printf("|---|---:|---:|---:|---:|\n");
    for (i = 0; i < ns; ++i) {
        const shape *s = &shapes[i];
        if (argc > 1 && !strstr(s->name, argv[1])) continue; /* only the rows whose name has argv[1] */
        long nA = (long)s->M * s->K * s->batch, nB = (long)s->K * s->N * s->batch, nC = (long)s->M * s->N * s->batch;
        float *A = rand_buf(nA), *B = rand_buf(nB), *C = rand_buf(nC);
        for (th = 1; th <= 2; ++th) {
            job j;
            double mf, ob;
            j.s = s; j.A = A; j.B = B; j.C = C; j.threads = th;
            j.lib = 0;
            mf = measure(&j);
            j.lib = 1;
            ob = measure(&j);
            if (s->batch > 1 && th > 1) {  /* OpenBLAS's best: its threads or one thread per item */
                double ob2;
                j.lib = 2;
                ob2 = measure(&j);
                if (ob2 > ob) ob = ob2;
            }
            printf("| %s | %d | %.1f | %.1f | %.2f |\n", s->name, th, mf, ob, mf / ob);
            fflush(stdout);
        }
        free(A); free(B); free(C);
    }
    return 0;
}
