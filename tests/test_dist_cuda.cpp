/* test_dist_cuda.cpp - the NCCL transport of [mf:dist] ([cu:dist] in metaformer_cuda.cuh) on the
 * emulated GPU, with the NCCL stand-in tests/nccl_emu.h (MPI underneath), 2 ranks:
 *
 *   mpicxx -std=c++14 -DMETAFORMER_MPI -DMETAFORMER_NCCL -I. -Itests tests/test_dist_cuda.cpp
 *   mpirun --allow-run-as-root --oversubscribe -np 2 build/mpi/test_dist_cuda     (make test does both)
 *
 * Checks: bucket averages started from the backward hook during the backward (before its last
 * kernel), none reading a gradient before the kernel that finished it (the emulator's race check on
 * the watched gradient buffer) and the optimizer reading the averages (the emulator runs the
 * communication stream only when waited on, so a missing wait gives a wrong result); the check itself
 * fails on a bucket started too early and on a missing wait; ZeRO-1's reduce-scatter and all-gather
 * and the broadcast; the local rank's GPU; NCCL errors (returned and asynchronous) named on every
 * rank. Each rank prints its own lines; the exit status is non-zero when any rank failed. */
#include "cuda_emu.h"
#include "nccl_emu.h" /* and mpi.h */
#define METAFORMER_IMPLEMENTATION
#define METAFORMER_CUDA
#include "metaformer.h"
#include "mf_test.h"

static int g_rank, g_world;

static int has(const char *s, const char *part) {
    if (!strstr(s, part)) { printf("    rank %d: \"%s\" not in: %s\n", g_rank, part, s); return 0; }
    return 1;
}
/* a distributed context by hand (the transport alone: [mf:dist]'s attach is not needed) */
static mf_dist *dist_new(void) {
    mf_dist *d = (mf_dist *)calloc(1, sizeof(mf_dist));
    d->comm = MPI_COMM_WORLD; d->rank = g_rank; d->world = g_world; d->local_rank = g_rank;
    d->cfg = mf_dist_config_default();
    return d;
}
static void dist_free(mf_dist *d) { mf__nccl_close(d); free(d); }
static mf_ctx *gpu_ctx(void) {
    mf_ctx *ctx = mf_ctx_new(7);
    if (mf_ctx_set_device(ctx, MF_DEVICE_CUDA) < 0) { printf("    %s\n", mf_error(ctx)); mf_ctx_free(ctx); return NULL; }
    return ctx;
}
static std::vector<float> to_host(mf_ctx *ctx, const float *dev, int64_t n) {
    std::vector<float> h((size_t)n);
    ctx->be->copy(ctx, h.data(), dev, (size_t)n * sizeof(float), MF__D2H);
    return h;
}

/* Two parameters a, b of N floats, loss = sum(a * x) + sum(b * y) with x, y depending on the rank:
   the gradients are x and y, one bucket each, started by the backward hook after the mul that made
   each one. An SGD step with lr 1 leaves a = a0 - mean_r(x_r). `early`: start both buckets at the
   backward's first op instead (before their kernels ran); `no_wait`: skip wait_all. */
