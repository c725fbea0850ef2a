/* test_cuda_fastweights.cpp - the CUDA kernels of the fast-weights family ([cu:fastweights] in
 * metaformer_cuda.cuh) against the CPU: DPFP and elu + 1, mf_fast_weights and mf_linear_attention
 * in the recurrent and the chunkwise form, whole fast_weights / linear models (training steps and
 * generation with the O(1) recurrent state on the device).
 *
 *   make test       g++ -std=c++14 with tests/cuda_emu.h: every kernel runs on the CPU emulator,
 *                   in each of its thread orders (in, reversed, shuffled)
 *   make test-cuda  nvcc -x cu for a real GPU (sm_90), without the emulator
 *
 * Each op case builds the same graph on a CPU and a CUDA context from the same random parameters,
 * reduces the output to sum(out * R), back-propagates, and compares the output and the gradients
 * of the op's inputs (max error relative to the tensor's largest value, <= 1e-5). */
#include "cuda_parity.h"
#include <algorithm>
#include <functional>

/* ---------------------------------------------------------------- graphs on both devices */
/* A graph: makes its parameters (random values), returns the output and fills `watch` with the
   tensors whose gradients are compared (the op's inputs: activations or parameters). */
typedef std::function<mf_tensor *(mf_ctx *, std::vector<mf_tensor *> &)> Graph;
/* prec: the device's precision; bwd (>= 0): the backward's, switched after the forward (a forward in
   fp32 and a backward in bf16 check the backward's bf16 kernels alone) */
static OpRun run_graph(const Graph &g, int cuda, mf_precision prec = MF_PREC_FP32, int bwd = -1) {
    OpRun r;
    std::vector<mf_tensor *> watch;
    mf_ctx *ctx = mf_ctx_new(99);
    if (cuda && (mf_ctx_set_device(ctx, MF_DEVICE_CUDA) < 0 || mf_cuda_set_precision(ctx, prec) < 0)) {
        r.err = mf_error(ctx);
        mf_ctx_free(ctx);
        return r;
    }
    mf_tensor *out = g(ctx, watch);
    if (cuda && bwd >= 0) mf_cuda_set_precision(ctx, (mf_precision)bwd);
    return op_run_finish(ctx, out, watch);
}
/* floor: rel_err's (the least scale a tensor is measured against) */
static int compare(const OpRun &a, const OpRun &b, const char *what, double tol, double floor = 1e-3) {
    int ok = 1;
    double e = rel_err(a.out, b.out, floor);
    if (!(e <= tol)) { printf("    %s: output differs, rel err %.3g\n", what, e); ok = 0; }
    for (size_t i = 0; i < b.grads.size(); i++) {
        e = i < a.grads.size() ? rel_err(a.grads[i], b.grads[i], floor) : 1e30;
        if (!(e <= tol)) { printf("    %s: gradient of input %d differs, rel err %.3g\n", what, (int)i, e); ok = 0; }
    }
    return ok;
}
/* the graph on the CPU and on the (emulated) device in every thread order. op_scale: measure every
   tensor against at least the largest value of the op's output and gradients (for gradients that are
   0 but for rounding, which are sums of terms of that size cancelling: see check_fw) */
static void check_graph(const Graph &g, const char *what, int op_scale = 0) {
    OpRun cpu = run_graph(g, 0);
    if (!cpu.err.empty()) { printf("    %s: CPU run failed: %s\n", what, cpu.err.c_str()); MFT_CHECK(0); return; }
    double floor = 1e-3;
    if (op_scale) {
        for (float v : cpu.out) floor = std::max(floor, (double)fabsf(v));
        for (const std::vector<float> &gr : cpu.grads)
            for (float v : gr) floor = std::max(floor, (double)fabsf(v));
    }
    for (int o = 0; o < N_ORDERS; o++) {
        set_order(o);
        OpRun gpu = run_graph(g, 1);
        if (!gpu.err.empty()) { printf("    %s (order %d): CUDA run failed: %s\n", what, o, gpu.err.c_str()); MFT_CHECK(0); continue; }
        MFT_CHECK(compare(gpu, cpu, what, TOL, floor));
    }
    set_order(0);
}
static mf_tensor *param(mf_ctx *ctx, const char *name, int nd, const int *shape, uint64_t seed, float lo, float hi) {
    mf_tensor *t = mf_param(ctx, name, nd, shape);
    if (t) mf_set_data(ctx, t, rand_vec(t->ne, seed, lo, hi).data());
    return t;
}

