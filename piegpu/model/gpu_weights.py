"""Weight matrices in the GPU layouts of shaders/formats, and their upload in chunks.

Every format stores a row as 32-weight blocks of 32-bit words (f32: 32 words, f16:
16, Q8_0: 9, Q4_1: 5) so a shader reads 4-byte aligned words. GGUF Q8_0/Q4_1
blocks are repacked losslessly: the GPU computes with exactly the values of
gguf's dequantization. A matrix bigger than one storage binding is split into row
chunks, each dispatched on its own, so any model size loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import ModelError

WORDS_PER_BLOCK = {"f32": 32, "f16": 16, "q8_0": 9, "q4_1": 5}
GGML_FORMATS = {"F32": "f32", "F16": "f16", "Q8_0": "q8_0", "Q4_1": "q4_1"}
ROW_ALIGN = 64  # chunk boundaries keep whole invocations (R rows) and row pairs together


@dataclass
class HostMatrix:
    """A weight matrix repacked for the shaders: words [rows, blocks * WORDS_PER_BLOCK[fmt]]."""

    fmt: str
    rows: int
    cols: int
    words: np.ndarray

    def row_words(self) -> int:
        """32-bit words per row."""
        return self.words.shape[1]


def _check_cols(cols: int, what: str) -> None:
    if cols % 32:
        raise ModelError(f"{what}: {cols} columns is not a multiple of 32. Fix: piegpu's GPU path needs "
                         "hidden_size and intermediate_size to be multiples of 32 (every released Llama is)")


def pack_dense(w: np.ndarray, fmt: str, what: str = "matrix") -> HostMatrix:
    """A float matrix [rows, cols] as f32 or f16 blocks."""
    w = np.asarray(w)
    rows, cols = w.shape
    _check_cols(cols, what)
    if fmt == "f32":
        words = np.ascontiguousarray(w, dtype=np.float32).view(np.uint32)
    elif fmt == "f16":
        words = np.ascontiguousarray(w, dtype=np.float16).view(np.uint32)
    else:
        raise ModelError(f"{what}: dense format {fmt!r} is not f32 or f16")
    return HostMatrix(fmt, rows, cols, words.reshape(rows, -1))


def pack_ggml(ggml_type: str, data: np.ndarray, cols: int, what: str = "matrix") -> HostMatrix:
    """GGUF rows of blocks (uint8 [rows, row_bytes]) repacked for the shaders, bit for bit."""
    _check_cols(cols, what)
    rows = data.shape[0]
    nb = cols // 32
    if ggml_type == "F32":
        return pack_dense(data.view(np.float32).reshape(rows, cols), "f32", what)
    if ggml_type == "F16":
        return pack_dense(data.view(np.float16).reshape(rows, cols), "f16", what)
    if ggml_type == "Q4_1":
        b = np.ascontiguousarray(data).reshape(rows, nb, 20)
        dm = b[:, :, 0:4].copy().view(np.uint32)  # d (low half) and m (high half) as f16
        qs = b[:, :, 4:20].copy().view(np.uint32)  # 4 words of nibbles
        words = np.concatenate([qs, dm], axis=2)
    elif ggml_type == "Q8_0":
        b = np.ascontiguousarray(data).reshape(rows, nb, 34)
        d = b[:, :, 0:2].copy().view(np.uint16).astype(np.uint32)
        qs = b[:, :, 2:34].copy().view(np.uint32)
        words = np.concatenate([qs, d], axis=2)
    else:
        raise ModelError(f"{what}: GGUF type {ggml_type} has no GPU layout")
    return HostMatrix(GGML_FORMATS[ggml_type], rows, cols, np.ascontiguousarray(words.reshape(rows, -1)))


def dequantize(m: HostMatrix) -> np.ndarray:
    """The f32 values the shaders compute with (for tests)."""
    nb = m.cols // 32
    if m.fmt == "f32":
        return m.words.view(np.float32).reshape(m.rows, m.cols).copy()
    if m.fmt == "f16":
        return m.words.view(np.float16).reshape(m.rows, m.cols).astype(np.float32)
    blocks = m.words.reshape(m.rows, nb, -1)
    if m.fmt == "q8_0":
        q = blocks[:, :, :8].copy().view(np.int8).astype(np.float32)
        d = (blocks[:, :, 8] & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float32)
        return (q * d[:, :, None]).reshape(m.rows, m.cols)
    qs = blocks[:, :, :4].copy().view(np.uint8).reshape(m.rows, nb, 16)
    q = np.concatenate([qs & 15, qs >> 4], axis=2).astype(np.float32)
    dm = blocks[:, :, 4].copy().view(np.float16).reshape(m.rows, nb, 2).astype(np.float32)
    return (dm[:, :, 0:1] * q + dm[:, :, 1:2]).reshape(m.rows, m.cols)


def unify(parts: list) -> list:
    """Matrices to fuse in one format: as they are if they share one, else all as f16.

    GGUF files often mix types inside a layer (e.g. Q4_K for q and k, Q6_K for v); a
    fused matvec reads one layout, so such parts are dequantized and stored as f16.
    """
    if len({p.fmt for p in parts}) <= 1:
        return parts
    return [pack_dense(dequantize(p), "f16") for p in parts]


def stack_rows(parts: list, what: str) -> HostMatrix:
    """Matrices with equal columns, one below the other (formats unified first)."""
    parts = unify(parts)
    fmts = {p.fmt for p in parts}
    cols = {p.cols for p in parts}
    if len(fmts) != 1 or len(cols) != 1:
        raise ModelError(f"{what}: cannot fuse formats {sorted(fmts)} / columns {sorted(cols)}")
    return HostMatrix(parts[0].fmt, sum(p.rows for p in parts), parts[0].cols,
                      np.concatenate([p.words for p in parts], axis=0))


def interleave_rows(a: HostMatrix, b: HostMatrix, what: str) -> HostMatrix:
    """Rows a0, b0, a1, b1, ... (gate and up, so one invocation sees both halves of SwiGLU)."""
    a, b = unify([a, b])
    if a.fmt != b.fmt or a.cols != b.cols or a.rows != b.rows:
        raise ModelError(f"{what}: gate and up differ in format or shape")
    words = np.empty((2 * a.rows, a.row_words()), np.uint32)
    words[0::2], words[1::2] = a.words, b.words
    return HostMatrix(a.fmt, 2 * a.rows, a.cols, words)


@dataclass
class GpuMatrix:
    """A matrix on the device as row chunks that each fit one storage binding."""

    fmt: str
    rows: int
    cols: int
    chunks: list = field(default_factory=list)  # (buffer, first row, row count)

    @property
    def nbytes(self) -> int:
        """Device bytes of all chunks."""
        return sum(c[0].size for c in self.chunks)


def upload(device, m: HostMatrix, max_binding_bytes: int, label: str) -> GpuMatrix:
    """Upload in row chunks no larger than one storage binding."""
    import wgpu
    row_bytes = m.row_words() * 4
    per_chunk = max(ROW_ALIGN, (max_binding_bytes // row_bytes) // ROW_ALIGN * ROW_ALIGN)
    g = GpuMatrix(m.fmt, m.rows, m.cols)
    for r0 in range(0, m.rows, per_chunk):
        part = np.ascontiguousarray(m.words[r0: r0 + per_chunk])
        buf = device.create_buffer_with_data(data=part.tobytes(), usage=wgpu.BufferUsage.STORAGE,
                                             label=f"{label}[{r0}:]")
        g.chunks.append((buf, r0, part.shape[0]))
    return g
