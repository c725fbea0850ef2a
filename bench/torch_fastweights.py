#!/usr/bin/env python3
"""torch_fastweights.py - the seed's Fast Weights Transformer in PyTorch, timed over full training steps.

    OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE \
        /usr/bin/python3 bench/torch_fastweights.py --mixer fast_weights --steps 10 --warmup 2 --threads 2

The model is the seed's (labml transformers/fast_weights, seeds/000_5761b2f2ac373807.txt; SPEC.md 7):
  token Embedding N(0,1), no positional encoding (--pos learned adds one) -> n_layers
  FastWeightsAttentionTransformerLayer (x += attn(x): NO LayerNorm before the attention;
  x += FFN(LN(x)), FFN = Linear -> ReLU -> Linear with biases; --act gelu for GELU) -> final LN ->
  generator Linear(D, V). Layout [T][B][D] (sequence-first, as labml).
  fast_weights  the seed's FastWeightsAttention: q, k, v, gate projections without bias, DPFP(nu 1),
                the Python token loop (einsum per step: vbar = W k, W += beta (v - vbar) k^T, y = W q)
  linear        the same loop for linear attention (W += v k^T, z += k, y = W q / (z . q + 1e-6)) with
                the MetaFormer pre-LN (x += attn(LN(x))), DPFP features
One step: forward, mean cross-entropy on random next tokens, backward, clip_grad_norm_(1.0),
Adam (lr 1e-3, PyTorch defaults) step, zero_grad (set_to_none=True). Random tokens, seeded.
Same options and fairness settings as bench/torch_ref.py (threads, OpenBLAS, PASSIVE wait policy).
FLOPs per token (forward; x3 for a step), the same analytic count as bench_model.c should use:
  fast_weights  per layer 4 * 2 D^2 (q, k, v, out) + 2 D H (gate) + H * 3 * 2 dk d_dot (W k, the
                rank-1 write, W q) + 2 * 2 D d_ff;  + 2 D V
  linear        per layer 4 * 2 D^2 + H * 2 * 2 (dk + 1) d_dot + 2 * 2 D d_ff;  + 2 D V
Prints one machine-readable line: RESULT impl=torch mixer=... tok_s=... gflops=... rss_mb=...

--sweep "128 256 512 1024 2048": instead, time forward + backward of the seed's token loop alone
(features, values and gates given) at each length, about --tokens tokens per run (B = tokens / T),
H = --heads, dk = D / H, DPFP nu 1: the PyTorch column of bench/bench_fw_sweep.c's table.
"""
import argparse
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
    p.add_argument("--mixer", default="fast_weights", choices=["fast_weights", "linear"])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-time", type=float, default=0.0, help="stop after S seconds in all (>= 1 warm-up and 1 timed step; warm-up ends early past S/4)")
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=65)
    p.add_argument("--nu", type=int, default=1)
    p.add_argument("--act", default="relu", choices=["relu", "gelu"])
    p.add_argument("--pos", default="none", choices=["none", "learned"])
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--foreach", type=int, default=1, help="Adam(foreach=...): 1 multi-tensor (fast), 0 per tensor")
    p.add_argument("--sweep", default="", help="lengths: time the token loop alone at each (see above)")
    p.add_argument("--tokens", type=int, default=8192, help="--sweep: tokens per run")
    p.add_argument("--reps", type=int, default=3, help="--sweep: timed runs per length (best)")
    p.add_argument("--info", action="store_true", help="print the BLAS / threading configuration and exit")
    return p.parse_args()


args = parse()
rss_python = rss_mb()
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(args.threads)


def blas_info():
    """What BLAS torch really calls (as bench/torch_ref.py)."""
    import ctypes
    a = torch.randn(256, 256)
    (a @ a).sum().item()
    libs = sorted({ln.split()[-1] for ln in open("/proc/self/maps") if "blas" in ln.split()[-1] or "lapack" in ln.split()[-1]})
    info = {"libs": libs, "openblas": False, "core": "?", "blas_threads": "?"}
    for path in libs:
        if "openblas" in os.path.basename(path):
            try:
                lib = ctypes.CDLL(path)
                lib.openblas_get_corename.restype = ctypes.c_char_p
                info.update(openblas=True, core=lib.openblas_get_corename().decode(),
                            blas_threads=lib.openblas_get_num_threads())
            except OSError:
                pass
    return info


# ---------------------------------------------------------------------------------- the seed
class DPFP(nn.Module):
    def __init__(self, nu=1, eps=1e-6):
        super().__init__()
        self.nu = nu
        self.relu = nn.ReLU()
        self.eps = eps

    def forward(self, k):
        k = self.dpfp(k)
        return k / (torch.sum(k, dim=-1, keepdim=True) + self.eps)

    def dpfp(self, k):
        x = self.relu(torch.cat([k, -k], dim=-1))
        x_rolled = torch.cat([x.roll(shifts=i, dims=-1) for i in range(1, self.nu + 1)], dim=-1)
        x_repeat = torch.cat([x] * self.nu, dim=-1)
        return x_repeat * x_rolled