enum { N = 40 };
struct Run { mf_dist *d; mf_ctx *ctx; mf_tensor *a, *b, *mul_a, *mul_b; int early, started, bad; };
static float xval(int rank, int which, int k) { return (float)((rank + 1) * (which ? -0.5 : 1.0)) + 0.01f * (float)k; }
static void hook(mf_ctx *ctx, void *user, int i) {
    Run *r = (Run *)user;
    mf_tensor *op = ctx->tape[i];
    for (int q = 0; q < 2; q++) {
        mf_tensor *p = q ? r->b : r->a, *maker = q ? r->mul_b : r->mul_a;
        if (r->early ? r->started == 0 : op == maker) {
            if (mf__nccl_allreduce_start(r->d, ctx, ctx->p_grad + p->offset, p->ne) < 0) r->bad = 1;
            if (!r->early) break;
        }
    }
    r->started++;
}
/* the index in the log of the first ncclAllReduce enqueued and of the last kernel enqueued on the compute stream */
static void log_marks(int compute, long *first_ar, long *last_kernel, int *n_ar) {
    *first_ar = -1; *last_kernel = -1; *n_ar = 0;
    for (size_t i = 0; i < mf_emu_log_size(); i++) {
        int st = 0, run = 0;
        const char *name = mf_emu_log_at(i, &st, &run);
        if (run) continue;
        if (!strcmp(name, "ncclAllReduce")) { (*n_ar)++; if (*first_ar < 0) *first_ar = (long)i; }
        else if (st == compute && strncmp(name, "mf__k_", 6) == 0) *last_kernel = (long)i;
    }
}
static int bucket_run(int early, int no_wait, unsigned long long *races, std::vector<float> *a_out, int *overlap) {
    Run r;
    memset(&r, 0, sizeof r);
    r.early = early;
    if (!(r.ctx = gpu_ctx())) return -1;
    r.d = dist_new();
    if (mf__nccl_open(r.d, r.ctx) < 0) { printf("    %s\n", r.d->err); dist_free(r.d); mf_ctx_free(r.ctx); return -1; }
    int shape[1] = {N};
    r.a = mf_param(r.ctx, "a", 1, shape);
    r.b = mf_param(r.ctx, "b", 1, shape);
    mf_init_const(r.ctx, r.a, 1.0f);
    mf_init_const(r.ctx, r.b, 2.0f);
    float xs[N], ys[N];
    for (int k = 0; k < N; k++) { xs[k] = xval(g_rank, 0, k); ys[k] = xval(g_rank, 1, k); }
    mf_zero_grad(r.ctx);
    cudaDeviceSynchronize();
    mf_emu_watch(r.ctx->p_grad, (size_t)mf_param_count(r.ctx) * sizeof(float));
    unsigned long long races0 = mf_emu_race_count();
    mf_tensor *x = mf_from(r.ctx, 1, shape, xs), *y = mf_from(r.ctx, 1, shape, ys);
    r.mul_a = mf_mul(r.ctx, r.a, x);
    r.mul_b = mf_mul(r.ctx, r.b, y);
    mf_tensor *loss = mf_add(r.ctx, mf_sum(r.ctx, r.mul_a), mf_sum(r.ctx, r.mul_b));
    r.ctx->bw_hook = hook; r.ctx->bw_hook_user = &r;
    mf_emu_log(1);
    int rc = mf_backward(r.ctx, loss);
    r.ctx->bw_hook = NULL;
    long first_ar, last_kernel;
    int n_ar;
    log_marks(mf_emu_stream_id(MF__CU(r.ctx)->stream), &first_ar, &last_kernel, &n_ar);
    mf_emu_log(0);
    *overlap = n_ar == 2 && first_ar >= 0 && first_ar < last_kernel;
    if (!no_wait && mf__nccl_wait_all(r.d, r.ctx) < 0) { printf("    %s\n", r.d->err); rc = -1; }
    mf_optimizer opt = mf_optimizer_default(MF_OPT_SGD, 1.0f);
    if (mf_optimizer_step(r.ctx, &opt) < 0) rc = -1;
    *a_out = to_host(r.ctx, r.a->data, N);
    std::vector<float> b = to_host(r.ctx, r.b->data, N);
    a_out->insert(a_out->end(), b.begin(), b.end());
    cudaDeviceSynchronize();
    *races = mf_emu_race_count() - races0;
    mf_emu_unwatch_all();
    dist_free(r.d);
    mf_ctx_free(r.ctx);
    return rc < 0 || r.bad ? -1 : 0;
}
static double want_param(int which, int k) {
    double m = 0;
    for (int q = 0; q < g_world; q++) m += xval(q, which, k);
    return (which ? 2.0 : 1.0) - m / g_world;
}
static double max_err(const std::vector<float> &ab) {
    double e = 0;
    for (int k = 0; k < N; k++)
        for (int w = 0; w < 2; w++) e = std::max(e, fabs(ab[(size_t)(w * N + k)] - want_param(w, k)));
    return e;
}

