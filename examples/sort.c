/* sort.c - a MetaFormer language model learns to sort arrays of 0, 1 and 2 (docs/math.md §13).
   build: cc -O2 -march=native -fopenmp -I.. sort.c -o sort -lm   (or `make examples`)
   run:   ./build/sort --mixer metric          (`make demo`; try sdpa, quadratic, pool, identity)

   Every step draws a fresh random batch of W = 11 tokens. Two forms of the task:
     solvable (default): the model reads x followed by sorted(x) and, from position W-1 on, predicts
                         the next sorted token; every input token is visible, so 100% is possible.
     seed:               the source's form: at position w (seeing x[0..w] only) predict sorted(x)[w];
                         a causal model cannot do better than ~85.7% token accuracy there. */
#define _POSIX_C_SOURCE 200809L /* isatty, in common.h */
#define METAFORMER_IMPLEMENTATION
#include "../metaformer.h"
#define EX_PROG "sort"
#include "common.h" /* sort_batch, sort_evaluate: the task's data, shared with ablate.c */

#define SEED_CEILING 85.7 /* best token accuracy of a causal model on the seed form (docs/math.md §13) */

typedef struct options {
    const char *mixer, *form, *precision;
    int steps, batch, d_model, heads, layers, d_ff, threads, eval_batches;
    float lr;
    unsigned long long seed;
} options;

/* the library's mixer names, "a|b|c" */
static void print_mixers(const char *sep) {
    int k;
    for (k = 0; k < mf_mixer_count(); k++) fprintf(stderr, "%s%s", k ? sep : "", mf_mixer_name((mf_mixer_kind)k));
}

static void usage(const char *argv0) {
    fprintf(stderr, "usage: %s [--mixer ", argv0);
    print_mixers("|");
    fprintf(stderr,
            "] [--form solvable|seed] [--precision fp32|bf16]\n"
            "          [--steps N] [--batch N] [--lr F] [--d-model N] [--heads N] [--layers N] [--d-ff N]\n"
            "          [--seed N] [--threads N] [--eval-batches N]\n");
}

