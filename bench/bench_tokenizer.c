/* bench_tokenizer - GPT-2's byte-level BPE in metaformer.h: speed, GPT-2's reference ids, round trip.
 *
 *   bench_tokenizer GPT2_DIR time TEXT [REPS]   encode TEXT REPS times (default 5), each with a freshly
 *                                               loaded tokenizer (an empty pre-token cache, as the first
 *                                               call of a program sees it); prints the median as
 *                                               "RESULT impl=c mb_s=... tok_s=... tokens=... bytes=..."
 *   bench_tokenizer GPT2_DIR check TEXT REF.u16 every id equals the reference (little-endian uint16, as
 *                                               GPT-2's own encoder gives them)
 *   bench_tokenizer GPT2_DIR ids TEXT OUT       write the ids as little-endian uint32 (to compare with
 *                                               another encoder)
 *
 * GPT2_DIR holds GPT-2's encoder.json and vocab.bpe. Every mode also checks that decoding the ids
 * gives TEXT back byte for byte. bench/tokenizer.sh runs it beside tiktoken. Exit status 1 on any
 * mismatch or error. */
#define METAFORMER_IMPLEMENTATION
#include "../metaformer.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    size_t cap = 0, got;
    *n = 0;
    if (!f) return NULL;
    do {
        if (cap - *n < 65536) { cap = cap ? cap * 2 : 1 << 20; buf = (unsigned char *)realloc(buf, cap); if (!buf) { fclose(f); return NULL; } }
        got = fread(buf + *n, 1, cap - *n, f);
        *n += got;
    } while (got > 0);
    fclose(f);
    return buf;
}
static mf_tokenizer *gpt2(const char *dir) {
    char enc[4096], bpe[4096];
    mf_tokenizer *t;
    snprintf(enc, sizeof enc, "%s/encoder.json", dir);
    snprintf(bpe, sizeof bpe, "%s/vocab.bpe", dir);
    t = mf_tokenizer_gpt2(enc, bpe);
    if (mf_tokenizer_error(t)) { fprintf(stderr, "bench_tokenizer: %s\n", mf_tokenizer_error(t)); exit(1); }
    return t;
}
/* encode text (ids malloc'ed into *ids), and check the round trip */
static int64_t encode_checked(mf_tokenizer *t, const unsigned char *text, size_t n, int32_t **ids) {
    int64_t k = mf_tokenizer_encode(t, text, n, NULL, 0), d;
    unsigned char *back;
    *ids = (int32_t *)malloc((size_t)(k > 0 ? k : 1) * sizeof **ids);
    back = (unsigned char *)malloc(n ? n : 1);
    if (k < 0 || !*ids || !back || mf_tokenizer_encode(t, text, n, *ids, k) != k) { fprintf(stderr, "bench_tokenizer: encode failed: %s\n", mf_tokenizer_error(t)); exit(1); }
    d = mf_tokenizer_decode(t, *ids, k, back, (int64_t)n);
    if (d != (int64_t)n || memcmp(back, text, n) != 0) { fprintf(stderr, "bench_tokenizer: decode(encode(text)) differs from the text\n"); exit(1); }
    free(back);
    return k;
}
static int cmp_double(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

int main(int argc, char **argv) {
    size_t n;
    unsigned char *text;
    int32_t *ids;
    int64_t k, i;
    mf_tokenizer *t;
    if (argc < 4) { fprintf(stderr, "usage: bench_tokenizer GPT2_DIR time TEXT [REPS] | check TEXT REF.u16 | ids TEXT OUT\n"); return 2; }
    if (!(text = read_all(argv[3], &n))) { fprintf(stderr, "bench_tokenizer: cannot read %s\n", argv[3]); return 1; }
    t = gpt2(argv[1]);
    k = encode_checked(t, text, n, &ids);
    if (strcmp(argv[2], "time") == 0) {
        int reps = argc > 4 ? atoi(argv[4]) : 5, r;
        double sec[101];
        if (reps < 1 || reps > 101) { fprintf(stderr, "bench_tokenizer: REPS must be 1..101\n"); return 2; }
        for (r = 0; r < reps; r++) {
            mf_tokenizer *fresh = gpt2(argv[1]);
            double t0 = mf_time();
            int64_t got = mf_tokenizer_encode(fresh, text, n, ids, k);
            sec[r] = mf_time() - t0;
            if (got != k) { fprintf(stderr, "bench_tokenizer: a repeat gave %lld ids, not %lld\n", (long long)got, (long long)k); return 1; }
            mf_tokenizer_free(fresh);
        }
        qsort(sec, (size_t)reps, sizeof sec[0], cmp_double);
        printf("RESULT impl=c mb_s=%.3f tok_s=%.0f tokens=%lld bytes=%zu sec=%.6f\n", (double)n / 1e6 / sec[reps / 2], (double)k / sec[reps / 2], (long long)k, n, sec[reps / 2]);
    } else if (strcmp(argv[2], "check") == 0 && argc == 5) {
        size_t rn;
        unsigned char *ref = read_all(argv[4], &rn);
        if (!ref || rn % 2) { fprintf(stderr, "bench_tokenizer: cannot read %s as uint16 ids\n", argv[4]); return 1; }
        for (i = 0; i < k && i < (int64_t)(rn / 2); i++)
            if (ids[i] != (ref[2 * i] | ref[2 * i + 1] << 8)) {
                fprintf(stderr, "bench_tokenizer: %s: id %lld is %d, the reference has %d\n", argv[3], (long long)i, (int)ids[i], ref[2 * i] | ref[2 * i + 1] << 8);
                return 1;
            }
        if (k != (int64_t)(rn / 2)) { fprintf(stderr, "bench_tokenizer: %s: %lld ids, the reference has %zu\n", argv[3], (long long)k, rn / 2); return 1; }
        printf("OK %s: all %lld ids equal GPT-2's, decoding gives the text back\n", argv[3], (long long)k);
        free(ref);
    } else if (strcmp(argv[2], "ids") == 0 && argc == 5) {
        FILE *f = fopen(argv[4], "wb");
        for (i = 0; f && i < k; i++) {
            unsigned char b[4] = {(unsigned char)ids[i], (unsigned char)(ids[i] >> 8), (unsigned char)(ids[i] >> 16), (unsigned char)(ids[i] >> 24)};
            fwrite(b, 1, 4, f);
        }
        if (!f || fclose(f) != 0) { fprintf(stderr, "bench_tokenizer: cannot write %s\n", argv[4]); return 1; }
    } else { fprintf(stderr, "bench_tokenizer: unknown mode %s\n", argv[2]); return 2; }
    free(ids); free(text);
    mf_tokenizer_free(t);
    return 0;
}
