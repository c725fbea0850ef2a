/* tokenize.c - turn text files into token shards for build/train (docs/math.md §17).

   build:  make build/tokenize
   run:    ./build/tokenize --gpt2 DIR FILE... --out PREFIX        GPT-2's vocabulary (DIR holds
                                                                   encoder.json and vocab.bpe)
           ./build/tokenize --train-bpe 4096 FILE... --out PREFIX  a BPE vocabulary trained on the text
           ./build/tokenize --bytes FILE... --out PREFIX           the 256 byte values (lossless)
           ./build/tokenize --chars FILE... --out PREFIX           the text's characters (build/train's)
           ./build/tokenize --tokenizer T.tok FILE... --out PREFIX a tokenizer file written before

   The files are concatenated in the order given and the text is encoded whole; the last
   --val-fraction of the ids (round(F * count)) is the validation part. Written: PREFIX_train.bin
   and PREFIX_val.bin (llm.c's shard format, or nanoGPT's raw uint16 with --format raw16) and
   PREFIX.tok, the tokenizer (mf_tokenizer_save), which build/train and build/sample read.

   Progress: the text is encoded in pieces of about --piece-bytes, each cut where no BPE token and
   no pre-token of GPT-2's rule can cross (docs/math.md §17.3), so the ids are those of the whole
   text (tests/test_tokenize.sh compares the two). */
#define _POSIX_C_SOURCE 200809L /* isatty, stat */
#define METAFORMER_IMPLEMENTATION
#include "../metaformer.h"
#define EX_PROG "tokenize"
#include "common.h"
#include <sys/stat.h>

/* ---- settings ---- */
static struct {
    const char *gpt2, *tokenizer, *out, *format;
    int bytes, chars, train_bpe, min_frequency, piece_bytes;
    float val_fraction;
} S = {.format = "llmc", .train_bpe = -1, .min_frequency = 2, .piece_bytes = 1 << 20, .val_fraction = 0.1f};

static const option OPTIONS[] = {
    {"gpt2", OPT_TEXT, &S.gpt2, RUN_ONLY, 0, NULL, "GPT-2's vocabulary: the folder DIR that holds encoder.json and vocab.bpe"},
    {"train-bpe", OPT_INT, &S.train_bpe, RUN_ONLY, 257, NULL, "train a byte-level BPE vocabulary of N ids on the text"},
    {"bytes", OPT_FLAG, &S.bytes, RUN_ONLY, 0, NULL, "the 256 byte values (lossless on any input; loss in bits per byte)"},
    {"chars", OPT_FLAG, &S.chars, RUN_ONLY, 0, NULL, "the byte values that occur in the text (build/train's vocabulary)"},
    {"tokenizer", OPT_TEXT, &S.tokenizer, RUN_ONLY, 0, NULL, "a tokenizer file (.tok) written before, e.g. by an earlier run"},
    {"out", OPT_TEXT, &S.out, RUN_ONLY, 0, NULL, "PREFIX of the outputs: PREFIX_train.bin, PREFIX_val.bin, PREFIX.tok"},
    {"val-fraction", OPT_FLOAT, &S.val_fraction, RUN_ONLY, 0, NULL, "the last fraction F of the tokens validates; 0 < F < 1"},
    {"format", OPT_TEXT, &S.format, RUN_ONLY, 0, "llmc|raw16", "shards: llm.c's (a 1024-byte header, uint16) or nanoGPT's raw uint16"},
    {"min-frequency", OPT_INT, &S.min_frequency, RUN_ONLY, 1, NULL, "--train-bpe: stop when the best pair occurs fewer times"},
    {"piece-bytes", OPT_INT, &S.piece_bytes, RUN_ONLY, 0, NULL, "bytes encoded per call (the progress line; 0 = the whole text at once)"},
};
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))
#define MODES "--gpt2 DIR, --train-bpe N, --bytes, --chars or --tokenizer FILE"
#define UINT16_IDS 65536 /* both shard formats store ids as uint16 */

static void usage(FILE *f) {
    fprintf(f, "usage: tokenize MODE FILE... --out PREFIX [options]   text files -> token shards + tokenizer\n"
               "  MODE is one of " MODES "\n\n");
    print_options(f, OPTIONS, N_OPTIONS);
    fprintf(f, "\nThe files are concatenated in the order given and encoded whole; the last --val-fraction of the\n"
               "ids validates. Then: build/train --data PREFIX_train.bin --valid PREFIX_val.bin --tokenizer PREFIX.tok\n");
}

