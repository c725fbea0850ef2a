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
#include <unistd.h> /* getpid */

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
struct BucketRun { mf_dist *d; mf_ctx *ctx; mf_tensor *a, *b, *mul_a, *mul_b; int early, started, bad; };
static float xval(int rank, int which, int k) { return (float)((rank + 1) * (which ? -0.5 : 1.0)) + 0.01f * (float)k; }
static void hook(mf_ctx *ctx, void *user, int i) {
    BucketRun *r = (BucketRun *)user;
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
    BucketRun r;
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

/* The public API on the GPU, as tests/test_dist.c on the CPU: 2 ranks x B rows == 1 rank x 2B rows
   (losses, the averaged gradients, the parameters after 3 Adam steps) for a model of each family,
   with the buckets started during the backward; ZeRO-1 == plain data parallel (and == the CPU's
   ZeRO-1); ZeRO-1 checkpoints 2 -> 1 and 1 -> 2 ranks continue the same loss curve. Every rank also
   trains the one-rank reference on the whole global batch, so each compares on its own. */
enum { V = 13, T = 6, B = 2 /* rows per rank */ };
static char g_ckpt[256];
static mf_model_config tiny(mf_mixer_kind mixer) {
    mf_model_config c = mf_model_config_default();
    c.vocab = V; c.d_model = 16; c.n_heads = 2; c.n_layers = 2; c.d_ff = 24; c.max_seq = 8;
    c.mixer = mixer;
    if (mixer == MF_MIXER_RELATIVE || mixer == MF_MIXER_FEEDBACK) c.pos = MF_POS_NONE;
    if (mixer == MF_MIXER_RELATIVE) c.mem_len = 4; /* the memory holds each rank's own B rows */
    /* no key bias: its gradient is 0 in exact arithmetic (softmax ignores a constant added to a
       query's scores), so it is rounding noise, which Adam's m / sqrt(v) would blow up to O(lr) */
    if (mixer == MF_MIXER_SDPA) c.attn_bias = 0;
    return c;
}
/* the ids and targets of global rows [row0, row0 + rows) of step s (global batch G rows) */
static void batch(int s, int G, int row0, int rows, int32_t *x, int32_t *y) {
    for (int r = 0; r < rows; r++)
        for (int t = 0; t <= T; t++) {
            int32_t id = (int32_t)(mft_uniform(7, (uint64_t)s * G + row0 + r, t) * V);
            if (t < T) x[r * T + t] = id;
            if (t > 0) y[r * T + t - 1] = id;
        }
}
struct Run { mf_ctx *ctx; mf_model *m; mf_dist *d; int rows, row0, G; };
/* a run on the GPU (cpu: on the CPU, the MPI transport); comm MPI_COMM_NULL: one rank alone */
static int run_new(Run *R, mf_mixer_kind mixer, int cpu, MPI_Comm comm, const mf_dist_config *dc, int rows_per_rank) {
    mf_model_config c = tiny(mixer);
    char err[512];
    memset(R, 0, sizeof *R);
    R->rows = rows_per_rank; R->G = rows_per_rank;
    if (comm != MPI_COMM_NULL && !(R->d = mf_dist_new(comm, dc, err, sizeof err))) { printf("    mf_dist_new: %s\n", err); return -1; }
    R->ctx = mf_ctx_new(42);
    mf_set_threads(R->ctx, 1);
    if (!cpu) mf_ctx_set_device(R->ctx, MF_DEVICE_CUDA);
    R->m = mf_model_new(R->ctx, &c);
    if (!R->m || !mf_ok(R->ctx)) { printf("    %s\n", mf_error(R->ctx)); return -1; }
    if (R->d) {
        R->row0 = mf_dist_rank(R->d) * rows_per_rank;
        R->G = rows_per_rank * mf_dist_world(R->d);
        if (mf_dist_attach(R->d, R->ctx) < 0) { printf("    mf_dist_attach: %s\n", mf_dist_error(R->d)); return -1; }
    }
    return 0;
}
static void run_free(Run *R) {
    mf_dist_free(R->d);
    mf_model_free(R->m);
    mf_ctx_free(R->ctx);
}
static std::vector<float> host_copy(mf_ctx *ctx, const float *x) {
    std::vector<float> h((size_t)mf_param_count(ctx));
    mf__ddownload(ctx, h.data(), x, h.size() * sizeof(float));
    return h;
}
/* one training step on the run's rows of step s's global batch: the global mean loss (NaN on
   error); grads (when not NULL) gets the averaged flat gradient before clipping */
static double step(Run *R, int s, float clip, std::vector<float> *grads) {
    int32_t x[8 * B * T], y[8 * B * T];
    mf_optimizer o = mf_optimizer_default(MF_OPT_ADAM, 1e-3f);
    batch(s, R->G, R->row0, R->rows, x, y);
    mf_tensor *loss = mf_model_loss(R->m, x, y, R->rows, T);
    if (loss) mf_backward(R->ctx, loss);
    double sums[2] = {mf_ok(R->ctx) ? (double)mf_item(R->ctx, loss) * R->rows * T : 0, (double)(R->rows * T)};
    if (R->d && mf_dist_sync(R->d, R->ctx, sums, 2) < 0) return NAN;
    if (!mf_ok(R->ctx)) return NAN;
    if (grads) *grads = host_copy(R->ctx, mf_param_grads(R->ctx));
    if (R->d) {
        mf_dist_clip_grad_norm(R->d, R->ctx, clip);
        if (mf_dist_optimizer_step(R->d, R->ctx, &o) < 0) return NAN;
    } else {
        mf_clip_grad_norm(R->ctx, clip);
        if (mf_optimizer_step(R->ctx, &o) < 0) return NAN;
    }
    mf_zero_grad(R->ctx);
    mf_reset(R->ctx);
    return sums[0] / sums[1];
}
/* every parameter tensor of a against b: its largest difference relative to its largest value, or
   to a tenth of the model's largest where that is more (as tests/test_dist.c) */
static double worst(const mf_ctx *ctx, const std::vector<float> &a, const std::vector<float> &b) {
    double w = 0, big = 0;
    for (size_t k = 0; k < b.size(); k++) big = std::max(big, (double)fabs(b[k]));
    for (int i = 0; i < mf_param_tensors(ctx); i++) {
        const mf_tensor *p = mf_param_at(ctx, i);
        double e = mft_rel_err(a.data() + p->offset, b.data() + p->offset, p->ne, 0.1 * big + 1e-30);
        if (e > 1e-6 && getenv("MF_DIST_DEBUG")) printf("    %s differs by %.3g\n", p->name, e);
        if (!(e <= w)) w = e;
    }
    return w;
}
static std::vector<float> params_of(Run *R) { return host_copy(R->ctx, mf_param_data(R->ctx)); }

static void check_parity(mf_mixer_kind mixer) {
    Run D, R;
    mf_dist_config dc = mf_dist_config_default();
    dc.bucket_floats = 512; /* several buckets even for the tiny model */
    MFT_CHECK(run_new(&D, mixer, 0, MPI_COMM_WORLD, &dc, B) == 0);
    MFT_CHECK(run_new(&R, mixer, 0, MPI_COMM_NULL, NULL, B * g_world) == 0);
    if (mft__cur_bad) { run_free(&D); run_free(&R); return; }
    MFT_CHECK(worst(R.ctx, params_of(&D), params_of(&R)) == 0); /* the same initial parameters */
    double el = 0, eg0 = 0, eg = 0;
    int in_bw = 0;
    for (int s = 0; s < 3; s++) {
        std::vector<float> gd, gr;
        double ld = step(&D, s, 0.0f, &gd), lr = step(&R, s, 0.0f, &gr), e = worst(R.ctx, gd, gr);
        el = std::max(el, fabs(ld - lr)); /* NaN fails below */
        if (!(fabs(ld - lr) <= 1e-6)) el = 1;
        if (s == 0) eg0 = e, in_bw = D.d->last_in_backward; else if (!(e <= eg)) eg = e;
    }
    double ep = worst(R.ctx, params_of(&D), params_of(&R));
    printf("    rank %d, %s: losses differ by %.2g, step-0 gradients by %.2g (later steps %.2g), parameters after 3 "
           "Adam steps by %.2g; %d of %d buckets started in the last backward\n", g_rank, mf_mixer_name(mixer), el, eg0, eg, ep,
           in_bw, D.d->n_bk);
    MFT_CHECK(el <= 1e-6);
    MFT_CHECK(eg0 <= 1e-6);
    MFT_CHECK(eg <= 1e-5); /* the parameters differ by rounding from step 1 on, which the gradients carry */
    MFT_CHECK(ep <= 1e-6);
    MFT_CHECK(D.d->n_bk > 2);
    /* feedback: its recurrence reads the layers' weights from its own state, so their buckets wait
       for the end of the backward (docs/math.md §18.4) */
    if (mixer != MF_MIXER_FEEDBACK) MFT_CHECK(in_bw > 1);
    if (!mf_ok(D.ctx)) printf("    %s\n", mf_error(D.ctx));
    run_free(&D); run_free(&R);
}
static void test_parity_sdpa(void) { check_parity(MF_MIXER_SDPA); }
static void test_parity_relative_memory(void) { check_parity(MF_MIXER_RELATIVE); }
static void test_parity_fast_weights(void) { check_parity(MF_MIXER_FAST_WEIGHTS); }
static void test_parity_feedback(void) { check_parity(MF_MIXER_FEEDBACK); }

/* ZeRO-1 on the GPU (the moments of the shard on the device, clipping that bites) == plain data
   parallel on the GPU, and == ZeRO-1 on the CPU up to the backends' rounding */
static void test_zero1(void) {
    Run P, Z, C;
    mf_dist_config dc = mf_dist_config_default(), dz = dc;
    dz.zero1 = 1;
    MFT_CHECK(run_new(&P, MF_MIXER_SDPA, 0, MPI_COMM_WORLD, &dc, B) == 0);
    MFT_CHECK(run_new(&Z, MF_MIXER_SDPA, 0, MPI_COMM_WORLD, &dz, B) == 0);
    MFT_CHECK(run_new(&C, MF_MIXER_SDPA, 1, MPI_COMM_WORLD, &dz, B) == 0);
    if (!mft__cur_bad) {
        MFT_CHECK(Z.ctx->mom_n > 0 && Z.ctx->mom_n < mf_param_count(Z.ctx)); /* this rank's shard only */
        MFT_CHECK(Z.ctx->p_cap == Z.d->npad); /* the device buffers: the padded shards, no doubling */
        double ezp = 0, ezc = 0;
        for (int s = 0; s < 3; s++) {
            double lz = step(&Z, s, 0.5f, NULL), lp = step(&P, s, 0.5f, NULL), lc = step(&C, s, 0.5f, NULL);
            MFT_NEAR(lz, lp, 1e-6);
            MFT_NEAR(lz, lc, 1e-5);
        }
        MFT_CHECK(P.ctx->p_cap == P.ctx->p_used && Z.ctx->p_cap == Z.d->npad); /* mf_reset cut P's to fit, not Z's */
        ezp = worst(P.ctx, params_of(&Z), params_of(&P));
        ezc = worst(C.ctx, params_of(&Z), params_of(&C));
        printf("    rank %d: ZeRO-1 on the GPU vs plain data parallel: parameters after 3 clipped Adam steps differ by "
               "%.2g; vs ZeRO-1 on the CPU: %.2g\n", g_rank, ezp, ezc);
        MFT_CHECK(ezp <= 1e-6);
        MFT_CHECK(ezc <= 1e-5); /* 8e-8 seen */
    }
    run_free(&P); run_free(&Z); run_free(&C);
}

/* ZeRO-1 on the GPU saves on 2 ranks (the device moments and the relative memory's rows gathered),
   one GPU rank loads and continues the same loss curve; and back: 1 -> 2 ranks */
static void test_checkpoint_2_to_1(void) {
    Run D, R;
    mf_dist_config dz = mf_dist_config_default();
    double ld[2];
    dz.zero1 = 1;
    MFT_CHECK(run_new(&D, MF_MIXER_RELATIVE, 0, MPI_COMM_WORLD, &dz, B) == 0);
    if (mft__cur_bad) { run_free(&D); return; }
    for (int s = 0; s < 2; s++) step(&D, s, 0.0f, NULL);
    MFT_CHECK(mf_dist_save(D.d, D.m, g_ckpt, NULL, 0) == 0);
    for (int s = 2; s < 4; s++) ld[s - 2] = step(&D, s, 0.0f, NULL);
    if (g_rank == 0) {
        MFT_CHECK(run_new(&R, MF_MIXER_RELATIVE, 0, MPI_COMM_NULL, NULL, B * g_world) == 0);
        MFT_CHECK(mf_model_load(R.m, g_ckpt, 1) == 0);
        for (int s = 2; s < 4; s++) MFT_NEAR(step(&R, s, 0.0f, NULL), ld[s - 2], 1e-6);
        if (!mf_ok(R.ctx)) printf("    %s\n", mf_error(R.ctx));
        run_free(&R);
    }
    run_free(&D);
    MPI_Barrier(MPI_COMM_WORLD);
}
static void test_checkpoint_1_to_2(void) {
    Run D, R;
    mf_dist_config dz = mf_dist_config_default();
    double lr[2] = {0, 0};
    dz.zero1 = 1;
    if (g_rank == 0) {
        MFT_CHECK(run_new(&R, MF_MIXER_RELATIVE, 0, MPI_COMM_NULL, NULL, B * g_world) == 0);
        for (int s = 0; s < 2; s++) step(&R, s, 0.0f, NULL);
        MFT_CHECK(mf_model_save(R.m, g_ckpt, 1, NULL, 0) == 0);
        for (int s = 2; s < 4; s++) lr[s - 2] = step(&R, s, 0.0f, NULL);
        run_free(&R);
    }
    MPI_Bcast(lr, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MFT_CHECK(run_new(&D, MF_MIXER_RELATIVE, 0, MPI_COMM_WORLD, &dz, B) == 0);
    MFT_CHECK(mf_dist_load(D.d, D.m, g_ckpt) == 0);
    if (!mf_ok(D.ctx)) printf("    %s\n", mf_error(D.ctx));
    for (int s = 2; s < 4; s++) MFT_NEAR(step(&D, s, 0.0f, NULL), lr[s - 2], 1e-6);
    run_free(&D);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_world);
    mf_emu_set_device_count(g_world); /* one emulated GPU per rank, as mf_dist_new picks them */
    cudaSetDevice(g_rank);
    if (g_rank == 0) snprintf(g_ckpt, sizeof g_ckpt, "%s/mf_test_dist_cuda_%d.safetensors", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    MPI_Bcast(g_ckpt, (int)sizeof g_ckpt, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (g_world < 2 && g_rank == 0) printf("note: run with mpirun -np 2; one rank checks the single-rank case only\n");
    MFT_RUN(test_buckets_overlap_backward);
    MFT_RUN(test_ordering_checks_fail);
    MFT_RUN(test_collectives);
    MFT_RUN(test_device_of_local_rank);
    MFT_RUN(test_nccl_errors_named);
    MFT_RUN(test_parity_sdpa);
    MFT_RUN(test_parity_relative_memory);
    MFT_RUN(test_parity_fast_weights);
    MFT_RUN(test_parity_feedback);
    MFT_RUN(test_zero1);
    MFT_RUN(test_checkpoint_2_to_1);
    MFT_RUN(test_checkpoint_1_to_2);
    if (g_rank == 0) remove(g_ckpt);
    int bad = mft_finish() != 0, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any;
}
