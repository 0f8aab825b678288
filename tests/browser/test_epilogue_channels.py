"""The greedy and top-a decode-loop epilogues as a ForwardPass compiles them -- the logits intrinsic,
the token and RNG channels taken and put, the commit of the ring headers -- run in Chromium on real
logits of the default model, against the interpreter.

Traced as runtime/pipeline.py traces a pass's epilogue (the tokens channel's take as prelude);
the rings are laid out as channel_layout.py says, starting mid-ring so the addressing wraps.
"""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import Channel, dtype, eta
from piegpu.eta import intrinsics
from piegpu.eta.tracer import trace
from tests.browser.eta_items import EpilogueItem, limits_from
from tests.browser.model_capture import load_example

SEEDS = (3, 99)


def decode_loop_epilogue(kind: str, vocab: int, first_token: int, seed: int):
    """(program, {slot: cells to take}) of examples/top_a.py's loop (kind "top_a") or the API's greedy loop."""
    token_in = Channel.from_([first_token], dtype.i32)
    token_out = Channel([1], dtype.i32)
    rng = Channel.from_([seed, 0], dtype.u32)
    top_a = load_example("top_a").top_a

    def epilogue():
        logits = intrinsics.output(0, "logits")
        if kind == "greedy":
            token = eta.reshape(eta.reduce_argmax(logits), [1])
        else:
            state = rng.take()
            token = eta.reshape(top_a(logits, state), [1])
            rng.put(eta.concat([eta.slice_last(state, 0, 1), eta.slice_last(state, 1, 1) + 1]))
        token_in.put(token)  # device to device: the next pass embeds it
        token_out.put(token)  # device to host
    prog = trace(epilogue, context=intrinsics.IntrinsicContext.for_logits(vocab, 1),
                 prelude=lambda: token_in.take())
    slots = list(prog.channel_objects)
    cells = {slots.index(token_in): [np.array([first_token], np.int32)]}
    if rng in slots:
        cells[slots.index(rng)] = [np.array([seed, 5], np.uint32)]
    return prog, cells


@pytest.fixture(scope="module")
def runs(browser, model_capture):
    """[(EpilogueItem, reply)] for every logits row: greedy, and top-a with each seed."""
    limits = limits_from(browser.limits)
    vocab = model_capture.logits.shape[1]
    items = []
    for i, row in enumerate(model_capture.logits):
        first = model_capture.prompt_ids[i]
        for kind, seed in [("greedy", 0)] + [("top_a", s) for s in SEEDS]:
            prog, cells = decode_loop_epilogue(kind, vocab, first, seed)
            items.append(EpilogueItem(prog, row[None, :], cells, limits, f"{kind}-{i}-{seed}"))
    return list(zip(items, browser.run([it.item for it in items])))


@pytest.mark.parametrize("kind", ["greedy", "top_a"])
def test_decode_loop_epilogue_in_chromium(runs, kind):
    tokens = set()
    checked = 0
    for item, reply in runs:
        if not item.label.startswith(kind):
            continue
        rings = item.rings_after(reply)
        want = item.expected()
        for slot, (header, puts) in rings.items():
            ring, cell_words, head, tail, _, _ = item.rings[slot]
            takes, n_puts = item.counts[slot]
            assert list(header[:4]) == [head + takes, tail + n_puts, ring, cell_words], (item.label, slot, header)
            assert sorted(puts) == sorted(want.puts.get(slot, {})), (item.label, slot)
            for seq, cell in puts.items():
                np.testing.assert_array_equal(cell, want.puts[slot][seq], err_msg=f"{item.label} slot {slot}")
        token = int(next(iter(want.puts[0].values()))[0]) if 0 in want.puts else None
        tokens.add(token)
        if kind == "greedy":
            assert token == int(np.argmax(item.logits[0]))
        checked += 1
    assert checked >= 10
    if kind == "top_a":
        assert len(tokens) > 3, "top-a drew the same token everywhere: the seeds or logits are not exercised"