class PrepareForMultiHeadAttention(nn.Module):
    def __init__(self, d_model, heads, d_k, bias):
        super().__init__()
        self.linear = nn.Linear(d_model, heads * d_k, bias=bias)
        self.heads, self.d_k = heads, d_k

    def forward(self, x):
        return self.linear(x).view(*x.shape[:-1], self.heads, self.d_k)


def fast_weights_loop(query, key, value, beta):
    """The seed's loop: [T][B][H][.] -> [T][B][H*dv]."""
    weights = key.new_zeros((key.shape[1], key.shape[2], value.shape[3], key.shape[3]))
    outputs = []
    for i in range(query.shape[0]):
        value_existing = torch.einsum('bhvk,bhk->bhv', weights, key[i])
        weights = weights + torch.einsum('bhv,bhk->bhvk', beta[i] * (value[i] - value_existing), key[i])
        y = torch.einsum('bhvk,bhk->bhv', weights, query[i])
        outputs.append(y.reshape(y.shape[0], -1))
    return torch.stack(outputs)


def linear_loop(query, key, value, eps=1e-6):
    weights = key.new_zeros((key.shape[1], key.shape[2], value.shape[3], key.shape[3]))
    z = key.new_zeros((key.shape[1], key.shape[2], key.shape[3]))
    outputs = []
    for i in range(query.shape[0]):
        weights = weights + torch.einsum('bhv,bhk->bhvk', value[i], key[i])
        z = z + key[i]
        y = torch.einsum('bhvk,bhk->bhv', weights, query[i]) / (torch.einsum('bhk,bhk->bh', z, query[i]) + eps)[..., None]
        outputs.append(y.reshape(y.shape[0], -1))
    return torch.stack(outputs)


class FastWeightsAttention(nn.Module):
    def __init__(self, heads, d_model, phi, linear):
        super().__init__()
        self.d_k = d_model // heads
        self.linear_attention = linear
        self.query = PrepareForMultiHeadAttention(d_model, heads, self.d_k, bias=False)
        self.key = PrepareForMultiHeadAttention(d_model, heads, self.d_k, bias=False)
        self.value = PrepareForMultiHeadAttention(d_model, heads, self.d_k, bias=False)
        if not linear:
            self.interpolation_weight = nn.Sequential(PrepareForMultiHeadAttention(d_model, heads, 1, bias=False), nn.Sigmoid())
        self.phi = phi
        self.output = nn.Linear(d_model, d_model)

    def forward(self, x):
        query = self.phi(self.query(x))
        key = self.phi(self.key(x))
        value = self.value(x)
        if self.linear_attention:
            return self.output(linear_loop(query, key, value))
        return self.output(fast_weights_loop(query, key, value, self.interpolation_weight(x)))


class Layer(nn.Module):
    def __init__(self, a):
        super().__init__()
        D = a.d_model
        self.pre_ln = a.mixer == "linear"
        self.attn = FastWeightsAttention(a.heads, D, DPFP(a.nu), self.pre_ln)
        self.norm_self_attn = nn.LayerNorm([D])  # allocated by the seed, unused by fast weights
        self.norm_ff = nn.LayerNorm([D])
        self.fc1 = nn.Linear(D, a.d_ff)
        self.fc2 = nn.Linear(a.d_ff, D)
        self.act = F.relu if a.act == "relu" else F.gelu

    def forward(self, x):
        x = x + self.attn(self.norm_self_attn(x) if self.pre_ln else x)
        return x + self.fc2(self.act(self.fc1(self.norm_ff(x))))


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed = nn.Embedding(a.vocab, a.d_model)
        self.pos = nn.Embedding(a.seq, a.d_model) if a.pos == "learned" else None
        self.layers = nn.ModuleList([Layer(a) for _ in range(a.layers)])
        self.norm = nn.LayerNorm([a.d_model])
        self.generator = nn.Linear(a.d_model, a.vocab)

    def forward(self, ids):  # [T][B]
        x = self.embed(ids)
        if self.pos is not None:
            x = x + self.pos.weight[: ids.shape[0]].unsqueeze(1)
        for layer in self.layers:
            x = layer(x)
        return self.generator(self.norm(x))


def flops_per_token_fwd(a):
    D, Fd, V, H = a.d_model, a.d_ff, a.vocab, a.heads
    dk = D / H
    dd = 2 * dk * a.nu
    if a.mixer == "fast_weights":
        layer = 4 * 2.0 * D * D + 2.0 * D * H + H * 3 * 2.0 * dk * dd + 2 * 2.0 * D * Fd
    else:
        layer = 4 * 2.0 * D * D + H * 2 * 2.0 * (dk + 1) * dd + 2 * 2.0 * D * Fd
    return a.layers * layer + 2.0 * D * V


