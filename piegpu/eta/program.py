"""The eta Program: an SSA list of typed nodes, its canonical bytes and content hash."""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..dtypes import dtype
from ..errors import ValidationError
from .ops import A_DTYPE, A_INT, A_SHAPE, A_STR, OPS, GroupOp, TType, check_shape, infer

MAGIC = b"PIEETA"
VERSION = 2  # 2: channels are declared by name and cell type (docs/container.md)
MAX_NAME_BYTES = 255  # a channel name is 1..255 bytes of UTF-8


@dataclass(frozen=True)
class Node:
    """One SSA node: op name, input node ids, attribute values (OpDef order), result type."""

    op: str
    inputs: tuple
    attrs: tuple
    type: TType | None  # None for effects (chan_put)

    @property
    def attr(self) -> dict:
        """Attributes by name."""
        return dict(zip((a for a, _ in OPS[self.op].attrs), self.attrs))


def const_value(node: Node):
    """The Python value of a `const` node (float, int or bool)."""
    dt, bits = node.attrs
    raw = np.array([bits], np.uint32)
    return raw.view(dt.np)[0].item() if dt != dtype.bool else bool(bits)


class Program:
    """A traced eta program: nodes, outputs and the channel slots it touches."""

    def __init__(self, nodes, outputs, channels=(), channel_names=()):
        self.nodes: tuple = tuple(nodes)
        self.outputs: tuple = tuple(outputs)
        self.channels: tuple = tuple(channels)  # slot -> TType of one cell
        # slot -> name: part of the bytes and the hash, so a runtime can bind channels by name
        self.channel_names: tuple = channel_names_for(channel_names, len(self.channels))
        self.channel_objects: tuple = ()  # the traced Channel per slot (runtime only; not part of the hash)

    # ---- identity -----------------------------------------------------------------
    @cached_property
    def _bytes(self) -> bytes:
        return encode(self)

    def to_bytes(self) -> bytes:
        """The canonical bytes: equal programs give equal bytes in any process."""
        return self._bytes

    def to_ptir(self) -> bytes:
        """Pie's PTIR container of this program (ValidationError naming the first op Pie's op table lacks)."""
        from ..ptir.export import to_ptir
        return to_ptir(self)

    @cached_property
    def hash(self) -> str:
        """Hex sha256 of the canonical bytes: the content hash."""
        return hashlib.sha256(self._bytes).hexdigest()

    @staticmethod
    def from_bytes(data: bytes) -> "Program":
        """Decode and fully validate canonical bytes (ValidationError if anything is off)."""
        return decode(data)

    def __eq__(self, other) -> bool:
        return isinstance(other, Program) and self._bytes == other._bytes

    def __hash__(self) -> int:
        return hash(self._bytes)

    # ---- views --------------------------------------------------------------------
    @property
    def input_types(self) -> list:
        """The TType of each positional input, in order."""
        ins = sorted((n.attrs[0], n.type) for n in self.nodes if n.op == "input")
        return [t for _, t in ins]

    @property
    def output_types(self) -> list:
        """The TType of each output, in order."""
        return [self.nodes[i].type for i in self.outputs]

    @property
    def is_pure(self) -> bool:
        """True when the program uses no channels and no runtime intrinsics."""
        return not any(n.op in GroupOp.RUNTIME for n in self.nodes)

    def __repr__(self) -> str:
        return f"<eta.Program {len(self.nodes)} nodes, {len(self.outputs)} outputs, hash {self.hash[:12]}>"

    def pretty(self) -> str:
        """A readable listing: one `%i = op(%a, %b) {attrs} : type` line per node."""
        lines = []
        for i, ch in enumerate(self.channels):
            lines.append(f"channel {i} {self.channel_names[i]!r}: {ch!r}")
        for i, n in enumerate(self.nodes):
            args = ", ".join(f"%{j}" for j in n.inputs)
            attrs = n.attr
            if n.op == "const":
                attrs = {"value": const_value(n), "dtype": n.attrs[0]}
            attr_s = " {" + ", ".join(f"{k}={v!r}" for k, v in attrs.items()) + "}" if attrs else ""
            ty = f" : {n.type!r}" if n.type is not None else ""
            lines.append(f"%{i} = {n.op}({args}){attr_s}{ty}")
        lines.append("return " + ", ".join(f"%{i}" for i in self.outputs))
        return "\n".join(lines)

    # ---- backends -----------------------------------------------------------------
    def emit(self, target: str, **options):
        """Device code for `target` (piegpu.targets.TARGETS): spirv -> bytes, every other target -> str."""
        from .backends import emit
        return emit(self, target, **options)

    def run(self, *args, backend: str = "interp", **options):
        """Run on numpy inputs ("interp" or a target with a runner); one array per output (a tuple if several)."""
        from .backends import run
        return run(self, args, backend, **options)


