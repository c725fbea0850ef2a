/* test_optim.c - optimizers, learning-rate schedules and gradient clipping (docs/math.md §11).
 *
 * Every optimizer is checked against a separate double-precision reference written from the
 * formulas of docs/math.md §11 / the PyTorch docs (ref_step below), over several steps with a different
 * hand-set gradient each step, plus one step worked out by hand with literal numbers. */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#include "mf_test.h"

#include <string.h>
#ifndef M_PI /* not in strict C99 <math.h> */
#define M_PI 3.14159265358979323846
#endif

/* |a / b - 1| <= tol (b != 0) */
#define REL_NEAR(a, b, tol) MFT_NEAR((double)(a) / (double)(b), 1.0, tol)

/* ---- the reference: one update of n weights, straight from the formulas ----------------------
   The hyperparameters are the float values the library receives, widened to double, so that
   only the arithmetic differs (e.g. 0.999f is 0.99900001287..., not 0.999). */
typedef struct ref_cfg {
    mf_optimizer_kind kind;
    double b1, b2, eps, wd, mu;
    int nesterov;
} ref_cfg;

static ref_cfg ref_from(const mf_optimizer *o) {
    ref_cfg c;
    c.kind = o->kind;
    c.b1 = o->beta1; c.b2 = o->beta2; c.eps = o->eps;
    c.wd = o->weight_decay; c.mu = o->momentum; c.nesterov = o->nesterov;
    return c;
}

/* lr: the scheduled rate of step t; lr_base: the schedule's base rate (labml decay) */
static void ref_step(const ref_cfg *c, double lr, double lr_base, int t, double *w, double *m,
                     double *v, const double *g, int n) {
    int k;
    for (k = 0; k < n; k++) {
        double gk = g[k];
        switch (c->kind) {
        case MF_OPT_ADAM: /* torch.optim.Adam: L2 decay joins the gradient */
        case MF_OPT_ADAMW: { /* torch.optim.AdamW: theta *= 1 - lr_t * wd first */
            double mhat, vhat;
            if (c->kind == MF_OPT_ADAM) gk += c->wd * w[k];
            else w[k] *= 1.0 - lr * c->wd;
            m[k] = c->b1 * m[k] + (1.0 - c->b1) * gk;
            v[k] = c->b2 * v[k] + (1.0 - c->b2) * gk * gk;
            mhat = m[k] / (1.0 - pow(c->b1, t));
            vhat = v[k] / (1.0 - pow(c->b2, t));
            w[k] -= lr * mhat / (sqrt(vhat) + c->eps);
            break;
        }
        case MF_OPT_ADAM_LABML: /* docs/math.md §11.1: eps joins sqrt(v) before the bias correction */
            w[k] *= 1.0 - lr_base * c->wd;
            m[k] = c->b1 * m[k] + (1.0 - c->b1) * gk;
            v[k] = c->b2 * v[k] + (1.0 - c->b2) * gk * gk;
            w[k] -= lr * sqrt(1.0 - pow(c->b2, t)) / (1.0 - pow(c->b1, t)) * m[k] / (sqrt(v[k]) + c->eps);
            break;
        default: /* torch.optim.SGD, dampening 0: buf = g on the first step, then mu*buf + g */
            gk += c->wd * w[k];
            if (c->mu != 0) {
                m[k] = t == 1 ? gk : c->mu * m[k] + gk;
                gk = c->nesterov ? gk + c->mu * m[k] : m[k];
            }
            w[k] -= lr * gk;
            break;
        }
    }
}

/* ---- driver: 4 steps with the gradients below on a 5-element parameter, library vs reference --- */
#define NW 5
#define NSTEPS 4
static const float w_init[NW] = {1.0f, -0.5f, 2.0f, 0.25f, -1.5f};
/* different each step; one element is exactly 0 at step 1 (Adam must not move it: 0 / (0 + eps)) */
static const float grads[NSTEPS][NW] = {
    {0.5f, -1.25f, 2.0f, 0.0f, 0.01f},
    {-1.0f, 0.75f, 1.5f, 0.3f, -0.02f},
    {0.25f, -0.5f, -3.0f, 0.6f, 0.05f},
    {2.0f, 0.1f, 0.5f, -0.4f, -0.01f},
};

static double lr_of(const mf_schedule *s, int t) { return (double)mf_schedule_lr(s, t); }

