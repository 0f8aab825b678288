"""llama.cpp's other samplers as device stages: XTC, top-n-sigma, dynamic temperature, tail-free,
Mirostat v1 and logit bias.

Each stage equals a numpy implementation written from llama.cpp's src/llama-sampling.cpp
(tests/samplers/numpy_samplers.py) on many random logit rows with ties, -inf and NaN, on the
interpreter and on WGSL; the expected values of llama.cpp's tests/test-sampling.cpp cases are
reproduced (XTC with probability 1 where llama.cpp draws its coin; tail-free from the
test_tfs cases of the version before its removal); off values trace nothing; bad values raise
ValidationError with a fix.
"""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import ValidationError, dtype, eta, samplers
from piegpu.eta.counter_rng import rng_uniform
from piegpu.samplers import (XTC, DynamicTemperature, LogitBias, MirostatV1, Sampler, SeqContext, TailFree,
                             TopNSigma, from_spec)
from piegpu.samplers.llamacpp import XTC_SALT
from tests.samplers import numpy_samplers as ref
from tests.samplers.test_keep_masks import R, V, compare, logit_rows

S = eta.spec
BACKENDS = ["interp", "wgsl"]
RNG = np.array([1234, 56], np.uint32)


@pytest.fixture(params=BACKENDS)
def backend(request):
    if request.param == "wgsl":
        request.getfixturevalue("gpu")
    return request.param


def run_keep(stage, x, backend, **state):
    """The stage's keep mask of each row of x (sanitized, as the chain gives it)."""
    names = list(state)
    specs = [S(list(x.shape), dtype.f32)] + [S(list(v.shape), dtype.from_numpy(v.dtype)) for v in state.values()]
    prog = eta.trace(lambda t, *st: stage.keep(eta.sanitize(t), dict(zip(names, st))), *specs)
    return prog.run(x, *state.values(), backend=backend)


def xtc_coins(rows: int, state=RNG) -> np.ndarray:
    """The uniform XTC draws for each row: the eta RNG (counter_rng's reference) at [key ^ XTC_SALT, counter]."""
    return rng_uniform(np.array([int(state[0]) ^ XTC_SALT, int(state[1])], np.uint32), (rows,))


KEEP_CASES = [
    ("top-n-sigma-1", TopNSigma(1.0), lambda r, i: ref.top_n_sigma(r, 1.0)),
    ("top-n-sigma-2.5", TopNSigma(2.5), lambda r, i: ref.top_n_sigma(r, 2.5)),
    ("top-n-sigma-0.3", TopNSigma(0.3), lambda r, i: ref.top_n_sigma(r, 0.3)),
    ("xtc-0.1", XTC(1.0, 0.1), lambda r, i: ref.xtc(r, 1.0, 0.1, 0.0)),
    ("xtc-0.02", XTC(1.0, 0.02), lambda r, i: ref.xtc(r, 1.0, 0.02, 0.0)),
    ("xtc-0", XTC(1.0, 0.0), lambda r, i: ref.xtc(r, 1.0, 0.0, 0.0)),
    ("xtc-coin", XTC(0.5, 0.05), lambda r, i: ref.xtc(r, 0.5, 0.05, xtc_coins(R)[i])),
    ("tail-free-0.95", TailFree(0.95), lambda r, i: ref.tail_free(r, 0.95)),
    ("tail-free-0.5", TailFree(0.5), lambda r, i: ref.tail_free(r, 0.5)),
    ("tail-free-0.1", TailFree(0.1), lambda r, i: ref.tail_free(r, 0.1)),
]


@pytest.mark.parametrize("case", range(len(KEEP_CASES)), ids=[c[0] for c in KEEP_CASES])
def test_keep_mask_matches_llama_cpp_numpy(backend, case):
    _, stage, rule = KEEP_CASES[case]
    x = logit_rows(700 + case)
    got = run_keep(stage, x, backend, rng=RNG)
    bad, amb = [], 0
    for i in range(R):
        b, a = compare(got[i:i + 1], x[i:i + 1], lambda r: rule(r, i))
        bad += [(i,) + t[1:] for t in b]
        amb += a
    assert not bad, f"{stage}: device keep differs from numpy at (row, token, device, numpy) {bad[:8]}"
    assert amb <= 0.002 * x.size, amb
    rows_possible = [i for i in range(R) if np.isfinite(ref.clean(x[i])).any()]
    assert all((got[i] & np.isfinite(ref.clean(x[i]))).any() for i in rows_possible), "a row kept no possible token"


