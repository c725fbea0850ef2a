"""Transformer-XL and the compressive transformer in labml's module structure (the seed
002_bbd01c47789a6b3a.txt; docs/math.md §5, §6): the one PyTorch reference of metaformer.h's
`relative` mixer, for both the parity goldens (tests/parity/goldens_xl.py, float64) and the
benchmark (bench/torch_xl.py). Written from docs/math.md, independently of metaformer.h.

Sequence-first [T, B, D] tensors: token Embedding -> pre-LN layers -> final LN -> Linear(D, V), no
positional encoding. A layer: z = LN_att(x); m_z = [LN_att([c_mem ; mem]) ; z] (memories normalised
by the layer's own LayerNorm); x += RelMHA(z, m_z, m_z, mask); x += FFN(LN_ff(x)) (ReLU).
RelMHA: q, k without bias, v and out with bias; tables R [2P, H, dk], S [2P, H], u [H, dk]; the
positional scores over table rows P - Tk .. P + Tq - 1, aligned by labml's pad-shift (shift_right).
new_mem = the detached input of every layer; merge_compress_memory runs without gradient (compress
the oldest ceil((|mem| - mem_len) / c) * c memories, trim c_mem to c_mem_len);
AttentionReconstructionLoss detaches everything but the compressor.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

from seed_labml import FeedForward

P = 4096


def shift_right(x):
    """labml's pad-shift: out[i][c] = x[i][c - i] (zero / the previous row's tail for c < i)."""
    zero_pad = x.new_zeros(x.shape[0], 1, *x.shape[2:])
    x_padded = torch.cat([x, zero_pad], dim=1)
    x_padded = x_padded.view(x.shape[1] + 1, x.shape[0], *x.shape[2:])
    return x_padded[:-1].view_as(x)


class RelativeMultiHeadAttention(nn.Module):
    """docs/math.md §4 + 5.1/5.2: q, k without bias, v and out with bias; tables R, S, u."""

    # True: get_scores asserts the pad-shift against docs/math.md §5.2's direct formula (the goldens; it
    # gathers R per score pair, too slow and too tight in float32 for the benchmark)
    check_shift = False

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
        if self.check_shift:
            direct = self.direct_scores(query, key)
            assert torch.allclose(ac + bd, direct, rtol=1e-12, atol=1e-12), "pad-shift != rho = P + j - i - Mm"
        return ac + bd

    def direct_scores(self, query, key):
        """docs/math.md §5.2 literally: rho = P + j - i - Mm."""
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
        self.norm_self_attn = nn.LayerNorm([d_model])
        self.norm_ff = nn.LayerNorm([d_model])
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
    """rate: the compression rate c of the compressive transformer; 0 = Transformer-XL."""

    def __init__(self, vocab, d_model, heads, d_ff, n_layers, rate):
        super().__init__()
        self.src_embed = nn.Embedding(vocab, d_model)
        self.layers = nn.ModuleList([Layer(d_model, heads, d_ff, rate) for _ in range(n_layers)])
        self.norm = nn.LayerNorm([d_model])
        self.generator = nn.Linear(d_model, vocab)

    def forward(self, ids, mem, c_mem):
        """ids [T, B]; mem, c_mem: per layer [len, B, D] or empty lists. Returns the logits
        [T, B, V] and new_mem."""
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
def merge_compress_memory(model, mem, c_mem, new_mem, mem_len, c_mem_len, rate):
    """docs/math.md §5.5 / 6.3, without gradient; rate 0 = Transformer-XL (no compression).
    Returns mem, c_mem, mem_to_compress."""
    if mem_len == 0 and c_mem_len == 0:
        return [], [], []
    mem = [torch.cat((m, x), dim=0) for m, x in zip(mem, new_mem)] if mem else new_mem
    if not rate:
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
    """docs/math.md §6.4 (labml): only the compressor is not detached."""

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
