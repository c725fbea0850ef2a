/* test_cuda.cpp - the CUDA backend (metaformer_cuda.cuh) against the CPU, op by op and on whole
 * training runs.
 *
 *   make test       g++ -std=c++14 with tests/cuda_emu.h: every kernel runs on the CPU emulator,
 *                   in each of its thread orders (in, reversed, shuffled)
 *   make test-cuda  nvcc -x cu for a real GPU (sm_90), without the emulator
 *
 * Each op case makes random inputs (odd sizes), runs the op on a CPU context and on a CUDA
 * context, reduces the output to a loss sum(out * R) with a random R, back-propagates, and
 * compares the output and every input gradient (max error relative to the tensor's largest value). */
#include "cuda_parity.h"

/* ---------------------------------------------------------------- op parity */
struct Shape { int nd, s[4]; };
typedef mf_tensor *(*BuildFn)(mf_ctx *ctx, mf_tensor **in);
struct Case { const char *name; int n_in; Shape shapes[4]; BuildFn build; float lo, hi; };

/* one context's run: inputs as parameters (so they get gradients), loss = sum(out * R) */
static OpRun run_case(const Case &c, int cuda) {
    OpRun r;
    mf_ctx *ctx = mf_ctx_new(99);
    mf_tensor *in[4] = {NULL, NULL, NULL, NULL};
    if (cuda && mf_ctx_set_device(ctx, MF_DEVICE_CUDA) < 0) { r.err = mf_error(ctx); mf_ctx_free(ctx); return r; }
    for (int i = 0; i < c.n_in; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "in%d", i);
        in[i] = mf_param(ctx, nm, c.shapes[i].nd, c.shapes[i].s);
        if (in[i]) mf_set_data(ctx, in[i], rand_vec(in[i]->ne, 1000 + (uint64_t)i, c.lo, c.hi).data());
    }
    return op_run_finish(ctx, c.build(ctx, in), std::vector<mf_tensor *>(in, in + c.n_in));
}
static void check_case(const Case &c) {
    OpRun cpu = run_case(c, 0);
    if (!cpu.err.empty()) { printf("    %s: CPU run failed: %s\n", c.name, cpu.err.c_str()); MFT_CHECK(0); return; }
    for (int o = 0; o < N_ORDERS; o++) {
        set_order(o);
        OpRun gpu = run_case(c, 1);
        if (!gpu.err.empty()) { printf("    %s (order %d): CUDA run failed: %s\n", c.name, o, gpu.err.c_str()); MFT_CHECK(0); continue; }
        double e = rel_err(gpu.out, cpu.out);
        if (!(e <= TOL)) { printf("    %s (order %d): output differs, rel err %.3g\n", c.name, o, e); MFT_CHECK(0); }
        for (int i = 0; i < c.n_in; i++) {
            e = rel_err(gpu.grads[(size_t)i], cpu.grads[(size_t)i]);
            if (!(e <= TOL)) { printf("    %s (order %d): gradient of input %d differs, rel err %.3g\n", c.name, o, i, e); MFT_CHECK(0); }
        }
    }
    set_order(0);
}

#define S1(a) {1, {a, 0, 0, 0}}
#define S2(a, b) {2, {a, b, 0, 0}}
#define S3(a, b, c) {3, {a, b, c, 0}}
#define S4(a, b, c, d) {4, {a, b, c, d}}
#define NOS {0, {0, 0, 0, 0}}

static const int32_t IDS[10] = {3, 0, 12, 3, 7, 7, 1, 12, 5, 3};
static const int32_t TGT[10] = {4, -1, 10, 0, 3, 3, -1, 7, 9, 1};

