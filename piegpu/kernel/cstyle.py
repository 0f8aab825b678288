"""The C-family renderer: one statement walker, per-target rule tables (WGSL here; MSL, CUDA, HIP via cxx.py)."""

from __future__ import annotations

import math
import struct

from ..errors import CompileError
from . import ir
from .render import Renderer


def f32_bits(v: float) -> int:
    """The IEEE bits of v rounded to f32."""
    return struct.unpack("<I", struct.pack("<f", v))[0]


F32_MAX = 3.4028234663852886e38


def f32_repr(v: float) -> str:
    """Shortest decimal that rounds back to the same f32 (finite values only) and lies within f32's range.

    The range matters at the largest floats: the shortest decimal of FLT_MAX, 3.4028235e+38,
    rounds to it but is larger, and Tint (Chrome's WGSL compiler) rejects a literal above
    FLT_MAX ("cannot be represented as 'f32'") where naga rounds it.
    """
    f = struct.unpack("<f", struct.pack("<f", v))[0]
    for digits in range(6, 18):
        s = f"{f:.{digits}g}"
        if struct.unpack("<f", struct.pack("<f", float(s)))[0] == f and abs(float(s)) <= F32_MAX:
            break
    if "e" not in s and "." not in s and "inf" not in s and "nan" not in s:
        s += ".0"
    return s


def kind(dt) -> str:
    """The rule-table suffix of a dtype: float, int, uint, bool."""
    return dt.kind


