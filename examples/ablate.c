/* ablate.c - an ablation study in one command: every token mixer and memory model
   trains on the same data with the same tokenizer, width, depth, token budget, optimizer and
   seed; the program prints one table (parameters, final training loss, validation loss, bits per
   character or sorting accuracy, tokens/s, peak memory, wall time), writes it as CSV and Markdown,
   and draws the loss curves of every run in one plot (SVG, plus PNG when gnuplot is installed).

   build:  make examples        (POSIX: each run is a child process)
   run:    ./build/ablate --quick                         the array sorter, no data (`make ablate`)
           ./build/ablate input.txt --quick               a character-level LM on any text file
           ./build/ablate input.txt --models sdpa,relative,compressive --steps 2000 --out ts

   Task: without a file, the array sorter of docs/math.md §13 in its solvable form (the input,
   then its sorted copy; accuracy on the sorted half). With a text file, a character-level model
   as in train.c: the first 90% trains, the rest validates; the memory models (relative,
   compressive) read both sequentially (examples/common.h), the others read shuffled windows.
   Every run draws the same batches: the data streams are seeded by --seed alone. On the sorter
   the memory models keep their memories from batch to batch like on text (the sequences are
   independent there, so the memory is context they must learn to ignore).

   Each run trains in a child process, so a model that cannot be built, diverges (NaN/Inf loss) or
   even crashes is reported in its row, with the error or the step, and the other runs go on; the
   child's own peak resident memory (wait4) is the run's. */
#define _DEFAULT_SOURCE          /* wait4 */
#define _POSIX_C_SOURCE 200809L
#define METAFORMER_IMPLEMENTATION
#include "../metaformer.h"
#define EX_PROG "ablate"
#include "common.h"
#include "svg.h"  /* open_out, axes, ticks, colours: the charts' helpers */
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>

/* the study, in the order of the table: every mixer this build has (the library's names, in its
   order), and "compressive" (the relative mixer with compressed memories) after relative */
#define N_MAX (MF_MIXER_COUNT + MF_MIXER_MAX_REGISTERED + 1)
static const char *ALL_MODELS[N_MAX];
static int N_ALL;
/* a model that is a mixer with a VARIANT field of the library's table on (compressive): that
   field's name is the model's; its mixer, the one that reads it */
static int variant_field(const char *model, mf_mixer_kind *mixer) {
    for (int i = 0; i < MF_FIELD_COUNT; i++)
        if (mf_config_field_at(i)->role == MF_CFG_VARIANT && strcmp(mf_config_field_at(i)->name, model) == 0)
            for (int k = 0; k < mf_mixer_count(); k++)
                if (mf_mixer_reads((mf_mixer_kind)k, i)) { *mixer = (mf_mixer_kind)k; return i; }
    return -1;
}
static char MODEL_LIST[1024]; /* "sdpa, metric, ...": for --help and messages */
static void list_models(void) {
    size_t n = 0;
    register_extra_mixers();
    for (int k = 0; k < mf_mixer_count(); k++) {
        if (!mf_mixer_compiled((mf_mixer_kind)k)) continue;
        ALL_MODELS[N_ALL++] = mf_mixer_name((mf_mixer_kind)k);
        for (int i = 0; i < MF_FIELD_COUNT; i++) /* the mixer's variants follow it */
            if (mf_config_field_at(i)->role == MF_CFG_VARIANT && mf_mixer_reads((mf_mixer_kind)k, i))
                ALL_MODELS[N_ALL++] = mf_config_field_at(i)->name;
    }
    for (int i = 0; i < N_ALL && n < sizeof MODEL_LIST; i++)
        n += (size_t)snprintf(MODEL_LIST + n, sizeof MODEL_LIST - n, "%s%s", i ? ", " : "", ALL_MODELS[i]);
    model_choices();
}

/* ---- settings: negative numbers are "the task's default", resolved in resolve_defaults ---- */
typedef struct {
    const char *models, *out, *pos, *act, *optimizer, *schedule, *preset, *precision;
    int quick, steps, batch, seq_len, d_model, heads, layers, d_ff, seed, seeds, jobs, threads, eval_batches;
    int log_every, log_y, warmup, clone_layers, seed_configs, list_presets;
    float lr, clip, beta1, beta2, weight_decay, dropout;
    model_fields f; /* the mixers' fields: each model takes those its mixer reads */
} settings;

static settings S = {.models = "all", .out = "ablate", .pos = "learned", .act = "gelu", .optimizer = "adam", .precision = "fp32",

    .schedule = "cosine", .steps = -1, .batch = -1, .seq_len = -1, .d_model = -1, .heads = -1, .layers = -1, .d_ff = -1,
    .seed = 1, .seeds = 1, .jobs = 1, .threads = -1, .eval_batches = -1, .log_y = -1,
    .warmup = -1, .lr = -1, .clip = 1.0f, .beta1 = 0.9f, .beta2 = 0.999f, .weight_decay = -1,
    .f = MODEL_FIELDS_DEFAULT};

