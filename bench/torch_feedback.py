#!/usr/bin/env python3
"""torch_feedback.py - the feedback transformer seed (labml) in PyTorch, timed over full training steps.

    OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE \
        /usr/bin/python3 bench/torch_feedback.py --mixer feedback --seq 64 --steps 10 --warmup 2 --threads 2

The PyTorch side of the feedback benchmark (docs/math.md §8): the seed's own modules and its Python
token loop (FeedbackAttention, FeedbackTransformerLayer, FeedbackTransformer for --mixer feedback;
StackFunction, Stack, FeedbackTransformerKV for --mixer feedback_kv), with the labml helpers written
out (PrepareForMultiHeadAttention = Linear viewed per head, FeedForward = Linear -> act -> Linear):
tests/parity/seed_feedback.py and seed_labml.py, the reference of the parity goldens too.
The model around it is the one metaformer.h builds for these mixers (and bench/bench_model.c times):
token Embedding N(0,1) (+ a learned position Embedding with --pos learned) -> the feedback
transformer (sequence-first inside, as in the seed) -> final LN -> Linear(D, V); FFN activation
--act (ReLU, the seed's; bench/run.sh runs both sides with --pos none --act relu, as the seeds'
models are, and must keep the two sides' options equal). Dropout is 0 in the benchmark, so the
seed's dropout modules are left out (at p = 0 they are identities that only add call overhead).
The Stack's capacity is --seq (the library uses max_seq, the seed 512).
One step: forward, mean cross-entropy on random next tokens, backward, clip_grad_norm_(1.0), Adam
(lr 1e-3, PyTorch defaults) step, zero_grad (set_to_none=True). Random tokens, seeded.
Same command line, fairness settings and RESULT line as bench/torch_ref.py.
FLOPs per token (analytic, like bench_model.c): per layer q, out (2 D^2 each), the FFN (4 D F), the
attention over the memories (4 D x mean memory count (T - 1) / 2), the key/value projection of the
memory (per layer in the original variant, once per token in the KV variant: 4 D^2 each), and the
head (2 D V); backward = 2 x forward. The seed's original variant re-projects every memory slot at
every step (about T / 2 times the projection work); that extra work is not counted.
Prints one machine-readable line: RESULT impl=torch mixer=... tok_s=... gflops=... rss_mb=...
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(HERE), "tests", "parity")]  # the harness; the seed models
import torch_harness as th  # noqa: E402

_p = th.parser(__doc__, seq=64)
_p.add_argument("--mixer", default="feedback", choices=["feedback", "feedback_kv"])
_p.add_argument("--act", default="relu", choices=["relu", "gelu"])
_p.add_argument("--pos", default="none", choices=["none", "learned"])
args = _p.parse_args()
torch = th.start(args)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from seed_feedback import (FeedbackAttention, FeedbackTransformer, FeedbackTransformerKV,  # noqa: E402
                           FeedbackTransformerLayer)
from seed_labml import FeedForward  # noqa: E402


# ---------------------------------------------------------------- the model around it
class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        D, H = a.d_model, a.heads
        kv = a.mixer == "feedback_kv"
        self.tok = nn.Embedding(a.vocab, D)
        self.pos = nn.Embedding(a.seq, D) if a.pos == "learned" else None
        act = F.relu if a.act == "relu" else F.gelu
        layer = FeedbackTransformerLayer(d_model=D, attn=FeedbackAttention(H, D, is_kv_precomputed=kv),
                                         feed_forward=FeedForward(D, a.d_ff, activation=act))
        if kv:
            self.transformer = FeedbackTransformerKV(layer, a.layers, D, H, a.seq)
        else:
            self.transformer = FeedbackTransformer(layer, a.layers)
        self.head = nn.Linear(D, a.vocab)

    def forward(self, ids):
        x = self.tok(ids)                                              # [B, T, D]
        if self.pos is not None:
            x = x + self.pos.weight[: ids.shape[1]]
        x = self.transformer(x.transpose(0, 1).contiguous())          # sequence-first, with the final LN
        return self.head(x.transpose(0, 1))                           # [B, T, V]


def flops_per_token_fwd(a):
    D, Fd, V = a.d_model, a.d_ff, a.vocab
    keys = (a.seq - 1) / 2.0  # memory slots seen by step t: t
    layer = 2 * 2.0 * D * D + 2 * 2.0 * D * keys + 2 * 2.0 * D * Fd
    kvproj = 2 * 2.0 * D * D * (a.layers if a.mixer == "feedback" else 1)
    return a.layers * layer + kvproj + 2.0 * D * V


def main():
    th.print_setup()
    if args.info:
        return 0
    torch.manual_seed(args.seed)
    model = Model(args)
    B, T, V = args.batch, args.seq, args.vocab
    describe = "B=%d T=%d D=%d H=%d L=%d d_ff=%d V=%d act=%s pos=%s" % (
        B, T, args.d_model, args.heads, args.layers, args.d_ff, V, args.act, args.pos)
    return th.train(args, args.mixer, describe, model, th.lm_loss_fn(args, model), B * T, flops_per_token_fwd(args))


if __name__ == "__main__":
    sys.exit(main())
