"""Loading a model: config, tokenizer and chat template read, weights laid out and uploaded to the device.

piegpu.textgen.model.load_model() wraps what load_parts() returns in the user-facing Model.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelError
from .config import LlamaConfig
from .gpu_model import GpuModel
from .kv_pool import DEFAULT_KV_DTYPE, PAGE_TOKENS, pool_pages, resolve_context
from .weights import weights_from_gguf, weights_from_tensors
from .tokenizer import load_chat_template, load_tokenizer



def _say(verbose: bool, msg: str) -> None:
    if verbose:
        print(f"piegpu: {msg}", file=sys.stderr, flush=True)


@dataclass
class LoadedParts:
    """What load_parts() read: config, tokenizer, weights on the device, where from, chat template."""

    config: LlamaConfig
    tokenizer: object
    gpu: GpuModel
    source: str
    chat_template: str | None
    info: dict  # model/facts.py: name, source, architecture, parameters, quantization, context, ...


def load_parts(name_or_path=None, *, verbose: bool = True, device=None, kv_mb: float | None = None,
               page_tokens: int = PAGE_TOKENS, kv_dtype: str = DEFAULT_KV_DTYPE,
               context: int | None = None) -> LoadedParts:
    """Read and upload the default model (None), a GGUF file (used in place), a directory with config.json +
    safetensors, or a model by name (model/sources: Hugging Face, Ollama, LM Studio)."""
    from ..runtime.progress import quiet
    from .sources import resolve
    t0 = time.perf_counter()
    with quiet(not verbose):
        where = resolve(name_or_path, lambda msg: _say(verbose, msg))
        config, tokenizer, template, weights, info = read_source(where, verbose)
        return _upload(config, tokenizer, template, weights, info, where, device, kv_mb, page_tokens, kv_dtype,
                       context, verbose, t0)


def read_source(where, verbose: bool = False) -> tuple:
    """(config, tokenizer, chat template, ModelWeights laid out lazily, facts) of a resolved model source."""
    from .facts import dir_facts, gguf_facts
    path = where.path
    if where.is_gguf:
        from .gguf_model import open_gguf_model
        _say(verbose, f"reading {path} in place")
        g = open_gguf_model(path)
        config, tokenizer, template = g.config, g.tokenizer, g.chat_template
        from .gguf_arch import norms_stored_plus_one
        weights = weights_from_gguf(config, g.tensors, norms_stored_plus_one(g.arch))
        return config, tokenizer, template, weights, gguf_facts(g.reader, config, path, where.origin, where.name,
                                                                template is not None)
    config = LlamaConfig.from_file(path / "config.json")
    tokenizer = load_tokenizer(path)
    template = load_chat_template(path)
    from .checkpoint import load_checkpoint
    _say(verbose, f"reading weights from {path}")
    info = dir_facts(config, path, where.origin, where.name)
    config, tensors = load_checkpoint(path, raw=True)
    fmt = "f16" if all(getattr(t, "dtype", None) is not None and t.dtype.itemsize == 2
                       for t in tensors.values() if getattr(t, "ndim", 0) == 2) else "f32"
    tensors = {k: _as_float(v) for k, v in tensors.items()}
    return config, tokenizer, template, weights_from_tensors(config, tensors, fmt), info


def _upload(config, tokenizer, template, weights, info, where, device, kv_mb, page_tokens, kv_dtype, context,
            verbose, t0) -> LoadedParts:
    """The read model's context and pool checked, its weights uploaded: the LoadedParts."""
    from ..runtime.device import get_device
    from .default import DEFAULT_MODEL_NAME
    source = DEFAULT_MODEL_NAME if where.origin == "default" else str(where.path)
    dev = device or get_device()
    # a bad context, pool size or dtype fails before the upload
    limit = dev.limits.get("max-storage-buffer-binding-size", 128 << 20)
    context = resolve_context(config, context, dev.is_cpu, kv_dtype, limit)
    pool_pages(config, kv_mb, page_tokens, dev.is_cpu, kv_dtype, context, limit)
    _say(verbose, f"uploading weights to the device (context {context} of the model's "
                  f"{config.max_position_embeddings})")
    gpu = GpuModel(weights, dev, kv_mb=kv_mb, page_tokens=page_tokens, kv_dtype=kv_dtype, context=context)
    gpu.lib.show_progress = verbose
    _say(verbose, f"{where.name} ready on {gpu.dev.name} ({gpu.weight_bytes / 1e6:.0f} MB of weights, "
                  f"{time.perf_counter() - t0:.1f} s)")
    info.update(context=gpu.context, source=source)
    if where.extra:
        info.update(where.extra)
    return LoadedParts(config, tokenizer, gpu, source, template, info)


def _as_float(v):
    import numpy as np
    if v.dtype == np.uint16:  # bf16 bit patterns from load_checkpoint(raw=True)
        return (v.astype(np.uint32) << 16).view(np.float32)
    return v
