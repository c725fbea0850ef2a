/* golden.h - a minimal safetensors reader for the parity tests (F32 and I32 tensors, up to 4
 * dims) plus the helpers they share: reading metadata values and comparing against a golden.
 *
 * The golden files hold more than a model's parameters (inputs, outputs, gradients), which
 * mf_load rightly refuses, so the tests read them with this. Include after metaformer.h and
 * mf_test.h. Every function is static. */
#ifndef MF_GOLDEN_H
#define MF_GOLDEN_H
#include "mf_test.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a minimal safetensors reader (F32 and I32 tensors, up to 4 dims) ---------------------- */
typedef struct {
    char name[160];
    int i32, ndim, shape[4];
    int64_t ne;
    uint64_t begin, end;
} gt_entry;

typedef struct {
    unsigned char *file;
    size_t size;
    const unsigned char *data; /* start of the data section */
    uint64_t data_size;
    gt_entry *e;
    int n;
} golden;

typedef struct { const char *p, *end; int bad; } gt_json;

static void gt_ws(gt_json *j) { while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t')) j->p++; }
static int gt_char(gt_json *j, char c) {
    gt_ws(j);
    if (j->p < j->end && *j->p == c) { j->p++; return 1; }
    return 0;
}
static void gt_str(gt_json *j, char *out, size_t cap) {
    size_t n = 0;
    if (!gt_char(j, '"')) { j->bad = 1; return; }
    while (j->p < j->end && *j->p != '"') {
        if (*j->p == '\\' && j->p + 1 < j->end) j->p++; /* names here need no unescaping beyond this */
        if (out && n + 1 < cap) out[n++] = *j->p;
        j->p++;
    }
    if (!gt_char(j, '"')) j->bad = 1;
    if (out) out[n] = 0;
}
static int64_t gt_int(gt_json *j) {
    int64_t v = 0;
    int digits = 0;
    gt_ws(j);
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9' && digits < 18) { v = v * 10 + (*j->p++ - '0'); digits++; }
    if (!digits) j->bad = 1;
    return v;
}
static void gt_skip(gt_json *j) { /* any JSON value */
    int depth = 0;
    gt_ws(j);
    do {
        if (j->p >= j->end) { j->bad = 1; return; }
        if (*j->p == '"') { gt_str(j, NULL, 0); if (j->bad) return; continue; }
        if (*j->p == '{' || *j->p == '[') depth++;
        else if (*j->p == '}' || *j->p == ']') depth--;
        else if (depth == 0 && (*j->p == ',')) return;
        j->p++;
    } while (depth > 0);
}

static void golden_close(golden *g) { free(g->file); free(g->e); memset(g, 0, sizeof *g); }

/* NULL on success, else what is wrong */
static const char *golden_open(golden *g, const char *path) {
    FILE *f = fopen(path, "rb");
    long sz;
    uint64_t hlen = 0;
    int i;
    gt_json j;
    memset(g, 0, sizeof *g);
    if (!f) return "cannot open the file (run `make goldens` where torch is installed?)";
    if (fseek(f, 0, SEEK_END) != 0 || (sz = ftell(f)) < 8 || fseek(f, 0, SEEK_SET) != 0) { fclose(f); return "not a safetensors file"; }
    g->size = (size_t)sz;
    if (!(g->file = (unsigned char *)malloc(g->size)) || fread(g->file, 1, g->size, f) != g->size) { fclose(f); return "read error"; }
    fclose(f);
    for (i = 0; i < 8; i++) hlen |= (uint64_t)g->file[i] << (8 * i);
    if (hlen > g->size - 8) return "the header is longer than the file"; /* not hlen + 8: it can wrap */
    g->data = g->file + 8 + hlen;
    g->data_size = g->size - 8 - hlen;
    j.p = (const char *)g->file + 8; j.end = j.p + hlen; j.bad = 0;
    if (!gt_char(&j, '{')) return "the header is not a JSON object";
    if (gt_char(&j, '}')) return NULL;
    do {
        char key[160];
        gt_entry *e;
        gt_str(&j, key, sizeof key);
        if (j.bad || !gt_char(&j, ':')) return "malformed header (a key)";
        if (strcmp(key, "__metadata__") == 0) { gt_skip(&j); if (j.bad) return "malformed __metadata__"; continue; }
        if (!(e = (gt_entry *)realloc(g->e, (size_t)(g->n + 1) * sizeof *e))) return "out of memory";
        g->e = e;
        e = &g->e[g->n++];
        memset(e, 0, sizeof *e);
        strcpy(e->name, key);
        if (!gt_char(&j, '{')) return "malformed header (a tensor entry)";
        do {
            char field[32], dtype[16];
            gt_str(&j, field, sizeof field);
            if (j.bad || !gt_char(&j, ':')) return "malformed header (a tensor field)";
            if (strcmp(field, "dtype") == 0) {
                gt_str(&j, dtype, sizeof dtype);
                if (strcmp(dtype, "F32") != 0 && strcmp(dtype, "I32") != 0) return "a tensor is neither F32 nor I32";
                e->i32 = dtype[0] == 'I';
            } else if (strcmp(field, "shape") == 0) {
                if (!gt_char(&j, '[')) return "malformed shape";
                e->ne = 1;
                if (!gt_char(&j, ']')) {
                    do {
                        int64_t v = gt_int(&j);
                        if (e->ndim == 4 || v < 1 || v > (1 << 24)) return "a shape has more than 4 dims or a bad size";
                        if (e->ne > ((int64_t)1 << 40) / v) return "a shape has more elements than the file can hold";
                        e->shape[e->ndim++] = (int)v;
                        e->ne *= v;
                    } while (gt_char(&j, ','));
                    if (!gt_char(&j, ']')) return "malformed shape";
                }
            } else if (strcmp(field, "data_offsets") == 0) {
                if (!gt_char(&j, '[')) return "malformed data_offsets";
                e->begin = (uint64_t)gt_int(&j);
                if (!gt_char(&j, ',')) return "malformed data_offsets";
                e->end = (uint64_t)gt_int(&j);
                if (!gt_char(&j, ']')) return "malformed data_offsets";
            } else gt_skip(&j);
            if (j.bad) return "malformed header (a tensor field)";
        } while (gt_char(&j, ','));
        if (!gt_char(&j, '}')) return "malformed header (a tensor entry is not closed)";
        if (e->end < e->begin || e->end > g->data_size || e->end - e->begin != (uint64_t)e->ne * 4)
            return "a tensor's data_offsets do not match its shape or the file size";
    } while (gt_char(&j, ','));
    if (!gt_char(&j, '}')) return "malformed header (not closed)";
    return NULL;
}

static const gt_entry *golden_find(const golden *g, const char *prefix, const char *name) {
    int i;
    size_t lp = strlen(prefix);
    for (i = 0; i < g->n; i++)
        if (strncmp(g->e[i].name, prefix, lp) == 0 && strcmp(g->e[i].name + lp, name) == 0) return &g->e[i];
    return NULL;
}
/* the entry as float (F32) or int32 (I32) values, copied out (unaligned-safe) */
static void golden_floats(const golden *g, const gt_entry *e, float *out) { memcpy(out, g->data + e->begin, (size_t)e->ne * 4); }
static void golden_ints(const golden *g, const gt_entry *e, int32_t *out) { memcpy(out, g->data + e->begin, (size_t)e->ne * 4); }

static int same_shape(const gt_entry *e, int ndim, const int *shape) {
    int d;
    if (e->ndim != ndim) return 0;
    for (d = 0; d < ndim; d++) if (e->shape[d] != shape[d]) return 0;
    return 1;
}

/* an integer from the file's metadata; *ok = 0 (and a message) when it is missing */
static int meta_int(const char *path, const char *key, int *ok) {
    char buf[64];
    if (mf_load_meta(path, key, buf, sizeof buf) < 0) { printf("    %s: no metadata \"%s\"\n", path, key); *ok = 0; return 0; }
    return atoi(buf);
}

/* mft_rel_err of got against the golden with floor 1e-6, or zero_scale as the floor when the golden
   is all zero (a gradient that must vanish: the error is then absolute, or relative to a scale) */
static double golden_rel_err(const golden *g, const gt_entry *e, const float *got, double zero_scale) {
    float *want = (float *)malloc((size_t)e->ne * sizeof(float));
    double err, maxref = 0;
    int64_t i;
    if (!want) return INFINITY;
    golden_floats(g, e, want);
    for (i = 0; i < e->ne; i++)
        if (fabs((double)want[i]) > maxref) maxref = fabs((double)want[i]);
    err = mft_rel_err(got, want, e->ne, maxref == 0.0 ? zero_scale : 1e-6);
    free(want);
    return err;
}
#endif
