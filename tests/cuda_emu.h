/* cuda_emu.h - run CUDA kernels on the CPU, for testing metaformer_cuda.cuh without a GPU.
 *
 * The same kernel source that nvcc compiles is compiled by the host C++ compiler (C++14) with
 * this header included first; every launch runs synchronously on the calling OS thread:
 *
 *   g++ -std=c++14 -O1 -mfma -ffp-contract=fast -fexpensive-optimizations -Wall -Wextra -Werror -Itests \
 *       tests/test_cuda_emu.cpp -o build/test_cuda_emu
 *   g++ -std=c++14 -O1 -mfma -ffp-contract=fast -fexpensive-optimizations -g -fsanitize=address,undefined \
 *       -Itests tests/test_cuda_emu.cpp -o build/test_cuda_emu_asan
 *   (the contraction flags are the Makefile's EMU_FLAGS: nvcc's FMA contraction of device code)
 *   (add -DMF_EMU_USE_UCONTEXT to use the portable, slower ucontext fibers instead of the x86-64 switch;
 *    no -lpthread needed with glibc >= 2.34; no NVIDIA header or library is used)
 *
 * Execution model
 *   - Every CUDA thread of a block is a fiber with its own stack (64 KiB, 256 KiB under ASan; pooled).
 *     Blocks run one after another; inside a block a thread runs until it reaches __syncthreads(),
 *     a warp primitive (__shfl*_sync, __ballot_sync, __any_sync, __all_sync, __syncwarp,
 *     __reduce_*_sync) or exits; only then does the next thread run. Threads that never reach a
 *     barrier cost two context switches (1M threads of a trivial kernel: ~0.05 s at -O1).
 *   - Thread order (mf_emu_set_order): MF_EMU_ORDER_IN (linear id ascending), _REVERSED, _SHUFFLED
 *     (seeded; the default, as a GPU promises no order). It decides the order of blocks, the order
 *     threads start, and the order they resume after each __syncthreads() and after each warp
 *     rendezvous.
 *   - __syncthreads(): all live threads of the block must wait at the same call site (file:line).
 *     A thread that exited while others wait, or two sites, or a warp operation that can never
 *     complete, is reported as a launch failure (cudaErrorLaunchFailure, message from
 *     mf_emu_last_message(), printed to stderr unless mf_emu_set_verbose(0)); the rest of the
 *     launch is abandoned.
 *   - Warp primitives: lanes are linear thread id / 32. A call is a rendezvous of the lanes named in
 *     the mask that are still alive (lanes beyond blockDim and exited lanes do not count). All
 *     participants must be in the same kind of primitive with the same mask. A shuffle that reads a
 *     lane which does not participate returns all-ones bits (NaN as float, -1 as int).
 *   - __shared__ variables are static locals placed in the ELF section "mf_emu_shared"; the whole
 *     section is filled with 0xFF bytes (NaN) before each block. Dynamic shared memory
 *     (MF_DYN_SMEM) is a malloc'd buffer of exactly the launch's smem bytes, also 0xFF-filled per
 *     block. cudaMalloc memory is malloc'd (ASan sees out-of-bounds kernel accesses) and 0xFF-filled.
 *     mf_emu_set_poison(0) switches the filling off (then it is zero for cudaMalloc/dynamic smem,
 *     and __shared__ keeps its previous contents).
 *   - Atomics are plain read-modify-write (threads switch only at barriers, so they are atomic).
 *   - Launches are validated like the real thing: block dims (1024,1024,64, product <= 1024),
 *     grid dims (2^31-1, 65535, 65535), all >= 1 -> cudaErrorInvalidConfiguration; dynamic smem over
 *     the kernel's limit (48 KiB less its static __shared__ bytes unless raised by
 *     cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, n), n + static <= 227 KiB)
 *     -> cudaErrorInvalidValue; registers x threads per block over 65536 ->
 *     cudaErrorLaunchOutOfResources. The kernel is not run; cudaGetLastError() returns the error once.
 *     A kernel's registers and static smem are nvcc's for sm_90: tests/cuda_kernel_resources.h
 *     (generated from ptxas -v by tests/cuda_kernel_resources.sh), found by the kernel's demangled
 *     name in the program's ELF symbol table; a library kernel (mf__k_*) without an entry fails its
 *     launch (cudaErrorInvalidDeviceFunction); a test's own kernel counts 0 of both unless declared
 *     with mf_emu_set_kernel_resources(k, regs, static_smem). cudaFuncGetAttributes reports them
 *     (sharedSizeBytes, numRegs, maxThreadsPerBlock, maxDynamicSharedSizeBytes).
 *   - Rounding like the device, not kinder: the programs that run kernels here are compiled with FMA
 *     contraction (the Makefile's EMU_FLAGS; nvcc contracts a*b+c by default); the device math
 *     functions (expf, logf, tanhf, sinf, powf, erff, rsqrtf, ..., and the intrinsics __expf, __logf,
 *     __sinf, __fdividef, ...) return, inside a kernel, a value moved from the exact one by a hash of
 *     the input bits to anywhere within the CUDA Programming Guide's bound for that function (ulps, or
 *     an absolute error where the guide gives one; exactly representable results such as expf(0) stay
 *     exact); sqrtf, __fsqrt_rn, __frcp_rn, __frsqrt_rn, fmaf, __f*_rn and x / y are correctly rounded,
 *     as CUDA guarantees; the same calls outside a kernel (the CPU code) are the C library's.
 *   - cuBLAS: cublasSgemm / cublasSgemmStridedBatched with real column-major semantics (beta == 0
 *     never reads C), accumulated in fp32 with FMA in an order that depends on the shape: the k range
 *     split in 1 to 4 parts (a hash of transposes, m, n, k and the batch count; 1 when k < 16), each
 *     summed in order, the partial sums added in order. One shape gives the same bits every time,
 *     the same product in other shapes (row slices) generally other bits, as cuBLAS's kernel choice
 *     per shape does. In CUBLAS_TF32_TENSOR_OP_MATH mode the inputs are rounded to TF32 (10-bit
 *     mantissa) like tensor cores do, unless mf_emu_set_tf32(0).
 *     cublasGemmEx / cublasGemmStridedBatchedEx: A and B both CUDA_R_32F or both CUDA_R_16BF,
 *     C CUDA_R_32F, CUBLAS_COMPUTE_32F (other types: CUBLAS_STATUS_NOT_SUPPORTED).
 *   - bfloat16 (cuda_bf16.h): __nv_bfloat16, __nv_bfloat162 and the explicit conversions
 *     __float2bfloat16(_rn), __bfloat162float, __floats2bfloat162_rn, __float22bfloat162_rn,
 *     __bfloat1622float2, __low2float, __high2float (round to nearest even, exact widening); no
 *     bf16 arithmetic operators and no implicit conversions.
 *
 * Streams and events
 *   - Work on the legacy default stream (0) runs at once, after all queued work (as before streams
 *     were emulated). Kernels launched on a created stream are queued on it and run only when
 *     something waits for them: cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize,
 *     a copy, fill or cuBLAS call on that stream (these run at once, after the stream's queued work),
 *     or a stream that waits on an event recorded after them. So work two streams run in
 *     parallel on a GPU runs here as late as the waits allow: a missing cudaStreamWaitEvent shows as
 *     a wrong result. cudaEventRecord queues a mark; cudaStreamWaitEvent queues a wait that runs the
 *     other stream up to that mark first. A stand-in library (tests/nccl_emu.h) queues its
 *     operations the same way (mf_emu::enqueue).
 *   - Every stream keeps a vector clock (the operations of each stream it is ordered after, through
 *     its waits). mf_emu_watch(p, n) watches device memory: after every operation the emulator
 *     notes which words it changed; a change of a word whose last writer is not ordered before
 *     the writing operation, or a stand-in's read (mf_emu::check_read) of such a word, is a race:
 *     mf_emu_race_count(), mf_emu_race_message() (how a test proves that no all-reduce read a
 *     gradient before the kernel that finished it). mf_emu_log(1) records every operation's
 *     enqueue and run with its stream (mf_emu_log_size, mf_emu_log_at, mf_emu_stream_id).
 *
 * Emulator API: mf_emu_set_order(order, seed), mf_emu_get_order(), mf_emu_last_message(),
 * mf_emu_clear_message(), mf_emu_set_verbose(on), mf_emu_set_poison(on), mf_emu_set_tf32(on),
 * mf_emu_set_stack_size(bytes), mf_emu_live_allocations(&bytes), mf_emu_launch_count(),
 * mf_emu_sync_count(), mf_emu_host_copy_count(), mf_emu_stream_id(st), mf_emu_log(on), mf_emu_log_size(),
 * mf_emu_log_at(i, &stream, &run), mf_emu_watch(p, n), mf_emu_unwatch_all(), mf_emu_race_count(),
 * mf_emu_race_message(), mf_emu_set_device_count(n), mf_emu_set_kernel_resources(k, regs, static_smem);
 * macros MF_LAUNCH(kernel, grid, block, smem, stream, args...), MF_DYN_SMEM(T, name), MF_CUDA_EMU.
 *
 *   - WMMA (nvcuda::wmma): a stand-in for two shapes - TF32 (fragment<matrix_a / matrix_b /
 *     accumulator, 16, 16, 8, precision::tf32 / float, row_major / col_major>) and bf16
 *     (fragment<..., 16, 16, 16, __nv_bfloat16 / float, ...>, inputs loaded from __nv_bfloat16
 *     memory) - with fill_fragment, load_matrix_sync, mma_sync, store_matrix_sync (mem_row_major /
 *     mem_col_major) and __float_to_tf32 (round to nearest, ties away, to 10 mantissa bits:
 *     cvt.rna.tf32.f32). Every lane holds the whole tile (CUDA leaves the lane layout unspecified:
 *     a kernel may only use the collective functions and uniform element-wise operations). Each
 *     function is a rendezvous of the warp (all 32 lanes, like the .sync of the hardware), so that
 *     every lane has loaded before any lane stores. mma_sync multiplies the inputs truncated to TF32
 *     (what tensor cores read of an unconverted float), or the bf16 inputs exactly (a product of two
 *     8-bit significands fits a float's 24), and accumulates in float, k ascending (once for the
 *     32 lanes: a lane whose tiles equal those of a product just made copies its result). Pointers
 *     must be 32-byte aligned and ldm a multiple of 16 bytes (4 floats, 8 bf16; else a launch
 *     failure, as the hardware's misaligned-address fault).
 *
 * Not emulated: inline PTX asm, other WMMA shapes and types, mma PTX, cp.async, cooperative groups,
 * dynamic parallelism (a launch from inside a kernel fails with cudaErrorNotSupported), textures/surfaces, half types
 * and bf16 arithmetic, __match_*_sync, per-lane independent progress inside a warp (lanes only interleave at
 * primitives), concurrency between streams (queued work runs in order on the host thread that waits),
 * the larger error of __sinf / __cosf outside [-pi, pi] (kept exact there), tensor-core accumulation orders
 * other than the split-K above, detection of host pointers passed to kernels,
 * per-host-thread error state (one global last error). A kernel thread overflowing its stack hits a
 * guard page (SIGSEGV): raise mf_emu_set_stack_size() for kernels with big local arrays.
 * `extern __shared__ T x[];` does not compile here: use MF_DYN_SMEM(T, x). __CUDA_ARCH__ and
 * __CUDACC__ are not defined; MF_CUDA_EMU is. Launches from several host threads are serialised.
 */
#ifndef MF_CUDA_EMU_H
#define MF_CUDA_EMU_H
#define MF_CUDA_EMU 1

#ifdef __CUDACC__
#error "cuda_emu.h is for the host compiler; nvcc must not see it"
#endif
#if !defined(__cplusplus) || __cplusplus < 201402L
#error "cuda_emu.h needs C++14 (g++ -std=c++14)"
#endif

/* every system header first: the macros below (__expf, __shared__, ...) must not reach them */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <new>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <sys/mman.h>
#include <unistd.h>
#include <cxxabi.h>
#include <elf.h>
#include <link.h>

/* nvcc's registers and static shared memory per library kernel (tests/cuda_kernel_resources.sh) */
#if defined(__has_include)
#if __has_include("cuda_kernel_resources.h")
#include "cuda_kernel_resources.h"
#define MF_EMU_HAVE_KERNEL_RESOURCES 1
#endif
#endif

#if !defined(MF_EMU_USE_UCONTEXT) && !defined(__x86_64__)
#define MF_EMU_USE_UCONTEXT 1
#endif
#ifdef MF_EMU_USE_UCONTEXT
#include <ucontext.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define MF_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MF_EMU_ASAN 1
#endif
#endif
#ifdef MF_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

/* ------------------------------------------------------------------------------------------------
 * Vector types
 * ---------------------------------------------------------------------------------------------- */
struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    operator uint3() const { uint3 r = {x, y, z}; return r; }
};
#define MF_EMU_VEC2(T, N, A) struct __attribute__((aligned(A))) N##2 { T x, y; }; \
    static inline N##2 make_##N##2(T x, T y) { N##2 r; r.x = x; r.y = y; return r; }
#define MF_EMU_VEC3(T, N) struct N##3 { T x, y, z; }; \
    static inline N##3 make_##N##3(T x, T y, T z) { N##3 r; r.x = x; r.y = y; r.z = z; return r; }
#define MF_EMU_VEC4(T, N, A) struct __attribute__((aligned(A))) N##4 { T x, y, z, w; }; \
    static inline N##4 make_##N##4(T x, T y, T z, T w) { N##4 r; r.x = x; r.y = y; r.z = z; r.w = w; return r; }
MF_EMU_VEC2(float, float, 8) MF_EMU_VEC3(float, float) MF_EMU_VEC4(float, float, 16)
MF_EMU_VEC2(int, int, 8) MF_EMU_VEC3(int, int) MF_EMU_VEC4(int, int, 16)
MF_EMU_VEC2(unsigned, uint, 8) MF_EMU_VEC4(unsigned, uint, 16)
MF_EMU_VEC2(double, double, 16)
MF_EMU_VEC4(signed char, char, 4) MF_EMU_VEC4(unsigned char, uchar, 4)
static inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { uint3 r = {x, y, z}; return r; }
#undef MF_EMU_VEC2
#undef MF_EMU_VEC3
#undef MF_EMU_VEC4

/* ------------------------------------------------------------------------------------------------
 * Runtime types and error codes (values as in the CUDA runtime)
 * ---------------------------------------------------------------------------------------------- */
enum cudaError {
    cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3, cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17, cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorNoDevice = 100, cudaErrorInvalidDevice = 101, cudaErrorInvalidDeviceFunction = 98, cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600, cudaErrorIllegalAddress = 700, cudaErrorLaunchOutOfResources = 701,
    cudaErrorLaunchFailure = 719, cudaErrorNotSupported = 801, cudaErrorUnknown = 999
};
typedef enum cudaError cudaError_t;
enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
                      cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
                         cudaFuncAttributePreferredSharedMemoryCarveout = 9 };
enum cudaFuncCache { cudaFuncCachePreferNone = 0, cudaFuncCachePreferShared = 1, cudaFuncCachePreferL1 = 2,
                     cudaFuncCachePreferEqual = 3 };
