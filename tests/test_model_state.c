/* mf_model_save / mf_model_load: a memory model's state (the relative mixer's memories of the
   training and validation slots) goes through a checkpoint, so the next call after a load computes
   exactly what it computes without the interruption; files without state (mf_save, older files)
   load with return value 1 and empty memories; a state of another config is refused and changes
   nothing; a stateless model's files are plain checkpoints. */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#include "mf_test.h"
#include <stdlib.h>
#include <string.h>

#define CKPT "build/test_model_state.safetensors"
enum { B = 2, T = 8 };

static mf_model_config rel_config(int mem_len) {
    mf_model_config c = mf_model_config_default();
    c.vocab = 13; c.d_model = 8; c.n_heads = 2; c.n_layers = 2; c.d_ff = 16; c.max_seq = T;
    c.mixer = MF_MIXER_RELATIVE; c.pos = MF_POS_NONE; c.mem_len = mem_len; c.compressive = 1; c.c_mem_len = 4;
    c.dropout = 0.1f;
    return c;
}
static void batch(int k, int32_t *ids, int32_t *tg) {
    int i;
    for (i = 0; i < B * T; i++) { ids[i] = (i * 5 + k * 3) % 13; tg[i] = (ids[i] * 7 + 1) % 13; }
}
/* one training step on batch k; returns the loss */
static float step(mf_ctx *ctx, mf_model *m, int k) {
    int32_t ids[B * T], tg[B * T];
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 1e-2f);
    mf_tensor *loss;
    float l;
    batch(k, ids, tg);
    loss = mf_model_loss(m, ids, tg, B, T);
    l = mf_item(ctx, loss);
    mf_backward(ctx, loss);
    mf_optimizer_step(ctx, &opt);
    mf_zero_grad(ctx);
    mf_reset(ctx);
    return l;
}
/* a loss on the validation slot (no gradient, no dropout) */
static float valid(mf_ctx *ctx, mf_model *m, int k) {
    int32_t ids[B * T], tg[B * T];
    int slot = mf_model_memory_slot(m, 1), g = mf_set_grad(ctx, 0), tr = mf_set_training(ctx, 0);
    float l;
    batch(k, ids, tg);
    l = mf_item(ctx, mf_model_loss(m, ids, tg, B, T));
    mf_reset(ctx);
    mf_set_grad(ctx, g); mf_set_training(ctx, tr);
    mf_model_memory_slot(m, slot);
    return l;
}
static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static void test_memories_resume_exactly(void) {
    mf_model_config cfg = rel_config(6);
    mf_ctx *a = mf_ctx_new(3), *b = mf_ctx_new(4);
    mf_model *ma = mf_model_new(a, &cfg), *mb = mf_model_new(b, &cfg);
    int k;
    float la, lb, va, vb;
    for (k = 0; k < 4; k++) step(a, ma, k);
    valid(a, ma, 0); valid(a, ma, 1); /* slot 1 holds memories too */
    MFT_CHECK(mf_model_save(ma, CKPT, 1, NULL, 0) == 0);
    MFT_CHECK(mf_model_load(mb, CKPT, 1) == 0);
    for (k = 4; k < 7; k++) {
        la = step(a, ma, k); lb = step(b, mb, k);
        MFT_CHECK(same_bits(la, lb));
        if (!same_bits(la, lb)) printf("    step %d: %.9g vs %.9g\n", k, la, lb);
    }
    va = valid(a, ma, 2); vb = valid(b, mb, 2);
    MFT_CHECK(same_bits(va, vb));
    MFT_CHECK(mf_ok(a) && mf_ok(b));
    /* the memories keep their batch size: another one is refused as before */
    {
        int32_t ids[3 * T], tg[3 * T];
        memset(ids, 0, sizeof ids); memset(tg, 0, sizeof tg);
        MFT_CHECK(mf_model_loss(mb, ids, tg, 3, T) == NULL && strstr(mf_error(b), "memories (slot 0) hold 2 rows"));
        mf_clear_error(b);
    }
    mf_model_free(ma); mf_model_free(mb); mf_ctx_free(a); mf_ctx_free(b);
}

/* mf_save's file (the format before mf_model_save): 1, weights loaded, memories empty */
static void test_file_without_state_loads_with_empty_memories(void) {
    mf_model_config cfg = rel_config(6);
    mf_ctx *a = mf_ctx_new(3), *b = mf_ctx_new(4);
    mf_model *ma = mf_model_new(a, &cfg), *mb = mf_model_new(b, &cfg);
    int k;
    float la, lb;
    for (k = 0; k < 3; k++) step(a, ma, k);
    MFT_CHECK(mf_save(a, CKPT, 1, NULL, 0) == 0);
    MFT_CHECK(mf_model_load(mb, CKPT, 1) == 1 && mf_ok(b));
    mf_model_reset_memory(ma);
    la = step(a, ma, 3); lb = step(b, mb, 3);
    MFT_CHECK(same_bits(la, lb)); /* the same weights and optimizer state, both with empty memories */
    mf_model_free(ma); mf_model_free(mb); mf_ctx_free(a); mf_ctx_free(b);
}

