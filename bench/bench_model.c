/* bench_model.c - training-step throughput of the metaformer.h language model, one mixer per run.
 *
 *   gcc -O3 -march=native -fopenmp -I. bench/bench_model.c -o build/bench_model -lm
 *   ./build/bench_model --mixer sdpa --steps 10 --warmup 2 --threads 2
 *
 * One timed step = mf_model_loss (forward + cross-entropy) + mf_backward + mf_clip_grad_norm(1.0)
 * + mf_optimizer_step (Adam, PyTorch defaults, lr 1e-3) + mf_zero_grad + mf_reset, on random
 * tokens (seeded, a fresh batch every step, the targets are the next tokens). The middle three are
 * the one call mf_train_update where the header has it (MF_TRAIN_UPDATE; bench/ab.sh builds this
 * file against older headers too).
 *
 * Flags (defaults = the reference config of the benchmark):
 *   --mixer NAME   a mixer of the library (mf_mixer_name); --list-mixers prints those of this build
 *   --d-model 256 --heads 8 --layers 4 --d-ff 1024 --seq 256 --batch 8 --vocab 65 --pool-size 3
 *   --pos none|learned|sinusoidal (learned)   --act relu|gelu (gelu)
 *   --mem-len N --compressive --c-mem-len N --rate c   (relative: XL memory, compressive transformer;
 *                  consecutive steps continue each other, so the memories are full after warm-up)
 *   --chunk N --dpfp-nu N --feature dpfp|elu1         (fast_weights / linear)
 *   --label NAME   the name in the RESULT line (default: the mixer, or "compressive")
 *   --steps 10 --warmup 2 --threads 2 (0 = all)
 *   --max-time S   stop after S seconds in all (at least one warm-up step and one timed step; warm-up
 *                  ends early past S/4; 0 = never)
 *   --profile N    then N more steps under the library's op profiler (mf_set_profile): time per op
 *                  forward / backward with the GEMM inside apart, the optimizer, the gradient
 *                  zeroing (mean of the N steps), and one "OPS ... kind=K fwd_ms bwd_ms" line per kind
 *   --peak N       (only with -DMF_BENCH_OPENBLAS ... -lopenblas) measure OpenBLAS sgemm on one
 *                  N x N x N product with --threads threads instead, best of 7 timings
 *   --device cpu|cuda   cuda: only in the CUDA build (make build/cuda/bench_model:
 *                  nvcc -x cu -DMETAFORMER_CUDA bench/bench_model.c -lcublas).
 *   --precision fp32|tf32|bf16   the context's arithmetic (mf_ctx_set_precision): exact fp32, TF32 tensor
 *                  cores (cuda), or bf16 mixed precision (cuda, or a CPU with AMX or AVX512-BF16: the
 *                  output line's precision then names the CPU's kernel); --tf32 = --precision tf32.
 *                  Each step ends by reading the loss (mf_item),
 *                  which waits for the GPU, so the step time is the GPU's. Instead of the peak RSS the
 *                  CUDA run reports gpu_mb: the most device memory the model and its timed steps held
 *                  (the drop of cudaMemGetInfo's free memory from just before the context was set up, so
 *                  cuBLAS's workspace counts, the CUDA runtime's own context does not). The warm-up
 *                  steps do not count: the first step sizes the device arena in doubling blocks (up to
 *                  twice what it needs), which mf_reset turns into one block of what it needed.
 *                  --profile on a GPU waits for the device around every op (mf_set_profile): each
 *                  op's own time, launch latency included; the profiled step is slower than a timed one.
 *
 * Analytic FLOPs per token (the library's mf_model_flops: each mixer family counts its own, a
 * registered mixer through its flops hook) count every matmul (2*m*n*k) of the model math; backward = 2 x
 * forward. Attention QK^T and PV count the CAUSAL half only (query i sees i + 1 keys: T(T+1)/2
 * pairs per sequence). Metric / quadratic count the projection p, the per-head p M (2*dk*dk per
 * head and token) and the output map E - the spec's efficient evaluation (docs/math.md §9.2). Relative
 * counts a third dot product per visible key (the position term Q.R) and mem_len (+ c_mem_len)
 * memory keys per query; compressive adds the compressor (2 D^2 per token) and the reconstruction
 * loss forward (q of h, k/v of the compressed and the raw memories, two unmasked attentions).
 * Fast weights count 6 dk d_dot per head and token (W phi(k), the rank-1 update, W phi(q)),
 * linear 4 dk d_dot; feedback counts per token: q and out projections, the memory keys/values
 * (per layer for the original variant, once for feedback_kv), attention over the t earlier
 * steps (mean (T - 1) / 2, three dot products per key as relative). Work an
 * implementation adds on top (recomputing P in the flash backward) is not counted. LayerNorm, GELU,
 * softmax, Adam are not counted.
 *
 * Output: human-readable lines, then one machine-readable line:
 *   RESULT impl=c mixer=sdpa tok_s=... step_ms=... gflops=... mflop_tok=... rss_mb=... ...
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <sys/resource.h>
#ifdef _OPENMP
#include <omp.h> /* omp_set_num_threads: the header's own #include is skipped with METAFORMER_IMPLEMENTATION_DONE */
#endif