enum cudaDeviceAttr { cudaDevAttrMaxThreadsPerBlock = 1, cudaDevAttrMaxSharedMemoryPerBlock = 8,
                      cudaDevAttrWarpSize = 10, cudaDevAttrMultiProcessorCount = 16,
                      cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76,
                      cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00

/* A stream is a queue of work (see "Streams and events" in the top comment): seq numbers its
   operations, done counts those run, vc is its vector clock (vc[s]: the last operation of stream s
   that this stream's next operation is ordered after). An event remembers the operation a record
   put on a stream (st, seq) and that stream's clock when it ran. */
struct mf_emu_stream {
    unsigned magic; unsigned flags; int id;
    unsigned long long enq, done;
    std::deque<std::pair<unsigned long long, std::function<void(mf_emu_stream *)>>> q;
    std::vector<unsigned long long> vc;
};
struct mf_emu_event {
    unsigned magic; int recorded; double t_ms;
    mf_emu_stream *st; unsigned long long seq;
    std::shared_ptr<std::vector<unsigned long long>> vc;
};
typedef struct mf_emu_stream *cudaStream_t;
typedef struct mf_emu_event *cudaEvent_t;

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin, sharedMemPerMultiprocessor;
    size_t totalConstMem, memPitch, textureAlignment;
    int regsPerBlock, regsPerMultiprocessor, warpSize, maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3];
    int clockRate, major, minor, multiProcessorCount, maxThreadsPerMultiProcessor, maxBlocksPerMultiProcessor;
    int l2CacheSize, memoryBusWidth, memoryClockRate, integrated, canMapHostMemory, concurrentKernels;
    int ECCEnabled, pciBusID, pciDeviceID, pciDomainID, unifiedAddressing, managedMemory;
    int cooperativeLaunch, asyncEngineCount, computeMode;
};

/* ------------------------------------------------------------------------------------------------
 * Emulator state
 * ---------------------------------------------------------------------------------------------- */
enum { MF_EMU_ORDER_IN = 0, MF_EMU_ORDER_REVERSED = 1, MF_EMU_ORDER_SHUFFLED = 2 };

