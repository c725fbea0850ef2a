/* common.h - what the example programs share (sort.c, train.c, ablate.c, tokenize.c). Include it
   after metaformer.h; define EX_PROG (the program's name in error messages) and, for isatty,
   _POSIX_C_SOURCE 200809L before any include.

     [rng]       splitmix64: the data's reproducible random numbers
     [options]   a table of --options drives parsing, --help and checkpoint metadata
     [progress]  the progress line: updated in place on a terminal, plain lines in a log
     [sorter]    the array-sorter task of docs/math.md §13: batches and held-out accuracy
     [text]      a character-level text file: vocabulary, ids, the 90% / 10% split
     [loaders]   docs/math.md §12: shuffled windows, or sequential columns for memory models
     [steps]     one training step and the validation loss of either loader

   Every function is static; EX_FN marks them unused-is-fine, since no program needs all. */
#ifndef EXAMPLES_COMMON_H
#define EXAMPLES_COMMON_H
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef EX_PROG
#define EX_PROG "example"
#endif
#if defined(__GNUC__) || defined(__clang__)
#define EX_FN static __attribute__((unused))
#else
#define EX_FN static
#endif

/* print "<program>: error: <message>" and exit with status 1 */
EX_FN void die(const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    fprintf(stderr, EX_PROG ": error: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    exit(1);
}

/* ==== [rng] ================================================================================= */
EX_FN uint64_t next_random(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
EX_FN int64_t random_below(uint64_t *s, int64_t n) { return (int64_t)(next_random(s) % (uint64_t)n); }

/* ==== [options] ============================================================================= */
enum { OPT_INT, OPT_FLOAT, OPT_TEXT, OPT_FLAG, OPT_ALIAS };
/* SAVED: stored in checkpoints, and a resumed run must keep the checkpoint's value */
enum { RUN_ONLY, SAVED, SAVED_CHANGEABLE };
typedef struct option {
    const char *name;
    int type;             /* OPT_FLAG: an int set to 1 by "--name" (or --name=0/1); OPT_ALIAS:
                             "--name" sets the TEXT option with the same value pointer to choices */
    void *value;
    int saved;
    double min;           /* numbers: smallest allowed value */
    const char *choices;  /* TEXT: "a|b|c", or NULL for any string; ALIAS: the value it sets */
    const char *help;
} option;

/* "a|b|c" of the library's names of an enum: fn((type)0), fn((type)1), ... up to the first
   "unknown" (mf_mixer_name, mf_pos_name, mf_act_name, mf_feature_name): the choices of an option */
#define LIBRARY_CHOICES(buf, fn, type) do { \
        size_t n_ = 0; \
        (buf)[0] = '\0'; \
        for (int k_ = 0; strcmp(fn((type)k_), "unknown") != 0 && n_ < sizeof(buf); k_++) \
            n_ += (size_t)snprintf((buf) + n_, sizeof(buf) - n_, "%s%s", k_ ? "|" : "", fn((type)k_)); \
    } while (0)

/* position of value in "a|b|c", or -1 */
EX_FN int choice_index(const char *choices, const char *value) {
    size_t n = strlen(value);
    const char *c = choices;
    for (int i = 0; c; i++) {
        if (strncmp(c, value, n) == 0 && (c[n] == '|' || c[n] == 0)) return i;
        if ((c = strchr(c, '|'))) c++;
    }
    return -1;
}

/* parse text into the option; returns NULL or what is wrong */
EX_FN const char *set_option(const option *o, const char *text) {
    static char why[300];
    char *end;
    double v;
    if (o->type == OPT_TEXT) {
        if (o->choices && choice_index(o->choices, text) < 0) {
            snprintf(why, sizeof why, "unknown --%s \"%s\"; choose one of %s", o->name, text, o->choices);
            return why;
        }
        *(const char **)o->value = text;
        return NULL;
    }
    errno = 0;
    v = o->type == OPT_FLOAT ? strtod(text, &end) : (double)strtol(text, &end, 10);
    if (end == text || *end || errno || !isfinite(v) || (o->type != OPT_FLOAT && fabs(v) > INT_MAX)) {
        snprintf(why, sizeof why, "--%s expects %s, got \"%s\"", o->name,
                 o->type == OPT_FLOAT ? "a number" : o->type == OPT_FLAG ? "0 or 1" : "an integer", text);
        return why;
    }
    if (o->type == OPT_FLAG && v != 0 && v != 1) {
        snprintf(why, sizeof why, "--%s expects 0 or 1, got \"%s\"", o->name, text);
        return why;
    }
    if (v < o->min) {
        snprintf(why, sizeof why, "--%s must be >= %g, got %s", o->name, o->min, text);
        return why;
    }
    if (o->type == OPT_FLOAT) *(float *)o->value = (float)v; else *(int *)o->value = (int)v;
    return NULL;
}

/* the value as text (floats with 9 digits: they read back exactly) */
EX_FN const char *format_option(const option *o, char *buf, size_t size) {
    if (o->type == OPT_FLOAT) snprintf(buf, size, "%.9g", (double)*(float *)o->value);
    else if (o->type == OPT_TEXT) snprintf(buf, size, "%s", *(const char **)o->value ? *(const char **)o->value : "");
    else snprintf(buf, size, "%d", *(int *)o->value);
    return buf;
}

/* index of the option called name, or n */
EX_FN int find_option(const option *opts, int n, const char *name) {
    int i = 0;
    while (i < n && strcmp(opts[i].name, name) != 0) i++;
    return i;
}

/* one line per option with its current value as the default (negative numbers: no default) */
EX_FN void print_options(FILE *f, const option *opts, int n) {
    for (int i = 0; i < n; i++) {
        const option *o = &opts[i];
        char left[160];
        if (o->type == OPT_FLAG || o->type == OPT_ALIAS) snprintf(left, sizeof left, "--%s", o->name);
        else snprintf(left, sizeof left, "--%s %s", o->name, o->choices ? o->choices : o->type == OPT_TEXT ? "TEXT" : "N");
        if (strlen(left) > 44) fprintf(f, "  %s\n  %-44s %s", left, "", o->help); /* a long list of choices */
        else fprintf(f, "  %-44s %s", left, o->help);
        if (o->type == OPT_INT && *(int *)o->value >= 0) fprintf(f, " [%d]", *(int *)o->value);
        if (o->type == OPT_FLOAT && *(float *)o->value >= 0) fprintf(f, " [%g]", (double)*(float *)o->value);
        if (o->type == OPT_TEXT && *(const char **)o->value) fprintf(f, " [%s]", *(const char **)o->value);
        fprintf(f, "\n");
    }
    fprintf(f, "  %-44s %s\n", "--help", "this text");
}

/* an alias sets the TEXT option that shares its value pointer */
EX_FN int alias_target(const option *opts, int n, const option *alias) {
    for (int i = 0; i < n; i++)
        if (opts[i].type == OPT_TEXT && opts[i].value == alias->value) return i;
    return n;
}

/* Parse "--name value", "--name=value", flags and aliases into the table; given[i] becomes 1 for
   an option set directly and 2 for one set through an alias (e.g. --feedback sets --mixer), and
   the two must agree. The arguments without "--" (files) go to files[0..max_files), in order, and
   their number to *n_files. usage() prints the help text. */
EX_FN void parse_options_files(int argc, char **argv, const option *opts, int n, unsigned char *given,
                               const char **files, int max_files, int *n_files, void (*usage)(FILE *)) {
    *n_files = 0;
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a], *value, *why;
        char name[64], mine[64];
        int i, t;
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) { usage(stdout); exit(0); }
        if (strncmp(arg, "--", 2) != 0) {
            if (*n_files == max_files && max_files == 1)
                die("two text files given (\"%s\" and \"%s\"); " EX_PROG " takes one", files[0], arg);
            if (*n_files == max_files) die("more than %d files given; " EX_PROG " takes at most %d", max_files, max_files);
            files[(*n_files)++] = arg;
            continue;
        }
        value = strchr(arg, '='); /* --name=value or --name value */
        snprintf(name, sizeof name, "%.*s", value ? (int)(value - arg - 2) : (int)strlen(arg + 2), arg + 2);
        if ((i = find_option(opts, n, name)) == n) die("unknown option \"%s\" (see " EX_PROG " --help)", arg);
        if (value) value++;
        if (opts[i].type == OPT_ALIAS) {
            if (value) die("--%s takes no value (it means --%s %s)", name, opts[alias_target(opts, n, &opts[i])].name,
                           opts[i].choices);
            t = alias_target(opts, n, &opts[i]);
            if (given[t] && strcmp(*(const char **)opts[t].value, opts[i].choices) != 0)
                die("--%s and --%s %s contradict each other; give one of them", name, opts[t].name,
                    *(const char **)opts[t].value);
            *(const char **)opts[t].value = opts[i].choices;
            given[t] = 2; given[i] = 1;
            continue;
        }
        if (!value && opts[i].type == OPT_FLAG) value = "1";
        else if (!value && a + 1 < argc) value = argv[++a];
        else if (!value) die("option --%s needs a value (see " EX_PROG " --help)", name);
        if (given[i] == 2) { /* set before by an alias: they must agree */
            format_option(&opts[i], mine, sizeof mine);
            if (strcmp(mine, value) != 0)
                die("--%s %s contradicts an earlier option that set --%s %s; give one of them", name, value, name, mine);
        }
        if ((why = set_option(&opts[i], value))) die("%s", why);
        given[i] = 1;
    }
}
/* parse_options_files with at most one file, in *file (left alone when none is given) */
EX_FN void parse_options(int argc, char **argv, const option *opts, int n, unsigned char *given,
                         const char **file, void (*usage)(FILE *)) {
    const char *one[1];
    int n_files;
    parse_options_files(argc, argv, opts, n, given, one, 1, &n_files, usage);
    if (n_files) *file = one[0];
}

