#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#include "mf_test.h"
static void test_xor_trains(void) {
    const float xs[8] = {0, 0, 0, 1, 1, 0, 1, 1}, ys[4] = {0, 1, 1, 0};
    int xs_shape[2] = {4, 2}, ys_shape[2] = {4, 1}, step;
    float first = 0, last = 0;
    mf_ctx *ctx = mf_ctx_new(1);
    mf_linear_layer a = mf_linear_layer_new(ctx, "a", 2, 16, 1), b = mf_linear_layer_new(ctx, "b", 16, 1, 1);
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 0.05f);
    for (step = 0; step < 200; step++) {
        mf_tensor *x = mf_from(ctx, 2, xs_shape, xs), *y = mf_from(ctx, 2, ys_shape, ys);
        mf_tensor *p = mf_sigmoid(ctx, mf_linear(ctx, mf_relu(ctx, mf_linear(ctx, x, a.weight, a.bias)), b.weight, b.bias));
        mf_tensor *loss = mf_mse(ctx, p, y);
        mf_backward(ctx, loss);
        mf_optimizer_step(ctx, &opt);
        mf_zero_grad(ctx);
        MFT_CHECK(mf_ok(ctx));
        if (!mf_ok(ctx)) break;
        if (step == 0) first = loss->data[0];
        last = loss->data[0];
        mf_reset(ctx);
    }
    MFT_CHECK(first > 0.2f);
    MFT_CHECK(last < 0.01f);
    mf_ctx_free(ctx);
}
int main(void) { MFT_RUN(test_xor_trains); return mft_finish(); }
