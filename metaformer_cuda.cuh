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
 *     missing from it fails with a clear error naming the op (CPU code never sees device pointers).
 *   - Dense products go through cuBLAS (row-major via C^T = B^T A^T), exact float32 unless
 *     mf_cuda_set_tf32(ctx, 1). Every other kernel here is deterministic (no atomics; reductions in a
 *     fixed order), and most follow the CPU's summation order, so CPU and GPU runs agree to ~1e-6.
 *   - Errors: every runtime / cuBLAS call is checked and the message names the op and the call;
 *     launches are checked with cudaGetLastError (and synchronised under the emulator or with
 *     -DMF_CUDA_DEBUG, so an asynchronous fault is reported at the op that caused it).
 *
 * Every kernel is launched through MF_LAUNCH(kernel, grid, block, smem_bytes, stream, args...) and
 * declares dynamic shared memory with MF_DYN_SMEM(T, name), never with <<<>>> or
 * `extern __shared__` directly: tests/cuda_emu.h redefines both so that the same kernel source
 * compiles with the host C++ compiler and runs on the CPU (how CI, which has no GPU, checks every
 * kernel against its CPU twin). Under the emulator MF_CUDA_EMU is defined and the CUDA runtime and
 * cuBLAS come from the emulator instead of NVIDIA's headers.
 *
 * Attention ([cu:attention]) is a fused FlashAttention-2 kernel family (tiles in shared memory, online
 * softmax, backward by recomputation from the row log-sum-exp, no Tq x Tk buffer, any sequence
 * length): exact fp32 by default, TF32 tensor cores (WMMA) after mf_cuda_set_tf32(ctx, 1) on sm_80+.
 * Part 1 limits (later issues): the embedding and bias gradients are parallel over the columns only;
 * the attention head size is bounded by shared memory (dk = dv = 256 fits on sm_80+).
 */
#ifndef METAFORMER_CUDA_CUH
#define METAFORMER_CUDA_CUH

#ifndef MF_CUDA_EMU
#include <cuda_runtime.h>
#include <cublas_v2.h>
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

/* ==== state: stream, cuBLAS handle, device arena, scratch ==================================== */
typedef struct mf__cu_block {
    struct mf__cu_block *next;
    char *base;
    size_t cap, used;
} mf__cu_block;

typedef struct mf__cu {
    cudaStream_t stream;
    cublasHandle_t blas;
    mf__cu_block *blocks;      /* the device activation arena, newest first */
    void *scratch;             /* persistent device scratch (optimizer tables, reductions) */
    size_t scratch_cap;
    void *host;                /* host staging for those tables */
    size_t host_cap;
    int tf32;                  /* mf_cuda_set_tf32: cuBLAS and the attention kernels on TF32 tensor cores */
    int tc_tf32;               /* the device has TF32 tensor cores (sm_80+; the emulator counts as one) */
    int smem_optin;            /* shared memory a block may opt in to (bytes) */
} mf__cu;
#define MF__CU(ctx) ((mf__cu *)(ctx)->be_state)
#define MF__CU_ALIGN 256

static int mf__cu_launched(mf_ctx *ctx, const char *op, const char *kernel) {
    cudaError_t e = cudaGetLastError();
#if defined(MF_CUDA_EMU) || defined(MF_CUDA_DEBUG)
    if (e == cudaSuccess) e = cudaStreamSynchronize(MF__CU(ctx)->stream);
#endif
    if (e == cudaSuccess) return 0;
    mf__fail(ctx, "%s: CUDA kernel %s failed: %s (%s)", op, kernel, cudaGetErrorString(e), cudaGetErrorName(e));
    return -1;
}
/* launch on the context's stream and check; evaluates to 0 or -1. The extra level lets
   MF__EW(n) expand to "grid, block, smem" before the arguments are split. */
#define MF__CU_RUN(ctx, op, kernel, ...) MF__CU_RUN_(ctx, op, kernel, __VA_ARGS__)
#define MF__CU_RUN_(ctx, op, kernel, grid, block, smem, ...) \
    (MF_LAUNCH(kernel, grid, block, smem, MF__CU(ctx)->stream, __VA_ARGS__), mf__cu_launched((ctx), (op), #kernel))

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

static void *mf__cu_dalloc(mf_ctx *ctx, size_t bytes, const char *what) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        mf__fail(ctx, "out of GPU memory: %s: cudaMalloc(%zu bytes) failed: %s", what, bytes, cudaGetErrorString(e));
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
        size_t cap = b ? 2 * b->cap : ((size_t)16 << 20);
        mf__cu_block *nb = (mf__cu_block *)mf__xmalloc(sizeof(mf__cu_block));
        if (cap < bytes) cap = bytes;
        if (!nb) return mf__fail(ctx, "out of memory: device arena bookkeeping");
        if (!(nb->base = (char *)mf__cu_dalloc(ctx, cap, "the activation arena (reduce batch or sequence length)"))) {
            MF_FREE(nb);
            return NULL;
        }
        nb->cap = cap; nb->used = 0; nb->next = b;
        cu->blocks = b = nb;
    }
    {
        void *p = b->base + b->used;
        b->used += bytes;
        ctx->act_used += bytes;
        if (ctx->act_used > ctx->act_peak) ctx->act_peak = ctx->act_used;
        return p;
    }
}
static void mf__cu_blocks_free(mf_ctx *ctx, mf__cu_block *b) {
    while (b) { mf__cu_block *n = b->next; mf__cu_dfree(ctx, b->base); MF_FREE(b); b = n; }
}
static void mf__cu_reset(mf_ctx *ctx) {
    mf__cu *cu = MF__CU(ctx);
    size_t total = 0, peak = ctx->act_peak;
    mf__cu_block *b;
    if (!cu->blocks) return;
    if (!cu->blocks->next) { cu->blocks->used = 0; return; }
    for (b = cu->blocks; b; b = b->next) total += b->cap;
    mf__cu_blocks_free(ctx, cu->blocks); /* cudaFree waits for the kernels still using them */
    cu->blocks = NULL;
    if (mf__cu_arena(ctx, total)) cu->blocks->used = 0;
    ctx->act_used = 0;
    ctx->act_peak = peak;
}