static const option OPTIONS[] = {
    {"models", OPT_TEXT, &S.models, RUN_ONLY, 0, NULL, "comma-separated models to compare, or all (see below)"},
    {"quick", OPT_FLAG, &S.quick, RUN_ONLY, 0, NULL, "a small model and budget: a few minutes on 2 cores"},
    {"steps", OPT_INT, &S.steps, RUN_ONLY, 1, NULL, "optimizer steps per model [1000; --quick: sorter 300, text 500]"},
    {"batch", OPT_INT, &S.batch, RUN_ONLY, 1, NULL, "sequences per step [sorter 64, text 16; --quick 32, 16]"},
    {"seq-len", OPT_INT, &S.seq_len, RUN_ONLY, 1, NULL, "text: context length T [128; --quick 64]"},
    {"d-model", OPT_INT, &S.d_model, RUN_ONLY, 1, NULL, "model width [sorter 32, text 128; --quick 32, 64]"},
    {"heads", OPT_INT, &S.heads, RUN_ONLY, 1, NULL, "heads [4]"},
    {"layers", OPT_INT, &S.layers, RUN_ONLY, 1, NULL, "blocks [sorter 2, text 4; --quick 2, 2]"},
    {"d-ff", OPT_INT, &S.d_ff, RUN_ONLY, 1, NULL, "FFN hidden width [4 d-model, sorter 2 d-model]"},
    {"pos", OPT_TEXT, &S.pos, RUN_ONLY, 0, POSITIONS, "positional encoding (relative, compressive: always none)"},
    {"act", OPT_TEXT, &S.act, RUN_ONLY, 0, ACTIVATIONS, "FFN activation"},
    {"dropout", OPT_FLOAT, &S.dropout, RUN_ONLY, 0, NULL, "dropout probability"},
    {"clone-layers", OPT_FLAG, &S.clone_layers, RUN_ONLY, 0, NULL, "every layer starts as a copy of layer 0 (labml's clones)"},
    RUN_FIELD_OPTIONS(S.f) /* mem-len [T] and c-mem-len [T/2]: -1 until resolve_defaults */
    {"lr", OPT_FLOAT, &S.lr, RUN_ONLY, 0, NULL, "peak learning rate [sorter 1e-2, text 1e-3, --quick 2e-3]"},
    {"optimizer", OPT_TEXT, &S.optimizer, RUN_ONLY, 0, "adam|adam_labml|adamw|sgd", "optimizer"},
    {"schedule", OPT_TEXT, &S.schedule, RUN_ONLY, 0, "constant|warmup|noam|cosine",
     "learning-rate schedule (cosine: warm-up, then down to lr/10)"},
    {"warmup", OPT_INT, &S.warmup, RUN_ONLY, 0, NULL, "warm-up steps [steps/10, at most 100]"},
    {"beta1", OPT_FLOAT, &S.beta1, RUN_ONLY, 0, NULL, "Adam's first-moment decay"},
    {"beta2", OPT_FLOAT, &S.beta2, RUN_ONLY, 0, NULL, "Adam's second-moment decay"},
    {"weight-decay", OPT_FLOAT, &S.weight_decay, RUN_ONLY, 0, NULL, "weight decay (default 0.01 for adamw, else 0)"},
    {"clip", OPT_FLOAT, &S.clip, RUN_ONLY, 0, NULL, "max gradient norm (0 = none)"},
    {"seed", OPT_INT, &S.seed, RUN_ONLY, 0, NULL, "seed of every run's initialisation and data"},
    {"seeds", OPT_INT, &S.seeds, RUN_ONLY, 1, NULL, "runs per model, seeds --seed .. --seed + N - 1: each number as mean "
     "± sd with its 95% interval, the ranking with the differences that are significant (Welch's t test, 5%)"},
    {"threads", OPT_INT, &S.threads, RUN_ONLY, 0, NULL, "CPU threads per run, 0 = all [1: runs on a busy machine compare fairly]"},
    {"jobs", OPT_INT, &S.jobs, RUN_ONLY, 0, NULL, "runs at once, each in its own process (0: one per core; each then gets the "
     "cores / jobs threads): losses do not depend on it, speeds do"},
    {"precision", OPT_TEXT, &S.precision, RUN_ONLY, 0, "fp32|bf16", PRECISION_HELP},
    {"eval-batches", OPT_INT, &S.eval_batches, RUN_ONLY, 1, NULL, "validation batches [sorter 8, text 20; --quick 8, 10]"},
    {"log-every", OPT_INT, &S.log_every, RUN_ONLY, 0, NULL, "not on a terminal: a progress line every N steps (0 = one line per run)"},
    {"log-y", OPT_FLAG, &S.log_y, RUN_ONLY, 0, NULL, "plot the loss on a log scale (--log-y=0: linear) [sorter: log, text: linear]"},
    {"out", OPT_TEXT, &S.out, RUN_ONLY, 0, NULL, "output prefix: PREFIX.csv, .md, _curves.csv, .svg, .gp (.png with gnuplot)"},
    {"seed-configs", OPT_FLAG, &S.seed_configs, RUN_ONLY, 0, NULL,
     "also train each model in its seed's own configuration (row MODEL/seed; see --list-presets)"},
    /* handled by expand_preset before the table is parsed; here for --help */
    {"preset", OPT_TEXT, &S.preset, RUN_ONLY, 0, NULL, "a seed's experiment: its model(s) and options, printed; later options override them"},
    {"list-presets", OPT_FLAG, &S.list_presets, RUN_ONLY, 0, NULL, "print the presets and the options each expands to, and exit"},
};
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))

static void usage(FILE *f) {
    fprintf(f, "usage: ablate [FILE] [options]   compare every mixer and memory model on the same data\n"
               "  without FILE: the array sorter (docs/math.md §13, solvable form); with FILE: a character-level LM\n\n");
    print_options(f, OPTIONS, N_OPTIONS);
    fprintf(f, "\n--mem-len and --c-mem-len default to T and T/2. Each model takes the mixers' fields its mixer reads.\n");
    fprintf(f, "models: %s (compressive: the relative mixer with compressed memories)\n", MODEL_LIST);
}

static int pick(int value, int sorter, int text, int quick_sorter, int quick_text, int is_text) {
    if (value >= 0) return value;
    if (S.quick) return is_text ? quick_text : quick_sorter;
    return is_text ? text : sorter;
}

/* the defaults of the task (sorter: sort.c's model; text: train.c's, smaller with --quick) */
static void resolve_defaults(int text, const unsigned char *given) {
    if (!text && given[find_option(OPTIONS, N_OPTIONS, "seq-len")])
        die("--seq-len applies to a text file; the sorter's sequences are %d tokens", SORT_MAX_T - 1);
    S.steps = pick(S.steps, 1000, 1000, 300, 500, text);
    S.batch = pick(S.batch, 64, 16, 32, 16, text);
    S.seq_len = text ? pick(S.seq_len, 0, 128, 0, 64, 1) : SORT_MAX_T - 1;
    S.d_model = pick(S.d_model, 32, 128, 32, 64, text);
    if (S.d_model > INT_MAX / 4) /* the default --d-ff is 4 d-model (found by tests/fuzz/fuzz_cli_ablate.c) */
        die("--d-model %d is too large: at most %d", S.d_model, INT_MAX / 4);
    if (S.heads < 0) S.heads = 4;
    S.layers = pick(S.layers, 2, 4, 2, 2, text);
    S.d_ff = pick(S.d_ff, 2 * S.d_model, 4 * S.d_model, 2 * S.d_model, 4 * S.d_model, text);
    if (S.threads < 0) S.threads = 1;
    S.eval_batches = pick(S.eval_batches, 8, 20, 8, 10, text);
    if (S.f.mem_len < 0) S.f.mem_len = S.seq_len;
    if (S.f.c_mem_len < 0) S.f.c_mem_len = S.seq_len / 2 + S.seq_len % 2; /* half, rounded up; no overflow at INT_MAX */
    if (S.lr < 0) S.lr = !text ? 1e-2f : S.quick ? 2e-3f : 1e-3f;
    if (S.log_y < 0) S.log_y = !text; /* the sorter's loss falls to ~0.001 */
}

/* --models: names from ALL_MODELS, comma-separated, no repeats ("all" = every one) */
static int parse_models(const char *list, const char **models) {
    int n = 0;
    const char *p = list;
    if (strcmp(list, "all") == 0) {
        for (n = 0; n < N_ALL; n++) models[n] = ALL_MODELS[n];
        return n;
    }
    while (*p) {
        size_t len = strcspn(p, ",");
        int k = 0;
        while (k < N_ALL && !(strlen(ALL_MODELS[k]) == len && strncmp(ALL_MODELS[k], p, len) == 0)) k++;
        if (k == N_ALL)
            die("unknown model \"%.*s\" in --models; choose among %s (or all)", (int)len, p, MODEL_LIST);
        for (int i = 0; i < n; i++)
            if (models[i] == ALL_MODELS[k]) die("--models names \"%s\" twice", ALL_MODELS[k]);
        models[n++] = ALL_MODELS[k];
        p += len + (p[len] == ',');
    }
    if (n == 0) die("--models is empty; give at least one model (or all)");
    return n;
}

/* whether a memory model (sequential loader) is among the models */
static int uses_memory(const char *const *models, int n) {
    for (int i = 0; i < n; i++) {
        mf_mixer_kind k;
        if (variant_field(models[i], &k) < 0) k = (mf_mixer_kind)mf_mixer_from_name(models[i]);
        if (mf_mixer_flags(k) & MF_MIXER_MEMORY) return 1;
    }
    return 0;
}

