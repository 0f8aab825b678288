"""The SPIR-V target: KIR kernels of a plan -> one SPIR-V 1.3 module (our own words, no external compiler).

Bindings match the WGSL target: descriptor set 0, binding i = plan.bindings[i], each a
Block struct holding a runtime array of u32 in the StorageBuffer storage class. A
buffer that some kernel accesses atomically gets a second variable at the same binding,
and that kernel uses OpAtomic* on it for every access (as WGSL's `<name>_at` alias):
naga's SPIR-V reader upgrades a variable it sees atomics on to atomic<u32>, which with a
single variable would make every access of every kernel in the module atomic.

What naga 29 (wgpu-native 29, inside wgpu-py 0.32) needs of the SPIR-V it reads, and
this emitter respects: version 1.0-1.5 (we write 1.3); no infinite or NaN float
OpConstant ("Float literal is infinite"); no use of OpAtomicCompareExchange's result
(see Coder._atomic_add); structured control flow with merge instructions; only the
GLSL.std.450 extended set.

Values of KIR `Let`s are SSA ids; `Decl` variables and loop counters are Function
variables. Non-finite f32 constants are bitcasts of u32 constants hoisted into the
entry block (naga rejects infinite and NaN float literals).
"""

from __future__ import annotations

import struct
from typing import Callable

from ..errors import CompileError
from ..kernel import ir
from ..kernel.cstyle import f32_bits, grid
from ..kernel.ir import BOOL, F32, I32, U32
from ..kernel.render import Renderer
from . import spec
from .module import Function, Module, instruction, string_words
from .prelude import HELPERS
from .rules import CASTS, NAN_BITS, RULES
from .spec import OP

VERSION = "spirv-3"

DEVICE, RELAXED = spec.SCOPE_DEVICE, spec.SEM_RELAXED
BARRIER_SEMANTICS = spec.SEM_ACQUIRE_RELEASE | spec.SEM_WORKGROUP_MEMORY | spec.SEM_UNIFORM_MEMORY


def rule(op: str, dt) -> Callable:
    """The rule of elementwise `op` for input dtype `dt` (CompileError naming the op if there is none)."""
    r = RULES.get(f"{op}.{dt.kind}") or RULES.get(op)
    if r is None:
        raise CompileError(f"spirv: no rule for op {op!r} on {dt.name}. Fix: add it to the SPIR-V rule table "
                           "(piegpu/spirv/rules.py) or avoid the op on this target")
    return r


