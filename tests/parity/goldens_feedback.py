#!/usr/bin/env python3
"""PyTorch parity goldens of the feedback transformer (docs/math.md §8): `make goldens` runs it.

The reference is the seed itself (labml feedback.py, /work/shared/seeds/003_*.txt): its modules and
its Python token loop - FeedbackAttention, FeedbackTransformerLayer, FeedbackTransformer (original
variant, per-layer key/value projections) and StackFunction, Stack, FeedbackTransformerKV (shared
key/value projections, gradients accumulated per stack slot) - in tests/parity/seed_feedback.py,
which bench/torch_feedback.py times too, with the labml helpers written out (seed_labml.py:
PrepareForMultiHeadAttention = Linear viewed per head; FeedForward = Linear -> ReLU -> Linear) and
dropout left out (0 in the experiments). Around it the library's model with pos = none, exactly the
seed's: Embedding (no positions) -> feedback transformer (with its final LN) -> Linear(D, V).

Independent of metaformer.h: the weights are made here (seeded), every one perturbed so that a
mix-up shows (LayerNorm gamma/beta away from 1/0, the zero-initialised u, R, S away from zero, the
layer weights w away from ones, each layer different), and the model runs in float64.
Sequence-first inside (as the seed), batch-first at the boundary: ids_lib[b][t] = ids[t][b].

Writes tests/goldens/fb_<variant>.safetensors (F32; ids and targets I32):
    param.<library name>, grad.<library name>   every parameter and dLoss/dparam
    ids, targets [B, T]; logits [B, T, V]; loss [1]
R [P, H, dk] and S [P, H] have P = 4096 rows, of which a T-step sequence reads the last T - 1; to
keep the files small only their last T rows are stored (param.* and grad.*), every earlier row is
zero in the parameter and in its gradient ("rel_rows" in the metadata).
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "goldens")

V, D, H, N, DFF, T, B = 7, 8, 2, 2, 12, 6, 3


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_goldens import write_safetensors  # noqa: E402  (the same writer for every golden)
from seed_feedback import (FeedbackAttention, FeedbackTransformer, FeedbackTransformerKV,  # noqa: E402
                           FeedbackTransformerLayer)
from seed_labml import FeedForward  # noqa: E402


class Model(nn.Module):
    """labml AutoregressiveModel of the feedback experiment: src_embed -> transformer -> generator"""

    def __init__(self, kv):
        super().__init__()
        self.src_embed = nn.Embedding(V, D)
        layer = FeedbackTransformerLayer(d_model=D, attn=FeedbackAttention(H, D, is_kv_precomputed=kv),
                                         feed_forward=FeedForward(D, DFF))
        self.transformer = FeedbackTransformerKV(layer, N, D, H, T) if kv else FeedbackTransformer(layer, N)
        self.generator = nn.Linear(D, V)

    def forward(self, ids):  # ids [T][B]
        return self.generator(self.transformer(self.src_embed(ids)))  # [T][B][V]


def library_names(model, kv):
    """library parameter name -> the seed model's parameter"""
    tr = model.transformer
    names = {"tok_emb": model.src_embed.weight, "feedback.weights": tr.weights,
             "ln_f.weight": tr.norm.weight, "ln_f.bias": tr.norm.bias,
             "head.weight": model.generator.weight, "head.bias": model.generator.bias}
    if kv:
        names["feedback.k.weight"] = tr.key.linear.weight
        names["feedback.v.weight"] = tr.value.linear.weight
    for l, layer in enumerate(tr.layers):
        p, a = "layers.%d." % l, layer.attn
        names.update({p + "ln1.weight": layer.norm_self_attn.weight, p + "ln1.bias": layer.norm_self_attn.bias,
                      p + "attn.q.weight": a.query.linear.weight,
                      p + "attn.out.weight": a.output.weight, p + "attn.out.bias": a.output.bias,
                      p + "attn.u": a.query_pos_bias, p + "attn.r": a.key_pos_embeddings, p + "attn.s": a.key_pos_bias,
                      p + "ln2.weight": layer.norm_ff.weight, p + "ln2.bias": layer.norm_ff.bias,
                      p + "ffn.fc1.weight": layer.feed_forward.layer1.weight,
                      p + "ffn.fc1.bias": layer.feed_forward.layer1.bias,
                      p + "ffn.fc2.weight": layer.feed_forward.layer2.weight,
                      p + "ffn.fc2.bias": layer.feed_forward.layer2.bias})
        if not kv:
            names.update({p + "attn.k.weight": a.key.linear.weight, p + "attn.v.weight": a.value.linear.weight,
                          p + "attn.v.bias": a.value.linear.bias})
    assert len({id(t) for t in names.values()}) == len(list(model.parameters())), "a parameter has no library name"
    return names


