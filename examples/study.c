/* study.c - the NLP MetaFormer seed's sorting study, reproduced (docs/math.md §13, §19; `make study`).
   build: make build/study      run: ./build/study [--out DIR] [--quick]

   Trains the seed's "NanoGPT" sorter - d_model 9, 3 heads of 3, 3 blocks, d_ff 36, no Linear biases,
   GELU, learned positions, the stream_norm block (s = LN1(x); s = s + Attn(s); s = LN2(s);
   x = s + MLP(s), the MLP with its own LN), Adam lr 1e-3 without schedule or clipping, 20 epochs x
   50 batches x 50 sequences - with sdpa, metric and quadratic attention, on the seed form of the task
   (a causal model can reach about 85.7% token accuracy), on the solvable form (100%) and, as a control
   for claims about the order 0 < 1 < 2, on the seed form with the tokens renamed (the same sequences;
   the order to learn is 1 < 2 < 0 in token ids). Then it
   draws the seed's figures from the trained seed-form models with the attention inspection API
   (mf_model_attention, mf_model_attention_form): the distances between the learned embeddings, the
   per-head score tables on a fixed input, each head's metric tensor next to sdpa's Wq Wk^T, the loss
   curves (DIR/NAME.svg; DIR/NAME.dat and the gnuplot script DIR/NAME.gp, run into DIR/NAME.png when
   gnuplot is installed); and writes DIR/report.md that puts the numbers next to the figures and the
   seed's claims.
   --seeds N repeats it all from N seeds (--jobs of them at once: a seed's numbers do not depend on it).
   --quick: a few steps, for the test (tests/test_study.sh). */
#define _POSIX_C_SOURCE 200809L /* isatty, in common.h */
#define METAFORMER_IMPLEMENTATION
#include "../metaformer.h"
#define EX_PROG "study"
#include "common.h"
#include "svg.h"
#include <sys/stat.h>

#define SEED_CEILING 85.7 /* docs/math.md §13: the best token accuracy of a causal model on the seed form */
enum { N_FIGURES = 7, N_MIXERS = 3, N_FORMS = 3, D = 9, H = 3, DK = 3, LAYERS = 3, DFF = 36, MAX_STEPS = 100000 };
static const mf_mixer_kind MIXERS_RUN[N_MIXERS] = {MF_MIXER_SDPA, MF_MIXER_METRIC, MF_MIXER_QUADRATIC};
enum { SEED_FORM, SOLVABLE_FORM, RELABELED_FORM };
static const char *const FORMS[N_FORMS] = {"seed", "solvable", "relabeled"};
static const int FORM_FLAGS[N_FORMS] = {0, SORT_SOLVABLE, SORT_RELABELED};
/* orders of the three tokens (smallest, middle, largest token id): the plain task's, and the
   relabeled task's (SORT_RELABEL) */
static const int32_t PLAIN_ORDER[SORT_VOCAB] = {0, 1, 2};
/* the fixed input of the score tables (seed form, W = 11 tokens) */
static const int32_t FIXED[SORT_W] = {2, 0, 1, 1, 0, 2, 2, 1, 0, 0, 1};

static struct {
    int epochs, batches, batch, seed, seeds, jobs, threads, eval_batches, quick;
    const char *out, *metric_form, *precision;
} S = {20, 50, 50, 1, 5, 0, 1, 20, 0, "bench/results/study", "softmax_tril", "fp32"};
static char METRIC_FORMS[64];

static const option OPTS[] = {
    {"epochs", OPT_INT, &S.epochs, RUN_ONLY, 1, NULL, "epochs"},
    {"batches", OPT_INT, &S.batches, RUN_ONLY, 1, NULL, "batches per epoch"},
    {"batch", OPT_INT, &S.batch, RUN_ONLY, 1, NULL, "sequences per batch"},
    {"eval-batches", OPT_INT, &S.eval_batches, RUN_ONLY, 1, NULL, "held-out batches of --batch sequences for the accuracy"},
    {"seed", OPT_INT, &S.seed, RUN_ONLY, 0, NULL, "seed of the initialisation and the data (of the figures' models)"},
    {"seeds", OPT_INT, &S.seeds, RUN_ONLY, 1, NULL, "studies, seeds --seed .. --seed + N - 1: the accuracy and the claims "
     "over all of them, each claim next to the same count at initialisation"},
    {"jobs", OPT_INT, &S.jobs, RUN_ONLY, 0, NULL, JOBS_HELP},
    {"threads", OPT_INT, &S.threads, RUN_ONLY, 0, NULL, "threads of a seed (0: all; the model is too small to gain from more)"},
    {"out", OPT_TEXT, &S.out, RUN_ONLY, 0, NULL, "directory of report.md and the figures (created)"},
    {"metric-form", OPT_TEXT, &S.metric_form, RUN_ONLY, 0, METRIC_FORMS, "the metric mixer's form of M (docs/math.md §9.10; "
     "softmax_tril: the seed's S S^T)"},
    {"precision", OPT_TEXT, &S.precision, RUN_ONLY, 0, "fp32|bf16", PRECISION_HELP},
    {"quick", OPT_FLAG, &S.quick, RUN_ONLY, 0, NULL, "2 epochs of 5 batches (a test of the outputs, not a study)"},
};
#define N_OPTS ((int)(sizeof OPTS / sizeof OPTS[0]))

static void usage(FILE *f) {
    fprintf(f, "usage: study [options]\nThe NLP MetaFormer sorting study (docs/math.md §19): trains, draws, reports.\n");
    print_options(f, OPTS, N_OPTS);
}

typedef struct run {
    mf_mixer_kind mixer;
    int form;                     /* SEED_FORM, SOLVABLE_FORM or RELABELED_FORM */
    mf_ctx *ctx;
    mf_model *model;
    double *loss;                 /* per step */
    int steps;
    double acc, eval_loss, secs;
    long scored;
} run;

/* the seed's model (docs/math.md §13) with this mixer, for a form of the task */
static mf_model_config sorter_config(mf_mixer_kind mixer, int solvable) {
    mf_model_config c = mf_model_config_default();
    c.vocab = SORT_VOCAB; c.d_model = D; c.n_heads = H; c.n_layers = LAYERS; c.d_ff = DFF;
    c.max_seq = solvable ? 2 * SORT_W - 1 : SORT_W;
    c.mixer = mixer; c.pos = MF_POS_LEARNED; c.ffn_act = MF_ACT_GELU; c.ffn_bias = 0;
    if (mixer == MF_MIXER_METRIC) c.metric_form = (mf_metric_form)mf_metric_form_from_name(S.metric_form);
    if (mixer == MF_MIXER_SDPA) c.attn_bias = 0;
    c.block = MF_BLOCK_STREAM_NORM;
    return c;
}

