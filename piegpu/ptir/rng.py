"""Pie's RNG contract (compiler/ir rng.rs) built from eta's 32-bit integer ops, bit for bit.

Pie draws element j of `rng_keyed([key, ctr], shape)` as

    seed = splitmix64(key << 32 | ctr)
    x    = seed + 0x9E3779B97F4A7C15 * (j + 1)                       (mod 2^64)
    bits = splitmix64(x) >> 40                                        (24 bits)
    u    = min((f32(bits) + 0.5) * 2^-24, 1 - 2^-24)                 in (0, 1)
    splitmix64(v): v ^= v >> 27; v *= 0x3C79AC492BA7B653; v ^= v >> 33; v *= 0x1C69B3F74AC4AE35; v ^= v >> 27

and gumbel = -ln(-ln(u)). An ambient `rng(stream)` draw uses seed = (fire seed ^ 0xA5A5A5A5) ^
splitmix64(stream * 0x9E3779B97F4A7C15). WGSL has no 64-bit integers, so a 64-bit word is a
(hi, lo) pair of u32 tensors here and the 64-bit multiply is built from 16-bit limbs: every
backend, and the interpreter, computes exactly Pie's bits.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import dtype
from ..eta import api as F
from ..eta.tracer import Tensor, constant

MASK64 = (1 << 64) - 1
ROUNDS = ((27, 0x3C79AC492BA7B653), (33, 0x1C69B3F74AC4AE35), (27, None))
LANE_STRIDE = 0x9E3779B97F4A7C15
AMBIENT_XOR = 0xA5A5A5A5
UNIFORM_MAX = np.float32(1.0) - np.float32(2.0 ** -24)


# ---- the reference, on Python ints (pins known values in the tests) -----------------------

def splitmix64(v: int) -> int:
    """Pie's three mixing rounds on a 64-bit int."""
    for shift, mult in ROUNDS:
        v ^= v >> shift
        if mult is not None:
            v = (v * mult) & MASK64
    return v


def keyed_seed(key: int, counter: int) -> int:
    """The 64-bit seed of a keyed draw from state [key, counter]."""
    return splitmix64(((key & 0xFFFFFFFF) << 32) | (counter & 0xFFFFFFFF))


def ambient_seed(fire_seed: int, stream: int) -> int:
    """The 64-bit seed of an ambient `rng` op of stream `stream` under a fire's seed."""
    return ((fire_seed & 0xFFFFFFFF) ^ AMBIENT_XOR) ^ splitmix64((stream * LANE_STRIDE) & MASK64)


def uniform_reference(seed64: int, n: int) -> np.ndarray:
    """Pie's uniform draws for lanes 0..n-1 under a 64-bit seed (numpy f32)."""
    bits = np.array([splitmix64((seed64 + LANE_STRIDE * (j + 1)) & MASK64) >> 40 for j in range(n)], np.uint32)
    raw = (bits.astype(np.float32) + np.float32(0.5)) * np.float32(2.0 ** -24)
    return np.minimum(raw, UNIFORM_MAX)


# ---- the same formula in eta ops over (hi, lo) u32 pairs ------------------------------------

def _shr(w: tuple, s: int) -> tuple:
    hi, lo = w
    if s >= 32:
        return hi * 0, F.shr(hi, s - 32)
    return F.shr(hi, s), F.bit_or(F.shr(lo, s), F.shl(hi, 32 - s))


def _xor(a: tuple, b: tuple) -> tuple:
    return F.bit_xor(a[0], b[0]), F.bit_xor(a[1], b[1])


def _mul_wide(a: Tensor, b: int) -> tuple:
    """The full 64-bit product of u32 tensor `a` and u32 constant `b`, as (hi, lo)."""
    a0, a1 = F.bit_and(a, 0xFFFF), F.shr(a, 16)
    b0, b1 = b & 0xFFFF, b >> 16
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = F.shr(p00, 16) + F.bit_and(p01, 0xFFFF) + F.bit_and(p10, 0xFFFF)
    hi = p11 + F.shr(p01, 16) + F.shr(p10, 16) + F.shr(mid, 16)
    return hi, F.bit_or(F.shl(mid, 16), F.bit_and(p00, 0xFFFF))


def _mul(w: tuple, c: int) -> tuple:
    """(w * c) mod 2^64 for a 64-bit constant c."""
    hi, lo = w
    ch, cl = c >> 32, c & 0xFFFFFFFF
    phi, plo = _mul_wide(lo, cl)
    return phi + hi * cl + lo * ch, plo


def _add(a: tuple, b: tuple) -> tuple:
    lo = a[1] + b[1]
    carry = F.cast(lo < a[1], dtype.u32)
    return a[0] + b[0] + carry, lo


def _splitmix(w: tuple) -> tuple:
    for shift, mult in ROUNDS:
        w = _xor(w, _shr(w, shift))
        if mult is not None:
            w = _mul(w, mult)
    return w


def _lanes(seed: tuple, shape: tuple) -> Tensor:
    """Pie's uniforms of `shape` for a (hi, lo) seed broadcast over the lanes."""
    n = 1
    for d in shape:
        n *= d
    j1 = F.iota(n) + 1
    hi, lo = F.broadcast(seed[0], (n,)), F.broadcast(seed[1], (n,))
    x = _add((hi, lo), _mul((j1 * 0, j1), LANE_STRIDE))
    bits = F.shr(_splitmix(x)[0], 8)
    raw = (F.cast(bits, dtype.f32) + 0.5) * float(2.0 ** -24)
    return F.reshape(F.minimum(raw, float(UNIFORM_MAX)), shape)


def keyed_uniform(state: Tensor, shape: tuple) -> Tensor:
    """Pie's `rng_keyed(state, shape)` uniform draws: state is u32 [2] = [key, counter]."""
    key = F.reshape(F.slice_last(state, 0, 1), ())
    ctr = F.reshape(F.slice_last(state, 1, 1), ())
    return _lanes(_splitmix((key, ctr)), shape)


def ambient_uniform(seed64: int, shape: tuple) -> Tensor:
    """Pie's ambient `rng` draws under a 64-bit seed known at translation time."""
    hi, lo = constant(seed64 >> 32, dtype.u32), constant(seed64 & 0xFFFFFFFF, dtype.u32)
    return _lanes((hi, lo), shape)


def gumbel(u: Tensor) -> Tensor:
    """Pie's Gumbel transform of uniforms: -ln(-ln(u))."""
    return F.neg(F.log(F.neg(F.log(u))))