/* the buckets start during the backward, after the kernel that finished each: averages exact, no race */
static void test_buckets_overlap_backward(void) {
    unsigned long long races = 1;
    std::vector<float> ab;
    int overlap = 0;
    MFT_CHECK(bucket_run(0, 0, &races, &ab, &overlap) == 0);
    MFT_CHECK(overlap);  /* 2 all-reduces, the first enqueued before the backward's last kernel */
    MFT_CHECK(races == 0);
    if (races) printf("    %s\n", mf_emu_race_message());
    MFT_CHECK(ab.size() == 2 * N && max_err(ab) < 1e-6);
}
/* the checks can fail: a bucket started before its gradient kernels is a race, a missing wait a
   wrong result (the emulator runs the average only when the compute stream waits for it) */
static void test_ordering_checks_fail(void) {
    unsigned long long races = 0;
    std::vector<float> ab;
    int overlap = 0;
    mf_emu_set_verbose(0);
    MFT_CHECK(bucket_run(1, 0, &races, &ab, &overlap) == 0);
    MFT_CHECK(races > 0);
    printf("    rank %d, started too early: %s\n", g_rank, mf_emu_race_message());
    MFT_CHECK(has(mf_emu_race_message(), "'ncclAllReduce'") && has(mf_emu_race_message(), "without waiting"));
    races = 0;
    MFT_CHECK(bucket_run(0, 1, &races, &ab, &overlap) == 0);
    MFT_CHECK(max_err(ab) > 0.1); /* the optimizer read this rank's own gradients, not the average */
    mf_emu_set_verbose(1);
}

/* ZeRO-1: the reduce-scatter averages each rank's shard, the all-gather gives every rank all shards;
   the broadcast copies rank 0's values */
static void test_collectives(void) {
    mf_ctx *ctx = gpu_ctx();
    if (!ctx) { MFT_CHECK(0); return; }
    mf_dist *d = dist_new();
    MFT_CHECK(mf__nccl_open(d, ctx) == 0);
    const int shard = 5, n = shard * g_world;
    int shape[1] = {n};
    mf_tensor *p = mf_param(ctx, "p", 1, shape);
    std::vector<float> v((size_t)n);
    for (int k = 0; k < n; k++) v[(size_t)k] = (float)(g_rank * 100 + k);
    ctx->be->copy(ctx, p->data, v.data(), (size_t)n * sizeof(float), MF__H2D);
    MFT_CHECK(mf__nccl_reduce_scatter(d, ctx, p->data, shard) == 0);
    std::vector<float> h = to_host(ctx, p->data, n);
    double mean_rank = 100.0 * (g_world - 1) / 2.0;
    for (int k = g_rank * shard; k < (g_rank + 1) * shard; k++) MFT_NEAR(h[(size_t)k], mean_rank + k, 1e-5);
    for (int k = g_rank * shard; k < (g_rank + 1) * shard; k++) h[(size_t)k] = (float)(1000 * g_rank + k);
    ctx->be->copy(ctx, p->data, h.data(), (size_t)n * sizeof(float), MF__H2D);
    MFT_CHECK(mf__nccl_all_gather(d, ctx, p->data, shard) == 0);
    h = to_host(ctx, p->data, n);
    for (int k = 0; k < n; k++) MFT_NEAR(h[(size_t)k], 1000 * (k / shard) + k, 0);
    for (int k = 0; k < n; k++) v[(size_t)k] = (float)(g_rank * 7 + k);
    ctx->be->copy(ctx, p->data, v.data(), (size_t)n * sizeof(float), MF__H2D);
    MFT_CHECK(mf__nccl_broadcast(d, ctx, p->data, n, 0) == 0);
    h = to_host(ctx, p->data, n);
    for (int k = 0; k < n; k++) MFT_NEAR(h[(size_t)k], k, 0);
    dist_free(d);
    mf_ctx_free(ctx);
}

