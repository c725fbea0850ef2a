/* The feedback transformer (docs/math.md §8): the feedback attention op against a plain
 * reference and by finite differences, both model variants by finite differences and against
 * PyTorch goldens of the labml seed (tests/parity/goldens_feedback.py: logits, loss, every
 * parameter gradient), generation with the kept memory == the full forward, and bad input. */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#include "mf_test.h"
#include "gradcheck.h"
#include "model_grad.h"
#include "golden.h"
#include <stdlib.h>
#include <string.h>

#define P_ROWS 4096 /* rows of the model's relative tables */

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static float rng_unif(uint64_t *s, float lo, float hi) { return lo + (hi - lo) * (float)(rng_next(s) >> 40) / 16777216.0f; }
static void fill(uint64_t *s, float *x, int64_t n, float lo, float hi) { int64_t i; for (i = 0; i < n; i++) x[i] = rng_unif(s, lo, hi); }

/* ---- the op against a plain double-precision reference ---------------------------------------- */
static void check_attention_reference(int B, int H, int d, int n, int P) {
    mf_ctx *ctx = mf_ctx_new(1);
    int sq[3], sk[4], su[2], sr[3], ss[2], b, h, j, i;
    float *buf[6];
    int64_t sizes[6];
    mf_tensor *t[6], *out;
    uint64_t s = 77 + (uint64_t)n;
    double worst = 0;
    sq[0] = B; sq[1] = H; sq[2] = d;
    sk[0] = B; sk[1] = H; sk[2] = n; sk[3] = d;
    su[0] = H; su[1] = d; sr[0] = P; sr[1] = H; sr[2] = d; ss[0] = P; ss[1] = H;
    sizes[0] = (int64_t)B * H * d; sizes[1] = sizes[2] = (int64_t)B * H * n * d; sizes[3] = (int64_t)H * d;
    sizes[4] = (int64_t)P * H * d; sizes[5] = (int64_t)P * H;
    for (i = 0; i < 6; i++) { buf[i] = (float *)malloc((size_t)sizes[i] * sizeof(float)); fill(&s, buf[i], sizes[i], -1.5f, 1.5f); }
    t[0] = mf_from(ctx, 3, sq, buf[0]); t[1] = mf_from(ctx, 4, sk, buf[1]); t[2] = mf_from(ctx, 4, sk, buf[2]);
    t[3] = mf_from(ctx, 2, su, buf[3]); t[4] = mf_from(ctx, 3, sr, buf[4]); t[5] = mf_from(ctx, 2, ss, buf[5]);
    out = mf_feedback_attention(ctx, t[0], t[1], t[2], t[3], t[4], t[5], 0.37f, 0.0f);
    MFT_CHECK(out != NULL && out->ndim == 3 && out->shape[2] == d);
    for (b = 0; out && b < B; b++)
        for (h = 0; h < H; h++) {
            double sc[200], mx = -1e300, sum = 0;
            const float *q = buf[0] + ((int64_t)b * H + h) * d, *u = buf[3] + (int64_t)h * d;
            for (j = 0; j < n; j++) { /* slot j reads row P - n + j */
                const float *k = buf[1] + (((int64_t)b * H + h) * n + j) * d, *r = buf[4] + ((int64_t)(P - n + j) * H + h) * d;
                double a = buf[5][(int64_t)(P - n + j) * H + h];
                for (i = 0; i < d; i++) a += ((double)q[i] + u[i]) * k[i] + (double)q[i] * r[i];
                sc[j] = 0.37 * a;
                if (sc[j] > mx) mx = sc[j];
            }
            for (j = 0; j < n; j++) sum += sc[j] = exp(sc[j] - mx);
            for (i = 0; i < d; i++) {
                double o = 0;
                for (j = 0; j < n; j++) o += sc[j] / sum * buf[2][(((int64_t)b * H + h) * n + j) * d + i];
                o = fabs(o - out->data[((int64_t)b * H + h) * d + i]);
                if (o > worst) worst = o;
            }
        }
    printf("    B %d H %d dk %d n %d P %d: max |out - reference| %.2e\n", B, H, d, n, P, worst);
    MFT_CHECK(worst < 2e-5);
    MFT_CHECK(mf_ok(ctx));
    for (i = 0; i < 6; i++) free(buf[i]);
    mf_ctx_free(ctx);
}
static void test_attention_matches_reference(void) {
    check_attention_reference(2, 3, 3, 5, 7);     /* scalar tails */
    check_attention_reference(2, 2, 20, 70, 75);  /* vector + tail, two blocks of the online softmax */
    check_attention_reference(1, 1, 16, 1, 4096); /* one slot: the last table row */
}

