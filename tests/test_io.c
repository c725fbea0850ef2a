/* Checkpoints: round trips, bit-identical resume, and every way a file can be bad. */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#include "mf_test.h"
#include <stdlib.h>
#include <string.h>

#define CKPT "build/test_io.safetensors"

/* a tiny model: two linear layers; the same seed gives the same weights */
static mf_ctx *make_model(uint64_t seed, int hidden) {
    mf_ctx *ctx = mf_ctx_new(seed);
    mf_linear_layer_new(ctx, "l1", 3, hidden, 1);
    mf_linear_layer_new(ctx, "l2", hidden, 2, 0);
    return ctx;
}
/* one training step on fixed data with dropout (so the RNG position matters); returns the loss */
static float train_step(mf_ctx *ctx, const mf_optimizer *opt, int step) {
    int xs[2] = {5, 3}, ys[2] = {5, 2}, i;
    float x[15], y[10], l;
    mf_tensor *h, *p, *loss;
    for (i = 0; i < 15; i++) x[i] = (float)((i * 7 + step) % 11) / 11.0f - 0.5f;
    for (i = 0; i < 10; i++) y[i] = (float)((i * 3 + step) % 5) / 5.0f;
    h = mf_dropout(ctx, mf_relu(ctx, mf_linear(ctx, mf_from(ctx, 2, xs, x), mf_param_find(ctx, "l1.weight"),
                                               mf_param_find(ctx, "l1.bias"))), 0.25f);
    p = mf_linear(ctx, h, mf_param_find(ctx, "l2.weight"), NULL);
    loss = mf_mse(ctx, p, mf_from(ctx, 2, ys, y));
    mf_backward(ctx, loss);
    mf_optimizer_step(ctx, opt);
    mf_zero_grad(ctx);
    l = loss ? loss->data[0] : -1.0f;
    mf_reset(ctx);
    return l;
}

static void test_resume_is_bit_identical(void) {
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 0.01f);
    mf_ctx *a = make_model(7, 8), *b;
    float la[6], lb[3];
    int i;
    for (i = 0; i < 3; i++) la[i] = train_step(a, &opt, i);
    MFT_CHECK(mf_save(a, CKPT, 1, NULL, 0) == 0);
    for (i = 3; i < 6; i++) la[i] = train_step(a, &opt, i);
    b = make_model(99, 8); /* other seed: everything must come from the file */
    MFT_CHECK(mf_load(b, CKPT, 1) == 0);
    MFT_CHECK(mf_optimizer_steps(b) == 3);
    for (i = 3; i < 6; i++) lb[i - 3] = train_step(b, &opt, i);
    for (i = 0; i < 3; i++) MFT_CHECK(memcmp(&la[3 + i], &lb[i], sizeof(float)) == 0);
    MFT_CHECK(mf_ok(a) && mf_ok(b));
    mf_ctx_free(a); mf_ctx_free(b);
}

/* Resume into a context whose optimizer has never stepped (the usual --resume): its moments are not
   allocated while mf_load validates the file, and the validation must not do arithmetic on their NULL
   pointer (clang's -fsanitize=pointer-overflow stopped here). */
static void test_resume_into_fresh_context(void) {
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 0.01f);
    mf_ctx *a = make_model(3, 4), *b = make_model(4, 4), *c = make_model(5, 4);
    float la, lb;
    train_step(a, &opt, 0);
    MFT_CHECK(mf_save(a, CKPT, 1, NULL, 0) == 0);
    MFT_CHECK(mf_load(b, CKPT, 1) == 0); /* b: no moments yet */
    la = train_step(a, &opt, 1);
    lb = train_step(b, &opt, 1);
    MFT_CHECK(memcmp(&la, &lb, sizeof la) == 0);
    /* and a file without moments is refused before anything is allocated or changed */
    MFT_CHECK(mf_save(a, CKPT, 0, NULL, 0) == 0);
    MFT_CHECK(mf_load(c, CKPT, 1) == -1 && strstr(mf_error(c), "no optimizer state"));
    mf_ctx_free(a); mf_ctx_free(b); mf_ctx_free(c);
}

