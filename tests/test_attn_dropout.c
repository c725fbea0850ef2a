/* Attention-probability dropout inside the fused kernels (docs/math.md §4.1): mf_attention against
   mf_softmax -> mf_dropout -> matmul composed from ops (the same mask: the same RNG stream and
   element index), mf_rel_attention and mf_feedback_attention against double references that draw
   the mask with mf__drop_keep, finite differences with dropout on, p = 0 and evaluation mode
   without any draw, the kept fraction on a large tensor, and the model's attn_dropout. */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#include "mf_test.h"
#include "model_grad.h"
#include <stdlib.h>
#include <string.h>

static void ad_fill(mf_tensor *t, uint64_t seed, float amp) {
    int64_t i;
    for (i = 0; i < t->ne; i++) t->data[i] = amp * (mft_uniform(seed, 5, (uint64_t)i) * 2.0f - 1.0f);
}
static mf_tensor *ad_param(mf_ctx *ctx, const char *name, int ndim, const int *shape, uint64_t seed, float amp) {
    mf_tensor *t = mf_param(ctx, name, ndim, shape);
    if (t) ad_fill(t, seed, amp);
    return t;
}

/* ---- mf_attention against the composed reference --------------------------------------------- */
typedef struct ad_case { int B, H, Tq, Tk, dk, dv, causal; float p; } ad_case;
typedef struct ad_io { mf_tensor *q, *k, *v, *out; } ad_io;

static ad_io ad_build(mf_ctx *ctx, ad_case c, int fused) {
    int sq[4] = {c.B, c.H, c.Tq, c.dk}, sk[4] = {c.B, c.H, c.Tk, c.dk}, sv[4] = {c.B, c.H, c.Tk, c.dv};
    int so[4] = {c.B, c.H, c.Tq, c.dv};
    float scale = 1.0f / sqrtf((float)c.dk);
    mf_tensor *W;
    ad_io io;
    io.q = ad_param(ctx, "q", 4, sq, 1, 1.5f); io.k = ad_param(ctx, "k", 4, sk, 2, 1.5f);
    io.v = ad_param(ctx, "v", 4, sv, 3, 1.0f);
    W = mf_new(ctx, 4, so);
    if (W) ad_fill(W, 4, 1.0f);
    if (fused) io.out = mf_attention(ctx, io.q, io.k, io.v, scale, c.causal, c.p);
    else
        io.out = mf_matmul(ctx, mf_dropout(ctx, mf_softmax(ctx, mf_scale(ctx, mf_matmul(ctx, io.q, io.k, 0, 1), scale),
                                                           c.causal), c.p), io.v, 0, 0);
    mf_backward(ctx, mf_sum(ctx, mf_mul(ctx, io.out, W)));
    return io;
}
static void ad_compare(ad_case c) {
    mf_ctx *cf = mf_ctx_new(9), *cr = mf_ctx_new(9);
    ad_io f = ad_build(cf, c, 1), r = ad_build(cr, c, 0);
    MFT_CHECK(mf_ok(cf) && mf_ok(cr));
    if (mf_ok(cf) && mf_ok(cr)) {
        double eo = mft_rel_err(f.out->data, r.out->data, f.out->ne, 1.0), eq = mft_rel_err(f.q->grad, r.q->grad, f.q->ne, 1.0);
        double ek = mft_rel_err(f.k->grad, r.k->grad, f.k->ne, 1.0), ev = mft_rel_err(f.v->grad, r.v->grad, f.v->ne, 1.0);
        printf("    B%d H%d Tq%d Tk%d dk%d dv%d causal %d p %.2f: out %.1e dq %.1e dk %.1e dv %.1e\n", c.B, c.H, c.Tq,
               c.Tk, c.dk, c.dv, c.causal, (double)c.p, eo, eq, ek, ev);
        MFT_CHECK(eo < 1e-5 && eq < 1e-5 && ek < 1e-5 && ev < 1e-5);
        MFT_CHECK(cf->rng_calls == (c.p > 0.0f ? 1u : 0u) && cr->rng_calls == cf->rng_calls);
    }
    mf_ctx_free(cf); mf_ctx_free(cr);
}
static void test_attention_matches_composed(void) {
    static const ad_case cases[] = {
        {2, 2, 9, 9, 8, 8, 1, 0.3f},     /* one tile, causal */
        {1, 3, 70, 70, 16, 12, 1, 0.1f}, /* two query and key tiles, a diagonal tile */
        {2, 1, 37, 90, 8, 8, 1, 0.5f},   /* memory keys (Tk > Tq) */
        {1, 2, 65, 130, 8, 4, 0, 0.25f}, /* no mask */
        {1, 1, 20, 20, 8, 8, 1, 0.0f},   /* p = 0 */
    };
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) ad_compare(cases[i]);
}
/* the whole-head and the split backward schedules draw the same masks */
static void test_attention_threads(void) {
    ad_case c = {1, 1, 130, 130, 8, 8, 1, 0.4f}; /* 1 thread: whole heads; 2: the split passes */
    mf_ctx *a = mf_ctx_new(5), *b = mf_ctx_new(5);
    ad_io x, y;
    mf_set_threads(a, 1); mf_set_threads(b, 2);
    x = ad_build(a, c, 1); y = ad_build(b, c, 1);
    MFT_CHECK(mf_ok(a) && mf_ok(b));
    if (mf_ok(a) && mf_ok(b)) {
        MFT_CHECK(memcmp(x.out->data, y.out->data, (size_t)x.out->ne * sizeof(float)) == 0);
        MFT_CHECK(memcmp(x.q->grad, y.q->grad, (size_t)x.q->ne * sizeof(float)) == 0);
        MFT_CHECK(memcmp(x.k->grad, y.k->grad, (size_t)x.k->ne * sizeof(float)) == 0);
        MFT_CHECK(memcmp(x.v->grad, y.v->grad, (size_t)x.v->ne * sizeof(float)) == 0);
    }
    mf_ctx_free(a); mf_ctx_free(b);
}

