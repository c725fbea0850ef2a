/* Transformer-XL relative attention (mf_rel_attention), segment memories and the compressive
   transformer (docs/math.md §5, §6): the fused op against a naive double reference and finite
   differences, PyTorch parity over consecutive segments (tests/goldens/xl_*.safetensors, written by
   tests/parity/goldens_xl.py), memory semantics, generation, gradient routing and config errors. */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#include "mf_test.h"
#include "gradcheck.h"
#include "golden.h"
#include <stdlib.h>
#include <string.h>

/* ---- the op against a naive reference --------------------------------------------------------- */
typedef struct ra_case { int B, H, Tq, Tk, dk, dv, P; } ra_case;
typedef struct ra_io { mf_tensor *q, *k, *v, *u, *R, *S, *out, *loss; } ra_io;

static float ra_unif(uint64_t seed, uint64_t i) { return mf__uniform(seed, 3, i) * 2.0f - 1.0f; }
static void ra_fill(mf_tensor *t, uint64_t seed, float amp) {
    int64_t i;
    for (i = 0; i < t->ne; i++) t->data[i] = amp * ra_unif(seed, (uint64_t)i);
}

/* q, k, v, u, R, S as parameters with seeded values (u, R, S non-zero: the tables matter) and the
   loss sum(out * W) for a fixed random W */
static ra_io ra_build(mf_ctx *ctx, ra_case c, const float *W) {
    int sq[4] = {c.B, c.H, c.Tq, c.dk}, sk[4] = {c.B, c.H, c.Tk, c.dk}, sv[4] = {c.B, c.H, c.Tk, c.dv};
    int su[2] = {c.H, c.dk}, sr[3] = {2 * c.P, c.H, c.dk}, ss[2] = {2 * c.P, c.H}, so[4] = {c.B, c.H, c.Tq, c.dv};
    ra_io io;
    memset(&io, 0, sizeof io);
    if (!(io.q = mf_param_find(ctx, "q"))) {
        io.q = mf_param(ctx, "q", 4, sq); io.k = mf_param(ctx, "k", 4, sk); io.v = mf_param(ctx, "v", 4, sv);
        io.u = mf_param(ctx, "u", 2, su); io.R = mf_param(ctx, "R", 3, sr); io.S = mf_param(ctx, "S", 2, ss);
        if (!mf_ok(ctx)) return io;
        ra_fill(io.q, 1, 1.5f); ra_fill(io.k, 2, 1.5f); ra_fill(io.v, 3, 1.0f);
        ra_fill(io.u, 4, 0.5f); ra_fill(io.R, 5, 0.7f); ra_fill(io.S, 6, 1.0f);
    } else {
        io.k = mf_param_find(ctx, "k"); io.v = mf_param_find(ctx, "v"); io.u = mf_param_find(ctx, "u");
        io.R = mf_param_find(ctx, "R"); io.S = mf_param_find(ctx, "S");
    }
    io.out = mf_rel_attention(ctx, io.q, io.k, io.v, io.u, io.R, io.S, 1.0f / sqrtf((float)c.dk), 0.0f);
    io.loss = W ? mf_sum(ctx, mf_mul(ctx, io.out, mf_from(ctx, 4, so, W))) : NULL;
    return io;
}

/* docs/math.md §5.2 literally, in double: out and the gradients of sum(out * W) */
typedef struct ra_ref { double *out, *gq, *gk, *gv, *gu, *gR, *gS; } ra_ref;
static ra_ref ra_reference(ra_case c, const ra_io *io, const float *W) {
    int M = c.Tk - c.Tq, b, h, i, j, e;
    double scale = 1.0 / sqrt((double)c.dk), *p = (double *)malloc((size_t)c.Tk * sizeof(double));
    double *dp = (double *)malloc((size_t)c.Tk * sizeof(double));
    ra_ref r;
    r.out = (double *)calloc((size_t)io->out->ne, sizeof(double));
    r.gq = (double *)calloc((size_t)io->q->ne, sizeof(double)); r.gk = (double *)calloc((size_t)io->k->ne, sizeof(double));
    r.gv = (double *)calloc((size_t)io->v->ne, sizeof(double)); r.gu = (double *)calloc((size_t)io->u->ne, sizeof(double));
    r.gR = (double *)calloc((size_t)io->R->ne, sizeof(double)); r.gS = (double *)calloc((size_t)io->S->ne, sizeof(double));
    for (b = 0; b < c.B; b++)
        for (h = 0; h < c.H; h++)
            for (i = 0; i < c.Tq; i++) {
                int64_t bh = (int64_t)b * c.H + h;
                const float *qi = io->q->data + (bh * c.Tq + i) * c.dk, *u = io->u->data + (int64_t)h * c.dk;
                const float *w = W + (bh * c.Tq + i) * c.dv;
                double mx = -1e300, sum = 0, pd = 0;
                int nvis = i + M + 1;
                for (j = 0; j < nvis; j++) {
                    const float *kj = io->k->data + (bh * c.Tk + j) * c.dk;
                    int rho = c.P + j - i - M;
                    const float *rr = io->R->data + ((int64_t)rho * c.H + h) * c.dk;
                    double s = io->S->data[(int64_t)rho * c.H + h];
                    for (e = 0; e < c.dk; e++) s += (qi[e] + (double)u[e]) * kj[e] + (double)qi[e] * rr[e];
                    p[j] = s * scale;
                    if (p[j] > mx) mx = p[j];
                }
                for (j = 0; j < nvis; j++) { p[j] = exp(p[j] - mx); sum += p[j]; }
                for (j = 0; j < nvis; j++) {
                    const float *vj = io->v->data + (bh * c.Tk + j) * c.dv;
                    p[j] /= sum;
                    dp[j] = 0;
                    for (e = 0; e < c.dv; e++) {
                        r.out[(bh * c.Tq + i) * c.dv + e] += p[j] * vj[e];
                        dp[j] += (double)w[e] * vj[e];
                        r.gv[(bh * c.Tk + j) * c.dv + e] += p[j] * w[e];
                    }
                    pd += p[j] * dp[j];
                }
                for (j = 0; j < nvis; j++) {
                    double ds = p[j] * (dp[j] - pd) * scale;
                    int rho = c.P + j - i - M;
                    const float *kj = io->k->data + (bh * c.Tk + j) * c.dk;
                    const float *rr = io->R->data + ((int64_t)rho * c.H + h) * c.dk;
                    for (e = 0; e < c.dk; e++) {
                        r.gq[(bh * c.Tq + i) * c.dk + e] += ds * ((double)kj[e] + rr[e]);
                        r.gk[(bh * c.Tk + j) * c.dk + e] += ds * ((double)qi[e] + u[e]);
                        r.gu[(int64_t)h * c.dk + e] += ds * kj[e];
                        r.gR[((int64_t)rho * c.H + h) * c.dk + e] += ds * qi[e];
                    }
                    r.gS[(int64_t)rho * c.H + h] += ds;
                }
            }
    free(p); free(dp);
    return r;
}
static void ra_ref_free(ra_ref *r) { free(r->out); free(r->gq); free(r->gk); free(r->gv); free(r->gu); free(r->gR); free(r->gS); }

