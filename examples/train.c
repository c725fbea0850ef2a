/* train.c - train a MetaFormer language model on a text file (characters) or on token shards.

   build:  make examples      (or: cc -std=c99 -O2 -march=native -fopenmp train.c -o train -lm)
   run:    ./build/train input.txt                                   defaults, see --help
           ./build/train input.txt --mixer metric --steps 3000 --save lm.safetensors
           ./build/train input.txt --resume lm.safetensors            continue where it stopped
           ./build/train input.txt --mixer relative --mem-len 128     Transformer-XL memory
           ./build/train input.txt --compressive --mem-len 64 --c-mem-len 64 --compression-rate 2
           ./build/train --data 'train_*.bin' --valid val.bin --tokenizer tok.bin   token shards
           ./build/train --resume lm.safetensors --eval-only                  validation loss only
           mpirun -np 2 build/train-mpi input.txt --threads 1 --batch 8      2 ranks (make train-mpi), = --batch 16

   The file is read as bytes. The vocabulary is the sorted set of byte values in the whole file,
   the first floor(0.9 * length) bytes train and the rest validates (docs/math.md §12). Batches
   come from that section's loaders (examples/common.h): the shuffled loader, whose epochs visit
   the windows starting at i * T in a random order, each shifted by a random offset; and, for the
   models that carry memory from batch to batch (--mixer relative, --compressive), the sequential
   loader, whose batch row b continues row b of the previous batch (the memories are emptied at
   the start of every pass; validation runs on the model's second memory slot).
   A checkpoint holds the weights, the optimizer moments and the dropout RNG's position, the
   model's memories (mf_model_save), the settings, the vocabulary and the loaders' state, so a
   resumed run of every model continues bit-identically: its losses equal those of a run that was
   never interrupted (tests/test_resume.sh). A memory model's checkpoint from before the memories
   were stored resumes with empty memories, and says so.

   Token shards (--data FILES --valid FILES, docs/math.md §17.6): llm.c's or nanoGPT's uint16
   files, several (commas, globs) read as one stream; the same loaders run over them. The
   vocabulary is the tokenizer's (--tokenizer FILE, or "bytes") or --vocab N; checkpoints record it
   and the tokenizer's identity, and a resumed or evaluated run must use the same. */
#define _POSIX_C_SOURCE 200809L /* isatty, glob, strdup, strtok_r */
#include <glob.h>
#define METAFORMER_IMPLEMENTATION
#include "../metaformer.h"
#ifdef METAFORMER_MPI
#define EX_PROG "train-mpi"
#else
#define EX_PROG "train"
#endif
#include "common.h"

/* ---- build/train-mpi (`make train-mpi`: this file with -DMETAFORMER_MPI, built by mpicc) ----
   `mpirun -np N build/train-mpi ...` runs this program once per rank: --batch is the rows of one
   rank, a step's global batch is N * --batch rows and rank r reads the rows [r * batch, (r + 1) *
   batch) of it (mf_loader's rank / world), so N ranks train as one process with --batch N * batch.
   The loss, validation and gradient norm printed are the global ones; rank 0 prints and writes the
   checkpoints (mf_dist_save: an ordinary checkpoint, which any world size resumes). An error that
   every rank knows of (mf_dist_* agreed on it) is printed once by rank 0 and ends every rank with
   status 1; an error of one rank alone is printed with its rank and ends the job (MPI_Abort). */
static ex_ranks RANKS = {0, 1, NULL, NULL, 0, 0, 0}; /* one process: rank 0 of 1 */
static int AGREED; /* the error at hand is known to every rank (train-mpi) */
#ifdef METAFORMER_MPI
static int zero1, no_overlap;
#define TRAIN_MPI_OPTIONS \
    {"zero1", OPT_FLAG, &zero1, RUN_ONLY, 0, NULL, "ZeRO-1: shard the optimizer moments over the ranks (same results, less memory)"}, \
    {"no-overlap", OPT_FLAG, &no_overlap, RUN_ONLY, 0, NULL, "average the gradients after the backward, not during it (measures the overlap)"},

static void sum_over_ranks(double *v, int n) { MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); }

