/* test_cuda_bf16.cpp - bf16 mixed precision (mf_cuda_set_precision(ctx, MF_PREC_BF16)) against the
 * CPU's fp32: the precision API, the emulator's bf16 rounding, the GEMM path (bf16 operands, fp32
 * accumulation), the bf16 weight copy following the parameters, every op example of
 * tests/op_examples.h, a hundred training steps of each family, and a bf16 checkpoint resumed on
 * the CPU and back.
 *
 * The tolerance (docs/math.md, "Mixed precision"). bf16 keeps 8 significant bits: rounding to
 * nearest changes a value by at most u = 2^-8 of itself, and a rounding error is close to uniform on
 * [-u, u] (standard deviation u / sqrt(3)). A product of two rounded inputs carries both errors
 * (standard deviation u sqrt(2/3) < 2^-8 relative), and a dot product of length K adds K such
 * independent errors: its error is about sqrt(K) 2^-8 |a_i||b_i| (a typical term's size), at most
 * 2u sum |a_i b_i| (every error of the same sign). Relative to the largest value of an output whose
 * terms do not cancel (what rel_err measures), that is about 2^-8 for one product; a value that went
 * through a chain of c products (a gradient through the layers of an op) collects about c of them.
 * The tests allow BF16_TOL = 2^-5 (8 times one product's error; a wrong bf16 path - a stale or
 * unrounded weight, a swapped operand - is off by O(1)), and they check that ops without a product
 * stay at the fp32 tolerance. */
#include "cuda_parity.h"
#include "op_examples.h"

#include <math.h>

static const double BF16_TOL = 1.0 / 32; /* 8 x 2^-8: see the top comment */

/* round to bf16 (nearest, ties to even) on the host, written from the format's definition */
static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return x;
    uint32_t lo = u & 0xffffu, hi = u & 0xffff0000u;
    if (lo > 0x8000u || (lo == 0x8000u && (hi & 0x10000u))) hi += 0x10000u;
    memcpy(&x, &hi, 4);
    return x;
}

/* ------------------------------------------------------------------------------ the API */
static void test_precision_api(void) {
    mf_ctx *cpu = mf_ctx_new(1);
    MFT_CHECK(mf_cuda_precision(cpu) == MF_PREC_FP32);
    MFT_CHECK(mf_cuda_set_precision(cpu, MF_PREC_FP32) == 0 && mf_ok(cpu));
    MFT_CHECK(mf_cuda_set_tf32(cpu, 1) == -1 && mf_ok(cpu)); /* the shorthand: refused, no error */
    /* the CPU's own: tf32 refused, bf16 on the CPU's bf16 kernel (tests/test_bf16.c) */
    MFT_CHECK(mf_cuda_set_precision(cpu, MF_PREC_TF32) == -1);
    MFT_CHECK(strstr(mf_error(cpu), "tf32 is a format of NVIDIA's tensor cores") && strstr(mf_error(cpu), "MF_DEVICE_CUDA"));
    mf_ctx_free(cpu);
    MFT_CHECK(mf_cuda_set_precision(NULL, MF_PREC_BF16) == -1 && mf_cuda_precision(NULL) == MF_PREC_FP32);

    mf_ctx *ctx = mf_ctx_new(1);
    MFT_CHECK(mf_ctx_set_device(ctx, MF_DEVICE_CUDA) == 0);
    MFT_CHECK(mf_cuda_precision(ctx) == MF_PREC_FP32);
    MFT_CHECK(mf_cuda_set_precision(ctx, MF_PREC_BF16) == 0 && mf_cuda_precision(ctx) == MF_PREC_BF16);
    MFT_CHECK(mf_cuda_set_tf32(ctx, 1) == 0 && mf_cuda_precision(ctx) == MF_PREC_TF32);
    MFT_CHECK(mf_cuda_set_tf32(ctx, 0) == 0 && mf_cuda_precision(ctx) == MF_PREC_FP32);
    MFT_CHECK(mf_cuda_set_precision(ctx, (mf_precision)7) == -1 && strstr(mf_error(ctx), "unknown precision 7"));
    mf_ctx_free(ctx);

    for (int p = 0; p < 3; p++) MFT_CHECK(mf_precision_from_name(mf_precision_name((mf_precision)p)) == p);
    MFT_CHECK(strcmp(mf_precision_name(MF_PREC_BF16), "bf16") == 0 && strcmp(mf_precision_name((mf_precision)9), "unknown") == 0);
    MFT_CHECK(mf_precision_from_name("fp16") == -1 && mf_precision_from_name(NULL) == -1);
}

