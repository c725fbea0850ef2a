/* The MetaFormer model: gradient checks of every mixer (elementwise on every parameter of a tiny
   model - a sample of each under ASan, see GC_MODEL_SAMPLE - and directional on the loss with
   dropout), and config validation. */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#include "mf_test.h"
#include "model_grad.h"
#include <string.h>

static void check_mixer(mf_mixer_kind mixer, mf_pos_kind pos, int pool_causal) {
    mg_case c;
    memset(&c, 0, sizeof c);
    c.cfg = mg_tiny(mixer);
    c.cfg.pos = pos;
    c.cfg.pool_causal = pool_causal;
    MFT_CHECK(mg_check_logits(mf_mixer_name(mixer), &c));
    c.cfg.dropout = 0.2f; /* the whole model through the loss, with dropout: directional */
    MFT_CHECK(mg_check_loss(mf_mixer_name(mixer), "loss + dropout", &c, 6));
    mf_model_free(c.model);
}

static void test_grad_sdpa(void) { check_mixer(MF_MIXER_SDPA, MF_POS_LEARNED, 1); }
static void test_grad_metric(void) { check_mixer(MF_MIXER_METRIC, MF_POS_LEARNED, 1); }
static void test_grad_quadratic(void) { check_mixer(MF_MIXER_QUADRATIC, MF_POS_SINUSOIDAL, 1); }
/* the seed's metric forms (docs/math.md §9.10): M = L L^T and M = S S^T */
static void check_metric_form(mf_metric_form form) {
    mg_case c;
    char what[64];
    memset(&c, 0, sizeof c);
    c.cfg = mg_tiny(MF_MIXER_METRIC);
    c.cfg.metric_form = form;
    snprintf(what, sizeof what, "metric %s", mf_metric_form_name(form));
    MFT_CHECK(mg_check_logits(what, &c));
    c.cfg.dropout = 0.2f;
    MFT_CHECK(mg_check_loss(what, "loss + dropout", &c, 6));
    mf_model_free(c.model);
}
static void test_grad_metric_cholesky(void) { check_metric_form(MF_METRIC_CHOLESKY); }
static void test_grad_metric_softmax_tril(void) { check_metric_form(MF_METRIC_SOFTMAX_TRIL); }

/* Two independent computations of M agree: the forward's (ops on the parameter) and
   mf_model_attention_form's (loops on the host). A symmetric-form model given the other model's M
   (its upper triangle) and every other parameter gives the same logits; and M is positive
   semi-definite, as the form promises (x M x^T >= 0). */
