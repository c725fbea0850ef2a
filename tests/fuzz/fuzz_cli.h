/* fuzz_cli.h - the fuzz targets of the command lines (fuzz_cli_*.c): the input, cut at NUL bytes,
   is the argument list of the program, whose main (renamed ex_program_main) runs up to EX_PARSED(),
   where it has checked its options and before it reads any file. examples/common.h with EX_FUZZ
   makes die() and exit() return here. Property: no memory error, and every refusal has a message
   (with no NULL string printed in it). The program's settings are global: they are put back after each input. */
#include <setjmp.h>
#include "fuzz.h"

typedef struct { void *p; size_t size; void *saved; } fuzz_global;



static void fuzz_cli_run(const uint8_t *data, size_t size, const char *prog, fuzz_global *g, int n_g) {
    static FILE *quiet;
    FILE *out, *err;
    char *copy = (char *)(malloc)(size + 1), *argv[66]; /* (malloc): not the program's, see common.h */
    int argc = 0, i, how;
    size_t at = 0;
    FUZZ_CHECK(copy != NULL);
    for (i = 0; i < n_g; i++) { /* the first input sees the program's defaults: keep them */
        if (!g[i].saved) { g[i].saved = (malloc)(g[i].size); FUZZ_CHECK(g[i].saved); memcpy(g[i].saved, g[i].p, g[i].size); }
        memcpy(g[i].p, g[i].saved, g[i].size);
    }
    memcpy(copy, data, size);
    copy[size] = 0;
    argv[argc++] = (char *)prog;
    while (at < size && argc < 65) { argv[argc++] = copy + at; at += strlen(copy + at) + 1; }
    argv[argc] = NULL;
    ex_fuzz_msg[0] = 0;
    /* the program's help and messages go nowhere (glibc's stdout and stderr are assignable; the
       sanitizers' reports are written to file descriptor 2 directly and still show) */
    if (!quiet) FUZZ_CHECK((quiet = fopen("/dev/null", "w")) != NULL);
    out = stdout; err = stderr;
    stdout = stderr = quiet;
    how = setjmp(ex_fuzz_jmp);
    if (how == 0) ex_program_main(argc, argv);
    stdout = out; stderr = err;
    ex_fuzz_free_all();
    /* "(null)", glibc's text of a NULL string, counts where the input has no "(" of its own */
    if (how == EX_FUZZ_DIED && (!ex_fuzz_msg[0] || (strstr(ex_fuzz_msg, "(null)") && !memchr(data, '(', size)))) {
        fprintf(stderr, "%s: error: %s\n", prog, ex_fuzz_msg);
        FUZZ_CHECK(!"a refusal without a message, or with a NULL string in it");
    }
    (free)(copy);
}