/* p = 0 and evaluation mode: bit-identical to no dropout, and no RNG draw */
static void test_no_dropout_paths(void) {
    ad_case c = {1, 2, 40, 40, 8, 8, 1, 0.0f};
    mf_ctx *a = mf_ctx_new(5), *b = mf_ctx_new(5);
    ad_io x, y;
    x = ad_build(a, c, 1);
    mf_set_training(b, 0);
    c.p = 0.5f;
    y = ad_build(b, c, 1);
    MFT_CHECK(mf_ok(a) && mf_ok(b) && b->rng_calls == 0 && a->rng_calls == 0);
    if (mf_ok(a) && mf_ok(b)) {
        MFT_CHECK(memcmp(x.out->data, y.out->data, (size_t)x.out->ne * sizeof(float)) == 0);
        MFT_CHECK(memcmp(x.q->grad, y.q->grad, (size_t)x.q->ne * sizeof(float)) == 0);
    }
    /* a bad p is an error naming the fix */
    MFT_CHECK(mf_attention(a, x.q, x.k, x.v, 1.0f, 1, 1.0f) == NULL && strstr(mf_error(a), "[0, 1)"));
    mf_clear_error(a);
    MFT_CHECK(mf_attention(a, x.q, x.k, x.v, 1.0f, 1, NAN) == NULL && strstr(mf_error(a), "dropout"));
    mf_ctx_free(a); mf_ctx_free(b);
}

/* q = 0: P uniform; v = the identity, so out[i][j] = mask_ij / (Tk (1 - p)): the kept fraction of
   a [1, 1, 512, 512] tensor is within 0.005 (5 standard deviations) of 1 - p, and the mask is
   mf_dropout's on a tensor of ones at the same RNG position */
static void test_kept_fraction(void) {
    enum { T = 512 };
    int sq[4] = {1, 1, T, 8}, sv[4] = {1, 1, T, T};
    mf_ctx *ctx = mf_ctx_new(21);
    mf_tensor *q = mf_new(ctx, 4, sq), *v = mf_new(ctx, 4, sv), *ones = mf_new(ctx, 4, sv), *out, *ref;
    float p = 0.3f;
    int64_t i, kept = 0, same = 0, scaled = 0;
    for (i = 0; v && ones && i < v->ne; i++) { v->data[i] = i / T == i % T; ones->data[i] = 1.0f; }
    out = mf_attention(ctx, q, q, v, 1.0f, 0, p);
    ctx->rng_calls = 0; /* mf_dropout at the op's RNG position */
    ref = mf_dropout(ctx, ones, p);
    MFT_CHECK(mf_ok(ctx));
    if (!mf_ok(ctx)) { mf_ctx_free(ctx); return; }
    for (i = 0; i < out->ne; i++) {
        kept += out->data[i] != 0.0f;
        same += (out->data[i] != 0.0f) == (ref->data[i] != 0.0f);
        scaled += out->data[i] == 0.0f || fabsf(out->data[i] * T * (1.0f - p) - 1.0f) < 1e-4f;
    }
    printf("    kept %.4f of %d (1 - p = %.2f)\n", (double)kept / (T * T), T * T, 1.0 - p);
    MFT_CHECK(fabs((double)kept / (T * T) - (1.0 - p)) < 0.005);
    MFT_CHECK(same == out->ne && scaled == out->ne);
    mf_ctx_free(ctx);
}

