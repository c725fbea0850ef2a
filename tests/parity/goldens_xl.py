#!/usr/bin/env python3
"""PyTorch goldens for the relative mixer: Transformer-XL and the compressive transformer over
consecutive segments (SPEC.md sections 5, 6). Run by `make goldens` (torch >= 1.13, CPU).

The reference follows labml's module structure (sequence-first [T, B, D] tensors, the seed
002_bbd01c47789a6b3a.txt): RelativeMultiHeadAttention with the pad-shift of the positional scores
(checked here against the direct formula rho = P + j - i - Mm), pre-LN layers whose memories are
normalised by the layer's own LayerNorm, new_mem = the detached input of each layer,
merge_compress_memory without gradient (compress the oldest ceil((|mem| - mem_len) / c) * c
memories, trim c_mem to c_mem_len) and AttentionReconstructionLoss (detached LN and projections).
It is written from SPEC.md, independently of metaformer.h, and runs in float64.

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
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "goldens")
P = 4096
LN_EPS = 1e-5
torch.set_default_dtype(torch.float64)


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_goldens import write_safetensors  # noqa: E402  (the same writer for every golden)


# ------------------------------------------------------------------------------ labml structure
def shift_right(x):
    """labml's pad-shift: out[i][c] = x[i][c - i] (zero / the previous row's tail for c < i)."""
    zero_pad = x.new_zeros(x.shape[0], 1, *x.shape[2:])
    x_padded = torch.cat([x, zero_pad], dim=1)
    x_padded = x_padded.view(x.shape[1] + 1, x.shape[0], *x.shape[2:])
    return x_padded[:-1].view_as(x)


class RelativeMultiHeadAttention(nn.Module):
    """SPEC 4 + 5.1/5.2: q, k without bias, v and out with bias; tables R, S, u."""

    def __init__(self, heads, d_model):
        super().__init__()
        self.h, self.d_k = heads, d_model // heads
        self.query = nn.Linear(d_model, d_model, bias=False)
        self.key = nn.Linear(d_model, d_model, bias=False)
        self.value = nn.Linear(d_model, d_model, bias=True)
        self.output = nn.Linear(d_model, d_model, bias=True)
        self.scale = 1 / math.sqrt(self.d_k)
        self.key_pos_embeddings = nn.Parameter(torch.zeros(2 * P, heads, self.d_k))
        self.key_pos_bias = nn.Parameter(torch.zeros(2 * P, heads))
        self.query_pos_bias = nn.Parameter(torch.zeros(heads, self.d_k))

    def prepare(self, lin, x):
        return lin(x).view(*x.shape[:-1], self.h, self.d_k)  # [T, B, H, dk]

    def get_scores(self, query, key):
        """labml: the content term with u, the positional terms over table rows P - Tk .. P + Tq - 1,
        pad-shifted, the last Tk columns kept."""
        key_pos_emb = self.key_pos_embeddings[P - key.shape[0]:P + query.shape[0]]
        key_pos_bias = self.key_pos_bias[P - key.shape[0]:P + query.shape[0]]
        ac = torch.einsum("ibhd,jbhd->ijbh", query + self.query_pos_bias[None, None], key)
        b = torch.einsum("ibhd,jhd->ijbh", query, key_pos_emb)
        d = key_pos_bias[None, :, None, :]
        bd = shift_right(b + d)[:, -key.shape[0]:]
        direct = self.direct_scores(query, key)
        assert torch.allclose(ac + bd, direct, rtol=1e-12, atol=1e-12), "pad-shift != rho = P + j - i - Mm"
        return ac + bd

    def direct_scores(self, query, key):
        """SPEC 5.2 literally: rho = P + j - i - Mm."""
        Tq, Tk = query.shape[0], key.shape[0]
        Mm = Tk - Tq
        i = torch.arange(Tq)[:, None]
        j = torch.arange(Tk)[None, :]
        rho = P + j - i - Mm                                                   # [Tq, Tk]
        R = self.key_pos_embeddings[rho]                                       # [Tq, Tk, H, dk]
        S = self.key_pos_bias[rho]                                             # [Tq, Tk, H]
        ac = torch.einsum("ibhd,jbhd->ijbh", query + self.query_pos_bias[None, None], key)
        return ac + torch.einsum("ibhd,ijhd->ijbh", query, R) + S[:, :, None, :]

    def forward(self, query, key, value, mask):
        q, k, v = self.prepare(self.query, query), self.prepare(self.key, key), self.prepare(self.value, value)
        scores = self.get_scores(q, k) * self.scale
        scores = scores.masked_fill(mask[..., None] == 0, float("-inf"))  # [Tq, Tk, B', 1]: all heads
        attn = torch.softmax(scores, dim=1)                                   # over the keys
        x = torch.einsum("ijbh,jbhd->ibhd", attn, v)
        return self.output(x.reshape(*x.shape[:2], -1))


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.layer1, self.layer2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.layer2(F.relu(self.layer1(x)))


class Conv1dCompression(nn.Module):
    def __init__(self, compression_rate, d_model):
        super().__init__()
        self.conv = nn.Conv1d(d_model, d_model, kernel_size=compression_rate, stride=compression_rate)

    def forward(self, mem):  # [T, B, D]
        return self.conv(mem.permute(1, 2, 0)).permute(2, 0, 1)


class Layer(nn.Module):
    def __init__(self, d_model, heads, d_ff, rate):
        super().__init__()
        self.self_attn = RelativeMultiHeadAttention(heads, d_model)
        self.feed_forward = FeedForward(d_model, d_ff)
        self.norm_self_attn = nn.LayerNorm([d_model], eps=LN_EPS)
        self.norm_ff = nn.LayerNorm([d_model], eps=LN_EPS)
        self.compress = Conv1dCompression(rate, d_model) if rate else None

    def concat_memory(self, z, mem, c_mem):
        if mem is None:
            return z
        if c_mem is not None:
            mem = torch.cat((c_mem, mem), dim=0)
        return torch.cat((self.norm_self_attn(mem), z), dim=0)

    def forward(self, x, mem, c_mem, mask):
        z = self.norm_self_attn(x)
        m_z = self.concat_memory(z, mem, c_mem)
        x = x + self.self_attn(z, m_z, m_z, mask)
        return x + self.feed_forward(self.norm_ff(x))


class Model(nn.Module):
    def __init__(self, vocab, d_model, heads, d_ff, n_layers, rate):
        super().__init__()
        self.src_embed = nn.Embedding(vocab, d_model)
        self.layers = nn.ModuleList([Layer(d_model, heads, d_ff, rate) for _ in range(n_layers)])
        self.norm = nn.LayerNorm([d_model], eps=LN_EPS)
        self.generator = nn.Linear(d_model, vocab)

    def forward(self, ids, mem, c_mem):
        """ids [T, B]; mem, c_mem: per layer [len, B, D] or empty lists."""
        x = self.src_embed(ids)
        T = ids.shape[0]
        m_len = (len(mem[0]) if mem else 0) + (len(c_mem[0]) if c_mem else 0)
        mask = torch.cat((torch.ones(T, m_len, dtype=torch.bool), torch.ones(T, T, dtype=torch.bool).tril()), dim=1)
        mask = mask[:, :, None]                                              # [T, Mm + T, 1]
        new_mem = []
        for i, layer in enumerate(self.layers):
            new_mem.append(x.detach())
            x = layer(x, mem[i] if mem else None, c_mem[i] if c_mem else None, mask)
        return self.generator(self.norm(x)), new_mem


@torch.no_grad()
def merge_compress_memory(model, cfg, mem, c_mem, new_mem):
    """SPEC 5.5 / 6.3, without gradient. Returns mem, c_mem, mem_to_compress."""
    mem_len, c_mem_len, rate = cfg["mem_len"], cfg["c_mem_len"], cfg["compression_rate"]
    if mem_len == 0 and c_mem_len == 0:
        return [], [], []
    mem = [torch.cat((m, x), dim=0) for m, x in zip(mem, new_mem)] if mem else new_mem
    if not cfg["compressive"]:
        return ([m[-mem_len:] for m in mem] if len(mem[0]) > mem_len else mem), [], []
    if len(mem[0]) <= mem_len:
        return mem, c_mem, []
    n_c_mem = (len(mem[0]) - mem_len + rate - 1) // rate
    n_old = n_c_mem * rate
    to_compress = [m[:n_old] for m in mem]
    mem = [m[n_old:] for m in mem]
    new_c = [layer.compress(m) for layer, m in zip(model.layers, to_compress)]
    c_mem = [torch.cat((m, nm), dim=0) for m, nm in zip(c_mem, new_c)] if c_mem else new_c
    if len(c_mem[0]) > c_mem_len:
        c_mem = [m[-c_mem_len:] for m in c_mem]
    return mem, c_mem, to_compress


class AttentionReconstructionLoss:
    """SPEC 6.4 (labml): only the compressor is not detached."""

    def __init__(self, layers):
        self.layers = layers

    def prepare_for_attn(self, attn, lin, x):
        w = lin.weight.detach()
        b = lin.bias.detach() if lin.bias is not None else None
        return F.linear(x, w, b).view(*x.shape[:-1], attn.h, attn.d_k)

    def attn(self, layer, query, key, value):
        query = self.prepare_for_attn(layer, layer.query, query)
        key = self.prepare_for_attn(layer, layer.key, key)
        value = self.prepare_for_attn(layer, layer.value, value)
        scores = torch.einsum("ibhd,jbhd->ijbh", query, key) * layer.scale
        return torch.einsum("ijbh,jbhd->ibhd", torch.softmax(scores, dim=1), value)

    def norm(self, ln, x):
        return F.layer_norm(x, ln.normalized_shape, ln.weight.detach(), ln.bias.detach(), ln.eps)

    def calc_loss(self, layer, h, mem):
        h, mem = h.detach(), mem.detach()
        c_mem = layer.compress(mem)
        h = self.norm(layer.norm_self_attn, h)
        mem = self.norm(layer.norm_self_attn, mem)
        c_mem = self.norm(layer.norm_self_attn, c_mem)
        attn_mem = self.attn(layer.self_attn, h, mem, mem)
        attn_cmem = self.attn(layer.self_attn, h, c_mem, c_mem)
        return F.mse_loss(attn_cmem, attn_mem)

    def __call__(self, h, mem):
        return sum(self.calc_loss(layer, h[n], mem[n]) for n, layer in enumerate(self.layers))


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
    model = Model(V, D, H, cfg["d_ff"], cfg["n_layers"], cfg["compression_rate"] if cfg["compressive"] else 0)
    row0, rows = cfg["table_row0"], cfg["table_rows"]
    with torch.no_grad():  # LayerNorms and the zero-initialised tables away from their init
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.add_(0.3 * torch.randn_like(m.weight))
                m.bias.add_(0.2 * torch.randn_like(m.bias))
            if isinstance(m, RelativeMultiHeadAttention):
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
        mem, c_mem, to_compress = merge_compress_memory(model, cfg, mem, c_mem, new_mem)
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
