/* test_tokenizer.c - the byte-level BPE of [mf:tokenizer] (docs/math.md §17.2, §17.3, §17.5):
   GPT-2's pre-tokenization on tricky text, a small vocabulary in GPT-2's file format (written here)
   encoding to hand-checked ids, the fast encoder against the definition on random texts and random
   merge lists, round trips on random bytes, the tokenizer file for every kind and every way it can
   be bad, encode's cap, decode's range check. No downloads, no files from outside the test. */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#include "mf_test.h"
#include <stdlib.h>
#include <string.h>

#define DIR "build/test_tokenizer_"   /* file prefix; the tests run from the repository root */

static uint64_t rng_state = 12345;
static uint32_t rnd(uint32_t n) {   /* xorshift64*, fixed seed: the same cases every run */
    rng_state ^= rng_state >> 12; rng_state ^= rng_state << 25; rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1DULL) >> 33) % n;
}
static int contains(const char *s, const char *part) { return s && strstr(s, part) != NULL; }
static void write_file(const char *path, const char *text, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f) { fwrite(text, 1, n, f); fclose(f); }
}
static char *read_text(const char *path, size_t *n) {
    const char *why;
    return (char *)mf__read_file(path, n, &why);
}

/* ---- pre-tokenization ---------------------------------------------------------------------------- */
/* The expected pieces were produced once at development time by Python's `regex` module (2026.11.19)
   with GPT-2's pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ on
   the text decoded with errors="surrogateescape" (an invalid byte becomes one code point of the
   "other" class, as docs/math.md §17.3 says), and checked by hand; the same script confirmed that
   regex's \s is exactly the White_Space list of tools/gen_unicode.py. */
static const struct { const char *text; const char *pieces[40]; } pretok_cases[] = {
    {"Hello world's END'S we'll I'm you're they've he'd it's don't 'Tis O'NEIL'LL",
     {"Hello", " world", "'s", " END", "'", "S", " we", "'ll", " I", "'m", " you", "'re", " they", "'ve", " he", "'d", " it", "'s", " don", "'t", " '", "Tis", " O", "'", "NEIL", "'", "LL", NULL}},
    {"abc123 4567 x1y2 3.14",
     {"abc", "123", " 4567", " x", "1", "y", "2", " 3", ".", "14", NULL}},
    {"a  b   c    ",
     {"a", " ", " b", "  ", " c", "    ", NULL}},
    {"line1\nline2\n\n  indented\tTab\t\tx \n",
     {"line", "1", "\n", "line", "2", "\n\n ", " indented", "\t", "Tab", "\t", "\t", "x", " \n", NULL}},
    {"caf\xc3\xa9 na\xc3\xafve \xce\x95\xce\xbb\xce\xbb\xce\xb7\xce\xbd\xce\xb9\xce\xba\xce\xac \xd0\xa0\xd1\x83\xd1\x81\xd1\x81\xd0\xba\xd0\xb8\xd0\xb9 \xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97\xe7\xac\xa6 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e",
     {"caf\xc3\xa9", " na\xc3\xafve", " \xce\x95\xce\xbb\xce\xbb\xce\xb7\xce\xbd\xce\xb9\xce\xba\xce\xac", " \xd0\xa0\xd1\x83\xd1\x81\xd1\x81\xd0\xba\xd0\xb8\xd0\xb9", " \xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97\xe7\xac\xa6", " \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", NULL}},
    {"\xd9\xa3\xd9\xa4\xd9\xa5 \xc2\xbd \xe2\x85\xab x\xc2\xb2 \xe0\xa7\xa9",
     {"\xd9\xa3\xd9\xa4\xd9\xa5", " \xc2\xbd", " \xe2\x85\xab", " x", "\xc2\xb2", " \xe0\xa7\xa9", NULL}},
    {"emoji \xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd \xe2\x9c\x93\xe2\x86\x92 $5.00!!",
     {"emoji", " \xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd", " \xe2\x9c\x93\xe2\x86\x92", " $", "5", ".", "00", "!!", NULL}},
    {"ab\xff\xfe""cd \xe2\x82 x \xc0\xaf\xed\xa0\x80 \xc3\xa9\xf4\x90\x80\x80",
     {"ab", "\xff\xfe", "cd", " \xe2\x82", " x", " \xc0\xaf\xed\xa0\x80", " \xc3\xa9", "\xf4\x90\x80\x80", NULL}},
    {"a\xc2\xa0""b\xe3\x80\x80 c\xe2\x80\xa8""d \xe3\x80\x80x\xe3\x80\x80\xe3\x80\x80y \xc2\x85z",
     {"a", "\xc2\xa0", "b", "\xe3\x80\x80", " c", "\xe2\x80\xa8", "d", " ", "\xe3\x80\x80", "x", "\xe3\x80\x80", "\xe3\x80\x80", "y", " ", "\xc2\x85", "z", NULL}},
    {"'''s 'S ' 're'",
     {"'''", "s", " '", "S", " '", " '", "re", "'", NULL}},
    {"  ",
     {"  ", NULL}},
    {" ",
     {" ", NULL}},
    {"\n",
     {"\n", NULL}},
    {"x\xe2\x80\x8b y\x1c z",
     {"x", "\xe2\x80\x8b", " y", "\x1c", " z", NULL}},
    {"hello!!! ...world?? --foo  \t bar",
     {"hello", "!!!", " ...", "world", "??", " --", "foo", "  \t", " bar", NULL}},
};

