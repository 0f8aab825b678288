"""The tracer: a Tensor proxy that records every op into the active Builder."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np

from ..dtypes import DType, dtype
from ..errors import TraceError, ValidationError
from .ops import OPS, GroupOp, TType, check_shape, infer
from .program import Node, Program

_active = threading.local()


def current() -> "Builder":
    """The Builder of the trace in progress (TraceError outside eta.trace)."""
    b = getattr(_active, "builder", None)
    if b is None:
        raise TraceError("eta ops only work on traced tensors inside eta.trace(fn, ...) or an epilogue. "
                         "Fix: call this from the traced function")
    return b


class Builder:
    """Collects the nodes of one trace; hash-conses identical pure nodes."""

    def __init__(self, context=None):
        self.nodes: list[Node] = []
        self._cons: dict = {}
        self.channels: list = []  # slot -> channel object
        self.takes: dict = {}  # slot -> number of takes so far
        self.puts: dict = {}
        self.context = context  # runtime context for intrinsics (None for plain traces)

    @contextmanager
    def active(self):
        """Make this builder the target of traced ops within the block."""
        prev = getattr(_active, "builder", None)
        _active.builder = self
        try:
            yield self
        finally:
            _active.builder = prev

    def add(self, op: str, inputs=(), **attrs) -> "Tensor | None":
        """Type-check and record op(inputs, attrs); returns the result tensor (None for effects)."""
        ins = []
        for t in inputs:
            if not isinstance(t, Tensor):
                raise TraceError(f"{op}: expected a traced tensor, got {type(t).__name__}. "
                                 "Fix: build values with eta ops inside the traced function")
            if t._b is not self:
                raise TraceError(f"{op}: tensor {t.type!r} belongs to another trace. "
                                 "Fix: do not reuse tensors across traces or epilogues")
            ins.append(t)
        names = [a for a, _ in OPS[op].attrs]
        if set(attrs) != set(names):
            raise ValidationError(f"{op}: attributes {sorted(attrs)} != {names}")
        vals = tuple(attrs[a] for a in names)
        ty = infer(op, [t.type for t in ins], attrs)
        node = Node(op, tuple(t._id for t in ins), vals, ty)
        key = (op, node.inputs, vals)
        idx = self._cons.get(key)
        if idx is None:
            idx = len(self.nodes)
            self.nodes.append(node)
            self._cons[key] = idx
        return None if ty is None else Tensor(self, idx, ty)

    def slot(self, channel, cell: TType) -> int:
        """The program-local slot of a channel object (assigned in first-use order)."""
        for i, ch in enumerate(self.channels):
            if ch is channel:
                return i
        self.channels.append(channel)
        return len(self.channels) - 1

    def finish(self, outputs) -> Program:
        """Drop dead nodes, renumber, and build the Program."""
        live = set()
        roots = [i for i, n in enumerate(self.nodes) if n.op == "input" or n.op in GroupOp.COMMITTED]
        roots += [t._id for t in outputs]
        stack = list(roots)
        while stack:
            i = stack.pop()
            if i in live:
                continue
            live.add(i)
            stack.extend(self.nodes[i].inputs)
        remap, nodes = {}, []
        for i, n in enumerate(self.nodes):
            if i in live:
                remap[i] = len(nodes)
                nodes.append(Node(n.op, tuple(remap[j] for j in n.inputs), n.attrs, n.type))
        chans = [self._cell(ch) for ch in self.channels]
        names = [getattr(ch, "name", "") or "" for ch in self.channels]
        prog = Program(nodes, [remap[t._id] for t in outputs], chans, names)
        prog.channel_objects = tuple(self.channels)  # runtime binding only; not part of the bytes
        return prog

    @staticmethod
    def _cell(ch) -> TType:
        return TType(ch.dtype, tuple(ch.shape))


def _misuse(what: str):
    def method(self, *a, **k):
        raise TraceError(f"{what} on a traced tensor {self.type!r}: its value is not known while tracing. "
                         "Fix: branch on tensor values with select(cond, if_true, if_false); Python "
                         "control flow only sees shapes and trace-time constants")
    return method


class Tensor:
    """A traced tensor: a handle to one node of the active trace, with static dtype and shape."""

    __slots__ = ("_b", "_id", "type")
    __array_ufunc__ = None  # numpy must not try to treat us as an array

    def __init__(self, builder: Builder, idx: int, ty: TType):
        self._b, self._id, self.type = builder, idx, ty

    @property
    def shape(self) -> tuple:
        """Static shape (tuple of ints)."""
        return self.type.shape

    @property
    def dtype(self) -> DType:
        """Element dtype."""
        return self.type.dtype

    @property
    def size(self) -> int:
        """Number of elements."""
        return self.type.size

    @property
    def ndim(self) -> int:
        """Rank."""
        return len(self.type.shape)

    def __repr__(self) -> str:
        return f"Tensor(%{self._id}: {self.type!r})"

    __bool__ = _misuse("bool()")
    __int__ = _misuse("int()")
    __float__ = _misuse("float()")
    __index__ = _misuse("use as an index")
    __len__ = _misuse("len()")
    __iter__ = _misuse("iteration")
    __complex__ = _misuse("complex()")

    def __eq__(self, other):
        raise TraceError(f"== on a traced tensor {self.type!r} is not overloaded. Fix: use eta.eq(a, b)")

    def __ne__(self, other):
        raise TraceError(f"!= on a traced tensor {self.type!r} is not overloaded. Fix: use eta.ne(a, b)")

    __hash__ = object.__hash__

    def __getitem__(self, item):
        raise TraceError(f"indexing a traced tensor {self.type!r} with [] is not supported. Fix: use "
                         "gather(src, idx) along axis 0, take_last for the last axis, or slice_last")

    # arithmetic: a binary op with broadcasting; Python scalars take the tensor's dtype
    def __add__(self, o): return binary("add", self, o)
    def __radd__(self, o): return binary("add", o, self)
    def __sub__(self, o): return binary("sub", self, o)
    def __rsub__(self, o): return binary("sub", o, self)
    def __mul__(self, o): return binary("mul", self, o)
    def __rmul__(self, o): return binary("mul", o, self)
    def __truediv__(self, o): return binary("div", self, o)
    def __rtruediv__(self, o): return binary("div", o, self)
    def __floordiv__(self, o): return floordiv(self, o)
    def __rfloordiv__(self, o): return floordiv(o, self)
    def __mod__(self, o): return binary("rem", self, o)
    def __rmod__(self, o): return binary("rem", o, self)
    def __pow__(self, o): return binary("pow", self, o)
    def __rpow__(self, o): return binary("pow", o, self)
    def __neg__(self): return self._b.add("neg", [self])
    def __pos__(self): return self
    def __abs__(self): return self._b.add("abs_", [self])
    def __lt__(self, o): return binary("lt", self, o)
    def __le__(self, o): return binary("le", self, o)
    def __gt__(self, o): return binary("gt", self, o)
    def __ge__(self, o): return binary("ge", self, o)
    def __and__(self, o): return binary(_logic("and_", self, o), self, o)
    def __rand__(self, o): return binary(_logic("and_", self, o), o, self)
    def __or__(self, o): return binary(_logic("or_", self, o), self, o)
    def __ror__(self, o): return binary(_logic("or_", self, o), o, self)
    def __xor__(self, o): return binary("bit_xor" if self.dtype.is_int else "ne", self, o)
    def __lshift__(self, o): return binary("shl", self, o)
    def __rshift__(self, o): return binary("shr", self, o)

    def __invert__(self):
        return self._b.add("bit_not" if self.dtype.is_int else "not_", [self])


def _logic(op: str, a, b) -> str:
    t = a if isinstance(a, Tensor) else b
    return {"and_": "bit_and", "or_": "bit_or"}[op] if t.dtype.is_int else op


def scalar_bits(value, dt: DType, where: str) -> int:
    """The 32-bit pattern of Python scalar `value` as dtype `dt` (ValidationError if it cannot be)."""
    if isinstance(value, (np.generic,)):
        value = value.item()
    if dt == dtype.bool:
        if not isinstance(value, bool):
            raise ValidationError(f"{where}: cannot use {value!r} as a bool constant. Fix: pass True or False")
        return int(value)
    if isinstance(value, bool):
        raise ValidationError(f"{where}: cannot mix Python bool {value!r} with a {dt.name} tensor. "
                              "Fix: pass a number, or cast the tensor to bool")
    if dt.is_float:
        if not isinstance(value, (int, float)):
            raise ValidationError(f"{where}: {value!r} is not a number")
        with np.errstate(over="ignore"):
            return int(np.array([value], np.float32).view(np.uint32)[0])
    if isinstance(value, float):
        if not value.is_integer():
            raise ValidationError(f"{where}: cannot mix Python float {value!r} with a {dt.name} tensor. "
                                  "Fix: cast the tensor with cast(x, dtype.f32)")
        value = int(value)
    if not isinstance(value, int):
        raise ValidationError(f"{where}: {value!r} is not an int")
    if not -(1 << 31) <= value < (1 << 32):
        raise ValidationError(f"{where}: {value} does not fit in 32 bits. Fix: use a smaller constant")
    return value & 0xFFFFFFFF


def python_dtype(value, where: str) -> DType:
    """The dtype of a bare Python scalar: float f32, bool bool, int i32 (u32 past the i32 range)."""
    if isinstance(value, np.generic):
        return dtype.from_numpy(value.dtype)
    if isinstance(value, bool):
        return dtype.bool
    if isinstance(value, int):
        if -(1 << 31) <= value < (1 << 31):
            return dtype.i32
        if 0 <= value < (1 << 32):
            return dtype.u32
        raise ValidationError(f"{where}: {value} does not fit in 32 bits")
    if isinstance(value, float):
        return dtype.f32
    raise ValidationError(f"{where}: expected a tensor or a Python scalar, got {type(value).__name__}")


def constant(value, dt: DType, shape=(), where: str = "const") -> Tensor:
    """A constant tensor of `shape` filled with Python scalar `value` as dtype `dt`."""
    b = current()
    c = b.add("const", [], dtype=dt, bits=scalar_bits(value, dt, where))
    shape = check_shape(where, shape)
    return c if not shape else b.add("broadcast", [c], shape=shape)


def to_tensor(x, like: Tensor | None, where: str) -> Tensor:
    """`x` as a traced tensor; a Python scalar takes `like`'s dtype (or its own) and rank 0."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (np.ndarray,)) and x.ndim > 0:
        raise TraceError(f"{where}: numpy arrays are not traced values. Fix: pass them as program inputs "
                         "(eta.spec) or build them with eta ops")
    dt = like.dtype if like is not None else python_dtype(x, where)
    return constant(x, dt, (), where)


