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

/* The model's contexts live across inputs (a new one per input took most of the time): a failed
   load changes nothing (mf_load validates first), so clearing its error is enough. The one loaded
   with the optimizer must not have its moments yet (the resume into a fresh context, issue #22): it
   is made anew after each load that succeeded. */
static mf_ctx *ctx_of[2];
static mf_model *model_of[2];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(0, data, size);
    char buf[64];
    int with_optimizer;
    for (with_optimizer = 0; with_optimizer < 2; with_optimizer++) {
        mf_ctx *ctx = ctx_of[with_optimizer];
        if (!ctx) {
            ctx = ctx_of[with_optimizer] = mf_ctx_new(1);
            model_of[with_optimizer] = fuzz_model(ctx);
            FUZZ_CHECK(model_of[with_optimizer] && mf_ok(ctx));
        }
        if (mf_load(ctx, path, with_optimizer) < 0) {
            FUZZ_CHECK(!mf_ok(ctx) && mf_error(ctx)[0]);
            mf_clear_error(ctx);
        } else {
            FUZZ_CHECK(mf_ok(ctx));
            if (with_optimizer) {
                mf_model_free(model_of[1]); mf_ctx_free(ctx);
                ctx_of[1] = NULL;
            }
        }
    }
    FUZZ_CHECK(mf_load_meta(path, "train.mixer", buf, sizeof buf) >= -2);
    FUZZ_CHECK(mf_load_meta(path, "mf.format", buf, 4) >= -2);
    return 0;
}