static void test_pretokenizer_gpt2_rule(void) {
    size_t c;
    for (c = 0; c < sizeof pretok_cases / sizeof pretok_cases[0]; c++) {
        const unsigned char *s = (const unsigned char *)pretok_cases[c].text;
        size_t n = strlen(pretok_cases[c].text), pos = 0;
        int k = 0, bad = 0;
        while (pos < n && !bad) {
            size_t end = mf__pretok_next(s, n, pos);
            const char *want = pretok_cases[c].pieces[k++];
            bad = !want || end <= pos || end > n || strlen(want) != end - pos || memcmp(want, s + pos, end - pos) != 0;
            if (bad) printf("    case %d: piece %d is \"%.*s\", expected \"%s\"\n", (int)c, k - 1, (int)(end > pos && end <= n ? end - pos : 0), s + pos, want ? want : "(none)");
            pos = end;
        }
        MFT_CHECK(!bad && pretok_cases[c].pieces[k] == NULL);
    }
}

/* on any bytes the pieces are non-empty and tile the text */
static void test_pretokenizer_tiles_random_bytes(void) {
    static const unsigned char alphabet[] = {' ', ' ', 'a', 'B', '1', '\'', 's', '\n', '\t', 0xc3, 0xa9, 0xe3, 0x80, 0x80, 0xff, 0xf0, 0x9f, '!'};
    unsigned char s[200];
    int trial, bad = 0;
    for (trial = 0; trial < 2000; trial++) {
        size_t n = rnd(200), i, pos;
        for (i = 0; i < n; i++) s[i] = trial % 2 ? (unsigned char)rnd(256) : alphabet[rnd(sizeof alphabet)];
        for (pos = 0; pos < n; ) {
            size_t end = mf__pretok_next(s, n, pos);
            if (end <= pos || end > n) { bad++; break; }
            pos = end;
        }
    }
    MFT_CHECK(bad == 0);
}

/* ---- a BPE vocabulary built in memory from merge pairs (ids of tokens made so far) ---------------- */
static mf_tokenizer *bpe_from_pairs(const int32_t (*pairs)[2], int n) {
    mf_tokenizer *t = mf_tokenizer_bytes();
    int r;
    t->kind = MF_TOK_BPE;
    t->tok_off = (int64_t *)MF_REALLOC(t->tok_off, (size_t)(256 + n + 1) * sizeof *t->tok_off);
    t->merges = (int32_t (*)[3])MF_MALLOC((size_t)(n ? n : 1) * sizeof *t->merges);
    for (r = 0; r < n; r++) {
        int32_t a = pairs[r][0], b = pairs[r][1], id = 256 + r;
        int64_t la = t->tok_off[a + 1] - t->tok_off[a], lb = t->tok_off[b + 1] - t->tok_off[b];
        t->blob = (unsigned char *)MF_REALLOC(t->blob, (size_t)(t->tok_off[id] + la + lb));
        memcpy(t->blob + t->tok_off[id], t->blob + t->tok_off[a], (size_t)la);
        memcpy(t->blob + t->tok_off[id] + la, t->blob + t->tok_off[b], (size_t)lb);
        t->tok_off[id + 1] = t->tok_off[id] + la + lb;
        t->merges[r][0] = a; t->merges[r][1] = b; t->merges[r][2] = id;
    }
    t->n_vocab = 256 + n;
    t->n_merges = n;
    return mf__bpe_prepare(t);
}
/* random merges over the tokens of a small alphabet (a pair may repeat: its first rank counts) */
static mf_tokenizer *random_bpe(const unsigned char *alphabet, int n_alpha, int n_merges) {
    int32_t (*pairs)[2] = (int32_t (*)[2])malloc((size_t)n_merges * sizeof *pairs), *pool = (int32_t *)malloc((size_t)(n_alpha + n_merges) * sizeof *pool);
    int i, n_pool = n_alpha;
    mf_tokenizer *t;
    for (i = 0; i < n_alpha; i++) pool[i] = alphabet[i];
    for (i = 0; i < n_merges; i++) {
        pairs[i][0] = pool[rnd((uint32_t)n_pool)];
        pairs[i][1] = pool[rnd((uint32_t)n_pool)];
        pool[n_pool++] = 256 + i;
    }
    t = bpe_from_pairs((const int32_t (*)[2])pairs, n_merges);
    free(pairs); free(pool);
    return t;
}