/* --seed-configs: the model's seed configuration (the seed part of its preset, examples/common.h)
   over the settings S; the sizes, data and budget stay the study's. Runs in the child. */
static void apply_seed_config(const char *model) {
    const preset *p = seed_preset(model);
    for (int i = 0; p && p->seed[i]; i++) {
        const char *arg = p->seed[i] + 2, *eq = strchr(arg, '='), *value, *why;
        char name[64];
        int o;
        snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - arg) : (int)strlen(arg), arg);
        o = find_option(OPTIONS, N_OPTIONS, name);
        if (o == N_OPTIONS) die("preset %s: ablate has no --%s", p->name, name); /* a table that does not fit */
        if (eq) value = eq + 1;
        else if (OPTIONS[o].type == OPT_FLAG) value = "1";
        else value = p->seed[++i];
        if ((why = set_option(&OPTIONS[o], value))) die("preset %s: %s", p->name, why);
    }
}

/* a model of the study: a mixer name, or "compressive" = relative with compressed memories. The
   memory models get no absolute positions: a segment's positions would restart at 0 while the
   memories hold tokens from earlier ones (their relative tables place every key). */
static mf_model_config model_config(const char *model, const text_data *text) {
    mf_model_config c = mf_model_config_default();
    c.vocab = text ? text->V : SORT_VOCAB;
    c.max_seq = text ? S.seq_len : SORT_MAX_T; /* the sorter: 2W positions, as sort.c */
    c.d_model = S.d_model; c.n_heads = S.heads; c.n_layers = S.layers; c.d_ff = S.d_ff;
    c.pos = (mf_pos_kind)mf_pos_from_name(S.pos);
    c.ffn_act = (mf_act_kind)mf_act_from_name(S.act);
    c.dropout = S.dropout; c.clone_layers = S.clone_layers;
    int variant = variant_field(model, &c.mixer);
    if (variant < 0) c.mixer = (mf_mixer_kind)mf_mixer_from_name(model);
    fields_config(&c, &S.f);
    mf_model_config_reset_unread(&c); /* each model takes the fields its mixer reads */
    if (variant >= 0) mf_config_field_set(&c, variant, 1);
    if (!c.compressive) { /* the compressive transformer's own fields */
        c.c_mem_len = mf_model_config_default().c_mem_len;
        c.compression_rate = mf_model_config_default().compression_rate;
    }
    if (mf_mixer_flags(c.mixer) & MF_MIXER_MEMORY) c.pos = MF_POS_NONE;
    return c;
}

/* the optimizer and schedule of S */
static mf_optimizer make_optimizer(void) {
    mf_optimizer opt = mf_optimizer_default((mf_optimizer_kind)choice_index("adam|adam_labml|adamw|sgd", S.optimizer), S.lr);
    int warmup = S.warmup >= 0 ? S.warmup : S.steps / 10 < 100 ? S.steps / 10 : 100;
    if (strcmp(S.schedule, "cosine") == 0 && warmup >= S.steps) warmup = S.steps / 10; /* a preset's warm-up, a short study */
    if (strcmp(S.optimizer, "sgd") != 0) { opt.beta1 = S.beta1; opt.beta2 = S.beta2; }
    opt.weight_decay = S.weight_decay >= 0 ? S.weight_decay : strcmp(S.optimizer, "adamw") == 0 ? 0.01f : 0.0f;
    opt.schedule.kind = (mf_schedule_kind)choice_index("constant|warmup|noam|cosine", S.schedule);
    opt.schedule.warmup = warmup < 1 && opt.schedule.kind != MF_SCHED_CONSTANT ? 1 : warmup;
    opt.schedule.total_steps = S.steps + 1; opt.schedule.min_lr = S.lr / 10; opt.schedule.d_model = S.d_model;
    return opt;
}

/* ---- one run, in a child process: it reports to the parent through a pipe ---- */
enum { MSG_POINT, MSG_RESULT };
enum { RUN_OK, RUN_BUILD_FAILED, RUN_FAILED, RUN_DIVERGED, RUN_CRASHED };
typedef struct run_msg {
    int kind;
    int status;                 /* MSG_RESULT */
    int64_t step, tokens;       /* MSG_POINT: after this step; MSG_RESULT: the last step (or where it failed) */
    double loss;                /* MSG_POINT: mean training loss (cross-entropy) since the previous point */
    int64_t params;
    double train_loss, valid_loss, score, ar, tok_s; /* score: accuracy (%) on the sorter, bits/char on text;
                                                        ar: compressive, reconstruction loss of the last 10% of the steps */
    char msg[600];              /* the error (MF__ERRLEN 512 + a prefix); a message stays below PIPE_BUF */
} run_msg;

typedef struct data {
    const text_data *text;      /* NULL: the sorter */
    mf_tokens *train, *valid;   /* the text's splits */
    mf_loader loader;           /* shuffled, or sequential for the memory models (docs/math.md §12) */
    int sequential;
    uint64_t rng;               /* the sorter's training batches */
    int32_t *x, *y;
} data;

static void send_msg(int fd, const run_msg *m) {
    const char *p = (const char *)m;
    size_t left = sizeof *m;
    while (left > 0) {
        ssize_t n = write(fd, p, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) _exit(3); /* the parent is gone */
        p += n; left -= (size_t)n;
    }
}

static void send_result(int fd, int status, int64_t step, const char *fmt, ...) {
    run_msg m;
    va_list ap;
    memset(&m, 0, sizeof m);
    m.kind = MSG_RESULT; m.status = status; m.step = step;
    va_start(ap, fmt);
    vsnprintf(m.msg, sizeof m.msg, fmt, ap);
    va_end(ap);
    send_msg(fd, &m);
}

/* the next training batch: [B][T] ids and targets */
static void next_batch(data *d, mf_model *model, int *B, int *T) {
    int new_pass;
    *B = S.batch; *T = S.seq_len;
    if (!d->text) sort_batch(&d->rng, 1, S.batch, d->x, d->y);
    else {
        if ((new_pass = mf_loader_next(&d->loader, d->x, d->y, B, T)) < 0) die("%s", d->loader.error);
        if (new_pass && d->sequential) mf_model_reset_memory(model); /* a pass over the text starts with empty memories */
    }
}

static void open_data(data *d, const text_data *text, const mf_model_config *cfg) {
    size_t n = (size_t)S.batch * (S.seq_len + 1);
    memset(d, 0, sizeof *d);
    d->text = text;
    d->x = (int32_t *)malloc(n * sizeof *d->x); d->y = (int32_t *)malloc(n * sizeof *d->y);
    if (!d->x || !d->y) die("out of memory");
    d->rng = (uint64_t)S.seed * 2 + 1; /* as sort.c: training and evaluation draw from different streams */
    if (!text) return;
    d->sequential = has_memory(cfg);
    d->train = text_split(text, 0);
    d->valid = text_split(text, 1);
    loader_open(&d->loader, d->train, d->sequential, S.batch, S.seq_len, (uint64_t)S.seed, 0, 1, "training");
}

/* validation: loss, and the accuracy (sorter) or bits per character (text) into *score */
static double run_validation(mf_ctx *ctx, mf_model *model, data *d, double *score) {
    double loss;
    if (!d->text) {
        uint64_t rng = (uint64_t)S.seed * 2 + 2 + 0x5EEDULL;
        long n_scored;
        *score = sort_evaluate(model, ctx, &rng, 1, S.batch, S.eval_batches, d->x, d->y, &n_scored, &loss);
        return mf_ok(ctx) ? loss : NAN;
    }
    loss = validate(ctx, model, d->valid, S.seq_len, S.batch, S.eval_batches, d->x, d->y, NULL, NULL, NULL, NULL, NULL);
    *score = loss / log(2.0);
    return loss;
}

