/* Attention inspection (mf_model_attention, docs/math.md §19) and the stream_norm block layout:
   for every mixer with attention maps the probabilities are the masked softmax of the scores, and
   the forward that attends with exactly those probabilities gives the logits of mf_model_forward
   (so the maps are the ones the model uses); the scores of layer 0 are the bilinear forms of
   mf_model_attention_form on the normalised input; bad arguments are refused with a message; the
   stream_norm layout is checked against mixers it cannot wrap and by finite differences. */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#include "mf_test.h"
#include "model_grad.h"
#include <stdlib.h>
#include <string.h>

enum { V = 11, B = 2, T = 6 };

static mf_model_config tiny(mf_mixer_kind mixer) {
    mf_model_config c = mf_model_config_default();
    c.vocab = V; c.d_model = 8; c.n_heads = 2; c.n_layers = 2; c.d_ff = 16; c.max_seq = 8;
    c.mixer = mixer;
    return c;
}
static void ids_of(int k, int32_t *ids) {
    int i;
    for (i = 0; i < B * T; i++) ids[i] = (i * 7 + k * 3 + i / 5) % V;
}

/* query i sees key j (Tk keys, the last T the queries' own positions; feedback: the earlier steps) */
static int visible(mf_mixer_kind mixer, int Tk, int i, int j) {
    if (mixer == MF_MIXER_FEEDBACK || mixer == MF_MIXER_FEEDBACK_KV) return j < i;
    return j <= i + (Tk - T);
}

/* every row of probs is the softmax of its scores over the visible keys, 0 elsewhere */
static int masked_softmax_holds(mf_mixer_kind mixer, int L, int H, int Tk, const float *sc, const float *pr) {
    int r, i, j, bad = 0;
    for (r = 0; r < L * B * H; r++)
        for (i = 0; i < T; i++) {
            const float *s = sc + ((int64_t)r * T + i) * Tk, *p = pr + ((int64_t)r * T + i) * Tk;
            double mx = -INFINITY, sum = 0;
            for (j = 0; j < Tk; j++) if (visible(mixer, Tk, i, j) && s[j] > mx) mx = s[j];
            for (j = 0; j < Tk; j++) if (visible(mixer, Tk, i, j)) sum += exp(s[j] - mx);
            for (j = 0; j < Tk; j++) {
                double want = visible(mixer, Tk, i, j) ? exp(s[j] - mx) / sum : 0.0;
                if (!(fabs(p[j] - want) <= 1e-6)) bad++;
                if (visible(mixer, Tk, i, j) && !isfinite(s[j])) bad++;
            }
        }
    return bad == 0;
}

/* two identical models; both run `calls` forwards first (filling the relative mixer's memories), then
   one forwards and the other is inspected: same logits, masked softmax, memories counted in Tk */
static void check_mixer(mf_model_config cfg, int calls, const char *what) {
    mf_ctx *a = mf_ctx_new(5), *b = mf_ctx_new(5);
    mf_model *ma = mf_model_new(a, &cfg), *mb = mf_model_new(b, &cfg);
    int32_t ids[B * T];
    int k, Tk, H = cfg.n_heads, L = cfg.n_layers;
    float *sc = NULL, *pr = NULL;
    mf_tensor *want, *got;
    printf("    %s\n", what);
    MFT_CHECK(ma && mb);
    if (!ma || !mb) goto done;
    for (k = 0; k < calls; k++) {
        ids_of(k, ids);
        mf_model_forward(ma, ids, B, T); mf_reset(a);
        mf_model_forward(mb, ids, B, T); mf_reset(b);
    }
    Tk = mf_model_attention_keys(mb, T);
    MFT_CHECK(calls == 0 ? Tk == T : Tk > T);
    sc = (float *)malloc(sizeof(float) * L * B * H * T * Tk);
    pr = (float *)malloc(sizeof(float) * L * B * H * T * Tk);
    ids_of(calls, ids);
    want = mf_model_forward(ma, ids, B, T);
    got = mf_model_attention(mb, ids, B, T, sc, pr);
    MFT_CHECK(want && got);
    if (!want || !got) { printf("    %s / %s\n", mf_error(a), mf_error(b)); goto done; }
    MFT_CHECK(mft_rel_err(got->data, want->data, want->ne, 1.0) < 1e-5);
    MFT_CHECK(masked_softmax_holds(cfg.mixer, L, H, Tk, sc, pr));
done:
    free(sc); free(pr);
    mf_model_free(ma); mf_model_free(mb);
    mf_ctx_free(a); mf_ctx_free(b);
}