/* mft_rel_err(a, b, n, 1) for a reference of doubles (mft_rel_err takes float references) */
static double ra_err(const float *a, const double *b, int64_t n) {
    double num = 0, den = 1;
    int64_t i;
    for (i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d != d) return d;
        if (d > num) num = d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return num / den;
}

static float *ra_weights(int64_t n, uint64_t seed) {
    float *w = (float *)malloc((size_t)n * sizeof(float));
    int64_t i;
    for (i = 0; i < n; i++) w[i] = ra_unif(seed, (uint64_t)i);
    return w;
}

static void ra_compare(ra_case c, int threads) {
    mf_ctx *ctx = mf_ctx_new(3);
    int64_t no = (int64_t)c.B * c.H * c.Tq * c.dv;
    float *W = ra_weights(no, 9);
    ra_io io;
    mf_set_threads(ctx, threads);
    io = ra_build(ctx, c, W);
    MFT_CHECK(mf_ok(ctx) && mf_backward(ctx, io.loss) == 0);
    if (mf_ok(ctx)) {
        ra_ref r = ra_reference(c, &io, W);
        double e[7];
        int i, bad = 0;
        e[0] = ra_err(io.out->data, r.out, no);
        e[1] = ra_err(io.q->grad, r.gq, io.q->ne); e[2] = ra_err(io.k->grad, r.gk, io.k->ne);
        e[3] = ra_err(io.v->grad, r.gv, io.v->ne); e[4] = ra_err(io.u->grad, r.gu, io.u->ne);
        e[5] = ra_err(io.R->grad, r.gR, io.R->ne); e[6] = ra_err(io.S->grad, r.gS, io.S->ne);
        for (i = 0; i < 7; i++) bad |= !(e[i] <= 2e-5);
        if (bad) printf("    B%d H%d Tq%d Tk%d dk%d dv%d P%d: out %.2e dq %.2e dk %.2e dv %.2e du %.2e dR %.2e dS %.2e\n",
                        c.B, c.H, c.Tq, c.Tk, c.dk, c.dv, c.P, e[0], e[1], e[2], e[3], e[4], e[5], e[6]);
        MFT_CHECK(!bad);
        ra_ref_free(&r);
    } else printf("    %s\n", mf_error(ctx));
    free(W);
    mf_ctx_free(ctx);
}

static void test_rel_matches_reference(void) {
    static const int Tqs[] = {1, 7, 64, 65, 130};
    static const int Ms[] = {0, 1, 9, 64, 70};
    int a, b;
    for (a = 0; a < 5; a++)
        for (b = 0; b < 5; b++) {
            ra_case c;
            c.B = 2; c.H = 3; c.Tq = Tqs[a]; c.Tk = Tqs[a] + Ms[b]; c.dk = 16; c.dv = 24; c.P = 256;
            ra_compare(c, 0);
        }
    {
        ra_case c1 = {1, 2, 33, 40, 7, 5, 40}, c2 = {2, 1, 100, 200, 32, 32, 200}, c3 = {1, 1, 3, 3, 1, 1, 3};
        ra_compare(c1, 0); ra_compare(c2, 0); ra_compare(c2, 1); ra_compare(c3, 1);
    }
}

/* finite differences (gradcheck.h) of every input, u, R and S non-zero; with and without memory */
typedef struct { int P; } ra_user;
static mf_tensor *ra_gc_build(mf_ctx *ctx, mf_tensor **in, void *user) {
    (void)user;
    return mf_rel_attention(ctx, in[0], in[1], in[2], in[3], in[4], in[5], 1.0f / sqrtf((float)in[0]->shape[3]), 0.0f);
}
static void ra_gradcheck(const char *name, int B, int H, int Tq, int Tk, int dk, int dv, int P) {
    gc_spec s[6];
    s[0] = gc_in(4, B, H, Tq, dk); s[1] = gc_in(4, B, H, Tk, dk); s[2] = gc_in(4, B, H, Tk, dv);
    s[3] = gc_range(gc_in(2, H, dk, 0, 0), -0.5f, 0.5f, 0); s[4] = gc_in(3, 2 * P, H, dk, 0);
    s[5] = gc_range(gc_in(2, 2 * P, H, 0, 0), -2, 2, 0);
    MFT_CHECK(GC_OK(gc_check(name, 6, s, ra_gc_build, NULL, NULL)));
}
static void test_rel_finite_differences(void) {
    ra_gradcheck("rel no memory", 2, 2, 4, 4, 3, 2, 5);
    ra_gradcheck("rel memory", 1, 2, 3, 7, 3, 4, 8);
    ra_gradcheck("rel Tk = P", 2, 1, 2, 5, 2, 3, 5);
}

