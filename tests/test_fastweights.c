/* Fast weights and linear attention (SPEC.md section 7): the DPFP and elu + 1 feature maps, the
   recurrent and chunkwise kernels of mf_fast_weights / mf_linear_attention (finite differences,
   agreement of the two forms on ragged chunks), the mixers inside the model (gradient checks,
   PyTorch goldens of the seed's token loop, generation with O(1) state) and the config errors. */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#include "mf_test.h"
#include "gradcheck.h"
/* golden.h later */
#include <stdlib.h>
#include <string.h>

/* max |a - b| / max(max |b|, 1e-6) (the goldens' measure) */
static double rel_err(const float *a, const float *b, int64_t n) {
    double num = 0, den = 1e-6;
    int64_t i;
    for (i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= num)) num = d; /* NaN sticks */
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return num / den;
}

/* ---- DPFP ---------------------------------------------------------------------------------------- */
/* x = [1, 2, -3]: a = relu([x, -x]) = [1, 2, 0, 0, 0, 3];
   r = 1: a[j] a[j-1] = [3, 2, 0, 0, 0, 0];  r = 2: a[j] a[j-2] = [0, 6, 0, 0, 0, 0]; sum 11.
   (The docstring's a[j + r] would give [2, 0, 0, 0, 0, 3] for r = 1.) */
static void test_dpfp_values(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    const float x[3] = {1, 2, -3}, want[12] = {3, 2, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0};
    int shape[1] = {3}, i;
    mf_tensor *y = mf_dpfp(ctx, mf_from(ctx, 1, shape, x), 2, 1e-6f);
    MFT_CHECK(y && y->ndim == 1 && y->shape[0] == 12);
    for (i = 0; y && i < 12; i++) MFT_NEAR(y->data[i], want[i] / (11.0 + 1e-6), 1e-7);
    /* all-zero input: phi = 0, out = 0 / eps = 0 (no NaN) */
    {
        const float z[3] = {0, 0, 0};
        y = mf_dpfp(ctx, mf_from(ctx, 1, shape, z), 1, 1e-6f);
        for (i = 0; y && i < 6; i++) MFT_CHECK(y->data[i] == 0.0f);
    }
    MFT_CHECK(mf_ok(ctx));
    mf_ctx_free(ctx);
}

static mf_tensor *b_dpfp(mf_ctx *ctx, mf_tensor **in, void *user) { return mf_dpfp(ctx, in[0], *(int *)user, 1e-6f); }
static mf_tensor *b_elu1(mf_ctx *ctx, mf_tensor **in, void *user) { (void)user; return mf_elu1(ctx, in[0]); }
static void test_dpfp_grad(void) {
    gc_spec s = gc_range(gc_in(3, 2, 3, 4, 0), -1, 1, 0.05f); /* away from relu's kink at 0 */
    int nu;
    for (nu = 1; nu <= 3; nu++) MFT_CHECK(GC_OK(gc_check("dpfp", 1, &s, b_dpfp, &nu, NULL)));
    s = gc_range(gc_in(2, 3, 5, 0, 0), -2, 2, 0.05f);
    MFT_CHECK(GC_OK(gc_check("elu1", 1, &s, b_elu1, NULL, NULL)));
}

/* ---- the ops ------------------------------------------------------------------------------------- */
typedef struct { int chunk, linear; } op_case;
/* in: q, k features [B, H, T, dd], v [B, H, T, dv], beta [B, H, T] */
static mf_tensor *b_fw(mf_ctx *ctx, mf_tensor **in, void *user) {
    op_case *c = (op_case *)user;
    if (c->linear) return mf_linear_attention(ctx, in[0], in[1], in[2], 1e-6f, c->chunk);
    return mf_fast_weights(ctx, in[0], in[1], in[2], in[3], c->chunk);
}
static void test_fast_weights_grad(void) {
    gc_spec s[4];
    op_case c;
    int chunks[3] = {1, 3, 16}, i;
    /* features >= 0 with |k|^2 < 1 (as DPFP's, which sum to 1) so the state stays bounded */
    s[0] = gc_range(gc_in(4, 2, 2, 7, 6), 0, 0.4f, 0);
    s[1] = gc_range(gc_in(4, 2, 2, 7, 6), 0, 0.4f, 0);
    s[2] = gc_in(4, 2, 2, 7, 4);
    s[3] = gc_range(gc_in(3, 2, 2, 7, 0), 0.05f, 0.95f, 0);
    for (i = 0; i < 3; i++) {
        char name[64];
        c.chunk = chunks[i]; c.linear = 0;
        snprintf(name, sizeof name, "fast_weights chunk %d", c.chunk);
        MFT_CHECK(GC_OK(gc_check(name, 4, s, b_fw, &c, NULL)));
        c.linear = 1; /* the denominator stays away from 0 */
        s[0].lo = s[1].lo = 0.1f; s[0].hi = s[1].hi = 1.0f;
        snprintf(name, sizeof name, "linear_attention chunk %d", c.chunk);
        MFT_CHECK(GC_OK(gc_check(name, 3, s, b_fw, &c, NULL)));
        s[0].lo = s[1].lo = 0.0f; s[0].hi = s[1].hi = 0.4f;
    }
}

