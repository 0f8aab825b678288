"""Compiled eta programs on a wgpu device: plan metadata + shader module + pipelines."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from ..dtypes import dtype
from ..errors import CompileError
from ..eta import cache
from ..eta.ops import TType
from ..kernel.cstyle import grid
from ..kernel.plan import Limits, plan as make_plan
from .device import Device, get_device, lost_device_error
from .dispatch import Plan, replay


def _renderer(target: str):
    """The renderer of a target wgpu runs (piegpu/targets.py); CompileError for any other target."""
    from ..targets import WGPU_TARGETS, renderer
    if target not in WGPU_TARGETS:
        raise CompileError(f"target {target!r} cannot run through wgpu. Fix: use one of {list(WGPU_TARGETS)}")
    return renderer(target)


_digests: dict = {}


def emitter_sources(target: str) -> list:
    """Every source file that produces `target`'s kernels: their bytes are part of its cache key."""
    import inspect
    from pathlib import Path
    root = Path(__file__).parent.parent
    package = Path(inspect.getfile(type(_renderer(target)))).parent  # rules may live in sibling modules
    return (sorted(root.joinpath("kernel").glob("*.py"))  # planner, templates, C-style/C++ bases, channel layout
            + sorted(package.glob("*.py"))
            + [root / "targets.py",  # which renderer a target name means
               root / "eta" / "ops.py",  # the op groups that decide what is stored and templated
               root / "eta" / "interp.py", root / "eta" / "counter_rng.py"])  # constant folding, RNG


def emitter_version(target: str) -> str:
    """The target's declared version plus a digest of emitter_sources(target).

    Any edit to the code that produces kernels changes the cache key, so a stale
    artifact from an older emitter is never served.
    """
    hit = _digests.get(target)
    if hit is None:
        import hashlib
        h = hashlib.sha256()
        for f in emitter_sources(target):
            h.update(f.read_bytes())
        hit = _digests[target] = f"{_renderer(target).version}+{h.hexdigest()[:12]}"
    return hit