/* The definition (docs/math.md §17.2), slowly: per pre-token, merge the adjacent pair of lowest
   rank (the leftmost on a tie) until no adjacent pair is in the merge list. The placeholder the
   fast encoder replaced, kept here as the reference. */
static int64_t naive_encode(const mf_tokenizer *t, const unsigned char *s, size_t n, int32_t *ids) {
    int32_t *w = (int32_t *)malloc((n ? n : 1) * sizeof *w);
    int64_t out = 0;
    size_t pos = 0, end;
    for (; pos < n; pos = end) {
        int len = 0, i, r;
        end = mf__pretok_next(s, n, pos);
        for (i = 0; i < (int)(end - pos); i++) w[len++] = t->byte_id[s[pos + i]];
        for (;;) {
            int best = -1, at = -1;
            for (i = 0; i + 1 < len; i++)
                for (r = 0; r < (best < 0 ? t->n_merges : best); r++)
                    if (t->merges[r][0] == w[i] && t->merges[r][1] == w[i + 1]) { best = r; at = i; break; }
            if (best < 0) break;
            w[at] = t->merges[best][2];
            memmove(w + at + 1, w + at + 2, (size_t)(len - at - 2) * sizeof *w);
            len--;
        }
        for (i = 0; i < len; i++) ids[out++] = w[i];
    }
    free(w);
    return out;
}
/* fast == definition, and decode(encode(x)) == x */
static int same_as_definition(mf_tokenizer *t, const unsigned char *s, size_t n) {
    int32_t *fast = (int32_t *)malloc((n + 1) * sizeof *fast), *slow = (int32_t *)malloc((n + 1) * sizeof *slow);
    unsigned char *back = (unsigned char *)malloc(n + 1);
    int64_t kf = mf_tokenizer_encode(t, s, n, fast, (int64_t)n + 1), ks = naive_encode(t, s, n, slow);
    int ok = kf == ks && memcmp(fast, slow, (size_t)ks * sizeof *fast) == 0 && mf_tokenizer_decode(t, fast, kf, back, (int64_t)n) == (int64_t)n &&
             memcmp(back, s, n) == 0;
    free(fast); free(slow); free(back);
    return ok;
}

static void test_fast_encoder_matches_definition(void) {
    /* letters (long pre-tokens: the scan, the heap, past the cache's length), spaces and
       multi-byte letters; each text is encoded twice so the second time comes from the cache */
    static const unsigned char alphabet[] = {'a', 'b', 'c', ' ', 0xc3, 0xa9, '1', '\n'};
    unsigned char s[700];
    int v, trial, bad = 0;
    for (v = 0; v < 12; v++) {
        mf_tokenizer *t = random_bpe(alphabet, (int)sizeof alphabet, 5 + (int)rnd(300));
        MFT_CHECK(mf_tokenizer_error(t) == NULL);
        for (trial = 0; trial < 40; trial++) {
            size_t n = rnd(trial % 4 == 0 ? 700 : 80), i;
            int spaces = (int)rnd(3);   /* 0: letters only (one long pre-token) */
            for (i = 0; i < n; i++) s[i] = alphabet[rnd(spaces ? sizeof alphabet : 3)];
            bad += !same_as_definition(t, s, n);
            bad += !same_as_definition(t, s, n);
        }
        mf_tokenizer_free(t);
    }
    MFT_CHECK(bad == 0);
}

