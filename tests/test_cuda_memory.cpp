/* test_cuda_memory.cpp - on a CUDA context: out of GPU memory (a cudaMalloc that fails)
 * names the request, the device's free / total memory and what asked (the op, the parameters);
 * mf_ctx_set_memory_limit caps the device arena as the host one; check mode (mf_set_check_finite)
 * names the op that makes a NaN / Inf through copies of the device values.
 *
 *   make test       g++ -std=c++14 with tests/cuda_emu.h: a device of a few MB
 *                   (mf_emu_set_memory_limit) makes cudaMalloc fail
 *   make test-cuda  nvcc -x cu for a real GPU: check mode and the memory cap only */
#include "cuda_parity.h"

#include <algorithm>

static int has(const char *s, const char *part) {
    if (!strstr(s, part)) { printf("    \"%s\" not in: %s\n", part, s); return 0; }
    return 1;
}
static mf_ctx *cuda_ctx(void) {
    mf_ctx *ctx = mf_ctx_new(5);
    if (mf_ctx_set_device(ctx, MF_DEVICE_CUDA) < 0) { printf("    %s\n", mf_error(ctx)); MFT_CHECK(0); mf_ctx_free(ctx); return NULL; }
    return ctx;
}
static mf_model_config model_config(void) {
    mf_model_config c = mf_model_config_default();
    c.vocab = 7; c.d_model = 16; c.n_heads = 2; c.n_layers = 1; c.d_ff = 24; c.max_seq = 8;
    return c;
}

/* exp of 1000 on the device: the op and the element are named */
static void test_check_mode_on_cuda(void) {
    mf_ctx *ctx = cuda_ctx();
    int shape[2] = {2, 3};
    float xs[6] = {0, 1, 2, 3, 1000, 5};
    if (!ctx) return;
    mf_set_check_finite(ctx, 1);
    MFT_CHECK(mf_exp(ctx, mf_from(ctx, 2, shape, xs)) == NULL);
    MFT_CHECK(has(mf_error(ctx), "non-finite value (check mode): op exp made inf at element 4 of its output [2, 3]"));
    mf_ctx_free(ctx);
}

/* the cap on a CUDA context: parameters fit, the device arena's first block does not */
static void test_memory_cap_on_cuda(void) {
    mf_ctx *ctx = cuda_ctx();
    mf_model_config c = model_config();
    mf_model *m;
    int32_t ids[16] = {0}, tg[16] = {0};
    if (!ctx) return;
    MFT_CHECK(mf_ctx_set_memory_limit(ctx, (size_t)1 << 20) == 0);
    m = mf_model_new(ctx, &c);
    MFT_CHECK(m == NULL || mf_model_loss(m, ids, tg, 2, 8) == NULL);
    MFT_CHECK(has(mf_error(ctx), "memory limit: "));
    MFT_CHECK(has(mf_error(ctx), "of its 1048576-byte cap"));
    mf_model_free(m);
    mf_ctx_free(ctx);
}

/* The device parameter buffers grow by doubling while parameters are added; mf_reset cuts them
   (and the moments) to the floats in use, keeping every value, and a parameter added later grows
   them again. Counted by mf_ctx_memory_bytes: 8 bytes a float for the
   values and gradients, 16 with the moments (no activations here). */
