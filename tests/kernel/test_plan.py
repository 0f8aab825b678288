"""kernel/plan.py: fusion regions, what is stored, arena layout, and the kernels a program becomes.

Elementwise, shape and index ops are inlined into their consumers, so an elementwise
chain is one kernel; reductions, scans, sorts, matmuls and scatters are stored by a
template of their own, so each is a region boundary.
"""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import CompileError, dtype, eta
from piegpu.eta.ops import TType
from piegpu.eta.program import Node, Program
from piegpu.kernel import ir
from piegpu.kernel.plan import SHARED_MIN, Limits, plan
from tests.kernel.kir import run_plan

F32, I32, U32 = dtype.f32, dtype.i32, dtype.u32
S = eta.spec


def kinds(p) -> list:
    """Kernel names without their position prefix: map, reduce_max, top_k, commit, ..."""
    return [k.name.split("_", 1)[1] for k in p.kernels]


def planned(fn, *specs, limits=None):
    prog = eta.trace(fn, *specs)
    return prog, plan(prog, limits)


def test_an_elementwise_chain_is_one_kernel():
    prog, p = planned(lambda x, y: eta.exp(x) * 2.0 + eta.sin(y) - eta.sqrt(eta.abs_(x)) / 3.0,
                      S([4, 8], F32), S([8], F32))
    assert kinds(p) == ["map"]
    # nothing between the inputs and the output is stored
    stored = {prog.nodes[i].op for i in p.slots}
    assert stored == {"input", "sub"}, stored
    assert [ty for _, ty in p.inputs] == [TType(F32, (4, 8)), TType(F32, (8,))]
    assert p.kernels[0].groups == 1 and p.kernels[0].workgroup == 64  # 32 elements, one map workgroup


def test_shape_and_index_ops_fuse_too():
    _, p = planned(lambda x, i: eta.gather(eta.transpose(eta.reshape(x * 2.0, [4, 6])), i) + 1.0,
                   S([24], F32), S([3], I32))
    assert kinds(p) == ["map"]


def test_a_reduction_is_a_region_boundary():
    prog, p = planned(lambda x: x - eta.reshape(eta.reduce_max(x), [1]), S([8], F32))
    assert kinds(p) == ["reduce_max", "map"]
    # the reduction's consumer inlines the elementwise part and loads the stored maximum
    assert "reduce_max" in {prog.nodes[i].op for i in p.slots}


def test_a_reduction_inlines_its_elementwise_producer():
    """softmax's denominator: exp(x - max) is computed inside the reduce_sum loop, not stored."""
    prog, p = planned(lambda x: eta.reduce_sum(eta.exp(x - eta.reshape(eta.reduce_max(x), [1]))), S([8], F32))
    assert kinds(p) == ["reduce_max", "reduce_sum"]
    assert {prog.nodes[i].op for i in p.slots} == {"input", "reduce_max", "reduce_sum"}
    # the output is the reduce_sum's own slot: no copy kernel
    assert p.outputs == [(p.slots[len(prog.nodes) - 1], TType(F32, ()))]


@pytest.mark.parametrize("op,kernel", [(eta.cumsum, "cumsum"), (lambda x: eta.top_k(x, 3)[1], "top_k"),
                                       (lambda x: eta.sort_desc(x)[1], "sort")])
def test_scans_and_orderings_are_boundaries(op, kernel):
    _, p = planned(lambda x: op(x * 2.0) + 1, S([4, 40], F32))
    assert kernel in kinds(p) and kinds(p)[-1] == "map"


def test_reread_inputs_are_stored_first():
    """matmul and top-k read each input element many times: a computed input is stored by a map kernel."""
    _, p = planned(lambda a, b: eta.matmul(eta.exp(a), b), S([2, 3], F32), S([3, 2], F32))
    assert kinds(p) == ["map", "matmul"]
    _, p = planned(lambda a, b: eta.matmul(a, b), S([2, 3], F32), S([3, 2], F32))
    assert kinds(p) == ["matmul"]  # inputs are already stored


