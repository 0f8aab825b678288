"""Embeddings from a decoder (Model.embed): last-token or mean pooling of its final-normed hidden rows.

Decoder embedders (Qwen3-Embedding-style) say how they pool in sentence-transformers' files
next to the weights, or in a GGUF's `<arch>.pooling_type` (llama.cpp's: 1 mean, 2 cls, 3 last);
a chat model says nothing, and embed() then needs pooling= (embedding.resolve_pooling says so).
Each input is one prefill of its own on the device (GpuModel.hidden_rows).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import ValidationError
from ..model.encoder_config import Pooling, sentence_transformers_config
from ..runtime.device import device_lock
from .embedding import as_inputs, check_dimensions, finish, resolve_pooling

GGUF_POOLING = {1: "mean", 2: "cls", 3: "last"}  # llama.cpp's enum llama_pooling_type (0 none, 4 rank)
DECODER_POOLINGS = ("mean", "last", "cls", "max")


def configured_pooling(source: str) -> Pooling | None:
    """The pooling a decoder's files configure: sentence-transformers' (a model directory) or the GGUF's
    pooling_type; None where they configure none."""
    path = Path(source)
    if path.is_dir():
        return sentence_transformers_config(path)[0]
    if path.is_file() and path.suffix == ".gguf":
        import gguf
        reader = gguf.GGUFReader(str(path))
        arch = reader.fields.get("general.architecture")
        name = bytes(arch.parts[arch.data[0]]).decode() if arch is not None else ""
        field = reader.fields.get(f"{name}.pooling_type")
        if field is not None:
            mode = GGUF_POOLING.get(int(field.parts[field.data[0]][0]))
            return Pooling(mode) if mode else None
    return None


def embed_decoder(model, texts, normalize: bool, dimensions, pooling, truncate: bool) -> np.ndarray:
    """Model.embed: the pooled final hidden rows of each input (one prefill each), finished as embedding.finish."""
    model.check_open()
    c = model.config
    dims = check_dimensions(dimensions, c.hidden_size)
    mode = resolve_pooling(pooling, model.embed_pooling, None, model.source)
    if mode not in DECODER_POOLINGS:
        raise ValidationError(f"embed(pooling={mode!r}): a decoder pools {', '.join(DECODER_POOLINGS)}")
    limit = model.context
    rows = []
    for i, x in enumerate(as_inputs(texts)):
        ids = model.tokenizer.encode(x).ids if isinstance(x, str) else list(x)
        if ids and (min(ids) < 0 or max(ids) >= c.vocab_size):
            raise ValidationError(f"token ids must be in [0, {c.vocab_size}), got {min(ids)}..{max(ids)}")
        if len(ids) > limit:
            if not truncate:
                raise ValidationError(f"input {i} has {len(ids)} tokens; this model takes at most {limit}. Fix: "
                                      "shorten it, or pass truncate=True to keep its first tokens")
            ids = ids[:limit]
        with device_lock(model.gpu.device):
            h = model.gpu.hidden_rows(ids, last_only=mode == "last")
        rows.append({"last": lambda: h[-1], "cls": lambda: h[0], "mean": lambda: h.mean(0),
                     "max": lambda: h.max(0)}[mode]())
    return finish(np.stack(rows), normalize, dims)
