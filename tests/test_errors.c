/* test_errors.c - bad input never crashes: every public entry point returns NULL / -1 / a no-op,
 * and the context keeps a message that names the function and the problem.
 *
 * Each message is printed once ("    msg: ...") so a human can review its clarity.
 * This file also runs under ASan + UBSan (make test). */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#include "mf_test.h"

#include <stdarg.h>
#include <string.h>

/* The context has failed; its message contains each of the NULL-terminated substrings. Prints the
   message, clears the error and checks the context is usable again. */
static void expect_error_(mf_ctx *ctx, int line, ...) {
    const char *msg = mf_error(ctx), *s;
    va_list ap;
    if (mf_ok(ctx)) {
        printf("    line %d: expected an error, but the context is fine\n", line);
        MFT_CHECK(!mf_ok(ctx));
        return;
    }
    printf("    msg: %s\n", msg);
    va_start(ap, line);
    while ((s = va_arg(ap, const char *)) != NULL)
        if (!strstr(msg, s)) {
            printf("    line %d: the message lacks \"%s\"\n", line, s);
            MFT_CHECK(strstr(msg, s) != NULL);
        }
    va_end(ap);
    mf_clear_error(ctx);
    MFT_CHECK(mf_ok(ctx));
    MFT_CHECK(mf_error(ctx)[0] == 0);
}
#define EXPECT_ERR(ctx, ...) expect_error_(ctx, __LINE__, __VA_ARGS__, (const char *)NULL)
/* a tensor-returning call that must fail with a message holding the given substrings */
#define EXPECT_NULL(ctx, call, ...) do { mf_tensor *r_ = (call); MFT_CHECK(r_ == NULL); \
    expect_error_(ctx, __LINE__, __VA_ARGS__, (const char *)NULL); } while (0)
/* an int-returning call that must give -1 */
#define EXPECT_NEG(ctx, call, ...) do { int r_ = (call); MFT_CHECK(r_ == -1); \
    expect_error_(ctx, __LINE__, __VA_ARGS__, (const char *)NULL); } while (0)

static mf_tensor *T(mf_ctx *ctx, int ndim, int d0, int d1, int d2, int d3) {
    int shape[4];
    shape[0] = d0; shape[1] = d1; shape[2] = d2; shape[3] = d3;
    return mf_new(ctx, ndim, shape);
}

/* ---- a NULL context: every function returns NULL / -1 / 0 and nothing crashes ---------------- */
static void test_null_ctx(void) {
    mf_ctx *other = mf_ctx_new(1), *N = NULL;
    int sh[2] = {2, 2}, ids[1] = {0};
    float vals[4] = {1, 2, 3, 4};
    mf_tensor *a = mf_from(other, 2, sh, vals), *p = mf_param(other, "p", 2, sh);
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 1e-3f);
    mf_linear_layer L;
    const char *msg = mf_error(NULL);
    MFT_CHECK(a && p);
    printf("    msg: %s\n", msg);
    MFT_CHECK(msg != NULL && strstr(msg, "NULL") != NULL);
    MFT_CHECK(mf_ok(NULL) == 0);
    mf_ctx_free(NULL);
    mf_clear_error(NULL);
    mf_set_threads(NULL, 2);
    MFT_CHECK(mf_set_training(NULL, 0) == 0);
    mf_reset(NULL);
    MFT_CHECK(mf_activation_bytes(NULL) == 0 && mf_activation_peak_bytes(NULL) == 0);
    MFT_CHECK(mf_param_count(NULL) == 0);
    MFT_CHECK(mf_new(N, 2, sh) == NULL);
    MFT_CHECK(mf_from(N, 2, sh, vals) == NULL);
    MFT_CHECK(mf_param(N, "q", 2, sh) == NULL);
    MFT_CHECK(mf_param_find(NULL, "p") == NULL);
    MFT_CHECK(mf_param_at(NULL, 0) == NULL);
    MFT_CHECK(mf_param_tensors(NULL) == 0);
    MFT_CHECK(mf_param_data(NULL) == NULL && mf_param_grads(NULL) == NULL);
    MFT_CHECK(mf_init_const(N, p, 1) == -1);
    MFT_CHECK(mf_init_uniform(N, p, 0, 1) == -1);
    MFT_CHECK(mf_init_normal(N, p, 0, 1) == -1);
    MFT_CHECK(mf_init_kaiming_uniform(N, p) == -1);
    MFT_CHECK(mf_init_bias(N, p, 2) == -1);
    MFT_CHECK(mf_backward(N, a) == -1);
    MFT_CHECK(mf_set_grad(NULL, 0) == 0);
    MFT_CHECK(mf_detach(N, a) == NULL);
    mf_zero_grad(NULL);
    /* every op, with valid tensors of another context */
    MFT_CHECK(mf_matmul(N, a, a, 0, 0) == NULL);
    MFT_CHECK(mf_linear(N, a, p, NULL) == NULL);
    MFT_CHECK(mf_add(N, a, a) == NULL && mf_sub(N, a, a) == NULL && mf_mul(N, a, a) == NULL);
    MFT_CHECK(mf_scale(N, a, 2) == NULL && mf_relu(N, a) == NULL && mf_gelu(N, a, 0) == NULL);
    MFT_CHECK(mf_sigmoid(N, a) == NULL && mf_silu(N, a) == NULL && mf_exp(N, a) == NULL);
    MFT_CHECK(mf_softmax(N, a, 1) == NULL && mf_log_softmax(N, a) == NULL);
    MFT_CHECK(mf_cross_entropy(N, a, ids, -1) == NULL);
    MFT_CHECK(mf_mse(N, a, a) == NULL);
    MFT_CHECK(mf_layernorm(N, a, NULL, NULL, 1e-5f) == NULL);
    MFT_CHECK(mf_embedding(N, p, ids, 1, ids + 0 /* shape {0} is never read */) == NULL);
    MFT_CHECK(mf_dropout(N, a, 0.5f) == NULL);
    MFT_CHECK(mf_reshape(N, a, 1, sh) == NULL);
    MFT_CHECK(mf_permute(N, a, sh) == NULL && mf_transpose(N, a, 0, 1) == NULL);
    MFT_CHECK(mf_concat(N, a, a, 0) == NULL && mf_slice(N, a, 0, 0, 1) == NULL);
    MFT_CHECK(mf_roll(N, a, 1, 0) == NULL && mf_sum(N, a) == NULL && mf_mean(N, a) == NULL);
    MFT_CHECK(mf_sum_axis(N, a, 0) == NULL);
    MFT_CHECK(mf_conv1d(N, a, a, NULL, 1, 0) == NULL);
    L = mf_linear_layer_new(N, "fc", 2, 2, 1);
    MFT_CHECK(L.weight == NULL && L.bias == NULL);
    MFT_CHECK(mf_optimizer_step(N, &opt) == -1);
    MFT_CHECK(mf_train_update(N, &opt, 1.0f) == -1.0f);
    MFT_CHECK(mf_optimizer_steps(NULL) == 0);
    MFT_CHECK(mf_clip_grad_norm(N, 1.0f) == 0.0f);
    /* the other context was not touched */
    MFT_CHECK(mf_ok(other));
    mf_ctx_free(other);
}