def test_xtc_coin_fires_on_about_probability_of_rows():
    x = np.tile(np.log(np.array([0.4, 0.3, 0.2, 0.1], np.float32)), (4000, 1))
    got = run_keep(XTC(0.3, 0.15), x, "interp", rng=RNG)
    fired = ~got[:, 0]
    assert (fired == (xtc_coins(4000) <= 0.3)).all()
    assert abs(fired.mean() - 0.3) < 0.03
    assert (got[fired] == [False, False, True, True]).all() and got[~fired].all()


@pytest.mark.parametrize("mu", [2.0, 4.5, 7.0, 11.0])
def test_mirostat_v1_keep_matches_numpy(backend, mu):
    x = logit_rows(int(mu * 10))
    mus = np.random.default_rng(int(mu)).uniform(mu - 1.0, mu + 1.0, (R, 1)).astype(np.float32)
    for m in (100, 5):
        got = run_keep(MirostatV1(3.0, 0.1, m), x, backend, mirostat_mu=mus)
        bad = []
        for i in range(R):
            b, _ = compare(got[i:i + 1], x[i:i + 1], lambda r: ref.mirostat_v1_keep(r, float(mus[i, 0]), m))
            bad += [(i,) + t[1:] for t in b]
        assert not bad, (m, bad[:8])


@pytest.mark.parametrize("params", [(1.0, 0.5, 1.0), (0.8, 0.6, 2.0), (1.5, 2.0, 0.5), (0.5, 0.5, 1.0)])
def test_dynamic_temperature_logits_match_numpy(backend, params):
    """The final logits of a top-k 60 + dynamic temperature chain: entropy over the kept candidates."""
    t, delta, exponent = params
    x = logit_rows(900 + int(10 * t))
    smp = Sampler(1.0, (samplers.TopK(60), DynamicTemperature(t, delta, exponent)))
    assert smp.temperature == t
    final = eta.trace(lambda v: smp.logits(v, {}), S(list(x.shape), dtype.f32)).run(x, backend=backend)
    for i in range(R):
        row = ref.clean(x[i]) / t
        keep, amb = ref.top_k(row, 60)
        assert not amb.any()
        want = ref.dynamic_temperature(np.where(keep, ref.clean(x[i]), -np.inf), t, delta, exponent)
        assert (np.isfinite(final[i]) == np.isfinite(want)).all(), i
        fin = np.isfinite(want)
        if fin.sum() > 1 and np.isfinite(ref.dynamic_temperature(ref.clean(x[i]), t, delta, exponent)).sum() > 1:
            np.testing.assert_allclose(final[i][fin], want[fin], rtol=2e-4, atol=2e-4)


def test_logit_bias_matches_numpy(backend):
    x = logit_rows(31)[:6]
    bias = {0: 2.5, 7: -np.inf, 100: -3.0, 383: 0.25}
    smp = Sampler(0.0, (), (LogitBias(bias),))
    init = smp.initial(SeqContext((), V))
    prog = eta.trace(lambda v, b: smp.logits(v, {"logit_bias": b}), S([6, V], dtype.f32), S([V], dtype.f32))
    got = prog.run(x, init["logit_bias"], backend=backend)
    for i in range(6):
        want = ref.logit_bias(ref.clean(x[i]), bias)
        assert (np.isfinite(got[i]) == np.isfinite(want)).all()
        np.testing.assert_allclose(got[i][np.isfinite(want)], want[np.isfinite(want)], rtol=1e-6)


# ---- llama.cpp's tests/test-sampling.cpp cases ------------------------------------------------------

