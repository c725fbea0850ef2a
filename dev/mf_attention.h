/* dev/mf_attention.h - the fused CPU attention op of metaformer.h, developed outside the header.
 *
 * PASTE 1: the declaration block between "api-begin" and "api-end" below goes into [mf:api]
 *          (after mf_conv1d), without the MF_ATTENTION_DECLARED guard.
 * PASTE 2: everything from "---- attention:" to the end of this file goes into [mf:ops], after
 *          the last op (it uses mf__begin / mf__finish / mf__alloc / mf__g / MF__SHAPE_FAIL,
 *          mf__threads_for and MF__OMP, and includes <immintrin.h> on AVX-512 / AVX2 builds).
 * Until then a test includes this file right after the implementation of metaformer.h. */
#ifndef MF_ATTENTION_DECLARED
#define MF_ATTENTION_DECLARED
/* ---- api-begin ---- */
/* Fused multi-head scaled dot-product attention (FlashAttention-2 style on the CPU):
   q [B, H, Tq, dk], k [B, H, Tk, dk], v [B, H, Tk, dv] -> [B, H, Tq, dv],
   out = softmax(scale * q k^T [+ causal mask]) v. causal != 0: query i sees key j iff
   j <= i + (Tk - Tq) (the first Tk - Tq keys are memory, visible to every query; the same mask
   as mf_softmax). A query that sees no key outputs zeros. No Tq x Tk matrix is kept: the op
   saves B*H*Tq floats (the row log-sum-exp) and the backward recomputes the probabilities tile
   by tile, so memory grows linearly with the sequence. Gradients are deterministic (they do not
   depend on the thread count). scale is usually 1 / sqrt(dk). */
MFDEF mf_tensor *mf_attention(mf_ctx *ctx, mf_tensor *q, mf_tensor *k, mf_tensor *v, float scale,
                              int causal);
/* ---- api-end ---- */
#endif

#ifndef MF_ATTENTION_IMPLEMENTED
#define MF_ATTENTION_IMPLEMENTED
/* ---- attention: fused multi-head scaled dot-product attention, FlashAttention-2 on the CPU -------
   q [B, H, Tq, dk], k [B, H, Tk, dk], v [B, H, Tk, dv] -> [B, H, Tq, dv]; farg[0] scale,
   iarg[0] causal; saved: the row log-sum-exp, B*H*Tq floats (+inf for a row that sees no key).
   Layout: a tile of MF__AT_BQ queries and MF__AT_BK keys keeps its scores TRANSPOSED, st[key][query],
   so the softmax statistics of the 64 queries (running max, sum, log-sum-exp, D) are vectors and
   every product below is C += A B with B row-major, vectorised along C's rows (mf__attn_mm: a
   hand-blocked kernel, 4 x 64 or 8 x 32 register tiles on AVX-512; mf_sgemm per tile would pack
   and malloc on every call). exp is a vector polynomial (~2 ulp).
   The scale is folded into a transposed copy of the query tile (scale * Q^T, [dk][64]).
   Forward: parallel over (b, h, query tile); key tiles in order with the online softmax (running
   max m and sum l, the accumulator rescaled by exp(m_old - m_new)); key tiles that causality hides
   from the whole query tile are skipped; out = acc / l, lse = m + log l.
   Backward (FA2): D_i = rowsum(dO_i * O_i); for each (key tile, query tile) pair P is recomputed
   as exp(scale q k - lse), dV += P^T dO, dP = dO V^T, dS = scale * P * (dP - D), dQ += dS K,
   dK += dS^T Q. Race-free and deterministic without atomics: when there are enough heads, each
   thread owns whole (b, h) heads and runs every pair of the head (5 products per pair); with fewer
   heads than threads, a dK/dV pass parallel over (b, h, key tile) is followed by a dQ pass parallel
   over (b, h, query tile) (7 products per pair, but every thread busy). Each gradient row gets its
   contributions in the same order in both schemes (dK/dV over ascending query tiles, dQ over
   ascending key tiles), so the gradients are bit-identical for any thread count.
   Scratch (per-thread slices, taken from the activation arena before the parallel region): forward
   (dk + dv + 64 + 3) * 64 floats per thread; backward scale * Q^T, dO^T, lse and D per head
   (about the size of q plus out) and two 64 x 64 tiles per thread.
   Tiles: 64 x 64 keeps a thread's tiles (scores, dP, Q^T, accumulator: ~50 KiB at d = 64) in L1/L2;
   64 queries = 4 AVX-512 vectors = one register tile row. */
