/* test_ops.c - every op of metaformer.h: forward values against naive references, gradients
 * against finite differences (tests/gradcheck.h), autograd semantics, arena reuse, initialisers,
 * SGEMM. Shapes are small (this runs under ASan too) and include odd and 1-sized dims. */
#include <stdlib.h>
/* count the library's allocations: a training step must not allocate once the arena is sized */
static long n_allocs = 0;
static void *count_malloc(size_t n) { n_allocs++; return malloc(n); }
static void *count_realloc(void *p, size_t n) { n_allocs++; return realloc(p, n); }
#define MF_MALLOC(sz) count_malloc(sz)
#define MF_REALLOC(p, sz) count_realloc(p, sz)
#define MF_FREE(p) free(p)
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#include "mf_test.h"
#include "gradcheck.h"
#include <string.h>
#include <float.h>

/* ---- helpers ---------------------------------------------------------------------------------- */
static uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
/* uniform in [lo, hi) from (seed, i) */
static float urand(uint64_t seed, uint64_t i, float lo, float hi) {
    return lo + (hi - lo) * (float)((double)(mix64(mix64(seed) + i) >> 11) * (1.0 / 9007199254740992.0));
}
/* an activation tensor with seeded values in [lo, hi) */
static mf_tensor *rnd(mf_ctx *c, int ndim, const int *shape, uint64_t seed, float lo, float hi) {
    mf_tensor *t = mf_new(c, ndim, shape);
    int64_t i;
    if (t) for (i = 0; i < t->ne; i++) t->data[i] = urand(seed, (uint64_t)i, lo, hi);
    return t;
}
static mf_tensor *rnd_param(mf_ctx *c, const char *name, int ndim, const int *shape, uint64_t seed) {
    mf_tensor *t = mf_param(c, name, ndim, shape);
    int64_t i;
    if (t) for (i = 0; i < t->ne; i++) t->data[i] = urand(seed, (uint64_t)i, -1, 1);
    return t;
}
static int shape_is(const mf_tensor *t, int ndim, int d0, int d1, int d2, int d3) {
    int d[4], i;
    d[0] = d0; d[1] = d1; d[2] = d2; d[3] = d3;
    if (!t || t->ndim != ndim) return 0;
    for (i = 0; i < ndim; i++) if (t->shape[i] != d[i]) return 0;
    return 1;
}
static double max_abs_diff(const float *a, const float *b, int64_t n) {
    double m = 0;
    int64_t i;
    for (i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d; /* NaN propagates */
    }
    return m;
}
/* runs a gradient check and fails the current test when it does not pass */
#define GRADCHECK(name, n, specs, build, user) MFT_CHECK(GC_OK(gc_check(name, n, specs, build, user, NULL)))

/* op arguments passed to the build functions */
typedef struct args {
    int i[8];
    float f[4];
    const int32_t *ids;
    int ndim, shape[4];
} args;
static args A0(void) { args a; memset(&a, 0, sizeof a); return a; }

/* ==== matmul ================================================================================== */
typedef struct mm_case { int bnd_a, bnd_b; int batch[2]; int M, K, N; } mm_case;

static void mm_shapes(const mm_case *c, int ta, int tb, int *nda, int *sa, int *ndb, int *sb) {
    int i;
    for (i = 0; i < c->bnd_a; i++) sa[i] = c->batch[i];
    sa[c->bnd_a] = ta ? c->K : c->M; sa[c->bnd_a + 1] = ta ? c->M : c->K;
    for (i = 0; i < c->bnd_b; i++) sb[i] = c->batch[i];
    sb[c->bnd_b] = tb ? c->N : c->K; sb[c->bnd_b + 1] = tb ? c->K : c->N;
    *nda = c->bnd_a + 2; *ndb = c->bnd_b + 2;
}
/* reference: each batch matrix of the batched operand(s); a 2-D operand is shared */
static void naive_matmul(const mf_tensor *a, const mf_tensor *b, int ta, int tb, float *out, int *batch_out) {
    int M = a->shape[a->ndim - (ta ? 1 : 2)], K = a->shape[a->ndim - (ta ? 2 : 1)];
    int N = b->shape[b->ndim - (tb ? 2 : 1)];
    int64_t ba = a->ne / ((int64_t)M * K), bb = b->ne / ((int64_t)K * N), batch = ba > bb ? ba : bb, bi;
    for (bi = 0; bi < batch; bi++) {
        const float *A = a->data + (a->ndim > 2 ? bi * M * K : 0), *B = b->data + (b->ndim > 2 ? bi * K * N : 0);
        int i, j, k;
        for (i = 0; i < M; i++)
            for (j = 0; j < N; j++) {
                double s = 0;
                for (k = 0; k < K; k++)
                    s += (double)(ta ? A[k * M + i] : A[i * K + k]) * (tb ? B[j * K + k] : B[k * N + j]);
                out[(bi * M + i) * N + j] = (float)s;
            }
    }
    *batch_out = (int)batch;
}

static const mm_case mm_cases[] = {
    {0, 0, {1, 1}, 3, 4, 5},   /* 2-D @ 2-D */
    {1, 1, {2, 1}, 3, 4, 5},   /* both batched, 3-D */
    {2, 2, {2, 3}, 2, 3, 4},   /* both batched, 4-D */
    {1, 0, {3, 1}, 3, 4, 5},   /* b shared */
    {2, 0, {2, 2}, 3, 2, 3},   /* b shared, 4-D a */
    {0, 1, {3, 1}, 3, 4, 5},   /* a shared */
    {0, 2, {2, 2}, 2, 3, 4},   /* a shared, 4-D b */
    {1, 1, {1, 1}, 1, 5, 1},   /* 1-sized batch, M = N = 1 */
    {1, 0, {2, 1}, 5, 1, 3},   /* K = 1 */
    {1, 1, {3, 1}, 7, 9, 11},  /* odd, bigger */
};
#define N_MM_CASES ((int)(sizeof mm_cases / sizeof mm_cases[0]))

static void test_matmul_forward(void) {
    mf_ctx *c = mf_ctx_new(1);
    int ci, t;
    for (ci = 0; ci < N_MM_CASES; ci++)
        for (t = 0; t < 4; t++) {
            const mm_case *mc = &mm_cases[ci];
            int ta = t & 1, tb = t >> 1, nda, ndb, sa[4], sb[4], batch, bmax, i;
            mf_tensor *a, *b, *y;
            float *ref;
            mm_shapes(mc, ta, tb, &nda, sa, &ndb, sb);
            a = rnd(c, nda, sa, 10 + ci, -1, 1); b = rnd(c, ndb, sb, 20 + ci, -1, 1);
            y = mf_matmul(c, a, b, ta, tb);
            MFT_CHECK(y != NULL);
            if (!y) { printf("    case %d trans %d %d: %s\n", ci, ta, tb, mf_error(c)); mf_clear_error(c); continue; }
            ref = (float *)malloc((size_t)y->ne * sizeof(float));
            naive_matmul(a, b, ta, tb, ref, &batch);
            bmax = mc->bnd_a > mc->bnd_b ? mc->bnd_a : mc->bnd_b;
            MFT_CHECK(y->ndim == bmax + 2);
            for (i = 0; i < bmax; i++) MFT_CHECK(y->shape[i] == mc->batch[i]);
            MFT_CHECK(y->shape[bmax] == mc->M && y->shape[bmax + 1] == mc->N);
            MFT_CHECK(y->ne == (int64_t)batch * mc->M * mc->N);
            if (max_abs_diff(y->data, ref, y->ne) > 1e-5) {
                printf("    matmul case %d trans %d %d: max diff %g\n", ci, ta, tb, max_abs_diff(y->data, ref, y->ne));
                MFT_CHECK(0);
            }
            free(ref);
        }
    MFT_CHECK(mf_ok(c));
    mf_ctx_free(c);
}

static mf_tensor *b_matmul(mf_ctx *c, mf_tensor **in, void *u) {
    const args *a = (const args *)u;
    return mf_matmul(c, in[0], in[1], a->i[0], a->i[1]);
}
static void test_matmul_grad(void) {
    int ci, t;
    for (ci = 0; ci < N_MM_CASES - 1; ci++) /* the big odd case: forward only */
        for (t = 0; t < 4; t++) {
            mm_case mc = mm_cases[ci];
            int nda, ndb, sa[4], sb[4];
            gc_spec s[2];
            args a = A0();
            char name[64];
            if (mc.M > 3) mc.M = 3;
            if (mc.N > 3) mc.N = 3;
            a.i[0] = t & 1; a.i[1] = t >> 1;
            mm_shapes(&mc, a.i[0], a.i[1], &nda, sa, &ndb, sb);
            s[0] = gc_in(nda, sa[0], sa[1], nda > 2 ? sa[2] : 0, nda > 3 ? sa[3] : 0);
            s[1] = gc_in(ndb, sb[0], sb[1], ndb > 2 ? sb[2] : 0, ndb > 3 ? sb[3] : 0);
            snprintf(name, sizeof name, "matmul case %d trans %d %d", ci, a.i[0], a.i[1]);
            GRADCHECK(name, 2, s, b_matmul, &a);
        }
}
/* the same tensor on both sides: x @ x^T and x^T @ x (gradients of both operands add up) */
static mf_tensor *b_matmul_self(mf_ctx *c, mf_tensor **in, void *u) {
    const args *a = (const args *)u;
    return mf_matmul(c, in[0], in[0], a->i[0], !a->i[0]);
}
static void test_matmul_self(void) {
    gc_spec s[1];
    args a = A0();
    s[0] = gc_in(3, 2, 3, 4, 0);
    GRADCHECK("x @ x^T", 1, s, b_matmul_self, &a);
    a.i[0] = 1;
    GRADCHECK("x^T @ x", 1, s, b_matmul_self, &a);
}

/* ==== head_matmul ============================================================================= */
/* y = mf_head_matmul(x, w) and its gradients against mf_matmul on a heads-major copy of x:
   permute [L0, L1, H, K] -> [H, L0, L1, K], one [L0 L1, K] @ [K, N] product per head, permute back */
static mf_tensor *head_matmul_by_permutes(mf_ctx *c, mf_tensor *x, mf_tensor *w) {
    int to_heads[4] = {2, 0, 1, 3}, back[4] = {1, 2, 0, 3};
    int L0 = x->shape[0], L1 = x->shape[1], H = x->shape[2], K = x->shape[3], N = w->shape[2];
    int flat[3], split[4];
    flat[0] = H; flat[1] = L0 * L1; flat[2] = K;
    split[0] = H; split[1] = L0; split[2] = L1; split[3] = N;
    return mf_permute(c, mf_reshape(c, mf_matmul(c, mf_reshape(c, mf_permute(c, x, to_heads), 3, flat), w, 0, 0),
                                    4, split), back);
}
/* forward values and both gradients (loss = sum(y * r), r fixed) of the two ways */
static void check_head_matmul(int L0, int L1, int H, int K, int N) {
    mf_ctx *c = mf_ctx_new(3);
    int xs[4], ws[3], pass, i;
    mf_tensor *x, *w, *y[2];
    float *gx[2], *gw[2];
    xs[0] = L0; xs[1] = L1; xs[2] = H; xs[3] = K;
    ws[0] = H; ws[1] = K; ws[2] = N;
    x = rnd_param(c, "x", 4, xs, 31); w = rnd_param(c, "w", 3, ws, 32);
    for (pass = 0; pass < 2; pass++) {
        mf_tensor *r;
        y[pass] = pass ? head_matmul_by_permutes(c, x, w) : mf_head_matmul(c, x, w);
        MFT_CHECK(shape_is(y[pass], 4, L0, L1, H, N));
        if (!y[pass]) { printf("    %s\n", mf_error(c)); mf_ctx_free(c); return; }
        r = rnd(c, 4, y[pass]->shape, 33, -1, 1);
        mf_zero_grad(c);
        mf_backward(c, mf_sum(c, mf_mul(c, y[pass], r)));
        gx[pass] = (float *)malloc((size_t)x->ne * sizeof(float));
        gw[pass] = (float *)malloc((size_t)w->ne * sizeof(float));
        memcpy(gx[pass], x->grad, (size_t)x->ne * sizeof(float));
        memcpy(gw[pass], w->grad, (size_t)w->ne * sizeof(float));
    }
    MFT_CHECK(mf_ok(c));
    for (i = 0; i < 3; i++) {
        const float *a = i == 0 ? y[0]->data : i == 1 ? gx[0] : gw[0], *b = i == 0 ? y[1]->data : i == 1 ? gx[1] : gw[1];
        int64_t n = i == 0 ? y[0]->ne : i == 1 ? x->ne : w->ne;
        if (max_abs_diff(a, b, n) > 1e-5) {
            printf("    head_matmul [%d, %d, %d, %d] @ [%d, %d, %d]: %s differs from the permuted matmul by %g\n", L0, L1,
                   H, K, H, K, N, i == 0 ? "y" : i == 1 ? "dx" : "dw", max_abs_diff(a, b, n));
            MFT_CHECK(0);
        }
    }
    for (pass = 0; pass < 2; pass++) { free(gx[pass]); free(gw[pass]); }
    mf_ctx_free(c);
}
static mf_tensor *b_head_matmul(mf_ctx *c, mf_tensor **in, void *u) {
    (void)u;
    return mf_head_matmul(c, in[0], in[1]);
}
static void test_head_matmul(void) {
    gc_spec s[2];
    check_head_matmul(2, 9, 3, 5, 7); /* odd sizes, N > K */
    check_head_matmul(2, 9, 3, 5, 2); /* N < K */
    check_head_matmul(1, 1, 1, 1, 1);
    check_head_matmul(4, 64, 8, 32, 32); /* the model's shape (more rows than a GEMM tile) */
    check_head_matmul(3, 100, 2, 32, 32); /* a ragged last row block */
    check_head_matmul(1, 5, 2, 130, 3);  /* K and N wider than a register tile */
    check_head_matmul(1, 5, 2, 3, 129);
    s[0] = gc_in(4, 2, 3, 3, 4); s[1] = gc_in(3, 3, 4, 5, 0);
    GRADCHECK("head_matmul [2, 3, 3, 4] @ [3, 4, 5]", 2, s, b_head_matmul, NULL);
    s[0] = gc_in(2, 2, 5, 0, 0); s[1] = gc_in(3, 2, 5, 3, 0);
    GRADCHECK("head_matmul [2, 5] @ [2, 5, 3]", 2, s, b_head_matmul, NULL);
}

/* ==== linear ================================================================================== */
static mf_tensor *b_linear(mf_ctx *c, mf_tensor **in, void *u) {
    const args *a = (const args *)u;
    return mf_linear(c, in[0], in[1], a->i[0] ? in[2] : NULL);
}
static void test_linear(void) {
    mf_ctx *c = mf_ctx_new(2);
    int xs[3] = {2, 3, 4}, ws[2] = {5, 4}, bias_on;
    mf_tensor *x = rnd(c, 3, xs, 1, -1, 1), *w = rnd(c, 2, ws, 2, -1, 1), *b = rnd(c, 1, &ws[0], 3, -1, 1);
    for (bias_on = 0; bias_on < 2; bias_on++) {
        mf_tensor *y = mf_linear(c, x, w, bias_on ? b : NULL);
        int r, o, k;
        double md = 0;
        MFT_CHECK(shape_is(y, 3, 2, 3, 5, 0));
        if (!y) break;
        for (r = 0; r < 6; r++)
            for (o = 0; o < 5; o++) {
                double s = bias_on ? b->data[o] : 0;
                for (k = 0; k < 4; k++) s += (double)x->data[r * 4 + k] * w->data[o * 4 + k];
                if (fabs(s - y->data[r * 5 + o]) > md) md = fabs(s - y->data[r * 5 + o]);
            }
        MFT_CHECK(md < 1e-5);
    }
    { /* 1-D x */
        mf_tensor *x1 = rnd(c, 1, &xs[2], 4, -1, 1), *y = mf_linear(c, x1, w, b);
        MFT_CHECK(shape_is(y, 1, 5, 0, 0, 0));
    }
    MFT_CHECK(mf_ok(c));
    mf_ctx_free(c);
    {
        gc_spec s[3];
        args a = A0();
        s[0] = gc_in(2, 3, 4, 0, 0); s[1] = gc_in(2, 5, 4, 0, 0); s[2] = gc_in(1, 5, 0, 0, 0);
        GRADCHECK("linear 2-D no bias", 2, s, b_linear, &a);
        a.i[0] = 1;
        GRADCHECK("linear 2-D bias", 3, s, b_linear, &a);
        s[0] = gc_in(3, 2, 3, 4, 0);
        GRADCHECK("linear 3-D bias", 3, s, b_linear, &a);
        a.i[0] = 0;
        GRADCHECK("linear 3-D no bias", 2, s, b_linear, &a);
        s[0] = gc_in(3, 1, 1, 4, 0); s[1] = gc_in(2, 1, 4, 0, 0); s[2] = gc_in(1, 1, 0, 0, 0);
        a.i[0] = 1;
        GRADCHECK("linear 1-sized", 3, s, b_linear, &a);
    }
}

/* ==== add / sub / mul ========================================================================= */
static mf_tensor *b_binary(mf_ctx *c, mf_tensor **in, void *u) {
    const args *a = (const args *)u;
    mf_tensor *x = in[a->i[1]], *y = in[1 - a->i[1]]; /* i[1] = 1: the smaller operand first */
    switch (a->i[0]) {
    case 0: return mf_add(c, x, y);
    case 1: return mf_sub(c, x, y);
    default: return mf_mul(c, x, y);
    }
}
/* broadcast configurations: in[0] is the big operand, in[1] the small one */
static const int bin_small[][5] = { /* ndim, shape */
    {3, 2, 3, 4, 0},  /* same shape */
    {1, 4, 0, 0, 0},  /* bias-like suffix [D] */
    {2, 1, 4, 0, 0},  /* [1, D] */
    {2, 3, 4, 0, 0},  /* trailing [T, D] */
    {1, 1, 0, 0, 0},  /* one-element scalar */
    {3, 1, 1, 1, 0},  /* one element, 3-D */
};
static void test_binary_forward(void) {
    mf_ctx *c = mf_ctx_new(3);
    int bs[3] = {2, 3, 4}, cfg, op, order;
    mf_tensor *big = rnd(c, 3, bs, 1, -2, 2);
    for (cfg = 0; cfg < (int)(sizeof bin_small / sizeof bin_small[0]); cfg++) {
        mf_tensor *small = rnd(c, bin_small[cfg][0], &bin_small[cfg][1], 10 + cfg, -2, 2);
        for (op = 0; op < 3; op++)
            for (order = 0; order < 2; order++) {
                mf_tensor *y = order == 0 ? (op == 0 ? mf_add(c, big, small) : op == 1 ? mf_sub(c, big, small) : mf_mul(c, big, small))
                                          : (op == 0 ? mf_add(c, small, big) : op == 1 ? mf_sub(c, small, big) : mf_mul(c, small, big));
                int64_t i;
                int bad = 0;
                MFT_CHECK(shape_is(y, 3, 2, 3, 4, 0));
                if (!y) { printf("    %s\n", mf_error(c)); mf_clear_error(c); continue; }
                for (i = 0; i < 24; i++) {
                    float p = big->data[i], q = small->data[i % small->ne], l = order ? q : p, r = order ? p : q;
                    float e = op == 0 ? l + r : op == 1 ? l - r : l * r;
                    if (y->data[i] != e) bad = 1;
                }
                if (bad) printf("    binary op %d cfg %d order %d: wrong values\n", op, cfg, order);
                MFT_CHECK(!bad);
            }
    }
    { /* hand example: [2, 3] - [3] with the bias first */
        int s2[2] = {2, 3}, s1 = 3;
        const float xv[6] = {1, 2, 3, 4, 5, 6}, bv[3] = {10, 20, 30}, ev[6] = {9, 18, 27, 6, 15, 24};
        mf_tensor *y = mf_sub(c, mf_from(c, 1, &s1, bv), mf_from(c, 2, s2, xv));
        MFT_CHECK(y && max_abs_diff(y->data, ev, 6) == 0);
    }
    MFT_CHECK(mf_ok(c));
    mf_ctx_free(c);
}
static void test_binary_grad(void) {
    int cfg, op, order;
    for (cfg = 0; cfg < (int)(sizeof bin_small / sizeof bin_small[0]); cfg++)
        for (op = 0; op < 3; op++)
            for (order = 0; order < 2; order++) {
                gc_spec s[2];
                args a = A0();
                char name[64];
                const int *sm = bin_small[cfg];
                s[0] = gc_in(3, 2, 3, 4, 0);
                s[1] = gc_in(sm[0], sm[1], sm[2], sm[3], sm[4]);
                a.i[0] = op; a.i[1] = order;
                snprintf(name, sizeof name, "%s cfg %d %s", op == 0 ? "add" : op == 1 ? "sub" : "mul", cfg,
                         order ? "small first" : "big first");
                GRADCHECK(name, 2, s, b_binary, &a);
            }
}
/* x * x: the same tensor twice */
static mf_tensor *b_square(mf_ctx *c, mf_tensor **in, void *u) { (void)u; return mf_mul(c, in[0], in[0]); }
static void test_binary_self(void) {
    gc_spec s[1];
    s[0] = gc_in(2, 3, 5, 0, 0);
    GRADCHECK("x * x", 1, s, b_square, NULL);
}