static int mf__cu_copy(mf_ctx *ctx, void *dst, const void *src, size_t bytes, int kind) {
    mf__cu *cu = MF__CU(ctx);
    cudaMemcpyKind k = kind == MF__H2D ? cudaMemcpyHostToDevice : kind == MF__D2H ? cudaMemcpyDeviceToHost
                                                                                 : cudaMemcpyDeviceToDevice;
    if (!bytes) return 0;
    if (MF_CUDA_CHECK(ctx, "copy", cudaMemcpyAsync(dst, src, bytes, k, cu->stream)) < 0) return -1;
    if (kind == MF__D2H) return MF_CUDA_CHECK(ctx, "copy to host", cudaStreamSynchronize(cu->stream));
    return 0;
}
static int mf__cu_zero(mf_ctx *ctx, void *dst, size_t bytes) {
    if (!bytes) return 0;
    return MF_CUDA_CHECK(ctx, "zero", cudaMemsetAsync(dst, 0, bytes, MF__CU(ctx)->stream));
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

/* ==== device helpers ========================================================================= */
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

/* ==== GEMM through cuBLAS ===================================================================== */
/* Row-major C_i = op(A_i) op(B_i) + beta C_i (i < batch), as mf__gemm: column-major cuBLAS computes
   C^T = op(B)^T op(A)^T. sC == 0 with batch > 1: every product adds into the same C. */
static int mf__cu_gemm(mf_ctx *ctx, const char *op, int ta, int tb, int M, int N, int K, const float *A,
                       long long sA, const float *B, long long sB, float beta, float *C, long long sC, int batch) {
    cublasHandle_t h = MF__CU(ctx)->blas;
    int lda = ta ? M : K, ldb = tb ? K : N, i;
    const float one = 1.0f;
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (!mf_ok(ctx)) return -1;
    if (batch > 1 && sC == 0) {
        for (i = 0; i < batch; i++) {
            float b = i ? 1.0f : beta;
            if (MF_CUBLAS_CHECK(ctx, op, cublasSgemm(h, ob, oa, N, M, K, &one, B + i * sB, ldb, A + i * sA, lda, &b, C, N)) < 0)
                return -1;
        }
        return 0;
    }
    if (batch == 1)
        return MF_CUBLAS_CHECK(ctx, op, cublasSgemm(h, ob, oa, N, M, K, &one, B, ldb, A, lda, &beta, C, N));
    return MF_CUBLAS_CHECK(ctx, op, cublasSgemmStridedBatched(h, ob, oa, N, M, K, &one, B, ldb, sB, A, lda, sA,
                                                              &beta, C, N, sC, batch));
}

/* ==== elementwise kernels ==================================================================== */
static __global__ void mf__k_add_to(float *dst, const float *src, long long n) { /* dst += src */
    MF__CU_LOOP(i, n) dst[i] += src[i];
}
/* y[r][j] += b[j] */
static __global__ void mf__k_bias_add(float *y, const float *b, long long n, int cols) {
    MF__CU_LOOP(i, n) y[i] += b[i % cols];
}
/* db[j] += sum over rows of g[r][j], rows in order (as the CPU) */
static __global__ void mf__k_colsum_add(float *db, const float *g, long long rows, int cols) {
    MF__CU_LOOP(j, cols) {
        float acc = db[j];
        for (long long r = 0; r < rows; r++) acc += g[r * cols + j];
        db[j] = acc;
    }
}

/* binary ops: 0 add, 1 sub, 2 mul (MF__ADD, MF__SUB, MF__MUL) */
static __global__ void mf__k_binary(float *y, const float *a, long long na, const float *b, long long nb,
                                    long long n, int kind) {
    MF__CU_LOOP(i, n) {
        float x = a[na == n ? i : i % na], z = b[nb == n ? i : i % nb];
        y[i] = kind == MF__ADD ? x + z : kind == MF__SUB ? x - z : x * z;
    }
}
static __global__ void mf__k_binary_bwd_same(float *da, float *db, const float *g, const float *A, const float *B,
                                             long long n, int kind) {
    MF__CU_LOOP(i, n) {
        if (da) da[i] += kind == MF__MUL ? g[i] * B[i] : g[i];
        if (db) db[i] += kind == MF__MUL ? g[i] * A[i] : kind == MF__SUB ? -g[i] : g[i];
    }
}
/* the larger operand (n elements): d[i] += g[i] * (other[i % no] for mul) (negated for sub's b) */
static __global__ void mf__k_binary_bwd_big(float *d, const float *g, const float *other, long long no, long long n,
                                            int kind, int neg) {
    MF__CU_LOOP(i, n) d[i] += kind == MF__MUL ? g[i] * other[i % no] : neg ? -g[i] : g[i];
}
/* the smaller operand (ns elements, repeated): summed over its repeats in order */
static __global__ void mf__k_binary_bwd_small(float *d, const float *g, const float *big, long long ns, long long n,
                                              int kind, int neg) {
    MF__CU_LOOP(j, ns) {
        float acc = d[j];
        for (long long i = j; i < n; i += ns) acc += kind == MF__MUL ? g[i] * big[i] : neg ? -g[i] : g[i];
        d[j] = acc;
    }
}

static __device__ float mf__cu_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static __global__ void mf__k_unary(float *y, const float *x, long long n, int kind, float s) {
    MF__CU_LOOP(i, n) {
        float v = x[i];
        switch (kind) {
        case MF__SCALE: y[i] = s * v; break;
        case MF__RELU: y[i] = v > 0 ? v : 0; break;
        case MF__GELU: y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); break;
        case MF__GELU_TANH: y[i] = 0.5f * v * (1.0f + tanhf(MF__SQRT_2_OVER_PI * (v + 0.044715f * v * v * v))); break;
        case MF__SIGMOID: y[i] = mf__cu_sigmoid(v); break;
        case MF__SILU: y[i] = v * mf__cu_sigmoid(v); break;
        default: y[i] = expf(v); break;
        }
    }
}
static __global__ void mf__k_unary_bwd(float *dx, const float *x, const float *y, const float *g, long long n,
                                       int kind, float s) {
    MF__CU_LOOP(i, n) {
        float v = x[i], d;
        switch (kind) {
        case MF__SCALE: d = s; break;
        case MF__RELU: d = v > 0 ? 1.0f : 0.0f; break;
        case MF__GELU:
            d = 0.5f * (1.0f + erff(v * 0.70710678118654752f)) + v * 0.3989422804014327f * expf(-0.5f * v * v);
            break;
        case MF__GELU_TANH: {
            float u = MF__SQRT_2_OVER_PI * (v + 0.044715f * v * v * v), th = tanhf(u);
            d = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * MF__SQRT_2_OVER_PI * (1.0f + 3.0f * 0.044715f * v * v);
            break;
        }
        case MF__SIGMOID: d = y[i] * (1.0f - y[i]); break;
        case MF__SILU: { float sg = mf__cu_sigmoid(v); d = sg * (1.0f + v * (1.0f - sg)); break; }
        default: d = y[i]; break;
        }
        dx[i] += g[i] * d;
    }
}

/* ==== row kernels: one block of MF__CU_ROW threads per row ===================================== */
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
/* log(sum(exp(xr - max))) of a row of n values, the max in *mx; every thread of the block calls it */
static __device__ float mf__cu_row_lse(const float *xr, int n, float *sh, float *mx_out) {
    float mx = -INFINITY, sum = 0;
    int j;
    for (j = threadIdx.x; j < n; j += blockDim.x) mx = xr[j] > mx ? xr[j] : mx;
    mx = mf__cu_bred(mx, sh, 1);
    for (j = threadIdx.x; j < n; j += blockDim.x) sum += expf(xr[j] - mx);
    *mx_out = mx;
    return logf(mf__cu_bred(sum, sh, 0));
}
static __global__ void mf__k_log_softmax(float *y, const float *x, int n) {
    __shared__ float sh[32];
    long long r = blockIdx.x;
    const float *xr = x + r * n;
    float mx, l = mf__cu_row_lse(xr, n, sh, &mx);
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
/* cross-entropy rows: st[2r] = max, st[2r+1] = log(sum(exp(x - max))); loss[r] (0 when ignored) */
static __global__ void mf__k_ce_rows(const float *x, int V, const int *tg, int ignore, float *st, double *loss) {
    __shared__ float sh[32];
    long long r = blockIdx.x;
    const float *xr = x + r * V;
    float mx, l = mf__cu_row_lse(xr, V, sh, &mx);
    if (threadIdx.x == 0) {
        st[2 * r] = mx; st[2 * r + 1] = l;
        loss[r] = tg[r] == ignore ? 0.0 : ((double)mx - xr[tg[r]]) + l;
    }
}
static __global__ void mf__k_ce_bwd(float *dx, const float *x, int V, const int *tg, int ignore, const float *st,
                                    const float *grad, int count, long long n) {
    float g = grad[0] / (float)count;
    MF__CU_LOOP(i, n) {
        long long r = i / V;
        if (tg[r] == ignore) continue;
        dx[i] += g * expf((x[i] - st[2 * r]) - st[2 * r + 1]);
        if (i - r * V == tg[r]) dx[i] -= g;
    }
}
static __global__ void mf__k_layernorm(float *y, float *st, const float *x, const float *gm, const float *bt, int D,
                                       float eps) {
    __shared__ float sh[32];
    long long r = blockIdx.x;
    const float *xr = x + r * D;
    float mean = 0, var = 0, rstd;
    int j;
    for (j = threadIdx.x; j < D; j += blockDim.x) mean += xr[j];
    mean = mf__cu_bred(mean, sh, 0) / (float)D;
    for (j = threadIdx.x; j < D; j += blockDim.x) var += (xr[j] - mean) * (xr[j] - mean);
    var = mf__cu_bred(var, sh, 0);
    rstd = 1.0f / sqrtf(var / (float)D + eps);
    for (j = threadIdx.x; j < D; j += blockDim.x)
        y[r * D + j] = (xr[j] - mean) * rstd * (gm ? gm[j] : 1.0f) + (bt ? bt[j] : 0.0f);
    if (threadIdx.x == 0) { st[2 * r] = mean; st[2 * r + 1] = rstd; }
}
static __global__ void mf__k_layernorm_bwd_x(float *dx, const float *x, const float *g, const float *gm,
                                             const float *st, int D) {
    __shared__ float sh[32];
    long long r = blockIdx.x;
    const float *xr = x + r * D, *gr = g + r * D;
    float mean = st[2 * r], rstd = st[2 * r + 1], m1 = 0, m2 = 0;
    int j;
    for (j = threadIdx.x; j < D; j += blockDim.x) {
        float dxh = gr[j] * (gm ? gm[j] : 1.0f), xh = (xr[j] - mean) * rstd;
        m1 += dxh; m2 += dxh * xh;
    }
    m1 = mf__cu_bred(m1, sh, 0) / (float)D;
    m2 = mf__cu_bred(m2, sh, 0) / (float)D;
    for (j = threadIdx.x; j < D; j += blockDim.x) {
        float dxh = gr[j] * (gm ? gm[j] : 1.0f), xh = (xr[j] - mean) * rstd;
        dx[r * D + j] += rstd * (dxh - m1 - xh * m2);
    }
}
/* gamma / beta gradients: per column, rows in order (as the CPU) */
static __global__ void mf__k_layernorm_bwd_gb(float *dg, float *db, const float *x, const float *g, const float *st,
                                              long long rows, int D) {
    MF__CU_LOOP(j, D) {
        float ag = dg ? dg[j] : 0.0f, ab = db ? db[j] : 0.0f;
        for (long long r = 0; r < rows; r++) {
            ag += g[r * D + j] * (x[r * D + j] - st[2 * r]) * st[2 * r + 1];
            ab += g[r * D + j];
        }
        if (dg) dg[j] = ag;
        if (db) db[j] = ab;
    }
}

/* ==== reductions to one value (two passes, fixed order: deterministic) ========================== */
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
static __global__ void mf__k_mse_bwd(float *da, float *db, const float *a, const float *b, const float *grad, long long n) {
    float g = 2.0f * grad[0] / (float)n;
    MF__CU_LOOP(i, n) {
        float d = g * (a[i] - b[i]);
        if (da) da[i] += d;
        if (db) db[i] -= d;
    }
}
static __global__ void mf__k_fill_add(float *dx, const float *grad, long long n, int mean) {
    float g = grad[0];
    if (mean) g /= (float)n;
    MF__CU_LOOP(i, n) dx[i] += g;
}

/* ==== indexing kernels ======================================================================== */
static __global__ void mf__k_embed(float *y, const float *tb, const int *ids, long long n, int D) {
    MF__CU_LOOP(i, n) y[i] = tb[(long long)ids[i / D] * D + i % D];
}
static __global__ void mf__k_embed_bwd(float *dt, const float *g, const int *ids, long long nid, int D) {
    MF__CU_LOOP(j, D) /* per column, positions in order: a repeated id adds up as on the CPU */
        for (long long i = 0; i < nid; i++) dt[(long long)ids[i] * D + j] += g[i * D + j];
}
static __global__ void mf__k_dropout(float *y, const float *x, const float *g, long long n, unsigned long long seed,
                                     unsigned long long stream, float p, float s, int backward) {
    MF__CU_LOOP(i, n) {
        int keep = mf__uniform(seed, stream, (uint64_t)i) >= p;
        if (!backward) y[i] = keep ? x[i] * s : 0.0f;
        else if (keep) y[i] += g[i] * s;
    }
}
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
static __global__ void mf__k_roll(float *out, float *x, int nax, int shift, long long inner, long long n, int backward) {
    MF__CU_LOOP(s, n) { /* s: the source element */
        long long k = s % inner, i = (s / inner) % nax, o = s / (inner * nax);
        long long d = (o * nax + (i + shift) % nax) * inner + k;
        if (!backward) out[d] = x[s];
        else x[s] += out[d];
    }
}
static __global__ void mf__k_sum_axis(float *y, const float *x, int nax, long long inner, long long n) {
    MF__CU_LOOP(e, n) { /* e: an output element (o, k) */
        long long o = e / inner, k = e % inner;
        float acc = 0;
        for (int i = 0; i < nax; i++) acc += x[(o * nax + i) * inner + k];
        y[e] = acc;
    }
}
static __global__ void mf__k_sum_axis_bwd(float *dx, const float *g, int nax, long long inner, long long n) {
    MF__CU_LOOP(e, n) dx[e] += g[(e / (inner * nax)) * inner + e % inner];
}
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
static __device__ void mf__cu_pool_window(int t, int T, int k, int causal, int *lo, int *hi) {
    *lo = causal ? t - k + 1 : t - k / 2;
    *hi = causal ? t : t + k / 2;
    if (*lo < 0) *lo = 0;
    if (*hi > T - 1) *hi = T - 1;
}
static __global__ void mf__k_avg_pool(float *y, const float *x, int T, int D, int k, int causal, long long n) {
    MF__CU_LOOP(e, n) {
        long long b = e / ((long long)T * D);
        int t = (int)((e / D) % T), d = (int)(e % D), lo, hi, s;
        double acc = 0;
        mf__cu_pool_window(t, T, k, causal, &lo, &hi);
        for (s = lo; s <= hi; s++) acc += x[(b * T + s) * D + d];
        y[e] = (float)(acc / (hi - lo + 1));
    }
}
static __global__ void mf__k_avg_pool_bwd(float *dx, const float *g, int T, int D, int k, int causal, long long n) {
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
        dx[e] += (float)acc;
    }
}

