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


def load_parts(name_or_path=None, *, verbose: bool = True, device=None, kv_mb: float | None = None,
               page_tokens: int = PAGE_TOKENS, kv_dtype: str = DEFAULT_KV_DTYPE,
               context: int | None = None) -> LoadedParts:
    """Read and upload the default model (None), a GGUF file (used in place), or a directory with
    config.json + safetensors."""
    from .default import DEFAULT_MODEL_NAME, default_gguf_path
    t0 = time.perf_counter()
    if name_or_path is None or str(name_or_path) == DEFAULT_MODEL_NAME:
        gguf, source = default_gguf_path(), DEFAULT_MODEL_NAME
    else:
        path = Path(name_or_path).expanduser()
        if not path.exists():
            raise ModelError(f"{path}: no such model file or directory. Fix: pass a directory with config.json and "
                             "*.safetensors, a .gguf file, or nothing for the default model")
        if path.is_file() and path.suffix == ".gguf":
            gguf = path
        elif path.is_dir():
            gguf = None
        else:
            raise ModelError(f"{path}: not a .gguf file or a model directory. Fix: pass a directory with "
                             "config.json and *.safetensors, or a file ending in .gguf")
        source = str(path)
    if gguf is not None:
        from .gguf_model import open_gguf_model
        _say(verbose, f"reading {gguf} in place")
        g = open_gguf_model(gguf)
        config, tokenizer, template = g.config, g.tokenizer, g.chat_template
        from .gguf_arch import norms_stored_plus_one
        weights = weights_from_gguf(config, g.tensors, norms_stored_plus_one(g.arch))
    else:
        config = LlamaConfig.from_file(path / "config.json")
        tokenizer = load_tokenizer(path)
        template = load_chat_template(path)
        from .checkpoint import load_checkpoint
        _say(verbose, f"reading weights from {path}")
        config, tensors = load_checkpoint(path, raw=True)
        fmt = "f16" if all(getattr(t, "dtype", None) is not None and t.dtype.itemsize == 2
                           for t in tensors.values() if getattr(t, "ndim", 0) == 2) else "f32"
        tensors = {k: _as_float(v) for k, v in tensors.items()}
        weights = weights_from_tensors(config, tensors, fmt)
    from ..runtime.device import get_device
    dev = device or get_device()
    # a bad context, pool size or dtype fails before the upload
    limit = dev.limits.get("max-storage-buffer-binding-size", 128 << 20)
    context = resolve_context(config, context, dev.is_cpu, kv_dtype, limit)
    pool_pages(config, kv_mb, page_tokens, dev.is_cpu, kv_dtype, context, limit)
    _say(verbose, f"uploading weights to the device (context {context} of the model's "
                  f"{config.max_position_embeddings})")
    gpu = GpuModel(weights, dev, kv_mb=kv_mb, page_tokens=page_tokens, kv_dtype=kv_dtype, context=context)
    _say(verbose, f"{source} ready on {gpu.dev.name} ({gpu.weight_bytes / 1e6:.0f} MB of weights, "
                  f"{time.perf_counter() - t0:.1f} s)")
    return LoadedParts(config, tokenizer, gpu, source, template)


def _as_float(v):
    import numpy as np
    if v.dtype == np.uint16:  # bf16 bit patterns from load_checkpoint(raw=True)
        return (v.astype(np.uint32) << 16).view(np.float32)
    return v
