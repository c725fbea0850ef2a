/* study_text.c - the NLP MetaFormer seed's next-token study (`make study DATA=FILE [GPT2=DIR]`).
   build: make build/study_text      run: ./build/study_text --data FILE [--gpt2 DIR] [--out DIR] [--quick]

   The seed trained its transformer and its metric-tensor network on the same text and compared the
   loss curves ("not much difference"), the metric heads and samples from "The meaning of life is".
   This trains sdpa (the seed's transformer), metric (M = S S^T, --metric-form softmax_tril: the
   seed's metric-tensor model, docs/math.md §9.10), quadratic, pool and identity on the same tokens,
   with the same budget and the same seeds, in the seed's next-token configuration (the "metaformer"
   preset of examples/common.h: learned positions, GELU, no sdpa biases, AdamW (0.95, 0.99) with
   weight decay 0.01, cosine schedule with warm-up, clipping at 1, no dropout) at a size that trains
   in minutes on two cores. Tokens: GPT-2's BPE with --gpt2 DIR (encoder.json + vocab.bpe), a
   tokenizer file with --tokenizer, else the text's characters; the first 90% of the tokens train,
   the rest validates. --seeds N runs of every mixer (--jobs of them at once): each number as mean ±
   sd with the 95% interval of the mean, Welch's test against sdpa. Writes DIR/report.md, the loss
   curves (DIR/loss.svg: the mean of the seeds with a band of ± one sd), the metric heads of the
   first seed's metric model (DIR/metric_heads.svg, one panel per layer and head; at initialisation:
   DIR/metric_heads_init.svg, and how far training moved them next to two seeds' initialisations),
   each with its gnuplot data and script (and PNG where gnuplot is installed), and a sample from
   --prompt per mixer.
   --quick: a tiny model and a few steps, for the test (tests/test_study_text.sh). */
#define _POSIX_C_SOURCE 200809L /* isatty, in common.h */
#define METAFORMER_IMPLEMENTATION
#include "../metaformer.h"
#define EX_PROG "study_text"
#include "common.h"
#include "svg.h"
#include <sys/stat.h>

enum { N_MIXERS = 5, MAX_SEEDS = 100, MAX_STEPS = 1000000, CURVE_POINTS = 100 };
static const mf_mixer_kind MIXERS_RUN[N_MIXERS] = {MF_MIXER_SDPA, MF_MIXER_METRIC, MF_MIXER_QUADRATIC, MF_MIXER_POOL,
                                                   MF_MIXER_IDENTITY};

static struct {
    const char *data, *gpt2, *tokenizer, *out, *prompt, *metric_form;
    int steps, batch, seq_len, d_model, heads, layers, d_ff, seed, seeds, jobs, threads, eval_batches, sample, greedy;
    int warmup, quick;
    float lr, temperature;
} S = {NULL, NULL, NULL, "bench/results/study/text", "The meaning of life is", "softmax_tril", 1500, 16, 64, 64, 4, 2, 256,
       1, 3, 0, 0, 20, 300, 0, -1, 0, 2e-3f, 0.8f};
static char METRIC_FORMS[64];

static const option OPTS[] = {
    {"data", OPT_TEXT, &S.data, RUN_ONLY, 0, NULL, "the text to train on (required; any text, e.g. tinyshakespeare.txt)"},
    {"gpt2", OPT_TEXT, &S.gpt2, RUN_ONLY, 0, NULL, "GPT-2's BPE: the directory of encoder.json and vocab.bpe (the seed's tokens)"},
    {"tokenizer", OPT_TEXT, &S.tokenizer, RUN_ONLY, 0, NULL, "a tokenizer file (build/tokenize; \"bytes\": the 256 byte ids); "
     "without it or --gpt2: the text's characters"},
    {"steps", OPT_INT, &S.steps, RUN_ONLY, 1, NULL, "optimizer steps of every run"},
    {"batch", OPT_INT, &S.batch, RUN_ONLY, 1, NULL, "sequences per step"},
    {"seq-len", OPT_INT, &S.seq_len, RUN_ONLY, 2, NULL, "context length T"},
    {"d-model", OPT_INT, &S.d_model, RUN_ONLY, 1, NULL, "model width"},
    {"heads", OPT_INT, &S.heads, RUN_ONLY, 1, NULL, "heads of sdpa, metric and quadratic (must divide --d-model)"},
    {"layers", OPT_INT, &S.layers, RUN_ONLY, 1, NULL, "blocks"},
    {"d-ff", OPT_INT, &S.d_ff, RUN_ONLY, 1, NULL, "FFN hidden width"},
    {"metric-form", OPT_TEXT, &S.metric_form, RUN_ONLY, 0, METRIC_FORMS, "the metric mixer's form of M (docs/math.md §9.10; "
     "softmax_tril: the seed's S S^T)"},
    {"lr", OPT_FLOAT, &S.lr, RUN_ONLY, 0, NULL, "peak learning rate (the seed's 1e-3 is for its 6-layer model; cosine to lr/10)"},
    {"warmup", OPT_INT, &S.warmup, RUN_ONLY, 0, NULL, "warm-up steps (default: steps/10, at most 100, the seed's)"},
    {"eval-batches", OPT_INT, &S.eval_batches, RUN_ONLY, 1, NULL, "validation batches of --batch windows, spread over the split"},
    {"seed", OPT_INT, &S.seed, RUN_ONLY, 0, NULL, "the first seed (initialisation, batches and sampling)"},
    {"seeds", OPT_INT, &S.seeds, RUN_ONLY, 1, NULL, "runs of every mixer, seeds --seed .. --seed + N - 1 (at most 100)"},
    {"jobs", OPT_INT, &S.jobs, RUN_ONLY, 0, NULL, JOBS_HELP},
    {"threads", OPT_INT, &S.threads, RUN_ONLY, 0, NULL, "CPU threads of one job (0: the cores, shared out among the jobs)"},
    {"out", OPT_TEXT, &S.out, RUN_ONLY, 0, NULL, "directory of report.md and the figures (created)"},
    {"prompt", OPT_TEXT, &S.prompt, RUN_ONLY, 0, NULL, "the samples' prompt"},
    {"sample", OPT_INT, &S.sample, RUN_ONLY, 0, NULL, "tokens sampled after the prompt by each mixer's first-seed model"},
    {"temperature", OPT_FLOAT, &S.temperature, RUN_ONLY, 0, NULL, "sampling temperature (the sampler's seed is the run's)"},
    {"greedy", OPT_FLAG, &S.greedy, RUN_ONLY, 0, NULL, "sample greedily (argmax) instead"},
    {"quick", OPT_FLAG, &S.quick, RUN_ONLY, 0, NULL, "a tiny model and 30 steps (a test of the outputs, not a study)"},
};
#define N_OPTS ((int)(sizeof OPTS / sizeof OPTS[0]))

