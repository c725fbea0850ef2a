#!/usr/bin/env python3
"""torch_ref.py - the metaformer.h language model in PyTorch, timed over full training steps.

    OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE \
        /usr/bin/python3 bench/torch_ref.py --mixer sdpa --steps 10 --warmup 2 --threads 2

The same model and train step as bench/bench_model.c (SPEC.md sections 3, 4, 9, 10):
  token Embedding N(0,1) + learned position Embedding -> n_layers pre-LN blocks
  (x += mixer(LN1(x)); x += fc2(GELU(fc1(LN2(x))))) -> final LN -> Linear(D, V), PyTorch init.
  sdpa      causal MHA, q/k/v/out Linear with bias (q, k, v fused into one Linear(D, 3D): the same
            math, the usual fast way), explicit matmul + masked softmax (torch 1.13 has no
            F.scaled_dot_product_attention)
  metric    per head p = x Wp (no bias), M symmetric from its upper triangle Mbar [H, dk(dk+1)/2],
            r = (p M) p^T / sqrt(dk), causal softmax, t = s p (values = p), E without bias
  quadratic the same with an unconstrained M [H, dk, dk]
  pool      causal mean over pool_size tokens (count_include_pad = False) minus x
  identity  the mixer sub-block is skipped
One step: forward, mean cross-entropy on random next tokens, backward, clip_grad_norm_(1.0),
Adam (lr 1e-3, PyTorch defaults) step, zero_grad (set_to_none=True). Random tokens, seeded.
FLOPs per token: the same analytic count as bench_model.c (causal half of attention).
Prints one machine-readable line: RESULT impl=torch mixer=... tok_s=... gflops=... rss_mb=...
"""
import argparse
import ctypes
import math
import os
import resource
import statistics
import sys
import time


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: kilobytes


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mixer", default="sdpa", choices=["sdpa", "metric", "quadratic", "pool", "identity"])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-time", type=float, default=0.0, help="stop after S seconds in all (>= 1 warm-up and 1 timed step; warm-up ends early past S/4)")
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=65)
    p.add_argument("--pool-size", type=int, default=3)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--foreach", type=int, default=1, help="Adam(foreach=...): 1 multi-tensor (fast), 0 per tensor")
    p.add_argument("--info", action="store_true", help="print the BLAS / threading configuration and exit")
    return p.parse_args()


args = parse()
rss_python = rss_mb()
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(args.threads)


def blas_info():
    """What BLAS torch really calls: the libraries mapped into this process after a matmul."""
    a = torch.randn(256, 256)
    (a @ a).sum().item()
    libs = sorted({ln.split()[-1] for ln in open("/proc/self/maps") if "blas" in ln.split()[-1] or "lapack" in ln.split()[-1]})
    info = {"libs": libs, "openblas": False, "core": "?", "blas_threads": "?", "config": "?"}
    for path in libs:
        if "openblas" in os.path.basename(path):
            try:
                lib = ctypes.CDLL(path)
                lib.openblas_get_corename.restype = ctypes.c_char_p
                lib.openblas_get_config.restype = ctypes.c_char_p
                info.update(openblas=True, core=lib.openblas_get_corename().decode(),
                            blas_threads=lib.openblas_get_num_threads(),
                            config=lib.openblas_get_config().decode().strip())
            except OSError:
                pass
    cfg = torch.__config__.show()
    blas_line = [w for w in cfg.replace(",", " ").split() if w.startswith("BLAS_INFO=")]
    info["torch_blas_info"] = blas_line[0] if blas_line else "?"
    info["mkl"] = torch.backends.mkl.is_available()
    info["mkldnn"] = torch.backends.mkldnn.is_available()
    return info


