// The tracer: a Tensor proxy that records every op into the active Builder (piegpu/eta/tracer.py).

import { TraceError, ValidationError } from "./errors.js";
import { OPS, GroupOp, infer } from "./ops.js";
import { Node, Program } from "./program.js";
import { DType, TType, checkChannelName, checkShape, describe, dtype, sameShape, toDType } from "./types.js";

let active = null;

/** The Builder of the trace in progress (TraceError outside trace()). */
export function current() {
  if (active === null) {
    throw new TraceError("eta ops only work on traced tensors inside trace(fn, ...specs). " +
      "Fix: call this from the traced function");
  }
  return active;
}

function attrKey(v) {
  if (v instanceof DType) return `d${v.code}`;
  if (Array.isArray(v)) return `s${v.join("x")}`;
  if (typeof v === "string") return `t${JSON.stringify(v)}`;
  return `i${v}`;
}

/** Collects the nodes of one trace; hash-conses identical nodes (as the Python Builder does). */
export class Builder {
  constructor(context = {}) {
    this.nodes = [];
    this.cons = new Map();
    this.channels = []; // slot -> Channel, in first-use order
    this.declared = new Map(); // name -> Channel
    this.takes = new Map();
    this.puts = new Map();
    this.context = context;
  }

  /** Type-check and record op(inputs, attrs); the result tensor (null for effects). */
  add(op, inputs = [], attrs = {}) {
    for (const t of inputs) {
      if (!(t instanceof Tensor)) {
        throw new TraceError(`${op}: expected a traced tensor, got ${describe(t)}. ` +
          "Fix: build values with eta ops inside the traced function");
      }
      if (t._b !== this) {
        throw new TraceError(`${op}: tensor ${t.type} belongs to another trace. ` +
          "Fix: do not reuse tensors across traces");
      }
    }
    const names = OPS.get(op).attrs.map(([n]) => n);
    const vals = names.map((n) => attrs[n]);
    const ty = infer(op, inputs.map((t) => t.type), attrs);
    const ids = inputs.map((t) => t._id);
    const key = `${op}|${ids.join(",")}|${vals.map(attrKey).join("|")}`;
    let idx = this.cons.get(key);
    if (idx === undefined) {
      idx = this.nodes.length;
      this.nodes.push(new Node(op, ids, vals, ty));
      this.cons.set(key, idx);
    }
    return ty === null ? null : new Tensor(this, idx, ty);
  }

  /** The program-local slot of a channel (assigned in first-use order). */
  slot(channel) {
    let i = this.channels.indexOf(channel);
    if (i < 0) {
      this.channels.push(channel);
      i = this.channels.length - 1;
    }
    return i;
  }

  /** Drop dead nodes, renumber, and build the Program. */
  finish(outputs) {
    const live = new Set();
    const stack = [];
    this.nodes.forEach((n, i) => { if (n.op === "input" || GroupOp.COMMITTED.has(n.op)) stack.push(i); });
    outputs.forEach((t) => stack.push(t._id));
    while (stack.length) {
      const i = stack.pop();
      if (live.has(i)) continue;
      live.add(i);
      stack.push(...this.nodes[i].inputs);
    }
    const remap = new Map();
    const nodes = [];
    this.nodes.forEach((n, i) => {
      if (!live.has(i)) return;
      remap.set(i, nodes.length);
      nodes.push(new Node(n.op, n.inputs.map((j) => remap.get(j)), n.attrs, n.type));
    });
    const channels = this.channels.map((c) => ({ name: c.name, type: c.cell }));
    return new Program(nodes, outputs.map((t) => remap.get(t._id)), channels);
  }
}

function misuse(what) {
  return function () {
    throw new TraceError(`${what} on a traced tensor ${this.type}: its value is not known while tracing. ` +
      "Fix: branch on tensor values with select(cond, ifTrue, ifFalse) and compare with methods " +
      "(x.gt(0), x.add(1)); JavaScript control flow only sees shapes and trace-time constants");
  };
}

/** A traced tensor: a handle to one node of the active trace, with static dtype and shape. */
export class Tensor {
  constructor(builder, idx, ty) {
    this._b = builder;
    this._id = idx;
    this.type = ty;
    Object.freeze(this);
  }