class Coder:
    """Emits KIR expressions and statements into one SPIR-V function."""

    def __init__(self, em: "Emitter", fn: Function, kernel: ir.Kernel | None = None):
        self.em, self.mod, self.fn, self.kernel = em, em.mod, fn, kernel
        self.env: dict = {}  # KIR name -> ("val", id, dtype) | ("ptr", pointer id, dtype)
        self.builtins: dict = {}
        self._hoisted: dict = {}
        self.params = [pid for _, pid in fn.params]

    # ---- typed instruction helpers (used by the rule tables) ------------------------------
    def ty(self, dt) -> int:
        """The type id of a KIR dtype."""
        return self.em.ty(dt)

    def op(self, opcode: int, dt, *operands: int) -> int:
        """An instruction with a result of dtype dt."""
        return self.fn.op(opcode, self.ty(dt), *operands)

    def ext(self, dt, name: str, *args: int) -> int:
        """A GLSL.std.450 instruction with a result of dtype dt."""
        return self.fn.ext(self.ty(dt), name, *args)

    def select(self, cond: int, a: int, b: int, dt) -> int:
        """cond ? a : b."""
        return self.op(OP.Select, dt, cond, a, b)

    def any_(self, *conds: int) -> int:
        """Logical or of bools."""
        out = conds[0]
        for c in conds[1:]:
            out = self.op(OP.LogicalOr, BOOL, out, c)
        return out

    def const(self, value, dt) -> int:
        """A constant id (non-finite f32 values come from a hoisted bitcast)."""
        if dt == BOOL:
            return self.mod.const_bool(bool(value))
        if dt == F32:
            bits = f32_bits(float(value))
            if (bits & 0x7F800000) == 0x7F800000:
                hit = self._hoisted.get(bits)
                if hit is None:
                    hit = self._hoisted[bits] = self.fn.hoist(OP.Bitcast, self.ty(F32), self.mod.const_u32(bits))
                return hit
            return self.mod.const(self.ty(F32), bits)
        if dt in (I32, U32):
            return self.mod.const(self.ty(dt), int(value))
        raise CompileError(f"spirv: no constant of dtype {dt.name}")

    def nan(self) -> int:
        """The canonical quiet NaN (0x7fc00000, as the WGSL prelude's)."""
        return self.const(struct.unpack("<f", struct.pack("<I", NAN_BITS))[0], F32)

    def _magnitude(self, x: int) -> int:
        return self.op(OP.BitwiseAnd, U32, self.op(OP.Bitcast, U32, x), self.const(0x7FFFFFFF, U32))

    def isnan(self, x: int) -> int:
        """NaN test on the bits (immune to fast-math compare folding)."""
        return self.op(OP.UGreaterThan, BOOL, self._magnitude(x), self.const(0x7F800000, U32))

    def isinf(self, x: int) -> int:
        """Infinity test on the bits."""
        return self.op(OP.IEqual, BOOL, self._magnitude(x), self.const(0x7F800000, U32))

    def call(self, helper: str, args) -> int:
        """Call a prelude helper function (built once per module)."""
        fid, dt = self.em.helper(helper)
        return self.op(OP.FunctionCall, dt, fid, *args)

    # ---- expressions ------------------------------------------------------------------------
    def expr(self, e: ir.Expr) -> int:
        """The id of a KIR expression's value (constant subexpressions folded first)."""
        return self._expr(ir.fold(e))

    def _expr(self, e: ir.Expr) -> int:
        if isinstance(e, ir.Const):
            return self.const(e.value, e.dtype)
        if isinstance(e, ir.Var):
            kind, rid, _ = self._lookup(e.name)
            return rid if kind == "val" else self.op(OP.Load, e.dtype, rid)
        if isinstance(e, ir.Builtin):
            if e.name not in self.builtins:
                raise CompileError(f"spirv: unknown builtin {e.name!r}")
            return self.builtins[e.name]
        if isinstance(e, ir.Load):
            ptr, atomic = self.em.buffer_ptr(self, e.buf, self._expr(e.index))
            word = (self.op(OP.AtomicLoad, U32, ptr, self.const(DEVICE, U32), self.const(RELAXED, U32)) if atomic
                    else self.op(OP.Load, U32, ptr))
            return self.from_word(word, e.dtype)
        if isinstance(e, ir.SLoad):
            return self.op(OP.Load, e.dtype, self.shared_ptr(e.name, self._expr(e.index)))
        if isinstance(e, ir.Op):
            args = [self._expr(a) for a in e.args]
            if e.op == "cast":
                src, dst = e.args[0].dtype, e.dtype
                cast_rule = CASTS.get((src.kind, dst.kind))
                if cast_rule is None:
                    raise CompileError(f"spirv: no cast rule {src.name} -> {dst.name}")
                return cast_rule(self, args[0])
            if e.op == "bitcast":
                src = e.args[0].dtype
                if src == BOOL or e.dtype == BOOL:
                    raise CompileError(f"spirv: cannot bitcast {src.name} -> {e.dtype.name}")
                return args[0] if src == e.dtype else self.op(OP.Bitcast, e.dtype, args[0])
            in_dt = e.args[1].dtype if e.op == "select" else e.args[0].dtype
            return rule(e.op, in_dt)(self, args, in_dt, e.dtype)
        raise CompileError(f"spirv: cannot emit expression {e!r}")

    def _lookup(self, name: str):
        hit = self.env.get(name)
        if hit is None:
            raise CompileError(f"spirv: name {name!r} is used before it is bound")
        return hit

    def from_word(self, word: int, dt) -> int:
        """A u32 buffer word reinterpreted as dt (bool: word != 0)."""
        if dt == U32:
            return word
        if dt == BOOL:
            return self.op(OP.INotEqual, BOOL, word, self.const(0, U32))
        return self.op(OP.Bitcast, dt, word)

    def to_word(self, value: int, dt) -> int:
        """The u32 word stored for a value (bool as 0/1)."""
        if dt == U32:
            return value
        if dt == BOOL:
            return self.select(value, self.const(1, U32), self.const(0, U32), U32)
        return self.op(OP.Bitcast, U32, value)

    def shared_ptr(self, name: str, index: int) -> int:
        """Pointer to an element of this kernel's workgroup array `name`."""
        var, dt = self.em.shared_var(self.kernel, name)
        return self.fn.op(OP.AccessChain, self.mod.t_ptr(spec.SC_WORKGROUP, self.ty(dt)), var, index)

    # ---- statements ---------------------------------------------------------------------------
    def block(self, stmts) -> None:
        """Emit statements; names bound inside stay inside."""
        saved = dict(self.env)
        for s in stmts:
            self.stmt(s)
        self.env = saved

    def stmt(self, s) -> None:
        """Emit one KIR statement."""
        if isinstance(s, ir.Let):
            self.env[s.name] = ("val", self.expr(s.value), s.value.dtype)
        elif isinstance(s, ir.Decl):
            ptr = self.fn.local(self.ty(s.value.dtype), s.name)
            self.fn.do(OP.Store, ptr, self.expr(s.value))
            self.env[s.name] = ("ptr", ptr, s.value.dtype)
        elif isinstance(s, ir.Assign):
            kind, ptr, _ = self._lookup(s.name)
            if kind != "ptr":
                raise CompileError(f"spirv: assignment to immutable name {s.name!r}")
            self.fn.do(OP.Store, ptr, self.expr(s.value))
        elif isinstance(s, ir.Store):
            index, value = self.expr(s.index), self.expr(s.value)
            ptr, atomic = self.em.buffer_ptr(self, s.buf, index)
            word = self.to_word(value, s.value.dtype)
            if atomic:
                self.fn.do(OP.AtomicStore, ptr, self.const(DEVICE, U32), self.const(RELAXED, U32), word)
            else:
                self.fn.do(OP.Store, ptr, word)
        elif isinstance(s, ir.SStore):
            index, value = self.expr(s.index), self.expr(s.value)
            self.fn.do(OP.Store, self.shared_ptr(s.name, index), value)
        elif isinstance(s, ir.If):
            cond = self.expr(s.cond)
            self.fn.if_(cond, lambda: self.block(s.then), (lambda: self.block(s.orelse)) if s.orelse else None)
        elif isinstance(s, ir.For):
            self._for(s)
        elif isinstance(s, ir.Barrier):
            sem = self.const(BARRIER_SEMANTICS, U32)
            wg = self.const(spec.SCOPE_WORKGROUP, U32)
            self.fn.do(OP.MemoryBarrier, wg, sem)
            self.fn.do(OP.ControlBarrier, wg, wg, sem)
        elif isinstance(s, ir.AtomicMaxU32):
            index, value = self.expr(s.index), self.expr(s.value)
            ptr = self._atomic_ptr(s.buf, index, "AtomicMaxU32")
            self.op(OP.AtomicUMax, U32, ptr, self.const(DEVICE, U32), self.const(RELAXED, U32),
                    self.to_word(value, s.value.dtype))
        elif isinstance(s, ir.AtomicAdd):
            self._atomic_add(s)
        else:
            raise CompileError(f"spirv: cannot emit statement {type(s).__name__}: {s!r}")

    def _for(self, s: ir.For) -> None:
        ptr = self.fn.local(self.ty(U32), s.var)
        self.fn.do(OP.Store, ptr, self.expr(s.start))
        saved = dict(self.env)
        self.env[s.var] = ("ptr", ptr, U32)

        def cond():
            return self.op(OP.ULessThan, BOOL, self.op(OP.Load, U32, ptr), self.expr(s.end))

        def step():
            self.fn.do(OP.Store, ptr, self.op(OP.IAdd, U32, self.op(OP.Load, U32, ptr), self.expr(s.step)))

        self.fn.loop(cond, lambda: self.block(s.body), step)
        self.env = saved

    def _atomic_ptr(self, buf: str, index: int, what: str) -> int:
        ptr, atomic = self.em.buffer_ptr(self, buf, index)
        if not atomic:
            raise CompileError(f"spirv: {what} on buffer {buf!r}, which kernel {self.kernel.name} does not "
                               "declare atomic")
        return ptr

    def _atomic_add(self, s: ir.AtomicAdd) -> None:
        index, value = self.expr(s.index), self.expr(s.value)
        ptr = self._atomic_ptr(s.buf, index, "AtomicAdd")
        dev, relaxed = self.const(DEVICE, U32), self.const(RELAXED, U32)
        if s.value.dtype in (I32, U32):
            self.op(OP.AtomicIAdd, U32, ptr, dev, relaxed, self.to_word(value, s.value.dtype))
            return
        if s.value.dtype != F32:
            raise CompileError(f"spirv: atomic add of {s.value.dtype.name}")

        # f32: naga 29 cannot read a module that uses OpAtomicCompareExchange's result (its
        # SPIR-V reader never emits the `old_value` access and its Vulkan writer panics;
        # fixed upstream by gfx-rs/wgpu#9621), so add by exchange instead of WGSL's
        # compare-exchange loop: take the word out (leaving +0.0), add our carry, put the
        # sum back; a nonzero word displaced by the put is another invocation's deposit,
        # which becomes our carry. No invocation ever waits on another (no lock), and the
        # sum is conserved; only the summation order differs, as with any float atomic.
        carry = self.fn.local(self.ty(F32), "carry")
        self.fn.do(OP.Store, carry, value)
        zero = self.const(0, U32)

        def attempt():
            taken = self.op(OP.AtomicExchange, U32, ptr, dev, relaxed, zero)
            total = self.op(OP.FAdd, F32, self.op(OP.Bitcast, F32, taken), self.op(OP.Load, F32, carry))
            displaced = self.op(OP.AtomicExchange, U32, ptr, dev, relaxed, self.op(OP.Bitcast, U32, total))
            self.fn.do(OP.Store, carry, self.op(OP.Bitcast, F32, displaced))
            return self.op(OP.IEqual, BOOL, displaced, zero)
        self.fn.loop_until(attempt)


