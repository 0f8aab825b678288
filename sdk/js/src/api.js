// The core eta ops as functions (piegpu/eta/api.py), camelCase where Python uses snake_case.

import { ValidationError } from "./errors.js";
import { GroupOp, OPS } from "./ops.js";
import { Tensor, binary, broadcastShapes, current, expand, floordiv, toTensor } from "./tracer.js";
import { checkShape, describe, sameShape, toDType } from "./types.js";

/** The JS name of a Python op or function name: snake_case -> camelCase, trailing "_" dropped (abs_ -> abs). */
export function jsName(py) {
  return py.replace(/_+$/, "").replace(/_([a-z])/g, (_, c) => c.toUpperCase());
}

function unaryFn(op) {
  return (x) => {
    x = toTensor(x, null, op);
    return x._b.add(op, [x]);
  };
}

const binaryFn = (op) => (a, b) => binary(op, a, b);

/** Python name -> function, for every elementwise op of the table and the reductions and scans. */
export const GENERATED = {};
for (const op of GroupOp.UNARY) GENERATED[op] = unaryFn(op);
for (const op of GroupOp.BINARY) GENERATED[op] = binaryFn(op);
for (const op of [...GroupOp.REDUCE, ...GroupOp.SCAN]) GENERATED[op] = unaryFn(op);

export const {
  neg, abs_: abs, sign, recip, exp, log, sqrt, rsqrt, sin, cos, tanh, floor, isnan, isinf, not_: not, bit_not: bitNot,
  add, sub, mul, div, rem, maximum, minimum, pow, eq, ne, lt, le, gt, ge, and_: and, or_: or,
  bit_and: bitAnd, bit_or: bitOr, bit_xor: bitXor, shl, shr,
  reduce_sum: reduceSum, reduce_max: reduceMax, reduce_min: reduceMin, reduce_argmax: reduceArgmax,
  reduce_argmin: reduceArgmin, cumsum, cumprod,
} = GENERATED;

export { floordiv };

/** Elementwise cond ? ifTrue : ifFalse, with broadcasting. */
export function select(cond, ifTrue, ifFalse) {
  const c = toTensor(cond, null, "select");
  const like = ifTrue instanceof Tensor ? ifTrue : ifFalse instanceof Tensor ? ifFalse : null;
  const a = toTensor(ifTrue, like, "select");
  const b = toTensor(ifFalse, like === null ? a : like, "select");
  const shape = broadcastShapes("select", broadcastShapes("select", c.shape, a.shape), b.shape);
  return c._b.add("select", [expand(c, shape), expand(a, shape), expand(b, shape)]);
}

/** Convert to dtype `to` (f32 -> int truncates and saturates, NaN -> 0; bool -> 0/1; number -> bool is x != 0). */
export function cast(x, to) {
  x = toTensor(x, null, "cast");
  to = toDType(to, "cast");
  return x.dtype === to ? x : x._b.add("cast", [x], { to });
}

/** Reinterpret the 32 bits of each element as dtype `to`. */
export function bitcast(x, to) {
  x = toTensor(x, null, "bitcast");
  to = toDType(to, "bitcast");
  return x.dtype === to ? x : x._b.add("bitcast", [x], { to });
}

/** Same elements in row-major order, new static shape. */
export function reshape(x, shape) {
  x = toTensor(x, null, "reshape");
  shape = checkShape("reshape", shape);
  return sameShape(x.shape, shape) ? x : x._b.add("reshape", [x], { shape });
}

/** Broadcast a tensor or literal to `shape` (right-aligned; source dims 1 or equal). */
export function broadcast(x, shape) {
  shape = checkShape("broadcast", shape);
  x = toTensor(x, null, "broadcast");
  return sameShape(x.shape, shape) ? x : x._b.add("broadcast", [x], { shape });
}

/** Swap the two axes of a rank-2 tensor. */
export function transpose(x) {
  x = toTensor(x, null, "transpose");
  return x._b.add("transpose", [x]);
}

/** u32 [n]: 0, 1, ..., n-1. */
export function iota(n) {
  return current().add("iota", [], { n });
}

/** Join tensors along the last axis. */
export function concat(xs) {
  if (!Array.isArray(xs) || !xs.length || !xs.every((x) => x instanceof Tensor)) {
    throw new ValidationError("concat: pass a non-empty array of traced tensors. Fix: concat([a, b])");
  }
  return xs.length === 1 ? xs[0] : xs[0]._b.add("concat", xs);
}