#define METAFORMER_IMPLEMENTATION
#include "metaformer.h"
#if defined(METAFORMER_CUDA) && !defined(MF_CUDA_EMU)
#include <cuda_runtime_api.h> /* this file may be compiled as C, the library by nvcc (make build/cuda/bench_model) */
#endif

#ifdef MF_BENCH_OPENBLAS
#include <cblas.h>
void openblas_set_num_threads(int num_threads);
char *openblas_get_corename(void);
#endif

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double cpu_seconds(void) { /* user + system time of the process, all threads */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

/* clipping (max norm 1), the Adam update and zeroing the gradients */
static void end_step(mf_ctx *ctx, const mf_optimizer *opt) {
#ifdef MF_TRAIN_UPDATE
    mf_train_update(ctx, opt, 1.0f);
#else
    mf_clip_grad_norm(ctx, 1.0f);
    mf_optimizer_step(ctx, opt);
    mf_zero_grad(ctx);
#endif
}
static double peak_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* Linux: kilobytes */
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint32_t rnd(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12; rng_state ^= rng_state << 25; rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1DULL) >> 32);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* forward matmul FLOPs per token, the library's count (each family's; see the header comment); a
   header from before mf_model_flops (bench/run.sh --header git:REV) gives none: 0 */
static double flops_per_token_fwd(const mf_model_config *c, int T, int full_attention) {
#ifdef METAFORMER_MODEL_FLOPS
    return mf_model_flops(c, T, full_attention);
#else
    (void)c; (void)T; (void)full_attention;
    return 0;
#endif
}

/* ---- --profile N: the library's op profiler over N more steps ---------------------------- */
/* n_steps training steps on one batch with mf_set_profile on: the profile table (ms per step, the
   mean of the steps), then one machine-readable line per kind, GEMM apart, for bench/run.sh's
   breakdown next to PyTorch's profiler (bench/torch_harness.py --profile):
     OPS impl=c mixer=NAME kind=KIND fwd_ms=... bwd_ms=...
   kind "glue" is the step's time outside the timed ops (the model code between them, the arena). */
