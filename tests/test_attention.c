/* mf_attention: the fused op against the composed reference (matmul, scale, softmax, matmul),
   finite differences, fully masked rows, memory and determinism. */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"

#include "mf_test.h"
#include <stdlib.h>
#include <string.h>

typedef struct at_case { int B, H, Tq, Tk, dk, dv, causal; } at_case;

/* q, k, v as parameters (same names and seed: identical values in every context) and a fixed
   random weight R for the loss sum(out * R) */
typedef struct at_io { mf_tensor *q, *k, *v, *out, *loss; } at_io;

static at_io at_build(mf_ctx *ctx, at_case c, int fused, const float *R) {
    int sq[4] = {c.B, c.H, c.Tq, c.dk}, sk[4] = {c.B, c.H, c.Tk, c.dk}, sv[4] = {c.B, c.H, c.Tk, c.dv};
    int so[4] = {c.B, c.H, c.Tq, c.dv};
    float scale = 1.0f / sqrtf((float)c.dk);
    at_io io;
    io.q = mf_param_find(ctx, "q");
    if (!io.q) {
        io.q = mf_param(ctx, "q", 4, sq); io.k = mf_param(ctx, "k", 4, sk); io.v = mf_param(ctx, "v", 4, sv);
        mf_init_normal(ctx, io.q, 0, 1.5f); mf_init_normal(ctx, io.k, 0, 1.5f); mf_init_normal(ctx, io.v, 0, 1);
    } else {
        io.k = mf_param_find(ctx, "k"); io.v = mf_param_find(ctx, "v");
    }
    if (fused) io.out = mf_attention(ctx, io.q, io.k, io.v, scale, c.causal, 0.0f);
    else
        io.out = mf_matmul(ctx, mf_softmax(ctx, mf_scale(ctx, mf_matmul(ctx, io.q, io.k, 0, 1), scale), c.causal),
                           io.v, 0, 0);
    io.loss = R ? mf_sum(ctx, mf_mul(ctx, io.out, mf_from(ctx, 4, so, R))) : NULL;
    return io;
}

static float *at_random(int64_t n, uint64_t seed) {
    float *r = (float *)malloc((size_t)n * sizeof(float));
    int64_t i;
    for (i = 0; i < n; i++) r[i] = mft_uniform(seed, 7, (uint64_t)i) * 2.0f - 1.0f;
    return r;
}

/* floor 1: the inputs are in [-1, 1], so the outputs and gradients are of order 1 */
static double at_rel(const float *a, const float *b, int64_t n) { return mft_rel_err(a, b, n, 1.0); }

static int at_zero(const float *a, int64_t n) {
    int64_t i;
    for (i = 0; i < n; i++) if (a[i] != 0.0f) return 0;
    return 1;
}

static int at_finite(const float *a, int64_t n) {
    int64_t i;
    for (i = 0; i < n; i++) if (!(fabsf(a[i]) <= 3.4e38f)) return 0;
    return 1;
}

/* fused and composed forward + backward on separate contexts; compares out and the 3 grads */
static void at_compare(at_case c, int threads, double tol) {
    mf_ctx *cf = mf_ctx_new(3), *cr = mf_ctx_new(3);
    int64_t no = (int64_t)c.B * c.H * c.Tq * c.dv;
    float *R = at_random(no, 11);
    at_io f, r;
    mf_set_threads(cf, threads); mf_set_threads(cr, threads);
    f = at_build(cf, c, 1, R); r = at_build(cr, c, 0, R);
    MFT_CHECK(mf_ok(cf) && mf_ok(cr));
    if (mf_ok(cf) && mf_ok(cr)) {
        double eo, eq, ek, ev;
        mf_backward(cf, f.loss); mf_backward(cr, r.loss);
        MFT_CHECK(mf_ok(cf) && mf_ok(cr));
        eo = at_rel(f.out->data, r.out->data, no);
        eq = at_rel(f.q->grad, r.q->grad, f.q->ne);
        ek = at_rel(f.k->grad, r.k->grad, f.k->ne);
        ev = at_rel(f.v->grad, r.v->grad, f.v->ne);
        if (!(eo <= tol && eq <= tol && ek <= tol && ev <= tol))
            printf("    B%d H%d Tq%d Tk%d dk%d dv%d causal%d: out %.2e dq %.2e dk %.2e dv %.2e\n", c.B, c.H,
                   c.Tq, c.Tk, c.dk, c.dv, c.causal, eo, eq, ek, ev);
        MFT_CHECK(eo <= tol); MFT_CHECK(eq <= tol); MFT_CHECK(ek <= tol); MFT_CHECK(ev <= tol);
        MFT_CHECK(at_finite(f.out->data, no) && at_finite(f.q->grad, f.q->ne));
        MFT_CHECK(at_finite(f.k->grad, f.k->ne) && at_finite(f.v->grad, f.v->ne));
    } else printf("    %s%s\n", mf_error(cf), mf_error(cr));
    free(R);
    mf_ctx_free(cf); mf_ctx_free(cr);
}

