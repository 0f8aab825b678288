"""kernel/templates.py: the loop budget, workgroup sizes, and the kernels of each template.

lavapipe (Mesa's gallivm loop limiter) silently stops every loop of an invocation after
65535 iterations in total. Every template sizes its workgroups to keep an invocation
under LOOP_BUDGET, and a program whose kernel cannot fit is a CompileError that says how
to fix it -- never a kernel that quietly computes the wrong answer.
"""

from __future__ import annotations

import pytest

from piegpu import CompileError, dtype, eta
from piegpu.kernel.plan import Limits, plan
from piegpu.kernel.templates import LOOP_BUDGET
from tests.kernel.kir import loop_bound, new_buffers, run_kernel

F32 = dtype.f32
S = eta.spec
LAVAPIPE_LOOP_LIMIT = 65535

TEMPLATES = {
    "reduce_sum": lambda n: (lambda x: eta.reduce_sum(x), [S([n], F32)]),
    "reduce_argmax": lambda n: (lambda x: eta.reduce_argmax(x), [S([n], F32)]),
    "cumsum": lambda n: (lambda x: eta.cumsum(x), [S([n], F32)]),
    "top_k": lambda n: (lambda x: eta.top_k(x, 32)[1], [S([n], F32)]),  # 32 argmax rounds
    "sort": lambda n: (lambda x: eta.sort_desc(x)[1], [S([n], F32)]),  # bitonic
    "matmul": lambda n: (lambda a, b: eta.matmul(a, b), [S([1, n], F32), S([n, 1], F32)]),
}
# (template, max workgroup) -> (largest size that fits, a size that does not): measured on the
# templates' cost model; the test checks both sides and the real loop count of the first
FITS = {
    ("reduce_sum", 256): (12_000_000, 13_000_000),
    ("reduce_argmax", 64): (3_100_000, 3_300_000),
    ("cumsum", 256): (6_000_000, 7_000_000),
    ("cumsum", 64): (1_500_000, 1_700_000),
    ("top_k", 256): (300_000, 400_000),
    ("top_k", 64): (85_000, 100_000),
    # sort: rows too long for one workgroup are sorted by several dispatches instead of refused
    # (kernel/sorting.py; tests/browser/test_sort_dispatches.py checks both sides of that switch)
    ("matmul", 256): (LOOP_BUDGET, LOOP_BUDGET + 1),
}


def test_the_budget_is_under_lavapipes_limit():
    assert 0 < LOOP_BUDGET < LAVAPIPE_LOOP_LIMIT


@pytest.mark.parametrize("template,wg", sorted(FITS), ids=[f"{t}-wg{w}" for t, w in sorted(FITS)])
def test_kernels_fit_the_loop_limit_or_refuse_with_a_fix(template, wg):
    fits, too_big = FITS[(template, wg)]
    fn, specs = TEMPLATES[template](fits)
    p = plan(eta.trace(fn, *specs), Limits(max_workgroup=wg))
    for k in p.kernels:
        assert k.workgroup <= wg
        bound = loop_bound(k.body)
        assert bound <= LAVAPIPE_LOOP_LIMIT, f"{k.name} runs {bound} loop iterations per invocation"
    assert max(loop_bound(k.body) for k in p.kernels) > LOOP_BUDGET // 2, "not near the budget: pick a larger size"

    fn, specs = TEMPLATES[template](too_big)
    with pytest.raises(CompileError) as e:
        plan(eta.trace(fn, *specs), Limits(max_workgroup=wg))
    msg = str(e.value)
    assert str(LOOP_BUDGET) in msg and "loop iterations" in msg and "Fix: split" in msg, msg


def test_the_error_names_the_op_and_the_size():
    with pytest.raises(CompileError, match=r"reduce_sum over 13000000 elements needs 51038 loop iterations per GPU "
                                           r"thread even with 256-thread workgroups \(limit 50000\). Fix: split the "
                                           r"last axis into shorter rows"):
        plan(eta.trace(lambda x: eta.reduce_sum(x), S([13_000_000], F32)))
    with pytest.raises(CompileError, match=r"matmul with inner dimension 60000 exceeds 50000 loop iterations per "
                                           r"thread. Fix: split the inner dimension"):
        plan(eta.trace(lambda a, b: eta.matmul(a, b), S([1, 60000], F32), S([60000, 1], F32)))


def test_more_rows_of_the_same_length_still_fit():
    """Rows get a workgroup (or a thread) each: the per-invocation count depends on the row length only."""
    p = plan(eta.trace(lambda x: eta.reduce_sum(x), S([2049, 15_000], F32)))  # a thread per row
    assert [(k.workgroup, loop_bound(k.body)) for k in p.kernels] == [(64, 15_000)]
    p = plan(eta.trace(lambda x: eta.reduce_sum(x), S([16, 1_000_000], F32)))  # a workgroup per row
    assert all(loop_bound(k.body) <= LOOP_BUDGET for k in p.kernels)


def test_a_larger_workgroup_limit_is_used_when_it_is_needed():
    _, specs = TEMPLATES["reduce_sum"](4_000_000)
    prog = eta.trace(lambda x: eta.reduce_sum(x), *specs)
    with pytest.raises(CompileError, match="64-thread workgroups"):
        plan(prog, Limits(max_workgroup=64))
    (k,) = plan(prog, Limits(max_workgroup=256)).kernels
    assert k.workgroup == 256 and k.groups == 1


def test_among_near_best_workgroup_sizes_the_preferred_one_wins():
    """reduce over 1000: 64 threads (80 iterations) and 128 (136) are within 25% + 64 of the best; 128 is preferred."""
    (k,) = plan(eta.trace(lambda x: eta.reduce_sum(x), S([4, 1000], F32))).kernels
    assert (k.workgroup, k.groups) == (128, 4)


def test_thread_per_row_loop_count_is_what_the_runner_counts():
    """The static bound used above agrees with the iterations a kernel really runs (on a small reduction)."""
    p = plan(eta.trace(lambda x: eta.reduce_sum(x * 2.0), S([3, 50], F32)))
    (k,) = p.kernels
    assert run_kernel(k, new_buffers(p)) == loop_bound(k.body) == 50