/* rows of R and S outside P - Tk + 1 .. P are never visible: exactly zero gradient; the visible
   ones all get some */
static void test_rel_invisible_rows_get_no_gradient(void) {
    ra_case c = {2, 2, 3, 5, 4, 3, 8};
    mf_ctx *ctx = mf_ctx_new(4);
    float *W = ra_weights((int64_t)c.B * c.H * c.Tq * c.dv, 5);
    ra_io io = ra_build(ctx, c, W);
    int rho, h, e, zero_out = 1, nonzero_in = 1;
    MFT_CHECK(mf_backward(ctx, io.loss) == 0);
    for (rho = 0; rho < 2 * c.P; rho++)
        for (h = 0; h < c.H; h++) {
            int vis = rho >= c.P - c.Tk + 1 && rho <= c.P;
            float gs = io.S->grad[rho * c.H + h];
            for (e = 0; e < c.dk; e++) {
                float g = io.R->grad[(rho * c.H + h) * c.dk + e];
                if (vis) nonzero_in &= g != 0.0f; else zero_out &= g == 0.0f;
            }
            if (vis) nonzero_in &= gs != 0.0f; else zero_out &= gs == 0.0f;
        }
    MFT_CHECK(zero_out);
    MFT_CHECK(nonzero_in);
    free(W);
    mf_ctx_free(ctx);
}

/* gradients are bit-identical between runs and thread counts */
static void ra_grads(ra_case c, int threads, float **g, int64_t *n) {
    mf_ctx *ctx = mf_ctx_new(8);
    float *W = ra_weights((int64_t)c.B * c.H * c.Tq * c.dv, 6);
    ra_io io;
    mf_set_threads(ctx, threads);
    io = ra_build(ctx, c, W);
    MFT_CHECK(mf_backward(ctx, io.loss) == 0);
    *n = mf_param_count(ctx) + io.out->ne;
    *g = (float *)malloc((size_t)*n * sizeof(float));
    memcpy(*g, mf_param_grads(ctx), (size_t)mf_param_count(ctx) * sizeof(float));
    memcpy(*g + mf_param_count(ctx), io.out->data, (size_t)io.out->ne * sizeof(float));
    free(W);
    mf_ctx_free(ctx);
}
static void test_rel_deterministic(void) {
    ra_case c = {2, 3, 100, 170, 16, 8, 256};
    float *a, *b, *s;
    int64_t n;
    ra_grads(c, 2, &a, &n); ra_grads(c, 2, &b, &n); ra_grads(c, 1, &s, &n);
    MFT_CHECK(memcmp(a, b, (size_t)n * sizeof(float)) == 0);
    MFT_CHECK(memcmp(a, s, (size_t)n * sizeof(float)) == 0);
    free(a); free(b); free(s);
}

/* the call failed and the message names what */
static void expect_fail(mf_ctx *ctx, const void *result, const char *what) {
    MFT_CHECK(result == NULL && strstr(mf_error(ctx), what) != NULL);
    if (!strstr(mf_error(ctx), what)) printf("    expected \"%s\" in: %s\n", what, mf_error(ctx));
    mf_clear_error(ctx);
}

static void test_rel_shape_errors(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    int sq[4] = {2, 3, 5, 4}, sk[4] = {2, 3, 7, 4}, sk2[4] = {2, 3, 3, 4}, su[2] = {3, 4}, sub[2] = {2, 4};
    int sr[3] = {16, 3, 4}, srodd[3] = {15, 3, 4}, ss[2] = {16, 3}, ssb[2] = {16, 2}, srs[3] = {12, 3, 4}, sss[2] = {12, 3};
    mf_tensor *q = mf_new(ctx, 4, sq), *k = mf_new(ctx, 4, sk), *k2 = mf_new(ctx, 4, sk2), *u = mf_new(ctx, 2, su);
    mf_tensor *ub = mf_new(ctx, 2, sub), *R = mf_new(ctx, 3, sr), *Rodd = mf_new(ctx, 3, srodd), *S = mf_new(ctx, 2, ss);
    mf_tensor *Sb = mf_new(ctx, 2, ssb), *Rs = mf_new(ctx, 3, srs), *Ss = mf_new(ctx, 2, sss), *ok;
    expect_fail(ctx, mf_rel_attention(ctx, q, k, k, ub, R, S, 0.5f, 0.0f), "u");
    expect_fail(ctx, mf_rel_attention(ctx, q, k, k, u, Rodd, S, 0.5f, 0.0f), "R");
    expect_fail(ctx, mf_rel_attention(ctx, q, k, k, u, R, Sb, 0.5f, 0.0f), "S");
    expect_fail(ctx, mf_rel_attention(ctx, q, k2, k2, u, R, S, 0.5f, 0.0f), "Tk >= Tq");
    expect_fail(ctx, mf_rel_attention(ctx, q, k, k, u, Rs, Ss, 0.5f, 0.0f), "relative positions");
    expect_fail(ctx, mf_rel_attention(ctx, q, k, NULL, u, R, S, 0.5f, 0.0f), "rel_attention");
    expect_fail(ctx, mf_rel_attention(ctx, q, k, k, u, R, NULL, 0.5f, 0.0f), "rel_attention");
    expect_fail(ctx, mf_rel_attention(ctx, q, k, k, u, R, S, NAN, 0.0f), "scale");
    ok = mf_rel_attention(ctx, q, k, k, u, R, S, 0.5f, 0.0f);
    MFT_CHECK(ok && ok->ndim == 4 && ok->shape[2] == 5 && ok->shape[3] == 4);
    mf_ctx_free(ctx);
}

/* ---- the model: tiny configs, non-zero tables, segments -------------------------------------- */
enum { XV = 11 };

