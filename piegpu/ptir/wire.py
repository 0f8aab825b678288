"""PTIR wire format: Pie's trace container (magic "PTIR", version 1/2), decoded strictly and re-encoded.

The layout follows Pie's compiler/ir (container.rs, op.rs): a header, the name table,
channel declarations, descriptor-port bindings, stage programs (flat SSA op lists whose
byte layout is each op's `wire` row below) and, in version 2, extern channels. Decoding
checks Pie's limits before allocating, names the byte offset and field of anything
malformed, and insists the bytes re-encode identically (the canonical form Pie hashes).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ..errors import ValidationError

MAGIC = b"PTIR"
VERSION, VERSION_EXTERN = 1, 2
MAX_RANK = 4
MAX_STAGES, MAX_OPS, MAX_CHANNELS, MAX_NAMES, MAX_PORTS = 4, 1 << 16, 1 << 12, 1 << 12, 1 << 8

DTYPES = ("f32", "i32", "u32", "bool")  # wire tag = index; channels may also carry 4 = "act"
CHAN_DTYPES = DTYPES + ("act",)
STAGES = ("prologue", "on_attn_proj", "on_attn", "epilogue")
PORTS = ("embed_tokens", "embed_indptr", "positions", "pages", "page_indptr", "kv_len", "w_slot", "w_off",
         "readout", "attn_mask", "rs_buffer_pages", "rs_buffer_indptr", "rs_buffer_len", "rs_w_slot",
         "rs_w_off", "rs_fold_len")
HOST_ROLES = ("none", "writer", "reader")
INTRINSICS = ("logits", "mtp_logits", "hidden", "query", "value_head", "layer", "mtp_drafts", "attn_score")
RNG_KINDS = ("uniform", "gumbel")
PREDICATES = ("rank_le", "cummass_le", "prob_ge")  # the payload is a value id (the threshold)


@dataclass(frozen=True)
class OpRow:
    """One PTIR op: wire tag, name, result count and the fields of its wire record, in order."""

    tag: int
    name: str
    results: int
    wire: tuple


def _rows(spec: str) -> dict:
    rows = {}
    for line in spec.strip().splitlines():
        tag, name, results, *wire = line.split()
        rows[int(tag, 16)] = OpRow(int(tag, 16), name, int(results), tuple(wire))
    return rows


# tag name results wire-fields (Pie's op.rs table; `value` = an operand id, `args` = a counted list)
OPS: dict = _rows("""
01 exp 1 value
02 log 1 value
03 neg 1 value
04 recip 1 value
05 abs 1 value
06 sign 1 value
07 cast 1 value dtype
10 add 1 value value
11 sub 1 value value
12 mul 1 value value
13 div 1 value value
14 max_elem 1 value value
15 min_elem 1 value value
16 gt 1 value value
17 ge 1 value value
18 eq 1 value value
19 ne 1 value value
1A lt 1 value value
1B le 1 value value
1C and 1 value value
1D or 1 value value
1E not 1 value
1F rem 1 value value
20 select 1 value value value
30 reduce_sum 1 value
31 reduce_max 1 value
32 reduce_min 1 value
33 reduce_argmax 1 value
38 broadcast 1 value shape
39 reshape 1 value shape
3A transpose 1 value
40 cumsum 1 value
41 cumprod 1 value
50 sort_desc 2 value
51 top_k 2 value imm
55 matmul 1 value value
58 pivot_threshold 1 value predicate
60 gather 1 value value
61 gather_row 1 value value
62 scatter_add 1 value value value
63 scatter_set 1 value value value
64 iota 1 imm
65 mask_apply_packed 1 value value
66 causal_mask 1 value imm
67 sliding_window_mask 1 value imm imm
68 sink_window_mask 1 value imm imm imm
70 rng 1 imm shape rng_kind
71 rng_keyed 1 value shape rng_kind
81 const 1 literal
90 chan_take 1 chan
91 chan_read 1 chan
92 chan_put 0 chan value
A0 intrinsic_val 1 intrinsic dtype shape
A1 kernel_call 1 name dtype shape args
A2 sink_call 0 name args
""")
BY_NAME = {row.name: row for row in OPS.values()}


@dataclass
class Op:
    """One decoded op: its row name, operand value ids, and the non-operand fields by wire field name."""

    name: str
    args: tuple = ()
    fields: dict = field(default_factory=dict)

    @property
    def row(self) -> OpRow:
        """This op's table row."""
        return BY_NAME[self.name]