#define MF__AT_BQ 64 /* queries per tile: the vector axis of a score tile; a multiple of 16 */
#define MF__AT_BK 64 /* keys per tile */

/* Vectors for the attention kernels: MF__AW floats, masked loads / stores for row tails, exp. */
#if !defined(METAFORMER_NO_SIMD) && defined(__AVX512F__)
#include <immintrin.h>
#define MF__AW 16
#define MF__AV_MAXV 4 /* vectors per register tile row: 4 rows x 4 vectors = 16 of 32 zmm */
#define MF__AV_R8V 2
typedef __m512 mf__av;
typedef __mmask16 mf__am;
#define mf__av_zero() _mm512_setzero_ps()
#define mf__av_set1(x) _mm512_set1_ps(x)
#define mf__av_load(p) _mm512_loadu_ps(p)
#define mf__av_store(p, v) _mm512_storeu_ps(p, v)
#define mf__av_loadm(p, m) _mm512_maskz_loadu_ps(m, p)
#define mf__av_storem(p, m, v) _mm512_mask_storeu_ps(p, m, v)
#define mf__av_mask(n) ((__mmask16)((n) >= 16 ? 0xFFFFu : (1u << (n)) - 1u))
#define mf__av_add(a, b) _mm512_add_ps(a, b)
#define mf__av_sub(a, b) _mm512_sub_ps(a, b)
#define mf__av_mul(a, b) _mm512_mul_ps(a, b)
#define mf__av_max(a, b) _mm512_mask_max_ps(a, 0xFFFF, a, b)
#define mf__av_fma(a, b, c) _mm512_fmadd_ps(a, b, c)
/* x[0], x[ld], ..., x[15 ld] (masked forms here and below: the plain ones trip g++'s
   -Wmaybe-uninitialized inside immintrin.h) */
#define mf__av_gather(x, ld) \
    _mm512_mask_i32gather_ps(_mm512_setzero_ps(), 0xFFFF, _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, \
                             5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(ld)), x, 4)
/* exp (Cephes polynomial, ~2 ulp); 0 below -87 and for -inf */
static mf__av mf__av_exp(mf__av x) {
    __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_LT_OQ);
    __m512 n, r, p;
    x = _mm512_mask_min_ps(x, 0xFFFF, x, _mm512_set1_ps(88.0f));
    x = _mm512_mask_max_ps(x, 0xFFFF, x, _mm512_set1_ps(-87.0f));
    n = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
    n = _mm512_mask_roundscale_ps(n, 0xFFFF, n, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    p = _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500e-4f), r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_mask_mov_ps(_mm512_mask_scalef_ps(p, 0xFFFF, p, n), tiny, _mm512_setzero_ps());
}
#elif !defined(METAFORMER_NO_SIMD) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define MF__AW 8
#define MF__AV_MAXV 2 /* 4 rows x 2 vectors = 8 of 16 ymm */
#define MF__AV_R8V 1
typedef __m256 mf__av;
typedef __m256i mf__am;
#define mf__av_zero() _mm256_setzero_ps()
#define mf__av_set1(x) _mm256_set1_ps(x)
#define mf__av_load(p) _mm256_loadu_ps(p)
#define mf__av_store(p, v) _mm256_storeu_ps(p, v)
#define mf__av_loadm(p, m) _mm256_maskload_ps(p, m)
#define mf__av_storem(p, m, v) _mm256_maskstore_ps(p, m, v)
#define mf__av_mask(n) _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#define mf__av_add(a, b) _mm256_add_ps(a, b)
#define mf__av_sub(a, b) _mm256_sub_ps(a, b)
#define mf__av_mul(a, b) _mm256_mul_ps(a, b)
#define mf__av_max(a, b) _mm256_max_ps(a, b)
#define mf__av_fma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define mf__av_gather(x, ld) \
    _mm256_i32gather_ps(x, _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(ld)), 4)