/* ==== [progress] ============================================================================ */
/* The progress line: on a terminal one line rewritten in place (at most 10 times a second), in a
   log a plain line each time the caller decides. */
typedef struct progress { int tty, open; double shown; } progress;

EX_FN progress progress_new(void) {
    progress p;
    p.tty = isatty(1); p.open = 0; p.shown = -1e9;
    return p;
}
/* on a terminal: whether 0.1 s passed since the last update (or force); in a log: log_due */
EX_FN int progress_due(const progress *p, int force, int log_due) {
    return p->tty ? force || mf_time() - p->shown > 0.1 : log_due;
}
EX_FN void progress_show(progress *p, const char *fmt, ...) {
    va_list ap;
    if (p->tty) printf("\r");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf(p->tty ? "\033[K" : "\n");
    fflush(stdout);
    p->open = p->tty;
    p->shown = mf_time();
}
/* end an in-place line before other output */
EX_FN void progress_break(progress *p) {
    if (p->open) printf("\n");
    p->open = 0;
}
EX_FN void format_eta(double s, char *buf, size_t size) {
    long t = (long)(s + 0.5);
    snprintf(buf, size, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
}

/* ==== [sorter] ============================================================================== */
/* The array sorter (docs/math.md §13): W tokens of {0, 1, 2} and their sorted copy. */
enum { SORT_W = 11, SORT_VOCAB = 3, SORT_MAX_T = 2 * SORT_W };

/* One batch: ids [B][T] and targets [B][T] (-1 = not scored); returns T.
     solvable: the model reads x followed by sorted(x) (2W - 1 tokens fed) and, from position
               W - 1 on, predicts the next sorted token: every input token is visible first.
     seed form (solvable = 0): at position w, seeing x[0..w] only, predict sorted(x)[w]. */
EX_FN int sort_batch(uint64_t *rng, int solvable, int B, int32_t *ids, int32_t *targets) {
    int T = solvable ? 2 * SORT_W - 1 : SORT_W, b, i;
    for (b = 0; b < B; b++) {
        int32_t x[SORT_W], y[SORT_W], count[SORT_VOCAB] = {0}, *id = ids + b * T, *tg = targets + b * T, v, n = 0;
        for (i = 0; i < SORT_W; i++) count[x[i] = (int32_t)(next_random(rng) % SORT_VOCAB)]++;
        for (v = 0; v < SORT_VOCAB; v++) while (count[v]--) y[n++] = v;   /* counting sort */
        if (solvable) { /* sequence x ++ y (2W tokens): feed the first 2W-1, score the W that predict y */
            for (i = 0; i < T; i++) {
                id[i] = i < SORT_W ? x[i] : y[i - SORT_W];
                tg[i] = i >= SORT_W - 1 ? y[i - (SORT_W - 1)] : -1;
            }
        } else {
            for (i = 0; i < SORT_W; i++) { id[i] = x[i]; tg[i] = y[i]; }
        }
    }
    return T;
}

/* Token accuracy (percent) on n_batches fresh batches of B, without gradients or dropout (CPU
   contexts: the logits are read directly); *loss gets the mean cross-entropy of the scored
   tokens and *n_scored their number. A memory model keeps its training memory: it evaluates
   on memory slot 1, emptied first. */
EX_FN double sort_evaluate(mf_model *model, mf_ctx *ctx, uint64_t *rng, int solvable, int B, int n_batches,
                           int32_t *ids, int32_t *targets, long *n_scored, double *loss) {
    long right = 0, total = 0;
    double nll = 0;
    int grad = mf_set_grad(ctx, 0), training = mf_set_training(ctx, 0), k, i, v;
    int slot = mf_model_get_config(model)->mixer == MF_MIXER_RELATIVE ? mf_model_memory_slot(model, 1) : -1;
    if (slot >= 0) mf_model_reset_memory(model);
    for (k = 0; k < n_batches; k++) {
        int T = sort_batch(rng, solvable, B, ids, targets);
        mf_tensor *logits = mf_model_forward(model, ids, B, T);
        if (!logits) break;
        for (i = 0; i < B * T; i++) {
            const float *row = logits->data + (int64_t)i * SORT_VOCAB;
            double mx = row[0], sum = 0;
            int best = 0;
            if (targets[i] < 0) continue;
            for (v = 1; v < SORT_VOCAB; v++) if (row[v] > row[best]) best = v;
            mx = row[best];
            for (v = 0; v < SORT_VOCAB; v++) sum += exp((double)row[v] - mx);
            nll += mx + log(sum) - row[targets[i]];
            right += best == targets[i];
            total++;
        }
        mf_reset(ctx);
    }
    if (slot >= 0) mf_model_memory_slot(model, slot);
    mf_set_grad(ctx, grad);
    mf_set_training(ctx, training);
    *n_scored = total;
    if (loss) *loss = total ? nll / (double)total : NAN;
    return total ? 100.0 * right / total : 0.0;
}

/* ==== [text] ================================================================================ */
/* A text file as bytes: the vocabulary is the sorted set of byte values in the whole file and the
   first floor(0.9 * length) bytes train, the rest validates (docs/math.md §12). */
typedef struct text_data {
    unsigned char *bytes;
    size_t len;
    int V;                      /* vocabulary size */
    int32_t stoi[256];          /* byte -> id */
    unsigned char itos[256];    /* id -> byte */
    unsigned char present[256];
    char vocab_hex[513];        /* the byte values in hex ("0a2021..."): checkpoints compare it */
    uint64_t hash;              /* FNV-1a of the bytes */
    int32_t *ids;               /* len ids */
    int64_t n_train, n_valid;
} text_data;

EX_FN unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    size_t cap = 0, n = 0;
    if (!f) die("cannot open \"%s\": %s", path, strerror(errno));
    for (;;) {
        if (n == cap) {
            unsigned char *nb = (unsigned char *)realloc(buf, cap = cap ? 2 * cap : 1 << 20);
            if (!nb) die("out of memory reading \"%s\"", path);
            buf = nb;
        }
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
    }
    if (ferror(f)) die("cannot read \"%s\": %s (is it a regular, readable file?)", path, strerror(errno));
    fclose(f);
    *len = n;
    return buf;
}