def sweep():
    H, dk = args.heads, args.d_model // args.heads
    dd = 2 * dk * args.nu
    phi = DPFP(args.nu)
    print("seed token loop (%s) alone, fwd+bwd: H=%d dk=%d d_dot=%d, about %d tokens per run, %d threads, best of %d"
          % (args.mixer, H, dk, dd, args.tokens, args.threads, args.reps))
    print("%6s %4s | %12s | %s" % ("T", "B", "torch loop", "ktok/s"))
    for T in [int(v) for v in args.sweep.replace(",", " ").split()]:
        B = max(1, args.tokens // T)
        g = torch.Generator().manual_seed(args.seed)
        q = phi(torch.rand(T, B, H, dk, generator=g) * 2 - 1).requires_grad_()
        k = phi(torch.rand(T, B, H, dk, generator=g) * 2 - 1).requires_grad_()
        v = torch.randn(T, B, H, dk, generator=g).requires_grad_()
        beta = torch.sigmoid(torch.randn(T, B, H, 1, generator=g) * 2).requires_grad_()
        best = float("inf")
        for rep in range(args.reps + 1):
            t0 = time.perf_counter()
            y = linear_loop(q, k, v) if args.mixer == "linear" else fast_weights_loop(q, k, v, beta)
            y.sum().backward()
            dt = time.perf_counter() - t0
            for t in (q, k, v, beta):
                t.grad = None
            if rep > 0:
                best = min(best, dt)
        print("%6d %4d | %9.2f ms | %.1f" % (T, B, best * 1e3, B * T / best * 1e-3))
        sys.stdout.flush()
    return 0


def main():
    info = blas_info()
    env = " ".join("%s=%s" % (k, os.environ.get(k, "unset")) for k in
                   ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY", "OPENBLAS_CORETYPE"))
    print("torch %s: intra-op threads %d, inter-op threads %d; BLAS libraries %s; OpenBLAS %s core %s, %s threads; %s" % (
        torch.__version__, torch.get_num_threads(), torch.get_num_interop_threads(), ",".join(info["libs"]),
        "yes" if info["openblas"] else "NO", info["core"], info["blas_threads"], env))
    print("INFO impl=torch version=%s threads=%d interop=%d openblas=%d core=%s blas_threads=%s" % (
        torch.__version__, torch.get_num_threads(), torch.get_num_interop_threads(), int(info["openblas"]),
        info["core"], info["blas_threads"]))
    if args.info:
        return 0
    if args.sweep:
        return sweep()
    torch.manual_seed(args.seed)
    rss_torch = rss_mb()
    model = Model(args)
    params = [p for p in model.parameters()]
    nparams = sum(p.numel() for n, p in model.named_parameters() if "norm_self_attn" not in n or args.mixer == "linear")
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
        seq = torch.randint(0, V, (T + 1, B), generator=gen)
        ids, tg = seq[:T], seq[1:]
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
    fpt = 3 * flops_per_token_fwd(args)
    tok_s = B * T / med
    print("torch %s train step: B=%d T=%d D=%d H=%d L=%d d_ff=%d V=%d nu=%d act=%s pos=%s, %d threads, %d params" % (
        args.mixer, B, T, args.d_model, args.heads, args.layers, args.d_ff, V, args.nu, args.act, args.pos,
        args.threads, nparams))
    print("  steps timed %d (after %d warm-up; first step %.1f ms), median %.1f ms, best %.1f ms, loss %.4f" % (
        len(times), args.warmup, t_first * 1e3, med * 1e3, best * 1e3, loss_v))
    print("  tokens/s %.0f, model GFLOP/s %.1f, peak RSS %.1f MB (python %.1f MB, after import torch %.1f MB)" % (
        tok_s, fpt * tok_s * 1e-9, rss_mb(), rss_python, rss_torch))
    util = cpu_timed / sum(times)
    print("  CPU time / wall time over the timed steps %.2f (%d threads)" % (util, args.threads))
    print("RESULT impl=torch mixer=%s tok_s=%.1f step_ms=%.2f best_step_ms=%.2f gflops=%.2f mflop_tok=%.4f "
          "mflop_tok_full=%.4f rss_mb=%.1f rss_base_mb=%.1f params=%d steps=%d threads=%d cpu_util=%.2f loss=%.4f" % (
              args.mixer, tok_s, med * 1e3, best * 1e3, fpt * tok_s * 1e-9, fpt * 1e-6, fpt * 1e-6, rss_mb(),
              rss_torch, nparams, len(times), args.threads, util, loss_v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
