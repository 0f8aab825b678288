"""Waiting by submission index (runtime/waits.py): piegpu's own loop blocks its thread only when no other task
is ready, so a generator still hands over each token before the next pass is read; other loops wait through
the waiter thread; both give the same tokens."""

from __future__ import annotations

import asyncio

import pytest

from piegpu.runtime import waits
from tests.helpers import tiny_config, tiny_model

pytestmark = pytest.mark.skipif(not waits.native(), reason="this wgpu has no wgpu-native backend to call directly")


@pytest.fixture(scope="module")
def tiny(gpu):
    return tiny_model(tiny_config(layers=2, vocab=300), seed=5)[0]


@pytest.fixture
def paths(monkeypatch):
    """The wait path each read took: True = blocked the thread, False = the waiter thread."""
    taken: list = []
    real = waits._may_block

    async def may_block():
        taken.append(await real())
        return taken[-1]
    monkeypatch.setattr(waits, "_may_block", may_block)
    return taken


def test_each_token_is_handed_over_before_the_next_read(tiny, paths):
    """Iterating generate() on piegpu's own loop: when piece k arrives the host has read k tokens, not k + 1 (a
    read that blocked before the consumer took the previous piece would make it k + 1)."""
    g = tiny.generate("5 17 42", max_tokens=10, temperature=0)
    seen = []
    for k, piece in enumerate(g, 1):  # the tiny model's tokenizer gives one piece per token ("<id>")
        seen.append((k, g.stats.host_waits))
    assert len(seen) == 10
    assert all(k == reads for k, reads in seen), seen
    assert paths and all(paths), "reads on piegpu's own loop block the thread"


def test_a_foreign_loop_waits_through_the_waiter_thread_with_the_same_tokens(tiny, paths):
    sync = tiny.generate("5 17 42", max_tokens=10, temperature=0.8, seed=4)
    sync.run()
    paths.clear()

    async def main():
        g = tiny.generate("5 17 42", max_tokens=10, temperature=0.8, seed=4)
        return [p async for p in g], g
    pieces, g = asyncio.run(main())
    assert g.tokens == sync.tokens and "".join(pieces) == sync.text
    assert paths and not any(paths), "a loop piegpu does not own is never blocked"


def test_a_batch_on_a_foreign_loop_equals_the_blocking_one(tiny, paths):
    prompts = ["5 17 42", "100 3", "77 8 8"]
    blocking = [g.tokens for g in tiny.generate_batch(prompts, max_tokens=6, temperature=0)]
    assert paths and all(paths)
    paths.clear()

    async def main():
        from piegpu.textgen.batching import agenerate_batch
        return [g.tokens for g in await agenerate_batch(tiny, prompts, 6, "greedy", 0.0)]
    assert asyncio.run(main()) == blocking
    assert paths and not any(paths)
