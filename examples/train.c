/* train.c - train a character-level MetaFormer language model on any text file.

   build:  make examples      (or: cc -std=c99 -O2 -march=native -fopenmp train.c -o train -lm)
   run:    ./build/train input.txt                                   defaults, see --help
           ./build/train input.txt --mixer metric --steps 3000 --save lm.safetensors
           ./build/train input.txt --resume lm.safetensors            continue where it stopped

   The file is read as bytes. The vocabulary is the sorted set of byte values in the whole file,
   the first floor(0.9 * length) bytes train and the rest validates (SPEC.md section 12). Batches
   come from that section's shuffled loader: each epoch visits the windows starting at i * T in a
   random order, each shifted by a random offset. A checkpoint holds the weights, the optimizer
   moments, the settings, the vocabulary and the loader's RNG state, so a resumed run continues
   bit-identically: its losses equal those of a run that was never interrupted. */
#define _POSIX_C_SOURCE 200809L /* isatty */
#define METAFORMER_IMPLEMENTATION
#include "../metaformer.h"
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- settings: one table drives parsing, --help, the checkpoint metadata and --resume ---- */
typedef struct {
    const char *mixer, *pos, *act, *optimizer, *schedule, *save, *resume, *prompt;
    int d_model, heads, layers, d_ff, seq_len, batch, steps, warmup, seed;
    int threads, eval_every, eval_batches, log_every, save_every, stop_after, sample, top_k;
    float lr, weight_decay, clip, dropout, temperature;
    const char *device;
} settings;

static settings S = {
    .mixer = "sdpa", .pos = "learned", .act = "gelu", .optimizer = "adam", .schedule = "cosine",
    .d_model = 128, .heads = 4, .layers = 4, .d_ff = 512, .seq_len = 128, .batch = 16,
    .steps = 2000, .warmup = 100, .seed = 1, .lr = 1e-3f, .weight_decay = -1, .clip = 1.0f,
    .eval_every = 250, .eval_batches = 20, .log_every = 10, .save_every = 500, .sample = 300, .device = "cpu"};

enum { INT, FLOAT, TEXT };
enum { RUN_ONLY, SAVED, SAVED_CHANGEABLE }; /* SAVED: a resumed run must keep the checkpoint's value */
typedef struct {
    const char *name;
    int type;
    void *value;
    int saved;
    double min;           /* numbers: smallest allowed value */
    const char *choices;  /* TEXT: "a|b|c", or NULL for any string */
    const char *help;
} option;

