/* Checkpoints: mf_load (weights only, and with the optimizer into a context that has not stepped)
   and mf_load_meta on any bytes. The model is the one tests/fuzz/run.sh trains for the seed
   (build/train on a text of 16 distinct characters, --d-model 8 --heads 2 --layers 1 --d-ff 16
   --seq-len 8), so a seed loads and the mutations reach every check of the loader. Property: no
   memory error, and a failed load says why. */
#define METAFORMER_IMPLEMENTATION
#include "../../metaformer.h"
#include "fuzz.h"

static mf_model *fuzz_model(mf_ctx *ctx) {
    mf_model_config cfg = mf_model_config_default();
    cfg.vocab = 16; cfg.d_model = 8; cfg.n_heads = 2; cfg.n_layers = 1; cfg.d_ff = 16; cfg.max_seq = 8;
    return mf_model_new(ctx, &cfg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(0, data, size);
    char buf[64];
    int with_optimizer;
    for (with_optimizer = 0; with_optimizer < 2; with_optimizer++) {
        mf_ctx *ctx = mf_ctx_new(1);
        mf_model *m = fuzz_model(ctx);
        FUZZ_CHECK(m && mf_ok(ctx));
        if (mf_load(ctx, path, with_optimizer) < 0) FUZZ_CHECK(!mf_ok(ctx) && mf_error(ctx)[0]);
        else FUZZ_CHECK(mf_ok(ctx));
        mf_model_free(m);
        mf_ctx_free(ctx);
    }
    FUZZ_CHECK(mf_load_meta(path, "train.mixer", buf, sizeof buf) >= -2);
    FUZZ_CHECK(mf_load_meta(path, "mf.format", buf, 4) >= -2);
    return 0;
}
