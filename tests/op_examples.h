/* op_examples.h - example instances of every op in metaformer.h's op list mf__ops: small shapes,
 * odd sizes, inputs drawn from fixed seeds. Shared by the op-property test (tests/test_ops.c:
 * test_op_properties) and the CPU-vs-CUDA op parity suite (tests/test_cuda_ops.cpp); both fail for
 * an op of mf__ops that has no example here. Include after metaformer.h's implementation (the
 * feedback example calls an internal function). C99 and C++.
 *
 * An example names its op (mf__op.name), its inputs' shapes and value range; the harness makes the
 * inputs as it needs them (activations that take a gradient, or parameters) and build() makes the
 * op's node from them (the op must be the returned tensor's). ex_cleanup() frees what a build left
 * (the feedback example's model); call it before freeing the context. */
#ifndef MF_OP_EXAMPLES_H
#define MF_OP_EXAMPLES_H
#include <stddef.h>
#include <string.h>

#define EX_MAX_IN 6
typedef struct ex_shape { int nd, s[4]; } ex_shape;
typedef mf_tensor *(*ex_build_fn)(mf_ctx *ctx, mf_tensor **in);
typedef struct op_example {
    const char *op;              /* the op's name */
    const char *what;            /* this instance */
    int n_in;
    ex_shape in[EX_MAX_IN];
    float lo, hi;                /* the inputs' values are uniform in [lo, hi) */
    ex_build_fn build;
} op_example;

/* the value of element i of input k of an example (both harnesses draw the same) */
static float ex_value(const op_example *e, int k, int64_t i) {
    return e->lo + (e->hi - e->lo) * mf__uniform(1000 + (uint64_t)k, 77, (uint64_t)i);
}

static mf_model *ex_model; /* made by the feedback example */
static void ex_cleanup(void) {
    if (ex_model) mf_model_free(ex_model);
    ex_model = NULL;
}

static const int32_t EX_IDS[10] = {3, 0, 8, 3, 7, 7, 1, 8, 5, 3};
static const int32_t EX_TGT[10] = {4, -1, 6, 0, 3, 3, -1, 2, 5, 1};

