/* hello.c - learn XOR with a 2-16-1 MLP, the autograd and Adam.
   build: cc -O2 -I.. hello.c -o hello -lm   (or `make examples`, then ./build/hello) */
#define METAFORMER_IMPLEMENTATION
#include "../metaformer.h"
#include <stdio.h>

int main(void) {
    const float xs[4 * 2] = {0, 0, 0, 1, 1, 0, 1, 1};
    const float ys[4] = {0, 1, 1, 0};
    int xshape[2] = {4, 2}, yshape[2] = {4, 1}, step;
    mf_ctx *ctx = mf_ctx_new(1);
    mf_linear_layer l1 = mf_linear_layer_new(ctx, "l1", 2, 16, 1);
    mf_linear_layer l2 = mf_linear_layer_new(ctx, "l2", 16, 1, 1);
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 0.05f);

    for (step = 0; step <= 300; step++) {
        mf_tensor *x = mf_from(ctx, 2, xshape, xs), *y = mf_from(ctx, 2, yshape, ys);
        mf_tensor *h = mf_relu(ctx, mf_linear(ctx, x, l1.weight, l1.bias));
        mf_tensor *p = mf_sigmoid(ctx, mf_linear(ctx, h, l2.weight, l2.bias));
        mf_tensor *loss = mf_mse(ctx, p, y);
        mf_backward(ctx, loss);
        mf_optimizer_step(ctx, &opt);
        mf_zero_grad(ctx);
        if (!mf_ok(ctx)) break;
        if (step % 50 == 0)
            printf("step %3d  loss %.5f  predictions %.2f %.2f %.2f %.2f\n", step, loss->data[0],
                   p->data[0], p->data[1], p->data[2], p->data[3]);
        mf_reset(ctx);
    }
    if (!mf_ok(ctx)) { fprintf(stderr, "error: %s\n", mf_error(ctx)); mf_ctx_free(ctx); return 1; }
    mf_ctx_free(ctx);
    return 0;
}
