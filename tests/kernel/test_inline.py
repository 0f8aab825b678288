"""kernel/inline.py: channel cell addressing, and where inlined values are computed.

Channel buffers follow piegpu/kernel/channel_layout.py (the host ring writes them the same
way): the kernels must read the cell at `head + seq` and write the cell at
`tail + seq`, modulo the ring size read from the header at run time.
"""

from __future__ import annotations

import numpy as np

from piegpu.kernel import channel_layout as layout
from piegpu import dtype, eta
from piegpu.eta.ops import TType
from piegpu.eta.program import Node, Program
from piegpu.kernel import ir
from piegpu.kernel.inline import KernelBuilder, channel_cell_base
from piegpu.kernel.plan import plan
from tests.kernel.kir import run_plan

I32 = dtype.i32
PAIR = TType(I32, (2,))


def two_in_two_out() -> Program:
    """Take two cells of channel 0 (seq 0 and 1); put their sum and difference into channel 1 (seq 0 and 1)."""
    nodes = [
        Node("chan_take", (), (0, 0, I32, (2,)), PAIR),  # 0
        Node("chan_take", (), (0, 1, I32, (2,)), PAIR),  # 1
        Node("add", (0, 1), (), PAIR),  # 2
        Node("sub", (0, 1), (), PAIR),  # 3
        Node("chan_put", (2,), (1, 0), None),  # 4
        Node("chan_put", (3,), (1, 1), None),  # 5
    ]
    return Program.from_bytes(Program(nodes, (), (PAIR, PAIR)).to_bytes())


def channel_buffer(head: int, tail: int, ring: int, cells: dict) -> np.ndarray:
    """A channel of i32[2] cells: the header and the given {absolute cell: values}."""
    words = np.zeros(layout.HEADER_WORDS + ring * 2, np.uint32)
    words[:layout.HEADER_WORDS] = layout.header(head, tail, ring, 2)
    for n, values in cells.items():
        at = layout.cell_word(n, ring, 2)
        words[at:at + 2] = np.asarray(values, np.int32).view(np.uint32)
    return words


def cell(words: np.ndarray, n: int, ring: int) -> list:
    at = layout.cell_word(n, ring, 2)
    return words[at:at + 2].view(np.int32).tolist()


def test_takes_and_puts_address_the_cells_the_host_ring_uses():
    # channel 0: ring of 3, cells 4 and 5 are full (4 % 3 = 1, 5 % 3 = 2); channel 1: ring of 5, tail at 9
    # so its two puts land in cells 9 (% 5 = 4) and 10 (% 5 = 0): both rings wrap
    src = channel_buffer(4, 6, 3, {4: [10, 20], 5: [1, 2]})
    dst = channel_buffer(8, 9, 5, {})
    _, buffers = run_plan(plan(two_in_two_out()), channels={0: src, 1: dst})
    out = buffers["chan1"]
    assert cell(out, 9, 5) == [11, 22] and cell(out, 10, 5) == [9, 18]
    # the commit kernel advanced head of channel 0 by its two takes and tail of channel 1 by its two puts
    assert buffers["chan0"][[layout.HEAD, layout.TAIL]].tolist() == [6, 6]
    assert out[[layout.HEAD, layout.TAIL]].tolist() == [8, 11]
    # nothing else of either buffer was touched
    untouched = np.ones(out.size, bool)
    untouched[[layout.TAIL, layout.cell_word(9, 5, 2), layout.cell_word(9, 5, 2) + 1, layout.cell_word(10, 5, 2),
               layout.cell_word(10, 5, 2) + 1]] = False
    assert (out[untouched] == dst[untouched]).all()
    assert (np.delete(buffers["chan0"], layout.HEAD) == np.delete(src, layout.HEAD)).all()


def test_head_and_tail_counters_wrap_like_u32():
    """head/tail count cells since creation and wrap at 2^32 (a ring size dividing 2^32 keeps cells in order)."""
    head = (1 << 32) - 1
    src = channel_buffer(head, 1, 4, {head: [5, 6], head + 1: [7, 8]})  # cell 2^32 wraps to 0
    dst = channel_buffer(0, 0, 4, {})
    _, buffers = run_plan(plan(two_in_two_out()), channels={0: src, 1: dst})
    assert cell(buffers["chan1"], 0, 4) == [12, 14] and cell(buffers["chan1"], 1, 4) == [-2, -2]
    assert buffers["chan0"][layout.HEAD] == 1  # (2^32 - 1 + 2) mod 2^32


def test_cell_base_is_computed_once_outside_loops():
    """The header loads do not depend on the element index: one Let before the loop, reused in every use.

    It stays inside the enclosing `if` (values never move above a guard).
    """
    p = plan(two_in_two_out())
    kb = KernelBuilder(p, "probe")
    inner = []

    def body(j):
        inner.append(channel_cell_base(kb, 0, layout.HEAD, 1))
        inner.append(channel_cell_base(kb, 0, layout.HEAD, 1))
    kb.if_(ir.lt(ir.Builtin("gid"), ir.u32(4)), lambda: kb.for_(ir.u32(0), ir.u32(3), body))
    assert inner[0] == inner[1] and isinstance(inner[0], ir.Var)
    (guard,) = kb.stmts
    lets = [s for s in guard.then if isinstance(s, ir.Let)]
    assert inner[0].name in [s.name for s in lets], "the cell base was not hoisted out of the loop"
    loop = guard.then[-1]
    assert isinstance(loop, ir.For) and not loop.body
    loads = [s.value for s in lets if isinstance(s.value, ir.Load)]
    assert [(ld.buf, ld.index) for ld in loads] == [("chan0", ir.u32(layout.HEAD)), ("chan0", ir.u32(layout.RING))]


def test_per_row_values_are_hoisted_out_of_the_row_loop():
    """In softmax's sum, the row maximum is loaded once per row, before the loop over the row."""
    prog = eta.trace(lambda x: eta.reduce_sum(eta.exp(x - eta.reshape(eta.reduce_max(x), [3, 1]))),
                     eta.spec([3, 5], dtype.f32))
    p = plan(prog)
    max_slot = next(off for nid, off in p.slots.items() if prog.nodes[nid].op == "reduce_max")
    k = p.kernels[-1]
    (guard,) = k.body
    loop = next(s for s in guard.then if isinstance(s, ir.For))

    def loads_of(stmts, slot):
        found = []
        for s in stmts:
            if isinstance(s, ir.Let) and isinstance(s.value, ir.Load):
                idx = s.value.index
                if isinstance(idx, ir.Op) and ir.Const(slot, ir.U32) in idx.args:
                    found.append(s)
        return found
    assert loads_of(guard.then, max_slot), "the row maximum is not loaded before the loop"
    assert not loads_of(loop.body, max_slot), "the row maximum is reloaded in every iteration"
