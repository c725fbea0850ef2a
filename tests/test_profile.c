/* The op profiler (mf_set_profile, mf_profile_entries, mf_profile_report): what it records, that it
   changes no result, the report's buffer handling, and the kinds the reports group by. */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#include "mf_test.h"
#include "profile_model.h"
#include <stdlib.h>
#include <string.h>

static void test_off_by_default(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    mf_model *m = prof_model(ctx);
    prof_step(ctx, m, 0);
    MFT_CHECK(mf_ok(ctx));
    MFT_CHECK(mf_profile_entries(ctx, NULL, 0) == 0);
    MFT_CHECK(mf_set_profile(ctx, 1) == 0);
    MFT_CHECK(mf_set_profile(ctx, 0) == 1);
    prof_step(ctx, m, 1);
    MFT_CHECK(mf_profile_entries(ctx, NULL, 0) == 0); /* on, then off before the step: nothing */
    mf_model_free(m);
    mf_ctx_free(ctx);
}

static void test_records_ops_and_gemm(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    mf_model *m = prof_model(ctx);
    mf_profile_entry e[64];
    const mf_profile_entry *lin, *ln, *opt, *clip, *zg;
    int n, i;
    double gemm = 0;
    mf_set_profile(ctx, 1);
    prof_step(ctx, m, 0);
    prof_step(ctx, m, 1);
    n = mf_profile_entries(ctx, e, 64);
    MFT_CHECK(n > 5 && n <= 64);
    lin = prof_find(e, n, "linear"); ln = prof_find(e, n, "layernorm"); opt = prof_find(e, n, "optimizer_step");
    clip = prof_find(e, n, "clip_grad_norm"); zg = prof_find(e, n, "zero_grad");
    MFT_CHECK(lin && ln && opt && clip && zg);
    if (lin) {
        MFT_CHECK(!strcmp(lin->kind, "matmul"));
        /* 2 steps x (2 layers x (q, k, v or qkv, out, fc1, fc2) + head): at least 2 x 9 */
        MFT_CHECK(lin->calls >= 18 && lin->calls % 2 == 0);
        MFT_CHECK(lin->fwd_gemm_s <= lin->fwd_s && lin->bwd_gemm_s <= lin->bwd_s);
    }
    if (ln) { MFT_CHECK(!strcmp(ln->kind, "layernorm")); MFT_CHECK(ln->calls == 2 * 5); MFT_CHECK(ln->fwd_gemm_s == 0); }
    if (opt) { MFT_CHECK(!strcmp(opt->kind, "optimizer")); MFT_CHECK(opt->calls == 2 && opt->fwd_s == 0); }
    if (clip) MFT_CHECK(clip->calls == 2 && !strcmp(clip->kind, "optimizer"));
    if (zg) MFT_CHECK(zg->calls == 2);
    for (i = 0; i < n; i++) {
        MFT_CHECK(e[i].fwd_s >= 0 && e[i].bwd_s >= 0 && e[i].fwd_gemm_s >= 0 && e[i].bwd_gemm_s >= 0);
        if (i) MFT_CHECK(e[i - 1].fwd_s + e[i - 1].bwd_s >= e[i].fwd_s + e[i].bwd_s); /* slowest first */
        gemm += e[i].fwd_gemm_s + e[i].bwd_gemm_s;
    }
    MFT_CHECK(gemm > 0);
    MFT_CHECK(mf_profile_entries(ctx, e, 2) == n); /* the count of all, two copied */
    mf_set_profile(ctx, 1);                        /* on again: zeroed */
    MFT_CHECK(mf_profile_entries(ctx, NULL, 0) == 0);
    MFT_CHECK(mf_ok(ctx));
    mf_model_free(m);
    mf_ctx_free(ctx);
}

