"""Every op case and random eta programs: WGSL from prog.emit("wgsl") compiled by Tint and run in
Chromium's WebGPU (SwiftShader) must equal the numpy interpreter.

Exact for ints, bools and indices (and the ops the op cases mark exact); the float tolerance
of tests/progen.compare otherwise -- the same rules as tests/wgsl on lavapipe.
"""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import eta
from piegpu.errors import PieGpuError
from tests.browser.eta_items import ProgramItem, limits_from
from tests.eta.op_cases import CASES, exact_case
from tests.progen import compare, random_program

N = 200  # random programs (the issue asks for 200; tests/wgsl runs 500 on lavapipe)
CHUNK = 50
OP_PARAMS = [(op, i) for op in sorted(CASES) for i in range(len(CASES[op]))]


def run_all(browser, cases: list) -> dict:
    """{label: (ProgramItem, inputs, exact flags or None, reply)} for [(label, prog, inputs, exact)], in one batch.

    A program the planner refuses for the browser's limits is kept as its error, so that
    case's test fails with it and the others still run.
    """
    limits = limits_from(browser.limits)
    items, out = [], {}
    for label, prog, inputs, exact in cases:
        try:
            items.append((ProgramItem(prog, inputs, limits, label), inputs, exact))
        except PieGpuError as e:
            out[label] = e
    replies = browser.run([it.item for it, _, _ in items])
    out.update({it.label: (it, inputs, exact, r) for (it, inputs, exact), r in zip(items, replies)})
    return out


def check(entry, exact_of) -> None:
    """Chromium's outputs of one item against the interpreter; exact_of(k, ref) says if output k is exact."""
    if isinstance(entry, Exception):
        raise entry
    item, inputs, _, reply = entry
    got = item.outputs(reply)
    ref = item.prog.run(*inputs)
    ref = ref if isinstance(ref, tuple) else (ref,)
    assert len(got) == len(ref)
    for k, (a, b) in enumerate(zip(ref, got)):
        compare(a, b, exact_of(k, a), f"{item.label} output {k} in Chromium\n{item.prog.pretty()}")


@pytest.fixture(scope="module")
def op_results(browser):
    """Every op case compiled and run in Chromium, one batch."""
    cases = []
    for op, i in OP_PARAMS:
        fn, specs, inputs = CASES[op][i]
        cases.append((f"{op}-{i}", eta.trace(fn, *specs), inputs, None))
    return run_all(browser, cases)


@pytest.fixture(scope="module")
def random_results(browser):
    """N random programs (tests/progen.py seeds 0..N-1) compiled and run in Chromium, one batch."""
    cases = []
    for seed in range(N):
        prog, inputs, exact = random_program(seed)
        cases.append((f"seed-{seed}", prog, inputs, exact))
    return run_all(browser, cases)


@pytest.mark.parametrize("op,i", OP_PARAMS, ids=[f"{o}-{i}" for o, i in OP_PARAMS])
def test_op_case_in_chromium(op_results, op, i):
    def exact_of(k, ref):
        return exact_case(op) or ref.dtype != np.float32
    check(op_results[f"{op}-{i}"], exact_of)


@pytest.mark.parametrize("start", range(0, N, CHUNK))
def test_random_programs_in_chromium(random_results, start):
    for seed in range(start, min(start + CHUNK, N)):
        entry = random_results[f"seed-{seed}"]
        check(entry, lambda k, ref: entry[2][k])

