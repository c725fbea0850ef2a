/* test_cuda_xl.cpp - the CUDA side of [mf:xl] against the CPU: the rel_attention kernels (output
 * and all six gradients), Transformer-XL and compressive models trained over consecutive segments
 * with their memories on the device, memory slots / reset / batch errors, and generation.
 *
 *   make test       g++ -std=c++14 with tests/cuda_emu.h: every kernel runs on the CPU emulator,
 *                   in each of its thread orders (in, reversed, shuffled)
 *   make test-cuda  nvcc -x cu for a real GPU (sm_90), without the emulator */
#include "cuda_parity.h"

/* ---------------------------------------------------------------- the op */
struct RelCase { int B, H, Tq, M, dk, dv, P; float drop; }; /* drop: attention dropout (0 when left out) */
static const char *REL_NAMES[6] = {"q", "k", "v", "u", "R", "S"};

/* q, k, v, u, R, S as parameters (every table row random: the invisible ones must stay without
   gradient), loss = sum(out * W), W fixed random; cuda: 0 CPU, 1 the fp32 kernels, 3 the bf16 ones */
static OpRun rel_run(const RelCase &c, int cuda) {
    OpRun r;
    mf_ctx *ctx = mf_ctx_new(3);
    int Tk = c.Tq + c.M;
    int sh[6][4] = {{c.B, c.H, c.Tq, c.dk}, {c.B, c.H, Tk, c.dk}, {c.B, c.H, Tk, c.dv}, {c.H, c.dk, 0, 0},
                    {2 * c.P, c.H, c.dk, 0}, {2 * c.P, c.H, 0, 0}};
    int nd[6] = {4, 4, 4, 2, 3, 2};
    float amp[6] = {1.5f, 1.5f, 1.0f, 0.5f, 0.7f, 1.0f};
    mf_tensor *in[6];
    if (cuda && mf_ctx_set_device(ctx, MF_DEVICE_CUDA) < 0) { r.err = mf_error(ctx); mf_ctx_free(ctx); return r; }
    if (cuda == 3 && mf_cuda_set_precision(ctx, MF_PREC_BF16) < 0) { r.err = mf_error(ctx); mf_ctx_free(ctx); return r; }
    for (int i = 0; i < 6; i++) {
        in[i] = mf_param(ctx, REL_NAMES[i], nd[i], sh[i]);
        if (in[i]) mf_set_data(ctx, in[i], rand_vec(in[i]->ne, 100 + (uint64_t)i, -amp[i], amp[i]).data());
    }
    return op_run_finish(ctx, mf_rel_attention(ctx, in[0], in[1], in[2], in[3], in[4], in[5], 1.0f / sqrtf((float)c.dk), c.drop),
                         std::vector<mf_tensor *>(in, in + 6));
}
/* table rows other than the visible P - Tk + 1 .. P must have exactly zero gradient */
static int rel_invisible_zero(const RelCase &c, const std::vector<float> &gR, const std::vector<float> &gS) {
    int Tk = c.Tq + c.M, bad = 0;
    for (int row = 0; row < 2 * c.P; row++) {
        if (row >= c.P - Tk + 1 && row <= c.P) continue;
        for (int h = 0; h < c.H; h++) {
            bad += gS[(size_t)row * c.H + h] != 0.0f;
            for (int e = 0; e < c.dk; e++) bad += gR[((size_t)row * c.H + h) * c.dk + e] != 0.0f;
        }
    }
    return bad;
}
static void rel_check(const RelCase &c) {
    OpRun cpu = rel_run(c, 0);
    char nm[96];
    snprintf(nm, sizeof nm, "B%d H%d Tq%d M%d dk%d dv%d P%d", c.B, c.H, c.Tq, c.M, c.dk, c.dv, c.P);
    if (!cpu.err.empty()) { printf("    %s: CPU run failed: %s\n", nm, cpu.err.c_str()); MFT_CHECK(0); return; }
    MFT_CHECK(rel_invisible_zero(c, cpu.grads[4], cpu.grads[5]) == 0);
    for (int o = 0; o < N_ORDERS; o++) {
        set_order(o);
        OpRun gpu = rel_run(c, 1);
        if (!gpu.err.empty()) { printf("    %s (order %d): CUDA run failed: %s\n", nm, o, gpu.err.c_str()); MFT_CHECK(0); continue; }
        double e = rel_err(gpu.out, cpu.out);
        if (!(e <= TOL)) { printf("    %s (order %d): output differs, rel err %.3g\n", nm, o, e); MFT_CHECK(0); }
        for (int i = 0; i < 6; i++) {
            e = rel_err(gpu.grads[(size_t)i], cpu.grads[(size_t)i]);
            if (!(e <= TOL)) { printf("    %s (order %d): d%s differs, rel err %.3g\n", nm, o, REL_NAMES[i], e); MFT_CHECK(0); }
        }
        int z = rel_invisible_zero(c, gpu.grads[4], gpu.grads[5]);
        if (z) { printf("    %s (order %d): %d invisible table entries got gradient\n", nm, o, z); MFT_CHECK(0); }
        if (o == 0) { /* deterministic: a second run is bitwise the same */
            OpRun again = rel_run(c, 1);
            MFT_CHECK(again.out == gpu.out && again.grads == gpu.grads);
        }
    }
    set_order(0);
}
static void test_rel_attention_op(void) {
    static const RelCase cases[] = {
        {1, 1, 1, 0, 3, 3, 4, 0.0f},    /* one query, no memory */
        {1, 1, 1, 40, 16, 16, 64, 0.0f}, /* one query over 40 memory keys (a generation step) */
        {3, 2, 7, 5, 5, 7, 12, 0.0f},   /* Tk = P: the table edge */
        {3, 2, 7, 0, 1, 2, 7, 0.0f},    /* Tq = Tk = P, head size 1 */
        {1, 2, 33, 0, 7, 5, 40, 0.0f},  /* a ragged second query / key tile */
        {3, 1, 33, 40, 4, 4, 80, 0.0f}, /* memory longer than a tile */
        {1, 3, 70, 5, 5, 3, 80, 0.0f},
        {MFT_SMALL ? 1 : 3, 2, 70, 40, 3, 6, 110, 0.0f}, /* Tk = 110 = P, 4 key tiles */
        {1, 1, 33, 40, 64, 64, 80, 0.0f}, /* head size 64: every kernel over 48 KiB of shared memory */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) rel_check(cases[i]);
}
/* the bf16 tensor-core kernels (MF_PREC_BF16) against the CPU. Tolerance as tests/test_cuda_attention.cpp:
   10 u = 10 / 256 (u = 2^-8, bf16's unit roundoff) relative to max(max |reference|, 0.1): q + u, q,
   k, v, the table rows R, dO, and P, dS as product operands are rounded to bf16; the scores, softmax,
   row statistics and accumulators stay fp32 (docs/math.md §22). The bf16 error must also exceed 20
   times the fp32 kernels' on the same cases: a silent fallback to the fp32 kernels fails. */
