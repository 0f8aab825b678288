"""Cross-backend differential checking: run one eta program everywhere, compare with the interpreter, minimize.

Shared by tests/reliability/test_fuzz.py (hypothesis, CI-sized and `-m fuzz`) and
scripts/fuzz.py (the long, time-boxed run).
"""

from __future__ import annotations

import numpy as np

from piegpu import eta
from piegpu.errors import CompileError, PieGpuError, ValidationError
from piegpu.eta.ops import OPS
from piegpu.eta.program import Node, Program
from tests.progen import compare

ALL_BACKENDS = ("wgsl", "spirv", "stablehlo")


def available_backends(wanted=ALL_BACKENDS) -> dict:
    """backend -> None if it can run here, else the reason it cannot."""
    out = {}
    for b in wanted:
        try:
            if b in ("wgsl", "spirv"):
                from piegpu.runtime.device import get_device
                get_device()
            elif b == "stablehlo":
                from piegpu.stablehlo.run import _client
                _client()
            else:
                raise ValidationError(f"unknown backend {b!r}")
            out[b] = None
        except PieGpuError as e:
            out[b] = str(e)
    return out


def as_tuple(x) -> tuple:
    """Program.run returns a bare array for one output; make it a tuple."""
    return x if isinstance(x, tuple) else (x,)


def failure(prog: Program, inputs: list, exact: list, backend: str, ref=None) -> str | None:
    """Why `backend` disagrees with the interpreter on (prog, inputs) -- or None when it agrees."""
    if ref is None:
        ref = as_tuple(prog.run(*inputs))
    try:
        got = as_tuple(prog.run(*inputs, backend=backend))
    except (CompileError, ValidationError) as e:
        return f"{backend} raised {type(e).__name__}: {e}"
    for i, (a, b, e) in enumerate(zip(ref, got, exact)):
        try:
            compare(a, b, e, f"output {i} on {backend}")
        except AssertionError as err:
            return str(err)
    return None


def check_all(prog: Program, inputs: list, exact: list, backends) -> dict:
    """backend -> failure text for every backend that disagrees with the interpreter."""
    ref = as_tuple(prog.run(*inputs))
    out = {}
    for b in backends:
        why = failure(prog, inputs, exact, b, ref)
        if why is not None:
            out[b] = why
    return out


# ---- minimization ------------------------------------------------------------------------------

def _input_node(index: int, ty) -> Node:
    vals = {"index": index, "dtype": ty.dtype, "shape": tuple(ty.shape)}
    return Node("input", (), tuple(vals[a] for a, _ in OPS["input"].attrs), ty)


def prune(nodes: list, outputs: list, inputs: list) -> tuple:
    """Drop nodes no output needs; renumber nodes and input indices (inputs reordered to match)."""
    live, stack = set(), list(outputs)
    while stack:
        i = stack.pop()
        if i not in live:
            live.add(i)
            stack.extend(nodes[i].inputs)
    remap, new_nodes, new_inputs = {}, [], []
    for i, n in enumerate(nodes):
        if i not in live:
            continue
        if n.op == "input":
            new_inputs.append(inputs[n.attr["index"]])
            n = _input_node(len(new_inputs) - 1, n.type)
        else:
            n = Node(n.op, tuple(remap[j] for j in n.inputs), n.attrs, n.type)
        remap[i] = len(new_nodes)
        new_nodes.append(n)
    prog = Program.from_bytes(Program(new_nodes, [remap[o] for o in outputs]).to_bytes())  # fully validated
    return prog, new_inputs


def minimize(prog: Program, inputs: list, exact: list, backend: str, budget: int = 400) -> tuple:
    """A smaller (program, inputs, exact) on which `backend` still disagrees with the interpreter.

    First keep one failing output, then repeatedly cut a node: replace it by a new input
    holding the interpreter's value of that node, and keep the cut when the mismatch
    stays. The result has the failing op fed directly by inputs wherever possible.
    """
    outs = list(prog.outputs)
    for j in range(len(outs)):
        p, ins = prune(list(prog.nodes), [outs[j]], inputs)
        if failure(p, ins, [exact[j]], backend) is not None:
            prog, inputs, exact = p, ins, [exact[j]]
            break
    changed = True
    while changed and budget > 0:
        changed = False
        for i in reversed(range(len(prog.nodes))):
            n = prog.nodes[i]
            if n.op in ("input", "const") or i in prog.outputs or budget <= 0:
                continue
            budget -= 1
            value = as_tuple(Program(prog.nodes, [i]).run(*inputs))[0]
            nodes = list(prog.nodes)
            nodes[i] = _input_node(len(inputs), n.type)
            p, ins = prune(nodes, list(prog.outputs), list(inputs) + [value])
            if failure(p, ins, exact, backend) is not None:
                prog, inputs, changed = p, ins, True
                break
    return prog, inputs, exact


def report(prog: Program, inputs: list, exact: list, backend: str) -> str:
    """A readable reproduction: the program, its inputs and the failure."""
    lines = [f"backend {backend}: {failure(prog, inputs, exact, backend)}", prog.pretty()]
    with np.printoptions(threshold=64, precision=9):
        for i, x in enumerate(inputs):
            lines.append(f"input {i}: {np.asarray(x).dtype}{list(np.shape(x))} = {np.asarray(x)!r}")
    return "\n".join(lines)


__all__ = ["ALL_BACKENDS", "available_backends", "failure", "check_all", "minimize", "prune", "report", "eta"]
