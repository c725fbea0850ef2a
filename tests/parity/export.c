/* parity_export - writes the models the PyTorch parity goldens are made from (`make goldens`).
 *
 *   build/parity_export OUTDIR
 *
 * For every parity config: builds the model with a fixed seed, perturbs the LayerNorm parameters
 * (their init, gamma = 1 and beta = 0, would hide a swapped or ignored affine), and writes
 * OUTDIR/<config>.safetensors with mf_save. The __metadata__ holds the model config (keys "cfg.*",
 * read back by tests/test_parity.c with mf_load_meta) and the batch: "parity.B", "parity.T",
 * "parity.ids" and "parity.targets" (comma-separated row-major [B][T] ints; target -1 = ignored);
 * a classifier (n_classes > 0, docs/math.md §20.3) has "parity.lengths" and "parity.labels" ([B] ints)
 * instead of targets, and its ids after a row's length are padding.
 * tests/parity/make_goldens.py reads these files, rebuilds each model in PyTorch from docs/math.md and
 * writes tests/goldens/<config>.safetensors. Prints one line per file written. */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#include <stdio.h>
#include <string.h>

#define PB 2
#define PT 9
#define PVOCAB 13
#define CLS_B 4       /* a classifier's batch: rows of lengths CLS_LENGTHS, two of them alike */
#define CLS_CLASSES 3
static const int32_t CLS_LENGTHS[CLS_B] = {9, 5, 9, 3};

typedef struct {
    const char *name;
    mf_mixer_kind mixer;
    mf_pos_kind pos;
    mf_act_kind act;
    int pool_size, pool_causal, clone_layers;
    uint64_t seed;
    int d_model, n_layers, d_ff;
    /* the paths of docs/math.md §19.2 and §20 (zero: the pre-norm causal language model) */
    int non_causal, n_classes;
    mf_block_kind block;
    mf_feature_kind linear_feature;
} parity_config;

/* the width, depth and FFN size: the first goldens' language models, and a smaller shape (a few KB a
   golden) for the paths of docs/math.md §19.2 and §20 (the seed's classifier has one block) */
#define LM_SHAPE 24, 2, 40
#define SMALL_SHAPE(n_layers) 12, n_layers, 16

static const parity_config configs[] = {
    {"sdpa",          MF_MIXER_SDPA,      MF_POS_LEARNED,    MF_ACT_GELU, 3, 1, 0, 101, LM_SHAPE, 0, 0, MF_BLOCK_PRE_NORM, MF_FEATURE_DPFP},
    {"sdpa_sin_clone", MF_MIXER_SDPA,     MF_POS_SINUSOIDAL, MF_ACT_RELU, 3, 1, 1, 102, LM_SHAPE, 0, 0, MF_BLOCK_PRE_NORM, MF_FEATURE_DPFP},
    {"metric",        MF_MIXER_METRIC,    MF_POS_LEARNED,    MF_ACT_RELU, 3, 1, 0, 103, LM_SHAPE, 0, 0, MF_BLOCK_PRE_NORM, MF_FEATURE_DPFP},
    {"quadratic",     MF_MIXER_QUADRATIC, MF_POS_LEARNED,    MF_ACT_GELU, 3, 1, 0, 104, LM_SHAPE, 0, 0, MF_BLOCK_PRE_NORM, MF_FEATURE_DPFP},
    {"pool_causal3",  MF_MIXER_POOL,      MF_POS_LEARNED,    MF_ACT_GELU, 3, 1, 0, 105, LM_SHAPE, 0, 0, MF_BLOCK_PRE_NORM, MF_FEATURE_DPFP},
    {"pool_centred5", MF_MIXER_POOL,      MF_POS_LEARNED,    MF_ACT_RELU, 5, 0, 0, 106, LM_SHAPE, 0, 0, MF_BLOCK_PRE_NORM, MF_FEATURE_DPFP},
    {"identity",      MF_MIXER_IDENTITY,  MF_POS_LEARNED,    MF_ACT_GELU, 3, 1, 0, 107, LM_SHAPE, 0, 0, MF_BLOCK_PRE_NORM, MF_FEATURE_DPFP},
    {"cls_sdpa",      MF_MIXER_SDPA,      MF_POS_LEARNED,    MF_ACT_GELU, 3, 1, 0, 108, SMALL_SHAPE(1), 1, CLS_CLASSES, MF_BLOCK_PRE_NORM, MF_FEATURE_DPFP},
    {"cls_metric",    MF_MIXER_METRIC,    MF_POS_LEARNED,    MF_ACT_RELU, 3, 1, 0, 109, SMALL_SHAPE(1), 1, CLS_CLASSES, MF_BLOCK_PRE_NORM, MF_FEATURE_DPFP},
    {"cls_linear_elu", MF_MIXER_LINEAR,   MF_POS_LEARNED,    MF_ACT_GELU, 3, 1, 0, 110, SMALL_SHAPE(1), 1, CLS_CLASSES,
     MF_BLOCK_PRE_NORM, MF_FEATURE_ELU1},
    {"cls_linear_dpfp", MF_MIXER_LINEAR,  MF_POS_LEARNED,    MF_ACT_RELU, 3, 1, 0, 111, SMALL_SHAPE(1), 1, CLS_CLASSES, MF_BLOCK_PRE_NORM, MF_FEATURE_DPFP},
    {"stream_sdpa",   MF_MIXER_SDPA,      MF_POS_LEARNED,    MF_ACT_GELU, 3, 1, 0, 112, SMALL_SHAPE(2), 0, 0, MF_BLOCK_STREAM_NORM, MF_FEATURE_DPFP},
};

