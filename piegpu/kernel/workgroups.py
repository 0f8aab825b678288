"""Workgroup sizing and kernel assembly, shared by every kernel template.

Measured on lavapipe (DESIGN.md): barriers are slow, so reductions, scans and
top-k use one workgroup per row with a strided per-thread loop and a single
barrier before one thread combines the partials; short rows get a thread each.
"""

from __future__ import annotations

from ..errors import CompileError
from .inline import KernelBuilder
from .ir import Builtin, Kernel

MAP_WG = 64
WIDE_ROW = 512  # rows at least this long get a workgroup each (if there are few rows)
MANY_ROWS = 2048
# Loop iterations one invocation may run, summed over all its loops. lavapipe (Mesa
# 22.3) silently stops every loop of an invocation after 65535 iterations in total
# (measured; gallivm's loop limiter), so every template sizes its workgroup to stay
# well under it, and refuses with a CompileError when no workgroup size can.
LOOP_BUDGET = 50000
WG_SIZES = (64, 128, 256, 512, 1024)

GID, LID, WID = Builtin("gid"), Builtin("lid"), Builtin("wid")


def finish(p, kb: KernelBuilder, wg: int, groups: int, shared=(), atomic=(), comment="") -> None:
    """Append the builder's statements to the plan as one kernel of `groups` workgroups of `wg` threads."""
    p.add_kernel(Kernel(kb.name, wg, max(1, groups), tuple(kb.stmts), tuple(shared), frozenset(atomic), comment))


def node_of(p, nid):
    """The eta node `nid` of the planned program."""
    return p.prog.nodes[nid]


def choose_wg(p, cost, what: str, prefer: int = 128) -> int:
    """The workgroup size (a power of two) whose per-invocation loop count is lowest.

    `cost(wg)` is the most loop iterations one invocation runs; sizes within 25% of
    the best are equivalent and the one closest to `prefer` wins.
    """
    sizes = [w for w in WG_SIZES if w <= p.limits.max_workgroup]
    costs = {w: cost(w) for w in sizes}
    best = min(costs.values())
    if best > LOOP_BUDGET:
        raise CompileError(f"{what} needs {best} loop iterations per GPU thread even with {max(sizes)}-thread "
                           f"workgroups (limit {LOOP_BUDGET}). Fix: split the last axis into shorter rows")
    ok = [w for w in sizes if costs[w] <= best * 1.25 + 64]
    return min(ok, key=lambda w: abs(w - prefer))


def rows_of(p, nid):
    """(input node, row length n, number of rows) of a last-axis op."""
    x = node_of(p, node_of(p, nid).inputs[0])
    n = x.type.shape[-1]
    return x, n, x.type.size // n


def is_wide(n: int, rows: int) -> bool:
    """Whether rows of length n get a workgroup each (else a thread per row)."""
    return n >= WIDE_ROW and rows <= MANY_ROWS or n > LOOP_BUDGET // 2
