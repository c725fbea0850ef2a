/* test_custom_mixer.c - the public mixer API (docs/math.md §23) through examples/custom_mixer.c's
   ALiBi mixer and two small mixers defined here: registration and its refusals, the config fields,
   the gradient by finite differences, the forward against a plain loop, causality, training, save and
   resume bit for bit, checkpoints refused by another mixer, generation with and without a gen_step
   hook, a mixer with memories (slots, reset, checkpoints), whole-stack recurrences (run_stack), classification, and a forward of the wrong
   shape. The CUDA parity of the same mixer is
   tests/test_cuda_custom.cpp. */
#include "metaformer.h"
#include "mf_test.h"
#include "model_grad.h"
#define CUSTOM_MIXER_NO_MAIN
#include "examples/custom_mixer.c"
#include "test_mixers.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

static int ALIBI = -1; /* the kind of examples/custom_mixer.c's mixer */

static mf_model_config alibi_tiny(void) {
    mf_model_config c = mg_tiny((mf_mixer_kind)ALIBI);
    c.pos = MF_POS_NONE;
    return c;
}

/* ---- registration ---- */
static void dummy_make(mf_model *m, int l, void *st) { (void)m; (void)l; (void)st; }
static mf_tensor *dummy_forward(mf_model *m, int l, void *st, mf_tensor *x) { (void)m; (void)l; (void)st; return x; }
static int dummy_begin(mf_model *m, int l, void *st) { (void)m; (void)l; (void)st; return 0; }
/* mf_mixer_register(d) fails with a message that contains want */
static void refused(const mf_mixer_def *d, const char *want) {
    char err[256];
    int n = mf_mixer_count();
    MFT_CHECK(mf_mixer_register(d, err, sizeof err) == -1 && mf_mixer_count() == n);
    if (!strstr(err, want)) { printf("    expected \"%s\" in: %s\n", want, err); MFT_CHECK(0); }
}
static void test_register(void) {
    static const mf_mixer_field bad_default[] = {{"w", 5.0f, 0.0f, 1.0f, 0, "w"}};
    static const mf_mixer_field twice[] = {{"w", 0.0f, 0.0f, 1.0f, 0, "w"}, {"w", 0.0f, 0.0f, 1.0f, 0, "w"}};
    static const mf_mixer_field half[] = {{"n", 0.5f, 0.0f, 1.0f, 1, "n"}};
    mf_mixer_def d;
    const mf_mixer_field *f;
    MFT_CHECK(ALIBI >= MF_MIXER_COUNT && mf_mixer_count() >= ALIBI + 1);
    MFT_CHECK(strcmp(mf_mixer_name((mf_mixer_kind)ALIBI), "alibi") == 0 && mf_mixer_from_name("alibi") == ALIBI);
    MFT_CHECK(mf_mixer_compiled((mf_mixer_kind)ALIBI) && strstr(mf_mixer_help((mf_mixer_kind)ALIBI), "Press"));
    MFT_CHECK(strstr(mf_mixer_help(MF_MIXER_SDPA), "attention") != NULL && strcmp(mf_mixer_help((mf_mixer_kind)-1), "") == 0);
    f = mf_mixer_field_of((mf_mixer_kind)ALIBI, 0);
    MFT_CHECK(f && strcmp(f->name, "alibi_max") == 0 && f->def == 8.0f);
    MFT_CHECK(!mf_mixer_field_of((mf_mixer_kind)ALIBI, 1) && !mf_mixer_field_of(MF_MIXER_SDPA, 0));
    MFT_CHECK(custom_mixer_register() == ALIBI); /* the same definition again: the same kind */
    memset(&d, 0, sizeof d);
    d.name = "sdpa"; d.help = "x"; d.make_layer = dummy_make; d.forward = dummy_forward;
    refused(&d, "is taken (a built-in mixer)");
    d.name = "alibi";
    refused(&d, "registered before with other hooks");
    d.name = "Big";
    refused(&d, "must be 1 to 31 of a-z");
    d.name = "ok_name"; d.forward = NULL;
    refused(&d, "needs forward");
    d.forward = dummy_forward; d.help = NULL;
    refused(&d, "needs help");
    d.help = "x"; d.gen_begin = dummy_begin;
    refused(&d, "gen_begin without gen_step");
    d.gen_begin = NULL; d.flags = MF_MIXER_FIXED_STATE;
    refused(&d, "MF_MIXER_FIXED_STATE needs gen_step");
    d.flags = 64;
    refused(&d, "are not MF_MIXER_HEADS, _NONCAUSAL, _FIXED_STATE or _OWN_NORM");
    d.flags = 0; d.n_fields = 1; d.fields = bad_default;
    refused(&d, "default 5 is not a number in its range [0, 1]");
    d.n_fields = 2; d.fields = twice;
    refused(&d, "two fields named w");
    d.n_fields = 1; d.fields = half;
    refused(&d, "default 0.5 is not a whole number");
    d.n_fields = MF_MIXER_MAX_FIELDS + 1;
    refused(&d, "n_fields 9 must be 0 .. 8");
    MFT_CHECK(mf_mixer_register(NULL, NULL, 0) == -1);
}