static void test_round_trip_random_bytes(void) {
    static const unsigned char alphabet[] = {'e', 't', ' ', 0xff, 0x00, 0xe2, 0x80};
    unsigned char s[400];
    int trial, bad = 0;
    mf_tokenizer *t = random_bpe(alphabet, (int)sizeof alphabet, 200);
    for (trial = 0; trial < 300; trial++) {
        size_t n = rnd(400), i;
        for (i = 0; i < n; i++) s[i] = trial % 2 ? (unsigned char)rnd(256) : alphabet[rnd(sizeof alphabet)];
        bad += !same_as_definition(t, s, n);
    }
    MFT_CHECK(bad == 0);
    mf_tokenizer_free(t);
}

/* ---- GPT-2's file format -------------------------------------------------------------------------- */
static int gpt2_plain(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }
/* GPT-2's byte character of byte b (docs/math.md §17.2) as UTF-8 */
static int gpt2_char(int b, char *out) {
    int k = 0, cp = b, x;
    for (x = 0; !gpt2_plain(b) && x < b; x++) k += !gpt2_plain(x);
    if (!gpt2_plain(b)) cp = 256 + k;
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    out[0] = (char)(0xC0 | cp >> 6); out[1] = (char)(0x80 | (cp & 63));
    return 2;
}
/* The 256 byte tokens in GPT-2's order (id = the position in bytes_to_unicode's list: printable
   bytes first, so '!' = 0 and the space, written "\u0120", = 220, as in GPT-2), then 8 merges,
   then <|endoftext|>. The entries are written in a scrambled order, with escapes and raw UTF-8. */
static const char *small_merges[] = {"\xc4\xa0 t", "h e", "\xc4\xa0t he", "i n", "\xc4\xa0 c", "\xc4\xa0""c a", "\xc4\xa0""ca t", "\xc3\x83 \xc2\xa9"};
static const char *small_tokens[] = {"\\u0120t", "he", "\\u0120the", "in", "\\u0120c", "\\u0120ca", "\\u0120cat", "\\u00c3\\u00a9"};
static void write_small_gpt2(const char *enc_path, const char *bpe_path) {
    char json[16384], bpe[1024], ch[3];
    size_t n = 0;
    int b, i, order[256];
    for (b = 0; b < 256; b++) order[b] = b;
    for (b = 255; b > 0; b--) { int j = (int)rnd((uint32_t)b + 1), x = order[b]; order[b] = order[j]; order[j] = x; }
    n += (size_t)sprintf(json + n, "{\"<|endoftext|>\": 264,\n");
    for (i = 7; i >= 0; i--) n += (size_t)sprintf(json + n, "\"%s\": %d, ", small_tokens[i], 256 + i);
    for (i = 0; i < 256; i++) {
        int id = 0, x, k;
        b = order[i];
        for (x = 0; x < 256; x++) id += (gpt2_plain(x) && !gpt2_plain(b)) || (gpt2_plain(x) == gpt2_plain(b) && x < b);
        k = gpt2_char(b, ch);
        n += (size_t)sprintf(json + n, "\"%s%.*s\": %d%s", b == '"' || b == '\\' ? "\\" : "", k, ch, id, i == 255 ? "}\n" : (i % 8 == 7 ? ",\n" : ", "));
    }
    write_file(enc_path, json, n);
    n = (size_t)sprintf(bpe, "#version: 0.2\n");
    for (i = 0; i < 8; i++) n += (size_t)sprintf(bpe + n, "%s\n", small_merges[i]);
    write_file(bpe_path, bpe, n);
}

static void test_gpt2_files_small_vocabulary(void) {
    /* hand-checked (docs/math.md §17.2): "the" -> t + he (no merge makes "the" without the space);
       " cat" -> Ġc, Ġca, Ġcat; " in" -> Ġ + in; " thecat" -> Ġt, he, Ġthe, then c a t stay (Ġc needs
       the space); " é" -> Ġ + é (bytes c3 a9). 't' = 83, 'c' = 66, 'a' = 64, Ġ = 220. */
    static const int32_t want[] = {83, 257, 262, 220, 259, 258, 66, 64, 83, 220, 263};
    const char *text = "the cat in thecat \xc3\xa9";
    int32_t ids[32];
    unsigned char back[64];
    int len;
    const unsigned char *eot;
    mf_tokenizer *t;
    write_small_gpt2(DIR "encoder.json", DIR "vocab.bpe");
    t = mf_tokenizer_gpt2(DIR "encoder.json", DIR "vocab.bpe");
    MFT_CHECK(mf_tokenizer_error(t) == NULL);
    MFT_CHECK(mf_tokenizer_vocab_size(t) == 265 && mf_tokenizer_get_kind(t) == MF_TOK_BPE);
    MFT_CHECK(mf_tokenizer_encode(t, text, strlen(text), ids, 32) == 11);
    MFT_CHECK(memcmp(ids, want, sizeof want) == 0);
    MFT_CHECK(mf_tokenizer_decode(t, ids, 11, back, sizeof back) == (int64_t)strlen(text) && memcmp(back, text, strlen(text)) == 0);
    eot = mf_tokenizer_token(t, 264, &len);   /* a token that no merge makes: its bytes are its text */
    MFT_CHECK(eot && len == 13 && memcmp(eot, "<|endoftext|>", 13) == 0);
    MFT_CHECK(mf_tokenizer_encode(t, "<|endoftext|>", 13, NULL, 0) > 1);   /* plain text, not the special token */
    mf_tokenizer_free(t);
}

