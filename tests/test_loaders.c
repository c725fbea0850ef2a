/* test_loaders.c - the data side of the examples: the library's sequential loader (mf_loader) of the
   memory models against docs/math.md §12 (its Tiny Shakespeare batch counts, column layout,
   short last batch, passes), the shuffled loader (epochs are permutations, windows in bounds,
   --resume replays the same batches), the array sorter's batches (docs/math.md §13, both forms) and the
   option table (flags, aliases, values and their errors). */
#define _POSIX_C_SOURCE 200809L
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#define EX_PROG "test_loaders"
#include "examples/common.h"
#include "mf_test.h"

/* a loader over ids [len] (a stream from the array), dying on error */
static mf_tokens *STREAM;
static int open_loader(mf_loader *L, const int32_t *ids, int64_t len, int B, int T, int sequential, uint64_t seed) {
    mf_loader_config c;
    memset(&c, 0, sizeof c);
    c.batch = B; c.seq_len = T; c.sequential = sequential; c.seed = seed; c.world = 1;
    mf_tokens_close(STREAM);
    STREAM = mf_tokens_from_ids(ids, len);
    return mf_loader_init(L, STREAM, &c);
}

/* docs/math.md §12: Tiny Shakespeare's training split (1,003,854 ids), B = 32: columns of n = 31,370;
   T = 2 -> 15,685 batches; T = 8 -> 3,922 batches, the last of length 1. Ids are their positions
   here, so every token says where it came from. */
static void check_sequential(int T, int64_t want_batches, int want_last) {
    const int64_t len = 1003854;
    const int B = 32;
    int32_t *ids = (int32_t *)malloc((size_t)len * sizeof *ids), *x = (int32_t *)malloc((size_t)B * T * sizeof *x);
    int32_t *y = (int32_t *)malloc((size_t)B * T * sizeof *y);
    mf_loader L;
    int64_t batches = 0, idx = 0, bad = 0, pass;
    int Tb = 0, rows, new_pass;
    for (int64_t i = 0; i < len; i++) ids[i] = (int32_t)i;
    MFT_CHECK(open_loader(&L, ids, len, B, T, 1, 0) == 0);
    MFT_CHECK(L.column == 31370);
    MFT_CHECK(mf_loader_batches(&L) == want_batches);
    for (pass = 0; pass < 2; pass++) { /* the second pass starts over with new_pass set */
        for (batches = 0, idx = 0; batches < want_batches; batches++) {
            new_pass = mf_loader_next(&L, x, y, &rows, &Tb);
            bad += new_pass != (batches == 0) || rows != B;
            for (int b = 0; b < B; b++)
                for (int t = 0; t < Tb; t++) /* row b continues column b: ids[b * n + idx + t] */
                    bad += x[b * Tb + t] != b * L.column + idx + t || y[b * Tb + t] != x[b * Tb + t] + 1;
            idx += Tb;
        }
        MFT_CHECK(Tb == want_last);
        MFT_CHECK(idx == L.column - 1); /* every input position of the columns once */
    }
    MFT_CHECK(bad == 0);
    mf_loader_free(&L);
    free(ids); free(x); free(y);
}
static void test_sequential_t2(void) { check_sequential(2, 15685, 1); }
static void test_sequential_t8(void) { check_sequential(8, 3922, 1); }

static void test_sequential_too_short(void) {
    int32_t ids[7] = {0};
    mf_loader L;
    MFT_CHECK(open_loader(&L, ids, 7, 4, 8, 1, 0) < 0); /* columns of 1 token: no target */
    mf_loader_free(&L);
    MFT_CHECK(open_loader(&L, ids, 7, 3, 8, 1, 0) == 0);
    mf_loader_free(&L);
}

