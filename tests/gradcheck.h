/* gradcheck.h - finite-difference gradient checks for metaformer.h's autograd (tests only).
 *
 * Include after metaformer.h (with the implementation in the same file). Every function is
 * static; nothing here needs linking.
 *
 * HOW IT WORKS
 *   The graph under test returns an output tensor of any shape. The checked scalar is
 *       L = sum_i out[i] * R[i]
 *   with R a fixed, seeded random tensor in [-1, 1], so every output element matters and a
 *   wrong sign / missing term / factor 2 in any of them shows. The analytic side builds that
 *   scalar with mf_mul + mf_sum and runs mf_backward; the numeric side computes L in double
 *   from the forward's float output only.
 *
 *   Every evaluation (analytic or numeric) runs in a FRESH context with the same seed: the
 *   parameters are re-created by `setup` and overwritten with the checker's parameter vector.
 *   So anything that depends on the context's history (dropout's call counter, arena state)
 *   is identical in every evaluation, and a dropout mask stays fixed while checking.
 *
 *   Numeric derivatives use the 4-point central stencil
 *       f'(x) ~ (f(x - 2h) - 8 f(x - h) + 8 f(x + h) - f(x + 2h)) / (12 h)
 *   (truncation error O(h^4)), so a fairly large h (default 1e-2) keeps float rounding noise
 *   small without curvature errors. Points of non-differentiability (relu at 0) must be avoided
 *   by the caller (gc_spec.min_abs).
 *
 *   Before any finite difference, the checker also runs backward a second time and requires
 *   every parameter gradient to double (gradients accumulate; an op that assigns instead of
 *   adding is caught even when its input has a single consumer), and evaluates L(theta) twice in
 *   separate contexts (the forward must be deterministic).
 *
 *   Error metric per element: |a - n| / max(|a|, |n|, floor), floor default 1e-2, tolerance
 *   default GC_TOL = 1e-2 (catches a wrong sign, a missing term, a factor 2; NaN/inf always
 *   fail). Functions return the largest error seen (GC_FAILED when the graph could not be built
 *   or a pre-check failed) and print the worst element when it exceeds opts->tol.
 *
 * EXAMPLE
 *       static mf_tensor *build(mf_ctx *ctx, mf_tensor **in, void *user) {
 *           (void)user; return mf_softmax(ctx, mf_matmul(ctx, in[0], in[1], 0, 1), 1);
 *       }
 *       gc_spec s[2];
 *       s[0] = gc_in(3, 2, 4, 3, 0);                          // [2, 4, 3], values in [-1, 1]
 *       s[1] = gc_range(gc_in(3, 2, 5, 3, 0), -2, 2, 0);      // [2, 5, 3], values in [-2, 2]
 *       MFT_CHECK(GC_OK(gc_check("scores", 2, s, build, NULL, NULL)));
 *
 * THREE ENTRY POINTS
 *   gc_check(name, n, specs, build, user, opts)
 *       Inputs are n parameters created by the checker (specs: shape and value range), filled
 *       with seeded values; build(ctx, inputs, user) returns the output. Every element is
 *       checked, or a seeded random subset of opts->max_per_input for big inputs.
 *   gc_check_params(name, setup, forward, user, opts)
 *       Any parameters: setup(ctx, user) creates them (e.g. a model's layers; return 0 on
 *       success), forward(ctx, user) returns the output. Every trainable parameter is checked
 *       elementwise (frozen ones are skipped). setup must create the same parameters in the
 *       same order every time (it is called once per evaluation).
 *   gc_check_dir(name, setup, forward, user, n_dirs, opts)
 *       Directional check for big graphs (whole models): for n_dirs seeded random directions d
 *       over all trainable parameters, compares grad . d with the numeric derivative of
 *       L(theta + t d) at t = 0. Cheap: 4 forward passes per direction.
 *
 *   opts may be NULL (defaults: gc_defaults()).
 */
#ifndef MF_GRADCHECK_H
#define MF_GRADCHECK_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define GC__FN static __attribute__((unused))
#else
#define GC__FN static
#endif

