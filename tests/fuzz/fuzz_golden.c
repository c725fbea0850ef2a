/* The safetensors reader of the parity tests (tests/golden.h) on any bytes. Property: no memory
   error; an opened file's entries lie inside its data. */
#define METAFORMER_IMPLEMENTATION
#include "../../metaformer.h"
#include "golden.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    golden g;
    int i;
    if (!golden_open(&g, fuzz_file(0, data, size)))
        for (i = 0; i < g.n; i++) {
            float v[4];
            FUZZ_CHECK(g.e[i].begin <= g.e[i].end && g.e[i].end <= g.data_size);
            if (g.e[i].ne >= 1 && g.e[i].ne <= 4) golden_floats(&g, &g.e[i], v);
        }
    golden_close(&g);
    return 0;
}
