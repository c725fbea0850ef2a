/* The command line of build/tokenize (examples/tokenize.c): see fuzz_cli.h. */
#define EX_FUZZ 1
#define main ex_program_main
#include "../../examples/tokenize.c"
#undef main
#include "fuzz_cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static fuzz_global g[] = {{&S, sizeof S, NULL}};
    fuzz_cli_run(data, size, "tokenize", g, (int)(sizeof g / sizeof g[0]));
    return 0;
}