def _final(sampler, probs_in, states=None):
    """Final logits of `sampler` for logits log(probs), as llama.cpp's sampler_tester builds them."""
    x = np.log(np.asarray(probs_in, np.float32))
    states = states or {}
    names = list(states)
    prog = eta.trace(lambda v, *st: sampler.logits(v, dict(zip(names, st))), S([x.size], dtype.f32),
                     *[S(list(v.shape), dtype.from_numpy(v.dtype)) for v in states.values()])
    return x, prog.run(x, *states.values())


@pytest.mark.parametrize("threshold,expected", [(0.09, [0.1]), (0.19, [0.2, 0.1]), (0.29, [0.3, 0.2, 0.1]),
                                                (0.39, [0.4, 0.3, 0.2, 0.1])])
def test_llama_cpp_xtc_cases(threshold, expected):
    # test_xtc({0.4, 0.3, 0.2, 0.1}, expected, 0.99, t): llama.cpp's coin (mt19937 seed 0) fires at 0.99;
    # probability 1 always fires. Its check reads the softmax taken before the cut (not renormalised).
    x, final = _final(Sampler(1.0, (XTC(1.0, threshold),)), [0.4, 0.3, 0.2, 0.1], {"rng": RNG})
    kept = np.isfinite(final)
    p = ref.probs(ref.clean(x))
    np.testing.assert_allclose(sorted(p[kept], reverse=True), expected, atol=1e-5)


@pytest.mark.parametrize("n,expected", [(1.0, [0.0, 0.0, 0.428571, 0.571429]), (0.0, [0.1, 0.2, 0.3, 0.4]),
                                        (3.0, [0.1, 0.2, 0.3, 0.4])])
def test_llama_cpp_top_n_sigma_cases(n, expected):
    _, final = _final(Sampler(1.0, (TopNSigma(n),)), [0.1, 0.2, 0.3, 0.4])
    np.testing.assert_allclose(ref.probs(ref.clean(final)), expected, atol=1e-5)


@pytest.mark.parametrize("temp,delta,exponent,expected", [
    (1.0, 0.0, 1.0, [0.1, 0.2, 0.3, 0.4]),  # test_temp_ext(..., 1.0, 0.0, 1.0)
    (0.0, 0.0, 1.0, [0.0, 0.0, 0.0, 1.0]),  # test_temp_ext(..., 0.0, 0.0, 1.0)
    # dynamic cases, by hand from llama_sampler_temp_ext_apply: H = 1.279854, H / log 4 = 0.923230
    (1.0, 0.5, 1.0, [0.1 ** (1 / 1.423230), 0.2 ** (1 / 1.423230), 0.3 ** (1 / 1.423230), 0.4 ** (1 / 1.423230)]),
    (0.7, 0.7, 2.0, [v ** (1 / (1.4 * 0.923230 ** 2)) for v in (0.1, 0.2, 0.3, 0.4)]),
])
def test_llama_cpp_temp_ext_cases(temp, delta, exponent, expected):
    smp = Sampler(1.0, (DynamicTemperature(temp, delta, exponent),))
    if smp.greedy:
        x = np.log(np.array([0.1, 0.2, 0.3, 0.4], np.float32))
        tok = eta.trace(lambda v: smp.step(v, {})[0], S([4], dtype.f32)).run(x)
        got = np.eye(4)[int(tok)]
    else:
        _, final = _final(smp, [0.1, 0.2, 0.3, 0.4], {"rng": RNG})
        got = ref.probs(ref.clean(final))
    expected = np.asarray(expected) / np.sum(expected)
    np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("z,expected", [(0.25, [0.3]), (0.75, [0.3, 0.25]), (0.99, [0.3, 0.25])])
def test_llama_cpp_tail_free_cases(z, expected):
    # test_tfs({0.1, 0.15, 0.2, 0.25, 0.3}, expected, z) of llama.cpp before tail-free was removed
    x, final = _final(Sampler(1.0, (TailFree(z),)), [0.1, 0.15, 0.2, 0.25, 0.3])
    p = ref.probs(ref.clean(x))
    np.testing.assert_allclose(sorted(p[np.isfinite(final)], reverse=True), expected, atol=1e-5)


# ---- sampling through the chain ------------------------------------------------------------------

