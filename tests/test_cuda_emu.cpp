/* test_cuda_emu.cpp - tests of the CPU CUDA emulator tests/cuda_emu.h.
 *
 *   g++ -std=c++14 -O1 -mfma -ffp-contract=fast -fexpensive-optimizations -Wall -Wextra -Werror -Itests \
 *       tests/test_cuda_emu.cpp -o build/test_cuda_emu   (the Makefile's EMU_FLAGS: test_fp_contraction needs them)
 *   g++ -std=c++14 -O1 -mfma -ffp-contract=fast -fexpensive-optimizations -g -fsanitize=address,undefined \
 *       -fno-sanitize-recover=all -Itests tests/test_cuda_emu.cpp -o build/test_cuda_emu_asan
 *   (-DMF_EMU_USE_UCONTEXT: the same tests on the portable ucontext fibers)
 *
 * The kernels below are ordinary CUDA source: they would compile unchanged with nvcc given the
 * MF_LAUNCH / MF_DYN_SMEM definitions at the top of metaformer_cuda.cuh. */
#include "cuda_emu.h"
#include "mf_test.h"

#include <string.h>
#include <chrono>
#include <vector>

#define CK(x) MFT_CHECK((x) == cudaSuccess)
static const int ORDERS[3] = {MF_EMU_ORDER_IN, MF_EMU_ORDER_REVERSED, MF_EMU_ORDER_SHUFFLED};
static const char *const ORDER_NAMES[3] = {"in", "reversed", "shuffled"};

/* the ucontext fallback pays two system calls per switch: its speed is reported, not checked */
#ifdef MF_EMU_USE_UCONTEXT
#define TIME_LIMIT(s) 1e9
#else
#define TIME_LIMIT(s) (s)
#endif

static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
static unsigned lcg(unsigned &s) { s = s * 1664525u + 1013904223u; return s >> 8; }

/* ---------------------------------------------------------------- kernels */
__global__ void k_axpb(const float *__restrict__ x, float *__restrict__ y, int n, float a, float b, int *count) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) atomicAdd(count, 1000000000);
    if (i >= n) return;
    y[i] = a * x[i] + b;
    atomicAdd(count, 1);
}

/* first thread to run writes its linear id */
__global__ void k_first(int *first, int *order_of_blocks, int *next) {
    int t = threadIdx.x;
    atomicCAS(first + blockIdx.x, -1, t);
    if (t == 0) order_of_blocks[atomicAdd(next, 1)] = blockIdx.x;
}

template <int BLOCK>
__global__ void k_block_sum(const float *x, float *out, int n) {
    __shared__ float s[BLOCK];
    int tid = threadIdx.x, i = blockIdx.x * BLOCK + tid;
    s[tid] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if (tid < stride) s[tid] += s[tid + stride];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = s[0];
}

/* the classic bug: no barrier between the steps of the tree */
__global__ void k_block_sum_racy(const float *x, float *out, int n) {
    __shared__ float s[256];
    int tid = threadIdx.x, i = blockIdx.x * 256 + tid;
    s[tid] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int stride = 128; stride > 0; stride >>= 1)
        if (tid < stride) s[tid] += s[tid + stride];
    if (tid == 0) out[blockIdx.x] = s[0];
}

/* reverse each block's chunk through dynamic shared memory */
__global__ void k_reverse_dyn(const int *x, int *y, int n) {
    MF_DYN_SMEM(int, buf);
    int tid = threadIdx.x, i = blockIdx.x * blockDim.x + tid;
    buf[tid] = i < n ? x[i] : -7;
    __syncthreads();
    int j = blockIdx.x * blockDim.x + (blockDim.x - 1 - tid);
    if (j < n) y[j] = buf[tid];
}

__global__ void k_read_uninit_dyn(float *out) {
    MF_DYN_SMEM(float, buf);
    out[threadIdx.x] = buf[threadIdx.x];
}

__global__ void k_read_uninit_static(float *out) {
    __shared__ float s[64];
    if (threadIdx.x == 0) s[1] = 5.0f;
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x];
}

__global__ void k_big_smem(float *out) {
    MF_DYN_SMEM(float, buf);
    buf[threadIdx.x] = (float)threadIdx.x;
    buf[60000 + threadIdx.x] = 1.0f; /* beyond 48 KiB: needs the opt-in */
    __syncthreads();
    out[threadIdx.x] = buf[threadIdx.x] + buf[60000 + threadIdx.x];
}

__device__ __forceinline__ float warp_sum_down(float v) {
    for (int off = warpSize / 2; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}
__device__ __forceinline__ float warp_sum_xor(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

/* per warp: sums (down: lane 0; xor: all lanes), broadcast, inclusive scan, votes */
__global__ void k_warp(const float *x, float *down, float *xr, float *bc, int *scan, unsigned *ballot, int *any,
                       int *all, int *red) {
    int i = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x % 32;
    float v = x[i];
    float d = warp_sum_down(v);
    if (lane == 0) down[i / 32] = d;
    xr[i] = warp_sum_xor(v);
    bc[i] = __shfl_sync(0xffffffffu, v, 5);
    int s = (int)v;
    for (int off = 1; off < 32; off <<= 1) {
        int o = __shfl_up_sync(0xffffffffu, s, off);
        if (lane >= off) s += o;
    }
    scan[i] = s;
    unsigned b = __ballot_sync(0xffffffffu, v > 2.0f);
    if (lane == 0) ballot[i / 32] = b;
    any[i] = __any_sync(0xffffffffu, v > 6.5f);
    all[i] = __all_sync(0xffffffffu, v >= 0.0f);
    red[i] = __reduce_add_sync(0xffffffffu, (int)v) + 1000 * __reduce_max_sync(0xffffffffu, (int)v);
    __syncwarp();
}

/* sub-warp groups (width 8) and a partial last warp (block of 40 threads) */
__global__ void k_warp_width(const int *x, int *out) {
    int t = threadIdx.x;
    int v = x[t];
    for (int off = 4; off > 0; off >>= 1) v += __shfl_xor_sync(__activemask(), v, off, 8);
    out[t] = v;
}

/* shuffle from a lane that does not exist: poison */
__global__ void k_warp_partial_read(float *out) {
    float v = (float)threadIdx.x;
    out[threadIdx.x] = __shfl_down_sync(0xffffffffu, v, 8);
}

__global__ void k_hist(const float *x, int n, float *hist, int *ihist, int *imax, unsigned long long *total,
                       float *fmax_) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int bin = (int)(x[i] * 16.0f);
    if (bin > 15) bin = 15;
    atomicAdd(&hist[bin], 1.0f);
    atomicAdd(&ihist[bin], 1);
    atomicMax(imax, (int)(x[i] * 1000000.0f));
    atomicAdd(total, 1ull);
    /* float max through atomicCAS, the usual idiom */
    int *addr = (int *)fmax_, old = *addr, assumed;
    do {
        assumed = old;
        old = atomicCAS(addr, assumed, __float_as_int(fmaxf(x[i], __int_as_float(assumed))));
    } while (assumed != old);
}

__global__ void k_coords(int *out, int *count) {
    int gx = blockIdx.x * blockDim.x + threadIdx.x;
    int gy = blockIdx.y * blockDim.y + threadIdx.y;
    int gz = blockIdx.z * blockDim.z + threadIdx.z;
    int W = gridDim.x * blockDim.x, H = gridDim.y * blockDim.y;
    int idx = (gz * H + gy) * W + gx;
    out[3 * idx + 0] = gx;
    out[3 * idx + 1] = gy;
    out[3 * idx + 2] = gz;
    atomicAdd(&count[idx], 1);
}

__global__ void k_divergent_sites(int *out) {
    if (threadIdx.x < 16) {
        out[threadIdx.x] = 1;
        __syncthreads(); /* site A */
    } else {
        out[threadIdx.x] = 2;
        __syncthreads(); /* site B */
    }
}
static const int SITE_A = __LINE__ - 6, SITE_B = __LINE__ - 3;

__global__ void k_early_exit_barrier(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    x[i] += 1.0f;
    __syncthreads();
    x[i] *= 2.0f;
}

__global__ void k_warp_deadlock(int *out) {
    int v = threadIdx.x;
    if (threadIdx.x < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
    __syncthreads();
    out[threadIdx.x] = v;
}

__global__ void k_count_sync(const int *x, int *out) {
    int c = __syncthreads_count(x[threadIdx.x] > 0);
    int a = __syncthreads_and(x[threadIdx.x] > -100);
    int o = __syncthreads_or(x[threadIdx.x] > 1000);
    out[threadIdx.x] = c * 100 + a * 10 + o;
}

__global__ void k_noop(void) {}
__global__ void k_mark(int *p) { p[blockIdx.x * blockDim.x + threadIdx.x] = 1; }

/* 2-pass softmax over rows: one block per row, 128 threads, warp shuffles + shared memory */
__device__ __forceinline__ float warp_max(float v) {
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}
__device__ __forceinline__ float block_reduce(float v, float *sm, bool is_max) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    v = is_max ? warp_max(v) : warp_sum_xor(v);
    if (lane == 0) sm[warp] = v;
    __syncthreads();
    float r = lane < nw ? sm[lane] : (is_max ? -INFINITY : 0.0f);
    r = is_max ? warp_max(r) : warp_sum_xor(r);
    __syncthreads(); /* sm is reused by the next call */
    return r;
}
__global__ void __launch_bounds__(128) k_softmax(const float *__restrict__ x, float *__restrict__ y, int cols) {
    __shared__ float sm[32];
    const float *xr = x + (size_t)blockIdx.x * cols;
    float *yr = y + (size_t)blockIdx.x * cols;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);
    m = block_reduce(m, sm, true);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += __expf(xr[c] - m);
    s = block_reduce(s, sm, false);
    float inv = __frcp_rn(s);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = __expf(xr[c] - m) * inv;
}