#ifdef MF_CUDA_EMU
/* the emulator's conversions: nearest, ties to even, exact widening, NaN and overflow */
static void test_emu_bf16_rounding(void) {
    const float tie_down = 1.0f + 1.0f / 256, tie_up = 1.0f + 3.0f / 256, above = 1.0f + 1.0f / 256 + 1.0f / 4096;
    MFT_CHECK(__bfloat162float(__float2bfloat16(tie_down)) == 1.0f);             /* tie: to the even 1.0 */
    MFT_CHECK(__bfloat162float(__float2bfloat16(tie_up)) == 1.0f + 4.0f / 256);  /* tie: up to even */
    MFT_CHECK(__bfloat162float(__float2bfloat16(above)) == 1.0f + 2.0f / 256);   /* past the tie: up */
    MFT_CHECK(__bfloat162float(__float2bfloat16(-3.0f)) == -3.0f);
    MFT_CHECK(isnan(__bfloat162float(__float2bfloat16(NAN))));
    MFT_CHECK(isinf(__bfloat162float(__float2bfloat16(INFINITY))));
    MFT_CHECK(isinf(__bfloat162float(__float2bfloat16(3.4e38f)))); /* past bf16's largest finite value */
    std::vector<float> v = rand_vec(1000, 11, -100.0f, 100.0f);
    int bad = 0;
    for (size_t i = 0; i < v.size(); i++) {
        float r = __bfloat162float(__float2bfloat16(v[i]));
        bad += r != bf16_round(v[i]) || fabsf(r - v[i]) > fabsf(v[i]) / 256;
    }
    MFT_CHECK(bad == 0);
}
#endif

/* ------------------------------------------------------------------------------ the GEMM path */
/* a product in bf16 is the fp32 product of the inputs rounded to bf16 (fp32 accumulation); the
   weight (a parameter: the bf16 copy) and the activation (converted per product) both rounded; the
   output, an activation the backward keeps, is stored in bf16: that product rounded once */
static void test_gemm_is_rounded_inputs(void) {
    const int M = 5, K = 37, N = 6;
    int sa[2] = {M, K}, sw[2] = {N, K};
    std::vector<float> a = rand_vec(M * K, 1), w = rand_vec(N * K, 2), ar(a), wr(w);
    for (size_t i = 0; i < ar.size(); i++) ar[i] = bf16_round(a[i]);
    for (size_t i = 0; i < wr.size(); i++) wr[i] = bf16_round(w[i]);
    mf_ctx *cpu = mf_ctx_new(1);
    std::vector<float> ref = host_of(cpu, mf_linear(cpu, mf_from(cpu, 2, sa, ar.data()), mf_from(cpu, 2, sw, wr.data()), NULL), 0);
    std::vector<float> exact = host_of(cpu, mf_linear(cpu, mf_from(cpu, 2, sa, a.data()), mf_from(cpu, 2, sw, w.data()), NULL), 0);
    mf_ctx_free(cpu);
    mf_ctx *ctx = mf_ctx_new(1);
    MFT_CHECK(mf_ctx_set_device(ctx, MF_DEVICE_CUDA) == 0 && mf_cuda_set_precision(ctx, MF_PREC_BF16) == 0);
    mf_tensor *W = mf_param(ctx, "w", 2, sw);
    mf_set_data(ctx, W, w.data());
    mf_tensor *y = mf_linear(ctx, mf_from(ctx, 2, sa, a.data()), W, NULL);
    std::vector<float> got = host_of(ctx, y, 0);
    MFT_CHECK(mf_ok(ctx) && y->bf16);
    /* got is the device's fp32 sum of the rounded inputs' products, in cuBLAS's order, stored in bf16:
       a bf16 value within half its ulp (BF16_U) of a sum within fp32_sum_bound of the CPU's (ref, the
       same products in the CPU's order). The same bound taken by the product of unrounded inputs
       (exact, rounded to bf16: the bug of a path that skips the conversion) fails. */
    int over = 0, wrong_over = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double mag = 0;
            for (int k = 0; k < K; k++) mag += fabs((double)ar[(size_t)(i * K + k)] * wr[(size_t)(j * K + k)]);
            size_t o = (size_t)(i * N + j);
            double b = BF16_U * (fabs(ref[o]) + fp32_sum_bound(K, mag)) + fp32_sum_bound(K, mag);
            over += bf16_round(got[o]) != got[o] || !(fabs((double)got[o] - ref[o]) <= b);
            wrong_over += !(fabs((double)bf16_round(exact[o]) - ref[o]) <= b);
        }
    MFT_CHECK(over == 0);
    MFT_CHECK(wrong_over > 0);
    double e = rel_err(got, exact);
    MFT_CHECK(e > 1e-5 && e <= BF16_TOL); /* rounded, within the bound */
    printf("    linear %dx%dx%d in bf16: rel err %.2e against fp32 (one product: ~2^-8 = %.2e)\n", M, K, N, e, 1.0 / 256);
    mf_ctx_free(ctx);
}