/* ---------------------------------------------------------------- feature maps */
static void test_dpfp(void) {
    for (int nu = 1; nu <= 3; nu++) {
        char what[32];
        snprintf(what, sizeof what, "dpfp nu %d", nu);
        check_graph([nu](mf_ctx *c, std::vector<mf_tensor *> &w) {
            int sh[3] = {3, 5, 7};
            mf_tensor *x = param(c, "x", 3, sh, 11, -1, 1);
            w.push_back(x);
            return mf_dpfp(c, x, nu, 1e-6f);
        }, what);
    }
    check_graph([](mf_ctx *c, std::vector<mf_tensor *> &w) { /* rows wider than the block, zero rows */
        int sh[2] = {4, 150};
        mf_tensor *x = param(c, "x", 2, sh, 12, -1, 1);
        w.push_back(x);
        return mf_dpfp(c, mf_relu(c, x), 2, 1e-6f); /* relu: x >= 0, a[dk + j] = 0 */
    }, "dpfp wide rows");
}
static void test_elu1(void) {
    check_graph([](mf_ctx *c, std::vector<mf_tensor *> &w) {
        int sh[2] = {5, 33};
        mf_tensor *x = param(c, "x", 2, sh, 13, -3, 3);
        w.push_back(x);
        return mf_elu1(c, x);
    }, "elu1");
}

/* ---------------------------------------------------------------- the recurrences */
/* features: DPFP (nu >= 1: dd = 2 dk nu, the rows sum to 1; linear attention without normaliser) or
   elu + 1 (nu 0: dd = dk; linear attention divides by z . q; scaled by
   1 / dk for the delta rule so beta |k|^2 stays < 2 and the recurrence bounded) */
