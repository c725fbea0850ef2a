/* test_finite.c - non-finite values and memory caps: check mode (mf_set_check_finite)
   names the op where a NaN / Inf starts - in the forward (exp of 1000, an overflowing product), in
   the backward (a gradient that overflows) or in a poisoned parameter - and raises no false alarm
   on any mixer (the same losses bit for bit as without it); mf_ctx_set_memory_limit fails a model,
   an op or the optimizer moments that do not fit with a message naming the cap and who asked, and a
   cap that fits changes nothing; the examples' train_step applies no update on a non-finite step. */
#define _POSIX_C_SOURCE 200809L
#include "metaformer.h"
#define EX_PROG "test_finite"
#include "examples/common.h"
#include "mf_test.h"
#include <stdlib.h>
#include <string.h>

static int has(const char *s, const char *part) {
    static const char *last;
    if (s != last && getenv("MF_TEST_VERBOSE")) printf("    message: %s\n", s), last = s;
    if (!strstr(s, part)) { printf("    \"%s\" not in: %s\n", part, s); return 0; }
    return 1;
}

/* ---- check mode: the forward ---- */
static void test_check_names_exp_overflow(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    int shape[2] = {1, 3};
    float xs[3] = {1.0f, 1000.0f, 2.0f};
    mf_tensor *x, *y;
    MFT_CHECK(mf_set_check_finite(ctx, 1) == 0);
    x = mf_from(ctx, 2, shape, xs);
    y = mf_exp(ctx, x);
    MFT_CHECK(y == NULL && !mf_ok(ctx));
    MFT_CHECK(has(mf_error(ctx), "op exp made inf at element 1 of its output [1, 3]"));
    MFT_CHECK(has(mf_error(ctx), "input 1 [1, 3] (not made by an op) finite"));
    MFT_CHECK(has(mf_error(ctx), "this op is where the value starts"));
    mf_ctx_free(ctx);
}
/* off (the default): the same ops run and make the Inf, and the op downstream of it the NaN */
static void test_check_off_lets_values_through(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    int shape[2] = {1, 3};
    float xs[3] = {1.0f, 1000.0f, 2.0f};
    mf_tensor *y = mf_exp(ctx, mf_from(ctx, 2, shape, xs)), *z = mf_sub(ctx, y, y);
    MFT_CHECK(mf_ok(ctx) && z != NULL);
    if (z) MFT_CHECK(isinf(y->data[1]) && isnan(z->data[1]));
    mf_ctx_free(ctx);
}
/* a product that overflows, after finite ops: the product is named, not the ops after it */
static void test_check_names_the_origin(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    int shape[1] = {4};
    float a[4] = {1e20f, 2.0f, 3.0f, 4.0f};
    mf_tensor *x, *y;
    mf_set_check_finite(ctx, 1);
    x = mf_scale(ctx, mf_from(ctx, 1, shape, a), 2.0f);
    y = mf_sum(ctx, mf_relu(ctx, mf_mul(ctx, x, x)));
    MFT_CHECK(y == NULL);
    MFT_CHECK(has(mf_error(ctx), "op mul made inf at element 0 of its output [4]"));
    MFT_CHECK(has(mf_error(ctx), "input 1 [4] finite; input 2 [4] finite"));
    mf_ctx_free(ctx);
}
/* a parameter holding a NaN: the op that reads it says the value came from outside the ops */
static void test_check_names_poisoned_parameter(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    mf_linear_layer fc = mf_linear_layer_new(ctx, "fc", 3, 2, 1);
    int shape[2] = {2, 3};
    float xs[6] = {1, 2, 3, 4, 5, 6};
    mf_set_check_finite(ctx, 1);
    fc.weight->data[4] = NAN;
    MFT_CHECK(mf_linear(ctx, mf_from(ctx, 2, shape, xs), fc.weight, fc.bias) == NULL);
    MFT_CHECK(has(mf_error(ctx), "op linear made nan"));
    MFT_CHECK(has(mf_error(ctx), "input 2 [2, 3] (parameter \"fc.weight\") holds nan at element 4"));
    MFT_CHECK(has(mf_error(ctx), "came from outside the ops"));
    mf_ctx_free(ctx);
}

/* ---- check mode: the backward. w = 1e-30: the forward (1e-10, then 1e10) is finite; the outer
   scale's backward gives the inner one a gradient of 1e20, whose backward makes 1e40 = Inf ---- */
static void test_check_names_backward_overflow(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    int shape[1] = {2};
    mf_tensor *w = mf_param(ctx, "w", 1, shape), *loss;
    mf_set_check_finite(ctx, 1);
    w->data[0] = 1e-30f; w->data[1] = 0.5e-30f;
    loss = mf_sum(ctx, mf_scale(ctx, mf_scale(ctx, w, 1e20f), 1e20f));
    MFT_CHECK(loss != NULL && mf_ok(ctx));
    MFT_CHECK(mf_backward(ctx, loss) < 0);
    MFT_CHECK(has(mf_error(ctx), "the backward of op scale made inf at element 0 of the gradient of its input 1 [2] "
                                 "(parameter \"w\"), from a finite output gradient [2]"));
    mf_ctx_free(ctx);
}