static void die_mpi(const char *message) {
    if (!AGREED) { /* this rank alone: say which, and end the job */
        fprintf(stderr, EX_PROG ": error: rank %d of %d: %s\n", RANKS.rank, RANKS.world, message);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (RANKS.rank == 0) fprintf(stderr, EX_PROG ": error: %s\n", message);
    exit(1); /* mpi_end finalizes */
}
/* a failure every rank agreed on: rank 0 prints it (it names the rank that failed), all end */
static EX_NORETURN void die_agreed(const char *what, const char *why) {
    AGREED = 1;
    die("%s: %s", what, why);
}
static void mpi_end(void) {
    int done;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
}
static void mpi_start(int *argc, char ***argv) {
    MPI_Init(argc, argv);
    atexit(mpi_end);
    MPI_Comm_rank(MPI_COMM_WORLD, &RANKS.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &RANKS.world);
    RANKS.sum = sum_over_ranks;
    ex_die_hook = die_mpi;
    /* mpirun hands the ranks a terminal of its own even when its output goes to a file: rank 0 prints
       plain progress lines (progress_new is told below) */
    if (RANKS.rank != 0 && !freopen("/dev/null", "w", stdout)) die("cannot send the output of rank %d to /dev/null", RANKS.rank);
}
/* the ranks' context, before the training context: with NCCL it picks the GPU of the rank's local
   rank, on which mf_ctx_set_device then opens the context */
static void mpi_new(void) {
    mf_dist_config c = mf_dist_config_default();
    char err[1024];
    c.zero1 = zero1; c.no_overlap = no_overlap;
    if (!(RANKS.dist = mf_dist_new(MPI_COMM_WORLD, &c, err, sizeof err))) die("%s", err);
}
/* the ranks' checks and broadcast of the parameters, the dropout streams, the gradient buckets */
static void mpi_attach(mf_ctx *ctx) {
    if (mf_dist_attach(RANKS.dist, ctx) < 0) die_agreed("the ranks cannot start", mf_dist_error(RANKS.dist));
}
#else
#define TRAIN_MPI_OPTIONS
#endif

/* ---- settings: one table drives parsing, --help, the checkpoint metadata and --resume ---- */
typedef struct {
    model_settings m;           /* the model: examples/common.h [model], shared with build/sample */
    const char *optimizer, *schedule, *save, *resume, *prompt, *data, *valid, *tokenizer;
    int batch, grad_accum, steps, warmup, seed, vocab, eval_only, greedy;
    int threads, eval_every, eval_batches, log_every, save_every, stop_after, sample, top_k;
    int skip_nonfinite, check_finite, memory_limit, epochs, inner_iterations;
    float lr, weight_decay, clip, temperature, beta1, beta2;
    const char *device, *precision, *valid_protocol;
} settings;

static settings S = {
    .m = MODEL_SETTINGS_DEFAULT, .optimizer = "adam", .schedule = "cosine", .batch = 16, .grad_accum = 1,
    .steps = 2000, .warmup = 100, .seed = 1, .lr = 1e-3f, .weight_decay = -1, .clip = 1.0f,
    .eval_every = 250, .eval_batches = 20, .log_every = 10, .save_every = 500, .sample = 300, .device = "cpu", .precision = "fp32",
    .valid_protocol = "fixed", .temperature = 0.8f, .top_k = 200, .beta1 = 0.9f, .beta2 = 0.999f};

static int list_mixers, list_presets_flag;
static const char *preset_name;
static int LABML, PARTS;         /* --valid-protocol labml; its parts per pass (--eval-only: 1, the whole stream) */
static int64_t VALID_BATCHES;    /* labml: batches of the sequential loader over the validation stream */

#define TRAIN_MIXER_EXTRA \
    {"list-mixers", OPT_FLAG, &list_mixers, RUN_ONLY, 0, NULL, "print the mixers this build has, one per line, and exit"}, \
    {"feedback", OPT_ALIAS, &S.m.mixer, RUN_ONLY, 0, "feedback", "the feedback transformer (--mixer feedback)"}, \
    {"feedback-kv", OPT_ALIAS, &S.m.mixer, RUN_ONLY, 0, "feedback_kv", "feedback with keys/values shared by all layers (--mixer feedback_kv)"},
static const option OPTIONS[] = {
    MODEL_OPTIONS(S.m, TRAIN_MIXER_EXTRA)
    {"batch", OPT_INT, &S.batch, SAVED, 1, NULL, "windows per micro-batch (a step takes --grad-accum of them)"},
    {"grad-accum", OPT_INT, &S.grad_accum, SAVED, 1, NULL,
     "micro-batches of --batch windows per optimizer step: the gradient of one batch of grad-accum x batch windows"},
    {"steps", OPT_INT, &S.steps, SAVED_CHANGEABLE, 0, NULL, "total optimizer steps (cosine ends here)"},
    {"lr", OPT_FLOAT, &S.lr, SAVED, 0, NULL, "peak learning rate"},
    {"optimizer", OPT_TEXT, &S.optimizer, SAVED, 0, "adam|adam_labml|adamw|sgd", "optimizer"},
    {"schedule", OPT_TEXT, &S.schedule, SAVED, 0, "constant|warmup|noam|cosine",
     "learning-rate schedule (cosine: warm-up, then down to lr/10)"},
    {"warmup", OPT_INT, &S.warmup, SAVED, 0, NULL, "warm-up steps (at most steps/10 unless given)"},
    {"weight-decay", OPT_FLOAT, &S.weight_decay, SAVED, 0, NULL, "weight decay (default 0.01 for adamw, else 0)"},
    {"beta1", OPT_FLOAT, &S.beta1, SAVED, 0, NULL, "Adam's first-moment decay"},
    {"beta2", OPT_FLOAT, &S.beta2, SAVED, 0, NULL, "Adam's second-moment decay"},
    {"epochs", OPT_INT, &S.epochs, RUN_ONLY, 0, NULL, "train this many passes over the training data: sets --steps (0 = use --steps)"},
    {"inner-iterations", OPT_INT, &S.inner_iterations, RUN_ONLY, 0, NULL,
     "validate this many times per pass over the data (labml's inner_iterations): sets --eval-every, or the parts of "
     "--valid-protocol labml (0 = no)"},
    {"clip", OPT_FLOAT, &S.clip, SAVED, 0, NULL, "max gradient norm (0 = no clipping)"},
    {"seed", OPT_INT, &S.seed, SAVED, 0, NULL, "seed of the initialisation, dropout and batches"},
    {"threads", OPT_INT, &S.threads, RUN_ONLY, 0, NULL, "CPU threads (0 = all)"},
    {"device", OPT_TEXT, &S.device, RUN_ONLY, 0, "cpu|cuda", "where to train (cuda: a build made by `make train-cuda`)"},
    {"precision", OPT_TEXT, &S.precision, SAVED_CHANGEABLE, 0, "fp32|tf32|bf16",
     "the GEMMs' arithmetic (bf16: mixed precision with fp32 master weights, on a GPU or any CPU, AMX tiles where "
     "present; tf32: cuda only; checkpoints stay fp32 and resume anywhere)"},
    {"eval-every", OPT_INT, &S.eval_every, RUN_ONLY, 0, NULL, "validate every N steps (0 = at the end only)"},
    {"eval-batches", OPT_INT, &S.eval_batches, RUN_ONLY, 1, NULL, "batches per validation"},
    {"valid-protocol", OPT_TEXT, &S.valid_protocol, RUN_ONLY, 0, "fixed|labml",
     "fixed: --eval-batches first batches every --eval-every steps, memories emptied; labml: after each "
     "1/--inner-iterations of a pass, the next 1/--inner-iterations of the validation stream, memories carried"},
    {"log-every", OPT_INT, &S.log_every, RUN_ONLY, 1, NULL, "progress line every N steps when not on a terminal"},
    {"save", OPT_TEXT, &S.save, RUN_ONLY, 0, NULL, "checkpoint file, written every --save-every steps and at the end (with --resume: that file)"},
    {"save-every", OPT_INT, &S.save_every, RUN_ONLY, 0, NULL, "steps between checkpoints (0 = at the end only)"},
    {"resume", OPT_TEXT, &S.resume, RUN_ONLY, 0, NULL, "continue from this checkpoint (its settings are used)"},
    {"stop-after", OPT_INT, &S.stop_after, RUN_ONLY, 0, NULL, "stop after N steps of this run (split a long job; 0 = no)"},
    {"skip-nonfinite", OPT_INT, &S.skip_nonfinite, RUN_ONLY, 0, NULL,
     "skip up to N steps whose loss or gradient norm is NaN/Inf (no update, gradients zeroed); stop at the next (0: stop at the first)"},
    {"check-finite", OPT_FLAG, &S.check_finite, RUN_ONLY, 0, NULL,
     "test every op's output and gradients for NaN/Inf and stop at the first op that makes one, naming it (slow)"},
    {"memory-limit", OPT_INT, &S.memory_limit, RUN_ONLY, 0, NULL,
     "cap in MiB on the activation arena, the parameters and the optimizer moments (0 = none)"},
    {"data", OPT_TEXT, &S.data, RUN_ONLY, 0, NULL, "token shards to train on instead of a text FILE: FILE[,FILE...], globs allowed"},
    {"valid", OPT_TEXT, &S.valid, RUN_ONLY, 0, NULL, "validation shards (with --data, or for --eval-only of a shard-trained checkpoint)"},
    {"tokenizer", OPT_TEXT, &S.tokenizer, RUN_ONLY, 0, NULL, "the shards' tokenizer file (or \"bytes\"): vocabulary, bits per byte, decoded samples"},
    {"vocab", OPT_INT, &S.vocab, RUN_ONLY, 0, NULL, "the shards' vocabulary size when no --tokenizer is given"},
    {"eval-only", OPT_FLAG, &S.eval_only, RUN_ONLY, 0, NULL, "with --resume: report the validation loss of the checkpoint and exit"},
    {"sample", OPT_INT, &S.sample, RUN_ONLY, 0, NULL, "tokens generated at the end"},
    {"prompt", OPT_TEXT, &S.prompt, RUN_ONLY, 0, NULL, "prompt of the sample [It is]"},
    {"temperature", OPT_FLOAT, &S.temperature, RUN_ONLY, 0, NULL, "sampling temperature (0 = greedy)"},
    {"top-k", OPT_INT, &S.top_k, RUN_ONLY, 0, NULL, "sample among the k most likely tokens (0 = all)"},
    {"greedy", OPT_FLAG, &S.greedy, RUN_ONLY, 0, NULL, "sample the most likely token each time (--temperature 0)"},
    /* handled by expand_preset before the table is parsed; here for --help */
    {"preset", OPT_TEXT, &preset_name, RUN_ONLY, 0, NULL, "a seed's experiment: its options, printed; later options override them"},
    {"list-presets", OPT_FLAG, &list_presets_flag, RUN_ONLY, 0, NULL, "print the presets and the options each expands to, and exit"},
    TRAIN_MPI_OPTIONS
};
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))
static char DEFAULTS[N_OPTIONS][64]; /* each option's default as text: what an older checkpoint without it means */

static int option_index(const char *name) { return find_option(OPTIONS, N_OPTIONS, name); }

