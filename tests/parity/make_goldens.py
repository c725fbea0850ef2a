#!/usr/bin/env python3
"""Regenerate the PyTorch parity goldens: `make goldens` (needs python3-torch >= 1.13, CPU).

1. Runs build/parity_export, which writes one safetensors file per parity config to build/parity/:
   the model's weights (mf_save), the config and the batch (ids, targets) in __metadata__.
2. For each file, builds the same model in PyTorch from docs/math.md (sections 3, 4, 7.1, 7.5, 9,
   10, 19.2, 20) - independent code, not a port of metaformer.h - and runs forward, cross-entropy
   (mean over the targets != -1) and backward in float64 (the golden: the truth) and in float32 (a
   check that fp32 can meet the 1e-4 tolerance at all).
3. Writes tests/goldens/<config>.safetensors (all F32 except ids/targets/lengths/labels, I32):
     param.<name>   every weight, exactly as exported     ids, targets   [B, T]
     grad.<name>    dLoss/dparam (float64 run)             logits [B, T, V], loss [1]
   A classifier (cfg.n_classes > 0, docs/math.md §20.3) has lengths [B] and labels [B] instead of
   targets, and logits [B, C]: the mean cross-entropy over the rows.
   with the config in __metadata__ ("cfg.*", read by tests/test_parity.c with mf_load_meta),
   and tests/goldens/manifest.txt (one config per line), which the C test walks.

The safetensors files are read and written here with json + struct (no safetensors package).
"""
import json
import math
import os
import struct
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPORT = os.environ.get("PARITY_EXPORT", os.path.join(ROOT, "build", "parity_export"))
WORK = os.path.join(ROOT, "build", "parity")
OUT = os.path.join(ROOT, "tests", "goldens")
LN_EPS = 1e-5  # docs/math.md §3.3

# ---------------------------------------------------------------------------------- safetensors
_DTYPES = {"F32": np.dtype("<f4"), "F64": np.dtype("<f8"), "I32": np.dtype("<i4"), "I64": np.dtype("<i8")}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    data = blob[8 + n:]
    tensors = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        dt = _DTYPES[e["dtype"]]
        arr = np.frombuffer(data[b:end], dtype=dt).reshape(e["shape"]).copy()
        tensors[name] = arr
    return tensors, meta


def write_safetensors(path, tensors, meta):
    """tensors: list of (name, np.ndarray of float32 or int32), written in that order."""
    header = {"__metadata__": {k: str(v) for k, v in meta.items()}}
    chunks, off = [], 0
    for name, arr in tensors:
        if arr.dtype == np.float32:
            code, raw = "F32", arr.astype("<f4").tobytes()
        elif arr.dtype == np.int32:
            code, raw = "I32", arr.astype("<i4").tobytes()
        else:
            raise TypeError(f"{name}: unsupported dtype {arr.dtype}")
        header[name] = {"dtype": code, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)  # the format pads the header to 8 bytes
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for c in chunks:
            f.write(c)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------- the model
class Params:
    """The weights by name; remembers which were used so that none is silently ignored."""

    def __init__(self, tensors):
        self.t = tensors
        self.used = set()

    def __call__(self, name):
        self.used.add(name)
        return self.t[name]

    def opt(self, name, present):
        """a bias that the config switches on or off"""
        return self(name) if present else None