/* ---- NULL tensors: the message names the op and says NULL ---------------------------------- */
static void test_null_tensors(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    mf_tensor *a = T(ctx, 2, 2, 3, 0, 0), *z = NULL;
    int sh[2] = {2, 3}, perm[2] = {1, 0};
    int32_t ids[2] = {0, 1};
    EXPECT_NULL(ctx, mf_matmul(ctx, z, a, 0, 0), "matmul", "NULL");
    EXPECT_NULL(ctx, mf_matmul(ctx, a, z, 0, 1), "matmul", "NULL");
    EXPECT_NULL(ctx, mf_linear(ctx, z, a, NULL), "linear", "NULL");
    EXPECT_NULL(ctx, mf_linear(ctx, a, z, NULL), "linear", "NULL");
    EXPECT_NULL(ctx, mf_add(ctx, z, a), "add", "NULL");
    EXPECT_NULL(ctx, mf_sub(ctx, a, z), "sub", "NULL");
    EXPECT_NULL(ctx, mf_mul(ctx, z, z), "mul", "NULL");
    EXPECT_NULL(ctx, mf_scale(ctx, z, 2), "scale", "NULL");
    EXPECT_NULL(ctx, mf_relu(ctx, z), "relu", "NULL");
    EXPECT_NULL(ctx, mf_gelu(ctx, z, 1), "gelu", "NULL");
    EXPECT_NULL(ctx, mf_sigmoid(ctx, z), "sigmoid", "NULL");
    EXPECT_NULL(ctx, mf_silu(ctx, z), "silu", "NULL");
    EXPECT_NULL(ctx, mf_exp(ctx, z), "exp", "NULL");
    EXPECT_NULL(ctx, mf_softmax(ctx, z, 0), "softmax", "NULL");
    EXPECT_NULL(ctx, mf_log_softmax(ctx, z), "log_softmax", "NULL");
    EXPECT_NULL(ctx, mf_cross_entropy(ctx, z, ids, -1), "cross_entropy", "NULL");
    EXPECT_NULL(ctx, mf_cross_entropy(ctx, a, NULL, -1), "cross_entropy", "targets", "NULL");
    EXPECT_NULL(ctx, mf_mse(ctx, a, z), "mse", "NULL");
    EXPECT_NULL(ctx, mf_layernorm(ctx, z, NULL, NULL, 1e-5f), "layernorm", "NULL");
    EXPECT_NULL(ctx, mf_embedding(ctx, z, ids, 1, sh), "embedding", "NULL");
    EXPECT_NULL(ctx, mf_embedding(ctx, a, NULL, 1, sh), "embedding", "ids", "NULL");
    EXPECT_NULL(ctx, mf_embedding(ctx, a, ids, 1, NULL), "embedding", "shape", "NULL");
    EXPECT_NULL(ctx, mf_dropout(ctx, z, 0.1f), "dropout", "NULL");
    mf_set_training(ctx, 0); /* the identity path checks too */
    EXPECT_NULL(ctx, mf_dropout(ctx, z, 0.1f), "dropout", "NULL");
    mf_set_training(ctx, 1);
    EXPECT_NULL(ctx, mf_reshape(ctx, z, 2, sh), "reshape", "NULL");
    EXPECT_NULL(ctx, mf_reshape(ctx, a, 2, NULL), "reshape", "shape", "NULL");
    EXPECT_NULL(ctx, mf_permute(ctx, z, perm), "permute", "NULL");
    EXPECT_NULL(ctx, mf_permute(ctx, a, NULL), "permute", "perm", "NULL");
    EXPECT_NULL(ctx, mf_transpose(ctx, z, 0, 1), "transpose", "NULL");
    EXPECT_NULL(ctx, mf_concat(ctx, a, z, 0), "concat", "NULL");
    EXPECT_NULL(ctx, mf_slice(ctx, z, 0, 0, 1), "slice", "NULL");
    EXPECT_NULL(ctx, mf_roll(ctx, z, 1, 0), "roll", "NULL");
    EXPECT_NULL(ctx, mf_sum(ctx, z), "sum", "NULL");
    EXPECT_NULL(ctx, mf_mean(ctx, z), "mean", "NULL");
    EXPECT_NULL(ctx, mf_sum_axis(ctx, z, 0), "sum_axis", "NULL");
    EXPECT_NULL(ctx, mf_conv1d(ctx, z, a, NULL, 1, 0), "conv1d", "NULL");
    EXPECT_NULL(ctx, mf_conv1d(ctx, a, z, NULL, 1, 0), "conv1d", "NULL");
    EXPECT_NULL(ctx, mf_detach(ctx, z), "detach", "NULL");
    EXPECT_NULL(ctx, mf_from(ctx, 2, sh, NULL), "mf_from", "NULL");
    EXPECT_NEG(ctx, mf_backward(ctx, z), "mf_backward", "NULL");
    EXPECT_NEG(ctx, mf_init_const(ctx, z, 1), "mf_init_const", "NULL");
    EXPECT_NEG(ctx, mf_init_uniform(ctx, z, 0, 1), "mf_init_uniform", "NULL");
    EXPECT_NEG(ctx, mf_init_normal(ctx, z, 0, 1), "mf_init_normal", "NULL");
    EXPECT_NEG(ctx, mf_init_kaiming_uniform(ctx, z), "mf_init_kaiming_uniform", "NULL");
    EXPECT_NEG(ctx, mf_init_bias(ctx, z, 3), "mf_init_bias", "NULL");
    /* no-ops that need no context */
    mf_param_set_trainable(NULL, 0);
    mf_param_set_trainable(a, 0); /* an activation: ignored */
    MFT_CHECK(a->requires_grad == 0);
    {
        char buf[64];
        MFT_CHECK(strcmp(mf_shape_str(NULL, buf, sizeof buf), "NULL") == 0);
        MFT_CHECK(mf_shape_str(a, NULL, 0) == NULL);
        MFT_CHECK(strcmp(mf_shape_str(a, buf, sizeof buf), "[2, 3]") == 0);
    }
    MFT_CHECK(mf_ok(ctx));
    mf_ctx_free(ctx);
}