/* ---- config fields ---- */
/* the library's table of the mixers' fields (MF_MODEL_FIELDS) at run time: defaults in range and
   equal to mf_model_config_default's, get / set, an enum's names, a reader each, and the range
   enforced by mf_model_check on a mixer that reads the field */
static void test_field_table(void) {
    mf_model_config d = mf_model_config_default(), a;
    mf_mixer_def def;
    mf_ctx *ctx = mf_ctx_new(1);
    int i, k, n;
    MFT_CHECK(mf_config_field_at(-1) == NULL && mf_config_field_at(MF_FIELD_COUNT) == NULL && MF_FIELD_COUNT >= 12);
    for (i = 0; i < MF_FIELD_COUNT; i++) {
        const mf_config_field *f = mf_config_field_at(i);
        mf_model_config c = d;
        char who[256];
        int reader = -1;
        MFT_CHECK(f && f->lo <= f->def && f->def <= f->hi && mf_config_field_get(&d, i) == f->def);
        MFT_CHECK(mf_config_field_set(&c, i, f->lo) == 0 && mf_config_field_get(&c, i) == f->lo);
        for (k = 0; k < MF_MIXER_COUNT && reader < 0; k++) if (mf_mixer_reads((mf_mixer_kind)k, i)) reader = k;
        n = mf_config_field_readers(i, who, sizeof who);
        MFT_CHECK(reader >= 0 && n >= 1 && strstr(who, mf_mixer_name((mf_mixer_kind)reader)));
        for (k = 0; mf_config_field_choice(i, k); k++) {}
        MFT_CHECK(f->kind == MF_CFG_ENUM ? k == (int)f->hi + 1 : k == 0);
        if (f->hi < 1e9 && f->kind != MF_CFG_FLOAT && mf_mixer_compiled((mf_mixer_kind)reader)) { /* one past the range */
            c = d; c.vocab = 5; c.mixer = (mf_mixer_kind)reader;
            mf_config_field_set(&c, i, f->hi + 1);
            MFT_CHECK(mf_model_check(ctx, &c) == -1 && strstr(mf_error(ctx), f->name));
            if (!strstr(mf_error(ctx), f->name)) printf("    %s: %s\n", f->name, mf_error(ctx));
            mf_clear_error(ctx);
        }
    }
    /* a registered mixer that reads a field of the table: allowed there, kept by reset_unread */
    a = alibi_tiny();
    a.attn_dropout = 0.1f; a.pool_size = 5;
    mf_model_config_reset_unread(&a);
    MFT_CHECK(a.attn_dropout == 0.1f && a.pool_size == d.pool_size && mf_model_check(ctx, &a) == 0);
    MFT_CHECK(mf_mixer_reads((mf_mixer_kind)ALIBI, MF_FIELD_ATTN_DROPOUT) && !mf_mixer_reads((mf_mixer_kind)ALIBI, MF_FIELD_POOL_SIZE));
    a.pool_size = 5;
    MFT_CHECK(mf_model_check(ctx, &a) == -1 && strstr(mf_error(ctx), "pool_size = 5 applies only to the pool mixer"));
    mf_clear_error(ctx);
    memset(&def, 0, sizeof def);
    def.name = "bad_fields"; def.help = "-"; def.make_layer = dummy_make; def.forward = dummy_forward;
    def.model_fields = 1u << MF_FIELD_COMPRESSIVE;
    refused(&def, "model_fields bit 1 is a variant of another mixer");
    def.model_fields = 1u << MF_FIELD_COUNT;
    refused(&def, "is not a field of MF_MODEL_FIELDS");
    mf_ctx_free(ctx);
}
static void test_fields(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    mf_model_config c = alibi_tiny(), s = mg_tiny(MF_MIXER_SDPA);
    MFT_CHECK(mf_model_config_get(&c, "alibi_max") == 8.0f);
    MFT_CHECK(mf_model_config_set(&c, "alibi_max", 4.0f) == 0 && mf_model_config_get(&c, "alibi_max") == 4.0f);
    MFT_CHECK(mf_model_config_set(&c, "nope", 1.0f) == -1 && isnan(mf_model_config_get(&c, "nope")));
    MFT_CHECK(mf_model_config_set(&s, "alibi_max", 1.0f) == -1); /* sdpa has no such field */
    MFT_CHECK(mf_model_check(ctx, &c) == 0);
    mf_model_config_set(&c, "alibi_max", 40.0f);
    MFT_CHECK(mf_model_check(ctx, &c) == -1 && strstr(mf_error(ctx), "alibi_max = 40 must be a number in [0, 32]"));
    mf_clear_error(ctx);
    c = alibi_tiny();
    c.mixer_field_set = 2; /* a field past the mixer's one */
    MFT_CHECK(mf_model_check(ctx, &c) == -1 && strstr(mf_error(ctx), "marks fields past the 1 of the alibi mixer"));
    mf_clear_error(ctx);
    s.mixer_field_set = 1;
    MFT_CHECK(mf_model_check(ctx, &s) == -1 && strstr(mf_error(ctx), "the sdpa mixer is built in"));
    mf_clear_error(ctx);
    c = alibi_tiny();
    c.n_heads = 3; /* MF_MIXER_HEADS: the heads must divide d_model */
    MFT_CHECK(mf_model_check(ctx, &c) == -1 && strstr(mf_error(ctx), "not divisible by n_heads 3"));
    mf_clear_error(ctx);
    c = alibi_tiny();
    c.pool_size = 5; /* a built-in mixer's field */
    MFT_CHECK(mf_model_check(ctx, &c) == -1 && strstr(mf_error(ctx), "the alibi mixer does not read it"));
    mf_clear_error(ctx);
    c = alibi_tiny();
    c.causal = 0; /* MF_MIXER_NONCAUSAL */
    MFT_CHECK(mf_model_check(ctx, &c) == 0);
    mf_ctx_free(ctx);
}