static void test_forward_backward_match_composed(void) {
    static const int Ts[] = {1, 7, 65, 130};
    int a, b, causal;
    for (causal = 0; causal < 2; causal++)
        for (a = 0; a < 4; a++)
            for (b = 0; b < 4; b++) {
                at_case c;
                if (Ts[b] < Ts[a] && !causal) continue; /* Tq > Tk only with causal (masked rows) */
                c.B = 2; c.H = 3; c.Tq = Ts[a]; c.Tk = Ts[b]; c.dk = 16; c.dv = 24; c.causal = causal;
                at_compare(c, 0, 2e-5);
            }
}

static void test_odd_head_sizes(void) {
    at_case c1 = {2, 3, 65, 130, 7, 5, 1}, c2 = {1, 2, 130, 130, 33, 70, 0}, c3 = {2, 1, 64, 192, 64, 32, 1};
    at_case c4 = {1, 1, 200, 200, 32, 32, 1}; /* one head: the split (dK/dV then dQ) backward */
    at_compare(c1, 0, 2e-5); at_compare(c2, 0, 2e-5); at_compare(c3, 0, 2e-5); at_compare(c4, 0, 2e-5);
    at_compare(c4, 1, 2e-5);
}

/* Tq > Tk with causal: query i sees keys j <= i + Tk - Tq, so the first Tq - Tk see none */
static void test_fully_masked_rows_are_zero(void) {
    at_case c = {2, 3, 9, 4, 8, 6, 1};
    mf_ctx *ctx = mf_ctx_new(5);
    float *R = at_random((int64_t)2 * 3 * 9 * 6, 2);
    at_io f = at_build(ctx, c, 1, R);
    int bh, i, j, zero = 1;
    MFT_CHECK(mf_ok(ctx));
    if (mf_ok(ctx)) {
        MFT_CHECK(mf_backward(ctx, f.loss) == 0);
        for (bh = 0; bh < 6; bh++)
            for (i = 0; i < 5; i++)
                for (j = 0; j < 6; j++) zero &= f.out->data[(bh * 9 + i) * 6 + j] == 0.0f;
        MFT_CHECK(zero);
        MFT_CHECK(at_finite(f.out->data, f.out->ne));
        MFT_CHECK(at_finite(f.q->grad, f.q->ne) && at_finite(f.k->grad, f.k->ne) && at_finite(f.v->grad, f.v->ne));
        for (bh = 0, zero = 1; bh < 6; bh++) /* those queries get no gradient */
            for (i = 0; i < 5; i++)
                for (j = 0; j < 8; j++) zero &= f.q->grad[(bh * 9 + i) * 8 + j] == 0.0f;
        MFT_CHECK(zero);
    }
    free(R);
    mf_ctx_free(ctx);
    at_compare(c, 0, 2e-5);
}

