"""The C++ rule tables: complete for every op, and executed on the host against the interpreter.

CUDA, HIP and MSL share one op table and one helper prelude (piegpu/kernel/cxx.py). No
GPU runs them here, so this test renders every elementwise op, cast and bitcast through
that same table into a host C++ library (clang++ -O2), runs it on edge-case and random
inputs, and compares with the numpy interpreter: the integer wrap, division and shift
rules, exact fmod, C pow, saturating casts and NaN-safe compares are executed, not
just compiled. A second build uses -ffast-math (Metal's default) and checks that the
bit-level NaN/inf handling still gives exact answers there.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from functools import lru_cache

import numpy as np
import pytest

from piegpu import dtype
from piegpu.cuda.emit import CUDA
from piegpu.errors import ValidationError
from piegpu.eta.interp import IMPL
from piegpu.eta.ops import OPS, GroupOp, TType
from piegpu.eta.program import Node
from piegpu.kernel import ir
from piegpu.kernel.cxx import CASTS, CxxStyle, cxx_ops
from piegpu.targets import TARGETS, renderer
from tests.eta.op_cases import SPECIALS, pairs
from tests.progen import compare

F32, I32, U32, BOOL = dtype.f32, dtype.i32, dtype.u32, dtype.bool
TYPES = (F32, I32, U32, BOOL)
TRANSCENDENTAL = {"exp", "log", "sin", "cos", "tanh", "pow"}  # libm differs from numpy in the last ulps
# Ops that stay exact under fast math, because the prelude classifies NaN and inf inputs on the bits.
# Fast math may still replace a NaN *result* (LLVM treats it as poison), so for the float-valued ones
# only the positions whose true result is a number are compared.
FAST_MATH_EXACT = {"isnan", "isinf", "eq", "ne", "lt", "le", "gt", "ge", "maximum", "minimum", "sign", "rem",
                   "cast", "bitcast", "select"}


def accepted(op: str) -> list:
    """The input dtype tuples the op's type rule accepts."""
    opdef = OPS[op]
    if op == "select":
        return [(BOOL, t, t) for t in TYPES]
    if op in ("cast", "bitcast"):
        out = []
        for src in TYPES:
            for to in TYPES:
                try:
                    if src != to and opdef.infer(op, [TType(src, (4,))], {"to": to}):
                        out.append((src, to))
                except ValidationError:
                    pass
        return out
    ok = []
    for t in TYPES:
        try:
            opdef.infer(op, [TType(t, (4,))] * opdef.arity, {})
            ok.append((t,) * opdef.arity)
        except ValidationError:
            pass
    return ok


ELEMENTWISE = sorted(GroupOp.ELEMENTWISE)
CXX_TARGETS = [n for n in TARGETS if isinstance(renderer(n), CxxStyle)]  # every target on these rules


def test_the_cxx_targets_are_found():
    assert {"cuda", "hip", "msl"} <= set(CXX_TARGETS)


@pytest.mark.parametrize("target", CXX_TARGETS)
def test_every_elementwise_op_and_cast_has_a_rule(target):
    r = renderer(target)
    for op in ELEMENTWISE:
        if op in ("cast", "bitcast"):
            continue
        for ins in accepted(op):
            r.rule(op, ins[1] if op == "select" else ins[0])  # CompileError names what is missing
    for src, to in accepted("cast"):
        assert (src.kind, to.kind) in CASTS, f"no cast rule {src.name} -> {to.name}"


# ---- host execution ----------------------------------------------------------------------

class HostCxx(CxxStyle):
    """The shared C++ rules compiled for the host CPU (libm for the math functions)."""

    target = "host"
    types = CUDA.types
    ops = cxx_ops(lambda f: {"rsqrt": "host_rsqrt"}.get(f, "std::" + f))
    header = ("#include <cmath>",
              "#include <cstring>",
              "typedef unsigned int uint;",
              "static inline float host_as_float(uint u) { float f; std::memcpy(&f, &u, 4); return f; }",
              "static inline uint host_as_uint(float f) { uint u; std::memcpy(&u, &f, 4); return u; }",
              "static inline float host_rsqrt(float x) { return 1.0f / std::sqrt(x); }",
              "#define ETA_FN static inline",
              "#define ETA_AS_FLOAT(u) host_as_float(u)",
              "#define ETA_AS_UINT(f) host_as_uint(f)",
              "#define ETA_MATH(name) std::name")


def _inputs(op: str, ins: tuple) -> list:
    """Edge-case inputs (every pair of special values), plus random bit patterns for floats and ints."""
    r = np.random.default_rng(7)
    if len(ins) == 1 or op in ("cast", "bitcast"):
        base = [SPECIALS[ins[0]]]
    elif op == "select":
        a, b = pairs(ins[1])
        return [np.resize(SPECIALS[BOOL], a.size), a, b]
    else:
        base = list(pairs(ins[0]))
    extra = 4096
    more = []
    for arr in base:
        if arr.dtype == np.bool_:
            more.append(np.concatenate([arr, r.random(extra) < 0.5]))
        else:
            bits = r.integers(0, 1 << 32, extra, dtype=np.uint64).astype(np.uint32)
            if op == "pow":  # moderate magnitudes, so the results are finite and comparable
                bits = (r.standard_normal(extra) * 4).astype(np.float32).view(np.uint32)
            more.append(np.concatenate([arr, bits.view(arr.dtype)]))
    return more