#define GC_TOL 1e-2
#define GC_MAX_INPUTS 8
#define GC_FAILED 1e30 /* returned when the graph could not be built */

typedef struct gc_opts {
    double eps;         /* finite-difference step h (default 1e-2) */
    double tol;         /* pass when the max error <= tol (default GC_TOL); only used for printing */
    double floor;       /* error = |a - n| / max(|a|, |n|, floor) (default 1e-2) */
    int max_per_input;  /* elements checked per parameter tensor at most (default 200) */
    uint64_t seed;      /* context seed, R, input values, sampled elements, directions (default 1234) */
    int verbose;        /* 1: print every checked element */
    int quiet;          /* 1: print nothing, not even failures (for tests that expect a failure) */
} gc_opts;

/* One checker-made input of gc_check: a parameter of `shape`, values uniform in [lo, hi];
   values with |v| < min_abs are redrawn (keeps relu & co. away from their kink). */
typedef struct gc_spec {
    int ndim;
    int shape[4];
    float lo, hi, min_abs;
} gc_spec;

typedef int (*gc_setup_fn)(mf_ctx *ctx, void *user);
typedef mf_tensor *(*gc_forward_fn)(mf_ctx *ctx, void *user);
typedef mf_tensor *(*gc_build_fn)(mf_ctx *ctx, mf_tensor **inputs, void *user);

GC__FN gc_opts gc_defaults(void) {
    gc_opts o;
    o.eps = 1e-2; o.tol = GC_TOL; o.floor = 1e-2; o.max_per_input = 200; o.seed = 1234; o.verbose = 0; o.quiet = 0;
    return o;
}

/* A spec of ndim sizes (unused ones 0), values in [-1, 1]. */
GC__FN gc_spec gc_in(int ndim, int d0, int d1, int d2, int d3) {
    gc_spec s;
    s.ndim = ndim; s.shape[0] = d0; s.shape[1] = d1; s.shape[2] = d2; s.shape[3] = d3;
    s.lo = -1.0f; s.hi = 1.0f; s.min_abs = 0.0f;
    return s;
}
/* The same spec with another value range. */
GC__FN gc_spec gc_range(gc_spec s, float lo, float hi, float min_abs) {
    s.lo = lo; s.hi = hi; s.min_abs = min_abs;
    return s;
}

/* ---- internals --------------------------------------------------------------------------------- */
/* failure messages: silent when the options ask for quiet */
#define GC__SAY(quiet, ...) do { if (!(quiet)) printf(__VA_ARGS__); } while (0)

static uint64_t gc__mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
/* uniform in [0, 1) from (seed, stream, index) */
static double gc__unif(uint64_t seed, uint64_t stream, uint64_t index) {
    return (double)(gc__mix(gc__mix(seed ^ gc__mix(stream)) + index) >> 11) * (1.0 / 9007199254740992.0);
}

typedef struct gc__run {
    gc_setup_fn setup;
    gc_forward_fn forward;
    void *user;
    const gc_opts *o;
    const char *name;
    int64_t n_theta;     /* mf_param_count */
    int64_t n_out;       /* output elements (fixed by the first build) */
    double *R;           /* the loss weights */
} gc__run;

/* A fresh context with the parameters set to theta (NULL: as setup made them). */
static mf_ctx *gc__ctx(gc__run *r, const float *theta) {
    mf_ctx *c = mf_ctx_new(r->o->seed);
    if (!c) { GC__SAY(r->o->quiet, "    gradcheck %s: mf_ctx_new failed\n", r->name); return NULL; }
    if (r->setup(c, r->user) != 0 || !mf_ok(c)) {
        GC__SAY(r->o->quiet, "    gradcheck %s: setup failed: %s\n", r->name, mf_error(c));
        mf_ctx_free(c); return NULL;
    }
    if (theta) {
        if (mf_param_count(c) != r->n_theta) {
            GC__SAY(r->o->quiet, "    gradcheck %s: setup made %lld parameter floats, earlier %lld (must be deterministic)\n",
                   r->name, (long long)mf_param_count(c), (long long)r->n_theta);
            mf_ctx_free(c); return NULL;
        }
        if (r->n_theta) memcpy(mf_param_data(c), theta, (size_t)r->n_theta * sizeof(float));
    }
    return c;
}

