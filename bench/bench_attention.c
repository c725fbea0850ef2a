/* bench_attention.c - the attention op, forward and forward + backward (causal).
 *
 * CPU (default): fused mf_attention vs the composed matmul / scale / softmax / matmul.
 *     gcc -O3 -march=native -fopenmp -I. bench/bench_attention.c -o build/bench_attention -lm
 *     build/bench_attention [B H T dk [threads]]        (default 8 8 256 32, all threads)
 *
 * CUDA: mf_attention's fused kernels on the GPU, exact fp32 and TF32 tensor cores, at
 * T = 1024, 2048, 4096, 8192 (the same shapes and columns as bench/torch_sdpa.py):
 *     make build/cuda/bench_attention      (nvcc -x cu -DMETAFORMER_CUDA ...)
 *     build/cuda/bench_attention --device cuda [B H dk [T ...]]  (default 4 8 64 1024 2048 4096 8192)
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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int B = 8, H = 8, T = 256, DK = 32;

static void sync_device(void) {
#ifdef METAFORMER_CUDA
    cudaDeviceSynchronize();
#endif
}

/* ms per forward (fwd) and per forward + backward (total), best of `reps` after a warm-up.
   fused: 1 mf_attention, 0 the composed ops. cuda: 0 CPU, 1 GPU fp32, 2 GPU TF32 */
static void run(int fused, int threads, int cuda, double *fwd, double *total, size_t *peak) {
    mf_ctx *ctx = mf_ctx_new(1);
    int shape[4], rep, reps = 10;
    mf_tensor *q, *k, *v;
    float scale = 1.0f / sqrtf((float)DK);
    shape[0] = B; shape[1] = H; shape[2] = T; shape[3] = DK;
    *fwd = *total = 1e30;
    if (cuda && mf_ctx_set_device(ctx, MF_DEVICE_CUDA) < 0) { fprintf(stderr, "error: %s\n", mf_error(ctx)); exit(1); }
    if (cuda == 2) mf_cuda_set_tf32(ctx, 1);
    mf_set_threads(ctx, threads);
    q = mf_param(ctx, "q", 4, shape); k = mf_param(ctx, "k", 4, shape); v = mf_param(ctx, "v", 4, shape);
    mf_init_normal(ctx, q, 0, 1); mf_init_normal(ctx, k, 0, 1); mf_init_normal(ctx, v, 0, 1);
    for (rep = -2; rep < reps && mf_ok(ctx); rep++) {
        double t0, t1, t2;
        mf_tensor *o, *loss;
        sync_device();
        t0 = mf_time();
        o = fused ? mf_attention(ctx, q, k, v, scale, 1, 0.0f)
                  : mf_matmul(ctx, mf_softmax(ctx, mf_scale(ctx, mf_matmul(ctx, q, k, 0, 1), scale), 1), v, 0, 0);
        sync_device();
        t1 = mf_time();
        loss = mf_mean(ctx, o);
        mf_backward(ctx, loss);
        sync_device();
        t2 = mf_time();
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

/* the GPU sweep: one line per (path, T), the columns of bench/torch_sdpa.py */
static int run_cuda(int argc, char **argv) {
    int Ts[16] = {1024, 2048, 4096, 8192}, nT = 4;
    char why[256], name[320] = "GPU";
    int i, path;
    B = 4; H = 8; DK = 64;
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
    printf("%-12s %-5s %6s %10s %10s %10s %10s\n", "impl", "path", "T", "fwd_ms", "fwd_TF/s", "fwdbwd_ms", "fwdbwd_TF/s");
    for (path = 1; path <= 2; path++)
        for (i = 0; i < nT; i++) {
            double f, t, flops;
            size_t peak;
            T = Ts[i];
            run(1, 0, path, &f, &t, &peak);
            flops = 4.0 * B * H * (double)T * T * DK / 2;
            printf("%-12s %-5s %6d %10.3f %10.2f %10.3f %10.2f\n", "metaformer", path == 1 ? "fp32" : "tf32", T, f,
                   flops / (f * 1e-3) / 1e12, t, 3.5 * flops / (t * 1e-3) / 1e12);
            fflush(stdout);
        }
    return 0;
}

int main(int argc, char **argv) {
    int threads = 0;
    double ff, ft, cf, ct;
    size_t fp, cp;
    if (argc >= 3 && strcmp(argv[1], "--device") == 0) {
        if (strcmp(argv[2], "cuda") == 0) return run_cuda(argc - 3, argv + 3);
        if (strcmp(argv[2], "cpu") != 0) { fprintf(stderr, "--device cpu or --device cuda\n"); return 1; }
        argc -= 2; argv += 2;
    }
    if (argc >= 5) { B = atoi(argv[1]); H = atoi(argv[2]); T = atoi(argv[3]); DK = atoi(argv[4]); }
    if (argc >= 6) threads = atoi(argv[5]);
    run(1, threads, 0, &ff, &ft, &fp);
    run(0, threads, 0, &cf, &ct, &cp);
    printf("attention B=%d H=%d T=%d dk=%d causal, threads=%d (0 = all)\n", B, H, T, DK, threads);
    printf("  fused    : fwd %8.2f ms  fwd+bwd %8.2f ms  arena peak %8.2f MiB\n", ff, ft, fp / 1048576.0);
    printf("  composed : fwd %8.2f ms  fwd+bwd %8.2f ms  arena peak %8.2f MiB\n", cf, ct, cp / 1048576.0);
    printf("  speedup  : fwd %8.2fx    fwd+bwd %8.2fx\n", cf / ff, ct / ft);
    return 0;
}