static void check_against_reference(mf_optimizer opt, const char *what) {
    mf_ctx *ctx = mf_ctx_new(7);
    int shape[1] = {NW}, t, k;
    mf_tensor *p = mf_param(ctx, "p", 1, shape);
    double w[NW], m[NW] = {0}, v[NW] = {0}, g[NW];
    ref_cfg c = ref_from(&opt);
    int bad = 0;
    MFT_CHECK(p != NULL);
    if (!p) { mf_ctx_free(ctx); return; }
    for (k = 0; k < NW; k++) { p->data[k] = w_init[k]; w[k] = w_init[k]; }
    for (t = 1; t <= NSTEPS; t++) {
        for (k = 0; k < NW; k++) { p->grad[k] = grads[t - 1][k]; g[k] = grads[t - 1][k]; }
        MFT_CHECK(mf_optimizer_step(ctx, &opt) == 0);
        MFT_CHECK(mf_optimizer_steps(ctx) == t);
        ref_step(&c, lr_of(&opt.schedule, t), opt.schedule.lr, t, w, m, v, g, NW);
        for (k = 0; k < NW; k++) {
            double tol = 1e-6 * (fabs(w[k]) > 1 ? fabs(w[k]) : 1);
            if (!(fabs(p->data[k] - w[k]) <= tol)) {
                if (!bad) printf("    %s: step %d weight %d is %.9g, reference %.9g\n", what, t, k,
                                 (double)p->data[k], w[k]);
                bad = 1;
            }
        }
    }
    MFT_CHECK(!bad);
    MFT_CHECK(mf_ok(ctx));
    mf_ctx_free(ctx);
}

static mf_optimizer make(mf_optimizer_kind kind, float lr, float wd, float mu, int nesterov) {
    mf_optimizer o = mf_optimizer_default(kind, lr);
    o.weight_decay = wd; o.momentum = mu; o.nesterov = nesterov;
    return o;
}

static void test_adam_reference(void) {
    mf_optimizer o = make(MF_OPT_ADAM, 0.1f, 0.0f, 0, 0);
    check_against_reference(o, "adam");
    o.weight_decay = 0.1f;
    check_against_reference(o, "adam wd 0.1");
    o.beta1 = 0.8f; o.beta2 = 0.95f; o.eps = 1e-3f;
    check_against_reference(o, "adam betas (0.8, 0.95) eps 1e-3 wd 0.1");
}
static void test_adamw_reference(void) {
    mf_optimizer o = mf_optimizer_default(MF_OPT_ADAMW, 0.1f);
    MFT_NEAR(o.weight_decay, 0.01, 1e-9); /* torch's AdamW default */
    check_against_reference(o, "adamw wd 0.01");
    o.weight_decay = 0.0f;
    check_against_reference(o, "adamw wd 0");
    o.weight_decay = 0.5f;
    check_against_reference(o, "adamw wd 0.5");
}
static void test_adam_labml_reference(void) {
    mf_optimizer o = make(MF_OPT_ADAM_LABML, 0.1f, 0.0f, 0, 0);
    check_against_reference(o, "labml");
    o.weight_decay = 0.1f;
    check_against_reference(o, "labml wd 0.1");
    o.eps = 1e-3f;
    check_against_reference(o, "labml wd 0.1 eps 1e-3");
    /* labml's decay uses the BASE lr even when the schedule scales the step */
    o.schedule.kind = MF_SCHED_WARMUP; o.schedule.warmup = 3;
    check_against_reference(o, "labml wd 0.1 warmup 3");
}
static void test_sgd_reference(void) {
    mf_optimizer o = make(MF_OPT_SGD, 0.1f, 0.0f, 0.0f, 0);
    check_against_reference(o, "sgd");
    o.weight_decay = 0.1f;
    check_against_reference(o, "sgd wd 0.1");
    o.momentum = 0.9f; o.weight_decay = 0.0f;
    check_against_reference(o, "sgd momentum 0.9");
    o.weight_decay = 0.1f;
    check_against_reference(o, "sgd momentum 0.9 wd 0.1");
    o.nesterov = 1;
    check_against_reference(o, "sgd nesterov 0.9 wd 0.1");
    o.weight_decay = 0.0f;
    check_against_reference(o, "sgd nesterov 0.9");
}

/* ---- steps worked out by hand (literal numbers) ------------------------------------------- */
static float one_step(mf_optimizer o, float w0, float g, int steps, const float *g_more) {
    mf_ctx *ctx = mf_ctx_new(1);
    int one = 1, s;
    mf_tensor *p = mf_param(ctx, "w", 1, &one);
    float w;
    p->data[0] = w0; p->grad[0] = g;
    mf_optimizer_step(ctx, &o);
    for (s = 1; s < steps; s++) { p->grad[0] = g_more[s - 1]; mf_optimizer_step(ctx, &o); }
    MFT_CHECK(mf_ok(ctx));
    w = p->data[0];
    mf_ctx_free(ctx);
    return w;
}

