/* cuda_suites.cpp - every CUDA parity suite (tests/test_cuda*.cpp but the emulator's own) in one
 * program.
 *
 * Each suite compiles the header and its kernels, or links them compiled once; either way most of
 * a suite's build is the library (about 20 s optimized, 70 s under ASan + UBSan, 35 s by nvcc), and
 * the suites that call the internals (mf__*, MF__*) cannot link it. So the suites are built as one
 * translation unit per flavour: make test's build/tests/cuda_suites and build/asan/cuda_suites (on
 * the emulator), make test-cuda's build/cuda/cuda_suites (on a GPU). Each suite stays a file with its
 * own main (make build/cuda/test_cuda_xl, or g++ -I. -Itests tests/test_cuda_xl.cpp, builds one
 * alone) and is included here inside a namespace of its own, its main renamed. The Makefile stops
 * when a tests/test_cuda*.cpp is missing here (its #include or its row of the table).
 *
 *   cuda_suites              every suite, one after another: the counters of mf_test.h are shared,
 *                            so the last closing line "N passed, N failed" counts them all (the
 *                            line tests/run.sh reads)
 *   cuda_suites NAME...      those suites only (make test-cuda runs each in a process of its own:
 *                            a crash on a GPU ends that suite, not the others)
 *   cuda_suites --list       the suites' names, one a line (bench/gpu_report.sh runs them side by
 *                            side from a prebuilt program)
 *
 * Everything a suite includes is included here first, at file scope: the include guards then keep
 * the suites' own #includes from reopening a header inside a namespace. */
#include "cuda_parity.h"
#include "op_examples.h"
#include "profile_model.h"
#include <algorithm>
#include <functional>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <vector>

#define main suite_main
namespace test_cuda {
#include "test_cuda.cpp"
}
namespace test_cuda_attention {
#include "test_cuda_attention.cpp"
}
namespace test_cuda_attn_dropout {
#include "test_cuda_attn_dropout.cpp"
}
namespace test_cuda_bf16 {
#include "test_cuda_bf16.cpp"
}
namespace test_cuda_classify {
#include "test_cuda_classify.cpp"
}
namespace test_cuda_custom {
#include "test_cuda_custom.cpp"
}
namespace test_cuda_fastweights {
#include "test_cuda_fastweights.cpp"
}
namespace test_cuda_feedback {
#include "test_cuda_feedback.cpp"
}
namespace test_cuda_memory {
#include "test_cuda_memory.cpp"
}
namespace test_cuda_ops {
#include "test_cuda_ops.cpp"
}
namespace test_cuda_profile {
#include "test_cuda_profile.cpp"
}
namespace test_cuda_xl {
#include "test_cuda_xl.cpp"
}
#undef main

static const struct { const char *name; int (*run)(void); } suites[] = {
    {"test_cuda", test_cuda::suite_main},
    {"test_cuda_attention", test_cuda_attention::suite_main},
    {"test_cuda_attn_dropout", test_cuda_attn_dropout::suite_main},
    {"test_cuda_bf16", test_cuda_bf16::suite_main},
    {"test_cuda_classify", test_cuda_classify::suite_main},
    {"test_cuda_custom", test_cuda_custom::suite_main},
    {"test_cuda_fastweights", test_cuda_fastweights::suite_main},
    {"test_cuda_feedback", test_cuda_feedback::suite_main},
    {"test_cuda_memory", test_cuda_memory::suite_main},
    {"test_cuda_ops", test_cuda_ops::suite_main},
    {"test_cuda_profile", test_cuda_profile::suite_main},
    {"test_cuda_xl", test_cuda_xl::suite_main},
};
static const size_t n_suites = sizeof suites / sizeof suites[0];

int main(int argc, char **argv) {
    int failed = 0;
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < n_suites; i++) printf("%s\n", suites[i].name);
        return 0;
    }
    for (int a = 1; a < argc; a++) { /* names first: a typo runs nothing */
        size_t i = 0;
        while (i < n_suites && strcmp(argv[a], suites[i].name) != 0) i++;
        if (i == n_suites) {
            printf("FAIL cuda_suites: no suite %s; the suites:", argv[a]);
            for (i = 0; i < n_suites; i++) printf(" %s", suites[i].name);
            printf("\n0 passed, 1 failed\n");
            return 1;
        }
    }
    for (size_t i = 0; i < n_suites; i++) {
        int chosen = argc == 1;
        for (int a = 1; a < argc; a++) chosen = chosen || strcmp(argv[a], suites[i].name) == 0;
        if (!chosen) continue;
        set_order(0); /* each suite starts from the emulator's default thread order */
        failed |= suites[i].run() != 0;
    }
    return failed;
}
