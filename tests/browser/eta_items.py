"""Eta programs as harness.js run items, and their outputs back as numpy arrays.

The WGSL is `prog.emit("wgsl", limits=...)` planned for the browser device's limits; the
arena layout and kernel list come from the same plan, as piegpu/runtime/compiled.py's
build_artifact records them for wgpu.
"""

from __future__ import annotations

import numpy as np

from piegpu import dtype
from piegpu.eta.interp import coerce_input
from piegpu.kernel.cstyle import grid
from piegpu.kernel.plan import Limits, plan as make_plan
from tests.browser.harness import b64_words, words_b64


def limits_from(webgpu: dict) -> Limits:
    """Planning limits from a WebGPU device's limits (what runtime/compiled.py's limits_of does for wgpu)."""
    return Limits(max_workgroup=min(1024, webgpu["maxComputeInvocationsPerWorkgroup"],
                                    webgpu["maxComputeWorkgroupSizeX"]),
                  max_groups_per_dim=webgpu["maxComputeWorkgroupsPerDimension"],
                  max_binding_words=webgpu["maxStorageBufferBindingSize"] // 4)


def to_words(arr: np.ndarray, ty) -> np.ndarray:
    """An input as arena words: bools as 0/1, every other dtype bit-cast."""
    a = np.ascontiguousarray(arr, dtype=ty.dtype.np).reshape(-1)
    return a.astype(np.uint32) if ty.dtype == dtype.bool else a.view(np.uint32)


def from_words(words: np.ndarray, ty) -> np.ndarray:
    """Arena words as an output of type `ty`."""
    if ty.dtype == dtype.bool:
        return (words != 0).reshape(ty.shape)
    return words.view(ty.dtype.np).reshape(ty.shape).copy()


class ProgramItem:
    """One eta program with its inputs, ready for Browser.run (.item) and decoding its reply (.outputs)."""

    def __init__(self, prog, inputs: list, limits: Limits, label: str):
        self.prog, self.label = prog, label
        arrays = [coerce_input(i, x, t) for i, (x, t) in enumerate(zip(inputs, prog.input_types))]
        p = make_plan(prog, limits)
        self.out_types = [t for _, t in p.outputs]
        self.code = prog.emit("wgsl", limits=limits)
        self.item = {
            "label": label,
            "code": self.code,
            "bindings": [b.name for b in p.bindings],
            "kernels": [[k.name, *grid(k.groups, p.limits.max_groups_per_dim)] for k in p.kernels],
            "arena_words": p.arena_words,
            "inputs": [[off, b64_words(to_words(a, t))] for (off, t), a in zip(p.inputs, arrays)],
            "outputs": [[off, t.size] for off, t in p.outputs],
        }

    def outputs(self, result: dict) -> tuple:
        """The program's outputs from harness.js's reply (AssertionError with Tint's messages if it failed)."""
        assert not result["errors"], f"{self.label}: Chromium rejected or failed it:\n" + "\n".join(
            result["errors"]) + f"\n--- WGSL ---\n{numbered(self.code)}"
        words = words_b64(result["output"])
        outs, pos = [], 0
        for t in self.out_types:
            outs.append(from_words(words[pos: pos + t.size], t))
            pos += t.size
        assert len(words) == max(4, pos), f"{self.label}: {len(words)} words back, {max(4, pos)} expected"
        return tuple(outs)


def numbered(code: str) -> str:
    """Source with line numbers (Tint's messages cite lines)."""
    return "\n".join(f"{i + 1:5d}  {line}" for i, line in enumerate(code.splitlines()))