/* ---- the gradient: every parameter element of the logits, the loss with dropout ---- */
static void test_grad(void) {
    mg_case c;
    memset(&c, 0, sizeof c);
    c.cfg = alibi_tiny();
    mf_model_config_set(&c.cfg, "alibi_max", 4.0f); /* steeper slopes for 2 heads: the bias matters */
    MFT_CHECK(mg_check_logits("alibi", &c));
    c.cfg.dropout = 0.2f;
    MFT_CHECK(mg_check_loss("alibi", "loss + dropout", &c, 6));
    c.cfg.dropout = 0.0f; c.cfg.attn_dropout = 0.2f; /* a field of the library's table it reads (model_fields) */
    MFT_CHECK(mg_check_loss("alibi", "loss + attention dropout", &c, 6));
    c.cfg.attn_dropout = 0.0f;
    c.cfg.dropout = 0.0f; c.cfg.causal = 0;
    MFT_CHECK(mg_check_logits("alibi non-causal", &c));
    mf_model_free(c.model);
}

/* ---- the forward of one layer against loops in double: the paper's scores, slopes and mask ---- */
static void check_reference(int causal) {
    enum { B = 2, T = 6, D = 8, H = 2, DK = 4 };
    mf_ctx *ctx = mf_ctx_new(5);
    mf_model_config c = alibi_tiny();
    mf_model *m;
    alibi_layer L;
    float xs[B * T * D];
    int shape[3] = {B, T, D}, b, h, i, j, e, f;
    double worst = 0;
    mf_tensor *x, *y;
    c.n_layers = 1; c.causal = causal;
    mf_model_config_set(&c, "alibi_max", 3.0f);
    m = mf_model_new(ctx, &c);
    L.wqkv = mf_param_find(ctx, "layers.0.attn.qkv.weight");
    L.wo = mf_param_find(ctx, "layers.0.attn.out.weight");
    L.bo = mf_param_find(ctx, "layers.0.attn.out.bias");
    MFT_CHECK(m && L.wqkv && L.wo && L.bo);
    if (!m || !L.wqkv) { mf_ctx_free(ctx); return; }
    for (i = 0; i < B * T * D; i++) xs[i] = (float)sin(0.7 * i + 0.3);
    x = mf_from(ctx, 3, shape, xs);
    y = alibi_forward(m, 0, &L, x);
    MFT_CHECK(y && y->ndim == 3 && y->shape[2] == D);
    for (b = 0; y && b < B; b++)
        for (i = 0; i < T; i++) {
            double o[D] = {0}, qkv[T][3 * D];
            for (j = 0; j < T; j++)
                for (f = 0; f < 3 * D; f++) {
                    qkv[j][f] = 0;
                    for (e = 0; e < D; e++) qkv[j][f] += (double)L.wqkv->data[f * D + e] * xs[(b * T + j) * D + e];
                }
            for (h = 0; h < H; h++) {
                double s[T], mx = -1e300, z = 0, slope = pow(2.0, -3.0 * (h + 1) / H);
                for (j = 0; j < T; j++) {
                    s[j] = 0;
                    for (e = 0; e < DK; e++) s[j] += qkv[i][h * DK + e] * qkv[j][D + h * DK + e];
                    s[j] = s[j] / sqrt((double)DK) - slope * fabs((double)(i - j));
                    if (causal && j > i) s[j] = -1e300;
                    if (s[j] > mx) mx = s[j];
                }
                for (j = 0; j < T; j++) z += s[j] > -1e299 ? exp(s[j] - mx) : 0;
                for (j = 0; j < T; j++) {
                    double p = s[j] > -1e299 ? exp(s[j] - mx) / z : 0;
                    for (e = 0; e < DK; e++) {
                        double v = qkv[j][2 * D + h * DK + e];
                        for (f = 0; f < D; f++) o[f] += p * v * L.wo->data[f * D + h * DK + e];
                    }
                }
            }
            for (f = 0; f < D; f++) {
                double want = o[f] + L.bo->data[f], got = y->data[(b * T + i) * D + f];
                if (fabs(got - want) / (1.0 + fabs(want)) > worst) worst = fabs(got - want) / (1.0 + fabs(want));
            }
        }
    /* float32 sums of at most 3 D terms, a few times over: 1e-5 is ~100 ulp of the values */
    if (!(worst < 1e-5)) { printf("    alibi forward (causal %d): worst relative error %.3g\n", causal, worst); MFT_CHECK(0); }
    mf_model_free(m);
    mf_ctx_free(ctx);
}
static void test_reference(void) { check_reference(1); check_reference(0); }