def limits_of(dev: Device) -> Limits:
    """Kernel planning limits from the device's limits."""
    return Limits(max_workgroup=min(1024, dev.limits.get("max-compute-invocations-per-workgroup", 256)),
                  max_groups_per_dim=dev.limits.get("max-compute-workgroups-per-dimension", 65535),
                  max_binding_words=dev.limits.get("max-storage-buffer-binding-size", 128 << 20) // 4)


def build_artifact(prog, target: str, dev: Device) -> bytes:
    """Plan and emit `prog` for `target`: JSON metadata, a NUL, then the code."""
    p = make_plan(prog, limits_of(dev))
    code = _renderer(target).render(p)
    meta = {
        "target": target,
        "bindings": [{"name": b.name, "kind": b.kind, "words": b.words, "info": b.info} for b in p.bindings],
        "arena_words": p.arena_words,
        "inputs": [[off, t.dtype.name, list(t.shape)] for off, t in p.inputs],
        "outputs": [[off, t.dtype.name, list(t.shape)] for off, t in p.outputs],
        "kernels": [[k.name, k.workgroup, k.groups] for k in p.kernels],
        "channel_counts": {str(s): list(c) for s, c in p.channel_counts.items()},
        "max_groups_per_dim": p.limits.max_groups_per_dim,
    }
    body = code.encode("utf-8") if isinstance(code, str) else bytes(code)
    return json.dumps(meta, sort_keys=True).encode() + b"\0" + body


@dataclass
class KernelLaunch:
    """One dispatch of a compiled program."""

    name: str
    pipeline: object
    groups: tuple


class CompiledProgram:
    """A program ready to encode: pipelines sharing one bind group layout."""

    def __init__(self, payload: bytes, dev: Device):
        head, _, body = payload.partition(b"\0")
        meta = json.loads(head)
        self.meta = meta
        self.target = meta["target"]
        self.code = body.decode("utf-8") if self.target != "spirv" else body
        self.bindings = meta["bindings"]
        self.arena_words = meta["arena_words"]
        self.inputs = [(off, TType(dtype.from_name(d), tuple(s))) for off, d, s in meta["inputs"]]
        self.outputs = [(off, TType(dtype.from_name(d), tuple(s))) for off, d, s in meta["outputs"]]
        self.channel_counts = {int(s): tuple(c) for s, c in meta["channel_counts"].items()}
        d = dev.device
        import wgpu
        entries = [{"binding": i, "visibility": wgpu.ShaderStage.COMPUTE,
                    "buffer": {"type": wgpu.BufferBindingType.storage}} for i in range(len(self.bindings))]
        try:
            self.layout = d.create_bind_group_layout(entries=entries)
            playout = d.create_pipeline_layout(bind_group_layouts=[self.layout])
            module = d.create_shader_module(code=self.code)
            self.kernels = []
            self._last = None  # (bind group, the dispatch plan over it): one entry, so nothing is pinned
            for name, wg, groups in meta["kernels"]:
                pipe = d.create_compute_pipeline(layout=playout, compute={"module": module, "entry_point": name})
                self.kernels.append(KernelLaunch(name, pipe, grid(groups, meta["max_groups_per_dim"])))
        except Exception as e:
            lost = lost_device_error(e, f"compiling {self.target} kernels")
            if lost is not None:
                raise lost from e
            names = ", ".join(k[0] for k in meta["kernels"])
            raise CompileError(f"the driver rejected the {self.target} of this program (kernels {names}): {e}. "
                               "Fix: report it with the program (Program.pretty()); meanwhile try the other "
                               "target (PIEGPU_EPILOGUE_TARGET=wgsl|spirv)") from e

    def encode(self, cpass, bind_group) -> int:
        """Record every dispatch into an open compute pass; returns the dispatch count.

        The dispatches are a prepared plan per bind group, replayed like the forward's
        (runtime/dispatch.py: native calls, no per-call wrapper).
        """
        if not self.kernels:
            return 0
        last = self._last
        if last is None or last[0] is not bind_group:
            last = self._last = (bind_group, Plan((k.pipeline, bind_group, (k.groups[0], k.groups[1], 1), k.name)
                                                  for k in self.kernels))
        replay(cpass, last[1])
        return len(self.kernels)


def compile_program(prog, target: str = "wgsl", dev: Device | None = None) -> CompiledProgram:
    """The compiled program for `target` on `dev`, through the kernel cache."""
    dev = dev or get_device()
    key = cache.CacheKey(prog.hash, target, emitter_version(target), dev.key)
    try:
        return cache.get(key, lambda: build_artifact(prog, target, dev), lambda payload: CompiledProgram(payload, dev))
    except CompileError as e:
        # Say which program: the planner and emitters know the kernel, not the caller's program.
        raise CompileError(f"{e} [{target} program {prog.hash[:12]}: {len(prog.nodes)} nodes, largest value "
                           f"{_largest(prog)}]") from e


def _largest(prog) -> str:
    i, n = max(((i, n) for i, n in enumerate(prog.nodes) if n.type is not None),
               key=lambda t: t[1].type.size, default=(None, None))
    return "none" if n is None else f"%{i} = {n.op}(...) : {n.type!r}"


def _to_words(arr: np.ndarray, ty: TType) -> np.ndarray:
    a = np.ascontiguousarray(arr, dtype=ty.dtype.np).reshape(-1)
    if ty.dtype == dtype.bool:
        return a.astype(np.uint32)
    return a.view(np.uint32)


def _from_words(words: np.ndarray, ty: TType) -> np.ndarray:
    if ty.dtype == dtype.bool:
        return (words != 0).reshape(ty.shape)
    return words.view(ty.dtype.np).reshape(ty.shape).copy()


def run(prog, inputs, backend: str = "wgsl", **options) -> list:
    """Program.run on the wgpu device: upload inputs into the arena, dispatch, read outputs back."""
    from ..errors import ValidationError
    from ..eta.interp import coerce_input
    if not prog.is_pure:
        raise ValidationError("this program uses channels or intrinsics. Fix: run it as an epilogue of a "
                              "ForwardPass, or use backend='interp' with an environment")
    types = prog.input_types
    if len(inputs) != len(types):
        raise ValidationError(f"program takes {len(types)} inputs, got {len(inputs)}. Fix: pass arrays for {types}")
    arrays = [coerce_input(i, x, t) for i, (x, t) in enumerate(zip(inputs, types))]
    dev = get_device()
    cp = compile_program(prog, backend, dev)
    try:
        return _run_compiled(cp, dev, arrays)
    except Exception as e:
        raise lost_device_error(e, f"running a program on {backend}") or e


def _run_compiled(cp: CompiledProgram, dev: Device, arrays: list) -> list:
    import wgpu
    d = dev.device
    arena_bytes = max(16, cp.arena_words * 4)
    arena = d.create_buffer(size=arena_bytes, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST
                            | wgpu.BufferUsage.COPY_SRC)
    for (off, ty), arr in zip(cp.inputs, arrays):
        d.queue.write_buffer(arena, off * 4, _to_words(arr, ty).tobytes())
    bg = d.create_bind_group(layout=cp.layout, entries=[{"binding": 0, "resource": {"buffer": arena}}])
    enc = d.create_command_encoder()
    cpass = enc.begin_compute_pass()
    cp.encode(cpass, bg)
    cpass.end()
    total = sum(t.size for _, t in cp.outputs)
    readback = d.create_buffer(size=max(16, total * 4), usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
    pos = 0
    for off, ty in cp.outputs:
        enc.copy_buffer_to_buffer(arena, off * 4, readback, pos * 4, ty.size * 4)
        pos += ty.size
    d.queue.submit([enc.finish()])
    readback.map_sync(wgpu.MapMode.READ)
    words = np.frombuffer(readback.read_mapped(), dtype=np.uint32).copy()
    readback.unmap()
    readback.destroy()
    arena.destroy()
    outs, pos = [], 0
    for _, ty in cp.outputs:
        outs.append(_from_words(words[pos: pos + ty.size], ty))
        pos += ty.size
    return outs
