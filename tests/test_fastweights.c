/* Fast weights and linear attention (docs/math.md §7): the DPFP and elu + 1 feature maps, the
   recurrent and chunkwise kernels of mf_fast_weights / mf_linear_attention (finite differences,
   agreement of the two forms on ragged chunks), the mixers inside the model (gradient checks,
   PyTorch goldens of the seed's token loop, generation with O(1) state) and the config errors. */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#include "mf_test.h"
#include "gradcheck.h"
#include "model_grad.h"
#include "golden.h"
#include <stdlib.h>
#include <string.h>

/* the goldens' measure (golden_rel_err): floor 1e-6 */
static double rel_err(const float *a, const float *b, int64_t n) { return mft_rel_err(a, b, n, 1e-6); }

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
    s = gc_range(gc_in(2, 2, 257, 0, 0), -1, 1, 0.05f); /* 2 dk > 512: the backward's wide-row path */
    nu = 2;
    MFT_CHECK(GC_OK(gc_check("dpfp wide", 1, &s, b_dpfp, &nu, NULL)));
    s = gc_range(gc_in(2, 3, 5, 0, 0), -2, 2, 0.05f);
    MFT_CHECK(GC_OK(gc_check("elu1", 1, &s, b_elu1, NULL, NULL)));
}

/* ---- the ops ------------------------------------------------------------------------------------- */
typedef struct { int chunk, linear; } op_case; /* linear: 0 fast weights, 1 normalised linear, 2 plain linear */
/* in: q, k features [B, T, H, dd], v [B, T, H, dv], beta [B, T, H] */
static mf_tensor *b_fw(mf_ctx *ctx, mf_tensor **in, void *user) {
    op_case *c = (op_case *)user;
    if (c->linear) return mf_linear_attention(ctx, in[0], in[1], in[2], c->linear == 1, 1e-6f, c->chunk);
    return mf_fast_weights(ctx, in[0], in[1], in[2], in[3], c->chunk);
}
static void test_fast_weights_grad(void) {
    gc_spec s[4];
    op_case c;
    int chunks[3] = {1, 3, 16}, i;
    /* features >= 0 with |k|^2 < 1 (as DPFP's, which sum to 1) so the state stays bounded */
    s[0] = gc_range(gc_in(4, 2, 7, 2, 6), 0, 0.4f, 0);
    s[1] = gc_range(gc_in(4, 2, 7, 2, 6), 0, 0.4f, 0);
    s[2] = gc_in(4, 2, 7, 2, 4);
    s[3] = gc_range(gc_in(3, 2, 7, 2, 0), 0.05f, 0.95f, 0);
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
        c.linear = 2; /* no normaliser (sum-normalised features such as DPFP's) */
        snprintf(name, sizeof name, "linear_attention without normaliser, chunk %d", c.chunk);
        MFT_CHECK(GC_OK(gc_check(name, 3, s, b_fw, &c, NULL)));
    }
}

/* The recurrent kernel (chunk 1) against the chunkwise one: outputs and every input gradient on
   T = 37 (ragged last chunk for 4, 8, 16; one partial chunk for 64), features from DPFP / elu + 1. */