static void test_rel_attention_bf16(void) {
    static const RelCase cases[] = {
        {1, 1, 1, 0, 3, 3, 4, 0.0f},    /* one query, no memory */
        {2, 2, 7, 5, 5, 7, 12, 0.0f},   /* Tk = P: the table edge, ragged head sizes */
        {1, 2, 33, 0, 7, 5, 40, 0.0f},  /* a ragged second query / key tile */
        {3, 1, 33, 40, 4, 4, 80, 0.0f}, /* memory longer than a tile */
        {1, 2, 40, 30, 8, 6, 80, 0.3f}, /* attention dropout over memory and current keys */
        {1, 1, 33, 40, 64, 64, 80, 0.0f}, /* head size 64 */
    };
    const double TOL_BF16 = 10.0 / 256, FLOOR = 0.1;
    double worst_bf16 = 0, worst_fp32 = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const RelCase &c = cases[i];
        OpRun cpu = rel_run(c, 0), fp = rel_run(c, 1), bf = rel_run(c, 3);
        char nm[96];
        snprintf(nm, sizeof nm, "B%d H%d Tq%d M%d dk%d dv%d P%d drop %g", c.B, c.H, c.Tq, c.M, c.dk, c.dv, c.P, c.drop);
        if (!cpu.err.empty() || !fp.err.empty() || !bf.err.empty()) {
            printf("    %s: a run failed: %s%s%s\n", nm, cpu.err.c_str(), fp.err.c_str(), bf.err.c_str());
            MFT_CHECK(0);
            continue;
        }
        for (int t = -1; t < 6; t++) {
            const std::vector<float> &ref = t < 0 ? cpu.out : cpu.grads[(size_t)t];
            double eb = rel_err(t < 0 ? bf.out : bf.grads[(size_t)t], ref, FLOOR);
            double ef = rel_err(t < 0 ? fp.out : fp.grads[(size_t)t], ref, FLOOR);
            if (!(eb <= TOL_BF16)) { printf("    %s (bf16): %s%s differs, rel err %.3g\n", nm, t < 0 ? "output" : "d", t < 0 ? "" : REL_NAMES[t], eb); MFT_CHECK(0); }
            if (eb > worst_bf16) worst_bf16 = eb;
            if (ef > worst_fp32) worst_fp32 = ef;
        }
        MFT_CHECK(rel_invisible_zero(c, bf.grads[4], bf.grads[5]) == 0);
        if (i == 0) { /* deterministic */
            OpRun again = rel_run(c, 3);
            MFT_CHECK(again.out == bf.out && again.grads == bf.grads);
        }
    }
    printf("    worst relative error: bf16 %.3g, fp32 %.3g (floor %g)\n", worst_bf16, worst_fp32, FLOOR);
    MFT_CHECK(worst_bf16 > 20 * worst_fp32 && worst_bf16 > 1e-4);
}
/* heads too large for the kernels' shared memory: a clear error, nothing launched */
static void test_rel_attention_too_big(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    int sq[4] = {1, 1, 2, 2048}, su[2] = {1, 2048}, sr[3] = {4, 1, 2048}, ss[2] = {4, 1};
    mf_ctx_set_device(ctx, MF_DEVICE_CUDA);
    mf_tensor *q = mf_new(ctx, 4, sq), *u = mf_new(ctx, 2, su), *R = mf_new(ctx, 3, sr), *S = mf_new(ctx, 2, ss);
    MFT_CHECK(mf_rel_attention(ctx, q, q, q, u, R, S, 1.0f, 0.0f) == NULL);
    MFT_CHECK(strstr(mf_error(ctx), "rel_attention") && strstr(mf_error(ctx), "shared memory"));
    mf_ctx_free(ctx);
}

