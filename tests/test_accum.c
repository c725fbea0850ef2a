/* test_accum.c - gradient accumulation (docs/math.md §18.2): one step on a batch of 2B rows against
   two accumulated micro-batches of B rows (mf_model_loss_part weights each by its share of the
   counted targets; a memory model's micro-batch i uses memory rows [iB, (i + 1)B) of 2B through
   mf_model_memory_rows), for one model of each family - sdpa, relative with memory (Transformer-XL
   and compressive), fast_weights, feedback - over 3 Adam steps, so the memories of earlier steps are
   used: the losses agree to 1e-6, every gradient and the parameters to 1e-5 relative (float rounding:
   see TOL), also with ignored targets (-1) in uneven amounts.
   examples/common.h's train_step in micro-batches gives the same parameters bit for bit. The
   memory-row misuses fail with a message. */
#define _POSIX_C_SOURCE 200809L
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#define EX_PROG "test_accum"
#include "examples/common.h"
#include "mf_test.h"

enum { V = 11, B = 2, T = 8, STEPS = 3 };
/* Losses agree to 1e-7 (checked at 1e-6). Gradients and parameters: the largest error of the whole
   flat buffer relative to its largest value was 1.2e-6 over every case and several Adam eps (float32:
   each half's sums round differently, and Adam's first steps are nearly sign descent, so an element
   whose gradient is at the rounding level moves by up to lr either way); checked at 1e-5. A wrong
   weight (the plain mean of the micro-batches with -1 targets, or a memory row read twice) errs by
   1e-2 or more. */
#define TOL_LOSS 1e-6
#define TOL 1e-5

static mf_model_config small_config(const char *mixer) {
    mf_model_config c = mf_model_config_default();
    c.vocab = V; c.d_model = 16; c.n_heads = 2; c.n_layers = 2; c.d_ff = 32; c.max_seq = T;
    c.mixer = (mf_mixer_kind)mf_mixer_from_name(mixer);
    if (c.mixer == MF_MIXER_RELATIVE) { c.pos = MF_POS_NONE; c.mem_len = 6; }
    /* sdpa's key bias has a zero gradient in exact arithmetic (softmax ignores a shift shared by all
       keys): its rounding noise, different in the two runs, becomes lr-sized steps under Adam's
       normalisation, so the parameters could not agree; leave it out */
    if (c.mixer == MF_MIXER_SDPA) c.attn_bias = 0;
    return c;
}

/* the batch of step s: 2B rows of random ids; with holes, 7 of the first micro-batch's targets and 1
   of the second's are -1 */
static void make_batch(int s, int holes, int32_t *x, int32_t *y) {
    for (int i = 0; i < 2 * B * T; i++) {
        x[i] = (int32_t)(mft_uniform(17, (uint64_t)s, (uint64_t)i) * V);
        y[i] = (int32_t)(mft_uniform(18, (uint64_t)s, (uint64_t)i) * V);
    }
    if (holes) {
        for (int i = 0; i < 7; i++) y[3 + 2 * i] = -1;
        y[B * T + 5] = -1;
    }
}

typedef struct run { mf_ctx *ctx; mf_model *m; float loss[STEPS]; float *grads[STEPS]; float *params; } run;

