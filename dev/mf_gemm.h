/* ======================================================================================
 * SGEMM engine (mf_sgemm, mf_sgemm_batched)
 *
 * Row-major C[M][N] = alpha * op(A)[M][K] @ op(B)[K][N] + beta * C.
 *
 * Design (BLIS / GotoBLAS):
 *   for jc over N in steps of NC            B block  (KC x NC) packed once per (jc, pc)
 *     for pc over K in steps of KC
 *       pack op(B)[pc:+KC][jc:+NC] -> NR-wide micro-panels  Bp[jr][p][0..NR)
 *       for ic over M in steps of MC        A block  (MC x KC) lives in L2
 *         pack op(A)[ic:+MC][pc:+KC] -> MR-tall micro-panels Ap[ir][p][0..MR)
 *         for jr over NC in steps of NR     B micro-panel (KC x NR) lives in L1
 *           for ir over MC in steps of MR
 *             microkernel: C[MR][NR] (+)= Ap[ir] @ Bp[jr]   (register tile)
 * Micro-panels are zero padded to MR / NR, so the kernel always runs a full tile and only
 * the store is masked (edge tiles).  The register tile is MR x NR accumulators:
 *   AVX-512 : 12 x 32 = 24 zmm accumulators + 2 B vectors + broadcasts (of 32 registers).
 *             14 x 32 left gcc one spare register, so it re-loaded B from memory for every
 *             FMA (load-port bound, ~76% of peak); 12 x 32 reaches ~97% of peak in L1, and
 *             measured as well as 8 x 48 / 6 x 64 while wasting less on N = 32 (attention).
 *             Ragged last row panels of <= 6 rows use a 6 x 32 variant.
 *   AVX2+FMA:  6 x 16 = 12 ymm accumulators + 2 B vectors + 1 broadcast (of 16)
 *   portable:  4 x 16 plain C, written so the compiler can vectorise the 16-wide rows.
 * Small products (M*N*K <= 256^3, AVX-512 only) take a direct path: A is read in place
 * (no transposing pack), B is packed unless it is row-major and tiny (then read in place).
 * Threads: a single large product is cut into a grid of C blocks (one per thread, each with
 * private packing buffers); batched products of small matrices give whole matrices to threads.
 * ====================================================================================== */

#if !defined(METAFORMER_NO_SIMD) && defined(__AVX512F__)
#define MF__GEMM_AVX512 1
#elif !defined(METAFORMER_NO_SIMD) && defined(__AVX2__) && defined(__FMA__)
#define MF__GEMM_AVX2 1
#endif
#if defined(MF__GEMM_AVX512) || defined(MF__GEMM_AVX2)
#include <immintrin.h>
#endif

/* Register tile (MR x NR) and cache blocks, tuned on a Xeon (Emerald Rapids) with L1d 48 KiB,
 * L2 2 MiB per core:
 *   KC = 256: the B micro-panel KC x NR (32 KiB) is re-read by every A micro-panel of the
 *             block, so it must stay in L1; long enough to amortise the C tile load/store.
 *   MC = 168 (14 panels of 12): the packed A block MC x KC (168 KiB) stays in L2.
 *   NC = 2048: the packed B block KC x NC (2 MiB) lives in L2/L3; bounds the buffer.
 * (KC 192..384, MC 96..384, NC 1024/4096 all measured within noise of each other.) */
#if defined(MF__GEMM_AVX512)
#define MF__GEMM_MR 12
#define MF__GEMM_NR 32
#ifndef MF__GEMM_KC
#define MF__GEMM_KC 256
#endif
#ifndef MF__GEMM_MC
#define MF__GEMM_MC 168
#endif
#ifndef MF__GEMM_NC
#define MF__GEMM_NC 2048
#endif
#ifndef MF__GEMM_DIRECT_MAX
#define MF__GEMM_DIRECT_MAX (256.0 * 256 * 256)
#endif
#elif defined(MF__GEMM_AVX2)
#define MF__GEMM_MR 6
#define MF__GEMM_NR 16
#define MF__GEMM_KC 256
#define MF__GEMM_MC 144
#define MF__GEMM_NC 2048
#else
#define MF__GEMM_MR 4
#define MF__GEMM_NR 16
#define MF__GEMM_KC 256
#define MF__GEMM_MC 128
#define MF__GEMM_NC 2048
#endif

