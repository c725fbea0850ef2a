"""torch_harness.py - what the PyTorch side of `make bench` shares (bench/torch_ref.py, torch_xl.py,
torch_fastweights.py, torch_feedback.py): the common options, the BLAS / threading report, and the
timed training loop with its machine-readable RESULT line, so every script measures the same way.

    import torch_harness as th
    p = th.parser(__doc__, seq=256); p.add_argument(...); args = p.parse_args()
    th.start(args)                     # records the RSS before torch, imports torch, sets the threads
    ...build the model...
    th.train(args, name, model, loss_fn, tokens_per_step, flops_per_token)
                                       # loss_fn: th.lm_loss_fn(args, model) for a batch-first LM

One timed step: loss_fn(gen) (forward + loss), backward, clip_grad_norm_(1.0), Adam (lr 1e-3,
PyTorch defaults) step, zero_grad(set_to_none=True). --max-time S stops after S seconds in all
(at least one warm-up and one timed step; the warm-up ends early past S/4).

--device cuda (torch >= 2.0 with a GPU): every tensor and module is created on the GPU (the default
device), each step is timed by CUDA events recorded around it (read after torch.cuda.synchronize()),
and the RESULT line adds gpu_alloc_mb, the most memory its tensors held at once
(torch.cuda.max_memory_allocated), and gpu_mb, the most PyTorch's caching allocator reserved from the
GPU (max_memory_reserved).

--precision fp32|tf32|bf16 (as bench_model's --precision): fp32, exact float32 matmuls; tf32, matmuls
on the TF32 tensor cores (torch.backends.cuda.matmul.allow_tf32 and cudnn.allow_tf32; --tf32 is the
same); bf16, mixed precision as a PyTorch user trains: fp32 parameters and Adam, the forward and the
loss under torch.autocast(dtype=torch.bfloat16) (matmuls and attention in bf16, softmax, norms and
the loss in fp32 by autocast's rules), the backward outside it. On the CPU bf16 is autocast on the
CPU (torch >= 1.10), tf32 is refused. --sdpa-backend picks the kernel of
F.scaled_dot_product_attention (torch >= 2.3; default auto, PyTorch's own choice: for bf16 on a
Hopper GPU its flash or cuDNN kernel).
"""
import argparse
import ctypes
import os
import resource
import statistics
import time

torch = None
_rss_python = 0.0
_device = "cpu"
_args = None


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: kilobytes


def parser(doc, seq):
    """The options every script takes (the model sizes default to the bench config)."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-time", type=float, default=0.0, help="stop after S seconds in all (>= 1 warm-up and 1 timed step; warm-up ends early past S/4)")
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--seq", type=int, default=seq)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=65)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--foreach", type=int, default=1, help="Adam(foreach=...): 1 multi-tensor (fast), 0 per tensor")
    p.add_argument("--info", action="store_true", help="print the BLAS / threading configuration and exit")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--precision", choices=PRECISIONS, default=None, help="fp32 (default), tf32 (cuda), bf16 (autocast)")
    p.add_argument("--tf32", action="store_true", help="cuda: let matmuls use TF32 tensor cores (= --precision tf32)")
    p.add_argument("--sdpa-backend", choices=sorted(SDPA_BACKENDS), default="auto",
                   help="the kernel of F.scaled_dot_product_attention (auto: PyTorch's choice)")
    p.add_argument("--compile", action="store_true", help="torch >= 2: train torch.compile(model) (Inductor); the compile "
                   "(first steps) is not timed: the time limit starts after the first warm-up step")
    p.add_argument("--profile", type=int, default=0, help="then N more steps under torch.profiler: OPS lines per kind")
    return p


PRECISIONS = ("fp32", "tf32", "bf16")
SDPA_BACKENDS = {"auto": None, "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                 "cudnn": "CUDNN_ATTENTION", "math": "MATH"}


def precision(args):
    """The run's precision: --precision, else tf32 for --tf32, else fp32."""
    return args.precision or ("tf32" if args.tf32 else "fp32")


def step_context(args):
    """What the forward and the loss run under: bf16 autocast for --precision bf16, the SDPA backend
    of --sdpa-backend (its backward runs the same kernel: autograd saved it)."""
    import contextlib
    ctx = contextlib.ExitStack()
    if precision(args) == "bf16":
        ctx.enter_context(torch.autocast(device_type=args.device, dtype=torch.bfloat16))
    if SDPA_BACKENDS[args.sdpa_backend]:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        ctx.enter_context(sdpa_kernel(getattr(SDPBackend, SDPA_BACKENDS[args.sdpa_backend])))
    return ctx


