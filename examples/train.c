/* train.c - train a character-level MetaFormer language model on any text file.

   build:  make examples      (or: cc -std=c99 -O2 -march=native -fopenmp train.c -o train -lm)
   run:    ./build/train input.txt                                   defaults, see --help
           ./build/train input.txt --mixer metric --steps 3000 --save lm.safetensors
           ./build/train input.txt --resume lm.safetensors            continue where it stopped
           ./build/train input.txt --mixer relative --mem-len 128     Transformer-XL memory
           ./build/train input.txt --compressive --mem-len 64 --c-mem-len 64 --compression-rate 2

   The file is read as bytes. The vocabulary is the sorted set of byte values in the whole file,
   the first floor(0.9 * length) bytes train and the rest validates (docs/math.md §12). Batches
   come from that section's loaders (examples/common.h): the shuffled loader, whose epochs visit
   the windows starting at i * T in a random order, each shifted by a random offset; and, for the
   models that carry memory from batch to batch (--mixer relative, --compressive), the sequential
   loader, whose batch row b continues row b of the previous batch (the memories are emptied at
   the start of every pass; validation runs on the model's second memory slot).
   A checkpoint holds the weights, the optimizer moments, the settings, the vocabulary and the
   loaders' state, so a resumed run continues bit-identically: its losses equal those of a run that
   was never interrupted. The exception is the memory models: checkpoints do not hold their
   memories, so a resumed memory model starts with empty memories. */
#define _POSIX_C_SOURCE 200809L /* isatty */
#define METAFORMER_IMPLEMENTATION
#include "../metaformer.h"
#define EX_PROG "train"
#include "common.h"

/* ---- settings: one table drives parsing, --help, the checkpoint metadata and --resume ---- */
typedef struct {
    const char *mixer, *pos, *act, *optimizer, *schedule, *save, *resume, *prompt, *feature;
    int d_model, heads, layers, d_ff, seq_len, batch, steps, warmup, seed;
    int mem_len, compressive, c_mem_len, compression_rate, dpfp_nu, chunk;
    int threads, eval_every, eval_batches, log_every, save_every, stop_after, sample, top_k;
    float lr, weight_decay, clip, dropout, temperature;
    const char *device;
} settings;

static settings S = {
    .mixer = "sdpa", .pos = "learned", .act = "gelu", .optimizer = "adam", .schedule = "cosine", .feature = "dpfp",
    .d_model = 128, .heads = 4, .layers = 4, .d_ff = 512, .seq_len = 128, .batch = 16,
    .steps = 2000, .warmup = 100, .seed = 1, .lr = 1e-3f, .weight_decay = -1, .clip = 1.0f,
    .compression_rate = 2, .dpfp_nu = 1,
    .eval_every = 250, .eval_batches = 20, .log_every = 10, .save_every = 500, .sample = 300, .device = "cpu"};

/* the choices of the name options: the library's names (filled in by main) */
static char MIXERS[256], POSITIONS[64], ACTIVATIONS[64], FEATURES[64];
static int list_mixers;

