"""A small writer of StableHLO ops in MLIR's generic syntax, over typed SSA values.

The generic form (`%3 = "stablehlo.add"(%1, %2) : (T, T) -> T`) is parsed the same
way by every MLIR version jaxlib has shipped, so the emitter needs no per-op printer
syntax. Inherent attributes are written in the attribute dictionary, which newer MLIR
moves into op properties by itself.
"""

from __future__ import annotations

import struct
from contextlib import contextmanager
from dataclasses import dataclass
from math import prod

from ..dtypes import DType, dtype
from ..kernel.cstyle import f32_repr

ELEMENT = {"f32": "f32", "i32": "i32", "u32": "ui32", "bool": "i1"}
COMPARE_TYPE = {"float": "FLOAT", "int": "SIGNED", "uint": "UNSIGNED", "bool": "UNSIGNED"}
F32, I32, U32, BOOL = dtype.f32, dtype.i32, dtype.u32, dtype.bool


def tensor_type(dt: DType, shape: tuple) -> str:
    """The MLIR tensor type of a dtype and shape, e.g. tensor<3x5xf32> or tensor<i1>."""
    return "tensor<" + "".join(f"{d}x" for d in shape) + ELEMENT[dt.name] + ">"


@dataclass(frozen=True)
class Val:
    """An SSA value: its name and tensor type."""

    name: str
    dtype: DType
    shape: tuple

    @property
    def type(self) -> str:
        """The MLIR type."""
        return tensor_type(self.dtype, self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return prod(self.shape)


def scalar_literal(value, dt: DType) -> str:
    """A dense-attribute literal; floats that are not plain decimals are written as exact hex bits."""
    if dt == F32:
        s = f32_repr(float(value))
        if "." in s and not any(c in s for c in "einfa"):
            return s
        return "0x%08X" % struct.unpack("<I", struct.pack("<f", float(value)))[0]
    if dt == BOOL:
        return "true" if value else "false"
    if dt == U32:
        return str(int(value) & 0xFFFFFFFF)
    return str(int(value))


def _i64s(xs) -> str:
    return "array<i64" + (": " + ", ".join(str(int(x)) for x in xs) if len(xs) else "") + ">"


class Builder:
    """Appends ops to a function body (or a region of one) and names their results."""

    def __init__(self):
        self.lines: list = []
        self.depth = 2
        self.count = 0

    def fresh(self) -> str:
        """A new SSA name (unique across regions: MLIR forbids shadowing)."""
        self.count += 1
        return f"%{self.count}"

    def _line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    # ---- the one generic op writer -------------------------------------------------------
    def op(self, name: str, operands: list, results: list, attrs: dict | None = None,
           regions: list | None = None) -> list:
        """Write `"stablehlo.<name>"(operands) ({regions}) {attrs} : (types) -> types`; returns result Vals."""
        res = self.fresh()
        outs = [Val(res if len(results) == 1 else f"{res}#{i}", dt, tuple(sh)) for i, (dt, sh) in enumerate(results)]
        lhs = res if len(results) == 1 else f"{res}:{len(results)}"
        args = ", ".join(v.name for v in operands)
        attr_s = (" {" + ", ".join(f"{k} = {v}" for k, v in attrs.items()) + "}") if attrs else ""
        in_t = ", ".join(v.type for v in operands)
        out_t = outs[0].type if len(outs) == 1 else "(" + ", ".join(v.type for v in outs) + ")"
        if not regions:
            self._line(f'{lhs} = "stablehlo.{name}"({args}){attr_s} : ({in_t}) -> {out_t}')
            return outs
        self._line(f'{lhs} = "stablehlo.{name}"({args}) ({{')
        for i, region in enumerate(regions):
            self.lines.extend(region)
            if i + 1 < len(regions):
                self._line("}, {")
        self._line(f"}}){attr_s} : ({in_t}) -> {out_t}")
        return outs

    @contextmanager
    def region(self, arg_types: list, out: list):
        """Build a one-block region with scalar-tensor arguments; the body must call `ret`."""
        outer = self.lines
        self.lines = []
        self.depth += 1
        args = [Val(self.fresh(), dt, ()) for dt in arg_types]
        head = ", ".join(f"{a.name}: {a.type}" for a in args)
        self._line(f"^bb0({head}):")
        self.depth += 1
        try:
            yield args
        finally:
            self.depth -= 2
            out.extend(self.lines)
            self.lines = outer

    def ret(self, vals: list) -> None:
        """The terminator of a region."""
        self._line(f'"stablehlo.return"({", ".join(v.name for v in vals)}) : '
                   f'({", ".join(v.type for v in vals)}) -> ()')

    def body(self, arg_types: list, fn) -> list:
        """The lines of a region whose results are fn(*args)."""
        lines: list = []
        with self.region(arg_types, lines) as args:
            res = fn(*args)
            self.ret(list(res) if isinstance(res, (tuple, list)) else [res])
        return lines

    # ---- elementwise -------------------------------------------------------------------------
    def const(self, value, dt: DType, shape: tuple = ()) -> Val:
        """A splat constant."""
        t = tensor_type(dt, shape)
        return self.op("constant", [], [(dt, shape)], {"value": f"dense<{scalar_literal(value, dt)}> : {t}"})[0]

    def ew(self, name: str, *xs: Val, dt: DType | None = None) -> Val:
        """An elementwise op; the result has the first operand's shape and `dt` or its dtype."""
        return self.op(name, list(xs), [(dt or xs[0].dtype, xs[0].shape)])[0]

    def splat_like(self, value, x: Val, dt: DType | None = None) -> Val:
        """A constant with x's shape."""
        return self.const(value, dt or x.dtype, x.shape)

    def compare(self, a: Val, b: Val, direction: str) -> Val:
        """a <direction> b with the comparison type of a's dtype (FLOAT compares are IEEE: NaN is unordered)."""
        attrs = {"comparison_direction": f"#stablehlo<comparison_direction {direction}>",
                 "compare_type": f"#stablehlo<comparison_type {COMPARE_TYPE[a.dtype.kind]}>"}
        return self.op("compare", [a, b], [(BOOL, a.shape)], attrs)[0]

    def select(self, c: Val, a: Val, b: Val) -> Val:
        """c ? a : b."""
        return self.op("select", [c, a, b], [(a.dtype, a.shape)])[0]

    def convert(self, x: Val, dt: DType) -> Val:
        """Value conversion."""
        return x if x.dtype == dt else self.op("convert", [x], [(dt, x.shape)])[0]

    def bitcast(self, x: Val, dt: DType) -> Val:
        """Reinterpret the 32 bits."""
        return x if x.dtype == dt else self.op("bitcast_convert", [x], [(dt, x.shape)])[0]

    # ---- shapes -----------------------------------------------------------------------------------
    def reshape(self, x: Val, shape) -> Val:
        """Row-major reshape (no op when the shape is unchanged)."""
        shape = tuple(shape)
        return x if x.shape == shape else self.op("reshape", [x], [(x.dtype, shape)])[0]

    def broadcast_in_dim(self, x: Val, shape, dims) -> Val:
        """Broadcast x to `shape`, operand dim i becoming result dim dims[i]."""
        shape = tuple(shape)
        if x.shape == shape and list(dims) == list(range(len(shape))):
            return x
        return self.op("broadcast_in_dim", [x], [(x.dtype, shape)], {"broadcast_dimensions": _i64s(dims)})[0]

    def iota(self, dt: DType, shape, dim: int) -> Val:
        """0, 1, ... along `dim`."""
        return self.op("iota", [], [(dt, tuple(shape))], {"iota_dimension": f"{dim} : i64"})[0]

    def slice(self, x: Val, start, limit) -> Val:
        """x[start:limit] on every axis (stride 1)."""
        shape = tuple(b - a for a, b in zip(start, limit))
        if shape == x.shape:
            return x
        attrs = {"start_indices": _i64s(start), "limit_indices": _i64s(limit), "strides": _i64s([1] * len(start))}
        return self.op("slice", [x], [(x.dtype, shape)], attrs)[0]

    def pad(self, x: Val, fill: Val, low, high) -> Val:
        """Edge padding (negative amounts cut)."""
        shape = tuple(d + lo + hi for d, lo, hi in zip(x.shape, low, high))
        attrs = {"edge_padding_low": _i64s(low), "edge_padding_high": _i64s(high),
                 "interior_padding": _i64s([0] * len(low))}
        return self.op("pad", [x, fill], [(x.dtype, shape)], attrs)[0]

    def concatenate(self, xs: list, dim: int) -> Val:
        """Join along `dim`."""
        shape = list(xs[0].shape)
        shape[dim] = sum(x.shape[dim] for x in xs)
        return self.op("concatenate", xs, [(xs[0].dtype, tuple(shape))], {"dimension": f"{dim} : i64"})[0]

    def transpose(self, x: Val, perm) -> Val:
        """Permute the axes."""
        shape = tuple(x.shape[p] for p in perm)
        return self.op("transpose", [x], [(x.dtype, shape)], {"permutation": _i64s(perm)})[0]

    # ---- structured ops ------------------------------------------------------------------------
    def reduce(self, xs: list, inits: list, dim: int, fn) -> list:
        """Reduce `dim` away; fn(acc..., x...) -> new accs (scalar Vals) is the region body."""
        region = self.body([v.dtype for v in xs] * 2, fn)
        shape = tuple(d for i, d in enumerate(xs[0].shape) if i != dim)
        return self.op("reduce", xs + inits, [(x.dtype, shape) for x in xs], {"dimensions": _i64s([dim])},
                       [region])

    def prefix_scan(self, x: Val, init: Val, fn) -> Val:
        """Inclusive scan of the last axis: a reduce_window over everything up to each element."""
        r, n = len(x.shape), x.shape[-1]
        pad = ", ".join(["[0, 0]"] * (r - 1) + [f"[{n - 1}, 0]"])
        ones = [1] * r
        attrs = {"window_dimensions": _i64s(ones[:-1] + [n]), "window_strides": _i64s(ones),
                 "base_dilations": _i64s(ones), "window_dilations": _i64s(ones),
                 "padding": f"dense<[{pad}]> : tensor<{r}x2xi64>"}
        region = self.body([x.dtype, x.dtype], fn)
        return self.op("reduce_window", [x, init], [(x.dtype, x.shape)], attrs, [region])[0]

    def sort(self, xs: list, dim: int, fn) -> list:
        """Sort along `dim`; fn(lhs0, rhs0, lhs1, rhs1, ...) -> i1 'lhs goes first'."""
        region = self.body([t for x in xs for t in (x.dtype, x.dtype)], fn)
        return self.op("sort", xs, [(x.dtype, x.shape) for x in xs],
                       {"dimension": f"{dim} : i64", "is_stable": "true"}, [region])

    def gather_rows(self, src: Val, rows: Val) -> Val:
        """src[rows[j], :] for a 2-D src and in-range i32 rows[m]: a [m, inner] tensor."""
        m, inner = rows.shape[0], src.shape[1]
        ind = self.reshape(rows, [m, 1])
        attrs = {"dimension_numbers": "#stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], "
                                      "start_index_map = [0], index_vector_dim = 1>",
                 "slice_sizes": _i64s([1, inner]), "indices_are_sorted": "false"}
        return self.op("gather", [src, ind], [(src.dtype, (m, inner))], attrs)[0]

    def scatter_rows(self, dst: Val, rows: Val, updates: Val, fn) -> Val:
        """dst[rows[j], :] = fn(dst[rows[j], :], updates[j, :]) for a 2-D dst and in-range i32 rows[m]."""
        ind = self.reshape(rows, [rows.shape[0], 1])
        region = self.body([dst.dtype, dst.dtype], fn)
        attrs = {"scatter_dimension_numbers": "#stablehlo.scatter<update_window_dims = [1], "
                                              "inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], "
                                              "index_vector_dim = 1>",
                 "indices_are_sorted": "false", "unique_indices": "false"}
        return self.op("scatter", [dst, ind, updates], [(dst.dtype, dst.shape)], attrs, [region])[0]

    def dot(self, a: Val, b: Val) -> Val:
        """a[m, k] @ b[k, n] at full f32 precision."""
        attrs = {"dot_dimension_numbers": "#stablehlo.dot<lhs_contracting_dimensions = [1], "
                                          "rhs_contracting_dimensions = [0]>",
                 "precision_config": "[#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]"}
        return self.op("dot_general", [a, b], [(F32, (a.shape[0], b.shape[1]))], attrs)[0]