/* ---- a causal model's logits before the last position do not move when the last token does ---- */
static void test_causal(void) {
    mf_ctx *ctx = mf_ctx_new(2);
    mf_model_config c = alibi_tiny();
    mf_model *m = mf_model_new(ctx, &c);
    int32_t ids[MG_B * MG_T];
    float a[MG_B * MG_T * MG_V];
    mf_tensor *y = mf_model_forward(m, mg_ids, MG_B, MG_T);
    int b, t, v, same = 1, last_moved = 0;
    MFT_CHECK(y != NULL);
    if (!y) { mf_ctx_free(ctx); return; }
    memcpy(a, y->data, sizeof a);
    memcpy(ids, mg_ids, sizeof ids);
    for (b = 0; b < MG_B; b++) ids[b * MG_T + MG_T - 1] = (ids[b * MG_T + MG_T - 1] + 3) % MG_V;
    mf_reset(ctx);
    y = mf_model_forward(m, ids, MG_B, MG_T);
    for (b = 0; y && b < MG_B; b++)
        for (t = 0; t < MG_T; t++)
            for (v = 0; v < MG_V; v++) {
                int k = (b * MG_T + t) * MG_V + v;
                if (t < MG_T - 1) same &= y->data[k] == a[k];
                else last_moved |= y->data[k] != a[k];
            }
    MFT_CHECK(y && same && last_moved);
    mf_model_free(m);
    mf_ctx_free(ctx);
}

