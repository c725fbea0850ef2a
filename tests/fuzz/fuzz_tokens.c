/* Token shards: mf_tokens_open + mf_tokens_read on 1 to 3 files (the input cut at "@@SHARD@@"),
   in each format (the first byte picks auto, llm.c or raw uint16, and a vocabulary check).
   Property: no memory error; a failed open or read says why; every id read is inside 0..65535 (and
   inside the vocabulary when one is set). */
#define METAFORMER_IMPLEMENTATION
#include "../../metaformer.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *part[3];
    size_t len[3];
    const char *paths[3];
    int n, i, vocab;
    mf_shard_format format;
    mf_tokens *s;
    if (size < 1) return 0;
    format = (mf_shard_format)(data[0] % 3);
    vocab = data[0] & 4 ? 300 : 0;
    n = fuzz_split(data + 1, size - 1, "@@SHARD@@", part, len, 3);
    for (i = 0; i < n; i++) paths[i] = fuzz_file(i, part[i], len[i]);
    s = mf_tokens_open(paths, n, format);
    FUZZ_CHECK(s != NULL);
    if (mf_tokens_error(s)) FUZZ_CHECK(mf_tokens_error(s)[0] && mf_tokens_count(s) == -1);
    else {
        int64_t count = mf_tokens_count(s), start, k;
        int32_t ids[64];
        FUZZ_CHECK(count >= 0 && mf_tokens_files(s) == n);
        if (vocab) mf_tokens_set_vocab(s, vocab);
        for (start = 0; start < count && start < 4096; start += 61) {
            int64_t m = count - start < 64 ? count - start : 64;
            if (mf_tokens_read(s, start, m, ids) < 0) { FUZZ_CHECK(vocab && mf_tokens_error(s)); break; }
            for (k = 0; k < m; k++) FUZZ_CHECK(ids[k] >= 0 && ids[k] < (vocab ? vocab : 65536));
        }
        FUZZ_CHECK(mf_tokens_read(s, count, 1, ids) < 0 || mf_tokens_error(s)); /* past the end */
    }
    mf_tokens_close(s);
    return 0;
}