EX_FN uint64_t fnv1a(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    while (n--) h = (h ^ *p++) * 0x100000001b3ULL;
    return h;
}

/* read path, refuse empty and binary files, build the vocabulary, the ids and the split */
EX_FN void text_load(text_data *t, const char *path) {
    size_t controls = 0;
    memset(t, 0, sizeof *t);
    t->bytes = read_file(path, &t->len);
    if (t->len == 0) die("\"%s\" is empty; give a text file (a few hundred kB of text trains well)", path);
    for (size_t i = 0; i < t->len; i++) {
        unsigned char c = t->bytes[i];
        if (c == 0) die("\"%s\" looks binary (it contains NUL bytes); " EX_PROG " reads plain text", path);
        if ((c < 32 && !strchr("\t\n\v\f\r", c)) || c == 127) controls++;
        t->present[c] = 1;
    }
    if (controls * 20 > t->len) /* over 5%: real text has almost none besides tab, newline, form feed */
        die("\"%s\" looks binary (%zu of %zu bytes are control characters); " EX_PROG " reads plain text", path,
            controls, t->len);
    for (int c = 0; c < 256; c++)
        if (t->present[c]) {
            t->itos[t->V] = (unsigned char)c; t->stoi[c] = t->V;
            snprintf(t->vocab_hex + 2 * t->V, 3, "%02x", c);
            t->V++;
        }
    t->hash = fnv1a(t->bytes, t->len);
    if (!(t->ids = (int32_t *)malloc(t->len * sizeof *t->ids))) die("out of memory");
    for (size_t i = 0; i < t->len; i++) t->ids[i] = t->stoi[t->bytes[i]];
    t->n_train = (int64_t)t->len * 9 / 10; /* floor(0.9 * len) */
    t->n_valid = (int64_t)t->len - t->n_train;
}