static void test_weights_only_and_metadata(void) {
    const char *meta[4] = {"model", "mlp \"quoted\"", "d_model", "8"};
    mf_ctx *a = make_model(1, 8), *b = make_model(2, 8);
    char buf[64];
    MFT_CHECK(mf_save(a, CKPT, 0, meta, 2) == 0);
    MFT_CHECK(mf_load(b, CKPT, 0) == 0);
    MFT_CHECK(memcmp(mf_param_data(a), mf_param_data(b), (size_t)mf_param_count(a) * sizeof(float)) == 0);
    MFT_CHECK(mf_load_meta(CKPT, "model", buf, sizeof buf) == (int)strlen("mlp \"quoted\""));
    MFT_CHECK(strcmp(buf, "mlp \"quoted\"") == 0);
    MFT_CHECK(mf_load_meta(CKPT, "d_model", buf, sizeof buf) == 1 && strcmp(buf, "8") == 0);
    MFT_CHECK(mf_load_meta(CKPT, "absent", buf, sizeof buf) == -1);
    /* a weights-only file cannot restore an optimizer */
    MFT_CHECK(mf_load(b, CKPT, 1) == -1);
    MFT_CHECK(strstr(mf_error(b), "no optimizer state") != NULL);
    printf("    msg: %s\n", mf_error(b));
    mf_ctx_free(a); mf_ctx_free(b);
}

/* the header is plain safetensors: size, JSON with our names, data in order */
static void test_file_layout(void) {
    mf_ctx *a = make_model(1, 4);
    FILE *f;
    unsigned char len8[8];
    char *hdr;
    unsigned long long n = 0;
    int i;
    MFT_CHECK(mf_save(a, CKPT, 0, NULL, 0) == 0);
    f = fopen(CKPT, "rb");
    MFT_CHECK(f != NULL);
    if (!f) return;
    MFT_CHECK(fread(len8, 1, 8, f) == 8);
    for (i = 0; i < 8; i++) n |= (unsigned long long)len8[i] << (8 * i);
    MFT_CHECK(n % 8 == 0 && n < 4096);
    hdr = (char *)calloc(n + 1, 1);
    MFT_CHECK(fread(hdr, 1, n, f) == n);
    MFT_CHECK(strstr(hdr, "\"l1.weight\": {\"dtype\": \"F32\", \"shape\": [4, 3], \"data_offsets\": [0, 48]}") != NULL);
    MFT_CHECK(strstr(hdr, "\"l2.weight\"") != NULL && strstr(hdr, "__metadata__") != NULL);
    {
        float w0;
        MFT_CHECK(fread(&w0, 4, 1, f) == 1);
        MFT_CHECK(w0 == mf_param_find(a, "l1.weight")->data[0]);
    }
    free(hdr); fclose(f); mf_ctx_free(a);
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f) { fwrite(p, 1, n, f); fclose(f); }
}
static long file_size(const char *path, unsigned char **content) {
    FILE *f = fopen(path, "rb");
    long n;
    if (!f) return -1;
    fseek(f, 0, SEEK_END); n = ftell(f); fseek(f, 0, SEEK_SET);
    *content = (unsigned char *)malloc((size_t)n);
    if (fread(*content, 1, (size_t)n, f) != (size_t)n) n = -1;
    fclose(f);
    return n;
}
/* load must fail with a message containing `what`, and leave the parameters untouched */
static void expect_load_fails(const char *path, int hidden, const char *what) {
    mf_ctx *b = make_model(5, hidden);
    float before = mf_param_data(b)[0];
    MFT_CHECK(mf_load(b, path, 0) == -1);
    MFT_CHECK(strstr(mf_error(b), what) != NULL);
    if (!strstr(mf_error(b), what)) printf("    expected \"%s\" in: %s\n", what, mf_error(b));
    MFT_CHECK(mf_param_data(b)[0] == before);
    printf("    msg: %s\n", mf_error(b));
    mf_ctx_free(b);
}

