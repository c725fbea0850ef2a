/* PyTorch parity: every mixer's logits, loss and parameter gradients against committed goldens.
 *
 * tests/goldens/<config>.safetensors (written by tests/parity/make_goldens.py, `make goldens`)
 * holds a model config in __metadata__ ("cfg.*"), the weights ("param.<name>"), a batch ("ids",
 * "targets", I32 [B, T]) and what PyTorch computed in float64 from docs/math.md: "logits" [B, T, V],
 * "loss" [1] and "grad.<name>" for every parameter. A classifier (cfg.n_classes = C > 0, docs/math.md
 * §20.3) has "lengths" and "labels" (I32 [B]) instead of targets and "logits" [B, C], and is run
 * with mf_model_classify_logits / mf_model_classify_loss. Non-causal models (cfg.causal = 0, §20.1)
 * and the stream_norm block (cfg.block, §19.2) come from the same metadata. This test builds the model from the metadata,
 * copies the weights in, runs forward, loss and backward in fp32 and compares every tensor:
 *     err = max|c - golden| / max(max|golden|, 1e-6) <= 1e-4
 * A golden gradient that is exactly zero (zero by the math: key biases, the LayerNorm beta before
 * the pooling mixer; see make_goldens.py) is measured against the config's largest golden gradient
 * instead, since fp32 can only return rounding noise for it. No Python is needed here.
 *
 * The golden file is read with a small reader of its own: it holds more than the model's
 * parameters, which mf_load (rightly) refuses. */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#include "mf_test.h"
#include <stdlib.h>
#include <string.h>

#define GOLDEN_DIR "tests/goldens"
#define TOL 1e-4

#include "golden.h"

/* ---- the config from the metadata ---------------------------------------------------------- */
/* the value of an enum named in the metadata, read with the library's own from_name */
static int meta_enum(const char *path, const char *key, int (*from_name)(const char *), int *ok) {
    char buf[64];
    int v;
    if (mf_load_meta(path, key, buf, sizeof buf) < 0) { printf("    %s: no metadata \"%s\"\n", path, key); *ok = 0; return 0; }
    if ((v = from_name(buf)) >= 0) return v;
    printf("    %s: unknown %s \"%s\"\n", path, key, buf);
    *ok = 0;
    return 0;
}

static mf_model_config config_from(const char *path, int *B, int *T, int *ok) {
    mf_model_config c = mf_model_config_default();
    char buf[64];
    c.mixer = (mf_mixer_kind)meta_enum(path, "cfg.mixer", mf_mixer_from_name, ok);
    c.pos = (mf_pos_kind)meta_enum(path, "cfg.pos", mf_pos_from_name, ok);
    c.ffn_act = (mf_act_kind)meta_enum(path, "cfg.ffn_act", mf_act_from_name, ok);
    c.block = (mf_block_kind)meta_enum(path, "cfg.block", mf_block_from_name, ok);
    c.linear_feature = (mf_feature_kind)meta_enum(path, "cfg.linear_feature", mf_feature_from_name, ok);
    c.vocab = meta_int(path, "cfg.vocab", ok);
    c.d_model = meta_int(path, "cfg.d_model", ok);
    c.n_heads = meta_int(path, "cfg.n_heads", ok);
    c.n_layers = meta_int(path, "cfg.n_layers", ok);
    c.d_ff = meta_int(path, "cfg.d_ff", ok);
    c.max_seq = meta_int(path, "cfg.max_seq", ok);
    c.ffn_bias = meta_int(path, "cfg.ffn_bias", ok);
    c.attn_bias = meta_int(path, "cfg.attn_bias", ok);
    c.pool_size = meta_int(path, "cfg.pool_size", ok);
    c.pool_causal = meta_int(path, "cfg.pool_causal", ok);
    c.clone_layers = meta_int(path, "cfg.clone_layers", ok);
    c.causal = meta_int(path, "cfg.causal", ok);
    c.n_classes = meta_int(path, "cfg.n_classes", ok);
    c.dpfp_nu = meta_int(path, "cfg.dpfp_nu", ok);
    if (mf_load_meta(path, "cfg.ln_eps", buf, sizeof buf) < 0) *ok = 0; else c.ln_eps = (float)atof(buf);
    if (mf_load_meta(path, "cfg.dropout", buf, sizeof buf) < 0) *ok = 0; else c.dropout = (float)atof(buf);
    *B = meta_int(path, "parity.B", ok);
    *T = meta_int(path, "parity.T", ok);
    return c;
}

/* ---- comparison ------------------------------------------------------------------------------ */
typedef struct { double worst; char worst_name[200]; int n_tensors, n_bad; } tally;