/* the local rank picks the GPU; a context on another GPU is refused on every rank, naming the rank */
static void test_device_of_local_rank(void) {
    mf_dist *d = dist_new();
    cudaSetDevice(0);
    MFT_CHECK(mf__nccl_pick_device(d) == 0);
    int dev = -1;
    cudaGetDevice(&dev);
    MFT_CHECK(dev == g_rank);
    mf_ctx *ctx = gpu_ctx();
    MFT_CHECK(ctx && mf__nccl_open(d, ctx) == 0);
    mf__nccl_close(d);
    cudaSetDevice(0); /* rank 1 now has its context on GPU 0: refused */
    if (g_world > 1) {
        MFT_CHECK(mf__nccl_open(d, ctx) < 0);
        printf("    %s\n", d->err);
        MFT_CHECK(has(d->err, "rank 1: mf_dist_attach (NCCL): this rank is local rank 1 but its context is on GPU 0"));
    }
    dist_free(d);
    mf_ctx_free(ctx);
    cudaSetDevice(g_rank);
}

/* an NCCL call that fails, and one that fails after it was queued: named, with NCCL's reason */
static void test_nccl_errors_named(void) {
    mf_ctx *ctx = gpu_ctx();
    if (!ctx) { MFT_CHECK(0); return; }
    mf_dist *d = dist_new();
    MFT_CHECK(mf__nccl_open(d, ctx) == 0);
    int shape[1] = {8};
    mf_tensor *p = mf_param(ctx, "p", 1, shape);
    mf_nccl_emu_fail_next(ncclUnhandledCudaError, 0);
    MFT_CHECK(mf__nccl_allreduce_start(d, ctx, p->data, 8) < 0);
    printf("    %s\n", d->err);
    MFT_CHECK(has(d->err, "ncclAllReduce") && has(d->err, "unhandled cuda error"));
    mf_nccl_emu_fail_next(ncclRemoteError, 1);
    MFT_CHECK(mf__nccl_allreduce_start(d, ctx, p->data, 8) == 0);
    cudaDeviceSynchronize();
    MFT_CHECK(mf__nccl_wait_all(d, ctx) < 0);
    printf("    %s\n", d->err);
    MFT_CHECK(has(d->err, "ncclCommGetAsyncError") && has(d->err, "remote process exited"));
    dist_free(d);
    mf_ctx_free(ctx);
}

/* The public API on the GPU: 2 ranks x B rows equal 1 rank x 2B rows (losses, parameters after Adam
   steps), with the buckets started during the backward. `ref`: the world-1 run in this process. */