/* Runs forward in c; returns the output (NULL with a message on failure) and checks its size. */
static mf_tensor *gc__out(gc__run *r, mf_ctx *c) {
    mf_tensor *out = r->forward(c, r->user);
    if (!out || !mf_ok(c)) {
        GC__SAY(r->o->quiet, "    gradcheck %s: the forward failed: %s\n", r->name, mf_error(c));
        return NULL;
    }
    if (r->n_out >= 0 && out->ne != r->n_out) {
        GC__SAY(r->o->quiet, "    gradcheck %s: the output has %lld elements, earlier %lld\n", r->name,
               (long long)out->ne, (long long)r->n_out);
        return NULL;
    }
    return out;
}

static double gc__dot(const gc__run *r, const mf_tensor *out) {
    double s = 0;
    int64_t i;
    for (i = 0; i < out->ne; i++) s += (double)out->data[i] * r->R[i];
    return s;
}

/* L(theta) in double; sets *ok = 0 on failure */
static double gc__loss(gc__run *r, const float *theta, int *ok) {
    mf_ctx *c = gc__ctx(r, theta);
    mf_tensor *out;
    double l = 0;
    if (!c) { *ok = 0; return 0; }
    out = gc__out(r, c);
    if (!out) *ok = 0;
    else l = gc__dot(r, out);
    mf_ctx_free(c);
    return l;
}

/* 4-point derivative of L along theta + t * dir (dir NULL: the single element `elem`) */
static double gc__numeric(gc__run *r, float *theta, int64_t elem, const float *dir, int *ok) {
    static const double t[4] = {-2, -1, 1, 2}, w[4] = {1, -8, 8, -1};
    double h = r->o->eps, acc = 0;
    int k;
    int64_t i;
    float *work = (float *)malloc((size_t)(r->n_theta ? r->n_theta : 1) * sizeof(float));
    if (!work) { *ok = 0; return 0; }
    for (k = 0; k < 4; k++) {
        memcpy(work, theta, (size_t)r->n_theta * sizeof(float));
        if (dir) { for (i = 0; i < r->n_theta; i++) work[i] = (float)(theta[i] + t[k] * h * dir[i]); }
        else work[elem] = (float)(theta[elem] + t[k] * h);
        acc += w[k] * gc__loss(r, work, ok);
    }
    free(work);
    return acc / (12.0 * h);
}

static double gc__err(const gc_opts *o, double a, double n) {
    double s = fabs(a) > fabs(n) ? fabs(a) : fabs(n);
    if (!(s <= 1e300)) return HUGE_VAL; /* NaN or inf on either side fails */
    if (s < o->floor) s = o->floor;
    return fabs(a - n) / s;
}

/* Sets up the run: theta (initial parameters), R, the analytic gradient. Returns the context
   of the analytic pass (caller frees) or NULL. */
