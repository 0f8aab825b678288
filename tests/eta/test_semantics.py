"""The interpreter defines eta semantics: pin the rules API.md states, and the RNG ABI."""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import dtype, eta
from piegpu.eta.counter_rng import rng_bits, rng_uniform

S = eta.spec


def run(fn, *arrays, backend="interp"):
    specs = [S(list(np.shape(a)), dtype.from_numpy(np.asarray(a).dtype)) for a in arrays]
    return eta.trace(fn, *specs).run(*arrays, backend=backend)


BACKENDS = ["interp", "wgsl"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_wraps_and_division_rules(backend, request):
    if backend != "interp":
        request.getfixturevalue("gpu")
    a = np.array([2147483647, -2147483648, 7, -7, 7, -2147483648], np.int32)
    b = np.array([1, -1, 0, 2, -2, -1], np.int32)
    add, div, rem = run(lambda x, y: (x + y, x / y, x % y), a, b, backend=backend)
    assert add.tolist() == [-2147483648, 2147483647, 7, -5, 5, 2147483647]
    assert div.tolist() == [2147483647, -2147483648, 7, -3, -3, -2147483648]  # x/0 = x; MIN/-1 wraps
    assert rem.tolist() == [0, 0, 0, -1, 1, 0]  # x%0 = 0; sign follows the dividend
    u = np.array([5, 0xFFFFFFFF, 0], np.uint32)
    v = np.array([0, 2, 1], np.uint32)
    q, r, s = run(lambda x, y: (x / y, x % y, x - y - 1), u, v, backend=backend)
    assert q.tolist() == [5, 0x7FFFFFFF, 0] and r.tolist() == [0, 1, 0] and s.tolist() == [4, 0xFFFFFFFC, 0xFFFFFFFE]


@pytest.mark.parametrize("backend", BACKENDS)
def test_casts(backend, request):
    if backend != "interp":
        request.getfixturevalue("gpu")
    f = np.array([1.9, -1.9, 3e9, -3e9, np.nan, np.inf, -0.0, 0.5], np.float32)
    i, u, b = run(lambda x: (eta.cast(x, dtype.i32), eta.cast(x, dtype.u32), eta.cast(x, dtype.bool)), f,
                  backend=backend)
    assert i.tolist() == [1, -1, 2147483520, -2147483648, 0, 2147483520, 0, 0]
    assert u.tolist() == [1, 0, 3000000000, 0, 0, 4294967040, 0, 0]
    assert b.tolist() == [True, True, True, True, True, True, False, True]
    w = run(lambda x: eta.cast(x, dtype.u32), np.array([-1, 5], np.int32), backend=backend)
    assert w.tolist() == [0xFFFFFFFF, 5]


@pytest.mark.parametrize("backend", BACKENDS)
def test_argmax_nan_as_minus_inf_and_ties_lowest(backend, request):
    if backend != "interp":
        request.getfixturevalue("gpu")
    x = np.array([[np.nan, 1.0, 3.0, 3.0], [np.nan, np.nan, -np.inf, -np.inf], [-np.inf, np.nan, 2.0, np.nan]],
                 np.float32)
    am, an = run(lambda t: (eta.reduce_argmax(t), eta.reduce_argmin(t)), x, backend=backend)
    assert am.tolist() == [2, 0, 2] and an.tolist() == [1, 2, 0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_sort_and_top_k_ties_lower_index_first(backend, request):
    if backend != "interp":
        request.getfixturevalue("gpu")
    x = np.array([1.0, 3.0, np.nan, 3.0, -np.inf, 1.0], np.float32)
    v, i, tv, ti = run(lambda t: (eta.sort_desc(t), eta.top_k(t, 3)), x, backend=backend)
    assert i.tolist() == [1, 3, 0, 5, 2, 4] and ti.tolist() == [1, 3, 0]
    assert np.isnan(v[4]) and v[:4].tolist() == [3.0, 3.0, 1.0, 1.0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_scatter_out_of_range(backend, request):
    if backend != "interp":
        request.getfixturevalue("gpu")
    src = np.array([10, 20, 30], np.int32)
    idx = np.array([2, -1, 3, 0], np.int32)
    g, s, a = run(lambda x, i: (eta.gather(x, i), eta.scatter_set(x, i, eta.broadcast(7, [4]) + i),
                                eta.scatter_add(x, i, eta.broadcast(1, [4]))), src, idx, backend=backend)
    assert g.tolist() == [30, 0, 0, 10]
    assert s.tolist() == [7, 20, 9] and a.tolist() == [11, 20, 31]
    last = run(lambda x, i: eta.scatter_set(x, i, eta.cast(eta.iota(4), dtype.i32)), src,
               np.array([1, 1, 2, 1], np.int32), backend=backend)
    assert last.tolist() == [10, 3, 2]  # last write wins


def test_rng_is_pinned():
    """The RNG formula is ABI: these values must never change."""
    assert rng_bits(0, 0, np.arange(4, dtype=np.uint32)).tolist() == [516394440, 3417484482, 450789120, 2526212835]
    assert rng_bits(42, 7, np.arange(4, dtype=np.uint32)).tolist() == [2679073433, 1464848217, 2696938696, 814828151]
    assert rng_bits(0xFFFFFFFF, 0xFFFFFFFF, np.array([0, 12345], np.uint32)).tolist() == [1982057074, 4013200939]
    assert rng_uniform([42, 7], [4]).tolist() == [0.6237704157829285, 0.341061532497406, 0.6279299855232239,
                                                   0.18971699476242065]


def test_rng_bit_identical_on_wgsl(gpu):
    for state in ([42, 7], [0, 0], [0xFFFFFFFF, 123456]):
        s = np.array(state, np.uint32)
        a = run(lambda t: eta.rng(t, [7, 1000]), s)
        b = run(lambda t: eta.rng(t, [7, 1000]), s, backend="wgsl")
        assert a.view(np.uint32).tolist() == b.view(np.uint32).tolist()
        assert a.min() > 0.0 and a.max() < 1.0


def test_rng_uniformity_chi_square():
    u = rng_uniform([7, 0], [200000])
    counts = np.histogram(u, bins=100, range=(0, 1))[0]
    expected = u.size / 100
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 160, chi2  # 99 dof: p < 1e-4 above ~160
    # different counters give independent streams
    v = rng_uniform([7, 1], [200000])
    assert abs(np.corrcoef(u, v)[0, 1]) < 0.01


def test_gumbel_max_samples_softmax(gpu):
    """Sampling with gumbel_max over many counters follows softmax(logits) (chi-square)."""
    logits = np.array([2.0, 1.0, 0.5, 0.0, -1.0, -np.inf, np.nan, 1.5], np.float32)
    n = 4000
    prog = eta.trace(lambda x, s: eta.gumbel_max(eta.broadcast(x, [n, 8]), s), S([8], dtype.f32), S([2], dtype.u32))
    # one draw per row: the rows use different flat indices, so they are independent draws
    draws = prog.run(logits, np.array([99, 0], np.uint32), backend="wgsl")
    ref = prog.run(logits, np.array([99, 0], np.uint32))
    assert (draws == ref).mean() > 0.999  # same noise bits; ulp-level log differences may flip a near tie
    p = np.exp(np.where(np.isfinite(logits), logits, -np.inf) - 2.0)
    p /= p.sum()
    counts = np.bincount(draws, minlength=8)
    assert counts[5] == 0 and counts[6] == 0
    keep = p > 0
    chi2 = float(((counts[keep] - n * p[keep]) ** 2 / (n * p[keep])).sum())
    assert chi2 < 25, (chi2, counts, n * p)  # 5 dof
