"""Session: one sequence decoding on a model -- its working set, prefill passes, decode loops, tokens.

A Session is made by Model.session() and lives as long as its working set. It keeps
what a sequence needs between calls: the prefill passes (one per chunk size, built
once), the decode loops of generate() and of every inferlet (built once per sampler
or grammar, so each epilogue is traced and compiled once), the tokens whose KV the
working set holds, and the token drawn but not yet embedded. model.generate, JSON
mode, speculative decoding and every inferlet run through it.
"""

from __future__ import annotations

import asyncio
import threading

from ..dtypes import dtype
from .channel import Channel
from . import waits
from .forward import ForwardPass, StateGeometry

PREFILL_CHUNKS = (256, 128, 64, 32, 16, 8, 4, 2, 1)  # few distinct pass shapes, each compiled once


class Prefiller:
    """Prefill passes for one working set: a pass per chunk size in PREFILL_CHUNKS, built once and reused."""

    def __init__(self, ws):
        self.ws = ws
        self.passes: dict = {}  # T -> (fwd, tokens channel)

    async def run(self, pipe, ids: list) -> None:
        """Append `ids` to the working set (no logits are read out)."""
        pos = 0
        while pos < len(ids):
            T = next(c for c in PREFILL_CHUNKS if c <= len(ids) - pos)
            fwd, ch = self.passes.get(T) or self._pass(T)
            ch.put(ids[pos: pos + T])
            await pipe.submit(fwd)
            pos += T

    def clear(self) -> None:
        """Drop token cells a stopped prefill left queued."""
        for _, ch in self.passes.values():
            ch.clear()

    def _pass(self, T: int):
        ch = Channel([T], dtype.i32).named(f"prompt[{T}]")
        fwd = ForwardPass()
        fwd.embed(ch, Channel.from_([0, T], dtype.u32))
        fwd.state([self.ws], StateGeometry.folding())
        self.passes[T] = (fwd, ch)
        return fwd, ch


