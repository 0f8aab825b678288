"""The transformer forward pass on the GPU: weights, working sets, and the encoded dispatches.

encode() records one pass into an open compute pass and reads top to bottom like
llama2.c's forward(): embed the tokens (taken from a channel on the device); per
layer: QKV matvec with the RMSNorm folded in and RoPE + KV-cache write as its
epilogue, attention, O-projection added into the residual stream, gate/up matvec
with the norm folded in and SwiGLU as its epilogue, down-projection added into the
residual stream; then the final norm folded into the logits matvec. Decode (one
token) is 5 dispatches per layer; prefill adds two RMSNorm dispatches per layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import ceil, sqrt

import numpy as np

from ..errors import ModelError, ValidationError
from .config import LlamaConfig
from .gpu_weights import GpuMatrix, HostMatrix, interleave_rows, pack_dense, pack_ggml, stack_rows, upload
from .reference import rope_tables
from .shaders import ShaderLibrary

CHANNEL_HEADER_WORDS = 8
PREFILL_TB = 16  # tokens per weight-block decode in prefill (4: 31, 8: 36, 16: 39 tokens/s at 128 tokens on lavapipe)
MAX_PREFILL_TOKENS = 256  # tokens per pass; longer prompts take several passes


@dataclass
class LayerWeights:
    """One decoder layer in GPU layouts (host side)."""

    qkv: HostMatrix  # rows [q | k | v]; q and k rows in adjacent-pair (llama.cpp) order
    o: HostMatrix
    gate_up: HostMatrix  # rows interleaved gate0, up0, gate1, up1, ...
    down: HostMatrix
    input_norm: np.ndarray
    post_norm: np.ndarray


@dataclass
class ModelWeights:
    """All weights of a model in GPU layouts (host side), ready to upload."""

    config: LlamaConfig
    embed: HostMatrix
    layers: list
    final_norm: np.ndarray
    lm_head: HostMatrix | None  # None: tied to embed


def pair_order(rows: int, head_dim: int) -> np.ndarray:
    """Row order putting rotate-half partners (i, i + hd/2) of every head next to each other."""
    half = head_dim // 2
    heads = rows // head_dim
    i = np.arange(half)
    within = np.stack([i, i + half], axis=1).reshape(-1)
    return (np.arange(heads)[:, None] * head_dim + within[None, :]).reshape(-1)


def _check_config(c: LlamaConfig) -> None:
    for name, v in (("hidden_size", c.hidden_size), ("intermediate_size", c.intermediate_size)):
        if v % 32:
            raise ModelError(f"config {name}={v} is not a multiple of 32. Fix: piegpu's GPU path needs "
                             "hidden_size and intermediate_size to be multiples of 32")
    if c.head_dim % 4:
        raise ModelError(f"config head_dim={c.head_dim} is not a multiple of 4 (the GPU path reads vec4)")


def _assemble(c: LlamaConfig, matrix, vector, has_lm_head: bool) -> ModelWeights:
    """ModelWeights from matrix(name, row order or None) -> HostMatrix and vector(name) -> f32 array."""
    _check_config(c)
    po_q = pair_order(c.num_attention_heads * c.head_dim, c.head_dim)
    po_k = pair_order(c.num_key_value_heads * c.head_dim, c.head_dim)
    layers = []
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        layers.append(LayerWeights(
            qkv=stack_rows([matrix(p + "self_attn.q_proj.weight", po_q), matrix(p + "self_attn.k_proj.weight", po_k),
                            matrix(p + "self_attn.v_proj.weight", None)], f"layer {i} qkv"),
            o=matrix(p + "self_attn.o_proj.weight", None),
            gate_up=interleave_rows(matrix(p + "mlp.gate_proj.weight", None), matrix(p + "mlp.up_proj.weight", None),
                                    f"layer {i} mlp"),
            down=matrix(p + "mlp.down_proj.weight", None),
            input_norm=vector(p + "input_layernorm.weight"),
            post_norm=vector(p + "post_attention_layernorm.weight")))
    lm = matrix("lm_head.weight", None) if has_lm_head and not c.tie_word_embeddings else None
    return ModelWeights(c, matrix("model.embed_tokens.weight", None), layers, vector("model.norm.weight"), lm)


def weights_from_tensors(config: LlamaConfig, tensors: dict, fmt: str = "f32") -> ModelWeights:
    """GPU layouts from HF-named float tensors (f32 or f16 storage as `fmt`)."""
    def matrix(name, order):
        w = np.asarray(tensors[name], dtype=np.float32)
        return pack_dense(w if order is None else w[order], fmt, name)
    return _assemble(config, matrix, lambda name: np.asarray(tensors[name], np.float32), True)


def weights_from_gguf(config: LlamaConfig, raw: dict) -> ModelWeights:
    """GPU layouts straight from GGUF blocks (read_gguf_raw): F32/F16/Q8_0/Q4_1 bit-identical.

    Other GGUF types (K-quants, ...) are dequantized with the gguf package and stored
    as f16 on the GPU.
    """
    def matrix(name, order):
        t = raw[name]
        data = t.data if order is None else t.data[order]
        if t.ggml_type in ("F32", "F16", "Q8_0", "Q4_1"):
            return pack_ggml(t.ggml_type, data, t.shape[-1], name)
        import gguf
        from gguf.quants import dequantize
        w = dequantize(np.ascontiguousarray(data), getattr(gguf.GGMLQuantizationType, t.ggml_type))
        return pack_dense(w.reshape(data.shape[0], -1), "f16", name)

    def vector(name):
        t = raw[name]
        if t.ggml_type == "F32":
            return t.data.view(np.float32).reshape(-1).copy()
        return t.data.view(np.float16).reshape(-1).astype(np.float32)
    return _assemble(config, matrix, vector, "lm_head.weight" in raw)


@dataclass
class WorkingSet:
    """The KV state of one sequence on the device: per-layer K and V caches and its length."""

    model: "GpuModel"
    max_tokens: int
    keys: list
    values: list
    state: object  # u32 buffer: [length, max_tokens, 0, 0] (kernels read both: no size is compiled in)
    length: int = 0  # the host's view of the length (advanced as passes are submitted)
    _binds: dict = field(default_factory=dict)
    _plans: dict = field(default_factory=dict)

    def reset(self) -> None:
        """Forget every position (the caches are overwritten as the sequence regrows)."""
        self.model.device.queue.write_buffer(self.state, 0, np.zeros(1, np.uint32).tobytes())
        self.length = 0

    def note_length(self, n: int) -> None:
        """Tell the host the device's length (after an accepting pass); nothing is written."""
        if not 0 <= n <= self.max_tokens:
            raise ValidationError(f"note_length({n}): outside 0..{self.max_tokens}")
        self.length = n

    def set_length(self, n: int) -> None:
        """Truncate the sequence to its first n positions (device and host views)."""
        if not 0 <= n <= self.length:
            raise ValidationError(f"set_length({n}): the working set holds {self.length} positions")
        self.model.device.queue.write_buffer(self.state, 0, np.array([n], np.uint32).tobytes())
        self.length = n


