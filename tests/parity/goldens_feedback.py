#!/usr/bin/env python3
"""PyTorch parity goldens of the feedback transformer (SPEC.md section 8): `make goldens` runs it.

The reference is the seed itself (labml feedback.py, /work/shared/seeds/003_*.txt): its modules and
its Python token loop - FeedbackAttention, FeedbackTransformerLayer, FeedbackTransformer (original
variant, per-layer key/value projections) and StackFunction, Stack, FeedbackTransformerKV (shared
key/value projections, gradients accumulated per stack slot) - with the labml helpers written out
(PrepareForMultiHeadAttention = Linear viewed per head; FeedForward = Linear -> ReLU -> Linear) and
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
import copy
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


# ---------------------------------------------------------------------------------- the seed
class PrepareForMultiHeadAttention(nn.Module):
    def __init__(self, d_model, heads, d_k, bias):
        super().__init__()
        self.linear = nn.Linear(d_model, heads * d_k, bias=bias)
        self.heads, self.d_k = heads, d_k

    def forward(self, x):
        head_shape = x.shape[:-1]
        x = self.linear(x)
        return x.view(*head_shape, self.heads, self.d_k)


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.layer1 = nn.Linear(d_model, d_ff)
        self.layer2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.layer2(F.relu(self.layer1(x)))


class FeedbackAttention(nn.Module):
    def __init__(self, heads, d_model, *, is_kv_precomputed=False):
        super().__init__()
        self.d_k = d_model // heads
        self.heads = heads
        self.query = PrepareForMultiHeadAttention(d_model, heads, self.d_k, bias=False)
        if not is_kv_precomputed:
            self.key = PrepareForMultiHeadAttention(d_model, heads, self.d_k, bias=False)
            self.value = PrepareForMultiHeadAttention(d_model, heads, self.d_k, bias=True)
        else:
            self.key = None
            self.value = None
        self.output = nn.Linear(d_model, d_model)
        self.scale = 1 / math.sqrt(self.d_k)
        self.softmax = nn.Softmax(dim=0)
        self.P = 2 ** 12
        self.key_pos_embeddings = nn.Parameter(torch.zeros((self.P, heads, self.d_k)), requires_grad=True)
        self.key_pos_bias = nn.Parameter(torch.zeros((self.P, heads)), requires_grad=True)
        self.query_pos_bias = nn.Parameter(torch.zeros((heads, self.d_k)), requires_grad=True)

    def get_scores(self, query, key):
        key_pos_emb = self.key_pos_embeddings[-key.shape[0]:]
        query_pos_bias = self.query_pos_bias[None, :, :]
        key_pos_bias = self.key_pos_bias[-key.shape[0]:]
        ac = torch.einsum('bhd,jbhd->jbh', query + query_pos_bias, key)
        bd = torch.einsum('bhd,jhd->jbh', query, key_pos_emb) + key_pos_bias[:, None, :]
        return ac + bd

    def forward(self, *, query, key, value):
        query = self.query(query)
        if self.key:
            key = self.key(key)
        if self.value:
            value = self.value(value)
        scores = self.get_scores(query, key)
        scores *= self.scale
        attn = self.softmax(scores)
        x = torch.einsum("jbh,jbhd->bhd", attn, value)
        x = x.reshape(x.shape[0], -1)
        return self.output(x)


class FeedbackTransformerLayer(nn.Module):
    def __init__(self, *, d_model, attn, feed_forward):
        super().__init__()
        self.size = d_model
        self.attn = attn
        self.feed_forward = feed_forward
        self.norm_self_attn = nn.LayerNorm([d_model])
        self.norm_ff = nn.LayerNorm([d_model])

    def forward(self, *, x, key, value):
        if key is not None:
            z = self.norm_self_attn(x)
            self_attn = self.attn(query=z, key=key, value=value)
            x = x + self_attn
        z = self.norm_ff(x)
        ff = self.feed_forward(z)
        x = x + ff
        return x


def clone_module_list(module, n):
    return nn.ModuleList([copy.deepcopy(module) for _ in range(n)])


class FeedbackTransformer(nn.Module):
    def __init__(self, layer, n_layers):
        super().__init__()
        self.layers = clone_module_list(layer, n_layers)
        self.norm = nn.LayerNorm([layer.size])
        self.weights = nn.Parameter(torch.ones(n_layers + 1), requires_grad=True)
        self.softmax = nn.Softmax(0)

    def forward(self, x_seq):
        x_seq = torch.unbind(x_seq, dim=0)
        res = []
        mem = []
        for x in x_seq:
            layer_outputs = [x]
            mem_tensor = torch.stack(mem) if mem else None
            for layer in self.layers:
                x = layer(x=x, key=mem_tensor, value=mem_tensor)
                layer_outputs.append(x)
            layer_outputs = torch.stack(layer_outputs)
            mem.append(torch.einsum('lbd,l->bd', layer_outputs, self.softmax(self.weights)))
            res.append(x)
        res = torch.stack(res)
        return self.norm(res)


class StackFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, memory, memory_grad, last, n):
        ctx._mem_grad = memory_grad
        ctx._n = n
        return memory[:n + 1]

    @staticmethod
    def backward(ctx, grad_output):
        n = ctx._n
        memory_grad = ctx._mem_grad
        memory_grad[:n + 1] += grad_output
        return None, None, memory_grad[n], None


class Stack:
    def __init__(self, max_len):
        self.max_len = max_len
        self.memory = None
        self.memory_grad = None
        self.last = None
        self.n = -1
        self.last_get_n = -1

    def append(self, n, value):
        assert n == 0 or self.last_get_n == n - 1, f"{n}, {self.last_get_n}"
        with torch.no_grad():
            if self.memory is None or self.memory.shape[1:] != value.shape:
                assert n == 0
                self.memory = value.new_zeros(self.max_len, *value.shape, requires_grad=False)
                self.memory_grad = value.new_zeros(self.memory.shape, requires_grad=False)
            elif n == 0:
                self.memory_grad.fill_(0.)
            self.memory.data[n] = value.detach()
            self.n = n
        self.last = value

    def get(self):
        self.last_get_n = self.n
        return StackFunction.apply(self.memory, self.memory_grad, self.last, self.n)


class FeedbackTransformerKV(nn.Module):
    def __init__(self, layer, n_layers, d_model, heads, max_len):
        super().__init__()
        self.layers = clone_module_list(layer, n_layers)
        self.norm = nn.LayerNorm([layer.size])
        self.weights = nn.Parameter(torch.ones(n_layers + 1), requires_grad=True)
        self.softmax = nn.Softmax(0)
        d_k = d_model // heads
        self.key = PrepareForMultiHeadAttention(d_model, heads, d_k, bias=False)
        self.value = PrepareForMultiHeadAttention(d_model, heads, d_k, bias=False)
        self.mem_key = Stack(max_len)
        self.mem_value = Stack(max_len)

    def forward(self, x_seq):
        x_seq = torch.unbind(x_seq, dim=0)
        res = []
        for step, x in enumerate(x_seq):
            layer_outputs = [x]
            key_tensor = None
            value_tensor = None
            if step > 0:
                key_tensor = self.mem_key.get()
                value_tensor = self.mem_value.get()
            for layer in self.layers:
                x = layer(x=x, key=key_tensor, value=value_tensor)
                layer_outputs.append(x)
            layer_outputs = torch.stack(layer_outputs)
            mem = torch.einsum('lbd,l->bd', layer_outputs, self.softmax(self.weights))
            self.mem_key.append(step, self.key(mem))
            self.mem_value.append(step, self.value(mem))
            res.append(x)
        res = torch.stack(res)
        return self.norm(res)


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