/* ---------------------------------------------------------------- models */
enum { XV = 13 };
static mf_model_config xl_config(int mem_len, int compressive) {
    mf_model_config c = mf_model_config_default();
    c.vocab = XV; c.d_model = 8; c.n_heads = 2; c.n_layers = 2; c.d_ff = 16; c.max_seq = 8;
    c.mixer = MF_MIXER_RELATIVE; c.pos = MF_POS_NONE; c.ffn_act = MF_ACT_GELU; c.dropout = 0.1f;
    c.mem_len = mem_len; c.compressive = compressive; c.c_mem_len = 4; c.compression_rate = 2;
    return c;
}
/* u, R, S start at zero (docs/math.md §5.1): give them values near row P so that they matter */
static void xl_tables(mf_ctx *ctx, mf_model *m) {
    const mf_model_config *c = mf_model_get_config(m);
    int H = c->n_heads, dk = c->d_model / H;
    for (int l = 0; l < c->n_layers; l++) {
        char nm[64];
        mf_tensor *t[3];
        const char *which[3] = {"u", "r", "s"};
        for (int i = 0; i < 3; i++) {
            snprintf(nm, sizeof nm, "layers.%d.attn.%s", l, which[i]);
            t[i] = mf_param_find(ctx, nm);
            if (!t[i]) { MFT_CHECK(0); return; }
        }
        mf_set_data(ctx, t[0], rand_vec(t[0]->ne, 10 + (uint64_t)l, -0.5f, 0.5f).data());
        std::vector<float> R((size_t)t[1]->ne, 0.0f), S((size_t)t[2]->ne, 0.0f);
        std::vector<float> rr = rand_vec((int64_t)32 * H * dk, 20 + (uint64_t)l, -0.5f, 0.5f), sr = rand_vec(32 * H, 30 + (uint64_t)l);
        memcpy(R.data() + (size_t)(MF_XL_P - 24) * H * dk, rr.data(), rr.size() * sizeof(float));
        memcpy(S.data() + (size_t)(MF_XL_P - 24) * H, sr.data(), sr.size() * sizeof(float));
        mf_set_data(ctx, t[1], R.data());
        mf_set_data(ctx, t[2], S.data());
    }
}
static void xl_segment(int s, int B, int T, int32_t *ids, int32_t *tg) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            ids[b * T + t] = (7 * s + 3 * b + 5 * t + 1 + (s * t) % 3) % XV;
            tg[b * T + t] = (t + s) % 5 == 4 ? -1 : (11 * s + 2 * b + 3 * t + 4) % XV;
        }
}