namespace mf_emu {

enum { ST_NEW, ST_READY, ST_RUN, ST_BAR, ST_WARP, ST_DONE, ST_DEAD };
enum { W_SHFL, W_UP, W_DOWN, W_XOR, W_BALLOT, W_ANY, W_ALL, W_SYNC,
       W_RADD, W_RMIN_S, W_RMAX_S, W_RMIN_U, W_RMAX_U, W_RAND, W_ROR, W_RXOR };
static const char *const warp_op_names[] = {
    "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync", "__ballot_sync",
    "__any_sync", "__all_sync", "__syncwarp", "__reduce_add_sync", "__reduce_min_sync",
    "__reduce_max_sync", "__reduce_min_sync", "__reduce_max_sync", "__reduce_and_sync",
    "__reduce_or_sync", "__reduce_xor_sync"};
enum { BAR_PLAIN, BAR_COUNT, BAR_AND, BAR_OR };
static const char *const bar_names[] = {"__syncthreads()", "__syncthreads_count()", "__syncthreads_and()",
                                        "__syncthreads_or()"};

struct Stack { char *lo; size_t size; };

struct Fiber {
    void *sp;
#ifdef MF_EMU_USE_UCONTEXT
    ucontext_t uc;
#endif
    void *fake;
    Stack stack;
    int has_stack, state, lin;
    uint3 tid;
    const char *bar_file; int bar_line, bar_kind, bar_pred;
    int wop, warg, wwidth; unsigned wmask;
    uint64_t wval, wres;
};
struct Warp { unsigned alive, waiting; };
/* one operation of the log: enqueued (run 0) or run (run 1) on stream `stream` as its seq-th */
struct LogEntry { int stream, run; unsigned long long seq; const char *name; };
/* a watched range of device memory, in 4-byte words: a copy of its contents and, per word, the
   operation that wrote it last (stream, seq, name) */
struct Watch {
    const char *p; size_t words;
    std::vector<uint32_t> shadow;
    std::vector<int> wst;
    std::vector<unsigned long long> wseq;
    std::vector<const char *> wname;
};

struct State {
    std::mutex launch_mu, alloc_mu;
    int order = MF_EMU_ORDER_SHUFFLED, verbose = 1, poison = 1, tf32 = 1;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    size_t stack_size =
#ifdef MF_EMU_ASAN
        256 * 1024;
#else
        64 * 1024;
#endif
    cudaError_t last_error = cudaSuccess, pending_error = cudaSuccess;
    char msg[2048] = {0};
    std::map<uintptr_t, size_t> allocs;
    size_t alloc_bytes = 0;
    size_t mem_limit = 0;  /* mf_emu_set_memory_limit: the device's size (0 = 80 GiB, never reached) */
    std::map<const void *, int> smem_limit;
    std::map<const void *, std::pair<int, int>> kres; /* kernel -> (registers, static smem); -1: unknown */
    std::map<uintptr_t, std::string> syms;            /* the program's functions (kernel_name) */
    bool syms_read = false;
    int device = 0, device_count = 1; /* the current device; how many there are (all share the memory) */
    unsigned long long launches = 0;
    unsigned long long syncs = 0, host_copies = 0; /* host waits: synchronisations, host <-> device copies */
    /* the launch being run */
    const char *kname = "";
    void (*inv)(void *) = nullptr;
    void *ctx = nullptr;
    unsigned char *dyn = nullptr;
    std::vector<Fiber> fib;
    std::vector<Warp> warps;
    std::vector<int> queue, perm; /* queue: a ring of a power-of-two size >= the block's threads */
    size_t qhead = 0, qtail = 0, qmask = 0;
    int nthreads = 0, n_done = 0, n_bar = 0, n_wwait = 0, failed = 0;
    int bar_count = 0;
    Fiber *cur = nullptr, *yielded = nullptr; /* running; the last to give control back */
    std::vector<Stack> pool;
    void *sched_sp = nullptr;
#ifdef MF_EMU_USE_UCONTEXT
    ucontext_t sched_uc;
#endif
    void *sched_fake = nullptr;
    const void *main_bottom = nullptr;
    size_t main_size = 0;
    /* streams: the queues, the operation log, the watched ranges (see "Streams and events") */
    std::recursive_mutex q_mu;
    mf_emu_stream null_stream{0x5EA3u, 0, 0, 0, 0, {}, {}};
    std::vector<mf_emu_stream *> streams;
    int next_stream = 1;
    int logging = 0;
    std::vector<LogEntry> log;
    std::vector<Watch> watches;
    unsigned long long races = 0;
    char race_msg[512] = {0};
};

template <int D> struct G {
    static State s;
    static thread_local bool in_kernel; /* a kernel runs on this thread (not the CPU code of another) */
    static uint3 tid, bid;
    static dim3 bdim, gdim;
};
template <int D> State G<D>::s;
template <int D> thread_local bool G<D>::in_kernel = false;
template <int D> uint3 G<D>::tid = {0, 0, 0};
template <int D> uint3 G<D>::bid = {0, 0, 0};
template <int D> dim3 G<D>::bdim = dim3(1, 1, 1);
template <int D> dim3 G<D>::gdim = dim3(1, 1, 1);
static inline State &S() { return G<0>::s; }

static inline uint64_t rnd() { /* splitmix64 */
    uint64_t z = (S().rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline void vmessage(const char *fmt, va_list ap) {
    State &s = S();
    vsnprintf(s.msg, sizeof s.msg, fmt, ap);
    if (s.verbose) { fprintf(stderr, "cuda_emu: %s\n", s.msg); fflush(stderr); }
}
static inline cudaError_t set_error(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline cudaError_t set_error(cudaError_t e, const char *fmt, ...) {
    va_list ap; va_start(ap, fmt); vmessage(fmt, ap); va_end(ap);
    S().last_error = e;
    return e;
}

/* ---- streams: queues of work, run when something waits on them (see "Streams and events") ---- */
static inline mf_emu_stream *stream_of(cudaStream_t st) { return st ? st : &S().null_stream; }
static inline unsigned long long clock_of(const std::vector<unsigned long long> &vc, int id) {
    return (size_t)id < vc.size() ? vc[(size_t)id] : 0;
}
static inline void clock_merge(std::vector<unsigned long long> &to, const std::vector<unsigned long long> &from) {
    if (to.size() < from.size()) to.resize(from.size(), 0);
    for (size_t i = 0; i < from.size(); i++) to[i] = std::max(to[i], from[i]);
}
/* is the write (stream ws, its op wseq) ordered before the next operation of stream st? */
static inline bool ordered_before(const mf_emu_stream *st, int ws, unsigned long long wseq) {
    return ws == st->id || clock_of(st->vc, ws) >= wseq;
}
static inline void log_op(const mf_emu_stream *st, int run, unsigned long long seq, const char *name) {
    State &s = S();
    if (s.logging) s.log.push_back(LogEntry{st->id, run, seq, name});
}
static inline void race(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void race(const char *fmt, ...) {
    State &s = S();
    if (s.races++ == 0) {
        va_list ap; va_start(ap, fmt); vsnprintf(s.race_msg, sizeof s.race_msg, fmt, ap); va_end(ap);
        if (s.verbose) { fprintf(stderr, "cuda_emu: race: %s\n", s.race_msg); fflush(stderr); }
    }
}
/* after operation (st, seq, name) ran: which watched words did it change? A change of a word whose
   last writer is not ordered before this operation is a race (two unordered writes) */
static inline void watch_diff(const mf_emu_stream *st, unsigned long long seq, const char *name) {
    State &s = S();
    for (size_t w = 0; w < s.watches.size(); w++) {
        Watch &x = s.watches[w];
        if (!memcmp(x.shadow.data(), x.p, x.words * 4)) continue;
        for (size_t i = 0; i < x.words; i++) {
            uint32_t v; memcpy(&v, x.p + 4 * i, 4);
            if (v == x.shadow[i]) continue;
            if (x.wname[i] && !ordered_before(st, x.wst[i], x.wseq[i]))
                race("'%s' (stream %d, op %llu) wrote word %zu of watched range %zu after '%s' (stream %d, op %llu) "
                     "without waiting on it", name, st->id, seq, i, w, x.wname[i], x.wst[i], x.wseq[i]);
            x.shadow[i] = v; x.wst[i] = st->id; x.wseq[i] = seq; x.wname[i] = name;
        }
    }
}
static inline void run_front(mf_emu_stream *st) {
    std::pair<unsigned long long, std::function<void(mf_emu_stream *)>> op = std::move(st->q.front());
    st->q.pop_front();
    if (st->vc.size() <= (size_t)st->id) st->vc.resize((size_t)st->id + 1, 0);
    st->vc[(size_t)st->id] = op.first;
    op.second(st);
    st->done = op.first;
}
/* run stream st's queued work up to its operation `upto` (and, through its waits, what that needs) */
static inline void flush(mf_emu_stream *st, unsigned long long upto) {
    State &s = S();
    std::lock_guard<std::recursive_mutex> lk(s.q_mu);
    while (st->done < upto && !st->q.empty()) run_front(st);
}
static inline void flush_all() {
    State &s = S();
    std::lock_guard<std::recursive_mutex> lk(s.q_mu);
    flush(&s.null_stream, s.null_stream.enq);
    for (size_t i = 0; i < s.streams.size(); i++) flush(s.streams[i], s.streams[i]->enq);
}
/* put `fn` at the end of stream st's queue under `name` (a string literal or otherwise lasting);
   returns its seq. Every operation's effect on watched memory is attributed to it. */
static inline unsigned long long enqueue(cudaStream_t stream, const char *name, std::function<void(mf_emu_stream *)> fn) {
    State &s = S();
    std::lock_guard<std::recursive_mutex> lk(s.q_mu);
    mf_emu_stream *st = stream_of(stream);
    unsigned long long seq = ++st->enq;
    log_op(st, 0, seq, name);
    st->q.push_back(std::make_pair(seq, [fn, name, seq](mf_emu_stream *self) {
        log_op(self, 1, seq, name);
        fn(self);
        if (!S().watches.empty()) watch_diff(self, seq, name);
    }));
    return seq;
}
/* the operations a host thread waits for: everything before them on their stream runs first (the
   legacy default stream, 0, also waits for every other stream), then they run at once */
static inline void run_now(cudaStream_t stream, const char *name, std::function<void(mf_emu_stream *)> fn) {
    State &s = S();
    std::lock_guard<std::recursive_mutex> lk(s.q_mu);
    mf_emu_stream *st = stream_of(stream);
    if (st == &s.null_stream) flush_all();
    flush(st, enqueue(stream, name, fn));
}
/* for a stand-in library's operation running on stream st (tests/nccl_emu.h): may it read the
   n bytes at p? A watched word written last by an operation not ordered before it is a race. */
static inline void check_read(const mf_emu_stream *st, const void *p, size_t n, const char *name) {
    State &s = S();
    uintptr_t a = (uintptr_t)p;
    for (size_t w = 0; w < s.watches.size(); w++) {
        Watch &x = s.watches[w];
        uintptr_t lo = (uintptr_t)x.p, hi = lo + 4 * x.words;
        size_t i = a > lo ? (a - lo) / 4 : 0;
        for (; lo + 4 * i < hi && lo + 4 * i < a + n; i++)
            if (x.wname[i] && !ordered_before(st, x.wst[i], x.wseq[i])) {
                race("'%s' (stream %d, op %llu) read word %zu of watched range %zu, written by '%s' (stream %d, op %llu) "
                     "without waiting on it", name, st->id, clock_of(st->vc, st->id), i, w, x.wname[i], x.wst[i], x.wseq[i]);
                return;
            }
    }
}

} /* namespace mf_emu */

/* ------------------------------------------------------------------------------------------------
 * Configuration API
 * ---------------------------------------------------------------------------------------------- */
/* thread/block order; seed only matters for MF_EMU_ORDER_SHUFFLED (restarts its random sequence) */
static inline void mf_emu_set_order(int order, unsigned seed) {
    mf_emu::State &s = mf_emu::S();
    s.order = (order >= 0 && order <= 2) ? order : MF_EMU_ORDER_IN;
    s.rng = 0x9E3779B97F4A7C15ull ^ ((uint64_t)seed * 0xD1B54A32D192ED03ull);
}
static inline int mf_emu_get_order(void) { return mf_emu::S().order; }
/* message of the last error the emulator reported ("" if none yet) */
static inline const char *mf_emu_last_message(void) { return mf_emu::S().msg; }
static inline void mf_emu_clear_message(void) { mf_emu::S().msg[0] = 0; }
/* print every error to stderr (default 1) */
static inline void mf_emu_set_verbose(int on) { mf_emu::S().verbose = on; }
/* 0xFF-fill cudaMalloc memory, dynamic and static shared memory (default 1) */
static inline void mf_emu_set_poison(int on) { mf_emu::S().poison = on; }
/* a device of `bytes` (0 = 80 GiB, the default): a cudaMalloc that would take the live allocations
   past it fails with cudaErrorMemoryAllocation, and cudaMemGetInfo reports it as the total (how a
   test sees the backend's out-of-memory message) */
static inline void mf_emu_set_memory_limit(size_t bytes) { mf_emu::S().mem_limit = bytes; }
/* round gemm inputs to TF32 in CUBLAS_TF32_TENSOR_OP_MATH mode (default 1) */
static inline void mf_emu_set_tf32(int on) { mf_emu::S().tf32 = on; }
/* stack size of each emulated CUDA thread, for kernels with big local arrays */
static inline void mf_emu_set_stack_size(size_t bytes) { mf_emu::S().stack_size = bytes < 16384 ? 16384 : bytes; }
/* number of cudaMalloc allocations not yet freed, and their bytes */
static inline size_t mf_emu_live_allocations(size_t *bytes) {
    mf_emu::State &s = mf_emu::S();
    std::lock_guard<std::mutex> lk(s.alloc_mu);
    if (bytes) *bytes = s.alloc_bytes;
    return s.allocs.size();
}
/* pretend the machine has n devices (default 1): cudaSetDevice takes 0 .. n-1, cudaGetDevice tells
   which; they are one device underneath (a process per device, as MPI ranks, sees its own) */
static inline void mf_emu_set_device_count(int n) { mf_emu::S().device_count = n < 1 ? 1 : n; }
static inline unsigned long long mf_emu_launch_count(void) { return mf_emu::S().launches; }
/* host synchronisations (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize) and
   host <-> device copies so far: a test checks that a sequence of launches never waits on the host
   (subtract the launches checked by a synchronisation, as metaformer_cuda.cuh does under MF_CUDA_EMU) */
static inline unsigned long long mf_emu_sync_count(void) { return mf_emu::S().syncs; }
static inline unsigned long long mf_emu_host_copy_count(void) { return mf_emu::S().host_copies; }
namespace mf_emu { static inline bool in_device(const void *p, size_t n); }
/* streams (see "Streams and events"): a stream's number in the log (0: the legacy default stream) */
static inline int mf_emu_stream_id(cudaStream_t st) { return mf_emu::stream_of(st)->id; }
/* record every operation enqueued and run (1), or stop (0); each start empties the log */
static inline void mf_emu_log(int on) {
    mf_emu::State &s = mf_emu::S();
    std::lock_guard<std::recursive_mutex> lk(s.q_mu);
    if (on) s.log.clear();
    s.logging = on;
}
static inline size_t mf_emu_log_size(void) { return mf_emu::S().log.size(); }
/* entry i of the log: its stream, whether it is the run (1) or the enqueue (0), and its name */
static inline const char *mf_emu_log_at(size_t i, int *stream, int *run) {
    mf_emu::State &s = mf_emu::S();
    if (i >= s.log.size()) return nullptr;
    if (stream) *stream = s.log[i].stream;
    if (run) *run = s.log[i].run;
    return s.log[i].name;
}
/* watch the bytes [p, p + n) of device memory (n a multiple of 4) for races between streams; the
   check costs a comparison of every watched byte after every operation */
static inline int mf_emu_watch(const void *p, size_t n) {
    mf_emu::State &s = mf_emu::S();
    std::lock_guard<std::recursive_mutex> lk(s.q_mu);
    if (!p || n % 4 || !mf_emu::in_device(p, n)) return -1;
    mf_emu::flush_all();
    mf_emu::Watch w;
    w.p = (const char *)p; w.words = n / 4;
    w.shadow.resize(w.words); memcpy(w.shadow.data(), p, n);
    w.wst.assign(w.words, 0); w.wseq.assign(w.words, 0); w.wname.assign(w.words, nullptr);
    s.watches.push_back(w);
    return 0;
}
static inline void mf_emu_unwatch_all(void) {
    mf_emu::State &s = mf_emu::S();
    std::lock_guard<std::recursive_mutex> lk(s.q_mu);
    s.watches.clear();
}
/* races found so far, and the first one's description ("" when none) */
static inline unsigned long long mf_emu_race_count(void) { return mf_emu::S().races; }
static inline const char *mf_emu_race_message(void) { return mf_emu::S().race_msg; }

/* ------------------------------------------------------------------------------------------------
 * Fibers
 * ---------------------------------------------------------------------------------------------- */
#ifndef MF_EMU_USE_UCONTEXT
extern "C" void mf_emu__switch(void **save_sp, void *to_sp);
__asm__(".text\n"
        ".weak mf_emu__switch\n"
        ".hidden mf_emu__switch\n"
        ".type mf_emu__switch,@function\n"
        ".p2align 4\n"
        "mf_emu__switch:\n"
        "  .byte 0xf3, 0x0f, 0x1e, 0xfa\n" /* endbr64 */
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size mf_emu__switch, .-mf_emu__switch\n");
#endif

/* static __shared__ storage lives in this section; the linker provides its bounds */
extern "C" char __start_mf_emu_shared[] __attribute__((weak));
extern "C" char __stop_mf_emu_shared[] __attribute__((weak));

namespace mf_emu {

static inline Stack pool_get() {
    State &s = S();
    while (!s.pool.empty()) {
        Stack st = s.pool.back();
        s.pool.pop_back();
        if (st.size == s.stack_size) return st;
        munmap(st.lo - 4096, st.size + 4096);
    }
    Stack st;
    st.size = s.stack_size;
    char *base = (char *)mmap(nullptr, st.size + 4096, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (base == MAP_FAILED) { fprintf(stderr, "cuda_emu: cannot map a fiber stack\n"); abort(); }
    mprotect(base, 4096, PROT_NONE); /* guard page: a stack overflow faults instead of corrupting */
    st.lo = base + 4096;
    return st;
}

static inline bool fiber_exit();
static inline void to_scheduler(Fiber *f, bool final);

static inline void fiber_entry() {
    State &s = S();
#ifdef MF_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &s.main_bottom, &s.main_size);
#endif
    do s.inv(s.ctx);
    while (fiber_exit());
    to_scheduler(s.cur, true);
    abort(); /* unreachable: a finished fiber is never resumed */
}

/* scheduler side: run fiber f until it yields or ends */
static inline void resume(Fiber &f) {
    State &s = S();
    s.cur = &f;
    G<0>::tid = f.tid;
    if (f.state == ST_NEW) {
        f.stack = pool_get();
        f.has_stack = 1;
        f.fake = nullptr;
#ifdef MF_EMU_USE_UCONTEXT
        getcontext(&f.uc);
        f.uc.uc_stack.ss_sp = f.stack.lo;
        f.uc.uc_stack.ss_size = f.stack.size;
        f.uc.uc_link = nullptr;
        makecontext(&f.uc, (void (*)())fiber_entry, 0);
#else
        void **sp = (void **)(((uintptr_t)(f.stack.lo + f.stack.size)) & ~(uintptr_t)15);
        *--sp = nullptr;                    /* fake return address of fiber_entry */
        *--sp = (void *)&fiber_entry;       /* where mf_emu__switch returns to */
        for (int i = 0; i < 6; i++) *--sp = nullptr; /* rbp rbx r12 r13 r14 r15 */
        f.sp = sp;
#endif
    }
    f.state = ST_RUN;
#ifdef MF_EMU_ASAN
    __sanitizer_start_switch_fiber(&s.sched_fake, f.stack.lo, f.stack.size);
#endif
#ifdef MF_EMU_USE_UCONTEXT
    swapcontext(&s.sched_uc, &f.uc);
#else
    mf_emu__switch(&s.sched_sp, f.sp);
#endif
#ifdef MF_EMU_ASAN
    __sanitizer_finish_switch_fiber(s.sched_fake, nullptr, nullptr);
#endif
    s.cur = nullptr;
    Fiber &y = *s.yielded; /* f, or a thread that took over its stack (fiber_exit) */
    if (y.state == ST_DONE) { s.pool.push_back(y.stack); y.has_stack = 0; }
}

/* fiber side: give control back to the scheduler; `final` = never resumed again */
static inline void to_scheduler(Fiber *f, bool final) {
    State &s = S();
    s.yielded = f;
#ifdef MF_EMU_ASAN
    __sanitizer_start_switch_fiber(final ? nullptr : &f->fake, s.main_bottom, s.main_size);
#else
    (void)final;
#endif
#ifdef MF_EMU_USE_UCONTEXT
    swapcontext(&f->uc, &s.sched_uc);
#else
    mf_emu__switch(&f->sp, s.sched_sp);
#endif
#ifdef MF_EMU_ASAN
    __sanitizer_finish_switch_fiber(f->fake, nullptr, nullptr);
#endif
}

static inline void push_ready(int t) {
    State &s = S();
    s.queue[s.qtail++ & s.qmask] = t;
}

static inline void describe_tid(char *buf, size_t n, uint3 t) { snprintf(buf, n, "(%u,%u,%u)", t.x, t.y, t.z); }

/* a fault detected inside a running kernel thread: record it, abandon the launch */
static inline void kernel_fault(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void kernel_fault(const char *fmt, ...) {
    State &s = S();
    char what[1400];
    va_list ap; va_start(ap, fmt); vsnprintf(what, sizeof what, fmt, ap); va_end(ap);
    uint3 b = G<0>::bid;
    set_error(cudaErrorLaunchFailure, "kernel '%s' block (%u,%u,%u): %s", s.kname, b.x, b.y, b.z, what);
    s.pending_error = cudaErrorLaunchFailure;
    s.failed = 1;
    Fiber *f = s.cur;
    if (f) { f->state = ST_DEAD; to_scheduler(f, true); }
}

/* Try to complete the warp rendezvous that lane `rep` waits in; `self` is the running fiber
 * (a participant that must not be queued, or an exiting lane). Returns true if completed. */
static inline bool warp_try_resolve(Fiber *rep, Fiber *self) {
    State &s = S();
    int base = rep->lin & ~31;
    Warp &w = s.warps[rep->lin >> 5];
    unsigned need = rep->wmask & w.alive;
    if ((w.waiting & need) != need) return false;
    Fiber *fb = &s.fib[base];
    for (int l = 0; l < 32; l++) {
        if (!(need >> l & 1)) continue;
        Fiber &g = fb[l];
        if (g.wop != rep->wop || g.wmask != rep->wmask) {
            char a[48], b[48];
            describe_tid(a, sizeof a, rep->tid); describe_tid(b, sizeof b, g.tid);
            kernel_fault("mismatched warp operation: thread %s is in %s(mask 0x%08x) while thread %s of the same "
                         "warp is in %s(mask 0x%08x)", a, warp_op_names[rep->wop], rep->wmask, b,
                         warp_op_names[g.wop], g.wmask);
            return false;
        }
    }
    uint64_t r = 0;
    unsigned bal = 0;
    int op = rep->wop;
    if (op >= W_BALLOT) {
        for (int l = 0; l < 32; l++) if ((need >> l & 1) && fb[l].wval) bal |= 1u << l;
        bool first = true;
        for (int l = 0; l < 32; l++) {
            if (!(need >> l & 1)) continue;
            uint32_t v = (uint32_t)fb[l].wval, a = (uint32_t)r;
            switch (op) {
            case W_RADD: a += v; break;
            case W_RMIN_S: a = first || (int32_t)v < (int32_t)a ? v : a; break;
            case W_RMAX_S: a = first || (int32_t)v > (int32_t)a ? v : a; break;
            case W_RMIN_U: a = first || v < a ? v : a; break;
            case W_RMAX_U: a = first || v > a ? v : a; break;
            case W_RAND: a = first ? v : (a & v); break;
            case W_ROR: a |= v; break;
            case W_RXOR: a ^= v; break;
            default: break;
            }
            r = a;
            first = false;
        }
        if (op == W_BALLOT) r = bal;
        else if (op == W_ANY) r = bal != 0;
        else if (op == W_ALL) r = bal == need;
        else if (op == W_SYNC) r = 0;
    }
    for (int l = 0; l < 32; l++) {
        if (!(need >> l & 1)) continue;
        Fiber &g = fb[l];
        if (op < W_BALLOT) {
            int wd = g.wwidth, seg = l & ~(wd - 1), src;
            switch (op) {
            case W_SHFL: src = seg + (g.warg & (wd - 1)); break;
            case W_UP: src = l - g.warg; if (src < seg || src >= seg + wd) src = l; break;
            case W_DOWN: src = l + g.warg; if (src < seg || src >= seg + wd) src = l; break;
            default: src = (int)((unsigned)l ^ (unsigned)g.warg); if (src < 0 || src >= seg + wd) src = l; break;
            }
            g.wres = (src >= 0 && src < 32 && (need >> src & 1)) ? fb[src].wval : ~(uint64_t)0;
        } else {
            g.wres = r;
        }
    }
    w.waiting &= ~need;
    /* the other participants resume in the configured order */
    int lanes[32], n = 0;
    for (int l = 0; l < 32; l++) if ((need >> l & 1) && &fb[l] != self && fb[l].state == ST_WARP) lanes[n++] = l;
    if (s.order == MF_EMU_ORDER_REVERSED) std::reverse(lanes, lanes + n);
    else if (s.order == MF_EMU_ORDER_SHUFFLED)
        for (int i = n - 1; i > 0; i--) std::swap(lanes[i], lanes[rnd() % (uint64_t)(i + 1)]);
    for (int i = 0; i < n; i++) { fb[lanes[i]].state = ST_READY; s.n_wwait--; push_ready(base + lanes[i]); }
    return true;
}

static inline uint64_t warp_op(int op, unsigned mask, uint64_t val, int arg, int width) {
    State &s = S();
    Fiber *f = s.cur;
    if (!f) return op == W_BALLOT ? (val ? 1u : 0u) : val; /* called on the host: a warp of one */
    int lane = f->lin & 31;
    if (!(mask >> lane & 1)) {
        char a[48]; describe_tid(a, sizeof a, f->tid);
        kernel_fault("thread %s (lane %d) calls %s with mask 0x%08x that does not name its own lane", a, lane,
                     warp_op_names[op], mask);
    }
    if (op < W_BALLOT && (width < 1 || width > 32 || (width & (width - 1)))) {
        char a[48]; describe_tid(a, sizeof a, f->tid);
        kernel_fault("thread %s calls %s with width %d (must be a power of two <= 32)", a, warp_op_names[op], width);
    }
    f->wop = op; f->wmask = mask; f->wval = val; f->warg = arg; f->wwidth = width;
    s.warps[f->lin >> 5].waiting |= 1u << lane;
    if (warp_try_resolve(f, f)) return f->wres;
    f->state = ST_WARP;
    s.n_wwait++;
    to_scheduler(f, false);
    return f->wres;
}

/* a thread's function returned. true: the thread next in the run queue has not started and now
 * runs on this stack (the caller calls the kernel again); the scheduler would have started it next
 * anyway, so the order is the same, without the two stack switches per thread that kernels with no
 * barrier or warp operation would otherwise pay for every thread. false: give control back. */
static inline bool fiber_exit() {
    State &s = S();
    Fiber *f = s.cur;
    f->state = ST_DONE;
    s.n_done++;
    Warp &w = s.warps[f->lin >> 5];
    w.alive &= ~(1u << (f->lin & 31));
    for (bool again = true; again && w.waiting && !s.failed;) {
        again = false;
        for (int l = 0; l < 32; l++)
            if ((w.waiting >> l & 1) && warp_try_resolve(&s.fib[(f->lin & ~31) + l], f)) { again = true; break; }
    }
    if (s.failed || s.qhead == s.qtail) return false;
    Fiber &g = s.fib[(size_t)s.queue[s.qhead & s.qmask]];
    if (g.state != ST_NEW) return false;
    s.qhead++;
    g.stack = f->stack; g.has_stack = 1; f->has_stack = 0;
    g.fake = nullptr;
    g.state = ST_RUN;
    s.cur = &g;
    G<0>::tid = g.tid;
    return true;
}

static inline int syncthreads_impl(const char *file, int line, int kind, int pred) {
    State &s = S();
    Fiber *f = s.cur;
    if (!f) return kind == BAR_COUNT ? (pred != 0) : (pred != 0);
    f->bar_file = file; f->bar_line = line; f->bar_kind = kind; f->bar_pred = pred != 0;
    f->state = ST_BAR;
    s.n_bar++;
    to_scheduler(f, false);
    switch (kind) {
    case BAR_COUNT: return s.bar_count;
    case BAR_AND: return s.bar_count == s.nthreads;
    case BAR_OR: return s.bar_count > 0;
    default: return 0;
    }
}

static inline void make_order(int n) {
    State &s = S();
    s.perm.resize((size_t)n);
    for (int i = 0; i < n; i++) s.perm[(size_t)i] = s.order == MF_EMU_ORDER_REVERSED ? n - 1 - i : i;
    if (s.order == MF_EMU_ORDER_SHUFFLED)
        for (int i = n - 1; i > 0; i--) std::swap(s.perm[(size_t)i], s.perm[(size_t)(rnd() % (uint64_t)(i + 1))]);
}

static inline bool same_site(const Fiber &a, const Fiber &b) {
    return a.bar_line == b.bar_line && a.bar_kind == b.bar_kind &&
           (a.bar_file == b.bar_file || strcmp(a.bar_file, b.bar_file) == 0);
}

/* after the run queue drained: release a barrier, or diagnose why the block is stuck */
static inline bool block_barrier_step() {
    State &s = S();
    int n = s.nthreads;
    char a[48], b[48];
    if (s.n_wwait) {
        for (int t = 0; t < n; t++) {
            Fiber &f = s.fib[(size_t)t];
            if (f.state != ST_WARP) continue;
            unsigned need = f.wmask & s.warps[(size_t)(t >> 5)].alive & ~s.warps[(size_t)(t >> 5)].waiting;
            int l = __builtin_ctz(need);
            Fiber &g = s.fib[(size_t)((t & ~31) + l)];
            describe_tid(a, sizeof a, f.tid); describe_tid(b, sizeof b, g.tid);
            char where[400];
            if (g.state == ST_BAR) snprintf(where, sizeof where, "waits at %s at %s:%d", bar_names[g.bar_kind], g.bar_file, g.bar_line);
            else snprintf(where, sizeof where, "is in a different warp rendezvous (%s mask 0x%08x)", warp_op_names[g.wop], g.wmask);
            kernel_fault("warp deadlock: thread %s waits in %s(mask 0x%08x) but thread %s (lane %d) of that mask %s",
                         a, warp_op_names[f.wop], f.wmask, b, l, where);
            return false;
        }
    }
    int first = -1;
    for (int t = 0; t < n; t++) if (s.fib[(size_t)t].state == ST_BAR) { first = t; break; }
    if (first < 0) return false;
    Fiber &f0 = s.fib[(size_t)first];
    describe_tid(a, sizeof a, f0.tid);
    for (int t = 0; t < n; t++) {
        Fiber &g = s.fib[(size_t)t];
        if (g.state == ST_DONE) {
            describe_tid(b, sizeof b, g.tid);
            kernel_fault("divergent %s: thread %s exited while thread %s waits at %s:%d", bar_names[f0.bar_kind], b, a,
                         f0.bar_file, f0.bar_line);
            return false;
        }
        if (!same_site(g, f0)) {
            describe_tid(b, sizeof b, g.tid);
            kernel_fault("divergent __syncthreads: thread %s waits at %s at %s:%d but thread %s waits at %s at %s:%d", a,
                         bar_names[f0.bar_kind], f0.bar_file, f0.bar_line, b, bar_names[g.bar_kind], g.bar_file,
                         g.bar_line);
            return false;
        }
    }
    int cnt = 0;
    for (int t = 0; t < n; t++) cnt += s.fib[(size_t)t].bar_pred;
    s.bar_count = cnt;
    s.n_bar = 0;
    make_order(n);
    for (int i = 0; i < n; i++) { s.fib[(size_t)s.perm[(size_t)i]].state = ST_READY; push_ready(s.perm[(size_t)i]); }
    return true;
}

static inline void run_block() {
    State &s = S();
    int n = s.nthreads;
    for (int t = 0; t < n; t++) { s.fib[(size_t)t].state = ST_NEW; s.fib[(size_t)t].has_stack = 0; }
    for (size_t w = 0; w < s.warps.size(); w++) {
        int lanes = n - (int)w * 32;
        s.warps[w].alive = lanes >= 32 ? 0xffffffffu : ((1u << lanes) - 1u);
        s.warps[w].waiting = 0;
    }
    s.n_done = s.n_bar = s.n_wwait = 0;
    s.qhead = s.qtail = 0;
    make_order(n);
    for (int i = 0; i < n; i++) push_ready(s.perm[(size_t)i]);
    for (;;) {
        while (s.qhead != s.qtail && !s.failed) {
            int t = s.queue[s.qhead++ & s.qmask];
            resume(s.fib[(size_t)t]);
        }
        if (s.failed || s.n_done == n) break;
        if (!block_barrier_step()) break;
    }
    if (s.failed) { /* abandon the suspended fibers; their stacks go back to the pool */
        for (int t = 0; t < n; t++) {
            Fiber &f = s.fib[(size_t)t];
            if (!f.has_stack) continue;
#ifdef MF_EMU_ASAN
            ASAN_UNPOISON_MEMORY_REGION(f.stack.lo, f.stack.size);
#endif
            s.pool.push_back(f.stack);
            f.has_stack = 0;
        }
    }
}

/* A kernel's registers and static __shared__ bytes are nvcc's (tests/cuda_kernel_resources.h, from
   ptxas -v for sm_90), found by the kernel's demangled name: the host compiler and nvcc mangle alike
   (Itanium ABI), so the symbol of the function pointer, read from the program's own ELF symbol table,
   names the entry. A kernel of the library (mf__k_*) without an entry fails its launch (the table is
   stale: regenerate it); other kernels (tests') count 0 static bytes and no registers unless a test
   declares them (mf_emu_set_kernel_resources). */
static inline void read_symbols() {
    State &s = S();
    s.syms_read = true;
    uintptr_t bias = 0;
    dl_iterate_phdr([](struct dl_phdr_info *info, size_t, void *b) -> int { /* the first object: the program */
        *(uintptr_t *)b = (uintptr_t)info->dlpi_addr;
        return 1;
    }, &bias);
    FILE *f = fopen("/proc/self/exe", "rb");
    if (!f) return;
    std::vector<unsigned char> img;
    unsigned char buf[1 << 16];
    for (size_t r; (r = fread(buf, 1, sizeof buf, f)) > 0;) img.insert(img.end(), buf, buf + r);
    fclose(f);
    if (img.size() < sizeof(Elf64_Ehdr) || memcmp(img.data(), ELFMAG, SELFMAG) != 0 || img[EI_CLASS] != ELFCLASS64) return;
    Elf64_Ehdr eh; memcpy(&eh, img.data(), sizeof eh);
    if (eh.e_shoff + (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr) > img.size()) return;
    std::vector<Elf64_Shdr> sh(eh.e_shnum);
    memcpy(sh.data(), img.data() + eh.e_shoff, eh.e_shnum * sizeof(Elf64_Shdr));
    for (const Elf64_Shdr &t : sh) {
        if (t.sh_type != SHT_SYMTAB || t.sh_link >= eh.e_shnum || t.sh_offset + t.sh_size > img.size()) continue;
        const Elf64_Shdr &str = sh[t.sh_link];
        if (str.sh_offset + str.sh_size > img.size()) continue;
        for (uint64_t o = 0; o + sizeof(Elf64_Sym) <= t.sh_size; o += sizeof(Elf64_Sym)) {
            Elf64_Sym y; memcpy(&y, img.data() + t.sh_offset + o, sizeof y);
            if (ELF64_ST_TYPE(y.st_info) != STT_FUNC || !y.st_value || y.st_name >= str.sh_size) continue;
            const char *nm = (const char *)img.data() + str.sh_offset + y.st_name;
            if (strstr(nm, "mf__k_")) s.syms[(uintptr_t)y.st_value + bias] = nm;
        }
    }
}
/* the demangled name of kernel k ("void mf__k_fa_fwd<0>(mf__fa_args)"), "" if unknown */
static inline std::string kernel_name(const void *k) {
    State &s = S();
    if (!s.syms_read) read_symbols();
    std::map<uintptr_t, std::string>::iterator it = s.syms.find((uintptr_t)k);
    if (it == s.syms.end()) return "";
    int st = 0;
    char *d = abi::__cxa_demangle(it->second.c_str(), nullptr, nullptr, &st);
    std::string r = st == 0 && d ? d : it->second;
    free(d);
    return r;
}
/* (registers, static smem bytes) of kernel k; (-1, -1): a library kernel the table lacks; (0, 0):
   another kernel without declared resources */
static inline std::pair<int, int> kernel_resources(const void *k) {
    State &s = S();
    std::map<const void *, std::pair<int, int>>::iterator it = s.kres.find(k);
    if (it != s.kres.end()) return it->second;
    std::pair<int, int> r(0, 0);
#ifdef MF_EMU_HAVE_KERNEL_RESOURCES
    std::string n = kernel_name(k);
    if (!n.empty()) {
        r = std::make_pair(-1, -1);
        for (size_t i = 0; i < sizeof mf_emu_kernel_resources / sizeof mf_emu_kernel_resources[0]; i++)
            if (n == mf_emu_kernel_resources[i].name) {
                r = std::make_pair(mf_emu_kernel_resources[i].regs, mf_emu_kernel_resources[i].smem);
                break;
            }
    }
#endif
    s.kres[k] = r;
    return r;
}
/* the most dynamic shared memory a launch of k may ask: 48 KiB less its static bytes unless raised
   (cudaFuncSetAttribute), as the runtime's maxDynamicSharedSizeBytes */
static inline int dyn_limit(const void *k) {
    State &s = S();
    std::map<const void *, int>::iterator it = s.smem_limit.find(k);
    int st = std::max(0, kernel_resources(k).second);
    return it == s.smem_limit.end() ? std::max(0, 48 * 1024 - st) : it->second;
}

/* a launch's configuration is checked when it is made, as the runtime does (cudaGetLastError after
   the launch reports it); false: not launched */
static inline bool launch_ok(const char *name, const void *k, dim3 grid, dim3 block, size_t smem) {
    State &s = S();
    unsigned long long nth = (unsigned long long)block.x * block.y * block.z;
    if (block.x == 0 || block.y == 0 || block.z == 0 || block.x > 1024 || block.y > 1024 || block.z > 64 || nth > 1024) {
        set_error(cudaErrorInvalidConfiguration,
                  "launch of '%s': invalid block (%u,%u,%u): each dim >= 1, x,y <= 1024, z <= 64, product <= 1024",
                  name, block.x, block.y, block.z);
        return false;
    }
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
        set_error(cudaErrorInvalidConfiguration,
                  "launch of '%s': invalid grid (%u,%u,%u): each dim >= 1, x <= 2^31-1, y,z <= 65535", name, grid.x,
                  grid.y, grid.z);
        return false;
    }
    if (s.cur) {
        set_error(cudaErrorNotSupported, "launch of '%s' from inside kernel '%s': dynamic parallelism is not emulated",
                  name, s.kname);
        return false;
    }
    std::lock_guard<std::mutex> lk(s.launch_mu);
    std::pair<int, int> res = kernel_resources(k);
    if (res.first < 0) {
        set_error(cudaErrorInvalidDeviceFunction,
                  "launch of '%s' (%s): no entry in tests/cuda_kernel_resources.h (its registers and static shared "
                  "memory): regenerate it with bash tests/cuda_kernel_resources.sh", name, kernel_name(k).c_str());
        return false;
    }
    int lim = dyn_limit(k);
    if (smem > (size_t)lim) {
        set_error(cudaErrorInvalidValue,
                  "launch of '%s': %zu bytes of dynamic shared memory exceed the kernel's limit of %d (48 KiB less its "
                  "%d static bytes unless raised with cudaFuncSetAttribute(k, "
                  "cudaFuncAttributeMaxDynamicSharedMemorySize, n), n + static <= 232448)",
                  name, smem, lim, res.second);
        return false;
    }
    if ((unsigned long long)res.first * nth > 65536ull) {
        set_error(cudaErrorLaunchOutOfResources,
                  "launch of '%s': %d registers x %llu threads per block exceed the 65536 registers of a block", name,
                  res.first, nth);
        return false;
    }
    return true;
}

/* run a checked launch (from its stream's queue) */
static inline void launch_run(const char *name, dim3 grid, dim3 block, size_t smem, void (*inv)(void *), void *ctx) {
    State &s = S();
    unsigned long long nth = (unsigned long long)block.x * block.y * block.z;
    std::lock_guard<std::mutex> lk(s.launch_mu);
    s.launches++;
    s.kname = name; s.failed = 0;
    s.nthreads = (int)nth;
    if (s.fib.size() < nth) s.fib.resize((size_t)nth);
    s.warps.resize((size_t)((nth + 31) / 32));
    size_t qsize = 1;
    while (qsize < nth) qsize *= 2;
    s.queue.resize(qsize);
    s.qmask = qsize - 1;
    for (unsigned t = 0; t < nth; t++) {
        Fiber &f = s.fib[t];
        f.lin = (int)t;
        f.tid.x = t % block.x; f.tid.y = (t / block.x) % block.y; f.tid.z = t / (block.x * block.y);
    }
    { /* 128-byte aligned like the hardware's (WMMA pointers must be 32-byte aligned) */
        void *d = nullptr;
        s.dyn = posix_memalign(&d, 128, smem ? smem : 1) == 0 ? (unsigned char *)d : nullptr;
    }
    if (!s.dyn) { set_error(cudaErrorMemoryAllocation, "launch of '%s': cannot allocate shared memory", name); return; }
    s.inv = inv; s.ctx = ctx;
    G<0>::in_kernel = true; /* on this OS thread (the kernel's fibers run on it): the device math reads it */
    G<0>::bdim = block;
    G<0>::gdim = grid;
    unsigned long long nb = (unsigned long long)grid.x * grid.y * grid.z;
    std::vector<unsigned long long> border;
    if (s.order == MF_EMU_ORDER_SHUFFLED) {
        border.resize((size_t)nb);
        for (unsigned long long i = 0; i < nb; i++) border[(size_t)i] = i;
        for (unsigned long long i = nb - 1; i > 0; i--) std::swap(border[(size_t)i], border[(size_t)(rnd() % (i + 1))]);
    }
    char *sh_lo = __start_mf_emu_shared, *sh_hi = __stop_mf_emu_shared;
    for (unsigned long long i = 0; i < nb && !s.failed; i++) {
        unsigned long long b = s.order == MF_EMU_ORDER_IN ? i : s.order == MF_EMU_ORDER_REVERSED ? nb - 1 - i : border[(size_t)i];
        G<0>::bid.x = (unsigned)(b % grid.x);
        G<0>::bid.y = (unsigned)((b / grid.x) % grid.y);
        G<0>::bid.z = (unsigned)(b / ((unsigned long long)grid.x * grid.y));
        memset(s.dyn, s.poison ? 0xFF : 0, smem ? smem : 1);
        if (s.poison && sh_lo && sh_hi > sh_lo) memset(sh_lo, 0xFF, (size_t)(sh_hi - sh_lo));
        run_block();
    }
    free(s.dyn);
    s.dyn = nullptr;
    s.inv = nullptr; s.ctx = nullptr;
    G<0>::in_kernel = false;
    G<0>::tid = make_uint3(0, 0, 0);
    G<0>::bid = make_uint3(0, 0, 0);
}

/* kernel arguments are converted to the parameter types once, like a real launch does */
template <class P, class A>
static inline typename std::enable_if<std::is_pointer<P>::value && std::is_integral<typename std::decay<A>::type>::value, P>::type
conv_arg(A &&a) { return a == 0 ? (P)nullptr : (P)(uintptr_t)a; } /* literal 0 / NULL for a pointer */
template <class P, class A>
static inline typename std::enable_if<!(std::is_pointer<P>::value && std::is_integral<typename std::decay<A>::type>::value), P>::type
conv_arg(A &&a) { P r = std::forward<A>(a); return r; } /* implicit conversions only, as in a real launch */

template <class... P> struct Pack {
    void (*k)(P...);
    std::tuple<typename std::decay<P>::type...> args;
};
template <class PackT, class... P, size_t... I>
static inline void call_pack(PackT *pk, std::index_sequence<I...>) { pk->k(std::get<I>(pk->args)...); }
template <class... P> static void invoke(void *p) {
    Pack<P...> *pk = (Pack<P...> *)p;
    call_pack<Pack<P...>, P...>(pk, std::index_sequence_for<P...>());
}

/* a launch on the legacy default stream (0) runs at once; on a created stream it is queued and runs
   when something waits for that stream (see "Streams and events") */
template <class... P, class... A>
static inline void launch(const char *name, void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          A &&...a) {
    static_assert(sizeof...(P) == sizeof...(A), "MF_LAUNCH: wrong number of kernel arguments");
    if (!launch_ok(name, (const void *)k, grid, block, smem)) return;
    std::shared_ptr<Pack<P...>> pk(new Pack<P...>{
        k, std::tuple<typename std::decay<P>::type...>(conv_arg<typename std::decay<P>::type>(std::forward<A>(a))...)});
    std::function<void(mf_emu_stream *)> run = [name, grid, block, smem, pk](mf_emu_stream *) {
        launch_run(name, grid, block, smem, &invoke<P...>, pk.get());
    };
    if (stream_of(stream) == &S().null_stream) run_now(stream, name, run);
    else enqueue(stream, name, run);
}

static inline unsigned char *dyn_smem() { return S().dyn; }

} /* namespace mf_emu */

/* ------------------------------------------------------------------------------------------------
 * Kernel language
 * ---------------------------------------------------------------------------------------------- */
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static __attribute__((section("mf_emu_shared")))
#define __grid_constant__

#define threadIdx (static_cast<const uint3 &>(::mf_emu::G<0>::tid))
#define blockIdx (static_cast<const uint3 &>(::mf_emu::G<0>::bid))
#define blockDim (static_cast<const dim3 &>(::mf_emu::G<0>::bdim))
#define gridDim (static_cast<const dim3 &>(::mf_emu::G<0>::gdim))
static constexpr int warpSize = 32; /* a variable, as in CUDA (prop.warpSize keeps working) */

#undef MF_DYN_SMEM
#undef MF_LAUNCH
#define MF_DYN_SMEM(T, name) T *name = reinterpret_cast<T *>(::mf_emu::dyn_smem())
/* MF_LAUNCH(kernel, grid, block, smem_bytes, stream, args...) */
#define MF_LAUNCH(kernel, ...) ::mf_emu::launch(#kernel, kernel, __VA_ARGS__)

#define __syncthreads() ::mf_emu::syncthreads_impl(__FILE__, __LINE__, ::mf_emu::BAR_PLAIN, 0)
#define __syncthreads_count(p) ::mf_emu::syncthreads_impl(__FILE__, __LINE__, ::mf_emu::BAR_COUNT, (p))
#define __syncthreads_and(p) ::mf_emu::syncthreads_impl(__FILE__, __LINE__, ::mf_emu::BAR_AND, (p))
#define __syncthreads_or(p) ::mf_emu::syncthreads_impl(__FILE__, __LINE__, ::mf_emu::BAR_OR, (p))

static inline void __syncwarp(unsigned mask = 0xffffffffu) { mf_emu::warp_op(mf_emu::W_SYNC, mask, 0, 0, 32); }
static inline void __threadfence(void) {}
static inline void __threadfence_block(void) {}
static inline void __threadfence_system(void) {}
static inline void __nanosleep(unsigned ns) { (void)ns; }
static inline void __trap(void) { mf_emu::kernel_fault("__trap() called"); }
static inline long long clock64(void) {
    return (long long)std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch()).count();
}
static inline unsigned __activemask(void) {
    mf_emu::State &s = mf_emu::S();
    return s.cur ? s.warps[(size_t)(s.cur->lin >> 5)].alive : 1u;
}

namespace mf_emu {
template <class T> static inline uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "warp shuffle of a type over 8 bytes");
    uint64_t b = 0; memcpy(&b, &v, sizeof(T)); return b;
}
template <class T> static inline T from_bits(uint64_t b) { T v; memcpy(&v, &b, sizeof(T)); return v; }
}
template <class T> static inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = 32) {
    return mf_emu::from_bits<T>(mf_emu::warp_op(mf_emu::W_SHFL, mask, mf_emu::to_bits(var), srcLane, width));
}
template <class T> static inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
    return mf_emu::from_bits<T>(mf_emu::warp_op(mf_emu::W_UP, mask, mf_emu::to_bits(var), (int)delta, width));
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
    return mf_emu::from_bits<T>(mf_emu::warp_op(mf_emu::W_DOWN, mask, mf_emu::to_bits(var), (int)delta, width));
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = 32) {
    return mf_emu::from_bits<T>(mf_emu::warp_op(mf_emu::W_XOR, mask, mf_emu::to_bits(var), laneMask, width));
}
static inline unsigned __ballot_sync(unsigned mask, int pred) {
    return (unsigned)mf_emu::warp_op(mf_emu::W_BALLOT, mask, pred != 0, 0, 32);
}
static inline int __any_sync(unsigned mask, int pred) { return (int)mf_emu::warp_op(mf_emu::W_ANY, mask, pred != 0, 0, 32); }
static inline int __all_sync(unsigned mask, int pred) { return (int)mf_emu::warp_op(mf_emu::W_ALL, mask, pred != 0, 0, 32); }
static inline unsigned __reduce_add_sync(unsigned mask, unsigned v) { return (unsigned)mf_emu::warp_op(mf_emu::W_RADD, mask, v, 0, 32); }
static inline int __reduce_add_sync(unsigned mask, int v) { return (int)(unsigned)mf_emu::warp_op(mf_emu::W_RADD, mask, (unsigned)v, 0, 32); }
static inline unsigned __reduce_min_sync(unsigned mask, unsigned v) { return (unsigned)mf_emu::warp_op(mf_emu::W_RMIN_U, mask, v, 0, 32); }
static inline int __reduce_min_sync(unsigned mask, int v) { return (int)(unsigned)mf_emu::warp_op(mf_emu::W_RMIN_S, mask, (unsigned)v, 0, 32); }
static inline unsigned __reduce_max_sync(unsigned mask, unsigned v) { return (unsigned)mf_emu::warp_op(mf_emu::W_RMAX_U, mask, v, 0, 32); }
static inline int __reduce_max_sync(unsigned mask, int v) { return (int)(unsigned)mf_emu::warp_op(mf_emu::W_RMAX_S, mask, (unsigned)v, 0, 32); }
static inline unsigned __reduce_and_sync(unsigned mask, unsigned v) { return (unsigned)mf_emu::warp_op(mf_emu::W_RAND, mask, v, 0, 32); }
static inline unsigned __reduce_or_sync(unsigned mask, unsigned v) { return (unsigned)mf_emu::warp_op(mf_emu::W_ROR, mask, v, 0, 32); }
static inline unsigned __reduce_xor_sync(unsigned mask, unsigned v) { return (unsigned)mf_emu::warp_op(mf_emu::W_RXOR, mask, v, 0, 32); }

/* atomics: threads only switch at barriers, so a plain read-modify-write is atomic */
#define MF_EMU_ATOMIC_ADD(T) \
    static inline T atomicAdd(T *a, T v) { T o = *a; *a = (T)(o + v); return o; } \
    static inline T atomicAdd_block(T *a, T v) { return atomicAdd(a, v); } \
    static inline T atomicAdd_system(T *a, T v) { return atomicAdd(a, v); } \
    static inline T atomicExch(T *a, T v) { T o = *a; *a = v; return o; }
MF_EMU_ATOMIC_ADD(int) MF_EMU_ATOMIC_ADD(unsigned) MF_EMU_ATOMIC_ADD(unsigned long long)
MF_EMU_ATOMIC_ADD(float) MF_EMU_ATOMIC_ADD(double)
#undef MF_EMU_ATOMIC_ADD
#define MF_EMU_ATOMIC_INT(T) \
    static inline T atomicSub(T *a, T v) { T o = *a; *a = (T)(o - v); return o; } \
    static inline T atomicMax(T *a, T v) { T o = *a; *a = o > v ? o : v; return o; } \
    static inline T atomicMin(T *a, T v) { T o = *a; *a = o < v ? o : v; return o; } \
    static inline T atomicAnd(T *a, T v) { T o = *a; *a = o & v; return o; } \
    static inline T atomicOr(T *a, T v) { T o = *a; *a = o | v; return o; } \
    static inline T atomicXor(T *a, T v) { T o = *a; *a = o ^ v; return o; } \
    static inline T atomicCAS(T *a, T cmp, T v) { T o = *a; if (o == cmp) *a = v; return o; }
MF_EMU_ATOMIC_INT(int) MF_EMU_ATOMIC_INT(unsigned) MF_EMU_ATOMIC_INT(unsigned long long) MF_EMU_ATOMIC_INT(long long)
#undef MF_EMU_ATOMIC_INT
static inline unsigned short atomicCAS(unsigned short *a, unsigned short cmp, unsigned short v) {
    unsigned short o = *a; if (o == cmp) *a = v; return o;
}
static inline unsigned atomicInc(unsigned *a, unsigned v) { unsigned o = *a; *a = o >= v ? 0 : o + 1; return o; }
static inline unsigned atomicDec(unsigned *a, unsigned v) { unsigned o = *a; *a = (o == 0 || o > v) ? v : o - 1; return o; }

/* loads/stores with cache hints */
template <class T> static inline T __ldg(const T *p) { return *p; }
template <class T> static inline T __ldcg(const T *p) { return *p; }
template <class T> static inline T __ldca(const T *p) { return *p; }
template <class T> static inline T __ldcs(const T *p) { return *p; }
template <class T> static inline T __ldlu(const T *p) { return *p; }
template <class T> static inline T __ldcv(const T *p) { return *p; }
template <class T> static inline void __stwb(T *p, T v) { *p = v; }
template <class T> static inline void __stcg(T *p, T v) { *p = v; }
template <class T> static inline void __stcs(T *p, T v) { *p = v; }
template <class T> static inline void __stwt(T *p, T v) { *p = v; }

/* math functions. In device code nvcc's expf, logf, ... (and the __expf-style intrinsics) are not
   correctly rounded: the CUDA Programming Guide bounds their error (Appendix "Mathematical
   Functions", "Intrinsic Functions"). A kernel here gets a result moved, deterministically (a hash
   of the function and the input bits, like hardware: same input, same output), to somewhere within
   that bound of the exact value (computed in double), so a test that passes here does not rely on
   bits the GPU does not owe. Functions CUDA rounds correctly (sqrtf, __fsqrt_rn, __frcp_rn,
   __frsqrt_rn, __fdiv_rn, fmaf, __fadd_rn, ... and x / y with the default -prec-div=true) stay
   exact, and so does every call made outside a kernel (the CPU code of the same program).
   glibc declares some of these names itself, hence the object-like macros after every system header. */
namespace mf_emu {
static inline bool in_kernel() { return G<0>::in_kernel; }
static inline uint32_t hash_bits(uint32_t fn, uint32_t a, uint32_t b) {
    uint64_t z = ((uint64_t)fn << 32 ^ a) * 0x9E3779B97F4A7C15ull ^ (uint64_t)b * 0xD1B54A32D192ED03ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (uint32_t)(z ^ (z >> 31));
}
static inline uint32_t f2u(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static inline float u2f(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
/* the float `steps` ulps from the finite, nonzero r, toward +inf for steps > 0 (stays of r's sign) */
static inline float ulp_step(float r, int steps) {
    uint32_t u = f2u(r), mag = u & 0x7fffffffu;
    long long m = (long long)mag + (u >> 31 ? -steps : steps);
    if (m < 1) m = 1;
    if (m > 0x7f7fffffll) m = 0x7f7fffffll;
    return u2f((u & 0x80000000u) | (uint32_t)m);
}
/* a float within `ulps` ulps (of the exact value's binade) of the exact e, picked by the hash h. An
   exact value that is a float (expf(0) = 1, logf(1) = 0) stays: the GPU's approximations are exact
   there too, and kernels rely on it (a row's maximum scores exp(0) = 1). */
static inline float near_ulps(double e, int ulps, uint32_t h) {
    float r0 = (float)e;
    if (!std::isfinite(r0) || (double)r0 == e || fabsf(r0) < 1.17549435e-38f || ulps <= 0) return r0;
    float up = ulp_step(fabsf(r0), 1), dn = ulp_step(fabsf(r0), -1);
    double ulp = std::min((double)up - fabsf(r0), (double)fabsf(r0) - dn); /* the smaller: never past the bound */
    int k = (int)(h % (uint32_t)(2 * ulps + 1)) - ulps;
    for (; k != 0; k += k > 0 ? -1 : 1) {
        float r = ulp_step(r0, k);
        if (fabs((double)r - e) <= (double)ulps * ulp) return r;
    }
    return r0;
}
/* a float within the absolute error a of the exact e */
static inline float near_abs(double e, double a, uint32_t h) {
    if ((double)(float)e == e) return (float)e;
    float r = (float)(e + a * 0.9 * ((double)(h & 0xffffu) / 32767.5 - 1.0));
    return fabs((double)r - e) <= a ? r : (float)e;
}
enum { FN_EXP = 1, FN_EXP2, FN_EXP10, FN_EXPM1, FN_LOG, FN_LOG2, FN_LOG10, FN_LOG1P, FN_SIN, FN_COS, FN_TAN, FN_TANH,
       FN_POW, FN_ERF, FN_RSQRT, FN_IEXP, FN_IEXP10, FN_ILOG, FN_ILOG2, FN_ILOG10, FN_ISIN, FN_ICOS, FN_ITAN, FN_ITANH,
       FN_IPOW, FN_FDIV };
/* the standard functions in device code, with their documented maximum ulp error (sm_90) */
#define MF_EMU_DEV1(name, fn, libf, exact, ulps)                                                                       \
    static inline float name(float x) {                                                                                \
        float r = libf(x);                                                                                             \
        return in_kernel() ? near_ulps(exact, ulps, hash_bits(fn, f2u(x), 0)) : r;                                     \
    }
MF_EMU_DEV1(d_expf, FN_EXP, ::expf, ::exp((double)x), 2)
MF_EMU_DEV1(d_exp2f, FN_EXP2, ::exp2f, ::exp2((double)x), 2)
MF_EMU_DEV1(d_exp10f, FN_EXP10, ::exp10f, ::exp10((double)x), 2)
MF_EMU_DEV1(d_expm1f, FN_EXPM1, ::expm1f, ::expm1((double)x), 1)
MF_EMU_DEV1(d_logf, FN_LOG, ::logf, ::log((double)x), 1)
MF_EMU_DEV1(d_log2f, FN_LOG2, ::log2f, ::log2((double)x), 1)
MF_EMU_DEV1(d_log10f, FN_LOG10, ::log10f, ::log10((double)x), 2)
MF_EMU_DEV1(d_log1pf, FN_LOG1P, ::log1pf, ::log1p((double)x), 1)
MF_EMU_DEV1(d_sinf, FN_SIN, ::sinf, ::sin((double)x), 2)
MF_EMU_DEV1(d_cosf, FN_COS, ::cosf, ::cos((double)x), 2)
MF_EMU_DEV1(d_tanf, FN_TAN, ::tanf, ::tan((double)x), 4)
MF_EMU_DEV1(d_tanhf, FN_TANH, ::tanhf, ::tanh((double)x), 2)
MF_EMU_DEV1(d_erff, FN_ERF, ::erff, ::erf((double)x), 2)
#undef MF_EMU_DEV1
static inline float d_powf(float x, float y) {
    float r = ::powf(x, y);
    return in_kernel() ? near_ulps(::pow((double)x, (double)y), 4, hash_bits(FN_POW, f2u(x), f2u(y))) : r;
}
static inline float d_rsqrtf(float x) { /* 2 ulp */
    float r = 1.0f / ::sqrtf(x);
    return in_kernel() ? near_ulps(1.0 / ::sqrt((double)x), 2, hash_bits(FN_RSQRT, f2u(x), 0)) : r;
}
/* the intrinsics (also what -use_fast_math makes of the functions above) */
static inline float i_expf(float x) { /* 2 + floor(|1.173 x|) ulp */
    return near_ulps(::exp((double)x), 2 + (int)std::min(1e6, floor(fabs(1.173 * (double)x))), hash_bits(FN_IEXP, f2u(x), 0));
}
static inline float i_exp10f(float x) { /* 2 + floor(|2.97 x|) ulp */
    return near_ulps(::exp10((double)x), 2 + (int)std::min(1e6, floor(fabs(2.97 * (double)x))), hash_bits(FN_IEXP10, f2u(x), 0));
}
/* on [0.5, 2] an absolute error (2^-21.41 for __logf, 2^-22 for __log2f, 2^-24 for __log10f), else ulps */
static inline float i_logf(float x) {
    uint32_t h = hash_bits(FN_ILOG, f2u(x), 0);
    return x >= 0.5f && x <= 2.0f ? near_abs(::log((double)x), 3.6007e-7, h) : near_ulps(::log((double)x), 3, h);
}
static inline float i_log2f(float x) {
    uint32_t h = hash_bits(FN_ILOG2, f2u(x), 0);
    return x >= 0.5f && x <= 2.0f ? near_abs(::log2((double)x), 2.3842e-7, h) : near_ulps(::log2((double)x), 2, h);
}
static inline float i_log10f(float x) {
    uint32_t h = hash_bits(FN_ILOG10, f2u(x), 0);
    return x >= 0.5f && x <= 2.0f ? near_abs(::log10((double)x), 5.9604e-8, h) : near_ulps(::log10((double)x), 3, h);
}
/* on [-pi, pi] an absolute error of 2^-21.41 (__sinf) / 2^-21.19 (__cosf); larger outside, where
   the range reduction is poor: the exact value is kept there, a kindness noted in the header comment */
static inline float i_sinf(float x) {
    return fabsf(x) <= 3.14159265f ? near_abs(::sin((double)x), 3.6007e-7, hash_bits(FN_ISIN, f2u(x), 0)) : ::sinf(x);
}
static inline float i_cosf(float x) {
    return fabsf(x) <= 3.14159265f ? near_abs(::cos((double)x), 4.1942e-7, hash_bits(FN_ICOS, f2u(x), 0)) : ::cosf(x);
}
static inline float i_tanf(float x) { return i_sinf(x) * (1.0f / i_cosf(x)); } /* __tanf: __sinf(x) * (1 / __cosf(x)) */
static inline float i_tanhf(float x) { /* max relative error 2^-11 (sm_75+) */
    double e = ::tanh((double)x);
    float r = (float)(e * (1.0 + 0.9 * 4.8828125e-4 * ((double)(hash_bits(FN_ITANH, f2u(x), 0) & 0xffffu) / 32767.5 - 1.0)));
    return fabs((double)r - e) <= 4.8828125e-4 * fabs(e) ? r : (float)e;
}
static inline float i_powf(float x, float y) { /* exp2(y * __log2f(x)), the exp2 approximate to 2 ulp */
    return near_ulps(::exp2((double)(y * i_log2f(x))), 2, hash_bits(FN_IPOW, f2u(x), f2u(y)));
}
static inline void i_sincosf(float x, float *s, float *c) { *s = i_sinf(x); *c = i_cosf(x); }
static inline float i_fdividef(float a, float b) { /* 2 ulp for 2^-126 <= |b| <= 2^126 */
    float b_abs = fabsf(b);
    if (!(b_abs >= 1.17549435e-38f && b_abs <= 8.50705917e37f)) return a / b;
    return near_ulps((double)a / (double)b, 2, hash_bits(FN_FDIV, f2u(a), f2u(b)));
}
}
#define expf mf_emu::d_expf
#define exp2f mf_emu::d_exp2f
#define exp10f mf_emu::d_exp10f
#define expm1f mf_emu::d_expm1f
#define logf mf_emu::d_logf
#define log2f mf_emu::d_log2f
#define log10f mf_emu::d_log10f
#define log1pf mf_emu::d_log1pf
#define sinf mf_emu::d_sinf
#define cosf mf_emu::d_cosf
#define tanf mf_emu::d_tanf
#define tanhf mf_emu::d_tanhf
#define erff mf_emu::d_erff
#define powf mf_emu::d_powf
#define __expf mf_emu::i_expf
#define __exp10f mf_emu::i_exp10f
#define __logf mf_emu::i_logf
#define __log2f mf_emu::i_log2f
#define __log10f mf_emu::i_log10f
#define __sinf mf_emu::i_sinf
#define __cosf mf_emu::i_cosf
#define __tanf mf_emu::i_tanf
#define __tanhf mf_emu::i_tanhf
#define __powf mf_emu::i_powf
#define __sincosf mf_emu::i_sincosf
static inline float __fdividef(float a, float b) { return mf_emu::i_fdividef(a, b); }
static inline float fdividef(float a, float b) { return a / b; }
static inline float rsqrtf(float x) { return mf_emu::d_rsqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __frsqrt_rn(float x) { return (float)(1.0 / sqrt((double)x)); } /* correctly rounded */
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
static inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; } /* NaN -> 0 */
static inline int __float_as_int(float x) { int r; memcpy(&r, &x, 4); return r; }
static inline float __int_as_float(int x) { float r; memcpy(&r, &x, 4); return r; }
static inline unsigned __float_as_uint(float x) { unsigned r; memcpy(&r, &x, 4); return r; }
static inline float __uint_as_float(unsigned x) { float r; memcpy(&r, &x, 4); return r; }
static inline long long __double_as_longlong(double x) { long long r; memcpy(&r, &x, 8); return r; }
static inline double __longlong_as_double(long long x) { double r; memcpy(&r, &x, 8); return r; }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline int __float2int_rd(float x) { return (int)floorf(x); }
static inline int __float2int_ru(float x) { return (int)ceilf(x); }
static inline float __int2float_rn(int x) { return (float)x; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
    x = ((x >> 8) & 0x00FF00FFu) | ((x & 0x00FF00FFu) << 8);
    return (x >> 16) | (x << 16);
}
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
static inline int __mul24(int a, int b) { return a * b; }
static inline unsigned __umul24(unsigned a, unsigned b) { return a * b; }
/* CUDA's device min/max: exact overloads, and a template for mixed types (common type, as CUDA) */
#define MF_EMU_MINMAX(T) \
    static inline T min(T a, T b) { return a < b ? a : b; } \
    static inline T max(T a, T b) { return a > b ? a : b; }
MF_EMU_MINMAX(int) MF_EMU_MINMAX(unsigned) MF_EMU_MINMAX(long) MF_EMU_MINMAX(unsigned long)
MF_EMU_MINMAX(long long) MF_EMU_MINMAX(unsigned long long)
#undef MF_EMU_MINMAX
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }
template <class A, class B> static inline typename std::common_type<A, B>::type min(A a, B b) {
    typedef typename std::common_type<A, B>::type C;
    return min((C)a, (C)b);
}
template <class A, class B> static inline typename std::common_type<A, B>::type max(A a, B b) {
    typedef typename std::common_type<A, B>::type C;
    return max((C)a, (C)b);
}

/* ------------------------------------------------------------------------------------------------
 * Runtime API
 * ---------------------------------------------------------------------------------------------- */
namespace mf_emu {
static inline double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
/* is [p, p+n) inside one cudaMalloc allocation? */
static inline bool in_device(const void *p, size_t n) {
    State &s = S();
    std::lock_guard<std::mutex> lk(s.alloc_mu);
    uintptr_t a = (uintptr_t)p;
    std::map<uintptr_t, size_t>::iterator it = s.allocs.upper_bound(a);
    if (it == s.allocs.begin()) return false;
    --it;
    return a >= it->first && a - it->first <= it->second && n <= it->second - (a - it->first);
}
static inline cudaError_t check_dev(const char *fn, const char *what, const void *p, size_t n) {
    if (in_device(p, n)) return cudaSuccess;
    return set_error(cudaErrorInvalidValue, "%s: %s range [%p, +%zu) is not inside one cudaMalloc allocation", fn, what, p, n);
}
static inline cudaError_t do_memcpy(const char *fn, void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    if (n == 0) return cudaSuccess;
    if (!dst || !src) return set_error(cudaErrorInvalidValue, "%s: null pointer", fn);
    cudaError_t e = cudaSuccess;
    switch (kind) {
    case cudaMemcpyHostToHost: case cudaMemcpyDefault: break;
    case cudaMemcpyHostToDevice: e = check_dev(fn, "destination", dst, n); break;
    case cudaMemcpyDeviceToHost: e = check_dev(fn, "source", src, n); break;
    case cudaMemcpyDeviceToDevice:
        e = check_dev(fn, "destination", dst, n);
        if (e == cudaSuccess) e = check_dev(fn, "source", src, n);
        break;
    default: return set_error(cudaErrorInvalidMemcpyDirection, "%s: invalid cudaMemcpyKind %d", fn, (int)kind);
    }
    if (e != cudaSuccess) return e;
    if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToHost) S().host_copies++;
    memmove(dst, src, n);
    return cudaSuccess;
}
static inline cudaError_t sync_result() {
    State &s = S();
    s.syncs++;
    cudaError_t e = s.pending_error;
    s.pending_error = cudaSuccess;
    return e;
}
} /* namespace mf_emu */

static inline cudaError_t cudaMalloc(void **p, size_t n) {
    mf_emu::State &s = mf_emu::S();
    if (!p) return mf_emu::set_error(cudaErrorInvalidValue, "cudaMalloc: null result pointer");
    *p = nullptr;
    if (n == 0) return cudaSuccess;
    void *m = nullptr;
    if (s.mem_limit) {
        std::lock_guard<std::mutex> lk(s.alloc_mu);
        if (n > s.mem_limit || s.alloc_bytes > s.mem_limit - n) {
            s.last_error = cudaErrorMemoryAllocation; /* as the driver: cudaGetLastError reports it once */
            return cudaErrorMemoryAllocation;
        }
    }
    if (posix_memalign(&m, 256, n) != 0 || !m)
        return mf_emu::set_error(cudaErrorMemoryAllocation, "cudaMalloc: out of memory (%zu bytes)", n);
    memset(m, s.poison ? 0xFF : 0, n);
    {
        std::lock_guard<std::mutex> lk(s.alloc_mu);
        s.allocs[(uintptr_t)m] = n;
        s.alloc_bytes += n;
    }
    *p = m;
    return cudaSuccess;
}
template <class T> static inline cudaError_t cudaMalloc(T **p, size_t n) { return cudaMalloc((void **)p, n); }
static inline cudaError_t cudaFree(void *p) {
    mf_emu::State &s = mf_emu::S();
    if (!p) return cudaSuccess;
    {
        std::lock_guard<std::mutex> lk(s.alloc_mu);
        std::map<uintptr_t, size_t>::iterator it = s.allocs.find((uintptr_t)p);
        if (it == s.allocs.end()) goto bad;
        s.alloc_bytes -= it->second;
        s.allocs.erase(it);
    }
    free(p);
    return cudaSuccess;
bad:
    return mf_emu::set_error(cudaErrorInvalidValue, "cudaFree(%p): not a live cudaMalloc pointer", p);
}
static inline cudaError_t cudaMallocHost(void **p, size_t n) {
    if (!p) return cudaErrorInvalidValue;
    *p = n ? malloc(n) : nullptr;
    return (n && !*p) ? mf_emu::set_error(cudaErrorMemoryAllocation, "cudaMallocHost: out of memory") : cudaSuccess;
}
template <class T> static inline cudaError_t cudaMallocHost(T **p, size_t n) { return cudaMallocHost((void **)p, n); }
static inline cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags) { (void)flags; return cudaMallocHost(p, n); }
static inline cudaError_t cudaFreeHost(void *p) { free(p); return cudaSuccess; }
/* copies and fills run at once, after the work queued before them on their stream (a copy from
   pageable host memory is synchronous on the real device too) */
static inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t st = 0) {
    cudaError_t e = cudaSuccess;
    mf_emu::run_now(st, "cudaMemcpyAsync", [&](mf_emu_stream *) { e = mf_emu::do_memcpy("cudaMemcpyAsync", dst, src, n, kind); });
    return e;
}
static inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    cudaError_t e = cudaSuccess;
    mf_emu::run_now(0, "cudaMemcpy", [&](mf_emu_stream *) { e = mf_emu::do_memcpy("cudaMemcpy", dst, src, n, kind); });
    return e;
}
static inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t st = 0) {
    if (n == 0) return cudaSuccess;
    cudaError_t e = mf_emu::check_dev("cudaMemset", "destination", p, n);
    if (e == cudaSuccess) mf_emu::run_now(st, "cudaMemset", [=](mf_emu_stream *) { memset(p, v, n); });
    return e;
}
static inline cudaError_t cudaMemset(void *p, int v, size_t n) { return cudaMemsetAsync(p, v, n, 0); }
template <class T>
static inline cudaError_t cudaMemcpyToSymbol(T &sym, const void *src, size_t n, size_t off = 0,
                                             cudaMemcpyKind kind = cudaMemcpyHostToDevice) {
    (void)kind;
    if (off + n > sizeof(T)) return mf_emu::set_error(cudaErrorInvalidValue, "cudaMemcpyToSymbol: out of range");
    memcpy((char *)&sym + off, src, n);
    return cudaSuccess;
}
template <class T>
static inline cudaError_t cudaMemcpyFromSymbol(void *dst, const T &sym, size_t n, size_t off = 0,
                                               cudaMemcpyKind kind = cudaMemcpyDeviceToHost) {
    (void)kind;
    if (off + n > sizeof(T)) return mf_emu::set_error(cudaErrorInvalidValue, "cudaMemcpyFromSymbol: out of range");
    memcpy(dst, (const char *)&sym + off, n);
    return cudaSuccess;
}
static inline cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
    size_t used = 0;
    mf_emu_live_allocations(&used);
    const size_t tot = mf_emu::S().mem_limit ? mf_emu::S().mem_limit : (size_t)80 << 30;
    if (free_b) *free_b = used < tot ? tot - used : 0;
    if (total) *total = tot;
    return cudaSuccess;
}

