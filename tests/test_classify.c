/* Non-causal mixers and sequence classification (docs/math.md §20): gradient checks of every
   non-causal mixer and of the classification head, what causal = 0 changes (and what it must not),
   padding that is never read, checkpoints with the head, and the refusals. */
#include "metaformer.h"
#include "mf_test.h"
#include "model_grad.h"
#include <stdio.h>
#include <string.h>

/* ---- non-causal language-model logits: every parameter, then the loss with dropout ---- */
static void check_noncausal(mf_mixer_kind mixer, mf_feature_kind feature) {
    mg_case c;
    char what[64];
    memset(&c, 0, sizeof c);
    c.cfg = mg_tiny(mixer);
    c.cfg.causal = 0;
    if (mixer == MF_MIXER_LINEAR) c.cfg.linear_feature = feature;
    if (mixer == MF_MIXER_LINEAR && feature == MF_FEATURE_DPFP) { /* DPFP has kinks: see mg_kinkfree */
        c.prepare = mg_kinkfree;
        c.cfg.n_layers = 1; c.cfg.pos = MF_POS_NONE;
    }
    snprintf(what, sizeof what, "non-causal %s%s", mf_mixer_name(mixer),
             mixer == MF_MIXER_LINEAR ? (feature == MF_FEATURE_ELU1 ? " elu1" : " dpfp") : "");
    MFT_CHECK(mg_check_logits(what, &c));
    c.cfg.dropout = 0.2f;
    MFT_CHECK(mg_check_loss(what, "loss + dropout", &c, 6));
    mf_model_free(c.model);
}
static void test_grad_sdpa(void) { check_noncausal(MF_MIXER_SDPA, MF_FEATURE_DPFP); }
static void test_grad_metric(void) { check_noncausal(MF_MIXER_METRIC, MF_FEATURE_DPFP); }
static void test_grad_quadratic(void) { check_noncausal(MF_MIXER_QUADRATIC, MF_FEATURE_DPFP); }
static void test_grad_pool(void) { check_noncausal(MF_MIXER_POOL, MF_FEATURE_DPFP); }
static void test_grad_linear_dpfp(void) { check_noncausal(MF_MIXER_LINEAR, MF_FEATURE_DPFP); }
static void test_grad_linear_elu1(void) { check_noncausal(MF_MIXER_LINEAR, MF_FEATURE_ELU1); }

/* logits [B, T, V] of one layer of mixer with causal on or off (same seed: the same parameters) */
static void one_layer_logits(mf_mixer_kind mixer, int causal, float *out) {
    mf_ctx *ctx = mf_ctx_new(3);
    mf_model_config cfg = mg_tiny(mixer);
    mf_model *m;
    mf_tensor *y;
    cfg.n_layers = 1; cfg.causal = causal;
    if (mixer == MF_MIXER_LINEAR) cfg.linear_feature = MF_FEATURE_ELU1;
    m = mf_model_new(ctx, &cfg);
    y = mf_model_forward(m, mg_ids, MG_B, MG_T);
    MFT_CHECK(y != NULL);
    if (y) memcpy(out, y->data, sizeof(float) * MG_B * MG_T * MG_V);
    if (!y) printf("    %s: %s\n", mf_mixer_name(mixer), mf_error(ctx));
    mf_model_free(m);
    mf_ctx_free(ctx);
}
/* The last position sees every position either way, so its logits agree (up to rounding: other
   kernels); the first position sees the later ones only when causal = 0 */
static void test_last_position_agrees(void) {
    static const mf_mixer_kind mixers[] = {MF_MIXER_SDPA, MF_MIXER_METRIC, MF_MIXER_QUADRATIC, MF_MIXER_LINEAR};
    float a[MG_B * MG_T * MG_V], b[MG_B * MG_T * MG_V];
    size_t k;
    for (k = 0; k < sizeof mixers / sizeof mixers[0]; k++) {
        int r, v;
        double last = 0, first = 0;
        one_layer_logits(mixers[k], 1, a);
        one_layer_logits(mixers[k], 0, b);
        for (r = 0; r < MG_B; r++)
            for (v = 0; v < MG_V; v++) {
                int il = (r * MG_T + MG_T - 1) * MG_V + v, i0 = r * MG_T * MG_V + v;
                double dl = fabs((double)a[il] - b[il]), d0 = fabs((double)a[i0] - b[i0]);
                last = dl > last ? dl : last;
                first = d0 > first ? d0 : first;
            }
        if (!(last < 1e-4 && first > 1e-3))
            printf("    %s: last position differs by %g, first by %g\n", mf_mixer_name(mixers[k]), last, first);
        MFT_CHECK(last < 1e-4);
        MFT_CHECK(first > 1e-3);
    }
}

