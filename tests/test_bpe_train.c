/* test_bpe_train.c - mf_tokenizer_train_bpe (docs/math.md §17.4) merge for merge against a naive
   trainer carried here (every merge recounts every pair of every distinct pre-token, the same tie
   rule, the same pre-tokenizer mf__pretok_next), on random bytes, texts full of ties and overlapping
   runs, repetitive and English-like text; the overlap and tie rules on tiny cases; round trips
   through the trained vocabulary; vocab_size 256; min_frequency; the progress callback; and the
   refused arguments with their messages. Fixed seeds, no files. */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#include "mf_test.h"
#include <stdlib.h>
#include <string.h>

/* ---- texts ---- */
static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
/* n bytes drawn from alphabet (all 256 byte values when alphabet is NULL) */
static unsigned char *random_text(uint64_t seed, size_t n, const char *alphabet) {
    unsigned char *t = (unsigned char *)malloc(n);
    size_t i, k = alphabet ? strlen(alphabet) : 256;
    for (i = 0; i < n; i++) {
        uint64_t r = rng_next(&seed) % k;
        t[i] = alphabet ? (unsigned char)alphabet[r] : (unsigned char)r;
    }
    return t;
}
static unsigned char *repeat_text(const char *unit, int times, size_t *n) {
    size_t u = strlen(unit);
    unsigned char *t = (unsigned char *)malloc(u * (size_t)times);
    int i;
    for (i = 0; i < times; i++) memcpy(t + u * (size_t)i, unit, u);
    *n = u * (size_t)times;
    return t;
}
/* English-like: words made of common syllables, a skewed (roughly Zipf) choice among 300 of them,
   capitals after a full stop, commas, newlines */
static unsigned char *english_text(uint64_t seed, size_t n) {
    static const char *syl[] = {"th", "e", "an", "in", "er", "on", "re", "at", "ou", "st", "ing", "ed",
                                "to", "is", "it", "or", "ar", "en", "al", "le", "ha", "wh", "ly", "ch"};
    const int n_syl = (int)(sizeof syl / sizeof *syl);
    char words[300][16];
    unsigned char *t = (unsigned char *)malloc(n + 32);
    size_t at = 0;
    int w, cap = 1;
    for (w = 0; w < 300; w++) {
        int k, parts = 1 + (int)(rng_next(&seed) % 3);
        words[w][0] = 0;
        for (k = 0; k < parts; k++) strcat(words[w], syl[rng_next(&seed) % (uint64_t)n_syl]);
    }
    while (at < n) {
        uint64_t r = rng_next(&seed);
        int pick = (int)((r % 300) * ((r >> 20) % 300) / 300); /* product: small indices are frequent */
        const char *s = words[pick];
        size_t len = strlen(s);
        if (at + len + 2 > n) break;
        if (at) t[at++] = ' ';
        memcpy(t + at, s, len);
        if (cap && t[at] >= 'a' && t[at] <= 'z') t[at] = (unsigned char)(t[at] - 'a' + 'A');
        at += len;
        cap = 0;
        if (r % 13 == 0) { t[at++] = '.'; cap = 1; }
        else if (r % 7 == 0) t[at++] = ',';
        if (r % 61 == 0) t[at++] = '\n';
    }
    return t;
}

