"""The seed's Fast Weights Transformer (labml transformers/fast_weights/__init__.py,
seeds/000_5761b2f2ac373807.txt; docs/math.md §7) and the linear-attention baseline of its
docstring, written once: the PyTorch reference of metaformer.h's fast_weights and linear mixers for
both the parity goldens (tests/parity/goldens_fastweights.py, float64 and float32) and the
benchmark (bench/torch_fastweights.py). Independent of metaformer.h.

labml layout: activations [T][B][D] sequence-first, per-head views [T][B][H][dk].
    fast_weights   DPFP features + the delta rule in the seed's Python token loop, no LayerNorm
                   before the attention (docs/math.md §7.4)
    linear         W += v phi(k)^T, y = W phi(q) with DPFP features (sum-normalised: no z); with
                   elu + 1 features also z += phi(k), y = W phi(q) / (z . phi(q) + eps); the same
                   kind of loop, in the library's pre-LN MetaFormer block (docs/math.md §7.5)
Model (docs/math.md §3.5): Embedding N(0,1) (+ learned positions, a benchmark option) -> layers -> final
LayerNorm -> generator Linear(D, V); FFN = labml FeedForward (tests/parity/seed_labml.py).
"""
import torch
import torch.nn.functional as F
from torch import nn

from seed_labml import PrepareForMultiHeadAttention


class DPFP(nn.Module):
    """The seed's DPFP: phi = [k, -k] relu, times itself rolled by 1..nu; normalised by sum + eps."""

    def __init__(self, nu=1, eps=1e-6):
        super().__init__()
        self.nu = nu
        self.relu = nn.ReLU()
        self.eps = eps

    def forward(self, k):
        k = self.dpfp(k)
        return k / (torch.sum(k, dim=-1, keepdim=True) + self.eps)

    def dpfp(self, k):
        x = self.relu(torch.cat([k, -k], dim=-1))
        x_rolled = [x.roll(shifts=i, dims=-1) for i in range(1, self.nu + 1)]
        x_rolled = torch.cat(x_rolled, dim=-1)
        x_repeat = torch.cat([x] * self.nu, dim=-1)
        return x_repeat * x_rolled


class EluFeature(nn.Module):
    def forward(self, x):
        return F.elu(x) + 1


def fast_weights_loop(query, key, value, beta):
    """The seed's token loop (docs/math.md §7.2, 7.3) on features, values and gates [T][B][H][.]
    -> [T][B][H * dv]: vbar = W k, W += beta (v - vbar) k^T, y = W q."""
    weights = key.new_zeros((key.shape[1], key.shape[2], value.shape[3], key.shape[3]))
    outputs = []
    for i in range(query.shape[0]):
        value_existing = torch.einsum('bhvk,bhk->bhv', weights, key[i])
        weights = weights + torch.einsum('bhv,bhk->bhvk', beta[i] * (value[i] - value_existing), key[i])
        y = torch.einsum('bhvk,bhk->bhv', weights, query[i])
        outputs.append(y.reshape(y.shape[0], -1))
    return torch.stack(outputs)


def linear_loop(query, key, value, normalise, eps=1e-6):
    """Linear attention as the same kind of token loop: W = W + v phi(k)^T, y = W phi(q); with
    normalise also z = z + phi(k) and y = W phi(q) / (z . phi(q) + eps). The seed: with DPFP "the
    normalisation term z is not needed because phi' is normalised" (normalise False); elu + 1
    features keep the linear transformer's denominator (normalise True)."""
    weights = key.new_zeros((key.shape[1], key.shape[2], value.shape[3], key.shape[3]))
    z = key.new_zeros((key.shape[1], key.shape[2], key.shape[3]))
    outputs = []
    for i in range(query.shape[0]):
        weights = weights + torch.einsum('bhv,bhk->bhvk', value[i], key[i])
        y = torch.einsum('bhvk,bhk->bhv', weights, query[i])
        if normalise:
            z = z + key[i]
            den = torch.einsum('bhk,bhk->bh', z, query[i]) + eps
            y = y / den[..., None]
        outputs.append(y.reshape(y.shape[0], -1))
    return torch.stack(outputs)


