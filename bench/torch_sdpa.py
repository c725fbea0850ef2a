#!/usr/bin/env python3
"""torch_sdpa.py - PyTorch's scaled_dot_product_attention on the GPU, the reference for
build/cuda/bench_attention --device cuda (bench/bench_attention.c): the same shapes (B=4, H=8,
dk=dv=64, causal, T = 1024 .. 8192), timing and columns, so a script can put them side by side.

    python3 bench/torch_sdpa.py [--batch 4] [--heads 8] [--dk 64] [--seq 1024,2048,4096,8192]
                                [--precision fp32,tf32,bf16] [--backend auto|flash|efficient|cudnn|math|all]

Paths (--precision, a list): fp32 (torch.backends.cuda.matmul.allow_tf32 = cudnn.allow_tf32 = False,
float32 matmul precision "highest"), tf32 (both True, precision "high"), bf16 (bfloat16 inputs, as the
attention of a model under torch.autocast(dtype=torch.bfloat16) receives them). --backend all (the
default) times every kernel PyTorch has for the path, one row each, skipping the ones that refuse the
inputs: for float32 FlashAttention (fp16/bf16 only) is out; for bf16 flash, cuDNN and the
memory-efficient kernel compete, and the report compares against the fastest. auto is PyTorch's own
choice. Timing: best of --reps after --warmup, each call between two CUDA events (read after
torch.cuda.synchronize()). peak_MB: torch.cuda.max_memory_allocated over the forward + backward calls,
the inputs and their gradients included. FLOPs as FlashAttention's benchmarks count them (and as
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
    p.add_argument("--precision", default="fp32,tf32,bf16", help="a list of fp32, tf32, bf16")
    p.add_argument("--backend", default="all", choices=["all", "auto", "flash", "efficient", "cudnn", "math"])
    args = p.parse_args()
    paths = [x for x in args.precision.replace(",", " ").split()]
    for x in paths:
        if x not in ("fp32", "tf32", "bf16"):
            print(f"torch_sdpa.py: --precision {x}: fp32, tf32 or bf16", file=sys.stderr)
            return 2
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
    import contextlib
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        kernels = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                   "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
    except (ImportError, AttributeError):  # torch < 2.3: PyTorch's own choice only
        kernels = {}
    if args.backend == "all":
        backends = ["auto"] + [b for b in ("flash", "cudnn", "efficient") if b in kernels]
    elif args.backend == "auto" or args.backend in kernels:
        backends = [args.backend]
    else:
        print(f"torch_sdpa.py: --backend {args.backend} needs torch >= 2.3 (torch.nn.attention.sdpa_kernel)",
              file=sys.stderr)
        return 2

    def backend_ctx(b):
        return contextlib.nullcontext() if b == "auto" else sdpa_kernel(kernels[b])

    def best(fn):
        t = float("inf")
        for rep in range(args.warmup + args.reps):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            e0.record()
            fn()
            e1.record()
            torch.cuda.synchronize()
            if rep >= args.warmup:
                t = min(t, e0.elapsed_time(e1))
        return t

    B, H, D = args.batch, args.heads, args.dk
    name = f"{torch.cuda.get_device_name(0)} (sm_{''.join(map(str, torch.cuda.get_device_capability(0)))})"
    print(f"# torch {torch.__version__} scaled_dot_product_attention on {name}: "
          f"B={B} H={H} dk=dv={D} causal; fwd FLOPs = 4*B*H*T^2*dk/2, fwd+bwd = 3.5x")
    print(f"{'impl':<16} {'path':<5} {'T':>6} {'fwd_ms':>10} {'fwd_TF/s':>10} {'fwdbwd_ms':>10} {'fwdbwd_TF/s':>11} "
          f"{'peak_MB':>9}")
    for path in paths:
        tf32 = path == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        dtype = torch.bfloat16 if path == "bf16" else torch.float32
        for b in backends:
            for T in (int(s) for s in args.seq.split(",")):
                g = torch.Generator(device="cuda").manual_seed(1)
                q, k, v = (torch.randn(B, H, T, D, device="cuda", generator=g).to(dtype).requires_grad_()
                           for _ in range(3))
                scale = 1.0 / D ** 0.5

                def fwd():
                    with backend_ctx(b):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)

                def fwd_bwd():
                    q.grad = k.grad = v.grad = None
                    fwd().float().mean().backward()

                try:
                    tf = best(fwd)
                    torch.cuda.reset_peak_memory_stats()
                    tt = best(fwd_bwd)
                except RuntimeError as e:  # this kernel refuses these inputs (dtype, head size, GPU)
                    print(f"# {'torch_' + b} {path} T={T}: not available ({str(e).splitlines()[0][:120]})", flush=True)
                    break
                peak = torch.cuda.max_memory_allocated() / 1048576.0
                flops = 4.0 * B * H * T * T * D / 2
                print(f"{'torch_' + b:<16} {path:<5} {T:>6} {tf:>10.3f} {flops / (tf * 1e-3) / 1e12:>10.2f} "
                      f"{tt:>10.3f} {3.5 * flops / (tt * 1e-3) / 1e12:>11.2f} {peak:>9.1f}", flush=True)
                del q, k, v
                torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