/* ---- training, a checkpoint mid-way, and the resumed run: bit for bit ---- */
enum { STEPS = 6, HALF = 3 };
static void batch_of(int s, int32_t *x, int32_t *y) {
    int i;
    for (i = 0; i < MG_B * MG_T; i++) { x[i] = (i * 3 + s) % MG_V; y[i] = (x[i] + 1) % MG_V; }
}
/* losses of steps from..STEPS-1; saves after step HALF - 1 when save, loads first when load */
static int run_steps(const mf_model_config *c, int from, const char *save, const char *load, float *losses, int32_t *gen) {
    mf_ctx *ctx = mf_ctx_new(9);
    mf_model *m = mf_model_new(ctx, c);
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAMW, 1e-2f);
    int32_t x[MG_B * MG_T], y[MG_B * MG_T], prompt[2] = {1, 2};
    int s, ok;
    if (m && load && mf_model_load(m, load, 1) < 0) printf("    load: %s\n", mf_error(ctx));
    mf_set_training(ctx, 1);
    for (s = from; m && s < STEPS && mf_ok(ctx); s++) {
        mf_tensor *loss;
        batch_of(s, x, y);
        loss = mf_model_loss(m, x, y, MG_B, MG_T);
        mf_backward(ctx, loss);
        mf_train_update(ctx, &opt, 1.0f);
        losses[s] = mf_item(ctx, loss);
        mf_reset(ctx);
        if (save && s == HALF - 1) mf_model_save(m, save, 1, NULL, 0);
    }
    if (m) mf_model_generate(m, prompt, 2, 5, NULL, gen);
    ok = mf_ok(ctx);
    if (!ok) printf("    %s\n", mf_error(ctx));
    mf_model_free(m);
    mf_ctx_free(ctx);
    return ok;
}
static void test_resume(void) {
    const char *path = "build/tests/test_custom_mixer.safetensors";
    mf_model_config c = alibi_tiny();
    float full[STEPS], resumed[STEPS];
    int32_t g1[5], g2[5];
    char meta[128];
    c.dropout = 0.1f; /* the RNG position is part of what resumes */
    mf_model_config_set(&c, "alibi_max", 5.0f);
    MFT_CHECK(run_steps(&c, 0, path, NULL, full, g1));
    MFT_CHECK(run_steps(&c, HALF, NULL, path, resumed, g2));
    MFT_CHECK(memcmp(full + HALF, resumed + HALF, sizeof(float) * (STEPS - HALF)) == 0);
    MFT_CHECK(memcmp(g1, g2, sizeof g1) == 0);
    MFT_CHECK(full[STEPS - 1] < full[0]); /* it learns */
    MFT_CHECK(mf_load_meta(path, "mf.mixer", meta, sizeof meta) > 0 && strcmp(meta, "alibi alibi_max=5") == 0);
    {   /* another field value, and a built-in mixer of the same shapes: refused, naming the mixer */
        mf_ctx *ctx = mf_ctx_new(1);
        mf_model_config o = alibi_tiny();
        mf_model *m = mf_model_new(ctx, &o);
        MFT_CHECK(mf_model_load(m, path, 0) == -1 && strstr(mf_error(ctx), "\"alibi alibi_max=5\"; this model is \"alibi alibi_max=8\""));
        mf_model_free(m);
        mf_ctx_free(ctx);
        ctx = mf_ctx_new(1);
        o = mg_tiny(MF_MIXER_SDPA);
        m = mf_model_new(ctx, &o);
        MFT_CHECK(mf_model_load(m, path, 0) == -1 && strstr(mf_error(ctx), "register that mixer in this program"));
        mf_model_free(m);
        mf_ctx_free(ctx);
    }
    remove(path);
}

/* ---- generation: the window rerun per token is the argmax of the full forward ---- */
static void test_generate(void) {
    mf_ctx *ctx = mf_ctx_new(4);
    mf_model_config c = alibi_tiny();
    mf_model *m = mf_model_new(ctx, &c);
    int32_t seq[12] = {3, 1, 4}, out[9];
    int n = 3, i, v;
    MFT_CHECK(m && mf_model_generate(m, seq, 3, 9, NULL, out) == 0);
    for (i = 0; m && i < 9; i++) { /* T up to max_seq 8, then the window of the last 4 (half) */
        int start = n <= c.max_seq ? 0 : n - c.max_seq / 2, len = n - start, best = 0;
        mf_tensor *y;
        mf_reset(ctx);
        y = mf_model_forward(m, seq + start, 1, len);
        if (!y) break;
        for (v = 1; v < MG_V; v++) if (y->data[(len - 1) * MG_V + v] > y->data[(len - 1) * MG_V + best]) best = v;
        seq[n++] = best;
    }
    MFT_CHECK(n == 12 && memcmp(seq + 3, out, sizeof out) == 0);
    mf_model_free(m);
    mf_ctx_free(ctx);
}