static mf_ctx *gc__prepare(gc__run *r, float **theta, float **grad) {
    mf_ctx *c;
    mf_tensor *out, *Rt, *loss;
    int64_t i;
    double l_again;
    int ok = 1;
    *theta = *grad = NULL;
    r->n_out = -1; r->R = NULL; r->n_theta = 0;
    /* pass 1: parameters as setup made them, output size */
    if (!(c = gc__ctx(r, NULL))) return NULL;
    r->n_theta = mf_param_count(c);
    *theta = (float *)malloc((size_t)(r->n_theta ? r->n_theta : 1) * sizeof(float));
    *grad = (float *)malloc((size_t)(r->n_theta ? r->n_theta : 1) * sizeof(float));
    if (!*theta || !*grad) { mf_ctx_free(c); return NULL; }
    if (r->n_theta) memcpy(*theta, mf_param_data(c), (size_t)r->n_theta * sizeof(float));
    if (!(out = gc__out(r, c))) { mf_ctx_free(c); return NULL; }
    r->n_out = out->ne;
    r->R = (double *)malloc((size_t)out->ne * sizeof(double));
    if (!r->R) { mf_ctx_free(c); return NULL; }
    for (i = 0; i < out->ne; i++) r->R[i] = 2.0 * gc__unif(r->o->seed, 0x5252, (uint64_t)i) - 1.0;
    mf_ctx_free(c);
    /* pass 2: analytic gradient of L = sum(out * R) */
    if (!(c = gc__ctx(r, *theta))) return NULL;
    if (!(out = gc__out(r, c))) { mf_ctx_free(c); return NULL; }
    if (!out->requires_grad) {
        GC__SAY(r->o->quiet, "    gradcheck %s: the output takes no gradient (no trainable input reaches it)\n", r->name);
        mf_ctx_free(c); return NULL;
    }
    {
        float *Rf = (float *)malloc((size_t)out->ne * sizeof(float));
        if (!Rf) { mf_ctx_free(c); return NULL; }
        for (i = 0; i < out->ne; i++) Rf[i] = (float)r->R[i];
        Rt = mf_from(c, out->ndim, out->shape, Rf);
        free(Rf);
    }
    loss = mf_sum(c, mf_mul(c, out, Rt));
    mf_zero_grad(c);
    if (!loss || mf_backward(c, loss) != 0) {
        GC__SAY(r->o->quiet, "    gradcheck %s: backward failed: %s\n", r->name, mf_error(c));
        mf_ctx_free(c); return NULL;
    }
    if (r->n_theta) memcpy(*grad, mf_param_grads(c), (size_t)r->n_theta * sizeof(float));
    /* parameter gradients must ACCUMULATE: a second backward doubles them (an op that assigns
       its input's gradient instead of adding to it fails here) */
    if (mf_backward(c, loss) != 0) {
        GC__SAY(r->o->quiet, "    gradcheck %s: a second backward failed: %s\n", r->name, mf_error(c));
        mf_ctx_free(c); return NULL;
    }
    {
        const float *g2 = mf_param_grads(c);
        double gmax = 0;
        for (i = 0; i < r->n_theta; i++) if (fabs((*grad)[i]) > gmax) gmax = fabs((*grad)[i]);
        for (i = 0; i < r->n_theta; i++)
            if (!(fabs(g2[i] - 2.0 * (*grad)[i]) <= 1e-5 * gmax + 1e-30)) {
                GC__SAY(r->o->quiet, "    gradcheck %s: gradients do not accumulate over two backward calls: parameter "
                       "float %lld is %.7g after one, %.7g after two\n", r->name, (long long)i,
                       (double)(*grad)[i], (double)g2[i]);
                mf_ctx_free(c); return NULL;
            }
    }
    /* the forward must be deterministic: L(theta) again in another context */
    l_again = gc__loss(r, *theta, &ok);
    if (!ok) { mf_ctx_free(c); return NULL; }
    if (!(fabs(l_again - gc__dot(r, out)) <= 1e-9 * (1.0 + fabs(l_again)))) {
        GC__SAY(r->o->quiet, "    gradcheck %s: the forward is not deterministic: L = %.12g, then %.12g\n", r->name,
               gc__dot(r, out), l_again);
        mf_ctx_free(c); return NULL;
    }
    return c;
}

static void gc__index_str(const mf_tensor *p, int64_t e, char *buf, size_t n) {
    int64_t idx[4];
    int d;
    for (d = p->ndim - 1; d >= 0; d--) { idx[d] = e % p->shape[d]; e /= p->shape[d]; }
    switch (p->ndim) {
    case 1: snprintf(buf, n, "[%lld]", (long long)idx[0]); break;
    case 2: snprintf(buf, n, "[%lld, %lld]", (long long)idx[0], (long long)idx[1]); break;
    case 3: snprintf(buf, n, "[%lld, %lld, %lld]", (long long)idx[0], (long long)idx[1], (long long)idx[2]); break;
    default: snprintf(buf, n, "[%lld, %lld, %lld, %lld]", (long long)idx[0], (long long)idx[1], (long long)idx[2], (long long)idx[3]); break;
    }
}

