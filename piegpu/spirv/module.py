"""A SPIR-V module as words: id allocation, the logical-layout sections, deduplicated types and
constants, and a function builder with structured if/loop helpers."""

from __future__ import annotations

import struct

from . import spec
from .spec import OP


def string_words(s: str) -> list:
    """A literal string: UTF-8, NUL-terminated, zero-padded to whole words."""
    b = s.encode("utf-8") + b"\0"
    b += b"\0" * (-len(b) % 4)
    return list(struct.unpack(f"<{len(b) // 4}I", b))


def instruction(opcode: int, *operands: int) -> list:
    """One instruction's words: (word count << 16 | opcode) then the operands."""
    words = [int(w) & 0xFFFFFFFF for w in operands]
    return [((len(words) + 1) << 16) | opcode] + words


class Module:
    """Sections in SPIR-V logical layout order; types and constants are created once per key."""

    def __init__(self):
        self.bound = 1
        self.capabilities = [spec.CAP_SHADER]
        self.glsl = self.new_id()
        self.entry_points: list = []
        self.exec_modes: list = []
        self.names: list = []
        self.annotations: list = []
        self.globals: list = []  # types, constants and module-scope variables, in definition order
        self.functions: list = []
        self._cache: dict = {}

    def new_id(self) -> int:
        """A fresh result id."""
        rid = self.bound
        self.bound += 1
        return rid

    # ---- types and constants (deduplicated) --------------------------------------------
    def _global(self, key, opcode: int, *operands: int) -> int:
        rid = self._cache.get(key)
        if rid is None:
            rid = self._cache[key] = self.new_id()
            if opcode in spec.HAS_TYPE_AND_RESULT:  # constants: (type, result, value...)
                self.globals += instruction(opcode, operands[0], rid, *operands[1:])
            else:
                self.globals += instruction(opcode, rid, *operands)
        return rid

    def t_void(self) -> int:
        """OpTypeVoid."""
        return self._global("void", OP.TypeVoid)

    def t_bool(self) -> int:
        """OpTypeBool."""
        return self._global("bool", OP.TypeBool)

    def t_int(self, signed: bool) -> int:
        """32-bit OpTypeInt."""
        return self._global(("int", signed), OP.TypeInt, 32, int(signed))

    def t_f32(self) -> int:
        """32-bit OpTypeFloat."""
        return self._global("f32", OP.TypeFloat, 32)

    def t_vec(self, comp: int, n: int) -> int:
        """OpTypeVector."""
        return self._global(("vec", comp, n), OP.TypeVector, comp, n)

    def t_ptr(self, storage: int, pointee: int) -> int:
        """OpTypePointer."""
        return self._global(("ptr", storage, pointee), OP.TypePointer, storage, pointee)

    def t_fn(self, ret: int, *params: int) -> int:
        """OpTypeFunction."""
        return self._global(("fn", ret) + params, OP.TypeFunction, ret, *params)

    def t_array(self, elem: int, length: int) -> int:
        """OpTypeArray of a constant u32 length (Workgroup arrays: no stride decoration)."""
        return self._global(("array", elem, length), OP.TypeArray, elem, self.const_u32(length))

    def t_runtime_array(self, elem: int, stride: int) -> int:
        """OpTypeRuntimeArray decorated with ArrayStride."""
        key = ("rtarray", elem, stride)
        if key not in self._cache:
            rid = self._global(key, OP.TypeRuntimeArray, elem)
            self.decorate(rid, spec.DEC_ARRAY_STRIDE, stride)
        return self._cache[key]

    def t_block(self, member: int, tag: str) -> int:
        """A Block-decorated struct with one member at offset 0; `tag` keeps distinct structs apart."""
        key = ("block", member, tag)
        if key not in self._cache:
            rid = self._global(key, OP.TypeStruct, member)
            self.decorate(rid, spec.DEC_BLOCK)
            self.annotations += instruction(OP.MemberDecorate, rid, 0, spec.DEC_OFFSET, 0)
        return self._cache[key]

    def const(self, type_id: int, bits: int) -> int:
        """OpConstant of a 32-bit scalar type from its bit pattern."""
        return self._global(("const", type_id, bits & 0xFFFFFFFF), OP.Constant, type_id, bits)

    def const_u32(self, v: int) -> int:
        """A u32 constant."""
        return self.const(self.t_int(False), v)

    def const_bool(self, v: bool) -> int:
        """OpConstantTrue / OpConstantFalse."""
        return self._global(("bool", bool(v)), OP.ConstantTrue if v else OP.ConstantFalse, self.t_bool())

    def variable(self, ptr_type: int, storage: int, name: str = "") -> int:
        """A module-scope OpVariable."""
        rid = self.new_id()
        self.globals += instruction(OP.Variable, ptr_type, rid, storage)
        if name:
            self.name(rid, name)
        return rid

    # ---- debug names and decorations --------------------------------------------------
    def name(self, target: int, name: str) -> None:
        """OpName."""
        self.names += instruction(OP.Name, target, *string_words(name))

    def decorate(self, target: int, decoration: int, *literals: int) -> None:
        """OpDecorate."""
        self.annotations += instruction(OP.Decorate, target, decoration, *literals)

    # ---- assembly --------------------------------------------------------------------
    def words(self) -> list:
        """The whole module: header then every section in logical layout order."""
        out = [spec.MAGIC, spec.VERSION_1_3, spec.GENERATOR, self.bound, 0]
        for cap in self.capabilities:
            out += instruction(OP.Capability, cap)
        out += instruction(OP.ExtInstImport, self.glsl, *string_words("GLSL.std.450"))
        out += instruction(OP.MemoryModel, spec.ADDRESSING_LOGICAL, spec.MEMORY_GLSL450)
        for section in (self.entry_points, self.exec_modes, self.names, self.annotations, self.globals,
                        self.functions):
            out += section
        return out

    def to_bytes(self) -> bytes:
        """The module as little-endian bytes."""
        w = self.words()
        return struct.pack(f"<{len(w)}I", *w)