def replay(cpass, plan: list) -> None:
    """Record a prepared list of (pipeline, bind group, workgroups, role) into a compute pass."""
    last = None
    for pipeline, bind_group, groups, _ in plan:
        if pipeline is not last:
            cpass.set_pipeline(pipeline)
            last = pipeline
        cpass.set_bind_group(0, bind_group)
        cpass.dispatch_workgroups(*groups)


class _Scratch:
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
        # bytes) from the group's first token, so buffers read that way get one window of slack.
        pad = model.max_uniform // 4 if T > 1 else 0
        self.h = buf(T * c.hidden_size, "hidden")
        self.hn = buf(max(T, rows) * c.hidden_size + pad, "hidden-normed")
        self.q = buf(T * qr, "q")
        self.o = buf(T * qr + pad, "attn-out")
        self.act = buf(T * c.intermediate_size + pad, "mlp-act")
        self.logits = buf(rows * c.vocab_size, "logits")


class GpuModel:
    """A model's weights on the device and the kernels of its forward pass."""

    def __init__(self, weights: ModelWeights, device=None, max_binding: int | None = None):
        from ..gpu.device import get_device
        self.dev = device or get_device()
        self.device = self.dev.device
        self.config = c = weights.config
        self.lib = ShaderLibrary(self.device)
        # Matrices bigger than one binding are split into row chunks (max_binding lowers it for tests).
        self.max_binding = min(max_binding or 1 << 62, self.dev.limits.get("max-storage-buffer-binding-size", 128 << 20))
        self.max_uniform = self.dev.limits.get("max-uniform-buffer-binding-size", 65536)
        up = lambda m, label: upload(self.device, m, self.max_binding, label)  # noqa: E731
        self.embed = up(weights.embed, "embed")
        self.lm_head = self.embed if weights.lm_head is None else up(weights.lm_head, "lm_head")
        self.layers = []
        for i, lw in enumerate(weights.layers):
            self.layers.append({
                "qkv": up(lw.qkv, f"l{i}.qkv"), "o": up(lw.o, f"l{i}.o"),
                "gate_up": up(lw.gate_up, f"l{i}.gate_up"), "down": up(lw.down, f"l{i}.down"),
                "input_norm": self._vec(lw.input_norm, f"l{i}.in_norm"),
                "post_norm": self._vec(lw.post_norm, f"l{i}.post_norm")})
        self.final_norm = self._vec(weights.final_norm, "final_norm")
        self.max_positions = c.max_position_embeddings
        widest = max(c.hidden_size, c.intermediate_size) * 4
        if widest > self.max_uniform:
            raise ModelError(f"hidden/intermediate size {widest // 4} needs {widest}-byte uniform bindings but this "
                             f"adapter allows {self.max_uniform}. Fix: a model with sizes up to "
                             f"{self.max_uniform // 4}, or an adapter with a larger max-uniform-buffer-binding-size")
        self._rope = None
        self._scratch: dict = {}
        self._token_bufs: dict = {}
        self._param_bufs: dict = {}
        self._zero_vecs: dict = {}
        self._binds: dict = {}
        self.weight_bytes = sum(m.nbytes for L in self.layers for k, m in L.items() if isinstance(m, GpuMatrix))
        self.weight_bytes += self.embed.nbytes + (0 if self.lm_head is self.embed else self.lm_head.nbytes)

    # ---- buffers --------------------------------------------------------------------------
    def _vec(self, v: np.ndarray, label: str):
        import wgpu
        # UNIFORM too: the decode matvec reads norm weights through a uniform binding (scalar loads)
        return self.device.create_buffer_with_data(data=np.ascontiguousarray(v, np.float32).tobytes(),
                                                   usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.UNIFORM,
                                                   label=label)

    def _params(self, *values: int):
        """A 16-byte uniform buffer holding up to four u32 values (one per distinct tuple, shared).

        Token counts and offsets reach the prefill kernels this way instead of as shader
        constants, so one compiled kernel serves every prompt length (lavapipe compiles a
        kernel on its first dispatch: 0.1-0.4 s each).
        """
        import wgpu
        b = self._param_bufs.get(values)
        if b is None:
            data = np.zeros(4, np.uint32)
            data[:len(values)] = values
            b = self._param_bufs[values] = self.device.create_buffer_with_data(
                data=data.tobytes(), usage=wgpu.BufferUsage.UNIFORM, label=f"params{list(values)}")
        return b

    def _zeros(self, n: int):
        """A zero vector of n floats (the norm binding of matvecs without a norm)."""
        z = self._zero_vecs.get(n)
        if z is None:
            z = self._zero_vecs[n] = self._vec(np.zeros(n, np.float32), f"zeros{n}")
        return z

    def rope_table(self, positions: int):
        """cos/sin per (position, pair) for positions below `positions` (shared by working sets)."""
        if self._rope is None or self._rope[1] < positions:
            c = self.config
            cos, sin = rope_tables(np.arange(positions), c.head_dim, c.rope_theta, np.float32)
            half = c.head_dim // 2
            table = np.stack([cos[:, :half], sin[:, :half]], axis=-1)
            self._rope = (self._vec(table, "rope"), positions)
        return self._rope[0]

    def working_set(self, max_tokens: int | None = None) -> WorkingSet:
        """A fresh KV state for one sequence of up to max_tokens positions."""
        import wgpu
        c = self.config
        n = int(max_tokens or min(c.max_position_embeddings, 4096))
        if not 1 <= n <= c.max_position_embeddings:
            raise ValidationError(f"working_set(max_tokens={n}): must be 1..{c.max_position_embeddings} "
                                  "(the model's max_position_embeddings)")
        kr = c.num_key_value_heads * c.head_dim
        limit = self.dev.limits.get("max-storage-buffer-binding-size", 128 << 20)
        if n * kr * 4 > limit:
            raise ValidationError(f"working_set(max_tokens={n}): one layer's KV cache would exceed the "
                                  f"{limit}-byte binding limit. Fix: use at most {limit // (kr * 4)} tokens")
        use = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        keys = [self.device.create_buffer(size=n * kr * 4, usage=use, label=f"k{i}") for i in range(len(self.layers))]
        vals = [self.device.create_buffer(size=n * kr * 4, usage=use, label=f"v{i}") for i in range(len(self.layers))]
        state = self.device.create_buffer_with_data(data=np.array([0, n, 0, 0], np.uint32).tobytes(), usage=use,
                                                    label="ws-state")
        self.rope_table(n)
        return WorkingSet(self, n, keys, vals, state)

    def scratch(self, T: int, rows: int) -> _Scratch:
        """Activation buffers for passes of T tokens with `rows` readout rows (cached)."""
        s = self._scratch.get((T, rows))
        if s is None:
            s = self._scratch[(T, rows)] = _Scratch(self, T, rows)
        return s

    # ---- kernels -------------------------------------------------------------------------
    def _rows_per_invocation(self, rows: int, *multiples: int, decode: bool = False) -> tuple:
        """(R, WG) for a matvec of `rows` rows: enough workgroups to fill the cores, R dividing the splits.

        Decode on a CPU adapter takes up to 32 rows per invocation while that still leaves 6
        or more workgroups: on lavapipe, where more independent weight loads are in flight
        per lane, 16 rows were 10-15% faster than 8 on gate/up and the logits, and 32 rows
        another 18% on the logits (49152 rows) and ~3% on gate/up.
        """
        wg = 32 if rows >= 8 * 32 * 16 else 16
        wide = tuple(R for R in (32, 16) if decode and self.dev.is_cpu and rows // (R * wg) >= 6)
        for R in wide + (8, 4, 2):
            if all(m % R == 0 for m in multiples + (rows,)):
                break
        else:
            R = 2
        return R, wg

    def _matvec(self, plan: list, m: GpuMatrix, x, T: int, epilogue: str, ep_params: dict, ep_bufs: dict,
                norm=None, cache_key=None, splits=()) -> int:
        """Record y = W x (+ epilogue) over every row chunk into `plan`; returns the dispatch count.

        One token reads x through a uniform binding with the norm folded in
        (matvec_decode); several tokens are split into groups whose x fits one uniform
        binding (matvec_prefill), x already normalized.
        """
        c = self.config
        nb = m.cols // 32
        row_bytes = m.cols * 4
        count = 0
        if T == 1:
            groups, per = [(0, 1)], 1
        else:
            per = self.max_uniform // row_bytes
            per = per if per < PREFILL_TB else per - per % PREFILL_TB
            align = self.dev.limits.get("min-uniform-buffer-offset-alignment", 256)
            while per > 1 and (per * row_bytes) % align:  # group offsets must be aligned bindings
                per -= 1
            groups = [(t0, min(per, T - t0)) for t0 in range(0, T, per)]
        for buf, row0, nrows in m.chunks:
            R, wg = self._rows_per_invocation(nrows, *splits, decode=T == 1)
            for t0, tn in groups:
                params = {"R": R, "ROWS": nrows, "ROW0": row0, "NB": nb, "WG": wg, **ep_params}
                window = tn if T == 1 else per  # prefill binds a whole group's window (see _Scratch)
                bufs = {0: buf, 1: (x, t0 * row_bytes, window * row_bytes), **ep_bufs}
                if T == 1:
                    name = "matvec_decode"
                    params.update(K4=m.cols // 4, NORM=norm is not None, EPS=float(c.rms_norm_eps))
                    nb_ = norm if norm is not None else self._zeros(m.cols)  # unused when NORM is false
                    bufs[2] = (nb_, 0, m.cols * 4)
                else:
                    if norm is not None:
                        raise ValidationError("internal: prefill matvecs take normalized x")
                    name = "matvec_prefill"
                    # two block sizes, so a short group does not compute 16 token slots
                    full = min(PREFILL_TB, per)
                    params.update(TB=full if tn >= full else min(4, full), XV4=per * m.cols // 4)
                    bufs[2] = self._params(tn, t0)
                k = self.lib.kernel(name, params, {"FORMAT": f"formats/{m.fmt}",
                                                   "EPILOGUE": f"epilogues/{epilogue}"})
                bg = self._bind(cache_key + (row0, t0) if cache_key else None, k, bufs)
                role = next((r for r in reversed(cache_key or ()) if isinstance(r, str)), "matvec")
                plan.append((k.pipeline, bg, (ceil(nrows / R / wg), 1, 1), role))
                count += 1
        return count

    def _bind(self, key, kernel, bufs):
        """A bind group, cached in the dict key[0] (the working set's, so it dies with it) under key[1:]."""
        if key is None:
            return kernel.bind(self.device, bufs)
        store, k = key[0], (id(kernel),) + tuple(key[1:])
        bg = store.get(k)
        if bg is None:
            bg = store[k] = kernel.bind(self.device, bufs)
        return bg

    def _simple(self, plan: list, name: str, params: dict, snippets: dict | None, bufs: dict, groups: tuple,
                key=None) -> int:
        k = self.lib.kernel(name, params, snippets)
        plan.append((k.pipeline, self._bind(key, k, bufs), groups, name))
        return 1

    # ---- the forward pass -----------------------------------------------------------------
    def encode(self, cpass, ws: WorkingSet, T: int, tokens, readout: tuple = None) -> tuple:
        """Record one forward pass of T tokens into `cpass`; returns (logits buffer, dispatch count).

        `tokens` is a channel buffer whose oldest cell holds the T token ids (read on the
        device); `readout` = (first, count) token rows whose logits are computed
        (default: the last token). The caller advances ws.state after the pass. The list
        of dispatches is built once per (working set, shape, tokens buffer) and replayed.
        """
        logits, plan = self.dispatch_plan(ws, T, tokens, readout)
        replay(cpass, plan)
        return logits, len(plan)

    def dispatch_plan(self, ws: WorkingSet, T: int, tokens, readout: tuple = None) -> tuple:
        """(logits buffer, [(pipeline, bind group, workgroups, role), ...]) of one forward pass (cached)."""
        key = (T, readout, tokens)
        hit = ws._plans.get(key)
        if hit is None:
            hit = ws._plans[key] = self._plan(ws, T, tokens, readout)
        return hit

    def _plan(self, ws: WorkingSet, T: int, tokens, readout) -> tuple:
        c = self.config
        first, rows = readout if readout is not None else (T - 1, 1)
        if not (0 <= first and rows >= 1 and first + rows <= T):
            raise ValidationError(f"readout rows [{first}, {first + rows}) outside the pass's {T} tokens")
        s = self.scratch(T, rows)
        H, I = c.hidden_size, c.intermediate_size
        QR, KR, HD = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim, c.head_dim
        wsid = ws._binds  # bind groups of this pass live (and die) with the working set
        n = 0
        plan: list = []  # (pipeline, bind group, workgroups, role) per dispatch
        # embed: token ids from the channel, on the device
        for buf, row0, nrows in self.embed.chunks:
            n += self._simple(plan, "embed", {"NB": H // 32, "ROWS": nrows, "ROW0": row0, "VOCAB": c.vocab_size},
                              {"FORMAT": f"formats/{self.embed.fmt}"}, {0: buf, 1: tokens, 2: s.h},
                              (ceil(T * H // 32 / 64), 1, 1), key=(ws._binds, "embed", T, rows, row0, tokens))
        rope = self.rope_table(ws.max_tokens)
        decode = T == 1
        for i, L in enumerate(self.layers):
            key = (wsid, T, rows, i)
            x_attn = s.h
            if not decode:
                n += self._rmsnorm(plan, s.h, L["input_norm"], s.hn, T, 0, key + ("n1",))
                x_attn = s.hn
            n += self._matvec(plan, L["qkv"], x_attn, T, "rope_kv",
                              {"QR": QR, "KR": KR, "HD": HD},
                              {3: s.q, 4: ws.keys[i], 5: ws.values[i], 6: ws.state, 7: rope},
                              norm=L["input_norm"] if decode else None, cache_key=key + ("qkv",), splits=(QR, KR))
            n += self._simple(plan, "attention",
                              {"WG": self.attention_wg(), "HD": HD, "QR": QR, "KR": KR,
                               "GROUP": c.num_attention_heads // c.num_key_value_heads,
                               "SCALE": 1.0 / sqrt(HD)}, None,
                              {0: s.q, 1: ws.keys[i], 2: ws.values[i], 3: ws.state, 4: s.o},
                              (c.num_attention_heads, T, 1), key=key + ("attn",))
            n += self._matvec(plan, L["o"], s.o, T, "residual", {"OUT_STRIDE": H}, {3: s.h},
                              cache_key=key + ("o",))
            x_mlp = s.h
            if not decode:
                n += self._rmsnorm(plan, s.h, L["post_norm"], s.hn, T, 0, key + ("n2",))
                x_mlp = s.hn
            n += self._matvec(plan, L["gate_up"], x_mlp, T, "swiglu", {"OUT_STRIDE": I}, {3: s.act},
                              norm=L["post_norm"] if decode else None, cache_key=key + ("gu",))
            n += self._matvec(plan, L["down"], s.act, T, "residual", {"OUT_STRIDE": H}, {3: s.h},
                              cache_key=key + ("down",))
        # final norm + logits for the readout rows
        if decode:
            n += self._matvec(plan, self.lm_head, s.h, 1, "store", {"OUT_STRIDE": c.vocab_size}, {3: s.logits},
                              norm=self.final_norm, cache_key=(wsid, T, rows, "lm"))
        else:
            n += self._rmsnorm(plan, s.h, self.final_norm, s.hn, rows, first, (wsid, T, "nf", first, rows))
            n += self._matvec(plan, self.lm_head, s.hn, rows, "store", {"OUT_STRIDE": c.vocab_size},
                              {3: s.logits}, cache_key=(wsid, T, "lm", first, rows))
        return s.logits, plan

    def attention_wg(self) -> int:
        """Threads per (head, token) in attention: few on CPU adapters (barriers are dear), more on GPUs."""
        want = 16 if self.dev.is_cpu else 64
        shared = self.dev.limits.get("max-compute-workgroup-storage-size", 16384)
        while want > 4 and want * (self.config.head_dim + 2) * 4 > shared:
            want //= 2
        return want

    def _rmsnorm(self, plan, x, w, out, T: int, first: int, key) -> int:
        c = self.config
        return self._simple(plan, "rmsnorm", {"H4": c.hidden_size // 4, "EPS": float(c.rms_norm_eps)}, None,
                            {0: x, 1: w, 2: out, 3: self._params(T, first)}, (ceil(T / 64), 1, 1), key=key)

    def encode_advance(self, cpass, ws: WorkingSet, T: int, keep=None) -> int:
        """Record state[0] += T after a pass, or += the count in channel buffer `keep` (at most T)."""
        key = ("advance", T, keep)
        plan = ws._plans.get(key)
        if plan is None:
            plan = ws._plans[key] = []
            if keep is None:
                self._simple(plan, "advance", {}, None, {0: ws.state, 1: self._params(T)}, (1, 1, 1),
                             key=(ws._binds, "adv", T))
            else:
                self._simple(plan, "advance_accept", {"N": T}, None, {0: ws.state, 1: keep}, (1, 1, 1),
                             key=(ws._binds, "adv-keep", T, keep))
        replay(cpass, plan)
        return len(plan)

    # ---- host-driven forward (tests, host-side sampling, benchmarks) ------------------------
    def token_buffer(self, ids) -> object:
        """A buffer in channel layout whose oldest cell holds `ids` (reused per token count)."""
        import wgpu
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.config.vocab_size):
            raise ValidationError(f"token ids must be in [0, {self.config.vocab_size}), got {ids.min()}..{ids.max()}")
        words = np.zeros(CHANNEL_HEADER_WORDS + ids.size, np.uint32)
        words[:4] = (0, 1, 1, ids.size)  # head 0, tail 1, ring of 1 cell of ids.size words
        words[CHANNEL_HEADER_WORDS:] = ids.astype(np.uint32)
        buf = self._token_bufs.get(ids.size)
        if buf is None:
            buf = self._token_bufs[ids.size] = self.device.create_buffer(
                size=words.nbytes, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST, label="tokens")
        self.device.queue.write_buffer(buf, 0, words.tobytes())
        return buf

    def forward(self, ws: WorkingSet, ids, readout: tuple | None = None) -> np.ndarray:
        """Run the tokens through the model (one submit per chunk); logits [rows, vocab] of the last chunk."""
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

    def _forward_chunk(self, ws: WorkingSet, ids: list, readout) -> np.ndarray:
        import wgpu
        T = len(ids)
        tok = self.token_buffer(ids)
        enc = self.device.create_command_encoder()
        cpass = enc.begin_compute_pass()
        logits, _ = self.encode(cpass, ws, T, tok, readout)
        self.encode_advance(cpass, ws, T)
        cpass.end()
        rows = readout[1] if readout else 1
        nbytes = rows * self.config.vocab_size * 4
        rb = self.device.create_buffer(size=nbytes, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        enc.copy_buffer_to_buffer(logits, 0, rb, 0, nbytes)
        self.device.queue.submit([enc.finish()])
        ws.length += T
        rb.map_sync(wgpu.MapMode.READ)
        out = np.frombuffer(rb.read_mapped(), np.float32).reshape(rows, self.config.vocab_size).copy()
        rb.unmap()
        rb.destroy()
        return out