/* ---------------------------------------------------------------- helpers */
template <class T> static T *dev_from(const std::vector<T> &h) {
    T *d = nullptr;
    cudaMalloc(&d, h.size() * sizeof(T));
    cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
    return d;
}
template <class T> static std::vector<T> host_from(const T *d, size_t n) {
    std::vector<T> h(n);
    cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
}

/* ---------------------------------------------------------------- tests */
static void test_elementwise_odd_grid(void) {
    const int n = 1000003, block = 256, grid = (n + block - 1) / block; /* 1000192 threads */
    std::vector<float> hx(n);
    for (int i = 0; i < n; i++) hx[(size_t)i] = (float)(i % 1000) * 0.5f;
    float *x = dev_from(hx), *y = nullptr;
    int *count = nullptr;
    CK(cudaMalloc(&y, n * sizeof(float)));
    CK(cudaMalloc(&count, sizeof(int)));
    for (int o = 0; o < 3; o++) {
        mf_emu_set_order(ORDERS[o], 7);
        CK(cudaMemset(count, 0, sizeof(int)));
        CK(cudaMemset(y, 0, n * sizeof(float)));
        auto t0 = std::chrono::steady_clock::now();
        MF_LAUNCH(k_axpb, grid, block, 0, 0, x, y, n, 2.0f, 1.0f, count);
        double dt = seconds_since(t0);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        printf("    elementwise %d threads (%s order): %.3f s\n", grid * block, ORDER_NAMES[o], dt);
        MFT_CHECK(dt < TIME_LIMIT(1.0));
        std::vector<float> hy = host_from(y, (size_t)n);
        int bad = 0;
        for (int i = 0; i < n; i++) bad += hy[(size_t)i] != 2.0f * hx[(size_t)i] + 1.0f;
        MFT_CHECK(bad == 0);
        std::vector<int> c = host_from(count, 1);
        MFT_CHECK(c[0] == 1000000000 + n);
    }
    mf_emu_set_order(MF_EMU_ORDER_SHUFFLED, 0); /* the default */
    cudaFree(x); cudaFree(y); cudaFree(count);
}

static void test_thread_and_block_order(void) {
    const int nb = 6, bs = 64;
    int *first = nullptr, *blocks = nullptr, *next = nullptr;
    CK(cudaMalloc(&first, nb * sizeof(int)));
    CK(cudaMalloc(&blocks, nb * sizeof(int)));
    CK(cudaMalloc(&next, sizeof(int)));
    for (int o = 0; o < 3; o++) {
        mf_emu_set_order(ORDERS[o], 1234);
        CK(cudaMemset(first, 0xFF, nb * sizeof(int)));
        CK(cudaMemset(next, 0, sizeof(int)));
        MF_LAUNCH(k_first, nb, bs, 0, 0, first, blocks, next);
        CK(cudaGetLastError());
        std::vector<int> f = host_from(first, nb), b = host_from(blocks, nb);
        if (ORDERS[o] == MF_EMU_ORDER_IN) {
            for (int i = 0; i < nb; i++) { MFT_CHECK(f[(size_t)i] == 0); MFT_CHECK(b[(size_t)i] == i); }
        } else if (ORDERS[o] == MF_EMU_ORDER_REVERSED) {
            for (int i = 0; i < nb; i++) { MFT_CHECK(f[(size_t)i] == bs - 1); MFT_CHECK(b[(size_t)i] == nb - 1 - i); }
        } else {
            int not_zero = 0, not_ordered = 0;
            for (int i = 0; i < nb; i++) { not_zero += f[(size_t)i] != 0; not_ordered += b[(size_t)i] != i; }
            MFT_CHECK(not_zero > 0 && not_ordered > 0);
            std::vector<int> seen(nb, 0);
            for (int i = 0; i < nb; i++) if (b[(size_t)i] >= 0 && b[(size_t)i] < nb) seen[(size_t)b[(size_t)i]]++;
            for (int i = 0; i < nb; i++) MFT_CHECK(seen[(size_t)i] == 1);
        }
    }
    mf_emu_set_order(MF_EMU_ORDER_SHUFFLED, 0); /* the default */
    cudaFree(first); cudaFree(blocks); cudaFree(next);
}

static void test_reduction_all_orders(void) {
    const int nblocks = 1000, n = nblocks * 256 - 77;
    std::vector<float> hx((size_t)n);
    unsigned seed = 1;
    for (int i = 0; i < n; i++) hx[(size_t)i] = (float)(lcg(seed) % 17) - 8.0f; /* integers: sums are exact */
    float *x = dev_from(hx), *out = nullptr;
    CK(cudaMalloc(&out, nblocks * sizeof(float)));
    for (int o = 0; o < 3; o++) {
        mf_emu_set_order(ORDERS[o], 99);
        auto t0 = std::chrono::steady_clock::now();
        MF_LAUNCH(k_block_sum<256>, nblocks, 256, 0, 0, x, out, n);
        double dt = seconds_since(t0);
        CK(cudaGetLastError());
        printf("    reduction 1000 x 256 threads, 9 barriers (%s order): %.3f s\n", ORDER_NAMES[o], dt);
        MFT_CHECK(dt < TIME_LIMIT(3.0));
        std::vector<float> h = host_from(out, nblocks);
        int bad = 0;
        for (int b = 0; b < nblocks; b++) {
            double ref = 0;
            for (int i = b * 256; i < (b + 1) * 256 && i < n; i++) ref += hx[(size_t)i];
            bad += (double)h[(size_t)b] != ref;
        }
        MFT_CHECK(bad == 0);
    }
    mf_emu_set_order(MF_EMU_ORDER_SHUFFLED, 0); /* the default */
    cudaFree(x); cudaFree(out);
}

static void test_missing_barrier_detected(void) {
    const int nblocks = 8, n = nblocks * 256;
    std::vector<float> hx((size_t)n);
    for (int i = 0; i < n; i++) hx[(size_t)i] = (float)(i % 13) + 1.0f;
    float *x = dev_from(hx), *out = nullptr;
    CK(cudaMalloc(&out, nblocks * sizeof(float)));
    int wrong_orders = 0;
    for (int o = 0; o < 3; o++) {
        mf_emu_set_order(ORDERS[o], 5);
        MF_LAUNCH(k_block_sum_racy, nblocks, 256, 0, 0, x, out, n);
        CK(cudaGetLastError());
        std::vector<float> h = host_from(out, nblocks);
        int wrong = 0;
        for (int b = 0; b < nblocks; b++) {
            double ref = 0;
            for (int i = b * 256; i < (b + 1) * 256; i++) ref += hx[(size_t)i];
            wrong += (double)h[(size_t)b] != ref;
        }
        printf("    racy reduction, %s order: %d of %d blocks wrong\n", ORDER_NAMES[o], wrong, nblocks);
        wrong_orders += wrong > 0;
    }
    MFT_CHECK(wrong_orders >= 1);
    /* thread 0 runs the whole loop first in the natural order, before the others added their halves */
    mf_emu_set_order(MF_EMU_ORDER_SHUFFLED, 0); /* the default */
    MF_LAUNCH(k_block_sum_racy, nblocks, 256, 0, 0, x, out, n);
    std::vector<float> h = host_from(out, nblocks);
    double ref0 = 0;
    for (int i = 0; i < 256; i++) ref0 += hx[(size_t)i];
    MFT_CHECK((double)h[0] != ref0);
    cudaFree(x); cudaFree(out);
}