/* a float operand too large to convert at once (the gradient of a wide activation) is multiplied by
   slices of its rows: dX = dY W by slices of rows (the same values), dW = dY^T X by slices of the
   sum (the same up to fp32 accumulation order) */
static void test_sliced_products(void) {
    const int R = 40, IN = 24, OUT = 30;
    int sx[2] = {R, IN}, sw[2] = {OUT, IN};
    std::vector<float> grads[2][2];
    for (int sliced = 0; sliced <= 1; sliced++) {
        mf_ctx *ctx = mf_ctx_new(1);
        MFT_CHECK(mf_ctx_set_device(ctx, MF_DEVICE_CUDA) == 0 && mf_cuda_set_precision(ctx, MF_PREC_BF16) == 0);
        if (sliced) MF__CU(ctx)->bf16_slice = 100; /* dY [40, 30] in slices of 3 rows */
        mf_tensor *x = mf_param(ctx, "x", 2, sx), *w = mf_param(ctx, "w", 2, sw);
        mf_set_data(ctx, x, rand_vec(R * IN, 3).data());
        mf_set_data(ctx, w, rand_vec(OUT * IN, 4).data());
        int sr[2] = {R, OUT};
        mf_tensor *r = mf_from(ctx, 2, sr, rand_vec(R * OUT, 5).data());
        MFT_CHECK(mf_backward(ctx, mf_sum(ctx, mf_mul(ctx, mf_linear(ctx, x, w, NULL), r))) == 0);
        grads[sliced][0] = host_of(ctx, x, 1);
        grads[sliced][1] = host_of(ctx, w, 1);
        MFT_CHECK(mf_ok(ctx));
        mf_ctx_free(ctx);
    }
    /* Both are fp32 sums of the same bf16-rounded products in two orders (slices of 3 rows are
       other shapes, which cuBLAS may accumulate otherwise; dW's 14 slices add partial sums): within
       fp32_sum_bound of each other per element. dX_ik = sum_j dY_ij W_jk (K = OUT), dW_jk = sum_i
       dY_ij X_ik (K = R); dY = r. The magnitudes from the unrounded values, widened by the bf16
       rounding of each factor. A dropped slice (the bug this guards) errs by a whole product. */
    std::vector<float> xv = rand_vec(R * IN, 3), wv = rand_vec(OUT * IN, 4), rv = rand_vec(R * OUT, 5);
    const double widen = (1 + BF16_U) * (1 + BF16_U);
    int over = 0, dropped_over = 0;
    double worst = 0;
    for (int i = 0; i < R; i++)
        for (int k = 0; k < IN; k++) {
            double mag = 0, last; /* last: one term of the sum, j = OUT - 1 */
            for (int j = 0; j < OUT; j++) mag += fabs((double)rv[(size_t)(i * OUT + j)] * wv[(size_t)(j * IN + k)]);
            last = (double)bf16_round(rv[(size_t)(i * OUT + OUT - 1)]) * bf16_round(wv[(size_t)((OUT - 1) * IN + k)]);
            double b = fp32_sum_bound(OUT, mag * widen), d = fabs((double)grads[1][0][(size_t)(i * IN + k)] - grads[0][0][(size_t)(i * IN + k)]);
            over += !(d <= b);
            worst = std::max(worst, d / b);
            dropped_over += fabs(last) > b; /* a sum missing that term would be caught */
        }
    for (int j = 0; j < OUT; j++)
        for (int k = 0; k < IN; k++) {
            double mag = 0;
            for (int i = 0; i < R; i++) mag += fabs((double)rv[(size_t)(i * OUT + j)] * xv[(size_t)(i * IN + k)]);
            double b = fp32_sum_bound(R, mag * widen), d = fabs((double)grads[1][1][(size_t)(j * IN + k)] - grads[0][1][(size_t)(j * IN + k)]);
            over += !(d <= b);
            worst = std::max(worst, d / b);
        }
    MFT_CHECK(over == 0);
    MFT_CHECK(dropped_over > 0);
    double e = rel_err(grads[1][1], grads[0][1]);
    MFT_CHECK(e > 0.0); /* the slices ran: their sum adds in another order */
    printf("    dX by slices of 3 rows, dW by 14 slices of the sum: rel err %.2e (dW) against one product; worst "
           "difference %.3f of the fp32 bound\n", e, worst);
}

