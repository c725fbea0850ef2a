/* Data-parallel training over MPI ([mf:dist]; docs/math.md §18.3-18.7). Run by tests/test_dist.sh
 * under `mpirun -np 2`; built with mpicc (the Makefile's rule for build/dist/). Every rank also
 * trains the one-process reference on the whole global batch, so each compares on its own:
 *   2 ranks x B rows == 1 process x 2B rows: losses, every averaged gradient, the parameters after
 *   3 Adam steps (sdpa, relative with memory, fast_weights, feedback); the buckets (more than one,
 *   started during the backward); ZeRO-1 == plain data parallel; checkpoints 2 -> 1 and 1 -> 2 ranks
 *   continue the same loss curve; a memory whose rows do not split is refused; a failing rank (an
 *   unreadable checkpoint, a NaN with check-finite) fails every rank with its message; a mismatched
 *   config is refused. */
#define METAFORMER_IMPLEMENTATION
#ifndef METAFORMER_MPI
#define METAFORMER_MPI
#endif
#include "metaformer.h"
#include "mf_test.h"
#include <string.h>
#include <stdlib.h>
#include <unistd.h>

#define V 13
#define T 6
#define B 2 /* rows per rank */

static int rank, world;
static char ckpt[256];

static mf_model_config tiny(mf_mixer_kind mixer) {
    mf_model_config c = mf_model_config_default();
    c.vocab = V; c.d_model = 16; c.n_heads = 2; c.n_layers = 2; c.d_ff = 24; c.max_seq = 8;
    c.mixer = mixer;
    if (mixer == MF_MIXER_RELATIVE || mixer == MF_MIXER_FEEDBACK) c.pos = MF_POS_NONE;
    if (mixer == MF_MIXER_RELATIVE) c.mem_len = 4;
    /* no key bias: its gradient is 0 in exact arithmetic (softmax ignores a constant added to a
       query's scores), so it is rounding noise, which Adam's m / sqrt(v) would blow up to O(lr) */
    if (mixer == MF_MIXER_SDPA) c.attn_bias = 0;
    return c;
}

/* the ids and targets of global rows [row0, row0 + rows) of step s (global batch G rows) */
static void batch(int s, int G, int row0, int rows, int32_t *x, int32_t *y) {
    int r, t;
    for (r = 0; r < rows; r++)
        for (t = 0; t <= T; t++) {
            int32_t id = (int32_t)(mft_uniform(7, (uint64_t)s * G + row0 + r, t) * V);
            if (t < T) x[r * T + t] = id;
            if (t > 0) y[r * T + t - 1] = id;
        }
}

typedef struct run {
    mf_ctx *ctx;
    mf_model *m;
    mf_dist *d;      /* NULL: one process */
    int rows, row0, G;
} run;

static int run_new(run *R, mf_mixer_kind mixer, MPI_Comm comm, const mf_dist_config *dc, int rows_per_rank) {
    mf_model_config c = tiny(mixer);
    char err[512];
    memset(R, 0, sizeof *R);
    R->ctx = mf_ctx_new(42);
    mf_set_threads(R->ctx, 1);
    R->m = mf_model_new(R->ctx, &c);
    R->rows = rows_per_rank;
    if (comm != MPI_COMM_NULL) {
        R->d = mf_dist_new(comm, dc, err, sizeof err);
        if (!R->d) { printf("    mf_dist_new: %s\n", err); return -1; }
        R->row0 = mf_dist_rank(R->d) * rows_per_rank;
        R->G = rows_per_rank * mf_dist_world(R->d);
        if (mf_dist_attach(R->d, R->ctx) < 0) { printf("    mf_dist_attach: %s\n", mf_dist_error(R->d)); return -1; }
    } else R->G = rows_per_rank;
    return R->m && mf_ok(R->ctx) ? 0 : -1;
}
static void run_free(run *R) {
    mf_dist_free(R->d);
    mf_model_free(R->m);
    mf_ctx_free(R->ctx);
}

/* one training step on the run's rows of step s's global batch: the global mean loss (NaN on
   error); grads (when not NULL) gets the averaged flat gradient before clipping */