/* the child: build, train, validate, report; returns the exit status (a failed child exits at
   once: its memory goes with the process) */
static int run_child(const char *model_name, const char *label, int seed_config, int seed, int index, int n_runs,
                     const text_data *text, int fd) {
    S.seed = seed; /* this process's copy: the run's seed */
    if (seed_config) apply_seed_config(model_name);
    mf_model_config cfg = model_config(model_name, text);
    mf_optimizer opt = make_optimizer();
    mf_ctx *ctx = mf_ctx_new((uint64_t)S.seed);
    mf_model *model;
    set_precision(ctx, S.precision);
    data d;
    progress pr = progress_new();
    int every = S.steps / 50 > 0 ? S.steps / 50 : 1, tail = S.steps / 10 > 0 ? S.steps / 10 : 1;
    double interval = 0, tail_sum = 0, ar_sum = 0, train_time = 0;
    int64_t tokens = 0, step;

    if (!ctx) { send_result(fd, RUN_BUILD_FAILED, 0, "out of memory"); return 1; }
    mf_set_threads(ctx, seed_threads(S.threads, S.jobs));
    if (S.jobs > 1) pr.tty = 0; /* runs side by side: whole progress lines (--log-every), none redrawn in place */
    mf_set_keep_activation_grads(ctx, 0); /* the loop reads no activation gradient */
    if (!(model = mf_model_new(ctx, &cfg))) { send_result(fd, RUN_BUILD_FAILED, 0, "%s", mf_error(ctx)); return 1; }
    open_data(&d, text, &cfg);
    for (step = 1; step <= S.steps; step++) {
        double t0 = mf_time();
        float loss, ar, norm;
        int B, T, rc;
        next_batch(&d, model, &B, &T);
        if ((rc = train_step(ctx, model, &opt, S.clip, d.x, d.y, B, B, T, &loss, &ar, &norm, NULL)) < 0) {
            progress_break(&pr);
            send_result(fd, RUN_FAILED, step, "step %lld failed: %s", (long long)step, mf_error(ctx));
            return 1;
        }
        if (rc > 0) { /* a NaN / Inf loss or gradient norm: train_step applied no update */
            progress_break(&pr);
            float bad = isfinite(loss) ? norm : loss;
            send_result(fd, RUN_DIVERGED, step, "diverged at step %lld (%s %s)", (long long)step,
                        isfinite(loss) ? "gradient norm" : "loss", isnan(bad) ? "NaN" : bad > 0 ? "+Inf" : "-Inf");
            return 1;
        }
        train_time += mf_time() - t0;
        tokens += (int64_t)B * T;
        interval += loss - ar;
        if (step > S.steps - tail) { tail_sum += loss - ar; ar_sum += ar; }
        if (step % every == 0 || step == S.steps) { /* a point of the loss curve */
            run_msg m;
            memset(&m, 0, sizeof m);
            m.kind = MSG_POINT; m.step = step; m.tokens = tokens;
            m.loss = interval / (double)(step % every ? step % every : every);
            send_msg(fd, &m);
            interval = 0;
        }
        if (progress_due(&pr, 0, S.log_every > 0 && step % S.log_every == 0)) {
            char eta[32];
            format_eta((double)(S.steps - step) * train_time / (double)step, eta, sizeof eta);
            progress_show(&pr, "[%d/%d] %-12s step %lld/%d  loss %.4f  %.0f tok/s  ETA %s", index + 1, n_runs, label,
                          (long long)step, S.steps, (double)(loss - ar), (double)tokens / train_time, eta);
        }
    }
    run_msg r;
    memset(&r, 0, sizeof r);
    r.kind = MSG_RESULT; r.status = RUN_OK; r.step = S.steps; r.tokens = tokens;
    r.params = mf_param_values(ctx, 0);
    r.train_loss = tail_sum / tail;
    r.ar = ar_sum / tail;
    r.tok_s = (double)tokens / train_time;
    r.valid_loss = run_validation(ctx, model, &d, &r.score);
    if (!isfinite(r.valid_loss)) {
        r.status = RUN_FAILED;
        snprintf(r.msg, sizeof r.msg, "validation failed: %s", mf_ok(ctx) ? "the validation loss is not finite" : mf_error(ctx));
    }
    if (cfg.compressive && r.status == RUN_OK) snprintf(r.msg, sizeof r.msg, "reconstruction loss %.4f", r.ar);
    send_msg(fd, &r);
    mf_model_free(model);
    mf_ctx_free(ctx);
    free(d.x); free(d.y);
    mf_loader_free(&d.loader); mf_tokens_close(d.train); mf_tokens_close(d.valid);
    return 0;
}

/* ---- the parent: one child per model, then the table and the plot ---- */
typedef struct point { int64_t step, tokens; double loss; } point;
typedef struct run {
    const char *model;          /* the row's name: the model, or "MODEL/seed" in its seed configuration */
    const char *mixer;          /* the model */
    int seed_config;
    int seed;                   /* of its initialisation and data */
    run_msg result;
    point *curve;
    int n_curve, cap;
    double wall_s, rss_mb;
} run;