/* ---- the naive trainer ---- */
typedef struct { int32_t *ids; int len; int64_t freq; } nv_word;
typedef struct { uint64_t key; int64_t w; } nv_pair;
static const unsigned char *nv_text;
typedef struct { size_t off, len; } nv_span;
static int nv_span_cmp(const void *a, const void *b) {
    const nv_span *x = (const nv_span *)a, *y = (const nv_span *)b;
    size_t m = x->len < y->len ? x->len : y->len;
    int c = memcmp(nv_text + x->off, nv_text + y->off, m);
    return c ? c : (x->len < y->len ? -1 : x->len > y->len);
}
static int nv_pair_cmp(const void *a, const void *b) {
    uint64_t x = ((const nv_pair *)a)->key, y = ((const nv_pair *)b)->key;
    return x < y ? -1 : x > y;
}
/* the merges (left, right) of byte-level BPE trained the slow way; returns how many */
static int naive_train(const unsigned char *s, size_t n, int vocab_size, int64_t min_freq, int32_t (*merges)[2]) {
    nv_span *sp = (nv_span *)malloc(n * sizeof *sp);
    nv_word *words = (nv_word *)malloc(n * sizeof *words);
    nv_pair *pairs = (nv_pair *)malloc(n * sizeof *pairs);
    size_t pos = 0, n_sp = 0, i;
    int n_words = 0, n_merges = 0, w, k;
    for (; pos < n; pos = sp[n_sp++].len + pos) {
        sp[n_sp].off = pos;
        sp[n_sp].len = mf__pretok_next(s, n, pos) - pos;
    }
    nv_text = s;
    qsort(sp, n_sp, sizeof *sp, nv_span_cmp); /* equal pre-tokens side by side */
    for (i = 0; i < n_sp; i++) {
        if (i > 0 && nv_span_cmp(&sp[i - 1], &sp[i]) == 0) { words[n_words - 1].freq++; continue; }
        words[n_words].len = (int)sp[i].len;
        words[n_words].freq = 1;
        words[n_words].ids = (int32_t *)malloc(sp[i].len * sizeof(int32_t));
        for (k = 0; k < (int)sp[i].len; k++) words[n_words].ids[k] = s[sp[i].off + (size_t)k];
        n_words++;
    }
    while (256 + n_merges < vocab_size) {
        size_t np = 0, j;
        uint64_t best = 0;
        int64_t best_count = 0;
        int32_t a, b, c = 256 + n_merges;
        for (w = 0; w < n_words; w++) /* every adjacent pair, overlapping ones included */
            for (k = 0; k + 1 < words[w].len; k++) {
                pairs[np].key = (uint64_t)words[w].ids[k] << 32 | (uint64_t)words[w].ids[k + 1];
                pairs[np++].w = words[w].freq;
            }
        qsort(pairs, np, sizeof *pairs, nv_pair_cmp);
        for (i = 0; i < np; i = j) { /* runs of one key, smallest key first: ">" keeps it on ties */
            int64_t count = 0;
            for (j = i; j < np && pairs[j].key == pairs[i].key; j++) count += pairs[j].w;
            if (count > best_count) { best_count = count; best = pairs[i].key; }
        }
        if (np == 0 || best_count < min_freq) break;
        a = (int32_t)(best >> 32); b = (int32_t)(best & 0xffffffffu);
        merges[n_merges][0] = a; merges[n_merges][1] = b;
        n_merges++;
        for (w = 0; w < n_words; w++) { /* left to right: "a a a" -> "aa a" */
            int r = 0, o = 0;
            while (r < words[w].len)
                if (r + 1 < words[w].len && words[w].ids[r] == a && words[w].ids[r + 1] == b) { words[w].ids[o++] = c; r += 2; }
                else words[w].ids[o++] = words[w].ids[r++];
            words[w].len = o;
        }
    }
    for (w = 0; w < n_words; w++) free(words[w].ids);
    free(sp); free(words); free(pairs);
    return n_merges;
}

