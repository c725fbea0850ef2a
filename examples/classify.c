/* classify.c - sequence classification with a non-causal MetaFormer (docs/math.md §20): the NLP
   MetaFormer seed's setup, one block, then the mean over the positions and a Linear to the classes.
   build: `make examples` (build/classify)
   run:   ./build/classify                          the generated task "repeat" (see below)
          ./build/classify --task majority --mixer pool
          ./build/classify labelled.tsv --tokens chars --seq-len 64 --save model.safetensors
          ./build/classify labelled.tsv --tokenizer tok.bin --seq-len 256    (BPE, GPT-2's, ...)
          ./build/classify labelled.tsv --load model.safetensors --steps 0   (evaluate only)
          ./build/classify labelled.tsv --tokens chars --seeds 5 \
              --mixers sdpa,metric,quadratic,pool,identity --report classify.md   (the seed's ablation)

   Data, either
     a generated task (--task): rows of 6..12 tokens (--seq-len 12), 2000 of them (--examples)
       repeat    tokens 0..7: does the first token occur again later in the row? (half of the rows
                 do). A product of two positions' contents: the mean of per-token features cannot
                 express it, the attention mixers can (identity stays near chance)
       before    tokens 2..7 with one 0 and one 1 somewhere: does the 0 come before the 1? With
                 learned positions the answer is additive in the two positions, so even identity
                 (no token mixing) learns it
       majority  tokens 0 and 1, an odd count: which one is more frequent? (a mean of the tokens)
     or a labelled text file: one example a line, LABEL<TAB>TEXT (labels are names, mapped to ids
       in order of appearance; empty lines are skipped), read as bytes (--tokens bytes, 256 ids), as
       the characters that occur (--tokens chars) or encoded by a tokenizer file of build/tokenize
       (--tokenizer FILE); a text longer than --seq-len is cut there. Token shards are not read:
       they are one stream of ids with no labels and no boundaries between texts.
   Every 10th example (after a shuffle by --seed) is held out; the rest trains. Rows of different
   lengths share batches (mf_model_classify_loss takes each row's length: padding is never read).
   --seeds N trains N models (--jobs of them at once; each in contexts of its own, so the numbers
   and the output do not depend on --jobs); --mixers trains them for each mixer on the same data,
   split and batches and compares each with the first by Welch's test.
   --save writes the weights with the head and the settings (model options, causal, the labels,
   the tokens or the tokenizer's identity); --load restores them (the model options then come from
   the file). */
#define _POSIX_C_SOURCE 200809L /* isatty, in common.h */
#define METAFORMER_IMPLEMENTATION
#include "../metaformer.h"
#define EX_PROG "classify"
#include "common.h"

enum { MAX_LABELS = 1000, TASK_VOCAB = 8 };

typedef struct dataset {
    int n, T, V, n_labels, n_train; /* examples, row capacity, vocabulary, classes, training rows */
    int32_t *ids, *lengths, *labels; /* ids [n][T] (0-padded), per example */
    char *names[MAX_LABELS];        /* the classes' names */
    int cut;                        /* texts cut to T tokens */
} dataset;

/* ---- settings: one table drives parsing, --help and the checkpoint metadata ---- */
static model_settings M = MODEL_SETTINGS("quadratic", 32, 4, 1, 64, 12);
static struct {
    const char *task, *tokens, *save, *load;
    int causal, steps, batch, examples, eval_every, threads;
    float lr;
    int seed, seeds;
    const char *precision, *tokenizer, *mixers, *report;
    int jobs;
} S = {"repeat", "bytes", NULL, NULL, 0, 1500, 32, 2000, 250, 0, 3e-3f, 1, 1, "fp32", NULL, NULL, NULL, 0};
static option OPTS[] = {
    MODEL_OPTIONS(M, )
    {"causal", OPT_FLAG, &S.causal, SAVED, 0, NULL, "a causal model (the mixers see only earlier positions); default: non-causal"},
    {"task", OPT_TEXT, &S.task, RUN_ONLY, 0, "repeat|before|majority", "the generated task (without a text file)"},
    {"examples", OPT_INT, &S.examples, RUN_ONLY, 20, NULL, "generated examples (every 10th is held out)"},
    {"tokens", OPT_TEXT, &S.tokens, RUN_ONLY, 0, "bytes|chars", "a text file's tokens"},
    {"tokenizer", OPT_TEXT, &S.tokenizer, RUN_ONLY, 0, NULL, "encode a text file with this tokenizer (a file of build/tokenize: "
     "BPE, GPT-2's, characters; or \"bytes\") instead of --tokens"},
    {"steps", OPT_INT, &S.steps, RUN_ONLY, 0, NULL, "training steps (0: evaluate only)"},
    {"batch", OPT_INT, &S.batch, RUN_ONLY, 1, NULL, "rows per step"},
    {"lr", OPT_FLOAT, &S.lr, RUN_ONLY, 0, NULL, "Adam learning rate"},
    {"eval-every", OPT_INT, &S.eval_every, RUN_ONLY, 1, NULL, "steps between held-out evaluations"},
    {"seed", OPT_INT, &S.seed, RUN_ONLY, 0, NULL, "seed of the data, the split and the initialisation"},
    {"seeds", OPT_INT, &S.seeds, RUN_ONLY, 1, NULL, "models to train on the same data and split, initialisations and "
     "batches --seed .. --seed + N - 1: the accuracy as mean ± sd with its 95% interval"},
    {"jobs", OPT_INT, &S.jobs, RUN_ONLY, 0, NULL, JOBS_HELP},
    {"mixers", OPT_TEXT, &S.mixers, RUN_ONLY, 0, NULL, "the ablation: the --seeds models for each of these mixers (a,b,...) on the "
     "same data, split and batches; a table of the accuracies, each mixer tested against the first (Welch's test)"},
    {"report", OPT_TEXT, &S.report, RUN_ONLY, 0, NULL, "--mixers: write the table, the per-seed accuracies and the settings to this "
     "markdown file"},
    {"threads", OPT_INT, &S.threads, RUN_ONLY, 0, NULL, "CPU threads (0: all; shared out among the --jobs)"},
    {"precision", OPT_TEXT, &S.precision, RUN_ONLY, 0, "fp32|bf16", PRECISION_HELP},
    {"save", OPT_TEXT, &S.save, RUN_ONLY, 0, NULL, "write the trained model (with its settings) to this file"},
    {"load", OPT_TEXT, &S.load, RUN_ONLY, 0, NULL, "start from a model written by --save (its settings too)"},
};
enum { N_OPTS = (int)(sizeof OPTS / sizeof OPTS[0]) };