struct FwShape { int B, T, H, dk, dv, nu; };
static Graph fw_graph(FwShape s, int linear, int chunk) {
    return [s, linear, chunk](mf_ctx *c, std::vector<mf_tensor *> &w) -> mf_tensor * {
        int sx[4] = {s.B, s.T, s.H, s.dk}, sv[4] = {s.B, s.T, s.H, s.dv}, sb[3] = {s.B, s.T, s.H};
        mf_tensor *xq = param(c, "xq", 4, sx, 21, -1, 1), *xk = param(c, "xk", 4, sx, 22, -1, 1);
        mf_tensor *v = param(c, "v", 4, sv, 23, -1, 1), *bl = param(c, "bl", 3, sb, 24, -2, 2), *q, *k, *beta = NULL;
        if (s.nu) { q = mf_dpfp(c, xq, s.nu, 1e-6f); k = mf_dpfp(c, xk, s.nu, 1e-6f); }
        else if (linear) { q = mf_elu1(c, xq); k = mf_elu1(c, xk); }
        else { q = mf_scale(c, mf_elu1(c, xq), 0.5f / s.dk); k = mf_scale(c, mf_elu1(c, xk), 0.5f / s.dk); }
        if (!linear) beta = mf_sigmoid(c, bl);
        w.push_back(q); w.push_back(k); w.push_back(v);
        if (beta) w.push_back(beta);
        w.push_back(xq); w.push_back(xk); /* and through the feature maps */
        return linear ? mf_linear_attention(c, q, k, v, !s.nu, 1e-6f, chunk) : mf_fast_weights(c, q, k, v, beta, chunk);
    };
}
static const FwShape SHAPES[] = {
    {1, 1, 1, 3, 5, 0},   /* T = 1 */
    {2, 5, 3, 7, 5, 0},   /* odd d_dot 7; chunks ragged */
    {1, 37, 3, 4, 4, 2},  /* 2 checkpoint segments, DPFP nu 2 (d_dot 16) */
    {2, 64, 1, 5, 3, 1},  /* two full segments */
    {1, 5, 1, 400, 33, 0}, /* wide state: the column slices shrink to fit shared memory */
    {1, 37, 1, 35, 40, 1}, /* d_dot 70 > the block, 40 (41) value columns: two column slices */
};
static const int N_SHAPES = (int)(sizeof SHAPES / sizeof SHAPES[0]) - MFT_SMALL; /* ASan: not the last */
static void check_fw(int linear) {
    const int chunks[4] = {1, 2, 3, 16};
    for (int i = 0; i < N_SHAPES; i++)
        for (int ci = 0; ci < 4; ci++) {
            FwShape s = SHAPES[i];
            char what[128];
            snprintf(what, sizeof what, "%s chunk %d B %d T %d H %d dk %d dv %d nu %d", linear ? "linear_attention" : "fast_weights",
                     chunks[ci], s.B, s.T, s.H, s.dk, s.dv, s.nu);
            /* normalised linear attention of one token is v up to the 1e-6 of its normaliser: the
               gradients of q, k (and of xq, xk through the features) are that small, the rest
               cancelling terms of the size of v's gradient, whose rounding (a few u of them, in the
               device's order and contraction) is all that is left: measured against that size, not
               their own */
            check_graph(fw_graph(s, linear, chunks[ci]), what, linear && s.T == 1 && !s.nu);
        }
}
static void test_fast_weights_op(void) { check_fw(0); }
static void test_linear_attention_op(void) { check_fw(1); }
/* on the device: the chunkwise kernels against the recurrent one (CPU test's tolerance) */
static void test_recurrent_vs_chunkwise(void) {
    const int chunks[4] = {2, 3, 16, 0};
    for (int linear = 0; linear < 2; linear++)
        for (int i = 2; i < N_SHAPES; i++) {
            OpRun ref = run_graph(fw_graph(SHAPES[i], linear, 1), 1);
            MFT_CHECK(ref.err.empty());
            for (int ci = 0; ci < 4 && ref.err.empty(); ci++) {
                char what[96];
                OpRun r = run_graph(fw_graph(SHAPES[i], linear, chunks[ci]), 1);
                snprintf(what, sizeof what, "device %s chunk %d vs recurrent, shape %d", linear ? "linear" : "fast_weights",
                         chunks[ci], i);
                MFT_CHECK(r.err.empty() && compare(r, ref, what, TOL));
            }
        }
}
/* the chunkwise form on the bf16 tensor cores (MF_PREC_BF16: forward, state pass and per-chunk
   gradients) against the CPU: output and every gradient within 10 u = 10 / 256 (u = 2^-8, bf16's
   unit roundoff) relative to max(max |reference|, 0.1), as the bf16 attention tests (docs/math.md
   §22). Ragged chunks (3 of 5 tokens, 16 of 37, 4 of 20, 100: tiles padded to 16, a 112-token
   tile), d_dot 7, 16, 70 (two feature steps; with 41 value columns a D = G X^T of two steps), 4 to
   71 value columns (three 16-column slices; two value steps of the per-chunk products), both ops
   with elu + 1 and DPFP features, with and without beta. No silent fallback to the fp32 kernels:
   the bf16 error of every case must exceed 20 times the fp32 kernels' on it, and so must the error
   of dQ from a forward in fp32 and a backward in bf16 (dQ = dY S + dP K reads only the forward and
   dY: the per-chunk gradient kernel alone); that run's gradients are held to the same 10 u. */