static void usage(FILE *f) {
    fprintf(f, "usage: study_text --data FILE [options]\nThe NLP MetaFormer next-token study: sdpa, metric, quadratic, pool "
               "and identity on the same tokens; report.md, loss curves, metric heads, samples.\n");
    print_options(f, OPTS, N_OPTS);
}

/* ---- the data -------------------------------------------------------------------------------------- */
static struct {
    mf_tokenizer *tok;
    const char *kind;        /* "characters", "GPT-2 BPE", "tokenizer FILE" */
    int32_t *ids;            /* every token of the text */
    int64_t n, n_train;      /* tokens, of which the first n_train train */
    int V;
    int *token_bytes;        /* byte length of each id: bits per byte */
    int32_t *prompt;         /* the prompt's ids */
    int n_prompt;
    char skipped[256];       /* the prompt's characters outside a character vocabulary */
    size_t text_bytes;
} D;

static void load_data(void) {
    size_t len;
    unsigned char *bytes;
    char path[2][4096];
    if (S.gpt2 && S.tokenizer) die("--gpt2 and --tokenizer both given; give one of them (or neither: characters)");
    bytes = read_file(S.data, &len);
    D.text_bytes = len;
    if (S.gpt2) {
        snprintf(path[0], sizeof path[0], "%s/encoder.json", S.gpt2);
        snprintf(path[1], sizeof path[1], "%s/vocab.bpe", S.gpt2);
        D.tok = mf_tokenizer_gpt2(path[0], path[1]);
        if (!D.tok) die("out of memory");
        if (mf_tokenizer_error(D.tok)) die("--gpt2 \"%s\": %s", S.gpt2, mf_tokenizer_error(D.tok));
        D.kind = "GPT-2 BPE";
    } else if (S.tokenizer) {
        D.tok = tokenizer_open(S.tokenizer);
        D.kind = "a tokenizer file";
    } else {
        text_data t;
        char why[8192];
        memset(&t, 0, sizeof t);
        t.bytes = bytes; t.len = len;
        if (text_parse(&t, S.data, why, sizeof why)) die("%s", why); /* empty or binary: named */
        free(t.ids);
        D.tok = mf_tokenizer_chars(bytes, len);
        if (!D.tok || mf_tokenizer_error(D.tok)) die("%s", D.tok ? mf_tokenizer_error(D.tok) : "out of memory");
        D.kind = "characters";
        /* the prompt's characters outside the text's vocabulary cannot be fed: skipped, and the report says so */
        {
            size_t at = 0, k = 0, n = strlen(S.prompt);
            char *kept = (char *)malloc(n + 1);
            if (!kept) die("out of memory");
            for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char)S.prompt[i];
                if (t.present[c]) kept[k++] = (char)c;
                else if (at + 1 < sizeof D.skipped && !strchr(D.skipped, c)) D.skipped[at++] = (char)c;
            }
            kept[k] = 0;
            if (k == 0) die("none of the characters of --prompt \"%s\" occurs in \"%s\"; give a prompt in the text's characters",
                            S.prompt, S.data);
            S.prompt = kept;
            if (at) printf("note: the prompt's characters \"%s\" do not occur in \"%s\": left out of the prompt (\"%s\")\n",
                           D.skipped, S.data, S.prompt);
        }
    }
    D.V = mf_tokenizer_vocab_size(D.tok);
    D.n = mf_tokenizer_encode(D.tok, bytes, len, NULL, 0);
    if (D.n < 0) die("cannot tokenize \"%s\": %s", S.data, mf_tokenizer_error(D.tok));
    if (D.n == 0) die("\"%s\" is empty; give a text file", S.data);
    if (!(D.ids = (int32_t *)malloc((size_t)D.n * sizeof *D.ids))) die("out of memory");
    if (mf_tokenizer_encode(D.tok, bytes, len, D.ids, D.n) != D.n) die("cannot tokenize \"%s\": %s", S.data, mf_tokenizer_error(D.tok));
    free(bytes);
    D.n_train = D.n * 9 / 10;
    if (D.n_train < S.seq_len + 1 || D.n - D.n_train < S.seq_len + 1)
        die("\"%s\" is too short: %lld tokens (%s), but --seq-len %d needs a window of %d tokens in both the 90%% training "
            "and the 10%% validation part; use a longer text or a smaller --seq-len", S.data, (long long)D.n, D.kind, S.seq_len,
            S.seq_len + 1);
    D.token_bytes = token_byte_lengths(D.tok);
    {
        int64_t n = mf_tokenizer_encode(D.tok, S.prompt, strlen(S.prompt), NULL, 0);
        if (n < 1) die("cannot tokenize --prompt \"%s\": %s", S.prompt, n < 0 ? mf_tokenizer_error(D.tok) : "it is empty");
        if (n > S.seq_len) die("--prompt is %lld tokens, longer than --seq-len %d; give a shorter prompt", (long long)n, S.seq_len);
        if (!(D.prompt = (int32_t *)malloc((size_t)n * sizeof *D.prompt))) die("out of memory");
        D.n_prompt = (int)mf_tokenizer_encode(D.tok, S.prompt, strlen(S.prompt), D.prompt, n);
    }
}