static void profile_steps(mf_ctx *ctx, mf_model *m, const mf_optimizer *opt, const int32_t *ids,
                          const int32_t *tg, int B, int T, int n_steps, const char *label) {
    static const char *const kinds[] = {"matmul", "mixer", "layernorm", "elementwise", "loss", "embedding", "copy",
                                        "optimizer", "memset"};
    mf_profile_entry e[64];
    double f[10] = {0}, b[10] = {0}, wall = 0, sum = 0, t0;
    char *text;
    int n, i, k, len, step;
    mf_set_profile(ctx, 1);
    for (step = 0; step < n_steps; step++) {
        t0 = now();
        mf_backward(ctx, mf_model_loss(m, ids, tg, B, T));
        end_step(ctx, opt);
        mf_reset(ctx);
        wall += now() - t0;
    }
    mf_set_profile(ctx, 0);
    len = mf_profile_report(ctx, n_steps, NULL, 0);
    if (len > 0 && (text = (char *)malloc((size_t)len + 1)) != NULL) {
        mf_profile_report(ctx, n_steps, text, (size_t)len + 1);
        printf("\nprofile (ms per step, the mean of %d steps of %.2f ms wall)\n%s",
               n_steps, wall * 1e3 / n_steps, text);
        free(text);
    }
    n = mf_profile_entries(ctx, e, 64);
    for (i = 0; i < n && i < 64; i++) {
        for (k = 0; k < 9 && strcmp(kinds[k], e[i].kind); k++) {}
        f[k] += e[i].fwd_s - e[i].fwd_gemm_s; b[k] += e[i].bwd_s - e[i].bwd_gemm_s;
        f[9] += e[i].fwd_gemm_s; b[9] += e[i].bwd_gemm_s;
        sum += e[i].fwd_s + e[i].bwd_s;
    }
    printf("OPS impl=c mixer=%s kind=gemm fwd_ms=%.3f bwd_ms=%.3f\n", label, f[9] * 1e3 / n_steps, b[9] * 1e3 / n_steps);
    for (k = 0; k < 9; k++)
        printf("OPS impl=c mixer=%s kind=%s fwd_ms=%.3f bwd_ms=%.3f\n", label, kinds[k], f[k] * 1e3 / n_steps,
               b[k] * 1e3 / n_steps);
    printf("OPS impl=c mixer=%s kind=glue fwd_ms=%.3f bwd_ms=0\n", label, (wall - sum) * 1e3 / n_steps);
    printf("OPS impl=c mixer=%s kind=step fwd_ms=%.3f bwd_ms=0\n", label, wall * 1e3 / n_steps);
}

#ifdef MF_BENCH_OPENBLAS
static int peak_gemm(int n, int threads) {
    float *A = (float *)malloc(sizeof(float) * (size_t)n * n), *B = (float *)malloc(sizeof(float) * (size_t)n * n);
    float *C = (float *)malloc(sizeof(float) * (size_t)n * n);
    double best = 0, times[7];
    long i;
    int r;
    if (!A || !B || !C) { fprintf(stderr, "out of memory\n"); return 1; }
    for (i = 0; i < (long)n * n; i++) { A[i] = (float)(rnd() >> 8) / 16777216.0f - 0.5f; B[i] = (float)(rnd() >> 8) / 16777216.0f - 0.5f; }
    openblas_set_num_threads(threads);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n); /* warm-up */
    for (r = 0; r < 7; r++) {
        double t = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
        times[r] = now() - t;
        if (2.0 * n * n * n / times[r] * 1e-9 > best) best = 2.0 * n * n * n / times[r] * 1e-9;
    }
    qsort(times, 7, sizeof(double), cmp_double);
    printf("OpenBLAS sgemm %dx%dx%d, %d threads, core %s: best %.1f GFLOP/s, median %.1f GFLOP/s\n", n, n, n,
           threads, openblas_get_corename(), best, 2.0 * n * n * n / times[3] * 1e-9);
    printf("RESULT impl=openblas core=%s n=%d threads=%d gflops=%.2f median_gflops=%.2f\n", openblas_get_corename(),
           n, threads, best, 2.0 * n * n * n / times[3] * 1e-9);
    free(A); free(B); free(C);
    return 0;
}
#endif

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

/* The mixers come from the library (names, and which ones this build has) through functions that
   every revision of the header has: bench/run.sh --header git:REV builds this file against older
   headers too. */
static void usage(void) {
    int k;
    fprintf(stderr, "usage: bench_model [--mixer");
    for (k = 0; k < mf_mixer_count(); k++) fprintf(stderr, "%s%s", k ? "|" : " ", mf_mixer_name((mf_mixer_kind)k));
    fprintf(stderr, "]\n  [--list-mixers] [--steps N] [--warmup N] [--threads N] [--max-time S] [--d-model N]\n"
                    "  [--heads N] [--layers N] [--d-ff N] [--seq N] [--batch N] [--vocab N] [--pool-size N]\n"
                    "  [--pos none|learned|sinusoidal] [--act relu|gelu] [--mem-len N] [--compressive] [--c-mem-len N]\n"
                    "  [--rate c] [--chunk N] [--dpfp-nu N] [--feature dpfp|elu1] [--label NAME] [--seed N]\n"
                    "  [--profile N] [--peak N] [--device cpu|cuda] [--precision fp32|tf32|bf16] [--tf32]\n");
}