typedef struct { float *y, *g[4]; } fw_result;
static fw_result run_op(int kind, int chunk, int B, int H, int T, int dk, int nu) {
    mf_ctx *ctx = mf_ctx_new(7);
    int sx[4] = {B, T, H, dk}, sb[3] = {B, T, H}, i, j;
    mf_tensor *xq = mf_param(ctx, "xq", 4, sx), *xk = mf_param(ctx, "xk", 4, sx), *v = mf_param(ctx, "v", 4, sx);
    mf_tensor *bl = mf_param(ctx, "beta_logit", 3, sb), *q, *k, *beta, *y, *R, *in[4];
    fw_result r;
    memset(&r, 0, sizeof r);
    mf_init_normal(ctx, xq, 0, 1); mf_init_normal(ctx, xk, 0, 1); mf_init_normal(ctx, v, 0, 1);
    mf_init_normal(ctx, bl, 0, 2);
    beta = mf_sigmoid(ctx, bl);
    q = kind == 2 ? mf_elu1(ctx, xq) : mf_dpfp(ctx, xq, nu, 1e-6f);
    k = kind == 2 ? mf_elu1(ctx, xk) : mf_dpfp(ctx, xk, nu, 1e-6f);
    /* linear attention divides by z . q only with elu + 1 features (docs/math.md §7.5) */
    y = kind == 0 ? mf_fast_weights(ctx, q, k, v, beta, chunk) : mf_linear_attention(ctx, q, k, v, kind == 2, 1e-6f, chunk);
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
    int s[4] = {1, 2, 1, 2}, i;
    const float q[4] = {1, 0, 1, 0}, k[4] = {0, 1, 0, 1}, v[4] = {1, 2, 3, 4};
    mf_tensor *y = mf_linear_attention(ctx, mf_from(ctx, 4, s, q), mf_from(ctx, 4, s, k), mf_from(ctx, 4, s, v), 1, 1e-6f, 1);
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
    MFT_CHECK(mf_linear_attention(ctx, q, q, b, 1, 1e-6f, 1) == NULL && strstr(mf_error(ctx), "4-D"));
    mf_clear_error(ctx);
    MFT_CHECK(mf_linear_attention(ctx, q, q, q, 2, 1e-6f, 1) == NULL && strstr(mf_error(ctx), "normalise 2"));
    mf_clear_error(ctx);
    MFT_CHECK(mf_dpfp(ctx, q, 0, 1e-6f) == NULL && strstr(mf_error(ctx), "nu 0"));
    mf_clear_error(ctx);
    MFT_CHECK(mf_dpfp(ctx, q, 8, 1e-6f) == NULL && strstr(mf_error(ctx), "[1, 7]"));
    mf_clear_error(ctx);
    MFT_CHECK(mf_dpfp(ctx, q, 1, -1.0f) == NULL && strstr(mf_error(ctx), "eps"));
    mf_ctx_free(ctx);
}

/* ---- the mixers in the model --------------------------------------------------------------------- */
/* without positions: the seed's models have none */
static mf_model_config tiny(mf_mixer_kind mixer) {
    mf_model_config c = mg_tiny(mixer);
    c.pos = MF_POS_NONE;
    return c;
}
static void check_model(const char *what, mf_model_config cfg) {
    mg_case c;
    memset(&c, 0, sizeof c);
    c.cfg = cfg;
    if (cfg.mixer == MF_MIXER_FAST_WEIGHTS || cfg.linear_feature == MF_FEATURE_DPFP) {
        c.prepare = mg_kinkfree;
        c.cfg.n_layers = 1;
    }
    MFT_CHECK(mg_check_logits(what, &c));
    c.cfg.dropout = 0.2f;
    MFT_CHECK(mg_check_loss(what, "loss + dropout", &c, 6));
    mf_model_free(c.model);
}
static void test_model_grad_fast_weights(void) {
    mf_model_config c = tiny(MF_MIXER_FAST_WEIGHTS);
    check_model("fast_weights recurrent", c);
    c.chunk_size = 3; c.dpfp_nu = 2; c.pos = MF_POS_LEARNED;
    check_model("fast_weights chunk 3 nu 2", c);
}
static void test_model_grad_linear(void) {
    mf_model_config c = tiny(MF_MIXER_LINEAR);
    check_model("linear dpfp", c);
    c.linear_feature = MF_FEATURE_ELU1; c.chunk_size = 3;
    check_model("linear elu1 chunk 3", c);
}

/* fast_weights has no LayerNorm before the mixer (docs/math.md §7.4); linear keeps the block's ln1 */
static void test_model_params(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    mf_model_config c = tiny(MF_MIXER_FAST_WEIGHTS);
    mf_model *m = mf_model_new(ctx, &c);
    mf_tensor *b = mf_param_find(ctx, "layers.1.attn.beta.weight");
    MFT_CHECK(m && b && b->ndim == 2 && b->shape[0] == 2 && b->shape[1] == 8);
    MFT_CHECK(!mf_param_find(ctx, "layers.0.ln1.weight") && !mf_param_find(ctx, "layers.0.attn.q.bias"));
    MFT_CHECK(mf_param_find(ctx, "layers.0.attn.out.bias") && mf_param_find(ctx, "layers.0.ln2.weight"));
    mf_model_free(m);
    mf_ctx_free(ctx);
    ctx = mf_ctx_new(1);
    c = tiny(MF_MIXER_LINEAR);
    m = mf_model_new(ctx, &c);
    MFT_CHECK(m && mf_param_find(ctx, "layers.0.ln1.weight") && !mf_param_find(ctx, "layers.0.attn.beta.weight"));
    mf_model_free(m);
    mf_ctx_free(ctx);
}