/* STEPS Adam steps on the batches, each in `micro` micro-batches of 2B / micro rows */
static run train(const mf_model_config *c, int micro, int holes, int use_train_step) {
    run r;
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 1e-2f);
    int32_t x[2 * B * T], y[2 * B * T];
    int rows = 2 * B, mb = rows / micro;
    memset(&r, 0, sizeof r);
    r.ctx = mf_ctx_new(5);
    mf_set_threads(r.ctx, 1);
    r.m = mf_model_new(r.ctx, c);
    for (int s = 0; s < STEPS && mf_ok(r.ctx); s++) {
        int64_t counted = 0, n = mf_param_count(r.ctx);
        make_batch(s, holes, x, y);
        if (use_train_step) {
            float ar;
            train_step(r.ctx, r.m, &opt, 0, x, y, rows, mb, T, &r.loss[s], &ar, NULL, NULL);
            continue;
        }
        for (int i = 0; i < rows * T; i++) counted += y[i] != -1;
        for (int i = 0; i < micro; i++) {
            mf_tensor *l;
            if (micro > 1) mf_model_memory_rows(r.m, i * mb, rows);
            l = mf_model_loss_part(r.m, x + i * mb * T, y + i * mb * T, mb, T, counted, rows);
            mf_backward(r.ctx, l);
            r.loss[s] += mf_item(r.ctx, l);
            mf_reset(r.ctx);
        }
        mf_model_memory_rows(r.m, 0, 0);
        r.grads[s] = (float *)malloc((size_t)n * sizeof(float));
        memcpy(r.grads[s], mf_param_grads(r.ctx), (size_t)n * sizeof(float));
        mf_optimizer_step(r.ctx, &opt);
        mf_zero_grad(r.ctx);
    }
    if (!mf_ok(r.ctx)) printf("    %s\n", mf_error(r.ctx));
    r.params = (float *)malloc((size_t)mf_param_count(r.ctx) * sizeof(float));
    memcpy(r.params, mf_param_data(r.ctx), (size_t)mf_param_count(r.ctx) * sizeof(float));
    return r;
}
static void run_free(run *r) {
    for (int s = 0; s < STEPS; s++) free(r->grads[s]);
    free(r->params);
    mf_model_free(r->m);
    mf_ctx_free(r->ctx);
}

/* the error of a flat buffer (every gradient, or every parameter) relative to its largest value; with
   ACCUM_VERBOSE set, the tensors that contribute most */
static double worst(mf_ctx *ctx, const float *a, const float *b) {
    double e = mft_rel_err(a, b, mf_param_count(ctx), 1e-30);
    for (int i = 0; getenv("ACCUM_VERBOSE") && i < mf_param_tensors(ctx); i++) {
        const mf_tensor *p = mf_param_at(ctx, i);
        double t = mft_rel_err(a + p->offset, b + p->offset, p->ne, 1e-30);
        if (t > 1e-6) printf("      %s %.3g\n", p->name, t);
    }
    return e;
}

static void check_family(const mf_model_config *c, const char *name) {
    for (int holes = 0; holes < 2; holes++) {
        run big = train(c, 1, holes, 0), acc = train(c, 2, holes, 0);
        double gerr = 0, perr, lerr = 0;
        MFT_CHECK(mf_ok(big.ctx) && mf_ok(acc.ctx));
        if (!mf_ok(big.ctx) || !mf_ok(acc.ctx)) { run_free(&big); run_free(&acc); return; }
        for (int s = 0; s < STEPS; s++) {
            double g = worst(big.ctx, acc.grads[s], big.grads[s]), l = fabs(acc.loss[s] - big.loss[s]) / fabs(big.loss[s]);
            if (g > gerr) gerr = g;
            if (l > lerr) lerr = l;
        }
        perr = worst(big.ctx, acc.params, big.params);
        printf("    %-12s %s: max relative error: losses %.2g, gradients %.2g, parameters after %d steps %.2g\n", name,
               holes ? "with -1 targets" : "all targets   ", lerr, gerr, STEPS, perr);
        MFT_CHECK(lerr <= TOL_LOSS && gerr <= TOL && perr <= TOL);
        MFT_CHECK(big.loss[STEPS - 1] != big.loss[0]); /* the steps changed something */
        run_free(&big); run_free(&acc);
    }
}

static void test_sdpa(void) { mf_model_config c = small_config("sdpa"); check_family(&c, "sdpa"); }
static void test_relative(void) { mf_model_config c = small_config("relative"); check_family(&c, "relative"); }
static void test_compressive(void) {
    mf_model_config c = small_config("relative");
    c.mem_len = 4; c.compressive = 1; c.c_mem_len = 4; c.compression_rate = 2;
    check_family(&c, "compressive");
}
static void test_fast_weights(void) { mf_model_config c = small_config("fast_weights"); check_family(&c, "fast_weights"); }
static void test_feedback(void) { mf_model_config c = small_config("feedback"); check_family(&c, "feedback"); }