#ifdef EXTRA_MIXERS /* mixers of your own: -DEXTRA_MIXERS=fn and your file (make build/bench_model-custom) */
int EXTRA_MIXERS(void);
#endif

int main(int argc, char **argv) {
    mf_model_config cfg = mf_model_config_default();
    const char *mixer = "sdpa", *label = NULL;
    int steps = 10, warmup = 2, threads = 2, T = 256, B = 8, profile = 0, peak = 0, i, s, done = 0, cuda = 0;
    const char *precision = "fp32";
    double gpu_base = 0, gpu_peak = 0;
    double max_time = 0, *times, t_all, med, best, fpt, fpt_full, rss_before, t_first = 0;
    double wall_timed = 0, cpu_timed = 0, c0;
    mf_ctx *ctx;
    mf_model *m;
    mf_optimizer opt;
    int32_t *seq, *ids, *tg;
    float last_loss = 0;
    cfg.d_model = 256; cfg.n_heads = 8; cfg.n_layers = 4; cfg.d_ff = 1024; cfg.vocab = 65;
#ifdef EXTRA_MIXERS
    if (EXTRA_MIXERS() < 0) return 2;
#endif
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (!strcmp(a, name) && v && ++i)
        if (ARG("--mixer")) mixer = v;
        else if (ARG("--steps")) steps = atoi(v);
        else if (ARG("--warmup")) warmup = atoi(v);
        else if (ARG("--threads")) threads = atoi(v);
        else if (ARG("--max-time")) max_time = atof(v);
        else if (ARG("--d-model")) cfg.d_model = atoi(v);
        else if (ARG("--heads")) cfg.n_heads = atoi(v);
        else if (ARG("--layers")) cfg.n_layers = atoi(v);
        else if (ARG("--d-ff")) cfg.d_ff = atoi(v);
        else if (ARG("--seq")) T = atoi(v);
        else if (ARG("--batch")) B = atoi(v);
        else if (ARG("--vocab")) cfg.vocab = atoi(v);
        else if (ARG("--pool-size")) cfg.pool_size = atoi(v);
        else if (ARG("--pos")) cfg.pos = !strcmp(v, "none") ? MF_POS_NONE : !strcmp(v, "sinusoidal") ? MF_POS_SINUSOIDAL : MF_POS_LEARNED;
        else if (ARG("--act")) cfg.ffn_act = !strcmp(v, "relu") ? MF_ACT_RELU : MF_ACT_GELU;
        else if (ARG("--mem-len")) cfg.mem_len = atoi(v);
        else if (!strcmp(a, "--compressive")) cfg.compressive = 1;
        else if (ARG("--c-mem-len")) cfg.c_mem_len = atoi(v);
        else if (ARG("--rate")) cfg.compression_rate = atoi(v);
        else if (ARG("--chunk")) cfg.chunk_size = atoi(v);
        else if (ARG("--dpfp-nu")) cfg.dpfp_nu = atoi(v);
        else if (ARG("--feature")) cfg.linear_feature = !strcmp(v, "elu1") ? MF_FEATURE_ELU1 : MF_FEATURE_DPFP;
        else if (ARG("--label")) label = v;
        else if (ARG("--seed")) rng_state = (uint64_t)strtoull(v, NULL, 10) * 0x9e3779b97f4a7c15ULL + 1;
        else if (ARG("--peak")) peak = atoi(v);
        else if (ARG("--profile")) profile = atoi(v);
        else if (ARG("--device") && (!strcmp(v, "cpu") || !strcmp(v, "cuda"))) cuda = !strcmp(v, "cuda");
        else if (ARG("--precision")) precision = v;
        else if (!strcmp(a, "--tf32")) precision = "tf32";
        else if (!strcmp(a, "--list-mixers")) { /* the mixers this build can run, one per line (bench/run*.sh) */
            int k;
            for (k = 0; k < mf_mixer_count(); k++) {
                mf_model_config probe = mf_model_config_default();
                mf_ctx *c = mf_ctx_new(1);
                probe.vocab = 2; probe.mixer = (mf_mixer_kind)k;
                if (mf_model_check(c, &probe) == 0) printf("%s\n", mf_mixer_name((mf_mixer_kind)k));
                mf_ctx_free(c);
            }
            return 0;
        }
        else { usage(); return 2; }
#undef ARG
    }
    if (peak > 0) {
#ifdef MF_BENCH_OPENBLAS
        return peak_gemm(peak, threads > 0 ? threads : 1);
#else
        fprintf(stderr, "bench_model: --peak needs a build with -DMF_BENCH_OPENBLAS ... -lopenblas\n");
        return 2;
#endif
    }
    if (mf_mixer_from_name(mixer) < 0) { fprintf(stderr, "bench_model: unknown mixer \"%s\"\n", mixer); usage(); return 2; }
    if (steps < 1 || warmup < 0 || T < 1 || B < 1) { usage(); return 2; }
    cfg.mixer = (mf_mixer_kind)mf_mixer_from_name(mixer);
    cfg.max_seq = T;
    if (!label) label = cfg.compressive ? "compressive" : mixer;