/* ---- one run: a mixer on a seed ---------------------------------------------------------------------- */
typedef struct run {
    double *loss;          /* per step (NaN: a non-finite step, skipped) */
    double train, valid, bpb, secs;
    int64_t params;
    int32_t *sample;       /* first seed: the prompt and the sampled ids */
    float *heads, *heads0; /* metric: [layers][heads][dk][dk] after training, and at initialisation */
} run;
static run *RUNS; /* [seed][mixer] */

static mf_model_config text_config(mf_mixer_kind mixer) {
    mf_model_config c = mf_model_config_default();
    c.vocab = D.V; c.d_model = S.d_model; c.n_heads = S.heads; c.n_layers = S.layers; c.d_ff = S.d_ff; c.max_seq = S.seq_len;
    c.mixer = mixer; c.pos = MF_POS_LEARNED; c.ffn_act = MF_ACT_GELU; c.dropout = 0;
    if (mixer == MF_MIXER_SDPA) c.attn_bias = 0; /* the seed's transformer: no q, k, v, out biases */
    if (mixer == MF_MIXER_METRIC) c.metric_form = (mf_metric_form)mf_metric_form_from_name(S.metric_form);
    return c;
}

/* the training loss of a run's last tenth of steps (at least one): the "final" loss, less noisy than one batch */
static double final_train_loss(const double *loss, int steps) {
    int n = steps / 10 > 0 ? steps / 10 : 1, k = 0;
    double s = 0;
    for (int i = steps - n; i < steps; i++) if (isfinite(loss[i])) { s += loss[i]; k++; }
    return k ? s / k : NAN;
}

/* the metric model's M_h of every layer and head, [layers][heads][dk][dk] (malloc'd) */
static float *metric_heads(mf_model *m) {
    int dk = S.d_model / S.heads;
    size_t per = (size_t)S.heads * dk * dk;
    float *h = (float *)malloc((size_t)S.layers * per * sizeof(float));
    if (!h) die("out of memory");
    for (int l = 0; l < S.layers; l++)
        if (mf_model_attention_form(m, l, MF_ATTN_FORM_HEAD, h + l * per) < 0) die("metric heads: %s", mf_error(mf_model_ctx(m)));
    return h;
}

