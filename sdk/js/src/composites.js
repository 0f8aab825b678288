// Composite ops, expanded into core ops at trace time (piegpu/eta/composites.py, line for line:
// the same ops in the same order, so the same bytes).

import { ValidationError } from "./errors.js";
import * as F from "./api.js";
import { Tensor, i32, toTensor, u32 } from "./tracer.js";
import { dtype, sameShape } from "./types.js";

const NEG_INF = -Infinity;

/** Broadcast a last-axis reduction `r` back to `like`'s shape. */
export function keepDims(r, like) {
  return F.broadcast(F.reshape(r, [...r.shape, 1]), like.shape);
}

function floats(x, op) {
  x = toTensor(x, null, op);
  if (x.dtype !== dtype.f32) throw new ValidationError(`${op}: needs f32 logits, got ${x.type}. Fix: cast(x, dtype.f32)`);
  if (!x.shape.length) throw new ValidationError(`${op}: needs rank >= 1, got a scalar. Fix: reshape(x, [1])`);
  return x;
}

/** Logits with NaN replaced by -inf (every sampler treats NaN as -inf). */
export function sanitize(logits) {
  const x = floats(logits, "sanitize");
  return F.select(F.isnan(x), NEG_INF, x);
}

/** exp(x - max) / sum(exp(x - max)) along the last axis. */
export function softmax(x) {
  x = floats(x, "softmax");
  const e = F.exp(x.sub(keepDims(F.reduceMax(x), x)));
  return e.div(keepDims(F.reduceSum(e), x));
}

/** x - max - log(sum(exp(x - max))) along the last axis. */
export function logSoftmax(x) {
  x = floats(x, "log_softmax");
  const z = x.sub(keepDims(F.reduceMax(x), x));
  return z.sub(keepDims(F.log(F.reduceSum(F.exp(z))), x));
}

/** -sum(p * log p) over the last axis (terms with p <= 0 count 0). */
export function entropy(p) {
  p = floats(p, "entropy");
  return F.neg(F.reduceSum(F.select(p.gt(0), p.mul(F.log(p)), 0)));
}

/** Logits where `keep`, -inf elsewhere. */
export function maskApply(logits, keep) {
  return F.select(keep, logits, NEG_INF);
}

/** Index of the largest kept logit (NaN as -inf; 0 when nothing is kept or finite). */
export function maskedArgmax(logits, keep) {
  return F.reduceArgmax(maskApply(logits, keep));
}

/** A sample from softmax(logits): argmax(logits + gumbel(state)); NaN as -inf. */
export function gumbelMax(logits, state) {
  const x = sanitize(logits);
  return F.reduceArgmax(x.add(F.gumbel(state, x.shape)));
}

/** u32 keys that order like the values: NaN as -inf; f32 sign-flipped, i32 offset, u32 as is. */
export function orderKey(x) {
  if (x.dtype === dtype.f32) {
    const b = F.bitcast(F.select(F.isnan(x), NEG_INF, x), dtype.u32);
    const neg = F.shr(b, 31).gt(0);
    return F.select(neg, F.bitNot(b), F.bitOr(b, 0x80000000));
  }
  if (x.dtype === dtype.i32) return F.bitXor(F.bitcast(x, dtype.u32), 0x80000000);
  return x;
}

/** Per row, the smallest u32 B with tooBig(B) false (tooBig monotone: true, then false); 32 steps. */
export function bisectKeys(key, lead, tooBig) {
  let lo = F.broadcast(F.cast(i32(0), dtype.u32), lead);
  let hi = F.broadcast(F.cast(F.broadcast(u32(0xffffffff), []), dtype.u32), lead);
  for (let step = 0; step < 32; step++) {
    const mid = lo.add(hi.sub(lo).floordiv(2));
    const big = tooBig(mid);
    lo = F.select(big, mid.add(1), lo);
    hi = F.select(big, hi, mid);
  }
  return hi;
}

