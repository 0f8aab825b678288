"""ForwardPass + Pipeline: the API.md device loop, fusion (no logits to the host, one submit per pass),
stop semantics and rewind, device-side channel ops, failure handling."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from piegpu import (Channel, ChannelError, ForwardPass, StateGeometry, ValidationError, channel_capacity, dtype,
                    eta)
from piegpu.runtime import waits
from piegpu.runtime.window import default_group
from piegpu.eta import intrinsics, reduce_argmax, reshape
from tests.helpers import tiny_config, tiny_model


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


@pytest.fixture(scope="module")
def tiny(gpu):
    return tiny_model(tiny_config(layers=2, vocab=300), seed=11)


def prefill(pipe, ws, ids):
    fwd = ForwardPass()
    fwd.embed(Channel.from_(ids, dtype.i32), Channel.from_([0, len(ids)], dtype.u32))
    fwd.state([ws], StateGeometry.folding())
    run(pipe.submit(fwd))


def greedy_loop(ws, first_token):
    """The API.md device loop: argmax fed back on the device, tokens to the host."""
    token_in = Channel.from_([first_token], dtype.i32)
    token_out = Channel([1], dtype.i32).capacity(channel_capacity())
    fwd = ForwardPass()
    fwd.embed(token_in, Channel.from_([0, 1], dtype.u32))
    fwd.state([ws], StateGeometry.folding())

    @fwd.epilogue
    def _():
        token = reshape(reduce_argmax(intrinsics.output(0, "logits")), [1])
        token_in.put(token)
        token_out.put(token)
    return fwd, token_in, token_out


def taking(token_out, into: list):
    """run_ahead's on_token that takes each pass's token into `into` and goes on."""
    async def on_token():
        into.append(await token_out.take_scalar())
        return True
    return on_token


def host_greedy(model, ids, n):
    """Greedy decoding with a host round trip per token: full logits read back, numpy argmax."""
    ws = model.working_set(128)
    logits = model.gpu.forward(ws, ids)[0]
    out = []
    for _ in range(n):
        t = int(np.argmax(logits))
        out.append(t)
        logits = model.gpu.forward(ws, [t])[0]
    return out


@pytest.mark.parametrize("window, record_ahead, group", [(4, False, None), (4, True, 1), (4, True, None),
                                                          (1, True, None), (8, False, 4), (8, True, 8)])
def test_device_loop_matches_host_round_trip(tiny, window, record_ahead, group):
    """Passes submitted one by one or in groups (one command buffer, one submit) give host greedy's tokens."""
    model, _ = tiny
    ids = [5, 17, 42, 7]
    pipe = model.pipeline(window=window, record_ahead=record_ahead, group=group)
    ws = device_vs_host_greedy(model, pipe, ids, 20, pipe.stats)
    assert ws.length == len(ids) + 20 - 1
    g = group or default_group(window)
    submits = pipe.stats.submits - 1  # (the prefill's)
    assert pipe.stats.passes - 1 == 20 and submits == -(-20 // g)
    # the first pass of every submit after the first window was recorded while earlier passes ran
    assert pipe.stats.recorded_ahead == (submits - window // g if record_ahead else 0)


def test_default_model_device_loop_matches_host_round_trip(default_model):
    ids = default_model.tokenizer.encode("Once upon a time").ids
    device_vs_host_greedy(default_model, default_model.pipeline(), ids, 16)


def device_vs_host_greedy(model, pipe, ids: list, n: int, stats=None):
    """Run the device loop for n tokens after prefilling ids; assert it equals host greedy; the working set."""
    ws = model.working_set(len(ids) + n + 8)
    prefill(pipe, ws, ids[:-1])
    if stats is not None:
        assert (stats.passes, stats.submits) == (1, 1)
    fwd, _, token_out = greedy_loop(ws, ids[-1])
    got = []
    on_token = taking(token_out, got)
    assert run(pipe.run_ahead(fwd, n, on_token)) == n
    assert got == host_greedy(model, ids, n)
    return ws


@pytest.mark.parametrize("group", [1, 2, 4])
def test_fusion_one_submit_per_group_no_logits_readback_no_wait_inside_window(tiny, monkeypatch, group):
    import wgpu
    model, _ = tiny
    pipe = model.pipeline(window=4, record_ahead=True, group=group)  # several passes in flight, as on a GPU
    ws = model.working_set(128)
    prefill(pipe, ws, [1, 2, 3])
    fwd, _, token_out = greedy_loop(ws, 4)
    pipe.prepare(fwd)
    events = []
    enc_cls = type(model.gpu.device.create_command_encoder())
    queue_cls = type(model.gpu.device.queue)
    buf_cls = type(token_out.ensure(model.gpu.device))
    orig_copy, orig_submit, orig_map = enc_cls.copy_buffer_to_buffer, queue_cls.submit, buf_cls.map_async
    orig_read = queue_cls.read_buffer

    def copy(self, src, src_off, dst, dst_off, size):
        events.append(("copy", size))
        return orig_copy(self, src, src_off, dst, dst_off, size)

    def submit(self, bufs):
        events.append(("submit", len(bufs)))
        return orig_submit(self, bufs)

    def map_async(self, *a, **k):
        events.append(("wait", self.size))
        return orig_map(self, *a, **k)

    def read_buffer(self, *a, **k):
        events.append(("read_buffer", 0))
        return orig_read(self, *a, **k)

    orig_native_submit, orig_wait = waits.submit, waits.wait_submission

    def native_submit(device, bufs):  # submitted for their submission index (runtime/waits.py)
        events.append(("submit", len(bufs)))
        return orig_native_submit(device, bufs)

    async def wait_submission(device, index):
        if not waits.finished(device, index):  # (else it returns at once)
            events.append(("wait", index))
        return await orig_wait(device, index)

    monkeypatch.setattr(enc_cls, "copy_buffer_to_buffer", copy)
    monkeypatch.setattr(queue_cls, "submit", submit)
    monkeypatch.setattr(buf_cls, "map_async", map_async)
    monkeypatch.setattr(queue_cls, "read_buffer", read_buffer)
    monkeypatch.setattr(waits, "submit", native_submit)
    monkeypatch.setattr(waits, "wait_submission", wait_submission)
    before, ahead = pipe.stats.passes, pipe.stats.recorded_ahead

    async def on_token():
        await token_out.take_scalar()
        return True
    n = run(pipe.run_ahead(fwd, 12, on_token))
    passes = pipe.stats.passes - before
    submits = [e for e in events if e[0] == "submit"]
    # the first pass of every submit after the first window was recorded while earlier ones ran
    assert pipe.stats.recorded_ahead - ahead == len(submits) - pipe.window // group
    vocab_bytes = model.config.vocab_size * 4
    assert n == 12 and passes == 12 and len(submits) == passes // group
    assert all(size < vocab_bytes for kind, size in events if kind == "copy"), "logits-sized copy to the host"
    assert not [e for e in events if e[0] == "read_buffer"]
    first_wait = next(i for i, e in enumerate(events) if e[0] == "wait")
    assert sum(1 for e in events[:first_wait] if e[0] == "submit") == pipe.window // group  # no wait inside the window
    # one wait a submit: the reads of a group's later passes find their submission finished
    assert sum(1 for e in events if e[0] == "wait") == len(submits)


def windowed_loop(model, ids: list, n: int, window: int = 4) -> tuple:
    """(host greedy tokens, a pipeline with `window` passes in flight (submitted in groups of half that), the
    prefilled working set, greedy_loop(...))."""
    pipe = model.pipeline(window=window)  # several passes in flight
    ws = model.working_set(128)
    prefill(pipe, ws, ids[:-1])
    return host_greedy(model, ids, n), pipe, ws, greedy_loop(ws, ids[-1])


@pytest.mark.parametrize("window", [4, 8])
def test_stop_token_mid_window_and_continuation(tiny, window):
    model, _ = tiny
    ids = [5, 17, 42, 7]
    stop_at = 5  # stop when the 5th token arrives, with passes still in flight (inside the second group of 4)
    expected, pipe, ws, (fwd, token_in, token_out) = windowed_loop(model, ids, 12, window)
    got = []

    async def on_token():
        got.append(await token_out.take_scalar())
        return len(got) < stop_at
    calls = run(pipe.run_ahead(fwd, 12, on_token))
    assert calls == stop_at and got == expected[:stop_at]
    assert ws.length == len(ids) + stop_at - 1  # the stop token itself is not embedded yet
    assert token_out.count == 0 and token_in.count == 1
    # a later run on the same working set continues exactly where the host stopped
    more = []
    on_more = taking(token_out, more)
    run(pipe.run_ahead(fwd, 7, on_more))
    assert got + more == expected


@pytest.mark.parametrize("window", [4, 8])
def test_exception_in_on_token_rewinds(tiny, window):
    model, _ = tiny
    ids = [9, 8, 7]
    expected, pipe, ws, (fwd, _, token_out) = windowed_loop(model, ids, 8, window)
    got = []

    async def on_token():
        got.append(await token_out.take_scalar())
        if len(got) == 3:
            raise KeyboardInterrupt
        return True
    with pytest.raises(KeyboardInterrupt):
        run(pipe.run_ahead(fwd, 8, on_token))
    assert ws.length == len(ids) + 3 - 1
    on_more = taking(token_out, got)
    run(pipe.run_ahead(fwd, 5, on_more))
    assert got == expected


def test_a_working_set_that_fills_inside_a_group_ends_it_there(tiny):
    """Room for 6 more positions at window 8 (groups of 4): the second group holds the 2 passes that fit; the run
    ends there, the host takes all 6 tokens (host greedy's), then the working set is full is raised."""
    model, _ = tiny
    ids = [5, 17, 42, 7]
    pipe = model.pipeline(window=8)
    ws = model.working_set(len(ids) - 1 + 6)
    prefill(pipe, ws, ids[:-1])
    fwd, _, token_out = greedy_loop(ws, ids[-1])
    got = []
    on_token = taking(token_out, got)
    before = pipe.stats.submits
    with pytest.raises(ValidationError, match="the working set is full: 9 \\+ 1 tokens exceed its 9 positions"):
        run(pipe.run_ahead(fwd, 10, on_token))
    assert pipe.stats.submits - before == 2 and got == host_greedy(model, ids, 6)
    assert ws.length == len(ids) - 1 + len(got)  # every pass computed was accepted


def test_an_error_while_encoding_a_group_submits_none_of_it_and_the_run_continues_exactly(tiny, monkeypatch):
    """Recording the second pass of the second group fails (window 8, groups of 4): nothing of that group is
    submitted or left in the channels' host mirror, the first group's passes are rewound to what the host took,
    and a later run continues with host greedy's tokens."""
    from piegpu.runtime import submission
    model, _ = tiny
    ids = [5, 17, 42, 7]
    expected, pipe, ws, (fwd, token_in, token_out) = windowed_loop(model, ids, 12, 8)
    real, calls = submission.record_into, []

    def failing(*a):
        calls.append(1)
        if len(calls) == 6:
            raise RuntimeError("recording failed")
        return real(*a)
    monkeypatch.setattr(submission, "record_into", failing)
    got = []
    on_token = taking(token_out, got)
    before = pipe.stats.submits
    with pytest.raises(RuntimeError, match="recording failed"):
        run(pipe.run_ahead(fwd, 12, on_token))
    assert pipe.stats.submits - before == 1 and token_out.count == 0 and token_in.count == 1
    assert ws.length == len(ids) - 1 + len(got)
    monkeypatch.setattr(submission, "record_into", real)
    on_more = taking(token_out, got)
    run(pipe.run_ahead(fwd, 12 - len(got), on_more))
    assert got == expected


def test_device_channel_ops_take_read_put(tiny):
    model, _ = tiny
    pipe = model.pipeline()
    ws = model.working_set(64)
    counter = Channel.from_([10], dtype.i32).named("counter")
    peek = Channel.from_([100], dtype.i32).named("peek")
    out = Channel([3], dtype.i32).capacity(8).named("out")
    tokens = Channel([1], dtype.i32).capacity(4)
    fwd = ForwardPass()
    fwd.embed(tokens, Channel.from_([0, 1], dtype.u32))
    fwd.state([ws], StateGeometry.folding())

    @fwd.epilogue
    def _():
        c = counter.take()
        p = peek.read()
        counter.put(c + 1)
        out.put(eta.concat([c, p, reshape(reduce_argmax(intrinsics.output(0)), [1])]))

    for t in (3, 4, 5):
        tokens.put([t])
        run(pipe.submit(fwd))
    rows = [run(out.take()).tolist() for _ in range(3)]
    assert [r[:2] for r in rows] == [[10, 100], [11, 100], [12, 100]]
    assert peek.count == 1 and counter.count == 1


def test_blocked_pass_is_a_channel_error_not_a_hang(tiny):
    model, _ = tiny
    pipe = model.pipeline()
    ws = model.working_set(64)
    prefill(pipe, ws, [1, 2])
    fwd, _, token_out = greedy_loop(ws, 3)

    async def on_token():  # never takes: token_out fills up and no pass in flight can drain it
        return True
    with pytest.raises(ChannelError, match="cannot submit pass"):
        run(pipe.run_ahead(fwd, 50, on_token))
    empty = ForwardPass()
    empty.embed(Channel([1], dtype.i32), Channel.from_([0, 1], dtype.u32))
    empty.state([ws], StateGeometry.folding())
    with pytest.raises(ChannelError, match="holds 0 cells"):
        run(pipe.submit(empty))


def test_failed_submit_poisons_the_pass_channels(tiny, monkeypatch):
    model, _ = tiny
    pipe = model.pipeline(window=4)  # several passes in flight
    ws = model.working_set(64)
    prefill(pipe, ws, [1, 2])
    fwd, _, token_out = greedy_loop(ws, 3)
    pipe.prepare(fwd)
    queue_cls = type(model.gpu.device.queue)

    def boom(*_):
        raise RuntimeError("simulated device loss")
    monkeypatch.setattr(queue_cls, "submit", boom)
    monkeypatch.setattr(waits, "submit", boom)  # passes are submitted for their index (runtime/waits.py)
    with pytest.raises(RuntimeError, match="simulated device loss"):
        run(pipe.submit(fwd))
    with pytest.raises(ChannelError, match="simulated device loss"):
        run(token_out.take())


def test_forward_pass_validation(tiny):
    model, _ = tiny
    pipe = model.pipeline()
    fwd = ForwardPass()
    with pytest.raises(ValidationError, match="embeds nothing"):
        run(pipe.submit(fwd))
    fwd.embed(Channel.from_([1, 2], dtype.i32), Channel.from_([0, 3], dtype.u32))
    fwd.state([model.working_set(16)], StateGeometry.folding())
    with pytest.raises(ValidationError, match="indptr \\[0, 3\\] does not describe the 2"):
        run(pipe.submit(fwd))
    with pytest.raises(ValidationError, match="Channels"):
        ForwardPass().embed([1, 2], None)