static inline cudaError_t cudaGetLastError(void) {
    mf_emu::State &s = mf_emu::S();
    cudaError_t e = s.last_error;
    s.last_error = cudaSuccess;
    s.pending_error = cudaSuccess;
    return e;
}
static inline cudaError_t cudaPeekAtLastError(void) { return mf_emu::S().last_error; }
static inline cudaError_t cudaDeviceSynchronize(void) { mf_emu::flush_all(); return mf_emu::sync_result(); }
static inline cudaError_t cudaDeviceReset(void) {
    mf_emu::State &s = mf_emu::S();
    std::lock_guard<std::mutex> lk(s.alloc_mu);
    for (std::map<uintptr_t, size_t>::iterator it = s.allocs.begin(); it != s.allocs.end(); ++it) free((void *)it->first);
    s.allocs.clear();
    s.alloc_bytes = 0;
    s.smem_limit.clear();
    s.last_error = s.pending_error = cudaSuccess;
    return cudaSuccess;
}
static inline const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
#define MF_EMU_E(x) case x: return #x;
    MF_EMU_E(cudaSuccess) MF_EMU_E(cudaErrorInvalidValue) MF_EMU_E(cudaErrorMemoryAllocation)
    MF_EMU_E(cudaErrorInitializationError) MF_EMU_E(cudaErrorInvalidConfiguration)
    MF_EMU_E(cudaErrorInvalidDevicePointer) MF_EMU_E(cudaErrorInvalidMemcpyDirection) MF_EMU_E(cudaErrorNoDevice)
    MF_EMU_E(cudaErrorInvalidDevice) MF_EMU_E(cudaErrorInvalidDeviceFunction) MF_EMU_E(cudaErrorInvalidResourceHandle) MF_EMU_E(cudaErrorNotReady)
    MF_EMU_E(cudaErrorIllegalAddress) MF_EMU_E(cudaErrorLaunchOutOfResources) MF_EMU_E(cudaErrorLaunchFailure)
    MF_EMU_E(cudaErrorNotSupported) MF_EMU_E(cudaErrorUnknown)