#ifdef _OPENMP
    if (threads > 0) omp_set_num_threads(threads);
#endif
    /* the precision API is used where the header has it (the CUDA build; a CPU build on a header with
       METAFORMER_CPU_BF16): bench/run.sh --header git:REV builds the CPU program against older headers */
    if (strcmp(precision, "fp32") != 0) {
#if defined(METAFORMER_CUDA) || defined(METAFORMER_CPU_BF16)
        if (mf_precision_from_name(precision) < 0) { fprintf(stderr, "bench_model: --precision %s: fp32, tf32 or bf16\n", precision); return 2; }
#endif
#ifndef METAFORMER_CPU_BF16
        if (!cuda) {
            fprintf(stderr, "bench_model: --precision %s is a CUDA setting: use the CUDA build with --device cuda (the CPU "
                            "computes in fp32)\n", precision);
            return 2;
        }
#endif
    }
    rss_before = peak_rss_mb();
    ctx = mf_ctx_new(1234);
    mf_set_threads(ctx, threads);
    mf_set_keep_activation_grads(ctx, 0); /* a training loop reads no activation gradient */
#ifdef METAFORMER_CPU_BF16
    if (!cuda && mf_ctx_set_precision(ctx, (mf_precision)mf_precision_from_name(precision)) < 0) {
        fprintf(stderr, "bench_model: --precision %s: %s\n", precision, mf_error(ctx));
        return 1;
    }
    if (mf_ctx_bf16_kernel(ctx)) { /* the kernel in the result line: bf16-amx, bf16-fp32-fma, ... */
        static char named[48];
        snprintf(named, sizeof named, "bf16-%s", mf_bf16_kernel_name(mf_ctx_bf16_kernel(ctx)));
        precision = named;
    }