/* ==== unary =================================================================================== */
static mf_tensor *b_unary(mf_ctx *c, mf_tensor **in, void *u) {
    const args *a = (const args *)u;
    switch (a->i[0]) {
    case 0: return mf_scale(c, in[0], a->f[0]);
    case 1: return mf_relu(c, in[0]);
    case 2: return mf_gelu(c, in[0], 0);
    case 3: return mf_gelu(c, in[0], 1);
    case 4: return mf_sigmoid(c, in[0]);
    case 5: return mf_silu(c, in[0]);
    default: return mf_exp(c, in[0]);
    }
}
static double ref_unary(int kind, double x, double s) {
    switch (kind) {
    case 0: return s * x;
    case 1: return x > 0 ? x : 0;
    case 2: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case 3: return 0.5 * x * (1 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case 4: return 1 / (1 + exp(-x));
    case 5: return x / (1 + exp(-x));
    default: return exp(x);
    }
}
static void test_unary_forward(void) {
    static const float xv[12] = {-30, -5, -2.5f, -1, -0.3f, 0, 0.25f, 0.5f, 1, 2, 4.5f, 12};
    static const char *names[7] = {"scale", "relu", "gelu", "gelu_tanh", "sigmoid", "silu", "exp"};
    mf_ctx *c = mf_ctx_new(4);
    int n = 12, kind, i;
    mf_tensor *x = mf_from(c, 1, &n, xv);
    for (kind = 0; kind < 7; kind++) {
        args a = A0();
        mf_tensor *in[1], *y;
        a.i[0] = kind; a.f[0] = -1.75f;
        in[0] = x;
        y = b_unary(c, in, &a);
        MFT_CHECK(shape_is(y, 1, 12, 0, 0, 0));
        if (!y) break;
        for (i = 0; i < 12; i++) {
            double e = ref_unary(kind, xv[i], a.f[0]);
            if (!(fabs(y->data[i] - e) <= 2e-6 * (1 + fabs(e)))) {
                printf("    %s(%g) = %.9g, expected %.9g\n", names[kind], (double)xv[i], (double)y->data[i], e);
                MFT_CHECK(0);
            }
        }
    }
    /* a few published values */
    {
        const float one = 1.0f;
        int k = 1;
        mf_tensor *o = mf_from(c, 1, &k, &one);
        MFT_NEAR(mf_gelu(c, o, 0)->data[0], 0.8413447460685429, 1e-6);
        MFT_NEAR(mf_gelu(c, o, 1)->data[0], 0.8411919906082768, 1e-6);
        MFT_NEAR(mf_silu(c, o)->data[0], 0.7310585786300049, 1e-6);
    }
    MFT_CHECK(mf_ok(c));
    mf_ctx_free(c);
}
static void test_unary_grad(void) {
    static const char *names[7] = {"scale", "relu", "gelu", "gelu_tanh", "sigmoid", "silu", "exp"};
    int kind;
    for (kind = 0; kind < 7; kind++) {
        gc_spec s[1];
        args a = A0();
        a.i[0] = kind; a.f[0] = -1.75f;
        s[0] = gc_range(gc_in(3, 2, 3, 5, 0), -3, 3, kind == 1 ? 0.05f : 0.0f); /* relu: stay off 0 */
        if (kind == 6) s[0] = gc_range(s[0], -2, 2, 0);
        GRADCHECK(names[kind], 1, s, b_unary, &a);
    }
}

/* The table GELU kernel (mf__act_run) against double erfc / exp on a grid of 2^-10 over [-10, 10]
   and a few thousand random floats: |err| <= 1 ulp of the result + 5e-8. The ulp is the final
   rounding of x + gelu(-x) or 1 - gelu'(-x) (with the reference's own rounding to float); 5e-8
   covers the fit (below 1e-8, tests/gelu_table.py) and the float evaluation of the folded value,
   which is at most 0.5 in size. Checked once on every float in [-10, 10]: at most 1.1e-8 over one
   ulp. Tails, infinities and NaN exactly; results do not depend on where in the buffer x lies. */
static double gelu_ref(double x) { return 0.5 * x * erfc(-x / sqrt(2.0)); }
static double dgelu_ref(double x) { return 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI); }
static int gelu_close(float got, double want) {
    float w = (float)want;
    double ulp = (double)nextafterf(fabsf(w), INFINITY) - (double)fabsf(w);
    return (double)got == want || fabs((double)got - want) <= ulp + 5e-8; /* == for the infinities */
}
/* y = gelu(x), d = gelu'(x) (upstream gradient 1) */
static void gelu_eval(mf_ctx *c, const float *x, float *y, float *d, float *one, int64_t n) {
    int64_t i;
    for (i = 0; i < n; i++) one[i] = 1.0f;
    mf__act_run(c, MF__GELU, x, NULL, y, n, 0);
    mf__act_run(c, MF__GELU, x, one, d, n, 0);
}
static void gelu_check_grid(mf_ctx *c, float *x, float *y, float *d, float *one, int64_t n) {
    int64_t i, bad = 0;
    gelu_eval(c, x, y, d, one, n);
    for (i = 0; i < n; i++) {
        if (gelu_close(y[i], gelu_ref(x[i])) && gelu_close(d[i], dgelu_ref(x[i]))) continue;
        if (bad++ < 5)
            printf("    x = %.9g: gelu %.9g (want %.9g), gelu' %.9g (want %.9g)\n", (double)x[i], (double)y[i],
                   gelu_ref(x[i]), (double)d[i], dgelu_ref(x[i]));
    }
    MFT_CHECK(bad == 0);
}
static void test_gelu_accuracy(void) {
    enum { NG = 20481, NR = 4000, NX = 15, N = NG + NR };
    const float big = 1e30f, inf = INFINITY;
    const float xs[NX] = {0.0f, -0.0f, 7.75f, -7.75f, 7.7500005f, -7.7500005f, 20, -20, big, -big, FLT_MAX, -FLT_MAX,
                          inf, -inf, NAN};
    float *x = (float *)malloc(4 * (size_t)(N + 16) * sizeof(float)), *y = x + N + 16, *d = y + N + 16, *one = d + N + 16;
    mf_ctx *c = mf_ctx_new(1);
    int64_t i;
    int off;
    for (i = 0; i < NG; i++) x[i] = -10.0f + (float)i / 1024.0f;
    for (i = 0; i < NR; i++) x[NG + i] = urand(11, (uint64_t)i, -10, 10) * (i % 2 ? 1.0f : urand(12, (uint64_t)i, 0, 1));
    gelu_check_grid(c, x, y, d, one, N);
    /* the same values from every offset and length: vector blocks and masked tails agree bit for bit */
    for (off = 1; off < 16; off++) {
        int same = 1;
        memmove(x + off, x, 37 * sizeof(float));
        gelu_eval(c, x + off, y + off, d + off, one, 37 - off % 3);
        for (i = 0; i < 37 - off % 3; i++) {
            float x0 = x[off + i], y0, d0;
            gelu_eval(c, &x0, &y0, &d0, one, 1);
            same &= memcmp(&y0, y + off + i, 4) == 0 && memcmp(&d0, d + off + i, 4) == 0;
        }
        MFT_CHECK(same);
        memmove(x, x + off, 37 * sizeof(float));
    }
    /* extremes: 0 and the tails exactly, inf as the limits, NaN through */
    memcpy(x, xs, sizeof xs);
    gelu_eval(c, x, y, d, one, NX);
    for (i = 0; i < NX - 1; i++) {
        float wy = x[i] > 7.75f ? x[i] : 0.0f, wd = x[i] > 7.75f ? 1.0f : x[i] < -7.75f ? 0.0f : (float)dgelu_ref(x[i]);
        if (fabsf(x[i]) <= 7.75f) wy = (float)gelu_ref(x[i]);
        if (!(gelu_close(y[i], wy) && gelu_close(d[i], wd) && (fabsf(x[i]) <= 7.75f || (y[i] == wy && d[i] == wd)))) {
            printf("    x = %g: gelu %.9g (want %.9g), gelu' %.9g (want %.9g)\n", (double)x[i], (double)y[i], (double)wy,
                   (double)d[i], (double)wd);
            MFT_CHECK(0);
        }
    }
    MFT_CHECK(y[NX - 1] != y[NX - 1] && d[NX - 1] != d[NX - 1]);
    /* accumulate: y += g gelu'(x) */
    for (i = 0; i < NX - 1; i++) y[i] = 0.5f, one[i] = 2.0f;
    mf__act_run(c, MF__GELU, x, one, y, NX - 1, 1);
    for (i = 0; i < NX - 1; i++) MFT_CHECK(y[i] == 0.5f + 2.0f * d[i]);
    free(x);
    mf_ctx_free(c);
}

/* The vectorised ReLU (mf__act_run) against the scalar cases every other kind runs
   (MF__UNARY_F_CASES / MF__UNARY_DF_CASES) bit for bit: vector blocks and masked tails of every
   length, stored and accumulated gradients, and the specials (+-0, infinities, NaN in x or in g:
   relu' multiplies g, so a NaN or infinite g stays NaN where x <= 0, as the scalar loop has it). */
static void test_relu_vector(void) {
    enum { N = 70 };
    static const float sp[10] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, -1e-40f, FLT_MAX, -FLT_MAX, 3.0f};
    float x[N], g[N], y[N], d[N], acc[N];
    mf_ctx *c = mf_ctx_new(1);
    int n, i, same = 1;
    for (i = 0; i < N; i++) {
        x[i] = i < 10 ? sp[i] : urand(21, (uint64_t)i, -2, 2);
        g[i] = i % 7 == 3 ? (i % 2 ? NAN : INFINITY) : urand(22, (uint64_t)i, -1, 1);
    }
    for (n = 1; n <= N; n++) {
        mf__act_run(c, MF__RELU, x, NULL, y, n, 0);
        mf__act_run(c, MF__RELU, x, g, d, n, 0);
        for (i = 0; i < n; i++) acc[i] = 0.25f;
        mf__act_run(c, MF__RELU, x, g, acc, n, 1);
        for (i = 0; i < n; i++) {
            float v = x[i], s = 0, wy = 0, wd = 0, dv = 0, wa;
            switch (MF__RELU) { MF__UNARY_F_CASES(v, s, wy) }
            switch (MF__RELU) { MF__UNARY_DF_CASES(v, wy, s, dv) }
            wd = g[i] * dv; wa = 0.25f + g[i] * dv;
            same &= memcmp(&wy, y + i, 4) == 0 && (memcmp(&wd, d + i, 4) == 0 || (wd != wd && d[i] != d[i])) &&
                    (memcmp(&wa, acc + i, 4) == 0 || (wa != wa && acc[i] != acc[i]));
        }
    }
    MFT_CHECK(same);
    mf_ctx_free(c);
}

/* mf__attn_transpose (the attention kernels' and the fast-weight kernels' tile transposes: register
   blocks of MF__AW x MF__AW, gathers for the leftover columns, scalars for the leftover rows, zeros
   up to rows_pad) against its definition, exactly (one rounding of s * x), at every rows and cols
   from 1 to 37, row strides wider than cols, and s = 1 (a pure copy, bit for bit with NaN) */
static void test_attn_transpose(void) {
    enum { R = 37, C = 37, LDS = 41, LDD = 48 };
    static float src[R * LDS], dst[C * LDD];
    int rows, cols, r, c, bad = 0, k;
    for (r = 0; r < R * LDS; r++) src[r] = urand(23, (uint64_t)r, -3, 3);
    src[5] = NAN; src[LDS + 2] = -0.0f; src[2 * LDS + 17] = INFINITY;
    for (k = 0; k < 2; k++) {
        float s = k ? 0.37f : 1.0f;
        for (rows = 1; rows <= R; rows++)
            for (cols = 1; cols <= C; cols++) {
                int pad = (rows + MF__AW - 1) / MF__AW * MF__AW;
                for (r = 0; r < C * LDD; r++) dst[r] = 99.0f;
                mf__attn_transpose(src, LDS, rows, pad, cols, s, dst, LDD);
                for (c = 0; c < cols; c++)
                    for (r = 0; r < pad; r++) {
                        float want = r < rows ? s * src[r * LDS + c] : 0.0f, got = dst[c * LDD + r];
                        bad += memcmp(&want, &got, 4) != 0 && !(want != want && got != got);
                    }
                for (c = 0; c < cols && pad < LDD; c++) bad += dst[c * LDD + pad] != 99.0f; /* nothing past rows_pad */
            }
    }
    MFT_CHECK(bad == 0);
}

/* ==== softmax / log_softmax =================================================================== */
static void test_softmax_forward(void) {
    mf_ctx *c = mf_ctx_new(5);
    /* [B, Tq, Tk] cases: Tq == Tk, Tk > Tq (memory keys), Tk < Tq (early rows see nothing) */
    static const int cases[][4] = {{2, 4, 4, 0}, {2, 3, 7, 0}, {1, 5, 2, 0}, {3, 1, 1, 0}, {1, 1, 6, 0}};
    int ci, causal;
    for (ci = 0; ci < 5; ci++)
        for (causal = 0; causal < 2; causal++) {
            int sh[3], B, Tq, Tk, b, i, j, bad_mask = 0, bad_sum = 0, bad_val = 0;
            mf_tensor *x, *y;
            sh[0] = B = cases[ci][0]; sh[1] = Tq = cases[ci][1]; sh[2] = Tk = cases[ci][2];
            x = rnd(c, 3, sh, 30 + ci, -4, 4);
            y = mf_softmax(c, x, causal);
            MFT_CHECK(shape_is(y, 3, B, Tq, Tk, 0));
            if (!y) break;
            for (b = 0; b < B; b++)
                for (i = 0; i < Tq; i++) {
                    const float *xr = x->data + (b * Tq + i) * Tk, *yr = y->data + (b * Tq + i) * Tk;
                    int vis = causal ? i + Tk - Tq + 1 : Tk;
                    double mx = -1e30, z = 0, sum = 0;
                    if (vis < 0) vis = 0;
                    if (vis > Tk) vis = Tk;
                    for (j = 0; j < vis; j++) if (xr[j] > mx) mx = xr[j];
                    for (j = 0; j < vis; j++) z += exp(xr[j] - mx);
                    for (j = 0; j < Tk; j++) {
                        if (j >= vis) { if (yr[j] != 0.0f) bad_mask = 1; }
                        else if (fabs(yr[j] - exp(xr[j] - mx) / z) > 1e-6) bad_val = 1;
                        if (yr[j] != yr[j]) bad_val = 1; /* NaN */
                        sum += yr[j];
                    }
                    if (fabs(sum - (vis > 0 ? 1.0 : 0.0)) > 1e-5) bad_sum = 1;
                }
            if (bad_mask || bad_sum || bad_val)
                printf("    softmax case %d causal %d: mask %d sum %d value %d\n", ci, causal, bad_mask, bad_sum, bad_val);
            MFT_CHECK(!bad_mask && !bad_sum && !bad_val);
        }
    { /* the masking pattern on a hand example: Tq = 2, Tk = 3 -> row 0 sees keys 0, 1 */
        int sh[2] = {2, 3};
        const float z[6] = {0, 0, 0, 0, 0, 0};
        mf_tensor *y = mf_softmax(c, mf_from(c, 2, sh, z), 1);
        MFT_CHECK(y && y->data[0] == 0.5f && y->data[1] == 0.5f && y->data[2] == 0.0f);
        MFT_CHECK(y && fabsf(y->data[3] - 1.0f / 3) < 1e-7f && fabsf(y->data[5] - 1.0f / 3) < 1e-7f);
    }
    { /* 4-D causal */
        int sh[4] = {2, 2, 3, 3}, r, j;
        mf_tensor *y = mf_softmax(c, rnd(c, 4, sh, 39, -3, 3), 1);
        MFT_CHECK(y != NULL);
        for (r = 0; y && r < 12; r++)
            for (j = 0; j < 3; j++) MFT_CHECK((j > r % 3) == (y->data[r * 3 + j] == 0.0f));
    }
    { /* large logits: no overflow */
        int n = 3;
        const float big[3] = {1000, 1001, -1000};
        mf_tensor *y = mf_softmax(c, mf_from(c, 1, &n, big), 0), *l = mf_log_softmax(c, mf_from(c, 1, &n, big));
        MFT_CHECK(y && fabsf(y->data[0] - 0.26894142f) < 1e-6f && fabsf(y->data[1] - 0.73105858f) < 1e-6f && y->data[2] == 0);
        MFT_CHECK(l && fabsf(l->data[1] - (-0.31326169f)) < 1e-6f && isfinite(l->data[2]));
    }
    { /* large logits keep full precision: (x - max) - log(sum), not x - (max + log(sum)) */
        int n = 3;
        const float big[3] = {10000, 10001, 9990};
        const int32_t t1[1] = {1}, t0[1] = {0};
        mf_tensor *xb = mf_from(c, 1, &n, big), *l = mf_log_softmax(c, xb);
        mf_tensor *ce1 = mf_cross_entropy(c, xb, t1, -1), *ce0 = mf_cross_entropy(c, xb, t0, -1);
        double lse = 10001 + log(1 + exp(-1.0) + exp(-11.0));
        MFT_CHECK(l && ce1 && ce0);
        if (l && ce1 && ce0) {
            MFT_NEAR(l->data[1], 10001 - lse, 1e-6);
            MFT_NEAR(l->data[2], 9990 - lse, 1e-6);
            MFT_NEAR(ce1->data[0], lse - 10001, 1e-6);
            MFT_NEAR(ce0->data[0], lse - 10000, 1e-6);
        }
    }
    { /* log_softmax = log(softmax) */
        int sh[3] = {2, 3, 5};
        mf_tensor *x = rnd(c, 3, sh, 41, -3, 3), *y = mf_softmax(c, x, 0), *l = mf_log_softmax(c, x);
        int i, bad = 0;
        for (i = 0; y && l && i < 30; i++) if (fabs(log(y->data[i]) - l->data[i]) > 1e-5) bad = 1;
        MFT_CHECK(y && l && !bad);
    }
    MFT_CHECK(mf_ok(c));
    mf_ctx_free(c);
}
static mf_tensor *b_softmax(mf_ctx *c, mf_tensor **in, void *u) {
    const args *a = (const args *)u;
    return a->i[0] == 2 ? mf_log_softmax(c, in[0]) : mf_softmax(c, in[0], a->i[0]);
}
static void test_softmax_grad(void) {
    gc_spec s[1];
    args a = A0();
    s[0] = gc_range(gc_in(2, 3, 5, 0, 0), -2, 2, 0);
    GRADCHECK("softmax plain 2-D", 1, s, b_softmax, &a);
    s[0] = gc_range(gc_in(3, 2, 4, 4, 0), -2, 2, 0);
    GRADCHECK("softmax plain 3-D", 1, s, b_softmax, &a);
    a.i[0] = 1;
    GRADCHECK("softmax causal Tq == Tk", 1, s, b_softmax, &a);
    s[0] = gc_range(gc_in(3, 2, 3, 6, 0), -2, 2, 0);
    GRADCHECK("softmax causal Tk > Tq", 1, s, b_softmax, &a);
    s[0] = gc_range(gc_in(3, 1, 4, 2, 0), -2, 2, 0);
    GRADCHECK("softmax causal Tk < Tq", 1, s, b_softmax, &a);
    s[0] = gc_range(gc_in(4, 2, 2, 3, 3), -2, 2, 0);
    GRADCHECK("softmax causal 4-D", 1, s, b_softmax, &a);
    a.i[0] = 0;
    GRADCHECK("softmax plain 4-D", 1, s, b_softmax, &a);
    a.i[0] = 2;
    GRADCHECK("log_softmax 4-D", 1, s, b_softmax, &a);
    s[0] = gc_range(gc_in(1, 7, 0, 0, 0), -2, 2, 0);
    GRADCHECK("log_softmax 1-D", 1, s, b_softmax, &a);
    s[0] = gc_range(gc_in(2, 3, 1, 0, 0), -2, 2, 0);
    GRADCHECK("log_softmax V = 1", 1, s, b_softmax, &a);
}