static void expect_bad(mf_model_config c, const char *what) {
    mf_ctx *ctx = mf_ctx_new(1);
    mf_model *m = mf_model_new(ctx, &c);
    MFT_CHECK(m == NULL && strstr(mf_error(ctx), what) != NULL);
    if (!strstr(mf_error(ctx), what)) printf("    expected \"%s\" in: %s\n", what, mf_error(ctx));
    mf_model_free(m);
    mf_ctx_free(ctx);
}
static void test_config_errors(void) {
    mf_model_config c = tiny(MF_MIXER_FAST_WEIGHTS);
    c.dpfp_nu = 0; expect_bad(c, "dpfp_nu 0");
    c.dpfp_nu = 8; expect_bad(c, "dpfp_nu 8");
    c = tiny(MF_MIXER_LINEAR); c.chunk_size = -1; expect_bad(c, "chunk_size -1");
    c = tiny(MF_MIXER_LINEAR); c.linear_feature = (mf_feature_kind)7; expect_bad(c, "unknown linear_feature 7");
    c = tiny(MF_MIXER_LINEAR); c.linear_feature = MF_FEATURE_ELU1; c.dpfp_nu = 0; /* nu unused with elu + 1 */
    {
        mf_ctx *ctx = mf_ctx_new(1);
        mf_model *m = mf_model_new(ctx, &c);
        MFT_CHECK(m != NULL);
        mf_model_free(m);
        mf_ctx_free(ctx);
    }
    { /* a CUDA context is accepted (tests/test_cuda_fastweights.cpp runs it): pretend one, only the check runs */
        mf_ctx *ctx = mf_ctx_new(1);
        c = tiny(MF_MIXER_FAST_WEIGHTS);
        ctx->be = (const mf__backend *)ctx; /* never called */
        MFT_CHECK(mf_model_check(ctx, &c) == 0 && mf_ok(ctx));
        c = tiny(MF_MIXER_LINEAR);
        MFT_CHECK(mf_model_check(ctx, &c) == 0 && mf_ok(ctx));
        ctx->be = NULL;
        mf_ctx_free(ctx);
    }
}

/* ---- generation with O(1) state ---------------------------------------------------------------------
   Logits of the prompt and then of one token per call (the model's recurrent state) against one
   full forward over the whole sequence. With pos NONE the generating model's max_seq (8) is far
   below the sequence (40): it never re-primes. The reference is a twin with max_seq 64 and the
   same weights. */
static void gen_case(mf_model_config cfg) {
    enum { N = 40, NP = 5 };
    mf_ctx *a = mf_ctx_new(3), *b = mf_ctx_new(4);
    mf_model *ma, *mb;
    int32_t seq[N];
    int i;
    double worst = 0;
    mf_tensor *full;
    cfg.max_seq = 8;
    ma = mf_model_new(a, &cfg);
    cfg.max_seq = 64;
    mb = mf_model_new(b, &cfg);
    MFT_CHECK(ma && mb);
    if (!ma || !mb) goto done;
    memcpy(mf_param_data(b), mf_param_data(a), (size_t)mf_param_count(a) * sizeof(float));
    for (i = 0; i < N; i++) seq[i] = (int32_t)((i * 7 + 3) % MG_V);
    mf_set_grad(a, 0); mf_set_grad(b, 0);
    full = mf_model_forward(mb, seq, 1, N);
    MFT_CHECK(full != NULL);
    if (!full) goto done;
    for (i = NP; i <= N; i++) { /* the prompt, then one token per call */
        mf_tensor *lg = i == NP ? mf__model_run(ma, seq, 1, NP, 0, 1) : mf__model_run(ma, seq + i - 1, 1, 1, i - 1, 1);
        int rows = i == NP ? NP : 1;
        double e;
        if (!lg) break;
        e = rel_err(lg->data, full->data + (int64_t)(i - rows) * MG_V, (int64_t)rows * MG_V);
        if (e > worst) worst = e;
        mf_reset(a);
    }
    MFT_CHECK(mf_ok(a) && mf_ok(b));
    if (!mf_ok(a)) printf("    %s\n", mf_error(a));
    MFT_CHECK(worst <= 1e-5);
    printf("    %s%s chunk %d: stepwise logits vs full forward over %d tokens, rel err %.2e\n", mf_mixer_name(cfg.mixer),
           cfg.mixer == MF_MIXER_LINEAR ? (cfg.linear_feature == MF_FEATURE_ELU1 ? " elu1" : " dpfp") : "", cfg.chunk_size, N, worst);
    { /* greedy generation past max_seq = argmax of the full forward */
        int32_t out[N - NP];
        mf_tensor *lg;
        int bad = 0;
        MFT_CHECK(mf_model_generate(ma, seq, NP, N - NP, NULL, out) == 0);
        memcpy(seq + NP, out, sizeof out);
        lg = mf_model_forward(mb, seq, 1, N);
        for (i = 0; lg && i < N - NP; i++) {
            const float *row = lg->data + (int64_t)(NP - 1 + i) * MG_V;
            int v, best = 0;
            for (v = 1; v < MG_V; v++) if (row[v] > row[best]) best = v;
            bad += row[best] - row[out[i]] > 1e-5f;
        }
        MFT_CHECK(lg != NULL && bad == 0);
    }
    /* a call out of order is an error, not a silent restart */
    mf_reset(a);
    MFT_CHECK(mf__model_run(ma, seq, 1, 1, 3, 1) == NULL && strstr(mf_error(a), "position"));
done:
    mf_model_free(ma); mf_model_free(mb);
    mf_ctx_free(a); mf_ctx_free(b);
}
static void test_generation_state(void) {
    mf_model_config c = tiny(MF_MIXER_FAST_WEIGHTS);
    gen_case(c);
    c.chunk_size = 4; /* the prompt through the chunkwise kernel */
    gen_case(c);
    c = tiny(MF_MIXER_LINEAR);
    gen_case(c);
    c.linear_feature = MF_FEATURE_ELU1;
    gen_case(c);
}