/* training over consecutive segments (memories carried), a validation forward on slot 1 every
   other step; then generation */
struct XlRun { std::vector<float> losses, aux, norms, val, params; std::vector<int32_t> sample; std::string err; };
static XlRun xl_train(mf_model_config cfg, int cuda, int steps) {
    XlRun r;
    mf_ctx *ctx = mf_ctx_new(11);
    mf_model *m = NULL;
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 3e-3f);
    const int B = 2, T = 5;
    int32_t ids[B * T], tg[B * T];
    if (cuda && mf_ctx_set_device(ctx, MF_DEVICE_CUDA) < 0) { r.err = mf_error(ctx); mf_ctx_free(ctx); return r; }
    m = mf_model_new(ctx, &cfg);
    if (m) xl_tables(ctx, m);
    for (int s = 0; s < steps && m && mf_ok(ctx); s++) {
        xl_segment(s, B, T, ids, tg);
        mf_tensor *loss = mf_model_loss(m, ids, tg, B, T);
        r.aux.push_back(mf_model_aux_loss(m));
        train_step(ctx, loss, &opt, r.norms, r.losses);
        if (s % 2 == 1) { /* validation on its own memories */
            int grad = mf_set_grad(ctx, 0), training = mf_set_training(ctx, 0);
            mf_model_memory_slot(m, 1);
            xl_segment(100 + s, B, T, ids, tg);
            r.val.push_back(mf_item(ctx, mf_model_loss(m, ids, tg, B, T)));
            r.val.push_back(mf_model_aux_loss(m));
            mf_model_memory_slot(m, 0);
            mf_set_grad(ctx, grad);
            mf_set_training(ctx, training);
            mf_reset(ctx);
        }
    }
    if (m && mf_ok(ctx)) {
        r.params = params_host(ctx);
        int32_t prompt[3] = {1, 2, 3};
        r.sample.resize(12);
        mf_model_generate(m, prompt, 3, 12, NULL, r.sample.data());
    }
    if (!mf_ok(ctx)) r.err = mf_error(ctx);
    mf_model_free(m);
    mf_ctx_free(ctx);
    return r;
}
static void near_all(const std::vector<float> &g, const std::vector<float> &c, const char *what, const char *which) {
    MFT_CHECK(g.size() == c.size());
    for (size_t s = 0; s < g.size() && s < c.size(); s++) {
        double sc = fabs((double)c[s]) > 1.0 ? fabs((double)c[s]) : 1.0;
        if (!(fabs((double)g[s] - c[s]) <= 1e-5 * sc)) {
            printf("    %s: %s[%zu] = %.9g on CUDA, %.9g on the CPU\n", what, which, s, g[s], c[s]);
            MFT_CHECK(0);
        }
    }
}
static void xl_train_check(mf_model_config cfg, const char *what, int steps, int expect_aux) {
    XlRun cpu = xl_train(cfg, 0, steps);
    if (!cpu.err.empty()) { printf("    %s: CPU run failed: %s\n", what, cpu.err.c_str()); MFT_CHECK(0); return; }
    double aux = 0;
    for (size_t i = 0; i < cpu.aux.size(); i++) aux += cpu.aux[i];
    MFT_CHECK((aux > 0) == (expect_aux != 0)); /* the compressive runs do compress */
    /* the R, S tables (2 x 8192 rows a layer) make every optimizer step a big emulated launch:
       the in and shuffled orders only (the shuffled one alone under ASan) */
    for (int o = MFT_SMALL ? N_ORDERS - 1 : 0; o < N_ORDERS; o += 2) {
        set_order(o);
        XlRun gpu = xl_train(cfg, 1, steps);
        if (!gpu.err.empty()) { printf("    %s: CUDA run failed: %s\n", what, gpu.err.c_str()); MFT_CHECK(0); continue; }
        near_all(gpu.losses, cpu.losses, what, "loss");
        near_all(gpu.aux, cpu.aux, what, "AR loss");
        near_all(gpu.norms, cpu.norms, what, "grad norm");
        near_all(gpu.val, cpu.val, what, "validation loss / AR");
        double e = rel_err(gpu.params, cpu.params);
        if (!(e <= 1e-5)) { printf("    %s: parameters after %d steps differ, rel err %.3g\n", what, steps, e); MFT_CHECK(0); }
        MFT_CHECK(gpu.sample == cpu.sample);
    }
    set_order(0);
}
static void test_train_relative_no_memory(void) { xl_train_check(xl_config(0, 0), "relative, mem_len 0", 3, 0); }
static void test_train_xl(void) { xl_train_check(xl_config(6, 0), "xl mem_len 6", 4, 0); }
/* segments of 5, mem_len 6, rate 2, c_mem_len 4: step 1 compresses 4 rows into 2, step 2 six into
   three (c_mem trimmed from 5 to 4), step 3 four into two */