  get shape() { return this.type.shape; }
  get dtype() { return this.type.dtype; }
  get size() { return this.type.size; }
  get ndim() { return this.type.shape.length; }
  toString() { return `Tensor(%${this._id}: ${this.type})`; }

  [Symbol.toPrimitive](hint) {
    if (hint === "string") return this.toString();
    return misuse(hint === "number" ? "use as a number (+, <, Number(), ...)" : "use as a primitive (==, +, ...)").call(this);
  }

  // arithmetic: a binary op with broadcasting; numbers take the tensor's dtype
  add(o) { return binary("add", this, o); }
  sub(o) { return binary("sub", this, o); }
  mul(o) { return binary("mul", this, o); }
  div(o) { return binary("div", this, o); }
  floordiv(o) { return floordiv(this, o); }
  rem(o) { return binary("rem", this, o); }
  mod(o) { return binary("rem", this, o); }
  pow(o) { return binary("pow", this, o); }
  neg() { return this._b.add("neg", [this]); }
  abs() { return this._b.add("abs_", [this]); }
  lt(o) { return binary("lt", this, o); }
  le(o) { return binary("le", this, o); }
  gt(o) { return binary("gt", this, o); }
  ge(o) { return binary("ge", this, o); }
  eq(o) { return binary("eq", this, o); }
  ne(o) { return binary("ne", this, o); }
  /** Python's `&`: logical and of bools, bitwise and of integers. */
  and(o) { return binary(logic("and_", this, o), this, o); }
  /** Python's `|`: logical or of bools, bitwise or of integers. */
  or(o) { return binary(logic("or_", this, o), this, o); }
  /** Python's `^`: bitwise xor of integers, `ne` otherwise. */
  xor(o) { return binary(this.dtype.isInt ? "bit_xor" : "ne", this, o); }
  shl(o) { return binary("shl", this, o); }
  shr(o) { return binary("shr", this, o); }
  /** Python's `~`: bitwise not of integers, logical not of bools. */
  not() { return this._b.add(this.dtype.isInt ? "bit_not" : "not_", [this]); }
}

Tensor.prototype.valueOf = misuse("use as a number (valueOf)");
Tensor.prototype[Symbol.iterator] = misuse("iteration");

function logic(op, a, b) {
  const t = a instanceof Tensor ? a : b;
  return t.dtype.isInt ? { and_: "bit_and", or_: "bit_or" }[op] : op;
}

// ---- numbers -----------------------------------------------------------------------------------

/** A number with an explicit dtype: f32(x), i32(x), u32(x). Becomes a constant where it is used. */
export class Scalar {
  constructor(dt, value) {
    this.dtype = dt;
    this.value = value;
    Object.freeze(this);
  }
  toString() { return `${this.dtype.name}(${this.value})`; }
}

/** A 32-bit float literal (any number; rounded to f32 like Python's float -> f32). */
export function f32(x) {
  if (typeof x !== "number") throw new ValidationError(`f32: ${describe(x)} is not a number. Fix: f32(0.5)`);
  return new Scalar(dtype.f32, x);
}

/** A signed 32-bit integer literal: an integer in -2^31 .. 2^31-1. */
export function i32(x) {
  if (!Number.isInteger(x) || x < -(2 ** 31) || x >= 2 ** 31) {
    throw new ValidationError(`i32: ${describe(x)} is not an integer in -2^31..2^31-1. Fix: use u32(x) above 2^31-1, f32(x) for fractions`);
  }
  return new Scalar(dtype.i32, x);
}

/** An unsigned 32-bit integer literal: an integer in 0 .. 2^32-1. */
export function u32(x) {
  if (!Number.isInteger(x) || x < 0 || x >= 2 ** 32) {
    throw new ValidationError(`u32: ${describe(x)} is not an integer in 0..2^32-1. Fix: pass 0 <= x <= 0xFFFFFFFF`);
  }
  return new Scalar(dtype.u32, x);
}

const F32_VIEW = new DataView(new ArrayBuffer(4));