/* ---- the op by finite differences -------------------------------------------------------------- */
static int fba_n;
static mf_tensor *build_fba(mf_ctx *ctx, mf_tensor **in, void *user) {
    (void)user;
    return mf_feedback_attention(ctx, in[0], in[1], in[2], in[3], in[4], in[5], 1.0f / sqrtf((float)in[0]->shape[2]), 0.0f);
}
static void check_attention_grad(int B, int H, int d, int n, int P) {
    gc_spec s[6];
    char name[64];
    fba_n = n;
    s[0] = gc_in(3, B, H, d, 0);
    s[1] = gc_range(gc_in(4, B, H, n, d), -2, 2, 0);
    s[2] = gc_in(4, B, H, n, d);
    s[3] = gc_in(2, H, d, 0, 0);           /* u, R, S non-zero */
    s[4] = gc_in(3, P, H, d, 0);
    s[5] = gc_range(gc_in(2, P, H, 0, 0), -2, 2, 0);
    snprintf(name, sizeof name, "feedback_attention dk %d n %d", d, n);
    MFT_CHECK(GC_OK(gc_check(name, 6, s, build_fba, NULL, NULL)));
}
static void test_attention_grad(void) {
    check_attention_grad(2, 2, 3, 4, 6);
    check_attention_grad(1, 2, 17, 66, 68);
}

/* ---- whole models ------------------------------------------------------------------------------ */
/* mg_tiny with max_seq 6 */
static mf_model_config tiny(mf_mixer_kind mixer) {
    mf_model_config c = mg_tiny(mixer);
    c.max_seq = 6;
    return c;
}
/* u, the last `rows` rows of R and S, and the layer weights w away from their constant init */
static void perturb(mf_model *m, int rows, uint64_t seed) {
    const mf_model_config *c = mf_model_get_config(m);
    mf_ctx *ctx = m->ctx;
    int l, H = c->n_heads, d = c->d_model / c->n_heads;
    uint64_t s = seed;
    for (l = 0; l < c->n_layers; l++) {
        char nm[64];
        mf_tensor *u, *r, *sv;
        snprintf(nm, sizeof nm, "layers.%d.attn.u", l); u = mf_param_find(ctx, nm);
        snprintf(nm, sizeof nm, "layers.%d.attn.r", l); r = mf_param_find(ctx, nm);
        snprintf(nm, sizeof nm, "layers.%d.attn.s", l); sv = mf_param_find(ctx, nm);
        if (!u || !r || !sv) return;
        fill(&s, u->data, u->ne, -0.8f, 0.8f);
        fill(&s, r->data + (int64_t)(P_ROWS - rows) * H * d, (int64_t)rows * H * d, -0.8f, 0.8f);
        fill(&s, sv->data + (int64_t)(P_ROWS - rows) * H, (int64_t)rows * H, -0.8f, 0.8f);
    }
    fill(&s, mf_param_find(ctx, "feedback.weights")->data, c->n_layers + 1, -1.0f, 1.5f);
}
static void perturb_model(mf_ctx *ctx, mf_model *m) {
    (void)ctx;
    perturb(m, mf_model_get_config(m)->max_seq, 9);
}
/* and the R, S tables frozen: 4096-row tables, whose sampled elements would miss the rows a step reads */
static void perturb_model_frozen(mf_ctx *ctx, mf_model *m) {
    int l;
    perturb_model(ctx, m);
    for (l = 0; l < mf_model_get_config(m)->n_layers; l++) {
        mf_param_set_trainable(MF__FB_L(m, l)->rel_r, 0);
        mf_param_set_trainable(MF__FB_L(m, l)->rel_s, 0);
    }
}
static void check_model_grad(mf_mixer_kind mixer) {
    const char *what = mf_mixer_name(mixer);
    mg_case c;
    memset(&c, 0, sizeof c);
    c.cfg = tiny(mixer);
    /* every element of every parameter but R and S (the op's check covers those elementwise; the
       directional checks and the goldens cover the model's use of them); a sample under ASan */
    c.prepare = perturb_model_frozen;
    MFT_CHECK(mg_check_logits(what, &c));
    c.prepare = perturb_model;
    c.cfg.dropout = 0.2f; /* through the loss, with dropout on every branch: directional */
    c.cfg.ffn_act = MF_ACT_SILU;
    MFT_CHECK(mg_check_loss(what, "loss + dropout", &c, 6));
    c.cfg.dropout = 0.0f; /* one layer, no positions */
    c.cfg.n_layers = 1;
    c.cfg.pos = MF_POS_NONE;
    MFT_CHECK(mg_check_loss(what, "1 layer loss", &c, 4));
    mf_model_free(c.model);
}
static void test_grad_feedback(void) { check_model_grad(MF_MIXER_FEEDBACK); }
static void test_grad_feedback_kv(void) { check_model_grad(MF_MIXER_FEEDBACK_KV); }