/* read one message; 0 at the end of the stream */
static int read_msg(int fd, run_msg *m) {
    char *p = (char *)m;
    size_t got = 0;
    while (got < sizeof *m) {
        ssize_t n = read(fd, p + got, sizeof *m - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return 0;
        got += (size_t)n;
    }
    return 1;
}

static void add_point(run *r, const run_msg *m) {
    if (r->n_curve == r->cap) {
        point *p = (point *)realloc(r->curve, (size_t)(r->cap = r->cap ? 2 * r->cap : 128) * sizeof *p);
        if (!p) die("out of memory");
        r->curve = p;
    }
    r->curve[r->n_curve].step = m->step; r->curve[r->n_curve].tokens = m->tokens; r->curve[r->n_curve].loss = m->loss;
    r->n_curve++;
}

/* a run in progress: its child and the read end of its pipe; --jobs runs at most MAX_JOBS at once */
enum { MAX_JOBS = 64 };
typedef struct child { pid_t pid; int fd; double t0; } child;

/* fork run r's child (index of n_runs) */
static child start_run(run *r, int index, int n_runs, const text_data *text) {
    int fds[2];
    child c;
    memset(&r->result, 0, sizeof r->result);
    r->result.status = -1;
    c.t0 = mf_time();
    fflush(stdout); fflush(stderr); /* nothing buffered may be written twice */
    if (pipe(fds) < 0 || (c.pid = fork()) < 0) die("cannot start a run: %s", strerror(errno));
    if (c.pid == 0) {
        close(fds[0]);
        int rc = run_child(r->mixer, r->model, r->seed_config, r->seed, index, n_runs, text, fds[1]);
        fflush(stdout);
        _exit(rc);
    }
    close(fds[1]);
    c.fd = fds[0];
    return c;
}

/* after the child closed its pipe: wait for it and take its own peak RSS */
static void finish_run(run *r, const child *c) {
    int status = 0;
    struct rusage ru;
    close(c->fd);
    memset(&ru, 0, sizeof ru);
    while (wait4(c->pid, &status, 0, &ru) < 0 && errno == EINTR) {}
    r->wall_s = mf_time() - c->t0;
#ifdef __APPLE__
    r->rss_mb = (double)ru.ru_maxrss / (1024.0 * 1024.0); /* bytes */
#else
    r->rss_mb = (double)ru.ru_maxrss / 1024.0;            /* KiB */
#endif
    if (r->result.status < 0) { /* no result: it crashed */
        int64_t last = r->n_curve ? r->curve[r->n_curve - 1].step : 0;
        r->result.status = RUN_CRASHED; r->result.step = last;
        if (WIFSIGNALED(status)) snprintf(r->result.msg, sizeof r->result.msg, "crashed (signal %d) after step %lld", WTERMSIG(status), (long long)last);
        else snprintf(r->result.msg, sizeof r->result.msg, "exited with status %d after step %lld", WEXITSTATUS(status), (long long)last);
    }
}

static void print_run_line(const run *r, int index, int n_runs, int text);

/* every run, S.jobs children at once; a run's line is printed when it ends (in the order they end) */
static void run_all(run *runs, int n_runs, const text_data *text) {
    child live[MAX_JOBS];
    struct pollfd fds[MAX_JOBS];
    int which[MAX_JOBS], n_live = 0, next = 0;
    while (next < n_runs || n_live > 0) {
        while (n_live < S.jobs && next < n_runs) {
            live[n_live] = start_run(&runs[next], next, n_runs, text);
            which[n_live++] = next++;
        }
        for (int i = 0; i < n_live; i++) { fds[i].fd = live[i].fd; fds[i].events = POLLIN; fds[i].revents = 0; }
        if (poll(fds, (nfds_t)n_live, -1) < 0) {
            if (errno == EINTR) continue;
            die("waiting for the runs: %s", strerror(errno));
        }
        for (int i = n_live - 1; i >= 0; i--) {
            run_msg m;
            run *r = &runs[which[i]];
            if (!fds[i].revents) continue;
            if (read_msg(live[i].fd, &m)) { /* a whole message: the child writes each in one piece */
                if (m.kind == MSG_POINT) add_point(r, &m);
                else r->result = m;
                continue;
            }
            finish_run(r, &live[i]);
            print_run_line(r, which[i], n_runs, text != NULL);
            live[i] = live[n_live - 1]; which[i] = which[n_live - 1]; n_live--;
        }
    }
}

/* "3.045 bits/char" or "accuracy 99.1%" */
static const char *score_text(const run *r, int text) {
    static char buf[64];
    if (text) snprintf(buf, sizeof buf, "%.3f bits/char", r->result.score);
    else snprintf(buf, sizeof buf, "accuracy %.1f%%", r->result.score);
    return buf;
}

static const char *status_text(const run *r) {
    static char buf[700];
    if (r->result.status == RUN_OK) snprintf(buf, sizeof buf, r->result.msg[0] ? "ok, %s" : "ok", r->result.msg);
    else if (r->result.status == RUN_BUILD_FAILED) snprintf(buf, sizeof buf, "cannot build: %s", r->result.msg);
    else snprintf(buf, sizeof buf, "%s", r->result.msg);
    return buf;
}

/* one line per finished run (replacing its progress line on a terminal) */
static void print_run_line(const run *r, int index, int n_runs, int text) {
    progress pr = progress_new();
    pr.open = pr.tty;
    char label[64];
    if (S.seeds > 1) snprintf(label, sizeof label, "%s seed %d", r->model, r->seed);
    else snprintf(label, sizeof label, "%s", r->model);
    if (r->result.status == RUN_OK)
        progress_show(&pr, "[%d/%d] %-12s valid loss %.4f (%s)  train loss %.4f  %.0f tok/s  %.0f MB  %.1f s", index + 1,
                      n_runs, label, r->result.valid_loss, score_text(r, text), r->result.train_loss, r->result.tok_s,
                      r->rss_mb, r->wall_s);
    else progress_show(&pr, "[%d/%d] %-12s %s", index + 1, n_runs, label, status_text(r));
    progress_break(&pr);
}

/* ---- outputs: Markdown table (stdout and PREFIX.md), CSV, curves CSV, SVG and PNG ---- */
static void print_table(FILE *f, const run *runs, int n, int text) {
    fprintf(f, "| model | params | train loss | valid loss | %s | tok/s | peak RSS (MB) | wall (s) | status |\n",
            text ? "bits/char" : "accuracy");
    fprintf(f, "|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for (int i = 0; i < n; i++) {
        const run *r = &runs[i];
        if (r->result.status == RUN_OK)
            fprintf(f, "| %-12s | %lld | %.4f | %.4f | %.*f%s | %.0f | %.0f | %.1f | %s |\n", r->model,
                    (long long)r->result.params, r->result.train_loss, r->result.valid_loss, text ? 3 : 1, r->result.score,
                    text ? "" : "%", r->result.tok_s, r->rss_mb, r->wall_s, status_text(r));
        else
            fprintf(f, "| %-12s | - | - | - | - | - | %.0f | %.1f | %s |\n", r->model, r->rss_mb, r->wall_s, status_text(r));
    }
}

/* CSV: a header and a row per model; numbers empty for a failed run; the status quoted last */
static void write_csv(const char *path, const run *runs, int n, int text) {
    FILE *f = open_out(path);
    fprintf(f, "model,params,train_loss,valid_loss,%s,tokens_per_s,peak_rss_mb,wall_s,step,status%s\n",
            text ? "bits_per_char" : "accuracy_pct", S.seeds > 1 ? ",seed" : "");
    for (int i = 0; i < n; i++) {
        const run *r = &runs[i];
        char status[700];
        snprintf(status, sizeof status, "%s", status_text(r));
        for (char *c = status; *c; c++) if (*c == '"') *c = '\''; /* one quoted field, no escapes needed */
        if (r->result.status == RUN_OK)
            fprintf(f, "%s,%lld,%.6f,%.6f,%.4f,%.1f,%.1f,%.2f,%lld,\"%s\"", r->model, (long long)r->result.params,
                    r->result.train_loss, r->result.valid_loss, r->result.score, r->result.tok_s, r->rss_mb, r->wall_s,
                    (long long)r->result.step, status);
        else
            fprintf(f, "%s,,,,,,%.1f,%.2f,%lld,\"%s\"", r->model, r->rss_mb, r->wall_s, (long long)r->result.step, status);
        if (S.seeds > 1) fprintf(f, ",%d", r->seed);
        fprintf(f, "\n");
    }
    close_out(f, path);
}

static void write_curves(const char *path, const run *runs, int n) {
    FILE *f = open_out(path);
    fprintf(f, "model,step,tokens,train_loss\n");
    for (int i = 0; i < n; i++)
        for (int k = 0; k < runs[i].n_curve; k++)
            if (isfinite(runs[i].curve[k].loss))
                fprintf(f, "%s,%lld,%lld,%.6f\n", runs[i].model, (long long)runs[i].curve[k].step,
                        (long long)runs[i].curve[k].tokens, runs[i].curve[k].loss);
    close_out(f, path);
}

/* The axes of the loss chart: x from 0 to the last step; y from the lowest point to the highest
   first point (the initial loss), so a diverging run cannot squash the others. */
static void chart_axes(const run *runs, int n, int log_y, axis *x, axis *y) {
    x->lo = 0; x->hi = 1; x->log = 0;
    y->lo = INFINITY; y->hi = -INFINITY; y->log = log_y;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < runs[i].n_curve; k++) {
            double v = runs[i].curve[k].loss;
            if ((double)runs[i].curve[k].step > x->hi) x->hi = (double)runs[i].curve[k].step;
            if (!isfinite(v) || (log_y && v <= 0)) continue;
            if (v < y->lo) y->lo = v;
            if (k == 0 && v > y->hi) y->hi = v;
        }
    if (!isfinite(y->lo)) { y->lo = log_y ? 0.1 : 0; y->hi = 1; }
    if (!(y->hi > y->lo)) y->hi = log_y ? y->lo * 10 : y->lo + 1;
}