/* ==== cross_entropy / mse ===================================================================== */
static void test_cross_entropy_forward(void) {
    mf_ctx *c = mf_ctx_new(6);
    int sh[2] = {3, 4};
    const float lv[12] = {0, 0, 0, 0, 1, 2, 3, 4, -1, 0.5f, 2, -3};
    const int32_t tg[3] = {0, 3, -100}, tg_all[3] = {-100, -100, -100}, tg_none[3] = {2, 1, 0};
    mf_tensor *x = mf_from(c, 2, sh, lv), *l;
    double l1 = log(4.0), l2 = log(exp(1.0) + exp(2.0) + exp(3.0) + exp(4.0)) - 4.0, l3;
    /* hand computation: rows 0 and 1 count, row 2 is ignored */
    l = mf_cross_entropy(c, x, tg, -100);
    MFT_CHECK(shape_is(l, 1, 1, 0, 0, 0));
    if (l) MFT_NEAR(l->data[0], (l1 + l2) / 2, 1e-6);
    if (l) MFT_NEAR(l->data[0], (1.3862943611198906 + 0.4401896985611957) / 2, 1e-6);
    /* -1 counts every row */
    l3 = log(exp(-1.0) + exp(0.5) + exp(2.0) + exp(-3.0)) + 1.0;
    l = mf_cross_entropy(c, x, tg_none, -1);
    if (l) MFT_NEAR(l->data[0], (log(4.0) + (log(exp(1.0) + exp(2.0) + exp(3.0) + exp(4.0)) - 2.0) + l3) / 3, 1e-6);
    /* cross_entropy == -mean(log_softmax[target]) */
    {
        int sh3[3] = {2, 3, 5}, r;
        int32_t t6[6] = {4, 0, 2, 2, 1, 3};
        mf_tensor *x3 = rnd(c, 3, sh3, 7, -3, 3), *ls = mf_log_softmax(c, x3), *ce = mf_cross_entropy(c, x3, t6, -1);
        double s = 0;
        for (r = 0; ls && r < 6; r++) s -= ls->data[r * 5 + t6[r]];
        MFT_CHECK(ce != NULL);
        if (ce) MFT_NEAR(ce->data[0], s / 6, 1e-6);
    }
    /* every row ignored: loss 0 and zero gradient */
    {
        mf_tensor *p = rnd_param(c, "logits", 2, sh, 8), *ce;
        int i, nz = 0;
        ce = mf_cross_entropy(c, p, tg_all, -100);
        MFT_CHECK(ce && ce->data[0] == 0.0f);
        MFT_CHECK(ce && mf_backward(c, ce) == 0);
        for (i = 0; i < 12; i++) nz += p->grad[i] != 0.0f;
        MFT_CHECK(nz == 0);
        /* ignored rows get no gradient when others count */
        ce = mf_cross_entropy(c, p, tg, -100);
        MFT_CHECK(ce && mf_backward(c, ce) == 0);
        for (i = 8; i < 12; i++) MFT_CHECK(p->grad[i] == 0.0f);
        {   /* gradient rows sum to zero: softmax - onehot */
            double s0 = 0;
            for (i = 0; i < 4; i++) s0 += p->grad[i];
            MFT_CHECK(fabs(s0) < 1e-6);
        }
    }
    MFT_CHECK(mf_ok(c));
    if (!mf_ok(c)) printf("    %s\n", mf_error(c));
    mf_ctx_free(c);
}
/* Rows wider than a SIMD vector (mf__lse and the backward run whole vectors, then a scalar tail):
   loss, log_softmax and the logits' gradient against double references, at widths around the
   vector sizes (8, 16) and the benchmarks' vocabulary (65). */
static void test_cross_entropy_wide_rows(void) {
    static const int widths[] = {1, 7, 8, 9, 15, 16, 17, 33, 65};
    const int rows = 5;
    size_t w;
    for (w = 0; w < sizeof widths / sizeof widths[0]; w++) {
        mf_ctx *c = mf_ctx_new(9);
        int V = widths[w], sh[2], r, j, bad_ls = 0, bad_g = 0;
        int32_t tg[5];
        double loss = 0, worst_ls = 0, worst_g = 0;
        mf_tensor *p, *ce, *ls;
        sh[0] = rows; sh[1] = V;
        p = rnd_param(c, "logits", 2, sh, 10 + (uint64_t)V);
        for (r = 0; p && r < rows * V; r++) p->data[r] *= 8.0f; /* logits in [-8, 8] */
        for (r = 0; r < rows; r++) tg[r] = (r * 7) % V;
        ls = mf_log_softmax(c, p);
        ce = mf_cross_entropy(c, p, tg, -1);
        MFT_CHECK(ls && ce && mf_backward(c, ce) == 0);
        if (!ls || !ce || !p->grad) { mf_ctx_free(c); continue; }
        for (r = 0; r < rows; r++) {
            const float *x = p->data + r * V;
            double mx = x[0], sum = 0;
            for (j = 1; j < V; j++) mx = x[j] > mx ? x[j] : mx;
            for (j = 0; j < V; j++) sum += exp((double)x[j] - mx);
            for (j = 0; j < V; j++) {
                double lsr = (double)x[j] - mx - log(sum), g = (exp(lsr) - (j == tg[r])) / rows;
                double e_ls = fabs(ls->data[r * V + j] - lsr), e_g = fabs(p->grad[r * V + j] - g);
                worst_ls = e_ls > worst_ls ? e_ls : worst_ls;
                worst_g = e_g > worst_g ? e_g : worst_g;
                bad_ls += e_ls > 4e-6 * (1 + fabs(lsr));
                bad_g += e_g > 1e-7;
            }
            loss -= ((double)x[tg[r]] - mx - log(sum)) / rows;
        }
        if (bad_ls || bad_g || fabs(ce->data[0] - loss) > 4e-6 * (1 + loss))
            printf("    V %d: loss %.9g (double %.9g), worst log_softmax error %.3g, worst gradient error %.3g\n",
                   V, (double)ce->data[0], loss, worst_ls, worst_g);
        MFT_CHECK(!bad_ls && !bad_g);
        MFT_NEAR(ce->data[0], loss, 4e-6);
        if (V >= 16) { /* a NaN or +inf logit inside the vector part: the loss and its row's gradient are NaN */
            int bad_value;
            for (bad_value = 0; bad_value < 2; bad_value++) {
                mf_zero_grad(c);
                p->data[V + 3] = bad_value ? INFINITY : NAN;
                ce = mf_cross_entropy(c, p, tg, -1);
                MFT_CHECK(ce && isnan(ce->data[0]) && mf_backward(c, ce) == 0);
                MFT_CHECK(isnan(p->grad[V + 1]) && !isnan(p->grad[1]));
            }
        }
        MFT_CHECK(mf_ok(c));
        mf_ctx_free(c);
    }
}
static mf_tensor *b_ce(mf_ctx *c, mf_tensor **in, void *u) {
    const args *a = (const args *)u;
    return mf_cross_entropy(c, in[0], a->ids, a->i[0]);
}
static mf_tensor *b_mse(mf_ctx *c, mf_tensor **in, void *u) {
    const args *a = (const args *)u;
    return a->i[0] ? mf_mse(c, in[0], rnd(c, in[0]->ndim, in[0]->shape, 77, -1, 1)) : mf_mse(c, in[0], in[1]);
}
static void test_cross_entropy_mse_grad(void) {
    static const int32_t t6[6] = {4, -100, 0, 2, -100, 1}, t3[3] = {1, 0, 2};
    gc_spec s[2];
    args a = A0();
    a.ids = t6; a.i[0] = -100;
    s[0] = gc_range(gc_in(3, 2, 3, 5, 0), -2, 2, 0);
    GRADCHECK("cross_entropy with ignored rows", 1, s, b_ce, &a);
    a.ids = t3; a.i[0] = -1;
    s[0] = gc_range(gc_in(2, 3, 3, 0, 0), -2, 2, 0);
    GRADCHECK("cross_entropy 2-D", 1, s, b_ce, &a);
    s[0] = gc_in(3, 2, 3, 4, 0); s[1] = gc_in(3, 2, 3, 4, 0);
    a.i[0] = 0;
    GRADCHECK("mse both", 2, s, b_mse, &a);
    a.i[0] = 1;
    GRADCHECK("mse constant target", 1, s, b_mse, &a);
    {
        mf_ctx *c = mf_ctx_new(1);
        int n = 4;
        const float av[4] = {1, 2, 3, 4}, bv[4] = {0, 2, 5, 1};
        mf_tensor *m = mf_mse(c, mf_from(c, 1, &n, av), mf_from(c, 1, &n, bv));
        MFT_CHECK(m && m->data[0] == (1.0f + 0 + 4 + 9) / 4);
        mf_ctx_free(c);
    }
}

/* ==== layernorm =============================================================================== */
static void test_layernorm_forward(void) {
    mf_ctx *c = mf_ctx_new(7);
    int sh[3] = {2, 3, 7}, r, j, gs = 7;
    mf_tensor *x = rnd(c, 3, sh, 1, 3, 10), *y = mf_layernorm(c, x, NULL, NULL, 1e-5f);
    mf_tensor *g = rnd(c, 1, &gs, 2, 0.5f, 2), *b = rnd(c, 1, &gs, 3, -1, 1), *yg = mf_layernorm(c, x, g, b, 1e-5f);
    MFT_CHECK(shape_is(y, 3, 2, 3, 7, 0) && shape_is(yg, 3, 2, 3, 7, 0));
    for (r = 0; y && yg && r < 6; r++) {
        double m = 0, v = 0;
        for (j = 0; j < 7; j++) m += y->data[r * 7 + j];
        m /= 7;
        for (j = 0; j < 7; j++) v += (y->data[r * 7 + j] - m) * (y->data[r * 7 + j] - m);
        v /= 7;
        MFT_NEAR(m, 0, 1e-5);
        MFT_NEAR(v, 1, 1e-3);
        for (j = 0; j < 7; j++) MFT_NEAR(yg->data[r * 7 + j], y->data[r * 7 + j] * g->data[j] + b->data[j], 1e-5);
    }
    { /* a hand example: [1, 2, 3] -> [-1.2247, 0, 1.2247] */
        int n = 3;
        const float v[3] = {1, 2, 3};
        mf_tensor *h = mf_layernorm(c, mf_from(c, 1, &n, v), NULL, NULL, 1e-5f);
        MFT_CHECK(h != NULL);
        if (h) { MFT_NEAR(h->data[0], -1.0 / sqrt(2.0 / 3 + 1e-5), 1e-5); MFT_NEAR(h->data[1], 0, 1e-6); }
    }
    MFT_CHECK(mf_ok(c));
    mf_ctx_free(c);
}
static mf_tensor *b_layernorm(mf_ctx *c, mf_tensor **in, void *u) {
    const args *a = (const args *)u;
    return mf_layernorm(c, in[0], (a->i[0] & 1) ? in[1] : NULL, (a->i[0] & 2) ? in[2] : NULL, a->f[0]);
}
static void test_layernorm_grad(void) {
    gc_spec s[3];
    args a = A0();
    s[0] = gc_in(3, 2, 3, 5, 0); s[1] = gc_range(gc_in(1, 5, 0, 0, 0), 0.5f, 1.5f, 0); s[2] = gc_in(1, 5, 0, 0, 0);
    a.i[0] = 3; a.f[0] = 1e-5f;
    GRADCHECK("layernorm gamma beta", 3, s, b_layernorm, &a);
    a.i[0] = 0;
    GRADCHECK("layernorm no gamma no beta", 1, s, b_layernorm, &a);
    a.i[0] = 1;
    GRADCHECK("layernorm gamma only", 2, s, b_layernorm, &a);
    a.i[0] = 2;
    GRADCHECK("layernorm beta only", 3, s, b_layernorm, &a);
    /* D = 2 normalises to about +-1 whatever the values: the output only moves on the scale of
       sqrt(eps), so a large eps keeps it smooth at the step size (and checks eps's gradient) */
    s[0] = gc_in(2, 4, 2, 0, 0); s[1] = gc_in(1, 2, 0, 0, 0); s[2] = gc_in(1, 2, 0, 0, 0);
    a.i[0] = 3; a.f[0] = 0.5f;
    GRADCHECK("layernorm D = 2, eps 0.5", 3, s, b_layernorm, &a);
    s[0] = gc_in(3, 1, 1, 6, 0); s[1] = gc_in(1, 6, 0, 0, 0); s[2] = gc_in(1, 6, 0, 0, 0);
    a.f[0] = 1e-5f;
    GRADCHECK("layernorm one row", 3, s, b_layernorm, &a);
}

/* ==== embedding =============================================================================== */
static mf_tensor *b_embedding(mf_ctx *c, mf_tensor **in, void *u) {
    const args *a = (const args *)u;
    return mf_embedding(c, in[0], a->ids, a->ndim, a->shape);
}
static void test_embedding(void) {
    static const int32_t ids[6] = {3, 0, 3, 3, 4, 0};
    mf_ctx *c = mf_ctx_new(8);
    int ts[2] = {5, 3}, is[2] = {2, 3}, i, j;
    mf_tensor *tb = rnd_param(c, "table", 2, ts, 1), *y = mf_embedding(c, tb, ids, 2, is), *l;
    MFT_CHECK(shape_is(y, 3, 2, 3, 3, 0));
    for (i = 0; y && i < 6; i++)
        for (j = 0; j < 3; j++) MFT_CHECK(y->data[i * 3 + j] == tb->data[ids[i] * 3 + j]);
    /* gradients of repeated ids add up: d sum(y) / d table[v] = count(v) */
    l = mf_sum(c, y);
    MFT_CHECK(l && mf_backward(c, l) == 0);
    for (j = 0; j < 3; j++) {
        MFT_CHECK(tb->grad[0 * 3 + j] == 2.0f && tb->grad[1 * 3 + j] == 0.0f && tb->grad[2 * 3 + j] == 0.0f);
        MFT_CHECK(tb->grad[3 * 3 + j] == 3.0f && tb->grad[4 * 3 + j] == 1.0f);
    }
    MFT_CHECK(mf_ok(c));
    mf_ctx_free(c);
    {
        gc_spec s[1];
        args a = A0();
        s[0] = gc_in(2, 5, 3, 0, 0);
        a.ids = ids; a.ndim = 2; a.shape[0] = 2; a.shape[1] = 3;
        GRADCHECK("embedding 2-D ids", 1, s, b_embedding, &a);
        a.ndim = 1; a.shape[0] = 6;
        GRADCHECK("embedding 1-D ids", 1, s, b_embedding, &a);
        a.ndim = 3; a.shape[0] = 1; a.shape[1] = 2; a.shape[2] = 3;
        GRADCHECK("embedding 3-D ids", 1, s, b_embedding, &a);
    }
}

