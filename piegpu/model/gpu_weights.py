"""Weight matrices in the GPU layouts of shaders/formats, and their upload in chunks.

GGUF tensors are uploaded as GGUF stores them: each GGML type has a format snippet
(shaders/formats/<fmt>.wgsl) that reads its blocks in place, so the device computes
with exactly the values of gguf's dequantization. HF float tensors are stored as f32 or
f16 rows. A matrix bigger than one storage binding is split into row chunks, each
dispatched on its own, so any model size loads. A fused matrix (q | k | v) whose parts
have different types (Q4_K_M files keep v in Q6_K) stays in parts, one format each.

On lavapipe (Device.texture_weights) every quant type goes up as textures instead (TextureWeights, TEXTURE_FORMATS
of model/texture_layouts.py: q4_1_tex, q8_0_tex, q4_k_tex, q5_tex, q6_k_tex), repacked at upload so that a 32-weight
block's quants are whole rgba32uint texels and its scales either words four rows a texel or a texel of the block's
own -- moved, widened to f32 or multiplied out as exact f32 products, so the values stay gguf's -- because llvmpipe
loads a texel for all lanes at once where it loops over the lanes of a storage load (docs/real_models.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import ModelError
from .texture_layouts import FOUR_ROW_FORMATS, TEXTURE_FORMATS, TEXTURE_TEXELS  # noqa: F401 (re-exported)

# GGML type -> (shader format, bytes per block, weights per block). Every row is whole blocks.
GGML_FORMATS = {
    "F32": ("f32", 4, 1), "F16": ("f16", 2, 1), "BF16": ("bf16", 2, 1),
    "Q4_0": ("q4_0", 18, 32), "Q4_1": ("q4_1", 20, 32), "Q5_0": ("q5_0", 22, 32), "Q5_1": ("q5_1", 24, 32),
    "Q8_0": ("q8_0", 34, 32), "Q4_K": ("q4_k", 144, 256), "Q5_K": ("q5_k", 176, 256), "Q6_K": ("q6_k", 210, 256),
}
FORMAT_GGML = {fmt: name for name, (fmt, _, _) in GGML_FORMATS.items()}
# IQ4_NL's 16 non-linear levels (llama.cpp's kvalues_iq4nl): weight = d * level[nibble]
IQ4_NL_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int8)
_IQ4_NL_LOW = IQ4_NL_LEVELS.view(np.uint8)[np.arange(256) & 15]
_IQ4_NL_HIGH = IQ4_NL_LEVELS.view(np.uint8)[np.arange(256) >> 4]


def _iq4_nl_as_q8_0(blocks: np.ndarray) -> np.ndarray:
    """IQ4_NL blocks (uint8 [n, 18]: f16 d, 16 bytes of nibbles, weight j the low nibble of byte j for j < 16, the high
    one of byte j - 16 after) as Q8_0 blocks [n, 34] of the same values: d kept, the levels as int8 quants (exact)."""
    out = np.empty((blocks.shape[0], 34), np.uint8)
    out[:, :2] = blocks[:, :2]
    qs = blocks[:, 2:]
    out[:, 2:18] = _IQ4_NL_LOW[qs]  # byte -> the int8 level of its low nibble (a 256-entry table): 0.6x the time
    out[:, 18:] = _IQ4_NL_HIGH[qs]  # of unpacking the nibbles and looking the levels up
    return out


# GGML types without a shader of their own: (type they are converted to at load, exactly; bytes, weights a block;
# the converter of blocks [n, bytes]). IQ4_NL as Q8_0: 34 bytes a block on the device against the file's 18, at Q8_0's
# speed (a 16-entry table lookup in the matvec's inner loop is what lavapipe runs slowest).
CONVERTED_TYPES = {"IQ4_NL": ("Q8_0", 18, 32, _iq4_nl_as_q8_0)}
READABLE_TYPES = tuple(GGML_FORMATS) + tuple(CONVERTED_TYPES)  # what a GGUF's matrices may be
ROW_ALIGN = 64  # chunk boundaries keep whole invocations (R rows) and row pairs together
TEXEL_ROW = 4096  # texels per texture row (shaders/blocks/texture_weights.wgsl splits an index at 4096)
TEXTURE_ROWS = 8192  # texture rows a chunk may use: WebGPU's default max-texture-dimension-2d


@dataclass
class HostMatrix:
    """A weight matrix in one shader format: bytes [rows, row_bytes] (GGUF blocks, or f32/f16 rows).

    `data` may be a view of a memory-mapped GGUF file: nothing is copied until upload.
    """

    fmt: str
    rows: int
    cols: int
    data: np.ndarray

    def row_bytes(self) -> int:
        """Bytes per row."""
        return self.data.shape[1]


@dataclass
class RowParts:
    """A matrix stacked from parts of different formats (rows of part 0, then part 1, ...)."""

    parts: list
    cols: int

    @property
    def rows(self) -> int:
        """Rows of all parts."""
        return sum(p.rows for p in self.parts)

    @property
    def fmt(self) -> str:
        """The parts' formats joined with '+'."""
        return "+".join(p.fmt for p in self.parts)


