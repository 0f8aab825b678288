"""The eta RNG: a counter-based 32-bit hash, bit-identical on every backend.

The draw for flat element index i of `rng(state, shape)` with state = [key, counter]:

    mix32(x)  = lowbias32: x ^= x >> 16; x *= 0x7feb352d; x ^= x >> 15; x *= 0x846ca68b; x ^= x >> 16
    s         = mix32(mix32(key ^ 0x9e3779b9) + counter)     # the stream of this (key, counter)
    t         = mix32(s ^ 0x85ebca6b)                         # a second word of the stream
    bits      = mix32(mix32(i + s) ^ t)
    u         = (f32(bits >> 9) + 0.5) * 2^-23                # in (0, 1), never 0 or 1

Every step is 32-bit integer arithmetic modulo 2^32 (WGSL has no 64-bit ints), and the
float conversion is exact, so every backend draws the same bits and the same f32.
THIS FORMULA IS ABI: changing it changes every seeded sample; tests pin known values.
"""

from __future__ import annotations

import numpy as np

KEY_SALT = 0x9E3779B9
STREAM_SALT = 0x85EBCA6B
M1 = 0x7FEB352D
M2 = 0x846CA68B


def mix32(x: np.ndarray) -> np.ndarray:
    """lowbias32 on uint32 arrays (a bijection of u32)."""
    x = np.asarray(x, dtype=np.uint32)
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint32(16))
        x = x * np.uint32(M1)
        x = x ^ (x >> np.uint32(15))
        x = x * np.uint32(M2)
        x = x ^ (x >> np.uint32(16))
    return x


def rng_bits(key: int, counter: int, index: np.ndarray) -> np.ndarray:
    """The 32 random bits of each flat element index for state [key, counter]."""
    with np.errstate(over="ignore"):
        s = mix32(mix32(np.uint32(key) ^ np.uint32(KEY_SALT)) + np.uint32(counter))
        t = mix32(s ^ np.uint32(STREAM_SALT))
        return mix32(mix32(np.asarray(index, np.uint32) + s) ^ t)


def rng_uniform(state, shape) -> np.ndarray:
    """The f32 uniforms of rng(state, shape) in the reference implementation."""
    state = np.asarray(state, dtype=np.uint32).reshape(-1)
    n = int(np.prod(shape)) if shape else 1
    bits = rng_bits(int(state[0]), int(state[1]), np.arange(n, dtype=np.uint32))
    u = ((bits >> np.uint32(9)).astype(np.float32) + np.float32(0.5)) * np.float32(2.0 ** -23)
    return u.reshape(shape)