/* ---- PyTorch parity ---------------------------------------------------------------------------- */
static void check_golden(const char *variant) {
    static const char *const pos_names[] = {"none", "learned", "sinusoidal"};
    char path[128], buf[64];
    golden g;
    const char *why;
    const gt_entry *e;
    mf_ctx *ctx = mf_ctx_new(1);
    mf_model_config cfg = mf_model_config_default();
    mf_model *m = NULL;
    mf_tensor *logits, *loss;
    int32_t ids[64], targets[64];
    int ok = 1, B, T, rows, i, shape[3], n_bad = 0;
    double worst = 0, err;
    snprintf(path, sizeof path, "tests/goldens/fb_%s.safetensors", variant);
    if ((why = golden_open(&g, path))) { printf("    %s: %s\n", path, why); MFT_CHECK(0); mf_ctx_free(ctx); return; }
    MFT_CHECK(mf_load_meta(path, "cfg.mixer", buf, sizeof buf) > 0 && strcmp(buf, variant) == 0);
    MFT_CHECK(mf_load_meta(path, "cfg.pos", buf, sizeof buf) > 0 && strcmp(buf, pos_names[MF_POS_NONE]) == 0);
    MFT_CHECK(mf_load_meta(path, "cfg.ffn_act", buf, sizeof buf) > 0 && strcmp(buf, "relu") == 0);
    cfg.mixer = (mf_mixer_kind)mf_mixer_from_name(variant);
    cfg.pos = MF_POS_NONE; cfg.ffn_act = MF_ACT_RELU;
    cfg.vocab = meta_int(path, "cfg.vocab", &ok); cfg.d_model = meta_int(path, "cfg.d_model", &ok);
    cfg.n_heads = meta_int(path, "cfg.n_heads", &ok); cfg.n_layers = meta_int(path, "cfg.n_layers", &ok);
    cfg.d_ff = meta_int(path, "cfg.d_ff", &ok); cfg.max_seq = meta_int(path, "cfg.max_seq", &ok);
    B = meta_int(path, "B", &ok); T = meta_int(path, "T", &ok); rows = meta_int(path, "rel_rows", &ok);
    MFT_CHECK(ok && B * T <= 64);
    if (!ok || B * T > 64 || !(m = mf_model_new(ctx, &cfg))) { MFT_CHECK(m != NULL); goto done; }
    /* the weights by name; R and S hold only their last `rows` rows in the file */
    for (i = 0; i < mf_param_tensors(ctx); i++) {
        mf_tensor *p = mf_param_at(ctx, i);
        int tail = strstr(p->name, "attn.r") || strstr(p->name, "attn.s");
        int64_t skip = tail ? p->ne - p->ne / P_ROWS * rows : 0;
        e = golden_find(&g, "param.", p->name);
        if (!e || e->i32 || e->ne != p->ne - skip) { printf("    param.%s missing or mis-sized\n", p->name); MFT_CHECK(0); goto done; }
        golden_floats(&g, e, p->data + skip);
    }
    e = golden_find(&g, "", "ids"); MFT_CHECK(e && e->ne == B * T); if (!e) goto done; golden_ints(&g, e, ids);
    e = golden_find(&g, "", "targets"); MFT_CHECK(e && e->ne == B * T); if (!e) goto done; golden_ints(&g, e, targets);
    logits = mf_model_forward(m, ids, B, T);
    e = golden_find(&g, "", "logits");
    shape[0] = B; shape[1] = T; shape[2] = cfg.vocab;
    MFT_CHECK(logits && e && same_shape(e, 3, shape));
    if (!logits || !e) goto done;
    err = golden_rel_err(&g, e, logits->data, 0.0);
    printf("    %-12s logits rel err %.2e\n", variant, err);
    MFT_CHECK(err <= 1e-4);
    mf_reset(ctx);
    loss = mf_model_loss(m, ids, targets, B, T);
    e = golden_find(&g, "", "loss");
    MFT_CHECK(loss && e);
    if (!loss || !e) goto done;
    err = golden_rel_err(&g, e, loss->data, 0.0);
    printf("    %-12s loss   rel err %.2e\n", variant, err);
    MFT_CHECK(err <= 1e-4);
    mf_zero_grad(ctx);
    MFT_CHECK(mf_backward(ctx, loss) == 0);
    for (i = 0; i < mf_param_tensors(ctx); i++) {
        mf_tensor *p = mf_param_at(ctx, i);
        int tail = strstr(p->name, "attn.r") || strstr(p->name, "attn.s");
        int64_t skip = tail ? p->ne - p->ne / P_ROWS * rows : 0, k;
        e = golden_find(&g, "grad.", p->name);
        if (!e || e->ne != p->ne - skip) { printf("    grad.%s missing\n", p->name); MFT_CHECK(0); continue; }
        err = golden_rel_err(&g, e, p->grad + skip, 1.0);
        for (k = 0; k < skip; k++) if (p->grad[k] != 0.0f) err = 1.0; /* rows no step reads */
        if (err > worst) worst = err;
        if (!(err <= 1e-4)) { n_bad++; printf("    grad.%-28s rel err %.3g\n", p->name, err); }
    }
    printf("    %-12s worst parameter gradient rel err %.2e (%d tensors)\n", variant, worst, mf_param_tensors(ctx));
    MFT_CHECK(n_bad == 0);
    MFT_CHECK(mf_ok(ctx));
    if (!mf_ok(ctx)) printf("    %s\n", mf_error(ctx));
done:
    mf_model_free(m);
    mf_ctx_free(ctx);
    golden_close(&g);
}
static void test_parity_feedback(void) { check_golden("feedback"); }
static void test_parity_feedback_kv(void) { check_golden("feedback_kv"); }