/* ---- shape rules: the message names the op and the shapes -------------------------------------- */
static void test_shape_mismatch(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    mf_tensor *a23 = T(ctx, 2, 2, 3, 0, 0), *b45 = T(ctx, 2, 4, 5, 0, 0), *b32 = T(ctx, 2, 3, 2, 0, 0);
    mf_tensor *v3 = T(ctx, 1, 3, 0, 0, 0), *v2 = T(ctx, 1, 2, 0, 0, 0);
    mf_tensor *x234 = T(ctx, 3, 2, 3, 4, 0), *x546 = T(ctx, 3, 5, 4, 6, 0);
    int perm_dup[2] = {0, 0}, perm_big[2] = {0, 2}, shape8[2] = {4, 2}, shape_inf[2] = {4, -1};
    int shape_2inf[2] = {-1, -1}, shape5[5] = {1, 1, 1, 1, 6};
    /* matmul */
    EXPECT_NULL(ctx, mf_matmul(ctx, a23, b45, 0, 0), "matmul", "[2, 3]", "[4, 5]", "K = 3", "K = 4");
    EXPECT_NULL(ctx, mf_matmul(ctx, a23, b32, 1, 0), "matmul", "[2, 3]", "[3, 2]", "transposed");
    EXPECT_NULL(ctx, mf_matmul(ctx, x234, x546, 0, 0), "matmul", "batch", "[2, 3, 4]", "[5, 4, 6]");
    EXPECT_NULL(ctx, mf_matmul(ctx, v3, b32, 0, 0), "matmul", "2 dims", "[3]");
    MFT_CHECK(mf_matmul(ctx, a23, b32, 0, 0) != NULL); /* the good case works */
    /* linear: weight [out, in] */
    EXPECT_NULL(ctx, mf_linear(ctx, a23, b45, NULL), "linear", "[2, 3]", "[4, 5]");
    EXPECT_NULL(ctx, mf_linear(ctx, a23, v3, NULL), "linear", "[2, 3]", "[3]");
    EXPECT_NULL(ctx, mf_linear(ctx, a23, b32 /* [3, 2]: in 2 */, NULL), "linear", "[3, 2]");
    EXPECT_NULL(ctx, mf_linear(ctx, a23, a23, v3), "linear", "bias", "[3]", "2");
    /* broadcasting */
    EXPECT_NULL(ctx, mf_add(ctx, a23, v2), "add", "[2, 3]", "[2]", "broadcast");
    EXPECT_NULL(ctx, mf_sub(ctx, b32, a23), "sub", "[3, 2]", "[2, 3]");
    EXPECT_NULL(ctx, mf_mul(ctx, x234, a23), "mul", "[2, 3, 4]", "[2, 3]");
    MFT_CHECK(mf_add(ctx, a23, v3) != NULL && mf_mul(ctx, v3, a23) != NULL);
    /* mse */
    EXPECT_NULL(ctx, mf_mse(ctx, a23, b32), "mse", "[2, 3]", "[3, 2]");
    EXPECT_NULL(ctx, mf_mse(ctx, v3, a23), "mse", "[3]", "[2, 3]");
    /* layernorm: gamma / beta have D elements, eps > 0 */
    EXPECT_NULL(ctx, mf_layernorm(ctx, a23, v2, NULL, 1e-5f), "layernorm", "3", "[2]");
    EXPECT_NULL(ctx, mf_layernorm(ctx, a23, v3, v2, 1e-5f), "layernorm", "3", "[2]");
    EXPECT_NULL(ctx, mf_layernorm(ctx, a23, v3, v3, 0.0f), "layernorm", "eps");
    /* concat */
    EXPECT_NULL(ctx, mf_concat(ctx, a23, b45, 0), "concat", "[2, 3]", "[4, 5]", "axis 0");
    EXPECT_NULL(ctx, mf_concat(ctx, a23, v3, 0), "concat", "[2, 3]", "[3]");
    EXPECT_NULL(ctx, mf_concat(ctx, a23, a23, 2), "concat", "axis 2");
    EXPECT_NULL(ctx, mf_concat(ctx, a23, a23, -3), "concat", "axis -3");
    /* slice */
    EXPECT_NULL(ctx, mf_slice(ctx, a23, 1, 2, 2), "slice", "[2, 3]", "size 3");
    EXPECT_NULL(ctx, mf_slice(ctx, a23, 1, -1, 1), "slice", "-1");
    EXPECT_NULL(ctx, mf_slice(ctx, a23, 1, 0, 0), "slice", "len");
    EXPECT_NULL(ctx, mf_slice(ctx, a23, 2, 0, 1), "slice", "axis 2", "[2, 3]");
    EXPECT_NULL(ctx, mf_slice(ctx, a23, 0, 1, 2147483647), "slice", "[2, 3]");
    /* permute / transpose */
    EXPECT_NULL(ctx, mf_permute(ctx, a23, perm_dup), "permute", "[2, 3]", "entry 1 is 0");
    EXPECT_NULL(ctx, mf_permute(ctx, a23, perm_big), "permute", "[2, 3]", "entry 1 is 2");
    EXPECT_NULL(ctx, mf_transpose(ctx, a23, 0, 2), "transpose", "[2, 3]");
    /* reshape */
    EXPECT_NULL(ctx, mf_reshape(ctx, a23, 2, shape8), "reshape", "[2, 3]", "6", "8");
    EXPECT_NULL(ctx, mf_reshape(ctx, a23, 2, shape_inf), "reshape", "[2, 3]", "6");
    EXPECT_NULL(ctx, mf_reshape(ctx, a23, 2, shape_2inf), "reshape", "-1");
    EXPECT_NULL(ctx, mf_reshape(ctx, a23, 5, shape5), "reshape", "ndim 5");
    EXPECT_NULL(ctx, mf_reshape(ctx, a23, 0, shape8), "reshape", "ndim 0");
    /* roll / sum_axis / softmax */
    EXPECT_NULL(ctx, mf_roll(ctx, a23, 1, 2), "roll", "axis 2", "[2, 3]");
    EXPECT_NULL(ctx, mf_roll(ctx, a23, 1, -3), "roll", "axis -3");
    EXPECT_NULL(ctx, mf_sum_axis(ctx, a23, 5), "sum_axis", "axis 5", "[2, 3]");
    EXPECT_NULL(ctx, mf_sum_axis(ctx, v3, -2), "sum_axis", "axis -2", "[3]");
    EXPECT_NULL(ctx, mf_softmax(ctx, v3, 1), "softmax", "causal", "[3]");
    MFT_CHECK(mf_softmax(ctx, v3, 0) != NULL);
    /* conv1d: x [B, T, Cin], w [Cout, Cin, K] */
    {
        mf_tensor *x = T(ctx, 3, 1, 5, 3, 0), *w_bad = T(ctx, 3, 2, 4, 3, 0), *w = T(ctx, 3, 2, 3, 3, 0);
        mf_tensor *w_long = T(ctx, 3, 2, 3, 9, 0);
        EXPECT_NULL(ctx, mf_conv1d(ctx, x, w_bad, NULL, 1, 0), "conv1d", "[1, 5, 3]", "[2, 4, 3]");
        EXPECT_NULL(ctx, mf_conv1d(ctx, a23, w, NULL, 1, 0), "conv1d", "[2, 3]");
        EXPECT_NULL(ctx, mf_conv1d(ctx, x, w_long, NULL, 1, 1), "conv1d", "5", "9", "shorter");
        EXPECT_NULL(ctx, mf_conv1d(ctx, x, w, NULL, 0, 0), "conv1d", "stride 0");
        EXPECT_NULL(ctx, mf_conv1d(ctx, x, w, NULL, 1, -1), "conv1d", "pad -1");
        EXPECT_NULL(ctx, mf_conv1d(ctx, x, w, v3, 1, 0), "conv1d", "bias", "2");
        MFT_CHECK(mf_conv1d(ctx, x, w, v2, 2, 1) != NULL);
    }
    MFT_CHECK(mf_ok(ctx));
    mf_ctx_free(ctx);
}