static void test_dynamic_smem(void) {
    const int n = 1000, bs = 128, nb = (n + bs - 1) / bs;
    std::vector<int> hx((size_t)n);
    for (int i = 0; i < n; i++) hx[(size_t)i] = i * 3 + 1;
    int *x = dev_from(hx), *y = nullptr;
    CK(cudaMalloc(&y, n * sizeof(int)));
    CK(cudaMemset(y, 0, n * sizeof(int)));
    for (int o = 0; o < 3; o++) {
        mf_emu_set_order(ORDERS[o], 3);
        MF_LAUNCH(k_reverse_dyn, nb, bs, bs * sizeof(int), 0, x, y, n);
        CK(cudaGetLastError());
        std::vector<int> h = host_from(y, (size_t)n);
        int bad = 0;
        for (int i = 0; i < n; i++) {
            int b = i / bs, t = bs - 1 - i % bs, src = b * bs + t;
            int want = src < n ? hx[(size_t)src] : -7;
            bad += h[(size_t)i] != want;
        }
        MFT_CHECK(bad == 0);
    }
    mf_emu_set_order(MF_EMU_ORDER_SHUFFLED, 0); /* the default */

    /* uninitialised shared memory reads NaN (dynamic and static) */
    float *f = nullptr;
    CK(cudaMalloc(&f, 64 * sizeof(float)));
    MF_LAUNCH(k_read_uninit_dyn, 1, 64, 64 * sizeof(float), 0, f);
    CK(cudaGetLastError());
    std::vector<float> hf = host_from(f, 64);
    MFT_CHECK(isnan(hf[0]) && isnan(hf[63]));
    MF_LAUNCH(k_read_uninit_static, 2, 64, 0, 0, f);
    CK(cudaGetLastError());
    hf = host_from(f, 64);
    MFT_CHECK(isnan(hf[0]) && hf[1] == 5.0f && isnan(hf[63]));

    /* over 48 KiB needs cudaFuncSetAttribute; over the opt-in limit always fails */
    const size_t big = (60000 + 64) * sizeof(float); /* 240256 bytes > 232448, the opt-in limit */
    mf_emu_set_verbose(0);
    MF_LAUNCH(k_big_smem, 1, 64, big, 0, f);
    MFT_CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    MFT_CHECK(cudaFuncSetAttribute(k_big_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)big) == cudaErrorInvalidValue);
    MFT_CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    MFT_CHECK(strstr(mf_emu_last_message(), "232448") != nullptr);
    MF_LAUNCH(k_big_smem, 1, 64, big, 0, f);
    MFT_CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    mf_emu_set_verbose(1);
    cudaFree(f);
    cudaFree(x); cudaFree(y);
}

__global__ void k_smem_100k(float *out) {
    MF_DYN_SMEM(float, buf);
    int t = threadIdx.x;
    for (int i = t; i < 25000; i += blockDim.x) buf[i] = (float)i;
    __syncthreads();
    float s = 0;
    for (int i = t; i < 25000; i += blockDim.x) s += buf[24999 - i];
    out[t] = s;
}

static void test_smem_optin(void) {
    float *f = nullptr;
    CK(cudaMalloc(&f, 128 * sizeof(float)));
    mf_emu_set_verbose(0);
    MF_LAUNCH(k_smem_100k, 1, 128, 100000, 0, f);
    MFT_CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    mf_emu_set_verbose(1);
    CK(cudaFuncSetAttribute(k_smem_100k, cudaFuncAttributeMaxDynamicSharedMemorySize, 100000));
    MF_LAUNCH(k_smem_100k, 1, 128, 100000, 0, f);
    CK(cudaGetLastError());
    std::vector<float> h = host_from(f, 128);
    double total = 0;
    for (int t = 0; t < 128; t++) total += h[(size_t)t];
    MFT_NEAR(total, 24999.0 * 25000.0 / 2.0, 1e-5);
    cudaFree(f);
}

static void test_warp_primitives(void) {
    const int nb = 3, bs = 96, n = nb * bs, nw = n / 32;
    std::vector<float> hx((size_t)n);
    unsigned seed = 11;
    for (int i = 0; i < n; i++) hx[(size_t)i] = (float)(lcg(seed) % 8);
    float *x = dev_from(hx), *down, *xr, *bc;
    int *scan, *any, *all, *red;
    unsigned *ballot;
    CK(cudaMalloc(&down, nw * sizeof(float))); CK(cudaMalloc(&xr, n * sizeof(float)));
    CK(cudaMalloc(&bc, n * sizeof(float))); CK(cudaMalloc(&scan, n * sizeof(int)));
    CK(cudaMalloc(&ballot, nw * sizeof(unsigned))); CK(cudaMalloc(&any, n * sizeof(int)));
    CK(cudaMalloc(&all, n * sizeof(int))); CK(cudaMalloc(&red, n * sizeof(int)));
    for (int o = 0; o < 3; o++) {
        mf_emu_set_order(ORDERS[o], 17);
        MF_LAUNCH(k_warp, nb, bs, 0, 0, x, down, xr, bc, scan, ballot, any, all, red);
        CK(cudaGetLastError());
        std::vector<float> hd = host_from(down, nw), hxr = host_from(xr, n), hbc = host_from(bc, n);
        std::vector<int> hs = host_from(scan, n), ha = host_from(any, n), hl = host_from(all, n), hr = host_from(red, n);
        std::vector<unsigned> hb = host_from(ballot, nw);
        int bad = 0;
        for (int w = 0; w < nw; w++) {
            float sum = 0; unsigned bal = 0; int anyv = 0, mx = 0, run = 0;
            for (int l = 0; l < 32; l++) {
                float v = hx[(size_t)(w * 32 + l)];
                sum += v; if (v > 2.0f) bal |= 1u << l; if (v > 6.5f) anyv = 1; if ((int)v > mx) mx = (int)v;
            }
            bad += hd[(size_t)w] != sum;
            bad += hb[(size_t)w] != bal;
            for (int l = 0; l < 32; l++) {
                size_t i = (size_t)(w * 32 + l);
                run += (int)hx[i];
                bad += hxr[i] != sum;
                bad += hbc[i] != hx[(size_t)(w * 32 + 5)];
                bad += hs[i] != run;
                bad += ha[i] != anyv;
                bad += hl[i] != 1;
                bad += hr[i] != (int)sum + 1000 * mx;
            }
        }
        MFT_CHECK(bad == 0);
    }
    mf_emu_set_order(MF_EMU_ORDER_SHUFFLED, 0); /* the default */

    /* width 8 groups, block of 40 threads: the last warp has 8 live lanes */
    std::vector<int> hi(40);
    for (int i = 0; i < 40; i++) hi[(size_t)i] = i;
    int *xi = dev_from(hi), *oi = nullptr;
    CK(cudaMalloc(&oi, 40 * sizeof(int)));
    MF_LAUNCH(k_warp_width, 1, 40, 0, 0, xi, oi);
    CK(cudaGetLastError());
    std::vector<int> ho = host_from(oi, 40);
    int bad = 0;
    for (int i = 0; i < 40; i++) {
        int g = i / 8 * 8, want = 0;
        for (int j = g; j < g + 8; j++) want += j;
        bad += ho[(size_t)i] != want;
    }
    MFT_CHECK(bad == 0);

    /* reading a lane that does not exist yields NaN, not stale data */
    float *pf = nullptr;
    CK(cudaMalloc(&pf, 20 * sizeof(float)));
    MF_LAUNCH(k_warp_partial_read, 1, 20, 0, 0, pf);
    CK(cudaGetLastError());
    std::vector<float> hp = host_from(pf, 20);
    MFT_CHECK(hp[0] == 8.0f && hp[11] == 19.0f && isnan(hp[12]) && isnan(hp[19]));

    cudaFree(pf); cudaFree(xi); cudaFree(oi);
    cudaFree(x); cudaFree(down); cudaFree(xr); cudaFree(bc); cudaFree(scan); cudaFree(ballot);
    cudaFree(any); cudaFree(all); cudaFree(red);
}

static void test_atomic_histogram(void) {
    const int n = 100000;
    std::vector<float> hx((size_t)n);
    unsigned seed = 42;
    for (int i = 0; i < n; i++) hx[(size_t)i] = (float)(lcg(seed) % 1000000) / 1000000.0f;
    float *x = dev_from(hx), *hist, *fm;
    int *ih, *im;
    unsigned long long *tot;
    CK(cudaMalloc(&hist, 16 * sizeof(float))); CK(cudaMalloc(&ih, 16 * sizeof(int)));
    CK(cudaMalloc(&im, sizeof(int))); CK(cudaMalloc(&tot, sizeof(unsigned long long))); CK(cudaMalloc(&fm, sizeof(float)));
    CK(cudaMemset(hist, 0, 16 * sizeof(float))); CK(cudaMemset(ih, 0, 16 * sizeof(int)));
    CK(cudaMemset(im, 0, sizeof(int))); CK(cudaMemset(tot, 0, sizeof(unsigned long long))); CK(cudaMemset(fm, 0, sizeof(float)));
    MF_LAUNCH(k_hist, (n + 255) / 256, 256, 0, 0, x, n, hist, ih, im, tot, fm);
    CK(cudaGetLastError());
    std::vector<float> h = host_from(hist, 16), hm = host_from(fm, 1);
    std::vector<int> hi = host_from(ih, 16), hmax = host_from(im, 1);
    std::vector<unsigned long long> ht = host_from(tot, 1);
    int ref[16] = {0}, rmax = 0;
    float fmx = 0;
    for (int i = 0; i < n; i++) {
        int b = (int)(hx[(size_t)i] * 16.0f);
        ref[b > 15 ? 15 : b]++;
        rmax = std::max(rmax, (int)(hx[(size_t)i] * 1000000.0f));
        fmx = std::max(fmx, hx[(size_t)i]);
    }
    for (int b = 0; b < 16; b++) { MFT_CHECK(h[(size_t)b] == (float)ref[b]); MFT_CHECK(hi[(size_t)b] == ref[b]); }
    MFT_CHECK(hmax[0] == rmax);
    MFT_CHECK(ht[0] == (unsigned long long)n);
    MFT_CHECK(hm[0] == fmx);
    cudaFree(x); cudaFree(hist); cudaFree(ih); cudaFree(im); cudaFree(tot); cudaFree(fm);
}

