/* cuda_parity.h - what every CUDA parity suite (tests/test_cuda*.cpp) shares: the implementation with
 * the CUDA backend (over the emulator tests/cuda_emu.h when g++ builds it, on the real GPU when nvcc
 * does), the thread orders, smaller shapes under ASan, and the CPU-vs-GPU comparison helpers. */
#ifndef MF_CUDA_PARITY_H
#define MF_CUDA_PARITY_H
#ifndef __CUDACC__
#include "cuda_emu.h"
#endif
#define METAFORMER_IMPLEMENTATION
#define METAFORMER_CUDA
#include "metaformer.h"
#include "mf_test.h"

#include <math.h>
#include <string.h>
#include <unistd.h>
#include <algorithm>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define MFT_SMALL 1 /* smaller shapes under ASan */
#else
#define MFT_SMALL 0
#endif

/* the emulator runs the GPU side in each thread order (a missing barrier or a race shows up as a
   difference); a real GPU has one. Under ASan only the shuffled order: the sanitizers check the
   memory accesses, which the thread order does not move, and the optimized build of the same suite
   (the same -O1 emulation) compares all three orders. Order 0 is the emulator's default, shuffled
   (set_order(0) puts it back). */
#if defined(MF_CUDA_EMU) && !MFT_SMALL
static const int N_ORDERS = 3;
static const int ORDERS[3] = {MF_EMU_ORDER_SHUFFLED, MF_EMU_ORDER_IN, MF_EMU_ORDER_REVERSED};
static inline void set_order(int o) { mf_emu_set_order(ORDERS[o], 1234u + (unsigned)o); }
#elif defined(MF_CUDA_EMU)
static const int N_ORDERS = 1;
static inline void set_order(int o) { (void)o; mf_emu_set_order(MF_EMU_ORDER_SHUFFLED, 1236u); }
#else
static const int N_ORDERS = 1;
static inline void set_order(int o) { (void)o; }
#endif

/* ---- the tolerance rule of every suite ----
 * Bit equality only where the hardware owes it: a copy, a conversion (fp32 <-> bf16 rounds to
 * nearest even), integer results (tokens, indices), and the same kernel on the same shape run twice
 * (one GPU is deterministic per launch configuration and per cuBLAS shape). Everything else rounds
 * in an order the device chooses: a GEMM accumulates in fp32 in cuBLAS's order for that shape (its
 * tiles and split of K; the same product in row slices is another shape: other bits), a reduction
 * in its tree's order, a*b+c is one FMA where nvcc contracts it, and expf / logf are within 1-2 ulps.
 * Such results are compared to the CPU's within a bound of fp32 rounding:
 *   - a length-K sum of terms t_i, each operation rounded with unit roundoff u = 2^-24, is within
 *     gamma_K sum|t_i| of the exact sum whatever the order (gamma_K = K u / (1 - K u)); the device's
 *     and the CPU's sums are then within 2 gamma_K sum|t_i| of each other (fp32_sum_bound);
 *   - a value stored in bf16 adds at most half an ulp of its 8-bit significand: 2^-8 relative (BF16_U);
 *   - TOL, for whole ops and models, relative to the tensor's largest value: 1e-5 = 168 u. The
 *     rounding errors of a length-K sum of mixed-sign terms grow like sqrt(K) u (random-walk, the
 *     worst case K u needs every error the same sign), and the suites' sums are short (K <= 96 for
 *     products, rows of at most a few hundred): sqrt(96) u ~ 10 u per product, a few products and
 *     reductions deep (a model's forward and backward, softmax's expf within 2 ulps), with
 *     headroom; a wrong kernel (a missing term, a wrong index, a stale buffer) errs by O(1e-2).
 * A test that needs more says what its bound is made of, beside the check. */
static const double TOL = 1e-5;
static const double U32 = 5.9604644775390625e-8; /* 2^-24, fp32's unit roundoff */
static const double BF16_U = 1.0 / 256;          /* 2^-8, bf16's (an 8-bit significand) */
static inline double gamma_k(int k) { return k * U32 / (1.0 - k * U32); }
/* how far two fp32 evaluations, in any orders, of a length-K sum whose terms' magnitudes add to abs_sum may be */
static inline double fp32_sum_bound(int k, double abs_sum) { return 2.0 * gamma_k(k) * abs_sum; }

