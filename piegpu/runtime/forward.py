"""ForwardPass: what one pass embeds, which state it extends, which logits it reads out, and its epilogue."""

from __future__ import annotations

import numpy as np

from .channel import Channel
from ..dtypes import dtype
from ..errors import ValidationError


class StateGeometry:
    """How a pass changes its working sets' KV state."""

    def __init__(self, kind: str):
        self.kind = kind
        self.channel: Channel | None = None

    def __repr__(self) -> str:
        return f"StateGeometry.{self.kind}()"

    @staticmethod
    def folding() -> "StateGeometry":
        """Append every embedded token to the sequence (prefill and decode)."""
        return StateGeometry("folding")

    @staticmethod
    def accepting() -> "StateGeometry":
        """The epilogue decides on the device how many embedded tokens stay: call geometry.keep(n).

        For speculative verification: a pass embeds the pending token plus k drafts and
        keeps accepted + 1 of them; the KV length advances on the device. The host's view
        of the length is an upper bound until it learns the count (ws.note_length).
        """
        g = StateGeometry("accepting")
        g.channel = Channel([1], dtype.u32).named("kept-tokens")
        return g

    def keep(self, n) -> None:
        """Inside the epilogue of an accepting pass: keep the first n embedded tokens (clamped to the pass)."""
        if self.kind != "accepting":
            raise ValidationError(f"keep(n) is only for StateGeometry.accepting() passes, not {self!r}. "
                                  "Fix: fwd.state([ws], StateGeometry.accepting()) for passes that keep a count")
        from .. import eta
        t = eta.api.to_tensor(n, None, "keep")
        if t.dtype not in (dtype.i32, dtype.u32) or t.size != 1:
            raise ValidationError(f"keep(n): n must be one i32/u32 value, got {t.type!r}. "
                                  "Fix: cast(reshape(n, [1]), dtype.u32)")
        self.channel.put(eta.reshape(eta.cast(t, dtype.u32), [1]))