static void test_by_hand(void) {
    const float g2[1] = {-1.0f};
    /* torch Adam, lr 0.1, w0 = 1, g = 0.5 (first step):
       m = 0.1 * 0.5 = 0.05, v = 0.001 * 0.25 = 0.00025, mhat = 0.05 / 0.1 = 0.5,
       vhat = 0.00025 / 0.001 = 0.25, sqrt(vhat) = 0.5:
       w = 1 - 0.1 * 0.5 / (0.5 + 1e-8) = 0.9000000020: the first step moves by lr * sign(g). */
    MFT_NEAR(one_step(make(MF_OPT_ADAM, 0.1f, 0, 0, 0), 1.0f, 0.5f, 1, NULL), 0.9, 1e-6);
    MFT_NEAR(one_step(make(MF_OPT_ADAM, 0.1f, 0, 0, 0), 1.0f, -3e-4f, 1, NULL), 1.1, 1e-5);
    /* labml, lr 0.1, eps 1e-3, w0 = 1, g = 0.5 (first step):
       step_size = 0.1 * sqrt(1 - 0.999) / (1 - 0.9) = 0.1 * 0.0316228 / 0.1 = 0.0316228
       sqrt(v) = sqrt(0.00025) = 0.0158114, m = 0.05
       w = 1 - 0.0316228 * 0.05 / (0.0158114 + 0.001) = 1 - 0.0940517 = 0.9059483
       = textbook Adam with eps_eff = 1e-3 / sqrt(0.001) = 0.0316228:
         0.1 * 0.5 / (0.5 + 0.0316228) = 0.0940517 */
    {
        mf_optimizer o = make(MF_OPT_ADAM_LABML, 0.1f, 0, 0, 0);
        o.eps = 1e-3f;
        MFT_NEAR(one_step(o, 1.0f, 0.5f, 1, NULL), 0.9059483, 2e-6);
        /* torch Adam with the same eps: 1 - 0.1 * 0.5 / (0.5 + 0.001) = 0.9001996 */
        o.kind = MF_OPT_ADAM;
        MFT_NEAR(one_step(o, 1.0f, 0.5f, 1, NULL), 0.9001996, 2e-6);
    }
    /* AdamW lr 0.1, wd 0.5, w0 = 1, g = 0.5: w = 1 * (1 - 0.05) = 0.95, then - 0.1 -> 0.85.
       Adam (L2) with wd 0.5: g' = 0.5 + 0.5 * 1 = 1.0, first step still moves by lr: 0.9 */
    MFT_NEAR(one_step(make(MF_OPT_ADAMW, 0.1f, 0.5f, 0, 0), 1.0f, 0.5f, 1, NULL), 0.85, 1e-6);
    MFT_NEAR(one_step(make(MF_OPT_ADAM, 0.1f, 0.5f, 0, 0), 1.0f, 0.5f, 1, NULL), 0.9, 1e-6);
    /* labml decoupled decay lr 0.1, wd 0.5: w = 1 * (1 - 0.05) = 0.95, then step (eps 1e-8):
       0.1 * 0.0316228 / 0.1 * 0.05 / 0.0158114 = 0.1 -> 0.85 */
    MFT_NEAR(one_step(make(MF_OPT_ADAM_LABML, 0.1f, 0.5f, 0, 0), 1.0f, 0.5f, 1, NULL), 0.85, 1e-5);
    /* SGD lr 0.1, momentum 0.9, w0 = 1, grads 0.5 then -1:
       t1: buf = 0.5, w = 1 - 0.05 = 0.95; t2: buf = 0.9 * 0.5 - 1 = -0.55, w = 0.95 + 0.055 = 1.005
       nesterov: t1: d = 0.5 + 0.9 * 0.5 = 0.95, w = 0.905;
                 t2: buf = -0.55, d = -1 + 0.9 * -0.55 = -1.495, w = 0.905 + 0.1495 = 1.0545
       plain (momentum 0): 1 - 0.05 + 0.1 = 1.05 */
    MFT_NEAR(one_step(make(MF_OPT_SGD, 0.1f, 0, 0.9f, 0), 1.0f, 0.5f, 2, g2), 1.005, 1e-6);
    MFT_NEAR(one_step(make(MF_OPT_SGD, 0.1f, 0, 0.9f, 1), 1.0f, 0.5f, 2, g2), 1.0545, 1e-6);
    MFT_NEAR(one_step(make(MF_OPT_SGD, 0.1f, 0, 0.0f, 0), 1.0f, 0.5f, 2, g2), 1.05, 1e-6);
    /* SGD with L2 decay 0.1: g' = 0.5 + 0.1 * 1 = 0.6, w = 1 - 0.06 = 0.94 */
    MFT_NEAR(one_step(make(MF_OPT_SGD, 0.1f, 0.1f, 0, 0), 1.0f, 0.5f, 1, NULL), 0.94, 1e-6);
}