static void test_maps_are_the_models(void) {
    mf_model_config c;
    check_mixer(tiny(MF_MIXER_SDPA), 0, "sdpa");
    check_mixer(tiny(MF_MIXER_METRIC), 0, "metric");
    check_mixer(tiny(MF_MIXER_QUADRATIC), 0, "quadratic");
    c = tiny(MF_MIXER_SDPA); c.block = MF_BLOCK_STREAM_NORM; c.attn_bias = 0;
    check_mixer(c, 0, "sdpa, stream_norm, no biases");
    c = tiny(MF_MIXER_METRIC); c.block = MF_BLOCK_STREAM_NORM;
    check_mixer(c, 0, "metric, stream_norm");
    c = tiny(MF_MIXER_RELATIVE); c.pos = MF_POS_NONE; c.mem_len = 4;
    check_mixer(c, 2, "relative, memories");
    c.compressive = 1; c.c_mem_len = 3; c.mem_len = 3;
    check_mixer(c, 3, "relative, compressed memories");
    check_mixer(tiny(MF_MIXER_FEEDBACK), 0, "feedback");
    check_mixer(tiny(MF_MIXER_FEEDBACK_KV), 0, "feedback_kv");
}

/* x [T][D] = LN(tok_emb[ids] + pos_emb) at initialisation (LN weight 1, bias 0) of batch row 0 */
static void layer0_input(mf_ctx *ctx, const int32_t *ids, int D, float *x) {
    float *tok = (float *)malloc(sizeof(float) * V * D), *pos = (float *)malloc(sizeof(float) * 8 * D);
    int t, d;
    mf_to_host(ctx, mf_param_find(ctx, "tok_emb"), tok);
    mf_to_host(ctx, mf_param_find(ctx, "pos_emb"), pos);
    for (t = 0; t < T; t++) {
        double mean = 0, var = 0;
        for (d = 0; d < D; d++) mean += x[t * D + d] = tok[ids[t] * D + d] + pos[t * D + d];
        mean /= D;
        for (d = 0; d < D; d++) var += (x[t * D + d] - mean) * (x[t * D + d] - mean);
        for (d = 0; d < D; d++) x[t * D + d] = (float)((x[t * D + d] - mean) / sqrt(var / D + 1e-5));
    }
    free(tok); free(pos);
}

/* layer 0's scores = x A_h x'^T / sqrt(dk) with A_h the D x D form; the head form of metric is
   symmetric and the D x D form is Wp_h^T M_h Wp_h */