static mf_model_config xl_tiny(int mem_len, int compressive) {
    mf_model_config c = mf_model_config_default();
    c.vocab = XV; c.d_model = 8; c.n_heads = 2; c.n_layers = 2; c.d_ff = 12; c.max_seq = 8;
    c.mixer = MF_MIXER_RELATIVE; c.pos = MF_POS_NONE; c.ffn_act = MF_ACT_GELU;
    c.mem_len = mem_len; c.compressive = compressive; c.c_mem_len = 3; c.compression_rate = 2;
    return c;
}

/* u, R and S start at zero (docs/math.md §5.1); give them values (R, S on the rows near P) so they matter */
static void xl_tables(mf_model *m, uint64_t seed) {
    const mf_model_config *c = mf_model_get_config(m);
    int l, H = c->n_heads, dk = c->d_model / c->n_heads;
    for (l = 0; l < c->n_layers; l++) {
        char nm[64];
        mf_tensor *u, *R, *S;
        int64_t i, lo = (int64_t)(MF_XL_P - 24) * H, hi = (int64_t)(MF_XL_P + 8) * H;
        snprintf(nm, sizeof nm, "layers.%d.attn.u", l); u = mf_param_find(m->ctx, nm);
        snprintf(nm, sizeof nm, "layers.%d.attn.r", l); R = mf_param_find(m->ctx, nm);
        snprintf(nm, sizeof nm, "layers.%d.attn.s", l); S = mf_param_find(m->ctx, nm);
        if (!u || !R || !S) return;
        ra_fill(u, seed + 10 * l, 0.5f);
        for (i = lo * dk; i < hi * dk; i++) R->data[i] = 0.5f * ra_unif(seed + 10 * l + 1, (uint64_t)i);
        for (i = lo; i < hi; i++) S->data[i] = ra_unif(seed + 10 * l + 2, (uint64_t)i);
    }
}

/* the ids and targets of segment s (B x T, row-major); a few targets are -1 */
static void xl_segment(int s, int B, int T, int32_t *ids, int32_t *tg) {
    int b, t;
    for (b = 0; b < B; b++)
        for (t = 0; t < T; t++) {
            ids[b * T + t] = (7 * s + 3 * b + 5 * t + 1 + (s * t) % 3) % XV;
            tg[b * T + t] = (t + s) % 5 == 4 ? -1 : (11 * s + 2 * b + 3 * t + 4) % XV;
        }
}

/* A model evaluated on segment n_prime after n_prime earlier segments that fill the memories. For
   the gradient checks the earlier segments run with the parameters theta0 of setup (not the
   checker's theta), so the memories are constants there as in the model's math (sg). */
typedef struct xl_case {
    mf_model_config cfg;
    mf_model *model;
    int B, T, n_prime;
    int what;          /* 0 logits, 1 loss (CE + AR), 2 the AR loss alone */
    int only_cmp;      /* freeze every parameter but the compressors */
    int no_tables;     /* freeze R and S (elementwise checks: most of their rows are invisible) */
    float *theta0;
    int64_t n_theta;
} xl_case;

static int xl_setup(mf_ctx *ctx, void *user) {
    xl_case *c = (xl_case *)user;
    int i;
    mf_model_free(c->model);
    mf_set_threads(ctx, 1); /* tiny graphs */
    c->model = mf_model_new(ctx, &c->cfg);
    if (!c->model) return -1;
    xl_tables(c->model, 77);
    for (i = 0; i < mf_param_tensors(ctx); i++) {
        mf_tensor *p = mf_param_at(ctx, i);
        int cmp = strstr(p->name, ".compress.") != NULL, tab = strstr(p->name, ".attn.r") || strstr(p->name, ".attn.s");
        if ((c->only_cmp && !cmp) || (c->no_tables && tab)) mf_param_set_trainable(p, 0);
    }
    if (!c->theta0) {
        c->n_theta = mf_param_count(ctx);
        c->theta0 = (float *)malloc((size_t)c->n_theta * sizeof(float));
        memcpy(c->theta0, mf_param_data(ctx), (size_t)c->n_theta * sizeof(float));
    }
    return 0;
}
static mf_tensor *xl_forward(mf_ctx *ctx, void *user) {
    xl_case *c = (xl_case *)user;
    int32_t ids[64], tg[64];
    float *theta = (float *)malloc((size_t)c->n_theta * sizeof(float));
    int s, grad;
    mf_tensor *out;
    memcpy(theta, mf_param_data(ctx), (size_t)c->n_theta * sizeof(float));
    memcpy(mf_param_data(ctx), c->theta0, (size_t)c->n_theta * sizeof(float));
    grad = mf_set_grad(ctx, 0);
    for (s = 0; s < c->n_prime; s++) {
        xl_segment(s, c->B, c->T, ids, tg);
        mf_model_forward(c->model, ids, c->B, c->T);
    }
    mf_set_grad(ctx, grad);
    memcpy(mf_param_data(ctx), theta, (size_t)c->n_theta * sizeof(float));
    free(theta);
    xl_segment(c->n_prime, c->B, c->T, ids, tg);
    if (c->what == 1) return mf_model_loss(c->model, ids, tg, c->B, c->T);
    out = mf_model_forward(c->model, ids, c->B, c->T);
    return c->what == 2 ? mf__xl_aux_loss(c->model) : out;
}

static void xl_check(const char *name, xl_case c, int elementwise) {
    gc_opts o = gc_defaults();
    o.max_per_input = GC_MODEL_SAMPLE(24); /* every evaluation builds a model with 2 x 8192-row tables: sample */
    if (elementwise) MFT_CHECK(GC_OK(gc_check_params(name, xl_setup, xl_forward, &c, &o)));
    else MFT_CHECK(GC_OK(gc_check_dir(name, xl_setup, xl_forward, &c, 6, &o)));
    mf_model_free(c.model);
    free(c.theta0);
}

