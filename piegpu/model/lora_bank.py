"""LoraBank: the LoRA adapters resident on the device, in slots, for every layer and fused projection at once.

Per layer and fused projection (GROUPS: q | k | v, o, gate | up, down) two buffers hold every slot's matrices,
each transposed: A [slots][in][parts x R] (the parts' A rows stacked, each padded to the bank's rank R) and
B [slots][R][out] (out in the fused matrix's row order: q | k | v, gate and up interleaved). A sequence names its slot in its page-table
row (word 2: slot + 1, 0 = no adapter; word 3: its adapter_scale as f32 bits), so the kernels of one pass gather
each row's adapter (the BGMV pattern): a batch that mixes adapters compiles nothing new and builds no new plan.

The layout (slots, R, groups) grows when an adapter needs more -- a bigger rank, a projection no resident adapter
had, a slot while every slot is in use -- up to `max_slots`; growing makes new buffers (the old stay alive for
the plans that bind them) and bumps `epoch`, which every plan key holds. Past max_slots the least recently used
adapter that no live sequence holds is evicted (its host copy stays loaded).
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from ..errors import ValidationError
from .lora_files import LoraWeights

GROUPS = {"qkv": ("q_proj", "k_proj", "v_proj"), "o": ("o_proj",), "gate_up": ("gate_proj", "up_proj"),
          "down": ("down_proj",)}
GROUP_OF = {t: g for g, ts in GROUPS.items() for t in ts}
DEFAULT_MAX_SLOTS = 8


def bank_of(gpu) -> "LoraBank":
    """A GpuModel's bank of resident adapters (made on first use, with load_model(max_loras=...) slots at most)."""
    if gpu.lora is None:
        gpu.lora = LoraBank(gpu, gpu.lora_slots or DEFAULT_MAX_SLOTS)
    return gpu.lora


def adapted(gpu, wss) -> bool:
    """Whether a pass over these working sets takes LoRA steps: a bank exists and one of them has an adapter
    (plan keys hold it, so passes of base-model rows run the plan without them)."""
    return gpu.lora is not None and any(ws.adapter[0] is not None for ws in wss)


def plan_epoch(gpu) -> tuple:
    """(merges into the weights, the bank's layout generation): plan keys hold it, so a plan is made again when
    either changes what a pass binds."""
    return len(gpu.merged), 0 if gpu.lora is None else gpu.lora.epoch


class Geometry(NamedTuple):
    """One fused projection's shape in the bank: rows out, columns in, parts, and the first row of parts 1 and 2."""

    out: int
    inp: int
    parts: int
    b1: int
    b2: int


def geometry(config, group: str) -> Geometry:
    """The fused projection `group` of this config (gate_up's parts interleave: b1, b2 unused)."""
    c = config
    q, kv, h, i = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim, c.hidden_size, \
        c.intermediate_size
    return {"qkv": Geometry(q + 2 * kv, h, 3, q, q + kv), "o": Geometry(h, q, 1, h, h),
            "gate_up": Geometry(2 * i, h, 2, 2 * i, 2 * i), "down": Geometry(h, i, 1, h, h)}[group]


def part_rows(config, group: str) -> list:
    """The rows of each part (q, k, v; gate, up; the one of o and down) in the fused matrix of `group`: slices
    (gate and up interleave: every second row)."""
    geo = geometry(config, group)
    if group == "gate_up":
        return [slice(0, None, 2), slice(1, None, 2)]
    return [slice(0, geo.b1), slice(geo.b1, geo.b2), slice(geo.b2, geo.out)][:geo.parts]


class Pin:
    """A sequence's hold on a slot: the slot is not evicted while a Pin for it lives."""

    def __init__(self, bank: "LoraBank", key, slot: int):
        self.slot = slot
        self._finalizer = weakref.finalize(self, bank._unpin, key)

    def release(self) -> None:
        """Let go of the slot now."""
        self._finalizer()