/* central differences of the double-accumulated loss sum(out * R) on a tiny case */
static double at_loss(mf_ctx *ctx, at_case c, const float *R) {
    int old = mf_set_grad(ctx, 0);
    at_io f = at_build(ctx, c, 1, NULL);
    double s = 0;
    int64_t i;
    mf_set_grad(ctx, old);
    if (!f.out) return NAN;
    for (i = 0; i < f.out->ne; i++) s += (double)f.out->data[i] * R[i];
    return s;
}
static void at_fd(at_case c) {
    mf_ctx *ctx = mf_ctx_new(9);
    int64_t no = (int64_t)c.B * c.H * c.Tq * c.dv, i;
    float *R = at_random(no, 4);
    at_io f = at_build(ctx, c, 1, R);
    mf_tensor *ts[3];
    int which, bad = 0;
    MFT_CHECK(mf_backward(ctx, f.loss) == 0);
    ts[0] = f.q; ts[1] = f.k; ts[2] = f.v;
    for (which = 0; which < 3; which++)
        for (i = 0; i < ts[which]->ne; i++) {
            float x0 = ts[which]->data[i], h = 1e-2f;
            double lp, lm, num, ana = ts[which]->grad[i];
            ts[which]->data[i] = x0 + h; lp = at_loss(ctx, c, R);
            ts[which]->data[i] = x0 - h; lm = at_loss(ctx, c, R);
            ts[which]->data[i] = x0;
            num = (lp - lm) / (2.0 * h);
            if (!(fabs(num - ana) <= 2e-3 * (fabs(num) > 1 ? fabs(num) : 1))) {
                if (bad++ < 5) printf("    fd %d[%d]: numeric %.6f analytic %.6f\n", which, (int)i, num, ana);
            }
        }
    MFT_CHECK(bad == 0);
    MFT_CHECK(mf_ok(ctx));
    free(R);
    mf_ctx_free(ctx);
}
static void test_finite_differences(void) {
    at_case c1 = {1, 2, 3, 5, 4, 3, 1}, c2 = {1, 2, 4, 4, 3, 2, 0}, c3 = {1, 1, 5, 3, 2, 2, 1};
    at_fd(c1); at_fd(c2); at_fd(c3);
}

static size_t at_peak(at_case c, int fused) {
    mf_ctx *ctx = mf_ctx_new(1);
    float *R = at_random((int64_t)c.B * c.H * c.Tq * c.dv, 3);
    at_io io = at_build(ctx, c, fused, R);
    size_t peak;
    MFT_CHECK(mf_backward(ctx, io.loss) == 0);
    peak = mf_activation_peak_bytes(ctx);
    free(R);
    mf_ctx_free(ctx);
    return peak;
}
static void test_memory_is_linear(void) {
    at_case c = {2, 4, 512, 512, 32, 32, 1};
    size_t fused = at_peak(c, 1), composed = at_peak(c, 0);
    if (!(fused * 4 < composed)) printf("    fused %zu bytes, composed %zu bytes\n", fused, composed);
    MFT_CHECK(fused * 4 < composed);
}

/* gradients are bit-identical between runs and between thread counts (both backward schemes) */
static void at_grads(at_case c, int threads, float **g) {
    mf_ctx *ctx = mf_ctx_new(8);
    float *R = at_random((int64_t)c.B * c.H * c.Tq * c.dv, 6);
    at_io io;
    mf_set_threads(ctx, threads);
    io = at_build(ctx, c, 1, R);
    MFT_CHECK(mf_backward(ctx, io.loss) == 0);
    g[0] = (float *)malloc((size_t)(io.q->ne + io.k->ne + io.v->ne + io.out->ne) * sizeof(float));
    memcpy(g[0], io.q->grad, (size_t)io.q->ne * sizeof(float));
    memcpy(g[0] + io.q->ne, io.k->grad, (size_t)io.k->ne * sizeof(float));
    memcpy(g[0] + io.q->ne + io.k->ne, io.v->grad, (size_t)io.v->ne * sizeof(float));
    memcpy(g[0] + io.q->ne + io.k->ne + io.v->ne, io.out->data, (size_t)io.out->ne * sizeof(float));
    free(R);
    mf_ctx_free(ctx);
}
static void test_deterministic(void) {
    at_case cs[2] = {{1, 1, 300, 300, 32, 32, 1}, {2, 3, 100, 170, 16, 8, 0}}; /* one head: split scheme */
    int i;
    for (i = 0; i < 2; i++) {
        at_case c = cs[i];
        size_t bytes = (size_t)c.B * c.H * (c.Tq * c.dk + c.Tk * c.dk + c.Tk * c.dv + c.Tq * c.dv) * sizeof(float);
        float *a, *b, *s;
        at_grads(c, 2, &a); at_grads(c, 2, &b); at_grads(c, 1, &s);
        MFT_CHECK(memcmp(a, b, bytes) == 0);
        MFT_CHECK(memcmp(a, s, bytes) == 0);
        free(a); free(b); free(s);
    }
}