static void train_run(int j, int k, int threads) {
    run *r = &RUNS[j * N_MIXERS + k];
    int seed = S.seed + j, B = S.batch, T = S.seq_len;
    mf_model_config cfg = text_config(MIXERS_RUN[k]);
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAMW, S.lr);
    mf_ctx *ctx = mf_ctx_new((uint64_t)seed);
    mf_tokens *train = mf_tokens_from_ids(D.ids, D.n_train), *valid = mf_tokens_from_ids(D.ids + D.n_train, D.n - D.n_train);
    int32_t *x = (int32_t *)malloc((size_t)B * T * sizeof *x), *y = (int32_t *)malloc((size_t)B * T * sizeof *y);
    mf_loader L;
    mf_model *m;
    double t0 = mf_time(), bytes = 0, scored = 0;
    if (!ctx || !x || !y || !train || !valid) die("out of memory");
    if (mf_tokens_error(train)) die("%s", mf_tokens_error(train));
    mf_set_threads(ctx, threads);
    mf_set_keep_activation_grads(ctx, 0);
    check_model_config(ctx, &cfg);
    if (!(m = mf_model_new(ctx, &cfg))) die("%s: %s", mf_mixer_name(cfg.mixer), mf_error(ctx));
    r->params = mf_param_values(ctx, 1);
    if (MIXERS_RUN[k] == MF_MIXER_METRIC) r->heads0 = metric_heads(m);
    opt.beta1 = 0.95f; opt.beta2 = 0.99f; opt.weight_decay = 0.01f; /* the seed's AdamW */
    opt.schedule.kind = MF_SCHED_COSINE; opt.schedule.lr = S.lr; opt.schedule.min_lr = S.lr / 10;
    opt.schedule.warmup = S.warmup; opt.schedule.total_steps = S.steps;
    /* the same seed draws the same batches for every mixer */
    loader_open(&L, train, 0, B, T, (uint64_t)seed, 0, 1, "training");
    if (!(r->loss = (double *)malloc((size_t)S.steps * sizeof *r->loss))) die("out of memory");
    for (int step = 0; step < S.steps; step++) {
        int rows, Tb, rc;
        float loss, ar;
        if (mf_loader_next(&L, x, y, &rows, &Tb) < 0) die("the training data: %s", L.error);
        rc = train_step(ctx, m, &opt, 1.0f, x, y, rows, rows, Tb, &loss, &ar, NULL, NULL);
        if (rc < 0) die("%s, seed %d, step %d: %s", mf_mixer_name(cfg.mixer), seed, step + 1, mf_error(ctx));
        r->loss[step] = rc == 0 ? loss : NAN;
    }
    r->train = final_train_loss(r->loss, S.steps);
    r->valid = validate(ctx, m, valid, T, B, S.eval_batches, x, y, NULL, D.token_bytes, &bytes, &scored, NULL);
    if (!isfinite(r->valid) && !mf_ok(ctx)) die("%s, seed %d, validation: %s", mf_mixer_name(cfg.mixer), seed, mf_error(ctx));
    r->bpb = bytes > 0 ? r->valid * scored / log(2.0) / bytes : NAN;
    if (j == 0) { /* the first seed's models give the sample and the metric heads */
        mf_sampler s;
        s.temperature = S.greedy ? 0.0f : S.temperature; s.top_k = 0; s.seed = (uint64_t)seed;
        if (!(r->sample = (int32_t *)malloc((size_t)(D.n_prompt + S.sample) * sizeof *r->sample))) die("out of memory");
        memcpy(r->sample, D.prompt, (size_t)D.n_prompt * sizeof *D.prompt);
        if (S.sample > 0 && mf_model_generate(m, D.prompt, D.n_prompt, S.sample, &s, r->sample + D.n_prompt) < 0)
            die("%s: sampling failed: %s", mf_mixer_name(cfg.mixer), mf_error(ctx));
    }
    if (MIXERS_RUN[k] == MF_MIXER_METRIC) r->heads = metric_heads(m);
    r->secs = mf_time() - t0;
    printf("%-9s seed %d  train loss %.4f  validation loss %.4f  (%.1f s)\n", mf_mixer_name(cfg.mixer), seed, r->train,
           r->valid, r->secs);
    fflush(stdout);
    mf_loader_free(&L);
    mf_model_free(m);
    mf_ctx_free(ctx);
    mf_tokens_close(train);
    mf_tokens_close(valid);
    free(x); free(y);
}

static void train_seed(int j, void *user) {
    int threads = *(const int *)user;
    for (int k = 0; k < N_MIXERS; k++) train_run(j, k, threads);
}

/* ---- figures and report ------------------------------------------------------------------------------ */
static void path_in(char *buf, size_t size, const char *name) {
    int n = snprintf(buf, size, "%s/%s", S.out, name);
    if (n < 0 || (size_t)n >= size) die("the path \"%s/%s\" is too long", S.out, name);
}
static int n_png; /* the figures gnuplot drew */

/* the loss curves: per mixer the mean over the seeds of every `every` steps, a band of ± one sd */
static void loss_figure(void) {
    int every = S.steps / CURVE_POINTS > 0 ? S.steps / CURVE_POINTS : 1, n = S.steps / every;
    svg_series s[N_MIXERS];
    double *buf = (double *)malloc(sizeof(double) * (size_t)N_MIXERS * 4 * n), *v = (double *)malloc(sizeof(double) * S.seeds);
    char stem[4096], svg[4096], title[160];
    if (!buf || !v) die("out of memory");
    for (int k = 0; k < N_MIXERS; k++) {
        double *x = buf + (size_t)k * 4 * n, *y = x + n, *lo = y + n, *hi = lo + n;
        for (int p = 0; p < n; p++) {
            for (int j = 0; j < S.seeds; j++) {
                double sum = 0;
                int c = 0;
                for (int q = p * every; q < (p + 1) * every; q++) if (isfinite(RUNS[j * N_MIXERS + k].loss[q])) { sum += RUNS[j * N_MIXERS + k].loss[q]; c++; }
                v[j] = c ? sum / c : NAN;
            }
            stat_summary st = summarize(v, S.seeds);
            x[p] = (p + 1.0) * every; y[p] = st.mean;
            lo[p] = isfinite(st.sd) ? st.mean - st.sd : st.mean; hi[p] = isfinite(st.sd) ? st.mean + st.sd : st.mean;
        }
        s[k].name = mf_mixer_name(MIXERS_RUN[k]); s[k].x = x; s[k].y = y; s[k].n = n; s[k].lo = lo; s[k].hi = hi;
    }
    snprintf(title, sizeof title, "Training loss, mean of %d seed%s (band: ± one sd; each point the mean of %d step%s)", S.seeds,
             S.seeds > 1 ? "s" : "", every, every > 1 ? "s" : "");
    path_in(stem, sizeof stem, "loss");
    svg_line_chart(stem_path(svg, sizeof svg, stem, ".svg"), title, "step", "cross-entropy (nats per token)", s, N_MIXERS, NULL, NULL);
    n_png += png_line_chart(stem, title, "step", "cross-entropy (nats per token)", s, N_MIXERS) > 0;
    free(buf); free(v);
}

