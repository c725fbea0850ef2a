/* test_data.c - [mf:data] (docs/math.md §12, §17.6): shards written by mf_shard_write and read back
   in both formats, one stream over several shards (reads across their boundaries), the files the
   reader refuses and its messages (empty, odd-sized, truncated, foreign, text, a version it does
   not know, ids outside the vocabulary), ids that a uint16 shard cannot hold, and the loaders over
   a stream: the same batches as the examples' in-memory loaders had (a reference copy below), the
   state saved and restored replays the same batches, and the errors of impossible ranges. */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#include "mf_test.h"
#include <stdlib.h>
#include <string.h>

#define DIR "build/"

static int32_t *ramp(int64_t n, int mod) {
    int32_t *ids = (int32_t *)malloc((size_t)n * sizeof *ids);
    for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)((i * 7919 + 3) % mod);
    return ids;
}
static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (n) fwrite(p, 1, n, f);
    fclose(f);
}
static mf_tokens *open1(const char *path, mf_shard_format fmt) { return mf_tokens_open(&path, 1, fmt); }
/* the stream's error contains want */
static int fails_with(mf_tokens *s, const char *want) {
    const char *e = mf_tokens_error(s);
    int ok = e && strstr(e, want) != NULL;
    if (!ok) printf("    error \"%s\" lacks \"%s\"\n", e ? e : "(none)", want);
    mf_tokens_close(s);
    return ok;
}

static void test_round_trip(void) {
    const mf_shard_format fmts[2] = {MF_SHARD_LLMC, MF_SHARD_RAW16};
    const int64_t n = 5000;
    int32_t *ids = ramp(n, 65536), *back = (int32_t *)malloc((size_t)n * sizeof *back);
    ids[0] = 65535; ids[1] = 0;
    for (int k = 0; k < 2; k++) {
        const char *path = k ? DIR "test_data_raw.bin" : DIR "test_data_llmc.bin";
        char err[256];
        MFT_CHECK(mf_shard_write(path, fmts[k], ids, n, err, sizeof err) == 0);
        for (int forced = 0; forced < 2; forced++) { /* detected, and named */
            mf_tokens *s = open1(path, forced ? fmts[k] : MF_SHARD_AUTO);
            MFT_CHECK(mf_tokens_error(s) == NULL && mf_tokens_count(s) == n && mf_tokens_files(s) == 1);
            memset(back, 0xff, (size_t)n * sizeof *back);
            MFT_CHECK(mf_tokens_read(s, 0, n, back) == 0 && memcmp(back, ids, (size_t)n * sizeof *ids) == 0);
            MFT_CHECK(mf_tokens_read(s, 17, 3, back) == 0 && back[0] == ids[17] && back[2] == ids[19]);
            MFT_CHECK(mf_tokens_read(s, n - 2, 3, back) < 0 && strstr(mf_tokens_error(s), "outside the stream of 5000"));
            MFT_CHECK(mf_tokens_read(s, 0, 1, back) < 0); /* a failed stream stays failed */
            mf_tokens_close(s);
        }
    }
    { /* the llm.c header: magic, version, count, little-endian, then 2 bytes a token */
        FILE *f = fopen(DIR "test_data_llmc.bin", "rb");
        unsigned char h[12];
        long size;
        MFT_CHECK(fread(h, 1, 12, f) == 12);
        fseek(f, 0, SEEK_END);
        size = ftell(f);
        fclose(f);
        MFT_CHECK(h[0] == (20240520 & 255) && h[4] == 1 && h[8] == (n & 255) && h[9] == (n >> 8));
        MFT_CHECK(size == 1024 + 2 * n);
    }
    free(ids); free(back);
}