class LoraBank:
    """The device copies of resident adapters (see the module doc)."""

    def __init__(self, gpu, max_slots: int = DEFAULT_MAX_SLOTS):
        self.gpu = gpu
        self.max_slots = int(max_slots)
        self.slots, self.rank, self.groups, self.epoch = 0, 0, frozenset(), 0
        self.bufs: dict = {}  # (layer, group) -> (A buffer, B buffer)
        self.resident: OrderedDict = OrderedDict()  # adapter key -> (slot index, LoraWeights), least recent first
        self.pins: dict = {}  # adapter key -> live Pins
        # the engine thread acquires, the server's loop unloads, finalizers unpin from any thread (re-entrant: a
        # collection inside acquire may run them)
        self.lock = threading.RLock()

    @property
    def bytes(self) -> int:
        """Device bytes of the bank's buffers (every slot, resident or not)."""
        return sum(a.size + b.size for a, b in self.bufs.values())

    def acquire(self, key, weights: LoraWeights) -> Pin:
        """A Pin on the slot holding `weights` (uploaded now if it is not resident; the layout grows if needed)."""
        with self.lock:
            return self._acquire(key, weights)

    def _acquire(self, key, weights: LoraWeights) -> Pin:
        hit = self.resident.get(key)
        if hit is not None:
            self.resident.move_to_end(key)
        else:
            self._fit(weights)
            free = self._free_slots()
            if not free and self.slots < self.max_slots:
                self._relayout(min(self.max_slots, max(1, 2 * self.slots)), self.rank, self.groups)
                free = self._free_slots()
            if not free:
                victim = next((k for k in self.resident if not self.pins.get(k)), None)
                if victim is None:
                    gc.collect()  # working sets in reference cycles (with their sessions) let go of their slots
                    victim = next((k for k in self.resident if not self.pins.get(k)), None)
                if victim is None:
                    raise ValidationError(f"all {self.max_slots} LoRA slots hold adapters that running sequences "
                                          "use. Fix: load_model(max_loras=N) / piegpu serve --max-loras N for more, "
                                          "or fewer adapters at once")
                free = [self.resident.pop(victim)[0]]
            hit = self.resident[key] = (free[0], weights)
            self._upload(free[0], weights)
        self.pins[key] = self.pins.get(key, 0) + 1
        return Pin(self, key, hit[0])

    def _free_slots(self) -> list:
        used = {s for s, _ in self.resident.values()}
        return [s for s in range(self.slots) if s not in used]

    def evict(self, key) -> None:
        """Drop an adapter from its slot (unload_adapter); refused while a live sequence holds it."""
        if self.pins.get(key):
            gc.collect()  # working sets in reference cycles (with their sessions) let go of their slots
        with self.lock:
            if self.pins.get(key):
                raise ValidationError("the adapter is in use by running sequences. Fix: let them finish first")
            self.resident.pop(key, None)

    def _unpin(self, key) -> None:
        with self.lock:
            self.pins[key] -= 1
            if not self.pins[key]:
                del self.pins[key]

    # ---- layout ---------------------------------------------------------------------------------
    def _fit(self, w: LoraWeights) -> None:
        """Grow the rank or the groups for `w` (keeping the slots)."""
        rank = max(self.rank, -(-w.rank // 4) * 4)
        groups = self.groups | {GROUP_OF[t] for t in w.targets}
        if rank != self.rank or groups != self.groups:
            self._relayout(max(self.slots, 1), rank, groups)

    def _relayout(self, slots: int, rank: int, groups: frozenset) -> None:
        import wgpu
        c = self.gpu.config
        use = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST
        bufs = {}
        for layer in range(c.num_hidden_layers):
            for g in sorted(groups):
                geo = geometry(c, g)
                a = self.gpu.device.create_buffer(size=slots * geo.parts * rank * geo.inp * 4, usage=use,
                                                  label=f"lora.l{layer}.{g}.A")
                b = self.gpu.device.create_buffer(size=slots * geo.out * rank * 4, usage=use,
                                                  label=f"lora.l{layer}.{g}.B")
                bufs[(layer, g)] = (a, b)
        self.bufs, self.slots, self.rank, self.groups = bufs, slots, rank, frozenset(groups)
        self.epoch += 1
        for slot, w in self.resident.values():
            self._upload(slot, w)

    def _upload(self, slot: int, w: LoraWeights) -> None:
        """Write `w`'s matrices into `slot` of every buffer (zeros where it has no such projection)."""
        c, R, q = self.gpu.config, self.rank, self.gpu.device.queue
        for (layer, g), (abuf, bbuf) in self.bufs.items():
            geo = geometry(c, g)
            A = np.zeros((geo.parts * R, geo.inp), np.float32)
            B = np.zeros((geo.out, R), np.float32)
            for p, (target, rows) in enumerate(zip(GROUPS[g], part_rows(c, g))):
                ab = w.layers[layer].get(target)
                if ab is not None:
                    a, b = ab
                    A[p * R: p * R + a.shape[0]] = a
                    B[rows, : b.shape[1]] = b
            # transposed ([in][parts x R], [R][out]): the shaders' invocations read adjacent words
            q.write_buffer(abuf, slot * A.nbytes, np.ascontiguousarray(A.T).tobytes())
            q.write_buffer(bbuf, slot * B.nbytes, np.ascontiguousarray(B.T).tobytes())
