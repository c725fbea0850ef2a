/* test_gemm.c - mf_sgemm / mf_sgemm_batched against a double-precision reference: ~800 cases
 * (sizes 1..300 incl. primes, all transposes, alpha/beta, NaN in C with beta = 0, padded leading
 * dims left untouched, block-boundary shapes, broadcast operands, 1/2/all threads, a call from
 * inside a parallel region).
 * `make test` runs it optimized (AVX-512 / AVX2 kernel) and under ASan/UBSan; tests/hygiene.sh
 * covers the portable kernel's compile, and `cc -DMETAFORMER_NO_SIMD` runs it. */
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <math.h>
#include <stdint.h>
#if defined(_OPENMP) && !defined(METAFORMER_NO_OPENMP)
#include <omp.h>
#endif
#define METAFORMER_IMPLEMENTATION
#if defined(__SANITIZE_ADDRESS__)
#define MFT_GEMM_ITERS 120 /* the sanitized build is ~3x slower; the fixed sweeps still run in full */
#else
#define MFT_GEMM_ITERS 400
#endif
#include "metaformer.h"
#include "mf_test.h"

static unsigned long long rng_state = 88172645463325252ULL;
static unsigned rnd(void)
{
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (unsigned)(rng_state >> 11);
}
static float frand(void) { return (float)((rnd() % 2000001) / 1000000.0 - 1.0); }
static int irand(int lo, int hi) { return lo + (int)(rnd() % (unsigned)(hi - lo + 1)); }

static int n_fail = 0, n_cases = 0;

/* one (possibly batched) product checked element-wise against a double reference */
static void check(int tA, int tB, int M, int N, int K, float alpha, float beta,
                  int pad_a, int pad_b, int pad_c, int batch, int bcastA, int bcastB, int threads)
{
    int lda = (tA ? M : K) + pad_a, ldb = (tB ? K : N) + pad_b, ldc = N + pad_c;
    long rowsA = tA ? K : M, rowsB = tB ? N : K;
    long szA = rowsA * lda + 1, szB = rowsB * ldb + 1, szC = (long)M * ldc + 1;
    long long sA = bcastA ? 0 : szA, sB = bcastB ? 0 : szB, sC = szC;
    long nA = bcastA ? szA : szA * batch, nB = bcastB ? szB : szB * batch, nC = szC * batch;
    float *A = (float *)malloc(sizeof(float) * nA), *B = (float *)malloc(sizeof(float) * nB);
    float *C = (float *)malloc(sizeof(float) * nC), *C0 = (float *)malloc(sizeof(float) * nC);
    long i;
    int b, m, n, k, bad = 0;
    double tol = 2e-6 * sqrt((double)K + 1) + 1e-6;
    for (i = 0; i < nA; ++i) A[i] = frand();
    for (i = 0; i < nB; ++i) B[i] = frand();
    for (i = 0; i < nC; ++i) C0[i] = beta == 0.0f ? NAN : frand();  /* beta 0: C must not be read */
    memcpy(C, C0, sizeof(float) * nC);
    if (batch == 1 && !bcastA && !bcastB)
        mf_sgemm(tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, threads);
    else
        mf_sgemm_batched(tA, tB, M, N, K, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, sC, batch, threads);
    for (b = 0; b < batch && !bad; ++b) {
        const float *a = A + sA * b, *bb = B + sB * b;
        const float *c0 = C0 + sC * b, *c = C + sC * b;
        for (m = 0; m < M && !bad; ++m)
            for (n = 0; n < N + pad_c; ++n) {
                double ref, got = c[(long)m * ldc + n], scale = 0.0;
                if (n >= N) {  /* padding between rows must be untouched */
                    if (memcmp(&c[(long)m * ldc + n], &c0[(long)m * ldc + n], sizeof(float))) bad = 1;
                    continue;
                }
                ref = 0.0;
                for (k = 0; k < K; ++k) {
                    double x = tA ? a[(long)k * lda + m] : a[(long)m * lda + k];
                    double y = tB ? bb[(long)n * ldb + k] : bb[(long)k * ldb + n];
                    ref += x * y;
                    scale += fabs(x * y);
                }
                ref *= alpha;
                scale *= fabs(alpha);
                if (beta != 0.0f) { ref += beta * (double)c0[(long)m * ldc + n]; scale += fabs(beta * c0[(long)m * ldc + n]); }
                if (!(fabs(got - ref) <= tol * (scale + 1.0))) {
                    printf("FAIL tA=%d tB=%d M=%d N=%d K=%d alpha=%g beta=%g pads=%d,%d,%d batch=%d bc=%d%d thr=%d"
                           " at b=%d (%d,%d): got %.8g want %.8g\n", tA, tB, M, N, K, alpha, beta, pad_a, pad_b,
                           pad_c, batch, bcastA, bcastB, threads, b, m, n, got, ref);
                    bad = 1;
                    break;
                }
            }
        /* last element after the final row must be untouched too */
        if (!bad && memcmp(&c[(long)M * ldc], &c0[(long)M * ldc], sizeof(float))) {
            printf("FAIL: wrote past C (M=%d N=%d)\n", M, N);
            bad = 1;
        }
    }
    n_fail += bad;
    ++n_cases;
    free(A); free(B); free(C); free(C0);
}