/* ---- generation keeps the memory: one step per token, the full forward's logits ------------------ */
static void check_generation(mf_mixer_kind mixer, mf_pos_kind pos) {
    enum { L = 12, V = 11 };
    mf_ctx *ctx = mf_ctx_new(3);
    mf_model_config cfg = mf_model_config_default();
    mf_model *m;
    int32_t seq[L];
    float *full = (float *)malloc(sizeof(float) * L * V);
    double worst = 0;
    int i, start, v;
    uint64_t s = 5;
    cfg.vocab = V; cfg.d_model = 16; cfg.n_heads = 4; cfg.n_layers = 3; cfg.d_ff = 24; cfg.max_seq = L;
    cfg.mixer = mixer; cfg.pos = pos;
    m = mf_model_new(ctx, &cfg);
    MFT_CHECK(m != NULL && full != NULL);
    if (!m || !full) goto done;
    perturb(m, L, 21);
    for (i = 0; i < L; i++) seq[i] = (int32_t)(rng_next(&s) % V);
    mf_set_grad(ctx, 0);
    {
        mf_tensor *lg = mf_model_forward(m, seq, 1, L);
        MFT_CHECK(lg != NULL);
        if (!lg) goto done;
        memcpy(full, lg->data, sizeof(float) * L * V);
        mf_reset(ctx);
    }
    for (start = 1; start <= 4; start += 3) { /* prompts of 1 and 4 tokens, then one token per call */
        mf_tensor *lg = mf__model_run(m, seq, 1, start, 0, 1);
        MFT_CHECK(lg != NULL);
        for (i = 0; lg && i < start * V; i++) if (fabs(lg->data[i] - full[i]) > worst) worst = fabs(lg->data[i] - full[i]);
        mf_reset(ctx);
        for (i = start; i < L; i++) {
            lg = mf__model_run(m, seq + i, 1, 1, i, 1);
            MFT_CHECK(lg != NULL);
            if (!lg) break;
            for (v = 0; v < V; v++) if (fabs(lg->data[v] - full[i * V + v]) > worst) worst = fabs(lg->data[v] - full[i * V + v]);
            mf_reset(ctx);
        }
    }
    printf("    %s (pos %d): max |generation - full forward| of the logits %.2e\n", mf_mixer_name(mixer), (int)pos, worst);
    MFT_CHECK(worst < 1e-4);
    MFT_CHECK(mf_ok(ctx));
    if (!mf_ok(ctx)) printf("    %s\n", mf_error(ctx));
done:
    free(full);
    mf_model_free(m);
    mf_ctx_free(ctx);
}
static void test_generation_matches_forward(void) {
    check_generation(MF_MIXER_FEEDBACK, MF_POS_LEARNED);
    check_generation(MF_MIXER_FEEDBACK_KV, MF_POS_LEARNED);
    check_generation(MF_MIXER_FEEDBACK_KV, MF_POS_NONE);
}