/* each split needs at least one window of T + 1 characters */
EX_FN void text_need_windows(const text_data *t, const char *path, int T) {
    int64_t need = T + 1;
    if (t->n_train >= T + 1 && t->n_valid >= T + 1) return;
    while (need * 9 / 10 < T + 1 || need - need * 9 / 10 < T + 1) need++;
    die("\"%s\" is too short: %zu bytes, but --seq-len %d needs at least %lld (a window of %d characters in "
        "both the 90%% training and the 10%% validation part); use a longer text or a smaller --seq-len",
        path, t->len, T, (long long)need, T + 1);
}

EX_FN void text_free(text_data *t) {
    free(t->bytes); free(t->ids);
    memset(t, 0, sizeof *t);
}

/* ==== [loaders] ============================================================================= */
/* The shuffled loader of docs/math.md §12 with a checkpointable RNG: each epoch visits the
   windows starting at i * T in a random order, each shifted by a random offset. */
typedef struct shuffle_loader {
    const int32_t *ids;
    int64_t n, items, pos; /* tokens; windows per epoch; windows of this epoch already used */
    int T;
    int64_t *perm;
    uint64_t rng, epoch_rng; /* RNG state now and at the start of this epoch */
} shuffle_loader;

EX_FN void shuffle_init(shuffle_loader *L, const int32_t *ids, int64_t n, int T, uint64_t seed) {
    L->ids = ids; L->n = n; L->T = T;
    L->items = (n - 1) / T;
    if (!(L->perm = (int64_t *)malloc((size_t)L->items * sizeof(int64_t)))) die("out of memory");
    L->rng = 0x5eed0000ULL ^ seed * 0x9e3779b97f4a7c15ULL;
    L->epoch_rng = 0;
    L->pos = L->items; /* the first batch starts an epoch */
}