def _check_cols(cols: int, what: str) -> None:
    if cols % 32:
        raise ModelError(f"{what}: {cols} columns is not a multiple of 32. Fix: piegpu's GPU path needs "
                         "hidden_size and intermediate_size to be multiples of 32 (every released Llama is)")


def pack_dense(w: np.ndarray, fmt: str, what: str = "matrix") -> HostMatrix:
    """A float matrix [rows, cols] as f32 or f16 rows."""
    w = np.asarray(w)
    rows, cols = w.shape
    _check_cols(cols, what)
    if fmt not in ("f32", "f16"):
        raise ModelError(f"{what}: dense format {fmt!r} is not f32 or f16")
    data = np.ascontiguousarray(w, dtype=np.float32 if fmt == "f32" else np.float16)
    return HostMatrix(fmt, rows, cols, data.view(np.uint8).reshape(rows, -1))


def check_ggml(ggml_type: str, data: np.ndarray, cols: int, what: str = "matrix") -> np.ndarray:
    """`data` as uint8 rows of whole `ggml_type` blocks (a type piegpu reads), checked against `cols`; nothing is
    converted (ModelError naming the problem otherwise)."""
    if ggml_type in CONVERTED_TYPES:
        _, block_bytes, block_elems, _ = CONVERTED_TYPES[ggml_type]
    elif ggml_type in GGML_FORMATS:
        _, block_bytes, block_elems = GGML_FORMATS[ggml_type]
    else:
        raise ModelError(f"{what}: GGUF type {ggml_type} is not supported; piegpu reads "
                         f"{', '.join(READABLE_TYPES)}. Fix: requantize the model to one of them (llama-quantize)")
    return _checked_rows(ggml_type, data, cols, what, block_bytes, block_elems)


def pack_ggml(ggml_type: str, data: np.ndarray, cols: int, what: str = "matrix") -> HostMatrix:
    """GGUF rows of blocks (uint8 [rows, row_bytes]) as a matrix the shaders read in place (no copy); a type of
    CONVERTED_TYPES is converted to its stand-in first."""
    rows = check_ggml(ggml_type, data, cols, what)
    if ggml_type in CONVERTED_TYPES:
        target, block_bytes, _, conv = CONVERTED_TYPES[ggml_type]
        out = conv(np.ascontiguousarray(rows).reshape(-1, block_bytes)).reshape(rows.shape[0], -1)
        return pack_ggml(target, out, cols, what)
    return HostMatrix(GGML_FORMATS[ggml_type][0], rows.shape[0], cols, rows)


def _checked_rows(ggml_type: str, data: np.ndarray, cols: int, what: str, block_bytes: int,
                  block_elems: int) -> np.ndarray:
    """`data` as uint8 rows of whole `ggml_type` blocks, checked against `cols` (ModelError otherwise)."""
    _check_cols(cols, what)
    if cols % block_elems:
        raise ModelError(f"{what}: {cols} columns is not a whole number of {ggml_type} blocks ({block_elems})")
    want = cols // block_elems * block_bytes
    data = np.asarray(data)
    if data.dtype != np.uint8 and data.ndim == 2:  # F32/F16 tensors arrive typed: the same bytes
        data = np.ascontiguousarray(data).view(np.uint8)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != want:
        raise ModelError(f"{what}: {ggml_type} rows of {cols} weights take {want} bytes, got an array "
                         f"{data.dtype} {list(data.shape)}; the GGUF tensor is corrupt -- re-download it")
    return data


def dequantize(m: HostMatrix) -> np.ndarray:
    """The f32 values the shaders compute with, by gguf's dequantization (tests, format fallbacks)."""
    if m.fmt == "f32":
        return np.ascontiguousarray(m.data).view(np.float32).reshape(m.rows, m.cols).copy()
    if m.fmt == "f16":
        return np.ascontiguousarray(m.data).view(np.float16).reshape(m.rows, m.cols).astype(np.float32)
    import gguf
    from gguf.quants import dequantize as gguf_dequantize
    qtype = getattr(gguf.GGMLQuantizationType, FORMAT_GGML[m.fmt])
    return np.asarray(gguf_dequantize(np.ascontiguousarray(m.data), qtype), np.float32).reshape(m.rows, m.cols)


