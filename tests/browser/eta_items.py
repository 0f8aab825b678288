"""Eta programs as harness.js run items, and their outputs back as numpy arrays.

The WGSL is `prog.emit("wgsl", limits=...)` planned for the browser device's limits; the
arena layout and kernel list come from the same plan, as piegpu/runtime/compiled.py's
build_artifact records them for wgpu. A pure program binds only the arena (ProgramItem);
an epilogue also binds its logits and channel rings (EpilogueItem), laid out as
piegpu/kernel/channel_layout.py says.
"""

from __future__ import annotations

import numpy as np

from piegpu import dtype
from piegpu.kernel import channel_layout
from piegpu.eta.interp import coerce_input, evaluate
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


class ChannelEnv:
    """The interpreter's runtime for an epilogue: logits rows, channel cells to take, puts collected."""

    def __init__(self, logits: np.ndarray, cells: dict):
        self.logits, self.cells, self.puts = logits, cells, {}

    def external(self, node, ins):
        """Value of a runtime node (eta/interp.py calls this for intrinsics and channel ops)."""
        if node.op == "intrinsic":
            return self.logits[node.attr["index"]].reshape(node.type.shape)
        slot = node.attr["slot"]
        if node.op == "chan_take":
            return self.cells[slot][node.attr["seq"]]
        if node.op == "chan_read":
            return self.cells[slot][0]
        self.puts.setdefault(slot, {})[node.attr["seq"]] = np.array(ins[0])
        return None


class EpilogueItem:
    """An epilogue (logits intrinsic, channels) with its buffers as the runtime lays them out.

    Each channel ring starts at head = `head` (past the ring's size, so the cell addressing
    wraps around the ring) holding the cells to take; after the pass the test reads back every ring and checks
    the header moved by the takes and puts and that the put cells hold the interpreter's puts.
    """

    def __init__(self, prog, logits: np.ndarray, cells: dict, limits: Limits, label: str, head: int = 7):
        self.prog, self.label, self.logits, self.cells = prog, label, logits, cells
        p = make_plan(prog, limits)
        self.code = prog.emit("wgsl", limits=limits)
        self.out_types = [t for _, t in p.outputs]
        self.counts = p.channel_counts
        buffers, self.rings = [], {}
        for b in p.bindings[1:]:
            if b.kind == "intrinsic":
                rows = logits.reshape(-1)[: b.words]
                assert rows.size == b.words, f"{label}: the epilogue reads {b.words} logits words, {rows.size} given"
                buffers.append({"words": b.words, "data": b64_words(rows.astype(np.float32))})
                continue
            slot, cell_words = b.info["slot"], b.info["cell_words"]
            takes, puts = self.counts[slot]
            have = cells.get(slot, [])
            assert len(have) >= takes, f"{label}: channel slot {slot} is taken {takes} times, {len(have)} cells given"
            ring = len(have) + puts + 1
            words = np.zeros(channel_layout.HEADER_WORDS + ring * cell_words, np.uint32)
            words[: channel_layout.HEADER_WORDS] = channel_layout.header(head, head + len(have), ring, cell_words)
            cell_type = prog.channels[slot]
            for n, value in enumerate(have):
                at = channel_layout.cell_word(head + n, ring, cell_words)
                words[at: at + cell_words] = to_words(np.asarray(value), cell_type)
            self.rings[slot] = (ring, cell_words, head, head + len(have), len(buffers) + 1, words.size)
            buffers.append({"words": int(words.size), "data": b64_words(words)})
        self.item = {
            "label": label, "code": self.code, "bindings": [b.name for b in p.bindings],
            "kernels": [[k.name, *grid(k.groups, p.limits.max_groups_per_dim)] for k in p.kernels],
            "arena_words": p.arena_words, "inputs": [], "outputs": [[off, t.size] for off, t in p.outputs],
            "buffers": buffers, "read_back": [r[4] for r in self.rings.values()],
        }

    def expected(self) -> ChannelEnv:
        """The interpreter's run of the epilogue on the same logits and cells (its puts in .puts)."""
        env = ChannelEnv(self.logits, self.cells)
        evaluate(self.prog, [], env)
        return env

    def rings_after(self, result: dict) -> dict:
        """{slot: (header words, {seq: put cell})} read back from Chromium."""
        assert not result["errors"], f"{self.label}: Chromium rejected or failed it:\n" + "\n".join(
            result["errors"]) + f"\n--- WGSL ---\n{numbered(self.code)}"
        words = words_b64(result["output"])
        pos = sum(t.size for t in self.out_types)
        out = {}
        for slot, (ring, cell_words, head, tail, _, size) in self.rings.items():
            buf = words[pos: pos + size]
            pos += size
            puts = {}
            for seq in range(self.counts[slot][1]):
                at = channel_layout.cell_word(tail + seq, ring, cell_words)
                puts[seq] = from_words(buf[at: at + cell_words].copy(), self.prog.channels[slot])
            out[slot] = (buf[: channel_layout.HEADER_WORDS], puts)
        return out
