"""labml's helper modules that the seeds' models are built from, written out once: the reference
modules of tests/parity/seed_xl.py, seed_feedback.py and seed_fastweights.py, which both the
parity goldens (tests/parity/goldens_*.py) and the PyTorch side of `make bench` (bench/torch_*.py)
use. Dropout is left out everywhere (0 in the goldens and the benchmark; at p = 0 it is an identity).
"""
import copy

import torch.nn.functional as F
from torch import nn


class PrepareForMultiHeadAttention(nn.Module):
    """labml: Linear(d_model, heads * d_k) viewed as [..., heads, d_k]."""

    def __init__(self, d_model, heads, d_k, bias):
        super().__init__()
        self.linear = nn.Linear(d_model, heads * d_k, bias=bias)
        self.heads, self.d_k = heads, d_k

    def forward(self, x):
        head_shape = x.shape[:-1]
        return self.linear(x).view(*head_shape, self.heads, self.d_k)


class FeedForward(nn.Module):
    """labml FeedForward: Linear -> activation -> Linear, with biases. The seeds use ReLU; the
    benchmarks can time GELU (the library's default) instead."""

    def __init__(self, d_model, d_ff, activation=F.relu):
        super().__init__()
        self.layer1 = nn.Linear(d_model, d_ff)
        self.layer2 = nn.Linear(d_ff, d_model)
        self.activation = activation

    def forward(self, x):
        return self.layer2(self.activation(self.layer1(x)))


def clone_module_list(module, n):
    return nn.ModuleList([copy.deepcopy(module) for _ in range(n)])