/* labml and torch Adam differ by the effective eps = eps / sqrt(1 - b2^t) (docs/math.md §11.1) */
static void test_labml_vs_torch(void) {
    mf_optimizer a = make(MF_OPT_ADAM, 0.1f, 0, 0, 0), l = make(MF_OPT_ADAM_LABML, 0.1f, 0, 0, 0);
    const float gm[2] = {0.2f, -0.1f};
    float wa, wl, wt;
    a.eps = l.eps = 1e-3f;
    wa = one_step(a, 1.0f, 0.5f, 3, gm);
    wl = one_step(l, 1.0f, 0.5f, 3, gm);
    MFT_CHECK(fabs(wa - wl) > 1e-3); /* visibly different with a large eps */
    /* torch Adam with eps 1e-3 / sqrt(1 - b2^t) reproduces labml step by step: check step 1 */
    a.eps = 1e-3f / sqrtf(1.0f - 0.999f);
    wt = one_step(a, 1.0f, 0.5f, 1, NULL);
    MFT_NEAR(wt, one_step(l, 1.0f, 0.5f, 1, NULL), 1e-6);
    /* with eps 1e-8 both are the same to float precision */
    a.eps = l.eps = 1e-8f;
    MFT_NEAR(one_step(a, 1.0f, 0.5f, 3, gm), one_step(l, 1.0f, 0.5f, 3, gm), 1e-5);
}

/* ---- frozen parameters and parameters made after the first step -------------------------- */
static void test_frozen_not_updated(void) {
    mf_optimizer_kind kinds[4] = {MF_OPT_ADAM, MF_OPT_ADAM_LABML, MF_OPT_ADAMW, MF_OPT_SGD};
    int i;
    for (i = 0; i < 4; i++) {
        mf_ctx *ctx = mf_ctx_new(3);
        int sh[1] = {3}, k;
        mf_tensor *a = mf_param(ctx, "a", 1, sh), *b = mf_param(ctx, "b", 1, sh);
        mf_optimizer o = make(kinds[i], 0.1f, 0.1f, 0.9f, 0);
        for (k = 0; k < 3; k++) { a->data[k] = b->data[k] = 1.0f; a->grad[k] = b->grad[k] = 0.5f; }
        mf_param_set_trainable(b, 0);
        MFT_CHECK(mf_optimizer_step(ctx, &o) == 0);
        MFT_CHECK(mf_optimizer_step(ctx, &o) == 0);
        for (k = 0; k < 3; k++) {
            MFT_CHECK(a->data[k] < 1.0f);
            MFT_CHECK(b->data[k] == 1.0f); /* not even weight decay touches it */
        }
        /* unfrozen again: it trains */
        mf_param_set_trainable(b, 1);
        MFT_CHECK(mf_optimizer_step(ctx, &o) == 0);
        MFT_CHECK(b->data[0] < 1.0f);
        mf_ctx_free(ctx);
    }
    /* through autograd: a frozen weight receives no gradient, so it stays put */
    {
        mf_ctx *ctx = mf_ctx_new(3);
        mf_linear_layer fc = mf_linear_layer_new(ctx, "fc", 2, 1, 1);
        mf_optimizer o = mf_optimizer_default(MF_OPT_ADAM, 0.1f);
        int xs[2] = {4, 2}, ys[2] = {4, 1};
        float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[4] = {1, 2, 3, 4}, w0[2];
        mf_param_set_trainable(fc.weight, 0);
        w0[0] = fc.weight->data[0]; w0[1] = fc.weight->data[1];
        {
            float b0 = fc.bias->data[0];
            mf_tensor *loss = mf_mse(ctx, mf_linear(ctx, mf_from(ctx, 2, xs, x), fc.weight, fc.bias),
                                     mf_from(ctx, 2, ys, y));
            MFT_CHECK(mf_backward(ctx, loss) == 0);
            MFT_CHECK(fc.weight->grad[0] == 0.0f && fc.weight->grad[1] == 0.0f);
            MFT_CHECK(mf_optimizer_step(ctx, &o) == 0);
            MFT_CHECK(fc.weight->data[0] == w0[0] && fc.weight->data[1] == w0[1]);
            MFT_CHECK(fc.bias->data[0] != b0);
        }
        MFT_CHECK(mf_ok(ctx));
        mf_ctx_free(ctx);
    }
}