/* a bad pair of GPT-2 files: the error names the file (and line) and says what is wrong */
static void expect_gpt2_error(const char *json, const char *bpe, const char *part1, const char *part2) {
    mf_tokenizer *t;
    write_small_gpt2(DIR "e.json", DIR "v.bpe");
    if (json) write_file(DIR "e.json", json, strlen(json));
    if (bpe) write_file(DIR "v.bpe", bpe, strlen(bpe));
    t = mf_tokenizer_gpt2(DIR "e.json", DIR "v.bpe");
    MFT_CHECK(contains(mf_tokenizer_error(t), part1));
    MFT_CHECK(contains(mf_tokenizer_error(t), part2));
    if (!contains(mf_tokenizer_error(t), part1) || !contains(mf_tokenizer_error(t), part2)) printf("    got: %s\n", mf_tokenizer_error(t) ? mf_tokenizer_error(t) : "(no error)");
    MFT_CHECK(mf_tokenizer_encode(t, "a", 1, NULL, 0) == -1 && mf_tokenizer_vocab_size(t) == -1);
    mf_tokenizer_free(t);
}
static void test_gpt2_files_errors(void) {
    mf_tokenizer *t = mf_tokenizer_gpt2(DIR "no_such.json", DIR "vocab.bpe");
    MFT_CHECK(contains(mf_tokenizer_error(t), "no_such.json") && contains(mf_tokenizer_error(t), "cannot open"));
    mf_tokenizer_free(t);
    t = mf_tokenizer_gpt2(NULL, NULL);
    MFT_CHECK(mf_tokenizer_error(t) != NULL);
    mf_tokenizer_free(t);
    expect_gpt2_error("[1, 2]", NULL, "e.json", "not a JSON object");
    expect_gpt2_error("{\"a\": 0,\n\"b\": }", NULL, "line 2", "not an integer");
    expect_gpt2_error("{\"a\": 0,\n\"b\" 1}", NULL, "line 2", "malformed JSON");
    expect_gpt2_error("{\"a\": 0, \"b\": 1", NULL, "e.json", "expected ',' or '}'");
    expect_gpt2_error("{\"a\": 0, \"b\": 0}", NULL, "id 0", "already the id");
    expect_gpt2_error("{\"a\": 0, \"a\": 1}", NULL, "\"a\"", "appears twice");
    expect_gpt2_error("{\"a\": 0, \"b\": 2}", NULL, "no token has id 1", "without gaps");
    expect_gpt2_error("{\"a \": 0}", NULL, "\"a \"", "byte characters");          /* a raw space is not one */
    expect_gpt2_error("{\"\\ud800x\": 0}", NULL, "line 1", "malformed JSON");     /* a lone surrogate */
    expect_gpt2_error("{\"a\": 0, \"b\": 1}", NULL, "e.json", "has 2 tokens");
    expect_gpt2_error(NULL, "#version: 0.2\nh e\nq z\n", "v.bpe\" line 3", "the merged token");
    expect_gpt2_error(NULL, "#version: 0.2\nh e\n\xc4\xa0\xc4\xa0 x\n", "line 3", "the left part");
    expect_gpt2_error(NULL, "#version: 0.2\nhe\n", "line 2", "not a merge");
    expect_gpt2_error(NULL, "#version: 0.2\na b c\n", "line 2", "not a merge");
}

