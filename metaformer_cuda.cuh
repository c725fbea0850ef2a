/* metaformer_cuda.cuh - the CUDA backend of metaformer.h (scaffolding; the kernels arrive with the
 * CUDA issues).
 *
 * Use: compile ONE translation unit with nvcc that does
 *     #define METAFORMER_IMPLEMENTATION
 *     #define METAFORMER_CUDA
 *     #include "metaformer.h"          (which includes this file at its end)
 *
 * Every kernel is launched through MF_LAUNCH(kernel, grid, block, smem_bytes, stream, args...) and
 * declares dynamic shared memory with MF_DYN_SMEM(T, name), never with <<<>>> or
 * `extern __shared__` directly: tests/cuda_emu.h redefines both so that the same kernel source
 * compiles with the host C++ compiler and runs on the CPU (how CI, which has no GPU, checks every
 * kernel against its CPU twin). Under the emulator MF_CUDA_EMU is defined and the CUDA runtime and
 * cuBLAS come from the emulator instead of NVIDIA's headers.
 */
#ifndef METAFORMER_CUDA_CUH
#define METAFORMER_CUDA_CUH

#ifndef MF_CUDA_EMU
#include <cuda_runtime.h>
#endif

/* ---- launch and dynamic shared memory (real CUDA forms; the emulator defines its own) ---- */
#if !defined(MF_CUDA_EMU)
#ifndef MF_DYN_SMEM
#define MF_DYN_SMEM(T, name) \
    extern __shared__ __align__(16) unsigned char mf__dyn_smem_raw[]; \
    T *name = reinterpret_cast<T *>(mf__dyn_smem_raw)
#endif
#ifndef MF_LAUNCH
#define MF_LAUNCH(kernel, grid, block, smem_bytes, stream, ...) \
    kernel<<<(grid), (block), (smem_bytes), (stream)>>>(__VA_ARGS__)
#endif
#endif

/* Check a CUDA runtime call; on failure record "<what>: <call> failed: <cuda error>" in ctx. */
#define MF_CUDA_CHECK(ctx, what, call) mf__cuda_check((ctx), (what), #call, (call))
static inline int mf__cuda_check(mf_ctx *ctx, const char *what, const char *call, cudaError_t err) {
    if (err == cudaSuccess) return 0;
    mf__fail(ctx, "%s: %s failed: %s (%s)", what, call, cudaGetErrorString(err), cudaGetErrorName(err));
    return -1;
}

MFDEF int mf_cuda_available(char *why, size_t size) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0) {
        if (why && size)
            snprintf(why, size, "no usable CUDA device: %s", err != cudaSuccess ? cudaGetErrorString(err) : "the machine has no GPU");
        return 0;
    }
    if (why && size) why[0] = 0;
    return n;
}

#endif /* METAFORMER_CUDA_CUH */
