#!/usr/bin/env python3
"""torch_ref.py - the metaformer.h language model in PyTorch, timed over full training steps.

    OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE \
        /usr/bin/python3 bench/torch_ref.py --mixer sdpa --steps 10 --warmup 2 --threads 2

The same model and train step as bench/bench_model.c (docs/math.md §3, §4, §9, §10):
  token Embedding N(0,1) + learned position Embedding -> n_layers pre-LN blocks
  (x += mixer(LN1(x)); x += fc2(GELU(fc1(LN2(x))))) -> final LN -> Linear(D, V), PyTorch init.
  sdpa      causal MHA, q/k/v/out Linear with bias (q, k, v fused into one Linear(D, 3D): the same
            math, the usual fast way); sdpa, metric and quadratic attend through
            F.scaled_dot_product_attention where the torch has it (2.x, as a user would: its fused CPU
            flash attention, on the GPU the flash / memory-efficient kernels), else (torch 1.13) an
            explicit matmul + masked softmax
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
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_harness as th  # noqa: E402

_p = th.parser(__doc__, seq=256)
_p.add_argument("--mixer", default="sdpa", choices=["sdpa", "metric", "quadratic", "pool", "identity"])
_p.add_argument("--pool-size", type=int, default=3)
args = _p.parse_args()
torch = th.start(args)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def sdpa(q, k, v):
    """Causal F.scaled_dot_product_attention of an already scaled q (its scale= argument is torch >= 2.1)."""
    try:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0)
    except TypeError:
        return F.scaled_dot_product_attention(q * math.sqrt(q.shape[-1]), k, v, is_causal=True)


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
        if hasattr(F, "scaled_dot_product_attention"):  # torch 2.x: its fused kernels, as a user would
            return sdpa(q, k, v)
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
    th.print_setup()
    if args.info:
        return 0
    torch.manual_seed(args.seed)
    model = Model(args)
    B, T, V = args.batch, args.seq, args.vocab
    describe = "B=%d T=%d D=%d H=%d L=%d d_ff=%d V=%d" % (B, T, args.d_model, args.heads, args.layers, args.d_ff, V)
    return th.train(args, args.mixer, describe, model, th.lm_loss_fn(args, model), B * T,
                    flops_per_token_fwd(args, False), flops_per_token_fwd(args, True))


if __name__ == "__main__":
    sys.exit(main())