/* train_step (examples/common.h) in micro-batches = the same steps written out with the library calls */
static void test_train_step(void) {
    mf_model_config c = small_config("relative");
    run a = train(&c, 2, 1, 0), b = train(&c, 2, 1, 1);
    MFT_CHECK(mf_ok(a.ctx) && mf_ok(b.ctx));
    MFT_CHECK(memcmp(a.params, b.params, (size_t)mf_param_count(a.ctx) * sizeof(float)) == 0);
    for (int s = 0; s < STEPS; s++) MFT_NEAR(b.loss[s], a.loss[s], 1e-7);
    run_free(&a); run_free(&b);
}

/* misuse of memory rows: each fails with a message naming the problem */
static void test_memory_rows_errors(void) {
    mf_model_config c = small_config("relative");
    mf_ctx *ctx = mf_ctx_new(1);
    mf_model *m = mf_model_new(ctx, &c);
    int32_t x[2 * B * T] = {0};
    MFT_CHECK(mf_model_memory_rows(m, 2, 2) < 0 && strstr(mf_error(ctx), "row0 2, rows 2"));
    mf_clear_error(ctx);
    MFT_CHECK(mf_model_memory_rows(m, -1, 0) < 0);
    mf_clear_error(ctx);
    MFT_CHECK(mf_model_memory_rows(NULL, 0, 0) < 0);
    mf_model_memory_rows(m, 3, 4); /* 2 rows at row 3 of 4 */
    MFT_CHECK(!mf_model_forward(m, x, B, T) && strstr(mf_error(ctx), "runs past the memory"));
    mf_clear_error(ctx);
    mf_model_memory_rows(m, 0, 4);
    MFT_CHECK(mf_model_forward(m, x, B, T) != NULL); /* rows 0, 1 of the step */
    mf_reset(ctx);
    MFT_CHECK(!mf_model_forward(m, x, B, T) && strstr(mf_error(ctx), "already updated in this step"));
    mf_clear_error(ctx);
    MFT_CHECK(mf_model_save(m, "test_accum.st", 1, NULL, 0) < 0 && strstr(mf_error(ctx), "middle of a step"));
    mf_clear_error(ctx);
    mf_model_memory_rows(m, 2, 4);
    MFT_CHECK(!mf_model_forward(m, x, B, T - 3) && strstr(mf_error(ctx), "same length T")); /* 5 memories, not 6 */
    mf_clear_error(ctx);
    mf_model_reset_memory(m); /* a new start: every row free again */
    mf_model_memory_rows(m, 0, 0);
    MFT_CHECK(mf_model_forward(m, x, 2 * B, T) != NULL);
    mf_model_free(m);
    mf_ctx_free(ctx);
    remove("test_accum.st");
}

/* a step's memories saved after the last micro-batch and loaded equal the running model's */
static void test_memory_rows_save(void) {
    mf_model_config c = small_config("relative");
    mf_ctx *a = mf_ctx_new(1), *b = mf_ctx_new(1);
    mf_model *ma = mf_model_new(a, &c), *mb = mf_model_new(b, &c);
    int32_t x[2 * B * T], y[2 * B * T];
    mf_tensor *la, *lb;
    make_batch(0, 0, x, y);
    for (int i = 0; i < 2; i++) {
        mf_model_memory_rows(ma, i * B, 2 * B);
        mf_model_forward(ma, x + i * B * T, B, T);
        mf_reset(a);
    }
    MFT_CHECK(mf_model_save(ma, "test_accum.st", 1, NULL, 0) == 0);
    MFT_CHECK(mf_model_load(mb, "test_accum.st", 1) == 0);
    mf_model_memory_rows(ma, 0, 0);
    make_batch(1, 0, x, y);
    la = mf_model_loss(ma, x, y, 2 * B, T); /* the whole memory in one call: reads both halves */
    lb = mf_model_loss(mb, x, y, 2 * B, T);
    MFT_CHECK(la && lb && mf_item(a, la) == mf_item(b, lb));
    mf_model_free(ma); mf_model_free(mb); mf_ctx_free(a); mf_ctx_free(b);
    remove("test_accum.st");
}

int main(void) {
    MFT_RUN(test_sdpa);
    MFT_RUN(test_relative);
    MFT_RUN(test_compressive);
    MFT_RUN(test_fast_weights);
    MFT_RUN(test_feedback);
    MFT_RUN(test_train_step);
    MFT_RUN(test_memory_rows_errors);
    MFT_RUN(test_memory_rows_save);
    return mft_finish();
}