class Emitter:
    """Module-level state: types, buffer and builtin variables, helpers, one entry point per kernel."""

    def __init__(self, plan):
        self.plan = plan
        self.mod = Module()
        m = self.mod
        self._types = {F32: m.t_f32(), I32: m.t_int(True), U32: m.t_int(False), BOOL: m.t_bool()}
        self._helpers: dict = {}
        self._shared: dict = {}
        u32 = self._types[U32]
        uvec3 = m.t_vec(u32, 3)
        self.inputs = {}
        for name, builtin, t in (("lid", spec.BUILTIN_LOCAL_INVOCATION_INDEX, u32),
                                 ("wgid", spec.BUILTIN_WORKGROUP_ID, uvec3),
                                 ("nwg", spec.BUILTIN_NUM_WORKGROUPS, uvec3)):
            var = m.variable(m.t_ptr(spec.SC_INPUT, t), spec.SC_INPUT, name)
            m.decorate(var, spec.DEC_BUILTIN, builtin)
            self.inputs[name] = (var, t)
        words = m.t_runtime_array(u32, 4)
        atomic_bufs = {b for k in plan.kernels for b in k.atomic}
        self.buffers: dict = {}  # name -> (plain variable, atomic variable or None)
        for i, b in enumerate(plan.bindings):
            pair = []
            for suffix, tag in (("", "plain"), ("_at", "atomic")):
                if tag == "atomic" and b.name not in atomic_bufs:
                    pair.append(None)
                    continue
                st = m.t_block(words, tag)
                var = m.variable(m.t_ptr(spec.SC_STORAGE_BUFFER, st), spec.SC_STORAGE_BUFFER, b.name + suffix)
                m.decorate(var, spec.DEC_DESCRIPTOR_SET, 0)
                m.decorate(var, spec.DEC_BINDING, i)
                pair.append(var)
            self.buffers[b.name] = tuple(pair)

    def ty(self, dt) -> int:
        """The type id of a KIR dtype."""
        hit = self._types.get(dt)
        if hit is None:
            raise CompileError(f"spirv: dtype {dt.name} has no SPIR-V kernel type")
        return hit

    def buffer_ptr(self, coder: Coder, buf: str, index: int) -> tuple:
        """(pointer to word `index` of binding `buf`, whether the kernel accesses it atomically)."""
        if buf not in self.buffers:
            raise CompileError(f"spirv: unknown buffer {buf!r}")
        plain, at = self.buffers[buf]
        atomic = coder.kernel is not None and buf in coder.kernel.atomic
        var = at if atomic else plain
        ptr_t = self.mod.t_ptr(spec.SC_STORAGE_BUFFER, self._types[U32])
        return coder.fn.op(OP.AccessChain, ptr_t, var, coder.const(0, U32), index), atomic

    def shared_var(self, kernel: ir.Kernel, name: str) -> tuple:
        """(variable, dtype) of a kernel's workgroup array."""
        hit = self._shared.get((kernel.name, name))
        if hit is None:
            raise CompileError(f"spirv: kernel {kernel.name} has no shared array {name!r}")
        return hit

    def helper(self, name: str) -> tuple:
        """(function id, result dtype) of a prelude helper, built on first use."""
        hit = self._helpers.get(name)
        if hit is None:
            build, params, result = HELPERS[name]
            fn = Function(self.mod, self.ty(result), tuple(self.ty(p) for p in params), f"eta_{name}")
            hit = self._helpers[name] = (fn.id, result)
            build(Coder(self, fn))
            fn.finish()
        return hit

    def kernel(self, k: ir.Kernel) -> None:
        """One entry point: builtins, the out-of-grid guard, the body."""
        m = self.mod
        for s in k.shared:
            arr = m.t_array(self.ty(s.dtype), s.size)
            var = m.variable(m.t_ptr(spec.SC_WORKGROUP, arr), spec.SC_WORKGROUP, f"{k.name}_{s.name}")
            self._shared[(k.name, s.name)] = (var, s.dtype)
        fn = Function(m, m.t_void(), (), k.name)
        c = Coder(self, fn, k)
        u32 = self._types[U32]
        lid = fn.op(OP.Load, u32, self.inputs["lid"][0])
        wgid = fn.op(OP.Load, self.inputs["wgid"][1], self.inputs["wgid"][0])
        nwg = fn.op(OP.Load, self.inputs["nwg"][1], self.inputs["nwg"][0])
        wx, wy = fn.op(OP.CompositeExtract, u32, wgid, 0), fn.op(OP.CompositeExtract, u32, wgid, 1)
        nx = fn.op(OP.CompositeExtract, u32, nwg, 0)
        wid = fn.op(OP.IAdd, u32, wx, fn.op(OP.IMul, u32, wy, nx))
        gid = fn.op(OP.IAdd, u32, fn.op(OP.IMul, u32, wid, c.const(k.workgroup, U32)), lid)
        c.builtins = {"lid": lid, "wid": wid, "gid": gid}
        gx, gy = grid(k.groups, self.plan.limits.max_groups_per_dim)
        if gx * gy > k.groups:  # the folded 2-D grid has spare workgroups
            fn.if_(c.op(OP.UGreaterThanEqual, BOOL, wid, c.const(k.groups, U32)), fn.ret)
        c.block(k.body)
        fn.finish()
        ins = [v for v, _ in self.inputs.values()]
        m.entry_points += instruction(OP.EntryPoint, spec.EXEC_GLCOMPUTE, fn.id, *string_words(k.name), *ins)
        m.exec_modes += instruction(OP.ExecutionMode, fn.id, spec.MODE_LOCAL_SIZE, k.workgroup, 1, 1)

    def module(self) -> bytes:
        """Every kernel of the plan as one module."""
        for k in self.plan.kernels:
            self.kernel(k)
        if not self.plan.kernels:
            # a module needs an entry point to be valid; this one is never dispatched
            self.kernel(ir.Kernel("noop", 1, 1, ()))
        return self.mod.to_bytes()


class SPIRV(Renderer):
    """The SPIR-V renderer: one GLCompute entry point per kernel of a plan, as module bytes."""

    target = "spirv"
    version = VERSION

    def render(self, plan) -> bytes:
        return Emitter(plan).module()
