"""`intrinsics.output(i, "hidden")`: readout row i's final hidden state after the model's final RMSNorm (what
the lm_head reads), on every path an epilogue runs -- one-sequence decode (where the logits fold that norm
in), prefill passes with the readout rows anywhere, passes over several sequences -- against the numpy
reference model, on the WGSL and SPIR-V epilogue targets and the interpreter; passes whose epilogue does not
read it record exactly the dispatches they did before."""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import Channel, ForwardPass, StateGeometry, ValidationError, dtype, eta
from piegpu.eta import IntrinsicContext, intrinsics
from piegpu.ptir.runner import detach
from piegpu.runtime.session import run_sync as run
from tests.helpers import tiny_config, tiny_model

PROMPT = [5, 17, 42, 7, 9, 120, 33]
PROMPTS = [[5, 17, 42, 7], [100, 3], [250, 251, 9, 9, 9, 12, 40]]
TOL = dict(atol=3e-5, rtol=1e-5)  # f32 on the device against the f32 numpy reference; hidden values are O(1)
LAYERS = 2


@pytest.fixture(scope="module")
def tiny(gpu):
    return tiny_model(tiny_config(layers=LAYERS, vocab=300), seed=11)


def ref_hidden(ref, ids: list) -> np.ndarray:
    """The reference's final-normed hidden states [len(ids), hidden] of one prefill from an empty state."""
    return ref.hidden(ids, ref.new_cache())


def one_sequence_pass(ws, ids: list) -> ForwardPass:
    fwd = ForwardPass()
    fwd.embed(Channel.from_(ids, dtype.i32), Channel.from_([0, len(ids)], dtype.u32))
    fwd.state([ws], StateGeometry.folding())
    return fwd


def both_epilogue(fwd: ForwardPass, model, rows: int = 1) -> tuple:
    """An epilogue reading logits and hidden of every readout row: (hidden, logits, mixed) channels it puts into.

    `mixed` is one value per row computed from both: max logit + sum(hidden^2) + hidden[argmax logit mod H].
    """
    c = model.config
    hid = Channel([rows, c.hidden_size], dtype.f32)
    lg = Channel([rows, c.vocab_size], dtype.f32)
    mixed = Channel([rows], dtype.f32)

    @fwd.epilogue
    def _():
        h, logits = intrinsics.outputs("hidden"), intrinsics.outputs("logits")
        pick = eta.reduce_argmax(logits) % intrinsics.hidden_size()
        mixed.put(eta.reduce_max(logits) + eta.reduce_sum(h * h) + eta.gather_row(h, pick))
        hid.put(h)
        lg.put(logits)
    return hid, lg, mixed


def oracle(pipe, fwd: ForwardPass, tokens: list, hidden: np.ndarray, logits: np.ndarray) -> list:
    """The pass's epilogue on the interpreter, fed the token cell and the reference's hidden rows and logits."""
    d = detach(pipe.prepare(fwd).program)
    feed = {"hidden": hidden, "logits": logits}
    args = [np.asarray(tokens, np.int32) if src[0] == "take" else feed[src[1]].reshape(src[2]) for src in d.sources]
    return d.program.run(*args, backend="interp")


def check_rows(model, pipe, fwd, chans, tokens: list, want_hidden: np.ndarray, ref) -> None:
    """The device's hidden rows, logits and mixed values against the reference and the interpreter oracle."""
    hid, lg, mixed = (run(ch.take()) for ch in chans)
    want_logits = want_hidden @ ref.lm_head.T
    np.testing.assert_allclose(hid, want_hidden, **TOL)
    np.testing.assert_allclose(lg, want_logits, atol=2e-4, rtol=0)
    o_mixed, o_hid, o_lg = oracle(pipe, fwd, tokens, want_hidden, want_logits)
    np.testing.assert_array_equal(o_hid, want_hidden)  # the oracle got the reference's rows
    np.testing.assert_allclose(mixed, o_mixed, atol=2e-4, rtol=1e-5)
    assert model.config.hidden_size == hid.shape[-1] == 96


@pytest.mark.parametrize("target", ["wgsl", "spirv"])
def test_decode_pass_reads_the_final_normed_hidden_row(tiny, target):
    """T=1: the logits matvec folds the final norm in, so the pass records one norm dispatch for the epilogue."""
    model, ref = tiny
    pipe = model.pipeline(target=target)
    ws = model.working_set(32)
    run(pipe.submit(one_sequence_pass(ws, PROMPT[:-1])))
    fwd = one_sequence_pass(ws, PROMPT[-1:])
    chans = both_epilogue(fwd, model)
    run(pipe.submit(fwd))
    check_rows(model, pipe, fwd, chans, PROMPT[-1:], ref_hidden(ref, PROMPT)[-1:], ref)
    assert ws.length == len(PROMPT)


@pytest.mark.parametrize("first, rows", [(2, 1), (2, 3), (0, 3), (6, 1)])
def test_prefill_pass_reads_hidden_rows_anywhere(tiny, first, rows):
    """One row anywhere (decode matvec), rows from 0 (the subgroup matmul folds the norm), rows from row 2
    (a norm dispatch of its own, which the hidden rows reuse)."""
    model, ref = tiny
    pipe = model.pipeline()
    fwd = one_sequence_pass(model.working_set(32), PROMPT).readout(rows, first)
    chans = both_epilogue(fwd, model, rows)
    run(pipe.submit(fwd))
    check_rows(model, pipe, fwd, chans, PROMPT, ref_hidden(ref, PROMPT)[first:first + rows], ref)