/* ---- the classifier ---- */
enum { CB = 4, CT = 6, CC = 3 };
static const int32_t c_ids[CB * CT] = {1, 4, 0, 6, 2, 3, 3, 5, 1, -1, -1, -1, 2, 2, 6, 0, 1, -7, 5, 5, 5, 5, 5, 5};
static const int32_t c_lengths[CB] = {6, 3, 5, 6};
static const int32_t c_labels[CB] = {2, 0, 1, 2};

static mf_model_config classifier(mf_mixer_kind mixer) {
    mf_model_config c = mg_tiny(mixer);
    c.causal = 0; c.n_classes = CC; c.n_layers = 1; c.max_seq = CT;
    return c;
}
typedef struct cls_case { mf_model_config cfg; mf_model *model; int loss; } cls_case;
static int cls_setup(mf_ctx *ctx, void *user) {
    cls_case *c = (cls_case *)user;
    mf_model_free(c->model);
    c->model = mf_model_new(ctx, &c->cfg);
    return c->model ? 0 : -1;
}
static mf_tensor *cls_forward(mf_ctx *ctx, void *user) {
    cls_case *c = (cls_case *)user;
    (void)ctx;
    return c->loss ? mf_model_classify_loss(c->model, c_ids, c_lengths, c_labels, CB, CT)
                   : mf_model_classify_logits(c->model, c_ids, c_lengths, CB, CT);
}
/* logits and loss over rows of three lengths (three forwards, then the rows put back in order) */
static void test_grad_classifier(void) {
    static const mf_mixer_kind mixers[] = {MF_MIXER_SDPA, MF_MIXER_POOL, MF_MIXER_LINEAR};
    size_t k;
    for (k = 0; k < sizeof mixers / sizeof mixers[0]; k++) {
        cls_case c;
        char name[64];
        gc_opts o = gc_defaults();
        o.max_per_input = GC_MODEL_SAMPLE(o.max_per_input);
        memset(&c, 0, sizeof c);
        c.cfg = classifier(mixers[k]);
        c.cfg.linear_feature = MF_FEATURE_ELU1; /* smooth (linear reads it; the others keep the default) */
        if (mixers[k] != MF_MIXER_LINEAR) c.cfg.linear_feature = MF_FEATURE_DPFP;
        snprintf(name, sizeof name, "classifier %s logits", mf_mixer_name(mixers[k]));
        MFT_CHECK(GC_OK(gc_check_params(name, cls_setup, cls_forward, &c, &o)));
        c.loss = 1; c.cfg.dropout = 0.2f;
        snprintf(name, sizeof name, "classifier %s loss + dropout", mf_mixer_name(mixers[k]));
        MFT_CHECK(GC_OK(gc_check_dir(name, cls_setup, cls_forward, &c, 6, NULL)));
        mf_model_free(c.model);
    }
}

/* a row's logits are those of the row alone (its own length, no padding), whatever the padding
   holds and whatever else is in the batch */
static void test_padding_is_never_read(void) {
    mf_ctx *ctx = mf_ctx_new(9);
    mf_model_config cfg = classifier(MF_MIXER_SDPA);
    mf_model *m;
    mf_tensor *all;
    float ref[CB * CC];
    int b, j;
    cfg.n_layers = 2;
    m = mf_model_new(ctx, &cfg);
    all = mf_model_classify_logits(m, c_ids, c_lengths, CB, CT);
    MFT_CHECK(all != NULL && all->ndim == 2 && all->shape[0] == CB && all->shape[1] == CC);
    if (!all) { printf("    %s\n", mf_error(ctx)); mf_model_free(m); mf_ctx_free(ctx); return; }
    memcpy(ref, all->data, sizeof ref);
    mf_reset(ctx);
    for (b = 0; b < CB; b++) {
        mf_tensor *one = mf_model_classify_logits(m, c_ids + b * CT, NULL, 1, c_lengths[b]);
        MFT_CHECK(one != NULL);
        for (j = 0; one && j < CC; j++) MFT_NEAR(one->data[j], ref[b * CC + j], 1e-5);
        mf_reset(ctx);
    }
    mf_model_free(m);
    mf_ctx_free(ctx);
}