/* ---- a one-token sequence: no memory, no attention; the attention weights get zero gradients ----- */
static void test_one_token(void) {
    int k;
    for (k = MF_MIXER_FEEDBACK; k <= MF_MIXER_FEEDBACK_KV; k++) {
        mf_ctx *ctx = mf_ctx_new(4);
        mf_model_config cfg = tiny((mf_mixer_kind)k);
        mf_model *m = mf_model_new(ctx, &cfg);
        mf_tensor *loss, *wq;
        int32_t id = 3, tg = 5;
        int64_t i;
        float gmax = 0;
        loss = mf_model_loss(m, &id, &tg, 1, 1);
        MFT_CHECK(loss != NULL && mf_backward(ctx, loss) == 0);
        wq = mf_param_find(ctx, "layers.0.attn.q.weight");
        MFT_CHECK(wq != NULL);
        for (i = 0; wq && i < wq->ne; i++) if (fabsf(wq->grad[i]) > gmax) gmax = fabsf(wq->grad[i]);
        MFT_CHECK(gmax == 0.0f);
        MFT_CHECK(fabsf(mf_param_find(ctx, "layers.1.ffn.fc1.weight")->grad[0]) > 0.0f ||
                  fabsf(mf_param_find(ctx, "layers.1.ffn.fc1.weight")->grad[1]) > 0.0f);
        MFT_CHECK(mf_ok(ctx));
        mf_model_free(m);
        mf_ctx_free(ctx);
    }
}

/* ---- the thread count changes nothing: loss and every gradient bit-identical ------------------------ */
static void test_threads_bit_identical(void) {
    enum { TB = 8, TT = 48 };
    int k, i;
    for (k = MF_MIXER_FEEDBACK; k <= MF_MIXER_FEEDBACK_KV; k++) {
        float loss[2] = {0, 0}, *grads[2] = {NULL, NULL};
        int64_t n = 0;
        int nt;
        for (nt = 1; nt <= 2; nt++) {
            mf_ctx *ctx = mf_ctx_new(8);
            mf_model_config cfg = mf_model_config_default();
            mf_model *m;
            mf_tensor *l;
            int32_t ids[TB * TT], tg[TB * TT];
            uint64_t s = 3;
            mf_set_threads(ctx, nt);
            cfg.vocab = 17; cfg.d_model = 128; cfg.n_heads = 4; cfg.n_layers = 2; cfg.d_ff = 256; cfg.max_seq = TT;
            cfg.mixer = (mf_mixer_kind)k; cfg.dropout = 0.1f;
            m = mf_model_new(ctx, &cfg);
            MFT_CHECK(m != NULL);
            if (!m) { mf_ctx_free(ctx); continue; }
            perturb(m, TT, 4);
            for (i = 0; i < TB * TT; i++) { ids[i] = (int32_t)(rng_next(&s) % 17); tg[i] = (int32_t)(rng_next(&s) % 17); }
            l = mf_model_loss(m, ids, tg, TB, TT);
            MFT_CHECK(l != NULL && mf_backward(ctx, l) == 0);
            n = mf_param_count(ctx);
            loss[nt - 1] = l ? l->data[0] : NAN;
            grads[nt - 1] = (float *)malloc((size_t)n * sizeof(float));
            if (grads[nt - 1]) memcpy(grads[nt - 1], mf_param_grads(ctx), (size_t)n * sizeof(float));
            mf_model_free(m);
            mf_ctx_free(ctx);
        }
        MFT_CHECK(memcmp(&loss[0], &loss[1], sizeof(float)) == 0);
        MFT_CHECK(grads[0] && grads[1] && memcmp(grads[0], grads[1], (size_t)n * sizeof(float)) == 0);
        free(grads[0]); free(grads[1]);
    }
}

