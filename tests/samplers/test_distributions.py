"""Sampled distributions (chi-square over many draws and seeds), exact argmax paths, penalties and state updates.

Draws run on the device: a [N, V] broadcast of one logit row gives N independent Gumbel
draws (the noise is keyed by the flat index), repeated for several RNG keys.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chi2

from piegpu import dtype, eta, samplers
from tests.samplers import numpy_samplers as ref
from tests.samplers.test_keep_masks import logit_rows

V = 24
N = 3000
SEEDS = (11, 12, 13)
S = eta.spec


def base_logits() -> np.ndarray:
    x = np.random.default_rng(3).standard_normal(V) * 1.6
    x[4] = -np.inf
    x[9] = np.nan
    x[10] = x[11]  # a tie
    return x.astype(np.float32)


def draw(sampler, x: np.ndarray, extra: dict | None = None) -> np.ndarray:
    """Device draws: N per seed in SEEDS."""
    extra = extra or {}
    names = list(extra)

    def fn(t, rng, *st):
        states = dict(zip(names, st))
        if sampler.needs_rng:
            states["rng"] = rng
        token, _ = sampler.step(eta.broadcast(t, [N, V]), states)
        return token
    specs = [S([V], dtype.f32), S([2], dtype.u32)] + [S(list(v.shape), dtype.from_numpy(v.dtype)) for v in extra.values()]
    prog = eta.trace(fn, *specs)
    return np.concatenate([prog.run(x, np.array([seed, 7], np.uint32), *extra.values(), backend="wgsl")
                           for seed in SEEDS])


def expected(x: np.ndarray, temperature: float, rule) -> np.ndarray:
    row = ref.clean(x) / temperature
    keep, amb = rule(row) if rule is not None else (np.ones(V, bool), np.zeros(V, bool))
    assert not amb.any(), "pick logits away from the threshold for a distribution test"
    return ref.probs(np.where(keep, row, -np.inf))


def assert_follows(draws: np.ndarray, p: np.ndarray, what: str) -> None:
    counts = np.bincount(draws, minlength=V)
    assert counts.size == V, f"{what}: drew a token outside [0, vocab)"
    assert counts[p == 0].sum() == 0, f"{what}: drew tokens outside the kept set: {np.flatnonzero(counts * (p == 0))}"
    n = draws.size
    live = p > 0
    stat = float(((counts[live] - n * p[live]) ** 2 / (n * p[live])).sum())
    dof = max(int(live.sum()) - 1, 1)
    assert stat < chi2.ppf(1 - 1e-4, dof), (what, stat, dof, counts, np.round(n * p, 1))


CASES = [
    ("temperature", samplers.temperature(1.0), 1.0, None),
    ("temperature-0.7", samplers.temperature(0.7), 0.7, None),
    ("top-k", samplers.top_k(6, 1.3), 1.3, lambda r: ref.top_k(r, 6)),
    ("top-p", samplers.top_p(0.75), 1.0, lambda r: ref.top_p(r, 0.75)),
    ("min-p", samplers.min_p(0.15), 1.0, lambda r: ref.min_p(r, 0.15)),
    ("top-a", samplers.top_a(0.5), 1.0, lambda r: ref.top_a(r, 0.5)),
    ("typical", samplers.typical(0.8), 1.0, lambda r: ref.typical(r, 0.8)),
    ("epsilon", samplers.epsilon_cutoff(0.03), 1.0, lambda r: ref.epsilon_cutoff(r, 0.03)),
    ("eta", samplers.eta_cutoff(0.05), 1.0, lambda r: ref.eta_cutoff(r, 0.05)),
]


@pytest.mark.parametrize("name,sampler,temperature,rule", CASES, ids=[c[0] for c in CASES])
def test_sampled_distribution_chi_square(gpu, name, sampler, temperature, rule):
    x = base_logits()
    assert_follows(draw(sampler, x), expected(x, temperature, rule), name)


def test_mirostat_distribution_and_update(gpu):
    x = base_logits()
    mu = np.array([3.3], np.float32)
    smp = samplers.mirostat(tau=2.0, eta=0.25)
    p = expected(x, 1.0, lambda r: ref.mirostat_keep(r, 3.3))
    assert 1 < (p > 0).sum() < V - 2  # the truncation is active
    assert_follows(draw(smp, x, {"mirostat_mu": mu}), p, "mirostat")
    # one step with state: the new mu follows the surprise of the drawn token under the kept distribution
    prog = eta.trace(lambda t, m, r: (lambda tok, new: (tok, new["mirostat_mu"], new["rng"]))(
        *smp.step(t, {"mirostat_mu": m, "rng": r})), S([V], dtype.f32), S([1], dtype.f32), S([2], dtype.u32))
    for seed in range(6):
        tok, new_mu, new_rng = prog.run(x, mu, np.array([seed, 41], np.uint32), backend="wgsl")
        final = np.where(p > 0, ref.clean(x), -np.inf)
        want = ref.mirostat_update(final, int(tok), 3.3, tau=2.0, eta=0.25)
        assert p[int(tok)] > 0
        np.testing.assert_allclose(new_mu, [want], rtol=1e-5, atol=1e-5)
        assert new_rng.tolist() == [seed, 42]


@pytest.mark.parametrize("sampler", [samplers.greedy(), samplers.top_k(1), samplers.top_k(1, 3.0),
                                     samplers.from_spec("top-p", 0.0, 0.5), samplers.from_spec("mirostat", 0.0),
                                     samplers.temperature(0.0)], ids=["greedy", "top-k=1", "top-k=1,T=3", "top-p,T=0",
                                                                       "mirostat,T=0", "temperature-0"])
def test_greedy_paths_are_exact_argmax(gpu, sampler):
    x = logit_rows(21)  # ties, -inf, NaN, an all -inf row

    def fn(t, rng):
        return sampler.step(t, {"rng": rng} if sampler.needs_rng else {})[0]
    got = eta.trace(fn, S(list(x.shape), dtype.f32), S([2], dtype.u32)).run(x, np.array([5, 0], np.uint32),
                                                                              backend="wgsl")
    want = np.argmax(np.where(np.isnan(x), -np.inf, x), axis=-1)  # first maximum; all -inf -> 0
    assert got.tolist() == want.tolist()


def test_penalties_match_numpy_and_counts_update(gpu):
    rng = np.random.default_rng(8)
    x = (rng.standard_normal(V) * 2).astype(np.float32)
    counts = rng.integers(0, 3, V).astype(np.int32)
    smp = samplers.greedy().with_penalties(repetition=1.7, presence=0.4, frequency=0.3)

    def fn(t, c):
        final = smp.logits(t, {"seen_counts": c})
        tok, new = smp.step(t, {"seen_counts": c})
        return final, tok, new["seen_counts"]
    final, tok, new_counts = eta.trace(fn, S([V], dtype.f32), S([V], dtype.i32)).run(x, counts, backend="wgsl")
    want = ref.penalties(x, counts, 1.7, 0.4, 0.3)
    np.testing.assert_allclose(final, want, rtol=1e-6, atol=1e-6)
    assert int(tok) == int(np.argmax(want))
    assert new_counts.tolist() == (counts + np.eye(V, dtype=np.int32)[int(tok)]).tolist()
    # penalties change the pick: the unpenalised argmax was seen twice
    x2 = x.copy()
    x2[int(np.argmax(counts))] = x.max() + 0.3
    assert int(np.argmax(ref.penalties(x2, counts, 1.7, 0.4, 0.3))) != int(np.argmax(x2))


def test_chain_composes_in_order(gpu):
    """penalties -> temperature -> top-k -> top-p -> min-p, each truncation on the previous one's output."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(V) * 2.5).astype(np.float32)
    counts = np.zeros(V, np.int32)
    counts[np.argsort(-x)[:2]] = 1
    smp = samplers.chain(samplers.TopK(10), samplers.TopP(0.8), samplers.MinP(0.2), temperature=0.8)
    smp = smp.with_penalties(presence=0.5)
    assert smp.name == "top-k+top-p+min-p"
    final = eta.trace(lambda t, c: smp.logits(t, {"seen_counts": c}), S([V], dtype.f32), S([V], dtype.i32)).run(
        x, counts, backend="wgsl")
    r = ref.penalties(x, counts, presence=0.5) / 0.8
    for rule in (lambda v: ref.top_k(v, 10), lambda v: ref.top_p(v, 0.8), lambda v: ref.min_p(v, 0.2)):
        keep, amb = rule(r)
        assert not amb.any()
        r = np.where(keep, r, -np.inf)
    assert np.isfinite(final).tolist() == np.isfinite(r).tolist()
    np.testing.assert_allclose(final[np.isfinite(r)], r[np.isfinite(r)], rtol=1e-6)