/* ---- elementwise check over every trainable parameter ---------------------------------------- */
GC__FN double gc_check_params(const char *name, gc_setup_fn setup, gc_forward_fn forward, void *user,
                              const gc_opts *opts) {
    gc_opts o = opts ? *opts : gc_defaults();
    gc__run r;
    float *theta, *grad;
    mf_ctx *c;
    double worst = 0, w_a = 0, w_n = 0;
    int p, ok = 1, n_checked = 0;
    int64_t w_e = -1;
    const mf_tensor *w_p = NULL;
    int64_t *idx = NULL;
    memset(&r, 0, sizeof r);
    r.setup = setup; r.forward = forward; r.user = user; r.o = &o; r.name = name;
    c = gc__prepare(&r, &theta, &grad);
    if (!c) { free(theta); free(grad); free(r.R); return GC_FAILED; }
    for (p = 0; p < mf_param_tensors(c) && ok; p++) {
        const mf_tensor *pt = mf_param_at(c, p);
        int64_t n = pt->ne, m, k;
        if (!pt->requires_grad) continue;
        m = n <= o.max_per_input ? n : o.max_per_input;
        idx = (int64_t *)malloc((size_t)n * sizeof(int64_t));
        if (!idx) { ok = 0; break; }
        for (k = 0; k < n; k++) idx[k] = k;
        if (m < n) /* partial Fisher-Yates: a seeded random subset */
            for (k = 0; k < m; k++) {
                int64_t j = k + (int64_t)(gc__unif(o.seed, 0x1d0 + (uint64_t)p, (uint64_t)k) * (double)(n - k));
                int64_t tmp = idx[k]; idx[k] = idx[j]; idx[j] = tmp;
            }
        for (k = 0; k < m && ok; k++) {
            int64_t e = pt->offset + idx[k];
            double a = grad[e], num = gc__numeric(&r, theta, e, NULL, &ok), err = gc__err(&o, a, num);
            n_checked++;
            if (o.verbose) {
                char s[96];
                gc__index_str(pt, idx[k], s, sizeof s);
                printf("    %s %s%s: analytic %.7g numeric %.7g err %.3g\n", name, pt->name, s, a, num, err);
            }
            if (err > worst || w_e < 0) { worst = err; w_a = a; w_n = num; w_e = idx[k]; w_p = pt; }
        }
        free(idx); idx = NULL;
    }
    if (!ok) worst = GC_FAILED;
    else if (worst > o.tol && w_p) {
        char s[96];
        gc__index_str(w_p, w_e, s, sizeof s);
        GC__SAY(o.quiet, "    gradcheck %s: worst of %d elements: %s%s analytic %.7g numeric %.7g (error %.3g > tol %g)\n",
               name, n_checked, w_p->name, s, w_a, w_n, worst, o.tol);
    }
    mf_ctx_free(c);
    free(theta); free(grad); free(r.R);
    return worst;
}