/* gradient checks of the whole model: without memory, with XL memories, compressive (the logits
   through the compressed memories; the AR loss into the compressors) */
static void test_model_gradients(void) {
    xl_case c;
    memset(&c, 0, sizeof c);
    c.B = 2; c.T = 3;
    c.cfg = xl_tiny(0, 0); c.cfg.pos = MF_POS_LEARNED; c.no_tables = 1;
    xl_check("relative logits", c, 1);
    c.no_tables = 0; c.what = 1; c.cfg.dropout = 0.2f;
    xl_check("relative loss + dropout (directional)", c, 0);
    c.cfg = xl_tiny(4, 0); c.n_prime = 2; c.what = 0; c.no_tables = 1;
    xl_check("xl logits with memory", c, 1);
    c.no_tables = 0; c.what = 1;
    xl_check("xl loss with memory (directional)", c, 0);
    c.cfg = xl_tiny(4, 1); c.what = 0; c.no_tables = 1; /* segments of 3, mem_len 4: the third compresses */
    xl_check("compressive logits with memory", c, 1);
    c.no_tables = 0;
    xl_check("compressive logits (directional)", c, 0);
    c.what = 2; c.only_cmp = 1;
    xl_check("compressive AR loss -> compressors", c, 1);
}

/* a model on its own single-threaded context, tables filled */
static mf_model *xl_model(mf_ctx **ctx, const mf_model_config *cfg, uint64_t seed) {
    mf_model *m;
    *ctx = mf_ctx_new(seed);
    mf_set_threads(*ctx, 1);
    m = mf_model_new(*ctx, cfg);
    MFT_CHECK(m != NULL);
    if (!m) printf("    %s\n", mf_error(*ctx));
    else xl_tables(m, seed);
    return m;
}

/* segment A then segment B with memory = the B positions of one forward over [A ; B] (memory
   fully visible, relative positions continue); reset and the two slots are independent */
static void test_memory_continues_the_sequence(void) {
    enum { B = 2, TA = 5, TB = 3, T = TA + TB };
    mf_model_config cfg = xl_tiny(8, 0);
    mf_ctx *ctx;
    mf_model *m = xl_model(&ctx, &cfg, 5);
    int32_t ab[B * T], a[B * TA], b[B * TB], tg[B * T];
    float segB[B * TB * XV], fresh[B * TB * XV];
    mf_tensor *lo;
    int i, t;
    if (!m) { mf_ctx_free(ctx); return; }
    xl_segment(0, B, T, ab, tg);
    for (i = 0; i < B; i++)
        for (t = 0; t < T; t++) {
            if (t < TA) a[i * TA + t] = ab[i * T + t]; else b[i * TB + t - TA] = ab[i * T + t];
        }
    mf_set_grad(ctx, 0);
    MFT_CHECK(mf_model_forward(m, a, B, TA) != NULL);
    lo = mf_model_forward(m, b, B, TB);
    MFT_CHECK(lo != NULL);
    if (lo) memcpy(segB, lo->data, sizeof segB);
    MFT_CHECK(mf_model_memory_slot(m, 1) == 0); /* slot 1: empty, one forward over [A ; B] */
    lo = mf_model_forward(m, ab, B, T);
    MFT_CHECK(lo != NULL);
    for (i = 0; lo && i < B; i++) {
        double e = mft_rel_err(segB + i * TB * XV, lo->data + ((int64_t)i * T + TA) * XV, TB * XV, 1e-6);
        if (!(e <= 1e-5)) printf("    row %d: segment B with memory vs full forward: rel err %.3g\n", i, e);
        MFT_CHECK(e <= 1e-5);
    }
    /* reset: B alone from an empty memory, the same in either slot */
    mf_model_reset_memory(m);
    lo = mf_model_forward(m, b, B, TB);
    if (lo) memcpy(fresh, lo->data, sizeof fresh);
    MFT_CHECK(mf_model_memory_slot(m, 0) == 1);
    mf_model_reset_memory(m);
    lo = mf_model_forward(m, b, B, TB);
    MFT_CHECK(lo && memcmp(lo->data, fresh, sizeof fresh) == 0);
    MFT_CHECK(lo && mft_rel_err(segB, fresh, B * TB * XV, 1e-6) > 1e-3); /* the memory did matter */
    MFT_CHECK(mf_model_memory_slot(m, 2) == -1 && mf_model_memory_slot(m, -1) == -1);
    /* the batch size is fixed while a slot holds memories */
    MFT_CHECK(mf_model_forward(m, b, 1, TB) == NULL);
    MFT_CHECK(strstr(mf_error(ctx), "mf_model_reset_memory") != NULL);
    mf_clear_error(ctx);
    mf_model_reset_memory(m);
    MFT_CHECK(mf_model_forward(m, b, 1, TB) != NULL);
    MFT_CHECK(mf_ok(ctx));
    mf_model_free(m);
    mf_ctx_free(ctx);
}

static int xl_argmax(const float *row, int V) {
    int v, best = 0;
    for (v = 1; v < V; v++) if (row[v] > row[best]) best = v;
    return best;
}

/* greedy generation = the memory path fed the same tokens: the prompt with an empty memory, then
   one token per call (mf_model_forward on slot 1, B = 1). ref_cfg: the reference model's config
   (another context, same seed: the same weights). */