function staticInt(op, what, v) {
  if (!Number.isInteger(v)) {
    throw new ValidationError(`${op}: ${what} must be a static integer, got ${describe(v)}. Fix: pass a constant such as 2`);
  }
  return v;
}

/** x[..., start:start+size] along the last axis (static bounds). */
export function sliceLast(x, start, size) {
  x = toTensor(x, null, "slice_last");
  staticInt("slice_last", "start", start);
  staticInt("slice_last", "size", size);
  if (start === 0 && x.shape.length && size === x.shape[x.shape.length - 1]) return x;
  return x._b.add("slice_last", [x], { start, size });
}

// An op of two tensors taken as they are: no broadcasting or dtype promotion (unlike binary()),
// the op's type rule checks their shapes and dtypes.
function twoInputs(op, a, b) {
  a = toTensor(a, null, op);
  b = toTensor(b, null, op);
  return a._b.add(op, [a, b]);
}

/** src[idx] along axis 0: shape idx.shape + src.shape[1:]; out-of-range rows read 0. */
export function gather(src, idx) {
  return twoInputs("gather", src, idx);
}

/** out[i] = src[i, idx[i]] for src[m, n], idx[m]; out of range reads 0. */
export function gatherRow(src, idx) {
  return twoInputs("gather_row", src, idx);
}

/** out[..., j] = src[..., idx[..., j]] along the last axis; out of range reads 0. */
export function takeLast(src, idx) {
  return twoInputs("take_last", src, idx);
}

function scatter(op, dst, idx, vals) {
  dst = toTensor(dst, null, op);
  idx = toTensor(idx, null, op);
  vals = toTensor(vals, dst, op);
  const want = [...idx.shape, ...dst.shape.slice(1)];
  if (!sameShape(vals.shape, want) && vals.dtype === dst.dtype) {
    try {
      vals = expand(vals, broadcastShapes(op, vals.shape, want));
    } catch (e) {
      if (!(e instanceof ValidationError)) throw e; // the type rule gives the clear message
    }
  }
  return dst._b.add(op, [dst, idx, vals]);
}

/** dst with rows idx[j] (axis 0) replaced by vals[j]; last write wins; out-of-range skipped. */
export const scatterSet = (dst, idx, vals) => scatter("scatter_set", dst, idx, vals);
/** dst with vals[j] added into rows idx[j] (axis 0); out-of-range skipped. */
export const scatterAdd = (dst, idx, vals) => scatter("scatter_add", dst, idx, vals);

/** [values, indices] of the k largest along the last axis, descending; ties -> lower index. */
export function topK(x, k) {
  x = toTensor(x, null, "top_k");
  if (!Number.isInteger(k)) {
    throw new ValidationError(`top_k: k must be a static integer, got ${describe(k)}. Fix: pass a constant such as 40`);
  }
  const idx = x._b.add("top_k_idx", [x], { k });
  return [takeLast(x, idx), idx];
}

/** [values, indices] of the whole last axis in descending order; ties -> lower index first. */
export function sortDesc(x) {
  x = toTensor(x, null, "sort_desc");
  if (!x.shape.length) throw new ValidationError("sort_desc: cannot sort a rank-0 tensor. Fix: reshape(x, [1])");
  return topK(x, x.shape[x.shape.length - 1]);
}

/** f32 matrix product a[m, k] @ b[k, n]. */
export function matmul(a, b) {
  return twoInputs("matmul", a, b);
}

/** Uniform f32 in (0, 1) of `shape`; a pure function of state = u32[2] [key, counter] and the index. */
export function rng(state, shape) {
  state = toTensor(state, null, "rng");
  return state._b.add("rng", [state], { shape: checkShape("rng", shape) });
}

/** Standard Gumbel noise -log(-log(u)) with u = rng(state, shape). */
export function gumbel(state, shape) {
  const u = rng(state, shape);
  return neg(log(neg(log(u))));
}

/** Python name -> JS function, for every op-table op a function records (top_k_idx through topK). */
export const OP_FUNCTIONS = Object.freeze({
  ...GENERATED, select, cast, bitcast, reshape, broadcast, transpose, iota, concat, slice_last: sliceLast,
  gather, gather_row: gatherRow, take_last: takeLast, scatter_set: scatterSet, scatter_add: scatterAdd,
  top_k_idx: topK, matmul, rng,
});

export { OPS };
