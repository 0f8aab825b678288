//! The core eta ops as functions, under piegpu.eta's snake_case names (piegpu/eta/api.py).

use crate::error::{check, invalid, raise, Error};
use crate::ops::Attr;
use crate::tracer::{binary, broadcast_shapes, expand, floordiv as floordiv_values, to_tensor, value_op, Operand, Tensor, Value};
use crate::types::{check_shape, DType};

fn unary(op: &'static str, x: impl Operand) -> Tensor {
    let x = to_tensor(&x.value(), None, op);
    value_op(op, &[x], vec![])
}

macro_rules! unary_fns {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        pub fn $name(x: impl Operand) -> Tensor {
            unary(stringify!($name), x)
        }
    )*};
}

macro_rules! binary_fns {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        pub fn $name(a: impl Operand, b: impl Operand) -> Tensor {
            binary(stringify!($name), a.value(), b.value())
        }
    )*};
}

unary_fns! {
    neg; abs_; sign; recip; exp; log; sqrt; rsqrt; sin; cos; tanh; floor; isnan; isinf; not_; bit_not;
    /// Sum over the last axis, which is dropped.
    reduce_sum;
    reduce_max; reduce_min;
    /// Index (i32) of the largest element along the last axis; ties -> lowest index.
    reduce_argmax;
    reduce_argmin;
    /// Inclusive prefix sum along the last axis.
    cumsum;
    cumprod;
}

binary_fns! {
    add; sub; mul; div; rem; maximum; minimum; pow; eq; ne; lt; le; gt; ge; and_; or_; bit_and; bit_or; bit_xor; shl; shr;
}

/// Python's `a // b`: floor(a / b) for f32, truncating division for integers.
pub fn floordiv(a: impl Operand, b: impl Operand) -> Tensor {
    floordiv_values(a.value(), b.value())
}

/// Elementwise cond ? if_true : if_false, with broadcasting.
pub fn select(cond: impl Operand, if_true: impl Operand, if_false: impl Operand) -> Tensor {
    let c = to_tensor(&cond.value(), None, "select");
    let (tv, fv) = (if_true.value(), if_false.value());
    let like = match (tv, fv) {
        (Value::Tensor(t), _) | (_, Value::Tensor(t)) => Some(t),
        _ => None,
    };
    let a = to_tensor(&tv, like.as_ref(), "select");
    let b = to_tensor(&fv, Some(like.as_ref().unwrap_or(&a)), "select");
    let shape = check(broadcast_shapes("select", c.shape(), a.shape()).and_then(|s| broadcast_shapes("select", &s, b.shape())));
    value_op("select", &[expand(c, &shape), expand(a, &shape), expand(b, &shape)], vec![])
}

/// Convert to `to` (f32 -> int truncates and saturates, NaN -> 0; bool -> 0/1; number -> bool is x != 0).
pub fn cast(x: impl Operand, to: DType) -> Tensor {
    let x = to_tensor(&x.value(), None, "cast");
    if x.dtype() == to { x } else { value_op("cast", &[x], vec![Attr::DType(to)]) }
}

/// Reinterpret the 32 bits of each element as `to`.
pub fn bitcast(x: impl Operand, to: DType) -> Tensor {
    let x = to_tensor(&x.value(), None, "bitcast");
    if x.dtype() == to { x } else { value_op("bitcast", &[x], vec![Attr::DType(to)]) }
}

/// Same elements in row-major order, new static shape.
pub fn reshape(x: impl Operand, shape: &[u32]) -> Tensor {
    let x = to_tensor(&x.value(), None, "reshape");
    check(check_shape("reshape", shape));
    if x.shape() == shape { x } else { value_op("reshape", &[x], vec![Attr::Shape(shape.to_vec())]) }
}

/// Broadcast a tensor or literal to `shape` (right-aligned; source dims 1 or equal).
pub fn broadcast(x: impl Operand, shape: &[u32]) -> Tensor {
    check(check_shape("broadcast", shape));
    let x = to_tensor(&x.value(), None, "broadcast");
    expand(x, shape)
}

/// Swap the axes of a rank-2 tensor.
pub fn transpose(x: impl Operand) -> Tensor {
    unary("transpose", x)
}

/// u32 [n]: 0, 1, ..., n-1.
pub fn iota(n: u32) -> Tensor {
    value_op("iota", &[], vec![Attr::Int(n)])
}