/* ---- checks before any work ---- */
static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}
static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* the folder the outputs go to must exist: the part of PREFIX before its last '/' */
static void check_out_dir(const char *prefix) {
    char dir[4096];
    const char *slash = strrchr(prefix, '/');
    if (!slash) return; /* the current folder */
    if ((size_t)(slash - prefix) >= sizeof dir) die("--out \"%s\" is too long", prefix);
    snprintf(dir, sizeof dir, "%.*s", slash == prefix ? 1 : (int)(slash - prefix), prefix);
    if (!is_dir(dir)) die("the output folder \"%s\" of --out %s does not exist (create it: mkdir -p %s)", dir, prefix, dir);
}

/* exactly one vocabulary, files, --out, a fraction in (0, 1), a vocabulary that fits uint16 */
static void check_settings(int n_files) {
    const char *given[5];
    int n = 0;
    if (S.gpt2) given[n++] = "--gpt2";
    if (S.train_bpe >= 0) given[n++] = "--train-bpe";
    if (S.bytes) given[n++] = "--bytes";
    if (S.chars) given[n++] = "--chars";
    if (S.tokenizer) given[n++] = "--tokenizer";
    if (n == 0) { usage(stderr); die("no vocabulary given: choose one of " MODES); }
    if (n > 1) die("%s and %s both choose the vocabulary; give one of " MODES, given[0], given[1]);
    if (n_files == 0) die("no input file given: tokenize MODE FILE... --out PREFIX");
    if (!S.out) die("no --out PREFIX given: the outputs are PREFIX_train.bin, PREFIX_val.bin and PREFIX.tok");
    if (!(S.val_fraction > 0 && S.val_fraction < 1))
        die("--val-fraction must be between 0 and 1 (exclusive), got %g: the last fraction F of the tokens validates "
            "(e.g. 0.1)", (double)S.val_fraction);
    if (S.train_bpe > UINT16_IDS)
        die("--train-bpe %d: the shards store ids as uint16 (--format %s), so the vocabulary can have at most 65,536 ids "
            "(0..65535); train a smaller one", S.train_bpe, S.format);
    check_out_dir(S.out);
}

/* DIR must hold GPT-2's two files: name the missing one */
static void gpt2_paths(const char *dir, char *encoder, char *merges, size_t size) {
    if (!is_dir(dir)) die("--gpt2 \"%s\": no such folder (it must hold GPT-2's encoder.json and vocab.bpe)", dir);
    snprintf(encoder, size, "%s/encoder.json", dir);
    snprintf(merges, size, "%s/vocab.bpe", dir);
    if (!is_file(encoder)) die("--gpt2 \"%s\": \"%s\" is missing (the folder must hold GPT-2's encoder.json and vocab.bpe)", dir, encoder);
    if (!is_file(merges)) die("--gpt2 \"%s\": \"%s\" is missing (the folder must hold GPT-2's encoder.json and vocab.bpe)", dir, merges);
}

/* ---- the text ---- */
/* the files one after another in one buffer; an empty file is refused (a failed download?) */
static unsigned char *read_inputs(const char **files, int n_files, size_t *len) {
    unsigned char *text = NULL;
    size_t n = 0;
    for (int i = 0; i < n_files; i++) {
        size_t k;
        unsigned char *part = read_file(files[i], &k), *grown;
        if (k == 0) { free(part); free(text); die("\"%s\" is empty; give files with text", files[i]); }
        if (n + k < n || !(grown = (unsigned char *)realloc(text, n + k))) die("out of memory reading \"%s\"", files[i]);
        text = grown;
        memcpy(text + n, part, k);
        n += k;
        free(part);
    }
    *len = n;
    return text;
}

/* ---- the vocabulary ---- */
typedef struct train_progress { progress *pr; double t0; int tenth; } train_progress;

static void on_merges(void *user, int done, int total) {
    train_progress *tp = (train_progress *)user;
    char eta[32];
    double t = mf_time() - tp->t0;
    int tenth = total > 0 ? (int)((int64_t)done * 10 / total) : 10;
    /* in a log: a line at each tenth of the merges once training takes over a second */
    int log_due = tenth > tp->tenth && done < total && t > 1.0;
    if (tenth > tp->tenth) tp->tenth = tenth;
    if (!progress_due(tp->pr, done == total && done > 0, log_due)) return;
    format_eta(done > 0 ? t * (total - done) / done : 0, eta, sizeof eta);
    progress_show(tp->pr, "training BPE: %d/%d merges, %.1f s, ETA %s", done, total, t, eta);
}

