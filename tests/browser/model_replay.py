"""Real forward passes of the default model, recorded on lavapipe so that Chromium can replay them.

While a private model loads and runs a prefill of the prompt then one decode step (two
passes of gpu_model's host-driven forward), the wgpu device's buffer creations and queue
writes and every dispatch the model records (runtime/dispatch.py's Recorder: shader, bound
buffers with offsets and sizes, workgroups) are captured. Every buffer's content before the
first pass is then known (weights and parameters come from create_buffer_with_data,
activations and the KV cache start zeroed, token ids arrive by write_buffer before the pass
that reads them), so harness.js can rebuild both passes on Chromium's device -- the decode
attending to the KV cache that Chromium's prefill wrote -- and read back the logits of each:
Tint and SwiftShader computing our hand-written shaders, checked against lavapipe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from piegpu.model import shaders
from piegpu.model.shaders import binding_kinds, compose, standard_wgsl
from piegpu.runtime import dispatch
from piegpu.runtime.device import Device, get_device


@dataclass
class Replay:
    """A recorded pass: buffers (pre-pass bytes), shaders, dispatches, and lavapipe's logits."""

    buffers: list = field(default_factory=list)  # bytes per buffer, in first-use order
    shaders: list = field(default_factory=list)  # {label, code, entry_points, bindings}
    dispatches: list = field(default_factory=list)  # [shader index, [[binding, buffer, offset, size]], [x, y, z]]
    reads: list = field(default_factory=list)  # [buffer, words] of each pass's logits, in pass order
    logits: list = field(default_factory=list)  # lavapipe's [rows, vocab] of each pass

    def write_files(self, folder: Path) -> list:
        """Each buffer's bytes as folder/<i>.bin; returns harness.js's buffer list [{size, url}]."""
        folder.mkdir(parents=True, exist_ok=True)
        out = []
        for i, data in enumerate(self.buffers):
            (folder / f"{i}.bin").write_bytes(data)
            out.append({"size": len(data), "url": f"/data/{folder.name}/{i}.bin"})
        return out


def capture_passes(load_model, prompt: str, lanes: int) -> Replay:
    """Load a model; prefill the prompt but its last token, then decode that token; all of it recorded.

    lanes: the subgroup width of the replaying device; under 8, the kernels are those lavapipe runs
    without its subgroup forms (plain matmul tiles, attention_tokens).
    """
    dev = get_device().device
    device_cls, queue_cls = type(dev), type(dev.queue)
    created: dict = {}  # id -> (buffer, bytearray of its content)
    kernels: dict = {}  # id(kernel) -> (name, params, snippets)
    calls: list = []  # (kernel, {binding: buffer or (buffer, offset, size)}, groups, role)
    used: set = set()  # buffers some recorded dispatch binds: a later host write would break the replay
    with_data, empty, write = device_cls.create_buffer_with_data, device_cls.create_buffer, queue_cls.write_buffer
    kernel, record = shaders.ShaderLibrary.kernel, dispatch.Recorder.dispatch

    def create_buffer_with_data(self, *, label="", data, usage):
        buf = with_data(self, label=label, data=data, usage=usage)
        created[id(buf)] = (buf, bytearray(memoryview(data).cast("B")))
        return buf

    def create_buffer(self, *, label="", size, usage, mapped_at_creation=False):
        buf = empty(self, label=label, size=size, usage=usage, mapped_at_creation=mapped_at_creation)
        created[id(buf)] = (buf, bytearray(size))
        return buf

    def write_buffer(self, buffer, buffer_offset, data, data_offset=0, size=None):
        assert id(buffer) not in used, f"a host write to {buffer.label!r} after a recorded pass bound it"
        raw = bytes(memoryview(data).cast("B"))
        raw = raw[data_offset:] if size is None else raw[data_offset: data_offset + size]
        hit = created.get(id(buffer))
        if hit is not None:
            hit[1][buffer_offset: buffer_offset + len(raw)] = raw
        return write(self, buffer, buffer_offset, data, data_offset, size)

    def recording_kernel(self, name, params, snippets=None):
        k = kernel(self, name, params, snippets)
        kernels[id(k)] = (name, dict(params), dict(snippets or {}))
        return k

    def recording_dispatch(self, k, buffers, groups, role, key=None, binds=None):
        calls.append((k, dict(buffers), tuple(groups), role))
        used.update(id(b[0] if isinstance(b, tuple) else b) for b in buffers.values())
        return record(self, k, buffers, groups, role, key, binds)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(device_cls, "create_buffer_with_data", create_buffer_with_data)
        mp.setattr(device_cls, "create_buffer", create_buffer)
        mp.setattr(queue_cls, "write_buffer", write_buffer)
        mp.setattr(shaders.ShaderLibrary, "kernel", recording_kernel)
        mp.setattr(dispatch.Recorder, "dispatch", recording_dispatch)
        if lanes < 8:  # the kernels of a device whose subgroups are narrower than the 8 lanes they share
            mp.setattr(Device, "subgroup_lanes", property(lambda self: 0))  # (SwiftShader: 4)
        # weights in storage buffers, the layout a replay carries (lavapipe's texture layout compiles in
        # tests/browser/test_shaders.py)
        mp.setattr(Device, "texture_weights", property(lambda self: False))
        with load_model() as model:
            ids = model.tokenizer.encode(prompt).ids
            ws = model.working_set(len(ids) + 1)
            n = len(ids) - 1
            logits = [model.gpu.forward(ws, ids[:-1], readout=(0, n)), model.gpu.forward(ws, ids[-1:])]
            return _replay_of(created, kernels, calls, [np.asarray(x, np.float32) for x in logits])


def _replay_of(created: dict, kernels: dict, calls: list, logits: list) -> Replay:
    r = Replay(logits=logits)
    buffer_index: dict = {}
    shader_index: dict = {}
    lm = [c for c in calls if c[3] == "lm"]
    assert len(lm) == len(logits), f"expected {len(logits)} logits matvecs (one per pass), saw {len(lm)}"
    for k, bufs, groups, role in calls:
        name, params, snippets = kernels[id(k)]
        src = standard_wgsl(compose(name, params, snippets))
        if src not in shader_index:
            shader_index[src] = len(r.shaders)
            r.shaders.append({"label": k.label, "code": src, "entry_points": ["main"], "bindings": binding_kinds(src)})
        entries = []
        for binding, b in sorted(bufs.items()):
            buf, off, size = b if isinstance(b, tuple) else (b, 0, b.size)
            if id(buf) not in buffer_index:
                assert id(buf) in created, f"{k.label}: binding {binding} is a buffer made before the capture"
                buffer_index[id(buf)] = len(r.buffers)
                data = created[id(buf)][1]
                r.buffers.append(bytes(data) + bytes(-len(data) % 4))
            entries.append([binding, buffer_index[id(buf)], off, size])
        r.dispatches.append([shader_index[src], entries, list(groups) + [1] * (3 - len(groups))])
    for (_, bufs, _, _), x in zip(lm, logits):
        out = bufs[3][0] if isinstance(bufs[3], tuple) else bufs[3]
        r.reads.append([buffer_index[id(out)], x.size])
    return r