/* ---------------------------------------------------------------- microkernels --- */

/* Kernels are kept out of line: inlined into the blocking loops, gcc runs out of vector
   registers (it hoists alpha/beta broadcasts) and spills the B vectors inside the k loop. */
#if defined(__GNUC__)
#define MF__GEMM_NOINLINE __attribute__((noinline))
#elif defined(_MSC_VER)
#define MF__GEMM_NOINLINE __declspec(noinline)
#else
#define MF__GEMM_NOINLINE
#endif

#if defined(MF__GEMM_AVX512)

/* c[0..16) (masked by m) = alpha * v + beta * c */
static void mf__gemm_st16(float *c, __m512 v, float alpha, float beta, __mmask16 m)
{
    v = _mm512_mul_ps(v, _mm512_set1_ps(alpha));
    if (beta != 0.0f)
        v = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, c), _mm512_set1_ps(beta), v);
    _mm512_mask_storeu_ps(c, m, v);
}

/* column masks of an nr-wide tile: lanes [0, 16) and [16, 32) */
static __mmask16 mf__gemm_mask(int nr, int lo)
{
    return (__mmask16)(nr >= lo + 16 ? 0xFFFFu : nr > lo ? (1u << (nr - lo)) - 1u : 0u);
}

#define MF__K_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define MF__K_DECL(i) __m512 c##i##_0 = _mm512_setzero_ps(), c##i##_1 = _mm512_setzero_ps();
#define MF__K_FMA(i, x) { __m512 ai = _mm512_set1_ps(x); \
    c##i##_0 = _mm512_fmadd_ps(ai, b0, c##i##_0); c##i##_1 = _mm512_fmadd_ps(ai, b1, c##i##_1); }