/* ==== [cu:attention] fused FlashAttention-2 forward and backward, fp32 and TF32 tensor cores ==== */
/* mf_attention (metaformer.h [mf:ops]): q [BH, Tq, dk], k [BH, Tk, dk], v [BH, Tk, dv] -> o [BH, Tq, dv]
   and the row log-sum-exp lse [BH, Tq] (+inf for a query that sees no key, whose output is zero),
   exactly the CPU op's convention. Query i sees key j iff !causal or j <= i + Tk - Tq.
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
       ("T" tiles [d][B + 4] hold a matrix transposed), through mf__fa_mm: fp32 FMA (4 x 4 outputs
       per thread, 2 x 4 on 32 x 32 tiles, float4 loads of both operands, k ascending:
       deterministic) or, with TF32 (mf_cuda_set_tf32 on sm_80+), WMMA m16n16k8 (a warp computes
       a 16 x 64 strip, one A fragment for four products; matrix_a col_major, inputs rounded by
       __float_to_tf32, fp32 accumulation in a fixed order). Row strides (B + 4, d + 4 floats) are
       multiples of 4 and keep WMMA's 32-byte alignment.
     - Forward: block = (head, query tile), the tiles with the most keys first, looping over the
       key tiles it can see: S^T = K Qs^T; online softmax per query in registers (128 / B threads
       per query, shuffles); O rescaled; O += P V; at the end O / l and lse = m + log l.
     - Backward, no atomics and a fixed order: D = rowsum(dO * O); dK, dV: block = (head, key tile)
       over the query tiles that see it: P = exp(S - lse), dV += P^T dO, dS = P (dP - D),
       dK += dS^T Qs; dQ: block = (head, query tile) over its key tiles: dQ += scale dS K. Results
       are added into the gradient buffers; a NULL one (no gradient wanted) is skipped. */
#ifndef MF_CUDA_EMU
#include <mma.h>
#endif
#if defined(MF_CUDA_EMU) || !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define MF__FA_WMMA 1 /* TF32 WMMA exists (sm_80+); elsewhere the TF32 kernels fall back to fp32 */
#endif
#define MF__FA_THREADS 128

typedef struct {
    const float *q, *k, *v, *o, *g, *lse, *D; /* g: dO */
    float *out, *lse_out, *gq, *gk, *gv;      /* NULL: no gradient wanted */
    int Tq, Tk, dk, dv, B, causal;
    float scale;
} mf__fa_args;