class Function:
    """One OpFunction under construction: Function-storage variables, an entry prologue, the body."""

    def __init__(self, mod: Module, ret_type: int, param_types: tuple = (), name: str = ""):
        self.mod = mod
        self.ret_type = ret_type
        self.id = mod.new_id()
        self.fn_type = mod.t_fn(ret_type, *param_types)
        self.params = [(t, mod.new_id()) for t in param_types]
        self.vars: list = []  # OpVariable words: must open the entry block
        self.prologue: list = []  # values hoisted into the entry block (dominates every use)
        self.code: list = []
        self.terminated = False
        if name:
            mod.name(self.id, name)

    def op(self, opcode: int, rtype: int, *operands: int) -> int:
        """Emit an instruction with a result; returns the result id."""
        rid = self.mod.new_id()
        self.code += instruction(opcode, rtype, rid, *operands)
        return rid

    def do(self, opcode: int, *operands: int) -> None:
        """Emit an instruction without a result."""
        self.code += instruction(opcode, *operands)

    def ext(self, rtype: int, name: str, *args: int) -> int:
        """A GLSL.std.450 extended instruction."""
        return self.op(OP.ExtInst, rtype, self.mod.glsl, spec.GLSL[name], *args)

    def hoist(self, opcode: int, rtype: int, *operands: int) -> int:
        """An instruction placed in the entry block, so its value dominates the whole function."""
        rid = self.mod.new_id()
        self.prologue += instruction(opcode, rtype, rid, *operands)
        return rid

    def local(self, pointee: int, name: str = "") -> int:
        """A Function-storage variable (a pointer id)."""
        rid = self.mod.new_id()
        self.vars += instruction(OP.Variable, self.mod.t_ptr(spec.SC_FUNCTION, pointee), rid, spec.SC_FUNCTION)
        if name:
            self.mod.name(rid, name)
        return rid

    # ---- control flow -------------------------------------------------------------------
    def label(self, lid: int) -> None:
        """Start block `lid`."""
        self.code += instruction(OP.Label, lid)
        self.terminated = False

    def branch(self, target: int) -> None:
        """OpBranch, unless the block already ended (after a return)."""
        if not self.terminated:
            self.do(OP.Branch, target)
        self.terminated = True

    def ret(self, value: int | None = None) -> None:
        """OpReturn / OpReturnValue."""
        if value is None:
            self.do(OP.Return)
        else:
            self.do(OP.ReturnValue, value)
        self.terminated = True

    def if_(self, cond: int, then_fn, else_fn=None) -> None:
        """A selection construct: header, then-blocks, optional else-blocks, merge."""
        then_l, merge_l = self.mod.new_id(), self.mod.new_id()
        else_l = self.mod.new_id() if else_fn is not None else merge_l
        self.do(OP.SelectionMerge, merge_l, 0)
        self.do(OP.BranchConditional, cond, then_l, else_l)
        self.label(then_l)
        then_fn()
        self.branch(merge_l)
        if else_fn is not None:
            self.label(else_l)
            else_fn()
            self.branch(merge_l)
        self.label(merge_l)

    def loop(self, cond_fn, body_fn, cont_fn) -> None:
        """A while loop: header (OpLoopMerge), condition block, body, continue block, merge.

        cond_fn returns the bool id that keeps looping; cont_fn runs in the continue block.
        """
        header, cond_l, body_l, cont_l, merge_l = (self.mod.new_id() for _ in range(5))
        self._loop_enter(header, merge_l, cont_l, cond_l)
        c = cond_fn()
        self.do(OP.BranchConditional, c, body_l, merge_l)
        self.label(body_l)
        body_fn()
        self._loop_continue(header, merge_l, cont_l, cont_fn)

    def loop_until(self, body_fn) -> None:
        """loop { done = body_fn(); if (done) { break; } } -- the shape WGSL's loops have after naga."""
        header, body_l, cont_l, merge_l, brk_l, stay_l = (self.mod.new_id() for _ in range(6))
        self._loop_enter(header, merge_l, cont_l, body_l)
        done = body_fn()
        self.do(OP.SelectionMerge, stay_l, 0)
        self.do(OP.BranchConditional, done, brk_l, stay_l)
        self.label(brk_l)
        self.branch(merge_l)
        self.label(stay_l)
        self._loop_continue(header, merge_l, cont_l)

    def _loop_enter(self, header: int, merge_l: int, cont_l: int, first_l: int) -> None:
        """Open a structured loop: its header block names the merge and continue blocks, then starts `first_l`."""
        self.branch(header)
        self.label(header)
        self.do(OP.LoopMerge, merge_l, cont_l, 0)
        self.branch(first_l)
        self.label(first_l)

    def _loop_continue(self, header: int, merge_l: int, cont_l: int, cont_fn=None) -> None:
        """Close a structured loop: the continue block (running cont_fn) takes the back edge; then the merge block."""
        self.branch(cont_l)
        self.label(cont_l)
        if cont_fn is not None:
            cont_fn()
        self.branch(header)
        self.label(merge_l)

    def finish(self) -> None:
        """Close the function (a void function falls off its end) and append it to the module."""
        if not self.terminated:
            self.ret()
        words = instruction(OP.Function, self.ret_type, self.id, 0, self.fn_type)
        for t, pid in self.params:
            words += instruction(OP.FunctionParameter, t, pid)
        words += instruction(OP.Label, self.mod.new_id())
        words += self.vars + self.prologue + self.code
        words += instruction(OP.FunctionEnd)
        self.mod.functions += words
