"""Typed wrappers of the forward pass's shaders: each call records one step with named buffers.

The binding numbers of shaders/*.wgsl appear only in this module, each next to the
call that feeds its shader (and in the per-sequence bindings model/shader_code.py writes
for it); model/forward.py reads as named steps on top of these.

A matvec is matvec_decode.wgsl (one token: x read through a uniform binding with the
RMSNorm folded in) or matmul.wgsl (token groups in register tiles; the RMSNorm folded in on
the subgroup path, its weights at binding 14, else x already normalized), each composed
with a weight FORMAT snippet (shaders/formats/: the weights at binding 0, lavapipe's texture
formats also 15) and an EPILOGUE snippet (shaders/epilogues/) whose buffers sit at bindings 3 and up;
its epilogue(t, r, a, b) takes rows r and r + 1 of token t (R is even); a snippet that defines
epilogue4(t, r, a, b, c, d) instead takes rows r .. r + 3 a call (R a multiple of 4: rope_kv's whole KV texels).
"""

from __future__ import annotations

from math import ceil

import numpy as np

from ..kernel import channel_layout
from ..errors import ValidationError
from ..runtime.dispatch import Recorder
from .gpu_weights import TEXTURE_TEXELS, GpuMatrix, weight_bindings
from .shaders import rows_per_call
from .shader_code import decode_lane_code, four_rows, lane_code, lane_heads, matmul_params, matvec_rows, matvec_x

TILE_TOKENS = (16, 8, 4)  # tokens per matmul tile, the first that a group fills (Q4_1 gate/up at 128 tokens: 16 vs 8, 0.9x)
# With texture weights on CPU adapters, the most tokens a tile takes of x in uniform windows (x in storage, down-proj,
# keeps 16): on lavapipe 8 against 16, alternated, a 128-token prefill 0.94x the time, 48 tokens 0.92x, B=16 0.98x
CPU_WINDOW_TILE_TOKENS = 8
ATTENTION_TOKENS_FROM = 2  # tokens of one sequence from which attention_tokens.wgsl runs (CPU adapters)
TILE_ROWS = (8, 4, 2)  # rows per matmul tile, the first that splits the rows (8 vs 4: 7.1 vs 9.2 ms, Q4_1 gate/up, T=64)
WIDE_TILE_FROM = 16384  # on CPU adapters, matrices of this many rows (a vocabulary) take 16-row tiles where 16 divides them
CPU_TILE_ROWS = (32, 24, 16, 12)  # rows per matmul tile with texture formats on CPU adapters: the first that divides
CPU_TILE_ACC = 256  # the rows, keeps the tile within this many accumulators (rows x tokens) and leaves
CPU_TILE_MIN_WG = 5  # this many 8-thread workgroups (576 rows in 3 or 4 lost: README, measured facts)