/* an epoch is a permutation of the windows; every window lies inside the text */
static void test_shuffled_epoch(void) {
    enum { N = 1000, T = 16, B = 5 };
    int32_t ids[N], x[B * T], y[B * T];
    int seen[N / T] = {0};
    mf_loader L;
    int64_t windows = 0, bad = 0;
    int rows, Tb;
    for (int i = 0; i < N; i++) ids[i] = i;
    MFT_CHECK(open_loader(&L, ids, N, B, T, 0, 7) == 0);
    MFT_CHECK(L.windows == (N - 1) / T);
    while (windows < L.windows) {
        mf_loader_next(&L, x, y, &rows, &Tb);
        for (int r = 0; r < rows; r++) {
            int start = x[r * T];
            seen[start / T]++;
            bad += start % T > T - 1 || start + T + 1 > N;
            for (int t = 0; t < T; t++) bad += x[r * T + t] != start + t || y[r * T + t] != start + t + 1;
        }
        windows += rows;
    }
    MFT_CHECK(windows == L.windows && bad == 0);
    for (int i = 0; i < L.windows; i++) MFT_CHECK(seen[i] == 1);
    MFT_CHECK(mf_loader_next(&L, x, y, &rows, &Tb) == 1); /* the next epoch starts */
    MFT_CHECK(L.state.epoch_pos == B);
    mf_loader_free(&L);
}

/* --resume: a loader restored from (epoch_rng, rng, pos) gives the same batches as the original */
static void test_shuffled_restore(void) {
    enum { N = 700, T = 8, B = 6 };
    int32_t ids[N], x1[B * T], y1[B * T], x2[B * T], y2[B * T];
    mf_tokens *s;
    for (int i = 0; i < N; i++) ids[i] = (i * 7) % 13;
    s = mf_tokens_from_ids(ids, N);
    for (int stop = 0; stop < 40; stop += 13) {
        mf_loader a, b;
        mf_loader_config c;
        int same = 1, r1, r2, t1, t2;
        memset(&c, 0, sizeof c);
        c.batch = B; c.seq_len = T; c.seed = 3;
        mf_loader_init(&a, s, &c);
        for (int k = 0; k < stop; k++) mf_loader_next(&a, x1, y1, &r1, &t1);
        c.seed = 99;
        mf_loader_init(&b, s, &c);
        mf_loader_restore(&b, &a.state);
        for (int k = 0; k < 30; k++) {
            int n1 = mf_loader_next(&a, x1, y1, &r1, &t1), n2 = mf_loader_next(&b, x2, y2, &r2, &t2);
            same &= n1 == n2 && r1 == r2 && memcmp(x1, x2, sizeof x1) == 0 && memcmp(y1, y2, sizeof y1) == 0;
        }
        MFT_CHECK(same);
        mf_loader_free(&a); mf_loader_free(&b);
    }
    mf_tokens_close(s);
}

/* the solvable form: x, then sorted(x); only the W positions that predict the sorted half count */
static void test_sorter_batches(void) {
    enum { B = 50 };
    int32_t ids[B * SORT_MAX_T], tg[B * SORT_MAX_T];
    uint64_t rng = 11;
    int bad = 0, T = sort_batch(&rng, 1, B, ids, tg);
    MFT_CHECK(T == 2 * SORT_W - 1);
    for (int b = 0; b < B; b++) {
        const int32_t *id = ids + b * T, *t = tg + b * T;
        int count[SORT_VOCAB] = {0}, sorted_count[SORT_VOCAB] = {0};
        for (int i = 0; i < SORT_W; i++) count[id[i]]++;
        for (int i = 0; i < T; i++) bad += i < SORT_W - 1 ? t[i] != -1 : t[i] < 0 || t[i] >= SORT_VOCAB;
        for (int w = 0; w < SORT_W; w++) {
            sorted_count[t[SORT_W - 1 + w]]++;
            bad += w > 0 && t[SORT_W - 1 + w] < t[SORT_W - 2 + w];               /* ascending */
            bad += w < SORT_W - 1 && id[SORT_W + w] != t[SORT_W - 1 + w];        /* fed back as input */
        }
        for (int v = 0; v < SORT_VOCAB; v++) bad += count[v] != sorted_count[v];
    }
    MFT_CHECK(bad == 0);
    T = sort_batch(&rng, 0, B, ids, tg); /* the seed form: position w predicts sorted(x)[w] */
    MFT_CHECK(T == SORT_W);
    for (int b = 0; b < B; b++)
        for (int w = 1; w < SORT_W; w++) bad += tg[b * T + w] < tg[b * T + w - 1];
    MFT_CHECK(bad == 0);
    /* relabeled: the same draws, every value v written as SORT_RELABEL[v] (-1 kept); both forms */
    for (int form = 0; form <= SORT_SOLVABLE; form++) {
        int32_t ids2[B * SORT_MAX_T], tg2[B * SORT_MAX_T];
        uint64_t r1 = 5, r2 = 5;
        int changed = 0;
        T = sort_batch(&r1, form, B, ids, tg);
        MFT_CHECK(sort_batch(&r2, form | SORT_RELABELED, B, ids2, tg2) == T && r1 == r2);
        for (int i = 0; i < B * T; i++) {
            bad += ids2[i] != SORT_RELABEL[ids[i]] || tg2[i] != (tg[i] < 0 ? -1 : SORT_RELABEL[tg[i]]);
            changed += ids2[i] != ids[i];
        }
        MFT_CHECK(bad == 0 && changed > 0);
    }
}