/* JSON strings: \u escapes become UTF-8, surrogate pairs join, a lone surrogate is malformed */
static void test_json_unicode_escapes(void) {
    const char *src = "\"A\\u00e9\\u4e2d\\ud83d\\ude00\\\"\" \"\\udc00\" \"\\u12G4\"";
    char out[32];
    mf__json j;
    j.p = src; j.end = src + strlen(src); j.bad = 0;
    MFT_CHECK(mf__jstr(&j, out, sizeof out) && strcmp(out, "A\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\"") == 0);
    MFT_CHECK(!mf__jstr(&j, out, sizeof out) && j.bad);
    j.p = src + strlen(src) - 8; j.bad = 0;
    MFT_CHECK(!mf__jstr(&j, out, sizeof out) && j.bad);
    j.p = src; j.bad = 0;
    MFT_CHECK(!mf__jstr(&j, out, 8) && j.bad);   /* longer than the buffer */
}

/* ---- encode / decode edges ------------------------------------------------------------------------ */
static void test_encode_cap_and_decode_range(void) {
    static const unsigned char alphabet[] = {'x', 'y', ' '};
    mf_tokenizer *t = random_bpe(alphabet, 3, 20);
    const char *text = "xy yx xxyy y x";
    int32_t all[64], some[64];
    int64_t n = mf_tokenizer_encode(t, text, strlen(text), NULL, 0), i;
    MFT_CHECK(n > 3);
    MFT_CHECK(mf_tokenizer_encode(t, text, strlen(text), all, 64) == n);
    for (i = 0; i < 64; i++) some[i] = -7;
    MFT_CHECK(mf_tokenizer_encode(t, text, strlen(text), some, 3) == n);   /* the whole count, 3 written */
    MFT_CHECK(memcmp(some, all, 3 * sizeof *some) == 0 && some[3] == -7);
    MFT_CHECK(mf_tokenizer_encode(t, "", 0, some, 64) == 0);
    MFT_CHECK(mf_tokenizer_decode(t, all, n, NULL, 0) == (int64_t)strlen(text));
    MFT_CHECK(mf_tokenizer_encode(t, text, 3, NULL, 5) == -1 && contains(mf_tokenizer_error(t), "ids"));
    mf_tokenizer_free(t);
    t = random_bpe(alphabet, 3, 20);
    all[1] = 276;   /* 256 + 20 ids: 276 is outside */
    MFT_CHECK(mf_tokenizer_decode(t, all, 2, some, 64) == -1);
    MFT_CHECK(contains(mf_tokenizer_error(t), "id 276 at position 1") && contains(mf_tokenizer_error(t), "276 tokens"));
    mf_tokenizer_free(t);
}

/* a vocabulary whose merge result is not left + right is refused when it is prepared */
static void test_prepare_refuses_inconsistent_vocabulary(void) {
    static const int32_t pairs[2][2] = {{'a', 'b'}, {256, 'c'}};
    mf_tokenizer *t = bpe_from_pairs(pairs, 2);
    MFT_CHECK(mf_tokenizer_error(t) == NULL);
    t->merges[1][2] = 256;   /* "ab" + "c" -> "ab"? */
    mf__bpe_prepare(t);
    MFT_CHECK(contains(mf_tokenizer_error(t), "merge 1") && contains(mf_tokenizer_error(t), "not the left token's followed by the right"));
    mf_tokenizer_free(t);
}

