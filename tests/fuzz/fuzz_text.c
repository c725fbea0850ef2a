/* The text loader of the examples (examples/common.h text_parse, the checks of text_load) on any
   bytes. Property: no memory error; a refused text says why; an accepted one has ids inside its
   vocabulary and a split that adds up. */
#define METAFORMER_IMPLEMENTATION
#include "../../metaformer.h"
#define EX_PROG "fuzz"
#include "../../examples/common.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    text_data t;
    char why[512];
    const char *err;
    memset(&t, 0, sizeof t);
    t.bytes = (unsigned char *)data; /* text_parse only reads them */
    t.len = size;
    err = text_parse(&t, "input", why, sizeof why);
    if (err) FUZZ_CHECK(err[0] != 0);
    else {
        size_t i;
        FUZZ_CHECK(t.V >= 1 && t.V <= 256 && t.n_train + t.n_valid == (int64_t)size);
        for (i = 0; i < size; i++) FUZZ_CHECK(t.ids[i] >= 0 && t.ids[i] < t.V && t.itos[t.ids[i]] == data[i]);
    }
    free(t.ids);
    return 0;
}
