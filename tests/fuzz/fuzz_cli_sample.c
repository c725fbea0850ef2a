/* The command line of build/sample (examples/sample.c): see fuzz_cli.h. */
#define EX_FUZZ 1
#define main ex_program_main
#include "../../examples/sample.c"
#undef main
#include "fuzz_cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static fuzz_global g[] = {{&A, sizeof A, NULL}, {&M, sizeof M, NULL}};
    fuzz_cli_run(data, size, "sample", g, (int)(sizeof g / sizeof g[0]));
    return 0;
}