/* compare n values of got with the golden entry; zero_scale: denominator for an all-zero golden */
static void compare(tally *t, const golden *g, const gt_entry *e, const float *got, double zero_scale) {
    double err = golden_rel_err(g, e, got, zero_scale);
    t->n_tensors++;
    if (!(err <= TOL)) { t->n_bad++; printf("    %-34s rel err %.3g > %g\n", e->name, err, TOL); }
    if (!(err <= t->worst)) { t->worst = err; snprintf(t->worst_name, sizeof t->worst_name, "%s", e->name); }
}

static char current[128]; /* the config being tested */
static int mixers_seen[MF_MIXER_COUNT];
static int non_causal_seen, classifier_seen, stream_norm_seen, elu1_seen;

/* a copy of the I32 entry `name` of shape [n0] (n1 = 0) or [n0, n1]; NULL (and a message) when it
   is missing, not I32, of another shape, or memory runs out */
static int32_t *golden_int_tensor(const golden *g, const char *path, const char *name, int n0, int n1) {
    const gt_entry *e = golden_find(g, "", name);
    int shape[2];
    int32_t *v;
    shape[0] = n0; shape[1] = n1;
    if (!e || !e->i32 || !same_shape(e, n1 ? 2 : 1, shape)) {
        printf("    %s: %s is missing or not I32 [%d%s]\n", path, name, n0, n1 ? ", T" : "");
        return NULL;
    }
    if ((v = (int32_t *)malloc((size_t)e->ne * sizeof(int32_t)))) golden_ints(g, e, v);
    return v;
}

static void test_config(void) {
    char path[256];
    golden g;
    const char *why;
    const gt_entry *e;
    mf_ctx *ctx = NULL;
    mf_model *m = NULL;
    mf_model_config cfg;
    int32_t *ids = NULL, *targets = NULL, *lengths = NULL, *labels = NULL;
    int B = 0, T = 0, ok = 1, i, n_param_entries = 0, cls;
    double gscale = 0;
    tally t;
    memset(&t, 0, sizeof t);
    snprintf(path, sizeof path, "%s/%s.safetensors", GOLDEN_DIR, current);
    if ((why = golden_open(&g, path))) { printf("    %s: %s\n", path, why); MFT_CHECK(why == NULL); golden_close(&g); return; }
    cfg = config_from(path, &B, &T, &ok);
    MFT_CHECK(ok);
    if (!ok) goto done;
    cls = cfg.n_classes > 0;
    mixers_seen[cfg.mixer] = 1;
    non_causal_seen |= !cfg.causal;
    classifier_seen |= cls;
    stream_norm_seen |= cfg.block == MF_BLOCK_STREAM_NORM;
    elu1_seen |= cfg.mixer == MF_MIXER_LINEAR && cfg.linear_feature == MF_FEATURE_ELU1;
    ctx = mf_ctx_new(1);
    m = mf_model_new(ctx, &cfg);
    if (!m) { printf("    %s\n", mf_error(ctx)); MFT_CHECK(m != NULL); goto done; }

    /* the weights: every parameter from "param.<name>", and no stray "param." entry */
    for (i = 0; i < mf_param_tensors(ctx); i++) {
        mf_tensor *p = mf_param_at(ctx, i);
        e = golden_find(&g, "param.", p->name);
        if (!e || e->i32 || !same_shape(e, p->ndim, p->shape)) {
            printf("    %s: param.%s is missing or has another dtype/shape\n", path, p->name);
            MFT_CHECK(0);
            goto done;
        }
        golden_floats(&g, e, p->data);
    }
    for (i = 0; i < g.n; i++) n_param_entries += strncmp(g.e[i].name, "param.", 6) == 0;
    MFT_CHECK(n_param_entries == mf_param_tensors(ctx));

    /* the batch: a language model's targets [B, T], a classifier's lengths and labels [B] */
    ids = golden_int_tensor(&g, path, "ids", B, T);
    if (cls) {
        lengths = golden_int_tensor(&g, path, "lengths", B, 0);
        labels = golden_int_tensor(&g, path, "labels", B, 0);
    } else targets = golden_int_tensor(&g, path, "targets", B, T);
    MFT_CHECK(ids && (cls ? lengths && labels : targets != NULL));
    if (!ids || (cls ? !lengths || !labels : !targets)) goto done;

    /* forward: logits [B, T, V] of a language model, [B, C] of a classifier */
    {
        mf_tensor *logits = cls ? mf_model_classify_logits(m, ids, lengths, B, T) : mf_model_forward(m, ids, B, T);
        int shape[3];
        shape[0] = B; shape[1] = cls ? cfg.n_classes : T; shape[2] = cfg.vocab;
        e = golden_find(&g, "", "logits");
        MFT_CHECK(logits != NULL && e != NULL && !e->i32 && same_shape(e, cls ? 2 : 3, shape));
        if (!logits) printf("    %s\n", mf_error(ctx));
        if (!logits || !e || e->i32 || !same_shape(e, cls ? 2 : 3, shape)) goto done;
        compare(&t, &g, e, logits->data, 0.0);
        mf_reset(ctx);
    }
    /* loss and backward: every parameter gradient */
    {
        mf_tensor *loss = cls ? mf_model_classify_loss(m, ids, lengths, labels, B, T) : mf_model_loss(m, ids, targets, B, T);
        int one = 1;
        e = golden_find(&g, "", "loss");
        MFT_CHECK(loss != NULL && e != NULL && !e->i32 && same_shape(e, 1, &one));
        if (!loss || !e || e->i32 || !same_shape(e, 1, &one)) goto done;
        compare(&t, &g, e, loss->data, 0.0);
        mf_zero_grad(ctx);
        MFT_CHECK(mf_backward(ctx, loss) == 0);
        for (i = 0; i < g.n; i++) /* the largest golden gradient: the scale for all-zero goldens */
            if (strncmp(g.e[i].name, "grad.", 5) == 0 && !g.e[i].i32) {
                int64_t k;
                float *v = (float *)malloc((size_t)g.e[i].ne * sizeof(float));
                if (!v) continue;
                golden_floats(&g, &g.e[i], v);
                for (k = 0; k < g.e[i].ne; k++) if (fabs((double)v[k]) > gscale) gscale = fabs((double)v[k]);
                free(v);
            }
        for (i = 0; i < mf_param_tensors(ctx); i++) {
            mf_tensor *p = mf_param_at(ctx, i);
            e = golden_find(&g, "grad.", p->name);
            if (!e || e->i32 || !same_shape(e, p->ndim, p->shape) || !p->grad) {
                printf("    %s: grad.%s is missing, has another shape, or the parameter has no gradient\n", path, p->name);
                MFT_CHECK(0);
                continue;
            }
            compare(&t, &g, e, p->grad, gscale);
        }
    }
    MFT_CHECK(mf_ok(ctx));
    if (!mf_ok(ctx)) printf("    %s\n", mf_error(ctx));
    MFT_CHECK(t.n_bad == 0 && t.n_tensors == 2 + mf_param_tensors(ctx));
    printf("    %-15s worst %-34s rel err %.2e  (%d tensors)\n", current, t.worst_name, t.worst, t.n_tensors);
done:
    free(ids); free(targets); free(lengths); free(labels);
    mf_model_free(m);
    mf_ctx_free(ctx);
    golden_close(&g);
}