/* ---- bad input: clear errors, no crash ----------------------------------------------------------- */
static void expect_error(mf_ctx *ctx, const char *what) {
    MFT_CHECK(!mf_ok(ctx));
    MFT_CHECK(strstr(mf_error(ctx), what) != NULL);
    if (!strstr(mf_error(ctx), what)) printf("    expected \"%s\" in: %s\n", what, mf_error(ctx));
}
static void test_bad_input(void) {
    int32_t ids[16] = {0};
    int k;
    for (k = MF_MIXER_FEEDBACK; k <= MF_MIXER_FEEDBACK_KV; k++) {
        mf_model_config cfg = tiny((mf_mixer_kind)k);
        mf_ctx *ctx = mf_ctx_new(1);
        mf_model *m = mf_model_new(ctx, &cfg);
        MFT_CHECK(m != NULL);
        /* a sequence longer than the stack (max_seq) */
        MFT_CHECK(mf_model_forward(m, ids, 1, cfg.max_seq + 1) == NULL);
        expect_error(ctx, "max_seq");
        mf_model_free(m);
        mf_ctx_free(ctx);
        /* the stack the direct way: more memory slots than max_seq */
        ctx = mf_ctx_new(1);
        m = mf_model_new(ctx, &cfg);
        {
            int shape[3];
            mf_tensor *x;
            shape[0] = 1; shape[1] = cfg.max_seq + 1; shape[2] = cfg.d_model;
            x = mf_new(ctx, 3, shape);
            MFT_CHECK(mf__fb_run(m, x, 0, 0) == NULL);
            expect_error(ctx, "raise max_seq");
        }
        mf_model_free(m);
        mf_ctx_free(ctx);
        /* max_seq beyond the P = 4096 rows of the tables */
        ctx = mf_ctx_new(1);
        cfg.max_seq = 4097;
        MFT_CHECK(mf_model_new(ctx, &cfg) == NULL);
        expect_error(ctx, "max_seq <= 4096");
        mf_ctx_free(ctx);
        cfg.max_seq = 6;
        /* generation must continue where it stopped */
        ctx = mf_ctx_new(1);
        m = mf_model_new(ctx, &cfg);
        mf_set_grad(ctx, 0);
        MFT_CHECK(mf__model_run(m, ids, 1, 2, 0, 1) != NULL);
        mf_reset(ctx);
        MFT_CHECK(mf__model_run(m, ids, 1, 1, 3, 1) == NULL);
        expect_error(ctx, "generation continues after 2 tokens");
        mf_model_free(m);
        mf_ctx_free(ctx);
        /* a device context is accepted (the CUDA backend runs both variants: test_cuda_feedback.cpp);
           a stand-in backend, never called */
        {
            mf__backend fake;
            memset(&fake, 0, sizeof fake);
            ctx = mf_ctx_new(1);
            ctx->be = &fake;
            MFT_CHECK(mf_model_check(ctx, &cfg) == 0);
            ctx->be = NULL;
            MFT_CHECK(mf_ok(ctx));
            mf_ctx_free(ctx);
        }
    }
    { /* the op's shape checks */
        mf_ctx *ctx = mf_ctx_new(1);
        int sq[3] = {1, 2, 4}, sk[4] = {1, 2, 5, 4}, su[2] = {2, 4}, sr[3] = {4, 2, 4}, ss[2] = {4, 2};
        mf_tensor *q = mf_new(ctx, 3, sq), *kk = mf_new(ctx, 4, sk), *u = mf_new(ctx, 2, su), *r = mf_new(ctx, 3, sr);
        mf_tensor *s = mf_new(ctx, 2, ss);
        MFT_CHECK(mf_feedback_attention(ctx, q, kk, kk, u, r, s, 0.5f, 0.0f) == NULL); /* 5 slots > P = 4 */
        expect_error(ctx, "n must be <= P");
        mf_ctx_free(ctx);
        ctx = mf_ctx_new(1);
        sk[2] = 3;
        q = mf_new(ctx, 3, sq); kk = mf_new(ctx, 4, sk); r = mf_new(ctx, 3, sr); s = mf_new(ctx, 2, ss);
        MFT_CHECK(mf_feedback_attention(ctx, q, kk, kk, r, r, s, 0.5f, 0.0f) == NULL); /* u with the shape of r */
        expect_error(ctx, "[H, dk], [P, H, dk], [P, H]");
        mf_ctx_free(ctx);
    }
}

/* each test with its wall time */
#define RUN(fn) do { double t_ = mf_time(); MFT_RUN(fn); printf("     (%.1f s)\n", mf_time() - t_); } while (0)

int main(void) {
    RUN(test_attention_matches_reference);
    RUN(test_attention_grad);
    RUN(test_grad_feedback);
    RUN(test_grad_feedback_kv);
    RUN(test_parity_feedback);
    RUN(test_parity_feedback_kv);
    RUN(test_generation_matches_forward);
    RUN(test_one_token);
    RUN(test_threads_bit_identical);
    RUN(test_bad_input);
    return mft_finish();
}