static mf__av mf__av_exp(mf__av x) {
    __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ), n, r, p;
    __m256i e;
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.0f)), _mm256_set1_ps(-87.0f));
    n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    p = _mm256_fmadd_ps(_mm256_set1_ps(1.9875691500e-4f), r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}
#else /* portable: "vectors" of one float, the register tile is 4 x 4 scalars */
#define MF__AW 1
#define MF__AV_MAXV 4
#define MF__AV_R8V 0
typedef float mf__av;
typedef int mf__am;
#define mf__av_zero() 0.0f
#define mf__av_set1(x) (x)
#define mf__av_load(p) (*(p))
#define mf__av_store(p, v) (*(p) = (v))
#define mf__av_loadm(p, m) ((void)(m), *(p))
#define mf__av_storem(p, m, v) ((void)(m), *(p) = (v))
#define mf__av_mask(n) (n)
#define mf__av_add(a, b) ((a) + (b))
#define mf__av_sub(a, b) ((a) - (b))
#define mf__av_mul(a, b) ((a) * (b))
#define mf__av_max(a, b) ((a) > (b) ? (a) : (b))
#define mf__av_fma(a, b, c) ((a) * (b) + (c))
#define mf__av_gather(x, ld) ((void)(ld), *(x))
#define mf__av_exp(x) expf(x)
#endif

/* Register tile of mf__attn_mm: R (1, 4 or 8) rows of C x NV (1..MF__AV_MAXV) vectors; the last
   vector is masked by mk. R and NV are constants at every use, so the dead parts fold away.
   8 rows only with NV <= MF__AV_R8V (AVX-512: 8 x 2 = 16 accumulators, AVX2: 8 x 1). */
#define MF__AT_FMA(r, R, NV) \
    if (R > r) { mf__av x = mf__av_set1(a[r * ars]); \
        c##r##0 = mf__av_fma(x, b0, c##r##0); \
        if (NV > 1) c##r##1 = mf__av_fma(x, b1, c##r##1); \
        if (NV > 2) c##r##2 = mf__av_fma(x, b2, c##r##2); \
        if (NV > 3) c##r##3 = mf__av_fma(x, b3, c##r##3); }
#define MF__AT_ST1(r, u, NV) \
    if (NV > u) { float *cp = c + (int64_t)r * ldc + u * MF__AW; mf__av t = c##r##u; \
        if (u == NV - 1) { if (add) t = mf__av_add(t, mf__av_loadm(cp, mk)); mf__av_storem(cp, mk, t); } \
        else { if (add) t = mf__av_add(t, mf__av_load(cp)); mf__av_store(cp, t); } }
#define MF__AT_ST(r, R, NV) \
    if (R > r) { MF__AT_ST1(r, 0, NV) MF__AT_ST1(r, 1, NV) MF__AT_ST1(r, 2, NV) MF__AT_ST1(r, 3, NV) }
#define MF__AT_LD(u, NV) \
    (NV > u ? (u == NV - 1 ? mf__av_loadm(b + u * MF__AW, mk) : mf__av_load(b + u * MF__AW)) : mf__av_zero())
#define MF__AT_ROWS(X, R, NV) X(0, R, NV) X(1, R, NV) X(2, R, NV) X(3, R, NV) X(4, R, NV) X(5, R, NV) \
    X(6, R, NV) X(7, R, NV)
#define MF__AT_DECL(r, R, NV) mf__av c##r##0 = z, c##r##1 = z, c##r##2 = z, c##r##3 = z;
#define MF__AT_TILE(R, NV) { \
    const mf__av z = mf__av_zero(); \
    MF__AT_ROWS(MF__AT_DECL, R, NV) \
    const float *a = a0, *b = b0p; \
    int p; \
    for (p = 0; p < k; p++, a += acs, b += ldb) { \
        mf__av b0 = MF__AT_LD(0, NV), b1 = MF__AT_LD(1, NV), b2 = MF__AT_LD(2, NV), b3 = MF__AT_LD(3, NV); \
        MF__AT_ROWS(MF__AT_FMA, R, NV) \
    } \
    MF__AT_ROWS(MF__AT_ST, R, NV) }