/* the row sums of op(A) taken while A is packed (the linear layer's bias gradient): bit for bit the
   plain sum in order of k, continued from the values already in the sums, on every path (blocked
   with the sums split over row blocks or kept by the first column block, past NC, direct, K = 0,
   alpha = 0; a bf16 product on the fp32 kernels, whose sums come from A unrounded); the product itself
   must still be right */
static int check_rowsum(int tA, int M, int N, int K, float alpha, int threads)
{
    int lda = tA ? M : K, m, k, bad = 0;
    long nA = (long)M * K + 1, nB = (long)K * N + 1;
    float *A = (float *)malloc(sizeof(float) * nA), *B = (float *)malloc(sizeof(float) * nB);
    float *C = (float *)malloc(sizeof(float) * ((long)M * N + 1)), *sums = (float *)malloc(sizeof(float) * (M + 1));
    float *want = (float *)malloc(sizeof(float) * (M + 1));
    long i;
    for (i = 0; i < nA; ++i) A[i] = frand();
    for (i = 0; i < nB; ++i) B[i] = frand();
    for (m = 0; m <= M; ++m) want[m] = sums[m] = frand();
    for (m = 0; m < M; ++m)
        for (k = 0; k < K; ++k) want[m] += tA ? A[(long)k * lda + m] : A[(long)m * lda + k];
    /* (odd M: a bf16 product on the fp32 kernels, MF_BF16_FMA) */
    mf__sgemm_bias_ws(tA, 0, M, N, K, alpha, A, lda, B, N, 0.0f, C, N, NULL, threads, NULL, sums, M & 1);
    if (memcmp(sums, want, sizeof(float) * (M + 1))) { /* the element past M must be untouched too */
        for (m = 0; m <= M && !memcmp(&sums[m], &want[m], sizeof(float)); ++m) {}
        printf("FAIL rowsum tA=%d M=%d N=%d K=%d alpha=%g thr=%d: row %d got %.9g want %.9g\n", tA, M, N, K,
               alpha, threads, m, sums[m], want[m]);
        bad = 1;
    }
    for (m = 0; m < M && !bad; ++m) { /* spot-check the product's first column */
        double ref = 0;
        for (k = 0; k < K; ++k) { /* (in bf16: the product of the rounded operands) */
            float a = tA ? A[(long)k * lda + m] : A[(long)m * lda + k], b = B[(long)k * N];
            if (M & 1) a = mf__bf16_float(mf__bf16_round(a)), b = mf__bf16_float(mf__bf16_round(b));
            ref += (double)a * b;
        }
        if (fabs(C[(long)m * N] - alpha * ref) > 1e-4 * (1 + fabs(ref))) {
            printf("FAIL rowsum tA=%d M=%d N=%d K=%d: C[%d][0] = %g, want %g\n", tA, M, N, K, m, C[(long)m * N], alpha * ref);
            bad = 1;
        }
    }
    free(A); free(B); free(C); free(sums); free(want);
    return bad;
}

static int iters = MFT_GEMM_ITERS;

