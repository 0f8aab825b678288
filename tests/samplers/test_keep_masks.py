"""Every truncation's keep mask, run on the device (WGSL), equals an independent numpy implementation.

Many random logit rows per stage, including exact ties, -inf and NaN entries, an
all -inf row, a single finite token and an all-equal row. Only tokens whose decision
lies within float32 rounding of the threshold may differ, and those must be rare.
"""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import dtype, eta, samplers
from tests.samplers import numpy_samplers as ref

R, V = 48, 384


def logit_rows(seed: int, rows: int = R, vocab: int = V) -> np.ndarray:
    """Random logits with the awkward cases every sampler must handle."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, vocab)) * rng.uniform(0.5, 5.0, (rows, 1))
    x[0::4] = np.round(x[0::4] * 2) / 2  # many exact ties
    x[rng.random((rows, vocab)) < 0.05] = -np.inf
    x[rng.random((rows, vocab)) < 0.02] = np.nan
    x[-1] = -np.inf
    x[-2] = -np.inf
    x[-2, 7] = 1.5
    x[-3] = 0.25
    return x.astype(np.float32)


def device_keep(stage, x: np.ndarray, **state) -> np.ndarray:
    specs = [eta.spec(list(x.shape), dtype.f32)] + [eta.spec(list(v.shape), dtype.f32) for v in state.values()]
    names = list(state)

    def fn(t, *st):
        return stage.keep(eta.sanitize(t), dict(zip(names, st)))
    return eta.trace(fn, *specs).run(x, *state.values(), backend="wgsl")


CASES = [
    (samplers.TopK(17), lambda r: ref.top_k(r, 17)),
    (samplers.TopK(1), lambda r: ref.top_k(r, 1)),
    (samplers.TopP(0.9), lambda r: ref.top_p(r, 0.9)),
    (samplers.TopP(0.35), lambda r: ref.top_p(r, 0.35)),
    (samplers.MinP(0.1), lambda r: ref.min_p(r, 0.1)),
    (samplers.TopA(0.3), lambda r: ref.top_a(r, 0.3)),
    (samplers.Typical(0.9), lambda r: ref.typical(r, 0.9)),
    (samplers.Typical(0.3), lambda r: ref.typical(r, 0.3)),
    (samplers.EpsilonCutoff(0.01), lambda r: ref.epsilon_cutoff(r, 0.01)),
    (samplers.EtaCutoff(0.02), lambda r: ref.eta_cutoff(r, 0.02)),
]


def compare(got: np.ndarray, x: np.ndarray, rule) -> tuple:
    """(hard mismatches, ambiguous tokens) of device keep masks against the numpy rule, row by row."""
    bad, amb_total = [], 0
    for i in range(x.shape[0]):
        row = ref.clean(x[i])
        want, amb = rule(row)
        finite = np.isfinite(row)
        eff = got[i] & finite  # a kept -inf token can never be drawn
        want = want & finite
        diff = (eff != want) & ~amb
        amb_total += int((amb & finite).sum())
        bad += [(i, int(j), bool(eff[j]), bool(want[j])) for j in np.flatnonzero(diff)]
    return bad, amb_total


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{s.name}-{i}" for i, (s, _) in enumerate(CASES)])
def test_keep_mask_matches_numpy(gpu, case):
    stage, rule = CASES[case]
    x = logit_rows(100 + case)
    got = device_keep(stage, x)
    bad, amb = compare(got, x, rule)
    assert not bad, f"{stage.name}: device keep masks differ from numpy at (row, token, device, numpy) {bad[:8]}"
    assert amb <= 0.002 * x.size, amb
    finite_rows = [i for i in range(R) if np.isfinite(ref.clean(x[i])).any()]
    assert all((got[i] & np.isfinite(ref.clean(x[i]))).any() for i in finite_rows), "a row kept no possible token"


def test_mirostat_keep_matches_numpy(gpu):
    x = logit_rows(5)
    mu = np.random.default_rng(6).uniform(0.5, 8.0, (R, 1)).astype(np.float32)
    got = device_keep(samplers.Mirostat(3.0, 0.1), x, mirostat_mu=mu)
    for i in range(R):
        row = ref.clean(x[i])
        want, amb = ref.mirostat_keep(row, float(mu[i, 0]))
        finite = np.isfinite(row)
        assert not ((got[i] & finite) != (want & finite))[~amb].any(), i


def test_keep_mask_at_temperature(gpu):
    """Truncation sees the scaled logits: top-p at T=0.5 keeps fewer tokens than at T=2."""
    x = logit_rows(9)[:8]
    s_cold, s_hot = samplers.top_p(0.9, 0.5), samplers.top_p(0.9, 2.0)
    for smp, t in ((s_cold, 0.5), (s_hot, 2.0)):
        prog = eta.trace(lambda v: smp.logits(v, {}), eta.spec(list(x.shape), dtype.f32))
        final = prog.run(x, backend="wgsl")
        for i in range(6):
            row = ref.clean(x[i]) / t
            want, amb = ref.top_p(row, 0.9)
            got = np.isfinite(final[i])
            assert not (got != (want & np.isfinite(row)))[~amb].any()
            np.testing.assert_allclose(final[i][got], row[got], rtol=1e-6)
    cold = np.isfinite(eta.trace(lambda v: s_cold.logits(v, {}), eta.spec([8, V], dtype.f32)).run(x)).sum()
    hot = np.isfinite(eta.trace(lambda v: s_hot.logits(v, {}), eta.spec([8, V], dtype.f32)).run(x)).sum()
    assert cold < hot