@dataclass
class Channel:
    """A channel declaration: cell shape and dtype, queue capacity, host endpoint, seeded flag."""

    dtype: str
    shape: tuple
    capacity: int
    host_role: str = "none"
    seeded: bool = False


@dataclass
class Port:
    """A descriptor-port binding: a channel index, or a constant (dtype, shape, raw bytes)."""

    port: str
    channel: int | None = None
    const: tuple | None = None  # (dtype, shape, data)


@dataclass
class Container:
    """A decoded PTIR trace container."""

    names: list = field(default_factory=list)
    channels: list = field(default_factory=list)
    ports: list = field(default_factory=list)
    stages: list = field(default_factory=list)  # [(stage name, [Op, ...])], sorted by stage tag
    externs: list = field(default_factory=list)  # [(name index, "import" | "export", channel)]

    def stage(self, name: str) -> list | None:
        """The op list of stage `name`, or None when the container has no such stage."""
        return next((ops for s, ops in self.stages if s == name), None)


def fnv1a64(data: bytes) -> int:
    """FNV-1a 64 of `data`: Pie's container identity hash."""
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def malformed(offset: int, what: str, fix: str = "the bytes are corrupt or truncated; re-export the container "
              "from Pie (TraceContainer::encode) or from prog.to_ptir()") -> ValidationError:
    """The ValidationError for a malformed byte: where, which field, and the fix."""
    return ValidationError(f"PTIR container: {what} at byte offset {offset}. Fix: {fix}")


class Reader:
    """A cursor over container bytes whose every read names its field (errors carry offset and field)."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, size: int, what: str) -> bytes:
        """`size` raw bytes for field `what`."""
        if self.pos + size > len(self.data):
            raise malformed(self.pos, f"unexpected end of input reading {what} (needs {size} bytes, "
                                      f"{len(self.data) - self.pos} left)")
        out = self.data[self.pos:self.pos + size]
        self.pos += size
        return out

    def u8(self, what: str) -> int:
        """One byte."""
        return self.take(1, what)[0]

    def u16(self, what: str) -> int:
        """A little-endian u16."""
        return struct.unpack("<H", self.take(2, what))[0]

    def u32(self, what: str) -> int:
        """A little-endian u32."""
        return struct.unpack("<I", self.take(4, what))[0]

    def tag(self, table: tuple, what: str) -> str:
        """A one-byte tag, as its name in `table`."""
        at, t = self.pos, self.u8(what)
        if t >= len(table):
            raise malformed(at, f"unknown {what} tag 0x{t:02x} (known: {', '.join(table)})")
        return table[t]

    def count(self, what: str, min_bytes: int, limit: int) -> int:
        """A u32 table count, bounded by Pie's structural limit and by the bytes left."""
        at, n = self.pos, self.u32(f"{what} count")
        if n > limit or n * min_bytes > len(self.data) - self.pos:
            raise malformed(at, f"{what} count {n} exceeds what the input can back (limit {limit}, "
                                f"{len(self.data) - self.pos} bytes left)")
        return n

    def shape(self, what: str) -> tuple:
        """A rank byte and that many u32 dims (each >= 1)."""
        at, rank = self.pos, self.u8(f"{what} rank")
        if rank > MAX_RANK:
            raise malformed(at, f"{what} rank {rank} exceeds MAX_RANK {MAX_RANK}")
        dims = tuple(self.u32(f"{what} dim {i}") for i in range(rank))
        if 0 in dims:
            raise malformed(at, f"{what} {list(dims)} has a zero dimension")
        return dims


@dataclass
class _Record:
    """One op's wire record while it is read or written: operand ids, immediates, the other fields."""

    args: list
    imms: list
    fields: dict


def _tag_field(key: str, table: tuple) -> tuple:
    return (lambda r, what, rec: rec.fields.__setitem__(key, r.tag(table, what)),
            lambda out, rec: out.append(bytes([table.index(rec.fields[key])])))


def _read_literal(r: Reader, what: str, rec: _Record) -> None:
    at, dt = r.pos, r.u8(f"{what} dtype")
    bits = r.u32(f"{what} bits")  # payload first, as Pie reads it: a truncated literal is an EOF
    if dt >= len(DTYPES):
        raise malformed(at, f"{what}: unknown literal dtype tag 0x{dt:02x}")
    rec.fields["literal"] = (DTYPES[dt], bits)


def _write_literal(out: list, rec: _Record) -> None:
    dt, bits = rec.fields["literal"]
    out.append(struct.pack("<BI", DTYPES.index(dt), int(bits != 0) if dt == "bool" else bits))