static void check_form_consistency(mf_metric_form form) {
    mf_ctx *a = mf_ctx_new(11), *b = mf_ctx_new(12);
    mf_model_config ca = mg_tiny(MF_MIXER_METRIC), cb = mg_tiny(MF_MIXER_METRIC);
    mf_model *ma, *mb;
    mf_tensor *ya, *yb;
    int H = ca.n_heads, dk = ca.d_model / H, i, l, h, r, k, psd = 1;
    float M[4 * 4 * 2], tri[2 * 10];
    double worst = 0;
    ca.metric_form = form;
    ma = mf_model_new(a, &ca); mb = mf_model_new(b, &cb);
    MFT_CHECK(ma && mb && H * dk * dk <= (int)(sizeof M / sizeof M[0]));
    if (!ma || !mb) { mf_model_free(ma); mf_model_free(mb); mf_ctx_free(a); mf_ctx_free(b); return; }
    for (i = 0; i < mf_param_tensors(b); i++) { /* every parameter of the same name */
        mf_tensor *t = mf_param_at(b, i), *src = mf_param_find(a, t->name);
        if (src && src->ne == t->ne) memcpy(t->data, src->data, sizeof(float) * (size_t)t->ne);
    }
    for (l = 0; l < ca.n_layers; l++) {
        char name[64];
        MFT_CHECK(mf_model_attention_form(ma, l, MF_ATTN_FORM_HEAD, M) == 0);
        for (h = 0; h < H; h++) { /* the upper triangle, row-major, and x M x^T for a few x */
            float *t = tri + h * dk * (dk + 1) / 2;
            for (r = 0; r < dk; r++) for (k = r; k < dk; k++) *t++ = M[(h * dk + r) * dk + k];
            for (r = 0; r < 7; r++) {
                double x[4], q = 0;
                for (k = 0; k < dk; k++) x[k] = sin(1.7 * (r * dk + k) + h + l);
                for (k = 0; k < dk; k++) for (i = 0; i < dk; i++) q += x[k] * M[(h * dk + k) * dk + i] * x[i];
                psd &= q >= -1e-6;
            }
        }
        snprintf(name, sizeof name, "layers.%d.attn.metric", l);
        memcpy(mf_param_find(b, name)->data, tri, sizeof(float) * (size_t)(H * dk * (dk + 1) / 2));
    }
    ya = mf_model_forward(ma, mg_ids, MG_B, MG_T); yb = mf_model_forward(mb, mg_ids, MG_B, MG_T);
    MFT_CHECK(ya && yb);
    for (i = 0; ya && yb && i < MG_B * MG_T * MG_V; i++) {
        double e = fabs((double)ya->data[i] - yb->data[i]) / (1.0 + fabs((double)yb->data[i]));
        if (e > worst) worst = e;
    }
    /* fp32: M by different sums (ops vs double loops), then two layers: ~100 ulp */
    if (!(worst < 1e-5 && psd)) { printf("    %s: logits differ by %.3g (relative), M positive semi-definite: %d\n",
                                         mf_metric_form_name(form), worst, psd); MFT_CHECK(0); }
    mf_model_free(ma); mf_model_free(mb); mf_ctx_free(a); mf_ctx_free(b);
}
static void test_metric_forms(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    mf_model_config c = mg_tiny(MF_MIXER_METRIC);
    check_form_consistency(MF_METRIC_CHOLESKY);
    check_form_consistency(MF_METRIC_SOFTMAX_TRIL);
    MFT_CHECK(strcmp(mf_metric_form_name(MF_METRIC_SOFTMAX_TRIL), "softmax_tril") == 0 && mf_metric_form_from_name("cholesky") == 1);
    c.metric_form = (mf_metric_form)7;
    MFT_CHECK(mf_model_check(ctx, &c) == -1 && strstr(mf_error(ctx), "unknown metric_form 7"));
    mf_clear_error(ctx);
    c = mg_tiny(MF_MIXER_SDPA);
    c.metric_form = MF_METRIC_CHOLESKY; /* another mixer's field */
    MFT_CHECK(mf_model_check(ctx, &c) == -1 && strstr(mf_error(ctx), "metric_form = 1 applies only to the metric mixer"));
    mf_ctx_free(ctx);
}
static void test_grad_pool_causal(void) { check_mixer(MF_MIXER_POOL, MF_POS_LEARNED, 1); }
static void test_grad_pool_centred(void) { check_mixer(MF_MIXER_POOL, MF_POS_NONE, 0); }
static void test_grad_identity(void) { check_mixer(MF_MIXER_IDENTITY, MF_POS_LEARNED, 1); }

/* the metric M is symmetric: swapping the roles of two keys' p leaves the score unchanged, and
   the gradient of the upper-triangle parameter folds both off-diagonal entries */
static void test_metric_is_symmetric(void) {
    mf_ctx *ctx = mf_ctx_new(5);
    mf_model_config cfg = mg_tiny(MF_MIXER_METRIC);
    mf_model *m = mf_model_new(ctx, &cfg);
    mf_tensor *mbar = mf_param_find(ctx, "layers.0.attn.metric");
    MFT_CHECK(mbar != NULL && mbar->shape[0] == 2 && mbar->shape[1] == 4 * 5 / 2);
    MFT_CHECK(mf_param_find(ctx, "layers.0.attn.p.bias") == NULL); /* Wp and E are bias-free */
    MFT_CHECK(mf_param_find(ctx, "layers.0.attn.e.bias") == NULL);
    mf_model_free(m);
    mf_ctx_free(ctx);
}

