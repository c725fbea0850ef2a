/* test_cuda_profile.cpp - the op profiler (mf_set_profile) on a CUDA context: it records the ops the
 * CPU's profile of the same model records, cuBLAS as the GEMM part of the products (fp32 and bf16),
 * the device's zeroing of activation gradients and the optimizer; its regions do not overlap (their
 * sum fits in the wall time of the profiled steps); and it changes no result.
 *
 *   make test       g++ -std=c++14 with tests/cuda_emu.h (the emulated device)
 *   make test-cuda  nvcc -x cu for a real GPU */
#include "cuda_parity.h"
#include "profile_model.h"

static mf_ctx *profile_ctx(int cuda, int bf16) {
    mf_ctx *ctx = mf_ctx_new(11);
    if ((cuda && mf_ctx_set_device(ctx, MF_DEVICE_CUDA) < 0) || (bf16 && mf_cuda_set_precision(ctx, MF_PREC_BF16) < 0)) {
        printf("    %s\n", mf_error(ctx));
        MFT_CHECK(0);
        mf_ctx_free(ctx);
        return NULL;
    }
    return ctx;
}
/* two profiled steps; the entries into e (64), their count returned (-1: the context failed), the
   wall seconds of the steps into *wall */
static int profiled_steps(mf_ctx *ctx, mf_model *m, mf_profile_entry *e, double *wall) {
    double t0;
    MFT_CHECK(mf_set_profile(ctx, 1) == 0);
    t0 = mf_time();
    prof_step(ctx, m, 0);
    prof_step(ctx, m, 1);
    *wall = mf_time() - t0;
    mf_set_profile(ctx, 0);
    if (!mf_ok(ctx)) { printf("    %s\n", mf_error(ctx)); return -1; }
    return mf_profile_entries(ctx, e, 64);
}

static void check_device_profile(int bf16) {
    mf_ctx *cpu = profile_ctx(0, 0), *gpu = profile_ctx(1, bf16);
    mf_model *mc, *mg;
    mf_profile_entry ec[64], eg[64];
    const mf_profile_entry *lin, *ln, *att, *zg;
    double wall_c, wall_g, sum = 0, gemm = 0;
    int nc, ng;
    if (!cpu || !gpu) { mf_ctx_free(cpu); mf_ctx_free(gpu); return; }
    mc = prof_model(cpu); mg = prof_model(gpu);
    nc = profiled_steps(cpu, mc, ec, &wall_c);
    ng = profiled_steps(gpu, mg, eg, &wall_g);
    MFT_CHECK(nc > 5 && ng == nc);
    for (int i = 0; i < nc && ng > 0; i++) { /* the same op names as on the CPU */
        const mf_profile_entry *g = prof_find(eg, ng, ec[i].name);
        if (!g) { printf("    %s is in the CPU's profile, not in the device's\n", ec[i].name); MFT_CHECK(0); continue; }
        MFT_CHECK(!strcmp(g->kind, ec[i].kind));
        if (strcmp(ec[i].name, "zero_activation_grads")) MFT_CHECK(g->calls == ec[i].calls);
    }
    lin = prof_find(eg, ng, "linear"); ln = prof_find(eg, ng, "layernorm"); att = prof_find(eg, ng, "attention");
    zg = prof_find(eg, ng, "zero_activation_grads");
    MFT_CHECK(lin && ln && att && zg);
    if (lin) { /* cuBLAS inside the linear layers, forward and backward, counted as GEMM */
        MFT_CHECK(lin->fwd_gemm_s > 0 && lin->fwd_gemm_s <= lin->fwd_s);
        MFT_CHECK(lin->bwd_gemm_s > 0 && lin->bwd_gemm_s <= lin->bwd_s);
    }
    if (ln) MFT_CHECK(ln->fwd_gemm_s == 0 && ln->bwd_gemm_s == 0 && ln->fwd_s > 0 && ln->bwd_s > 0);
    if (att) MFT_CHECK(att->fwd_s > 0 && att->bwd_s > 0);
    if (zg) MFT_CHECK(zg->calls > 0 && zg->bwd_s > 0);
    for (int i = 0; i < ng; i++) {
        sum += eg[i].fwd_s + eg[i].bwd_s;
        gemm += eg[i].fwd_gemm_s + eg[i].bwd_gemm_s;
    }
    /* the timed regions are disjoint: together no longer than the steps */
    MFT_CHECK(sum > 0 && sum <= wall_g && gemm < sum);
    mf_model_free(mc); mf_model_free(mg);
    mf_ctx_free(cpu); mf_ctx_free(gpu);
}
static void test_profile_on_cuda(void) { check_device_profile(0); }
static void test_profile_on_cuda_bf16(void) { check_device_profile(1); }

/* profiling waits for the device around every op, and changes nothing it computes: the parameters
   after two steps are those of an unprofiled run, bit for bit */
static void test_profile_changes_no_result(void) {
    mf_ctx *a = profile_ctx(1, 0), *b = profile_ctx(1, 0);
    mf_model *ma, *mb;
    mf_profile_entry e[64];
    double wall;
    mf_tensor *pa, *pb;
    if (!a || !b) { mf_ctx_free(a); mf_ctx_free(b); return; }
    ma = prof_model(a); mb = prof_model(b);
    prof_step(a, ma, 0); prof_step(a, ma, 1);
    MFT_CHECK(profiled_steps(b, mb, e, &wall) > 0);
    pa = mf_param_find(a, "layers.0.ffn.fc1.weight");
    pb = mf_param_find(b, "layers.0.ffn.fc1.weight");
    MFT_CHECK(pa && pb && mf_ok(a) && mf_ok(b));
    if (pa && pb) {
        std::vector<float> va((size_t)pa->ne), vb((size_t)pb->ne);
        MFT_CHECK(mf_to_host(a, pa, va.data()) == 0 && mf_to_host(b, pb, vb.data()) == 0);
        MFT_CHECK(!memcmp(va.data(), vb.data(), va.size() * sizeof(float)));
    }
    mf_model_free(ma); mf_model_free(mb);
    mf_ctx_free(a); mf_ctx_free(b);
}

int main(void) {
    MFT_RUN(test_profile_on_cuda);
    MFT_RUN(test_profile_on_cuda_bf16);
    MFT_RUN(test_profile_changes_no_result);
    return mft_finish();
}