static void usage(FILE *f) {
    fprintf(f, "usage: train FILE [options]                    a character-level model on a text file\n"
               "       train --data FILES --valid FILES [--tokenizer FILE | --vocab N] [options]   on token shards\n"
               "       train --resume CKPT --eval-only [FILE | --valid FILES]   the validation loss of a checkpoint\n\n");
    fprintf(f, "A step whose loss or gradient norm is NaN or Inf is never applied nor saved: training stops there and the\n"
               "checkpoint on disk stays the last good one (--skip-nonfinite N lets N such steps pass; --check-finite\n"
               "names the op that made the value).\n\n");
    print_options(f, OPTIONS, N_OPTIONS);
    fprintf(f, "\nMemory models (--mixer relative, --compressive) read the text sequentially: batch row b continues\n"
               "row b of the previous batch, and the memories are emptied at the start of every pass over the text.\n"
               "Checkpoints hold the memories: a resumed run of any model continues bit-identically (an older\n"
               "checkpoint of a memory model, without them, resumes with empty memories and says so).\n");
}

static int is_mixer(const char *a, const char *b) { return strcmp(S.m.mixer, a) == 0 || (b && strcmp(S.m.mixer, b) == 0); }

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
    if (S.m.f.compressive) {
        if (given[mixer] && !is_mixer("relative", NULL))
            die("--compressive is a memory model of the relative mixer, not of --mixer %s; drop --mixer %s", S.m.mixer, S.m.mixer);
        S.m.mixer = "relative";
        if (S.m.f.mem_len < 1)
            die("--compressive needs --mem-len N >= 1: it compresses the memories that fall out of the --mem-len "
                "window (e.g. --mem-len %d --c-mem-len %d)", S.m.seq_len, S.m.seq_len);
        if (S.m.f.c_mem_len < 1)
            die("--compressive needs --c-mem-len N >= 1, the compressed memories kept per layer (e.g. --c-mem-len %d)",
                S.m.f.mem_len);
    }
    for (size_t i = 0; i < sizeof ONLY / sizeof ONLY[0]; i++) {
        int o = option_index(ONLY[i].option);
        int applies = choice_index(ONLY[i].mixers, S.m.mixer) >= 0 && (!ONLY[i].compressive || S.m.f.compressive);
        if (given[o] && !applies)
            die("--%s applies to %s only, not to --mixer %s%s; drop --%s", ONLY[i].option, ONLY[i].what, S.m.mixer,
                is_mixer("relative", NULL) && !S.m.f.compressive ? " without --compressive" : "", ONLY[i].option);
    }
    if (given[option_index("dpfp-nu")] && S.m.f.linear_feature == MF_FEATURE_ELU1)
        die("--dpfp-nu sets the order of the DPFP feature map; --feature elu1 has none: drop one of them");
}

/* ---- the data: a text file (characters), or token shards with their vocabulary ---- */
typedef struct data {
    int shards;                 /* 0: a text file */
    const char *path;           /* the text file */
    text_data text;
    mf_tokens *train, *valid;   /* the splits as streams (text: over text.ids) */
    int V;
    mf_tokenizer *tok;          /* decodes samples: the text's characters, --tokenizer, or NULL (ids) */
    const char *tok_spec;       /* shards: the tokenizer's path, "bytes", or "" */
    uint64_t tok_hash;          /* shards: its identity (tokenizer_identity) */
    int *token_bytes;           /* shards with a tokenizer: bytes per id (bits per byte) */
} data;

/* "a.bin,b*.bin" -> the files: each glob expanded (sorted), in the order given */
static const char **expand_files(const char *list, const char *option, int *n) {
    const char **files = NULL;
    char *copy = strdup(list), *save = NULL;
    int cap = 0;
    *n = 0;
    if (!copy) die("out of memory");
    for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        glob_t g;
        int rc = glob(item, 0, NULL, &g);
        if (rc == GLOB_NOMATCH && !strpbrk(item, "*?[")) { /* a plain name: opening it says what is wrong */
            g.gl_pathc = 0;
        } else if (rc != 0) die("--%s: \"%s\" matches no file", option, item);
        for (size_t k = 0; k < (g.gl_pathc ? g.gl_pathc : 1); k++) {
            if (*n == cap && !(files = (const char **)realloc(files, (size_t)(cap = cap ? 2 * cap : 8) * sizeof *files)))
                die("out of memory");
            if (!(files[(*n)++] = strdup(g.gl_pathc ? g.gl_pathv[k] : item))) die("out of memory");
        }
        if (rc == 0) globfree(&g);
    }
    free(copy);
    if (*n == 0) die("--%s names no file", option);
    return files;
}

static mf_tokens *open_shards(const char *list, const char *option, int V) {
    int n;
    const char **files = expand_files(list, option, &n);
    mf_tokens *s = mf_tokens_open(files, n, MF_SHARD_AUTO);
    if (mf_tokens_error(s)) die("--%s: %s", option, mf_tokens_error(s));
    mf_tokens_set_vocab(s, V); /* an id the model has no embedding for fails with its position and file */
    for (int i = 0; i < n; i++) free((void *)files[i]);
    free(files);
    return s;
}

/* the checkpoint's metadata value of key (dies when it is missing) */
static const char *meta(const char *key, char *buf, size_t size) {
    if (mf_load_meta(S.resume, key, buf, size) < 0)
        die("checkpoint \"%s\" has no \"%s\" in its metadata: it was not written by train "
            "(start a new run without --resume)", S.resume, key);
    return buf;
}
/* "tokens" for a checkpoint trained on shards, "text" for one trained on a text file */
static int checkpoint_on_shards(const char *path) {
    char buf[16];
    return mf_load_meta(path, "train.data", buf, sizeof buf) >= 0 && strcmp(buf, "tokens") == 0;
}

/* shards: the vocabulary and tokenizer from the options, or (resume, eval-only) the checkpoint's */
static void open_vocabulary(data *d) {
    char buf[4096];
    static char stored_tok[4096];
    if (S.resume) {
        int V = atoi(meta("train.vocab_size", buf, sizeof buf));
        meta("train.tokenizer", stored_tok, sizeof stored_tok);
        if (!S.tokenizer && stored_tok[0]) S.tokenizer = stored_tok; /* the tokenizer it was trained with */
        if (S.vocab && S.vocab != V) die("--vocab %d differs from the checkpoint's vocabulary of %d ids", S.vocab, V);
        if (!S.tokenizer) S.vocab = V;
    }
    if (S.tokenizer) {
        d->tok = tokenizer_open(S.tokenizer);
        d->tok_spec = S.tokenizer;
        d->tok_hash = tokenizer_identity(S.tokenizer);
        d->V = mf_tokenizer_vocab_size(d->tok);
        if (S.vocab && S.vocab != d->V)
            die("--vocab %d differs from the %d ids of --tokenizer \"%s\"; drop --vocab", S.vocab, d->V, S.tokenizer);
        d->token_bytes = token_byte_lengths(d->tok);
    } else if (S.vocab > 0) {
        d->V = S.vocab;
        d->tok_spec = "";
    } else die("token shards need their vocabulary: --tokenizer FILE (the one that wrote them; \"bytes\" for byte "
               "ids), or --vocab N (the number of token ids, e.g. 50257 for GPT-2's)");
    if (S.resume) {
        int V = atoi(meta("train.vocab_size", buf, sizeof buf));
        uint64_t h = strtoull(meta("train.tokenizer_fnv1a", buf, sizeof buf), NULL, 16);
        if (V != d->V)
            die("the tokenizer \"%s\" has %d ids but checkpoint \"%s\" was trained with %d: use the tokenizer it was "
                "trained with (%s)", d->tok_spec, d->V, S.resume, V, stored_tok[0] ? stored_tok : "none: give --vocab");
        if (stored_tok[0] && d->tok && h != d->tok_hash)
            die("the tokenizer \"%s\" is not the one checkpoint \"%s\" was trained with (\"%s\": its FNV-1a differs): "
                "the ids would mean other text; use that tokenizer", d->tok_spec, S.resume, stored_tok);
    }
}