static void test_chunkwise_bf16(void) {
    static const struct { FwShape s; int chunk; } cases[] = {
        {{2, 5, 3, 7, 5, 0}, 3}, {{1, 37, 3, 4, 4, 2}, 16}, {{1, 37, 1, 35, 40, 1}, 16}, {{1, 100, 1, 2, 3, 1}, 100},
        {{1, 20, 2, 3, 70, 0}, 16},
    };
    const double TOL_BF16 = 10.0 / 256, FLOOR = 0.1;
    double worst_bf16 = 0;
    for (int linear = 0; linear < 2; linear++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            const FwShape &s = cases[i].s;
            Graph g = fw_graph(s, linear, cases[i].chunk);
            OpRun cpu = run_graph(g, 0), fp = run_graph(g, 1), bf = run_graph(g, 1, MF_PREC_BF16);
            OpRun bwd = run_graph(g, 1, MF_PREC_FP32, MF_PREC_BF16); /* forward fp32, backward bf16 */
            char nm[96];
            snprintf(nm, sizeof nm, "%s chunk %d T %d dk %d dv %d nu %d", linear ? "linear" : "fast_weights", cases[i].chunk,
                     s.T, s.dk, s.dv, s.nu);
            if (!cpu.err.empty() || !fp.err.empty() || !bf.err.empty() || !bwd.err.empty()) {
                printf("    %s: a run failed: %s%s%s%s\n", nm, cpu.err.c_str(), fp.err.c_str(), bf.err.c_str(), bwd.err.c_str());
                MFT_CHECK(0);
                continue;
            }
            double case_bf16 = 0, case_fp32 = 0, case_bwd = 0, dq_bwd, dq_fp32;
            for (int t = -1; t < (int)cpu.grads.size(); t++) {
                const std::vector<float> &ref = t < 0 ? cpu.out : cpu.grads[(size_t)t];
                double eb = rel_err(t < 0 ? bf.out : bf.grads[(size_t)t], ref, FLOOR);
                double ef = rel_err(t < 0 ? fp.out : fp.grads[(size_t)t], ref, FLOOR);
                double ew = rel_err(t < 0 ? bwd.out : bwd.grads[(size_t)t], ref, FLOOR);
                if (!(eb <= TOL_BF16) || !(ew <= TOL_BF16)) {
                    printf("    %s: %s %d differs, rel err bf16 %.3g, backward alone in bf16 %.3g\n", nm,
                           t < 0 ? "output" : "gradient", t, eb, ew);
                    MFT_CHECK(0);
                }
                case_bf16 = std::max(case_bf16, eb);
                case_fp32 = std::max(case_fp32, ef);
                case_bwd = std::max(case_bwd, ew);
            }
            dq_bwd = rel_err(bwd.grads[0], cpu.grads[0], FLOOR); /* the watch list starts with q */
            dq_fp32 = rel_err(fp.grads[0], cpu.grads[0], FLOOR);
            for (int o = 1; o < N_ORDERS; o++) { /* the same bits in every thread order: no race on the tiles */
                set_order(o);
                OpRun again = run_graph(g, 1, MF_PREC_BF16);
                MFT_CHECK(again.err.empty() && again.out == bf.out && again.grads == bf.grads);
            }
            set_order(0);
            printf("    %s: bf16 %.3g, fp32 %.3g; backward alone in bf16 %.3g (dQ %.3g, fp32 %.3g)\n", nm, case_bf16,
                   case_fp32, case_bwd, dq_bwd, dq_fp32);
            MFT_CHECK(case_bf16 > 20 * case_fp32 && case_bf16 > 1e-4); /* no case silently in fp32 */
            MFT_CHECK(dq_bwd > 20 * dq_fp32 && dq_bwd > 1e-4);         /* nor the per-chunk gradients */
            worst_bf16 = std::max(worst_bf16, case_bf16);
        }
    printf("    worst relative error in bf16: %.3g (floor %g, allowed %.3g)\n", worst_bf16, FLOOR, TOL_BF16);
}
/* long chunks: the backward's shared memory above 48 KiB (opted in) up to 128 tokens, in bf16 too
   (the per-chunk gradients' 188 KiB at 128 tokens, within 10 u of the CPU); beyond that a clear
   error, no launch */
