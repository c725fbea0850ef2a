/* test_cuda_attn_dropout.cpp - attention-probability dropout in the CUDA kernels (the fused attention,
 * the relative attention, the feedback attention and its recurrence) against the CPU: the same masks
 * (the same counter-based draws) and so the same outputs and gradients, and training runs of models
 * with attn_dropout (docs/math.md §4.1). Built with the emulator by make test, with nvcc by make
 * test-cuda. */
#include "cuda_parity.h"

/* an op of up to 6 inputs of the given shapes, all parameters; cuda: 0 CPU, 1 CUDA */
typedef mf_tensor *(*BuildFn)(mf_ctx *ctx, mf_tensor **in);
static OpRun run_op(BuildFn build, const std::vector<std::vector<int> > &shapes, int cuda) {
    OpRun r;
    mf_ctx *ctx = mf_ctx_new(13);
    mf_tensor *in[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
    std::vector<mf_tensor *> watch;
    if (cuda && mf_ctx_set_device(ctx, MF_DEVICE_CUDA) < 0) { r.err = mf_error(ctx); mf_ctx_free(ctx); return r; }
    for (size_t i = 0; i < shapes.size(); i++) {
        char nm[16];
        int64_t n = 1;
        for (size_t d = 0; d < shapes[i].size(); d++) n *= shapes[i][d];
        snprintf(nm, sizeof nm, "in%d", (int)i);
        in[i] = mf_param(ctx, nm, (int)shapes[i].size(), shapes[i].data());
        if (in[i]) mf_set_data(ctx, in[i], rand_vec(n, 400 + i).data());
        watch.push_back(in[i]);
    }
    return op_run_finish(ctx, build(ctx, in), watch, 888);
}
static void check_op(const char *name, BuildFn build, const std::vector<std::vector<int> > &shapes) {
    OpRun cpu = run_op(build, shapes, 0);
    MFT_CHECK(cpu.err.empty());
    for (int ord = 0; ord < N_ORDERS; ord++) {
        set_order(ord);
        OpRun gpu = run_op(build, shapes, 1);
        if (!gpu.err.empty()) { printf("    %s: CUDA run failed: %s\n", name, gpu.err.c_str()); MFT_CHECK(0); continue; }
        double e = rel_err(gpu.out, cpu.out);
        for (size_t i = 0; i < gpu.grads.size(); i++) { double g = rel_err(gpu.grads[i], cpu.grads[i]); if (!(g <= e)) e = g; }
        if (!(e <= TOL)) printf("    %s: CPU and CUDA differ, rel err %.3g\n", name, e);
        MFT_CHECK(e <= TOL);
    }
    set_order(0);
}

static mf_tensor *attn_causal(mf_ctx *c, mf_tensor **x) { return mf_attention(c, x[0], x[1], x[2], 0.4f, 1, 0.3f); }
static mf_tensor *attn_full(mf_ctx *c, mf_tensor **x) { return mf_attention(c, x[0], x[1], x[2], 0.4f, 0, 0.6f); }
static mf_tensor *rel(mf_ctx *c, mf_tensor **x) { return mf_rel_attention(c, x[0], x[1], x[2], x[3], x[4], x[5], 0.4f, 0.3f); }
static mf_tensor *fba(mf_ctx *c, mf_tensor **x) { return mf_feedback_attention(c, x[0], x[1], x[2], x[3], x[4], x[5], 0.4f, 0.3f); }

static void test_ops(void) {
    int T = MFT_SMALL ? 40 : 70, Tk = MFT_SMALL ? 50 : 90;
    std::vector<std::vector<int> > a = {{2, 2, T, 8}, {2, 2, Tk, 8}, {2, 2, Tk, 6}};
    check_op("attention causal p 0.3", attn_causal, a);
    check_op("attention full p 0.6", attn_full, a);
    std::vector<std::vector<int> > r = {{2, 2, T, 8}, {2, 2, Tk, 8}, {2, 2, Tk, 6}, {2, 8}, {256, 2, 8}, {256, 2}};
    check_op("rel_attention p 0.3", rel, r);
    std::vector<std::vector<int> > f = {{2, 3, 8}, {2, 3, 20, 8}, {2, 3, 20, 8}, {3, 8}, {24, 3, 8}, {24, 3}};
    check_op("feedback_attention p 0.3", fba, f);
}

/* training steps of models with attention dropout (and the block's dropout) on both devices */
static void test_train(void) {
    static const mf_mixer_kind mixers[] = {MF_MIXER_SDPA, MF_MIXER_METRIC, MF_MIXER_RELATIVE, MF_MIXER_FEEDBACK,
                                           MF_MIXER_FEEDBACK_KV};
    for (size_t i = 0; i < sizeof mixers / sizeof mixers[0]; i++) {
        mf_model_config c = small_config(mixers[i]);
        TrainOpts o = train_opts();
        char what[64];
        c.attn_dropout = 0.25f;
        if (mixers[i] == MF_MIXER_RELATIVE) c.mem_len = 4;
        o.only_order = (int)i;
        snprintf(what, sizeof what, "%s attn_dropout 0.25", mf_mixer_name(mixers[i]));
        check_train(c, what, o);
    }
}

int main(void) {
    if (cuda_suite_start("test_cuda_attn_dropout") < 0) return 1;
    MFT_RUN(test_ops);
    MFT_RUN(test_train);
#ifdef MF_CUDA_EMU
    MFT_RUN(test_no_leaks);
#endif
    return mft_finish();
}