/* a scratch file under build/ of this process's own (the optimized and the ASan build of a suite
   run side by side in make test) */
static inline std::string scratch_path(const char *name) {
    return "build/" + std::string(name) + "." + std::to_string((long)getpid()) + ".safetensors";
}
static inline std::vector<float> rand_vec(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::vector<float> v((size_t)n);
    for (int64_t i = 0; i < n; i++) v[(size_t)i] = lo + (hi - lo) * mft_uniform(seed, 77, (uint64_t)i);
    return v;
}
static inline std::vector<float> host_of(mf_ctx *ctx, const mf_tensor *t, int grad) {
    std::vector<float> v((size_t)t->ne);
    if (grad) mf_grad_to_host(ctx, t, v.data()); else mf_to_host(ctx, t, v.data());
    return v;
}
/* mft_rel_err of two host copies (floor 1e-3 unless given); 1e30 when their sizes differ */
static inline double rel_err(const std::vector<float> &a, const std::vector<float> &b, double floor = 1e-3) {
    if (a.size() != b.size()) return 1e30;
    return mft_rel_err(a.data(), b.data(), (int64_t)a.size(), floor);
}
/* ---- single ops: an output and some gradients from one context ---- */
struct OpRun { std::vector<float> out; std::vector<std::vector<float> > grads; std::string err; };
/* The end of an op's run: backward from loss = sum(out * R), R fixed random (seed), then out and
   the gradient of each watched tensor (NULL: an empty vector) to the host, or the error; frees ctx. */
static inline OpRun op_run_finish(mf_ctx *ctx, mf_tensor *out, const std::vector<mf_tensor *> &watch,
                                  uint64_t seed = 555) {
    OpRun r;
    if (out) {
        mf_tensor *R = mf_from(ctx, out->ndim, out->shape, rand_vec(out->ne, seed).data());
        mf_backward(ctx, mf_sum(ctx, mf_mul(ctx, out, R)));
        if (mf_ok(ctx)) {
            r.out = host_of(ctx, out, 0);
            for (size_t i = 0; i < watch.size(); i++)
                r.grads.push_back(watch[i] ? host_of(ctx, watch[i], 1) : std::vector<float>());
        }
    }
    if (!mf_ok(ctx)) r.err = mf_error(ctx);
    mf_ctx_free(ctx);
    return r;
}
/* every parameter's values on the host, in the flat buffer's layout */
static inline std::vector<float> params_host(mf_ctx *ctx) {
    std::vector<float> v((size_t)mf_param_count(ctx));
    for (int i = 0; i < mf_param_tensors(ctx); i++) {
        mf_tensor *p = mf_param_at(ctx, i);
        mf_to_host(ctx, p, v.data() + p->offset);
    }
    return v;
}

/* ---- whole models: the same training steps on a CPU and on a CUDA context ---- */
/* steps of fixed batches (B 2, T tokens, some targets ignored), clip 0.5, the optimizer; then the
   parameters, a greedy generation of gen_new tokens from a 3-token prompt and a sampled one of 6
   from a 5-token prompt (the model's generation state starts over); save: write a checkpoint */
struct TrainRun {
    std::vector<float> losses, norms, params;
    std::vector<int32_t> greedy, sampled;
    std::string err;
    size_t act_peak;
    std::vector<std::string> names; /* each parameter tensor's name, its offset and size in params */
    std::vector<int64_t> offs, nes;
};
struct TrainOpts {
    mf_optimizer_kind kind;
    float lr;
    int steps, T, gen_new;
    double param_tol;  /* parameters after the steps, relative */
    const char *zero_grad; /* names (suffixes, space-separated) of parameters whose true gradient is 0:
                              see check_train */
    int only_order;    /* < 0: every thread order; else that one (emulated runs of big models are slow) */
    const char *save;
    mf_precision prec; /* of the CUDA run */
    int keep_grads;    /* mf_set_keep_activation_grads: 1 keeps activation gradients, 0 recycles them */
};
/* zero_grad: attention's key bias adds q.b_k to every score of a row, which softmax ignores */
static inline TrainOpts train_opts(void) {
    TrainOpts o = {MF_OPT_ADAM, 3e-3f, 3, 8, 6, TOL, "attn.k.bias", -1, NULL, MF_PREC_FP32, 1};
    return o;
}
/* one training step from loss: backward, clip to 0.5, the optimizer; the gradient norm and the loss
   go to norms and losses; then the gradients are zeroed and the activations released. Every other
   step does the three in one mf_train_update call (the CPU's fused pass, the device's three calls). */