/* the bf16 copy of the weights follows mf_set_data and the optimizer without an mf_reset */
static void test_weight_copy_follows_parameters(void) {
    int sx[2] = {2, 3}, sw[2] = {2, 3};
    float x[6] = {1, 2, 3, -1, 0, 1}, w1[6] = {1, 0, 0, 0, 1, 0}, w2[6] = {0, 0, 1, 1, 1, 1};
    mf_ctx *ctx = mf_ctx_new(1);
    MFT_CHECK(mf_ctx_set_device(ctx, MF_DEVICE_CUDA) == 0 && mf_cuda_set_precision(ctx, MF_PREC_BF16) == 0);
    mf_tensor *W = mf_param(ctx, "w", 2, sw);
    mf_set_data(ctx, W, w1);
    mf_tensor *X = mf_from(ctx, 2, sx, x);
    std::vector<float> y1 = host_of(ctx, mf_linear(ctx, X, W, NULL), 0);
    mf_set_data(ctx, W, w2);
    std::vector<float> y2 = host_of(ctx, mf_linear(ctx, X, W, NULL), 0);
    MFT_CHECK(y1[0] == 1 && y1[1] == 2 && y1[2] == -1 && y1[3] == 0);
    MFT_CHECK(y2[0] == 3 && y2[1] == 6 && y2[2] == 1 && y2[3] == 0);
    /* an SGD step of lr 1 on loss = sum(y): w -= sum over rows of x = (0, 2, 4) */
    mf_optimizer opt = mf_optimizer_default(MF_OPT_SGD, 1.0f);
    opt.momentum = 0;
    mf_backward(ctx, mf_sum(ctx, mf_linear(ctx, X, W, NULL)));
    mf_optimizer_step(ctx, &opt);
    std::vector<float> y3 = host_of(ctx, mf_linear(ctx, X, W, NULL), 0);
    MFT_CHECK(y3[0] == -13 && y3[1] == -10 && y3[2] == -3); /* w = ((0, -2, -3), (1, -1, -3)) */
    MFT_CHECK(mf_ok(ctx));
    mf_ctx_free(ctx);
}