/* C[m][n] (+)= A[m][k] B[k][n] (add == 0 overwrites C) for the small tiles of the attention:
   A(i, p) = A[i * ars + p * acs] (either layout), B and C row-major. Single-threaded. */
static void mf__attn_mm(int m, int n, int k, const float *A, int ars, int acs, const float *B,
                        int ldb, float *C, int ldc, int add) {
    int i, j0;
    for (j0 = 0; j0 < n; j0 += MF__AV_MAXV * MF__AW) {
        int w = n - j0 < MF__AV_MAXV * MF__AW ? n - j0 : MF__AV_MAXV * MF__AW;
        int nv = (w + MF__AW - 1) / MF__AW;
        mf__am mk = mf__av_mask(w - (nv - 1) * MF__AW);
        const float *b0p = B + j0;
        i = 0;
        if (nv <= MF__AV_R8V)
            for (; i + 8 <= m; i += 8) {
                const float *a0 = A + (int64_t)i * ars;
                float *c = C + (int64_t)i * ldc + j0;
                if (nv == 1) MF__AT_TILE(8, 1)
#if MF__AV_R8V > 1
                else MF__AT_TILE(8, 2)
#endif
            }
        for (; i + 4 <= m; i += 4) {
            const float *a0 = A + (int64_t)i * ars;
            float *c = C + (int64_t)i * ldc + j0;
            switch (nv) {
            case 1: MF__AT_TILE(4, 1) break;
            case 2: MF__AT_TILE(4, 2) break;
            case 3: MF__AT_TILE(4, 3) break;
            default: MF__AT_TILE(4, 4) break;
            }
        }
        for (; i < m; i++) {
            const float *a0 = A + (int64_t)i * ars;
            float *c = C + (int64_t)i * ldc + j0;
            switch (nv) {
            case 1: MF__AT_TILE(1, 1) break;
            case 2: MF__AT_TILE(1, 2) break;
            case 3: MF__AT_TILE(1, 3) break;
            default: MF__AT_TILE(1, 4) break;
            }
        }
    }
}
#undef MF__AT_FMA
#undef MF__AT_ST1
#undef MF__AT_ST
#undef MF__AT_LD
#undef MF__AT_ROWS
#undef MF__AT_DECL
#undef MF__AT_TILE

/* dst[c * ldd + r] = s * src[r * lds + c] for c < cols, r < rows_pad (zeros from r = rows on);
   rows_pad is a multiple of MF__AW. */
static void mf__attn_transpose(const float *src, int lds, int rows, int rows_pad, int cols, float s,
                               float *dst, int ldd) {
    int r, c;
    for (r = 0; r + MF__AW <= rows; r += MF__AW)
        for (c = 0; c < cols; c++) {
            mf__av x = mf__av_gather(src + (int64_t)r * lds + c, lds);
            mf__av_store(dst + (int64_t)c * ldd + r, mf__av_mul(mf__av_set1(s), x));
        }
    for (c = 0; c < cols; c++) {
        float *d = dst + (int64_t)c * ldd;
        int i;
        for (i = r; i < rows; i++) d[i] = s * src[(int64_t)i * lds + c];
        for (; i < rows_pad; i++) d[i] = 0.0f;
    }
}

/* Hide key j from query i when j > i + off: st[key][query] = -inf for the keys j0.. (bk rows) and
   the queries i0.. of a tile (local query columns below j - off - i0). */
static void mf__attn_mask(float *st, int j0, int bk, int i0, int off) {
    int jj, ii;
    for (jj = 0; jj < bk; jj++) {
        int first = j0 + jj - off - i0; /* the first local query that sees key j0 + jj */
        if (first > MF__AT_BQ) first = MF__AT_BQ;
        for (ii = 0; ii < first; ii++) st[jj * MF__AT_BQ + ii] = -INFINITY;
    }
}