def batch_pass(wss, counts) -> tuple:
    T = sum(counts)
    tokens = Channel([T], dtype.i32)
    fwd = ForwardPass()
    fwd.embed(tokens, Channel.from_(np.cumsum([0] + list(counts)), dtype.u32))
    fwd.state(wss, StateGeometry.folding())
    return fwd, tokens


@pytest.mark.parametrize("target", ["wgsl", "spirv"])
def test_passes_over_several_sequences_read_outputs_hidden(tiny, target):
    """A batched prefill (each sequence's last row, gathered by the norm) and a batched decode (adjacent rows from
    row 0, where the norm is folded) give each sequence's own final hidden row."""
    model, ref = tiny
    pipe = model.pipeline(target=target)
    wss = [model.working_set(32) for _ in PROMPTS]
    fwd, tokens = batch_pass(wss, [len(p) for p in PROMPTS])
    chans = both_epilogue(fwd, model, len(PROMPTS))
    flat = sum(PROMPTS, [])
    tokens.put(flat)
    run(pipe.submit(fwd))
    want = np.stack([ref_hidden(ref, p)[-1] for p in PROMPTS])
    check_rows(model, pipe, fwd, chans, flat, want, ref)

    nxt = [3, 200, 64]
    dec, tokens = batch_pass(wss, [1] * len(PROMPTS))
    chans = both_epilogue(dec, model, len(PROMPTS))
    tokens.put(nxt)
    run(pipe.submit(dec))
    want = np.stack([ref_hidden(ref, p + [t])[-1] for p, t in zip(PROMPTS, nxt)])
    check_rows(model, pipe, dec, chans, nxt, want, ref)


def greedy_pass(ws, token: int, read_hidden: bool) -> tuple:
    """A decode pass whose epilogue puts argmax(logits) (+ sum(hidden) when `read_hidden`); (pass, token_out)."""
    fwd = one_sequence_pass(ws, [token])
    out = Channel([1], dtype.i32)
    extra = Channel([1], dtype.f32)

    @fwd.epilogue
    def _():
        out.put(eta.reshape(eta.reduce_argmax(intrinsics.output(0, "logits")), [1]))
        if read_hidden:
            extra.put(eta.reshape(eta.reduce_sum(intrinsics.output(0, "hidden")), [1]))
    return fwd, out


def test_an_epilogue_not_reading_hidden_records_the_dispatches_it_did_before(tiny):
    """Greedy decode: embed + 5 per layer + logits, the epilogue's kernels, the KV advance -- the count before
    `hidden` existed. A pass reading hidden on the same working set adds exactly one (the final norm), in a
    plan cached apart: the greedy pass after it is back to the same count and the same token."""
    model, _ = tiny
    pipe = model.pipeline(window=1)
    ws = model.working_set(32)
    run(pipe.submit(one_sequence_pass(ws, PROMPT[:-1])))
    counts, tokens = [], []
    for read_hidden in (False, True, False):
        snap = ws.length
        fwd, out = greedy_pass(ws, PROMPT[-1], read_hidden)
        epilogue = len(pipe.prepare(fwd).compiled.kernels)
        before = pipe.stats.dispatches
        run(pipe.submit(fwd))
        counts.append(pipe.stats.dispatches - before - epilogue)
        tokens.append(int(run(out.take())[0]))
        ws.set_length(snap)  # the same position again
        assert pipe.prepare(fwd).hidden is read_hidden
    forward = 1 + 5 * LAYERS + 1
    assert counts == [forward + 1, forward + 2, forward + 1]  # + the KV advance; + the norm for hidden
    assert tokens[0] == tokens[1] == tokens[2]  # the folded logits are the same with or without the extra norm


def test_plans_with_and_without_the_hidden_rows_are_cached_apart(tiny):
    model, _ = tiny
    g, ws = model.gpu, model.working_set(32)
    g.forward(ws, PROMPT)
    tokens = g.token_buffer([3])
    logits, plain = g.dispatch_plan(ws, 1, tokens, (0, 1))
    logits_h, with_hidden = g.dispatch_plan(ws, 1, tokens, (0, 1), hidden=True)
    assert g.dispatch_plan(ws, 1, tokens, (0, 1))[1] is plain and logits_h is logits
    assert len(plain) == 1 + 5 * LAYERS + 1 and len(with_hidden) == len(plain) + 1
    assert [e[3] for e in with_hidden if e not in plain] == ["rmsnorm"]
    assert g.readout_buffer("logits", logits) is logits and g.readout_buffer("hidden", logits) is g.scratch(1, 1).hn
    with pytest.raises(ValidationError, match="no readout input 'mtp_logits'"):
        g.readout_buffer("mtp_logits", logits)


def test_inputs_the_forward_pass_does_not_provide_are_named():
    ctx = IntrinsicContext.for_pass(16, 8)
    for name in ("mtp_logits", "mtp_drafts", "value_head", "attn_score", "query"):
        with pytest.raises(ValidationError, match=f"intrinsic '{name}' is not provided by piegpu's forward pass.*"
                                                  "'logits' and 'hidden'.*Fix:"):
            eta.trace(lambda: intrinsics.output(0, name), context=ctx)
    with pytest.raises(ValidationError, match=r"'hidden' is not in this trace's context.*Fix: trace with "
                                              r"IntrinsicContext.for_pass\(vocab, hidden_size, rows\)"):
        eta.trace(lambda: intrinsics.output(0, "hidden"), context=IntrinsicContext.for_logits(16))
    p = eta.trace(lambda: eta.reduce_sum(intrinsics.outputs("hidden")), context=IntrinsicContext.for_pass(16, 8, 3))
    assert p.nodes[0].type.shape == (3, 8) and p.nodes[0].attr["name"] == "hidden"