/* A parameter made after the first step: the moment buffers grow (here past the initial 4096
   floats, so they are reallocated) without disturbing the older parameters' moments. */
static void test_param_after_first_step(void) {
    mf_optimizer_kind kinds[4] = {MF_OPT_ADAM, MF_OPT_ADAM_LABML, MF_OPT_ADAMW, MF_OPT_SGD};
    int i;
    for (i = 0; i < 4; i++) {
        mf_ctx *ctx = mf_ctx_new(5);
        int sh[1] = {NW}, big_sh[2] = {100, 100}, t, k, bad = 0;
        mf_tensor *p = mf_param(ctx, "p", 1, sh), *late = NULL, *big = NULL;
        mf_optimizer o = make(kinds[i], 0.1f, 0.0f, 0.9f, 0);
        ref_cfg c = ref_from(&o);
        double w[NW], m[NW] = {0}, v[NW] = {0}, g[NW];
        for (k = 0; k < NW; k++) w[k] = p->data[k] = w_init[k];
        for (t = 1; t <= NSTEPS; t++) {
            if (t == 3) { /* two new parameters between steps 2 and 3 */
                late = mf_param(ctx, "late", 1, sh);
                big = mf_param(ctx, "big", 2, big_sh);
                MFT_CHECK(late && big);
                if (!late || !big) break;
                p = mf_param_find(ctx, "p"); /* the flat buffer may have moved */
                MFT_CHECK(mf_param_count(ctx) >= NW + NW + 10000);
            }
            for (k = 0; k < NW; k++) p->grad[k] = (float)(g[k] = grads[t - 1][k]);
            if (late) {
                for (k = 0; k < NW; k++) late->grad[k] = 1.0f;
                for (k = 0; k < big->ne; k++) big->grad[k] = -1.0f;
            }
            MFT_CHECK(mf_optimizer_step(ctx, &o) == 0);
            ref_step(&c, 0.1, 0.1, t, w, m, v, g, NW);
            for (k = 0; k < NW; k++)
                if (!(fabs(p->data[k] - w[k]) <= 1e-6 * (fabs(w[k]) > 1 ? fabs(w[k]) : 1))) bad = 1;
        }
        MFT_CHECK(!bad); /* the old parameter's moments survived the reallocation */
        if (late && big) {
            /* the new ones moved against their gradient and stayed finite */
            for (k = 0; k < NW; k++) MFT_CHECK(late->data[k] < 0.0f && late->data[k] > -1.0f);
            MFT_CHECK(big->data[0] > 0.0f && big->data[big->ne - 1] > 0.0f && big->data[0] < 1.0f);
            if (kinds[i] == MF_OPT_SGD) {
                /* SGD momentum: a new buffer starts at the gradient (torch: buf = g on the
                   parameter's first step): -0.1 * 1, then -0.1 * (0.9 * 1 + 1) = -0.29 */
                MFT_NEAR(late->data[0], -0.29, 1e-6);
                MFT_NEAR(big->data[9999], 0.29, 1e-6);
            }
        }
        MFT_CHECK(mf_ok(ctx));
        mf_ctx_free(ctx);
    }
}

/* ---- schedules ------------------------------------------------------------------------------ */
static void test_schedule_noam(void) {
    mf_schedule s;
    memset(&s, 0, sizeof s);
    s.kind = MF_SCHED_NOAM; s.lr = 1.0f; s.warmup = 2000; s.d_model = 512;
    /* docs/math.md §11.2: the peak at t = w is lr * D^-0.5 * w^-0.5 */
    REL_NEAR(mf_schedule_lr(&s, 2000), 9.88e-4, 1e-3);
    REL_NEAR(mf_schedule_lr(&s, 2000), 1.0 / sqrt(512.0 * 2000.0), 1e-6);
    MFT_CHECK(mf_schedule_lr(&s, 1999) < mf_schedule_lr(&s, 2000));
    MFT_CHECK(mf_schedule_lr(&s, 2001) < mf_schedule_lr(&s, 2000));
    REL_NEAR(mf_schedule_lr(&s, 1), 1.0 / sqrt(512.0) * pow(2000.0, -1.5), 1e-6);     /* warm-up */
    REL_NEAR(mf_schedule_lr(&s, 1000), 1000.0 / sqrt(512.0) * pow(2000.0, -1.5), 1e-6);
    REL_NEAR(mf_schedule_lr(&s, 8000), 1.0 / sqrt(512.0) / sqrt(8000.0), 1e-6);      /* decay */
    REL_NEAR(mf_schedule_lr(&s, 0), mf_schedule_lr(&s, 1), 1e-7);                    /* t <= 0 */
    s.d_model = 256;
    REL_NEAR(mf_schedule_lr(&s, 2000), 1.40e-3, 2e-3);
    s.d_model = 128;
    REL_NEAR(mf_schedule_lr(&s, 2000), 1.98e-3, 2e-3);
    s.lr = 2.0f;
    REL_NEAR(mf_schedule_lr(&s, 2000), 2.0 / sqrt(128.0 * 2000.0), 1e-6);
}

