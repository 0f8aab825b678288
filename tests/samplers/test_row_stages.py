"""Every sampler stage as per-row data (row_stages.py, row_dry.py) and p-less.

- The slot layout: each row's logits after its own chain (different parameters per row, other rows'
  stages off) equal the stage's single-sequence Sampler.logits, bit for bit, on the interpreter and WGSL.
- Batches on a tiny model: every stage per row equals the same request alone with the same seed, a mixed
  batch of different chains too (with rows leaving mid-way, so Mirostat's mu and DRY's history are carried
  from one composition to the next), and new values compile nothing.
- p-less: llama.cpp's tests/test-sampling.cpp test_p_less cases.
"""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import ValidationError, dtype, eta, samplers
from piegpu.runtime.batch import Batch
from piegpu.runtime.session import run_sync
from piegpu.samplers import (DRY, XTC, DynamicTemperature, EpsilonCutoff, EtaCutoff, MinP, Mirostat, MirostatV1,
                             PLess, Sampler, TailFree, TopA, TopK, TopNSigma, TopP, Typical)
from piegpu.samplers.row_stages import Layout, RowContext, layout_of, slot_of, supersequence
from piegpu.samplers.rows import RowParams, RowSampling, RowState
from tests.helpers import tiny_config, tiny_model
from tests.samplers import numpy_samplers as ref
from tests.samplers.test_keep_masks import logit_rows

S = eta.spec
PROMPTS = ["5 17 42 7", "100 3", "250 251 9 9 9 12 40", "77"]


@pytest.fixture(params=["interp", "wgsl"])
def backend(request):
    if request.param == "wgsl":
        request.getfixturevalue("gpu")
    return request.param


# ---- the layout against each stage alone ------------------------------------------------------------

ROW_CHAINS = [  # one chain per row: several kinds, values differing per row, and a row with none
    (TopK(5), XTC(1.0, 0.05)), (TopP(0.8), MinP(0.1)), (XTC(0.5, 0.02),), (TopNSigma(1.5), TailFree(0.9)),
    (TopA(0.3), EtaCutoff(0.02)), (EpsilonCutoff(0.01), Typical(0.7)), (PLess(),), (),
    (DynamicTemperature(1.0, 0.5, 1.0),), (TopK(20), DynamicTemperature(1.0, 0.8, 0.0)), (Mirostat(3.0, 0.1),),
    (TopP(0.9), MirostatV1(4.0, 0.1, 50)), (TailFree(0.5), TopK(3)),
]


def _alone(chain, x, rng, mu, backend):
    smp = Sampler(1.0, chain)
    states = {"rng": rng}
    if any(isinstance(t, Mirostat) for t in chain):
        states["mirostat_mu"] = mu.reshape(1)
    names = list(states)
    prog = eta.trace(lambda v, *st: smp.logits(v, dict(zip(names, st))), S([x.size], dtype.f32),
                     *[S(list(v.shape), dtype.from_numpy(v.dtype)) for v in states.values()])
    return prog.run(x, *states.values(), backend=backend)


def test_layout_rows_equal_each_chain_alone(backend):
    B = len(ROW_CHAINS)
    x = logit_rows(3, rows=B, vocab=96)
    rng = np.stack([np.array([1000 + i, 7 * i], np.uint32) for i in range(B)])
    mu = np.linspace(2.0, 8.0, B).astype(np.float32).reshape(B, 1)
    layout = Layout(layout_of(tuple(slot_of(t) for t in c) for c in ROW_CHAINS))
    params = np.stack([layout.row(c) for c in ROW_CHAINS])

    def fn(v, p, r, m):
        return layout.apply(eta.sanitize(v), p, RowContext(B, r, m))
    prog = eta.trace(fn, S([B, 96], dtype.f32), S(list(params.shape), dtype.f32), S([B, 2], dtype.u32),
                     S([B, 1], dtype.f32))
    got = prog.run(x, params, rng, mu, backend=backend)
    for i, chain in enumerate(ROW_CHAINS):
        want = _alone(chain, x[i], rng[i], mu[i], backend)
        np.testing.assert_array_equal(got[i], want, err_msg=f"row {i}: {chain}")
    assert not np.isfinite(got[6]).all()  # p-less cut something (the layout is not a no-op)


