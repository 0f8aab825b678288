// The eta Program: SSA nodes, its canonical container bytes (docs/container.md) and content hash.

import { createHash } from "node:crypto";
import { ValidationError } from "./errors.js";
import { OPS, GroupOp, infer } from "./ops.js";
import { TABLE, TType, checkChannelName, checkShape, dtypeFromCode, dtype } from "./types.js";

export const MAGIC = new TextEncoder().encode(TABLE.format); // "PIEETA"
export const VERSION = TABLE.version;

/** One SSA node: op name, input node ids, attribute values (op-table order), result type (null for chan_put). */
export class Node {
  constructor(op, inputs, attrs, type) {
    this.op = op;
    this.inputs = Object.freeze([...inputs]);
    this.attrs = Object.freeze([...attrs]);
    this.type = type;
    Object.freeze(this);
  }
  /** Attributes by name. */
  get attr() {
    return Object.fromEntries(OPS.get(this.op).attrs.map(([n], i) => [n, this.attrs[i]]));
  }
}

/** A traced eta program: nodes, outputs and the channels it declares ({ name, type } per slot). */
export class Program {
  constructor(nodes, outputs, channels = []) {
    this.nodes = Object.freeze([...nodes]);
    this.outputs = Object.freeze([...outputs]);
    this.channels = Object.freeze(channels.map(({ name, type }) => Object.freeze({ name, type })));
    Object.freeze(this);
  }

  /** The canonical bytes (a fresh copy each call). */
  toBytes() {
    return encode(this);
  }

  /** Hex sha256 of the canonical bytes: the content hash. */
  get hash() {
    return createHash("sha256").update(encode(this)).digest("hex");
  }

  /** Decode and fully validate container bytes (ValidationError if anything is off). */
  static fromBytes(data) {
    return decode(data);
  }

  get channelNames() { return this.channels.map((c) => c.name); }

  /** The TType of each positional input, in order. */
  get inputTypes() {
    return this.nodes.filter((n) => n.op === "input").sort((a, b) => a.attrs[0] - b.attrs[0]).map((n) => n.type);
  }

  get outputTypes() { return this.outputs.map((i) => this.nodes[i].type); }

  /** A readable listing: one `%i = op(%a, %b) {attrs} : type` line per node. */
  pretty() {
    const lines = this.channels.map((c, i) => `channel ${i} ${JSON.stringify(c.name)}: ${c.type}`);
    this.nodes.forEach((n, i) => {
      const attrs = Object.entries(n.attr).map(([k, v]) => `${k}=${Array.isArray(v) ? `[${v}]` : v?.name ?? v}`);
      lines.push(`%${i} = ${n.op}(${n.inputs.map((j) => `%${j}`).join(", ")})` +
        `${attrs.length ? ` {${attrs.join(", ")}}` : ""}${n.type ? ` : ${n.type}` : ""}`);
    });
    lines.push(`return ${this.outputs.map((i) => `%${i}`).join(", ")}`);
    return lines.join("\n");
  }

  toString() {
    return `<eta.Program ${this.nodes.length} nodes, ${this.outputs.length} outputs, hash ${this.hash.slice(0, 12)}>`;
  }
}

// ---- encoding -----------------------------------------------------------------------------------

class Writer {
  constructor() { this.chunks = []; this.length = 0; }
  raw(bytes) { this.chunks.push(bytes); this.length += bytes.length; }
  num(size, set, v) {
    const b = new Uint8Array(size);
    new DataView(b.buffer)[set](0, v, true);
    this.raw(b);
  }
  u8(v) { this.raw(Uint8Array.of(v)); }
  u16(v) {
    if (!Number.isInteger(v) || v < 0 || v > 0xffff) throw new ValidationError(`count ${v} does not fit the container's u16`);
    this.num(2, "setUint16", v);
  }
  u32(v) { this.num(4, "setUint32", v); }
  i64(v) { this.num(8, "setBigInt64", BigInt(v)); }
  str16(s) { const b = new TextEncoder().encode(s); this.u16(b.length); this.raw(b); }
  type(t) { this.u8(t.dtype.code); this.u8(t.shape.length); t.shape.forEach((d) => this.u32(d)); }
  bytes() {
    const out = new Uint8Array(this.length);
    let at = 0;
    for (const c of this.chunks) { out.set(c, at); at += c.length; }
    return out;
  }
}