static void test_many_shards(void) {
    const int64_t sizes[3] = {5, 1, 9};
    const char *paths[3] = {DIR "test_data_a.bin", DIR "test_data_b.bin", DIR "test_data_c.bin"};
    int32_t *ids = ramp(15, 50257), back[15];
    int64_t at = 0;
    for (int k = 0; k < 3; k++) {
        MFT_CHECK(mf_shard_write(paths[k], k == 1 ? MF_SHARD_RAW16 : MF_SHARD_LLMC, ids + at, sizes[k], NULL, 0) == 0);
        at += sizes[k];
    }
    mf_tokens *s = mf_tokens_open(paths, 3, MF_SHARD_AUTO); /* formats may differ from file to file */
    MFT_CHECK(mf_tokens_error(s) == NULL && mf_tokens_count(s) == 15 && mf_tokens_files(s) == 3);
    for (int64_t start = 0; start < 15; start++) /* every range: inside a shard and across boundaries */
        for (int64_t len = 0; start + len <= 15; len++) {
            memset(back, 0xff, sizeof back);
            MFT_CHECK(mf_tokens_read(s, start, len, back) == 0);
            MFT_CHECK(len == 0 || memcmp(back, ids + start, (size_t)len * sizeof *back) == 0);
        }
    mf_tokens_set_vocab(s, 50257);
    MFT_CHECK(mf_tokens_read(s, 0, 15, back) == 0);
    mf_tokens_close(s);
    s = mf_tokens_open(paths, 3, MF_SHARD_AUTO);
    mf_tokens_set_vocab(s, 100); /* the data holds larger ids: named, with its shard */
    MFT_CHECK(mf_tokens_read(s, 0, 15, back) < 0);
    MFT_CHECK(fails_with(s, "outside the vocabulary of 100 ids"));
    free(ids);
}

static void test_refused(void) {
    int32_t ids[4] = {1, 2, 3, 4}, big[3] = {1, 65536, 2}, neg[2] = {0, -1};
    unsigned char buf[1100];
    char err[300];
    const char *missing = DIR "test_data_missing.bin";
    /* ids a uint16 shard cannot hold */
    MFT_CHECK(mf_shard_write(DIR "test_data_x.bin", MF_SHARD_LLMC, big, 3, err, sizeof err) < 0);
    MFT_CHECK(strstr(err, "id 65536 at position 1") && strstr(err, "at most 65,536 ids"));
    MFT_CHECK(mf_shard_write(DIR "test_data_x.bin", MF_SHARD_RAW16, neg, 2, err, sizeof err) < 0 && strstr(err, "id -1 at position 1"));
    MFT_CHECK(mf_shard_write(DIR "test_data_x.bin", MF_SHARD_AUTO, ids, 4, err, sizeof err) < 0 && strstr(err, "format"));
    MFT_CHECK(mf_shard_write(DIR "no_such_dir/x.bin", MF_SHARD_RAW16, ids, 4, err, sizeof err) < 0 && strstr(err, "cannot create"));
    remove(missing);
    MFT_CHECK(fails_with(open1(missing, MF_SHARD_AUTO), "cannot open the shard"));
    write_bytes(DIR "test_data_x.bin", buf, 0);
    MFT_CHECK(fails_with(open1(DIR "test_data_x.bin", MF_SHARD_AUTO), "is empty"));
    memset(buf, 1, sizeof buf);
    write_bytes(DIR "test_data_x.bin", buf, 7);
    MFT_CHECK(fails_with(open1(DIR "test_data_x.bin", MF_SHARD_AUTO), "odd size (7 bytes)"));
    /* a truncated llm.c shard: the sizes are named */
    MFT_CHECK(mf_shard_write(DIR "test_data_x.bin", MF_SHARD_LLMC, ids, 4, NULL, 0) == 0);
    {
        FILE *f = fopen(DIR "test_data_x.bin", "rb");
        MFT_CHECK(fread(buf, 1, 1032, f) == 1032);
        fclose(f);
    }
    write_bytes(DIR "test_data_x.bin", buf, 1030);
    MFT_CHECK(fails_with(open1(DIR "test_data_x.bin", MF_SHARD_AUTO), "should have 1032 bytes, but it has 1030 (truncated?)"));
    write_bytes(DIR "test_data_x.bin", buf, 1000);
    MFT_CHECK(fails_with(open1(DIR "test_data_x.bin", MF_SHARD_AUTO), "less than llm.c's 1024-byte header"));
    buf[4] = 7; /* version */
    write_bytes(DIR "test_data_x.bin", buf, 1032);
    MFT_CHECK(fails_with(open1(DIR "test_data_x.bin", MF_SHARD_AUTO), "version 7"));
    buf[4] = 1; buf[8] = 0; /* count 0 */
    write_bytes(DIR "test_data_x.bin", buf, 1024);
    MFT_CHECK(fails_with(open1(DIR "test_data_x.bin", MF_SHARD_AUTO), "holds 0 tokens"));
    buf[0] = 20240801 & 255; buf[1] = (20240801 >> 8) & 255; buf[2] = (20240801 >> 16) & 255; /* LLaMA-3's uint32 */
    write_bytes(DIR "test_data_x.bin", buf, 1032);
    MFT_CHECK(fails_with(open1(DIR "test_data_x.bin", MF_SHARD_AUTO), "uint32 tokens"));
    /* forced llm.c on a raw file; text; a checkpoint */
    MFT_CHECK(mf_shard_write(DIR "test_data_x.bin", MF_SHARD_RAW16, ids, 4, NULL, 0) == 0);
    MFT_CHECK(fails_with(open1(DIR "test_data_x.bin", MF_SHARD_LLMC), "less than llm.c's 1024-byte header"));
    {
        const char *text = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n";
        size_t even = strlen(text) & ~(size_t)1;
        write_bytes(DIR "test_data_x.bin", text, even);
        MFT_CHECK(fails_with(open1(DIR "test_data_x.bin", MF_SHARD_AUTO), "looks like text"));
        mf_tokens *s = open1(DIR "test_data_x.bin", MF_SHARD_RAW16); /* forced: read as tokens */
        MFT_CHECK(mf_tokens_error(s) == NULL && mf_tokens_count(s) == (int64_t)even / 2);
        mf_tokens_close(s);
    }
    {
        mf_ctx *ctx = mf_ctx_new(1);
        int shape[1] = {4};
        mf_param(ctx, "w", 1, shape);
        MFT_CHECK(mf_save(ctx, DIR "test_data_x.bin", 0, NULL, 0) == 0);
        mf_ctx_free(ctx);
        MFT_CHECK(fails_with(open1(DIR "test_data_x.bin", MF_SHARD_AUTO), "safetensors checkpoint"));
    }
    MFT_CHECK(fails_with(mf_tokens_open(NULL, 0, MF_SHARD_AUTO), "no shard files given"));
    MFT_CHECK(fails_with(mf_tokens_from_ids(NULL, 3), "ids is NULL"));
}