/** The 32-bit pattern of number or boolean `value` as dtype `dt` (ValidationError if it cannot be). */
export function scalarBits(value, dt, where) {
  if (dt === dtype.bool) {
    if (typeof value !== "boolean") {
      throw new ValidationError(`${where}: cannot use ${describe(value)} as a bool constant. Fix: pass true or false`);
    }
    return value ? 1 : 0;
  }
  if (typeof value === "boolean") {
    throw new ValidationError(`${where}: cannot mix boolean ${value} with a ${dt.name} tensor. ` +
      "Fix: pass a number, or cast the tensor to bool");
  }
  if (typeof value !== "number") throw new ValidationError(`${where}: ${describe(value)} is not a number`);
  if (dt.isFloat) {
    if (Number.isNaN(value)) return 0x7fc00000; // what numpy gives for Python's float("nan")
    F32_VIEW.setFloat32(0, value);
    return F32_VIEW.getUint32(0);
  }
  if (!Number.isInteger(value)) {
    throw new ValidationError(`${where}: cannot mix the fraction ${value} with a ${dt.name} tensor. ` +
      "Fix: cast the tensor with cast(x, dtype.f32)");
  }
  if (value < -(2 ** 31) || value >= 2 ** 32) {
    throw new ValidationError(`${where}: ${value} does not fit in 32 bits. Fix: use a smaller constant`);
  }
  return value >>> 0;
}

/** A constant tensor of `shape` filled with `value` as dtype `dt`. */
export function constant(value, dt, shape = [], where = "const") {
  const b = current();
  const c = b.add("const", [], { dtype: dt, bits: scalarBits(value, dt, where) });
  shape = checkShape(where, shape);
  return shape.length ? b.add("broadcast", [c], { shape }) : c;
}

/** The dtype of a literal with no tensor beside it: fractions, NaN and infinities are f32, booleans bool. */
function literalDType(x, where) {
  if (x instanceof Scalar) return x.dtype;
  if (typeof x === "boolean") return dtype.bool;
  if (typeof x === "number") {
    if (Number.isInteger(x)) {
      throw new TraceError(`${where}: the number ${Object.is(x, -0) ? "-0" : x} has no dtype here (JavaScript has ` +
        `one number type, so ${x} and ${x}.0 are the same). Fix: write i32(${x}), u32(${x}) or f32(${x})`);
    }
    return dtype.f32;
  }
  if (Array.isArray(x) || ArrayBuffer.isView(x)) {
    throw new TraceError(`${where}: arrays are not traced values. Fix: pass them as program inputs (spec) or build them with eta ops`);
  }
  throw new TraceError(`${where}: expected a tensor or a number, got ${describe(x)}`);
}

/** `x` as a traced tensor; a literal takes `like`'s dtype (or its own) and rank 0. */
export function toTensor(x, like, where) {
  if (x instanceof Tensor) return x;
  if (x instanceof Scalar) {
    if (like && like.dtype !== x.dtype) {
      throw new ValidationError(`${where}: ${x} is used with a ${like.type} tensor. ` +
        `Fix: write ${like.dtype.name}(${x.value}), or cast(x, dtype.${x.dtype.name}) the tensor`);
    }
    return constant(x.value, x.dtype, [], where);
  }
  const dt = like ? like.dtype : literalDType(x, where);
  return constant(x, dt, [], where);
}

/** numpy-style broadcast of two shapes (right-aligned), or ValidationError. */
export function broadcastShapes(op, a, b) {
  const n = Math.max(a.length, b.length);
  const pa = [...Array(n - a.length).fill(1), ...a], pb = [...Array(n - b.length).fill(1), ...b];
  return pa.map((x, i) => {
    const y = pb[i];
    if (x !== y && x !== 1 && y !== 1) {
      throw new ValidationError(`${op}: cannot broadcast shapes [${a.join(", ")}] and [${b.join(", ")}]: dims ${x} and ${y} ` +
        "differ and neither is 1. Fix: reshape one side, e.g. reshape(m, [rows, 1])");
    }
    return Math.max(x, y);
  });
}

/** Broadcast `t` to `shape` (no node when already that shape). */
export function expand(t, shape) {
  return sameShape(t.shape, shape) ? t : t._b.add("broadcast", [t], { shape });
}