/* ---- ids and targets out of range: the message names the value and its position ------------- */
static void test_ids_targets(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    int vd[2] = {5, 4}, sh3[1] = {3}, sh22[2] = {2, 2}, sh4[4] = {1, 1, 1, 3};
    mf_tensor *table = mf_param(ctx, "emb", 2, vd), *logits = T(ctx, 2, 3, 4, 0, 0);
    int32_t ids_bad[3] = {0, 4, 7}, ids_neg[4] = {1, 2, 3, -2}, ids_ok[3] = {0, 4, 2};
    int32_t tg_bad[3] = {0, 9, 1}, tg_neg[3] = {0, 1, -3}, tg_ign[3] = {-100, 3, -100};
    int bad_shape[1] = {0};
    EXPECT_NULL(ctx, mf_embedding(ctx, table, ids_bad, 1, sh3), "embedding", "id 7", "position 2", "[0, 5)");
    EXPECT_NULL(ctx, mf_embedding(ctx, table, ids_neg, 2, sh22), "embedding", "id -2", "position 3");
    EXPECT_NULL(ctx, mf_embedding(ctx, logits, ids_ok, 1, sh3), "embedding", "id 4", "[0, 3)");
    EXPECT_NULL(ctx, mf_embedding(ctx, table, ids_ok, 4, sh4), "embedding", "4 dims");
    EXPECT_NULL(ctx, mf_embedding(ctx, table, ids_ok, 1, bad_shape), "embedding", "size 0");
    EXPECT_NULL(ctx, mf_embedding(ctx, T(ctx, 1, 5, 0, 0, 0), ids_ok, 1, sh3), "embedding", "[V, D]", "[5]");
    MFT_CHECK(mf_embedding(ctx, table, ids_ok, 1, sh3) != NULL);
    EXPECT_NULL(ctx, mf_cross_entropy(ctx, logits, tg_bad, -1), "cross_entropy", "target 9", "row 1", "[0, 4)");
    EXPECT_NULL(ctx, mf_cross_entropy(ctx, logits, tg_neg, -1), "cross_entropy", "target -3", "row 2");
    EXPECT_NULL(ctx, mf_cross_entropy(ctx, logits, tg_ign, -1), "cross_entropy", "target -100", "row 0");
    MFT_CHECK(mf_cross_entropy(ctx, logits, tg_ign, -100) != NULL); /* ignored rows are fine */
    MFT_CHECK(mf_ok(ctx));
    mf_ctx_free(ctx);
}

