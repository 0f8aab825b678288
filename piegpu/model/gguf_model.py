"""A GGUF file used in place: config, tokenizer and chat template from its metadata, tensors as
memory-mapped views of its blocks.

Nothing is written to disk and nothing is dequantized: each matrix's bytes go from the
page cache straight into the upload (the shaders read every supported GGML type natively,
model/gpu_weights.py). llama.cpp stores the rows of Llama's q and k projections permuted
for its adjacent-pair RoPE, which is the row order the GPU layout wants: they are used
as they are (RawTensor.gpu_order).

No GPU repack is cached, because none would save load time: the uploads are the file's
blocks (only q|k|v and gate|up are fused, a 30 ms copy for the default model). Measured on
the default model (2 cores, lavapipe, one quiet run each way, /proc VmHWM): the former path --
an f32 safetensors copy (538 MB; 611 MB of cache in all) plus a packed-weights cache -- took
7.1 s and 839 MB peak RSS on first load and 1.2 s / 343 MB on later loads from its caches;
the GGUF in place takes 0.84 s / 360 MB on every load and writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ModelError
from .config import LlamaConfig
from . import gguf_arch
from .gguf_convert import RawTensor, _check_complete, _field, _qk_heads, config_from_gguf, gguf_architecture, \
    hf_tensor_name
from .gguf_file import GgufFile
from .gpu_weights import READABLE_TYPES


@dataclass
class GgufModel:
    """What load_model needs from a GGUF file, read in place."""

    path: Path
    config: LlamaConfig
    tokenizer: Any  # tokenizers.Tokenizer
    chat_template: str | None
    tensors: dict  # HF name -> RawTensor (views of the memory-mapped file)
    arch: str = "llama"  # general.architecture
    reader: Any = None  # the open GgufFile (metadata, tensor infos)


def tensors_in_place(reader: Any, config: LlamaConfig, source: str) -> dict:
    """Every tensor of an open GGUF as a RawTensor whose data is a view of the mapped file (no copy)."""
    arch = gguf_architecture(reader, source)
    out: dict = {}
    for t in reader.tensors:
        if t.name == gguf_arch.ROPE_FREQS:  # read into config.rope
            continue
        name = hf_tensor_name(t.name, source, arch)
        if t.tensor_type.name not in READABLE_TYPES:
            raise ModelError(f"{source}: tensor {t.name!r} is {t.tensor_type.name}, which piegpu does not read; "
                             f"supported GGML types: {', '.join(READABLE_TYPES)}. Fix: requantize the model to one "
                             "of them (llama-quantize), e.g. Q4_K_M")
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        rows = int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1
        data = t.data.view(np.uint8).reshape(rows, -1)
        pair_rows = _qk_heads(name, config) is not None and gguf_arch.permutes_qk(arch)
        out[name] = RawTensor(t.tensor_type.name, shape, data, gpu_order=pair_rows)
    _check_complete(config, {n: r.shape for n, r in out.items()}, source)
    return out


def open_gguf_model(path: str | Path) -> GgufModel:
    """Open `path` and read its config, tokenizer, chat template and tensor views."""
    from .tokenizer import tokenizer_from_gguf
    path = Path(path)
    reader = GgufFile(path)
    source = str(path)
    config = config_from_gguf(reader, source)
    template = _field(reader, "tokenizer.chat_template", source, None)
    if template is not None and not isinstance(template, str):
        raise ModelError(f"{source}: tokenizer.chat_template is a {type(template).__name__}, not a string; "
                         "the file is corrupt -- re-download it")
    return GgufModel(path, config, tokenizer_from_gguf(reader), template, tensors_in_place(reader, config, source),
                     gguf_architecture(reader, source), reader)
