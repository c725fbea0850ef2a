/* test_cuda_classify.cpp - non-causal models and the classification head (docs/math.md §20) on the
 * CUDA backend against the CPU: a few training steps of a non-causal classifier of each mixer with
 * rows of several lengths (losses, gradient norms, parameters), and the reciprocal op the
 * non-causal linear mixer uses (its parity is in tests/test_cuda_ops.cpp with every op example).
 * Built like tests/test_cuda.cpp (emulated by make test, on a GPU by make test-cuda). */
#include "cuda_parity.h"

enum { B = 4, T = 7 };
static const int32_t IDS[B * T] = {3, 0, 10, 3, 7, 7, 1, 10, 5, 3, -1, -1, -1, -1, 2, 2, 9, 0, 1, 4, -5,
                                   6, 6, 6, 6, 6, 6, 6};
static const int32_t LENGTHS[B] = {7, 3, 6, 7};
static const int32_t LABELS[B] = {2, 0, 1, 2};

struct ClsRun { std::vector<float> losses, norms, params, logits; std::string err; };

static ClsRun cls_run(const mf_model_config &cfg, int cuda) {
    ClsRun r;
    mf_ctx *ctx = mf_ctx_new(7);
    mf_model *m = NULL;
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 3e-3f);
    if (cuda && mf_ctx_set_device(ctx, MF_DEVICE_CUDA) < 0) { r.err = mf_error(ctx); mf_ctx_free(ctx); return r; }
    m = mf_model_new(ctx, &cfg);
    for (int s = 0; s < 3 && m; s++)
        train_step(ctx, mf_model_classify_loss(m, IDS, LENGTHS, LABELS, B, T), &opt, r.norms, r.losses);
    if (m && mf_ok(ctx)) {
        int grad = mf_set_grad(ctx, 0), training = mf_set_training(ctx, 0);
        mf_tensor *logits = mf_model_classify_logits(m, IDS, LENGTHS, B, T);
        if (logits) r.logits = host_of(ctx, logits, 0);
        r.params = params_host(ctx);
        mf_set_grad(ctx, grad);
        mf_set_training(ctx, training);
    }
    if (!mf_ok(ctx)) r.err = mf_error(ctx);
    mf_model_free(m);
    mf_ctx_free(ctx);
    return r;
}

static void check_classifier(mf_mixer_kind mixer, mf_feature_kind feature, const char *what) {
    mf_model_config cfg = small_config(mixer);
    cfg.causal = 0; cfg.n_classes = 3; cfg.max_seq = T;
    if (mixer == MF_MIXER_LINEAR) cfg.linear_feature = feature;
    ClsRun cpu = cls_run(cfg, 0);
    if (!cpu.err.empty()) { printf("    %s: CPU run failed: %s\n", what, cpu.err.c_str()); MFT_CHECK(0); return; }
    for (int ord = 0; ord < N_ORDERS; ord++) {
        set_order(ord);
        ClsRun gpu = cls_run(cfg, 1);
        if (!gpu.err.empty()) { printf("    %s: CUDA run failed: %s\n", what, gpu.err.c_str()); MFT_CHECK(0); continue; }
        MFT_CHECK(gpu.losses.size() == 3 && cpu.losses.size() == 3);
        for (size_t s = 0; s < gpu.losses.size() && s < cpu.losses.size(); s++) {
            MFT_NEAR(gpu.losses[s], cpu.losses[s], 1e-5);
            MFT_NEAR(gpu.norms[s], cpu.norms[s], 1e-5);
        }
        /* parameters loosely: Adam moves one whose true gradient is 0 (sdpa's key bias, ln1's bias
           before pool) by +-lr with the sign of its rounding noise; the logits after the steps tightly */
        double e = rel_err(gpu.params, cpu.params), el = rel_err(gpu.logits, cpu.logits);
        if (!(e <= 1e-2 && el <= 1e-5)) {
            printf("    %s: after 3 steps parameters differ by %.3g, logits by %.3g (relative)\n", what, e, el);
            MFT_CHECK(0);
        }
    }
    set_order(0);
}
static void test_sdpa(void) { check_classifier(MF_MIXER_SDPA, MF_FEATURE_DPFP, "non-causal sdpa classifier"); }
static void test_metric(void) { check_classifier(MF_MIXER_METRIC, MF_FEATURE_DPFP, "non-causal metric classifier"); }
static void test_pool(void) { check_classifier(MF_MIXER_POOL, MF_FEATURE_DPFP, "centred pool classifier"); }
static void test_linear_dpfp(void) { check_classifier(MF_MIXER_LINEAR, MF_FEATURE_DPFP, "non-causal linear dpfp classifier"); }
static void test_linear_elu1(void) { check_classifier(MF_MIXER_LINEAR, MF_FEATURE_ELU1, "non-causal linear elu1 classifier"); }

int main(void) {
    if (cuda_suite_start("test_cuda_classify") < 0) return 1;
    MFT_RUN(test_sdpa);
    MFT_RUN(test_metric);
    MFT_RUN(test_pool);
    MFT_RUN(test_linear_dpfp);
    MFT_RUN(test_linear_elu1);
#ifdef MF_CUDA_EMU
    MFT_RUN(test_no_leaks);
#endif
    return mft_finish();
}