/* ==== dropout ================================================================================= */
static mf_tensor *b_dropout(mf_ctx *c, mf_tensor **in, void *u) {
    const args *a = (const args *)u;
    /* two calls: two different masks, each fixed while checking */
    return mf_dropout(c, mf_mul(c, mf_dropout(c, in[0], a->f[0]), in[0]), a->f[0]);
}
static void test_dropout(void) {
    const float p = 0.3f;
    const int n = 100000;
    mf_ctx *c = mf_ctx_new(9), *c2 = mf_ctx_new(9), *c3 = mf_ctx_new(10);
    mf_tensor *x = mf_new(c, 1, &n), *y1, *y2, *y3, *z1, *z2, *w;
    int64_t i, kept = 0, diff12 = 0, bad_scale = 0, same_c2 = 1, diff_seed = 0, diff_reset = 0;
    float *first;
    for (i = 0; i < n; i++) x->data[i] = 1.0f + (float)(i % 7);
    y1 = mf_dropout(c, x, p);
    y2 = mf_dropout(c, x, p);
    MFT_CHECK(y1 && y2 && y1 != x);
    if (!y1 || !y2) { mf_ctx_free(c); mf_ctx_free(c2); mf_ctx_free(c3); return; }
    for (i = 0; i < n; i++) {
        if (y1->data[i] != 0) {
            kept++;
            if (fabsf(y1->data[i] - x->data[i] / (1.0f - p)) > 1e-5f * y1->data[i]) bad_scale++;
        }
        if ((y1->data[i] != 0) != (y2->data[i] != 0)) diff12++;
    }
    /* kept fraction ~ 1 - p (binomial std 0.0014), kept values scaled by 1 / (1 - p) */
    MFT_NEAR((double)kept / n, 1.0 - p, 0.01);
    MFT_CHECK(bad_scale == 0);
    /* two calls: independent masks, disagreeing on ~2 p (1 - p) = 42% of the elements */
    MFT_NEAR((double)diff12 / n, 2.0 * p * (1.0 - p), 0.02);
    /* the same seed and call order reproduce the masks; another seed does not */
    {
        mf_tensor *x2 = mf_from(c2, 1, &n, x->data), *x3 = mf_from(c3, 1, &n, x->data);
        z1 = mf_dropout(c2, x2, p); z2 = mf_dropout(c2, x2, p); y3 = mf_dropout(c3, x3, p);
        MFT_CHECK(z1 && z2 && y3);
        for (i = 0; z1 && z2 && y3 && i < n; i++) {
            if (z1->data[i] != y1->data[i] || z2->data[i] != y2->data[i]) same_c2 = 0;
            if ((y3->data[i] != 0) != (y1->data[i] != 0)) diff_seed++;
        }
        MFT_CHECK(same_c2);
        MFT_CHECK(diff_seed > n / 10);
    }
    /* after mf_reset the next call draws a new mask (not step 1's again) */
    first = (float *)malloc((size_t)n * sizeof(float));
    memcpy(first, y1->data, (size_t)n * sizeof(float));
    mf_reset(c);
    x = mf_new(c, 1, &n);
    for (i = 0; i < n; i++) x->data[i] = 1.0f + (float)(i % 7);
    w = mf_dropout(c, x, p);
    for (i = 0; w && i < n; i++) if ((w->data[i] != 0) != (first[i] != 0)) diff_reset++;
    MFT_CHECK(diff_reset > n / 10);
    free(first);
    /* evaluation mode: identity; p = 0: identity */
    MFT_CHECK(mf_set_training(c, 0) == 1);
    w = mf_dropout(c, x, p);
    MFT_CHECK(w && max_abs_diff(w->data, x->data, n) == 0);
    MFT_CHECK(mf_set_training(c, 1) == 0);
    w = mf_dropout(c, x, 0.0f);
    MFT_CHECK(w && max_abs_diff(w->data, x->data, n) == 0);
    /* the gradient is the same mask times 1 / (1 - p) */
    {
        int s2[2] = {4, 5};
        mf_tensor *pp = rnd_param(c, "dp", 2, s2, 3), *d = mf_dropout(c, pp, 0.5f), *l = mf_sum(c, d);
        int k, bad = 0;
        MFT_CHECK(l && mf_backward(c, l) == 0);
        for (k = 0; d && k < 20; k++) if (pp->grad[k] != (d->data[k] != 0 ? 2.0f : 0.0f)) bad = 1;
        MFT_CHECK(!bad);
    }
    MFT_CHECK(mf_ok(c) && mf_ok(c2) && mf_ok(c3));
    mf_ctx_free(c); mf_ctx_free(c2); mf_ctx_free(c3);
    {
        gc_spec s[1];
        args a = A0();
        a.f[0] = 0.3f;
        s[0] = gc_in(3, 3, 4, 5, 0);
        GRADCHECK("dropout (training, fixed seed)", 1, s, b_dropout, &a);
    }
}

/* ==== reshape / permute / transpose =========================================================== */
static mf_tensor *b_reshape(mf_ctx *c, mf_tensor **in, void *u) {
    const args *a = (const args *)u;
    /* reshape, then something that mixes positions so a wrong layout would show; x also
       reaches the output through exp, so its gradient has two contributions */
    mf_tensor *r = mf_reshape(c, in[0], a->ndim, a->shape), *q = mf_reshape(c, mf_exp(c, in[0]), a->ndim, a->shape);
    return mf_softmax(c, mf_mul(c, r, q), 0);
}
static void test_reshape(void) {
    mf_ctx *c = mf_ctx_new(10);
    int xs[3] = {2, 3, 4}, s1[2] = {6, -1}, s2[4] = {-1, 2, 2, 3}, s3[1] = {-1}, bad1[2] = {5, -1}, bad2[2] = {-1, -1};
    mf_tensor *x = rnd(c, 3, xs, 1, -1, 1), *y;
    y = mf_reshape(c, x, 2, s1);
    MFT_CHECK(shape_is(y, 2, 6, 4, 0, 0) && y->data == x->data);
    y = mf_reshape(c, x, 4, s2);
    MFT_CHECK(shape_is(y, 4, 2, 2, 2, 3));
    y = mf_reshape(c, x, 1, s3);
    MFT_CHECK(shape_is(y, 1, 24, 0, 0, 0));
    MFT_CHECK(mf_ok(c));
    MFT_CHECK(mf_reshape(c, x, 2, bad1) == NULL && !mf_ok(c) && strstr(mf_error(c), "reshape"));
    mf_clear_error(c);
    MFT_CHECK(mf_reshape(c, x, 2, bad2) == NULL && !mf_ok(c));
    mf_clear_error(c);
    mf_ctx_free(c);
    {
        gc_spec s[1];
        args a = A0();
        s[0] = gc_in(3, 2, 3, 4, 0);
        a.ndim = 2; a.shape[0] = -1; a.shape[1] = 6;
        GRADCHECK("reshape [2,3,4] -> [-1, 6]", 1, s, b_reshape, &a);
        a.ndim = 4; a.shape[0] = 3; a.shape[1] = 1; a.shape[2] = -1; a.shape[3] = 2;
        GRADCHECK("reshape [2,3,4] -> [3,1,-1,2]", 1, s, b_reshape, &a);
    }
}

/* mf_backward lets a reshape (an add, a sub) share its input's gradient buffer when nothing else
   reads that input (no copy); an input read twice keeps its own buffer and gets both contributions */
static void test_view_shares_gradient(void) {
    mf_ctx *c = mf_ctx_new(4);
    int xs[3] = {2, 3, 4}, s2[2] = {6, 4}, s1[1] = {24};
    mf_tensor *p = mf_param(c, "p", 3, xs), *w, *v, *a, *r, *r2, *b, *rb;
    int64_t i;
    int ok = 1;
    mf_init_normal(c, p, 0, 1);
    w = rnd(c, 1, s1, 2, -1, 1); v = rnd(c, 3, xs, 3, -1, 1);
    a = mf_exp(c, p); r = mf_reshape(c, a, 2, s2); r2 = mf_reshape(c, r, 1, s1);
    MFT_CHECK(mf_backward(c, mf_sum(c, mf_mul(c, r2, w))) == 0);
    MFT_CHECK(a->grad == r->grad && r->grad == r2->grad);
    for (i = 0; i < p->ne; i++) ok &= p->grad[i] == w->data[i] * a->data[i];
    MFT_CHECK(ok);
    mf_zero_grad(c); mf_reset(c);
    b = mf_exp(c, p); rb = mf_reshape(c, b, 1, s1);
    v = rnd(c, 3, xs, 3, -1, 1); w = rnd(c, 1, s1, 2, -1, 1);
    MFT_CHECK(mf_backward(c, mf_add(c, mf_sum(c, mf_mul(c, rb, w)), mf_sum(c, mf_mul(c, b, v)))) == 0);
    MFT_CHECK(b->grad != rb->grad);
    for (i = 0; i < p->ne; i++) ok &= fabsf(p->grad[i] - (w->data[i] + v->data[i]) * b->data[i]) <= 1e-6f * (1 + fabsf(p->grad[i]));
    for (i = 0; i < rb->ne; i++) ok &= rb->grad[i] == w->data[i]; /* the view's own gradient is untouched */
    MFT_CHECK(ok);
    { /* add (either operand), sub (the first), a broadcast add (the full-size operand) */
        int bs[1] = {4};
        mf_tensor *e, *f, *y, *h, *z, *bias, *q, *m, *d;
        mf_zero_grad(c); mf_reset(c);
        w = rnd(c, 3, xs, 2, -1, 1); v = rnd(c, 3, xs, 3, -1, 1);
        bias = mf_param(c, "bias", 1, bs);
        e = mf_exp(c, p); f = mf_scale(c, p, 2.0f);
        y = mf_add(c, e, f);                      /* e shares y's gradient; f gets a copy */
        h = mf_scale(c, p, 3.0f); q = mf_exp(c, p);
        z = mf_add(c, mf_sub(c, h, q), bias);     /* the sub shares z's, h shares the sub's */
        m = mf_scale(c, p, 4.0f); r = mf_exp(c, p); /* m is read twice: r, the subtrahend, must not share */
        d = mf_sub(c, m, r);
        MFT_CHECK(mf_backward(c, mf_add(c, mf_add(c, mf_sum(c, mf_mul(c, y, w)), mf_sum(c, mf_mul(c, z, v))),
                                       mf_sum(c, mf_mul(c, d, m)))) == 0);
        MFT_CHECK(e->grad == y->grad && f->grad != y->grad && h->grad == z->src[0]->grad && z->src[0]->grad == z->grad);
        MFT_CHECK(r->grad != d->grad && m->grad != d->grad);
        for (i = 0; i < r->ne; i++) ok &= r->grad[i] == -m->data[i];
        for (i = 0; i < p->ne; i++) {
            float want = w->data[i] * e->data[i] + 2.0f * w->data[i] + 3.0f * v->data[i] - v->data[i] * q->data[i]
                       + 4.0f * (d->data[i] + m->data[i]) - m->data[i] * r->data[i];
            ok &= fabsf(p->grad[i] - want) <= 1e-5f * (1 + fabsf(want));
            ok &= f->grad[i] == w->data[i] && q->grad[i] == -v->data[i];
        }
        for (i = 0; i < 4; i++) {
            float want = 0;
            int64_t r;
            for (r = 0; r < 6; r++) want += v->data[r * 4 + i];
            ok &= fabsf(bias->grad[i] - want) <= 1e-6f * (1 + fabsf(want));
        }
        MFT_CHECK(ok);
    }
    { /* with recycled activation gradients, an input only an elementwise unary op reads takes its
         gradient in the op's output-gradient buffer, in place: the same parameter gradients as with
         kept gradients (separate buffers) */
        int kind;
        for (kind = 0; kind < 8; kind++) {
            mf_ctx *c1 = mf_ctx_new(9), *c2 = mf_ctx_new(9);
            mf_tensor *p1 = mf_param(c1, "p", 3, xs), *p2 = mf_param(c2, "p", 3, xs), *a1, *a2, *y1, *y2, *w1, *w2;
            mf_init_normal(c1, p1, 0, 1); mf_init_normal(c2, p2, 0, 1);
            MFT_CHECK(mf_set_keep_activation_grads(c1, 0) == 1 && mf_set_keep_activation_grads(c1, 0) == 0);
            a1 = mf_scale(c1, p1, 1.3f); a2 = mf_scale(c2, p2, 1.3f);
            y1 = kind == 0 ? mf_relu(c1, a1) : kind == 1 ? mf_gelu(c1, a1, 0) : kind == 2 ? mf_gelu(c1, a1, 1) :
                 kind == 3 ? mf_sigmoid(c1, a1) : kind == 4 ? mf_silu(c1, a1) : kind == 5 ? mf_exp(c1, a1) :
                 kind == 6 ? mf_elu1(c1, a1) : mf_scale(c1, a1, -0.7f);
            y2 = kind == 0 ? mf_relu(c2, a2) : kind == 1 ? mf_gelu(c2, a2, 0) : kind == 2 ? mf_gelu(c2, a2, 1) :
                 kind == 3 ? mf_sigmoid(c2, a2) : kind == 4 ? mf_silu(c2, a2) : kind == 5 ? mf_exp(c2, a2) :
                 kind == 6 ? mf_elu1(c2, a2) : mf_scale(c2, a2, -0.7f);
            w1 = rnd(c1, 3, xs, 7, -1, 1); w2 = rnd(c2, 3, xs, 7, -1, 1);
            mf_zero_grad(c1); mf_zero_grad(c2);
            MFT_CHECK(mf_backward(c1, mf_sum(c1, mf_mul(c1, y1, w1))) == 0);
            MFT_CHECK(mf_backward(c2, mf_sum(c2, mf_mul(c2, y2, w2))) == 0);
            MFT_CHECK(!memcmp(p1->grad, p2->grad, (size_t)p1->ne * sizeof(float)));
            MFT_CHECK(a1->grad == NULL && y1->grad == NULL && a2->grad && y2->grad && a2->grad != y2->grad);
            mf_ctx_free(c1); mf_ctx_free(c2);
        }
    }
    { /* recycled gradient buffers are taken by size, best fit: a gradient of n floats takes a free
         buffer of up to 2n (here the 8-float one freed just before it is asked for 6), so a backward
         whose early branch is narrower allocates no more than one whose branches are alike */
        size_t grew[2];
        int narrow;
        for (narrow = 0; narrow <= 1; narrow++) {
            mf_ctx *cx = mf_ctx_new(5);
            int s6[1] = {narrow ? 6 : 8}, s8[1] = {8};
            mf_tensor *p6 = mf_param(cx, "p6", 1, s6), *p8 = mf_param(cx, "p8", 1, s8), *b6, *b8;
            size_t before;
            mf_set_keep_activation_grads(cx, 0);
            b6 = mf_sum(cx, mf_mul(cx, p6, rnd(cx, 1, s6, 1, -1, 1))); /* its backward runs last */
            b8 = mf_sum(cx, mf_mul(cx, p8, rnd(cx, 1, s8, 2, -1, 1)));
            b8 = mf_add(cx, b6, b8);
            before = mf_activation_bytes(cx);
            MFT_CHECK(mf_backward(cx, b8) == 0);
            grew[narrow] = mf_activation_bytes(cx) - before;
            MFT_CHECK(mf_ok(cx));
            mf_ctx_free(cx);
        }
        MFT_CHECK(grew[1] == grew[0]);
        if (grew[1] != grew[0]) printf("    the backward took %zu bytes (6 floats) / %zu (8 floats)\n", grew[1], grew[0]);
    }
    { /* a second backward on the same tape, from a later loss that reads the shared input again:
         the view gets its own buffer back and the input both contributions */
        mf_tensor *e, *re, *l1;
        mf_zero_grad(c); mf_reset(c);
        w = rnd(c, 1, s1, 2, -1, 1); v = rnd(c, 3, xs, 3, -1, 1);
        e = mf_exp(c, p); re = mf_reshape(c, e, 1, s1);
        l1 = mf_sum(c, mf_mul(c, re, w));
        MFT_CHECK(mf_backward(c, l1) == 0 && e->grad == re->grad);
        MFT_CHECK(mf_backward(c, mf_add(c, l1, mf_sum(c, mf_mul(c, e, v)))) == 0 && e->grad != re->grad);
        for (i = 0; i < e->ne; i++) ok &= fabsf(e->grad[i] - (w->data[i] + v->data[i])) <= 1e-6f && re->grad[i] == w->data[i];
        MFT_CHECK(ok);
    }
    mf_ctx_free(c);
}

/* out index -> in index by explicit multi-index arithmetic */
static int check_permute(mf_ctx *c, const mf_tensor *x, const int *perm) {
    mf_tensor *y = mf_permute(c, (mf_tensor *)x, perm);
    int nd = x->ndim, d, bad = 0;
    int64_t o;
    if (!y) return 0;
    for (d = 0; d < nd; d++) if (y->shape[d] != x->shape[perm[d]]) return 0;
    for (o = 0; o < y->ne; o++) {
        int64_t oi[4], xi[4], rem = o, in = 0;
        for (d = nd - 1; d >= 0; d--) { oi[d] = rem % y->shape[d]; rem /= y->shape[d]; }
        for (d = 0; d < nd; d++) xi[perm[d]] = oi[d];
        for (d = 0; d < nd; d++) in = in * x->shape[d] + xi[d];
        if (y->data[o] != x->data[in]) bad = 1;
    }
    return !bad;
}
static void test_permute_forward(void) {
    mf_ctx *c = mf_ctx_new(11);
    int s3[3] = {2, 3, 4}, s4[4] = {2, 1, 3, 5}, s2[2] = {3, 4}, perm[4], a, b, d, e, n3 = 0, n4 = 0;
    mf_tensor *x3 = rnd(c, 3, s3, 1, -1, 1), *x4 = rnd(c, 4, s4, 2, -1, 1), *x2 = rnd(c, 2, s2, 3, -1, 1), *t1, *t2;
    for (a = 0; a < 3; a++) for (b = 0; b < 3; b++) for (d = 0; d < 3; d++) {
        if (a == b || a == d || b == d) continue;
        perm[0] = a; perm[1] = b; perm[2] = d;
        MFT_CHECK(check_permute(c, x3, perm));
        n3++;
    }
    for (a = 0; a < 4; a++) for (b = 0; b < 4; b++) for (d = 0; d < 4; d++) for (e = 0; e < 4; e++) {
        if (a == b || a == d || a == e || b == d || b == e || d == e) continue;
        perm[0] = a; perm[1] = b; perm[2] = d; perm[3] = e;
        MFT_CHECK(check_permute(c, x4, perm));
        n4++;
    }
    MFT_CHECK(n3 == 6 && n4 == 24);
    perm[0] = 1; perm[1] = 0;
    MFT_CHECK(check_permute(c, x2, perm));
    /* transpose with negative dims == the permutation */
    t1 = mf_transpose(c, x4, -1, -3);
    perm[0] = 0; perm[1] = 3; perm[2] = 2; perm[3] = 1;
    t2 = mf_permute(c, x4, perm);
    MFT_CHECK(t1 && t2 && shape_is(t1, 4, 2, 5, 3, 1) && max_abs_diff(t1->data, t2->data, t1->ne) == 0);
    t1 = mf_transpose(c, x3, 0, -1);
    MFT_CHECK(shape_is(t1, 3, 4, 3, 2, 0));
    t1 = mf_transpose(c, x2, -2, 1);
    MFT_CHECK(t1 && shape_is(t1, 2, 4, 3, 0, 0) && t1->data[1] == x2->data[4]);
    t1 = mf_transpose(c, x2, 1, 1);
    MFT_CHECK(t1 && max_abs_diff(t1->data, x2->data, 12) == 0);
    MFT_CHECK(mf_ok(c));
    MFT_CHECK(mf_transpose(c, x2, 0, 2) == NULL && strstr(mf_error(c), "transpose"));
    mf_clear_error(c);
    perm[0] = 0; perm[1] = 0; perm[2] = 1;
    MFT_CHECK(mf_permute(c, x3, perm) == NULL && strstr(mf_error(c), "permute"));
    mf_ctx_free(c);
}
static mf_tensor *b_permute(mf_ctx *c, mf_tensor **in, void *u) {
    const args *a = (const args *)u;
    if (a->i[4]) return mf_transpose(c, in[0], a->i[0], a->i[1]);
    return mf_permute(c, in[0], a->i);
}
static void test_permute_grad(void) {
    static const int perms3[4][3] = {{0, 2, 1}, {2, 0, 1}, {1, 2, 0}, {2, 1, 0}};
    static const int perms4[4][4] = {{0, 2, 1, 3}, {3, 2, 1, 0}, {1, 3, 0, 2}, {0, 1, 3, 2}};
    gc_spec s[1];
    int k, d;
    char name[64];
    for (k = 0; k < 4; k++) {
        args a = A0();
        for (d = 0; d < 3; d++) a.i[d] = perms3[k][d];
        s[0] = gc_in(3, 2, 3, 4, 0);
        snprintf(name, sizeof name, "permute3 %d%d%d", a.i[0], a.i[1], a.i[2]);
        GRADCHECK(name, 1, s, b_permute, &a);
        a = A0();
        for (d = 0; d < 4; d++) a.i[d] = perms4[k][d];
        s[0] = gc_in(4, 2, 1, 3, 2);
        snprintf(name, sizeof name, "permute4 %d%d%d%d", a.i[0], a.i[1], a.i[2], a.i[3]);
        GRADCHECK(name, 1, s, b_permute, &a);
    }
    {
        args a = A0();
        a.i[4] = 1; a.i[0] = -1; a.i[1] = -2;
        s[0] = gc_in(3, 2, 3, 4, 0);
        GRADCHECK("transpose -1 -2", 1, s, b_permute, &a);
        a.i[0] = 0; a.i[1] = -1;
        s[0] = gc_in(4, 2, 1, 3, 2);
        GRADCHECK("transpose 0 -1", 1, s, b_permute, &a);
    }
}

