"""A model's reusable decoding session for inferlets: its pipeline, one working set, prefill passes.

Inferlets run one sequence at a time; building passes, channels and working sets once
per model (and compiling each epilogue once) keeps a second call as cheap as the
decode itself. The working set keeps the KV state of the last call: a new prompt
that shares a prefix with it (a chat template's system prompt) prefills only the rest.
"""

from __future__ import annotations

import asyncio
import weakref

from ..errors import ValidationError
from ..generate import Prefiller

ROUND = 256
_SESSIONS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class Session:
    """The pipeline, working set and prefill passes one model's inferlets share; `loops` caches their passes."""

    def __init__(self, model, max_tokens: int):
        if model._pipeline is None:
            model._pipeline = model.pipeline()
        self.model = model
        self.pipe = model._pipeline
        self.ws = model.working_set(max_tokens)
        self.prefill = Prefiller(self.ws)
        self.loops: dict = {}
        self.tokens: list = []  # the tokens whose KV the working set holds, in order

    async def start(self, ids: list) -> int:
        """Make the working set hold every token of `ids` but the last; returns how many were reused."""
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
        for fwd, ch in self.prefill.passes.values():
            ch.clear()
        await self.prefill.run(self.pipe, ids[keep:-1])
        self.tokens = ids[:-1]
        return keep

    def embedded(self, tokens: list) -> None:
        """Record the tokens the inferlet's passes appended to the working set since start()."""
        self.tokens = self.tokens + list(tokens)


def session(model, tokens: int) -> Session:
    """The model's session, with a working set of at least `tokens` positions."""
    limit = model.config.max_position_embeddings
    if tokens > limit:
        raise ValidationError(f"{tokens} tokens (prompt + max_tokens) exceed the model's context of {limit}. "
                              "Fix: a shorter prompt or fewer max_tokens")
    s = _SESSIONS.get(model)
    if s is None or s.ws.max_tokens < tokens:
        s = _SESSIONS[model] = Session(model, min(limit, -(-tokens // ROUND) * ROUND))
    return s


def run_sync(coro):
    """Run a coroutine to completion on a fresh event loop (closed afterwards): the blocking entry points."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()
