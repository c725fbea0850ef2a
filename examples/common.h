/* common.h - what the example programs share (sort.c, train.c, ablate.c, tokenize.c). Include it
   after metaformer.h; define EX_PROG (the program's name in error messages) and, for isatty,
   _POSIX_C_SOURCE 200809L before any include.

     [rng]       splitmix64: the data's reproducible random numbers
     [options]   a table of --options drives parsing, --help and checkpoint metadata
     [progress]  the progress line: updated in place on a terminal, plain lines in a log
     [sorter]    the array-sorter task of docs/math.md §13: batches and held-out accuracy
     [text]      a character-level text file: vocabulary, ids, the 90% / 10% split
     [loaders]   a text's splits as token streams; the library's loaders (docs/math.md §12)
     [model]     the model settings (train.c's options, checkpoints, build/sample) and their config
     [presets]   the seeds' experiments as options (--preset, --list-presets, ablate --seed-configs)
     [checkpoints] what build/train stores about its data and tokenizer, and the checks of it
     [sample]    generate and print a sample
     [steps]     one training step and the validation loss of either loader, on one process or
                 on the ranks of a data-parallel run (build/train-mpi)
     [stats]     several seeds: mean, standard deviation, 95% interval; Welch's test; --jobs (seeds at
                 once); the eigenvalues of a symmetric form

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
#ifdef _OPENMP
#include <omp.h>
#endif

#ifndef EX_PROG
#define EX_PROG "example"
#endif
#if defined(__GNUC__) || defined(__clang__)
#define EX_FN static __attribute__((unused))
#define EX_VAR static __attribute__((unused))
#define EX_NORETURN __attribute__((noreturn))
#else
#define EX_NORETURN
#define EX_FN static
#define EX_VAR static
#endif

/* The fuzz targets of the command lines (tests/fuzz/fuzz_cli_*.c) define EX_FUZZ: die() keeps its
   message and longjmps back to the target instead of exiting, so does exit(), and EX_PARSED() (where
   a program has checked its options, before it touches any file) returns there too. */
#ifdef EX_FUZZ
#include <setjmp.h>
enum { EX_FUZZ_DIED = 1, EX_FUZZ_EXITED, EX_FUZZ_PARSED };
EX_VAR jmp_buf ex_fuzz_jmp;
EX_VAR char ex_fuzz_msg[1024];
EX_VAR int ex_fuzz_status;
EX_FN EX_NORETURN void ex_fuzz_exit(int status) { ex_fuzz_status = status; longjmp(ex_fuzz_jmp, EX_FUZZ_EXITED); }
#define exit(status) ex_fuzz_exit(status)
#define EX_PARSED() longjmp(ex_fuzz_jmp, EX_FUZZ_PARSED)
/* what a program allocated (malloc, realloc) and has not freed: the target frees it after each
   input, as the end of the process would (millions of inputs would otherwise add up) */
EX_VAR void *ex_fuzz_blocks[64];
EX_VAR int ex_fuzz_n_blocks;
EX_FN void ex_fuzz_forget(void *p) {
    for (int i = 0; p && i < ex_fuzz_n_blocks; i++)
        if (ex_fuzz_blocks[i] == p) { ex_fuzz_blocks[i] = ex_fuzz_blocks[--ex_fuzz_n_blocks]; return; }
}
EX_FN void *ex_fuzz_keep(void *p) {
    if (p && ex_fuzz_n_blocks < 64) ex_fuzz_blocks[ex_fuzz_n_blocks++] = p;
    return p;
}
EX_FN void *ex_fuzz_malloc(size_t n) { return ex_fuzz_keep(malloc(n)); }
EX_FN void *ex_fuzz_realloc(void *p, size_t n) {
    void *q = realloc(p, n);
    if (q) { ex_fuzz_forget(p); ex_fuzz_keep(q); }
    return q;
}
EX_FN void ex_fuzz_free(void *p) { ex_fuzz_forget(p); free(p); }
EX_FN void ex_fuzz_free_all(void) { while (ex_fuzz_n_blocks) free(ex_fuzz_blocks[--ex_fuzz_n_blocks]); }
#define malloc(n) ex_fuzz_malloc(n)
#define realloc(p, n) ex_fuzz_realloc(p, n)
#define free(p) ex_fuzz_free(p)
#else
#define EX_PARSED() ((void)0)
#endif

/* A program whose error must end more than its own process (build/train-mpi: every rank of the
   job) sets this: die() hands it the message instead of printing it and exiting. It must not return. */
EX_VAR void (*ex_die_hook)(const char *message);