static double last_epoch_loss(const run *r);

/* the model of run r, initialised from seed (not trained yet) */
static void make_run(run *r, int seed) {
    mf_model_config cfg = sorter_config(r->mixer, r->form == SOLVABLE_FORM);
    mf_tensor *head_b;
    r->ctx = mf_ctx_new((uint64_t)seed);
    if (!r->ctx) die("out of memory");
    mf_set_threads(r->ctx, seed_threads(S.threads, S.jobs));
    set_precision(r->ctx, S.precision);
    mf_set_keep_activation_grads(r->ctx, 0);
    check_model_config(r->ctx, &cfg);
    if (!(r->model = mf_model_new(r->ctx, &cfg))) die("%s", mf_error(r->ctx));
    /* the seed's head is Linear(9, 3) without bias: the library's head bias held at zero */
    head_b = mf_param_find(r->ctx, "head.bias");
    mf_init_const(r->ctx, head_b, 0.0f);
    mf_param_set_trainable(head_b, 0);
}

/* train run r on the data of seed, then its held-out accuracy */
static void fit(run *r, int seed, int32_t *ids, int32_t *targets) {
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 1e-3f); /* torch.optim.Adam(lr = 1e-3), constant */
    uint64_t rng = (uint64_t)seed * 2 + 1, eval_rng = (uint64_t)seed * 2 + 2 + 0x5EEDULL;
    double t0 = mf_time();
    r->steps = S.epochs * S.batches;
    if (!(r->loss = (double *)malloc((size_t)r->steps * sizeof(double)))) die("out of memory");
    for (int step = 0; step < r->steps; step++) {
        int T = sort_batch(&rng, FORM_FLAGS[r->form], S.batch, ids, targets);
        float loss, ar;
        if (train_step(r->ctx, r->model, &opt, 0.0f, ids, targets, S.batch, S.batch, T, &loss, &ar, NULL, NULL) < 0)
            die("%s (%s form): %s", mf_mixer_name(r->mixer), FORMS[r->form], mf_error(r->ctx));
        r->loss[step] = loss;
    }
    r->acc = sort_evaluate(r->model, r->ctx, &eval_rng, FORM_FLAGS[r->form], S.batch, S.eval_batches, ids, targets, &r->scored,
                           &r->eval_loss);
    r->secs = mf_time() - t0;
    if (!mf_ok(r->ctx)) die("%s", mf_error(r->ctx));
    printf("%-9s %-8s seed %d  last-epoch loss %.4f  held-out loss %.4f  token accuracy %5.1f%% (%ld tokens)  %.1f s\n",
           mf_mixer_name(r->mixer), FORMS[r->form], seed, last_epoch_loss(r), r->eval_loss, r->acc, r->scored, r->secs);
    fflush(stdout);
}

/* ---- the figures' numbers ------------------------------------------------------------------------ */

/* ||A - A^T|| / ||A|| (Frobenius) of an n x n matrix: 0 for a symmetric one */
static double asymmetry(const float *a, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) { double d = a[i * n + j] - a[j * n + i]; num += d * d; den += (double)a[i * n + j] * a[i * n + j]; }
    return den > 0 ? sqrt(num / den) : 0;
}

/* "+ + -": the signs of the eigenvalues of the symmetric part of an n x n matrix (|ev| < 1e-3 max: 0) */
static void eigen_signs(const float *a, int n, char *buf, size_t size, double *ev) {
    double s[D * D], mx = 0;
    size_t k = 0;
    for (int i = 0; i < n; i++) for (int j = 0; j < n; j++) s[i * n + j] = 0.5 * ((double)a[i * n + j] + a[j * n + i]);
    sym_eigenvalues(s, n, ev);
    for (int i = 0; i < n; i++) if (fabs(ev[i]) > mx) mx = fabs(ev[i]);
    buf[0] = 0;
    for (int i = n - 1; i >= 0 && k + 3 < size; i--)
        k += (size_t)snprintf(buf + k, size - k, "%s%c", i == n - 1 ? "" : " ", fabs(ev[i]) < 1e-3 * mx ? '0' : ev[i] > 0 ? '+' : '-');
}

/* cosine similarity of the symmetric parts of two n x n matrices */
static double sym_cosine(const float *a, const float *b, int n) {
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double x = 0.5 * ((double)a[i * n + j] + a[j * n + i]), y = 0.5 * ((double)b[i * n + j] + b[j * n + i]);
            ab += x * y; aa += x * x; bb += y * y;
        }
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0;
}

static double last_epoch_loss(const run *r) {
    double s = 0;
    int n = r->steps < S.batches ? r->steps : S.batches;
    for (int i = r->steps - n; i < r->steps; i++) s += r->loss[i];
    return n ? s / n : NAN;
}

/* dist[i][j] over the 3 tokens: Euclidean |e_i - e_j| (A NULL), else the form (e_i - e_j) A (e_i - e_j)^T */
static void token_distances(const float *emb, const float *A, float *dist) {
    for (int i = 0; i < SORT_VOCAB; i++)
        for (int j = 0; j < SORT_VOCAB; j++) {
            double diff[D], s = 0;
            for (int d = 0; d < D; d++) diff[d] = (double)emb[i * D + d] - emb[j * D + d];
            for (int d = 0; d < D; d++)
                if (!A) s += diff[d] * diff[d];
                else for (int e = 0; e < D; e++) s += diff[d] * A[d * D + e] * diff[e];
            dist[i * SORT_VOCAB + j] = (float)(A ? s : sqrt(s));
        }
}
/* the sort-order test (docs/math.md §19.3): order[1] lies between order[0] and order[2] - the three
   values are positive and the pair (order[0], order[2]) is the farthest; signed, since an indefinite
   form gives negative ones */
static int ordered_as(const float *dist, const int32_t *order) {
    double lo_mid = dist[order[0] * SORT_VOCAB + order[1]], mid_hi = dist[order[1] * SORT_VOCAB + order[2]],
           lo_hi = dist[order[0] * SORT_VOCAB + order[2]];
    return lo_mid > 0 && mid_hi > 0 && lo_hi > lo_mid && lo_hi > mid_hi;
}
static int ordered(const float *dist) { return ordered_as(dist, PLAIN_ORDER); }
/* the three values are positive: then exactly one of the three tokens lies between the other two */
static int positive(const float *dist) { return dist[1] > 0 && dist[2] > 0 && dist[5] > 0; }

