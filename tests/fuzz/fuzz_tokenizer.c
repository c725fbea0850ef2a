/* The tokenizer file (mf_tokenizer_load) on any bytes. Property: no memory error; a refused file
   says why; a loaded tokenizer decodes each of its ids and round-trips a short text. */
#define METAFORMER_IMPLEMENTATION
#include "../../metaformer.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mf_tokenizer *tok = mf_tokenizer_load(fuzz_file(0, data, size));
    FUZZ_CHECK(tok != NULL);
    if (mf_tokenizer_error(tok)) FUZZ_CHECK(mf_tokenizer_error(tok)[0] && mf_tokenizer_vocab_size(tok) == -1);
    else {
        int V = mf_tokenizer_vocab_size(tok), id, len;
        FUZZ_CHECK(V >= 1);
        for (id = 0; id < V && id < 4096; id++) FUZZ_CHECK(mf_tokenizer_token(tok, id, &len) != NULL && len >= 0);
        FUZZ_CHECK(mf_tokenizer_token(tok, V, &len) == NULL);
        if (mf_tokenizer_get_kind(tok) != MF_TOK_CHARS) fuzz_round_trip(tok);   /* a character vocabulary lacks bytes */
    }
    mf_tokenizer_free(tok);
    return 0;
}