def broadcast_shapes(op: str, a: tuple, b: tuple) -> tuple:
    """numpy-style broadcast of two shapes (right-aligned), or ValidationError."""
    n = max(len(a), len(b))
    pa, pb = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(pa, pb):
        if x != y and 1 not in (x, y):
            raise ValidationError(f"{op}: cannot broadcast shapes {list(a)} and {list(b)}: dims {x} and {y} "
                                  "differ and neither is 1. Fix: reshape one side, e.g. reshape(m, [rows, 1])")
        out.append(max(x, y))
    return tuple(out)


def expand(t: Tensor, shape: tuple) -> Tensor:
    """Broadcast `t` to `shape` (no node when already that shape)."""
    if t.shape == shape:
        return t
    return t._b.add("broadcast", [t], shape=shape)


def binary(op: str, a, b) -> Tensor:
    """Record a binary elementwise op with scalar promotion and numpy-style broadcasting."""
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        current()
        raise TraceError(f"{op}: neither argument is a traced tensor. Fix: pass at least one tensor")
    like = a if isinstance(a, Tensor) else b
    a, b = to_tensor(a, like, op), to_tensor(b, like, op)
    shape = broadcast_shapes(op, a.shape, b.shape)
    return a._b.add(op, [expand(a, shape), expand(b, shape)])