static const option OPTIONS[] = {
    {"mixer", OPT_TEXT, &S.mixer, SAVED, 0, MIXERS, "token mixer"},
    {"list-mixers", OPT_FLAG, &list_mixers, RUN_ONLY, 0, NULL, "print the mixers this build has, one per line, and exit"},
    {"feedback", OPT_ALIAS, &S.mixer, RUN_ONLY, 0, "feedback", "the feedback transformer (--mixer feedback)"},
    {"feedback-kv", OPT_ALIAS, &S.mixer, RUN_ONLY, 0, "feedback_kv", "feedback with keys/values shared by all layers (--mixer feedback_kv)"},
    {"mem-len", OPT_INT, &S.mem_len, SAVED, 0, NULL, "relative: memories kept per layer (Transformer-XL; 0 = none)"},
    {"compressive", OPT_FLAG, &S.compressive, SAVED, 0, NULL, "compressive transformer: --mixer relative with compressed memories"},
    {"c-mem-len", OPT_INT, &S.c_mem_len, SAVED, 0, NULL, "compressive: compressed memories kept per layer"},
    {"compression-rate", OPT_INT, &S.compression_rate, SAVED, 1, NULL, "compressive: memories per compressed memory"},
    {"dpfp-nu", OPT_INT, &S.dpfp_nu, SAVED, 1, NULL, "fast_weights, linear: DPFP order (feature size 2 * d_head * nu)"},
    {"feature", OPT_TEXT, &S.feature, SAVED, 0, FEATURES, "linear: feature map of queries and keys"},
    {"chunk", OPT_INT, &S.chunk, SAVED_CHANGEABLE, 0, NULL, "fast_weights, linear: training kernel (0 = automatic, 1 = recurrent, n = chunks of n)"},
    {"d-model", OPT_INT, &S.d_model, SAVED, 1, NULL, "model width"},
    {"heads", OPT_INT, &S.heads, SAVED, 1, NULL, "heads (every mixer but pool and identity); must divide d-model"},
    {"layers", OPT_INT, &S.layers, SAVED, 1, NULL, "blocks"},
    {"d-ff", OPT_INT, &S.d_ff, SAVED, 1, NULL, "FFN hidden width"},
    {"seq-len", OPT_INT, &S.seq_len, SAVED, 1, NULL, "context length T of the training windows"},
    {"pos", OPT_TEXT, &S.pos, SAVED, 0, POSITIONS, "positional encoding"},
    {"act", OPT_TEXT, &S.act, SAVED, 0, ACTIVATIONS, "FFN activation"},
    {"dropout", OPT_FLOAT, &S.dropout, SAVED, 0, NULL, "dropout probability"},
    {"batch", OPT_INT, &S.batch, SAVED, 1, NULL, "windows per step"},
    {"steps", OPT_INT, &S.steps, SAVED_CHANGEABLE, 0, NULL, "total optimizer steps (cosine ends here)"},
    {"lr", OPT_FLOAT, &S.lr, SAVED, 0, NULL, "peak learning rate"},
    {"optimizer", OPT_TEXT, &S.optimizer, SAVED, 0, "adam|adam_labml|adamw|sgd", "optimizer"},
    {"schedule", OPT_TEXT, &S.schedule, SAVED, 0, "constant|warmup|noam|cosine",
     "learning-rate schedule (cosine: warm-up, then down to lr/10)"},
    {"warmup", OPT_INT, &S.warmup, SAVED, 0, NULL, "warm-up steps (at most steps/10 unless given)"},
    {"weight-decay", OPT_FLOAT, &S.weight_decay, SAVED, 0, NULL, "weight decay (default 0.01 for adamw, else 0)"},
    {"clip", OPT_FLOAT, &S.clip, SAVED, 0, NULL, "max gradient norm (0 = no clipping)"},
    {"seed", OPT_INT, &S.seed, SAVED, 0, NULL, "seed of the initialisation, dropout and batches"},
    {"threads", OPT_INT, &S.threads, RUN_ONLY, 0, NULL, "CPU threads (0 = all)"},
    {"device", OPT_TEXT, &S.device, RUN_ONLY, 0, "cpu|cuda", "where to train (cuda: a build made by `make train-cuda`)"},
    {"eval-every", OPT_INT, &S.eval_every, RUN_ONLY, 0, NULL, "validate every N steps (0 = at the end only)"},
    {"eval-batches", OPT_INT, &S.eval_batches, RUN_ONLY, 1, NULL, "batches per validation"},
    {"log-every", OPT_INT, &S.log_every, RUN_ONLY, 1, NULL, "progress line every N steps when not on a terminal"},
    {"save", OPT_TEXT, &S.save, RUN_ONLY, 0, NULL, "checkpoint file, written every --save-every steps and at the end (with --resume: that file)"},
    {"save-every", OPT_INT, &S.save_every, RUN_ONLY, 0, NULL, "steps between checkpoints (0 = at the end only)"},
    {"resume", OPT_TEXT, &S.resume, RUN_ONLY, 0, NULL, "continue from this checkpoint (its settings are used)"},
    {"stop-after", OPT_INT, &S.stop_after, RUN_ONLY, 0, NULL, "stop after N steps of this run (split a long job; 0 = no)"},
    {"sample", OPT_INT, &S.sample, RUN_ONLY, 0, NULL, "characters generated at the end"},
    {"prompt", OPT_TEXT, &S.prompt, RUN_ONLY, 0, NULL, "prompt of the sample [It is]"},
    {"temperature", OPT_FLOAT, &S.temperature, RUN_ONLY, 0, NULL, "sampling temperature (0 = greedy)"},
    {"top-k", OPT_INT, &S.top_k, RUN_ONLY, 0, NULL, "sample among the k most likely characters (0 = all)"},
};
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))
static char DEFAULTS[N_OPTIONS][64]; /* each option's default as text: what an older checkpoint without it means */

