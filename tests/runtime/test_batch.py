"""Passes over several sequences: CSR indptr, one working set per sequence, readout row i = sequence i."""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import Channel, ForwardPass, StateGeometry, ValidationError, dtype
from piegpu.eta import intrinsics
from piegpu.runtime.session import run_sync as run
from tests.helpers import tiny_config, tiny_model
from tests.runtime.test_pipeline import host_greedy

PROMPTS = [[5, 17, 42, 7], [100, 3], [250, 251, 9, 9, 9, 12, 40], [77]]


@pytest.fixture(scope="module")
def tiny(gpu):
    return tiny_model(tiny_config(layers=2, vocab=300), seed=11)


def batch_pass(wss, counts, rows_out: Channel | None = None):
    """(pass, tokens channel) embedding counts[i] tokens into wss[i]; the epilogue puts outputs("logits")."""
    T = sum(counts)
    tokens = Channel([T], dtype.i32)
    fwd = ForwardPass()
    fwd.embed(tokens, Channel.from_(np.cumsum([0] + list(counts)), dtype.u32))
    fwd.state(wss, StateGeometry.folding())
    if rows_out is not None:
        fwd.epilogue(lambda: rows_out.put(intrinsics.outputs("logits")))
    return fwd, tokens


def ref_last(ref, ids: list) -> np.ndarray:
    """Last-token logits of the numpy reference forward."""
    return ref.forward(ids, ref.new_cache())[-1]


def alone(model, ids: list) -> np.ndarray:
    """Last-token logits of `ids` run alone (host-driven forward, one sequence)."""
    ws = model.working_set(64)
    return model.gpu.forward(ws, ids)[0]


def test_prefill_of_several_prompts_in_one_pass_matches_each_alone(tiny):
    model, ref = tiny
    wss = [model.working_set(64) for _ in PROMPTS]
    out = Channel([len(PROMPTS), model.config.vocab_size], dtype.f32)
    fwd, tokens = batch_pass(wss, [len(p) for p in PROMPTS], out)
    tokens.put(sum(PROMPTS, []))
    pipe = model.pipeline()
    run(pipe.submit(fwd))
    got = run(out.take())
    for i, p in enumerate(PROMPTS):
        np.testing.assert_allclose(got[i], alone(model, p), atol=2e-4, rtol=0)
        np.testing.assert_allclose(got[i], ref_last(ref, p), atol=2e-4, rtol=0)
        assert wss[i].length == len(p)


def test_mixed_pass_decodes_some_sequences_while_another_prefills(tiny):
    model, ref = tiny
    pipe = model.pipeline()
    a, b, c = (model.working_set(64) for _ in range(3))
    for ws, ids in ((a, PROMPTS[0]), (c, PROMPTS[2])):  # a and c hold a prompt; b joins now
        model.gpu.forward(ws, ids)
    out = Channel([3, model.config.vocab_size], dtype.f32)
    fwd, tokens = batch_pass([a, b, c], [1, 5, 1], out)
    tokens.put([11] + [40, 41, 42, 43, 44] + [12])
    run(pipe.submit(fwd))
    got = run(out.take())
    want = [ref_last(ref, PROMPTS[0] + [11]), ref_last(ref, [40, 41, 42, 43, 44]), ref_last(ref, PROMPTS[2] + [12])]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=2e-4, rtol=0)
    assert (a.length, b.length, c.length) == (5, 5, 8)


def test_greedy_batch_equals_each_sequence_alone(tiny):
    """A batched device loop (4 sequences, argmax per row fed back on the device) gives each row's solo tokens."""
    from piegpu import eta
    model, _ = tiny
    n = 12
    solo = [host_greedy(model, p, n) for p in PROMPTS]
    pipe = model.pipeline()
    wss = [model.working_set(64) for _ in PROMPTS]
    prefill, ptoks = batch_pass(wss, [len(p) - 1 for p in PROMPTS if len(p) > 1] or [1])
    wss_pref = [ws for ws, p in zip(wss, PROMPTS) if len(p) > 1]
    prefill.state(wss_pref, StateGeometry.folding())
    ptoks.put(sum((p[:-1] for p in PROMPTS if len(p) > 1), []))
    run(pipe.submit(prefill))
    B = len(PROMPTS)
    token_in = Channel.from_([p[-1] for p in PROMPTS], dtype.i32)
    token_out = Channel([B], dtype.i32).capacity(n + 1)
    fwd = ForwardPass()
    fwd.embed(token_in, Channel.from_(list(range(B + 1)), dtype.u32))
    fwd.state(wss, StateGeometry.folding())

    @fwd.epilogue
    def _():
        rows = eta.concat([eta.reshape(eta.reduce_argmax(intrinsics.output(i)), [1]) for i in range(B)])
        token_in.put(rows)
        token_out.put(rows)

    async def on_token():
        return True
    assert run(pipe.run_ahead(fwd, n, on_token)) == n
    got = np.array([run(token_out.take()) for _ in range(n)]).T.tolist()
    assert got == solo


def test_bad_batches_are_refused_and_lose_nothing(tiny):
    model, _ = tiny
    pipe = model.pipeline()
    a, b = model.working_set(64), model.working_set(8)
    model.gpu.forward(a, [1, 2, 3])
    fwd, tokens = batch_pass([a, a], [1, 1])
    tokens.put([4, 5])
    with pytest.raises(ValidationError, match="sequences 0 and 1 of this pass are the same working set"):
        run(pipe.submit(fwd))
    bad = ForwardPass()
    bad.embed(Channel.from_([4, 5], dtype.i32), Channel.from_([0, 2], dtype.u32))
    bad.state([a, b], StateGeometry.folding())
    with pytest.raises(ValidationError, match="2 offsets but the pass has 2 working set"):
        run(pipe.submit(bad))
    fwd, tokens = batch_pass([a, b], [1, 0 + 2])
    tokens.put([4, 5, 6])
    with pytest.raises(ValidationError, match="does not describe the 3"):
        fwd.indptr.clear()
        fwd.indptr.put(np.array([0, 1, 4], np.uint32))
        run(pipe.submit(fwd))
    # a full working set mid-batch: nothing is submitted, no length moves, the tokens stay queued
    full = model.working_set(4)
    model.gpu.forward(full, [1, 2, 3, 4])
    fwd, tokens = batch_pass([a, full], [1, 1])
    tokens.put([7, 8])
    with pytest.raises(ValidationError, match="sequence 1's working set is full"):
        run(pipe.submit(fwd))
    assert (a.length, full.length, tokens.count) == (3, 4, 1)
