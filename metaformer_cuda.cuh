/* metaformer_cuda.cuh - the CUDA backend of metaformer.h: device memory, streams, cuBLAS, and a
 * CUDA kernel (forward and backward) for every op, the optimizers and gradient clipping.
 *
 * Use: compile ONE translation unit with nvcc that does
 *     #define METAFORMER_IMPLEMENTATION
 *     #define METAFORMER_CUDA
 *     #include "metaformer.h"          (which includes this file at its end)
 * and link cuBLAS:  nvcc -x cu -O2 -arch=sm_90 app.c -lcublas
 * then pick the device at run time: mf_ctx_set_device(ctx, MF_DEVICE_CUDA) right after mf_ctx_new.
 *
 * Architecture
 *   - The backend is a table of function pointers (mf__backend in metaformer.h) set on the context:
 *     the generic code calls it wherever tensor data is touched (allocation, copies, zeroing, op
 *     forward/backward, optimizer step, clipping); nothing in metaformer.h needs a CUDA type.
 *   - Tensor headers, op arguments and aux data (token ids, targets) stay in host memory; t->data,
 *     t->grad, saved buffers and the flat parameter / gradient / moment buffers are cudaMalloc'd
 *     (no managed memory). Activation data comes from a device arena: a chain of cudaMalloc blocks,
 *     merged into one block on mf_reset, exactly like the host arena.
 *   - One stream per context; cuBLAS is bound to it. The host waits only where it needs data
 *     (mf_to_host / mf_item, clipping's norm, the optimizer's "has this parameter a gradient" check).
 *   - mf__cu_ops maps each op descriptor of metaformer.h to its CUDA forward and backward; an op
 *     missing from it fails with a clear error naming the op (CPU code never sees device pointers),
 *     and tests/test_cuda_ops.cpp fails for an op of metaformer.h's list mf__ops without a row. The
 *     wrappers read an op's arguments by the slot names metaformer.h gives them (MF__ARG_* in
 *     out->iarg, MF__FARG_* in out->farg).
 *   - Dense products go through cuBLAS (row-major via C^T = B^T A^T), exact float32 unless
 *     mf_cuda_set_precision picks TF32 or BF16 (MF__CU(ctx)->prec). In BF16 the products read bf16
 *     operands (a bf16 copy of the parameters, activations stored in bf16 where they lie, the other
 *     operands converted into a scratch; fp32 accumulation, [cu:gemm]), and so do the tile products
 *     of [cu:attention], [cu:xl] and the chunkwise kernels of [cu:fastweights]; the activations the
 *     backward keeps of the products, LayerNorm, GELU / ReLU and the attention are stored in bf16
 *     ([cu:storage]); the parameters, moments, gradients and the residual stream stay fp32.
 *     Every other kernel here is deterministic (no atomics; reductions in a
 *     fixed order), and most follow the CPU's summation order, so CPU and GPU runs agree to ~1e-6.
 *   - Errors: every runtime / cuBLAS call is checked and the message names the op and the call;
 *     launches are checked with cudaGetLastError (and synchronised under the emulator or with
 *     -DMF_CUDA_DEBUG, so an asynchronous fault is reported at the op that caused it). A failure
 *     inside an op names its output's and inputs' shapes, a kernel's its grid, block and dynamic
 *     shared memory, a GEMM's its m, n, k (see mf__cu_launched).
 *
 * Every kernel is launched through MF_LAUNCH(kernel, grid, block, smem_bytes, stream, args...) and
 * declares dynamic shared memory with MF_DYN_SMEM(T, name), never with <<<>>> or
 * `extern __shared__` directly: tests/cuda_emu.h redefines both so that the same kernel source
 * compiles with the host C++ compiler and runs on the CPU (how CI, which has no GPU, checks every
 * kernel against its CPU twin). Under the emulator MF_CUDA_EMU is defined and the CUDA runtime and
 * cuBLAS come from the emulator instead of NVIDIA's headers.
 *
 * OPTIONS (define before including metaformer.h; the METAFORMER_NO_* switches leave the family out
 * of metaformer.h too)
 *   MF_CUDA_DEBUG             synchronise after every kernel, GEMM and copy, so a fault names its op,
 *                             kernel, launch configuration and shapes (make build/cuda-debug/cuda_suites:
 *                             the CUDA suites so built, with -lineinfo)
 *   METAFORMER_NO_XL          no [cu:xl] (rel_attention's kernels) and no rel_attention row in
 *                             mf__cu_ops
 *   METAFORMER_NO_FASTWEIGHTS no [cu:fastweights] (the dpfp, fast_weights, linear_attention kernels)
 *                             and no dpfp, fast_weights, linear_attention rows (elu1 is a core op
 *                             of [mf:ops] on the unary kernel of [cu:ops], so it stays)
 *   METAFORMER_NO_FEEDBACK    no [cu:feedback] (the feedback_attention and feedback recurrence
 *                             kernels) and no feedback_attention, feedback rows
 *   Shared with the core, so kept whatever the switches: [cu:attention] (the compressive
 *   transformer's attention and AR loss run on it), the kernels of [cu:ops] that [cu:feedback]
 *   launches (layernorm, unary, bias, column sums, mf__k_add_to).
 *
 * CONTENTS (search for the banners, e.g. "[cu:ops]"; the order of metaformer.h; every op's kernels
 * come right before its host wrappers. Most sections are the CUDA twins of their [mf:*] namesakes;
 * the attention op is in [mf:ops] on the CPU side and in [cu:attention] here, and [cu:storage] and
 * [cu:backend] have no CPU namesake)
 *   [cu:platform]    launch and error-check macros, the backend state, block reductions,
 *                    the shared-memory opt-in (mf__cu_smem)
 *   [cu:memory]      device allocations, the activation arena, copies, zeroing, scratch
 *   [cu:storage]     activations stored in bf16 (MF_PREC_BF16): the load / store helpers, the
 *                    widening of bf16 inputs for the ops whose kernels read floats
 *   [cu:gemm]        row-major GEMM through cuBLAS (fp32, TF32, or bf16 operands via cublasGemmEx)
 *   [cu:ops]         every op of [mf:ops] in its order (matmul, head_matmul, linear, add / sub / mul,
 *                    the unary ops, softmax, log_softmax, cross_entropy, mse, layernorm, embedding, dropout,
 *                    reshape, permute, concat, slice, roll, sum / mean, sum_axis, conv1d, avg_pool):
 *                    kernels, then the forward / backward wrappers
 *   [cu:attention]   mf_attention (sdpa, metric, quadratic, the compressive AR loss), the last op of
 *                    [mf:ops]: a fused FlashAttention-2 kernel family (tiles in shared memory,
 *                    online softmax, backward by recomputation from the row log-sum-exp, no Tq x Tk
 *                    buffer, any sequence length): exact fp32 by default; on sm_80+ TF32 tensor
 *                    cores (WMMA) with MF_PREC_TF32, bf16 tensor cores with MF_PREC_BF16
 *   [cu:xl]          mf_rel_attention: FA2-style tiles with the content and position terms inside;
 *                    fp32 on the CUDA cores, or (MF_PREC_BF16, sm_80+) the three score terms and
 *                    every accumulation as bf16 WMMA tile products
 *   [cu:fastweights] mf_dpfp, mf_fast_weights, mf_linear_attention: recurrent and chunkwise kernels
 *   [cu:feedback]    the feedback transformer's token recurrence (one tape node, device stacks, no
 *                    host synchronisation inside the loop) and mf_feedback_attention
 *   [cu:optim]       the optimizer step (Adam, AdamW, labml Adam, SGD-momentum) and gradient
 *                    clipping over the flat buffers
 *   [cu:backend]     the op table (mf__cu_ops), the backend, mf_ctx_set_device, mf_cuda_set_precision
 *   [cu:dist]        data-parallel training on GPUs (METAFORMER_NCCL): gradient buckets averaged with
 *                    NCCL on a stream of their own, ZeRO-1 shards of the moments in device memory
 * Every kernel that needs more than 48 KiB of shared memory opts in through mf__cu_smem, which
 * refuses (with the fix in the message) what the device cannot hold: head sizes (about 256 for the
 * attention, 218 for the relative attention, 208 for its bf16 kernels on sm_90) and chunk lengths
 * are bounded by it.
 * Gradient reductions over rows (bias, LayerNorm gamma / beta, a broadcast operand, sum_axis) run as
 * two deterministic passes over a 2-D grid (mf__cu_colred_run), the embedding gradient as one block
 * per (token id, column tile) over the host-grouped positions of that id (mf__k_embed_bwd); neither
 * uses atomics. Tensor-core paths:
 * cuBLAS's GEMMs and the fused attention of [cu:attention] (sdpa, metric, quadratic, forward and
 * backward, dropout included: TF32 WMMA m16n16k8, or bf16 WMMA m16n16k16 with fp32 accumulators,
 * sm_80+), and the relative attention of [cu:xl] with MF_PREC_BF16 only (bf16 WMMA m16n16k16; TF32
 * leaves it on the fp32 kernels). The chunkwise fast-weight / linear kernels ([cu:fastweights])
 * with MF_PREC_BF16 only: the forward (P, Gm, the state update, the output), the backward's state
 * pass (dU, dL/dS^T) and its per-chunk gradients (dP, -dU S, D = G X^T, dQ, dK) as bf16 WMMA tile
 * products with an fp32 state and fp32 accumulators; the forward and back substitutions (triangular
 * solves, sequential in the token), dbeta, dV and the recurrent form stay fp32 on the CUDA cores.
 * The feedback steps' dense products are [cu:gemm]'s (bf16
 * with MF_PREC_BF16), their one-query attention stays fp32 (a matrix-vector product). The tile
 * sizes are the emulator-checked defaults, not tuned on a GPU; make gpu-report measures them.
 */
#ifndef METAFORMER_CUDA_CUH
#define METAFORMER_CUDA_CUH

/* ==== [cu:platform] ========================================================================= */
#ifndef MF_CUDA_EMU
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublas_v2.h>
#endif

/* ---- launch and dynamic shared memory (real CUDA forms; the emulator defines its own) ---- */
#if !defined(MF_CUDA_EMU)
#ifndef MF_DYN_SMEM
/* 128-byte aligned: WMMA's load / store want 32 bytes (256 bits) and TMA-style copies 128 */
#define MF_DYN_SMEM(T, name) \
    extern __shared__ __align__(128) unsigned char mf__dyn_smem_raw[]; \
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
#define MF_CUBLAS_CHECK(ctx, what, call) mf__cublas_check((ctx), (what), #call, (call))
static inline int mf__cublas_check(mf_ctx *ctx, const char *what, const char *call, cublasStatus_t st) {
    if (st == CUBLAS_STATUS_SUCCESS) return 0;
    mf__fail(ctx, "%s: %s failed: %s (%s)", what, call, cublasGetStatusString(st), cublasGetStatusName(st));
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

/* ---- the backend state of a context: stream, cuBLAS handle, device arena, scratch ---------- */
typedef struct mf__cu_block {
    struct mf__cu_block *next;
    char *base;
    size_t cap, used;
} mf__cu_block;

typedef struct mf__cu {
    cudaStream_t stream;
    cublasHandle_t blas;
    mf__cu_block *blocks;      /* the device activation arena, newest first */
    size_t arena_used, arena_peak; /* its bytes in use now / at most since the last mf_reset */
    void *scratch;             /* persistent device scratch (optimizer tables, reductions) */
    size_t scratch_cap;
    void *host;                /* host staging for those tables */
    size_t host_cap;
    mf_precision prec;         /* mf_cuda_set_precision: what the GEMMs and the kernels compute in */
    int tc_tf32;               /* the device has TF32 and bf16 tensor cores (sm_80+; the emulator counts as one) */
    int smem_optin;            /* shared memory a block may opt in to (bytes) */
    /* MF_PREC_BF16 ([cu:gemm]): the bf16 copy of the flat parameter buffer, made again at the first
       GEMM after anything may have written the parameters (wbf_stale), and the scratch holding the
       bf16 conversion of the other GEMM operands (activations, gradients) for one product */
    __nv_bfloat16 *wbf, *gemm_bf;
    int64_t wbf_cap, gemm_bf_cap; /* elements */
    int wbf_stale;
    void *wide;                /* [cu:storage]: the float copies of one op's bf16 tensors */
    size_t wide_cap;           /* bytes */
    long long bf16_slice;      /* MF__CU_BF16_SLICE (the tests make it small) */
    const mf_tensor *cur;      /* the op mf__cu_dispatch runs now (NULL outside one): what a failing */
    int cur_bwd;               /* launch, GEMM or copy names, with its shapes; cur_bwd: its backward */
} mf__cu;
#define MF__CU(ctx) ((mf__cu *)(ctx)->be_state)
#define MF__CU_ALIGN 256

/* ---- launching kernels: checked launches on the context's stream, grid sizes --------------- */
/* Fault attribution. A kernel's fault (an illegal address, a trap) is asynchronous: without a
   synchronisation it surfaces at a later call, named after whatever that was. Under the emulator
   or with -DMF_CUDA_DEBUG every launch, cuBLAS call and copy is followed by a synchronisation, so
   the failing one is named (the emulator runs a copy or a GEMM at once, after the stream's queued
   work, so there only MF_CUDA_DEBUG adds a synchronisation after them). Every failure message names the op (and, inside an op, its output's and
   inputs' shapes: mf__cu.cur, set by mf__cu_dispatch), the kernel with its launch configuration, or
   the GEMM with its m, n, k; without MF_CUDA_DEBUG it adds how to find the kernel that caused it. */
#if defined(MF_CUDA_EMU) || defined(MF_CUDA_DEBUG)
#define MF__CU_SYNC_EACH 1 /* after each launch */
#else
#define MF__CU_SYNC_EACH 0
#endif
#ifdef MF_CUDA_DEBUG
#define MF__CU_SYNC_CALLS 1 /* after each GEMM, copy and fill too */
#define MF__CU_ASYNC_HINT ""
#else
#define MF__CU_SYNC_CALLS 0
#define MF__CU_ASYNC_HINT " (a fault of an earlier kernel can surface here: rebuild with -DMF_CUDA_DEBUG to name it)"
#endif
/* "; in op NAME (backward): output [..], inputs [..], [..]" for the op running now ("" outside one) */
static const char *mf__cu_where(const mf_ctx *ctx, char *buf, size_t size) {
    const mf__cu *cu = MF__CU(ctx);
    const mf_tensor *t = cu ? cu->cur : NULL;
    char sh[96];
    size_t n;
    int k, first = 1;
    buf[0] = 0;
    if (!t || !t->op) return buf;
    n = (size_t)snprintf(buf, size, "; in op %s%s: output %s", t->op->name, cu->cur_bwd ? " (backward)" : "",
                         mf_shape_str(t, sh, sizeof sh));
    for (k = 0; k < MF_MAX_SRC && n < size; k++)
        if (t->src[k]) {
            n += (size_t)snprintf(buf + n, size - n, "%s%s", first ? ", inputs " : ", ", mf_shape_str(t->src[k], sh, sizeof sh));
            first = 0;
        }
    return buf;
}
/* after a launch: its configuration error, or (synchronised) its fault, names op, kernel, launch and shapes */
static int mf__cu_launched(mf_ctx *ctx, const char *op, const char *kernel, dim3 grid, dim3 block, size_t smem) {
    char where[512];
    int sync = 0;
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && MF__CU_SYNC_EACH) {
        e = cudaStreamSynchronize(MF__CU(ctx)->stream);
        sync = 1;
        if (e != cudaSuccess) (void)cudaGetLastError(); /* reported here, not again by the next launch's check */
    }
    if (e == cudaSuccess) return 0;
    /* a launch's own configuration errors come back at once: no earlier kernel to suspect */
    sync |= e == cudaErrorInvalidConfiguration || e == cudaErrorInvalidValue || e == cudaErrorLaunchOutOfResources;
    mf__fail(ctx, "%s: CUDA kernel %s failed: %s (%s); launch grid (%u, %u, %u), block (%u, %u, %u), %zu bytes of dynamic "
             "shared memory%s%s", op, kernel, cudaGetErrorString(e), cudaGetErrorName(e), grid.x, grid.y, grid.z, block.x,
             block.y, block.z, smem, mf__cu_where(ctx, where, sizeof where), sync ? "" : MF__CU_ASYNC_HINT);
    return -1;
}
/* a runtime call of an op's work on the stream (a copy, a fill): checked, and synchronised where
   each launch is, so a failure names the op and its shapes */
static int mf__cu_rt_check(mf_ctx *ctx, const char *what, const char *call, cudaError_t e) {
    char where[512];
    int sync = 0;
    if (e == cudaSuccess && MF__CU_SYNC_CALLS) { e = cudaStreamSynchronize(MF__CU(ctx)->stream); sync = 1; }
    if (e == cudaSuccess) return 0;
    mf__fail(ctx, "%s: %.*s failed: %s (%s)%s%s", what, (int)strcspn(call, "("), call, cudaGetErrorString(e),
             cudaGetErrorName(e), mf__cu_where(ctx, where, sizeof where), sync ? "" : MF__CU_ASYNC_HINT);
    return -1;
}
#define MF__CU_RT(ctx, what, call) mf__cu_rt_check((ctx), (what), #call, (call))
/* a cuBLAS GEMM (row-major C[m, n] = op(A)[m, k] op(B)[k, n], batch of them): its status, then
   (synchronised as launches are) the fault of its kernels, named with m, n, k and the op's shapes */
static int mf__cu_blas_check(mf_ctx *ctx, const char *op, const char *call, cublasStatus_t st, int m, int n, int k,
                             int batch) {
    char where[512];
    cudaError_t e = cudaSuccess;
    if (st == CUBLAS_STATUS_SUCCESS && MF__CU_SYNC_CALLS) e = cudaStreamSynchronize(MF__CU(ctx)->stream);
    if (st == CUBLAS_STATUS_SUCCESS && e == cudaSuccess) return 0;
    if (st != CUBLAS_STATUS_SUCCESS)
        mf__fail(ctx, "%s: %.*s failed: %s (%s); GEMM m=%d n=%d k=%d batch=%d%s", op, (int)strcspn(call, "("), call,
                 cublasGetStatusString(st), cublasGetStatusName(st), m, n, k, batch, mf__cu_where(ctx, where, sizeof where));
    else
        mf__fail(ctx, "%s: %.*s failed: %s (%s); GEMM m=%d n=%d k=%d batch=%d%s", op, (int)strcspn(call, "("), call,
                 cudaGetErrorString(e), cudaGetErrorName(e), m, n, k, batch, mf__cu_where(ctx, where, sizeof where));
    return -1;
}
#define MF__CU_BLAS(ctx, op, m, n, k, batch, call) mf__cu_blas_check((ctx), (op), #call, (call), (m), (n), (k), (batch))
/* launch on the context's stream and check; evaluates to 0 or -1. The extra level lets
   MF__EW(n) expand to "grid, block, smem" before the arguments are split. */
#define MF__CU_RUN(ctx, op, kernel, ...) MF__CU_RUN_(ctx, op, kernel, __VA_ARGS__)
#define MF__CU_RUN_(ctx, op, kernel, grid, block, smem, ...) \
    (MF_LAUNCH(kernel, grid, block, smem, MF__CU(ctx)->stream, __VA_ARGS__), \
     mf__cu_launched((ctx), (op), #kernel, dim3(grid), dim3(block), (size_t)(smem)))

static unsigned mf__cu_grid(long long n, int bs) {
    long long g = (n + bs - 1) / bs;
    if (g > (1 << 20)) g = 1 << 20; /* the kernels loop over the rest (grid-stride) */
    return (unsigned)(g < 1 ? 1 : g);
}
#define MF__CU_LOOP(i, n) \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (long long)(n); \
         i += (long long)gridDim.x * blockDim.x)
#define MF__CU_BS 256  /* threads of elementwise kernels */
#define MF__CU_ROW 128 /* threads of the row kernels (softmax, layernorm, attention, ...) */
/* grid, block, smem of an elementwise (MF__CU_LOOP) kernel over n elements, for MF__CU_RUN */
#define MF__EW(n) mf__cu_grid((long long)(n), MF__CU_BS), MF__CU_BS, 0

/* ---- block reductions, the shared-memory opt-in -------------------------------------------- */
/* Sum (or max) over the block; every thread gets the result. blockDim.x is a multiple of 32;
   sh holds 32 values of shared memory. The order is fixed: the result is deterministic. */
template <class T> static __device__ T mf__cu_bred(T v, T *sh, int is_max) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5, o, k;
    for (o = 16; o > 0; o >>= 1) {
        T u = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? (u > v ? u : v) : v + u;
    }
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = sh[0];
    for (k = 1; k < nw; k++) v = is_max ? (sh[k] > v ? sh[k] : v) : v + sh[k];
    __syncthreads();
    return v;
}

/* Give `kernel` `bytes` of dynamic shared memory per block. The block's total is that plus the kernel's
   static __shared__ bytes (cudaFuncGetAttributes): past 48 KiB a kernel must opt in, up to the device's
   limit (smem_optin, read once per context); beyond it, fail with a message naming the op, what needed
   the memory and the fix, rather than the launch's bare error. */
template <class K> static int mf__cu_smem(mf_ctx *ctx, K kernel, size_t bytes, const char *op, const char *what,
                                          const char *fix) {
    size_t lim = (size_t)MF__CU(ctx)->smem_optin, st;
    cudaFuncAttributes fa;
    if (MF_CUDA_CHECK(ctx, op, cudaFuncGetAttributes(&fa, kernel)) < 0) return -1;
    st = fa.sharedSizeBytes;
    if (bytes + st <= 48 * 1024) return 0;
    if (bytes + st > lim)
        return (mf__fail(ctx, "%s: %s needs %zu bytes of shared memory per block (%zu dynamic + %zu static), more than "
                         "this GPU's %zu: %s", op, what, bytes + st, bytes, st, lim, fix), -1);
    return MF_CUDA_CHECK(ctx, op, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

/* ==== [cu:memory] =========================================================================== */
/* Device allocations (checked: running out names what needed the memory), the activation arena (a
   chain of cudaMalloc blocks, merged into one on mf_reset), copies and zeroing on the context's
   stream, the persistent device scratch and its host staging. */
static void *mf__cu_dalloc(mf_ctx *ctx, size_t bytes, const char *what) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess && !what) { /* a request that may fail (mf__param_fit) */
        (void)cudaGetLastError();
        return NULL;
    }
    if (e != cudaSuccess) { /* name the request, the device's free / total memory and the op that asked */
        size_t free_b = 0, total_b = 0;
        char who[96];
        (void)cudaGetLastError();
        if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) { (void)cudaGetLastError(); free_b = total_b = 0; }
        mf__fail(ctx, "out of GPU memory: %s, asked by %s: cudaMalloc(%zu bytes) failed (%s) with %zu of the device's "
                 "%zu bytes free; make the batch, the sequence or the model smaller, or free the GPU of other work",
                 what, mf__mem_who(ctx, who, sizeof who), bytes, cudaGetErrorString(e), free_b, total_b);
        return NULL;
    }
    return p;
}
static void mf__cu_dfree(mf_ctx *ctx, void *p) {
    if (p) MF_CUDA_CHECK(ctx, "cudaFree", cudaFree(p));
}

static void *mf__cu_arena(mf_ctx *ctx, size_t bytes) {
    mf__cu *cu = MF__CU(ctx);
    mf__cu_block *b = cu->blocks;
    bytes = (bytes + MF__CU_ALIGN - 1) & ~(size_t)(MF__CU_ALIGN - 1);
    if (bytes == 0) bytes = MF__CU_ALIGN;
    if (!b || b->used + bytes > b->cap) {
        size_t cap = mf__arena_block_cap(ctx, b ? 2 * b->cap : ((size_t)16 << 20), bytes); /* 0: over the cap */
        mf__cu_block *nb;
        if (!cap) return NULL;
        if (!(nb = (mf__cu_block *)mf__xmalloc(sizeof(mf__cu_block)))) return mf__fail(ctx, "out of memory: device arena bookkeeping");
        if (!(nb->base = (char *)mf__cu_dalloc(ctx, cap, "the activation arena"))) {
            MF_FREE(nb);
            return NULL;
        }
        nb->cap = cap; nb->used = 0; nb->next = b;
        cu->blocks = b = nb;
        ctx->arena_bytes += cap;
    }
    {
        void *p = b->base + b->used;
        b->used += bytes;
        ctx->act_used += bytes;
        if (ctx->act_used > ctx->act_peak) ctx->act_peak = ctx->act_used;
        cu->arena_used += bytes;
        if (cu->arena_used > cu->arena_peak) cu->arena_peak = cu->arena_used;
        return p;
    }
}
static void mf__cu_blocks_free(mf_ctx *ctx, mf__cu_block *b) {
    while (b) { mf__cu_block *n = b->next; mf__cu_dfree(ctx, b->base); MF_FREE(b); b = n; }
}
/* the parameters may have changed: the bf16 weight copy is made again before the next GEMM */
static void mf__cu_params_changed(mf_ctx *ctx) { MF__CU(ctx)->wbf_stale = 1; }
static int mf__cu_in_params(const mf_ctx *ctx, const void *p) {
    return ctx->p_data && (const float *)p >= ctx->p_data && (const float *)p < ctx->p_data + ctx->p_cap;
}
/* A step that needed several blocks (the first, or a larger one) leaves one block of the most it held
   at once: later steps of that size allocate nothing, and hold no more than they use (the doubling
   blocks of a first step add up to as much as twice that). */
static void mf__cu_reset(mf_ctx *ctx) {
    mf__cu *cu = MF__CU(ctx);
    size_t total = 0, peak = ctx->act_peak, need = cu->arena_peak;
    mf__cu_block *b;
    mf__cu_params_changed(ctx); /* a new step: whatever wrote the parameters, the next forward sees it */
    cu->arena_used = cu->arena_peak = 0;
    if (!cu->blocks) return;
    if (!cu->blocks->next) { cu->blocks->used = 0; return; }
    for (b = cu->blocks; b; b = b->next) total += b->cap;
    mf__cu_blocks_free(ctx, cu->blocks); /* cudaFree waits for the kernels still using them */
    cu->blocks = NULL;
    ctx->arena_bytes -= total; /* mf__cu_arena adds the merged block back */
    if (mf__cu_arena(ctx, need)) cu->blocks->used = 0;
    cu->arena_used = cu->arena_peak = 0;
    ctx->act_used = 0;
    ctx->act_peak = peak;
}

static int mf__cu_copy(mf_ctx *ctx, void *dst, const void *src, size_t bytes, int kind) {
    mf__cu *cu = MF__CU(ctx);
    cudaMemcpyKind k = kind == MF__H2D ? cudaMemcpyHostToDevice : kind == MF__D2H ? cudaMemcpyDeviceToHost
                                                                                 : cudaMemcpyDeviceToDevice;
    if (!bytes) return 0;
    if (mf__cu_in_params(ctx, dst)) mf__cu_params_changed(ctx);
    if (MF__CU_RT(ctx, "copy", cudaMemcpyAsync(dst, src, bytes, k, cu->stream)) < 0) return -1;
    if (kind == MF__D2H) return MF__CU_RT(ctx, "copy to host", cudaStreamSynchronize(cu->stream));
    return 0;
}
static int mf__cu_zero(mf_ctx *ctx, void *dst, size_t bytes) {
    if (!bytes) return 0;
    if (mf__cu_in_params(ctx, dst)) mf__cu_params_changed(ctx);
    return MF__CU_RT(ctx, "zero", cudaMemsetAsync(dst, 0, bytes, MF__CU(ctx)->stream));
}
/* persistent device scratch of at least bytes (its contents do not survive a call that grows it) */
static void *mf__cu_scratch(mf_ctx *ctx, size_t bytes) {
    mf__cu *cu = MF__CU(ctx);
    if (bytes > cu->scratch_cap) {
        size_t cap = bytes < 4096 ? 4096 : 2 * bytes;
        mf__cu_dfree(ctx, cu->scratch);
        cu->scratch_cap = 0;
        if (!(cu->scratch = mf__cu_dalloc(ctx, cap, "scratch"))) return NULL;
        cu->scratch_cap = cap;
    }
    return cu->scratch;
}
static void *mf__cu_host(mf_ctx *ctx, size_t bytes) {
    mf__cu *cu = MF__CU(ctx);
    if (bytes > cu->host_cap) {
        void *p = MF_REALLOC(cu->host, 2 * bytes);
        if (!p) return mf__fail(ctx, "out of memory: %zu bytes of host staging", 2 * bytes);
        cu->host = p; cu->host_cap = 2 * bytes;
    }
    return cu->host;
}

/* ==== [cu:storage] ========================================================================== */
/* Activations in bf16 (MF_PREC_BF16): the output of an op marked MF__OP_BF16 (a product, a normalised
   or activated value) that takes a gradient is stored in bf16 (t->bf16, mf__store_bf16), as bf16
   autocast keeps it: half the memory of what the backward keeps. The parameters, their gradients, the
   activation gradients, the residual stream (sums) and every reduction stay fp32. Kernels that know
   bf16 values load and store through mf__cu_ld / mf__cu_st; for the others mf__cu_dispatch widens
   their bf16 inputs (and, in the backward, their output's values) into a float scratch that the
   next op reuses, and narrows a bf16 output from there: every op reads floats, and no float copy
   outlives its op. */
static int mf__cu_bf16_storage(const mf_ctx *ctx) { return MF__CU(ctx)->prec == MF_PREC_BF16; }
static __device__ __forceinline__ float mf__cu_ld(const float *p, int bf16, long long i) {
    return bf16 ? __bfloat162float(((const __nv_bfloat16 *)p)[i]) : p[i];
}
static __device__ __forceinline__ void mf__cu_st(float *p, int bf16, long long i, float v) {
    if (bf16) ((__nv_bfloat16 *)p)[i] = __float2bfloat16(v);
    else p[i] = v;
}
static __global__ void mf__k_to_bf16(__nv_bfloat16 *y, const float *x, long long n) {
    MF__CU_LOOP(i, n) y[i] = __float2bfloat16(x[i]);
}
static __global__ void mf__k_from_bf16(float *y, const __nv_bfloat16 *x, long long n) {
    MF__CU_LOOP(i, n) y[i] = __bfloat162float(x[i]);
}
/* make *buf hold at least `bytes` (its contents are lost when it grows; at least 16 KiB); counted
   in aux_bytes */
#define MF__CU_GROW_MIN 16384
/* free a buffer of mf__cu_grow (cap bytes) */
static void mf__cu_release(mf_ctx *ctx, void *buf, size_t cap) {
    mf__cu_dfree(ctx, buf);
    ctx->aux_bytes -= cap;
}
static int mf__cu_grow(mf_ctx *ctx, void **buf, size_t *cap, size_t bytes, const char *what) {
    size_t want = bytes < MF__CU_GROW_MIN ? MF__CU_GROW_MIN : bytes;
    if (bytes <= *cap) return 0;
    if (mf__mem_grant(ctx, want - *cap, what) < 0) return -1;
    mf__cu_release(ctx, *buf, *cap);
    *cap = 0;
    if (!(*buf = mf__cu_dalloc(ctx, want, what))) return -1;
    *cap = want;
    ctx->aux_bytes += want;
    return 0;
}
/* an op that reads or writes a bf16 tensor: an input, or its output */
static int mf__cu_has_bf16(const mf_tensor *out) {
    int k;
    if (out->bf16) return 1;
    for (k = 0; k < MF_MAX_SRC; k++) if (out->src[k] && out->src[k]->bf16) return 1;
    return 0;
}
/* The float view of an op's bf16 tensors (mf__cu_floats_begin / _end): each distinct one gets a
   float slice of the widening scratch, its data pointer meanwhile */
typedef struct mf__cu_floats {
    mf_tensor *t[MF_MAX_SRC + 1];
    float *bf16_data[MF_MAX_SRC + 1]; /* the tensor's own (bf16) data */
    int n, out;                       /* out: t[n - 1] is the forward's output, narrowed at the end */
} mf__cu_floats;
/* the forward's output narrowed into its bf16 data, every tensor back on it; returns r (the op's) or -1 */
static int mf__cu_floats_end(mf_ctx *ctx, mf__cu_floats *fl, int r) {
    int j;
    if (r == 0 && fl->out) {
        mf_tensor *t = fl->t[fl->n - 1];
        r = MF__CU_RUN(ctx, t->op->name, mf__k_to_bf16, MF__EW(t->ne), (__nv_bfloat16 *)fl->bf16_data[fl->n - 1],
                       (const float *)t->data, (long long)t->ne);
    }
    for (j = 0; j < fl->n; j++) { fl->t[j]->data = fl->bf16_data[j]; fl->t[j]->bf16 = 1; }
    return r;
}

static int mf__cu_floats_begin(mf_ctx *ctx, mf_tensor *out, int backward, mf__cu_floats *fl) {
    mf__cu *cu = MF__CU(ctx);
    size_t bytes = 0, at = 0;
    int k, j;
    fl->n = fl->out = 0;
    for (k = 0; k <= MF_MAX_SRC; k++) { /* the inputs, then the output */
        mf_tensor *t = k < MF_MAX_SRC ? out->src[k] : out;
        int dup = 0;
        if (!t || !t->bf16) continue;
        for (j = 0; j < fl->n; j++) dup |= fl->t[j] == t;
        if (dup) continue;
        fl->t[fl->n] = t; fl->bf16_data[fl->n++] = t->data;
        bytes += ((size_t)t->ne * sizeof(float) + MF__CU_ALIGN - 1) / MF__CU_ALIGN * MF__CU_ALIGN;
    }
    fl->out = !backward && out->bf16;
    if (mf__cu_grow(ctx, &cu->wide, &cu->wide_cap, bytes, "float copies of bf16 activations") < 0) return -1;
    for (j = 0; j < fl->n; j++) {
        mf_tensor *t = fl->t[j];
        float *f = (float *)((char *)cu->wide + at);
        at += ((size_t)t->ne * sizeof(float) + MF__CU_ALIGN - 1) / MF__CU_ALIGN * MF__CU_ALIGN;
        t->data = f; /* (the output's values are the op's to write) */
        t->bf16 = 0;
        if (!(fl->out && j == fl->n - 1) &&
            MF__CU_RUN(ctx, out->op->name, mf__k_from_bf16, MF__EW(t->ne), f, (const __nv_bfloat16 *)fl->bf16_data[j],
                       (long long)t->ne) < 0) {
            fl->out = 0;
            return mf__cu_floats_end(ctx, fl, -1);
        }
    }
    return 0;
}

/* ==== [cu:gemm] ============================================================================= */
/* Row-major C_i = op(A_i) op(B_i) + beta C_i (i < batch), as mf__gemm: column-major cuBLAS computes
   C^T = op(B)^T op(A)^T. sC == 0 with batch > 1: every product adds into the same C.
   MF_PREC_BF16: A and B are read in bf16 (cublasGemmEx, CUBLAS_COMPUTE_32F: fp32 accumulation; fp32
   C, or bf16 for an activation stored so, [cu:storage]). An operand inside the flat parameter buffer
   (a weight) is read from the bf16 copy of the parameters, made once per change of the parameters;
   an activation stored in bf16 is read where it lies; any other operand (a gradient, an fp32
   activation) is converted into a scratch that the next product reuses, so no bf16 copy outlives
   its product. */
/* make *buf hold at least n bf16 values (mf__cu_grow; *cap counts values) */
static int mf__cu_bf16_buf(mf_ctx *ctx, __nv_bfloat16 **buf, int64_t *cap, int64_t n, const char *what) {
    void *b = *buf;
    size_t bytes = (size_t)*cap * sizeof(__nv_bfloat16);
    int r = mf__cu_grow(ctx, &b, &bytes, (size_t)n * sizeof(__nv_bfloat16), what);
    *buf = (__nv_bfloat16 *)b;
    *cap = (int64_t)(bytes / sizeof(__nv_bfloat16));
    return r;
}
/* the bf16 copy of the parameters, converted again when they may have changed */
static const __nv_bfloat16 *mf__cu_weights_bf16(mf_ctx *ctx, const char *op) {
    mf__cu *cu = MF__CU(ctx);
    size_t held = (size_t)cu->wbf_cap * sizeof(__nv_bfloat16);
    if (cu->wbf_cap > ctx->p_cap && held > MF__CU_GROW_MIN) { /* the parameters were cut to fit (mf__param_fit) */
        mf__cu_release(ctx, cu->wbf, held);
        cu->wbf = NULL;
        cu->wbf_cap = 0;
    }
    if (cu->wbf_cap < ctx->p_cap) {
        if (mf__cu_bf16_buf(ctx, &cu->wbf, &cu->wbf_cap, ctx->p_cap, "bf16 copies (the weights)") < 0) return NULL;
        cu->wbf_stale = 1;
    }
    if (cu->wbf_stale) {
        if (MF__CU_RUN(ctx, op, mf__k_to_bf16, MF__EW(ctx->p_used), cu->wbf, (const float *)ctx->p_data,
                       (long long)ctx->p_used) < 0)
            return NULL;
        cu->wbf_stale = 0;
    }
    return cu->wbf;
}
/* the values a strided product reads of an operand: batch matrices of rows x cols (rows ld apart),
   stride apart */
static long long mf__cu_gemm_extent(long long rows, long long cols, long long ld, long long stride, int batch) {
    return (stride && batch > 1 ? (long long)(batch - 1) * stride : 0) + (rows - 1) * ld + cols;
}
/* bf16 versions of A (n_a values) and B (n_b): bf16 already (ab, bb: activations stored in bf16), from
   the weight copy, or converted into scratch */
static int mf__cu_gemm_operands(mf_ctx *ctx, const char *op, const float *A, int ab, long long n_a, const float *B,
                                int bb, long long n_b, const __nv_bfloat16 **a, const __nv_bfloat16 **b) {
    mf__cu *cu = MF__CU(ctx);
    int wa = !ab && mf__cu_in_params(ctx, A), wb = !bb && mf__cu_in_params(ctx, B);
    int ca = !ab && !wa, cb = !bb && !wb; /* converted */
    long long off_b = ca ? (n_a + 127) / 128 * 128 : 0; /* B's scratch after A's, 256-byte aligned */
    const __nv_bfloat16 *w = NULL;
    if ((wa || wb) && !(w = mf__cu_weights_bf16(ctx, op))) return -1;
    if ((ca || cb) && mf__cu_bf16_buf(ctx, &cu->gemm_bf, &cu->gemm_bf_cap, off_b + (cb ? n_b : 0),
                                      "bf16 copies (GEMM scratch)") < 0)
        return -1;
    *a = ab ? (const __nv_bfloat16 *)A : wa ? w + (A - ctx->p_data) : cu->gemm_bf;
    *b = bb ? (const __nv_bfloat16 *)B : wb ? w + (B - ctx->p_data) : cu->gemm_bf + off_b;
    if (ca && MF__CU_RUN(ctx, op, mf__k_to_bf16, MF__EW(n_a), cu->gemm_bf, A, n_a) < 0) return -1;
    if (cb && MF__CU_RUN(ctx, op, mf__k_to_bf16, MF__EW(n_b), cu->gemm_bf + off_b, B, n_b) < 0) return -1;
    return 0;
}
/* which operands of a product are activations stored in bf16 ([cu:storage]) */
enum { MF__CU_A_BF16 = 1, MF__CU_B_BF16 = 2, MF__CU_C_BF16 = 4 };
/* the most values of a float operand converted to bf16 at once (8 MB of scratch; mf__cu.bf16_slice):
   a larger one (a gradient of a wide activation) is multiplied by slices */
#define MF__CU_BF16_SLICE ((long long)1 << 22)
/* element i of tensor data p holding floats, or bf16 when bf16 */
static const float *mf__cu_at(const float *p, int bf16, long long i) {
    return (const float *)((const char *)p + i * (bf16 ? 2 : (long long)sizeof(float)));
}
/* mf__cu_gemm_ld in bf16; st: MF__CU_*_BF16 (a bf16 C is rounded once, from the fp32 accumulators plus
   beta times its bf16 values) */
static int mf__cu_gemm_bf16(mf_ctx *ctx, const char *op, int ta, int tb, int M, int N, int K, const float *A, int lda,
                            long long sA, const float *B, int ldb, long long sB, float beta, float *C, int ldc,
                            long long sC, int batch, int st) {
    cublasHandle_t h = MF__CU(ctx)->blas;
    int i;
    const float one = 1.0f;
    const __nv_bfloat16 *a, *b;
    cudaDataType_t ct = st & MF__CU_C_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    int rows = ta ? K : M, cols = ta ? M : K; /* A as stored */
    long long step = MF__CU(ctx)->bf16_slice / cols > 0 ? MF__CU(ctx)->bf16_slice / cols : 1;
    if (batch == 1 && !(st & MF__CU_A_BF16) && !mf__cu_in_params(ctx, A) && rows > step) {
        /* a large A to convert (a float gradient): by slices of its rows, each converted into the
           scratch in turn (M rows of C, or K: the slices' products add up in C) */
        for (long long r0 = 0; r0 < rows; r0 += step) {
            int n = (int)(rows - r0 < step ? rows - r0 : step);
            const float *As = A + r0 * lda;
            const float *Bs = mf__cu_at(B, st & MF__CU_B_BF16, tb ? r0 : r0 * ldb);
            float *Cs = (float *)mf__cu_at(C, st & MF__CU_C_BF16, r0 * ldc);
            if (ta ? mf__cu_gemm_bf16(ctx, op, 1, tb, M, N, n, As, lda, 0, Bs, ldb, 0, r0 ? 1.0f : beta, C, ldc, 0, 1, st)
                   : mf__cu_gemm_bf16(ctx, op, 0, tb, n, N, K, As, lda, 0, B, ldb, 0, beta, Cs, ldc, 0, 1, st))
                return -1;
        }
        return 0;
    }
    if (mf__cu_gemm_operands(ctx, op, A, st & MF__CU_A_BF16, mf__cu_gemm_extent(rows, cols, lda, sA, batch), B,
                             st & MF__CU_B_BF16, mf__cu_gemm_extent(tb ? N : K, tb ? K : N, ldb, sB, batch), &a, &b) < 0)
        return -1;
    if (batch > 1 && sC == 0) {
        for (i = 0; i < batch; i++) {
            float bt = i ? 1.0f : beta;
            if (MF__CU_BLAS(ctx, op, M, N, K, batch, cublasGemmEx(h, ob, oa, N, M, K, &one, b + i * sB, CUDA_R_16BF, ldb, a + i * sA,
                                                      CUDA_R_16BF, lda, &bt, C, ct, ldc, CUBLAS_COMPUTE_32F,
                                                      CUBLAS_GEMM_DEFAULT)) < 0)
                return -1;
        }
        return 0;
    }
    return MF__CU_BLAS(ctx, op, M, N, K, batch, cublasGemmStridedBatchedEx(h, ob, oa, N, M, K, &one, b, CUDA_R_16BF, ldb, sB, a,
                                                               CUDA_R_16BF, lda, sA, &beta, C, ct, ldc, sC,
                                                               batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
/* C_i = op(A_i) op(B_i) + beta * C_i for i < batch (row-major, as the CPU's mf__gemm_ld), rows lda, ldb,
   ldc floats apart; sC == 0 with batch > 1: every product adds into the same C. In the context's
   precision (fp32, TF32 through the handle's math mode, bf16). */
static int mf__cu_gemm_run(mf_ctx *ctx, const char *op, int ta, int tb, int M, int N, int K, const float *A, int lda,
                           long long sA, const float *B, int ldb, long long sB, float beta, float *C, int ldc,
                           long long sC, int batch) {
    cublasHandle_t h = MF__CU(ctx)->blas;
    int i;
    const float one = 1.0f;
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (!mf_ok(ctx)) return -1;
    if (MF__CU(ctx)->prec == MF_PREC_BF16)
        return mf__cu_gemm_bf16(ctx, op, ta, tb, M, N, K, A, lda, sA, B, ldb, sB, beta, C, ldc, sC, batch, 0);
    if (batch > 1 && sC == 0) {
        for (i = 0; i < batch; i++) {
            float b = i ? 1.0f : beta;
            if (MF__CU_BLAS(ctx, op, M, N, K, batch, cublasSgemm(h, ob, oa, N, M, K, &one, B + i * sB, ldb, A + i * sA, lda, &b, C,
                                                     ldc)) < 0)
                return -1;
        }
        return 0;
    }
    if (batch == 1)
        return MF__CU_BLAS(ctx, op, M, N, K, batch, cublasSgemm(h, ob, oa, N, M, K, &one, B, ldb, A, lda, &beta, C, ldc));
    return MF__CU_BLAS(ctx, op, M, N, K, batch, cublasSgemmStridedBatched(h, ob, oa, N, M, K, &one, B, ldb, sB, A, lda, sA,
                                                              &beta, C, ldc, sC, batch));
}
/* mf__cu_gemm_run, timed as GEMM while profiling (mf_set_profile) */
static int mf__cu_gemm_ld(mf_ctx *ctx, const char *op, int ta, int tb, int M, int N, int K, const float *A, int lda,
                          long long sA, const float *B, int ldb, long long sB, float beta, float *C, int ldc,
                          long long sC, int batch) {
    double t0 = mf__gemm_t0(ctx);
    int r = mf__cu_gemm_run(ctx, op, ta, tb, M, N, K, A, lda, sA, B, ldb, sB, beta, C, ldc, sC, batch);
    mf__gemm_t1(ctx, t0);
    return r;
}
/* mf__cu_gemm_ld on dense matrices (rows as long as the matrix is wide) */
static int mf__cu_gemm(mf_ctx *ctx, const char *op, int ta, int tb, int M, int N, int K, const float *A,
                       long long sA, const float *B, long long sB, float beta, float *C, long long sC, int batch) {
    return mf__cu_gemm_ld(ctx, op, ta, tb, M, N, K, A, ta ? M : K, sA, B, tb ? K : N, sB, beta, C, N, sC, batch);
}
/* one dense product whose operands may be activations stored in bf16 (st: MF__CU_*_BF16; they exist in
   MF_PREC_BF16 only) */
static int mf__cu_gemm_stored(mf_ctx *ctx, const char *op, int st, int ta, int tb, int M, int N, int K, const float *A,
                              const float *B, float beta, float *C) {
    double t0;
    int r;
    if (!st) return mf__cu_gemm(ctx, op, ta, tb, M, N, K, A, 0, B, 0, beta, C, 0, 1);
    t0 = mf__gemm_t0(ctx);
    r = mf__cu_gemm_bf16(ctx, op, ta, tb, M, N, K, A, ta ? M : K, 0, B, tb ? K : N, 0, beta, C, N, 0, 1, st);
    mf__gemm_t1(ctx, t0);
    return r;
}

/* ==== [cu:ops] ============================================================================== */
/* The CUDA forward / backward of every op descriptor of [mf:ops], in its order: each op's kernels,
   then its host wrappers mf__cu_<op>_fwd / _bwd (the rows of mf__cu_ops in [cu:backend]). A kernel
   several ops use sits with the first of them (the bias kernels with linear, mf__k_add_to with
   reshape). Elementwise kernels are grid-stride loops (MF__CU_LOOP) launched with MF__EW(n); the
   row kernels (softmax, log_softmax, cross_entropy, layernorm) run one block of MF__CU_ROW threads
   per row. */
typedef int (*mf__cu_fn)(mf_ctx *ctx, mf_tensor *out);

/* ---- column reductions over rows (two passes, fixed order: deterministic) ------------------ */
/* The gradients of biases, LayerNorm's gamma / beta, a broadcast operand and sum_axis add a term
   over many rows (B*T) into few columns. One thread per column would leave most of the GPU idle,
   so pass 1 runs a 2-D grid: block (x, y) sums a chunk of rows of a tile of MF__CU_CR_TX columns,
   its MF__CU_CR_TY row lanes taking every TY-th row and then added in lane order (mf__cu_tile_sum);
   the partial sums of the chunks go to the device scratch, and pass 2 adds them per column in chunk
   order. No atomics, and the split depends on the shape only (not on the GPU): the bits are the
   same run to run, on any GPU. Few rows or many columns: one chunk, pass 1 writes the result. */
#define MF__CU_CR_TX 32      /* columns of a tile: a warp reads 32 consecutive floats of a row */
#define MF__CU_CR_TY 8       /* row lanes of a block */
#define MF__CU_CR_BLOCKS 528 /* pass 1's target block count: 4 per SM of an H100 / H200 (132 SMs) */
#define MF__CU_CR_MIN 64     /* fewest rows of a chunk (8 per row lane) */
enum { MF__CR_SUM, MF__CR_MUL, MF__CR_LN }; /* the term: g; g * a; LayerNorm's g * xhat and g */
typedef struct mf__cu_colred {
    float *dst0, *dst1;   /* += (or =) the column sums; dst1: LayerNorm's beta gradient (NULL: none) */
    const float *g;       /* element (r, j) at g[(j / inner) * rows * inner + r * inner + j % inner] */
    const float *a;       /* MF__CR_MUL: times a at the same index; MF__CR_LN: x (bf16 when ab) */
    const float *st;      /* MF__CR_LN: (mean, rstd) of each row */
    long long rows, cols, inner; /* inner == cols: plain rows of cols values */
    int ab, kind, accumulate;
    float sign;           /* of each term (-1: sub's second operand) */
} mf__cu_colred;
/* the sum of v over the block's row lanes (threadIdx.y), in lane order, for the threads of lane 0;
   sh: shared [MF__CU_CR_TY][MF__CU_CR_TX + 1] (every thread of the block calls it) */
static __device__ float mf__cu_tile_sum(float v, float (*sh)[MF__CU_CR_TX + 1]) {
    int k;
    sh[threadIdx.y][threadIdx.x] = v;
    __syncthreads();
    if (threadIdx.y == 0)
        for (k = 1; k < MF__CU_CR_TY; k++) v += sh[k][threadIdx.x];
    __syncthreads();
    return v;
}
static __device__ void mf__cu_cr_store(const mf__cu_colred &p, long long j, float s0, float s1) {
    if (p.dst0) p.dst0[j] = p.accumulate ? p.dst0[j] + s0 : s0;
    if (p.dst1) p.dst1[j] = p.accumulate ? p.dst1[j] + s1 : s1;
}
/* pass 1: block (tile x, chunk y) of MF__CU_CR_TX x MF__CU_CR_TY threads; part[(q * nchunk + c) * cols + j]
   (q: dst0, dst1) when nchunk > 1, else the result */
static __global__ void mf__k_colred(mf__cu_colred p, float *part, long long chunk, int nchunk) {
    __shared__ float sh[MF__CU_CR_TY][MF__CU_CR_TX + 1];
    long long j = (long long)blockIdx.x * MF__CU_CR_TX + threadIdx.x, r0 = (long long)blockIdx.y * chunk, r;
    long long r1 = r0 + chunk < p.rows ? r0 + chunk : p.rows;
    float s0 = 0.0f, s1 = 0.0f;
    if (j < p.cols) {
        long long base = p.inner == p.cols ? j : (j / p.inner) * p.rows * p.inner + j % p.inner;
        for (r = r0 + threadIdx.y; r < r1; r += MF__CU_CR_TY) {
            long long i = base + r * p.inner;
            float g = p.g[i];
            if (p.kind == MF__CR_LN) {
                s0 += g * (mf__cu_ld(p.a, p.ab, i) - p.st[2 * r]) * p.st[2 * r + 1];
                s1 += g;
            } else s0 += (p.kind == MF__CR_MUL ? g * mf__cu_ld(p.a, p.ab, i) : g) * p.sign;
        }
    }
    s0 = mf__cu_tile_sum(s0, sh);
    if (p.kind == MF__CR_LN) s1 = mf__cu_tile_sum(s1, sh);
    if (threadIdx.y != 0 || j >= p.cols) return;
    if (nchunk == 1) mf__cu_cr_store(p, j, s0, s1);
    else {
        part[blockIdx.y * p.cols + j] = s0;
        if (p.kind == MF__CR_LN) part[(nchunk + blockIdx.y) * p.cols + j] = s1;
    }
}
/* pass 2: each column's partial sums in chunk order */
static __global__ void mf__k_colred_end(mf__cu_colred p, const float *part, int nchunk) {
    MF__CU_LOOP(j, p.cols) {
        float s0 = 0.0f, s1 = 0.0f;
        for (int c = 0; c < nchunk; c++) {
            s0 += part[c * p.cols + j];
            if (p.kind == MF__CR_LN) s1 += part[(nchunk + c) * p.cols + j];
        }
        mf__cu_cr_store(p, j, s0, s1);
    }
}
/* the chunks of a reduction of rows x cols: enough blocks to fill the GPU (MF__CU_CR_BLOCKS), each
   chunk at least MF__CU_CR_MIN rows; *chunk rows each (the last one ragged) */
static int mf__cu_colred_split(long long rows, long long cols, long long *chunk) {
    long long tiles = (cols + MF__CU_CR_TX - 1) / MF__CU_CR_TX, want = (MF__CU_CR_BLOCKS + tiles - 1) / tiles;
    long long most = rows / MF__CU_CR_MIN, n = want < most ? want : most;
    if (n < 1) n = 1;
    *chunk = rows > 0 ? (rows + n - 1) / n : 1;
    return rows > 0 ? (int)((rows + *chunk - 1) / *chunk) : 1;
}
static int mf__cu_colred_run(mf_ctx *ctx, const char *op, mf__cu_colred p) {
    long long chunk, tiles = (p.cols + MF__CU_CR_TX - 1) / MF__CU_CR_TX;
    int nchunk = mf__cu_colred_split(p.rows, p.cols, &chunk);
    float *part = NULL;
    if (p.cols <= 0 || (!p.dst0 && !p.dst1)) return 0;
    if (nchunk > 1 && !(part = (float *)mf__cu_scratch(ctx, (size_t)(p.kind == MF__CR_LN ? 2 : 1) * nchunk * p.cols *
                                                                sizeof(float))))
        return -1;
    if (MF__CU_RUN(ctx, op, mf__k_colred, dim3((unsigned)tiles, (unsigned)nchunk), dim3(MF__CU_CR_TX, MF__CU_CR_TY), 0,
                   p, part, chunk, nchunk) < 0)
        return -1;
    return nchunk > 1 ? MF__CU_RUN(ctx, op, mf__k_colred_end, MF__EW(p.cols), p, (const float *)part, nchunk) : 0;
}
/* db[j] += sum over rows of g[r][j] (bias gradients) */
static int mf__cu_colsum_add(mf_ctx *ctx, const char *op, float *db, const float *g, long long rows, int cols) {
    mf__cu_colred p;
    memset(&p, 0, sizeof p);
    p.dst0 = db; p.g = g; p.rows = rows; p.cols = p.inner = cols; p.kind = MF__CR_SUM; p.accumulate = 1; p.sign = 1.0f;
    return mf__cu_colred_run(ctx, op, p);
}

/* ---- reductions to one value (two passes, fixed order: deterministic) ---------------------- */
/* cross_entropy, mse, sum / mean; mf__k_reduce_end also ends the clipping norm ([cu:optim]) */
#define MF__CU_RED_BLOCKS 128
/* mode 0: sum a; 1: sum (a - b)^2; 2: sum a^2 (floats); 3: sum of doubles (ad) */
static __global__ void mf__k_reduce(const float *a, const float *b, const double *ad, long long n, int mode,
                                    double *partial) {
    __shared__ double sh[32];
    double s = 0;
    MF__CU_LOOP(i, n) {
        if (mode == 0) s += a[i];
        else if (mode == 1) s += (double)(a[i] - b[i]) * (a[i] - b[i]);
        else if (mode == 2) s += (double)a[i] * a[i];
        else s += ad[i];
    }
    s = mf__cu_bred(s, sh, 0);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}
/* out[0] = sum(partial) / div (0 when zero_if_empty and div == 0); *total = the sum (may be NULL) */
static __global__ void mf__k_reduce_end(const double *partial, int np, double div, float *out, double *total) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        double s = 0;
        int k;
        for (k = 0; k < np; k++) s += partial[k];
        if (out) out[0] = div == 0 ? 0.0f : (float)(s / div);
        if (total) *total = s;
    }
}
/* mf__k_reduce + mf__k_reduce_end into out[0] (device); uses the arena for the partial sums */
static int mf__cu_reduce(mf_ctx *ctx, const char *op, const float *a, const float *b, const double *ad, long long n,
                         int mode, double div, float *out, double *total) {
    unsigned nb = mf__cu_grid(n, MF__CU_BS);
    double *partial;
    if (nb > MF__CU_RED_BLOCKS) nb = MF__CU_RED_BLOCKS;
    if (!(partial = (double *)mf__cu_arena(ctx, nb * sizeof(double)))) return -1;
    if (MF__CU_RUN(ctx, op, mf__k_reduce, nb, MF__CU_BS, 0, a, b, ad, n, mode, partial) < 0) return -1;
    return MF__CU_RUN(ctx, op, mf__k_reduce_end, 1, 32, 0, partial, (int)nb, div, out, total);
}

/* ---- matmul: a [..., M, K] @ b [..., K, N] -> [..., M, N] (cuBLAS) ------------------------- */
static int mf__cu_matmul_fwd(mf_ctx *ctx, mf_tensor *out) {
    int ta = out->iarg[MF__ARG_MM_TRANS_A], tb = out->iarg[MF__ARG_MM_TRANS_B];
    int M = out->iarg[MF__ARG_MM_M], N = out->iarg[MF__ARG_MM_N], K = out->iarg[MF__ARG_MM_K];
    int batch = out->iarg[MF__ARG_MM_BATCH], mode = out->iarg[MF__ARG_MM_MODE];
    long long sA = mode == 2 ? 0 : (long long)M * K, sB = mode == 1 ? 0 : (long long)K * N;
    if (mode == 1 && !ta)
        return mf__cu_gemm(ctx, "matmul", 0, tb, M * batch, N, K, out->src[0]->data, 0, out->src[1]->data, 0, 0.0f, out->data, 0, 1);
    return mf__cu_gemm(ctx, "matmul", ta, tb, M, N, K, out->src[0]->data, sA, out->src[1]->data, sB, 0.0f, out->data,
                       (long long)M * N, batch);
}
static int mf__cu_matmul_bwd(mf_ctx *ctx, mf_tensor *out) {
    int ta = out->iarg[MF__ARG_MM_TRANS_A], tb = out->iarg[MF__ARG_MM_TRANS_B];
    int M = out->iarg[MF__ARG_MM_M], N = out->iarg[MF__ARG_MM_N], K = out->iarg[MF__ARG_MM_K];
    int batch = out->iarg[MF__ARG_MM_BATCH], mode = out->iarg[MF__ARG_MM_MODE], r = 0;
    const float *A = out->src[0]->data, *B = out->src[1]->data, *dC = out->grad;
    float *dA = mf__g(out->src[0]), *dB = mf__g(out->src[1]);
    long long sA = mode == 2 ? 0 : (long long)M * K, sB = mode == 1 ? 0 : (long long)K * N, sC = (long long)M * N;
    const char *op = "matmul (backward)";
    if (dA) {
        if (mode == 1 && !ta) r |= mf__cu_gemm(ctx, op, 0, !tb, M * batch, K, N, dC, 0, B, 0, 1.0f, dA, 0, 1);
        else if (!ta) r |= mf__cu_gemm(ctx, op, 0, !tb, M, K, N, dC, sC, B, sB, 1.0f, dA, sA, batch);
        else r |= mf__cu_gemm(ctx, op, tb, 1, K, M, N, B, sB, dC, sC, 1.0f, dA, sA, batch);
    }
    if (dB) {
        if (mode == 1 && !ta && !tb) r |= mf__cu_gemm(ctx, op, 1, 0, K, N, M * batch, A, 0, dC, 0, 1.0f, dB, 0, 1);
        else if (mode == 1 && !ta && tb) r |= mf__cu_gemm(ctx, op, 1, 0, N, K, M * batch, dC, 0, A, 0, 1.0f, dB, 0, 1);
        else if (!tb) r |= mf__cu_gemm(ctx, op, !ta, 0, K, N, M, A, sA, dC, sC, 1.0f, dB, sB, batch);
        else r |= mf__cu_gemm(ctx, op, 1, ta, N, K, M, dC, sC, A, sA, 1.0f, dB, sB, batch);
    }
    return r ? -1 : 0;
}

/* ---- head_matmul: x [..., H, K] @ w [H, K, N] per head -> [..., H, N] (cuBLAS, strided) ----- */
static int mf__cu_head_matmul_fwd(mf_ctx *ctx, mf_tensor *out) {
    int R = out->iarg[MF__ARG_HM_ROWS], H = out->iarg[MF__ARG_HM_H], K = out->iarg[MF__ARG_HM_K];
    int N = out->iarg[MF__ARG_HM_N];
    return mf__cu_gemm_ld(ctx, "head_matmul", 0, 0, R, N, K, out->src[0]->data, H * K, K, out->src[1]->data, N,
                          (long long)K * N, 0.0f, out->data, H * N, N, H);
}
static int mf__cu_head_matmul_bwd(mf_ctx *ctx, mf_tensor *out) {
    int R = out->iarg[MF__ARG_HM_ROWS], H = out->iarg[MF__ARG_HM_H], K = out->iarg[MF__ARG_HM_K];
    int N = out->iarg[MF__ARG_HM_N];
    const float *x = out->src[0]->data, *w = out->src[1]->data, *dy = out->grad;
    float *dx = mf__g(out->src[0]), *dw = mf__g(out->src[1]);
    const char *op = "head_matmul (backward)";
    if (dx && mf__cu_gemm_ld(ctx, op, 0, 1, R, K, N, dy, H * N, N, w, N, (long long)K * N, 1.0f, dx, H * K, K, H) < 0)
        return -1;
    if (dw && mf__cu_gemm_ld(ctx, op, 1, 0, K, N, R, x, H * K, K, dy, H * N, N, 1.0f, dw, N, (long long)K * N, H) < 0)
        return -1;
    return 0;
}

/* ---- linear: x [..., in] @ w [out, in]^T + b [out] -> [..., out] --------------------------- */
/* y[r][j] += b[j] */
static __global__ void mf__k_bias_add(float *y, const float *b, long long n, int cols) {
    MF__CU_LOOP(i, n) y[i] += b[i % cols];
}
/* y[r][j] = b[j] in bf16 (the product then adds into it: one rounding of the sum, as bf16 autocast's
   linear rounds its bias to bf16) */
static __global__ void mf__k_bias_fill_bf16(__nv_bfloat16 *y, const float *b, long long n, int cols) {
    MF__CU_LOOP(i, n) y[i] = __float2bfloat16(b[i % cols]);
}
/* x and the output may be bf16 ([cu:storage]) */
static int mf__cu_linear_fwd(mf_ctx *ctx, mf_tensor *out) {
    mf_tensor *x = out->src[0], *w = out->src[1], *b = out->src[2];
    int in = w->shape[1], nout = w->shape[0], st = (x->bf16 ? MF__CU_A_BF16 : 0) | (out->bf16 ? MF__CU_C_BF16 : 0);
    long long rows = mf__rows(x);
    if (b && out->bf16 &&
        MF__CU_RUN(ctx, "linear", mf__k_bias_fill_bf16, MF__EW(out->ne), (__nv_bfloat16 *)out->data,
                   (const float *)b->data, (long long)out->ne, nout) < 0)
        return -1;
    if (mf__cu_gemm_stored(ctx, "linear", st, 0, 1, (int)rows, nout, in, x->data, w->data, b && out->bf16 ? 1.0f : 0.0f,
                           out->data) < 0)
        return -1;
    return b && !out->bf16 ? MF__CU_RUN(ctx, "linear", mf__k_bias_add, MF__EW(out->ne), out->data, (const float *)b->data,
                                        (long long)out->ne, nout) : 0;
}
static int mf__cu_linear_bwd(mf_ctx *ctx, mf_tensor *out) {
    mf_tensor *x = out->src[0], *w = out->src[1], *b = out->src[2];
    int in = w->shape[1], nout = w->shape[0];
    long long rows = mf__rows(x);
    float *dx = mf__g(x), *dw = mf__g(w), *db = mf__g(b);
    const char *op = "linear (backward)";
    if (dx && mf__cu_gemm(ctx, op, 0, 0, (int)rows, in, nout, out->grad, 0, w->data, 0, 1.0f, dx, 0, 1) < 0) return -1;
    if (dw && mf__cu_gemm_stored(ctx, op, x->bf16 ? MF__CU_B_BF16 : 0, 1, 0, nout, in, (int)rows, out->grad, x->data,
                                 1.0f, dw) < 0)
        return -1;
    return db ? mf__cu_colsum_add(ctx, op, db, (const float *)out->grad, rows, nout) : 0;
}

/* ---- add / sub / mul with a broadcast operand ---------------------------------------------- */
/* binary ops: 0 add, 1 sub, 2 mul (MF__ADD, MF__SUB, MF__MUL) */
static __global__ void mf__k_binary(float *y, const float *a, int ab, long long na, const float *b, int bb,
                                    long long nb, long long n, int kind) {
    MF__CU_LOOP(i, n) {
        float x = mf__cu_ld(a, ab, na == n ? i : i % na), z = mf__cu_ld(b, bb, nb == n ? i : i % nb);
        y[i] = kind == MF__ADD ? x + z : kind == MF__SUB ? x - z : x * z;
    }
}
static __global__ void mf__k_binary_bwd_same(float *da, float *db, const float *g, const float *A, int ab,
                                             const float *B, int bb, long long n, int kind) {
    MF__CU_LOOP(i, n) {
        if (da) da[i] += kind == MF__MUL ? g[i] * mf__cu_ld(B, bb, i) : g[i];
        if (db) db[i] += kind == MF__MUL ? g[i] * mf__cu_ld(A, ab, i) : kind == MF__SUB ? -g[i] : g[i];
    }
}
/* the larger operand (n elements): d[i] += g[i] * (other[i % no] for mul) (negated for sub's b) */
static __global__ void mf__k_binary_bwd_big(float *d, const float *g, const float *other, int ob, long long no,
                                            long long n, int kind, int neg) {
    MF__CU_LOOP(i, n) d[i] += kind == MF__MUL ? g[i] * mf__cu_ld(other, ob, i % no) : neg ? -g[i] : g[i];
}
/* the smaller operand (ns elements, repeated n / ns times): d[j] += the sum over its repeats
   (a column reduction: rows n / ns of ns columns) */
static int mf__cu_binary_bwd_small(mf_ctx *ctx, const char *op, float *d, const float *g, const float *big, int bb,
                                   long long ns, long long n, int kind, int neg) {
    mf__cu_colred p;
    memset(&p, 0, sizeof p);
    p.dst0 = d; p.g = g; p.a = big; p.ab = bb; p.rows = n / ns; p.cols = p.inner = ns;
    p.kind = kind == MF__MUL ? MF__CR_MUL : MF__CR_SUM; p.accumulate = 1; p.sign = neg ? -1.0f : 1.0f;
    return mf__cu_colred_run(ctx, op, p);
}
/* the inputs may be bf16 ([cu:storage]; the sums of the residual stream stay floats) */
static int mf__cu_binary_fwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *a = out->src[0], *b = out->src[1];
    return MF__CU_RUN(ctx, out->op->name, mf__k_binary, MF__EW(out->ne), out->data, (const float *)a->data, a->bf16,
                      (long long)a->ne, (const float *)b->data, b->bf16, (long long)b->ne, (long long)out->ne,
                      out->iarg[MF__ARG_BINARY_KIND]);
}
static int mf__cu_binary_bwd(mf_ctx *ctx, mf_tensor *out) {
    mf_tensor *A = out->src[0], *B = out->src[1];
    float *da = mf__g(A), *db = mf__g(B);
    long long na = A->ne, nb = B->ne, n = out->ne;
    int kind = out->iarg[MF__ARG_BINARY_KIND], r = 0;
    const char *op = out->op->name;
    if (da == out->grad) da = NULL; /* an operand that passes the gradient on holds it already (recycled */
    if (db == out->grad) db = NULL; /* gradients gave it this buffer, mf__grad_shared_src) */
    if (!da && !db) return 0;
    if (na == n && nb == n)
        return MF__CU_RUN(ctx, op, mf__k_binary_bwd_same, MF__EW(n), da, db, (const float *)out->grad,
                          (const float *)A->data, A->bf16, (const float *)B->data, B->bf16, n, kind);
    if (na == n) { /* a big, b small */
        if (da) r |= MF__CU_RUN(ctx, op, mf__k_binary_bwd_big, MF__EW(n), da, (const float *)out->grad, (const float *)B->data, B->bf16, nb, n, kind, 0);
        if (db) r |= mf__cu_binary_bwd_small(ctx, op, db, (const float *)out->grad, (const float *)A->data, A->bf16, nb, n, kind, kind == MF__SUB);
    } else {
        if (db) r |= MF__CU_RUN(ctx, op, mf__k_binary_bwd_big, MF__EW(n), db, (const float *)out->grad, (const float *)A->data, A->bf16, na, n, kind, kind == MF__SUB);
        if (da) r |= mf__cu_binary_bwd_small(ctx, op, da, (const float *)out->grad, (const float *)B->data, B->bf16, na, n, kind, 0);
    }
    return r ? -1 : 0;
}

/* ---- elementwise unary ops: y = f(x); f and its parameter in MF__ARG_UNARY_KIND, MF__FARG_UNARY_S */
/* GELU as the CPU computes it (mf__av_gelu_fold in metaformer.h, its portable form step by step):
   the same table, so the CPU and the device agree to the rounding of a fused multiply-add */
static __constant__ float mf__cu_gelu_tab[2][7][16] = MF__GELU_TAB;
static __device__ float mf__cu_gelu(float x, int grad) {
    const float(*c)[16] = mf__cu_gelu_tab[grad];
    float a = fabsf(x), k = nearbyintf(a + a), s, p;
    int j;
    k = k < 15.0f ? k : 15.0f;
    s = k * -0.5f + a;
    j = (int)k;
    p = c[6][j];
    p = p * s + c[5][j];
    p = p * s + c[4][j];
    p = p * s + c[3][j];
    p = p * s + c[2][j];
    p = p * s + c[1][j];
    p = p * s + c[0][j];
    p = 7.75f - a < 0 ? 0.0f : p;
    return x < 0 ? p : grad ? 1.0f - p : x + p;
}
/* x, y: floats or bf16 (xb, yb; [cu:storage]) */
static __global__ void mf__k_unary(float *y, int yb, const float *x, int xb, long long n, int kind, float s) {
    MF__CU_LOOP(i, n) {
        float v = mf__cu_ld(x, xb, i), r;
        switch (kind) {
        case MF__GELU: r = mf__cu_gelu(v, 0); break;
        MF__UNARY_F_CASES(v, s, r)
        }
        mf__cu_st(y, yb, i, r);
    }
}
/* dx += dy f'(x); dx == dy (recycled gradients gave x this buffer, mf__grad_shared_src): dx = dy f'(x)
   in place, each element read before it is written */
static __global__ void mf__k_unary_bwd(float *dx, const float *x, int xb, const float *y, int yb, const float *g,
                                       long long n, int kind, float s) {
    int in_place = dx == g;
    MF__CU_LOOP(i, n) {
        float v = mf__cu_ld(x, xb, i), w = mf__cu_ld(y, yb, i), d;
        switch (kind) {
        case MF__GELU: d = mf__cu_gelu(v, 1); break;
        MF__UNARY_DF_CASES(v, w, s, d)
        }
        dx[i] = in_place ? g[i] * d : dx[i] + g[i] * d;
    }
}
static int mf__cu_unary_fwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    return MF__CU_RUN(ctx, out->op->name, mf__k_unary, MF__EW(out->ne), out->data, out->bf16, (const float *)x->data,
                      x->bf16, (long long)out->ne, out->iarg[MF__ARG_UNARY_KIND], out->farg[MF__FARG_UNARY_S]);
}
static int mf__cu_unary_bwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    float *dx = mf__g(x);
    if (!dx) return 0;
    return MF__CU_RUN(ctx, out->op->name, mf__k_unary_bwd, MF__EW(out->ne), dx, (const float *)x->data, x->bf16,
                      (const float *)out->data, out->bf16, (const float *)out->grad, (long long)out->ne,
                      out->iarg[MF__ARG_UNARY_KIND], out->farg[MF__FARG_UNARY_S]);
}

/* ---- softmax over the last axis, optionally causal ----------------------------------------- */
/* softmax over rows of n; causal: row r of a [Tq, n] block sees keys 0 .. r % tq + n - tq */
static __global__ void mf__k_softmax(float *y, const float *x, int n, int tq, int causal) {
    __shared__ float sh[32];
    long long r = blockIdx.x;
    const float *xr = x + r * n;
    float *yr = y + r * n, mx = -INFINITY, sum = 0;
    int vis = n, j;
    if (causal) { vis = (int)(r % tq) + n - tq + 1; vis = vis < 0 ? 0 : vis > n ? n : vis; }
    for (j = threadIdx.x; j < vis; j += blockDim.x) mx = xr[j] > mx ? xr[j] : mx;
    mx = mf__cu_bred(mx, sh, 1);
    for (j = threadIdx.x; j < vis; j += blockDim.x) { float e = expf(xr[j] - mx); yr[j] = e; sum += e; }
    sum = mf__cu_bred(sum, sh, 0);
    for (j = threadIdx.x; j < n; j += blockDim.x) yr[j] = j < vis ? yr[j] / sum : 0.0f;
}
static __global__ void mf__k_softmax_bwd(float *dx, const float *y, const float *g, int n) {
    __shared__ float sh[32];
    long long r = blockIdx.x;
    const float *yr = y + r * n, *gr = g + r * n;
    float dot = 0;
    int j;
    for (j = threadIdx.x; j < n; j += blockDim.x) dot += gr[j] * yr[j];
    dot = mf__cu_bred(dot, sh, 0);
    for (j = threadIdx.x; j < n; j += blockDim.x) dx[r * n + j] += yr[j] * (gr[j] - dot);
}
static int mf__cu_softmax_fwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    int tq = x->ndim >= 2 ? x->shape[x->ndim - 2] : 1;
    return MF__CU_RUN(ctx, "softmax", mf__k_softmax, (unsigned)mf__rows(x), MF__CU_ROW, 0, out->data,
                      (const float *)x->data, mf__last(x), tq, out->iarg[MF__ARG_SOFTMAX_CAUSAL]);
}
static int mf__cu_softmax_bwd(mf_ctx *ctx, mf_tensor *out) {
    float *dx = mf__g(out->src[0]);
    if (!dx) return 0;
    return MF__CU_RUN(ctx, "softmax (backward)", mf__k_softmax_bwd, (unsigned)mf__rows(out), MF__CU_ROW, 0, dx,
                      (const float *)out->data, (const float *)out->grad, mf__last(out));
}

/* ---- log_softmax over the last axis -------------------------------------------------------- */
/* log(sum(exp(xr - max))) of the row of n values at x[xr] (floats, or bf16 when xb), the max in *mx;
   every thread of the block calls it */
static __device__ float mf__cu_row_lse(const float *x, int xb, long long xr, int n, float *sh, float *mx_out) {
    float mx = -INFINITY, sum = 0;
    int j;
    for (j = threadIdx.x; j < n; j += blockDim.x) {
        float v = mf__cu_ld(x, xb, xr + j);
        mx = v > mx ? v : mx;
    }
    mx = mf__cu_bred(mx, sh, 1);
    for (j = threadIdx.x; j < n; j += blockDim.x) sum += expf(mf__cu_ld(x, xb, xr + j) - mx);
    *mx_out = mx;
    return logf(mf__cu_bred(sum, sh, 0));
}
static __global__ void mf__k_log_softmax(float *y, const float *x, int n) {
    __shared__ float sh[32];
    long long r = blockIdx.x;
    const float *xr = x + r * n;
    float mx, l = mf__cu_row_lse(x, 0, r * n, n, sh, &mx);
    int j;
    for (j = threadIdx.x; j < n; j += blockDim.x) y[r * n + j] = (xr[j] - mx) - l;
}
static __global__ void mf__k_log_softmax_bwd(float *dx, const float *y, const float *g, int n) {
    __shared__ float sh[32];
    long long r = blockIdx.x;
    float sum = 0;
    int j;
    for (j = threadIdx.x; j < n; j += blockDim.x) sum += g[r * n + j];
    sum = mf__cu_bred(sum, sh, 0);
    for (j = threadIdx.x; j < n; j += blockDim.x) dx[r * n + j] += g[r * n + j] - expf(y[r * n + j]) * sum;
}
static int mf__cu_log_softmax_fwd(mf_ctx *ctx, mf_tensor *out) {
    return MF__CU_RUN(ctx, "log_softmax", mf__k_log_softmax, (unsigned)mf__rows(out), MF__CU_ROW, 0, out->data,
                      (const float *)out->src[0]->data, mf__last(out));
}
static int mf__cu_log_softmax_bwd(mf_ctx *ctx, mf_tensor *out) {
    float *dx = mf__g(out->src[0]);
    if (!dx) return 0;
    return MF__CU_RUN(ctx, "log_softmax (backward)", mf__k_log_softmax_bwd, (unsigned)mf__rows(out), MF__CU_ROW, 0, dx,
                      (const float *)out->data, (const float *)out->grad, mf__last(out));
}

/* ---- cross-entropy fused with softmax ------------------------------------------------------ */
/* cross-entropy rows: st[2r] = max, st[2r+1] = log(sum(exp(x - max))); loss[r] (0 when ignored) */
/* the logits x: floats or bf16 (xb; [cu:storage]) */
static __global__ void mf__k_ce_rows(const float *x, int xb, int V, const int *tg, int ignore, float *st, double *loss) {
    __shared__ float sh[32];
    long long r = blockIdx.x;
    float mx, l = mf__cu_row_lse(x, xb, r * V, V, sh, &mx);
    if (threadIdx.x == 0) {
        st[2 * r] = mx; st[2 * r + 1] = l;
        loss[r] = tg[r] == ignore ? 0.0 : ((double)mx - mf__cu_ld(x, xb, r * V + tg[r])) + l;
    }
}
static __global__ void mf__k_ce_bwd(float *dx, const float *x, int xb, int V, const int *tg, int ignore,
                                    const float *st, const float *grad, int count, long long n) {
    float g = grad[0] / (float)count;
    MF__CU_LOOP(i, n) {
        long long r = i / V;
        if (tg[r] == ignore) continue;
        dx[i] += g * expf((mf__cu_ld(x, xb, i) - st[2 * r]) - st[2 * r + 1]);
        if (i - r * V == tg[r]) dx[i] -= g;
    }
}
/* saved: [2 * rows] max and log-sum-exp, then the targets [rows] (device copy of aux) */
static int mf__cu_ce_fwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    long long rows = mf__rows(x);
    int *tg;
    double *loss;
    out->saved = (float *)mf__cu_arena(ctx, (size_t)rows * 3 * sizeof(float));
    loss = (double *)mf__cu_arena(ctx, (size_t)rows * sizeof(double));
    if (!out->saved || !loss) return -1;
    tg = (int *)(out->saved + 2 * rows);
    if (mf__cu_copy(ctx, tg, out->aux, (size_t)rows * sizeof(int32_t), MF__H2D) < 0) return -1;
    if (MF__CU_RUN(ctx, "cross_entropy", mf__k_ce_rows, (unsigned)rows, MF__CU_ROW, 0, (const float *)x->data, x->bf16,
                   mf__last(x), (const int *)tg, out->iarg[MF__ARG_CE_IGNORE], out->saved, loss) < 0)
        return -1;
    return mf__cu_reduce(ctx, "cross_entropy", NULL, NULL, loss, rows, 3, (double)out->iarg[MF__ARG_CE_COUNT], out->data,
                         NULL);
}
static int mf__cu_ce_bwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    float *dx = mf__g(out->src[0]);
    long long rows = mf__rows(x);
    if (!dx || !out->iarg[MF__ARG_CE_COUNT]) return 0;
    return MF__CU_RUN(ctx, "cross_entropy (backward)", mf__k_ce_bwd, MF__EW(x->ne), dx, (const float *)x->data, x->bf16,
                      mf__last(x), (const int *)(out->saved + 2 * rows), out->iarg[MF__ARG_CE_IGNORE],
                      (const float *)out->saved, (const float *)out->grad, out->iarg[MF__ARG_CE_COUNT], (long long)x->ne);
}

/* ---- mse: mean((a - b)^2) -> [1] ----------------------------------------------------------- */
static __global__ void mf__k_mse_bwd(float *da, float *db, const float *a, const float *b, const float *grad, long long n) {
    float g = 2.0f * grad[0] / (float)n;
    MF__CU_LOOP(i, n) {
        float d = g * (a[i] - b[i]);
        if (da) da[i] += d;
        if (db) db[i] -= d;
    }
}
static int mf__cu_mse_fwd(mf_ctx *ctx, mf_tensor *out) {
    return mf__cu_reduce(ctx, "mse", out->src[0]->data, out->src[1]->data, NULL, out->src[0]->ne, 1,
                         (double)out->src[0]->ne, out->data, NULL);
}
static int mf__cu_mse_bwd(mf_ctx *ctx, mf_tensor *out) {
    float *da = mf__g(out->src[0]), *db = mf__g(out->src[1]);
    if (!da && !db) return 0;
    return MF__CU_RUN(ctx, "mse (backward)", mf__k_mse_bwd, MF__EW(out->src[0]->ne), da, db,
                      (const float *)out->src[0]->data, (const float *)out->src[1]->data, (const float *)out->grad,
                      (long long)out->src[0]->ne);
}

/* ---- layernorm over the last axis ---------------------------------------------------------- */
/* x and y: floats or bf16 (xb, yb; [cu:storage]); the statistics are floats */
static __global__ void mf__k_layernorm(float *y, int yb, float *st, const float *x, int xb, const float *gm,
                                       const float *bt, int D, float eps) {
    __shared__ float sh[32];
    long long r = blockIdx.x, xr = r * D;
    float mean = 0, var = 0, rstd;
    int j;
    for (j = threadIdx.x; j < D; j += blockDim.x) mean += mf__cu_ld(x, xb, xr + j);
    mean = mf__cu_bred(mean, sh, 0) / (float)D;
    for (j = threadIdx.x; j < D; j += blockDim.x) {
        float v = mf__cu_ld(x, xb, xr + j);
        var += (v - mean) * (v - mean);
    }
    var = mf__cu_bred(var, sh, 0);
    rstd = 1.0f / sqrtf(var / (float)D + eps);
    for (j = threadIdx.x; j < D; j += blockDim.x)
        mf__cu_st(y, yb, xr + j, (mf__cu_ld(x, xb, xr + j) - mean) * rstd * (gm ? gm[j] : 1.0f) + (bt ? bt[j] : 0.0f));
    if (threadIdx.x == 0) { st[2 * r] = mean; st[2 * r + 1] = rstd; }
}
static __global__ void mf__k_layernorm_bwd_x(float *dx, const float *x, int xb, const float *g, const float *gm,
                                             const float *st, int D) {
    __shared__ float sh[32];
    long long r = blockIdx.x, xr = r * D;
    const float *gr = g + r * D;
    float mean = st[2 * r], rstd = st[2 * r + 1], m1 = 0, m2 = 0;
    int j;
    for (j = threadIdx.x; j < D; j += blockDim.x) {
        float dxh = gr[j] * (gm ? gm[j] : 1.0f), xh = (mf__cu_ld(x, xb, xr + j) - mean) * rstd;
        m1 += dxh; m2 += dxh * xh;
    }
    m1 = mf__cu_bred(m1, sh, 0) / (float)D;
    m2 = mf__cu_bred(m2, sh, 0) / (float)D;
    for (j = threadIdx.x; j < D; j += blockDim.x) {
        float dxh = gr[j] * (gm ? gm[j] : 1.0f), xh = (mf__cu_ld(x, xb, xr + j) - mean) * rstd;
        dx[r * D + j] += rstd * (dxh - m1 - xh * m2);
    }
}
/* gamma / beta gradients: dg[j] += sum over rows of g * xhat, db[j] += sum of g (a column reduction) */
static int mf__cu_layernorm_bwd_gb(mf_ctx *ctx, const char *op, float *dg, float *db, const float *x, int xb,
                                   const float *g, const float *st, long long rows, int D) {
    mf__cu_colred p;
    memset(&p, 0, sizeof p);
    p.dst0 = dg; p.dst1 = db; p.g = g; p.a = x; p.ab = xb; p.st = st; p.rows = rows; p.cols = p.inner = D;
    p.kind = MF__CR_LN; p.accumulate = 1; p.sign = 1.0f;
    return mf__cu_colred_run(ctx, op, p);
}
static int mf__cu_layernorm_fwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0], *gm = out->src[1], *bt = out->src[2];
    long long rows = mf__rows(x);
    if (!(out->saved = (float *)mf__cu_arena(ctx, 2 * (size_t)rows * sizeof(float)))) return -1;
    return MF__CU_RUN(ctx, "layernorm", mf__k_layernorm, (unsigned)rows, MF__CU_ROW, 0, out->data, out->bf16, out->saved,
                      (const float *)x->data, x->bf16, (const float *)(gm ? gm->data : NULL),
                      (const float *)(bt ? bt->data : NULL), mf__last(x), out->farg[MF__FARG_LN_EPS]);
}
static int mf__cu_layernorm_bwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0], *gm = out->src[1];
    float *dx = mf__g(out->src[0]), *dg = mf__g(out->src[1]), *db = mf__g(out->src[2]);
    long long rows = mf__rows(x);
    int D = mf__last(x);
    const char *op = "layernorm (backward)";
    if (dx && MF__CU_RUN(ctx, op, mf__k_layernorm_bwd_x, (unsigned)rows, MF__CU_ROW, 0, dx, (const float *)x->data,
                         x->bf16, (const float *)out->grad, (const float *)(gm ? gm->data : NULL), (const float *)out->saved, D) < 0)
        return -1;
    if (dg || db)
        return mf__cu_layernorm_bwd_gb(ctx, op, dg, db, (const float *)x->data, x->bf16, (const float *)out->grad,
                                       (const float *)out->saved, rows, D);
    return 0;
}

/* ---- embedding: rows of table [V, D] picked by ids ----------------------------------------- */
static __global__ void mf__k_embed(float *y, const float *tb, const int *ids, long long n, int D) {
    MF__CU_LOOP(i, n) y[i] = tb[(long long)ids[i / D] * D + i % D];
}
/* The backward scatters: the positions of one id add into one row of dt. The host groups the
   positions by id (a counting sort of the ids, which it holds: O(ids + V)), in position order, and
   uploads seg = [the nseg distinct ids][nseg + 1 offsets][the positions, grouped]; block (id x,
   tile y) sums its id's positions for MF__CU_CR_TX columns (row lanes as in mf__k_colred) and adds
   into its row, which no other block writes: no atomics, a fixed order, all ids and tiles at once. */
static __global__ void mf__k_embed_bwd(float *dt, const float *g, const int *seg, int nseg, int D) {
    __shared__ float sh[MF__CU_CR_TY][MF__CU_CR_TX + 1];
    const int *off = seg + nseg, *pos = seg + 2 * nseg + 1;
    int u = blockIdx.x, k;
    for (long long j0 = (long long)blockIdx.y * MF__CU_CR_TX; j0 < D; j0 += (long long)gridDim.y * MF__CU_CR_TX) {
        long long j = j0 + threadIdx.x; /* tiles past the grid's 65535 rows loop (the same count in every thread) */
        float s = 0.0f;
        if (j < D)
            for (k = off[u] + threadIdx.y; k < off[u + 1]; k += MF__CU_CR_TY) s += g[(long long)pos[k] * D + j];
        s = mf__cu_tile_sum(s, sh);
        if (threadIdx.y == 0 && j < D) dt[(long long)seg[u] * D + j] += s;
    }
}
/* saved: the ids on the device */
static int mf__cu_embedding_fwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *tb = out->src[0];
    int D = tb->shape[1];
    long long nid = out->ne / D;
    if (!(out->saved = (float *)mf__cu_arena(ctx, (size_t)nid * sizeof(int32_t)))) return -1;
    if (mf__cu_copy(ctx, out->saved, out->aux, (size_t)nid * sizeof(int32_t), MF__H2D) < 0) return -1;
    return MF__CU_RUN(ctx, "embedding", mf__k_embed, MF__EW(out->ne), out->data, (const float *)tb->data,
                      (const int *)out->saved, (long long)out->ne, D);
}
static int mf__cu_embedding_bwd(mf_ctx *ctx, mf_tensor *out) {
    float *dt = mf__g(out->src[0]);
    int D = out->src[0]->shape[1];
    if (!dt) return 0;
    {
        const int32_t *ids = (const int32_t *)out->aux; /* the host's copy */
        int V = out->src[0]->shape[0], nseg = 0, v, *h, *cnt, *uid, *off, *pos;
        unsigned tiles;
        long long nid = out->ne / D, i, acc = 0;
        void *d;
        if (nid <= 0) return 0;
        if (!(h = (int *)mf__cu_host(ctx, ((size_t)3 * V + 1 + (size_t)nid) * sizeof(int)))) return -1;
        cnt = h; uid = h + V; off = uid + V; pos = off + V + 1;
        memset(cnt, 0, (size_t)V * sizeof(int));
        for (i = 0; i < nid; i++) cnt[ids[i]]++;
        for (v = 0; v < V; v++)
            if (cnt[v]) { uid[nseg] = v; off[nseg] = (int)acc; acc += cnt[v]; cnt[v] = off[nseg++]; } /* cnt: a cursor */
        off[nseg] = (int)acc;
        for (i = 0; i < nid; i++) pos[cnt[ids[i]]++] = (int)i;
        memmove(uid + nseg, off, (size_t)(nseg + 1) * sizeof(int)); /* pack: [uid][off][pos] */
        memmove(uid + 2 * nseg + 1, pos, (size_t)nid * sizeof(int));
        if (!(d = mf__cu_scratch(ctx, ((size_t)2 * nseg + 1 + (size_t)nid) * sizeof(int))) ||
            mf__cu_copy(ctx, d, uid, ((size_t)2 * nseg + 1 + (size_t)nid) * sizeof(int), MF__H2D) < 0)
            return -1;
        tiles = (D + MF__CU_CR_TX - 1) / MF__CU_CR_TX;
        return MF__CU_RUN(ctx, "embedding (backward)", mf__k_embed_bwd, dim3((unsigned)nseg, tiles < 65535 ? tiles : 65535),
                          dim3(MF__CU_CR_TX, MF__CU_CR_TY), 0, dt, (const float *)out->grad, (const int *)d, nseg, D);
    }
}

/* ---- dropout: keep drawn by mf__drop_keep (seed, stream, index), as on the CPU ------------- */
/* forward: y = keep ? x s : 0 (x, y: floats or bf16: xb, yb); backward: y = dx += keep ? g s */
static __global__ void mf__k_dropout(float *y, int yb, const float *x, int xb, const float *g, long long n,
                                     unsigned long long seed, unsigned long long stream, float p, float s, int backward) {
    MF__CU_LOOP(i, n) {
        int keep = mf__drop_keep(seed, stream, (uint64_t)i, p);
        if (!backward) mf__cu_st(y, yb, i, keep ? mf__cu_ld(x, xb, i) * s : 0.0f);
        else if (keep) y[i] += g[i] * s;
    }
}
static int mf__cu_dropout_run(mf_ctx *ctx, mf_tensor *out, int backward) {
    float p = out->farg[MF__FARG_DROPOUT_P], s = 1.0f / (1.0f - p);
    float *y = backward ? mf__g(out->src[0]) : out->data;
    if (!y) return 0;
    return MF__CU_RUN(ctx, backward ? "dropout (backward)" : "dropout", mf__k_dropout, MF__EW(out->ne), y,
                      !backward && out->bf16, (const float *)out->src[0]->data, out->src[0]->bf16,
                      (const float *)out->grad, (long long)out->ne,
                      (unsigned long long)ctx->seed, (unsigned long long)mf__dropout_stream(out), p, s, backward);
}
static int mf__cu_dropout_fwd(mf_ctx *ctx, mf_tensor *out) { return mf__cu_dropout_run(ctx, out, 0); }
static int mf__cu_dropout_bwd(mf_ctx *ctx, mf_tensor *out) { return mf__cu_dropout_run(ctx, out, 1); }

/* ---- reshape: a view (forward: nothing to do) ---------------------------------------------- */
static __global__ void mf__k_add_to(float *dst, const float *src, long long n) { /* dst += src */
    MF__CU_LOOP(i, n) dst[i] += src[i];
}
static int mf__cu_nop(mf_ctx *ctx, mf_tensor *out) { (void)ctx; (void)out; return 0; }
/* (dx == dy: recycled gradients gave the input this gradient's buffer, mf__grad_shared_src) */
static int mf__cu_reshape_bwd(mf_ctx *ctx, mf_tensor *out) {
    float *dx = mf__g(out->src[0]);
    if (!dx || dx == out->grad) return 0;
    return MF__CU_RUN(ctx, "reshape (backward)", mf__k_add_to, MF__EW(out->ne), dx, (const float *)out->grad, (long long)out->ne);
}

/* ---- permute ------------------------------------------------------------------------------- */
typedef struct { long long st[4]; int sh[4]; } mf__cu_perm;
static __global__ void mf__k_permute(float *y, const float *x, mf__cu_perm p, long long n, int backward) {
    MF__CU_LOOP(o, n) {
        long long d = o % p.sh[3], c = (o / p.sh[3]) % p.sh[2], b = (o / ((long long)p.sh[3] * p.sh[2])) % p.sh[1];
        long long a = o / ((long long)p.sh[3] * p.sh[2] * p.sh[1]);
        long long in = a * p.st[0] + b * p.st[1] + c * p.st[2] + d * p.st[3];
        if (backward) y[in] += x[o]; /* y = dx, x = dout */
        else y[o] = x[in];
    }
}
static int mf__cu_permute_run(mf_ctx *ctx, mf_tensor *out, int backward) {
    int64_t st[MF_MAX_DIMS];
    int sh[MF_MAX_DIMS], i;
    mf__cu_perm p;
    float *dx = backward ? mf__g(out->src[0]) : NULL;
    if (backward && !dx) return 0;
    mf__permute_strides(out, st, sh);
    for (i = 0; i < MF_MAX_DIMS; i++) { p.st[i] = st[i]; p.sh[i] = sh[i]; }
    return MF__CU_RUN(ctx, backward ? "permute (backward)" : "permute", mf__k_permute, MF__EW(out->ne),
                      backward ? dx : out->data, (const float *)(backward ? out->grad : out->src[0]->data), p,
                      (long long)out->ne, backward);
}
static int mf__cu_permute_fwd(mf_ctx *ctx, mf_tensor *out) { return mf__cu_permute_run(ctx, out, 0); }
static int mf__cu_permute_bwd(mf_ctx *ctx, mf_tensor *out) { return mf__cu_permute_run(ctx, out, 1); }

/* ---- concat along an axis ------------------------------------------------------------------ */
/* out [outer, na + nb, inner] from a [outer, na, inner] and b [outer, nb, inner] (or back) */
static __global__ void mf__k_concat(float *out, float *a, float *b, long long na, long long nb, long long inner,
                                    long long n, int backward) {
    MF__CU_LOOP(o, n) {
        long long row = (na + nb) * inner, oo = o / row, rem = o % row, p = rem / inner, k = rem % inner;
        if (!backward) out[o] = p < na ? a[(oo * na + p) * inner + k] : b[(oo * nb + p - na) * inner + k];
        else if (p < na) { if (a) a[(oo * na + p) * inner + k] += out[o]; }
        else if (b) b[(oo * nb + p - na) * inner + k] += out[o];
    }
}
static int mf__cu_concat_run(mf_ctx *ctx, mf_tensor *out, int backward) {
    int ax = out->iarg[MF__ARG_AXIS];
    int64_t outer, inner;
    float *a = backward ? mf__g(out->src[0]) : out->src[0]->data, *b = backward ? mf__g(out->src[1]) : out->src[1]->data;
    if (backward && !a && !b) return 0;
    mf__split_at(out, ax, &outer, &inner);
    return MF__CU_RUN(ctx, backward ? "concat (backward)" : "concat", mf__k_concat, MF__EW(out->ne),
                      backward ? out->grad : out->data, a, b, (long long)out->src[0]->shape[ax],
                      (long long)out->src[1]->shape[ax], (long long)inner, (long long)out->ne, backward);
}
static int mf__cu_concat_fwd(mf_ctx *ctx, mf_tensor *out) { return mf__cu_concat_run(ctx, out, 0); }
static int mf__cu_concat_bwd(mf_ctx *ctx, mf_tensor *out) { return mf__cu_concat_run(ctx, out, 1); }

/* ---- slice along an axis ------------------------------------------------------------------- */
/* out [outer, len, inner] = x [outer, nx, inner] from start (backward: dx += dout) */
static __global__ void mf__k_slice(float *out, float *x, long long nx, long long len, long long start, long long inner,
                                   long long n, int backward) {
    MF__CU_LOOP(o, n) {
        long long chunk = len * inner, oo = o / chunk, i = o % chunk;
        long long in = oo * nx * inner + start * inner + i;
        if (!backward) out[o] = x[in];
        else x[in] += out[o];
    }
}
static int mf__cu_slice_run(mf_ctx *ctx, mf_tensor *out, int backward) {
    const mf_tensor *x = out->src[0];
    int ax = out->iarg[MF__ARG_AXIS];
    int64_t outer, inner;
    float *xd = backward ? mf__g(x) : x->data;
    if (!xd) return 0;
    mf__split_at(x, ax, &outer, &inner);
    return MF__CU_RUN(ctx, backward ? "slice (backward)" : "slice", mf__k_slice, MF__EW(out->ne),
                      backward ? out->grad : out->data, xd, (long long)x->shape[ax], (long long)out->shape[ax],
                      (long long)out->iarg[MF__ARG_SLICE_START], (long long)inner, (long long)out->ne, backward);
}
static int mf__cu_slice_fwd(mf_ctx *ctx, mf_tensor *out) { return mf__cu_slice_run(ctx, out, 0); }
static int mf__cu_slice_bwd(mf_ctx *ctx, mf_tensor *out) { return mf__cu_slice_run(ctx, out, 1); }

/* ---- roll along an axis -------------------------------------------------------------------- */
static __global__ void mf__k_roll(float *out, float *x, int nax, int shift, long long inner, long long n, int backward) {
    MF__CU_LOOP(s, n) { /* s: the source element */
        long long k = s % inner, i = (s / inner) % nax, o = s / (inner * nax);
        long long d = (o * nax + (i + shift) % nax) * inner + k;
        if (!backward) out[d] = x[s];
        else x[s] += out[d];
    }
}
static int mf__cu_roll_run(mf_ctx *ctx, mf_tensor *out, int backward) {
    const mf_tensor *x = out->src[0];
    int ax = out->iarg[MF__ARG_AXIS], n = x->shape[ax], shift = ((out->iarg[MF__ARG_ROLL_SHIFT] % n) + n) % n;
    int64_t outer, inner;
    float *xd = backward ? mf__g(x) : x->data;
    if (!xd) return 0;
    mf__split_at(x, ax, &outer, &inner);
    return MF__CU_RUN(ctx, backward ? "roll (backward)" : "roll", mf__k_roll, MF__EW(out->ne),
                      backward ? out->grad : out->data, xd, n, shift, (long long)inner, (long long)out->ne, backward);
}
static int mf__cu_roll_fwd(mf_ctx *ctx, mf_tensor *out) { return mf__cu_roll_run(ctx, out, 0); }
static int mf__cu_roll_bwd(mf_ctx *ctx, mf_tensor *out) { return mf__cu_roll_run(ctx, out, 1); }

/* ---- sum / mean of all elements -> [1] ----------------------------------------------------- */
static __global__ void mf__k_fill_add(float *dx, const float *grad, long long n, int mean) {
    float g = grad[0];
    if (mean) g /= (float)n;
    MF__CU_LOOP(i, n) dx[i] += g;
}
static int mf__cu_reduce_fwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    return mf__cu_reduce(ctx, out->op->name, x->data, NULL, NULL, x->ne, 0,
                         out->iarg[MF__ARG_REDUCE_MEAN] ? (double)x->ne : 1.0, out->data, NULL);
}
static int mf__cu_reduce_bwd(mf_ctx *ctx, mf_tensor *out) {
    float *dx = mf__g(out->src[0]);
    if (!dx) return 0;
    return MF__CU_RUN(ctx, out->op->name, mf__k_fill_add, MF__EW(out->src[0]->ne), dx, (const float *)out->grad,
                      (long long)out->src[0]->ne, out->iarg[MF__ARG_REDUCE_MEAN]);
}

/* ---- sum over one axis --------------------------------------------------------------------- */
static __global__ void mf__k_sum_axis_bwd(float *dx, const float *g, int nax, long long inner, long long n) {
    MF__CU_LOOP(e, n) dx[e] += g[(e / (inner * nax)) * inner + e % inner];
}
static int mf__cu_sum_axis_fwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    int64_t outer, inner;
    mf__cu_colred p;
    mf__split_at(x, out->iarg[MF__ARG_AXIS], &outer, &inner);
    /* y[o][k] = sum over i of x[o][i][k]: a column reduction of nax rows, column (o, k) */
    memset(&p, 0, sizeof p);
    p.dst0 = out->data; p.g = x->data; p.rows = x->shape[out->iarg[MF__ARG_AXIS]]; p.cols = outer * inner;
    p.inner = inner; p.kind = MF__CR_SUM; p.sign = 1.0f;
    return mf__cu_colred_run(ctx, "sum_axis", p);
}
static int mf__cu_sum_axis_bwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    float *dx = mf__g(x);
    int64_t outer, inner;
    if (!dx) return 0;
    mf__split_at(x, out->iarg[MF__ARG_AXIS], &outer, &inner);
    return MF__CU_RUN(ctx, "sum_axis (backward)", mf__k_sum_axis_bwd, MF__EW(x->ne), dx, (const float *)out->grad,
                      x->shape[out->iarg[MF__ARG_AXIS]], (long long)inner, (long long)x->ne);
}

/* ---- conv1d, channels last (im2col + cuBLAS) ----------------------------------------------- */
/* cols [(b, t)][c * K + k] = x[b][t * stride + k - pad][c] (0 outside) */
static __global__ void mf__k_im2col(float *cols, const float *x, int To, int T, int C, int K, int stride, int pad,
                                    long long n) {
    MF__CU_LOOP(e, n) {
        long long bt = e / ((long long)C * K), b = bt / To;
        int rem = (int)(e % ((long long)C * K)), c = rem / K, k = rem % K, t = (int)(bt % To), ts = t * stride + k - pad;
        cols[e] = ts >= 0 && ts < T ? x[(b * T + ts) * C + c] : 0.0f;
    }
}
/* dx[b][ts][c] += dcols of every (t, k) with t * stride + k - pad = ts, t in order (as the CPU) */
static __global__ void mf__k_col2im(float *dx, const float *dcols, int To, int T, int C, int K, int stride, int pad,
                                    long long n) {
    MF__CU_LOOP(e, n) {
        long long b = e / ((long long)T * C);
        int ts = (int)((e / C) % T), c = (int)(e % C), t;
        float acc = dx[e];
        for (t = 0; t < To; t++) {
            int k = ts - t * stride + pad;
            if (k >= 0 && k < K) acc += dcols[((b * To + t) * C + c) * K + k];
        }
        dx[e] = acc;
    }
}
static int mf__cu_conv1d_fwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0], *w = out->src[1], *b = out->src[2];
    long long rows = (long long)out->shape[0] * out->shape[1];
    int CK = w->shape[1] * w->shape[2], Co = w->shape[0];
    int stride = out->iarg[MF__ARG_CONV_STRIDE], pad = out->iarg[MF__ARG_CONV_PAD];
    if (!(out->saved = (float *)mf__cu_arena(ctx, (size_t)(rows * CK) * sizeof(float)))) return -1;
    if (MF__CU_RUN(ctx, "conv1d", mf__k_im2col, MF__EW(rows * CK), out->saved, (const float *)x->data, out->shape[1],
                   x->shape[1], x->shape[2], w->shape[2], stride, pad, rows * CK) < 0 ||
        mf__cu_gemm(ctx, "conv1d", 0, 1, (int)rows, Co, CK, out->saved, 0, w->data, 0, 0.0f, out->data, 0, 1) < 0)
        return -1;
    return b ? MF__CU_RUN(ctx, "conv1d", mf__k_bias_add, MF__EW(out->ne), out->data, (const float *)b->data, (long long)out->ne, Co) : 0;
}
static int mf__cu_conv1d_bwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0], *w = out->src[1];
    float *dx = mf__g(out->src[0]), *dw = mf__g(out->src[1]), *db = mf__g(out->src[2]), *dcols;
    long long rows = (long long)out->shape[0] * out->shape[1];
    int CK = w->shape[1] * w->shape[2], Co = w->shape[0];
    const char *op = "conv1d (backward)";
    if (dw && mf__cu_gemm(ctx, op, 1, 0, Co, CK, (int)rows, out->grad, 0, out->saved, 0, 1.0f, dw, 0, 1) < 0) return -1;
    if (db && mf__cu_colsum_add(ctx, op, db, (const float *)out->grad, rows, Co) < 0) return -1;
    if (!dx) return 0;
    if (!(dcols = (float *)mf__cu_arena(ctx, (size_t)(rows * CK) * sizeof(float)))) return -1;
    if (mf__cu_gemm(ctx, op, 0, 0, (int)rows, CK, Co, out->grad, 0, w->data, 0, 0.0f, dcols, 0, 1) < 0) return -1;
    return MF__CU_RUN(ctx, op, mf__k_col2im, MF__EW(x->ne), dx, (const float *)dcols, out->shape[1], x->shape[1],
                      x->shape[2], w->shape[2], out->iarg[MF__ARG_CONV_STRIDE], out->iarg[MF__ARG_CONV_PAD],
                      (long long)x->ne);
}

/* ---- avg_pool / avg_pool_sub: mean over a window of the sequence axis ---------------------- */
static __device__ void mf__cu_pool_window(int t, int T, int k, int causal, int *lo, int *hi) {
    *lo = causal ? t - k + 1 : t - k / 2;
    *hi = causal ? t : t + k / 2;
    if (*lo < 0) *lo = 0;
    if (*hi > T - 1) *hi = T - 1;
}
static __global__ void mf__k_avg_pool(float *y, const float *x, int T, int D, int k, int causal, int minus, long long n) {
    MF__CU_LOOP(e, n) {
        long long b = e / ((long long)T * D);
        int t = (int)((e / D) % T), d = (int)(e % D), lo, hi, s;
        double acc = 0;
        mf__cu_pool_window(t, T, k, causal, &lo, &hi);
        for (s = lo; s <= hi; s++) acc += x[(b * T + s) * D + d];
        y[e] = minus ? (float)(acc / (hi - lo + 1)) - x[e] : (float)(acc / (hi - lo + 1));
    }
}
static __global__ void mf__k_avg_pool_bwd(float *dx, const float *g, int T, int D, int k, int causal, int minus,
                                          long long n) {
    MF__CU_LOOP(e, n) {
        long long b = e / ((long long)T * D);
        int s = (int)((e / D) % T), d = (int)(e % D), lo, hi, t, l2, h2;
        double acc = 0;
        lo = causal ? s : s - k / 2; hi = causal ? s + k - 1 : s + k / 2; /* the t whose window holds s */
        if (lo < 0) lo = 0;
        if (hi > T - 1) hi = T - 1;
        for (t = lo; t <= hi; t++) {
            mf__cu_pool_window(t, T, k, causal, &l2, &h2);
            acc += (double)(1.0f / (float)(h2 - l2 + 1) * g[(b * T + t) * D + d]);
        }
        dx[e] += minus ? (float)acc - g[e] : (float)acc;
    }
}
static int mf__cu_avg_pool_fwd(mf_ctx *ctx, mf_tensor *out) {
    return MF__CU_RUN(ctx, out->op->name, mf__k_avg_pool, MF__EW(out->ne), out->data, (const float *)out->src[0]->data,
                      out->shape[1], out->shape[2], out->iarg[MF__ARG_POOL_KERNEL], out->iarg[MF__ARG_POOL_CAUSAL],
                      out->iarg[MF__ARG_POOL_MINUS], (long long)out->ne);
}
static int mf__cu_avg_pool_bwd(mf_ctx *ctx, mf_tensor *out) {
    float *dx = mf__g(out->src[0]);
    if (!dx) return 0;
    return MF__CU_RUN(ctx, out->op->name, mf__k_avg_pool_bwd, MF__EW(out->ne), dx, (const float *)out->grad,
                      out->shape[1], out->shape[2], out->iarg[MF__ARG_POOL_KERNEL], out->iarg[MF__ARG_POOL_CAUSAL],
                      out->iarg[MF__ARG_POOL_MINUS], (long long)out->ne);
}

/* ==== [cu:attention] ======================================================================== */
/* Fused FlashAttention-2 forward and backward, fp32 and TF32 tensor cores: the last op of [mf:ops]. */
/* mf_attention (metaformer.h [mf:ops]): q [BH, Tq, dk], k [BH, Tk, dk], v [BH, Tk, dv] -> o [BH, Tq, dv]
   and the row log-sum-exp lse [BH, Tq] (+inf for a query that sees no key, whose output is zero),
   exactly the CPU op's convention; with MF_ATTN_TOKENS_MAJOR q, k, v and o are [B, T, H, d] (or
   parts of packs [B, T, P H, d]) and row i of head bh = b H + h is found by mf__attn_at, as on the
   CPU (lse and D stay [BH, Tq]). Query i sees key j iff !causal or j <= i + Tk - Tq.
   Design: three kernels of MF__FA_THREADS threads over square tiles of B queries / keys.
     - Every tile lives in shared memory: the operands (Q scaled by `scale`, K, V, dO), the score
       tiles and the accumulators (O, dK, dV, dQ). Head sizes are zero-padded to dkp, dvp (multiples
       of 16), so one code handles any dk, dv with no register array bounded by them; B (64, 32 or
       16) is chosen at launch so that the block fits the device's opt-in shared memory, preferring
       two blocks per SM, then tiles of at least 32 (d = 64 on sm_90: forward 64, backward 32).
       Shared memory is what bounds the head size (dk = dv = 256 fits in sm_80's 163 KiB and
       sm_90's 227 KiB: forward B = 32, dK/dV B = 16). Grid: BH x ceil(T / B) blocks of
       the query (forward, dQ) or key (dK/dV) tiles; all barriers are block-wide and uniform.
     - Every tile product is C [M][N] (+)= sum_k At[k][m] Bk[k][n] with both operands stored k-major
       ("T" tiles [d][B + pad] hold a matrix transposed), through mf__fa_mm: fp32 FMA (4 x 4 outputs
       per thread, 2 x 4 on 32 x 32 tiles, float4 loads of both operands, k ascending:
       deterministic) or, on sm_80+, WMMA (a warp computes a 16 x 64 strip, one A fragment for four
       products; matrix_a col_major, fp32 accumulation in a fixed order): m16n16k8 with TF32
       (MF_PREC_TF32: inputs rounded by __float_to_tf32), m16n16k16 with bf16 (MF_PREC_BF16).
     - The precision is the template argument TC (MF__FA_FP32 / TF32 / BF16). The operand tiles
       (Q, K, V, dO, and the P, dS that feed products) hold mf__fa_elem<TC>: float, or bf16 rounded
       to nearest even when staged (global memory stays fp32); scores, the softmax statistics and the
       accumulators are fp32 in every precision. The fp32 / TF32 kernels overwrite a score tile with
       P or dS; bf16 writes them to tiles of their own (docs/math.md §4.2). Row strides pad every
       tile by 16 bytes (B + 4 floats, B + 8 bf16): WMMA's ldm and 32-byte alignment hold.
     - Forward: block = (head, query tile), the tiles with the most keys first, looping over the
       key tiles it can see: S^T = K Qs^T; online softmax per query in registers (128 / B threads
       per query, shuffles); O rescaled; O += P V; at the end O / l and lse = m + log l.
     - Backward, no atomics and a fixed order: D = rowsum(dO * O); dK, dV: block = (head, key tile)
       over the query tiles that see it: P = exp(S - lse), dV += P^T dO, dS = P (dP - D),
       dK += dS^T Qs; dQ: block = (head, query tile) over its key tiles: dQ += scale dS K. Results
       are added into the gradient buffers; a NULL one (no gradient wanted) is skipped. */
#ifndef MF_CUDA_EMU
#include <cuda_bf16.h>
#include <mma.h>
#endif
#if defined(MF_CUDA_EMU) || !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define MF__FA_WMMA 1 /* TF32 and bf16 WMMA exist (sm_80+); elsewhere those kernels fall back to the CUDA cores */
#endif
#define MF__FA_THREADS 128
/* the kernels' precision (the template argument TC): 0 fp32 on the CUDA cores, 1 TF32 WMMA, 2 bf16 WMMA */
enum { MF__FA_FP32 = 0, MF__FA_TF32 = 1, MF__FA_BF16 = 2 };
/* the element of the operand tiles in shared memory (Q, K, V, dO and the P, dS that feed products):
   float, or bf16 for the bf16 kernels; scores, accumulators and row statistics are always float */
template <int TC> struct mf__fa_elem { typedef float T; };
template <> struct mf__fa_elem<MF__FA_BF16> { typedef __nv_bfloat16 T; };
static __device__ void mf__fa_put(float *p, float x) { *p = x; }
static __device__ void mf__fa_put(__nv_bfloat16 *p, float x) { *p = __float2bfloat16(x); } /* round to nearest even */

typedef struct {
    const float *q, *k, *v, *o, *g, *lse, *D; /* g: dO */
    float *out, *lse_out, *gq, *gk, *gv;      /* NULL: no gradient wanted */
    int qb, kb, vb, ob;                       /* q, k, v, o (out) hold bf16 ([cu:storage]) */
    int Tq, Tk, dk, dv, B, causal;
    mf__attn_geo geo;                         /* where the rows of q, k, v, o (and dO) are (mf__attn_at) */
    float scale;
    mf__attn_drop drop;                       /* probability dropout (docs/math.md §4.1); p = 0: none */
} mf__fa_args;
/* the offset of row i of head bh of operand x (MF__AT_Q, _K, _V, _O) */
static __device__ long long mf__fa_at(const mf__fa_args &a, int x, long long bh, int i) {
    return (long long)mf__attn_at(&a.geo, x, bh, i);
}
/* the dropped probability of query i, key j of head bh (the CPU's element index and draw) */
static __device__ float mf__fa_drop(const mf__fa_args &a, long long bh, int i, int j, float p) {
    return mf__drop_keep_at(a.drop.key, (uint64_t)((bh * a.Tq + i) * a.Tk + j), a.drop.p) ? p * a.drop.s : 0.0f;
}

static __host__ __device__ int mf__fa_pad(int d) { return (d + 15) & ~15; }
/* the row stride of a tile of n columns of es-byte elements: 16 bytes of padding (4 floats, 8 bf16),
   which keeps rows on different banks and the multiple of 16 bytes that WMMA's ldm needs */
static __host__ __device__ int mf__fa_stride(int n, int es) { return n + 16 / es; }
/* bytes of shared memory of the forward (kind 0), the dK/dV (1) and the dQ (2) kernel for tiles of B;
   bf16: the operand tiles in bf16, plus the bf16 copies of P and dS (the fp32 kernels overwrite the
   score tiles in place). f counts the floats (scores, accumulators, row vectors), e the operand
   elements; the kernels lay out the floats first, each buffer a multiple of 32 bytes. */
static size_t mf__fa_smem(int B, int dk, int dv, int kind, int bf16) {
    size_t es = bf16 ? 2 : 4, dkp = (size_t)mf__fa_pad(dk), dvp = (size_t)mf__fa_pad(dv), b = (size_t)B;
    size_t lt = b + 4, lk = dkp + 4, lv = dvp + 4, le = (size_t)mf__fa_stride(B, (int)es);
    size_t lke = (size_t)mf__fa_stride((int)dkp, (int)es), lve = (size_t)mf__fa_stride((int)dvp, (int)es), f, e;
    if (kind == 0) { /* S^T, O, 1 / l | Qs^T, K^T, V, P^T */
        f = b * lt + b * lv + b;
        e = 2 * dkp * le + b * lve + (bf16 ? b * le : 0);
    } else if (kind == 1) { /* dK, dV, S, dP, lse, D | K^T, V^T, Qs^T, dO^T, Qs, dO, P, dS */
        f = b * (lk + lv) + 2 * b * lt + 2 * b;
        e = 2 * (dkp + dvp) * le + b * (lke + lve) + (bf16 ? 2 * b * le : 0);
    } else { /* dQ, S^T, dP^T, lse, D | Qs^T, dO^T, K^T, V^T, K, dS^T */
        f = b * lk + 2 * b * lt + 2 * b;
        e = 2 * (dkp + dvp) * le + b * lke + (bf16 ? b * le : 0);
    }
    return f * sizeof(float) + e * es;
}

/* for every (r, c) of a rows x cols block, threads striding over it row by row (neighbouring threads
   on neighbouring columns), without a division per element */
#define MF__FA_EACH(r, c, rows, cols, ...) \
    do { \
        const int mf__dc = (int)blockDim.x % (cols), mf__dr = (int)blockDim.x / (cols); \
        int r = (int)threadIdx.x / (cols), c = (int)threadIdx.x % (cols); \
        for (; r < (rows); r += mf__dr, c += mf__dc) { \
            if (c >= (cols)) { c -= (cols); r++; if (r >= (rows)) break; } \
            __VA_ARGS__; \
        } \
    } while (0)
/* dst [B][ld] = s * rows [0, rows) of src from element `at` on (d values each, rows lds apart; floats,
   or bf16 when sb); zero elsewhere up to B rows and dp columns (E = bf16: rounded to nearest even) */
template <class E>
static __device__ void mf__fa_load(E *dst, int ld, const float *src, int sb, long long at, int d, int lds, int rows,
                                   int B, int dp, float s) {
    MF__FA_EACH(r, c, B, dp, mf__fa_put(dst + r * ld + c, r < rows && c < d ? s * mf__cu_ld(src, sb, at + (long long)r * lds + c) : 0.0f));
}
/* the same transposed: dst [dp][ld] (a "T" tile), dst[c][r] = s * src[r][c] */
template <class E>
static __device__ void mf__fa_load_t(E *dst, int ld, const float *src, int sb, long long at, int d, int lds, int rows,
                                     int B, int dp, float s) {
    MF__FA_EACH(r, c, B, dp, mf__fa_put(dst + c * ld + r, r < rows && c < d ? s * mf__cu_ld(src, sb, at + (long long)r * lds + c) : 0.0f));
}
static __device__ void mf__fa_zero(float *dst, int ld, int B, int dp) {
    MF__FA_EACH(r, c, B, dp, dst[r * ld + c] = 0.0f);
}
/* dst[r] = src[r] for r < rows, pad after (lse: +inf, D: 0) */
static __device__ void mf__fa_load_vec(float *dst, const float *src, int rows, int B, float pad) {
    for (int r = threadIdx.x; r < B; r += blockDim.x) dst[r] = r < rows ? src[r] : pad;
}
/* dst rows [0, rows) of [.][d] += src [.][ld] */
static __device__ void mf__fa_add_out(float *dst, int d, int ldd, const float *src, int ld, int rows) {
    MF__FA_EACH(r, c, rows, d, dst[(long long)r * ldd + c] += src[r * ld + c]);
}

#ifdef MF__FA_WMMA
/* the WMMA shape of an operand element: TF32 m16n16k8 for float (the inputs rounded by
   __float_to_tf32 after the load), bf16 m16n16k16 (already rounded when the tile was stored) */
template <class E> struct mf__fa_wmma {
    enum { K = 8 };
    typedef nvcuda::wmma::precision::tf32 In;
    template <class F> static __device__ void round(F &f) {
        for (int i = 0; i < f.num_elements; i++) f.x[i] = nvcuda::wmma::__float_to_tf32(f.x[i]);
    }
};
template <> struct mf__fa_wmma<__nv_bfloat16> {
    enum { K = 16 };
    typedef __nv_bfloat16 In;
    template <class F> static __device__ void round(F &) {}
};
/* each warp computes a 16 x (16 g) strip (g accumulator tiles, g = 4, 2 or 1: as wide as leaves
   every warp a strip), so that one A fragment serves g products */
template <class E>
static __device__ void mf__fa_mm_tc(float *C, int ldc, const E *At, int lda, const E *Bk, int ldb, int M, int N, int K,
                                    int acc) {
    namespace w = nvcuda::wmma;
    typedef mf__fa_wmma<E> S;
    typedef typename S::In In;
    int ntn = N / 16, nw = blockDim.x / 32, g = 4, ng, units;
    while (g > 1 && (M / 16) * ((ntn + g - 1) / g) < nw) g /= 2;
    ng = (ntn + g - 1) / g;
    units = (M / 16) * ng;
    for (int t = threadIdx.x / 32; t < units; t += nw) { /* warp-uniform */
        int m0 = t / ng * 16, n0 = t % ng * g * 16, f, nf = min(g, (N - n0) / 16);
        w::fragment<w::accumulator, 16, 16, S::K, float> fc[4];
        for (f = 0; f < 4; f++)
            if (f < nf) {
                if (acc) w::load_matrix_sync(fc[f], C + m0 * ldc + n0 + 16 * f, ldc, w::mem_row_major);
                else w::fill_fragment(fc[f], 0.0f);
            }
        for (int k = 0; k < K; k += S::K) {
            w::fragment<w::matrix_a, 16, 16, S::K, In, w::col_major> fa;
            w::load_matrix_sync(fa, At + k * lda + m0, lda);
            S::round(fa);
            for (f = 0; f < 4; f++)
                if (f < nf) {
                    w::fragment<w::matrix_b, 16, 16, S::K, In, w::row_major> fb;
                    w::load_matrix_sync(fb, Bk + k * ldb + n0 + 16 * f, ldb);
                    S::round(fb);
                    w::mma_sync(fc[f], fa, fb, fc[f]);
                }
        }
        for (f = 0; f < 4; f++)
            if (f < nf) w::store_matrix_sync(C + m0 * ldc + n0 + 16 * f, fc[f], ldc, w::mem_row_major);
    }
}
#endif
/* one vector load of 4 or 2 floats from shared memory (16- / 8-byte aligned) */
static __device__ void mf__fa_ld(float (&v)[4], const float *p) {
    float4 x = *(const float4 *)p;
    v[0] = x.x; v[1] = x.y; v[2] = x.z; v[3] = x.w;
}
static __device__ void mf__fa_ld(float (&v)[2], const float *p) {
    float2 x = *(const float2 *)p;
    v[0] = x.x; v[1] = x.y;
}
/* fp32: each thread owns R x 4 outputs (consecutive rows and columns; neighbouring threads on
   neighbouring columns), float2 / float4 loads of both operands, summed over k in order */
template <int R>
static __device__ void mf__fa_mm_fma(float *C, int ldc, const float *At, int lda, const float *Bk, int ldb, int M, int N,
                                     int K, int acc) {
    int nq = N / 4;
    for (int t = threadIdx.x; t < (M / R) * nq; t += blockDim.x) {
        int m0 = t / nq * R, n0 = (t % nq) * 4, i, k;
        float4 c[R];
        for (i = 0; i < R; i++) c[i] = acc ? *(const float4 *)(C + (m0 + i) * ldc + n0) : make_float4(0, 0, 0, 0);
        for (k = 0; k < K; k++) {
            float av[R];
            float4 b = *(const float4 *)(Bk + k * ldb + n0);
            mf__fa_ld(av, At + k * lda + m0);
            for (i = 0; i < R; i++) {
                c[i].x += av[i] * b.x; c[i].y += av[i] * b.y; c[i].z += av[i] * b.z; c[i].w += av[i] * b.w;
            }
        }
        for (i = 0; i < R; i++) *(float4 *)(C + (m0 + i) * ldc + n0) = c[i];
    }
}
/* fp32 on the CUDA cores, 4 x 4 outputs per thread, 2 x 4 when that leaves threads idle (32 x 32 tiles) */
static __device__ void mf__fa_mm_cores(float *C, int ldc, const float *At, int lda, const float *Bk, int ldb, int M, int N,
                                       int K, int acc) {
    if ((M / 4) * (N / 4) < (int)blockDim.x) mf__fa_mm_fma<2>(C, ldc, At, lda, Bk, ldb, M, N, K, acc);
    else mf__fa_mm_fma<4>(C, ldc, At, lda, Bk, ldb, M, N, K, acc);
}
/* bf16 operands on a GPU without bf16 tensor cores (compiled for sm_70 and older; never chosen at run
   time there, mf__cu_fa_prec): one output per thread, k ascending */
static __device__ void mf__fa_mm_cores(float *C, int ldc, const __nv_bfloat16 *At, int lda, const __nv_bfloat16 *Bk,
                                       int ldb, int M, int N, int K, int acc) {
    for (int t = threadIdx.x; t < M * N; t += blockDim.x) {
        int m = t / N, n = t % N;
        float c = acc ? C[m * ldc + n] : 0.0f;
        for (int k = 0; k < K; k++) c += __bfloat162float(At[k * lda + m]) * __bfloat162float(Bk[k * ldb + n]);
        C[m * ldc + n] = c;
    }
}
/* C [M][N] (+ when acc)= sum over k < K of At[k][m] Bk[k][n], all in shared memory, both operands
   k-major (row strides multiples of 16 bytes; M, N, K multiples of 16), the operands in the kernel's
   element (mf__fa_elem<TC>). No barrier inside. */
template <int TC>
static __device__ void mf__fa_mm(float *C, int ldc, const typename mf__fa_elem<TC>::T *At, int lda,
                                 const typename mf__fa_elem<TC>::T *Bk, int ldb, int M, int N, int K, int acc) {
#ifdef MF__FA_WMMA
    if (TC != MF__FA_FP32) { mf__fa_mm_tc(C, ldc, At, lda, Bk, ldb, M, N, K, acc); return; }
#endif
    mf__fa_mm_cores(C, ldc, At, lda, Bk, ldb, M, N, K, acc);
}

/* forward: block = (head, query tile). shared (mf__fa_smem): floats S^T [B][lt], O [B][lv], 1 / l [B];
   operand tiles Qs^T [dkp][le], K^T [dkp][le], V [B][lve], P^T [B][le] (the fp32 kernels write P^T
   over S^T: pt = st) */
template <int TC> static __global__ void __launch_bounds__(MF__FA_THREADS) mf__k_fa_fwd(mf__fa_args a) {
    typedef typename mf__fa_elem<TC>::T E;
    MF_DYN_SMEM(float, sm);
    const int B = a.B, dkp = mf__fa_pad(a.dk), dvp = mf__fa_pad(a.dv), lt = B + 4, lv = dvp + 4;
    const int le = mf__fa_stride(B, sizeof(E)), lve = mf__fa_stride(dvp, sizeof(E));
    float *st = sm, *os = st + B * lt, *il = os + B * lv;
    E *qt = (E *)(il + B), *kt = qt + dkp * le, *vs = kt + dkp * le;
    E *pt = TC == MF__FA_BF16 ? vs + B * lve : (E *)st;
    int nqt = (a.Tq + B - 1) / B, off = a.Tk - a.Tq, i0 = (nqt - 1 - (int)(blockIdx.x % nqt)) * B;
    long long bh = blockIdx.x / nqt;
    int bq = min(B, a.Tq - i0), kend = a.causal ? min(a.Tk, i0 + bq + off) : a.Tk;
    int tpr = blockDim.x / B, r = threadIdx.x / tpr, part = threadIdx.x % tpr, c, o;
    int lim = a.causal ? i0 + r + off : a.Tk; /* query r sees the keys j <= lim */
    float m = -1e30f, l = 0.0f;               /* finite start: exp(m_old - m_new) is never NaN */
    const int ldq = a.geo.ld[MF__AT_Q], ldk = a.geo.ld[MF__AT_K], ldv = a.geo.ld[MF__AT_V], ldo = a.geo.ld[MF__AT_O];
    mf__fa_load_t(qt, le, a.q, a.qb, mf__fa_at(a, MF__AT_Q, bh, i0), a.dk, ldq, bq, B, dkp, a.scale);
    mf__fa_zero(os, lv, B, dvp);
    for (int j0 = 0; j0 < kend; j0 += B) {
        int bk = min(B, kend - j0);
        __syncthreads(); /* the previous tile's products are done with K and V */
        mf__fa_load_t(kt, le, a.k, a.kb, mf__fa_at(a, MF__AT_K, bh, j0), a.dk, ldk, bk, B, dkp, 1.0f);
        mf__fa_load(vs, lve, a.v, a.vb, mf__fa_at(a, MF__AT_V, bh, j0), a.dv, ldv, bk, B, dvp, 1.0f);
        __syncthreads();
        mf__fa_mm<TC>(st, lt, kt, le, qt, le, B, B, dkp, 0); /* S^T [key][query] */
        __syncthreads();
        { /* online softmax of query r (column r of S^T) by its tpr threads (neighbouring lanes) */
            float mx = m, sum = 0.0f, al;
            for (c = part; c < B; c += tpr) {
                float s = c < bk && j0 + c <= lim ? st[c * lt + r] : -INFINITY;
                st[c * lt + r] = s;
                mx = fmaxf(mx, s);
            }
            for (o = 1; o < tpr; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            for (c = part; c < B; c += tpr) { /* the sum l is of the undropped P */
                float p = expf(st[c * lt + r] - mx);
                sum += p;
                mf__fa_put(pt + c * le + r, a.drop.p > 0.0f && p != 0.0f ? mf__fa_drop(a, bh, i0 + r, j0 + c, p) : p);
            }
            for (o = 1; o < tpr; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            al = expf(m - mx);
            l = al * l + sum;
            m = mx;
            if (al != 1.0f)
                for (c = part; c < dvp; c += tpr) os[r * lv + c] *= al;
        }
        __syncthreads();
        mf__fa_mm<TC>(os, lv, pt, le, vs, lve, B, dvp, B, 1); /* O += P V */
    }
    if (part == 0) {
        il[r] = l > 0.0f ? 1.0f / l : 0.0f;
        if (r < bq) a.lse_out[bh * a.Tq + i0 + r] = l > 0.0f ? m + logf(l) : INFINITY;
    }
    __syncthreads();
    long long at = mf__fa_at(a, MF__AT_O, bh, i0);
    MF__FA_EACH(rr, cc, bq, a.dv, mf__cu_st(a.out, a.ob, at + (long long)rr * ldo + cc, os[rr * lv + cc] * il[rr]));
}

/* D[bh Tq + i] = dO . O of query i of head bh (the CPU's order) */
static __global__ void mf__k_fa_rowdot(float *D, mf__fa_args a, long long rows) {
    MF__CU_LOOP(r, rows) {
        long long at = mf__fa_at(a, MF__AT_O, r / a.Tq, (int)(r % a.Tq));
        float d = 0;
        for (int c = 0; c < a.dv; c++) d += a.g[at + c] * mf__cu_ld(a.o, a.ob, at + c);
        D[r] = d;
    }
}

/* dK, dV: block = (head, key tile) over the query tiles that see it. shared (mf__fa_smem): floats
   dK [B][lk], dV [B][lv], S [B][lt], dP [B][lt] ([query][key]), lse [B], D [B]; operand tiles
   K^T [dkp][le], V^T [dvp][le], Qs^T [dkp][le], dO^T [dvp][le], Qs [B][lke], dO [B][lve], P [B][le],
   dS [B][le] (the fp32 kernels write P over S and dS over dP) */
template <int TC> static __global__ void __launch_bounds__(MF__FA_THREADS) mf__k_fa_bwd_kv(mf__fa_args a) {
    typedef typename mf__fa_elem<TC>::T E;
    MF_DYN_SMEM(float, sm);
    const int B = a.B, dkp = mf__fa_pad(a.dk), dvp = mf__fa_pad(a.dv), lt = B + 4, lk = dkp + 4, lv = dvp + 4;
    const int le = mf__fa_stride(B, sizeof(E)), lke = mf__fa_stride(dkp, sizeof(E)), lve = mf__fa_stride(dvp, sizeof(E));
    float *dks = sm, *dvs = dks + B * lk, *ss = dvs + B * lv, *dps = ss + B * lt, *ls = dps + B * lt, *Ds = ls + B;
    E *kt = (E *)(Ds + B), *vt = kt + dkp * le, *qt = vt + dvp * le, *gt = qt + dkp * le, *qs = gt + dvp * le;
    E *gs = qs + B * lke, *pe = TC == MF__FA_BF16 ? gs + B * lve : (E *)ss, *dse = TC == MF__FA_BF16 ? pe + B * le : (E *)dps;
    int nkt = (a.Tk + B - 1) / B, j0 = (int)(blockIdx.x % nkt) * B, off = a.Tk - a.Tq;
    long long bh = blockIdx.x / nkt;
    int bk = min(B, a.Tk - j0), first = a.causal ? max(0, j0 - off) : 0; /* the first query that sees a key */
    const int ldq = a.geo.ld[MF__AT_Q], ldk = a.geo.ld[MF__AT_K], ldv = a.geo.ld[MF__AT_V], ldo = a.geo.ld[MF__AT_O];
    mf__fa_load_t(kt, le, a.k, a.kb, mf__fa_at(a, MF__AT_K, bh, j0), a.dk, ldk, bk, B, dkp, 1.0f);
    mf__fa_load_t(vt, le, a.v, a.vb, mf__fa_at(a, MF__AT_V, bh, j0), a.dv, ldv, bk, B, dvp, 1.0f);
    mf__fa_zero(dks, lk, B, dkp);
    mf__fa_zero(dvs, lv, B, dvp);
    for (int i0 = first / B * B; i0 < a.Tq; i0 += B) {
        int bq = min(B, a.Tq - i0);
        long long q = mf__fa_at(a, MF__AT_Q, bh, i0), g = mf__fa_at(a, MF__AT_O, bh, i0);
        __syncthreads();
        mf__fa_load_t(qt, le, a.q, a.qb, q, a.dk, ldq, bq, B, dkp, a.scale);
        if (a.gk) mf__fa_load(qs, lke, a.q, a.qb, q, a.dk, ldq, bq, B, dkp, a.scale);
        if (a.gk) mf__fa_load_t(gt, le, a.g, 0, g, a.dv, ldo, bq, B, dvp, 1.0f);
        if (a.gv) mf__fa_load(gs, lve, a.g, 0, g, a.dv, ldo, bq, B, dvp, 1.0f);
        mf__fa_load_vec(ls, a.lse + bh * a.Tq + i0, bq, B, INFINITY);
        mf__fa_load_vec(Ds, a.D + bh * a.Tq + i0, bq, B, 0.0f);
        __syncthreads();
        mf__fa_mm<TC>(ss, lt, qt, le, kt, le, B, B, dkp, 0);            /* S = Qs K^T */
        if (a.gk) mf__fa_mm<TC>(dps, lt, gt, le, vt, le, B, B, dvp, 0); /* dP = dO V^T */
        __syncthreads();
        MF__FA_EACH(ii, jj, B, B, {
            int vis = ii < bq && jj < bk && (!a.causal || j0 + jj <= i0 + ii + off);
            float p = vis ? expf(ss[ii * lt + jj] - ls[ii]) : 0.0f;
            if (a.drop.p > 0.0f) { /* P~ for dV; dS = P~ dP~ - P D */
                float pd = vis ? mf__fa_drop(a, bh, i0 + ii, j0 + jj, p) : 0.0f;
                mf__fa_put(pe + ii * le + jj, pd);
                if (a.gk) mf__fa_put(dse + ii * le + jj, pd * dps[ii * lt + jj] - p * Ds[ii]);
            } else {
                mf__fa_put(pe + ii * le + jj, p);
                if (a.gk) mf__fa_put(dse + ii * le + jj, p * (dps[ii * lt + jj] - Ds[ii])); /* dS / scale: Qs has it */
            }
        });
        __syncthreads();
        if (a.gv) mf__fa_mm<TC>(dvs, lv, pe, le, gs, lve, B, dvp, B, 1);  /* dV += P^T dO */
        if (a.gk) mf__fa_mm<TC>(dks, lk, dse, le, qs, lke, B, dkp, B, 1); /* dK += dS^T Qs */
    }
    __syncthreads();
    if (a.gk) mf__fa_add_out(a.gk + mf__fa_at(a, MF__AT_K, bh, j0), a.dk, ldk, dks, lk, bk);
    if (a.gv) mf__fa_add_out(a.gv + mf__fa_at(a, MF__AT_V, bh, j0), a.dv, ldv, dvs, lv, bk);
}

/* dQ: block = (head, query tile) over its visible key tiles. shared (mf__fa_smem): floats dQ [B][lk],
   S^T [B][lt], dP^T [B][lt] ([key][query]), lse [B], D [B]; operand tiles Qs^T [dkp][le],
   dO^T [dvp][le], K^T [dkp][le], V^T [dvp][le], K [B][lke], dS^T [B][le] (the fp32 kernels write dS^T
   over dP^T) */
template <int TC> static __global__ void __launch_bounds__(MF__FA_THREADS) mf__k_fa_bwd_q(mf__fa_args a) {
    typedef typename mf__fa_elem<TC>::T E;
    MF_DYN_SMEM(float, sm);
    const int B = a.B, dkp = mf__fa_pad(a.dk), dvp = mf__fa_pad(a.dv), lt = B + 4, lk = dkp + 4;
    const int le = mf__fa_stride(B, sizeof(E)), lke = mf__fa_stride(dkp, sizeof(E));
    float *dqs = sm, *st = dqs + B * lk, *dpt = st + B * lt, *ls = dpt + B * lt, *Ds = ls + B;
    E *qt = (E *)(Ds + B), *gt = qt + dkp * le, *kt = gt + dvp * le, *vt = kt + dkp * le, *ks = vt + dvp * le;
    E *dse = TC == MF__FA_BF16 ? ks + B * lke : (E *)dpt;
    int nqt = (a.Tq + B - 1) / B, i0 = (nqt - 1 - (int)(blockIdx.x % nqt)) * B, off = a.Tk - a.Tq;
    long long bh = blockIdx.x / nqt;
    int bq = min(B, a.Tq - i0), kend = a.causal ? min(a.Tk, i0 + bq + off) : a.Tk;
    const int ldq = a.geo.ld[MF__AT_Q], ldk = a.geo.ld[MF__AT_K], ldv = a.geo.ld[MF__AT_V], ldo = a.geo.ld[MF__AT_O];
    mf__fa_load_t(qt, le, a.q, a.qb, mf__fa_at(a, MF__AT_Q, bh, i0), a.dk, ldq, bq, B, dkp, a.scale);
    mf__fa_load_t(gt, le, a.g, 0, mf__fa_at(a, MF__AT_O, bh, i0), a.dv, ldo, bq, B, dvp, 1.0f);
    mf__fa_load_vec(ls, a.lse + bh * a.Tq + i0, bq, B, INFINITY);
    mf__fa_load_vec(Ds, a.D + bh * a.Tq + i0, bq, B, 0.0f);
    mf__fa_zero(dqs, lk, B, dkp);
    for (int j0 = 0; j0 < kend; j0 += B) {
        int bk = min(B, kend - j0);
        long long k = mf__fa_at(a, MF__AT_K, bh, j0);
        __syncthreads();
        mf__fa_load_t(kt, le, a.k, a.kb, k, a.dk, ldk, bk, B, dkp, 1.0f);
        mf__fa_load(ks, lke, a.k, a.kb, k, a.dk, ldk, bk, B, dkp, 1.0f);
        mf__fa_load_t(vt, le, a.v, a.vb, mf__fa_at(a, MF__AT_V, bh, j0), a.dv, ldv, bk, B, dvp, 1.0f);
        __syncthreads();
        mf__fa_mm<TC>(st, lt, kt, le, qt, le, B, B, dkp, 0);  /* S^T = K Qs^T */
        mf__fa_mm<TC>(dpt, lt, vt, le, gt, le, B, B, dvp, 0); /* dP^T = V dO^T */
        __syncthreads();
        MF__FA_EACH(jj, ii, B, B, {
            int vis = ii < bq && jj < bk && (!a.causal || j0 + jj <= i0 + ii + off);
            float p = vis ? expf(st[jj * lt + ii] - ls[ii]) : 0.0f;
            if (a.drop.p > 0.0f) {
                float pd = vis ? mf__fa_drop(a, bh, i0 + ii, j0 + jj, p) : 0.0f;
                mf__fa_put(dse + jj * le + ii, (pd * dpt[jj * lt + ii] - p * Ds[ii]) * a.scale);
            } else mf__fa_put(dse + jj * le + ii, p * (dpt[jj * lt + ii] - Ds[ii]) * a.scale); /* dS^T */
        });
        __syncthreads();
        mf__fa_mm<TC>(dqs, lk, dse, le, ks, lke, B, dkp, B, 1); /* dQ += dS K */
    }
    __syncthreads();
    mf__fa_add_out(a.gq + mf__fa_at(a, MF__AT_Q, bh, i0), a.dk, ldq, dqs, lk, bq);
}

/* the kernels' precision (MF__FA_FP32 / TF32 / BF16): the context's, on a device with tensor cores
   (sm_80+); fp32 elsewhere */
static int mf__cu_fa_prec(mf_ctx *ctx) {
    if (!MF__CU(ctx)->tc_tf32) return MF__FA_FP32;
    return MF__CU(ctx)->prec == MF_PREC_BF16 ? MF__FA_BF16 : MF__CU(ctx)->prec == MF_PREC_TF32 ? MF__FA_TF32 : MF__FA_FP32;
}
/* the tile B of kernel `kind` (mf__fa_smem): 64 or 32 with room for two blocks per SM, else 64 or 32
   alone, else 16 (16 x 16 score tiles keep only a quarter of the threads busy in the fp32 products:
   the last resort, for the widest heads); 0 (and an error) when even 16 does not fit */
static int mf__cu_fa_tile(mf_ctx *ctx, int dk, int dv, int kind, int bf16, const char *op) {
    size_t lim = (size_t)MF__CU(ctx)->smem_optin;
    int B, pass;
    for (pass = 0; pass < 2; pass++)
        for (B = 64; B >= 32; B /= 2)
            if (mf__fa_smem(B, dk, dv, kind, bf16) <= (pass ? lim : lim / 2)) return B;
    if (mf__fa_smem(16, dk, dv, kind, bf16) <= lim) return 16;
    mf__fail(ctx, "%s: head sizes dk = %d, dv = %d need %zu bytes of shared memory per block even with 16-query tiles, "
             "more than this GPU's %zu: use smaller heads (or run on the CPU)", op, dk, dv,
             mf__fa_smem(16, dk, dv, kind, bf16), lim);
    return 0;
}
/* launch a fused-attention kernel with `bytes` of dynamic shared memory (mf__cu_fa_tile chose tiles that fit) */
#define MF__CU_FA_RUN(ctx, op, kernel, grid, bytes, args) \
    (mf__cu_smem(ctx, kernel, bytes, op, "the fused attention", "use smaller heads") < 0 \
         ? -1 : MF__CU_RUN(ctx, op, kernel, grid, MF__FA_THREADS, bytes, args))

static mf__fa_args mf__cu_fa_args(const mf_tensor *out) {
    const mf_tensor *Q = out->src[0], *K = out->src[1], *V = out->src[2];
    mf__fa_args a;
    memset(&a, 0, sizeof a);
    a.q = Q->data; a.k = K->data; a.v = V->data; a.o = out->data; a.g = out->grad; a.lse = out->saved;
    a.qb = Q->bf16; a.kb = K->bf16; a.vb = V->bf16; a.ob = out->bf16;
    a.geo = mf__attn_geo_of(out);
    a.Tq = a.geo.Tq; a.Tk = a.geo.Tk; a.dk = a.geo.dk; a.dv = a.geo.dv;
    a.causal = out->iarg[MF__ARG_ATTN_CAUSAL]; a.scale = out->farg[MF__FARG_ATTN_SCALE];
    return a;
}
static mf__fa_args mf__cu_fa_args_ctx(const mf_ctx *ctx, const mf_tensor *out) {
    mf__fa_args a = mf__cu_fa_args(out);
    a.drop = mf__attn_drop_of(ctx, out);
    return a;
}
/* launch the fused-attention kernel `kind` (0 the forward, 1 dK / dV, 2 dQ: mf__fa_smem's kinds) over
   the query tiles (the key tiles for kind 1) of BH heads: its tile a->B, shared memory and grid */
/* the kernel `kind` (0 the forward, 1 dK / dV, 2 dQ) of precision TC, launched */
template <int TC> static int mf__cu_fa_run(mf_ctx *ctx, const char *op, const mf__fa_args *a, int kind, unsigned grid,
                                           size_t bytes) {
    if (kind == 0) return MF__CU_FA_RUN(ctx, op, mf__k_fa_fwd<TC>, grid, bytes, *a);
    if (kind == 1) return MF__CU_FA_RUN(ctx, op, mf__k_fa_bwd_kv<TC>, grid, bytes, *a);
    return MF__CU_FA_RUN(ctx, op, mf__k_fa_bwd_q<TC>, grid, bytes, *a);
}
static int mf__cu_fa_launch(mf_ctx *ctx, const char *op, mf__fa_args *a, int kind, long long BH) {
    int prec = mf__cu_fa_prec(ctx), bf16 = prec == MF__FA_BF16, T = kind == 1 ? a->Tk : a->Tq;
    size_t bytes;
    unsigned grid;
    if (!(a->B = mf__cu_fa_tile(ctx, a->dk, a->dv, kind, bf16, op))) return -1;
    bytes = mf__fa_smem(a->B, a->dk, a->dv, kind, bf16);
    grid = (unsigned)(BH * ((T + a->B - 1) / a->B));
    return prec == MF__FA_BF16   ? mf__cu_fa_run<MF__FA_BF16>(ctx, op, a, kind, grid, bytes)
           : prec == MF__FA_TF32 ? mf__cu_fa_run<MF__FA_TF32>(ctx, op, a, kind, grid, bytes)
                                 : mf__cu_fa_run<MF__FA_FP32>(ctx, op, a, kind, grid, bytes);
}
static int mf__cu_attention_fwd(mf_ctx *ctx, mf_tensor *out) {
    mf__fa_args a = mf__cu_fa_args_ctx(ctx, out);
    long long BH = a.geo.BH;
    if (!(out->saved = (float *)mf__cu_arena(ctx, (size_t)(BH * a.Tq) * sizeof(float)))) return -1;
    a.out = out->data; a.lse_out = out->saved;
    return mf__cu_fa_launch(ctx, "attention", &a, 0, BH);
}
static int mf__cu_attention_bwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *Q = out->src[0], *K = out->src[1], *V = out->src[2];
    mf__fa_args a = mf__cu_fa_args_ctx(ctx, out);
    long long BH = a.geo.BH;
    const char *op = "attention (backward)";
    float *D;
    a.gq = mf__g(Q); a.gk = mf__g(K); a.gv = mf__g(V);
    if (!a.gq && !a.gk && !a.gv) return 0;
    if (!(D = (float *)mf__cu_arena(ctx, (size_t)(BH * a.Tq) * sizeof(float)))) return -1;
    a.D = D;
    if (MF__CU_RUN(ctx, op, mf__k_fa_rowdot, MF__EW(BH * a.Tq), D, a, BH * a.Tq) < 0)
        return -1;
    if ((a.gk || a.gv) && mf__cu_fa_launch(ctx, op, &a, 1, BH) < 0) return -1;
    return a.gq ? mf__cu_fa_launch(ctx, op, &a, 2, BH) : 0;
}

/* ==== [cu:xl] =============================================================================== */
#ifndef METAFORMER_NO_XL
/* Transformer-XL relative attention (mf_rel_attention): fp32 kernels, and their bf16 tensor-core
   twins (MF_PREC_BF16 on sm_80+: mf__k_xl_*_bf16 below, chosen by mf__cu_fa_prec). */
/* FlashAttention-2 style kernels for the relative attention of docs/math.md §5.2 (the CPU twin is
   mf__rel_attention_forward / _backward in [mf:xl]): no Tq x Tk tensor is ever stored.
     score[i][j] = scale * ((q_i + u) . k_j + q_i . R[rho] + S[rho]),  rho = P + j - i - M,
     M = Tk - Tq memory keys (all visible), causal among the current tokens: j <= i + M.
   The tile loops are separate from the score terms: mf__cu_xl_score is the only place the three
   terms are formed, and every kernel calls it on tiles staged by mf__cu_xl_stage.
   A tile pair (queries i0 .. i0 + 31, keys j0 .. j0 + 31) needs the 63 consecutive table rows
   rho0 = P + j0 - i0 - 31 - M ...; query lane ii / key lane jj uses local row jj - ii + 31 (the
   diagonal that labml's pad-shift realises). Rows outside the table are staged as zeros (they
   only occur at masked positions).
   Kernels (128 threads, 4 per row of a 32-row tile; dynamic shared memory in floats):
     mf__k_xl_fwd      grid BH * ceil(Tq/32): q tile, u; per key tile K, V, 63 R rows, 63 S;
                       online softmax (row max / sum over the 4 lanes of a row by shuffles), the
                       output tile accumulated in shared memory; saves the row log-sum-exp.
     mf__k_xl_dot      D_i = dO_i . O_i.
     mf__k_xl_bwd_dq   grid BH * ceil(Tq/32): recomputes P, dS = scale P (dO.v - D) per key tile,
                       dQ_i += sum_j dS_ij (k_j + R[rho_ij]).
     mf__k_xl_bwd_dkv  grid BH * ceil(Tk/32): per query tile that sees the keys, dV_j += P^T dO,
                       dK_j += dS^T q + (sum_i dS_ij) u; the block's part of du, sum_j (sum_i dS_ij) k_j,
                       goes to a [BH][key tiles][dk] buffer.
     mf__k_xl_bwd_rel  grid H * ceil(Tk/32): one block owns 32 relative distances d = i + M - j
                       (table rows P - d) of one head and walks every b and query tile along those
                       diagonals: dR[P - d] += sum dS_ij q_i, dS[P - d] += sum dS_ij. Only the Tk
                       visible rows P - Tk + 1 .. P are written (the CPU's rule).
     mf__k_xl_bwd_du   du[h] += those parts over b and key tiles, in order.
   Every value is summed by one thread in a fixed order (no atomics): deterministic. */
#define MF__XL_BQ 32                          /* queries of a tile */
#define MF__XL_BK 32                          /* keys of a tile; relative distances of a dR block */
#define MF__XL_NT 128                         /* threads of a block */
#define MF__XL_TPR 4                          /* threads per tile row */
#define MF__XL_NR (MF__XL_BK + MF__XL_BQ - 1) /* table rows (or keys) a tile pair needs */

typedef struct {
    const float *q, *k, *v, *u, *R, *S; /* q [BH, Tq, dk], k [BH, Tk, dk], v [BH, Tk, dv], u [H, dk], R [2P, H, dk], S [2P, H] */
    const float *go, *lse, *D;          /* backward: dO [BH, Tq, dv], row log-sum-exp, D = dO . O [BH, Tq] */
    int H, Tq, Tk, dk, dv, P;
    float scale;
    mf__attn_drop drop;                 /* probability dropout over all Tk keys (docs/math.md §4.1) */
} mf__cu_xl_args;
/* the dropped probability of query i, key j of head bh (the CPU's element index and draw) */
static __device__ float mf__cu_xl_drop(const mf__cu_xl_args &a, long long bh, int i, int j, float p) {
    return mf__drop_keep_at(a.drop.key, (uint64_t)((bh * a.Tq + i) * a.Tk + j), a.drop.p) ? p * a.drop.s : 0.0f;
}

/* ---- the score terms ---- */
/* scale * ((q + u) . k + q . r + s) of one (query, key) pair; r, s: the pair's table row */
static __device__ float mf__cu_xl_score(const float *q, const float *u, const float *k, const float *r, float s,
                                        int dk, float scale) {
    float a = 0;
    for (int c = 0; c < dk; c++) a += (q[c] + u[c]) * k[c] + q[c] * r[c];
    return scale * (a + s);
}
static __device__ float mf__cu_xl_dotp(const float *a, const float *b, int n) {
    float s = 0;
    for (int c = 0; c < n; c++) s += a[c] * b[c];
    return s;
}
/* query i sees key j: memory fully, the current tokens causally */
static __device__ int mf__cu_xl_visible(const mf__cu_xl_args &a, int i, int j) {
    return i < a.Tq && j >= 0 && j < a.Tk && j <= i + a.Tk - a.Tq;
}
/* dS of the visible pair (query i, key j) of head bh: scale * P * (dO_i . v_j - D_i), P recomputed
   from the saved lse; *p: the P that weights v_j (with dropout P~, and dS = scale (P~ dO_i . v_j - P D_i)) */
static __device__ float mf__cu_xl_dscore_of(const mf__cu_xl_args &a, long long bh, int i, int j, float s, float lse,
                                            float dot, float D, float *p) { /* dot: dO_i . v_j */
    float pr = expf(s - lse), pd;
    if (a.drop.p <= 0.0f) {
        *p = pr;
        return a.scale * pr * (dot - D);
    }
    *p = pd = mf__cu_xl_drop(a, bh, i, j, pr);
    return a.scale * (pd * dot - pr * D);
}
static __device__ float mf__cu_xl_dscore(const mf__cu_xl_args &a, long long bh, int i, int j, float s, float lse,
                                         const float *go, const float *v, float D, float *p) {
    return mf__cu_xl_dscore_of(a, bh, i, j, s, lse, mf__cu_xl_dotp(go, v, a.dv), D, p);
}

/* ---- tile staging ---- */
/* dst [n][w] (row stride ldd) = rows r0 .. r0 + n - 1 of a matrix of `rows` rows (row stride lds);
   rows outside are 0. The tiles of width dk / dv are kept with an odd row stride (dk | 1, dv | 1):
   lanes that read different rows of a column then hit different shared-memory banks. */
static __device__ void mf__cu_xl_stage(float *dst, int ldd, const float *src, long long lds, int r0, int n, int rows, int w) {
    for (int e = threadIdx.x; e < n * w; e += blockDim.x) {
        int r = e / w, g = r0 + r;
        dst[r * ldd + e % w] = g >= 0 && g < rows ? src[(long long)g * lds + e % w] : 0.0f;
    }
}
/* the table rows rho0 .. rho0 + n - 1 of head h: R into rs [n][dk], S into ss [n] */
static __device__ void mf__cu_xl_stage_rows(const mf__cu_xl_args &a, int h, int rho0, int n, float *rs, float *ss) {
    mf__cu_xl_stage(rs, a.dk | 1, a.R + (long long)h * a.dk, (long long)a.H * a.dk, rho0, n, 2 * a.P, a.dk);
    mf__cu_xl_stage(ss, 1, a.S + h, a.H, rho0, n, 2 * a.P, 1);
}
/* sum over the 4 lanes of a tile row (adjacent lanes of one warp; every thread of the block calls it) */
static __device__ float mf__cu_xl_rowsum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
static __device__ float mf__cu_xl_rowmax(float v) {
    float o = __shfl_xor_sync(0xffffffffu, v, 1);
    v = o > v ? o : v;
    o = __shfl_xor_sync(0xffffffffu, v, 2);
    return o > v ? o : v;
}

/* ---- forward: one block per (b*h, query tile) ---- */
/* shared: q [BQ][dk], u [dk], K [BK][dk], V [BK][dv], R [NR][dk], S [NR], P [BQ][BK], O [BQ][dv],
   alpha [BQ], l [BQ] */
static __global__ void mf__k_xl_fwd(mf__cu_xl_args a, float *o, float *lse) {
    MF_DYN_SMEM(float, sm);
    const int BQ = MF__XL_BQ, BK = MF__XL_BK, NR = MF__XL_NR;
    int dk = a.dk, dv = a.dv, M = a.Tk - a.Tq, nqt = (a.Tq + BQ - 1) / BQ, n, jj, e, j0, kend;
    long long bh = blockIdx.x / nqt;
    int h = (int)(bh % a.H), i0 = (int)(blockIdx.x % nqt) * BQ, ii = threadIdx.x / MF__XL_TPR, sub = threadIdx.x % MF__XL_TPR;
    int lk = dk | 1, lv = dv | 1;
    float *qs = sm, *us = qs + BQ * lk, *ks = us + dk, *vs = ks + BK * lk, *rs = vs + BK * lv, *ss = rs + NR * lk;
    float *p = ss + NR, *acc = p + BQ * BK, *al = acc + BQ * dv, *ls = al + BQ;
    float m = -INFINITY, l = 0;
    kend = i0 + BQ + M < a.Tk ? i0 + BQ + M : a.Tk; /* later keys are hidden from the whole tile */
    mf__cu_xl_stage(qs, lk, a.q + bh * a.Tq * dk, dk, i0, BQ, a.Tq, dk);
    mf__cu_xl_stage(us, dk, a.u + (long long)h * dk, dk, 0, 1, 1, dk);
    for (e = threadIdx.x; e < BQ * dv; e += blockDim.x) acc[e] = 0.0f;
    for (j0 = 0; j0 < kend; j0 += BK) {
        float sc[MF__XL_BK / MF__XL_TPR], mx = -INFINITY, mnew, alpha, sum = 0;
        __syncthreads(); /* the previous tile is consumed */
        mf__cu_xl_stage(ks, lk, a.k + bh * a.Tk * dk, dk, j0, BK, a.Tk, dk);
        mf__cu_xl_stage(vs, lv, a.v + bh * a.Tk * dv, dv, j0, BK, a.Tk, dv);
        mf__cu_xl_stage_rows(a, h, a.P + j0 - i0 - (BQ - 1) - M, NR, rs, ss);
        __syncthreads();
        for (n = 0; n < BK / MF__XL_TPR; n++) {
            int r;
            jj = sub + n * MF__XL_TPR; r = jj - ii + BQ - 1;
            sc[n] = mf__cu_xl_visible(a, i0 + ii, j0 + jj)
                        ? mf__cu_xl_score(qs + ii * lk, us, ks + jj * lk, rs + r * lk, ss[r], dk, a.scale) : -INFINITY;
            mx = sc[n] > mx ? sc[n] : mx;
        }
        mx = mf__cu_xl_rowmax(mx);
        mnew = mx > m ? mx : m;
        alpha = mnew == -INFINITY ? 1.0f : expf(m - mnew);
        for (n = 0; n < BK / MF__XL_TPR; n++) {
            float pe = sc[n] == -INFINITY ? 0.0f : expf(sc[n] - mnew);
            sum += pe; /* l is the undropped sum */
            if (a.drop.p > 0.0f && pe != 0.0f) pe = mf__cu_xl_drop(a, bh, i0 + ii, j0 + sub + n * MF__XL_TPR, pe);
            p[ii * BK + sub + n * MF__XL_TPR] = pe;
        }
        sum = mf__cu_xl_rowsum(sum);
        l = l * alpha + sum;
        m = mnew;
        if (sub == 0) al[ii] = alpha;
        __syncthreads();
        for (e = threadIdx.x; e < BQ * dv; e += blockDim.x) { /* O = alpha O + P V */
            int r = e / dv, c = e % dv;
            float s = 0;
            for (jj = 0; jj < BK; jj++) s += p[r * BK + jj] * vs[jj * lv + c];
            acc[e] = acc[e] * al[r] + s;
        }
    }
    if (sub == 0) {
        ls[ii] = l;
        if (i0 + ii < a.Tq) lse[bh * a.Tq + i0 + ii] = l > 0 ? m + logf(l) : INFINITY;
    }
    __syncthreads();
    for (e = threadIdx.x; e < BQ * dv; e += blockDim.x) {
        int r = e / dv;
        if (i0 + r < a.Tq) o[(bh * a.Tq + i0 + r) * dv + e % dv] = ls[r] > 0 ? acc[e] / ls[r] : 0.0f;
    }
}

/* D[row] = dO . O */
static __global__ void mf__k_xl_dot(float *D, const float *g, const float *o, int dv, long long rows) {
    MF__CU_LOOP(r, rows) D[r] = mf__cu_xl_dotp(g + r * dv, o + r * dv, dv);
}

/* ---- dQ: one block per (b*h, query tile), its key tiles in order ---- */
/* shared: q [BQ][dk], dO [BQ][dv], u [dk], K [BK][dk], V [BK][dv], R [NR][dk], S [NR], dS [BQ][BK], dQ [BQ][dk] */
static __global__ void mf__k_xl_bwd_dq(mf__cu_xl_args a, float *dq) {
    MF_DYN_SMEM(float, sm);
    const int BQ = MF__XL_BQ, BK = MF__XL_BK, NR = MF__XL_NR;
    int dk = a.dk, dv = a.dv, M = a.Tk - a.Tq, nqt = (a.Tq + BQ - 1) / BQ, n, e, j0, kend;
    long long bh = blockIdx.x / nqt;
    int h = (int)(bh % a.H), i0 = (int)(blockIdx.x % nqt) * BQ, ii = threadIdx.x / MF__XL_TPR, sub = threadIdx.x % MF__XL_TPR;
    int lk = dk | 1, lv = dv | 1;
    float *qs = sm, *gs = qs + BQ * lk, *us = gs + BQ * lv, *ks = us + dk, *vs = ks + BK * lk, *rs = vs + BK * lv;
    float *ss = rs + NR * lk, *ds = ss + NR, *acc = ds + BQ * BK;
    long long row = bh * a.Tq + i0 + ii;
    float L = i0 + ii < a.Tq ? a.lse[row] : 0.0f, Dr = i0 + ii < a.Tq ? a.D[row] : 0.0f;
    kend = i0 + BQ + M < a.Tk ? i0 + BQ + M : a.Tk;
    mf__cu_xl_stage(qs, lk, a.q + bh * a.Tq * dk, dk, i0, BQ, a.Tq, dk);
    mf__cu_xl_stage(gs, lv, a.go + bh * a.Tq * dv, dv, i0, BQ, a.Tq, dv);
    mf__cu_xl_stage(us, dk, a.u + (long long)h * dk, dk, 0, 1, 1, dk);
    for (e = threadIdx.x; e < BQ * dk; e += blockDim.x) acc[e] = 0.0f;
    for (j0 = 0; j0 < kend; j0 += BK) {
        __syncthreads();
        mf__cu_xl_stage(ks, lk, a.k + bh * a.Tk * dk, dk, j0, BK, a.Tk, dk);
        mf__cu_xl_stage(vs, lv, a.v + bh * a.Tk * dv, dv, j0, BK, a.Tk, dv);
        mf__cu_xl_stage_rows(a, h, a.P + j0 - i0 - (BQ - 1) - M, NR, rs, ss);
        __syncthreads();
        for (n = 0; n < BK / MF__XL_TPR; n++) {
            int jj = sub + n * MF__XL_TPR, r = jj - ii + BQ - 1;
            float d = 0, pr;
            if (mf__cu_xl_visible(a, i0 + ii, j0 + jj))
                d = mf__cu_xl_dscore(a, bh, i0 + ii, j0 + jj,
                                     mf__cu_xl_score(qs + ii * lk, us, ks + jj * lk, rs + r * lk, ss[r], dk, a.scale), L,
                                     gs + ii * lv, vs + jj * lv, Dr, &pr);
            ds[ii * BK + jj] = d;
        }
        __syncthreads();
        for (e = threadIdx.x; e < BQ * dk; e += blockDim.x) { /* dQ += dS (K + R_diagonal) */
            int r = e / dk, c = e % dk, jj;
            float s = 0;
            for (jj = 0; jj < BK; jj++) s += ds[r * BK + jj] * (ks[jj * lk + c] + rs[(jj - r + BQ - 1) * lk + c]);
            acc[e] += s;
        }
    }
    for (e = threadIdx.x; e < BQ * dk; e += blockDim.x)
        if (i0 + e / dk < a.Tq) dq[(bh * a.Tq + i0) * dk + e] += acc[e];
}

/* ---- dK, dV: one block per (b*h, key tile), the query tiles that see it in order ---- */
/* shared: K [BK][dk], V [BK][dv], u [dk], q [BQ][dk], dO [BQ][dv], R [NR][dk], S [NR], lse [BQ], D [BQ],
   P^T [BK][BQ], dS^T [BK][BQ], dK [BK][dk], dV [BK][dv], colsum [BK] (row strides of q, k, R, dO, v
   padded). dup (or NULL): the block's part of du, sum_j colsum(dS)_j k_j, at [b*h][key tile][dk] */
static __global__ void mf__k_xl_bwd_dkv(mf__cu_xl_args a, float *dk_, float *dv_, float *dup) {
    MF_DYN_SMEM(float, sm);
    const int BQ = MF__XL_BQ, BK = MF__XL_BK, NR = MF__XL_NR;
    int dk = a.dk, dv = a.dv, M = a.Tk - a.Tq, nkt = (a.Tk + BK - 1) / BK, n, e, i0;
    long long bh = blockIdx.x / nkt;
    int h = (int)(bh % a.H), j0 = (int)(blockIdx.x % nkt) * BK, jj = threadIdx.x / MF__XL_TPR, sub = threadIdx.x % MF__XL_TPR;
    int lk = dk | 1, lv = dv | 1;
    float *ks = sm, *vs = ks + BK * lk, *us = vs + BK * lv, *qs = us + dk, *gs = qs + BQ * lk, *rs = gs + BQ * lv;
    float *ss = rs + NR * lk, *lq = ss + NR, *dq = lq + BQ, *pt = dq + BQ, *dt = pt + BK * BQ, *ak = dt + BK * BQ;
    float *av = ak + BK * dk, *csum = av + BK * dv, cacc = 0;
    mf__cu_xl_stage(ks, lk, a.k + bh * a.Tk * dk, dk, j0, BK, a.Tk, dk);
    mf__cu_xl_stage(vs, lv, a.v + bh * a.Tk * dv, dv, j0, BK, a.Tk, dv);
    mf__cu_xl_stage(us, dk, a.u + (long long)h * dk, dk, 0, 1, 1, dk);
    for (e = threadIdx.x; e < BK * dk; e += blockDim.x) ak[e] = 0.0f;
    for (e = threadIdx.x; e < BK * dv; e += blockDim.x) av[e] = 0.0f;
    i0 = j0 - M > 0 ? (j0 - M) / BQ * BQ : 0; /* query i sees key j iff i >= j - M */
    for (; i0 < a.Tq; i0 += BQ) {
        __syncthreads();
        mf__cu_xl_stage(qs, lk, a.q + bh * a.Tq * dk, dk, i0, BQ, a.Tq, dk);
        mf__cu_xl_stage(gs, lv, a.go + bh * a.Tq * dv, dv, i0, BQ, a.Tq, dv);
        mf__cu_xl_stage(lq, 1, a.lse + bh * a.Tq, 1, i0, BQ, a.Tq, 1);
        mf__cu_xl_stage(dq, 1, a.D + bh * a.Tq, 1, i0, BQ, a.Tq, 1);
        mf__cu_xl_stage_rows(a, h, a.P + j0 - i0 - (BQ - 1) - M, NR, rs, ss);
        __syncthreads();
        for (n = 0; n < BQ / MF__XL_TPR; n++) {
            int ii = sub + n * MF__XL_TPR, r = jj - ii + BQ - 1;
            float d = 0, pr = 0;
            if (mf__cu_xl_visible(a, i0 + ii, j0 + jj))
                d = mf__cu_xl_dscore(a, bh, i0 + ii, j0 + jj,
                                     mf__cu_xl_score(qs + ii * lk, us, ks + jj * lk, rs + r * lk, ss[r], dk, a.scale),
                                     lq[ii], gs + ii * lv, vs + jj * lv, dq[ii], &pr);
            pt[jj * BQ + ii] = pr;
            dt[jj * BQ + ii] = d;
            cacc += d;
        }
        __syncthreads();
        for (e = threadIdx.x; e < BK * dv; e += blockDim.x) { /* dV += P^T dO */
            int r = e / dv, c = e % dv, ii;
            float s = 0;
            for (ii = 0; ii < BQ; ii++) s += pt[r * BQ + ii] * gs[ii * lv + c];
            av[e] += s;
        }
        for (e = threadIdx.x; e < BK * dk; e += blockDim.x) { /* dK += dS^T q */
            int r = e / dk, c = e % dk, ii;
            float s = 0;
            for (ii = 0; ii < BQ; ii++) s += dt[r * BQ + ii] * qs[ii * lk + c];
            ak[e] += s;
        }
    }
    cacc = mf__cu_xl_rowsum(cacc);
    if (sub == 0) csum[jj] = cacc;
    __syncthreads();
    for (e = threadIdx.x; dup && e < dk; e += blockDim.x) { /* keys past Tk are zero rows */
        float s = 0;
        for (n = 0; n < BK; n++) s += csum[n] * ks[n * lk + e];
        dup[(long long)blockIdx.x * dk + e] = s;
    }
    for (e = threadIdx.x; dv_ && e < BK * dv; e += blockDim.x)
        if (j0 + e / dv < a.Tk) dv_[(bh * a.Tk + j0) * dv + e] += av[e];
    for (e = threadIdx.x; dk_ && e < BK * dk; e += blockDim.x) /* the u term: + colsum(dS) u */
        if (j0 + e / dk < a.Tk) dk_[(bh * a.Tk + j0) * dk + e] += ak[e] + csum[e / dk] * us[e % dk];
}

/* ---- dR, dS: one block per (head, 32 relative distances), every b and query tile in order ---- */
/* Distance d = i + M - j (table row P - d); query lane ii and distance lane dd pair with key
   j = i0 + ii + M - d0 - dd, the local key ii - dd + BK - 1 of the NR keys from jlo = i0 + M - d0 - BK + 1.
   shared: u [dk], R [BK][dk], S [BK], q [BQ][dk], dO [BQ][dv], lse [BQ], D [BQ], K [NR][dk], V [NR][dv],
   dS [BK][BQ], dR [BK][dk] */
static __global__ void mf__k_xl_bwd_rel(mf__cu_xl_args a, int B, float *dR, float *dS) {
    MF_DYN_SMEM(float, sm);
    const int BQ = MF__XL_BQ, BK = MF__XL_BK, NR = MF__XL_NR;
    int dk = a.dk, dv = a.dv, M = a.Tk - a.Tq, ndt = (a.Tk + BK - 1) / BK, n, e, b, i0;
    int h = (int)(blockIdx.x / ndt), d0 = (int)(blockIdx.x % ndt) * BK, dd = threadIdx.x / MF__XL_TPR;
    int sub = threadIdx.x % MF__XL_TPR;
    int lk = dk | 1, lv = dv | 1;
    float *us = sm, *rs = us + dk, *ss = rs + BK * lk, *qs = ss + BK, *gs = qs + BQ * lk, *lq = gs + BQ * lv;
    float *dq = lq + BQ, *ks = dq + BQ, *vs = ks + NR * lk, *dt = vs + NR * lv, *ar = dt + BK * BQ, sacc = 0;
    mf__cu_xl_stage(us, dk, a.u + (long long)h * dk, dk, 0, 1, 1, dk);
    for (e = threadIdx.x; e < BK * dk; e += blockDim.x) { /* row dd: table row P - d0 - dd (descending) */
        int r = e / dk;
        rs[r * lk + e % dk] = d0 + r < a.Tk ? a.R[((long long)(a.P - d0 - r) * a.H + h) * dk + e % dk] : 0.0f;
        ar[e] = 0.0f;
    }
    for (e = threadIdx.x; e < BK; e += blockDim.x) ss[e] = d0 + e < a.Tk ? a.S[(long long)(a.P - d0 - e) * a.H + h] : 0.0f;
    for (b = 0; b < B; b++) {
        long long bh = (long long)b * a.H + h;
        for (i0 = 0; i0 < a.Tq; i0 += BQ) {
            int jlo = i0 + M - d0 - (BK - 1);
            if (i0 + BQ - 1 + M < d0) continue; /* every pair of the tile has j < 0 */
            __syncthreads();
            mf__cu_xl_stage(qs, lk, a.q + bh * a.Tq * dk, dk, i0, BQ, a.Tq, dk);
            mf__cu_xl_stage(gs, lv, a.go + bh * a.Tq * dv, dv, i0, BQ, a.Tq, dv);
            mf__cu_xl_stage(lq, 1, a.lse + bh * a.Tq, 1, i0, BQ, a.Tq, 1);
            mf__cu_xl_stage(dq, 1, a.D + bh * a.Tq, 1, i0, BQ, a.Tq, 1);
            mf__cu_xl_stage(ks, lk, a.k + bh * a.Tk * dk, dk, jlo, NR, a.Tk, dk);
            mf__cu_xl_stage(vs, lv, a.v + bh * a.Tk * dv, dv, jlo, NR, a.Tk, dv);
            __syncthreads();
            for (n = 0; n < BQ / MF__XL_TPR; n++) {
                int ii = sub + n * MF__XL_TPR, jl = ii - dd + BK - 1;
                float d = 0, pr;
                if (d0 + dd < a.Tk && mf__cu_xl_visible(a, i0 + ii, jlo + jl))
                    d = mf__cu_xl_dscore(a, bh, i0 + ii, jlo + jl,
                                         mf__cu_xl_score(qs + ii * lk, us, ks + jl * lk, rs + dd * lk, ss[dd], dk, a.scale),
                                         lq[ii], gs + ii * lv, vs + jl * lv, dq[ii], &pr);
                dt[dd * BQ + ii] = d;
                sacc += d;
            }
            __syncthreads();
            for (e = threadIdx.x; e < BK * dk; e += blockDim.x) { /* dR_rows += dS_diagonals q */
                int r = e / dk, c = e % dk, ii;
                float s = 0;
                for (ii = 0; ii < BQ; ii++) s += dt[r * BQ + ii] * qs[ii * lk + c];
                ar[e] += s;
            }
        }
    }
    sacc = mf__cu_xl_rowsum(sacc);
    if (dS && sub == 0 && d0 + dd < a.Tk) dS[(long long)(a.P - d0 - dd) * a.H + h] += sacc;
    for (e = threadIdx.x; dR && e < BK * dk; e += blockDim.x)
        if (d0 + e / dk < a.Tk) dR[((long long)(a.P - d0 - e / dk) * a.H + h) * dk + e % dk] += ar[e];
}

/* du[h][c] += the dK/dV blocks' parts dup [B*H][nkt][dk], over b then key tiles, in order */
static __global__ void mf__k_xl_bwd_du(float *du, const float *dup, int B, int H, int nkt, int dk) {
    MF__CU_LOOP(e, (long long)H * dk) {
        long long h = e / dk, c = e % dk;
        float acc = du[e];
        for (int b = 0; b < B; b++)
            for (int t = 0; t < nkt; t++) acc += dup[(((long long)b * H + h) * nkt + t) * dk + c];
        du[e] = acc;
    }
}

/* ---- the bf16 tensor-core kernels (MF_PREC_BF16 on sm_80+; docs/math.md §22) ---- */
/* The same blocks, tiles, loops and per-pair math as the fp32 kernels above; only the products move
   to the tensor cores, through [cu:attention]'s mf__fa_mm (bf16 WMMA m16n16k16, fp32 accumulators).
   The three score terms become three tile products of k-major bf16 operands staged from fp32
   (rounded to nearest even): A = (q + u) K^T over the tile's keys, Bp = q R^T over its table rows,
   and in the backward G = dO V^T (the dO_i . v_j of dS); a pair reads its content term from A and its
   position term from Bp on its diagonal (row jj - ii + BQ - 1; in dR/dS the key ii - dd + BK - 1
   of A, G). The softmax, P, dS and every row statistic and accumulator stay fp32; P and dS are
   rounded to bf16 only as operands of the products O += P V, dQ += dS K + dS_diag R, dV += P^T dO,
   dK += dS^T q and dR += dS_diag^T q. Tables staged for a tile pair are padded from NR = 63 to 64
   rows (a multiple of 16); head sizes are padded to multiples of 16 with zeros. */
enum { MF__XL_TC_FWD, MF__XL_TC_DQ, MF__XL_TC_DKV, MF__XL_TC_REL };
#define MF__XL_NRP 64 /* MF__XL_NR rounded up to the tensor cores' multiple of 16 */
/* byte offsets of a bf16 kernel's buffers in its dynamic shared memory (a 0-byte buffer: unused by
   that kernel), each 32-byte aligned as WMMA's loads and stores need; bytes: the total */
typedef struct {
    size_t A, Bp, G, acc, acc2, ss, lse, D, csum;     /* fp32 */
    size_t qut, qt, gt, kt, rt, vt, vs, ks, rs, qs, gs, e1, e2; /* bf16 */
    size_t bytes;
} mf__xl_tc_smem;
static __host__ __device__ size_t mf__xl_carve(size_t *at, size_t bytes) {
    size_t o = *at;
    *at += (bytes + 31) & ~(size_t)31;
    return o;
}
/* the layout of kernel `kind`. Row strides: fp32 tiles n + 4 floats, bf16 tiles n + 8 elements (16
   bytes of padding, as mf__fa_stride). Keys nk and table rows nr of a tile: BK and NRP, swapped in
   the dR/dS kernel (BK distances, NRP keys). */
static __host__ __device__ mf__xl_tc_smem mf__xl_tc_layout(int kind, int dk, int dv) {
    const size_t f = sizeof(float), e = 2, q = MF__XL_BQ, bk = MF__XL_BK;
    size_t dkp = (size_t)mf__fa_pad(dk), dvp = (size_t)mf__fa_pad(dv), at = 0;
    size_t nk = kind == MF__XL_TC_REL ? MF__XL_NRP : bk, nr = kind == MF__XL_TC_REL ? bk : MF__XL_NRP;
    int bwd = kind != MF__XL_TC_FWD, dq = kind == MF__XL_TC_DQ, dkv = kind == MF__XL_TC_DKV;
    mf__xl_tc_smem L;
    L.A = mf__xl_carve(&at, q * (nk + 4) * f);
    L.Bp = mf__xl_carve(&at, q * (nr + 4) * f);
    L.G = mf__xl_carve(&at, bwd ? q * (nk + 4) * f : 0);
    L.acc = mf__xl_carve(&at, q * ((bwd ? dkp : dvp) + 4) * f); /* O, dQ, dK or dR */
    L.acc2 = mf__xl_carve(&at, dkv ? bk * (dvp + 4) * f : 0);    /* dV */
    L.ss = mf__xl_carve(&at, nr * f);
    L.lse = mf__xl_carve(&at, q * f);
    L.D = mf__xl_carve(&at, q * f);
    L.csum = mf__xl_carve(&at, bk * f);
    L.qut = mf__xl_carve(&at, dkp * (q + 8) * e);
    L.qt = mf__xl_carve(&at, dkp * (q + 8) * e);
    L.gt = mf__xl_carve(&at, bwd ? dvp * (q + 8) * e : 0);
    L.kt = mf__xl_carve(&at, dkp * (nk + 8) * e);
    L.rt = mf__xl_carve(&at, dkp * (nr + 8) * e);
    L.vt = mf__xl_carve(&at, bwd ? dvp * (nk + 8) * e : 0);
    L.vs = mf__xl_carve(&at, bwd ? 0 : nk * (dvp + 8) * e);
    L.ks = mf__xl_carve(&at, dq ? nk * (dkp + 8) * e : 0);
    L.rs = mf__xl_carve(&at, dq ? nr * (dkp + 8) * e : 0);
    L.qs = mf__xl_carve(&at, dkv || kind == MF__XL_TC_REL ? q * (dkp + 8) * e : 0);
    L.gs = mf__xl_carve(&at, dkv ? q * (dvp + 8) * e : 0);
    L.e1 = mf__xl_carve(&at, q * (bk + 8) * e);                                  /* P^T, dS^T, P or dS */
    L.e2 = mf__xl_carve(&at, dq ? nr * (q + 8) * e : dkv ? q * (bk + 8) * e : 0); /* dS_diag^T or dS */
    L.bytes = at;
    return L;
}
/* dst = rows r0 .. r0 + n - 1 of src (row stride lds, may be negative; rows outside [0, rows) and the
   columns from w to wp are zero), plus the vector add [w] when not NULL, rounded to bf16: row-major
   [n][ld], or trans: [wp][ld] (a k-major "T" tile) */
static __device__ void mf__cu_xl_stage_bf(__nv_bfloat16 *dst, int ld, int trans, const float *src, long long lds, int r0,
                                          int n, int rows, int w, int wp, const float *add) {
    MF__FA_EACH(r, c, n, wp, {
        int g = r0 + r;
        float x = c < w && g >= 0 && g < rows ? src[(long long)g * lds + c] + (add ? add[c] : 0.0f) : 0.0f;
        mf__fa_put(dst + (trans ? c * ld + r : r * ld + c), x);
    });
}
static __device__ void mf__cu_xl_zero(float *dst, int n) {
    for (int e = threadIdx.x; e < n; e += blockDim.x) dst[e] = 0.0f;
}
#define MF__XL_SM(T, name) T *name = (T *)(sm + L.name) /* a buffer of the layout L */
#define MF__XL_MM mf__fa_mm<MF__FA_BF16>

/* forward: block = (b*h, query tile), as mf__k_xl_fwd */
static __global__ void __launch_bounds__(MF__XL_NT) mf__k_xl_fwd_bf16(mf__cu_xl_args a, float *o, float *lse_out) {
    typedef __nv_bfloat16 E;
    MF_DYN_SMEM(unsigned char, sm);
    const int BQ = MF__XL_BQ, BK = MF__XL_BK, NRP = MF__XL_NRP, TPR = MF__XL_TPR;
    const mf__xl_tc_smem L = mf__xl_tc_layout(MF__XL_TC_FWD, a.dk, a.dv);
    const int dk = a.dk, dv = a.dv, dkp = mf__fa_pad(dk), dvp = mf__fa_pad(dv), M = a.Tk - a.Tq, nqt = (a.Tq + BQ - 1) / BQ;
    const int la = BK + 4, lb = NRP + 4, lo = dvp + 4, lq = BQ + 8, lkt = BK + 8, lrt = NRP + 8, lvs = dvp + 8;
    long long bh = blockIdx.x / nqt;
    int h = (int)(bh % a.H), i0 = (int)(blockIdx.x % nqt) * BQ, ii = threadIdx.x / TPR, sub = threadIdx.x % TPR, n, c, j0;
    int kend = i0 + BQ + M < a.Tk ? i0 + BQ + M : a.Tk; /* later keys are hidden from the whole tile */
    MF__XL_SM(float, A); MF__XL_SM(float, Bp); MF__XL_SM(float, acc); MF__XL_SM(float, ss);
    MF__XL_SM(E, qut); MF__XL_SM(E, qt); MF__XL_SM(E, kt); MF__XL_SM(E, rt); MF__XL_SM(E, vs); MF__XL_SM(E, e1);
    float *ls = (float *)(sm + L.lse), m = -INFINITY, l = 0;
    mf__cu_xl_stage_bf(qut, lq, 1, a.q + bh * a.Tq * dk, dk, i0, BQ, a.Tq, dk, dkp, a.u + (long long)h * dk);
    mf__cu_xl_stage_bf(qt, lq, 1, a.q + bh * a.Tq * dk, dk, i0, BQ, a.Tq, dk, dkp, NULL);
    mf__cu_xl_zero(acc, BQ * lo);
    for (j0 = 0; j0 < kend; j0 += BK) {
        float sc[MF__XL_BK / MF__XL_TPR], mx = -INFINITY, mnew, alpha, sum = 0;
        int rho0 = a.P + j0 - i0 - (BQ - 1) - M;
        __syncthreads(); /* the previous tile is consumed */
        mf__cu_xl_stage_bf(kt, lkt, 1, a.k + bh * a.Tk * dk, dk, j0, BK, a.Tk, dk, dkp, NULL);
        mf__cu_xl_stage_bf(rt, lrt, 1, a.R + (long long)h * dk, (long long)a.H * dk, rho0, NRP, 2 * a.P, dk, dkp, NULL);
        mf__cu_xl_stage(ss, 1, a.S + h, a.H, rho0, NRP, 2 * a.P, 1);
        mf__cu_xl_stage_bf(vs, lvs, 0, a.v + bh * a.Tk * dv, dv, j0, BK, a.Tk, dv, dvp, NULL);
        __syncthreads();
        MF__XL_MM(A, la, qut, lq, kt, lkt, BQ, BK, dkp, 0);   /* (q + u) K^T */
        MF__XL_MM(Bp, lb, qt, lq, rt, lrt, BQ, NRP, dkp, 0); /* q R^T */
        __syncthreads();
        for (n = 0; n < BK / TPR; n++) {
            int jj = sub + n * TPR, r = jj - ii + BQ - 1;
            sc[n] = mf__cu_xl_visible(a, i0 + ii, j0 + jj) ? a.scale * (A[ii * la + jj] + Bp[ii * lb + r] + ss[r]) : -INFINITY;
            mx = sc[n] > mx ? sc[n] : mx;
        }
        mx = mf__cu_xl_rowmax(mx);
        mnew = mx > m ? mx : m;
        alpha = mnew == -INFINITY ? 1.0f : expf(m - mnew);
        for (n = 0; n < BK / TPR; n++) {
            float pe = sc[n] == -INFINITY ? 0.0f : expf(sc[n] - mnew);
            sum += pe; /* l is the undropped sum */
            if (a.drop.p > 0.0f && pe != 0.0f) pe = mf__cu_xl_drop(a, bh, i0 + ii, j0 + sub + n * TPR, pe);
            mf__fa_put(e1 + (sub + n * TPR) * lq + ii, pe); /* P^T [key][query] */
        }
        sum = mf__cu_xl_rowsum(sum);
        l = l * alpha + sum;
        m = mnew;
        if (alpha != 1.0f)
            for (c = sub; c < dvp; c += TPR) acc[ii * lo + c] *= alpha;
        __syncthreads();
        MF__XL_MM(acc, lo, e1, lq, vs, lvs, BQ, dvp, BK, 1); /* O = alpha O + P V */
    }
    if (sub == 0) {
        ls[ii] = l;
        if (i0 + ii < a.Tq) lse_out[bh * a.Tq + i0 + ii] = l > 0 ? m + logf(l) : INFINITY;
    }
    __syncthreads();
    MF__FA_EACH(r, cc, BQ, dv, if (i0 + r < a.Tq) o[(bh * a.Tq + i0 + r) * dv + cc] = ls[r] > 0 ? acc[r * lo + cc] / ls[r] : 0.0f);
}

/* dQ: block = (b*h, query tile), as mf__k_xl_bwd_dq; dQ += dS K + dS_diag R, dS_diag [table row][query]
   holding dS_ij at row jj - ii + BQ - 1 */
static __global__ void __launch_bounds__(MF__XL_NT) mf__k_xl_bwd_dq_bf16(mf__cu_xl_args a, float *dq) {
    typedef __nv_bfloat16 E;
    MF_DYN_SMEM(unsigned char, sm);
    const int BQ = MF__XL_BQ, BK = MF__XL_BK, NRP = MF__XL_NRP;
    const mf__xl_tc_smem L = mf__xl_tc_layout(MF__XL_TC_DQ, a.dk, a.dv);
    const int dk = a.dk, dv = a.dv, dkp = mf__fa_pad(dk), dvp = mf__fa_pad(dv), M = a.Tk - a.Tq, nqt = (a.Tq + BQ - 1) / BQ;
    const int la = BK + 4, lb = NRP + 4, lo = dkp + 4, lq = BQ + 8, lkt = BK + 8, lrt = NRP + 8, lks = dkp + 8;
    long long bh = blockIdx.x / nqt;
    int h = (int)(bh % a.H), i0 = (int)(blockIdx.x % nqt) * BQ, j0;
    int kend = i0 + BQ + M < a.Tk ? i0 + BQ + M : a.Tk;
    MF__XL_SM(float, A); MF__XL_SM(float, Bp); MF__XL_SM(float, G); MF__XL_SM(float, acc); MF__XL_SM(float, ss);
    MF__XL_SM(E, qut); MF__XL_SM(E, qt); MF__XL_SM(E, gt); MF__XL_SM(E, kt); MF__XL_SM(E, rt); MF__XL_SM(E, vt);
    MF__XL_SM(E, ks); MF__XL_SM(E, rs); MF__XL_SM(E, e1); MF__XL_SM(E, e2);
    float *ls = (float *)(sm + L.lse), *Ds = (float *)(sm + L.D);
    mf__cu_xl_stage_bf(qut, lq, 1, a.q + bh * a.Tq * dk, dk, i0, BQ, a.Tq, dk, dkp, a.u + (long long)h * dk);
    mf__cu_xl_stage_bf(qt, lq, 1, a.q + bh * a.Tq * dk, dk, i0, BQ, a.Tq, dk, dkp, NULL);
    mf__cu_xl_stage_bf(gt, lq, 1, a.go + bh * a.Tq * dv, dv, i0, BQ, a.Tq, dv, dvp, NULL);
    mf__cu_xl_stage(ls, 1, a.lse + bh * a.Tq, 1, i0, BQ, a.Tq, 1);
    mf__cu_xl_stage(Ds, 1, a.D + bh * a.Tq, 1, i0, BQ, a.Tq, 1);
    mf__cu_xl_zero(acc, BQ * lo);
    for (j0 = 0; j0 < kend; j0 += BK) {
        int rho0 = a.P + j0 - i0 - (BQ - 1) - M;
        __syncthreads();
        mf__cu_xl_stage_bf(kt, lkt, 1, a.k + bh * a.Tk * dk, dk, j0, BK, a.Tk, dk, dkp, NULL);
        mf__cu_xl_stage_bf(ks, lks, 0, a.k + bh * a.Tk * dk, dk, j0, BK, a.Tk, dk, dkp, NULL);
        mf__cu_xl_stage_bf(vt, lkt, 1, a.v + bh * a.Tk * dv, dv, j0, BK, a.Tk, dv, dvp, NULL);
        mf__cu_xl_stage_bf(rt, lrt, 1, a.R + (long long)h * dk, (long long)a.H * dk, rho0, NRP, 2 * a.P, dk, dkp, NULL);
        mf__cu_xl_stage_bf(rs, lks, 0, a.R + (long long)h * dk, (long long)a.H * dk, rho0, NRP, 2 * a.P, dk, dkp, NULL);
        mf__cu_xl_stage(ss, 1, a.S + h, a.H, rho0, NRP, 2 * a.P, 1);
        __syncthreads();
        MF__XL_MM(A, la, qut, lq, kt, lkt, BQ, BK, dkp, 0);
        MF__XL_MM(Bp, lb, qt, lq, rt, lrt, BQ, NRP, dkp, 0);
        MF__XL_MM(G, la, gt, lq, vt, lkt, BQ, BK, dvp, 0); /* dO V^T */
        __syncthreads();
        MF__FA_EACH(ii, jj, BQ, BK, { /* dS over A */
            int r = jj - ii + BQ - 1;
            float d = 0, pr;
            if (mf__cu_xl_visible(a, i0 + ii, j0 + jj))
                d = mf__cu_xl_dscore_of(a, bh, i0 + ii, j0 + jj, a.scale * (A[ii * la + jj] + Bp[ii * lb + r] + ss[r]),
                                        ls[ii], G[ii * la + jj], Ds[ii], &pr);
            A[ii * la + jj] = d;
        });
        __syncthreads();
        MF__FA_EACH(jj, ii, BK, BQ, mf__fa_put(e1 + jj * lq + ii, A[ii * la + jj])); /* dS^T */
        MF__FA_EACH(r, ii, NRP, BQ, {                                                /* dS_diag^T */
            int jj = r + ii - (BQ - 1);
            mf__fa_put(e2 + r * lq + ii, jj >= 0 && jj < BK ? A[ii * la + jj] : 0.0f);
        });
        __syncthreads();
        MF__XL_MM(acc, lo, e1, lq, ks, lks, BQ, dkp, BK, 1);  /* dQ += dS K */
        MF__XL_MM(acc, lo, e2, lq, rs, lks, BQ, dkp, NRP, 1); /* dQ += dS_diag R */
    }
    __syncthreads();
    mf__fa_add_out(dq + (bh * a.Tq + i0) * dk, dk, dk, acc, lo, min(BQ, a.Tq - i0));
}

/* dK, dV: block = (b*h, key tile), the query tiles that see it in order, as mf__k_xl_bwd_dkv (the
   same outputs, dup included) */
static __global__ void __launch_bounds__(MF__XL_NT) mf__k_xl_bwd_dkv_bf16(mf__cu_xl_args a, float *dk_, float *dv_, float *dup) {
    typedef __nv_bfloat16 E;
    MF_DYN_SMEM(unsigned char, sm);
    const int BQ = MF__XL_BQ, BK = MF__XL_BK, NRP = MF__XL_NRP;
    const mf__xl_tc_smem L = mf__xl_tc_layout(MF__XL_TC_DKV, a.dk, a.dv);
    const int dk = a.dk, dv = a.dv, dkp = mf__fa_pad(dk), dvp = mf__fa_pad(dv), M = a.Tk - a.Tq, nkt = (a.Tk + BK - 1) / BK;
    const int la = BK + 4, lb = NRP + 4, lok = dkp + 4, lov = dvp + 4, lq = BQ + 8, lkt = BK + 8, lrt = NRP + 8;
    const int lqs = dkp + 8, lgs = dvp + 8;
    long long bh = blockIdx.x / nkt;
    int h = (int)(bh % a.H), j0 = (int)(blockIdx.x % nkt) * BK, i0, e;
    MF__XL_SM(float, A); MF__XL_SM(float, Bp); MF__XL_SM(float, G); MF__XL_SM(float, acc); MF__XL_SM(float, acc2);
    MF__XL_SM(float, ss); MF__XL_SM(float, csum);
    MF__XL_SM(E, qut); MF__XL_SM(E, qt); MF__XL_SM(E, gt); MF__XL_SM(E, kt); MF__XL_SM(E, rt); MF__XL_SM(E, vt);
    MF__XL_SM(E, qs); MF__XL_SM(E, gs); MF__XL_SM(E, e1); MF__XL_SM(E, e2);
    float *ls = (float *)(sm + L.lse), *Ds = (float *)(sm + L.D);
    mf__cu_xl_stage_bf(kt, lkt, 1, a.k + bh * a.Tk * dk, dk, j0, BK, a.Tk, dk, dkp, NULL);
    mf__cu_xl_stage_bf(vt, lkt, 1, a.v + bh * a.Tk * dv, dv, j0, BK, a.Tk, dv, dvp, NULL);
    mf__cu_xl_zero(acc, BK * lok);
    mf__cu_xl_zero(acc2, BK * lov);
    mf__cu_xl_zero(csum, BK);
    i0 = j0 - M > 0 ? (j0 - M) / BQ * BQ : 0; /* query i sees key j iff i >= j - M */
    for (; i0 < a.Tq; i0 += BQ) {
        int rho0 = a.P + j0 - i0 - (BQ - 1) - M;
        const float *q = a.q + bh * a.Tq * dk, *g = a.go + bh * a.Tq * dv;
        __syncthreads();
        mf__cu_xl_stage_bf(qut, lq, 1, q, dk, i0, BQ, a.Tq, dk, dkp, a.u + (long long)h * dk);
        mf__cu_xl_stage_bf(qt, lq, 1, q, dk, i0, BQ, a.Tq, dk, dkp, NULL);
        mf__cu_xl_stage_bf(qs, lqs, 0, q, dk, i0, BQ, a.Tq, dk, dkp, NULL);
        mf__cu_xl_stage_bf(gt, lq, 1, g, dv, i0, BQ, a.Tq, dv, dvp, NULL);
        mf__cu_xl_stage_bf(gs, lgs, 0, g, dv, i0, BQ, a.Tq, dv, dvp, NULL);
        mf__cu_xl_stage_bf(rt, lrt, 1, a.R + (long long)h * dk, (long long)a.H * dk, rho0, NRP, 2 * a.P, dk, dkp, NULL);
        mf__cu_xl_stage(ss, 1, a.S + h, a.H, rho0, NRP, 2 * a.P, 1);
        mf__cu_xl_stage(ls, 1, a.lse + bh * a.Tq, 1, i0, BQ, a.Tq, 1);
        mf__cu_xl_stage(Ds, 1, a.D + bh * a.Tq, 1, i0, BQ, a.Tq, 1);
        __syncthreads();
        MF__XL_MM(A, la, qut, lq, kt, lkt, BQ, BK, dkp, 0);
        MF__XL_MM(Bp, lb, qt, lq, rt, lrt, BQ, NRP, dkp, 0);
        MF__XL_MM(G, la, gt, lq, vt, lkt, BQ, BK, dvp, 0);
        __syncthreads();
        MF__FA_EACH(ii, jj, BQ, BK, { /* P into e1, dS into e2 and over A */
            int r = jj - ii + BQ - 1;
            float d = 0, pr = 0;
            if (mf__cu_xl_visible(a, i0 + ii, j0 + jj))
                d = mf__cu_xl_dscore_of(a, bh, i0 + ii, j0 + jj, a.scale * (A[ii * la + jj] + Bp[ii * lb + r] + ss[r]),
                                        ls[ii], G[ii * la + jj], Ds[ii], &pr);
            mf__fa_put(e1 + ii * lkt + jj, pr);
            mf__fa_put(e2 + ii * lkt + jj, d);
            A[ii * la + jj] = d;
        });
        __syncthreads();
        for (e = threadIdx.x; e < BK; e += blockDim.x) { /* the column sums of dS, queries in order */
            float s = csum[e];
            for (int ii = 0; ii < BQ; ii++) s += A[ii * la + e];
            csum[e] = s;
        }
        if (dv_) MF__XL_MM(acc2, lov, e1, lkt, gs, lgs, BK, dvp, BQ, 1); /* dV += P^T dO */
        if (dk_) MF__XL_MM(acc, lok, e2, lkt, qs, lqs, BK, dkp, BQ, 1);  /* dK += dS^T q */
    }
    __syncthreads();
    for (e = threadIdx.x; dup && e < dk; e += blockDim.x) { /* keys past Tk add nothing */
        float s = 0;
        for (int n = 0; n < BK && j0 + n < a.Tk; n++) s += csum[n] * a.k[(bh * a.Tk + j0 + n) * dk + e];
        dup[(long long)blockIdx.x * dk + e] = s;
    }
    if (dv_) mf__fa_add_out(dv_ + (bh * a.Tk + j0) * dv, dv, dv, acc2, lov, min(BK, a.Tk - j0));
    MF__FA_EACH(r, c, min(BK, a.Tk - j0), dk, /* the u term: + colsum(dS) u */
                if (dk_) dk_[(bh * a.Tk + j0 + r) * dk + c] += acc[r * lok + c] + csum[r] * a.u[(long long)h * dk + c]);
}

/* dR, dS: block = (head, BK relative distances), every b and query tile in order, as
   mf__k_xl_bwd_rel: the pair (query lane ii, distance lane dd) is key ii - dd + BK - 1 of the NRP
   keys staged from jlo */
static __global__ void __launch_bounds__(MF__XL_NT) mf__k_xl_bwd_rel_bf16(mf__cu_xl_args a, int B, float *dR, float *dS) {
    typedef __nv_bfloat16 E;
    MF_DYN_SMEM(unsigned char, sm);
    const int BQ = MF__XL_BQ, BK = MF__XL_BK, NRP = MF__XL_NRP;
    const mf__xl_tc_smem L = mf__xl_tc_layout(MF__XL_TC_REL, a.dk, a.dv);
    const int dk = a.dk, dv = a.dv, dkp = mf__fa_pad(dk), dvp = mf__fa_pad(dv), M = a.Tk - a.Tq, ndt = (a.Tk + BK - 1) / BK;
    const int la = NRP + 4, lb = BK + 4, lo = dkp + 4, lq = BQ + 8, lkt = NRP + 8, lrt = BK + 8, lqs = dkp + 8;
    int h = (int)(blockIdx.x / ndt), d0 = (int)(blockIdx.x % ndt) * BK, b, i0, e;
    MF__XL_SM(float, A); MF__XL_SM(float, Bp); MF__XL_SM(float, G); MF__XL_SM(float, acc); MF__XL_SM(float, ss);
    MF__XL_SM(float, csum);
    MF__XL_SM(E, qut); MF__XL_SM(E, qt); MF__XL_SM(E, gt); MF__XL_SM(E, kt); MF__XL_SM(E, rt); MF__XL_SM(E, vt);
    MF__XL_SM(E, qs); MF__XL_SM(E, e1);
    float *ls = (float *)(sm + L.lse), *Ds = (float *)(sm + L.D);
    /* distance lane dd: table row P - d0 - dd (descending), for the Tk distances only */
    mf__cu_xl_stage_bf(rt, lrt, 1, a.R + ((long long)(a.P - d0) * a.H + h) * dk, -(long long)a.H * dk, 0, BK, a.Tk - d0, dk,
                       dkp, NULL);
    for (e = threadIdx.x; e < BK; e += blockDim.x) ss[e] = d0 + e < a.Tk ? a.S[(long long)(a.P - d0 - e) * a.H + h] : 0.0f;
    mf__cu_xl_zero(acc, BK * lo);
    mf__cu_xl_zero(csum, BK);
    for (b = 0; b < B; b++) {
        long long bh = (long long)b * a.H + h;
        const float *q = a.q + bh * a.Tq * dk, *g = a.go + bh * a.Tq * dv;
        for (i0 = 0; i0 < a.Tq; i0 += BQ) {
            int jlo = i0 + M - d0 - (BK - 1);
            if (i0 + BQ - 1 + M < d0) continue; /* every pair of the tile has j < 0 */
            __syncthreads();
            mf__cu_xl_stage_bf(qut, lq, 1, q, dk, i0, BQ, a.Tq, dk, dkp, a.u + (long long)h * dk);
            mf__cu_xl_stage_bf(qt, lq, 1, q, dk, i0, BQ, a.Tq, dk, dkp, NULL);
            mf__cu_xl_stage_bf(qs, lqs, 0, q, dk, i0, BQ, a.Tq, dk, dkp, NULL);
            mf__cu_xl_stage_bf(gt, lq, 1, g, dv, i0, BQ, a.Tq, dv, dvp, NULL);
            mf__cu_xl_stage_bf(kt, lkt, 1, a.k + bh * a.Tk * dk, dk, jlo, NRP, a.Tk, dk, dkp, NULL);
            mf__cu_xl_stage_bf(vt, lkt, 1, a.v + bh * a.Tk * dv, dv, jlo, NRP, a.Tk, dv, dvp, NULL);
            mf__cu_xl_stage(ls, 1, a.lse + bh * a.Tq, 1, i0, BQ, a.Tq, 1);
            mf__cu_xl_stage(Ds, 1, a.D + bh * a.Tq, 1, i0, BQ, a.Tq, 1);
            __syncthreads();
            MF__XL_MM(A, la, qut, lq, kt, lkt, BQ, NRP, dkp, 0); /* (q + u) K^T over the NRP keys */
            MF__XL_MM(Bp, lb, qt, lq, rt, lrt, BQ, BK, dkp, 0);  /* q R^T over the BK distances */
            MF__XL_MM(G, la, gt, lq, vt, lkt, BQ, NRP, dvp, 0);
            __syncthreads();
            MF__FA_EACH(ii, dd, BQ, BK, { /* dS [query][distance] into e1 and over Bp */
                int jl = ii - dd + BK - 1;
                float d = 0, pr;
                if (d0 + dd < a.Tk && mf__cu_xl_visible(a, i0 + ii, jlo + jl))
                    d = mf__cu_xl_dscore_of(a, bh, i0 + ii, jlo + jl, a.scale * (A[ii * la + jl] + Bp[ii * lb + dd] + ss[dd]),
                                            ls[ii], G[ii * la + jl], Ds[ii], &pr);
                mf__fa_put(e1 + ii * lrt + dd, d);
                Bp[ii * lb + dd] = d;
            });
            __syncthreads();
            for (e = threadIdx.x; e < BK; e += blockDim.x) {
                float s = csum[e];
                for (int ii = 0; ii < BQ; ii++) s += Bp[ii * lb + e];
                csum[e] = s;
            }
            MF__XL_MM(acc, lo, e1, lrt, qs, lqs, BK, dkp, BQ, 1); /* dR_rows += dS_diag^T q */
        }
    }
    __syncthreads();
    for (e = threadIdx.x; dS && e < BK; e += blockDim.x)
        if (d0 + e < a.Tk) dS[(long long)(a.P - d0 - e) * a.H + h] += csum[e];
    MF__FA_EACH(r, c, min(BK, a.Tk - d0), dk, if (dR) dR[((long long)(a.P - d0 - r) * a.H + h) * dk + c] += acc[r * lo + c]);
}
#undef MF__XL_SM
#undef MF__XL_MM

/* ---- host wrappers ---- */
static mf__cu_xl_args mf__cu_xl_args_of(const mf_ctx *ctx, const mf_tensor *out) {
    mf__cu_xl_args a;
    const mf_tensor *Q = out->src[0], *K = out->src[1], *V = out->src[2];
    a.q = Q->data; a.k = K->data; a.v = V->data; a.u = out->src[3]->data; a.R = out->src[4]->data; a.S = out->src[5]->data;
    a.go = out->grad; a.lse = out->saved; a.D = NULL;
    a.H = Q->shape[1]; a.Tq = Q->shape[2]; a.Tk = K->shape[2]; a.dk = Q->shape[3]; a.dv = V->shape[3];
    a.P = out->src[4]->shape[0] / 2; a.scale = out->farg[MF__FARG_ATTN_SCALE];
    a.drop = mf__attn_drop_of(ctx, out);
    return a;
}
/* `floats` of dynamic shared memory for one of the kernels (mf__cu_smem, the head sizes in the message) */
template <class K> static int mf__cu_xl_smem(mf_ctx *ctx, K kernel, size_t floats, const char *what, const mf__cu_xl_args &a) {
    char w[96];
    snprintf(w, sizeof w, "%s (head sizes dk = %d, dv = %d)", what, a.dk, a.dv);
    return mf__cu_smem(ctx, kernel, floats * sizeof(float), "rel_attention", w,
                       "use smaller heads (more heads of the same d_model)");
}
static int mf__cu_rel_attention_fwd(mf_ctx *ctx, mf_tensor *out) {
    mf__cu_xl_args a = mf__cu_xl_args_of(ctx, out);
    long long BH = (long long)out->src[0]->shape[0] * a.H, nqt = (a.Tq + MF__XL_BQ - 1) / MF__XL_BQ;
    size_t lk = (size_t)(a.dk | 1), lv = (size_t)(a.dv | 1);
    size_t smem = (MF__XL_BQ + MF__XL_BK) * lk + a.dk + MF__XL_BK * lv + (size_t)MF__XL_BQ * a.dv +
                  MF__XL_NR * (lk + 1) + MF__XL_BQ * MF__XL_BK + 2 * MF__XL_BQ;
    if (!(out->saved = (float *)mf__cu_arena(ctx, (size_t)(BH * a.Tq) * sizeof(float)))) return -1;
    if (mf__cu_fa_prec(ctx) == MF__FA_BF16) {
        size_t bytes = mf__xl_tc_layout(MF__XL_TC_FWD, a.dk, a.dv).bytes;
        if (mf__cu_xl_smem(ctx, mf__k_xl_fwd_bf16, bytes / sizeof(float), "the forward", a) < 0) return -1;
        return MF__CU_RUN(ctx, "rel_attention", mf__k_xl_fwd_bf16, (unsigned)(BH * nqt), MF__XL_NT, bytes, a, out->data,
                          out->saved);
    }
    if (mf__cu_xl_smem(ctx, mf__k_xl_fwd, smem, "the forward", a) < 0) return -1;
    return MF__CU_RUN(ctx, "rel_attention", mf__k_xl_fwd, (unsigned)(BH * nqt), MF__XL_NT, smem * sizeof(float), a,
                      out->data, out->saved);
}
/* the backward's kernels on the bf16 tensor cores (D = dO . O already in a.D; cs: du's parts or NULL) */
static int mf__cu_rel_attention_bwd_bf16(mf_ctx *ctx, const mf__cu_xl_args &a, int B, float *gq, float *gk, float *gv,
                                         float *gu, float *gR, float *gS, float *cs) {
    const char *op = "rel_attention (backward)";
    long long BH = (long long)B * a.H, nqt = (a.Tq + MF__XL_BQ - 1) / MF__XL_BQ, nkt = (a.Tk + MF__XL_BK - 1) / MF__XL_BK;
    size_t s_dq = mf__xl_tc_layout(MF__XL_TC_DQ, a.dk, a.dv).bytes, s_kv = mf__xl_tc_layout(MF__XL_TC_DKV, a.dk, a.dv).bytes;
    size_t s_rel = mf__xl_tc_layout(MF__XL_TC_REL, a.dk, a.dv).bytes;
    if (gq && (mf__cu_xl_smem(ctx, mf__k_xl_bwd_dq_bf16, s_dq / sizeof(float), "the dQ backward", a) < 0 ||
               MF__CU_RUN(ctx, op, mf__k_xl_bwd_dq_bf16, (unsigned)(BH * nqt), MF__XL_NT, s_dq, a, gq) < 0))
        return -1;
    if ((gk || gv || gu) && (mf__cu_xl_smem(ctx, mf__k_xl_bwd_dkv_bf16, s_kv / sizeof(float), "the dK/dV backward", a) < 0 ||
                             MF__CU_RUN(ctx, op, mf__k_xl_bwd_dkv_bf16, (unsigned)(BH * nkt), MF__XL_NT, s_kv, a, gk, gv,
                                        cs) < 0))
        return -1;
    if (gu && MF__CU_RUN(ctx, op, mf__k_xl_bwd_du, MF__EW((long long)a.H * a.dk), gu, (const float *)cs, B, a.H,
                         (int)nkt, a.dk) < 0)
        return -1;
    if ((gR || gS) && (mf__cu_xl_smem(ctx, mf__k_xl_bwd_rel_bf16, s_rel / sizeof(float), "the dR/dS backward", a) < 0 ||
                       MF__CU_RUN(ctx, op, mf__k_xl_bwd_rel_bf16, (unsigned)((long long)a.H * nkt), MF__XL_NT, s_rel, a, B,
                                  gR, gS) < 0))
        return -1;
    return 0;
}
static int mf__cu_rel_attention_bwd(mf_ctx *ctx, mf_tensor *out) {
    mf__cu_xl_args a = mf__cu_xl_args_of(ctx, out);
    int B = out->src[0]->shape[0];
    long long BH = (long long)B * a.H, nqt = (a.Tq + MF__XL_BQ - 1) / MF__XL_BQ, nkt = (a.Tk + MF__XL_BK - 1) / MF__XL_BK;
    float *gq = mf__g(out->src[0]), *gk = mf__g(out->src[1]), *gv = mf__g(out->src[2]), *gu = mf__g(out->src[3]);
    float *gR = mf__g(out->src[4]), *gS = mf__g(out->src[5]), *D, *cs = NULL;
    const int BQ = MF__XL_BQ, BK = MF__XL_BK, NR = MF__XL_NR;
    size_t lk = (size_t)(a.dk | 1), lv = (size_t)(a.dv | 1); /* the padded row strides of the kernels */
    size_t s_dq = (BQ + BK) * lk + (size_t)(BQ + 1) * a.dk + (BQ + BK) * lv + NR * (lk + 1) + BQ * BK;
    size_t s_kv = (BK + BQ) * lk + (size_t)(BK + 1) * a.dk + (BK + BQ) * lv + (size_t)BK * a.dv + NR * (lk + 1) +
                  2 * BQ + 2 * BK * BQ + BK;
    size_t s_rel = (BK + BQ + NR) * lk + (size_t)(BK + 1) * a.dk + (BQ + NR) * lv + BK + 2 * BQ + BK * BQ;
    const char *op = "rel_attention (backward)";
    if (!gq && !gk && !gv && !gu && !gR && !gS) return 0;
    if (!(D = (float *)mf__cu_arena(ctx, (size_t)(BH * a.Tq) * sizeof(float)))) return -1;
    if (gu && !(cs = (float *)mf__cu_arena(ctx, (size_t)(BH * nkt * a.dk) * sizeof(float)))) return -1;
    a.D = D;
    if (MF__CU_RUN(ctx, op, mf__k_xl_dot, MF__EW(BH * a.Tq), D, (const float *)out->grad, (const float *)out->data,
                   a.dv, BH * a.Tq) < 0)
        return -1;
    if (mf__cu_fa_prec(ctx) == MF__FA_BF16) return mf__cu_rel_attention_bwd_bf16(ctx, a, B, gq, gk, gv, gu, gR, gS, cs);
    if (gq && (mf__cu_xl_smem(ctx, mf__k_xl_bwd_dq, s_dq, "the dQ backward", a) < 0 ||
               MF__CU_RUN(ctx, op, mf__k_xl_bwd_dq, (unsigned)(BH * nqt), MF__XL_NT, s_dq * sizeof(float), a, gq) < 0))
        return -1;
    if ((gk || gv || gu) && (mf__cu_xl_smem(ctx, mf__k_xl_bwd_dkv, s_kv, "the dK/dV backward", a) < 0 ||
                             MF__CU_RUN(ctx, op, mf__k_xl_bwd_dkv, (unsigned)(BH * nkt), MF__XL_NT, s_kv * sizeof(float),
                                        a, gk, gv, cs) < 0))
        return -1;
    if (gu && MF__CU_RUN(ctx, op, mf__k_xl_bwd_du, MF__EW((long long)a.H * a.dk), gu, (const float *)cs, B, a.H,
                         (int)nkt, a.dk) < 0)
        return -1;
    if ((gR || gS) && (mf__cu_xl_smem(ctx, mf__k_xl_bwd_rel, s_rel, "the dR/dS backward", a) < 0 ||
                       MF__CU_RUN(ctx, op, mf__k_xl_bwd_rel, (unsigned)((long long)a.H * nkt), MF__XL_NT,
                                  s_rel * sizeof(float), a, B, gR, gS) < 0))
        return -1;
    return 0;
}
#endif /* METAFORMER_NO_XL */

/* ==== [cu:fastweights] ====================================================================== */
#ifndef METAFORMER_NO_FASTWEIGHTS
/* DPFP, fast weights (delta rule) and linear attention. */
/* The CUDA twins of [mf:fastweights] in metaformer.h (mf_dpfp, mf_fast_weights, mf_linear_attention;
   mf_elu1 is a kind of the unary kernel of [cu:ops]). Same math, same forms, same selection (MF__ARG_FW_FORM:
   1 = recurrent, C > 1 = chunkwise by C, resolved by the shape check from the caller's chunk), so CPU
   and GPU agree to float rounding. Every kernel is deterministic: each output element is summed by
   one thread in a fixed order; the value-column slices of the recurrent backward write partial
   sums that a second kernel adds in slice order (no atomics).

   Notation (per head bh = b H + h): S^T [dd][dvp] the fast-weight state (row j = feature j,
   column c = value column; normalised linear attention's extra column c = dv is the normaliser z,
   its value is constantly 1 and its output the denominator; DPFP's linear attention has none), tokens t of the head at row r = (b T + t) H + h
   of the token-major inputs q, k [B, T, H, dd], v [B, T, H, dv], beta [B, T, H].

   Recurrent (the oracle and the generation path). The delta rule's columns are independent: column
   c of S^T only needs its own values and the shared k_t, q_t. Grid (B H, ceil(dvp / cw)), block cw
   (<= 32) threads, thread = one value column whose dd state values live in shared memory
   (dd cw floats; cw halves until it fits in 48 KiB). Forward: per token sk = S^T_c . k, u = beta
   (v - sk) (linear: u = v), S^T_c += u k, y = S^T_c . q - no barrier at all (k and q are
   broadcast reads). The state is kept every MF__FW_CK tokens for the backward. Backward, like the
   CPU: per segment of MF__FW_CK tokens from the last, recompute the states S_{t-1} of the segment
   from its checkpoint (into a per-block global buffer [MF__FW_CK][dd][cw]), then walk back in time
   with dL/dS^T in shared memory ([dd][cw + 1]: conflict-free for both the column phase (du, dS
   updates: thread = column) and the row phase (dq, dk: thread = feature row, reduce over the
   block's columns)). dq, dk and dbeta are sums over value columns: each slice writes its partial
   sums, mf__k_fw_slices adds them in slice order.

   Chunkwise (training; DeltaNet's WY / UT form, the CPU's mf__fw_chunk_fwd / _bwd). Chunk of C
   tokens, n <= C of them in the last one:
     mf__k_fw_prep   (one block per (chunk, head), K and Q in shared memory): Gm = tril(K K^T, -1)
                     (delta), P = tril(Q K^T); (I + diag(beta) Gm) [W, U_] = diag(beta) [K, V] by
                     forward substitution, a thread per column (the columns are independent)
     mf__k_fw_cstate (grid (B H, dvp / 8 column slices), 256 threads sharing the slice's S^T [dd][8]
                     and the chunk's U in shared memory): the only sequential part: per chunk keep
                     S^T, U = U_ - W S^T (linear: U = V), S^T += K^T U, each a parallel phase
     mf__k_fw_cout   (B H T dvp)            Y = Q S^T + P U   (every chunk in parallel)
   backward:
     mf__k_fw_cdstate (sequential over chunks, blocks as mf__k_fw_cstate): dS^T at every chunk end,
                     dU = K dS^T + P^T dY, dS^T += Q^T dY - W^T dU
     mf__k_fw_cgrad  (one block per (chunk, head), MF__CU_ROW threads; dY, U, dU, G, X of the chunk in
                     shared memory, the states read as [dvp][dd] so the loads coalesce): dP, the back
                     substitution G = (I + A)^-T [dW, dU], dbeta, then dQ, dK, dV of the chunk
                     (the back substitution, dbeta and dV: mf__fw_backsubst, mf__fw_dbeta, mf__fw_dv).
   Kept for the backward (out->saved): the chunk-start states (in both layouts, as the CPU), [W, U_],
   U, Gm, P (and normalised linear attention's numerators). Shared memory above 48 KiB (long chunks, wide heads) is
   opted in up to 227 KiB; beyond that the op fails with a message naming chunk_size.
   Precision: fp32 on the CUDA cores in fp32 and TF32. With MF_PREC_BF16 (on sm_80+, mf__cu_fa_prec)
   the chunkwise form runs mf__k_fw_prep_bf16, mf__k_fw_cstate_bf16 and mf__k_fw_cout_bf16 forward and
   mf__k_fw_cdstate_bf16, mf__k_fw_cgrad_bf16 backward instead: every product above except the two
   substitutions is a bf16 WMMA tile product ([cu:attention]'s mf__fa_mm) over operands rounded to
   bf16 as they are staged in shared memory, zero-padded to 16 (tokens to Cp = pad(C), value columns
   in 16-column slices in the state passes and in steps of MF__FW_KS in the per-chunk gradients,
   d_dot in steps of MF__FW_KS features), accumulated in fp32 into fp32 tiles; the state S^T, dL/dS^T
   and everything kept for the backward stay fp32 (docs/math.md §4.2). Still fp32 in bf16: the
   forward substitution, the back substitution (both triangular solves, sequential in the token),
   dbeta, dV (a scaled copy of G) and the recurrent form (a matrix-vector product per token). */
#define MF__CU_FW_CW 32  /* value columns per block of the kernels sequential in time */
#define MF__CU_FW_NT 256 /* threads of the chunkwise state passes */
#define MF__CU_FW_CCW 8  /* their value columns per block: few, so the B H dvp / 8 blocks fill the GPU */
/* a b + c: nvcc contracts it to one FMA; the host compiler under the emulator does what the CPU
   path of the same build does (its portable vectors: a b + c) */
#define MF__CU_FMA(a, b, c) ((a) * (b) + (c))

typedef struct {
    const float *q, *k, *v, *beta; /* beta NULL: linear attention */
    int B, T, H, dd, dv, dvp, C;   /* C: the chunk (chunkwise forms) */
} mf__cu_fw;

/* row of token t of head bh in the token-major layout */
static __device__ long long mf__cu_fw_row(const mf__cu_fw &p, long long bh, int t) {
    return ((bh / p.H) * p.T + t) * p.H + bh % p.H;
}
/* the same inside a kernel that has rb = mf__cu_fw_row(p, bh, 0): no division in the loops */
#define MF__FW_R(t) (rb + (long long)(t) * p.H)
static __device__ float mf__cu_fw_v(const mf__cu_fw &p, long long r, int c) { /* v, then the ones column */
    return c < p.dv ? p.v[r * p.dv + c] : 1.0f;
}

/* ---- DPFP: one block per row of x [rows][dk] -> y [rows][2 dk nu] (docs/math.md §7.1) ---- */
static __device__ float mf__cu_dpfp_a(const float *x, int dk, int j) { /* relu(concat(x, -x))[j] */
    float v = j < dk ? x[j] : -x[j - dk];
    return v > 0 ? v : 0.0f;
}
/* inv[r] = 1 / (sum phi + eps) for the backward (may be NULL) */
static __global__ void mf__k_dpfp(float *y, float *inv, const float *x, int dk, int nu, float eps) {
    __shared__ float sh[32];
    long long r = blockIdx.x;
    int n2 = 2 * dk, dd = n2 * nu, m;
    const float *xr = x + r * dk;
    float *yr = y + r * dd, sum = 0, iv;
    for (m = threadIdx.x; m < dd; m += blockDim.x) {
        int s = m / n2 + 1, j = m % n2, jm = j >= s ? j - s : j - s + n2;
        float ph = mf__cu_dpfp_a(xr, dk, j) * mf__cu_dpfp_a(xr, dk, jm);
        yr[m] = ph;
        sum += ph;
    }
    sum = mf__cu_bred(sum, sh, 0);
    iv = 1.0f / (sum + eps);
    for (m = threadIdx.x; m < dd; m += blockDim.x) yr[m] *= iv;
    if (inv && threadIdx.x == 0) inv[r] = iv;
}
/* dx += d out / dx: dphi_m = (g_m - g . y) / (sum + eps); phi[s][j] = a[j] a[j - s] */
static __global__ void mf__k_dpfp_bwd(float *dx, const float *x, const float *y, const float *g, const float *inv,
                                      int dk, int nu) {
    __shared__ float sh[32];
    long long r = blockIdx.x;
    int n2 = 2 * dk, dd = n2 * nu, m, j, s, half;
    const float *xr = x + r * dk, *yr = y + r * dd, *gr = g + r * dd;
    float gy = 0, iv = inv[r];
    for (m = threadIdx.x; m < dd; m += blockDim.x) gy += gr[m] * yr[m];
    gy = mf__cu_bred(gy, sh, 0);
    for (j = threadIdx.x; j < dk; j += blockDim.x) {
        float d = 0;
        for (half = 0; half < 2; half++) { /* a[j] (x > 0) and a[dk + j] (x < 0) */
            int jj = j + half * dk;
            float da = 0;
            if (mf__cu_dpfp_a(xr, dk, jj) == 0.0f) continue; /* relu off: no gradient */
            for (s = 1; s <= nu; s++) {
                int jm = jj >= s ? jj - s : jj - s + n2, jp = jj + s < n2 ? jj + s : jj + s - n2;
                da += (gr[(s - 1) * n2 + jj] - gy) * mf__cu_dpfp_a(xr, dk, jm);
                da += (gr[(s - 1) * n2 + jp] - gy) * mf__cu_dpfp_a(xr, dk, jp);
            }
            d = half ? d - da : d + da;
        }
        dx[r * dk + j] += d * iv;
    }
}
static int mf__cu_dpfp_fwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    long long rows = mf__rows(x);
    out->saved = NULL;
    if (out->requires_grad && !(out->saved = (float *)mf__cu_arena(ctx, (size_t)rows * sizeof(float)))) return -1;
    return MF__CU_RUN(ctx, "dpfp", mf__k_dpfp, (unsigned)rows, MF__CU_ROW, 0, out->data, out->saved,
                      (const float *)x->data, mf__last(x), out->iarg[MF__ARG_DPFP_NU], out->farg[MF__FARG_DPFP_EPS]);
}
static int mf__cu_dpfp_bwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    float *dx = mf__g(out->src[0]);
    if (!dx) return 0;
    return MF__CU_RUN(ctx, "dpfp (backward)", mf__k_dpfp_bwd, (unsigned)mf__rows(x), MF__CU_ROW, 0, dx,
                      (const float *)x->data, (const float *)out->data, (const float *)out->grad,
                      (const float *)out->saved, mf__last(x), out->iarg[MF__ARG_DPFP_NU]);
}

/* ---- linear attention's normaliser: y = num / (den + eps), den = num[dv] ---- */
static __global__ void mf__k_fw_norm(float *y, const float *num, int dv, float eps, long long n) {
    MF__CU_LOOP(e, n) {
        long long r = e / dv;
        y[e] = num[r * (dv + 1) + e % dv] * (1.0f / (num[r * (dv + 1) + dv] + eps));
    }
}
/* dnum = g / (den + eps), dden = -(g . y) / (den + eps); one thread per row (columns in order) */
static __global__ void mf__k_fw_norm_bwd(float *dnum, const float *num, const float *g, const float *y, int dv,
                                         float eps, long long rows) {
    MF__CU_LOOP(r, rows) {
        const float *gr = g + r * dv, *yr = y + r * dv;
        float inv = 1.0f / (num[r * (dv + 1) + dv] + eps), gy = 0, *d = dnum + r * (dv + 1);
        for (int c = 0; c < dv; c++) { d[c] = gr[c] * inv; gy += gr[c] * yr[c]; }
        d[dv] = -gy * inv;
    }
}
/* dst[e] += sum over the ns slices of part[s][e], slices in order */
static __global__ void mf__k_fw_slices(float *dst, const float *part, int ns, long long n) {
    MF__CU_LOOP(e, n) {
        float acc = 0;
        for (int s = 0; s < ns; s++) acc += part[s * n + e];
        dst[e] += acc;
    }
}

/* ---- recurrent form ---- */
/* grid (B H, slices), block cw; shared: the thread's state column, sm[j cw + tid]. state: the start
   state S^T [BH][dd][dvp] (NULL: zeros), overwritten with the end state; ck (NULL: not kept): the
   state before tokens 0, MF__FW_CK, ... [BH][nck][dd][dvp]; y [rows][dvp]. No barriers: a thread
   past the last column returns at once. */
static __global__ void mf__k_fw_rec_fwd(mf__cu_fw p, float *state, float *ck, float *y) {
    MF_DYN_SMEM(float, sm);
    long long bh = blockIdx.x;
    int cw = blockDim.x, c = blockIdx.y * cw + threadIdx.x, dd = p.dd, dvp = p.dvp, j, t;
    int nck = (p.T + MF__FW_CK - 1) / MF__FW_CK;
    long long ss = (long long)dd * dvp;
    long long rb = mf__cu_fw_row(p, bh, 0);
    float *S = sm + threadIdx.x;
    if (c >= dvp) return;
    for (j = 0; j < dd; j++) S[j * cw] = state ? state[bh * ss + (long long)j * dvp + c] : 0.0f;
    for (t = 0; t < p.T; t++) {
        long long r = MF__FW_R(t);
        const float *kt = p.k + r * dd, *qt = p.q + r * dd;
        float u = mf__cu_fw_v(p, r, c), acc = 0;
        if (ck && t % MF__FW_CK == 0)
            for (j = 0; j < dd; j++) ck[(bh * nck + t / MF__FW_CK) * ss + (long long)j * dvp + c] = S[j * cw];
        if (p.beta) { /* u = beta (v - S k): the delta rule's write */
            float sk = 0;
            for (j = 0; j < dd; j++) sk = MF__CU_FMA(kt[j], S[j * cw], sk);
            u = p.beta[r] * (u - sk);
        }
        for (j = 0; j < dd; j++) { /* write first, then read with the updated state */
            float s = MF__CU_FMA(kt[j], u, S[j * cw]);
            S[j * cw] = s;
            acc = MF__CU_FMA(qt[j], s, acc);
        }
        y[r * dvp + c] = acc;
    }
    if (state)
        for (j = 0; j < dd; j++) state[bh * ss + (long long)j * dvp + c] = S[j * cw];
}
/* Backward. shared: dS [dd][cw + 1], the recompute's state columns [dd][cw + 1], U and R = v - S k of
   the segment [MF__FW_CK][cw], then g, dvbar and du r of the token [cw] each (the state column
   array [dd][cw + 1] holds S_{t-1} of the token during the walk). seg: per block the
   segment's S_{t-1} [MF__FW_CK][dd][cw]. pq, pk [slices][rows][dd], pb [slices][rows]: this slice's
   partial dq, dk, dbeta; dv (may be NULL): added directly (one thread per element). */
static __global__ void mf__k_fw_rec_bwd(mf__cu_fw p, const float *ck, const float *dy, float *seg, float *pq,
                                        float *pk, float *pb, float *dv) {
    MF_DYN_SMEM(float, sm);
    long long bh = blockIdx.x, rows = (long long)p.B * p.T * p.H, ss = (long long)p.dd * p.dvp;
    int cw = blockDim.x, tid = threadIdx.x, c = blockIdx.y * cw + tid, on = c < p.dvp, dd = p.dd, lp = cw + 1;
    int nck = (p.T + MF__FW_CK - 1) / MF__FW_CK, sgi, t, j, cc;
    float *dS = sm, *Sc = dS + dd * lp, *U = Sc + dd * lp, *R = U + MF__FW_CK * cw, *gs = R + MF__FW_CK * cw;
    float *db = gs + cw, *ur = db + cw;
    float *sg = seg + ((long long)blockIdx.x * gridDim.y + blockIdx.y) * MF__FW_CK * dd * cw;
    long long po = (long long)blockIdx.y * rows, rb = mf__cu_fw_row(p, bh, 0); /* po: this slice's partials */
    for (j = 0; j < dd; j++) dS[j * lp + tid] = 0.0f;
    for (sgi = nck - 1; sgi >= 0; sgi--) {
        int t0 = sgi * MF__FW_CK, t1 = t0 + MF__FW_CK < p.T ? t0 + MF__FW_CK : p.T;
        /* recompute the segment's states S_{t-1}, u_t and r_t = v_t - S_{t-1} k_t (thread = column) */
        for (j = 0; j < dd; j++) Sc[j * lp + tid] = on ? ck[(bh * nck + sgi) * ss + (long long)j * p.dvp + c] : 0.0f;
        for (t = t0; t < t1; t++) {
            int i = t - t0;
            long long r = MF__FW_R(t);
            const float *kt = p.k + r * dd;
            float v = on ? mf__cu_fw_v(p, r, c) : 0.0f, u = v, rr = v;
            for (j = 0; j < dd; j++) sg[((long long)i * dd + j) * cw + tid] = Sc[j * lp + tid];
            if (p.beta) {
                float sk = 0;
                for (j = 0; j < dd; j++) sk = MF__CU_FMA(kt[j], Sc[j * lp + tid], sk);
                rr = v - sk;
                u = p.beta[r] * rr;
            }
            R[i * cw + tid] = rr;
            U[i * cw + tid] = u;
            if (t + 1 < t1)
                for (j = 0; j < dd; j++) Sc[j * lp + tid] = MF__CU_FMA(kt[j], u, Sc[j * lp + tid]);
        }
        __syncthreads();
        for (t = t1 - 1; t >= t0; t--) {
            int i = t - t0;
            long long r = MF__FW_R(t);
            const float *kt = p.k + r * dd, *qt = p.q + r * dd, *Sp = sg + (long long)i * dd * cw, *Ui = U + i * cw;
            float b = p.beta ? p.beta[r] : 1.0f, g = on ? dy[r * p.dvp + c] : 0.0f, du = 0, ug = 0;
            /* column phase: S_{t-1} into shared memory (the row phase reads it across columns);
               dS += q g^T (dS = dL/dS_t), du = dS^T k */
            for (j = 0; j < dd; j++) Sc[j * lp + tid] = Sp[(long long)j * cw + tid];
            for (j = 0; j < dd; j++) {
                float d = MF__CU_FMA(qt[j], g, dS[j * lp + tid]);
                dS[j * lp + tid] = d;
                du = MF__CU_FMA(kt[j], d, du);
            }
            gs[tid] = g;
            db[tid] = p.beta ? -b * du : 0.0f;
            ur[tid] = du * R[i * cw + tid];
            if (dv && on && c < p.dv) dv[r * p.dv + c] += b * du;
            __syncthreads();
            /* row phase (thread = feature j): dq = S_t^T g = S_{t-1}^T g + k (u . g),
               dk = dS^T u + S_{t-1}^T dvbar, summed over this slice's columns */
            for (cc = 0; cc < cw; cc++) ug = MF__CU_FMA(Ui[cc], gs[cc], ug);
            for (j = tid; j < dd; j += cw) {
                const float *sr = Sc + j * lp, *dr = dS + j * lp;
                float aq = 0, ak = 0;
                for (cc = 0; cc < cw; cc++) aq = MF__CU_FMA(gs[cc], sr[cc], aq);
                aq = MF__CU_FMA(ug, kt[j], aq);
                for (cc = 0; cc < cw; cc++) ak = MF__CU_FMA(Ui[cc], dr[cc], ak);
                if (p.beta)
                    for (cc = 0; cc < cw; cc++) ak = MF__CU_FMA(db[cc], sr[cc], ak);
                pq[(po + r) * dd + j] = aq;
                pk[(po + r) * dd + j] = ak;
            }
            if (p.beta && tid == 0) { /* dbeta = du . (v - S_{t-1} k) */
                float acc = 0;
                for (cc = 0; cc < cw; cc++) acc += ur[cc];
                pb[po + r] = acc;
            }
            __syncthreads();
            if (p.beta) /* dS += dvbar k^T: dL/dS_{t-1} (own column; the next token's phase reads it) */
                for (j = 0; j < dd; j++) dS[j * lp + tid] = MF__CU_FMA(kt[j], db[tid], dS[j * lp + tid]);
        }
    }
}

/* ---- chunkwise form ---- */
/* (delta rule) the forward substitution (I + A) X = diag(beta) [K, V], A[i][m] = beta_i Gm[i][m], of
   the chunk of n tokens from t0 of head bh into X [bh][T][dd + dvp]: one thread per column (the
   columns are independent). Gs [n][lg]: Gm of the chunk; Ks [n][lk]: its keys (row i = token t0 + i). */
static __device__ void mf__fw_subst(const mf__cu_fw &p, float *X, const float *Gs, int lg, const float *Ks, long long lk,
                                    long long bh, int t0, int n) {
    int dd = p.dd, ldx = dd + p.dvp, i, m, j;
    long long rb = mf__cu_fw_row(p, bh, 0);
    for (j = threadIdx.x; j < ldx; j += blockDim.x) {
        float *Xc = X + (bh * p.T + t0) * ldx + j;
        for (i = 0; i < n; i++) {
            long long r = MF__FW_R(t0 + i);
            float b = p.beta[r], acc = 0;
            for (m = 0; m < i; m++) acc = MF__CU_FMA(-b * Gs[i * lg + m], Xc[(long long)m * ldx], acc);
            Xc[(long long)i * ldx] = acc + b * (j < dd ? Ks[i * lk + j] : mf__cu_fw_v(p, r, j - dd));
        }
    }
}
/* The chunk's products that need no state, one block per (chunk, head) (grid B H nc), K and Q of
   the chunk staged in shared memory ([C][dd + 1] each: conflict-free row dots), then [C][C] for Gm:
   Gm[bh][ch][i][m] = k_i . k_m (m < i; delta rule only) and P = q_i . k_m (m <= i), 0 elsewhere;
   then (delta rule) the forward substitution mf__fw_subst. */
static __global__ void mf__k_fw_prep(mf__cu_fw p, float *Gm, float *P, float *X) {
    MF_DYN_SMEM(float, sm);
    int C = p.C, nc = (p.T + C - 1) / C, dd = p.dd, lk = dd + 1, nt = blockDim.x, e, i, m, j;
    long long bh = blockIdx.x / nc, rb = mf__cu_fw_row(p, bh, 0), cb = (long long)blockIdx.x * C * C;
    int ch = (int)(blockIdx.x % nc), t0 = ch * C, cn = p.T - t0 < C ? p.T - t0 : C;
    float *Ks = sm, *Qs = Ks + C * lk, *Gs = Qs + C * lk;
    for (e = threadIdx.x; e < cn * dd; e += nt) {
        long long r;
        i = e / dd; j = e % dd;
        r = MF__FW_R(t0 + i);
        Ks[i * lk + j] = p.k[r * dd + j];
        Qs[i * lk + j] = p.q[r * dd + j];
    }
    __syncthreads();
    for (e = threadIdx.x; e < C * C; e += nt) {
        float g = 0, s = 0;
        i = e / C; m = e % C;
        if (i < cn && m <= i)
            for (j = 0; j < dd; j++) {
                s = MF__CU_FMA(Qs[i * lk + j], Ks[m * lk + j], s);
                if (m < i) g = MF__CU_FMA(Ks[i * lk + j], Ks[m * lk + j], g);
            }
        Gs[e] = m < i ? g : 0.0f;
        if (Gm) Gm[cb + e] = Gs[e];
        P[cb + e] = s;
    }
    if (!p.beta) return; /* uniform over the block: no barrier follows for anyone */
    __syncthreads();
    mf__fw_subst(p, X, Gs, C, Ks, lk, bh, t0, cn);
}
/* The state pass, sequential over the chunks: grid (B H, slices of cw value columns), MF__CU_FW_NT
   threads that share the slice's S^T [dd][cw] (shared memory, then the chunk's U [C][cw]). Per
   chunk: keep S^T in st [bh][nc][dd][dvp]; U = U_ - W S^T (linear: [v, 1]) into U [bh][T][dvp]
   (thread per (token, column): a dd-long dot); S^T += K^T U (thread per (feature, column): a C-long
   sum). stn (NULL: not kept) gets the chunk-start states again as [dvp][dd] for the backward.
   state as in mf__k_fw_rec_fwd. */
static __global__ void mf__k_fw_cstate(mf__cu_fw p, const float *X, float *st, float *stn, float *U, float *state,
                                       int cw) {
    MF_DYN_SMEM(float, sm);
    long long bh = blockIdx.x, ss = (long long)p.dd * p.dvp;
    int dd = p.dd, dvp = p.dvp, ldx = dd + dvp, c0 = blockIdx.y * cw, nt = blockDim.x;
    int C = p.C, nc = (p.T + C - 1) / C, ch, i, j, e, cl;
    long long rb = mf__cu_fw_row(p, bh, 0);
    float *S = sm, *Us = sm + dd * cw; /* S[j cw + cl], Us[i cw + cl] */
    for (e = threadIdx.x; e < dd * cw; e += nt) {
        j = e / cw; cl = e % cw;
        S[e] = state && c0 + cl < dvp ? state[bh * ss + (long long)j * dvp + c0 + cl] : 0.0f;
    }
    __syncthreads();
    for (ch = 0; ch < nc; ch++) {
        int t0 = ch * C, cn = p.T - t0 < C ? p.T - t0 : C;
        for (e = threadIdx.x; e < dd * cw; e += nt) {
            j = e / cw; cl = e % cw;
            if (c0 + cl < dvp) st[(bh * nc + ch) * ss + (long long)j * dvp + c0 + cl] = S[e];
        }
        if (stn) /* the same state as [dvp][dd] (the backward's layout), rows along d_dot */
            for (e = threadIdx.x; e < dd * cw; e += nt) {
                cl = e / dd; j = e % dd;
                if (c0 + cl < dvp) stn[(bh * nc + ch) * ss + (long long)(c0 + cl) * dd + j] = S[j * cw + cl];
            }
        for (e = threadIdx.x; e < cn * cw; e += nt) {
            int c;
            long long r;
            float u = 0;
            i = e / cw; cl = e % cw; c = c0 + cl;
            r = MF__FW_R(t0 + i);
            if (c < dvp) {
                if (p.beta) {
                    const float *xi = X + (bh * p.T + t0 + i) * ldx;
                    float acc = 0;
                    for (j = 0; j < dd; j++) acc = MF__CU_FMA(xi[j], S[j * cw + cl], acc);
                    u = xi[dd + c] - acc;
                } else u = mf__cu_fw_v(p, r, c);
                U[(bh * p.T + t0 + i) * dvp + c] = u;
            }
            Us[e] = u;
        }
        __syncthreads();
        for (e = threadIdx.x; e < dd * cw; e += nt) { /* S^T += K^T U */
            float acc = 0;
            j = e / cw; cl = e % cw;
            for (i = 0; i < cn; i++) acc = MF__CU_FMA(p.k[MF__FW_R(t0 + i) * dd + j], Us[i * cw + cl], acc);
            S[e] += acc;
        }
        __syncthreads();
    }
    if (state)
        for (e = threadIdx.x; e < dd * cw; e += nt) {
            j = e / cw; cl = e % cw;
            if (c0 + cl < dvp) state[bh * ss + (long long)j * dvp + c0 + cl] = S[e];
        }
}
/* y [rows][dvp] = Q S^T + P U, one thread per element (every chunk in parallel) */
static __global__ void mf__k_fw_cout(mf__cu_fw p, const float *st, const float *U, const float *P, float *y, long long n) {
    MF__CU_LOOP(e, n) {
        int dvp = p.dvp, c = (int)(e % dvp), C = p.C, nc = (p.T + C - 1) / C, j, m;
        long long r = e / dvp, h = r % p.H, b = r / ((long long)p.T * p.H), bh = b * p.H + h;
        int t = (int)(r / p.H % p.T), ch = t / C, i = t - ch * C;
        const float *qt = p.q + r * p.dd, *S = st + (bh * nc + ch) * p.dd * (long long)dvp + c;
        const float *Pi = P + ((bh * nc + ch) * C + i) * C, *Uc = U + (bh * p.T + ch * C) * dvp + c;
        float a = 0, s = 0;
        for (j = 0; j < p.dd; j++) a = MF__CU_FMA(qt[j], S[(long long)j * dvp], a);
        for (m = 0; m <= i; m++) s = MF__CU_FMA(Pi[m], Uc[(long long)m * dvp], s);
        y[e] = a + s;
    }
}
/* ---- chunkwise products on the bf16 tensor cores (MF_PREC_BF16) ---- */
/* The same kernels' products as bf16 WMMA tile products (mf__fa_mm<MF__FA_BF16>, [cu:attention]):
   the operands are staged in shared memory rounded to bf16, zero-padded to multiples of 16 (the chunk
   to Cp = pad(C), the value columns to 16-column slices, d_dot in steps of MF__FW_KS features, which
   bound the shared memory whatever d_dot); the accumulators, the state S^T, U and everything kept
   for the backward are fp32. */
#define MF__FW_KS 64 /* features per step of the bf16 products */
typedef __nv_bfloat16 mf__fw_bf;
/* dst [R][ld] bf16 (tr: transposed, dst [W][ld], dst[c][r]) = src[r ls + c0 + c] for r < n and
   c0 + c < d, zero elsewhere up to R rows and W columns (src in global or shared memory) */
static __device__ void mf__fw_stage(mf__fw_bf *dst, int ld, const float *src, long long ls, int n, int R, int c0, int d,
                                    int W, int tr) {
    MF__FA_EACH(r, c, R, W, mf__fa_put(dst + (tr ? c * ld + r : r * ld + c), r < n && c0 + c < d ? src[r * ls + c0 + c] : 0.0f));
}
/* the width of the feature step from k0: MF__FW_KS, or what is left of d_dot padded to 16 */
static __device__ int mf__fw_step(int dd, int k0) { return min(MF__FW_KS, mf__fa_pad(dd - k0)); }
/* C [Cp][Cp] = A B^T (and, when G is not NULL, G = B B^T) over the K columns of the chunk's cn token
   rows of A and B (rows lsa / lsb floats apart), in MF__FW_KS-wide column steps staged transposed as
   bf16 in As / Bs (zeros past cn rows and K columns); C and G rows lc floats apart; ends after a barrier */
static __device__ void mf__fw_tok_gram(float *C, float *G, int lc, mf__fw_bf *As, int la, const float *A, long long lsa,
                                       mf__fw_bf *Bs, int lb, const float *B, long long lsb, int cn, int Cp, int K) {
    int k0;
    for (k0 = 0; k0 < K; k0 += MF__FW_KS) {
        int w = mf__fw_step(K, k0);
        mf__fw_stage(As, la, A, lsa, cn, Cp, k0, K, w, 1);
        mf__fw_stage(Bs, lb, B, lsb, cn, Cp, k0, K, w, 1);
        __syncthreads();
        mf__fa_mm<MF__FA_BF16>(C, lc, As, la, Bs, lb, Cp, Cp, w, k0 > 0);
        if (G) mf__fa_mm<MF__FA_BF16>(G, lc, Bs, lb, Bs, lb, Cp, Cp, w, k0 > 0);
        __syncthreads();
    }
}
/* R [Cp][w] = A S[:, f0 .. f0 + w) for the chunk's cn token rows of A (rows lsa floats apart, dvp
   value columns) and a state S [dvp][dd] (row-major), in value-column steps staged as bf16 in As / Bs;
   ends after a barrier */
static __device__ void mf__fw_by_state(float *R, int lr, mf__fw_bf *As, int la, const float *A, long long lsa,
                                       mf__fw_bf *Bs, int lb, const float *S, int cn, int Cp, int dvp, int dd, int f0,
                                       int w) {
    int k0;
    for (k0 = 0; k0 < dvp; k0 += MF__FW_KS) {
        int wc = mf__fw_step(dvp, k0);
        mf__fw_stage(As, la, A, lsa, cn, Cp, k0, dvp, wc, 1);
        mf__fw_stage(Bs, lb, S + (long long)k0 * dd, dd, dvp - k0, wc, f0, dd, w, 0);
        __syncthreads();
        mf__fa_mm<MF__FA_BF16>(R, lr, As, la, Bs, lb, Cp, w, wc, k0 > 0);
        __syncthreads();
    }
}
/* shared bytes of mf__k_fw_prep_bf16 (kind 0), mf__k_fw_cout_bf16 (1), mf__k_fw_cstate_bf16 (2),
   mf__k_fw_cdstate_bf16 (3) and mf__k_fw_cgrad_bf16 (4) */
static size_t mf__fw_bf16_smem(const mf__cu_fw *p, int kind) {
    size_t cp = (size_t)mf__fa_pad(p->C), np = (size_t)mf__fa_pad(p->dvp), rr = cp > MF__FW_KS ? cp : MF__FW_KS;
    size_t ddp = (size_t)mf__fa_pad(p->dd), ks = MF__FW_KS, b = sizeof(mf__fw_bf);
    if (kind == 0) return 2 * cp * (cp + 4) * sizeof(float) + 2 * ks * (cp + 8) * b;      /* P, Gm | Q^T, K^T */
    if (kind == 1) return cp * (np + 4) * sizeof(float) + rr * (cp + 8 + np + 8) * b;     /* Y | A, B */
    if (kind == 2) return (ddp + cp) * 20 * sizeof(float) + (cp * 24 + ks * 24 + rr * (rr + 8)) * b; /* S^T, U | U, S^T, A */
    if (kind == 3) return (ddp + cp) * 20 * sizeof(float) + (2 * cp * 24 + ks * 24 + rr * (rr + 8)) * b; /* dS^T, dU | dY, -dU, dS^T, A */
    { /* kind 4: dP then D, (delta rule) G, the dQ / dK tile | dP, A, B */
        size_t ws = ks < ddp ? ks : ddp, lg = (size_t)mf__fa_pad(p->dd + p->dvp) + 4, d = p->beta ? 1 : 0;
        return (cp * (cp + 4) + d * cp * lg + cp * (ws + 4)) * sizeof(float) +
               (cp * (cp + 8) + rr * (cp + 8 + (cp > ws ? cp : ws) + 8)) * b;
    }
}
/* mf__k_fw_prep's P = tril(Q K^T) and Gm = tril(K K^T, -1): grid B H nc, shared fp32 P, Gm
   [Cp][Cp + 4], bf16 Q^T, K^T of a feature step [MF__FW_KS][Cp + 8]; then the same forward
   substitution (fp32, Gm as computed here). */
static __global__ void mf__k_fw_prep_bf16(mf__cu_fw p, float *Gm, float *P, float *X) {
    MF_DYN_SMEM(float, sm);
    int C = p.C, Cp = mf__fa_pad(C), lc = Cp + 4, le = Cp + 8, nc = (p.T + C - 1) / C, dd = p.dd, e, i, m;
    long long bh = blockIdx.x / nc, rb = mf__cu_fw_row(p, bh, 0), cb = (long long)blockIdx.x * C * C;
    long long ls = (long long)p.H * dd;
    int ch = (int)(blockIdx.x % nc), t0 = ch * C, cn = p.T - t0 < C ? p.T - t0 : C;
    float *Ps = sm, *Gs = Ps + Cp * lc;
    mf__fw_bf *Qt = (mf__fw_bf *)(Gs + Cp * lc), *Kt = Qt + MF__FW_KS * le;
    const float *q0 = p.q + MF__FW_R(t0) * dd, *kr = p.k + MF__FW_R(t0) * dd;
    mf__fw_tok_gram(Ps, p.beta ? Gs : NULL, lc, Qt, le, q0, ls, Kt, le, kr, ls, cn, Cp, dd); /* P = Q K^T, Gm = K K^T */
    for (e = threadIdx.x; e < C * C; e += blockDim.x) { /* each element read and masked by one thread */
        float g;
        i = e / C; m = e % C;
        g = p.beta && i < cn && m < i ? Gs[i * lc + m] : 0.0f;
        if (p.beta) Gs[i * lc + m] = g;
        if (Gm) Gm[cb + e] = g;
        P[cb + e] = i < cn && m <= i ? Ps[i * lc + m] : 0.0f;
    }
    if (!p.beta) return; /* uniform over the block */
    __syncthreads();
    mf__fw_subst(p, X, Gs, lc, kr, ls, bh, t0, cn);
}
/* mf__k_fw_cout's Y = Q S^T + P U per (chunk, head) (grid B H nc): fp32 Y [Cp][Np + 4] (Np = pad(dvp)),
   bf16 operand tiles A [rr][Cp + 8] (Q^T of a feature step, then P^T) and B [rr][Np + 8] (S^T of
   the step, then U), rr = max(Cp, MF__FW_KS). */
static __global__ void mf__k_fw_cout_bf16(mf__cu_fw p, const float *st, const float *U, const float *P, float *y) {
    MF_DYN_SMEM(float, sm);
    int C = p.C, Cp = mf__fa_pad(C), dvp = p.dvp, Np = mf__fa_pad(dvp), ly = Np + 4, la = Cp + 8, lb = Np + 8;
    int nc = (p.T + C - 1) / C, dd = p.dd, rr = Cp > MF__FW_KS ? Cp : MF__FW_KS, e, k0;
    long long bh = blockIdx.x / nc, rb = mf__cu_fw_row(p, bh, 0), ls = (long long)p.H * dd;
    int ch = (int)(blockIdx.x % nc), t0 = ch * C, cn = p.T - t0 < C ? p.T - t0 : C;
    const float *S = st + (bh * nc + ch) * (long long)dd * dvp;
    float *Ys = sm;
    mf__fw_bf *As = (mf__fw_bf *)(Ys + Cp * ly), *Bs = As + rr * la;
    for (k0 = 0; k0 < dd; k0 += MF__FW_KS) { /* Y = Q S^T */
        int w = mf__fw_step(dd, k0);
        mf__fw_stage(As, la, p.q + MF__FW_R(t0) * dd, ls, cn, Cp, k0, dd, w, 1);
        mf__fw_stage(Bs, lb, S + (long long)k0 * dvp, dvp, dd - k0, w, 0, dvp, Np, 0);
        __syncthreads();
        mf__fa_mm<MF__FA_BF16>(Ys, ly, As, la, Bs, lb, Cp, Np, w, k0 > 0);
        __syncthreads();
    }
    mf__fw_stage(As, la, P + ((bh * nc + ch) * C) * (long long)C, C, cn, Cp, 0, C, Cp, 1); /* += P U */
    mf__fw_stage(Bs, lb, U + (bh * p.T + t0) * (long long)dvp, dvp, cn, Cp, 0, dvp, Np, 0);
    __syncthreads();
    mf__fa_mm<MF__FA_BF16>(Ys, ly, As, la, Bs, lb, Cp, Np, Cp, 1);
    __syncthreads();
    for (e = threadIdx.x; e < cn * dvp; e += blockDim.x) {
        int i = e / dvp, c = e % dvp;
        y[MF__FW_R(t0 + i) * dvp + c] = Ys[i * ly + c];
    }
}
/* mf__k_fw_cstate with 16 value columns per block (grid (B H, Np / 16)), the state S^T [ddp][20] and
   U [Cp][20] fp32 in shared memory; per chunk U = U_ - W S^T and S^T += K^T U as bf16 tile products
   over feature steps (bf16 tiles: U [Cp][24], the step's S^T [MF__FW_KS][24], A [rr][rr + 8] for W^T
   or K of the step). */
static __global__ void mf__k_fw_cstate_bf16(mf__cu_fw p, const float *X, float *st, float *stn, float *U, float *state) {
    MF_DYN_SMEM(float, sm);
    long long bh = blockIdx.x, ss = (long long)p.dd * p.dvp, rb = mf__cu_fw_row(p, bh, 0), ls = (long long)p.H * p.dd;
    int dd = p.dd, dvp = p.dvp, ldx = dd + dvp, c0 = blockIdx.y * 16, nt = blockDim.x, C = p.C, Cp = mf__fa_pad(C);
    int ddp = mf__fa_pad(dd), nc = (p.T + C - 1) / C, rr = Cp > MF__FW_KS ? Cp : MF__FW_KS, la = rr + 8, ch, e, k0;
    float *S = sm, *Uf = S + ddp * 20; /* S[j 20 + cl], Uf[i 20 + cl] */
    mf__fw_bf *Ub = (mf__fw_bf *)(Uf + Cp * 20), *Sb = Ub + Cp * 24, *As = Sb + MF__FW_KS * 24;
    for (e = threadIdx.x; e < ddp * 16; e += nt) {
        int j = e / 16, cl = e % 16;
        S[j * 20 + cl] = state && j < dd && c0 + cl < dvp ? state[bh * ss + (long long)j * dvp + c0 + cl] : 0.0f;
    }
    __syncthreads();
    for (ch = 0; ch < nc; ch++) {
        int t0 = ch * C, cn = p.T - t0 < C ? p.T - t0 : C;
        const float *xr = X ? X + (bh * p.T + t0) * ldx : NULL, *kr = p.k + MF__FW_R(t0) * dd;
        for (e = threadIdx.x; e < dd * 16; e += nt) {
            int j = e / 16, cl = e % 16;
            if (c0 + cl < dvp) st[(bh * nc + ch) * ss + (long long)j * dvp + c0 + cl] = S[j * 20 + cl];
        }
        if (stn)
            for (e = threadIdx.x; e < dd * 16; e += nt) {
                int cl = e / dd, j = e % dd;
                if (c0 + cl < dvp) stn[(bh * nc + ch) * ss + (long long)(c0 + cl) * dd + j] = S[j * 20 + cl];
            }
        if (p.beta) /* Uf = W S^T */
            for (k0 = 0; k0 < dd; k0 += MF__FW_KS) {
                int w = mf__fw_step(dd, k0);
                mf__fw_stage(As, la, xr, ldx, cn, Cp, k0, dd, w, 1);
                mf__fw_stage(Sb, 24, S + k0 * 20, 20, w, w, 0, 16, 16, 0);
                __syncthreads();
                mf__fa_mm<MF__FA_BF16>(Uf, 20, As, la, Sb, 24, Cp, 16, w, k0 > 0);
                __syncthreads();
            }
        for (e = threadIdx.x; e < Cp * 16; e += nt) { /* U = U_ - W S^T (linear: [v, 1]); zero past the chunk */
            int i = e / 16, cl = e % 16, c = c0 + cl;
            float u = 0;
            if (i < cn && c < dvp) {
                u = p.beta ? xr[(long long)i * ldx + dd + c] - Uf[i * 20 + cl] : mf__cu_fw_v(p, MF__FW_R(t0 + i), c);
                U[(bh * p.T + t0 + i) * dvp + c] = u;
            }
            mf__fa_put(Ub + i * 24 + cl, u);
        }
        __syncthreads();
        for (k0 = 0; k0 < dd; k0 += MF__FW_KS) { /* S^T += K^T U */
            int w = mf__fw_step(dd, k0);
            mf__fw_stage(As, la, kr, ls, cn, Cp, k0, dd, w, 0);
            __syncthreads();
            mf__fa_mm<MF__FA_BF16>(S + k0 * 20, 20, As, la, Ub, 24, w, 16, Cp, 1);
            __syncthreads();
        }
    }
    if (state)
        for (e = threadIdx.x; e < dd * 16; e += nt) {
            int j = e / 16, cl = e % 16;
            if (c0 + cl < dvp) state[bh * ss + (long long)j * dvp + c0 + cl] = S[j * 20 + cl];
        }
}
/* Backward state pass, chunks from the last; blocks and shared memory as mf__k_fw_cstate, with
   dL/dS^T [dd][cw] and the chunk's dU [C][cw]. dSe [bh][nc][dvp][dd] gets dL/dS^T at every chunk's
   end, dU [bh][T][dvp] = K dS^T + P^T dY; then dS^T += Q^T dY (- W^T dU for the delta rule).
   dy [rows][dvp]. */
static __global__ void mf__k_fw_cdstate(mf__cu_fw p, const float *X, const float *P, const float *dy, float *dSe,
                                        float *dU, int cw) {
    MF_DYN_SMEM(float, sm);
    long long bh = blockIdx.x, ss = (long long)p.dd * p.dvp;
    int dd = p.dd, dvp = p.dvp, ldx = dd + dvp, c0 = blockIdx.y * cw, nt = blockDim.x;
    int C = p.C, nc = (p.T + C - 1) / C, ch, i, j, m, e, cl;
    long long rb = mf__cu_fw_row(p, bh, 0);
    float *S = sm, *dUs = sm + dd * cw;
    for (e = threadIdx.x; e < dd * cw; e += nt) S[e] = 0.0f;
    __syncthreads();
    for (ch = nc - 1; ch >= 0; ch--) {
        int t0 = ch * C, cn = p.T - t0 < C ? p.T - t0 : C;
        const float *Pc = P + (bh * nc + ch) * C * C;
        for (e = threadIdx.x; e < dd * cw; e += nt) { /* [dvp][dd], rows along d_dot */
            cl = e / dd; j = e % dd;
            if (c0 + cl < dvp) dSe[(bh * nc + ch) * ss + (long long)(c0 + cl) * dd + j] = S[j * cw + cl];
        }
        for (e = threadIdx.x; e < cn * cw; e += nt) {
            int c;
            float a = 0, s = 0;
            i = e / cw; cl = e % cw; c = c0 + cl;
            if (c < dvp) {
                const float *ki = p.k + MF__FW_R(t0 + i) * dd;
                for (j = 0; j < dd; j++) a = MF__CU_FMA(ki[j], S[j * cw + cl], a);
                for (m = i; m < cn; m++) s = MF__CU_FMA(Pc[m * C + i], dy[MF__FW_R(t0 + m) * dvp + c], s);
                dU[(bh * p.T + t0 + i) * dvp + c] = a + s;
            }
            dUs[e] = a + s;
        }
        __syncthreads();
        for (e = threadIdx.x; e < dd * cw; e += nt) {
            float a = 0, w = 0;
            int c;
            j = e / cw; cl = e % cw; c = c0 + cl;
            if (c >= dvp) continue;
            for (i = 0; i < cn; i++) {
                long long r = MF__FW_R(t0 + i);
                a = MF__CU_FMA(p.q[r * dd + j], dy[r * dvp + c], a);
                if (p.beta) w = MF__CU_FMA(X[(bh * p.T + t0 + i) * ldx + j], -dUs[i * cw + cl], w);
            }
            S[e] += a;
            if (p.beta) S[e] += w;
        }
        __syncthreads();
    }
}
/* mf__k_fw_cdstate on the bf16 tensor cores, blocks and shared memory as mf__k_fw_cstate_bf16 (dL/dS^T
   fp32 [ddp][20], dU fp32 [Cp][20]; bf16 dY and -dU [Cp][24] each, dL/dS^T of a feature step
   [MF__FW_KS][24], A [rr][rr + 8]): per chunk from the last dU = K dS^T + P^T dY, then
   dS^T += Q^T dY (- W^T dU), as tile products over feature steps. */
static __global__ void mf__k_fw_cdstate_bf16(mf__cu_fw p, const float *X, const float *P, const float *dy, float *dSe,
                                             float *dU) {
    MF_DYN_SMEM(float, sm);
    long long bh = blockIdx.x, ss = (long long)p.dd * p.dvp, rb = mf__cu_fw_row(p, bh, 0), ls = (long long)p.H * p.dd;
    int dd = p.dd, dvp = p.dvp, ldx = dd + dvp, c0 = blockIdx.y * 16, nt = blockDim.x, C = p.C, Cp = mf__fa_pad(C);
    int ddp = mf__fa_pad(dd), nc = (p.T + C - 1) / C, rr = Cp > MF__FW_KS ? Cp : MF__FW_KS, la = rr + 8, ch, e, k0;
    float *S = sm, *dUf = S + ddp * 20;
    mf__fw_bf *dYb = (mf__fw_bf *)(dUf + Cp * 20), *nUb = dYb + Cp * 24, *Sb = nUb + Cp * 24, *As = Sb + MF__FW_KS * 24;
    for (e = threadIdx.x; e < ddp * 20; e += nt) S[e] = 0.0f;
    __syncthreads();
    for (ch = nc - 1; ch >= 0; ch--) {
        int t0 = ch * C, cn = p.T - t0 < C ? p.T - t0 : C;
        const float *kr = p.k + MF__FW_R(t0) * dd, *qr = p.q + MF__FW_R(t0) * dd;
        for (e = threadIdx.x; e < dd * 16; e += nt) { /* [dvp][dd], rows along d_dot */
            int cl = e / dd, j = e % dd;
            if (c0 + cl < dvp) dSe[(bh * nc + ch) * ss + (long long)(c0 + cl) * dd + j] = S[j * 20 + cl];
        }
        mf__fw_stage(dYb, 24, dy + MF__FW_R(t0) * dvp, (long long)p.H * dvp, cn, Cp, c0, dvp, 16, 0);
        for (k0 = 0; k0 < dd; k0 += MF__FW_KS) { /* dU = K dS^T */
            int w = mf__fw_step(dd, k0);
            mf__fw_stage(As, la, kr, ls, cn, Cp, k0, dd, w, 1);
            mf__fw_stage(Sb, 24, S + k0 * 20, 20, w, w, 0, 16, 16, 0);
            __syncthreads();
            mf__fa_mm<MF__FA_BF16>(dUf, 20, As, la, Sb, 24, Cp, 16, w, k0 > 0);
            __syncthreads();
        }
        mf__fw_stage(As, la, P + (bh * nc + ch) * (long long)C * C, C, cn, Cp, 0, C, Cp, 0); /* += P^T dY */
        __syncthreads();
        mf__fa_mm<MF__FA_BF16>(dUf, 20, As, la, dYb, 24, Cp, 16, Cp, 1);
        __syncthreads();
        for (e = threadIdx.x; e < Cp * 16; e += nt) {
            int i = e / 16, cl = e % 16, c = c0 + cl, on = i < cn && c < dvp;
            if (on) dU[(bh * p.T + t0 + i) * dvp + c] = dUf[i * 20 + cl];
            mf__fa_put(nUb + i * 24 + cl, on ? -dUf[i * 20 + cl] : 0.0f);
        }
        for (k0 = 0; k0 < dd; k0 += MF__FW_KS) { /* dS^T += Q^T dY (- W^T dU) */
            int w = mf__fw_step(dd, k0);
            mf__fw_stage(As, la, qr, ls, cn, Cp, k0, dd, w, 0);
            __syncthreads();
            mf__fa_mm<MF__FA_BF16>(S + k0 * 20, 20, As, la, dYb, 24, w, 16, Cp, 1);
            __syncthreads();
            if (!p.beta) continue;
            mf__fw_stage(As, la, X + (bh * p.T + t0) * ldx, ldx, cn, Cp, k0, dd, w, 0);
            __syncthreads();
            mf__fa_mm<MF__FA_BF16>(S + k0 * 20, 20, As, la, nUb, 24, w, 16, Cp, 1);
            __syncthreads();
        }
    }
}
/* The fp32 steps of the per-chunk gradients, shared by mf__k_fw_cgrad and mf__k_fw_cgrad_bf16 (chunk
   of cn tokens from t0 of the head whose token 0 is at row rb; Gc: its Gm [C][C]). */
/* G [cn][lg] = (I + A)^-T G in place, A[i][m] = beta_i Gm[i][m] (m < i): a back substitution,
   sequential in i, a thread per column of [dW, dU] (the columns are independent) */
static __device__ void mf__fw_backsubst(const mf__cu_fw &p, float *Gs, int lg, const float *Gc, long long rb, int t0,
                                        int cn) {
    int ldx = p.dd + p.dvp, C = p.C, i, j, m;
    for (j = threadIdx.x; j < ldx; j += blockDim.x)
        for (i = cn - 2; i >= 0; i--) {
            float a = 0;
            for (m = i + 1; m < cn; m++) a = MF__CU_FMA(-p.beta[MF__FW_R(t0 + m)] * Gc[m * C + i], Gs[m * lg + j], a);
            Gs[i * lg + j] = a + Gs[i * lg + j];
        }
}
/* dbeta_i = G_i . [k_i, v_i] - sum_{m<i} D[i][m] Gm[i][m] added to gb (may be NULL); then D [rows][ld]
   becomes E = -diag(beta) D, strictly lower, zero past the chunk (cols columns). Row i: one thread's. */
static __device__ void mf__fw_dbeta(const mf__cu_fw &p, const float *Gs, int lg, float *D, int ld, const float *Gc,
                                    float *gb, long long rb, int t0, int cn, int rows, int cols) {
    int dd = p.dd, i, j, m, c;
    for (i = threadIdx.x; i < rows; i += blockDim.x) {
        float b = 0;
        if (i < cn) {
            long long r = MF__FW_R(t0 + i);
            const float *gi = Gs + i * lg;
            float a = 0, a2 = 0;
            b = p.beta[r];
            for (j = 0; j < dd; j++) a = MF__CU_FMA(gi[j], p.k[r * dd + j], a);
            for (c = 0; c < p.dvp; c++) a2 = MF__CU_FMA(gi[dd + c], mf__cu_fw_v(p, r, c), a2);
            a += a2;
            for (m = 0; m < i; m++) a -= D[i * ld + m] * Gc[i * p.C + m];
            if (gb) gb[r] += a;
        }
        for (m = 0; m < cols; m++) D[i * ld + m] = i < cn && m < i ? -b * D[i * ld + m] : 0.0f;
    }
}
/* dV += diag(beta) G[:, dd:] (delta rule) or dU [cn][ldu] (linear), one thread per element */
static __device__ void mf__fw_dv(const mf__cu_fw &p, float *gv, const float *Gs, int lg, const float *dUc, int ldu,
                                 long long rb, int t0, int cn) {
    for (int e = threadIdx.x; e < cn * p.dv; e += blockDim.x) {
        int i = e / p.dv, c = e % p.dv;
        long long r = MF__FW_R(t0 + i);
        gv[r * p.dv + c] += p.beta ? p.beta[r] * Gs[i * lg + p.dd + c] : dUc[i * ldu + c];
    }
}
/* The gradients of one chunk: one block per (chunk, head), grid B H nc. Inputs: the chunk-start
   state and dL/dS^T at its end in the [dvp][dd] layout (Sn, dSn: the products below run over the
   value axis with the threads along d_dot, so their reads coalesce), X, U, dU, Gm, dY.
   shared: dP, D / E [C][C]; the chunk's dY, U, dU [C][dvp + 1]; (delta rule) G = (I + A)^-T
   [dW, dU] and X [C][dd + dvp + 1]. Each output element is added by one thread. */
static __global__ void mf__k_fw_cgrad(mf__cu_fw p, const float *stn, const float *dSn, const float *X, const float *U,
                                      const float *dU, const float *Gm, const float *dy, float *gq, float *gk, float *gv,
                                      float *gb) {
    MF_DYN_SMEM(float, sm);
    int C = p.C, nc = (p.T + C - 1) / C, dd = p.dd, dvp = p.dvp, ldx = dd + dvp, lg = ldx + 1, lu = dvp + 1;
    int nt = blockDim.x, e, i, j, m, c;
    long long bh = blockIdx.x / nc, ss = (long long)dd * dvp, rb = mf__cu_fw_row(p, bh, 0);
    int ch = (int)(blockIdx.x % nc), t0 = ch * C, cn = p.T - t0 < C ? p.T - t0 : C;
    const float *Sn = stn + (bh * nc + ch) * ss, *dS = dSn + (bh * nc + ch) * ss;
    const float *Gc = p.beta ? Gm + (bh * nc + ch) * C * C : NULL;
    float *dP = sm, *D = dP + C * C, *dYs = D + C * C, *Us = dYs + C * lu, *dUs = Us + C * lu;
    float *Gs = dUs + C * lu, *Xs = Gs + C * lg;
#define MF__FWR(i) MF__FW_R(t0 + (i))
    for (e = threadIdx.x; e < cn * dvp; e += nt) {
        i = e / dvp; c = e % dvp;
        dYs[i * lu + c] = dy[MF__FWR(i) * dvp + c];
        Us[i * lu + c] = U[(bh * p.T + t0) * dvp + e];
        dUs[i * lu + c] = dU[(bh * p.T + t0) * dvp + e];
    }
    if (p.beta)
        for (e = threadIdx.x; e < cn * ldx; e += nt) Xs[e / ldx * lg + e % ldx] = X[(bh * p.T + t0) * ldx + e];
    __syncthreads();
    for (e = threadIdx.x; e < cn * cn; e += nt) { /* dP = tril(dY U^T) */
        float a = 0;
        i = e / cn; m = e % cn;
        if (m <= i) for (c = 0; c < dvp; c++) a = MF__CU_FMA(dYs[i * lu + c], Us[m * lu + c], a);
        dP[i * C + m] = a;
    }
    if (p.beta) {
        for (e = threadIdx.x; e < cn * ldx; e += nt) { /* [dW, dU] = [-dU S, dU] */
            float a = 0;
            i = e / ldx; j = e % ldx;
            if (j < dd) for (c = 0; c < dvp; c++) a = MF__CU_FMA(-dUs[i * lu + c], Sn[(long long)c * dd + j], a);
            else a = dUs[i * lu + j - dd];
            Gs[i * lg + j] = a;
        }
        __syncthreads();
        mf__fw_backsubst(p, Gs, lg, Gc, rb, t0, cn);
        __syncthreads();
        for (e = threadIdx.x; e < cn * cn; e += nt) { /* D = G X^T (m < i) */
            float a = 0;
            i = e / cn; m = e % cn;
            if (m < i) for (j = 0; j < ldx; j++) a = MF__CU_FMA(Gs[i * lg + j], Xs[m * lg + j], a);
            D[i * C + m] = a;
        }
        __syncthreads();
        mf__fw_dbeta(p, Gs, lg, D, C, Gc, gb, rb, t0, cn, cn, cn);
    }
    __syncthreads();
    for (e = threadIdx.x; e < cn * dd; e += nt) { /* dQ = dY S + dP K;  dK = U dS^T + dP^T Q (+ delta terms) */
        long long r;
        float a = 0, a2 = 0;
        i = e / dd; j = e % dd;
        r = MF__FWR(i);
        if (gq) {
            for (c = 0; c < dvp; c++) a = MF__CU_FMA(dYs[i * lu + c], Sn[(long long)c * dd + j], a);
            for (m = 0; m <= i; m++) a2 = MF__CU_FMA(dP[i * C + m], p.k[MF__FWR(m) * dd + j], a2);
            gq[r * dd + j] += a + a2;
        }
        if (gk) {
            float a3 = 0;
            a = 0; a2 = 0;
            for (c = 0; c < dvp; c++) a = MF__CU_FMA(Us[i * lu + c], dS[(long long)c * dd + j], a);
            for (m = i; m < cn; m++) a2 = MF__CU_FMA(dP[m * C + i], p.q[MF__FWR(m) * dd + j], a2);
            a += a2;
            if (p.beta) {
                a = MF__CU_FMA(p.beta[r], Gs[i * lg + j], a);
                for (m = 0; m < cn; m++) a3 = MF__CU_FMA(D[i * C + m] + D[m * C + i], p.k[MF__FWR(m) * dd + j], a3);
                a += a3;
            }
            gk[r * dd + j] += a;
        }
    }
    if (gv) mf__fw_dv(p, gv, Gs, lg, dUs, lu, rb, t0, cn);
#undef MF__FWR
}

/* mf__k_fw_cgrad on the bf16 tensor cores (MF_PREC_BF16; grid B H nc, MF__FA_THREADS threads): dP =
   tril(dY U^T), dW = -dU S, D = G X^T, dQ = dY S + dP K and dK = U dS^T + dP^T Q + (E + E^T) K as
   bf16 tile products (mf__fa_mm) over operands rounded to bf16 as they are staged, zero-padded (the
   chunk to Cp = pad(C), value columns and features in steps of MF__FW_KS), accumulated in fp32; the
   back substitution, dbeta, dV and dK's beta G term in fp32 (mf__fw_backsubst, mf__fw_dbeta,
   mf__fw_dv). Shared (mf__fw_bf16_smem kind 4): fp32 D [Cp][Cp + 4] (dP, then D / E), (delta rule)
   G [Cp][pad(dd + dvp) + 4], a dQ / dK tile R [Cp][ws + 4] (ws = min(MF__FW_KS, pad(dd))); bf16 dP
   [Cp][Cp + 8] (kept as an operand only: half the bytes of an fp32 copy) and the operand tiles A
   [rr][Cp + 8], B [rr][max(Cp, ws) + 8], rr = max(Cp, MF__FW_KS). */
static __global__ void mf__k_fw_cgrad_bf16(mf__cu_fw p, const float *stn, const float *dSn, const float *X,
                                           const float *U, const float *dU, const float *Gm, const float *dy, float *gq,
                                           float *gk, float *gv, float *gb) {
    MF_DYN_SMEM(float, sm);
    int C = p.C, Cp = mf__fa_pad(C), nc = (p.T + C - 1) / C, dd = p.dd, dvp = p.dvp, ldx = dd + dvp, k0, f0;
    int lc = Cp + 4, lg = mf__fa_pad(ldx) + 4, ws = min(MF__FW_KS, mf__fa_pad(dd)), lr = ws + 4;
    int rr = max(Cp, MF__FW_KS), la = Cp + 8, lb = max(Cp, ws) + 8;
    long long bh = blockIdx.x / nc, ss = (long long)dd * dvp, rb = mf__cu_fw_row(p, bh, 0);
    long long lq = (long long)p.H * dd, ly = (long long)p.H * dvp;
    int ch = (int)(blockIdx.x % nc), t0 = ch * C, cn = p.T - t0 < C ? p.T - t0 : C;
    const float *Sn = stn + (bh * nc + ch) * ss, *dS = dSn + (bh * nc + ch) * ss;
    const float *Gc = p.beta ? Gm + (bh * nc + ch) * C * C : NULL, *Xc = p.beta ? X + (bh * p.T + t0) * ldx : NULL;
    const float *dyc = dy + MF__FW_R(t0) * dvp, *Uc = U + (bh * p.T + t0) * dvp, *dUc = dU + (bh * p.T + t0) * dvp;
    const float *qc = p.q + MF__FW_R(t0) * dd, *kc = p.k + MF__FW_R(t0) * dd;
    float *D = sm, *G = D + Cp * lc, *R = G + (p.beta ? Cp * lg : 0);
    mf__fw_bf *dPb = (mf__fw_bf *)(R + Cp * lr), *As = dPb + Cp * la, *Bs = As + rr * la;
    mf__fw_tok_gram(D, NULL, lc, As, la, dyc, ly, Bs, lb, Uc, dvp, cn, Cp, dvp); /* dP = dY U^T */
    /* tril, the chunk's tokens only; D is next written after barriers */
    MF__FA_EACH(i, m, Cp, Cp, mf__fa_put(dPb + i * la + m, i < cn && m <= i ? D[i * lc + m] : 0.0f));
    if (p.beta) {
        for (f0 = 0; f0 < dd; f0 += MF__FW_KS) /* [dW, dU] = [-dU S, dU]: dW by feature steps */
            for (k0 = 0; k0 < dvp; k0 += MF__FW_KS) {
                int w = mf__fw_step(dd, f0), wc = mf__fw_step(dvp, k0);
                mf__fa_load_t(As, la, dUc, 0, k0, dvp - k0, dvp, cn, Cp, wc, -1.0f);
                mf__fw_stage(Bs, lb, Sn + (long long)k0 * dd, dd, dvp - k0, wc, f0, dd, w, 0);
                __syncthreads();
                mf__fa_mm<MF__FA_BF16>(G + f0, lg, As, la, Bs, lb, Cp, w, wc, k0 > 0);
                __syncthreads();
            }
        MF__FA_EACH(i, c, cn, dvp, G[i * lg + dd + c] = dUc[(long long)i * dvp + c]);
        __syncthreads();
        mf__fw_backsubst(p, G, lg, Gc, rb, t0, cn); /* G = (I + A)^-T [dW, dU] */
        __syncthreads();
        mf__fw_tok_gram(D, NULL, lc, As, la, G, lg, Bs, lb, Xc, ldx, cn, Cp, ldx); /* D = G X^T */
        mf__fw_dbeta(p, G, lg, D, lc, Gc, gb, rb, t0, cn, Cp, Cp); /* dbeta; D becomes E */
    }
    __syncthreads();
    /* dQ and dK by feature steps: R = the step's products, then added to gq / gk (the next product into R
       follows a staging and its barrier, which orders it after these reads) */
    for (f0 = 0; f0 < dd; f0 += MF__FW_KS) {
        int w = mf__fw_step(dd, f0), wr = min(w, dd - f0);
        if (gq) {
            mf__fw_by_state(R, lr, As, la, dyc, ly, Bs, lb, Sn, cn, Cp, dvp, dd, f0, w); /* R = dY S */
            MF__FA_EACH(m, i, Cp, Cp, As[m * la + i] = dPb[i * la + m]); /* R += dP K (dP^T: a bf16 copy) */
            mf__fw_stage(Bs, lb, kc, lq, cn, Cp, f0, dd, w, 0);
            __syncthreads();
            mf__fa_mm<MF__FA_BF16>(R, lr, As, la, Bs, lb, Cp, w, Cp, 1);
            __syncthreads();
            MF__FA_EACH(i, j, cn, wr, gq[MF__FW_R(t0 + i) * dd + f0 + j] += R[i * lr + j]);
        }
        if (!gk) continue;
        mf__fw_by_state(R, lr, As, la, Uc, dvp, Bs, lb, dS, cn, Cp, dvp, dd, f0, w); /* R = U dS^T */
        mf__fw_stage(Bs, lb, qc, lq, cn, Cp, f0, dd, w, 0); /* R += dP^T Q (dP as it is kept) */
        __syncthreads();
        mf__fa_mm<MF__FA_BF16>(R, lr, dPb, la, Bs, lb, Cp, w, Cp, 1);
        __syncthreads();
        if (p.beta) { /* R += (E + E^T) K (symmetric: the tile is its own transpose) */
            MF__FA_EACH(m, i, Cp, Cp, mf__fa_put(As + m * la + i, D[m * lc + i] + D[i * lc + m]));
            mf__fw_stage(Bs, lb, kc, lq, cn, Cp, f0, dd, w, 0);
            __syncthreads();
            mf__fa_mm<MF__FA_BF16>(R, lr, As, la, Bs, lb, Cp, w, Cp, 1);
            __syncthreads();
        }
        MF__FA_EACH(i, j, cn, wr, {
            long long r = MF__FW_R(t0 + i);
            gk[r * dd + f0 + j] += p.beta ? MF__CU_FMA(p.beta[r], G[i * lg + f0 + j], R[i * lr + j]) : R[i * lr + j];
        });
    }
    if (gv) mf__fw_dv(p, gv, G, lg, dUc, dvp, rb, t0, cn);
}

#undef MF__FW_R

/* ---- host side ---- */
static mf__cu_fw mf__cu_fw_args(const mf_tensor *out) {
    const mf_tensor *q = out->src[0], *beta = out->src[3];
    mf__cu_fw p;
    p.q = q->data; p.k = out->src[1]->data; p.v = out->src[2]->data; p.beta = beta ? beta->data : NULL;
    p.B = q->shape[0]; p.T = q->shape[1]; p.H = q->shape[2]; p.dd = q->shape[3]; p.dv = out->shape[3];
    p.dvp = out->iarg[MF__ARG_FW_DVP];
    p.C = out->iarg[MF__ARG_FW_FORM] < p.T ? out->iarg[MF__ARG_FW_FORM] : p.T; /* a chunk longer than T is T */
    return p;
}
/* out->saved, carved: recurrent: the checkpoints; chunkwise: the chunk-start states in both layouts
   (st [dd][dvp], stn [dvp][dd]), X, U, Gm, P; then normalised linear attention's numerators [rows][dvp] */
typedef struct { float *st, *stn, *X, *U, *Gm, *P, *num; } mf__cu_fw_buf;
static size_t mf__cu_fw_carve(const mf__cu_fw *p, int form, int delta, int norm, float *base, mf__cu_fw_buf *b) {
    long long BH = (long long)p->B * p->H, ss = (long long)p->dd * p->dvp, nc = (p->T + p->C - 1) / p->C;
    long long nck = form == 1 ? (p->T + MF__FW_CK - 1) / MF__FW_CK : nc, o = 0;
    b->st = base; o += BH * nck * ss;
    b->stn = b->X = b->U = b->Gm = b->P = NULL;
    if (form > 1) {
        b->stn = base ? base + o : NULL; o += BH * nc * ss;
        if (delta) { b->X = base ? base + o : NULL; o += BH * p->T * (p->dd + p->dvp); }
        b->U = base ? base + o : NULL; o += BH * p->T * p->dvp;
        if (delta) { b->Gm = base ? base + o : NULL; o += BH * nc * p->C * p->C; }
        b->P = base ? base + o : NULL; o += BH * nc * p->C * p->C;
    }
    b->num = !norm || !base ? NULL : base + o;
    if (norm) o += (long long)p->B * p->T * p->H * p->dvp;
    return (size_t)o * sizeof(float);
}
/* value columns per block: the power of two >= dvp up to `most`, halved until the shared floats
   (per_col per column + fixed) fit in 48 KiB */
static int mf__cu_fw_cw(mf_ctx *ctx, const mf__cu_fw *p, int most, size_t per_col, size_t fixed, size_t *smem) {
    int cw = 1;
    while (cw < p->dvp && cw < most) cw *= 2;
    while (cw > 1 && (per_col * cw + fixed) * sizeof(float) > 48 * 1024) cw /= 2;
    *smem = (per_col * cw + fixed) * sizeof(float);
    if (*smem > 48 * 1024)
        return (mf__fail(ctx, "fast weights / linear attention: %d features per head (chunk %d) need %zu bytes of shared "
                         "memory (more than 48 KiB) in the CUDA kernels; use fewer features (a smaller dpfp_nu or head "
                         "size) or a smaller chunk", p->dd, p->C, *smem), -1);
    return cw;
}
/* dynamic shared memory of a chunk kernel (mf__cu_smem, the chunk and state sizes in the message) */
template <class K> static int mf__cu_fw_smem(mf_ctx *ctx, K kernel, size_t bytes, const char *op, const mf__cu_fw *p) {
    char w[96];
    snprintf(w, sizeof w, "a chunk of %d tokens (d_dot %d, dv %d)", p->C, p->dd, p->dv);
    return mf__cu_smem(ctx, kernel, bytes, op, w, "use a smaller chunk_size (16 is the automatic choice)");
}
/* the chunkwise forward on the bf16 tensor cores: mf__k_fw_prep_bf16, mf__k_fw_cstate_bf16, mf__k_fw_cout_bf16 */
static int mf__cu_fw_fwd_bf16(mf_ctx *ctx, const mf__cu_fw *p, const mf__cu_fw_buf *b, float *state, float *y, int keep,
                              const char *op) {
    long long BH = (long long)p->B * p->H, nc = (p->T + p->C - 1) / p->C;
    size_t ps = mf__fw_bf16_smem(p, 0), os = mf__fw_bf16_smem(p, 1), cs = mf__fw_bf16_smem(p, 2);
    if (mf__cu_fw_smem(ctx, mf__k_fw_prep_bf16, ps, op, p) < 0 || mf__cu_fw_smem(ctx, mf__k_fw_cout_bf16, os, op, p) < 0 ||
        mf__cu_fw_smem(ctx, mf__k_fw_cstate_bf16, cs, op, p) < 0)
        return -1;
    if (MF__CU_RUN(ctx, op, mf__k_fw_prep_bf16, (unsigned)(BH * nc), MF__CU_FW_NT, ps, *p, b->Gm, b->P, b->X) < 0 ||
        MF__CU_RUN(ctx, op, mf__k_fw_cstate_bf16, dim3((unsigned)BH, (unsigned)((p->dvp + 15) / 16)), MF__FA_THREADS, cs, *p,
                   (const float *)b->X, b->st, keep ? b->stn : (float *)NULL, b->U, state) < 0)
        return -1;
    return MF__CU_RUN(ctx, op, mf__k_fw_cout_bf16, (unsigned)(BH * nc), MF__FA_THREADS, os, *p, (const float *)b->st,
                      (const float *)b->U, (const float *)b->P, y);
}
static int mf__cu_fw_fwd(mf_ctx *ctx, mf_tensor *out) {
    mf__cu_fw p = mf__cu_fw_args(out);
    mf__cu_fw_buf b;
    int form = out->iarg[MF__ARG_FW_FORM], delta = p.beta != NULL, norm = out->iarg[MF__ARG_FW_NORM], cw;
    long long BH = (long long)p.B * p.H, rows = BH * p.T, nc = (p.T + p.C - 1) / p.C;
    const char *op = out->op->name;
    float *state = (float *)out->aux, *y;
    size_t smem, bytes = mf__cu_fw_carve(&p, form, delta, norm, NULL, &b);
    if (!(out->saved = (float *)mf__cu_arena(ctx, bytes))) return -1;
    mf__cu_fw_carve(&p, form, delta, norm, out->saved, &b);
    y = norm ? b.num : out->data;
    if (form == 1) {
        if ((cw = mf__cu_fw_cw(ctx, &p, MF__CU_FW_CW, (size_t)p.dd, 0, &smem)) < 0) return -1;
        if (MF__CU_RUN(ctx, op, mf__k_fw_rec_fwd, dim3((unsigned)BH, (unsigned)((p.dvp + cw - 1) / cw)), cw, smem, p,
                       state, out->requires_grad ? b.st : (float *)NULL, y) < 0)
            return -1;
    } else if (mf__cu_fa_prec(ctx) == MF__FA_BF16) {
        if (mf__cu_fw_fwd_bf16(ctx, &p, &b, state, y, out->requires_grad, op) < 0) return -1;
    } else {
        size_t csmem, psmem = (size_t)(2 * p.C * (p.dd + 1) + p.C * p.C) * sizeof(float);
        int ccw = mf__cu_fw_cw(ctx, &p, MF__CU_FW_CCW, (size_t)(p.dd + p.C), 0, &csmem);
        if (ccw < 0) return -1;
        if (mf__cu_fw_smem(ctx, mf__k_fw_prep, psmem, op, &p) < 0 ||
            MF__CU_RUN(ctx, op, mf__k_fw_prep, (unsigned)(BH * nc), MF__CU_FW_NT, psmem, p, b.Gm, b.P, b.X) < 0 ||
            MF__CU_RUN(ctx, op, mf__k_fw_cstate, dim3((unsigned)BH, (unsigned)((p.dvp + ccw - 1) / ccw)), MF__CU_FW_NT,
                       csmem, p, (const float *)b.X, b.st, out->requires_grad ? b.stn : (float *)NULL, b.U, state,
                       ccw) < 0 ||
            MF__CU_RUN(ctx, op, mf__k_fw_cout, MF__EW(rows * p.dvp), p, (const float *)b.st, (const float *)b.U,
                       (const float *)b.P, y, rows * p.dvp) < 0)
            return -1;
    }
    if (norm)
        return MF__CU_RUN(ctx, op, mf__k_fw_norm, MF__EW(rows * p.dv), out->data, (const float *)b.num, p.dv,
                          out->farg[MF__FARG_FW_EPS], rows * p.dv);
    return 0;
}
/* the chunkwise backward on the bf16 tensor cores: mf__k_fw_cdstate_bf16 (dL/dS^T at the chunk ends into
   dSe, dU), then mf__k_fw_cgrad_bf16 (each chunk's gradients) */
static int mf__cu_fw_bwd_bf16(mf_ctx *ctx, const mf__cu_fw *p, const mf__cu_fw_buf *b, const float *dy, float *dSe,
                              float *dU, float *gq, float *gk, float *gv, float *gb, const char *op) {
    long long BH = (long long)p->B * p->H, nc = (p->T + p->C - 1) / p->C;
    size_t ds = mf__fw_bf16_smem(p, 3), gs = mf__fw_bf16_smem(p, 4);
    if (mf__cu_fw_smem(ctx, mf__k_fw_cdstate_bf16, ds, op, p) < 0 || mf__cu_fw_smem(ctx, mf__k_fw_cgrad_bf16, gs, op, p) < 0)
        return -1;
    if (MF__CU_RUN(ctx, op, mf__k_fw_cdstate_bf16, dim3((unsigned)BH, (unsigned)((p->dvp + 15) / 16)), MF__FA_THREADS, ds,
                   *p, (const float *)b->X, (const float *)b->P, dy, dSe, dU) < 0)
        return -1;
    return MF__CU_RUN(ctx, op, mf__k_fw_cgrad_bf16, (unsigned)(BH * nc), MF__FA_THREADS, gs, *p, (const float *)b->stn,
                      (const float *)dSe, (const float *)b->X, (const float *)b->U, (const float *)dU,
                      (const float *)b->Gm, dy, gq, gk, gv, gb);
}
static int mf__cu_fw_bwd(mf_ctx *ctx, mf_tensor *out) {
    mf__cu_fw p = mf__cu_fw_args(out);
    mf__cu_fw_buf b;
    int form = out->iarg[MF__ARG_FW_FORM], delta = p.beta != NULL, norm = out->iarg[MF__ARG_FW_NORM], cw;
    long long BH = (long long)p.B * p.H, rows = BH * p.T, nc = (p.T + p.C - 1) / p.C, ss = (long long)p.dd * p.dvp;
    float *gq = mf__g(out->src[0]), *gk = mf__g(out->src[1]), *gv = mf__g(out->src[2]), *gb = mf__g(out->src[3]);
    const float *dy = out->grad;
    const char *op = "fast weights / linear attention (backward)";
    size_t smem;
    if (!gq && !gk && !gv && !gb) return 0;
    mf__cu_fw_carve(&p, form, delta, norm, out->saved, &b);
    if (norm) { /* through y = num / (den + eps) */
        float *dn = (float *)mf__cu_arena(ctx, (size_t)(rows * p.dvp) * sizeof(float));
        if (!dn || MF__CU_RUN(ctx, op, mf__k_fw_norm_bwd, MF__EW(rows), dn, (const float *)b.num,
                              (const float *)out->grad, (const float *)out->data, p.dv, out->farg[MF__FARG_FW_EPS],
                              rows) < 0)
            return -1;
        dy = dn;
    }
    if (form == 1) {
        int ns;
        float *seg, *pq, *pk, *pb;
        if ((cw = mf__cu_fw_cw(ctx, &p, MF__CU_FW_CW, (size_t)2 * p.dd + 2 * MF__FW_CK + 4, (size_t)2 * p.dd, &smem)) < 0) return -1;
        ns = (p.dvp + cw - 1) / cw;
        seg = (float *)mf__cu_arena(ctx, (size_t)(BH * ns * MF__FW_CK * p.dd * cw) * sizeof(float));
        pq = (float *)mf__cu_arena(ctx, (size_t)(2 * ns * rows * p.dd + ns * rows) * sizeof(float));
        if (!seg || !pq) return -1;
        pk = pq + ns * rows * p.dd; pb = pk + ns * rows * p.dd;
        if (MF__CU_RUN(ctx, op, mf__k_fw_rec_bwd, dim3((unsigned)BH, (unsigned)ns), cw, smem, p, (const float *)b.st, dy,
                       seg, pq, pk, pb, gv) < 0)
            return -1;
        if (gq && MF__CU_RUN(ctx, op, mf__k_fw_slices, MF__EW(rows * p.dd), gq, (const float *)pq, ns, rows * p.dd) < 0)
            return -1;
        if (gk && MF__CU_RUN(ctx, op, mf__k_fw_slices, MF__EW(rows * p.dd), gk, (const float *)pk, ns, rows * p.dd) < 0)
            return -1;
        if (gb && MF__CU_RUN(ctx, op, mf__k_fw_slices, MF__EW(rows), gb, (const float *)pb, ns, rows) < 0)
            return -1;
        return 0;
    } else {
        float *dSe = (float *)mf__cu_arena(ctx, (size_t)(BH * nc * ss + rows * p.dvp) * sizeof(float)), *dU;
        size_t gsm = (size_t)(2 * p.C * p.C + 3 * p.C * (p.dvp + 1) + (delta ? 2 * p.C * (p.dd + p.dvp + 1) : 0))
                     * sizeof(float);
        if (!dSe) return -1;
        dU = dSe + BH * nc * ss;
        if (mf__cu_fa_prec(ctx) == MF__FA_BF16) return mf__cu_fw_bwd_bf16(ctx, &p, &b, dy, dSe, dU, gq, gk, gv, gb, op);
        if ((cw = mf__cu_fw_cw(ctx, &p, MF__CU_FW_CCW, (size_t)(p.dd + p.C), 0, &smem)) < 0) return -1;
        if (mf__cu_fw_smem(ctx, mf__k_fw_cgrad, gsm, op, &p) < 0 ||
            MF__CU_RUN(ctx, op, mf__k_fw_cdstate, dim3((unsigned)BH, (unsigned)((p.dvp + cw - 1) / cw)), MF__CU_FW_NT,
                       smem, p, (const float *)b.X, (const float *)b.P, dy, dSe, dU, cw) < 0)
            return -1;
        return MF__CU_RUN(ctx, op, mf__k_fw_cgrad, (unsigned)(BH * nc), MF__CU_ROW, gsm, p, (const float *)b.stn,
                          (const float *)dSe, (const float *)b.X, (const float *)b.U, (const float *)dU,
                          (const float *)b.Gm, dy, gq, gk, gv, gb);
    }
}
#endif /* METAFORMER_NO_FASTWEIGHTS */

/* ==== [cu:feedback] ========================================================================= */
#ifndef METAFORMER_NO_FEEDBACK
/* The feedback transformer: feedback attention and the token recurrence. */
/* CUDA twin of [mf:feedback] (docs/math.md §8). Same structure as the CPU: the whole recurrence is
   ONE tape node ("feedback") with an explicit backward in reverse time; only the buffers differ.

   Where things live: every per-call buffer (the step-major activations [layer][T][B][...], the
   key/value slot stack, the backward's gradients) is taken from the device arena once, before the
   token loop; the generation slots are a device buffer in mf__fb_state (mf__dmalloc). The slot stack
   is [nblk][cap][B][D]: slot n of a block is one contiguous [B][D] matrix, so the per-step key/value
   projection is one cuBLAS GEMM written straight into the stack (no copy kernel), and the backward's
   slot gradients dK_t / dV_t are read the same way. The weights are used in place (cuBLAS takes
   either transpose; nothing is packed).

   A step (per layer): LayerNorm (mf__k_layernorm), q = z Wq^T (cuBLAS), the feedback attention of
   every (batch row, head) over the stack (mf__k_fba_fwd), out-projection (cuBLAS + bias), residual
   with dropout (mf__k_fb_drop), LayerNorm, fc1 (cuBLAS + bias), activation (mf__k_unary), dropout,
   fc2, residual; then the memory m_t (mf__k_fb_mem) and its keys / values (one GEMM per block).
   The backward of step t mirrors it (dK|dV_t W, dsw, layers in reverse, the attention backward in
   four deterministic kernels) and keeps each weight's output gradient; every weight gets ONE GEMM
   over all T*B rows at the end, LayerNorm gamma/beta one column-sum kernel.

   No host synchronisation inside the token loop: it issues only kernel launches (MF__CU_RUN checks
   them with cudaGetLastError, which does not wait; only the emulator and MF_CUDA_DEBUG builds
   synchronise there), cuBLAS calls and cudaMemsetAsync / device-to-device cudaMemcpyAsync on the
   context's stream; softmax(w), the layer weights and every scalar the kernels need are read on the
   device (no value comes back to the host), and all memory is allocated before the loop.
   tests/test_cuda_feedback.cpp counts the emulator's host transfers and synchronisations over a
   forward and a backward to check this. CUDA Graph capture of the per-step sequence is not done.

   Precision: the step's dense products go through mf__cu_gemm, so MF_PREC_BF16 runs them on the bf16
   tensor cores; the feedback attention (one query per (batch row, head) against the slots: a
   matrix-vector product that would fill one row of a 16-row WMMA tile, bound by reading the slots)
   stays fp32 on the CUDA cores in every precision. */

/* the attention's view of one call: heads, head size, memory slots, table rows; key/value (b, h, j)
   at b sb + h sh + j sj; slot j reads table row P - n + j; dr / ds rows (rb + j) */
typedef struct {
    int H, d, n, P, rb;
    long long sb, sh, sj;
    float scale;
    mf__attn_drop drop;     /* probability dropout: a_j of (b, h) is element dbase + (b H + h) dld + j */
    long long dbase, dld;   /* of drop's stream (mf__fb_attn's numbering on the CPU) */
} mf__cu_fba;
/* the dropped a_j of row bh = b H + h */
static __device__ float mf__cu_fba_drop(const mf__cu_fba &a, int bh, int j, float p) {
    return mf__drop_keep_at(a.drop.key, (uint64_t)(a.dbase + (long long)bh * a.dld + j), a.drop.p) ? p * a.drop.s : 0.0f;
}

/* scale ((q + u) . k_j + q . r_j + s_j) of slot j (qu = q + u, qq = q in shared memory) */
static __device__ float mf__cu_fba_score(const float *qu, const float *qq, const float *kj, const float *rj, float sj,
                                         int d, float scale) {
    float s = 0, pos = 0;
    int c;
    for (c = 0; c < d; c++) s += qu[c] * kj[c];
    for (c = 0; c < d; c++) pos += qq[c] * rj[c];
    return scale * (s + pos + sj);
}
/* threads of a per-(b, h) attention block: a warp multiple covering n or d, at most MF__CU_ROW */
static int mf__cu_fba_threads(int n, int d) {
    int w = n > d ? n : d, t = 32;
    while (t < w && t < MF__CU_ROW) t *= 2;
    return t;
}
/* q, u into shared qq [d], qu [d] (q row bh, u row h) */
static __device__ void mf__cu_fba_load_q(const float *q, const float *u, float *qq, float *qu, int bh, int h, int d) {
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        qq[c] = q[(long long)bh * d + c];
        qu[c] = qq[c] + u[(long long)h * d + c];
    }
}

/* forward, one block per (b, h): o = softmax(scores) V, lse = log-sum-exp of the scores.
   shared: q [d], q + u [d], scores / probabilities [n] */
static __global__ void mf__k_fba_fwd(const float *q, const float *u, const float *k, const float *v, const float *r,
                                     const float *s, float *o, float *lse, mf__cu_fba a) {
    __shared__ float sh[32];
    MF_DYN_SMEM(float, sm);
    float *qq = sm, *qu = sm + a.d, *p = sm + 2 * a.d, mx = -INFINITY, l = 0;
    int bh = blockIdx.x, b = bh / a.H, h = bh % a.H, j, c;
    long long base = b * a.sb + h * a.sh, r0 = a.P - a.n;
    mf__cu_fba_load_q(q, u, qq, qu, bh, h, a.d);
    __syncthreads();
    for (j = threadIdx.x; j < a.n; j += blockDim.x) {
        p[j] = mf__cu_fba_score(qu, qq, k + base + j * a.sj, r + ((r0 + j) * a.H + h) * a.d, s[(r0 + j) * a.H + h], a.d,
                                a.scale);
        mx = p[j] > mx ? p[j] : mx;
    }
    mx = mf__cu_bred(mx, sh, 1);
    for (j = threadIdx.x; j < a.n; j += blockDim.x) { float e = expf(p[j] - mx); p[j] = e; l += e; }
    l = mf__cu_bred(l, sh, 0);
    for (j = threadIdx.x; j < a.n; j += blockDim.x) { /* as the CPU: normalised, dropped, then summed */
        p[j] /= l;
        if (a.drop.p > 0.0f) p[j] = mf__cu_fba_drop(a, bh, j, p[j]);
    }
    __syncthreads();
    for (c = threadIdx.x; c < a.d; c += blockDim.x) {
        float acc = 0;
        for (j = 0; j < a.n; j++) acc += p[j] * v[base + j * a.sj + c];
        o[(long long)bh * a.d + c] = acc;
    }
    if (threadIdx.x == 0) lse[bh] = mx + logf(l);
}
/* backward, one block per (b, h): a_j from the lse, g_j = scale a_j (dout . v_j - dout . o) into
   G [bh][n] and a_j (dropped, with dropout) into Pr [bh][n] (for the dk / dv / dr / ds kernels); dq += sum_j g_j k_j, then
   += sum_j g_j r_j (the CPU's order); kg [bh][d] = sum_j g_j k_j (for du; may be NULL).
   shared: q [d], q + u [d], dout [d], g [n] */
static __global__ void mf__k_fba_bwd_row(const float *q, const float *u, const float *k, const float *v, const float *r,
                                         const float *s, const float *o, const float *lse, const float *dout, float *G,
                                         float *Pr, float *dq, float *kg, mf__cu_fba a) {
    MF_DYN_SMEM(float, sm);
    float *qq = sm, *qu = sm + a.d, *go = sm + 2 * a.d, *g = sm + 3 * a.d, Dd = 0, L = lse[blockIdx.x];
    int bh = blockIdx.x, b = bh / a.H, h = bh % a.H, j, c;
    long long base = b * a.sb + h * a.sh, r0 = a.P - a.n;
    mf__cu_fba_load_q(q, u, qq, qu, bh, h, a.d);
    for (c = threadIdx.x; c < a.d; c += blockDim.x) go[c] = dout[(long long)bh * a.d + c];
    for (c = 0; c < a.d; c++) Dd += dout[(long long)bh * a.d + c] * o[(long long)bh * a.d + c]; /* every thread */
    __syncthreads();
    for (j = threadIdx.x; j < a.n; j += blockDim.x) {
        const float *vj = v + base + j * a.sj;
        float pj = expf(mf__cu_fba_score(qu, qq, k + base + j * a.sj, r + ((r0 + j) * a.H + h) * a.d,
                                         s[(r0 + j) * a.H + h], a.d, a.scale) - L), dp = 0;
        for (c = 0; c < a.d; c++) dp += go[c] * vj[c];
        if (a.drop.p > 0.0f) { /* a~_j weights v_j: g_j = scale (a~_j dp - a_j D) */
            float pd = mf__cu_fba_drop(a, bh, j, pj);
            g[j] = a.scale * (pd * dp - pj * Dd);
            pj = pd;
        } else g[j] = a.scale * pj * (dp - Dd);
        G[(long long)bh * a.n + j] = g[j];
        Pr[(long long)bh * a.n + j] = pj;
    }
    __syncthreads();
    for (c = threadIdx.x; c < a.d; c += blockDim.x) {
        float ks = 0, rs = 0;
        for (j = 0; j < a.n; j++) ks += g[j] * k[base + j * a.sj + c];
        for (j = 0; j < a.n; j++) rs += g[j] * r[((r0 + j) * a.H + h) * a.d + c];
        if (dq) dq[(long long)bh * a.d + c] = (dq[(long long)bh * a.d + c] + ks) + rs;
        if (kg) kg[(long long)bh * a.d + c] = ks;
    }
}
/* dk_j += g_j (q + u), dv_j += a_j dout: one thread per (b, h, j, c); dk or dv may be NULL */
static __global__ void mf__k_fba_bwd_kv(const float *q, const float *u, const float *dout, const float *G,
                                        const float *Pr, float *dk, float *dv, mf__cu_fba a, long long n) {
    MF__CU_LOOP(e, n) {
        long long c = e % a.d, j = (e / a.d) % a.n, bh = e / ((long long)a.d * a.n), b = bh / a.H, h = bh % a.H;
        long long at = b * a.sb + h * a.sh + j * a.sj + c;
        if (dk) dk[at] += G[bh * a.n + j] * (q[bh * a.d + c] + u[h * a.d + c]);
        if (dv) dv[at] += Pr[bh * a.n + j] * dout[bh * a.d + c];
    }
}
/* dr [(rb + j) H + h][c] += sum_b g_bj q_b[c], ds [(rb + j) H + h] += g_bj (b in order): one thread per
   (h, j, c), the ds update by c == 0; B batch rows */
static __global__ void mf__k_fba_bwd_tab(const float *q, const float *G, float *dr, float *ds, int B, mf__cu_fba a,
                                         long long n) {
    MF__CU_LOOP(e, n) {
        long long c = e % a.d, j = (e / a.d) % a.n, h = e / ((long long)a.d * a.n), row = (a.rb + j) * a.H + h;
        float acc = 0;
        int b;
        for (b = 0; b < B; b++) acc += G[((long long)b * a.H + h) * a.n + j] * q[((long long)b * a.H + h) * a.d + c];
        if (dr) dr[row * a.d + c] += acc;
        if (ds && c == 0) {
            float sv = ds[row];
            for (b = 0; b < B; b++) sv += G[((long long)b * a.H + h) * a.n + j];
            ds[row] = sv;
        }
    }
}
/* du [h][c] += kg_b [h][c], b in order */
static __global__ void mf__k_fba_bwd_u(float *du, const float *kg, int B, int H, int d) {
    MF__CU_LOOP(e, (long long)H * d) {
        float acc = du[e];
        for (int b = 0; b < B; b++) acc += kg[(long long)b * H * d + e];
        du[e] = acc;
    }
}

/* the attention of one call (B batch rows): forward, or backward into the given gradients (NULL:
   not wanted). G, Pr: [B H n] scratch, kg [B H d] scratch (for du). */
typedef struct {
    const float *q, *u, *k, *v, *r, *s;
    float *o, *lse;
    const float *dout;
    float *dq, *du, *dk, *dv, *dr, *ds, *G, *Pr, *kg;
} mf__cu_fba_io;
#define MF__CU_FBA_FIX "use fewer memory slots (a smaller max_seq) or smaller heads"
static int mf__cu_fba_run(mf_ctx *ctx, const char *op, const mf__cu_fba *a, int B, const mf__cu_fba_io *x, int backward) {
    unsigned blocks = (unsigned)(B * a->H);
    int th = mf__cu_fba_threads(a->n, a->d);
    size_t smem = (size_t)((backward ? 3 : 2) * a->d + a->n) * sizeof(float);
    long long nkv = (long long)blocks * a->n * a->d, ntab = (long long)a->H * a->n * a->d;
    if (!backward) {
        if (mf__cu_smem(ctx, mf__k_fba_fwd, smem, op, "the forward", MF__CU_FBA_FIX) < 0) return -1;
        return MF__CU_RUN(ctx, op, mf__k_fba_fwd, blocks, th, smem, x->q, x->u, x->k, x->v, x->r, x->s, x->o, x->lse, *a);
    }
    if (mf__cu_smem(ctx, mf__k_fba_bwd_row, smem, op, "the backward", MF__CU_FBA_FIX) < 0 ||
        MF__CU_RUN(ctx, op, mf__k_fba_bwd_row, blocks, th, smem, x->q, x->u, x->k, x->v, x->r, x->s,
                   (const float *)x->o, (const float *)x->lse, x->dout, x->G, x->Pr, x->dq, x->du ? x->kg : (float *)NULL,
                   *a) < 0)
        return -1;
    if ((x->dk || x->dv) && MF__CU_RUN(ctx, op, mf__k_fba_bwd_kv, MF__EW(nkv), x->q, x->u, x->dout, (const float *)x->G,
                                       (const float *)x->Pr, x->dk, x->dv, *a, nkv) < 0)
        return -1;
    if ((x->dr || x->ds) &&
        MF__CU_RUN(ctx, op, mf__k_fba_bwd_tab, MF__EW(ntab), x->q, (const float *)x->G, x->dr, x->ds, B, *a, ntab) < 0)
        return -1;
    if (x->du && MF__CU_RUN(ctx, op, mf__k_fba_bwd_u, MF__EW(a->H * a->d), x->du, (const float *)x->kg, B, a->H, a->d) < 0)
        return -1;
    return 0;
}

/* ---- the feedback_attention op: q [B, H, dk], k, v [B, H, n, dk], u [H, dk], r [P, H, dk], s [P, H];
   saved: lse [B H] */
static mf__cu_fba mf__cu_fba_op_view(const mf_ctx *ctx, const mf_tensor *out) {
    const mf_tensor *q = out->src[0], *k = out->src[1];
    mf__cu_fba a;
    a.drop = mf__attn_drop_of(ctx, out); a.dbase = 0; a.dld = k->shape[2];
    a.H = q->shape[1]; a.d = q->shape[2]; a.n = k->shape[2]; a.P = out->src[4]->shape[0]; a.rb = a.P - a.n;
    a.sj = a.d; a.sh = (long long)a.n * a.d; a.sb = a.sh * a.H; a.scale = out->farg[MF__FARG_ATTN_SCALE];
    return a;
}
static void mf__cu_fba_op_io(const mf_tensor *out, mf__cu_fba_io *x) {
    memset(x, 0, sizeof *x);
    x->q = out->src[0]->data; x->k = out->src[1]->data; x->v = out->src[2]->data; x->u = out->src[3]->data;
    x->r = out->src[4]->data; x->s = out->src[5]->data; x->o = out->data; x->lse = out->saved;
}
static int mf__cu_fba_fwd(mf_ctx *ctx, mf_tensor *out) {
    mf__cu_fba a = mf__cu_fba_op_view(ctx, out);
    mf__cu_fba_io x;
    int B = out->shape[0];
    if (!(out->saved = (float *)mf__cu_arena(ctx, (size_t)B * a.H * sizeof(float)))) return -1;
    mf__cu_fba_op_io(out, &x);
    return mf__cu_fba_run(ctx, "feedback_attention", &a, B, &x, 0);
}
static int mf__cu_fba_bwd(mf_ctx *ctx, mf_tensor *out) {
    mf__cu_fba a = mf__cu_fba_op_view(ctx, out);
    mf__cu_fba_io x;
    int B = out->shape[0];
    size_t rows = (size_t)B * a.H;
    mf__cu_fba_op_io(out, &x);
    x.dout = out->grad;
    x.dq = mf__g(out->src[0]); x.dk = mf__g(out->src[1]); x.dv = mf__g(out->src[2]); x.du = mf__g(out->src[3]);
    x.dr = mf__g(out->src[4]); x.ds = mf__g(out->src[5]);
    x.G = (float *)mf__cu_arena(ctx, rows * a.n * sizeof(float));
    x.Pr = (float *)mf__cu_arena(ctx, rows * a.n * sizeof(float));
    x.kg = (float *)mf__cu_arena(ctx, rows * a.d * sizeof(float));
    if (!x.G || !x.Pr || !x.kg) return -1;
    return mf__cu_fba_run(ctx, "feedback_attention (backward)", &a, B, &x, 1);
}

/* ---- the recurrence's small kernels ------------------------------------------------------------- */
/* softmax(w) [n] on the device (one thread: n = layers + 1), as the CPU */
static __global__ void mf__k_fb_softmax_w(float *sw, const float *w, int n) {
    if (threadIdx.x == 0 && blockIdx.x == 0) mf__fb_softmax_w(sw, w, n);
}
/* dw_l += sw_l (dsw_l - sum_j sw_j dsw_j) (softmax backward, one thread) */
static __global__ void mf__k_fb_softmax_w_bwd(float *gw, const float *sw, const float *dsw, int n) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    float dot = 0;
    int l;
    for (l = 0; l < n; l++) dot += sw[l] * dsw[l];
    for (l = 0; l < n; l++) gw[l] += sw[l] * (dsw[l] - dot);
}
/* step-major y [nt][B][D] = x [B][T][D] from step t0 (to_bt 0), or x step-major into y [B][T][D]
   (to_bt 1, add: +=); n = nt B D */
static __global__ void mf__k_fb_bt(float *y, const float *x, int B, int T, int D, int t0, long long n, int to_bt, int add) {
    MF__CU_LOOP(e, n) {
        long long tt = e / ((long long)B * D), b = (e / D) % B, c = e % D, bt = (b * T + t0 + tt) * D + c;
        if (!to_bt) y[e] = x[bt];
        else if (add) y[bt] += x[e];
        else y[bt] = x[e];
    }
}
/* y = (res ? res + : ) dropout(x) with the RNG counters base + e of the call's stream (those of
   mf__fb_dropout); p = 0: no dropout */
static __global__ void mf__k_fb_drop(float *y, const float *res, const float *x, long long n, float p,
                                     unsigned long long seed, unsigned long long stream, long long base) {
    MF__CU_LOOP(e, n) {
        float v = x[e];
        if (p > 0.0f) v = mf__drop_keep(seed, stream, (uint64_t)(base + e), p) ? v * (1.0f / (1.0f - p)) : 0.0f;
        y[e] = res ? res[e] + v : v;
    }
}
/* m_t = sum_l sw[l] hs[l] (hs[l] at l stride; n = B D) */
static __global__ void mf__k_fb_mem(float *mem, const float *hs, const float *sw, int nl, long long stride, long long n) {
    MF__CU_LOOP(e, n) {
        float acc = 0;
        for (int l = 0; l < nl; l++) acc += sw[l] * hs[l * stride + e];
        mem[e] = acc;
    }
}
/* dsw[l] += dm . hs[l] over n values; one block per l */
static __global__ void mf__k_fb_dsw(float *dsw, const float *dm, const float *hs, long long stride, long long n) {
    __shared__ float sh[32];
    const float *h = hs + blockIdx.x * stride;
    float s = 0;
    for (long long e = threadIdx.x; e < n; e += blockDim.x) s += dm[e] * h[e];
    s = mf__cu_bred(s, sh, 0);
    if (threadIdx.x == 0) dsw[blockIdx.x] += s;
}
/* dh [B][D] = dout[b][t] (+ sw[nl] dm when dm) */
static __global__ void mf__k_fb_dh(float *dh, const float *dout, const float *dm, const float *sw, int nl, int T, int D,
                                   int t, long long n) {
    MF__CU_LOOP(e, n) {
        long long b = e / D, c = e % D;
        float v = dout[(b * T + t) * D + c];
        if (dm) v += sw[nl] * dm[e];
        dh[e] = v;
    }
}
/* y += a[0] x (a on the device) */
static __global__ void mf__k_fb_axpy(float *y, const float *a, const float *x, long long n) {
    MF__CU_LOOP(e, n) y[e] += a[0] * x[e];
}

/* ---- forward ------------------------------------------------------------------------------------- */
#define MF__CU_FB_OP "feedback"
/* y = x [rows][in] W^T (+ b): cuBLAS and the bias kernel */
static int mf__cu_fb_linear(mf_ctx *ctx, const char *op, const float *x, const mf_tensor *w, const mf_tensor *b, int rows,
                            float *y) {
    int out = w->shape[0], in = w->shape[1];
    if (mf__cu_gemm(ctx, op, 0, 1, rows, out, in, x, 0, w->data, 0, 0.0f, y, 0, 1) < 0) return -1;
    return b ? MF__CU_RUN(ctx, op, mf__k_bias_add, MF__EW((long long)rows * out), y, (const float *)b->data,
                          (long long)rows * out, out) : 0;
}
/* y = (res +) dropout of the [B][w] block (site, l, t) of x */
static int mf__cu_fb_drop(mf_ctx *ctx, const char *op, const mf__fb_fwd *f, int site, int l, int t, float *y,
                          const float *res, const float *x, int w) {
    long long n = (long long)f->B * w;
    if (f->drop <= 0.0f && !res && y == x) return 0;
    return MF__CU_RUN(ctx, op, mf__k_fb_drop, MF__EW(n), y, res, x, n, f->drop, (unsigned long long)ctx->seed,
                      (unsigned long long)f->stream, (long long)mf__fb_drop_base(f, site, l, t));
}
/* the attention view of layer l at a step with n slots (the stack [nblk][cap][B][D]) */
static mf__cu_fba mf__cu_fb_view(const mf__fb_fwd *f, int l, int n) {
    const mf_model_config *c = &f->m->cfg;
    mf__cu_fba a;
    a.H = c->n_heads; a.d = c->d_model / c->n_heads; a.n = n; a.P = MF__FB_P; a.rb = f->T - n;
    a.sb = c->d_model; a.sh = a.d; a.sj = (long long)f->B * c->d_model; a.scale = 1.0f / sqrtf((float)a.d);
    a.drop = f->adrop; a.dld = f->nr; /* mf__fb_layer_attn's numbering */
    a.dbase = ((long long)l * f->T + (n - f->pos0)) * f->B * a.H * f->nr;
    return a;
}
static float *mf__cu_fb_slot(const mf__fb_fwd *f, float *stack, int blk, int n) {
    return stack + ((long long)blk * f->cap + n) * f->B * f->m->cfg.d_model;
}
static int mf__cu_fb_step(mf_ctx *ctx, mf__fb_fwd *f, int t) {
    const mf_model_config *c = &f->m->cfg;
    const char *op = MF__CU_FB_OP;
    int B = f->B, D = c->d_model, F = c->d_ff, N = c->n_layers, n = f->pos0 + t, l, i;
    long long bd = (long long)B * D;
    float *mem = f->mem + t * bd;
    for (l = 0; l < N; l++) {
        const mf__layer *L = &f->m->layers[l];
        const mf__fb_layer *A = MF__FB_L(f->m, l);
        float *x = MF__FB_AT(f, f->hs, l, t, D), *xm = MF__FB_AT(f, f->xm, l, t, D), *y = MF__FB_AT(f, f->hs, l + 1, t, D);
        float *y2 = MF__FB_AT(f, f->y2, l, t, D), *a1 = MF__FB_AT(f, f->a1, l, t, F), *g1 = MF__FB_AT(f, f->g1, l, t, F);
        if (n > 0) { /* x = x + drop(out(attention(q = LN_att(x) Wq^T, memory))) */
            float *z = MF__FB_AT(f, f->z, l, t, D), *q = MF__FB_AT(f, f->q, l, t, D), *o = MF__FB_AT(f, f->o, l, t, D);
            int kv = c->mixer == MF_MIXER_FEEDBACK ? 2 * l : 0;
            mf__cu_fba a = mf__cu_fb_view(f, l, n);
            mf__cu_fba_io io;
            memset(&io, 0, sizeof io);
            io.q = q; io.u = A->rel_u->data; io.r = A->rel_r->data; io.s = A->rel_s->data;
            io.k = mf__cu_fb_slot(f, f->slots, kv, 0); io.v = mf__cu_fb_slot(f, f->slots, kv + 1, 0);
            io.o = o; io.lse = MF__FB_AT(f, f->lse, l, t, c->n_heads);
            if (MF__CU_RUN(ctx, op, mf__k_layernorm, (unsigned)B, MF__CU_ROW, 0, z, 0, MF__FB_AT(f, f->st1, l, t, 2),
                           (const float *)x, 0, (const float *)L->ln1_w->data, (const float *)L->ln1_b->data, D, c->ln_eps) < 0 ||
                mf__cu_fb_linear(ctx, op, z, A->wq, NULL, B, q) < 0 || mf__cu_fba_run(ctx, op, &a, B, &io, 0) < 0 ||
                mf__cu_fb_linear(ctx, op, o, A->wo, A->bo, B, f->tmp) < 0 ||
                mf__cu_fb_drop(ctx, op, f, 0, l, t, xm, x, f->tmp, D) < 0)
                return -1;
        } else if (mf__cu_copy(ctx, xm, x, (size_t)bd * sizeof(float), MF__D2D) < 0) return -1; /* no memory yet */
        /* x = x + drop(fc2(drop(act(fc1(LN_ff(x)))))) */
        if (MF__CU_RUN(ctx, op, mf__k_layernorm, (unsigned)B, MF__CU_ROW, 0, y2, 0, MF__FB_AT(f, f->st2, l, t, 2),
                       (const float *)xm, 0, (const float *)L->ln2_w->data, (const float *)L->ln2_b->data, D, c->ln_eps) < 0 ||
            mf__cu_fb_linear(ctx, op, y2, L->fc1_w, L->fc1_b, B, a1) < 0 ||
            MF__CU_RUN(ctx, op, mf__k_unary, MF__EW((long long)B * F), g1, 0, (const float *)a1, 0, (long long)B * F,
                       mf__fb_act_kind(c->ffn_act), 0.0f) < 0 ||
            mf__cu_fb_drop(ctx, op, f, 1, l, t, g1, NULL, g1, F) < 0 ||
            mf__cu_fb_linear(ctx, op, g1, L->fc2_w, L->fc2_b, B, f->tmp) < 0 ||
            mf__cu_fb_drop(ctx, op, f, 2, l, t, y, xm, f->tmp, D) < 0)
            return -1;
    }
    /* m_t and its keys / values, written straight into slot n of every block */
    if (MF__CU_RUN(ctx, op, mf__k_fb_mem, MF__EW(bd), mem, (const float *)MF__FB_AT(f, f->hs, 0, t, D),
                   (const float *)f->sw, N + 1, (long long)f->T * bd, bd) < 0)
        return -1;
    if (t < f->T - 1 || f->gen)
        for (i = 0; i < mf__fb_nblk(f->m); i++) {
            mf_tensor *w, *bias;
            mf__fb_kv_block(f->m, i, &w, &bias);
            if (mf__cu_fb_linear(ctx, op, mem, w, bias, B, mf__cu_fb_slot(f, f->slots, i, n)) < 0) return -1;
        }
    return 0;
}
static int mf__cu_fb_fwd(mf_ctx *ctx, mf_tensor *out) {
    mf__fb_fwd *f = (mf__fb_fwd *)out->aux;
    const mf_model_config *c = &f->m->cfg;
    int B = f->B, T = f->T, D = c->d_model, N = c->n_layers, t;
    size_t tb = (size_t)T * B, fl = sizeof(float);
    const char *op = MF__CU_FB_OP;
    f->sw = (float *)mf__cu_arena(ctx, (size_t)(N + 1) * fl);
    mf__fb_alloc_steps(ctx, f);
    f->tmp = (float *)mf__cu_arena(ctx, (size_t)B * D * fl);
    if (!f->gen) f->slots = (float *)mf__cu_arena(ctx, (size_t)mf__fb_nblk(f->m) * tb * D * fl);
    if (!mf_ok(ctx)) return -1;
    if (MF__CU_RUN(ctx, op, mf__k_fb_softmax_w, 1, 32, 0, f->sw, (const float *)MF__FB_S(f->m)->w->data, N + 1) < 0 ||
        MF__CU_RUN(ctx, op, mf__k_fb_bt, MF__EW(tb * D), f->hs, (const float *)out->src[0]->data, B, T, D, 0,
                   (long long)(tb * D), 0, 0) < 0)
        return -1;
    for (t = 0; t < T; t++) /* the token loop: no host synchronisation (see the section comment) */
        if (mf__cu_fb_step(ctx, f, t) < 0) return -1;
    return MF__CU_RUN(ctx, op, mf__k_fb_bt, MF__EW(tb * D), out->data, (const float *)MF__FB_AT(f, f->hs, N, 0, D), B, T,
                      D, 0, (long long)(tb * D), 1, 0);
}

/* ---- backward ------------------------------------------------------------------------------------ */
typedef struct {
    float *slots;          /* [nblk][T][B][D] gradients of the slots' keys / values */
    float *rh, *sh;        /* [N][T][H][dk], [N][T][H] gradients of the tables' last T rows */
    float *q, *ao, *fo;    /* [N][T][B][D] d query, d attention branch, d FFN branch */
    float *a1;             /* [N][T][B][F] d FFN pre-activation */
    float *ln1, *ln2;      /* [N][T][B][D] d LN_att / LN_ff output (their gamma / beta at the end) */
    float *dsw;            /* [N + 1] d softmax(w) */
    float *dh, *dm, *dd;   /* [B][D] step scratch */
    float *df;             /* [B][F] step scratch */
    float *G, *Pr, *kg;    /* attention backward scratch [B H T], [B H T], [B H dk] */
} mf__cu_fb_grads;

/* dh += the LayerNorm backward (x rows of B, the LN's gamma, stats st) of dy */
static int mf__cu_fb_ln_bwd(mf_ctx *ctx, const char *op, float *dh, const float *x, const float *dy,
                            const mf_tensor *gm, const float *st, int B, int D) {
    return MF__CU_RUN(ctx, op, mf__k_layernorm_bwd_x, (unsigned)B, MF__CU_ROW, 0, dh, x, 0, dy,
                      (const float *)(gm ? gm->data : NULL), st, D);
}
static int mf__cu_fb_step_bwd(mf_ctx *ctx, const mf__fb_fwd *f, mf__cu_fb_grads *g, const float *dout, float *dx, int t) {
    const mf_model_config *c = &f->m->cfg;
    const char *op = MF__CU_FB_OP " (backward)";
    int B = f->B, T = f->T, D = c->d_model, F = c->d_ff, H = c->n_heads, N = c->n_layers, l, i, has_dm = t < T - 1;
    long long bd = (long long)B * D;
    if (has_dm) { /* the readers of slot t are done: dm_t = sum_blk dK|dV_t W_blk; dsw[l] += dm_t . hs_t[l] */
        for (i = 0; i < mf__fb_nblk(f->m); i++) {
            mf_tensor *w, *bias;
            mf__fb_kv_block(f->m, i, &w, &bias);
            if (mf__cu_gemm(ctx, op, 0, 0, B, D, D, g->slots + ((long long)i * T + t) * bd, 0, w->data, 0, i ? 1.0f : 0.0f,
                            g->dm, 0, 1) < 0)
                return -1;
        }
        if (MF__CU_RUN(ctx, op, mf__k_fb_dsw, (unsigned)(N + 1), MF__CU_ROW, 0, g->dsw, (const float *)g->dm,
                       (const float *)MF__FB_AT(f, f->hs, 0, t, D), (long long)T * bd, bd) < 0)
            return -1;
    }
    if (MF__CU_RUN(ctx, op, mf__k_fb_dh, MF__EW(bd), g->dh, dout, (const float *)(has_dm ? g->dm : NULL),
                   (const float *)f->sw, N, T, D, t, bd) < 0)
        return -1;
    for (l = N - 1; l >= 0; l--) {
        const mf__layer *L = &f->m->layers[l];
        const mf__fb_layer *A = MF__FB_L(f->m, l);
        float *fo = MF__FB_AT(f, g->fo, l, t, D), *da1 = MF__FB_AT(f, g->a1, l, t, F), *dln2 = MF__FB_AT(f, g->ln2, l, t, D);
        /* FFN: y = xm + drop(fc2(drop(act(a1)))), a1 = fc1(LN_ff(xm)) */
        if (mf__cu_fb_drop(ctx, op, f, 2, l, t, fo, NULL, g->dh, D) < 0 ||
            mf__cu_gemm(ctx, op, 0, 0, B, F, D, fo, 0, L->fc2_w->data, 0, 0.0f, g->df, 0, 1) < 0 ||
            mf__cu_fb_drop(ctx, op, f, 1, l, t, g->df, NULL, g->df, F) < 0 ||
            MF__CU_RUN(ctx, op, mf__k_unary_bwd, MF__EW((long long)B * F), da1, (const float *)MF__FB_AT(f, f->a1, l, t, F),
                       0, (const float *)MF__FB_AT(f, f->g1, l, t, F), 0, (const float *)g->df, (long long)B * F,
                       mf__fb_act_kind(c->ffn_act), 0.0f) < 0 ||
            mf__cu_gemm(ctx, op, 0, 0, B, D, F, da1, 0, L->fc1_w->data, 0, 0.0f, dln2, 0, 1) < 0 ||
            mf__cu_fb_ln_bwd(ctx, op, g->dh, MF__FB_AT(f, f->xm, l, t, D), dln2, L->ln2_w, MF__FB_AT(f, f->st2, l, t, 2), B, D) < 0)
            return -1;
        if (t > 0) { /* attention: xm = x + drop(out(o)), o = attention(q = LN_att(x) Wq^T) */
            float *ao = MF__FB_AT(f, g->ao, l, t, D), *dq = MF__FB_AT(f, g->q, l, t, D), *dln1 = MF__FB_AT(f, g->ln1, l, t, D);
            int kv = c->mixer == MF_MIXER_FEEDBACK ? 2 * l : 0;
            mf__cu_fba a = mf__cu_fb_view(f, l, t);
            mf__cu_fba_io io;
            memset(&io, 0, sizeof io);
            io.q = MF__FB_AT(f, f->q, l, t, D); io.u = A->rel_u->data; io.r = A->rel_r->data; io.s = A->rel_s->data;
            io.k = mf__cu_fb_slot(f, f->slots, kv, 0); io.v = mf__cu_fb_slot(f, f->slots, kv + 1, 0);
            io.o = MF__FB_AT(f, f->o, l, t, D); io.lse = MF__FB_AT(f, f->lse, l, t, H);
            io.dout = g->dd; io.dq = dq; io.du = mf__g(A->rel_u);
            io.dk = g->slots + (long long)kv * T * bd; io.dv = g->slots + (long long)(kv + 1) * T * bd;
            io.dr = g->rh + (long long)l * T * D; io.ds = g->sh + (long long)l * T * H;
            io.G = g->G; io.Pr = g->Pr; io.kg = g->kg;
            if (mf__cu_fb_drop(ctx, op, f, 0, l, t, ao, NULL, g->dh, D) < 0 ||
                mf__cu_gemm(ctx, op, 0, 0, B, D, D, ao, 0, A->wo->data, 0, 0.0f, g->dd, 0, 1) < 0 ||
                mf__cu_fba_run(ctx, op, &a, B, &io, 1) < 0 ||
                mf__cu_gemm(ctx, op, 0, 0, B, D, D, dq, 0, A->wq->data, 0, 0.0f, dln1, 0, 1) < 0 ||
                mf__cu_fb_ln_bwd(ctx, op, g->dh, MF__FB_AT(f, f->hs, l, t, D), dln1, L->ln1_w, MF__FB_AT(f, f->st1, l, t, 2), B, D) < 0)
                return -1;
        }
        if (has_dm && MF__CU_RUN(ctx, op, mf__k_fb_axpy, MF__EW(bd), g->dh, (const float *)(f->sw + l), (const float *)g->dm, bd) < 0)
            return -1; /* hs_t[l] also feeds m_t */
    }
    return dx ? MF__CU_RUN(ctx, op, mf__k_fb_bt, MF__EW(bd), dx, (const float *)g->dh, B, T, D, t, bd, 1, 1) : 0;
}
/* dW += dY^T X over rows (one GEMM), db += column sums (mf__cu_colsum_add) */
static int mf__cu_fb_wgrad(mf_ctx *ctx, mf_tensor *w, mf_tensor *b, const float *dy, const float *x, int rows) {
    const char *op = MF__CU_FB_OP " (backward)";
    int out = w->shape[0], in = w->shape[1];
    float *gw = mf__g(w), *gb = mf__g(b);
    if (rows <= 0) return 0;
    if (gw && mf__cu_gemm(ctx, op, 1, 0, out, in, rows, dy, 0, x, 0, 1.0f, gw, 0, 1) < 0) return -1;
    return gb ? mf__cu_colsum_add(ctx, op, gb, dy, (long long)rows, out) : 0;
}
/* LayerNorm gamma / beta of rows x [rows][D] with output gradients dy and stats st */
static int mf__cu_fb_ln_wgrad(mf_ctx *ctx, const mf_tensor *gm, const mf_tensor *bt, const float *x, const float *dy,
                              const float *st, int rows, int D) {
    float *dg = mf__g(gm), *db = mf__g(bt);
    if (rows <= 0 || (!dg && !db)) return 0;
    return mf__cu_layernorm_bwd_gb(ctx, MF__CU_FB_OP " (backward)", dg, db, x, 0, dy, st, (long long)rows, D);
}
/* the weight gradients of all steps at once */
static int mf__cu_fb_weights_bwd(mf_ctx *ctx, const mf__fb_fwd *f, const mf__cu_fb_grads *g) {
    mf_model *m = f->m;
    const mf_model_config *c = &m->cfg;
    int B = f->B, T = f->T, D = c->d_model, F = c->d_ff, H = c->n_heads, N = c->n_layers, l, i;
    long long tb = (long long)T * B, bd = (long long)B * D;
    int r0 = (int)tb, r1 = (int)(tb - B); /* rows of all steps, of steps 1 .. T-1 */
    const char *op = MF__CU_FB_OP " (backward)";
    for (l = 0; l < N; l++) {
        const mf__layer *L = &m->layers[l];
        const mf__fb_layer *A = MF__FB_L(m, l);
        long long at = (long long)l * tb * D, af = (long long)l * tb * F, as = (long long)l * tb * 2;
        float *gr = mf__g(A->rel_r), *gs = mf__g(A->rel_s);
        if (mf__cu_fb_wgrad(ctx, A->wq, NULL, g->q + at + bd, f->z + at + bd, r1) < 0 ||
            mf__cu_fb_wgrad(ctx, A->wo, A->bo, g->ao + at + bd, f->o + at + bd, r1) < 0 ||
            mf__cu_fb_wgrad(ctx, L->fc1_w, L->fc1_b, g->a1 + af, f->y2 + at, r0) < 0 ||
            mf__cu_fb_wgrad(ctx, L->fc2_w, L->fc2_b, g->fo + at, f->g1 + af, r0) < 0 ||
            mf__cu_fb_ln_wgrad(ctx, L->ln2_w, L->ln2_b, f->xm + at, g->ln2 + at, f->st2 + as, r0, D) < 0 ||
            mf__cu_fb_ln_wgrad(ctx, L->ln1_w, L->ln1_b, f->hs + at + bd, g->ln1 + at + bd, f->st1 + as + 2 * B, r1, D) < 0)
            return -1;
        if (gr && MF__CU_RUN(ctx, op, mf__k_add_to, MF__EW((long long)T * D), gr + (long long)(MF__FB_P - T) * D,
                             (const float *)(g->rh + (long long)l * T * D), (long long)T * D) < 0)
            return -1;
        if (gs && MF__CU_RUN(ctx, op, mf__k_add_to, MF__EW((long long)T * H), gs + (long long)(MF__FB_P - T) * H,
                             (const float *)(g->sh + (long long)l * T * H), (long long)T * H) < 0)
            return -1;
    }
    for (i = 0; i < mf__fb_nblk(m); i++) { /* slots 0 .. T-2 are read */
        mf_tensor *w, *bias;
        mf__fb_kv_block(m, i, &w, &bias);
        if (mf__cu_fb_wgrad(ctx, w, bias, g->slots + (long long)i * tb * D, f->mem, r1) < 0) return -1;
    }
    return mf__g(MF__FB_S(m)->w) ? MF__CU_RUN(ctx, op, mf__k_fb_softmax_w_bwd, 1, 32, 0, mf__g(MF__FB_S(m)->w), (const float *)f->sw,
                                       (const float *)g->dsw, N + 1) : 0;
}
static int mf__cu_fb_bwd(mf_ctx *ctx, mf_tensor *out) {
    const mf__fb_fwd *f = (const mf__fb_fwd *)out->aux;
    const mf_model_config *c = &f->m->cfg;
    int B = f->B, T = f->T, D = c->d_model, F = c->d_ff, H = c->n_heads, N = c->n_layers, t;
    size_t tb = (size_t)T * B, fl = sizeof(float), nd = N * tb * D * fl;
    mf__cu_fb_grads g;
    if (f->gen || f->pos0 != 0) return (mf__fail(ctx, "feedback: generation steps have no backward"), -1);
    g.slots = (float *)mf__cu_arena(ctx, (size_t)mf__fb_nblk(f->m) * tb * D * fl);
    g.rh = (float *)mf__cu_arena(ctx, (size_t)N * T * D * fl);
    g.sh = (float *)mf__cu_arena(ctx, (size_t)N * T * H * fl);
    g.q = (float *)mf__cu_arena(ctx, nd);
    g.ao = (float *)mf__cu_arena(ctx, nd);
    g.fo = (float *)mf__cu_arena(ctx, nd);
    g.ln1 = (float *)mf__cu_arena(ctx, nd);
    g.ln2 = (float *)mf__cu_arena(ctx, nd);
    g.a1 = (float *)mf__cu_arena(ctx, N * tb * F * fl);
    g.dsw = (float *)mf__cu_arena(ctx, (size_t)(N + 1) * fl);
    g.dh = (float *)mf__cu_arena(ctx, (size_t)B * D * fl);
    g.dm = (float *)mf__cu_arena(ctx, (size_t)B * D * fl);
    g.dd = (float *)mf__cu_arena(ctx, (size_t)B * D * fl);
    g.df = (float *)mf__cu_arena(ctx, (size_t)B * F * fl);
    g.G = (float *)mf__cu_arena(ctx, tb * H * fl);
    g.Pr = (float *)mf__cu_arena(ctx, tb * H * fl);
    g.kg = (float *)mf__cu_arena(ctx, (size_t)B * D * fl);
    if (!mf_ok(ctx)) return -1;
    /* zeroed once: the slot, table and dsw gradients accumulate over the steps; dq and da1 are
       added into once per (layer, step) */
    if (mf__cu_zero(ctx, g.slots, (size_t)mf__fb_nblk(f->m) * tb * D * fl) < 0 ||
        mf__cu_zero(ctx, g.rh, (size_t)N * T * D * fl) < 0 || mf__cu_zero(ctx, g.sh, (size_t)N * T * H * fl) < 0 ||
        mf__cu_zero(ctx, g.q, nd) < 0 || mf__cu_zero(ctx, g.a1, N * tb * F * fl) < 0 ||
        mf__cu_zero(ctx, g.dsw, (size_t)(N + 1) * fl) < 0)
        return -1;
    for (t = T - 1; t >= 0; t--) /* the token loop in reverse: no host synchronisation */
        if (mf__cu_fb_step_bwd(ctx, f, &g, out->grad, mf__g(out->src[0]), t) < 0) return -1;
    return mf__cu_fb_weights_bwd(ctx, f, &g);
}
#endif /* METAFORMER_NO_FEEDBACK */

/* ==== [cu:optim] ============================================================================ */
/* The optimizers and clipping over the flat buffers. */
/* a parameter's range of the flat buffers [off, off + n), and its place [start, start + n) in the
   segments laid end to end (mf__cu_put_segs sets start) */
typedef struct { long long off, n, start; float step, rc2, decay, lr; int first; } mf__cu_seg;
/* element e of the segments laid end to end: its segment *s (which only moves forward, as e grows:
   a thread's first element bisects, the next ones step) and its index *k in the flat buffers; 0
   past the end */
static __device__ int mf__cu_seg_at(const mf__cu_seg *segs, int nseg, long long e, int *s, long long *k) {
    if (*s == 0) { /* the first segment whose end is past e (the ends never decrease) */
        int lo = 0, hi = nseg;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (e >= segs[mid].start + segs[mid].n) lo = mid + 1;
            else hi = mid;
        }
        *s = lo;
    }
    while (*s < nseg && e >= segs[*s].start + segs[*s].n) (*s)++;
    if (*s >= nseg) return 0;
    *k = segs[*s].off + (e - segs[*s].start);
    return 1;
}
/* every element k of every segment s, grid-stride over all of them together: one thread per element
   whatever the sizes (a grid per segment would leave most of its threads idle on the small ones) */
#define MF__CU_SEG_LOOP(s, k, segs, nseg) \
    for (int s = 0, mf__once = 1; mf__once; mf__once = 0) \
        for (long long mf__e = (long long)blockIdx.x * blockDim.x + threadIdx.x, k = 0; \
             mf__cu_seg_at((segs), (nseg), mf__e, &s, &k); mf__e += (long long)gridDim.x * blockDim.x)
static __global__ void mf__k_nonzero(const float *g, const mf__cu_seg *segs, int nseg, int *flag) {
    MF__CU_SEG_LOOP(s, k, segs, nseg) if (g[k] != 0.0f) flag[s] = 1;
}
/* m, v hold the moments of the flat buffer's floats [mo, ...) (ZeRO-1: the rank's shard; else mo 0) */
static __global__ void mf__k_optimizer(float *w, const float *g, float *m, float *v, long long mo, const mf__cu_seg *segs,
                                       int nseg, int kind, float b1, float b2, float eps, float wd, float mu, int nesterov) {
    MF__CU_SEG_LOOP(s, k, segs, nseg) {
        const mf__cu_seg *sg = &segs[s];
        long long q = k - mo; /* the moments' index */
        if (kind == MF_OPT_ADAM || kind == MF_OPT_ADAMW) {
            float gk = g[k] + (kind == MF_OPT_ADAM ? wd * w[k] : 0.0f);
            w[k] *= sg->decay;
            m[q] = b1 * m[q] + (1.0f - b1) * gk;
            v[q] = b2 * v[q] + (1.0f - b2) * gk * gk;
            w[k] -= sg->step * m[q] / (sqrtf(v[q]) * sg->rc2 + eps);
        } else if (kind == MF_OPT_ADAM_LABML) {
            w[k] *= sg->decay;
            m[q] = b1 * m[q] + (1.0f - b1) * g[k];
            v[q] = b2 * v[q] + (1.0f - b2) * g[k] * g[k];
            w[k] -= sg->step * m[q] / (sqrtf(v[q]) + eps);
        } else {
            float gk = g[k] + wd * w[k];
            if (mu > 0) {
                m[q] = sg->first ? gk : mu * m[q] + gk;
                gk = nesterov ? gk + mu * m[q] : m[q];
            }
            w[k] -= sg->lr * gk;
        }
    }
}
/* partial[blockIdx.x] = sum of g^2 over the segments this block visits (fixed order) */
static __global__ void mf__k_sumsq(const float *g, const mf__cu_seg *segs, int nseg, double *partial) {
    __shared__ double sh[32];
    double s = 0;
    for (int q = 0; q < nseg; q++)
        for (long long k = segs[q].off + (long long)blockIdx.x * blockDim.x + threadIdx.x; k < segs[q].off + segs[q].n;
             k += (long long)gridDim.x * blockDim.x)
            s += (double)g[k] * g[k];
    s = mf__cu_bred(s, sh, 0);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}
static __global__ void mf__k_scale_segs(float *g, const mf__cu_seg *segs, int nseg, float f) {
    MF__CU_SEG_LOOP(s, k, segs, nseg) g[k] *= f;
}
/* the grid of MF__CU_SEG_LOOP kernels over `total` elements */
static unsigned mf__cu_seg_grid(long long total) {
    long long g = (total + MF__CU_BS - 1) / MF__CU_BS;
    return (unsigned)(g > 1024 ? 1024 : g < 1 ? 1 : g);
}
/* number the segments end to end (start), upload the table to the scratch (after `extra` bytes kept
   for the caller); *total = their element count */
static mf__cu_seg *mf__cu_put_segs(mf_ctx *ctx, mf__cu_seg *h, int n, size_t extra, long long *total) {
    char *d = (char *)mf__cu_scratch(ctx, extra + (size_t)(n ? n : 1) * sizeof(mf__cu_seg));
    int i;
    for (*total = 0, i = 0; i < n; i++) { h[i].start = *total; *total += h[i].n; }
    if (!d || mf__cu_copy(ctx, d + extra, h, (size_t)n * sizeof(mf__cu_seg), MF__H2D) < 0) return NULL;
    return (mf__cu_seg *)(d + extra);
}

/* the part of segment sg inside the flat buffer's [lo, hi); its element count (0: none) */
static long long mf__cu_seg_clip(mf__cu_seg *sg, long long lo, long long hi) {
    long long a = sg->off > lo ? sg->off : lo, b = sg->off + sg->n < hi ? sg->off + sg->n : hi;
    sg->off = a;
    sg->n = b > a ? b - a : 0;
    return sg->n;
}

/* the trainable parameters' parts inside the flat floats [lo, hi) as segments on the device, after
   `extra` bytes of scratch kept for the caller; *n segments (0: none, NULL returned), *total elements */
static mf__cu_seg *mf__cu_grad_segs(mf_ctx *ctx, int64_t lo, int64_t hi, size_t extra, int *n, long long *total) {
    mf__cu_seg *hs;
    int i;
    *n = 0; *total = 0;
    if (!(hs = (mf__cu_seg *)mf__cu_host(ctx, (size_t)(ctx->n_params + 1) * sizeof(mf__cu_seg)))) return NULL;
    for (i = 0; i < ctx->n_params; i++) {
        const mf_tensor *p = ctx->params[i];
        if (!p->requires_grad) continue;
        memset(&hs[*n], 0, sizeof hs[*n]);
        hs[*n].off = p->offset; hs[*n].n = p->ne;
        if (mf__cu_seg_clip(&hs[*n], lo, hi) > 0) (*n)++;
    }
    return *n ? mf__cu_put_segs(ctx, hs, *n, extra, total) : NULL;
}
/* clipping's sum of squares over [lo, hi) (in double, in a fixed order); -1 on error */
static double mf__cu_grad_sumsq(mf_ctx *ctx, int64_t lo, int64_t hi) {
    mf__cu_seg *ds;
    int n;
    long long total;
    double ss = 0, *partial;
    size_t head = (MF__CU_RED_BLOCKS + 1) * sizeof(double);
    unsigned nb;
    if (!(ds = mf__cu_grad_segs(ctx, lo, hi, head, &n, &total))) return n == 0 && mf_ok(ctx) ? 0.0 : -1.0;
    partial = (double *)((char *)ds - head);
    nb = mf__cu_seg_grid(total); /* a block per 256 values, at most MF__CU_RED_BLOCKS */
    if (nb > MF__CU_RED_BLOCKS) nb = MF__CU_RED_BLOCKS;
    if (MF__CU_RUN(ctx, "mf_clip_grad_norm", mf__k_sumsq, nb, MF__CU_BS, 0, (const float *)ctx->p_grad,
                   (const mf__cu_seg *)ds, n, partial) < 0 ||
        MF__CU_RUN(ctx, "mf_clip_grad_norm", mf__k_reduce_end, 1, 32, 0, (const double *)partial, (int)nb, 1.0,
                   (float *)NULL, partial + MF__CU_RED_BLOCKS) < 0 ||
        mf__cu_copy(ctx, &ss, partial + MF__CU_RED_BLOCKS, sizeof ss, MF__D2H) < 0)
        return -1.0;
    return ss;
}
static int mf__cu_grad_scale(mf_ctx *ctx, int64_t lo, int64_t hi, float f) {
    mf__cu_seg *ds;
    int n;
    long long total;
    if (!(ds = mf__cu_grad_segs(ctx, lo, hi, 0, &n, &total))) return n == 0 && mf_ok(ctx) ? 0 : -1;
    return MF__CU_RUN(ctx, "mf_clip_grad_norm", mf__k_scale_segs, mf__cu_seg_grid(total), MF__CU_BS, 0, ctx->p_grad,
                      (const mf__cu_seg *)ds, n, f);
}

/* The optimizer step over the flat buffers; with ctx->mom_n > 0 (ZeRO-1, [mf:dist]) over the rank's
   shard [mom_lo, mom_lo + mom_n) only, whose moments the moment buffers hold. Every parameter's step
   count advances either way, so the ranks agree on the bias corrections. */
static int mf__cu_optimizer_step(mf_ctx *ctx, const mf_optimizer *o) {
    mf__cu_seg *hs, *ds;
    int i, n = 0, nq = 0, *flags = NULL;
    long long total;
    float b1 = o->beta1, b2 = o->beta2;
    const char *what = "mf_optimizer_step";
    size_t fbytes = (size_t)(ctx->n_params + 1) * sizeof(int);
    if (!(hs = (mf__cu_seg *)mf__cu_host(ctx, (size_t)(ctx->n_params + 1) * (sizeof(mf__cu_seg) + sizeof(int)))))
        return -1;
    flags = (int *)(hs + ctx->n_params + 1);
    /* parameters no backward reached: do they hold a non-zero gradient? (one kernel, one copy) */
    for (i = 0; i < ctx->n_params; i++) {
        const mf_tensor *p = ctx->params[i];
        if (!p->requires_grad || ctx->p_touched[i]) continue;
        memset(&hs[nq], 0, sizeof hs[nq]);
        hs[nq].off = p->offset; hs[nq].n = p->ne;
        nq++;
    }
    if (nq) {
        int *dflags;
        size_t extra = (fbytes + 255) & ~(size_t)255;
        if (!(ds = mf__cu_put_segs(ctx, hs, nq, extra, &total))) return -1;
        dflags = (int *)((char *)ds - extra);
        if (mf__cu_zero(ctx, dflags, (size_t)nq * sizeof(int)) < 0 ||
            MF__CU_RUN(ctx, what, mf__k_nonzero, mf__cu_seg_grid(total), MF__CU_BS, 0, (const float *)ctx->p_grad,
                       (const mf__cu_seg *)ds, nq, dflags) < 0 ||
            mf__cu_copy(ctx, flags, dflags, (size_t)nq * sizeof(int), MF__D2H) < 0)
            return -1;
    }
    ctx->opt_t++;
    for (i = 0, nq = 0; i < ctx->n_params; i++) {
        const mf_tensor *p = ctx->params[i];
        mf__cu_seg *sg;
        int64_t t;
        float lr, c1, c2;
        if (!p->requires_grad) continue;
        if (!ctx->p_touched[i] && !flags[nq++]) continue; /* no gradient this step: skipped */
        sg = &hs[n++];
        memset(sg, 0, sizeof *sg);
        t = ++ctx->p_steps[i];
        lr = mf_schedule_lr(&o->schedule, o->kind == MF_OPT_ADAM_LABML ? t : ctx->opt_t);
        c1 = (float)(1.0 - pow(b1, (double)t));
        c2 = (float)(1.0 - pow(b2, (double)t));
        sg->off = p->offset; sg->n = p->ne; sg->lr = lr; sg->first = t == 1;
        if (ctx->mom_n > 0 && mf__cu_seg_clip(sg, ctx->mom_lo, ctx->mom_lo + ctx->mom_n) == 0) { n--; continue; }
        if (o->kind == MF_OPT_ADAM || o->kind == MF_OPT_ADAMW) {
            sg->step = lr / c1; sg->rc2 = 1.0f / sqrtf(c2);
            sg->decay = o->kind == MF_OPT_ADAMW ? 1.0f - lr * o->weight_decay : 1.0f;
        } else if (o->kind == MF_OPT_ADAM_LABML) {
            sg->step = lr * sqrtf(c2) / c1; sg->decay = 1.0f - o->schedule.lr * o->weight_decay;
        }
    }
    if (n == 0) return 0;
    if (!(ds = mf__cu_put_segs(ctx, hs, n, 0, &total))) return -1;
    mf__cu_params_changed(ctx);
    return MF__CU_RUN(ctx, what, mf__k_optimizer, mf__cu_seg_grid(total), MF__CU_BS, 0, ctx->p_data,
                      (const float *)ctx->p_grad, ctx->p_m, ctx->p_v, (long long)(ctx->mom_n > 0 ? ctx->mom_lo : 0),
                      (const mf__cu_seg *)ds, n, (int)o->kind, b1, b2, o->eps, o->weight_decay, o->momentum, o->nesterov);
}

/* ==== [cu:backend] ========================================================================== */
/* every op of metaformer.h and its CUDA forward / backward */
/* bf16: the op's kernels read and write bf16 values where a tensor's bf16 says so (mf__cu_ld / _st);
   the other ops see floats (mf__cu_dispatch widens and narrows for them) */
static const struct { const mf__op *op; mf__cu_fn fwd, bwd; int bf16; } mf__cu_ops[] = {
    {&mf__op_matmul, mf__cu_matmul_fwd, mf__cu_matmul_bwd, 0},
    {&mf__op_head_matmul, mf__cu_head_matmul_fwd, mf__cu_head_matmul_bwd, 0},
    {&mf__op_linear, mf__cu_linear_fwd, mf__cu_linear_bwd, 1},
    {&mf__op_add, mf__cu_binary_fwd, mf__cu_binary_bwd, 1},
    {&mf__op_sub, mf__cu_binary_fwd, mf__cu_binary_bwd, 1},
    {&mf__op_mul, mf__cu_binary_fwd, mf__cu_binary_bwd, 1},
    {&mf__op_scale, mf__cu_unary_fwd, mf__cu_unary_bwd, 1},
    {&mf__op_relu, mf__cu_unary_fwd, mf__cu_unary_bwd, 1},
    {&mf__op_gelu, mf__cu_unary_fwd, mf__cu_unary_bwd, 1},
    {&mf__op_sigmoid, mf__cu_unary_fwd, mf__cu_unary_bwd, 1},
    {&mf__op_silu, mf__cu_unary_fwd, mf__cu_unary_bwd, 1},
    {&mf__op_exp, mf__cu_unary_fwd, mf__cu_unary_bwd, 1},
    {&mf__op_softmax, mf__cu_softmax_fwd, mf__cu_softmax_bwd, 0},
    {&mf__op_log_softmax, mf__cu_log_softmax_fwd, mf__cu_log_softmax_bwd, 0},
    {&mf__op_cross_entropy, mf__cu_ce_fwd, mf__cu_ce_bwd, 1},
    {&mf__op_mse, mf__cu_mse_fwd, mf__cu_mse_bwd, 0},
    {&mf__op_layernorm, mf__cu_layernorm_fwd, mf__cu_layernorm_bwd, 1},
    {&mf__op_embedding, mf__cu_embedding_fwd, mf__cu_embedding_bwd, 0},
    {&mf__op_dropout, mf__cu_dropout_fwd, mf__cu_dropout_bwd, 1},
    {&mf__op_reshape, mf__cu_nop, mf__cu_reshape_bwd, 1}, /* a view: no values read or written */
    {&mf__op_permute, mf__cu_permute_fwd, mf__cu_permute_bwd, 0},
    {&mf__op_concat, mf__cu_concat_fwd, mf__cu_concat_bwd, 0},
    {&mf__op_slice, mf__cu_slice_fwd, mf__cu_slice_bwd, 0},
    {&mf__op_roll, mf__cu_roll_fwd, mf__cu_roll_bwd, 0},
    {&mf__op_sum, mf__cu_reduce_fwd, mf__cu_reduce_bwd, 0},
    {&mf__op_mean, mf__cu_reduce_fwd, mf__cu_reduce_bwd, 0},
    {&mf__op_sum_axis, mf__cu_sum_axis_fwd, mf__cu_sum_axis_bwd, 0},
    {&mf__op_conv1d, mf__cu_conv1d_fwd, mf__cu_conv1d_bwd, 0},
    {&mf__op_avg_pool, mf__cu_avg_pool_fwd, mf__cu_avg_pool_bwd, 0},
    {&mf__op_avg_pool_sub, mf__cu_avg_pool_fwd, mf__cu_avg_pool_bwd, 0},
    {&mf__op_attention, mf__cu_attention_fwd, mf__cu_attention_bwd, 1},
    {&mf__op_elu1, mf__cu_unary_fwd, mf__cu_unary_bwd, 1},
    {&mf__op_reciprocal, mf__cu_unary_fwd, mf__cu_unary_bwd, 1},
#ifndef METAFORMER_NO_XL
    /* xl: Transformer-XL relative attention ([cu:xl]) */
    {&mf__op_rel_attention, mf__cu_rel_attention_fwd, mf__cu_rel_attention_bwd, 0},
#endif
#ifndef METAFORMER_NO_FASTWEIGHTS
    /* fastweights ([cu:fastweights]) */
    {&mf__op_dpfp, mf__cu_dpfp_fwd, mf__cu_dpfp_bwd, 0},
    {&mf__op_fast_weights, mf__cu_fw_fwd, mf__cu_fw_bwd, 0},
    {&mf__op_linear_attention, mf__cu_fw_fwd, mf__cu_fw_bwd, 0},
#endif
#ifndef METAFORMER_NO_FEEDBACK
    /* feedback ([cu:feedback]) */
    {&mf__op_feedback_attention, mf__cu_fba_fwd, mf__cu_fba_bwd, 0},
    {&mf__op_feedback, mf__cu_fb_fwd, mf__cu_fb_bwd, 0},
#endif
};
static int mf__cu_dispatch(mf_ctx *ctx, mf_tensor *out, int backward) {
    size_t i;
    for (i = 0; i < sizeof mf__cu_ops / sizeof mf__cu_ops[0]; i++)
        if (mf__cu_ops[i].op == out->op) {
            mf__cu_floats fl;
            mf__cu *cu = MF__CU(ctx);
            const mf_tensor *outer = cu->cur; /* an op run inside another (none today) names itself */
            int wide = !mf__cu_ops[i].bf16 && mf__cu_has_bf16(out), r = 0, outer_bwd = cu->cur_bwd;
            cu->cur = out; cu->cur_bwd = backward;
            if (wide && mf__cu_floats_begin(ctx, out, backward, &fl) < 0) r = -1;
            else {
                r = backward ? mf__cu_ops[i].bwd(ctx, out) : mf__cu_ops[i].fwd(ctx, out);
                if (wide) r = mf__cu_floats_end(ctx, &fl, r);
            }
            cu->cur = outer; cu->cur_bwd = outer_bwd;
            return r < 0 || !mf_ok(ctx) ? -1 : 0;
        }
    mf__fail(ctx, "%s: this op has no CUDA kernel; run it on a CPU context (mf_ctx_set_device(ctx, MF_DEVICE_CPU))",
             out->op->name);
    return -1;
}
static int mf__cu_forward(mf_ctx *ctx, mf_tensor *out) { return mf__cu_dispatch(ctx, out, 0); }
static int mf__cu_backward(mf_ctx *ctx, mf_tensor *out) { return mf__cu_dispatch(ctx, out, 1); }

/* ---- the backend and device selection ------------------------------------------------------ */
static void mf__cu_destroy(mf_ctx *ctx) {
    mf__cu *cu = MF__CU(ctx);
    if (!cu) return;
    mf__cu_blocks_free(ctx, cu->blocks);
    mf__cu_dfree(ctx, cu->scratch);
    mf__cu_dfree(ctx, cu->wbf);
    mf__cu_dfree(ctx, cu->gemm_bf);
    mf__cu_dfree(ctx, cu->wide);
    ctx->aux_bytes = 0;
    if (cu->blas) cublasDestroy(cu->blas);
    if (cu->stream) cudaStreamDestroy(cu->stream);
    MF_FREE(cu->host);
    MF_FREE(cu);
    ctx->be_state = NULL;
}

static int mf__cu_sync(mf_ctx *ctx) {
    return MF_CUDA_CHECK(ctx, "waiting for the device", cudaStreamSynchronize(MF__CU(ctx)->stream));
}

static const mf__backend mf__cuda_backend = {
    mf__cu_dalloc, mf__cu_dfree, mf__cu_arena, mf__cu_reset, mf__cu_copy, mf__cu_zero,
    mf__cu_forward, mf__cu_backward, mf__cu_optimizer_step, mf__cu_grad_sumsq, mf__cu_grad_scale, mf__cu_destroy,
    mf__cu_bf16_storage, mf__cu_sync,
};

MFDEF int mf_ctx_set_device(mf_ctx *ctx, mf_device dev) {
    mf__cu *cu;
    int n = 0;
    cudaError_t e;
    if (!mf_ok(ctx)) return -1;
    if (dev != MF_DEVICE_CPU && dev != MF_DEVICE_CUDA)
        return (mf__fail(ctx, "mf_ctx_set_device: unknown device %d (MF_DEVICE_CPU or MF_DEVICE_CUDA)", (int)dev), -1);
    if ((dev == MF_DEVICE_CUDA) == (ctx->be != NULL)) return 0;
    if (ctx->n_params > 0 || ctx->p_data || ctx->act_used > 0 || ctx->tape_len > 0)
        return (mf__fail(ctx, "mf_ctx_set_device: the context already holds %d parameters and %zu bytes of activations; "
                         "choose the device right after mf_ctx_new, before creating any tensor", ctx->n_params,
                         ctx->act_used), -1);
    if (dev == MF_DEVICE_CPU) {
        mf__cu_destroy(ctx);
        ctx->be = NULL;
        return 0;
    }
    e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        return (mf__fail(ctx, "mf_ctx_set_device: no CUDA device: %s (run on the CPU, or on a machine with an NVIDIA GPU "
                         "and driver)", e != cudaSuccess ? cudaGetErrorString(e) : "the machine has no GPU"), -1);
    }
    if (!(cu = (mf__cu *)mf__xmalloc(sizeof(mf__cu)))) return (mf__fail(ctx, "out of memory: CUDA backend"), -1);
    memset(cu, 0, sizeof *cu);
    cu->bf16_slice = MF__CU_BF16_SLICE;
    ctx->be_state = cu;
    if (MF_CUDA_CHECK(ctx, "mf_ctx_set_device", cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking)) < 0 ||
        MF_CUBLAS_CHECK(ctx, "mf_ctx_set_device", cublasCreate(&cu->blas)) < 0 ||
        MF_CUBLAS_CHECK(ctx, "mf_ctx_set_device", cublasSetStream(cu->blas, cu->stream)) < 0 ||
        MF_CUBLAS_CHECK(ctx, "mf_ctx_set_device", cublasSetMathMode(cu->blas, CUBLAS_DEFAULT_MATH)) < 0) {
        mf__cu_destroy(ctx);
        return -1;
    }
    { /* what the attention kernels may use: TF32 tensor cores, opt-in shared memory */
        int dev = 0, major = 0, optin = 0;
        if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
            (void)cudaGetLastError();
            major = 0; optin = 0;
        }
        cu->tc_tf32 = major >= 8;
        cu->smem_optin = optin > 48 * 1024 ? optin : 48 * 1024;
    }
    ctx->be = &mf__cuda_backend;
    return 0;
}

/* mf_ctx_set_precision on a CUDA context */
static int mf__cu_set_precision(mf_ctx *ctx, mf_precision p) {
    if (!mf_ok(ctx)) return -1;
    if (p != MF_PREC_FP32 && p != MF_PREC_TF32 && p != MF_PREC_BF16)
        return (mf__fail(ctx, "mf_ctx_set_precision: unknown precision %d (MF_PREC_FP32, MF_PREC_TF32 or MF_PREC_BF16)",
                         (int)p), -1);
    if (p == MF_PREC_BF16 && !MF__CU(ctx)->tc_tf32)
        return (mf__fail(ctx, "mf_ctx_set_precision: bf16 needs a GPU with bf16 tensor cores (compute capability "
                         "8.0 or newer: A100, H100, RTX 30xx and later); use MF_PREC_FP32 on this one"), -1);
    /* TF32 is cuBLAS's math mode; bf16 GEMMs pick their arithmetic through cublasGemmEx's types */
    if (p != MF__CU(ctx)->prec && MF__CU(ctx)->prec == MF_PREC_BF16 && ctx->tape_len > 0)
        return (mf__fail(ctx, "mf_ctx_set_precision: this step's activations are stored in bf16 (%d ops on the "
                         "tape); change the precision between steps, after mf_reset", ctx->tape_len), -1);
    if (MF_CUBLAS_CHECK(ctx, "mf_ctx_set_precision", cublasSetMathMode(MF__CU(ctx)->blas, p == MF_PREC_TF32 ?
                        CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH)) < 0)
        return -1;
    MF__CU(ctx)->prec = p;
    return 0;
}
static mf_precision mf__cu_precision(const mf_ctx *ctx) { return MF__CU(ctx)->prec; }
MFDEF int mf_cuda_set_tf32(mf_ctx *ctx, int on) {
    if (!ctx || !ctx->be || !mf_ok(ctx)) return -1;
    return mf__cu_set_precision(ctx, on ? MF_PREC_TF32 : MF_PREC_FP32);
}

#if defined(METAFORMER_MPI) && defined(METAFORMER_NCCL)
/* ==== [cu:dist] ============================================================================= */
/* The NCCL transport of [mf:dist] (docs/math.md §18.8): one communicator per mf_dist, made from a
   unique id that rank 0 draws and d->comm broadcasts; every collective runs on a communication
   stream of its own, in place on the device buffers. The two streams are ordered by events only (the
   host never waits): a reduction waits on an event recorded on the compute stream right when its
   input is final (for a bucket: after the backward kernels of the op that finished it, which the
   backward hook of [mf:dist] calls it after), and the compute stream waits on an event recorded on
   the communication stream after the last reduction before anything reads the result (wait_all:
   before clipping and the optimizer). */
#ifndef MF_CUDA_EMU
#include <nccl.h>
#endif
typedef struct mf__nccl {
    ncclComm_t comm;
    cudaStream_t stream;  /* the communication stream */
    cudaEvent_t ready;    /* on the compute stream: what the next collective reads is final */
    cudaEvent_t done;     /* on the communication stream: the collectives started so far are done */
    int started;          /* collectives started since the compute stream last waited on them */
} mf__nccl;
#define MF__NCCL(d) ((mf__nccl *)(d)->nccl)

static int mf__nccl_failed(mf_dist *d, const char *what, const char *call, ncclResult_t r) {
    snprintf(d->err, sizeof d->err, "%s: %s failed: %s (NCCL %d.%d; NCCL_DEBUG=WARN prints NCCL's own reason)", what, call, ncclGetErrorString(r), NCCL_MAJOR, NCCL_MINOR);
    return -1;
}
static int mf__nccl_cuda_failed(mf_dist *d, const char *what, const char *call, cudaError_t e) {
    snprintf(d->err, sizeof d->err, "%s: %s failed: %s (%s)", what, call, cudaGetErrorString(e),
             cudaGetErrorName(e));
    return -1;
}
#define MF__NCCL_CHECK(d, what, call) \
    do { ncclResult_t mf__r = (call); if (mf__r != ncclSuccess) return mf__nccl_failed((d), (what), #call, mf__r); } while (0)
#define MF__NCCL_CUDA(d, what, call) \
    do { cudaError_t mf__e = (call); if (mf__e != cudaSuccess) return mf__nccl_cuda_failed((d), (what), #call, mf__e); } while (0)

/* an error a collective met after it was queued (a peer that died, a network fault) */
static int mf__nccl_async(mf_dist *d, const char *what) {
    ncclResult_t r = ncclSuccess;
    MF__NCCL_CHECK(d, what, ncclCommGetAsyncError(MF__NCCL(d)->comm, &r));
    return r == ncclSuccess ? 0 : mf__nccl_failed(d, what, "a queued collective (ncclCommGetAsyncError)", r);
}
/* the communication stream's next collective runs after the compute stream's work queued so far */
static int mf__nccl_after_compute(mf_dist *d, mf_ctx *ctx, const char *what) {
    mf__nccl *nc = MF__NCCL(d);
    if (!ctx->be) return (snprintf(d->err, sizeof d->err, "%s: the NCCL transport needs a context on the GPU", what), -1);
    if (mf__nccl_async(d, what) < 0) return -1;
    MF__NCCL_CUDA(d, what, cudaEventRecord(nc->ready, MF__CU(ctx)->stream));
    MF__NCCL_CUDA(d, what, cudaStreamWaitEvent(nc->stream, nc->ready, 0));
    return 0;
}
/* the compute stream's next work runs after every collective started so far */
static int mf__nccl_wait_all(mf_dist *d, mf_ctx *ctx) {
    mf__nccl *nc = MF__NCCL(d);
    if (!nc->started) return mf__nccl_async(d, "the gradient average");
    MF__NCCL_CUDA(d, "the gradient average", cudaEventRecord(nc->done, nc->stream));
    MF__NCCL_CUDA(d, "the gradient average", cudaStreamWaitEvent(MF__CU(ctx)->stream, nc->done, 0));
    nc->started = 0;
    return mf__nccl_async(d, "the gradient average");
}
static int mf__nccl_allreduce_start(mf_dist *d, mf_ctx *ctx, float *buf, int64_t n) {
    const char *what = "the gradient average of a bucket";
    if (mf__nccl_after_compute(d, ctx, what) < 0) return -1;
    MF__NCCL_CHECK(d, what, ncclAllReduce(buf, buf, (size_t)n, ncclFloat, ncclAvg, MF__NCCL(d)->comm, MF__NCCL(d)->stream));
    MF__NCCL(d)->started++;
    return 0;
}
static int mf__nccl_reduce_scatter(mf_dist *d, mf_ctx *ctx, float *buf, int64_t shard) {
    const char *what = "ZeRO-1: the gradient reduce-scatter";
    if (mf__nccl_after_compute(d, ctx, what) < 0) return -1;
    MF__NCCL_CHECK(d, what, ncclReduceScatter(buf, buf + (int64_t)d->rank * shard, (size_t)shard, ncclFloat, ncclAvg,
                                              MF__NCCL(d)->comm, MF__NCCL(d)->stream));
    MF__NCCL(d)->started++;
    return mf__nccl_wait_all(d, ctx);
}
static int mf__nccl_all_gather(mf_dist *d, mf_ctx *ctx, float *buf, int64_t shard) {
    const char *what = "ZeRO-1: the parameter all-gather";
    if (mf__nccl_after_compute(d, ctx, what) < 0) return -1;
    mf__cu_params_changed(ctx);
    MF__NCCL_CHECK(d, what, ncclAllGather(buf + (int64_t)d->rank * shard, buf, (size_t)shard, ncclFloat,
                                          MF__NCCL(d)->comm, MF__NCCL(d)->stream));
    MF__NCCL(d)->started++;
    return mf__nccl_wait_all(d, ctx);
}
static int mf__nccl_broadcast(mf_dist *d, mf_ctx *ctx, float *buf, int64_t n, int root) {
    const char *what = "the broadcast of the parameters";
    if (mf__nccl_after_compute(d, ctx, what) < 0) return -1;
    mf__cu_params_changed(ctx);
    MF__NCCL_CHECK(d, what, ncclBroadcast(buf, buf, (size_t)n, ncclFloat, root, MF__NCCL(d)->comm, MF__NCCL(d)->stream));
    MF__NCCL(d)->started++;
    return mf__nccl_wait_all(d, ctx);
}
static const mf__dist_transport mf__nccl_table = {
    "nccl", mf__nccl_allreduce_start, mf__nccl_wait_all, mf__nccl_reduce_scatter, mf__nccl_all_gather, mf__nccl_broadcast,
};

/* one GPU per rank: the local rank's (a machine without GPUs keeps its CPU contexts on MPI) */
static int mf__nccl_pick_device(mf_dist *d) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) { (void)cudaGetLastError(); return 0; }
    if (d->local_rank >= n) return 0; /* refused when a context goes on the GPU (mf__nccl_open) */
    MF__NCCL_CUDA(d, "mf_dist_new", cudaSetDevice(d->local_rank));
    return 0;
}

static int mf__nccl_setup(mf_dist *d, mf_ctx *ctx, mf__nccl *nc) {
    const char *what = "mf_dist_attach (NCCL)";
    int dev = -1, n = 0;
    MF__NCCL_CUDA(d, what, cudaGetDeviceCount(&n));
    MF__NCCL_CUDA(d, what, cudaGetDevice(&dev));
    if (dev != d->local_rank)
        return (snprintf(d->err, sizeof d->err, "%s: this rank is local rank %d but its context is on GPU %d of %d; "
                         "start at most one rank per GPU of a machine, and make the dist context (mf_dist_new) before "
                         "mf_ctx_set_device", what, d->local_rank, dev, n), -1);
    (void)ctx;
    MF__NCCL_CUDA(d, what, cudaStreamCreateWithFlags(&nc->stream, cudaStreamNonBlocking));
    MF__NCCL_CUDA(d, what, cudaEventCreateWithFlags(&nc->ready, cudaEventDisableTiming));
    MF__NCCL_CUDA(d, what, cudaEventCreateWithFlags(&nc->done, cudaEventDisableTiming));
    return 0;
}
/* collective: stream and events, the unique id from rank 0 over d->comm, the communicator */
static int mf__nccl_open(mf_dist *d, mf_ctx *ctx) {
    struct { int ok; ncclUniqueId id; } u;
    mf__nccl *nc = (mf__nccl *)mf__xmalloc(sizeof(mf__nccl));
    int ok;
    if (nc) memset(nc, 0, sizeof *nc);
    d->nccl = nc;
    ok = nc ? mf__nccl_setup(d, ctx, nc) == 0 : (snprintf(d->err, sizeof d->err, "out of memory: the NCCL state"), 0);
    memset(&u, 0, sizeof u);
    if (d->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&u.id);
        u.ok = r == ncclSuccess;
        if (!u.ok && ok) ok = mf__nccl_failed(d, "mf_dist_attach", "ncclGetUniqueId(&id)", r) == 0;
    }
    MPI_Bcast(&u, (int)sizeof u, MPI_BYTE, 0, d->comm);
    if (mf__dist_agree(d, NULL, ok && u.ok, NULL) < 0) { mf__nccl_close(d); return -1; }
    {
        ncclResult_t r = ncclCommInitRank(&nc->comm, d->world, u.id, d->rank);
        ok = r == ncclSuccess || mf__nccl_failed(d, "mf_dist_attach", "ncclCommInitRank(&comm, world, id, rank)", r) == 0;
        if (r != ncclSuccess) nc->comm = NULL;
    }
    if (mf__dist_agree(d, NULL, ok, NULL) < 0) { mf__nccl_close(d); return -1; }
    d->tr = &mf__nccl_table;
    return 0;
}
static void mf__nccl_close(mf_dist *d) {
    mf__nccl *nc = MF__NCCL(d);
    if (!nc) return;
    if (nc->stream) cudaStreamSynchronize(nc->stream);
    if (nc->comm) ncclCommDestroy(nc->comm);
    if (nc->ready) cudaEventDestroy(nc->ready);
    if (nc->done) cudaEventDestroy(nc->done);
    if (nc->stream) cudaStreamDestroy(nc->stream);
    MF_FREE(nc);
    d->nccl = NULL;
}
#endif /* METAFORMER_MPI && METAFORMER_NCCL */

#endif /* METAFORMER_CUDA_CUH */