/* ------------------------------------------------------------------------------ every op */
struct ExOut { const mf__op *op; std::vector<float> out; std::vector<std::vector<float> > grads; std::string err; };
static ExOut ex_run(const op_example &e, int cuda, mf_precision prec) {
    ExOut r;
    mf_ctx *ctx = mf_ctx_new(99);
    mf_tensor *in[EX_MAX_IN] = {NULL, NULL, NULL, NULL, NULL, NULL};
    r.op = NULL;
    if (cuda && (mf_ctx_set_device(ctx, MF_DEVICE_CUDA) < 0 || mf_cuda_set_precision(ctx, prec) < 0)) {
        r.err = mf_error(ctx);
        mf_ctx_free(ctx);
        return r;
    }
    for (int k = 0; k < e.n_in; k++) {
        char nm[16];
        snprintf(nm, sizeof nm, "in%d", k);
        if (!(in[k] = mf_param(ctx, nm, e.in[k].nd, e.in[k].s))) break;
        std::vector<float> v((size_t)in[k]->ne);
        for (int64_t i = 0; i < in[k]->ne; i++) v[(size_t)i] = ex_value(&e, k, i);
        mf_set_data(ctx, in[k], v.data());
    }
    mf_tensor *out = mf_ok(ctx) ? e.build(ctx, in) : NULL;
    if (out) {
        r.op = out->op;
        mf_tensor *R = mf_from(ctx, out->ndim, out->shape, rand_vec(out->ne, 555).data());
        mf_backward(ctx, mf_sum(ctx, mf_mul(ctx, out, R)));
        if (mf_ok(ctx)) {
            r.out = host_of(ctx, out, 0);
            for (int i = 0; i < mf_param_tensors(ctx); i++) r.grads.push_back(host_of(ctx, mf_param_at(ctx, i), 1));
        }
    }
    if (!mf_ok(ctx)) r.err = mf_error(ctx);
    ex_cleanup();
    mf_ctx_free(ctx);
    return r;
}
/* every example in bf16 against the CPU within BF16_TOL; the ones that run no product in bf16
   (their fp32 CUDA run and bf16 run agree bit for bit) within the fp32 tolerance */
static void test_every_op_in_bf16(void) {
    double worst = 0;
    const char *worst_op = "";
    int with_gemm = 0;
    for (int x = 0; x < N_EXAMPLES; x++) {
        const op_example &e = EXAMPLES[x];
        std::string what = std::string(e.op) + (*e.what ? std::string(" (") + e.what + ")" : std::string());
        ExOut cpu = ex_run(e, 0, MF_PREC_FP32), f32 = ex_run(e, 1, MF_PREC_FP32), bf = ex_run(e, 1, MF_PREC_BF16);
        if (!cpu.err.empty() || !bf.err.empty() || !f32.err.empty()) {
            printf("    %s: a run failed: %s%s%s\n", what.c_str(), cpu.err.c_str(), f32.err.c_str(), bf.err.c_str());
            MFT_CHECK(0);
            continue;
        }
        MFT_CHECK(cpu.op == ex_op(&e) && ex_find(cpu.op) >= 0);
        bool same = bf.out == f32.out && bf.grads == f32.grads;
        double tol = same ? TOL : BF16_TOL, err = rel_err(bf.out, cpu.out);
        with_gemm += !same;
        for (size_t i = 0; i < cpu.grads.size() && i < bf.grads.size(); i++) err = std::max(err, rel_err(bf.grads[i], cpu.grads[i]));
        MFT_CHECK(bf.grads.size() == cpu.grads.size());
        if (!(err <= tol)) { printf("    %s: bf16 differs from the CPU by %.3g (allowed %.3g)\n", what.c_str(), err, tol); MFT_CHECK(0); }
        if (err > worst) { worst = err; worst_op = e.op; }
    }
    printf("    %d examples, %d with products in bf16; largest rel err %.2e (%s), allowed %.2e\n", N_EXAMPLES, with_gemm,
           worst, worst_op, BF16_TOL);
    MFT_CHECK(with_gemm >= 3); /* matmul, linear, conv1d at least */
}

/* ------------------------------------------------------------------------------ training */
/* CURVE_STEPS steps of a model of each family in bf16 (sdpa and metric: the fused attention kernels;
   relative: XL's; fast_weights and linear: the chunkwise kernels; feedback): the loss curve within
   1% of the CPU's fp32 curve (the mean of each window of 25 steps: single steps differ by the
   rounding noise). The next token is one of three (a fixed hash picks it), so the loss tends to
   ln 3, not to 0, where a relative comparison would measure noise. */
