#!/usr/bin/env python3
"""torch_fastweights.py - the seed's Fast Weights Transformer in PyTorch, timed over full training steps.

    OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE \
        /usr/bin/python3 bench/torch_fastweights.py --mixer fast_weights --steps 10 --warmup 2 --threads 2

The model is the seed's (labml transformers/fast_weights, seeds/000_5761b2f2ac373807.txt; docs/math.md §7),
tests/parity/seed_fastweights.py, the reference of the parity goldens too:
  token Embedding N(0,1), no positional encoding (--pos learned adds one) -> n_layers
  FastWeightsAttentionTransformerLayer (x += attn(x): NO LayerNorm before the attention;
  x += FFN(LN(x)), FFN = Linear -> ReLU -> Linear with biases; --act gelu for GELU) -> final LN ->
  generator Linear(D, V). Layout [T][B][D] (sequence-first, as labml).
  fast_weights  the seed's FastWeightsAttention: q, k, v, gate projections without bias, DPFP(nu 1),
                the Python token loop (einsum per step: vbar = W k, W += beta (v - vbar) k^T, y = W q)
  linear        the same loop for linear attention (W += v k^T, y = W q: DPFP's features are
                sum-normalised, no z) with the MetaFormer pre-LN (x += attn(LN(x))), DPFP features
One step: forward, mean cross-entropy on random next tokens, backward, clip_grad_norm_(1.0),
Adam (lr 1e-3, PyTorch defaults) step, zero_grad (set_to_none=True). Random tokens, seeded.
Same options and fairness settings as bench/torch_ref.py (threads, OpenBLAS, PASSIVE wait policy).
FLOPs per token (forward; x3 for a step), the same analytic count as bench_model.c should use:
  fast_weights  per layer 4 * 2 D^2 (q, k, v, out) + 2 D H (gate) + H * 3 * 2 dk d_dot (W k, the
                rank-1 write, W q) + 2 * 2 D d_ff;  + 2 D V
  linear        per layer 4 * 2 D^2 + H * 2 * 2 dk d_dot + 2 * 2 D d_ff;  + 2 D V
Prints one machine-readable line: RESULT impl=torch mixer=... tok_s=... gflops=... rss_mb=...

--sweep "128 256 512 1024 2048": instead, time forward + backward of the seed's token loop alone
(features, values and gates given) at each length, about --tokens tokens per run (B = tokens / T),
H = --heads, dk = D / H, DPFP nu 1: the PyTorch column of bench/bench_fw_sweep.c's table.
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(HERE), "tests", "parity")]  # the harness; the seed models
import torch_harness as th  # noqa: E402


def parse():
    p = th.parser(__doc__, seq=128)
    p.add_argument("--mixer", default="fast_weights", choices=["fast_weights", "linear"])
    p.add_argument("--nu", type=int, default=1)
    p.add_argument("--act", default="relu", choices=["relu", "gelu"])
    p.add_argument("--pos", default="none", choices=["none", "learned"])
    p.add_argument("--sweep", default="", help="lengths: time the token loop alone at each (see above)")
    p.add_argument("--tokens", type=int, default=8192, help="--sweep: tokens per run")
    p.add_argument("--reps", type=int, default=3, help="--sweep: timed runs per length (best)")
    return p.parse_args()


args = parse()
torch = th.start(args)
import torch.nn.functional as F  # noqa: E402
from seed_fastweights import (DPFP, FastWeightsAttention, Layer, LinearAttention, Model,  # noqa: E402
                              fast_weights_loop, linear_loop)
from seed_labml import FeedForward  # noqa: E402


def make_model(a):
    D = a.d_model
    linear = a.mixer == "linear"
    act = F.relu if a.act == "relu" else F.gelu

    def make_layer():
        attn = (LinearAttention if linear else FastWeightsAttention)(a.heads, D, DPFP(a.nu))
        return Layer(D, attn, FeedForward(D, a.d_ff, activation=act), pre_ln=linear)
    return Model(a.vocab, D, a.layers, make_layer, max_seq=a.seq if a.pos == "learned" else 0)


def flops_per_token_fwd(a):
    D, Fd, V, H = a.d_model, a.d_ff, a.vocab, a.heads
    dk = D / H
    dd = 2 * dk * a.nu
    if a.mixer == "fast_weights":
        layer = 4 * 2.0 * D * D + 2.0 * D * H + H * 3 * 2.0 * dk * dd + 2 * 2.0 * D * Fd
    else:
        layer = 4 * 2.0 * D * D + H * 2 * 2.0 * dk * dd + 2 * 2.0 * D * Fd
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
        g = torch.Generator(device=args.device).manual_seed(args.seed)
        q = phi(torch.rand(T, B, H, dk, generator=g) * 2 - 1).requires_grad_()
        k = phi(torch.rand(T, B, H, dk, generator=g) * 2 - 1).requires_grad_()
        v = torch.randn(T, B, H, dk, generator=g).requires_grad_()
        beta = torch.sigmoid(torch.randn(T, B, H, 1, generator=g) * 2).requires_grad_()
        best = float("inf")
        for rep in range(args.reps + 1):
            t0 = time.perf_counter()
            y = linear_loop(q, k, v, False) if args.mixer == "linear" else fast_weights_loop(q, k, v, beta)
            y.sum().backward()
            th.sync(args)
            dt = time.perf_counter() - t0
            for t in (q, k, v, beta):
                t.grad = None
            if rep > 0:
                best = min(best, dt)
        print("%6d %4d | %9.2f ms | %.1f" % (T, B, best * 1e3, B * T / best * 1e-3))
        sys.stdout.flush()
    return 0


def main():
    th.print_setup()
    if args.info:
        return 0
    if args.sweep:
        return sweep()
    torch.manual_seed(args.seed)
    model = make_model(args)
    nparams = sum(p.numel() for n, p in model.named_parameters() if "norm_self_attn" not in n or args.mixer == "linear")
    B, T, V = args.batch, args.seq, args.vocab

    def loss_fn(gen):
        seq = torch.randint(0, V, (T + 1, B), generator=gen)
        return F.cross_entropy(model(seq[:T]).reshape(-1, V), seq[1:].reshape(-1))
    describe = "B=%d T=%d D=%d H=%d L=%d d_ff=%d V=%d nu=%d act=%s pos=%s" % (
        B, T, args.d_model, args.heads, args.layers, args.d_ff, V, args.nu, args.act, args.pos)
    return th.train(args, args.mixer, describe, model, loss_fn, B * T, flops_per_token_fwd(args), nparams=nparams)


if __name__ == "__main__":
    sys.exit(main())