static const option OPTIONS[] = {
    {"mixer", TEXT, &S.mixer, SAVED, 0, "sdpa|metric|quadratic|pool|identity", "token mixer"},
    {"d-model", INT, &S.d_model, SAVED, 1, NULL, "model width"},
    {"heads", INT, &S.heads, SAVED, 1, NULL, "heads (sdpa, metric, quadratic); must divide d-model"},
    {"layers", INT, &S.layers, SAVED, 1, NULL, "blocks"},
    {"d-ff", INT, &S.d_ff, SAVED, 1, NULL, "FFN hidden width"},
    {"seq-len", INT, &S.seq_len, SAVED, 1, NULL, "context length T of the training windows"},
    {"pos", TEXT, &S.pos, SAVED, 0, "none|learned|sinusoidal", "positional encoding"},
    {"act", TEXT, &S.act, SAVED, 0, "relu|gelu|gelu_tanh|silu", "FFN activation"},
    {"dropout", FLOAT, &S.dropout, SAVED, 0, NULL, "dropout probability"},
    {"batch", INT, &S.batch, SAVED, 1, NULL, "windows per step"},
    {"steps", INT, &S.steps, SAVED_CHANGEABLE, 0, NULL, "total optimizer steps (cosine ends here)"},
    {"lr", FLOAT, &S.lr, SAVED, 0, NULL, "peak learning rate"},
    {"optimizer", TEXT, &S.optimizer, SAVED, 0, "adam|adam_labml|adamw|sgd", "optimizer"},
    {"schedule", TEXT, &S.schedule, SAVED, 0, "constant|warmup|noam|cosine",
     "learning-rate schedule (cosine: warm-up, then down to lr/10)"},
    {"warmup", INT, &S.warmup, SAVED, 0, NULL, "warm-up steps (at most steps/10 unless given)"},
    {"weight-decay", FLOAT, &S.weight_decay, SAVED, 0, NULL, "weight decay (default 0.01 for adamw, else 0)"},
    {"clip", FLOAT, &S.clip, SAVED, 0, NULL, "max gradient norm (0 = no clipping)"},
    {"seed", INT, &S.seed, SAVED, 0, NULL, "seed of the initialisation, dropout and batches"},
    {"threads", INT, &S.threads, RUN_ONLY, 0, NULL, "CPU threads (0 = all)"},
    {"device", TEXT, &S.device, RUN_ONLY, 0, "cpu|cuda", "where to train (cuda: a build made by `make train-cuda`)"},
    {"eval-every", INT, &S.eval_every, RUN_ONLY, 0, NULL, "validate every N steps (0 = at the end only)"},
    {"eval-batches", INT, &S.eval_batches, RUN_ONLY, 1, NULL, "batches per validation"},
    {"log-every", INT, &S.log_every, RUN_ONLY, 1, NULL, "progress line every N steps when not on a terminal"},
    {"save", TEXT, &S.save, RUN_ONLY, 0, NULL, "checkpoint file, written every --save-every steps and at the end (with --resume: that file)"},
    {"save-every", INT, &S.save_every, RUN_ONLY, 0, NULL, "steps between checkpoints (0 = at the end only)"},
    {"resume", TEXT, &S.resume, RUN_ONLY, 0, NULL, "continue from this checkpoint (its settings are used)"},
    {"stop-after", INT, &S.stop_after, RUN_ONLY, 0, NULL, "stop after N steps of this run (split a long job; 0 = no)"},
    {"sample", INT, &S.sample, RUN_ONLY, 0, NULL, "characters generated at the end"},
    {"prompt", TEXT, &S.prompt, RUN_ONLY, 0, NULL, "prompt of the sample [It is]"},
    {"temperature", FLOAT, &S.temperature, RUN_ONLY, 0, NULL, "sampling temperature (0 = greedy)"},
    {"top-k", INT, &S.top_k, RUN_ONLY, 0, NULL, "sample among the k most likely characters (0 = all)"},
};
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))

static void die(const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "train: error: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    exit(1);
}

/* position of value in "a|b|c", or -1 */
static int choice_index(const char *choices, const char *value) {
    size_t n = strlen(value);
    const char *c = choices;
    for (int i = 0; c; i++) {
        if (strncmp(c, value, n) == 0 && (c[n] == '|' || c[n] == 0)) return i;
        if ((c = strchr(c, '|'))) c++;
    }
    return -1;
}

/* parse text into the option; returns NULL or what is wrong */
static const char *set_option(const option *o, const char *text) {
    static char why[300];
    char *end;
    double v;
    if (o->type == TEXT) {
        if (o->choices && choice_index(o->choices, text) < 0) {
            snprintf(why, sizeof why, "unknown --%s \"%s\"; choose one of %s", o->name, text, o->choices);
            return why;
        }
        *(const char **)o->value = text;
        return NULL;
    }
    errno = 0;
    v = o->type == INT ? (double)strtol(text, &end, 10) : strtod(text, &end);
    if (end == text || *end || errno || !isfinite(v) || (o->type == INT && fabs(v) > INT_MAX)) {
        snprintf(why, sizeof why, "--%s expects %s, got \"%s\"", o->name, o->type == INT ? "an integer" : "a number", text);
        return why;
    }
    if (v < o->min) {
        snprintf(why, sizeof why, "--%s must be >= %g, got %s", o->name, o->min, text);
        return why;
    }
    if (o->type == INT) *(int *)o->value = (int)v; else *(float *)o->value = (float)v;
    return NULL;
}

