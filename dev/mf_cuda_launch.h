/* mf_cuda_launch.h - the launch and dynamic-shared-memory macros of metaformer_cuda.cuh.
 *
 *   MF_DYN_SMEM(T, name);                                   T *name = the block's dynamic shared memory
 *   MF_LAUNCH(kernel, grid, block, smem_bytes, stream, args...);   launch, then check cudaGetLastError()
 *
 * Under nvcc these are the plain CUDA forms. When tests/cuda_emu.h (the CPU emulator, which defines
 * MF_CUDA_EMU) is included, its own definitions win whatever the include order: it #undefs and
 * redefines both, and this file defines nothing when MF_CUDA_EMU is already defined.
 * The kernel argument of MF_LAUNCH must not contain a bare comma (wrap k<A, B> in a typedef'd
 * pointer or a single-parameter template); a kernel without parameters may pass none (GNU/C++20). */
#ifndef MF_CUDA_LAUNCH_H
#define MF_CUDA_LAUNCH_H
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
#endif
