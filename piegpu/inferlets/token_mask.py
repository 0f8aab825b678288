"""Packed token masks (u32 words, bit i of word i // 32 = token i).

The host fills the words (llguidance, inferlets/grammar.py); device_allowed() unpacks them
inside an epilogue. Each token's bytes: piegpu.model.token_bytes.
"""

from __future__ import annotations

import numpy as np

from .. import eta


def unpack_mask(words: np.ndarray, vocab: int) -> np.ndarray:
    """Host: the bool [vocab] mask of packed u32 words."""
    bits = np.unpackbits(np.asarray(words, "<u4").view(np.uint8), bitorder="little")
    return bits[:vocab].astype(bool)


def device_allowed(words, vocab: int):
    """Traced: the bool [vocab] mask of packed u32 words (bit i of word i >> 5), unpacked on the device."""
    idx = eta.iota(vocab)
    bits = eta.gather(words, idx >> 5) >> (idx & 31)
    return eta.ne(bits & 1, 0)


__all__ = ["unpack_mask", "device_allowed"]
