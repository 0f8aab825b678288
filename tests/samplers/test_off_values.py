"""Sampler "off" values as the ecosystem passes them (llama.cpp, vLLM, transformers).

top_k=0, top_p=1, min_p=0, top_a=0, typical=1, epsilon/eta cutoff 0, repetition_penalty=1,
presence/frequency_penalty=0 mean "this stage does nothing". An off stage keeps every token,
is dropped from the chain (no mask is traced, no kernel compiled), and samples exactly the
tokens of the chain without it. Values outside the valid range still raise a clear error.
"""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import ValidationError, dtype, eta, samplers
from piegpu.samplers import Penalties, Sampler, from_spec
from tests.samplers import numpy_samplers as ref
from tests.samplers.test_keep_masks import V, compare, logit_rows

# (off stage, the numpy rule it must equal: keep everything)
OFF = [
    (samplers.TopK(0), lambda r: ref.top_k(r, r.size)),
    (samplers.TopP(1.0), lambda r: ref.top_p(r, 1.0)),
    (samplers.MinP(0.0), lambda r: ref.min_p(r, 0.0)),
    (samplers.TopA(0.0), lambda r: ref.top_a(r, 0.0)),
    (samplers.Typical(1.0), lambda r: ref.typical(r, 1.0)),
    (samplers.EpsilonCutoff(0.0), lambda r: ref.epsilon_cutoff(r, 0.0)),
    (samplers.EtaCutoff(0.0), lambda r: ref.eta_cutoff(r, 0.0)),
]
OFF_IDS = [s.name for s, _ in OFF]
# the chain an off stage is added to: something that does truncate
BASE = (samplers.TopK(40), samplers.MinP(0.02))


def trace_step(sampler: Sampler, rows: int = 8):
    names = [s.name for s in sampler.states(V)]
    specs = [eta.spec([rows, V], dtype.f32)] + [eta.spec(list(s.shape), s.dtype) for s in sampler.states(V)]

    def fn(x, *st):
        return sampler.step(x, dict(zip(names, st)))[0]
    return eta.trace(fn, *specs)


def trace_keep(sampler: Sampler, rows: int):
    return eta.trace(lambda x: sampler.keep_mask(eta.sanitize(x), {}), eta.spec([rows, V], dtype.f32))


@pytest.mark.parametrize("stage", [s for s, _ in OFF] + [Penalties(1.0, 0.0, 0.0)],
                         ids=OFF_IDS + ["penalties"])
def test_off_stage_is_dropped_from_the_chain(stage):
    assert stage.off
    base = Sampler(0.8, BASE)
    for with_off in (Sampler(0.8, BASE).then(stage), Sampler(0.8).then(stage, *BASE)):
        assert with_off == base and hash(with_off) == hash(base)
        assert with_off.states(V) == base.states(V)  # no seen-counts channel for off penalties
        assert trace_step(with_off).hash == trace_step(base).hash  # the same program: no needless mask


@pytest.mark.parametrize("case", range(len(OFF)), ids=OFF_IDS)
def test_off_stage_keeps_every_token(case):
    stage, rule = OFF[case]
    x = logit_rows(300 + case)
    prog = eta.trace(lambda t: stage.keep(eta.sanitize(t), {}), eta.spec(list(x.shape), dtype.f32))
    assert {n.op for n in prog.nodes} <= {"input", "broadcast", "const"}, "an off stage traced a mask"
    got = prog.run(x)
    assert got.dtype == np.bool_ and got.all()
    bad, _ = compare(got, x, rule)  # the numpy rule at the off value keeps every possible token too
    assert not bad, bad[:8]


@pytest.mark.parametrize("case", range(len(OFF)), ids=OFF_IDS)
def test_keep_mask_and_tokens_equal_the_chain_without_the_stage(case):
    stage, _ = OFF[case]
    x = logit_rows(400 + case)[:8] / 0.8
    keep = trace_keep(Sampler(1.0, BASE + (stage,)), 8).run(x)
    want = trace_keep(Sampler(1.0, BASE), 8).run(x)
    np.testing.assert_array_equal(keep, want)
    # the numpy reference of the chain without the stage: top-k 40, then min-p 0.02 of what is left
    for i in range(8):
        row = ref.clean(x[i])
        k, amb_k = ref.top_k(row, 40)
        m, amb_m = ref.min_p(np.where(k, row, -np.inf), 0.02)
        ok = np.isfinite(row) & ~amb_k & ~amb_m
        assert ((keep[i] & k & np.isfinite(row)) == (k & m & np.isfinite(row)))[ok].all(), i
    rng = np.array([1234, 5], np.uint32)
    got = trace_step(Sampler(0.8, BASE + (stage,))).run(logit_rows(500 + case)[:8], rng)
    np.testing.assert_array_equal(got, trace_step(Sampler(0.8, BASE)).run(logit_rows(500 + case)[:8], rng))