static void test_dropout_p(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    mf_tensor *x = T(ctx, 1, 8, 0, 0, 0);
    EXPECT_NULL(ctx, mf_dropout(ctx, x, 1.0f), "dropout", "p = 1", "[0, 1)");
    EXPECT_NULL(ctx, mf_dropout(ctx, x, -0.1f), "dropout", "p = -0.1");
    EXPECT_NULL(ctx, mf_dropout(ctx, x, NAN), "dropout", "nan");
    mf_set_training(ctx, 0); /* a bad p is an error in evaluation mode too */
    EXPECT_NULL(ctx, mf_dropout(ctx, x, 1.5f), "dropout", "1.5");
    MFT_CHECK(mf_dropout(ctx, x, 0.5f) == x);
    MFT_CHECK(mf_ok(ctx));
    mf_ctx_free(ctx);
}

/* ---- tensor and parameter shapes, parameter names ------------------------------------------ */
static void test_bad_shapes_and_names(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    int ok[2] = {2, 3}, zero[2] = {2, 0}, neg[2] = {-4, 3}, five[5] = {1, 1, 1, 1, 1};
    float vals[6] = {0};
    EXPECT_NULL(ctx, mf_new(ctx, 0, ok), "mf_new", "ndim is 0", "1 to 4");
    EXPECT_NULL(ctx, mf_new(ctx, 5, five), "mf_new", "ndim is 5");
    EXPECT_NULL(ctx, mf_new(ctx, -1, ok), "mf_new", "ndim is -1");
    EXPECT_NULL(ctx, mf_new(ctx, 2, zero), "mf_new", "size 0", "dimension 1");
    EXPECT_NULL(ctx, mf_new(ctx, 2, neg), "mf_new", "size -4", "dimension 0");
    EXPECT_NULL(ctx, mf_new(ctx, 2, NULL), "mf_new", "shape is NULL");
    EXPECT_NULL(ctx, mf_from(ctx, 2, zero, vals), "size 0");
    EXPECT_NULL(ctx, mf_param(ctx, "a", 0, ok), "mf_param", "ndim is 0");
    EXPECT_NULL(ctx, mf_param(ctx, "a", 5, five), "mf_param", "ndim is 5");
    EXPECT_NULL(ctx, mf_param(ctx, "a", 2, zero), "mf_param", "size 0");
    EXPECT_NULL(ctx, mf_param(ctx, "a", 2, neg), "mf_param", "size -4");
    EXPECT_NULL(ctx, mf_param(ctx, "a", 2, NULL), "mf_param", "NULL");
    MFT_CHECK(mf_param_tensors(ctx) == 0 && mf_param_count(ctx) == 0); /* nothing half-made */
    MFT_CHECK(mf_param(ctx, "w", 2, ok) != NULL);
    EXPECT_NULL(ctx, mf_param(ctx, "w", 2, ok), "mf_param", "\"w\"", "unique");
    EXPECT_NULL(ctx, mf_param(ctx, "w", 1, ok), "mf_param", "\"w\"");
    EXPECT_NULL(ctx, mf_param(ctx, "", 2, ok), "mf_param", "empty");
    EXPECT_NULL(ctx, mf_param(ctx, NULL, 2, ok), "mf_param", "NULL");
    MFT_CHECK(mf_param_tensors(ctx) == 1);
    MFT_CHECK(mf_param_at(ctx, 1) == NULL && mf_param_at(ctx, -1) == NULL);
    MFT_CHECK(mf_param_find(ctx, NULL) == NULL && mf_param_find(ctx, "nope") == NULL);
    MFT_CHECK(mf_ok(ctx)); /* lookups raise nothing */
    {
        mf_linear_layer L = mf_linear_layer_new(ctx, NULL, 2, 2, 1);
        MFT_CHECK(L.weight == NULL && L.bias == NULL);
        EXPECT_ERR(ctx, "mf_linear_layer_new", "name");
        L = mf_linear_layer_new(ctx, "fc", 0, 2, 1);
        MFT_CHECK(L.weight == NULL && L.bias == NULL);
        EXPECT_ERR(ctx, "size 0");
        L = mf_linear_layer_new(ctx, "fc2", 2, 2, 1);
        MFT_CHECK(L.weight != NULL && L.bias != NULL);
        L = mf_linear_layer_new(ctx, "fc2", 2, 2, 1); /* the same layer twice */
        MFT_CHECK(L.weight == NULL);
        EXPECT_ERR(ctx, "\"fc2.weight\"");
    }
    /* initialisers */
    {
        mf_tensor *w = mf_param_find(ctx, "w");
        EXPECT_NEG(ctx, mf_init_normal(ctx, w, 0, -1), "mf_init_normal", "std", "-1");
        EXPECT_NEG(ctx, mf_init_normal(ctx, w, 0, NAN), "mf_init_normal", "std");
        EXPECT_NEG(ctx, mf_init_bias(ctx, w, 0), "mf_init_bias", "fan_in 0");
    }
    MFT_CHECK(mf_ok(ctx));
    mf_ctx_free(ctx);
}

