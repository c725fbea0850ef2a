/* The command line of build/ablate (examples/ablate.c): see fuzz_cli.h. */
#define EX_FUZZ 1
#define main ex_program_main
#include "../../examples/ablate.c"
#undef main
#include "fuzz_cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static fuzz_global g[] = {{&S, sizeof S, NULL}, {&N_ALL, sizeof N_ALL, NULL}}; /* list_models appends to N_ALL */
    fuzz_cli_run(data, size, "ablate", g, (int)(sizeof g / sizeof g[0]));
    return 0;
}