/* ---- no false alarm: every mixer trains the same with check mode on, bit for bit ---- */
enum { V = 5, T = 12, B = 3 };
static mf_model_config small_config(mf_mixer_kind mixer) {
    mf_model_config c = mf_model_config_default();
    c.vocab = V; c.max_seq = T; c.mixer = mixer; c.pos = MF_POS_LEARNED;
    c.d_model = 16; c.n_heads = 2; c.n_layers = 2; c.d_ff = 24; c.dropout = 0.1f;
    return c;
}
static void batch(int step, int32_t *x, int32_t *y) {
    int i;
    for (i = 0; i < B * T; i++) { x[i] = (i * 7 + step * 3) % V; y[i] = (i * 5 + step + 1) % V; }
}
/* n steps; the losses into out; 0, or -1 with the error printed */
static int train(mf_ctx *ctx, mf_model *m, int n, float *out) {
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 1e-2f);
    int32_t x[B * T], y[B * T];
    int s;
    for (s = 0; s < n; s++) {
        mf_tensor *loss;
        batch(s, x, y);
        loss = mf_model_loss(m, x, y, B, T);
        mf_backward(ctx, loss);
        mf_clip_grad_norm(ctx, 1.0f);
        mf_optimizer_step(ctx, &opt);
        mf_zero_grad(ctx);
        out[s] = mf_item(ctx, loss);
        mf_reset(ctx);
        if (!mf_ok(ctx)) { printf("    step %d: %s\n", s + 1, mf_error(ctx)); return -1; }
    }
    return 0;
}
static void test_check_mode_no_false_alarm(void) {
    int k, s;
    for (k = 0; k < MF_MIXER_COUNT; k++) {
        float plain[3], checked[3];
        int ok = 1;
        for (s = 0; s < 2 && ok; s++) {
            mf_ctx *ctx = mf_ctx_new(3);
            mf_model_config cfg = small_config((mf_mixer_kind)k);
            mf_model *m;
            if (!mf_mixer_compiled((mf_mixer_kind)k)) { mf_ctx_free(ctx); ok = 0; break; }
            mf_set_threads(ctx, 1);
            mf_set_keep_activation_grads(ctx, s); /* recycled gradients in one run, kept in the other */
            mf_set_check_finite(ctx, s);
            m = mf_model_new(ctx, &cfg);
            MFT_CHECK(m != NULL);
            if (!m || train(ctx, m, 3, s ? checked : plain) < 0) { MFT_CHECK(0); ok = 0; }
            mf_model_free(m);
            mf_ctx_free(ctx);
        }
        if (ok) MFT_CHECK(memcmp(plain, checked, sizeof plain) == 0);
    }
}

/* ---- train_step (examples/common.h): a NaN in a weight makes the loss NaN; the step returns 1,
   applies no update (the parameters and the optimizer's step count unchanged, bit for bit) and
   leaves zero gradients; with the weight repaired the next step trains ---- */
static void test_train_step_skips_nonfinite(void) {
    mf_ctx *ctx = mf_ctx_new(3);
    mf_model_config cfg = small_config(MF_MIXER_SDPA);
    mf_model *m = mf_model_new(ctx, &cfg);
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 1e-2f);
    int32_t x[B * T], y[B * T];
    int64_t n = mf_param_count(ctx), i, nonzero = 0;
    float *before = (float *)malloc((size_t)n * sizeof(float)), loss = 0, ar = 0, norm = 0, keep;
    mf_tensor *w = mf_param_at(ctx, 0);
    MFT_CHECK(m != NULL && before != NULL);
    if (!m || !before) { free(before); mf_ctx_free(ctx); return; }
    batch(0, x, y);
    MFT_CHECK(train_step(ctx, m, &opt, 0, x, y, B, B, T, &loss, &ar, &norm, NULL) == 0 && isfinite(loss) && norm > 0);
    keep = w->data[x[0] * cfg.d_model]; /* the embedding row of the first token */
    w->data[x[0] * cfg.d_model] = NAN;
    memcpy(before, mf_param_data(ctx), (size_t)n * sizeof(float));
    MFT_CHECK(train_step(ctx, m, &opt, 1.0f, x, y, B, B, T, &loss, &ar, &norm, NULL) == 1);
    MFT_CHECK(isnan(loss) && !isfinite(norm) && mf_ok(ctx));
    MFT_CHECK(memcmp(before, mf_param_data(ctx), (size_t)n * sizeof(float)) == 0);
    MFT_CHECK(mf_optimizer_steps(ctx) == 1);
    for (i = 0; i < n; i++) nonzero += mf_param_grads(ctx)[i] != 0.0f;
    MFT_CHECK(nonzero == 0);
    w->data[x[0] * cfg.d_model] = keep;
    MFT_CHECK(train_step(ctx, m, &opt, 1.0f, x, y, B, B, T, &loss, &ar, &norm, NULL) == 0 && isfinite(loss));
    MFT_CHECK(mf_optimizer_steps(ctx) == 2);
    free(before);
    mf_model_free(m);
    mf_ctx_free(ctx);
}

