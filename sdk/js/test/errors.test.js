// Bad input fails at trace time with an error that names the op and the fix.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as eta from "../src/index.js";

const { TraceError, ValidationError, dtype, spec, trace, channel, f32, i32, u32 } = eta;
const F = (shape) => spec(shape, dtype.f32);
const I = (shape) => spec(shape, dtype.i32);

function fails(fn, cls, ...patterns) {
  assert.throws(fn, (e) => {
    assert.ok(e instanceof cls, `expected ${cls.name}, got ${e.constructor.name}: ${e.message}`);
    assert.ok(e instanceof eta.PieGpuError);
    for (const p of patterns) assert.match(e.message, p);
    assert.match(e.message, /Fix: /);
    return true;
  });
}

test("wrong shapes name the op and the fix", () => {
  fails(() => trace((a, b) => eta.matmul(a, b), F([2, 3]), F([2, 3])), ValidationError, /^matmul: .*a\[m, k\] and b\[k, n\], got f32\[2, 3\]/, /reshape or transpose/);
  fails(() => trace((a, b) => a.add(b), F([2, 3]), F([4])), ValidationError, /^add: cannot broadcast shapes \[2, 3\] and \[4\]/);
  fails(() => trace((a) => eta.reshape(a, [5]), F([2, 3])), ValidationError, /^reshape: cannot reshape f32\[2, 3\]/, /element count/);
  fails(() => trace((a) => eta.reduceSum(eta.reduceSum(a)), F([3])), ValidationError, /^reduce_sum: cannot reduce a rank-0/);
  fails(() => trace((a) => eta.topK(a, 9), F([4])), ValidationError, /^top_k_idx: k=9 is outside 1\.\.4/);
  fails(() => trace((a) => a, spec([0], dtype.f32)), ValidationError, /^spec: shape \[0\]/);
});

test("dtype mixes name the op and the cast to write", () => {
  fails(() => trace((a, b) => a.add(b), F([2]), I([2])), ValidationError, /^add: dtype mismatch f32\[2\] vs i32\[2\]/, /cast\(x, dtype\)/);
  fails(() => trace((a) => eta.exp(a), I([2])), ValidationError, /^exp: needs an f32 input, got i32\[2\]/, /cast\(x, dtype\.f32\)/);
  fails(() => trace((a) => a.add(1.5), I([2])), ValidationError, /^add: cannot mix the fraction 1\.5 with a i32 tensor/);
  fails(() => trace((a) => a.add(f32(2)), I([2])), ValidationError, /^add: f32\(2\) is used with a i32\[2\] tensor/, /i32\(2\)/);
  fails(() => trace((a) => a.add(true), I([2])), ValidationError, /cannot mix boolean true/);
  fails(() => trace((a) => eta.gather(a, a), F([3])), ValidationError, /^gather: indices must be i32 or u32/);
  fails(() => trace((a) => eta.softmax(a), I([3])), ValidationError, /^softmax: needs f32 logits/);
});

test("a tensor used as a number, primitive or iterable raises TraceError naming the fix", () => {
  for (const misuse of [(t) => t > 0, (t) => t + 1, (t) => Number(t), (t) => t == 1, (t) => [...t], (t) => +t, (t) => t * 2]) {
    fails(() => trace((x) => { misuse(x); return x; }, F([2])), TraceError, /traced tensor f32\[2\]/, /select\(cond, ifTrue, ifFalse\)/);
  }
  trace((x) => { assert.equal(`${x}`, "Tensor(%0: f32[2])"); return x; }, F([2])); // strings are fine (messages, logs)
});

test("an integer literal with no tensor beside it asks for f32(), i32() or u32()", () => {
  fails(() => trace((x) => [x, eta.broadcast(3, [2])], F([2])), TraceError, /^broadcast: the number 3 has no dtype here/, /i32\(3\), u32\(3\) or f32\(3\)/);
  fails(() => trace((c) => eta.select(c, 1, 0), spec([2], dtype.bool)), TraceError, /^select: the number 1/);
  fails(() => trace((x) => eta.exp(2), F([2])), TraceError, /^exp: the number 2/);
  fails(() => i32(1.5), ValidationError, /^i32: 1\.5/);
  fails(() => u32(-1), ValidationError, /^u32: -1/);
  const p = trace((x) => [x, eta.broadcast(u32(7), [2]), eta.broadcast(0.5, [2]), eta.select(eta.gt(x, 0), f32(1), 0)], F([2]));
  assert.deepEqual(p.outputTypes.map(String), ["f32[2]", "u32[2]", "f32[2]", "f32[2]"]);
});

test("channel puts of the wrong cell type, and names declared twice, fail at trace time", () => {
  fails(() => trace((x) => { channel("token_out", [1], dtype.i32).put(x); }, F([1])), ValidationError,
    /^put into channel "token_out": tensor f32\[1\] but its cells are i32\[1\]/, /cast\(x, dtype\.i32\)/);
  fails(() => trace((x) => { channel("out", [2], dtype.i32).put(x); }, I([3])), ValidationError, /does not fit cells of shape \[2\]/, /reshape it to \[2\]/);
  fails(() => trace((x) => { channel("a", [1], dtype.i32); channel("a", [2], dtype.i32).put(x); }, I([2])), TraceError,
    /channel "a" is declared twice in this trace, as i32\[1\] and as i32\[2\]/);
  fails(() => trace((x) => { channel("", [1], dtype.i32).put(x); }, I([1])), ValidationError, /1 to 255/);
  fails(() => trace((x) => { channel("a\nb", [1], dtype.i32).put(x); }, I([1])), ValidationError, /character U\+000A/);
  const same = trace((x) => { channel("a", [1], dtype.i32).put(x); channel("a", [1], "i32").put(x.add(1)); }, I([1]));
  assert.deepEqual(same.channelNames, ["a"]);
  const scalar = trace(() => { channel("n", [], dtype.f32).put(3); }); // a literal takes the cell dtype
  assert.equal(scalar.nodes[0].attrs[0], dtype.f32);
});

test("ops outside a trace, intrinsics without a context, bad returns", () => {
  fails(() => eta.iota(3), TraceError, /inside trace/);
  fails(() => channel("x", [1], dtype.i32), TraceError, /inside trace/);
  fails(() => trace(() => eta.intrinsics.output(0)), TraceError, /forLogits\(vocab\)/);
  fails(() => trace(() => eta.intrinsics.output(1), { intrinsics: eta.forLogits(8) }), ValidationError, /row 1 out of range/);
  fails(() => trace(() => 3), TraceError, /returned 3\. Fix: return a tensor/);
  fails(() => trace(() => undefined), TraceError, /no outputs and no channel puts/);
  fails(() => trace((x) => x, [2]), ValidationError, /not a spec/);
  let leaked;
  trace((x) => { leaked = x; return x; }, F([2]));
  fails(() => trace((y) => y.add(leaked), F([2])), TraceError, /belongs to another trace/);
});