class ForwardPass:
    """One forward pass: tokens embedded from a channel, the KV state it appends to, its epilogue."""

    def __init__(self):
        self.tokens: Channel | None = None
        self.indptr: Channel | None = None
        self.working_sets: list = []
        self.geometry: StateGeometry | None = None
        self.readout_rows: tuple | None = None  # (first, count) or None for the last token
        self.epilogue_fn = None

    def embed(self, tokens: Channel, indptr: Channel) -> "ForwardPass":
        """Embed the token ids of `tokens`' oldest cell (taken each pass); `indptr` = CSR offsets, read only."""
        if not isinstance(tokens, Channel) or not isinstance(indptr, Channel):
            raise ValidationError("embed(tokens, indptr) takes two Channels. Fix: Channel.from_(ids, dtype.i32) and "
                                  "Channel.from_([0, len(ids)], dtype.u32)")
        if tokens.dtype not in (dtype.i32, dtype.u32) or len(tokens.shape) != 1:
            raise ValidationError(f"embed: the tokens channel must hold i32/u32 cells of shape [n], got "
                                  f"{tokens.cell!r}. Fix: Channel([n], dtype.i32)")
        if indptr.dtype not in (dtype.i32, dtype.u32) or len(indptr.shape) != 1 or indptr.shape[0] < 2:
            raise ValidationError(f"embed: indptr must hold u32 cells [sequences + 1], got {indptr.cell!r}. "
                                  "Fix: Channel.from_([0, n], dtype.u32)")
        self.tokens, self.indptr = tokens, indptr
        return self

    def state(self, working_sets, geometry: StateGeometry) -> "ForwardPass":
        """The working sets (one per sequence) this pass extends, and how."""
        working_sets = list(working_sets)
        if not working_sets:
            raise ValidationError("state([...]): no working set given. Fix: fwd.state([model.working_set()], "
                                  "StateGeometry.folding())")
        if not isinstance(geometry, StateGeometry):
            raise ValidationError(f"state(ws, geometry): geometry is {geometry!r}, not a StateGeometry. "
                                  "Fix: pass StateGeometry.folding() or StateGeometry.accepting()")
        self.working_sets, self.geometry = working_sets, geometry
        return self

    def readout(self, count: int = 1, first: int | None = None) -> "ForwardPass":
        """Compute logits for `count` token rows starting at `first` (default: the last `count` tokens)."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValidationError(f"readout(count={count!r}): count must be an int >= 1. "
                                  "Fix: fwd.readout(1) reads out the last embedded token")
        self.readout_rows = (first, count)
        return self

    def epilogue(self, fn):
        """Decorator: the traced function run on the device after the forward pass (traced at first submit)."""
        if not callable(fn):
            raise ValidationError(f"@fwd.epilogue got {fn!r}, which is not callable. Fix: decorate a function "
                                  "(def _(): ...)")
        self.epilogue_fn = fn
        return fn

    def epilogue_program(self, prog, channels: dict | None = None):
        """A decoded eta container (from any tracer: Python, JS, Rust) as this pass's epilogue.

        `channels` binds each channel the container declares, by name, to a Channel of the same
        cell type: {"token_in": ch, ...}. A missing, extra or mistyped binding is a ValidationError.
        """
        prog = as_program(prog, "epilogue_program")
        if prog.input_types:
            raise ValidationError(f"epilogue_program: the program takes {len(prog.input_types)} positional "
                                  f"input(s) {[repr(t) for t in prog.input_types]}, but an epilogue gets none (it "
                                  "reads intrinsics and channels). Fix: trace it without inputs, reading the logits "
                                  "with intrinsics.output(0); a (logits, state) -> token sampler container goes to "
                                  "model.generate(..., sampler=prog)")
        bound = bind_channels(prog, channels or {}, "epilogue_program")

        def replay():
            return inline_program(prog, (), bound)

        replay.__qualname__ = f"program {prog.hash[:12]}"
        self.epilogue_fn = replay
        return prog

    # ---- checks the pipeline runs before the first submit -------------------------------------
    def token_count(self) -> int:
        """Tokens embedded per pass (the tokens channel's cell length)."""
        if self.tokens is None:
            raise ValidationError("this ForwardPass embeds nothing. Fix: fwd.embed(tokens_channel, indptr_channel)")
        return self.tokens.shape[0]

    def resolved_readout(self) -> tuple:
        """(first, count) readout rows inside the tokens of a one-sequence pass."""
        T = self.token_count()
        first, count = self.readout_rows or (None, 1)
        first = T - count if first is None else first
        if first < 0 or first + count > T:
            raise ValidationError(f"readout rows [{first}, {first + count}) are outside this pass's {T} tokens. "
                                  f"Fix: fwd.readout(count, first) with first + count <= {T}")
        return first, count

    def sequences(self) -> list:
        """[(first token, tokens)] of each sequence in the pass, from indptr's cell."""
        T, B = self.token_count(), len(self.working_sets)
        value = self.indptr.host_value()
        if value is None:
            if B == 1:
                return [(0, T)]
            raise ValidationError(f"this pass over {B} sequences needs its indptr offsets on the host, to plan "
                                  "each sequence's dispatches. Fix: Channel.from_([0, n0, n0 + n1, ...], dtype.u32)")
        return sequences_of(value, T, B)

    def readout_of(self, seqs: list) -> list:
        """[(first row, rows)] read out of each sequence, as token rows of the pass (sequence by sequence)."""
        if len(seqs) == 1:
            return [self.resolved_readout()]
        return readout_rows_of(seqs, self.readout_rows)

    def validate(self) -> None:
        """Raise ValidationError if the pass is not fully described or not supported."""
        self.token_count()
        if not self.working_sets:
            raise ValidationError("this ForwardPass has no state. Fix: fwd.state([ws], StateGeometry.folding())")
        B = len(self.working_sets)
        for i, ws in enumerate(self.working_sets):
            j = next(j for j, other in enumerate(self.working_sets) if other is ws)
            if j != i:
                raise ValidationError(f"sequences {j} and {i} of this pass are the same working set. Fix: one range "
                                      "of tokens per working set per pass (ws.fork() makes a copy to run beside it)")
            if ws.model is not self.working_sets[0].model:
                raise ValidationError(f"sequence {i}'s working set belongs to another model than sequence 0's. "
                                      "Fix: working sets of the model the pipeline runs")
        if B > 1 and self.geometry.kind == "accepting":
            raise ValidationError("StateGeometry.accepting() passes over several sequences are not supported. "
                                  "Fix: one accepting pass per working set")
        self.readout_of(self.sequences())


def sequences_of(offsets, T: int, B: int) -> list:
    """[(first token, tokens)] per sequence from B + 1 CSR offsets over T tokens (ValidationError naming the fault)."""
    offsets = np.asarray(offsets).astype(np.int64).reshape(-1).tolist()
    if len(offsets) != B + 1:
        raise ValidationError(f"indptr holds {len(offsets)} offsets but the pass has {B} working set(s). "
                              f"Fix: {B + 1} offsets, one range of tokens per working set")
    if offsets[0] != 0 or offsets[-1] != T:
        raise ValidationError(f"indptr {offsets} does not describe the {T} embedded tokens of this pass: the "
                              f"offsets must start at 0 and end at {T}. Fix: Channel.from_([0, ..., {T}], dtype.u32)")
    for i in range(B):
        if offsets[i + 1] <= offsets[i]:
            raise ValidationError(f"indptr {offsets}: sequence {i} has {offsets[i + 1] - offsets[i]} tokens. "
                                  "Fix: every sequence of a pass embeds at least one token (leave the others out "
                                  "of the pass)")
    return [(offsets[i], offsets[i + 1] - offsets[i]) for i in range(B)]


def readout_rows_of(seqs: list, spec: tuple | None) -> list:
    """[(first row, rows)] per sequence for fwd.readout(count, first) (`spec`; None: each sequence's last token)."""
    first, count = spec or (None, 1)
    out = []
    for i, (start, n) in enumerate(seqs):
        f = n - count if first is None else first
        if f < 0 or f + count > n:
            raise ValidationError(f"sequence {i} embeds {n} tokens, so readout rows [{f}, {f + count}) of it do "
                                  f"not exist. Fix: fwd.readout(count, first) within every sequence's tokens")
        out.append((start + f, count))
    return out


def as_program(prog, where: str):
    """`prog` as an eta.Program: a Program, or eta or Pie PTIR container bytes (decoded and validated).

    The one place that tells the container formats apart by their magic bytes.
    """
    from ..eta.program import MAGIC, Program
    from ..ptir import MAGIC as PTIR_MAGIC
    from ..ptir import load as load_ptir
    if isinstance(prog, (bytes, bytearray, memoryview)):
        data = bytes(prog)
        if data.startswith(PTIR_MAGIC):
            return load_ptir(data)
        if not data.startswith(MAGIC):
            raise ValidationError(f"{where}: the bytes start with {data[:8]!r}, which is neither an eta container "
                                  f"(magic {MAGIC!r}) nor a Pie PTIR container (magic {PTIR_MAGIC!r}). Fix: pass "
                                  "the bytes of Program.to_bytes(), of a JS/Rust tracer, or of Pie's "
                                  "TraceContainer::encode")
        return Program.from_bytes(data)
    if not isinstance(prog, Program):
        raise ValidationError(f"{where}: expected an eta.Program or container bytes, got {type(prog).__name__}. "
                              "Fix: eta.Program.from_bytes(open('x.eta', 'rb').read())")
    return prog


def bind_channels(prog, channels: dict, where: str) -> list:
    """slot -> Channel for each channel `prog` declares, from a {name: Channel} mapping (ValidationError if off)."""
    if not isinstance(channels, dict):
        raise ValidationError(f"{where}: channels must be a dict {{name: Channel}}, got {type(channels).__name__}")
    names = list(prog.channel_names)
    missing = [n for n in names if n not in channels]
    extra = sorted(set(channels) - set(names), key=str)
    if missing:
        raise ValidationError(f"{where}: the program uses channel(s) {missing} but channels= binds no such "
                              f"name. Fix: channels={{{', '.join(repr(n) + ': ch' for n in names)}}}")
    if extra:
        raise ValidationError(f"{where}: channels= binds {extra}, which the program does not declare (it "
                              f"declares {names}). Fix: drop them, or check the names the tracer gave")
    bound = []
    for name, cell in zip(names, prog.channels):
        ch = channels[name]
        if not isinstance(ch, Channel):
            raise ValidationError(f"{where}: channels[{name!r}] is {type(ch).__name__}, not a Channel. "
                                  f"Fix: Channel({list(cell.shape)}, dtype.{cell.dtype.name})")
        if ch.cell != cell:
            raise ValidationError(f"{where}: channel {name!r} holds {ch.cell!r} cells but the program declares "
                                  f"it {cell!r}. Fix: bind a Channel({list(cell.shape)}, dtype.{cell.dtype.name})")
        if any(ch is c for c in bound):
            raise ValidationError(f"{where}: one Channel is bound to two names of the program. Fix: one Channel "
                                  "per name")
        bound.append(ch)
    return bound


def inline_program(prog, args=(), channels=()) -> list:
    """Record `prog`'s nodes into the trace in progress; returns its outputs.

    Positional inputs come from `args`, channel slot k is `channels[k]`, intrinsics are the
    pass's own (their types must match). A decoded container thus becomes part of an epilogue.
    """
    from ..eta import intrinsics
    from ..eta.tracer import current
    types = list(prog.input_types)
    if len(args) != len(types) or any(a.type != t for a, t in zip(args, types)):
        got = [getattr(a, "type", a) for a in args]
        raise ValidationError(f"the program takes inputs {types}, got {got}. Fix: pass tensors of those types")
    b = current()
    vals: dict = {}
    for i, n in enumerate(prog.nodes):
        a = n.attr
        if n.op == "input":
            vals[i] = args[a["index"]]
        elif n.op == "chan_take":
            vals[i] = channels[a["slot"]].take()
        elif n.op == "chan_read":
            vals[i] = channels[a["slot"]].read()
        elif n.op == "chan_put":
            channels[a["slot"]].put(vals[n.inputs[0]])
        elif n.op == "intrinsic":
            t = intrinsics.outputs(a["name"]) if len(n.type.shape) == 2 else intrinsics.output(a["index"], a["name"])
            if t.type != n.type:
                raise ValidationError(f"the program reads intrinsic {a['name']!r} row {a['index']} as {n.type!r}, "
                                      f"but this pass provides {t.type!r}. Fix: trace it for this model "
                                      f"(vocab {intrinsics.vocab()}, {intrinsics.readouts()} readout row(s))")
            vals[i] = t
        else:
            vals[i] = b.add(n.op, [vals[j] for j in n.inputs], **a)
    return [vals[j] for j in prog.outputs]