# ---- channel names ---------------------------------------------------------------------

def check_channel_name(name: str, where: str) -> None:
    """A channel name is 1..255 bytes of UTF-8 without control characters (ValidationError otherwise)."""
    raw = name.encode("utf-8", "surrogatepass")
    if not 1 <= len(raw) <= MAX_NAME_BYTES:
        raise ValidationError(f"{where}: channel name {name!r} is {len(raw)} bytes of UTF-8; names take 1 to "
                              f"{MAX_NAME_BYTES}. Fix: give the channel a shorter name with .named(...)")
    bad = [c for c in name if ord(c) < 0x20 or ord(c) == 0x7F or 0xD800 <= ord(c) < 0xE000]
    if bad:
        raise ValidationError(f"{where}: channel name {name!r} contains the character {bad[0]!r}. Fix: use "
                              "printable characters in channel names")


def channel_names_for(given, count: int) -> tuple:
    """The name of every channel slot: the given name, or "chan{slot}" when it has none.

    A name an earlier slot already has gets "#{slot}" appended (again, until unique), so
    names are unique per program and deterministic (docs/container.md, "Channel names").
    """
    given = tuple(given)
    names: list = []
    for slot in range(count):
        name = str(given[slot]) if slot < len(given) and given[slot] else f"chan{slot}"
        while name in names:
            name = f"{name}#{slot}"
        check_channel_name(name, f"channel {slot}")
        names.append(name)
    return tuple(names)


# ---- canonical encoding ---------------------------------------------------------------

def _enc_type(out: list, t: TType) -> None:
    out.append(struct.pack("<BB", t.dtype.code, len(t.shape)))
    out.append(struct.pack(f"<{len(t.shape)}I", *t.shape))


def encode(prog: Program) -> bytes:
    """Serialize a program to its canonical bytes."""
    out = [MAGIC, struct.pack("<H", VERSION), struct.pack("<H", len(prog.channels))]
    for name, ch in zip(prog.channel_names, prog.channels):
        raw = name.encode("utf-8")
        out.append(struct.pack("<H", len(raw)) + raw)
        _enc_type(out, ch)
    out.append(struct.pack("<I", len(prog.nodes)))
    for n in prog.nodes:
        name = n.op.encode("ascii")
        out.append(struct.pack("<B", len(name)) + name)
        if n.type is None:
            out.append(b"\x00")
        else:
            out.append(b"\x01")
            _enc_type(out, n.type)
        out.append(struct.pack(f"<H{len(n.inputs)}I", len(n.inputs), *n.inputs))
        for (aname, kind), v in zip(OPS[n.op].attrs, n.attrs):
            if kind == A_INT:
                out.append(struct.pack("<q", v))
            elif kind == A_DTYPE:
                out.append(struct.pack("<B", v.code))
            elif kind == A_SHAPE:
                out.append(struct.pack(f"<B{len(v)}I", len(v), *v))
            elif kind == A_STR:
                b = v.encode("utf-8")
                out.append(struct.pack("<H", len(b)) + b)
    out.append(struct.pack(f"<H{len(prog.outputs)}I", len(prog.outputs), *prog.outputs))
    return b"".join(out)