/* print "<program>: error: <message>" and exit with status 1 (or hand the message to ex_die_hook) */
EX_FN EX_NORETURN void die(const char *fmt, ...) {
    va_list ap;
#ifdef EX_FUZZ
    va_start(ap, fmt);
    vsnprintf(ex_fuzz_msg, sizeof ex_fuzz_msg, fmt, ap);
    va_end(ap);
    longjmp(ex_fuzz_jmp, EX_FUZZ_DIED);
#endif
    fflush(stdout);
    if (ex_die_hook) {
        static char msg[16384]; /* a path of up to about 8000 bytes is quoted whole */
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        ex_die_hook(msg);
    }
    fprintf(stderr, EX_PROG ": error: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    exit(1);
}

/* a float as text, the same on every C library: "NaN", "+Inf", "-Inf" or %g */
EX_FN const char *format_value(double v, char *buf, size_t size) {
    if (isnan(v)) snprintf(buf, size, "NaN");
    else if (isinf(v)) snprintf(buf, size, v > 0 ? "+Inf" : "-Inf");
    else snprintf(buf, size, "%g", v);
    return buf;
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
enum { OPT_INT, OPT_FLOAT, OPT_TEXT, OPT_FLAG, OPT_ALIAS, OPT_ENUM };
/* SAVED: stored in checkpoints, and a resumed run must keep the checkpoint's value; CHANGEABLE: a
   resumed run may change it; LATE: stored only when it differs from its default (an option added
   after checkpoints existed: a checkpoint without it has the default) */
enum { RUN_ONLY, SAVED, SAVED_CHANGEABLE, SAVED_LATE };
typedef struct option {
    const char *name;
    int type;             /* OPT_FLAG: an int set to 1 by "--name" (or --name=0/1); OPT_ALIAS:
                             "--name" sets the TEXT option with the same value pointer to choices;
                             OPT_ENUM: an int, the index of its name in choices */
    void *value;
    int saved;
    double min;           /* numbers: smallest allowed value */
    const char *choices;  /* TEXT, ENUM: "a|b|c" (TEXT: NULL for any string); ALIAS: the value it sets */
    const char *help;
} option;

/* the library's config field (MF_FIELD_*) that an option generated from its table sets (its range,
   the mixers that read it in --help), or -1 */
EX_FN int option_field(const option *o) {
    for (int i = 0; o->type != OPT_TEXT && o->type != OPT_ALIAS && i < MF_FIELD_COUNT; i++)
        if (strcmp(mf_config_field_at(i)->option, o->name) == 0) return i;
    return -1;
}

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

/* choice k of "a|b|c" into buf ("" past the last) */
EX_FN const char *choice_name(const char *choices, int k, char *buf, size_t size) {
    const char *c = choices;
    while (c && k-- > 0) if ((c = strchr(c, '|'))) c++;
    snprintf(buf, size, "%.*s", c ? (int)strcspn(c, "|") : 0, c ? c : "");
    return buf;
}

/* parse text into the option; returns NULL or what is wrong */
EX_FN const char *set_option(const option *o, const char *text) {
    static char why[300];
    const mf_config_field *fd = mf_config_field_at(option_field(o));
    char *end;
    double v;
    if (o->type == OPT_TEXT || o->type == OPT_ENUM) {
        int k = o->choices ? choice_index(o->choices, text) : -1;
        if (o->choices && k < 0) {
            snprintf(why, sizeof why, "unknown --%s \"%s\"; choose one of %s", o->name, text, o->choices);
            return why;
        }
        if (o->type == OPT_ENUM) *(int *)o->value = k; else *(const char **)o->value = text;
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
    if (fd && v > fd->hi) {
        snprintf(why, sizeof why, "--%s must be in [%g, %g], got %s", o->name, fd->lo, fd->hi, text);
        return why;
    }
    if (o->type == OPT_FLOAT) *(float *)o->value = (float)v; else *(int *)o->value = (int)v;
    return NULL;
}

/* the value as text (floats with 9 digits: they read back exactly) */
EX_FN const char *format_option(const option *o, char *buf, size_t size) {
    if (o->type == OPT_FLOAT) snprintf(buf, size, "%.9g", (double)*(float *)o->value);
    else if (o->type == OPT_TEXT) snprintf(buf, size, "%s", *(const char **)o->value ? *(const char **)o->value : "");
    else if (o->type == OPT_ENUM) choice_name(o->choices, *(int *)o->value, buf, size);
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
        char left[160], who[256] = "", name[64];
        if (o->type == OPT_FLAG || o->type == OPT_ALIAS) snprintf(left, sizeof left, "--%s", o->name);
        else snprintf(left, sizeof left, "--%s %s", o->name, o->choices ? o->choices : o->type == OPT_TEXT ? "TEXT" : "N");
        if (mf_config_field_readers(option_field(o), who, sizeof who - 2)) strcat(who, ": ");
        if (strlen(left) > 44) fprintf(f, "  %s\n  %-44s %s%s", left, "", who, o->help); /* a long list of choices */
        else fprintf(f, "  %-44s %s%s", left, who, o->help);
        if (o->type == OPT_INT && *(int *)o->value >= 0) fprintf(f, " [%d]", *(int *)o->value);
        if (o->type == OPT_FLOAT && *(float *)o->value >= 0) fprintf(f, " [%g]", (double)*(float *)o->value);
        if (o->type == OPT_TEXT && *(const char **)o->value) fprintf(f, " [%s]", *(const char **)o->value);
        if (o->type == OPT_ENUM) fprintf(f, " [%s]", choice_name(o->choices, *(int *)o->value, name, sizeof name));
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
    const char *one[1] = {NULL};
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

/* the form of the task: flags of sort_batch's form argument */
enum { SORT_SOLVABLE = 1, SORT_RELABELED = 2 };
/* SORT_RELABELED writes value v as token SORT_RELABEL[v]: the order to learn is then 1 < 2 < 0 in
   token ids - the same sequences under other names, a control for claims about the order 0 < 1 < 2 */
EX_VAR const int32_t SORT_RELABEL[SORT_VOCAB] = {1, 2, 0};

/* One batch: ids [B][T] and targets [B][T] (-1 = not scored); returns T.
     SORT_SOLVABLE: the model reads x followed by sorted(x) (2W - 1 tokens fed) and, from position
               W - 1 on, predicts the next sorted token: every input token is visible first.
     seed form (0): at position w, seeing x[0..w] only, predict sorted(x)[w].
     SORT_RELABELED (with either): the values written as SORT_RELABEL's tokens; the random stream is
               drawn alike, so a relabeled batch is the plain one of the same rng renamed. */
EX_FN int sort_batch(uint64_t *rng, int form, int B, int32_t *ids, int32_t *targets) {
    int solvable = form & SORT_SOLVABLE, T = solvable ? 2 * SORT_W - 1 : SORT_W, b, i;
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
        if (form & SORT_RELABELED)
            for (i = 0; i < T; i++) { id[i] = SORT_RELABEL[id[i]]; if (tg[i] >= 0) tg[i] = SORT_RELABEL[tg[i]]; }
    }
    return T;
}

/* models with memory carried from batch to batch: they need the sequential loader */
EX_FN int has_memory(const mf_model_config *c) { return (mf_mixer_flags(c->mixer) & MF_MIXER_MEMORY) != 0; }

/* Token accuracy (percent) on n_batches fresh batches of B, without gradients or dropout (CPU
   contexts: the logits are read directly); *loss gets the mean cross-entropy of the scored
   tokens and *n_scored their number. A memory model keeps its training memory: it evaluates
   on memory slot 1, emptied first. */
EX_FN double sort_evaluate(mf_model *model, mf_ctx *ctx, uint64_t *rng, int form, int B, int n_batches,
                           int32_t *ids, int32_t *targets, long *n_scored, double *loss) {
    long right = 0, total = 0;
    double nll = 0;
    int grad = mf_set_grad(ctx, 0), training = mf_set_training(ctx, 0), k, i, v;
    int slot = has_memory(mf_model_get_config(model)) ? mf_model_memory_slot(model, 1) : -1;
    if (slot >= 0) mf_model_reset_memory(model);
    for (k = 0; k < n_batches; k++) {
        int T = sort_batch(rng, form, B, ids, targets);
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
    if (ferror(f)) {
        int e = errno;
        free(buf); fclose(f);
        die("cannot read \"%s\": %s (is it a regular, readable file?)", path, strerror(e));
    }
    fclose(f);
    *len = n;
    return buf;
}

EX_FN uint64_t fnv1a(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    while (n--) h = (h ^ *p++) * 0x100000001b3ULL;
    return h;
}

/* Check the bytes of a text (t->bytes, t->len, path only for the messages) and build the vocabulary,
   the ids and the split. Returns NULL, or the reason it is refused (in why, size bytes): an empty or
   binary text. The part of text_load that reads outside data, callable without exiting (the fuzz
   target tests/fuzz/fuzz_text.c). */
EX_FN const char *text_parse(text_data *t, const char *path, char *why, size_t size) {
    size_t controls = 0;
    if (t->len == 0) {
        snprintf(why, size, "\"%s\" is empty; give a text file (a few hundred kB of text trains well)", path);
        return why;
    }
    for (size_t i = 0; i < t->len; i++) {
        unsigned char c = t->bytes[i];
        if (c == 0) {
            snprintf(why, size, "\"%s\" looks binary (it contains NUL bytes); " EX_PROG " reads plain text", path);
            return why;
        }
        if ((c < 32 && !strchr("\t\n\v\f\r", c)) || c == 127) controls++;
        t->present[c] = 1;
    }
    if (controls * 20 > t->len) { /* over 5%: real text has almost none besides tab, newline, form feed */
        snprintf(why, size, "\"%s\" looks binary (%zu of %zu bytes are control characters); " EX_PROG " reads plain text",
                 path, controls, t->len);
        return why;
    }
    for (int c = 0; c < 256; c++)
        if (t->present[c]) {
            t->itos[t->V] = (unsigned char)c; t->stoi[c] = t->V;
            snprintf(t->vocab_hex + 2 * t->V, 3, "%02x", c);
            t->V++;
        }
    t->hash = fnv1a(t->bytes, t->len);
    if (!(t->ids = (int32_t *)malloc(t->len * sizeof *t->ids))) { snprintf(why, size, "out of memory"); return why; }
    for (size_t i = 0; i < t->len; i++) t->ids[i] = t->stoi[t->bytes[i]];
    t->n_train = (int64_t)t->len * 9 / 10; /* floor(0.9 * len) */
    t->n_valid = (int64_t)t->len - t->n_train;
    return NULL;
}

/* read path, refuse empty and binary files, build the vocabulary, the ids and the split */
EX_FN void text_load(text_data *t, const char *path) {
    char why[8192]; /* a path of up to about 8000 bytes is quoted whole */
    memset(t, 0, sizeof *t);
    t->bytes = read_file(path, &t->len);
    if (text_parse(t, path, why, sizeof why)) die("%s", why);
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
/* The loaders of docs/math.md §12 live in the library (mf_loader over an mf_tokens stream, with
   their checkpointable state); a text's splits become streams over its ids. */


/* the training (valid = 0) or validation split of a text as a stream (over t->ids: no copy) */
EX_FN mf_tokens *text_split(const text_data *t, int valid) {
    mf_tokens *s = valid ? mf_tokens_from_ids(t->ids + t->n_train, t->n_valid) : mf_tokens_from_ids(t->ids, t->n_train);
    if (mf_tokens_error(s)) die("%s", mf_tokens_error(s));
    return s;
}

/* a loader over the whole stream, dying with a message that names the option to change; rank r of
   world (1: one process) reads the rows [r * B, (r + 1) * B) of each global batch of B * world */
EX_FN void loader_open(mf_loader *L, mf_tokens *s, int sequential, int B, int T, uint64_t seed, int rank, int world,
                       const char *what) {
    mf_loader_config c;
    memset(&c, 0, sizeof c);
    c.batch = B; c.seq_len = T; c.sequential = sequential; c.seed = seed; c.rank = rank; c.world = world;
    if (mf_loader_init(L, s, &c) < 0)
        die("the %s data: %s (--batch %d, --seq-len %d)", what, L->error, B, T);
}

/* ==== [model] =============================================================================== */
/* The model settings of build/train, as its checkpoints store them ("train.<option>"): train.c
   parses them and build/sample reads them back, both through MODEL_OPTIONS and settings_config. */
/* The mixers' fields are the library's table (MF_MODEL_FIELDS): their members here (an ENUM as the
   index of its name), their defaults, options, checkpoint keys and copy into the config come from it. */
#define EX_CTYPE_INT int
#define EX_CTYPE_FLAG int
#define EX_CTYPE_ENUM int
#define EX_CTYPE_FLOAT float
#define EX_FIELD_MEMBER(A, ID, member, ctype, KIND, ...) EX_CTYPE_##KIND member;
#define EX_FIELD_DEFAULT(A, ID, member, ctype, KIND, def, ...) .member = def,
typedef struct model_fields { MF_MODEL_FIELDS(EX_FIELD_MEMBER, ~) } model_fields;
#define MODEL_FIELDS_DEFAULT {MF_MODEL_FIELDS(EX_FIELD_DEFAULT, ~)}
typedef struct model_settings {
    const char *mixer, *pos, *act, *block;
    int d_model, heads, layers, d_ff, seq_len, clone_layers;
    float dropout;
    model_fields f;     /* the mixers' fields */
    const char *fields; /* a registered mixer's fields: "name=value,name=value" */
} model_settings;
#define MODEL_SETTINGS(MIXER, D, H, L, DFF, T) {.mixer = MIXER, .pos = "learned", .act = "gelu", .block = "pre_norm", \
    .d_model = D, .heads = H, .layers = L, .d_ff = DFF, .seq_len = T, .f = MODEL_FIELDS_DEFAULT, .fields = ""}
#define MODEL_SETTINGS_DEFAULT MODEL_SETTINGS("sdpa", 128, 4, 4, 512, 128)

/* Mixers of your own (docs/library.md): a program built with -DEXTRA_MIXERS=fn and a file that
   defines int fn(void), registering them with mf_mixer_register (-1: failed, reason printed), has
   them beside the library's (examples/custom_mixer.c; make build/train-custom). */
#ifdef EXTRA_MIXERS
int EXTRA_MIXERS(void);
#endif
#define EX_STR_(x) #x
#define EX_STR(x) EX_STR_(x)
EX_FN void register_extra_mixers(void) {
#ifdef EXTRA_MIXERS
    static int done;
    if (!done && EXTRA_MIXERS() < 0) die("registering the mixers of %s() failed (see above)", EX_STR(EXTRA_MIXERS));
    done = 1;
#endif
}

/* the choices of the name options: the library's names (model_choices fills them in);
   FIELD_CHOICES[i]: those of the library's ENUM field i */
EX_VAR char MIXERS[1024], POSITIONS[64], ACTIVATIONS[64], BLOCKS[64], FIELD_CHOICES[MF_FIELD_COUNT][64];
EX_FN void model_choices(void) {
    register_extra_mixers();
    LIBRARY_CHOICES(MIXERS, mf_mixer_name, mf_mixer_kind);
    LIBRARY_CHOICES(POSITIONS, mf_pos_name, mf_pos_kind);
    LIBRARY_CHOICES(ACTIVATIONS, mf_act_name, mf_act_kind);
    LIBRARY_CHOICES(BLOCKS, mf_block_name, mf_block_kind);
    for (int i = 0; i < MF_FIELD_COUNT; i++)
        for (int k = 0, n = 0; mf_config_field_choice(i, k) && n < (int)sizeof FIELD_CHOICES[i]; k++)
            n += snprintf(FIELD_CHOICES[i] + n, sizeof FIELD_CHOICES[i] - (size_t)n, "%s%s", k ? "|" : "", mf_config_field_choice(i, k));
}

/* The option rows of the library's field table (M: a model_fields variable); a field's STORE
   (MODEL, KERNEL, LATE) is its option's saved kind */
#define EX_OPT_INT OPT_INT
#define EX_OPT_FLAG OPT_FLAG
#define EX_OPT_FLOAT OPT_FLOAT
#define EX_OPT_ENUM OPT_ENUM
#define EX_CHOICES_INT(ID) NULL
#define EX_CHOICES_FLAG(ID) NULL
#define EX_CHOICES_FLOAT(ID) NULL
#define EX_CHOICES_ENUM(ID) FIELD_CHOICES[MF_FIELD_##ID]
#define EX_SAVED_MODEL SAVED
#define EX_SAVED_KERNEL SAVED_CHANGEABLE
#define EX_SAVED_LATE SAVED_LATE
#define EX_OPTION_ROW(M, ID, member, KIND, lo, opt, saved, help) \
    {opt, EX_OPT_##KIND, &(M).member, saved, lo, EX_CHOICES_##KIND(ID), help},
/* every field, stored in checkpoints (build/train, sample, classify) */
#define EX_FIELD_OPTION(M, ID, member, ctype, KIND, def, lo, hi, opt, STORE, ROLE, help) \
    EX_OPTION_ROW(M, ID, member, KIND, lo, opt, EX_SAVED_##STORE, help)
#define MODEL_FIELD_OPTIONS(M) MF_MODEL_FIELDS(EX_FIELD_OPTION, M)
/* the fields as options of a run that stores none (build/ablate); a VARIANT is one of its models */
#define EX_ROW_FIELD(...) __VA_ARGS__
#define EX_ROW_SHARED(...) __VA_ARGS__
#define EX_ROW_VARIANT(...)
#define EX_FIELD_OPTION_RUN(M, ID, member, ctype, KIND, def, lo, hi, opt, STORE, ROLE, help) \
    EX_ROW_##ROLE(EX_OPTION_ROW(M, ID, member, KIND, lo, opt, RUN_ONLY, help))
#define RUN_FIELD_OPTIONS(M) MF_MODEL_FIELDS(EX_FIELD_OPTION_RUN, M)

/* The option rows of the model settings M (a model_settings variable), in the order checkpoints
   store them; EXTRA goes after --mixer (train.c's --list-mixers and the mixer aliases). */
#define MODEL_OPTIONS(M, EXTRA) \
    {"mixer", OPT_TEXT, &M.mixer, SAVED, 0, MIXERS, "token mixer"}, \
    EXTRA \
    MODEL_FIELD_OPTIONS(M.f) \
    {"d-model", OPT_INT, &M.d_model, SAVED, 1, NULL, "model width"}, \
    {"heads", OPT_INT, &M.heads, SAVED, 1, NULL, "heads (every mixer but pool and identity); must divide d-model"}, \
    {"layers", OPT_INT, &M.layers, SAVED, 1, NULL, "blocks"}, \
    {"d-ff", OPT_INT, &M.d_ff, SAVED, 1, NULL, "FFN hidden width"}, \
    {"seq-len", OPT_INT, &M.seq_len, SAVED, 1, NULL, "context length T of the training windows"}, \
    {"pos", OPT_TEXT, &M.pos, SAVED, 0, POSITIONS, "positional encoding"}, \
    {"act", OPT_TEXT, &M.act, SAVED, 0, ACTIVATIONS, "FFN activation"}, \
    {"dropout", OPT_FLOAT, &M.dropout, SAVED, 0, NULL, "dropout probability"}, \
    {"clone-layers", OPT_FLAG, &M.clone_layers, SAVED, 0, NULL, "every layer starts as a copy of layer 0 (labml's clones)"}, \
    {"block", OPT_TEXT, &M.block, SAVED, 0, BLOCKS, "block layout (stream_norm: the NLP MetaFormer sorter's, docs/math.md §19.2)"}, \
    {"fields", OPT_TEXT, &M.fields, SAVED_LATE, 0, NULL, "a registered mixer's own fields: name=value[,name=value] (a wrong name lists them)"},

/* the fields of a registered mixer, one line each: "  name (default D, range [lo, hi]): help" */
EX_FN void print_mixer_fields(FILE *f, int kind) {
    const mf_mixer_field *fd;
    for (int i = 0; (fd = mf_mixer_field_of((mf_mixer_kind)kind, i)) != NULL; i++)
        fprintf(f, "  %s (default %g, %s in [%g, %g]): %s\n", fd->name, (double)fd->def, fd->integer ? "whole" : "real",
                (double)fd->lo, (double)fd->hi, fd->help ? fd->help : "");
}
/* A SAVED_LATE option goes into a checkpoint only when it differs from its default, and a
   checkpoint without it has the default: older checkpoints load, and the checkpoints of a model
   that does not use it are what they were before the option existed */
EX_FN int option_unstored(const option *o) {
    static model_settings defaults = MODEL_SETTINGS_DEFAULT;
    const option rows[] = {MODEL_OPTIONS(defaults, )};
    int n = (int)(sizeof rows / sizeof rows[0]), i = find_option(rows, n, o->name);
    char v[64], d[64];
    return o->saved == SAVED_LATE && i < n && strcmp(format_option(o, v, sizeof v), format_option(&rows[i], d, sizeof d)) == 0;
}
/* --fields "name=value,...": the registered mixer's fields into cfg (cfg->mixer set) */
EX_FN void set_mixer_fields(mf_model_config *cfg, const char *mixer, const char *fields) {
    char buf[512], *item, *next;
    if (!fields || !fields[0]) return;
    if (strlen(fields) > 63) /* checkpoints store an option's value in 64 bytes */
        die("--fields \"%s\" is %zu bytes, more than the 63 a checkpoint stores; shorten it (a field left out keeps its "
            "default)", fields, strlen(fields));
    if (!mf_mixer_field_of(cfg->mixer, 0))
        die("--fields %s: the %s mixer has no fields of its own (--fields sets those of a registered mixer; the built-in "
            "mixers have their own options); drop --fields", fields, mixer);
    snprintf(buf, sizeof buf, "%s", fields);
    for (item = buf; item; item = next) {
        char *eq, *end = NULL;
        double v;
        if ((next = strchr(item, ','))) *next++ = '\0';
        eq = strchr(item, '=');
        v = eq ? strtod(eq + 1, &end) : 0;
        if (!eq || end == eq + 1 || *end) die("--fields: \"%s\" is not name=number (e.g. --fields %s=%g)", item,
                                              mf_mixer_field_of(cfg->mixer, 0)->name, (double)mf_mixer_field_of(cfg->mixer, 0)->def);
        *eq = 0;
        if (mf_model_config_set(cfg, item, (float)v) < 0) {
            fprintf(stderr, EX_PROG ": the fields of the %s mixer:\n", mixer);
            print_mixer_fields(stderr, (int)cfg->mixer);
            die("--fields: the %s mixer has no field \"%s\" (its fields are above)", mixer, item);
        }
    }
}

/* the mixers' fields f into cfg (cfg->mixer set): a SHARED one only where the mixer reads it */
#define EX_FIELD_COPY(A, ID, member, ctype, KIND, def, lo, hi, opt, STORE, ROLE, help) \
    if (MF_CFG_##ROLE != MF_CFG_SHARED || mf_mixer_reads(cfg->mixer, MF_FIELD_##ID)) mf_config_field_set(cfg, MF_FIELD_##ID, f->member);
EX_FN void fields_config(mf_model_config *cfg, const model_fields *f) { MF_MODEL_FIELDS(EX_FIELD_COPY, ~) }

/* " (mem-len 64, compressive 1, ...)": the values of the fields cfg's mixer reads (the library's
   table, and a registered mixer's own), by their options' names; "" when it reads none */
EX_FN void mixer_fields_text(const mf_model_config *cfg, char *buf, size_t size) {
    const mf_mixer_field *fd;
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < MF_FIELD_COUNT && n < size; i++) {
        const mf_config_field *f = mf_config_field_at(i);
        double v = mf_config_field_get(cfg, i);
        if (!mf_mixer_reads(cfg->mixer, i)) continue;
        if (f->kind == MF_CFG_ENUM) n += (size_t)snprintf(buf + n, size - n, "%s%s %s", n ? ", " : " (", f->option, mf_config_field_choice(i, (int)v));
        else n += (size_t)snprintf(buf + n, size - n, "%s%s %g", n ? ", " : " (", f->option, v);
    }
    for (int i = 0; (fd = mf_mixer_field_of(cfg->mixer, i)) != NULL && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%s %g", n ? ", " : " (", fd->name, (double)mf_model_config_get(cfg, fd->name));
    if (n && n < size) snprintf(buf + n, size - n, ")");
}

/* the library's config of the settings, with a vocabulary of V ids */
EX_FN mf_model_config settings_config(const model_settings *M, int V) {
    mf_model_config cfg = mf_model_config_default();
    cfg.vocab = V; cfg.d_model = M->d_model; cfg.n_heads = M->heads; cfg.n_layers = M->layers; cfg.d_ff = M->d_ff;
    cfg.max_seq = M->seq_len; cfg.dropout = M->dropout;
    cfg.mixer = (mf_mixer_kind)mf_mixer_from_name(M->mixer);
    cfg.pos = (mf_pos_kind)mf_pos_from_name(M->pos);
    cfg.ffn_act = (mf_act_kind)mf_act_from_name(M->act);
    cfg.clone_layers = M->clone_layers;
    cfg.block = (mf_block_kind)mf_block_from_name(M->block);
    fields_config(&cfg, &M->f);
    set_mixer_fields(&cfg, M->mixer, M->fields);
    if ((mf_mixer_flags(cfg.mixer) & MF_MIXER_HEADS) && M->d_model % M->heads)
        die("--d-model %d is not divisible by --heads %d (the %s mixer splits d-model into equal heads); "
            "pick a head count that divides d-model", M->d_model, M->heads, M->mixer);
    return cfg;
}

/* --precision NAME: the context's arithmetic (mf_ctx_set_precision), or die naming why not (tf32 on
   the CPU) */
#define PRECISION_HELP "the products' arithmetic (bf16: fp32 master weights, bf16 products; AMX tiles where the CPU has them)"
EX_FN void set_precision(mf_ctx *ctx, const char *name) {
    if (mf_ctx_set_precision(ctx, (mf_precision)mf_precision_from_name(name)) < 0) die("--precision %s: %s", name, mf_error(ctx));
}

/* mf_model_check, dying with its message; a field that the mixer does not read is named by the
   library as in the config, the option that set it is added */
EX_FN void check_model_config(mf_ctx *ctx, const mf_model_config *cfg) {
    if (mf_model_check(ctx, cfg) == 0) return;
    const char *msg = mf_error(ctx), *at = strstr(msg, "model config: ");
    for (int i = 0; at && i < MF_FIELD_COUNT; i++) {
        const mf_config_field *fd = mf_config_field_at(i);
        size_t n = strlen(fd->name);
        if (strncmp(at + 14, fd->name, n) == 0 && strncmp(at + 14 + n, " = ", 3) == 0 && strstr(msg, "applies only"))
            die("--%s: %s. Drop --%s, or pick one of those mixers with --mixer", fd->option, msg, fd->option);
    }
    die("%s", msg);
}

/* ==== [presets] ============================================================================= */
/* The seeds' experiments (docs/math.md §14 and §21), ONE table for build/train and build/ablate.
   --preset NAME puts the row's options where it stands on the command line, so later options
   override them; the program prints what it expanded to. A row's options, in three parts:
     seed   the seed's model and training rule (positions, activation, biases, cloning, optimizer,
            schedule, clipping): what `ablate --seed-configs` gives each of the row's models
     size   the experiment's sizes, context and batch (train and ablate)
     run    build/train only: its length (epochs), validation and the sample
   train: --mixer MIXER (or --compressive) + seed + size + run; ablate: --models MODELS + seed + size.
   MODELS: the ablation models whose seed configuration the row is (comma-separated). */
#define PRESET_MAX_OPTS 32
typedef struct preset {
    const char *name, *mixer, *models, *source;
    const char *seed[PRESET_MAX_OPTS], *size[PRESET_MAX_OPTS], *run[PRESET_MAX_OPTS]; /* NULL-terminated */
} preset;
#define LABML_SEED(SCHED, LR) "--pos", "none", "--act", "relu", "--clone-layers", "--optimizer", \
    "adam_labml", "--schedule", SCHED, "--lr", LR, "--warmup", "2000", "--clip", "1", "--dropout", "0"
#define LABML_RUN "--epochs", "128", "--inner-iterations", "25", "--prompt", "It is", "--sample", "25", "--greedy"
EX_VAR const preset PRESETS[] = {
    {"xl", "relative", "relative", "labml Transformer-XL experiment (docs/math.md §14)",
     {LABML_SEED("noam", "1"), NULL},
     {"--d-model", "128", "--heads", "4", "--layers", "6", "--d-ff", "256", "--seq-len", "2", "--batch", "32",
      "--mem-len", "32", NULL},
     {LABML_RUN, "--valid-protocol", "labml", NULL}},
    {"compressive", "compressive", "compressive", "labml compressive-transformer experiment (docs/math.md §14)",
     {LABML_SEED("warmup", "2.5e-4"), NULL},
     {"--d-model", "128", "--heads", "4", "--layers", "6", "--d-ff", "256", "--seq-len", "8", "--batch", "32",
      "--mem-len", "8", "--c-mem-len", "128", "--compression-rate", "2", NULL},
     {LABML_RUN, "--valid-protocol", "labml", NULL}},
    {"fast_weights", "fast_weights", "fast_weights,linear", "labml fast-weights experiment (docs/math.md §14)",
     {LABML_SEED("noam", "1"), NULL},
     {"--d-model", "512", "--heads", "8", "--layers", "6", "--d-ff", "2048", "--seq-len", "128", "--batch", "16", NULL},
     {LABML_RUN, NULL}},
    {"feedback", "feedback", "feedback", "labml feedback-transformer notebook (original variant, docs/math.md §14)",
     {LABML_SEED("noam", "1"), NULL},
     {"--d-model", "512", "--heads", "8", "--layers", "6", "--d-ff", "2048", "--seq-len", "64", "--batch", "80", NULL},
     {LABML_RUN, NULL}},
    {"feedback_kv", "feedback_kv", "feedback_kv", "labml feedback-transformer script (shared keys and values, docs/math.md §14)",
     {LABML_SEED("noam", "1"), NULL},
     {"--d-model", "512", "--heads", "8", "--layers", "6", "--d-ff", "2048", "--seq-len", "128", "--batch", "64", NULL},
     {LABML_RUN, NULL}},
    {"metaformer", "sdpa", "sdpa,metric,quadratic,pool,identity",
     "NLP MetaFormer next-token run (Python; GPT-2 BPE there, docs/math.md §14)",
     {"--pos", "learned", "--act", "gelu", "--clone-layers=0", "--attn-bias", "0", "--optimizer", "adamw", "--beta1", "0.95",
      "--beta2", "0.99", "--weight-decay", "0.01", "--schedule", "cosine", "--lr", "1e-3", "--warmup", "100", "--clip", "1",
      "--dropout", "0", NULL},
     {"--d-model", "384", "--heads", "6", "--layers", "6", "--d-ff", "1536", "--seq-len", "256", "--batch", "32", NULL},
     {"--steps", "5000", NULL}},
    {"mha", "sdpa", "", "labml MHA reference experiment (no embedding scaling here, docs/math.md §14)",
     {"--pos", "sinusoidal", "--act", "relu", "--clone-layers", "--attn-bias", "1", "--optimizer", "adam_labml",
      "--schedule", "noam", "--lr", "1", "--warmup", "2000", "--clip", "1", "--dropout", "0.1", NULL},
     {"--d-model", "256", "--heads", "16", "--layers", "6", "--d-ff", "1024", "--seq-len", "512", "--batch", "16", NULL},
     {"--epochs", "32", "--inner-iterations", "10", "--prompt", "It is", "--sample", "25", "--greedy", NULL}},
};
#define N_PRESETS ((int)(sizeof PRESETS / sizeof PRESETS[0]))

EX_FN const preset *find_preset(const char *name) {
    for (int i = 0; i < N_PRESETS; i++)
        if (strcmp(PRESETS[i].name, name) == 0) return &PRESETS[i];
    return NULL;
}
/* the preset whose seed configuration covers an ablation model (a name in its MODELS), or NULL */
EX_FN const preset *seed_preset(const char *model) {
    char list[128];
    for (int i = 0; i < N_PRESETS; i++) {
        snprintf(list, sizeof list, "%s", PRESETS[i].models);
        for (char *c = list; *c; c++) if (*c == ',') *c = '|';
        if (list[0] && choice_index(list, model) >= 0) return &PRESETS[i];
    }
    return NULL;
}
/* the options of a preset for build/train (train = 1) or build/ablate, into out (at most max);
   returns their number */
EX_FN int preset_args(const preset *p, int train, const char **out, int max) {
    int n = 0;
    const char *const *parts[3];
    parts[0] = p->seed; parts[1] = p->size; parts[2] = p->run;
    if (train && strcmp(p->mixer, "compressive") == 0) out[n++] = "--compressive";
    else if (train) { out[n++] = "--mixer"; out[n++] = p->mixer; }
    else { out[n++] = "--models"; out[n++] = p->models[0] ? p->models : p->mixer; }
    for (int k = 0; k < (train ? 3 : 2); k++)
        for (int i = 0; parts[k][i] && n < max; i++) out[n++] = parts[k][i];
    return n;
}
/* the options as one line, quoted where a value has a space */
EX_FN void print_args(FILE *f, const char *const *args, int n) {
    for (int i = 0; i < n; i++) fprintf(f, strchr(args[i], ' ') ? " \"%s\"" : " %s", args[i]);
    fprintf(f, "\n");
}
EX_FN void list_presets(int train) {
    const char *args[3 * PRESET_MAX_OPTS + 2];
    printf("presets (--preset NAME; later options override the preset's):\n");
    for (int i = 0; i < N_PRESETS; i++) {
        printf("  %-12s %s\n              ", PRESETS[i].name, PRESETS[i].source);
        print_args(stdout, args, preset_args(&PRESETS[i], train, args, 3 * PRESET_MAX_OPTS + 2));
    }
}
/* --list-presets prints the table and exits; --preset NAME (or --preset=NAME) is replaced by the
   preset's options, where it stands, and what it expands to is printed. Returns the new argv
   (argc in *argc), or argv itself when there is no preset. One preset per command line. */
EX_FN char **expand_preset(int *argc, char **argv, int train) {
    static const char *out[256];
    const char *args[3 * PRESET_MAX_OPTS + 2], *name = NULL;
    int at = -1, skip = 0, n = 0, k;
    for (int a = 1; a < *argc; a++) {
        if (strcmp(argv[a], "--list-presets") == 0) { list_presets(train); exit(0); }
        if (strcmp(argv[a], "--preset") == 0 || strncmp(argv[a], "--preset=", 9) == 0) {
            if (at >= 0) die("--preset is given twice; give one preset and override its options after it");
            at = a;
            if (argv[a][8] == '=') { name = argv[a] + 9; skip = 1; }
            else if (a + 1 < *argc) { name = argv[a + 1]; skip = 2; a++; }
            else die("option --preset needs a value (one of the names of --list-presets)");
        }
    }
    if (at < 0) return argv;
    const preset *p = find_preset(name);
    if (!p) {
        char names[256];
        size_t m = 0;
        for (int i = 0; i < N_PRESETS && m < sizeof names; i++)
            m += (size_t)snprintf(names + m, sizeof names - m, "%s%s", i ? ", " : "", PRESETS[i].name);
        die("unknown --preset \"%s\"; choose one of %s (--list-presets shows what each sets)", name, names);
    }
    k = preset_args(p, train, args, 3 * PRESET_MAX_OPTS + 2);
    if (*argc + k > 255) die("too many options with --preset %s", name);
    for (int a = 0; a < at; a++) out[n++] = argv[a];
    for (int i = 0; i < k; i++) out[n++] = args[i];
    for (int a = at + skip; a < *argc; a++) out[n++] = argv[a];
    out[n] = NULL;
    printf("preset %s (%s):", p->name, p->source);
    print_args(stdout, args, k);
    *argc = n;
    return (char **)out;
}

/* ==== [checkpoints] ========================================================================= */
/* What build/train stores besides the settings, and how build/train (--resume, --eval-only) and
   build/sample check it (docs/math.md §17.6):
     a text file    train.vocab: the byte values of the character vocabulary in hex ("0a2021...")
     token shards   train.data "tokens", train.vocab_size, and the tokenizer's identity:
                    train.tokenizer (its path, or "bytes" for the built-in byte tokenizer, or "" for
                    none) and train.tokenizer_fnv1a (FNV-1a of the file, or of the name "bytes") */

/* The checkpoint must be readable and written by build/train: dies naming which it is not, after
   `cannot` ("cannot resume", "cannot sample"). */
EX_FN void check_train_checkpoint(const char *path, const char *cannot) {
    char buf[64];
    if (mf_load_meta(path, "mf.format", buf, sizeof buf) < 0) {
        /* unreadable, truncated or not a checkpoint: let mf_load say which */
        mf_ctx *probe = mf_ctx_new(0);
        if (mf_load(probe, path, 0) < 0) die("%s: %s", cannot, mf_error(probe));
        die("%s: \"%s\" is not a metaformer.h checkpoint", cannot, path);
    }
    if (mf_load_meta(path, "train.mixer", buf, sizeof buf) < 0)
        die("%s: checkpoint \"%s\" was not written by build/train (its metadata has no train settings; "
            "build/sort and build/ablate checkpoints cannot be sampled or resumed here)", cannot, path);
}

/* the stored value of each SAVED option of opts (a setting the checkpoint lacks, written before the
   option existed, keeps its default defaults[i]); into stored[i] */
/* the mixer a checkpoint names must be one of this program's: else die naming it and the fix */
EX_FN void check_stored_mixer(const char *path, const char *name) {
    char mixer[512] = "";
    if (mf_mixer_from_name(name) >= 0) return;
    mf_load_meta(path, "mf.mixer", mixer, sizeof mixer);
    die("checkpoint \"%s\" holds a model of the mixer \"%s\"%s%s%s, which this program lacks: %s", path, name,
        mixer[0] ? " (" : "", mixer, mixer[0] ? ")" : "",
        mixer[0] ? "a mixer of your own, registered by the program that trained it; build this program with "
                   "its code (-DEXTRA_MIXERS=..., e.g. make build/train-custom; docs/library.md)"
                 : "a mixer of your own registered by the program that wrote it (build this program with its code: "
                   "-DEXTRA_MIXERS=..., docs/library.md), or one of a build with more mixers (see --list-mixers)");
}
EX_FN void read_stored_options(const char *path, const option *opts, int n, const char (*defaults)[64], char (*stored)[64]) {
    char key[64];
    for (int i = 0; i < n; i++) {
        if (!opts[i].saved) continue;
        snprintf(key, sizeof key, "train.%s", opts[i].name);
        if (mf_load_meta(path, key, stored[i], 64) == -1) strcpy(stored[i], defaults[i]);
        if (strcmp(opts[i].name, "mixer") == 0) check_stored_mixer(path, stored[i]);
    }
}

/* the tokenizer's identity for checkpoints: FNV-1a of its file (or of the name "bytes") */
EX_FN uint64_t tokenizer_identity(const char *spec) {
    size_t n;
    unsigned char *bytes;
    uint64_t h;
    if (strcmp(spec, "bytes") == 0) return fnv1a((const unsigned char *)spec, 5);
    bytes = read_file(spec, &n);
    h = fnv1a(bytes, n);
    free(bytes);
    return h;
}

/* --tokenizer FILE, or "bytes" (the built-in 256-id byte tokenizer): dies with the library's message */
EX_FN mf_tokenizer *tokenizer_open(const char *spec) {
    mf_tokenizer *tok = strcmp(spec, "bytes") == 0 ? mf_tokenizer_bytes() : mf_tokenizer_load(spec);
    if (mf_tokenizer_error(tok)) die("--tokenizer \"%s\": %s", spec, mf_tokenizer_error(tok));
    return tok;
}

/* the character tokenizer of a text checkpoint's train.vocab (hex byte values) */
EX_FN mf_tokenizer *tokenizer_from_vocab_hex(const char *hex, const char *path) {
    unsigned char bytes[256];
    int n = 0;
    mf_tokenizer *tok;
    for (; hex[0] && hex[1] && n < 256; hex += 2) {
        unsigned v;
        if (sscanf(hex, "%2x", &v) != 1) die("checkpoint \"%s\" has a bad train.vocab", path);
        bytes[n++] = (unsigned char)v;
    }
    tok = mf_tokenizer_chars(bytes, (size_t)n);
    if (mf_tokenizer_error(tok)) die("checkpoint \"%s\": train.vocab: %s", path, mf_tokenizer_error(tok));
    return tok;
}

/* the byte length of every id (bits per byte), or NULL without a tokenizer */
EX_FN int *token_byte_lengths(const mf_tokenizer *tok) {
    int V = tok ? mf_tokenizer_vocab_size(tok) : 0, *len;
    if (V < 1) return NULL;
    if (!(len = (int *)malloc((size_t)V * sizeof *len))) die("out of memory");
    for (int i = 0; i < V; i++) mf_tokenizer_token(tok, i, &len[i]);
    return len;
}

/* ==== [sample] ============================================================================== */
/* the sampling settings' name: "temperature 0.8, top-k 200" or "greedy" */
EX_FN const char *sampler_name(const mf_sampler *s, char *buf, size_t size) {
    if (s->temperature > 0) snprintf(buf, size, "temperature %g, top-k %d", (double)s->temperature, s->top_k);
    else snprintf(buf, size, "greedy");
    return buf;
}

/* generate n ids after the prompt and print "--- sample (...) ---", the prompt and the text decoded
   by tok (without a tokenizer: the ids, space-separated) */
EX_FN void print_sample(mf_ctx *ctx, mf_model *model, mf_tokenizer *tok, const int32_t *prompt, int n_prompt, int n,
                        const mf_sampler *s) {
    char what[100];
    int32_t *out = (int32_t *)malloc((size_t)(n_prompt + n) * sizeof *out);
    if (!out) die("out of memory");
    memcpy(out, prompt, (size_t)n_prompt * sizeof *out);
    if (mf_model_generate(model, prompt, n_prompt, n, s, out + n_prompt) < 0) die("sampling failed: %s", mf_error(ctx));
    printf("--- sample (%s) ---\n", sampler_name(s, what, sizeof what));
    if (tok) {
        int64_t len = mf_tokenizer_decode(tok, out, n_prompt + n, NULL, 0);
        char *text = (char *)malloc(len > 0 ? (size_t)len : 1);
        if (len < 0 || !text) die("cannot decode the sample: %s", mf_tokenizer_error(tok));
        mf_tokenizer_decode(tok, out, n_prompt + n, text, len);
        fwrite(text, 1, (size_t)len, stdout);
        free(text);
    } else {
        for (int i = 0; i < n_prompt + n; i++) printf("%s%d", i ? " " : "", (int)out[i]);
    }
    printf("\n---\n");
    free(out);
}

/* ==== [steps] =============================================================================== */
/* The ranks of a data-parallel run (build/train-mpi, docs/math.md §18): every rank takes its rows of
   each global batch and the sums are added up over the ranks. NULL: one process. */
struct mf_dist;
typedef struct ex_ranks {
    int rank, world;
    struct mf_dist *dist;              /* METAFORMER_MPI: the steps' gradient averages, clipping, update */
    void (*sum)(double *v, int n);     /* v[0 .. n) added up over the ranks, in place */
    double sync_seconds;               /* train_step: the time spent in mf_dist_sync */
    int nonfinite_ranks;               /* train_step: how many ranks had a NaN / Inf loss this step */
    float local_loss;                  /* train_step: this rank's part of the step's loss */
} ex_ranks;

/* One training step (docs/math.md §11.5, §18.2) on x, y [rows][T]: in micro-batches of micro rows
   (rows [i * micro, (i + 1) * micro), the last one shorter when rows is not a multiple), each
   forward, loss and backward, its activations freed before the next; each micro-batch's loss is
   weighted by its share of the counted targets (mf_model_loss_part), so the gradient is the one of
   the whole batch; a memory model's micro-batch i uses its memory rows (mf_model_memory_rows).
   Then the gradient norm (clipped to clip when clip > 0), optimizer step, zero grad. *loss gets
   the loss of the whole batch, *ar the compressive models' attention-reconstruction part of it (0
   for the others) and *grad_norm (may be NULL) the norm before clipping. A NaN or Inf loss or
   gradient norm skips the update: the optimizer never applies a non-finite step; the gradients are
   zeroed and the step's activations freed. With ranks (NULL: one process) the whole batch is the
   global one, the rows of every rank (rows may be 0 on a rank that the last global batch left none):
   the weights count every rank's targets, the gradients are averaged over the ranks during the
   last micro-batch's backward (ranks->dist), and the loss, norm and decision are the same on every
   rank. Returns 0, 1 for such a non-finite step, or -1 with the error in ctx (on every rank). */
EX_FN int train_step(mf_ctx *ctx, mf_model *m, const mf_optimizer *opt, float clip, const int32_t *x,
                     const int32_t *y, int rows, int micro, int T, float *loss, float *ar, float *grad_norm,
                     ex_ranks *ranks) {
    int64_t n = (int64_t)rows * T;
    double total[2] = {0, (double)rows}; /* the counted targets and the rows of the whole batch */
    double sums[3] = {0, 0, 0};          /* loss, ar, ranks whose part was not finite */
    int dist = ranks && ranks->dist, finite, updated = 0; /* a data-parallel run (even of 1 rank): the collectives */
    float norm, world = dist ? (float)ranks->world : 1.0f;
    for (int64_t i = 0; i < n; i++) total[0] += y[i] != -1;
    if (dist) ranks->sum(total, 2);
    for (int r0 = 0; r0 < rows && mf_ok(ctx); r0 += micro) {
        int b = rows - r0 < micro ? rows - r0 : micro;
        mf_tensor *l;
        if (mf_model_memory_rows(m, micro < rows ? r0 : 0, micro < rows ? rows : 0) < 0) break;
#ifdef METAFORMER_MPI
        if (dist) mf_dist_no_sync(ranks->dist, r0 + b < rows); /* average during the last backward only */
#endif
        l = mf_model_loss_part(m, x + (int64_t)r0 * T, y + (int64_t)r0 * T, b, T, (int64_t)total[0], (int64_t)total[1]);
        /* the ranks' gradients are averaged: world x each part makes the gradient of the global batch */
        mf_backward(ctx, world > 1 ? mf_scale(ctx, l, world) : l);
        sums[0] += mf_item(ctx, l); /* the value on any device */
        sums[1] += (double)mf_model_aux_loss(m) * b / total[1];
        mf_reset(ctx); /* the micro-batch's activations; the gradients add up in the parameters */
    }
    mf_model_memory_rows(m, 0, 0);
#ifdef METAFORMER_MPI
    if (dist) {
        double t0 = mf_time();
        ranks->local_loss = (float)sums[0];
        sums[2] = !isfinite(sums[0]);
        if (mf_dist_sync(ranks->dist, ctx, sums, 3) < 0) return -1;
        ranks->sync_seconds += mf_time() - t0;
        ranks->nonfinite_ranks = (int)sums[2];
        norm = mf_dist_clip_grad_norm(ranks->dist, ctx, clip > 0 ? clip : 0);
    } else
#endif
    if (isfinite(sums[0])) { /* clip (max 0: the norm only), step and zero the gradients in one call */
        norm = mf_train_update(ctx, opt, clip > 0 ? clip : 0);
        updated = 1;
    } else norm = mf_clip_grad_norm(ctx, 0);
    *loss = (float)sums[0];
    *ar = (float)sums[1];
    if (grad_norm) *grad_norm = norm;
    finite = isfinite(*loss) && isfinite(norm);
#ifdef METAFORMER_MPI
    if (finite && dist) mf_dist_optimizer_step(ranks->dist, ctx, opt);
#endif
    if (!updated) mf_zero_grad(ctx);
    mf_reset(ctx);
    if (!mf_ok(ctx)) return -1;
    return finite ? 0 : 1;
}

/* Mean validation cross-entropy (without the reconstruction loss, which goes to *ar when ar is
   not NULL) of n_batches batches of B rows over the validation stream, without gradients or
   dropout. A model without memory reads windows of T spread evenly over the stream; a memory
   model reads the first n_batches batches of a sequential loader on memory slot 1, emptied at
   the start (the training memory in slot 0 is left alone). x, y hold B * T ids. With ranks (NULL:
   one process) a batch is B rows of each rank, a global batch of B * world: each rank reads its
   rows and the sums are added up over the ranks, so every rank returns the loss of one process
   validating with B * world rows. When token_bytes
   (the byte length of each id) is given, *bytes gets the bytes of the scored targets: bits per
   byte = loss * scored / ln 2 / bytes (docs/math.md §17.6), *scored (when not NULL) their number. Returns NaN when a forward fails
   (the error is in ctx) or a memory model's validation data is too short for two tokens per row;
   dies when the stream cannot be read (an id outside the vocabulary). validate_batches is the body of
   validate and validate_part: `sequential` reads batches [first, first + n_batches) of the sequential
   loader for any model, `reset` empties the memories first. */
EX_FN double validate_batches(mf_ctx *ctx, mf_model *m, mf_tokens *valid, int T, int B, int sequential, int64_t first,
                              int64_t n_batches, int reset, int32_t *x, int32_t *y, double *ar, const int *token_bytes,
                              double *bytes, double *scored, const ex_ranks *ranks) {
    int grad = mf_set_grad(ctx, 0), training = mf_set_training(ctx, 0), memory = has_memory(mf_model_get_config(m));
    int slot = memory ? mf_model_memory_slot(m, 1) : 0, rank = ranks ? ranks->rank : 0, world = ranks ? ranks->world : 1;
    double sums[4] = {0, 0, 0, 0}; /* cross-entropy * tokens, reconstruction loss * tokens, tokens, bytes */
    mf_loader sq;
    int64_t n = mf_tokens_count(valid), windows = (n - 1) / T, G = (int64_t)B * world, count = n_batches * G, done = 0;
    int32_t *row = (int32_t *)malloc((size_t)(T + 1) * sizeof *row);
    if (!row) die("out of memory");
    memset(&sq, 0, sizeof sq);
    if (count > windows) count = windows;
    if (sequential) {
        mf_loader_config c;
        memset(&c, 0, sizeof c);
        c.batch = B; c.seq_len = T; c.sequential = 1; c.rank = rank; c.world = world;
        count = 0;
        if (slot >= 0 && mf_loader_init(&sq, valid, &c) == 0 && first < mf_loader_batches(&sq)) {
            if (reset) mf_model_reset_memory(m);
            count = mf_loader_batches(&sq) - first < n_batches ? mf_loader_batches(&sq) - first : n_batches;
            if (first > 0) sq.state.seq_pos = first * T; /* batch `first` of the pass (all before the last are T long) */
        }
    }
    while (done < count && mf_ok(ctx)) {
        int b = B, Tb = T;
        mf_tensor *loss;
        float a;
        if (sequential) {
            if (mf_loader_next(&sq, x, y, &b, &Tb) < 0) die("validation: %s", sq.error);
        } else { /* this rank's rows [first, first + b) of the global batch of g windows */
            int64_t g = count - done < G ? count - done : G, first = (int64_t)rank * B < g ? (int64_t)rank * B : g;
            b = (int)(g - first < B ? g - first : B);
            for (int r = 0; r < b; r++) {
                int64_t start = (done + first + r) * windows / count * T;
                if (mf_tokens_read(valid, start, T + 1, row) < 0) die("validation: %s", mf_tokens_error(valid));
                memcpy(x + r * T, row, (size_t)T * sizeof *x);
                memcpy(y + r * T, row + 1, (size_t)T * sizeof *y);
            }
        }
        done += sequential ? 1 : (count - done < G ? count - done : G);
        if (b == 0) continue; /* the last global batch left this rank no row */
        if (!(loss = mf_model_loss(m, x, y, b, Tb))) break;
        a = mf_model_aux_loss(m);
        sums[0] += ((double)mf_item(ctx, loss) - a) * b * Tb;
        sums[1] += (double)a * b * Tb;
        sums[2] += (double)b * Tb;
        if (token_bytes) for (int i = 0; i < b * Tb; i++) sums[3] += token_bytes[y[i]];
        mf_reset(ctx);
    }
    mf_loader_free(&sq);
    free(row);
    if (memory && slot >= 0) mf_model_memory_slot(m, slot);
    mf_set_grad(ctx, grad);
    mf_set_training(ctx, training);
    if (!mf_ok(ctx)) sums[2] = NAN; /* a failed forward on any rank makes the result NaN on all */
    if (ranks && ranks->sum) ranks->sum(sums, 4);
    if (ar) *ar = sums[2] > 0 ? sums[1] / sums[2] : 0;
    if (bytes) *bytes = sums[3];
    if (scored) *scored = sums[2];
    return sums[2] > 0 ? sums[0] / sums[2] : NAN;
}
EX_FN double validate(mf_ctx *ctx, mf_model *m, mf_tokens *valid, int T, int B, int n_batches, int32_t *x, int32_t *y,
                      double *ar, const int *token_bytes, double *bytes, double *scored, const ex_ranks *ranks) {
    return validate_batches(ctx, m, valid, T, B, has_memory(mf_model_get_config(m)), 0, n_batches, 1, x, y, ar, token_bytes,
                            bytes, scored, ranks);
}
/* labml's protocol (docs/training.md "Validation"): batches [first, first + n_batches) of the sequential
   loader over the validation stream (B rows of each rank, as in validate), for every model; a memory
   model reads them on memory slot 1, emptied first when `reset`, and leaves its memories there for the
   next part. The returns are validate's. */
EX_FN double validate_part(mf_ctx *ctx, mf_model *m, mf_tokens *valid, int T, int B, int64_t first, int64_t n_batches,
                           int reset, int32_t *x, int32_t *y, double *ar, const int *token_bytes, double *bytes,
                           double *scored, const ex_ranks *ranks) {
    return validate_batches(ctx, m, valid, T, B, 1, first, n_batches, reset, x, y, ar, token_bytes, bytes, scored, ranks);
}
/* ==== [stats] =============================================================================== */
/* A number measured over several seeds: its mean, sample standard deviation and the half-width of
   the 95% confidence interval of the mean (Student's t with n - 1 degrees of freedom: the seeds are
   few), from the finite values only; sd and ci are NaN with fewer than 2. */
typedef struct stat_summary { int n; double mean, sd, ci; } stat_summary;

/* the two-sided 95% quantile of Student's t with df >= 1 degrees of freedom (a table to 30, linear
   between whole df; past 30, 1.96 + 2.4 / df, within 0.002 of the true value) */
EX_FN double t95(double df) {
    static const double T[31] = {0, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
                                 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060,
                                 2.056, 2.052, 2.048, 2.045, 2.042};
    int k;
    if (!(df >= 1)) return NAN;
    if (df >= 30) return df == 30 ? T[30] : 1.96 + 2.4 / df;
    k = (int)df;
    return T[k] + (df - k) * (T[k + 1] - T[k]);
}
EX_FN stat_summary summarize(const double *v, int n) {
    stat_summary r = {0, 0, NAN, NAN};
    double ss = 0;
    for (int i = 0; i < n; i++) if (isfinite(v[i])) { r.n++; r.mean += v[i]; }
    if (r.n == 0) { r.mean = NAN; return r; }
    r.mean /= r.n;
    for (int i = 0; i < n; i++) if (isfinite(v[i])) ss += (v[i] - r.mean) * (v[i] - r.mean);
    if (r.n > 1) { r.sd = sqrt(ss / (r.n - 1)); r.ci = t95(r.n - 1) * r.sd / sqrt((double)r.n); }
    return r;
}
/* the eigenvalues of the symmetric n x n matrix a (row-major), ascending, into ev (cyclic Jacobi
   rotations: plain and exact enough for the small forms the studies look at) */
EX_FN void sym_eigenvalues(const double *a, int n, double *ev) {
    double *w = (double *)malloc(sizeof(double) * (size_t)n * n);
    if (!w) die("out of memory");
    memcpy(w, a, sizeof(double) * (size_t)n * n);
    for (int sweep = 0; sweep < 60; sweep++) {
        double off = 0;
        for (int p = 0; p < n; p++) for (int q = p + 1; q < n; q++) off += w[p * n + q] * w[p * n + q];
        if (off < 1e-24) break;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                if (fabs(w[p * n + q]) < 1e-300) continue;
                double th = (w[q * n + q] - w[p * n + p]) / (2 * w[p * n + q]);
                double t = (th >= 0 ? 1 : -1) / (fabs(th) + sqrt(th * th + 1)), c = 1 / sqrt(t * t + 1), s = t * c;
                for (int k = 0; k < n; k++) { /* W = J^T W J */
                    double wkp = w[k * n + p], wkq = w[k * n + q];
                    w[k * n + p] = c * wkp - s * wkq; w[k * n + q] = s * wkp + c * wkq;
                }
                for (int k = 0; k < n; k++) {
                    double wpk = w[p * n + k], wqk = w[q * n + k];
                    w[p * n + k] = c * wpk - s * wqk; w[q * n + k] = s * wpk + c * wqk;
                }
            }
    }
    for (int i = 0; i < n; i++) ev[i] = w[i * n + i];
    for (int i = 1; i < n; i++) for (int j = i; j > 0 && ev[j] < ev[j - 1]; j--) { double t = ev[j]; ev[j] = ev[j - 1]; ev[j - 1] = t; }
    free(w);
}
/* Welch's two-sample t test at the 5% level, two-sided: 1 when the means differ significantly, 0
   when not, -1 when it cannot tell (fewer than 2 values on a side) */
EX_FN int welch_differs(stat_summary a, stat_summary b) {
    double va, vb, se2, df;
    if (a.n < 2 || b.n < 2) return -1;
    va = a.sd * a.sd / a.n; vb = b.sd * b.sd / b.n; se2 = va + vb;
    if (se2 == 0) return a.mean != b.mean;
    df = se2 * se2 / (va * va / (a.n - 1) + vb * vb / (b.n - 1));
    return fabs(a.mean - b.mean) / sqrt(se2) > t95(df < 1 ? 1 : df);
}

/* --jobs: seeds trained at once. Each seed's models live in contexts of their own and draw from
   their own seeded streams, so a seed's numbers do not depend on how many run beside it; only the
   order of the printed lines does. */
#define JOBS_HELP "seeds trained at once (0: one per core; each then gets the cores / jobs threads); results do not depend on it"

/* the jobs to run n seeds on (jobs 0: the cores, never more than n) */
EX_FN int seed_jobs(int jobs, int n) {
#ifdef _OPENMP
    if (jobs <= 0) jobs = omp_get_num_procs();
#else
    jobs = 1;
#endif
    return jobs < 1 ? 1 : jobs > n ? (n < 1 ? 1 : n) : jobs;
}
/* the library threads of each seed's context when jobs seeds run at once on a --threads request
   (0: all cores): the cores shared out, at least 1 */
EX_FN int seed_threads(int threads, int jobs) {
#ifdef _OPENMP
    int cores = threads > 0 ? threads : omp_get_num_procs();
#else
    int cores = threads > 0 ? threads : 1;
#endif
    if (jobs <= 1) return threads;
    return cores / jobs > 1 ? cores / jobs : 1;
}
/* fn(i, user) for every i in [0, n), on seed_jobs(jobs, n) threads; fn must touch only its own
   i's results (die() from any of them ends the program) */
EX_FN void run_seeds(int n, int jobs, void (*fn)(int i, void *user), void *user) {
    int nj = seed_jobs(jobs, n);
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nj)
#endif
    for (int i = 0; i < n; i++) fn(i, user);
    (void)nj;
}

#endif /* EXAMPLES_COMMON_H */