/* a small deterministic generator (xorshift64*), independent of the library's RNG */
static uint64_t rng_state;
static uint32_t rng_next(void) {
    rng_state ^= rng_state >> 12; rng_state ^= rng_state << 25; rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1DULL) >> 32);
}
static float rng_uniform(void) { return (float)(rng_next() >> 8) / 16777216.0f * 2.0f - 1.0f; } /* [-1, 1) */

/* "a,b,c" of n ints */
static void join_ints(char *buf, size_t size, const int32_t *v, int n) {
    size_t len = 0;
    int i;
    buf[0] = 0;
    for (i = 0; i < n && len < size; i++) len += (size_t)snprintf(buf + len, size - len, i ? ",%d" : "%d", (int)v[i]);
}

static int export_one(const parity_config *pc, const char *outdir) {
    mf_model_config cfg = mf_model_config_default();
    mf_ctx *ctx = mf_ctx_new(pc->seed);
    mf_model *m;
    int32_t ids[CLS_B * PT], targets[PB * PT], labels[CLS_B];
    char path[1024], vals[32][32], ids_s[512], tg_s[512], len_s[64], lab_s[64];
    const char *meta[2 * 32];
    int i, n = 0, rc, B = pc->n_classes ? CLS_B : PB;

    cfg.vocab = PVOCAB; cfg.d_model = pc->d_model; cfg.n_heads = 3; cfg.n_layers = pc->n_layers; cfg.d_ff = pc->d_ff;
    cfg.max_seq = 12; /* > T: rows T.. of a learned position table must get zero gradient */
    cfg.mixer = pc->mixer; cfg.pos = pc->pos; cfg.ffn_act = pc->act;
    cfg.ffn_bias = 1; cfg.attn_bias = 1; cfg.pool_size = pc->pool_size; cfg.pool_causal = pc->pool_causal;
    cfg.dropout = 0.0f; cfg.clone_layers = pc->clone_layers; cfg.ln_eps = 1e-5f;
    cfg.causal = !pc->non_causal; cfg.n_classes = pc->n_classes; cfg.block = pc->block;
    cfg.linear_feature = pc->linear_feature;
    if (pc->mixer == MF_MIXER_LINEAR && pc->linear_feature == MF_FEATURE_DPFP) cfg.dpfp_nu = 2; /* more than one roll */
    if (!ctx || !(m = mf_model_new(ctx, &cfg))) {
        fprintf(stderr, "parity_export: %s: %s\n", pc->name, ctx ? mf_error(ctx) : "out of memory");
        mf_ctx_free(ctx);
        return -1;
    }
    rng_state = 0x9E3779B97F4A7C15ULL ^ pc->seed;
    /* LayerNorm gamma = 1 + U(-0.2, 0.2), beta = U(-0.2, 0.2); a cloned model stays cloned */
    for (i = 0; i < mf_param_tensors(ctx); i++) {
        mf_tensor *p = mf_param_at(ctx, i);
        const char *name = p->name;
        int64_t j;
        if (!(strstr(name, ".ln1.") || strstr(name, ".ln2.") || strstr(name, ".ln_mid.") || strncmp(name, "ln_f.", 5) == 0))
            continue;
        if (pc->clone_layers && strncmp(name, "layers.", 7) == 0 && strncmp(name, "layers.0.", 9) != 0) {
            char twin[128];
            snprintf(twin, sizeof twin, "layers.0.%s", strchr(name + 7, '.') + 1);
            memcpy(p->data, mf_param_find(ctx, twin)->data, (size_t)p->ne * sizeof(float));
            continue;
        }
        for (j = 0; j < p->ne; j++)
            p->data[j] = (strcmp(strrchr(name, '.'), ".weight") == 0 ? 1.0f : 0.0f) + 0.2f * rng_uniform();
    }
    /* the batch: random tokens; a language model's next-token targets, a few ignored (-1); a
       classifier's labels, one per row (the ids past a row's length are padding, random as well) */
    for (i = 0; i < B * PT; i++) ids[i] = (int32_t)(rng_next() % PVOCAB);
    if (pc->n_classes) {
        for (i = 0; i < B; i++) labels[i] = (int32_t)(rng_next() % (uint32_t)pc->n_classes);
        join_ints(len_s, sizeof len_s, CLS_LENGTHS, B);
        join_ints(lab_s, sizeof lab_s, labels, B);
    } else {
        for (i = 0; i < PB * PT; i++) targets[i] = (i % PT < PT - 1) ? ids[i + 1] : (int32_t)(rng_next() % PVOCAB);
        targets[2] = -1; targets[PT + 5] = -1; targets[PT + PT - 1] = -1;
        join_ints(tg_s, sizeof tg_s, targets, PB * PT);
    }
    join_ints(ids_s, sizeof ids_s, ids, B * PT);

#define META_S(k, v) (meta[2 * n] = (k), meta[2 * n + 1] = (v), n++)
#define META_I(k, v) (snprintf(vals[n], sizeof vals[n], "%d", (int)(v)), META_S(k, vals[n]))
#define META_G(k, v) (snprintf(vals[n], sizeof vals[n], "%.7g", (double)(v)), META_S(k, vals[n]))
    META_S("parity.config", pc->name);
    META_S("cfg.mixer", mf_mixer_name(cfg.mixer));
    META_S("cfg.pos", mf_pos_name(cfg.pos));
    META_S("cfg.ffn_act", mf_act_name(cfg.ffn_act));
    META_I("cfg.vocab", cfg.vocab);
    META_I("cfg.d_model", cfg.d_model);
    META_I("cfg.n_heads", cfg.n_heads);
    META_I("cfg.n_layers", cfg.n_layers);
    META_I("cfg.d_ff", cfg.d_ff);
    META_I("cfg.max_seq", cfg.max_seq);
    META_I("cfg.ffn_bias", cfg.ffn_bias);
    META_I("cfg.attn_bias", cfg.attn_bias);
    META_I("cfg.pool_size", cfg.pool_size);
    META_I("cfg.pool_causal", cfg.pool_causal);
    META_I("cfg.clone_layers", cfg.clone_layers);
    META_G("cfg.ln_eps", cfg.ln_eps);
    META_G("cfg.dropout", cfg.dropout);
    META_I("cfg.causal", cfg.causal);
    META_I("cfg.n_classes", cfg.n_classes);
    META_S("cfg.block", mf_block_name(cfg.block));
    META_S("cfg.linear_feature", mf_feature_name(cfg.linear_feature));
    META_I("cfg.dpfp_nu", cfg.dpfp_nu);
    META_I("parity.seed", pc->seed);
    META_I("parity.B", B);
    META_I("parity.T", PT);
    META_S("parity.ids", ids_s);
    if (pc->n_classes) {
        META_S("parity.lengths", len_s);
        META_S("parity.labels", lab_s);
    } else META_S("parity.targets", tg_s);
#undef META_S
#undef META_I
#undef META_G
    snprintf(path, sizeof path, "%s/%s.safetensors", outdir, pc->name);
    rc = mf_save(ctx, path, 0, meta, n);
    if (rc < 0) fprintf(stderr, "parity_export: %s\n", mf_error(ctx));
    else printf("%s\n", path);
    mf_model_free(m);
    mf_ctx_free(ctx);
    return rc;
}

int main(int argc, char **argv) {
    size_t i;
    int bad = 0;
    if (argc != 2) { fprintf(stderr, "usage: %s OUTDIR   (writes OUTDIR/<config>.safetensors)\n", argv[0]); return 2; }
    for (i = 0; i < sizeof configs / sizeof configs[0]; i++) bad |= export_one(&configs[i], argv[1]) < 0;
    return bad ? 1 : 0;
}
