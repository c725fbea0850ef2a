#!/usr/bin/env python3
"""PyTorch goldens for the relative mixer: Transformer-XL and the compressive transformer over
consecutive segments (docs/math.md §5, §6). Run by `make goldens` (torch >= 1.13, CPU).

The reference (tests/parity/seed_xl.py, the model bench/torch_xl.py times too) follows labml's
module structure (sequence-first [T, B, D] tensors, the seed 002_bbd01c47789a6b3a.txt):
RelativeMultiHeadAttention with the pad-shift of the positional scores
(checked here against the direct formula rho = P + j - i - Mm), pre-LN layers whose memories are
normalised by the layer's own LayerNorm, new_mem = the detached input of each layer,
merge_compress_memory without gradient (compress the oldest ceil((|mem| - mem_len) / c) * c
memories, trim c_mem to c_mem_len) and AttentionReconstructionLoss (detached LN and projections).
It is written from docs/math.md, independently of metaformer.h, and runs in float64.

Each case runs STEPS segments with fixed weights (the memories carry over; gradients are zeroed
between steps) and writes tests/goldens/xl_<case>.safetensors:
    param.<name>                the weights under the library's names (F32)
    ids.<s>, targets.<s>        segment s, batch-first [B, T] (I32; target -1 = not counted)
    logits.<s> [B, T, V], ce.<s>, ar.<s> (0 when nothing was compressed), loss.<s> = ce + ar
    grad.<s>.<name>             d loss.<s> / d param
R [2P, H, dk] and S [2P, H] (P = 4096) are stored as the rows table_row0 .. table_row0 + rows - 1
only (metadata xl.table_row0): every other row is zero, and its gradient must be exactly zero.
The C side is tests/test_xl.c (test_parity_goldens).
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "goldens")
torch.set_default_dtype(torch.float64)


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_goldens import write_safetensors  # noqa: E402  (the same writer for every golden)
from seed_xl import (P, AttentionReconstructionLoss, Model, RelativeMultiHeadAttention,  # noqa: E402
                     merge_compress_memory)


# ------------------------------------------------------------------------------ names and cases
def library_names(model, cfg):
    """library parameter name -> the reference's tensor"""
    names = {"tok_emb": model.src_embed.weight}
    for l, L in enumerate(model.layers):
        p, a = f"layers.{l}.", L.self_attn
        names.update({
            p + "ln1.weight": L.norm_self_attn.weight, p + "ln1.bias": L.norm_self_attn.bias,
            p + "attn.q.weight": a.query.weight, p + "attn.k.weight": a.key.weight,
            p + "attn.v.weight": a.value.weight, p + "attn.v.bias": a.value.bias,
            p + "attn.out.weight": a.output.weight, p + "attn.out.bias": a.output.bias,
            p + "attn.u": a.query_pos_bias, p + "attn.r": a.key_pos_embeddings, p + "attn.s": a.key_pos_bias,
            p + "ln2.weight": L.norm_ff.weight, p + "ln2.bias": L.norm_ff.bias,
            p + "ffn.fc1.weight": L.feed_forward.layer1.weight, p + "ffn.fc1.bias": L.feed_forward.layer1.bias,
            p + "ffn.fc2.weight": L.feed_forward.layer2.weight, p + "ffn.fc2.bias": L.feed_forward.layer2.bias,
        })
        if cfg["compressive"]:
            names[p + "compress.weight"] = L.compress.conv.weight
            names[p + "compress.bias"] = L.compress.conv.bias
    names.update({"ln_f.weight": model.norm.weight, "ln_f.bias": model.norm.bias,
                  "head.weight": model.generator.weight, "head.bias": model.generator.bias})
    return names