/// Join tensors along the last axis.
pub fn concat(xs: &[Tensor]) -> Tensor {
    match xs {
        [] => raise(Error::validation("concat: pass a non-empty slice of traced tensors. Fix: concat(&[a, b])")),
        [x] => *x,
        _ => value_op("concat", xs, vec![]),
    }
}

/// x[..., start..start + size] along the last axis (static bounds).
pub fn slice_last(x: impl Operand, start: u32, size: u32) -> Tensor {
    let x = to_tensor(&x.value(), None, "slice_last");
    if start == 0 && x.rank() > 0 && size == *x.shape().last().unwrap() {
        return x;
    }
    value_op("slice_last", &[x], vec![Attr::Int(start), Attr::Int(size)])
}

fn two(op: &'static str, a: impl Operand, b: impl Operand) -> Tensor {
    let a = to_tensor(&a.value(), None, op);
    let b = to_tensor(&b.value(), None, op);
    value_op(op, &[a, b], vec![])
}

/// src[idx] along axis 0: shape idx.shape + src.shape[1..]; out-of-range rows read 0.
pub fn gather(src: impl Operand, idx: impl Operand) -> Tensor {
    two("gather", src, idx)
}

/// out[i] = src[i, idx[i]] for src[m, n], idx[m]; out of range reads 0.
pub fn gather_row(src: impl Operand, idx: impl Operand) -> Tensor {
    two("gather_row", src, idx)
}

/// out[..., j] = src[..., idx[..., j]] along the last axis; out of range reads 0.
pub fn take_last(src: impl Operand, idx: impl Operand) -> Tensor {
    two("take_last", src, idx)
}

fn scatter(op: &'static str, dst: impl Operand, idx: impl Operand, vals: impl Operand) -> Tensor {
    let dst = to_tensor(&dst.value(), None, op);
    let idx = to_tensor(&idx.value(), None, op);
    let mut vals = to_tensor(&vals.value(), Some(&dst), op);
    let want: Vec<u32> = idx.shape().iter().chain(&dst.shape()[dst.rank().min(1)..]).copied().collect();
    if vals.shape() != want.as_slice() && vals.dtype() == dst.dtype() {
        if let Ok(shape) = broadcast_shapes(op, vals.shape(), &want) {
            vals = expand(vals, &shape); // otherwise the type rule gives the clear message
        }
    }
    value_op(op, &[dst, idx, vals], vec![])
}

/// dst with rows idx[j] (axis 0) replaced by vals[j]; last write wins; out-of-range skipped.
pub fn scatter_set(dst: impl Operand, idx: impl Operand, vals: impl Operand) -> Tensor {
    scatter("scatter_set", dst, idx, vals)
}

/// dst with vals[j] added into rows idx[j] (axis 0); out-of-range skipped.
pub fn scatter_add(dst: impl Operand, idx: impl Operand, vals: impl Operand) -> Tensor {
    scatter("scatter_add", dst, idx, vals)
}

/// (values, indices) of the k largest along the last axis, descending; ties -> lower index.
pub fn top_k(x: impl Operand, k: u32) -> (Tensor, Tensor) {
    let x = to_tensor(&x.value(), None, "top_k");
    let idx = value_op("top_k_idx", &[x], vec![Attr::Int(k)]);
    (take_last(x, idx), idx)
}

/// (values, indices) of the whole last axis in descending order; ties -> lower index first.
pub fn sort_desc(x: impl Operand) -> (Tensor, Tensor) {
    let x = to_tensor(&x.value(), None, "sort_desc");
    if x.rank() == 0 {
        raise(invalid("sort_desc", "cannot sort a rank-0 tensor", "reshape(x, &[1])"));
    }
    top_k(x, *x.shape().last().unwrap())
}

/// f32 matrix product a[m, k] @ b[k, n].
pub fn matmul(a: impl Operand, b: impl Operand) -> Tensor {
    two("matmul", a, b)
}

/// Uniform f32 in (0, 1) of `shape`: a pure function of state = u32[2] [key, counter] and the index.
pub fn rng(state: impl Operand, shape: &[u32]) -> Tensor {
    let s = to_tensor(&state.value(), None, "rng");
    check(check_shape("rng", shape));
    value_op("rng", &[s], vec![Attr::Shape(shape.to_vec())])
}

/// Standard Gumbel noise -log(-log(u)) with u = rng(state, shape).
pub fn gumbel(state: impl Operand, shape: &[u32]) -> Tensor {
    let u = rng(state, shape);
    neg(log(neg(log(u))))
}
