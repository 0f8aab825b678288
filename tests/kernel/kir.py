"""Test helpers over KIR: a sequential runner for barrier-free kernels and a static loop-count bound.

The runner executes every invocation of a kernel one after another (gid, lid, wid from
the workgroup size), with the interpreter's scalar semantics for each op, so a plan's
map, thread-per-row and scatter kernels can be checked against eta's numpy interpreter
without a GPU. Kernels with workgroup-shared memory or barriers need real threads: the
runner refuses them.
"""

from __future__ import annotations

import numpy as np

from piegpu.eta.interp import eval_scalar
from piegpu.kernel import ir


class NeedsThreads(Exception):
    """The kernel uses shared memory or barriers: it cannot run one invocation at a time."""


def to_value(word: int, dt):
    """A 32-bit word read as dt (bool is stored as 0/1)."""
    if dt == ir.BOOL:
        return bool(word)
    return np.array([word], np.uint32).view(dt.np)[0].item()


def to_word(v, dt) -> int:
    """The 32-bit word that stores v of dtype dt."""
    if dt == ir.BOOL:
        return int(bool(v))
    return int(np.array([v], dt.np).view(np.uint32)[0])


def evaluate(e, env: dict, buffers: dict):
    """The value of expression e (Vars and Builtins from env, Loads from buffers of u32 words)."""
    if isinstance(e, ir.Const):
        return e.value
    if isinstance(e, (ir.Var, ir.Builtin)):
        return env[e.name]
    if isinstance(e, ir.Load):
        return to_value(int(buffers[e.buf][evaluate(e.index, env, buffers)]), e.dtype)
    if isinstance(e, ir.Op):
        return eval_scalar(e.op, [(evaluate(a, env, buffers), a.dtype) for a in e.args], e.dtype)
    raise NeedsThreads(f"cannot evaluate {e!r} one invocation at a time")


def execute(stmts, env: dict, buffers: dict, counter: list) -> None:
    """Run statements; counter[0] counts loop iterations."""
    for s in stmts:
        if isinstance(s, (ir.Let, ir.Decl, ir.Assign)):
            env[s.name] = evaluate(s.value, env, buffers)
        elif isinstance(s, ir.Store):
            buffers[s.buf][evaluate(s.index, env, buffers)] = to_word(evaluate(s.value, env, buffers), s.value.dtype)
        elif isinstance(s, ir.AtomicAdd):
            i = evaluate(s.index, env, buffers)
            old = to_value(int(buffers[s.buf][i]), s.value.dtype)
            new = eval_scalar("add", [(old, s.value.dtype), (evaluate(s.value, env, buffers), s.value.dtype)],
                              s.value.dtype)
            buffers[s.buf][i] = to_word(new, s.value.dtype)
        elif isinstance(s, ir.AtomicMaxU32):
            i = evaluate(s.index, env, buffers)
            buffers[s.buf][i] = max(int(buffers[s.buf][i]), evaluate(s.value, env, buffers))
        elif isinstance(s, ir.If):
            execute(s.then if evaluate(s.cond, env, buffers) else s.orelse, env, buffers, counter)
        elif isinstance(s, ir.For):
            env[s.var] = evaluate(s.start, env, buffers)
            while env[s.var] < evaluate(s.end, env, buffers):
                counter[0] += 1
                execute(s.body, env, buffers, counter)
                env[s.var] = (env[s.var] + evaluate(s.step, env, buffers)) & 0xFFFFFFFF
        else:
            raise NeedsThreads(f"{type(s).__name__} needs real threads")


def run_kernel(k: ir.Kernel, buffers: dict) -> int:
    """Run every invocation of k in order; returns the most loop iterations one invocation ran."""
    if k.shared:
        raise NeedsThreads(f"{k.name} uses workgroup-shared memory")
    most = 0
    for gid in range(k.groups * k.workgroup):
        counter = [0]
        execute(k.body, {"gid": gid, "lid": gid % k.workgroup, "wid": gid // k.workgroup}, buffers, counter)
        most = max(most, counter[0])
    return most


def new_buffers(plan, inputs=(), channels: dict | None = None) -> dict:
    """u32 word buffers for a plan's bindings: the arena with `inputs` written in, channel buffers as given."""
    buffers = {}
    for b in plan.bindings:
        if b.kind == "arena":
            buffers[b.name] = np.zeros(b.words, np.uint32)
        elif b.kind == "channel":
            buffers[b.name] = np.array((channels or {})[b.info["slot"]], np.uint32)
        else:
            raise NotImplementedError(b.kind)
    for (off, ty), x in zip(plan.inputs, inputs):
        words = np.asarray(x, ty.dtype.np).reshape(-1)
        buffers["arena"][off:off + words.size] = words.astype(np.uint32) if ty.dtype == ir.BOOL else \
            words.view(np.uint32)
    return buffers


def outputs(plan, buffers: dict) -> list:
    """The plan's outputs read back from the arena."""
    out = []
    for off, ty in plan.outputs:
        words = buffers["arena"][off:off + ty.size]
        arr = words.astype(bool) if ty.dtype == ir.BOOL else words.view(ty.dtype.np)
        out.append(arr.reshape(ty.shape))
    return out


def run_plan(plan, inputs=(), channels: dict | None = None) -> tuple:
    """(outputs, buffers) after running every kernel of a barrier-free plan in dispatch order."""
    buffers = new_buffers(plan, inputs, channels)
    for k in plan.kernels:
        run_kernel(k, buffers)
    return outputs(plan, buffers), buffers


def _static(e, known: dict):
    """e with thread ids as 0 and known names substituted, folded; None unless it becomes a constant."""
    def sub(x):
        if isinstance(x, ir.Builtin):
            return ir.u32(0)
        if isinstance(x, ir.Var):
            return known.get(x.name, x)
        if isinstance(x, ir.Op):
            return ir.Op(x.op, tuple(sub(a) for a in x.args), x.dtype)
        return x
    v = ir.fold(sub(e))
    return v if isinstance(v, ir.Const) else None


def _has_loop(stmts) -> bool:
    return any(isinstance(s, ir.For) or (isinstance(s, ir.If) and _has_loop(s.then + s.orelse)) for s in stmts)


def loop_bound(stmts, known: dict | None = None) -> int:
    """An upper bound of the loop iterations one invocation runs (lavapipe counts them all).

    Counted for invocation 0 (the templates give it the most iterations: strided loops
    start at the thread id, chunks are equal), through both arms of every `if`. Loop
    bounds that depend on data raise ValueError.
    """
    known = dict(known or {})
    total = 0
    for s in stmts:
        if isinstance(s, (ir.Let, ir.Decl)):
            v = _static(s.value, known)
            if v is not None and isinstance(s, ir.Let):
                known[s.name] = v
        elif isinstance(s, ir.If):
            total += loop_bound(s.then, known) + loop_bound(s.orelse, known)
        elif isinstance(s, ir.For):
            start, end, step = (_static(x, known) for x in (s.start, s.end, s.step))
            if start is None or end is None or step is None:
                raise ValueError(f"loop {s.var} has no static bound: {s.start!r}..{s.end!r} step {s.step!r}")
            values = range(start.value, end.value, step.value)
            if not _has_loop(s.body):
                total += len(values)
            else:  # outer loops are short (top-k rounds, sort stages): walk them value by value
                total += sum(1 + loop_bound(s.body, {**known, s.var: ir.u32(v)}) for v in values)
    return total