EX_FN void shuffle_new_epoch(shuffle_loader *L) {
    L->epoch_rng = L->rng;
    for (int64_t i = 0; i < L->items; i++) L->perm[i] = i;
    for (int64_t i = L->items - 1; i > 0; i--) {
        int64_t j = random_below(&L->rng, i + 1), t = L->perm[i];
        L->perm[i] = L->perm[j]; L->perm[j] = t;
    }
    L->pos = 0;
}

/* up to B windows into x (inputs) and y (targets, shifted by one), [B][T]; the last batch of an
   epoch may be smaller. Returns the number of windows. */
EX_FN int shuffle_next(shuffle_loader *L, int B, int32_t *x, int32_t *y) {
    int b, T = L->T;
    if (L->pos == L->items) shuffle_new_epoch(L);
    for (b = 0; b < B && L->pos < L->items; b++) {
        int64_t start = L->perm[L->pos++] * T, room = L->n - (start + T + 1);
        start += random_below(&L->rng, (room < T - 1 ? room : T - 1) + 1);
        for (int t = 0; t < T; t++) { x[b * T + t] = L->ids[start + t]; y[b * T + t] = L->ids[start + t + 1]; }
    }
    return b;
}

/* after --resume: replay the interrupted epoch's shuffle, then continue the saved RNG stream */
EX_FN void shuffle_restore(shuffle_loader *L, uint64_t epoch_rng, uint64_t rng, int64_t pos) {
    if (pos < L->items) { L->rng = epoch_rng; shuffle_new_epoch(L); }
    L->epoch_rng = epoch_rng; L->rng = rng;
    L->pos = pos < L->items ? pos : L->items;
}