/* ==== concat / slice / roll =================================================================== */
static void test_concat_slice_forward(void) {
    mf_ctx *c = mf_ctx_new(12);
    int sa[3] = {2, 3, 4}, ax;
    mf_tensor *a = rnd(c, 3, sa, 1, -1, 1);
    for (ax = -3; ax < 3; ax++) {
        int axis = ax < 0 ? ax + 3 : ax, sb[3], i, j, k, bad = 0, cut;
        mf_tensor *b, *y, *s0, *s1;
        memcpy(sb, sa, sizeof sb);
        sb[axis] = 2;
        b = rnd(c, 3, sb, 2 + axis, -1, 1);
        y = mf_concat(c, a, b, ax);
        MFT_CHECK(y && y->shape[axis] == sa[axis] + 2);
        if (!y) break;
        for (i = 0; i < y->shape[0]; i++)
            for (j = 0; j < y->shape[1]; j++)
                for (k = 0; k < y->shape[2]; k++) {
                    int idx[3], in_a;
                    float e;
                    idx[0] = i; idx[1] = j; idx[2] = k;
                    in_a = idx[axis] < sa[axis];
                    if (!in_a) idx[axis] -= sa[axis];
                    e = in_a ? a->data[(idx[0] * sa[1] + idx[1]) * sa[2] + idx[2]]
                             : b->data[(idx[0] * sb[1] + idx[1]) * sb[2] + idx[2]];
                    if (y->data[(i * y->shape[1] + j) * y->shape[2] + k] != e) bad = 1;
                }
        MFT_CHECK(!bad);
        /* slicing the concat gives a and b back */
        cut = sa[axis];
        s0 = mf_slice(c, y, ax, 0, cut);
        s1 = mf_slice(c, y, ax, cut, 2);
        MFT_CHECK(s0 && s1 && s0->ne == a->ne && s1->ne == b->ne);
        if (s0 && s1) {
            MFT_CHECK(max_abs_diff(s0->data, a->data, a->ne) == 0);
            MFT_CHECK(max_abs_diff(s1->data, b->data, b->ne) == 0);
        }
    }
    { /* hand example: rows 1..2 of a [4, 2] */
        int s[2] = {4, 2};
        const float v[8] = {0, 1, 2, 3, 4, 5, 6, 7}, e[4] = {2, 3, 4, 5}, e2[4] = {1, 3, 5, 7};
        mf_tensor *x = mf_from(c, 2, s, v), *y = mf_slice(c, x, 0, 1, 2), *z = mf_slice(c, x, -1, 1, 1);
        MFT_CHECK(shape_is(y, 2, 2, 2, 0, 0) && max_abs_diff(y->data, e, 4) == 0);
        MFT_CHECK(shape_is(z, 2, 4, 1, 0, 0) && max_abs_diff(z->data, e2, 4) == 0);
        MFT_CHECK(mf_slice(c, x, 0, 3, 2) == NULL && strstr(mf_error(c), "slice"));
        mf_clear_error(c);
        MFT_CHECK(mf_slice(c, x, 0, -1, 2) == NULL);
        mf_clear_error(c);
        MFT_CHECK(mf_concat(c, x, a, 0) == NULL && strstr(mf_error(c), "concat"));
        mf_clear_error(c);
    }
    MFT_CHECK(mf_ok(c));
    mf_ctx_free(c);
}
static mf_tensor *b_concat(mf_ctx *c, mf_tensor **in, void *u) {
    const args *a = (const args *)u;
    return a->i[1] ? mf_concat(c, in[0], in[0], a->i[0]) : mf_concat(c, in[0], in[1], a->i[0]);
}
static mf_tensor *b_slice(mf_ctx *c, mf_tensor **in, void *u) {
    const args *a = (const args *)u;
    return mf_slice(c, in[0], a->i[0], a->i[1], a->i[2]);
}
static void test_concat_slice_grad(void) {
    int ax;
    char name[64];
    for (ax = -4; ax < 4; ax++) {
        int axis = ax < 0 ? ax + 4 : ax, sb[4] = {2, 1, 3, 2};
        gc_spec s[2];
        args a = A0();
        s[0] = gc_in(4, 2, 1, 3, 2);
        sb[axis] = axis == 1 ? 2 : 1;
        s[1] = gc_in(4, sb[0], sb[1], sb[2], sb[3]);
        a.i[0] = ax;
        snprintf(name, sizeof name, "concat axis %d", ax);
        GRADCHECK(name, 2, s, b_concat, &a);
        a.i[1] = 1;
        snprintf(name, sizeof name, "concat(x, x) axis %d", ax);
        GRADCHECK(name, 1, s, b_concat, &a);
        a = A0();
        a.i[0] = ax; a.i[1] = axis == 1 ? 0 : 1; a.i[2] = 1;
        s[0] = gc_in(4, 3, 1, 3, 2);
        snprintf(name, sizeof name, "slice axis %d", ax);
        GRADCHECK(name, 1, s, b_slice, &a);
    }
    {
        gc_spec s[1];
        args a = A0();
        a.i[0] = 0; a.i[1] = 2; a.i[2] = 3;
        s[0] = gc_in(1, 7, 0, 0, 0);
        GRADCHECK("slice 1-D", 1, s, b_slice, &a);
    }
}

static void test_roll_forward(void) {
    mf_ctx *c = mf_ctx_new(13);
    int n = 4, k;
    const float v[4] = {0, 1, 2, 3};
    static const int shifts[6] = {1, -1, 5, -6, 4, 0};
    static const float expect[6][4] = {{3, 0, 1, 2}, {1, 2, 3, 0}, {3, 0, 1, 2}, {2, 3, 0, 1}, {0, 1, 2, 3}, {0, 1, 2, 3}};
    mf_tensor *x = mf_from(c, 1, &n, v);
    for (k = 0; k < 6; k++) {
        mf_tensor *y = mf_roll(c, x, shifts[k], 0);
        MFT_CHECK(y && max_abs_diff(y->data, expect[k], 4) == 0);
        if (y && max_abs_diff(y->data, expect[k], 4) != 0)
            printf("    roll(%d) = [%g %g %g %g]\n", shifts[k], (double)y->data[0], (double)y->data[1], (double)y->data[2], (double)y->data[3]);
    }
    { /* along each axis of a [2, 3, 4]: out[..., (i + s) mod n, ...] = x[..., i, ...] */
        int sh[3] = {2, 3, 4}, ax, s, i, j, l;
        mf_tensor *x3 = rnd(c, 3, sh, 1, -1, 1);
        for (ax = -3; ax < 3; ax++)
            for (s = -5; s <= 5; s += 2) {
                int axis = ax < 0 ? ax + 3 : ax, bad = 0;
                mf_tensor *y = mf_roll(c, x3, s, ax);
                if (!y) { MFT_CHECK(0); break; }
                for (i = 0; i < 2; i++) for (j = 0; j < 3; j++) for (l = 0; l < 4; l++) {
                    int o[3];
                    o[0] = i; o[1] = j; o[2] = l;
                    o[axis] = ((o[axis] + s) % sh[axis] + sh[axis]) % sh[axis];
                    if (y->data[(o[0] * 3 + o[1]) * 4 + o[2]] != x3->data[(i * 3 + j) * 4 + l]) bad = 1;
                }
                MFT_CHECK(!bad);
            }
    }
    MFT_CHECK(mf_ok(c));
    mf_ctx_free(c);
}
static mf_tensor *b_roll(mf_ctx *c, mf_tensor **in, void *u) {
    const args *a = (const args *)u;
    return mf_roll(c, in[0], a->i[0], a->i[1]);
}
static void test_roll_grad(void) {
    static const int cfg[5][2] = {{1, 1}, {-2, 2}, {7, -1}, {-9, 0}, {3, -3}};
    int k;
    char name[64];
    for (k = 0; k < 5; k++) {
        gc_spec s[1];
        args a = A0();
        a.i[0] = cfg[k][0]; a.i[1] = cfg[k][1];
        s[0] = gc_in(3, 2, 3, 4, 0);
        snprintf(name, sizeof name, "roll shift %d axis %d", a.i[0], a.i[1]);
        GRADCHECK(name, 1, s, b_roll, &a);
    }
}

/* ==== sum / mean / sum_axis =================================================================== */
static void test_reductions_forward(void) {
    mf_ctx *c = mf_ctx_new(14);
    int sh[3] = {2, 3, 4}, ax, n = 5;
    mf_tensor *x = rnd(c, 3, sh, 1, -1, 1), *s = mf_sum(c, x), *m = mf_mean(c, x), *x1 = rnd(c, 1, &n, 2, -1, 1), *y;
    double tot = 0;
    int64_t i;
    for (i = 0; i < 24; i++) tot += x->data[i];
    MFT_CHECK(shape_is(s, 1, 1, 0, 0, 0) && shape_is(m, 1, 1, 0, 0, 0));
    if (s && m) { MFT_NEAR(s->data[0], tot, 1e-6); MFT_NEAR(m->data[0], tot / 24, 1e-6); }
    for (ax = -3; ax < 3; ax++) {
        int axis = ax < 0 ? ax + 3 : ax, i0, i1, k, bad = 0, os[2], no = 0, d;
        y = mf_sum_axis(c, x, ax);
        for (d = 0; d < 3; d++) if (d != axis) os[no++] = sh[d];
        MFT_CHECK(shape_is(y, 2, os[0], os[1], 0, 0));
        if (!y) break;
        for (i0 = 0; i0 < os[0]; i0++)
            for (i1 = 0; i1 < os[1]; i1++) {
                double e = 0;
                for (k = 0; k < sh[axis]; k++) {
                    int idx[3], q = 0;
                    for (d = 0; d < 3; d++) idx[d] = d == axis ? k : (q++ == 0 ? i0 : i1);
                    e += x->data[(idx[0] * 3 + idx[1]) * 4 + idx[2]];
                }
                if (fabs(y->data[i0 * os[1] + i1] - e) > 1e-6) bad = 1;
            }
        MFT_CHECK(!bad);
    }
    y = mf_sum_axis(c, x1, 0);
    MFT_CHECK(shape_is(y, 1, 1, 0, 0, 0));
    if (y) MFT_NEAR(y->data[0], x1->data[0] + x1->data[1] + x1->data[2] + x1->data[3] + x1->data[4], 1e-6);
    MFT_CHECK(mf_ok(c));
    MFT_CHECK(mf_sum_axis(c, x, 3) == NULL && strstr(mf_error(c), "sum_axis"));
    mf_ctx_free(c);
}
static mf_tensor *b_reduce(mf_ctx *c, mf_tensor **in, void *u) {
    const args *a = (const args *)u;
    /* the square makes the gradient depend on the values */
    mf_tensor *x = mf_mul(c, in[0], in[0]);
    if (a->i[0] == 0) return mf_sum(c, x);
    if (a->i[0] == 1) return mf_mean(c, x);
    return mf_sum_axis(c, x, a->i[1]);
}
static void test_reductions_grad(void) {
    gc_spec s[1];
    args a = A0();
    int ax;
    char name[64];
    s[0] = gc_in(3, 2, 3, 4, 0);
    GRADCHECK("sum", 1, s, b_reduce, &a);
    a.i[0] = 1;
    GRADCHECK("mean", 1, s, b_reduce, &a);
    a.i[0] = 2;
    for (ax = -4; ax < 4; ax++) {
        a.i[1] = ax;
        s[0] = gc_in(4, 2, 3, 1, 2);
        snprintf(name, sizeof name, "sum_axis %d", ax);
        GRADCHECK(name, 1, s, b_reduce, &a);
    }
    a.i[1] = 0;
    s[0] = gc_in(1, 5, 0, 0, 0);
    GRADCHECK("sum_axis 1-D", 1, s, b_reduce, &a);
}

/* ==== conv1d ================================================================================== */
static void naive_conv1d(const mf_tensor *x, const mf_tensor *w, const mf_tensor *b, int stride, int pad,
                         int To, float *y) {
    int B = x->shape[0], T = x->shape[1], C = x->shape[2], Co = w->shape[0], K = w->shape[2];
    int bi, t, o, ci, k;
    for (bi = 0; bi < B; bi++)
        for (t = 0; t < To; t++)
            for (o = 0; o < Co; o++) {
                double s = b ? b->data[o] : 0;
                for (ci = 0; ci < C; ci++)
                    for (k = 0; k < K; k++) {
                        int ts = t * stride + k - pad;
                        if (ts >= 0 && ts < T) s += (double)w->data[(o * C + ci) * K + k] * x->data[(bi * T + ts) * C + ci];
                    }
                y[(bi * To + t) * Co + o] = (float)s;
            }
}
/* B, T, Cin, Cout, K, stride, pad */
static const int conv_cases[][7] = {
    {2, 6, 3, 4, 2, 2, 0},  /* kernel == stride: the compressive transformer's compression */
    {1, 9, 2, 3, 3, 3, 0},  /* kernel == stride, 3 */
    {2, 7, 3, 2, 3, 2, 1},  /* general, padded */
    {1, 5, 1, 1, 3, 1, 2},  /* 1 channel, pad > K/2 */
    {2, 8, 2, 3, 2, 3, 0},  /* stride > kernel (gaps), T not a multiple */
    {1, 3, 2, 2, 3, 1, 0},  /* T == K: one output */
};
#define N_CONV ((int)(sizeof conv_cases / sizeof conv_cases[0]))
static void test_conv1d_forward(void) {
    mf_ctx *c = mf_ctx_new(15);
    int ci, bias_on;
    for (ci = 0; ci < N_CONV; ci++)
        for (bias_on = 0; bias_on < 2; bias_on++) {
            const int *k = conv_cases[ci];
            int xs[3], ws[3], To = (k[1] + 2 * k[6] - k[4]) / k[5] + 1;
            mf_tensor *x, *w, *b, *y;
            float *ref;
            xs[0] = k[0]; xs[1] = k[1]; xs[2] = k[2];
            ws[0] = k[3]; ws[1] = k[2]; ws[2] = k[4];
            x = rnd(c, 3, xs, 1 + ci, -1, 1); w = rnd(c, 3, ws, 11 + ci, -1, 1); b = rnd(c, 1, &ws[0], 21 + ci, -1, 1);
            y = mf_conv1d(c, x, w, bias_on ? b : NULL, k[5], k[6]);
            MFT_CHECK(shape_is(y, 3, k[0], To, k[3], 0));
            if (!y) { printf("    %s\n", mf_error(c)); mf_clear_error(c); continue; }
            ref = (float *)malloc((size_t)y->ne * sizeof(float));
            naive_conv1d(x, w, bias_on ? b : NULL, k[5], k[6], To, ref);
            if (max_abs_diff(y->data, ref, y->ne) > 1e-5) {
                printf("    conv1d case %d bias %d: max diff %g\n", ci, bias_on, max_abs_diff(y->data, ref, y->ne));
                MFT_CHECK(0);
            }
            free(ref);
        }
    { /* kernel == stride with a ones kernel: sums of consecutive pairs */
        int xs[3] = {1, 4, 1}, ws[3] = {1, 1, 2};
        const float xv[4] = {1, 2, 3, 4}, wv[2] = {1, 1}, e[2] = {3, 7};
        mf_tensor *y = mf_conv1d(c, mf_from(c, 3, xs, xv), mf_from(c, 3, ws, wv), NULL, 2, 0);
        MFT_CHECK(shape_is(y, 3, 1, 2, 1, 0) && max_abs_diff(y->data, e, 2) == 0);
    }
    MFT_CHECK(mf_ok(c));
    mf_ctx_free(c);
}
static mf_tensor *b_conv1d(mf_ctx *c, mf_tensor **in, void *u) {
    const args *a = (const args *)u;
    return mf_conv1d(c, in[0], in[1], a->i[0] ? in[2] : NULL, a->i[1], a->i[2]);
}
static void test_conv1d_grad(void) {
    int ci, bias_on;
    char name[64];
    for (ci = 0; ci < N_CONV; ci++)
        for (bias_on = 0; bias_on < 2; bias_on++) {
            const int *k = conv_cases[ci];
            gc_spec s[3];
            args a = A0();
            s[0] = gc_in(3, k[0], k[1], k[2], 0);
            s[1] = gc_in(3, k[3], k[2], k[4], 0);
            s[2] = gc_in(1, k[3], 0, 0, 0);
            a.i[0] = bias_on; a.i[1] = k[5]; a.i[2] = k[6];
            snprintf(name, sizeof name, "conv1d case %d bias %d", ci, bias_on);
            GRADCHECK(name, bias_on ? 3 : 2, s, b_conv1d, &a);
        }
}