/* the generated majority task of examples/classify.c in miniature: training lowers the loss */
static void test_classifier_learns(void) {
    mf_ctx *ctx = mf_ctx_new(4);
    mf_model_config cfg = classifier(MF_MIXER_SDPA);
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 1e-2f);
    mf_model *m = mf_model_new(ctx, &cfg);
    float first = 0, last = 0;
    int step, i;
    int32_t ids[16 * CT], labels[16];
    uint64_t s = 77;
    for (step = 0; step < 60 && m; step++) {
        mf_tensor *loss;
        for (i = 0; i < 16; i++) { /* tokens 0 and 1; the label: which one is more frequent */
            int t, ones = 0;
            for (t = 0; t < CT - 1; t++) { s = s * 6364136223846793005ULL + 1442695040888963407ULL; ones += ids[i * CT + t] = (int32_t)(s >> 62) & 1; }
            ids[i * CT + CT - 1] = 2;
            labels[i] = ones * 2 > CT - 1;
        }
        loss = mf_model_classify_loss(m, ids, NULL, labels, 16, CT);
        mf_backward(ctx, loss);
        mf_optimizer_step(ctx, &opt);
        if (step == 0) first = mf_item(ctx, loss);
        last = mf_item(ctx, loss);
        mf_zero_grad(ctx);
        mf_reset(ctx);
    }
    MFT_CHECK(mf_ok(ctx));
    if (!(last < 0.5f * first)) printf("    loss %g -> %g\n", (double)first, (double)last);
    MFT_CHECK(last < 0.5f * first);
    mf_model_free(m);
    mf_ctx_free(ctx);
}

/* the head is a parameter: mf_save / mf_load carry it; a language model cannot load it */
static void test_checkpoint_round_trip(void) {
    const char *path = "build/test_classify.safetensors";
    mf_model_config cfg = classifier(MF_MIXER_LINEAR), lm = mg_tiny(MF_MIXER_LINEAR);
    mf_ctx *a = mf_ctx_new(1), *b = mf_ctx_new(2), *c = mf_ctx_new(3);
    mf_model *ma = mf_model_new(a, &cfg), *mb = mf_model_new(b, &cfg), *mc;
    mf_tensor *la, *lb;
    int j;
    MFT_CHECK(mf_param_find(a, "cls.weight") && mf_param_find(a, "cls.bias") && !mf_param_find(a, "head.weight"));
    MFT_CHECK(mf_save(a, path, 0, NULL, 0) == 0);
    MFT_CHECK(mf_load(b, path, 0) == 0);
    la = mf_model_classify_logits(ma, c_ids, c_lengths, CB, CT);
    lb = mf_model_classify_logits(mb, c_ids, c_lengths, CB, CT);
    MFT_CHECK(la && lb);
    for (j = 0; la && lb && j < CB * CC; j++) MFT_CHECK(la->data[j] == lb->data[j]);
    lm.max_seq = CT; lm.n_layers = 1; lm.causal = 0;
    mc = mf_model_new(c, &lm);
    MFT_CHECK(mf_load(c, path, 0) < 0);
    MFT_CHECK(strstr(mf_error(c), "head.weight") != NULL); /* the classifier's file has no LM head */
    mf_model_free(ma); mf_model_free(mb); mf_model_free(mc);
    mf_ctx_free(a); mf_ctx_free(b); mf_ctx_free(c);
    remove(path);
}

