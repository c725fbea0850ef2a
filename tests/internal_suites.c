/* internal_suites.c - the C tests that call the header's internals (mf__*, MF__*), in one program.
 *
 * A test that calls the header's static functions must compile the implementation in its own
 * translation unit (about 10 s optimized, 18 s under ASan + UBSan), so ten such tests built in
 * two flavours spent a third of make test's CPU time compiling the same code. Here they are one
 * translation unit per flavour (build/tests/internal_suites, build/asan/internal_suites; clang's
 * build/casan/internal_suites on demand), as tests/cuda_suites.cpp does for the CUDA suites. Each test stays
 * a file with its own main (make build/tests/test_xl, or cc -I. -Itests tests/test_xl.c, builds
 * one alone), included here with its main renamed. C has no namespaces: a file-scope name that two
 * tests both define is renamed for one of them by a #define around its #include (the compiler
 * names any new clash). The Makefile stops when a test calling the internals is neither here nor
 * in its list of tests that configure the implementation themselves (test_crash: save hooks).
 *
 *   internal_suites              every test, one after another: the counters of mf_test.h are
 *                                shared, so the last closing line "N passed, N failed" counts them
 *                                all (the line tests/run.sh reads)
 *   internal_suites NAME...      those tests only
 *   internal_suites --list       the tests' names, one a line
 *
 * test_ops comes first: it sets the library's allocator (MF_MALLOC, counting the allocations)
 * before the implementation is compiled, so every test here runs on that allocator. */
#define main test_ops_main
#include "test_ops.c"
#undef main

#define main test_attn_dropout_main
#define test_model_gradients attn_dropout_test_model_gradients
#include "test_attn_dropout.c"
#undef test_model_gradients
#undef main

#define main test_bf16_main
#include "test_bf16.c"
#undef main

#define main test_bpe_train_main
#define rng_next bpe_rng_next
#include "test_bpe_train.c"
#undef rng_next
#undef main

#define main test_fastweights_main
#define tiny fw_tiny
#define expect_bad fw_expect_bad
#include "test_fastweights.c"
#undef expect_bad
#undef tiny
#undef main

#define main test_feedback_main
#include "test_feedback.c"
#undef main

#define main test_gemm_main
#define rnd gemm_rnd
#include "test_gemm.c"
#undef rnd
#undef main

#define main test_model_main
#define test_bad_configs model_test_bad_configs
#include "test_model.c"
#undef test_bad_configs
#undef main

#define main test_profile_main
#include "test_profile.c"
#undef main

#define main test_tokenizer_main
#define rnd tok_rnd
#define rng_state tok_rng_state
#include "test_tokenizer.c"
#undef rng_state
#undef rnd
#undef main

#define main test_xl_main
#include "test_xl.c"
#undef main

static int gemm_suite(void) {
    char name[] = "test_gemm", *argv[] = {name, NULL};
    return test_gemm_main(1, argv);
}

static const struct { const char *name; int (*run)(void); } suites[] = {
    {"test_ops", test_ops_main},
    {"test_attn_dropout", test_attn_dropout_main},
    {"test_bf16", test_bf16_main},
    {"test_bpe_train", test_bpe_train_main},
    {"test_fastweights", test_fastweights_main},
    {"test_feedback", test_feedback_main},
    {"test_gemm", gemm_suite},
    {"test_model", test_model_main},
    {"test_profile", test_profile_main},
    {"test_tokenizer", test_tokenizer_main},
    {"test_xl", test_xl_main},
};
#define N_SUITES ((int)(sizeof suites / sizeof suites[0]))

int main(int argc, char **argv) {
    int a, i, failed = 0;
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (i = 0; i < N_SUITES; i++) printf("%s\n", suites[i].name);
        return 0;
    }
    for (a = 1; a < argc; a++) { /* names first: a typo runs nothing */
        for (i = 0; i < N_SUITES && strcmp(argv[a], suites[i].name) != 0; i++) {}
        if (i == N_SUITES) {
            printf("FAIL internal_suites: no test %s; the tests:", argv[a]);
            for (i = 0; i < N_SUITES; i++) printf(" %s", suites[i].name);
            printf("\n0 passed, 1 failed\n");
            return 1;
        }
    }
    for (i = 0; i < N_SUITES; i++) {
        int chosen = argc == 1;
        for (a = 1; a < argc; a++) chosen = chosen || strcmp(argv[a], suites[i].name) == 0;
        if (chosen) failed |= suites[i].run() != 0;
    }
    return failed;
}