static void test_train_compressive(void) { xl_train_check(xl_config(6, 1), "compressive", 4, 1); }

/* the memory API on the device, step by step against the CPU: segments continue, slots are
   independent, reset, batch-size change refused while memories are held */
struct MemRun { std::vector<std::vector<float> > outs; std::vector<int> rets; std::vector<std::string> errs; };
static MemRun mem_script(mf_model_config cfg, int cuda) {
    MemRun r;
    mf_ctx *ctx = mf_ctx_new(5);
    int32_t ids[3 * 5], tg[3 * 5];
    if (cuda) mf_ctx_set_device(ctx, MF_DEVICE_CUDA);
    mf_model *m = mf_model_new(ctx, &cfg);
    if (!m) { r.errs.push_back(mf_error(ctx)); mf_ctx_free(ctx); return r; }
    xl_tables(ctx, m);
    mf_set_grad(ctx, 0);
    mf_set_training(ctx, 0);
    for (int step = 0; step < 9; step++) {
        int B = step >= 6 ? 1 : 3, T = step % 3 + 3; /* 6: refused (memories of 3 rows held), 7: after a reset */
        if (step == 3) r.rets.push_back(mf_model_memory_slot(m, 1));
        if (step == 5) r.rets.push_back(mf_model_memory_slot(m, 0));
        if (step == 7) mf_model_reset_memory(m);
        xl_segment(step, B, T, ids, tg);
        mf_tensor *lo = mf_model_forward(m, ids, B, T);
        r.outs.push_back(lo ? host_of(ctx, lo, 0) : std::vector<float>());
        r.rets.push_back(mf_model_aux_loss(m) > 0);
        r.errs.push_back(mf_ok(ctx) ? "" : strstr(mf_error(ctx), "mf_model_reset_memory") ? "batch" : mf_error(ctx));
        mf_clear_error(ctx);
        mf_reset(ctx);
    }
    r.rets.push_back(mf_model_memory_slot(m, 2));
    mf_model_free(m);
    mf_ctx_free(ctx);
    return r;
}
static void mem_check(mf_model_config cfg) {
    MemRun cpu = mem_script(cfg, 0);
    MFT_CHECK(cpu.errs.size() == 9 && cpu.errs[6] == "batch" && cpu.errs[7] == "" && cpu.errs[8] == "");
    for (int o = 0; o < N_ORDERS; o++) {
        set_order(o);
        MemRun gpu = mem_script(cfg, 1);
        MFT_CHECK(gpu.errs == cpu.errs && gpu.rets == cpu.rets && gpu.outs.size() == cpu.outs.size());
        for (size_t i = 0; i < gpu.outs.size() && i < cpu.outs.size(); i++) {
            double e = rel_err(gpu.outs[i], cpu.outs[i]);
            if (!(e <= TOL)) { printf("    memory script step %zu (order %d): logits differ, rel err %.3g\n", i, o, e); MFT_CHECK(0); }
        }
    }
    set_order(0);
}
static void test_memory_slots(void) {
    mem_check(xl_config(6, 1));
    mem_check(xl_config(6, 0));
    /* mem_len = compression_rate - 1: a step can compress every memory and keep none (then the
       next segment sees c_mem only) */
    mf_model_config edge = xl_config(1, 1);
    mem_check(edge);
}