static void test_bad_files(void) {
    mf_ctx *a = make_model(1, 8);
    unsigned char *good = NULL, *bad;
    long n, cut;
    MFT_CHECK(mf_save(a, CKPT, 0, NULL, 0) == 0);
    n = file_size(CKPT, &good);
    MFT_CHECK(n > 100);
    if (n <= 100) return;
    bad = (unsigned char *)malloc((size_t)n);
    expect_load_fails("build/does/not/exist.safetensors", 8, "cannot open");
    write_bytes("build/bad.safetensors", good, 5);
    expect_load_fails("build/bad.safetensors", 8, "shorter than");
    for (cut = 9; cut < n; cut += 37) { /* every truncation is caught */
        write_bytes("build/bad.safetensors", good, (size_t)cut);
        expect_load_fails("build/bad.safetensors", 8, "\"build/bad.safetensors\"");
    }
    memcpy(bad, good, (size_t)n); bad[7] = 0x40; /* absurd header size */
    write_bytes("build/bad.safetensors", bad, (size_t)n);
    expect_load_fails("build/bad.safetensors", 8, "header size");
    memcpy(bad, good, (size_t)n); bad[8] = '['; /* not an object */
    write_bytes("build/bad.safetensors", bad, (size_t)n);
    expect_load_fails("build/bad.safetensors", 8, "not a JSON object");
    memcpy(bad, good, (size_t)n); memset(bad + 20, '}', 12); /* garbage in the JSON */
    write_bytes("build/bad.safetensors", bad, (size_t)n);
    expect_load_fails("build/bad.safetensors", 8, "malformed");
    expect_load_fails(CKPT, 16, "shape");            /* another hidden size */
    {   /* a model with an extra layer: the file lacks its tensors */
        mf_ctx *b = make_model(5, 8);
        mf_linear_layer_new(b, "l3", 2, 2, 0);
        MFT_CHECK(mf_load(b, CKPT, 0) == -1 && strstr(mf_error(b), "has no tensor \"l3.weight\""));
        mf_ctx_free(b);
    }
    {   /* a model without l2: the file has a tensor the model lacks */
        mf_ctx *b = mf_ctx_new(1);
        mf_linear_layer_new(b, "l1", 3, 8, 1);
        MFT_CHECK(mf_load(b, CKPT, 0) == -1 && strstr(mf_error(b), "that this model lacks"));
        mf_ctx_free(b);
    }
    free(bad); free(good); mf_ctx_free(a);
}

static void test_failed_save_keeps_old_file(void) {
    mf_ctx *a = make_model(1, 8);
    unsigned char *before = NULL, *after = NULL;
    long n1, n2;
    MFT_CHECK(mf_save(a, CKPT, 0, NULL, 0) == 0);
    n1 = file_size(CKPT, &before);
    MFT_CHECK(mf_save(a, "build/no_such_dir/x.safetensors", 0, NULL, 0) == -1);
    MFT_CHECK(strstr(mf_error(a), "cannot create") != NULL);
    printf("    msg: %s\n", mf_error(a));
    n2 = file_size(CKPT, &after);
    MFT_CHECK(n1 == n2 && memcmp(before, after, (size_t)n1) == 0);
    mf_clear_error(a);
    MFT_CHECK(mf_save(a, NULL, 0, NULL, 0) == -1);
    free(before); free(after); mf_ctx_free(a);
}

/* metadata values of any length, and many parameters (one step count each), round-trip */
static void test_long_metadata(void) {
    mf_ctx *a = mf_ctx_new(3), *b = mf_ctx_new(4);
    mf_optimizer opt = mf_optimizer_default(MF_OPT_ADAM, 0.01f);
    char *longv = (char *)malloc(10001), buf[16];
    const char *meta[2];
    int i, one = 1;
    memset(longv, 'x', 10000); longv[10000] = 0;
    meta[0] = "long"; meta[1] = longv;
    for (i = 0; i < 1500; i++) { /* 1500 tensors: mf.param_steps is ~3000 characters long */
        char nm[32];
        snprintf(nm, sizeof nm, "p%d", i);
        mf_param(a, nm, 1, &one); mf_param(b, nm, 1, &one);
    }
    mf_optimizer_step(a, &opt);
    MFT_CHECK(mf_save(a, CKPT, 1, meta, 1) == 0);
    MFT_CHECK(mf_load(b, CKPT, 1) == 0);
    MFT_CHECK(mf_ok(b) || (printf("    %s\n", mf_error(b)), 0));
    MFT_CHECK(mf_load_meta(CKPT, "long", buf, sizeof buf) == 10000 && strlen(buf) == 15);
    MFT_CHECK(mf_load_meta(CKPT, "absent", buf, sizeof buf) == -1);
    MFT_CHECK(mf_load_meta("build/does/not/exist", "long", buf, sizeof buf) == -2);
    free(longv); mf_ctx_free(a); mf_ctx_free(b);
}

int main(void) {
    MFT_RUN(test_long_metadata);
    MFT_RUN(test_resume_is_bit_identical);
    MFT_RUN(test_resume_into_fresh_context);
    MFT_RUN(test_weights_only_and_metadata);
    MFT_RUN(test_file_layout);
    MFT_RUN(test_bad_files);
    MFT_RUN(test_failed_save_keeps_old_file);
    return mft_finish();
}