def sinusoid(T, D, dtype):
    """PE[t][2j] = sin(t / 10000^(2j/D)), PE[t][2j+1] = cos(t / 10000^(2j/D))."""
    pos = torch.arange(T, dtype=torch.float64)[:, None]
    two_j = torch.arange(0, D, 2, dtype=torch.float64)
    ang = pos / torch.pow(torch.tensor(10000.0, dtype=torch.float64), two_j / D)
    pe = torch.zeros(T, D, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(ang)
    pe[:, 1::2] = torch.cos(ang)[:, : D // 2]
    return pe.to(dtype)


def layer_norm(x, g, b):
    return F.layer_norm(x, (x.shape[-1],), g, b, LN_EPS)


def heads(x, H):
    """[B, T, H*e] -> [B, H, T, e]: head h owns features h*e .. h*e+e-1 (docs/math.md §2, HeadProj)."""
    B, T, D = x.shape
    return x.view(B, T, H, D // H).transpose(1, 2)


def merge(o):
    B, H, T, e = o.shape
    return o.transpose(1, 2).reshape(B, T, H * e)


def attention_softmax(scores, causal):
    """softmax over the key axis; causal: -inf where key j > query i (docs/math.md §3.6), else every
    key is visible (docs/math.md §20.1)."""
    if not causal:
        return torch.softmax(scores, dim=-1)
    T = scores.shape[-1]
    visible = torch.ones(T, T, dtype=torch.bool).tril()
    return torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)


def mha(xn, P, pre, H, bias, causal):
    """docs/math.md §4: labml MHA, q, k, v, out Linear with bias, scale 1/sqrt(dk)."""
    dk = xn.shape[-1] // H
    q = heads(F.linear(xn, P(pre + "q.weight"), P.opt(pre + "q.bias", bias)), H)
    k = heads(F.linear(xn, P(pre + "k.weight"), P.opt(pre + "k.bias", bias)), H)
    v = heads(F.linear(xn, P(pre + "v.weight"), P.opt(pre + "v.bias", bias)), H)
    a = attention_softmax(q @ k.transpose(-1, -2) / math.sqrt(dk), causal)
    return F.linear(merge(a @ v), P(pre + "out.weight"), P.opt(pre + "out.bias", bias))


def metric_form(mbar, dk):
    """docs/math.md §9.1: M[k][k'] = M[k'][k] = Mbar[l(min, max)], l(k, k') = k*dk - k(k-1)/2 + (k' - k)."""
    idx = torch.empty(dk, dk, dtype=torch.long)
    for k in range(dk):
        for k2 in range(dk):
            a, b = min(k, k2), max(k, k2)
            idx[k, k2] = a * dk - a * (a - 1) // 2 + (b - a)
    return mbar[:, idx]  # [H, dk, dk]


def form_attention(xn, P, pre, H, M, causal):
    """docs/math.md §9.2 / 9.5: p = x Wp per head, r = p M p^T, s = softmax(r / sqrt(dk)), t = s p,
    y = tbar E^T (no biases)."""
    dk = xn.shape[-1] // H
    p = heads(F.linear(xn, P(pre + "p.weight")), H)               # [B, H, T, dk]
    r = torch.einsum("bhck,hkl,bhdl->bhcd", p, M, p)               # r[c][c'] = p_c M p_c'^T
    s = attention_softmax(r / math.sqrt(dk), causal)
    return F.linear(merge(s @ p), P(pre + "e.weight"))


def pool(xn, k, causal):
    """docs/math.md §9.7: mean over the window (padding not counted) minus xn."""
    xt = xn.transpose(1, 2)                                         # [B, D, T] for avg_pool1d
    if causal:  # window {max(0, c-k+1) .. c}: left zero padding, divided by the real count
        num = F.avg_pool1d(F.pad(xt, (k - 1, 0)), k, stride=1)
        den = F.avg_pool1d(F.pad(torch.ones_like(xt), (k - 1, 0)), k, stride=1)
        mean = num / den
    else:
        mean = F.avg_pool1d(xt, k, stride=1, padding=k // 2, count_include_pad=False)
    return mean.transpose(1, 2) - xn


def dpfp(x, nu, eps=1e-6):
    """docs/math.md §7.1: a = ReLU([x, -x]); phi[(r-1) 2dk + j] = a[j] a[(j - r) mod 2dk], r = 1..nu;
    divided by its sum (+ eps)."""
    a = F.relu(torch.cat([x, -x], dim=-1))
    phi = torch.cat([a * torch.roll(a, shifts=r, dims=-1) for r in range(1, nu + 1)], dim=-1)
    return phi / (phi.sum(dim=-1, keepdim=True) + eps)


def linear_attention(xn, P, pre, H, cfg, causal):
    """docs/math.md §7.5 and §20.2: phi(q), phi(k), v bias-free per head; y_t = W phi(q_t) with W the
    sum of v_j phi(k_j)^T over the keys j <= t (causal) or all keys; elu + 1 features divide by
    z . phi(q_t) + 1e-6 (z the sum of phi(k_j) over the same keys), DPFP features do not."""
    if cfg["linear_feature"] == "elu1":
        phi = lambda x: F.elu(x) + 1
    else:
        phi = lambda x: dpfp(x, cfg["dpfp_nu"])
    q = phi(heads(F.linear(xn, P(pre + "q.weight")), H))
    k = phi(heads(F.linear(xn, P(pre + "k.weight")), H))
    v = heads(F.linear(xn, P(pre + "v.weight")), H)
    w = q @ k.transpose(-1, -2)                                      # w[t][j] = phi(q_t) . phi(k_j)
    if causal:
        T = w.shape[-1]
        w = w * torch.ones(T, T, dtype=w.dtype).tril()
    y = w @ v                                                        # = W phi(q_t)
    if cfg["linear_feature"] == "elu1":
        y = y / (w.sum(dim=-1, keepdim=True) + 1e-6)                 # z . phi(q_t) = sum_j w[t][j]
    return F.linear(merge(y), P(pre + "out.weight"), P(pre + "out.bias"))


ACTS = {
    "relu": F.relu,
    "gelu": lambda x: F.gelu(x),                        # exact erf form (docs/math.md §10)
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
}


def mixer_forward(xn, P, pre, cfg):
    D, H, mixer, causal = cfg["d_model"], cfg["n_heads"], cfg["mixer"], cfg["causal"]
    if mixer == "sdpa":
        return mha(xn, P, pre, H, cfg["attn_bias"], causal)
    if mixer == "metric":
        return form_attention(xn, P, pre, H, metric_form(P(pre + "metric"), D // H), causal)
    if mixer == "quadratic":
        return form_attention(xn, P, pre, H, P(pre + "quad").view(H, D // H, D // H), causal)
    if mixer == "pool":  # a non-causal model pools the centred window (docs/math.md §20.1)
        return pool(xn, cfg["pool_size"], causal and cfg["pool_causal"])
    if mixer == "linear":
        return linear_attention(xn, P, pre, H, cfg, causal)
    raise ValueError(mixer)


def features(P, cfg, ids, dtype):
    """docs/math.md §10 (NLP MetaFormer) with the labml pieces of docs/math.md §3: embedding N(0,1) without
    sqrt(D) scaling [+ positions] -> blocks -> final LayerNorm. The pre-norm block (§3.5) or the
    stream_norm block (§19.2: s = LN1(x); s = s + mixer(s); s = LN_mid(s); x = s + FFN(LN2(s)))."""
    B, T = ids.shape
    D, mixer = cfg["d_model"], cfg["mixer"]
    x = F.embedding(ids, P("tok_emb"))
    if cfg["pos"] == "learned":
        x = x + P("pos_emb")[:T]
    elif cfg["pos"] == "sinusoidal":
        x = x + sinusoid(T, D, dtype)
    act = ACTS[cfg["ffn_act"]]
    for l in range(cfg["n_layers"]):
        pre = f"layers.{l}."
        if cfg["block"] == "stream_norm":
            s = layer_norm(x, P(pre + "ln1.weight"), P(pre + "ln1.bias"))
            s = s + mixer_forward(s, P, pre + "attn.", cfg)
            x = layer_norm(s, P(pre + "ln_mid.weight"), P(pre + "ln_mid.bias"))
        elif mixer != "identity":  # docs/math.md §9.8 DEFAULT: the identity mixer's sub-block is omitted
            x = x + mixer_forward(layer_norm(x, P(pre + "ln1.weight"), P(pre + "ln1.bias")), P, pre + "attn.", cfg)
        xn = layer_norm(x, P(pre + "ln2.weight"), P(pre + "ln2.bias"))
        fb = cfg["ffn_bias"]
        h = act(F.linear(xn, P(pre + "ffn.fc1.weight"), P.opt(pre + "ffn.fc1.bias", fb)))
        x = x + F.linear(h, P(pre + "ffn.fc2.weight"), P.opt(pre + "ffn.fc2.bias", fb))
    return layer_norm(x, P("ln_f.weight"), P("ln_f.bias"))


def lm_loss(P, cfg, batch, dtype):
    """a language model: logits [B, T, V] = Linear(D, V) of the features; the mean cross-entropy over
    the targets != -1"""
    logits = F.linear(features(P, cfg, torch.tensor(batch["ids"], dtype=torch.long), dtype),
                      P("head.weight"), P("head.bias"))
    V = logits.shape[-1]
    loss = F.cross_entropy(logits.reshape(-1, V), torch.tensor(batch["targets"], dtype=torch.long).reshape(-1),
                           ignore_index=-1, reduction="mean")
    return logits, loss


def classify_loss(P, cfg, batch, dtype):
    """docs/math.md §20.3: row b alone, its first L_b ids (the rest is padding), through the blocks;
    the mean of its features over those positions; logits [B, C] = Linear(D, C) of the means; the
    mean cross-entropy over the rows"""
    ids = torch.tensor(batch["ids"], dtype=torch.long)
    means = [features(P, cfg, ids[b:b + 1, :L], dtype).mean(dim=1) for b, L in enumerate(batch["lengths"])]
    logits = F.linear(torch.cat(means, dim=0), P("cls.weight"), P("cls.bias"))
    return logits, F.cross_entropy(logits, torch.tensor(batch["labels"], dtype=torch.long), reduction="mean")


def run(weights, cfg, batch, dtype):
    P = Params({n: torch.tensor(w, dtype=dtype, requires_grad=True) for n, w in weights.items()})
    logits, loss = (classify_loss if cfg["n_classes"] else lm_loss)(P, cfg, batch, dtype)
    loss.backward()
    unused = set(weights) - P.used
    if unused:
        raise RuntimeError(f"the exported file has tensors the reference model does not use: {sorted(unused)}")
    grads = {n: P.t[n].grad.detach().numpy() for n in weights}
    return logits.detach().numpy(), float(loss.detach()), grads


def rel_err(a, b, zero_scale):
    """The test's measure: max|a - b| / max(max|b|, 1e-6); for a golden that is exactly zero the
    denominator is zero_scale, the largest |golden gradient| of the config (see ZERO_REL)."""
    mb = float(np.max(np.abs(b)))
    return float(np.max(np.abs(a - b)) / (zero_scale if mb == 0.0 else max(mb, 1e-6)))


# Some gradients are exactly zero by the math, whatever the weights: a bias on the keys only shifts
# every score of a query by the same amount (softmax is shift-invariant), and the pooling mixer
# mean(xn) - xn cancels the LayerNorm beta before it. An fp32 program computes them as rounding
# noise (about 1e-9 here), so no relative measure against 0 can hold; such gradients are stored as
# exact zeros (float64 gives ~1e-17 there, far below ZERO_REL times the largest gradient), listed
# in the metadata "golden.zero_grads", and measured against the config's largest gradient.
ZERO_REL = 1e-10


# ---------------------------------------------------------------------------------- main
INT_KEYS = ("vocab", "d_model", "n_heads", "n_layers", "d_ff", "max_seq", "ffn_bias", "attn_bias",
            "pool_size", "pool_causal", "clone_layers", "causal", "n_classes", "dpfp_nu")


def meta_ints(meta, key, shape):
    return np.array([int(v) for v in meta[key].split(",")], dtype=np.int32).reshape(shape)


def golden_for(path):
    weights, meta = read_safetensors(path)
    name = meta["parity.config"]
    cfg = {k[4:]: v for k, v in meta.items() if k.startswith("cfg.")}
    for k in INT_KEYS:
        cfg[k] = int(cfg[k])
    if float(cfg["ln_eps"]) != LN_EPS or float(cfg["dropout"]) != 0.0:
        raise RuntimeError(f"{name}: parity needs ln_eps 1e-5 and dropout 0")
    B, T = int(meta["parity.B"]), int(meta["parity.T"])
    batch = {"ids": meta_ints(meta, "parity.ids", (B, T))}
    if cfg["n_classes"]:
        batch["lengths"] = meta_ints(meta, "parity.lengths", (B,))
        batch["labels"] = meta_ints(meta, "parity.labels", (B,))
    else:
        batch["targets"] = meta_ints(meta, "parity.targets", (B, T))
    if cfg["clone_layers"]:  # docs/math.md §3.2: every layer starts as a copy of one prototype
        for n, w in weights.items():
            if n.startswith("layers.") and not n.startswith("layers.0."):
                twin = "layers.0." + n.split(".", 2)[2]
                if not np.array_equal(w, weights[twin]):
                    raise RuntimeError(f"{name}: clone_layers is set but {n} differs from {twin}")

    logits64, loss64, grads64 = run(weights, cfg, batch, torch.float64)
    logits32, loss32, grads32 = run(weights, cfg, batch, torch.float32)
    gscale = max(float(np.max(np.abs(g))) for g in grads64.values())
    zeros = [n for n, g in grads64.items() if float(np.max(np.abs(g))) <= ZERO_REL * gscale]
    for n in zeros:
        grads64[n] = np.zeros_like(grads64[n])
    errs = {"logits": rel_err(logits32, logits64, 0.0),
            "loss": rel_err(np.array([loss32]), np.array([loss64]), 0.0)}
    for n in weights:
        errs["grad." + n] = rel_err(grads32[n], grads64[n], gscale)
    worst = max(errs, key=errs.get)

    tensors = list(batch.items())
    tensors += [("logits", logits64.astype(np.float32)), ("loss", np.array([loss64], dtype=np.float32))]
    tensors += [("param." + n, w.astype(np.float32)) for n, w in weights.items()]
    tensors += [("grad." + n, grads64[n].astype(np.float32)) for n in weights]
    out_meta = {k: v for k, v in meta.items() if k.startswith("cfg.")}
    out_meta.update({
        "parity.config": name, "parity.B": B, "parity.T": T,
        "golden.made_by": "tests/parity/make_goldens.py (PyTorch %s, float64)" % torch.__version__,
        "golden.fp32_worst": "%s %.3g" % (worst, errs[worst]),
        "golden.zero_grads": ",".join(zeros),
    })
    dst = os.path.join(OUT, name + ".safetensors")
    write_safetensors(dst, tensors, out_meta)
    print(f"{name:16s} loss {loss64:.6f}  torch fp32 vs fp64: worst {worst} {errs[worst]:.2e}  "
          f"-> {os.path.relpath(dst, ROOT)} ({os.path.getsize(dst)} bytes)"
          + (f"\n{'':16s} exactly zero: {', '.join(zeros)}" if zeros else ""))
    if errs[worst] > 1e-5:
        print(f"  warning: torch's own fp32 run is {errs[worst]:.2e} from fp64 on {worst}", file=sys.stderr)
    return name


def main():
    if not os.path.exists(EXPORT):
        sys.exit(f"{EXPORT} is missing: run `make goldens` (it builds it first)")
    os.makedirs(WORK, exist_ok=True)
    os.makedirs(OUT, exist_ok=True)
    torch.set_num_threads(1)
    out = subprocess.run([EXPORT, WORK], check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout
    paths = [line.strip() for line in out.splitlines() if line.strip()]
    names = [golden_for(p) for p in paths]
    manifest = os.path.join(OUT, "manifest.txt")
    old = open(manifest).read().split() if os.path.exists(manifest) else []
    for n in old:  # goldens of configs that no longer exist (the family scripts' files are theirs)
        f = n + ".safetensors"
        if n not in names and os.path.exists(os.path.join(OUT, f)):
            os.remove(os.path.join(OUT, f))
    with open(manifest, "w") as f:
        f.write("".join(n + "\n" for n in names))
    total = sum(os.path.getsize(os.path.join(OUT, n + ".safetensors")) for n in names)
    print(f"{len(names)} goldens, {total} bytes, in {os.path.relpath(OUT, ROOT)}/")


if __name__ == "__main__":
    main()
