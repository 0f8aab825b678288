"""KIR: typed expressions and structured statements of one compute kernel.

Every buffer is an array of 32-bit words; a Load reinterprets a word as its dtype
(bool is stored as 0/1). Expression ops are the eta elementwise op names, so a
backend's op rule table is keyed exactly like the eta op table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..dtypes import DType, dtype

U32, I32, F32, BOOL = dtype.u32, dtype.i32, dtype.f32, dtype.bool


class Expr:
    """Base of KIR expressions; every expression has a dtype."""

    dtype: DType


@dataclass(frozen=True)
class Const(Expr):
    """A literal of `dtype` (value: int for ints, float for f32, bool for bool)."""

    value: object
    dtype: DType


@dataclass(frozen=True)
class Var(Expr):
    """A named value: let binding, mutable variable or loop counter."""

    name: str
    dtype: DType


@dataclass(frozen=True)
class Builtin(Expr):
    """A thread id: gid_x (global x), lid (local index), wid (flat workgroup index)."""

    name: str
    dtype: DType = U32


@dataclass(frozen=True)
class Op(Expr):
    """An elementwise op by its eta name; cast/bitcast convert to `dtype`."""

    op: str
    args: tuple
    dtype: DType


@dataclass(frozen=True)
class Load(Expr):
    """buffer[index] reinterpreted as `dtype` (atomic when the kernel's buffer is atomic)."""

    buf: str
    index: Expr
    dtype: DType


@dataclass(frozen=True)
class SLoad(Expr):
    """Workgroup-shared array element."""

    name: str
    index: Expr
    dtype: DType


class Stmt:
    """Base of KIR statements."""


@dataclass(frozen=True)
class Let(Stmt):
    """Bind an immutable name."""

    name: str
    value: Expr


@dataclass(frozen=True)
class Decl(Stmt):
    """Declare a mutable variable with an initial value."""

    name: str
    value: Expr


@dataclass(frozen=True)
class Assign(Stmt):
    """Assign to a mutable variable."""

    name: str
    value: Expr


@dataclass(frozen=True)
class Store(Stmt):
    """buffer[index] = value (its 32 bits; bool as 0/1)."""

    buf: str
    index: Expr
    value: Expr


@dataclass(frozen=True)
class SStore(Stmt):
    """shared[index] = value."""

    name: str
    index: Expr
    value: Expr


@dataclass(frozen=True)
class If(Stmt):
    """if cond { then } else { orelse }."""

    cond: Expr
    then: tuple
    orelse: tuple = ()


@dataclass(frozen=True)
class For(Stmt):
    """for (u32 var = start; var < end; var += step) { body }."""

    var: str
    start: Expr
    end: Expr
    step: Expr
    body: tuple


@dataclass(frozen=True)
class Barrier(Stmt):
    """Workgroup barrier that also orders workgroup and storage memory."""


@dataclass(frozen=True)
class AtomicMaxU32(Stmt):
    """atomicMax on a u32 word of an atomic buffer."""

    buf: str
    index: Expr
    value: Expr


@dataclass(frozen=True)
class AtomicAdd(Stmt):
    """Atomic add of an i32/u32/f32 value into a word (f32 by compare-exchange loop)."""

    buf: str
    index: Expr
    value: Expr


@dataclass(frozen=True)
class Shared:
    """A workgroup-shared array."""

    name: str
    dtype: DType
    size: int


@dataclass
class Kernel:
    """One compute dispatch: workgroup size, grid, shared arrays, body."""

    name: str
    workgroup: int
    groups: int  # total workgroups (the backend folds it into a 2-D grid when needed)
    body: tuple
    shared: tuple = ()
    atomic: frozenset = frozenset()  # buffers accessed atomically in this kernel
    comment: str = ""


@dataclass
class Binding:
    """A storage buffer every kernel of a plan may use, in binding order."""

    name: str
    kind: str  # "arena", "intrinsic", "channel"
    words: int  # size in 32-bit words
    info: dict = field(default_factory=dict)


# ---- constructors with constant folding (index arithmetic stays readable) ------------------

def u32(v: int) -> Const:
    """A u32 literal."""
    return Const(int(v) & 0xFFFFFFFF, U32)


def const(v, dt: DType) -> Const:
    """A literal of dtype dt."""
    if dt == F32:
        return Const(float(v), F32)
    if dt == BOOL:
        return Const(bool(v), BOOL)
    return Const(int(v), dt)


def _is(e: Expr, v) -> bool:
    return isinstance(e, Const) and e.value == v


def add(a: Expr, b: Expr) -> Expr:
    """a + b, folding zeros and constants."""
    if _is(b, 0):
        return a
    if _is(a, 0):
        return b
    if isinstance(a, Const) and isinstance(b, Const) and a.dtype == U32:
        return u32(a.value + b.value)
    return Op("add", (a, b), a.dtype)


def sub(a: Expr, b: Expr) -> Expr:
    """a - b, folding zero."""
    if _is(b, 0):
        return a
    if isinstance(a, Const) and isinstance(b, Const) and a.dtype == U32:
        return u32(a.value - b.value)
    return Op("sub", (a, b), a.dtype)


def mul(a: Expr, b: Expr) -> Expr:
    """a * b, folding ones and zeros."""
    if _is(b, 1):
        return a
    if _is(a, 1):
        return b
    if _is(a, 0) or _is(b, 0):
        return Const(0, a.dtype)
    if isinstance(a, Const) and isinstance(b, Const) and a.dtype == U32:
        return u32(a.value * b.value)
    return Op("mul", (a, b), a.dtype)


def div(a: Expr, b: Expr) -> Expr:
    """a / b for u32 index math."""
    if _is(b, 1):
        return a
    if isinstance(a, Const) and isinstance(b, Const) and a.dtype == U32 and b.value:
        return u32(a.value // b.value)
    return Op("div", (a, b), a.dtype)


def rem(a: Expr, b: Expr) -> Expr:
    """a % b for u32 index math."""
    if _is(b, 1):
        return Const(0, a.dtype)
    if isinstance(a, Const) and isinstance(b, Const) and a.dtype == U32 and b.value:
        return u32(a.value % b.value)
    return Op("rem", (a, b), a.dtype)


def op(name: str, *args: Expr, dt: DType | None = None) -> Op:
    """A generic elementwise op; result dtype defaults to the first argument's."""
    return Op(name, tuple(args), dt or args[0].dtype)


def lt(a: Expr, b: Expr) -> Expr:
    """a < b."""
    return Op("lt", (a, b), BOOL)


def select(c: Expr, a: Expr, b: Expr) -> Expr:
    """c ? a : b."""
    if isinstance(c, Const):
        return a if c.value else b
    return Op("select", (c, a, b), a.dtype)


def cast(e: Expr, dt: DType) -> Expr:
    """Value conversion with eta's cast semantics."""
    if e.dtype == dt:
        return e
    if isinstance(e, Const) and e.dtype in (U32, I32) and dt in (U32, I32):
        return Const(e.value & 0xFFFFFFFF if dt == U32 else (e.value + (1 << 31)) % (1 << 32) - (1 << 31), dt)
    return Op("cast", (e,), dt)


def linear(idx: list, shape: tuple) -> Expr:
    """Row-major flat index of a multi-index."""
    flat: Expr = u32(0)
    for i, d in zip(idx, shape):
        flat = add(mul(flat, u32(d)), i)
    return flat


def delinear(flat: Expr, shape: tuple) -> list:
    """Multi-index of a row-major flat index below prod(shape) (size-1 dims give literal 0)."""
    idx = []
    stride = 1
    for d in shape:
        stride *= d
    for axis, d in enumerate(shape):
        stride //= d
        if d == 1:
            idx.append(u32(0))
            continue
        q = div(flat, u32(stride))
        idx.append(q if axis == 0 else rem(q, u32(d)))
    return idx


def fold(e: Expr) -> Expr:
    """Evaluate every all-constant subexpression with the interpreter's semantics.

    Backends must not see constant expressions such as `1u % 0u` or an overflowing
    `i32` sum: WGSL compilers evaluate those at compile time and reject them.
    """
    if not isinstance(e, Op):
        return e
    args = tuple(fold(a) for a in e.args)
    if all(isinstance(a, Const) for a in args):
        from ..eta.interp import eval_scalar
        v = eval_scalar(e.op, [(a.value, a.dtype) for a in args], e.dtype)
        return const(v, e.dtype)
    return e if args == e.args else Op(e.op, args, e.dtype)