def stack_rows(parts: list, what: str):
    """Matrices with equal columns, one below the other: a HostMatrix if they share a format, else RowParts."""
    cols = {p.cols for p in parts}
    if len(cols) != 1:
        raise ModelError(f"{what}: cannot stack matrices of {sorted(cols)} columns")
    if len({p.fmt for p in parts}) > 1:
        return RowParts(list(parts), parts[0].cols)
    return HostMatrix(parts[0].fmt, sum(p.rows for p in parts), parts[0].cols,
                      np.concatenate([p.data for p in parts], axis=0))


def interleave_rows(a: HostMatrix, b: HostMatrix, what: str) -> HostMatrix:
    """Rows a0, b0, a1, b1, ... (gate and up, so one invocation sees both halves of SwiGLU).

    Gate and up of different formats (no llama.cpp mix does this) are dequantized to f32,
    which keeps gguf's values exactly.
    """
    if a.fmt != b.fmt:
        a, b = pack_dense(dequantize(a), "f32", what), pack_dense(dequantize(b), "f32", what)
    if a.cols != b.cols or a.rows != b.rows:
        raise ModelError(f"{what}: gate and up differ in shape ({a.rows}x{a.cols} vs {b.rows}x{b.cols})")
    data = np.empty((2 * a.rows, a.row_bytes()), np.uint8)
    data[0::2], data[1::2] = a.data, b.data
    return HostMatrix(a.fmt, 2 * a.rows, a.cols, data)



@dataclass
class TextureWeights:
    """A row chunk of a matrix as two rgba32uint textures: quants, and scales four rows a texel."""

    quants: object  # wgpu texture views
    scales: object | None  # four rows' scale words of a block a texel (None: the blocks' own texels hold them)
    size: int  # device bytes of all
    supers: object | None = None  # four rows' words of a super-block a texel (q4_k_tex's d and dmin)

    def bindings(self) -> dict:
        """{binding: view} as shaders/blocks/texture_*.wgsl declare them."""
        views = {0: self.quants, 15: self.scales, 16: self.supers}
        return {k: v for k, v in views.items() if v is not None}