def floordiv(a, b) -> Tensor:
    """`a // b`: floor(a / b) for f32; truncating division for integers (WGSL's rule)."""
    q = binary("div", a, b)
    return q if not q.dtype.is_float else q._b.add("floor", [q])


def spec(shape, dt: DType) -> TType:
    """An input spec for eta.trace: static shape (list of ints) and dtype."""
    if not hasattr(dt, "code"):
        raise ValidationError(f"spec: {dt!r} is not a piegpu dtype. Fix: use dtype.f32, dtype.i32, dtype.u32 or dtype.bool")
    if dt == dtype.f16:
        raise ValidationError("spec: f16 inputs are not supported. Fix: pass f32")
    return TType(dt, check_shape("spec", shape))


def _flatten(xs):
    for x in xs:
        if isinstance(x, (tuple, list)):
            yield from _flatten(x)
        else:
            yield x


def trace(fn, *specs, context=None, prelude=None) -> Program:
    """Run `fn` once on placeholders of `specs`, recording every op into a Program.

    `fn` returns a tensor or a (possibly nested) tuple of tensors: the outputs, flattened.
    """
    for i, s in enumerate(specs):
        if not isinstance(s, TType):
            raise ValidationError(f"trace: argument {i + 1} is {s!r}, not an eta.spec. "
                                  "Fix: eta.trace(fn, eta.spec([n], dtype.f32), ...)")
    b = Builder(context)
    with b.active():
        if prelude is not None:  # effects the runtime records before the user's function
            prelude()
        args = [b.add("input", [], index=i, dtype=s.dtype, shape=s.shape) for i, s in enumerate(specs)]
        result = fn(*args)
    if result is None:
        outs = []
    elif isinstance(result, Tensor):
        outs = [result]
    elif isinstance(result, (tuple, list)):
        outs = list(_flatten(result))
    else:
        raise TraceError(f"trace: {getattr(fn, '__name__', fn)} returned {type(result).__name__}. "
                         "Fix: return a tensor, a tuple of tensors, or nothing (epilogues with puts)")
    for o in outs:
        if not isinstance(o, Tensor) or o._b is not b:
            raise TraceError(f"trace: output {o!r} is not a tensor of this trace. Fix: return traced tensors")
    if not outs and not any(n.op in GroupOp.COMMITTED for n in b.nodes):
        raise TraceError(f"trace: {getattr(fn, '__name__', fn)} has no outputs and no channel puts. "
                         "Fix: return the tensors you want, or put them into channels")
    if len(outs) > 64:
        raise TraceError(f"trace: {len(outs)} outputs (limit 64). Fix: concat them into fewer tensors")
    return b.finish(outs)
