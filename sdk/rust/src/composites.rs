//! Composite ops, expanded into core ops at trace time: piegpu/eta/composites.py line for line
//! (the same ops in the same order, hence the same bytes). All work along the last axis.

use crate::api::*;
use crate::error::{raise, Error};
use crate::tracer::{to_tensor, Operand, Tensor, Value};
use crate::types::{shape_str, DType};

const NEG_INF: f64 = f64::NEG_INFINITY;

/// Broadcast a last-axis reduction `r` back to `like`'s shape.
pub fn keep_dims(r: Tensor, like: Tensor) -> Tensor {
    let shape: Vec<u32> = r.shape().iter().copied().chain([1]).collect();
    broadcast(reshape(r, &shape), like.shape())
}

fn floats(x: impl Operand, op: &str) -> Tensor {
    let x = to_tensor(&x.value(), None, op);
    if x.dtype() != DType::F32 {
        raise(Error::validation(format!("{op}: needs f32 logits, got {}. Fix: cast(x, DType::F32)", x.ttype())));
    }
    if x.rank() == 0 {
        raise(Error::validation(format!("{op}: needs rank >= 1, got a scalar. Fix: reshape(x, &[1])")));
    }
    x
}

/// Logits with NaN replaced by -inf (every sampler treats NaN as -inf).
pub fn sanitize(logits: impl Operand) -> Tensor {
    let x = floats(logits, "sanitize");
    select(isnan(x), NEG_INF, x)
}

/// exp(x - max) / sum(exp(x - max)) along the last axis.
pub fn softmax(x: impl Operand) -> Tensor {
    let x = floats(x, "softmax");
    let e = exp(x - keep_dims(reduce_max(x), x));
    e / keep_dims(reduce_sum(e), x)
}

/// x - max - log(sum(exp(x - max))) along the last axis.
pub fn log_softmax(x: impl Operand) -> Tensor {
    let x = floats(x, "log_softmax");
    let z = x - keep_dims(reduce_max(x), x);
    z - keep_dims(log(reduce_sum(exp(z))), x)
}

/// -sum(p * log p) over the last axis (terms with p <= 0 count 0).
pub fn entropy(p: impl Operand) -> Tensor {
    let p = floats(p, "entropy");
    neg(reduce_sum(select(p.gt(0.0), p * log(p), 0.0)))
}

/// Logits where `keep`, -inf elsewhere.
pub fn mask_apply(logits: impl Operand, keep: impl Operand) -> Tensor {
    select(keep, logits, NEG_INF)
}

/// Index of the largest kept logit (NaN as -inf; 0 when nothing is kept or finite).
pub fn masked_argmax(logits: impl Operand, keep: impl Operand) -> Tensor {
    reduce_argmax(mask_apply(logits, keep))
}

/// A sample from softmax(logits): argmax(logits + gumbel(state)); NaN as -inf.
pub fn gumbel_max(logits: impl Operand, state: impl Operand) -> Tensor {
    let x = sanitize(logits);
    reduce_argmax(x + gumbel(state, x.shape()))
}

/// u32 keys that order like the values: NaN as -inf; f32 sign-flipped, i32 offset, u32 as is.
pub fn order_key(x: Tensor) -> Tensor {
    match x.dtype() {
        DType::F32 => {
            let b = bitcast(select(isnan(x), NEG_INF, x), DType::U32);
            let neg = shr(b, 31).gt(0);
            select(neg, bit_not(b), bit_or(b, 0x8000_0000u32))
        }
        DType::I32 => bit_xor(bitcast(x, DType::U32), 0x8000_0000u32),
        _ => x,
    }
}

/// Per row, the smallest u32 B with too_big(B) false (too_big monotone: true, then false); 32 steps.
pub fn bisect_keys(lead: &[u32], mut too_big: impl FnMut(Tensor) -> Tensor) -> Tensor {
    let mut lo = broadcast(cast(0, DType::U32), lead);
    let mut hi = broadcast(cast(broadcast(0xFFFF_FFFFu32, &[]), DType::U32), lead);
    for _ in 0..32 {
        let mid = lo + (hi - lo).floordiv(2);
        let big = too_big(mid);
        lo = select(big, mid + 1, lo);
        hi = select(big, hi, mid);
    }
    hi
}

