/* fuzz_cli.h - the fuzz targets of the command lines (fuzz_cli_*.c): the input, cut at NUL bytes,
   is the argument list of the program, whose main (renamed ex_program_main) runs up to EX_PARSED(),
   where it has checked its options and before it reads any file. examples/common.h with EX_FUZZ
   makes die() and exit() return here. Property: no memory error, and every refusal has a message
   (no "(null)" in it). The program's settings are global: they are put back after each input. */
#include <setjmp.h>
#include "fuzz.h"

typedef struct { void *p; size_t size; void *saved; } fuzz_global;

static int fuzz_mem(const uint8_t *data, size_t size, const char *s) {
    size_t n = strlen(s), i;
    for (i = 0; i + n <= size; i++) if (memcmp(data + i, s, n) == 0) return 1;
    return 0;
}

static void fuzz_cli_run(const uint8_t *data, size_t size, const char *prog, fuzz_global *g, int n_g) {
    char *copy = (char *)malloc(size + 1), *argv[66];
    int argc = 0, i, how;
    size_t at = 0;
    FUZZ_CHECK(copy != NULL);
    for (i = 0; i < n_g; i++) { /* the first input sees the program's defaults: keep them */
        if (!g[i].saved) { g[i].saved = malloc(g[i].size); FUZZ_CHECK(g[i].saved); memcpy(g[i].saved, g[i].p, g[i].size); }
        memcpy(g[i].p, g[i].saved, g[i].size);
    }
    memcpy(copy, data, size);
    copy[size] = 0;
    argv[argc++] = (char *)prog;
    while (at < size && argc < 65) { argv[argc++] = copy + at; at += strlen(copy + at) + 1; }
    argv[argc] = NULL;
    ex_fuzz_msg[0] = 0;
    how = setjmp(ex_fuzz_jmp);
    if (how == 0) ex_program_main(argc, argv);
    else if (how == EX_FUZZ_DIED) /* "(null)" only where the input says it */
        FUZZ_CHECK(ex_fuzz_msg[0] != 0 && (!strstr(ex_fuzz_msg, "(null)") || fuzz_mem(data, size, "(null)")));
    free(copy);
}
