"""Composite ops, expanded into core ops at trace time (all along the last axis)."""

from __future__ import annotations

from ..dtypes import dtype
from ..errors import ValidationError
from . import api as F
from .tracer import Tensor, to_tensor

NEG_INF = float("-inf")


def keep_dims(r: Tensor, like: Tensor) -> Tensor:
    """Broadcast a last-axis reduction `r` back to `like`'s shape."""
    return F.broadcast(F.reshape(r, r.shape + (1,)), like.shape)


def _floats(x, op: str) -> Tensor:
    x = to_tensor(x, None, op)
    if x.dtype != dtype.f32:
        raise ValidationError(f"{op}: needs f32 logits, got {x.type!r}. Fix: cast(x, dtype.f32)")
    if not x.shape:
        raise ValidationError(f"{op}: needs rank >= 1, got a scalar. Fix: reshape(x, [1])")
    return x


def sanitize(logits) -> Tensor:
    """Logits with NaN replaced by -inf (every sampler treats NaN as -inf)."""
    x = _floats(logits, "sanitize")
    return F.select(F.isnan(x), NEG_INF, x)


def softmax(x) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) along the last axis."""
    x = _floats(x, "softmax")
    e = F.exp(x - keep_dims(F.reduce_max(x), x))
    return e / keep_dims(F.reduce_sum(e), x)


def log_softmax(x) -> Tensor:
    """x - max - log(sum(exp(x - max))) along the last axis."""
    x = _floats(x, "log_softmax")
    z = x - keep_dims(F.reduce_max(x), x)
    return z - keep_dims(F.log(F.reduce_sum(F.exp(z))), x)


def entropy(p) -> Tensor:
    """-sum(p * log p) over the last axis (terms with p <= 0 count 0)."""
    p = _floats(p, "entropy")
    return F.neg(F.reduce_sum(F.select(p > 0.0, p * F.log(p), 0.0)))


def mask_apply(logits, keep) -> Tensor:
    """Logits where `keep`, -inf elsewhere."""
    return F.select(keep, logits, NEG_INF)


def masked_argmax(logits, keep) -> Tensor:
    """Index of the largest kept logit (NaN as -inf; 0 when nothing is kept or finite)."""
    return F.reduce_argmax(mask_apply(logits, keep))


def gumbel_max(logits, state) -> Tensor:
    """A sample from softmax(logits): argmax(logits + gumbel(state)); NaN as -inf."""
    x = sanitize(logits)
    return F.reduce_argmax(x + F.gumbel(state, x.shape))


def order_key(x: Tensor) -> Tensor:
    """u32 keys that order like the values: NaN as -inf; f32 sign-flipped, i32 offset, u32 as is."""
    if x.dtype == dtype.f32:
        b = F.bitcast(F.select(F.isnan(x), NEG_INF, x), dtype.u32)
        neg = F.shr(b, 31) > 0
        return F.select(neg, F.bit_not(b), F.bit_or(b, 0x80000000))
    if x.dtype == dtype.i32:
        return F.bit_xor(F.bitcast(x, dtype.u32), 0x80000000)
    return x


def bisect_keys(key: Tensor, lead: tuple, too_big) -> Tensor:
    """Per row, the smallest u32 B with too_big(B) false (too_big must be monotone: true, then false).

    32 steps of reductions over the last axis; `lead` is the row shape.
    """
    lo = F.broadcast(F.cast(0, dtype.u32), lead)
    hi = F.broadcast(F.cast(F.broadcast(0xFFFFFFFF, []), dtype.u32), lead)
    for _ in range(32):
        mid = lo + (hi - lo) // 2
        big = too_big(mid)
        lo = F.select(big, mid + 1, lo)
        hi = F.select(big, hi, mid)
    return hi


def row_param(v, x: Tensor, op: str, dt) -> Tensor | None:
    """A per-row parameter tensor (shape = x's leading axes, dtype dt) checked for `op`; None for a Python number."""
    if not isinstance(v, Tensor):
        return None
    if v.dtype != dt or v.shape != x.shape[:-1]:
        raise ValidationError(f"{op}: a per-row parameter must be {dt.name} of shape {list(x.shape[:-1])} (one "
                              f"value per row), got {v.type!r}. Fix: reshape/cast it, or pass a Python number")
    return v


def top_k_mask(x, k) -> Tensor:
    """Bool mask keeping the k largest along the last axis (ties -> lower index; NaN as -inf).

    Without sorting: a bisection over order-preserving u32 keys finds B0, the smallest
    key with fewer than k elements above it (integer counts, so exact); everything above
    B0 is kept, and elements equal to B0 are kept in index order up to k. `k` may be an i32
    tensor of one value per row (device data); a row's k <= 0 or >= its length keeps every element.
    """
    x = to_tensor(x, None, "top_k_mask")
    rows_k = row_param(k, x, "top_k_mask", dtype.i32)
    if rows_k is None and (isinstance(k, bool) or not isinstance(k, int)
                           or not 1 <= k <= (x.shape[-1] if x.shape else 0)):
        raise ValidationError(f"top_k_mask: k={k!r} must be an int in 1..{x.shape[-1] if x.shape else 0}")
    key = order_key(x)
    lead = x.shape[:-1]

    def above(b):
        return F.reduce_sum(F.cast(key > keep_dims(b, x), dtype.i32))

    b0 = bisect_keys(key, lead, lambda b: above(b) >= k)
    tie = F.eq(key, keep_dims(b0, x))
    tie_i = F.cast(tie, dtype.i32)
    before = F.cumsum(tie_i) - tie_i  # ties with a lower index
    room = keep_dims(k - above(b0), x)
    keep = F.or_(key > keep_dims(b0, x), F.and_(tie, before < room))
    if rows_k is None:
        return keep
    off = F.or_(rows_k <= 0, rows_k >= x.shape[-1])
    return F.or_(keep, keep_dims(off, x))


def top_p_mask(logits, p) -> Tensor:
    """Keep a token when the probability mass before it in descending order is < p.

    Found without sorting: probabilities are non-negative floats, so their bit
    patterns order like their values. A 32-step bisection over bit patterns finds B0,
    the smallest pattern whose strictly-larger mass F(B0) is < p; every token above
    B0 is kept, every token below is not, and tokens exactly at B0 (ties) are kept in
    index order while F(B0) + (ties before) * prob < p. 33 reductions over the vocab
    instead of an O(n log^2 n) sort (about 10x faster on lavapipe at 49152 tokens).
    `p` may be an f32 tensor of one value per row (device data); a row's p >= 1 keeps every token.
    """
    x = _floats(logits, "top_p_mask")
    rows_p = row_param(p, x, "top_p_mask", dtype.f32)
    probs = softmax(sanitize(x))
    probs = F.select(F.isnan(probs), 0.0, probs)  # all -inf logits: nothing is likely
    bits = F.bitcast(probs, dtype.u32)
    lead = x.shape[:-1]

    def mass_above(b):
        return F.reduce_sum(F.select(bits > keep_dims(b, x), probs, 0.0))

    hi = bisect_keys(bits, lead, lambda b: mass_above(b) >= p)
    b0 = keep_dims(hi, x)
    tie = F.eq(bits, b0)
    tie_i = F.cast(tie, dtype.i32)
    before = F.cast(F.cumsum(tie_i) - tie_i, dtype.f32)  # ties with a lower index
    limit = p if rows_p is None else keep_dims(rows_p, x)
    keep_tie = F.and_(tie, keep_dims(mass_above(hi), x) + before * probs < limit)
    keep = F.or_(bits > b0, keep_tie)
    if rows_p is None:
        return keep
    return F.or_(keep, keep_dims(rows_p >= 1.0, x))


def min_p_mask(logits, p) -> Tensor:
    """Keep tokens with prob >= p * max_prob (`p` may be an f32 tensor of one value per row)."""
    x = sanitize(_floats(logits, "min_p_mask"))
    rows_p = row_param(p, x, "min_p_mask", dtype.f32)
    rel = F.exp(x - keep_dims(F.reduce_max(x), x))  # prob / max_prob
    return rel >= (p if rows_p is None else keep_dims(rows_p, x))


def top_a_mask(logits, a) -> Tensor:
    """Keep tokens with prob >= a * max_prob^2 (top-a sampling; `a` may be an f32 tensor of one value per row)."""
    x = sanitize(_floats(logits, "top_a_mask"))
    rows_a = row_param(a, x, "top_a_mask", dtype.f32)
    probs = softmax(x)
    pmax = keep_dims(F.reduce_max(probs), x)
    return probs >= pmax * pmax * (a if rows_a is None else keep_dims(rows_a, x))
