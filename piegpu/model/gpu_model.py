"""A model on the device: uploaded weights, scratch buffers, working sets, and passes as dispatch plans.

The steps of a pass are in model/forward.py, the typed shader wrappers in
model/kernels.py, the plan plumbing in runtime/dispatch.py. The runtime's Pipeline
drives a GpuModel through encode() and encode_advance().
"""

from __future__ import annotations

import functools
import os
import weakref
from dataclasses import dataclass

import numpy as np

from ..runtime.progress import bar
from ..kernel import channel_layout
from ..errors import ModelError, ValidationError
from ..runtime.dispatch import Recorder, UniformParams, replay
from ..runtime.device import MODEL_CLOSED
from ..runtime.waits import drain
from .batch_plan import BatchPlan, build as build_batch_plan, reseat as reseat_plan
from .forward import forward
from .gpu_weights import DeviceVectors, GpuMatrix, upload
from .kernels import Kernels
from .lora_bank import adapted, plan_epoch
from .kv_pool import DEFAULT_KV_DTYPE, PAGE_TOKENS, KvPool, resolve_context
from .reference import rope_tables
from .rope import inv_freq
from .shaders import ShaderLibrary
from .weights import ModelWeights
from .working_set import WorkingSet

MAX_PREFILL_TOKENS = 256  # tokens per pass of the host-driven forward(); longer prompts take several passes
SPLIT_FROM = 256  # positions from which a one-sequence decode pass splits its attention (flash-decoding)
MAX_SPLITS = 8


@dataclass
class GpuLayer:
    """One decoder layer's weights on the device."""

    qkv: GpuMatrix
    o: GpuMatrix
    gate_up: GpuMatrix
    down: GpuMatrix
    input_norm: object
    post_norm: object
    qkv_bias: object = None  # family steps' vectors (None: the family has no such step)
    q_norm: object = None
    k_norm: object = None
    attn_out_norm: object = None
    ffn_out_norm: object = None


class Scratch:
    """Activation buffers for passes of T tokens and `rows` readout rows."""

    def __init__(self, model: "GpuModel", T: int, rows: int):
        import wgpu
        c = model.config
        use = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        d = model.device
        qr = c.num_attention_heads * c.head_dim

        def buf(n, label):
            return d.create_buffer(size=max(16, n * 4), usage=use, label=label)
        # Prefill matvecs read x through a window of a whole token group (up to max_uniform
        # bytes) from the group's first token, so buffers read that way get one window of slack
        # (the residual stream too: matmuls that fold the RMSNorm in read it directly).
        pad = model.max_uniform // 4 if T > 1 else 0
        self.h = buf(T * c.hidden_size + pad, "hidden")
        self.hn = buf(max(T, rows) * c.hidden_size + pad, "hidden-normed")
        self.q = buf(T * qr, "q")
        self.o = buf(T * qr + pad, "attn-out")
        self.act = buf(T * c.intermediate_size + pad, "mlp-act")
        self.logits = buf(rows * c.vocab_size, "logits")
        # a split decode attention's partial softmaxes: per sequence, head and split, HD4 + 1 vec4s
        self.parts = buf(T * c.num_attention_heads * MAX_SPLITS * (c.head_dim + 4), "attention-parts") if T <= 64 \
            else None
        # [q | k | v] before RoPE: batched passes, and every pass of a family with q/k steps before RoPE
        self.qkv = buf(T * (qr + 2 * c.num_key_value_heads * c.head_dim), "qkv") if T > 1 or model.qk_prep else None
        self.binds: dict = {}  # bind groups over weights and these buffers only (shared by every working set)
        self.lora = None  # LoRA steps' buffers (model/lora_steps.py buffers), made with the first adapted plan


