/* Encode and decode of any bytes with a small byte-level BPE (trained once on a fixed text, 300
   ids): decode(encode(x)) == x, every id inside the vocabulary, and encode's count does not depend
   on the room given. Also decodes the input read as uint16 ids when all are inside the vocabulary
   (a refused id would leave the shared tokenizer failed; tests/test_tokenizer.c checks refusals). */
#define METAFORMER_IMPLEMENTATION
#include "../../metaformer.h"
#include "fuzz.h"

static mf_tokenizer *small_bpe(void) {
    static mf_tokenizer *tok;
    if (!tok) {
        static const char text[] =
            "the quick brown fox jumps over the lazy dog. The dog's 123 bones, 4.5 kg; caf\xc3\xa9 na\xc3\xafve "
            "\xe2\x80\x94 it is what it is, isn't it?\n\tthe the the quick quick brown foxes\r\n";
        char big[sizeof text * 20];
        size_t i;
        for (i = 0; i < 20; i++) memcpy(big + i * (sizeof text - 1), text, sizeof text - 1);
        tok = mf_tokenizer_train_bpe(big, 20 * (sizeof text - 1), 300, NULL);
        FUZZ_CHECK(tok && !mf_tokenizer_error(tok));
    }
    return tok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mf_tokenizer *tok = small_bpe();
    int V = mf_tokenizer_vocab_size(tok);
    int64_t n = mf_tokenizer_encode(tok, data, size, NULL, 0), i, k, bad = 0;
    int32_t *ids, *raw;
    unsigned char *back;
    FUZZ_CHECK(n >= 0 && n <= (int64_t)size);
    ids = (int32_t *)malloc((size_t)(n + 1) * sizeof *ids);
    back = (unsigned char *)malloc(size + 1);
    FUZZ_CHECK(ids && back);
    FUZZ_CHECK(mf_tokenizer_encode(tok, data, size, ids, n) == n);
    for (i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < V);
    FUZZ_CHECK(mf_tokenizer_decode(tok, ids, n, back, (int64_t)size) == (int64_t)size);
    FUZZ_CHECK(size == 0 || memcmp(back, data, size) == 0);
    /* the input as little-endian uint16 ids */
    k = (int64_t)size / 2;
    raw = (int32_t *)malloc((size_t)(k + 1) * sizeof *raw);
    FUZZ_CHECK(raw != NULL);
    for (i = 0; i < k; i++) { raw[i] = data[2 * i] | data[2 * i + 1] << 8; bad |= raw[i] >= V; }
    if (!bad) FUZZ_CHECK(mf_tokenizer_decode(tok, raw, k, back, (int64_t)size) >= k); /* a token is >= 1 byte */
    FUZZ_CHECK(!mf_tokenizer_error(tok));
    free(ids); free(back); free(raw);
    return 0;
}
