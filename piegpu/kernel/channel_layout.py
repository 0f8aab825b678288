"""The channel buffer layout, defined once for every reader and writer of a channel.

The host ring (runtime/channel.py), the epilogue kernels of every target
(kernel/inline.py) and the forward pass's shaders (embed.wgsl reads the token ids of
a pass from a channel; advance_accept.wgsl takes the kept-token count) all use it.

32-bit words: a header [head, tail, ring size, cell words, 4 reserved], then `ring
size` cells. head/tail count the cells taken/put since the channel was created; cell
n lives at word HEADER_WORDS + (n % ring size) * cell words.
"""

from __future__ import annotations

import numpy as np

HEADER_WORDS = 8
HEAD, TAIL, RING, CELL_WORDS = 0, 1, 2, 3  # header word indices


def header(head: int, tail: int, ring: int, cell_words: int) -> np.ndarray:
    """The header words of a channel buffer (head/tail wrap modulo 2^32 as on the device)."""
    words = np.zeros(HEADER_WORDS, np.uint32)
    words[[HEAD, TAIL, RING, CELL_WORDS]] = (head & 0xFFFFFFFF, tail & 0xFFFFFFFF, ring, cell_words)
    return words


def cell_word(n: int, ring: int, cell_words: int) -> int:
    """Word offset of absolute cell n in the buffer."""
    return HEADER_WORDS + (n % ring) * cell_words


def shader_params() -> dict:
    """The layout as {{CH_*}} parameters of the hand-written shaders that read channels."""
    return {"CH_HEADER": HEADER_WORDS, "CH_HEAD": HEAD, "CH_TAIL": TAIL, "CH_RING": RING,
            "CH_CELL_WORDS": CELL_WORDS}