static void check_forms(mf_mixer_kind mixer) {
    mf_model_config cfg = tiny(mixer);
    mf_ctx *ctx = mf_ctx_new(9);
    mf_model *m;
    int D = cfg.d_model, H = cfg.n_heads, dk = D / H, h, i, j, a, b, bad = 0;
    int32_t ids[B * T];
    float *sc = (float *)malloc(sizeof(float) * cfg.n_layers * B * H * T * T), x[T * 8];
    float *A = (float *)malloc(sizeof(float) * H * D * D), *M = (float *)malloc(sizeof(float) * H * dk * dk);
    if (mixer == MF_MIXER_SDPA) cfg.attn_bias = 0; /* the form leaves the biases out */
    m = mf_model_new(ctx, &cfg);
    MFT_CHECK(m != NULL);
    ids_of(0, ids);
    MFT_CHECK(mf_model_attention(m, ids, B, T, sc, NULL) != NULL);
    MFT_CHECK(mf_model_attention_form(m, 0, MF_ATTN_FORM_MODEL, A) == 0);
    MFT_CHECK(mf_model_attention_form(m, 0, MF_ATTN_FORM_HEAD, M) == 0);
    layer0_input(ctx, ids, D, x);
    for (h = 0; h < H; h++)
        for (i = 0; i < T; i++)
            for (j = 0; j < T; j++) { /* raw scores: masked ones (j > i) too */
                double s = 0;
                for (a = 0; a < D; a++)
                    for (b = 0; b < D; b++) s += x[i * D + a] * A[(h * D + a) * D + b] * x[j * D + b];
                s /= sqrt((double)dk);
                if (fabs(s - sc[(h * T + i) * T + j]) > 1e-4 * (1 + fabs(s))) bad++;
            }
    MFT_CHECK(bad == 0);
    if (mixer == MF_MIXER_METRIC)
        for (h = 0; h < H; h++)
            for (a = 0; a < dk; a++)
                for (b = 0; b < dk; b++) MFT_CHECK(M[(h * dk + a) * dk + b] == M[(h * dk + b) * dk + a]);
    mf_model_free(m);
    mf_ctx_free(ctx);
    free(sc); free(A); free(M);
}
static void test_forms_sdpa(void) { check_forms(MF_MIXER_SDPA); }
static void test_forms_metric(void) { check_forms(MF_MIXER_METRIC); }
static void test_forms_quadratic(void) { check_forms(MF_MIXER_QUADRATIC); }

/* a call that must fail: NULL / -1, the context failed with a message containing `words` */
static void expect_refused(mf_ctx *ctx, int failed, const char *words) {
    MFT_CHECK(failed);
    MFT_CHECK(!mf_ok(ctx) && strstr(mf_error(ctx), words) != NULL);
    if (!strstr(mf_error(ctx), words)) printf("    message: %s\n", mf_error(ctx));
}

static void test_bad_arguments(void) {
    mf_model_config c;
    int32_t ids[B * T];
    float buf[4096], out[512];
    mf_ctx *ctx;
    mf_model *m;
    ids_of(0, ids);
    /* mixers without maps */
    c = tiny(MF_MIXER_POOL); ctx = mf_ctx_new(1); m = mf_model_new(ctx, &c);
    expect_refused(ctx, mf_model_attention(m, ids, B, T, buf, buf) == NULL, "pool mixer has no attention");
    mf_model_free(m); mf_ctx_free(ctx);
    c = tiny(MF_MIXER_LINEAR); ctx = mf_ctx_new(1); m = mf_model_new(ctx, &c);
    expect_refused(ctx, mf_model_attention_keys(m, T) < 0, "linear mixer has no attention");
    mf_model_free(m); mf_ctx_free(ctx);
    /* lengths, batch, forms */
    c = tiny(MF_MIXER_SDPA); ctx = mf_ctx_new(1); m = mf_model_new(ctx, &c);
    expect_refused(ctx, mf_model_attention_keys(m, 9) < 0, "length 9 must be in [1, max_seq = 8]");
    mf_model_free(m); mf_ctx_free(ctx);
    ctx = mf_ctx_new(1); m = mf_model_new(ctx, &c);
    expect_refused(ctx, mf_model_attention(m, ids, 0, T, buf, NULL) == NULL, "batch 0");
    mf_model_free(m); mf_ctx_free(ctx);
    ctx = mf_ctx_new(1); m = mf_model_new(ctx, &c);
    expect_refused(ctx, mf_model_attention(m, NULL, B, T, buf, NULL) == NULL, "ids is NULL");
    mf_model_free(m); mf_ctx_free(ctx);
    ctx = mf_ctx_new(1); m = mf_model_new(ctx, &c);
    expect_refused(ctx, mf_model_attention_form(m, 2, MF_ATTN_FORM_HEAD, out) < 0, "layer 2 (need 0 .. 1)");
    mf_model_free(m); mf_ctx_free(ctx);
    ctx = mf_ctx_new(1); m = mf_model_new(ctx, &c);
    expect_refused(ctx, mf_model_attention_form(m, 0, 7, out) < 0, "form 7");
    mf_model_free(m); mf_ctx_free(ctx);
    ctx = mf_ctx_new(1); m = mf_model_new(ctx, &c);
    expect_refused(ctx, mf_model_attention_form(m, 0, MF_ATTN_FORM_HEAD, NULL) < 0, "out NULL");
    mf_model_free(m); mf_ctx_free(ctx);
    c = tiny(MF_MIXER_RELATIVE); c.pos = MF_POS_NONE; ctx = mf_ctx_new(1); m = mf_model_new(ctx, &c);
    expect_refused(ctx, mf_model_attention_form(m, 0, MF_ATTN_FORM_HEAD, out) < 0, "relative mixer has no per-head bilinear form");
    mf_model_free(m); mf_ctx_free(ctx);
    MFT_CHECK(mf_model_attention(NULL, ids, B, T, buf, buf) == NULL);
    MFT_CHECK(mf_model_attention_keys(NULL, T) < 0);
    MFT_CHECK(mf_model_attention_form(NULL, 0, 0, out) < 0);
}