def test_an_expensive_value_shared_by_several_kernels_is_stored_once():
    def reductions(n):
        return lambda x: tuple(r(eta.exp(x)) for r in (eta.reduce_sum, eta.reduce_max, eta.reduce_min)[:n])
    _, p = planned(reductions(SHARED_MIN), S([8], F32))
    assert kinds(p) == ["map", "reduce_sum", "reduce_max", "reduce_min"]  # exp stored by the map kernel
    _, p = planned(reductions(SHARED_MIN - 1), S([8], F32))
    assert kinds(p) == ["reduce_sum", "reduce_max"]  # recomputing it twice is cheaper than storing it
    # cheap values are never stored for sharing
    _, p = planned(lambda x: tuple(r(x * 2.0) for r in (eta.reduce_sum, eta.reduce_max, eta.reduce_min)),
                   S([8], F32))
    assert kinds(p) == ["reduce_sum", "reduce_max", "reduce_min"]


def test_a_free_op_of_a_shared_value_is_not_stored_beside_it():
    """Reductions over exp(x) and its bit pattern: exp is stored once and each kernel bitcasts what it loads
    (storing the bitcast too made top-p's 32 bisection steps load two values per element)."""
    def fn(x):
        e = eta.exp(x)
        bits = eta.bitcast(e, U32)
        return tuple(eta.reduce_sum(eta.select(bits > t, e, 0.0)) for t in (1, 2, 3)) + (eta.reduce_max(bits),)
    prog, p = planned(fn, S([4, 8], F32))
    assert {prog.nodes[i].op for i in p.slots if prog.nodes[i].op != "input"} >= {"exp"}
    assert "bitcast" not in {prog.nodes[i].op for i in p.slots}
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    got, _ = run_plan(p, [x])
    e = np.exp(x.astype(np.float32))
    bits = e.view(np.uint32)
    for t, g in zip((1, 2, 3), got):
        np.testing.assert_allclose(g, np.where(bits > t, e, 0).sum(-1), rtol=1e-6)
    np.testing.assert_array_equal(got[3], bits.max(-1))


def test_top_p_bisection_reads_one_value_per_element():
    from piegpu.eta.composites import top_p_mask
    prog, p = planned(lambda x, q: top_p_mask(x, q), S([2, 64], F32), S([2], F32))
    assert "bitcast" not in {prog.nodes[i].op for i in p.slots}
    src = prog.emit("wgsl")
    loops = [k for k in src.split("fn k")[1:] if k.split("(", 1)[0].endswith("reduce_sum")]
    assert len(loops) >= 32
    for k in loops:  # each bisection step's loop loads the stored probabilities once per element
        body = k.split("for (", 1)[1].split("}", 1)[0]
        assert body.count("arena[") == 1, body


def test_outputs_of_the_same_size_share_one_map_kernel():
    _, p = planned(lambda x, y: (x + 1.0, y * 2.0, eta.reshape(x, [2, 4]) - 1.0), S([8], F32), S([8], F32))
    assert kinds(p) == ["map"]
    _, p = planned(lambda x, y: (x + 1.0, y * 2.0), S([8], F32), S([5], F32))
    assert kinds(p) == ["map", "map"]


def test_arena_slots_are_16_byte_aligned_and_disjoint():
    prog, p = planned(lambda x, y: (eta.reduce_sum(x), eta.cumsum(y) * 2.0), S([3, 5], F32), S([7], F32))
    spans = sorted((off, off + max(prog.nodes[nid].type.size, 1)) for nid, off in p.slots.items())
    assert all(off % 4 == 0 for off, _ in spans)
    assert all(a_end <= b for (_, a_end), (b, _) in zip(spans, spans[1:])), spans
    assert p.bindings[0].kind == "arena" and p.bindings[0].words >= spans[-1][1]


