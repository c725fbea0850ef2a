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

/* ---- the column reductions (mf__cu_colred_run) and the embedding backward ---- */
/* shapes whose rows split into several chunks with a ragged last one and whose column count is no
   multiple of the tile; each case on the CPU and on the emulator in each thread order: the GPU's
   within TOL of the CPU's, and the same bits in every order (fixed-order sums, no atomics) */
struct RedCase { const char *what; int n_in; int nd[3]; int s[3][3]; mf_tensor *(*build)(mf_ctx *, mf_tensor **); };
static std::vector<int32_t> red_ids(void) { /* skewed: id 3 at every third position, ids 40.. unused */
    std::vector<int32_t> ids(1500);
    for (size_t i = 0; i < ids.size(); i++) ids[i] = i % 3 == 0 ? 3 : (int32_t)((i * 7) % 40);
    return ids;
}
static mf_tensor *red_linear(mf_ctx *c, mf_tensor **in) { return mf_linear(c, in[0], in[1], in[2]); }
static mf_tensor *red_layernorm(mf_ctx *c, mf_tensor **in) { return mf_layernorm(c, in[0], in[1], in[2], 1e-5f); }
static mf_tensor *red_mul(mf_ctx *c, mf_tensor **in) { return mf_mul(c, in[0], in[1]); }
static mf_tensor *red_sub(mf_ctx *c, mf_tensor **in) { return mf_sub(c, in[1], in[0]); } /* small - big */
static mf_tensor *red_add(mf_ctx *c, mf_tensor **in) { return mf_add(c, in[0], in[1]); }
static mf_tensor *red_sum_axis1(mf_ctx *c, mf_tensor **in) { return mf_sum_axis(c, in[0], 1); }
static mf_tensor *red_sum_axis0(mf_ctx *c, mf_tensor **in) { return mf_sum_axis(c, in[0], 0); }
static mf_tensor *red_embedding(mf_ctx *c, mf_tensor **in) {
    std::vector<int32_t> ids = red_ids();
    int sh[2] = {30, 50};
    return mf_embedding(c, in[0], ids.data(), 2, sh);
}
static const RedCase RED_CASES[] = {
    {"linear bias, 1000 rows x 37", 3, {3, 2, 1}, {{10, 100, 12}, {37, 12}, {37}}, red_linear},
    {"layernorm gamma / beta, 777 rows x 45", 3, {2, 1, 1}, {{777, 45}, {45}, {45}}, red_layernorm},
    {"mul, b [33] over 700 rows", 2, {2, 1}, {{700, 33}, {33}}, red_mul},
    {"sub, the small operand first", 2, {2, 1}, {{650, 35}, {35}}, red_sub},
    {"add, b [1] over 3000", 2, {1, 1}, {{3000}, {1}}, red_add},
    {"sum_axis 1 of [3, 500, 20]", 1, {3}, {{3, 500, 20}}, red_sum_axis1},
    {"sum_axis 0 of [900, 7]", 1, {2}, {{900, 7}}, red_sum_axis0},
    {"sum_axis 1 of [40, 300] (inner 1)", 1, {2}, {{40, 300}}, red_sum_axis1},
    {"embedding [50, 40], 1500 ids, skewed", 1, {2}, {{50, 40}}, red_embedding},
};
static OpRun red_run(const RedCase &rc, int cuda) {
    mf_ctx *ctx = mf_ctx_new(5);
    std::vector<mf_tensor *> in;
    if (cuda && mf_ctx_set_device(ctx, MF_DEVICE_CUDA) < 0) { OpRun r; r.err = mf_error(ctx); mf_ctx_free(ctx); return r; }
    for (int k = 0; k < rc.n_in; k++) {
        char nm[16];
        snprintf(nm, sizeof nm, "in%d", k);
        mf_tensor *p = mf_param(ctx, nm, rc.nd[k], rc.s[k]);
        if (p) mf_set_data(ctx, p, rand_vec(p->ne, 40 + (uint64_t)k).data());
        in.push_back(p);
    }
    return op_run_finish(ctx, mf_ok(ctx) ? rc.build(ctx, in.data()) : NULL, in);
}
static void test_column_reductions(void) {
    long long chunk;
    /* the cases above do split: 1000 rows of 37 columns in chunks, the last one shorter */
    int nchunk = mf__cu_colred_split(1000, 37, &chunk);
    MFT_CHECK(nchunk > 1 && 1000 % chunk != 0);
    MFT_CHECK(mf__cu_colred_split(100000, 768, &chunk) * ((768 + MF__CU_CR_TX - 1) / MF__CU_CR_TX) >= 2 * 132);
    MFT_CHECK(mf__cu_colred_split(20, 5, &chunk) == 1 && chunk == 20); /* few rows: one pass */
    for (size_t x = 0; x < sizeof RED_CASES / sizeof RED_CASES[0]; x++) {
        const RedCase &rc = RED_CASES[x];
        OpRun cpu = red_run(rc, 0), first;
        if (!cpu.err.empty()) { printf("    %s: CPU run failed: %s\n", rc.what, cpu.err.c_str()); MFT_CHECK(0); continue; }
        for (int o = 0; o < N_ORDERS; o++) {
            set_order(o);
            OpRun gpu = red_run(rc, 1);
            if (!gpu.err.empty()) { printf("    %s (order %d): CUDA run failed: %s\n", rc.what, o, gpu.err.c_str()); MFT_CHECK(0); continue; }
            double err = rel_err(gpu.out, cpu.out);
            if (!(err <= TOL)) { printf("    %s (order %d): output differs, rel err %.3g\n", rc.what, o, err); MFT_CHECK(0); }
            for (size_t k = 0; k < cpu.grads.size() && k < gpu.grads.size(); k++) {
                err = rel_err(gpu.grads[k], cpu.grads[k]);
                if (!(err <= TOL)) { printf("    %s (order %d): gradient %zu differs, rel err %.3g\n", rc.what, o, k, err); MFT_CHECK(0); }
            }
            if (o == 0) { first = gpu; continue; }
            bool same = gpu.out.size() == first.out.size() && gpu.grads.size() == first.grads.size() &&
                        !memcmp(gpu.out.data(), first.out.data(), gpu.out.size() * sizeof(float));
            for (size_t k = 0; same && k < gpu.grads.size(); k++)
                same = gpu.grads[k].size() == first.grads[k].size() &&
                       !memcmp(gpu.grads[k].data(), first.grads[k].data(), gpu.grads[k].size() * sizeof(float));
            if (!same) { printf("    %s: order %d gives other bits than order 0\n", rc.what, o); MFT_CHECK(0); }
        }
        set_order(0);
    }
}