static void test_parameter_buffers_fit(void) {
    mf_ctx *ctx = cuda_ctx();
    int s1[2] = {50, 80}, s2[1] = {1000}, s3[1] = {32};
    std::vector<float> a(4000), b(1000), back(4000);
    mf_optimizer opt = mf_optimizer_default(MF_OPT_SGD, 0.0f);
    mf_tensor *pa, *pb, *pc;
    if (!ctx) return;
    for (size_t i = 0; i < a.size(); i++) a[i] = (float)i * 0.5f;
    for (size_t i = 0; i < b.size(); i++) b[i] = -(float)i;
    pa = mf_param(ctx, "a", 2, s1); /* 4000 floats fit the first 4096 */
    pb = mf_param(ctx, "b", 1, s2); /* 5000 floats: the buffers double to 8192 */
    MFT_CHECK(pa && pb && mf_set_data(ctx, pa, a.data()) == 0 && mf_set_data(ctx, pb, b.data()) == 0);
    MFT_CHECK(mf_ctx_memory_bytes(ctx) == 8192 * 8);
    mf_reset(ctx);
    MFT_CHECK(mf_ctx_memory_bytes(ctx) == 5000 * 8);
    MFT_CHECK(mf_to_host(ctx, pa, back.data()) == 0 && back == a);
    MFT_CHECK(mf_to_host(ctx, pb, back.data()) == 0 && std::equal(b.begin(), b.end(), back.begin()));
    pc = mf_param(ctx, "c", 1, s3); /* grows again, from the fitted size */
    MFT_CHECK(pc && mf_ctx_memory_bytes(ctx) == 10000 * 8);
    MFT_CHECK(mf_optimizer_step(ctx, &opt) == 0); /* the moments appear at the buffers' size */
    MFT_CHECK(mf_ctx_memory_bytes(ctx) == 10000 * 16);
    mf_reset(ctx);
    MFT_CHECK(mf_ctx_memory_bytes(ctx) == 5040 * 16);
    MFT_CHECK(mf_to_host(ctx, pa, back.data()) == 0 && back == a);
    MFT_CHECK(mf_to_host(ctx, pb, back.data()) == 0 && std::equal(b.begin(), b.end(), back.begin()));
    MFT_CHECK(mf_ok(ctx));
    mf_ctx_free(ctx);
}

#ifdef MF_CUDA_EMU
/* a 4 MB device: the 16 MB activation arena's cudaMalloc fails; the message has the size, the
   device's free and total memory and the op that asked */
static void test_out_of_gpu_memory(void) {
    mf_ctx *ctx;
    mf_model_config c = model_config();
    mf_model *m;
    int32_t ids[16] = {0}, tg[16] = {0};
    char want[128];
    mf_emu_set_memory_limit((size_t)4 << 20);
    if (!(ctx = cuda_ctx())) { mf_emu_set_memory_limit(0); return; }
    m = mf_model_new(ctx, &c);
    MFT_CHECK(m == NULL || mf_model_loss(m, ids, tg, 2, 8) == NULL);
    snprintf(want, sizeof want, "cudaMalloc(%zu bytes) failed", (size_t)16 << 20);
    MFT_CHECK(has(mf_error(ctx), "out of GPU memory: the activation arena, asked by op "));
    MFT_CHECK(has(mf_error(ctx), want));
    MFT_CHECK(has(mf_error(ctx), "of the device's 4194304 bytes free"));
    mf_model_free(m);
    mf_ctx_free(ctx);
    mf_emu_set_memory_limit(0);
}
/* a device too small for the parameters: "the parameter buffers" */
static void test_out_of_gpu_memory_parameters(void) {
    mf_ctx *ctx;
    int shape[2] = {1024, 1024};
    mf_emu_set_memory_limit((size_t)1 << 20);
    if (!(ctx = cuda_ctx())) { mf_emu_set_memory_limit(0); return; }
    MFT_CHECK(mf_param(ctx, "big", 2, shape) == NULL);
    MFT_CHECK(has(mf_error(ctx), "out of GPU memory: the parameter buffers, asked by"));
    MFT_CHECK(has(mf_error(ctx), "cudaMalloc(4194304 bytes) failed"));
    mf_ctx_free(ctx);
    mf_emu_set_memory_limit(0);
}
#endif

int main(void) {
    if (cuda_suite_start("test_cuda_memory") < 0) return 1;
    MFT_RUN(test_check_mode_on_cuda);
    MFT_RUN(test_memory_cap_on_cuda);
    MFT_RUN(test_parameter_buffers_fit);
#ifdef MF_CUDA_EMU
    MFT_RUN(test_out_of_gpu_memory);
    MFT_RUN(test_out_of_gpu_memory_parameters);
    MFT_RUN(test_no_leaks);
#endif
    return mft_finish();
}
