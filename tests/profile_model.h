/* profile_model.h - what the op profiler's suites share (test_profile.c on the CPU,
   test_cuda_profile.cpp on a GPU): a tiny sdpa language model, its training step, and an entry of
   the profile by name. */
#ifndef PROFILE_MODEL_H
#define PROFILE_MODEL_H
#include <string.h>

#define PROF_B 2
#define PROF_T 8

static mf_model *prof_model(mf_ctx *ctx) {
    mf_model_config c = mf_model_config_default();
    c.d_model = 16; c.n_heads = 2; c.n_layers = 2; c.d_ff = 32; c.vocab = 11; c.max_seq = PROF_T;
    return mf_model_new(ctx, &c);
}
/* one training step as bench_model and examples/train.c take it */
static void prof_step(mf_ctx *ctx, mf_model *m, int step) {
    int32_t ids[PROF_B * PROF_T], tg[PROF_B * PROF_T];
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 1e-2f);
    int i;
    for (i = 0; i < PROF_B * PROF_T; i++) { ids[i] = (i * 7 + step) % 11; tg[i] = (i * 3 + 1 + step) % 11; }
    mf_backward(ctx, mf_model_loss(m, ids, tg, PROF_B, PROF_T));
    mf_clip_grad_norm(ctx, 1.0f);
    mf_optimizer_step(ctx, &opt);
    mf_zero_grad(ctx);
    mf_reset(ctx);
}
static const mf_profile_entry *prof_find(const mf_profile_entry *e, int n, const char *name) {
    int i;
    for (i = 0; i < n; i++) if (!strcmp(e[i].name, name)) return &e[i];
    return NULL;
}
#endif