static void xl_generate_check(const char *what, const mf_model_config *cfg, const mf_model_config *ref_cfg) {
    enum { NP = 5, NN = 14 };
    const int32_t prompt[NP] = {3, 1, 4, 1, 5};
    int32_t out[NN], out2[NN];
    mf_sampler greedy = {0.0f, 0, 1};
    mf_ctx *ctx, *rctx;
    mf_model *m = xl_model(&ctx, cfg, 9), *r = xl_model(&rctx, ref_cfg, 9);
    int i, bad = 0;
    if (!m || !r) goto done;
    MFT_CHECK(mf_model_generate(m, prompt, NP, NN, &greedy, out) == 0);
    MFT_CHECK(mf_model_generate(m, prompt, NP, NN, &greedy, out2) == 0); /* restarts from an empty memory */
    MFT_CHECK(memcmp(out, out2, sizeof out) == 0);
    mf_set_grad(rctx, 0);
    mf_set_training(rctx, 0);
    mf_model_memory_slot(r, 1);
    for (i = 0; i < NN; i++) {
        mf_tensor *lo = i == 0 ? mf_model_forward(r, prompt, 1, NP) : mf_model_forward(r, out + i - 1, 1, 1);
        if (!lo) break;
        bad += xl_argmax(lo->data + (int64_t)(lo->shape[1] - 1) * XV, XV) != out[i];
        mf_reset(rctx);
    }
    if (bad) printf("    %s: %d of %d greedy tokens differ from the memory path\n", what, bad, NN);
    MFT_CHECK(bad == 0);
    MFT_CHECK(mf_ok(ctx) && mf_ok(rctx));
    if (!mf_ok(ctx) || !mf_ok(rctx)) printf("    %s: %s %s\n", what, mf_error(ctx), mf_error(rctx));
done:
    mf_model_free(m); mf_model_free(r);
    mf_ctx_free(ctx); mf_ctx_free(rctx);
}
static void test_generate_uses_the_memory_path(void) {
    mf_model_config xl = xl_tiny(3, 0), cmp = xl_tiny(4, 1), plain = xl_tiny(0, 0), slide = xl_tiny(7, 0);
    xl_generate_check("xl mem_len 3", &xl, &xl);
    xl_generate_check("compressive", &cmp, &cmp);
    /* mem_len 0 and no positions: generation keeps max_seq - 1 tokens (here past max_seq = 8), the
       same as a Transformer-XL with mem_len = max_seq - 1 */
    xl_generate_check("relative, no memory, past max_seq", &plain, &slide);
}

/* mf_backward from loss alone (0 when it succeeds); of the parameters, how many of the compressors'
   (*cmp of *n_cmp) and how many others (*other) got a non-zero gradient */
static int nonzero_grads(mf_ctx *ctx, mf_tensor *loss, int *cmp, int *n_cmp, int *other) {
    int i, rc;
    mf_zero_grad(ctx);
    rc = mf_backward(ctx, loss);
    *cmp = *n_cmp = *other = 0;
    for (i = 0; i < mf_param_tensors(ctx); i++) {
        mf_tensor *p = mf_param_at(ctx, i);
        int64_t j, nz = 0;
        for (j = 0; j < p->ne; j++) nz += p->grad[j] != 0.0f;
        if (strstr(p->name, ".compress.")) { *cmp += nz > 0; ++*n_cmp; } else *other += nz > 0;
    }
    return rc;
}
/* the AR loss reaches only the compressors, the cross-entropy never does (docs/math.md §6.5) */
static void test_ar_loss_trains_only_the_compressors(void) {
    enum { B = 2, T = 3 };
    mf_model_config cfg = xl_tiny(4, 1);
    mf_ctx *ctx;
    mf_model *m = xl_model(&ctx, &cfg, 13);
    int32_t ids[B * T], tg[B * T];
    mf_tensor *logits, *ce, *aux, *loss;
    int s, ce_cmp = 0, ce_other = 0, aux_cmp = 0, aux_other = 0, n_cmp = 0;
    if (!m) { mf_ctx_free(ctx); return; }
    for (s = 0; s < 2; s++) { /* 3 + 3 tokens: the second segment compresses 2 */
        xl_segment(s, B, T, ids, tg);
        loss = mf_model_loss(m, ids, tg, B, T);
        MFT_CHECK(loss != NULL);
        MFT_CHECK((mf__xl_aux_loss(m) != NULL) == (s == 1));
        MFT_CHECK((mf_model_aux_loss(m) > 0) == (s == 1));
        mf_reset(ctx);
    }
    xl_segment(2, B, T, ids, tg);
    logits = mf_model_forward(m, ids, B, T); /* the third compresses 4 */
    ce = mf_cross_entropy(ctx, logits, tg, -1);
    aux = mf__xl_aux_loss(m);
    MFT_CHECK(ce && aux && aux->data[0] > 0 && fabsf(aux->data[0] - mf_model_aux_loss(m)) <= 1e-6f * aux->data[0]);
    if (!ce || !aux) goto done;
    MFT_CHECK(nonzero_grads(ctx, ce, &ce_cmp, &n_cmp, &ce_other) == 0);
    MFT_CHECK(nonzero_grads(ctx, aux, &aux_cmp, &n_cmp, &aux_other) == 0);
    MFT_CHECK(n_cmp == 4);                        /* weight and bias of both layers */
    MFT_CHECK(ce_cmp == 0 && ce_other > 10);      /* CE: everything but the compressors */
    MFT_CHECK(aux_cmp == n_cmp && aux_other == 0); /* AR: the compressors only */
done:
    MFT_CHECK(mf_ok(ctx));
    mf_model_free(m);
    mf_ctx_free(ctx);
}