static void test_schedule_warmup_cosine_constant(void) {
    mf_schedule s;
    memset(&s, 0, sizeof s);
    /* labml AdamWarmup: 1e-8 + t * lr / w while t < w, else lr */
    s.kind = MF_SCHED_WARMUP; s.lr = 1e-3f; s.warmup = 100;
    REL_NEAR(mf_schedule_lr(&s, 1), 1e-8 + 1e-5, 1e-6);
    REL_NEAR(mf_schedule_lr(&s, 99), 1e-8 + 99e-5, 1e-6);
    REL_NEAR(mf_schedule_lr(&s, 100), 1e-3, 1e-6);
    REL_NEAR(mf_schedule_lr(&s, 110), 1e-3, 1e-6);
    /* cosine: lr * t / w, then from lr at t = w down to min_lr at total_steps, then min_lr */
    s.kind = MF_SCHED_COSINE; s.lr = 1e-3f; s.min_lr = 1e-4f; s.warmup = 10; s.total_steps = 110;
    REL_NEAR(mf_schedule_lr(&s, 1), 1e-4, 1e-6);
    REL_NEAR(mf_schedule_lr(&s, 5), 5e-4, 1e-6);
    REL_NEAR(mf_schedule_lr(&s, 10), 1e-3, 1e-6);
    REL_NEAR(mf_schedule_lr(&s, 60), (1e-3 + 1e-4) / 2, 1e-6);                  /* midway */
    REL_NEAR(mf_schedule_lr(&s, 35), 1e-4 + 0.5 * 9e-4 * (1 + cos(M_PI * 0.25)), 1e-6);
    REL_NEAR(mf_schedule_lr(&s, 110), 1e-4, 1e-6);
    REL_NEAR(mf_schedule_lr(&s, 500), 1e-4, 1e-6);
    MFT_CHECK(mf_schedule_lr(&s, 11) < mf_schedule_lr(&s, 10));
    /* constant */
    s.kind = MF_SCHED_CONSTANT; s.lr = 3e-4f;
    REL_NEAR(mf_schedule_lr(&s, 1), 3e-4, 1e-7);
    REL_NEAR(mf_schedule_lr(&s, 123456), 3e-4, 1e-7);
    MFT_CHECK(mf_schedule_lr(NULL, 1) == 0.0f);
}

/* The optimizer uses the schedule with t = 1 at the first step: SGD moves by exactly lr_t * g. */
static void test_schedule_drives_step(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    int one = 1, t;
    mf_tensor *p = mf_param(ctx, "w", 1, &one);
    mf_optimizer o = mf_optimizer_default(MF_OPT_SGD, 0.5f);
    double w = 0.0;
    o.schedule.kind = MF_SCHED_WARMUP; o.schedule.warmup = 4;
    for (t = 1; t <= 6; t++) {
        double lr = t < 4 ? 1e-8 + t * 0.5 / 4 : 0.5;
        p->grad[0] = 1.0f;
        MFT_CHECK(mf_optimizer_step(ctx, &o) == 0);
        w -= lr;
        MFT_NEAR(p->data[0], w, 1e-6);
    }
    MFT_CHECK(mf_optimizer_steps(ctx) == 6);
    mf_ctx_free(ctx);
}