/* ---- a mixer with a gen_step hook: y_t = (mean of x_0 .. x_t) W, its state the running sum ---- */
typedef struct { mf_tensor *w; float sum[8]; int n; } cummean_layer;
static void cummean_make(mf_model *m, int l, void *st) {
    cummean_layer *L = (cummean_layer *)st;
    int shape[2] = {8, 8};
    L->w = mf_model_param(m, l, "mix.weight", 2, shape);
    mf_init_kaiming_uniform(mf_model_ctx(m), L->w);
}
/* the averaging matrix A [T, T] (A[t][s] = 1 / (t + 1), s <= t) times x [B, T, 8] */
static mf_tensor *cummean_forward(mf_model *m, int l, void *st, mf_tensor *x) {
    mf_ctx *ctx = mf_model_ctx(m);
    int T = x->shape[1], shape[2] = {T, T}, t, s;
    float a[64];
    (void)l;
    for (t = 0; t < T; t++) for (s = 0; s < T; s++) a[t * T + s] = s <= t ? 1.0f / (float)(t + 1) : 0.0f;
    return mf_linear(ctx, mf_matmul(ctx, mf_from(ctx, 2, shape, a), x, 0, 0), ((cummean_layer *)st)->w, NULL);
}
static int gen_steps; /* gen_step calls */
static int cummean_begin(mf_model *m, int l, void *st) { (void)m; (void)l; ((cummean_layer *)st)->n = 0; return 0; }
static mf_tensor *cummean_step(mf_model *m, int l, void *st, mf_tensor *x, int pos0) {
    cummean_layer *L = (cummean_layer *)st;
    int n = x->shape[1], shape[3] = {1, 0, 8}, t, d;
    float y[8 * 8];
    (void)l;
    gen_steps++;
    if (pos0 == 0) { L->n = 0; memset(L->sum, 0, sizeof L->sum); }
    for (t = 0; t < n; t++) {
        L->n++;
        for (d = 0; d < 8; d++) { L->sum[d] += x->data[t * 8 + d]; y[t * 8 + d] = L->sum[d] / (float)L->n; }
    }
    shape[1] = n;
    return mf_linear(mf_model_ctx(m), mf_from(mf_model_ctx(m), 3, shape, y), L->w, NULL);
}
static void test_gen_step(void) {
    mf_mixer_def d;
    int with, without, k;
    int32_t prompt[3] = {2, 5, 1}, out[2][5], longer[12];
    char err[256];
    memset(&d, 0, sizeof d);
    d.name = "cummean_window"; d.help = "running mean, every token reruns the window";
    d.layer_size = sizeof(cummean_layer); d.make_layer = cummean_make; d.forward = cummean_forward;
    without = mf_mixer_register(&d, err, sizeof err);
    d.name = "cummean"; d.help = "running mean with a gen_step"; d.flags = MF_MIXER_FIXED_STATE;
    d.gen_begin = cummean_begin; d.gen_step = cummean_step;
    with = mf_mixer_register(&d, err, sizeof err);
    MFT_CHECK(with > without && without >= MF_MIXER_COUNT);
    for (k = 0; k < 2; k++) {
        mf_ctx *ctx = mf_ctx_new(6);
        mf_model_config c = mg_tiny((mf_mixer_kind)(k ? with : without));
        mf_model *m;
        c.pos = MF_POS_NONE;
        m = mf_model_new(ctx, &c);
        gen_steps = 0;
        MFT_CHECK(m && mf_model_generate(m, prompt, 3, 5, NULL, out[k]) == 0); /* 8 tokens: max_seq */
        /* with the hook: one call per layer for the prompt, then one per layer and new token */
        MFT_CHECK(gen_steps == (k ? 2 * 5 : 0));
        /* a fixed state and no positions: the hook's model generates past max_seq with no window */
        if (k) { gen_steps = 0; MFT_CHECK(mf_model_generate(m, prompt, 3, 12, NULL, longer) == 0 && gen_steps == 2 * 12); }
        if (!mf_ok(ctx)) printf("    %s\n", mf_error(ctx));
        mf_model_free(m);
        mf_ctx_free(ctx);
    }
    /* the running mean in float32 against the averaging product: the same tokens */
    MFT_CHECK(memcmp(out[0], out[1], sizeof out[0]) == 0);
}