@pytest.mark.parametrize("options,same_as", [
    (dict(top_k=0), "temperature"),
    (dict(top_p=1), "temperature"),
    (dict(top_p=1.0, min_p=0, top_k=0, typical=1.0, top_a=0, epsilon_cutoff=0, eta_cutoff=0), "temperature"),
    (dict(repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0), "greedy"),
])
def test_from_spec_off_options(options, same_as):
    assert from_spec(None, 0.9, None, **options) == from_spec(same_as, 0.9)
    # an off option of the named sampler is its parameter: plain sampling
    assert from_spec("top-p", 0.9, None, top_p=1) == from_spec("temperature", 0.9)
    assert from_spec("min-p", 0.9, 0.0) == from_spec("top-k", 0.9, 0) == from_spec("temperature", 0.9)
    assert samplers.top_p(1.0).name == "temperature" and samplers.min_p(0.0).truncations == ()


def test_named_sampler_option_is_its_parameter_not_a_second_stage():
    assert from_spec("top-p", 1.0, None, top_p=0.5).truncations == (samplers.TopP(0.5),)
    assert from_spec("top_k", 1.0, 7, top_k=7).truncations == (samplers.TopK(7),)
    with pytest.raises(ValidationError, match="parameter twice.*Fix"):
        from_spec("top-p", 1.0, 0.3, top_p=0.5)


def test_temperature_one_scales_nothing_and_zero_is_greedy():
    prog = eta.trace(lambda x: Sampler(1.0).logits(x, {}), eta.spec([V], dtype.f32))
    assert not {"mul", "div"} & {n.op for n in prog.nodes}
    assert from_spec("top-p", 0.0, 0.5).greedy and from_spec(None, 0.0, None, top_k=0).greedy


def test_near_off_values_still_truncate():
    assert Sampler(1.0, (samplers.TopP(0.999),)).truncations == (samplers.TopP(0.999),)
    assert Sampler(1.0, (samplers.MinP(1e-6), samplers.TopK(1))).truncations == (samplers.MinP(1e-6),
                                                                                    samplers.TopK(1))
    assert Sampler(1.0, (), (Penalties(1.0, 0.0, 1e-3),)).processors == (Penalties(1.0, 0.0, 1e-3),)


@pytest.mark.parametrize("make,match", [
    (lambda: samplers.TopP(1.5), r"top_p: p must be in \(0, 1\] \(1 = off\), got 1.5. Fix"),
    (lambda: samplers.TopP(0.0), r"top_p: p must be in \(0, 1\]"),
    (lambda: samplers.MinP(-0.1), r"min_p: p must be in \[0, 1\] \(0 = off\), got -0.1. Fix"),
    (lambda: samplers.MinP(1.1), r"min_p: p must be in \[0, 1\]"),
    (lambda: samplers.TopK(-1), r"top_k: k must be an int >= 0 \(0 = off\), got -1. Fix"),
    (lambda: samplers.TopK(2.5), "top_k: k must be an int"),
    (lambda: samplers.TopA(-0.5), r"top_a: a must be a finite number >= 0 \(0 = off\)"),
    (lambda: samplers.Typical(1.2), r"typical: mass must be in \(0, 1\] \(1 = off\)"),
    (lambda: samplers.EpsilonCutoff(1.0), r"epsilon_cutoff: epsilon must be in \[0, 1\) \(0 = off\)"),
    (lambda: samplers.EtaCutoff(-1e-4), r"eta_cutoff: eta must be in \[0, 1\)"),
    (lambda: samplers.TopP("most"), r"top_p: p must be a number in \(0, 1\]"),
    (lambda: Penalties(0.0), r"repetition_penalty must be a finite number > 0 \(1 = off\)"),
    (lambda: from_spec(None, top_p=1.5), "top_p: p must be in"),
    (lambda: from_spec(None, min_p=-0.1), "min_p: p must be in"),
    (lambda: from_spec(None, top_k=-1), "top_k: k must be an int >= 0"),
    (lambda: from_spec("top-k", 1.0, -3), "top_k: k must be an int >= 0"),
    (lambda: from_spec(None, 0.0, None, top_p=1.5), "top_p: p must be in"),  # checked even when greedy
    (lambda: from_spec("greedy", -1.0), "temperature must be"),
])
def test_invalid_values_still_raise_with_a_fix(make, match):
    with pytest.raises(ValidationError, match=match):
        make()


def test_generate_with_off_values_samples_like_plain_temperature(gpu):
    from tests.helpers import tiny_config, tiny_model
    model = tiny_model(tiny_config(layers=2, vocab=300), seed=11)[0]
    runs = []
    for kw in (dict(sampler="temperature"), dict(sampler="top-p", top_p=1), dict(sampler="min-p", min_p=0),
               dict(sampler="top-k", top_k=0, repetition_penalty=1.0), dict(top_p=1.0, typical=1.0)):
        g = model.generate("1 2 3", max_tokens=8, seed=7, temperature=0.9, **kw)
        g.run()
        assert g.sampler == from_spec("temperature", 0.9), kw
        runs.append(g.tokens)
    assert all(r == runs[0] for r in runs), runs
