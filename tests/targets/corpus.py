"""The programs the backend tests emit: every op case, runtime programs, the golden programs, random programs."""

from __future__ import annotations

import os
from functools import lru_cache

from piegpu import dtype, eta
from piegpu.eta.ops import TType
from piegpu.eta.program import Node, Program
from tests.eta.op_cases import CASES
from tests.wgsl.test_wgsl_ops import PARAMS
from tests.progen import random_program

F32, I32, U32 = dtype.f32, dtype.i32, dtype.u32
S = eta.spec
RANDOM_PROGRAMS = int(os.environ.get("PIEGPU_RANDOM_PROGRAMS", "500"))


@lru_cache(maxsize=None)
def op_case_programs() -> tuple:
    """(name, program) for every case of tests/eta/op_cases.py."""
    return tuple((f"{op}-{i}", eta.trace(CASES[op][i][0], *CASES[op][i][1])) for op, i in PARAMS)


def _sampler_epilogue() -> Program:
    """Take a token, read the rng state, sample from the intrinsic logits, put the token: every runtime op."""
    v = 64
    tok, state, logits = TType(I32, (1,)), TType(U32, (2,)), TType(F32, (v,))
    nodes = [
        Node("chan_take", (), (0, 0, I32, (1,)), tok),  # 0
        Node("chan_read", (), (1, U32, (2,)), state),  # 1
        Node("intrinsic", (), ("logits", 0, F32, (v,)), logits),  # 2
        Node("rng", (1,), ((v,),), logits),  # 3
        Node("add", (2, 3), (), logits),  # 4
        Node("reduce_argmax", (4,), (), TType(I32, ())),  # 5
        Node("reshape", (5,), ((1,),), tok),  # 6
        Node("add", (0, 6), (), tok),  # 7
        Node("chan_put", (7,), (2, 0), None),  # 8
        Node("chan_put", (6,), (0, 0), None),  # 9
    ]
    prog = Program(nodes, (6,), (tok, state, tok))
    return Program.from_bytes(prog.to_bytes())  # validated like any program read from disk


@lru_cache(maxsize=None)
def runtime_programs() -> tuple:
    """(name, program) for programs with channels and intrinsics (only a ForwardPass can run them)."""
    traced = eta.trace(lambda: eta.reduce_argmax(eta.intrinsics.output(1)),
                       context=eta.IntrinsicContext.for_logits(1000, rows=2))
    return (("runtime-sampler", _sampler_epilogue()), ("runtime-intrinsic", traced))


@lru_cache(maxsize=None)
def golden_programs() -> tuple:
    """(name, program): a few representative programs whose emitted text is pinned per target."""
    def sampler(logits, state):
        return eta.gumbel_max(logits, state), eta.softmax(logits)

    def topk(x):
        return eta.top_k(x, 5)

    def scatter(d, i, v):
        return eta.scatter_set(d, i, v), eta.scatter_add(d, i, v)

    def intmath(a, b):
        return eta.div(a, b), eta.rem(a, b), eta.shr(a, b), eta.cumsum(eta.cast(a, F32))

    return (("sampler", eta.trace(sampler, S([64], F32), S([2], U32))),
            ("topk", eta.trace(topk, S([4, 40], F32))),
            ("scatter", eta.trace(scatter, S([6, 2], F32), S([5], I32), S([5, 2], F32))),
            ("intmath", eta.trace(intmath, S([2, 8], I32), S([2, 8], I32))))


@lru_cache(maxsize=None)
def random_programs() -> tuple:
    """(name, program) for the random programs of the differential suite."""
    return tuple((f"seed-{s}", random_program(s)[0]) for s in range(RANDOM_PROGRAMS))


def everything() -> list:
    """Every (name, program) the compile checks cover."""
    return (list(op_case_programs()) + list(runtime_programs()) + [(f"golden-{n}", p) for n, p in golden_programs()]
            + list(random_programs()))