static inline void train_step(mf_ctx *ctx, mf_tensor *loss, mf_optimizer *opt, std::vector<float> &norms,
                              std::vector<float> &losses) {
    mf_backward(ctx, loss);
    if (norms.size() % 2) {
        norms.push_back(mf_train_update(ctx, opt, 0.5f));
        losses.push_back(mf_item(ctx, loss));
    } else {
        norms.push_back(mf_clip_grad_norm(ctx, 0.5f));
        mf_optimizer_step(ctx, opt);
        losses.push_back(mf_item(ctx, loss));
        mf_zero_grad(ctx);
    }
    mf_reset(ctx);
}
static inline TrainRun train_run(mf_model_config cfg, int cuda, const TrainOpts &o) {
    TrainRun r;
    mf_ctx *ctx = mf_ctx_new(7);
    mf_model *m = NULL;
    mf_optimizer opt = mf_optimizer_default(o.kind, o.lr);
    const int B = 2, T = o.T;
    std::vector<int32_t> ids((size_t)(B * T)), tg((size_t)(B * T));
    int32_t prompt[5] = {1, 2, 3, 5, 8};
    mf_sampler smp = {0.8f, 3, 17};
    if (cuda && (mf_ctx_set_device(ctx, MF_DEVICE_CUDA) < 0 || mf_cuda_set_precision(ctx, o.prec) < 0)) {
        r.err = mf_error(ctx);
        mf_ctx_free(ctx);
        return r;
    }
    mf_set_keep_activation_grads(ctx, o.keep_grads);
    m = mf_model_new(ctx, &cfg);
    opt.weight_decay = 0.01f;
    for (int s = 0; s < o.steps && m; s++) {
        for (size_t i = 0; i < ids.size(); i++) { ids[i] = ((int)i * 7 + s * 3) % cfg.vocab; tg[i] = (i % 5 == 4) ? -1 : (ids[i] + 1) % cfg.vocab; }
        train_step(ctx, mf_model_loss(m, ids.data(), tg.data(), B, T), &opt, r.norms, r.losses);
    }
    r.act_peak = mf_activation_peak_bytes(ctx); /* the training steps' (before the generations) */
    if (m && mf_ok(ctx)) {
        r.params = params_host(ctx);
        for (int i = 0; i < mf_param_tensors(ctx); i++) {
            mf_tensor *p = mf_param_at(ctx, i);
            r.names.push_back(p->name ? p->name : "");
            r.offs.push_back(p->offset);
            r.nes.push_back(p->ne);
        }
        if (o.save) mf_save(ctx, o.save, 1, NULL, 0);
        r.greedy.resize((size_t)o.gen_new);
        mf_model_generate(m, prompt, 3, o.gen_new, NULL, r.greedy.data());
        r.sampled.resize(6);
        mf_model_generate(m, prompt, 5, 6, &smp, r.sampled.data());
    }
    if (!mf_ok(ctx)) r.err = mf_error(ctx);
    mf_model_free(m);
    mf_ctx_free(ctx);
    return r;
}
/* the CPU run, then the CUDA run in each thread order: losses, gradient norms, parameters and both
   generations agree. The CUDA runs recycle their activation gradients (as training loops do) except
   in thread order 1, which keeps them: both backward paths meet the CPU's. */
