#!/usr/bin/env python3
"""torch_sdpa.py - PyTorch's scaled_dot_product_attention on the GPU, the reference for
build/cuda/bench_attention --device cuda (bench/bench_attention.c): the same shapes (B=4, H=8,
dk=dv=64, causal, T = 1024 .. 8192), timing and columns, so a script can put them side by side.

    python3 bench/torch_sdpa.py [--batch 4] [--heads 8] [--dk 64] [--seq 1024,2048,4096,8192]
                                [--backend auto|efficient|math|cudnn]

Paths: fp32 (torch.backends.cuda.matmul.allow_tf32 = cudnn.allow_tf32 = False, float32 matmul
precision "highest") and tf32 (both True, precision "high"). Which kernel runs is PyTorch's choice
(--backend auto): for float32 inputs FlashAttention (fp16/bf16 only) is out and it is usually the
memory-efficient kernel, which may not use TF32 at all; --backend math forces the composed
matmul-softmax-matmul that does. Timing: best of --reps after --warmup, torch.cuda.synchronize()
before and after each call, host timer. FLOPs as FlashAttention's benchmarks count them (and as
bench_attention.c): forward 4*B*H*T^2*dk, halved when causal; forward + backward 3.5x that.
"""
import argparse
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--dk", type=int, default=64)
    p.add_argument("--seq", default="1024,2048,4096,8192")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--backend", default="auto", choices=["auto", "efficient", "math", "cudnn"])
    args = p.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"torch_sdpa.py: PyTorch is not installed ({e}); pip install torch (a CUDA build)", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print(f"torch_sdpa.py: no CUDA device visible to PyTorch {torch.__version__} (CUDA build: "
              f"{torch.version.cuda or 'none, a CPU-only wheel'}); run it on a machine with an NVIDIA GPU",
              file=sys.stderr)
        return 1

    def backend_ctx():
        if args.backend == "auto":
            import contextlib
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel({"efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH,
                            "cudnn": SDPBackend.CUDNN_ATTENTION}[args.backend])

    def sync():
        torch.cuda.synchronize()

    def best(fn):
        t = float("inf")
        for rep in range(args.warmup + args.reps):
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            if rep >= args.warmup:
                t = min(t, time.perf_counter() - t0)
        return t * 1e3

    B, H, D = args.batch, args.heads, args.dk
    name = f"{torch.cuda.get_device_name(0)} (sm_{''.join(map(str, torch.cuda.get_device_capability(0)))})"
    print(f"# torch {torch.__version__} scaled_dot_product_attention (backend {args.backend}) on {name}: "
          f"B={B} H={H} dk=dv={D} causal; fwd FLOPs = 4*B*H*T^2*dk/2, fwd+bwd = 3.5x")
    print(f"{'impl':<12} {'path':<5} {'T':>6} {'fwd_ms':>10} {'fwd_TF/s':>10} {'fwdbwd_ms':>10} {'fwdbwd_TF/s':>10}")
    for path in ("fp32", "tf32"):
        tf32 = path == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        for T in (int(s) for s in args.seq.split(",")):
            g = torch.Generator(device="cuda").manual_seed(1)
            q, k, v = (torch.randn(B, H, T, D, device="cuda", generator=g, requires_grad=True) for _ in range(3))
            scale = 1.0 / D ** 0.5

            def fwd():
                with backend_ctx():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)

            def fwd_bwd():
                q.grad = k.grad = v.grad = None
                fwd().mean().backward()

            tf = best(fwd)
            tt = best(fwd_bwd)
            flops = 4.0 * B * H * T * T * D / 2
            print(f"{'torch_sdpa':<12} {path:<5} {T:>6} {tf:>10.3f} {flops / (tf * 1e-3) / 1e12:>10.2f} "
                  f"{tt:>10.3f} {3.5 * flops / (tt * 1e-3) / 1e12:>10.2f}", flush=True)
            del q, k, v
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