#ifdef MF_CUDA_EMU
/* ---- fault attribution: a failing launch, GEMM names the op, the kernel or GEMM, and the shapes ---- */
static __global__ void test_k_trap(float *y, int bad) { /* thread `bad` faults */
    if ((int)threadIdx.x == bad) __trap();
    else if (threadIdx.x == 0 && blockIdx.x == 0) y[0] = 0.0f;
}
static bool has(const std::string &s, const char *what) {
    if (s.find(what) != std::string::npos) return true;
    printf("    the error lacks \"%s\": %s\n", what, s.c_str());
    return false;
}
static void test_fault_attribution(void) {
    for (int c = 0; c < 3; c++) {
        mf_ctx *ctx = mf_ctx_new(1);
        int sa[2] = {3, 5}, sb[1] = {5};
        MFT_CHECK(mf_ctx_set_device(ctx, MF_DEVICE_CUDA) == 0);
        mf_tensor *a = mf_param(ctx, "a", 2, sa), *b = mf_param(ctx, "b", 1, sb);
        mf_tensor *y = mf_add(ctx, a, b);
        MFT_CHECK(y && MF__CU(ctx)->cur == NULL); /* set only while an op runs */
        MF__CU(ctx)->cur = y; /* as mf__cu_dispatch does around the op's backward */
        MF__CU(ctx)->cur_bwd = 1;
        if (c == 0) /* a fault inside the kernel (the emulator's __trap) */
            MFT_CHECK(MF__CU_RUN(ctx, "add (backward)", test_k_trap, 2, 64, 0, y->data, 7) < 0);
        else if (c == 1) /* an invalid launch configuration: more than 1024 threads */
            MFT_CHECK(MF__CU_RUN(ctx, "add (backward)", test_k_trap, 1, dim3(64, 32), 96, y->data, -1) < 0);
        else /* cuBLAS refuses a leading dimension smaller than a row */
            MFT_CHECK(mf__cu_gemm_ld(ctx, "add (backward)", 0, 0, 3, 5, 4, a->data, 1, 0, b->data, 5, 0, 0.0f, y->data, 5, 0, 1) < 0);
        MF__CU(ctx)->cur = NULL;
        std::string e = mf_error(ctx);
        MFT_CHECK(has(e, "add (backward): "));
        MFT_CHECK(has(e, "; in op add (backward): output [3, 5], inputs [3, 5], [5]"));
        if (c == 0) {
            MFT_CHECK(has(e, "CUDA kernel test_k_trap failed: unspecified launch failure"));
            MFT_CHECK(has(e, "launch grid (2, 1, 1), block (64, 1, 1), 0 bytes of dynamic shared memory"));
        } else if (c == 1) {
            MFT_CHECK(has(e, "CUDA kernel test_k_trap failed: invalid configuration argument"));
            MFT_CHECK(has(e, "launch grid (1, 1, 1), block (64, 32, 1), 96 bytes of dynamic shared memory"));
        } else {
            MFT_CHECK(has(e, "cublasSgemm failed: "));
            MFT_CHECK(has(e, "GEMM m=3 n=5 k=4 batch=1"));
        }
        MFT_CHECK(e.find("-DMF_CUDA_DEBUG") == std::string::npos); /* the failing call is named: no hint */
        MFT_CHECK(mf_add(ctx, a, b) == NULL); /* sticky */
        mf_emu_clear_message();
        mf_ctx_free(ctx);
    }
}
#endif

int main(void) {
    if (cuda_suite_start("test_cuda_ops") < 0) return 1;
    MFT_RUN(test_every_op_has_a_cuda_row);
    MFT_RUN(test_op_parity);
    MFT_RUN(test_column_reductions);
#ifdef MF_CUDA_EMU
    MFT_RUN(test_fault_attribution);
    MFT_RUN(test_no_leaks);
#endif
    return mft_finish();
}
