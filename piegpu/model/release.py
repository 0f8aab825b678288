"""Releasing a GpuModel: every device buffer and texture it reaches destroyed, its caches dropped."""

from __future__ import annotations

import weakref

TEXEL_BYTES = {"rgba32uint": 16, "rgba32float": 16, "r32uint": 4, "r32float": 4}


def release_model(gpu) -> int:
    """Destroy every device buffer and texture of this model -- weights, KV pages, scratch, tables -- and
    drop the caches that refer to them; returns the bytes destroyed. The model is unusable after.

    Buffers are found by walking the model's own state (and its working sets), so a buffer
    cache added to it later is released too.
    """
    import wgpu
    gpu.closed = True
    found: dict = {}
    seen: set = set()

    def walk(v):
        if id(v) in seen:
            return
        seen.add(id(v))
        if isinstance(v, (wgpu.GPUBuffer, wgpu.GPUTexture)):
            found[id(v)] = v
        elif isinstance(v, (list, tuple, set, frozenset)):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif type(v).__module__.startswith("piegpu.") and hasattr(v, "__dict__") and v is not gpu.dev:
            for x in vars(v).values():
                walk(x)
    seen.update({id(gpu), id(gpu.dev), id(gpu.config), id(gpu.lib)})
    wss = list(gpu._working_sets)
    for ws in wss:
        ws.session = None  # its decode loops and channels go with it
        walk(ws)
    for v in vars(gpu).values():
        walk(v)
    freed = 0
    for res in found.values():
        if isinstance(res, wgpu.GPUTexture):  # KV pages (rgba32float) and texture weights (rgba32uint)
            w, h, d = res.size
            freed += w * h * d * TEXEL_BYTES.get(res.format, 16)
        else:
            freed += res.size
        res.destroy()
    for ws in wss:
        ws.binds.clear()
        ws.plans.clear()
    gpu._scratch.clear()
    gpu._token_bufs.clear()
    gpu._zero_vecs.clear()
    gpu._rope = {}
    gpu.params = None
    gpu.embed = gpu.lm_head = gpu.final_norm = None
    gpu.kv = None  # (working sets not yet collected keep the pool's host bookkeeping until they go)
    gpu.layers = []
    gpu._working_sets = weakref.WeakSet()
    return freed