/* the value as text (floats with 9 digits: they read back exactly) */
static const char *format_option(const option *o, char *buf, size_t size) {
    if (o->type == INT) snprintf(buf, size, "%d", *(int *)o->value);
    else if (o->type == FLOAT) snprintf(buf, size, "%.9g", (double)*(float *)o->value);
    else snprintf(buf, size, "%s", *(const char **)o->value ? *(const char **)o->value : "");
    return buf;
}

static int option_index(const char *name) {
    int i = 0;
    while (i < N_OPTIONS && strcmp(OPTIONS[i].name, name) != 0) i++;
    return i;
}

static void usage(FILE *f) {
    fprintf(f, "usage: train FILE [options]   train a character-level language model on a text file\n\n");
    for (int i = 0; i < N_OPTIONS; i++) {
        const option *o = &OPTIONS[i];
        char left[64];
        snprintf(left, sizeof left, "--%s %s", o->name, o->choices ? o->choices : o->type == TEXT ? "TEXT" : "N");
        fprintf(f, "  %-44s %s", left, o->help);
        if (o->type == INT) fprintf(f, " [%d]", *(int *)o->value);
        if (o->type == FLOAT && *(float *)o->value >= 0) fprintf(f, " [%g]", (double)*(float *)o->value);
        if (o->type == TEXT && *(const char **)o->value) fprintf(f, " [%s]", *(const char **)o->value);
        fprintf(f, "\n");
    }
    fprintf(f, "  %-44s %s\n", "--help", "this text");
}

static void parse_args(int argc, char **argv, const char **file, unsigned char *given) {
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a], *value, *why;
        char name[64];
        int i;
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) { usage(stdout); exit(0); }
        if (strncmp(arg, "--", 2) != 0) {
            if (*file) die("two text files given (\"%s\" and \"%s\"); train takes one", *file, arg);
            *file = arg;
            continue;
        }
        value = strchr(arg, '='); /* --name=value or --name value */
        snprintf(name, sizeof name, "%.*s", value ? (int)(value - arg - 2) : (int)strlen(arg + 2), arg + 2);
        if ((i = option_index(name)) == N_OPTIONS) die("unknown option \"%s\" (see train --help)", arg);
        if (value) value++;
        else if (a + 1 < argc) value = argv[++a];
        else die("option --%s needs a value (see train --help)", name);
        if ((why = set_option(&OPTIONS[i], value))) die("%s", why);
        given[i] = 1;
    }
    if (!*file) { usage(stderr); die("no text file given: train FILE [options]"); }
}