static void xl_expect_bad(mf_model_config c, const char *what) {
    mf_ctx *ctx = mf_ctx_new(1);
    MFT_CHECK(mf_model_new(ctx, &c) == NULL);
    MFT_CHECK(strstr(mf_error(ctx), what) != NULL);
    if (!strstr(mf_error(ctx), what)) printf("    expected \"%s\" in: %s\n", what, mf_error(ctx));
    mf_ctx_free(ctx);
}
static void test_bad_configs(void) {
    mf_model_config c;
    mf_ctx *ctx;
    c = xl_tiny(-1, 0); xl_expect_bad(c, "mem_len");
    c = xl_tiny(4, 0); c.c_mem_len = -2; xl_expect_bad(c, "c_mem_len");
    c = xl_tiny(4, 1); c.compression_rate = 0; xl_expect_bad(c, "compression_rate");
    c = xl_tiny(0, 1); xl_expect_bad(c, "mem_len 0");
    c = xl_tiny(2, 1); c.compression_rate = 4; xl_expect_bad(c, "mem_len >= compression_rate - 1");
    c = xl_tiny(4, 1); c.c_mem_len = 0; xl_expect_bad(c, "c_mem_len");
    c = xl_tiny(4000, 0); c.max_seq = 100; xl_expect_bad(c, "max_seq 100 + mem_len 4000");
    c = xl_tiny(8, 1); c.max_seq = 96; c.c_mem_len = 4000; xl_expect_bad(c, "c_mem_len");
    c = xl_tiny(0, 0); c.max_seq = MF_XL_P + 1; xl_expect_bad(c, "max_seq");
    c = xl_tiny(4, 0); c.n_heads = 3; xl_expect_bad(c, "n_heads");
    /* fine: the largest key axis is exactly P; c_mem_len without compressive is unused */
    ctx = mf_ctx_new(1);
    c = xl_tiny(4000, 0); c.max_seq = MF_XL_P - 4000; c.d_model = 4; c.n_layers = 1;
    MFT_CHECK(mf_model_check(ctx, &c) == 0);
    c = xl_tiny(4, 0); c.c_mem_len = 5000;
    MFT_CHECK(mf_model_check(ctx, &c) == 0);
    mf_ctx_free(ctx);
}

/* clone_layers: the compressor is part of the cloned layer (docs/math.md §3.2); the tables start at zero */
static void test_clone_copies_the_compressor(void) {
    mf_model_config cfg = xl_tiny(4, 1);
    mf_ctx *ctx = mf_ctx_new(2);
    mf_model *m;
    const char *names[3] = {"compress.weight", "compress.bias", "attn.q.weight"};
    int i, clone;
    for (clone = 0; clone < 2; clone++) {
        cfg.clone_layers = clone;
        m = mf_model_new(ctx, &cfg);
        MFT_CHECK(m != NULL);
        for (i = 0; m && i < 3; i++) {
            char a[64], b[64];
            mf_tensor *p0, *p1;
            snprintf(a, sizeof a, "layers.0.%s", names[i]); snprintf(b, sizeof b, "layers.1.%s", names[i]);
            p0 = mf_param_find(ctx, a); p1 = mf_param_find(ctx, b);
            MFT_CHECK(p0 && p1 && p0->ne == p1->ne);
            if (p0 && p1) MFT_CHECK((memcmp(p0->data, p1->data, (size_t)p0->ne * sizeof(float)) == 0) == clone);
        }
        if (m) {
            mf_tensor *w = mf_param_find(ctx, "layers.1.compress.weight"), *r = mf_param_find(ctx, "layers.1.attn.r");
            int64_t j, nz = 0;
            MFT_CHECK(w && w->ndim == 3 && w->shape[0] == 8 && w->shape[1] == 8 && w->shape[2] == 2);
            MFT_CHECK(r && r->ndim == 3 && r->shape[0] == 2 * MF_XL_P && r->shape[1] == 2 && r->shape[2] == 4);
            for (j = 0; r && j < r->ne; j++) nz += r->data[j] != 0.0f;
            MFT_CHECK(nz == 0);
        }
        mf_model_free(m);
        mf_ctx_free(ctx);
        ctx = mf_ctx_new(2);
    }
    mf_ctx_free(ctx);
}

/* ---- PyTorch parity over consecutive segments ----------------------------------------------- */
/* R and S are stored as rows table_row0 .. (the rest is zero): a parameter's golden entry and the
   offset of its first stored value */
static int64_t xl_golden_offset(const mf_tensor *p, const gt_entry *e, int row0) {
    int tab = strstr(p->name, ".attn.r") != NULL || strstr(p->name, ".attn.s") != NULL;
    return tab ? (int64_t)row0 * (p->ne / p->shape[0]) : (e->ne == p->ne ? 0 : -1);
}