/* ---- the loaders ----------------------------------------------------------------------------
   The reference: the examples' in-memory loaders as they were before they moved into the library
   (examples/common.h), over an int32 array. */
static uint64_t ref_random(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
typedef struct { const int32_t *ids; int64_t n, items, pos, perm[4096]; int T; uint64_t rng; } ref_shuffle;
static void ref_shuffle_init(ref_shuffle *L, const int32_t *ids, int64_t n, int T, uint64_t seed) {
    L->ids = ids; L->n = n; L->T = T; L->items = (n - 1) / T;
    L->rng = 0x5eed0000ULL ^ seed * 0x9e3779b97f4a7c15ULL;
    L->pos = L->items;
}
static int ref_shuffle_next(ref_shuffle *L, int B, int32_t *x, int32_t *y) {
    int b, T = L->T;
    if (L->pos == L->items) {
        for (int64_t i = 0; i < L->items; i++) L->perm[i] = i;
        for (int64_t i = L->items - 1; i > 0; i--) {
            int64_t j = (int64_t)(ref_random(&L->rng) % (uint64_t)(i + 1)), t = L->perm[i];
            L->perm[i] = L->perm[j]; L->perm[j] = t;
        }
        L->pos = 0;
    }
    for (b = 0; b < B && L->pos < L->items; b++) {
        int64_t start = L->perm[L->pos++] * T, room = L->n - (start + T + 1);
        start += (int64_t)(ref_random(&L->rng) % (uint64_t)((room < T - 1 ? room : T - 1) + 1));
        for (int t = 0; t < T; t++) { x[b * T + t] = L->ids[start + t]; y[b * T + t] = L->ids[start + t + 1]; }
    }
    return b;
}
static int ref_seq_next(const int32_t *ids, int64_t n, int B, int T, int64_t *idx, int32_t *x, int32_t *y, int *fresh) {
    int Tb;
    *fresh = *idx >= n - 1;
    if (*fresh) *idx = 0;
    Tb = (int)(n - 1 - *idx < T ? n - 1 - *idx : T);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tb; t++) { x[b * Tb + t] = ids[b * n + *idx + t]; y[b * Tb + t] = ids[b * n + *idx + t + 1]; }
    *idx += Tb;
    return Tb;
}