class CStyle(Renderer):
    """Base renderer. A target sets the tables and overrides the few syntax hooks."""

    target = "c"
    types: dict = {}
    # op -> format string over {0}, {1}, {2}; "op.kind" keys override per input dtype kind
    ops: dict = {}
    # (from kind, to kind) -> format string for cast
    casts: dict = {}
    # kind -> format string over {0}: a value as the 32-bit word that stores it, and a stored word read back
    to_bits_rules: dict = {}
    from_bits_rules: dict = {}
    # Atomics, on targets that have them: how a word of an atomic buffer is addressed (over {buf}, {idx}),
    # and the u32 max / int add statements over {ref}, {value}; the f32 add is atomic_add_f32.
    atomic_ref: str
    atomic_max_rule: str
    atomic_add_rule: str
    prelude = ""
    indent_unit = "  "

    # ---- expressions ------------------------------------------------------------------
    def literal(self, value, dt) -> str:
        raise NotImplementedError

    def type_name(self, dt) -> str:
        return self.types[dt.name]

    def rule(self, op: str, dt) -> str:
        """The format string of `op` for input dtype `dt` (CompileError if the target lacks it)."""
        r = self.ops.get(f"{op}.{kind(dt)}") or self.ops.get(op)
        if r is None:
            raise CompileError(f"{self.target}: no rule for op {op!r} on {dt.name}. Fix: add it to the "
                               f"{self.target} rule table or avoid the op on this target")
        return r

    def expr(self, e) -> str:
        e = ir.fold(e)
        if isinstance(e, ir.Const):
            return self.literal(e.value, e.dtype)
        if isinstance(e, (ir.Var, ir.Builtin)):
            return e.name
        if isinstance(e, ir.Load):
            return self.load(e.buf, self.expr(e.index), e.dtype)
        if isinstance(e, ir.SLoad):
            return f"{self.shared_name(e.name)}[{self.expr(e.index)}]"
        if isinstance(e, ir.Op):
            args = [self.expr(a) for a in e.args]
            if e.op == "cast":
                src, dst = e.args[0].dtype, e.dtype
                fmt = self.casts.get((kind(src), kind(dst)))
                if fmt is None:
                    raise CompileError(f"{self.target}: no cast rule {src.name} -> {dst.name}")
                return fmt.format(*args, to=self.type_name(dst))
            if e.op == "bitcast":
                return self.bitcast(args[0], e.args[0].dtype, e.dtype)
            in_dt = e.args[1].dtype if e.op == "select" else e.args[0].dtype
            return self.rule(e.op, in_dt).format(*args, to=self.type_name(e.dtype))
        raise CompileError(f"{self.target}: cannot render {e!r}")

    # ---- memory -------------------------------------------------------------------------
    def to_bits(self, value: str, dt) -> str:
        """The 32-bit word that stores `value` of dtype dt (bool as 0/1)."""
        return self.to_bits_rules[kind(dt)].format(value)

    def from_bits(self, word: str, dt) -> str:
        """A stored 32-bit word read back as dtype dt."""
        return self.from_bits_rules[kind(dt)].format(word)

    def load(self, buf: str, idx: str, dt) -> str:
        """buffer[idx] read as dtype dt."""
        return self.from_bits(f"{buf}[{idx}]", dt)

    def store(self, buf: str, idx: str, value: str, dt) -> str:
        """The statement buffer[idx] = value (its 32-bit word)."""
        return f"{buf}[{idx}] = {self.to_bits(value, dt)};"

    def bitcast(self, x: str, src, dst) -> str:
        raise NotImplementedError

    def shared_name(self, name: str) -> str:
        return f"{self._kernel.name}_{name}"

    # ---- statements ----------------------------------------------------------------------
    def stmt(self, s, depth: int, out: list) -> None:
        pad = self.indent_unit * depth
        if isinstance(s, ir.Let):
            out.append(pad + self.let(s.name, s.value.dtype, self.expr(s.value)))
        elif isinstance(s, ir.Decl):
            out.append(pad + self.decl(s.name, s.value.dtype, self.expr(s.value)))
        elif isinstance(s, ir.Assign):
            out.append(pad + f"{s.name} = {self.expr(s.value)};")
        elif isinstance(s, ir.Store):
            out.append(pad + self.store(s.buf, self.expr(s.index), self.expr(s.value), s.value.dtype))
        elif isinstance(s, ir.SStore):
            out.append(pad + f"{self.shared_name(s.name)}[{self.expr(s.index)}] = {self.expr(s.value)};")
        elif isinstance(s, ir.If):
            out.append(pad + f"if ({self.expr(s.cond)}) {{")
            for t in s.then:
                self.stmt(t, depth + 1, out)
            if s.orelse:
                out.append(pad + "} else {")
                for t in s.orelse:
                    self.stmt(t, depth + 1, out)
            out.append(pad + "}")
        elif isinstance(s, ir.For):
            out.append(pad + self.for_header(s.var, self.expr(s.start), self.expr(s.end), self.expr(s.step)))
            for t in s.body:
                self.stmt(t, depth + 1, out)
            out.append(pad + "}")
        elif isinstance(s, ir.Barrier):
            out.append(pad + self.barrier())
        elif isinstance(s, ir.AtomicMaxU32):
            out.append(pad + self.atomic_max(s.buf, self.expr(s.index), self.expr(s.value)))
        elif isinstance(s, ir.AtomicAdd):
            out.extend(pad + line for line in self.atomic_add(s.buf, self.expr(s.index), self.expr(s.value),
                                                              s.value.dtype))
        else:
            raise CompileError(f"{self.target}: cannot render statement {s!r}")

    def let(self, name: str, dt, value: str) -> str:
        raise NotImplementedError

    def decl(self, name: str, dt, value: str) -> str:
        raise NotImplementedError

    def for_header(self, var: str, start: str, end: str, step: str) -> str:
        raise NotImplementedError

    def barrier(self) -> str:
        raise NotImplementedError

    def atomic_max(self, buf: str, idx: str, value: str) -> str:
        """atomicMax on a u32 word of an atomic buffer."""
        return self.atomic_max_rule.format(ref=self.atomic_ref.format(buf=buf, idx=idx), value=value)

    def atomic_add(self, buf: str, idx: str, value: str, dt) -> list:
        """The lines of an atomic add into a word: the target's rule for ints, its own loop for f32."""
        ref = self.atomic_ref.format(buf=buf, idx=idx)
        if dt != ir.F32:
            return [self.atomic_add_rule.format(ref=ref, value=self.to_bits(value, dt))]
        return self.atomic_add_f32(ref, value)

    def atomic_add_f32(self, ref: str, value: str) -> list:
        raise NotImplementedError

    # ---- kernels and modules ------------------------------------------------------------
    def kernel(self, k: ir.Kernel, plan) -> list:
        """The lines of one kernel (entry point)."""
        self._kernel = k
        out = self.kernel_open(k, plan)
        for s in k.body:
            self.stmt(s, 1, out)
        out.append("}")
        return out

    def kernel_open(self, k: ir.Kernel, plan) -> list:
        raise NotImplementedError

    def render(self, plan) -> str:
        """The whole source: header, bindings, prelude helpers, every kernel."""
        lines = self.module_open(plan)
        for k in plan.kernels:
            lines.append("")
            if k.comment:
                lines.append(f"// {k.name}: {k.comment}")
            lines.extend(self.kernel(k, plan))
        return "\n".join(lines) + "\n"

    def module_open(self, plan) -> list:
        raise NotImplementedError


def grid(groups: int, max_per_dim: int = 65535) -> tuple:
    """Fold a workgroup count into (x, y) within the per-dimension limit."""
    if groups <= max_per_dim:
        return groups, 1
    y = math.ceil(groups / max_per_dim)
    return math.ceil(groups / y), y