def start(args):
    """Import torch (after recording the interpreter's RSS) with args.threads intra-op threads."""
    global torch, _rss_python, _device, _args
    _rss_python = rss_mb()
    _device = args.device
    _args = args
    import torch as t
    torch = t
    torch.set_num_threads(args.threads)
    if args.device == "cuda":
        if not hasattr(torch, "set_default_device"):
            raise SystemExit("--device cuda needs torch >= 2.0 (this is torch %s)" % torch.__version__)
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: torch %s sees no CUDA GPU" % torch.__version__)
        torch.set_default_device("cuda")
        torch.backends.cuda.matmul.allow_tf32 = precision(args) == "tf32"
        torch.backends.cudnn.allow_tf32 = precision(args) == "tf32"
    elif precision(args) == "tf32":
        raise SystemExit("--precision tf32 is a setting of the GPU's tensor cores: use it with --device cuda")
    if args.sdpa_backend != "auto":
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: F401
        except ImportError:
            raise SystemExit("--sdpa-backend %s needs torch >= 2.3 (this is torch %s); use auto"
                             % (args.sdpa_backend, torch.__version__))
    return torch


def sync(args):
    if args.device == "cuda":
        torch.cuda.synchronize()


def blas_info():
    """What BLAS torch really calls: the libraries mapped into this process after a matmul."""
    a = torch.randn(256, 256)
    (a @ a).sum().item()
    libs = sorted({ln.split()[-1] for ln in open("/proc/self/maps") if "blas" in ln.split()[-1] or "lapack" in ln.split()[-1]})
    info = {"libs": libs, "openblas": False, "core": "?", "blas_threads": "?", "config": "?"}
    for path in libs:  # (numpy's own scipy_openblas64_ is numpy's, not torch's: not asked)
        if os.path.basename(path).startswith("libopenblas"):
            try:
                lib = ctypes.CDLL(path)
                lib.openblas_get_corename.restype = ctypes.c_char_p
                lib.openblas_get_config.restype = ctypes.c_char_p
                info.update(openblas=True, core=lib.openblas_get_corename().decode(),
                            blas_threads=lib.openblas_get_num_threads(),
                            config=lib.openblas_get_config().decode().strip())
            except (OSError, AttributeError):
                pass
    cfg = torch.__config__.show()
    blas_line = [w for w in cfg.replace(",", " ").split() if w.startswith("BLAS_INFO=")]
    info["torch_blas_info"] = blas_line[0] if blas_line else "?"
    info["mkl"] = torch.backends.mkl.is_available()
    info["mkldnn"] = torch.backends.mkldnn.is_available()
    info["mkldnn_enabled"] = torch.backends.mkldnn.enabled
    info["cpu_capability"] = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "?"
    info["libs_cfg"] = ", ".join(ln.strip("- ").strip() for ln in cfg.splitlines()
                                 if "Math Kernel" in ln or "MKL-DNN" in ln or "OpenMP" in ln)
    return info


def print_setup():
    """One human-readable line and one INFO line: torch, threads, the BLAS really loaded, the environment."""
    if _device == "cuda":
        print("torch %s on %s (CUDA %s), precision %s (TF32 matmuls %s), SDPA backend %s" % (
            torch.__version__, torch.cuda.get_device_name(), torch.version.cuda, precision(_args),
            torch.backends.cuda.matmul.allow_tf32, _args.sdpa_backend))
        print("INFO impl=torch version=%s device=cuda gpu=%s" % (torch.__version__,
                                                                 torch.cuda.get_device_name().replace(" ", "_")))
        return
    info = blas_info()
    env = " ".join("%s=%s" % (k, os.environ.get(k, "unset")) for k in
                   ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "OPENBLAS_CORETYPE"))
    print("torch %s: intra-op threads %d, inter-op threads %d, %s, %s; BLAS libraries %s; OpenBLAS %s core %s, "
          "%s threads (%s); MKL %s, MKL-DNN %s (enabled %s); CPU capability %s; built with: %s; %s" % (
              torch.__version__, torch.get_num_threads(), torch.get_num_interop_threads(),
              torch.__config__.parallel_info().splitlines()[-1].strip(), info["torch_blas_info"],
              ",".join(info["libs"]) or "none loaded (linked in)", "yes" if info["openblas"] else "NO", info["core"],
              info["blas_threads"], info["config"], info["mkl"], info["mkldnn"], info["mkldnn_enabled"],
              info["cpu_capability"], info["libs_cfg"], env))
    print("INFO impl=torch version=%s threads=%d interop=%d openblas=%d mkl=%d core=%s blas_threads=%s" % (
        torch.__version__, torch.get_num_threads(), torch.get_num_interop_threads(), int(info["openblas"]),
        int(info["mkl"]), info["core"], info["blas_threads"]))


