"""An encoder's weights on the host (f32 numpy), read from transformers' safetensors names.

BERT / RoBERTa checkpoints name their tensors `embeddings.*`, `encoder.layer.N.*`, prefixed with
`bert.` / `roberta.` in task models; q, k and v are stacked into one [3 hidden, hidden] matrix
here so the device runs one projection. A reranker keeps its head: BERT's pooler + classifier,
or RoBERTa's classifier.dense + classifier.out_proj.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ModelError
from . import safetensors_io as st
from .checkpoint import tensor_locations
from .encoder_config import EncoderConfig

PREFIXES = ("bert.", "roberta.", "model.", "")


@dataclass
class EncoderLayer:
    """One post-LayerNorm block: attention (qkv, o) and the MLP (up, down), each with its bias and LayerNorm."""

    qkv: np.ndarray
    qkv_b: np.ndarray
    o: np.ndarray
    o_b: np.ndarray
    ln1: tuple  # (weight, bias) after attention + residual
    up: np.ndarray
    up_b: np.ndarray
    down: np.ndarray
    down_b: np.ndarray
    ln2: tuple  # (weight, bias) after the MLP + residual


@dataclass
class EncoderWeights:
    """Embedding tables, blocks, and a reranker's head ((dense, bias, out, bias) or None)."""

    config: EncoderConfig
    word: np.ndarray
    positions: np.ndarray
    types: np.ndarray
    emb_ln: tuple
    layers: list
    head: tuple | None = None
    stored: str = "f32"  # "f16" where the checkpoint keeps every matrix in 2 bytes (F16 / BF16), else "f32"


class _Tensors:
    """Tensors of a checkpoint by name, with the task model's prefix found once."""

    def __init__(self, path: Path):
        self.path = path
        self.where = tensor_locations(path)
        self.prefix = next((p for p in PREFIXES if f"{p}embeddings.word_embeddings.weight" in self.where), None)
        if self.prefix is None:
            raise ModelError(f"{path}: no embeddings.word_embeddings.weight in its safetensors (with prefix "
                             f"{', '.join(repr(p) for p in PREFIXES[:-1])} or none): not a BERT / RoBERTa checkpoint")

    def get(self, name: str, shape: tuple, own: bool = False) -> np.ndarray:
        """Tensor `name` (under the model's prefix unless `own`) as f32, checked against `shape`."""
        full = name if own else self.prefix + name
        if full not in self.where:
            raise ModelError(f"{self.path}: tensor {full!r} is missing; the checkpoint is incomplete -- re-download it")
        file, entry = self.where[full]
        v = st.read_tensor(file, entry)
        if tuple(v.shape) != tuple(shape):
            raise ModelError(f"{file}: tensor {full!r} has shape {list(v.shape)}, the config says {list(shape)}")
        return v

    def has(self, name: str) -> bool:
        """Whether the checkpoint holds `name` (no prefix)."""
        return name in self.where


def read_encoder(path: str | Path, config: EncoderConfig) -> EncoderWeights:
    """The weights of the encoder in `path` (a transformers directory), checked against `config`."""
    t = _Tensors(Path(path))
    c = config
    H, I = c.hidden_size, c.intermediate_size

    def ln(name):
        return t.get(f"{name}.weight", (H,)), t.get(f"{name}.bias", (H,))

    layers = []
    for i in range(c.num_hidden_layers):
        p = f"encoder.layer.{i}."
        a = p + "attention."
        qkv = np.concatenate([t.get(f"{a}self.{n}.weight", (H, H)) for n in ("query", "key", "value")])
        qkv_b = np.concatenate([t.get(f"{a}self.{n}.bias", (H,)) for n in ("query", "key", "value")])
        layers.append(EncoderLayer(
            qkv, qkv_b, t.get(f"{a}output.dense.weight", (H, H)), t.get(f"{a}output.dense.bias", (H,)),
            ln(f"{a}output.LayerNorm"), t.get(f"{p}intermediate.dense.weight", (I, H)),
            t.get(f"{p}intermediate.dense.bias", (I,)), t.get(f"{p}output.dense.weight", (H, I)),
            t.get(f"{p}output.dense.bias", (H,)), ln(f"{p}output.LayerNorm")))
    head = None
    L = c.num_labels
    if c.head == "classifier":
        head = (t.get("pooler.dense.weight", (H, H)), t.get("pooler.dense.bias", (H,)),
                t.get("classifier.weight", (L, H), own=True), t.get("classifier.bias", (L,), own=True))
    elif c.head == "roberta":
        head = (t.get("classifier.dense.weight", (H, H), own=True), t.get("classifier.dense.bias", (H,), own=True),
                t.get("classifier.out_proj.weight", (L, H), own=True), t.get("classifier.out_proj.bias", (L,), own=True))
    matrices = [e for _, e in t.where.values() if len(e.shape) == 2]
    stored = "f16" if matrices and all(e.dtype in ("F16", "BF16") for e in matrices) else "f32"
    return EncoderWeights(
        c, t.get("embeddings.word_embeddings.weight", (c.vocab_size, H)),
        t.get("embeddings.position_embeddings.weight", (c.max_position_embeddings, H)),
        t.get("embeddings.token_type_embeddings.weight", (c.type_vocab_size, H)),
        ln("embeddings.LayerNorm"), layers, head, stored)
