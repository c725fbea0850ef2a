/* cuda_internal.cpp - the CUDA suites that call the header's internals (mf__*, MF__*), in one
 * program: tests/test_cuda.cpp, test_cuda_bf16.cpp, test_cuda_feedback.cpp, test_cuda_ops.cpp.
 *
 * Those suites cannot link the implementation compiled once (tests/mf_impl.c, or on a GPU
 * examples/metaformer_cuda.cu): each compiles the header and its kernels itself, about 20 s
 * optimized, 70 s under ASan + UBSan and 35 s by nvcc, per suite. So they are built as one
 * translation unit per flavour: make test's build/tests/cuda_internal and build/asan/cuda_internal
 * (on the emulator) and make test-cuda's build/cuda/cuda_internal (on the GPU). Each suite stays a
 * file with its own main (g++ -I. -Itests tests/test_cuda_ops.cpp builds one alone) and is included
 * here inside a namespace of its own, its main renamed; they run one after another. The counters of
 * mf_test.h are shared, so the last suite's closing line "N passed, N failed" counts them all (the
 * line tests/run.sh reads).
 *
 * Everything a suite includes is included here first, at file scope: the include guards then keep
 * the suites' own #includes from reopening a header inside a namespace. */
#include "cuda_parity.h"
#include "op_examples.h"
#include <algorithm>
#include <math.h>
#include <stddef.h>
#include <string.h>
#include <string>
#include <vector>

#define main suite_main
namespace suite_cuda {
#include "test_cuda.cpp"
}
namespace suite_cuda_bf16 {
#include "test_cuda_bf16.cpp"
}
namespace suite_cuda_feedback {
#include "test_cuda_feedback.cpp"
}
namespace suite_cuda_ops {
#include "test_cuda_ops.cpp"
}
#undef main

int main(void) {
    int (*const suites[])(void) = {suite_cuda::suite_main, suite_cuda_bf16::suite_main,
                                   suite_cuda_feedback::suite_main, suite_cuda_ops::suite_main};
    int failed = 0;
    for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++) {
        set_order(0); /* each suite starts from the emulator's default thread order */
        failed |= suites[i]() != 0;
    }
    return failed;
}