static void test_multidim(void) {
    dim3 grid(3, 4, 2), block(4, 3, 5);
    const int W = 12, H = 12, D = 10, N = W * H * D;
    int *out, *count;
    CK(cudaMalloc(&out, 3 * N * sizeof(int)));
    CK(cudaMalloc(&count, N * sizeof(int)));
    for (int o = 0; o < 3; o++) {
        mf_emu_set_order(ORDERS[o], 8);
        CK(cudaMemset(count, 0, N * sizeof(int)));
        MF_LAUNCH(k_coords, grid, block, 0, 0, out, count);
        CK(cudaGetLastError());
        std::vector<int> h = host_from(out, 3 * N), c = host_from(count, N);
        int bad = 0;
        for (int z = 0; z < D; z++)
            for (int y = 0; y < H; y++)
                for (int xx = 0; xx < W; xx++) {
                    size_t idx = (size_t)((z * H + y) * W + xx);
                    bad += h[3 * idx] != xx || h[3 * idx + 1] != y || h[3 * idx + 2] != z || c[idx] != 1;
                }
        MFT_CHECK(bad == 0);
    }
    mf_emu_set_order(MF_EMU_ORDER_SHUFFLED, 0); /* the default */
    cudaFree(out); cudaFree(count);
}

static void test_divergent_barrier_reported(void) {
    int *o = nullptr;
    float *fx = nullptr;
    CK(cudaMalloc(&o, 64 * sizeof(int)));
    CK(cudaMalloc(&fx, 100 * sizeof(float)));
    CK(cudaMemset(fx, 0, 100 * sizeof(float)));
    mf_emu_set_verbose(0);
    char want[64];

    /* two different barrier sites */
    MF_LAUNCH(k_divergent_sites, 2, 32, 0, 0, o);
    MFT_CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure);
    MFT_CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    MFT_CHECK(cudaGetLastError() == cudaSuccess);
    const char *m = mf_emu_last_message();
    printf("    message: %s\n", m);
    MFT_CHECK(strstr(m, "divergent") != nullptr);
    MFT_CHECK(strstr(m, "k_divergent_sites") != nullptr);
    /* both blocks diverge: the report names the first to run (the default order shuffles them) */
    MFT_CHECK(strstr(m, "block (0,0,0)") != nullptr || strstr(m, "block (1,0,0)") != nullptr);
    snprintf(want, sizeof want, "test_cuda_emu.cpp:%d", SITE_A);
    MFT_CHECK(strstr(m, want) != nullptr);
    snprintf(want, sizeof want, "test_cuda_emu.cpp:%d", SITE_B);
    MFT_CHECK(strstr(m, want) != nullptr);

    /* early return before a barrier: fine while every thread of the block is in range */
    MF_LAUNCH(k_early_exit_barrier, 4, 32, 0, 0, fx, 100);
    MFT_CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    m = mf_emu_last_message();
    printf("    message: %s\n", m);
    MFT_CHECK(strstr(m, "exited") != nullptr && strstr(m, "block (3,0,0)") != nullptr);
    std::vector<float> hf = host_from(fx, 100);
    MFT_CHECK(hf[0] == 2.0f && hf[95] == 2.0f); /* blocks before the failing one completed */

    /* half a warp in a shuffle, the other half at __syncthreads */
    MF_LAUNCH(k_warp_deadlock, 1, 32, 0, 0, o);
    MFT_CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    m = mf_emu_last_message();
    printf("    message: %s\n", m);
    MFT_CHECK(strstr(m, "warp deadlock") != nullptr);
    mf_emu_set_verbose(1);

    /* the emulator is usable afterwards */
    int *mk = nullptr;
    CK(cudaMalloc(&mk, 64 * sizeof(int)));
    CK(cudaMemset(mk, 0, 64 * sizeof(int)));
    MF_LAUNCH(k_mark, 2, 32, 0, 0, mk);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<int> hm = host_from(mk, 64);
    int sum = 0;
    for (int i = 0; i < 64; i++) sum += hm[(size_t)i];
    MFT_CHECK(sum == 64);
    cudaFree(mk); cudaFree(o); cudaFree(fx);
}

static void test_syncthreads_count(void) {
    std::vector<int> hx(64);
    for (int i = 0; i < 64; i++) hx[(size_t)i] = i % 3 == 0 ? 1 : -1;
    int *x = dev_from(hx), *o = nullptr;
    CK(cudaMalloc(&o, 64 * sizeof(int)));
    MF_LAUNCH(k_count_sync, 1, 64, 0, 0, x, o);
    CK(cudaGetLastError());
    std::vector<int> h = host_from(o, 64);
    MFT_CHECK(h[0] == 22 * 100 + 10 + 0 && h[63] == h[0]);
    cudaFree(x); cudaFree(o);
}

static void test_invalid_launch(void) {
    int *p = nullptr;
    CK(cudaMalloc(&p, 4096 * sizeof(int)));
    CK(cudaMemset(p, 0, 4096 * sizeof(int)));
    unsigned long long before = mf_emu_launch_count();
    mf_emu_set_verbose(0);
    MF_LAUNCH(k_mark, 1, 1025, 0, 0, p);
    MFT_CHECK(cudaPeekAtLastError() == cudaErrorInvalidConfiguration);
    MFT_CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    MFT_CHECK(cudaGetLastError() == cudaSuccess);
    MF_LAUNCH(k_mark, 1, dim3(32, 32, 2), 0, 0, p);
    MFT_CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    MF_LAUNCH(k_mark, 1, dim3(1, 1, 65), 0, 0, p);
    MFT_CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    MF_LAUNCH(k_mark, dim3(1, 65536, 1), 32, 0, 0, p);
    MFT_CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    MF_LAUNCH(k_mark, dim3(1, 1, 65536), 32, 0, 0, p);
    MFT_CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    MF_LAUNCH(k_mark, 0, 32, 0, 0, p);
    MFT_CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    MF_LAUNCH(k_mark, 1, 32, 300000, 0, p);
    MFT_CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    mf_emu_set_verbose(1);
    MFT_CHECK(mf_emu_launch_count() == before);
    std::vector<int> h = host_from(p, 4096);
    int sum = 0;
    for (int i = 0; i < 4096; i++) sum += h[(size_t)i];
    MFT_CHECK(sum == 0);
    MF_LAUNCH(k_mark, 1, 1024, 0, 0, p); /* the limit itself is fine */
    CK(cudaGetLastError());
    MF_LAUNCH(k_noop, 1, 1, 0, 0);
    CK(cudaGetLastError());
    cudaFree(p);
}

static void ref_gemm_rm(bool ta, bool tb, int M, int N, int K, float alpha, const std::vector<float> &A,
                        const std::vector<float> &B, float beta, std::vector<float> &C) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0;
            for (int l = 0; l < K; l++) {
                double a = ta ? A[(size_t)(l * M + i)] : A[(size_t)(i * K + l)];
                double b = tb ? B[(size_t)(j * K + l)] : B[(size_t)(l * N + j)];
                acc += a * b;
            }
            C[(size_t)(i * N + j)] = (float)(alpha * acc + (beta == 0.0f ? 0.0 : beta * C[(size_t)(i * N + j)]));
        }
}