class Mixer(nn.Module):
    def __init__(self, kind, D, H, T, pool_size):
        super().__init__()
        self.kind, self.H, self.dk, self.k = kind, H, D // H, pool_size
        dk = self.dk
        if kind == "sdpa":
            self.qkv = nn.Linear(D, 3 * D, bias=True)   # = q, k, v Linear(D, D, bias) stacked
            self.out = nn.Linear(D, D, bias=True)
        elif kind in ("metric", "quadratic"):
            self.p = nn.Linear(D, D, bias=False)
            b = 1.0 / math.sqrt(dk)
            if kind == "metric":
                self.mbar = nn.Parameter(torch.empty(H, dk * (dk + 1) // 2).uniform_(-b, b))
                idx = torch.empty(dk, dk, dtype=torch.long)  # l(k, k') on the upper triangle, mirrored
                l = 0
                for i in range(dk):
                    for j in range(i, dk):
                        idx[i, j] = idx[j, i] = l
                        l += 1
                self.register_buffer("idx", idx.view(-1))
            else:
                self.m = nn.Parameter(torch.empty(H, dk, dk).uniform_(-b, b))
            self.e = nn.Linear(D, D, bias=False)
        elif kind == "pool":
            t = torch.arange(T, dtype=torch.float32)
            self.register_buffer("inv_count", (1.0 / torch.clamp(t + 1, max=pool_size)).view(1, 1, T, 1))
        if kind in ("sdpa", "metric", "quadratic"):
            self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).triu(1))  # True = hidden

    def attend(self, q, k, v):
        # q, k, v [B, H, T, dk]; q already scaled
        T = q.shape[2]
        s = torch.matmul(q, k.transpose(-2, -1)).masked_fill_(self.mask[:T, :T], float("-inf"))
        return torch.matmul(torch.softmax(s, dim=-1), v)

    def forward(self, x):
        B, T, D = x.shape
        H, dk = self.H, self.dk
        if self.kind == "sdpa":
            q, k, v = self.qkv(x).view(B, T, 3, H, dk).permute(2, 0, 3, 1, 4)
            y = self.attend(q * (1.0 / math.sqrt(dk)), k, v)
            return self.out(y.transpose(1, 2).reshape(B, T, D))
        if self.kind in ("metric", "quadratic"):
            p = self.p(x).view(B, T, H, dk).transpose(1, 2)                       # [B, H, T, dk]
            M = self.mbar[:, self.idx].view(H, dk, dk) if self.kind == "metric" else self.m
            q = torch.matmul(p, M * (1.0 / math.sqrt(dk)))                       # p M / sqrt(dk)
            y = self.attend(q, p, p)
            return self.e(y.transpose(1, 2).reshape(B, T, D))
        if self.kind == "pool":  # causal window [t - k + 1, t], padding not counted
            xs = F.avg_pool2d(F.pad(x, (0, 0, self.k - 1, 0)).unsqueeze(1), (self.k, 1), stride=1)
            return (xs * (self.k * self.inv_count[:, :, :T])).squeeze(1) - x
        raise ValueError(self.kind)


class Block(nn.Module):
    def __init__(self, kind, D, H, F_, T, pool_size):
        super().__init__()
        self.has_mixer = kind != "identity"
        if self.has_mixer:
            self.ln1 = nn.LayerNorm(D)
            self.mixer = Mixer(kind, D, H, T, pool_size)
        self.ln2 = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, F_)
        self.fc2 = nn.Linear(F_, D)

    def forward(self, x):
        if self.has_mixer:
            x = x + self.mixer(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        D = a.d_model
        self.tok = nn.Embedding(a.vocab, D)
        self.pos = nn.Embedding(a.seq, D)
        self.blocks = nn.ModuleList([Block(a.mixer, D, a.heads, a.d_ff, a.seq, a.pool_size) for _ in range(a.layers)])
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, a.vocab)

    def forward(self, ids):
        x = self.tok(ids) + self.pos.weight[: ids.shape[1]]
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


def flops_per_token_fwd(a, full):
    D, Fd, V, H = a.d_model, a.d_ff, a.vocab, a.heads
    dk = D / H
    keys = a.seq if full else (a.seq + 1) / 2.0
    attn = 2 * 2.0 * D * keys
    ffn = 2 * 2.0 * D * Fd
    if a.mixer == "sdpa":
        layer = 4 * 2.0 * D * D + attn + ffn
    elif a.mixer in ("metric", "quadratic"):
        layer = 2 * 2.0 * D * D + H * 2.0 * dk * dk + attn + ffn
    else:
        layer = ffn
    return a.layers * layer + 2.0 * D * V