/* the loss curves as an SVG line chart (examples/svg.h), one series per model */
static void write_svg(const char *path, const run *runs, int n, const char *title, int log_y, double *const *lo,
                      double *const *hi) {
    svg_series *s = (svg_series *)calloc((size_t)n + 1, sizeof *s);
    double *xy = NULL;
    size_t total = 0, at = 0;
    axis x, y;
    if (!s) die("out of memory for the chart");
    for (int i = 0; i < n; i++) total += (size_t)runs[i].n_curve;
    if (!(xy = (double *)malloc((2 * total + 1) * sizeof *xy))) die("out of memory for the chart");
    for (int i = 0; i < n; i++) {
        s[i].name = runs[i].model; s[i].n = runs[i].n_curve;
        if (lo && hi) { s[i].lo = lo[i]; s[i].hi = hi[i]; }
        s[i].x = xy + at; s[i].y = xy + at + runs[i].n_curve;
        for (int k = 0; k < runs[i].n_curve; k++) {
            xy[at + k] = (double)runs[i].curve[k].step;
            xy[at + runs[i].n_curve + k] = runs[i].curve[k].loss;
        }
        at += 2 * (size_t)runs[i].n_curve;
    }
    chart_axes(runs, n, log_y, &x, &y);
    svg_line_chart(path, title, "optimizer step", log_y ? "training loss (nats, cross-entropy, log scale)"
                                                        : "training loss (nats, cross-entropy)", s, n, &x, &y);
    free(xy);
    free(s);
}

/* the same chart as STEM.png, from the curves CSV, by the script STEM.gp: gp_draw's result */
static int write_png(const char *stem, const char *curves, const run *runs, int n, const char *title, int log_y) {
    FILE *g = gp_script(stem, 900, 540, 1);
    fprintf(g, "set datafile separator ','\nset key outside right\nset grid\nset title ");
    gp_string(g, title);
    fprintf(g, "\nset xlabel 'optimizer step'\nset ylabel 'training loss (nats, cross-entropy%s)'\n%s",
            log_y ? ", log scale" : "", log_y ? "set logscale y\n" : "");
    fprintf(g, "names = '");
    for (int i = 0; i < n; i++) if (runs[i].n_curve) fprintf(g, "%s ", runs[i].model);
    fprintf(g, "'\ncolors = '");
    for (int i = 0; i < n; i++) if (runs[i].n_curve) fprintf(g, "%s ", COLORS[i % N_COLORS]); /* as in the SVG */
    fprintf(g, "'\nplot for [i=1:words(names)] ");
    gp_string(g, file_base(curves));
    fprintf(g, " using 2:(strcol(1) eq word(names, i) ? $4 : NaN) with lines lw 2 lc rgb word(colors, i) title word(names, i)\n");
    return gp_draw(stem, g);
}

/* "Tiny Shakespeare-like text (input.txt, ...)": the setup line of the Markdown file and the plot */
static void describe(char *buf, size_t size, const char *path, const text_data *text, int n_runs) {
    char seeds_to[32];
    int k;
    snprintf(seeds_to, sizeof seeds_to, " to %d", S.seed + S.seeds - 1);
    if (text)
        k = snprintf(buf, size, "character-level LM on %s (%zu bytes, %d characters; 90%% train, 10%% valid)", path,
                     text->len, text->V);
    else k = snprintf(buf, size, "array sorter (docs/math.md §13, solvable form, %d tokens of {0,1,2})", SORT_W);
    k += snprintf(buf + k, size - (size_t)k, "; %d models: d_model %d, %d heads, %d layers, d_ff %d, T %d; batch %d, "
                  "%d steps (%lld tokens), %s %d%s, %d thread%s. Common configuration (rows MODEL): %s positions (relative, compressive: none), "
                  "%s FFN, %s%s lr %g (%s schedule), clip %g", n_runs, S.d_model, S.heads, S.layers, S.d_ff,
                  S.seq_len, S.batch, S.steps, (long long)S.steps * S.batch * S.seq_len, S.seeds > 1 ? "seeds" : "seed",
                  S.seed, S.seeds > 1 ? seeds_to : "", seed_threads(S.threads, S.jobs),
                  seed_threads(S.threads, S.jobs) == 1 ? "" : "s", S.pos, S.act,
                  S.clone_layers ? "cloned layers, " : "", S.optimizer, (double)S.lr, S.schedule, (double)S.clip);
    for (int i = 0, any = 0; i < N_OPTIONS && (size_t)k < size; i++) { /* the mixers' fields not at the library's default */
        const option *o = &OPTIONS[i];
        char v[64];
        double now = o->type == OPT_FLOAT ? *(float *)o->value : *(int *)o->value;
        if (option_field(o) < 0 || now == mf_config_field_at(option_field(o))->def) continue;
        format_option(o, v, sizeof v);
        k += snprintf(buf + k, size - (size_t)k, "%s %s %s", any++ ? "," : "; the mixers' fields:", o->name, v);
    }
    if (strcmp(S.precision, "fp32") != 0 && (size_t)k < size)
        k += snprintf(buf + k, size - (size_t)k, "; %s products (--precision)", S.precision);
    if (S.jobs > 1 && (size_t)k < size)
        k += snprintf(buf + k, size - (size_t)k, "; %d runs at once (--jobs: tok/s measured side by side)", S.jobs);
    if (S.seed_configs && (size_t)k < size)
        snprintf(buf + k, size - (size_t)k, ". Rows MODEL/seed: each model in its seed's configuration (positions, "
                 "activation, biases, cloning, optimizer and schedule of its preset, build/ablate --list-presets), "
                 "with the sizes and budget above");
}


/* ---- several seeds (--seeds N): row r's runs are runs[r N .. r N + N - 1] ---- */
typedef struct row_stats { stat_summary train, valid, score, tok_s; int ok; int64_t params; } row_stats;