static void usage(FILE *f) {
    fprintf(f, "usage: " EX_PROG " [LABELLED_FILE] [options]\n"
               "Trains a sequence classifier (mean over positions, then Linear to the classes) on a generated task,\n"
               "or on a file of LABEL<TAB>TEXT lines; prints the accuracy on the held-out tenth. With --mixers, the\n"
               "models of each mixer and a table: mean ± sd over --seeds, the 95%% interval, Welch's test against the first.\n");
    print_options(f, OPTS, N_OPTS);
}

/* ---- data ---- */
static void data_alloc(dataset *d, int n, int T) {
    d->n = n; d->T = T;
    d->ids = (int32_t *)calloc((size_t)n * T, sizeof(int32_t));
    d->lengths = (int32_t *)calloc((size_t)n, sizeof(int32_t));
    d->labels = (int32_t *)calloc((size_t)n, sizeof(int32_t));
    if (!d->ids || !d->lengths || !d->labels) die("out of memory: %d examples", n);
}
static int label_id(dataset *d, const char *name, size_t len, int may_add, const char *where) {
    for (int i = 0; i < d->n_labels; i++)
        if (strlen(d->names[i]) == len && memcmp(d->names[i], name, len) == 0) return i;
    if (!may_add) die("%s: label \"%.*s\" is not one of the model's classes (it was trained on other labels)", where, (int)len, name);
    if (d->n_labels == MAX_LABELS) die("%s: more than %d distinct labels", where, MAX_LABELS);
    if (!(d->names[d->n_labels] = (char *)malloc(len + 1))) die("out of memory");
    memcpy(d->names[d->n_labels], name, len);
    d->names[d->n_labels][len] = 0;
    return d->n_labels++;
}

static void task_generate(dataset *d, const char *task, int n, int T, uint64_t rng) {
    int before = strcmp(task, "before") == 0, repeat = strcmp(task, "repeat") == 0, lo = T / 2 > 2 ? T / 2 : 2;
    const char *names[2] = {"no", "yes"};
    if (T < 2) die("--seq-len %d: the generated tasks need rows of at least 2 tokens", T);
    data_alloc(d, n, T);
    d->V = TASK_VOCAB;
    if (before) { names[0] = "1-first"; names[1] = "0-first"; }
    if (!before && !repeat) { names[0] = "more-0"; names[1] = "more-1"; }
    label_id(d, names[0], strlen(names[0]), 1, "task");
    label_id(d, names[1], strlen(names[1]), 1, "task");
    for (int e = 0; e < n; e++) {
        int32_t *row = d->ids + (int64_t)e * T;
        int L = lo + (int)random_below(&rng, T - lo + 1), ones = 0;
        if (repeat) { /* label 1: the first token again at a random later place; 0: never again */
            int yes = (int)random_below(&rng, 2);
            row[0] = (int32_t)random_below(&rng, TASK_VOCAB);
            for (int t = 1; t < L; t++) {
                int32_t v = (int32_t)random_below(&rng, TASK_VOCAB - 1);
                row[t] = v >= row[0] ? v + 1 : v; /* any token but the first */
            }
            if (yes) row[1 + random_below(&rng, L - 1)] = row[0];
            d->labels[e] = yes;
        } else if (before) {
            int a = (int)random_below(&rng, L), b = (int)random_below(&rng, L - 1);
            if (b >= a) b++;
            for (int t = 0; t < L; t++) row[t] = 2 + (int32_t)random_below(&rng, TASK_VOCAB - 2);
            row[a] = 0; row[b] = 1;
            d->labels[e] = a < b;
        } else {
            if (L % 2 == 0) L--; /* no ties */
            for (int t = 0; t < L; t++) ones += row[t] = (int32_t)random_below(&rng, 2);
            d->labels[e] = 2 * ones > L;
        }
        d->lengths[e] = L;
    }
}