static void test_stream_norm_config(void) {
    static const mf_mixer_kind refused[] = {MF_MIXER_IDENTITY, MF_MIXER_RELATIVE, MF_MIXER_FAST_WEIGHTS, MF_MIXER_FEEDBACK};
    mf_model_config c;
    mf_ctx *ctx;
    mf_model *m;
    size_t i;
    for (i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        c = tiny(refused[i]); c.block = MF_BLOCK_STREAM_NORM; c.pos = MF_POS_NONE;
        ctx = mf_ctx_new(1);
        expect_refused(ctx, mf_model_check(ctx, &c) < 0, "block layout stream_norm needs a mixer");
        mf_ctx_free(ctx);
    }
    c = tiny(MF_MIXER_SDPA); c.block = (mf_block_kind)2; ctx = mf_ctx_new(1);
    expect_refused(ctx, mf_model_check(ctx, &c) < 0, "unknown block layout 2");
    mf_ctx_free(ctx);
    MFT_CHECK(strcmp(mf_block_name(MF_BLOCK_STREAM_NORM), "stream_norm") == 0);
    MFT_CHECK(mf_block_from_name("pre_norm") == MF_BLOCK_PRE_NORM && mf_block_from_name("x") == -1);
    c = tiny(MF_MIXER_METRIC); c.block = MF_BLOCK_STREAM_NORM; ctx = mf_ctx_new(1);
    m = mf_model_new(ctx, &c);
    MFT_CHECK(m && mf_param_find(ctx, "layers.1.ln_mid.weight") && mf_param_find(ctx, "layers.0.ln_mid.bias"));
    mf_model_free(m); mf_ctx_free(ctx);
}

/* finite differences through the stream_norm block (every parameter's logits, then the loss) */
static void test_stream_norm_gradients(void) {
    mg_case c;
    memset(&c, 0, sizeof c);
    c.cfg = mg_tiny(MF_MIXER_SDPA);
    c.cfg.block = MF_BLOCK_STREAM_NORM; c.cfg.attn_bias = 0; c.cfg.ffn_bias = 0;
    MFT_CHECK(mg_check_logits("sdpa stream_norm", &c));
    c.cfg.mixer = MF_MIXER_METRIC; c.cfg.attn_bias = 1;
    MFT_CHECK(mg_check_loss("metric stream_norm", "loss", &c, 6));
    mf_model_free(c.model);
}

int main(void) {
    MFT_RUN(test_maps_are_the_models);
    MFT_RUN(test_forms_sdpa);
    MFT_RUN(test_forms_metric);
    MFT_RUN(test_forms_quadratic);
    MFT_RUN(test_bad_arguments);
    MFT_RUN(test_stream_norm_config);
    MFT_RUN(test_stream_norm_gradients);
    return mft_finish();
}