static inline void check_train(mf_model_config cfg, const char *what, const TrainOpts &o = train_opts()) {
    TrainRun cpu = train_run(cfg, 0, o);
    if (!cpu.err.empty()) { printf("    %s: CPU run failed: %s\n", what, cpu.err.c_str()); MFT_CHECK(0); return; }
    for (int ord = 0; ord < N_ORDERS; ord++) {
        if (o.only_order >= 0 && ord != o.only_order % N_ORDERS) continue;
        set_order(ord);
        TrainOpts g = o;
        g.keep_grads = ord == 1;
        TrainRun gpu = train_run(cfg, 1, g);
        if (!gpu.err.empty()) { printf("    %s: CUDA run failed: %s\n", what, gpu.err.c_str()); MFT_CHECK(0); continue; }
        MFT_CHECK(gpu.losses.size() == (size_t)o.steps && cpu.losses.size() == (size_t)o.steps);
        for (size_t s = 0; s < gpu.losses.size() && s < cpu.losses.size(); s++) {
            MFT_NEAR(gpu.losses[s], cpu.losses[s], 1e-5);
            MFT_NEAR(gpu.norms[s], cpu.norms[s], 1e-5);
        }
        /* A parameter whose true gradient is 0 gets rounding noise for a gradient, of either sign on
           either device, and Adam normalises it to a step of up to lr (1 - beta1) / sqrt(1 - beta2)
           (Kingma & Ba, sec. 2.1; the noise above eps): the two runs may differ by twice that per
           step there. SGD moves it by lr times the noise only. The other parameters: param_tol. */
        std::vector<float> gz, cz; /* the other parameters, and the zero-gradient ones apart */
        double zbound = 0, zerr = 0;
        if (o.kind != MF_OPT_SGD) {
            mf_optimizer d = mf_optimizer_default(o.kind, o.lr);
            zbound = 2.0 * o.steps * o.lr * std::max(1.0, (1.0 - d.beta1) / sqrt(1.0 - d.beta2));
        }
        for (size_t t = 0; t < cpu.names.size() && gpu.params.size() == cpu.params.size(); t++) {
            bool zero = false;
            for (const char *z = o.zero_grad; z && *z;) {
                size_t n = strcspn(z, " "), ln = cpu.names[t].size();
                zero |= n && ln >= n && cpu.names[t].compare(ln - n, n, z, n) == 0;
                z += n + (z[n] == ' ');
            }
            const float *g = gpu.params.data() + cpu.offs[t], *c = cpu.params.data() + cpu.offs[t];
            if (zero && zbound > 0)
                for (int64_t i = 0; i < cpu.nes[t]; i++) zerr = std::max(zerr, fabs((double)g[i] - c[i]));
            else {
                gz.insert(gz.end(), g, g + cpu.nes[t]);
                cz.insert(cz.end(), c, c + cpu.nes[t]);
            }
        }
        double e = gpu.params.size() == cpu.params.size() ? rel_err(gz, cz) : 1e30;
        if (!(e <= o.param_tol)) { printf("    %s: parameters after %d steps differ, rel err %.3g\n", what, o.steps, e); MFT_CHECK(0); }
        if (!(zerr <= zbound)) {
            printf("    %s: parameters with no true gradient (%s) differ by %.3g, more than Adam's steps allow (%.3g)\n",
                   what, o.zero_grad, zerr, zbound);
            MFT_CHECK(0);
        }
        if (gpu.greedy != cpu.greedy || gpu.sampled != cpu.sampled) { printf("    %s: generated tokens differ\n", what); MFT_CHECK(0); }
    }
    set_order(0);
}
/* a small model of each kind: vocab 11, d 16, 2 heads, 2 layers, d_ff 24, max_seq 12, dropout 0.1 */
static inline mf_model_config small_config(mf_mixer_kind mixer) {
    mf_model_config c = mf_model_config_default();
    c.vocab = 11; c.d_model = 16; c.n_heads = 2; c.n_layers = 2; c.d_ff = 24; c.max_seq = 12;
    c.mixer = mixer; c.dropout = 0.1f;
    return c;
}
/* the start of a suite's main: a quiet emulator, or on a real GPU the check that there is one
   (otherwise a FAIL line and the runner's summary); -1: stop */
static inline int cuda_suite_start(const char *name) {
#ifdef MF_CUDA_EMU
    (void)name;
    mf_emu_set_verbose(0);
#else
    char why[256];
    if (mf_cuda_available(why, sizeof why) <= 0) { printf("FAIL %s: %s\n0 passed, 1 failed\n", name, why); return -1; }
#endif
    return 0;
}
#ifdef MF_CUDA_EMU
/* no device memory is left behind (the emulator counts the allocations) */
static inline void test_no_leaks(void) { MFT_CHECK(mf_emu_live_allocations(NULL) == 0); }
#endif
#endif