/* LABEL<TAB>TEXT lines; tok encodes the texts (refusing what it cannot encode) */
static void text_read(dataset *d, const char *path, unsigned char *bytes, size_t len, mf_tokenizer *tok, int T,
                      int may_add_labels) {
    size_t pos = 0;
    int line = 0, n = 0, cap = 0;
    int32_t *buf = (int32_t *)malloc((size_t)T * sizeof(int32_t));
    if (!buf) die("out of memory");
    if (len == 0) die("\"%s\" is empty; give one example a line: LABEL<TAB>TEXT", path);
    for (size_t i = 0; i < len; i++)
        if (bytes[i] == 0) die("\"%s\" looks binary (it contains NUL bytes); give a text file of LABEL<TAB>TEXT lines", path);
    data_alloc(d, 0, T);
    while (pos < len) {
        const char *s = (const char *)bytes + pos, *tab, *nl = (const char *)memchr(s, '\n', len - pos);
        size_t ll = nl ? (size_t)(nl - s) : len - pos;
        char where[600];
        int64_t n_ids;
        pos += ll + 1;
        line++;
        if (ll > 0 && s[ll - 1] == '\r') ll--;
        if (ll == 0) continue;
        snprintf(where, sizeof where, "\"%s\" line %d", path, line);
        if (!(tab = (const char *)memchr(s, '\t', ll))) die("%s has no tab; each line is LABEL<TAB>TEXT", where);
        if (tab == s) die("%s has an empty label before the tab", where);
        if ((size_t)(tab + 1 - s) == ll) die("%s has an empty text after the tab", where);
        if (n == cap) { /* grow the example arrays */
            cap = cap ? 2 * cap : 256;
            d->ids = (int32_t *)realloc(d->ids, (size_t)cap * T * sizeof(int32_t));
            d->lengths = (int32_t *)realloc(d->lengths, (size_t)cap * sizeof(int32_t));
            d->labels = (int32_t *)realloc(d->labels, (size_t)cap * sizeof(int32_t));
            if (!d->ids || !d->lengths || !d->labels) die("out of memory reading \"%s\"", path);
        }
        d->labels[n] = label_id(d, s, (size_t)(tab - s), may_add_labels, where);
        n_ids = mf_tokenizer_encode(tok, tab + 1, (size_t)(s + ll - tab - 1), buf, T);
        if (n_ids < 0) die("%s: %s", where, mf_tokenizer_error(tok));
        if (n_ids > T) { d->cut++; n_ids = T; }
        memset(d->ids + (int64_t)n * T, 0, (size_t)T * sizeof(int32_t));
        memcpy(d->ids + (int64_t)n * T, buf, (size_t)n_ids * sizeof(int32_t));
        d->lengths[n++] = (int32_t)n_ids;
    }
    free(buf);
    d->n = n;
    if (n < 2) die("\"%s\" has %d example%s; give at least 2 (every 10th is held out)", path, n, n == 1 ? "" : "s");
    if (d->n_labels < 2) die("\"%s\" has a single label (\"%s\"); a classifier needs at least 2", path, d->names[0]);
    d->V = mf_tokenizer_vocab_size(tok);
}

/* shuffle the examples (Fisher-Yates) and hold out every 10th: training rows first */
static void data_split(dataset *d, uint64_t rng) {
    int T = d->T, n_valid = d->n / 10 > 0 ? d->n / 10 : 1;
    int32_t *row = (int32_t *)malloc((size_t)T * sizeof(int32_t));
    if (!row) die("out of memory");
    for (int i = d->n - 1; i > 0; i--) {
        int j = (int)random_below(&rng, i + 1), t;
        memcpy(row, d->ids + (int64_t)i * T, (size_t)T * sizeof *row);
        memcpy(d->ids + (int64_t)i * T, d->ids + (int64_t)j * T, (size_t)T * sizeof *row);
        memcpy(d->ids + (int64_t)j * T, row, (size_t)T * sizeof *row);
        t = d->lengths[i]; d->lengths[i] = d->lengths[j]; d->lengths[j] = t;
        t = d->labels[i]; d->labels[i] = d->labels[j]; d->labels[j] = t;
    }
    free(row);
    d->n_train = d->n - n_valid;
}

/* accuracy (percent) on the held-out rows, in batches; *right gets the count */
static double evaluate(mf_ctx *ctx, mf_model *m, const dataset *d, int B, int *right) {
    int grad = mf_set_grad(ctx, 0), training = mf_set_training(ctx, 0), C = d->n_labels, total = d->n - d->n_train;
    float *out = (float *)malloc((size_t)B * C * sizeof(float));
    if (!out) die("out of memory");
    *right = 0;
    for (int s = d->n_train; s < d->n; s += B) {
        int b = d->n - s < B ? d->n - s : B;
        mf_tensor *logits = mf_model_classify_logits(m, d->ids + (int64_t)s * d->T, d->lengths + s, b, d->T);
        if (!logits || mf_to_host(ctx, logits, out) < 0) die("evaluation: %s", mf_error(ctx));
        for (int r = 0; r < b; r++) {
            int best = 0;
            for (int c = 1; c < C; c++) if (out[r * C + c] > out[r * C + best]) best = c;
            *right += best == d->labels[s + r];
        }
        mf_reset(ctx);
    }
    free(out);
    mf_set_grad(ctx, grad);
    mf_set_training(ctx, training);
    return 100.0 * *right / total;
}