static void test_cublas(void) {
    cublasHandle_t h;
    MFT_CHECK(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    MFT_CHECK(cublasSetStream(h, st) == CUBLAS_STATUS_SUCCESS);
    MFT_CHECK(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH) == CUBLAS_STATUS_SUCCESS);
    const int M = 37, N = 29, K = 23, BATCH = 3;
    unsigned seed = 5;
    std::vector<float> A((size_t)(M * K * BATCH)), B((size_t)(K * N * BATCH)), C0((size_t)(M * N * BATCH));
    for (float &v : A) v = (float)(lcg(seed) % 2001) / 1000.0f - 1.0f;
    for (float &v : B) v = (float)(lcg(seed) % 2001) / 1000.0f - 1.0f;
    for (float &v : C0) v = (float)(lcg(seed) % 2001) / 1000.0f - 1.0f;
    float *dA = dev_from(A), *dB = dev_from(B), *dC = nullptr;
    CK(cudaMalloc(&dC, C0.size() * sizeof(float)));
    for (int combo = 0; combo < 4; combo++) {
        bool ta = combo & 1, tb = combo & 2;
        for (int bz = 0; bz < 2; bz++) {
            float alpha = 1.5f, beta = bz ? 0.0f : 0.75f;
            /* beta == 0 must not read C: fill it with NaN */
            if (beta == 0.0f) CK(cudaMemset(dC, 0xFF, C0.size() * sizeof(float)));
            else CK(cudaMemcpy(dC, C0.data(), C0.size() * sizeof(float), cudaMemcpyHostToDevice));
            /* row-major C = op(A) op(B)  <=>  column-major C^T = op(B)^T op(A)^T */
            int lda = ta ? M : K, ldb = tb ? K : N;
            MFT_CHECK(cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha,
                                  dB, ldb, dA, lda, &beta, dC, N) == CUBLAS_STATUS_SUCCESS);
            std::vector<float> got = host_from(dC, (size_t)(M * N)), ref(C0.begin(), C0.begin() + M * N);
            std::vector<float> Ab(A.begin(), A.begin() + M * K), Bb(B.begin(), B.begin() + K * N);
            ref_gemm_rm(ta, tb, M, N, K, alpha, Ab, Bb, beta, ref);
            double maxerr = 0;
            for (int i = 0; i < M * N; i++) maxerr = std::max(maxerr, (double)fabsf(got[(size_t)i] - ref[(size_t)i]));
            MFT_CHECK(maxerr < 1e-5);

            /* strided batched: same thing per batch */
            if (beta == 0.0f) CK(cudaMemset(dC, 0xFF, C0.size() * sizeof(float)));
            else CK(cudaMemcpy(dC, C0.data(), C0.size() * sizeof(float), cudaMemcpyHostToDevice));
            MFT_CHECK(cublasSgemmStridedBatched(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                                                &alpha, dB, ldb, (long long)K * N, dA, lda, (long long)M * K, &beta, dC,
                                                N, (long long)M * N, BATCH) == CUBLAS_STATUS_SUCCESS);
            got = host_from(dC, C0.size());
            maxerr = 0;
            for (int b = 0; b < BATCH; b++) {
                std::vector<float> Ab2(A.begin() + b * M * K, A.begin() + (b + 1) * M * K);
                std::vector<float> Bb2(B.begin() + b * K * N, B.begin() + (b + 1) * K * N);
                std::vector<float> r2(C0.begin() + b * M * N, C0.begin() + (b + 1) * M * N);
                ref_gemm_rm(ta, tb, M, N, K, alpha, Ab2, Bb2, beta, r2);
                for (int i = 0; i < M * N; i++)
                    maxerr = std::max(maxerr, (double)fabsf(got[(size_t)(b * M * N + i)] - r2[(size_t)i]));
            }
            MFT_CHECK(maxerr < 1e-5);
        }
    }
    /* TF32 mode rounds the inputs: visibly less exact, still close */
    MFT_CHECK(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH) == CUBLAS_STATUS_SUCCESS);
    float one = 1.0f, zero = 0.0f;
    MFT_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, dB, N, dA, K, &zero, dC, N) == CUBLAS_STATUS_SUCCESS);
    std::vector<float> got = host_from(dC, (size_t)(M * N)), ref((size_t)(M * N));
    std::vector<float> Ab(A.begin(), A.begin() + M * K), Bb(B.begin(), B.begin() + K * N);
    ref_gemm_rm(false, false, M, N, K, 1.0f, Ab, Bb, 0.0f, ref);
    double maxerr = 0;
    for (int i = 0; i < M * N; i++) maxerr = std::max(maxerr, (double)fabsf(got[(size_t)i] - ref[(size_t)i]));
    MFT_CHECK(maxerr > 1e-5 && maxerr < 2e-2);
    /* invalid arguments */
    mf_emu_set_verbose(0);
    MFT_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, dB, N - 1, dA, K, &zero, dC, N) ==
              CUBLAS_STATUS_INVALID_VALUE);
    mf_emu_set_verbose(1);
    MFT_CHECK(strcmp(cublasGetStatusString(CUBLAS_STATUS_SUCCESS), "success") == 0);
    MFT_CHECK(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
    CK(cudaStreamDestroy(st));
    cudaFree(dA); cudaFree(dB); cudaFree(dC);
}

static void test_memcpy_and_runtime(void) {
    size_t live0 = mf_emu_live_allocations(nullptr);
    const int n = 1000;
    std::vector<double> h((size_t)n), back((size_t)n);
    for (int i = 0; i < n; i++) h[(size_t)i] = i * 0.25;
    double *a = nullptr, *b = nullptr;
    CK(cudaMalloc(&a, n * sizeof(double)));
    CK(cudaMalloc((void **)&b, n * sizeof(double)));
    MFT_CHECK(((uintptr_t)a & 255) == 0);
    MFT_CHECK(mf_emu_live_allocations(nullptr) == live0 + 2);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CK(cudaMemcpy(a, h.data(), n * sizeof(double), cudaMemcpyHostToDevice));
    CK(cudaMemcpyAsync(b, a, n * sizeof(double), cudaMemcpyDeviceToDevice, st));
    CK(cudaMemsetAsync(b, 0, 10 * sizeof(double), st));
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy(back.data(), b, n * sizeof(double), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < n; i++) bad += back[(size_t)i] != (i < 10 ? 0.0 : h[(size_t)i]);
    MFT_CHECK(bad == 0);
    CK(cudaMemcpy(back.data(), a + 500, 500 * sizeof(double), cudaMemcpyDefault));
    MFT_CHECK(back[0] == h[500]);

    mf_emu_set_verbose(0);
    std::vector<double> big((size_t)n + 1);
    MFT_CHECK(cudaMemcpy(a, big.data(), big.size() * sizeof(double), cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
    MFT_CHECK(cudaMemcpy(h.data(), a, 8, cudaMemcpyHostToDevice) == cudaErrorInvalidValue); /* swapped */
    MFT_CHECK(cudaFree(h.data()) == cudaErrorInvalidValue);
    MFT_CHECK(cudaSetDevice(1) == cudaErrorInvalidDevice);
    cudaGetLastError();
    mf_emu_set_verbose(1);

    int count = 0, dev = -1;
    CK(cudaGetDeviceCount(&count)); MFT_CHECK(count == 1);
    CK(cudaSetDevice(0)); CK(cudaGetDevice(&dev)); MFT_CHECK(dev == 0);
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    MFT_CHECK(strcmp(p.name, "cuda_emu") == 0 && p.warpSize == 32 && p.major == 9 && p.minor == 0);
    MFT_CHECK(p.sharedMemPerBlock == 48 * 1024 && p.sharedMemPerBlockOptin == 227 * 1024 && p.maxThreadsPerBlock == 1024);
    MFT_CHECK(p.multiProcessorCount > 0);
    MFT_CHECK(strcmp(cudaGetErrorName(cudaErrorLaunchFailure), "cudaErrorLaunchFailure") == 0);
    MFT_CHECK(strcmp(cudaGetErrorString(cudaSuccess), "no error") == 0);

    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0, st));
    MF_LAUNCH(k_noop, 1000, 128, 0, st);
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float ms = -1;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    MFT_CHECK(ms >= 0.0f);
    CK(cudaEventDestroy(e0)); CK(cudaEventDestroy(e1));
    CK(cudaStreamDestroy(st));
    CK(cudaFree(a)); CK(cudaFree(b)); CK(cudaFree(nullptr));
    MFT_CHECK(mf_emu_live_allocations(nullptr) == live0);
}

static void test_softmax_rows(void) {
    const int shapes[3][2] = {{37, 1000}, {5, 77}, {3, 5}}; /* cols below, around and above 128 */
    for (int s = 0; s < 3; s++) {
        int rows = shapes[s][0], cols = shapes[s][1];
        std::vector<float> hx((size_t)(rows * cols));
        unsigned seed = 77 + s;
        for (float &v : hx) v = (float)(lcg(seed) % 20001) / 1000.0f - 10.0f;
        float *x = dev_from(hx), *y = nullptr;
        CK(cudaMalloc(&y, hx.size() * sizeof(float)));
        for (int o = 0; o < 3; o++) {
            mf_emu_set_order(ORDERS[o], 21);
            MF_LAUNCH(k_softmax, rows, 128, 0, 0, x, y, cols);
            CK(cudaGetLastError());
            std::vector<float> hy = host_from(y, hx.size());
            double maxerr = 0;
            for (int r = 0; r < rows; r++) {
                double m = -1e300, z = 0;
                for (int c = 0; c < cols; c++) m = std::max(m, (double)hx[(size_t)(r * cols + c)]);
                for (int c = 0; c < cols; c++) z += exp((double)hx[(size_t)(r * cols + c)] - m);
                for (int c = 0; c < cols; c++) {
                    double ref = exp((double)hx[(size_t)(r * cols + c)] - m) / z;
                    double e = fabs(hy[(size_t)(r * cols + c)] - ref);
                    if (!(e <= maxerr)) maxerr = e; /* NaN sticks */
                }
            }
            MFT_CHECK(maxerr < 1e-6);
        }
        cudaFree(x); cudaFree(y);
    }
    mf_emu_set_order(MF_EMU_ORDER_SHUFFLED, 0); /* the default */
}