def make(variant, seed):
    kv = variant == "feedback_kv"
    torch.manual_seed(seed)
    model = Model(kv).double()
    names = library_names(model, kv)
    with torch.no_grad():  # every weight perturbed: a mix-up of layers, rows or roles shows
        for name, p in names.items():
            if name.endswith(("ln1.weight", "ln2.weight")) or name == "ln_f.weight":
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            elif name.endswith(("ln1.bias", "ln2.bias")) or name == "ln_f.bias":
                p.copy_(0.2 * torch.randn_like(p))
            elif name.endswith(("attn.r", "attn.s")):
                p.zero_()
                p[-T:] = 0.5 * torch.randn_like(p[-T:])  # only the last T rows are ever read
            elif name.endswith("attn.u"):
                p.copy_(0.5 * torch.randn_like(p))
            elif name == "feedback.weights":
                p.copy_(1.0 + torch.randn_like(p))
            elif name == "tok_emb":
                p.copy_(torch.randn_like(p))
            else:  # Linear weights and biases: a fresh PyTorch-like init per layer
                a = 1.0 / math.sqrt(p.shape[-1] if p.dim() == 2 else D)
                p.copy_(torch.empty_like(p).uniform_(-a, a))
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, V, (T, B), generator=g)
    targets = torch.randint(0, V, (T, B), generator=g)
    logits = model(ids)
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    loss.backward()

    tensors = [("ids", ids.t().contiguous().numpy().astype(np.int32)),
               ("targets", targets.t().contiguous().numpy().astype(np.int32)),
               ("logits", logits.detach().transpose(0, 1).contiguous().numpy().astype(np.float32)),
               ("loss", np.array([loss.item()], dtype=np.float32))]
    for name, p in sorted(names.items()):
        val, grad = p.detach(), p.grad
        if name.endswith(("attn.r", "attn.s")):
            assert float(grad[:-T].abs().max()) == 0.0
            val, grad = val[-T:], grad[-T:]
        tensors.append(("param." + name, val.numpy().astype(np.float32)))
        tensors.append(("grad." + name, grad.numpy().astype(np.float32)))
    meta = {"cfg.mixer": variant, "cfg.vocab": V, "cfg.d_model": D, "cfg.n_heads": H, "cfg.n_layers": N,
            "cfg.d_ff": DFF, "cfg.max_seq": T, "cfg.pos": "none", "cfg.ffn_act": "relu", "B": B, "T": T,
            "rel_rows": T, "source": "tests/parity/goldens_feedback.py (the labml seed, float64)"}
    path = os.path.join(OUT, "fb_%s.safetensors" % variant)
    write_safetensors(path, tensors, meta)
    print("wrote %s: loss %.6f, %d tensors, %d bytes" % (path, loss.item(), len(tensors), os.path.getsize(path)))


def main():
    os.makedirs(OUT, exist_ok=True)
    make("feedback", 6001)
    make("feedback_kv", 6002)
    return 0


if __name__ == "__main__":
    sys.exit(main())