/* ==== avg_pool_seq ============================================================================ */
static void test_avg_pool_seq(void) {
    mf_ctx *c = mf_ctx_new(24);
    static const int cases[][2] = {{3, 0}, {1, 0}, {5, 0}, {9, 0}, {1, 1}, {2, 1}, {3, 1}, {8, 1}}; /* kernel, causal */
    int sh[3] = {2, 5, 3}, ci;
    mf_tensor *x = rnd(c, 3, sh, 1, -1, 1);
    for (ci = 0; ci < 8; ci++) {
        int k = cases[ci][0], causal = cases[ci][1], b, t, d, bad = 0;
        mf_tensor *y = mf_avg_pool_seq(c, x, k, causal);
        MFT_CHECK(shape_is(y, 3, 2, 5, 3, 0));
        if (!y) { printf("    %s\n", mf_error(c)); mf_clear_error(c); continue; }
        for (b = 0; b < 2; b++) for (t = 0; t < 5; t++) for (d = 0; d < 3; d++) {
            int lo = causal ? t - k + 1 : t - k / 2, hi = causal ? t : t + k / 2, s, n = 0;
            double m = 0;
            for (s = lo; s <= hi; s++) if (s >= 0 && s < 5) { m += x->data[(b * 5 + s) * 3 + d]; n++; }
            if (fabs(y->data[(b * 5 + t) * 3 + d] - m / n) > 1e-6) bad = 1;
        }
        if (bad) printf("    avg_pool_seq kernel %d causal %d: wrong values\n", k, causal);
        MFT_CHECK(!bad);
    }
    { /* long sequences: every mean is the correctly rounded one (the window sums are exact in double,
         however the op forms them) */
        static const int lc[][2] = {{3, 1}, {17, 0}, {64, 1}, {301, 0}};
        int sl[3] = {2, 300, 7}, li, bad = 0;
        mf_tensor *xl = rnd(c, 3, sl, 5, -3, 3);
        for (li = 0; li < 4; li++) {
            int k = lc[li][0], causal = lc[li][1], b, t, d;
            mf_tensor *y = mf_avg_pool_seq(c, xl, k, causal);
            if (!y) { bad = 1; continue; }
            for (b = 0; b < 2; b++) for (t = 0; t < 300; t++) for (d = 0; d < 7; d++) {
                int lo = causal ? t - k + 1 : t - k / 2, hi = causal ? t : t + k / 2, u, n = 0;
                double m = 0;
                for (u = lo; u <= hi; u++) if (u >= 0 && u < 300) { m += xl->data[(b * 300 + u) * 7 + d]; n++; }
                bad |= y->data[(b * 300 + t) * 7 + d] != (float)(m / n);
            }
        }
        MFT_CHECK(!bad);
    }
    { /* hand example: [1, 2, 3, 4], centred 3 -> [1.5, 2, 3, 3.5]; causal 2 -> [1, 1.5, 2.5, 3.5] */
        int s3[3] = {1, 4, 1};
        const float v[4] = {1, 2, 3, 4}, e1[4] = {1.5f, 2, 3, 3.5f}, e2[4] = {1, 1.5f, 2.5f, 3.5f};
        mf_tensor *h = mf_from(c, 3, s3, v), *y1 = mf_avg_pool_seq(c, h, 3, 0), *y2 = mf_avg_pool_seq(c, h, 2, 1);
        MFT_CHECK(y1 && y2 && max_abs_diff(y1->data, e1, 4) < 1e-7 && max_abs_diff(y2->data, e2, 4) < 1e-7);
    }
    MFT_CHECK(mf_ok(c));
    MFT_CHECK(mf_avg_pool_seq(c, x, 2, 0) == NULL && strstr(mf_error(c), "avg_pool_seq")); /* centred needs odd */
    mf_ctx_free(c);
}
static mf_tensor *b_avg_pool(mf_ctx *c, mf_tensor **in, void *u) {
    const args *a = (const args *)u;
    mf_tensor *y = mf_avg_pool_seq(c, in[0], a->i[0], a->i[1]);
    return mf_mul(c, y, y); /* nonlinear, so every window weight matters */
}
static void test_avg_pool_seq_grad(void) {
    static const int cases[][2] = {{3, 0}, {5, 0}, {9, 0}, {1, 1}, {2, 1}, {4, 1}, {7, 1}};
    int ci;
    char name[64];
    for (ci = 0; ci < 7; ci++) {
        gc_spec s[1];
        args a = A0();
        a.i[0] = cases[ci][0]; a.i[1] = cases[ci][1];
        s[0] = gc_in(3, 2, 6, 2, 0);
        snprintf(name, sizeof name, "avg_pool_seq kernel %d causal %d", a.i[0], a.i[1]);
        GRADCHECK(name, 1, s, b_avg_pool, &a);
    }
}

/* avg_pool_sub(x) = avg_pool_seq(x) - x, the pool mixer as one op: the same bits as the two ops,
   forward and backward, when x's gradient starts with it (x read by nothing else: the op stores);
   when x has another reader the op adds (S - dy) where the two ops add -dy, then S (one rounding
   apart) */
static void test_avg_pool_sub(void) {
    static const int cases[][2] = {{3, 1}, {5, 0}, {1, 1}, {4, 1}};
    int sh[3] = {2, 37, 19}, ci, other;
    for (ci = 0; ci < 4; ci++)
        for (other = 0; other < 2; other++) {
            mf_ctx *c1 = mf_ctx_new(5), *c2 = mf_ctx_new(5);
            mf_tensor *p1 = mf_param(c1, "p", 3, sh), *p2 = mf_param(c2, "p", 3, sh), *w1, *w2, *y1, *y2, *x1, *x2;
            int k = cases[ci][0], causal = cases[ci][1];
            mf_init_normal(c1, p1, 0, 1); mf_init_normal(c2, p2, 0, 1);
            x1 = mf_scale(c1, p1, 1.5f); x2 = mf_scale(c2, p2, 1.5f); /* an activation, as in the model */
            w1 = rnd(c1, 3, sh, 9, -1, 1); w2 = rnd(c2, 3, sh, 9, -1, 1);
            y1 = mf__avg_pool_sub(c1, x1, k, causal);
            y2 = mf_sub(c2, mf_avg_pool_seq(c2, x2, k, causal), x2);
            if (other) { y1 = mf_add(c1, y1, mf_mul(c1, x1, x1)); y2 = mf_add(c2, y2, mf_mul(c2, x2, x2)); }
            mf_zero_grad(c1); mf_zero_grad(c2);
            MFT_CHECK(mf_backward(c1, mf_sum(c1, mf_mul(c1, y1, w1))) == 0);
            MFT_CHECK(mf_backward(c2, mf_sum(c2, mf_mul(c2, y2, w2))) == 0);
            MFT_CHECK(y1 && y2 && !memcmp(y1->data, y2->data, (size_t)y1->ne * sizeof(float)));
            if (!other) MFT_CHECK(!memcmp(p1->grad, p2->grad, (size_t)p1->ne * sizeof(float)));
            else MFT_CHECK(max_abs_diff(p1->grad, p2->grad, p1->ne) < 1e-5);
            MFT_CHECK(y1 && (other || !strcmp(y1->op->name, "avg_pool_sub")));
            mf_ctx_free(c1); mf_ctx_free(c2);
        }
}

/* ==== composite graphs and the checker itself ================================================= */
/* causal attention block: softmax(q k^T / sqrt(d), causal) v, heads split with reshape/permute,
   then layernorm, gelu, linear and cross-entropy */
typedef struct net { mf_tensor *wq, *wk, *wv, *g, *b, *w2, *b2; const int32_t *tg; } net;
static int net_setup(mf_ctx *c, void *u) {
    net *n = (net *)u;
    int s_w[2] = {4, 4}, s_d = 4, s_o[2] = {5, 4}, s_b = 5;
    n->wq = rnd_param(c, "wq", 2, s_w, 1); n->wk = rnd_param(c, "wk", 2, s_w, 2); n->wv = rnd_param(c, "wv", 2, s_w, 3);
    n->g = rnd_param(c, "ln.g", 1, &s_d, 4); n->b = rnd_param(c, "ln.b", 1, &s_d, 5);
    n->w2 = rnd_param(c, "out.w", 2, s_o, 6); n->b2 = rnd_param(c, "out.b", 1, &s_b, 7);
    mf_param_set_trainable(n->b, 0); /* frozen: skipped by the checker */
    return mf_ok(c) ? 0 : -1;
}
static mf_tensor *net_forward(mf_ctx *c, void *u) {
    net *n = (net *)u;
    int xs[3] = {2, 3, 4}, hs[4] = {2, 3, 2, 2}, perm[4] = {0, 2, 1, 3}, back[3] = {2, 3, 4};
    mf_tensor *x = rnd(c, 3, xs, 99, -1, 1);
    mf_tensor *q = mf_permute(c, mf_reshape(c, mf_linear(c, x, n->wq, NULL), 4, hs), perm);
    mf_tensor *k = mf_permute(c, mf_reshape(c, mf_linear(c, x, n->wk, NULL), 4, hs), perm);
    mf_tensor *v = mf_permute(c, mf_reshape(c, mf_linear(c, x, n->wv, NULL), 4, hs), perm);
    mf_tensor *att = mf_softmax(c, mf_scale(c, mf_matmul(c, q, k, 0, 1), 0.70710678f), 1);
    mf_tensor *h = mf_reshape(c, mf_permute(c, mf_matmul(c, att, v, 0, 0), perm), 3, back);
    h = mf_add(c, x, h);
    h = mf_gelu(c, mf_layernorm(c, h, n->g, n->b, 1e-5f), 0);
    return mf_cross_entropy(c, mf_linear(c, h, n->w2, n->b2), n->tg, -1);
}
static void test_composite(void) {
    static const int32_t tg[6] = {0, 4, 2, 2, 1, 3};
    net n;
    gc_opts o = gc_defaults();
    memset(&n, 0, sizeof n);
    n.tg = tg;
    MFT_CHECK(GC_OK(gc_check_params("attention block", net_setup, net_forward, &n, NULL)));
    MFT_CHECK(GC_OK(gc_check_dir("attention block (directional)", net_setup, net_forward, &n, 4, NULL)));
    o.max_per_input = 5; /* the subset path */
    MFT_CHECK(GC_OK(gc_check_params("attention block (5 per tensor)", net_setup, net_forward, &n, &o)));
}

/* a deliberately wrong op: y = x^2 with a configurable backward error. The checker must catch
   a factor 2, a wrong sign and a missing term; it must pass the right one. */
static void bad_sq_forward(mf_ctx *c, mf_tensor *out) {
    int64_t i;
    (void)c;
    for (i = 0; i < out->ne; i++) out->data[i] = out->src[0]->data[i] * out->src[0]->data[i] + out->src[0]->data[i];
}
static void bad_sq_backward(mf_ctx *c, mf_tensor *out) {
    int64_t i;
    float *dx = mf__g(out->src[0]);
    (void)c;
    if (!dx) return;
    for (i = 0; i < out->ne; i++) {
        float x = out->src[0]->data[i], d;
        switch (out->iarg[0]) {
        case 0: d = 2 * x + 1; break;        /* right */
        case 1: d = 2 * (2 * x + 1); break;  /* factor 2 */
        case 2: d = -(2 * x + 1); break;     /* sign */
        case 3: d = 2 * x; break;            /* missing term */
        case 4: d = (i == 3) ? 1.1f * (2 * x + 1) : 2 * x + 1; break; /* one element 10% off */
        case 5: d = (i == 2) ? NAN : 2 * x + 1; break;                 /* a NaN */
        default: d = 2 * x + 1; break;
        }
        if (out->iarg[0] == 6) dx[i] = out->grad[i] * d;                  /* assigns instead of adding */
        else dx[i] += out->grad[i] * d;
    }
}
static const mf__op bad_sq_op = { "bad_sq", 1, mf__same_shape, bad_sq_forward, bad_sq_backward, MF__OP_PROPS(0) };
static mf_tensor *b_bad(mf_ctx *c, mf_tensor **in, void *u) {
    const args *a = (const args *)u;
    mf_tensor *t = mf__begin(c, &bad_sq_op, in[0], NULL, NULL, NULL);
    if (t) t->iarg[0] = a->i[0];
    return mf__finish(c, t);
}
static void test_gradcheck_catches_errors(void) {
    gc_spec s[1];
    gc_opts o = gc_defaults();
    int k;
    o.quiet = 1; /* no failure report: the errors are expected */
    s[0] = gc_range(gc_in(2, 3, 4, 0, 0), 0.1f, 2, 0);
    for (k = 0; k < 7; k++) {
        args a = A0();
        double e;
        a.i[0] = k;
        e = gc_check("bad_sq", 1, s, b_bad, &a, &o);
        if (k == 0) MFT_CHECK(e < 1e-3);
        else if (k < 6) MFT_CHECK(e > 2 * GC_TOL && !GC_OK(e));
        else MFT_CHECK(e == GC_FAILED); /* caught before any finite difference */
        if (k == 0 || k == 6) { /* the directional check agrees */
            gc__simple sm;
            memset(&sm, 0, sizeof sm);
            sm.n = 1; sm.specs = s; sm.build = b_bad; sm.user = &a; sm.seed = o.seed;
            e = gc_check_dir("bad_sq", gc__simple_setup, gc__simple_forward, &sm, 2, &o);
            MFT_CHECK(k == 0 ? e < 1e-3 : e == GC_FAILED);
        }
    }
}

/* ==== autograd semantics ====================================================================== */
static void test_autograd_accumulation(void) {
    mf_ctx *c = mf_ctx_new(16);
    int sh[2] = {2, 3}, i;
    mf_tensor *x = rnd_param(c, "x", 2, sh, 1), *l;
    /* a tensor used twice: d sum(x * x) = 2x */
    l = mf_sum(c, mf_mul(c, x, x));
    MFT_CHECK(l && mf_backward(c, l) == 0);
    for (i = 0; i < 6; i++) MFT_NEAR(x->grad[i], 2 * x->data[i], 1e-6);
    /* a second backward adds the same again */
    MFT_CHECK(mf_backward(c, l) == 0);
    for (i = 0; i < 6; i++) MFT_NEAR(x->grad[i], 4 * x->data[i], 1e-6);
    /* ... until mf_zero_grad */
    mf_zero_grad(c);
    for (i = 0; i < 6; i++) MFT_CHECK(x->grad[i] == 0.0f);
    MFT_CHECK(mf_backward(c, l) == 0);
    for (i = 0; i < 6; i++) MFT_NEAR(x->grad[i], 2 * x->data[i], 1e-6);
    /* residual: y = x + relu(x) * 3 uses x on two paths */
    mf_zero_grad(c);
    l = mf_sum(c, mf_add(c, x, mf_scale(c, mf_relu(c, x), 3)));
    MFT_CHECK(l && mf_backward(c, l) == 0);
    for (i = 0; i < 6; i++) MFT_NEAR(x->grad[i], x->data[i] > 0 ? 4 : 1, 1e-6);
    /* a backward that needs no gradient for the input: loss from a non-ancestor is refused */
    MFT_CHECK(mf_ok(c));
    mf_ctx_free(c);
}
static void test_detach_and_no_grad(void) {
    mf_ctx *c = mf_ctx_new(17);
    int sh[2] = {2, 3}, i, tape0, old;
    mf_tensor *x = rnd_param(c, "x", 2, sh, 1), *d, *l, *y;
    /* detach: sum(detach(x) * x) -> grad = x, not 2x */
    d = mf_detach(c, x);
    MFT_CHECK(d && d->data == x->data && !d->requires_grad && d->grad == NULL);
    l = mf_sum(c, mf_mul(c, d, x));
    MFT_CHECK(l && mf_backward(c, l) == 0);
    for (i = 0; i < 6; i++) MFT_NEAR(x->grad[i], x->data[i], 1e-6);
    /* a loss made only of detached values has no gradient path: clear error */
    l = mf_sum(c, mf_scale(c, d, 2));
    MFT_CHECK(l && !l->requires_grad);
    MFT_CHECK(mf_backward(c, l) == -1 && !mf_ok(c) && strstr(mf_error(c), "mf_backward") != NULL);
    mf_clear_error(c);
    /* no-grad region: nothing recorded, results take no gradient */
    tape0 = c->tape_len;
    old = mf_set_grad(c, 0);
    MFT_CHECK(old == 1);
    y = mf_gelu(c, mf_linear(c, x, x, NULL), 0);
    l = mf_mean(c, y);
    MFT_CHECK(y && l && !y->requires_grad && !l->requires_grad && y->grad == NULL);
    MFT_CHECK(c->tape_len == tape0);
    MFT_CHECK(mf_set_grad(c, 1) == 0);
    mf_zero_grad(c);
    MFT_CHECK(mf_backward(c, l) == -1 && !mf_ok(c));
    MFT_CHECK(strstr(mf_error(c), "no trainable parameter") != NULL || strstr(mf_error(c), "mf_set_grad") != NULL);
    mf_clear_error(c);
    for (i = 0; i < 6; i++) MFT_CHECK(x->grad[i] == 0.0f);
    /* recording works again after the region */
    l = mf_sum(c, mf_scale(c, x, 3));
    MFT_CHECK(l && l->requires_grad && mf_backward(c, l) == 0);
    for (i = 0; i < 6; i++) MFT_NEAR(x->grad[i], 3, 1e-6);
    /* the loss must be one element */
    MFT_CHECK(mf_backward(c, mf_scale(c, x, 1)) == -1 && strstr(mf_error(c), "one value"));
    mf_clear_error(c);
    MFT_CHECK(mf_backward(c, NULL) == -1);
    mf_clear_error(c);
    mf_ctx_free(c);
}
static void test_frozen_param(void) {
    mf_ctx *c = mf_ctx_new(18);
    int sw[2] = {3, 4}, sx[2] = {2, 4}, i, nz = 0;
    mf_tensor *w = rnd_param(c, "w", 2, sw, 1), *b = rnd_param(c, "b", 1, sw, 2), *x = rnd(c, 2, sx, 3, -1, 1), *l, *y;
    mf_param_set_trainable(w, 0);
    l = mf_sum(c, mf_mul(c, mf_linear(c, x, w, b), mf_linear(c, x, w, b)));
    MFT_CHECK(l && mf_backward(c, l) == 0);
    for (i = 0; i < 12; i++) MFT_CHECK(w->grad[i] == 0.0f);
    for (i = 0; i < 3; i++) nz += b->grad[i] != 0.0f;
    MFT_CHECK(nz == 3);
    /* only frozen inputs: the output takes no gradient */
    y = mf_linear(c, x, w, NULL);
    MFT_CHECK(y && !y->requires_grad);
    /* unfreeze: gradients flow again */
    mf_param_set_trainable(w, 1);
    mf_zero_grad(c);
    l = mf_sum(c, mf_linear(c, x, w, NULL));
    MFT_CHECK(l && mf_backward(c, l) == 0);
    for (i = 0; i < 4; i++) MFT_NEAR(w->grad[i], x->data[i] + x->data[4 + i], 1e-6);
    MFT_CHECK(mf_ok(c));
    mf_ctx_free(c);
}

/* a training-like step with every kind of op; returns the loss */
static float one_step(mf_ctx *c, mf_tensor *emb, mf_tensor *w, mf_tensor *cw) {
    static const int32_t ids[8] = {1, 4, 2, 2, 0, 3, 1, 1}, tg[8] = {4, 2, 2, 0, 3, 1, 1, -1};
    int is[2] = {2, 4}, ss[4] = {2, 4, 1, 6};
    mf_tensor *h = mf_embedding(c, emb, ids, 2, is);                 /* [2, 4, 6] */
    mf_tensor *cv = mf_conv1d(c, h, cw, NULL, 2, 0);                  /* [2, 2, 6] */
    mf_tensor *mem = mf_concat(c, cv, h, 1);                          /* [2, 6, 6] */
    mf_tensor *sc = mf_matmul(c, h, mem, 0, 1);                       /* [2, 4, 6] */
    mf_tensor *o = mf_matmul(c, mf_dropout(c, mf_softmax(c, sc, 1), 0.1f), mem, 0, 0);
    o = mf_layernorm(c, mf_add(c, h, mf_roll(c, o, 1, 1)), NULL, NULL, 1e-5f);
    o = mf_reshape(c, mf_permute(c, mf_reshape(c, o, 4, ss), (const int[]){0, 2, 1, 3}), 3, (const int[]){2, 4, 6});
    o = mf_linear(c, mf_silu(c, o), w, NULL);                        /* [2, 4, 5] */
    mf_tensor *l = mf_add(c, mf_cross_entropy(c, o, tg, -1), mf_scale(c, mf_mean(c, mf_sum_axis(c, mf_exp(c, mf_slice(c, o, 2, 0, 2)), 1)), 0.01f));
    if (!l || mf_backward(c, l) != 0) return -1;
    return l->data[0];
}
static void test_reset_and_arena(void) {
    mf_ctx *c = mf_ctx_new(19);
    int es[2] = {5, 6}, ws[2] = {5, 6}, cs[3] = {6, 6, 2}, step;
    mf_tensor *emb = rnd_param(c, "emb", 2, es, 1), *w = rnd_param(c, "w", 2, ws, 2), *cw = rnd_param(c, "cw", 3, cs, 3);
    size_t peak1 = 0, peak2 = 0;
    long allocs3 = 0;
    float l1 = 0, g1 = 0;
    for (step = 0; step < 100; step++) {
        float l;
        mf_set_training(c, 0); /* the same loss every step */
        l = one_step(c, emb, w, cw);
        MFT_CHECK(mf_ok(c) && l > 0);
        if (!mf_ok(c)) { printf("    step %d: %s\n", step, mf_error(c)); break; }
        if (step == 0) { l1 = l; g1 = w->grad[3]; peak1 = mf_activation_peak_bytes(c); }
        else {
            MFT_CHECK(l == l1);           /* reuse after reset gives the same result */
            MFT_CHECK(w->grad[3] == g1);
        }
        if (step == 1) peak2 = mf_activation_peak_bytes(c);
        if (step == 2) allocs3 = n_allocs;
        mf_zero_grad(c);
        mf_reset(c);
        MFT_CHECK(mf_activation_bytes(c) == 0);
    }
    /* the peak does not grow after the first step, and steps allocate nothing once sized */
    MFT_CHECK(peak1 > 0 && peak2 == peak1);
    MFT_CHECK(mf_activation_peak_bytes(c) == peak1);
    MFT_CHECK(n_allocs == allocs3);
    if (n_allocs != allocs3) printf("    %ld allocations in steps 3..99\n", n_allocs - allocs3);
    /* training mode (dropout active) also stays bounded */
    mf_set_training(c, 1);
    for (step = 0; step < 5; step++) { one_step(c, emb, w, cw); mf_zero_grad(c); mf_reset(c); }
    peak1 = mf_activation_peak_bytes(c);
    allocs3 = n_allocs;
    for (step = 0; step < 20; step++) { one_step(c, emb, w, cw); mf_zero_grad(c); mf_reset(c); }
    MFT_CHECK(mf_activation_peak_bytes(c) == peak1 && n_allocs == allocs3);
    MFT_CHECK(mf_ok(c));
    mf_ctx_free(c);
}