/* every transpose, edge sizes, block boundaries, random shapes, threads, batches */
static void test_gemm_cases(void)
{
    static const int dims[] = {1, 2, 3, 5, 7, 13, 14, 15, 16, 17, 31, 32, 33, 47, 64, 97, 127, 128, 129, 255, 257, 300};
    static const float alphas[] = {1.0f, -0.5f, 2.0f}, betas[] = {0.0f, 1.0f, 0.75f};
    int nd = (int)(sizeof(dims) / sizeof(dims[0])), it, t;
    /* every transpose combo on a sweep of edge sizes */
    for (t = 0; t < 4; ++t) {
        int i;
        for (i = 0; i < nd; ++i) {
            int d = dims[i];
            check(t & 1, t >> 1, d, d, d, 1.0f, 0.0f, 0, 0, 0, 1, 0, 0, 1);
            check(t & 1, t >> 1, d, 37, 19, 1.0f, 1.0f, 3, 1, 5, 1, 0, 0, 1);
            check(t & 1, t >> 1, 29, d, 300, -1.0f, 0.5f, 0, 2, 0, 1, 0, 0, 2);
            check(t & 1, t >> 1, 17, 23, d, 0.5f, 0.0f, 1, 0, 7, 1, 0, 0, 0);
        }
    }
    /* K == 0, alpha == 0, large blocks crossing KC / MC / NC boundaries */
    check(0, 0, 5, 9, 0, 1.0f, 0.5f, 0, 0, 2, 1, 0, 0, 1);
    check(0, 0, 5, 9, 0, 1.0f, 0.0f, 0, 0, 2, 1, 0, 0, 1);
    check(1, 1, 5, 9, 4, 0.0f, 2.0f, 0, 0, 2, 1, 0, 0, 1);
    check(0, 0, 300, 2100, 530, 1.0f, 0.5f, 1, 3, 2, 1, 0, 0, 1);
    check(0, 1, 700, 300, 270, 1.0f, 0.0f, 0, 0, 0, 1, 0, 0, 2);
    check(1, 0, 333, 333, 513, 1.0f, 1.0f, 0, 0, 0, 1, 0, 0, 0);
    /* random shapes, transposes, scalars, pads, threads */
    for (it = 0; it < iters; ++it) {
        int M = irand(0, 4) ? irand(1, 300) : dims[irand(0, nd - 1)];
        int N = irand(0, 4) ? irand(1, 300) : dims[irand(0, nd - 1)];
        int K = irand(0, 4) ? irand(1, 300) : dims[irand(0, nd - 1)];
        int thr = irand(0, 3) - 1;  /* -1..2 */
        check(irand(0, 1), irand(0, 1), M, N, K, alphas[irand(0, 2)], betas[irand(0, 2)],
              irand(0, 1) * irand(0, 9), irand(0, 1) * irand(0, 9), irand(0, 1) * irand(0, 9), 1, 0, 0, thr);
    }
#if defined(_OPENMP) && !defined(METAFORMER_NO_OPENMP)
    /* called from inside a parallel region: the nested region gets one thread, which must still
       compute every block of the product (the team path, then a grid of direct-path parts) */
#pragma omp parallel num_threads(2)
    if (omp_get_thread_num() == 1) {
        check(0, 0, 512, 256, 300, 1.0f, 0.0f, 0, 0, 0, 1, 0, 0, 2);
        check(0, 0, 512, 200, 300, 1.0f, 0.5f, 0, 0, 0, 1, 0, 0, 2);
    }
#endif
    /* batched: attention-like shapes, broadcast operands, odd batch counts */
    check(0, 1, 64, 64, 32, 0.125f, 0.0f, 0, 0, 0, 8, 0, 0, 2);
    check(0, 0, 64, 32, 64, 1.0f, 0.0f, 0, 0, 0, 8, 0, 0, 0);
    check(0, 1, 33, 17, 40, 1.0f, 1.0f, 2, 0, 1, 5, 1, 0, 2);  /* A broadcast */
    check(0, 0, 33, 17, 40, 1.0f, 0.5f, 0, 3, 0, 7, 0, 1, 2);  /* B broadcast (shared weight) */
    check(1, 1, 150, 130, 70, -1.0f, 0.0f, 0, 0, 0, 3, 0, 1, 2);
    check(1, 0, 300, 280, 260, 1.0f, 0.0f, 0, 0, 0, 2, 0, 0, 2);
    check(0, 0, 1, 1, 1, 1.0f, 0.0f, 0, 0, 0, 9, 1, 1, 0);
    for (it = 0; it < iters / 10; ++it) {
        int M = irand(1, 100), N = irand(1, 100), K = irand(1, 100), batch = irand(1, 9);
        check(irand(0, 1), irand(0, 1), M, N, K, alphas[irand(0, 2)], betas[irand(0, 2)],
              irand(0, 3), irand(0, 3), irand(0, 3), batch, irand(0, 3) == 0, irand(0, 3) == 0, irand(0, 3) - 1);
    }
    printf("    gemm: %d cases, %d failed\n", n_cases, n_fail);
    MFT_CHECK(n_fail == 0);
}

/* the row sums of A taken while A is packed (a linear layer's bias gradient) */
static void test_gemm_rowsums(void)
{
    int bad = check_rowsum(1, 1024, 256, 2048, 1.0f, 2)  /* dW of d_ff -> d_model rows split */
            + check_rowsum(1, 256, 1024, 700, 1.0f, 2)  /* columns split: one block row sums */
            + check_rowsum(1, 250, 64, 2100, 1.0f, 0)   /* ragged row panels, several K blocks */
            + check_rowsum(1, 37, 2100, 300, 1.0f, 1)   /* past NC: A packed once per NC block */
            + check_rowsum(0, 300, 50, 513, -0.5f, 2)   /* transposing pack */
            + check_rowsum(1, 13, 17, 19, 1.0f, 1)      /* direct path: A not packed */
            + check_rowsum(0, 5, 9, 0, 1.0f, 1) + check_rowsum(1, 7, 9, 11, 0.0f, 2);
    printf("    gemm row sums of A while packing: 8 cases, %d failed\n", bad);
    MFT_CHECK(bad == 0);
}

int main(int argc, char **argv)
{
    if (argc > 1) iters = atoi(argv[1]);
    MFT_RUN(test_gemm_cases);
    MFT_RUN(test_gemm_rowsums);
    return mft_finish();
}
