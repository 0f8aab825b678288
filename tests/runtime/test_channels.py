"""Channels: FIFO order across wrap-around, capacity, ChannelFull, takes that can never fill, poisoning."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from piegpu import Channel, ChannelError, ChannelFull, ValidationError, dtype
from piegpu.runtime.channel import HISTORY


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


def test_fifo_order_across_wrap_around(gpu):
    ch = Channel([3], dtype.f32).capacity(4).named("fifo")
    ch.ensure(gpu.device)
    got, sent = [], []
    for i in range(3 * (4 + HISTORY) + 5):  # many trips around the ring
        v = np.array([i, -i, i * 0.5], np.float32)
        ch.put(v)
        sent.append(v)
        if i % 3 == 2:
            while ch.count:
                got.append(run(ch.take()))
    while ch.count:
        got.append(run(ch.take()))
    assert len(got) == len(sent) and all(np.array_equal(a, b) for a, b in zip(got, sent))


def test_capacity_and_channel_full():
    ch = Channel([1], dtype.i32).capacity(2).named("small")
    ch.put([1])
    ch.put([2])
    with pytest.raises(ChannelFull, match="'small' is full \\(2/2"):
        ch.put([3])
    assert run(ch.take_scalar()) == 1
    ch.put([3])
    assert [run(ch.take_scalar()), run(ch.take_scalar())] == [2, 3]


def test_take_that_can_never_fill_raises_instead_of_hanging():
    ch = Channel([1], dtype.i32).named("never")
    with pytest.raises(ChannelError, match="empty and no submitted pass puts into it"):
        run(ch.take())
    with pytest.raises(ChannelError, match="could never complete"):
        run(ch.read())


def test_read_does_not_consume():
    ch = Channel.from_([7, 8], dtype.u32)
    assert run(ch.read()).tolist() == [7, 8]
    assert ch.count == 1 and run(ch.take()).tolist() == [7, 8] and ch.count == 0


def test_put_checks_shape_dtype_and_range():
    ch = Channel([2], dtype.i32).named("typed")
    with pytest.raises(ValidationError, match="shape \\[3\\] does not match the cell shape \\[2\\]"):
        ch.put([1, 2, 3])
    with pytest.raises(ValidationError, match="float64 values for a i32 channel"):
        ch.put([1.5, 2.0])
    with pytest.raises(ValidationError, match="do not fit i32"):
        ch.put([1 << 40, 0])
    b = Channel([1], dtype.bool)
    with pytest.raises(ValidationError, match="bool channel"):
        b.put([1])


def test_capacity_after_use_is_an_error(gpu):
    ch = Channel([1], dtype.f32)
    ch.ensure(gpu.device)
    with pytest.raises(ChannelError, match="already in use"):
        ch.capacity(4)
    with pytest.raises(ValidationError):
        Channel([1], dtype.f32).capacity(0)


def test_take_scalar_needs_one_value():
    ch = Channel.from_([1, 2], dtype.i32)
    with pytest.raises(ChannelError, match="take_scalar"):
        run(ch.take_scalar())


def test_poisoned_channel_raises_with_cause():
    ch = Channel.from_([1], dtype.i32).named("victim")
    cause = RuntimeError("the pass failed: device lost")
    ch.poison(cause)
    with pytest.raises(ChannelError, match="poisoned by a failed pass: the pass failed") as e:
        run(ch.take())
    assert e.value.__cause__ is cause
    with pytest.raises(ChannelError, match="poisoned"):
        ch.put([2])
    ch.clear()  # clearing recovers the channel
    ch.put([3])
    assert run(ch.take_scalar()) == 3