static void xl_parity(const char *file) {
    char path[256];
    golden g;
    const char *why;
    int ok = 1, B, T, steps, row0, s, i, worst_step = -1;
    double worst = 0;
    char worst_name[200] = "";
    mf_model_config c = mf_model_config_default();
    mf_ctx *ctx = NULL;
    mf_model *m = NULL;
    snprintf(path, sizeof path, "tests/goldens/%s", file);
    if ((why = golden_open(&g, path)) != NULL) { printf("    %s: %s\n", path, why); MFT_CHECK(0); return; }
    c.mixer = MF_MIXER_RELATIVE; c.pos = MF_POS_NONE; c.ffn_act = MF_ACT_RELU;
    c.vocab = meta_int(path, "cfg.vocab", &ok); c.d_model = meta_int(path, "cfg.d_model", &ok);
    c.n_heads = meta_int(path, "cfg.n_heads", &ok); c.n_layers = meta_int(path, "cfg.n_layers", &ok);
    c.d_ff = meta_int(path, "cfg.d_ff", &ok); c.max_seq = meta_int(path, "cfg.max_seq", &ok);
    c.mem_len = meta_int(path, "cfg.mem_len", &ok); c.compressive = meta_int(path, "cfg.compressive", &ok);
    c.c_mem_len = meta_int(path, "cfg.c_mem_len", &ok); c.compression_rate = meta_int(path, "cfg.compression_rate", &ok);
    B = meta_int(path, "cfg.B", &ok); T = meta_int(path, "cfg.T", &ok); steps = meta_int(path, "cfg.steps", &ok);
    row0 = meta_int(path, "xl.table_row0", &ok);
    MFT_CHECK(ok);
    if (!ok) goto done;
    ctx = mf_ctx_new(1);
    mf_set_threads(ctx, 1);
    m = mf_model_new(ctx, &c);
    MFT_CHECK(m != NULL);
    if (!m) { printf("    %s\n", mf_error(ctx)); goto done; }
    for (i = 0; i < mf_param_tensors(ctx); i++) { /* the weights, by name */
        mf_tensor *p = mf_param_at(ctx, i);
        const gt_entry *e = golden_find(&g, "param.", p->name);
        int64_t off = e ? xl_golden_offset(p, e, row0) : -1;
        MFT_CHECK(e && off >= 0 && off + e->ne <= p->ne);
        if (!e || off < 0 || off + e->ne > p->ne) { printf("    %s: no usable param.%s\n", file, p->name); goto done; }
        memset(p->data, 0, (size_t)p->ne * sizeof(float));
        golden_floats(&g, e, p->data + off);
    }
    for (s = 0; s < steps; s++) {
        char nm[64];
        int32_t ids[256], tg[256];
        const gt_entry *e;
        mf_tensor *lo, *loss;
        float got[3];
        double gmax = 0;
        snprintf(nm, sizeof nm, "ids.%d", s); e = golden_find(&g, "", nm);
        MFT_CHECK(e && e->ne == B * T && B * T <= 256);
        if (!e || e->ne != B * T || B * T > 256) goto done;
        golden_ints(&g, e, ids);
        snprintf(nm, sizeof nm, "targets.%d", s); e = golden_find(&g, "", nm);
        if (!e) { MFT_CHECK(0); goto done; }
        golden_ints(&g, e, tg);
        /* the logits from slot 1 (no gradient), loss and gradients from slot 0: the same segments */
        mf_model_memory_slot(m, 1);
        mf_set_grad(ctx, 0);
        lo = mf_model_forward(m, ids, B, T);
        mf_set_grad(ctx, 1);
        mf_model_memory_slot(m, 0);
        mf_zero_grad(ctx);
        loss = mf_model_loss(m, ids, tg, B, T);
        MFT_CHECK(lo && loss && mf_backward(ctx, loss) == 0);
        if (!lo || !loss || !mf_ok(ctx)) { printf("    %s step %d: %s\n", file, s, mf_error(ctx)); goto done; }
        got[0] = loss->data[0]; got[1] = mf_model_aux_loss(m); got[2] = got[0] - got[1];
        for (i = 0; i < 4; i++) { /* logits, loss, ar, ce */
            static const char *const what[4] = {"logits", "loss", "ar", "ce"};
            double err;
            snprintf(nm, sizeof nm, "%s.%d", what[i], s);
            e = golden_find(&g, "", nm);
            MFT_CHECK(e != NULL);
            if (!e || !(i == 0 ? same_shape(e, 3, lo->shape) : e->ne == 1)) { MFT_CHECK(0); continue; }
            err = golden_rel_err(&g, e, i == 0 ? lo->data : &got[i - 1], 1.0);
            if (!(err <= 1e-4)) printf("    %s %s: rel err %.3g\n", file, nm, err);
            MFT_CHECK(err <= 1e-4);
            if (!(err <= worst)) { worst = err; worst_step = s; snprintf(worst_name, sizeof worst_name, "%s", nm); }
        }
        for (i = 0; i < mf_param_tensors(ctx); i++) { /* the largest golden gradient: scale of zero ones */
            const gt_entry *ge;
            int64_t j;
            snprintf(nm, sizeof nm, "grad.%d.", s);
            ge = golden_find(&g, nm, mf_param_at(ctx, i)->name);
            if (ge) {
                float *w = (float *)malloc((size_t)ge->ne * sizeof(float));
                golden_floats(&g, ge, w);
                for (j = 0; j < ge->ne; j++) if (fabs(w[j]) > gmax) gmax = fabs(w[j]);
                free(w);
            }
        }
        for (i = 0; i < mf_param_tensors(ctx); i++) {
            mf_tensor *p = mf_param_at(ctx, i);
            const gt_entry *ge;
            int64_t off, j;
            double err;
            int outside = 0;
            snprintf(nm, sizeof nm, "grad.%d.", s);
            ge = golden_find(&g, nm, p->name);
            off = ge ? xl_golden_offset(p, ge, row0) : -1;
            MFT_CHECK(ge && off >= 0);
            if (!ge || off < 0) continue;
            err = golden_rel_err(&g, ge, p->grad + off, gmax);
            for (j = 0; j < p->ne; j++) outside += (j < off || j >= off + ge->ne) && p->grad[j] != 0.0f;
            if (!(err <= 1e-4) || outside) printf("    %s step %d grad %s: rel err %.3g, %d non-zero outside the stored rows\n",
                                                  file, s, p->name, err, outside);
            MFT_CHECK(err <= 1e-4 && outside == 0);
            if (!(err <= worst)) { worst = err; worst_step = s; snprintf(worst_name, sizeof worst_name, "grad %s", p->name); }
        }
        mf_reset(ctx);
    }
    printf("    %s: %d segments, worst rel err %.2e (step %d, %s)\n", file, steps, worst, worst_step, worst_name);
done:
    mf_model_free(m);
    mf_ctx_free(ctx);
    golden_close(&g);
}
static void test_parity_goldens(void) {
    xl_parity("xl_relative.safetensors");
    xl_parity("xl_compressive.safetensors");
}

int main(void) {
    MFT_RUN(test_rel_matches_reference);
    MFT_RUN(test_rel_finite_differences);
    MFT_RUN(test_rel_invisible_rows_get_no_gradient);
    MFT_RUN(test_rel_deterministic);
    MFT_RUN(test_rel_shape_errors);
    MFT_RUN(test_model_gradients);
    MFT_RUN(test_memory_continues_the_sequence);
    MFT_RUN(test_generate_uses_the_memory_path);
    MFT_RUN(test_ar_loss_trains_only_the_compressors);
    MFT_RUN(test_bad_configs);
    MFT_RUN(test_clone_copies_the_compressor);
    MFT_RUN(test_parity_goldens);
    return mft_finish();
}