static int mf__attention_shape(mf_ctx *ctx, mf_tensor *out) {
    mf_tensor *q = out->src[0], *k = out->src[1], *v = out->src[2];
    int shape[4];
    char sq[64], sk[64], sv[64];
    mf_shape_str(q, sq, 64); mf_shape_str(k, sk, 64); mf_shape_str(v, sv, 64);
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4)
        return MF__SHAPE_FAIL("attention: q %s, k %s, v %s must all be 4-D: [B, H, T, d] (split the "
                              "heads with mf_reshape + mf_transpose)", sq, sk, sv);
    if (k->shape[0] != q->shape[0] || v->shape[0] != q->shape[0] || k->shape[1] != q->shape[1] ||
        v->shape[1] != q->shape[1])
        return MF__SHAPE_FAIL("attention: batch and head sizes differ: q %s, k %s, v %s; the first two "
                              "sizes [B, H] must be equal", sq, sk, sv);
    if (k->shape[2] != v->shape[2])
        return MF__SHAPE_FAIL("attention: k %s and v %s have different numbers of keys (size 2); "
                              "each key needs one value", sk, sv);
    if (k->shape[3] != q->shape[3])
        return MF__SHAPE_FAIL("attention: q %s and k %s have different head sizes dk (last size)", sq, sk);
    if (!(fabsf(out->farg[0]) <= 3.402823466e+38f)) /* not NaN, not infinite */
        return MF__SHAPE_FAIL("attention: scale is %g; it must be finite (usually 1 / sqrt(dk))",
                              (double)out->farg[0]);
    shape[0] = q->shape[0]; shape[1] = q->shape[1]; shape[2] = q->shape[2]; shape[3] = v->shape[3];
    mf__set_shape(out, 4, shape);
    return 0;
}

/* Forward of query tile qt of head bh; work: (dk + 64 + dv + 3) * 64 floats. */
static void mf__attn_fwd_tile(mf_tensor *out, int64_t bh, int qt, float *work) {
    const mf_tensor *Q = out->src[0], *K = out->src[1], *V = out->src[2];
    int Tq = Q->shape[2], Tk = K->shape[2], dk = Q->shape[3], dv = V->shape[3];
    int causal = out->iarg[0], off = Tk - Tq, i0 = qt * MF__AT_BQ, ii, jj, c, j0, kend;
    int bq = Tq - i0 < MF__AT_BQ ? Tq - i0 : MF__AT_BQ;
    float scale = out->farg[0];
    const float *q = Q->data + (bh * Tq + i0) * dk, *k = K->data + bh * Tk * dk;
    const float *v = V->data + bh * Tk * dv;
    float *o = out->data + (bh * Tq + i0) * dv, *lse = out->saved + bh * Tq + i0;
    float *qt_ = work, *st = qt_ + (int64_t)dk * MF__AT_BQ, *acc = st + MF__AT_BK * MF__AT_BQ;
    float *m = acc + (int64_t)MF__AT_BQ * dv, *l = m + MF__AT_BQ, *al = l + MF__AT_BQ;
    /* keys from kend on are hidden from every query of the tile */
    kend = causal ? (i0 + bq + off < Tk ? i0 + bq + off : Tk) : Tk;
    mf__attn_transpose(q, dk, bq, MF__AT_BQ, dk, scale, qt_, MF__AT_BQ);
    /* m starts very negative but finite: exp(m_old - m_new) is then 1 or 0, never NaN */
    for (ii = 0; ii < MF__AT_BQ; ii++) { m[ii] = -1e30f; l[ii] = 0; }
    memset(acc, 0, (size_t)MF__AT_BQ * dv * sizeof(float));
    for (j0 = 0; j0 < kend; j0 += MF__AT_BK) {
        int bk = kend - j0 < MF__AT_BK ? kend - j0 : MF__AT_BK;
        mf__attn_mm(bk, MF__AT_BQ, dk, k + (int64_t)j0 * dk, dk, 1, qt_, MF__AT_BQ, st, MF__AT_BQ, 0);
        if (causal && j0 + bk - 1 > i0 + off) mf__attn_mask(st, j0, bk, i0, off);
        for (ii = 0; ii < MF__AT_BQ; ii += MF__AW) { /* online softmax, MF__AW queries at a time */
            mf__av mo = mf__av_load(m + ii), mx = mo, sum = mf__av_zero(), a;
            for (jj = 0; jj < bk; jj++) mx = mf__av_max(mx, mf__av_load(st + jj * MF__AT_BQ + ii));
            a = mf__av_exp(mf__av_sub(mo, mx));
            for (jj = 0; jj < bk; jj++) {
                mf__av p = mf__av_exp(mf__av_sub(mf__av_load(st + jj * MF__AT_BQ + ii), mx));
                mf__av_store(st + jj * MF__AT_BQ + ii, p);
                sum = mf__av_add(sum, p);
            }
            mf__av_store(m + ii, mx);
            mf__av_store(al + ii, a);
            mf__av_store(l + ii, mf__av_fma(a, mf__av_load(l + ii), sum));
        }
        for (ii = 0; ii < bq; ii++)
            if (al[ii] != 1.0f)
                for (c = 0; c < dv; c++) acc[(int64_t)ii * dv + c] *= al[ii];
        mf__attn_mm(bq, dv, bk, st, 1, MF__AT_BQ, v + (int64_t)j0 * dv, dv, acc, dv, 1);
    }
    for (ii = 0; ii < bq; ii++) {
        float inv = l[ii] > 0 ? 1.0f / l[ii] : 0.0f;
        for (c = 0; c < dv; c++) o[(int64_t)ii * dv + c] = acc[(int64_t)ii * dv + c] * inv;
        lse[ii] = l[ii] > 0 ? m[ii] + logf(l[ii]) : INFINITY;
    }
}

