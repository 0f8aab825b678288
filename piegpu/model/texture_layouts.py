"""lavapipe's texture layouts of the GGUF block types: each type's blocks repacked into rgba32uint texels (quants) and
scale words, exactly (scales moved, widened to f32 or multiplied out as exact f32 products, never rounded), and the
TextureFormat table the upload (model/gpu_weights.py) and the shaders (shaders/formats/*_tex.wgsl) share.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _nibbles_q4_1_order(q: np.ndarray) -> np.ndarray:
    """4-bit values [n, 32] (one 32-weight block a row) as Q4_1's 16 bytes a block in words [n, 4]: weight j the
    low nibble of byte j for j < 16, the high nibble of byte j - 16 otherwise."""
    q = q.astype(np.uint8)
    return np.ascontiguousarray(q[:, :16] | (q[:, 16:] << 4)).view(np.uint32)


def _bits(v: np.ndarray, width: int) -> np.ndarray:
    """Fields of `width` bits [..., k] packed into one uint32 [...]: field i at bit width * i."""
    shifts = np.arange(v.shape[-1], dtype=np.uint32) * width
    return np.bitwise_or.reduce(v.astype(np.uint32) << shifts, axis=-1)


def _f32_words(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, np.float32).view(np.uint32)


def _q4_1_texels(blocks: np.ndarray) -> tuple:
    """Q4_1 blocks (uint8 [n, 20]) as (quants [n, 4], scales [n]) words: (d, m) stays one f16 pair."""
    words = np.ascontiguousarray(blocks).view(np.uint32)
    return words[:, 1:5], words[:, 0], None


def _q4_0_texels(blocks: np.ndarray) -> tuple | None:
    """Q4_0 blocks (uint8 [n, 18]) as Q4_1's texels: d (q - 8) = d q + m with m = -8 d, exact in f16 (None where 8 d
    would overflow f16: the blocks stay in the storage layout)."""
    d = np.ascontiguousarray(blocks[:, :2]).view(np.float16).reshape(-1)
    m = (d.astype(np.float32) * -8.0).astype(np.float16)
    if not np.isfinite(m).all():
        return None
    quants = np.ascontiguousarray(blocks[:, 2:]).view(np.uint32).reshape(-1, 4)
    return quants, d.view(np.uint16).astype(np.uint32) | (m.view(np.uint16).astype(np.uint32) << 16), None


def _q8_0_texels(blocks: np.ndarray) -> tuple:
    """Q8_0 blocks (uint8 [n, 34]) as (quants [2 n, 4], scales [n]) words: d widened to f32 (exact)."""
    quants = np.ascontiguousarray(blocks[:, 2:]).view(np.uint32).reshape(-1, 4)
    return quants, _f32_words(_f16_fields(blocks, 1)).reshape(-1), None


def _k_scales(blocks: np.ndarray) -> tuple:
    """(d, dmin) f16 words [n] and the 6-bit (scale, min) bytes [n, 8] of Q4_K / Q5_K super-blocks (gguf's unpacking)."""
    from gguf.quants import Q4_K
    sc, m = Q4_K.get_scale_min(np.ascontiguousarray(blocks[:, 4:16]))
    return np.ascontiguousarray(blocks[:, :4]).view(np.uint32).reshape(-1), sc.reshape(-1, 8), m.reshape(-1, 8)


def _k_nibbles(qs: np.ndarray) -> np.ndarray:
    """A Q4_K / Q5_K super-block's 128 bytes of nibbles [n, 128] as 4-bit values [n * 8, 32], sub-block by sub-block
    (sub-blocks 2c and 2c + 1: the low and high nibbles of bytes 32 c .. 32 c + 31)."""
    qs = qs.reshape(-1, 4, 1, 32)
    return ((qs >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)) & 15).reshape(-1, 32)


def _q4_k_texels(blocks: np.ndarray) -> tuple:
    """Q4_K super-blocks (uint8 [n, 144]) as (quants [8 n, 4]: each 32-weight sub-block's nibbles in Q4_1's order,
    scales [4 n]: a pair of sub-blocks' 6-bit scales and mins as bytes (sc, m) of the even one, then of the odd one,
    supers [n]: the f16 (d, dmin) pair)."""
    dd, sc, m = _k_scales(blocks)
    quants = _nibbles_q4_1_order(_k_nibbles(blocks[:, 16:]))
    half = (sc.astype(np.uint32) | (m.astype(np.uint32) << 8)).reshape(-1, 2)
    return quants, half[:, 0] | (half[:, 1] << 16), dd


def _q5_texels(nibbles: np.ndarray, high: np.ndarray, d: np.ndarray, m: np.ndarray) -> tuple:
    """32-weight blocks of 5-bit values q = nibble + 16 high (weight d q + m) as two texels a block: the nibbles in
    Q4_1's order, then (the 32 high bits, f32 d, f32 m, 0)."""
    t0 = _nibbles_q4_1_order(nibbles)
    t1 = np.stack([_bits(high, 1), _f32_words(d), _f32_words(m), np.zeros(len(d), np.uint32)], axis=1)
    return np.stack([t0, t1], axis=1).reshape(-1, 4), None, None


def _q5_quants(blocks: np.ndarray, at: int) -> tuple:
    """The nibbles [n, 32] and high bits [n, 32] of Q5_0 / Q5_1 blocks whose 32 high bits start at byte `at`, the 16
    bytes of nibbles (Q4_1's order) right after them."""
    qh = np.ascontiguousarray(blocks[:, at: at + 4]).view(np.uint32).reshape(-1)
    qs = blocks[:, at + 4: at + 20]
    return np.concatenate([qs & 15, qs >> 4], axis=1), (qh[:, None] >> np.arange(32, dtype=np.uint32)) & 1