/* ---- checkpoints: the model options as "classify.<option>", and what the data needs ---- */
static void save_model(mf_ctx *ctx, const dataset *d, const mf_tokenizer *tok) {
    enum { EXTRA = 7 };
    static char values[N_OPTS + EXTRA][1024], keys[N_OPTS + EXTRA][64];
    const char *kv[2 * (N_OPTS + EXTRA)];
    int n = 0;
    size_t off = 0;
#define PUT(key, ...) (snprintf(keys[n], 64, "%s", key), snprintf(values[n], 1024, __VA_ARGS__), \
                       kv[2 * n] = keys[n], kv[2 * n + 1] = values[n], n++)
    for (int i = 0; i < N_OPTS; i++) {
        if (!OPTS[i].saved || option_unstored(&OPTS[i])) continue;
        snprintf(keys[n], 64, "classify.%s", OPTS[i].name);
        format_option(&OPTS[i], values[n], sizeof values[n]);
        kv[2 * n] = keys[n]; kv[2 * n + 1] = values[n]; n++;
    }
    PUT("classify.n_classes", "%d", d->n_labels);
    PUT("classify.data", "%s", S.tokenizer ? "tokenizer" : tok ? S.tokens : S.task);
    PUT("classify.vocab", "%s", ""); /* chars: the byte values in hex */
    for (int id = 0; tok && !S.tokenizer && strcmp(S.tokens, "chars") == 0 && id < d->V && off + 3 < 1024; id++, off += 2) {
        int len;
        const unsigned char *b = mf_tokenizer_token(tok, id, &len);
        snprintf(values[n - 1] + off, 3, "%02x", b ? b[0] : 0);
    }
    if (S.tokenizer) { /* the tokenizer's identity: --load refuses another one (its ids would mean other text) */
        PUT("classify.vocab_size", "%d", d->V);
        PUT("classify.tokenizer_fnv1a", "%016llx", (unsigned long long)tokenizer_identity(S.tokenizer));
        kv[2 * n] = "classify.tokenizer"; kv[2 * n + 1] = S.tokenizer; n++;
    }
#undef PUT
    {   /* the class names, one a line */
        size_t need = 1;
        char *names;
        for (int c = 0; c < d->n_labels; c++) need += strlen(d->names[c]) + 1;
        if (!(names = (char *)malloc(need))) die("out of memory");
        names[0] = 0;
        for (int c = 0; c < d->n_labels; c++) { strcat(names, d->names[c]); if (c + 1 < d->n_labels) strcat(names, "\n"); }
        kv[2 * n] = "classify.labels"; kv[2 * n + 1] = names; n++;
        if (mf_save(ctx, S.save, 0, kv, n) < 0) die("--save: %s", mf_error(ctx));
        free(names);
    }
}

/* --load: the settings of the file into M and S.causal (the command line must not set them), its
   labels into d (in the stored order) and its data kind */
static void load_settings(const unsigned char *given, dataset *d, char *data_kind, size_t kind_size, char *vocab, size_t vocab_size) {
    char key[64], buf[1024], *labels;
    int len;
    if (mf_load_meta(S.load, "classify.n_classes", buf, sizeof buf) < 0) {
        mf_ctx *probe = mf_ctx_new(0);
        if (mf_load(probe, S.load, 0) < 0) die("--load: %s", mf_error(probe));
        die("--load: \"%s\" was not written by " EX_PROG " --save (its metadata has no classify settings)", S.load);
    }
    for (int i = 0; i < N_OPTS; i++) {
        const char *why;
        if (!OPTS[i].saved) continue;
        if (given[i]) die("--%s: the model's settings come from the checkpoint \"%s\" (--load); drop --%s", OPTS[i].name, S.load, OPTS[i].name);
        snprintf(key, sizeof key, "classify.%s", OPTS[i].name);
        if (mf_load_meta(S.load, key, buf, sizeof buf) < 0) {
            if (option_unstored(&OPTS[i])) continue; /* not given when it was saved */
            die("--load: \"%s\" has no %s in its metadata", S.load, key);
        }
        if (strcmp(OPTS[i].name, "mixer") == 0) check_stored_mixer(S.load, buf);
        if (OPTS[i].type == OPT_TEXT) { /* kept: the option points at the copy */
            char *copy = (char *)malloc(strlen(buf) + 1);
            if (!copy) die("out of memory");
            strcpy(copy, buf);
            if ((why = set_option(&OPTS[i], copy))) die("--load: \"%s\": %s", S.load, why);
        } else if ((why = set_option(&OPTS[i], buf))) die("--load: \"%s\": %s", S.load, why);
    }
    if (mf_load_meta(S.load, "classify.data", data_kind, kind_size) < 0 ||
        mf_load_meta(S.load, "classify.vocab", vocab, vocab_size) < 0 ||
        (len = mf_load_meta(S.load, "classify.labels", NULL, 0)) < 0)
        die("--load: \"%s\" lacks classify.data, classify.vocab or classify.labels in its metadata", S.load);
    if (!(labels = (char *)malloc((size_t)len + 1))) die("out of memory");
    mf_load_meta(S.load, "classify.labels", labels, (size_t)len + 1);
    for (char *p = labels, *e; *p || p == labels; p = e + 1) {
        e = strchr(p, '\n');
        label_id(d, p, e ? (size_t)(e - p) : strlen(p), 1, "--load");
        if (!e) break;
    }
    free(labels);
}

/* ---- the runs: one model per (mixer, seed), each in contexts of its own ---- */
enum { MAX_MIXERS = 32 };
static dataset D;                           /* read-only while the models train */
static int N_MIXERS = 1;
static const char *MIXER_NAMES[MAX_MIXERS]; /* --mixers, or --mixer alone */
static mf_model_config CFG[MAX_MIXERS];
static long long PARAMS[MAX_MIXERS];
static uint64_t DATA_RNG;                   /* the batches of seed i: DATA_RNG ^ (golden ratio * i) */