static std::vector<float> curve(const mf_model_config &cfg, int cuda, int steps, std::string &err) {
    std::vector<float> losses;
    mf_ctx *ctx = mf_ctx_new(7);
    const int B = 2, T = 8;
    int32_t ids[B * T], tg[B * T];
    if (cuda && (mf_ctx_set_device(ctx, MF_DEVICE_CUDA) < 0 || mf_cuda_set_precision(ctx, MF_PREC_BF16) < 0)) {
        err = mf_error(ctx);
        mf_ctx_free(ctx);
        return losses;
    }
    mf_model *m = mf_model_new(ctx, &cfg);
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 3e-3f);
    for (int s = 0; s < steps && m && mf_ok(ctx); s++) {
        for (int i = 0; i < B * T; i++) {
            ids[i] = (i * 7 + s * 3) % cfg.vocab;
            tg[i] = (ids[i] + 1 + (int)(mft_uniform(5, (uint64_t)s, (uint64_t)i) * 3)) % cfg.vocab;
        }
        mf_tensor *loss = mf_model_loss(m, ids, tg, B, T);
        mf_backward(ctx, loss);
        mf_clip_grad_norm(ctx, 0.5f);
        mf_optimizer_step(ctx, &opt);
        losses.push_back(mf_item(ctx, loss));
        mf_zero_grad(ctx);
        mf_reset(ctx);
    }
    if (!mf_ok(ctx)) err = mf_error(ctx);
    mf_model_free(m);
    mf_ctx_free(ctx);
    return losses;
}
static void check_curve(mf_mixer_kind mixer, int steps) {
    mf_model_config cfg = small_config(mixer);
    std::string err;
    cfg.dropout = 0;
    if (mixer == MF_MIXER_RELATIVE) cfg.mem_len = 4;
    /* T = 8 is below the automatic switch to the chunkwise kernels (16): chunks of 4 train them */
    if (mixer == MF_MIXER_FAST_WEIGHTS || mixer == MF_MIXER_LINEAR) cfg.chunk_size = 4;
    std::vector<float> cpu = curve(cfg, 0, steps, err), bf = curve(cfg, 1, steps, err);
    if (!err.empty() || (int)cpu.size() != steps || (int)bf.size() != steps) {
        printf("    %s: %s\n", mf_mixer_name(mixer), err.c_str());
        MFT_CHECK(0);
        return;
    }
    const int W = 25;
    double worst = 0;
    for (int s0 = 0; s0 + W <= steps; s0 += W) {
        double a = 0, b = 0;
        for (int s = s0; s < s0 + W; s++) { a += cpu[(size_t)s]; b += bf[(size_t)s]; }
        worst = std::max(worst, fabs(b - a) / a);
    }
    printf("    %-12s %d steps: loss %.4f -> %.4f (fp32 CPU) / %.4f (bf16); windows of %d differ by %.2f%% at most\n",
           mf_mixer_name(mixer), steps, cpu[0], cpu[(size_t)steps - 1], bf[(size_t)steps - 1], W, 100 * worst);
    MFT_CHECK(worst <= 0.01);
    MFT_CHECK(cpu[(size_t)steps - 1] < cpu[0] - 0.1); /* it learned: the curve says something */
}
/* steps of each curve: the emulated device runs a step of these tiny models in tens of milliseconds
   (each warp's lanes are fibers), so six curves of 100 steps are a good part of make test's time */
enum { CURVE_STEPS = 100 };
static void test_train_sdpa(void) { check_curve(MF_MIXER_SDPA, MFT_SMALL ? 25 : CURVE_STEPS); }
#if !MFT_SMALL
static void test_train_relative(void) { check_curve(MF_MIXER_RELATIVE, CURVE_STEPS); }
static void test_train_fast_weights(void) { check_curve(MF_MIXER_FAST_WEIGHTS, CURVE_STEPS); }
static void test_train_linear(void) { check_curve(MF_MIXER_LINEAR, CURVE_STEPS); }
static void test_train_metric(void) { check_curve(MF_MIXER_METRIC, CURVE_STEPS); }
static void test_train_feedback(void) { check_curve(MF_MIXER_FEEDBACK, CURVE_STEPS); }
#endif

/* ------------------------------------------------------------------------------ checkpoints */
/* a bf16 run saves fp32 masters: loaded on the CPU bit for bit, trained on there, and back into a
   bf16 context, whose next loss matches the CPU's within the bf16 tolerance */