/* shapes big enough that the parallel loops really run in parallel: one thread and all threads
   must agree (races in forward or backward would show) */
static float threads_step(mf_ctx *c, int n_threads, float *grads_out) {
    static int32_t ids[4 * 64], tg[4 * 64];
    int es[2] = {50, 48}, cs[3] = {48, 48, 2}, ws[2] = {40, 48}, is[2] = {4, 64}, i, hs[4] = {4, 64, 4, 12};
    int perm[4] = {0, 2, 1, 3};
    mf_tensor *emb, *cw, *w, *g, *h, *cv, *mem, *sc, *o, *q, *l;
    for (i = 0; i < 4 * 64; i++) { ids[i] = (i * 7) % 50; tg[i] = i % 9 == 0 ? -1 : (i * 5) % 40; }
    mf_set_threads(c, n_threads);
    emb = rnd_param(c, "emb", 2, es, 1); cw = rnd_param(c, "cw", 3, cs, 2); w = rnd_param(c, "w", 2, ws, 3);
    g = rnd_param(c, "g", 1, &es[1], 4);
    h = mf_embedding(c, emb, ids, 2, is);                                   /* [4, 64, 48] */
    cv = mf_conv1d(c, h, cw, NULL, 2, 0);                                   /* [4, 32, 48] */
    mem = mf_concat(c, cv, h, 1);                                           /* [4, 96, 48] */
    sc = mf_scale(c, mf_matmul(c, h, mem, 0, 1), 0.15f);                    /* [4, 64, 96] */
    o = mf_matmul(c, mf_dropout(c, mf_softmax(c, sc, 1), 0.1f), mem, 0, 0); /* [4, 64, 48] */
    q = mf_permute(c, mf_reshape(c, o, 4, hs), perm);                       /* [4, 4, 64, 12] */
    q = mf_softmax(c, mf_matmul(c, q, q, 0, 1), 1);                         /* [4, 4, 64, 64] */
    o = mf_add(c, o, mf_slice(c, mf_transpose(c, mf_sum_axis(c, q, 1), -1, -2), 2, 0, 48));
    o = mf_layernorm(c, mf_add(c, h, mf_roll(c, o, 3, 1)), g, NULL, 1e-5f);
    o = mf_mul(c, mf_gelu(c, o, 0), mf_sigmoid(c, mf_silu(c, mf_exp(c, mf_scale(c, o, 0.3f)))));
    o = mf_linear(c, mf_relu(c, o), w, NULL);                               /* [4, 64, 40] */
    l = mf_add(c, mf_cross_entropy(c, o, tg, -1), mf_mse(c, mf_log_softmax(c, o), mf_detach(c, o)));
    if (!l || mf_backward(c, l) != 0) return -1;
    memcpy(grads_out, mf_param_grads(c), (size_t)mf_param_count(c) * sizeof(float));
    return l->data[0];
}
static void test_threads_consistent(void) {
    mf_ctx *c1 = mf_ctx_new(23), *c2 = mf_ctx_new(23);
    float *g1 = (float *)calloc(20000, sizeof(float)), *g2 = (float *)calloc(20000, sizeof(float));
    float l1 = threads_step(c1, 1, g1), l2 = threads_step(c2, 0, g2);
    double gmax = 0, dmax = 0;
    int64_t i, n = mf_param_count(c1);
    MFT_CHECK(mf_ok(c1) && mf_ok(c2) && n == mf_param_count(c2) && n <= 20000);
    if (!mf_ok(c1)) printf("    %s\n", mf_error(c1));
    MFT_CHECK(l1 > 0);
    MFT_NEAR(l1, l2, 1e-5);
    for (i = 0; i < n && i < 20000; i++) {
        if (fabs(g1[i]) > gmax) gmax = fabs(g1[i]);
        if (fabs(g1[i] - g2[i]) > dmax) dmax = fabs(g1[i] - g2[i]);
    }
    MFT_CHECK(gmax > 0 && dmax <= 1e-4 * gmax);
    if (!(dmax <= 1e-4 * gmax)) printf("    max gradient difference %g (max gradient %g)\n", dmax, gmax);
    free(g1); free(g2);
    mf_ctx_free(c1); mf_ctx_free(c2);
}

/* ==== initialisers ============================================================================ */
static void test_initialisers(void) {
    mf_ctx *c = mf_ctx_new(20), *c2 = mf_ctx_new(20), *c3 = mf_ctx_new(21);
    int ws[2] = {300, 200}, cs[3] = {8, 5, 3}, ns = 100000, bs = 5000;
    mf_tensor *w = mf_param(c, "w", 2, ws), *cw = mf_param(c, "conv.w", 3, cs), *nrm = mf_param(c, "n", 1, &ns);
    mf_tensor *bias = mf_param(c, "bias", 1, &bs), *v, *w2, *w3, *n2;
    double bound = 1.0 / sqrt(200.0), mn = 1e9, mx = -1e9, m = 0, var = 0;
    int64_t i;
    int same = 1, diff = 0, out = 0;
    MFT_CHECK(mf_init_kaiming_uniform(c, w) == 0);
    for (i = 0; i < w->ne; i++) {
        if (w->data[i] < mn) mn = w->data[i];
        if (w->data[i] > mx) mx = w->data[i];
        if (fabs(w->data[i]) > bound * (1 + 1e-6)) out++;
        m += w->data[i];
    }
    MFT_CHECK(out == 0);
    MFT_CHECK(mn < -0.995 * bound && mx > 0.995 * bound);
    MFT_NEAR(m / (double)w->ne, 0, 0.02 * bound);
    /* conv weight [Cout, Cin, K]: fan_in = Cin * K */
    MFT_CHECK(mf_init_kaiming_uniform(c, cw) == 0);
    for (i = 0, mx = 0; i < cw->ne; i++) if (fabs(cw->data[i]) > mx) mx = fabs(cw->data[i]);
    MFT_CHECK(mx <= 1.0 / sqrt(15.0) * (1 + 1e-6) && mx > 0.8 / sqrt(15.0));
    /* bias: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) */
    MFT_CHECK(mf_init_bias(c, bias, 64) == 0);
    for (i = 0, mn = 1e9, mx = -1e9; i < bias->ne; i++) {
        if (bias->data[i] < mn) mn = bias->data[i];
        if (bias->data[i] > mx) mx = bias->data[i];
    }
    MFT_CHECK(mn >= -0.125 && mx <= 0.125 && mn < -0.12 && mx > 0.12);
    /* normal: mean 0, std 1 over 1e5 values (standard errors 0.003 and 0.0022) */
    MFT_CHECK(mf_init_normal(c, nrm, 0, 1) == 0);
    for (i = 0, m = 0; i < nrm->ne; i++) m += nrm->data[i];
    m /= (double)nrm->ne;
    for (i = 0; i < nrm->ne; i++) var += (nrm->data[i] - m) * (nrm->data[i] - m);
    var /= (double)nrm->ne;
    MFT_NEAR(m, 0, 0.015);
    MFT_NEAR(sqrt(var), 1, 0.015);
    { /* tails look normal: P(|z| > 2) = 4.55% */
        int64_t t2 = 0;
        for (i = 0; i < nrm->ne; i++) t2 += fabsf(nrm->data[i]) > 2.0f;
        MFT_NEAR((double)t2 / (double)nrm->ne, 0.0455, 0.004);
    }
    MFT_CHECK(mf_init_normal(c, nrm, 2, 0.5f) == 0);
    for (i = 0, m = 0; i < nrm->ne; i++) m += nrm->data[i];
    MFT_NEAR(m / (double)nrm->ne, 2, 0.01);
    /* const, uniform */
    MFT_CHECK(mf_init_const(c, bias, 0.25f) == 0 && bias->data[0] == 0.25f && bias->data[4999] == 0.25f);
    MFT_CHECK(mf_init_uniform(c, bias, 3, 4) == 0);
    for (i = 0, out = 0; i < bias->ne; i++) out += !(bias->data[i] >= 3 && bias->data[i] < 4);
    MFT_CHECK(out == 0);
    /* reproducible: same seed and name -> same values, whatever the creation order */
    v = mf_param(c2, "v", 2, ws);
    w2 = mf_param(c2, "w", 2, ws);
    w3 = mf_param(c3, "w", 2, ws);
    n2 = mf_param(c2, "n", 1, &ns);
    mf_init_kaiming_uniform(c2, v); mf_init_kaiming_uniform(c2, w2); mf_init_kaiming_uniform(c3, w3);
    mf_init_normal(c2, n2, 0, 1);
    mf_init_normal(c, nrm, 0, 1);
    for (i = 0; i < w->ne; i++) {
        if (w2->data[i] != w->data[i]) same = 0;
        if (v->data[i] != w->data[i]) diff++;
    }
    MFT_CHECK(same);
    MFT_CHECK(diff > w->ne * 9 / 10);             /* another name: other values */
    MFT_CHECK(max_abs_diff(n2->data, nrm->data, ns) == 0);
    for (i = 0, diff = 0; i < w->ne; i++) diff += w3->data[i] != w->data[i];
    MFT_CHECK(diff > w->ne * 9 / 10);             /* another seed: other values */
    { /* unnamed tensors: the n-th one initialised gets the same values in every run (not keyed by its
         address: c2 allocates another tensor first, so its tensors lie elsewhere), another n others */
        int s2[2] = {50, 40};
        mf_tensor *a1 = mf_new(c, 2, s2), *b1 = mf_new(c, 2, s2), *a2, *b2;
        mf_new(c2, 2, ws);
        a2 = mf_new(c2, 2, s2); b2 = mf_new(c2, 2, s2);
        MFT_CHECK(mf_init_normal(c, a1, 0, 1) == 0 && mf_init_normal(c, b1, 0, 1) == 0);
        MFT_CHECK(mf_init_normal(c2, a2, 0, 1) == 0 && mf_init_normal(c2, b2, 0, 1) == 0);
        MFT_CHECK(max_abs_diff(a1->data, a2->data, a1->ne) == 0 && max_abs_diff(b1->data, b2->data, b1->ne) == 0);
        for (i = 0, diff = 0; i < a1->ne; i++) diff += a1->data[i] != b1->data[i];
        MFT_CHECK(diff > a1->ne * 9 / 10);
    }
    MFT_CHECK(mf_init_normal(c, nrm, 0, -1) == -1 && !mf_ok(c));
    mf_clear_error(c);
    MFT_CHECK(mf_init_bias(c, bias, 0) == -1);
    mf_clear_error(c);
    MFT_CHECK(mf_ok(c) && mf_ok(c2) && mf_ok(c3));
    mf_ctx_free(c); mf_ctx_free(c2); mf_ctx_free(c3);
}

/* ==== SGEMM =================================================================================== */
static int sgemm_case(int ta, int tb, int M, int N, int K, float alpha, float beta, int pad, int threads, int batch,
                      int share_a, int share_b) {
    int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad, bi, i, j, k, bad = 0;
    long long sA = share_a ? 0 : (long long)(ta ? K : M) * lda, sB = share_b ? 0 : (long long)(tb ? N : K) * ldb;
    long long sC = (long long)M * ldc;
    size_t nA = (size_t)(ta ? K : M) * lda * (share_a ? 1 : batch), nB = (size_t)(tb ? N : K) * ldb * (share_b ? 1 : batch);
    size_t nC = (size_t)sC * batch, q;
    float *Am = (float *)malloc(nA * sizeof(float)), *Bm = (float *)malloc(nB * sizeof(float));
    float *C = (float *)malloc(nC * sizeof(float)), *C0 = (float *)malloc(nC * sizeof(float));
    for (q = 0; q < nA; q++) Am[q] = urand(1, q, -1, 1);
    for (q = 0; q < nB; q++) Bm[q] = urand(2, q, -1, 1);
    for (q = 0; q < nC; q++) C0[q] = beta == 0 ? NAN : urand(3, q, -1, 1);
    memcpy(C, C0, nC * sizeof(float));
    if (batch == 1 && !share_a && !share_b)
        mf_sgemm(ta, tb, M, N, K, alpha, Am, lda, Bm, ldb, beta, C, ldc, threads);
    else
        mf_sgemm_batched(ta, tb, M, N, K, alpha, Am, lda, sA, Bm, ldb, sB, beta, C, ldc, sC, batch, threads);
    for (bi = 0; bi < batch; bi++) {
        const float *a = Am + bi * sA, *b = Bm + bi * sB;
        for (i = 0; i < M; i++)
            for (j = 0; j < ldc; j++) {
                size_t ci = (size_t)bi * sC + (size_t)i * ldc + j;
                double s = 0, mag = 0, e;
                if (j >= N) { /* padding is not touched */
                    if (memcmp(&C[ci], &C0[ci], sizeof(float)) != 0) bad = 1;
                    continue;
                }
                for (k = 0; k < K; k++) {
                    double p = (double)(ta ? a[k * lda + i] : a[i * lda + k]) * (tb ? b[j * ldb + k] : b[k * ldb + j]);
                    s += p; mag += fabs(p);
                }
                e = alpha * s + (beta == 0 ? 0.0 : beta * C0[ci]);
                mag = fabs(alpha) * mag + (beta == 0 ? 0.0 : fabs(beta * C0[ci]));
                if (!(fabs(C[ci] - e) <= 1e-5 * mag + 1e-6)) bad = 1;
            }
    }
    if (bad) printf("    sgemm ta %d tb %d M %d N %d K %d alpha %g beta %g pad %d threads %d batch %d share %d%d: wrong\n",
                    ta, tb, M, N, K, (double)alpha, (double)beta, pad, threads, batch, share_a, share_b);
    free(Am); free(Bm); free(C); free(C0);
    return !bad;
}
static void test_sgemm(void) {
    static const int sizes[][3] = {{1, 1, 1}, {7, 13, 5}, {1, 17, 9}, {19, 1, 3}, {33, 17, 64}, {67, 45, 131}, {16, 32, 8}, {5, 3, 300}};
    static const float ab[][2] = {{1, 0}, {0.5f, 1}, {-1.5f, -0.7f}, {2, 0}, {1, 1}};
    int si, t, k;
    for (si = 0; si < (int)(sizeof sizes / sizeof sizes[0]); si++)
        for (t = 0; t < 4; t++)
            for (k = 0; k < 5; k++)
                MFT_CHECK(sgemm_case(t & 1, t >> 1, sizes[si][0], sizes[si][1], sizes[si][2], ab[k][0], ab[k][1],
                                     (si + k) % 3 == 0 ? 3 : 0, k % 2 ? 1 : 0, 1, 0, 0));
    /* batched, with shared operands, and thread counts */
    for (t = 0; t < 4; t++) {
        MFT_CHECK(sgemm_case(t & 1, t >> 1, 9, 7, 11, 1, 0, 0, 0, 3, 0, 0));
        MFT_CHECK(sgemm_case(t & 1, t >> 1, 9, 7, 11, 0.5f, 1, 2, 2, 3, 1, 0));
        MFT_CHECK(sgemm_case(t & 1, t >> 1, 9, 7, 11, -1, 0.5f, 1, 1, 4, 0, 1));
        MFT_CHECK(sgemm_case(t & 1, t >> 1, 40, 37, 70, 1, 0, 0, 2, 2, 0, 0));
    }
    /* big enough for a packed/blocked kernel path: M, K past typical MC/KC blocks, odd tails */
    for (t = 0; t < 4; t++)
        MFT_CHECK(sgemm_case(t & 1, t >> 1, 181, 131, 720, t == 2 ? -1.0f : 1.0f, t & 1 ? -0.5f : 0.0f, t == 1 ? 5 : 0, 0, 1, 0, 0));
    /* K == 0: C = beta * C (alpha * empty sum) */
    {
        float C[4] = {1, 2, 3, 4}, Az = 0, Bz = 0;
        mf_sgemm(0, 0, 2, 2, 0, 1, &Az, 1, &Bz, 2, 0.5f, C, 2, 1);
        MFT_CHECK(C[0] == 0.5f && C[3] == 2.0f);
        C[0] = NAN;
        mf_sgemm(0, 0, 2, 2, 0, 1, &Az, 1, &Bz, 2, 0, C, 2, 1);
        MFT_CHECK(C[0] == 0.0f && C[1] == 0.0f);
    }
}