/* ---- backward ----------------------------------------------------------------------------------- */
static void test_backward_errors(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    int sh[2] = {2, 3}, one = 1;
    mf_tensor *w = mf_param(ctx, "w", 2, sh), *s = mf_param(ctx, "s", 1, &one);
    mf_tensor *x = T(ctx, 2, 2, 3, 0, 0), *y, *loss;
    /* not a scalar */
    y = mf_mul(ctx, x, w);
    EXPECT_NEG(ctx, mf_backward(ctx, y), "mf_backward", "[2, 3]", "mf_sum");
    /* no gradient: plain activations, a no-grad region, a detached tensor */
    EXPECT_NEG(ctx, mf_backward(ctx, mf_sum(ctx, x)), "mf_backward", "trainable");
    mf_set_grad(ctx, 0);
    loss = mf_sum(ctx, mf_mul(ctx, x, w));
    mf_set_grad(ctx, 1);
    EXPECT_NEG(ctx, mf_backward(ctx, loss), "mf_backward", "trainable");
    EXPECT_NEG(ctx, mf_backward(ctx, mf_sum(ctx, mf_detach(ctx, mf_mul(ctx, x, w)))), "mf_backward", "trainable");
    /* a frozen parameter */
    mf_param_set_trainable(w, 0);
    EXPECT_NEG(ctx, mf_backward(ctx, mf_sum(ctx, mf_mul(ctx, x, w))), "mf_backward", "trainable");
    mf_param_set_trainable(w, 1);
    /* a one-element parameter is not an op result */
    EXPECT_NEG(ctx, mf_backward(ctx, s), "mf_backward");
    /* from before mf_reset */
    loss = mf_sum(ctx, mf_mul(ctx, x, w));
    MFT_CHECK(mf_backward(ctx, loss) == 0);
    mf_reset(ctx);
    EXPECT_NEG(ctx, mf_backward(ctx, loss), "mf_backward", "mf_reset");
    /* from another context */
    {
        mf_ctx *c2 = mf_ctx_new(2);
        mf_tensor *w2 = mf_param(c2, "w", 2, sh), *l2 = mf_sum(c2, w2);
        EXPECT_NEG(ctx, mf_backward(ctx, l2), "mf_backward", "context");
        MFT_CHECK(mf_ok(c2));
        mf_ctx_free(c2);
    }
    MFT_CHECK(mf_ok(ctx));
    mf_ctx_free(ctx);
}