def test_xtc_draws_follow_the_mixture(gpu):
    """With probability 0.4 XTC cuts the top choices: the drawn tokens follow 0.4 * cut + 0.6 * full."""
    from tests.samplers.test_distributions import V as DV, assert_follows, base_logits, draw
    x = base_logits()
    smp = Sampler(1.0, (XTC(0.4, 0.12),))
    row = ref.clean(x)
    full = ref.probs(row)
    cut = ref.probs(np.where(ref.xtc(row, 1.0, 0.12, 0.0)[0], row, -np.inf))
    assert (cut != full).any() and not ref.xtc(row, 1.0, 0.12, 0.0)[1].any()
    assert_follows(draw(smp, x), 0.4 * cut + 0.6 * full, "xtc")
    assert DV == x.size


def test_mirostat_v1_update(gpu):
    x = logit_rows(77)[3]
    smp = Sampler(1.0, (MirostatV1(2.0, 0.25, 100),))
    prog = eta.trace(lambda t, m, r: (lambda tok, new: (tok, new["mirostat_mu"], new["rng"]))(
        *smp.step(t, {"mirostat_mu": m, "rng": r})), S([V], dtype.f32), S([1], dtype.f32), S([2], dtype.u32))
    row = ref.clean(x)
    keep, amb = ref.mirostat_v1_keep(row, 4.0)
    assert not amb.any() and 1 < keep.sum() < np.isfinite(row).sum()
    for seed in range(5):
        tok, mu, _ = prog.run(x, np.array([4.0], np.float32), np.array([seed, 3], np.uint32), backend="wgsl")
        assert keep[int(tok)]
        want = ref.mirostat_update(np.where(keep, row, -np.inf), int(tok), 4.0, tau=2.0, eta=0.25)
        np.testing.assert_allclose(mu, [want], rtol=1e-5, atol=1e-5)


def test_non_finite_logits_give_the_same_token_on_every_backend(gpu):
    from tests.reliability.samplers_table import LOGITS, V as TV, program
    chains = {
        "xtc": from_spec(None, 0.7, xtc_probability=1.0, xtc_threshold=0.02),
        "top-n-sigma": from_spec(None, 0.7, top_n_sigma=1.0),
        "tail-free": from_spec(None, 0.7, tfs_z=0.9),
        "dynatemp": from_spec(None, 0.7, dynatemp_range=0.5),
        "mirostat-v1": from_spec(None, 0.7, mirostat_v1=3.0),
        "logit-bias": from_spec(None, 0.7, logit_bias={3: 1.0, 5: -np.inf}, top_k=10),
    }
    bad = []
    for name, smp in chains.items():
        prog, extra = program(smp)
        for case, x in LOGITS.items():
            a, b = int(prog.run(x, *extra)), int(prog.run(x, *extra, backend="wgsl"))
            if not (0 <= a < TV and a == b):
                bad.append((name, case, a, b))
        for case in ("all NaN", "all -inf", "-inf and NaN only"):
            assert int(prog.run(LOGITS[case], *extra)) == 0, (name, case)
    assert not bad, bad


# ---- off values, options, errors -------------------------------------------------------------------

OFF = [TopNSigma(0.0), TopNSigma(-1.0), XTC(0.0, 0.1), XTC(0.5, 0.6), TailFree(1.0), LogitBias({}),
       DynamicTemperature(0.8, 0.0, 1.0)]


@pytest.mark.parametrize("stage", OFF, ids=[repr(s) for s in OFF])
def test_off_stages_trace_nothing(stage):
    from tests.samplers.test_off_values import trace_step
    assert stage.off
    base = Sampler(0.8, (samplers.TopK(40),))
    with_off = base.then(stage)
    assert with_off == base and with_off.states(V) == base.states(V)
    assert trace_step(with_off).hash == trace_step(base).hash
    if not isinstance(stage, LogitBias):
        prog = eta.trace(lambda t: stage.keep(t, {}), S([V], dtype.f32))
        assert {n.op for n in prog.nodes} <= {"input", "broadcast", "const"}