/* ---- checks ---- */
/* the text and a few random bytes encode and decode back exactly */
static void check_round_trip(mf_tokenizer *t, const unsigned char *s, size_t n) {
    int64_t m = mf_tokenizer_encode(t, s, n, NULL, 0), back;
    int32_t *ids = (int32_t *)malloc((size_t)(m > 0 ? m : 1) * sizeof *ids);
    unsigned char *out = (unsigned char *)malloc(n + 1), *rnd = random_text(99, 300, NULL), rout[300];
    int32_t rids[300];
    MFT_CHECK(m > 0 && m <= (int64_t)n);
    MFT_CHECK(mf_tokenizer_encode(t, s, n, ids, m) == m);
    back = mf_tokenizer_decode(t, ids, m, out, (int64_t)n);
    MFT_CHECK(back == (int64_t)n && memcmp(out, s, n) == 0);
    m = mf_tokenizer_encode(t, rnd, 300, rids, 300);
    MFT_CHECK(m > 0 && m <= 300 && mf_tokenizer_decode(t, rids, m, rout, 300) == 300 && memcmp(rout, rnd, 300) == 0);
    MFT_CHECK(mf_tokenizer_error(t) == NULL);
    free(ids); free(out); free(rnd);
}
/* train both ways; the same merges in the same order, each token the bytes of its two parts */
static int check_against_naive(const unsigned char *s, size_t n, int vocab_size, int min_freq) {
    mf_bpe_options o;
    mf_tokenizer *t;
    int32_t (*want)[2] = (int32_t (*)[2])malloc((size_t)vocab_size * sizeof *want);
    int n_want = naive_train(s, n, vocab_size, min_freq ? min_freq : 2, want), k, bad = 0, got;
    memset(&o, 0, sizeof o);
    o.min_frequency = min_freq;
    t = mf_tokenizer_train_bpe(s, n, vocab_size, &o);
    MFT_CHECK(t && mf_tokenizer_error(t) == NULL);
    if (!t || mf_tokenizer_error(t)) { if (t) printf("    %s\n", mf_tokenizer_error(t)); mf_tokenizer_free(t); free(want); return -1; }
    got = t->n_merges;
    MFT_CHECK(got == n_want);
    MFT_CHECK(mf_tokenizer_vocab_size(t) == 256 + got);
    MFT_CHECK(mf_tokenizer_get_kind(t) == MF_TOK_BPE);
    for (k = 0; k < got && k < n_want; k++) {
        int la, lb, lc;
        const unsigned char *pa = mf_tokenizer_token(t, want[k][0], &la), *pb = mf_tokenizer_token(t, want[k][1], &lb);
        const unsigned char *pc = mf_tokenizer_token(t, 256 + k, &lc);
        if (t->merges[k][0] != want[k][0] || t->merges[k][1] != want[k][1] || t->merges[k][2] != 256 + k) {
            if (!bad) printf("    merge %d: library (%d, %d), naive (%d, %d)\n", k, t->merges[k][0], t->merges[k][1], want[k][0], want[k][1]);
            bad++;
        }
        if (!pa || !pb || !pc || lc != la + lb || memcmp(pc, pa, (size_t)la) || memcmp(pc + la, pb, (size_t)lb)) bad++;
    }
    MFT_CHECK(bad == 0);
    check_round_trip(t, s, n);
    mf_tokenizer_free(t);
    free(want);
    return got;
}

