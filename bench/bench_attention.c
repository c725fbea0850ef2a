/* bench_attention.c - the attention op, forward and forward + backward (causal).
 *
 * CPU (default): fused mf_attention (heads-major [B, H, T, dk], and token-major [B, T, H, dk] as the
 * softmax mixers call it) vs the composed matmul / scale / softmax / matmul.
 *     gcc -O3 -march=native -fopenmp -I. bench/bench_attention.c -o build/bench_attention -lm
 *     build/bench_attention [B H T dk [threads]]        (default 8 8 256 32, all threads)
 *
 * CUDA: mf_attention's fused kernels on the GPU at T = 1024, 2048, 4096, 8192 (the same shapes and
 * columns as bench/torch_sdpa.py), one row per precision of --precision (a list of fp32, tf32, bf16:
 * mf_cuda_set_precision; default fp32,tf32):
 *     make build/cuda/bench_attention      (nvcc -x cu -DMETAFORMER_CUDA ...)
 *     build/cuda/bench_attention --device cuda [--precision LIST] [B H dk [T ...]]
 *                                          (default 4 8 64 1024 2048 4096 8192)
 * peak_MB: the most device memory the run held (the drop of cudaMemGetInfo's free memory from just
 * before the context was set up: q, k, v, their gradients, the arena, the output and its gradient).
 * Smoke test without a GPU (the emulator; tiny shapes, meaningless times):
 *     g++ -std=c++14 -include tests/cuda_emu.h -DMETAFORMER_CUDA -I. -Itests -x c++ bench/bench_attention.c \
 *         -o build/bench_attention_emu && build/bench_attention_emu --device cuda 1 2 16 64 130
 * Timing: best of 10 after 2 warm-ups, a host timer around each call with cudaDeviceSynchronize
 * before and after. FLOPs as FlashAttention's benchmarks count them: forward 4 B H T^2 dk (two
 * products of 2 T^2 dk each per head; dv = dk), halved when causal; forward + backward 3.5x the
 * forward (the backward's five products = 2.5x). The fwd+bwd time includes a mean over the output
 * and its backward (O(B H T dk), negligible). */
#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#if defined(METAFORMER_CUDA) && !defined(MF_CUDA_EMU)
#include <cuda_runtime_api.h> /* this file may be compiled as C, the library by nvcc (make build/cuda/bench_attention) */
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

static int B = 8, H = 8, T = 256, DK = 32;

static void sync_device(void) {
#ifdef METAFORMER_CUDA
    cudaDeviceSynchronize();
#endif
}

/* device memory in use now (CUDA build; 0 elsewhere): total - free */
static double gpu_used_mb(void) {
#ifdef METAFORMER_CUDA
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
    return (double)(total_b - free_b) / 1048576.0;
#else
    return 0;
#endif
}

/* ms per forward (fwd) and per forward + backward (total), best of `reps` after a warm-up.
   fused: 1 mf_attention, 2 mf_attention_layout on token-major [B, T, H, dk] operands (rows H dk
   floats apart, as the softmax mixers read their projections), 0 the composed ops. cuda: 0 CPU, 1 GPU at precision prec. peak: the
   activation arena's peak bytes; gpu_mb (CUDA): the most device memory the run held */
static void run(int fused, int threads, int cuda, mf_precision prec, double *fwd, double *total, size_t *peak,
                double *gpu_mb) {
    mf_ctx *ctx = mf_ctx_new(1);
    int shape[4], rep, reps = 10;
    mf_tensor *q, *k, *v;
    float scale = 1.0f / sqrtf((float)DK);
    double gpu_base = gpu_used_mb();
    shape[0] = B; shape[1] = fused == 2 ? T : H; shape[2] = fused == 2 ? H : T; shape[3] = DK;
    *fwd = *total = 1e30;
    *gpu_mb = 0;
    if (cuda && (mf_ctx_set_device(ctx, MF_DEVICE_CUDA) < 0 || mf_cuda_set_precision(ctx, prec) < 0)) {
        fprintf(stderr, "error: %s\n", mf_error(ctx));
        exit(1);
    }
    mf_set_threads(ctx, threads);
    q = mf_param(ctx, "q", 4, shape); k = mf_param(ctx, "k", 4, shape); v = mf_param(ctx, "v", 4, shape);
    mf_init_normal(ctx, q, 0, 1); mf_init_normal(ctx, k, 0, 1); mf_init_normal(ctx, v, 0, 1);
    for (rep = -2; rep < reps && mf_ok(ctx); rep++) {
        double t0, t1, t2;
        mf_tensor *o, *loss;
        sync_device();
        t0 = mf_time();
        o = fused == 2 ? mf_attention_layout(ctx, q, k, v, scale, 1, 0.0f, MF_ATTN_TOKENS_MAJOR)
            : fused ? mf_attention(ctx, q, k, v, scale, 1, 0.0f)
                    : mf_matmul(ctx, mf_softmax(ctx, mf_scale(ctx, mf_matmul(ctx, q, k, 0, 1), scale), 1), v, 0, 0);
        sync_device();
        t1 = mf_time();
        loss = mf_mean(ctx, o);
        mf_backward(ctx, loss);
        sync_device();
        t2 = mf_time();
        if (cuda && gpu_used_mb() - gpu_base > *gpu_mb) *gpu_mb = gpu_used_mb() - gpu_base;
        if (rep >= 0) {
            if (t1 - t0 < *fwd) *fwd = t1 - t0;
            if (t2 - t0 < *total) *total = t2 - t0;
        }
        mf_zero_grad(ctx);
        mf_reset(ctx);
    }
    if (!mf_ok(ctx)) { fprintf(stderr, "error: %s\n", mf_error(ctx)); exit(1); }
    *peak = mf_activation_peak_bytes(ctx);
    *fwd *= 1e3; *total *= 1e3;
    mf_ctx_free(ctx);
}