/* only some inputs take a gradient: the others stay untouched and the rest still match */
static void test_partial_grads(void) {
    at_case c = {1, 2, 70, 90, 8, 8, 1};
    int mask;
    for (mask = 1; mask < 7; mask++) {
        mf_ctx *cf = mf_ctx_new(3), *cr = mf_ctx_new(3);
        float *R = at_random((int64_t)c.B * c.H * c.Tq * c.dv, 1);
        at_io f, r;
        f = at_build(cf, c, 1, NULL); r = at_build(cr, c, 1, NULL); /* create the params */
        mf_param_set_trainable(f.q, mask & 1); mf_param_set_trainable(f.k, mask & 2); mf_param_set_trainable(f.v, mask & 4);
        mf_reset(cf); mf_reset(cr);
        f = at_build(cf, c, 1, R); r = at_build(cr, c, 0, R);
        MFT_CHECK(mf_backward(cf, f.loss) == 0 && mf_backward(cr, r.loss) == 0);
        MFT_CHECK((mask & 1) ? at_rel(f.q->grad, r.q->grad, f.q->ne) <= 2e-5 : at_zero(f.q->grad, f.q->ne));
        MFT_CHECK((mask & 2) ? at_rel(f.k->grad, r.k->grad, f.k->ne) <= 2e-5 : at_zero(f.k->grad, f.k->ne));
        MFT_CHECK((mask & 4) ? at_rel(f.v->grad, r.v->grad, f.v->ne) <= 2e-5 : at_zero(f.v->grad, f.v->ne));
        free(R);
        mf_ctx_free(cf); mf_ctx_free(cr);
    }
}

/* MF_ATTN_TOKENS_MAJOR: q, k, v [B, T, H, d] give exactly what mf_attention gives on the permuted
   operands (the same products in the same order, only the addresses differ), dropout included */
typedef struct at_lay { at_case c; float drop; int threads; } at_lay;
static void at_layout_run(at_lay L, int tokens, float **res, int64_t *n) {
    at_case c = L.c;
    mf_ctx *ctx = mf_ctx_new(5);
    int sq[4] = {c.B, c.Tq, c.H, c.dk}, sk[4] = {c.B, c.Tk, c.H, c.dk}, sv[4] = {c.B, c.Tk, c.H, c.dv};
    int perm[4] = {0, 2, 1, 3};
    float *R;
    mf_tensor *q, *k, *v, *out;
    int64_t no = (int64_t)c.B * c.H * c.Tq * c.dv, off = 0;
    mf_set_threads(ctx, L.threads);
    mf_set_training(ctx, 1);
    q = mf_param(ctx, "q", 4, sq); k = mf_param(ctx, "k", 4, sk); v = mf_param(ctx, "v", 4, sv);
    mf_init_normal(ctx, q, 0, 1.5f); mf_init_normal(ctx, k, 0, 1.5f); mf_init_normal(ctx, v, 0, 1);
    R = at_random(no, 12);
    if (tokens) out = mf_attention_layout(ctx, q, k, v, 0.4f, c.causal, L.drop, MF_ATTN_TOKENS_MAJOR);
    else
        out = mf_permute(ctx, mf_attention(ctx, mf_permute(ctx, q, perm), mf_permute(ctx, k, perm),
                                           mf_permute(ctx, v, perm), 0.4f, c.causal, L.drop), perm);
    MFT_CHECK(out && out->shape[1] == c.Tq && out->shape[2] == c.H && out->shape[3] == c.dv);
    MFT_CHECK(mf_backward(ctx, mf_sum(ctx, mf_mul(ctx, out, mf_from(ctx, 4, out ? out->shape : sq, R)))) == 0);
    *n = no + q->ne + k->ne + v->ne;
    *res = (float *)calloc((size_t)*n, sizeof(float));
    if (mf_ok(ctx)) {
        memcpy(*res, out->data, (size_t)no * sizeof(float)); off = no;
        memcpy(*res + off, q->grad, (size_t)q->ne * sizeof(float)); off += q->ne;
        memcpy(*res + off, k->grad, (size_t)k->ne * sizeof(float)); off += k->ne;
        memcpy(*res + off, v->grad, (size_t)v->ne * sizeof(float));
    } else printf("    %s\n", mf_error(ctx));
    free(R);
    mf_ctx_free(ctx);
}
static void test_tokens_major_layout(void) {
    static const at_lay Ls[] = {{{2, 3, 65, 130, 7, 5, 1}, 0.0f, 2}, {{2, 3, 70, 70, 16, 24, 1}, 0.2f, 2},
                                {{1, 4, 100, 130, 8, 8, 0}, 0.1f, 1}, {{1, 1, 130, 130, 32, 16, 1}, 0.0f, 2},
                                {{2, 5, 70, 130, 16, 8, 1}, 0.1f, 2}}; /* the last: whole heads per thread */
    int i;
    for (i = 0; i < 5; i++) {
        float *a, *b;
        int64_t na, nb;
        at_layout_run(Ls[i], 1, &a, &na); at_layout_run(Ls[i], 0, &b, &nb);
        MFT_CHECK(na == nb && memcmp(a, b, (size_t)na * sizeof(float)) == 0);
        MFT_CHECK(at_finite(a, na) && !at_zero(a, na));
        free(a); free(b);
    }
}

