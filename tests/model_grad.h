/* model_grad.h - the gradient checks of whole models (test_model.c, test_fastweights.c,
 * test_feedback.c): a tiny model of a mixer, one fixed batch, and the setup / forward pair with
 * which gc_check_params and gc_check_dir build the model again in each fresh context.
 *
 *   mg_case c;
 *   memset(&c, 0, sizeof c);
 *   c.cfg = mg_tiny(MF_MIXER_SDPA);
 *   MFT_CHECK(mg_check_logits("sdpa", &c));                   // every element of every parameter
 *   c.cfg.dropout = 0.2f;
 *   MFT_CHECK(mg_check_loss("sdpa", "loss + dropout", &c, 6)); // through the loss, 6 directions
 *   mf_model_free(c.model);
 *
 * Include it after metaformer.h and mf_test.h. */
#ifndef MF_MODEL_GRAD_H
#define MF_MODEL_GRAD_H
#include "gradcheck.h"
#include <stdio.h>

/* the batch: B 2, T 5 over a vocabulary of 7, two targets ignored */
enum { MG_B = 2, MG_T = 5, MG_V = 7 };
static const int32_t mg_ids[MG_B * MG_T] = {1, 4, 0, 6, 2, 3, 3, 5, 1, 0};
static const int32_t mg_targets[MG_B * MG_T] = {4, 0, -1, 2, 3, 3, 5, 1, -1, 6};

/* vocab 7, d_model 8, 2 heads, 2 layers, d_ff 12, max_seq 8 */
GC__FN mf_model_config mg_tiny(mf_mixer_kind mixer) {
    mf_model_config c = mf_model_config_default();
    c.vocab = MG_V; c.d_model = 8; c.n_heads = 2; c.n_layers = 2; c.d_ff = 12; c.max_seq = 8;
    c.mixer = mixer;
    c.ffn_act = MF_ACT_GELU; /* smooth: finite differences never straddle a kink */
    return c;
}

typedef struct mg_case {
    mf_model_config cfg;
    mf_model *model;                           /* the latest build: free it after the checks */
    int loss;                                  /* 1: the loss of the batch, 0: its logits */
    void (*prepare)(mf_ctx *ctx, mf_model *m); /* the test's changes to each new model, or NULL */
} mg_case;

GC__FN int mg_setup(mf_ctx *ctx, void *user) {
    mg_case *c = (mg_case *)user;
    mf_model_free(c->model); /* the checker builds a fresh context per evaluation */
    c->model = mf_model_new(ctx, &c->cfg);
    if (!c->model) return -1;
    if (c->prepare) c->prepare(ctx, c->model);
    return 0;
}
GC__FN mf_tensor *mg_forward(mf_ctx *ctx, void *user) {
    mg_case *c = (mg_case *)user;
    (void)ctx;
    return c->loss ? mf_model_loss(c->model, mg_ids, mg_targets, MG_B, MG_T) : mf_model_forward(c->model, mg_ids, MG_B, MG_T);
}

/* DPFP is not smooth: relu kinks, and phi / sum(phi) jumps where only one product is non-zero and
   it vanishes. A finite difference across one fails, so the DPFP models are set up kink-free by
   construction (one layer: only the embedding and Wq, Wk are upstream of DPFP): embedding
   dimension 0 is 2 for every token and the others are scaled by 0.1, Wq[f][0], Wk[f][0] = +-0.5
   and the rest scaled by 0.1, so every projection (also after linear's LayerNorm) stays > 0.3
   away from 0 however the checker perturbs a weight. The goldens check the 2-layer models.
   A prepare hook of mg_case (CPU contexts: it writes the parameters' data). */
GC__FN void mg_kinkfree(mf_ctx *ctx, mf_model *m) {
    const mf_model_config *c = mf_model_get_config(m);
    const char *names[2] = {"layers.0.attn.q.weight", "layers.0.attn.k.weight"};
    mf_tensor *E = mf_param_find(ctx, "tok_emb");
    int i, d, D = c->d_model;
    for (i = 0; i < c->vocab; i++)
        for (d = 0; d < D; d++) E->data[i * D + d] = d == 0 ? 2.0f : 0.3f * E->data[i * D + d];
    for (i = 0; i < 2; i++) {
        mf_tensor *W = mf_param_find(ctx, names[i]);
        int f;
        for (f = 0; f < D; f++)
            for (d = 0; d < D; d++)
                W->data[f * D + d] = d == 0 ? ((f * 5 + i) % 3 == 0 ? -0.5f : 0.5f) : 0.3f * W->data[f * D + d];
    }
}
/* gc_check_params of the logits, "<what> logits": every element of every parameter (a sample of
   each under ASan, GC_MODEL_SAMPLE); 1 when it passes */
GC__FN int mg_check_logits(const char *what, mg_case *c) {
    char name[96];
    gc_opts o = gc_defaults();
    o.max_per_input = GC_MODEL_SAMPLE(o.max_per_input);
    c->loss = 0;
    snprintf(name, sizeof name, "%s logits", what);
    return GC_OK(gc_check_params(name, mg_setup, mg_forward, c, &o));
}
/* gc_check_dir of the loss in n_dir random directions, "<what> <how>"; 1 when it passes */
GC__FN int mg_check_loss(const char *what, const char *how, mg_case *c, int n_dir) {
    char name[96];
    c->loss = 1;
    snprintf(name, sizeof name, "%s %s", what, how);
    return GC_OK(gc_check_dir(name, mg_setup, mg_forward, c, n_dir, NULL));
}
#endif