static int option_index(const char *name) { return find_option(OPTIONS, N_OPTIONS, name); }

static void usage(FILE *f) {
    fprintf(f, "usage: train FILE [options]   train a character-level language model on a text file\n\n");
    print_options(f, OPTIONS, N_OPTIONS);
    fprintf(f, "\nMemory models (--mixer relative, --compressive) read the text sequentially: batch row b continues\n"
               "row b of the previous batch, and the memories are emptied at the start of every pass over the text.\n"
               "Checkpoints do not hold the memories: a resumed memory model starts with empty memories.\n");
}

static int is_mixer(const char *a, const char *b) { return strcmp(S.mixer, a) == 0 || (b && strcmp(S.mixer, b) == 0); }

/* --compressive means the relative mixer. The library refuses a config field the mixer does not
   read (mf_model_check: --mem-len, --dpfp-nu, --feature, --chunk with another mixer; see
   check_model_config); the options of the compressive transformer are checked here, as the library
   lets a relative model without compression carry them. */
static void check_mixer_options(unsigned char *given) {
    static const struct { const char *option, *mixers; int compressive; const char *what; } ONLY[] = {
        {"c-mem-len", "relative", 1, "--compressive"},
        {"compression-rate", "relative", 1, "--compressive"},
    };
    int mixer = option_index("mixer");
    if (S.compressive) {
        if (given[mixer] && !is_mixer("relative", NULL))
            die("--compressive is a memory model of the relative mixer, not of --mixer %s; drop --mixer %s", S.mixer, S.mixer);
        S.mixer = "relative";
        if (S.mem_len < 1)
            die("--compressive needs --mem-len N >= 1: it compresses the memories that fall out of the --mem-len "
                "window (e.g. --mem-len %d --c-mem-len %d)", S.seq_len, S.seq_len);
        if (S.c_mem_len < 1)
            die("--compressive needs --c-mem-len N >= 1, the compressed memories kept per layer (e.g. --c-mem-len %d)",
                S.mem_len);
    }
    for (size_t i = 0; i < sizeof ONLY / sizeof ONLY[0]; i++) {
        int o = option_index(ONLY[i].option);
        int applies = choice_index(ONLY[i].mixers, S.mixer) >= 0 && (!ONLY[i].compressive || S.compressive);
        if (given[o] && !applies)
            die("--%s applies to %s only, not to --mixer %s%s; drop --%s", ONLY[i].option, ONLY[i].what, S.mixer,
                is_mixer("relative", NULL) && !S.compressive ? " without --compressive" : "", ONLY[i].option);
    }
    if (given[option_index("dpfp-nu")] && strcmp(S.feature, "elu1") == 0)
        die("--dpfp-nu sets the order of the DPFP feature map; --feature elu1 has none: drop one of them");
}