def _read_intrinsic(r: Reader, what: str, rec: _Record) -> None:
    at, intr = r.pos, r.u16(what)
    if intr >= len(INTRINSICS):
        raise malformed(at, f"{what}: unknown intrinsic id {intr}")
    rec.fields["intrinsic"] = INTRINSICS[intr]


def _read_predicate(r: Reader, what: str, rec: _Record) -> None:
    rec.fields["predicate"] = r.tag(PREDICATES, what)  # the tag is checked before its payload is read
    rec.args.append(r.u32(f"{what} threshold value"))


def _read_args(r: Reader, what: str, rec: _Record) -> None:
    rec.args.extend(r.u32(f"{what} {i}") for i in range(r.u8(f"{what} count")))


# wire field -> (read(reader, field name, record), write(out, record)): the layout column's codec, one row each
FIELDS = {
    "value": (lambda r, what, rec: rec.args.append(r.u32(what)),
              lambda out, rec: out.append(struct.pack("<I", rec.args.pop(0)))),
    "chan": (lambda r, what, rec: rec.fields.__setitem__("chan", r.u32(what)),
             lambda out, rec: out.append(struct.pack("<I", rec.fields["chan"]))),
    "imm": (lambda r, what, rec: rec.imms.append(r.u32(what)),
            lambda out, rec: out.append(struct.pack("<I", rec.imms.pop(0)))),
    "dtype": _tag_field("dtype", DTYPES),
    "rng_kind": _tag_field("rng_kind", RNG_KINDS),
    "shape": (lambda r, what, rec: rec.fields.__setitem__("shape", r.shape(what)),
              lambda out, rec: _shape(out, rec.fields["shape"])),
    "predicate": (_read_predicate, lambda out, rec: out.append(struct.pack(
        "<BI", PREDICATES.index(rec.fields["predicate"]), rec.args.pop(0)))),
    "literal": (_read_literal, _write_literal),
    "name": (lambda r, what, rec: rec.fields.__setitem__("name", r.u16(what)),
             lambda out, rec: out.append(struct.pack("<H", rec.fields["name"]))),
    "intrinsic": (_read_intrinsic,
                  lambda out, rec: out.append(struct.pack("<H", INTRINSICS.index(rec.fields["intrinsic"])))),
    "args": (_read_args, lambda out, rec: out.append(struct.pack(f"<B{len(rec.args)}I", len(rec.args), *rec.args))),
}


def _decode_op(r: Reader, where: str) -> Op:
    at, tag = r.pos, r.u8(f"{where} opcode")
    row = OPS.get(tag)
    if row is None:
        raise malformed(at, f"{where}: unknown opcode 0x{tag:02x}")
    rec = _Record([], [], {})
    for f in row.wire:
        FIELDS[f][0](r, f"{where} ({row.name}) {f}", rec)
    if rec.imms:
        rec.fields["imm"] = tuple(rec.imms)
    return Op(row.name, tuple(rec.args), rec.fields)