/// A per-row parameter tensor (x's leading axes, dtype `dt`) checked for `op`; None for a literal.
fn row_param(v: &Value, x: Tensor, op: &str, dt: DType) -> Option<Tensor> {
    let t = match *v {
        Value::Tensor(t) => t,
        _ => return None,
    };
    let lead = &x.shape()[..x.rank() - 1];
    if t.dtype() != dt || t.shape() != lead {
        raise(Error::validation(format!(
            "{op}: a per-row parameter must be {dt} of shape {} (one value per row), got {}. Fix: reshape/cast it, or pass a number",
            shape_str(lead), t.ttype())));
    }
    Some(t)
}

fn lead_of(x: Tensor) -> Vec<u32> {
    x.shape()[..x.rank().max(1) - 1].to_vec()
}

/// Bool mask keeping the k largest along the last axis (ties -> lower index; NaN as -inf);
/// `k`: an integer, or an i32 tensor of one k per row (k <= 0 or >= the row length keeps all).
pub fn top_k_mask(x: impl Operand, k: impl Operand) -> Tensor {
    let x = to_tensor(&x.value(), None, "top_k_mask");
    let kv = k.value();
    let n = x.shape().last().copied().unwrap_or(0) as i64;
    let rows_k = if x.rank() > 0 { row_param(&kv, x, "top_k_mask", DType::I32) } else { None };
    if rows_k.is_none() {
        let ok = match kv { Value::Int(k) => (1..=n).contains(&k), Value::UInt(k) => (1..=n).contains(&(k as i64)), _ => false };
        if !ok {
            raise(Error::validation(format!("top_k_mask: k={kv:?} must be an integer in 1..{n}. Fix: pass an integer k in that range")));
        }
    }
    let key = order_key(x);
    let lead = lead_of(x);
    let above = |b: Tensor| reduce_sum(cast(key.gt(keep_dims(b, x)), DType::I32));
    let b0 = bisect_keys(&lead, |b| above(b).ge(kv));
    let tie = eq(key, keep_dims(b0, x));
    let tie_i = cast(tie, DType::I32);
    let before = cumsum(tie_i) - tie_i;
    let room = keep_dims(sub(kv, above(b0)), x);
    let keep = or_(key.gt(keep_dims(b0, x)), and_(tie, before.lt(room)));
    match rows_k {
        None => keep,
        Some(rk) => {
            let off = or_(rk.le(0), rk.ge(n));
            or_(keep, keep_dims(off, x))
        }
    }
}

/// Keep a token when the probability mass before it in descending order is < p
/// (`p`: a number, or an f32 tensor of one p per row; p >= 1 keeps all).
pub fn top_p_mask(logits: impl Operand, p: impl Operand) -> Tensor {
    let x = floats(logits, "top_p_mask");
    let pv = p.value();
    let rows_p = row_param(&pv, x, "top_p_mask", DType::F32);
    let mut probs = softmax(sanitize(x));
    probs = select(isnan(probs), 0.0, probs); // all -inf logits: nothing is likely
    let bits = bitcast(probs, DType::U32);
    let lead = lead_of(x);
    let mass_above = |b: Tensor| reduce_sum(select(bits.gt(keep_dims(b, x)), probs, 0.0));
    let hi = bisect_keys(&lead, |b| mass_above(b).ge(pv));
    let b0 = keep_dims(hi, x);
    let tie = eq(bits, b0);
    let tie_i = cast(tie, DType::I32);
    let before = cast(cumsum(tie_i) - tie_i, DType::F32);
    let limit = match rows_p { None => pv, Some(rp) => Value::Tensor(keep_dims(rp, x)) };
    let keep_tie = and_(tie, (keep_dims(mass_above(hi), x) + before * probs).lt(limit));
    let keep = or_(bits.gt(b0), keep_tie);
    match rows_p {
        None => keep,
        Some(rp) => or_(keep, keep_dims(rp.ge(1.0), x)),
    }
}

/// Keep tokens with prob >= p * max_prob (`p`: a number, or an f32 tensor of one p per row).
pub fn min_p_mask(logits: impl Operand, p: impl Operand) -> Tensor {
    let x = sanitize(floats(logits, "min_p_mask"));
    let pv = p.value();
    let rows_p = row_param(&pv, x, "min_p_mask", DType::F32);
    let rel = exp(x - keep_dims(reduce_max(x), x)); // prob / max_prob
    match rows_p {
        None => rel.ge(pv),
        Some(rp) => rel.ge(keep_dims(rp, x)),
    }
}

/// Keep tokens with prob >= a * max_prob^2 (top-a sampling).
pub fn top_a_mask(logits: impl Operand, a: impl Operand) -> Tensor {
    let x = sanitize(floats(logits, "top_a_mask"));
    let probs = softmax(x);
    let pmax = keep_dims(reduce_max(probs), x);
    probs.ge(pmax * pmax * a.value())
}