static const char *const TOKEN_LABELS[SORT_VOCAB] = {"0", "1", "2"};

/* the seed's claims as counts, on the models of one seed (trained or at initialisation), per mixer:
     ORDERING  layer-0 heads whose form on the embeddings orders the tokens as the task does
     SEEN      layer-0 heads whose form orders what the mixer sees, LN1(e + p), at most positions
     EUCLID    1 when the Euclidean embedding distances order them
     INDEFINITE heads (of every layer) whose dk x dk form is indefinite
     POSITIVE  layer-0 heads whose three values are positive (a third of them order any given order
               by chance)
   each on the seed-form models (the task's order 0 < 1 < 2) and, as the control, on the relabeled
   models: RL_* with the relabeled task's order 1 < 2 < 0, RL_*_PLAIN with 0 < 1 < 2 */
enum { ORDERING, SEEN, EUCLID, INDEFINITE, POSITIVE, RL_ORDERING, RL_SEEN, RL_EUCLID, RL_ORDERING_PLAIN, RL_SEEN_PLAIN,
       RL_EUCLID_PLAIN, N_CLAIMS };
typedef struct claims { int v[N_CLAIMS][N_MIXERS]; } claims;

/* what layer 0's mixer sees of token i at position t: LN1(e_i + p_t) (the stream_norm block's first
   LayerNorm, with its affine parameters), into x [SORT_W][SORT_VOCAB][D] */
typedef float mixer_inputs_t[SORT_W * SORT_VOCAB * D];
static void mixer_inputs(const run *r, float *x) {
    float emb[SORT_VOCAB * D], pos[SORT_W * D], w[D], b[D];
    if (mf_to_host(r->ctx, mf_param_find(r->ctx, "tok_emb"), emb) < 0 ||
        mf_to_host(r->ctx, mf_param_find(r->ctx, "pos_emb"), pos) < 0 ||
        mf_to_host(r->ctx, mf_param_find(r->ctx, "layers.0.ln1.weight"), w) < 0 ||
        mf_to_host(r->ctx, mf_param_find(r->ctx, "layers.0.ln1.bias"), b) < 0)
        die("the mixer's inputs: %s", mf_error(r->ctx));
    for (int t = 0; t < SORT_W; t++)
        for (int i = 0; i < SORT_VOCAB; i++) {
            double v[D], mean = 0, var = 0;
            float *xi = x + ((size_t)t * SORT_VOCAB + i) * D;
            for (int d = 0; d < D; d++) { v[d] = (double)emb[i * D + d] + pos[t * D + d]; mean += v[d] / D; }
            for (int d = 0; d < D; d++) var += (v[d] - mean) * (v[d] - mean) / D;
            for (int d = 0; d < D; d++) xi[d] = (float)((v[d] - mean) / sqrt(var + 1e-5) * w[d] + b[d]);
        }
}
/* the positions (of SORT_W) at which the form A orders the mixer's inputs x (mixer_inputs) as order */
static int ordered_positions(const float *x, const float *A, const int32_t *order) {
    float dist[SORT_VOCAB * SORT_VOCAB];
    int n = 0;
    for (int t = 0; t < SORT_W; t++) { token_distances(x + (size_t)t * SORT_VOCAB * D, A, dist); n += ordered_as(dist, order); }
    return n;
}

/* the counts ORDERING .. POSITIVE of the models row (one per mixer) under order, into c->v[first + ..]
   (the relabeled models: RL_ORDERING .. RL_EUCLID, no INDEFINITE or POSITIVE) */
static void measure_order(run *row, const int32_t *order, claims *c, int first) {
    float emb[SORT_VOCAB * D], dist[SORT_VOCAB * SORT_VOCAB], head[H * DK * DK], model[H * D * D];
    mixer_inputs_t x;
    double ev[D];
    char signs[32];
    for (int k = 0; k < N_MIXERS; k++) {
        run *r = &row[k];
        int ordering = 0, seen = 0, indefinite = 0, pos = 0;
        if (mf_to_host(r->ctx, mf_param_find(r->ctx, "tok_emb"), emb) < 0) die("%s", mf_error(r->ctx));
        mixer_inputs(r, x);
        token_distances(emb, NULL, dist);
        c->v[first + EUCLID][k] = ordered_as(dist, order);
        for (int l = 0; l < LAYERS; l++) {
            if (mf_model_attention_form(r->model, l, MF_ATTN_FORM_HEAD, head) < 0 ||
                mf_model_attention_form(r->model, l, MF_ATTN_FORM_MODEL, model) < 0)
                die("attention form: %s", mf_error(r->ctx));
            for (int h = 0; h < H; h++) {
                eigen_signs(head + h * DK * DK, DK, signs, sizeof signs, ev);
                indefinite += strchr(signs, '+') && strchr(signs, '-');
                if (l == 0) {
                    token_distances(emb, model + h * D * D, dist);
                    ordering += ordered_as(dist, order);
                    pos += positive(dist);
                    seen += 2 * ordered_positions(x, model + h * D * D, order) > SORT_W; /* at most positions */
                }
            }
        }
        c->v[first + ORDERING][k] = ordering;
        c->v[first + SEEN][k] = seen;
        if (first == 0) { c->v[INDEFINITE][k] = indefinite; c->v[POSITIVE][k] = pos; }
    }
}
/* every claim of one seed: the seed-form models (row[SEED_FORM]) and the relabeled ones */
static void measure(run (*row)[N_MIXERS], claims *c) {
    memset(c, 0, sizeof *c);
    measure_order(row[SEED_FORM], PLAIN_ORDER, c, 0);
    measure_order(row[RELABELED_FORM], SORT_RELABEL, c, RL_ORDERING);
    measure_order(row[RELABELED_FORM], PLAIN_ORDER, c, RL_ORDERING_PLAIN);
}
/* "1 3 0 2 1": a count of every seed */
static const char *per_seed(const claims *c, int n, int which, int k, char *buf, size_t size) {
    size_t at = 0;
    buf[0] = 0;
    for (int j = 0; j < n && at < size; j++) at += (size_t)snprintf(buf + at, size - at, "%s%d", j ? " " : "", c[j].v[which][k]);
    return buf;
}
/* a claim's counts over the seeds (scale: 1, or 1/3 for the chance of POSITIVE) */
static stat_summary claim_stats(const claims *c, int n, int which, int k, double scale) {
    double v[100];
    for (int j = 0; j < n; j++) v[j] = c[j].v[which][k] * scale;
    return summarize(v, n);
}

