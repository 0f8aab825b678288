"""Dispatch plumbing: plans of prepared dispatches, cached bind groups, small uniform buffers.

A plan is a list of (pipeline, bind group, workgroups, role); it is built once per pass
shape and replayed into a compute pass each time, so encoding a pass costs no Python
beyond the replay loop.
"""

from __future__ import annotations

import numpy as np


def replay(cpass, plan: list) -> None:
    """Record a prepared list of (pipeline, bind group, workgroups, role) into a compute pass."""
    last = None
    for pipeline, bind_group, groups, _ in plan:
        if pipeline is not last:
            cpass.set_pipeline(pipeline)
            last = pipeline
        cpass.set_bind_group(0, bind_group)
        cpass.dispatch_workgroups(*groups)


class Recorder:
    """Builds a plan: one entry per dispatch, bind groups cached in `binds` under a key per step."""

    def __init__(self, device, binds: dict):
        self.device = device
        self.binds = binds  # owned by whoever owns the buffers (a working set): they die together
        self.plan: list = []

    def dispatch(self, kernel, buffers: dict, groups: tuple, role: str, key: tuple | None = None,
                 binds: dict | None = None) -> None:
        """Append a dispatch of `kernel` over `buffers` ({binding: buffer or (buffer, offset, size)}).

        The bind group is cached under `key` in `binds` (default: the recorder's store): pass the
        store of whatever owns the buffers, so the bind group dies with them.
        """
        if key is None:
            bg = kernel.bind(self.device, buffers)
        else:
            store = self.binds if binds is None else binds
            k = (id(kernel),) + tuple(key)
            bg = store.get(k)
            if bg is None:
                bg = store[k] = kernel.bind(self.device, buffers)
        self.plan.append((kernel.pipeline, bg, groups, role))


class UniformParams:
    """Uniform buffers of u32 values (16 bytes, or whole vec4s for longer tuples), one per distinct tuple (shared).

    Token counts and offsets reach kernels this way instead of as shader constants, so
    one compiled kernel serves every prompt length (lavapipe compiles a kernel on its
    first dispatch: 0.1-0.4 s each).
    """

    def __init__(self, device):
        self.device = device
        self._bufs: dict = {}

    def __call__(self, *values: int):
        """The buffer holding `values` (zero-padded to four words)."""
        import wgpu
        b = self._bufs.get(values)
        if b is None:
            data = np.zeros(max(4, -(-len(values) // 4) * 4), np.uint32)  # whole vec4<u32>s
            data[:len(values)] = values
            b = self._bufs[values] = self.device.create_buffer_with_data(
                data=data.tobytes(), usage=wgpu.BufferUsage.UNIFORM, label=f"params{list(values)}")
        return b