def lm_loss_fn(args, model):
    """loss_fn for train() of a batch-first language model ([B, T] ids -> [B, T, V] logits): the
    next-token cross-entropy of args.batch random sequences of args.seq + 1 tokens drawn from gen."""
    B, T, V = args.batch, args.seq, args.vocab

    def loss_fn(gen):
        seq = torch.randint(0, V, (B, T + 1), generator=gen)
        return torch.nn.functional.cross_entropy(model(seq[:, :T]).reshape(-1, V), seq[:, 1:].reshape(-1))
    return loss_fn


def train(args, name, describe, model, loss_fn, tokens_per_step, fpt_fwd, fpt_fwd_full=None, nparams=None):
    """Time training steps of model; loss_fn(gen) runs the forward and returns the loss. fpt_fwd:
    analytic forward FLOPs per token (training = 3x). Prints the summary and the RESULT line."""
    rss_torch = rss_mb()
    params = list(model.parameters())
    if args.compile:
        if not hasattr(torch, "compile"):
            raise SystemExit("--compile needs torch >= 2.0 (this is torch %s)" % torch.__version__)
        model.forward = torch.compile(model.forward)  # loss_fn calls model(...): the compiled graph now
    if nparams is None:
        nparams = sum(p.numel() for p in params)
    try:
        opt = torch.optim.Adam(params, lr=1e-3, foreach=bool(args.foreach))
    except TypeError:
        opt = torch.optim.Adam(params, lr=1e-3)
    gen = torch.Generator(device=args.device).manual_seed(args.seed)
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times, loss_v, t_first, cpu_timed = [], float("nan"), 0.0, 0.0
    t_all = time.perf_counter()
    s = -args.warmup - 1
    cuda = args.device == "cuda"
    while s + 1 < args.steps:
        s += 1
        t0, c0 = time.perf_counter(), cpu_seconds()
        if cuda:
            ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            ev0.record()
        with step_context(args):
            loss = loss_fn(gen)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            ev1.record()
        sync(args)
        dt = ev0.elapsed_time(ev1) * 1e-3 if cuda else time.perf_counter() - t0
        loss_v = loss.item()
        if s == -args.warmup:
            t_first = dt
            if args.compile:
                t_all = time.perf_counter()  # the compile is not part of the time limit
        if s >= 0:
            times.append(dt)
            cpu_timed += cpu_seconds() - c0
            if args.max_time > 0 and time.perf_counter() - t_all > args.max_time:
                break
        elif s < -1 and args.max_time > 0 and time.perf_counter() - t_all > args.max_time / 4:
            s = -1  # slow run: skip the remaining warm-up steps
    med, best = statistics.median(times), min(times)
    fpt = 3 * fpt_fwd
    fpt_full = 3 * (fpt_fwd_full if fpt_fwd_full is not None else fpt_fwd)
    tok_s = tokens_per_step / med
    util = cpu_timed / sum(times)
    gpu_mb = gpu_alloc_mb = 0.0
    if args.device == "cuda":
        gpu_mb = torch.cuda.max_memory_reserved() / 1048576.0
        gpu_alloc_mb = torch.cuda.max_memory_allocated() / 1048576.0
    print("torch %s train step: %s, %s, %d threads, %d params%s" % (name, describe, precision(args), args.threads, nparams,
                                                                    ", torch.compile" if args.compile else ""))
    print("  steps timed %d (after %d warm-up; first step %.1f ms), median %.1f ms, best %.1f ms, loss %.4f" % (
        len(times), args.warmup, t_first * 1e3, med * 1e3, best * 1e3, loss_v))
    print("  tokens/s %.0f, model GFLOP/s %.1f, peak RSS %.1f MB (python %.1f MB, after import torch %.1f MB)" % (
        tok_s, fpt * tok_s * 1e-9, rss_mb(), _rss_python, rss_torch))
    print("  CPU time / wall time over the timed steps %.2f (%d threads)" % (util, args.threads))
    if args.device == "cuda":
        print("  GPU memory: tensors at most %.1f MB (max_memory_allocated), reserved %.1f MB" % (gpu_alloc_mb, gpu_mb))
    print("RESULT impl=torch mixer=%s tok_s=%.1f step_ms=%.2f best_step_ms=%.2f gflops=%.2f mflop_tok=%.4f "
          "mflop_tok_full=%.4f rss_mb=%.1f rss_base_mb=%.1f params=%d steps=%d threads=%d cpu_util=%.2f loss=%.4f "
          "device=%s precision=%s sdpa=%s gpu_mb=%.1f gpu_alloc_mb=%.1f first_step_ms=%.1f compiled=%d version=%s" % (
              name, tok_s, med * 1e3, best * 1e3, fpt * tok_s * 1e-9, fpt * 1e-6, fpt_full * 1e-6, rss_mb(),
              rss_torch, nparams, len(times), args.threads, util, loss_v,
              args.device, precision(args), args.sdpa_backend, gpu_mb, gpu_alloc_mb,
              t_first * 1e3, int(args.compile), torch.__version__.split("+")[0]))
    if args.profile > 0:
        profile_steps(args, name, loss_fn, params, opt, gen)
    return 0