static void path_in(char *buf, size_t size, const char *name) { snprintf(buf, size, "%s/%s", S.out, name); }

static int n_png; /* the figures gnuplot drew */

/* figure NAME (the file name without extension) as DIR/NAME.svg and, with gnuplot, DIR/NAME.png */
static void heatmaps(const char *name, const char *title, const char *subtitle, const svg_matrix *m, int n, int per_row) {
    char stem[4096], svg[4096];
    path_in(stem, sizeof stem, name);
    svg_heatmaps(stem_path(svg, sizeof svg, stem, ".svg"), title, subtitle, m, n, per_row);
    n_png += png_heatmaps(stem, title, subtitle, m, n, per_row) > 0;
}
static void line_chart(const char *name, const char *title, const char *xlabel, const char *ylabel, const svg_series *s, int n) {
    char stem[4096], svg[4096];
    path_in(stem, sizeof stem, name);
    svg_line_chart(stem_path(svg, sizeof svg, stem, ".svg"), title, xlabel, ylabel, s, n, NULL, NULL);
    n_png += png_line_chart(stem, title, xlabel, ylabel, s, n) > 0;
}

/* ---- the seeds ----------------------------------------------------------------------------------- */
/* what every seed leaves: its claims at initialisation and after training, and per form and mixer
   the accuracy and held-out loss ([form][mixer][seed]); the first seed's models stay for the figures */
static struct { run (*first)[N_MIXERS]; claims *at_init, *trained; double *accs, *losses; } R;

/* seed j: the models, their claims at initialisation, training, the claims again */
static void study_seed(int j, void *user) {
    run cur[N_FORMS][N_MIXERS];
    run (*use)[N_MIXERS] = j == 0 ? R.first : cur;
    int32_t *ids = (int32_t *)malloc(sizeof(int32_t) * (size_t)S.batch * SORT_MAX_T),
            *targets = (int32_t *)malloc(sizeof(int32_t) * (size_t)S.batch * SORT_MAX_T);
    (void)user;
    if (!ids || !targets) die("out of memory");
    for (int f = 0; f < N_FORMS; f++)
        for (int k = 0; k < N_MIXERS; k++) {
            memset(&use[f][k], 0, sizeof(run));
            use[f][k].mixer = MIXERS_RUN[k]; use[f][k].form = f;
            make_run(&use[f][k], S.seed + j);
        }
    measure(use, &R.at_init[j]);
    for (int f = 0; f < N_FORMS; f++)
        for (int k = 0; k < N_MIXERS; k++) {
            fit(&use[f][k], S.seed + j, ids, targets);
            R.accs[(f * N_MIXERS + k) * S.seeds + j] = use[f][k].acc;
            R.losses[(f * N_MIXERS + k) * S.seeds + j] = use[f][k].eval_loss;
        }
    measure(use, &R.trained[j]);
    for (int f = 0; j > 0 && f < N_FORMS; f++)
        for (int k = 0; k < N_MIXERS; k++) { free(cur[f][k].loss); mf_model_free(cur[f][k].model); mf_ctx_free(cur[f][k].ctx); }
    free(ids); free(targets);
}

