"""eta -> PTIR: `prog.to_ptir()`, for programs whose ops Pie's op table has (one reverse rule per eta op).

A program that came from a PTIR container (ptir.load) carries the decoded container and
re-encodes it, so PTIR -> eta -> PTIR gives back the same bytes: Pie's composites
(pivot_threshold, mask_apply_packed, its RNG) have no single eta op to come back from.
A traced eta program maps op by op; the first op without a PTIR equivalent is a
ValidationError naming it and saying why.
"""

from __future__ import annotations

from ..errors import ValidationError
from .wire import BY_NAME, Channel, Container, Op, encode

DTYPE = {"f32": "f32", "i32": "i32", "u32": "u32", "bool": "bool"}
SAME = {"neg": "neg", "abs_": "abs", "recip": "recip", "exp": "exp", "log": "log", "sign": "sign",
        "add": "add", "sub": "sub", "mul": "mul", "rem": "rem", "maximum": "max_elem", "minimum": "min_elem",
        "eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "and_": "and", "or_": "or",
        "not_": "not", "select": "select", "reduce_sum": "reduce_sum", "reduce_max": "reduce_max",
        "reduce_min": "reduce_min", "reduce_argmax": "reduce_argmax", "transpose": "transpose",
        "cumsum": "cumsum", "cumprod": "cumprod", "gather": "gather", "gather_row": "gather_row",
        "scatter_set": "scatter_set", "scatter_add": "scatter_add", "matmul": "matmul"}
WHY = {"rng": "eta's counter RNG is not Pie's RNG contract (draws would differ)",
       "input": "PTIR programs have no positional inputs (values enter through channels and intrinsics)",
       "div": "integer division by zero differs (eta: x, Pie: 0); only f32 division maps",
       "intrinsic": "a PTIR pass input is read whole, [rows, size]: only outputs(name) and output(0, name) of "
                    "'logits' and 'hidden' map"}


class _Out:
    def __init__(self):
        self.ops: list = []
        self.next = 0
        self.shapes: dict = {}  # PTIR value id -> shape

    def emit(self, name: str, args=(), **fields) -> int:
        self.ops.append(Op(name, tuple(args), fields))
        first = self.next
        self.next += BY_NAME[name].results
        return first


def _lacks(i: int, n, why: str = "") -> ValidationError:
    return ValidationError(f"to_ptir: node %{i} ({n.op}) has no PTIR equivalent"
                           f"{': ' + why if why else ' in Pie op table'}. Fix: express it with ops Pie has, or "
                           "run the program on piegpu")


def _broadcast(o: _Out, n, ins: list) -> int:
    src = o.shapes[ins[0]]
    lead = (1,) * (len(n.type.shape) - len(src))
    v = o.emit("reshape", ins, shape=lead + tuple(src)) if lead else ins[0]  # eta aligns right, Pie left
    return o.emit("broadcast", [v], shape=tuple(n.attr["shape"]))


def _top_k(o: _Out, n, ins: list) -> int:
    first = o.emit("top_k", ins, imm=(n.attr["k"],))
    return o.emit("cast", [first + 1], dtype="i32")  # Pie's indices are u32, its second result


def _intrinsic(o: _Out, n, ins: list) -> int | None:
    a = n.attr
    if a["name"] not in ("logits", "hidden") or a["index"] != 0:
        return None
    shape = tuple(a["shape"]) if len(a["shape"]) == 2 else (1,) + tuple(a["shape"])
    v = o.emit("intrinsic_val", intrinsic=a["name"], dtype="f32", shape=shape)
    return v if len(a["shape"]) == 2 else o.emit("reshape", [v], shape=tuple(a["shape"]))


# eta op -> PTIR rule: (output, node, operand ids) -> result id, or None when this use has no PTIR form.
REVERSE = {
    **{op: (lambda name: lambda o, n, ins: o.emit(name, ins))(name) for op, name in SAME.items()},
    "div": lambda o, n, ins: o.emit("div", ins) if n.type.dtype.name == "f32" else None,
    "const": lambda o, n, ins: o.emit("const", literal=(n.attr["dtype"].name, n.attr["bits"])),
    "cast": lambda o, n, ins: o.emit("cast", ins, dtype=n.attr["to"].name),
    "reshape": lambda o, n, ins: o.emit("reshape", ins, shape=tuple(n.attr["shape"])),
    "broadcast": _broadcast,
    "iota": lambda o, n, ins: o.emit("iota", imm=(n.attr["n"],)),
    "top_k_idx": _top_k,
    "intrinsic": _intrinsic,
    "chan_take": lambda o, n, ins: o.emit("chan_take", chan=n.attr["slot"]),
    "chan_read": lambda o, n, ins: o.emit("chan_read", chan=n.attr["slot"]),
    "chan_put": lambda o, n, ins: o.emit("chan_put", ins, chan=n.attr["slot"]),
}


def to_ptir(prog) -> bytes:
    """The PTIR container bytes of an eta program (ValidationError naming the first op Pie lacks)."""
    source = getattr(prog, "ptir_container", None)
    if source is not None:
        return encode(source)
    if prog.outputs:
        raise ValidationError(f"to_ptir: the program returns {len(prog.outputs)} output(s); a PTIR program "
                              "only puts into channels. Fix: put the results into channels instead of returning")
    o, ids = _Out(), {}
    for i, n in enumerate(prog.nodes):
        ins = [ids[j] for j in n.inputs]
        rule = REVERSE.get(n.op)
        ids[i] = rule(o, n, ins) if rule else None
        if ids[i] is None:
            raise _lacks(i, n, WHY.get(n.op, ""))
        if n.type is not None:
            o.shapes[ids[i]] = tuple(n.type.shape)
    channels = [Channel(DTYPE[t.dtype.name], tuple(t.shape), 1, "none", False) for t in prog.channels]
    return encode(Container(channels=channels, stages=[("epilogue", o.ops)]))