/* The sequential loader of docs/math.md §12, for the memory models (relative, compressive):
   the text is cut into B contiguous columns of n = len / B tokens (the rest is dropped); batch
   row b continues row b of the previous batch, T tokens at a time, and the last batch of a pass
   is shorter when n - 1 is not a multiple of T. */
typedef struct seq_loader {
    const int32_t *ids;
    int64_t n;      /* tokens per column */
    int B, T;
    int64_t idx;    /* position in the columns of the next batch; n - 1 = the pass is over */
} seq_loader;

/* 0, or -1 when the columns are too short for one batch (n < 2) */
EX_FN int seq_init(seq_loader *L, const int32_t *ids, int64_t len, int B, int T) {
    L->ids = ids; L->B = B; L->T = T;
    L->n = len / B;
    L->idx = L->n - 1; /* the first batch starts a pass */
    return L->n < 2 ? -1 : 0;
}

/* the next batch: x, y [B][Tb] (targets shifted by one); returns Tb (1..T). *new_pass is 1 when
   this batch starts a pass over the data (the caller empties the memories then). */
EX_FN int seq_next(seq_loader *L, int32_t *x, int32_t *y, int *new_pass) {
    int Tb;
    *new_pass = L->idx >= L->n - 1;
    if (*new_pass) L->idx = 0;
    Tb = (int)(L->n - 1 - L->idx < L->T ? L->n - 1 - L->idx : L->T);
    for (int b = 0; b < L->B; b++)
        for (int t = 0; t < Tb; t++) {
            x[b * Tb + t] = L->ids[b * L->n + L->idx + t];
            y[b * Tb + t] = L->ids[b * L->n + L->idx + t + 1];
        }
    L->idx += Tb;
    return Tb;
}

/* batches in a pass: ceil((n - 1) / T) */
EX_FN int64_t seq_batches(const seq_loader *L) { return (L->n - 1 + L->T - 1) / L->T; }

