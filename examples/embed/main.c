/* main.c - metaformer.h in a program of your own: a small model learns a toy text, is saved to a
 * checkpoint, loaded back into a new context and continues the text. Build it with the Makefile
 * beside it (`make`, or `make cuda` for the GPU); the header comes from METAFORMER_DIR. */
#define METAFORMER_IMPLEMENTATION /* in exactly one file of the program */
#include "metaformer.h"
#include <stdio.h>
#include <string.h>

static const char alphabet[] = " .abcdefghijklmnopqrstuvwxyz"; /* token i is alphabet[i] */
static const char text[] = "the quick brown fox jumps over the lazy dog. ";
enum { T = 32, B = 4, STEPS = 150 };

/* a context on the GPU when this build has CUDA (make cuda) and the machine a GPU, else the CPU */
static mf_ctx *new_context(void) {
    mf_ctx *ctx = mf_ctx_new(42); /* the seed of the initialisation and of dropout */
    if (mf_cuda_available(NULL, 0) > 0) mf_ctx_set_device(ctx, MF_DEVICE_CUDA);
    return ctx;
}

/* batch row b is the text from offset 5 b + s; the target of each token is the next one */
static void batch(int s, int32_t *ids, int32_t *targets) {
    int n = (int)strlen(text), b, t;
    for (b = 0; b < B; b++)
        for (t = 0; t < T; t++) {
            int i = (5 * b + s + t) % n;
            ids[b * T + t] = (int32_t)(strchr(alphabet, text[i]) - alphabet);
            targets[b * T + t] = (int32_t)(strchr(alphabet, text[(i + 1) % n]) - alphabet);
        }
}

/* the loss of the model on the first batch, without training anything */
static float eval_loss(mf_ctx *ctx, mf_model *model) {
    int32_t ids[B * T], targets[B * T];
    float loss;
    batch(0, ids, targets);
    loss = mf_item(ctx, mf_model_loss(model, ids, targets, B, T)); /* the value on the host */
    mf_reset(ctx);
    return loss;
}

static int fail(mf_ctx *ctx) { fprintf(stderr, "error: %s\n", mf_error(ctx)); mf_ctx_free(ctx); return 1; }

int main(void) {
    mf_model_config cfg = mf_model_config_default();
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAMW, 1e-2f);
    int32_t ids[B * T], targets[B * T], prompt[4], out[T - 4];
    float first = 0, last = 0, saved, loaded;
    mf_ctx *ctx = new_context();
    mf_model *model;
    int step, i;

    cfg.vocab = (int)strlen(alphabet);
    cfg.d_model = 32; cfg.n_heads = 2; cfg.n_layers = 2; cfg.d_ff = 64; cfg.max_seq = 64;
    model = mf_model_new(ctx, &cfg);
    if (!model) return fail(ctx);
    printf("device: %s, %d layers, %lld parameters\n", mf_ctx_device(ctx) == MF_DEVICE_CUDA ? "cuda" : "cpu",
           cfg.n_layers, (long long)mf_param_values(ctx, 0));

    for (step = 0; step < STEPS; step++) { /* the training loop */
        mf_tensor *loss;
        batch(step, ids, targets);
        loss = mf_model_loss(model, ids, targets, B, T);
        mf_backward(ctx, loss);
        mf_clip_grad_norm(ctx, 1.0f);
        mf_optimizer_step(ctx, &opt);
        last = mf_item(ctx, loss);
        if (step == 0) first = last;
        if (step % 50 == 0 || step == STEPS - 1) printf("step %2d  loss %.4f\n", step, last);
        mf_zero_grad(ctx);
        mf_reset(ctx); /* frees the step's activations; the parameters stay */
    }
    if (!mf_ok(ctx)) return fail(ctx); /* errors are sticky: one check after the loop */
    saved = eval_loss(ctx, model);
    if (mf_save(ctx, "embed.safetensors", 0, NULL, 0) < 0) return fail(ctx);
    mf_model_free(model); /* before its context */
    mf_ctx_free(ctx);

    /* a new context and model of the same config, its parameters from the checkpoint */
    ctx = new_context();
    model = mf_model_new(ctx, &cfg);
    if (!model || mf_load(ctx, "embed.safetensors", 0) < 0) return fail(ctx);
    loaded = eval_loss(ctx, model);
    printf("loaded embed.safetensors: loss %.4f (saved model %.4f, first step %.4f)\n", loaded, saved, first);
    if (loaded != saved) { fprintf(stderr, "error: the loaded model computes another loss\n"); return 1; }

    /* greedy generation (a NULL sampler) continues a prompt, up to the trained length T */
    for (i = 0; i < 4; i++) prompt[i] = (int32_t)(strchr(alphabet, "the "[i]) - alphabet);
    if (mf_model_generate(model, prompt, 4, T - 4, NULL, out) < 0) return fail(ctx);
    printf("generated: the ");
    for (i = 0; i < T - 4; i++) putchar(alphabet[out[i]]);
    printf("\n");
    mf_model_free(model);
    mf_ctx_free(ctx);
    return 0;
}