static void test_checkpoint_bf16_to_cpu_and_back(void) {
    const std::string file = scratch_path("test_cuda_bf16_ckpt");
    const char *path = file.c_str();
    mf_model_config cfg = small_config(MF_MIXER_SDPA);
    TrainOpts o = train_opts();
    o.steps = 3; o.save = path; o.prec = MF_PREC_BF16;
    TrainRun gpu = train_run(cfg, 1, o);
    MFT_CHECK(gpu.err.empty());
    int32_t ids[16], tg[16];
    for (int i = 0; i < 16; i++) { ids[i] = (i * 5) % cfg.vocab; tg[i] = (ids[i] + 2) % cfg.vocab; }
    float loss[2] = {0, 0};
    for (int cuda = 0; cuda <= 1; cuda++) {
        mf_ctx *ctx = mf_ctx_new(7);
        if (cuda) MFT_CHECK(mf_ctx_set_device(ctx, MF_DEVICE_CUDA) == 0 && mf_cuda_set_precision(ctx, MF_PREC_BF16) == 0);
        mf_model *m = mf_model_new(ctx, &cfg);
        MFT_CHECK(mf_load(ctx, path, 1) == 0);
        MFT_CHECK(rel_err(params_host(ctx), gpu.params) == 0.0);
        MFT_CHECK(mf_optimizer_steps(ctx) == 3);
        mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 3e-3f);
        opt.weight_decay = 0.01f;
        mf_set_training(ctx, 0);
        loss[cuda] = mf_item(ctx, mf_model_loss(m, ids, tg, 2, 8));
        mf_set_training(ctx, 1);
        mf_tensor *l = mf_model_loss(m, ids, tg, 2, 8); /* and it trains on from there */
        mf_backward(ctx, l);
        MFT_CHECK(mf_optimizer_step(ctx, &opt) == 0 && mf_optimizer_steps(ctx) == 4);
        MFT_CHECK(mf_ok(ctx));
        mf_model_free(m);
        mf_ctx_free(ctx);
    }
    MFT_CHECK(fabs(loss[1] - loss[0]) <= BF16_TOL * fabs(loss[0]));
    remove(path);
}

/* the other way: a checkpoint written by a CPU run resumes in a bf16 context with its parameters
   bit for bit and its Adam state. The next step's parameter change (Adam's m / sqrt(v) over four
   steps of history) must match the CPU's within 10% of its largest entry; the same step from a
   fresh optimizer (no moments: the first update is +-lr everywhere) must not, so the check sees
   lost moments. */
static std::vector<float> resumed_step(const mf_model_config &cfg, const char *path, int cuda, int with_opt,
                                       const std::vector<float> &start) {
    std::vector<float> delta;
    mf_ctx *ctx = mf_ctx_new(7);
    if (cuda) MFT_CHECK(mf_ctx_set_device(ctx, MF_DEVICE_CUDA) == 0 && mf_cuda_set_precision(ctx, MF_PREC_BF16) == 0);
    mf_model *m = mf_model_new(ctx, &cfg);
    MFT_CHECK(mf_load(ctx, path, with_opt) == 0);
    MFT_CHECK(rel_err(params_host(ctx), start) == 0.0);
    MFT_CHECK(mf_optimizer_steps(ctx) == (with_opt ? 4 : 0));
    int32_t ids[16], tg[16];
    for (int i = 0; i < 16; i++) { ids[i] = (i * 3 + 1) % cfg.vocab; tg[i] = (ids[i] + 4) % cfg.vocab; }
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 3e-3f);
    opt.weight_decay = 0.01f;
    mf_backward(ctx, mf_model_loss(m, ids, tg, 2, 8));
    MFT_CHECK(mf_optimizer_step(ctx, &opt) == 0 && mf_optimizer_steps(ctx) == (with_opt ? 5 : 1));
    if (mf_ok(ctx)) {
        delta = params_host(ctx);
        for (size_t i = 0; i < delta.size(); i++) delta[i] -= start[i];
    }
    MFT_CHECK(mf_ok(ctx));
    mf_model_free(m);
    mf_ctx_free(ctx);
    return delta;
}
static void test_checkpoint_cpu_to_bf16(void) {
    const std::string file = scratch_path("test_cuda_bf16_cpu_ckpt");
    const char *path = file.c_str();
    mf_model_config cfg = small_config(MF_MIXER_SDPA);
    cfg.dropout = 0;
    TrainOpts o = train_opts();
    o.steps = 4; o.save = path;
    TrainRun cpu = train_run(cfg, 0, o);
    MFT_CHECK(cpu.err.empty());
    if (!cpu.err.empty()) return;
    std::vector<float> d_cpu = resumed_step(cfg, path, 0, 1, cpu.params), d_bf16 = resumed_step(cfg, path, 1, 1, cpu.params);
    std::vector<float> d_fresh = resumed_step(cfg, path, 0, 0, cpu.params);
    double e = rel_err(d_bf16, d_cpu), e_fresh = rel_err(d_fresh, d_cpu);
    printf("    step after resuming: bf16 vs CPU %.3g, a fresh optimizer vs CPU %.3g (relative to the largest change)\n",
           e, e_fresh);
    MFT_CHECK(e <= 0.1);
    MFT_CHECK(e_fresh > 0.1);
    remove(path);
}

