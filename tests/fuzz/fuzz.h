/* fuzz.h - what the fuzz targets share (tests/fuzz/fuzz_*.c; tests/fuzz/run.sh runs them).
 *
 * Each target defines LLVMFuzzerTestOneInput(data, size): libFuzzer calls it (clang
 * -fsanitize=fuzzer,address,undefined, `make fuzz`), and tests/fuzz/replay.c calls it on each file
 * of the committed seeds and regression inputs (gcc's ASan + UBSan, in `make test`). A target
 * returns 0; a broken property aborts (FUZZ_CHECK), which both drivers report as a crash.
 * Include after the target's own includes. */
#ifndef MF_FUZZ_H
#define MF_FUZZ_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FUZZ_CHECK(cond) do { if (!(cond)) { \
    fprintf(stderr, "fuzz property failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); abort(); } } while (0)

#ifdef __cplusplus
extern "C"
#endif
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fuzz_paths[8][512];
static void fuzz_remove_files(void) { int i; for (i = 0; i < 8; i++) if (fuzz_paths[i][0]) remove(fuzz_paths[i]); }

/* A file of this process for the inputs the loaders read by path: $TMPDIR (or /tmp), one name per
   process and index (0..7), overwritten by each input and removed at exit. Aborts when it cannot be
   written (not the input's fault). */
static const char *fuzz_file(int index, const void *data, size_t size) {
    static int registered;
    char *path = fuzz_paths[index];
    const char *dir = getenv("TMPDIR");
    FILE *f;
    if (!registered) registered = atexit(fuzz_remove_files) == 0;
    snprintf(path, sizeof fuzz_paths[index], "%s/mf_fuzz_%ld_%d", dir && *dir ? dir : "/tmp", (long)getpid(), index);
    f = fopen(path, "wb");
    FUZZ_CHECK(f != NULL);
    FUZZ_CHECK(size == 0 || fwrite(data, 1, size, f) == size);
    FUZZ_CHECK(fclose(f) == 0);
    return path;
}

/* Cut the input at each occurrence of sep (a byte string) into at most max parts; returns their
   number. A way to give a target several files in one input. */
static int fuzz_split(const uint8_t *data, size_t size, const char *sep, const uint8_t **part, size_t *len, int max) {
    size_t ls = strlen(sep), start = 0, i = 0;
    int n = 0;
    while (n < max - 1 && i + ls <= size) {
        if (memcmp(data + i, sep, ls) == 0) { part[n] = data + start; len[n++] = i - start; i = start = i + ls; }
        else i++;
    }
    part[n] = data + start; len[n++] = size - start;
    return n;
}

#ifdef METAFORMER_H
/* A tokenizer that loaded: a short text of every class (letters, digits, punctuation, an accented
   letter, white space, bytes that are not UTF-8) encodes to ids inside the vocabulary and decodes
   back exactly. */
static void fuzz_round_trip(mf_tokenizer *tok) {
    static const char text[] = "Hello, world's 12 caf\xc3\xa9\n\t \xff\xfe 123";
    int32_t ids[64];
    char back[64];
    int64_t n = mf_tokenizer_encode(tok, text, sizeof text - 1, ids, 64), i;
    FUZZ_CHECK(n >= 1 && n <= 64);
    for (i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < mf_tokenizer_vocab_size(tok));
    FUZZ_CHECK(mf_tokenizer_decode(tok, ids, n, back, sizeof back) == (int64_t)sizeof text - 1);
    FUZZ_CHECK(memcmp(back, text, sizeof text - 1) == 0);
}
#endif
#endif
