/* Transformer-XL relative attention (mf_rel_attention), segment memories and the compressive
   transformer (SPEC.md sections 5, 6): the fused op against a naive double reference and finite
   differences, PyTorch parity over consecutive segments (tests/goldens/xl_*.safetensors, written by
   tests/parity/goldens_xl.py), memory semantics, generation, gradient routing and config errors. */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#include "mf_test.h"
#include "gradcheck.h"
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
    io.out = mf_rel_attention(ctx, io.q, io.k, io.v, io.u, io.R, io.S, 1.0f / sqrtf((float)c.dk));
    io.loss = W ? mf_sum(ctx, mf_mul(ctx, io.out, mf_from(ctx, 4, so, W))) : NULL;
    return io;
}

/* SPEC 5.2 literally, in double: out and the gradients of sum(out * W) */
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

/* max |a - b| / max(1, max |b|) */
static double ra_err(const float *a, const double *b, int64_t n) {
    double num = 0, den = 1;
    int64_t i;
    for (i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= num)) num = d;
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
    return mf_rel_attention(ctx, in[0], in[1], in[2], in[3], in[4], in[5], 1.0f / sqrtf((float)in[0]->shape[3]));
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
    expect_fail(ctx, mf_rel_attention(ctx, q, k, k, ub, R, S, 0.5f), "u");
    expect_fail(ctx, mf_rel_attention(ctx, q, k, k, u, Rodd, S, 0.5f), "R");
    expect_fail(ctx, mf_rel_attention(ctx, q, k, k, u, R, Sb, 0.5f), "S");
    expect_fail(ctx, mf_rel_attention(ctx, q, k2, k2, u, R, S, 0.5f), "Tk >= Tq");
    expect_fail(ctx, mf_rel_attention(ctx, q, k, k, u, Rs, Ss, 0.5f), "relative positions");
    expect_fail(ctx, mf_rel_attention(ctx, q, k, NULL, u, R, S, 0.5f), "rel_attention");
    expect_fail(ctx, mf_rel_attention(ctx, q, k, k, u, R, NULL, 0.5f), "rel_attention");
    expect_fail(ctx, mf_rel_attention(ctx, q, k, k, u, R, S, NAN), "scale");
    ok = mf_rel_attention(ctx, q, k, k, u, R, S, 0.5f);
    MFT_CHECK(ok && ok->ndim == 4 && ok->shape[2] == 5 && ok->shape[3] == 4);
    mf_ctx_free(ctx);
}

int main(void) {
    MFT_RUN(test_rel_matches_reference);
    MFT_RUN(test_rel_finite_differences);
    MFT_RUN(test_rel_invisible_rows_get_no_gradient);
    MFT_RUN(test_rel_deterministic);
    MFT_RUN(test_rel_shape_errors);
    return mft_finish();
}