enum { MB = 2, MT = 8, STEPS = 3 };
static mf_model_config small_model(mf_mixer_kind mixer) {
    mf_model_config c = mf_model_config_default();
    c.vocab = 11; c.d_model = 16; c.n_heads = 2; c.n_layers = 2; c.d_ff = 32; c.max_seq = MT; c.mixer = mixer;
    return c;
}
static void batch_rows(int step, int32_t *ids, int32_t *tg, int rows) { /* the global batch's rows [0, rows) */
    for (int i = 0; i < rows * MT; i++) {
        ids[i] = (int32_t)((step * 7 + i * 5 + i / 3) % 11);
        tg[i] = (int32_t)((ids[i] * 3 + 1) % 11);
    }
}
static int model_run(mf_mixer_kind mixer, mf_dist *d, std::vector<float> *params, std::vector<double> *losses, int *in_bw) {
    mf_ctx *ctx = gpu_ctx();
    mf_model_config c = small_model(mixer);
    mf_model *m = ctx ? mf_model_new(ctx, &c) : NULL;
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 1e-2f);
    int rows = d ? MB : 2 * MB, r0 = d ? d->rank * MB : 0, rc = 0;
    if (!m) { if (ctx) printf("    %s\n", mf_error(ctx)); mf_ctx_free(ctx); return -1; }
    if (d && mf_dist_attach(d, ctx) < 0) { printf("    %s\n", mf_dist_error(d)); rc = -1; }
    *in_bw = 0;
    for (int step = 0; step < STEPS && rc == 0; step++) {
        int32_t ids[4 * MB * MT], tg[4 * MB * MT];
        batch_rows(step, ids, tg, 2 * MB);
        mf_tensor *loss = mf_model_loss(m, ids + r0 * MT, tg + r0 * MT, rows, MT);
        double sums[1] = {loss ? (double)mf_item(ctx, loss) : 0};
        if (mf_backward(ctx, loss) < 0) rc = -1;
        if (d) {
            if (mf_dist_sync(d, ctx, sums, 1) < 0) { printf("    %s\n", mf_dist_error(d)); rc = -1; break; }
            sums[0] /= d->world;
            *in_bw += d->last_in_backward;
            if (mf_dist_optimizer_step(d, ctx, &opt) < 0) rc = -1;
        } else if (mf_optimizer_step(ctx, &opt) < 0) rc = -1;
        losses->push_back(sums[0]);
        mf_zero_grad(ctx);
        mf_reset(ctx);
    }
    if (rc == 0 && mf_ok(ctx)) *params = to_host(ctx, mf_param_data(ctx), mf_param_count(ctx));
    if (!mf_ok(ctx)) { printf("    %s\n", mf_error(ctx)); rc = -1; }
    mf_model_free(m);
    if (d) mf_dist_free(d);
    mf_ctx_free(ctx);
    return rc;
}
static void check_family(mf_mixer_kind mixer) {
    std::vector<float> p1, p2;
    std::vector<double> l1, l2;
    int in_bw = 0, dummy = 0;
    mf_dist_config cfg = mf_dist_config_default();
    cfg.bucket_floats = 2000; /* several buckets for these small models */
    MFT_CHECK(model_run(mixer, NULL, &p1, &l1, &dummy) == 0);
    char err[256] = "";
    mf_dist *d = mf_dist_new(MPI_COMM_WORLD, &cfg, err, sizeof err);
    if (!d) { printf("    %s\n", err); MFT_CHECK(0); return; }
    MFT_CHECK(model_run(mixer, d, &p2, &l2, &in_bw) == 0); /* frees d */
    MFT_CHECK(p1.size() == p2.size() && !p1.empty());
    if (p1.size() != p2.size() || p1.empty()) return;
    double e = mft_rel_err(p2.data(), p1.data(), (int64_t)p1.size(), 1e-3);
    printf("    %s: params after %d Adam steps, rel err %.2e; loss %.6f vs %.6f; %d buckets started in the backwards\n",
           mf_mixer_name(mixer), STEPS, e, l2.back(), l1.back(), in_bw);
    /* the averages differ from the big batch's gradients by float rounding (~1e-7); Adam's m / sqrt(v)
       turns that into visible steps on the parameters whose gradients are near zero: 1e-3 */
    MFT_CHECK(e < 1e-3);
    for (size_t i = 0; i < l1.size() && i < l2.size(); i++) MFT_NEAR(l2[i], l1[i], 1e-5 * (1 + fabs(l1[i])));
    MFT_CHECK(in_bw > 0);
}
static void test_model_sdpa_2x_equals_1x(void) { check_family(MF_MIXER_SDPA); }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_world);
    mf_emu_set_device_count(g_world); /* one emulated GPU per rank, as mf_dist_new picks them */
    cudaSetDevice(g_rank);
    if (g_world < 2 && g_rank == 0) printf("note: run with mpirun -np 2; one rank checks the single-rank case only\n");
    MFT_RUN(test_buckets_overlap_backward);
    MFT_RUN(test_ordering_checks_fail);
    MFT_RUN(test_collectives);
    MFT_RUN(test_device_of_local_rank);
    MFT_RUN(test_nccl_errors_named);
    MFT_RUN(test_model_sdpa_2x_equals_1x);
    int bad = mft_finish() != 0, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any;
}