/* ---- optimizer configs -------------------------------------------------------------------------- */
static void test_optimizer_configs(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    int sh[1] = {2};
    mf_tensor *w = mf_param(ctx, "w", 1, sh);
    mf_optimizer o;
    w->data[0] = 1.0f; w->grad[0] = 1.0f;
#define BAD_OPT(edit, ...) do { o = mf_optimizer_default(MF_OPT_ADAM, 1e-3f); edit; \
    EXPECT_NEG(ctx, mf_optimizer_step(ctx, &o), "mf_optimizer_step", __VA_ARGS__); } while (0)
    EXPECT_NEG(ctx, mf_optimizer_step(ctx, NULL), "mf_optimizer_step", "NULL");
    EXPECT_NEG(ctx, (int)mf_train_update(ctx, NULL, 1.0f), "mf_train_update", "NULL");
    o = mf_optimizer_default(MF_OPT_ADAM, 1e-3f); o.beta1 = 1.0f;
    EXPECT_NEG(ctx, (int)mf_train_update(ctx, &o, 1.0f), "mf_train_update", "betas");
    BAD_OPT(o.schedule.lr = -1e-3f, "lr -0.001");
    BAD_OPT(o.schedule.lr = NAN, "lr nan");
    BAD_OPT(o.weight_decay = -0.1f, "weight_decay -0.1");
    BAD_OPT(o.beta1 = 1.0f, "betas", "(1, 0.999)");
    BAD_OPT(o.beta2 = 1.5f, "betas", "1.5");
    BAD_OPT(o.beta1 = -0.1f, "betas", "-0.1");
    BAD_OPT(o.eps = 0.0f, "eps 0 must be > 0");
    BAD_OPT((o.kind = MF_OPT_ADAM_LABML, o.eps = -1e-8f), "eps -1e-08");
    BAD_OPT(o.eps = NAN, "eps nan");
    BAD_OPT((o.kind = MF_OPT_ADAMW, o.beta2 = 1.0f), "betas");
    BAD_OPT(o.kind = (mf_optimizer_kind)7, "unknown optimizer kind 7");
    BAD_OPT(o.kind = (mf_optimizer_kind)-1, "unknown optimizer kind -1");
    BAD_OPT(o.schedule.kind = (mf_schedule_kind)9, "unknown schedule kind 9");
    BAD_OPT((o.schedule.kind = MF_SCHED_NOAM, o.schedule.d_model = 512), "Noam", "warmup", "got 0");
    BAD_OPT((o.schedule.kind = MF_SCHED_NOAM, o.schedule.warmup = 2000), "Noam", "d_model", "got 0");
    BAD_OPT((o.schedule.kind = MF_SCHED_WARMUP, o.schedule.warmup = -5), "warm-up", "got -5");
    BAD_OPT((o.schedule.kind = MF_SCHED_COSINE, o.schedule.warmup = 10), "cosine", "total_steps (0)", "warmup (10)");
    BAD_OPT((o.schedule.kind = MF_SCHED_COSINE, o.schedule.total_steps = 100, o.schedule.min_lr = -1),
            "cosine", "min_lr -1");
    BAD_OPT((o.kind = MF_OPT_SGD, o.momentum = -0.9f), "momentum -0.9");
    BAD_OPT((o.kind = MF_OPT_SGD, o.nesterov = 1), "nesterov", "momentum");