/* the data of this run: a text FILE, or --data / --valid shards (--eval-only: --valid alone) */
static void open_data(data *d, const char *path) {
    memset(d, 0, sizeof *d);
    d->shards = S.data || S.valid;
    if (S.resume && checkpoint_on_shards(S.resume) != d->shards)
        die(d->shards ? "checkpoint \"%s\" was trained on a text file; give that FILE instead of --data / --valid"
                      : "checkpoint \"%s\" was trained on token shards; give --data FILES --valid FILES (or --valid FILES "
                        "with --eval-only) instead of a text file", S.resume);
    if (!d->shards) {
        if (S.tokenizer || S.vocab) die("--%s applies to token shards (--data); a text file is read as characters",
                                        S.tokenizer ? "tokenizer" : "vocab");
        d->path = path;
        text_load(&d->text, path);
        d->V = d->text.V;
        d->train = text_split(&d->text, 0);
        d->valid = text_split(&d->text, 1);
        d->tok = mf_tokenizer_chars(d->text.bytes, d->text.len);
        return;
    }
    if (path) die("with --data the training data are shards: drop the text file \"%s\"", path);
    if (!S.valid) die("--data needs --valid FILES: the shards that measure the validation loss");
    if (!S.data && !S.eval_only) die("--valid without --data: give the training shards with --data FILES (or use --eval-only)");
    open_vocabulary(d);
    d->valid = open_shards(S.valid, "valid", d->V);
    d->train = S.data ? open_shards(S.data, "data", d->V) : NULL;
}

static void close_data(data *d) {
    mf_tokens_close(d->train); mf_tokens_close(d->valid);
    mf_tokenizer_free(d->tok);
    free(d->token_bytes);
    if (!d->shards) text_free(&d->text);
}

/* ---- checkpoints: mf_model_save's tensors (weights, moments, memories) + our settings, vocabulary and
   loader state as metadata ---- */
static void save_checkpoint(mf_ctx *ctx, mf_model *model, const data *d, const mf_loader *L) {
    static char keys[N_OPTIONS + 14][48], vals[N_OPTIONS + 14][64];
    const char *kv[2 * (N_OPTIONS + 14)];
    int n = 0;
    for (int i = 0; i < N_OPTIONS; i++)
        if (OPTIONS[i].saved && !option_unstored(&OPTIONS[i])) {
            snprintf(keys[n], sizeof keys[n], "train.%s", OPTIONS[i].name);
            kv[2 * n] = keys[n]; kv[2 * n + 1] = format_option(&OPTIONS[i], vals[n], sizeof vals[n]); n++;
        }
#define PUT(key, ...) (snprintf(vals[n], sizeof vals[n], __VA_ARGS__), kv[2 * n] = key, kv[2 * n + 1] = vals[n], n++)
    if (!d->shards) {
        PUT("train.text_bytes", "%zu", d->text.len);
        PUT("train.text_fnv1a", "%016llx", (unsigned long long)d->text.hash);
    }
    PUT("train.rng", "%016llx", (unsigned long long)L->state.rng);
    PUT("train.epoch_rng", "%016llx", (unsigned long long)L->state.epoch_rng);
    PUT("train.epoch_pos", "%lld", (long long)L->state.epoch_pos);
    PUT("train.seq_pos", "%lld", (long long)L->state.seq_pos); /* the sequential loader (memory models) */
    PUT("train.world", "%d", RANKS.world); /* the ranks of build/train-mpi: the global batch is world x grad-accum x batch */
    if (LABML) { /* what the validation memories (slot 1) were carried under; absent: fixed */
        PUT("train.valid_protocol", "labml");
        PUT("train.inner_iterations", "%d", S.inner_iterations);
    }
    if (d->shards) { /* docs/math.md §17.6: what a resumed, evaluated or sampled model needs to read its ids */
        PUT("train.data", "tokens");
        PUT("train.vocab_size", "%d", d->V);
        PUT("train.tokenizer_fnv1a", "%016llx", (unsigned long long)d->tok_hash);
        kv[2 * n] = "train.tokenizer"; kv[2 * n + 1] = d->tok_spec; n++;
    }
#undef PUT
    if (!d->shards) { kv[2 * n] = "train.vocab"; kv[2 * n + 1] = d->text.vocab_hex; n++; } /* byte values in hex: "0a2021..." */
#ifdef METAFORMER_MPI
    (void)ctx;
    if (mf_dist_save(RANKS.dist, model, S.save, kv, n) < 0) die_agreed("cannot save", mf_dist_error(RANKS.dist));
#else
    if (mf_model_save(model, S.save, 1, kv, n) < 0) die("%s", mf_error(ctx));
#endif
}

/* --resume, before the model exists: take the settings from the checkpoint. An option given on
   the command line must agree with it (the same command line plus --resume is fine). A setting
   the checkpoint lacks (written before the option existed) keeps its default. */
static void load_settings(const unsigned char *given) {
    static char stored[N_OPTIONS][64];
    char mine[64];
    check_train_checkpoint(S.resume, S.eval_only ? "cannot evaluate" : "cannot resume");
    read_stored_options(S.resume, OPTIONS, N_OPTIONS, (const char (*)[64])DEFAULTS, stored);
    for (int i = 0; i < N_OPTIONS; i++) {
        const option *o = &OPTIONS[i];
        if (!o->saved) continue;
        if (given[i] && strcmp(format_option(o, mine, sizeof mine), stored[i]) != 0) {
            if (o->saved == SAVED_CHANGEABLE) {
                printf("note: --%s changed from %s to %s\n", o->name, stored[i], mine);
                continue;
            }
            die("--%s %s differs from the checkpoint's %s: a resumed run keeps the checkpoint's "
                "settings (drop --%s, or start a new run without --resume)", o->name, mine, stored[i], o->name);
        }
        if (set_option(o, stored[i])) die("checkpoint \"%s\" has a bad train.%s \"%s\"", S.resume, o->name, stored[i]);
    }
}

/* --resume of a checkpoint that another number of ranks wrote: the global batch (world x grad-accum x
   batch windows, in that order: docs/math.md §18.1) stays the same, so the run continues the same
   loss curve, by giving each rank a share of the micro-batches (--grad-accum). A checkpoint without
   train.world was written by one process. */
