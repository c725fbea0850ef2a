#!/usr/bin/env python3
"""torch_feedback.py - the feedback transformer seed (labml) in PyTorch, timed over full training steps.

    OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE \
        /usr/bin/python3 bench/torch_feedback.py --mixer feedback --seq 64 --steps 10 --warmup 2 --threads 2

The PyTorch side of the feedback benchmark (SPEC.md section 8): the seed's own modules and its Python
token loop (FeedbackAttention, FeedbackTransformerLayer, FeedbackTransformer for --mixer feedback;
StackFunction, Stack, FeedbackTransformerKV for --mixer feedback_kv), with the labml helpers written
out (PrepareForMultiHeadAttention = Linear viewed per head, FeedForward = Linear -> act -> Linear).
The model around it is the one metaformer.h builds for these mixers (and bench/bench_model.c times):
token Embedding N(0,1) + learned position Embedding -> the feedback transformer (sequence-first
inside, as in the seed) -> final LN -> Linear(D, V); FFN activation GELU (the library's default;
the seed's experiments use ReLU - the cost is the same). Dropout is 0 in the benchmark, so the
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
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_harness as th  # noqa: E402

_p = th.parser(__doc__, seq=64)
_p.add_argument("--mixer", default="feedback", choices=["feedback", "feedback_kv"])
args = _p.parse_args()
torch = th.start(args)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class PrepareForMultiHeadAttention(nn.Module):
    """labml: Linear(d_model, heads * d_k) viewed as [..., heads, d_k]"""

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
        return self.layer2(F.gelu(self.layer1(x)))


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
    import copy
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

    def free(self):
        self.memory = None
        self.memory_grad = None
        self.last = None


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

    def free(self):
        self.mem_key.free()
        self.mem_value.free()


# ---------------------------------------------------------------- the model around it
class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        D, H = a.d_model, a.heads
        kv = a.mixer == "feedback_kv"
        self.tok = nn.Embedding(a.vocab, D)
        self.pos = nn.Embedding(a.seq, D)
        layer = FeedbackTransformerLayer(d_model=D, attn=FeedbackAttention(H, D, is_kv_precomputed=kv),
                                         feed_forward=FeedForward(D, a.d_ff))
        if kv:
            self.transformer = FeedbackTransformerKV(layer, a.layers, D, H, a.seq)
        else:
            self.transformer = FeedbackTransformer(layer, a.layers)
        self.head = nn.Linear(D, a.vocab)

    def forward(self, ids):
        x = self.tok(ids) + self.pos.weight[: ids.shape[1]]            # [B, T, D]
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

    def loss_fn(gen):
        seq = torch.randint(0, V, (B, T + 1), generator=gen)
        return F.cross_entropy(model(seq[:, :T]).reshape(-1, V), seq[:, 1:].reshape(-1))
    describe = "B=%d T=%d D=%d H=%d L=%d d_ff=%d V=%d" % (B, T, args.d_model, args.heads, args.layers, args.d_ff, V)
    return th.train(args, args.mixer, describe, model, loss_fn, B * T, flops_per_token_fwd(args))


if __name__ == "__main__":
    sys.exit(main())
