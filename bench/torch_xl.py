#!/usr/bin/env python3
"""torch_xl.py - Transformer-XL and the compressive transformer in PyTorch, timed over full training steps.

    OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE \
        /usr/bin/python3 bench/torch_xl.py --mixer relative --steps 10 --warmup 2 --threads 2

A faithful PyTorch implementation in labml's structure (SPEC.md sections 5, 6; the seed
002_bbd01c47789a6b3a.txt), the reference for metaformer.h's `relative` mixer:
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
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
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
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

P = 4096


def shift_right(x):
    """labml: out[i][c] = x[i][c - i] (pad one column, view with the rows shifted, drop the last)."""
    zero_pad = x.new_zeros(x.shape[0], 1, *x.shape[2:])
    x_padded = torch.cat([x, zero_pad], dim=1)
    x_padded = x_padded.view(x.shape[1] + 1, x.shape[0], *x.shape[2:])
    return x_padded[:-1].view_as(x)


class RelativeMultiHeadAttention(nn.Module):
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
        return lin(x).view(*x.shape[:-1], self.h, self.d_k)

    def get_scores(self, query, key):
        key_pos_emb = self.key_pos_embeddings[P - key.shape[0]:P + query.shape[0]]
        key_pos_bias = self.key_pos_bias[P - key.shape[0]:P + query.shape[0]]
        ac = torch.einsum("ibhd,jbhd->ijbh", query + self.query_pos_bias[None, None], key)
        b = torch.einsum("ibhd,jhd->ijbh", query, key_pos_emb)
        d = key_pos_bias[None, :, None, :]
        return ac + shift_right(b + d)[:, -key.shape[0]:]

    def forward(self, query, key, value, mask):
        q, k, v = self.prepare(self.query, query), self.prepare(self.key, key), self.prepare(self.value, value)
        scores = (self.get_scores(q, k) * self.scale).masked_fill(mask == 0, float("-inf"))
        attn = torch.softmax(scores, dim=1)
        x = torch.einsum("ijbh,jbhd->ibhd", attn, v)
        return self.output(x.reshape(*x.shape[:2], -1))


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.layer1, self.layer2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.layer2(F.relu(self.layer1(x)))


class Conv1dCompression(nn.Module):
    def __init__(self, rate, d_model):
        super().__init__()
        self.conv = nn.Conv1d(d_model, d_model, kernel_size=rate, stride=rate)

    def forward(self, mem):
        return self.conv(mem.permute(1, 2, 0)).permute(2, 0, 1)


class Layer(nn.Module):
    def __init__(self, d_model, heads, d_ff, rate):
        super().__init__()
        self.self_attn = RelativeMultiHeadAttention(heads, d_model)
        self.feed_forward = FeedForward(d_model, d_ff)
        self.norm_self_attn = nn.LayerNorm([d_model])
        self.norm_ff = nn.LayerNorm([d_model])
        self.compress = Conv1dCompression(rate, d_model) if rate else None

    def forward(self, x, mem, c_mem, mask):
        z = self.norm_self_attn(x)
        if mem is not None:
            if c_mem is not None:
                mem = torch.cat((c_mem, mem), dim=0)
            m_z = torch.cat((self.norm_self_attn(mem), z), dim=0)
        else:
            m_z = z
        x = x + self.self_attn(z, m_z, m_z, mask)
        return x + self.feed_forward(self.norm_ff(x))


class Model(nn.Module):
    def __init__(self, a, rate):
        super().__init__()
        self.src_embed = nn.Embedding(a.vocab, a.d_model)
        self.layers = nn.ModuleList([Layer(a.d_model, a.heads, a.d_ff, rate) for _ in range(a.layers)])
        self.norm = nn.LayerNorm([a.d_model])
        self.generator = nn.Linear(a.d_model, a.vocab)

    def forward(self, ids, mem, c_mem):
        x = self.src_embed(ids)                                            # [T, B, D]
        T = ids.shape[0]
        m_len = (len(mem[0]) if mem else 0) + (len(c_mem[0]) if c_mem else 0)
        mask = torch.cat((torch.ones(T, m_len, dtype=torch.bool), torch.ones(T, T, dtype=torch.bool).tril()), dim=1)
        mask = mask[:, :, None, None]
        new_mem = []
        for i, layer in enumerate(self.layers):
            new_mem.append(x.detach())
            x = layer(x, mem[i] if mem else None, c_mem[i] if c_mem else None, mask)
        return self.generator(self.norm(x)), new_mem


@torch.no_grad()
def merge_compress_memory(model, a, comp, mem, c_mem, new_mem):
    mem = [torch.cat((m, x), dim=0) for m, x in zip(mem, new_mem)] if mem else new_mem
    if not comp:
        return ([m[-a.mem_len:] for m in mem] if len(mem[0]) > a.mem_len else mem), [], []
    if len(mem[0]) <= a.mem_len:
        return mem, c_mem, []
    n_old = (len(mem[0]) - a.mem_len + a.rate - 1) // a.rate * a.rate
    to_compress = [m[:n_old] for m in mem]
    mem = [m[n_old:] for m in mem]
    new_c = [layer.compress(m) for layer, m in zip(model.layers, to_compress)]
    c_mem = [torch.cat((m, nm), dim=0) for m, nm in zip(c_mem, new_c)] if c_mem else new_c
    if len(c_mem[0]) > a.c_mem_len:
        c_mem = [m[-a.c_mem_len:] for m in c_mem]
    return mem, c_mem, to_compress


def ar_loss(layers, h, mem):
    """labml AttentionReconstructionLoss: every parameter but the compressor's detached."""
    def proj(attn, lin, x):
        w = lin.weight.detach()
        b = lin.bias.detach() if lin.bias is not None else None
        return F.linear(x, w, b).view(*x.shape[:-1], attn.h, attn.d_k)

    def attend(attn, q, kv):
        qq, k, v = proj(attn, attn.query, q), proj(attn, attn.key, kv), proj(attn, attn.value, kv)
        s = torch.softmax(torch.einsum("ibhd,jbhd->ijbh", qq, k) * attn.scale, dim=1)
        return torch.einsum("ijbh,jbhd->ibhd", s, v)

    total = 0
    for layer, hh, m in zip(layers, h, mem):
        ln = layer.norm_self_attn
        norm = lambda x: F.layer_norm(x, ln.normalized_shape, ln.weight.detach(), ln.bias.detach(), ln.eps)  # noqa: E731
        hh, m = hh.detach(), m.detach()
        cm = layer.compress(m)
        hn, mn, cmn = norm(hh), norm(m), norm(cm)
        total = total + F.mse_loss(attend(layer.self_attn, hn, cmn), attend(layer.self_attn, hn, mn))
    return total


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
    model = Model(args, args.rate if comp else 0)
    B, T, V = args.batch, args.seq, args.vocab
    state = {"mem": [], "c_mem": []}

    def loss_fn(gen):  # consecutive steps continue each other: the memories carry over
        ids = torch.randint(0, V, (T, B), generator=gen)
        tg = torch.randint(0, V, (T, B), generator=gen)
        logits, new_mem = model(ids, state["mem"], state["c_mem"])
        state["mem"], state["c_mem"], to_compress = merge_compress_memory(model, args, comp, state["mem"],
                                                                          state["c_mem"], new_mem)
        loss = F.cross_entropy(logits.reshape(-1, V), tg.reshape(-1))
        if to_compress:
            loss = loss + ar_loss(model.layers, new_mem, to_compress)
        return loss
    describe = "B=%d T=%d mem_len=%d%s D=%d H=%d L=%d d_ff=%d V=%d" % (
        B, T, args.mem_len, " c_mem_len=%d c=%d" % (args.c_mem_len, args.rate) if comp else "",
        args.d_model, args.heads, args.layers, args.d_ff, V)
    return th.train(args, args.mixer, describe, model, loss_fn, B * T, flops_per_token_fwd(args, comp))


if __name__ == "__main__":
    sys.exit(main())
