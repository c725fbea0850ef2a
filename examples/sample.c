/* sample.c - generate text from a checkpoint of build/train.

   build:  make build/sample
   run:    ./build/sample lm.safetensors                                   300 tokens after "It is"
           ./build/sample lm.safetensors --prompt "ROMEO:" --tokens 500 --temperature 0.7
           ./build/sample gpt.safetensors --tokenizer tok.bin --greedy         shards + a BPE tokenizer

   The model is rebuilt from the settings stored in the checkpoint (examples/common.h [model], the
   same code as train.c), its weights loaded, and the continuation sampled with temperature and
   top-k (or greedily). A checkpoint trained on a text file decodes with its stored characters; one
   trained on token shards needs its tokenizer: --tokenizer FILE, or the path stored in the
   checkpoint, and either must match the stored identity (its FNV-1a) and vocabulary size
   (docs/math.md §17.6). Without a tokenizer (trained with --vocab N) ids are printed. */
#define _POSIX_C_SOURCE 200809L /* isatty */
#define METAFORMER_IMPLEMENTATION
#include "../metaformer.h"
#define EX_PROG "sample"
#include "common.h"

static struct {
    const char *prompt, *tokenizer, *precision;
    int tokens, top_k, greedy, seed, threads;
    float temperature;
} A = {NULL, NULL, "fp32", 300, 200, 0, 1, 0, 0.8f};

static const option OPTIONS[] = {
    {"prompt", OPT_TEXT, &A.prompt, RUN_ONLY, 0, NULL, "text to continue [It is]"},
    {"tokenizer", OPT_TEXT, &A.tokenizer, RUN_ONLY, 0, NULL, "the tokenizer of a shard-trained checkpoint (default: the stored path)"},
    {"tokens", OPT_INT, &A.tokens, RUN_ONLY, 1, NULL, "tokens to generate"},
    {"temperature", OPT_FLOAT, &A.temperature, RUN_ONLY, 0, NULL, "sampling temperature (0 = greedy)"},
    {"top-k", OPT_INT, &A.top_k, RUN_ONLY, 0, NULL, "sample among the k most likely tokens (0 = all)"},
    {"greedy", OPT_FLAG, &A.greedy, RUN_ONLY, 0, NULL, "the most likely token each time (--temperature 0)"},
    {"seed", OPT_INT, &A.seed, RUN_ONLY, 0, NULL, "seed of the sampling"},
    {"threads", OPT_INT, &A.threads, RUN_ONLY, 0, NULL, "CPU threads (0 = all)"},
    {"precision", OPT_TEXT, &A.precision, RUN_ONLY, 0, "fp32|bf16", PRECISION_HELP},
};
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))

/* the model settings as stored in the checkpoint ("train.<option>") */
static model_settings M = MODEL_SETTINGS_DEFAULT;
static const option STORED[] = {MODEL_OPTIONS(M, )};
#define N_STORED ((int)(sizeof STORED / sizeof STORED[0]))

static void usage(FILE *f) {
    fprintf(f, "usage: sample CKPT [options]   generate text from a checkpoint of build/train\n\n");
    print_options(f, OPTIONS, N_OPTIONS);
}

static void load_model_settings(const char *ckpt) {
    static char defaults[N_STORED][64], stored[N_STORED][64];
    for (int i = 0; i < N_STORED; i++) format_option(&STORED[i], defaults[i], sizeof defaults[i]);
    read_stored_options(ckpt, STORED, N_STORED, (const char (*)[64])defaults, stored);
    for (int i = 0; i < N_STORED; i++)
        if (set_option(&STORED[i], stored[i])) die("checkpoint \"%s\" has a bad train.%s \"%s\"", ckpt, STORED[i].name, stored[i]);
}

