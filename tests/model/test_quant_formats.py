"""Every GGML type read natively by the WGSL format snippets (shaders/formats/).

Random blocks in the GGUF layout (random bytes, finite random f16/f32 scales) are
dequantized on the device through the real shaders -- embed.wgsl's block_decode, the
decode matvec's block_dot, the prefill matmul's block_q/block_dm -- and compared with
gguf.quants.dequantize: bit for bit for the dequantized values, within float tolerance
for the dot products (numpy on the dequantized weights). The texture layouts of Q4_1 and
Q8_0 (lavapipe's, gpu_weights.TEXTURE_FORMATS) run the same checks.
"""

from __future__ import annotations

from math import ceil

import numpy as np
import pytest

from piegpu.kernel import channel_layout
from piegpu.model.gpu_weights import (GGML_FORMATS, TEXTURE_FORMATS, TEXTURE_TEXELS, GpuMatrix, dequantize, pack_ggml,
                                      upload, weight_bindings)
from piegpu.model.shader_code import four_rows, matmul_params, matvec_rows, matvec_x
from piegpu.model.shaders import ShaderLibrary

# f16 fields of each block type: byte offsets of the scales and mins (the rest is random bits)
F16_FIELDS = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,),
              "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}
TYPES = sorted(GGML_FORMATS)
TEXTURE_TYPES = sorted(t for t, (fmt, _, _) in GGML_FORMATS.items() if fmt in TEXTURE_FORMATS)


def layouts(gtype: str) -> tuple:
    """(False,) or (False, True): the storage layout, and the texture layout where the type has one."""
    return (False, True) if gtype in TEXTURE_TYPES else (False,)