static row_stats row_stats_of(const run *r, int N) {
    row_stats st;
    double *v = (double *)malloc(4 * (size_t)N * sizeof *v);
    if (!v) die("out of memory");
    memset(&st, 0, sizeof st);
    for (int j = 0; j < N; j++) {
        int ok = r[j].result.status == RUN_OK;
        v[j] = ok ? r[j].result.train_loss : NAN;
        v[N + j] = ok ? r[j].result.valid_loss : NAN;
        v[2 * N + j] = ok ? r[j].result.score : NAN;
        v[3 * N + j] = ok ? r[j].result.tok_s : NAN;
        if (ok) { st.ok++; st.params = r[j].result.params; }
    }
    st.train = summarize(v, N); st.valid = summarize(v + N, N); st.score = summarize(v + 2 * N, N);
    st.tok_s = summarize(v + 3 * N, N);
    free(v);
    return st;
}
/* "0.1234 ± 0.0056" (no ± with one value) and "[0.1180, 0.1288]" (the 95% interval, "-" with one value) */
static const char *pm(stat_summary a, int prec, char *buf, size_t size) {
    if (isfinite(a.sd)) snprintf(buf, size, "%.*f ± %.*f", prec, a.mean, prec, a.sd);
    else snprintf(buf, size, "%.*f", prec, a.mean);
    return buf;
}
static const char *interval(stat_summary a, int prec, char *buf, size_t size) {
    if (isfinite(a.ci)) snprintf(buf, size, "[%.*f, %.*f]", prec, a.mean - a.ci, prec, a.mean + a.ci);
    else snprintf(buf, size, "-");
    return buf;
}
/* "ok", or how many of the row's runs failed and the first one's reason */
static const char *row_status(const run *r, int N, const row_stats *st) {
    static char buf[800];
    if (st->ok == N) return "ok";
    for (int j = 0; j < N; j++)
        if (r[j].result.status != RUN_OK) {
            snprintf(buf, sizeof buf, "%d of %d failed (seed %d: %s)", N - st->ok, N, r[j].seed, status_text(&r[j]));
            break;
        }
    return buf;
}
static void print_seed_table(FILE *f, const run *runs, int rows, int text) {
    int N = S.seeds, pv = text ? 3 : 1;
    char a[64], b[64], c[64], d[64], e[64];
    fprintf(f, "| model | params | runs ok | train loss | valid loss | 95%% interval | %s | 95%% interval | tok/s | status |\n",
            text ? "bits/char" : "accuracy (%)");
    fprintf(f, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for (int r = 0; r < rows; r++) {
        const run *g = runs + (size_t)r * N;
        row_stats st = row_stats_of(g, N);
        if (st.ok)
            fprintf(f, "| %-12s | %lld | %d of %d | %s | %s | %s | %s | %s | %.0f | %s |\n", g->model, (long long)st.params,
                    st.ok, N, pm(st.train, 4, a, sizeof a), pm(st.valid, 4, b, sizeof b), interval(st.valid, 4, c, sizeof c),
                    pm(st.score, pv, d, sizeof d), interval(st.score, pv, e, sizeof e), st.tok_s.mean, row_status(g, N, &st));
        else fprintf(f, "| %-12s | - | 0 of %d | - | - | - | - | - | - | %s |\n", g->model, N, row_status(g, N, &st));
    }
}
/* the rows by mean validation loss, each step marked "<" (the difference is significant: Welch's
   t test at 5%) or "~" (it is not, at this number of seeds) */
static void print_ranking(FILE *f, const run *runs, int rows) {
    int N = S.seeds, *order = (int *)malloc((size_t)rows * sizeof *order), n = 0;
    row_stats *st = (row_stats *)malloc((size_t)rows * sizeof *st);
    if (!order || !st) die("out of memory");
    for (int r = 0; r < rows; r++) {
        st[r] = row_stats_of(runs + (size_t)r * N, N);
        if (!st[r].ok) continue;
        int i = n++;
        while (i > 0 && st[order[i - 1]].valid.mean > st[r].valid.mean) { order[i] = order[i - 1]; i--; }
        order[i] = r;
    }
    fprintf(f, "Ranking by validation loss, mean of %d seeds (\"<\": the difference is significant, Welch's t test at "
               "5%%; \"~\": it is not at %d seeds):", N, N);
    for (int i = 0; i < n; i++) {
        int sig = i ? welch_differs(st[order[i - 1]].valid, st[order[i]].valid) : 0;
        fprintf(f, "%s%s %.4f", i == 0 ? " " : sig > 0 ? " < " : sig == 0 ? " ~ " : " ? ", runs[(size_t)order[i] * N].model,
                st[order[i]].valid.mean);
    }
    fprintf(f, "%s\n", n ? "" : " (no run finished)");
    free(order); free(st);
}
/* CSV of the rows: count, mean, sd and the 95% interval's half-width of each number (empty when
   there is none) */
static void csv_num(FILE *f, double v, int prec) { if (isfinite(v)) fprintf(f, ",%.*f", prec, v); else fprintf(f, ","); }
static void write_seed_csv(const char *path, const run *runs, int rows, int text) {
    FILE *f = open_out(path);
    const char *sc = text ? "bits_per_char" : "accuracy_pct";
    int N = S.seeds;
    fprintf(f, "model,params,runs_ok,runs,train_loss_mean,train_loss_sd,valid_loss_mean,valid_loss_sd,valid_loss_ci95,"
               "%s_mean,%s_sd,%s_ci95,tokens_per_s,status\n", sc, sc, sc);
    for (int r = 0; r < rows; r++) {
        const run *g = runs + (size_t)r * N;
        row_stats st = row_stats_of(g, N);
        char status[800];
        snprintf(status, sizeof status, "%s", row_status(g, N, &st));
        for (char *c = status; *c; c++) if (*c == '"') *c = '\'';
        fprintf(f, "%s", g->model);
        if (st.ok) fprintf(f, ",%lld", (long long)st.params); else fprintf(f, ",");
        fprintf(f, ",%d,%d", st.ok, N);
        csv_num(f, st.train.mean, 6); csv_num(f, st.train.sd, 6);
        csv_num(f, st.valid.mean, 6); csv_num(f, st.valid.sd, 6); csv_num(f, st.valid.ci, 6);
        csv_num(f, st.score.mean, 4); csv_num(f, st.score.sd, 4); csv_num(f, st.score.ci, 4);
        csv_num(f, st.tok_s.mean, 1);
        fprintf(f, ",\"%s\"\n", status);
    }
    close_out(f, path);
}
/* each row's loss curve: the mean over its finished runs (the failed ones when none finished), with
   mean - sd .. mean + sd in lo, hi; as far as the shortest of those curves */
static run *mean_curves(const run *runs, int rows, double **lo, double **hi) {
    int N = S.seeds;
    run *m = (run *)calloc((size_t)rows, sizeof *m);
    if (!m) die("out of memory");
    for (int r = 0; r < rows; r++) {
        const run *g = runs + (size_t)r * N;
        int any_ok = 0, len = -1, cnt;
        for (int j = 0; j < N; j++) any_ok |= g[j].result.status == RUN_OK;
        for (int j = 0; j < N; j++)
            if ((!any_ok || g[j].result.status == RUN_OK) && (len < 0 || g[j].n_curve < len)) len = g[j].n_curve;
        m[r].model = g->model;
        m[r].n_curve = m[r].cap = len > 0 ? len : 0;
        m[r].curve = (point *)calloc((size_t)m[r].n_curve + 1, sizeof *m[r].curve);
        lo[r] = (double *)calloc((size_t)m[r].n_curve + 1, sizeof **lo);
        hi[r] = (double *)calloc((size_t)m[r].n_curve + 1, sizeof **hi);
        if (!m[r].curve || !lo[r] || !hi[r]) die("out of memory");
        for (int k = 0; k < m[r].n_curve; k++) {
            double sum = 0, ss = 0;
            cnt = 0;
            for (int j = 0; j < N; j++)
                if ((!any_ok || g[j].result.status == RUN_OK) && isfinite(g[j].curve[k].loss)) { sum += g[j].curve[k].loss; cnt++; }
            m[r].curve[k] = g[0].curve[k];
            m[r].curve[k].loss = cnt ? sum / cnt : NAN;
            for (int j = 0; j < N; j++)
                if ((!any_ok || g[j].result.status == RUN_OK) && isfinite(g[j].curve[k].loss))
                    ss += (g[j].curve[k].loss - m[r].curve[k].loss) * (g[j].curve[k].loss - m[r].curve[k].loss);
            lo[r][k] = hi[r][k] = m[r].curve[k].loss;
            if (cnt > 1) { lo[r][k] -= sqrt(ss / (cnt - 1)); hi[r][k] += sqrt(ss / (cnt - 1)); }
        }
    }
    return m;
}

/* n rows of runs (of S.seeds runs each) */
static void write_markdown(const char *path, const char *command, const char *setup, const char *plot,
                           const run *runs, int n, int text) {
    FILE *f = open_out(path);
    fprintf(f, "Command: `%s`\n\nSetup: %s.\n\n", command, setup);
    if (S.seeds > 1) {
        print_seed_table(f, runs, n, text);
        fprintf(f, "\n");
        print_ranking(f, runs, n);
    } else print_table(f, runs, n, text);
    fprintf(f, "\nTrain loss: mean cross-entropy of the last 10%% of the steps; valid loss: %s. Tokens/s: "
               "training only; peak RSS: the run's own process.%s\n\n![loss curves](%s)\n",
            text ? "cross-entropy on the validation text" : "cross-entropy on held-out batches; accuracy on the sorted half",
            S.seeds > 1 ? " Each number: mean ± sample standard deviation over the seeds, with the 95% confidence interval of "
                          "the mean (Student's t); the runs one by one are in the _runs.csv file. The curves: the mean over "
                          "the seeds, the band mean ± sd." : "", plot);
    close_out(f, path);
}

int main(int argc, char **argv) {
    const char *path = NULL, *models[N_MAX];
    unsigned char given[N_OPTIONS] = {0};
    char command[2048], setup[2048], title[300], csv[4096], md[4096], curves[4096], svg[4096], png[4096], gp[4096];
    text_data text;
    int n_runs, k = snprintf(command, sizeof command, "%s", argv[0]);
    run *runs;

    list_models();
    S.f.mem_len = S.f.c_mem_len = -1; /* the task's: T and T / 2 */
    argv = expand_preset(&argc, argv, 0);
    parse_options(argc, argv, OPTIONS, N_OPTIONS, given, &path, usage);
    for (int i = 1; i < argc && k < (int)sizeof command; i++) k += snprintf(command + k, sizeof command - k, " %s", argv[i]);
    n_runs = parse_models(S.models, models);
    if (S.seeds > 1000) die("--seeds %d: at most 1000 runs per model", S.seeds);
    S.jobs = seed_jobs(S.jobs, n_runs * (S.seed_configs ? 2 : 1) * S.seeds);
    if (S.jobs > MAX_JOBS) S.jobs = MAX_JOBS;
    resolve_defaults(path != NULL, given);
    EX_PARSED(); /* the fuzz target of the command line stops here, before any file is read */
    if (path) {
        text_load(&text, path);
        text_need_windows(&text, path, S.seq_len);
        if (uses_memory(models, n_runs) && (text.n_train / S.batch < 2 || text.n_valid / S.batch < 2))
            die("\"%s\" is too short for --batch %d: cut into %d columns, the %s text leaves fewer than 2 characters "
                "per column; use a smaller --batch", path, S.batch, S.batch, text.n_train / S.batch < 2 ? "training" : "validation");
    }
    snprintf(csv, sizeof csv, "%s.csv", S.out); snprintf(md, sizeof md, "%s.md", S.out);
    snprintf(curves, sizeof curves, "%s_curves.csv", S.out); snprintf(svg, sizeof svg, "%s.svg", S.out);
    snprintf(png, sizeof png, "%s.png", S.out); snprintf(gp, sizeof gp, "%s.gp", S.out);
    close_out(open_out(csv), csv); /* fail now, not after an hour of training */
    describe(setup, sizeof setup, path ? file_base(path) : NULL, path ? &text : NULL, n_runs);
    if (path) snprintf(title, sizeof title, "training loss, character-level LM on %s", file_base(path));
    else snprintf(title, sizeof title, "training loss, array sorter");
    printf("ablation: %s\n", setup);

    int per_model = S.seed_configs ? 2 : 1, rows = n_runs * per_model;
    n_runs = rows * S.seeds;
    if (!(runs = (run *)calloc((size_t)n_runs, sizeof *runs))) die("out of memory");
    for (int i = 0; i < n_runs; i++) { /* with --seed-configs: MODEL, then MODEL/seed; each --seeds times */
        static char labels[2 * N_MAX][40];
        int row = i / S.seeds;
        runs[i].mixer = models[row / per_model];
        runs[i].seed_config = row % per_model;
        runs[i].seed = S.seed + i % S.seeds;
        snprintf(labels[row], sizeof labels[row], runs[i].seed_config ? "%s/seed" : "%s", runs[i].mixer);
        runs[i].model = labels[row];
    }
    run_all(runs, n_runs, path ? &text : NULL);
    printf("\n");
    int have_png;
    if (S.seeds == 1) {
        print_table(stdout, runs, n_runs, path != NULL);
        write_csv(csv, runs, n_runs, path != NULL);
        write_curves(curves, runs, n_runs);
        write_svg(svg, runs, n_runs, title, S.log_y, NULL, NULL);
        have_png = write_png(S.out, curves, runs, n_runs, title, S.log_y) > 0;
    } else { /* the rows' statistics; the runs one by one in PREFIX_runs.csv */
        char runs_csv[4096];
        double **lo = (double **)calloc((size_t)rows, sizeof *lo), **hi = (double **)calloc((size_t)rows, sizeof *hi);
        run *mean;
        if (!lo || !hi) die("out of memory");
        snprintf(runs_csv, sizeof runs_csv, "%s_runs.csv", S.out);
        print_seed_table(stdout, runs, rows, path != NULL);
        printf("\n");
        print_ranking(stdout, runs, rows);
        write_seed_csv(csv, runs, rows, path != NULL);
        write_csv(runs_csv, runs, n_runs, path != NULL);
        mean = mean_curves(runs, rows, lo, hi);
        write_curves(curves, mean, rows);
        write_svg(svg, mean, rows, title, S.log_y, lo, hi);
        have_png = write_png(S.out, curves, mean, rows, title, S.log_y) > 0;
        for (int r = 0; r < rows; r++) { free(mean[r].curve); free(lo[r]); free(hi[r]); }
        free(mean); free(lo); free(hi);
        printf("(the runs one by one: %s)\n", runs_csv);
    }
    write_markdown(md, command, setup, file_base(svg), runs, S.seeds > 1 ? rows : n_runs, path != NULL); /* the SVG: always there */
    printf("\nwrote %s, %s, %s, %s%s%s, %s\n", md, csv, curves, svg, have_png ? ", " : " (no PNG: gnuplot",
           have_png ? png : gnuplot_found() ? " failed)" : " is not installed)", gp);
    for (int i = 0; i < n_runs; i++) free(runs[i].curve);
    free(runs);
    if (path) text_free(&text);
    return 0;
}