def run_case(name, cfg, seed):
    torch.manual_seed(seed)
    V, D, H, B, T, S = cfg["vocab"], cfg["d_model"], cfg["n_heads"], cfg["B"], cfg["T"], cfg["steps"]
    rate = cfg["compression_rate"] if cfg["compressive"] else 0
    model = Model(V, D, H, cfg["d_ff"], cfg["n_layers"], rate)
    row0, rows = cfg["table_row0"], cfg["table_rows"]
    with torch.no_grad():  # LayerNorms and the zero-initialised tables away from their init
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.add_(0.3 * torch.randn_like(m.weight))
                m.bias.add_(0.2 * torch.randn_like(m.bias))
            if isinstance(m, RelativeMultiHeadAttention):
                m.check_shift = True  # every score checked against docs/math.md §5.2's direct formula
                m.query_pos_bias.normal_(0.0, 0.5)
                m.key_pos_embeddings[row0:row0 + rows].normal_(0.0, 0.5)
                m.key_pos_bias[row0:row0 + rows].normal_(0.0, 1.0)
    names = library_names(model, cfg)
    assert len(names) == len(list(model.parameters())), "a reference parameter has no library name"
    gen = torch.Generator().manual_seed(seed + 1)
    mem, c_mem = [], []
    ar_fn = AttentionReconstructionLoss(model.layers)
    out = [(f"param.{n}", to32(t, n, row0, rows)) for n, t in names.items()]
    compressed_steps = 0
    for s in range(S):
        ids = torch.randint(0, V, (B, T), generator=gen)
        tg = torch.randint(0, V, (B, T), generator=gen)
        tg[torch.rand(B, T, generator=gen) < 0.15] = -1
        model.zero_grad(set_to_none=False)
        logits, new_mem = model(ids.t(), mem, c_mem)                          # [T, B, V]
        mem, c_mem, to_compress = merge_compress_memory(model, mem, c_mem, new_mem, cfg["mem_len"], cfg["c_mem_len"], rate)
        ce = F.cross_entropy(logits.reshape(-1, V), tg.t().reshape(-1), ignore_index=-1)
        ar = ar_fn(new_mem, to_compress) if to_compress else torch.zeros(())
        compressed_steps += bool(to_compress)
        loss = ce + ar
        loss.backward()
        out += [(f"ids.{s}", ids.numpy().astype(np.int32)), (f"targets.{s}", tg.numpy().astype(np.int32)),
                (f"logits.{s}", logits.detach().transpose(0, 1).numpy().astype(np.float32)),
                (f"ce.{s}", np.array([ce.item()], np.float32)), (f"ar.{s}", np.array([float(ar)], np.float32)),
                (f"loss.{s}", np.array([loss.item()], np.float32))]
        out += [(f"grad.{s}.{n}", to32(t.grad if t.grad is not None else torch.zeros_like(t), n, row0, rows))
                for n, t in names.items()]
        print(f"  {name} step {s}: ce {ce.item():.6f} ar {float(ar):.6f} mem {len(mem[0]) if mem else 0} "
              f"c_mem {len(c_mem[0]) if c_mem else 0}")
    if cfg["compressive"]:
        assert compressed_steps >= 3 and cfg["c_mem_len"] < S * cfg["T"], "the case must compress and trim"
    meta = {f"cfg.{k}": v for k, v in cfg.items()}
    meta["xl.table_row0"] = row0
    path = os.path.join(OUT, f"xl_{name}.safetensors")
    write_safetensors(path, out, meta)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def to32(t, name, row0, rows):
    t = t.detach()
    if name.endswith(".attn.r") or name.endswith(".attn.s"):
        assert torch.count_nonzero(torch.cat((t[:row0].flatten(), t[row0 + rows:].flatten()))) == 0, \
            f"{name}: a row outside the stored ones is not zero"
        t = t[row0:row0 + rows]
    return t.numpy().astype(np.float32)


def main():
    base = dict(vocab=11, d_model=8, n_heads=2, n_layers=2, d_ff=12, max_seq=4, B=2, T=4, steps=5,
                mem_len=5, compressive=0, c_mem_len=0, compression_rate=2, table_rows=20)
    # XL: 4 + 5 memories at most -> rows P - 8 .. P visible; the stored rows reach past P
    xl = dict(base, table_row0=P - 14)
    # compressive: segments of 3, mem_len 4, c = 2, c_mem_len 3: compresses from step 1 on
    # (2, 4, 2, 4 memories), the remaining mem is 4, 3, 4, 3 and c_mem 1, 3, 3 (trimmed), 3
    cmp_ = dict(base, T=3, max_seq=3, mem_len=4, compressive=1, c_mem_len=3, table_row0=P - 14)
    run_case("relative", xl, 1234)
    run_case("compressive", cmp_, 4321)
    return 0


if __name__ == "__main__":
    sys.exit(main())