# The kinds of bench_model's OPS lines (the library's mf_profile_entry kinds), for PyTorch's ATen ops:
# matched by name, first match wins; anything else is elementwise. The time of an op is its self
# time (its children apart), so a composite op (linear -> addmm) adds nothing twice.
_KINDS = (("gemm", ("mm", "addmm", "bmm", "baddbmm", "addbmm", "dot", "mv", "mkldnn_linear", "_mkldnn_", "mkl_linear")),
          ("matmul", ("sum",)),  # the bias gradients of the Linear layers: the C side sums them inside its GEMM
          ("loss", ("nll_loss", "cross_entropy", "log_softmax", "mean")),
          ("mixer", ("scaled_dot_product", "flash_attention", "_efficient_attention", "softmax", "avg_pool",
                     "masked_fill", "einsum", "cumsum", "tril", "triu")),
          ("layernorm", ("layer_norm",)),
          ("embedding", ("embedding",)),
          ("copy", ("copy_", "clone", "contiguous", "cat", "stack", "transpose", "permute", "view", "reshape",
                    "_unsafe_view", "as_strided", "t", "expand", "slice", "select", "unsqueeze", "squeeze",
                    "split", "chunk", "narrow", "empty", "empty_like", "new_empty", "empty_strided", "zeros",
                    "zeros_like", "full", "resize_", "index", "index_select", "gather", "scatter_add",
                    "unbind", "detach", "_to_copy", "to", "pad", "constant_pad_nd", "slice_backward",
                    "select_backward")),
          ("memset", ("zero_", "fill_")))


def _kind(op):
    """The kind of an ATen op (aten::native_layer_norm_backward -> layernorm): its name, or a name of
    seven letters or more contained in it."""
    n = op.split("::", 1)[-1].split(".", 1)[0]
    for kind, names in _KINDS:
        if n in names or n.rstrip("_") in names or any(len(p) > 6 and p in n for p in names):
            return kind
    return "elementwise"


def profile_steps(args, name, loss_fn, params, opt, gen):
    """N training steps under torch.profiler: the self CPU time of every ATen op, by kind as the C
    side's OPS lines (forward / backward: the region the op ran in; clip_grad_norm, the Adam step and
    zero_grad all count as the optimizer), the mean over the steps; glue = the step's profiled wall
    time not inside any ATen op (Python, the autograd engine, the profiler's own overhead)."""
    from torch.profiler import ProfilerActivity, profile, record_function
    n = args.profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(n):
            with record_function("mf.step"):
                with record_function("mf.forward"):
                    loss = loss_fn(gen)
                with record_function("mf.backward"):
                    loss.backward()
                with record_function("mf.optimizer"):
                    torch.nn.utils.clip_grad_norm_(params, 1.0)
                    opt.step()
                    opt.zero_grad(set_to_none=True)
    acc, step_us, ops_us = {}, 0.0, 0.0
    for ev in prof.events():
        if ev.name == "mf.step":
            step_us += ev.cpu_time_total
        if ev.name.startswith("mf.") or not ev.name.startswith("aten::"):
            continue
        region, p = None, ev.cpu_parent
        while p is not None:
            if p.name in ("mf.forward", "mf.backward", "mf.optimizer"):
                region = p.name
            p = p.cpu_parent
        if region is None:
            continue
        kind = "optimizer" if region == "mf.optimizer" else _kind(ev.name)
        k = (kind, "bwd" if region != "mf.forward" else "fwd")
        acc[k] = acc.get(k, 0.0) + ev.self_cpu_time_total
        ops_us += ev.self_cpu_time_total
    table = sorted(((ev.key, ev.self_cpu_time_total / n) for ev in prof.key_averages() if ev.key.startswith("aten::")),
                   key=lambda r: -r[1])
    print("\ntorch.profiler (self CPU time per step, the mean of %d steps; top ATen ops)" % n)
    for key, us in table[:20]:
        print("  %-40s %-11s %9.3f ms" % (key, _kind(key), us * 1e-3))
    for kind in ("gemm", "matmul", "mixer", "layernorm", "elementwise", "loss", "embedding", "copy", "optimizer",
                 "memset"):
        print("OPS impl=torch mixer=%s kind=%s fwd_ms=%.3f bwd_ms=%.3f" % (
            name, kind, acc.get((kind, "fwd"), 0.0) * 1e-3 / n, acc.get((kind, "bwd"), 0.0) * 1e-3 / n))
    print("OPS impl=torch mixer=%s kind=glue fwd_ms=%.3f bwd_ms=0" % (name, (step_us - ops_us) * 1e-3 / n))
    print("OPS impl=torch mixer=%s kind=step fwd_ms=%.3f bwd_ms=0" % (name, step_us * 1e-3 / n))