typedef struct run_out {
    double acc;
    int right, done;
    char *log;             /* the run's lines while others run beside it (--jobs > 1) */
    size_t len, cap;
} run_out;
typedef struct runs {
    run_out *out;
    int n, jobs, next;     /* next: the first run whose lines are not printed yet */
    mf_ctx *ctx;           /* --save: the single run's model is kept */
    mf_model *m;
} runs;

/* a run's line: printed at once when the runs go one at a time, else kept until the earlier runs'
   lines are out, so the output is the same for any --jobs */
static void say(const runs *R, run_out *o, const char *fmt, ...) {
    va_list ap;
    int need;
    va_start(ap, fmt);
    if (R->jobs == 1) { vprintf(fmt, ap); va_end(ap); fflush(stdout); return; }
    need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (o->len + (size_t)need + 1 > o->cap) {
        o->cap = 2 * (o->len + (size_t)need + 1);
        if (!(o->log = (char *)realloc(o->log, o->cap))) die("out of memory");
    }
    va_start(ap, fmt);
    vsnprintf(o->log + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    o->len += (size_t)need;
}
static void run_finished(runs *R, int i) {
#ifdef _OPENMP
#pragma omp critical(classify_output)
#endif
    {
        R->out[i].done = 1;
        for (; R->next < R->n && R->out[R->next].done; R->next++) {
            run_out *o = &R->out[R->next];
            if (o->len) fwrite(o->log, 1, o->len, stdout);
            fflush(stdout);
            free(o->log);
            o->log = NULL;
        }
    }
}

/* run i: the mixer i / seeds and the seed --seed + i % seeds; the batches depend only on the seed */
static void train_run(int i, void *user) {
    runs *R = (runs *)user;
    run_out *o = &R->out[i];
    int k = i / S.seeds, run = i % S.seeds, B = S.batch;
    uint64_t rng = DATA_RNG ^ (0x9e3779b97f4a7c15ULL * (uint64_t)run); /* seed 0: the data's stream, as a single run's */
    int32_t *ids = (int32_t *)malloc((size_t)B * D.T * sizeof(int32_t)), *lengths = (int32_t *)malloc((size_t)B * sizeof(int32_t));
    int32_t *labels = (int32_t *)malloc((size_t)B * sizeof(int32_t));
    double loss_sum = 0;
    mf_ctx *ctx = mf_ctx_new((uint64_t)(S.seed + run));
    mf_model *m;
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, S.lr);
    if (!ctx || !ids || !lengths || !labels) die("out of memory");
    mf_set_threads(ctx, seed_threads(S.threads, R->jobs));
    set_precision(ctx, S.precision);
    if (!(m = mf_model_new(ctx, &CFG[k]))) die("%s", mf_error(ctx));
    if (S.load && mf_load(ctx, S.load, 0) < 0) die("--load: %s", mf_error(ctx));
    if (S.mixers) say(R, o, "--- %s, seed %d (%d of %d)\n", MIXER_NAMES[k], S.seed + run, run + 1, S.seeds);
    else if (S.seeds > 1) say(R, o, "--- seed %d (%d of %d)\n", S.seed + run, run + 1, S.seeds);
    for (int step = 1; step <= S.steps; step++) {
        mf_tensor *loss;
        for (int r = 0; r < B; r++) { /* rows drawn from the training split */
            int e = (int)random_below(&rng, D.n_train);
            memcpy(ids + (int64_t)r * D.T, D.ids + (int64_t)e * D.T, (size_t)D.T * sizeof(int32_t));
            lengths[r] = D.lengths[e]; labels[r] = D.labels[e];
        }
        loss = mf_model_classify_loss(m, ids, lengths, labels, B, D.T);
        mf_backward(ctx, loss);
        mf_optimizer_step(ctx, &opt);
        loss_sum += mf_item(ctx, loss);
        mf_zero_grad(ctx);
        mf_reset(ctx);
        if (!mf_ok(ctx)) die("training: %s", mf_error(ctx));
        if (step % S.eval_every == 0 || step == S.steps) {
            int n = step % S.eval_every ? step % S.eval_every : S.eval_every, right;
            double acc = evaluate(ctx, m, &D, B, &right);
            say(R, o, "step %5d  loss %.4f  held-out accuracy %.1f%%\n", step, loss_sum / n, acc);
            loss_sum = 0;
        }
    }
    free(ids); free(lengths); free(labels);
    o->acc = evaluate(ctx, m, &D, S.batch, &o->right);
    say(R, o, "held-out accuracy: %.1f%% (%d of %d)\n", o->acc, o->right, D.n - D.n_train);
    if (S.save) { R->ctx = ctx; R->m = m; }
    else { mf_model_free(m); mf_ctx_free(ctx); }
    run_finished(R, i);
}

/* --mixers a,b,c: the names into MIXER_NAMES, each a mixer of this program, none twice */
static void parse_mixers(const char *list) {
    static char buf[1024];
    char *item, *next;
    if (strlen(list) >= sizeof buf) die("--mixers: the list is longer than %d bytes", (int)sizeof buf - 1);
    snprintf(buf, sizeof buf, "%s", list);
    N_MIXERS = 0;
    for (item = buf; item; item = next) {
        if ((next = strchr(item, ','))) *next++ = '\0';
        if (!item[0]) die("--mixers \"%s\": an empty name; give mixers separated by commas, e.g. sdpa,metric,identity", list);
        if (mf_mixer_from_name(item) < 0) die("--mixers: \"%s\" is not a mixer; the mixers are %s", item, MIXERS);
        for (int k = 0; k < N_MIXERS; k++)
            if (strcmp(MIXER_NAMES[k], item) == 0) die("--mixers: %s is named twice; name each mixer once", item);
        if (N_MIXERS == MAX_MIXERS) die("--mixers: more than %d mixers", MAX_MIXERS);
        MIXER_NAMES[N_MIXERS++] = item;
    }
}