/* ---- clipping --------------------------------------------------------------------------------- */
static void test_clip_grad_norm(void) {
    mf_ctx *ctx = mf_ctx_new(1);
    int s1[1] = {3}, s2[2] = {2, 2}, k;
    mf_tensor *a = mf_param(ctx, "a", 1, s1), *b = mf_param(ctx, "b", 2, s2), *c = mf_param(ctx, "c", 1, s1);
    const float ga[3] = {3, 0, -4}, gb[4] = {1, -2, 2, 4};  /* sum of squares 25 + 25 = 50 */
    double norm = sqrt(50.0), f = 2.0 / (norm + 1e-6);
    float n;
    for (k = 0; k < 3; k++) a->grad[k] = ga[k];
    for (k = 0; k < 4; k++) b->grad[k] = gb[k];
    for (k = 0; k < 3; k++) c->grad[k] = 100.0f;       /* frozen: neither counted nor scaled */
    mf_param_set_trainable(c, 0);
    /* max_norm above the norm: nothing changes, the norm is returned */
    n = mf_clip_grad_norm(ctx, 10.0f);
    MFT_NEAR(n, norm, 1e-6);
    MFT_CHECK(a->grad[0] == 3.0f && b->grad[3] == 4.0f);
    /* max_norm <= 0: only measure */
    MFT_NEAR(mf_clip_grad_norm(ctx, 0.0f), norm, 1e-6);
    MFT_CHECK(a->grad[2] == -4.0f);
    /* clip to 2: every gradient of both tensors scaled by 2 / (norm + 1e-6); pre-clip norm returned */
    n = mf_clip_grad_norm(ctx, 2.0f);
    MFT_NEAR(n, norm, 1e-6);
    for (k = 0; k < 3; k++) MFT_NEAR(a->grad[k], ga[k] * f, 1e-6);
    for (k = 0; k < 4; k++) MFT_NEAR(b->grad[k], gb[k] * f, 1e-6);
    MFT_CHECK(c->grad[0] == 100.0f);
    /* now the norm is just below 2: clipping again leaves it */
    n = mf_clip_grad_norm(ctx, 2.0f);
    MFT_NEAR(n, 2.0 * norm / (norm + 1e-6), 1e-6);
    MFT_NEAR(a->grad[0], ga[0] * f, 1e-6);
    /* hand check: 3 * 2 / 7.0710688 = 0.8485280 */
    MFT_NEAR(a->grad[0], 0.8485280, 1e-6);
    MFT_CHECK(mf_ok(ctx));
    mf_ctx_free(ctx);
}

/* mf_train_update = mf_clip_grad_norm + mf_optimizer_step + mf_zero_grad, bit for bit: two contexts
   with the same parameters (one large enough for several chunks and threads, one frozen, one the
   backward never reaches) and the same gradients each step, for every optimizer, with clipping on
   (max 0.5), off (max 0) and not reached (max 1e9). A NaN gradient updates nothing. */
static void set_grads(mf_ctx *ctx, int step) {
    int i;
    int64_t k;
    for (i = 0; i < mf_param_tensors(ctx); i++) {
        mf_tensor *p = mf_param_at(ctx, i);
        if (i == 3) continue; /* no gradient this step: skipped by the optimizer */
        for (k = 0; k < p->ne; k++) p->grad[k] = (float)((k * 7919 + step * 104729 + i * 31) % 2001 - 1000) * 1e-5f;
    }
}
static void test_train_update_matches_three_calls(void) {
    mf_optimizer_kind kinds[4] = {MF_OPT_ADAM, MF_OPT_ADAM_LABML, MF_OPT_ADAMW, MF_OPT_SGD};
    const float maxes[3] = {0.5f, 0.0f, 1e9f};
    int i, c;
    for (i = 0; i < 4; i++)
        for (c = 0; c < 3; c++) {
            mf_ctx *a = mf_ctx_new(5), *b = mf_ctx_new(5);
            mf_optimizer o = make(kinds[i], 0.01f, 0.1f, 0.9f, 1);
            int sh[4] = {70001, 5, 40000, 9}, step, j;
            int64_t k;
            for (j = 0; j < 4; j++) {
                char nm[16];
                mf_tensor *pa, *pb;
                snprintf(nm, sizeof nm, "p%d", j);
                pa = mf_param(a, nm, 1, &sh[j]); pb = mf_param(b, nm, 1, &sh[j]);
                for (k = 0; k < pa->ne; k++) pa->data[k] = pb->data[k] = (float)((k * 31 + j) % 97) * 0.01f - 0.5f;
            }
            mf_param_set_trainable(mf_param_at(a, 1), 0); mf_param_set_trainable(mf_param_at(b, 1), 0);
            for (step = 0; step < 3; step++) {
                float na, nb;
                set_grads(a, step); set_grads(b, step);
                na = mf_clip_grad_norm(a, maxes[c]);
                MFT_CHECK(mf_optimizer_step(a, &o) == 0);
                mf_zero_grad(a);
                nb = mf_train_update(b, &o, maxes[c]);
                MFT_CHECK(na == nb && na > 0);
                MFT_CHECK(memcmp(mf_param_data(a), mf_param_data(b), (size_t)mf_param_count(a) * sizeof(float)) == 0);
                for (k = 0; k < mf_param_count(b); k++) if (mf_param_grads(b)[k] != 0.0f) break;
                MFT_CHECK(k == mf_param_count(b));
            }
            /* a NaN gradient: the norm is NaN, nothing moves, the gradients are zeroed */
            memcpy(mf_param_grads(a), mf_param_data(b), (size_t)mf_param_count(b) * sizeof(float)); /* a: a copy */
            set_grads(b, 9);
            mf_param_at(b, 0)->grad[123] = NAN;
            MFT_CHECK(isnan(mf_train_update(b, &o, maxes[c])));
            MFT_CHECK(memcmp(mf_param_grads(a), mf_param_data(b), (size_t)mf_param_count(b) * sizeof(float)) == 0);
            MFT_CHECK(mf_param_at(b, 0)->grad[123] == 0.0f);
            MFT_CHECK(mf_ok(a) && mf_ok(b));
            mf_ctx_free(a); mf_ctx_free(b);
        }
}