/* the first seed's metric heads: M_h of every layer, one panel per head, a row per layer */
static void heads_figure(const float *heads, int init) {
    int dk = S.d_model / S.heads, n = S.layers * S.heads;
    svg_matrix *m = (svg_matrix *)calloc((size_t)n, sizeof *m);
    char stem[4096], svg[4096], title[200];
    if (!m) die("out of memory");
    for (int l = 0; l < S.layers; l++)
        for (int h = 0; h < S.heads; h++) {
            svg_matrix *q = &m[l * S.heads + h];
            snprintf(q->title, sizeof q->title, "layer %d head %d", l, h);
            q->rows = q->cols = dk;
            q->v = heads + ((size_t)l * S.heads + h) * dk * dk;
        }
    snprintf(title, sizeof title, "The metric heads M_h of the metric model %s (%s form, seed %d)",
             init ? "at initialisation" : "after training", S.metric_form, S.seed);
    path_in(stem, sizeof stem, init ? "metric_heads_init" : "metric_heads");
    svg_heatmaps(stem_path(svg, sizeof svg, stem, ".svg"), title,
                 "score = p M_h p'^T / sqrt(dk), p = Wp_h x; each panel on its own scale (red +, blue -)", m, n, S.heads);
    n_png += png_heatmaps(stem, title, "score = p M_h p'^T / sqrt(dk), p = Wp_h x; each panel on its own scale (red +, blue -)",
                          m, n, S.heads) > 0;
    free(m);
}

/* the eigenvalues' signs of a head's M (symmetric): how many are positive, negative, about 0 */
static void eigen_counts(const float *a, int n, int *pos, int *neg) {
    double *w = (double *)malloc(sizeof(double) * (size_t)n * n), *ev = (double *)malloc(sizeof(double) * (size_t)n), mx = 0;
    if (!w || !ev) die("out of memory");
    for (int i = 0; i < n * n; i++) w[i] = 0.5 * ((double)a[i] + a[(i % n) * n + i / n]);
    sym_eigenvalues(w, n, ev);
    for (int i = 0; i < n; i++) if (fabs(ev[i]) > mx) mx = fabs(ev[i]);
    *pos = *neg = 0;
    for (int i = 0; i < n; i++) {
        if (fabs(ev[i]) <= 1e-3 * mx) continue;
        if (ev[i] > 0) (*pos)++; else (*neg)++;
    }
    free(w); free(ev);
}

/* ||a - b|| / ||a|| (Frobenius) of two n x n forms */
static double rel_distance(const float *a, const float *b, int n) {
    double d = 0, na = 0;
    for (int i = 0; i < n * n; i++) { d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]); na += (double)a[i] * a[i]; }
    return na > 0 ? sqrt(d / na) : NAN;
}
/* the heads' distance from another seed's: per head the nearest head of the same layer of seed j2
   (heads are interchangeable), averaged over the layer's heads */
static double seed_distance(const float *h1, const float *h2, int l, int dk) {
    double s = 0;
    for (int h = 0; h < S.heads; h++) {
        double best = INFINITY;
        for (int g = 0; g < S.heads; g++) {
            double d = rel_distance(h1 + ((size_t)l * S.heads + h) * dk * dk, h2 + ((size_t)l * S.heads + g) * dk * dk, dk);
            if (d < best) best = d;
        }
        s += best / S.heads;
    }
    return s;
}
/* What training changed in the metric heads, next to a random control: per layer, how far each
   seed's trained M_h moved from its own initialisation, against how far apart two seeds'
   initialisations already are (the nearest head of the other seed) - a picture that training moved
   less than that is mostly the initialisation's and the form's */
static void heads_change(FILE *md) {
    int dk = S.d_model / S.heads, pairs = S.seeds * (S.seeds - 1);
    double *v = (double *)malloc(sizeof(double) * (size_t)(pairs > S.seeds ? pairs : S.seeds) + sizeof(double));
    if (!v) die("out of memory");
    fprintf(md, "What training changed, over the %d seed%s: per layer, the distance of each trained M_h from its own "
                "initialisation, ||M_h - M_h(init)|| / ||M_h(init)|| (Frobenius, the mean over the heads), next to the random "
                "control - how far two seeds' initial heads already are from each other (each head against the nearest head "
                "of the other seed's layer, every ordered pair of seeds) - and the same between the seeds' trained heads. "
                "Mean ± sd.\n\n| layer | trained vs its initialisation | control: two initialisations | two trained models |\n"
                "|---|---|---|---|\n", S.seeds, S.seeds > 1 ? "s" : "");
    for (int l = 0; l < S.layers; l++) {
        stat_summary moved, init_pair, trained_pair;
        int n = 0;
        for (int j = 0; j < S.seeds; j++) {
            const run *r = &RUNS[j * N_MIXERS + 1];
            double s = 0;
            for (int h = 0; h < S.heads; h++)
                s += rel_distance(r->heads0 + ((size_t)l * S.heads + h) * dk * dk, r->heads + ((size_t)l * S.heads + h) * dk * dk, dk);
            v[j] = s / S.heads;
        }
        moved = summarize(v, S.seeds);
        for (int a = 0; a < S.seeds; a++)
            for (int b = 0; b < S.seeds; b++)
                if (a != b) v[n++] = seed_distance(RUNS[a * N_MIXERS + 1].heads0, RUNS[b * N_MIXERS + 1].heads0, l, dk);
        init_pair = summarize(v, n);
        n = 0;
        for (int a = 0; a < S.seeds; a++)
            for (int b = 0; b < S.seeds; b++)
                if (a != b) v[n++] = seed_distance(RUNS[a * N_MIXERS + 1].heads, RUNS[b * N_MIXERS + 1].heads, l, dk);
        trained_pair = summarize(v, n);
        fprintf(md, "| %d | %.3f ± %.3f |", l, moved.mean, isfinite(moved.sd) ? moved.sd : 0.0);
        if (n) fprintf(md, " %.3f ± %.3f | %.3f ± %.3f |\n", init_pair.mean, isfinite(init_pair.sd) ? init_pair.sd : 0.0,
                       trained_pair.mean, isfinite(trained_pair.sd) ? trained_pair.sd : 0.0);
        else fprintf(md, " - (one seed) | - |\n");
    }
    fprintf(md, "\nThe first seed's heads at initialisation, drawn as above:\n\n");
    md_figure(md, S.out, "metric heads at initialisation", "metric_heads_init");
    free(v);
}