/* "a, b and c" of the mixers k with pick[k] */
static const char *name_list(const int *pick, char *buf, size_t size) {
    int total = 0, seen = 0;
    size_t off = 0;
    for (int k = 0; k < N_MIXERS; k++) total += pick[k];
    buf[0] = 0;
    for (int k = 0; k < N_MIXERS && off < size; k++) {
        if (!pick[k]) continue;
        seen++;
        off += (size_t)snprintf(buf + off, size - off, "%s%s", seen == 1 ? "" : seen == total ? " and " : ", ", MIXER_NAMES[k]);
    }
    return buf;
}

/* the ablation's table (markdown) and its sentence: each mixer against the first by Welch's test */
static void ablation_table(FILE *f, const stat_summary *st) {
    int match[MAX_MIXERS] = {0}, lower[MAX_MIXERS] = {0}, higher[MAX_MIXERS] = {0}, unknown = 0;
    char a[1024], b[1024], c[1024];
    fprintf(f, "| mixer | parameters | held-out accuracy (mean ± sd) | 95%% interval | difference to %s | Welch's test (5%%) |\n"
               "|---|---|---|---|---|---|\n", MIXER_NAMES[0]);
    for (int k = 0; k < N_MIXERS; k++) {
        int w = k ? welch_differs(st[0], st[k]) : -1;
        if (st[k].n < 2) fprintf(f, "| %s | %lld | %.1f%% | (one seed) | ", MIXER_NAMES[k], PARAMS[k], st[k].mean);
        else fprintf(f, "| %s | %lld | %.1f%% ± %.1f | [%.1f, %.1f] | ", MIXER_NAMES[k], PARAMS[k], st[k].mean, st[k].sd,
                     st[k].mean - st[k].ci, st[k].mean + st[k].ci);
        if (k == 0) { fprintf(f, "(reference) | |\n"); continue; }
        fprintf(f, "%+.1f | %s |\n", round(10 * (st[k].mean - st[0].mean)) / 10 + 0.0, /* + 0.0: no "-0.0" */
                w < 0 ? "cannot tell (fewer than 2 seeds)" : w ? "differs" : "no significant difference");
        if (w < 0) unknown = 1;
        else if (!w) match[k] = 1;
        else if (st[k].mean < st[0].mean) lower[k] = 1;
        else higher[k] = 1;
    }
    fprintf(f, "\n");
    if (unknown) { fprintf(f, "With fewer than 2 seeds there is no interval: give --seeds 2 or more to test the mixers against %s.\n", MIXER_NAMES[0]); return; }
    if (N_MIXERS == 1) return;
    name_list(match, a, sizeof a); name_list(lower, b, sizeof b); name_list(higher, c, sizeof c);
    if (a[0]) fprintf(f, "Within the 95%% interval, %s match%s %s (Welch's test finds no significant difference at the 5%% level)",
                      a, strstr(a, " and ") ? "" : "es", MIXER_NAMES[0]);
    else fprintf(f, "No mixer matches %s within the 95%% interval (Welch's test, 5%% level)", MIXER_NAMES[0]);
    if (b[0]) fprintf(f, "%s%s below it", a[0] ? "; " : ": ", b);
    if (c[0]) fprintf(f, "%s%s above it", a[0] || b[0] ? "; " : ": ", c);
    fprintf(f, ".\n");
}

static void write_report(const char *path, int argc, char **argv, const char *file, const run_out *out, const stat_summary *st) {
    FILE *f = fopen(path, "w");
    if (!f) die("--report: cannot write \"%s\": %s", path, strerror(errno));
    fprintf(f, "# Classification ablation: %s\n\nCommand: `", file ? file : S.task);
    for (int a = 0; a < argc; a++) fprintf(f, "%s%s", a ? " " : "", argv[a]);
    fprintf(f, "`\n\nData: %s, %d examples (%d train, %d held out), %d classes (", file ? file : S.task, D.n, D.n_train,
            D.n - D.n_train, D.n_labels);
    for (int c = 0; c < D.n_labels && c < 12; c++) fprintf(f, "%s%s", c ? ", " : "", D.names[c]);
    fprintf(f, "%s), ", D.n_labels > 12 ? ", ..." : "");
    if (!file) fprintf(f, "generated");
    else if (S.tokenizer) fprintf(f, "encoded by the tokenizer %s", S.tokenizer);
    else fprintf(f, "%s", strcmp(S.tokens, "chars") == 0 ? "character tokens (the byte values that occur)" : "byte tokens");
    fprintf(f, ", vocabulary %d, rows of up to %d tokens", D.V, D.T);
    if (D.cut) fprintf(f, "; %d texts cut to %d tokens", D.cut, D.T);
    fprintf(f, ".\n\nModel: %d %s block%s (d_model %d, %d heads, d_ff %d, %s positions, %s", M.layers,
            S.causal ? "causal" : "non-causal", M.layers == 1 ? "" : "s", M.d_model, M.heads, M.d_ff, M.pos, M.act);
    for (int k = 0; k < N_MIXERS; k++) { /* the settings of the mixers that have some */
        if (strcmp(MIXER_NAMES[k], "metric") == 0) fprintf(f, "; metric: the %s form of M", mf_metric_form_name((mf_metric_form)M.f.metric_form));
        if (strcmp(MIXER_NAMES[k], "pool") == 0) fprintf(f, "; pool: a window of %d", M.f.pool_size);
    }
    fprintf(f, "), the mean over the positions, a Linear to the classes. Training: %d steps of %d rows, Adam %g, %s; seeds "
               "%d to %d, the same data, split and batches for every mixer.\n\n",
            S.steps, S.batch, (double)S.lr, S.precision, S.seed, S.seed + S.seeds - 1);
    ablation_table(f, st);
    fprintf(f, "\nHeld-out accuracy (%%) of each seed:\n\n| mixer |");
    for (int r = 0; r < S.seeds; r++) fprintf(f, " seed %d |", S.seed + r);
    fprintf(f, "\n|---|");
    for (int r = 0; r < S.seeds; r++) fprintf(f, "---|");
    fprintf(f, "\n");
    for (int k = 0; k < N_MIXERS; k++) {
        fprintf(f, "| %s |", MIXER_NAMES[k]);
        for (int r = 0; r < S.seeds; r++) fprintf(f, " %.1f |", out[k * S.seeds + r].acc);
        fprintf(f, "\n");
    }
    if (fclose(f) != 0) die("--report: writing \"%s\" failed", path);
}

