/* test_cuda_ops.cpp - the op list (mf__ops) against the CUDA backend: every op has a row in
 * metaformer_cuda.cuh's mf__cu_ops, and every op's examples (tests/op_examples.h, the ones
 * tests/test_ops.c checks the op's properties with) run on a CPU and on a CUDA context with the
 * same inputs and agree: the output and every parameter's gradient (the inputs are parameters),
 * after a backward from loss = sum(out * R), R fixed random. An op added to mf__ops without a CUDA
 * row or an example fails here. tests/test_cuda.cpp and the family suites add more shapes per op
 * and whole training runs.
 *
 *   make test       g++ with tests/cuda_emu.h: the kernels on the CPU emulator, in each thread order
 *   make test-cuda  nvcc -x cu for a real GPU */
#include "cuda_parity.h"
#include "op_examples.h"

#include <algorithm>

static void test_every_op_has_a_cuda_row(void) {
    for (int i = 0; i < MF__N_OPS; i++) {
        bool found = false;
        for (size_t j = 0; j < sizeof mf__cu_ops / sizeof mf__cu_ops[0]; j++) found = found || mf__cu_ops[j].op == mf__ops[i];
        if (!found) { printf("    op %s has no row in mf__cu_ops (metaformer_cuda.cuh)\n", mf__ops[i]->name); MFT_CHECK(0); }
    }
}

struct ExRun { const mf__op *op; std::vector<float> out; std::vector<std::string> names; std::vector<std::vector<float> > grads; std::string err; };
/* one context's run of an example: its inputs as parameters, then every parameter's gradient */
static ExRun ex_run(const op_example &e, int cuda) {
    ExRun r;
    mf_ctx *ctx = mf_ctx_new(99);
    mf_tensor *in[EX_MAX_IN] = {NULL, NULL, NULL, NULL, NULL, NULL};
    r.op = NULL;
    if (cuda && mf_ctx_set_device(ctx, MF_DEVICE_CUDA) < 0) { r.err = mf_error(ctx); mf_ctx_free(ctx); return r; }
    for (int k = 0; k < e.n_in; k++) {
        char nm[16];
        snprintf(nm, sizeof nm, "in%d", k);
        in[k] = mf_param(ctx, nm, e.in[k].nd, e.in[k].s);
        if (!in[k]) break;
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
            for (int i = 0; i < mf_param_tensors(ctx); i++) {
                mf_tensor *p = mf_param_at(ctx, i);
                r.names.push_back(p->name);
                r.grads.push_back(host_of(ctx, p, 1));
            }
        }
    }
    if (!mf_ok(ctx)) r.err = mf_error(ctx);
    ex_cleanup();
    mf_ctx_free(ctx);
    return r;
}

/* every example on both backends; each op of mf__ops covered by one whose node is that op */
static void test_op_parity(void) {
    std::vector<const mf__op *> covered;
    for (int x = 0; x < N_EXAMPLES; x++) {
        const op_example &e = EXAMPLES[x];
        std::string what = std::string(e.op) + (*e.what ? std::string(" (") + e.what + ")" : std::string());
        ExRun cpu = ex_run(e, 0);
        if (!cpu.err.empty()) { printf("    %s: CPU run failed: %s\n", what.c_str(), cpu.err.c_str()); MFT_CHECK(0); continue; }
        bool ok = cpu.op && cpu.op == ex_op(&e);
        if (!ok) { printf("    %s: the example does not make a node of the op\n", what.c_str()); MFT_CHECK(0); }
        for (int o = 0; o < N_ORDERS; o++) {
            set_order(o);
            ExRun gpu = ex_run(e, 1);
            if (!gpu.err.empty()) { printf("    %s (order %d): CUDA run failed: %s\n", what.c_str(), o, gpu.err.c_str()); MFT_CHECK(0); ok = false; continue; }
            double err = rel_err(gpu.out, cpu.out);
            if (!(err <= TOL)) { printf("    %s (order %d): output differs, rel err %.3g\n", what.c_str(), o, err); MFT_CHECK(0); ok = false; }
            if (gpu.grads.size() != cpu.grads.size()) { printf("    %s: the contexts hold different parameters\n", what.c_str()); MFT_CHECK(0); ok = false; continue; }
            for (size_t i = 0; i < cpu.grads.size(); i++) {
                err = rel_err(gpu.grads[i], cpu.grads[i]);
                if (!(err <= TOL)) {
                    printf("    %s (order %d): gradient of %s differs, rel err %.3g\n", what.c_str(), o, cpu.names[i].c_str(), err);
                    MFT_CHECK(0);
                    ok = false;
                }
            }
        }
        set_order(0);
        if (ok) covered.push_back(cpu.op);
    }
    for (int i = 0; i < MF__N_OPS; i++)
        if (std::find(covered.begin(), covered.end(), mf__ops[i]) == covered.end()) {
            printf("    op %s has no passing CPU-vs-CUDA parity case%s\n", mf__ops[i]->name,
                   ex_find(mf__ops[i]) < 0 ? ": no example in tests/op_examples.h" : "");
            MFT_CHECK(0);
        }
}

int main(void) {
    if (cuda_suite_start("test_cuda_ops") < 0) return 1;
    MFT_RUN(test_every_op_has_a_cuda_row);
    MFT_RUN(test_op_parity);
#ifdef MF_CUDA_EMU
    MFT_RUN(test_no_leaks);
#endif
    return mft_finish();
}
