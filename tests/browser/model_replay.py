"""One real prefill of the default model, recorded on lavapipe so that Chromium can replay it.

While a private model loads and computes model.logits(ids) (one pass: gpu_model's
_forward_chunk), the wgpu device's buffer creations and queue writes and every dispatch
the model records (runtime/dispatch.py's Recorder: shader, bound buffers with offsets and
sizes, workgroups) are captured. Every buffer's content before the pass is then known
(weights and parameters come from create_buffer_with_data, activations and the KV cache
start zeroed, the token ids arrive by write_buffer), so harness.js can rebuild the pass on
Chromium's device and read back the logits: Tint and SwiftShader computing our
hand-written shaders, checked against lavapipe's logits of the same pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from piegpu.model import shaders
from piegpu.model.shaders import binding_kinds, compose
from piegpu.runtime import dispatch
from piegpu.runtime.device import get_device


@dataclass
class Replay:
    """A recorded pass: buffers (pre-pass bytes), shaders, dispatches, and lavapipe's logits."""

    buffers: list = field(default_factory=list)  # bytes per buffer, in first-use order
    shaders: list = field(default_factory=list)  # {label, code, entry_points, bindings}
    dispatches: list = field(default_factory=list)  # [shader index, [[binding, buffer, offset, size]], [x, y, z]]
    logits_buffer: int = -1
    logits: np.ndarray | None = None  # lavapipe's [rows, vocab]

    def write_files(self, folder: Path) -> list:
        """Each buffer's bytes as folder/<i>.bin; returns harness.js's buffer list [{size, url}]."""
        folder.mkdir(parents=True, exist_ok=True)
        out = []
        for i, data in enumerate(self.buffers):
            (folder / f"{i}.bin").write_bytes(data)
            out.append({"size": len(data), "url": f"/data/{folder.name}/{i}.bin"})
        return out


def capture_prefill(load_model, prompt: str) -> Replay:
    """Load a model and run model.logits(prompt ids) with the device's buffers and the dispatches recorded."""
    dev = get_device().device
    device_cls, queue_cls = type(dev), type(dev.queue)
    created: dict = {}  # id -> (buffer, bytearray of its content)
    kernels: dict = {}  # id(kernel) -> (name, params, snippets)
    calls: list = []  # (kernel, {binding: buffer or (buffer, offset, size)}, groups, role)
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
        return record(self, k, buffers, groups, role, key, binds)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(device_cls, "create_buffer_with_data", create_buffer_with_data)
        mp.setattr(device_cls, "create_buffer", create_buffer)
        mp.setattr(queue_cls, "write_buffer", write_buffer)
        mp.setattr(shaders.ShaderLibrary, "kernel", recording_kernel)
        mp.setattr(dispatch.Recorder, "dispatch", recording_dispatch)
        with load_model() as model:
            ids = model.tokenizer.encode(prompt).ids
            logits = np.asarray(model.logits(ids), np.float32)
            return _replay_of(created, kernels, calls, logits)


def _replay_of(created: dict, kernels: dict, calls: list, logits: np.ndarray) -> Replay:
    r = Replay(logits=logits)
    buffer_index: dict = {}
    shader_index: dict = {}
    lm = [c for c in calls if c[3] == "lm"]
    assert len(lm) == 1, f"expected one logits matvec in the recorded pass, saw {len(lm)}: not a single-pass prefill"
    for k, bufs, groups, role in calls:
        name, params, snippets = kernels[id(k)]
        src = compose(name, params, snippets)
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
    out = lm[0][1][3]
    r.logits_buffer = buffer_index[id(out if not isinstance(out, tuple) else out[0])]
    return r