static void test_options(void) {
    struct { const char *mixer; int n, flag; float lr; } v = {"sdpa", 3, 0, 0.5f};
    const option opts[] = {
        {"mixer", OPT_TEXT, &v.mixer, SAVED, 0, "sdpa|feedback", "mixer"},
        {"feedback", OPT_ALIAS, &v.mixer, RUN_ONLY, 0, "feedback", "alias"},
        {"n", OPT_INT, &v.n, SAVED, 1, NULL, "an int"},
        {"flag", OPT_FLAG, &v.flag, SAVED, 0, NULL, "a flag"},
        {"lr", OPT_FLOAT, &v.lr, SAVED, 0, NULL, "a float"},
    };
    char *argv[] = {"prog", "file.txt", "--feedback", "--n=7", "--flag", "--lr", "0.25", NULL};
    unsigned char given[5] = {0};
    const char *file = NULL;
    char buf[64];
    parse_options(7, argv, opts, 5, given, &file, NULL);
    MFT_CHECK(file && strcmp(file, "file.txt") == 0);
    MFT_CHECK(strcmp(v.mixer, "feedback") == 0 && given[0] == 2 && given[1] == 1);
    MFT_CHECK(v.n == 7 && v.flag == 1 && v.lr == 0.25f);
    MFT_CHECK(strcmp(format_option(&opts[4], buf, sizeof buf), "0.25") == 0);
    MFT_CHECK(strstr(set_option(&opts[2], "0"), "--n must be >= 1") != NULL);
    MFT_CHECK(strstr(set_option(&opts[2], "1.5"), "expects an integer") != NULL);
    MFT_CHECK(strstr(set_option(&opts[3], "2"), "expects 0 or 1") != NULL);
    MFT_CHECK(strstr(set_option(&opts[0], "pool"), "choose one of sdpa|feedback") != NULL);
    MFT_CHECK(set_option(&opts[3], "0") == NULL && v.flag == 0);
    MFT_CHECK(choice_index("none|learned|sinusoidal", "learned") == 1 && choice_index("none|learned", "learn") == -1);
}

/* docs/math.md §18.1: rank r of world w takes rows [r * B, (r + 1) * B) of each global batch of B * w
   rows; the union of the ranks' batches is the batch of one loader of B * w rows (shuffled windows
   with a short last batch, and sequential columns with a short last batch), over 3 epochs / passes,
   and a rank restored from any rank's state continues the same. */