/* a stream of three shards holding ids [n] */
static mf_tokens *three_shards(const int32_t *ids, int64_t n) {
    const char *paths[3] = {DIR "test_data_l1.bin", DIR "test_data_l2.bin", DIR "test_data_l3.bin"};
    int64_t cut1 = n / 3, cut2 = n / 3 + 101;
    mf_shard_write(paths[0], MF_SHARD_LLMC, ids, cut1, NULL, 0);
    mf_shard_write(paths[1], MF_SHARD_RAW16, ids + cut1, cut2 - cut1, NULL, 0);
    mf_shard_write(paths[2], MF_SHARD_LLMC, ids + cut2, n - cut2, NULL, 0);
    return mf_tokens_open(paths, 3, MF_SHARD_AUTO);
}

static void test_loaders_equal_reference(void) {
    enum { N = 3001, B = 5, T = 16, START = 200, COUNT = 2500 };
    int32_t *ids = ramp(N, 65536), x1[B * T], y1[B * T], x2[B * T], y2[B * T];
    mf_tokens *streams[2] = {mf_tokens_from_ids(ids, N), three_shards(ids, N)};
    static ref_shuffle ref;
    for (int k = 0; k < 2; k++) {
        mf_loader L;
        mf_loader_config c = {START, COUNT, B, T, 0, 42, 0, 1};
        int bad = 0, rows, Tb, fresh, starts = 0;
        MFT_CHECK(mf_tokens_error(streams[k]) == NULL);
        MFT_CHECK(mf_loader_init(&L, streams[k], &c) == 0);
        MFT_CHECK(mf_loader_batches(&L) == ((COUNT - 1) / T + B - 1) / B);
        ref_shuffle_init(&ref, ids + START, COUNT, T, 42);
        for (int step = 0; step < 100; step++) { /* over three epochs, with their short last batches */
            int want = ref_shuffle_next(&ref, B, x2, y2);
            fresh = mf_loader_next(&L, x1, y1, &rows, &Tb);
            starts += fresh == 1;
            bad += rows != want || Tb != T || memcmp(x1, x2, sizeof(int32_t) * want * T) || memcmp(y1, y2, sizeof(int32_t) * want * T);
        }
        MFT_CHECK(bad == 0 && starts == 4);
        mf_loader_free(&L);

        c.sequential = 1; /* the sequential columns */
        MFT_CHECK(mf_loader_init(&L, streams[k], &c) == 0);
        MFT_CHECK(L.state.epoch_pos == (COUNT - 1) / T && L.state.seq_pos == COUNT / B - 1); /* both states, as saved before */
        MFT_CHECK(mf_loader_batches(&L) == (COUNT / B - 1 + T - 1) / T);
        int64_t idx = COUNT / B - 1;
        starts = 0;
        for (int step = 0; step < 80; step++) {
            int want_fresh, want_T = ref_seq_next(ids + START, COUNT / B, B, T, &idx, x2, y2, &want_fresh);
            fresh = mf_loader_next(&L, x1, y1, &rows, &Tb);
            starts += fresh;
            bad += fresh != want_fresh || rows != B || Tb != want_T || memcmp(x1, x2, sizeof(int32_t) * B * Tb) || memcmp(y1, y2, sizeof(int32_t) * B * Tb);
        }
        MFT_CHECK(bad == 0 && starts == 3);
        mf_loader_free(&L);
    }
    mf_tokens_close(streams[0]); mf_tokens_close(streams[1]);
    free(ids);
}

