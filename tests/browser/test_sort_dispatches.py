"""Sorting rows too long for one workgroup of the WebGPU default size (256 invocations).

A one-workgroup bitonic sort of 2^18 elements needs ~89k loop iterations per invocation at
256 threads, over the loop budget (piegpu/kernel/workgroups.py), so planning failed on any
device with WebGPU's default limits -- Chromium's among them, and prog.emit("wgsl") with
default limits. Such rows are now sorted by a sequence of dispatches (kernel/sorting.py).
This runs that path on lavapipe by planning for 256-invocation workgroups; the browser tests
run it in Chromium (the op cases top_k_idx-5 and -6).
"""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import dtype, eta
from piegpu.eta import cache
from piegpu.kernel.plan import Limits, plan
from piegpu.kernel.workgroups import LOOP_BUDGET
from piegpu.runtime import compiled
from tests.kernel.kir import loop_bound

WEBGPU_DEFAULT = Limits(max_workgroup=256)


@pytest.fixture
def webgpu_default_limits(monkeypatch, tmp_path):
    """Programs compiled in this test are planned for 256-invocation workgroups and cached apart.

    The kernel cache key does not hold the planning limits: a private cache dir keeps an
    artifact planned for lavapipe's 1024-invocation workgroups from being served here.
    """
    monkeypatch.setenv("PIEGPU_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(compiled, "limits_of", lambda dev: WEBGPU_DEFAULT)
    cache.clear_memory_cache()
    yield
    cache.clear_memory_cache()


@pytest.mark.parametrize("wg,fits,too_long", [(256, 100_000, 1 << 18), (1024, 480_000, 1 << 20)])
def test_one_workgroup_up_to_the_loop_budget_then_dispatches(wg, fits, too_long):
    """The switch: one workgroup per row while its loops fit the budget (near it at `fits`), dispatches beyond."""
    limits = Limits(max_workgroup=wg)
    one = plan(eta.trace(lambda x: eta.sort_desc(x)[1], eta.spec([fits], dtype.f32)), limits).kernels
    assert [k.name for k in one] == ["k0_sort"]
    assert LOOP_BUDGET // 2 < loop_bound(one[0].body) <= LOOP_BUDGET
    many = plan(eta.trace(lambda x: eta.sort_desc(x)[1], eta.spec([too_long], dtype.f32)), limits).kernels
    assert len(many) > 20 and all(k.workgroup <= wg for k in many)
    assert max(loop_bound(k.body) for k in many) < 1000


def test_long_rows_plan_as_several_dispatches():
    prog = eta.trace(lambda x: eta.sort_desc(x), eta.spec([262144], dtype.f32))
    names = [k.name for k in plan(prog, WEBGPU_DEFAULT).kernels]
    assert any("sort_step" in n for n in names) and any("sort_local" in n for n in names), names
    short = eta.trace(lambda x: eta.sort_desc(x), eta.spec([4096], dtype.f32))
    assert [k.name for k in plan(short, WEBGPU_DEFAULT).kernels if "sort" in k.name] == ["k0_sort"]


def test_long_rows_sort_on_lavapipe(gpu, webgpu_default_limits):
    """Two rows of 140000 (padded to 2^18): ties, NaN, infinities; top_k(k=40) and the full sort."""
    r = np.random.default_rng(5)
    x = np.round(r.standard_normal((2, 140000)) * 50).astype(np.float32)  # many ties
    x[0, r.integers(0, 140000, 30)] = np.nan
    x[1, r.integers(0, 140000, 3)] = np.inf
    x[1, r.integers(0, 140000, 3)] = -np.inf

    def fn(v):
        top_v, top_i = eta.top_k(v, 40)
        _, order = eta.sort_desc(v)
        return top_v, top_i, order
    prog = eta.trace(fn, eta.spec([2, 140000], dtype.f32))
    assert len(plan(prog, WEBGPU_DEFAULT).kernels) > 50
    got = prog.run(x, backend="wgsl")
    ref = prog.run(x)
    for a, b in zip(ref, got):
        np.testing.assert_array_equal(b, a)
    assert sorted(got[2][1].tolist()) == list(range(140000))