static float slot_loss(mf_model *m, int s) {
    int32_t x[MG_B * MG_T], y[MG_B * MG_T];
    float v;
    batch_of(s, x, y);
    mf_reset(mf_model_ctx(m));
    v = mf_item(mf_model_ctx(m), mf_model_loss(m, x, y, MG_B, MG_T));
    mf_reset(mf_model_ctx(m));
    return v;
}
static void test_memory(void) {
    const char *path = "build/tests/test_custom_memory.safetensors";
    mf_mixer_def d;
    mf_model_config c;
    mf_ctx *ctx;
    mf_model *m;
    float first, second, third[2], full[STEPS], resumed[STEPS];
    int k, LASTMEAN = TM_LASTMEAN;
    int32_t g1[5], g2[5], prompt[2] = {1, 2};
    memset(&d, 0, sizeof d); /* the hooks of memories, one missing */
    d.name = "lastmean_half"; d.help = "state without reset_memory"; d.layer_size = sizeof(tm_lastmean_layer);
    d.make_layer = tm_lastmean_make; d.forward = tm_lastmean_forward; d.state = tm_lastmean_state;
    refused(&d, "has state without reset_memory (memories need both)");
    MFT_CHECK(LASTMEAN >= MF_MIXER_COUNT);
    if (!mf_mixer_compiled(MF_MIXER_RELATIVE)) printf("    (relative compiled out)\n");
    else MFT_CHECK(mf_mixer_flags(MF_MIXER_RELATIVE) & MF_MIXER_MEMORY);
    MFT_CHECK((mf_mixer_flags((mf_mixer_kind)LASTMEAN) & MF_MIXER_MEMORY) && !(mf_mixer_flags(MF_MIXER_SDPA) & MF_MIXER_MEMORY));
    MFT_CHECK(!(mf_mixer_flags((mf_mixer_kind)ALIBI) & MF_MIXER_MEMORY) && (mf_mixer_flags((mf_mixer_kind)ALIBI) & MF_MIXER_HEADS));
    /* the memory is used, per slot: validation on slot 1 and generation (slot 2) between two calls on
       slot 0 change nothing there (the same third loss as a twin model's without them) */
    c = mg_tiny((mf_mixer_kind)LASTMEAN);
    c.pos = MF_POS_NONE;
    for (k = 0; k < 2; k++) {
        ctx = mf_ctx_new(3);
        m = mf_model_new(ctx, &c);
        first = slot_loss(m, 0);
        second = slot_loss(m, 0);
        MFT_CHECK(m && first != second);
        if (k) {
            MFT_CHECK(mf_model_memory_slot(m, 1) == 0 && slot_loss(m, 0) == first && mf_model_memory_slot(m, 0) == 1);
            MFT_CHECK(mf_model_generate(m, prompt, 2, 5, NULL, g1) == 0 && mf_model_generate(m, prompt, 2, 5, NULL, g2) == 0 &&
                      memcmp(g1, g2, sizeof g1) == 0);
        }
        if (k) { /* the rows of micro-batches reach the hooks */
            int row0 = -1;
            MFT_CHECK(mf_model_memory_rows(m, 2, 4) == 0 && mf_model_memory_rows_now(m, &row0) == 4 && row0 == 2);
            MFT_CHECK(mf_model_memory_rows(m, 0, 0) == 0 && mf_model_memory_rows_now(m, &row0) == 0 && row0 == 0);
        }
        third[k] = slot_loss(m, 0);
        mf_model_reset_memory(m);
        MFT_CHECK(slot_loss(m, 0) == first);
        if (!mf_ok(ctx)) printf("    %s\n", mf_error(ctx));
        mf_model_free(m);
        mf_ctx_free(ctx);
    }
    MFT_CHECK(third[0] == third[1] && third[0] != second);
    /* training resumes bit for bit: the memories travel in the checkpoint */
    MFT_CHECK(run_steps(&c, 0, path, NULL, full, g1));
    MFT_CHECK(run_steps(&c, HALF, NULL, path, resumed, g2));
    MFT_CHECK(memcmp(full + HALF, resumed + HALF, sizeof(float) * (STEPS - HALF)) == 0 && memcmp(g1, g2, sizeof g1) == 0);
    ctx = mf_ctx_new(9); /* the weights alone (mf_load: no memories) do not give the same next step */
    m = mf_model_new(ctx, &c);
    MFT_CHECK(m && mf_load(ctx, path, 1) == 0 && slot_loss(m, HALF) != resumed[HALF]);
    mf_model_free(m);
    mf_ctx_free(ctx);
    remove(path);
}

/* ---- a whole-stack recurrence (run_stack): the blocks written out with mf_model_ln1 / mf_model_ffn
   equal the library's blocks around a per-layer mixer bit for bit; a stack that feeds each layer's
   mixer output into the next layer's mixer trains by the autograd (finite differences) ---- */
