/* test_device.c - device selection in a build without CUDA (the default build): asking for the
 * GPU fails with a clear message instead of crashing, and the CPU helpers of the device API
 * (mf_to_host, mf_grad_to_host, mf_set_data, mf_item) work on CPU tensors. */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#include "mf_test.h"
#include <string.h>

static void test_no_cuda_build(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    char why[256];
    MFT_CHECK(mf_cuda_available(why, sizeof why) == 0 && strstr(why, "this build has no CUDA"));
    MFT_CHECK(mf_ctx_device(ctx) == MF_DEVICE_CPU);
    MFT_CHECK(mf_ctx_set_device(ctx, MF_DEVICE_CPU) == 0 && mf_ok(ctx));
    MFT_CHECK(mf_cuda_set_tf32(ctx, 1) == -1 && mf_ok(ctx));
    MFT_CHECK(mf_ctx_set_device(ctx, MF_DEVICE_CUDA) == -1);
    MFT_CHECK(strstr(mf_error(ctx), "this build has no CUDA: compile the implementation file with nvcc and -DMETAFORMER_CUDA") != NULL);
    MFT_CHECK(mf_ctx_device(ctx) == MF_DEVICE_CPU);
    mf_clear_error(ctx);
    MFT_CHECK(mf_ctx_set_device(ctx, (mf_device)5) == -1 && strstr(mf_error(ctx), "unknown device"));
    mf_ctx_free(ctx);
}

static void test_host_access(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    int sh[1] = {3};
    float v[3] = {1, 2, 3}, w[3] = {0, 0, 0};
    mf_tensor *p = mf_param(ctx, "p", 1, sh), *loss;
    MFT_CHECK(mf_set_data(ctx, p, v) == 0 && p->data[2] == 3.0f);
    loss = mf_sum(ctx, mf_mul(ctx, p, p));
    MFT_CHECK(mf_item(ctx, loss) == 14.0f);
    MFT_CHECK(mf_backward(ctx, loss) == 0);
    MFT_CHECK(mf_grad_to_host(ctx, p, w) == 0 && w[0] == 2.0f && w[2] == 6.0f);
    MFT_CHECK(mf_to_host(ctx, p, w) == 0 && w[1] == 2.0f);
    MFT_CHECK(mf_grad_to_host(ctx, loss, NULL) == -1 && strstr(mf_error(ctx), "NULL"));
    MFT_CHECK(mf_item(ctx, loss) != mf_item(ctx, loss)); /* NaN on a failed context */
    mf_ctx_free(ctx);
}

int main(void) {
    MFT_RUN(test_no_cuda_build);
    MFT_RUN(test_host_access);
    return mft_finish();
}