/** Record a binary elementwise op with literal promotion and numpy-style broadcasting. */
export function binary(op, a, b) {
  if (!(a instanceof Tensor) && !(b instanceof Tensor)) {
    current();
    throw new TraceError(`${op}: neither argument is a traced tensor. Fix: pass at least one tensor`);
  }
  const like = a instanceof Tensor ? a : b;
  a = toTensor(a, like, op);
  b = toTensor(b, like, op);
  const shape = broadcastShapes(op, a.shape, b.shape);
  return a._b.add(op, [expand(a, shape), expand(b, shape)]);
}

/** Python's `a // b`: floor(a / b) for f32; truncating division for integers. */
export function floordiv(a, b) {
  const q = binary("div", a, b);
  return q.dtype.isFloat ? q._b.add("floor", [q]) : q;
}

// ---- channels ------------------------------------------------------------------------------------

/** A channel declared inside a trace by name and cell type; a container binds it by that name. */
export class Channel {
  constructor(name, cell) {
    this.name = name;
    this.cell = cell;
    Object.freeze(this);
  }
  get shape() { return this.cell.shape; }
  get dtype() { return this.cell.dtype; }

  /** The oldest cell, consumed when the pass commits. */
  take() {
    const b = current();
    const slot = b.slot(this);
    const seq = b.takes.get(slot) ?? 0;
    b.takes.set(slot, seq + 1);
    return b.add("chan_take", [], { slot, seq, dtype: this.dtype, shape: this.shape });
  }

  /** The oldest cell, not consumed. */
  read() {
    const b = current();
    return b.add("chan_read", [], { slot: b.slot(this), dtype: this.dtype, shape: this.shape });
  }

  /** Append a tensor (or a literal, which takes the cell dtype) as a cell when the pass commits. */
  put(value) {
    const b = current();
    const where = `put into channel ${JSON.stringify(this.name)}`;
    let v = value instanceof Tensor ? value : toTensor(value, value instanceof Scalar ? null : this.cell, where);
    if (v.dtype !== this.dtype) {
      throw new ValidationError(`${where}: tensor ${v.type} but its cells are ${this.cell}. ` +
        `Fix: cast(x, dtype.${this.dtype.name})`);
    }
    if (!sameShape(v.shape, this.shape)) {
      if (v.size === this.cell.size) {
        v = b.add("reshape", [v], { shape: this.shape });
      } else {
        throw new ValidationError(`${where}: tensor ${v.type} does not fit cells of shape [${this.shape.join(", ")}]. ` +
          `Fix: reshape it to [${this.shape.join(", ")}]`);
      }
    }
    const slot = b.slot(this);
    const seq = b.puts.get(slot) ?? 0;
    b.puts.set(slot, seq + 1);
    b.add("chan_put", [v], { slot, seq });
  }
}

/** Declare (or look up) the channel `name` of this trace, with cells of `shape` and `dt`. */
export function channel(name, shape, dt) {
  const b = current();
  checkChannelName(name, "channel");
  const d = toDType(dt, `channel ${JSON.stringify(name)}`);
  const cell = new TType(d, typeof shape === "number" ? [shape] : checkShape(`channel ${JSON.stringify(name)}`, shape));
  const prev = b.declared.get(name);
  if (prev) {
    if (!prev.cell.equals(cell)) {
      throw new TraceError(`channel ${JSON.stringify(name)} is declared twice in this trace, as ${prev.cell} and as ${cell}. ` +
        "Fix: one name per channel; give the other channel another name");
    }
    return prev;
  }
  const ch = new Channel(name, cell);
  b.declared.set(name, ch);
  return ch;
}

// ---- intrinsics --------------------------------------------------------------------------------

