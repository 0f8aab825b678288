"""The steps of an encoder pass (BERT / RoBERTa) over a padding-free batch of texts, as named dispatches.

The projections are the decoder's matmul (model/kernels.py's _matvec: token tiles, weight
formats) with epilogues/bias.wgsl (bias, activation, store or add into the residual); the rest
are encoder shaders: the embeddings' gather (embed.wgsl) and add + LayerNorm (layernorm.wgsl
with blocks/ln_embed), post-norm LayerNorms, attention over each text's own tokens
(encoder_attention.wgsl), pooling (encoder_pool.wgsl).
"""

from __future__ import annotations

from math import ceil

from .gpu_weights import GpuMatrix
from .kernels import Kernels

ACTS = {"none": "return v;", "gelu": "return 0.5 * v * (1.0 + erf_f32(v * 0.7071067811865476));",
        "gelu_tanh": "return 0.5 * v * (1.0 + tanh(clamp(0.7978845608028654 * (v + 0.044715 * v * v * v), "
                     "-15.0, 15.0)));",
        "relu": "return max(v, 0.0);", "tanh": "return tanh(clamp(v, -15.0, 15.0));"}
POOL_MODES = {"mean": 0, "cls": 1, "last": 2, "max": 3, "mean_sqrt_len": 4, "weightedmean": 5}


class EncoderKernels(Kernels):
    """Records the dispatches of one encoder pass of T tokens into a Recorder."""

    def linear(self, w: GpuMatrix, x, bias, out, tokens: int, key: tuple, act: str = "none",
               add: bool = False) -> None:
        """out[t] = act(W x[t] + bias) for `tokens` rows (`add`: out[t] += instead, no activation)."""
        params = {"OUT_STRIDE": w.rows, "ADD": add, "ACT": ACTS[act]}
        self._matvec(w, x, tokens, None, "bias", params, {3: out, 4: bias}, key)

    def embeddings(self, word: GpuMatrix, tokens, info, positions, types, ln: tuple, h, binds: dict) -> None:
        """h[t] = LN(word[token t] + positions[position t] + types[type t]) for the pass's T tokens."""
        self.embed(word, tokens, out=h, binds=binds, scale=1.0)  # the word rows, gathered on the device
        self.layernorm(h, ln, ("emb-ln",), embed=(info, positions, types))

    def layernorm(self, h, ln: tuple, key: tuple, embed: tuple | None = None) -> None:
        """h[t] = LN(h[t]) * w + b in place for the pass's T rows (`embed`: (info, positions, types) added first)."""
        c = self.config
        row = "blocks/ln_embed" if embed else "blocks/ln_plain"
        k = self.gpu.lib.kernel("layernorm", {"H4": c.hidden_size // 4, "EPS": float(c.layer_norm_eps)},
                                {"ROW_VALUE": row})
        bufs = {0: h, 1: ln[0], 2: ln[1], 3: self.gpu.params(self.T)}
        if embed:
            bufs.update({4: embed[0], 5: embed[1], 6: embed[2]})
        self.rec.dispatch(k, bufs, (ceil(self.T / 64), 1, 1), "layernorm", self.scope + key)

    def encoder_attention(self, qkv, info, out, key: tuple) -> None:
        """out[t] = softmax(q k^T / sqrt(d)) v per head over the keys of token t's own text (info[t].zw)."""
        c = self.config
        wg = 16 if self.gpu.dev.is_cpu else 64
        k = self.gpu.lib.kernel("encoder_attention", {
            "HEADS": c.num_attention_heads, "HD4": c.head_dim // 4, "H4": c.hidden_size // 4,
            "SCALE": float(c.head_dim ** -0.5), "WG": wg})
        self.rec.dispatch(k, {0: qkv, 1: out, 2: info, 3: self.gpu.params(self.T)},
                          (ceil(self.T * c.num_attention_heads / wg), 1, 1), "attention", self.scope + key)

    def pool(self, h, texts, out, count: int, mode: str) -> None:
        """out[b] = the pooled rows of text b (texts[b] = (first token, tokens)) for `count` texts."""
        h4 = self.config.hidden_size // 4
        k = self.gpu.lib.kernel("encoder_pool", {"H4": h4, "MODE": POOL_MODES[mode]})
        self.rec.dispatch(k, {0: h, 1: out, 2: texts, 3: self.gpu.params(count)}, (ceil(count * h4 / 64), 1, 1),
                          "pool", self.scope + ("pool", mode, count))


def encoder_pass(k: EncoderKernels, g, s, count: int, mode: str, head: bool) -> None:
    """Record one pass over `count` texts of T tokens in all: the blocks, pooling into s.pooled, with `head` the
    reranker's head after it (its scores in s.scores)."""
    T = k.T
    k.embeddings(g.word, s.tokens, s.info, g.positions, g.types, g.emb_ln, s.h, g.binds)
    for i, L in enumerate(g.layers):
        k.linear(L.qkv, s.h, L.qkv_b, s.qkv, T, (i, "qkv"))
        k.encoder_attention(s.qkv, s.info, s.o, (i, "attention"))
        k.linear(L.o, s.o, L.o_b, s.h, T, (i, "o"), add=True)
        k.layernorm(s.h, L.ln1, (i, "ln1"))
        k.linear(L.up, s.h, L.up_b, s.act, T, (i, "up"), act=g.config.act)
        k.linear(L.down, s.act, L.down_b, s.h, T, (i, "down"), add=True)
        k.layernorm(s.h, L.ln2, (i, "ln2"))
    k.pool(s.h, s.texts, s.pooled, count, mode)
    if head:
        dense, dense_b, out, out_b = g.head
        k.linear(dense, s.pooled, dense_b, s.dense, count, ("head", "dense", count), act="tanh")
        k.linear(out, s.dense, out_b, s.scores, count, ("head", "out", count))
