#!/usr/bin/env python3
"""PyTorch goldens for the fast_weights and linear mixers (`make goldens`; needs python3-torch).

The reference is the seed's module structure and token loop (labml
transformers/fast_weights/__init__.py, seeds/000_5761b2f2ac373807.txt; docs/math.md §7), written
in tests/parity/seed_fastweights.py (the model bench/torch_fastweights.py times too) in the labml
layout: activations [T][B][D] sequence-first, per-head views [T][B][H][dk].
It is independent of metaformer.h: the C test (tests/test_fastweights.c) converts at the boundary
(ids_lib[b][t] = ids[t][b], logits_lib[b][t][v] = logits[t][b][v]).

    fw_fast_weights   DPFP(nu 1) + delta rule, no LayerNorm before attention (docs/math.md §7.4)
    fw_linear_dpfp    linear attention W += v phi(k)^T, y = W phi(q) (no z normaliser: DPFP's features
                      are sum-normalised, docs/math.md §7.5), DPFP(nu 2) features, pre-LN layer (the
                      library's MetaFormer block)
    fw_linear_elu     phi = elu + 1, with the normaliser: z += phi(k), y = W phi(q) / (z . phi(q) + 1e-6)

Model (docs/math.md §3.5): Embedding N(0,1), no positional encoding -> 2 layers -> final LayerNorm ->
generator Linear(D, V); FFN = labml FeedForward (Linear, ReLU, Linear, biases). Weights come from
torch's default init with a fixed seed; LayerNorm gamma / beta are moved away from 1 / 0 so that a
missing or misplaced LayerNorm shows. Everything runs in float64 (the golden) and in float32 (to
check that fp32 can meet the test's 1e-4). Each file holds
    ids, targets [B, T] (I32, library layout)       logits [B, T, V], loss [1]
    param.<library name>, grad.<library name>       dpfp.x [2, 3, 4], dpfp.out [2, 3, 24] (nu 3)
and the config in __metadata__ ("cfg.*").
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "goldens")


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_goldens import write_safetensors  # noqa: E402  (the same writer for every golden)
from seed_fastweights import DPFP, EluFeature, FastWeightsAttention, Layer, LinearAttention, Model  # noqa: E402
from seed_labml import FeedForward  # noqa: E402


# ---------------------------------------------------------------------------------- the model
def make_model(cfg):
    D, H = cfg["d_model"], cfg["n_heads"]

    def make_layer():
        if cfg["mixer"] == "fast_weights":
            attn = FastWeightsAttention(H, D, DPFP(cfg["dpfp_nu"]))
        else:
            phi = DPFP(cfg["dpfp_nu"]) if cfg["linear_feature"] == 0 else EluFeature()
            attn = LinearAttention(H, D, phi)
        return Layer(D, attn, FeedForward(D, cfg["d_ff"]), pre_ln=cfg["mixer"] == "linear")
    return Model(cfg["vocab"], D, cfg["n_layers"], make_layer)


def library_names(model):
    """(library parameter name, torch parameter) for every parameter metaformer.h has."""
    out = [("tok_emb", model.embed.weight)]
    for l, layer in enumerate(model.layers):
        p, a = f"layers.{l}.", layer.attn
        if layer.pre_ln:
            out += [(p + "ln1.weight", layer.norm_self_attn.weight), (p + "ln1.bias", layer.norm_self_attn.bias)]
        out += [(p + "attn.q.weight", a.query.linear.weight), (p + "attn.k.weight", a.key.linear.weight),
                (p + "attn.v.weight", a.value.linear.weight)]
        if isinstance(a, FastWeightsAttention):
            out.append((p + "attn.beta.weight", a.interpolation_weight[0].linear.weight))
        out += [(p + "attn.out.weight", a.output.weight), (p + "attn.out.bias", a.output.bias),
                (p + "ln2.weight", layer.norm_ff.weight), (p + "ln2.bias", layer.norm_ff.bias),
                (p + "ffn.fc1.weight", layer.feed_forward.layer1.weight),
                (p + "ffn.fc1.bias", layer.feed_forward.layer1.bias),
                (p + "ffn.fc2.weight", layer.feed_forward.layer2.weight),
                (p + "ffn.fc2.bias", layer.feed_forward.layer2.bias)]
    out += [("ln_f.weight", model.norm.weight), ("ln_f.bias", model.norm.bias),
            ("head.weight", model.generator.weight), ("head.bias", model.generator.bias)]
    return out


# ---------------------------------------------------------------------------------- goldens
BASE = {"vocab": 11, "d_model": 16, "n_heads": 2, "n_layers": 2, "d_ff": 32, "dpfp_nu": 1, "linear_feature": 0}
CASES = [
    ("fw_fast_weights", dict(BASE, mixer="fast_weights")),
    ("fw_linear_dpfp", dict(BASE, mixer="linear", dpfp_nu=2)),
    ("fw_linear_elu", dict(BASE, mixer="linear", linear_feature=1)),
]
B, T = 2, 9


def run(model, ids, targets, dtype):
    m = model.to(dtype)
    for p in m.parameters():
        p.grad = None
    logits = m(torch.tensor(ids.T.copy(), dtype=torch.long))  # [T][B][V]
    V = logits.shape[-1]
    loss = F.cross_entropy(logits.reshape(-1, V), torch.tensor(targets.T.copy(), dtype=torch.long).reshape(-1))
    loss.backward()
    grads = {n: p.grad.detach().numpy().copy() for n, p in library_names(m)}
    return logits.detach().transpose(0, 1).numpy().copy(), float(loss.detach()), grads


def rel_err(a, b):
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-6))


def golden(name, cfg, seed):
    torch.manual_seed(seed)
    model = make_model(cfg)
    with torch.no_grad():  # LayerNorms away from 1 / 0 (torch init otherwise)
        for mod in model.modules():
            if isinstance(mod, nn.LayerNorm):
                mod.weight.add_(0.2 * torch.randn_like(mod.weight))
                mod.bias.add_(0.2 * torch.randn_like(mod.bias))
    gen = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, cfg["vocab"], (B, T), generator=gen).numpy().astype(np.int32)
    targets = torch.randint(0, cfg["vocab"], (B, T), generator=gen).numpy().astype(np.int32)
    params = {n: p.detach().numpy().astype(np.float32) for n, p in library_names(model)}
    model64 = model.double()
    with torch.no_grad():  # the float64 run starts from exactly the stored float32 weights
        for n, p in library_names(model64):
            p.copy_(torch.tensor(params[n], dtype=torch.float64))
    logits64, loss64, grads64 = run(model64, ids, targets, torch.float64)
    logits32, loss32, grads32 = run(model64, ids, targets, torch.float32)
    errs = {"logits": rel_err(logits32, logits64), "loss": abs(loss32 - loss64) / abs(loss64)}
    errs.update({"grad." + n: rel_err(grads32[n], grads64[n]) for n in params})
    worst = max(errs, key=errs.get)
    dx = torch.randn(2, 3, 4, generator=gen, dtype=torch.float64)
    dout = DPFP(nu=3)(dx)
    tensors = [("ids", ids), ("targets", targets), ("logits", logits64.astype(np.float32)),
               ("loss", np.array([loss64], dtype=np.float32)),
               ("dpfp.x", dx.numpy().astype(np.float32)), ("dpfp.out", dout.numpy().astype(np.float32))]
    tensors += [("param." + n, w) for n, w in params.items()]
    tensors += [("grad." + n, grads64[n].astype(np.float32)) for n in params]
    meta = {"cfg." + k: v for k, v in cfg.items()}
    meta.update({"parity.B": B, "parity.T": T, "dpfp.nu": 3,
                 "golden.made_by": "tests/parity/goldens_fastweights.py (PyTorch %s, float64)" % torch.__version__,
                 "golden.fp32_worst": "%s %.3g" % (worst, errs[worst])})
    dst = os.path.join(OUT, name + ".safetensors")
    write_safetensors(dst, tensors, meta)
    print(f"{name:16s} loss {loss64:.6f}  torch fp32 vs fp64: worst {worst} {errs[worst]:.2e}  "
          f"-> {os.path.relpath(dst, ROOT)} ({os.path.getsize(dst)} bytes)")
    if errs[worst] > 1e-5:
        print(f"  warning: torch's own fp32 run is {errs[worst]:.2e} from fp64 on {worst}", file=sys.stderr)


def main():
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    for i, (name, cfg) in enumerate(CASES):
        golden(name, cfg, 100 + i)


if __name__ == "__main__":
    main()
