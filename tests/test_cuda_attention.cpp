/* test_cuda_attention.cpp - the fused CUDA attention ([cu:attention] in metaformer_cuda.cuh) against
 * the CPU's mf_attention: output and the gradients of q, k and v, on the exact fp32 kernels and on
 * the TF32 and bf16 tensor-core kernels (WMMA; under the emulator through its stand-in of
 * nvcuda::wmma), with and without attention dropout.
 *
 *   make test       g++ -std=c++14 with tests/cuda_emu.h: every kernel runs on the CPU emulator,
 *                   fp32 in each thread order (in, reversed, shuffled), TF32 and bf16 in one
 *   make test-cuda  nvcc -x cu for a real GPU (sm_90), without the emulator
 *
 * Tolerances (max error relative to the tensor's largest value, as tests/test_cuda.cpp):
 *   fp32: 1e-5 (the kernels sum in another order than the CPU's tiles).
 *   TF32: 5e-3. A tensor core reads its inputs rounded to 10 mantissa bits (unit roundoff
 *   u = 2^-11 = 4.9e-4), so each product q.k, p v, ... carries a relative error up to ~2u of the
 *   sum of |terms|; the softmax passes the score error on to P (dP/P = dS, |S| <= scale * dk here)
 *   and the backward chains three such products (dP, dS = P (dP - D), then dS K). With inputs in
 *   [-1, 1] the worst case measured here is ~1.5e-3; 5e-3 is ~10 u, i.e. about what PyTorch
 *   documents for TF32 matmuls (~1e-3 relative) plus one level of error propagation. The error is
 *   relative to the size of the terms, not of the result: dS = P (dP - D) cancels exactly for a
 *   query with one key (T = 1: dq = dk = 0 on the CPU, ~5e-5 in TF32), so the TF32 errors are
 *   divided by max(max |reference|, 0.1) - the gradients here are O(0.1 .. 1).
 *   bf16: 10 u = 10 / 256 = 0.039 by the same rule, u = 2^-8 (bf16 keeps 8 significant bits): the
 *   Q, K, V, dO, P and dS tiles are rounded to bf16, scores, softmax and accumulators stay fp32
 *   (docs/math.md §4.2 derives the bound). Measured worst: ~9e-3 (~2.3 u). */
#include "cuda_parity.h"

static const double TOL_TF32 = 5e-3, TF32_FLOOR = 0.1, TOL_BF16 = 10.0 / 256, BF16_FLOOR = 0.1;

/* ---------------------------------------------------------------- op parity */
/* one attention: q [B, H, Tq, dk], k [B, H, Tk, dk], v [B, H, Tk, dv]; grads: bit i set = input i
   is a parameter (gets a gradient), else a constant; self_attn: q = k = v (one parameter) */
struct Case { const char *name; int B, H, Tq, Tk, dk, dv, causal; float scale; int grads, self_attn; float drop; };