/* The recurrent kernel (chunk 1) against the chunkwise one: outputs and every input gradient on
   T = 37 (ragged last chunk for 4, 8, 16; one partial chunk for 64), features from DPFP / elu + 1. */
typedef struct { float *y, *g[4]; } fw_result;
static fw_result run_op(int kind, int chunk, int B, int H, int T, int dk, int nu) {
    mf_ctx *ctx = mf_ctx_new(7);
    int sx[4] = {B, H, T, dk}, sb[3] = {B, H, T}, i, j;
    mf_tensor *xq = mf_param(ctx, "xq", 4, sx), *xk = mf_param(ctx, "xk", 4, sx), *v = mf_param(ctx, "v", 4, sx);
    mf_tensor *bl = mf_param(ctx, "beta_logit", 3, sb), *q, *k, *beta, *y, *R, *in[4];
    fw_result r;
    memset(&r, 0, sizeof r);
    mf_init_normal(ctx, xq, 0, 1); mf_init_normal(ctx, xk, 0, 1); mf_init_normal(ctx, v, 0, 1);
    mf_init_normal(ctx, bl, 0, 2);
    beta = mf_sigmoid(ctx, bl);
    q = kind == 2 ? mf_elu1(ctx, xq) : mf_dpfp(ctx, xq, nu, 1e-6f);
    k = kind == 2 ? mf_elu1(ctx, xk) : mf_dpfp(ctx, xk, nu, 1e-6f);
    y = kind == 0 ? mf_fast_weights(ctx, q, k, v, beta, chunk) : mf_linear_attention(ctx, q, k, v, 1e-6f, chunk);
    R = mf_new(ctx, y ? 4 : 1, y ? y->shape : sb);
    for (i = 0; R && i < R->ne; i++) R->data[i] = mf__uniform(99, 1, (uint64_t)i) * 2 - 1;
    mf_backward(ctx, mf_sum(ctx, mf_mul(ctx, y, R)));
    MFT_CHECK(mf_ok(ctx));
    if (!mf_ok(ctx)) { printf("    %s\n", mf_error(ctx)); mf_ctx_free(ctx); return r; }
    r.y = (float *)malloc((size_t)y->ne * sizeof(float));
    memcpy(r.y, y->data, (size_t)y->ne * sizeof(float));
    in[0] = q; in[1] = k; in[2] = v; in[3] = beta;
    for (j = 0; j < 4; j++) { /* the op's input gradients (q, k, beta are activations) */
        r.g[j] = (float *)malloc((size_t)in[j]->ne * sizeof(float));
        memcpy(r.g[j], in[j]->grad, (size_t)in[j]->ne * sizeof(float));
    }
    mf_ctx_free(ctx);
    return r;
}
static void free_result(fw_result *r) { int j; free(r->y); for (j = 0; j < 4; j++) free(r->g[j]); }