static void test_chunk_long(void) {
    FwShape s = {1, 100, 1, 2, 3, 1}, s128 = {1, 128, 1, 2, 3, 1};
    check_graph(fw_graph(s, 0, 100), "fast_weights chunk 100 (80 KiB of shared memory)");
    OpRun cpu = run_graph(fw_graph(s128, 0, 128), 0), bf = run_graph(fw_graph(s128, 0, 128), 1, MF_PREC_BF16);
    MFT_CHECK(bf.err.empty() && cpu.grads.size() == bf.grads.size());
    for (size_t t = 0; t < bf.grads.size() && t < cpu.grads.size(); t++)
        MFT_CHECK(rel_err(bf.grads[t], cpu.grads[t], 0.1) <= 10.0 / 256);
    mf_ctx *ctx = mf_ctx_new(1);
    int sh[4] = {1, 200, 1, 2}, sb[3] = {1, 200, 1};
    mf_ctx_set_device(ctx, MF_DEVICE_CUDA);
    mf_tensor *q = param(ctx, "q", 4, sh, 1, 0, 0.3f), *b = param(ctx, "b", 3, sb, 2, 0, 1);
    mf_tensor *y = mf_fast_weights(ctx, q, q, q, b, 200);
    MFT_CHECK(y != NULL);
    mf_backward(ctx, mf_sum(ctx, y));
    MFT_CHECK(!mf_ok(ctx) && strstr(mf_error(ctx), "chunk_size") != NULL);
    mf_ctx_free(ctx);
}
/* bad input on a CUDA context: the CPU's shape errors */
static void test_errors(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    int s4[4] = {1, 2, 3, 4}, s4b[4] = {1, 2, 4, 4}, s3[3] = {1, 2, 3};
    mf_ctx_set_device(ctx, MF_DEVICE_CUDA);
    mf_tensor *q = mf_new(ctx, 4, s4), *qb = mf_new(ctx, 4, s4b), *b = mf_new(ctx, 3, s3);
    MFT_CHECK(mf_fast_weights(ctx, q, qb, q, b, 1) == NULL && strstr(mf_error(ctx), "same shape"));
    mf_clear_error(ctx);
    MFT_CHECK(mf_dpfp(ctx, q, 8, 1e-6f) == NULL && strstr(mf_error(ctx), "[1, 7]"));
    mf_clear_error(ctx);
    MFT_CHECK(mf_linear_attention(ctx, q, q, b, 1, 1e-6f, 1) == NULL && strstr(mf_error(ctx), "4-D"));
    mf_ctx_free(ctx);
}

/* ---------------------------------------------------------------- models */
static void test_train_fast_weights(void) {
    mf_model_config c = small_config(MF_MIXER_FAST_WEIGHTS);
    check_train(c, "fast_weights (automatic: recurrent)");
    c.chunk_size = 3; c.dpfp_nu = 2; /* chunkwise training, ragged chunks; generation through both forms */
    check_train(c, "fast_weights chunk 3, nu 2");
}
/* DPFP nu 2: with nu 1 this tiny model starts with nearly disjoint feature supports, so some
   denominators z . phi(q) are ~eps and the gradient of Wq is ill-conditioned (CPU recurrent vs CPU
   chunkwise already differ by 7.5e-6 there; the device's ~1e-7 differences in the projections grow
   to 4e-5). nu 2's denser features keep it well-conditioned (device vs CPU: 1e-7). */
static void test_train_linear(void) {
    mf_model_config c = small_config(MF_MIXER_LINEAR);
    c.dpfp_nu = 2;
    check_train(c, "linear dpfp nu 2 (recurrent)");
    c.chunk_size = 3;
    check_train(c, "linear dpfp nu 2 chunk 3");
    c.linear_feature = MF_FEATURE_ELU1; c.chunk_size = 4;
    check_train(c, "linear elu1 chunk 4");
}
int main(void) {
    if (cuda_suite_start("test_cuda_fastweights") < 0) return 1;
    MFT_RUN(test_dpfp);
    MFT_RUN(test_elu1);
    MFT_RUN(test_fast_weights_op);
    MFT_RUN(test_linear_attention_op);
    MFT_RUN(test_recurrent_vs_chunkwise);
    MFT_RUN(test_chunkwise_bf16);
    MFT_RUN(test_chunk_long);
    MFT_RUN(test_errors);
    MFT_RUN(test_train_fast_weights);
    MFT_RUN(test_train_linear);
#ifdef MF_CUDA_EMU
    MFT_RUN(test_no_leaks);
#endif
    return mft_finish();
}