def test_plain_temperature_through_dynamic_temperature():
    assert Sampler(1.0, (DynamicTemperature(0.7, 0.0, 1.0),)) == Sampler(0.7)
    assert from_spec(None, 0.7, dynatemp_range=0.0) == from_spec("temperature", 0.7)
    assert from_spec(None, 0.0, dynatemp_range=0.5).greedy  # temperature 0 is greedy in piegpu
    with pytest.raises(ValidationError, match="disagree. Fix"):
        Sampler(0.5, (DynamicTemperature(0.7, 0.2, 1.0),))


def test_from_spec_options_in_llama_cpp_order():
    s = from_spec(None, 0.8, None, xtc_probability=0.5, xtc_threshold=0.2, top_k=40, top_n_sigma=1.5, tfs_z=0.9,
                  min_p=0.05, dynatemp_range=0.3, dynatemp_exponent=1.5, logit_bias={"5": -1.0},
                  repetition_penalty=1.1)
    assert [t.name for t in s.truncations] == ["top-n-sigma", "top-k", "tail-free", "min-p", "xtc",
                                               "dynamic-temperature"]
    assert s.truncations[-2] == XTC(0.5, 0.2) and s.truncations[-1] == DynamicTemperature(0.8, 0.3, 1.5)
    assert [p.name for p in s.processors] == ["logit-bias", "penalties"] and s.temperature == 0.8
    m = from_spec(None, 1.0, mirostat_v1=4.0, mirostat_eta=0.2, mirostat_m=50, top_k=30)
    assert m.truncations[-1] == MirostatV1(4.0, 0.2, 50)
    assert from_spec(None, 0.9, top_n_sigma=0, tfs_z=1.0, xtc_probability=0.0, logit_bias={}) == \
        from_spec("temperature", 0.9)
    # --samplers: llama.cpp's names give the order; a set option left out of it is an error
    o = from_spec(None, 1.0, top_k=10, top_p=0.9, min_p=0.1, xtc_probability=1.0, samplers="min_p;xtc;top_p;top_k")
    assert [t.name for t in o.truncations] == ["min-p", "xtc", "top-p", "top-k"]
    with pytest.raises(ValidationError, match=r"\['top_p'\] are set but not in the sampler order. Fix"):
        from_spec(None, 1.0, top_k=10, top_p=0.9, samplers=["top_k"])
    with pytest.raises(ValidationError, match="unknown sampler 'banana'. Fix"):
        from_spec(None, 1.0, top_k=10, samplers="top_k;banana")


def test_logit_bias_values_are_device_data():
    a = from_spec(None, 0.8, logit_bias={1: 2.0, 9: -np.inf})
    b = from_spec(None, 0.8, logit_bias={4: -1.0})
    assert a != b and a.trace_key == b.trace_key
    from tests.samplers.test_off_values import trace_step
    assert trace_step(a).hash == trace_step(b).hash  # new biases: the same program, nothing recompiles
    init = a.initial(SeqContext((), 12))["logit_bias"]
    assert init.tolist() == [0, 2.0, 0, 0, 0, 0, 0, 0, 0, -np.inf, 0, 0]
    with pytest.raises(ValidationError, match=r"token id 40 is outside the vocab \(size 12\). Fix"):
        LogitBias({40: 1.0}).initial(SeqContext((), 12))


