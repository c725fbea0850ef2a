"""bench/torch_mm.py - torch.mm at bench/bench_bf16.c's shapes, in fp32 and in bf16 (bf16 tensors, as
autocast hands them to the matmul), on the CPU: the PyTorch side of make bench-bf16.

    python bench/torch_mm.py [--threads N]

One Markdown table on stdout, GFLOP/s per precision and the ratio; each cell the median of 5
timings of repeated calls for >= 0.2 s after a warm-up (as bench_bf16.c times the library).
"""
import argparse
import statistics
import time

import torch

SHAPES = [  # name, transpose A, transpose B, M, N, K (bench_bf16.c's table)
    ("qkv / out proj  y = x W^T", 0, 1, 2048, 512, 512),
    ("ffn up          y = x W^T", 0, 1, 2048, 2048, 512),
    ("ffn down        y = x W^T", 0, 1, 2048, 512, 2048),
    ("ffn down dx     dx = dy W", 0, 0, 2048, 2048, 512),
    ("ffn up dW       dW = dy^T x", 1, 0, 2048, 512, 2048),
    ("square 2048^3", 0, 0, 2048, 2048, 2048),
]


def rate(ta, tb, m, n, k, dtype):
    a = torch.rand(k, m) if ta else torch.rand(m, k)
    b = torch.rand(n, k) if tb else torch.rand(k, n)
    a, b = a.to(dtype), b.to(dtype)
    x, y = (a.t() if ta else a), (b.t() if tb else b)
    times = []
    for r in range(6):
        t0, reps = time.perf_counter(), 0
        while True:
            torch.mm(x, y)
            reps += 1
            dt = time.perf_counter() - t0
            if dt >= 0.2:
                break
        if r:
            times.append(dt / reps)
    return 2.0 * m * n * k / statistics.median(times) * 1e-9


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    print("torch %s, %d threads, CPU capability %s\n" % (
        torch.__version__, torch.get_num_threads(), torch.backends.cpu.get_cpu_capability()))
    print("| product | M x N x K | torch fp32 GFLOP/s | torch bf16 GFLOP/s | / fp32 |")
    print("|---|---|---|---|---|")
    for name, ta, tb, m, n, k in SHAPES:
        f = rate(ta, tb, m, n, k, torch.float32)
        g = rate(ta, tb, m, n, k, torch.bfloat16)
        print("| %s | %d x %d x %d | %.0f | %.0f | %.2f |" % (name, m, n, k, f, g, g / f), flush=True)


if __name__ == "__main__":
    main()