#undef MF_EMU_E
    }
    return "cudaErrorUnknown";
}
static inline const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unknown error";
    }
}

static inline cudaError_t cudaGetDeviceCount(int *n) { if (n) *n = mf_emu::S().device_count; return cudaSuccess; }
static inline cudaError_t cudaSetDevice(int d) {
    if (d < 0 || d >= mf_emu::S().device_count)
        return mf_emu::set_error(cudaErrorInvalidDevice, "cudaSetDevice(%d): the emulator has %d device(s)", d,
                                 mf_emu::S().device_count);
    mf_emu::S().device = d;
    return cudaSuccess;
}
static inline cudaError_t cudaGetDevice(int *d) { if (d) *d = mf_emu::S().device; return cudaSuccess; }
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
    if (!p) return cudaErrorInvalidValue;
    if (d < 0 || d >= mf_emu::S().device_count) return mf_emu::set_error(cudaErrorInvalidDevice, "cudaGetDeviceProperties(%d): %d device(s)", d, mf_emu::S().device_count);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cuda_emu");
    p->totalGlobalMem = (size_t)80 << 30;
    p->sharedMemPerBlock = 48 * 1024;
    p->sharedMemPerBlockOptin = 232448;
    p->sharedMemPerMultiprocessor = 233472;
    p->totalConstMem = 65536;
    p->regsPerBlock = p->regsPerMultiprocessor = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024; p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647; p->maxGridSize[1] = 65535; p->maxGridSize[2] = 65535;
    p->clockRate = 1980000;
    p->major = 9; p->minor = 0;
    p->multiProcessorCount = 132;
    p->maxThreadsPerMultiProcessor = 2048;
    p->maxBlocksPerMultiProcessor = 32;
    p->l2CacheSize = 50 * 1024 * 1024;
    p->memoryBusWidth = 5120;
    p->concurrentKernels = 1;
    p->unifiedAddressing = 1;
    p->managedMemory = 1;
    p->cooperativeLaunch = 1;
    p->asyncEngineCount = 3;
    return cudaSuccess;
}
static inline cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d) {
    cudaDeviceProp p;
    if (!v || cudaGetDeviceProperties(&p, d) != cudaSuccess) return cudaErrorInvalidValue;
    switch (a) {
    case cudaDevAttrMaxThreadsPerBlock: *v = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)p.sharedMemPerBlock; break;
    case cudaDevAttrWarpSize: *v = 32; break;
    case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)p.sharedMemPerBlockOptin; break;
    default: return mf_emu::set_error(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute %d not emulated", (int)a);
    }
    return cudaSuccess;
}