/* the operands' layout of run_case: 0 mf_attention's [B, H, T, d], 1 MF_ATTN_TOKENS_MAJOR [B, T, H, d] */
static int g_tokens_major = 0;
/* the run on one context (cuda: 0 CPU, 1 fp32 kernels, 2 TF32 kernels, 3 bf16 kernels); loss = sum(out * R) */
static OpRun run_case(const Case &c, int cuda) {
    OpRun r;
    mf_ctx *ctx = mf_ctx_new(5);
    int shapes[3][4] = {{c.B, c.H, c.Tq, c.dk}, {c.B, c.H, c.Tk, c.dk}, {c.B, c.H, c.Tk, c.dv}};
    if (g_tokens_major)
        for (int i = 0; i < 3; i++) { int t = shapes[i][1]; shapes[i][1] = shapes[i][2]; shapes[i][2] = t; }
    mf_tensor *in[3] = {NULL, NULL, NULL};
    std::vector<mf_tensor *> watch;
    int n_in = c.self_attn ? 1 : 3;
    if (cuda && mf_ctx_set_device(ctx, MF_DEVICE_CUDA) < 0) { r.err = mf_error(ctx); mf_ctx_free(ctx); return r; }
    if (cuda == 2) mf_cuda_set_tf32(ctx, 1);
    if (cuda == 3 && mf_cuda_set_precision(ctx, MF_PREC_BF16) < 0) { r.err = mf_error(ctx); mf_ctx_free(ctx); return r; }
    for (int i = 0; i < n_in; i++) {
        char nm[16];
        std::vector<float> x = rand_vec((int64_t)shapes[i][0] * shapes[i][1] * shapes[i][2] * shapes[i][3], 300 + (uint64_t)i);
        snprintf(nm, sizeof nm, "in%d", i);
        in[i] = (c.grads >> i) & 1 ? mf_param(ctx, nm, 4, shapes[i]) : mf_new(ctx, 4, shapes[i]);
        if (in[i]) mf_set_data(ctx, in[i], x.data());
    }
    if (c.self_attn) in[1] = in[2] = in[0];
    for (int i = 0; i < n_in; i++) watch.push_back((c.grads >> i) & 1 ? in[i] : NULL);
    return op_run_finish(ctx, mf_attention_layout(ctx, in[0], in[1], in[2], c.scale, c.causal, c.drop,
                                                  g_tokens_major ? MF_ATTN_TOKENS_MAJOR : MF_ATTN_HEADS_MAJOR),
                         watch, 777);
}
/* worst relative error of the output and the gradients; -1 when the run failed */
static double compare(const Case &c, const OpRun &gpu, const OpRun &cpu, const char *what, double tol, double floor) {
    double worst = 0;
    if (!gpu.err.empty()) { printf("    %s (%s): CUDA run failed: %s\n", c.name, what, gpu.err.c_str()); return -1; }
    double e = rel_err(gpu.out, cpu.out, floor);
    if (!(e <= tol)) printf("    %s (%s): output differs, rel err %.3g\n", c.name, what, e);
    worst = e;
    for (size_t i = 0; i < gpu.grads.size(); i++) {
        e = rel_err(gpu.grads[i], cpu.grads[i], floor);
        if (!(e <= tol)) printf("    %s (%s): gradient of %s differs, rel err %.3g\n", c.name, what, i == 0 ? "q" : i == 1 ? "k" : "v", e);
        if (!(e <= worst)) worst = e;
    }
    return worst;
}
static int same_bits(const OpRun &a, const OpRun &b) {
    if (a.out.size() != b.out.size() || a.grads.size() != b.grads.size()) return 0;
    if (!a.out.empty() && memcmp(a.out.data(), b.out.data(), a.out.size() * 4) != 0) return 0;
    for (size_t i = 0; i < a.grads.size(); i++)
        if (a.grads[i].size() != b.grads[i].size() ||
            (!a.grads[i].empty() && memcmp(a.grads[i].data(), b.grads[i].data(), a.grads[i].size() * 4) != 0))
            return 0;
    return 1;
}
static double worst_tf32 = 0, worst_bf16 = 0; /* the largest errors seen: the rounding must be visible */
/* quick: fp32 in one thread order and no TF32 run (the long sequence: the emulator's WMMA stand-in
   does each warp's tile product in all 32 lanes, too slow for 56000 keys) */
static void check_case(const Case &c, int quick = 0) {
    double t0 = mf_time();
    OpRun cpu = run_case(c, 0), first;
    if (!cpu.err.empty()) { printf("    %s: CPU run failed: %s\n", c.name, cpu.err.c_str()); MFT_CHECK(0); return; }
    for (int o = quick ? N_ORDERS - 1 : 0; o < N_ORDERS; o++) {
        set_order(o);
        OpRun gpu = run_case(c, 1);
        double e = compare(c, gpu, cpu, "fp32", TOL, 1e-3);
        MFT_CHECK(e >= 0 && e <= TOL);
        if (o == 0 || quick) first = gpu;
        else if (!same_bits(gpu, first)) { printf("    %s: fp32 results depend on the thread order\n", c.name); MFT_CHECK(0); }
    }
    set_order(N_ORDERS - 1);
    if (!quick) {
        OpRun tf = run_case(c, 2);
        double e = compare(c, tf, cpu, "tf32", TOL_TF32, TF32_FLOOR);
        MFT_CHECK(e >= 0 && e <= TOL_TF32);
        if (e > worst_tf32) worst_tf32 = e;
        OpRun bf = run_case(c, 3);
        e = compare(c, bf, cpu, "bf16", TOL_BF16, BF16_FLOOR);
        MFT_CHECK(e >= 0 && e <= TOL_BF16);
        if (e > worst_bf16) worst_bf16 = e;
    }
    if (getenv("MFT_TIME")) printf("    %-50s %.2f s\n", c.name, mf_time() - t0);
    set_order(0);
}