/* generation: greedy and sampled, with memories, compressive, and mem_len 0 past max_seq */
static std::vector<int32_t> gen_run(mf_model_config cfg, int cuda, const mf_sampler *s, std::string *err) {
    mf_ctx *ctx = mf_ctx_new(9);
    std::vector<int32_t> out(20);
    const int32_t prompt[5] = {3, 1, 4, 1, 5};
    if (cuda) mf_ctx_set_device(ctx, MF_DEVICE_CUDA);
    mf_model *m = mf_model_new(ctx, &cfg);
    if (m) {
        xl_tables(ctx, m);
        mf_model_generate(m, prompt, 5, 20, s, out.data());
    }
    if (!mf_ok(ctx)) *err = mf_error(ctx);
    mf_model_free(m);
    mf_ctx_free(ctx);
    return out;
}
static void test_generate(void) {
    mf_sampler greedy = {0.0f, 0, 1}, hot = {0.9f, 5, 42};
    mf_model_config cfgs[3] = {xl_config(3, 0), xl_config(4, 1), xl_config(0, 0)};
    const char *names[3] = {"xl mem_len 3", "compressive", "relative mem_len 0 (past max_seq)"};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 2; k++) {
            std::string ce, ge;
            std::vector<int32_t> c = gen_run(cfgs[i], 0, k ? &hot : &greedy, &ce);
            for (int o = 0; o < N_ORDERS; o += 2) {
                set_order(o);
                std::vector<int32_t> g = gen_run(cfgs[i], 1, k ? &hot : &greedy, &ge);
                if (!ce.empty() || !ge.empty()) printf("    %s: %s %s\n", names[i], ce.c_str(), ge.c_str());
                MFT_CHECK(ce.empty() && ge.empty());
                if (g != c) { printf("    %s (%s, order %d): generation differs from the CPU\n", names[i], k ? "sampled" : "greedy", o); MFT_CHECK(0); }
            }
        }
    set_order(0);
}

/* the config errors other than the device stay */
static void test_config_errors(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    mf_ctx_set_device(ctx, MF_DEVICE_CUDA);
    mf_model_config c = xl_config(0, 1);
    MFT_CHECK(mf_model_new(ctx, &c) == NULL && strstr(mf_error(ctx), "mem_len 0"));
    mf_clear_error(ctx);
    c = xl_config(6, 0); c.mem_len = -1;
    MFT_CHECK(mf_model_new(ctx, &c) == NULL && strstr(mf_error(ctx), "mem_len -1"));
    mf_clear_error(ctx);
    c = xl_config(6, 0); c.max_seq = MF_XL_P;
    MFT_CHECK(mf_model_new(ctx, &c) == NULL && strstr(mf_error(ctx), "relative positions"));
    mf_ctx_free(ctx);
}
int main(void) {
    if (cuda_suite_start("test_cuda_xl") < 0) return 1;
    MFT_RUN(test_rel_attention_op);
    MFT_RUN(test_rel_attention_bf16);
    MFT_RUN(test_rel_attention_too_big);
    MFT_RUN(test_train_relative_no_memory);
    MFT_RUN(test_train_xl);
    MFT_RUN(test_train_compressive);
    MFT_RUN(test_memory_slots);
    MFT_RUN(test_generate);
    MFT_RUN(test_config_errors);
#ifdef MF_CUDA_EMU
    MFT_RUN(test_no_leaks);
#endif
    return mft_finish();
}