static inline cudaError_t cudaFuncSetAttribute(const void *k, cudaFuncAttribute attr, int value) {
    mf_emu::State &s = mf_emu::S();
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        std::lock_guard<std::mutex> lk(s.launch_mu);
        int st = std::max(0, mf_emu::kernel_resources(k).second);
        if (value < 0 || value + st > 232448)
            return mf_emu::set_error(cudaErrorInvalidValue,
                                     "cudaFuncSetAttribute: MaxDynamicSharedMemorySize %d + the kernel's %d static "
                                     "bytes is over the opt-in limit 232448", value, st);
        s.smem_limit[k] = value;
        return cudaSuccess;
    }
    if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
    return mf_emu::set_error(cudaErrorInvalidValue, "cudaFuncSetAttribute: attribute %d not emulated", (int)attr);
}
template <class... P> static inline cudaError_t cudaFuncSetAttribute(void (*k)(P...), cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute((const void *)k, attr, value);
}
/* cudaFuncGetAttributes: nvcc's registers and static shared memory (tests/cuda_kernel_resources.h) */
struct cudaFuncAttributes {
    size_t sharedSizeBytes, constSizeBytes, localSizeBytes;
    int maxThreadsPerBlock, numRegs, ptxVersion, binaryVersion, cacheModeCA, maxDynamicSharedSizeBytes,
        preferredShmemCarveout;
};
static inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, const void *k) {
    mf_emu::State &s = mf_emu::S();
    if (!a || !k) return mf_emu::set_error(cudaErrorInvalidValue, "cudaFuncGetAttributes: null argument");
    std::lock_guard<std::mutex> lk(s.launch_mu);
    std::pair<int, int> r = mf_emu::kernel_resources(k);
    if (r.first < 0)
        return mf_emu::set_error(cudaErrorInvalidDeviceFunction, "cudaFuncGetAttributes(%s): no entry in "
                                 "tests/cuda_kernel_resources.h: regenerate it with bash tests/cuda_kernel_resources.sh",
                                 mf_emu::kernel_name(k).c_str());
    memset(a, 0, sizeof *a);
    a->sharedSizeBytes = (size_t)r.second;
    a->numRegs = r.first;
    /* the most threads a block of it may have: 1024, fewer where its registers do not fit */
    a->maxThreadsPerBlock = r.first > 0 ? std::min(1024, 65536 / r.first / 32 * 32) : 1024;
    a->maxDynamicSharedSizeBytes = mf_emu::dyn_limit(k);
    a->ptxVersion = a->binaryVersion = 90;
    a->preferredShmemCarveout = -1;
    return cudaSuccess;
}
template <class... P> static inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, void (*k)(P...)) {
    return cudaFuncGetAttributes(a, (const void *)k);
}
/* an emulator test's own kernel: its registers per thread and static shared bytes, as ptxas would say */
template <class... P> static inline void mf_emu_set_kernel_resources(void (*k)(P...), int regs, int static_smem) {
    mf_emu::State &s = mf_emu::S();
    std::lock_guard<std::mutex> lk(s.launch_mu);
    s.kres[(const void *)k] = std::make_pair(regs, static_smem);
}
template <class... P> static inline cudaError_t cudaFuncSetCacheConfig(void (*k)(P...), cudaFuncCache c) { (void)k; (void)c; return cudaSuccess; }
template <class... P>
static inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, void (*k)(P...), int block, size_t smem) {
    (void)k;
    if (!n || block <= 0) return cudaErrorInvalidValue;
    int by_threads = 2048 / block, by_smem = smem ? (int)(233472 / smem) : 32;
    *n = std::min(32, std::min(by_threads, by_smem));
    return cudaSuccess;
}

static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned flags) {
    mf_emu::State &s = mf_emu::S();
    if (!st) return cudaErrorInvalidValue;
    std::lock_guard<std::recursive_mutex> lk(s.q_mu);
    *st = new mf_emu_stream{0x5EA3u, flags, s.next_stream++, 0, 0, {}, {}};
    s.streams.push_back(*st);
    return cudaSuccess;
}
static inline cudaError_t cudaStreamCreate(cudaStream_t *st) { return cudaStreamCreateWithFlags(st, cudaStreamDefault); }
static inline cudaError_t cudaStreamCreateWithPriority(cudaStream_t *st, unsigned flags, int prio) { (void)prio; return cudaStreamCreateWithFlags(st, flags); }
static inline cudaError_t cudaStreamDestroy(cudaStream_t st) {
    mf_emu::State &s = mf_emu::S();
    if (!st || st->magic != 0x5EA3u) return mf_emu::set_error(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: not a live stream");
    std::lock_guard<std::recursive_mutex> lk(s.q_mu);
    mf_emu::flush(st, st->enq); /* its work still completes, as on the device */
    s.streams.erase(std::find(s.streams.begin(), s.streams.end(), st));
    st->magic = 0;
    delete st;
    return cudaSuccess;
}
static inline cudaError_t cudaStreamSynchronize(cudaStream_t st) {
    mf_emu_stream *q = mf_emu::stream_of(st);
    if (q == &mf_emu::S().null_stream) mf_emu::flush_all();
    else mf_emu::flush(q, q->enq);
    return mf_emu::sync_result();
}
static inline cudaError_t cudaStreamQuery(cudaStream_t st) {
    mf_emu_stream *q = mf_emu::stream_of(st);
    return q->done == q->enq ? cudaSuccess : cudaErrorNotReady;
}
/* stream st's later work runs after the work the event's last record marked (nothing to wait for
   when it was never recorded); the vector clocks carry the order for the race checks */
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t ev, unsigned flags = 0) {
    (void)flags;
    if (!ev || ev->magic != 0xE7E7u) return mf_emu::set_error(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: not a live event");
    if (!ev->recorded) return cudaSuccess;
    mf_emu_stream *src = ev->st;
    unsigned long long seq = ev->seq;
    std::shared_ptr<std::vector<unsigned long long>> vc = ev->vc;
    mf_emu::enqueue(st, "cudaStreamWaitEvent", [src, seq, vc](mf_emu_stream *self) {
        mf_emu::flush(src, seq);
        mf_emu::clock_merge(self->vc, *vc);
    });
    return cudaSuccess;
}

static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags) {
    (void)flags;
    if (!ev) return cudaErrorInvalidValue;
    *ev = new mf_emu_event{0xE7E7u, 0, 0, nullptr, 0, nullptr};
    return cudaSuccess;
}
static inline cudaError_t cudaEventCreate(cudaEvent_t *ev) { return cudaEventCreateWithFlags(ev, cudaEventDefault); }
static inline cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t st = 0) {
    if (!ev || ev->magic != 0xE7E7u) return mf_emu::set_error(cudaErrorInvalidResourceHandle, "cudaEventRecord: not a live event");
    std::shared_ptr<std::vector<unsigned long long>> vc(new std::vector<unsigned long long>());
    ev->recorded = 1;
    ev->st = mf_emu::stream_of(st);
    ev->vc = vc;
    ev->seq = mf_emu::enqueue(st, "cudaEventRecord", [ev, vc](mf_emu_stream *self) {
        *vc = self->vc;
        ev->t_ms = mf_emu::now_ms(); /* cudaEventDestroy runs this first: ev is alive */
    });
    if (st == 0) mf_emu::flush_all();
    return cudaSuccess;
}
static inline cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
    if (ev && ev->magic == 0xE7E7u && ev->recorded) mf_emu::flush(ev->st, ev->seq);
    return mf_emu::sync_result();
}
static inline cudaError_t cudaEventQuery(cudaEvent_t ev) {
    if (!ev || ev->magic != 0xE7E7u) return cudaErrorInvalidResourceHandle;
    return !ev->recorded || ev->st->done >= ev->seq ? cudaSuccess : cudaErrorNotReady;
}
static inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    if (!ms || !a || !b || a->magic != 0xE7E7u || b->magic != 0xE7E7u) return cudaErrorInvalidResourceHandle;
    if (!a->recorded || !b->recorded) return mf_emu::set_error(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: event not recorded");
    *ms = (float)(b->t_ms - a->t_ms);
    return cudaSuccess;
}
static inline cudaError_t cudaEventDestroy(cudaEvent_t ev) {
    if (!ev || ev->magic != 0xE7E7u) return mf_emu::set_error(cudaErrorInvalidResourceHandle, "cudaEventDestroy: not a live event");
    if (ev->recorded) mf_emu::flush(ev->st, ev->seq);
    ev->magic = 0;
    delete ev;
    return cudaSuccess;
}

/* ------------------------------------------------------------------------------------------------
 * bfloat16 (the cuda_bf16.h names): 1 sign, 8 exponent, 7 mantissa bits, the upper half of a float.
 * Conversions from float round to nearest, ties to even (NaN stays a quiet NaN), as the hardware's
 * cvt.rn.bf16.f32; to float they are exact. Only explicit conversions exist here (no arithmetic
 * operators, no implicit float <-> bf16), so a kernel that compiles here says what it rounds.
 * ---------------------------------------------------------------------------------------------- */
struct __attribute__((aligned(2))) __nv_bfloat16 { unsigned short __x; };
struct __attribute__((aligned(4))) __nv_bfloat162 { __nv_bfloat16 x, y; };
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;
namespace mf_emu {
static inline unsigned short bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x0040u); /* NaN: quiet, sign kept */
    u += 0x7fffu + ((u >> 16) & 1u);                                                   /* ties to even */
    return (unsigned short)(u >> 16);
}
static inline float bf16_value(unsigned short b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline float round_bf16(float f) { return bf16_value(bf16_bits(f)); }
} /* namespace mf_emu */
static inline __nv_bfloat16 __float2bfloat16(float f) { __nv_bfloat16 h; h.__x = mf_emu::bf16_bits(f); return h; }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
static inline float __bfloat162float(__nv_bfloat16 h) { return mf_emu::bf16_value(h.__x); }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
    __nv_bfloat162 r; r.x = __float2bfloat16(a); r.y = __float2bfloat16(b); return r;
}
static inline __nv_bfloat162 __float22bfloat162_rn(float2 v) { return __floats2bfloat162_rn(v.x, v.y); }
static inline float2 __bfloat1622float2(__nv_bfloat162 h) {
    float2 r; r.x = __bfloat162float(h.x); r.y = __bfloat162float(h.y); return r;
}
static inline float __low2float(__nv_bfloat162 h) { return __bfloat162float(h.x); }
static inline float __high2float(__nv_bfloat162 h) { return __bfloat162float(h.y); }

/* ------------------------------------------------------------------------------------------------
 * cuBLAS stand-ins (column-major, like the real library)
 * ---------------------------------------------------------------------------------------------- */
typedef enum {
    CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1, CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_ARCH_MISMATCH = 8, CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13, CUBLAS_STATUS_INTERNAL_ERROR = 14, CUBLAS_STATUS_NOT_SUPPORTED = 15
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TENSOR_OP_MATH = 1, CUBLAS_PEDANTIC_MATH = 2,
               CUBLAS_TF32_TENSOR_OP_MATH = 3 } cublasMath_t;
struct mf_emu_cublas { unsigned magic; cudaStream_t stream; cublasMath_t math; };
typedef struct mf_emu_cublas *cublasHandle_t;

static inline cublasStatus_t cublasCreate(cublasHandle_t *h) {
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    *h = new mf_emu_cublas;
    (*h)->magic = 0xB1A5u; (*h)->stream = 0; (*h)->math = CUBLAS_DEFAULT_MATH;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasDestroy(cublasHandle_t h) {
    if (!h || h->magic != 0xB1A5u) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->magic = 0;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t st) {
    if (!h || h->magic != 0xB1A5u) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = st;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasGetStream(cublasHandle_t h, cudaStream_t *st) {
    if (!h || h->magic != 0xB1A5u) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (st) *st = h->stream;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) {
    if (!h || h->magic != 0xB1A5u) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (m != CUBLAS_DEFAULT_MATH && m != CUBLAS_TENSOR_OP_MATH && m != CUBLAS_PEDANTIC_MATH && m != CUBLAS_TF32_TENSOR_OP_MATH)
        return CUBLAS_STATUS_INVALID_VALUE;
    h->math = m;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasGetMathMode(cublasHandle_t h, cublasMath_t *m) {
    if (!h || h->magic != 0xB1A5u) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (m) *m = h->math;
    return CUBLAS_STATUS_SUCCESS;
}
static inline const char *cublasGetStatusName(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}
static inline const char *cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    }
    return "unknown error";
}

namespace mf_emu {
static inline float to_tf32(float x) { /* round to nearest (ties away) to a 10-bit mantissa */
    uint32_t u; memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) { u += 0x1000u; u &= 0xffffe000u; }
    memcpy(&x, &u, 4);
    return x;
}
/* cuBLAS picks a kernel per shape (transposes, m, n, k, batch count): its tiling and its split of the
   k range (split-K, partial sums added at the end) decide the order of the fp32 accumulation, so
   the same product in row slices and at once generally differ in their last bits, while one shape
   gives the same bits every time. Here: 1 to 4 splits (1 when k < 16), each a multiple of 8 long
   (tensor cores take k in steps of 8 or 16), chosen by a hash of the shape. */
static inline void gemm_splits(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int batch, int *splits,
                               int *chunk) {
    uint64_t z = ((uint64_t)(unsigned)m * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)(unsigned)n * 0xC2B2AE3D27D4EB4Full) ^
                 ((uint64_t)(unsigned)k * 0x165667B19E3779F9ull) ^ ((uint64_t)(unsigned)batch * 0xD6E8FEB86659FD93ull) ^
                 ((uint64_t)ta << 7) ^ ((uint64_t)tb << 11);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    int s = k < 16 ? 1 : 1 + (int)(z % 4u);
    int c = (k + s - 1) / s;
    c = (c + 7) / 8 * 8;
    *splits = s; *chunk = c < 1 ? 1 : c;
}
static inline cublasStatus_t sgemm_one(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                       float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                                       float *C, int ldc, std::vector<float> &At, std::vector<float> &Bt, int batch = 1) {
    bool tf = h->math == CUBLAS_TF32_TENSOR_OP_MATH && S().tf32;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    if (k == 0 || alpha == 0.0f) {
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                float &c = C[(size_t)i + (size_t)j * (size_t)ldc];
                c = beta == 0.0f ? 0.0f : beta * c;
            }
        return CUBLAS_STATUS_SUCCESS;
    }
    /* At: m x k, Bt: n x k, both row-major, so the inner product is contiguous */
    At.resize((size_t)m * (size_t)k);
    Bt.resize((size_t)n * (size_t)k);
    for (int i = 0; i < m; i++)
        for (int l = 0; l < k; l++) {
            float a = ta == CUBLAS_OP_N ? A[(size_t)i + (size_t)l * (size_t)lda] : A[(size_t)l + (size_t)i * (size_t)lda];
            At[(size_t)i * (size_t)k + (size_t)l] = tf ? to_tf32(a) : a;
        }
    for (int j = 0; j < n; j++)
        for (int l = 0; l < k; l++) {
            float b = tb == CUBLAS_OP_N ? B[(size_t)l + (size_t)j * (size_t)ldb] : B[(size_t)j + (size_t)l * (size_t)ldb];
            Bt[(size_t)j * (size_t)k + (size_t)l] = tf ? to_tf32(b) : b;
        }
    /* the k range in splits whose number and chunk size depend on the shape only (see gemm_splits) */
    int splits, chunk;
    gemm_splits(ta, tb, m, n, k, batch, &splits, &chunk);
    for (int j = 0; j < n; j++) {
        const float *bj = &Bt[(size_t)j * (size_t)k];
        for (int i = 0; i < m; i++) {
            const float *ai = &At[(size_t)i * (size_t)k];
            float acc = 0.0f;
            for (int sp = 0, l0 = 0; sp < splits && l0 < k; sp++, l0 += chunk) {
                int l1 = std::min(k, l0 + chunk);
                float part = 0.0f;
                for (int l = l0; l < l1; l++) part = fmaf(ai[l], bj[l], part);
                acc = sp == 0 ? part : acc + part;
            }
            float &c = C[(size_t)i + (size_t)j * (size_t)ldc];
            c = beta == 0.0f ? alpha * acc : fmaf(alpha, acc, beta * c);
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t sgemm_check(const char *fn, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                         int m, int n, int k, const float *alpha, const float *beta, int lda, int ldb,
                                         int ldc, int batch) {
    if (!h || h->magic != 0xB1A5u) return CUBLAS_STATUS_NOT_INITIALIZED;
    int ra = ta == CUBLAS_OP_N ? m : k, rb = tb == CUBLAS_OP_N ? k : n;
    if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T && ta != CUBLAS_OP_C) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T && tb != CUBLAS_OP_C) ||
        m < 0 || n < 0 || k < 0 || batch < 0 || !alpha || !beta || lda < std::max(1, ra) || ldb < std::max(1, rb) ||
        ldc < std::max(1, m)) {
        set_error(S().last_error, "%s: CUBLAS_STATUS_INVALID_VALUE (m=%d n=%d k=%d lda=%d ldb=%d ldc=%d batch=%d)", fn, m,
                  n, k, lda, ldb, ldc, batch);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}
} /* namespace mf_emu */