/* ---- the tokenizer file --------------------------------------------------------------------------- */
static int same_vocabulary(const mf_tokenizer *a, const mf_tokenizer *b) {
    int i, la, lb;
    if (a->kind != b->kind || a->n_vocab != b->n_vocab || a->n_merges != b->n_merges || memcmp(a->byte_id, b->byte_id, sizeof a->byte_id) != 0) return 0;
    if (a->n_merges && memcmp(a->merges, b->merges, (size_t)a->n_merges * sizeof *a->merges) != 0) return 0;
    for (i = 0; i < a->n_vocab; i++) {
        const unsigned char *ta = mf_tokenizer_token(a, i, &la), *tb = mf_tokenizer_token(b, i, &lb);
        if (!ta || !tb || la != lb || memcmp(ta, tb, (size_t)la) != 0) return 0;
    }
    return 1;
}
static void check_save_load(mf_tokenizer *t, const char *text) {
    mf_tokenizer *u;
    int32_t a[256], b[256];
    int64_t na, nb;
    MFT_CHECK(mf_tokenizer_save(t, DIR "tok.txt", NULL, 0) == 0);
    u = mf_tokenizer_load(DIR "tok.txt");
    MFT_CHECK(mf_tokenizer_error(u) == NULL);
    if (mf_tokenizer_error(u)) printf("    %s\n", mf_tokenizer_error(u));
    MFT_CHECK(same_vocabulary(t, u));
    na = mf_tokenizer_encode(t, text, strlen(text), a, 256);
    nb = mf_tokenizer_encode(u, text, strlen(text), b, 256);
    MFT_CHECK(na >= 0 && na == nb && memcmp(a, b, (size_t)(na > 0 ? na : 0) * sizeof *a) == 0);
    mf_tokenizer_free(u);
}
static void test_save_load_every_kind(void) {
    static const unsigned char alphabet[] = {'a', 'b', ' ', 0xc3, 0xa9};
    const char *text = "abba ab \xc3\xa9\xc3\xa9 baab";
    char why[600];
    mf_tokenizer *t = mf_tokenizer_bytes();
    check_save_load(t, "any \xff bytes");
    mf_tokenizer_free(t);
    t = mf_tokenizer_chars(text, strlen(text));
    check_save_load(t, text);
    mf_tokenizer_free(t);
    t = random_bpe(alphabet, 5, 60);
    check_save_load(t, text);
    mf_tokenizer_free(t);
    write_small_gpt2(DIR "encoder.json", DIR "vocab.bpe");   /* GPT-2's format, with <|endoftext|> */
    t = mf_tokenizer_gpt2(DIR "encoder.json", DIR "vocab.bpe");
    check_save_load(t, "the cat in thecat <|endoftext|>");
    mf_tokenizer_free(t);
    t = mf_tokenizer_train_bpe(text, strlen(text), 270, NULL);   /* a trained vocabulary */
    check_save_load(t, text);
    mf_tokenizer_free(t);
    MFT_CHECK(mf_tokenizer_save(NULL, DIR "x.txt", why, sizeof why) == -1 && strstr(why, "NULL"));
    MFT_CHECK(mf_tokenizer_save(t = mf_tokenizer_bytes(), NULL, why, sizeof why) == -1 && strstr(why, "path"));
    MFT_CHECK(mf_tokenizer_save(t, "build/no_such_dir/tok.txt", why, sizeof why) == -1 &&
              strstr(why, "no_such_dir") && strstr(why, "No such file"));
    MFT_CHECK(mf_tokenizer_save(t, "build/no_such_dir/tok.txt", NULL, 0) == -1);   /* err may be NULL */
    mf_tokenizer_free(t);
}