static double step(run *R, int s, float clip, float *grads) {
    int32_t x[8 * B * T], y[8 * B * T];
    double sums[2];
    mf_optimizer o = mf_optimizer_default(MF_OPT_ADAM, 1e-3f);
    mf_tensor *loss;
    batch(s, R->G, R->row0, R->rows, x, y);
    loss = mf_model_loss(R->m, x, y, R->rows, T);
    if (loss) mf_backward(R->ctx, loss);
    sums[0] = mf_ok(R->ctx) ? (double)mf_item(R->ctx, loss) * R->rows * T : 0; sums[1] = R->rows * T;
    if (R->d && mf_dist_sync(R->d, R->ctx, sums, 2) < 0) return NAN;
    if (!mf_ok(R->ctx)) return NAN;
    if (grads) memcpy(grads, mf_param_grads(R->ctx), (size_t)mf_param_count(R->ctx) * sizeof(float));
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

/* every parameter tensor of a against b (flat buffers of the same model): its largest difference
   relative to its largest value, or to a tenth of the model's largest where that is more (a tensor
   whose gradient is rounding noise around 0 compares absolutely) */
static double worst(const mf_ctx *ctx, const float *a, const float *b) {
    double w = 0, big = 0;
    int i;
    int64_t k;
    for (k = 0; k < mf_param_count(ctx); k++) if (fabs(b[k]) > big) big = fabs(b[k]);
    for (i = 0; i < mf_param_tensors(ctx); i++) {
        const mf_tensor *p = mf_param_at(ctx, i);
        double e = mft_rel_err(a + p->offset, b + p->offset, p->ne, 0.1 * big + 1e-30);
        if (e > 1e-6 && getenv("MF_DIST_DEBUG")) printf("    %s differs by %.3g\n", p->name, e);
        if (!(e <= w)) w = e;
    }
    return w;
}

/* 2 ranks x B == 1 process x 2B: losses, averaged gradients, parameters after 3 Adam steps */
static void check_parity(mf_mixer_kind mixer) {
    run D, R;
    mf_dist_config dc = mf_dist_config_default();
    float *gd, *gr;
    int s, n;
    dc.bucket_floats = 512; /* several buckets even for the tiny model */
    MFT_CHECK(run_new(&D, mixer, MPI_COMM_WORLD, &dc, B) == 0);
    MFT_CHECK(run_new(&R, mixer, MPI_COMM_NULL, NULL, B * world) == 0);
    if (mft__cur_bad) { run_free(&D); run_free(&R); return; }
    n = (int)mf_param_count(R.ctx);
    MFT_CHECK(n == (int)mf_param_count(D.ctx));
    gd = (float *)malloc((size_t)n * sizeof(float)); gr = (float *)malloc((size_t)n * sizeof(float));
    MFT_CHECK(worst(R.ctx, mf_param_data(D.ctx), mf_param_data(R.ctx)) == 0); /* the same initial parameters */
    for (s = 0; s < 3; s++) {
        double ld = step(&D, s, 0.0f, gd), lr = step(&R, s, 0.0f, gr), eg = worst(R.ctx, gd, gr);
        MFT_NEAR(ld, lr, 1e-6);
        /* from step 1 on the parameters differ by rounding (<= 1e-6), which the gradients of the
           next step carry a few times larger (fast_weights: 3e-6) */
        if (!(eg <= (s == 0 ? 1e-6 : 1e-5))) { printf("    %s step %d: gradients differ by %.3g\n", mf_mixer_name(mixer), s, eg); mft__cur_bad = 1; }
        if (s == 0) { /* the buckets: several, started during the backward */
            MFT_CHECK(D.d->n_bk > 2);
            int b; for (b = 0; b < D.d->n_bk && getenv("MF_DIST_DEBUG"); b++) printf("    bucket %d [%lld, %lld) ready_at %d\n", b, (long long)D.d->bk[b].lo, (long long)D.d->bk[b].hi, D.d->bk[b].ready_at);
            /* feedback: its recurrence reads the layers' weights from its own state, so their
               buckets wait for the end of the backward (docs/math.md §18.4) */
            if (mixer != MF_MIXER_FEEDBACK) MFT_CHECK(D.d->last_in_backward > 1);
        }
    }
    {
        double ep = worst(R.ctx, mf_param_data(D.ctx), mf_param_data(R.ctx));
        if (!(ep <= 1e-6)) { printf("    %s: parameters after 3 steps differ by %.3g\n", mf_mixer_name(mixer), ep); mft__cur_bad = 1; }
    }
    if (!mf_ok(D.ctx)) printf("    %s\n", mf_error(D.ctx));
    free(gd); free(gr);
    run_free(&D); run_free(&R);
}
static void test_parity_sdpa(void) { check_parity(MF_MIXER_SDPA); }
static void test_parity_relative_memory(void) { check_parity(MF_MIXER_RELATIVE); }
static void test_parity_fast_weights(void) { check_parity(MF_MIXER_FAST_WEIGHTS); }
static void test_parity_feedback(void) { check_parity(MF_MIXER_FEEDBACK); }

/* gradient accumulation: each rank runs its B rows as B micro-batches of one row, the averages
   held back (mf_dist_no_sync) until the last backward; == one process on the 2B rows. A second
   backward after the averages started is refused by mf_dist_sync. */
static void test_no_sync_accumulation(void) {
    run D, R;
    mf_dist_config dc = mf_dist_config_default();
    int32_t x[B * T], y[B * T];
    float *gd, *gr;
    int i, n;
    dc.bucket_floats = 512;
    MFT_CHECK(run_new(&D, MF_MIXER_SDPA, MPI_COMM_WORLD, &dc, B) == 0);
    MFT_CHECK(run_new(&R, MF_MIXER_SDPA, MPI_COMM_NULL, NULL, B * world) == 0);
    if (mft__cur_bad) { run_free(&D); run_free(&R); return; }
    n = (int)mf_param_count(R.ctx);
    gd = (float *)malloc((size_t)n * sizeof(float)); gr = (float *)malloc((size_t)n * sizeof(float));
    step(&R, 0, 0.0f, gr);
    batch(0, D.G, D.row0, B, x, y);
    for (i = 0; i < B; i++) {
        mf_tensor *loss;
        mf_dist_no_sync(D.d, i < B - 1);
        loss = mf_model_loss(D.m, x + i * T, y + i * T, 1, T);
        mf_backward(D.ctx, mf_scale(D.ctx, loss, 1.0f / B));
    }
    mf_dist_no_sync(D.d, 0);
    MFT_CHECK(mf_dist_sync(D.d, D.ctx, NULL, 0) == 0);
    MFT_CHECK(D.d->last_in_backward > 1);
    memcpy(gd, mf_param_grads(D.ctx), (size_t)n * sizeof(float));
    MFT_CHECK(worst(R.ctx, gd, gr) <= 1e-6);
    mf_zero_grad(D.ctx); mf_reset(D.ctx);
    for (i = 0; i < 2; i++) mf_backward(D.ctx, mf_model_loss(D.m, x, y, B, T)); /* no mf_dist_no_sync */
    MFT_CHECK(mf_dist_sync(D.d, D.ctx, NULL, 0) == -1 && strstr(mf_dist_error(D.d), "second mf_backward"));
    free(gd); free(gr);
    run_free(&D); run_free(&R);
}

/* ZeRO-1 (sharded moments, clipping that bites) == plain data parallel */
static void test_zero1(void) {
    run P, Z;
    mf_dist_config dc = mf_dist_config_default(), dz = dc;
    int s;
    dz.zero1 = 1;
    MFT_CHECK(run_new(&P, MF_MIXER_SDPA, MPI_COMM_WORLD, &dc, B) == 0);
    MFT_CHECK(run_new(&Z, MF_MIXER_SDPA, MPI_COMM_WORLD, &dz, B) == 0);
    if (!mft__cur_bad) {
        MFT_CHECK(Z.ctx->mom_n > 0 && Z.ctx->mom_n < mf_param_count(Z.ctx)); /* this rank's shard only */
        for (s = 0; s < 3; s++) MFT_NEAR(step(&Z, s, 0.5f, NULL), step(&P, s, 0.5f, NULL), 1e-6);
        MFT_CHECK(worst(P.ctx, mf_param_data(Z.ctx), mf_param_data(P.ctx)) <= 1e-6);
    }
    run_free(&P); run_free(&Z);
}

/* save on 2 ranks, load in one process (and ZeRO-1's moments, the relative memory's rows): the
   same loss curve */
static void test_checkpoint_2_to_1(void) {
    run D, R;
    mf_dist_config dz = mf_dist_config_default();
    double ld[2], lr;
    int s;
    dz.zero1 = 1;
    MFT_CHECK(run_new(&D, MF_MIXER_RELATIVE, MPI_COMM_WORLD, &dz, B) == 0);
    if (mft__cur_bad) { run_free(&D); return; }
    for (s = 0; s < 2; s++) step(&D, s, 0.0f, NULL);
    MFT_CHECK(mf_dist_save(D.d, D.m, ckpt, NULL, 0) == 0);
    for (s = 2; s < 4; s++) ld[s - 2] = step(&D, s, 0.0f, NULL);
    if (rank == 0) {
        MFT_CHECK(run_new(&R, MF_MIXER_RELATIVE, MPI_COMM_NULL, NULL, B * world) == 0);
        MFT_CHECK(mf_model_load(R.m, ckpt, 1) == 0);
        for (s = 2; s < 4; s++) { lr = step(&R, s, 0.0f, NULL); MFT_NEAR(lr, ld[s - 2], 1e-6); }
        if (!mf_ok(R.ctx)) printf("    %s\n", mf_error(R.ctx));
        run_free(&R);
    }
    run_free(&D);
    MPI_Barrier(MPI_COMM_WORLD);
}

/* save in one process, load on 2 ranks (ZeRO-1: each takes its shard and its rows) */
static void test_checkpoint_1_to_2(void) {
    run D, R;
    mf_dist_config dz = mf_dist_config_default();
    double lr[2] = {0, 0};
    int s;
    dz.zero1 = 1;
    if (rank == 0) {
        MFT_CHECK(run_new(&R, MF_MIXER_RELATIVE, MPI_COMM_NULL, NULL, B * world) == 0);
        for (s = 0; s < 2; s++) step(&R, s, 0.0f, NULL);
        MFT_CHECK(mf_model_save(R.m, ckpt, 1, NULL, 0) == 0);
        for (s = 2; s < 4; s++) lr[s - 2] = step(&R, s, 0.0f, NULL);
        run_free(&R);
    }
    MPI_Bcast(lr, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MFT_CHECK(run_new(&D, MF_MIXER_RELATIVE, MPI_COMM_WORLD, &dz, B) == 0);
    MFT_CHECK(mf_dist_load(D.d, D.m, ckpt) == 0);
    for (s = 2; s < 4; s++) MFT_NEAR(step(&D, s, 0.0f, NULL), lr[s - 2], 1e-6);
    run_free(&D);
}

/* a memory of 3 rows does not split over 2 ranks: refused on every rank, saying why */
static void test_checkpoint_rows_refused(void) {
    run D, R;
    if (rank == 0) {
        MFT_CHECK(run_new(&R, MF_MIXER_RELATIVE, MPI_COMM_NULL, NULL, 3) == 0);
        step(&R, 0, 0.0f, NULL);
        MFT_CHECK(mf_model_save(R.m, ckpt, 1, NULL, 0) == 0);
        run_free(&R);
    }
    MFT_CHECK(run_new(&D, MF_MIXER_RELATIVE, MPI_COMM_WORLD, NULL, B) == 0);
    MFT_CHECK(mf_dist_load(D.d, D.m, ckpt) == -1);
    MFT_CHECK(strstr(mf_dist_error(D.d), "rank 0: ") && strstr(mf_dist_error(D.d), "3 batch rows"));
    run_free(&D);
}

/* rank 1 cannot read its checkpoint: both ranks fail with rank 1's reason */
static void test_failing_rank_file(void) {
    run D;
    MFT_CHECK(run_new(&D, MF_MIXER_SDPA, MPI_COMM_WORLD, NULL, B) == 0);
    MFT_CHECK(mf_dist_save(D.d, D.m, ckpt, NULL, 0) == 0);
    MFT_CHECK(mf_dist_load(D.d, D.m, rank == 1 ? "/nonexistent/dir/ckpt.safetensors" : ckpt) == -1);
    MFT_CHECK(strncmp(mf_dist_error(D.d), "rank 1: ", 8) == 0 && strstr(mf_dist_error(D.d), "/nonexistent/dir"));
    MFT_CHECK(!mf_ok(D.ctx) && strncmp(mf_error(D.ctx), "rank 1: ", 8) == 0);
    run_free(&D);
}

/* a NaN in rank 1's parameters with check-finite: both ranks' sync fails naming rank 1 */
static void test_failing_rank_nan(void) {
    run D;
    MFT_CHECK(run_new(&D, MF_MIXER_SDPA, MPI_COMM_WORLD, NULL, B) == 0);
    mf_set_check_finite(D.ctx, 1);
    if (rank == 1) mf_param_find(D.ctx, "ln_f.weight")->data[3] = NAN;
    MFT_CHECK(isnan(step(&D, 0, 0.0f, NULL))); /* failed, on both ranks */
    MFT_CHECK(strncmp(mf_dist_error(D.d), "rank 1: ", 8) == 0);
    if (mft__cur_bad) printf("    %s\n", mf_dist_error(D.d));
    run_free(&D);
}

/* rank 1 builds another d_model: refused by attach on both ranks, naming the parameter */
static void test_mismatched_config(void) {
    mf_model_config c = tiny(MF_MIXER_SDPA);
    mf_ctx *ctx = mf_ctx_new(1);
    mf_model *m;
    mf_dist *d = mf_dist_new(MPI_COMM_WORLD, NULL, NULL, 0);
    if (rank == 1) c.d_ff = 20;
    m = mf_model_new(ctx, &c);
    MFT_CHECK(d && m && mf_dist_attach(d, ctx) == -1);
    MFT_CHECK(strncmp(mf_dist_error(d), "rank 1: ", 8) == 0 && strstr(mf_dist_error(d), "on rank 0"));
    if (rank == 0) printf("    (the message: %s)\n", mf_dist_error(d));
    mf_dist_free(d); mf_model_free(m); mf_ctx_free(ctx);
}

/* rank 0 keeps the seed (one process = world 1), the others draw other dropout masks */
static void test_seed(void) {
    mf_dist *d = mf_dist_new(MPI_COMM_WORLD, NULL, NULL, 0);
    MFT_CHECK(d && (mf_dist_seed(d, 5) == 5) == (rank == 0));
    MFT_CHECK(mf_dist_world(d) == world && mf_dist_rank(d) == rank);
    mf_dist_free(d);
}

int main(int argc, char **argv) {
    int rc;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (rank == 0) snprintf(ckpt, sizeof ckpt, "%s/mf_test_dist_%d.safetensors", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    MPI_Bcast(ckpt, (int)sizeof ckpt, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank != 0) { /* rank 0 alone prints the results; the others only fail loudly */
        if (!freopen("/dev/null", "w", stdout)) return 1;
    }
    MFT_RUN(test_seed);
    MFT_RUN(test_parity_sdpa);
    MFT_RUN(test_parity_relative_memory);
    MFT_RUN(test_parity_fast_weights);
    MFT_RUN(test_parity_feedback);
    MFT_RUN(test_no_sync_accumulation);
    MFT_RUN(test_zero1);
    MFT_RUN(test_checkpoint_2_to_1);
    MFT_RUN(test_checkpoint_1_to_2);
    MFT_RUN(test_checkpoint_rows_refused);
    MFT_RUN(test_failing_rank_file);
    MFT_RUN(test_failing_rank_nan);
    MFT_RUN(test_mismatched_config);
    if (rank == 0) remove(ckpt);
    rc = mft_finish();
    /* a failure on another rank fails the job too */
    MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 && rc && !mft__fail) printf("FAIL another rank failed a check\n1 passed, 1 failed\n");
    MPI_Finalize();
    return rc;
}