/* ---- refusals, each with its message ---- */
static void expect_bad_config(mf_model_config c, const char *part) {
    mf_ctx *ctx = mf_ctx_new(1);
    MFT_CHECK(mf_model_new(ctx, &c) == NULL);
    if (!strstr(mf_error(ctx), part)) printf("    expected \"%s\" in: %s\n", part, mf_error(ctx));
    MFT_CHECK(strstr(mf_error(ctx), part) != NULL);
    mf_ctx_free(ctx);
}
static void test_bad_configs(void) {
    mf_model_config c;
    static const mf_mixer_kind recurrent[] = {MF_MIXER_RELATIVE, MF_MIXER_FAST_WEIGHTS, MF_MIXER_FEEDBACK, MF_MIXER_FEEDBACK_KV};
    size_t k;
    for (k = 0; k < sizeof recurrent / sizeof recurrent[0]; k++) {
        c = mg_tiny(recurrent[k]); c.pos = MF_POS_NONE; c.causal = 0;
        expect_bad_config(c, "no non-causal form");
    }
    c = mg_tiny(MF_MIXER_SDPA); c.causal = 2; expect_bad_config(c, "causal 2 must be 1");
    c = mg_tiny(MF_MIXER_POOL); c.causal = 0; c.pool_causal = 0; expect_bad_config(c, "leave it at its default 1");
    c = mg_tiny(MF_MIXER_POOL); c.causal = 0; c.pool_size = 4; expect_bad_config(c, "odd");
    c = mg_tiny(MF_MIXER_SDPA); c.n_classes = -1; expect_bad_config(c, "n_classes -1");
    c = mg_tiny(MF_MIXER_RELATIVE); c.pos = MF_POS_NONE; c.n_classes = 2; expect_bad_config(c, "relative mixer");
}
static void test_bad_calls(void) {
    mf_ctx *ctx = mf_ctx_new(1), *lctx = mf_ctx_new(1), *nctx = mf_ctx_new(1);
    mf_model_config cfg = classifier(MF_MIXER_SDPA), lm = mg_tiny(MF_MIXER_SDPA), nc = mg_tiny(MF_MIXER_SDPA);
    mf_model *m = mf_model_new(ctx, &cfg), *l, *n;
    int32_t bad_len[CB] = {6, 0, 5, 6}, long_len[CB] = {6, 7, 5, 6}, bad_lab[CB] = {0, 1, 3, 0}, neg_lab[CB] = {0, -1, 1, 0};
    int32_t prompt[2] = {1, 2}, out[4];
#define EXPECT_FAIL(call, part) do { \
        MFT_CHECK((call) == NULL); \
        if (!strstr(mf_error(ctx), part)) printf("    expected \"%s\" in: %s\n", part, mf_error(ctx)); \
        MFT_CHECK(strstr(mf_error(ctx), part) != NULL); \
        mf_clear_error(ctx); \
    } while (0)
    EXPECT_FAIL(mf_model_classify_logits(m, c_ids, bad_len, CB, CT), "lengths[1] = 0");
    EXPECT_FAIL(mf_model_classify_logits(m, c_ids, long_len, CB, CT), "lengths[1] = 7");
    EXPECT_FAIL(mf_model_classify_logits(m, c_ids, NULL, CB, CT), "outside the vocabulary"); /* padding read as tokens */
    EXPECT_FAIL(mf_model_classify_logits(m, NULL, c_lengths, CB, CT), "ids is NULL");
    EXPECT_FAIL(mf_model_classify_logits(m, c_ids, c_lengths, CB, CT + 1), "max_seq");
    EXPECT_FAIL(mf_model_classify_loss(m, c_ids, c_lengths, bad_lab, CB, CT), "labels[2] = 3");
    EXPECT_FAIL(mf_model_classify_loss(m, c_ids, c_lengths, neg_lab, CB, CT), "labels[1] = -1");
    EXPECT_FAIL(mf_model_classify_loss(m, c_ids, c_lengths, NULL, CB, CT), "labels is NULL");
    EXPECT_FAIL(mf_model_forward(m, mg_ids, MG_B, MG_T), "mf_model_classify_logits");
    MFT_CHECK(mf_model_generate(m, prompt, 2, 4, NULL, out) < 0 && strstr(mf_error(ctx), "classifier"));
    mf_clear_error(ctx);
    MFT_CHECK(mf_model_classify_logits(m, c_ids, c_lengths, CB, CT) != NULL); /* still usable */
    l = mf_model_new(lctx, &lm);
    MFT_CHECK(mf_model_classify_logits(l, mg_ids, NULL, MG_B, MG_T) == NULL && strstr(mf_error(lctx), "n_classes = 0"));
    nc.causal = 0;
    n = mf_model_new(nctx, &nc);
    MFT_CHECK(mf_model_generate(n, prompt, 2, 4, NULL, out) < 0 && strstr(mf_error(nctx), "non-causal"));
    MFT_CHECK(mf_model_classify_logits(NULL, c_ids, NULL, CB, CT) == NULL);
#undef EXPECT_FAIL
    mf_model_free(m); mf_model_free(l); mf_model_free(n);
    mf_ctx_free(ctx); mf_ctx_free(lctx); mf_ctx_free(nctx);
}

int main(void) {
    MFT_RUN(test_bad_configs);
    MFT_RUN(test_bad_calls);
    MFT_RUN(test_last_position_agrees);
    MFT_RUN(test_padding_is_never_read);
    MFT_RUN(test_checkpoint_round_trip);
    MFT_RUN(test_classifier_learns);
    MFT_RUN(test_grad_sdpa);
    MFT_RUN(test_grad_metric);
    MFT_RUN(test_grad_quadratic);
    MFT_RUN(test_grad_pool);
    MFT_RUN(test_grad_linear_dpfp);
    MFT_RUN(test_grad_linear_elu1);
    MFT_RUN(test_grad_classifier);
    return mft_finish();
}