/* ---- PyTorch goldens of the seed's token loop (tests/parity/goldens_fastweights.py) ---------------
   A 2-layer model per file: every parameter is loaded by name; logits, loss and every parameter
   gradient must match the float64 reference to 1e-4 relative, with the recurrent kernel, the
   chunkwise one (ragged: T = 9 by 4) and the automatic choice. The file also holds a DPFP(nu 3)
   input / output pair: the feature ORDER (roll direction j - r), which no model output can show. */
static void golden_case(const char *name) {
    char path[256], buf[64];
    golden g;
    const char *why;
    const gt_entry *e;
    int ok = 1, B, T, ci, i;
    const int chunks[3] = {1, 4, 0};
    mf_model_config cfg = mf_model_config_default();
    snprintf(path, sizeof path, "tests/goldens/%s.safetensors", name);
    if ((why = golden_open(&g, path))) { printf("    %s: %s\n", path, why); MFT_CHECK(0); return; }
    if (mf_load_meta(path, "cfg.mixer", buf, sizeof buf) < 0 || mf_mixer_from_name(buf) < 0) ok = 0;
    else cfg.mixer = (mf_mixer_kind)mf_mixer_from_name(buf);
    cfg.vocab = meta_int(path, "cfg.vocab", &ok);
    cfg.d_model = meta_int(path, "cfg.d_model", &ok);
    cfg.n_heads = meta_int(path, "cfg.n_heads", &ok);
    cfg.n_layers = meta_int(path, "cfg.n_layers", &ok);
    cfg.d_ff = meta_int(path, "cfg.d_ff", &ok);
    cfg.dpfp_nu = meta_int(path, "cfg.dpfp_nu", &ok);
    cfg.linear_feature = (mf_feature_kind)meta_int(path, "cfg.linear_feature", &ok);
    B = meta_int(path, "parity.B", &ok);
    T = meta_int(path, "parity.T", &ok);
    cfg.pos = MF_POS_NONE; cfg.ffn_act = MF_ACT_RELU; cfg.ffn_bias = 1; cfg.max_seq = T; /* labml */
    MFT_CHECK(ok);
    if (!ok) { golden_close(&g); return; }
    { /* DPFP feature order */
        mf_ctx *ctx = mf_ctx_new(1);
        const gt_entry *ex = golden_find(&g, "", "dpfp.x"), *eo = golden_find(&g, "", "dpfp.out");
        float x[2 * 3 * 4];
        int sx[3] = {2, 3, 4};
        mf_tensor *y;
        MFT_CHECK(ex && eo && ex->ne == 24 && eo->ne == 2 * 3 * 24);
        if (ex && eo) {
            golden_floats(&g, ex, x);
            y = mf_dpfp(ctx, mf_from(ctx, 3, sx, x), meta_int(path, "dpfp.nu", &ok), 1e-6f);
            MFT_CHECK(y && y->ne == eo->ne && golden_rel_err(&g, eo, y->data, 0) <= 1e-5);
        }
        mf_ctx_free(ctx);
    }
    for (ci = 0; ci < 3; ci++) {
        mf_ctx *ctx = mf_ctx_new(1);
        mf_model *m;
        int32_t *ids = (int32_t *)malloc((size_t)B * T * sizeof(int32_t)), *tg = (int32_t *)malloc((size_t)B * T * sizeof(int32_t));
        double worst = 0, err;
        int n_param = 0, n_bad = 0;
        mf_tensor *logits, *loss;
        cfg.chunk_size = chunks[ci];
        m = mf_model_new(ctx, &cfg);
        MFT_CHECK(m != NULL);
        if (!m) { printf("    %s\n", mf_error(ctx)); free(ids); free(tg); mf_ctx_free(ctx); break; }
        for (i = 0; i < mf_param_tensors(ctx); i++) {
            mf_tensor *p = mf_param_at(ctx, i);
            e = golden_find(&g, "param.", p->name);
            if (!e || !same_shape(e, p->ndim, p->shape)) { printf("    %s: param.%s missing or misshapen\n", name, p->name); n_bad++; continue; }
            golden_floats(&g, e, p->data);
        }
        for (i = 0; i < g.n; i++) n_param += strncmp(g.e[i].name, "param.", 6) == 0;
        MFT_CHECK(n_param == mf_param_tensors(ctx)); /* no stray golden parameter (e.g. an ln1 for fast weights) */
        e = golden_find(&g, "", "ids");
        if (e && e->i32 && e->ne == (int64_t)B * T) golden_ints(&g, e, ids); else { MFT_CHECK(0); memset(ids, 0, (size_t)B * T * 4); }
        e = golden_find(&g, "", "targets");
        if (e && e->i32 && e->ne == (int64_t)B * T) golden_ints(&g, e, tg); else { MFT_CHECK(0); memset(tg, 0, (size_t)B * T * 4); }
        logits = mf_model_forward(m, ids, B, T);
        e = golden_find(&g, "", "logits");
        MFT_CHECK(logits && e && e->ne == logits->ne);
        if (logits && e) { err = golden_rel_err(&g, e, logits->data, 0); if (err > worst) worst = err; n_bad += !(err <= 1e-4); }
        mf_reset(ctx);
        loss = mf_model_loss(m, ids, tg, B, T);
        e = golden_find(&g, "", "loss");
        MFT_CHECK(loss && e);
        if (loss && e) { err = golden_rel_err(&g, e, loss->data, 0); if (err > worst) worst = err; n_bad += !(err <= 1e-4); }
        MFT_CHECK(mf_backward(ctx, loss) == 0);
        for (i = 0; i < mf_param_tensors(ctx); i++) {
            mf_tensor *p = mf_param_at(ctx, i);
            e = golden_find(&g, "grad.", p->name);
            if (!e) { n_bad++; continue; }
            err = golden_rel_err(&g, e, p->grad, 1.0);
            if (err > worst) worst = err;
            if (!(err <= 1e-4)) { printf("    %s chunk %d: grad.%s rel err %.3g\n", name, chunks[ci], p->name, err); n_bad++; }
        }
        MFT_CHECK(mf_ok(ctx) && n_bad == 0);
        if (!mf_ok(ctx)) printf("    %s\n", mf_error(ctx));
        printf("    %-16s chunk %d: worst rel err %.2e over logits, loss and %d gradients\n", name, chunks[ci], worst,
               mf_param_tensors(ctx));
        mf_model_free(m);
        mf_ctx_free(ctx);
        free(ids); free(tg);
    }
    golden_close(&g);
}
static void test_golden_fast_weights(void) { golden_case("fw_fast_weights"); }
static void test_golden_linear_dpfp(void) { golden_case("fw_linear_dpfp"); }
static void test_golden_linear_elu(void) { golden_case("fw_linear_elu"); }

int main(void) {
    MFT_RUN(test_dpfp_values);
    MFT_RUN(test_dpfp_grad);
    MFT_RUN(test_fast_weights_grad);
    MFT_RUN(test_recurrent_vs_chunkwise);
    MFT_RUN(test_linear_zero_denominator);
    MFT_RUN(test_op_errors);
    MFT_RUN(test_model_params);
    MFT_RUN(test_model_grad_fast_weights);
    MFT_RUN(test_model_grad_linear);
    MFT_RUN(test_config_errors);
    MFT_RUN(test_generation_state);
    MFT_RUN(test_golden_fast_weights);
    MFT_RUN(test_golden_linear_dpfp);
    MFT_RUN(test_golden_linear_elu);
    return mft_finish();
}