static const Case CASES[] = {
    {"T = 1", 1, 2, 1, 1, 3, 3, 1, 0.5f, 7, 0, 0.0f},
    {"T = 1 full", 2, 1, 1, 1, 5, 2, 0, 0.5f, 7, 0, 0.0f},
    {"T = 7, d = 17, causal", 1, 2, 7, 7, 17, 17, 1, 0.24f, 7, 0, 0.0f},
    {"T = 33, dk = 3, dv = 5, full", 2, 1, 33, 33, 3, 5, 0, 0.58f, 7, 0, 0.0f},
    {"T = 65, d = 64, causal (ragged second tile)", 1, 2, 65, 65, 64, 64, 1, 0.125f, 7, 0, 0.0f},
    {"T = 130, d = 16, causal", 1, 2, MFT_SMALL ? 70 : 130, MFT_SMALL ? 70 : 130, 16, 16, 1, 0.25f, 7, 0, 0.0f},
    {"T = 130, dk = 8, dv = 12, full", 1, 1, MFT_SMALL ? 70 : 130, MFT_SMALL ? 70 : 130, 8, 12, 0, 0.35f, 7, 0, 0.0f},
    {"memory keys Tq = 20 < Tk = 90, causal", 1, 2, 20, 90, 8, 12, 1, 0.35f, 7, 0, 0.0f},
    {"memory keys Tq = 20 < Tk = 90, full", 1, 1, 20, 90, 8, 5, 0, 0.35f, 7, 0, 0.0f},
    {"Tq = 70 > Tk = 6, causal: rows without keys", 1, 2, 70, 6, 5, 4, 1, 0.45f, 7, 0, 0.0f},
    {"d = 80, causal", 1, 1, 19, 19, 80, 80, 1, 0.11f, 7, 0, 0.0f},
    {"d = 128, full", 1, 1, 40, 40, 128, 128, 0, 0.088f, 7, 0, 0.0f},
    {"d = 256, causal", 1, 1, 20, 20, 256, 256, 1, 0.0625f, 7, 0, 0.0f},
    {"dk = 1, dv = 256", 1, 1, 9, 9, 1, 256, 1, 1.0f, 7, 0, 0.0f},
    {"dk = 256, dv = 1", 1, 1, 9, 9, 256, 1, 0, 0.0625f, 7, 0, 0.0f},
    {"only q needs a gradient", 1, 2, 21, 21, 6, 7, 1, 0.4f, 1, 0, 0.0f},
    {"only k needs a gradient", 1, 2, 21, 21, 6, 7, 1, 0.4f, 2, 0, 0.0f},
    {"only v needs a gradient", 1, 2, 21, 21, 6, 7, 0, 0.4f, 4, 0, 0.0f},
    {"self attention q = k = v (gradients add up)", 2, 1, 23, 23, 6, 6, 1, 0.4f, 1, 1, 0.0f},
    {"dropout p 0.3, T = 70, d = 8, causal (ragged)", 2, 2, 70, 70, 8, 8, 1, 0.35f, 7, 0, 0.3f},
    {"dropout p 0.6, Tq = 20 < Tk = 90, full", 1, 2, 20, 90, 8, 12, 0, 0.35f, 7, 0, 0.6f},
};
static void test_attention_parity(void) {
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) check_case(CASES[i]);
    { /* the TF32 kernels are deterministic too: the same bits in every thread order */
        OpRun first;
        for (int o = 0; o < N_ORDERS; o++) {
            set_order(o);
            OpRun tf = run_case(CASES[7], 2);
            MFT_CHECK(tf.err.empty());
            if (o == 0) first = tf;
            else if (!same_bits(tf, first)) { printf("    TF32 results depend on the thread order\n"); MFT_CHECK(0); }
        }
        set_order(0);
    }
    { /* and the bf16 kernels */
        OpRun first;
        for (int o = 0; o < N_ORDERS; o++) {
            set_order(o);
            OpRun bf = run_case(CASES[4], 3);
            MFT_CHECK(bf.err.empty());
            if (o == 0) first = bf;
            else if (!same_bits(bf, first)) { printf("    bf16 results depend on the thread order\n"); MFT_CHECK(0); }
        }
        set_order(0);
    }
    /* the TF32 and bf16 kernels really round (else the tolerances above would hide a fallback to a
       more exact path): bf16's unit roundoff is 8 times TF32's */
    printf("    worst TF32 error (relative, floor %g): %.3g\n", TF32_FLOOR, worst_tf32);
    if (!(worst_tf32 > 1e-5)) printf("    TF32 runs are as exact as fp32 (%.3g): no tensor-core path?\n", worst_tf32);
    MFT_CHECK(worst_tf32 > 1e-5);
    printf("    worst bf16 error (relative, floor %g): %.3g\n", BF16_FLOOR, worst_bf16);
    if (!(worst_bf16 > 2 * worst_tf32)) printf("    bf16 runs are as exact as TF32 (%.3g): no bf16 path?\n", worst_bf16);
    MFT_CHECK(worst_bf16 > 2 * worst_tf32);
}