#define MF__K_FMA_PACKED(i) MF__K_FMA(i, a[i])
#define MF__K_PF(i) if (i < mr) _mm_prefetch((const char *)(c + (long)i * ldc), _MM_HINT_T0);
#define MF__K_ST(i) if (i < mr) { mf__gemm_st16(c + (long)i * ldc, c##i##_0, alpha, beta, m0); \
    if (m1) mf__gemm_st16(c + (long)i * ldc + 16, c##i##_1, alpha, beta, m1); }

/* Ragged row panels of at most 6 rows: a 6 x 32 tile halves the wasted work of the last
   panel (64 = 5 x 12 + 4).  Strided like the direct kernel below: A(i, p) = a[i*rsa + p*csa],
   B(p, j) = b[p*rsb + j] (nr columns, masked loads); packed panels use (1, 12, 32). */
#define MF__K_ROWS6(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define MF__K_FMA_DIRECT(i) MF__K_FMA(i, a##i)
static MF__GEMM_NOINLINE void mf__gemm_kernel6(int kc, const float *a, long rsa, long csa,
                                               const float *b, long rsb, float *c, long ldc,
                                               float alpha, float beta, int mr, int nr)
{
    __mmask16 m0 = mf__gemm_mask(nr, 0), m1 = mf__gemm_mask(nr, 16);
    /* rows past mr repeat row mr-1: never read past the end of an unpacked A */
    long o1 = (mr > 1 ? 1 : 0) * rsa, o2 = (mr > 2 ? 2 : mr - 1) * rsa, o3 = (mr > 3 ? 3 : mr - 1) * rsa;
    long o4 = (mr > 4 ? 4 : mr - 1) * rsa, o5 = (mr > 5 ? 5 : mr - 1) * rsa;
    int p;
    MF__K_ROWS6(MF__K_DECL)
    MF__K_ROWS6(MF__K_PF)
    for (p = 0; p < kc; ++p) {
        __m512 b0 = _mm512_maskz_loadu_ps(m0, b), b1 = _mm512_maskz_loadu_ps(m1, b + 16);
        float a0 = a[0], a1 = a[o1], a2 = a[o2], a3 = a[o3], a4 = a[o4], a5 = a[o5];
        MF__K_ROWS6(MF__K_FMA_DIRECT)
        a += csa;
        b += rsb;
    }
    MF__K_ROWS6(MF__K_ST)
}
#undef MF__K_ROWS6

/* C[mr][nr] = alpha * Ap[12][kc] @ Bp[kc][32] + beta * C  (mr <= 12, nr <= 32)
   a: packed A micro-panel, a[p*12 + i];  b: packed B micro-panel, b[p*32 + j]. */
static MF__GEMM_NOINLINE void mf__gemm_kernel(int kc, const float *a, const float *b, float *c, long ldc,
                            float alpha, float beta, int mr, int nr)
{
    __mmask16 m0, m1;
    int p;
    if (mr <= 6) { mf__gemm_kernel6(kc, a, 1, 12, b, 32, c, ldc, alpha, beta, mr, nr); return; }
    m0 = mf__gemm_mask(nr, 0);
    m1 = mf__gemm_mask(nr, 16);
    MF__K_ROWS(MF__K_DECL)
    MF__K_ROWS(MF__K_PF)
    for (p = 0; p < kc; ++p) {
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
        MF__K_ROWS(MF__K_FMA_PACKED)
        a += 12;
        b += 32;
    }
    MF__K_ROWS(MF__K_ST)
}

/* Unpacked variant for small products: all 12 rows of A and nr columns of B read in place.
   A(i, p) = a[i*rsa + p*csa] (rows are taken as 4 groups of 3 so the addresses are
   base + {0,1,2}*rsa);  B(p, j) = b[p*rsb + j], the nr <= 32 columns loaded with masks.
   Only the first mr rows of C are stored (the caller packs a ragged last panel of A). */
static MF__GEMM_NOINLINE void mf__gemm_kernel_direct(int kc, const float *a, long rsa, long csa, const float *b, long rsb,
                                   float *c, long ldc, float alpha, float beta, int mr, int nr)
{
    __mmask16 m0 = mf__gemm_mask(nr, 0), m1 = mf__gemm_mask(nr, 16);
    const float *g0 = a, *g1 = a + 3 * rsa, *g2 = a + 6 * rsa, *g3 = a + 9 * rsa;
    int p;
    MF__K_ROWS(MF__K_DECL)
    MF__K_ROWS(MF__K_PF)
    for (p = 0; p < kc; ++p) {
        __m512 b0 = _mm512_maskz_loadu_ps(m0, b), b1 = _mm512_maskz_loadu_ps(m1, b + 16);
        float a0 = g0[0], a1 = g0[rsa], a2 = g0[2 * rsa], a3 = g1[0], a4 = g1[rsa], a5 = g1[2 * rsa];
        float a6 = g2[0], a7 = g2[rsa], a8 = g2[2 * rsa], a9 = g3[0], a10 = g3[rsa], a11 = g3[2 * rsa];
        MF__K_ROWS(MF__K_FMA_DIRECT)
        g0 += csa; g1 += csa; g2 += csa; g3 += csa;
        b += rsb;
    }
    MF__K_ROWS(MF__K_ST)
}
#define MF__GEMM_HAVE_DIRECT 1
#undef MF__K_ROWS
#undef MF__K_DECL
#undef MF__K_FMA
#undef MF__K_FMA_PACKED
#undef MF__K_FMA_DIRECT
#undef MF__K_PF
#undef MF__K_ST

#elif defined(MF__GEMM_AVX2)

static void mf__gemm_st8(float *c, __m256 v, float alpha, float beta, int n)
{
    v = _mm256_mul_ps(v, _mm256_set1_ps(alpha));
    if (n >= 8) {
        if (beta != 0.0f) v = _mm256_fmadd_ps(_mm256_loadu_ps(c), _mm256_set1_ps(beta), v);
        _mm256_storeu_ps(c, v);
    } else {
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        if (beta != 0.0f) v = _mm256_fmadd_ps(_mm256_maskload_ps(c, m), _mm256_set1_ps(beta), v);
        _mm256_maskstore_ps(c, m, v);
    }
}

#define MF__K_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define MF__K_DECL(i) __m256 c##i##_0 = _mm256_setzero_ps(), c##i##_1 = _mm256_setzero_ps();
#define MF__K_FMA(i) { __m256 ai = _mm256_broadcast_ss(a + i); \
    c##i##_0 = _mm256_fmadd_ps(ai, b0, c##i##_0); c##i##_1 = _mm256_fmadd_ps(ai, b1, c##i##_1); }
#define MF__K_ST(i) if (i < mr) { mf__gemm_st8(c + (long)i * ldc, c##i##_0, alpha, beta, nr); \
    if (nr > 8) mf__gemm_st8(c + (long)i * ldc + 8, c##i##_1, alpha, beta, nr - 8); }

/* C[mr][nr] = alpha * Ap[6][kc] @ Bp[kc][16] + beta * C  (mr <= 6, nr <= 16) */
static MF__GEMM_NOINLINE void mf__gemm_kernel(int kc, const float *a, const float *b, float *c, long ldc,
                            float alpha, float beta, int mr, int nr)
{
    int p;
    MF__K_ROWS(MF__K_DECL)
    for (p = 0; p < kc; ++p) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        MF__K_ROWS(MF__K_FMA)
        a += 6;
        b += 16;
    }
    MF__K_ROWS(MF__K_ST)
}
#undef MF__K_ROWS
#undef MF__K_DECL
#undef MF__K_FMA
#undef MF__K_ST

#else

/* portable: C[mr][nr] = alpha * Ap[4][kc] @ Bp[kc][16] + beta * C  (mr <= 4, nr <= 16) */
static MF__GEMM_NOINLINE void mf__gemm_kernel(int kc, const float *a, const float *b, float *c, long ldc,
                            float alpha, float beta, int mr, int nr)
{
    float acc[4][16];
    int i, j, p;
    for (i = 0; i < 4; ++i)
        for (j = 0; j < 16; ++j) acc[i][j] = 0.0f;
    for (p = 0; p < kc; ++p, a += 4, b += 16)
        for (i = 0; i < 4; ++i) {
            float ai = a[i];
            for (j = 0; j < 16; ++j) acc[i][j] += ai * b[j];
        }
    for (i = 0; i < mr; ++i) {
        float *ci = c + (long)i * ldc;
        if (beta == 0.0f)
            for (j = 0; j < nr; ++j) ci[j] = alpha * acc[i][j];
        else
            for (j = 0; j < nr; ++j) ci[j] = alpha * acc[i][j] + beta * ci[j];
    }
}

#endif

/* ------------------------------------------------------------------- packing --- */

/* dst[p][0..R) = src[i*rs + p*cs] for i < r, zero for r <= i < R;  p < kc.
   Case rs == 1: rows of dst are contiguous in src (a copy).  Otherwise cs == 1 (transpose). */
static void mf__gemm_pack_copy(const float *src, long cs, int r, int R, int kc, float *dst)
{
    int p, i;
    for (p = 0; p < kc; ++p, src += cs, dst += R) {
        if (r == R) {
            memcpy(dst, src, (size_t)R * sizeof(float));
        } else {
            for (i = 0; i < r; ++i) dst[i] = src[i];
            for (; i < R; ++i) dst[i] = 0.0f;
        }
    }
}

#if defined(MF__GEMM_AVX512)
/* In-register transpose of a 16 x 16 block.  (The all-ones maskz forms avoid g++'s bogus
   -Wuninitialized on _mm512_undefined_ps inside the unmasked intrinsics.) */
#define MF__ALL16 ((__mmask16)0xFFFF)
static void mf__gemm_tr16(__m512 *r)
{
    __m512 t[16];
    int i;
    for (i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_maskz_unpacklo_ps(MF__ALL16, r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_maskz_unpackhi_ps(MF__ALL16, r[2 * i], r[2 * i + 1]);
    }
    for (i = 0; i < 4; ++i) {
        r[4 * i + 0] = _mm512_maskz_shuffle_ps(MF__ALL16, t[4 * i + 0], t[4 * i + 2], 0x44);
        r[4 * i + 1] = _mm512_maskz_shuffle_ps(MF__ALL16, t[4 * i + 0], t[4 * i + 2], 0xEE);
        r[4 * i + 2] = _mm512_maskz_shuffle_ps(MF__ALL16, t[4 * i + 1], t[4 * i + 3], 0x44);
        r[4 * i + 3] = _mm512_maskz_shuffle_ps(MF__ALL16, t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (i = 0; i < 4; ++i) {
        t[i + 0] = _mm512_maskz_shuffle_f32x4(MF__ALL16, r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_maskz_shuffle_f32x4(MF__ALL16, r[i], r[i + 4], 0xDD);
        t[i + 8] = _mm512_maskz_shuffle_f32x4(MF__ALL16, r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_maskz_shuffle_f32x4(MF__ALL16, r[i + 8], r[i + 12], 0xDD);
    }
    for (i = 0; i < 8; ++i) {
        r[i] = _mm512_maskz_shuffle_f32x4(MF__ALL16, t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_maskz_shuffle_f32x4(MF__ALL16, t[i], t[i + 8], 0xDD);
    }
}
#endif

/* dst[p][0..R) = src[i*rs + p] (i < r, zero padded to R), p < kc: a transposing pack. */
static void mf__gemm_pack_tr(const float *src, long rs, int r, int R, int kc, float *dst)
{
    int p = 0, i;
#if defined(MF__GEMM_AVX512)
    for (; p + 16 <= kc; p += 16) {
        int g;
        for (g = 0; g < R; g += 16) {
            __m512 v[16];
            int w = R - g < 16 ? R - g : 16;
            __mmask16 m = (__mmask16)((1u << w) - 1u);
            for (i = 0; i < 16; ++i)
                v[i] = g + i < r ? _mm512_loadu_ps(src + (long)(g + i) * rs + p) : _mm512_setzero_ps();
            mf__gemm_tr16(v);
            for (i = 0; i < 16; ++i) _mm512_mask_storeu_ps(dst + (long)(p + i) * R + g, m, v[i]);
        }
    }
#endif
    for (; p < kc; ++p) {
        float *d = dst + (long)p * R;
        for (i = 0; i < r; ++i) d[i] = src[(long)i * rs + p];
        for (; i < R; ++i) d[i] = 0.0f;
    }
}

/* Pack an mc x kc block of a matrix X whose element (i, p) is X[i*rs + p*cs] into
   ceil(mc/R) micro-panels of R x kc (panel q at dst + q*R*kc, layout [p][R]). */
static void mf__gemm_pack(const float *X, long rs, long cs, int mc, int kc, int R, float *dst)
{
    int i;
    for (i = 0; i < mc; i += R) {
        int r = mc - i < R ? mc - i : R;
        if (rs == 1)
            mf__gemm_pack_copy(X + i, cs, r, R, kc, dst);
        else
            mf__gemm_pack_tr(X + (long)i * rs, rs, r, R, kc, dst);
        dst += (long)R * kc;
    }
}

/* ------------------------------------------------------------ single thread --- */

static long mf__gemm_min(long a, long b) { return a < b ? a : b; }

/* floats needed by the packing buffers of one thread for an M x N x K product */
static long mf__gemm_bufA_len(int M, int K)
{
    long mc = mf__gemm_min(MF__GEMM_MC, M);
    mc = (mc + MF__GEMM_MR - 1) / MF__GEMM_MR * MF__GEMM_MR;
    return mc * mf__gemm_min(MF__GEMM_KC, K);
}
static long mf__gemm_bufB_len(int N, int K)
{
    long nc = mf__gemm_min(MF__GEMM_NC, N);
    nc = (nc + MF__GEMM_NR - 1) / MF__GEMM_NR * MF__GEMM_NR;
    return nc * mf__gemm_min(MF__GEMM_KC, K);
}

/* C = beta * C for an M x N block (beta == 0 writes zeros without reading C) */
static void mf__gemm_scale(int M, int N, float beta, float *C, int ldc)
{
    int i, j;
    for (i = 0; i < M; ++i) {
        float *c = C + (long)i * ldc;
        if (beta == 0.0f)
            for (j = 0; j < N; ++j) c[j] = 0.0f;
        else if (beta != 1.0f)
            for (j = 0; j < N; ++j) c[j] *= beta;
    }
}

#if defined(MF__GEMM_HAVE_DIRECT)
/* Product for small sizes (see mf__gemm_use_direct): op(B) is packed per KC block (cheap,
   and it keeps the B strip free of cache-set conflicts), A is read in place by the direct
   kernel, so the transposing A pack (~20% of a 64^3 product) is skipped; only a ragged last
   row panel of A is packed.  Loop order jr -> ir keeps the kc x NR strip of B in L1. */
static void mf__gemm_direct(int transA, int transB, int M, int N, int K, float alpha,
                            const float *A, int lda, const float *B, int ldb,
                            float beta, float *C, int ldc, float *bufA, float *bufB)
{
    long ars = transA ? 1 : lda, acs = transA ? lda : 1;
    long brs = transB ? 1 : ldb, bcs = transB ? ldb : 1;
    int pc, jr, ir, m_full = M / MF__GEMM_MR * MF__GEMM_MR;
    /* a tiny row-major B (<= 32 KiB) stays in L1 as it is: read it in place as well */
    int b_in_place = !transB && (long)K * N <= 8192;
    for (pc = 0; pc < K; pc += MF__GEMM_KC) {
        int kc = (int)mf__gemm_min(MF__GEMM_KC, K - pc);
        float beta_eff = pc == 0 ? beta : 1.0f;
        const float *Ap = A + pc * acs;
        if (!b_in_place) mf__gemm_pack(B + pc * brs, bcs, brs, N, kc, MF__GEMM_NR, bufB);
        if (M - m_full > 6) mf__gemm_pack(Ap + m_full * ars, ars, acs, M - m_full, kc, MF__GEMM_MR, bufA);
        for (jr = 0; jr < N; jr += MF__GEMM_NR) {
            int nr = (int)mf__gemm_min(MF__GEMM_NR, N - jr);
            const float *bp = b_in_place ? B + (long)pc * ldb + jr : bufB + (long)jr * kc;
            long rsb = b_in_place ? ldb : MF__GEMM_NR;
            float *cp = C + jr;
            for (ir = 0; ir < m_full; ir += MF__GEMM_MR)
                mf__gemm_kernel_direct(kc, Ap + ir * ars, ars, acs, bp, rsb, cp + (long)ir * ldc, ldc,
                                       alpha, beta_eff, MF__GEMM_MR, nr);
            if (M - m_full > 6)
                mf__gemm_kernel_direct(kc, bufA, 1, MF__GEMM_MR, bp, rsb, cp + (long)m_full * ldc, ldc,
                                       alpha, beta_eff, M - m_full, nr);
            else if (m_full < M)  /* 6 rows or fewer: read them in place */
                mf__gemm_kernel6(kc, Ap + m_full * ars, ars, acs, bp, rsb, cp + (long)m_full * ldc, ldc,
                                 alpha, beta_eff, M - m_full, nr);
        }
    }
}
#endif

/* Small products skip the A packing: everything fits in L1/L2 and packing would cost a
   sizeable fraction of the arithmetic.  (bufA needs MR x KC, bufB KC x N.) */
#if defined(MF__GEMM_HAVE_DIRECT)
static int mf__gemm_use_direct(int M, int N, int K)
{
    return N <= MF__GEMM_NC && (double)M * N * K <= MF__GEMM_DIRECT_MAX;
}
#endif

/* One thread, blocked product; bufA / bufB hold mf__gemm_bufA_len / _bufB_len floats. */
static void mf__gemm_st(int transA, int transB, int M, int N, int K, float alpha,
                        const float *A, int lda, const float *B, int ldb,
                        float beta, float *C, int ldc, float *bufA, float *bufB)
{
    /* element (i, p) of op(A) is A[i*ars + p*acs]; element (p, j) of op(B) is B[p*brs + j*bcs] */
    long ars = transA ? 1 : lda, acs = transA ? lda : 1;
    long brs = transB ? 1 : ldb, bcs = transB ? ldb : 1;
    int jc, pc, ic, jr, ir;
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || alpha == 0.0f) { mf__gemm_scale(M, N, beta, C, ldc); return; }
#if defined(MF__GEMM_HAVE_DIRECT)
    if (mf__gemm_use_direct(M, N, K)) {
        mf__gemm_direct(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bufA, bufB);
        return;
    }
#endif
    for (jc = 0; jc < N; jc += MF__GEMM_NC) {
        int nc = (int)mf__gemm_min(MF__GEMM_NC, N - jc);
        for (pc = 0; pc < K; pc += MF__GEMM_KC) {
            int kc = (int)mf__gemm_min(MF__GEMM_KC, K - pc);
            float beta_eff = pc == 0 ? beta : 1.0f;
            /* op(B) block rows pc.., cols jc..: as panels of NR columns, i.e. a matrix whose
               row j is column j of op(B): element (j, p) = B[p*brs + j*bcs] */
            mf__gemm_pack(B + pc * brs + jc * bcs, bcs, brs, nc, kc, MF__GEMM_NR, bufB);
            for (ic = 0; ic < M; ic += MF__GEMM_MC) {
                int mc = (int)mf__gemm_min(MF__GEMM_MC, M - ic);
                mf__gemm_pack(A + ic * ars + pc * acs, ars, acs, mc, kc, MF__GEMM_MR, bufA);
                for (jr = 0; jr < nc; jr += MF__GEMM_NR) {
                    int nr = (int)mf__gemm_min(MF__GEMM_NR, nc - jr);
                    const float *bp = bufB + (long)jr * kc;
                    for (ir = 0; ir < mc; ir += MF__GEMM_MR) {
                        int mr = (int)mf__gemm_min(MF__GEMM_MR, mc - ir);
                        mf__gemm_kernel(kc, bufA + (long)ir * kc, bp,
                                        C + (long)(ic + ir) * ldc + jc + jr, ldc, alpha, beta_eff, mr, nr);
                    }
                }
            }
        }
    }
}

/* ---------------------------------------------------------------- public API --- */

static int mf__gemm_threads(int n_threads)
{
#if defined(_OPENMP) && !defined(METAFORMER_NO_OPENMP)
    if (n_threads <= 0) n_threads = omp_get_max_threads();
#else
    n_threads = 1;
#endif
    return n_threads < 1 ? 1 : n_threads;
}

/* 64-byte aligned view of a MF_MALLOC block (allocate 16 extra floats) */
static float *mf__gemm_align(void *p)
{
    return (float *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
}

#if defined(_OPENMP) && !defined(METAFORMER_NO_OPENMP)
/* Split an M x N product over nt threads as a tm x tn grid of C blocks: give threads to
   the dimension with more register tiles, so each block stays as square as possible. */
static void mf__gemm_grid(int M, int N, int nt, int *tm, int *tn)
{
    int best_m = 1, d;
    double best = -1.0;
    for (d = 1; d <= nt; ++d) {
        double bm, bn, score;
        if (nt % d) continue;
        bm = (double)M / d;
        bn = (double)N / (nt / d);
        score = bm < bn ? bm / bn : bn / bm;  /* 1 = square blocks */
        if (score > best) { best = score; best_m = d; }
    }
    *tm = best_m;
    *tn = nt / best_m;
}

/* rows [*lo, *hi) of part t of n: parts are multiples of `unit` */
static void mf__gemm_part(int n, int parts, int t, int unit, int *lo, int *hi)
{
    int units = (n + unit - 1) / unit;
    int u0 = (int)((long)units * t / parts), u1 = (int)((long)units * (t + 1) / parts);
    *lo = (int)mf__gemm_min((long)u0 * unit, n);
    *hi = (int)mf__gemm_min((long)u1 * unit, n);
}
#endif

MFDEF void mf_sgemm(int transA, int transB, int M, int N, int K, float alpha,
                    const float *A, int lda, const float *B, int ldb,
                    float beta, float *C, int ldc, int n_threads)
{
    int nt = mf__gemm_threads(n_threads);
    double flops = 2.0 * M * N * K;
    long la, lb, per;
    void *mem;
    float *buf;
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || alpha == 0.0f) { mf__gemm_scale(M, N, beta, C, ldc); return; }
    /* below ~2 MFLOP per thread the fork/join costs more than it saves */
    if (nt > 1 && flops < 2.0e6 * nt) nt = (int)(flops / 2.0e6) < 1 ? 1 : (int)(flops / 2.0e6);
    if (nt > 1 && (M + MF__GEMM_MR - 1) / MF__GEMM_MR * ((N + MF__GEMM_NR - 1) / MF__GEMM_NR) < nt) nt = 1;
    la = mf__gemm_bufA_len(M, K);
    lb = mf__gemm_bufB_len(N, K);
    per = (la + lb + 31) / 16 * 16;
    mem = MF_MALLOC((size_t)(per * nt + 16) * sizeof(float));
    if (!mem) return;
    buf = mf__gemm_align(mem);
    if (nt == 1) {
        mf__gemm_st(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, buf, buf + la);
    } else {
#if defined(_OPENMP) && !defined(METAFORMER_NO_OPENMP)
        int tm, tn;
        mf__gemm_grid(M, N, nt, &tm, &tn);
#pragma omp parallel num_threads(nt)
        {
            int t = omp_get_thread_num(), m0, m1, n0, n1;
            float *bA = buf + per * t, *bB = bA + la;
            mf__gemm_part(M, tm, t / tn, MF__GEMM_MR, &m0, &m1);
            mf__gemm_part(N, tn, t % tn, MF__GEMM_NR, &n0, &n1);
            if (m1 > m0 && n1 > n0)
                mf__gemm_st(transA, transB, m1 - m0, n1 - n0, K, alpha,
                            transA ? A + m0 : A + (long)m0 * lda, lda,
                            transB ? B + (long)n0 * ldb : B + n0, ldb,
                            beta, C + (long)m0 * ldc + n0, ldc, bA, bB);
        }
#endif
    }
    MF_FREE(mem);
}

MFDEF void mf_sgemm_batched(int transA, int transB, int M, int N, int K, float alpha,
                    const float *A, int lda, long long strideA, const float *B, int ldb, long long strideB,
                    float beta, float *C, int ldc, long long strideC, int batch, int n_threads)
{
    int nt = mf__gemm_threads(n_threads), b;
    double flops = 2.0 * M * N * K;
    if (batch <= 0 || M <= 0 || N <= 0) return;
    /* Whole matrices per thread when there are enough of them and each is small enough
       that splitting it would waste the fork/join and the duplicated packing. */
    if (nt > 1 && batch > 1 && (batch >= 4 * nt || batch % nt == 0 || flops < 2.0e7)) {
        long la = mf__gemm_bufA_len(M, K), lb = mf__gemm_bufB_len(N, K);
        long per = (la + lb + 31) / 16 * 16;
        void *mem;
        float *buf;
        if (nt > batch) nt = batch;
        mem = MF_MALLOC((size_t)(per * nt + 16) * sizeof(float));
        if (!mem) return;
        buf = mf__gemm_align(mem);
#if defined(_OPENMP) && !defined(METAFORMER_NO_OPENMP)
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
        for (b = 0; b < batch; ++b) {
#if defined(_OPENMP) && !defined(METAFORMER_NO_OPENMP)
            float *bA = buf + per * omp_get_thread_num();
#else
            float *bA = buf;
#endif
            mf__gemm_st(transA, transB, M, N, K, alpha, A + strideA * b, lda, B + strideB * b, ldb,
                        beta, C + strideC * b, ldc, bA, bA + la);
        }
        MF_FREE(mem);
        return;
    }
    for (b = 0; b < batch; ++b)
        mf_sgemm(transA, transB, M, N, K, alpha, A + strideA * b, lda, B + strideB * b, ldb,
                 beta, C + strideC * b, ldc, nt);
}