/** Serialize a program to its canonical bytes. */
export function encode(prog) {
  const w = new Writer();
  w.raw(MAGIC);
  w.u16(VERSION);
  w.u16(prog.channels.length);
  for (const ch of prog.channels) {
    w.str16(ch.name);
    w.type(ch.type);
  }
  w.u32(prog.nodes.length);
  for (const n of prog.nodes) {
    const name = new TextEncoder().encode(n.op);
    w.u8(name.length);
    w.raw(name);
    if (n.type === null) w.u8(0);
    else { w.u8(1); w.type(n.type); }
    w.u16(n.inputs.length);
    n.inputs.forEach((j) => w.u32(j));
    OPS.get(n.op).attrs.forEach(([, kind], i) => {
      const v = n.attrs[i];
      if (kind === "int") w.i64(v);
      else if (kind === "dtype") w.u8(v.code);
      else if (kind === "shape") { w.u8(v.length); v.forEach((d) => w.u32(d)); }
      else if (kind === "str") w.str16(v);
    });
  }
  w.u16(prog.outputs.length);
  prog.outputs.forEach((j) => w.u32(j));
  return w.bytes();
}

// ---- decoding -----------------------------------------------------------------------------------

const UTF8 = new TextDecoder("utf-8", { fatal: true });

class Reader {
  constructor(data) { this.data = data; this.view = new DataView(data.buffer, data.byteOffset, data.byteLength); this.pos = 0; }
  need(size, what) {
    if (this.pos + size > this.data.length) {
      throw new ValidationError(`eta program bytes are truncated: needed ${size} bytes for ${what} at offset ` +
        `${this.pos}, only ${this.data.length - this.pos} left. Fix: pass the complete bytes from toBytes()`);
    }
    const at = this.pos;
    this.pos += size;
    return at;
  }
  u8(what) { return this.view.getUint8(this.need(1, what)); }
  u16(what) { return this.view.getUint16(this.need(2, what), true); }
  u32(what) { return this.view.getUint32(this.need(4, what), true); }
  i64(what) { return this.view.getBigInt64(this.need(8, what), true); }
  bytes(n, what) { const at = this.need(n, what); return this.data.subarray(at, at + n); }
  utf8(n, what) {
    try {
      return UTF8.decode(this.bytes(n, what));
    } catch (e) {
      if (e instanceof ValidationError) throw e;
      throw new ValidationError(`${what}: the string is not UTF-8. Fix: the bytes are corrupt`);
    }
  }
  dtype(what) {
    const code = this.u8(what);
    const d = dtypeFromCode(code);
    if (!d) {
      throw new ValidationError(`${what}: dtype code ${code} is not one of 1 (f32), 2 (i32), 3 (u32), 4 (bool). ` +
        "Fix: the bytes are corrupt");
    }
    return d;
  }
  type(what) {
    const d = this.dtype(what);
    const rank = this.u8(what);
    if (rank > 4) throw new ValidationError(`rank ${rank} > 4 in ${what}. Fix: the bytes are corrupt`);
    const shape = [];
    for (let i = 0; i < rank; i++) shape.push(this.u32(what));
    return new TType(d, checkShape(what, shape));
  }
}

function toBytes(data) {
  if (data instanceof Uint8Array) return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  throw new ValidationError(`Program.fromBytes needs bytes (a Uint8Array or Buffer), got ${data === null ? "null" : typeof data}`);
}

