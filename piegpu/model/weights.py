"""A model's weights in GPU layouts (host side): fused QKV and gate/up rows, RoPE pair order.

Built from HF-named float tensors or straight from GGUF blocks; uploaded by
model/gpu_model.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import ModelError
from .config import LlamaConfig
from .gpu_weights import HostMatrix, check_ggml, interleave_rows, pack_dense, pack_ggml, stack_rows


@dataclass
class LayerWeights:
    """One decoder layer in GPU layouts (host side)."""

    qkv: HostMatrix  # rows [q | k | v]; q and k rows in adjacent-pair (llama.cpp) order
    o: HostMatrix
    gate_up: HostMatrix  # rows interleaved gate0, up0, gate1, up1, ...
    down: HostMatrix
    input_norm: np.ndarray
    post_norm: np.ndarray
    qkv_bias: np.ndarray | None = None  # [q | k | v] bias in the qkv row order (Qwen2)
    q_norm: np.ndarray | None = None  # per-head RMSNorm weights [head_dim] in pair order (Qwen3)
    k_norm: np.ndarray | None = None
    attn_out_norm: np.ndarray | None = None  # sandwich norms on the attention / MLP outputs (Gemma 3)
    ffn_out_norm: np.ndarray | None = None


class LazyLayers(Sequence):
    """The layers of a model, each laid out when it is asked for (and not kept): an upload layer by layer holds one
    layer's fused copies (q | k | v, gate/up interleaved) at a time, not the whole model's."""

    def __init__(self, count: int, build: Callable[[int], "LayerWeights"]):
        self._count, self._build = count, build

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._count))]
        if not -self._count <= i < self._count:
            raise IndexError(i)
        return self._build(i % self._count)


@dataclass
class ModelWeights:
    """All weights of a model in GPU layouts (host side), ready to upload."""

    config: LlamaConfig
    embed: HostMatrix
    layers: Sequence  # of LayerWeights (LazyLayers: laid out on access)
    final_norm: np.ndarray
    lm_head: HostMatrix | None  # None: tied to embed
    release_host: Callable[[], None] | None = None  # drops the host pages of uploaded source data (a mapped file)


def pair_order(rows: int, head_dim: int) -> np.ndarray:
    """Row order putting rotate-half partners (i, i + hd/2) of every head next to each other."""
    half = head_dim // 2
    heads = rows // head_dim
    i = np.arange(half)
    within = np.stack([i, i + half], axis=1).reshape(-1)
    return (np.arange(heads)[:, None] * head_dim + within[None, :]).reshape(-1)


def _check_config(c: LlamaConfig) -> None:
    for name, v in (("hidden_size", c.hidden_size), ("intermediate_size", c.intermediate_size)):
        if v % 32:
            raise ModelError(f"config {name}={v} is not a multiple of 32. Fix: piegpu's GPU path needs "
                             "hidden_size and intermediate_size to be multiples of 32")
    if c.head_dim % 4:
        raise ModelError(f"config head_dim={c.head_dim} is not a multiple of 4 (the GPU path reads vec4)")


def _assemble(c: LlamaConfig, matrix, vector, has_lm_head: bool, norms_plus_one: bool = False) -> ModelWeights:
    """ModelWeights from matrix(name, row order or None) -> HostMatrix and vector(name) -> f32 array.

    `norms_plus_one`: the source already stores Gemma's RMSNorm weights as 1 + w (llama.cpp's GGUF).
    """
    _check_config(c)
    po_q = pair_order(c.num_attention_heads * c.head_dim, c.head_dim)
    po_k = pair_order(c.num_key_value_heads * c.head_dim, c.head_dim)
    po_head = pair_order(c.head_dim, c.head_dim)
    fam = c.family
    if fam.norm_offset and not norms_plus_one:  # Gemma stores RMSNorm weights as w - 1: the GPU reads (1 + w)
        raw_vector = vector
        vector = lambda name: raw_vector(name) + np.float32(1) if name.endswith("norm.weight") \
            else raw_vector(name)  # noqa: E731
    out_norms = fam.output_norms

    def layer(i: int) -> LayerWeights:
        p = f"model.layers.{i}."
        return LayerWeights(
            qkv=stack_rows([matrix(p + "self_attn.q_proj.weight", po_q), matrix(p + "self_attn.k_proj.weight", po_k),
                            matrix(p + "self_attn.v_proj.weight", None)], f"layer {i} qkv"),
            o=matrix(p + "self_attn.o_proj.weight", None),
            gate_up=interleave_rows(matrix(p + "mlp.gate_proj.weight", None), matrix(p + "mlp.up_proj.weight", None),
                                    f"layer {i} mlp"),
            down=matrix(p + "mlp.down_proj.weight", None),
            input_norm=vector(p + "input_layernorm.weight"),
            post_norm=vector(p + fam.ffn_norm + ".weight"),
            qkv_bias=np.concatenate([vector(p + "self_attn.q_proj.bias")[po_q],
                                     vector(p + "self_attn.k_proj.bias")[po_k],
                                     vector(p + "self_attn.v_proj.bias")]) if fam.qkv_bias else None,
            q_norm=vector(p + "self_attn.q_norm.weight")[po_head] if fam.qk_norm else None,
            k_norm=vector(p + "self_attn.k_norm.weight")[po_head] if fam.qk_norm else None,
            attn_out_norm=vector(p + out_norms[0] + ".weight") if out_norms else None,
            ffn_out_norm=vector(p + out_norms[1] + ".weight") if out_norms else None)
    layers = LazyLayers(c.num_hidden_layers, layer)
    lm = matrix("lm_head.weight", None) if has_lm_head and not c.tie_word_embeddings else None
    return ModelWeights(c, matrix("model.embed_tokens.weight", None), layers, vector("model.norm.weight"), lm)


def weights_from_tensors(config: LlamaConfig, tensors: dict, fmt: str = "f32") -> ModelWeights:
    """GPU layouts from HF-named float tensors (f32 or f16 storage as `fmt`)."""
    def matrix(name, order):
        w = np.asarray(tensors[name], dtype=np.float32)
        return pack_dense(w if order is None else w[order], fmt, name)
    return _assemble(config, matrix, lambda name: np.asarray(tensors[name], np.float32), True)


def weights_from_gguf(config: LlamaConfig, raw: dict, norms_plus_one: bool = False) -> ModelWeights:
    """GPU layouts straight from GGUF blocks (read_gguf_raw): every supported GGML type read natively.

    Matrices keep the GGUF's bytes (the shaders dequantize them as gguf does); vectors
    (norms, biases) are widened to f32 with gguf's dequantization.
    """
    def matrix(name, order):
        t = raw[name]
        data = t.data if order is None or t.gpu_order else t.data[order]
        return pack_ggml(t.ggml_type, data, t.shape[-1], name)

    def vector(name):
        t = raw[name]
        if t.ggml_type == "F32":
            return np.ascontiguousarray(t.data).view(np.float32).reshape(-1).copy()
        import gguf
        from gguf.quants import dequantize
        return np.asarray(dequantize(np.ascontiguousarray(t.data), getattr(gguf.GGMLQuantizationType, t.ggml_type)),
                          np.float32).reshape(-1)
    for name, t in raw.items():  # every matrix's type and shape checked before anything is laid out or uploaded
        if np.ndim(t.data) == 2 and name.endswith(".weight") and not name.endswith("norm.weight"):
            check_ggml(t.ggml_type, t.data, t.shape[-1], name)
    w = _assemble(config, matrix, vector, "lm_head.weight" in raw, norms_plus_one)
    w.release_host = _page_dropper([t.data for t in raw.values()])
    return w


def _page_dropper(arrays: list):
    """A callable that drops the resident pages of the memory-mapped files the arrays view (madvise DONTNEED: a
    read-only mapping's pages come back from the page cache if read again), or None if they view no mapped file."""
    import mmap
    if not hasattr(mmap, "MADV_DONTNEED"):
        return None
    maps: dict = {}  # the shards of a split GGUF are one mapping each
    for a in arrays:
        while isinstance(a, np.ndarray) and not isinstance(a.base, mmap.mmap):
            a = a.base
        if isinstance(a, np.ndarray):
            maps[id(a.base)] = a.base
    if not maps:
        return None

    def drop() -> None:
        for m in maps.values():
            m.madvise(mmap.MADV_DONTNEED)
    return drop