/* ---- relative and feedback attention against double references drawing the mask ------------- */
static double ad_worst(const float *a, const double *b, int64_t n) {
    double w = 0;
    int64_t i;
    for (i = 0; i < n; i++) if (fabs(a[i] - b[i]) > w) w = fabs(a[i] - b[i]);
    return w;
}
/* out[b][h][i] = sum_j keep_e P_ij / (1 - p) v_j, e = ((b H + h) Tq + i) Tk + j (stream 0) */
static void ad_drop_row(const double *P, int Tk, const float *v, int dv, int64_t e0, uint64_t seed, float p, double *o) {
    int j, c;
    for (c = 0; c < dv; c++) o[c] = 0;
    for (j = 0; j < Tk; j++)
        if (P[j] != 0.0 && mf__drop_keep(seed, 0, (uint64_t)(e0 + j), p))
            for (c = 0; c < dv; c++) o[c] += P[j] / (1.0 - p) * v[(int64_t)j * dv + c];
}
static void test_rel_attention_reference(void) {
    enum { B = 2, H = 2, Tq = 70, Tk = 100, dk = 8, dv = 6, P = 128 };
    int sq[4] = {B, H, Tq, dk}, sk[4] = {B, H, Tk, dk}, sv[4] = {B, H, Tk, dv}, su[2] = {H, dk};
    int sr[3] = {2 * P, H, dk}, ss[2] = {2 * P, H}, M = Tk - Tq, b, h, i, j, c;
    mf_ctx *ctx = mf_ctx_new(31);
    mf_tensor *q = ad_param(ctx, "q", 4, sq, 1, 1.5f), *k = ad_param(ctx, "k", 4, sk, 2, 1.5f);
    mf_tensor *v = ad_param(ctx, "v", 4, sv, 3, 1.0f), *u = ad_param(ctx, "u", 2, su, 4, 0.5f);
    mf_tensor *R = ad_param(ctx, "R", 3, sr, 5, 0.7f), *S = ad_param(ctx, "S", 2, ss, 6, 1.0f), *out;
    double scale = 1.0 / sqrt((double)dk), worst = 0, *ref;
    float p = 0.35f;
    out = mf_rel_attention(ctx, q, k, v, u, R, S, (float)scale, p);
    MFT_CHECK(mf_ok(ctx));
    if (!mf_ok(ctx)) { mf_ctx_free(ctx); return; }
    ref = (double *)malloc((size_t)out->ne * sizeof(double));
    for (b = 0; b < B; b++)
        for (h = 0; h < H; h++)
            for (i = 0; i < Tq; i++) {
                int64_t bh = (int64_t)b * H + h;
                double sc[Tk], mx = -1e300, sum = 0;
                const float *qi = q->data + (bh * Tq + i) * dk;
                for (j = 0; j < Tk; j++) {
                    int rho = P + j - i - M;
                    double a = S->data[(int64_t)rho * H + h];
                    if (j > i + M) { sc[j] = -1e300; continue; }
                    for (c = 0; c < dk; c++)
                        a += ((double)qi[c] + u->data[h * dk + c]) * k->data[(bh * Tk + j) * dk + c] +
                             (double)qi[c] * R->data[((int64_t)rho * H + h) * dk + c];
                    sc[j] = scale * a;
                    if (sc[j] > mx) mx = sc[j];
                }
                for (j = 0; j < Tk; j++) sum += sc[j] = j > i + M ? 0.0 : exp(sc[j] - mx);
                for (j = 0; j < Tk; j++) sc[j] /= sum;
                ad_drop_row(sc, Tk, v->data + bh * Tk * dv, dv, (bh * Tq + i) * Tk, ctx->seed, p, ref + (bh * Tq + i) * dv);
            }
    worst = ad_worst(out->data, ref, out->ne);
    printf("    rel_attention p %.2f: max |out - reference| %.2e\n", (double)p, worst);
    MFT_CHECK(worst < 2e-5);
    free(ref);
    mf_ctx_free(ctx);
}
static void test_feedback_attention_reference(void) {
    enum { B = 2, H = 3, d = 8, n = 40, P = 50 };
    int sq[3] = {B, H, d}, sk[4] = {B, H, n, d}, su[2] = {H, d}, sr[3] = {P, H, d}, ss[2] = {P, H}, b, h, j, c;
    mf_ctx *ctx = mf_ctx_new(41);
    mf_tensor *q = ad_param(ctx, "q", 3, sq, 1, 1.5f), *k = ad_param(ctx, "k", 4, sk, 2, 1.5f);
    mf_tensor *v = ad_param(ctx, "v", 4, sk, 3, 1.0f), *u = ad_param(ctx, "u", 2, su, 4, 0.5f);
    mf_tensor *r = ad_param(ctx, "r", 3, sr, 5, 0.7f), *s = ad_param(ctx, "s", 2, ss, 6, 1.0f), *out;
    double worst, *ref;
    float p = 0.4f;
    out = mf_feedback_attention(ctx, q, k, v, u, r, s, 0.37f, p);
    MFT_CHECK(mf_ok(ctx));
    if (!mf_ok(ctx)) { mf_ctx_free(ctx); return; }
    ref = (double *)malloc((size_t)out->ne * sizeof(double));
    for (b = 0; b < B; b++)
        for (h = 0; h < H; h++) {
            int64_t bh = (int64_t)b * H + h;
            double sc[n], mx = -1e300, sum = 0;
            const float *qb = q->data + bh * d;
            for (j = 0; j < n; j++) {
                double a = s->data[(int64_t)(P - n + j) * H + h];
                for (c = 0; c < d; c++)
                    a += ((double)qb[c] + u->data[h * d + c]) * k->data[(bh * n + j) * d + c] +
                         (double)qb[c] * r->data[((int64_t)(P - n + j) * H + h) * d + c];
                sc[j] = 0.37 * a;
                if (sc[j] > mx) mx = sc[j];
            }
            for (j = 0; j < n; j++) sum += sc[j] = exp(sc[j] - mx);
            for (j = 0; j < n; j++) sc[j] /= sum;
            ad_drop_row(sc, n, v->data + bh * n * d, d, bh * n, ctx->seed, p, ref + bh * d);
        }
    worst = ad_worst(out->data, ref, out->ne);
    printf("    feedback_attention p %.2f: max |out - reference| %.2e\n", (double)p, worst);
    MFT_CHECK(worst < 2e-5);
    free(ref);
    mf_ctx_free(ctx);
}