static int mf__attn_threads(mf_ctx *ctx, double work) {
#if MF__OMP
    return mf__threads_for(ctx, work);
#else
    (void)ctx; (void)work;
    return 1;
#endif
}
static int mf__attn_thread_num(void) {
#if MF__OMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static void mf__attention_forward(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *Q = out->src[0], *K = out->src[1], *V = out->src[2];
    int Tq = Q->shape[2], Tk = K->shape[2], dk = Q->shape[3], dv = V->shape[3];
    int nqt = (Tq + MF__AT_BQ - 1) / MF__AT_BQ, nt;
    int64_t BH = (int64_t)Q->shape[0] * Q->shape[1], n = BH * nqt, t;
    int64_t per = ((int64_t)(dk + dv + MF__AT_BK + 3) * MF__AT_BQ + 15) & ~(int64_t)15;
    float *work;
    nt = mf__attn_threads(ctx, 2.0 * (double)BH * Tq * Tk * (dk + dv) * (out->iarg[0] ? 0.5 : 1.0));
    if (nt > n) nt = (int)n;
    out->saved = (float *)mf__alloc(ctx, (size_t)(BH * Tq) * sizeof(float));
    work = (float *)mf__alloc(ctx, (size_t)(per * nt) * sizeof(float));
    if (!out->saved || !work) return;
#if MF__OMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
#endif
    for (t = 0; t < n; t++) /* the last query tiles of a causal head have the most keys: go first */
        mf__attn_fwd_tile(out, t / nqt, nqt - 1 - (int)(t % nqt), work + per * mf__attn_thread_num());
}

/* Backward of one (key tile kt, query tile qt) pair of head bh. what: 1 = dK and dV, 2 = dQ, 3 = all.
   hd: the head's scale * Q^T [dk][Tqp], dO^T [dv][Tqp], lse [Tqp] (+inf padding), D [Tqp];
   st, dp: two 64 x 64 tiles of the thread. */
