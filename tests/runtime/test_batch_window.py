"""Batched run-ahead: a Batch at window 1, 2 and 4 gives exactly the tokens of window 1 and of each row alone."""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import ValidationError
from piegpu.runtime.batch import Batch
from piegpu.runtime.session import run_sync
from piegpu.samplers import DRY, Mirostat
from piegpu.samplers.rows import RowParams, RowSampling, RowState
from tests.helpers import AllowTokens, tiny_config, tiny_model

PROMPTS = ["5 17 42 7", "100 3", "250 251 9 9 9 12 40", "77", "8 8 8", "31 4 159 26 5"]
# greedy, seeded sampling rows of every truncation, penalties, a logit bias, logprobs
PARAMS = [RowParams(0.0), RowParams(0.9, top_p=0.8, seed=3), RowParams(1.0, top_k=20, seed=4, logprobs=True),
          RowParams(0.7, min_p=0.05, seed=5, repetition_penalty=1.4, frequency_penalty=0.3),
          RowParams(0.0, presence_penalty=0.8, logit_bias=((7, 1.5),)), RowParams(1.1, seed=6, top_logprobs=3)]


def fresh_tiny():
    """The tiny model of these tests, loaded anew."""
    return tiny_model(tiny_config(layers=2, vocab=300), seed=11)[0]


@pytest.fixture(scope="module")
def tiny(gpu):
    return fresh_tiny()


def _ids(model, prompts=PROMPTS):
    return [model.tokenizer.encode(p).ids for p in prompts]


def _run(model, rows, window, max_batch=16, **add):
    """Run (ids, params, max_tokens[, stop_ids]) rows in one Batch; returns (batch, sequences)."""
    vocab = model.config.vocab_size
    batch = Batch(model, RowSampling(vocab), max_batch=max_batch, window=window)
    seqs = [batch.add(ids, p, n, stop_ids=stop, row_state=RowState(p, vocab, ids), **add)
            for ids, p, n, stop in rows]
    run_sync(batch.run())
    return batch, seqs


def _out(seqs):
    return [(s.tokens, s.finish_reason, s.logprobs, s.top_logprobs) for s in seqs]


@pytest.fixture(scope="module")
def window1(tiny):
    """Every row run alone at window 1 (the depth-1 loop), then all together at window 1."""
    rows = [(ids, p, 12, ()) for ids, p in zip(_ids(tiny), PARAMS)]
    alone = [_out(_run(tiny, [r], 1)[1])[0] for r in rows]
    together = _out(_run(tiny, rows, 1)[1])
    return rows, alone, together


def _close(a, b):
    """Same tokens and finish reasons; log-probabilities equal to float tolerance (other batch sizes)."""
    assert [(t, f) for t, f, _, _ in a] == [(t, f) for t, f, _, _ in b]
    for (_, _, lp, top), (_, _, lp2, top2) in zip(a, b):
        np.testing.assert_allclose(lp, lp2, atol=1e-4)
        assert [[t for t, _ in x] for x in top] == [[t for t, _ in x] for x in top2]