class GpuModel(DeviceVectors):
    """A model's weights on the device and the kernels of its forward pass."""

    def __init__(self, weights: ModelWeights, device=None, max_binding: int | None = None,
                 kv_mb: float | None = None, page_tokens: int = PAGE_TOKENS, kv_dtype: str = DEFAULT_KV_DTYPE,
                 context: int | None = None):
        from ..runtime.device import get_device
        self.dev = device or get_device()
        self.device = self.dev.device
        self.config = c = weights.config
        self.lib = ShaderLibrary(self.device)
        self.params = UniformParams(self.device)
        # Matrices bigger than one binding are split into row chunks (max_binding lowers it for tests).
        self.max_binding = min(max_binding or 1 << 62, self.dev.limits.get("max-storage-buffer-binding-size", 128 << 20))
        self.max_uniform = self.dev.limits.get("max-uniform-buffer-binding-size", 65536)
        widest = max(c.hidden_size, c.intermediate_size) * 4
        if widest > self.max_uniform:
            raise ModelError(f"hidden/intermediate size {widest // 4} needs {widest}-byte uniform bindings but this "
                             f"adapter allows {self.max_uniform}. Fix: a model with sizes up to "
                             f"{self.max_uniform // 4}, or an adapter with a larger max-uniform-buffer-binding-size")
        # the longest sequence (load_model(context=...)); the pool is sized for it, not for the model's maximum
        self.context = resolve_context(
            c, context, self.dev.is_cpu, kv_dtype, self.dev.limits.get("max-storage-buffer-binding-size", 128 << 20))
        textures = self.dev.texture_weights and max_binding is None  # (a test's small bindings: storage chunks)
        up = lambda m, label: upload(self.device, m, self.max_binding, label, textures)  # noqa: E731
        with bar(len(weights.layers) + 1, "reading and uploading weights", unit="layer") as progress:
            self.embed = up(weights.embed, "embed")
            self.lm_head = self.embed if weights.lm_head is None else up(weights.lm_head, "lm_head")
            self._let_go(weights)
            progress.update(1)
            self.layers = []
            for i, lw in enumerate(weights.layers):  # a layer laid out, uploaded and its host memory let go at a time
                self.layers.append(self._layer(lw, i, up))
                del lw
                self._let_go(weights)
                progress.update(1)
        # families with a step between the QKV projection and RoPE (bias, q/k norm) take the unfused path
        self.qk_prep = c.family.qkv_bias or c.family.qk_norm
        self.final_norm = self._vec(weights.final_norm, "final_norm")
        self._rope: dict = {}  # Rope -> (table buffer, positions)
        self._scratch: dict = {}
        self._token_bufs: dict = {}
        self._zero_vecs: dict = {}
        self.weight_bytes = self.count_weight_bytes()
        self.kv = KvPool(self, kv_mb, page_tokens, textures, kv_dtype, self.context)  # every working set's KV pages
        self._working_sets = weakref.WeakSet()  # released with everything else
        self.lora = None  # the resident LoRA adapters (model/lora_bank.py), made by the first adapter used
        self.lora_slots = None  # the bank's most slots (load_model(max_loras=...); None: the default)
        self.merged: list = []  # (LoraWeights, scale) merged into the weights, in order (model/lora_merge.py)
        self.closed = False

    def count_weight_bytes(self) -> int:
        """Device bytes of every weight matrix (the embedding once where the LM head is tied to it)."""
        matrices = [m for L in self.layers for m in (L.qkv, L.o, L.gate_up, L.down)]
        matrices += [self.embed] + ([] if self.lm_head is self.embed else [self.lm_head])
        return sum(m.nbytes for m in matrices)

    def _layer(self, lw, i: int, up) -> GpuLayer:
        """Layer i's matrices and vectors on the device."""
        opt = lambda v, label: None if v is None else self._vec(v, label)  # noqa: E731
        return GpuLayer(
            up(lw.qkv, f"l{i}.qkv"), up(lw.o, f"l{i}.o"), up(lw.gate_up, f"l{i}.gate_up"), up(lw.down, f"l{i}.down"),
            self._vec(lw.input_norm, f"l{i}.in_norm"), self._vec(lw.post_norm, f"l{i}.post_norm"),
            opt(lw.qkv_bias, f"l{i}.qkv_bias"), opt(lw.q_norm, f"l{i}.q_norm"), opt(lw.k_norm, f"l{i}.k_norm"),
            opt(lw.attn_out_norm, f"l{i}.attn_out_norm"), opt(lw.ffn_out_norm, f"l{i}.ffn_out_norm"))

    def _let_go(self, weights: ModelWeights) -> None:
        """After an upload step: the device does the queued writes (freeing their staging copies) and the source file's
        pages leave this process's memory, so a load peaks at the device's copy plus one layer, not twice the model."""
        drain(self.device)
        if weights.release_host is not None:
            weights.release_host()

    def rope_table(self, positions: int, layer: int = 0):
        """cos/sin per (position, pair) of layer `layer`'s RoPE below `positions` positions (shared by working sets).

        One table per distinct RoPE (Gemma 3's sliding-window layers have their own).
        """
        c = self.config
        rope = c.rope_for(layer)
        hit = self._rope.get(rope)
        if hit is None or hit[1] < positions:
            cos, sin = rope_tables(np.arange(positions), inv_freq(rope, c.head_dim), np.float32)
            half = c.head_dim // 2
            table = np.stack([cos[:, :half], sin[:, :half]], axis=-1)
            hit = self._rope[rope] = (self._vec(table, "rope"), positions)
        return hit[0]

    def working_set(self, max_tokens: int | None = None) -> WorkingSet:
        """A fresh KV state for one sequence of up to max_tokens positions (pages come from the pool as it grows)."""
        if self.closed:
            raise ValidationError(MODEL_CLOSED)
        c = self.config
        n = int(max_tokens or min(self.context, 4096))
        if not 1 <= n <= self.context:
            raise ValidationError(f"working_set(max_tokens={n}): must be 1..{self.context} (the model's context; "
                                  "load_model(context=N) chooses it)")
        for i in range(c.num_hidden_layers):
            self.rope_table(n, i)
        ws = WorkingSet(self, n, self.kv.open_slot(n))
        self._working_sets.add(ws)
        return ws

    def fork(self, ws: WorkingSet) -> WorkingSet:
        """A working set sharing `ws`'s first ws.length positions (see WorkingSet.fork)."""
        new = self.working_set(ws.max_tokens)
        self.copy_working_sets([(ws, new)])
        return new

    def copy_working_sets(self, pairs: list) -> None:
        """Make each destination hold its source's positions and length, in list order, by sharing pages
        (nothing is copied now: a shared page is copied when one of its holders writes into it). A
        destination may be the source of a later pair.
        """
        for src, dst in pairs:
            if src.length > dst.max_tokens:
                raise ValidationError(f"copying a working set of {src.length} positions into one of {dst.max_tokens}. "
                                      "Fix: a destination at least as large")
        for src, dst in pairs:
            if src is not dst:
                dst.share_from(src, src.length)
                dst.same_adapter(src)

    def kv_stats(self) -> dict:
        """The KV pool's use: pages_total, pages_used, page_tokens, bytes_per_page, ... (API.md section 8)."""
        if self.closed:
            raise ValidationError(MODEL_CLOSED)
        return self.kv.stats()

    def scratch(self, T: int, rows: int) -> Scratch:
        """Activation buffers for passes of T tokens with `rows` readout rows (cached)."""
        s = self._scratch.get((T, rows))
        if s is None:
            s = self._scratch[(T, rows)] = Scratch(self, T, rows)
        return s

    def release(self) -> int:
        """Destroy every device buffer and texture of this model -- weights, KV pages, scratch, tables -- and
        drop the caches that refer to them; returns the bytes destroyed. The model is unusable after
        (model/release.py)."""
        from .release import release_model
        return release_model(self)

    # ---- passes ----------------------------------------------------------------------------
    def encode(self, cpass, ws: WorkingSet, T: int, tokens, readout: tuple = None, hidden: bool = False) -> tuple:
        """Record one forward pass of T tokens into `cpass`; returns (logits buffer, dispatch count).

        `tokens` is a channel buffer whose oldest cell holds the T token ids (read on the
        device); `readout` = (first, count) token rows whose logits are computed
        (default: the last token); `hidden`: their final-normed hidden rows are stored too
        (readout_buffer). The caller advances ws.state after the pass. The list of dispatches
        is built once per (working set, shape, tokens buffer, hidden) and replayed.
        """
        logits, plan = self.dispatch_plan(ws, T, tokens, readout, hidden)
        replay(cpass, plan)
        return logits, len(plan)

    def dispatch_plan(self, ws: WorkingSet, T: int, tokens, readout: tuple = None, hidden: bool = False) -> tuple:
        """(logits buffer, [(pipeline, bind group, workgroups, role), ...]) of one forward pass (cached).

        A decode pass over a long sequence (ws.length >= SPLIT_FROM when planned) splits its attention
        (decode_splits): a plan of its own, made once the sequence gets there. A plan that stores the
        hidden rows (`hidden`) is cached apart from one that does not.
        """
        splits = self.decode_splits if T == 1 and ws.length >= SPLIT_FROM else 1
        key = (T, readout, tokens, splits, hidden, self.plan_key([ws]))
        hit = ws.plans.get(key)
        if hit is None:
            first, rows = readout if readout is not None else (T - 1, 1)
            if not (0 <= first and rows >= 1 and first + rows <= T):
                raise ValidationError(f"readout rows [{first}, {first + rows}) outside the pass's {T} tokens")
            s = self.scratch(T, rows)
            rec = Recorder(self.device, s.binds)  # what does not touch the working set is shared by all of them
            with self.lib.compiling():
                forward(Kernels(self, rec, T, scope=(T, rows), splits=splits), self, ws, s, tokens, first, rows, hidden)
            hit = ws.plans[key] = (s.logits, rec.plan)
        return hit

    def plan_key(self, wss) -> tuple:
        """What a plan over these working sets depends on beyond its shape: merges, LoRA layout, adapted rows."""
        return plan_epoch(self), adapted(self, wss)

    def readout_buffer(self, name: str, logits):
        """The buffer of readout input `name` of the passes whose logits land in `logits`: "logits" itself, or
        "hidden", their final-normed hidden rows [rows, hidden_size] (written by plans made with hidden=True)."""
        if name == "logits":
            return logits
        s = next((s for s in self._scratch.values() if s.logits is logits), None)
        if name != "hidden" or s is None:
            raise ValidationError(f"internal: no readout input {name!r} for this logits buffer (the forward pass "
                                  "provides 'logits' and 'hidden')")
        return s.hn

    @functools.cached_property
    def decode_splits(self) -> int:
        """Runs of positions one sequence's decode attention is split into: enough workgroups (a head each, or
        HG heads with 8-lane subgroups) for 4 per core of a CPU adapter, 64 on a GPU; at most MAX_SPLITS."""
        c = self.config
        from .shader_code import lane_heads
        wgs = c.num_attention_heads  # attention.wgsl: a workgroup a head; the lanes form: HG heads a workgroup
        if self.dev.subgroup_lanes:
            wgs //= lane_heads(c.num_attention_heads // c.num_key_value_heads)
        want = 4 * (os.cpu_count() or 2) if self.dev.is_cpu else 64
        return max(1, min(MAX_SPLITS, -(-want // wgs)))

    def batch_plan(self, seqs: list, tokens, readout: list, hidden: bool = False) -> BatchPlan:
        """The plan of a pass over several sequences (see model/forward.py forward_batch).

        `seqs` = [(working set, first token, tokens)] in pass order; `readout` = [(first row, rows)] per
        sequence, rows relative to the pass; `hidden`: store their final-normed rows too (readout_buffer).
        The caller caches the plan (apart for each `hidden`) and advances each working set.
        """
        with self.lib.compiling():
            return build_batch_plan(self, seqs, tokens, readout, hidden)

    def reseat(self, plan: BatchPlan, wss: list) -> BatchPlan | None:
        """`plan` moved to the working sets `wss` (one per sequence, in pass order), or None: rebuild it."""
        return reseat_plan(self.device, plan, wss)

    def encode_advance(self, cpass, ws: WorkingSet, T: int, keep=None) -> int:
        """Record state[0] += T after a pass, or += the count in channel buffer `keep` (at most T)."""
        key = ("advance", T, keep)
        plan = ws.plans.get(key)
        if plan is None:
            rec = Recorder(self.device, ws.binds)  # every buffer of these is the working set's or its channel's
            Kernels(self, rec, T, scope=(T,)).advance(ws.state, keep)
            plan = ws.plans[key] = rec.plan
        replay(cpass, plan)
        return len(plan)

    # ---- host-driven forward (tests, host-side sampling, benchmarks) ------------------------
    def token_buffer(self, ids) -> object:
        """A buffer in channel layout whose oldest cell holds `ids` (reused per token count)."""
        import wgpu
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.config.vocab_size):
            raise ValidationError(f"token ids must be in [0, {self.config.vocab_size}), got {ids.min()}..{ids.max()}")
        words = np.concatenate([channel_layout.header(0, 1, 1, ids.size), ids.astype(np.uint32)])
        buf = self._token_bufs.get(ids.size)
        if buf is None:
            buf = self._token_bufs[ids.size] = self.device.create_buffer(
                size=words.nbytes, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST, label="tokens")
        self.device.queue.write_buffer(buf, 0, words.tobytes())
        return buf

    def forward(self, ws: WorkingSet, ids, readout: tuple | None = None) -> np.ndarray:
        """Run the tokens through the model (one submit per chunk); logits [rows, vocab] of the last chunk."""
        if self.closed:
            raise ValidationError(MODEL_CLOSED)
        ids = list(np.asarray(ids).reshape(-1))
        if not ids:
            raise ValidationError("forward: no tokens. Fix: pass at least one token id")
        if ws.length + len(ids) > ws.max_tokens:
            raise ValidationError(f"forward: {ws.length} + {len(ids)} tokens exceed the working set's "
                                  f"{ws.max_tokens} positions. Fix: a bigger working_set(max_tokens=...)")
        out = None
        for start in range(0, len(ids), MAX_PREFILL_TOKENS):
            chunk = ids[start: start + MAX_PREFILL_TOKENS]
            last = start + MAX_PREFILL_TOKENS >= len(ids)
            out = self._forward_chunk(ws, chunk, readout if last else None)
        return out

    def logits_all(self, ids, adapter=None) -> np.ndarray:
        """Logits [len(ids), vocab] at every position of one prefill from an empty state (a working set of its own;
        `adapter`: the LoRA it runs under, (key, LoraWeights, scale)).

        The tokens run in passes of up to MAX_PREFILL_TOKENS (fewer when a pass's readout of all
        its rows would exceed one storage binding), each reading out every row.
        """
        if self.closed:
            raise ValidationError(MODEL_CLOSED)
        ids = np.asarray(ids).reshape(-1)
        if ids.size == 0:
            raise ValidationError("logits: no tokens. Fix: pass at least one token id")
        c = self.config
        if ids.size > self.context:
            raise ValidationError(f"logits: {ids.size} tokens exceed the model's context of {self.context}. Fix: "
                                  "score at most that many tokens per call, or load with a longer context=")
        per = max(1, min(MAX_PREFILL_TOKENS, self.max_binding // (c.vocab_size * 4)))
        ws = self.working_set(int(ids.size))
        if adapter is not None:
            ws.set_adapter(*adapter)
        try:
            return np.concatenate([self._forward_chunk(ws, list(ids[t: t + per]), (0, len(ids[t: t + per])))
                                   for t in range(0, ids.size, per)])
        finally:
            self._working_sets.discard(ws)
            ws.release()
            ws.binds.clear()
            ws.plans.clear()

    def hidden_rows(self, ids, last_only: bool = False) -> np.ndarray:
        """The final-normed hidden rows [len(ids), hidden] of one prefill from an empty state (the last row alone
        with `last_only`): what a decoder embedding pools (textgen/decoder_embed.py)."""
        if self.closed:
            raise ValidationError(MODEL_CLOSED)
        ids = [int(i) for i in np.asarray(ids).reshape(-1)]
        if not ids or len(ids) > self.context:
            raise ValidationError(f"embed: {len(ids)} tokens; this model takes 1 to {self.context} "
                                  "(load_model(context=...))")
        ws = self.working_set(len(ids))
        try:
            out = []
            for t in range(0, len(ids), MAX_PREFILL_TOKENS):
                chunk = ids[t: t + MAX_PREFILL_TOKENS]
                if last_only and t + MAX_PREFILL_TOKENS < len(ids):
                    self._forward_chunk(ws, chunk, None)
                    continue
                out.append(self._forward_chunk(ws, chunk, (len(chunk) - 1, 1) if last_only else (0, len(chunk)),
                                               hidden=True))
            return np.concatenate(out)
        finally:
            self._working_sets.discard(ws)
            ws.release()
            ws.binds.clear()
            ws.plans.clear()

    def _forward_chunk(self, ws: WorkingSet, ids: list, readout, hidden: bool = False) -> np.ndarray:
        """Logits [rows, vocab] of the readout rows of one pass (`hidden`: their final-normed hidden rows)."""
        import wgpu
        T = len(ids)
        ws.reserve(ws.length + T)
        tok = self.token_buffer(ids)
        enc = self.device.create_command_encoder()
        cpass = enc.begin_compute_pass()
        logits, _ = self.encode(cpass, ws, T, tok, readout, hidden)
        self.encode_advance(cpass, ws, T)
        cpass.end()
        rows = readout[1] if readout else 1
        width = self.config.hidden_size if hidden else self.config.vocab_size
        nbytes = rows * width * 4
        rb = self.device.create_buffer(size=nbytes, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        enc.copy_buffer_to_buffer(self.readout_buffer("hidden", logits) if hidden else logits, 0, rb, 0, nbytes)
        self.device.queue.submit([enc.finish()])
        ws.length += T
        rb.map_sync(wgpu.MapMode.READ)
        out = np.frombuffer(rb.read_mapped(), np.float32).reshape(rows, width).copy()
        rb.unmap()
        rb.destroy()
        return out
