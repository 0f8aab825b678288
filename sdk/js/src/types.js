// Element types, tensor types (TType) and static shapes, as in piegpu/dtypes.py and piegpu/eta/ops.py.

import { readFileSync } from "node:fs";
import { ValidationError, fail } from "./errors.js";

/** The op table exported from piegpu/eta/ops.py (tests/sdk/make_corpus.py writes it; a test keeps it current). */
export const TABLE = JSON.parse(readFileSync(new URL("./optable.json", import.meta.url), "utf8"));

export const MAX_RANK = 4;
export const MAX_ELEMENTS = 2 ** 30;

/** One element type: name, byte code in containers, kind ("float", "int", "uint", "bool"). */
export class DType {
  constructor(name, code, kind) {
    this.name = name;
    this.code = code;
    this.kind = kind;
    Object.freeze(this);
  }
  get isFloat() { return this.kind === "float"; }
  get isInt() { return this.kind === "int" || this.kind === "uint"; }
  get isNumeric() { return this.kind !== "bool"; }
  toString() { return `dtype.${this.name}`; }
}

const KINDS = { f32: "float", i32: "int", u32: "uint", bool: "bool" };

/** dtype.f32, dtype.i32, dtype.u32, dtype.bool (the codes come from the op table export). */
export const dtype = Object.freeze(Object.fromEntries(
  Object.entries(TABLE.dtypes).map(([name, code]) => [name, new DType(name, code, KINDS[name])])));

const BY_CODE = new Map(Object.values(dtype).map((d) => [d.code, d]));

/** A DType from a DType or its name ("f32"); ValidationError otherwise. */
export function toDType(d, where) {
  if (d instanceof DType) return d;
  if (typeof d === "string" && Object.hasOwn(dtype, d)) return dtype[d];
  throw new ValidationError(`${where}: ${describe(d)} is not a piegpu dtype. ` +
    "Fix: use dtype.f32, dtype.i32, dtype.u32 or dtype.bool (or their names)");
}

/** The DType of a container byte code, or undefined. */
export function dtypeFromCode(code) {
  return BY_CODE.get(code);
}

export function describe(v) {
  if (typeof v === "string") return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(describe).join(", ")}]`;
  if (v === null || v === undefined || typeof v !== "object") return String(v);
  return v.constructor?.name ?? "object";
}

/** The static type of a tensor: element dtype and shape (an array of ints >= 1). */
export class TType {
  constructor(dt, shape) {
    this.dtype = dt;
    this.shape = Object.freeze([...shape]);
    Object.freeze(this);
  }
  get size() { return this.shape.reduce((a, b) => a * b, 1); }
  equals(o) { return o instanceof TType && o.dtype === this.dtype && sameShape(o.shape, this.shape); }
  toString() { return `${this.dtype.name}[${this.shape.join(", ")}]`; }
}

export function sameShape(a, b) {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

/** Validate a static shape: rank <= 4, every dim an int >= 1, bounded size. */
export function checkShape(op, shape) {
  if (!Array.isArray(shape)) {
    fail(op, `shape ${describe(shape)} is not an array of ints`, "pass an array such as [4, 8]");
  }
  if (shape.length > MAX_RANK) {
    fail(op, `shape [${shape.join(", ")}] has rank ${shape.length} > ${MAX_RANK}`, "reshape to rank 4 or less");
  }
  for (const d of shape) {
    if (!Number.isInteger(d) || d < 1) {
      fail(op, `shape [${shape.map(describe).join(", ")}] has dimension ${describe(d)}; dims are static ints >= 1`,
        "use positive int dimensions");
    }
  }
  const n = shape.reduce((a, b) => a * b, 1);
  if (n > MAX_ELEMENTS) {
    fail(op, `shape [${shape.join(", ")}] has ${n} elements (limit ${MAX_ELEMENTS})`, "split the tensor");
  }
  return Object.freeze([...shape]);
}

/** A container's channel name rule: 1..255 bytes of UTF-8, no control characters, no lone surrogates. */
export function checkChannelName(name, where) {
  if (typeof name !== "string") {
    throw new ValidationError(`${where}: a channel name must be a string, got ${describe(name)}. ` +
      'Fix: channel("token_in", [1], dtype.i32)');
  }
  for (let i = 0; i < name.length; i++) {
    const c = name.charCodeAt(i);
    const lone = (c >= 0xd800 && c < 0xdc00 && !(i + 1 < name.length && (name.charCodeAt(i + 1) & 0xfc00) === 0xdc00))
      || (c >= 0xdc00 && c < 0xe000 && !(i > 0 && (name.charCodeAt(i - 1) & 0xfc00) === 0xd800));
    if (c < 0x20 || c === 0x7f || lone) {
      throw new ValidationError(`${where}: channel name ${JSON.stringify(name)} contains the character ` +
        `U+${c.toString(16).padStart(4, "0").toUpperCase()}. Fix: use printable characters in channel names`);
    }
  }
  const bytes = new TextEncoder().encode(name).length;
  if (bytes < 1 || bytes > TABLE.max_name_bytes) {
    throw new ValidationError(`${where}: channel name ${JSON.stringify(name)} is ${bytes} bytes of UTF-8; names ` +
      `take 1 to ${TABLE.max_name_bytes}. Fix: use a shorter, non-empty name`);
  }
  return name;
}