/* memories longer than this model keeps (mem_len 6 into mem_len 3): refused, nothing changes */
static void test_state_of_another_config_is_refused(void) {
    mf_model_config c6 = rel_config(6), c3 = rel_config(3);
    mf_ctx *a = mf_ctx_new(3), *b = mf_ctx_new(4);
    mf_model *ma = mf_model_new(a, &c6), *mb = mf_model_new(b, &c3);
    float before[13 * 8], after[13 * 8];
    int k;
    for (k = 0; k < 2; k++) step(a, ma, k);
    MFT_CHECK(mf_model_save(ma, CKPT, 1, NULL, 0) == 0);
    mf_to_host(b, mf_param_find(b, "tok_emb"), before);
    MFT_CHECK(mf_model_load(mb, CKPT, 1) == -1 && strstr(mf_error(b), "do not fit this model"));
    printf("    %s\n", mf_error(b));
    mf_clear_error(b);
    mf_to_host(b, mf_param_find(b, "tok_emb"), after);
    MFT_CHECK(memcmp(before, after, sizeof before) == 0 && mf_optimizer_steps(b) == 0);
    mf_model_free(ma); mf_model_free(mb); mf_ctx_free(a); mf_ctx_free(b);
}

/* a truncated state: mf.state present, a memory tensor missing (its entry renamed) */
static void test_missing_state_tensor_is_an_error(void) {
    mf_model_config cfg = rel_config(6);
    mf_ctx *a = mf_ctx_new(3), *b = mf_ctx_new(4);
    mf_model *ma = mf_model_new(a, &cfg), *mb = mf_model_new(b, &cfg);
    FILE *f;
    long n;
    char *buf, *p;
    step(a, ma, 0);
    MFT_CHECK(mf_model_save(ma, CKPT, 0, NULL, 0) == 0);
    f = fopen(CKPT, "rb"); fseek(f, 0, SEEK_END); n = ftell(f); fseek(f, 0, SEEK_SET);
    buf = (char *)malloc((size_t)n + 1);
    MFT_CHECK(fread(buf, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    buf[n] = 0;
    p = strstr(buf + 8, "__state__.memory.0.mem.1"); /* the JSON header, after its 8-byte length */
    MFT_CHECK(p != NULL);
    if (p) p[23] = '9'; /* "...mem.9": layer 1's memory is missing */
    f = fopen(CKPT, "wb"); fwrite(buf, 1, (size_t)n, f); fclose(f);
    free(buf);
    MFT_CHECK(mf_model_load(mb, CKPT, 0) == -1 && strstr(mf_error(b), "no tensor \"__state__.memory.0.mem.1\""));
    printf("    %s\n", mf_error(b));
    mf_model_free(ma); mf_model_free(mb); mf_ctx_free(a); mf_ctx_free(b);
}

/* a model without state: mf_model_save is mf_save plus "mf.state"; mf_load reads a stateful file */
static void test_stateless_models_and_mf_load(void) {
    mf_model_config cfg = mf_model_config_default(), rc = rel_config(6);
    mf_ctx *a, *b;
    mf_model *m;
    char v[8];
    cfg.vocab = 13; cfg.d_model = 8; cfg.n_heads = 2; cfg.n_layers = 1; cfg.d_ff = 16; cfg.max_seq = T;
    a = mf_ctx_new(1); m = mf_model_new(a, &cfg);
    MFT_CHECK(mf_model_save(m, CKPT, 1, NULL, 0) == 0 && mf_model_load(m, CKPT, 1) == 0);
    MFT_CHECK(mf_load_meta(CKPT, "mf.state", v, sizeof v) == 1 && strcmp(v, "1") == 0);
    mf_model_free(m); mf_ctx_free(a);
    a = mf_ctx_new(1); m = mf_model_new(a, &rc);
    step(a, m, 0);
    MFT_CHECK(mf_model_save(m, CKPT, 1, NULL, 0) == 0);
    mf_model_free(m); mf_ctx_free(a);
    b = mf_ctx_new(2); m = mf_model_new(b, &rc);
    MFT_CHECK(mf_load(b, CKPT, 1) == 0); /* the weights; the state is ignored */
    MFT_CHECK(mf_model_save(NULL, CKPT, 1, NULL, 0) == -1 && mf_model_load(NULL, CKPT, 1) == -1);
    mf_model_free(m); mf_ctx_free(b);
}

int main(void) {
    MFT_RUN(test_memories_resume_exactly);
    MFT_RUN(test_file_without_state_loads_with_empty_memories);
    MFT_RUN(test_state_of_another_config_is_refused);
    MFT_RUN(test_missing_state_tensor_is_an_error);
    MFT_RUN(test_stateless_models_and_mf_load);
    return mft_finish();
}