/* ==== errors: bad input fails cleanly with a message naming the op =========================== */
static void test_errors(void) {
    mf_ctx *c = mf_ctx_new(22);
    int s23[2] = {2, 3}, s34[2] = {3, 4}, s4 = 4, one = 1, s33[3] = {2, 3, 3}, w3[3] = {2, 4, 2};
    mf_tensor *a = rnd(c, 2, s23, 1, -1, 1), *b = rnd(c, 2, s34, 2, -1, 1), *v4 = rnd(c, 1, &s4, 3, -1, 1);
    mf_tensor *x3 = rnd(c, 3, s33, 4, -1, 1), *cw = rnd(c, 3, w3, 5, -1, 1);
    const int32_t bad_t[2] = {0, 3}, bad_id[1] = {5};
    int i;
    struct { mf_tensor *r; const char *word; } cases[20];
    int n = 0;
#define ERR_CASE(expr, w) do { cases[n].r = (expr); cases[n].word = (w); \
        if (cases[n].r != NULL || mf_ok(c) || !strstr(mf_error(c), (w))) { \
            printf("    expected an error naming \"%s\" from %s; got %s\n", (w), #expr, mf_error(c)); MFT_CHECK(0); } \
        mf_clear_error(c); n++; } while (0)
    ERR_CASE(mf_matmul(c, a, a, 0, 0), "matmul");
    ERR_CASE(mf_matmul(c, x3, rnd(c, 3, w3, 6, -1, 1), 0, 0), "matmul");
    ERR_CASE(mf_head_matmul(c, x3, cw), "head_matmul");
    ERR_CASE(mf_head_matmul(c, v4, cw), "head_matmul");
    ERR_CASE(mf_linear(c, a, b, NULL), "linear");
    ERR_CASE(mf_add(c, a, v4), "add");
    ERR_CASE(mf_mul(c, b, a), "mul");
    ERR_CASE(mf_cross_entropy(c, a, bad_t, -1), "cross_entropy");
    ERR_CASE(mf_mse(c, a, b), "mse");
    ERR_CASE(mf_layernorm(c, a, v4, NULL, 1e-5f), "layernorm");
    ERR_CASE(mf_embedding(c, a, bad_id, 1, &one), "embedding");
    ERR_CASE(mf_dropout(c, a, 1.0f), "dropout");
    ERR_CASE(mf_conv1d(c, x3, cw, NULL, 1, 0), "conv1d");
    ERR_CASE(mf_conv1d(c, x3, rnd(c, 3, (const int[]){2, 3, 5}, 7, -1, 1), NULL, 1, 0), "conv1d");
    ERR_CASE(mf_roll(c, a, 1, 2), "roll");
    ERR_CASE(mf_softmax(c, v4, 1), "softmax");
    ERR_CASE(mf_relu(c, NULL), "relu");
#undef ERR_CASE
    (void)cases;
    /* sticky: after an error every op returns NULL until cleared */
    MFT_CHECK(mf_matmul(c, a, a, 0, 0) == NULL);
    MFT_CHECK(mf_add(c, a, a) == NULL && mf_relu(c, a) == NULL && mf_new(c, 2, s23) == NULL);
    mf_clear_error(c);
    MFT_CHECK(mf_ok(c) && mf_add(c, a, a) != NULL);
    for (i = 0; i < n; i++) MFT_CHECK(cases[i].r == NULL);
    mf_ctx_free(c);
}

/* ==== the op list: every op's properties against what its backward does ====================== */
/* Each op of mf__ops runs from its examples (tests/op_examples.h) with activation inputs, and its
   backward is driven by hand the ways mf_backward drives it: the descriptor's is_view, is_unary,
   assigns_grads and grad_passes must agree with what the op does, or a gradient goes wrong
   silently (an unzeroed buffer, a gradient computed into a buffer another input still needs). */
#include "op_examples.h"

enum { FILL_ZERO, FILL_NAN, FILL_RAND };
/* "op" or "op (instance)" */
static const char *ex_label(const op_example *e) {
    static char buf[128];
    snprintf(buf, sizeof buf, *e->what ? "%s (%s)" : "%s", e->op, e->what);
    return buf;
}
typedef struct prop_run {
    mf_ctx *c;
    const op_example *e;
    mf_tensor *out;
    int n_act;                 /* the distinct inputs that are activations taking a gradient */
    mf_tensor *act[MF_MAX_SRC];
    float *g[MF_MAX_SRC];      /* their gradient buffers */
    float *ref[MF_MAX_SRC];    /* their gradients from zero (backward adding into zeroed buffers) */
    float *dy, *dy0;           /* out's gradient (a working copy, and the value) */
    float *pref;               /* the parameters' gradients from zero */
    int64_t np;                /* floats of the parameters' gradients */
} prop_run;

static float fill_value(int fill, int k, int64_t i) {
    return fill == FILL_ZERO ? 0.0f : fill == FILL_NAN ? NAN : urand(777 + (uint64_t)k, (uint64_t)i, 0.5f, 1.5f);
}
/* every gradient buffer filled (parameters: zero, or random for FILL_RAND), the inputs' pending or
   not, out's gradient dy in its own buffer */
static void prep(prop_run *r, int fill, int pending) {
    int k;
    int64_t i;
    for (k = 0; k < r->n_act; k++) {
        for (i = 0; i < r->act[k]->ne; i++) r->g[k][i] = fill_value(fill, k, i);
        r->act[k]->grad = r->g[k];
        r->act[k]->grad_pending = pending;
    }
    for (i = 0; i < r->np; i++) r->c->p_grad[i] = fill == FILL_RAND ? fill_value(fill, MF_MAX_SRC, i) : 0.0f;
    memcpy(r->dy, r->dy0, (size_t)r->out->ne * sizeof(float));
    r->out->grad = r->dy;
    r->out->grad_pending = 0;
}
/* the first element of g that is not exactly ref's (a NaN never is), or -1 */
static int64_t first_diff(const float *g, const float *ref, int64_t n) {
    int64_t i;
    for (i = 0; i < n; i++) if (!(g[i] == ref[i])) return i;
    return -1;
}
/* input k's gradient, and the parameters', exactly as from zero; `how` names the run */
static void expect_ref(prop_run *r, const char *how) {
    int k;
    int64_t i;
    for (k = 0; k < r->n_act; k++)
        if ((i = first_diff(r->g[k], r->ref[k], r->act[k]->ne)) >= 0) {
            printf("    %s: %s: gradient of input %d [%lld] = %g, from zero %g\n", ex_label(r->e), how, k,
                   (long long)i, (double)r->g[k][i], (double)r->ref[k][i]);
            MFT_CHECK(0);
            return;
        }
    if (r->np && (i = first_diff(r->c->p_grad, r->pref, r->np)) >= 0) {
        printf("    %s: %s: parameter gradient [%lld] = %g, from zero %g\n", ex_label(r->e), how,
               (long long)i, (double)r->c->p_grad[i], (double)r->pref[i]);
        MFT_CHECK(0);
    }
}
static int act_index(const prop_run *r, const mf_tensor *s) {
    int k;
    for (k = 0; k < r->n_act; k++) if (r->act[k] == s) return k;
    return -1;
}

/* is_unary: one input, the same shape, and output element i depends on input element i only */
static void check_unary(prop_run *r) {
    mf_tensor *out = r->out, *x = out->src[0];
    float *y0 = (float *)malloc((size_t)out->ne * sizeof(float));
    int64_t j, i;
    int k, bad = 0;
    for (k = 1; k < MF_MAX_SRC; k++) if (out->src[k]) bad = 1;
    if (bad || out->op->n_required != 1 || out->ndim != x->ndim || memcmp(out->shape, x->shape, sizeof out->shape)) {
        printf("    %s: is_unary, but it has more than one input or changes the shape\n", ex_label(r->e));
        MFT_CHECK(0);
        free(y0);
        return;
    }
    memcpy(y0, out->data, (size_t)out->ne * sizeof(float));
    for (j = 0; j < x->ne && !bad; j++) {
        float v = x->data[j];
        x->data[j] = v * 0.5f + 0.375f;
        out->op->forward(r->c, out);
        for (i = 0; i < out->ne; i++)
            if (i != j && memcmp(&out->data[i], &y0[i], sizeof(float)) != 0) {
                printf("    %s: is_unary, but input element %lld moves output element %lld\n", ex_label(r->e), (long long)j,
                       (long long)i);
                MFT_CHECK(0);
                bad = 1;
                break;
            }
        x->data[j] = v;
    }
    out->op->forward(r->c, out);
    free(y0);
    /* in place, as with recycled gradients: the input's gradient in out's gradient buffer */
    if (act_index(r, x) == 0) {
        float *own = r->g[0];
        prep(r, FILL_NAN, 1);
        x->grad = r->g[0] = r->dy;
        mf__backward_op(r->c, out);
        expect_ref(r, "is_unary: dx computed in place in dy's buffer");
        r->g[0] = own;
    }
}
/* grad_passes: each of the first grad_passes inputs of out's size has out's gradient, and keeps
   it when it shares out's gradient buffer while the op's backward runs */
static void check_passes(prop_run *r) {
    mf_tensor *out = r->out;
    int p;
    if (out->op->grad_passes > out->op->n_required) {
        printf("    %s: grad_passes %d, but %d inputs\n", ex_label(r->e), out->op->grad_passes, out->op->n_required);
        MFT_CHECK(0);
    }
    for (p = 0; p < out->op->grad_passes && p < MF_MAX_SRC; p++) {
        mf_tensor *s = out->src[p];
        int k = act_index(r, s);
        float *own;
        int64_t i;
        if (k < 0 || s->ne != out->ne) continue;
        if ((i = first_diff(r->ref[k], r->dy0, s->ne)) >= 0) {
            printf("    %s: grad_passes %d, but input %d's gradient [%lld] is %g, out's %g\n", ex_label(r->e),
                   out->op->grad_passes, p, (long long)i, (double)r->ref[k][i], (double)r->dy0[i]);
            MFT_CHECK(0);
            continue;
        }
        prep(r, FILL_NAN, 1);
        own = r->g[k];
        s->grad = r->g[k] = r->dy; /* shared, as mf__grad_shared_src arranges */
        mf__backward_op(r->c, out);
        expect_ref(r, "grad_passes: an input sharing out's gradient buffer");
        r->g[k] = own;
    }
}

/* is_view: the output is the input's data, which the forward leaves alone; otherwise the output
   has its own data and the forward writes every element of it (the same values again) */
static void check_view(prop_run *r, mf_tensor **in) {
    mf_tensor *out = r->out;
    float *y0;
    int64_t i;
    int k;
    if (out->op->is_view) {
        for (i = 0; out->data == out->src[0]->data && i < in[0]->ne; i++)
            if (in[0]->data[i] != ex_value(r->e, 0, i)) break;
        if (out->src[0] != in[0] || out->data != in[0]->data || i < in[0]->ne) {
            printf("    %s: is_view, but the output is not its first input's data left as it was\n", ex_label(r->e));
            MFT_CHECK(0);
        }
        return;
    }
    for (k = 0; k < MF_MAX_SRC; k++)
        if (out->src[k] && out->src[k]->data == out->data) {
            printf("    %s: the output shares input %d's data, but is_view is 0\n", ex_label(r->e), k);
            MFT_CHECK(0);
            return;
        }
    y0 = (float *)malloc((size_t)out->ne * sizeof(float));
    memcpy(y0, out->data, (size_t)out->ne * sizeof(float));
    for (i = 0; i < out->ne; i++) out->data[i] = NAN;
    out->op->forward(r->c, out);
    if ((i = first_diff(out->data, y0, out->ne)) >= 0) {
        printf("    %s: forward again: output [%lld] = %g, first %g (is_view 0: the forward must write all of it)\n",
               ex_label(r->e), (long long)i, (double)out->data[i], (double)y0[i]);
        MFT_CHECK(0);
    }
    free(y0);
}
static void check_example(const op_example *e) {
    prop_run r;
    mf_tensor *in[EX_MAX_IN];
    const mf__op *op = ex_op(e);
    int k, claimed, written;
    int64_t i;
    memset(&r, 0, sizeof r);
    r.e = e;
    r.c = mf_ctx_new(99);
    for (k = 0; k < e->n_in; k++) { /* activations that take a gradient, as ops' inputs are on the tape */
        in[k] = mf_new(r.c, e->in[k].nd, e->in[k].s);
        if (!in[k]) break;
        for (i = 0; i < in[k]->ne; i++) in[k]->data[i] = ex_value(e, k, i);
        in[k]->requires_grad = 1;
    }
    r.out = mf_ok(r.c) ? e->build(r.c, in) : NULL;
    if (!r.out || !op || r.out->op != op) {
        printf("    %s: the example does not make a node of the op%s%s\n", ex_label(e), mf_ok(r.c) ? "" : ": ",
               mf_ok(r.c) ? "" : mf_error(r.c));
        MFT_CHECK(0);
        ex_cleanup();
        mf_ctx_free(r.c);
        return;
    }
    check_view(&r, in);
    for (k = 0; k < MF_MAX_SRC; k++) {
        mf_tensor *s = r.out->src[k];
        if (s && s->requires_grad && !s->is_param && act_index(&r, s) < 0) r.act[r.n_act++] = s;
    }
    MFT_CHECK(r.n_act > 0);
    for (k = 0; k < r.n_act; k++) {
        r.g[k] = (float *)malloc((size_t)r.act[k]->ne * sizeof(float));
        r.ref[k] = (float *)malloc((size_t)r.act[k]->ne * sizeof(float));
    }
    r.dy = (float *)malloc((size_t)r.out->ne * sizeof(float));
    r.dy0 = (float *)malloc((size_t)r.out->ne * sizeof(float));
    for (i = 0; i < r.out->ne; i++) r.dy0[i] = urand(555, (uint64_t)i, -1, 1);
    r.np = r.c->p_grad ? (int64_t)r.c->p_used : 0;
    r.pref = (float *)malloc((size_t)(r.np + 1) * sizeof(float));

    /* from zero: the buffers zeroed, nothing pending; the backward adds */
    prep(&r, FILL_ZERO, 0);
    op->backward(r.c, r.out);
    for (k = 0; k < r.n_act; k++) memcpy(r.ref[k], r.g[k], (size_t)r.act[k]->ne * sizeof(float));
    if (r.np) memcpy(r.pref, r.c->p_grad, (size_t)r.np * sizeof(float));
    /* mf_backward's way: pending buffers hold garbage (NaN here) and are zeroed first unless the op
       has assigns_grads; either way the result is the one from zero */
    prep(&r, FILL_NAN, 1);
    mf__backward_op(r.c, r.out);
    expect_ref(&r, op->assigns_grads ? "assigns_grads: pending buffers not zeroed" : "pending buffers zeroed");
    /* gradients already holding other ops' contributions (not pending): the backward adds to them */
    prep(&r, FILL_RAND, 0);
    op->backward(r.c, r.out);
    for (k = 0; k < r.n_act; k++)
        for (i = 0; i < r.act[k]->ne; i++) {
            float c0 = fill_value(FILL_RAND, k, i), want = c0 + r.ref[k][i];
            if (!(fabsf(r.g[k][i] - want) <= 1e-5f * (1.0f + fabsf(c0) + fabsf(r.ref[k][i])))) {
                printf("    %s: input %d's gradient holding %g: [%lld] = %g after the backward, not + %g\n", ex_label(e),
                       k, (double)c0, (long long)i, (double)r.g[k][i], (double)r.ref[k][i]);
                MFT_CHECK(0);
                break;
            }
        }
    for (i = 0; i < r.np; i++) {
        float c0 = fill_value(FILL_RAND, MF_MAX_SRC, i), want = c0 + r.pref[i];
        if (!(fabsf(r.c->p_grad[i] - want) <= 1e-5f * (1.0f + fabsf(c0) + fabsf(r.pref[i])))) {
            printf("    %s: parameter gradient [%lld] = %g after the backward, not %g + %g\n", ex_label(e),
                   (long long)i, (double)r.c->p_grad[i], (double)c0, (double)r.pref[i]);
            MFT_CHECK(0);
            break;
        }
    }
    /* the backward alone on pending buffers: assigns_grads exactly when it claims every one
       (mf__g_claim / mf__g_add clear grad_pending) and writes all of it */
    prep(&r, FILL_NAN, 1);
    op->backward(r.c, r.out);
    claimed = written = 1;
    for (k = 0; k < r.n_act; k++) {
        if (r.act[k]->grad_pending) claimed = 0;
        if (first_diff(r.g[k], r.ref[k], r.act[k]->ne) >= 0) written = 0;
    }
    if (op->assigns_grads && !claimed) {
        printf("    %s: assigns_grads, but its backward leaves an input gradient pending (not taken with "
               "mf__g_claim / mf__g_add)\n", ex_label(e));
        MFT_CHECK(0);
    }
    if (!op->assigns_grads && claimed && written) {
        printf("    %s: its backward claims and writes every input gradient, but assigns_grads is 0\n", ex_label(e));
        MFT_CHECK(0);
    }
    if (op->is_unary) check_unary(&r);
    check_passes(&r);

    ex_cleanup();
    for (k = 0; k < r.n_act; k++) { free(r.g[k]); free(r.ref[k]); }
    free(r.dy); free(r.dy0); free(r.pref);
    mf_ctx_free(r.c);
}
/* the op list: no op twice, each with an example, each example of a listed op */
static void test_every_op_has_an_example(void) {
    int i, j;
    for (i = 0; i < MF__N_OPS; i++) {
        for (j = 0; j < i; j++)
            if (mf__ops[j] == mf__ops[i] || strcmp(mf__ops[j]->name, mf__ops[i]->name) == 0) {
                printf("    op %s is listed twice in mf__ops\n", mf__ops[i]->name);
                MFT_CHECK(0);
            }
        if (ex_find(mf__ops[i]) < 0) {
            printf("    op %s has no example in tests/op_examples.h\n", mf__ops[i]->name);
            MFT_CHECK(0);
        }
    }
    for (i = 0; i < N_EXAMPLES; i++)
        if (!ex_op(&EXAMPLES[i])) {
            printf("    example \"%s\" (%s) names no op of mf__ops\n", EXAMPLES[i].op, EXAMPLES[i].what);
            MFT_CHECK(0);
        }
}
static void test_op_properties(void) {
    int i;
    for (i = 0; i < N_EXAMPLES; i++) check_example(&EXAMPLES[i]);
}

int main(void) {
    double t0 = mf_time();
    MFT_RUN(test_matmul_forward);
    MFT_RUN(test_matmul_grad);
    MFT_RUN(test_matmul_self);
    MFT_RUN(test_head_matmul);
    MFT_RUN(test_linear);
    MFT_RUN(test_binary_forward);
    MFT_RUN(test_binary_grad);
    MFT_RUN(test_binary_self);
    MFT_RUN(test_unary_forward);
    MFT_RUN(test_unary_grad);
    MFT_RUN(test_gelu_accuracy);
    MFT_RUN(test_relu_vector);
    MFT_RUN(test_attn_transpose);
    MFT_RUN(test_softmax_forward);
    MFT_RUN(test_softmax_grad);
    MFT_RUN(test_cross_entropy_forward);
    MFT_RUN(test_cross_entropy_mse_grad);
    MFT_RUN(test_cross_entropy_wide_rows);
    MFT_RUN(test_layernorm_forward);
    MFT_RUN(test_layernorm_grad);
    MFT_RUN(test_embedding);
    MFT_RUN(test_dropout);
    MFT_RUN(test_reshape);
    MFT_RUN(test_view_shares_gradient);
    MFT_RUN(test_permute_forward);
    MFT_RUN(test_permute_grad);
    MFT_RUN(test_concat_slice_forward);
    MFT_RUN(test_concat_slice_grad);
    MFT_RUN(test_roll_forward);
    MFT_RUN(test_roll_grad);
    MFT_RUN(test_reductions_forward);
    MFT_RUN(test_reductions_grad);
    MFT_RUN(test_conv1d_forward);
    MFT_RUN(test_conv1d_grad);
    MFT_RUN(test_avg_pool_seq);
    MFT_RUN(test_avg_pool_seq_grad);
    MFT_RUN(test_avg_pool_sub);
    MFT_RUN(test_composite);
    MFT_RUN(test_gradcheck_catches_errors);
    MFT_RUN(test_autograd_accumulation);
    MFT_RUN(test_detach_and_no_grad);
    MFT_RUN(test_frozen_param);
    MFT_RUN(test_reset_and_arena);
    MFT_RUN(test_threads_consistent);
    MFT_RUN(test_initialisers);
    MFT_RUN(test_sgemm);
    MFT_RUN(test_errors);
    MFT_RUN(test_every_op_has_an_example);
    MFT_RUN(test_op_properties);
    printf("test_ops: %.2f s\n", mf_time() - t0);
    return mft_finish();
}