static inline cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float *alpha, const float *A, int lda, const float *B, int ldb,
                                         const float *beta, float *C, int ldc) {
    cublasStatus_t st = mf_emu::sgemm_check("cublasSgemm", h, ta, tb, m, n, k, alpha, beta, lda, ldb, ldc, 1);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    float al = *alpha, be = *beta;
    mf_emu::run_now(h->stream, "cublasSgemm", [&](mf_emu_stream *) {
        std::vector<float> At, Bt;
        st = mf_emu::sgemm_one(h, ta, tb, m, n, k, al, A, lda, B, ldb, be, C, ldc, At, Bt);
    });
    return st;
}
static inline cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                                       int m, int n, int k, const float *alpha, const float *A, int lda,
                                                       long long sA, const float *B, int ldb, long long sB,
                                                       const float *beta, float *C, int ldc, long long sC, int batch) {
    cublasStatus_t st = mf_emu::sgemm_check("cublasSgemmStridedBatched", h, ta, tb, m, n, k, alpha, beta, lda, ldb, ldc, batch);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    mf_emu::run_now(h->stream, "cublasSgemmStridedBatched", [&](mf_emu_stream *) {
        std::vector<float> At, Bt;
        for (int b = 0; b < batch; b++)
            mf_emu::sgemm_one(h, ta, tb, m, n, k, *alpha, A + (ptrdiff_t)b * sA, lda, B + (ptrdiff_t)b * sB, ldb, *beta,
                              C + (ptrdiff_t)b * sC, ldc, At, Bt, batch);
    });
    return CUBLAS_STATUS_SUCCESS;
}

/* cublasGemmEx / cublasGemmStridedBatchedEx: A and B both CUDA_R_32F or both CUDA_R_16BF, C
   CUDA_R_32F (or CUDA_R_16BF with bf16 A and B), CUBLAS_COMPUTE_32F (what the library calls); bf16
   inputs are widened exactly and multiplied like cublasSgemm (fp32 accumulation in the shape's
   order), a bf16 C is widened before and rounded (to nearest even) after. */
typedef enum { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType_t;
typedef cudaDataType_t cudaDataType;
typedef enum { CUBLAS_COMPUTE_16F = 64, CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 } cublasGemmAlgo_t;
namespace mf_emu {
static inline cublasStatus_t gemm_ex_types(const char *fn, cudaDataType_t ta, cudaDataType_t tb, cudaDataType_t tc,
                                           cublasComputeType_t ct) {
    if (ta != tb || (ta != CUDA_R_32F && ta != CUDA_R_16BF) || (tc != CUDA_R_32F && (tc != CUDA_R_16BF || ta != tc)) ||
        ct != CUBLAS_COMPUTE_32F) {
        set_error(S().last_error, "%s: CUBLAS_STATUS_NOT_SUPPORTED (the stand-in takes A, B both CUDA_R_32F or both "
                  "CUDA_R_16BF, C CUDA_R_32F or (bf16 A, B) CUDA_R_16BF, CUBLAS_COMPUTE_32F; got %d %d %d %d)", fn,
                  (int)ta, (int)tb, (int)tc, (int)ct);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return CUBLAS_STATUS_SUCCESS;
}
/* the float values of a column-major operand of `cols` columns (lda apart) */
static inline const float *gemm_ex_widen(const void *p, cudaDataType_t t, int lda, int cols, std::vector<float> &w) {
    if (t == CUDA_R_32F) return (const float *)p;
    w.resize((size_t)lda * (size_t)(cols > 0 ? cols : 0));
    for (size_t i = 0; i < w.size(); i++) w[i] = __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    return w.data();
}
} /* namespace mf_emu */
static inline cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                                        int m, int n, int k, const void *alpha, const void *A,
                                                        cudaDataType_t Atype, int lda, long long sA, const void *B,
                                                        cudaDataType_t Btype, int ldb, long long sB, const void *beta,
                                                        void *C, cudaDataType_t Ctype, int ldc, long long sC, int batch,
                                                        cublasComputeType_t ct, cublasGemmAlgo_t algo) {
    const char *fn = "cublasGemmStridedBatchedEx";
    cublasStatus_t st = mf_emu::sgemm_check(fn, h, ta, tb, m, n, k, (const float *)alpha, (const float *)beta, lda, ldb, ldc, batch);
    size_t es = Atype == CUDA_R_16BF ? 2 : 4;
    (void)algo;
    if (st != CUBLAS_STATUS_SUCCESS || (st = mf_emu::gemm_ex_types(fn, Atype, Btype, Ctype, ct)) != CUBLAS_STATUS_SUCCESS)
        return st;
    mf_emu::run_now(h->stream, fn, [&](mf_emu_stream *) {
        std::vector<float> At, Bt, wa, wb, wc;
        for (int b = 0; b < batch; b++) {
            const float *a = mf_emu::gemm_ex_widen((const char *)A + (ptrdiff_t)b * sA * (ptrdiff_t)es, Atype, lda,
                                                   ta == CUBLAS_OP_N ? k : m, wa);
            const float *bb = mf_emu::gemm_ex_widen((const char *)B + (ptrdiff_t)b * sB * (ptrdiff_t)es, Btype, ldb,
                                                    tb == CUBLAS_OP_N ? n : k, wb);
            __nv_bfloat16 *cb = Ctype == CUDA_R_16BF ? (__nv_bfloat16 *)C + (ptrdiff_t)b * sC : NULL;
            float *c = cb ? (float *)mf_emu::gemm_ex_widen(cb, Ctype, ldc, n, wc) : (float *)C + (ptrdiff_t)b * sC;
            mf_emu::sgemm_one(h, ta, tb, m, n, k, *(const float *)alpha, a, lda, bb, ldb, *(const float *)beta, c, ldc,
                              At, Bt, batch);
            if (cb) /* the rows of C only (ldc apart): the padding between them is not the product's */
                for (int j = 0; j < n; j++)
                    for (int i = 0; i < m; i++) cb[(size_t)j * ldc + i] = __float2bfloat16(c[(size_t)j * ldc + i]);
        }
    });
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType_t Atype, int lda,
                                          const void *B, cudaDataType_t Btype, int ldb, const void *beta, void *C,
                                          cudaDataType_t Ctype, int ldc, cublasComputeType_t ct, cublasGemmAlgo_t algo) {
    return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta, C, Ctype,
                                      ldc, 0, 1, ct, algo);
}

/* ------------------------------------------------------------------------------------------------
 * WMMA stand-in (TF32, m16n16k8): see the top comment
 * ---------------------------------------------------------------------------------------------- */
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
namespace precision { struct tf32 {}; }
/* what a fragment of input type T holds: bf16 for bf16 inputs, float for TF32 inputs and accumulators */
template <class T> struct mf_emu_storage { typedef float type; };
template <> struct mf_emu_storage<__nv_bfloat16> { typedef __nv_bfloat16 type; };
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K> struct mf_emu_dims;
template <int M, int N, int K> struct mf_emu_dims<matrix_a, M, N, K> { enum { R = M, C = K }; };
template <int M, int N, int K> struct mf_emu_dims<matrix_b, M, N, K> { enum { R = K, C = N }; };
template <int M, int N, int K> struct mf_emu_dims<accumulator, M, N, K> { enum { R = M, C = N }; };

/* the whole R x C tile, row-major, in every lane */
template <class Use, int M, int N, int K, class T, class Layout = void> class fragment {
    static_assert(M == 16 && N == 16 && (K == 8 || K == 16),
                  "wmma stand-in: only the m16n16k8 (TF32) and m16n16k16 (bf16) shapes are emulated");
    static_assert(K == 8 ? std::is_same<T, precision::tf32>::value || std::is_same<T, float>::value
                         : std::is_same<T, __nv_bfloat16>::value || std::is_same<T, float>::value,
                  "wmma stand-in: only precision::tf32 (k = 8) or __nv_bfloat16 (k = 16) inputs and float "
                  "accumulators are emulated");
  public:
    typedef typename mf_emu_storage<T>::type storage_t;
    enum { rows = mf_emu_dims<Use, M, N, K>::R, cols = mf_emu_dims<Use, M, N, K>::C, num_elements = rows * cols };
    storage_t x[num_elements];
};
static inline void mf_emu_wmma_set(float &d, float v) { d = v; }
static inline void mf_emu_wmma_set(__nv_bfloat16 &d, float v) { d = __float2bfloat16(v); }

static inline float __float_to_tf32(float in) { return mf_emu::to_tf32(in); }

/* es: the element's bytes (ldm counts elements) */
static inline void mf_emu_wmma_check(const char *fn, const void *p, unsigned ldm, unsigned es = 4) {
    mf_emu::warp_op(mf_emu::W_SYNC, 0xffffffffu, 0, 0, 32); /* the .sync: a rendezvous of the warp */
    if (((uintptr_t)p & 31u) != 0 || (ldm * es) % 16 != 0)
        mf_emu::kernel_fault("%s: misaligned address %p or ldm %u (the pointer must be 32-byte aligned, ldm a "
                             "multiple of 16 bytes: 4 floats, 8 bf16)", fn, p, ldm);
}
template <class Use, int M, int N, int K, class T, class L>
static inline void fill_fragment(fragment<Use, M, N, K, T, L> &f, float v) {
    mf_emu::warp_op(mf_emu::W_SYNC, 0xffffffffu, 0, 0, 32);
    for (int i = 0; i < f.num_elements; i++) mf_emu_wmma_set(f.x[i], v);
}
/* P: float for TF32 fragments, __nv_bfloat16 for bf16 ones (as the real overloads) */
template <class Use, int M, int N, int K, class T, class L, class P>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const P *p, unsigned ldm) {
    static_assert(!std::is_same<Use, accumulator>::value, "load_matrix_sync of an accumulator needs a layout_t");
    typedef fragment<Use, M, N, K, T, L> F;
    static_assert(std::is_same<P, typename F::storage_t>::value,
                  "wmma stand-in: load a TF32 fragment from float, a bf16 fragment from __nv_bfloat16");
    mf_emu_wmma_check("load_matrix_sync", p, ldm, sizeof(P));
    for (int r = 0; r < F::rows; r++)
        for (int c = 0; c < F::cols; c++)
            f.x[r * F::cols + c] = std::is_same<L, col_major>::value ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
}
template <int M, int N, int K>
static inline void load_matrix_sync(fragment<accumulator, M, N, K, float> &f, const float *p, unsigned ldm, layout_t l) {
    mf_emu_wmma_check("load_matrix_sync", p, ldm);
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++) f.x[r * N + c] = l == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
}
template <int M, int N, int K>
static inline void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float> &f, unsigned ldm, layout_t l) {
    mf_emu_wmma_check("store_matrix_sync", p, ldm);
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++) (l == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c]) = f.x[r * N + c];
}
static inline float mf_emu_tf32_trunc(float x) { /* the 19 bits a tensor core reads */
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u &= 0xffffe000u;
    memcpy(&x, &u, 4);
    return x;
}
/* what a tensor core reads of an input element: the 19 bits of TF32 (its fragments hold floats), or
   the bf16 value */
static inline float mf_emu_mma_in(float x) { return mf_emu_tf32_trunc(x); }
static inline float mf_emu_mma_in(__nv_bfloat16 x) { return __bfloat162float(x); }
template <int M, int N, int K, class T, class LA, class LB>
static inline void mma_sync(fragment<accumulator, M, N, K, float> &d, const fragment<matrix_a, M, N, K, T, LA> &a,
                            const fragment<matrix_b, M, N, K, T, LB> &b, const fragment<accumulator, M, N, K, float> &c) {
    /* Every lane of the warp holds the same tiles and asks for the same product, the bulk of an
       emulated tensor-core kernel's time: the products computed last are kept with their inputs
       (a pure function of a, b and c), and a lane whose inputs match one of them copies it */
    typedef fragment<matrix_a, M, N, K, T, LA> FA;
    typedef fragment<matrix_b, M, N, K, T, LB> FB;
    typedef fragment<accumulator, M, N, K, float> FC;
    struct memo { FA a; FB b; FC c, d; };
    enum { MEMOS = 16 }; /* more than the warps of a block that interleave between two rendezvous */
    static memo seen[MEMOS];
    static int n_seen, next;
    mf_emu::warp_op(mf_emu::W_SYNC, 0xffffffffu, 0, 0, 32);
    for (int s = 0; s < n_seen; s++)
        if (!memcmp(&seen[s].c, &c, sizeof c) && !memcmp(&seen[s].a, &a, sizeof a) && !memcmp(&seen[s].b, &b, sizeof b)) {
            d = seen[s].d;
            return;
        }
    /* d[i][j] = c[i][j] + a[i][0] b[0][j] + a[i][1] b[1][j] + ..., k ascending, a rounded product and
       a rounded sum per term; the inputs converted once and a row of N outputs one vector (the tests
       build at -O1, which does not vectorise loops) */
    typedef float row_t __attribute__((vector_size(N * sizeof(float))));
    memo &m = seen[next];
    row_t fb[K], r;
    float fa[M * K];
    next = (next + 1) % MEMOS;
    if (n_seen < MEMOS) n_seen++;
    m.a = a; m.b = b; m.c = c;
    for (int i = 0; i < M * K; i++) fa[i] = mf_emu_mma_in(a.x[i]);
    for (int l = 0; l < K; l++)
        for (int j = 0; j < N; j++) fb[l][j] = mf_emu_mma_in(b.x[l * N + j]);
    for (int i = 0; i < M; i++) {
        memcpy(&r, c.x + i * N, sizeof r);
        for (int l = 0; l < K; l++) r += fa[i * K + l] * fb[l];
        memcpy(m.d.x + i * N, &r, sizeof r);
    }
    d = m.d;
}
} /* namespace wmma */
} /* namespace nvcuda */

#endif /* MF_CUDA_EMU_H */
