/* bench_bpe_train.c - mf_tokenizer_train_bpe on a text file: time, MB/s, merges/s, a round trip.
 *
 *   gcc -O2 -march=native bench/bench_bpe_train.c -o build/bench_bpe_train -lm
 *   ./build/bench_bpe_train FILE VOCAB_SIZE [--merges OUT] [--check BYTES]
 *
 * Prints the time of the whole training call and of its two phases (pre-tokenizing and counting the
 * distinct pre-tokens; the merges), MB/s over the whole call, merges/s over the merge phase, and a
 * line "RESULT key=value ..." for scripts (bench/bpe_train.sh). --merges writes the merges, one a
 * line, as the hex bytes of the left and the right token ("6120 62"), to compare with another
 * trainer. --check: the round trip encode -> decode runs on the first BYTES of the file (default
 * 65536; 0: the whole file), since the encoder may be much slower than training. Single-threaded:
 * the trainer uses one core. */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define METAFORMER_IMPLEMENTATION
#include "../metaformer.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static unsigned char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    long size;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = (unsigned char *)malloc((size_t)size)) != NULL && fread(buf, 1, (size_t)size, f) != (size_t)size) {
        free(buf);
        buf = NULL;
    }
    if (buf) *n = (size_t)size;
    fclose(f);
    return buf;
}

/* the progress callback's first call (0 merges) marks the end of counting */
typedef struct { double counted; int reported; } clock_marks;
static void on_progress(void *user, int done, int total) {
    clock_marks *m = (clock_marks *)user;
    if (done == 0 && m->counted == 0) m->counted = now();
    if (done >= m->reported + total / 10 && done < total) {
        fprintf(stderr, "  %d / %d merges\n", done, total);
        m->reported = done;
    }
}

static int write_merges(const mf_tokenizer *t, const char *path) {
    FILE *f = fopen(path, "w");
    int i, k, side, len;
    if (!f) return -1;
    for (i = 256; i < mf_tokenizer_vocab_size(t); i++) {
        /* the two parts of token i: the merge table (internal, the bench compiles the header) */
        for (side = 0; side < 2; side++) {
            const unsigned char *p = mf_tokenizer_token(t, t->merges[i - 256][side], &len);
            for (k = 0; k < len; k++) fprintf(f, "%02x", p[k]);
            fputc(side ? '\n' : ' ', f);
        }
    }
    return fclose(f);
}

int main(int argc, char **argv) {
    const char *path, *merges_out = NULL;
    size_t n = 0, check = 65536;
    int vocab, i;
    unsigned char *text, *back;
    int32_t *ids;
    double t0, t1;
    int64_t m, len;
    clock_marks marks = {0, 0};
    mf_bpe_options opt;
    mf_tokenizer *t;
    if (argc < 3) {
        fprintf(stderr, "usage: %s FILE VOCAB_SIZE [--merges OUT] [--check BYTES]\n", argv[0]);
        return 2;
    }
    path = argv[1];
    vocab = atoi(argv[2]);
    for (i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--merges")) merges_out = argv[i + 1];
        else if (!strcmp(argv[i], "--check")) check = (size_t)strtoull(argv[i + 1], NULL, 10);
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
    }
    if (!(text = read_file(path, &n))) { fprintf(stderr, "cannot read %s (missing or empty?)\n", path); return 1; }
    memset(&opt, 0, sizeof opt);
    opt.progress = on_progress;
    opt.user = &marks;
    t0 = now();
    t = mf_tokenizer_train_bpe(text, n, vocab, &opt);
    t1 = now();
    if (mf_tokenizer_error(t)) { fprintf(stderr, "%s\n", mf_tokenizer_error(t)); return 1; }
    {
        int merges = mf_tokenizer_vocab_size(t) - 256;
        double mb = (double)n / 1e6, count_s = marks.counted - t0, merge_s = t1 - marks.counted;
        printf("%s: %.1f MB, vocab %d (%d merges)\n", path, mb, mf_tokenizer_vocab_size(t), merges);
        printf("  total %.3f s = %.1f MB/s; counting pre-tokens %.3f s; merges %.3f s = %.0f merges/s\n", t1 - t0,
               mb / (t1 - t0), count_s, merge_s, merge_s > 0 ? merges / merge_s : 0.0);
        printf("RESULT impl=mf mb=%.3f vocab=%d merges=%d total_s=%.4f count_s=%.4f merge_s=%.4f mb_s=%.2f merges_s=%.0f\n", mb,
               mf_tokenizer_vocab_size(t), merges, t1 - t0, count_s, merge_s, mb / (t1 - t0), merge_s > 0 ? merges / merge_s : 0.0);
    }
    if (merges_out && write_merges(t, merges_out)) { fprintf(stderr, "cannot write %s\n", merges_out); return 1; }
    if (check == 0 || check > n) check = n;
    ids = (int32_t *)malloc(check * sizeof *ids);
    back = (unsigned char *)malloc(check);
    t0 = now();
    m = mf_tokenizer_encode(t, text, check, ids, (int64_t)check);
    len = m > 0 ? mf_tokenizer_decode(t, ids, m, back, (int64_t)check) : -1;
    t1 = now();
    if (m <= 0 || len != (int64_t)check || memcmp(back, text, check) != 0) {
        fprintf(stderr, "round trip FAILED on the first %zu bytes (%s)\n", check, mf_tokenizer_error(t) ? mf_tokenizer_error(t) : "bytes differ");
        return 1;
    }
    printf("  round trip ok on the first %zu bytes: %lld tokens (%.2f bytes/token), encode+decode %.3f s\n", check,
           (long long)m, (double)check / (double)m, t1 - t0);
    mf_tokenizer_free(t);
    free(text); free(ids); free(back);
    return 0;
}