static void mf__attn_bwd_pair(mf_tensor *out, int64_t bh, int kt, int qt, int what, const float *hd,
                              float *st, float *dp) {
    const mf_tensor *Q = out->src[0], *K = out->src[1], *V = out->src[2];
    int Tq = Q->shape[2], Tk = K->shape[2], dk = Q->shape[3], dv = V->shape[3], causal = out->iarg[0];
    int Tqp = (Tq + MF__AT_BQ - 1) / MF__AT_BQ * MF__AT_BQ, off = Tk - Tq, jj, ii;
    int i0 = qt * MF__AT_BQ, j0 = kt * MF__AT_BK;
    int bq = Tq - i0 < MF__AT_BQ ? Tq - i0 : MF__AT_BQ, bk = Tk - j0 < MF__AT_BK ? Tk - j0 : MF__AT_BK;
    float scale = out->farg[0];
    float *gq = (what & 2) ? mf__g(Q) : NULL, *gk = (what & 1) ? mf__g(K) : NULL;
    float *gv = (what & 1) ? mf__g(V) : NULL;
    const float *q = Q->data + (bh * Tq + i0) * dk, *k = K->data + (bh * Tk + j0) * dk;
    const float *v = V->data + (bh * Tk + j0) * dv, *dO = out->grad + (bh * Tq + i0) * dv;
    const float *qs = hd + i0, *dot = hd + (int64_t)dk * Tqp + i0;
    const float *lse = hd + (int64_t)(dk + dv) * Tqp + i0, *D = lse + Tqp;
    if (causal && j0 > i0 + bq - 1 + off) return; /* every key of the tile is hidden */
    /* P^T = exp(scale k q - lse) */
    mf__attn_mm(bk, MF__AT_BQ, dk, k, dk, 1, qs, Tqp, st, MF__AT_BQ, 0);
    if (causal && j0 + bk - 1 > i0 + off) mf__attn_mask(st, j0, bk, i0, off);
    for (jj = 0; jj < bk; jj++)
        for (ii = 0; ii < MF__AT_BQ; ii += MF__AW) {
            float *s = st + jj * MF__AT_BQ + ii;
            mf__av_store(s, mf__av_exp(mf__av_sub(mf__av_load(s), mf__av_load(lse + ii))));
        }
    if (gv) /* dV += P^T dO */
        mf__attn_mm(bk, dv, bq, st, MF__AT_BQ, 1, dO, dv, gv + (bh * Tk + j0) * dv, dv, 1);
    if (!gk && !gq) return;
    /* dP^T = v dO^T; dS^T = scale * P^T * (dP^T - D) */
    mf__attn_mm(bk, MF__AT_BQ, dv, v, dv, 1, dot, Tqp, dp, MF__AT_BQ, 0);
    for (jj = 0; jj < bk; jj++)
        for (ii = 0; ii < MF__AT_BQ; ii += MF__AW) {
            float *d = dp + jj * MF__AT_BQ + ii;
            mf__av ds = mf__av_mul(mf__av_load(st + jj * MF__AT_BQ + ii),
                                   mf__av_sub(mf__av_load(d), mf__av_load(D + ii)));
            mf__av_store(d, mf__av_mul(ds, mf__av_set1(scale)));
        }
    if (gq) /* dQ += dS K */
        mf__attn_mm(bq, dk, bk, dp, 1, MF__AT_BQ, k, dk, gq + (bh * Tq + i0) * dk, dk, 1);
    if (gk) /* dK += dS^T Q */
        mf__attn_mm(bk, dk, bq, dp, MF__AT_BQ, 1, q, dk, gk + (bh * Tk + j0) * dk, dk, 1);
}