def _dtype_of(code: int, where: str):
    """The dtype of a byte code in a container: f32, i32, u32 or bool (f16 is for weights, never in programs)."""
    if code not in (dtype.f32.code, dtype.i32.code, dtype.u32.code, dtype.bool.code):
        raise ValidationError(f"{where}: dtype code {code} is not one of 1 (f32), 2 (i32), 3 (u32), 4 (bool). "
                              "Fix: the bytes are corrupt")
    return dtype.from_code(code)


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, fmt: str, what: str):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise ValidationError(
                f"eta program bytes are truncated: needed {size} bytes for {what} at offset {self.pos}, "
                f"only {len(self.data) - self.pos} left. Fix: pass the complete bytes from Program.to_bytes()")
        vals = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return vals

    def type(self, what: str) -> TType:
        code, rank = self.take("<BB", what)
        dt = _dtype_of(code, what)
        if rank > 4:
            raise ValidationError(f"rank {rank} > 4 in {what}. Fix: the bytes are corrupt")
        shape = self.take(f"<{rank}I", what)
        check_shape(what, shape)
        return TType(dt, tuple(shape))


def decode(data: bytes) -> Program:
    """Parse and validate program bytes; everything must re-encode to the same bytes."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValidationError(f"Program.from_bytes needs bytes, got {type(data).__name__}")
    data = bytes(data)
    r = _Reader(data)
    if data[: len(MAGIC)] != MAGIC:
        raise ValidationError(f"not eta program bytes: magic {data[:len(MAGIC)]!r} != {MAGIC!r}. "
                              "Fix: pass bytes produced by Program.to_bytes()")
    r.pos = len(MAGIC)
    (version,) = r.take("<H", "version")
    if version != VERSION:
        raise ValidationError(f"eta program bytes have version {version}; this piegpu reads version {VERSION}. "
                              "Fix: re-trace the function with this piegpu")
    (n_ch,) = r.take("<H", "channel count")
    channels, names = [], []
    for i in range(n_ch):
        where = f"channel {i}"
        (ln,) = r.take("<H", where)
        try:
            name = r.take(f"<{ln}s", where)[0].decode("utf-8")
        except UnicodeDecodeError:
            raise ValidationError(f"{where}: the name is not UTF-8. Fix: the bytes are corrupt") from None
        check_channel_name(name, where)
        if name in names:
            raise ValidationError(f"{where}: name {name!r} is also channel {names.index(name)}'s; names are "
                                  "unique. Fix: the bytes are corrupt or come from a broken tracer")
        names.append(name)
        channels.append(r.type(where))
    (n_nodes,) = r.take("<I", "node count")
    if n_nodes > len(data):  # each node takes several bytes: a bigger count is a lie
        raise ValidationError(f"declared {n_nodes} nodes but only {len(data)} bytes. Fix: the bytes are corrupt")
    nodes: list[Node] = []
    inputs_seen: set = set()
    for i in range(n_nodes):
        where = f"node %{i}"
        (ln,) = r.take("<B", where)
        raw = r.take(f"<{ln}s", where)[0]
        try:
            name = raw.decode("ascii")
        except UnicodeDecodeError:
            raise ValidationError(f"{where}: op name {raw!r} is not ascii. Fix: the bytes are corrupt") from None
        if name not in OPS:
            raise ValidationError(f"{where}: unknown op {name!r}. Fix: the bytes come from a newer or "
                                  "different piegpu, or are corrupt")
        (has_type,) = r.take("<B", where)
        if has_type > 1:
            raise ValidationError(f"{where}: bad type flag {has_type}. Fix: the bytes are corrupt")
        stored = r.type(where) if has_type else None
        (n_in,) = r.take("<H", where)
        ins = r.take(f"<{n_in}I", where)
        for j in ins:
            if j >= i or nodes[j].type is None:
                raise ValidationError(f"{where}: input %{j} is not an earlier value node. Fix: the bytes are corrupt")
        attrs = []
        for aname, kind in OPS[name].attrs:
            if kind == A_INT:
                (v,) = r.take("<q", where)
                if not 0 <= v < (1 << 32):  # every int attribute is an index, count or bit pattern
                    raise ValidationError(f"{where}: attribute {aname} = {v} is outside 0..2^32-1. "
                                          "Fix: the bytes are corrupt")
                attrs.append(v)
            elif kind == A_DTYPE:
                (c,) = r.take("<B", where)
                attrs.append(_dtype_of(c, where))
            elif kind == A_SHAPE:
                (rank,) = r.take("<B", where)
                if rank > 4:
                    raise ValidationError(f"{where}: attribute {aname} has rank {rank} > 4")
                attrs.append(tuple(r.take(f"<{rank}I", where)))
            elif kind == A_STR:
                (ln,) = r.take("<H", where)
                try:
                    attrs.append(r.take(f"<{ln}s", where)[0].decode("utf-8"))
                except UnicodeDecodeError:
                    raise ValidationError(f"{where}: attribute {aname} is not utf-8") from None
        node = Node(name, tuple(ins), tuple(attrs), stored)
        _check_node(i, node, nodes, channels, inputs_seen)
        nodes.append(node)
    (n_out,) = r.take("<H", "output count")
    outs = r.take(f"<{n_out}I", "outputs")
    for j in outs:
        if j >= len(nodes) or nodes[j].type is None:
            raise ValidationError(f"output %{j} is not a value node. Fix: the bytes are corrupt")
    if r.pos != len(data):
        raise ValidationError(f"{len(data) - r.pos} trailing bytes after the program. "
                              "Fix: pass exactly the bytes of one Program.to_bytes()")
    if sorted(inputs_seen) != list(range(len(inputs_seen))):
        raise ValidationError(f"input indices {sorted(inputs_seen)} are not 0..n-1. Fix: the bytes are corrupt")
    _check_seqs(nodes)
    prog = Program(nodes, outs, channels, names)
    if encode(prog) != data:
        raise ValidationError("program bytes are not canonical (they decode but re-encode differently). "
                              "Fix: pass bytes produced by Program.to_bytes()")
    return prog


def _check_node(i: int, node: Node, nodes: list, channels: list, inputs_seen: set) -> None:
    where = f"node %{i} ({node.op})"
    attrs = node.attr
    ins = [nodes[j].type for j in node.inputs]
    try:
        want = infer(node.op, ins, attrs)
    except ValidationError as e:
        raise ValidationError(f"{where}: {e}") from None
    if want != node.type:
        raise ValidationError(f"{where}: stored type {node.type!r} but the op's rule gives {want!r}. "
                              "Fix: the bytes are corrupt")
    if node.op == "input":
        if attrs["index"] in inputs_seen or attrs["index"] < 0:
            raise ValidationError(f"{where}: duplicate or negative input index {attrs['index']}")
        inputs_seen.add(attrs["index"])
    if node.op == "const" and not 0 <= attrs["bits"] < (1 << 32):
        raise ValidationError(f"{where}: constant bits {attrs['bits']} are not a 32-bit pattern")
    if node.op == "const" and attrs["dtype"] == dtype.bool and attrs["bits"] not in (0, 1):
        raise ValidationError(f"{where}: bool constant must be 0 or 1")
    if node.op in GroupOp.CHANNEL:
        slot = attrs["slot"]
        if not 0 <= slot < len(channels):
            raise ValidationError(f"{where}: channel slot {slot} out of range ({len(channels)} channels)")
        cell = channels[slot]
        got = ins[0] if node.op == "chan_put" else node.type
        if got != cell:
            raise ValidationError(f"{where}: value {got!r} does not match channel {slot}'s cell {cell!r}")


def _check_seqs(nodes: list) -> None:
    """The takes and the puts of each channel carry seq 0, 1, 2, ... in node order (as the tracer numbers them)."""
    seen: dict = {}
    for i, n in enumerate(nodes):
        if n.op in GroupOp.COMMITTED:
            slot, seq = n.attr["slot"], n.attr["seq"]
            want = seen.get((n.op, slot), 0)
            if seq != want:
                raise ValidationError(f"node %{i} ({n.op}): seq {seq} but this is {n.op} number {want} on channel "
                                      f"{slot}. Fix: the bytes are corrupt")
            seen[(n.op, slot)] = want + 1