/* a corrupt file: refused, the message naming the file and the given parts */
static void expect_load_error(const char *content, size_t n, const char *part1, const char *part2) {
    mf_tokenizer *t;
    write_file(DIR "bad.txt", content, n);
    t = mf_tokenizer_load(DIR "bad.txt");
    MFT_CHECK(contains(mf_tokenizer_error(t), "bad.txt") && contains(mf_tokenizer_error(t), part1) && contains(mf_tokenizer_error(t), part2));
    if (!contains(mf_tokenizer_error(t), part1) || !contains(mf_tokenizer_error(t), part2)) printf("    got: %s\n", mf_tokenizer_error(t) ? mf_tokenizer_error(t) : "(no error)");
    mf_tokenizer_free(t);
}
static void expect_load_text(const char *text, const char *part1, const char *part2) { expect_load_error(text, strlen(text), part1, part2); }
/* text with its line `line` (from 1) replaced by repl */
static char *with_line(const char *text, int line, const char *repl) {
    char *out = (char *)malloc(strlen(text) + strlen(repl) + 2);
    const char *p = text;
    size_t n;
    int k;
    for (k = 1; k < line; k++) p = strchr(p, '\n') + 1;
    n = (size_t)(p - text);
    memcpy(out, text, n);
    strcpy(out + n, repl);
    strcat(out, strchr(p, '\n'));
    return out;
}
static void expect_line_error(const char *good, int line, const char *repl, const char *part1, const char *part2) {
    char *bad = with_line(good, line, repl);
    expect_load_error(bad, strlen(bad), part1, part2);
    free(bad);
}
static void test_load_refuses_bad_files(void) {
    static const int32_t pairs[3][2] = {{'a', 'b'}, {256, 'c'}, {'x', 'x'}};
    mf_tokenizer *t = bpe_from_pairs(pairs, 3), *u;
    char *good;
    size_t n = 0, cut;
    int refused = 0;
    MFT_CHECK(mf_tokenizer_save(t, DIR "good.txt", NULL, 0) == 0);
    good = read_text(DIR "good.txt", &n);
    /* lines: 1 header, 2 kind, 3 vocab_size, 4 bytes, 5..260 the bytes, 261 extras, 262 merges,
       263..265 the merges, 266 end */
    MFT_CHECK(good && strstr(good, "metaformer-tokenizer 1\nkind bpe\nvocab_size 259\nbytes 256\n00 0\n") == good);
    MFT_CHECK(good && contains(good, "\nff 255\nextras 0\nmerges 3\n97 98 256\n256 99 257\n120 120 258\nend\n"));
    for (cut = 0; good && cut + 1 < n; cut++) {   /* every truncation but the one of the last newline */
        write_file(DIR "bad.txt", good, cut);
        u = mf_tokenizer_load(DIR "bad.txt");
        refused += mf_tokenizer_error(u) != NULL && contains(mf_tokenizer_error(u), "bad.txt");
        mf_tokenizer_free(u);
    }
    MFT_CHECK(good && refused == (int)n - 1);
    expect_load_error("", 0, "not a tokenizer file", "metaformer-tokenizer 1");
    expect_load_error("{\"__metadata__\": {}}", 20, "not a tokenizer file", "mf_tokenizer_save");
    expect_load_error("metaformer-tokenizer 2\nkind bpe\n", 32, "version 2", "reads version 1");
    if (good) {
        expect_line_error(good, 2, "kind words", "line 2", "kind bpe");
        expect_line_error(good, 3, "vocab_size 9999999", "line 3", "vocab_size N");
        expect_line_error(good, 3, "vocab_size 260", "id 259 is not defined", "corrupt");
        expect_line_error(good, 5, "00 259", "line 5", "below vocab_size");
        expect_line_error(good, 6, "01 0", "line 6", "defined twice");
        expect_line_error(good, 6, "00 1", "line 6", "increasing order");
        expect_line_error(good, 6, "0G 1", "line 6", "hex");
        expect_line_error(good, 263, "97 98 259", "line 263", "below vocab_size");
        expect_line_error(good, 263, "97 98 97", "line 263", "not the left token's bytes");
        expect_line_error(good, 263, "256 98 97", "line 263", "no byte, extra or earlier merge");
        expect_line_error(good, 263, "97 98", "line 263", "three ids");
        expect_line_error(good, 263, "97 98 -1", "line 263", "below vocab_size");
        expect_line_error(good, 262, "merges 9", "line 262", "more merges than");
        expect_line_error(good, 261, "extras 1", "line 262", "id hex");
        expect_line_error(good, 266, "end\nmore", "line 267", "after \"end\"");
    }
    expect_load_text("metaformer-tokenizer 1\nkind chars\nvocab_size 2\nbytes 2\n61 1\n62 0\nextras 0\nmerges 0\nend\n", "byte 0x61 has 1", "chars");
    expect_load_text("metaformer-tokenizer 1\nkind bytes\nvocab_size 1\nbytes 1\n61 0\nextras 0\nmerges 0\nend\n", "all 256", "bytes");
    u = mf_tokenizer_load(DIR "no_such_file.txt");
    MFT_CHECK(contains(mf_tokenizer_error(u), "no_such_file.txt") && contains(mf_tokenizer_error(u), "cannot open"));
    mf_tokenizer_free(u);
    u = mf_tokenizer_load("build");
    MFT_CHECK(contains(mf_tokenizer_error(u), "build") && mf_tokenizer_vocab_size(u) == -1);
    mf_tokenizer_free(u);
    u = mf_tokenizer_load(NULL);
    MFT_CHECK(mf_tokenizer_error(u) != NULL);
    mf_tokenizer_free(u);
    free(good);
    mf_tokenizer_free(t);
}

int main(void) {
    MFT_RUN(test_pretokenizer_gpt2_rule);
    MFT_RUN(test_pretokenizer_tiles_random_bytes);
    MFT_RUN(test_fast_encoder_matches_definition);
    MFT_RUN(test_round_trip_random_bytes);
    MFT_RUN(test_gpt2_files_small_vocabulary);
    MFT_RUN(test_gpt2_files_errors);
    MFT_RUN(test_json_unicode_escapes);
    MFT_RUN(test_encode_cap_and_decode_range);
    MFT_RUN(test_prepare_refuses_inconsistent_vocabulary);
    MFT_RUN(test_save_load_every_kind);
    MFT_RUN(test_load_refuses_bad_files);
    return mft_finish();
}