/* Recycled activation gradients (mf_set_keep_activation_grads(ctx, 0)) train every mixer to the
   same bits as kept ones: losses, parameters, and no activation gradient left afterwards */
static void run_steps(mf_mixer_kind mixer, int keep, float *losses, float **params, int64_t *np) {
    mf_ctx *ctx = mf_ctx_new(11);
    mf_model_config cfg = mg_tiny(mixer);
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 1e-2f);
    mf_model *m;
    int step;
    cfg.dropout = 0.1f;
    if (mixer >= MF_MIXER_RELATIVE) cfg.pos = MF_POS_NONE; /* the seeds' models */
    if (mixer == MF_MIXER_RELATIVE) cfg.mem_len = 4;
    mf_set_keep_activation_grads(ctx, keep);
    m = mf_model_new(ctx, &cfg);
    MFT_CHECK(m != NULL);
    if (!m) { printf("    %s: %s\n", mf_mixer_name(mixer), mf_error(ctx)); mf_ctx_free(ctx); return; }
    for (step = 0; step < 3; step++) {
        mf_tensor *loss = mf_model_loss(m, mg_ids, mg_targets, MG_B, MG_T);
        mf_zero_grad(ctx);
        MFT_CHECK(loss && mf_backward(ctx, loss) == 0);
        if (!loss) break;
        losses[step] = loss->data[0];
        MFT_CHECK(keep ? loss->grad != NULL : loss->grad == NULL);
        mf_clip_grad_norm(ctx, 1.0f);
        mf_optimizer_step(ctx, &opt);
        mf_reset(ctx);
    }
    *np = mf_param_count(ctx);
    *params = (float *)malloc((size_t)*np * sizeof(float));
    memcpy(*params, mf_param_data(ctx), (size_t)*np * sizeof(float));
    MFT_CHECK(mf_ok(ctx));
    mf_model_free(m);
    mf_ctx_free(ctx);
}
static void test_recycled_activation_grads(void) {
    int mixer;
    for (mixer = 0; mixer < MF_MIXER_COUNT; mixer++) {
        float l1[3] = {0, 0, 0}, l2[3] = {1, 1, 1}, *p1 = NULL, *p2 = NULL;
        int64_t n1 = 0, n2 = 0;
        run_steps((mf_mixer_kind)mixer, 1, l1, &p1, &n1);
        run_steps((mf_mixer_kind)mixer, 0, l2, &p2, &n2);
        MFT_CHECK(!memcmp(l1, l2, sizeof l1));
        MFT_CHECK(n1 == n2 && p1 && p2 && !memcmp(p1, p2, (size_t)n1 * sizeof(float)));
        if (memcmp(l1, l2, sizeof l1)) printf("    %s: losses differ\n", mf_mixer_name((mf_mixer_kind)mixer));
        free(p1); free(p2);
    }
}

