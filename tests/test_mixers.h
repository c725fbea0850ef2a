/* test_mixers.h - mixers of the tests' own, registered through the public API (docs/math.md §23):
 * tests/test_custom_mixer.c checks their contracts on the CPU, tests/test_cuda_custom.cpp runs them
 * on the CUDA backend against the CPU.
 *   lastmean   y = x W + mem: a mixer with memories (reset_memory, state), mem [B, D] the mean over
 *              positions of the previous call's input on the same slot (none at first), on the host
 *   lin_stack  a whole-stack recurrence (run_stack) writing the blocks out with mf_model_ln1 /
 *              mf_model_ffn around x W per layer: the library's blocks around lin_layers' mixer
 *   lin_cross  the same stack with each layer's mixer output added to the next layer's mixer input
 * tm_register() registers them all (once); their kinds are in TM_LASTMEAN etc. Include after
 * metaformer.h. */
#ifndef TEST_MIXERS_H
#define TEST_MIXERS_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int TM_LASTMEAN = -1, TM_LIN_LAYERS = -1, TM_LIN_STACK = -1, TM_LIN_CROSS = -1;

/* ---- lastmean ---- */
typedef struct { mf_tensor *w; float *mem[3]; int rows[3]; } tm_lastmean_layer;
/* a [D, D] weight "layers.<l>.mix.weight", PyTorch's Linear initialisation (lastmean and lin_*) */
static mf_tensor *tm_weight(mf_model *m, int l) {
    int D = mf_model_get_config(m)->d_model, shape[2];
    mf_tensor *w;
    shape[0] = D; shape[1] = D;
    w = mf_model_param(m, l, "mix.weight", 2, shape);
    mf_init_kaiming_uniform(mf_model_ctx(m), w);
    return w;
}
static void tm_lastmean_make(mf_model *m, int l, void *st) { ((tm_lastmean_layer *)st)->w = tm_weight(m, l); }
static mf_tensor *tm_lastmean_forward(mf_model *m, int l, void *st, mf_tensor *x) {
    tm_lastmean_layer *L = (tm_lastmean_layer *)st;
    mf_ctx *ctx = mf_model_ctx(m);
    int B = x->shape[0], T = x->shape[1], D = x->shape[2], slot = mf_model_memory_slot_now(m), b, t, d;
    float *h = (float *)malloc((size_t)B * T * D * sizeof(float)), *mem;
    mf_tensor *y = mf_linear(ctx, x, L->w, NULL);
    (void)l;
    if (!h || !(mem = (float *)malloc((size_t)B * D * sizeof(float)))) { free(h); return NULL; }
    if (L->rows[slot] == B) { /* the memory on every position: a constant to the tape */
        for (b = 0; b < B; b++) for (t = 0; t < T; t++) memcpy(h + ((size_t)b * T + t) * D, L->mem[slot] + (size_t)b * D, (size_t)D * sizeof(float));
        y = mf_add(ctx, y, mf_from(ctx, 3, x->shape, h));
    }
    if (mf_to_host(ctx, x, h) < 0) { free(h); free(mem); return NULL; }
    for (b = 0; b < B; b++) for (d = 0; d < D; d++) {
        float sum = 0.0f;
        for (t = 0; t < T; t++) sum += h[((size_t)b * T + t) * D + d];
        mem[(size_t)b * D + d] = sum / (float)T;
    }
    free(L->mem[slot]);
    L->mem[slot] = mem; L->rows[slot] = B;
    free(h);
    return y;
}
static void tm_lastmean_reset(mf_model *m, int l, void *st, int slot) { (void)m; (void)l; ((tm_lastmean_layer *)st)->rows[slot] = 0; }
/* slots 0 and 1: "s<k>.lengths" [1] = rows, "s<k>.mem" [rows, D] when it holds some */
static int tm_lastmean_state(mf_model *m, int l, void *st, mf_state_io *io) {
    tm_lastmean_layer *L = (tm_lastmean_layer *)st;
    int s, D = mf_model_get_config(m)->d_model;
    (void)l;
    for (s = 0; s < 2; s++) {
        char name[32];
        int32_t rows = L->rows[s];
        int shape[2];
        snprintf(name, sizeof name, "s%d.lengths", s);
        if (mf_state_ints(io, name, &rows, 1) < 0 || rows < 0 || rows > 1 << 20) return -1;
        if (mf_state_mode(io) == MF_STATE_APPLY) {
            free(L->mem[s]);
            L->rows[s] = rows;
            if (!(L->mem[s] = (float *)malloc((size_t)(rows ? rows : 1) * D * sizeof(float)))) return -1;
        }
        snprintf(name, sizeof name, "s%d.mem", s);
        shape[0] = rows; shape[1] = D;
        if (rows && mf_state_floats(io, name, mf_state_mode(io) == MF_STATE_CHECK ? NULL : L->mem[s], 2, shape) < 0) return -1;
    }
    return 0;
}
static void tm_lastmean_free(mf_model *m, int l, void *st) {
    tm_lastmean_layer *L = (tm_lastmean_layer *)st;
    int s;
    (void)m; (void)l;
    for (s = 0; s < 3; s++) free(L->mem[s]);
}