/* --precision LIST ("fp32,tf32,bf16"): the precisions in out, their count (0: a name is wrong) */
static int parse_precisions(const char *list, mf_precision *out, int max) {
    char name[16];
    int n = 0, len;
    while (*list) {
        len = (int)strcspn(list, ", ");
        if (len > 0) {
            if (len >= (int)sizeof name || n == max) return 0;
            memcpy(name, list, (size_t)len);
            name[len] = 0;
            if (mf_precision_from_name(name) < 0) return 0;
            out[n++] = (mf_precision)mf_precision_from_name(name);
        }
        list += len + (list[len] != 0);
    }
    return n;
}

/* the GPU sweep: one line per (precision, T), the columns of bench/torch_sdpa.py */
static int run_cuda(int argc, char **argv) {
    int Ts[16] = {1024, 2048, 4096, 8192}, nT = 4;
    char why[256], name[320] = "GPU";
    mf_precision precs[8] = {MF_PREC_FP32, MF_PREC_TF32};
    int i, p, np = 2;
    B = 4; H = 8; DK = 64;
    if (argc >= 2 && strcmp(argv[0], "--precision") == 0) {
        np = parse_precisions(argv[1], precs, 8);
        if (np == 0) { fprintf(stderr, "bench_attention: --precision %s: a list of fp32, tf32, bf16\n", argv[1]); return 2; }
        argc -= 2; argv += 2;
    }
    if (argc >= 3) { B = atoi(argv[0]); H = atoi(argv[1]); DK = atoi(argv[2]); }
    if (argc >= 4) /* other sequence lengths */
        for (nT = 0; nT < 16 && nT + 3 < argc; nT++) Ts[nT] = atoi(argv[nT + 3]);
    if (!mf_cuda_available(why, sizeof why)) {
        fprintf(stderr, "bench_attention --device cuda: %s\n", why[0] ? why : "this build has no CUDA (make build/cuda/bench_attention)");
        return 1;
    }
#ifdef METAFORMER_CUDA
    {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, 0) == cudaSuccess) snprintf(name, sizeof name, "%s (sm_%d%d)", p.name, p.major, p.minor);
    }
#endif
    printf("# mf_attention on %s: B=%d H=%d dk=dv=%d causal; fwd FLOPs = 4*B*H*T^2*dk/2, fwd+bwd = 3.5x\n", name, B, H, DK);
    printf("%-16s %-5s %6s %10s %10s %10s %11s %9s\n", "impl", "path", "T", "fwd_ms", "fwd_TF/s", "fwdbwd_ms",
           "fwdbwd_TF/s", "peak_MB");
    for (p = 0; p < np; p++)
        for (i = 0; i < nT; i++) {
            double f, t, flops, gpu_mb;
            size_t peak;
            T = Ts[i];
            run(1, 0, 1, precs[p], &f, &t, &peak, &gpu_mb);
            flops = 4.0 * B * H * (double)T * T * DK / 2;
            printf("%-16s %-5s %6d %10.3f %10.2f %10.3f %11.2f %9.1f\n", "metaformer", mf_precision_name(precs[p]), T, f,
                   flops / (f * 1e-3) / 1e12, t, 3.5 * flops / (t * 1e-3) / 1e12, gpu_mb);
            fflush(stdout);
        }
    return 0;
}

int main(int argc, char **argv) {
    int threads = 0;
    double ff, ft, cf, ct, tf, tt;
    size_t fp, cp, tp;
    double gpu_mb;
    if (argc >= 3 && strcmp(argv[1], "--device") == 0) {
        if (strcmp(argv[2], "cuda") == 0) return run_cuda(argc - 3, argv + 3);
        if (strcmp(argv[2], "cpu") != 0) { fprintf(stderr, "--device cpu or --device cuda\n"); return 1; }
        argc -= 2; argv += 2;
    }
    if (argc >= 5) { B = atoi(argv[1]); H = atoi(argv[2]); T = atoi(argv[3]); DK = atoi(argv[4]); }
    if (argc >= 6) threads = atoi(argv[5]);
    run(1, threads, 0, MF_PREC_FP32, &ff, &ft, &fp, &gpu_mb);
    run(2, threads, 0, MF_PREC_FP32, &tf, &tt, &tp, &gpu_mb);
    run(0, threads, 0, MF_PREC_FP32, &cf, &ct, &cp, &gpu_mb);
    printf("attention B=%d H=%d T=%d dk=%d causal, threads=%d (0 = all)\n", B, H, T, DK, threads);
    printf("  fused    : fwd %8.2f ms  fwd+bwd %8.2f ms  arena peak %8.2f MiB\n", ff, ft, fp / 1048576.0);
    printf("  fused, token-major [B, T, H, dk]: fwd %8.2f ms  fwd+bwd %8.2f ms  arena peak %8.2f MiB\n", tf, tt,
           tp / 1048576.0);
    printf("  composed : fwd %8.2f ms  fwd+bwd %8.2f ms  arena peak %8.2f MiB\n", cf, ct, cp / 1048576.0);
    printf("  speedup  : fwd %8.2fx    fwd+bwd %8.2fx\n", cf / ff, ct / ft);
    return 0;
}