static void expect_bad(mf_model_config c, const char *phrase) {
    mf_ctx *ctx = mf_ctx_new(1);
    MFT_CHECK(mf_model_new(ctx, &c) == NULL);
    MFT_CHECK(strstr(mf_error(ctx), phrase) != NULL);
    printf("    msg: %s\n", mf_error(ctx));
    mf_ctx_free(ctx);
}
static void test_bad_configs(void) {
    mf_model_config c = mg_tiny(MF_MIXER_SDPA);
    mf_ctx *ctx = mf_ctx_new(1);
    mf_model *m;
    c.d_model = 10; c.n_heads = 4; expect_bad(c, "not divisible by n_heads");
    c = mg_tiny(MF_MIXER_SDPA); c.vocab = 0; expect_bad(c, "vocab");
    c = mg_tiny(MF_MIXER_POOL); c.pool_causal = 0; c.pool_size = 4; expect_bad(c, "odd");
    c = mg_tiny(MF_MIXER_SDPA); c.dropout = 1.0f; expect_bad(c, "dropout");
    c = mg_tiny(MF_MIXER_SDPA); c.mixer = (mf_mixer_kind)42; expect_bad(c, "unknown mixer");
    c = mg_tiny(MF_MIXER_POOL); c.d_model = 10; c.n_heads = 4; /* pool has no heads: fine */
    m = mf_model_new(ctx, &c);
    MFT_CHECK(m != NULL);
    MFT_CHECK(mf_model_forward(m, mg_ids, MG_B, 9) == NULL); /* T > max_seq */
    MFT_CHECK(strstr(mf_error(ctx), "max_seq") != NULL);
    printf("    msg: %s\n", mf_error(ctx));
    mf_model_free(m);
    mf_ctx_free(ctx);
    MFT_CHECK(mf_mixer_from_name("metric") == MF_MIXER_METRIC && mf_mixer_from_name("nope") == -1);
    MFT_CHECK(strcmp(mf_mixer_name(MF_MIXER_POOL), "pool") == 0);
}


/* the mixer-specific config fields: a mixer that does not read one refuses a non-default value,
   naming the field, its value and the mixers that read it; the defaults suit every mixer */
enum { SDPA = 1 << MF_MIXER_SDPA, POOL = 1 << MF_MIXER_POOL, REL = 1 << MF_MIXER_RELATIVE,
       FW = 1 << MF_MIXER_FAST_WEIGHTS, LIN = 1 << MF_MIXER_LINEAR };
static const struct { const char *set; unsigned readers; const char *only; } FIELDS[] = {
    {"attn_bias = 0", SDPA, "the sdpa mixer"}, {"pool_size = 5", POOL, "the pool mixer"},
    {"pool_causal = 0", POOL, "the pool mixer"}, {"mem_len = 4", REL, "the relative mixer"},
    {"compressive = 1", REL, "the relative mixer"}, {"c_mem_len = 3", REL, "the relative mixer"},
    {"compression_rate = 3", REL, "the relative mixer"}, {"dpfp_nu = 2", FW | LIN, "the fast_weights and linear mixers"},
    {"linear_feature = 1", LIN, "the linear mixer"}, {"chunk_size = 4", FW | LIN, "the fast_weights and linear mixers"}};