/* a state copied out after any step and restored into a new loader replays the same batches */
static void test_loader_restore(void) {
    enum { N = 1000, B = 4, T = 8 };
    int32_t *ids = ramp(N, 1000), x1[B * T], y1[B * T], x2[B * T], y2[B * T];
    mf_tokens *s = three_shards(ids, N);
    for (int sequential = 0; sequential < 2; sequential++)
        for (int stop = 0; stop < 70; stop += 9) {
            mf_loader a, b;
            mf_loader_config c = {0, 0, B, T, sequential, 3, 0, 1}, other = c;
            int rows, Tb, rows2, Tb2, bad = 0;
            other.seed = 99;
            MFT_CHECK(mf_loader_init(&a, s, &c) == 0 && mf_loader_init(&b, s, &other) == 0);
            for (int k = 0; k < stop; k++) mf_loader_next(&a, x1, y1, &rows, &Tb);
            mf_loader_state saved = a.state;
            mf_loader_restore(&b, &saved);
            for (int k = 0; k < 50; k++) {
                int f1 = mf_loader_next(&a, x1, y1, &rows, &Tb), f2 = mf_loader_next(&b, x2, y2, &rows2, &Tb2);
                bad += f1 != f2 || rows != rows2 || Tb != Tb2 || memcmp(x1, x2, sizeof(int32_t) * rows * Tb) || memcmp(y1, y2, sizeof(int32_t) * rows * Tb);
            }
            MFT_CHECK(bad == 0);
            mf_loader_free(&a); mf_loader_free(&b);
        }
    mf_tokens_close(s);
    free(ids);
}

static void test_loader_errors(void) {
    int32_t ids[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, x[64], y[64];
    mf_tokens *s = mf_tokens_from_ids(ids, 10);
    mf_loader L;
    mf_loader_config c = {0, 0, 2, 9, 0, 1, 0, 1};
    int rows, Tb;
    MFT_CHECK(mf_loader_init(&L, s, &c) == 0); /* one window of 10 */
    MFT_CHECK(mf_loader_next(&L, x, y, &rows, &Tb) == 1 && rows == 1 && x[0] == 0 && y[8] == 9);
    mf_loader_free(&L);
    c.seq_len = 10;
    MFT_CHECK(mf_loader_init(&L, s, &c) < 0 && strstr(L.error, "no window of seq_len + 1 = 11 tokens"));
    mf_loader_free(&L);
    c.sequential = 1; c.batch = 6;
    MFT_CHECK(mf_loader_init(&L, s, &c) < 0 && strstr(L.error, "columns of fewer than 2 tokens"));
    mf_loader_free(&L);
    c.batch = 1; c.start = 5; c.count = 6;
    MFT_CHECK(mf_loader_init(&L, s, &c) < 0 && strstr(L.error, "outside the stream of 10 tokens"));
    mf_loader_free(&L);
    c.start = 0; c.count = 0; c.world = 2; c.rank = 2;
    MFT_CHECK(mf_loader_init(&L, s, &c) < 0 && strstr(L.error, "rank 2 of world 2: the rank must be in 0 .. world - 1"));
    mf_loader_free(&L);
    c.world = 1; c.rank = 0; c.seq_len = 4;
    mf_tokens_set_vocab(s, 9); /* id 9 is outside: the batch fails with the stream's message */
    MFT_CHECK(mf_loader_init(&L, s, &c) == 0);
    MFT_CHECK(mf_loader_next(&L, x, y, &rows, &Tb) == 1);
    MFT_CHECK(mf_loader_next(&L, x, y, &rows, &Tb) == 0);
    MFT_CHECK(mf_loader_next(&L, x, y, &rows, &Tb) < 0 && strstr(L.error, "token id 9 at position 9"));
    mf_loader_free(&L);
    mf_tokens_close(s);
}

int main(void) {
    MFT_RUN(test_round_trip);
    MFT_RUN(test_many_shards);
    MFT_RUN(test_refused);
    MFT_RUN(test_loaders_equal_reference);
    MFT_RUN(test_loader_restore);
    MFT_RUN(test_loader_errors);
    return mft_finish();
}