def tile_tokens(tokens: int, per: int, most: int = TILE_TOKENS[0]) -> int:
    """Tokens per matmul tile: 16 (at most `most`) where the group holds that many, else 8, and 4 for few tokens."""
    return next((tb for tb in TILE_TOKENS if tb <= most and tokens > tb // 2 and per >= tb), TILE_TOKENS[-1])


class Kernels:
    """Records the dispatches of one forward pass of T tokens into a Recorder."""

    def __init__(self, gpu, rec: Recorder, T: int, scope: tuple, splits: int = 1):
        self.gpu, self.rec, self.T = gpu, rec, T
        self.config = gpu.config
        self.decode = T == 1
        self.scope = scope  # prefix of every bind-group key: what the pass's buffers depend on
        self.splits = splits  # runs of positions a decode attention is split into (decode_splits)
        self.seats: dict = {}  # this plan's per-sequence uniforms (_seqs): values -> buffer (model/batch_plan.py)

    # ---- the steps ------------------------------------------------------------------------
    def embed(self, table: GpuMatrix, tokens, out, binds: dict, scale: float | None = None) -> None:
        """out[t] = table[tokens[t]] * scale (default: the family's) for the T token ids of the tokens channel's oldest
        cell. `binds` must die with the tokens channel's buffer (a working set's store, or a plan's own).
        """
        c = self.config
        scale = (float(c.hidden_size ** 0.5) if c.family.embed_scale else 1.0) if scale is None else scale
        for buf, row0, nrows, fmt in table.chunks:
            params = {"NB": c.hidden_size // 32, "ROWS": nrows, "ROW0": row0, "VOCAB": c.vocab_size,
                      "SCALE": float(scale),
                      **channel_layout.shader_params()}
            k = self.gpu.lib.kernel("embed", params, {"FORMAT": f"formats/{fmt}"})
            groups = (ceil(self.T * c.hidden_size // 32 / 64), 1, 1)
            self.rec.dispatch(k, {**weight_bindings(buf), 1: tokens, 2: out}, groups, "embed",
                              self.scope + ("embed", row0, tokens), binds)

    def rmsnorm(self, x, weight, out, tokens: int, first: int, key: tuple, out_first: int = 0,
                add: bool = False) -> None:
        """out[out_first + t] = rmsnorm(x[first + t]) * weight for `tokens` rows (`add`: out += instead)."""
        c = self.config
        params = {"H4": c.hidden_size // 4, "EPS": float(c.rms_norm_eps), "ADD": add}
        # 8 lanes a row (rmsnorm_lanes.wgsl): the few rows of a decode batch no longer sit on one core (B=8:
        # 4.3 vs 6.4 ms a pass). For every row count, so that a row's value does not depend on how many share
        # its pass (tests/model/test_perplexity.py compares logits bit for bit)
        lanes = self.gpu.dev.subgroup_lanes > 0
        k = self.gpu.lib.kernel("rmsnorm_lanes" if lanes else "rmsnorm", params)
        self.rec.dispatch(k, {0: x, 1: weight, 2: out, 3: self.gpu.params(tokens, first, out_first)},
                          (tokens if lanes else ceil(tokens / 64), 1, 1), "rmsnorm", self.scope + key)

    def qkv_rope_kv(self, w: GpuMatrix, x, norm, *, q, ws, layer: int, rope, key: tuple,
                    binds: dict | None = None, seqs: list | None = None) -> None:
        """[q | k | v] = W x; RoPE on q and k; k and v written to `ws`'s pages at the sequence's positions, or with
        `seqs` ([(working set, first token, 1)] of a batched decode pass: fuses_rope_kv) each token to its own."""
        c = self.config
        pool = self.gpu.kv
        qr, kr = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
        kv, kv_params = self._kv(True, 4)
        params = {"QR": qr, "KR": kr, "HD": c.head_dim, "PAGE": pool.page, **kv_params}
        bufs = {3: q, 4: pool.keys[layer], 5: pool.values[layer], 7: rope}
        if seqs is None:
            bufs[6], kv["TOKEN_AT"] = ws.state, "blocks/token_at_one"
        else:
            bufs[8], bufs[6] = self._seqs(seqs)
            params["SEQS"], kv["TOKEN_AT"] = len(seqs), "blocks/token_at_rows"
        self._matvec(w, x, self.T, norm, "rope_kv", params, bufs, key, splits=(qr, kr), binds=binds, ep_snippets=kv)

    def fuses_rope_kv(self, seqs: list) -> bool:
        """Whether a batched pass over `seqs` writes RoPE'd q, k and v from the QKV matmul's epilogue (qkv_rope_kv
        with seqs): decode passes (a token a sequence) that do not take rope_attention_lanes (KV textures, or no
        8-lane subgroups). On lavapipe, a B=8 pass: 30 dispatches fewer, and no [q | k | v] rows stored and read."""
        one_each = all(first == i and n == 1 for i, (_, first, n) in enumerate(seqs))  # token t: sequence t's
        return one_each and not self._lanes_write_kv

    @property
    def _lanes_write_kv(self) -> bool:
        """Whether a decode pass's attention can write its own KV (rope_attention_lanes.wgsl): 8-lane subgroups and
        KV in buffers (a dispatch cannot read a texture it writes)."""
        return bool(self.gpu.dev.subgroup_lanes) and not self.gpu.kv.textures

    def attention_seqs(self, q, out, seqs: list, layer: int) -> None:
        """Attention of the sequences [(working set, first token, tokens)] of a batched pass over their pages."""
        self._attention(seqs, layer, q, out, window=self.config.window(layer))

    def _seqs(self, seqs: list) -> tuple:
        """(the uniform, the page tables binding) of a kernel over the sequences [(working set, first token,
        tokens)]: per sequence (tokens, first token, its table row's word offset, -).

        One sequence binds its own row (offset 0), so the shared uniform does not depend on which working
        set it is; several bind the whole table, and their uniform -- which names their rows -- is made for
        this plan and lives as long as its bind groups (not in the model's cache of uniforms, which every
        new composition would grow); model/batch_plan.py rewrites it when the rows change hands.
        """
        if len(seqs) == 1:
            ws, first, n = seqs[0]
            return self.gpu.params(n, first, 0, 0), ws.state
        values = tuple(v for ws, first, n in seqs for v in (n, first, ws.state[1] // 4, 0))
        buf = self.seats.get(values)
        if buf is None:
            import wgpu
            buf = self.seats[values] = self.gpu.device.create_buffer_with_data(
                data=np.array(values, np.uint32).tobytes(), usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST,
                label="seqs")
        return buf, self.gpu.kv.tables

    def _attention_params(self, window: int) -> dict:
        """The parameters every attention shader takes (shaders/blocks/attention_consts.wgsl, blocks/pages.wgsl)."""
        c = self.config
        return {"HD": c.head_dim, "QR": c.num_attention_heads * c.head_dim, "KR": c.num_key_value_heads * c.head_dim,
                "GROUP": c.num_attention_heads // c.num_key_value_heads, "SCALE": c.attention_scale, "WINDOW": window,
                "PAGE": self.gpu.kv.page}

    def _kv(self, write: bool, kc: int) -> tuple:
        """(snippets, params) binding the KV pool's layer at kc (K) and kc + 1 (V): read or written
        (shaders/blocks/kv_*.wgsl, as model/kv_pages.py stores the pages)."""
        store = self.gpu.kv.store
        key = "KV_WRITE" if write else "KV"
        return {key: store.write_snippet if write else store.read_snippet}, {"KC": kc, "VC": kc + 1, **store.params}

    def attention(self, q, ws, layer: int, out, key: tuple, tokens: int | None = None, first: int = 0,
                  binds: dict | None = None, window: int = 0, parts=None) -> None:
        """out = softmax(q k^T / sqrt(d)) v per head over the cached positions of working set `ws` (causal, GQA).

        For the `tokens` tokens (default: the pass's T) of one sequence starting at token `first` of the pass;
        a `window` > 0 limits each query to its last `window` positions (sliding-window layers).
        """
        c = self.config
        pool = self.gpu.kv
        n = self.T if tokens is None else tokens
        kv, kv_params = self._kv(False, 1)
        params = {**self._attention_params(window), **kv_params}
        if n >= ATTENTION_TOKENS_FROM and self.gpu.dev.subgroup_lanes:  # 8 tokens of a head share K/V loads
            k = self.gpu.lib.kernel("attention_lanes", {**params, "LANES": lane_code(c.head_dim // 4)}, kv)
            groups = (ceil(n / 8), c.num_attention_heads, 1)
        elif n >= ATTENTION_TOKENS_FROM and self.gpu.dev.is_cpu:  # an invocation per (token, head), no barrier
            k = self.gpu.lib.kernel("attention_tokens", {**params, "HEADS": c.num_attention_heads},
                                    {"ATTEND": "attend", **kv})
            groups = (ceil(n * c.num_attention_heads / 16), 1, 1)
        else:  # a workgroup per (head, token), its threads splitting the positions
            self._attention([(ws, first, n)], layer, q, out, self.scope + key + (n, first), binds, window,
                            parts=parts)
            return
        self.rec.dispatch(k, {0: q, 1: pool.keys[layer], 2: pool.values[layer], 3: ws.state, 4: out,
                              5: self.gpu.params(n, first)}, groups, "attention", self.scope + key + (n, first), binds)

    @property
    def folds_norm(self) -> bool:
        """Whether matvecs of several tokens fold the RMSNorm in (the subgroup matmul) instead of a norm dispatch."""
        return self.gpu.dev.subgroup_lanes > 0

    def rope_attention_seqs(self, qkv, q, rope, out, seqs: list, layer: int) -> None:
        """RoPE + KV write + attention for the sequences [(working set, first token, tokens)] of a batched pass.

        Where every sequence has one token and the adapter has 8-lane subgroups, one dispatch
        (rope_attention_lanes.wgsl): rotation, KV write and attention; else rope_kv_seqs.wgsl writes
        the rotated q and the KV cache, then attention reads them (always with KV textures: a dispatch
        cannot read a texture it writes). Every sequence in one dispatch:
        they share the pool's buffers and differ by their page-table rows.
        """
        window = self.config.window(layer)
        if not (self._lanes_write_kv and all(n == 1 for *_, n in seqs)):
            self.rope_kv_seqs(qkv, q, rope, seqs, layer)
            self._attention(seqs, layer, q, out, window=window)
            return
        c = self.config
        pool = self.gpu.kv
        params = self._attention_params(window)
        hg = lane_heads(params["GROUP"])
        uniform, tables = self._seqs(seqs)
        bufs = {0: qkv, 1: out, 2: uniform, 3: rope, 4: pool.keys[layer], 5: pool.values[layer], 6: tables}
        code, sink = self._lane_attend(hg, bufs, rope=True)
        k = self.gpu.lib.kernel("rope_attention_lanes", {**params, "HG": hg, "SEQS": len(seqs), "KC": 4, "VC": 5,
                                                         "ATTEND": code, **sink}, {"KV_RW": pool.store.rw_snippet})
        self.rec.dispatch(k, bufs, (c.num_attention_heads // hg, 1, len(seqs)), "attention")

    def _attention(self, seqs: list, layer: int, q, out, key: tuple | None = None, binds: dict | None = None,
                   window: int = 0, parts=None) -> None:
        """attention.wgsl (attention_decode_lanes.wgsl with 8-lane subgroups) over the sequences
        [(working set, first token, tokens)]; a decode pass planned with splits > 1 (and a `parts` buffer)
        splits each sequence's positions over that many workgroups, then merges them (flash-decoding)."""
        c = self.config
        pool = self.gpu.kv
        G = len(seqs)
        kv, kv_params = self._kv(False, 3)
        params = {**self._attention_params(window), "SEQS": G, **kv_params}
        heads = c.num_attention_heads
        tokens = max(n for *_, n in seqs)
        uniform, tables = self._seqs(seqs)
        bufs = {0: q, 1: out, 2: uniform, 3: pool.keys[layer], 4: pool.values[layer], 5: tables}
        S = self.splits if tokens == 1 and parts is not None else 1
        if self.gpu.dev.subgroup_lanes:  # lanes split the head, no barrier (attention_decode_lanes.wgsl)
            hg = lane_heads(params["GROUP"])
            split = {"SPLITS": S, "PARTS": ""}
            if S > 1:
                split["PARTS"] = "@group(0) @binding(6) var<storage, read_write> parts: array<vec4<f32>>;"
                bufs[6] = parts
            code, sink = self._lane_attend(hg, bufs, split=S > 1)
            k = self.gpu.lib.kernel("attention_decode_lanes", {**params, "HG": hg, **split, **sink, "ATTEND": code}, kv)
            heads //= hg
        else:
            bufs[6] = parts if S > 1 else self.gpu.zeros(4)  # (declared always; written with SPLITS > 1 only)
            k = self.gpu.lib.kernel("attention", {**params, "WG": self.attention_wg(batched=G > 1), "SPLITS": S},
                                    {"ATTEND_FN": "attend", **kv})
        self.rec.dispatch(k, bufs, (heads, tokens * S, G), "attention", key, binds)
        if S > 1:
            self._combine(parts, out, bufs[2], G, key, binds)

    def _lane_attend(self, hg: int, bufs: dict, rope: bool = False, split: bool = False) -> tuple:
        """(attend() of an 8-lane decode attention, {"SINK": its declaration}): K rows read 8 or 16 halves a load
        where the pool's layout allows, V rows touched a cache line at a time where they are in storage buffers,
        the touched words xored into the pool's sink word (bound at 7 in `bufs`; shader_code.decode_lane_code)."""
        store, hd = self.gpu.kv.store, self.config.head_dim
        octets, step = store.read_octets and hd % 8 == 0, store.touch_step
        if step:
            bufs[7] = store.touch_sink
        code = decode_lane_code(hd // 4, hg, rope, split, octets, step, octets and store.read_hex and hd % 16 == 0)
        return code, {"SINK": "@group(0) @binding(7) var<storage, read_write> sink: atomic<u32>;" * bool(step)}

    def _combine(self, parts, out, seqs_param, G: int, key: tuple | None, binds: dict | None) -> None:
        """attention_combine.wgsl: out = the merge of a split decode attention's partial softmaxes."""
        c = self.config
        heads = c.num_attention_heads
        k = self.gpu.lib.kernel("attention_combine", {"HD": c.head_dim, "HEADS": heads, "SPLITS": self.splits,
                                                      "SEQS": G})
        self.rec.dispatch(k, {0: parts, 1: out, 2: seqs_param}, (ceil(G * heads * c.head_dim // 4 / 64), 1, 1),
                          "attention", None if key is None else key + ("combine",), binds)

    def rope_kv_seqs(self, qkv, q, rope, seqs: list, layer: int) -> None:
        """RoPE + KV write for the sequences [(working set, first token, tokens)] of a pass, in one dispatch."""
        c = self.config
        pool = self.gpu.kv
        qr, kr = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
        kv, kv_params = self._kv(True, 4)
        k = self.gpu.lib.kernel("rope_kv_seqs", {
            "QR": qr, "KR": kr, "HD": c.head_dim, "SEQS": len(seqs), "PAGE": pool.page, **kv_params}, kv)
        uniform, tables = self._seqs(seqs)
        bufs = {0: qkv, 1: q, 2: rope, 3: uniform, 4: pool.keys[layer], 5: pool.values[layer], 6: tables}
        groups = ceil(max(n for *_, n in seqs) * (qr + 2 * kr) // 4 / 64)  # an invocation a row quad
        self.rec.dispatch(k, bufs, (groups, len(seqs), 1), "rope_kv")

    def qkv(self, w: GpuMatrix, x, out, key: tuple, norm=None) -> None:
        """out[t] = [q | k | v] = W x[t] for every token of the pass (before RoPE; `norm` folded in when decoding)."""
        c = self.config
        width = (c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim
        self._matvec(w, x, self.T, norm, "store", {"OUT_STRIDE": width}, {3: out}, key)

    def qk_prep(self, qkv, layer, key: tuple) -> None:
        """In place on [q | k | v] of every token: + bias (Qwen2), then RMSNorm per q and k head (Qwen3)."""
        c = self.config
        qr, kr = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
        k = self.gpu.lib.kernel("qk_prep", {"QR": qr, "KR": kr, "HD": c.head_dim, "BIAS": layer.qkv_bias is not None,
                                            "QK_NORM": layer.q_norm is not None, "EPS": float(c.rms_norm_eps)})
        unused = self.gpu.zeros(4)
        bufs = {0: qkv, 4: self.gpu.params(self.T)}
        for b, v in ((1, layer.qkv_bias), (2, layer.q_norm), (3, layer.k_norm)):
            bufs[b] = unused if v is None else v
        heads = (qr + 2 * kr) // c.head_dim
        self.rec.dispatch(k, bufs, (ceil(self.T * heads / 64), 1, 1), "qk_prep", self.scope + key)

    def matvec_residual(self, w: GpuMatrix, x, residual, key: tuple) -> None:
        """residual += W x."""
        self._matvec(w, x, self.T, None, "residual", {"OUT_STRIDE": self.config.hidden_size}, {3: residual}, key)

    def matvec_normed_residual(self, w: GpuMatrix, x, norm, residual, tmp, key: tuple, then=None) -> None:
        """residual += rmsnorm(W x) * norm (Gemma 3's sandwich norm), W x stored in `tmp` (`then()`: a LoRA step)."""
        self._matvec(w, x, self.T, None, "store", {"OUT_STRIDE": self.config.hidden_size}, {3: tmp}, key)
        if then is not None:
            then()
        self.rmsnorm(tmp, norm, out=residual, tokens=self.T, first=0, key=key + ("norm",), add=True)

    def gate_up_swiglu(self, w: GpuMatrix, x, norm, out, key: tuple) -> None:
        """out = act(gate x) * (up x), gate and up rows interleaved; act is the family's (silu or GELU-tanh)."""
        epilogue = {"silu": "swiglu", "gelu_tanh": "geglu"}[self.config.family.act]
        self._matvec(w, x, self.T, norm, epilogue, {"OUT_STRIDE": self.config.intermediate_size}, {3: out}, key)

    def logits(self, w: GpuMatrix, x, norm, out, rows: int, key: tuple, first: int = 0) -> None:
        """out[r] = W x[first + r] for the readout rows (one row may start anywhere; several start at 0)."""
        if first and rows > 1:
            raise ValidationError("internal: several logits rows start at row 0 of x")
        self._matvec(w, x, rows, norm, "store", {"OUT_STRIDE": self.config.vocab_size}, {3: out}, key, x_row=first)

    def advance(self, state, keep=None, tokens: int | None = None, binds: dict | None = None) -> None:
        """state[0] += tokens (default T) after the pass, or += min(count, T) taken from the `keep` channel."""
        if keep is None:
            n = self.T if tokens is None else tokens
            k = self.gpu.lib.kernel("advance", {})
            self.rec.dispatch(k, {0: state, 1: self.gpu.params(n)}, (1, 1, 1), "advance", self.scope + ("adv", n),
                              binds)
        else:
            k = self.gpu.lib.kernel("advance_accept", {"N": self.T, **channel_layout.shader_params()})
            self.rec.dispatch(k, {0: state, 1: keep}, (1, 1, 1), "advance_accept", self.scope + ("adv-keep", keep))

    def advance_seqs(self, seqs: list) -> None:
        """Every sequence's length += its tokens after a pass over the sequences [(working set, first token, tokens)]:
        one dispatch over their page-table rows (not one per sequence)."""
        uniform, tables = self._seqs(seqs)
        k = self.gpu.lib.kernel("advance_seqs", {"SEQS": len(seqs)})
        self.rec.dispatch(k, {0: tables, 1: uniform}, (ceil(len(seqs) / 64), 1, 1), "advance")

    # ---- matvec plumbing --------------------------------------------------------------------
    def _matvec(self, m: GpuMatrix, x, tokens: int, norm, epilogue: str, ep_params: dict, ep_bufs: dict,
                key: tuple, splits: tuple = (), binds: dict | None = None, x_row: int = 0,
                ep_snippets: dict | None = None) -> None:
        """y = W x (+ epilogue) for `tokens` rows of x (one token: at row x_row), over every row chunk of W.

        One token reads x through a uniform binding with the norm folded in; several
        tokens are split into groups whose x fits one uniform binding, the norm folded in
        where the adapter runs the subgroup matmul (folds_norm), else x already normalized.
        """
        gpu = self.gpu
        decode = tokens == 1
        if not decode and norm is not None and not self.folds_norm:
            raise ValidationError("internal: prefill matvecs take normalized x here")
        row_bytes = m.cols * 4
        x_storage = False
        if decode:
            groups, per, tb = [(0, 1)], 1, 1
        else:
            per = gpu.max_uniform // row_bytes  # tokens whose x fits one uniform binding
            # x through a storage binding (all tokens, one group) when a uniform one holds less than
            # a full tile: down-proj (1536 columns, 10 tokens) at 128 tokens took 0.77x the time that
            # way with 16-token tiles, gate/up (576 columns) 1.08x, so it keeps the uniform windows
            x_storage = per < TILE_TOKENS[0] and tokens > per
            if x_storage:
                per = tokens
            windows = gpu.dev.is_cpu and not x_storage and all(c[3].endswith("_tex") for c in m.chunks)
            tb = tile_tokens(tokens, per, CPU_WINDOW_TILE_TOKENS if windows else TILE_TOKENS[0])
            # whole tiles in every group but the last: no computed-and-dropped tokens; with x in storage, the
            # whole tiles in one group and the rest in a second
            per = per if per < tb or (x_storage and tokens % tb == 0) else per - per % tb
            align = gpu.dev.limits.get("min-uniform-buffer-offset-alignment", 256)
            while per > 1 and (per * row_bytes) % align and not x_storage:  # group offsets must be aligned bindings
                per -= 1
            groups = [(t0, min(per, tokens - t0)) for t0 in range(0, tokens, per)]
        role = next(r for r in key if isinstance(r, str))  # "qkv", "o", "gu", "down", "lm": benchmarks/kernels.py
        per_call = rows_per_call(f"epilogues/{epilogue}")
        for buf, row0, nrows, fmt in m.chunks:  # each chunk in its own format (a fused matrix may mix them)
            snippets = {"FORMAT": f"formats/{fmt}", "EPILOGUE": f"epilogues/{epilogue}", **(ep_snippets or {})}
            R, wg = self.rows_per_invocation(nrows, *splits, decode=decode, texture=fmt.endswith("_tex"),
                                             tokens=tokens, step=per_call, tile=tb)
            if row0 % per_call:  # (R itself is checked where the calls are written: shader_code.epilogue_calls)
                raise ValidationError(f"internal: epilogues/{epilogue} takes {per_call} rows a call; its chunk starts "
                                      f"at row {row0}")
            for t0, tn in groups:
                params = {"R": R, "ROWS": nrows, "ROW0": row0, "NB": m.cols // 32, "WG": wg, **ep_params}
                window = tn if decode or x_storage else per  # a uniform x binds a whole group's window (Scratch)
                bufs = {**weight_bindings(buf), 1: (x, (x_row + t0) * row_bytes, window * row_bytes), **ep_bufs}
                if decode:
                    name = "matvec_decode"
                    params.update(K4=m.cols // 4, NORM=norm is not None, EPS=float(self.config.rms_norm_eps),
                                  **matvec_rows(R, four_rows(fmt, R, nrows), per_call), **matvec_x(gpu.dev.subgroup_lanes))
                    bufs[2] = (norm if norm is not None else gpu.zeros(m.cols), 0, row_bytes)  # unused without NORM
                else:
                    name = "matmul"
                    xv4 = None if x_storage else per * m.cols // 4
                    fold = None if norm is None else (m.cols // 4, self.config.rms_norm_eps)
                    # the last group's tile fits its tokens (a 37-token prompt: 5 tokens in 8, not 16)
                    params.update(matmul_params(R, tile_tokens(tn, per, tb), gpu.dev.subgroup_lanes, xv4,
                                                four_rows(fmt, R, nrows), fold, per_call, TEXTURE_TEXELS.get(fmt, 0)))
                    bufs[2] = gpu.params(tn, t0)
                    if norm is not None:
                        bufs[14] = (norm, 0, row_bytes)
                k = gpu.lib.kernel(name, params, snippets)
                self.rec.dispatch(k, bufs, (ceil(nrows / R / wg), 1, 1), role, self.scope + key + (row0, t0), binds)

    def rows_per_invocation(self, rows: int, *multiples: int, decode: bool = False, texture: bool = False,
                            tokens: int = 0, step: int = 2, tile: int | None = None) -> tuple:
        """(R, WG) for a matvec of `rows` rows: enough workgroups to fill the cores, R dividing the splits.

        The matmul (several tokens) runs 8 threads a workgroup when 16 would leave under 12 workgroups.
        Decode on a CPU adapter takes up to 32 rows per invocation while that still leaves 6 or more
        workgroups; with the weights in textures, matrices that 8 rows in 16 threads split into few
        workgroups take 24 or 16 rows in 8 threads. On a CPU adapter the matmul's tile takes 16 rows for a
        vocabulary-sized matrix with weights in buffers (WIDE_TILE_FROM); with the weights in textures the
        first of CPU_TILE_ROWS that divides the rows, keeps rows x tile tokens within CPU_TILE_ACC and leaves
        CPU_TILE_MIN_WG or more 8-thread workgroups (the default model at 8 tile tokens: gate/up and the
        logits 32, QKV 24, o and down 12; at 16: 16 rows, o and down 12). Every choice was measured on
        lavapipe: README.md, "Measured facts about lavapipe", the matmul and matvec shapes.
        `step`: R is a multiple of the rows the epilogue takes a call; `tile`: the tile's tokens (default: what a
        pass of `tokens` tokens would take, tile_tokens).
        """
        def first_dividing(candidates, none=step):  # `step` where none divides (an odd row count: the last one clamps)
            return next((R for R in candidates if R % step == 0 and all(m % R == 0 for m in multiples + (rows,))),
                        none)

        wg = 32 if rows >= 8 * 32 * 16 else 16
        if decode and texture and rows // (8 * 16) < 12:
            R = first_dividing((24, 16))
            if R > step:  # else the general decode rule below
                return R, 8
        if not decode:  # the matmul's register tile; 8 threads a workgroup where 16 leave few workgroups
            if texture and self.gpu.dev.is_cpu and tokens > 1:  # measured on lavapipe only (tb: a tile's most tokens)
                tb = tile or tile_tokens(tokens, tokens)
                if (R := first_dividing([R for R in CPU_TILE_ROWS if R * tb <= CPU_TILE_ACC
                                         and rows // (R * 8) >= CPU_TILE_MIN_WG], None)) is not None:
                    return R, 8
            wide_tile = (16,) if rows >= WIDE_TILE_FROM and self.gpu.dev.is_cpu else ()  # measured on lavapipe only
            R = first_dividing(wide_tile + TILE_ROWS)
            return R, 16 if rows // (R * 16) >= 12 else 8
        wide = tuple(R for R in (32, 16) if self.gpu.dev.is_cpu and rows // (R * wg) >= 6)
        return first_dividing(wide + (8, 4, 2)), wg

    def attention_wg(self, batched: bool = False) -> int:
        """Threads per (head, token) in attention: few on CPU adapters (barriers are dear), more on GPUs.

        A dispatch over several sequences already has sequences x heads workgroups: there 8 threads
        each measured 21 vs 27 ms of attention per B=8 decode pass on lavapipe (16 threads), context 100.
        """
        want = (8 if batched else 16) if self.gpu.dev.is_cpu else 64
        shared = self.gpu.dev.limits.get("max-compute-workgroup-storage-size", 16384)
        while want > 4 and want * (self.config.head_dim + 2) * 4 > shared:
            want //= 2
        return want
