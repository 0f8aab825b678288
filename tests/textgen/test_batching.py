"""Continuous batching: generate_batch, n samples, sequences joining and leaving, forks, row samplers."""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import ValidationError, eta
from piegpu.runtime.batch import Batch
from piegpu.runtime.session import run_sync
from piegpu.samplers.rows import RowParams, RowSampling
from tests.helpers import AllowTokens, tiny_config, tiny_model

PROMPTS = ["5 17 42 7", "100 3", "250 251 9 9 9 12 40", "77"]


@pytest.fixture(scope="module")
def tiny_pair(gpu):
    return tiny_model(tiny_config(layers=2, vocab=300), seed=11)


@pytest.fixture(scope="module")
def tiny(tiny_pair):
    return tiny_pair[0]


def alone(model, prompt, **kw):
    g = model.generate(prompt, **kw)
    g.run()
    return g.tokens


def test_greedy_batch_equals_each_prompt_alone(tiny):
    gens = tiny.generate_batch(PROMPTS, max_tokens=10)
    assert [g.tokens for g in gens] == [alone(tiny, p, max_tokens=10) for p in PROMPTS]
    assert all(g.stats.generated == len(g.tokens) for g in gens)


@pytest.mark.parametrize("sampler, options", [("top-p", {"top_p": 0.8}), ("top-k", {"top_k": 5}),
                                              ("typical", {"typical": 0.7}),
                                              ("top-k", {"top_k": 30, "typical": 0.9}),
                                              ("min-p", {"min_p": 0.1}), ("temperature", {}),
                                              ("top-k", {"top_k": 20, "top_p": 0.9, "min_p": 0.02})])
def test_seeded_batch_rows_equal_each_row_alone(tiny, sampler, options):
    kw = dict(max_tokens=8, sampler=sampler, temperature=0.9, seed=1234, **options)
    gens = tiny.generate_batch(PROMPTS, **kw)
    assert [g.tokens for g in gens] == [alone(tiny, p, **kw) for p in PROMPTS]


def test_prompts_with_a_common_prefix_prefill_it_once_and_equal_each_alone(tiny):
    """A shared prefix of at least a KV page is prefilled once and forked (pages shared); rows equal each alone."""
    head = " ".join(str(7 + i % 50) for i in range(40)) + " "
    prompts = [head + "5 17", head + "100 3 9", head + "250"]
    for kw in (dict(), dict(sampler="top-p", top_p=0.9, temperature=0.8, seed=5)):
        gens = tiny.generate_batch(prompts, max_tokens=8, **kw)
        assert [g.tokens for g in gens] == [alone(tiny, p, max_tokens=8, **kw) for p in prompts]
        common = len(tiny.tokenizer.encode(head).ids)
        assert [g.stats.reused_tokens for g in gens] == [0, common, common]
    gens = tiny.generate_batch(PROMPTS[:2], max_tokens=2)  # nothing in common: nothing shared
    assert [g.stats.reused_tokens for g in gens] == [0, 0]


def test_n_samples_share_the_prompt_and_equal_seeded_runs_alone(tiny):
    s = tiny.generate("5 17 42 7", max_tokens=6, sampler="top-p", top_p=0.9, seed=7, n=3)
    texts = s.run()
    assert len(texts) == 3
    for i, g in enumerate(s.samples):
        assert g.tokens == alone(tiny, "5 17 42 7", max_tokens=6, sampler="top-p", top_p=0.9, seed=7 + i)
    assert len({tuple(g.tokens) for g in s.samples}) > 1  # different seeds, different samples


def test_sequences_joining_and_leaving_mid_stream_change_nobody(tiny):
    vocab = tiny.config.vocab_size
    batch = Batch(tiny, RowSampling(vocab), prefill_chunk=2)
    ids = [tiny.tokenizer.encode(p).ids for p in PROMPTS]
    greedy = RowParams(temperature=0.0)
    a = batch.add(ids[0], greedy, 12)
    b = batch.add(ids[1], RowParams(0.8, top_p=0.9, seed=3), 3)  # leaves early (length)
    for _ in range(4):
        run_sync(batch.step())
    c = batch.add(ids[2], greedy, 6)  # joins mid-stream, its prompt prefilled in chunks of 2
    run_sync(batch.run())
    assert a.tokens == alone(tiny, PROMPTS[0], max_tokens=12)
    assert b.tokens == alone(tiny, PROMPTS[1], max_tokens=3, sampler="top-p", top_p=0.9, temperature=0.8, seed=3)
    assert c.tokens == alone(tiny, PROMPTS[2], max_tokens=6)
    assert (a.finish_reason, b.finish_reason, c.finish_reason) == ("length", "length", "length")
    assert batch.stats.compositions >= 3 and batch.stats.prefill_passes >= 3