/* ---- the text ---- */
static unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    size_t cap = 0, n = 0;
    if (!f) die("cannot open \"%s\": %s", path, strerror(errno));
    for (;;) {
        if (n == cap) {
            unsigned char *nb = realloc(buf, cap = cap ? 2 * cap : 1 << 20);
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

static uint64_t fnv1a(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    while (n--) h = (h ^ *p++) * 0x100000001b3ULL;
    return h;
}

/* ---- the shuffled loader of SPEC.md section 12, with a checkpointable RNG ---- */
typedef struct {
    const int32_t *ids;
    int64_t n, items, pos; /* tokens; windows per epoch; windows of this epoch already used */
    int T;
    int64_t *perm;
    uint64_t rng, epoch_rng; /* RNG state now and at the start of this epoch */
} loader;

static uint64_t next_random(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static int64_t random_below(uint64_t *s, int64_t n) { return (int64_t)(next_random(s) % (uint64_t)n); }

static void new_epoch(loader *L) {
    L->epoch_rng = L->rng;
    for (int64_t i = 0; i < L->items; i++) L->perm[i] = i;
    for (int64_t i = L->items - 1; i > 0; i--) {
        int64_t j = random_below(&L->rng, i + 1), t = L->perm[i];
        L->perm[i] = L->perm[j]; L->perm[j] = t;
    }
    L->pos = 0;
}

/* up to B windows into x (inputs) and y (targets, shifted by one); the last batch of an epoch
   may be smaller. Returns the number of windows. */
static int next_batch(loader *L, int B, int32_t *x, int32_t *y) {
    int b, T = L->T;
    if (L->pos == L->items) new_epoch(L);
    for (b = 0; b < B && L->pos < L->items; b++) {
        int64_t start = L->perm[L->pos++] * T, room = L->n - (start + T + 1);
        start += random_below(&L->rng, (room < T - 1 ? room : T - 1) + 1);
        for (int t = 0; t < T; t++) { x[b * T + t] = L->ids[start + t]; y[b * T + t] = L->ids[start + t + 1]; }
    }
    return b;
}

/* after --resume: replay the interrupted epoch's shuffle, then continue the saved RNG stream */
static void restore_loader(loader *L, uint64_t epoch_rng, uint64_t rng, int64_t pos) {
    if (pos < L->items) { L->rng = epoch_rng; new_epoch(L); }
    L->epoch_rng = epoch_rng; L->rng = rng;
    L->pos = pos < L->items ? pos : L->items;
}

/* mean loss over eval_batches batches of windows spread evenly over the validation text */
static double evaluate(mf_ctx *ctx, mf_model *m, const int32_t *ids, int64_t n, int32_t *x, int32_t *y) {
    int T = S.seq_len, grad = mf_set_grad(ctx, 0), training = mf_set_training(ctx, 0);
    int64_t windows = (n - 1) / T, count = (int64_t)S.eval_batches * S.batch, done = 0;
    double sum = 0;
    if (count > windows) count = windows;
    while (done < count) {
        int b = count - done < S.batch ? (int)(count - done) : S.batch;
        mf_tensor *loss;
        for (int r = 0; r < b; r++) {
            int64_t start = (done + r) * windows / count * T;
            for (int t = 0; t < T; t++) { x[r * T + t] = ids[start + t]; y[r * T + t] = ids[start + t + 1]; }
        }
        if (!(loss = mf_model_loss(m, x, y, b, T))) break;
        sum += (double)mf_item(ctx, loss) * b; /* mf_item: the value on any device */
        done += b;
        mf_reset(ctx);
    }
    mf_set_grad(ctx, grad);
    mf_set_training(ctx, training);
    if (!mf_ok(ctx)) die("validation failed: %s", mf_error(ctx));
    return sum / (double)done;
}

/* ---- checkpoints: mf_save's tensors + our settings, vocabulary and loader state as metadata ---- */
static void save_checkpoint(mf_ctx *ctx, const char *vocab_hex, size_t text_len, uint64_t text_hash,
                            const loader *L) {
    static char keys[N_OPTIONS + 8][48], vals[N_OPTIONS + 8][48];
    const char *kv[2 * (N_OPTIONS + 8)];
    int n = 0;
    for (int i = 0; i < N_OPTIONS; i++)
        if (OPTIONS[i].saved) {
            snprintf(keys[n], sizeof keys[n], "train.%s", OPTIONS[i].name);
            kv[2 * n] = keys[n]; kv[2 * n + 1] = format_option(&OPTIONS[i], vals[n], sizeof vals[n]); n++;
        }
#define PUT(key, ...) (snprintf(vals[n], sizeof vals[n], __VA_ARGS__), kv[2 * n] = key, kv[2 * n + 1] = vals[n], n++)
    PUT("train.text_bytes", "%zu", text_len);
    PUT("train.text_fnv1a", "%016llx", (unsigned long long)text_hash);
    PUT("train.rng", "%016llx", (unsigned long long)L->rng);
    PUT("train.epoch_rng", "%016llx", (unsigned long long)L->epoch_rng);
    PUT("train.epoch_pos", "%lld", (long long)L->pos);
#undef PUT
    kv[2 * n] = "train.vocab"; kv[2 * n + 1] = vocab_hex; n++; /* byte values in hex: "0a2021..." */
    if (mf_save(ctx, S.save, 1, kv, n) < 0) die("%s", mf_error(ctx));
}

/* the checkpoint's metadata value of key (dies when it is missing) */
static const char *meta(const char *key, char *buf, size_t size) {
    if (mf_load_meta(S.resume, key, buf, size) < 0)
        die("checkpoint \"%s\" has no \"%s\" in its metadata: it was not written by train "
            "(start a new run without --resume)", S.resume, key);
    return buf;
}

/* --resume, before the model exists: take the settings from the checkpoint. An option given on
   the command line must agree with it (the same command line plus --resume is fine). */
static void load_settings(const unsigned char *given) {
    static char stored[N_OPTIONS][64];
    char key[64], mine[64];
    if (mf_load_meta(S.resume, "mf.format", key, sizeof key) < 0) {
        /* unreadable, truncated or not a checkpoint: let mf_load say which */
        mf_ctx *probe = mf_ctx_new(0);
        if (mf_load(probe, S.resume, 0) < 0) die("cannot resume: %s", mf_error(probe));
        die("cannot resume: \"%s\" is not a metaformer.h checkpoint", S.resume);
    }
    for (int i = 0; i < N_OPTIONS; i++) {
        const option *o = &OPTIONS[i];
        if (!o->saved) continue;
        snprintf(key, sizeof key, "train.%s", o->name);
        meta(key, stored[i], sizeof stored[i]);
        if (given[i] && strcmp(format_option(o, mine, sizeof mine), stored[i]) != 0) {
            if (o->saved == SAVED_CHANGEABLE) {
                printf("note: --%s changed from %s to %s\n", o->name, stored[i], mine);
                continue;
            }
            die("--%s %s differs from the checkpoint's %s: a resumed run keeps the checkpoint's "
                "settings (drop --%s, or start a new run without --resume)", o->name, mine, stored[i], o->name);
        }
        if (set_option(o, stored[i])) die("checkpoint \"%s\" has a bad %s \"%s\"", S.resume, key, stored[i]);
    }
}

static void format_eta(double s, char *buf, size_t size) {
    long t = (long)(s + 0.5);
    snprintf(buf, size, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
}

int main(int argc, char **argv) {
    const char *path = NULL;
    unsigned char given[N_OPTIONS] = {0}, present[256] = {0};
    char vocab_hex[513] = "", buf[600];
    int32_t stoi[256], itos[256];
    size_t len, controls = 0;
    int V = 0, tty = isatty(1), line_open = 0;

    parse_args(argc, argv, &path, given);

    /* the text: bytes -> ids (vocabulary = sorted byte values of the whole file) */
    unsigned char *text = read_file(path, &len);
    if (len == 0) die("\"%s\" is empty; give a text file (a few hundred kB of text trains well)", path);
    for (size_t i = 0; i < len; i++) {
        if (text[i] == 0) die("\"%s\" looks binary (it contains NUL bytes); train reads plain text", path);
        if ((text[i] < 32 && !strchr("\t\n\v\f\r", text[i])) || text[i] == 127) controls++;
        present[text[i]] = 1;
    }
    if (controls * 20 > len) /* over 5%: real text has almost none besides tab, newline, form feed */
        die("\"%s\" looks binary (%zu of %zu bytes are control characters); train reads plain text", path, controls, len);
    for (int c = 0; c < 256; c++)
        if (present[c]) { itos[V] = c; stoi[c] = V; snprintf(vocab_hex + 2 * V, 3, "%02x", c); V++; }
    uint64_t text_hash = fnv1a(text, len);

    if (S.resume) {
        load_settings(given);
        if (strcmp(meta("train.vocab", buf, sizeof buf), vocab_hex) != 0)
            die("the vocabulary of checkpoint \"%s\" (%d characters) differs from that of \"%s\" (%d characters): "
                "the model can only continue on text with the same characters; resume with the file it was "
                "trained on, or start a new run without --resume", S.resume, (int)strlen(buf) / 2, path, V);
        if (strtoull(meta("train.text_fnv1a", buf, sizeof buf), NULL, 16) != text_hash)
            printf("note: \"%s\" is not the text the checkpoint was trained on (same characters); continuing on it\n", path);
    }
    if (S.resume && !S.save) S.save = S.resume; /* keep saving where the run came from */
    if (!S.resume && !given[option_index("warmup")] && S.warmup >= S.steps) S.warmup = S.steps / 10; /* short runs */
    if (S.weight_decay < 0) S.weight_decay = strcmp(S.optimizer, "adamw") == 0 ? 0.01f : 0.0f;

    /* the splits: each needs at least one window of seq_len + 1 characters */
    int T = S.seq_len;
    int64_t n_train = (int64_t)len * 9 / 10, n_valid = (int64_t)len - n_train; /* floor(0.9 * len) */
    if (n_train < T + 1 || n_valid < T + 1) {
        int64_t need = T + 1;
        while (need * 9 / 10 < T + 1 || need - need * 9 / 10 < T + 1) need++;
        die("\"%s\" is too short: %zu bytes, but --seq-len %d needs at least %lld (a window of %d characters in "
            "both the 90%% training and the 10%% validation part); use a longer text or a smaller --seq-len",
            path, len, T, (long long)need, T + 1);
    }
    int32_t *ids = malloc(len * sizeof *ids);
    if (!ids) die("out of memory");
    for (size_t i = 0; i < len; i++) ids[i] = stoi[text[i]];

    /* the sample's prompt: every character must be in the vocabulary */
    const char *prompt = S.prompt ? S.prompt : "It is";
    for (const char *p = prompt; *p; p++)
        if (!present[(unsigned char)*p]) {
            if (S.prompt)
                die("the prompt's character '%c' (byte %d) never occurs in \"%s\"; use a prompt made of the "
                    "text's characters", *p, (unsigned char)*p, path);
            snprintf(buf, sizeof buf, "%c", text[0]); /* default prompt: the text's first character */
            prompt = buf[0] ? buf : "\n";
            break;
        }
    if (!*prompt) die("--prompt is empty; give at least one character");
    int n_prompt = (int)strlen(prompt);
    int32_t *prompt_ids = malloc((size_t)n_prompt * sizeof *prompt_ids);
    for (int i = 0; i < n_prompt; i++) prompt_ids[i] = stoi[(unsigned char)prompt[i]];

    /* the model */
    mf_model_config cfg = mf_model_config_default();
    cfg.vocab = V; cfg.d_model = S.d_model; cfg.n_heads = S.heads; cfg.n_layers = S.layers; cfg.d_ff = S.d_ff;
    cfg.max_seq = T; cfg.dropout = S.dropout;
    cfg.mixer = (mf_mixer_kind)mf_mixer_from_name(S.mixer);
    cfg.pos = (mf_pos_kind)choice_index("none|learned|sinusoidal", S.pos);
    cfg.ffn_act = (mf_act_kind)choice_index("relu|gelu|gelu_tanh|silu", S.act);
    if ((cfg.mixer == MF_MIXER_SDPA || cfg.mixer == MF_MIXER_METRIC || cfg.mixer == MF_MIXER_QUADRATIC) && S.d_model % S.heads)
        die("--d-model %d is not divisible by --heads %d (the %s mixer splits d-model into equal heads); "
            "pick a head count that divides d-model", S.d_model, S.heads, S.mixer);
    mf_optimizer opt = mf_optimizer_default((mf_optimizer_kind)choice_index("adam|adam_labml|adamw|sgd", S.optimizer), S.lr);
    opt.weight_decay = S.weight_decay;
    opt.schedule.kind = (mf_schedule_kind)choice_index("constant|warmup|noam|cosine", S.schedule);
    opt.schedule.warmup = S.warmup; opt.schedule.total_steps = S.steps;
    opt.schedule.min_lr = S.lr / 10; opt.schedule.d_model = S.d_model;
    if ((opt.schedule.kind == MF_SCHED_WARMUP || opt.schedule.kind == MF_SCHED_NOAM) && S.warmup < 1)
        die("--schedule %s needs --warmup >= 1", S.schedule);
    if (opt.schedule.kind == MF_SCHED_COSINE && S.steps <= S.warmup)
        die("--schedule cosine needs --steps (%d) > --warmup (%d); lower --warmup or use --schedule constant",
            S.steps, S.warmup);

    mf_ctx *ctx = mf_ctx_new((uint64_t)S.seed);
    if (!ctx) die("out of memory");
    if (strcmp(S.device, "cuda") == 0 && mf_ctx_set_device(ctx, MF_DEVICE_CUDA) < 0) die("--device cuda: %s", mf_error(ctx));
    mf_set_threads(ctx, S.threads);
    mf_model *model = mf_model_check(ctx, &cfg) == 0 ? mf_model_new(ctx, &cfg) : NULL;
    if (!model) die("%s", mf_error(ctx));

    loader L = {ids, n_train, (n_train - 1) / T, 0, T, malloc((size_t)((n_train - 1) / T) * sizeof(int64_t)),
                0x5eed0000ULL ^ (uint64_t)S.seed * 0x9e3779b97f4a7c15ULL, 0};
    L.pos = L.items; /* the first batch starts an epoch */
    int64_t step = 0;
    if (S.resume) {
        if (mf_load(ctx, S.resume, 1) < 0) die("cannot resume: %s", mf_error(ctx));
        step = mf_optimizer_steps(ctx);
        uint64_t epoch_rng = strtoull(meta("train.epoch_rng", buf, sizeof buf), NULL, 16);
        uint64_t rng = strtoull(meta("train.rng", buf, sizeof buf), NULL, 16);
        restore_loader(&L, epoch_rng, rng, strtoll(meta("train.epoch_pos", buf, sizeof buf), NULL, 10));
    }
    if (S.save) { /* fail now, not after hours of training, when the checkpoint cannot be written */
        char tmp[4096];
        FILE *f;
        snprintf(tmp, sizeof tmp, "%s.tmp", S.save);
        if (!(f = fopen(tmp, "wb")))
            die("cannot write the checkpoint \"%s\": %s (does the directory exist?)", tmp, strerror(errno));
        fclose(f);
        remove(tmp);
    }

    printf("data: \"%s\", %zu bytes, %d distinct characters, %lld train / %lld valid\n", path, len, V,
           (long long)n_train, (long long)n_valid);
    printf("model: %s mixer, d_model %d, %d heads, %d layers, d_ff %d, T %d, %lld parameters\n", S.mixer, S.d_model,
           S.heads, S.layers, S.d_ff, T, (long long)mf_param_count(ctx));
    printf("train: %s, %s schedule, lr %g, warmup %d, batch %d, %d steps\n", S.optimizer, S.schedule, (double)S.lr,
           S.warmup, S.batch, S.steps);
    if (S.resume) printf("resumed from \"%s\" at step %lld\n", S.resume, (long long)step);
    fflush(stdout);

    /* training: forward, loss, backward, clip, optimizer step, zero grad (SPEC.md 11.5) */
    int32_t *x = malloc((size_t)S.batch * T * sizeof *x), *y = malloc((size_t)S.batch * T * sizeof *y);
    int64_t last = S.steps, tokens = 0, run_steps = 0;
    double train_time = 0, shown = 0;
    if (S.stop_after > 0 && step + S.stop_after < last) last = step + S.stop_after;
    while (step < last) {
        double t0 = mf_time();
        int b = next_batch(&L, S.batch, x, y);
        mf_tensor *loss = mf_model_loss(model, x, y, b, T);
        mf_backward(ctx, loss);
        if (S.clip > 0) mf_clip_grad_norm(ctx, S.clip);
        mf_optimizer_step(ctx, &opt);
        mf_zero_grad(ctx);
        if (!mf_ok(ctx)) die("training step %lld failed: %s", (long long)step + 1, mf_error(ctx));
        float loss_value = mf_item(ctx, loss);
        mf_reset(ctx);
        if (!isfinite(loss_value))
            die("the loss became %f at step %lld; lower --lr or keep --clip", (double)loss_value, (long long)step + 1);
        step++; run_steps++; tokens += (int64_t)b * T;
        train_time += mf_time() - t0;

        /* a terminal: one line updated in place (at most 10 times a second); else a line per log_every */
        if (tty ? mf_time() - shown > 0.1 || step == last : step % S.log_every == 0 || step == last || run_steps == 1) {
            char eta[32];
            format_eta((double)(S.steps - step) * train_time / (double)run_steps, eta, sizeof eta);
            printf("%sstep %lld/%d  loss %.6f  lr %.3e  %.0f tok/s  ETA %s%s", tty ? "\r" : "", (long long)step,
                   S.steps, (double)loss_value, (double)mf_schedule_lr(&opt.schedule, step),
                   (double)tokens / train_time, eta, tty ? "\033[K" : "\n");
            fflush(stdout);
            line_open = tty;
            shown = mf_time();
        }
        if (S.eval_every > 0 && step % S.eval_every == 0 && step < last) {
            double vl = evaluate(ctx, model, ids + n_train, n_valid, x, y);
            printf("%sstep %lld: valid loss %.6f (%.4f bits/char)\n", line_open ? "\n" : "", (long long)step, vl,
                   vl / log(2.0));
            line_open = 0;
        }
        if (S.save && ((S.save_every > 0 && step % S.save_every == 0) || step == last))
            save_checkpoint(ctx, vocab_hex, len, text_hash, &L);
    }
    if (line_open) printf("\n");
    if (run_steps)
        printf("trained %lld steps in %.1f s (%.0f tokens/s)%s%s\n", (long long)run_steps, train_time,
               (double)tokens / train_time, S.save ? ", saved " : "", S.save ? S.save : "");
    else printf("nothing to train: the checkpoint is at step %lld of --steps %d\n", (long long)step, S.steps);

    double vl = evaluate(ctx, model, ids + n_train, n_valid, x, y);
    printf("step %lld: valid loss %.6f (%.4f bits/char)\n", (long long)step, vl, vl / log(2.0));

    if (S.sample > 0) { /* greedy unless --temperature > 0 */
        mf_sampler sampler = {S.temperature, S.top_k, (uint64_t)S.seed};
        int32_t *out = malloc((size_t)S.sample * sizeof *out);
        if (mf_model_generate(model, prompt_ids, n_prompt, S.sample, &sampler, out) < 0)
            die("sampling failed: %s", mf_error(ctx));
        if (S.temperature > 0) snprintf(buf, sizeof buf, "temperature %g, top-k %d", (double)S.temperature, S.top_k);
        printf("--- sample (%s) ---\n%s", S.temperature > 0 ? buf : "greedy", prompt);
        for (int i = 0; i < S.sample; i++) putchar(itos[out[i]]);
        printf("\n---\n");
        free(out);
    }
    mf_model_free(model);
    mf_ctx_free(ctx);
    free(x); free(y); free(L.perm); free(prompt_ids); free(ids); free(text);
    return 0;
}
