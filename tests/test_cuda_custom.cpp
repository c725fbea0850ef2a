/* test_cuda_custom.cpp - a mixer defined outside the library (examples/custom_mixer.c's ALiBi
 * attention, docs/math.md §23) on the CUDA backend against the CPU, with no CUDA code of its own: a
 * few training steps (losses, gradient norms, parameters), then greedy and sampled generation (the
 * window rerun per token), in every thread order of the emulator; the same for tests/test_mixers.h's
 * mixer with memories and its whole-stack recurrence.
 *
 *   make test       g++ -std=c++14 with tests/cuda_emu.h: every kernel runs on the CPU emulator
 *   make test-cuda  nvcc -x cu for a real GPU (sm_90), without the emulator */
#include "cuda_parity.h"
#include <stdlib.h>
#define CUSTOM_MIXER_NO_MAIN
#include "examples/custom_mixer.c"
#include "test_mixers.h"

static int ALIBI = -1;

static void test_train(void) {
    mf_model_config c = small_config((mf_mixer_kind)ALIBI);
    c.pos = MF_POS_NONE;
    mf_model_config_set(&c, "alibi_max", 4.0f);
    TrainOpts o = train_opts();
    o.zero_grad = ""; /* no key bias: every parameter has a gradient */
    check_train(c, "alibi (a registered mixer)", o);
}

/* tests/test_mixers.h's mixer with memories (they carry from step to step on both devices) and a
   whole-stack recurrence */
static void test_train_hooks(void) {
    TrainOpts o = train_opts();
    o.zero_grad = "";
    check_train(small_config((mf_mixer_kind)TM_LASTMEAN), "lastmean (memories of a registered mixer)", o);
    check_train(small_config((mf_mixer_kind)TM_LIN_CROSS), "lin_cross (a registered run_stack)", o);
}

int main(void) {
    if (cuda_suite_start("test_cuda_custom") < 0) return 1;
    ALIBI = custom_mixer_register();
    MFT_CHECK(ALIBI >= MF_MIXER_COUNT);
    if (ALIBI >= 0) MFT_RUN(test_train);
    MFT_CHECK(tm_register() == 0);
    if (TM_LIN_CROSS >= 0) MFT_RUN(test_train_hooks);
#ifdef MF_CUDA_EMU
    MFT_RUN(test_no_leaks);
#endif
    return mft_finish();
}