/* the text of ids, decoded; a code block cannot be closed by it (``` inside becomes ''') */
static char *decoded(const int32_t *ids, int n) {
    int64_t len = mf_tokenizer_decode(D.tok, ids, n, NULL, 0);
    char *text = (char *)malloc(len > 0 ? (size_t)len + 1 : 1);
    if (len < 0 || !text) die("cannot decode a sample: %s", mf_tokenizer_error(D.tok));
    mf_tokenizer_decode(D.tok, ids, n, text, len);
    text[len] = 0;
    for (char *c = strstr(text, "```"); c; c = strstr(c, "```")) c[0] = c[1] = c[2] = '\'';
    return text;
}

static const char *cpu_name(void) {
    static char name[160] = "unknown CPU";
    char line[256];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
            snprintf(name, sizeof name, "%s", strchr(line, ':') + 2);
            name[strcspn(name, "\n")] = 0;
            break;
        }
    if (f) fclose(f);
    return name;
}

static void interval(char *buf, size_t size, stat_summary s) {
    if (isfinite(s.ci)) snprintf(buf, size, "[%.4f, %.4f]", s.mean - s.ci, s.mean + s.ci);
    else snprintf(buf, size, "-");
}

static int ARGC;
static char **ARGV; /* the command line, for the report */

