"""A numpy reference forward pass of a Llama-family decoder (the oracle for the GPU path).

Reads top to bottom like llama2.c's forward(): embed; per layer rmsnorm, q/k/v
projections (+ bias: Qwen2), per-head q/k rmsnorm (Qwen3), rotate-half RoPE (scaled as
the config says: llama3, linear), causal grouped-query attention over the KV cache (a
sliding window on the layers the config names: Mistral, Qwen), o-projection, residual,
rmsnorm, SwiGLU MLP, residual; final rmsnorm; logits. The family steps are chosen from
the config (model/family.py), as on the GPU. Numerics follow HF transformers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from ..errors import ModelError, ValidationError
from .checkpoint import expected_shapes, load_checkpoint
from .config import LlamaConfig
from .rope import inv_freq


@dataclass
class KVCache:
    """Keys and values of every layer for the positions seen so far; grows on demand."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: np.dtype
    length: int = 0
    keys: list[np.ndarray] = field(default_factory=list)
    values: list[np.ndarray] = field(default_factory=list)
    store: np.dtype | None = None  # K and V rounded through this dtype as they are stored (np.float16: kv_dtype "f16")

    def __post_init__(self) -> None:
        self.keys = [self._empty(16) for _ in range(self.num_layers)]
        self.values = [self._empty(16) for _ in range(self.num_layers)]

    def _empty(self, capacity: int) -> np.ndarray:
        return np.zeros((self.num_kv_heads, capacity, self.head_dim), dtype=self.dtype)

    def write(self, layer: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Store k, v [kv_heads, n, head_dim] at positions length.. and return all keys/values so far."""
        n = k.shape[1]
        end = self.length + n
        if end > self.keys[layer].shape[1]:
            # Doubling keeps appends amortised O(1) per token.
            capacity = max(end, 2 * self.keys[layer].shape[1])
            for store in (self.keys, self.values):
                grown = self._empty(capacity)
                grown[:, : self.length] = store[layer][:, : self.length]
                store[layer] = grown
        if self.store is not None:
            k, v = k.astype(self.store), v.astype(self.store)
        self.keys[layer][:, self.length : end] = k
        self.values[layer][:, self.length : end] = v
        return self.keys[layer][:, :end], self.values[layer][:, :end]

    def advance(self, n: int) -> None:
        """Commit n new positions (after every layer has written them)."""
        self.length += n


@dataclass(frozen=True)
class _Layer:
    input_norm: np.ndarray
    wq: np.ndarray
    wk: np.ndarray
    wv: np.ndarray
    wo: np.ndarray
    post_norm: np.ndarray
    w_gate: np.ndarray
    w_up: np.ndarray
    w_down: np.ndarray
    bq: np.ndarray | None = None  # q/k/v biases (Qwen2)
    bk: np.ndarray | None = None
    bv: np.ndarray | None = None
    q_norm: np.ndarray | None = None  # per-head RMSNorm weights of q and k (Qwen3)
    k_norm: np.ndarray | None = None
    attn_out_norm: np.ndarray | None = None  # sandwich norms on the attention and MLP outputs (Gemma 3)
    ffn_out_norm: np.ndarray | None = None


def rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) * weight over the last axis."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x)."""
    with np.errstate(over="ignore"):  # exp(-x) -> inf for very negative x gives the right limit, -0
        return x / (1.0 + np.exp(-x))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU with the tanh approximation (torch's gelu(approximate="tanh"), HF's gelu_pytorch_tanh)."""
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi).astype(x.dtype) * (x + 0.044715 * x * x * x)))


ACTIVATIONS = {"silu": silu, "gelu_tanh": gelu_tanh}


def rope_tables(positions: np.ndarray, freqs: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin [n, head_dim] for HF's rotate-half RoPE of inverse frequencies `freqs` (repeated for both halves)."""
    angles = np.outer(positions.astype(np.float64), freqs.astype(np.float64))
    angles = np.concatenate([angles, angles], axis=-1)
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate x [heads, n, head_dim]: x*cos + rotate_half(x)*sin, rotate_half(a, b) = (-b, a)."""
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def attention(q: np.ndarray, keys: np.ndarray, values: np.ndarray, start: int, window: int = 0,
              scale: float | None = None) -> np.ndarray:
    """Causal GQA: q [heads, n, d] at positions start.., keys/values [kv_heads, T, d] -> [heads, n, d].

    With a sliding `window` > 0 a query at position p sees positions p - window + 1 .. p (transformers' mask);
    scores are q . k * scale (default 1 / sqrt(d)).
    """
    heads, n, d = q.shape
    kv_heads, total, _ = keys.shape
    group = heads // kv_heads
    # Query head h reads KV head h // group, as HF's repeat_kv arranges it.
    qg = q.reshape(kv_heads, group, n, d)
    if scale is None:
        scores = qg @ keys[:, None].swapaxes(-1, -2) / np.sqrt(d).astype(q.dtype)  # [kv, group, n, T]
    else:
        scores = qg @ keys[:, None].swapaxes(-1, -2) * q.dtype.type(scale)
    query_pos = start + np.arange(n)[:, None]
    key_pos = np.arange(total)[None, :]
    visible = key_pos <= query_pos
    if window:
        visible &= key_pos > query_pos - window
    scores = np.where(visible, scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    probs = np.exp(scores)
    probs /= probs.sum(axis=-1, keepdims=True)
    return (probs @ values[:, None]).reshape(heads, n, d)


class ReferenceModel:
    """Llama forward pass in numpy, with a KV cache for prefill-then-decode."""

    def __init__(
        self, config: LlamaConfig, weights: Mapping[str, np.ndarray], dtype: type | np.dtype = np.float32
    ) -> None:
        self.config = config
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise ValidationError(f"ReferenceModel dtype must be float32 or float64, got {self.dtype}")
        self.freqs = [inv_freq(config.rope_for(i), config.head_dim, self.dtype)
                      for i in range(config.num_hidden_layers)]
        for name, shape in expected_shapes(config).items():
            if name not in weights:
                raise ModelError(f"ReferenceModel: weight {name!r} is missing (shape {list(shape)} expected)")
            if tuple(np.shape(weights[name])) != shape:
                raise ModelError(
                    f"ReferenceModel: weight {name!r} has shape {list(np.shape(weights[name]))}, "
                    f"the config implies {list(shape)}"
                )

        fam = config.family

        def w(name: str) -> np.ndarray:
            a = np.ascontiguousarray(weights[name], dtype=self.dtype)
            return a + 1 if fam.norm_offset and name.endswith("norm.weight") else a  # Gemma: (1 + w)

        def opt(name: str, wanted: bool) -> np.ndarray | None:
            return w(name) if wanted else None
        out_norms = fam.output_norms or (None, None)

        self.embed = w("model.embed_tokens.weight")
        self.layers = [
            _Layer(
                input_norm=w(f"model.layers.{i}.input_layernorm.weight"),
                wq=w(f"model.layers.{i}.self_attn.q_proj.weight"),
                wk=w(f"model.layers.{i}.self_attn.k_proj.weight"),
                wv=w(f"model.layers.{i}.self_attn.v_proj.weight"),
                wo=w(f"model.layers.{i}.self_attn.o_proj.weight"),
                post_norm=w(f"model.layers.{i}.{fam.ffn_norm}.weight"),
                w_gate=w(f"model.layers.{i}.mlp.gate_proj.weight"),
                w_up=w(f"model.layers.{i}.mlp.up_proj.weight"),
                w_down=w(f"model.layers.{i}.mlp.down_proj.weight"),
                bq=opt(f"model.layers.{i}.self_attn.q_proj.bias", fam.qkv_bias),
                bk=opt(f"model.layers.{i}.self_attn.k_proj.bias", fam.qkv_bias),
                bv=opt(f"model.layers.{i}.self_attn.v_proj.bias", fam.qkv_bias),
                q_norm=opt(f"model.layers.{i}.self_attn.q_norm.weight", fam.qk_norm),
                k_norm=opt(f"model.layers.{i}.self_attn.k_norm.weight", fam.qk_norm),
                attn_out_norm=opt(f"model.layers.{i}.{out_norms[0]}.weight", fam.sandwich_norms),
                ffn_out_norm=opt(f"model.layers.{i}.{out_norms[1]}.weight", fam.sandwich_norms),
            )
            for i in range(config.num_hidden_layers)
        ]
        self.norm = w("model.norm.weight")
        self.lm_head = self.embed if config.tie_word_embeddings else w("lm_head.weight")

    @classmethod
    def from_dir(cls, model_dir: str | Path, dtype: type | np.dtype = np.float32) -> "ReferenceModel":
        """Load a checkpoint directory (config.json + safetensors) into a reference model."""
        config, weights = load_checkpoint(model_dir)
        return cls(config, weights, dtype)

    def new_cache(self, kv_dtype: str = "f32") -> KVCache:
        """An empty KV cache for one sequence; kv_dtype "f16" rounds K and V to half precision as stored."""
        c = self.config
        store = {"f32": None, "f16": np.float16}[kv_dtype]
        return KVCache(c.num_hidden_layers, c.num_key_value_heads, c.head_dim, self.dtype, store=store)

    def forward(self, token_ids: Sequence[int] | np.ndarray, cache: KVCache) -> np.ndarray:
        """Run tokens at positions cache.length.., append them to the cache; logits [n, vocab]."""
        return self.hidden(token_ids, cache) @ self.lm_head.T

    def hidden(self, token_ids: Sequence[int] | np.ndarray, cache: KVCache) -> np.ndarray:
        """forward() up to the final norm: the final-normed hidden states [n, hidden] (what the lm_head reads)."""
        c = self.config
        ids = np.asarray(token_ids, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            raise ValidationError("forward: token_ids is empty; pass at least one token")
        if ids.min() < 0 or ids.max() >= c.vocab_size:
            raise ValidationError(f"forward: token id out of range [0, {c.vocab_size}): {ids.min()}..{ids.max()}")
        n, start = ids.size, cache.length
        heads, kv_heads, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        act = ACTIVATIONS[c.family.act]

        x = self.embed[ids]  # [n, hidden]
        if c.family.embed_scale:
            x = x * self.dtype.type(np.sqrt(c.hidden_size))
        for i, layer in enumerate(self.layers):
            cos, sin = rope_tables(np.arange(start, start + n), self.freqs[i], self.dtype)
            # attention block
            h = rmsnorm(x, layer.input_norm, c.rms_norm_eps)
            q, k, v = h @ layer.wq.T, h @ layer.wk.T, h @ layer.wv.T
            if layer.bq is not None:
                q, k, v = q + layer.bq, k + layer.bk, v + layer.bv
            q = q.reshape(n, heads, hd).transpose(1, 0, 2)
            k = k.reshape(n, kv_heads, hd).transpose(1, 0, 2)
            v = v.reshape(n, kv_heads, hd).transpose(1, 0, 2)
            if layer.q_norm is not None:
                q, k = rmsnorm(q, layer.q_norm, c.rms_norm_eps), rmsnorm(k, layer.k_norm, c.rms_norm_eps)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            keys, values = cache.write(i, k, v)
            att = attention(q, keys, values, start, c.window(i), c.attention_scale if c.query_pre_attn_scalar else None)
            o = att.transpose(1, 0, 2).reshape(n, heads * hd) @ layer.wo.T
            x = x + (o if layer.attn_out_norm is None else rmsnorm(o, layer.attn_out_norm, c.rms_norm_eps))
            # MLP block
            h = rmsnorm(x, layer.post_norm, c.rms_norm_eps)
            m = (act(h @ layer.w_gate.T) * (h @ layer.w_up.T)) @ layer.w_down.T
            x = x + (m if layer.ffn_out_norm is None else rmsnorm(m, layer.ffn_out_norm, c.rms_norm_eps))
        cache.advance(n)

        return rmsnorm(x, self.norm, c.rms_norm_eps)

    def greedy(self, prompt_ids: Sequence[int], n: int, stop_ids: Iterable[int] = ()) -> list[int]:
        """Greedy-decode up to n tokens after the prompt (stopping after a stop id); the new ids."""
        stop = set(stop_ids)
        cache = self.new_cache()
        logits = self.forward(prompt_ids, cache)[-1]
        out: list[int] = []
        for _ in range(n):
            token = int(np.argmax(logits))
            out.append(token)
            if token in stop or len(out) == n:
                break
            logits = self.forward([token], cache)[-1]
        return out