/* ---- memory caps ---- */
static mf_model *make(mf_ctx *ctx, size_t cap) {
    mf_model_config cfg = small_config(MF_MIXER_SDPA);
    mf_set_threads(ctx, 1);
    if (cap) mf_ctx_set_memory_limit(ctx, cap);
    return mf_model_new(ctx, &cfg);
}
/* a cap as large as an uncapped run used changes nothing, bit for bit */
static void test_memory_cap_that_fits(void) {
    float plain[3], capped[3];
    mf_ctx *a = mf_ctx_new(3), *b = mf_ctx_new(3);
    mf_model *ma = make(a, 0), *mb;
    size_t used;
    MFT_CHECK(train(a, ma, 3, plain) == 0);
    used = mf_ctx_memory_bytes(a);
    MFT_CHECK(used > 0);
    mb = make(b, used);
    MFT_CHECK(mb != NULL && mf_ctx_memory_limit(b) == used);
    MFT_CHECK(train(b, mb, 3, capped) == 0);
    MFT_CHECK(memcmp(plain, capped, sizeof plain) == 0);
    MFT_CHECK(mf_ctx_memory_bytes(b) <= used);
    mf_model_free(ma); mf_model_free(mb);
    mf_ctx_free(a); mf_ctx_free(b);
}
/* too small for the parameters: mf_model_new fails naming the parameters and the cap */
static void test_memory_cap_parameters(void) {
    mf_ctx *ctx = mf_ctx_new(3);
    MFT_CHECK(make(ctx, 4096) == NULL);
    MFT_CHECK(has(mf_error(ctx), "memory limit: parameters (values and gradients) asks for"));
    MFT_CHECK(has(mf_error(ctx), "of its 4096-byte cap"));
    MFT_CHECK(has(mf_error(ctx), "raise the cap"));
    mf_ctx_free(ctx);
}
/* room for the parameters only: the op that needs activation memory is named */
static void test_memory_cap_activations(void) {
    mf_ctx *probe = mf_ctx_new(3), *ctx = mf_ctx_new(3);
    mf_model *m = make(probe, 0);
    int32_t x[B * T], y[B * T];
    size_t params = mf_ctx_memory_bytes(probe) + 256; /* the model's constants need a little arena */
    mf_model_free(m);
    mf_ctx_free(probe);
    m = make(ctx, params);
    batch(0, x, y);
    MFT_CHECK(m == NULL || mf_model_loss(m, x, y, B, T) == NULL);
    MFT_CHECK(has(mf_error(ctx), "memory limit: op embedding (forward) asks for"));
    mf_model_free(m);
    mf_ctx_free(ctx);
}
/* a cap at what a forward and backward use: the first optimizer step's moments do not fit */
static void test_memory_cap_moments(void) {
    mf_ctx *ctx = mf_ctx_new(3);
    mf_model *m = make(ctx, 0);
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 1e-3f);
    int32_t x[B * T], y[B * T];
    batch(0, x, y);
    MFT_CHECK(mf_backward(ctx, mf_model_loss(m, x, y, B, T)) == 0);
    MFT_CHECK(mf_ctx_set_memory_limit(ctx, mf_ctx_memory_bytes(ctx)) == 0);
    MFT_CHECK(mf_optimizer_step(ctx, &opt) < 0);
    MFT_CHECK(has(mf_error(ctx), "memory limit: optimizer moments asks for"));
    mf_model_free(m);
    mf_ctx_free(ctx);
}
/* a cap below what the context uses already is refused at once */
static void test_memory_cap_below_use(void) {
    mf_ctx *ctx = mf_ctx_new(3);
    mf_model *m = make(ctx, 0);
    MFT_CHECK(mf_ctx_set_memory_limit(ctx, 1000) < 0);
    MFT_CHECK(has(mf_error(ctx), "mf_ctx_set_memory_limit: the cap of 1000 bytes is below"));
    MFT_CHECK(mf_ctx_set_memory_limit(NULL, 10) < 0 && mf_ctx_memory_bytes(NULL) == 0);
    mf_model_free(m);
    mf_ctx_free(ctx);
}

int main(void) {
    MFT_RUN(test_check_names_exp_overflow);
    MFT_RUN(test_check_off_lets_values_through);
    MFT_RUN(test_check_names_the_origin);
    MFT_RUN(test_check_names_poisoned_parameter);
    MFT_RUN(test_check_names_backward_overflow);
    MFT_RUN(test_check_mode_no_false_alarm);
    MFT_RUN(test_train_step_skips_nonfinite);
    MFT_RUN(test_memory_cap_that_fits);
    MFT_RUN(test_memory_cap_parameters);
    MFT_RUN(test_memory_cap_activations);
    MFT_RUN(test_memory_cap_moments);
    MFT_RUN(test_memory_cap_below_use);
    return mft_finish();
}
