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

from ..dtypes import dtype
from .channel import Channel
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
        if len(self.tokens) != self.ws.length:  # unknown contents: start over
            self.tokens = []
            self.ws.reset()
        keep = 0
        for a, b in zip(self.tokens, ids[:-1]):
            if a != b:
                break
            keep += 1
        if keep < self.ws.length:
            self.ws.set_length(keep)
        self.tokens = ids[:keep]
        self.pending = None
        self.prefill.clear()
        await self.prefill.run(self.pipe, ids[keep:-1])
        self.tokens = ids[:-1]
        return keep

    def fork(self) -> "Session":
        """A session on a device-side copy of this working set (ws.fork()), knowing the same tokens."""
        other = self.model.session(self.ws.fork())
        other.tokens, other.pending = list(self.tokens), self.pending
        return other

    def embedded(self, tokens: list) -> None:
        """Record tokens that a decode loop appended to the working set."""
        self.tokens = self.tokens + list(tokens)


def run_sync(coro):
    """Run a coroutine to completion on a fresh event loop (closed afterwards): the blocking entry points."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()