#endif
    if (cuda) {
#ifdef METAFORMER_CUDA
        (void)cudaFree(0); /* the CUDA runtime's context first: its memory is not the model's */
#endif
        gpu_base = gpu_used_mb();
        if (mf_ctx_set_device(ctx, MF_DEVICE_CUDA) < 0
#ifdef METAFORMER_CUDA
            || mf_cuda_set_precision(ctx, (mf_precision)mf_precision_from_name(precision)) < 0
#endif
        ) {
            fprintf(stderr, "bench_model: --device cuda: %s\n", mf_error(ctx));
            return 1;
        }
    }
    m = mf_model_new(ctx, &cfg);
    if (!m) { fprintf(stderr, "bench_model: %s\n", mf_error(ctx)); return 1; }
    opt = mf_optimizer_default(MF_OPT_ADAM, 1e-3f);
    seq = (int32_t *)malloc(sizeof(int32_t) * (size_t)B * (T + 1));
    ids = (int32_t *)malloc(sizeof(int32_t) * (size_t)B * T);
    tg = (int32_t *)malloc(sizeof(int32_t) * (size_t)B * T);
    times = (double *)malloc(sizeof(double) * (size_t)steps);
    if (!seq || !ids || !tg || !times) { fprintf(stderr, "out of memory\n"); return 1; }
    t_all = now();
    for (s = -warmup; s < steps; s++) {
        int b, t;
        double t0;
        mf_tensor *loss;
        for (b = 0; b < B; b++) {
            for (t = 0; t <= T; t++) seq[b * (T + 1) + t] = (int32_t)(rnd() % (uint32_t)cfg.vocab);
            for (t = 0; t < T; t++) { ids[b * T + t] = seq[b * (T + 1) + t]; tg[b * T + t] = seq[b * (T + 1) + t + 1]; }
        }
        t0 = now();
        c0 = cpu_seconds();
        loss = mf_model_loss(m, ids, tg, B, T);
        mf_backward(ctx, loss);
        end_step(ctx, &opt);
        if (loss) last_loss = mf_item(ctx, loss); /* on a GPU: waits for the step's kernels */
        if (cuda && s >= 0) { double held = gpu_used_mb() - gpu_base; gpu_peak = held > gpu_peak ? held : gpu_peak; }
        mf_reset(ctx);
        t0 = now() - t0;
        if (!mf_ok(ctx)) { fprintf(stderr, "bench_model: %s\n", mf_error(ctx)); return 1; }
        if (s == -warmup) t_first = t0;
        if (s >= 0) {
            times[done++] = t0;
            wall_timed += t0;
            cpu_timed += cpu_seconds() - c0;
            if (max_time > 0 && now() - t_all > max_time) break;
        } else if (s < -1 && max_time > 0 && now() - t_all > max_time / 4) {
            s = -1; /* slow build: skip the remaining warm-up steps */
        }
    }
    qsort(times, (size_t)done, sizeof(double), cmp_double);
    med = done % 2 ? times[done / 2] : 0.5 * (times[done / 2 - 1] + times[done / 2]);
    best = times[0];
    fpt = 3.0 * flops_per_token_fwd(&cfg, T, 0);
    fpt_full = 3.0 * flops_per_token_fwd(&cfg, T, 1);
    printf("metaformer.h %s train step: B=%d T=%d D=%d H=%d L=%d d_ff=%d V=%d, %s %s, %d CPU threads, %lld params\n", mixer,
           B, T, cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.d_ff, cfg.vocab, precision,
           cuda ? "CUDA" : "CPU", threads, (long long)mf_param_values(ctx, 0));
    if (cuda) printf("  device memory held %.1f MB (parameters, gradients, moments, activations, cuBLAS workspace)\n", gpu_peak);
    printf("  steps timed %d (after %d warm-up; first step %.1f ms), median %.1f ms, best %.1f ms, loss %.4f\n", done,
           warmup, t_first * 1e3, med * 1e3, best * 1e3, (double)last_loss);
    printf("  tokens/s %.0f (median step), analytic %.2f MFLOP/token (causal attention; %.2f counting the full T x T)\n",
           B * T / med, fpt * 1e-6, fpt_full * 1e-6);
    printf("  model GFLOP/s %.1f, peak RSS %.1f MB (%.1f MB before the model), activation arena peak %.1f MB\n",
           fpt * B * T / med * 1e-9, peak_rss_mb(), rss_before, mf_activation_peak_bytes(ctx) / 1048576.0);
    printf("  CPU time / wall time over the timed steps %.2f (%d threads; much lower = other processes took the CPUs)\n",
           cpu_timed / wall_timed, threads);
    printf("RESULT impl=c mixer=%s tok_s=%.1f step_ms=%.2f best_step_ms=%.2f gflops=%.2f mflop_tok=%.4f "
           "mflop_tok_full=%.4f rss_mb=%.1f arena_mb=%.1f params=%lld steps=%d threads=%d cpu_util=%.2f loss=%.4f "
           "device=%s precision=%s gpu_mb=%.1f\n",
           label, B * T / med, med * 1e3, best * 1e3, fpt * B * T / med * 1e-9, fpt * 1e-6, fpt_full * 1e-6,
           peak_rss_mb(), mf_activation_peak_bytes(ctx) / 1048576.0, (long long)mf_param_values(ctx, 0), done, threads,
           cpu_timed / wall_timed, (double)last_loss, cuda ? "cuda" : "cpu", precision, gpu_peak);
    fflush(stdout);
    if (profile > 0) profile_steps(ctx, m, &opt, ids, tg, B, T, profile, label);
    if (!mf_ok(ctx)) { fprintf(stderr, "bench_model: %s\n", mf_error(ctx)); return 1; }
    mf_model_free(m);
    mf_ctx_free(ctx);
    free(seq); free(ids); free(tg); free(times);
    return 0;
}