static mf_tokenizer *make_tokenizer(const unsigned char *text, size_t n, progress *pr, const char **what) {
    mf_tokenizer *tok;
    if (S.gpt2) {
        char encoder[4200], merges[4200];
        gpt2_paths(S.gpt2, encoder, merges, sizeof encoder);
        tok = mf_tokenizer_gpt2(encoder, merges);
        *what = "GPT-2 BPE";
    } else if (S.train_bpe >= 0) {
        train_progress tp;
        mf_bpe_options opt;
        memset(&opt, 0, sizeof opt);
        tp.pr = pr; tp.t0 = mf_time(); tp.tenth = 0;
        opt.min_frequency = S.min_frequency; opt.progress = on_merges; opt.user = &tp;
        tok = mf_tokenizer_train_bpe(text, n, S.train_bpe, &opt);
        progress_break(pr);
        if (!mf_tokenizer_error(tok))
            printf("trained BPE: %d ids (256 bytes + %d merges) in %.3f s\n", mf_tokenizer_vocab_size(tok),
                   mf_tokenizer_vocab_size(tok) - 256, mf_time() - tp.t0);
        *what = "trained BPE";
    } else if (S.tokenizer) {
        if (!is_file(S.tokenizer)) die("--tokenizer \"%s\": no such file", S.tokenizer);
        tok = mf_tokenizer_load(S.tokenizer);
        *what = "from the tokenizer file";
    } else {
        tok = S.bytes ? mf_tokenizer_bytes() : mf_tokenizer_chars(text, n);
        *what = S.bytes ? "bytes" : "characters";
    }
    if (!tok) die("out of memory");
    if (mf_tokenizer_error(tok)) die("%s", mf_tokenizer_error(tok));
    if (mf_tokenizer_vocab_size(tok) > UINT16_IDS)
        die("the vocabulary has %d ids, but the shards store ids as uint16 (--format %s: ids 0..65535, at most 65,536 "
            "of them); use a smaller vocabulary", mf_tokenizer_vocab_size(tok), S.format);
    return tok;
}

/* ---- encoding in pieces ---- */
static int ascii_printable(unsigned char c) { return c > ' ' && c < 127; }
static int ascii_letter(unsigned char c) { return (c | 32) >= 'a' && (c | 32) <= 'z'; }

/* Whether a BPE text may be cut before s[p] (0 < p < n) with the same ids as uncut: no pre-token
   of GPT-2's rule (docs/math.md §17.3) crosses p, and each side's pre-tokens are the same alone.
     "x\nY"  (x, Y printable ASCII, not space): the whitespace run is the "\n" alone; a run of more
             whitespace is not a cut point, since at the end of a text the rule keeps it whole and
             before "Y" it leaves the last whitespace character on its own
     "a bc"  (ASCII letters): a run of letters ends at the space, and " bc" starts a pre-token
   Byte and character vocabularies may be cut anywhere. */
static int bpe_cut_ok(const unsigned char *s, size_t n, size_t p) {
    if (p < 2 || p + 1 >= n) return 0;
    if (s[p - 1] == '\n') return ascii_printable(s[p - 2]) && ascii_printable(s[p]);
    return s[p] == ' ' && ascii_letter(s[p - 1]) && ascii_letter(s[p + 1]);
}

/* the end of the piece that starts at pos: the first cut point at or after pos + piece, or n */
static size_t piece_end(const unsigned char *s, size_t n, size_t pos, size_t piece, int bpe) {
    size_t p;
    if (piece == 0 || n - pos <= piece) return n;
    p = pos + piece;
    if (bpe) while (p < n && !bpe_cut_ok(s, n, p)) p++;
    return p;
}

static int64_t encode_text(mf_tokenizer *tok, const unsigned char *s, size_t n, int32_t *ids, progress *pr) {
    int bpe = mf_tokenizer_get_kind(tok) == MF_TOK_BPE, shown = 0;
    int64_t count = 0;
    size_t pos = 0, end;
    double t0 = mf_time();
    for (; pos < n; pos = end) {
        int64_t k;
        end = piece_end(s, n, pos, (size_t)S.piece_bytes, bpe);
        k = mf_tokenizer_encode(tok, s + pos, end - pos, ids + count, (int64_t)(n - (size_t)count));
        if (k < 0) die("%s", mf_tokenizer_error(tok));
        if (k > (int64_t)(n - (size_t)count)) die("the encoder gave more ids than bytes (%lld ids for bytes %zu..%zu)",
                                                  (long long)k, pos, end);
        count += k;
        /* in a log: a line every 10% of a large input */
        if (progress_due(pr, end == n && shown, n > (64u << 20) && end * 10 / n > pos * 10 / n)) {
            double t = mf_time() - t0;
            char eta[32];
            format_eta(t * (double)(n - end) / (double)end, eta, sizeof eta);
            progress_show(pr, "encoding: %.1f/%.1f MB (%.0f%%), %lld tokens, %.2f MB/s, ETA %s", end / 1e6, n / 1e6,
                          100.0 * end / n, (long long)count, end / 1e6 / (t > 0 ? t : 1e-9), eta);
            shown = 1;
        }
    }
    progress_break(pr);
    return count;
}

