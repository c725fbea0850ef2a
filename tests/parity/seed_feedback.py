"""The feedback transformer seed (labml feedback.py, /work/shared/seeds/003_*.txt; docs/math.md §8):
its own modules and its Python token loop, written once - the PyTorch reference of metaformer.h's
feedback mixers for both the parity goldens (tests/parity/goldens_feedback.py, float64) and the
benchmark (bench/torch_feedback.py).
    feedback      FeedbackAttention, FeedbackTransformerLayer, FeedbackTransformer: the original
                  variant, per-layer key/value projections of the memory at every step
    feedback_kv   StackFunction, Stack, FeedbackTransformerKV: key/value projections shared by the
                  layers, computed once per token, gradients accumulated per stack slot
The labml helpers are in tests/parity/seed_labml.py; dropout is left out (0 in the experiments), and
so is the seed's free() of the stacks (neither the goldens nor the benchmark calls it).
Sequence-first, as the seed: x_seq [T, B, D] in, [T, B, D] out (with the final LayerNorm).
"""
import math

import torch
from torch import nn

from seed_labml import PrepareForMultiHeadAttention, clone_module_list


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