/* ---- checkpoints: mf_save's tensors + our settings, vocabulary and loader state as metadata ---- */
typedef struct loaders { int sequential; shuffle_loader shuf; seq_loader seq; } loaders;

static void save_checkpoint(mf_ctx *ctx, const text_data *text, const loaders *L) {
    static char keys[N_OPTIONS + 8][48], vals[N_OPTIONS + 8][48];
    const char *kv[2 * (N_OPTIONS + 8)];
    int n = 0;
    for (int i = 0; i < N_OPTIONS; i++)
        if (OPTIONS[i].saved) {
            snprintf(keys[n], sizeof keys[n], "train.%s", OPTIONS[i].name);
            kv[2 * n] = keys[n]; kv[2 * n + 1] = format_option(&OPTIONS[i], vals[n], sizeof vals[n]); n++;
        }
#define PUT(key, ...) (snprintf(vals[n], sizeof vals[n], __VA_ARGS__), kv[2 * n] = key, kv[2 * n + 1] = vals[n], n++)
    PUT("train.text_bytes", "%zu", text->len);
    PUT("train.text_fnv1a", "%016llx", (unsigned long long)text->hash);
    PUT("train.rng", "%016llx", (unsigned long long)L->shuf.rng);
    PUT("train.epoch_rng", "%016llx", (unsigned long long)L->shuf.epoch_rng);
    PUT("train.epoch_pos", "%lld", (long long)L->shuf.pos);
    PUT("train.seq_pos", "%lld", (long long)L->seq.idx); /* the sequential loader (memory models) */
#undef PUT
    kv[2 * n] = "train.vocab"; kv[2 * n + 1] = text->vocab_hex; n++; /* byte values in hex: "0a2021..." */
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
   the command line must agree with it (the same command line plus --resume is fine). A setting
   the checkpoint lacks (written before the option existed) keeps its default. */
static void load_settings(const unsigned char *given) {
    static char stored[N_OPTIONS][64];
    char key[64], mine[64];
    if (mf_load_meta(S.resume, "mf.format", key, sizeof key) < 0) {
        /* unreadable, truncated or not a checkpoint: let mf_load say which */
        mf_ctx *probe = mf_ctx_new(0);
        if (mf_load(probe, S.resume, 0) < 0) die("cannot resume: %s", mf_error(probe));
        die("cannot resume: \"%s\" is not a metaformer.h checkpoint", S.resume);
    }
    meta("train.mixer", key, sizeof key); /* written by train at all */
    for (int i = 0; i < N_OPTIONS; i++) {
        const option *o = &OPTIONS[i];
        if (!o->saved) continue;
        snprintf(key, sizeof key, "train.%s", o->name);
        if (mf_load_meta(S.resume, key, stored[i], sizeof stored[i]) == -1) strcpy(stored[i], DEFAULTS[i]);
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

/* the vocabulary must match; another text with the same characters is allowed (with a note) */
static void check_resume_text(const text_data *text, const char *path) {
    char buf[600];
    if (strcmp(meta("train.vocab", buf, sizeof buf), text->vocab_hex) != 0)
        die("the vocabulary of checkpoint \"%s\" (%d characters) differs from that of \"%s\" (%d characters): "
            "the model can only continue on text with the same characters; resume with the file it was "
            "trained on, or start a new run without --resume", S.resume, (int)strlen(buf) / 2, path, text->V);
    if (strtoull(meta("train.text_fnv1a", buf, sizeof buf), NULL, 16) != text->hash)
        printf("note: \"%s\" is not the text the checkpoint was trained on (same characters); continuing on it\n", path);
}

/* the sample's prompt as ids: every character must be in the vocabulary */
static int32_t *prompt_ids(const text_data *text, const char *path, const char **prompt, int *n) {
    static char first[2];
    int32_t *ids;
    *prompt = S.prompt ? S.prompt : "It is";
    for (const char *p = *prompt; *p; p++)
        if (!text->present[(unsigned char)*p]) {
            if (S.prompt)
                die("the prompt's character '%c' (byte %d) never occurs in \"%s\"; use a prompt made of the "
                    "text's characters", *p, (unsigned char)*p, path);
            first[0] = (char)text->bytes[0]; /* default prompt: the text's first character */
            *prompt = first;
            break;
        }
    if (!**prompt) die("--prompt is empty; give at least one character");
    *n = (int)strlen(*prompt);
    if (!(ids = (int32_t *)malloc((size_t)*n * sizeof *ids))) die("out of memory");
    for (int i = 0; i < *n; i++) ids[i] = text->stoi[(unsigned char)(*prompt)[i]];
    return ids;
}

static mf_model_config model_config(int V) {
    mf_model_config cfg = mf_model_config_default();
    cfg.vocab = V; cfg.d_model = S.d_model; cfg.n_heads = S.heads; cfg.n_layers = S.layers; cfg.d_ff = S.d_ff;
    cfg.max_seq = S.seq_len; cfg.dropout = S.dropout;
    cfg.mixer = (mf_mixer_kind)mf_mixer_from_name(S.mixer);
    cfg.pos = (mf_pos_kind)mf_pos_from_name(S.pos);
    cfg.ffn_act = (mf_act_kind)mf_act_from_name(S.act);
    cfg.mem_len = S.mem_len; cfg.compressive = S.compressive; cfg.c_mem_len = S.c_mem_len;
    cfg.compression_rate = S.compression_rate;
    cfg.dpfp_nu = S.dpfp_nu; cfg.linear_feature = (mf_feature_kind)mf_feature_from_name(S.feature);
    cfg.chunk_size = S.chunk;
    if (cfg.mixer != MF_MIXER_POOL && cfg.mixer != MF_MIXER_IDENTITY && S.d_model % S.heads)
        die("--d-model %d is not divisible by --heads %d (the %s mixer splits d-model into equal heads); "
            "pick a head count that divides d-model", S.d_model, S.heads, S.mixer);
    return cfg;
}

/* mf_model_check, dying with its message; a field that the mixer does not read is named by the
   library as in the config, the option that set it is added */
static void check_model_config(mf_ctx *ctx, const mf_model_config *cfg) {
    static const struct { const char *field, *option; } SET_BY[] = {
        {"mem_len", "mem-len"}, {"compressive", "compressive"}, {"c_mem_len", "c-mem-len"},
        {"compression_rate", "compression-rate"}, {"dpfp_nu", "dpfp-nu"}, {"linear_feature", "feature"},
        {"chunk_size", "chunk"}};
    if (mf_model_check(ctx, cfg) == 0) return;
    const char *msg = mf_error(ctx), *at = strstr(msg, "model config: ");
    for (size_t i = 0; at && i < sizeof SET_BY / sizeof SET_BY[0]; i++) {
        size_t n = strlen(SET_BY[i].field);
        if (strncmp(at + 14, SET_BY[i].field, n) == 0 && strncmp(at + 14 + n, " = ", 3) == 0 && strstr(msg, "applies only"))
            die("--%s: %s. Drop --%s, or pick one of those mixers with --mixer", SET_BY[i].option, msg, SET_BY[i].option);
    }
    die("%s", msg);
}

static mf_optimizer make_optimizer(void) {
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
    return opt;
}

/* the loaders over the training text; a memory model also needs validation columns of >= 2 tokens */
static void make_loaders(loaders *L, const text_data *text) {
    seq_loader valid;
    shuffle_init(&L->shuf, text->ids, text->n_train, S.seq_len, (uint64_t)S.seed);
    if (seq_init(&L->seq, text->ids, text->n_train, S.batch, S.seq_len) < 0 && L->sequential)
        die("--batch %d cuts the %lld training characters into columns of fewer than 2; the sequential loader "
            "of the memory models needs a smaller --batch", S.batch, (long long)text->n_train);
    if (L->sequential && seq_init(&valid, text->ids + text->n_train, text->n_valid, S.batch, S.seq_len) < 0)
        die("--batch %d cuts the %lld validation characters into columns of fewer than 2; the sequential loader "
            "of the memory models needs a smaller --batch", S.batch, (long long)text->n_valid);
}

/* --resume: the optimizer state, the step and the loaders' position */
static int64_t resume_state(mf_ctx *ctx, loaders *L) {
    char buf[64];
    if (mf_load(ctx, S.resume, 1) < 0) die("cannot resume: %s", mf_error(ctx));
    uint64_t epoch_rng = strtoull(meta("train.epoch_rng", buf, sizeof buf), NULL, 16);
    uint64_t rng = strtoull(meta("train.rng", buf, sizeof buf), NULL, 16);
    shuffle_restore(&L->shuf, epoch_rng, rng, strtoll(meta("train.epoch_pos", buf, sizeof buf), NULL, 10));
    if (L->sequential) {
        int64_t pos = strtoll(meta("train.seq_pos", buf, sizeof buf), NULL, 10);
        L->seq.idx = pos >= 0 && pos < L->seq.n ? pos : L->seq.n - 1;
        printf("note: the memories start empty (checkpoints do not hold them)\n");
    }
    return mf_optimizer_steps(ctx);
}

/* fail now, not after hours of training, when the checkpoint cannot be written */
static void check_writable(const char *path) {
    char tmp[4096];
    FILE *f;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (!(f = fopen(tmp, "wb"))) die("cannot write the checkpoint \"%s\": %s (does the directory exist?)", tmp, strerror(errno));
    fclose(f);
    remove(tmp);
}

/* "relative mixer (mem_len 64, compressive: c_mem_len 64, rate 2)" and the like */
static const char *describe_mixer(void) {
    static char buf[200];
    int n = snprintf(buf, sizeof buf, "%s mixer", S.mixer);
    if (is_mixer("relative", NULL)) {
        n += snprintf(buf + n, sizeof buf - n, " (mem_len %d", S.mem_len);
        if (S.compressive) n += snprintf(buf + n, sizeof buf - n, ", compressive: c_mem_len %d, rate %d", S.c_mem_len, S.compression_rate);
        snprintf(buf + n, sizeof buf - n, ")");
    } else if (is_mixer("fast_weights", "linear")) {
        if (is_mixer("linear", NULL) && strcmp(S.feature, "elu1") == 0) n += snprintf(buf + n, sizeof buf - n, " (elu+1 features");
        else n += snprintf(buf + n, sizeof buf - n, " (DPFP nu %d", S.dpfp_nu);
        snprintf(buf + n, sizeof buf - n, ", chunk %d)", S.chunk);
    }
    return buf;
}

/* mean validation CE (and the reconstruction loss of compressive models), dying on failure */
static double evaluate(mf_ctx *ctx, mf_model *m, const text_data *text, int32_t *x, int32_t *y, double *ar) {
    double vl = validate(ctx, m, text->ids + text->n_train, text->n_valid, S.seq_len, S.batch, S.eval_batches, x, y, ar);
    if (!mf_ok(ctx)) die("validation failed: %s", mf_error(ctx));
    if (isnan(vl)) die("validation failed: no validation batch could be read");
    return vl;
}
static void print_validation(progress *pr, int64_t step, double vl, double ar) {
    progress_break(pr);
    printf("step %lld: valid loss %.6f (%.4f bits/char)", (long long)step, vl, vl / log(2.0));
    if (S.compressive) printf("  reconstruction loss %.6f", ar);
    printf("\n");
}

static void sample(mf_ctx *ctx, mf_model *model, const text_data *text, const char *path) {
    const char *prompt;
    char what[100];
    int n_prompt;
    int32_t *ids = prompt_ids(text, path, &prompt, &n_prompt), *out = (int32_t *)malloc((size_t)S.sample * sizeof *out);
    mf_sampler sampler = {S.temperature, S.top_k, (uint64_t)S.seed}; /* greedy unless --temperature > 0 */
    if (!out) die("out of memory");
    if (mf_model_generate(model, ids, n_prompt, S.sample, &sampler, out) < 0) die("sampling failed: %s", mf_error(ctx));
    if (S.temperature > 0) snprintf(what, sizeof what, "temperature %g, top-k %d", (double)S.temperature, S.top_k);
    printf("--- sample (%s) ---\n%s", S.temperature > 0 ? what : "greedy", prompt);
    for (int i = 0; i < S.sample; i++) putchar(text->itos[out[i]]);
    printf("\n---\n");
    free(out); free(ids);
}

int main(int argc, char **argv) {
    const char *path = NULL, *unused_prompt;
    unsigned char given[N_OPTIONS] = {0};
    text_data text;
    loaders L;
    progress pr = progress_new();
    int n_prompt;

    LIBRARY_CHOICES(MIXERS, mf_mixer_name, mf_mixer_kind);
    LIBRARY_CHOICES(POSITIONS, mf_pos_name, mf_pos_kind);
    LIBRARY_CHOICES(ACTIVATIONS, mf_act_name, mf_act_kind);
    LIBRARY_CHOICES(FEATURES, mf_feature_name, mf_feature_kind);
    for (int i = 0; i < N_OPTIONS; i++) format_option(&OPTIONS[i], DEFAULTS[i], sizeof DEFAULTS[i]);
    parse_options(argc, argv, OPTIONS, N_OPTIONS, given, &path, usage);
    if (list_mixers) { /* for scripts: the mixers of this build */
        for (int k = 0; k < MF_MIXER_COUNT; k++)
            if (mf_mixer_compiled((mf_mixer_kind)k)) printf("%s\n", mf_mixer_name((mf_mixer_kind)k));
        return 0;
    }
    if (!path) { usage(stderr); die("no text file given: train FILE [options]"); }
    text_load(&text, path);
    if (S.resume) {
        if (S.compressive) S.mixer = "relative"; /* what --compressive means, compared with the checkpoint */
        load_settings(given);
        check_resume_text(&text, path);
    }
    check_mixer_options(given);
    if (S.resume && !S.save) S.save = S.resume; /* keep saving where the run came from */
    if (!S.resume && !given[option_index("warmup")] && S.warmup >= S.steps) S.warmup = S.steps / 10; /* short runs */
    if (S.weight_decay < 0) S.weight_decay = strcmp(S.optimizer, "adamw") == 0 ? 0.01f : 0.0f;
    text_need_windows(&text, path, S.seq_len);
    free(prompt_ids(&text, path, &unused_prompt, &n_prompt)); /* a bad --prompt fails now, not after training */

    mf_model_config cfg = model_config(text.V);
    mf_optimizer opt = make_optimizer();
    mf_ctx *ctx = mf_ctx_new((uint64_t)S.seed);
    if (!ctx) die("out of memory");
    if (strcmp(S.device, "cuda") == 0 && mf_ctx_set_device(ctx, MF_DEVICE_CUDA) < 0) die("--device cuda: %s", mf_error(ctx));
    mf_set_threads(ctx, S.threads);
    mf_set_keep_activation_grads(ctx, 0); /* the loop reads no activation gradient */
    check_model_config(ctx, &cfg);
    mf_model *model = mf_model_new(ctx, &cfg);
    if (!model) die("%s", mf_error(ctx));

    L.sequential = has_memory(&cfg);
    make_loaders(&L, &text);
    int64_t step = S.resume ? resume_state(ctx, &L) : 0;
    if (S.save) check_writable(S.save);

    int T = S.seq_len;
    printf("data: \"%s\", %zu bytes, %d distinct characters, %lld train / %lld valid\n", path, text.len, text.V,
           (long long)text.n_train, (long long)text.n_valid);
    printf("model: %s, d_model %d, %d heads, %d layers, d_ff %d, T %d, %lld parameters\n", describe_mixer(), S.d_model,
           S.heads, S.layers, S.d_ff, T, (long long)mf_param_count(ctx));
    printf("train: %s, %s schedule, lr %g, warmup %d, batch %d, %d steps\n", S.optimizer, S.schedule, (double)S.lr,
           S.warmup, S.batch, S.steps);
    if (L.sequential)
        printf("loader: sequential, %d columns of %lld characters, %lld batches per pass; validation on memory slot 1\n",
               S.batch, (long long)L.seq.n, (long long)seq_batches(&L.seq));
    if (S.resume) printf("resumed from \"%s\" at step %lld\n", S.resume, (long long)step);
    fflush(stdout);

    /* training: forward, loss, backward, clip, optimizer step, zero grad (docs/math.md §11.5) */
    int32_t *x = (int32_t *)malloc((size_t)S.batch * T * sizeof *x), *y = (int32_t *)malloc((size_t)S.batch * T * sizeof *y);
    int64_t last = S.steps, tokens = 0, run_steps = 0;
    double train_time = 0, ar = 0;
    if (!x || !y) die("out of memory");
    if (S.stop_after > 0 && step + S.stop_after < last) last = step + S.stop_after;
    while (step < last) {
        double t0 = mf_time();
        int b = S.batch, Tb = T, new_pass;
        float loss, aux;
        if (L.sequential) {
            Tb = seq_next(&L.seq, x, y, &new_pass);
            if (new_pass) mf_model_reset_memory(model); /* a pass over the text starts with empty memories */
        } else b = shuffle_next(&L.shuf, S.batch, x, y);
        if (train_step(ctx, model, &opt, S.clip, x, y, b, Tb, &loss, &aux) < 0)
            die("training step %lld failed: %s", (long long)step + 1, mf_error(ctx));
        if (!isfinite(loss))
            die("the loss became %f at step %lld; lower --lr or keep --clip", (double)loss, (long long)step + 1);
        step++; run_steps++; tokens += (int64_t)b * Tb;
        train_time += mf_time() - t0;

        /* a terminal: one line updated in place; else a line per log_every steps */
        if (progress_due(&pr, step == last, step % S.log_every == 0 || step == last || run_steps == 1)) {
            char eta[32], parts[80] = "";
            format_eta((double)(S.steps - step) * train_time / (double)run_steps, eta, sizeof eta);
            if (S.compressive) snprintf(parts, sizeof parts, "  (ce %.6f + ar %.6f)", (double)(loss - aux), (double)aux);
            progress_show(&pr, "step %lld/%d  loss %.6f%s  lr %.3e  %.0f tok/s  ETA %s", (long long)step, S.steps,
                          (double)loss, parts, (double)mf_schedule_lr(&opt.schedule, step), (double)tokens / train_time, eta);
        }
        if (S.eval_every > 0 && step % S.eval_every == 0 && step < last) {
            double vl = evaluate(ctx, model, &text, x, y, &ar);
            print_validation(&pr, step, vl, ar);
        }
        if (S.save && ((S.save_every > 0 && step % S.save_every == 0) || step == last))
            save_checkpoint(ctx, &text, &L);
    }
    progress_break(&pr);
    if (run_steps)
        printf("trained %lld steps in %.1f s (%.0f tokens/s)%s%s\n", (long long)run_steps, train_time,
               (double)tokens / train_time, S.save ? ", saved " : "", S.save ? S.save : "");
    else printf("nothing to train: the checkpoint is at step %lld of --steps %d\n", (long long)step, S.steps);

    double vl = evaluate(ctx, model, &text, x, y, &ar);
    print_validation(&pr, step, vl, ar);
    if (S.sample > 0) sample(ctx, model, &text, path);
    mf_model_free(model);
    mf_ctx_free(ctx);
    free(x); free(y); free(L.shuf.perm); text_free(&text);
    return 0;
}