/* ---- main ---------------------------------------------------------------------------------------- */
int main(int argc, char **argv) {
    unsigned char given[N_OPTS] = {0};
    const char *none = NULL;
    run runs[N_FORMS][N_MIXERS];
    char path[4096], title[256], signs[32];
    float emb[N_MIXERS][SORT_VOCAB * D], head_forms[N_MIXERS][LAYERS][H * DK * DK], model_forms[N_MIXERS][LAYERS][H * D * D];
    float dist[N_MIXERS][1 + H][SORT_VOCAB * SORT_VOCAB];
    float *scores[N_MIXERS], *probs[N_MIXERS];
    double ev[D], t0 = mf_time(), max_cos = 0, max_asym[N_MIXERS] = {0};
    int indefinite[N_MIXERS] = {0}, ordering_heads[N_MIXERS] = {0};
    char cos_text[32], seq[3][128];
    claims *at_init = NULL, *trained = NULL;
    double *accs = NULL, *losses = NULL;
    FILE *md;

    LIBRARY_CHOICES(METRIC_FORMS, mf_metric_form_name, mf_metric_form);
    parse_options(argc, argv, OPTS, N_OPTS, given, &none, usage);
    if (none) die("study takes no file (\"%s\"); see --help", none);
    if (S.quick) { S.epochs = 2; S.batches = 5; S.eval_batches = 2; }
    if (S.seeds > 100) die("--seeds %d: at most 100 studies", S.seeds);
    if ((long)S.epochs * S.batches > MAX_STEPS) die("--epochs x --batches = %ld steps: at most %d", (long)S.epochs * S.batches, MAX_STEPS);
    if (mkdir(S.out, 0777) != 0 && errno != EEXIST) die("cannot create \"%s\": %s", S.out, strerror(errno));
    S.jobs = seed_jobs(S.jobs, S.seeds);
    printf("the NLP MetaFormer sorter: d_model %d, %d heads of %d, %d blocks (stream_norm), d_ff %d, no biases, GELU, "
           "learned positions; Adam lr 1e-3, %d epochs x %d batches x %d sequences, seeds %d to %d, %d at once\n", D, H, DK,
           LAYERS, DFF, S.epochs, S.batches, S.batch, S.seed, S.seed + S.seeds - 1, S.jobs);
    R.first = runs;
    if (!(R.at_init = (claims *)calloc((size_t)S.seeds, sizeof *R.at_init)) ||
        !(R.trained = (claims *)calloc((size_t)S.seeds, sizeof *R.trained)) ||
        !(R.accs = (double *)malloc(sizeof(double) * N_FORMS * N_MIXERS * (size_t)S.seeds)) ||
        !(R.losses = (double *)malloc(sizeof(double) * N_FORMS * N_MIXERS * (size_t)S.seeds)))
        die("out of memory");
    run_seeds(S.seeds, S.jobs, study_seed, NULL);
    at_init = R.at_init; trained = R.trained; accs = R.accs; losses = R.losses;

    /* the figures of the seed-form models (the seed's) */
    for (int k = 0; k < N_MIXERS; k++) {
        run *r = &runs[0][k];
        int n = LAYERS * 1 * H * SORT_W * SORT_W;
        scores[k] = (float *)malloc(sizeof(float) * n);
        probs[k] = (float *)malloc(sizeof(float) * n);
        if (!scores[k] || !probs[k]) die("out of memory");
        if (mf_model_attention_keys(r->model, SORT_W) != SORT_W || !mf_model_attention(r->model, FIXED, 1, SORT_W, scores[k], probs[k]))
            die("attention inspection: %s", mf_error(r->ctx));
        mf_reset(r->ctx);
        for (int l = 0; l < LAYERS; l++)
            if (mf_model_attention_form(r->model, l, MF_ATTN_FORM_HEAD, head_forms[k][l]) < 0 ||
                mf_model_attention_form(r->model, l, MF_ATTN_FORM_MODEL, model_forms[k][l]) < 0)
                die("attention form: %s", mf_error(r->ctx));
        if (mf_to_host(r->ctx, mf_param_find(r->ctx, "tok_emb"), emb[k]) < 0) die("%s", mf_error(r->ctx));
        token_distances(emb[k], NULL, dist[k][0]);
        for (int h = 0; h < H; h++) token_distances(emb[k], model_forms[k][0] + h * D * D, dist[k][1 + h]);
        for (int i = 0; i < n; i++) if (probs[k][i] == 0.0f && (i % SORT_W) > (i / SORT_W) % SORT_W) scores[k][i] = NAN; /* masked: grey */
    }
    {   /* embeddings: Euclidean distances and the induced ones of layer 0's heads */
        svg_matrix m[N_MIXERS * (1 + H)];
        for (int k = 0; k < N_MIXERS; k++)
            for (int p = 0; p <= H; p++) {
                svg_matrix *q = &m[k * (1 + H) + p];
                memset(q, 0, sizeof *q);
                if (p == 0) snprintf(q->title, sizeof q->title, "%s: |e_i - e_j|", mf_mixer_name(MIXERS_RUN[k]));
                else snprintf(q->title, sizeof q->title, "%s head %d: d A d^T", mf_mixer_name(MIXERS_RUN[k]), p - 1);
                q->rows = q->cols = SORT_VOCAB; q->v = dist[k][p]; q->row_labels = q->col_labels = TOKEN_LABELS;
            }
        heatmaps("embeddings", "Distances between the learned token embeddings (seed form)",
                     "left: Euclidean; then per head of layer 0: (e_i - e_j) A_h (e_i - e_j)^T, A_h the head's D x D form",
                     m, N_MIXERS * (1 + H), 1 + H);
    }
    for (int k = 0; k < N_MIXERS; k++) { /* score tables: every layer and head on the fixed input */
        svg_matrix m[LAYERS * H];
        char labels[SORT_W][4];
        const char *lab[SORT_W];
        for (int i = 0; i < SORT_W; i++) { snprintf(labels[i], sizeof labels[i], "%d", (int)FIXED[i]); lab[i] = labels[i]; }
        for (int l = 0; l < LAYERS; l++)
            for (int h = 0; h < H; h++) {
                svg_matrix *q = &m[l * H + h];
                memset(q, 0, sizeof *q);
                snprintf(q->title, sizeof q->title, "layer %d head %d", l, h);
                q->rows = q->cols = SORT_W; q->v = scores[k] + (l * H + h) * SORT_W * SORT_W;
                q->row_labels = q->col_labels = lab;
            }
        snprintf(title, sizeof title, "%s attention scores on a fixed input (rows: queries, columns: keys)", mf_mixer_name(MIXERS_RUN[k]));
        snprintf(path, sizeof path, "scores_%s", mf_mixer_name(MIXERS_RUN[k]));
        heatmaps(path, title, "scaled as the softmax sees them; grey: masked (a key after the query)", m, LAYERS * H, H);
    }
    for (int space = 0; space < 2; space++) { /* each head's form: metric / quadratic M_h next to sdpa's Wq_h Wk_h^T */
        svg_matrix m[N_MIXERS * LAYERS * H];
        int n = space ? D : DK;
        for (int l = 0; l < LAYERS; l++)
            for (int k = 0; k < N_MIXERS; k++)
                for (int h = 0; h < H; h++) {
                    svg_matrix *q = &m[(l * N_MIXERS + k) * H + h];
                    memset(q, 0, sizeof *q);
                    snprintf(q->title, sizeof q->title, "L%d h%d %s: %s", l, h, mf_mixer_name(MIXERS_RUN[k]),
                             MIXERS_RUN[k] == MF_MIXER_SDPA ? (space ? "Wq^T Wk" : "Wq Wk^T") : (space ? "Wp^T M Wp" : "M"));
                    q->rows = q->cols = n;
                    q->v = space ? model_forms[k][l] + h * D * D : head_forms[k][l] + h * DK * DK;
                }
        heatmaps(space ? "forms_model" : "forms_head", space ? "Each head's bilinear form on the layer input (D x D)" : "Each head's metric tensor next to sdpa's Wq Wk^T (dk x dk)",
                     space ? "score = x A x'^T / sqrt(dk); sdpa: Wq_h^T Wk_h, metric / quadratic: Wp_h^T M_h Wp_h"
                           : "metric: M_h (symmetric by construction), quadratic: M_h, sdpa: Wq_h Wk_h^T (the [dk, D] projections)",
                     m, N_MIXERS * LAYERS * H, 3 * H);
    }
    {   /* loss curves of the seed and solvable forms (the relabeled one retraces the seed form's) */
        enum { CHARTED = SOLVABLE_FORM + 1 };
        svg_series s[CHARTED * N_MIXERS];
        char names[CHARTED * N_MIXERS][64];
        double *xs[CHARTED * N_MIXERS], *ys[CHARTED * N_MIXERS];
        int every = S.batches / 5 > 0 ? S.batches / 5 : 1;
        for (int f = 0; f < CHARTED; f++)
            for (int k = 0; k < N_MIXERS; k++) {
                int i = f * N_MIXERS + k, n = runs[f][k].steps / every;
                xs[i] = (double *)malloc(sizeof(double) * (n + 1)); ys[i] = (double *)malloc(sizeof(double) * (n + 1));
                if (!xs[i] || !ys[i]) die("out of memory");
                for (int p = 0; p < n; p++) {
                    double sum = 0;
                    for (int q = 0; q < every; q++) sum += runs[f][k].loss[p * every + q];
                    xs[i][p] = (p + 1.0) * every / S.batches; ys[i][p] = sum / every;
                }
                snprintf(names[i], sizeof names[i], "%s, %s form", mf_mixer_name(MIXERS_RUN[k]), FORMS[f]);
                s[i].name = names[i]; s[i].x = xs[i]; s[i].y = ys[i]; s[i].n = n; s[i].lo = s[i].hi = NULL;
            }
        snprintf(title, sizeof title, "Training loss of the sorter (mean of every %d steps)", every);
        line_chart("loss", title, "epoch", "cross-entropy (nats)", s, CHARTED * N_MIXERS);
        for (int i = 0; i < CHARTED * N_MIXERS; i++) { free(xs[i]); free(ys[i]); }
    }

    /* ---- report.md ---- */
    path_in(path, sizeof path, "report.md");
    md = open_out(path);
    fprintf(md, "# The NLP MetaFormer sorting study, reproduced\n\n");
    fprintf(md, "`make study` (`./build/study --out %s%s`), seeds %d to %d (the figures and the tables of one seed: "
                "%d), %d seed(s) at once, %d thread(s) each; %.0f s in all on a shared machine. "
                "Setup (docs/math.md §13, §19): tokens {0, 1, 2}, W = %d; d_model %d, %d heads of %d, %d blocks in the seed's "
                "layout (block `stream_norm`: s = LN1(x); s = s + Attn(s); s = LN2(s); x = s + MLP(s), the MLP with its own LN), "
                "d_ff %d, GELU, learned positions, no Linear biases (LayerNorms keep PyTorch's affine bias), the metric "
                "mixer's M in the %s form (docs/math.md §9.10); %s products; Adam lr 1e-3, "
                "no schedule, no clipping; %d epochs x %d batches x %d sequences of fresh random data. The seed form predicts "
                "sorted(x)[w] at position w from x[0..w] (a causal model can reach about %.1f%% token accuracy); the solvable "
                "form reads x then sorted(x) (100%% possible); the relabeled form is the seed form with the tokens renamed "
                "(a control, below). Accuracy on %d held-out batches.\n\n",
            S.out, S.quick ? " --quick" : "", S.seed, S.seed + S.seeds - 1, S.seed, S.jobs, seed_threads(S.threads, S.jobs), mf_time() - t0, SORT_W, D, H,
            DK, LAYERS, DFF, S.metric_form, S.precision, S.epochs,
            S.batches, S.batch, SEED_CEILING, S.eval_batches);
    fprintf(md, "## Accuracy\n\n| mixer | form | parameters | last-epoch train loss | held-out loss | token accuracy | ceiling | seconds "
                "| held-out loss, %d seeds | token accuracy, %d seeds | 95%% interval |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|\n", S.seeds, S.seeds);
    for (int f = 0; f < N_FORMS; f++)
        for (int k = 0; k < N_MIXERS; k++) {
            const run *r = &runs[f][k];
            stat_summary a = summarize(accs + (f * N_MIXERS + k) * S.seeds, S.seeds);
            stat_summary e = summarize(losses + (f * N_MIXERS + k) * S.seeds, S.seeds);
            char ci[64];
            if (isfinite(a.ci)) snprintf(ci, sizeof ci, "[%.1f%%, %.1f%%]", a.mean - a.ci, a.mean + a.ci); else snprintf(ci, sizeof ci, "-");
            fprintf(md, "| %s | %s | %lld | %.4f | %.4f | %.1f%% | %s | %.1f | %.4f ± %.4f | %.1f%% ± %.1f | %s |\n",
                    mf_mixer_name(r->mixer), FORMS[f], (long long)mf_param_values(r->ctx, 1), last_epoch_loss(r),
                    r->eval_loss, r->acc, f == SOLVABLE_FORM ? "100%" : "85.7%", r->secs, e.mean, isfinite(e.sd) ? e.sd : 0.0, a.mean,
                    isfinite(a.sd) ? a.sd : 0.0, ci);
        }
    fprintf(md, "\n(The first columns: seed %d, whose models the figures show; the last three: mean ± standard deviation "
                "over the %d seeds and the 95%% interval of the mean. Trainable parameters: the head bias is held at zero, "
                "as the seed's head has none.) ", S.seed, S.seeds);
    fprintf(md, "The seed-form loss floor is about 0.314 nats (docs/math.md §13).\n\n");
    md_figure(md, S.out, "loss curves", "loss");
    fprintf(md, "## The forms of the heads (seed form)\n\n");
    md_figure(md, S.out, "metric tensors and Wq Wk^T", "forms_head");
    md_figure(md, S.out, "the forms on the layer input", "forms_model");
    fprintf(md, "| mixer | layer | head | asymmetry of the dk x dk form | eigenvalue signs (symmetric part) | "
                "asymmetry of the D x D form | best cosine with an sdpa head (D x D, symmetric parts) |\n|---|---|---|---|---|---|---|\n");
    for (int k = 0; k < N_MIXERS; k++)
        for (int l = 0; l < LAYERS; l++)
            for (int h = 0; h < H; h++) {
                double best = 0;
                eigen_signs(head_forms[k][l] + h * DK * DK, DK, signs, sizeof signs, ev);
                for (int g = 0; g < H && k > 0; g++) {
                    double c = sym_cosine(model_forms[k][l] + h * D * D, model_forms[0][l] + g * D * D, D);
                    if (fabs(c) > fabs(best)) best = c;
                }
                if (k) snprintf(cos_text, sizeof cos_text, "%.2f", best); else snprintf(cos_text, sizeof cos_text, "-");
                if (k == 1 && fabs(best) > max_cos) max_cos = fabs(best);
                if (strchr(signs, '+') && strchr(signs, '-')) indefinite[k]++;
                if (asymmetry(head_forms[k][l] + h * DK * DK, DK) > max_asym[k]) max_asym[k] = asymmetry(head_forms[k][l] + h * DK * DK, DK);
                fprintf(md, "| %s | %d | %d | %.3f | %s | %.3f | %s |\n", mf_mixer_name(MIXERS_RUN[k]), l, h,
                        asymmetry(head_forms[k][l] + h * DK * DK, DK), signs, asymmetry(model_forms[k][l] + h * D * D, D), cos_text);
            }
    fprintf(md, "\nAsymmetry = ||A - A^T|| / ||A||. An eigenvalue sign pattern with both + and - is an indefinite form "
                "(not a metric in the strict sense). The cosine compares a head's D x D form with the most similar sdpa "
                "head of the same layer (the models are trained separately, so heads need not correspond).\n\n");
    fprintf(md, "## Embeddings (seed form)\n\n");
    md_figure(md, S.out, "embedding distances", "embeddings");
    fprintf(md, "| mixer | |e0-e1| | |e1-e2| | |e0-e2| | 1 between 0 and 2 (Euclidean) | heads of layer 0 whose form orders "
                "0, 1, 2 | positions (of %d) at which each head's form orders what the mixer sees, LN1(e + p) |\n"
                "|---|---|---|---|---|---|---|\n", SORT_W);
    for (int k = 0; k < N_MIXERS; k++) {
        char heads[64] = "";
        size_t n = 0;
        for (int h = 0; h < H; h++)
            if (ordered(dist[k][1 + h])) {
                n += (size_t)snprintf(heads + n, sizeof heads - n, "%s%d", n ? ", " : "", h);
                ordering_heads[k]++;
            }
        char seen[96] = "";
        size_t at = 0;
        mixer_inputs_t x;
        mixer_inputs(&runs[0][k], x);
        for (int h = 0; h < H; h++)
            at += (size_t)snprintf(seen + at, sizeof seen - at, "%sh%d: %d", h ? ", " : "", h,
                                   ordered_positions(x, model_forms[k][0] + h * D * D, PLAIN_ORDER));
        fprintf(md, "| %s | %.2f | %.2f | %.2f | %s | %s | %s |\n", mf_mixer_name(MIXERS_RUN[k]), dist[k][0][1], dist[k][0][5],
                dist[k][0][2], ordered(dist[k][0]) ? "yes" : "no", n ? heads : "none", seen);
    }
    fprintf(md, "\n## Score tables (seed form, input %d %d %d %d %d %d %d %d %d %d %d)\n\n", FIXED[0], FIXED[1], FIXED[2],
            FIXED[3], FIXED[4], FIXED[5], FIXED[6], FIXED[7], FIXED[8], FIXED[9], FIXED[10]);
    for (int k = 0; k < N_MIXERS; k++) {
        char alt[64], name[64];
        snprintf(alt, sizeof alt, "%s scores", mf_mixer_name(MIXERS_RUN[k]));
        snprintf(name, sizeof name, "scores_%s", mf_mixer_name(MIXERS_RUN[k]));
        md_figure(md, S.out, alt, name);
    }
    fprintf(md, "The metric mixer's score table of a head is p M p^T with the same p on both sides, so before the mask "
                "it is symmetric in (query, key); sdpa's q k^T is not.\n");
    {   /* the seed's claims (its README, "Early Explorations with NanoGPT array sorter"), point by point */
        const run *sd = &runs[0][0], *me = &runs[0][1];
        fprintf(md, "\n## The claims over %d seeds, trained and at initialisation\n\n"
                    "Counts on the seed-form models of each seed (seeds %d to %d, in order), after training and for the "
                    "same models before it: a claim about trained weights holds when its count after training differs from "
                    "the count at initialisation, seed after seed.\n\n"
                    "| mixer | layer-0 heads ordering 0, 1, 2 (of %d) | at initialisation | the same on what the mixer sees, "
                    "LN1(e + p), at most positions | at initialisation | Euclidean distances order them (1 = yes) | at "
                    "initialisation | indefinite heads (of %d) | at initialisation |\n"
                    "|---|---|---|---|---|---|---|---|---|\n", S.seeds, S.seed, S.seed + S.seeds - 1, H, LAYERS * H);
        for (int k = 0; k < N_MIXERS; k++) {
            static const int COLS[] = {ORDERING, SEEN, EUCLID, INDEFINITE};
            fprintf(md, "| %s |", mf_mixer_name(MIXERS_RUN[k]));
            for (int c = 0; c < 4; c++)
                fprintf(md, " %s | %s |", per_seed(trained, S.seeds, COLS[c], k, seq[0], sizeof seq[0]),
                        per_seed(at_init, S.seeds, COLS[c], k, seq[1], sizeof seq[1]));
            fprintf(md, "\n");
        }
        fprintf(md, "\nA form orders the tokens when its three values on the token differences are positive and d02 is "
                    "the largest (docs/math.md §19.3: signed, so a negative value of an indefinite form orders nothing).\n");
        fprintf(md, "\n## Controls: the same sequences with the tokens renamed\n\n"
                    "Each seed also trains the three models on the seed form with every value v written as token "
                    "(%d, %d, %d)[v]: the same sequences from the same initialisation, but the order to learn is %d < %d < %d "
                    "in token ids. Where training puts the task's order into the heads' forms, the relabeled models' heads "
                    "order %d, %d, %d about as often as the plain models' heads order 0, 1, 2, and order 0, 1, 2 no more often "
                    "than chance; a head whose three values are positive orders a given order by chance with probability 1/3 "
                    "(exactly one token lies between the other two). Per seed, with the mean ± sd over the seeds; \"init\": "
                    "the same models before training; Welch: whether the trained count differs from the count at "
                    "initialisation at the 5%% level.\n\n"
                    "| mixer | plain task: layer-0 heads ordering 0, 1, 2 | at init | Welch | chance: a third of the heads with "
                    "three positive values | relabeled task: heads ordering %d, %d, %d | at init | Welch | relabeled task: "
                    "heads ordering 0, 1, 2 | on LN1(e + p), plain: 0, 1, 2 | relabeled: %d, %d, %d | relabeled: 0, 1, 2 |\n"
                    "|---|---|---|---|---|---|---|---|---|---|---|---|\n",
                SORT_RELABEL[0], SORT_RELABEL[1], SORT_RELABEL[2], SORT_RELABEL[0], SORT_RELABEL[1], SORT_RELABEL[2],
                SORT_RELABEL[0], SORT_RELABEL[1], SORT_RELABEL[2], SORT_RELABEL[0], SORT_RELABEL[1], SORT_RELABEL[2],
                SORT_RELABEL[0], SORT_RELABEL[1], SORT_RELABEL[2]);
        for (int k = 0; k < N_MIXERS; k++) {
            /* the columns: a claim after training or at initialisation, or Welch's test of the claim before */
            enum { TRAINED, INIT, WELCH };
            static const struct { int which, kind; } COLS[] = {
                {ORDERING, TRAINED}, {ORDERING, INIT}, {ORDERING, WELCH}, {POSITIVE, TRAINED}, {RL_ORDERING, TRAINED},
                {RL_ORDERING, INIT}, {RL_ORDERING, WELCH}, {RL_ORDERING_PLAIN, TRAINED}, {SEEN, TRAINED}, {RL_SEEN, TRAINED},
                {RL_SEEN_PLAIN, TRAINED}};
            fprintf(md, "| %s |", mf_mixer_name(MIXERS_RUN[k]));
            for (int c = 0; c < (int)(sizeof COLS / sizeof COLS[0]); c++) {
                int which = COLS[c].which;
                const claims *from = COLS[c].kind == INIT ? at_init : trained;
                stat_summary st = claim_stats(from, S.seeds, which, k, which == POSITIVE ? 1.0 / 3 : 1);
                if (COLS[c].kind == WELCH) {
                    int w = welch_differs(st, claim_stats(at_init, S.seeds, which, k, 1));
                    fprintf(md, " %s |", w < 0 ? "-" : w ? "differs" : "same");
                } else if (which == POSITIVE) fprintf(md, " %.2f ± %.2f |", st.mean, isfinite(st.sd) ? st.sd : 0.0);
                else fprintf(md, " %s (%.1f ± %.1f) |", per_seed(from, S.seeds, which, k, seq[0], sizeof seq[0]), st.mean,
                             isfinite(st.sd) ? st.sd : 0.0);
            }
            fprintf(md, "\n");
        }
        fprintf(md, "\n## Next to the seed's claims\n\n");
        fprintf(md, "1. *\"Induced distances between the embeddings for each token ... note how the first head is clearly "
                    "encoding for the sort order.\"* Here a head orders the tokens when, under its form, the three values are "
                    "positive and 0 and 2 are the farthest pair (1 lies between them; docs/math.md §19.3). Layer 0 heads that do: sdpa %d of %d, metric %d of %d, quadratic %d "
                    "of %d; the Euclidean embedding distances order them for sdpa: %s, metric: %s, quadratic: %s "
                    "(table above; over the seeds, in the table of the claims). Which head does it depends on the seed of the "
                    "run: heads are interchangeable. The token "
                    "embeddings move little from their N(0, 1) initialisation in %d steps at lr 1e-3 (the three models start "
                    "from the same one, hence their nearly equal Euclidean distances): the ordering, where there is one, is "
                    "in the heads' forms. Over the %d seeds (the controls' table), layer-0 heads ordering the task's order, "
                    "after training / at initialisation / by chance, and the same with the tokens renamed:",
                ordering_heads[0], H, ordering_heads[1], H, ordering_heads[2], H, ordered(dist[0][0]) ? "yes" : "no",
                ordered(dist[1][0]) ? "yes" : "no", ordered(dist[2][0]) ? "yes" : "no", sd->steps, S.seeds);
        for (int k = 0; k < N_MIXERS; k++) {
            stat_summary tr = claim_stats(trained, S.seeds, ORDERING, k, 1), in = claim_stats(at_init, S.seeds, ORDERING, k, 1);
            stat_summary rt = claim_stats(trained, S.seeds, RL_ORDERING, k, 1), ri = claim_stats(at_init, S.seeds, RL_ORDERING, k, 1);
            int w = welch_differs(tr, in), rw = welch_differs(rt, ri);
            fprintf(md, "%s %s %.1f / %.1f / %.1f (%s), renamed %.1f / %.1f (%s)", k ? ";" : "", mf_mixer_name(MIXERS_RUN[k]),
                    tr.mean, in.mean, claim_stats(trained, S.seeds, POSITIVE, k, 1.0 / 3).mean,
                    w < 0 ? "one seed: no test" : w ? "training changed it significantly" : "not significantly different",
                    rt.mean, ri.mean, rw < 0 ? "no test" : rw ? "differs" : "not significantly different");
        }
        fprintf(md, ". A claim that a trained head encodes the sort order needs the trained count above both its count at "
                    "initialisation and chance, and the renamed task's order to follow the renaming.\n");
        fprintf(md, "2. *\"Scaled dot product doesn't really have an analogue to this.\"* It has one: its D x D form "
                    "Wq_h^T Wk_h induces the same kind of quadratic form on token differences, from its symmetric part; "
                    "the figures use it. But that form is far from symmetric (asymmetry up to %.2f for the dk x dk form), so "
                    "the antisymmetric part, which a distance cannot show, carries a good share of sdpa's scores.\n",
                max_asym[0]);
        fprintf(md, "3. *\"Scores tables, which we can compare.\"* The score tables of the fixed input are above for all three "
                    "mixers; both kinds of model reach the same loss (point 5), with different-looking tables: a metric head's "
                    "table is symmetric before the mask, sdpa's is not.\n");
        fprintf(md, "4. *\"In case of metric attention, they are metric tensors; in case of scaled dot product, we use WqWk.T "
                    "as an analogue.\"* The metric mixer here builds M_h in the %s form (docs/math.md §9.10%s): the "
                    "learned M_h are symmetric by construction (asymmetry 0 in every head) and indefinite in %d of %d heads "
                    "(eigenvalues of both signs)%s. sdpa's Wq Wk^T is not symmetric (%d of %d heads indefinite in "
                    "its symmetric part). Head by head, the D x D forms of the two separately trained models do not match: "
                    "the best |cosine| between a metric head and any sdpa head of the same layer is %.2f. The unconstrained "
                    "quadratic mixer, which could learn a symmetric M, does not (asymmetry up to %.2f).\n",
                S.metric_form, strcmp(S.metric_form, "softmax_tril") == 0 ? ", the seed's M = S S^T" : "", indefinite[1],
                LAYERS * H, indefinite[1] ? ": symmetric bilinear forms, not metrics in the strict (positive-definite) sense"
                : ": metrics, as the seed's construction makes them", indefinite[0], LAYERS * H, max_cos, max_asym[2]);
        fprintf(md, "5. *Loss \"not much difference\"* (the seed's next-token comparison; its sorter reports no numbers). "
                    "On the seed form sdpa reaches %.1f%% and metric %.1f%% token accuracy (held-out loss %.4f vs %.4f), "
                    "both near the %.1f%% ceiling; on the solvable form %.1f%% vs %.1f%%, with %lld vs %lld parameters.\n",
                sd->acc, me->acc, sd->eval_loss, me->eval_loss, SEED_CEILING, runs[SOLVABLE_FORM][0].acc, runs[SOLVABLE_FORM][1].acc,
                (long long)mf_param_values(sd->ctx, 1), (long long)mf_param_values(me->ctx, 1));
    }
    close_out(md, path);
    printf("wrote %s/report.md, embeddings.svg, scores_*.svg, forms_head.svg, forms_model.svg, loss.svg; %s (%.0f s)\n", S.out,
           n_png == N_FIGURES ? "the same as .png through gnuplot"
           : gnuplot_found() ? "gnuplot failed on some figures: fewer PNG (see the warnings)"
                             : "no gnuplot: no PNG (the .gp scripts next to the figures draw them)",
           mf_time() - t0);
    for (int f = 0; f < N_FORMS; f++)
        for (int k = 0; k < N_MIXERS; k++) { free(runs[f][k].loss); mf_model_free(runs[f][k].model); mf_ctx_free(runs[f][k].ctx); }
    for (int k = 0; k < N_MIXERS; k++) { free(scores[k]); free(probs[k]); }
    free(at_init); free(trained); free(accs); free(losses);
    return 0;
}