static void test_random_bytes(void) {
    unsigned char *s = random_text(1, 4000, NULL);
    MFT_CHECK(check_against_naive(s, 4000, 256 + 200, 0) > 10);
    MFT_CHECK(check_against_naive(s, 4000, 256 + 200, 1) == 200);
    free(s);
}
/* a three-letter alphabet with spaces: long overlapping runs and many equal counts */
static void test_small_alphabet(void) {
    unsigned char *s = random_text(2, 3000, "ab a");
    unsigned char *u = random_text(3, 2000, "xyz ");
    MFT_CHECK(check_against_naive(s, 3000, 256 + 300, 0) > 50);
    MFT_CHECK(check_against_naive(u, 2000, 256 + 300, 1) > 50);
    free(s); free(u);
}
static void test_repetitive(void) {
    size_t n;
    unsigned char *s = repeat_text("the cat sat on the mat. ", 40, &n);
    MFT_CHECK(check_against_naive(s, n, 256 + 100, 0) > 5);
    free(s);
}
/* 120 three-letter words, each exactly twice: every first count is a tie */
static void test_many_ties(void) {
    unsigned char s[120 * 2 * 4];
    size_t n = 0;
    int w, r;
    for (r = 0; r < 2; r++)
        for (w = 0; w < 120; w++) {
            s[n++] = ' ';
            s[n++] = (unsigned char)('a' + w % 5);
            s[n++] = (unsigned char)('a' + (w / 5) % 6);
            s[n++] = (unsigned char)('a' + (w / 30) % 4 + (w & 1));
        }
    MFT_CHECK(check_against_naive(s, n, 256 + 150, 0) > 20);
}
static void test_english_like(void) {
    unsigned char *s = english_text(4, 6000);
    MFT_CHECK(check_against_naive(s, 6000, 256 + 400, 0) > 100);
    free(s);
}
static void test_overlapping_runs(void) {
    static const char *texts[] = {"aaaaaaa", "aaaaaaaaaaaaaaaa aaaa aaa aa a aaaaa", "abababababa aba", "aaabaaabaaab aab",
                                  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
    int i;
    for (i = 0; i < (int)(sizeof texts / sizeof *texts); i++) {
        MFT_CHECK(check_against_naive((const unsigned char *)texts[i], strlen(texts[i]), 256 + 20, 0) >= 1);
        MFT_CHECK(check_against_naive((const unsigned char *)texts[i], strlen(texts[i]), 256 + 20, 1) >= 1);
    }
}

/* "aaa" holds (a,a) twice (overlapping pairs count); merging left to right leaves "aa a", whose
   (aa,a) occurs once: with min_frequency 2 training stops after one merge */
static void test_overlap_rule(void) {
    mf_bpe_options o;
    mf_tokenizer *t = mf_tokenizer_train_bpe("aaa", 3, 1000, NULL);
    int32_t ids[4];
    MFT_CHECK(mf_tokenizer_error(t) == NULL && t->n_merges == 1 && t->merges[0][0] == 'a' && t->merges[0][1] == 'a');
    MFT_CHECK(mf_tokenizer_encode(t, "aaa", 3, ids, 4) == 2 && ids[0] == 256 && ids[1] == 'a');
    mf_tokenizer_free(t);
    /* "aaaa": (a,a) three times -> "aa aa"; min_frequency 1 then merges (aa,aa), and nothing is left */
    memset(&o, 0, sizeof o);
    o.min_frequency = 1;
    t = mf_tokenizer_train_bpe("aaaa", 4, 1000, &o);
    MFT_CHECK(mf_tokenizer_error(t) == NULL && t->n_merges == 2 && mf_tokenizer_vocab_size(t) == 258);
    MFT_CHECK(t->merges[1][0] == 256 && t->merges[1][1] == 256 && t->merges[1][2] == 257);
    MFT_CHECK(mf_tokenizer_encode(t, "aaaa", 4, ids, 4) == 1 && ids[0] == 257);
    mf_tokenizer_free(t);
}
/* equal counts: the pair with the smaller (left, right) ids first: "bbaa" has (b,b), (b,a), (a,a)
   once each, so (a,a) = (97, 97) goes first, then (b,b), then (bb, aa) */
static void test_tie_rule(void) {
    mf_bpe_options o;
    mf_tokenizer *t;
    memset(&o, 0, sizeof o);
    o.min_frequency = 1;
    t = mf_tokenizer_train_bpe("bbaa", 4, 1000, &o);
    MFT_CHECK(mf_tokenizer_error(t) == NULL && t->n_merges == 3);
    MFT_CHECK(t->merges[0][0] == 'a' && t->merges[0][1] == 'a');
    MFT_CHECK(t->merges[1][0] == 'b' && t->merges[1][1] == 'b');
    MFT_CHECK(t->merges[2][0] == 257 && t->merges[2][1] == 256);
    mf_tokenizer_free(t);
}
/* counts are weighted by how often a pre-token occurs: "xy" ten times beats "ab" once */
static void test_word_frequency(void) {
    size_t n;
    unsigned char *s = repeat_text("xy", 10, &n), buf[64];
    mf_tokenizer *t;
    memcpy(buf, "ab", 2);
    memcpy(buf + 2, s, n);
    t = mf_tokenizer_train_bpe(buf, n + 2, 257, NULL);
    MFT_CHECK(mf_tokenizer_error(t) == NULL && t->n_merges == 1);
    free(s);
    mf_tokenizer_free(t);
}

static void test_vocab_256_no_merges(void) {
    unsigned char *s = english_text(5, 2000);
    mf_tokenizer *t = mf_tokenizer_train_bpe(s, 2000, 256, NULL);
    int len, b, bad = 0;
    MFT_CHECK(mf_tokenizer_error(t) == NULL && mf_tokenizer_vocab_size(t) == 256 && t->n_merges == 0);
    for (b = 0; b < 256; b++) {
        const unsigned char *p = mf_tokenizer_token(t, b, &len);
        bad += !p || len != 1 || p[0] != b || t->byte_id[b] != b;
    }
    MFT_CHECK(bad == 0);
    check_round_trip(t, s, 2000);
    mf_tokenizer_free(t);
    free(s);
}
/* a higher min_frequency stops earlier, and every merge it keeps is the same */
static void test_min_frequency(void) {
    unsigned char *s = english_text(6, 5000);
    mf_bpe_options o;
    mf_tokenizer *lo, *hi;
    int k, bad = 0;
    memset(&o, 0, sizeof o);
    o.min_frequency = 2;
    lo = mf_tokenizer_train_bpe(s, 5000, 100000, &o);
    o.min_frequency = 40;
    hi = mf_tokenizer_train_bpe(s, 5000, 100000, &o);
    MFT_CHECK(mf_tokenizer_error(lo) == NULL && mf_tokenizer_error(hi) == NULL);
    MFT_CHECK(hi->n_merges > 0 && hi->n_merges < lo->n_merges && lo->n_merges < 100000 - 256);
    for (k = 0; k < hi->n_merges; k++) bad += memcmp(hi->merges[k], lo->merges[k], sizeof hi->merges[k]) != 0;
    MFT_CHECK(bad == 0);
    MFT_CHECK(check_against_naive(s, 5000, 100000, 40) == hi->n_merges);
    mf_tokenizer_free(lo); mf_tokenizer_free(hi);
    free(s);
}

typedef struct { int calls, first_done, last_done, total, backwards; } progress_log;
static void on_progress(void *user, int done, int total) {
    progress_log *p = (progress_log *)user;
    if (p->calls == 0) p->first_done = done;
    else if (done < p->last_done) p->backwards++;
    p->last_done = done;
    p->total = total;
    p->calls++;
}
static void test_progress(void) {
    unsigned char *s = english_text(7, 6000);
    progress_log log;
    mf_bpe_options o;
    mf_tokenizer *t;
    memset(&log, 0, sizeof log);
    memset(&o, 0, sizeof o);
    o.progress = on_progress;
    o.user = &log;
    t = mf_tokenizer_train_bpe(s, 6000, 256 + 300, &o);
    MFT_CHECK(mf_tokenizer_error(t) == NULL);
    MFT_CHECK(log.calls >= 3 && log.first_done == 0 && log.backwards == 0 && log.total == 300);
    MFT_CHECK(log.last_done == t->n_merges);
    mf_tokenizer_free(t);
    free(s);
}

/* a refused call returns a failed tokenizer whose message says what and how to fix it */
static void check_refused(mf_tokenizer *t, const char *part1, const char *part2) {
    const char *e = mf_tokenizer_error(t);
    int32_t id;
    MFT_CHECK(t != NULL && e != NULL);
    if (!t || !e) return;
    MFT_CHECK(strstr(e, "mf_tokenizer_train_bpe") != NULL);
    MFT_CHECK(strstr(e, part1) != NULL);
    MFT_CHECK(strstr(e, part2) != NULL);
    if (!strstr(e, part1) || !strstr(e, part2)) printf("    message: %s\n", e);
    MFT_CHECK(mf_tokenizer_vocab_size(t) == -1);
    MFT_CHECK(mf_tokenizer_encode(t, "a", 1, &id, 1) == -1);
    mf_tokenizer_free(t);
}
static void test_bad_arguments(void) {
    mf_bpe_options o;
    memset(&o, 0, sizeof o);
    check_refused(mf_tokenizer_train_bpe(NULL, 10, 300, NULL), "text is NULL", "non-empty");
    check_refused(mf_tokenizer_train_bpe("abc", 0, 300, NULL), "empty", "non-empty");
    check_refused(mf_tokenizer_train_bpe("abc", 3, 255, NULL), "vocab_size 255", "256..");
    check_refused(mf_tokenizer_train_bpe("abc", 3, -1, NULL), "vocab_size -1", "256 single bytes");
    check_refused(mf_tokenizer_train_bpe("abc", 3, 1 << 30, NULL), "vocab_size 1073741824", "out of range");
    o.min_frequency = -3;
    check_refused(mf_tokenizer_train_bpe("abc", 3, 300, &o), "min_frequency -3", "default");
}

int main(void) {
    MFT_RUN(test_random_bytes);
    MFT_RUN(test_small_alphabet);
    MFT_RUN(test_repetitive);
    MFT_RUN(test_many_ties);
    MFT_RUN(test_english_like);
    MFT_RUN(test_overlapping_runs);
    MFT_RUN(test_overlap_rule);
    MFT_RUN(test_tie_rule);
    MFT_RUN(test_word_frequency);
    MFT_RUN(test_vocab_256_no_merges);
    MFT_RUN(test_min_frequency);
    MFT_RUN(test_progress);
    MFT_RUN(test_bad_arguments);
    return mft_finish();
}