def decode(data: bytes) -> Container:
    """Parse container bytes strictly (ValidationError naming offset and field on any malformed byte)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValidationError(f"ptir.load needs bytes, got {type(data).__name__}. Fix: open the file in 'rb' mode")
    data = bytes(data)
    r = Reader(data)
    if data[:4] != MAGIC:
        raise malformed(0, f"magic {data[:4]!r} is not {MAGIC!r}; this is not a PTIR container",
                        "pass the bytes of a Pie trace container (.ptir)")
    r.pos = 4
    at, version = r.pos, r.u16("version")
    if version not in (VERSION, VERSION_EXTERN):
        raise malformed(at, f"unsupported container version {version} (this reader knows 1 and 2)",
                        "export the container with a Pie release of the 0.5 line")
    r.u16("flags")
    n_names, n_channels, n_ports, n_stages = (r.u32(f"{t} count") for t in ("name", "channel", "port", "stage"))
    n_externs = r.u32("extern count") if version == VERSION_EXTERN else 0
    def bounded(n: int, table: str, size: int, limit: int, offset: int) -> int:
        # Pie bounds each table's count by the bytes left when the table starts, before allocating
        if n > limit or n * size > len(data) - r.pos:
            raise malformed(offset, f"{table} count {n} exceeds what the input can back (limit {limit}, "
                                    f"{len(data) - r.pos} bytes left)")
        return n

    c = Container()
    for i in range(bounded(n_names, "name table", 2, MAX_NAMES, 8)):
        raw = r.take(r.u16(f"name {i} length"), f"name {i}")
        try:
            c.names.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise malformed(r.pos - len(raw), f"name {i} is not valid UTF-8") from None
    for i in range(bounded(n_channels, "channel table", 8, MAX_CHANNELS, 12)):
        w = f"channel {i}"
        c.channels.append(Channel(r.tag(CHAN_DTYPES, f"{w} dtype"), r.shape(f"{w} shape"), r.u32(f"{w} capacity"),
                                  r.tag(HOST_ROLES, f"{w} host role"), bool(r.u8(f"{w} seeded"))))
    for i in range(bounded(n_ports, "port table", 4, MAX_PORTS, 16)):
        port = r.tag(PORTS, f"port {i}")
        src_at, src = r.pos, r.u8(f"port {i} source")
        if src == 0:
            c.ports.append(Port(port, channel=r.u32(f"port {i} channel")))
        elif src == 1:
            dt = r.tag(DTYPES, f"port {i} const dtype")
            shape = r.shape(f"port {i} const shape")
            n = 1
            for d in shape:
                n *= d
            c.ports.append(Port(port, const=(dt, shape, r.take(n * (1 if dt == "bool" else 4), f"port {i} const"))))
        else:
            raise malformed(src_at, f"port {i}: unknown port source tag 0x{src:02x} (0 channel, 1 const)")
    for i in range(bounded(n_stages, "stage table", 5, MAX_STAGES, 20)):
        stage = r.tag(STAGES, f"stage {i}")
        n_ops = r.count(f"stage {i} ({stage}) operation", 1, MAX_OPS)
        c.stages.append((stage, [_decode_op(r, f"{stage} op {j}") for j in range(n_ops)]))
    for i in range(bounded(n_externs, "extern table", 7, MAX_CHANNELS, 24)):
        name, d, chan = r.u16(f"extern {i} name"), r.tag(("import", "export"), f"extern {i} direction"), \
            r.u32(f"extern {i} channel")
        c.externs.append((name, d, chan))
    if r.pos != len(data):
        raise malformed(r.pos, f"{len(data) - r.pos} trailing bytes after the container",
                        "pass exactly one container's bytes")
    again = encode(c)
    if again != data:
        at = next((i for i, (a, b) in enumerate(zip(again, data)) if a != b), min(len(again), len(data)))
        raise malformed(at, "non-canonical encoding (the fields decode but re-encode differently: a flags word, "
                            "a seeded byte other than 0/1, a bool literal other than 0/1, or version 2 with no "
                            "externs)")
    return c


def _shape(out: list, shape: tuple) -> None:
    out.append(struct.pack(f"<B{len(shape)}I", len(shape), *shape))


def _encode_op(out: list, op: Op) -> None:
    out.append(bytes([op.row.tag]))
    rec = _Record(list(op.args), list(op.fields.get("imm", ())), op.fields)
    for f in op.row.wire:
        FIELDS[f][1](out, rec)


def encode(c: Container) -> bytes:
    """The canonical bytes of a container (what Pie hashes)."""
    v2 = bool(c.externs)
    out = [MAGIC, struct.pack("<HHIIII", VERSION_EXTERN if v2 else VERSION, 0, len(c.names), len(c.channels),
                              len(c.ports), len(c.stages))]
    if v2:
        out.append(struct.pack("<I", len(c.externs)))
    for n in c.names:
        raw = n.encode("utf-8")
        out.append(struct.pack("<H", len(raw)) + raw)
    for ch in c.channels:
        out.append(bytes([CHAN_DTYPES.index(ch.dtype)]))
        _shape(out, ch.shape)
        out.append(struct.pack("<IBB", ch.capacity, HOST_ROLES.index(ch.host_role), int(ch.seeded)))
    for p in c.ports:
        out.append(bytes([PORTS.index(p.port)]))
        if p.const is None:
            out.append(struct.pack("<BI", 0, p.channel))
        else:
            dt, shape, data = p.const
            out.append(bytes([1, DTYPES.index(dt)]))
            _shape(out, shape)
            out.append(data)
    for stage, ops in c.stages:
        out.append(struct.pack("<BI", STAGES.index(stage), len(ops)))
        for op in ops:
            _encode_op(out, op)
    for name, d, chan in c.externs:
        out.append(struct.pack("<HBI", name, ("import", "export").index(d), chan))
    return b"".join(out)