@pytest.mark.parametrize("make,match", [
    (lambda: XTC(1.5, 0.1), r"xtc: probability must be in \[0, 1\] \(0 = off\), got 1.5. Fix"),
    (lambda: XTC(0.5, -0.1), r"xtc: threshold must be in \[0, 1\]"),
    (lambda: TopNSigma(float("nan")), "top_n_sigma: n must be a finite number"),
    (lambda: TailFree(1.5), r"tail_free: z must be in \[0, 1\] \(1 = off\), got 1.5. Fix"),
    (lambda: DynamicTemperature(1.0, -0.5, 1.0), r"dynatemp: delta \(range\) must be a finite number >= 0"),
    (lambda: DynamicTemperature(1.0, 0.5, -1.0), "dynatemp: exponent must be a finite number >= 0"),
    (lambda: DynamicTemperature(-1.0, 0.5, 1.0), "temperature must be"),
    (lambda: MirostatV1(5.0, 0.1, 1), "mirostat_v1: m .* must be an int >= 2.*Fix"),
    (lambda: MirostatV1(-5.0, 0.1, 100), "tau"),
    (lambda: LogitBias({-3: 1.0}), "token ids must be ints >= 0.*Fix"),
    (lambda: LogitBias({3: float("inf")}), "finite number or -inf.*Fix"),
    (lambda: LogitBias({3: "lots"}), "finite number or -inf"),
    (lambda: LogitBias(7), "pass a mapping"),
    (lambda: from_spec(None, xtc_threshold=0.2), "xtc_threshold is set but xtc_probability is not. Fix"),
    (lambda: from_spec(None, dynatemp_exponent=2.0), "dynatemp_exponent is set but dynatemp_range is not"),
    (lambda: from_spec(None, mirostat_m=50), "mirostat_m is set but mirostat_v1 is not"),
    (lambda: from_spec(None, mirostat_v1=5.0, mirostat=5.0), "Mirostat must be the last|mirostat_mu"),
    (lambda: Sampler(1.0, (MirostatV1(), samplers.TopK(3))), "Mirostat must be the last"),
])
def test_bad_values_raise_with_a_fix(make, match):
    with pytest.raises(ValidationError, match=match):
        make()


def test_cli_flags_are_checked_before_the_model_loads():
    from piegpu.cli import _checked_options, build_parser
    args = build_parser().parse_args(["generate", "hi", "--temperature", "0.8", "--xtc-probability", "0.5",
                                      "--xtc-threshold", "0.2", "--top-n-sigma", "1.5", "--tfs", "0.9",
                                      "--dynatemp-range", "0.3", "--dynatemp-exponent", "2",
                                      "--logit-bias", "5=-1.5", "--logit-bias", "9-inf", "--logit-bias", "11+2",
                                      "--samplers", "top_n_sigma;tfs_z;xtc;temperature"])
    smp = _checked_options(args)[0].sampler  # the SamplingOptions the generation uses
    assert [t.name for t in smp.truncations] == ["top-n-sigma", "tail-free", "xtc", "dynamic-temperature"]
    assert smp.processors[0].mapping == {5: -1.5, 9: float("-inf"), 11: 2.0}
    v1 = _checked_options(build_parser().parse_args(["generate", "hi", "--mirostat-v1", "4", "--mirostat-m", "20"]))
    assert v1[0].sampler.truncations == (MirostatV1(4.0, 0.1, 20),)
    for bad, match in ((["--xtc-probability", "2"], "xtc: probability"), (["--tfs", "-1"], "tail_free: z"),
                       (["--dynatemp-exponent", "2"], "dynatemp_exponent is set"),
                       (["--logit-bias", "5=inf"], "finite number or -inf")):
        with pytest.raises(ValidationError, match=match):
            _checked_options(build_parser().parse_args(["generate", "hi"] + bad))
    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "hi", "--logit-bias", "five"])


def test_generate_with_the_new_options(gpu):
    from tests.helpers import tiny_config, tiny_model
    model = tiny_model(tiny_config(layers=2, vocab=300), seed=11)[0]
    g = model.generate("1 2 3", max_tokens=4, seed=7)
    g.run()
    first = g.tokens[0]
    banned = model.generate("1 2 3", max_tokens=4, seed=7, logit_bias={first: float("-inf")})
    banned.run()
    assert banned.tokens[0] != first and first not in banned.tokens
    runs = []
    for _ in range(2):
        g = model.generate("1 2 3", max_tokens=6, seed=5, temperature=0.9, xtc_probability=0.5, xtc_threshold=0.05,
                           top_n_sigma=2.0, tfs_z=0.95, dynatemp_range=0.4, logit_bias={7: 1.0})
        g.run()
        runs.append(g.tokens)
    assert runs[0] == runs[1]  # seeded: XTC's coin comes from the sampler's RNG state
    m1 = model.generate("1 2 3", max_tokens=5, seed=3, mirostat_v1=3.0)
    m1.run()
    assert len(m1.tokens) == 5