/* the variant families (relative, fast weights, feedback) have parity tests of their own:
   tests/test_xl.c, tests/test_fastweights.c, tests/test_feedback.c */
static void test_every_mixer_has_a_golden(void) {
    int k;
    for (k = 0; k <= MF_MIXER_IDENTITY; k++) {
        if (!mixers_seen[k]) printf("    no golden exercises the %s mixer\n", mf_mixer_name((mf_mixer_kind)k));
        MFT_CHECK(mixers_seen[k]);
    }
}

/* the paths of docs/math.md §19.2 and §20 that PyTorch computes too: non-causal attention (sdpa,
   metric, linear), the classification head over rows of different lengths, the stream_norm block */
static void test_every_new_path_has_a_golden(void) {
    if (!non_causal_seen) printf("    no golden is non-causal (cfg.causal = 0)\n");
    if (!classifier_seen) printf("    no golden is a classifier (cfg.n_classes > 0)\n");
    if (!stream_norm_seen) printf("    no golden has the stream_norm block\n");
    if (!elu1_seen) printf("    no golden has the linear mixer with elu1 features\n");
    MFT_CHECK(non_causal_seen && classifier_seen && stream_norm_seen && elu1_seen);
}

int main(void) {
    FILE *f = fopen(GOLDEN_DIR "/manifest.txt", "r");
    char line[128];
    int n = 0;
    double t0 = mf_time();
    if (!f) {
        printf("    cannot open " GOLDEN_DIR "/manifest.txt (run from the repository root; `make goldens` makes it)\n");
        MFT_RUN(test_every_mixer_has_a_golden); /* fails: nothing was tested */
        return mft_finish();
    }
    while (fgets(line, sizeof line, f)) {
        size_t len = strcspn(line, "\r\n");
        char label[160];
        line[len] = 0;
        if (!len || line[0] == '#') continue;
        snprintf(current, sizeof current, "%s", line);
        snprintf(label, sizeof label, "parity_%s", current);
        mft__run(label, test_config);
        n++;
    }
    fclose(f);
    MFT_RUN(test_every_mixer_has_a_golden);
    MFT_RUN(test_every_new_path_has_a_golden);
    printf("    %d parity configs in %.2f s\n", n, mf_time() - t0);
    return mft_finish();
}