static void report(double secs, int jobs, int threads) {
    char path[4096], ci[2][64];
    double *v = (double *)malloc(sizeof(double) * S.seeds);
    stat_summary tr[N_MIXERS], va[N_MIXERS], bp[N_MIXERS];
    FILE *md;
    if (!v) die("out of memory");
    for (int k = 0; k < N_MIXERS; k++) {
        for (int j = 0; j < S.seeds; j++) v[j] = RUNS[j * N_MIXERS + k].train;
        tr[k] = summarize(v, S.seeds);
        for (int j = 0; j < S.seeds; j++) v[j] = RUNS[j * N_MIXERS + k].valid;
        va[k] = summarize(v, S.seeds);
        for (int j = 0; j < S.seeds; j++) v[j] = RUNS[j * N_MIXERS + k].bpb;
        bp[k] = summarize(v, S.seeds);
    }
    path_in(path, sizeof path, "report.md");
    md = open_out(path);
    fprintf(md, "# The NLP MetaFormer next-token study\n\n");
    fprintf(md, "`build/study_text");
    for (int a = 1; a < ARGC; a++) fprintf(md, strchr(ARGV[a], ' ') ? " \"%s\"" : " %s", ARGV[a]);
    fprintf(md, "` (`make study DATA=...`): %d seed%s (%d to %d), %d at once with %d thread%s each, %.0f s in all on a "
                "shared %d-core %s.\n\n", S.seeds, S.seeds > 1 ? "s" : "", S.seed,
            S.seed + S.seeds - 1, jobs, threads, threads == 1 ? "" : "s", secs,
#ifdef _OPENMP
            omp_get_num_procs(),
#else
            1,
#endif
            cpu_name());
    fprintf(md, "Data: %zu bytes, %lld tokens (%s, vocabulary %d); the first %lld train, the last %lld validate. Every mixer "
                "trains on the same batches of each seed (shuffled windows of %d tokens, %d per step, %d steps: %lld tokens "
                "per run). The seed's next-token configuration (the `metaformer` preset) at a smaller size: d_model %d, %d "
                "heads, %d block%s (pre-norm), d_ff %d, learned positions, GELU, no sdpa biases, the metric mixer's M in the "
                "%s form (docs/math.md §9.10), pool's causal window of 3; AdamW (0.95, 0.99), weight decay 0.01, lr %g "
                "with %d warm-up steps and a cosine to lr/10, clipping at 1, no dropout.\n\n",
            D.text_bytes, (long long)D.n, D.kind, D.V, (long long)D.n_train, (long long)(D.n - D.n_train), S.seq_len, S.batch,
            S.steps, (long long)S.steps * S.batch * S.seq_len, S.d_model, S.heads, S.layers, S.layers == 1 ? "" : "s", S.d_ff, S.metric_form,
            (double)S.lr, S.warmup);
    fprintf(md, "## Losses over %d seeds\n\n| mixer | parameters | train loss | 95%% interval | validation loss | 95%% interval "
                "| bits per byte | differs from sdpa | seconds per run |\n|---|---|---|---|---|---|---|---|---|\n", S.seeds);
    for (int k = 0; k < N_MIXERS; k++) {
        int d = welch_differs(va[k], va[0]);
        double s = 0;
        for (int j = 0; j < S.seeds; j++) s += RUNS[j * N_MIXERS + k].secs / S.seeds;
        interval(ci[0], sizeof ci[0], tr[k]);
        interval(ci[1], sizeof ci[1], va[k]);
        fprintf(md, "| %s | %lld | %.4f ± %.4f | %s | %.4f ± %.4f | %s | %.3f ± %.3f | %s | %.1f |\n", mf_mixer_name(MIXERS_RUN[k]),
                (long long)RUNS[k].params, tr[k].mean, isfinite(tr[k].sd) ? tr[k].sd : 0.0, ci[0], va[k].mean,
                isfinite(va[k].sd) ? va[k].sd : 0.0, ci[1], bp[k].mean, isfinite(bp[k].sd) ? bp[k].sd : 0.0,
                k == 0 ? "-" : d < 0 ? "cannot tell (1 seed)" : d ? (va[k].mean < va[0].mean ? "yes, lower" : "yes, higher") : "no",
                s);
    }
    fprintf(md, "\nLosses in nats per token: mean ± sample standard deviation over the seeds and the 95%% interval of the mean "
                "(Student's t). Train loss: the mean of each run's last %d steps; validation loss: %d batches of %d windows "
                "spread over the validation split. \"Differs from sdpa\": Welch's t test on the validation losses at 5%%. "
                "Parameters: trainable values (mf_param_values). Seconds: the wall time of one run, mean over the seeds, on a "
                "machine that may be shared.\n\n", S.steps / 10 > 0 ? S.steps / 10 : 1, S.eval_batches, S.batch);
    fprintf(md, "## Loss curves\n\n");
    md_figure(md, S.out, "training loss curves", "loss");
    fprintf(md, "## The metric heads\n\n");
    md_figure(md, S.out, "metric heads", "metric_heads");
    {
        const float *heads = RUNS[1].heads;
        int dk = S.d_model / S.heads, definite = 0, n = S.layers * S.heads;
        fprintf(md, "| layer | head | positive eigenvalues | negative | about 0 (< 1e-3 of the largest) |\n|---|---|---|---|---|\n");
        for (int l = 0; l < S.layers; l++)
            for (int h = 0; h < S.heads; h++) {
                int pos, neg;
                eigen_counts(heads + ((size_t)l * S.heads + h) * dk * dk, dk, &pos, &neg);
                definite += neg == 0 && pos == dk;
                fprintf(md, "| %d | %d | %d | %d | %d |\n", l, h, pos, neg, dk - pos - neg);
            }
        fprintf(md, "\nIn %d of %d heads every eigenvalue is above 1e-3 of the largest. %s\n\n", definite, n,
                strcmp(S.metric_form, "symmetric") == 0
                    ? "The symmetric form may learn eigenvalues of either sign: a head with negative ones is a symmetric "
                      "bilinear form, not a metric."
                    : "This form is positive semi-definite by construction (docs/math.md §9.10), so no eigenvalue is "
                      "negative; the ones about 0 say how close a head's M is to a lower rank.");
    }
    heads_change(md);
    {
        char how[96];
        if (S.greedy) snprintf(how, sizeof how, "greedy: the most likely token each time");
        else snprintf(how, sizeof how, "temperature %g, no top-k, the sampler seeded with %d", (double)S.temperature, S.seed);
        fprintf(md, "## Samples\n\nEach mixer's seed-%d model continues \"%s\" by %d tokens (%s).%s%s%s\n\n", S.seed, S.prompt,
                S.sample, how, D.skipped[0] ? " The prompt's characters \"" : "", D.skipped,
                D.skipped[0] ? "\" do not occur in the text: they were left out of it." : "");
    }
    for (int k = 0; k < N_MIXERS; k++) {
        char *text = decoded(RUNS[k].sample, D.n_prompt + S.sample);
        fprintf(md, "**%s**\n\n```text\n%s\n```\n\n", mf_mixer_name(MIXERS_RUN[k]), text);
        free(text);
    }
    fprintf(md, "## Next to the seed's claims\n\n");
    fprintf(md, "1. *Loss \"not much difference\" between the transformer and the metric tensor network.* Validation loss: "
                "sdpa %.4f ± %.4f, metric %.4f ± %.4f (%+.4f nats, %s at 5%% over %d seeds), with %lld vs %lld parameters "
                "(%.0f%%).\n", va[0].mean, isfinite(va[0].sd) ? va[0].sd : 0.0, va[1].mean, isfinite(va[1].sd) ? va[1].sd : 0.0,
            va[1].mean - va[0].mean, welch_differs(va[1], va[0]) < 0 ? "untested with one seed" : welch_differs(va[1], va[0]) ? "significant" : "not significant",
            S.seeds, (long long)RUNS[0].params, (long long)RUNS[1].params, 100.0 * (double)RUNS[1].params / (double)RUNS[0].params);
    {
        static const char *const SAYS[3] = {"untested (one seed)", "not significantly different", "significantly different"};
        int mq = welch_differs(va[1], va[2]), ps = welch_differs(va[3], va[0]), is = welch_differs(va[4], va[0]);
        fprintf(md, "2. *\"Despite the parameter reduction and the strong constraints, the network seemed to perform the same.\"* "
                    "The constraint alone: metric (M = S S^T, %lld parameters) %.4f against quadratic (an unconstrained M per "
                    "head, %lld parameters) %.4f, %s. The mixers that do not weigh other tokens by their content give the "
                    "baselines: pool (the mean of the last 3 tokens) %.4f, %s from sdpa; identity (no mixing) %.4f, %s.\n", (long long)RUNS[1].params, va[1].mean, (long long)RUNS[2].params, va[2].mean, SAYS[mq + 1], va[3].mean, SAYS[ps + 1], va[4].mean,
                SAYS[is + 1]);
    }
    fprintf(md, "3. *Output comparison (\"not much difference\").* The samples above, one per mixer, from the same prompt "
                "and sampler seed.\n");
    close_out(md, path);
    free(v);
}