@pytest.mark.parametrize("window", [1, 2, 4, 8])
def test_rows_equal_window_1_and_each_row_alone(tiny, window1, window):
    rows, alone, together = window1
    batch, seqs = _run(tiny, rows, window)
    _close(_out(seqs), together)
    _close(_out(seqs), alone)
    assert batch.stats.decode_passes == 12 and batch.stats.host_waits == -(-12 // window)
    assert all(s.host_waits == -(-12 // window) for s in seqs)


@pytest.mark.parametrize("window", [2, 4, 8])
def test_rows_leave_at_stop_ids_and_budgets_mid_window(tiny, window1, window):
    """Rows leave at different passes (stop token, own max_tokens); the others go on with the same tokens."""
    rows, alone, _ = window1
    first = alone[0][0]
    stop = first[2]  # row 0 stops at its third greedy token
    budgets = [12, 9, 7, 12, 10, 9]  # the first run lasts 7 passes: row 0 stops well inside it
    mixed = [(ids, p, n, (stop,) if i == 0 else ()) for i, ((ids, p, _, _), n) in enumerate(zip(rows, budgets))]
    batch, seqs = _run(tiny, mixed, window)
    want = [(first[: first.index(stop)], "stop")] + [(a[0][:n], "length") for a, n in zip(alone[1:], budgets[1:])]
    assert [(s.tokens, s.finish_reason) for s in seqs] == want
    # the stop was noticed at a read, after the row had run ahead: those tokens were discarded, not delivered
    assert seqs[0].discarded > 0 and batch.stats.discarded >= seqs[0].discarded
    # every row's working set holds exactly its accepted tokens: its prompt but the last, and each embedded token
    for s in seqs:
        assert s.session.ws.length == len(s.prompt) - 1 + len(s.tokens) + (s.finish_reason == "stop")
        assert s.session.pending == (stop if s.finish_reason == "stop" else s.tokens[-1])
    assert batch.stats.compositions >= 4


@pytest.mark.parametrize("window", [1, 2, 4, 8])
def test_rows_change_hands_inside_a_run_and_each_sequence_gets_its_own_tokens(gpu, window):
    """max_batch 2: as a row's sequence leaves, a waiting one takes the row inside the run, passes still in flight
    (Batch.stats.handovers: no drain, no new plan), restarting from its own state (seeded sampling, penalties);
    the tokens the row computed meanwhile for the one that left are discarded. A sequence that joins mid-run
    holds more positions than any working set before it, so more than the plan's RoPE table covered: that plan
    is built again. Every sequence gets exactly its tokens alone."""
    tiny = fresh_tiny()  # (a model's RoPE table only grows: one of its own, sized by these working sets)
    vocab = tiny.config.vocab_size
    long_ids = tiny.tokenizer.encode(" ".join(str((7 * i) % 290 + 3) for i in range(150))).ids
    params = [RowParams(0.9, top_p=0.8, seed=10 + i, repetition_penalty=1.2) for i in range(len(PROMPTS) + 1)]
    budgets = [3, 9, 4, 6, 2, 5, 4]
    rows = [(ids, p, n, ()) for ids, p, n in zip(_ids(tiny) + [long_ids], params, budgets)]
    batch = Batch(tiny, RowSampling(vocab), max_batch=2, window=window)
    late = []

    def join_long(seq, tok):  # the long sequence's working set is made after the first plans were
        if len(seq.tokens) == 2 and not late:
            ids, p, n, _ = rows[-1]
            late.append(batch.add(ids, p, n, row_state=RowState(p, vocab, ids)))
        return True

    seqs = [batch.add(ids, p, n, row_state=RowState(p, vocab, ids), on_token=join_long if i == 1 else None)
            for i, (ids, p, n, _) in enumerate(rows[:-1])]
    run_sync(batch.run())
    alone = [_out(_run(tiny, [r], 1)[1])[0] for r in rows]
    _close(_out(seqs + late), alone)
    assert batch.stats.handovers >= 4 and batch.stats.runs < batch.stats.handovers
    for s in seqs + late:  # each working set holds exactly its accepted tokens
        assert s.session.ws.length == len(s.prompt) - 1 + len(s.tokens)


# Sequences that take a batch row over, whose first greedy token the DRY penalty from their own prompt changes
# (the pair (last token, that token) is earlier in the prompt): a row that kept the history of the sequence before
# would draw it.
DRY_JOINERS = [[35, 59, 72, 182, 35], [244, 250, 34, 133, 244], [171, 250, 71, 115, 171]]


@pytest.mark.parametrize("window", [2, 8])
@pytest.mark.parametrize("kind", ["mirostat", "dry"])
def test_stateful_rows_change_hands_each_from_its_own_state(gpu, window, kind):
    """Rows whose samplers carry state on the device -- Mirostat's mu, DRY's token history -- change hands inside a
    run (max_batch 2, five sequences): each sequence that takes a row over starts from its own state
    (RowSampler.restart_row), and every sequence gets exactly its tokens alone."""
    tiny = fresh_tiny()
    if kind == "mirostat":
        params = [RowParams(0.9, seed=20 + i, chain=(Mirostat(3.0, 0.1),)) for i in range(5)]
        prompts = _ids(tiny, ["77", "100 3", "8 8 8 8 8 8", "5 17 5 17 5 17", "31 4 31 4 31 4"])
    else:
        params = [RowParams(0.0, dry=DRY(3.0, allowed_length=1, sequence_breakers=[[11]]))] * 5
        prompts = _ids(tiny, ["77", "100 3"]) + DRY_JOINERS
    rows = [(ids, p, n, ()) for ids, p, n in zip(prompts, params, [2, 3, 4, 4, 4])]
    batch, seqs = _run(tiny, rows, window, max_batch=2)
    alone = [_out(_run(tiny, [r], 1)[1])[0] for r in rows]
    _close(_out(seqs), alone)
    assert batch.stats.handovers >= 2


def test_a_later_composition_of_as_many_rows_takes_over_the_kept_pass(gpu):
    """Row 0 leaves while nobody waits (the run drains to one row); a sequence joins and the batch grows to two
    rows again: the kept two-row pass is handed to the new composition (Batch.stats.reseated: no new trace or
    plan) -- its plan rebuilt, as the joiner holds more positions than its RoPE table covered."""
    tiny = fresh_tiny()
    vocab = tiny.config.vocab_size
    long_ids = tiny.tokenizer.encode(" ".join(str((5 * i) % 280 + 7) for i in range(150))).ids
    p = RowParams(0.8, top_k=30, seed=21)
    rows = [(ids, p, n, ()) for ids, n in zip(_ids(tiny)[:2] + [long_ids], (2, 12, 5))]
    batch = Batch(tiny, RowSampling(vocab), max_batch=2, window=2)
    late = []

    def join(seq, tok):
        if len(seq.tokens) == 6 and not late:
            ids, q, n, _ = rows[2]
            late.append(batch.add(ids, q, n, row_state=RowState(q, vocab, ids)))
        return True

    seqs = [batch.add(ids, q, n, row_state=RowState(q, vocab, ids), on_token=join if i == 1 else None)
            for i, (ids, q, n, _) in enumerate(rows[:2])]
    run_sync(batch.run())
    alone = [_out(_run(tiny, [r], 1)[1])[0] for r in rows]
    _close(_out(seqs + late), alone)
    assert batch.stats.reseated >= 1 and batch.stats.handovers == 0
    assert len([d for d in batch._decodes if d.size == 2]) == 1  # one pass of two rows served both compositions


@pytest.mark.parametrize("window", [2, 4, 8])
def test_rows_join_mid_run_and_a_cancel_ends_a_row_at_once(tiny, window1, window):
    rows, alone, _ = window1
    vocab = tiny.config.vocab_size
    batch = Batch(tiny, RowSampling(vocab), window=window, prefill_chunk=2)  # the joiner prefills in 2-token chunks
    late = []

    def on_token(seq, tok):
        if len(seq.tokens) == 3 and not late:  # a sequence joins while the run is in flight
            ids, p, _, _ = rows[2]
            late.append(batch.add(ids, p, 6, row_state=RowState(p, vocab, ids)))
        return True

    def cancel_at_4(seq, tok):
        if len(seq.tokens) == 4:
            seq.cancel()  # as a client going away would, from any thread

    a = batch.add(rows[0][0], rows[0][1], 12, on_token=on_token, row_state=RowState(rows[0][1], vocab, rows[0][0]))
    b = batch.add(rows[1][0], rows[1][1], 12, on_token=cancel_at_4, row_state=RowState(rows[1][1], vocab, rows[1][0]))
    run_sync(batch.run())
    assert (a.tokens, a.finish_reason) == (alone[0][0], "length")
    assert (b.tokens, b.finish_reason) == (alone[1][0][:4], "cancelled")
    assert late and (late[0].tokens, late[0].finish_reason) == (alone[2][0][:6], "length")
    assert late[0].logprobs == pytest.approx(alone[2][2][:6], abs=1e-4)


def test_a_grammar_row_beside_free_rows_runs_the_batch_at_window_1_then_runs_ahead(tiny, window1):
    """While a row needs the host between tokens the batch reads every pass; once it leaves, a window per read."""
    rows, alone, _ = window1
    vocab = tiny.config.vocab_size
    batch = Batch(tiny, RowSampling(vocab), window=4)
    allow = AllowTokens({7, 40, 41, 200})
    gp = RowParams(0.0, constrained=True)
    g = batch.add(rows[0][0], gp, 4, row_state=RowState(gp, vocab, rows[0][0], allow))
    free = [batch.add(ids, p, 12, row_state=RowState(p, vocab, ids)) for ids, p, _, _ in rows[1:3]]
    run_sync(batch.run())
    assert len(g.tokens) == 4 and set(g.tokens) <= set(allow.allowed) and allow.consumed == g.tokens
    assert [s.tokens for s in free] == [alone[1][0], alone[2][0]]
    # 4 passes at window 1 (one read each), then 8 passes at window 4 (two reads)
    assert batch.stats.host_waits == 4 + 2 and batch.stats.decode_passes == 12


@pytest.mark.parametrize("window", [2, 4, 8])
def test_generate_batch_stop_strings_emit_no_extra_text(tiny, window):
    base = tiny.generate_batch(PROMPTS[:4], max_tokens=12, window=1)
    text = base[2].text
    stop = text[len(text) // 2: len(text) // 2 + 3]  # a string in the middle of prompt 2's answer
    assert stop.strip()
    want = tiny.generate_batch(PROMPTS[:4], max_tokens=12, stop=[stop], window=1)
    got = tiny.generate_batch(PROMPTS[:4], max_tokens=12, stop=[stop], window=window)
    assert [g.text for g in got] == [g.text for g in want]
    assert stop not in got[2].text and got[2].text == text[: text.index(stop)]
    assert [g.finish_reason for g in got] == [g.finish_reason for g in want]


def test_host_waits_per_token_at_window_4(tiny):
    """B=8 at window 4: a host read per 4 passes (0.25 waits per token); window 1 reads every pass."""
    rows = [(ids, RowParams(0.0), 16, ()) for ids in _ids(tiny, PROMPTS[:4] * 2)]
    (_, four), (_, one) = _run(tiny, rows, 4), _run(tiny, rows, 1)
    waits, tokens = sum(s.host_waits for s in four), sum(len(s.tokens) for s in four)
    assert tokens == 8 * 16 and waits / tokens == 0.25
    assert sum(s.host_waits for s in one) == tokens
    assert [s.tokens for s in four] == [s.tokens for s in one]
    gens = tiny.generate_batch(PROMPTS[:4], max_tokens=8, window=4)  # the Generations report their rows' waits
    assert all(0 < g.stats.host_waits < len(g.tokens) for g in gens if len(g.tokens) == 8)


def test_n_samples_and_best_of_n_at_window_2(tiny):
    from piegpu.inferlets.best_of_n import best_of_n
    kw = dict(max_tokens=6, sampler="top-p", top_p=0.9, temperature=0.8, seed=7)
    s1, s2 = tiny.generate("5 17 42 7", n=3, window=1, **kw), tiny.generate("5 17 42 7", n=3, window=2, **kw)
    assert s1.run() == s2.run()
    a, b = best_of_n(tiny, "5 17 42 7", n=3, window=1, **kw), best_of_n(tiny, "5 17 42 7", n=3, window=2, **kw)
    assert (a.text, a.mean_logprob) == (b.text, pytest.approx(b.mean_logprob, abs=1e-5))


def test_cfg_at_window_2_equals_window_1(tiny):
    from piegpu.inferlets.cfg import generate_cfg
    for temperature in (0.0, 0.9):
        a = generate_cfg(tiny, "5 17 42 7", "100 3", max_tokens=8, temperature=temperature, seed=3, window=1)
        b = generate_cfg(tiny, "5 17 42 7", "100 3", max_tokens=8, temperature=temperature, seed=3, window=2)
        assert a.tokens == b.tokens


@pytest.mark.parametrize("bad", [0, -1, 9, 1.5, True, "2", 2.0])
def test_a_bad_window_is_a_validation_error_naming_it(tiny, bad):
    for make in (lambda: Batch(tiny, RowSampling(300), window=bad),
                 lambda: tiny.generate_batch(["1 2"], max_tokens=2, window=bad),
                 lambda: tiny.generate("1 2", max_tokens=2, n=2, window=bad),
                 lambda: tiny.generate("1 2", max_tokens=2, window=bad)):
        with pytest.raises(ValidationError, match="window must be an int in 1..8"):
            make()
