/* custom_mixer.c - a token mixer of your own, outside the library: ALiBi attention (Press, Smith and
   Lewis, "Train Short, Test Long", ICLR 2022). Multi-head attention without position embeddings;
   head h adds -m_h |i - j| to the score of query i and key j, with the slopes m_h =
   2^(-alibi_max (h + 1) / H) (the paper's alibi_max: 8). The mixer is ~50 lines below, built from the
   library's public ops (the backward comes from the autograd, CUDA runs it as it is) and registered
   with mf_mixer_register; from then on it is a mixer like the built-in ones (docs/math.md §23).

   Alone:   build/custom_mixer FILE [STEPS [CKPT]]  trains a small ALiBi model on the bytes of a text
            file, saves it to CKPT (default custom_mixer.safetensors) and prints a greedy sample.
   Linked:  make build/train-custom build/ablate-custom build/sample-custom: build/train, ablate and
            sample with this mixer too (compiled with -DEXTRA_MIXERS=custom_mixer_register, this file
            with -DCUSTOM_MIXER_NO_MAIN): build/train-custom FILE --mixer alibi --pos none --fields alibi_max=8 */
#if !defined(CUSTOM_MIXER_NO_MAIN) && !defined(METAFORMER_IMPLEMENTATION_DONE)
#define METAFORMER_IMPLEMENTATION
#endif
#include "../metaformer.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the mixer ---------------------------------------------------------------------------- */
typedef struct alibi_layer { mf_tensor *wqkv, *wo, *bo; } alibi_layer;

/* layer l's parameters "layers.<l>.attn.qkv.weight" [3D, D] (q, k, v stacked: one product) and
   "layers.<l>.attn.out.{weight,bias}", with PyTorch's Linear initialisation */
static void alibi_make_layer(mf_model *m, int l, void *st) {
    alibi_layer *L = (alibi_layer *)st;
    int D = mf_model_get_config(m)->d_model, qkv[2], out[2];
    qkv[0] = 3 * D; qkv[1] = D; out[0] = D; out[1] = D;
    L->wqkv = mf_model_param(m, l, "attn.qkv.weight", 2, qkv);
    L->wo = mf_model_param(m, l, "attn.out.weight", 2, out);
    L->bo = mf_model_param(m, l, "attn.out.bias", 1, &D);
    mf_init_kaiming_uniform(mf_model_ctx(m), L->wqkv);
    mf_init_kaiming_uniform(mf_model_ctx(m), L->wo);
    mf_init_bias(mf_model_ctx(m), L->bo, D);
}

/* x [B, T, D] -> [B, T, D]: softmax(q k^T / sqrt(dk) - m_h |i - j| [+ causal mask]) v, then out */
static mf_tensor *alibi_forward(mf_model *m, int l, void *st, mf_tensor *x) {
    const alibi_layer *L = (const alibi_layer *)st;
    const mf_model_config *c = mf_model_get_config(m);
    mf_ctx *ctx = mf_model_ctx(m);
    int B = x->shape[0], T = x->shape[1], D = c->d_model, H = c->n_heads, h, i, j;
    int heads[4], bias_shape[3], merged[3], swap[4] = {0, 2, 1, 3};
    float alibi_max = mf_model_field(m, "alibi_max");
    float *bias = (float *)malloc((size_t)H * T * T * sizeof(float));
    mf_tensor *qkv, *q, *k, *v, *s, *o;
    (void)l;
    if (!bias) return NULL;
    for (h = 0; h < H; h++) {
        float slope = powf(2.0f, -alibi_max * (float)(h + 1) / (float)H);
        for (i = 0; i < T; i++)
            for (j = 0; j < T; j++) bias[((size_t)h * T + i) * T + j] = -slope * (float)abs(i - j);
    }
    heads[0] = B; heads[1] = T; heads[2] = 3 * H; heads[3] = D / H;
    bias_shape[0] = H; bias_shape[1] = T; bias_shape[2] = T;
    merged[0] = B; merged[1] = T; merged[2] = D;
    qkv = mf_permute(ctx, mf_reshape(ctx, mf_linear(ctx, x, L->wqkv, NULL), 4, heads), swap); /* [B, 3H, T, dk] */
    q = mf_slice(ctx, qkv, 1, 0, H);
    k = mf_slice(ctx, qkv, 1, H, H);
    v = mf_slice(ctx, qkv, 1, 2 * H, H);
    s = mf_scale(ctx, mf_matmul(ctx, q, k, 0, 1), 1.0f / sqrtf((float)(D / H)));              /* [B, H, T, T] */
    s = mf_add(ctx, s, mf_from(ctx, 3, bias_shape, bias));
    free(bias);
    s = mf_dropout(ctx, mf_softmax(ctx, s, c->causal), c->attn_dropout);  /* the library's attn_dropout field */
    o = mf_matmul(ctx, s, v, 0, 0);                                                            /* [B, H, T, dk] */
    return mf_linear(ctx, mf_reshape(ctx, mf_permute(ctx, o, swap), 3, merged), L->wo, L->bo);
}