static void set_field(mf_model_config *c, int f) {
    switch (f) {
    case 0: c->attn_bias = 0; break;
    case 1: c->pool_size = 5; break;
    case 2: c->pool_causal = 0; break;
    case 3: c->mem_len = 4; break;
    case 4: c->compressive = 1; break;
    case 5: c->c_mem_len = 3; break;
    case 6: c->compression_rate = 3; break;
    case 7: c->dpfp_nu = 2; break;
    case 8: c->linear_feature = MF_FEATURE_ELU1; break;
    default: c->chunk_size = 4; break;
    }
}
static void test_config_fields(void) {
    int k, f;
    for (k = 0; k < MF_MIXER_COUNT; k++) { /* the defaults: every mixer builds and runs */
        mf_model_config c = mg_tiny((mf_mixer_kind)k);
        mf_ctx *ctx = mf_ctx_new(1);
        mf_model *m = mf_model_new(ctx, &c);
        MFT_CHECK(m != NULL && mf_model_forward(m, mg_ids, MG_B, MG_T) != NULL);
        if (!mf_ok(ctx)) printf("    %s: %s\n", mf_mixer_name((mf_mixer_kind)k), mf_error(ctx));
        mf_model_free(m);
        mf_ctx_free(ctx);
    }
    for (f = 0; f < (int)(sizeof FIELDS / sizeof FIELDS[0]); f++)
        for (k = 0; k < MF_MIXER_COUNT; k++) {
            mf_model_config c = mg_tiny((mf_mixer_kind)k);
            mf_ctx *ctx = mf_ctx_new(1);
            char want[160];
            int refused;
            set_field(&c, f);
            refused = mf_model_check(ctx, &c) < 0 && strstr(mf_error(ctx), "applies only to") != NULL;
            snprintf(want, sizeof want, "model config: %s applies only to %s (set it to ", FIELDS[f].set, FIELDS[f].only);
            if (FIELDS[f].readers >> k & 1u) MFT_CHECK(!refused);
            else {
                MFT_CHECK(refused && strstr(mf_error(ctx), want) != NULL);
                if (!refused || !strstr(mf_error(ctx), want))
                    printf("    %s with %s: %s\n", FIELDS[f].set, mf_mixer_name((mf_mixer_kind)k), mf_error(ctx));
            }
            { /* mf_model_config_reset_unread: a field the mixer reads stays, another goes back to its default */
                mf_model_config r = c, d = mg_tiny((mf_mixer_kind)k);
                mf_ctx *probe = mf_ctx_new(1);
                mf_model_config_reset_unread(&r);
                MFT_CHECK(memcmp(&r, FIELDS[f].readers >> k & 1u ? &c : &d, sizeof r) == 0);
                if (!(FIELDS[f].readers >> k & 1u)) MFT_CHECK(mf_model_check(probe, &r) == 0);
                mf_ctx_free(probe);
            }
            mf_ctx_free(ctx);
        }
    { /* the whole message of one */
        mf_model_config c = mg_tiny(MF_MIXER_SDPA);
        c.compressive = 1;
        expect_bad(c, "model config: compressive = 1 applies only to the relative mixer (set it to 0, or choose mixer "
                      "relative); the sdpa mixer does not read it");
    }
}

/* the mixer table: a row per kind in enum order, each row's fields read by its family, names that
   round-trip; the names of the other enums */
static void test_mixer_table(void) {
    int k;
    for (k = 0; k < MF_MIXER_COUNT; k++) {
        const mf__mixer_row *r = mf__mixer_row_of(k);
        MFT_CHECK(r && (int)r->kind == k && r->family && (r->fields & ~r->family->fields) == 0);
        MFT_CHECK(mf_mixer_from_name(mf_mixer_name((mf_mixer_kind)k)) == k && mf_mixer_compiled((mf_mixer_kind)k));
        MFT_CHECK(!(r->flags & MF__MIX_PRE_LN) || (r->flags & MF__MIX_LN1));
        MFT_CHECK(!r->family->run_stack != !r->family->mixer || (r->flags & MF__MIX_SKIP));
    }
    MFT_CHECK(mf__mixer_row_of(MF_MIXER_COUNT) == NULL && strcmp(mf_mixer_name(MF_MIXER_COUNT), "unknown") == 0);
    MFT_CHECK(!mf_mixer_compiled(MF_MIXER_COUNT) && mf_mixer_from_name(NULL) == -1);
    MFT_CHECK(mf_pos_from_name("sinusoidal") == MF_POS_SINUSOIDAL && strcmp(mf_pos_name(MF_POS_NONE), "none") == 0);
    MFT_CHECK(mf_act_from_name("gelu_tanh") == MF_ACT_GELU_TANH && strcmp(mf_act_name(MF_ACT_SILU), "silu") == 0);
    MFT_CHECK(mf_feature_from_name("elu1") == MF_FEATURE_ELU1 && strcmp(mf_feature_name(MF_FEATURE_DPFP), "dpfp") == 0);
    MFT_CHECK(mf_pos_from_name("rope") == -1 && mf_act_from_name("") == -1 && mf_feature_from_name("x") == -1);
    MFT_CHECK(strcmp(mf_pos_name((mf_pos_kind)3), "unknown") == 0 && strcmp(mf_act_name((mf_act_kind)-1), "unknown") == 0);
}

