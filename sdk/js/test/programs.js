// The golden corpus programs written with the JS tracer: the same names and the same programs as
// tests/sdk/programs.py, so the same container bytes (tests/sdk/golden/corpus.json).

import {
  abs, and, bitAnd, div, bitNot, bitXor, bitcast, broadcast, cast, channel, concat, cos, cumprod, cumsum, dtype, entropy, eq,
  exp, f32, floor, forLogits, gather, gatherRow, gumbel, gumbelMax, i32, intrinsics, iota, isinf, isnan, log,
  logSoftmax, lt, maskApply, maskedArgmax, matmul, maximum, minPMask, minimum, ne, neg, not, or, pow, recip,
  reduceArgmax, reduceArgmin, reduceMax, reduceMin, reduceSum, reshape, rng, rsqrt, sanitize, scatterAdd, scatterSet,
  select, sign, sin, sliceLast, softmax, sortDesc, spec as S, sqrt, sub, takeLast, tanh, topAMask, topK, topKMask,
  topPMask, trace, transpose, u32,
} from "../src/index.js";

const { f32: F32, i32: I32, u32: U32, bool: BOOL } = dtype;
const V = 16;

export const PROGRAMS = {
  unary_f32: () => trace((x) => [neg(x), abs(x), sign(x), recip(x), exp(x), log(x), sqrt(x), rsqrt(x), sin(x), cos(x),
    tanh(x), floor(x), isnan(x), isinf(x), x.neg()], S([2, 3], F32)),

  binary_f32: () => trace((a, b) => [a.add(b), a.sub(b), a.mul(b), a.div(b), a.rem(b), a.floordiv(b), a.pow(b),
    maximum(a, b), minimum(a, b), pow(a, 2), sub(1, a), div(2.5, b)],
  S([4], F32), S([4], F32)),

  compare_select: () => trace((a, b) => [eq(a, b), ne(a, b), a.lt(b), a.le(b), a.gt(b), a.ge(b), lt(a, 0.5),
    select(a.gt(b), a, b), select(a.gt(0), f32(1), -1)], S([5], F32), S([5], F32)),

  bool_logic: () => trace((p, q) => [p.and(q), p.or(q), p.not(), p.xor(q), and(p, true), or(q, false), not(q),
    cast(p, I32), select(p, q, true)], S([3], BOOL), S([3], BOOL)),

  int_i32: () => trace((a, b) => [a.add(b), a.sub(7), a.mul(-3), a.div(b), a.floordiv(2), a.rem(b),
    maximum(a, -(2 ** 31)), minimum(a, 2 ** 31 - 1), a.and(b), a.or(0x0f0f), a.xor(b), a.not(), a.shl(3), a.shr(b),
    bitNot(b), abs(a), sign(b), a.neg()], S([4], I32), S([4], I32)),

  u32_constants: () => trace((x) => [x.add(0xffffffff), bitXor(x, 0x80000000), x.mul(2654435761),
    bitAnd(x, 0xdeadbeef), broadcast(u32(0x80000001), [2]), broadcast(u32(4294967295), []), x.shr(31),
    x.lt(3000000000)], S([4], U32)),

  f32_constants: () => trace((x) => [x.add(-Infinity), x.mul(Infinity), x.sub(NaN), x.mul(-0), x.add(0.1),
    x.mul(3.4028234663852886e38), x.add(1e-45), x.add(1e40), broadcast(-2.5, [3]), broadcast(NaN, []),
    maximum(x, -1e-30)], S([3], F32)),

  bool_and_i32_constants: () => trace((x) => [broadcast(true, [2]), broadcast(false, []), broadcast(i32(0), [2]),
    broadcast(i32(-(2 ** 31)), [2]), broadcast(i32(2 ** 31 - 1), []), x.add(1), x.sub(1)], S([2], I32)),

  casts: () => trace((f, i, u, b) => [cast(f, I32), cast(f, U32), cast(f, BOOL), cast(i, F32), cast(i, U32),
    cast(u, F32), cast(u, I32), cast(b, F32), cast(b, U32), cast(i, BOOL), bitcast(f, U32), bitcast(i, F32),
    bitcast(u, I32), cast(f, F32)], S([3], F32), S([3], I32), S([3], U32), S([3], BOOL)),

  reductions: () => trace((x, n) => [reduceSum(x), reduceMax(x), reduceMin(x), reduceArgmax(x), reduceArgmin(x),
    reduceSum(n), reduceArgmax(n), reduceMax(reduceMax(x))], S([3, 5], F32), S([7], U32)),

  scans: () => trace((x, n) => [cumsum(x), cumprod(x), cumsum(n), cumprod(n)], S([2, 4], F32), S([5], I32)),

  shapes: () => trace((x, y) => {
    const r = reshape(x, [3, 2]);
    return [r, transpose(x), broadcast(reshape(y, [1, 3]), [4, 3]), concat([x, x, transpose(r)]), sliceLast(x, 1, 2),
      iota(5), reshape(y, [3]), x.add(reshape(y, [1, 3]))];
  }, S([2, 3], F32), S([3], F32)),

  indexing: () => trace((src, idx, rows, col, vals) => [gather(src, idx), gatherRow(src, col), takeLast(src, rows),
    scatterSet(src, idx, vals), scatterAdd(src, idx, vals), scatterSet(src, idx, 0.5), gather(iota(4), cast(idx, U32))],
  S([4, 3], F32), S([2], I32), S([4, 2], U32), S([4], I32), S([2, 3], F32)),

  ordering: () => trace((x, n) => [...topK(x, 3), ...sortDesc(n)], S([2, 6], F32), S([5], I32)),

  linear: () => trace((a, b) => matmul(a, b), S([2, 3], F32), S([3, 4], F32)),

  random_draws: () => trace((state) => [rng(state, [2, 3]), gumbel(state, [4])], S([2], U32)),

  softmaxes: () => trace((x) => {
    const p = softmax(x);
    return [p, logSoftmax(x), entropy(p), sanitize(x)];
  }, S([2, 8], F32)),

  masks: () => trace((x) => {
    const keep = topPMask(x, 0.9);
    return [keep, topKMask(x, 3), minPMask(x, 0.05), topAMask(x, 0.2), maskApply(x, keep), maskedArgmax(x, topKMask(x, 2))];
  }, S([V], F32)),

  row_params: () => trace((x, p, k) => [topPMask(x, p), topKMask(x, k), minPMask(x, p)],
    S([2, 8], F32), S([2], F32), S([2], I32)),

  gumbel_max_sampler: () => trace((logits, state) => gumbelMax(logits, state), S([V], F32), S([2], U32)),

  top_a_sampler: () => trace((logits, state) => {
    const keep = topAMask(logits, 0.2);
    return gumbelMax(maskApply(logits.div(0.8), keep), state);
  }, S([V], F32), S([2], U32)),

  channels: () => trace((x) => {
    const counter = channel("counter", [1], I32);
    const scratch = channel("chan1", [2], F32); // the Python side leaves it unnamed: slot 1 -> "chan1"
    const params = channel("params", [3], F32);
    const out = channel("out", [2], F32);
    const n = counter.take();
    const s = scratch.take();
    const p = params.read();
    counter.put(n.add(1));
    scratch.put(s.mul(2));
    out.put(x.mul(sliceLast(p, 0, 2)).add(s));
    out.put(cast(broadcast(n, [2]), F32));
    return counter.read();
  }, S([2], F32)),

  greedy_device_loop: () => trace(() => {
    const tokenIn = channel("token_in", [1], I32);
    const tokenOut = channel("token_out", [1], I32);
    const token = reshape(reduceArgmax(intrinsics.output(0, "logits")), [1]);
    tokenIn.put(token);
    tokenOut.put(token);
  }, { intrinsics: forLogits(V) }),

  rng_channel_sampler: () => trace((logits) => {
    const rngState = channel("rng", [2], U32);
    const tokenOut = channel("token_out", [1], I32);
    const state = rngState.take();
    const token = gumbelMax(logits, state);
    rngState.put(select(eq(iota(2), 1), state.add(1), state));
    tokenOut.put(token);
  }, S([V], F32)),
};