def random_rows(gtype: str, rows: int, cols: int, rng) -> np.ndarray:
    """uint8 [rows, row_bytes]: random GGUF blocks of `gtype` with finite scales."""
    _, block_bytes, block_elems = GGML_FORMATS[gtype]
    nb = rows * cols // block_elems
    if gtype == "F32":
        return rng.standard_normal((rows, cols)).astype(np.float32).view(np.uint8)
    if gtype == "F16":
        return rng.standard_normal((rows, cols)).astype(np.float16).view(np.uint8)
    if gtype == "BF16":  # random finite bfloat16: the high halves of random f32
        f = (rng.standard_normal((rows, cols)) * 10.0 ** rng.integers(-3, 3, (rows, cols))).astype(np.float32)
        return (f.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    blocks = rng.integers(0, 256, (nb, block_bytes), dtype=np.uint8)
    for off in F16_FIELDS[gtype]:
        scale = (rng.standard_normal(nb) * 10.0 ** rng.integers(-4, 1, nb)).astype(np.float16)
        blocks[:, off: off + 2] = scale.view(np.uint8).reshape(nb, 2)
    return blocks.reshape(rows, -1)


def shape_for(gtype: str) -> tuple:
    """(rows, cols): odd block counts per row, so 2-byte-aligned blocks start mid-word."""
    return (24, 768) if GGML_FORMATS[gtype][2] == 256 else (24, 96)


def _read(dev, buf, n: int) -> np.ndarray:
    return np.frombuffer(dev.queue.read_buffer(buf), np.float32)[:n].copy()


def _run(dev, kernel, bufs: dict, groups: int) -> None:
    enc = dev.create_command_encoder()
    p = enc.begin_compute_pass()
    p.set_pipeline(kernel.pipeline)
    p.set_bind_group(0, kernel.bind(dev, bufs))
    p.dispatch_workgroups(groups, 1, 1)
    p.end()
    dev.queue.submit([enc.finish()])


def _out(dev, n: int):
    import wgpu
    return dev.create_buffer(size=n * 4, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)


def _data(dev, arr: np.ndarray, uniform: bool = False):
    import wgpu
    use = wgpu.BufferUsage.UNIFORM if uniform else wgpu.BufferUsage.STORAGE
    return dev.create_buffer_with_data(data=np.ascontiguousarray(arr).tobytes(), usage=use)


def device_embed(gpu, m: GpuMatrix) -> np.ndarray:
    """Every row of m through embed.wgsl (rows as token ids, SCALE 1): the values block_decode gives."""
    dev = gpu.device
    lib = ShaderLibrary(dev)
    T = m.rows
    chan = np.concatenate([channel_layout.header(0, 1, 1, T), np.arange(T, dtype=np.uint32)])
    chan_buf, out = _data(dev, chan), _out(dev, T * m.cols)
    for buf, row0, nrows, fmt in m.chunks:
        params = {"NB": m.cols // 32, "ROWS": nrows, "ROW0": row0, "VOCAB": m.rows, "SCALE": 1.0,
                  **channel_layout.shader_params()}
        k = lib.kernel("embed", params, {"FORMAT": f"formats/{fmt}"})
        _run(dev, k, {**weight_bindings(buf), 1: chan_buf, 2: out}, ceil(T * m.cols // 32 / 64))
    return _read(dev, out, T * m.cols).reshape(T, m.cols)


def device_matvec(gpu, m: GpuMatrix, x: np.ndarray, R: int = 4, lanes: int = 0, norm=None) -> np.ndarray:
    """W x through matvec_decode.wgsl with the store epilogue, R rows per invocation (the texture
    formats: scales fetched 4 rows at once where R allows, else row by row); lanes > 0: the subgroup
    form of x (matvec_x); norm: RMSNorm weights folded in (eps 1e-5)."""
    dev = gpu.device
    lib = ShaderLibrary(dev)
    out = _out(dev, m.rows)
    xb = _data(dev, x.astype(np.float32), True)
    nw = _data(dev, (np.zeros(m.cols) if norm is None else norm).astype(np.float32), True)
    for buf, row0, nrows, fmt in m.chunks:
        params = {"R": R, "ROWS": nrows, "ROW0": row0, "NB": m.cols // 32, "WG": 16, "K4": m.cols // 4,
                  "NORM": norm is not None, "EPS": 1e-5, "OUT_STRIDE": m.rows,
                  **matvec_rows(R, four_rows(fmt, R, nrows)), **matvec_x(lanes)}
        k = lib.kernel("matvec_decode", params, {"FORMAT": f"formats/{fmt}", "EPILOGUE": "epilogues/store"})
        _run(dev, k, {**weight_bindings(buf), 1: xb, 2: nw, 3: out}, ceil(nrows / R / 16))
    return _read(dev, out, m.rows)


def device_matmul(gpu, m: GpuMatrix, X: np.ndarray, R: int = 4, TB: int = 8, lanes: int = 0,
                  x_storage: bool = False) -> np.ndarray:
    """X W^T for T tokens through matmul.wgsl (the prefill tile of model/kernels.py), R x TB tiles.

    lanes > 0: the subgroup form (x shared by broadcasts); 64 rows at R = 8 leave half of the
    workgroup past the rows (those lanes compute and store nothing). x_storage: x through a
    storage binding instead of a uniform one.
    """
    dev = gpu.device
    lib = ShaderLibrary(dev)
    T = X.shape[0]
    out = _out(dev, T * m.rows)
    xb = _data(dev, X.astype(np.float32), not x_storage)
    group = _data(dev, np.array([T, 0, 0, 0], np.uint32), True)
    for buf, row0, nrows, fmt in m.chunks:
        params = {"R": R, "ROWS": nrows, "ROW0": row0, "NB": m.cols // 32, "WG": 16,
                  "OUT_STRIDE": m.rows, **matmul_params(R, TB, lanes, None if x_storage else T * m.cols // 4,
                                                        four_rows(fmt, R, nrows), texels=TEXTURE_TEXELS.get(fmt, 0))}
        k = lib.kernel("matmul", params, {"FORMAT": f"formats/{fmt}", "EPILOGUE": "epilogues/store"})
        _run(dev, k, {**weight_bindings(buf), 1: xb, 2: group, 3: out}, ceil(nrows / R / 16))
    return _read(dev, out, T * m.rows).reshape(T, m.rows)


def gguf_values(gtype: str, rows_bytes: np.ndarray, rows: int, cols: int) -> np.ndarray:
    import gguf
    from gguf.quants import dequantize as gguf_dequantize
    qtype = getattr(gguf.GGMLQuantizationType, gtype)
    return np.asarray(gguf_dequantize(rows_bytes, qtype), np.float32).reshape(rows, cols)


@pytest.mark.parametrize("gtype", TYPES)
def test_device_dequantization_is_gguf_bit_for_bit(gpu, gtype):
    rng = np.random.default_rng(sum(map(ord, gtype)))
    rows, cols = shape_for(gtype)
    data = random_rows(gtype, rows, cols, rng)
    ref = gguf_values(gtype, data, rows, cols)
    assert np.isfinite(ref).all()
    m = pack_ggml(gtype, data, cols, gtype)
    np.testing.assert_array_equal(dequantize(m), ref)
    # a small binding limit splits the rows into chunks: each chunk starts at its own word
    for max_binding, textures in [(1 << 20, t) for t in layouts(gtype)] + [(64 * m.row_bytes() + 8, False)]:
        got = device_embed(gpu, upload(gpu.device, m, max_binding, gtype, textures))
        # bit for bit, but for the sign of a zero: a repacked layout computes Q4_0's d (q - 8) as d q - 8 d, which
        # is +0 where gguf's d * 0 is -0 for a negative d (equal values in every sum)
        bad = np.flatnonzero((got.view(np.uint32) != ref.view(np.uint32)) & ~((got == 0) & (ref == 0) & textures))
        assert bad.size == 0, (f"{gtype} textures={textures}: {bad.size} of {ref.size} values differ from gguf, first at "
                               f"{np.unravel_index(bad[0], ref.shape)}: {got.flat[bad[0]]!r} vs {ref.flat[bad[0]]!r}")


def _shares_a_texture_kernel(gtype: str) -> bool:
    """Whether another type owns the texture format `gtype` is repacked into (Q4_1 owns q4_1_tex, where Q4_0 goes too;
    the first in TYPES' order owns one named for none, q5_tex): the kernels are the owner's, and the repack is checked
    by the dequantization test, so the matvec/matmul test runs a few tile shapes of it, not all."""
    name = TEXTURE_FORMATS[GGML_FORMATS[gtype][0]].name
    sharing = [t for t in TEXTURE_TYPES if TEXTURE_FORMATS[GGML_FORMATS[t][0]].name == name]
    owner = next((t for t in sharing if f"{GGML_FORMATS[t][0]}_tex" == name), sharing[0])
    return gtype != owner


@pytest.mark.parametrize("gtype,textures", [(t, tex) for t in TYPES for tex in layouts(t)])
def test_device_matvec_and_matmul_match_numpy(gpu, gtype, textures):
    rng = np.random.default_rng(7 + sum(map(ord, gtype)))
    rows, cols = shape_for(gtype)
    rows = 64
    data = random_rows(gtype, rows, cols, rng)
    W = gguf_values(gtype, data, rows, cols)
    m = upload(gpu.device, pack_ggml(gtype, data, cols, gtype), 1 << 20, gtype, textures)
    assert {c[3] for c in m.chunks} == {TEXTURE_FORMATS[m.fmt].name if textures else m.fmt}
    x = rng.standard_normal(cols).astype(np.float32)
    X = rng.standard_normal((11, cols)).astype(np.float32)  # 11 tokens: one full tile and a partial one
    XW, absXW = X.astype(np.float64) @ W.T.astype(np.float64), np.abs(X) @ np.abs(W).T
    lanes = gpu.subgroup_lanes  # the subgroup form where the adapter runs it (lavapipe), else the plain one again
    Wx, absWx = W.astype(np.float64) @ x, np.abs(W) @ np.abs(x)
    nw = rng.uniform(0.5, 1.5, cols).astype(np.float32)  # RMSNorm weights: the decode matvec folds the norm in
    xn = x.astype(np.float64) / np.sqrt(np.mean(x.astype(np.float64) ** 2) + 1e-5) * nw
    Wxn, absWxn = W.astype(np.float64) @ xn, np.abs(W) @ np.abs(xn)
    few = textures and _shares_a_texture_kernel(gtype)
    cases = [("matvec", lambda: device_matvec(gpu, m, x), Wx, absWx),
             ("matvec 2 rows an invocation", lambda: device_matvec(gpu, m, x, 2), Wx, absWx),
             ("matvec, norm folded in", lambda: device_matvec(gpu, m, x, 4, 0, nw), Wxn, absWxn),
             ("matvec subgroup, norm folded in", lambda: device_matvec(gpu, m, x, 4, lanes, nw), Wxn, absWxn),
             # 24 rows of 64: the third invocation clamps to rows 40..63, the other 13 lanes run past them, storing nothing
             ("matvec subgroup 24 rows", lambda: device_matvec(gpu, m, x, 24, lanes), Wx, absWx),
             ("matmul 4x8", lambda: device_matmul(gpu, m, X), XW, absXW),
             ("matmul 2x8", lambda: device_matmul(gpu, m, X, 2), XW, absXW),
             ("matmul 8x16 subgroup", lambda: device_matmul(gpu, m, X, 8, 16, lanes), XW, absXW),
             ("matmul 16x8 subgroup (a vocabulary's tile)", lambda: device_matmul(gpu, m, X, 16, 8, lanes), XW, absXW),
             ("matmul 4x4 subgroup", lambda: device_matmul(gpu, m, X, 4, 4, lanes), XW, absXW),
             # the CPU adapters' tiles (kernels.CPU_TILE_ROWS): 32, 24 and 12 rows of 64 (the last invocation of
             # 24 and 12 clamped to the last rows) at a batched decode pass's 8 or 4 tokens, 16 rows at 16 tokens
             ("matmul 32x8 subgroup", lambda: device_matmul(gpu, m, X[:8], 32, 8, lanes), XW[:8], absXW[:8]),
             ("matmul 24x8 subgroup", lambda: device_matmul(gpu, m, X[:8], 24, 8, lanes), XW[:8], absXW[:8]),
             ("matmul 12x4 subgroup", lambda: device_matmul(gpu, m, X[:3], 12, 4, lanes), XW[:3], absXW[:3]),
             ("matmul 16x16 subgroup", lambda: device_matmul(gpu, m, X, 16, 16, lanes), XW, absXW),
             ("matmul 8x16 subgroup, x in storage", lambda: device_matmul(gpu, m, X, 8, 16, lanes, True), XW, absXW)]
    for what, run, want, absw in cases:
        if few and what not in ("matvec", "matvec subgroup, norm folded in", "matmul 8x16 subgroup",
                                "matmul 32x8 subgroup"):
            continue
        assert_within_f32_sum_bound(run(), want, absw, cols, f"{gtype} {what}")


def assert_within_f32_sum_bound(got, want, absw, cols: int, what: str) -> None:
    """f32 sums of `cols` products: error bound ~ cols * eps * sum |w x| (a loose, data-scaled bound)."""
    tol = 4 * cols * np.finfo(np.float32).eps * absw + 1e-30
    err = np.abs(got - want)
    assert (err <= tol).all(), f"{what}: worst error {err.max():.3g} (bound there {tol.flat[err.argmax()]:.3g})"


@pytest.mark.parametrize("gtype", ["Q8_0", "Q4_1"])
def test_odd_row_counts_take_two_rows_an_invocation(gpu, gtype):
    """An odd row count (a vocab) divides by no tile height: R = 2, the last invocation clamped to the last
    two rows (it stores one row again, with the same values), for the decode matvec and the matmul alike."""
    from piegpu.model.kernels import Kernels
    shell = Kernels.__new__(Kernels)
    shell.gpu = type("G", (), {"dev": gpu})()
    assert shell.rows_per_invocation(63, decode=False)[0] == 2 and shell.rows_per_invocation(63, decode=True)[0] == 2
    # the matmul's tile: on a CPU adapter 16 rows for a vocabulary-sized matrix that 16 divides, else 8
    # (or 2 for an odd vocab)
    wide = 16 if gpu.is_cpu else 8
    assert [shell.rows_per_invocation(n, decode=False)[0] for n in (49152, 32000, 3072, 32001)] == [wide, wide, 8, 2]
    # texture weights on a CPU adapter: the first of 32, 24, 16 and 12 rows that divides the rows into 5 or more
    # 8-thread workgroups with at most 256 accumulators (rows x tile tokens), else the usual tile
    sizes = (49152, 3072, 960, 576, 64, 63)
    for tokens, want in ((8, [(32, 8), (32, 8), (24, 8), (12, 8), (8, 8), (2, 8)]),
                         (128, [(16, 8), (16, 8), (16, 8), (12, 8), (8, 8), (2, 8)])):
        got = [shell.rows_per_invocation(n, decode=False, texture=True, tokens=tokens) for n in sizes]
        assert got == (want if gpu.is_cpu else [(8, 16), (8, 16), (8, 8), (8, 8), (8, 8), (2, 8)]), tokens
    rng = np.random.default_rng(63)
    rows, cols = 63, shape_for(gtype)[1]
    data = random_rows(gtype, rows, cols, rng)
    W = gguf_values(gtype, data, rows, cols)
    m = upload(gpu.device, pack_ggml(gtype, data, cols, gtype), 1 << 20, gtype)
    x, X = rng.standard_normal(cols).astype(np.float32), rng.standard_normal((5, cols)).astype(np.float32)
    for what, got, want, absw in (("matvec", device_matvec(gpu, m, x, 2, gpu.subgroup_lanes), W.astype(np.float64) @ x,
                                   np.abs(W) @ np.abs(x)),
                                  ("matmul", device_matmul(gpu, m, X, 2, 8, gpu.subgroup_lanes),
                                   X.astype(np.float64) @ W.T.astype(np.float64), np.abs(X) @ np.abs(W).T)):
        assert_within_f32_sum_bound(got, want, absw, cols, f"{gtype} {what}, 63 rows")


def test_mixed_formats_stay_in_parts(gpu):
    """A fused matrix of parts in different GGML types keeps each part's own format on the device."""
    from piegpu.model.gpu_weights import RowParts, stack_rows
    rng = np.random.default_rng(3)
    parts, want = [], []
    for gtype in ("Q4_K", "Q6_K", "Q8_0"):
        data = random_rows(gtype, 64, 256, rng)
        parts.append(pack_ggml(gtype, data, 256, gtype))
        want.append(gguf_values(gtype, data, 64, 256))
    fused = stack_rows(parts, "qkv")
    assert isinstance(fused, RowParts) and fused.fmt == "q4_k+q6_k+q8_0"
    m = upload(gpu.device, fused, 1 << 20, "qkv")
    assert [c[3] for c in m.chunks] == ["q4_k", "q6_k", "q8_0"] and [c[1] for c in m.chunks] == [0, 64, 128]
    W = np.concatenate(want)
    x = rng.standard_normal(256).astype(np.float32)
    np.testing.assert_allclose(device_matvec(gpu, m, x), W @ x, rtol=1e-4, atol=1e-4 * np.abs(W).max())
    np.testing.assert_array_equal(device_embed(gpu, m), W)


def test_unsupported_type_is_a_clear_error():
    from piegpu.errors import ModelError
    with pytest.raises(ModelError, match="IQ2_XS is not supported.*Q4_K"):
        pack_ggml("IQ2_XS", np.zeros((1, 66), np.uint8), 256, "blk.0.attn_q.weight")
    with pytest.raises(ModelError, match="take 144 bytes"):
        pack_ggml("Q4_K", np.zeros((2, 140), np.uint8), 256, "blk.0.attn_q.weight")


def test_shared_block_helpers_are_included_once_per_snippet():
    """Format snippets take their shared helpers from shaders/blocks/ through `//! include` lines."""
    from piegpu.model.shaders import includes, shader_source
    for fmt, want in (("q4_0", {"blocks/halfwords", "blocks/nibbles"}), ("q5_1", {"blocks/nibbles", "blocks/qh_bits"}),
                      ("q5_k", {"blocks/nibbles", "blocks/k_scales", "blocks/k_block"}), ("q8_0", {"blocks/halfwords", "blocks/bytes"}),
                      ("q8_0_tex", {"blocks/texture_weights", "blocks/texture_quants", "blocks/bytes"}),
                      ("q4_1_tex", {"blocks/texture_weights", "blocks/texture_quants", "blocks/nibble_texel",
                                    "blocks/nibbles"}),
                      ("q4_k_tex", {"blocks/texture_weights", "blocks/texture_quants", "blocks/nibble_texel",
                                    "blocks/nibbles"}),
                      ("q5_tex", {"blocks/texture_quants", "blocks/nibbles"}),
                      ("q6_k_tex", {"blocks/texture_quants", "blocks/nibbles"})):
        src = shader_source(f"formats/{fmt}")
        # the weights' binding: textures, vec4s of words (K-quants: whole 16-byte units) or words
        words = "blocks/storage_vec4s" if fmt.endswith("_k") else "blocks/storage_weights"
        storage = set() if fmt.endswith("_tex") else {words}
        assert includes(f"formats/{fmt}") == want | storage and "//! include" not in src
        for fn in ("fn u32_at(", "fn nib4(", "fn nib_dot(", "fn hi4(", "fn sub_dm(", "fn ub4("):
            assert src.count(fn) <= 1, (fmt, fn)


@pytest.mark.parametrize("gtype", TEXTURE_TYPES)
def test_texture_layout_across_texel_rows_and_chunks(gpu, gtype, monkeypatch):
    """Texel indices past the first 4096-texel row, and a matrix split into several textures, read right."""
    from piegpu.model import gpu_weights
    rng = np.random.default_rng(11)
    rows, cols = 320, 1024  # Q8_0: 64 texels a row, so 64 rows fill one texel row
    data = random_rows(gtype, rows, cols, rng)
    W = gguf_values(gtype, data, rows, cols)
    host = pack_ggml(gtype, data, cols, gtype)
    whole = upload(gpu.device, host, 1 << 30, gtype, textures=True)
    monkeypatch.setattr(gpu_weights, "TEXTURE_ROWS", 1)  # a chunk per texel row: 64 or 128 rows
    split = upload(gpu.device, host, 1 << 30, gtype, textures=True)
    assert len(whole.chunks) == 1 and len(split.chunks) > 2
    x = rng.standard_normal(cols).astype(np.float32)
    for m in (whole, split):
        np.testing.assert_array_equal(device_embed(gpu, m), W)
        tol = 4 * cols * np.finfo(np.float32).eps * (np.abs(W) @ np.abs(x))
        assert (np.abs(device_matvec(gpu, m, x) - W.astype(np.float64) @ x) <= tol).all()


def test_iq4_nl_is_q8_0_of_the_same_values(tmp_path, gpu):
    """IQ4_NL (no shader of its own) is converted at load to Q8_0 blocks of exactly gguf's values; a model of it gives
    the numpy reference's logits on gguf's dequantization of the file."""
    import gguf
    from gguf.quants import dequantize as gguf_dequantize
    from modeltest_helpers import write_checkpoint_gguf
    from test_family_gguf import FIXTURES, gguf_reference
    import piegpu
    rng = np.random.default_rng(7)
    rows, cols = 24, 96
    blocks = rng.integers(0, 256, (rows * cols // 32, 18), dtype=np.uint8)
    d = (rng.standard_normal(len(blocks)) * 10.0 ** rng.integers(-4, 1, len(blocks))).astype(np.float16)
    blocks[:, :2] = d.view(np.uint8).reshape(-1, 2)
    m = pack_ggml("IQ4_NL", blocks.reshape(rows, -1), cols, "w")
    want = np.asarray(gguf_dequantize(blocks.reshape(rows, -1), gguf.GGMLQuantizationType.IQ4_NL), np.float32)
    assert m.fmt == "q8_0" and np.array_equal(dequantize(m).view(np.uint32), want.reshape(rows, cols).view(np.uint32))
    path = tmp_path / "llama3.IQ4_NL.gguf"
    assert set(write_checkpoint_gguf(FIXTURES / "llama3", path, "IQ4_NL").values()) == {"IQ4_NL"}
    ids = [1, 17, 42, 99, 7, 3]
    ref = gguf_reference(path, ids)
    with piegpu.load_model(path, verbose=False, kv_dtype="f32") as model:
        assert model.info["quantization"] == "IQ4_NL" and set(model.info["tensor_types"]) == {"IQ4_NL"}
        got = model.logits(ids)
    assert float(np.abs(got - ref).max()) < 2e-4 * max(1.0, float(np.abs(ref).max()))