/* for benchmarks (mf_model_flops): per token, the q, k, v and out products, then QK^T and PV */
static double alibi_flops(const mf_model_config *c, int T, double keys) {
    (void)T;
    return 4 * 2.0 * c->d_model * c->d_model + 2 * 2.0 * c->d_model * keys;
}

static const mf_mixer_field alibi_fields[] = {
    {"alibi_max", 8.0f, 0.0f, 32.0f, 0, "head h's slope is 2^(-alibi_max (h + 1) / heads)"}};

/* register the mixer: its kind, or -1 (the reason on stderr) */
int custom_mixer_register(void) {
    mf_mixer_def d;
    char err[256];
    int kind;
    memset(&d, 0, sizeof d);
    d.name = "alibi";
    d.help = "attention with linear biases instead of positions (Press et al. 2022; examples/custom_mixer.c)";
    d.flags = MF_MIXER_HEADS | MF_MIXER_NONCAUSAL;
    d.n_fields = 1; d.fields = alibi_fields;
    d.model_fields = 1u << MF_FIELD_ATTN_DROPOUT; /* --attn-dropout reaches it as it reaches sdpa */
    d.layer_size = sizeof(alibi_layer);
    d.make_layer = alibi_make_layer; d.forward = alibi_forward; d.flops = alibi_flops;
    if ((kind = mf_mixer_register(&d, err, sizeof err)) < 0) fprintf(stderr, "custom_mixer: %s\n", err);
    return kind;
}

/* ---- alone: train it on a text file's bytes ----------------------------------------------------- */
#ifndef CUSTOM_MIXER_NO_MAIN
int main(int argc, char **argv) {
    enum { B = 16, T = 64 };
    static int32_t x[B * T], y[B * T];
    int kind = custom_mixer_register(), steps = argc > 2 ? atoi(argv[2]) : 300, s, i, b, n = 0;
    const char *ckpt = argc > 3 ? argv[3] : "custom_mixer.safetensors";
    unsigned char *text = NULL;
    FILE *f = argc > 1 ? fopen(argv[1], "rb") : NULL;
    mf_model_config cfg = mf_model_config_default();
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 3e-3f);
    mf_ctx *ctx = mf_ctx_new(1);
    mf_model *m;
    int32_t prompt[8], out[120];
    uint64_t r = 42;
    if (kind < 0) return 1;
    if (!f) { fprintf(stderr, "usage: custom_mixer FILE [STEPS [CKPT]] (a text file of at least %d bytes)\n", T + 1); return 1; }
    text = (unsigned char *)malloc(1 << 20);
    if (text) n = (int)fread(text, 1, 1 << 20, f);
    fclose(f);
    if (n <= T + 8) { fprintf(stderr, "custom_mixer: %s: need more than %d bytes\n", argv[1], T + 8); return 1; }
    cfg.vocab = 256; cfg.d_model = 64; cfg.n_heads = 4; cfg.n_layers = 2; cfg.d_ff = 256; cfg.max_seq = T;
    cfg.mixer = (mf_mixer_kind)kind; cfg.pos = MF_POS_NONE; /* ALiBi needs no position embedding */
    m = mf_model_new(ctx, &cfg);
    for (s = 1; m && s <= steps && mf_ok(ctx); s++) { /* random windows of the text */
        mf_tensor *loss;
        for (b = 0; b < B; b++) {
            int at = (int)((r = r * 6364136223846793005ULL + 1442695040888963407ULL) >> 33) % (n - T - 1);
            for (i = 0; i < T; i++) { x[b * T + i] = text[at + i]; y[b * T + i] = text[at + i + 1]; }
        }
        loss = mf_model_loss(m, x, y, B, T);
        mf_backward(ctx, loss);
        mf_train_update(ctx, &opt, 1.0f);
        if (s % 50 == 0 || s == 1) printf("step %4d  loss %.4f\n", s, mf_item(ctx, loss));
        mf_reset(ctx);
    }
    if (m && mf_model_save(m, ckpt, 1, NULL, 0) == 0) printf("saved %s\n", ckpt);
    for (i = 0; i < 8; i++) prompt[i] = text[i];
    if (m && mf_model_generate(m, prompt, 8, 120, NULL, out) == 0) {
        printf("sample: %.8s", (const char *)text);
        for (i = 0; i < 120; i++) putchar(out[i] >= 32 && out[i] < 127 ? out[i] : out[i] == '\n' ? '\n' : '?');
        putchar('\n');
    }
    if (!mf_ok(ctx)) fprintf(stderr, "custom_mixer: %s\n", mf_error(ctx));
    s = mf_ok(ctx) ? 0 : 1;
    mf_model_free(m);
    mf_ctx_free(ctx);
    free(text);
    return s;
}
#endif