class _Projections(nn.Module):
    """The seed's q, k, v projections (no bias) and phi on q and k, which both attentions below use;
    the subclass registers its other modules after these, in the seed's order."""

    def __init__(self, heads, d_model):
        super().__init__()
        self.d_k = d_model // heads
        self.heads = heads
        self.query = PrepareForMultiHeadAttention(d_model, heads, self.d_k, bias=False)
        self.key = PrepareForMultiHeadAttention(d_model, heads, self.d_k, bias=False)
        self.value = PrepareForMultiHeadAttention(d_model, heads, self.d_k, bias=False)

    def project(self, x):
        """phi(q), phi(k), v of x [T][B][D]"""
        return self.phi(self.query(x)), self.phi(self.key(x)), self.value(x)


class FastWeightsAttention(_Projections):
    """The seed's module: q, k, v and the gate beta projected without bias, phi on q and k."""

    def __init__(self, heads, d_model, phi):
        super().__init__(heads, d_model)
        self.interpolation_weight = nn.Sequential(PrepareForMultiHeadAttention(d_model, heads, 1, bias=False), nn.Sigmoid())
        self.phi = phi
        self.output = nn.Linear(d_model, d_model)

    def forward(self, x):
        query, key, value = self.project(x)
        beta = self.interpolation_weight(x)
        return self.output(fast_weights_loop(query, key, value, beta))


class LinearAttention(_Projections):
    """The linear-attention baseline of the seed's docstring, with the seed's projections."""

    def __init__(self, heads, d_model, phi, eps=1e-6):
        super().__init__(heads, d_model)
        self.phi = phi
        self.eps = eps
        self.output = nn.Linear(d_model, d_model)

    def forward(self, x):
        query, key, value = self.project(x)
        return self.output(linear_loop(query, key, value, isinstance(self.phi, EluFeature), self.eps))


class Layer(nn.Module):
    """The seed's FastWeightsAttentionTransformerLayer (norm_self_attn exists but is not used);
    pre_ln = True: the MetaFormer block the linear mixer lives in (x + attn(LN1(x)))."""

    def __init__(self, d_model, attn, feed_forward, pre_ln):
        super().__init__()
        self.size = d_model
        self.attn = attn
        self.pre_ln = pre_ln
        self.norm_self_attn = nn.LayerNorm([d_model])
        self.norm_ff = nn.LayerNorm([d_model])
        # after the LayerNorms (labml: before): the benchmark's parameter order, in which
        # clip_grad_norm_ sums the gradient norms, stays the one its timed runs always had
        self.feed_forward = feed_forward

    def forward(self, x):
        attn = self.attn(self.norm_self_attn(x) if self.pre_ln else x)
        x = x + attn
        z = self.norm_ff(x)
        ff = self.feed_forward(z)
        return x + ff


class Model(nn.Module):
    """Embedding (+ learned positions when max_seq > 0) -> n_layers make_layer() -> final LayerNorm
    (FastWeightsAttentionTransformer.norm) -> generator."""

    def __init__(self, vocab, d_model, n_layers, make_layer, max_seq=0):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_seq, d_model) if max_seq else None
        self.layers = nn.ModuleList([make_layer() for _ in range(n_layers)])
        self.norm = nn.LayerNorm([d_model])
        self.generator = nn.Linear(d_model, vocab)

    def forward(self, ids):  # ids [T][B]
        x = self.embed(ids)
        if self.pos is not None:
            x = x + self.pos.weight[: ids.shape[0]].unsqueeze(1)
        for layer in self.layers:
            x = layer(x)
        return self.generator(self.norm(x))  # [T][B][V]