/* decoding the ids must give the text back: every vocabulary here is lossless on its text */
static void check_round_trip(mf_tokenizer *tok, const int32_t *ids, int64_t count, const unsigned char *text, size_t n) {
    unsigned char *back = (unsigned char *)malloc(n);
    int64_t len;
    if (!back) die("out of memory");
    len = mf_tokenizer_decode(tok, ids, count, back, (int64_t)n);
    if (len < 0) die("%s", mf_tokenizer_error(tok));
    if (len != (int64_t)n || memcmp(back, text, n) != 0)
        die("decoding the %lld ids does not give the text back (%lld bytes instead of %zu): a bug in the tokenizer",
            (long long)count, (long long)len, n);
    free(back);
}

static void write_shard(const char *path, const int32_t *ids, int64_t n) {
    char err[600];
    mf_shard_format f = strcmp(S.format, "raw16") == 0 ? MF_SHARD_RAW16 : MF_SHARD_LLMC;
    if (mf_shard_write(path, f, ids, n, err, sizeof err) < 0) die("%s", err);
}

int main(int argc, char **argv) {
    const char **files = (const char **)malloc((size_t)argc * sizeof *files), *what;
    unsigned char given[N_OPTIONS] = {0}, *text;
    char train_path[4200], val_path[4200], tok_path[4200];
    char why[600];
    int n_files;
    size_t n;
    progress pr = progress_new();
    mf_tokenizer *tok;
    int32_t *ids;
    int64_t count, n_val, n_train;
    double t0, seconds;

    if (!files) die("out of memory");
    parse_options_files(argc, argv, OPTIONS, N_OPTIONS, given, files, argc, &n_files, usage);
    check_settings(n_files);
    if (strlen(S.out) > 4096) die("--out \"%.40s...\" is too long", S.out);
    EX_PARSED(); /* the fuzz target of the command line stops here, before any file is read */
    snprintf(train_path, sizeof train_path, "%s_train.bin", S.out);
    snprintf(val_path, sizeof val_path, "%s_val.bin", S.out);
    snprintf(tok_path, sizeof tok_path, "%s.tok", S.out);
    if (S.gpt2) { char a[4200], b[4200]; gpt2_paths(S.gpt2, a, b, sizeof a); } /* before reading gigabytes */

    text = read_inputs(files, n_files, &n);
    tok = make_tokenizer(text, n, &pr, &what);
    if (!(ids = (int32_t *)malloc((n ? n : 1) * sizeof *ids))) die("out of memory: %zu bytes of text need %zu MB of ids", n, n * 4 >> 20);
    t0 = mf_time();
    count = encode_text(tok, text, n, ids, &pr);
    seconds = mf_time() - t0;
    check_round_trip(tok, ids, count, text, n);

    /* the split (round(F * count) validation ids, the rest trains) */
    n_val = (int64_t)floor((double)S.val_fraction * (double)count + 0.5);
    n_train = count - n_val;
    if (n_val == 0)
        die("the validation part would be empty: --val-fraction %g of %lld tokens rounds to 0; give more text or a "
            "larger --val-fraction", (double)S.val_fraction, (long long)count);
    if (n_train == 0)
        die("the training part would be empty: --val-fraction %g of %lld tokens leaves none; give more text or a "
            "smaller --val-fraction", (double)S.val_fraction, (long long)count);
    if (mf_tokenizer_save(tok, tok_path, why, sizeof why) < 0) die("%s", why);
    write_shard(train_path, ids, n_train);
    write_shard(val_path, ids + n_train, n_val);

    printf("%d file%s, %zu bytes -> %lld tokens (%.3f bytes/token), vocabulary %d (%s), %.3f s, %.2f MB/s\n", n_files,
           n_files == 1 ? "" : "s", n, (long long)count, (double)n / (double)count, mf_tokenizer_vocab_size(tok), what,
           seconds, (double)n / 1e6 / (seconds > 0 ? seconds : 1e-9));
    printf("train: %lld tokens -> %s\nval:   %lld tokens -> %s\ntokenizer -> %s\n", (long long)n_train, train_path,
           (long long)n_val, val_path, tok_path);
    mf_tokenizer_free(tok);
    free(ids); free(text); free(files);
    return 0;
}
