/* replay.c - runs a fuzz target (tests/fuzz/fuzz_*.c, linked in) on each file named on the command
   line, or each file in a folder named there: the committed seeds and the regression inputs of
   crashes found (tests/fuzz/seeds/TARGET, tests/fuzz/regress/TARGET), without libFuzzer. `make
   test` builds it with gcc's ASan + UBSan: a memory error or a broken property aborts the run.
   Prints "ok FILE" per input and the runner's summary (tests/run.sh). */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int n_run = 0;

static void run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    if (!f) { printf("FAIL cannot open %s\n", path); exit(1); }
    for (;;) {
        if (n == cap && !(buf = (uint8_t *)realloc(buf, cap = cap ? 2 * cap : 4096))) { printf("FAIL out of memory\n"); exit(1); }
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    printf("ok   %s\n", path);
    n_run++;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void run_path(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return; /* a target without regression inputs yet */
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        char **names = NULL;
        int n = 0, i;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            names = (char **)realloc(names, (size_t)(n + 1) * sizeof *names);
            names[n] = (char *)malloc(strlen(path) + strlen(e->d_name) + 2);
            sprintf(names[n++], "%s/%s", path, e->d_name);
        }
        if (d) closedir(d);
        if (n) qsort(names, (size_t)n, sizeof *names, by_name); /* a fixed order */
        for (i = 0; i < n; i++) { run_path(names[i]); free(names[i]); }
        free(names);
    } else run_file(path);
}

int main(int argc, char **argv) {
    int i;
    for (i = 1; i < argc; i++) run_path(argv[i]);
    printf("%d passed, 0 failed\n", n_run);
    return 0;
}