def main():
    info = blas_info()
    env = " ".join("%s=%s" % (k, os.environ.get(k, "unset")) for k in
                   ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY", "OPENBLAS_CORETYPE"))
    print("torch %s: intra-op threads %d, inter-op threads %d, %s, %s; BLAS libraries %s; OpenBLAS %s core %s, "
          "%s threads (%s); MKL %s, MKL-DNN %s; %s" % (
              torch.__version__, torch.get_num_threads(), torch.get_num_interop_threads(),
              torch.__config__.parallel_info().splitlines()[-1].strip(), info["torch_blas_info"],
              ",".join(info["libs"]), "yes" if info["openblas"] else "NO", info["core"], info["blas_threads"],
              info["config"], info["mkl"], info["mkldnn"], env))
    print("INFO impl=torch version=%s threads=%d interop=%d openblas=%d core=%s blas_threads=%s" % (
        torch.__version__, torch.get_num_threads(), torch.get_num_interop_threads(), int(info["openblas"]),
        info["core"], info["blas_threads"]))
    if args.info:
        return 0
    torch.manual_seed(args.seed)
    rss_torch = rss_mb()
    model = Model(args)
    params = [p for p in model.parameters()]
    nparams = sum(p.numel() for p in params)
    try:
        opt = torch.optim.Adam(params, lr=1e-3, foreach=bool(args.foreach))
    except TypeError:
        opt = torch.optim.Adam(params, lr=1e-3)
    B, T, V = args.batch, args.seq, args.vocab
    gen = torch.Generator().manual_seed(args.seed)
    times, loss_v, t_first, cpu_timed = [], float("nan"), 0.0, 0.0
    t_all = time.perf_counter()
    s = -args.warmup - 1
    while s + 1 < args.steps:
        s += 1
        seq = torch.randint(0, V, (B, T + 1), generator=gen)
        ids, tg = seq[:, :T], seq[:, 1:]
        t0, c0 = time.perf_counter(), cpu_seconds()
        logits = model(ids)
        loss = F.cross_entropy(logits.reshape(-1, V), tg.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        loss_v = loss.item()
        if s == -args.warmup:
            t_first = dt
        if s >= 0:
            times.append(dt)
            cpu_timed += cpu_seconds() - c0
            if args.max_time > 0 and time.perf_counter() - t_all > args.max_time:
                break
        elif s < -1 and args.max_time > 0 and time.perf_counter() - t_all > args.max_time / 4:
            s = -1  # slow run: skip the remaining warm-up steps
    med, best = statistics.median(times), min(times)
    fpt, fpt_full = 3 * flops_per_token_fwd(args, False), 3 * flops_per_token_fwd(args, True)
    tok_s = B * T / med
    print("torch %s train step: B=%d T=%d D=%d H=%d L=%d d_ff=%d V=%d, %d threads, %d params" % (
        args.mixer, B, T, args.d_model, args.heads, args.layers, args.d_ff, V, args.threads, nparams))
    print("  steps timed %d (after %d warm-up; first step %.1f ms), median %.1f ms, best %.1f ms, loss %.4f" % (
        len(times), args.warmup, t_first * 1e3, med * 1e3, best * 1e3, loss_v))
    print("  tokens/s %.0f, model GFLOP/s %.1f, peak RSS %.1f MB (python %.1f MB, after import torch %.1f MB)" % (
        tok_s, fpt * tok_s * 1e-9, rss_mb(), rss_python, rss_torch))
    util = cpu_timed / sum(times)
    print("  CPU time / wall time over the timed steps %.2f (%d threads; idle OpenMP workers sleep: PASSIVE)" % (
        util, args.threads))
    print("RESULT impl=torch mixer=%s tok_s=%.1f step_ms=%.2f best_step_ms=%.2f gflops=%.2f mflop_tok=%.4f "
          "mflop_tok_full=%.4f rss_mb=%.1f rss_base_mb=%.1f params=%d steps=%d threads=%d cpu_util=%.2f loss=%.4f" % (
              args.mixer, tok_s, med * 1e3, best * 1e3, fpt * tok_s * 1e-9, fpt * 1e-6, fpt_full * 1e-6, rss_mb(),
              rss_torch, nparams, len(times), args.threads, util, loss_v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