# Integer division by a literal skips the zero/-1 guard (cxx.CxxStyle.expr): run that path too.
CONST_DIVISORS = {I32: (3, -3, 7, -(1 << 31)), U32: (3, 7, 0x80000000)}


@lru_cache(maxsize=None)
def _cases() -> list:
    """(op, input dtypes, output dtype, literal second operand or None) for every elementwise op and cast."""
    out = []
    for op in ELEMENTWISE:
        for ins in accepted(op):
            if op in ("cast", "bitcast"):
                out.append((op, (ins[0],), ins[1], None))
            else:
                node_t = OPS[op].infer(op, [TType(t, (4,)) for t in ins], {})
                out.append((op, ins, node_t.dtype, None))
    for dt, divisors in CONST_DIVISORS.items():
        for op in ("div", "rem"):
            out += [(op, (dt, dt), dt, c) for c in divisors]
    return out


def _source() -> str:
    style = HostCxx()
    lines = [f"// host build of the shared C++ rules ({len(_cases())} cases)"] + list(style.header) + [style.prelude]
    for k, (op, ins, out, literal) in enumerate(_cases()):
        args = tuple(ir.Var("abc"[j], t) for j, t in enumerate(ins))
        if literal is not None:
            args = (args[0], ir.Const(literal, ins[1]))
        body = style.expr(ir.Op(op, args, out))
        lines.append(f'extern "C" void case{k}(const uint* A, const uint* B, const uint* C, uint* out, int n) {{')
        lines.append("  for (int i = 0; i < n; ++i) {")
        for j, t in enumerate(ins):
            lines.append(f"    const {style.type_name(t)} {'abc'[j]} = {style.from_bits(f'{chr(65 + j)}[i]', t)};")
        lines.append(f"    out[i] = {style.to_bits(body, out)};")
        lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


@lru_cache(maxsize=None)
def _library(mode: str, folder: str):
    import pathlib
    cxx = shutil.which("clang++-14") or shutil.which("clang++") or shutil.which("g++")
    src = pathlib.Path(folder) / "rules.cpp"
    src.write_text(_source())
    lib = pathlib.Path(folder) / f"rules_{mode}.so"
    flags = ["-O2", "-ffp-contract=off"] + (["-ffast-math"] if mode == "fastmath" else [])
    p = subprocess.run([cxx, "-std=c++17", "-shared", "-fPIC", *flags, str(src), "-o", str(lib)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-4000:]
    return ctypes.CDLL(str(lib))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    if not (shutil.which("clang++-14") or shutil.which("clang++") or shutil.which("g++")):
        pytest.skip("host C++ compiler (clang++-14 or g++) not found")
    return str(tmp_path_factory.mktemp("cxx_rules"))


def _bits(a: np.ndarray) -> np.ndarray:
    return (a.astype(np.uint32) if a.dtype == np.bool_ else a.view(np.uint32)).copy()


def _run_case(lib, k: int, arrays: list, out_dt) -> np.ndarray:
    n = arrays[0].size
    words = [_bits(a) for a in arrays] + [np.zeros(n, np.uint32)] * (3 - len(arrays))
    out = np.zeros(n, np.uint32)
    ptr = ctypes.POINTER(ctypes.c_uint32)
    getattr(lib, f"case{k}")(*[w.ctypes.data_as(ptr) for w in words], out.ctypes.data_as(ptr), ctypes.c_int(n))
    return out.astype(bool) if out_dt == BOOL else out.view(out_dt.np)


@pytest.mark.parametrize("mode", ["ieee", "fastmath"])
def test_rules_execute_like_the_interpreter(workdir, mode):
    lib = _library(mode, workdir)
    failures = []
    for k, (op, ins, out, literal) in enumerate(_cases()):
        if mode == "fastmath" and op not in FAST_MATH_EXACT and F32 in ins + (out,):
            continue
        arrays = _inputs(op, ins)
        if literal is not None:
            arrays[1] = np.full_like(arrays[1], literal)
        attrs = (out,) if op in ("cast", "bitcast") else ()
        node = Node(op, tuple(range(len(ins))), attrs, TType(out, (arrays[0].size,)))
        with np.errstate(all="ignore"):
            want = np.asarray(IMPL[op](node, *arrays), dtype=out.np)
        got = _run_case(lib, k, arrays, out)
        if mode == "fastmath" and out == F32:
            keep = ~np.isnan(want)
            want, got, arrays = want[keep], got[keep], [a[keep] for a in arrays]
        what = f"{op} {[t.name for t in ins]} -> {out.name} ({mode}{f', by literal {literal}' if literal else ''})"
        try:
            compare(want, got, op not in TRANSCENDENTAL, what)
            if op in TRANSCENDENTAL:  # special values must still come out special
                special = ~np.isfinite(want)
                np.testing.assert_array_equal(np.isnan(got[special]), np.isnan(want[special]), err_msg=what)
                np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)], err_msg=what)
        except AssertionError as e:
            bad = np.flatnonzero(~((want == got) | (np.isnan(want) & np.isnan(got)))
                                 if out == F32 else want != got)[:5]
            failures.append(f"{what}: inputs {[a[bad] for a in arrays]} want {want[bad]} got {got[bad]}\n{e}"[:1500])
    assert not failures, "\n\n".join(failures)