def _f16_fields(blocks: np.ndarray, count: int) -> np.ndarray:
    """The first `count` f16 fields of each block widened to f32 (exact): [n, count]."""
    return np.ascontiguousarray(blocks[:, : 2 * count]).view(np.float16).astype(np.float32).reshape(-1, count)


def _q5_0_texels(blocks: np.ndarray) -> tuple:
    """Q5_0 blocks (uint8 [n, 22]: f16 d, 32 high bits, nibbles) as q5_tex: d (q - 16) = d q + m, m = -16 d (exact)."""
    d = _f16_fields(blocks, 1)[:, 0]
    return _q5_texels(*_q5_quants(blocks, 2), d, -16.0 * d)


def _q5_1_texels(blocks: np.ndarray) -> tuple:
    """Q5_1 blocks (uint8 [n, 24]: f16 d, f16 m, 32 high bits, nibbles) as q5_tex (d and m widened to f32: exact)."""
    dm = _f16_fields(blocks, 2)
    return _q5_texels(*_q5_quants(blocks, 4), dm[:, 0], dm[:, 1])


def _q5_k_texels(blocks: np.ndarray) -> tuple:
    """Q5_K super-blocks (uint8 [n, 176]) as q5_tex, a sub-block a block: d sc and -dmin m as f32 (exact products)."""
    _, sc, m = _k_scales(blocks)
    dd = _f16_fields(blocks, 2)  # (d, dmin)
    qh = blocks[:, 16:48]  # bit s of byte i: weight i of sub-block s
    high = ((qh[:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1).reshape(-1, 32)
    d = (dd[:, :1] * sc.astype(np.float32)).reshape(-1)
    mins = -(dd[:, 1:] * m.astype(np.float32)).reshape(-1)
    return _q5_texels(_k_nibbles(blocks[:, 48:]), high, d, mins)


def _q6_k_texels(blocks: np.ndarray) -> tuple:
    """Q6_K super-blocks (uint8 [n, 210]) as two texels a 32-weight sub-block: the low nibbles in Q4_1's order, then
    (the 2-bit highs of weights 0..15, of 16..31, f32 d sc of weights 0..15, of 16..31: exact products)."""
    n = blocks.shape[0]
    s = np.arange(8)[:, None]
    i = np.arange(32)[None, :]
    ql = blocks[:, :128][:, 64 * (s // 4) + 32 * (s % 2) + i]  # [n, 8, 32]
    nib = (ql >> (4 * ((s // 2) % 2)).astype(np.uint8)) & 15
    high = (blocks[:, 128:192][:, 32 * (s // 4) + i] >> (2 * (s % 4)).astype(np.uint8)) & 3
    d = _f16_fields(blocks[:, 208:210], 1)  # [n, 1]
    dsc = (d * np.ascontiguousarray(blocks[:, 192:208]).view(np.int8).astype(np.float32)).reshape(n * 8, 2)
    t0 = _nibbles_q4_1_order(nib.reshape(-1, 32))
    h = high.reshape(-1, 2, 16)
    t1 = np.stack([_bits(h[:, 0], 2), _bits(h[:, 1], 2), _f32_words(dsc[:, 0]), _f32_words(dsc[:, 1])], axis=1)
    return np.stack([t0, t1], axis=1).reshape(-1, 4), None, None


@dataclass(frozen=True)
class TextureFormat:
    """How a GGUF type is laid out in textures on CPU adapters (TextureWeights) and read (shaders/formats/<name>)."""

    name: str  # the shader format
    texels: int  # quant texels a 32-weight block
    repack: object  # uint8 [GGUF blocks, block bytes] -> (quants [*, 4], per-block scale words | None,
    #                 per-super-block words | None), or None where the values cannot be laid out exactly
    tile_texels: int  # texels the matmul tile fetches once per block for block_q_t (0: it calls block_q)
    four_rows: bool  # scale words of four rows in one texel (block_scales4), else each block's in its own texels


# GGUF storage format -> its texture layout. Every value is the one gguf's dequantization gives (test_quant_formats):
# the scales are moved, widened to f32 or multiplied out as exact f32 products, never rounded.
TEXTURE_FORMATS = {
    "q4_1": TextureFormat("q4_1_tex", 1, _q4_1_texels, 1, True),
    "q4_0": TextureFormat("q4_1_tex", 1, _q4_0_texels, 1, True),
    "q8_0": TextureFormat("q8_0_tex", 2, _q8_0_texels, 2, True),
    "q4_k": TextureFormat("q4_k_tex", 1, _q4_k_texels, 1, True),
    "q5_0": TextureFormat("q5_tex", 2, _q5_0_texels, 0, False),
    "q5_1": TextureFormat("q5_tex", 2, _q5_1_texels, 0, False),
    "q5_k": TextureFormat("q5_tex", 2, _q5_k_texels, 0, False),
    "q6_k": TextureFormat("q6_k_tex", 2, _q6_k_texels, 0, False),
}
# shader format -> texels the matmul tile fetches a block (TEXTURE_TEXELS) / whether scales come four rows a texel
TEXTURE_TEXELS = {t.name: t.tile_texels for t in TEXTURE_FORMATS.values()}
FOUR_ROW_FORMATS = frozenset(t.name for t in TEXTURE_FORMATS.values() if t.four_rows)
