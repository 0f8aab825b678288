// The JS tracer's version of every golden program gives the committed bytes and hash, and every
// golden container decodes and re-encodes to the same bytes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Program, VERSION } from "../src/index.js";
import { CORPUS, hexBytes, toHex } from "./helpers.js";
import { PROGRAMS } from "./programs.js";

test("the corpus is the container version this SDK writes, with at least 15 programs", () => {
  assert.equal(CORPUS.format, "PIEETA");
  assert.equal(CORPUS.version, VERSION);
  assert.ok(CORPUS.programs.length >= 15);
  assert.deepEqual(Object.keys(PROGRAMS).sort(), CORPUS.programs.map((e) => e.name).sort(),
    "test/programs.js and tests/sdk/programs.py must define the same programs");
});

for (const entry of CORPUS.programs) {
  test(`traced in JS: ${entry.name} matches every byte and the hash`, () => {
    const prog = PROGRAMS[entry.name]();
    const bytes = prog.toBytes();
    assert.ok(bytes instanceof Uint8Array);
    assert.equal(bytes.length, entry.bytes);
    assert.equal(toHex(bytes), entry.hex);
    assert.equal(prog.hash, entry.hash);
  });

  test(`decoded in JS: ${entry.name} re-encodes to the same bytes`, () => {
    const data = hexBytes(entry.hex);
    const prog = Program.fromBytes(data);
    assert.equal(toHex(prog.toBytes()), entry.hex);
    assert.equal(prog.hash, entry.hash);
    assert.equal(Program.fromBytes(Buffer.from(entry.hex, "hex")).hash, entry.hash); // a Buffer is a Uint8Array
    assert.equal(Program.fromBytes(data.buffer).hash, entry.hash); // so is an ArrayBuffer's view
  });
}

test("channels keep their names and cell types through a round trip", () => {
  const entry = CORPUS.programs.find((e) => e.name === "channels");
  const prog = Program.fromBytes(hexBytes(entry.hex));
  assert.deepEqual(prog.channels.map((c) => `${c.name}:${c.type}`),
    ["counter:i32[1]", "chan1:f32[2]", "params:f32[3]", "out:f32[2]"]);
  assert.match(prog.pretty(), /channel 0 "counter": i32\[1\]/);
});