/* ---- finite differences with dropout on: every evaluation is a fresh context, so the op takes
   RNG stream 0 each time and the mask is fixed ---------------------------------------------------- */
static mf_tensor *gc_attn(mf_ctx *ctx, mf_tensor **in, void *user) {
    return mf_attention(ctx, in[0], in[1], in[2], 0.5f, *(int *)user, 0.3f);
}
static mf_tensor *gc_rel(mf_ctx *ctx, mf_tensor **in, void *user) {
    (void)user;
    return mf_rel_attention(ctx, in[0], in[1], in[2], in[3], in[4], in[5], 0.5f, 0.3f);
}
static mf_tensor *gc_fba(mf_ctx *ctx, mf_tensor **in, void *user) {
    (void)user;
    return mf_feedback_attention(ctx, in[0], in[1], in[2], in[3], in[4], in[5], 0.5f, 0.3f);
}
static void test_gradcheck(void) {
    gc_spec a[3], r[6], f[6];
    int causal = 1, full = 0;
    a[0] = gc_in(4, 1, 2, 5, 3); a[1] = gc_in(4, 1, 2, 7, 3); a[2] = gc_in(4, 1, 2, 7, 2);
    MFT_CHECK(GC_OK(gc_check("attention causal p 0.3", 3, a, gc_attn, &causal, NULL)));
    MFT_CHECK(GC_OK(gc_check("attention full p 0.3", 3, a, gc_attn, &full, NULL)));
    r[0] = gc_in(4, 1, 2, 4, 3); r[1] = gc_in(4, 1, 2, 6, 3); r[2] = gc_in(4, 1, 2, 6, 2);
    r[3] = gc_in(2, 2, 3, 0, 0); r[4] = gc_in(3, 16, 2, 3, 0); r[5] = gc_in(2, 16, 2, 0, 0);
    MFT_CHECK(GC_OK(gc_check("rel_attention p 0.3", 6, r, gc_rel, NULL, NULL)));
    f[0] = gc_in(3, 2, 2, 3, 0); f[1] = gc_in(4, 2, 2, 5, 3); f[2] = gc_in(4, 2, 2, 5, 3);
    f[3] = gc_in(2, 2, 3, 0, 0); f[4] = gc_in(3, 6, 2, 3, 0); f[5] = gc_in(2, 6, 2, 0, 0);
    MFT_CHECK(GC_OK(gc_check("feedback_attention p 0.3", 6, f, gc_fba, NULL, NULL)));
}