/* ---------------------------------------------------------------- WMMA stand-in (TF32 m16n16k8) */
static void test_tf32_rounding(void) {
    using nvcuda::wmma::__float_to_tf32;
    const float u = ldexpf(1.0f, -10); /* the TF32 ulp at 1 */
    MFT_CHECK(__float_to_tf32(1.0f + u) == 1.0f + u);           /* representable: unchanged */
    MFT_CHECK(__float_to_tf32(1.0f + u / 4) == 1.0f);           /* below half an ulp: down */
    MFT_CHECK(__float_to_tf32(1.0f + 3 * u / 4) == 1.0f + u);   /* above half: up */
    MFT_CHECK(__float_to_tf32(1.0f + u / 2) == 1.0f + u);       /* a tie: away from zero */
    MFT_CHECK(__float_to_tf32(-(1.0f + u / 2)) == -(1.0f + u));
    MFT_CHECK(__float_to_tf32(1.0f + u / 2 + u) == 1.0f + 2 * u);
    MFT_CHECK(__float_to_tf32(INFINITY) == INFINITY && __float_to_tf32(-INFINITY) == -INFINITY);
    MFT_CHECK(__float_to_tf32(NAN) != __float_to_tf32(NAN));
    MFT_CHECK(__float_to_tf32(0.0f) == 0.0f);
    /* 10 mantissa bits survive: 1/3 rounded keeps 11 significant bits */
    MFT_CHECK(fabsf(__float_to_tf32(1.0f / 3) - 1.0f / 3) <= ldexpf(1.0f, -13));
}

/* C [16 x 16] (+)= A [16 x 8] B [8 x 16] by one warp per 16-row tile, through shared memory as
   the attention kernels do. bcol: B given as [16][8] (col_major); cvt: inputs rounded with
   __float_to_tf32 (else the tensor core truncates them); ccol: C stored column-major. */
template <int BCOL>
__global__ void k_wmma(const float *a, const float *b, float *c, int cvt, int ccol, int accumulate) {
    namespace w = nvcuda::wmma;
    typedef typename std::conditional<BCOL != 0, w::col_major, w::row_major>::type LB;
    MF_DYN_SMEM(float, sm);
    float *as = sm, *bs = sm + 32 * 12, *cs = bs + 16 * 20; /* ld 12, 20, 20: padded, multiples of 4 */
    int t = threadIdx.x, warp = t / 32, tiles = blockDim.x / 32;
    for (int i = t; i < tiles * 16 * 8; i += blockDim.x) as[(i / 8) * 12 + i % 8] = a[i];
    for (int i = t; i < 128; i += blockDim.x) bs[BCOL ? (i % 16) * 20 + i / 16 : (i / 16) * 20 + i % 16] = b[i];
    for (int i = t; i < tiles * 256; i += blockDim.x) cs[(i / 16) * 20 + i % 16] = c[i];
    __syncthreads();
    {
        w::fragment<w::matrix_a, 16, 16, 8, w::precision::tf32, w::row_major> fa;
        w::fragment<w::matrix_b, 16, 16, 8, w::precision::tf32, LB> fb;
        w::fragment<w::accumulator, 16, 16, 8, float> fc;
        float *ct = cs + warp * 16 * 20;
        w::load_matrix_sync(fa, as + warp * 16 * 12, 12);
        w::load_matrix_sync(fb, bs, 20);
        if (cvt) {
            for (int i = 0; i < fa.num_elements; i++) fa.x[i] = w::__float_to_tf32(fa.x[i]);
            for (int i = 0; i < fb.num_elements; i++) fb.x[i] = w::__float_to_tf32(fb.x[i]);
        }
        if (accumulate) w::load_matrix_sync(fc, ct, 20, w::mem_row_major);
        else w::fill_fragment(fc, 0.0f);
        w::mma_sync(fc, fa, fb, fc);
        w::store_matrix_sync(ct, fc, 20, ccol ? w::mem_col_major : w::mem_row_major);
    }
    __syncthreads();
    for (int i = t; i < tiles * 256; i += blockDim.x) c[i] = cs[(i / 16) * 20 + i % 16];
}
__global__ void k_wmma_misaligned(float *c) {
    namespace w = nvcuda::wmma;
    MF_DYN_SMEM(float, sm);
    w::fragment<w::accumulator, 16, 16, 8, float> fc;
    w::fill_fragment(fc, 1.0f);
    w::store_matrix_sync(sm + 1, fc, 16, w::mem_row_major); /* 4-byte offset: a fault on the GPU */
    __syncthreads();
    if (threadIdx.x == 0) c[0] = sm[1];
}
static float trunc_tf32(float x) { uint32_t u; memcpy(&u, &x, 4); u &= 0xffffe000u; memcpy(&x, &u, 4); return x; }
static void test_wmma_tf32(void) {
    const int tiles = 2;
    float *a, *b, *c;
    std::vector<float> ha(tiles * 128), hb(128), hc(tiles * 256), out(tiles * 256);
    unsigned seed = 7;
    for (auto &x : ha) x = (float)(lcg(seed) % 20001) / 10000.0f - 1.0f;
    for (auto &x : hb) x = (float)(lcg(seed) % 20001) / 10000.0f - 1.0f;
    for (auto &x : hc) x = (float)(lcg(seed) % 20001) / 10000.0f - 1.0f;
    CK(cudaMalloc((void **)&a, ha.size() * 4)); CK(cudaMalloc((void **)&b, hb.size() * 4)); CK(cudaMalloc((void **)&c, hc.size() * 4));
    CK(cudaMemcpy(a, ha.data(), ha.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b, hb.data(), hb.size() * 4, cudaMemcpyHostToDevice));
    for (int o = 0; o < 3; o++)
        for (int v = 0; v < 16; v++) { /* bcol, cvt, ccol, accumulate */
            int bcol = v & 1, cvt = (v >> 1) & 1, ccol = (v >> 2) & 1, acc = (v >> 3) & 1;
            size_t smem = (32 * 12 + 16 * 20 + 32 * 20) * 4;
            double worst = 0, moved = 0;
            mf_emu_set_order(ORDERS[o], 11u + (unsigned)o);
            CK(cudaMemcpy(c, hc.data(), hc.size() * 4, cudaMemcpyHostToDevice));
            if (bcol) MF_LAUNCH(k_wmma<1>, 1, 32 * tiles, smem, 0, a, b, c, cvt, ccol, acc);
            else MF_LAUNCH(k_wmma<0>, 1, 32 * tiles, smem, 0, a, b, c, cvt, ccol, acc);
            CK(cudaGetLastError());
            CK(cudaMemcpy(out.data(), c, out.size() * 4, cudaMemcpyDeviceToHost));
            for (int t = 0; t < tiles; t++)
                for (int i = 0; i < 16; i++)
                    for (int j = 0; j < 16; j++) {
                        double ref = acc ? hc[(size_t)(t * 256 + i * 16 + j)] : 0.0, exact = ref;
                        for (int l = 0; l < 8; l++) {
                            float x = ha[(size_t)(t * 128 + i * 8 + l)], y = hb[(size_t)(l * 16 + j)];
                            float xr = cvt ? nvcuda::wmma::__float_to_tf32(x) : trunc_tf32(x);
                            float yr = cvt ? nvcuda::wmma::__float_to_tf32(y) : trunc_tf32(y);
                            ref += (double)xr * yr;
                            exact += (double)x * y;
                        }
                        /* stored column-major: element (i, j) of the tile lands at row j, column i */
                        float got = out[(size_t)(t * 256 + (ccol ? j * 16 + i : i * 16 + j))];
                        worst = std::max(worst, fabs(got - ref));
                        moved = std::max(moved, fabs(got - exact));
                    }
            if (!(worst <= 1e-5)) printf("    wmma variant %d order %s: max error %.3g\n", v, ORDER_NAMES[o], worst);
            MFT_CHECK(worst <= 1e-5);
            MFT_CHECK(moved > 1e-6 && moved < 1e-2); /* the TF32 rounding is there, and small */
        }
    mf_emu_set_order(MF_EMU_ORDER_SHUFFLED, 0); /* the default */
    mf_emu_set_verbose(0);
    MF_LAUNCH(k_wmma_misaligned, 1, 32, 4096, 0, c);
    MFT_CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    MFT_CHECK(strstr(mf_emu_last_message(), "misaligned") != nullptr);
    mf_emu_set_verbose(1);
    CK(cudaFree(a)); CK(cudaFree(b)); CK(cudaFree(c));
}