/** A per-row parameter tensor (x's leading axes, dtype dt) checked for `op`; null for a number. */
export function rowParam(v, x, op, dt) {
  if (!(v instanceof Tensor)) return null;
  const lead = x.shape.slice(0, -1);
  if (v.dtype !== dt || !sameShape(v.shape, lead)) {
    throw new ValidationError(`${op}: a per-row parameter must be ${dt.name} of shape [${lead.join(", ")}] (one value per ` +
      `row), got ${v.type}. Fix: reshape/cast it, or pass a number`);
  }
  return v;
}

/** Bool mask keeping the k largest along the last axis (ties -> lower index; NaN as -inf); k: int or i32 per row. */
export function topKMask(x, k) {
  x = toTensor(x, null, "top_k_mask");
  const rowsK = rowParam(k, x, "top_k_mask", dtype.i32);
  const n = x.shape.length ? x.shape[x.shape.length - 1] : 0;
  if (rowsK === null && !(Number.isInteger(k) && k >= 1 && k <= n)) {
    throw new ValidationError(`top_k_mask: k=${k} must be an int in 1..${n}. Fix: pass an integer k in that range`);
  }
  const key = orderKey(x);
  const lead = x.shape.slice(0, -1);
  const above = (b) => F.reduceSum(F.cast(key.gt(keepDims(b, x)), dtype.i32));
  const b0 = bisectKeys(key, lead, (b) => above(b).ge(k));
  const tie = F.eq(key, keepDims(b0, x));
  const tieI = F.cast(tie, dtype.i32);
  const before = F.cumsum(tieI).sub(tieI);
  const room = keepDims(F.sub(k, above(b0)), x);
  const keep = F.or(key.gt(keepDims(b0, x)), F.and(tie, before.lt(room)));
  if (rowsK === null) return keep;
  const off = F.or(rowsK.le(0), rowsK.ge(n));
  return F.or(keep, keepDims(off, x));
}

/** Keep a token when the probability mass before it in descending order is < p (p: number or f32 per row). */
export function topPMask(logits, p) {
  const x = floats(logits, "top_p_mask");
  const rowsP = rowParam(p, x, "top_p_mask", dtype.f32);
  let probs = softmax(sanitize(x));
  probs = F.select(F.isnan(probs), 0, probs); // all -inf logits: nothing is likely
  const bits = F.bitcast(probs, dtype.u32);
  const lead = x.shape.slice(0, -1);
  const massAbove = (b) => F.reduceSum(F.select(bits.gt(keepDims(b, x)), probs, 0));
  const hi = bisectKeys(bits, lead, (b) => massAbove(b).ge(p));
  const b0 = keepDims(hi, x);
  const tie = F.eq(bits, b0);
  const tieI = F.cast(tie, dtype.i32);
  const before = F.cast(F.cumsum(tieI).sub(tieI), dtype.f32);
  const limit = rowsP === null ? p : keepDims(rowsP, x);
  const keepTie = F.and(tie, keepDims(massAbove(hi), x).add(before.mul(probs)).lt(limit));
  const keep = F.or(bits.gt(b0), keepTie);
  if (rowsP === null) return keep;
  return F.or(keep, keepDims(rowsP.ge(1), x));
}

/** Keep tokens with prob >= p * max_prob (p: number or f32 per row). */
export function minPMask(logits, p) {
  const x = sanitize(floats(logits, "min_p_mask"));
  const rowsP = rowParam(p, x, "min_p_mask", dtype.f32);
  const rel = F.exp(x.sub(keepDims(F.reduceMax(x), x)));
  return rel.ge(rowsP === null ? p : keepDims(rowsP, x));
}

/** Keep tokens with prob >= a * max_prob^2 (top-a sampling). */
export function topAMask(logits, a) {
  const x = sanitize(floats(logits, "top_a_mask"));
  const probs = softmax(x);
  const pmax = keepDims(F.reduceMax(probs), x);
  return probs.ge(pmax.mul(pmax).mul(a));
}