static void check_ranks(int sequential) {
    enum { W = 3, B = 2, T = 5, LEN = 415, STEPS = 40 };
    int32_t ids[LEN], gx[W * B * T], gy[W * B * T], x[B * T], y[B * T];
    mf_tokens *s;
    mf_loader one, rank[W];
    mf_loader_config c;
    mf_loader_state saved;
    int step, r, grows, gT, rows, Tb, fresh, gfresh, bad = 0, short_seen = 0;
    for (int i = 0; i < LEN; i++) ids[i] = i;
    s = mf_tokens_from_ids(ids, LEN);
    memset(&c, 0, sizeof c);
    c.seq_len = T; c.sequential = sequential; c.seed = 7; c.world = 1; c.batch = B * W;
    MFT_CHECK(mf_loader_init(&one, s, &c) == 0);
    c.batch = B; c.world = W;
    for (r = 0; r < W; r++) { c.rank = r; MFT_CHECK(mf_loader_init(&rank[r], s, &c) == 0); }
    MFT_CHECK(mf_loader_batches(&rank[0]) == mf_loader_batches(&one));
    if (sequential) MFT_CHECK(rank[0].column == one.column);
    memset(&saved, 0, sizeof saved);
    for (step = 0; step < STEPS && !bad; step++) {
        gfresh = mf_loader_next(&one, gx, gy, &grows, &gT);
        short_seen |= grows < B * W || gT < T;
        if (step == STEPS / 2) { /* rank 1 restarts from rank 2's state */
            saved = rank[2].state;
            mf_loader_free(&rank[1]);
            c.rank = 1;
            MFT_CHECK(mf_loader_init(&rank[1], s, &c) == 0);
            mf_loader_restore(&rank[1], &saved);
        }
        for (r = 0; r < W; r++) {
            int want = grows - r * B < 0 ? 0 : grows - r * B > B ? B : grows - r * B;
            fresh = mf_loader_next(&rank[r], x, y, &rows, &Tb);
            if (fresh != gfresh || rows != want || Tb != gT) { bad = 1; break; }
            if (rows && (memcmp(x, gx + r * B * gT, (size_t)rows * gT * sizeof *x) != 0 ||
                         memcmp(y, gy + r * B * gT, (size_t)rows * gT * sizeof *y) != 0)) bad = 1;
            if (memcmp(&rank[r].state, &one.state, sizeof one.state) != 0) bad = 1;
        }
    }
    MFT_CHECK(!bad);
    MFT_CHECK(short_seen); /* the comparison covered a short last batch */
    MFT_CHECK(step == STEPS && STEPS > 2 * mf_loader_batches(&one));
    mf_loader_free(&one);
    for (r = 0; r < W; r++) mf_loader_free(&rank[r]);
    mf_tokens_close(s);
}
static void test_ranks_shuffled(void) { check_ranks(0); }
static void test_ranks_sequential(void) { check_ranks(1); }

/* a rank outside the world, a negative world: refused, naming the values */
static void test_ranks_refused(void) {
    int32_t ids[100] = {0};
    mf_tokens *s = mf_tokens_from_ids(ids, 100);
    mf_loader L;
    mf_loader_config c;
    memset(&c, 0, sizeof c);
    c.batch = 2; c.seq_len = 4;
    c.rank = 2; c.world = 2;
    MFT_CHECK(mf_loader_init(&L, s, &c) < 0 && strstr(L.error, "rank 2 of world 2"));
    mf_loader_free(&L);
    c.rank = 0; c.world = -1;
    MFT_CHECK(mf_loader_init(&L, s, &c) < 0 && strstr(L.error, "world -1"));
    mf_loader_free(&L);
    c.rank = 1; c.world = 0; /* world 0 is 1: rank 1 does not exist */
    MFT_CHECK(mf_loader_init(&L, s, &c) < 0);
    mf_loader_free(&L);
    c.rank = 0; c.world = 60; c.sequential = 1; /* 120 columns of 100 tokens: too short */
    MFT_CHECK(mf_loader_init(&L, s, &c) < 0 && strstr(L.error, "world 60"));
    mf_loader_free(&L);
    mf_tokens_close(s);
}

int main(void) {
    MFT_RUN(test_ranks_shuffled);
    MFT_RUN(test_ranks_sequential);
    MFT_RUN(test_ranks_refused);
    MFT_RUN(test_sequential_t2);
    MFT_RUN(test_sequential_t8);
    MFT_RUN(test_sequential_too_short);
    MFT_RUN(test_shuffled_epoch);
    MFT_RUN(test_shuffled_restore);
    MFT_RUN(test_sorter_batches);
    MFT_RUN(test_options);
    mf_tokens_close(STREAM);
    return mft_finish();
}