def test_cancel_and_stop_from_the_consumer(tiny):
    vocab = tiny.config.vocab_size
    batch = Batch(tiny, RowSampling(vocab))
    ids = [tiny.tokenizer.encode(p).ids for p in PROMPTS[:2]]
    a = batch.add(ids[0], RowParams(0.0), 20, on_token=lambda s, t: len(s.tokens) < 4)
    b = batch.add(ids[1], RowParams(0.0), 20, on_token=lambda s, t: s.cancel())  # as another thread may
    run_sync(batch.run())
    assert (len(a.tokens), a.finish_reason) == (4, "stop")
    assert (len(b.tokens), b.finish_reason) == (1, "cancelled")
    assert a.tokens == alone(tiny, PROMPTS[0], max_tokens=4)


def test_fork_copies_the_kv_prefix(tiny):
    ws = tiny.working_set(32)
    tiny.gpu.forward(ws, [5, 17, 42])
    twin = ws.fork()
    assert twin.length == 3 and twin is not ws
    np.testing.assert_allclose(tiny.gpu.forward(twin, [7])[0], tiny.gpu.forward(ws, [7])[0], atol=1e-6)


def test_bad_batch_requests_name_the_sequence(tiny):
    batch = Batch(tiny, RowSampling(tiny.config.vocab_size))
    batch.add([1, 2], RowParams(), 4)
    with pytest.raises(ValidationError, match="sequence 1: token ids \\[999\\] are outside"):
        batch.add([999], RowParams(), 4)
    with pytest.raises(ValidationError, match="sequence 1: the prompt has 300 tokens but the context holds 256"):
        batch.add([3] * 300, RowParams(), 4)
    with pytest.raises(ValidationError, match="top_p"):
        RowParams(top_p=1.5)
    with pytest.raises(ValidationError, match="batched sampling carries .* not Watermark"):
        tiny.generate_batch(["1 2"], sampler="top-a", watermark=5)  # a processor rows have no form of
    with pytest.raises(ValidationError, match="prompt 1"):
        tiny.generate_batch(["1 2", ""])
    assert len(batch.active) == 1  # the refused requests changed nothing


def test_per_row_sampler_parameters_are_data_not_recompiles(tiny):
    """Changing a row's top_p, temperature or seed reuses the compiled epilogue (cache counters)."""
    from piegpu.eta import cache
    tiny.generate_batch(PROMPTS[:2], max_tokens=2, sampler="top-p", top_p=0.5, seed=1)
    before = cache.cache_stats()
    tiny.generate_batch(PROMPTS[:2], max_tokens=2, sampler="top-p", top_p=0.95, temperature=0.7, seed=9)
    after = cache.cache_stats()
    assert after["misses"] == before["misses"]


def test_row_sampler_masks_equal_the_single_row_composites(gpu):
    """Per-row tensor parameters of top_k_mask/top_p_mask/min_p_mask equal the scalar form row by row."""
    from piegpu import dtype
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 64)).astype(np.float32) * 3
    x[1, :5] = -np.inf
    ks, ps, ms = np.array([3, 0, 64, 10], np.int32), np.array([0.5, 1.0, 0.9, 0.2], np.float32), \
        np.array([0.1, 0.0, 0.5, 0.05], np.float32)
    prog = eta.trace(lambda a, k, p, m: (eta.top_k_mask(a, k), eta.top_p_mask(a, p), eta.min_p_mask(a, m)),
                     eta.spec([4, 64], dtype.f32), eta.spec([4], dtype.i32), eta.spec([4], dtype.f32),
                     eta.spec([4], dtype.f32))
    for backend in ("interp", "wgsl"):
        k_rows, p_rows, m_rows = prog.run(x, ks, ps, ms, backend=backend)
        for i in range(4):
            row = eta.trace(lambda a: (eta.top_k_mask(a, int(ks[i])) if 0 < ks[i] < 64 else eta.broadcast(True, [64]),
                                       eta.top_p_mask(a, float(ps[i])) if ps[i] < 1 else eta.broadcast(True, [64]),
                                       eta.min_p_mask(a, float(ms[i]))), eta.spec([64], dtype.f32))
            k1, p1, m1 = row.run(x[i], backend="interp")
            assert (k_rows[i] == k1).all() and (p_rows[i] == p1).all() and (m_rows[i] == m1).all(), (backend, i)