#undef BAD_OPT
    /* a failed step changes nothing */
    MFT_CHECK(mf_optimizer_steps(ctx) == 0);
    MFT_CHECK(w->data[0] == 1.0f);
    /* SGD ignores the Adam fields */
    o = mf_optimizer_default(MF_OPT_SGD, 0.1f);
    o.beta1 = 5.0f; o.eps = 0.0f;
    MFT_CHECK(mf_optimizer_step(ctx, &o) == 0);
    MFT_CHECK(mf_optimizer_steps(ctx) == 1);
    MFT_NEAR(w->data[0], 0.9, 1e-6);
    MFT_CHECK(mf_ok(ctx));
    mf_ctx_free(ctx);
}

/* ---- the sticky error model ---------------------------------------------------------------------- */
static void test_sticky(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    int sh[2] = {2, 3}, sh2[2] = {3, 2};
    float vals[6] = {1, 2, 3, 4, 5, 6};
    mf_tensor *w = mf_param(ctx, "w", 2, sh);
    mf_tensor *a = mf_from(ctx, 2, sh, vals), *b = mf_from(ctx, 2, sh, vals);
    mf_optimizer o = mf_optimizer_default(MF_OPT_ADAM, 1e-3f);
    char first[1024]; /* messages are at most 511 chars */
    MFT_CHECK(mf_matmul(ctx, a, b, 0, 0) == NULL);           /* [2,3] @ [2,3]: the first error */
    MFT_CHECK(!mf_ok(ctx));
    strcpy(first, mf_error(ctx));
    MFT_CHECK(strstr(first, "matmul") != NULL);
    /* every later call fails quietly, even good ones, and the first message stays */
    MFT_CHECK(mf_add(ctx, a, b) == NULL);
    MFT_CHECK(mf_mse(ctx, a, mf_from(ctx, 2, sh2, vals)) == NULL);  /* would be a new error */
    MFT_CHECK(mf_new(ctx, 2, sh) == NULL);
    MFT_CHECK(mf_from(ctx, 2, sh, vals) == NULL);
    MFT_CHECK(mf_param(ctx, "v", 2, sh) == NULL);
    MFT_CHECK(mf_param(ctx, "w", 2, sh) == NULL);                   /* duplicate: also quiet */
    MFT_CHECK(mf_relu(ctx, NULL) == NULL);
    MFT_CHECK(mf_dropout(ctx, a, 2.0f) == NULL);
    MFT_CHECK(mf_init_const(ctx, w, 1.0f) == -1);
    MFT_CHECK(mf_backward(ctx, mf_sum(ctx, mf_mul(ctx, a, w))) == -1);
    MFT_CHECK(mf_optimizer_step(ctx, NULL) == -1);
    MFT_CHECK(mf_optimizer_step(ctx, &o) == -1);
    MFT_CHECK(mf_optimizer_steps(ctx) == 0);
    MFT_CHECK(mf_clip_grad_norm(ctx, 1.0f) == 0.0f);
    {
        mf_linear_layer L = mf_linear_layer_new(ctx, "fc", 2, 2, 1);
        MFT_CHECK(L.weight == NULL && L.bias == NULL);
    }
    MFT_CHECK(mf_param_tensors(ctx) == 1);
    MFT_CHECK(w->data[0] == 0.0f);
    MFT_CHECK(strcmp(mf_error(ctx), first) == 0);
    mf_reset(ctx); /* reset keeps the error too */
    MFT_CHECK(!mf_ok(ctx) && strcmp(mf_error(ctx), first) == 0);
    printf("    msg: %s\n", first);
    /* cleared: usable again */
    mf_clear_error(ctx);
    MFT_CHECK(mf_ok(ctx) && mf_error(ctx)[0] == 0);
    {
        mf_tensor *x = mf_from(ctx, 2, sh, vals), *y;
        MFT_CHECK(x != NULL);
        y = mf_sum(ctx, mf_mul(ctx, x, w));
        MFT_CHECK(y != NULL && mf_backward(ctx, y) == 0);
        MFT_NEAR(w->grad[5], 6.0, 1e-6);
        MFT_CHECK(mf_optimizer_step(ctx, &o) == 0);
        MFT_CHECK(mf_param(ctx, "v", 2, sh) != NULL);
    }
    /* a second, different failure is reported after the clear */
    MFT_CHECK(mf_slice(ctx, w, 0, 5, 1) == NULL);
    EXPECT_ERR(ctx, "slice");
    MFT_CHECK(mf_ok(ctx));
    mf_ctx_free(ctx);
}

int main(void) {
    MFT_RUN(test_null_ctx);
    MFT_RUN(test_null_tensors);
    MFT_RUN(test_shape_mismatch);
    MFT_RUN(test_ids_targets);
    MFT_RUN(test_dropout_p);
    MFT_RUN(test_bad_shapes_and_names);
    MFT_RUN(test_backward_errors);
    MFT_RUN(test_optimizer_configs);
    MFT_RUN(test_sticky);
    return mft_finish();
}
