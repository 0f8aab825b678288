// The eta op table: the rows of piegpu/eta/ops.py (from optable.json) with their type rules.
//
// Elementwise, reduce and scan ops whose inputs share one dtype take their dtype rule as
// data from the export (probed from the Python rules); every other op has a rule below,
// written after ops.py. A test fails when a row lacks a rule.

import { dtype, TABLE, TType, checkShape, sameShape, describe } from "./types.js";
import { ValidationError, fail } from "./errors.js";

const RULES = {};

function need(op, t, pred, what, fix) {
  if (!pred(t.dtype)) fail(op, `needs ${what} input, got ${t}`, fix);
}

function sameTypes(op, ins) {
  const first = ins[0];
  for (const t of ins.slice(1)) {
    if (t.dtype !== first.dtype) {
      fail(op, `dtype mismatch ${first} vs ${t}`, "cast one side with cast(x, dtype) so both have the same dtype");
    }
    if (!sameShape(t.shape, first.shape)) {
      fail(op, `shape mismatch ${first} vs ${t} (core ops take equal shapes)`,
        "broadcast(x, shape) first; the tensor methods (x.add(y), ...) broadcast automatically");
    }
  }
}

/** A rule from the exported dtype table: input dtype -> result dtype, or the Python rule's message. */
function tableRule(row) {
  const r = row.dtype_rule;
  const check = (op, t) => {
    const out = r.result[t.dtype.name];
    if (out == null) fail(op, `needs ${r.needs} input, got ${t}`, r.fix);
    return dtype[out];
  };
  if (row.kind === "reduce") {
    return (op, [x]) => {
      if (!x.shape.length) fail(op, `cannot reduce a rank-0 tensor ${x}`, "reshape(x, [1]) first");
      return new TType(check(op, x), x.shape.slice(0, -1));
    };
  }
  if (row.kind === "scan") {
    return (op, [x]) => {
      if (!x.shape.length) fail(op, `cannot scan a rank-0 tensor ${x}`, "reshape(x, [1]) first");
      check(op, x);
      return x;
    };
  }
  if (row.arity === 2) {
    return (op, ins) => {
      sameTypes(op, ins);
      return new TType(check(op, ins[0]), ins[0].shape);
    };
  }
  return (op, [x]) => new TType(check(op, x), x.shape);
}

const isBool = (d) => d.kind === "bool";
const isInt = (d) => d.kind === "int" || d.kind === "uint";
const isNum = (d) => d.kind !== "bool";

RULES.select = (op, [c, a, b]) => {
  need(op, c, isBool, "a bool condition", "compare first, e.g. gt(x, 0)");
  sameTypes(op, [a, b]);
  if (!sameShape(c.shape, a.shape)) fail(op, `condition shape ${c} differs from value shape ${a}`, "broadcast the condition");
  return new TType(a.dtype, a.shape);
};

RULES.cast = (op, [x], at) => new TType(at.to, x.shape);

RULES.bitcast = (op, [x], at) => {
  need(op, x, (d) => d.kind !== "bool", "a 32-bit numeric", "cast bools first");
  if (at.to.kind === "bool") fail(op, "cannot bitcast to bool", "use ne(x, 0)");
  return new TType(at.to, x.shape);
};

// ---- shape ops ----------------------------------------------------------------------------

export function broadcastOk(src, dst) {
  if (src.length > dst.length) return false;
  for (let i = 1; i <= src.length; i++) {
    const s = src[src.length - i], d = dst[dst.length - i];
    if (s !== 1 && s !== d) return false;
  }
  return true;
}

RULES.reshape = (op, [x], at) => {
  const shape = checkShape(op, at.shape);
  const n = shape.reduce((a, b) => a * b, 1);
  if (n !== x.size) {
    fail(op, `cannot reshape ${x} (${x.size} elements) to [${shape.join(", ")}] (${n})`, "keep the element count equal");
  }
  return new TType(x.dtype, shape);
};

RULES.broadcast = (op, [x], at) => {
  const shape = checkShape(op, at.shape);
  if (!broadcastOk(x.shape, shape)) {
    fail(op, `cannot broadcast ${x} to [${shape.join(", ")}]: each source dim (right-aligned) must be 1 or equal`,
      "reshape to insert size-1 dims where needed");
  }
  return new TType(x.dtype, shape);
};

RULES.transpose = (op, [x]) => {
  if (x.shape.length !== 2) fail(op, `transpose takes a rank-2 tensor, got ${x}`, "reshape to [m, n] first");
  return new TType(x.dtype, [x.shape[1], x.shape[0]]);
};

RULES.concat = (op, ins) => {
  const first = ins[0];
  if (!first.shape.length) fail(op, "cannot concat rank-0 tensors", "reshape them to [1]");
  for (const t of ins.slice(1)) {
    if (t.dtype !== first.dtype || t.shape.length !== first.shape.length
      || !sameShape(t.shape.slice(0, -1), first.shape.slice(0, -1))) {
      fail(op, `inputs ${first} and ${t} differ in dtype, rank or leading dims`,
        "concat joins along the last axis; match dtype and the other dims");
    }
  }
  const last = ins.reduce((s, t) => s + t.shape[t.shape.length - 1], 0);
  return new TType(first.dtype, [...first.shape.slice(0, -1), last]);
};

RULES.slice_last = (op, [x], { start, size }) => {
  if (!x.shape.length || start < 0 || size < 1 || start + size > x.shape[x.shape.length - 1]) {
    fail(op, `slice [${start}:${start + size}] out of range for ${x}`, "keep the slice inside the last axis");
  }
  return new TType(x.dtype, [...x.shape.slice(0, -1), size]);
};

// ---- indexing ----------------------------------------------------------------------------