static void test_recurrent_vs_chunkwise(void) {
    enum { B = 2, H = 3, T = 37, DK = 4 };
    static const char *const kinds[3] = {"fast_weights", "linear dpfp", "linear elu1"};
    const int chunks[6] = {2, 4, 8, 16, 37, 64};
    int kind, ci, j;
    for (kind = 0; kind < 3; kind++) {
        int nu = kind == 1 ? 2 : 1, dd = kind == 2 ? DK : 2 * DK * nu;
        int64_t n[4];
        fw_result ref = run_op(kind, 1, B, H, T, DK, nu);
        double worst = 0;
        n[0] = n[1] = (int64_t)B * H * T * dd; n[2] = (int64_t)B * H * T * DK; n[3] = (int64_t)B * H * T;
        if (!ref.y) continue;
        for (ci = 0; ci < 6; ci++) {
            fw_result r = run_op(kind, chunks[ci], B, H, T, DK, nu);
            double e;
            if (!r.y) continue;
            e = rel_err(r.y, ref.y, (int64_t)B * H * T * DK);
            if (e > worst) worst = e;
            MFT_CHECK(e <= 1e-5);
            for (j = 0; j < 4; j++) {
                if (kind && j == 3) continue; /* linear: no beta */
                e = rel_err(r.g[j], ref.g[j], n[j]);
                if (e > worst) worst = e;
                if (!(e <= 1e-5)) printf("    %s chunk %d: gradient %d rel err %.3g\n", kinds[kind], chunks[ci], j, e);
                MFT_CHECK(e <= 1e-5);
            }
            free_result(&r);
        }
        printf("    %s: chunkwise vs recurrent, worst rel err %.2e\n", kinds[kind], worst);
        free_result(&ref);
    }
}

/* linear attention whose features never overlap: the denominator is 0 + eps, the output stays finite */
static void test_linear_zero_denominator(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    int s[4] = {1, 1, 2, 2}, i;
    const float q[4] = {1, 0, 1, 0}, k[4] = {0, 1, 0, 1}, v[4] = {1, 2, 3, 4};
    mf_tensor *y = mf_linear_attention(ctx, mf_from(ctx, 4, s, q), mf_from(ctx, 4, s, k), mf_from(ctx, 4, s, v), 1e-6f, 1);
    MFT_CHECK(y != NULL);
    for (i = 0; y && i < 4; i++) MFT_CHECK(y->data[i] == 0.0f);
    mf_ctx_free(ctx);
}

static void test_op_errors(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    int s4[4] = {1, 2, 3, 4}, s4b[4] = {1, 2, 4, 4}, s3[3] = {1, 2, 3}, s3b[3] = {1, 3, 2};
    mf_tensor *q = mf_new(ctx, 4, s4), *qb = mf_new(ctx, 4, s4b), *b = mf_new(ctx, 3, s3), *bb = mf_new(ctx, 3, s3b);
    MFT_CHECK(mf_fast_weights(ctx, q, q, q, NULL, 1) == NULL && strstr(mf_error(ctx), "beta is NULL"));
    mf_clear_error(ctx);
    MFT_CHECK(mf_fast_weights(ctx, q, qb, q, b, 1) == NULL && strstr(mf_error(ctx), "same shape"));
    mf_clear_error(ctx);
    MFT_CHECK(mf_fast_weights(ctx, q, q, q, bb, 1) == NULL && strstr(mf_error(ctx), "beta"));
    mf_clear_error(ctx);
    MFT_CHECK(mf_fast_weights(ctx, q, q, q, b, -2) == NULL && strstr(mf_error(ctx), "chunk"));
    mf_clear_error(ctx);
    MFT_CHECK(mf_linear_attention(ctx, q, q, b, 1e-6f, 1) == NULL && strstr(mf_error(ctx), "4-D"));
    mf_clear_error(ctx);
    MFT_CHECK(mf_dpfp(ctx, q, 0, 1e-6f) == NULL && strstr(mf_error(ctx), "nu 0"));
    mf_clear_error(ctx);
    MFT_CHECK(mf_dpfp(ctx, q, 8, 1e-6f) == NULL && strstr(mf_error(ctx), "[1, 7]"));
    mf_clear_error(ctx);
    MFT_CHECK(mf_dpfp(ctx, q, 1, -1.0f) == NULL && strstr(mf_error(ctx), "eps"));
    mf_ctx_free(ctx);
}

int main(void) {
    MFT_RUN(test_dpfp_values);
    MFT_RUN(test_dpfp_grad);
    MFT_RUN(test_fast_weights_grad);
    MFT_RUN(test_recurrent_vs_chunkwise);
    MFT_RUN(test_linear_zero_denominator);
    MFT_RUN(test_op_errors);
    return mft_finish();
}