function intrinsicType(name, index) {
  const ctx = current().context.intrinsics;
  if (!ctx) {
    throw new TraceError("intrinsics are only available when the trace says what the runtime provides. " +
      "Fix: trace(fn, ...specs, { intrinsics: forLogits(vocab) })");
  }
  const entry = ctx[name];
  if (!entry) throw new ValidationError(`unknown intrinsic ${JSON.stringify(name)}. Fix: use one of ${Object.keys(ctx).sort().join(", ")}`);
  if (!Number.isInteger(index) || index < 0 || index >= entry.rows) {
    throw new ValidationError(`intrinsic ${JSON.stringify(name)} row ${describe(index)} out of range: this pass has ${entry.rows} ` +
      "readout row(s). Fix: pick a row in range");
  }
  return entry;
}

/** The intrinsic context of a forward pass with `rows` readout rows of `vocab` f32 logits. */
export function forLogits(vocab, rows = 1) {
  return { logits: { type: new TType(dtype.f32, checkShape("forLogits", [vocab])), rows } };
}

/** Runtime-provided values (piegpu.eta.intrinsics). */
export const intrinsics = Object.freeze({
  /** The f32 [vocab] `name` of readout row `index`. */
  output(index = 0, name = "logits") {
    const { type } = intrinsicType(name, index);
    return current().add("intrinsic", [], { name, index, dtype: type.dtype, shape: type.shape });
  },
  /** The f32 [rows, vocab] `name` of every readout row. */
  outputs(name = "logits") {
    const { type, rows } = intrinsicType(name, 0);
    return current().add("intrinsic", [], { name, index: 0, dtype: type.dtype, shape: [rows, ...type.shape] });
  },
  vocab() { const { type } = intrinsicType("logits", 0); return type.shape[type.shape.length - 1]; },
  readouts() { return intrinsicType("logits", 0).rows; },
});

// ---- trace -------------------------------------------------------------------------------------

/** An input spec for trace: static shape (array of ints) and dtype. */
export function spec(shape, dt) {
  return new TType(toDType(dt, "spec"), checkShape("spec", shape));
}

function flatten(x, out) {
  if (Array.isArray(x)) x.forEach((y) => flatten(y, out));
  else out.push(x);
  return out;
}

/**
 * Run `fn` once on placeholders of `specs`, recording every op into a Program.
 * `fn` returns a tensor, a (nested) array of tensors, or nothing when it only puts into channels.
 * A last argument that is a plain object holds options: { intrinsics: forLogits(vocab) }.
 */
export function trace(fn, ...specs) {
  let options = {};
  if (specs.length && !(specs[specs.length - 1] instanceof TType) && specs[specs.length - 1]?.constructor === Object) {
    options = specs.pop();
  }
  if (typeof fn !== "function") throw new TraceError(`trace: ${describe(fn)} is not a function. Fix: trace((x) => ..., spec([n], dtype.f32))`);
  specs.forEach((s, i) => {
    if (!(s instanceof TType)) {
      throw new ValidationError(`trace: argument ${i + 2} is ${describe(s)}, not a spec. Fix: trace(fn, spec([n], dtype.f32), ...)`);
    }
  });
  const b = new Builder({ intrinsics: options.intrinsics });
  const prev = active;
  active = b;
  let result;
  try {
    const args = specs.map((s, i) => b.add("input", [], { index: i, dtype: s.dtype, shape: s.shape }));
    result = fn(...args);
  } finally {
    active = prev;
  }
  const name = fn.name || "the function";
  let outs;
  if (result === undefined || result === null) outs = [];
  else if (result instanceof Tensor) outs = [result];
  else if (Array.isArray(result)) outs = flatten(result, []);
  else {
    throw new TraceError(`trace: ${name} returned ${describe(result)}. ` +
      "Fix: return a tensor, an array of tensors, or nothing (epilogues with puts)");
  }
  for (const o of outs) {
    if (!(o instanceof Tensor) || o._b !== b) throw new TraceError(`trace: output ${describe(o)} is not a tensor of this trace. Fix: return traced tensors`);
  }
  if (!outs.length && !b.nodes.some((n) => GroupOp.COMMITTED.has(n.op))) {
    throw new TraceError(`trace: ${name} has no outputs and no channel puts. Fix: return the tensors you want, or put them into channels`);
  }
  if (outs.length > 64) throw new TraceError(`trace: ${outs.length} outputs (limit 64). Fix: concat them into fewer tensors`);
  return b.finish(outs);
}