@pytest.mark.slow
def test_default_model_batch_equals_each_prompt_alone(default_model):
    """The issue's check on the real model: 4 prompts batched greedy, and seeded top-p, token for token."""
    prompts = ["Once upon a time", "The capital of France is", "def fibonacci(n):", "In 1969, the first"]
    gens = default_model.generate_batch(prompts, max_tokens=12)
    assert [g.tokens for g in gens] == [alone(default_model, p, max_tokens=12) for p in prompts]
    kw = dict(max_tokens=8, sampler="top-p", top_p=0.9, temperature=0.8, seed=5)
    gens = default_model.generate_batch(prompts, **kw)
    assert [g.tokens for g in gens] == [alone(default_model, p, **kw) for p in prompts]


@pytest.mark.parametrize("options", [
    {"repetition_penalty": 1.3}, {"presence_penalty": 0.7, "frequency_penalty": 0.4},
    {"logit_bias": {5: 3.0, 17: float("-inf"), 42: -2.5}},
    {"repetition_penalty": 1.2, "frequency_penalty": 0.3, "logit_bias": {9: 1.5}, "top_p": 0.9}])
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_penalties_and_logit_bias_rows_equal_each_row_alone(tiny, options, temperature):
    """Penalties (seen counts put per pass) and logit biases as row data: every row equals its prompt alone."""
    kw = dict(max_tokens=8, temperature=temperature, seed=99, **options)
    if temperature > 0:
        kw["sampler"] = "temperature"
    gens = tiny.generate_batch(PROMPTS, **kw)
    assert [g.tokens for g in gens] == [alone(tiny, p, **kw) for p in PROMPTS]


def test_one_epilogue_serves_rows_with_and_without_penalties(tiny):
    """Penalized, biased and typical rows beside plain ones: each equals its own run alone (plain rows see
    counts of zero, biases of zero and a typical mass of 1)."""
    vocab = tiny.config.vocab_size
    batch = Batch(tiny, RowSampling(vocab))
    ids = [tiny.tokenizer.encode(p).ids for p in PROMPTS]
    from piegpu.samplers.rows import RowState
    params = [RowParams(0.0), RowParams(0.0, repetition_penalty=1.5, presence_penalty=0.5),
              RowParams(0.7, seed=5, logit_bias=((3, 2.0),)), RowParams(0.9, typical_p=0.6, seed=8)]
    seqs = [batch.add(i, p, 6, row_state=RowState(p, vocab, i)) for i, p in zip(ids, params)]
    run_sync(batch.run())
    want = [alone(tiny, PROMPTS[0], max_tokens=6),
            alone(tiny, PROMPTS[1], max_tokens=6, repetition_penalty=1.5, presence_penalty=0.5),
            alone(tiny, PROMPTS[2], max_tokens=6, sampler="temperature", temperature=0.7, seed=5,
                  logit_bias={3: 2.0}),  # a sampling row whose typical mass is 1 (off) beside a typical row
            alone(tiny, PROMPTS[3], max_tokens=6, sampler="typical", typical=0.6, temperature=0.9, seed=8)]
    assert [s.tokens for s in seqs] == want