/* the checkpoint's tokenizer (NULL: ids only) and vocabulary size, checked against what it stores */
static mf_tokenizer *open_tokenizer(const char *ckpt, int *V) {
    char buf[4096], kind[16];
    static char stored[4096];
    mf_tokenizer *tok;
    if (mf_load_meta(ckpt, "train.data", kind, sizeof kind) < 0) { /* a text file: its characters */
        if (A.tokenizer) die("checkpoint \"%s\" was trained on a text file: it decodes with its own characters; drop --tokenizer", ckpt);
        if (mf_load_meta(ckpt, "train.vocab", buf, sizeof buf) < 0) die("checkpoint \"%s\" has no train.vocab", ckpt);
        tok = tokenizer_from_vocab_hex(buf, ckpt);
        *V = mf_tokenizer_vocab_size(tok);
        return tok;
    }
    if (mf_load_meta(ckpt, "train.vocab_size", buf, sizeof buf) < 0 || (*V = atoi(buf)) < 1)
        die("checkpoint \"%s\" has no valid train.vocab_size", ckpt);
    if (mf_load_meta(ckpt, "train.tokenizer", stored, sizeof stored) < 0) stored[0] = '\0';
    if (!A.tokenizer && !stored[0]) return NULL; /* trained with --vocab N: ids */
    if (!A.tokenizer) {
        FILE *f = strcmp(stored, "bytes") == 0 ? NULL : fopen(stored, "rb");
        if (strcmp(stored, "bytes") != 0 && !f)
            die("checkpoint \"%s\" was trained with the tokenizer \"%s\", which cannot be opened here; give it with "
                "--tokenizer FILE", ckpt, stored);
        if (f) fclose(f);
        A.tokenizer = stored;
    }
    tok = tokenizer_open(A.tokenizer);
    if (mf_tokenizer_vocab_size(tok) != *V)
        die("the tokenizer \"%s\" has %d ids but checkpoint \"%s\" was trained with %d: use the tokenizer it was "
            "trained with (\"%s\")", A.tokenizer, mf_tokenizer_vocab_size(tok), ckpt, *V, stored);
    if (mf_load_meta(ckpt, "train.tokenizer_fnv1a", buf, sizeof buf) >= 0 &&
        strtoull(buf, NULL, 16) != tokenizer_identity(A.tokenizer))
        die("the tokenizer \"%s\" is not the one checkpoint \"%s\" was trained with (\"%s\": its FNV-1a differs): "
            "the ids would mean other text; use that tokenizer", A.tokenizer, ckpt, stored);
    return tok;
}

int main(int argc, char **argv) {
    const char *ckpt = NULL, *prompt;
    unsigned char given[N_OPTIONS] = {0};
    int V, n_prompt;
    int32_t *ids;
    mf_tokenizer *tok;

    model_choices();
    parse_options(argc, argv, OPTIONS, N_OPTIONS, given, &ckpt, usage);
    if (!ckpt) { usage(stderr); die("no checkpoint given: sample CKPT [options]"); }
    if (A.greedy) A.temperature = 0;
    EX_PARSED(); /* the fuzz target of the command line stops here, before any file is read */
    check_train_checkpoint(ckpt, "cannot sample");
    load_model_settings(ckpt);
    tok = open_tokenizer(ckpt, &V);

    /* the prompt: encoded by the tokenizer (a character vocabulary must hold every byte) */
    prompt = A.prompt ? A.prompt : "It is";
    if (!*prompt) die("--prompt is empty; give at least one character");
    if (!tok) {
        if (A.prompt) die("checkpoint \"%s\" has no tokenizer (trained with --vocab): a text prompt cannot be encoded", ckpt);
        if (!(ids = (int32_t *)malloc(sizeof *ids))) die("out of memory");
        ids[0] = 0; /* no text to start from: id 0 */
        n_prompt = 1;
    } else {
        int64_t k = mf_tokenizer_encode(tok, prompt, strlen(prompt), NULL, 0);
        if (k < 0) die("--prompt \"%s\": %s", prompt, mf_tokenizer_error(tok));
        if (k < 1) die("--prompt \"%s\" encodes to no token", prompt);
        if (!(ids = (int32_t *)malloc((size_t)k * sizeof *ids))) die("out of memory");
        mf_tokenizer_encode(tok, prompt, strlen(prompt), ids, k);
        n_prompt = (int)k;
    }

    mf_model_config cfg = settings_config(&M, V);
    mf_ctx *ctx = mf_ctx_new((uint64_t)A.seed);
    if (!ctx) die("out of memory");
    mf_set_threads(ctx, A.threads);
    set_precision(ctx, A.precision);
    check_model_config(ctx, &cfg);
    mf_model *model = mf_model_new(ctx, &cfg);
    if (!model) die("%s", mf_error(ctx));
    if (mf_load(ctx, ckpt, 0) < 0) die("cannot load the weights: %s", mf_error(ctx));
    mf_set_training(ctx, 0);
    mf_sampler sampler = {A.temperature, A.top_k, (uint64_t)A.seed};
    print_sample(ctx, model, tok, ids, n_prompt, A.tokens, &sampler);
    free(ids);
    mf_tokenizer_free(tok);
    mf_model_free(model);
    mf_ctx_free(ctx);
    return 0;
}