def _scale_texels(scales: np.ndarray, rows: int) -> np.ndarray:
    """Scale words [rows * NB] as texels [ceil(rows / 4) * NB, 4]: rows 4i..4i+3 of block b at i NB + b."""
    nb = scales.size // rows
    padded = np.zeros((-(-rows // 4) * 4, nb), np.uint32)
    padded[:rows] = scales.reshape(rows, nb)
    return padded.reshape(-1, 4, nb).transpose(0, 2, 1).reshape(-1, 4)


def weight_bindings(chunk_buffer) -> dict:
    """The bindings of one row chunk's weights: {0: buffer} or a TextureWeights' two views."""
    return chunk_buffer.bindings() if isinstance(chunk_buffer, TextureWeights) else {0: chunk_buffer}


class DeviceVectors:
    """f32 vectors on the device (norm weights, biases) and zero vectors shared by size, for a class with `device`
    (a wgpu device) and a `_zero_vecs` dict (GpuModel, GpuEncoder)."""

    def _vec(self, v: np.ndarray, label: str):
        import wgpu
        # UNIFORM too: the decode matvec reads norm weights through a uniform binding (scalar loads)
        return self.device.create_buffer_with_data(data=np.ascontiguousarray(v, np.float32).tobytes(),
                                                   usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.UNIFORM,
                                                   label=label)

    def zeros(self, n: int):
        """A zero vector of n floats (the binding of a step that declares it but does not read it)."""
        z = self._zero_vecs.get(n)
        if z is None:
            z = self._zero_vecs[n] = self._vec(np.zeros(n, np.float32), f"zeros{n}")
        return z


@dataclass
class GpuMatrix:
    """A matrix on the device as row chunks that each fit one storage binding."""

    fmt: str
    rows: int
    cols: int
    chunks: list = field(default_factory=list)  # (buffer, first row, row count, format)

    @property
    def nbytes(self) -> int:
        """Device bytes of all chunks."""
        return sum(c[0].size for c in self.chunks)


def upload(device, m, max_binding_bytes: int, label: str, textures: bool = False) -> GpuMatrix:
    """Upload a HostMatrix or RowParts in row chunks no larger than one storage binding.

    textures: parts of a type in TEXTURE_FORMATS go up as TextureWeights (Device.texture_weights says where that
    pays), repacked into their texture layout.
    """
    g = GpuMatrix(m.fmt, m.rows, m.cols)
    row0 = 0
    for part in (m.parts if isinstance(m, RowParts) else [m]):
        if not (textures and part.fmt in TEXTURE_FORMATS and _upload_textures(device, part, label, g, row0)):
            _upload_part(device, part, max_binding_bytes, label, g, row0)
        row0 += part.rows
    return g


def _texture_rows(n: int) -> np.ndarray:
    """A zeroed texel array for n texels, whole texture rows of TEXEL_ROW."""
    return np.zeros((max(1, -(-n // TEXEL_ROW)) * TEXEL_ROW, 4), np.uint32)


def _texture(device, padded: np.ndarray, label: str):
    """A 2D rgba32uint texture view holding `padded` (uint32 [whole rows of TEXEL_ROW, 4], _texture_rows)."""
    import wgpu
    height = padded.shape[0] // TEXEL_ROW
    tex = device.create_texture(size=(TEXEL_ROW, height, 1), format=wgpu.TextureFormat.rgba32uint, label=label,
                                usage=wgpu.TextureUsage.TEXTURE_BINDING | wgpu.TextureUsage.COPY_DST)
    device.queue.write_texture({"texture": tex}, padded, {"bytes_per_row": TEXEL_ROW * 16, "rows_per_image": height},
                               (TEXEL_ROW, height, 1))
    # done now: texture writes left queued until a layer's end kept twice their bytes resident on lavapipe (an 8B
    # model's load ended at 6.9 GB RSS for 5.4 GB of weights; drained one by one, 1x)
    from ..runtime.waits import drain
    drain(device)
    return tex.create_view(), padded.nbytes


REPACK_ROWS = 256  # rows repacked at a time: the repack's temporaries stay a few MB (a 128256-row Q6_K vocab: 2.4 GB)


def _upload_textures(device, m: HostMatrix, label: str, g: GpuMatrix, first: int) -> bool:
    """Upload m's rows as TextureWeights chunks; False (nothing uploaded) where its values have no exact texture
    layout (the storage layout then)."""
    tf = TEXTURE_FORMATS[m.fmt]
    _, block_bytes, _ = GGML_FORMATS[FORMAT_GGML[m.fmt]]
    nb = m.cols // 32
    row_texels = nb * tf.texels
    per_chunk = max(ROW_ALIGN, TEXEL_ROW * TEXTURE_ROWS // row_texels // ROW_ALIGN * ROW_ALIGN)
    chunks = []
    for r0 in range(0, m.rows, per_chunk):
        n = min(per_chunk, m.rows - r0)
        quants = _texture_rows(n * row_texels)
        planes = {}  # "scales" / "supers" -> texels, four rows a texel
        for s0 in range(0, n, REPACK_ROWS):
            k = min(REPACK_ROWS, n - s0)
            packed = tf.repack(np.ascontiguousarray(m.data[r0 + s0: r0 + s0 + k]).reshape(-1, block_bytes))
            if packed is None:
                return False
            quants[s0 * row_texels: (s0 + k) * row_texels] = packed[0]
            for what, words in zip(("scales", "supers"), packed[1:]):
                if words is not None:
                    per_row = words.size // k
                    plane = planes.get(what)
                    if plane is None:
                        plane = planes[what] = _texture_rows(-(-n // 4) * per_row)
                    plane[s0 // 4 * per_row: (s0 + k + 3) // 4 * per_row] = _scale_texels(words, k)
        where = f"{label}[{first + r0}:]"
        qv, size = _texture(device, quants, f"{where}.quants")
        views = {}
        for what, plane in planes.items():
            views[what], nbytes = _texture(device, plane, f"{where}.{what}")
            size += nbytes
        chunks.append((TextureWeights(qv, views.get("scales"), size, views.get("supers")), first + r0, n, tf.name))
    g.chunks.extend(chunks)
    return True


def _upload_part(device, m: HostMatrix, max_binding_bytes: int, label: str, g: GpuMatrix, first: int) -> None:
    import wgpu
    # 8 bytes of slack: formats with blocks at 2-byte alignment read one word past a field.
    per_chunk = max(ROW_ALIGN, ((max_binding_bytes - 8) // m.row_bytes()) // ROW_ALIGN * ROW_ALIGN)
    for r0 in range(0, m.rows, per_chunk):
        part = np.ascontiguousarray(m.data[r0: r0 + per_chunk]).reshape(-1)  # a view when m.data is the file's
        size = part.size + (-part.size) % 4 + 4
        buf = device.create_buffer(size=size, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST,
                                   label=f"{label}[{first + r0}:]")
        # Written straight from the (memory-mapped) rows: no host copy of the whole chunk; the
        # buffer starts zeroed, so the padding needs no write.
        body = part.size - part.size % 4
        if body:
            device.queue.write_buffer(buf, 0, part[:body])
        if part.size > body:
            tail = np.concatenate([part[body:], np.zeros(4 - part.size + body, np.uint8)])
            device.queue.write_buffer(buf, body, tail)
        g.chunks.append((buf, first + r0, min(per_chunk, m.rows - r0), m.fmt))