def test_the_binding_limit_is_a_compile_error():
    with pytest.raises(CompileError, match=r"needs \d+ bytes of device memory, over the 4096-byte binding limit. "
                                           "Fix: use smaller shapes"):
        planned(lambda x: x * 2.0, S([1000], F32), limits=Limits(max_binding_words=1024))


def channel_program() -> Program:
    """Take a token (i32[1]) from channel 0, read state u32[2] from channel 1, put token + state[0] into 0."""
    tok, st = TType(I32, (1,)), TType(U32, (2,))
    nodes = [
        Node("chan_take", (), (0, 0, I32, (1,)), tok),  # 0
        Node("chan_read", (), (1, U32, (2,)), st),  # 1
        Node("slice_last", (1,), (0, 1), TType(U32, (1,))),  # 2
        Node("cast", (2,), (I32,), tok),  # 3
        Node("add", (0, 3), (), tok),  # 4
        Node("chan_put", (4,), (0, 0), None),  # 5
    ]
    return Program.from_bytes(Program(nodes, (4,), (tok, st)).to_bytes())


def test_channels_get_bindings_counts_and_a_commit_kernel_last():
    p = plan(channel_program())
    assert [(b.name, b.kind, b.info.get("slot"), b.info.get("cell_words")) for b in p.bindings] == [
        ("arena", "arena", None, None), ("chan0", "channel", 0, 1), ("chan1", "channel", 1, 2)]
    assert p.channel_counts == {0: (1, 1), 1: (0, 0)}  # a read consumes nothing
    assert kinds(p) == ["map", "commit"]
    commit = p.kernels[-1]
    assert commit.workgroup == 1 and commit.groups == 1


def test_planned_kernels_compute_what_the_interpreter_computes():
    """Barrier-free plans run invocation by invocation (tests/kernel/kir.py) agree with eta's interpreter."""
    rng = np.random.default_rng(0)
    cases = [
        (lambda x, y: eta.exp(x) * 2.0 + eta.sin(y) - 1.0, [S([4, 8], F32), S([8], F32)],
         [rng.standard_normal((4, 8)), rng.standard_normal(8)]),
        (lambda x: (eta.reduce_sum(x * x), eta.reduce_argmax(x), eta.cumsum(x)), [S([3, 5], F32)],
         [rng.standard_normal((3, 5))]),
        (lambda x, i: eta.gather(x, i) * 3.0, [S([4, 2], F32), S([5], I32)],
         [rng.standard_normal((4, 2)), np.array([3, -1, 0, 4, 1])]),  # out of range reads 0
        (lambda d, i, v: eta.scatter_add(d, i, v), [S([4], F32), S([5], I32), S([5], F32)],
         [np.zeros(4), np.array([1, 1, 9, 0, -2]), np.arange(5.0)]),  # out of range is skipped
        (lambda a, b: eta.matmul(a, b) + 1.0, [S([2, 3], F32), S([3, 2], F32)],
         [rng.standard_normal((2, 3)), rng.standard_normal((3, 2))]),
    ]
    for fn, specs, args in cases:
        prog = eta.trace(fn, *specs)
        args = [np.asarray(a, s.dtype.np) for a, s in zip(args, specs)]
        want = prog.run(*args)
        want = want if isinstance(want, tuple) else (want,)
        got, _ = run_plan(plan(prog), args)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_kernels_use_only_declared_buffers():
    p = plan(channel_program())
    names = {b.name for b in p.bindings}

    def bufs(stmts):
        for s in stmts:
            if isinstance(s, (ir.Store, ir.AtomicAdd, ir.AtomicMaxU32)):
                yield s.buf
            for child in ("then", "orelse", "body"):
                yield from bufs(getattr(s, child, ()))
    used = {b for k in p.kernels for b in bufs(k.body)}
    assert used and used <= names, used - names