/** Parse and validate container bytes; everything must re-encode to the same bytes. */
export function decode(input) {
  const data = toBytes(input);
  const r = new Reader(data);
  const head = data.subarray(0, MAGIC.length);
  if (head.length !== MAGIC.length || head.some((b, i) => b !== MAGIC[i])) {
    throw new ValidationError(`not eta program bytes: magic ${JSON.stringify(String.fromCharCode(...head))} != "PIEETA". ` +
      "Fix: pass bytes produced by toBytes()");
  }
  r.pos = MAGIC.length;
  const version = r.u16("version");
  if (version !== VERSION) {
    throw new ValidationError(`eta program bytes have version ${version}; this SDK reads version ${VERSION}. ` +
      "Fix: re-trace the function with this SDK");
  }
  const nCh = r.u16("channel count");
  const channels = [];
  for (let i = 0; i < nCh; i++) {
    const where = `channel ${i}`;
    const name = checkChannelName(r.utf8(r.u16(where), where), where);
    const prev = channels.findIndex((c) => c.name === name);
    if (prev >= 0) {
      throw new ValidationError(`${where}: name ${JSON.stringify(name)} is also channel ${prev}'s; names are unique. ` +
        "Fix: the bytes are corrupt or come from a broken tracer");
    }
    channels.push({ name, type: r.type(where) });
  }
  const nNodes = r.u32("node count");
  if (nNodes > data.length) throw new ValidationError(`declared ${nNodes} nodes but only ${data.length} bytes. Fix: the bytes are corrupt`);
  const nodes = [];
  const inputsSeen = new Set();
  for (let i = 0; i < nNodes; i++) {
    const where = `node %${i}`;
    const raw = r.bytes(r.u8(where), where);
    if (raw.some((b) => b > 0x7f)) throw new ValidationError(`${where}: op name is not ascii. Fix: the bytes are corrupt`);
    const name = String.fromCharCode(...raw);
    if (!OPS.has(name)) {
      throw new ValidationError(`${where}: unknown op ${JSON.stringify(name)}. Fix: the bytes come from a newer or ` +
        "different piegpu, or are corrupt");
    }
    const hasType = r.u8(where);
    if (hasType > 1) throw new ValidationError(`${where}: bad type flag ${hasType}. Fix: the bytes are corrupt`);
    const stored = hasType ? r.type(where) : null;
    const nIn = r.u16(where);
    const ins = [];
    for (let k = 0; k < nIn; k++) ins.push(r.u32(where));
    for (const j of ins) {
      if (j >= i || nodes[j].type === null) {
        throw new ValidationError(`${where}: input %${j} is not an earlier value node. Fix: the bytes are corrupt`);
      }
    }
    const attrs = [];
    for (const [aname, kind] of OPS.get(name).attrs) {
      if (kind === "int") {
        const v = r.i64(where);
        if (v < 0n || v >= 2n ** 32n) {
          throw new ValidationError(`${where}: attribute ${aname} = ${v} is outside 0..2^32-1. Fix: the bytes are corrupt`);
        }
        attrs.push(Number(v));
      } else if (kind === "dtype") {
        attrs.push(r.dtype(where));
      } else if (kind === "shape") {
        const rank = r.u8(where);
        if (rank > 4) throw new ValidationError(`${where}: attribute ${aname} has rank ${rank} > 4`);
        const shape = [];
        for (let k = 0; k < rank; k++) shape.push(r.u32(where));
        attrs.push(Object.freeze(shape));
      } else if (kind === "str") {
        attrs.push(r.utf8(r.u16(where), `${where}: attribute ${aname}`));
      }
    }
    const node = new Node(name, ins, attrs, stored);
    checkNode(i, node, nodes, channels, inputsSeen);
    nodes.push(node);
  }
  const nOut = r.u16("output count");
  const outs = [];
  for (let k = 0; k < nOut; k++) outs.push(r.u32("outputs"));
  for (const j of outs) {
    if (j >= nodes.length || nodes[j].type === null) throw new ValidationError(`output %${j} is not a value node. Fix: the bytes are corrupt`);
  }
  if (r.pos !== data.length) {
    throw new ValidationError(`${data.length - r.pos} trailing bytes after the program. ` +
      "Fix: pass exactly the bytes of one toBytes()");
  }
  const seen = [...inputsSeen].sort((a, b) => a - b);
  if (seen.some((v, k) => v !== k)) throw new ValidationError(`input indices [${seen}] are not 0..n-1. Fix: the bytes are corrupt`);
  checkSeqs(nodes);
  const prog = new Program(nodes, outs, channels);
  const again = encode(prog);
  if (again.length !== data.length || again.some((b, k) => b !== data[k])) {
    throw new ValidationError("program bytes are not canonical (they decode but re-encode differently). " +
      "Fix: pass bytes produced by toBytes()");
  }
  return prog;
}

function checkNode(i, node, nodes, channels, inputsSeen) {
  const where = `node %${i} (${node.op})`;
  const attrs = node.attr;
  const ins = node.inputs.map((j) => nodes[j].type);
  let want;
  try {
    want = infer(node.op, ins, attrs);
  } catch (e) {
    if (e instanceof ValidationError) throw new ValidationError(`${where}: ${e.message}`);
    throw e;
  }
  if (!(want === null ? node.type === null : want.equals(node.type))) {
    throw new ValidationError(`${where}: stored type ${node.type} but the op's rule gives ${want}. Fix: the bytes are corrupt`);
  }
  if (node.op === "input") {
    if (inputsSeen.has(attrs.index)) throw new ValidationError(`${where}: duplicate or negative input index ${attrs.index}`);
    inputsSeen.add(attrs.index);
  }
  if (node.op === "const" && attrs.dtype === dtype.bool && attrs.bits > 1) {
    throw new ValidationError(`${where}: bool constant must be 0 or 1`);
  }
  if (GroupOp.CHANNEL.has(node.op)) {
    const slot = attrs.slot;
    if (slot >= channels.length) throw new ValidationError(`${where}: channel slot ${slot} out of range (${channels.length} channels)`);
    const cell = channels[slot].type;
    const got = node.op === "chan_put" ? ins[0] : node.type;
    if (!got.equals(cell)) throw new ValidationError(`${where}: value ${got} does not match channel ${slot}'s cell ${cell}`);
  }
}

/** The takes and the puts of each channel carry seq 0, 1, 2, ... in node order. */
function checkSeqs(nodes) {
  const seen = new Map();
  nodes.forEach((n, i) => {
    if (!GroupOp.COMMITTED.has(n.op)) return;
    const { slot, seq } = n.attr;
    const key = `${n.op}/${slot}`;
    const want = seen.get(key) ?? 0;
    if (seq !== want) {
      throw new ValidationError(`node %${i} (${n.op}): seq ${seq} but this is ${n.op} number ${want} on channel ${slot}. ` +
        "Fix: the bytes are corrupt");
    }
    seen.set(key, want + 1);
  });
}