def test_supersequence_holds_every_chain_in_order():
    a, b = ("TopK", "TopP", "XTC"), ("TopP", "TopK")
    s = supersequence(a, b)
    assert len(s) == 4
    for chain in (a, b):
        it = iter(s)
        assert all(k in it for k in chain)  # a subsequence
    assert layout_of([a, b, a]) == layout_of([b, a])


# ---- batches on a tiny model ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny(gpu):
    return tiny_model(tiny_config(layers=2, vocab=300), seed=11)[0]


def alone(model, prompt, **kw):
    g = model.generate(prompt, **kw)
    g.run()
    return g.tokens


STAGE_CASES = [
    dict(sampler="top-a", top_a=0.3), dict(sampler="p-less"), dict(sampler="epsilon-cutoff", value=0.01),
    dict(sampler="eta-cutoff", value=0.01), dict(top_n_sigma=1.0), dict(xtc_probability=0.5, xtc_threshold=0.05),
    dict(dynatemp_range=0.5, dynatemp_exponent=1.5), dict(tfs_z=0.9), dict(sampler="mirostat", value=3.0),
    dict(mirostat_v1=3.0, mirostat_eta=0.2), dict(dry_multiplier=0.8, dry_allowed_length=1, dry_base=1.5,
                                                  dry_sequence_breakers=[[12], [9, 9]]),
    dict(top_k=20, top_p=0.9, samplers="top_p;top_k"), dict(p_less=True, top_k=40, xtc_probability=1.0),
]


@pytest.mark.parametrize("case", STAGE_CASES, ids=lambda c: ",".join(c))
def test_each_stage_per_row_equals_the_request_alone(tiny, case):
    kw = dict(max_tokens=10, temperature=0.9, seed=1234, **({"sampler": "temperature"} | case))
    gens = tiny.generate_batch(PROMPTS, **kw)
    assert [g.tokens for g in gens] == [alone(tiny, p, **kw) for p in PROMPTS]


def test_n_samples_with_mirostat_and_dry_equal_seeded_runs_alone(tiny):
    kw = dict(max_tokens=8, sampler="mirostat", value=4.0, temperature=1.0, dry_multiplier=1.0,
              dry_sequence_breakers=[])
    s = tiny.generate("5 17 42 7", seed=3, n=3, **kw)
    s.run()
    assert [g.tokens for g in s.samples] == [alone(tiny, "5 17 42 7", seed=3 + i, **kw) for i in range(3)]


def _row(model, **kw):
    opts = samplers.options.SamplingOptions.of(kw.pop("sampler", "temperature"), kw.pop("temperature", 0.9),
                                               **{k: v for k, v in kw.items() if k != "seed"})
    return opts.row_params(kw.get("seed", 0), tokenizer=model.tokenizer)


MIXED = [  # (request options, max_tokens): rows leave at different times, so later compositions carry state
    (dict(sampler="mirostat", value=3.0, seed=1), 14), (dict(xtc_probability=0.7, xtc_threshold=0.05, seed=2), 5),
    (dict(temperature=0.0), 7), (dict(dry_multiplier=1.2, dry_allowed_length=1, dry_penalty_last_n=6,
                                      dry_sequence_breakers=[], seed=4), 12),
    (dict(sampler="top-k", top_k=15, top_n_sigma=2.0, repetition_penalty=1.3, seed=5), 9),
    (dict(mirostat_v1=5.0, tfs_z=0.95, seed=6), 11),
]


def test_mixed_chains_in_one_batch_equal_each_alone(tiny):
    vocab = tiny.config.vocab_size
    batch = Batch(tiny, RowSampling(vocab), window=2)
    seqs = []
    for (opts, n), prompt in zip(MIXED, PROMPTS * 2):
        ids = tiny.tokenizer.encode(prompt).ids
        p = _row(tiny, **dict(opts))
        seqs.append(batch.add(ids, p, n, row_state=RowState(p, vocab, ids)))
    run_sync(batch.run())
    assert batch.stats.compositions > 2  # rows left mid-way: mu and DRY's history moved to new compositions
    for s, (opts, n), prompt in zip(seqs, MIXED, PROMPTS * 2):
        o = dict(opts)
        kw = dict(sampler=o.pop("sampler", "temperature"), temperature=o.pop("temperature", 0.9),
                  seed=o.pop("seed", 0), **o)
        assert s.tokens == alone(tiny, prompt, max_tokens=n, **kw), opts