int main(int argc, char **argv) {
    static unsigned char given[N_OPTS];
    static char stored_tok[4096];
    const char *file = NULL;
    mf_tokenizer *tok = NULL;
    char data_kind[64] = "", vocab[1024] = "";
    runs R;
    uint64_t rng;
    int n_runs;
    memset(&R, 0, sizeof R);
    model_choices();
    parse_options(argc, argv, OPTS, N_OPTS, given, &file, usage);
    if (file && given[find_option(OPTS, N_OPTS, "task")]) die("--task and a text file given; the task is generated, give one of them");
    if (!file && given[find_option(OPTS, N_OPTS, "tokens")]) die("--tokens applies to a text file; give one, or drop --tokens");
    if (!file && S.tokenizer) die("--tokenizer applies to a text file; give one, or drop --tokenizer");
    if (S.tokenizer && given[find_option(OPTS, N_OPTS, "tokens")])
        die("--tokens and --tokenizer given; a text file is encoded by one of them: drop --tokens");
    if (S.seeds > 1 && (S.save || S.load))
        die("--seeds %d trains %d models; --%s takes one: drop --seeds or --%s", S.seeds, S.seeds, S.save ? "save" : "load",
            S.save ? "save" : "load");
    if (S.mixers && (S.save || S.load))
        die("--mixers trains a model of each mixer; --%s takes one: drop --mixers or --%s", S.save ? "save" : "load",
            S.save ? "save" : "load");
    if (S.mixers && given[find_option(OPTS, N_OPTS, "mixer")]) die("--mixer and --mixers given; give one of them");
    if (S.report && !S.mixers) die("--report writes the table of --mixers; give --mixers (e.g. --mixers sdpa,identity)");
    if (S.seeds > 1000) die("--seeds %d: at most 1000 models", S.seeds);
    if (S.mixers) parse_mixers(S.mixers);
    EX_PARSED();
    if (S.load) {
        load_settings(given, &D, data_kind, sizeof data_kind, vocab, sizeof vocab);
        int tokenizer_model = strcmp(data_kind, "tokenizer") == 0;
        int text_model = strcmp(data_kind, "bytes") == 0 || strcmp(data_kind, "chars") == 0 || tokenizer_model;
        if (!file && text_model) die("--load: \"%s\" was trained on a labelled text file (%s tokens); give a labelled text file", S.load, data_kind);
        if (file && !text_model) die("--load: \"%s\" was trained on the generated task %s; drop the text file", S.load, data_kind);
        if (!file && given[find_option(OPTS, N_OPTS, "task")] && strcmp(data_kind, S.task) != 0)
            die("--load: \"%s\" was trained on the generated task %s; give --task %s or drop --task", S.load, data_kind, data_kind);
        if (tokenizer_model) {
            if (mf_load_meta(S.load, "classify.tokenizer", stored_tok, sizeof stored_tok) < 0)
                die("--load: \"%s\" lacks classify.tokenizer in its metadata", S.load);
            if (given[find_option(OPTS, N_OPTS, "tokens")])
                die("--tokens: \"%s\" was trained with the tokenizer \"%s\"; drop --tokens", S.load, stored_tok);
            if (!S.tokenizer) { /* the tokenizer it was trained with, where it was */
                FILE *probe = strcmp(stored_tok, "bytes") == 0 ? NULL : fopen(stored_tok, "rb");
                if (strcmp(stored_tok, "bytes") != 0 && !probe)
                    die("--load: \"%s\" was trained with the tokenizer \"%s\", which cannot be read here (%s): give "
                        "--tokenizer FILE, that tokenizer where it is now", S.load, stored_tok, strerror(errno));
                if (probe) fclose(probe);
                S.tokenizer = stored_tok;
            }
        } else if (file && S.tokenizer)
            die("--tokenizer: \"%s\" was trained on %s tokens, not with a tokenizer; drop --tokenizer", S.load, data_kind);
        if (file && !tokenizer_model) S.tokens = strcmp(data_kind, "chars") == 0 ? "chars" : "bytes";
        else if (!file) S.task = data_kind;
    }
    if (!S.mixers) MIXER_NAMES[0] = M.mixer;
    rng = 0x5eed0000ULL + (uint64_t)S.seed;
    if (file) {
        size_t len;
        unsigned char *bytes = read_file(file, &len);
        if (S.tokenizer) tok = tokenizer_open(S.tokenizer);
        else if (S.load && strcmp(S.tokens, "chars") == 0) tok = tokenizer_from_vocab_hex(vocab, S.load);
        else tok = strcmp(S.tokens, "chars") == 0 ? mf_tokenizer_chars(bytes, len) : mf_tokenizer_bytes();
        if (mf_tokenizer_error(tok)) die("\"%s\": %s", file, mf_tokenizer_error(tok));
        if (S.load && S.tokenizer) { /* the ids must mean what they meant in training */
            char buf[64];
            int V = mf_load_meta(S.load, "classify.vocab_size", buf, sizeof buf) < 0 ? -1 : atoi(buf);
            uint64_t h = mf_load_meta(S.load, "classify.tokenizer_fnv1a", buf, sizeof buf) < 0 ? 0 : strtoull(buf, NULL, 16);
            if (V != mf_tokenizer_vocab_size(tok) || h != tokenizer_identity(S.tokenizer))
                die("--tokenizer \"%s\" is not the tokenizer checkpoint \"%s\" was trained with (\"%s\": %s), so its ids "
                    "would mean other text: give --tokenizer %s, or drop --tokenizer to use it", S.tokenizer, S.load, stored_tok,
                    V != mf_tokenizer_vocab_size(tok) ? "another vocabulary size" : "its FNV-1a differs", stored_tok);
        }
        text_read(&D, file, bytes, len, tok, M.seq_len, !S.load);
        free(bytes);
    } else task_generate(&D, S.task, S.examples, M.seq_len, rng);
    data_split(&D, rng ^ 0x5b117ULL);
    DATA_RNG = rng;
    for (int k = 0; k < N_MIXERS; k++) { /* each mixer's config, checked (and counted) before any trains */
        model_settings one = M;
        mf_ctx *probe = mf_ctx_new(0);
        mf_model *m;
        one.mixer = MIXER_NAMES[k];
        CFG[k] = settings_config(&one, D.V);
        if (S.mixers) mf_model_config_reset_unread(&CFG[k]); /* e.g. --metric-form: the metric mixer's alone */
        CFG[k].causal = S.causal; CFG[k].n_classes = D.n_labels;
        if (!probe) die("out of memory");
        set_precision(probe, S.precision);
        check_model_config(probe, &CFG[k]);
        if (!(m = mf_model_new(probe, &CFG[k]))) die("%s", mf_error(probe));
        PARAMS[k] = (long long)mf_param_values(probe, 0);
        mf_model_free(m);
        mf_ctx_free(probe);
    }
    printf("%s: %d examples (%d train, %d held out), %d classes, vocabulary %d, rows of up to %d tokens\n",
           file ? file : S.task, D.n, D.n_train, D.n - D.n_train, D.n_labels, D.V, D.T);
    if (D.cut) printf("%d texts were longer than --seq-len %d and are cut there\n", D.cut, D.T);
    for (int k = 0; k < N_MIXERS; k++)
        printf("model: %s mixer, %s, %d layer%s, d_model %d, %lld parameters\n", MIXER_NAMES[k], S.causal ? "causal" : "non-causal",
               M.layers, M.layers == 1 ? "" : "s", M.d_model, PARAMS[k]);
    n_runs = N_MIXERS * S.seeds;
    R.n = n_runs;
    R.jobs = seed_jobs(S.jobs, n_runs);
    if (!(R.out = (run_out *)calloc((size_t)n_runs, sizeof *R.out))) die("out of memory");
    fflush(stdout);
    run_seeds(n_runs, R.jobs, train_run, &R);
    if (S.seeds > 1 || S.mixers) {
        stat_summary st[MAX_MIXERS];
        double *accs = (double *)malloc((size_t)S.seeds * sizeof *accs);
        if (!accs) die("out of memory");
        for (int k = 0; k < N_MIXERS; k++) {
            for (int r = 0; r < S.seeds; r++) accs[r] = R.out[k * S.seeds + r].acc;
            st[k] = summarize(accs, S.seeds);
            if (!S.mixers)
                printf("held-out accuracy over %d seeds: %.1f%% ± %.1f (95%% interval [%.1f, %.1f])\n", S.seeds, st[k].mean,
                       st[k].sd, st[k].mean - st[k].ci, st[k].mean + st[k].ci);
        }
        free(accs);
        if (S.mixers) {
            printf("--- held-out accuracy over %d seed%s\n", S.seeds, S.seeds == 1 ? "" : "s");
            ablation_table(stdout, st);
        }
        if (S.report) { write_report(S.report, argc, argv, file, R.out, st); printf("wrote %s\n", S.report); }
    }
    if (S.save) { save_model(R.ctx, &D, tok); printf("saved %s\n", S.save); }
    mf_model_free(R.m);
    mf_ctx_free(R.ctx);
    free(R.out);
    mf_tokenizer_free(tok);
    free(D.ids); free(D.lengths); free(D.labels);
    for (int c = 0; c < D.n_labels; c++) free(D.names[c]);
    return 0;
}