def shared_prefix(a, b) -> int:
    """How many leading tokens the sequences a and b have in common."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


async def prefill_together(pipe, parts: list) -> None:
    """Prefill several sessions in one pass: parts = [(session, ids)], each session's ids appended to its KV.

    One multi-sequence pass (CSR offsets over the sessions' tokens) instead of one pass per
    session and chunk: the weights are read once for every joining prompt. A single part runs
    through that session's own prefill passes. The caller keeps the total token count to a
    few distinct sizes (the pass's scratch buffers are cached per size).
    """
    parts = [(sess, list(ids)) for sess, ids in parts if len(ids)]
    if len(parts) == 1:
        await parts[0][0].extend(parts[0][1])
        return
    if not parts:
        return
    sizes = [len(ids) for _, ids in parts]
    for sess, _ in parts:
        sess.sync()
        sess.prefill.clear()
    flat = [t for _, ids in parts for t in ids]
    offsets = [0]
    for n in sizes:
        offsets.append(offsets[-1] + n)
    tokens = Channel([len(flat)], dtype.i32).named(f"prefill[{len(flat)}]x{len(parts)}")
    fwd = ForwardPass()
    fwd.embed(tokens, Channel.from_(offsets, dtype.u32))
    fwd.state([sess.ws for sess, _ in parts], StateGeometry.folding())
    tokens.put(flat)
    await pipe.submit(fwd)
    for sess, ids in parts:
        sess.tokens += ids


class Session:
    """The decoding state of one working set of one model (see the module docstring)."""

    def __init__(self, model, ws, pipe):
        self.model = model
        self.ws = ws
        self.pipe = pipe
        self.prefill = Prefiller(ws)
        self.loops: dict = {}  # key -> a decode loop's passes and channels, built once
        self.tokens: list = []  # the tokens whose KV the working set holds, in order (-1: unknown)
        self.pending: int | None = None  # drawn but not embedded yet: the next pass embeds it first

    def __repr__(self) -> str:
        return f"<Session {len(self.tokens)}/{self.ws.max_tokens} tokens, {len(self.loops)} loops>"

    def loop(self, key, build):
        """The decode loop cached under `key`, made by build() on first use."""
        hit = self.loops.get(key)
        if hit is None:
            hit = self.loops[key] = build()
        return hit

    def sync(self) -> None:
        """Forget token identities if the working set was extended outside this session."""
        if len(self.tokens) != self.ws.length:
            self.tokens = [-1] * self.ws.length

    async def extend(self, ids: list) -> None:
        """Prefill `ids` after what the working set holds."""
        self.sync()
        self.prefill.clear()
        await self.prefill.run(self.pipe, list(ids))
        self.tokens += list(ids)

    async def start(self, ids: list) -> int:
        """Make the working set hold every token of `ids` but the last, reusing the longest common prefix.

        Returns how many tokens were reused. The last token is left for the decode loop to embed.
        """
        ids = list(ids)
        keep = self.common_prefix(ids)
        self.truncate(keep)
        self.prefill.clear()
        await self.prefill.run(self.pipe, ids[keep:-1])
        self.tokens = ids[:-1]
        return keep

    def common_prefix(self, ids: list) -> int:
        """How many leading tokens of `ids` (all but its last, which a decode loop must embed) the working set holds.

        Tokens of unknown identity (the working set was extended outside this session) match nothing.
        """
        self.sync()
        return shared_prefix(self.tokens, list(ids)[:-1])

    def truncate(self, n: int) -> None:
        """Keep the first n tokens of the working set (device and host views); a pending token is dropped."""
        self.sync()
        if n != self.ws.length:
            self.ws.set_length(n)  # raises a ValidationError beyond what it holds
        self.tokens = self.tokens[:n]
        self.pending = None

    def fork(self) -> "Session":
        """A session on a fork of this working set (its pages shared), knowing the same tokens and pending token."""
        other = self.model.session(self.model.gpu.fork(self.ws))
        other.tokens, other.pending = list(self.tokens), self.pending
        return other

    def embedded(self, tokens: list) -> None:
        """Record tokens that a decode loop appended to the working set."""
        self.tokens = self.tokens + list(tokens)


def _loop_running_here() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class PrivateLoop:
    """An event loop of piegpu's own, on which the blocking entry points run their coroutines.

    With no event loop running in the calling thread (a script, a worker thread) the loop
    runs in that thread, step by step, so Ctrl-C lands where it would in any asyncio program.
    Inside a running loop (a Jupyter cell, a qasync app, an async web handler) a thread's
    loop cannot be run again, so the private loop runs in a worker thread and the caller
    blocks until each coroutine is done -- as any synchronous call does. Either way:
    results and exceptions reach the caller; an exception raised in the caller while it
    waits (KeyboardInterrupt) cancels the coroutine, waits for its cleanup (the rewind of
    passes in flight), then propagates; a KeyboardInterrupt raised inside the loop (a
    callback) does the same. Nothing else runs on this loop, so its tasks wait for the device
    by blocking the thread (runtime/waits.py) whenever no other of its tasks is ready.
    """

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread: threading.Thread | None = None
        self._task = None
        self._raised: BaseException | None = None  # a BaseException that escaped the worker's loop
        if _loop_running_here():
            self.thread = threading.Thread(target=self._serve, name="piegpu-sync-loop", daemon=True)
            self.thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        while True:
            try:
                self.loop.run_forever()
                return
            except BaseException as e:  # e.g. a callback raised KeyboardInterrupt: hand it to the caller
                self._raised = e
                if self._task is not None and not self._task.done():
                    self._task.cancel()  # and keep serving, so the task can clean up

    def run(self, coro):
        """Run `coro` on this loop to completion; its result (or exception) in the calling thread."""
        if self.thread is None:
            task = self.loop.create_task(coro, context=waits.blocking_context())
            try:
                return self.loop.run_until_complete(task)
            except BaseException:
                # A KeyboardInterrupt raised inside the loop leaves the task pending: cancel it and
                # let it finish, so the passes in flight are rewound.
                if not task.done():
                    task.cancel()
                    try:
                        self.loop.run_until_complete(task)
                    except BaseException:  # the cancellation, or what the task raised meanwhile
                        pass
                raise
        done = threading.Event()

        def start():
            self._task = self.loop.create_task(coro, context=waits.blocking_context())
            self._task.add_done_callback(lambda _: done.set())
        self.loop.call_soon_threadsafe(start)
        try:
            done.wait()
        except BaseException:  # Ctrl-C while waiting: stop the work, let it rewind, then propagate
            self.loop.call_soon_threadsafe(lambda: self._task.cancel())  # runs after start() (FIFO)
            done.wait()
            raise
        task, self._task = self._task, None
        raised, self._raised = self._raised, None
        if raised is not None:
            raise raised
        return task.result()

    def close(self) -> None:
        """Finish async generators left on the loop, stop the worker (if any), close the loop."""
        if self.loop.is_closed():
            return
        try:
            if self.thread is None:
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            else:
                asyncio.run_coroutine_threadsafe(self.loop.shutdown_asyncgens(), self.loop).result()
        finally:
            if self.thread is not None:
                self.loop.call_soon_threadsafe(self.loop.stop)
                self.thread.join()
            self.loop.close()


def run_sync(coro):
    """Run a coroutine to completion from synchronous code, wherever that is called: the blocking entry points.

    With no event loop running in this thread it runs on a fresh loop here; inside a running
    loop (Jupyter, qasync, an async handler) on a fresh loop in a worker thread (PrivateLoop).
    """
    runner = PrivateLoop()
    try:
        return runner.run(coro)
    finally:
        runner.close()


async def _anext(agen):
    return await agen.__anext__()


def iterate_sync(agen):
    """Iterate an async generator from synchronous code, wherever that is called (see run_sync).

    Each item is produced on one PrivateLoop kept for the whole iteration; leaving the loop
    early (break, an exception in the loop body, the iterator closed or collected) closes
    the async generator there, so its cleanup (rewinding passes in flight) runs.
    """
    runner = PrivateLoop()
    try:
        while True:
            try:
                item = runner.run(_anext(agen))
            except StopAsyncIteration:
                return
            yield item
    finally:
        try:
            runner.run(agen.aclose())
        finally:
            runner.close()