def test_new_stage_values_compile_nothing(tiny):
    from piegpu.eta import cache
    tiny.generate_batch(PROMPTS[:2], max_tokens=2, xtc_probability=0.5, sampler="mirostat", value=3.0, seed=1)
    before = cache.cache_stats()
    tiny.generate_batch(PROMPTS[:2], max_tokens=2, xtc_probability=0.9, xtc_threshold=0.2, sampler="mirostat",
                        value=6.0, mirostat_eta=0.3, temperature=0.6, seed=9)
    assert cache.cache_stats()["misses"] == before["misses"]


def test_sampler_program_rows_beside_named_samplers_equal_each_alone(tiny):
    """A program row (top-a traced into a container) beside named-sampler rows: each equals its request alone."""
    vocab = tiny.config.vocab_size
    prog = eta.Program.from_bytes(eta.trace(lambda x, s: eta.gumbel_max(eta.mask_apply(x, eta.top_a_mask(x, 0.2)), s),
                                            S([vocab], dtype.f32), S([2], dtype.u32)).to_bytes())
    gens = tiny.generate_batch(PROMPTS, max_tokens=6, sampler=prog, seed=21)
    assert [g.tokens for g in gens] == [alone(tiny, p, max_tokens=6, sampler=prog, seed=21) for p in PROMPTS]
    batch = Batch(tiny, RowSampling(vocab))
    opts = [samplers.options.SamplingOptions.of(prog), samplers.options.SamplingOptions.of("top-k", 0.8, k=9),
            samplers.options.SamplingOptions.of(prog), samplers.options.SamplingOptions.of("greedy")]
    seqs = []
    for o, prompt, seed, n in zip(opts, PROMPTS, (3, 4, 5, 6), (6, 3, 5, 6)):
        ids = tiny.tokenizer.encode(prompt).ids
        p = o.row_params(seed)
        seqs.append(batch.add(ids, p, n, row_state=RowState(p, vocab, ids)))
    run_sync(batch.run())
    assert [s.tokens for s in seqs] == [alone(tiny, PROMPTS[0], max_tokens=6, sampler=prog, seed=3),
                                        alone(tiny, PROMPTS[1], max_tokens=3, sampler="top-k", k=9,
                                              temperature=0.8, seed=4),
                                        alone(tiny, PROMPTS[2], max_tokens=5, sampler=prog, seed=5),
                                        alone(tiny, PROMPTS[3], max_tokens=6)]
    with pytest.raises(ValidationError, match="whole sampler"):
        RowParams(program=prog, top_k=3)


def test_rows_refuse_what_they_cannot_run(tiny):
    from piegpu.inferlets.watermark import Watermark
    with pytest.raises(ValidationError, match="DRY"):
        RowParams.of(Sampler(1.0).with_dry(DRY(1.0)))  # string breakers and no tokenizer
    with pytest.raises(ValidationError, match="Mirostat must be the last"):
        RowParams(chain=(Mirostat(), TopK(3)))
    with pytest.raises(ValidationError, match="not both"):
        RowParams(top_k=3, chain=(XTC(0.5),))
    with pytest.raises(ValidationError, match="not"):
        RowParams.of(Sampler(1.0, (), (Watermark(7),)))


# ---- p-less: llama.cpp's test_p_less ----------------------------------------------------------------

@pytest.mark.parametrize("probs,expected", [([0.1, 0.15, 0.2, 0.25, 0.3], [0.45454545, 0.54545455]),
                                            ([0.2] * 5, [0.2] * 5)])
def test_llama_cpp_p_less_cases(backend, probs, expected):
    x = np.log(np.asarray(probs, np.float32))
    final = eta.trace(lambda v: Sampler(1.0, (PLess(),)).logits(v, {}), S([x.size], dtype.f32)).run(
        x, backend=backend)
    p = ref.probs(ref.clean(final))
    np.testing.assert_allclose(sorted(p[p > 0]), expected, atol=1e-5)


def test_p_less_by_name_option_and_flag():
    assert samplers.from_spec("p-less").truncations == (PLess(),)
    assert samplers.from_spec("temperature", p_less=True, top_k=5).truncations == (TopK(5), PLess())
    assert samplers.from_spec("temperature", p_less=False).truncations == ()
    assert samplers.from_spec("temperature", p_less=True, top_k=5, samplers="p_less;top_k").truncations == (
        PLess(), TopK(5))
    with pytest.raises(ValidationError):
        PLess("yes")
