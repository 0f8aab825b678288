"""The LoRA steps of a forward pass: u = A x (lora_shrink.wgsl), then y += scale B u (lora_expand.wgsl), or for
gate/up the stored rows, their deltas and the activation in one (lora_glu.wgsl); see model/lora_bank.py. Each
kernel's grid runs over the bank's slots: an invocation applies one adapter's matrices to the pass's tokens under
it (shaders/blocks/lora_tokens.wgsl), so rows on one adapter share its loads.

A pass takes these steps for every projection group the bank holds, whichever adapters its rows use (rows with
none get no delta), so the plan is the same for any mix of adapters. Where a group is adapted the pass takes the
unfused path around it: x is normalized in a dispatch of its own (A reads it too), the QKV rows are stored,
adapted, then rotated and written to the KV pages (the path Qwen2's bias takes); gate/up rows are stored and
lora_glu applies the activation.
"""

from __future__ import annotations

from math import ceil

from .lora_bank import adapted, geometry

TB = 8  # tokens an invocation takes (the shaders' TB)


class Lora:
    """The LoRA steps of one plan: the bank's layout when the plan was made, the pass's sequences."""

    def __init__(self, k, gpu, s, seqs: list):
        self.k, self.gpu = k, gpu
        self.bank = gpu.lora
        # no LoRA step where no sequence of the pass runs under an adapter (plans are keyed by that: lora_bank.adapted)
        self.groups = self.bank.groups if adapted(gpu, [ws for ws, *_ in seqs]) else frozenset()
        self.seqs = seqs
        if self.groups:
            self.uniform, self.tables = k._seqs(seqs)
            self.chunks = ceil(sum(n for *_, n in seqs) / TB)  # (a slot may hold every token of the pass)
            self.bufs = buffers(gpu, s, k.T)

    def has(self, group: str) -> bool:
        """Whether `group` ("qkv", "o", "gate_up", "down") is adapted in this plan."""
        return group in self.groups

    def add(self, layer: int, group: str, x, y, out_stride: int | None = None) -> None:
        """y[t] += scale B (A x[t]) for the pass's tokens: the delta of projection `group` of `layer`."""
        geo = geometry(self.gpu.config, group)
        a, b = self.bank.bufs[(layer, group)]
        R = self.bank.rank
        self._shrink(x, a, geo.inp, geo.parts * R)
        lib = self.gpu.lib
        k = lib.kernel("lora_expand", {"OUT": geo.out, "OUT_STRIDE": out_stride or geo.out, "R": R,
                                       "RT": geo.parts * R, "B1": geo.b1, "B2": geo.b2, "SEQS": len(self.seqs)})
        self.k.rec.dispatch(k, {0: self.bufs["u"], 1: b, 2: y, 3: self.uniform, 6: self.tables},
                            (ceil(geo.out / 4 / 64), self.bank.slots, self.chunks), "lora_expand")

    def store(self, w, x, out, key: tuple) -> None:
        """out[t] = W x[t], x normalized already: a projection's rows that a LoRA step adapts after."""
        self.k._matvec(w, x, self.k.T, None, "store", {"OUT_STRIDE": w.rows}, {3: out}, key)

    def glu(self, layer: int, x, gu, out) -> None:
        """out[t] = act(gate + dgate) * (up + dup) from the stored gate/up rows `gu` of `layer`."""
        c = self.gpu.config
        geo = geometry(c, "gate_up")
        a, b = self.bank.bufs[(layer, "gate_up")]
        R = self.bank.rank
        self._shrink(x, a, geo.inp, 2 * R)
        act = {"silu": 0, "gelu_tanh": 1}[c.family.act]
        k = self.gpu.lib.kernel("lora_glu", {"I": c.intermediate_size, "R": R, "ACT": act,
                                             "SEQS": len(self.seqs)})
        self.k.rec.dispatch(k, {0: self.bufs["u"], 1: b, 2: out, 3: self.uniform, 4: gu, 6: self.tables},
                            (ceil(c.intermediate_size / 2 / 64), self.bank.slots + 1, self.chunks), "lora_glu")

    def _shrink(self, x, a, inp: int, rt: int) -> None:
        k = self.gpu.lib.kernel("lora_shrink", {"IN4": inp // 4, "RT": rt, "SEQS": len(self.seqs)})
        self.k.rec.dispatch(k, {0: x, 1: a, 2: self.bufs["u"], 3: self.uniform, 6: self.tables},
                            (ceil(rt / 4 / 16), self.bank.slots, self.chunks), "lora_shrink")


def buffers(gpu, s, T: int) -> dict:
    """The scratch's LoRA buffers for passes of T tokens: u [T][3 x the bank's rank] (made again when the rank grows:
    only the LoRA steps bind it, in bind groups of their plan), the stored gate/up rows [T][2 I] and the QKV rows
    where the scratch has none (made once: the projections' cached bind groups hold them)."""
    import wgpu
    bank, c = gpu.lora, gpu.config
    use = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    d = gpu.device
    if s.lora is None:
        s.lora = {"rank": 0, "gu": d.create_buffer(size=max(16, T * 2 * c.intermediate_size * 4), usage=use,
                                                   label="lora-gate-up")}
        if s.qkv is None:
            width = (c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim
            s.qkv = d.create_buffer(size=max(16, T * width * 4), usage=use, label="qkv")
    if s.lora["rank"] < bank.rank:
        s.lora.update(rank=bank.rank, u=d.create_buffer(size=max(16, T * 3 * bank.rank * 4), usage=use, label="lora-u"))
    return s.lora
