// Program.fromBytes is strict: truncation, bit flips, wrong magic or version, trailing bytes,
// unknown ops and non-canonical bytes raise ValidationError (never another error, never a different program).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Program, ValidationError, dtype, spec, trace, exp, sliceLast } from "../src/index.js";
import { CORPUS, hexBytes, prng, toHex } from "./helpers.js";

function rejects(data, pattern) {
  assert.throws(() => Program.fromBytes(data), (e) => e instanceof ValidationError && (!pattern || pattern.test(e.message)),
    `expected a ValidationError${pattern ? ` matching ${pattern}` : ""}`);
}

/** null if rejected with ValidationError; else the program, which must re-encode to exactly `data`. */
function decodeOrReject(data) {
  let prog;
  try {
    prog = Program.fromBytes(data);
  } catch (e) {
    if (e instanceof ValidationError) return null;
    throw e;
  }
  assert.equal(toHex(prog.toBytes()), toHex(data), "decoded bytes that do not re-encode to themselves");
  return prog;
}

for (const entry of CORPUS.programs) {
  test(`mutations of ${entry.name} raise or decode canonically`, () => {
    const data = hexBytes(entry.hex);
    const rand = prng(entry.bytes);
    const cuts = data.length <= 2048 ? [...Array(data.length).keys()] : Array.from({ length: 300 }, () => rand(data.length));
    for (const n of cuts) assert.equal(decodeOrReject(data.subarray(0, n)), null, `a ${n}-byte prefix decoded`);
    for (let k = 0; k < 300; k++) { // one or two bit flips
      const b = Uint8Array.from(data);
      for (let f = 0; f < 1 + rand(2); f++) b[rand(b.length)] ^= 1 << rand(8);
      decodeOrReject(b);
    }
    for (let k = 0; k < 50; k++) { // huge values over counts, sizes, ids, dims
      const b = Uint8Array.from(data);
      const at = rand(Math.max(1, b.length - 3));
      const v = [0xffffffff, 0x7fffffff, 0x80000000, 0xffff, 1 << 20][rand(5)];
      new DataView(b.buffer).setUint32(Math.min(at, b.length - 4), v, true);
      decodeOrReject(b);
    }
    rejects(Uint8Array.of(...data, 0), /trailing/);
    rejects(Uint8Array.of(...new TextEncoder().encode("PIEETB"), ...data.subarray(6)), /magic/);
    for (const v of [1, 3, 99]) {
      const b = Uint8Array.from(data);
      new DataView(b.buffer).setUint16(6, v, true);
      rejects(b, new RegExp(`version ${v}`));
    }
  });
}

test("empty input, other types and unknown ops are rejected with the reason", () => {
  rejects(new Uint8Array(0), /magic/);
  rejects(new TextEncoder().encode("XXXXXX"), /magic/);
  assert.throws(() => Program.fromBytes("PIEETA"), (e) => e instanceof ValidationError && /needs bytes/.test(e.message));
  const data = trace((x) => exp(x), spec([2], dtype.f32)).toBytes();
  const hex = toHex(data).replace(toHex(new TextEncoder().encode("\x03exp")), toHex(new TextEncoder().encode("\x03exq")));
  rejects(hexBytes(hex), /unknown op "exq"/);
});

test("a stored type that contradicts the op is rejected", () => {
  const data = trace((x) => exp(x), spec([2], dtype.f32)).toBytes();
  const at = toHex(data).indexOf(toHex(new TextEncoder().encode("\x03exp"))) / 2 + 5; // name, type flag: the dtype code
  const b = Uint8Array.from(data);
  b[at] = dtype.i32.code;
  rejects(b, /stored type/);
});

test("int attributes outside 0..2^32-1 are rejected", () => {
  const data = trace((x) => sliceLast(x, 1, 2), spec([4], dtype.f32)).toBytes();
  const at = toHex(data).indexOf(toHex(new TextEncoder().encode("\x0aslice_last"))) / 2;
  const b = Uint8Array.from(data);
  const view = new DataView(b.buffer);
  for (let p = at; p < b.length - 8; p++) {
    if (view.getBigInt64(p, true) === 1n) { view.setBigInt64(p, -1n, true); break; }
  }
  rejects(b, /outside 0\.\.2\^32-1/);
});

test("duplicate and empty channel names are rejected", () => {
  const entry = CORPUS.programs.find((e) => e.name === "greedy_device_loop");
  const hex = entry.hex;
  const tokenIn = toHex(new TextEncoder().encode("token_in")), tokenOut = toHex(new TextEncoder().encode("token_out"));
  // "token_out" -> "token_in" + one byte that shifts nothing: rewrite the length too
  const dup = hex.replace("0900" + tokenOut, "0800" + tokenIn);
  rejects(hexBytes(dup), /unique/);
  const empty = hex.replace("0800" + tokenIn, "0000");
  rejects(hexBytes(empty), /1 to 255/);
});