/* ---- directional check ---------------------------------------------------------------------- */
GC__FN double gc_check_dir(const char *name, gc_setup_fn setup, gc_forward_fn forward, void *user,
                           int n_dirs, const gc_opts *opts) {
    gc_opts o = opts ? *opts : gc_defaults();
    gc__run r;
    float *theta, *grad, *dir;
    mf_ctx *c;
    double worst = 0;
    int d, ok = 1, p;
    memset(&r, 0, sizeof r);
    r.setup = setup; r.forward = forward; r.user = user; r.o = &o; r.name = name;
    c = gc__prepare(&r, &theta, &grad);
    dir = (float *)calloc((size_t)(r.n_theta ? r.n_theta : 1), sizeof(float));
    if (!c || !dir) { if (c) mf_ctx_free(c); free(theta); free(grad); free(dir); free(r.R); return GC_FAILED; }
    for (d = 0; d < n_dirs && ok; d++) {
        double a = 0, num, err;
        for (p = 0; p < mf_param_tensors(c); p++) { /* trainable parameters only; gaps stay 0 */
            const mf_tensor *pt = mf_param_at(c, p);
            int64_t k;
            if (!pt->requires_grad) continue;
            for (k = 0; k < pt->ne; k++)
                dir[pt->offset + k] = (float)(2.0 * gc__unif(o.seed, 0xd1e0 + (uint64_t)d, (uint64_t)(pt->offset + k)) - 1.0);
        }
        for (p = 0; p < r.n_theta; p++) a += (double)grad[p] * dir[p];
        num = gc__numeric(&r, theta, 0, dir, &ok);
        err = gc__err(&o, a, num);
        if (o.verbose) printf("    %s direction %d: analytic %.9g numeric %.9g err %.3g\n", name, d, a, num, err);
        if (err > o.tol) GC__SAY(o.quiet, "    gradcheck %s: direction %d: analytic %.9g numeric %.9g (error %.3g > tol %g)\n",
                                name, d, a, num, err, o.tol);
        if (err > worst) worst = err;
    }
    if (!ok) worst = GC_FAILED;
    mf_ctx_free(c);
    free(theta); free(grad); free(dir); free(r.R);
    return worst;
}

/* ---- checker-made inputs ---------------------------------------------------------------------- */
typedef struct gc__simple {
    int n;
    const gc_spec *specs;
    gc_build_fn build;
    void *user;
    uint64_t seed;
    mf_tensor *in[GC_MAX_INPUTS];
} gc__simple;

static int gc__simple_setup(mf_ctx *ctx, void *user) {
    gc__simple *s = (gc__simple *)user;
    int i;
    for (i = 0; i < s->n; i++) {
        const gc_spec *sp = &s->specs[i];
        char nm[32];
        int64_t k;
        snprintf(nm, sizeof nm, "gc.in%d", i);
        if (!(s->in[i] = mf_param(ctx, nm, sp->ndim, sp->shape))) return -1;
        for (k = 0; k < s->in[i]->ne; k++) {
            uint64_t attempt = 0;
            float v;
            do {
                double u = gc__unif(s->seed, 0x100 + (uint64_t)i, (uint64_t)k * 64 + attempt++);
                v = (float)(sp->lo + (sp->hi - sp->lo) * u);
            } while (fabsf(v) < sp->min_abs && attempt < 64);
            s->in[i]->data[k] = v;
        }
    }
    return 0;
}
static mf_tensor *gc__simple_forward(mf_ctx *ctx, void *user) {
    gc__simple *s = (gc__simple *)user;
    return s->build(ctx, s->in, s->user);
}

GC__FN double gc_check(const char *name, int n, const gc_spec *specs, gc_build_fn build, void *user,
                       const gc_opts *opts) {
    gc__simple s;
    gc_opts o = opts ? *opts : gc_defaults();
    if (n < 0 || n > GC_MAX_INPUTS) { GC__SAY(o.quiet, "    gradcheck %s: %d inputs (1..%d)\n", name, n, GC_MAX_INPUTS); return GC_FAILED; }
    memset(&s, 0, sizeof s);
    s.n = n; s.specs = specs; s.build = build; s.user = user; s.seed = o.seed;
    return gc_check_params(name, gc__simple_setup, gc__simple_forward, &s, &o);
}

/* pass/fail helper for test files */
#define GC_OK(err) ((err) <= GC_TOL)

/* max_per_input for the elementwise checks of whole models: n, or at most 8 under ASan. There the
   thousands of evaluations of a model check (each a fresh context and model, mapped anew by ASan's
   allocator) made the sanitized binaries the slowest tests, while they add little: the memory
   accesses the sanitizers check are the same whichever element is perturbed, each op of the model
   is checked element by element by its own test in the same binary, and the optimized build runs
   the same model checks on the full sample. */
#if defined(__SANITIZE_ADDRESS__)
#define GC_MODEL_SAMPLE(n) ((n) < 8 ? (n) : 8)
#else
#define GC_MODEL_SAMPLE(n) (n)
#endif

#endif /* MF_GRADCHECK_H */