/* ---- a whole training step in the documented order on y = 3x - 2 ------------------------------ */
static void test_training_order_converges(void) {
    mf_optimizer_kind kinds[4] = {MF_OPT_ADAM, MF_OPT_ADAM_LABML, MF_OPT_ADAMW, MF_OPT_SGD};
    int i;
    for (i = 0; i < 4; i++) {
        mf_ctx *ctx = mf_ctx_new(11);
        mf_linear_layer fc = mf_linear_layer_new(ctx, "fc", 1, 1, 1);
        mf_optimizer o = mf_optimizer_default(kinds[i], kinds[i] == MF_OPT_SGD ? 0.1f : 0.05f);
        int shape[2] = {16, 1}, step, k;
        float xs[16], ys[16], first = -1, last = -1, norm = 0;
        if (kinds[i] == MF_OPT_SGD) o.momentum = 0.9f;
        if (kinds[i] == MF_OPT_ADAM_LABML) { o.schedule.kind = MF_SCHED_WARMUP; o.schedule.warmup = 20; }
        if (kinds[i] == MF_OPT_ADAMW) o.weight_decay = 0.0f;
        for (k = 0; k < 16; k++) { xs[k] = (float)k / 8.0f - 1.0f; ys[k] = 3.0f * xs[k] - 2.0f; }
        for (step = 0; step < 400; step++) {
            mf_tensor *x = mf_from(ctx, 2, shape, xs), *y = mf_from(ctx, 2, shape, ys);
            mf_tensor *loss = mf_mse(ctx, mf_linear(ctx, x, fc.weight, fc.bias), y); /* forward */
            if (mf_backward(ctx, loss) < 0) break;                                    /* backward */
            norm = mf_clip_grad_norm(ctx, 1.0f);                                     /* clip */
            if (mf_optimizer_step(ctx, &o) < 0) break;                              /* step */
            mf_zero_grad(ctx);                                                       /* zero */
            if (step == 0) first = loss->data[0];
            last = loss->data[0];
            mf_reset(ctx);
        }
        MFT_CHECK(mf_ok(ctx));
        MFT_CHECK(first > 1.0f);
        MFT_CHECK(last < 1e-4f);
        MFT_CHECK(norm < 1e-1f);
        MFT_NEAR(fc.weight->data[0], 3.0, 1e-2);
        MFT_NEAR(fc.bias->data[0], -2.0, 1e-2);
        if (!(last < 1e-4f)) printf("    optimizer %d: loss %g -> %g\n", i, (double)first, (double)last);
        mf_ctx_free(ctx);
    }
}

int main(void) {
    MFT_RUN(test_adam_reference);
    MFT_RUN(test_adamw_reference);
    MFT_RUN(test_adam_labml_reference);
    MFT_RUN(test_sgd_reference);
    MFT_RUN(test_by_hand);
    MFT_RUN(test_labml_vs_torch);
    MFT_RUN(test_frozen_not_updated);
    MFT_RUN(test_param_after_first_step);
    MFT_RUN(test_schedule_noam);
    MFT_RUN(test_schedule_warmup_cosine_constant);
    MFT_RUN(test_schedule_drives_step);
    MFT_RUN(test_clip_grad_norm);
    MFT_RUN(test_train_update_matches_three_calls);
    MFT_RUN(test_training_order_converges);
    return mft_finish();
}
