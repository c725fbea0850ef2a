/* The command line of build/train (examples/train.c): see fuzz_cli.h. */
#define EX_FUZZ 1
#define main ex_program_main
#include "../../examples/train.c"
#undef main
#include "fuzz_cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static fuzz_global g[] = {{&S, sizeof S, NULL}, {&list_mixers, sizeof list_mixers, NULL}};
    fuzz_cli_run(data, size, "train", g, (int)(sizeof g / sizeof g[0]));
    return 0;
}