/* ---- lin_layers, lin_stack, lin_cross ---- */
typedef struct { mf_tensor *w; } tm_lin_layer;
static void tm_lin_make(mf_model *m, int l, void *st) { ((tm_lin_layer *)st)->w = tm_weight(m, l); }
static mf_tensor *tm_lin_forward(mf_model *m, int l, void *st, mf_tensor *x) {
    (void)l;
    return mf_linear(mf_model_ctx(m), x, ((tm_lin_layer *)st)->w, NULL);
}
static mf_tensor *tm_stack(mf_model *m, mf_tensor *x, int cross) {
    mf_ctx *ctx = mf_model_ctx(m);
    const mf_model_config *c = mf_model_get_config(m);
    mf_tensor *prev = NULL;
    int l;
    for (l = 0; l < c->n_layers; l++) {
        mf_tensor *in = mf_model_ln1(m, l, x), *h;
        if (cross && prev) in = mf_add(ctx, in, prev); /* the previous layer's mixer output */
        h = mf_linear(ctx, in, ((tm_lin_layer *)mf_model_layer_state(m, l))->w, NULL);
        prev = h;
        x = mf_model_ffn(m, l, mf_add(ctx, x, mf_dropout(ctx, h, c->dropout)));
    }
    return x;
}
static mf_tensor *tm_stack_plain(mf_model *m, mf_tensor *x) { return tm_stack(m, x, 0); }
static mf_tensor *tm_stack_cross(mf_model *m, mf_tensor *x) { return tm_stack(m, x, 1); }

/* register the mixers above (again: the same kinds); 0, or -1 with the reason printed */
static int tm_register(void) {
    mf_mixer_def d;
    char err[256];
    memset(&d, 0, sizeof d);
    d.name = "lastmean"; d.help = "x W plus the mean of the previous call's inputs (a mixer with memories)";
    d.layer_size = sizeof(tm_lastmean_layer); d.make_layer = tm_lastmean_make; d.forward = tm_lastmean_forward;
    d.reset_memory = tm_lastmean_reset; d.state = tm_lastmean_state; d.free_layer = tm_lastmean_free;
    TM_LASTMEAN = mf_mixer_register(&d, err, sizeof err);
    memset(&d, 0, sizeof d);
    d.name = "lin_layers"; d.help = "x W per layer"; d.layer_size = sizeof(tm_lin_layer); d.make_layer = tm_lin_make;
    d.forward = tm_lin_forward;
    if (TM_LASTMEAN >= 0) TM_LIN_LAYERS = mf_mixer_register(&d, err, sizeof err);
    d.forward = NULL; d.run_stack = tm_stack_plain; d.name = "lin_stack"; d.help = "lin_layers' blocks written out (run_stack)";
    if (TM_LIN_LAYERS >= 0) TM_LIN_STACK = mf_mixer_register(&d, err, sizeof err);
    d.run_stack = tm_stack_cross; d.name = "lin_cross"; d.help = "each layer's mixer output into the next layer's mixer";
    if (TM_LIN_STACK >= 0) TM_LIN_CROSS = mf_mixer_register(&d, err, sizeof err);
    if (TM_LIN_CROSS < 0) fprintf(stderr, "tm_register: %s\n", err);
    return TM_LIN_CROSS < 0 ? -1 : 0;
}
#endif