static void mf__attention_backward(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *Q = out->src[0], *K = out->src[1], *V = out->src[2];
    int Tq = Q->shape[2], Tk = K->shape[2], dk = Q->shape[3], dv = V->shape[3];
    int nqt = (Tq + MF__AT_BQ - 1) / MF__AT_BQ, nkt = (Tk + MF__AT_BK - 1) / MF__AT_BK;
    int Tqp = nqt * MF__AT_BQ, nt, pass, need_kv = mf__g(K) || mf__g(V), need_q = mf__g(Q) != NULL;
    int64_t BH = (int64_t)Q->shape[0] * Q->shape[1], hs = (int64_t)(dk + dv + 2) * Tqp, t;
    int64_t per = 2 * MF__AT_BK * MF__AT_BQ;
    float scale = out->farg[0], *head, *work;
    if (!need_kv && !need_q) return;
    nt = mf__attn_threads(ctx, 5.0 * (double)BH * Tq * Tk * (dk + dv) * (out->iarg[0] ? 0.5 : 1.0));
    head = (float *)mf__alloc(ctx, (size_t)(BH * hs) * sizeof(float));
    work = (float *)mf__alloc(ctx, (size_t)(per * nt) * sizeof(float));
    if (!head || !work) return;
    /* per head: scale * Q^T [dk][Tqp], dO^T [dv][Tqp], lse [Tqp] (+inf padding), D = rowsum(dO * O) */
#if MF__OMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
    for (t = 0; t < BH; t++) {
        const float *q = Q->data + t * Tq * dk, *o = out->data + t * Tq * dv, *g = out->grad + t * Tq * dv;
        float *qs = head + t * hs, *dot = qs + (int64_t)dk * Tqp, *lse = dot + (int64_t)dv * Tqp;
        float *D = lse + Tqp;
        int i, c;
        mf__attn_transpose(q, dk, Tq, Tqp, dk, scale, qs, Tqp);
        mf__attn_transpose(g, dv, Tq, Tqp, dv, 1.0f, dot, Tqp);
        for (i = 0; i < Tqp; i++) {
            float d = 0;
            if (i < Tq) for (c = 0; c < dv; c++) d += g[(int64_t)i * dv + c] * o[(int64_t)i * dv + c];
            lse[i] = i < Tq ? out->saved[t * Tq + i] : INFINITY;
            D[i] = d;
        }
    }
    /* Whole heads per thread (5 products per tile pair) when that keeps the threads about as busy
       as the split (7 products per pair); else the dK/dV pass, then the dQ pass. */
    if (need_kv && need_q && (double)((BH + nt - 1) / nt) <= 1.4 * (double)BH / nt) {
#if MF__OMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
#endif
        for (t = 0; t < BH; t++) {
            float *st = work + per * mf__attn_thread_num();
            int kt, qt;
            for (kt = 0; kt < nkt; kt++)
                for (qt = 0; qt < nqt; qt++)
                    mf__attn_bwd_pair(out, t, kt, qt, 3, head + t * hs, st, st + MF__AT_BK * MF__AT_BQ);
        }
        return;
    }
    for (pass = 0; pass < 2; pass++) { /* 0: dK, dV over (head, key tile); 1: dQ over (head, query tile) */
        int nown = pass == 0 ? nkt : nqt, nloop = pass == 0 ? nqt : nkt;
        int64_t n = BH * nown;
        if (pass == 0 ? !need_kv : !need_q) continue;
#if MF__OMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
#endif
        for (t = 0; t < n; t++) {
            int64_t bh = t / nown;
            int own = (int)(t % nown), x;
            float *st = work + per * mf__attn_thread_num();
            for (x = 0; x < nloop; x++)
                mf__attn_bwd_pair(out, bh, pass == 0 ? own : x, pass == 0 ? x : own, pass == 0 ? 1 : 2,
                                  head + bh * hs, st, st + MF__AT_BK * MF__AT_BQ);
        }
    }
}
static const mf__op mf__op_attention = { "attention", 3, mf__attention_shape, mf__attention_forward, mf__attention_backward, 0 };
MFDEF mf_tensor *mf_attention(mf_ctx *ctx, mf_tensor *q, mf_tensor *k, mf_tensor *v, float scale, int causal) {
    mf_tensor *t = mf__begin(ctx, &mf__op_attention, q, k, v, NULL);
    if (t) { t->farg[0] = scale; t->iarg[0] = causal != 0; }
    return mf__finish(ctx, t);
}
#endif /* MF_ATTENTION_IMPLEMENTED */