/* ------------------------------------------------------------------------------ memory */
/* Memory of a training step (recycled activation gradients, as a training loop runs): in bf16 the
   activations that MF__OP_BF16 ops keep for the backward (the projections, layer norms, the FFN's
   hidden layer, the attention's output, the logits) are stored in bf16, so the arena's peak falls
   by more than a third at 4 layers (the residual stream, the embeddings and the backward's
   gradient buffers stay fp32); the counted total adds the bf16 weight copy */
static void test_memory_counters(void) {
    mf_model_config cfg = small_config(MF_MIXER_SDPA);
    cfg.d_model = 64; cfg.d_ff = 256; cfg.max_seq = 64; cfg.vocab = 29; cfg.dropout = 0; cfg.n_layers = 4;
    size_t total[2], peak[2], params = 0;
    for (int bf = 0; bf <= 1; bf++) {
        mf_ctx *ctx = mf_ctx_new(3);
        MFT_CHECK(mf_ctx_set_device(ctx, MF_DEVICE_CUDA) == 0);
        if (bf) MFT_CHECK(mf_cuda_set_precision(ctx, MF_PREC_BF16) == 0);
        mf_set_keep_activation_grads(ctx, 0);
        mf_model *m = mf_model_new(ctx, &cfg);
        std::vector<int32_t> ids(8 * 64), tg(8 * 64);
        for (size_t i = 0; i < ids.size(); i++) { ids[i] = (int)(i * 3 % 29); tg[i] = (int)((i + 1) * 3 % 29); }
        mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 1e-3f);
        mf_backward(ctx, mf_model_loss(m, ids.data(), tg.data(), 8, 64));
        mf_optimizer_step(ctx, &opt);
        total[bf] = mf_ctx_memory_bytes(ctx);
        peak[bf] = mf_activation_peak_bytes(ctx);
        params = (size_t)mf_param_count(ctx);
        MFT_CHECK(mf_ok(ctx));
        mf_model_free(m);
        mf_ctx_free(ctx);
    }
    printf("    sdpa d 64, 4 layers, B 8, T 64, %zu parameters: activation peak fp32 %zu / bf16 %zu bytes (ratio %.3f); counted "
           "total fp32 %zu / bf16 %zu bytes\n", params, peak[0], peak[1], (double)peak[1] / (double)peak[0], total[0],
           total[1]);
    MFT_CHECK(3 * peak[1] <= 2 * peak[0]);
    MFT_CHECK(total[1] >= total[0] - (peak[0] - peak[1]) + params * 2); /* the weight copy is counted */
}

int main(void) {
    if (cuda_suite_start("test_cuda_bf16") < 0) return 1;
    MFT_RUN(test_precision_api);
#ifdef MF_CUDA_EMU
    MFT_RUN(test_emu_bf16_rounding);
#endif
    MFT_RUN(test_gemm_is_rounded_inputs);
    MFT_RUN(test_weight_copy_follows_parameters);
    MFT_RUN(test_sliced_products);
    MFT_RUN(test_every_op_in_bf16);
    MFT_RUN(test_train_sdpa);
#if !MFT_SMALL /* the ASan build trains one model: the curves are the optimized build's check */
    MFT_RUN(test_train_relative);
    MFT_RUN(test_train_metric);
    MFT_RUN(test_train_fast_weights);
    MFT_RUN(test_train_linear);
    MFT_RUN(test_train_feedback);
#endif
    MFT_RUN(test_checkpoint_bf16_to_cpu_and_back);
    MFT_RUN(test_checkpoint_cpu_to_bf16);
    MFT_RUN(test_memory_counters);
#ifdef MF_CUDA_EMU
    MFT_RUN(test_no_leaks);
#endif
    return mft_finish();
}