/* Parse "--name value" pairs; returns 0, or -1 after printing what is wrong. */
static int parse(int argc, char **argv, options *o) {
    int i;
    for (i = 1; i < argc; i++) {
        const char *name = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        long n = 0;
        int *dst = NULL, min = 1;
        if (!strcmp(name, "--help") || !strcmp(name, "-h")) { usage(argv[0]); exit(0); }
        if (!val) { fprintf(stderr, "error: %s needs a value\n", name); return -1; }
        i++;
        if (!strcmp(name, "--mixer")) { o->mixer = val; continue; }
        if (!strcmp(name, "--form")) { o->form = val; continue; }
        if (!strcmp(name, "--precision")) { o->precision = val; continue; }
        if (!strcmp(name, "--lr")) {
            double lr = strtod(val, &end);
            if (end == val || *end || !(lr > 0 && lr < 10)) {
                fprintf(stderr, "error: --lr %s: need a number in (0, 10)\n", val);
                return -1;
            }
            o->lr = (float)lr;
            continue;
        }
        if (!strcmp(name, "--seed")) {
            o->seed = strtoull(val, &end, 10);
            if (end == val || *end || val[0] == '-') {
                fprintf(stderr, "error: --seed %s: need a non-negative integer\n", val);
                return -1;
            }
            continue;
        }
        if (!strcmp(name, "--steps")) dst = &o->steps;
        else if (!strcmp(name, "--batch")) dst = &o->batch;
        else if (!strcmp(name, "--d-model")) dst = &o->d_model;
        else if (!strcmp(name, "--heads")) dst = &o->heads;
        else if (!strcmp(name, "--layers")) dst = &o->layers;
        else if (!strcmp(name, "--d-ff")) dst = &o->d_ff;
        else if (!strcmp(name, "--eval-batches")) dst = &o->eval_batches;
        else if (!strcmp(name, "--threads")) { dst = &o->threads; min = 0; }
        else { fprintf(stderr, "error: unknown option %s\n", name); usage(argv[0]); return -1; }
        n = strtol(val, &end, 10);
        if (end == val || *end || n < min || n > 1000000) {
            fprintf(stderr, "error: %s %s: need an integer in [%d, 1000000]\n", name, val, min);
            return -1;
        }
        *dst = (int)n;
    }
    if (mf_mixer_from_name(o->mixer) < 0) {
        fprintf(stderr, "error: unknown mixer \"%s\" (", o->mixer);
        print_mixers(", ");
        fprintf(stderr, ")\n");
        return -1;
    }
    if (mf_precision_from_name(o->precision) < 0) {
        fprintf(stderr, "error: unknown precision \"%s\" (fp32 or bf16)\n", o->precision);
        return -1;
    }
    if (strcmp(o->form, "solvable") && strcmp(o->form, "seed")) {
        fprintf(stderr, "error: unknown form \"%s\" (solvable or seed)\n", o->form);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    /* defaults: about 15 s on 2 cores; one thread, since this model is too small to gain from more */
    options o = {"metric", "solvable", "fp32", 1000, 64, 32, 4, 2, 64, 1, 16, 1e-2f, 1};
    mf_model_config cfg = mf_model_config_default();
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 0);
    mf_model *model;
    mf_ctx *ctx;
    uint64_t train_rng, eval_rng;
    int32_t *ids, *targets;
    int solvable, step, report, eval_B = 64, rc = 1;
    double t0, acc, loss_sum = 0;
    long n_scored;

    if (parse(argc, argv, &o) < 0) return 2;
    solvable = !strcmp(o.form, "solvable");
    cfg.vocab = SORT_VOCAB;
    cfg.max_seq = SORT_MAX_T;
    cfg.d_model = o.d_model; cfg.n_heads = o.heads; cfg.n_layers = o.layers; cfg.d_ff = o.d_ff;
    cfg.mixer = (mf_mixer_kind)mf_mixer_from_name(o.mixer);
    cfg.pos = MF_POS_LEARNED;           /* the mixers carry no position information of their own */
    /* Adam, linear warm-up then cosine decay to lr / 20, gradients clipped at norm 1 */
    opt.schedule.kind = MF_SCHED_COSINE;
    opt.schedule.lr = o.lr;
    opt.schedule.warmup = o.steps / 20 + 1;
    opt.schedule.total_steps = o.steps + 1;
    opt.schedule.min_lr = o.lr / 20;

    ctx = mf_ctx_new(o.seed);
    if (!ctx) { fprintf(stderr, "error: out of memory\n"); return 1; }
    mf_set_threads(ctx, o.threads);
    mf_set_keep_activation_grads(ctx, 0); /* the loop reads no activation gradient */
    mf_ctx_set_precision(ctx, (mf_precision)mf_precision_from_name(o.precision)); /* tf32 fails here, named below */
    model = mf_model_new(ctx, &cfg);
    ids = (int32_t *)malloc(sizeof(int32_t) * SORT_MAX_T * (o.batch > eval_B ? o.batch : eval_B));
    targets = (int32_t *)malloc(sizeof(int32_t) * SORT_MAX_T * (o.batch > eval_B ? o.batch : eval_B));
    if (!model || !ids || !targets) {
        fprintf(stderr, "error: %s\n", model ? "out of memory" : mf_error(ctx));
        goto done;
    }
    printf("sorting %d tokens of {0, 1, 2}, %s form: %s mixer, d_model %d, %d heads, %d layers, d_ff %d, "
           "%lld parameters; %d steps of %d sequences, Adam lr %g, seed %llu, %s\n", SORT_W, o.form, o.mixer, o.d_model,
           o.heads, o.layers, o.d_ff, (long long)mf_param_values(ctx, 0), o.steps, o.batch, (double)o.lr, o.seed, o.precision);

    train_rng = o.seed * 2 + 1;        /* training and evaluation draw from different streams */
    eval_rng = o.seed * 2 + 2 + 0x5EEDULL;
    report = o.steps / 10 > 0 ? o.steps / 10 : 1;
    t0 = mf_time();
    for (step = 1; step <= o.steps; step++) {
        int T = sort_batch(&train_rng, solvable, o.batch, ids, targets);
        mf_tensor *loss = mf_model_loss(model, ids, targets, o.batch, T);
        mf_backward(ctx, loss);
        mf_clip_grad_norm(ctx, 1.0f);
        mf_optimizer_step(ctx, &opt);
        mf_zero_grad(ctx);
        if (!mf_ok(ctx)) break;
        loss_sum += loss->data[0];
        mf_reset(ctx);
        if (step % report == 0) {
            acc = sort_evaluate(model, ctx, &eval_rng, solvable, eval_B, 2, ids, targets, &n_scored, NULL);
            printf("step %5d  loss %.4f  lr %.2e  held-out accuracy %5.1f%%  (%.0f s)\n", step, loss_sum / report,
                   (double)mf_schedule_lr(&opt.schedule, step), acc, mf_time() - t0);
            fflush(stdout);
            loss_sum = 0;
        }
    }
    if (mf_ok(ctx)) {
        acc = sort_evaluate(model, ctx, &eval_rng, solvable, eval_B, o.eval_batches, ids, targets, &n_scored, NULL);
        if (solvable)
            printf("%s: token accuracy %.1f%% on %ld sorted tokens (step %d, %.0f s)\n", o.mixer, acc,
                   n_scored, o.steps, mf_time() - t0);
        else
            printf("%s: token accuracy %.1f%% on %ld tokens, seed form (a causal model can reach about %.1f%%; "
                   "step %d, %.0f s)\n", o.mixer, acc, n_scored, SEED_CEILING, o.steps, mf_time() - t0);
    }
    if (mf_ok(ctx)) rc = 0;
    else fprintf(stderr, "error: %s\n", mf_error(ctx));   /* the first failing call says what and why */
done:
    free(ids);
    free(targets);
    mf_model_free(model);
    mf_ctx_free(ctx);
    return rc;
}