def test_grammar_mask_rows_draw_only_allowed_tokens_and_top_logprobs_match_numpy(tiny_pair):
    """Masked rows draw inside their masks; top logprobs equal log_softmax of the row's logits (numpy)."""
    from piegpu.samplers.rows import RowState
    tiny, ref = tiny_pair
    vocab = tiny.config.vocab_size
    batch = Batch(tiny, RowSampling(vocab))
    ids = [tiny.tokenizer.encode(p).ids for p in PROMPTS[:3]]
    cons = [AllowTokens({7, 40, 41, 200}), None, AllowTokens({3, 299})]
    params = [RowParams(0.0, constrained=True, logprobs=True, top_logprobs=5),
              RowParams(0.8, seed=2, top_logprobs=3), RowParams(1.0, seed=9, constrained=True)]
    seqs = [batch.add(i, p, 5, row_state=RowState(p, vocab, i, c)) for i, p, c in zip(ids, params, cons)]
    run_sync(batch.run())
    assert seqs[0].tokens and set(seqs[0].tokens) <= {7, 40, 41, 200}
    assert cons[0].consumed == seqs[0].tokens and cons[2].consumed == seqs[2].tokens
    assert set(seqs[2].tokens) <= {3, 299}
    # the unconstrained row equals its run alone
    assert seqs[1].tokens == alone(tiny, PROMPTS[1], max_tokens=5, sampler="temperature", temperature=0.8, seed=2)
    # top logprobs of row 1's first token: the model's log_softmax at the prompt's end (logits from the model)
    logits = ref.forward(ids[1], ref.new_cache())[-1]  # the numpy reference forward: the oracle
    for s, k in ((seqs[0], 5), (seqs[1], 3)):
        assert len(s.top_logprobs) == len(s.tokens) and all(len(t) == k for t in s.top_logprobs)
        for top in s.top_logprobs:
            lps = [lp for _, lp in top]
            assert lps == sorted(lps, reverse=True) and all(lp <= 0 for lp in lps)
    x = np.asarray(logits, np.float64)
    lse = x.max() + np.log(np.exp(x - x.max()).sum())
    want = np.argsort(-x, kind="stable")[:3]
    assert [t for t, _ in seqs[1].top_logprobs[0]] == want.tolist()
    np.testing.assert_allclose([lp for _, lp in seqs[1].top_logprobs[0]], (x - lse)[want], atol=1e-4)
    # the drawn token's logprob (row 0) is its entry among the top ones when it is there
    for tok, lp, top in zip(seqs[0].tokens, seqs[0].logprobs, seqs[0].top_logprobs):
        d = dict(top)
        if tok in d:
            assert abs(d[tok] - lp) < 1e-5


def test_prefill_together_equals_prefilling_each_alone(tiny):
    """Several prompts prefilled in one multi-sequence pass decode exactly as if each was prefilled alone."""
    from piegpu.runtime.session import prefill_together
    ids = [tiny.tokenizer.encode(p).ids for p in PROMPTS]
    sessions = [tiny.session(tiny.working_set(64)) for _ in ids]
    run_sync(prefill_together(tiny.default_pipeline, [(s, i[:-1]) for s, i in zip(sessions, ids)]))
    assert [s.ws.length for s in sessions] == [len(i) - 1 for i in ids]
    assert [s.tokens for s in sessions] == [i[:-1] for i in ids]
    batch = Batch(tiny, RowSampling(tiny.config.vocab_size))
    seqs = [batch.add(i, RowParams(0.0), 8, session=s) for i, s in zip(ids, sessions)]
    assert batch.stats.prefill_passes == 0 and all(s.ready for s in seqs)
    run_sync(batch.run())
    assert [s.tokens for s in seqs] == [alone(tiny, p, max_tokens=8) for p in PROMPTS]


@pytest.mark.parametrize("heads, kv_heads, head_dim", [(6, 1, 16), (8, 2, 48)])
def test_batched_decode_with_wide_query_groups_matches_reference(gpu, heads, kv_heads, head_dim):
    """Decode attention takes several query heads of a KV head per workgroup (on lavapipe up to 4, the
    KV head's first workgroup writing the cache): a group of 6 heads (two workgroups) and heads of 12
    vec4s (lanes past the head idle), batched and alone, against the numpy reference."""
    model, ref = tiny_model(tiny_config(heads=heads, kv_heads=kv_heads, head_dim=head_dim, vocab=300), seed=5)
    gens = model.generate_batch(PROMPTS, max_tokens=8)
    stops = model.config.eos_token_ids
    for prompt, g in zip(PROMPTS, gens):
        want = ref.greedy(model.tokenizer.encode(prompt).ids, 8, stop_ids=stops)
        assert g.tokens == [t for t in want if t not in stops]
        assert g.tokens == alone(model, prompt, max_tokens=8)