/* token-major operands (MF_ATTN_TOKENS_MAJOR: rows H*d floats apart, as the softmax mixers pass the
   linear layers' outputs): a ragged tile, memory keys, dropout and q = k = v, against the CPU's op
   in the same layout (which tests/test_attention.c checks against mf_attention bit for bit) */
static void test_tokens_major(void) {
    static const int picks[] = {4, 7, 18, 19};
    g_tokens_major = 1;
    for (size_t i = 0; i < sizeof picks / sizeof picks[0]; i++) check_case(CASES[picks[i]]);
    g_tokens_major = 0;
}

/* more keys than the old per-row kernel's shared memory held (~55000): no length limit now */
static void test_long_sequence(void) {
    const int Tk = MFT_SMALL ? 20000 : 56000;
    Case c = {"Tq = 3, Tk = 56000, memory keys, causal", 1, 1, 3, Tk, 2, 3, 1, 0.7f, 7, 0, 0.0f};
    check_case(c, 1);
}

/* ---------------------------------------------------------------- models */
/* a few training steps of the three softmax mixers that use mf_attention, with sequences longer
   than one tile (T = 70 > 64): losses and parameters as on the CPU */
static void test_models(void) {
    const mf_mixer_kind mixers[3] = {MF_MIXER_SDPA, MF_MIXER_METRIC, MF_MIXER_QUADRATIC};
    TrainOpts o = train_opts();
    /* SGD: Adam would move parameters whose true gradient is 0 (the key bias: softmax ignores a
       constant per row) by +-lr according to the sign of their rounding noise */
    o.kind = MF_OPT_SGD; o.lr = 0.1f; o.steps = 2; o.T = MFT_SMALL ? 40 : 70; o.only_order = N_ORDERS - 1;
    for (int i = 0; i < 3; i++) {
        mf_model_config cfg = small_config(mixers[i]);
        cfg.vocab = 13; cfg.n_layers = 1; cfg.max_seq = o.T; cfg.dropout = 0;
        check_train(cfg, mf_mixer_name(mixers[i]), o);
    }
}

/* ---------------------------------------------------------------- errors */
static void test_errors(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    int sq[4] = {1, 1, 3, 4}, sk[4] = {1, 1, 5, 3}, wide[4] = {1, 1, 2, 4096};
    MFT_CHECK(mf_ctx_set_device(ctx, MF_DEVICE_CUDA) == 0);
    /* bad shapes: the op's own message, on the device as on the CPU */
    MFT_CHECK(mf_attention(ctx, mf_new(ctx, 4, sq), mf_new(ctx, 4, sk), mf_new(ctx, 4, sk), 0.5f, 1, 0.0f) == NULL);
    MFT_CHECK(strstr(mf_error(ctx), "head sizes dk") != NULL);
    mf_clear_error(ctx);
    mf_reset(ctx);
    /* a head too wide for shared memory: a clear error naming the sizes, no launch */
    mf_tensor *q = mf_new(ctx, 4, wide);
    MFT_CHECK(mf_attention(ctx, q, q, q, 1.0f, 0, 0.0f) == NULL);
    MFT_CHECK(strstr(mf_error(ctx), "dk = 4096") != NULL && strstr(mf_error(ctx), "shared memory") != NULL);
    mf_ctx_free(ctx);
}

int main(void) {
    if (cuda_suite_start("test_cuda_attention") < 0) return 1;
    MFT_RUN(test_attention_parity);
    MFT_RUN(test_tokens_major);
    MFT_RUN(test_long_sequence);
    MFT_RUN(test_models);
    MFT_RUN(test_errors);
#ifdef MF_CUDA_EMU
    MFT_RUN(test_no_leaks);
#endif
    return mft_finish();
}