static mf_tensor *ex_matmul(mf_ctx *c, mf_tensor **x) { return mf_matmul(c, x[0], x[1], 0, 0); }
static mf_tensor *ex_matmul_tt(mf_ctx *c, mf_tensor **x) { return mf_matmul(c, x[0], x[1], 1, 1); }
static mf_tensor *ex_matmul_bt(mf_ctx *c, mf_tensor **x) { return mf_matmul(c, x[0], x[1], 0, 1); }
static mf_tensor *ex_head_matmul(mf_ctx *c, mf_tensor **x) { return mf_head_matmul(c, x[0], x[1]); }
static mf_tensor *ex_linear(mf_ctx *c, mf_tensor **x) { return mf_linear(c, x[0], x[1], x[2]); }
static mf_tensor *ex_linear_nb(mf_ctx *c, mf_tensor **x) { return mf_linear(c, x[0], x[1], NULL); }
static mf_tensor *ex_add(mf_ctx *c, mf_tensor **x) { return mf_add(c, x[0], x[1]); }
static mf_tensor *ex_sub(mf_ctx *c, mf_tensor **x) { return mf_sub(c, x[0], x[1]); }
static mf_tensor *ex_mul(mf_ctx *c, mf_tensor **x) { return mf_mul(c, x[0], x[1]); }
static mf_tensor *ex_scale(mf_ctx *c, mf_tensor **x) { return mf_scale(c, x[0], -1.7f); }
static mf_tensor *ex_relu(mf_ctx *c, mf_tensor **x) { return mf_relu(c, x[0]); }
static mf_tensor *ex_gelu(mf_ctx *c, mf_tensor **x) { return mf_gelu(c, x[0], 0); }
static mf_tensor *ex_gelu_tanh(mf_ctx *c, mf_tensor **x) { return mf_gelu(c, x[0], 1); }
static mf_tensor *ex_sigmoid(mf_ctx *c, mf_tensor **x) { return mf_sigmoid(c, x[0]); }
static mf_tensor *ex_silu(mf_ctx *c, mf_tensor **x) { return mf_silu(c, x[0]); }
static mf_tensor *ex_exp(mf_ctx *c, mf_tensor **x) { return mf_exp(c, x[0]); }
static mf_tensor *ex_softmax(mf_ctx *c, mf_tensor **x) { return mf_softmax(c, x[0], 0); }
static mf_tensor *ex_softmax_causal(mf_ctx *c, mf_tensor **x) { return mf_softmax(c, x[0], 1); }
static mf_tensor *ex_log_softmax(mf_ctx *c, mf_tensor **x) { return mf_log_softmax(c, x[0]); }
static mf_tensor *ex_cross_entropy(mf_ctx *c, mf_tensor **x) { return mf_cross_entropy(c, x[0], EX_TGT, -1); }
static mf_tensor *ex_cross_entropy_none(mf_ctx *c, mf_tensor **x) {
    static const int32_t t[2] = {-1, -1};
    return mf_cross_entropy(c, x[0], t, -1);
}
static mf_tensor *ex_mse(mf_ctx *c, mf_tensor **x) { return mf_mse(c, x[0], x[1]); }
static mf_tensor *ex_layernorm(mf_ctx *c, mf_tensor **x) { return mf_layernorm(c, x[0], x[1], x[2], 1e-5f); }
static mf_tensor *ex_layernorm_plain(mf_ctx *c, mf_tensor **x) { return mf_layernorm(c, x[0], NULL, NULL, 1e-5f); }
static mf_tensor *ex_embedding(mf_ctx *c, mf_tensor **x) {
    int sh[2] = {2, 5};
    return mf_embedding(c, x[0], EX_IDS, 2, sh);
}
static mf_tensor *ex_dropout(mf_ctx *c, mf_tensor **x) { return mf_dropout(c, x[0], 0.3f); }
static mf_tensor *ex_reshape(mf_ctx *c, mf_tensor **x) {
    int sh[2] = {5, -1};
    return mf_reshape(c, x[0], 2, sh);
}
static mf_tensor *ex_permute(mf_ctx *c, mf_tensor **x) {
    int p[4] = {3, 1, 0, 2};
    return mf_permute(c, x[0], p);
}
static mf_tensor *ex_concat(mf_ctx *c, mf_tensor **x) { return mf_concat(c, x[0], x[1], 1); }
static mf_tensor *ex_slice(mf_ctx *c, mf_tensor **x) { return mf_slice(c, x[0], 1, 2, 4); }
static mf_tensor *ex_roll(mf_ctx *c, mf_tensor **x) { return mf_roll(c, x[0], -3, 1); }
static mf_tensor *ex_sum(mf_ctx *c, mf_tensor **x) { return mf_sum(c, x[0]); }
static mf_tensor *ex_mean(mf_ctx *c, mf_tensor **x) { return mf_mean(c, x[0]); }
static mf_tensor *ex_sum_axis(mf_ctx *c, mf_tensor **x) { return mf_sum_axis(c, x[0], 1); }
static mf_tensor *ex_conv1d(mf_ctx *c, mf_tensor **x) { return mf_conv1d(c, x[0], x[1], x[2], 2, 1); }
static mf_tensor *ex_avg_pool(mf_ctx *c, mf_tensor **x) { return mf_avg_pool_seq(c, x[0], 3, 1); }
static mf_tensor *ex_avg_pool_centred(mf_ctx *c, mf_tensor **x) { return mf_avg_pool_seq(c, x[0], 5, 0); }
static mf_tensor *ex_avg_pool_sub(mf_ctx *c, mf_tensor **x) { return mf__avg_pool_sub(c, x[0], 3, 1); }
static mf_tensor *ex_attention(mf_ctx *c, mf_tensor **x) { return mf_attention(c, x[0], x[1], x[2], 0.45f, 1, 0.0f); }
static mf_tensor *ex_attention_full(mf_ctx *c, mf_tensor **x) { return mf_attention(c, x[0], x[1], x[2], 0.5f, 0, 0.0f); }
static mf_tensor *ex_attention_drop(mf_ctx *c, mf_tensor **x) { return mf_attention(c, x[0], x[1], x[2], 0.45f, 1, 0.3f); }
static mf_tensor *ex_elu1(mf_ctx *c, mf_tensor **x) { return mf_elu1(c, x[0]); }
static mf_tensor *ex_reciprocal(mf_ctx *c, mf_tensor **x) { return mf_reciprocal(c, x[0]); }
#ifndef METAFORMER_NO_XL
static mf_tensor *ex_rel_attention(mf_ctx *c, mf_tensor **x) {
    return mf_rel_attention(c, x[0], x[1], x[2], x[3], x[4], x[5], 0.5f, 0.0f);
}
static mf_tensor *ex_rel_attention_drop(mf_ctx *c, mf_tensor **x) {
    return mf_rel_attention(c, x[0], x[1], x[2], x[3], x[4], x[5], 0.5f, 0.3f);
}
#endif
#ifndef METAFORMER_NO_FASTWEIGHTS
static mf_tensor *ex_dpfp(mf_ctx *c, mf_tensor **x) { return mf_dpfp(c, x[0], 2, 1e-6f); }
static mf_tensor *ex_fast_weights(mf_ctx *c, mf_tensor **x) { return mf_fast_weights(c, x[0], x[1], x[2], x[3], 1); }
static mf_tensor *ex_fast_weights_chunk(mf_ctx *c, mf_tensor **x) { return mf_fast_weights(c, x[0], x[1], x[2], x[3], 2); }
static mf_tensor *ex_linear_attention(mf_ctx *c, mf_tensor **x) { return mf_linear_attention(c, x[0], x[1], x[2], 1, 1e-6f, 1); }
static mf_tensor *ex_linear_attention_chunk(mf_ctx *c, mf_tensor **x) {
    return mf_linear_attention(c, x[0], x[1], x[2], 1, 1e-6f, 2);
}
static mf_tensor *ex_linear_attention_plain(mf_ctx *c, mf_tensor **x) { return mf_linear_attention(c, x[0], x[1], x[2], 0, 0, 1); }
static mf_tensor *ex_linear_attention_plain_chunk(mf_ctx *c, mf_tensor **x) {
    return mf_linear_attention(c, x[0], x[1], x[2], 0, 0, 2);
}
#endif
#ifndef METAFORMER_NO_FEEDBACK
static mf_tensor *ex_feedback_attention(mf_ctx *c, mf_tensor **x) {
    return mf_feedback_attention(c, x[0], x[1], x[2], x[3], x[4], x[5], 0.5f, 0.0f);
}
static mf_tensor *ex_feedback_attention_drop(mf_ctx *c, mf_tensor **x) {
    return mf_feedback_attention(c, x[0], x[1], x[2], x[3], x[4], x[5], 0.5f, 0.3f);
}
/* the whole recurrence of a small model (its parameters besides the input x [B, T, D]) */
static mf_tensor *ex_feedback_model(mf_ctx *c, mf_tensor **x, mf_mixer_kind mixer, float attn_dropout) {
    mf_model_config cfg = mf_model_config_default();
    cfg.vocab = 7; cfg.d_model = 8; cfg.n_heads = 2; cfg.n_layers = 2; cfg.d_ff = 12; cfg.max_seq = 6;
    cfg.mixer = mixer; cfg.ffn_act = MF_ACT_GELU; cfg.dropout = 0.0f; cfg.attn_dropout = attn_dropout;
    ex_cleanup();
    if (!(ex_model = mf_model_new(c, &cfg))) return NULL;
    return mf__fb_run(ex_model, x[0], 0, 0);
}
static mf_tensor *ex_feedback(mf_ctx *c, mf_tensor **x) { return ex_feedback_model(c, x, MF_MIXER_FEEDBACK, 0.0f); }
static mf_tensor *ex_feedback_kv(mf_ctx *c, mf_tensor **x) { return ex_feedback_model(c, x, MF_MIXER_FEEDBACK_KV, 0.0f); }
static mf_tensor *ex_feedback_drop(mf_ctx *c, mf_tensor **x) { return ex_feedback_model(c, x, MF_MIXER_FEEDBACK, 0.3f); }
#endif

