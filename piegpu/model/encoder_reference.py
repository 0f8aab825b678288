"""The numpy reference of the encoder (the oracle the device pass is tested against): one text at a time.

BERT's post-LayerNorm block: h = LN(h + o(attention(qkv(h)))); h = LN(h + down(act(up(h)))),
attention bidirectional over the text's own tokens; pooling and a reranker's head as
model/encoder_config.py names them.
"""

from __future__ import annotations

import math

import numpy as np

from .encoder_weights import EncoderWeights


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) * w + b over the last axis."""
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def activation(x: np.ndarray, act: str) -> np.ndarray:
    """GELU (erf, or tanh-approximated) or ReLU."""
    if act == "gelu":
        from scipy.special import erf
        return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    if act == "gelu_tanh":
        return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))
    return np.maximum(x, 0.0)


def encode(w: EncoderWeights, ids, types=None) -> np.ndarray:
    """The last hidden rows [len(ids), hidden] of one text (token type ids `types`, default 0)."""
    c = w.config
    ids = np.asarray(ids, np.int64)
    n = ids.size
    types = np.zeros(n, np.int64) if types is None else np.asarray(types, np.int64)
    pos = np.arange(n) + c.position_offset
    h = layer_norm(w.word[ids] + w.positions[pos] + w.types[types], *w.emb_ln, c.layer_norm_eps)
    heads, hd = c.num_attention_heads, c.head_dim
    for L in w.layers:
        qkv = h @ L.qkv.T + L.qkv_b
        q, k, v = (qkv[:, j * c.hidden_size:(j + 1) * c.hidden_size].reshape(n, heads, hd).transpose(1, 0, 2)
                   for j in range(3))
        s = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        o = (p @ v).transpose(1, 0, 2).reshape(n, c.hidden_size)
        h = layer_norm(h + o @ L.o.T + L.o_b, *L.ln1, c.layer_norm_eps)
        f = activation(h @ L.up.T + L.up_b, c.act) @ L.down.T + L.down_b
        h = layer_norm(h + f, *L.ln2, c.layer_norm_eps)
    return h


def pool(rows: np.ndarray, mode: str, normalize: bool = False, dimensions: int | None = None) -> np.ndarray:
    """One vector of a text's rows: mean, cls (the first), last, max, mean_sqrt_len or weightedmean; truncated to `dimensions`, then
    L2-normalized where asked (Matryoshka: truncate first)."""
    v = {"mean": lambda: rows.mean(0), "cls": lambda: rows[0], "last": lambda: rows[-1],
         "max": lambda: rows.max(0), "mean_sqrt_len": lambda: rows.sum(0) / np.sqrt(len(rows)),
         "weightedmean": lambda: (np.arange(1, len(rows) + 1)[:, None] * rows).sum(0) / (len(rows) * (len(rows) + 1) / 2)
         }[mode]()
    if dimensions:
        v = v[:dimensions]
    return v / max(float(np.linalg.norm(v)), 1e-12) if normalize else v


def score(w: EncoderWeights, rows: np.ndarray) -> np.ndarray:
    """A reranker head's logits [num_labels] of a pair's rows: dense + tanh on the first row, then the output."""
    dense, dense_b, out, out_b = w.head
    return np.tanh(rows[0] @ dense.T + dense_b) @ out.T + out_b
