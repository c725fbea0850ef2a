/* GPT-2's vocabulary files (mf_tokenizer_gpt2): the input cut at "@@MERGES@@" into encoder.json and
   vocab.bpe. Property: no memory error; a refused pair says why; a loaded tokenizer round-trips a
   short text. */
#define METAFORMER_IMPLEMENTATION
#include "../../metaformer.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *part[2];
    size_t len[2];
    mf_tokenizer *tok;
    if (fuzz_split(data, size, "@@MERGES@@", part, len, 2) != 2) return 0;
    tok = mf_tokenizer_gpt2(fuzz_file(0, part[0], len[0]), fuzz_file(1, part[1], len[1]));
    FUZZ_CHECK(tok != NULL);
    if (mf_tokenizer_error(tok)) FUZZ_CHECK(mf_tokenizer_error(tok)[0]);
    else fuzz_round_trip(tok);
    mf_tokenizer_free(tok);
    return 0;
}