/* profiling times the same work: parameters after two steps bit for bit those of an unprofiled run */
static void test_changes_no_result(void) {
    mf_ctx *a = mf_ctx_new(7), *b = mf_ctx_new(7);
    mf_model *ma = prof_model(a), *mb = prof_model(b);
    mf_tensor *pa, *pb;
    mf_set_profile(b, 1);
    prof_step(a, ma, 0); prof_step(a, ma, 1);
    prof_step(b, mb, 0); prof_step(b, mb, 1);
    pa = mf_param_find(a, "layers.0.ffn.fc1.weight");
    pb = mf_param_find(b, "layers.0.ffn.fc1.weight");
    MFT_CHECK(mf_ok(a) && mf_ok(b) && mf_param_count(a) == mf_param_count(b));
    MFT_CHECK(pa && pb);
    if (pa && pb) MFT_CHECK(!memcmp(pa->data, pb->data, (size_t)pa->ne * sizeof(float)));
    mf_model_free(ma); mf_model_free(mb);
    mf_ctx_free(a); mf_ctx_free(b);
}

static void test_report(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    mf_model *m = prof_model(ctx);
    char small[40], *big;
    int need, got;
    mf_set_profile(ctx, 1);
    prof_step(ctx, m, 0);
    need = mf_profile_report(ctx, 1, NULL, 0);
    MFT_CHECK(need > 100);
    big = (char *)malloc((size_t)need + 1);
    got = mf_profile_report(ctx, 1, big, (size_t)need + 1);
    MFT_CHECK(got == need && (int)strlen(big) == need);
    MFT_CHECK(strstr(big, "linear") && strstr(big, "GEMM") && strstr(big, "optimizer"));
    memset(small, 'x', sizeof small);
    MFT_CHECK(mf_profile_report(ctx, 1, small, sizeof small) == need);
    MFT_CHECK(small[sizeof small - 1] == 0 && strlen(small) == sizeof small - 1); /* cut, terminated */
    MFT_CHECK(mf_profile_report(ctx, 0, big, (size_t)need + 1) == -1);
    MFT_CHECK(mf_profile_report(NULL, 1, big, (size_t)need + 1) == -1);
    MFT_CHECK(mf_profile_entries(NULL, NULL, 0) == -1);
    MFT_CHECK(mf_set_profile(NULL, 1) == 0);
    free(big);
    mf_model_free(m);
    mf_ctx_free(ctx);
}

/* every op has a kind; the kinds of the ops the reports single out */
static void test_kinds(void) {
    static const char *const known[] = {"matmul", "mixer", "layernorm", "elementwise", "loss", "embedding", "copy",
                                        "optimizer", "memset"};
    int i, k, ok;
    for (i = 0; i < MF__N_OPS; i++) {
        const char *kind = mf__prof_kind(mf__ops[i]->name);
        for (ok = 0, k = 0; k < 9; k++) ok |= !strcmp(kind, known[k]);
        MFT_CHECK(ok);
    }
    MFT_CHECK(!strcmp(mf__prof_kind("linear"), "matmul"));
    MFT_CHECK(!strcmp(mf__prof_kind("attention"), "mixer"));
    MFT_CHECK(!strcmp(mf__prof_kind("fast_weights"), "mixer"));
    MFT_CHECK(!strcmp(mf__prof_kind("permute"), "copy"));
    MFT_CHECK(!strcmp(mf__prof_kind("gelu"), "elementwise"));
    MFT_CHECK(!strcmp(mf__prof_kind("cross_entropy"), "loss"));
    MFT_CHECK(!strcmp(mf__prof_kind("zero_activation_grads"), "memset"));
    MFT_CHECK(MF__N_OPS + 4 <= MF__PROF_ROWS); /* every op and the non-op entries get a row */
}

int main(void) {
    MFT_RUN(test_off_by_default);
    MFT_RUN(test_records_ops_and_gemm);
    MFT_RUN(test_changes_no_result);
    MFT_RUN(test_report);
    MFT_RUN(test_kinds);
    return mft_finish();
}