/* k and v the same tensor (metric / quadratic attend over p with k = v = p): the kernels copy such
   a head once; the results must be exactly those of v = an equal but separate tensor (p's
   gradient = dK + dV), token-major (copied heads: whole heads per thread and query tiles alone),
   and heads-major to rounding, with dropout */
static void test_shared_kv(void) {
    static const int cs[][6] = {{2, 5, 70, 16, 2, 1}, {1, 2, 70, 16, 2, 1}, {2, 5, 70, 16, 2, 0}};
    int i, same;
    for (i = 0; i < 3; i++) {
        int B = cs[i][0], H = cs[i][1], T = cs[i][2], d = cs[i][3], tokens = cs[i][5], sep;
        int sh[4];
        float *out[2], *gq[2], *gp[2];
        int64_t n = (int64_t)B * H * T * d;
        sh[0] = B; sh[1] = tokens ? T : H; sh[2] = tokens ? H : T; sh[3] = d;
        for (sep = 0; sep < 2; sep++) {
            mf_ctx *ctx = mf_ctx_new(7);
            mf_tensor *q, *p, *p2, *o, *v;
            mf_set_threads(ctx, cs[i][4]);
            mf_set_training(ctx, 1);
            q = mf_param(ctx, "q", 4, sh); p = mf_param(ctx, "p", 4, sh); p2 = mf_param(ctx, "p2", 4, sh);
            mf_init_normal(ctx, q, 0, 1.5f); mf_init_normal(ctx, p, 0, 1.5f);
            memcpy(p2->data, p->data, (size_t)n * sizeof(float));
            v = sep ? p2 : p;
            o = mf_attention_layout(ctx, q, p, v, 0.3f, 1, 0.1f, tokens ? MF_ATTN_TOKENS_MAJOR : MF_ATTN_HEADS_MAJOR);
            MFT_CHECK(mf_backward(ctx, mf_sum(ctx, mf_mul(ctx, o, o))) == 0);
            out[sep] = (float *)calloc((size_t)n, sizeof(float)); gq[sep] = (float *)calloc((size_t)n, sizeof(float));
            gp[sep] = (float *)calloc((size_t)n, sizeof(float));
            if (mf_ok(ctx)) {
                int64_t e;
                memcpy(out[sep], o->data, (size_t)n * sizeof(float)); memcpy(gq[sep], q->grad, (size_t)n * sizeof(float));
                for (e = 0; e < n; e++) gp[sep][e] = sep ? p->grad[e] + p2->grad[e] : p->grad[e];
            } else printf("    %s\n", mf_error(ctx));
            mf_ctx_free(ctx);
        }
        same = memcmp(out[0], out[1], (size_t)n * sizeof(float)) == 0 && memcmp(gq[0], gq[1], (size_t)n * sizeof(float)) == 0;
        /* heads-major rows are not copied: dK and dV go straight into p's gradient, tile pair by tile
           pair, so p's gradient is dK + dV up to rounding there */
        same = same && (tokens ? memcmp(gp[0], gp[1], (size_t)n * sizeof(float)) == 0 : at_rel(gp[0], gp[1], n) <= 1e-5);
        MFT_CHECK(same && !at_zero(gp[0], n) && at_finite(gp[0], n));
        free(out[0]); free(out[1]); free(gq[0]); free(gq[1]); free(gp[0]); free(gp[1]);
    }
}

