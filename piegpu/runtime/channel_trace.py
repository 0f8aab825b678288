"""A Channel's take, read and put inside a traced epilogue: the eta ops they record (runtime/channel.py)."""

from __future__ import annotations

from math import prod

from ..errors import ValidationError
from ..eta import tracer


def trace_take(ch, b, consume: bool):
    """The traced oldest cell of `ch` (chan_take, consumed when the pass commits; chan_read keeps it)."""
    if consume and ch.is_constant:
        raise ValidationError(f"Channel{' ' + repr(ch.name) if ch.name else ''} is constant: passes read() it. "
                              "Fix: ch.read() instead of ch.take()")
    slot = b.slot(ch, ch.cell)
    if not consume:
        return b.add("chan_read", [], slot=slot, dtype=ch.dtype, shape=ch.shape)
    seq = b.takes.get(slot, 0)
    b.takes[slot] = seq + 1
    return b.add("chan_take", [], slot=slot, seq=seq, dtype=ch.dtype, shape=ch.shape)


def trace_put(ch, b, value) -> None:
    """Record a put of `value` (a tensor of the channel's dtype and cell size) into `ch` (chan_put)."""
    if ch.is_constant:
        raise ValidationError(f"Channel{' ' + repr(ch.name) if ch.name else ''} is constant: passes only read() "
                              "it. Fix: put into another channel")
    v = tracer.to_tensor(value, None, "put") if not isinstance(value, tracer.Tensor) else value
    label = f" {ch.name!r}" if ch.name else ""
    if v.dtype != ch.dtype:
        raise ValidationError(f"Channel{label}.put: tensor {v.type!r} but the channel holds "
                              f"{ch.dtype.name}. Fix: cast(x, dtype.{ch.dtype.name})")
    if v.shape != ch.shape:
        if prod(v.shape or (1,)) == prod(ch.shape or (1,)):
            from ..eta.api import reshape
            v = reshape(v, list(ch.shape))
        else:
            raise ValidationError(f"Channel{label}.put: tensor {v.type!r} does not fit cells of shape "
                                  f"{list(ch.shape)}. Fix: reshape it to {list(ch.shape)}")
    slot = b.slot(ch, ch.cell)
    seq = b.puts.get(slot, 0)
    b.puts[slot] = seq + 1
    b.add("chan_put", [v], slot=slot, seq=seq)