/* bf16 WMMA (m16n16k16) as the attention's bf16 kernels use it: A stored k-major (matrix_a
   col_major), B row_major, both __nv_bfloat16 in shared memory (ld 24: 48 bytes, a multiple of 16);
   C (+)= A B in fp32. bad_ldm: B's ldm 20 bf16 (40 bytes), which the hardware refuses. */
__global__ void k_wmma_bf16(const float *a, const float *b, float *c, int accumulate, int bad_ldm) {
    namespace w = nvcuda::wmma;
    MF_DYN_SMEM(float, cs);                                      /* C [16][20] */
    __nv_bfloat16 *at = (__nv_bfloat16 *)(cs + 16 * 20), *bs = at + 16 * 24; /* A^T [16][24], B [16][24] */
    int t = threadIdx.x;
    for (int i = t; i < 256; i += blockDim.x) {
        at[(i % 16) * 24 + i / 16] = __float2bfloat16(a[i]); /* a [16][16] row-major, k = i % 16 */
        bs[(i / 16) * 24 + i % 16] = __float2bfloat16(b[i]);
        cs[(i / 16) * 20 + i % 16] = c[i];
    }
    __syncthreads();
    {
        w::fragment<w::matrix_a, 16, 16, 16, __nv_bfloat16, w::col_major> fa;
        w::fragment<w::matrix_b, 16, 16, 16, __nv_bfloat16, w::row_major> fb;
        w::fragment<w::accumulator, 16, 16, 16, float> fc;
        w::load_matrix_sync(fa, at, 24);
        w::load_matrix_sync(fb, bs, bad_ldm ? 20 : 24);
        if (accumulate) w::load_matrix_sync(fc, cs, 20, w::mem_row_major);
        else w::fill_fragment(fc, 0.0f);
        w::mma_sync(fc, fa, fb, fc);
        w::store_matrix_sync(cs, fc, 20, w::mem_row_major);
    }
    __syncthreads();
    for (int i = t; i < 256; i += blockDim.x) c[i] = cs[(i / 16) * 20 + i % 16];
}
static void test_wmma_bf16(void) {
    float *a, *b, *c;
    std::vector<float> ha(256), hb(256), hc(256), out(256);
    unsigned seed = 9;
    size_t smem = 16 * 20 * 4 + 2 * 16 * 24 * 2;
    for (auto &x : ha) x = (float)(lcg(seed) % 20001) / 10000.0f - 1.0f;
    for (auto &x : hb) x = (float)(lcg(seed) % 20001) / 10000.0f - 1.0f;
    for (auto &x : hc) x = (float)(lcg(seed) % 20001) / 10000.0f - 1.0f;
    CK(cudaMalloc((void **)&a, 1024)); CK(cudaMalloc((void **)&b, 1024)); CK(cudaMalloc((void **)&c, 1024));
    CK(cudaMemcpy(a, ha.data(), 1024, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b, hb.data(), 1024, cudaMemcpyHostToDevice));
    for (int acc = 0; acc < 2; acc++) {
        double worst = 0, moved = 0;
        CK(cudaMemcpy(c, hc.data(), 1024, cudaMemcpyHostToDevice));
        MF_LAUNCH(k_wmma_bf16, 1, 32, smem, 0, a, b, c, acc, 0);
        CK(cudaGetLastError());
        CK(cudaMemcpy(out.data(), c, 1024, cudaMemcpyDeviceToHost));
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++) {
                double ref = acc ? hc[(size_t)(i * 16 + j)] : 0.0, exact = ref;
                for (int l = 0; l < 16; l++) {
                    float x = ha[(size_t)(i * 16 + l)], y = hb[(size_t)(l * 16 + j)];
                    ref += (double)__bfloat162float(__float2bfloat16(x)) * __bfloat162float(__float2bfloat16(y));
                    exact += (double)x * y;
                }
                worst = std::max(worst, fabs(out[(size_t)(i * 16 + j)] - ref));
                moved = std::max(moved, fabs(out[(size_t)(i * 16 + j)] - exact));
            }
        if (!(worst <= 1e-5)) printf("    bf16 wmma (accumulate %d): max error %.3g\n", acc, worst);
        MFT_CHECK(worst <= 1e-5);                 /* exact products of the rounded inputs, fp32 sums */
        MFT_CHECK(moved > 1e-4 && moved < 0.1);   /* the bf16 rounding (u = 2^-8) is there, and small */
    }
    mf_emu_set_verbose(0);
    MF_LAUNCH(k_wmma_bf16, 1, 32, smem, 0, a, b, c, 0, 1);
    MFT_CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    MFT_CHECK(strstr(mf_emu_last_message(), "ldm 20") != nullptr);
    mf_emu_set_verbose(1);
    CK(cudaFree(a)); CK(cudaFree(b)); CK(cudaFree(c));
}

/* ---------------------------------------------------------------- what an H200 may round otherwise */
/* a * b + c: nvcc contracts it into one FMA (the Makefile's EMU_FLAGS make the host compiler do the
   same). a = b = 1 + 2^-12: a * b = 1 + 2^-11 + 2^-24 rounds to 1 + 2^-11, so the separate ops give
   0 and the FMA gives 2^-24. */
__global__ void k_mul_add(const float *a, const float *b, const float *c, float *y) {
    int i = threadIdx.x;
    y[i] = a[i] * b[i] + c[i];
}
static void test_fp_contraction(void) {
    std::vector<float> a(1, 1.0f + 2.44140625e-4f), b(1, 1.0f + 2.44140625e-4f), c(1, -(1.0f + 4.8828125e-4f));
    float *da = dev_from(a), *db = dev_from(b), *dc = dev_from(c), *dy = nullptr;
    CK(cudaMalloc(&dy, sizeof(float)));
    MF_LAUNCH(k_mul_add, 1, 1, 0, 0, da, db, dc, dy);
    CK(cudaGetLastError());
    float y = host_from(dy, 1)[0];
    printf("    a*b+c in a kernel: %.9g (FMA: 2^-24 = %.9g; separately rounded: 0)\n", (double)y, (double)5.9604644775390625e-8f);
    MFT_CHECK(y == 5.9604644775390625e-8f);
    cudaFree(da); cudaFree(db); cudaFree(dc); cudaFree(dy);
}

/* cuBLAS: fp32 accumulation in an order that depends on the shape. One shape gives the same bits every
   time; the same product in row slices (other shapes) may not; every result stays within the fp32
   bound of a length-K sum (K eps |a||b|, with room) of the exact product. */
static void test_cublas_order_by_shape(void) {
    cublasHandle_t h;
    MFT_CHECK(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
    MFT_CHECK(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH) == CUBLAS_STATUS_SUCCESS);
    const int M = 24, N = 8, K = 600;
    unsigned seed = 9;
    std::vector<float> A((size_t)M * K), B((size_t)K * N);
    for (float &v : A) v = (float)(lcg(seed) % 20001) / 10000.0f - 1.0f;
    for (float &v : B) v = (float)(lcg(seed) % 20001) / 10000.0f - 1.0f;
    float *dA = dev_from(A), *dB = dev_from(B), *dC = nullptr;
    CK(cudaMalloc(&dC, (size_t)M * N * sizeof(float)));
    float one = 1.0f, zero = 0.0f;
    /* column-major C (M x N) = A (M x K, lda M) B (K x N) */
    MFT_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, M, dB, K, &zero, dC, M) == CUBLAS_STATUS_SUCCESS);
    std::vector<float> whole = host_from(dC, (size_t)M * N);
    MFT_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, dA, M, dB, K, &zero, dC, M) == CUBLAS_STATUS_SUCCESS);
    MFT_CHECK(memcmp(host_from(dC, (size_t)M * N).data(), whole.data(), whole.size() * sizeof(float)) == 0);
    double worst = 0, bound = 0;
    int differ = 0;
    for (int rows = 1; rows <= 12; rows++) { /* slices of `rows` rows: M/rows products of another shape */
        if (M % rows) continue;
        CK(cudaMemset(dC, 0xFF, (size_t)M * N * sizeof(float)));
        for (int r0 = 0; r0 < M; r0 += rows)
            MFT_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, rows, N, K, &one, dA + r0, M, dB, K, &zero, dC + r0, M) ==
                      CUBLAS_STATUS_SUCCESS);
        std::vector<float> sl = host_from(dC, (size_t)M * N);
        differ += memcmp(sl.data(), whole.data(), whole.size() * sizeof(float)) != 0;
        for (int j = 0; j < N; j++)
            for (int i = 0; i < M; i++) {
                double ex = 0, mag = 0;
                for (int l = 0; l < K; l++) {
                    ex += (double)A[(size_t)i + (size_t)l * M] * B[(size_t)l + (size_t)j * K];
                    mag += fabs((double)A[(size_t)i + (size_t)l * M] * B[(size_t)l + (size_t)j * K]);
                }
                double b = K * 5.9604644775390625e-8 * mag;
                worst = std::max(worst, fabs(sl[(size_t)i + (size_t)j * M] - ex) / b);
                worst = std::max(worst, fabs(whole[(size_t)i + (size_t)j * M] - ex) / b);
                bound = std::max(bound, b);
            }
    }
    printf("    %d of 6 row slicings differ from the product at once in some bit; worst error %.3g of K eps sum|ab|\n",
           differ, worst);
    MFT_CHECK(differ >= 3);
    MFT_CHECK(worst < 1.0);
    MFT_CHECK(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
    cudaFree(dA); cudaFree(dB); cudaFree(dC);
}