/* clone_layers: every parameter of every layer starts as layer 0's (all of them, however many a
   layer has: compressive relative has the most) */
static void test_clone_every_parameter(void) {
    int k;
    for (k = 0; k <= MF_MIXER_COUNT; k++) {
        mf_model_config c = mg_tiny(k == MF_MIXER_COUNT ? MF_MIXER_RELATIVE : (mf_mixer_kind)k);
        mf_ctx *ctx = mf_ctx_new(3);
        mf_model *m;
        int i, n0 = 0, same = 1;
        c.n_layers = 3; c.clone_layers = 1;
        if (k == MF_MIXER_COUNT) { c.compressive = 1; c.mem_len = 4; c.c_mem_len = 2; }
        m = mf_model_new(ctx, &c);
        MFT_CHECK(m != NULL);
        for (i = 0; m && i < mf_param_tensors(ctx); i++) {
            const mf_tensor *p = mf_param_at(ctx, i);
            char name[96];
            int l;
            if (strncmp(p->name, "layers.0.", 9) != 0) continue;
            n0++;
            for (l = 1; l < 3; l++) {
                const mf_tensor *q;
                snprintf(name, sizeof name, "layers.%d.%s", l, p->name + 9);
                q = mf_param_find(ctx, name);
                same &= q && q->ne == p->ne && memcmp(q->data, p->data, (size_t)p->ne * sizeof(float)) == 0;
            }
        }
        MFT_CHECK(same && n0 == (m ? m->layers[0].np : -1) && n0 >= 6);
        if (!same) printf("    %s: a parameter of a later layer differs from layer 0's\n", mf_mixer_name(c.mixer));
        mf_model_free(m);
        mf_ctx_free(ctx);
    }
}

/* mf_param_values counts the values of the parameters (the model's size), mf_param_count the flat
   buffer with its alignment gaps; a frozen parameter leaves the trainable count */
static void test_param_values(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    mf_model_config c = mg_tiny(MF_MIXER_SDPA);
    int D = 8, V = MG_V, F = 12, layer = 2 * D + (4 * D * D + 4 * D) + 2 * D + (D * F + F) + (F * D + D);
    int64_t want = (int64_t)V * D + 8 * D + 2 * layer + 2 * D + (V * D + V); /* tok, pos (max_seq 8), layers, ln_f, head */
    mf_model *m = mf_model_new(ctx, &c);
    MFT_CHECK(m && mf_param_values(ctx, 0) == want && mf_param_values(ctx, 1) == want);
    MFT_CHECK(mf_param_count(ctx) > want); /* with the gaps that align each tensor to 16 floats */
    mf_param_set_trainable(mf_param_find(ctx, "head.bias"), 0);
    MFT_CHECK(mf_param_values(ctx, 1) == want - V && mf_param_values(ctx, 0) == want);
    MFT_CHECK(mf_param_values(NULL, 0) == 0);
    mf_model_free(m);
    mf_ctx_free(ctx);
}

int main(void) {
    MFT_RUN(test_param_values);
    MFT_RUN(test_grad_sdpa);
    MFT_RUN(test_grad_metric);
    MFT_RUN(test_grad_quadratic);
    MFT_RUN(test_grad_metric_cholesky);
    MFT_RUN(test_grad_metric_softmax_tril);
    MFT_RUN(test_metric_forms);
    MFT_RUN(test_grad_pool_causal);
    MFT_RUN(test_grad_pool_centred);
    MFT_RUN(test_grad_identity);
    MFT_RUN(test_metric_is_symmetric);
    MFT_RUN(test_bad_configs);
    MFT_RUN(test_recycled_activation_grads);
    MFT_RUN(test_config_fields);
    MFT_RUN(test_mixer_table);
    MFT_RUN(test_clone_every_parameter);
    return mft_finish();
}