#define EXN {0, {0, 0, 0, 0}}
#define EX1(a) {1, {a, 0, 0, 0}}
#define EX2(a, b) {2, {a, b, 0, 0}}
#define EX3(a, b, c) {3, {a, b, c, 0}}
#define EX4(a, b, c, d) {4, {a, b, c, d}}
#define EX_IN1(a) {a, EXN, EXN, EXN, EXN, EXN}
#define EX_IN2(a, b) {a, b, EXN, EXN, EXN, EXN}
#define EX_IN3(a, b, c) {a, b, c, EXN, EXN, EXN}
#define EX_IN4(a, b, c, d) {a, b, c, d, EXN, EXN}
#define EX_IN6(a, b, c, d, e, f) {a, b, c, d, e, f}

static const op_example EXAMPLES[] = {
    {"matmul", "batched", 2, EX_IN2(EX3(2, 3, 5), EX3(2, 5, 4)), -1, 1, ex_matmul},
    {"matmul", "both transposed", 2, EX_IN2(EX3(2, 5, 3), EX3(2, 4, 5)), -1, 1, ex_matmul_tt},
    {"matmul", "shared b^T", 2, EX_IN2(EX3(2, 3, 5), EX2(4, 5)), -1, 1, ex_matmul_bt},
    {"head_matmul", "token-major [B, T, H, K], N > K", 2, EX_IN2(EX4(2, 3, 3, 4), EX3(3, 4, 5)), -1, 1, ex_head_matmul},
    {"head_matmul", "one row [H, K], N < K", 2, EX_IN2(EX2(2, 5), EX3(2, 5, 3)), -1, 1, ex_head_matmul},
    {"linear", "bias", 3, EX_IN3(EX3(2, 3, 5), EX2(4, 5), EX1(4)), -1, 1, ex_linear},
    {"linear", "no bias", 2, EX_IN2(EX2(3, 5), EX2(4, 5)), -1, 1, ex_linear_nb},
    {"add", "same shapes", 2, EX_IN2(EX2(3, 5), EX2(3, 5)), -1, 1, ex_add},
    {"add", "broadcast", 2, EX_IN2(EX3(2, 3, 5), EX1(5)), -1, 1, ex_add},
    {"sub", "same shapes", 2, EX_IN2(EX2(3, 5), EX2(3, 5)), -1, 1, ex_sub},
    {"sub", "broadcast first", 2, EX_IN2(EX2(3, 5), EX3(2, 3, 5)), -1, 1, ex_sub},
    {"mul", "same shapes", 2, EX_IN2(EX2(3, 5), EX2(3, 5)), -1, 1, ex_mul},
    {"mul", "scalar", 2, EX_IN2(EX1(1), EX3(2, 3, 5)), -1, 1, ex_mul},
    {"scale", "", 1, EX_IN1(EX2(5, 7)), -1, 1, ex_scale},
    {"relu", "", 1, EX_IN1(EX2(5, 7)), -1, 1, ex_relu},
    {"gelu", "exact", 1, EX_IN1(EX2(5, 7)), -3, 3, ex_gelu},
    {"gelu", "tanh", 1, EX_IN1(EX2(5, 7)), -3, 3, ex_gelu_tanh},
    {"sigmoid", "", 1, EX_IN1(EX2(5, 7)), -3, 3, ex_sigmoid},
    {"silu", "", 1, EX_IN1(EX2(5, 7)), -3, 3, ex_silu},
    {"exp", "", 1, EX_IN1(EX2(5, 7)), -2, 2, ex_exp},
    {"softmax", "", 1, EX_IN1(EX2(3, 11)), -3, 3, ex_softmax},
    {"softmax", "causal", 1, EX_IN1(EX3(2, 4, 6)), -3, 3, ex_softmax_causal},
    {"log_softmax", "", 1, EX_IN1(EX2(4, 9)), -3, 3, ex_log_softmax},
    {"cross_entropy", "", 1, EX_IN1(EX3(2, 5, 9)), -3, 3, ex_cross_entropy},
    {"cross_entropy", "all ignored", 1, EX_IN1(EX2(2, 9)), -3, 3, ex_cross_entropy_none},
    {"mse", "", 2, EX_IN2(EX2(3, 5), EX2(3, 5)), -1, 1, ex_mse},
    {"layernorm", "affine", 3, EX_IN3(EX3(2, 3, 9), EX1(9), EX1(9)), -2, 2, ex_layernorm},
    {"layernorm", "plain", 1, EX_IN1(EX2(3, 13)), -2, 2, ex_layernorm_plain},
    {"embedding", "", 1, EX_IN1(EX2(9, 4)), -1, 1, ex_embedding},
    {"dropout", "", 1, EX_IN1(EX2(5, 9)), -1, 1, ex_dropout},
    {"reshape", "", 1, EX_IN1(EX3(2, 3, 5)), -1, 1, ex_reshape},
    {"permute", "", 1, EX_IN1(EX4(2, 3, 4, 5)), -1, 1, ex_permute},
    {"concat", "", 2, EX_IN2(EX3(2, 3, 5), EX3(2, 4, 5)), -1, 1, ex_concat},
    {"slice", "", 1, EX_IN1(EX3(2, 7, 3)), -1, 1, ex_slice},
    {"roll", "", 1, EX_IN1(EX3(2, 7, 3)), -1, 1, ex_roll},
    {"sum", "", 1, EX_IN1(EX2(5, 7)), -1, 1, ex_sum},
    {"mean", "", 1, EX_IN1(EX3(3, 5, 7)), -1, 1, ex_mean},
    {"sum_axis", "", 1, EX_IN1(EX3(3, 5, 7)), -1, 1, ex_sum_axis},
    {"conv1d", "", 3, EX_IN3(EX3(2, 9, 3), EX3(4, 3, 3), EX1(4)), -1, 1, ex_conv1d},
    {"avg_pool_seq", "causal", 1, EX_IN1(EX3(2, 9, 5)), -1, 1, ex_avg_pool},
    {"avg_pool_seq", "centred", 1, EX_IN1(EX3(2, 9, 5)), -1, 1, ex_avg_pool_centred},
    {"avg_pool_sub", "causal", 1, EX_IN1(EX3(2, 9, 5)), -1, 1, ex_avg_pool_sub},
    {"attention", "causal, Tk > Tq", 3, EX_IN3(EX4(2, 2, 5, 4), EX4(2, 2, 7, 4), EX4(2, 2, 7, 3)), -1, 1, ex_attention},
    {"attention", "full", 3, EX_IN3(EX4(1, 2, 6, 5), EX4(1, 2, 4, 5), EX4(1, 2, 4, 5)), -1, 1, ex_attention_full},
    {"attention", "causal, probability dropout 0.3", 3, EX_IN3(EX4(2, 2, 5, 4), EX4(2, 2, 7, 4), EX4(2, 2, 7, 3)), -1, 1,
     ex_attention_drop},
    {"elu1", "", 1, EX_IN1(EX2(5, 7)), -2, 2, ex_elu1},
    {"reciprocal", "", 1, EX_IN1(EX2(5, 7)), 0.5f, 2, ex_reciprocal},
#ifndef METAFORMER_NO_XL
    {"rel_attention", "memory", 6, EX_IN6(EX4(2, 2, 4, 3), EX4(2, 2, 6, 3), EX4(2, 2, 6, 3), EX2(2, 3), EX3(14, 2, 3),
                                         EX2(14, 2)), -1, 1, ex_rel_attention},
    {"rel_attention", "memory, probability dropout 0.3", 6, EX_IN6(EX4(2, 2, 4, 3), EX4(2, 2, 6, 3), EX4(2, 2, 6, 3),
                                         EX2(2, 3), EX3(14, 2, 3), EX2(14, 2)), -1, 1, ex_rel_attention_drop},
#endif
#ifndef METAFORMER_NO_FASTWEIGHTS
    {"dpfp", "", 1, EX_IN1(EX3(2, 3, 4)), -1, 1, ex_dpfp},
    {"fast_weights", "recurrent", 4, EX_IN4(EX4(2, 5, 2, 3), EX4(2, 5, 2, 3), EX4(2, 5, 2, 4), EX3(2, 5, 2)), 0.1f, 0.9f,
     ex_fast_weights},
    {"fast_weights", "chunks of 2", 4, EX_IN4(EX4(2, 5, 2, 3), EX4(2, 5, 2, 3), EX4(2, 5, 2, 4), EX3(2, 5, 2)), 0.1f, 0.9f,
     ex_fast_weights_chunk},
    {"linear_attention", "recurrent", 3, EX_IN3(EX4(2, 5, 2, 3), EX4(2, 5, 2, 3), EX4(2, 5, 2, 4)), 0.1f, 1, ex_linear_attention},
    {"linear_attention", "chunks of 2", 3, EX_IN3(EX4(2, 5, 2, 3), EX4(2, 5, 2, 3), EX4(2, 5, 2, 4)), 0.1f, 1,
     ex_linear_attention_chunk},
    {"linear_attention", "no normaliser", 3, EX_IN3(EX4(2, 5, 2, 3), EX4(2, 5, 2, 3), EX4(2, 5, 2, 4)), 0.1f, 1,
     ex_linear_attention_plain},
    {"linear_attention", "no normaliser, chunks of 2", 3, EX_IN3(EX4(2, 5, 2, 3), EX4(2, 5, 2, 3), EX4(2, 5, 2, 4)), 0.1f,
     1, ex_linear_attention_plain_chunk},
#endif
#ifndef METAFORMER_NO_FEEDBACK
    {"feedback_attention", "", 6, EX_IN6(EX3(2, 2, 3), EX4(2, 2, 4, 3), EX4(2, 2, 4, 3), EX2(2, 3), EX3(5, 2, 3), EX2(5, 2)),
     -1, 1, ex_feedback_attention},
    {"feedback_attention", "probability dropout 0.3", 6, EX_IN6(EX3(2, 2, 3), EX4(2, 2, 4, 3), EX4(2, 2, 4, 3), EX2(2, 3),
                                                            EX3(5, 2, 3), EX2(5, 2)), -1, 1, ex_feedback_attention_drop},
    {"feedback", "per-layer k, v", 1, EX_IN1(EX3(2, 5, 8)), -1, 1, ex_feedback},
    {"feedback", "shared k, v", 1, EX_IN1(EX3(2, 5, 8)), -1, 1, ex_feedback_kv},
    {"feedback", "per-layer k, v, probability dropout 0.3", 1, EX_IN1(EX3(2, 5, 8)), -1, 1, ex_feedback_drop},
#endif
};
#define N_EXAMPLES ((int)(sizeof EXAMPLES / sizeof EXAMPLES[0]))

/* the first example of op, or -1 */
static int ex_find(const mf__op *op) {
    int i;
    for (i = 0; i < N_EXAMPLES; i++)
        if (strcmp(EXAMPLES[i].op, op->name) == 0) return i;
    return -1;
}
/* the listed op an example names, or NULL */
static const mf__op *ex_op(const op_example *e) {
    int i;
    for (i = 0; i < MF__N_OPS; i++)
        if (strcmp(mf__ops[i]->name, e->op) == 0) return mf__ops[i];
    return NULL;
}
#endif