static void test_shape_errors(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    int s4[4] = {2, 3, 5, 8}, s4b[4] = {2, 4, 5, 8}, s4k[4] = {2, 3, 6, 8}, s4d[4] = {2, 3, 5, 7}, s3[3] = {6, 5, 8};
    mf_tensor *q = mf_new(ctx, 4, s4), *bad_h = mf_new(ctx, 4, s4b), *k6 = mf_new(ctx, 4, s4k);
    mf_tensor *d7 = mf_new(ctx, 4, s4d), *x3 = mf_new(ctx, 3, s3), *ok;
    MFT_CHECK(mf_attention(ctx, x3, q, q, 1, 0, 0.0f) == NULL && strstr(mf_error(ctx), "4-D"));
    mf_clear_error(ctx);
    MFT_CHECK(mf_attention(ctx, q, bad_h, bad_h, 1, 0, 0.0f) == NULL && strstr(mf_error(ctx), "head"));
    mf_clear_error(ctx);
    MFT_CHECK(mf_attention(ctx, q, q, k6, 1, 0, 0.0f) == NULL && strstr(mf_error(ctx), "keys"));
    mf_clear_error(ctx);
    MFT_CHECK(mf_attention(ctx, q, d7, d7, 1, 0, 0.0f) == NULL && strstr(mf_error(ctx), "dk"));
    mf_clear_error(ctx);
    MFT_CHECK(mf_attention(ctx, q, q, q, NAN, 0, 0.0f) == NULL && strstr(mf_error(ctx), "scale"));
    mf_clear_error(ctx);
    MFT_CHECK(mf_attention(ctx, q, q, q, INFINITY, 0, 0.0f) == NULL && strstr(mf_error(ctx), "scale"));
    mf_clear_error(ctx);
    MFT_CHECK(mf_attention(ctx, q, NULL, q, 1, 0, 0.0f) == NULL && strstr(mf_error(ctx), "attention"));
    mf_clear_error(ctx);
    ok = mf_attention(ctx, q, k6, k6, 0.5f, 1, 0.0f); /* dv may differ from dk; Tk from Tq */
    MFT_CHECK(ok && ok->ndim == 4 && ok->shape[2] == 5 && ok->shape[3] == 8);
    /* token-major: [B, T, H, d]; q's H is its size 2 */
    MFT_CHECK(mf_attention_layout(ctx, q, k6, k6, 1, 0, 0.0f, MF_ATTN_TOKENS_MAJOR) == NULL &&
              strstr(mf_error(ctx), "head") && strstr(mf_error(ctx), "TOKENS_MAJOR"));
    mf_clear_error(ctx);
    MFT_CHECK(mf_attention_layout(ctx, q, q, q, 1, 0, 0.0f, (mf_attn_layout)2) == NULL && strstr(mf_error(ctx), "layout"));
    mf_clear_error(ctx);
    ok = mf_attention_layout(ctx, q, bad_h, bad_h, 0.5f, 1, 0.0f, MF_ATTN_TOKENS_MAJOR); /* 4 keys, 5 heads */
    MFT_CHECK(ok && ok->shape[1] == 3 && ok->shape[2] == 5 && ok->shape[3] == 8);
    mf_ctx_free(ctx);
}

int main(void) {
    MFT_RUN(test_forward_backward_match_composed);
    MFT_RUN(test_odd_head_sizes);
    MFT_RUN(test_fully_masked_rows_are_zero);
    MFT_RUN(test_finite_differences);
    MFT_RUN(test_memory_is_linear);
    MFT_RUN(test_deterministic);
    MFT_RUN(test_partial_grads);
    MFT_RUN(test_tokens_major_layout);
    MFT_RUN(test_shared_kv);
    MFT_RUN(test_shape_errors);
    return mft_finish();
}