static __host__ __device__ int mf__fa_pad(int d) { return (d + 15) & ~15; }
/* bytes of shared memory of the forward (kind 0), the dK/dV (1) and the dQ (2) kernel for tiles of B */
static size_t mf__fa_smem(int B, int dk, int dv, int kind) {
    size_t dkp = (size_t)mf__fa_pad(dk), dvp = (size_t)mf__fa_pad(dv), lt = (size_t)B + 4, lk = dkp + 4, lv = dvp + 4;
    size_t n = kind == 0 ? 2 * dkp * lt + 2 * B * lv + B * lt + B
             : kind == 1 ? 2 * (dkp + dvp) * lt + 2 * B * (lk + lv) + 2 * B * lt + 2 * B
                         : 2 * (dkp + dvp) * lt + 2 * B * lk + 2 * B * lt + 2 * B;
    return n * sizeof(float);
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
/* dst [B][ld] = s * rows [0, rows) of src [.][d]; zero elsewhere up to B rows and dp columns */
static __device__ void mf__fa_load(float *dst, int ld, const float *src, int d, int rows, int B, int dp, float s) {
    MF__FA_EACH(r, c, B, dp, dst[r * ld + c] = r < rows && c < d ? s * src[(long long)r * d + c] : 0.0f);
}
/* the same transposed: dst [dp][ld] (a "T" tile), dst[c][r] = s * src[r][c] */
static __device__ void mf__fa_load_t(float *dst, int ld, const float *src, int d, int rows, int B, int dp, float s) {
    MF__FA_EACH(r, c, B, dp, dst[c * ld + r] = r < rows && c < d ? s * src[(long long)r * d + c] : 0.0f);
}
static __device__ void mf__fa_zero(float *dst, int ld, int B, int dp) {
    MF__FA_EACH(r, c, B, dp, dst[r * ld + c] = 0.0f);
}
/* dst[r] = src[r] for r < rows, pad after (lse: +inf, D: 0) */
static __device__ void mf__fa_load_vec(float *dst, const float *src, int rows, int B, float pad) {
    for (int r = threadIdx.x; r < B; r += blockDim.x) dst[r] = r < rows ? src[r] : pad;
}
/* dst rows [0, rows) of [.][d] += src [.][ld] */
static __device__ void mf__fa_add_out(float *dst, int d, const float *src, int ld, int rows) {
    MF__FA_EACH(r, c, rows, d, dst[(long long)r * d + c] += src[r * ld + c]);
}

#ifdef MF__FA_WMMA
/* each warp computes a 16 x (16 g) strip (g accumulator tiles, g = 4, 2 or 1: as wide as leaves
   every warp a strip), so that one A fragment serves g products */
static __device__ void mf__fa_mm_tc(float *C, int ldc, const float *At, int lda, const float *Bk, int ldb, int M, int N,
                                    int K, int acc) {
    namespace w = nvcuda::wmma;
    int ntn = N / 16, nw = blockDim.x / 32, g = 4, ng, units;
    while (g > 1 && (M / 16) * ((ntn + g - 1) / g) < nw) g /= 2;
    ng = (ntn + g - 1) / g;
    units = (M / 16) * ng;
    for (int t = threadIdx.x / 32; t < units; t += nw) { /* warp-uniform */
        int m0 = t / ng * 16, n0 = t % ng * g * 16, f, nf = min(g, (N - n0) / 16);
        w::fragment<w::accumulator, 16, 16, 8, float> fc[4];
        for (f = 0; f < 4; f++)
            if (f < nf) {
                if (acc) w::load_matrix_sync(fc[f], C + m0 * ldc + n0 + 16 * f, ldc, w::mem_row_major);
                else w::fill_fragment(fc[f], 0.0f);
            }
        for (int k = 0; k < K; k += 8) {
            w::fragment<w::matrix_a, 16, 16, 8, w::precision::tf32, w::col_major> fa;
            w::load_matrix_sync(fa, At + k * lda + m0, lda);
            for (int i = 0; i < fa.num_elements; i++) fa.x[i] = w::__float_to_tf32(fa.x[i]);
            for (f = 0; f < 4; f++)
                if (f < nf) {
                    w::fragment<w::matrix_b, 16, 16, 8, w::precision::tf32, w::row_major> fb;
                    w::load_matrix_sync(fb, Bk + k * ldb + n0 + 16 * f, ldb);
                    for (int i = 0; i < fb.num_elements; i++) fb.x[i] = w::__float_to_tf32(fb.x[i]);
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
/* C [M][N] (+ when acc)= sum over k < K of At[k][m] Bk[k][n], all in shared memory, both operands
   k-major (lda, ldb, ldc multiples of 4; M, N multiples of 16, K of 8). No barrier inside.
   fp32: 4 x 4 outputs per thread, 2 x 4 when that leaves threads idle (32 x 32 tiles). */
template <int TC>
static __device__ void mf__fa_mm(float *C, int ldc, const float *At, int lda, const float *Bk, int ldb, int M, int N,
                                 int K, int acc) {
#ifdef MF__FA_WMMA
    if (TC) { mf__fa_mm_tc(C, ldc, At, lda, Bk, ldb, M, N, K, acc); return; }
#endif
    if ((M / 4) * (N / 4) < (int)blockDim.x) mf__fa_mm_fma<2>(C, ldc, At, lda, Bk, ldb, M, N, K, acc);
    else mf__fa_mm_fma<4>(C, ldc, At, lda, Bk, ldb, M, N, K, acc);
}

/* forward: block = (head, query tile). shared: Qs^T [dkp][lt], K^T [dkp][lt], V [B][lv],
   S^T / P^T [B][lt], O [B][lv], 1 / l [B] */
template <int TC> static __global__ void __launch_bounds__(MF__FA_THREADS) mf__k_fa_fwd(mf__fa_args a) {
    MF_DYN_SMEM(float, sm);
    const int B = a.B, dkp = mf__fa_pad(a.dk), dvp = mf__fa_pad(a.dv), lt = B + 4, lv = dvp + 4;
    float *qt = sm, *kt = qt + dkp * lt, *vs = kt + dkp * lt, *st = vs + B * lv, *os = st + B * lt, *il = os + B * lv;
    int nqt = (a.Tq + B - 1) / B, off = a.Tk - a.Tq, i0 = (nqt - 1 - (int)(blockIdx.x % nqt)) * B;
    long long bh = blockIdx.x / nqt;
    int bq = min(B, a.Tq - i0), kend = a.causal ? min(a.Tk, i0 + bq + off) : a.Tk;
    int tpr = blockDim.x / B, r = threadIdx.x / tpr, part = threadIdx.x % tpr, c, o;
    int lim = a.causal ? i0 + r + off : a.Tk; /* query r sees the keys j <= lim */
    float m = -1e30f, l = 0.0f;               /* finite start: exp(m_old - m_new) is never NaN */
    mf__fa_load_t(qt, lt, a.q + (bh * a.Tq + i0) * a.dk, a.dk, bq, B, dkp, a.scale);
    mf__fa_zero(os, lv, B, dvp);
    for (int j0 = 0; j0 < kend; j0 += B) {
        int bk = min(B, kend - j0);
        __syncthreads(); /* the previous tile's products are done with K and V */
        mf__fa_load_t(kt, lt, a.k + (bh * a.Tk + j0) * a.dk, a.dk, bk, B, dkp, 1.0f);
        mf__fa_load(vs, lv, a.v + (bh * a.Tk + j0) * a.dv, a.dv, bk, B, dvp, 1.0f);
        __syncthreads();
        mf__fa_mm<TC>(st, lt, kt, lt, qt, lt, B, B, dkp, 0); /* S^T [key][query] */
        __syncthreads();
        { /* online softmax of query r (column r of S^T) by its tpr threads (neighbouring lanes) */
            float mx = m, sum = 0.0f, al;
            for (c = part; c < B; c += tpr) {
                float s = c < bk && j0 + c <= lim ? st[c * lt + r] : -INFINITY;
                st[c * lt + r] = s;
                mx = fmaxf(mx, s);
            }
            for (o = 1; o < tpr; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            for (c = part; c < B; c += tpr) { float p = expf(st[c * lt + r] - mx); st[c * lt + r] = p; sum += p; }
            for (o = 1; o < tpr; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            al = expf(m - mx);
            l = al * l + sum;
            m = mx;
            if (al != 1.0f)
                for (c = part; c < dvp; c += tpr) os[r * lv + c] *= al;
        }
        __syncthreads();
        mf__fa_mm<TC>(os, lv, st, lt, vs, lv, B, dvp, B, 1); /* O += P V */
    }
    if (part == 0) {
        il[r] = l > 0.0f ? 1.0f / l : 0.0f;
        if (r < bq) a.lse_out[bh * a.Tq + i0 + r] = l > 0.0f ? m + logf(l) : INFINITY;
    }
    __syncthreads();
    MF__FA_EACH(rr, cc, bq, a.dv, a.out[(bh * a.Tq + i0 + rr) * a.dv + cc] = os[rr * lv + cc] * il[rr]);
}

/* D[row] = dO . O (the CPU's order) */
static __global__ void mf__k_fa_rowdot(float *D, const float *g, const float *o, int dv, long long rows) {
    MF__CU_LOOP(r, rows) {
        float d = 0;
        for (int c = 0; c < dv; c++) d += g[r * dv + c] * o[r * dv + c];
        D[r] = d;
    }
}

/* dK, dV: block = (head, key tile) over the query tiles that see it. shared: K^T [dkp][lt],
   V^T [dvp][lt], dK [B][lk], dV [B][lv], Qs^T [dkp][lt], Qs [B][lk], dO^T [dvp][lt], dO [B][lv],
   S / P [B][lt], dP / dS [B][lt] ([query][key]), lse [B], D [B] */
template <int TC> static __global__ void __launch_bounds__(MF__FA_THREADS) mf__k_fa_bwd_kv(mf__fa_args a) {
    MF_DYN_SMEM(float, sm);
    const int B = a.B, dkp = mf__fa_pad(a.dk), dvp = mf__fa_pad(a.dv), lt = B + 4, lk = dkp + 4, lv = dvp + 4;
    float *kt = sm, *vt = kt + dkp * lt, *dks = vt + dvp * lt, *dvs = dks + B * lk, *qt = dvs + B * lv;
    float *qs = qt + dkp * lt, *gt = qs + B * lk, *gs = gt + dvp * lt, *ss = gs + B * lv, *dps = ss + B * lt;
    float *ls = dps + B * lt, *Ds = ls + B;
    int nkt = (a.Tk + B - 1) / B, j0 = (int)(blockIdx.x % nkt) * B, off = a.Tk - a.Tq;
    long long bh = blockIdx.x / nkt;
    int bk = min(B, a.Tk - j0), first = a.causal ? max(0, j0 - off) : 0; /* the first query that sees a key */
    mf__fa_load_t(kt, lt, a.k + (bh * a.Tk + j0) * a.dk, a.dk, bk, B, dkp, 1.0f);
    mf__fa_load_t(vt, lt, a.v + (bh * a.Tk + j0) * a.dv, a.dv, bk, B, dvp, 1.0f);
    mf__fa_zero(dks, lk, B, dkp);
    mf__fa_zero(dvs, lv, B, dvp);
    for (int i0 = first / B * B; i0 < a.Tq; i0 += B) {
        int bq = min(B, a.Tq - i0);
        const float *q = a.q + (bh * a.Tq + i0) * a.dk, *g = a.g + (bh * a.Tq + i0) * a.dv;
        __syncthreads();
        mf__fa_load_t(qt, lt, q, a.dk, bq, B, dkp, a.scale);
        if (a.gk) mf__fa_load(qs, lk, q, a.dk, bq, B, dkp, a.scale);
        if (a.gk) mf__fa_load_t(gt, lt, g, a.dv, bq, B, dvp, 1.0f);
        if (a.gv) mf__fa_load(gs, lv, g, a.dv, bq, B, dvp, 1.0f);
        mf__fa_load_vec(ls, a.lse + bh * a.Tq + i0, bq, B, INFINITY);
        mf__fa_load_vec(Ds, a.D + bh * a.Tq + i0, bq, B, 0.0f);
        __syncthreads();
        mf__fa_mm<TC>(ss, lt, qt, lt, kt, lt, B, B, dkp, 0);            /* S = Qs K^T */
        if (a.gk) mf__fa_mm<TC>(dps, lt, gt, lt, vt, lt, B, B, dvp, 0); /* dP = dO V^T */
        __syncthreads();
        MF__FA_EACH(ii, jj, B, B, {
            int vis = ii < bq && jj < bk && (!a.causal || j0 + jj <= i0 + ii + off);
            float p = vis ? expf(ss[ii * lt + jj] - ls[ii]) : 0.0f;
            ss[ii * lt + jj] = p;
            if (a.gk) dps[ii * lt + jj] = p * (dps[ii * lt + jj] - Ds[ii]); /* dS / scale: Qs has it */
        });
        __syncthreads();
        if (a.gv) mf__fa_mm<TC>(dvs, lv, ss, lt, gs, lv, B, dvp, B, 1);  /* dV += P^T dO */
        if (a.gk) mf__fa_mm<TC>(dks, lk, dps, lt, qs, lk, B, dkp, B, 1); /* dK += dS^T Qs */
    }
    __syncthreads();
    if (a.gk) mf__fa_add_out(a.gk + (bh * a.Tk + j0) * a.dk, a.dk, dks, lk, bk);
    if (a.gv) mf__fa_add_out(a.gv + (bh * a.Tk + j0) * a.dv, a.dv, dvs, lv, bk);
}

/* dQ: block = (head, query tile) over its visible key tiles. shared: Qs^T [dkp][lt], dO^T [dvp][lt],
   dQ [B][lk], K^T [dkp][lt], K [B][lk], V^T [dvp][lt], S^T / P^T [B][lt], dP^T / dS^T [B][lt]
   ([key][query]), lse [B], D [B] */
template <int TC> static __global__ void __launch_bounds__(MF__FA_THREADS) mf__k_fa_bwd_q(mf__fa_args a) {
    MF_DYN_SMEM(float, sm);
    const int B = a.B, dkp = mf__fa_pad(a.dk), dvp = mf__fa_pad(a.dv), lt = B + 4, lk = dkp + 4;
    float *qt = sm, *gt = qt + dkp * lt, *dqs = gt + dvp * lt, *kt = dqs + B * lk, *ks = kt + dkp * lt;
    float *vt = ks + B * lk, *st = vt + dvp * lt, *dpt = st + B * lt, *ls = dpt + B * lt, *Ds = ls + B;
    int nqt = (a.Tq + B - 1) / B, i0 = (nqt - 1 - (int)(blockIdx.x % nqt)) * B, off = a.Tk - a.Tq;
    long long bh = blockIdx.x / nqt;
    int bq = min(B, a.Tq - i0), kend = a.causal ? min(a.Tk, i0 + bq + off) : a.Tk;
    mf__fa_load_t(qt, lt, a.q + (bh * a.Tq + i0) * a.dk, a.dk, bq, B, dkp, a.scale);
    mf__fa_load_t(gt, lt, a.g + (bh * a.Tq + i0) * a.dv, a.dv, bq, B, dvp, 1.0f);
    mf__fa_load_vec(ls, a.lse + bh * a.Tq + i0, bq, B, INFINITY);
    mf__fa_load_vec(Ds, a.D + bh * a.Tq + i0, bq, B, 0.0f);
    mf__fa_zero(dqs, lk, B, dkp);
    for (int j0 = 0; j0 < kend; j0 += B) {
        int bk = min(B, kend - j0);
        const float *k = a.k + (bh * a.Tk + j0) * a.dk;
        __syncthreads();
        mf__fa_load_t(kt, lt, k, a.dk, bk, B, dkp, 1.0f);
        mf__fa_load(ks, lk, k, a.dk, bk, B, dkp, 1.0f);
        mf__fa_load_t(vt, lt, a.v + (bh * a.Tk + j0) * a.dv, a.dv, bk, B, dvp, 1.0f);
        __syncthreads();
        mf__fa_mm<TC>(st, lt, kt, lt, qt, lt, B, B, dkp, 0);  /* S^T = K Qs^T */
        mf__fa_mm<TC>(dpt, lt, vt, lt, gt, lt, B, B, dvp, 0); /* dP^T = V dO^T */
        __syncthreads();
        MF__FA_EACH(jj, ii, B, B, {
            int vis = ii < bq && jj < bk && (!a.causal || j0 + jj <= i0 + ii + off);
            float p = vis ? expf(st[jj * lt + ii] - ls[ii]) : 0.0f;
            dpt[jj * lt + ii] = p * (dpt[jj * lt + ii] - Ds[ii]) * a.scale; /* dS^T */
        });
        __syncthreads();
        mf__fa_mm<TC>(dqs, lk, dpt, lt, ks, lk, B, dkp, B, 1); /* dQ += dS K */
    }
    __syncthreads();
    mf__fa_add_out(a.gq + (bh * a.Tq + i0) * a.dk, a.dk, dqs, lk, bq);
}

/* the tensor-core path: TF32 switched on for the context and a device that has it (sm_80+) */
static int mf__cu_fa_tc(mf_ctx *ctx) { return MF__CU(ctx)->tf32 && MF__CU(ctx)->tc_tf32; }
/* the tile B of kernel `kind` (mf__fa_smem): 64 or 32 with room for two blocks per SM, else 64 or 32
   alone, else 16 (16 x 16 score tiles keep only a quarter of the threads busy in the fp32 products:
   the last resort, for the widest heads); 0 (and an error) when even 16 does not fit */
static int mf__cu_fa_tile(mf_ctx *ctx, int dk, int dv, int kind, const char *op) {
    size_t lim = (size_t)MF__CU(ctx)->smem_optin;
    int B, pass;
    for (pass = 0; pass < 2; pass++)
        for (B = 64; B >= 32; B /= 2)
            if (mf__fa_smem(B, dk, dv, kind) <= (pass ? lim : lim / 2)) return B;
    if (mf__fa_smem(16, dk, dv, kind) <= lim) return 16;
    mf__fail(ctx, "%s: head sizes dk = %d, dv = %d need %zu bytes of shared memory per block even with 16-query tiles, "
             "more than this GPU's %zu: use smaller heads (or run on the CPU)", op, dk, dv, mf__fa_smem(16, dk, dv, kind), lim);
    return 0;
}
/* launch a fused-attention kernel with `bytes` of dynamic shared memory (raising its limit over 48 KiB) */
#define MF__CU_FA_RUN(ctx, op, kernel, grid, bytes, args) \
    (((bytes) > 48 * 1024 && MF_CUDA_CHECK(ctx, op, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, \
                                                                         (int)(bytes))) < 0) \
         ? -1 : MF__CU_RUN(ctx, op, kernel, grid, MF__FA_THREADS, bytes, args))

static mf__fa_args mf__cu_fa_args(const mf_tensor *out) {
    const mf_tensor *Q = out->src[0], *K = out->src[1], *V = out->src[2];
    mf__fa_args a;
    memset(&a, 0, sizeof a);
    a.q = Q->data; a.k = K->data; a.v = V->data; a.o = out->data; a.g = out->grad; a.lse = out->saved;
    a.Tq = Q->shape[2]; a.Tk = K->shape[2]; a.dk = Q->shape[3]; a.dv = V->shape[3];
    a.causal = out->iarg[0]; a.scale = out->farg[0];
    return a;
}
static int mf__cu_attention_fwd(mf_ctx *ctx, mf_tensor *out) {
    mf__fa_args a = mf__cu_fa_args(out);
    long long BH = (long long)out->shape[0] * out->shape[1];
    size_t bytes;
    unsigned grid;
    if (!(a.B = mf__cu_fa_tile(ctx, a.dk, a.dv, 0, "attention"))) return -1;
    if (!(out->saved = (float *)mf__cu_arena(ctx, (size_t)(BH * a.Tq) * sizeof(float)))) return -1;
    a.out = out->data; a.lse_out = out->saved;
    bytes = mf__fa_smem(a.B, a.dk, a.dv, 0);
    grid = (unsigned)(BH * ((a.Tq + a.B - 1) / a.B));
    return mf__cu_fa_tc(ctx) ? MF__CU_FA_RUN(ctx, "attention", mf__k_fa_fwd<1>, grid, bytes, a)
                             : MF__CU_FA_RUN(ctx, "attention", mf__k_fa_fwd<0>, grid, bytes, a);
}
static int mf__cu_attention_bwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *Q = out->src[0], *K = out->src[1], *V = out->src[2];
    mf__fa_args a = mf__cu_fa_args(out);
    long long BH = (long long)out->shape[0] * out->shape[1];
    int tc = mf__cu_fa_tc(ctx);
    const char *op = "attention (backward)";
    float *D;
    a.gq = mf__g(Q); a.gk = mf__g(K); a.gv = mf__g(V);
    if (!a.gq && !a.gk && !a.gv) return 0;
    if (!(D = (float *)mf__cu_arena(ctx, (size_t)(BH * a.Tq) * sizeof(float)))) return -1;
    a.D = D;
    if (MF__CU_RUN(ctx, op, mf__k_fa_rowdot, mf__cu_grid(BH * a.Tq, MF__CU_BS), MF__CU_BS, 0, D, a.g, a.o, a.dv, BH * a.Tq) < 0)
        return -1;
    if (a.gk || a.gv) {
        size_t bytes;
        unsigned grid;
        if (!(a.B = mf__cu_fa_tile(ctx, a.dk, a.dv, 1, op))) return -1;
        bytes = mf__fa_smem(a.B, a.dk, a.dv, 1);
        grid = (unsigned)(BH * ((a.Tk + a.B - 1) / a.B));
        if ((tc ? MF__CU_FA_RUN(ctx, op, mf__k_fa_bwd_kv<1>, grid, bytes, a)
                : MF__CU_FA_RUN(ctx, op, mf__k_fa_bwd_kv<0>, grid, bytes, a)) < 0)
            return -1;
    }
    if (a.gq) {
        size_t bytes;
        unsigned grid;
        if (!(a.B = mf__cu_fa_tile(ctx, a.dk, a.dv, 2, op))) return -1;
        bytes = mf__fa_smem(a.B, a.dk, a.dv, 2);
        grid = (unsigned)(BH * ((a.Tq + a.B - 1) / a.B));
        if ((tc ? MF__CU_FA_RUN(ctx, op, mf__k_fa_bwd_q<1>, grid, bytes, a)
                : MF__CU_FA_RUN(ctx, op, mf__k_fa_bwd_q<0>, grid, bytes, a)) < 0)
            return -1;
    }
    return 0;
}

/* ==== optimizers and clipping over the flat buffers =========================================== */
typedef struct { long long off, n; float step, rc2, decay, lr; int first; } mf__cu_seg;
/* every segment (parameter) s: blockIdx.y strides the segments, blockIdx.x the elements */
#define MF__CU_SEG_LOOP(s, k, segs, nseg) \
    for (int s = blockIdx.y; s < (nseg); s += gridDim.y) \
        for (long long k = (segs)[s].off + (long long)blockIdx.x * blockDim.x + threadIdx.x; \
             k < (segs)[s].off + (segs)[s].n; k += (long long)gridDim.x * blockDim.x)
static __global__ void mf__k_nonzero(const float *g, const mf__cu_seg *segs, int nseg, int *flag) {
    MF__CU_SEG_LOOP(s, k, segs, nseg) if (g[k] != 0.0f) flag[s] = 1;
}
static __global__ void mf__k_optimizer(float *w, const float *g, float *m, float *v, const mf__cu_seg *segs, int nseg,
                                       int kind, float b1, float b2, float eps, float wd, float mu, int nesterov) {
    MF__CU_SEG_LOOP(s, k, segs, nseg) {
        const mf__cu_seg *sg = &segs[s];
        if (kind == MF_OPT_ADAM || kind == MF_OPT_ADAMW) {
            float gk = g[k] + (kind == MF_OPT_ADAM ? wd * w[k] : 0.0f);
            w[k] *= sg->decay;
            m[k] = b1 * m[k] + (1.0f - b1) * gk;
            v[k] = b2 * v[k] + (1.0f - b2) * gk * gk;
            w[k] -= sg->step * m[k] / (sqrtf(v[k]) * sg->rc2 + eps);
        } else if (kind == MF_OPT_ADAM_LABML) {
            w[k] *= sg->decay;
            m[k] = b1 * m[k] + (1.0f - b1) * g[k];
            v[k] = b2 * v[k] + (1.0f - b2) * g[k] * g[k];
            w[k] -= sg->step * m[k] / (sqrtf(v[k]) + eps);
        } else {
            float gk = g[k] + wd * w[k];
            if (mu > 0) {
                m[k] = sg->first ? gk : mu * m[k] + gk;
                gk = nesterov ? gk + mu * m[k] : m[k];
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
static dim3 mf__cu_seg_grid(long long biggest, int nseg) {
    long long gx = (biggest + MF__CU_BS - 1) / MF__CU_BS;
    if (gx > 1024) gx = 1024;
    return dim3((unsigned)(gx < 1 ? 1 : gx), (unsigned)(nseg < 65535 ? (nseg < 1 ? 1 : nseg) : 65535), 1);
}
/* upload a segment table to the scratch (after `extra` bytes kept for the caller) */
static mf__cu_seg *mf__cu_put_segs(mf_ctx *ctx, const mf__cu_seg *h, int n, size_t extra) {
    char *d = (char *)mf__cu_scratch(ctx, extra + (size_t)(n ? n : 1) * sizeof(mf__cu_seg));
    if (!d || mf__cu_copy(ctx, d + extra, h, (size_t)n * sizeof(mf__cu_seg), MF__H2D) < 0) return NULL;
    return (mf__cu_seg *)(d + extra);
}

static float mf__cu_clip(mf_ctx *ctx, float max_norm) {
    mf__cu_seg *hs, *ds;
    int i, n = 0;
    long long big = 1;
    double ss = 0, *partial;
    float norm;
    size_t head = (MF__CU_RED_BLOCKS + 1) * sizeof(double);
    if (!(hs = (mf__cu_seg *)mf__cu_host(ctx, (size_t)(ctx->n_params + 1) * sizeof(mf__cu_seg)))) return 0.0f;
    for (i = 0; i < ctx->n_params; i++) {
        const mf_tensor *p = ctx->params[i];
        if (!p->requires_grad) continue;
        memset(&hs[n], 0, sizeof hs[n]);
        hs[n].off = p->offset; hs[n].n = p->ne;
        if (p->ne > big) big = p->ne;
        n++;
    }
    if (n == 0) return 0.0f;
    if (!(ds = mf__cu_put_segs(ctx, hs, n, head))) return 0.0f;
    partial = (double *)((char *)ds - head);
    if (MF__CU_RUN(ctx, "mf_clip_grad_norm", mf__k_sumsq, MF__CU_RED_BLOCKS, MF__CU_BS, 0, (const float *)ctx->p_grad,
                   (const mf__cu_seg *)ds, n, partial) < 0 ||
        MF__CU_RUN(ctx, "mf_clip_grad_norm", mf__k_reduce_end, 1, 32, 0, (const double *)partial, MF__CU_RED_BLOCKS, 1.0,
                   (float *)NULL, partial + MF__CU_RED_BLOCKS) < 0 ||
        mf__cu_copy(ctx, &ss, partial + MF__CU_RED_BLOCKS, sizeof ss, MF__D2H) < 0)
        return 0.0f;
    norm = (float)sqrt(ss);
    if (max_norm > 0 && norm > max_norm) {
        float f = max_norm / (norm + 1e-6f);
        MF__CU_RUN(ctx, "mf_clip_grad_norm", mf__k_scale_segs, mf__cu_seg_grid(big, n), MF__CU_BS, 0, ctx->p_grad,
                   (const mf__cu_seg *)ds, n, f);
    }
    return norm;
}

static int mf__cu_optimizer_step(mf_ctx *ctx, const mf_optimizer *o) {
    mf__cu_seg *hs, *ds;
    int i, n = 0, nq = 0, *flags = NULL;
    long long big = 1;
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
        if (p->ne > big) big = p->ne;
        nq++;
    }
    if (nq) {
        int *dflags;
        size_t extra = (fbytes + 255) & ~(size_t)255;
        if (!(ds = mf__cu_put_segs(ctx, hs, nq, extra))) return -1;
        dflags = (int *)((char *)ds - extra);
        if (mf__cu_zero(ctx, dflags, (size_t)nq * sizeof(int)) < 0 ||
            MF__CU_RUN(ctx, what, mf__k_nonzero, mf__cu_seg_grid(big, nq), MF__CU_BS, 0, (const float *)ctx->p_grad,
                       (const mf__cu_seg *)ds, nq, dflags) < 0 ||
            mf__cu_copy(ctx, flags, dflags, (size_t)nq * sizeof(int), MF__D2H) < 0)
            return -1;
    }
    ctx->opt_t++;
    big = 1;
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
        if (o->kind == MF_OPT_ADAM || o->kind == MF_OPT_ADAMW) {
            sg->step = lr / c1; sg->rc2 = 1.0f / sqrtf(c2);
            sg->decay = o->kind == MF_OPT_ADAMW ? 1.0f - lr * o->weight_decay : 1.0f;
        } else if (o->kind == MF_OPT_ADAM_LABML) {
            sg->step = lr * sqrtf(c2) / c1; sg->decay = 1.0f - o->schedule.lr * o->weight_decay;
        }
        if (p->ne > big) big = p->ne;
    }
    if (n == 0) return 0;
    if (!(ds = mf__cu_put_segs(ctx, hs, n, 0))) return -1;
    return MF__CU_RUN(ctx, what, mf__k_optimizer, mf__cu_seg_grid(big, n), MF__CU_BS, 0, ctx->p_data,
                      (const float *)ctx->p_grad, ctx->p_m, ctx->p_v, (const mf__cu_seg *)ds, n, (int)o->kind, b1, b2,
                      o->eps, o->weight_decay, o->momentum, o->nesterov);
}

/* ==== the ops: CUDA forward / backward of every op descriptor ================================= */
#define MF__EW(n) mf__cu_grid((long long)(n), MF__CU_BS), MF__CU_BS, 0 /* grid, block, smem */
typedef int (*mf__cu_fn)(mf_ctx *ctx, mf_tensor *out);
static int mf__cu_nop(mf_ctx *ctx, mf_tensor *out) { (void)ctx; (void)out; return 0; }

static int mf__cu_matmul_fwd(mf_ctx *ctx, mf_tensor *out) {
    int ta = out->iarg[0], tb = out->iarg[1], M = out->iarg[2], N = out->iarg[3], K = out->iarg[4];
    int batch = out->iarg[5], mode = out->iarg[6];
    long long sA = mode == 2 ? 0 : (long long)M * K, sB = mode == 1 ? 0 : (long long)K * N;
    if (mode == 1 && !ta)
        return mf__cu_gemm(ctx, "matmul", 0, tb, M * batch, N, K, out->src[0]->data, 0, out->src[1]->data, 0, 0.0f, out->data, 0, 1);
    return mf__cu_gemm(ctx, "matmul", ta, tb, M, N, K, out->src[0]->data, sA, out->src[1]->data, sB, 0.0f, out->data,
                       (long long)M * N, batch);
}
static int mf__cu_matmul_bwd(mf_ctx *ctx, mf_tensor *out) {
    int ta = out->iarg[0], tb = out->iarg[1], M = out->iarg[2], N = out->iarg[3], K = out->iarg[4];
    int batch = out->iarg[5], mode = out->iarg[6], r = 0;
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

static int mf__cu_linear_fwd(mf_ctx *ctx, mf_tensor *out) {
    mf_tensor *x = out->src[0], *w = out->src[1], *b = out->src[2];
    int in = w->shape[1], nout = w->shape[0];
    long long rows = mf__rows(x);
    if (mf__cu_gemm(ctx, "linear", 0, 1, (int)rows, nout, in, x->data, 0, w->data, 0, 0.0f, out->data, 0, 1) < 0) return -1;
    return b ? MF__CU_RUN(ctx, "linear", mf__k_bias_add, MF__EW(out->ne), out->data, (const float *)b->data, (long long)out->ne, nout) : 0;
}
static int mf__cu_linear_bwd(mf_ctx *ctx, mf_tensor *out) {
    mf_tensor *x = out->src[0], *w = out->src[1], *b = out->src[2];
    int in = w->shape[1], nout = w->shape[0];
    long long rows = mf__rows(x);
    float *dx = mf__g(x), *dw = mf__g(w), *db = mf__g(b);
    const char *op = "linear (backward)";
    if (dx && mf__cu_gemm(ctx, op, 0, 0, (int)rows, in, nout, out->grad, 0, w->data, 0, 1.0f, dx, 0, 1) < 0) return -1;
    if (dw && mf__cu_gemm(ctx, op, 1, 0, nout, in, (int)rows, out->grad, 0, x->data, 0, 1.0f, dw, 0, 1) < 0) return -1;
    return db ? MF__CU_RUN(ctx, op, mf__k_colsum_add, MF__EW(nout), db, (const float *)out->grad, rows, nout) : 0;
}

static int mf__cu_binary_fwd(mf_ctx *ctx, mf_tensor *out) {
    return MF__CU_RUN(ctx, out->op->name, mf__k_binary, MF__EW(out->ne), out->data, (const float *)out->src[0]->data,
                      (long long)out->src[0]->ne, (const float *)out->src[1]->data, (long long)out->src[1]->ne,
                      (long long)out->ne, out->iarg[1]);
}
static int mf__cu_binary_bwd(mf_ctx *ctx, mf_tensor *out) {
    mf_tensor *A = out->src[0], *B = out->src[1];
    float *da = mf__g(A), *db = mf__g(B);
    long long na = A->ne, nb = B->ne, n = out->ne;
    int kind = out->iarg[1], r = 0;
    const char *op = out->op->name;
    if (!da && !db) return 0;
    if (na == n && nb == n)
        return MF__CU_RUN(ctx, op, mf__k_binary_bwd_same, MF__EW(n), da, db, (const float *)out->grad,
                          (const float *)A->data, (const float *)B->data, n, kind);
    if (na == n) { /* a big, b small */
        if (da) r |= MF__CU_RUN(ctx, op, mf__k_binary_bwd_big, MF__EW(n), da, (const float *)out->grad, (const float *)B->data, nb, n, kind, 0);
        if (db) r |= MF__CU_RUN(ctx, op, mf__k_binary_bwd_small, MF__EW(nb), db, (const float *)out->grad, (const float *)A->data, nb, n, kind, kind == MF__SUB);
    } else {
        if (db) r |= MF__CU_RUN(ctx, op, mf__k_binary_bwd_big, MF__EW(n), db, (const float *)out->grad, (const float *)A->data, na, n, kind, kind == MF__SUB);
        if (da) r |= MF__CU_RUN(ctx, op, mf__k_binary_bwd_small, MF__EW(na), da, (const float *)out->grad, (const float *)B->data, na, n, kind, 0);
    }
    return r ? -1 : 0;
}

static int mf__cu_unary_fwd(mf_ctx *ctx, mf_tensor *out) {
    return MF__CU_RUN(ctx, out->op->name, mf__k_unary, MF__EW(out->ne), out->data, (const float *)out->src[0]->data,
                      (long long)out->ne, out->iarg[0], out->farg[0]);
}
static int mf__cu_unary_bwd(mf_ctx *ctx, mf_tensor *out) {
    float *dx = mf__g(out->src[0]);
    if (!dx) return 0;
    return MF__CU_RUN(ctx, out->op->name, mf__k_unary_bwd, MF__EW(out->ne), dx, (const float *)out->src[0]->data,
                      (const float *)out->data, (const float *)out->grad, (long long)out->ne, out->iarg[0], out->farg[0]);
}

static int mf__cu_softmax_fwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    int tq = x->ndim >= 2 ? x->shape[x->ndim - 2] : 1;
    return MF__CU_RUN(ctx, "softmax", mf__k_softmax, (unsigned)mf__rows(x), MF__CU_ROW, 0, out->data,
                      (const float *)x->data, mf__last(x), tq, out->iarg[0]);
}
static int mf__cu_softmax_bwd(mf_ctx *ctx, mf_tensor *out) {
    float *dx = mf__g(out->src[0]);
    if (!dx) return 0;
    return MF__CU_RUN(ctx, "softmax (backward)", mf__k_softmax_bwd, (unsigned)mf__rows(out), MF__CU_ROW, 0, dx,
                      (const float *)out->data, (const float *)out->grad, mf__last(out));
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
    if (MF__CU_RUN(ctx, "cross_entropy", mf__k_ce_rows, (unsigned)rows, MF__CU_ROW, 0, (const float *)x->data,
                   mf__last(x), (const int *)tg, out->iarg[0], out->saved, loss) < 0)
        return -1;
    return mf__cu_reduce(ctx, "cross_entropy", NULL, NULL, loss, rows, 3, (double)out->iarg[1], out->data, NULL);
}
static int mf__cu_ce_bwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    float *dx = mf__g(out->src[0]);
    long long rows = mf__rows(x);
    if (!dx || !out->iarg[1]) return 0;
    return MF__CU_RUN(ctx, "cross_entropy (backward)", mf__k_ce_bwd, MF__EW(x->ne), dx, (const float *)x->data,
                      mf__last(x), (const int *)(out->saved + 2 * rows), out->iarg[0], (const float *)out->saved,
                      (const float *)out->grad, out->iarg[1], (long long)x->ne);
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

static int mf__cu_layernorm_fwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0], *gm = out->src[1], *bt = out->src[2];
    long long rows = mf__rows(x);
    if (!(out->saved = (float *)mf__cu_arena(ctx, 2 * (size_t)rows * sizeof(float)))) return -1;
    return MF__CU_RUN(ctx, "layernorm", mf__k_layernorm, (unsigned)rows, MF__CU_ROW, 0, out->data, out->saved,
                      (const float *)x->data, (const float *)(gm ? gm->data : NULL), (const float *)(bt ? bt->data : NULL),
                      mf__last(x), out->farg[0]);
}
static int mf__cu_layernorm_bwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0], *gm = out->src[1];
    float *dx = mf__g(out->src[0]), *dg = mf__g(out->src[1]), *db = mf__g(out->src[2]);
    long long rows = mf__rows(x);
    int D = mf__last(x);
    const char *op = "layernorm (backward)";
    if (dx && MF__CU_RUN(ctx, op, mf__k_layernorm_bwd_x, (unsigned)rows, MF__CU_ROW, 0, dx, (const float *)x->data,
                         (const float *)out->grad, (const float *)(gm ? gm->data : NULL), (const float *)out->saved, D) < 0)
        return -1;
    if (dg || db)
        return MF__CU_RUN(ctx, op, mf__k_layernorm_bwd_gb, MF__EW(D), dg, db, (const float *)x->data,
                          (const float *)out->grad, (const float *)out->saved, rows, D);
    return 0;
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
    return MF__CU_RUN(ctx, "embedding (backward)", mf__k_embed_bwd, MF__EW(D), dt, (const float *)out->grad,
                      (const int *)out->saved, (long long)(out->ne / D), D);
}

static int mf__cu_dropout_run(mf_ctx *ctx, mf_tensor *out, int backward) {
    unsigned long long stream = ((unsigned long long)(uint32_t)out->iarg[1] << 32) | (uint32_t)out->iarg[0];
    float s = 1.0f / (1.0f - out->farg[0]);
    float *y = backward ? mf__g(out->src[0]) : out->data;
    if (!y) return 0;
    return MF__CU_RUN(ctx, backward ? "dropout (backward)" : "dropout", mf__k_dropout, MF__EW(out->ne), y,
                      (const float *)out->src[0]->data, (const float *)out->grad, (long long)out->ne,
                      (unsigned long long)(ctx->seed ^ 0xd50f0d50f0ULL), stream, out->farg[0], s, backward);
}
static int mf__cu_dropout_fwd(mf_ctx *ctx, mf_tensor *out) { return mf__cu_dropout_run(ctx, out, 0); }
static int mf__cu_dropout_bwd(mf_ctx *ctx, mf_tensor *out) { return mf__cu_dropout_run(ctx, out, 1); }

static int mf__cu_reshape_bwd(mf_ctx *ctx, mf_tensor *out) {
    float *dx = mf__g(out->src[0]);
    if (!dx) return 0;
    return MF__CU_RUN(ctx, "reshape (backward)", mf__k_add_to, MF__EW(out->ne), dx, (const float *)out->grad, (long long)out->ne);
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

static int mf__cu_concat_run(mf_ctx *ctx, mf_tensor *out, int backward) {
    int ax = out->iarg[0];
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

static int mf__cu_slice_run(mf_ctx *ctx, mf_tensor *out, int backward) {
    const mf_tensor *x = out->src[0];
    int ax = out->iarg[0];
    int64_t outer, inner;
    float *xd = backward ? mf__g(x) : x->data;
    if (!xd) return 0;
    mf__split_at(x, ax, &outer, &inner);
    return MF__CU_RUN(ctx, backward ? "slice (backward)" : "slice", mf__k_slice, MF__EW(out->ne),
                      backward ? out->grad : out->data, xd, (long long)x->shape[ax], (long long)out->shape[ax],
                      (long long)out->iarg[1], (long long)inner, (long long)out->ne, backward);
}
static int mf__cu_slice_fwd(mf_ctx *ctx, mf_tensor *out) { return mf__cu_slice_run(ctx, out, 0); }
static int mf__cu_slice_bwd(mf_ctx *ctx, mf_tensor *out) { return mf__cu_slice_run(ctx, out, 1); }

static int mf__cu_roll_run(mf_ctx *ctx, mf_tensor *out, int backward) {
    const mf_tensor *x = out->src[0];
    int ax = out->iarg[0], n = x->shape[ax], shift = ((out->iarg[1] % n) + n) % n;
    int64_t outer, inner;
    float *xd = backward ? mf__g(x) : x->data;
    if (!xd) return 0;
    mf__split_at(x, ax, &outer, &inner);
    return MF__CU_RUN(ctx, backward ? "roll (backward)" : "roll", mf__k_roll, MF__EW(out->ne),
                      backward ? out->grad : out->data, xd, n, shift, (long long)inner, (long long)out->ne, backward);
}
static int mf__cu_roll_fwd(mf_ctx *ctx, mf_tensor *out) { return mf__cu_roll_run(ctx, out, 0); }
static int mf__cu_roll_bwd(mf_ctx *ctx, mf_tensor *out) { return mf__cu_roll_run(ctx, out, 1); }

static int mf__cu_reduce_fwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    return mf__cu_reduce(ctx, out->op->name, x->data, NULL, NULL, x->ne, 0, out->iarg[0] ? (double)x->ne : 1.0,
                         out->data, NULL);
}
static int mf__cu_reduce_bwd(mf_ctx *ctx, mf_tensor *out) {
    float *dx = mf__g(out->src[0]);
    if (!dx) return 0;
    return MF__CU_RUN(ctx, out->op->name, mf__k_fill_add, MF__EW(out->src[0]->ne), dx, (const float *)out->grad,
                      (long long)out->src[0]->ne, out->iarg[0]);
}

static int mf__cu_sum_axis_fwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    int64_t outer, inner;
    mf__split_at(x, out->iarg[0], &outer, &inner);
    return MF__CU_RUN(ctx, "sum_axis", mf__k_sum_axis, MF__EW(outer * inner), out->data, (const float *)x->data,
                      x->shape[out->iarg[0]], (long long)inner, (long long)(outer * inner));
}
static int mf__cu_sum_axis_bwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0];
    float *dx = mf__g(x);
    int64_t outer, inner;
    if (!dx) return 0;
    mf__split_at(x, out->iarg[0], &outer, &inner);
    return MF__CU_RUN(ctx, "sum_axis (backward)", mf__k_sum_axis_bwd, MF__EW(x->ne), dx, (const float *)out->grad,
                      x->shape[out->iarg[0]], (long long)inner, (long long)x->ne);
}

static int mf__cu_conv1d_fwd(mf_ctx *ctx, mf_tensor *out) {
    const mf_tensor *x = out->src[0], *w = out->src[1], *b = out->src[2];
    long long rows = (long long)out->shape[0] * out->shape[1];
    int CK = w->shape[1] * w->shape[2], Co = w->shape[0];
    if (!(out->saved = (float *)mf__cu_arena(ctx, (size_t)(rows * CK) * sizeof(float)))) return -1;
    if (MF__CU_RUN(ctx, "conv1d", mf__k_im2col, MF__EW(rows * CK), out->saved, (const float *)x->data, out->shape[1],
                   x->shape[1], x->shape[2], w->shape[2], out->iarg[0], out->iarg[1], rows * CK) < 0 ||
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
    if (db && MF__CU_RUN(ctx, op, mf__k_colsum_add, MF__EW(Co), db, (const float *)out->grad, rows, Co) < 0) return -1;
    if (!dx) return 0;
    if (!(dcols = (float *)mf__cu_arena(ctx, (size_t)(rows * CK) * sizeof(float)))) return -1;
    if (mf__cu_gemm(ctx, op, 0, 0, (int)rows, CK, Co, out->grad, 0, w->data, 0, 0.0f, dcols, 0, 1) < 0) return -1;
    return MF__CU_RUN(ctx, op, mf__k_col2im, MF__EW(x->ne), dx, (const float *)dcols, out->shape[1], x->shape[1],
                      x->shape[2], w->shape[2], out->iarg[0], out->iarg[1], (long long)x->ne);
}

static int mf__cu_avg_pool_fwd(mf_ctx *ctx, mf_tensor *out) {
    return MF__CU_RUN(ctx, "avg_pool_seq", mf__k_avg_pool, MF__EW(out->ne), out->data, (const float *)out->src[0]->data,
                      out->shape[1], out->shape[2], out->iarg[0], out->iarg[1], (long long)out->ne);
}
static int mf__cu_avg_pool_bwd(mf_ctx *ctx, mf_tensor *out) {
    float *dx = mf__g(out->src[0]);
    if (!dx) return 0;
    return MF__CU_RUN(ctx, "avg_pool_seq (backward)", mf__k_avg_pool_bwd, MF__EW(out->ne), dx, (const float *)out->grad,
                      out->shape[1], out->shape[2], out->iarg[0], out->iarg[1], (long long)out->ne);
}

/* every op of metaformer.h and its CUDA forward / backward */
static const struct { const mf__op *op; mf__cu_fn fwd, bwd; } mf__cu_ops[] = {
    {&mf__op_matmul, mf__cu_matmul_fwd, mf__cu_matmul_bwd},
    {&mf__op_linear, mf__cu_linear_fwd, mf__cu_linear_bwd},
    {&mf__op_add, mf__cu_binary_fwd, mf__cu_binary_bwd},
    {&mf__op_sub, mf__cu_binary_fwd, mf__cu_binary_bwd},
    {&mf__op_mul, mf__cu_binary_fwd, mf__cu_binary_bwd},
    {&mf__op_scale, mf__cu_unary_fwd, mf__cu_unary_bwd},
    {&mf__op_relu, mf__cu_unary_fwd, mf__cu_unary_bwd},
    {&mf__op_gelu, mf__cu_unary_fwd, mf__cu_unary_bwd},
    {&mf__op_sigmoid, mf__cu_unary_fwd, mf__cu_unary_bwd},
    {&mf__op_silu, mf__cu_unary_fwd, mf__cu_unary_bwd},
    {&mf__op_exp, mf__cu_unary_fwd, mf__cu_unary_bwd},
    {&mf__op_softmax, mf__cu_softmax_fwd, mf__cu_softmax_bwd},
    {&mf__op_log_softmax, mf__cu_log_softmax_fwd, mf__cu_log_softmax_bwd},
    {&mf__op_cross_entropy, mf__cu_ce_fwd, mf__cu_ce_bwd},
    {&mf__op_mse, mf__cu_mse_fwd, mf__cu_mse_bwd},
    {&mf__op_layernorm, mf__cu_layernorm_fwd, mf__cu_layernorm_bwd},
    {&mf__op_embedding, mf__cu_embedding_fwd, mf__cu_embedding_bwd},
    {&mf__op_dropout, mf__cu_dropout_fwd, mf__cu_dropout_bwd},
    {&mf__op_reshape, mf__cu_nop, mf__cu_reshape_bwd},
    {&mf__op_permute, mf__cu_permute_fwd, mf__cu_permute_bwd},
    {&mf__op_concat, mf__cu_concat_fwd, mf__cu_concat_bwd},
    {&mf__op_slice, mf__cu_slice_fwd, mf__cu_slice_bwd},
    {&mf__op_roll, mf__cu_roll_fwd, mf__cu_roll_bwd},
    {&mf__op_sum, mf__cu_reduce_fwd, mf__cu_reduce_bwd},
    {&mf__op_mean, mf__cu_reduce_fwd, mf__cu_reduce_bwd},
    {&mf__op_sum_axis, mf__cu_sum_axis_fwd, mf__cu_sum_axis_bwd},
    {&mf__op_conv1d, mf__cu_conv1d_fwd, mf__cu_conv1d_bwd},
    {&mf__op_avg_pool, mf__cu_avg_pool_fwd, mf__cu_avg_pool_bwd},
    {&mf__op_attention, mf__cu_attention_fwd, mf__cu_attention_bwd},
};
static int mf__cu_dispatch(mf_ctx *ctx, mf_tensor *out, int backward) {
    size_t i;
    for (i = 0; i < sizeof mf__cu_ops / sizeof mf__cu_ops[0]; i++)
        if (mf__cu_ops[i].op == out->op) {
            int r = backward ? mf__cu_ops[i].bwd(ctx, out) : mf__cu_ops[i].fwd(ctx, out);
            return r < 0 || !mf_ok(ctx) ? -1 : 0;
        }
    mf__fail(ctx, "%s: this op has no CUDA kernel; run it on a CPU context (mf_ctx_set_device(ctx, MF_DEVICE_CPU))",
             out->op->name);
    return -1;
}
static int mf__cu_forward(mf_ctx *ctx, mf_tensor *out) { return mf__cu_dispatch(ctx, out, 0); }
static int mf__cu_backward(mf_ctx *ctx, mf_tensor *out) { return mf__cu_dispatch(ctx, out, 1); }

/* ==== the backend and device selection ======================================================== */
static void mf__cu_destroy(mf_ctx *ctx) {
    mf__cu *cu = MF__CU(ctx);
    if (!cu) return;
    mf__cu_blocks_free(ctx, cu->blocks);
    mf__cu_dfree(ctx, cu->scratch);
    if (cu->blas) cublasDestroy(cu->blas);
    if (cu->stream) cudaStreamDestroy(cu->stream);
    MF_FREE(cu->host);
    MF_FREE(cu);
    ctx->be_state = NULL;
}

static const mf__backend mf__cuda_backend = {
    mf__cu_dalloc, mf__cu_dfree, mf__cu_arena, mf__cu_reset, mf__cu_copy, mf__cu_zero,
    mf__cu_forward, mf__cu_backward, mf__cu_optimizer_step, mf__cu_clip, mf__cu_destroy,
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

MFDEF int mf_cuda_set_tf32(mf_ctx *ctx, int on) {
    if (!ctx || !ctx->be || !mf_ok(ctx)) return -1;
    if (MF_CUBLAS_CHECK(ctx, "mf_cuda_set_tf32", cublasSetMathMode(MF__CU(ctx)->blas, on ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                                         : CUBLAS_DEFAULT_MATH)) < 0)
        return -1;
    MF__CU(ctx)->tf32 = on != 0;
    return 0;
}

#endif /* METAFORMER_CUDA_CUH */
