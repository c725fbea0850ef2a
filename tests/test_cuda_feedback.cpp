/* test_cuda_feedback.cpp - the feedback transformer on CUDA ([cu:feedback] of metaformer_cuda.cuh)
 * against the CPU ([mf:feedback] of metaformer.h).
 *
 *   make test       g++ -std=c++14 with tests/cuda_emu.h: every kernel runs on the CPU emulator,
 *                   in each of its thread orders (in, reversed, shuffled)
 *   make test-cuda  nvcc -x cu for a real GPU (sm_90), without the emulator
 *
 * The feedback_attention op: output and all six input gradients, CUDA vs CPU (odd sizes, one slot,
 * n = P, more slots than a block has threads). Both models (original and shared-KV), with dropout 0
 * and 0.1 (the CUDA dropout draws the CPU's counters): three training steps give the CPU's losses,
 * gradient norms and parameters, and greedy generation afterwards (past max_seq, so the memory is
 * primed again) gives the CPU's tokens. The token loop never waits on the host (emulator counters).
 * Bad input still gives the CPU's clear errors. */
#include "cuda_parity.h"

/* ---------------------------------------------------------------- the feedback_attention op */
struct Fba { int B, H, d, n, P; };
/* q, k, v, u, r, s as parameters (so every one gets a gradient); loss = sum(out * R) */
static OpRun run_fba(const Fba &c, int cuda) {
    OpRun r;
    mf_ctx *ctx = mf_ctx_new(99);
    int sh[6][4] = {{c.B, c.H, c.d, 0}, {c.B, c.H, c.n, c.d}, {c.B, c.H, c.n, c.d}, {c.H, c.d, 0, 0},
                    {c.P, c.H, c.d, 0}, {c.P, c.H, 0, 0}};
    int nd[6] = {3, 4, 4, 2, 3, 2};
    mf_tensor *in[6];
    if (cuda && mf_ctx_set_device(ctx, MF_DEVICE_CUDA) < 0) { r.err = mf_error(ctx); mf_ctx_free(ctx); return r; }
    for (int i = 0; i < 6; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "in%d", i);
        in[i] = mf_param(ctx, nm, nd[i], sh[i]);
        if (in[i]) mf_set_data(ctx, in[i], rand_vec(in[i]->ne, 2000 + (uint64_t)i, -1.5f, 1.5f).data());
    }
    return op_run_finish(ctx, mf_feedback_attention(ctx, in[0], in[1], in[2], in[3], in[4], in[5], 1.0f / sqrtf((float)c.d), 0.0f),
                         std::vector<mf_tensor *>(in, in + 6));
}
static void check_fba(const Fba &c) {
    static const char *names[6] = {"q", "k", "v", "u", "r", "s"};
    OpRun cpu = run_fba(c, 0);
    if (!cpu.err.empty()) { printf("    CPU run failed: %s\n", cpu.err.c_str()); MFT_CHECK(0); return; }
    for (int o = 0; o < N_ORDERS; o++) {
        set_order(o);
        OpRun gpu = run_fba(c, 1);
        if (!gpu.err.empty()) { printf("    CUDA run failed: %s\n", gpu.err.c_str()); MFT_CHECK(0); continue; }
        double e = rel_err(gpu.out, cpu.out), worst = e;
        if (!(e <= TOL)) { printf("    B %d H %d d %d n %d P %d (order %d): output differs, rel err %.3g\n", c.B, c.H, c.d, c.n, c.P, o, e); MFT_CHECK(0); }
        for (int i = 0; i < 6; i++) {
            e = rel_err(gpu.grads[(size_t)i], cpu.grads[(size_t)i]);
            if (e > worst) worst = e;
            if (!(e <= TOL)) { printf("    B %d H %d d %d n %d P %d (order %d): d%s differs, rel err %.3g\n", c.B, c.H, c.d, c.n, c.P, o, names[i], e); MFT_CHECK(0); }
        }
        if (o == 0) printf("    B %d H %d dk %d n %d P %d: worst rel err %.2e\n", c.B, c.H, c.d, c.n, c.P, worst);
    }
    set_order(0);
}
static void test_feedback_attention(void) {
    const Fba cases[] = {
        {2, 3, 5, 7, 9},                              /* odd sizes, P > n */
        {1, 1, 4, 1, 4},                              /* one slot: the last table row */
        {3, 2, 3, 13, 13},                            /* n = P: every table row */
        {1, 2, 8, MFT_SMALL ? 140 : 200, MFT_SMALL ? 150 : 211}, /* more slots than the block's threads */
        {2, 1, 33, 3, 5},                             /* head size over a warp */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_fba(cases[i]);
}

/* ---------------------------------------------------------------- whole models */
static const int GEN_NEW = 12; /* with the 3-token prompt past max_seq = 12: the memory is primed again */
static mf_model_config small_config(mf_mixer_kind mixer, float dropout) {
    mf_model_config c = small_config(mixer);
    c.dropout = dropout;
    return c;
}
/* only_order < 0: every thread order; else only that one (a device run costs ~2 s under the
   emulator, mostly the optimizer over the 4096-row relative tables, so the suite spreads the orders
   over the configurations; the op tests run every kernel in every order) */
static void check_feedback(mf_model_config cfg, const char *what, int only_order = -1) {
    TrainOpts o = train_opts();
    o.gen_new = GEN_NEW; o.only_order = only_order;
    check_train(cfg, what, o);
}
static void test_train_feedback(void) { check_feedback(small_config(MF_MIXER_FEEDBACK, 0.0f), "feedback", MFT_SMALL ? 2 : -1); }
static void test_train_feedback_dropout(void) {
    mf_model_config c = small_config(MF_MIXER_FEEDBACK, 0.1f);
    c.ffn_act = MF_ACT_GELU;
    check_feedback(c, "feedback, dropout 0.1, gelu", 2);
}
static void test_train_feedback_kv(void) {
    mf_model_config c = small_config(MF_MIXER_FEEDBACK_KV, 0.0f);
    c.pos = MF_POS_NONE; c.n_layers = 3;
    check_feedback(c, "feedback_kv, no positions, 3 layers", 1);
}
static void test_train_feedback_kv_dropout(void) {
    mf_model_config c = small_config(MF_MIXER_FEEDBACK_KV, 0.1f);
    c.n_heads = 4; c.ffn_act = MF_ACT_SILU;
    check_feedback(c, "feedback_kv, dropout 0.1, 4 heads, silu", 2);
}

/* one sequence (T = 1): no attention at all, no slot read */
static void test_one_token(void) {
    for (int k = MF_MIXER_FEEDBACK; k <= MF_MIXER_FEEDBACK_KV; k++) {
        mf_model_config cfg = small_config((mf_mixer_kind)k, 0.0f);
        float loss[2], gw[2][3];
        for (int cuda = 0; cuda < 2; cuda++) {
            mf_ctx *ctx = mf_ctx_new(3);
            if (cuda) mf_ctx_set_device(ctx, MF_DEVICE_CUDA);
            mf_model *m = mf_model_new(ctx, &cfg);
            int32_t ids[2] = {4, 9}, tg[2] = {5, 1};
            mf_tensor *l = mf_model_loss(m, ids, tg, 2, 1);
            MFT_CHECK(mf_backward(ctx, l) == 0);
            loss[cuda] = mf_item(ctx, l);
            mf_grad_to_host(ctx, MF__FB_S(m)->w, gw[cuda]);
            MFT_CHECK(mf_ok(ctx));
            mf_model_free(m);
            mf_ctx_free(ctx);
        }
        MFT_NEAR(loss[1], loss[0], 1e-6);
        for (int i = 0; i < 3; i++) MFT_NEAR(gw[1][i], gw[0][i], 1e-6);
    }
}

/* generation on the device, step by step: the logits of the prompt and of each kept-memory step
   equal the CPU's, with random relative tables (so the positional terms matter) */
static std::vector<float> gen_logits(mf_model_config cfg, int cuda) {
    std::vector<float> all;
    mf_ctx *ctx = mf_ctx_new(11);
    if (cuda) mf_ctx_set_device(ctx, MF_DEVICE_CUDA);
    mf_model *m = mf_model_new(ctx, &cfg);
    const int32_t ids[7] = {3, 1, 4, 1, 5, 9, 2};
    for (int l = 0; m && l < cfg.n_layers; l++) {
        const mf__fb_layer *L = MF__FB_L(m, l);
        mf_set_data(ctx, L->rel_u, rand_vec(L->rel_u->ne, 30 + (uint64_t)l, -0.5f, 0.5f).data());
        mf_set_data(ctx, L->rel_r, rand_vec(L->rel_r->ne, 40 + (uint64_t)l, -0.5f, 0.5f).data());
        mf_set_data(ctx, L->rel_s, rand_vec(L->rel_s->ne, 50 + (uint64_t)l, -0.5f, 0.5f).data());
    }
    mf_set_grad(ctx, 0);
    mf_set_training(ctx, 0);
    for (int pos = 0; m && pos < 7; pos = pos ? pos + 1 : 4) { /* the prompt (4 tokens), then one at a time */
        int T = pos ? 1 : 4;
        mf_tensor *lg = mf__model_run(m, ids + pos, 1, T, pos, 1);
        if (!lg) break;
        std::vector<float> v = host_of(ctx, lg, 0);
        all.insert(all.end(), v.begin(), v.end());
        mf_reset(ctx);
    }
    if (!mf_ok(ctx)) { printf("    %s: %s\n", cuda ? "CUDA" : "CPU", mf_error(ctx)); all.clear(); }
    mf_model_free(m);
    mf_ctx_free(ctx);
    return all;
}
static void test_generation_steps(void) {
    for (int k = MF_MIXER_FEEDBACK; k <= MF_MIXER_FEEDBACK_KV; k++) {
        mf_model_config cfg = small_config((mf_mixer_kind)k, 0.1f); /* dropout: off when generating */
        std::vector<float> cpu = gen_logits(cfg, 0), gpu = gen_logits(cfg, 1);
        MFT_CHECK(!cpu.empty() && cpu.size() == (size_t)(4 + 3) * cfg.vocab);
        double e = rel_err(gpu, cpu);
        printf("    %s: logits of the prompt and 3 kept-memory steps, rel err %.2e\n", mf_mixer_name(cfg.mixer), e);
        MFT_CHECK(e <= TOL);
    }
}

#ifdef MF_CUDA_EMU
/* the token loop never waits on the host: over the feedback node's forward and its backward, every
   synchronisation is one of the emulator's per-launch checks (mf__cu_launched under MF_CUDA_EMU) and
   no byte crosses between host and device */
static void test_no_host_sync(void) {
    for (int k = MF_MIXER_FEEDBACK; k <= MF_MIXER_FEEDBACK_KV; k++) {
        mf_model_config cfg = small_config((mf_mixer_kind)k, 0.1f);
        mf_ctx *ctx = mf_ctx_new(5);
        mf_ctx_set_device(ctx, MF_DEVICE_CUDA);
        mf_model *m = mf_model_new(ctx, &cfg);
        int shape[3] = {2, 7, cfg.d_model};
        mf_tensor *x = mf_param(ctx, "x", 3, shape);
        mf_set_data(ctx, x, rand_vec(x->ne, 8).data());
        mf_zero_grad(ctx);
        unsigned long long s0 = mf_emu_sync_count(), c0 = mf_emu_host_copy_count(), l0 = mf_emu_launch_count();
        mf_tensor *y = mf__fb_run(m, x, 0, 0);
        unsigned long long s1 = mf_emu_sync_count(), c1 = mf_emu_host_copy_count(), l1 = mf_emu_launch_count();
        MFT_CHECK(y != NULL && y->requires_grad);
        MFT_CHECK(c1 == c0);
        MFT_CHECK(s1 - s0 == l1 - l0 && l1 - l0 > 7);
        if (y) {
            y->grad = (float *)mf__alloc_data(ctx, (size_t)y->ne * sizeof(float));
            mf__dupload(ctx, y->grad, rand_vec(y->ne, 9).data(), (size_t)y->ne * sizeof(float));
            s0 = mf_emu_sync_count(); c0 = mf_emu_host_copy_count(); l0 = mf_emu_launch_count();
            MFT_CHECK(ctx->be->backward(ctx, y) == 0);
            s1 = mf_emu_sync_count(); c1 = mf_emu_host_copy_count(); l1 = mf_emu_launch_count();
            MFT_CHECK(c1 == c0);
            MFT_CHECK(s1 - s0 == l1 - l0 && l1 - l0 > 7);
            std::vector<float> gx = host_of(ctx, x, 1);
            MFT_CHECK(mf_emu_host_copy_count() > c1); /* the counter does count a copy to the host */
            double mx = 0;
            for (size_t i = 0; i < gx.size(); i++) mx = fabs(gx[i]) > mx ? fabs(gx[i]) : mx;
            MFT_CHECK(mx > 0 && mx < 1e3); /* the input's gradient arrived */
        }
        MFT_CHECK(mf_ok(ctx));
        mf_model_free(m);
        mf_ctx_free(ctx);
    }
}
#endif

/* ---------------------------------------------------------------- bad input */
static void expect_error(mf_ctx *ctx, const char *part) {
    const char *e = mf_error(ctx);
    if (!e || !strstr(e, part)) { printf("    expected an error with \"%s\", got \"%s\"\n", part, e ? e : "(none)"); MFT_CHECK(0); }
    mf_clear_error(ctx);
}
static void test_bad_input(void) {
    int32_t ids[16] = {0};
    for (int k = MF_MIXER_FEEDBACK; k <= MF_MIXER_FEEDBACK_KV; k++) {
        mf_model_config cfg = small_config((mf_mixer_kind)k, 0.0f);
        cfg.max_seq = 6;
        mf_ctx *ctx = mf_ctx_new(1);
        mf_ctx_set_device(ctx, MF_DEVICE_CUDA);
        mf_model *m = mf_model_new(ctx, &cfg);
        MFT_CHECK(m != NULL);
        MFT_CHECK(mf_model_forward(m, ids, 1, cfg.max_seq + 1) == NULL); /* longer than the stack */
        expect_error(ctx, "max_seq");
        {
            int shape[3] = {1, cfg.max_seq + 1, cfg.d_model};
            mf_tensor *x = mf_new(ctx, 3, shape);
            MFT_CHECK(mf__fb_run(m, x, 0, 0) == NULL);
            expect_error(ctx, "raise max_seq");
        }
        mf_set_grad(ctx, 0); /* generation must continue where it stopped */
        MFT_CHECK(mf__model_run(m, ids, 1, 2, 0, 1) != NULL);
        mf_reset(ctx);
        MFT_CHECK(mf__model_run(m, ids, 1, 1, 3, 1) == NULL);
        expect_error(ctx, "generation continues after 2 tokens");
        mf_model_free(m);
        mf_ctx_free(ctx);
        ctx = mf_ctx_new(1); /* max_seq beyond the P = 4096 rows of the tables */
        mf_ctx_set_device(ctx, MF_DEVICE_CUDA);
        cfg.max_seq = 4097;
        MFT_CHECK(mf_model_new(ctx, &cfg) == NULL);
        expect_error(ctx, "max_seq <= 4096");
        mf_ctx_free(ctx);
    }
}

int main(void) {
    if (cuda_suite_start("test_cuda_feedback") < 0) return 1;
    MFT_RUN(test_feedback_attention);
    MFT_RUN(test_one_token);
    MFT_RUN(test_generation_steps);
#ifdef MF_CUDA_EMU
    MFT_RUN(test_no_host_sync);
#endif
    MFT_RUN(test_train_feedback);
    MFT_RUN(test_train_feedback_dropout);
    MFT_RUN(test_train_feedback_kv);
    MFT_RUN(test_train_feedback_kv_dropout);
    MFT_RUN(test_bad_input);
#ifdef MF_CUDA_EMU
    MFT_RUN(test_no_leaks);
#endif
    return mft_finish();
}
