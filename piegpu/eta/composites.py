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


def _rank_threshold(x: Tensor, order_idx: Tensor, pos: Tensor) -> Tensor:
    """Keep mask of the elements ranked at or before position `pos` in descending order.

    Order is (value desc, index asc) with NaN as -inf, so the kept set is exactly the
    first pos+1 elements of sort_desc; computed elementwise from the boundary element.
    """
    key = F.select(F.isnan(x), NEG_INF, x) if x.dtype == dtype.f32 else x
    b_idx = F.take_last(order_idx, pos)  # [..., 1]: index of the boundary element
    b_val = F.take_last(key, b_idx)
    col = F.cast(F.broadcast(F.iota(x.shape[-1]), x.shape), dtype.i32)
    bv, bi = F.broadcast(b_val, x.shape), F.broadcast(b_idx, x.shape)
    return F.or_(key > bv, F.and_(F.eq(key, bv), col <= bi))


def top_k_mask(x, k: int) -> Tensor:
    """Bool mask keeping the k largest along the last axis (ties -> lower index)."""
    x = to_tensor(x, None, "top_k_mask")
    _, idx = F.top_k(x, k)
    pos = F.broadcast(k - 1, x.shape[:-1] + (1,))
    return _rank_threshold(x, idx, pos)


def top_p_mask(logits, p: float) -> Tensor:
    """Keep a token when the probability mass before it in descending order is < p."""
    x = _floats(logits, "top_p_mask")
    probs = softmax(sanitize(x))
    sorted_p, idx = F.sort_desc(probs)
    incl = F.cumsum(sorted_p)
    n = x.shape[-1]
    zero = F.broadcast(0.0, x.shape[:-1] + (1,))
    before = F.concat([zero, F.slice_last(incl, 0, n - 1)]) if n > 1 else zero
    kept = F.reduce_sum(F.cast(before < p, dtype.i32))  # a prefix of the sorted order
    pos = F.reshape(F.maximum(kept - 1, 0), kept.shape + (1,))
    return F.and_(_rank_threshold(probs, idx, pos), F.broadcast(F.reshape(kept > 0, kept.shape + (1,)), x.shape))


def min_p_mask(logits, p: float) -> Tensor:
    """Keep tokens with prob >= p * max_prob."""
    x = sanitize(_floats(logits, "min_p_mask"))
    rel = F.exp(x - keep_dims(F.reduce_max(x), x))  # prob / max_prob
    return rel >= p


def top_a_mask(logits, a: float) -> Tensor:
    """Keep tokens with prob >= a * max_prob^2 (top-a sampling)."""
    x = sanitize(_floats(logits, "top_a_mask"))
    probs = softmax(x)
    pmax = keep_dims(F.reduce_max(probs), x)
    return probs >= pmax * pmax * a