static mf_tensor *stack_wrong(mf_model *m, mf_tensor *x) { return mf_slice(mf_model_ctx(m), x, 1, 0, 1); }
static void test_run_stack(void) {
    mf_mixer_def d;
    int per_layer, plain, cross, wrong, k;
    float loss[2], g[2][8 * 8];
    int32_t x[MG_B * MG_T], y[MG_B * MG_T], out[6], prompt[2] = {3, 4};
    char err[256];
    mg_case gc;
    memset(&d, 0, sizeof d);
    d.name = "lin_refused"; d.help = "a stack with a gen_step"; d.layer_size = sizeof(tm_lin_layer); d.make_layer = tm_lin_make;
    d.run_stack = tm_stack_plain; d.gen_step = cummean_step;
    refused(&d, "has run_stack and gen_step");
    d.name = "lin_wrong"; d.gen_step = NULL; d.run_stack = stack_wrong;
    wrong = mf_mixer_register(&d, err, sizeof err);
    per_layer = TM_LIN_LAYERS; plain = TM_LIN_STACK; cross = TM_LIN_CROSS;
    MFT_CHECK(per_layer > 0 && plain > 0 && cross > 0 && wrong > 0);
    batch_of(1, x, y);
    for (k = 0; k < 2; k++) { /* the same loss and gradient, with dropout */
        mf_ctx *ctx = mf_ctx_new(5);
        mf_model_config c = mg_tiny((mf_mixer_kind)(k ? plain : per_layer));
        mf_model *m;
        mf_tensor *l;
        c.dropout = 0.2f;
        m = mf_model_new(ctx, &c);
        mf_set_training(ctx, 1);
        l = m ? mf_model_loss(m, x, y, MG_B, MG_T) : NULL;
        mf_backward(ctx, l);
        loss[k] = l ? mf_item(ctx, l) : -1.0f;
        if (l) mf_grad_to_host(ctx, ((tm_lin_layer *)mf_model_layer_state(m, 1))->w, g[k]);
        MFT_CHECK(k == 0 || (m && mf_model_generate(m, prompt, 2, 6, NULL, out) == 0)); /* reruns the window */
        if (!mf_ok(ctx)) printf("    %s\n", mf_error(ctx));
        mf_model_free(m);
        mf_ctx_free(ctx);
    }
    MFT_CHECK(loss[0] == loss[1] && memcmp(g[0], g[1], sizeof g[0]) == 0);
    memset(&gc, 0, sizeof gc);
    gc.cfg = mg_tiny((mf_mixer_kind)cross);
    MFT_CHECK(mg_check_logits("lin_cross (run_stack)", &gc));
    mf_model_free(gc.model);
    {   /* a stack of the wrong shape, and another block layout: refused, naming the mixer */
        mf_ctx *ctx = mf_ctx_new(1);
        mf_model_config c = mg_tiny((mf_mixer_kind)wrong);
        mf_model *m = mf_model_new(ctx, &c);
        MFT_CHECK(m && !mf_model_forward(m, x, MG_B, MG_T) && strstr(mf_error(ctx), "lin_wrong mixer's run_stack returned"));
        mf_model_free(m);
        mf_ctx_free(ctx);
        ctx = mf_ctx_new(1);
        c = mg_tiny((mf_mixer_kind)plain);
        c.block = MF_BLOCK_STREAM_NORM;
        MFT_CHECK(!mf_model_new(ctx, &c) && strstr(mf_error(ctx), "block pre_norm only"));
        mf_ctx_free(ctx);
    }
}

/* ---- a sequence classifier of the mixer trains ---- */
static void test_classify(void) {
    mf_ctx *ctx = mf_ctx_new(8);
    mf_model_config c = alibi_tiny();
    mf_model *m;
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 1e-2f);
    int32_t lengths[MG_B] = {5, 3}, labels[MG_B] = {1, 0};
    float first = 0, last = 0;
    int s;
    c.causal = 0; c.n_classes = 2;
    m = mf_model_new(ctx, &c);
    for (s = 0; m && s < 20 && mf_ok(ctx); s++) {
        mf_tensor *loss = mf_model_classify_loss(m, mg_ids, lengths, labels, MG_B, MG_T);
        mf_backward(ctx, loss);
        mf_train_update(ctx, &opt, 1.0f);
        last = mf_item(ctx, loss);
        if (s == 0) first = last;
        mf_reset(ctx);
    }
    MFT_CHECK(mf_ok(ctx) && last < 0.5f * first);
    mf_model_free(m);
    mf_ctx_free(ctx);
}

/* ---- a forward of the wrong shape is an error naming the mixer ---- */
static mf_tensor *half_forward(mf_model *m, int l, void *st, mf_tensor *x) {
    (void)l; (void)st;
    return mf_slice(mf_model_ctx(m), x, 2, 0, 4);
}
static void test_wrong_shape(void) {
    mf_mixer_def d;
    mf_ctx *ctx = mf_ctx_new(1);
    mf_model_config c;
    mf_model *m;
    memset(&d, 0, sizeof d);
    d.name = "half"; d.help = "returns half the width: wrong"; d.make_layer = dummy_make; d.forward = half_forward;
    c = mg_tiny((mf_mixer_kind)mf_mixer_register(&d, NULL, 0));
    m = mf_model_new(ctx, &c);
    MFT_CHECK(m && !mf_model_forward(m, mg_ids, MG_B, MG_T));
    MFT_CHECK(strstr(mf_error(ctx), "the half mixer's forward of layer 0 returned [2, 5, 4] for the input [2, 5, 8]") != NULL);
    mf_model_free(m);
    mf_ctx_free(ctx);
}

int main(void) {
    ALIBI = custom_mixer_register();
    MFT_CHECK(tm_register() == 0);
    MFT_RUN(test_register);
    MFT_RUN(test_field_table);
    MFT_RUN(test_fields);
    MFT_RUN(test_grad);
    MFT_RUN(test_reference);
    MFT_RUN(test_causal);
    MFT_RUN(test_resume);
    MFT_RUN(test_generate);
    MFT_RUN(test_gen_step);
    MFT_RUN(test_memory);
    MFT_RUN(test_run_stack);
    MFT_RUN(test_classify);
    MFT_RUN(test_wrong_shape);
    return mft_finish();
}