/* device math: within the CUDA Programming Guide's bounds of the exact value, not always correctly
   rounded, the same for the same input; correctly rounded functions exact; host calls exact */
__global__ void k_math(const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i], p = fabsf(v) + 0.25f;
    y[i * 10 + 0] = expf(v);
    y[i * 10 + 1] = logf(p);
    y[i * 10 + 2] = rsqrtf(p);
    y[i * 10 + 3] = __expf(v);
    y[i * 10 + 4] = __logf(p);
    y[i * 10 + 5] = __fdividef(v, p);
    y[i * 10 + 6] = tanhf(v);
    y[i * 10 + 7] = sinf(v);
    y[i * 10 + 8] = sqrtf(p);
    y[i * 10 + 9] = __frcp_rn(p);
}
static void test_fast_math_bounds(void) {
    const int n = 4096;
    std::vector<float> x((size_t)n);
    unsigned seed = 3;
    for (float &v : x) v = (float)((double)(lcg(seed) % 2000001) / 100000.0 - 10.0); /* [-10, 10] */
    x[0] = 0.0f;
    float *dx = dev_from(x), *dy = nullptr;
    CK(cudaMalloc(&dy, (size_t)n * 10 * sizeof(float)));
    MF_LAUNCH(k_math, (n + 127) / 128, 128, 0, 0, dx, dy, n);
    CK(cudaGetLastError());
    std::vector<float> y = host_from(dy, (size_t)n * 10);
    MF_LAUNCH(k_math, (n + 127) / 128, 128, 0, 0, dx, dy, n);
    MFT_CHECK(memcmp(host_from(dy, (size_t)n * 10).data(), y.data(), y.size() * sizeof(float)) == 0);
    static const char *const names[10] = {"expf", "logf", "rsqrtf", "__expf", "__logf", "__fdividef", "tanhf",
                                          "sinf", "sqrtf", "__frcp_rn"};
    double worst[10] = {0};
    int inexact[10] = {0}, bad[10] = {0};
    for (int i = 0; i < n; i++) {
        double v = x[(size_t)i], p = (double)(fabsf(x[(size_t)i]) + 0.25f); /* p as the kernel rounds it */
        double ex[10] = {exp(v), log(p), 1.0 / sqrt(p), exp(v), log(p), v / p, tanh(v), sin(v), sqrt(p), 1.0 / p};
        for (int f = 0; f < 10; f++) {
            double got = y[(size_t)i * 10 + f], e = ex[f];
            int ex2; frexp(e, &ex2);
            double ulp = ldexp(1.0, ex2 - 24), err = fabs(got - e) / ulp;
            /* the bound: ulps, or __expf's 2 + floor(|1.173 x|), or __logf's 2^-21.41 absolute on [0.5, 2] */
            double lim = f == 0 || f == 2 || f == 5 || f == 6 || f == 7 ? 2 : f == 1 ? 1
                       : f == 3 ? 2 + floor(fabs(1.173 * v))
                       : f == 4 ? (p >= 0.5 && p <= 2 ? exp2(-21.41) / ulp : 3) : 0.5;
            worst[f] = std::max(worst[f], err / lim);
            bad[f] += err > lim;
            inexact[f] += (float)e != (float)got;
        }
    }
    for (int f = 0; f < 10; f++) {
        printf("    %-10s %4d of %d not correctly rounded, worst error %.2f of its bound\n", names[f], inexact[f], n,
               worst[f]);
        MFT_CHECK(bad[f] == 0);
        MFT_CHECK(f >= 8 ? inexact[f] == 0 : inexact[f] > n / 4);
    }
    MFT_CHECK(y[0] == 1.0f); /* expf(0) is exact on the GPU too */
    cudaFree(dx); cudaFree(dy);
}

/* static __shared__ bytes and registers count against the block's limits, as nvcc's ptxas -v reports them
   (tests/cuda_kernel_resources.h for the library's kernels; declared here for the test's own) */
__global__ void k_static_smem(float *out) {
    __shared__ float buf[4096]; /* 16 KiB */
    MF_DYN_SMEM(float, dyn);
    int t = threadIdx.x;
    buf[t] = (float)t;
    dyn[t] = 1.0f;
    __syncthreads();
    out[t] = buf[blockDim.x - 1 - t] + dyn[t];
}
static void test_static_smem_and_registers(void) {
    float *f = nullptr;
    CK(cudaMalloc(&f, 1024 * sizeof(float)));
    mf_emu_set_kernel_resources(k_static_smem, 32, 16384);
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, k_static_smem));
    MFT_CHECK(fa.sharedSizeBytes == 16384 && fa.numRegs == 32 && fa.maxThreadsPerBlock == 1024 &&
              fa.maxDynamicSharedSizeBytes == 49152 - 16384);
    mf_emu_set_verbose(0);
    MF_LAUNCH(k_static_smem, 1, 128, 40000, 0, f); /* 40000 + 16384 > 48 KiB */
    MFT_CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    MFT_CHECK(strstr(mf_emu_last_message(), "16384 static") != nullptr);
    MFT_CHECK(cudaFuncSetAttribute(k_static_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 232448 - 16384 + 1) ==
              cudaErrorInvalidValue);
    (void)cudaGetLastError();
    mf_emu_set_verbose(1);
    MF_LAUNCH(k_static_smem, 1, 128, 32768, 0, f); /* exactly 48 KiB in all */
    CK(cudaGetLastError());
    CK(cudaFuncSetAttribute(k_static_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 40000));
    MF_LAUNCH(k_static_smem, 1, 128, 40000, 0, f);
    CK(cudaGetLastError());
    MFT_CHECK(host_from(f, 128)[0] == 128.0f);
    /* 128 registers x 1024 threads = 2^17 > 65536 */
    mf_emu_set_kernel_resources(k_static_smem, 128, 16384);
    CK(cudaFuncGetAttributes(&fa, k_static_smem));
    MFT_CHECK(fa.numRegs == 128 && fa.maxThreadsPerBlock == 512);
    mf_emu_set_verbose(0);
    MF_LAUNCH(k_static_smem, 1, 1024, 4096, 0, f);
    MFT_CHECK(cudaGetLastError() == cudaErrorLaunchOutOfResources);
    mf_emu_set_verbose(1);
    MF_LAUNCH(k_static_smem, 1, 512, 2048, 0, f);
    CK(cudaGetLastError());
    cudaFree(f);
}

static void test_no_leaks(void) { MFT_CHECK(mf_emu_live_allocations(nullptr) == 0); }

int main(void) {
    auto t0 = std::chrono::steady_clock::now();
    MFT_RUN(test_elementwise_odd_grid);
    MFT_RUN(test_thread_and_block_order);
    MFT_RUN(test_reduction_all_orders);
    MFT_RUN(test_missing_barrier_detected);
    MFT_RUN(test_dynamic_smem);
    MFT_RUN(test_smem_optin);
    MFT_RUN(test_warp_primitives);
    MFT_RUN(test_atomic_histogram);
    MFT_RUN(test_multidim);
    MFT_RUN(test_divergent_barrier_reported);
    MFT_RUN(test_syncthreads_count);
    MFT_RUN(test_invalid_launch);
    MFT_RUN(test_cublas);
    MFT_RUN(test_memcpy_and_runtime);
    MFT_RUN(test_softmax_rows);
    MFT_RUN(test_tf32_rounding);
    MFT_RUN(test_wmma_tf32);
    MFT_RUN(test_wmma_bf16);
    MFT_RUN(test_fp_contraction);
    MFT_RUN(test_cublas_order_by_shape);
    MFT_RUN(test_fast_math_bounds);
    MFT_RUN(test_static_smem_and_registers);
    MFT_RUN(test_no_leaks);
    printf("    total %.2f s\n", seconds_since(t0));
    return mft_finish();
}