/* models with memory carried from batch to batch: they need the sequential loader */
EX_FN int has_memory(const mf_model_config *c) { return c->mixer == MF_MIXER_RELATIVE; }

/* ==== [steps] =============================================================================== */
/* One training step (docs/math.md §11.5): forward and loss, backward, clip, optimizer step, zero grad.
   *loss gets the loss and *ar the compressive models' attention-reconstruction part of it
   (0 for the others), read before mf_reset. Returns 0, or -1 with the error in ctx. */
EX_FN int train_step(mf_ctx *ctx, mf_model *m, const mf_optimizer *opt, float clip, const int32_t *x,
                     const int32_t *y, int B, int T, float *loss, float *ar) {
    mf_tensor *l = mf_model_loss(m, x, y, B, T);
    mf_backward(ctx, l);
    if (clip > 0) mf_clip_grad_norm(ctx, clip);
    mf_optimizer_step(ctx, opt);
    mf_zero_grad(ctx);
    *loss = mf_item(ctx, l); /* the value on any device */
    *ar = mf_model_aux_loss(m);
    mf_reset(ctx);
    return mf_ok(ctx) ? 0 : -1;
}

/* Mean validation cross-entropy (without the reconstruction loss, which goes to *ar when ar is
   not NULL) of n_batches batches of B rows over the validation ids [n], without gradients or
   dropout. A model without memory reads windows of T spread evenly over the text; a memory
   model reads the first n_batches batches of a sequential loader on memory slot 1, emptied at
   the start (the training memory in slot 0 is left alone). x, y hold B * T ids. Returns NaN when
   a forward fails (the error is in ctx) or a memory model's validation text is too short for two
   tokens per row (check with seq_init first). */
EX_FN double validate(mf_ctx *ctx, mf_model *m, const int32_t *ids, int64_t n, int T, int B, int n_batches,
                      int32_t *x, int32_t *y, double *ar) {
    int grad = mf_set_grad(ctx, 0), training = mf_set_training(ctx, 0), memory = has_memory(mf_model_get_config(m));
    int slot = memory ? mf_model_memory_slot(m, 1) : 0;
    double ce_sum = 0, ar_sum = 0, tokens = 0;
    seq_loader sq;
    int64_t windows = (n - 1) / T, count = (int64_t)n_batches * B, done = 0;
    if (count > windows) count = windows;
    if (memory) {
        count = 0;
        if (slot >= 0 && seq_init(&sq, ids, n, B, T) == 0) {
            mf_model_reset_memory(m);
            count = seq_batches(&sq) < n_batches ? seq_batches(&sq) : n_batches;
        }
    }
    while (done < count && mf_ok(ctx)) {
        int b = B, Tb = T, fresh;
        mf_tensor *loss;
        float a;
        if (memory) Tb = seq_next(&sq, x, y, &fresh);
        else {
            b = count - done < B ? (int)(count - done) : B;
            for (int r = 0; r < b; r++) {
                int64_t start = (done + r) * windows / count * T;
                for (int t = 0; t < T; t++) { x[r * T + t] = ids[start + t]; y[r * T + t] = ids[start + t + 1]; }
            }
        }
        if (!(loss = mf_model_loss(m, x, y, b, Tb))) break;
        a = mf_model_aux_loss(m);
        ce_sum += ((double)mf_item(ctx, loss) - a) * b * Tb;
        ar_sum += (double)a * b * Tb;
        tokens += (double)b * Tb;
        done += memory ? 1 : b;
        mf_reset(ctx);
    }
    if (memory && slot >= 0) mf_model_memory_slot(m, slot);
    mf_set_grad(ctx, grad);
    mf_set_training(ctx, training);
    if (ar) *ar = tokens > 0 ? ar_sum / tokens : 0;
    return mf_ok(ctx) && tokens > 0 ? ce_sum / tokens : NAN;
}
#endif /* EXAMPLES_COMMON_H */