static void keep_global_batch(void) {
    char buf[32];
    long long world = mf_load_meta(S.resume, "train.world", buf, sizeof buf) < 0 ? 1 : atoll(buf), micro;
    if (world == RANKS.world) return;
    if (world < 1 || world > INT_MAX) die("checkpoint \"%s\" has a bad train.world \"%s\"", S.resume, buf);
    micro = world * S.grad_accum; /* the micro-batches of --batch windows in a step */
    if (micro % RANKS.world)
        die("checkpoint \"%s\" was trained by %lld rank%s x --grad-accum %d x --batch %d windows per step: %d ranks cannot "
            "share those %lld micro-batches evenly; resume with a number of ranks that divides %lld", S.resume, world,
            world == 1 ? "" : "s", S.grad_accum, S.batch, RANKS.world, micro, micro);
    printf("note: checkpoint \"%s\" of %lld rank%s resumed by %d: --grad-accum %d becomes %lld, the same %lld windows per "
           "step\n", S.resume, world, world == 1 ? "" : "s", RANKS.world, S.grad_accum, micro / RANKS.world, micro * S.batch);
    S.grad_accum = (int)(micro / RANKS.world);
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

/* The sample's prompt as ids. A text: every character must be in the vocabulary (the default
   prompt falls back to the text's first character). Shards: encoded by the tokenizer; without
   one the prompt is the first validation token. */
static int32_t *prompt_ids(data *d, int *n) {
    const char *prompt = S.prompt ? S.prompt : "It is";
    int32_t *ids;
    int64_t k;
    if (!*prompt) die("--prompt is empty; give at least one character");
    if (d->shards && !d->tok) {
        if (S.prompt) die("--prompt needs --tokenizer: without one the shards' ids cannot be made from text");
        if (!(ids = (int32_t *)malloc(sizeof *ids))) die("out of memory");
        if (mf_tokens_read(d->valid, 0, 1, ids) < 0) die("%s", mf_tokens_error(d->valid));
        *n = 1;
        return ids;
    }
    if (!d->shards)
        for (const char *p = prompt; *p; p++)
            if (!d->text.present[(unsigned char)*p]) {
                if (S.prompt)
                    die("the prompt's character '%c' (byte %d) never occurs in \"%s\"; use a prompt made of the "
                        "text's characters", *p, (unsigned char)*p, d->path);
                if (!(ids = (int32_t *)malloc(sizeof *ids))) die("out of memory");
                ids[0] = d->text.ids[0]; /* default prompt: the text's first character */
                *n = 1;
                return ids;
            }
    k = mf_tokenizer_encode(d->tok, prompt, strlen(prompt), NULL, 0);
    if (k < 1) die("--prompt \"%s\": %s", prompt, k < 0 ? mf_tokenizer_error(d->tok) : "encodes to no token");
    if (!(ids = (int32_t *)malloc((size_t)k * sizeof *ids))) die("out of memory");
    mf_tokenizer_encode(d->tok, prompt, strlen(prompt), ids, k);
    *n = (int)k;
    return ids;
}

static mf_optimizer make_optimizer(void) {
    mf_optimizer opt = mf_optimizer_default((mf_optimizer_kind)choice_index("adam|adam_labml|adamw|sgd", S.optimizer), S.lr);
    opt.weight_decay = S.weight_decay;
    if (strcmp(S.optimizer, "sgd") != 0) { opt.beta1 = S.beta1; opt.beta2 = S.beta2; }
    opt.schedule.kind = (mf_schedule_kind)choice_index("constant|warmup|noam|cosine", S.schedule);
    opt.schedule.warmup = S.warmup; opt.schedule.total_steps = S.steps;
    opt.schedule.min_lr = S.lr / 10; opt.schedule.d_model = S.m.d_model;
    if ((opt.schedule.kind == MF_SCHED_WARMUP || opt.schedule.kind == MF_SCHED_NOAM) && S.warmup < 1)
        die("--schedule %s needs --warmup >= 1", S.schedule);
    if (opt.schedule.kind == MF_SCHED_COSINE && S.steps <= S.warmup)
        die("--schedule cosine needs --steps (%d) > --warmup (%d); lower --warmup or use --schedule constant",
            S.steps, S.warmup);
    return opt;
}

/* --epochs and --inner-iterations, in batches of the loader (labml counts its training this way) */
static void apply_epochs(const mf_loader *L, mf_optimizer *opt) {
    int64_t per_epoch = mf_loader_batches(L);
    if (S.epochs > 0) {
        if (per_epoch * S.epochs > INT_MAX) die("--epochs %d: %lld steps is too many", S.epochs, (long long)(per_epoch * S.epochs));
        S.steps = (int)(per_epoch * S.epochs);
        opt->schedule.total_steps = S.steps;
    }
    if (S.inner_iterations > 0) S.eval_every = per_epoch / S.inner_iterations > 0 ? (int)(per_epoch / S.inner_iterations) : 1;
    if (LABML && S.inner_iterations > per_epoch)
        die("--inner-iterations %d cuts the %lld training batches of a pass into parts, some empty; use "
            "--inner-iterations %lld or fewer", S.inner_iterations, (long long)per_epoch, (long long)per_epoch);
    if (LABML) S.eval_every = 0; /* the parts' ends, not a fixed interval */
}

/* the training loader; a memory model also needs validation columns of >= 2 tokens */
static void make_loader(mf_loader *L, data *d, int sequential) {
    loader_open(L, d->train, sequential, S.batch * S.grad_accum, S.m.seq_len, (uint64_t)S.seed, RANKS.rank, RANKS.world,
                "training");
    if (sequential) {
        mf_loader valid;
        loader_open(&valid, d->valid, 1, S.batch * S.grad_accum, S.m.seq_len, 0, RANKS.rank, RANKS.world, "validation");
        mf_loader_free(&valid);
    }
}

/* ---- --valid-protocol labml (docs/training.md "Validation"): labml's Trainer cuts a pass over the
   training data and one over the validation stream into k = --inner-iterations parts each, part i
   being batches [i n / k, (i + 1) n / k) of the n, and validates part i of the stream after part i of
   the training pass, its memories carried from part to part and emptied when a pass starts. The
   position is the training loader's, so a resumed run needs only the memories, which the checkpoint
   holds (slot 1). ---- */
/* the validation stream's batches, which the parts cut (a loader that cannot cut it says why) */
static void labml_open(data *d) {
    mf_loader v;
    loader_open(&v, d->valid, 1, S.batch * S.grad_accum, S.m.seq_len, 0, RANKS.rank, RANKS.world, "validation");
    VALID_BATCHES = mf_loader_batches(&v);
    mf_loader_free(&v);
    if (PARTS > VALID_BATCHES)
        die("--inner-iterations %d cuts the %lld validation batches (--batch %d x --seq-len %d) into parts, some empty; "
            "use --inner-iterations %lld or fewer, or more validation data", PARTS, (long long)VALID_BATCHES,
            S.batch * S.grad_accum, S.m.seq_len, (long long)VALID_BATCHES);
}

/* the training batches of the current pass read so far, 1 .. n once a batch is read */
static int64_t pass_batches(const mf_loader *L) {
    int64_t per = L->cfg.sequential ? L->cfg.seq_len : (int64_t)L->cfg.batch * L->cfg.world;
    return ((L->cfg.sequential ? L->state.seq_pos : L->state.epoch_pos) + per - 1) / per;
}
/* the part of the pass whose last batch the loader has just read, or -1 */
static int labml_part(const mf_loader *L) {
    int64_t n = mf_loader_batches(L), done = pass_batches(L);
    for (int i = 0; i < PARTS; i++)
        if ((i + 1) * n / PARTS == done) return i;
    return -1;
}

/* --resume: the checkpoint's protocol when none is given (and its --inner-iterations with labml);
   returns 1 when the run validates otherwise than the checkpoint's, whose validation memories then
   belong to other parts */
static int adopt_protocol(const unsigned char *given) {
    static char stored[16];
    char buf[32];
    int k = 0;
    if (mf_load_meta(S.resume, "train.valid_protocol", stored, sizeof stored) < 0) strcpy(stored, "fixed");
    if (mf_load_meta(S.resume, "train.inner_iterations", buf, sizeof buf) >= 0) k = atoi(buf);
    if (!given[option_index("valid-protocol")]) S.valid_protocol = stored;
    if (strcmp(S.valid_protocol, "labml") == 0 && strcmp(stored, "labml") == 0 && !given[option_index("inner-iterations")])
        S.inner_iterations = k;
    return strcmp(S.valid_protocol, stored) != 0 || (strcmp(stored, "labml") == 0 && S.inner_iterations != k);
}

/* --resume: the optimizer state, the memories, the step and the loader's position */
static int64_t resume_state(mf_ctx *ctx, mf_model *model, mf_loader *L) {
    char buf[64];
    mf_loader_state st;
#ifdef METAFORMER_MPI
    int rc = mf_dist_load(RANKS.dist, model, S.resume);
    if (rc < 0) die_agreed("cannot resume", mf_dist_error(RANKS.dist));
#else
    int rc = mf_model_load(model, S.resume, 1);
    if (rc < 0) die("cannot resume: %s", mf_error(ctx));
#endif
    st.epoch_rng = strtoull(meta("train.epoch_rng", buf, sizeof buf), NULL, 16);
    st.rng = strtoull(meta("train.rng", buf, sizeof buf), NULL, 16);
    st.epoch_pos = strtoll(meta("train.epoch_pos", buf, sizeof buf), NULL, 10);
    st.seq_pos = L->cfg.sequential ? strtoll(meta("train.seq_pos", buf, sizeof buf), NULL, 10) : L->state.seq_pos;
    mf_loader_restore(L, &st);
    if (rc == 1) /* a checkpoint of a memory model from before mf_model_save */
        printf("note: \"%s\" holds no memories (an older checkpoint): the memories start empty, so the losses "
               "differ from an uninterrupted run\n", S.resume);
    return mf_optimizer_steps(ctx);
}

/* "rank 1 of 4", "ranks 1, 3 of 4": the ranks whose loss of this step was not finite (collective) */
static const char *nonfinite_ranks(void) {
    static char buf[200];
    double *bad = (double *)calloc((size_t)RANKS.world, sizeof *bad);
    int n, k = 0;
    if (!bad) return "a rank (out of memory naming it)";
    bad[RANKS.rank] = !isfinite(RANKS.local_loss);
    RANKS.sum(bad, RANKS.world);
    for (int r = 0; r < RANKS.world; r++) k += bad[r] > 0;
    n = snprintf(buf, sizeof buf, "rank%s", k > 1 ? "s" : "");
    for (int r = 0, i = 0; r < RANKS.world && n < (int)sizeof buf - 40; r++)
        if (bad[r] > 0) n += snprintf(buf + n, sizeof buf - n, "%s %d", i++ ? "," : "", r);
    snprintf(buf + n, sizeof buf - n, " of %d", RANKS.world);
    free(bad);
    return buf;
}

/* A NaN / Inf loss or gradient norm at `step` once the --skip-nonfinite budget is spent: stop, with
   the values, what is on disk (the last checkpoint written before it: a non-finite step is never
   saved) and what to try. */
static void stop_nonfinite(int64_t step, float loss, float norm, int skipped, int64_t saved_step) {
    char kept[4200];
    if (!S.save) snprintf(kept, sizeof kept, "no checkpoint is written (no --save)");
    else if (saved_step < 0) snprintf(kept, sizeof kept, "no checkpoint was written in this run (\"%s\" is not touched)", S.save);
    else snprintf(kept, sizeof kept, "the checkpoint \"%s\" of step %lld is the last good one and is kept", S.save,
                  (long long)saved_step);
    char l[32], n[32];
    AGREED = 1; /* the loss and the norm are the global ones: every rank stops here */
    if (RANKS.nonfinite_ranks) snprintf(kept + strlen(kept), sizeof kept - strlen(kept), " (the loss was not finite on %s)", nonfinite_ranks());
    die("step %lld: the loss is %s and the gradient norm %s: not finite, so training stops without applying it%s; %s. "
        "Lower --lr, keep --clip, let a few such steps pass with --skip-nonfinite N, or find the op that makes the "
        "value with --check-finite", (long long)step, format_value(loss, l, sizeof l), format_value(norm, n, sizeof n),
        skipped ? " (the --skip-nonfinite budget is spent)" : "", kept);
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

/* "relative mixer (mem-len 64, compressive 1, c-mem-len 64, compression-rate 2, attn-dropout 0)": the
   fields the mixer reads */
static const char *describe_mixer(const mf_model_config *cfg) {
    static char buf[400];
    int n = snprintf(buf, sizeof buf, "%s mixer", S.m.mixer);
    mixer_fields_text(cfg, buf + n, sizeof buf - (size_t)n);
    return buf;
}

/* ---- validation: the loss (and the reconstruction loss of compressive models), in bits per
   character on a text, perplexity and bits per byte (with a tokenizer) on shards ---- */
typedef struct valid_result { double loss, ar, bytes, scored; int part; int64_t first, n; } valid_result;

/* part -1: the fixed protocol; else labml's part of PARTS */
static valid_result evaluate(mf_ctx *ctx, mf_model *m, data *d, int32_t *x, int32_t *y, int part) {
    valid_result r;
    r.part = part;
    r.first = part < 0 ? 0 : part * VALID_BATCHES / PARTS;
    r.n = part < 0 ? S.eval_batches : (part + 1) * VALID_BATCHES / PARTS - r.first;
    /* a validation batch is the rows of a step (every micro-batch, every rank), so that 2 ranks x
       --batch B, 1 x --grad-accum 2 x B and 1 x 2B validate on the same windows */
    if (part < 0)
        r.loss = validate(ctx, m, d->valid, S.m.seq_len, S.batch * S.grad_accum, S.eval_batches, x, y, &r.ar, d->token_bytes,
                          &r.bytes, &r.scored, &RANKS);
    else
        r.loss = validate_part(ctx, m, d->valid, S.m.seq_len, S.batch * S.grad_accum, r.first, r.n, part == 0, x, y, &r.ar,
                               d->token_bytes, &r.bytes, &r.scored, &RANKS);
    if (!mf_ok(ctx)) die("validation failed: %s", mf_error(ctx));
    if (isnan(r.loss)) die("validation failed: no validation batch could be read");
    return r;
}
static void print_validation(progress *pr, const data *d, const char *what, const valid_result *r) {
    progress_break(pr);
    if (!d->shards) printf("%s: valid loss %.6f (%.4f bits/char)", what, r->loss, r->loss / log(2.0));
    else {
        printf("%s: valid loss %.6f, perplexity %.3f", what, r->loss, exp(r->loss));
        if (d->token_bytes && r->bytes > 0) /* total nats / ln 2 / the bytes those tokens decode to */
            printf(", %.4f bits/byte", r->loss * r->scored / log(2.0) / r->bytes);
    }
    if (S.m.f.compressive) printf("  reconstruction loss %.6f", r->ar);
    if (r->part >= 0)
        printf("  [labml part %d/%d: validation batches %lld-%lld of %lld, %.0f tokens]", r->part + 1, PARTS,
               (long long)r->first + 1, (long long)(r->first + r->n), (long long)VALID_BATCHES, r->scored);
    printf("\n");
}

int main(int argc, char **argv) {
    const char *path = NULL;
    unsigned char given[N_OPTIONS] = {0};
    data d;
    mf_loader L;
    progress pr = progress_new();
#ifdef METAFORMER_MPI
    pr.tty = 0; /* see mpi_start */
#endif
    int n_prompt;
    char what[64];
    int protocol_changed = 0;

#ifdef METAFORMER_MPI
    mpi_start(&argc, &argv);
#endif
    model_choices();
    for (int i = 0; i < N_OPTIONS; i++) format_option(&OPTIONS[i], DEFAULTS[i], sizeof DEFAULTS[i]);
    argv = expand_preset(&argc, argv, 1);
    parse_options(argc, argv, OPTIONS, N_OPTIONS, given, &path, usage);
    if (list_mixers) { /* for scripts: the mixers of this build */
        for (int k = 0; k < mf_mixer_count(); k++)
            if (mf_mixer_compiled((mf_mixer_kind)k)) printf("%s\n", mf_mixer_name((mf_mixer_kind)k));
        return 0;
    }
    if (S.eval_only && !S.resume) die("--eval-only needs --resume CKPT: the checkpoint to evaluate");
    if (!path && !S.data && !S.valid) { usage(stderr); die("no text file given: train FILE [options] (or --data FILES --valid FILES)"); }
#ifdef EX_FUZZ /* the options' own checks, which a real run makes once the data is open */
    if (!S.resume) check_mixer_options(given);
#endif
    EX_PARSED(); /* the fuzz target of the command line stops here, before any file is read */
    if (S.greedy) S.temperature = 0;
    if (S.resume) {
        if (S.m.f.compressive) S.m.mixer = "relative"; /* what --compressive means, compared with the checkpoint */
        load_settings(given);
        keep_global_batch();
        if (!S.eval_only) protocol_changed = adopt_protocol(given); /* --eval-only measures as it is told */
    }
    if ((LABML = strcmp(S.valid_protocol, "labml") == 0)) {
        PARTS = S.eval_only ? 1 : S.inner_iterations;
        if (RANKS.world > 1) {
            AGREED = 1; /* every rank sees the same options */
            die("--valid-protocol labml runs in one process, not in %d ranks of build/train-mpi (its carried validation "
                "memories across ranks are untested); use --valid-protocol fixed here, and measure a checkpoint with "
                "build/train --resume CKPT --eval-only --valid-protocol labml", RANKS.world);
        }
        if (given[option_index("eval-every")] || given[option_index("eval-batches")])
            die("--valid-protocol labml validates after each 1/--inner-iterations of a pass over the training data, on the "
                "next 1/--inner-iterations of the validation stream: drop --%s (or use --valid-protocol fixed)",
                given[option_index("eval-every")] ? "eval-every" : "eval-batches");
        if (PARTS < 1)
            die("--valid-protocol labml needs --inner-iterations K: the validations per pass over the training data "
                "(labml's inner_iterations; its xl and compressive experiments use 25)");
    }
    open_data(&d, path);
    if (S.resume && !d.shards) check_resume_text(&d.text, path);
    check_mixer_options(given);
    if (S.resume && !S.save && !S.eval_only) S.save = S.resume; /* keep saving where the run came from */
    if (!S.resume && !given[option_index("warmup")] && S.warmup >= S.steps) S.warmup = S.steps / 10; /* short runs */
    if (S.weight_decay < 0) S.weight_decay = strcmp(S.optimizer, "adamw") == 0 ? 0.01f : 0.0f;
    if (!d.shards) text_need_windows(&d.text, path, S.m.seq_len);
    if (S.sample > 0 && !S.eval_only) free(prompt_ids(&d, &n_prompt)); /* a bad --prompt fails now, not after training */

    mf_model_config cfg = settings_config(&S.m, d.V);
    mf_optimizer opt = make_optimizer();
#ifdef METAFORMER_MPI
    mpi_new();
#endif
    mf_ctx *ctx = mf_ctx_new((uint64_t)S.seed);
    if (!ctx) die("out of memory");
    if (strcmp(S.device, "cuda") == 0 && mf_ctx_set_device(ctx, MF_DEVICE_CUDA) < 0) die("--device cuda: %s", mf_error(ctx));
    if (strcmp(S.device, "cpu") == 0 && S.resume && !given[option_index("precision")] && strcmp(S.precision, "tf32") == 0) {
        printf("note: the checkpoint trained in %s; this CPU computes in fp32\n", S.precision); /* its weights are fp32 */
        S.precision = "fp32";
    }
    set_precision(ctx, S.precision);
    mf_set_threads(ctx, S.threads);
    mf_set_keep_activation_grads(ctx, 0); /* the loop reads no activation gradient */
    mf_set_check_finite(ctx, S.check_finite);
    if (S.memory_limit > 0 && mf_ctx_set_memory_limit(ctx, (size_t)S.memory_limit << 20) < 0) die("--memory-limit: %s", mf_error(ctx));
    check_model_config(ctx, &cfg);
    mf_model *model = mf_model_new(ctx, &cfg);
    if (!model) die("%s", mf_error(ctx));
#ifdef METAFORMER_MPI
    mpi_attach(ctx);
#endif

    int T = S.m.seq_len;
    if ((int64_t)S.batch * S.grad_accum * T > INT_MAX)
        die("--batch %d x --grad-accum %d x --seq-len %d tokens per step is too many; lower one of them", S.batch, S.grad_accum, T);
    size_t step_ids = (size_t)S.batch * S.grad_accum * T; /* the loader's batch: every micro-batch of a step */
    int32_t *x = (int32_t *)malloc(step_ids * sizeof *x), *y = (int32_t *)malloc(step_ids * sizeof *y);
    if (!x || !y) die("out of memory");
    if (S.eval_only) { /* the checkpoint's weights on the validation data, nothing else */
        valid_result r;
        if (LABML) labml_open(&d);
        if (mf_load(ctx, S.resume, 1) < 0) die("cannot evaluate: %s", mf_error(ctx)); /* with the step count */
        r = evaluate(ctx, model, &d, x, y, LABML ? 0 : -1); /* labml: the whole stream, one part */
        snprintf(what, sizeof what, "eval of \"%s\" at step %lld", S.resume, (long long)mf_optimizer_steps(ctx));
        if (d.shards) print_validation(&pr, &d, what, &r);
        else {
            printf("%s: valid loss %.6f (%.4f bits/char), perplexity %.3f\n", what, r.loss, r.loss / log(2.0), exp(r.loss));
        }
        if (LABML)
            printf("(%.0f validation tokens: the whole stream in order, %lld batches of %d columns%s)\n", r.scored,
                   (long long)VALID_BATCHES, S.batch * S.grad_accum * RANKS.world,
                   has_memory(&cfg) ? ", memories carried from empty" : "");
        else
            printf("(%.0f validation tokens: --eval-batches %d of %d windows)\n", r.scored, S.eval_batches,
                   S.batch * S.grad_accum * RANKS.world);
#ifdef METAFORMER_MPI
        mf_dist_free(RANKS.dist);
#endif
        mf_model_free(model); mf_ctx_free(ctx); free(x); free(y); close_data(&d);
        return 0;
    }

    make_loader(&L, &d, has_memory(&cfg));
    apply_epochs(&L, &opt);
    if (LABML) labml_open(&d);
    int64_t step = S.resume ? resume_state(ctx, model, &L) : 0;
    if (protocol_changed && LABML && has_memory(&cfg)) { /* the checkpoint's validation memories are another protocol's */
        int slot = mf_model_memory_slot(model, 1);
        mf_model_reset_memory(model);
        mf_model_memory_slot(model, slot);
        printf("note: the checkpoint validated otherwise (not --valid-protocol labml --inner-iterations %d): the "
               "validation memories start empty\n", S.inner_iterations);
    }
    if (S.save && RANKS.rank == 0) check_writable(S.save); /* rank 0 writes the checkpoints */

    if (!d.shards)
        printf("data: \"%s\", %zu bytes, %d distinct characters, %lld train / %lld valid\n", path, d.text.len, d.text.V,
               (long long)d.text.n_train, (long long)d.text.n_valid);
    else
        printf("data: %d shard%s, %lld tokens train / %d shard%s, %lld valid; vocabulary %d (%s%s)\n",
               mf_tokens_files(d.train), mf_tokens_files(d.train) == 1 ? "" : "s", (long long)mf_tokens_count(d.train),
               mf_tokens_files(d.valid), mf_tokens_files(d.valid) == 1 ? "" : "s", (long long)mf_tokens_count(d.valid), d.V,
               d.tok ? "tokenizer " : "--vocab, no tokenizer", d.tok ? d.tok_spec : "");
    printf("model: %s, d_model %d, %d heads, %d layers, d_ff %d, T %d, %lld parameters\n", describe_mixer(&cfg), S.m.d_model,
           S.m.heads, S.m.layers, S.m.d_ff, T, (long long)mf_param_values(ctx, 0));
    if (mf_ctx_bf16_kernel(ctx))
        printf("precision: bf16 products on the CPU's %s kernel (%s)\n", mf_bf16_kernel_name(mf_ctx_bf16_kernel(ctx)),
               mf_cpu_features());
    printf("train: %s, %s schedule, lr %g, warmup %d, batch %d", S.optimizer, S.schedule, (double)S.lr, S.warmup, S.batch);
    if (S.grad_accum > 1) printf(" x %d accumulated micro-batches", S.grad_accum);
    if (RANKS.world > 1) printf(" x %d ranks", RANKS.world);
    if (S.grad_accum > 1 || RANKS.world > 1) printf(" (%d windows per step)", S.batch * S.grad_accum * RANKS.world);
    printf(", %d steps\n", S.steps);
    if (L.cfg.sequential)
        printf("loader: sequential, %d columns of %lld %s, %lld batches per pass; validation on memory slot 1\n",
               L.cfg.batch * RANKS.world, (long long)L.column, d.shards ? "tokens" : "characters", (long long)mf_loader_batches(&L));
    if (LABML)
        printf("validation: labml's protocol, after each of %d parts of the %lld training batches of a pass, the next "
               "of %d parts of the %lld validation batches%s\n", PARTS, (long long)mf_loader_batches(&L), PARTS,
               (long long)VALID_BATCHES, has_memory(&cfg) ? ", memories carried (emptied when a pass starts)" : "");
    if (S.resume) printf("resumed from \"%s\" at step %lld\n", S.resume, (long long)step);
    fflush(stdout);

    /* training: forward, loss, backward, clip, optimizer step, zero grad (docs/math.md §11.5) */
    int64_t last = S.steps, tokens = 0, run_steps = 0, saved_step = S.resume ? step : -1, labml_step = -1;
    int skipped = 0;
    double train_time = 0;
    if (S.stop_after > 0 && step + S.stop_after < last) last = step + S.stop_after;
    while (step < last) {
        double t0 = mf_time();
        int b, Tb, new_pass, part;
        float loss, aux, norm;
        int rc;
        if ((new_pass = mf_loader_next(&L, x, y, &b, &Tb)) < 0) die("training data: %s", L.error);
        if (new_pass && L.cfg.sequential) mf_model_reset_memory(model); /* a pass over the data starts with empty memories */
        part = LABML ? labml_part(&L) : -1;
        if ((rc = train_step(ctx, model, &opt, S.clip, x, y, b, S.batch, Tb, &loss, &aux, &norm, &RANKS)) < 0) {
            if (RANKS.dist) AGREED = 1; /* mf_dist_sync agreed on it: ctx holds "rank r: ..." */
            die("training step %lld failed: %s", (long long)step + 1, mf_error(ctx));
        }
        if (rc > 0) { /* a NaN / Inf loss or gradient norm: train_step applied no update */
            progress_break(&pr);
            if (skipped >= S.skip_nonfinite) stop_nonfinite(step + 1, loss, norm, skipped, saved_step);
            if (RANKS.nonfinite_ranks) printf("(the loss was not finite on %s)\n", nonfinite_ranks());
            skipped++;
            char lv[32], nv[32];
            printf("step %lld: loss %s, gradient norm %s: not finite, skipped (no update, gradients zeroed%s); "
                   "%d of --skip-nonfinite %d\n", (long long)step + 1, format_value(loss, lv, sizeof lv),
                   format_value(norm, nv, sizeof nv),
                   L.cfg.sequential ? ", memories emptied" : "", skipped, S.skip_nonfinite);
            fflush(stdout);
            if (L.cfg.sequential) mf_model_reset_memory(model); /* they may hold the non-finite values */
            train_time += mf_time() - t0;
            if (part >= 0) { /* the batch ended a part: its validation is due all the same */
                valid_result r = evaluate(ctx, model, &d, x, y, part);
                snprintf(what, sizeof what, "step %lld", (long long)step);
                print_validation(&pr, &d, what, &r);
                labml_step = step;
            }
            continue;
        }
        step++; run_steps++; tokens += (int64_t)b * Tb * RANKS.world;
        train_time += mf_time() - t0;

        /* a terminal: one line updated in place; else a line per log_every steps */
        if (progress_due(&pr, step == last, step % S.log_every == 0 || step == last || run_steps == 1)) {
            char eta[32], parts[80] = "";
            format_eta((double)(S.steps - step) * train_time / (double)run_steps, eta, sizeof eta);
            if (S.m.f.compressive) snprintf(parts, sizeof parts, "  (ce %.6f + ar %.6f)", (double)(loss - aux), (double)aux);
            progress_show(&pr, "step %lld/%d  loss %.6f%s  lr %.3e  %.0f tok/s  ETA %s", (long long)step, S.steps,
                          (double)loss, parts, (double)mf_schedule_lr(&opt.schedule, step), (double)tokens / train_time, eta);
        }
        if (part >= 0) { /* before the checkpoint, which keeps the validation memories */
            valid_result r = evaluate(ctx, model, &d, x, y, part);
            snprintf(what, sizeof what, "step %lld", (long long)step);
            print_validation(&pr, &d, what, &r);
            labml_step = step;
        }
        if (S.eval_every > 0 && step % S.eval_every == 0 && step < last) {
            valid_result r = evaluate(ctx, model, &d, x, y, -1);
            snprintf(what, sizeof what, "step %lld", (long long)step);
            print_validation(&pr, &d, what, &r);
        }
        if (S.save && ((S.save_every > 0 && step % S.save_every == 0) || step == last)) {
            save_checkpoint(ctx, model, &d, &L);
            saved_step = step;
        }
    }
    progress_break(&pr);
    if (run_steps)
        printf("trained %lld steps in %.1f s (%.0f tokens/s)%s%s\n", (long long)run_steps, train_time,
               (double)tokens / train_time, S.save ? ", saved " : "", S.save ? S.save : "");
    else printf("nothing to train: the checkpoint is at step %lld of --steps %d\n", (long long)step, S.steps);
    if (S.skip_nonfinite > 0)
        printf("skipped %d non-finite step%s (--skip-nonfinite %d)\n", skipped, skipped == 1 ? "" : "s", S.skip_nonfinite);

    if (!LABML) {
        valid_result r = evaluate(ctx, model, &d, x, y, -1);
        snprintf(what, sizeof what, "step %lld", (long long)step);
        print_validation(&pr, &d, what, &r);
    } else if (labml_step != step) { /* a validation here would move the protocol off labml's */
        int64_t n = mf_loader_batches(&L), done = pass_batches(&L), next = n / PARTS;
        for (int i = PARTS - 1; i >= 0 && (i + 1) * n / PARTS > done; i--) next = (i + 1) * n / PARTS - done;
        printf("no validation at step %lld: --valid-protocol labml validates at the end of each of the %d parts of a pass "
               "(the next %lld step%s on)\n", (long long)step, PARTS, (long long)next, next == 1 ? "" : "s");
    }
    if (S.sample > 0 && RANKS.rank == 0) {
        int32_t *prompt = prompt_ids(&d, &n_prompt);
        mf_sampler sampler = {S.temperature, S.top_k, (uint64_t)S.seed};
        print_sample(ctx, model, d.tok, prompt, n_prompt, S.sample, &sampler);
        free(prompt);
    }
#ifdef METAFORMER_MPI
    if (RANKS.dist && run_steps)
        printf("ranks: %d, %.3f s of the %.3f s of training waiting for the gradient averages (%.1f%%)%s\n", RANKS.world,
               RANKS.sync_seconds, train_time, 100 * RANKS.sync_seconds / train_time, no_overlap ? ", --no-overlap" : "");
    mf_dist_free(RANKS.dist);
#endif
    mf_model_free(model);
    mf_ctx_free(ctx);
    free(x); free(y); mf_loader_free(&L); close_data(&d);
    return 0;
}