/* ---- the model's attn_dropout ------------------------------------------------------------------ */
static void test_model_gradients(void) {
    static const mf_mixer_kind mixers[] = {MF_MIXER_SDPA, MF_MIXER_METRIC, MF_MIXER_RELATIVE, MF_MIXER_FEEDBACK};
    size_t i;
    for (i = 0; i < sizeof mixers / sizeof mixers[0]; i++) {
        mg_case c;
        memset(&c, 0, sizeof c);
        c.cfg = mg_tiny(mixers[i]);
        c.cfg.attn_dropout = 0.3f;
        if (mixers[i] == MF_MIXER_RELATIVE) c.cfg.mem_len = 3;
        MFT_CHECK(mg_check_loss(mf_mixer_name(mixers[i]), "loss + attn_dropout", &c, 4));
        mf_model_free(c.model);
    }
}
/* training mode with attn_dropout changes the loss; evaluation mode is the model without it */
static float ad_model_loss(mf_mixer_kind mixer, float p, int training) {
    mf_ctx *ctx = mf_ctx_new(3);
    mf_model_config cfg = mg_tiny(mixer);
    mf_model *m;
    float l = -1.0f;
    mf_tensor *loss;
    cfg.attn_dropout = p;
    m = mf_model_new(ctx, &cfg);
    mf_set_training(ctx, training);
    loss = mf_model_loss(m, mg_ids, mg_targets, MG_B, MG_T);
    if (loss && mf_ok(ctx)) l = loss->data[0];
    mf_model_free(m);
    mf_ctx_free(ctx);
    return l;
}
static void test_model_modes(void) {
    static const mf_mixer_kind mixers[] = {MF_MIXER_SDPA, MF_MIXER_QUADRATIC, MF_MIXER_RELATIVE, MF_MIXER_FEEDBACK_KV};
    mf_model_config cfg;
    mf_ctx *ctx = mf_ctx_new(1);
    size_t i;
    for (i = 0; i < sizeof mixers / sizeof mixers[0]; i++) {
        float base = ad_model_loss(mixers[i], 0.0f, 1), drop = ad_model_loss(mixers[i], 0.5f, 1);
        float eval = ad_model_loss(mixers[i], 0.5f, 0), eval0 = ad_model_loss(mixers[i], 0.0f, 0);
        MFT_CHECK(base > 0 && drop > 0 && drop != base);
        MFT_CHECK(eval == eval0 && eval == base); /* no other dropout: training == evaluation at p = 0 */
    }
    cfg = mg_tiny(MF_MIXER_POOL);
    cfg.attn_dropout = 0.1f;
    MFT_CHECK(mf_model_check(ctx, &cfg) < 0 && strstr(mf_error(ctx), "attn_dropout") && strstr(mf_error(ctx), "sdpa"));
    mf_clear_error(ctx);
    cfg = mg_tiny(MF_MIXER_SDPA);
    cfg.attn_dropout = 1.0f;
    MFT_CHECK(mf_model_check(ctx, &cfg) < 0 && strstr(mf_error(ctx), "[0, 1)"));
    mf_ctx_free(ctx);
}

int main(void) {
    MFT_RUN(test_attention_matches_composed);
    MFT_RUN(test_attention_threads);
    MFT_RUN(test_no_dropout_paths);
    MFT_RUN(test_kept_fraction);
    MFT_RUN(test_rel_attention_reference);
    MFT_RUN(test_feedback_attention_reference);
    MFT_RUN(test_gradcheck);
    MFT_RUN(test_model_gradients);
    MFT_RUN(test_model_modes);
    return mft_finish();
}