function checkIndex(op, t) {
  if (!isInt(t.dtype)) fail(op, `indices must be i32 or u32, got ${t}`, "cast(idx, dtype.i32); float indices are not allowed");
}

RULES.gather = (op, [src, idx]) => {
  checkIndex(op, idx);
  if (!src.shape.length) fail(op, "gather needs a source of rank >= 1", "reshape the source to [n]");
  const shape = [...idx.shape, ...src.shape.slice(1)];
  checkShape(op, shape.length ? shape : [1]);
  return new TType(src.dtype, shape);
};

RULES.gather_row = (op, [src, idx]) => {
  checkIndex(op, idx);
  if (src.shape.length !== 2 || !sameShape(idx.shape, [src.shape[0]])) {
    fail(op, `gather_row takes src[m, n] and idx[m], got ${src} and ${idx}`, "reshape to those shapes");
  }
  return new TType(src.dtype, [src.shape[0]]);
};

RULES.take_last = (op, [src, idx]) => {
  checkIndex(op, idx);
  if (!src.shape.length || idx.shape.length !== src.shape.length
    || !sameShape(idx.shape.slice(0, -1), src.shape.slice(0, -1))) {
    fail(op, `take_last takes x[..., n] and idx[..., k] with equal leading dims, got ${src}, ${idx}`,
      "match the leading dimensions");
  }
  return new TType(src.dtype, idx.shape);
};

RULES.scatter_set = RULES.scatter_add = (op, [dst, idx, vals]) => {
  checkIndex(op, idx);
  if (!dst.shape.length) fail(op, "scatter needs a destination of rank >= 1", "reshape the destination to [n]");
  const want = [...idx.shape, ...dst.shape.slice(1)];
  if (vals.dtype !== dst.dtype || !sameShape(vals.shape, want)) {
    fail(op, `values ${vals} must be ${dst.dtype.name}[${want.join(", ")}] (idx shape + dst.shape[1:])`,
      "broadcast or cast the values");
  }
  if (op === "scatter_add" && !isNum(dst.dtype)) fail(op, `cannot add into ${dst}`, "use scatter_set for bool, or cast to i32");
  return dst;
};

// ---- ordering, linear algebra, randomness --------------------------------------------------

RULES.top_k_idx = (op, [x], { k }) => {
  if (!x.shape.length) fail(op, "top_k needs rank >= 1", "reshape to [n]");
  need(op, x, isNum, "a numeric (f32, i32, u32)", "cast bool inputs with cast(x, dtype.i32)");
  const n = x.shape[x.shape.length - 1];
  if (!(k >= 1 && k <= n)) fail(op, `k=${k} is outside 1..${n} for ${x}`, `pick k <= ${n}`);
  return new TType(dtype.i32, [...x.shape.slice(0, -1), k]);
};

RULES.matmul = (op, [a, b]) => {
  if (a.dtype !== dtype.f32 || b.dtype !== dtype.f32) fail(op, `matmul is f32 only, got ${a} @ ${b}`, "cast both to dtype.f32");
  if (a.shape.length !== 2 || b.shape.length !== 2 || a.shape[1] !== b.shape[0]) {
    fail(op, `matmul takes a[m, k] and b[k, n], got ${a} and ${b}`, "reshape or transpose");
  }
  return new TType(dtype.f32, [a.shape[0], b.shape[1]]);
};

RULES.rng = (op, [s], at) => {
  if (s.dtype !== dtype.u32 || !sameShape(s.shape, [2])) {
    fail(op, `state must be u32[2] = [key, counter], got ${s}`, "pass a u32 tensor of shape [2]");
  }
  return new TType(dtype.f32, checkShape(op, at.shape));
};

// ---- sources and effects ----------------------------------------------------------------

const source = (op, ins, at) => new TType(at.dtype, checkShape(op, at.shape));
RULES.input = RULES.intrinsic = RULES.chan_take = RULES.chan_read = source;
RULES.const = (op, ins, at) => new TType(at.dtype, []);
RULES.iota = (op, ins, { n }) => {
  if (!Number.isInteger(n) || n < 1) fail(op, `iota(n) needs an int n >= 1, got ${describe(n)}`, "pass a positive int");
  return new TType(dtype.u32, checkShape(op, [n]));
};
RULES.chan_put = () => null;

// ---- the table ------------------------------------------------------------------------------

/** name -> { name, kind, arity, attrs: [[name, kind]], runtime, expensive, infer } in op-table order. */
export const OPS = new Map();
for (const row of TABLE.ops) {
  const infer = row.dtype_rule ? tableRule(row) : RULES[row.name];
  OPS.set(row.name, Object.freeze({ ...row, infer }));
}

/** Op names by role (GroupOp of ops.py). */
export const GroupOp = Object.freeze(Object.fromEntries(
  Object.entries(TABLE.groups).map(([k, v]) => [k, Object.freeze(new Set(v))])));

/** The JS rule names, for the test that every op of the table has a rule. */
export const HAND_RULES = Object.freeze(Object.keys(RULES));

/** Run the type rule of op `name` (ValidationError with the op and the fix). */
export function infer(name, ins, attrs) {
  const def = OPS.get(name);
  if (!def) throw new ValidationError(`unknown op ${JSON.stringify(name)}. Fix: use one of ${[...OPS.keys()].sort().join(", ")}`);
  if (!def.infer) throw new ValidationError(`${name}: this SDK has no type rule for it. Fix: update sdk/js/src/ops.js`);
  if (def.arity !== null && ins.length !== def.arity) {
    fail(name, `takes ${def.arity} inputs, got ${ins.length}`, "pass the right number of tensors");
  }
  if (def.arity === null && !ins.length) fail(name, "takes at least one input", "pass an array of tensors");
  return def.infer(name, ins, attrs);
}
