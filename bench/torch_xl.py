#!/usr/bin/env python3
"""torch_xl.py - Transformer-XL and the compressive transformer in PyTorch, timed over full training steps.

    OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE \
        /usr/bin/python3 bench/torch_xl.py --mixer relative --steps 10 --warmup 2 --threads 2

A faithful PyTorch implementation in labml's structure (docs/math.md §5, §6; the seed
002_bbd01c47789a6b3a.txt), the reference for metaformer.h's `relative` mixer - the model of the
parity goldens, tests/parity/seed_xl.py:
  token Embedding -> n_layers pre-LN layers -> final LN -> Linear(D, V); no positional encoding
  layer: z = LN_att(x); m_z = [LN_att([c_mem ; mem]) ; z]; x += RelMHA(z, m_z, m_z, mask);
         x += FFN(LN_ff(x)) with FFN = Linear -> ReLU -> Linear (labml FeedForward)
  RelMHA: q, k without bias, v and out with bias; tables R [2P, H, dk], S [2P, H], u [H, dk]
          (P = 4096); positional scores Q . R + S over table rows P - Tk .. P + Tq - 1, aligned with
          labml's pad-shift (shift_right), memory fully visible, causal among the current tokens
  memories: the detached input of every layer, the last mem_len kept (no gradient)
  compressive: the oldest ceil((|mem| - mem_len) / c) * c memories compressed by a per-layer
          Conv1d(D, D, c, stride c), c_mem trimmed to c_mem_len, and the attention-reconstruction
          loss (detached LN and projections; only the compressors learn from it) added to the loss
Consecutive steps continue the memories (batch row b continues row b), on random tokens.
One step: forward, mean cross-entropy (+ AR loss), backward, clip_grad_norm_(1.0), Adam (lr 1e-3,
PyTorch defaults) step, zero_grad (set_to_none=True). Same fairness settings as bench/torch_ref.py.
FLOPs per token (forward; backward = 2 x): q and out projections 2 * 2 D^2, k and v over the
Mm + T rows of [memories ; segment] 2 * 2 D^2 (Mm + T) / T, QK^T, PV and the positional Q R^T over
the visible keys 3 * 2 D (Mm + (T + 1) / 2), FFN 2 * 2 D d_ff, generator 2 D V; compressive adds
the compressor 2 D^2 per compressed memory and the AR attention (not counted: small). Mm is the
steady-state number of memory keys (mem_len, + c_mem_len when compressive).
Prints one machine-readable line: RESULT impl=torch mixer=... tok_s=... gflops=... rss_mb=...
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(HERE), "tests", "parity")]  # the harness; the seed models
import torch_harness as th  # noqa: E402


def parse():
    p = th.parser(__doc__, seq=None)
    p.add_argument("--mixer", default="relative", choices=["relative", "compressive"])
    p.add_argument("--mem-len", type=int, default=None, help="memories per layer (default 64 relative, 32 compressive)")
    p.add_argument("--c-mem-len", type=int, default=64)
    p.add_argument("--rate", type=int, default=2, help="compression rate c")
    a = p.parse_args()
    comp = a.mixer == "compressive"
    if a.seq is None:  # segment length: 64 relative, 32 compressive
        a.seq = 32 if comp else 64
    if a.mem_len is None:
        a.mem_len = 32 if comp else 64
    return a


args = parse()
torch = th.start(args)
import torch.nn.functional as F  # noqa: E402
from seed_xl import AttentionReconstructionLoss, Model, merge_compress_memory  # noqa: E402


def flops_per_token_fwd(a, comp):
    D, Fd, V, T = a.d_model, a.d_ff, a.vocab, a.seq
    Mm = a.mem_len + (a.c_mem_len if comp else 0)
    keys = Mm + (T + 1) / 2.0
    layer = 2 * 2.0 * D * D + 2 * 2.0 * D * D * (Mm + T) / T + 3 * 2.0 * D * keys + 2 * 2.0 * D * Fd
    if comp:
        layer += 2.0 * D * D  # one compressed memory per c tokens, a c*D x D product each
    return a.layers * layer + 2.0 * D * V


def main():
    th.print_setup()
    if args.info:
        return 0
    comp = args.mixer == "compressive"
    torch.manual_seed(args.seed)
    rate, c_mem_len = (args.rate, args.c_mem_len) if comp else (0, 0)
    model = Model(args.vocab, args.d_model, args.heads, args.d_ff, args.layers, rate)
    ar_loss = AttentionReconstructionLoss(model.layers)
    B, T, V = args.batch, args.seq, args.vocab
    state = {"mem": [], "c_mem": []}

    def loss_fn(gen):  # consecutive steps continue each other: the memories carry over
        ids = torch.randint(0, V, (T, B), generator=gen)
        tg = torch.randint(0, V, (T, B), generator=gen)
        logits, new_mem = model(ids, state["mem"], state["c_mem"])
        state["mem"], state["c_mem"], to_compress = merge_compress_memory(model, state["mem"], state["c_mem"], new_mem,
                                                                          args.mem_len, c_mem_len, rate)
        loss = F.cross_entropy(logits.reshape(-1, V), tg.reshape(-1))
        if to_compress:
            loss = loss + ar_loss(new_mem, to_compress)
        return loss
    describe = "B=%d T=%d mem_len=%d%s D=%d H=%d L=%d d_ff=%d V=%d" % (
        B, T, args.mem_len, " c_mem_len=%d c=%d" % (args.c_mem_len, args.rate) if comp else "",
        args.d_model, args.heads, args.layers, args.d_ff, V)
    return th.train(args, args.mixer, describe, model, loss_fn, B * T, flops_per_token_fwd(args, comp))


if __name__ == "__main__":
    sys.exit(main())