int main(int argc, char **argv) {
    unsigned char given[N_OPTS] = {0};
    const char *file = NULL;
    double t0 = mf_time();
    int jobs, threads;

    ARGC = argc; ARGV = argv;
    LIBRARY_CHOICES(METRIC_FORMS, mf_metric_form_name, mf_metric_form);
    parse_options(argc, argv, OPTS, N_OPTS, given, &file, usage);
    if (file && S.data) die("two texts given (--data \"%s\" and \"%s\"); give one", S.data, file);
    if (file) S.data = file;
    if (!S.data) die("no text given: --data FILE (any text; e.g. tinyshakespeare.txt); see --help");
    if (S.quick) {
#define QUICK(name, field, v) if (!given[find_option(OPTS, N_OPTS, name)]) S.field = v
        QUICK("steps", steps, 30); QUICK("batch", batch, 4); QUICK("seq-len", seq_len, 32); QUICK("d-model", d_model, 16);
        QUICK("heads", heads, 2); QUICK("layers", layers, 1); QUICK("d-ff", d_ff, 32); QUICK("eval-batches", eval_batches, 2);
        QUICK("sample", sample, 40);
#undef QUICK
    }
    if (S.warmup < 0) S.warmup = S.steps / 10 < 100 ? S.steps / 10 : 100;
    if (S.seeds > MAX_SEEDS) die("--seeds %d: at most %d", S.seeds, MAX_SEEDS);
    if (S.steps > MAX_STEPS) die("--steps %d: at most %d", S.steps, MAX_STEPS);
    if (S.d_model % S.heads) die("--d-model %d is not divisible by --heads %d; pick a head count that divides it", S.d_model, S.heads);
    if ((long)S.batch * S.seq_len > 1L << 26) die("--batch x --seq-len = %ld tokens per step: at most %ld", (long)S.batch * S.seq_len, 1L << 26);
    if (S.sample > 1 << 20) die("--sample %d: at most %d tokens", S.sample, 1 << 20);
    load_data();
    {   /* DIR and its missing parents (make study's bench/results/study/text/gpt2) */
        char dir[4096];
        if (snprintf(dir, sizeof dir, "%s", S.out) >= (int)sizeof dir) die("--out \"%s\" is too long", S.out);
        for (char *c = dir + 1;; c++)
            if (*c == '/' || *c == 0) {
                char end = *c;
                *c = 0;
                if (mkdir(dir, 0777) != 0 && errno != EEXIST) die("cannot create \"%s\": %s", dir, strerror(errno));
                if (!(*c = end)) break;
            }
    }
    jobs = seed_jobs(S.jobs, S.seeds);
    threads = seed_threads(S.threads, jobs);
    if (!(RUNS = (run *)calloc((size_t)S.seeds * N_MIXERS, sizeof *RUNS))) die("out of memory");
    printf("next-token study: %s, %lld tokens (%s, vocabulary %d); sdpa, metric (%s), quadratic, pool, identity; d_model %d, "
           "%d heads, %d blocks, T %d, batch %d, %d steps; seeds %d to %d, %d at once\n", S.data, (long long)D.n, D.kind, D.V,
           S.metric_form, S.d_model, S.heads, S.layers, S.seq_len, S.batch, S.steps, S.seed, S.seed + S.seeds - 1, jobs);
    fflush(stdout);
    run_seeds(S.seeds, jobs, train_seed, &threads);
    loss_figure();
    heads_figure(RUNS[1].heads, 0);
    heads_figure(RUNS[1].heads0, 1);
    report(mf_time() - t0, jobs, threads > 0 ? threads :
#ifdef _OPENMP
           omp_get_num_procs()
#else
           1
#endif
    );
    printf("wrote %s/report.md, loss.svg, metric_heads.svg, metric_heads_init.svg; %s (%.0f s)\n", S.out,
           n_png == 3 ? "the same as .png through gnuplot"
           : gnuplot_found() ? "gnuplot failed on some figures: fewer PNG (see the warnings)"
                             : "no gnuplot: no PNG (the .gp scripts next to the figures draw them)",
           mf_time() - t0);
    for (int i = 0; i < S.seeds * N_MIXERS; i++) { free(RUNS[i].loss); free(RUNS[i].sample); free(RUNS[i].heads); free(RUNS[i].heads0); }
    free(RUNS);
    free(D.ids); free(D.prompt); free(D.token_bytes);
    mf_tokenizer_free(D.tok);
    return 0;
}
