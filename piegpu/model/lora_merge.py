"""Merging LoRA adapters into a model's weights (model.merge_adapter): W' = W + scale B A per adapted projection.

The base weights are read again from the model's files (the device copies cannot be read back; quantized
ones are blocks), every adapter merged so far is added in order, and each adapted fused matrix is uploaded
anew: f32 and f16 sources keep their format, quantized ones become Q8_0 (8.5 bits a weight: the delta survives
to ~0.4% of each block's largest weight, where requantizing to Q4 would lose most of it; llama.cpp's export-lora
writes f16, which on lavapipe decodes 8x slower than Q8_0), so a merged Q4 layer takes about 1.9x its bytes.
Plans are made again (model/lora_bank.py plan_epoch).
"""

from __future__ import annotations

import numpy as np

from ..errors import ModelError
from .gpu_weights import RowParts, dequantize, pack_dense, pack_ggml, upload
from .lora_bank import GROUPS, geometry, part_rows
from .lora_files import LoraWeights


def fused_delta(config, w: LoraWeights, layer: int, group: str) -> np.ndarray | None:
    """B A of a fused projection's rows (q | k | v; gate and up interleaved), or None where `w` adapts none."""
    deltas = [w.delta(layer, t) for t in GROUPS[group]]
    if all(d is None for d in deltas):
        return None
    geo = geometry(config, group)
    D = np.zeros((geo.out, geo.inp), np.float32)
    for rows, d in zip(part_rows(config, group), deltas):
        if d is not None:
            D[rows] = d
    return D


def _packed(W: np.ndarray, fmt: str, what: str):
    """The merged matrix in its source's format where that is f32 or f16, else requantized to Q8_0."""
    if fmt in ("f32", "f16"):
        return pack_dense(W, fmt, what)
    import gguf
    from gguf.quants import quantize
    return pack_ggml("Q8_0", quantize(np.ascontiguousarray(W, np.float32), gguf.GGMLQuantizationType.Q8_0),
                     W.shape[1], what)


def merge_into(gpu, source: str, merges: list) -> None:
    """Rebuild every projection that `merges` ([(LoraWeights, scale)], all merges so far) adapts from `source`."""
    from .loading import read_source
    from .sources import resolve
    try:
        where = resolve(source, lambda msg: None)
    except ModelError as e:
        raise ModelError(f"merge_adapter re-reads the base weights from the model's files, and {source!r} has "
                         f"none ({e}). Fix: a model loaded from a file, folder or name; or use the adapter unmerged "
                         "(adapter=...)") from None
    config, _, _, weights, _ = read_source(where)
    if config.hidden_size != gpu.config.hidden_size or config.num_hidden_layers != gpu.config.num_hidden_layers:
        raise ModelError(f"merge_adapter: {source} no longer holds the loaded model (its shapes changed on disk)")
    for i in range(config.num_hidden_layers):
        lw = None
        for g in GROUPS:
            deltas = [(fused_delta(config, w, i, g), s) for w, s in merges]
            deltas = [(d, s) for d, s in deltas if d is not None]
            if not deltas:
                continue
            lw = lw or weights.layers[i]
            host = getattr(lw, g)
            parts = host.parts if isinstance(host, RowParts) else [host]
            W = np.concatenate([dequantize(p) for p in parts])
            for d, s in deltas:
                W += np.float32(s) * d
            if not np.isfinite(W).all():
                raise ModelError(f"merge_adapter: layer {i} {g} is not finite after the merge; the adapter is corrupt")
            setattr(gpu.layers[i], g, upload(gpu.device, _packed(W, host.fmt, f"layer {i} {g}"), gpu.max_binding,
                                             f"l{i}.{g}.merged", gpu.dev.texture_weights))
    for scratch in gpu._scratch.values():  # bind groups over the former matrices: made again
        scratch.binds.clear()
    for ws in list(gpu._working_sets):
        ws.binds.clear()
        ws.plans.clear()
    gpu.weight_bytes = gpu.count_weight_bytes()