static const Case CASES[] = {
    {"matmul", 2, {S3(3, 5, 7), S3(3, 7, 6), NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_matmul(c, x[0], x[1], 0, 0); }, -1, 1},
    {"matmul trans_a trans_b", 2, {S3(3, 7, 5), S3(3, 6, 7), NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_matmul(c, x[0], x[1], 1, 1); }, -1, 1},
    {"matmul shared b", 2, {S3(2, 5, 7), S2(7, 3), NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_matmul(c, x[0], x[1], 0, 0); }, -1, 1},
    {"matmul shared b^T", 2, {S3(2, 5, 7), S2(3, 7), NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_matmul(c, x[0], x[1], 0, 1); }, -1, 1},
    {"matmul shared a^T", 2, {S2(7, 5), S3(3, 7, 4), NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_matmul(c, x[0], x[1], 1, 0); }, -1, 1},
    {"linear", 3, {S3(2, 5, 7), S2(9, 7), S1(9), NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_linear(c, x[0], x[1], x[2]); }, -1, 1},
    {"linear no bias", 2, {S2(5, 7), S2(3, 7), NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_linear(c, x[0], x[1], NULL); }, -1, 1},
    {"add", 2, {S3(3, 5, 7), S3(3, 5, 7), NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_add(c, x[0], x[1]); }, -1, 1},
    {"add self", 1, {S2(5, 7), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_add(c, x[0], x[0]); }, -1, 1},
    {"add broadcast", 2, {S3(3, 5, 7), S1(7), NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_add(c, x[0], x[1]); }, -1, 1},
    {"sub broadcast first", 2, {S2(5, 7), S3(3, 5, 7), NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_sub(c, x[0], x[1]); }, -1, 1},
    {"sub broadcast second", 2, {S3(3, 5, 7), S2(5, 7), NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_sub(c, x[0], x[1]); }, -1, 1},
    {"mul", 2, {S2(5, 7), S2(5, 7), NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_mul(c, x[0], x[1]); }, -1, 1},
    {"mul scalar", 2, {S1(1), S3(3, 5, 7), NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_mul(c, x[0], x[1]); }, -1, 1},
    {"scale", 1, {S2(5, 7), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_scale(c, x[0], -1.7f); }, -1, 1},
    {"relu", 1, {S2(5, 7), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_relu(c, x[0]); }, -1, 1},
    {"gelu", 1, {S2(5, 7), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_gelu(c, x[0], 0); }, -3, 3},
    {"gelu tanh", 1, {S2(5, 7), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_gelu(c, x[0], 1); }, -3, 3},
    {"sigmoid", 1, {S2(5, 7), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_sigmoid(c, x[0]); }, -3, 3},
    {"silu", 1, {S2(5, 7), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_silu(c, x[0]); }, -3, 3},
    {"exp", 1, {S2(5, 7), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_exp(c, x[0]); }, -2, 2},
    {"softmax", 1, {S2(3, 37), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_softmax(c, x[0], 0); }, -3, 3},
    {"softmax causal Tk > Tq", 1, {S3(2, 5, 9), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_softmax(c, x[0], 1); }, -3, 3},
    {"softmax causal Tq > Tk", 1, {S3(2, 9, 5), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_softmax(c, x[0], 1); }, -3, 3},
    {"softmax wide row", 1, {S2(2, 301), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_softmax(c, x[0], 0); }, -3, 3},
    {"log_softmax", 1, {S2(4, 33), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_log_softmax(c, x[0]); }, -3, 3},
    {"cross_entropy", 1, {S3(2, 5, 13), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_cross_entropy(c, x[0], TGT, -1); }, -3, 3},
    {"cross_entropy all ignored", 1, {S2(2, 13), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) {
        static const int32_t t[2] = {-1, -1}; return mf_cross_entropy(c, x[0], t, -1); }, -3, 3},
    {"mse", 2, {S2(5, 7), S2(5, 7), NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_mse(c, x[0], x[1]); }, -1, 1},
    {"layernorm", 3, {S3(3, 4, 37), S1(37), S1(37), NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_layernorm(c, x[0], x[1], x[2], 1e-5f); }, -2, 2},
    {"layernorm no affine", 1, {S2(5, 131), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_layernorm(c, x[0], NULL, NULL, 1e-5f); }, -2, 2},
    {"embedding", 1, {S2(13, 7), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { int sh[2] = {2, 5}; return mf_embedding(c, x[0], IDS, 2, sh); }, -1, 1},
    {"dropout", 1, {S2(5, 41), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_dropout(c, mf_dropout(c, x[0], 0.3f), 0.5f); }, -1, 1},
    {"reshape", 1, {S3(2, 3, 5), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { int sh[2] = {5, -1}; return mf_scale(c, mf_reshape(c, x[0], 2, sh), 2.0f); }, -1, 1},
    {"permute", 1, {S4(2, 3, 4, 5), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { int p[4] = {3, 1, 0, 2}; return mf_permute(c, x[0], p); }, -1, 1},
    {"transpose", 1, {S3(3, 4, 5), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_transpose(c, x[0], 0, -1); }, -1, 1},
    {"concat axis 1", 2, {S3(2, 3, 5), S3(2, 4, 5), NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_concat(c, x[0], x[1], 1); }, -1, 1},
    {"concat last axis", 2, {S2(3, 5), S2(3, 2), NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_concat(c, x[0], x[1], -1); }, -1, 1},
    {"slice", 1, {S3(2, 7, 3), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_slice(c, x[0], 1, 2, 4); }, -1, 1},
    {"roll", 1, {S3(2, 7, 3), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_roll(c, x[0], -3, 1); }, -1, 1},
    {"sum", 1, {S2(5, 7), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_sum(c, x[0]); }, -1, 1},
    {"mean", 1, {S3(3, 5, 7), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_mean(c, x[0]); }, -1, 1},
    {"sum_axis 0", 1, {S3(3, 5, 7), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_sum_axis(c, x[0], 0); }, -1, 1},
    {"sum_axis 1", 1, {S3(3, 5, 7), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_sum_axis(c, x[0], 1); }, -1, 1},
    {"sum_axis 1-D", 1, {S1(11), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_sum_axis(c, x[0], -1); }, -1, 1},
    {"conv1d", 3, {S3(2, 9, 3), S3(4, 3, 3), S1(4), NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_conv1d(c, x[0], x[1], x[2], 2, 1); }, -1, 1},
    {"conv1d no bias", 2, {S3(2, 7, 5), S3(3, 5, 2), NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_conv1d(c, x[0], x[1], NULL, 1, 0); }, -1, 1},
    {"avg_pool_seq causal", 1, {S3(2, 9, 5), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_avg_pool_seq(c, x[0], 3, 1); }, -1, 1},
    {"avg_pool_seq centred", 1, {S3(2, 9, 5), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf_avg_pool_seq(c, x[0], 5, 0); }, -1, 1},
    {"avg_pool_sub causal", 1, {S3(2, 9, 5), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf__avg_pool_sub(c, x[0], 3, 1); }, -1, 1},
    {"avg_pool_sub centred", 1, {S3(2, 9, 5), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) { return mf__avg_pool_sub(c, x[0], 5, 0); }, -1, 1},
    {"attention causal", 3, {S4(2, 2, 9, 5), S4(2, 2, 9, 5), S4(2, 2, 9, 5), NOS}, [](mf_ctx *c, mf_tensor **x) {
        return mf_attention(c, x[0], x[1], x[2], 0.45f, 1, 0.0f); }, -1, 1},
    {"attention causal memory (Tk > Tq), dv != dk", 3, {S4(1, 3, 5, 4), S4(1, 3, 11, 4), S4(1, 3, 11, 6), NOS}, [](mf_ctx *c, mf_tensor **x) {
        return mf_attention(c, x[0], x[1], x[2], 0.5f, 1, 0.0f); }, -1, 1},
    {"attention causal Tq > Tk (rows without keys)", 3, {S4(1, 2, 7, 3), S4(1, 2, 4, 3), S4(1, 2, 4, 3), NOS}, [](mf_ctx *c, mf_tensor **x) {
        return mf_attention(c, x[0], x[1], x[2], 0.7f, 1, 0.0f); }, -1, 1},
    {"attention full", 3, {S4(2, 1, 6, 5), S4(2, 1, 13, 5), S4(2, 1, 13, 5), NOS}, [](mf_ctx *c, mf_tensor **x) {
        return mf_attention(c, x[0], x[1], x[2], 0.45f, 0, 0.0f); }, -1, 1},
    {"attention long row (> block)", 3, {S4(1, 1, 3, 4), S4(1, 1, MFT_SMALL ? 150 : 300, 4), S4(1, 1, MFT_SMALL ? 150 : 300, 4), NOS},
     [](mf_ctx *c, mf_tensor **x) { return mf_attention(c, x[0], x[1], x[2], 0.5f, 1, 0.0f); }, -1, 1},
    {"attention self (q = k = v)", 1, {S4(1, 2, 7, 4), NOS, NOS, NOS}, [](mf_ctx *c, mf_tensor **x) {
        return mf_attention(c, x[0], x[0], x[0], 0.5f, 1, 0.0f); }, -1, 1},
};

static void test_ops(void) {
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) check_case(CASES[i]);
}

/* ---------------------------------------------------------------- training runs */
static TrainOpts with_optimizer(mf_optimizer_kind kind, double param_tol = TOL) {
    TrainOpts o = train_opts();
    o.kind = kind; o.param_tol = param_tol;
    return o;
}
static void test_train_sdpa(void) { check_train(small_config(MF_MIXER_SDPA), "sdpa + Adam", with_optimizer(MF_OPT_ADAM)); }
static void test_train_metric(void) { check_train(small_config(MF_MIXER_METRIC), "metric + AdamW", with_optimizer(MF_OPT_ADAMW)); }
static void test_train_metric_forms(void) { /* the seed's forms: M = L L^T, M = S S^T (ops only, no kernel of their own) */
    mf_model_config c = small_config(MF_MIXER_METRIC);
    c.metric_form = MF_METRIC_CHOLESKY;
    check_train(c, "metric cholesky + Adam", with_optimizer(MF_OPT_ADAM));
    c.metric_form = MF_METRIC_SOFTMAX_TRIL;
    check_train(c, "metric softmax_tril + Adam", with_optimizer(MF_OPT_ADAM));
}
static void test_train_pool(void) {
    mf_model_config c = small_config(MF_MIXER_POOL);
    c.pos = MF_POS_SINUSOIDAL; c.ffn_act = MF_ACT_SILU;
    TrainOpts o = with_optimizer(MF_OPT_ADAM_LABML);
    o.zero_grad = "ln1.bias"; /* pool(b) - b = 0: the mixer ignores a constant its norm adds */
    check_train(c, "pool + labml Adam", o);
}
static void test_train_sgd(void) {
    mf_model_config c = small_config(MF_MIXER_QUADRATIC);
    c.clone_layers = 1; c.ffn_act = MF_ACT_GELU_TANH;
    check_train(c, "quadratic + SGD", with_optimizer(MF_OPT_SGD));
}

/* recycled activation gradients on the device: the same bits as kept ones, in less memory */
static void test_recycled_grads(void) {
    TrainOpts o = train_opts();
    TrainRun run[2];
    for (int keep = 0; keep <= 1; keep++) {
        o.keep_grads = keep;
        run[keep] = train_run(small_config(MF_MIXER_SDPA), 1, o);
        MFT_CHECK(run[keep].err.empty());
    }
    MFT_CHECK(run[0].losses == run[1].losses && run[0].params == run[1].params);
    MFT_CHECK(run[0].act_peak < run[1].act_peak * 3 / 4);
    printf("    activation peak: %zu bytes recycled, %zu kept\n", run[0].act_peak, run[1].act_peak);
}

/* a checkpoint written by the CUDA context loads into a CPU context and continues identically */
static void test_checkpoint_cross_device(void) {
    const std::string file = scratch_path("test_cuda_ckpt");
    const char *path = file.c_str();
    mf_model_config cfg = small_config(MF_MIXER_SDPA);
    TrainOpts o = train_opts();
    o.steps = 2; o.save = path;
    TrainRun gpu = train_run(cfg, 1, o);
    MFT_CHECK(gpu.err.empty());
    for (int cuda = 0; cuda <= 1; cuda++) { /* into a CPU context, and back onto the device */
        mf_ctx *ctx = mf_ctx_new(7);
        if (cuda) MFT_CHECK(mf_ctx_set_device(ctx, MF_DEVICE_CUDA) == 0);
        mf_model *m = mf_model_new(ctx, &cfg);
        MFT_CHECK(mf_load(ctx, path, 1) == 0);
        MFT_CHECK(rel_err(params_host(ctx), gpu.params) == 0.0);
        MFT_CHECK(mf_optimizer_steps(ctx) == 2);
        mf_model_free(m);
        mf_ctx_free(ctx);
    }
    remove(path);
}

/* ---------------------------------------------------------------- device selection and errors */
static void test_device_api(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    int sh[1] = {4};
    float v[4] = {1, 2, 3, 4}, w[4] = {0, 0, 0, 0};
    MFT_CHECK(mf_ctx_device(ctx) == MF_DEVICE_CPU);
    MFT_CHECK(mf_cuda_set_tf32(ctx, 1) == -1 && mf_ok(ctx)); /* CPU: refused, no error */
    MFT_CHECK(mf_ctx_set_device(ctx, MF_DEVICE_CUDA) == 0);
    MFT_CHECK(mf_ctx_device(ctx) == MF_DEVICE_CUDA);
    MFT_CHECK(mf_cuda_set_tf32(ctx, 0) == 0);
    mf_tensor *t = mf_from(ctx, 1, sh, v);
    MFT_CHECK(t && mf_to_host(ctx, t, w) == 0 && w[3] == 4.0f);
    MFT_CHECK(mf_item(ctx, mf_sum(ctx, t)) == 10.0f);
    MFT_CHECK(mf_grad_to_host(ctx, t, w) == -1 && strstr(mf_error(ctx), "no gradient"));
    mf_clear_error(ctx);
    /* too late to switch: tensors exist */
    MFT_CHECK(mf_ctx_set_device(ctx, MF_DEVICE_CPU) == -1 && strstr(mf_error(ctx), "right after mf_ctx_new"));
    mf_clear_error(ctx);
    mf_reset(ctx);
    MFT_CHECK(mf_ctx_set_device(ctx, MF_DEVICE_CPU) == 0 && mf_ctx_device(ctx) == MF_DEVICE_CPU);
    MFT_CHECK(mf_ctx_set_device(ctx, (mf_device)7) == -1 && strstr(mf_error(ctx), "unknown device"));
    mf_ctx_free(ctx);
}
/* the device arena grows by new blocks and mf_reset merges them into one */
static void test_arena_growth(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    int big[1] = {5 << 20}, sh[1] = {3};
    float v[3] = {1, 2, 3}, w[3];
    mf_ctx_set_device(ctx, MF_DEVICE_CUDA);
    for (int round = 0; round < 3; round++) {
        mf_tensor *a = mf_from(ctx, 1, sh, v), *b = mf_new(ctx, 1, big), *c = mf_from(ctx, 1, sh, v);
        MFT_CHECK(a && b && c && mf_activation_bytes(ctx) >= (size_t)(20 << 20));
        MFT_CHECK(mf_to_host(ctx, mf_add(ctx, a, c), w) == 0 && w[2] == 6.0f);
        MFT_CHECK(mf_item(ctx, mf_sum(ctx, b)) == 0.0f);
        mf_reset(ctx);
        MFT_CHECK(mf_activation_bytes(ctx) == 0 && mf_ok(ctx));
    }
    mf_ctx_free(ctx);
}
/* an op without a CUDA kernel fails with its name, never runs the CPU code on device memory */
static int fake_shape(mf_ctx *ctx, mf_tensor *out) { return mf__same_shape(ctx, out); }
static void fake_forward(mf_ctx *ctx, mf_tensor *out) { (void)ctx; out->data[0] = 1.0f; /* would crash on device */ }
static const mf__op fake_op = {"fake_op", 1, fake_shape, fake_forward, fake_forward, MF__OP_PROPS(0)};
static void test_missing_kernel(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    int sh[1] = {3};
    mf_ctx_set_device(ctx, MF_DEVICE_CUDA);
    mf_tensor *x = mf_new(ctx, 1, sh);
    MFT_CHECK(mf__finish(ctx, mf__begin(ctx, &fake_op, x, NULL, NULL, NULL)) == NULL);
    MFT_CHECK(strstr(mf_error(ctx), "fake_op: this op has no CUDA kernel") != NULL);
    mf_ctx_free(ctx);
}
/* a head too wide for the fused attention kernel's shared memory: a clear error, no launch
   (sequence length has no limit: tests/test_cuda_attention.cpp runs Tk = 56000) */
static void test_attention_head_too_wide(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    int sh[4] = {1, 1, 2, 4096};
    mf_ctx_set_device(ctx, MF_DEVICE_CUDA);
    mf_tensor *q = mf_new(ctx, 4, sh);
    MFT_CHECK(mf_attention(ctx, q, q, q, 1.0f, 0, 0.0f) == NULL);
    MFT_CHECK(strstr(mf_error(ctx), "attention") != NULL && strstr(mf_error(ctx), "shared memory") != NULL);
    mf_ctx_free(ctx);
}
/* a block's shared memory is the launch's dynamic bytes plus the kernel's static __shared__ ones
   (cudaFuncGetAttributes: nvcc's, tests/cuda_kernel_resources.h on the emulator): mf__cu_smem opts in
   past 48 KiB counting both, and refuses past the device's limit with the library's message */
static void test_static_smem_counted(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    MFT_CHECK(mf_ctx_set_device(ctx, MF_DEVICE_CUDA) == 0);
    cudaFuncAttributes fa;
    MFT_CHECK(cudaFuncGetAttributes(&fa, mf__k_fba_fwd) == cudaSuccess && fa.sharedSizeBytes > 0 && fa.numRegs > 0);
    size_t st = fa.sharedSizeBytes, lim = (size_t)MF__CU(ctx)->smem_optin;
    /* fits 48 KiB alone, not with the static bytes: needs the opt-in, which mf__cu_smem makes */
    MFT_CHECK(mf__cu_smem(ctx, mf__k_fba_fwd, 49152 - st / 2, "test", "the forward", "fix") == 0);
    MFT_CHECK(cudaFuncGetAttributes(&fa, mf__k_fba_fwd) == cudaSuccess && fa.maxDynamicSharedSizeBytes >= (int)(49152 - st / 2));
    /* within the device's limit alone, over it with the static bytes: refused, naming both */
    MFT_CHECK(mf__cu_smem(ctx, mf__k_fba_fwd, lim - st + 1, "test", "the forward", "fix") < 0);
    MFT_CHECK(strstr(mf_error(ctx), "static") != NULL && strstr(mf_error(ctx), "the forward") != NULL);
    printf("    mf__k_fba_fwd: %zu static bytes, %d registers; %s\n", st, fa.numRegs, mf_error(ctx));
    mf_ctx_free(ctx);
}
/* TF32 is opt-in: the default matmul is exact float32, TF32 rounds the inputs */
static void test_tf32(void) {
    int sh[2] = {4, 4};
    std::vector<float> a = rand_vec(16, 3), out(16), out32(16);
    for (int tf = 0; tf < 2; tf++) {
        mf_ctx *ctx = mf_ctx_new(1);
        mf_ctx_set_device(ctx, MF_DEVICE_CUDA);
        if (tf) MFT_CHECK(mf_cuda_set_tf32(ctx, 1) == 0);
        mf_tensor *x = mf_from(ctx, 2, sh, a.data());
        mf_to_host(ctx, mf_matmul(ctx, x, x, 0, 0), tf ? out32.data() : out.data());
        MFT_CHECK(mf_ok(ctx));
        mf_ctx_free(ctx);
    }
    mf_ctx *cpu = mf_ctx_new(1);
    mf_tensor *x = mf_from(cpu, 2, sh, a.data());
    std::vector<float> ref = host_of(cpu, mf_matmul(cpu, x, x, 0, 0), 0);
    MFT_CHECK(rel_err(out, ref) <= 1e-6);
#ifdef MF_CUDA_EMU
    MFT_CHECK(rel_err(out32, ref) > 1e-6 && rel_err(out32, ref) < 1e-2);
#endif
    mf_ctx_free(cpu);
}
int main(void) {
    if (cuda_suite_start("test_cuda") < 0) return 1;
    MFT_RUN(test_device_api);
    MFT_RUN(test_missing_kernel);
    MFT_RUN(test_attention_head_too_wide);
    MFT_RUN(test_static_smem_counted);
    MFT_RUN(test_arena_growth);
    MFT_RUN(test_tf32);
    MFT_RUN(test_ops);
    MFT_RUN(test_train_sdpa);
    MFT_RUN(test_train_metric);
    MFT_RUN(test_train_metric_forms);
    MFT_RUN(test_train_pool);
    MFT_RUN(test_train_sgd);
    MFT_RUN(test_recycled_grads);
    MFT_RUN(test_checkpoint_cross_device);
#ifdef MF_CUDA_EMU
    MFT_RUN(test_no_leaks);
#endif
    return mft_finish();
}
