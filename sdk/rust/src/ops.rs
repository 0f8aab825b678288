//! The eta op table: the rows of piegpu/eta/ops.py (names, kinds, arities, attributes) and their type rules.
//!
//! tests/optable.rs checks this table against sdk/js/src/optable.json, the export of ops.py.

use crate::error::{invalid, Error};
use crate::types::{check_shape, shape_str, DType, TType};

/// How an attribute is stored in a container (docs/container.md section 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrKind {
    Int,
    DType,
    Shape,
    Str,
}

/// An attribute value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Attr {
    Int(u32),
    DType(DType),
    Shape(Vec<u32>),
    Str(String),
}

impl Attr {
    pub fn int(&self) -> u32 {
        match self {
            Attr::Int(v) => *v,
            _ => panic!("attribute is not an int: {self:?}"),
        }
    }

    pub fn dtype(&self) -> DType {
        match self {
            Attr::DType(d) => *d,
            _ => panic!("attribute is not a dtype: {self:?}"),
        }
    }

    pub fn shape(&self) -> &[u32] {
        match self {
            Attr::Shape(s) => s,
            _ => panic!("attribute is not a shape: {self:?}"),
        }
    }
}

/// One row of the op table.
#[derive(Debug)]
pub struct OpDef {
    pub name: &'static str,
    pub kind: &'static str,
    /// None: any number >= 1 (concat).
    pub arity: Option<usize>,
    pub attrs: &'static [(&'static str, AttrKind)],
}

use AttrKind::{DType as D, Int as I, Shape as S, Str as T};

macro_rules! rows {
    ($($name:literal $kind:literal $arity:expr, [$($a:literal: $k:ident),*];)*) => {
        /// Every op, in the order of piegpu/eta/ops.py.
        pub static OPS: &[OpDef] = &[$(OpDef { name: $name, kind: $kind, arity: $arity, attrs: &[$(($a, $k)),*] }),*];
    };
}

rows! {
    "neg" "elementwise" Some(1), [];
    "abs_" "elementwise" Some(1), [];
    "sign" "elementwise" Some(1), [];
    "recip" "elementwise" Some(1), [];
    "exp" "elementwise" Some(1), [];
    "log" "elementwise" Some(1), [];
    "sqrt" "elementwise" Some(1), [];
    "rsqrt" "elementwise" Some(1), [];
    "tanh" "elementwise" Some(1), [];
    "floor" "elementwise" Some(1), [];
    "sin" "elementwise" Some(1), [];
    "cos" "elementwise" Some(1), [];
    "isnan" "elementwise" Some(1), [];
    "isinf" "elementwise" Some(1), [];
    "not_" "elementwise" Some(1), [];
    "bit_not" "elementwise" Some(1), [];
    "add" "elementwise" Some(2), [];
    "sub" "elementwise" Some(2), [];
    "mul" "elementwise" Some(2), [];
    "div" "elementwise" Some(2), [];
    "rem" "elementwise" Some(2), [];
    "maximum" "elementwise" Some(2), [];
    "minimum" "elementwise" Some(2), [];
    "pow" "elementwise" Some(2), [];
    "eq" "elementwise" Some(2), [];
    "ne" "elementwise" Some(2), [];
    "lt" "elementwise" Some(2), [];
    "le" "elementwise" Some(2), [];
    "gt" "elementwise" Some(2), [];
    "ge" "elementwise" Some(2), [];
    "and_" "elementwise" Some(2), [];
    "or_" "elementwise" Some(2), [];
    "bit_and" "elementwise" Some(2), [];
    "bit_or" "elementwise" Some(2), [];
    "bit_xor" "elementwise" Some(2), [];
    "shl" "elementwise" Some(2), [];
    "shr" "elementwise" Some(2), [];
    "select" "elementwise" Some(3), [];
    "cast" "elementwise" Some(1), ["to": D];
    "bitcast" "elementwise" Some(1), ["to": D];
    "reduce_sum" "reduce" Some(1), [];
    "reduce_max" "reduce" Some(1), [];
    "reduce_min" "reduce" Some(1), [];
    "reduce_argmax" "reduce" Some(1), [];
    "reduce_argmin" "reduce" Some(1), [];
    "cumsum" "scan" Some(1), [];
    "cumprod" "scan" Some(1), [];
    "reshape" "shape" Some(1), ["shape": S];
    "broadcast" "shape" Some(1), ["shape": S];
    "transpose" "shape" Some(1), [];
    "concat" "shape" None, [];
    "slice_last" "shape" Some(1), ["start": I, "size": I];
    "gather" "index" Some(2), [];
    "gather_row" "index" Some(2), [];
    "take_last" "index" Some(2), [];
    "scatter_set" "scatter" Some(3), [];
    "scatter_add" "scatter" Some(3), [];
    "top_k_idx" "order" Some(1), ["k": I];
    "matmul" "linear" Some(2), [];
    "rng" "random" Some(1), ["shape": S];
    "input" "source" Some(0), ["index": I, "dtype": D, "shape": S];
    "const" "source" Some(0), ["dtype": D, "bits": I];
    "iota" "source" Some(0), ["n": I];
    "intrinsic" "source" Some(0), ["name": T, "index": I, "dtype": D, "shape": S];
    "chan_take" "source" Some(0), ["slot": I, "seq": I, "dtype": D, "shape": S];
    "chan_read" "source" Some(0), ["slot": I, "dtype": D, "shape": S];
    "chan_put" "effect" Some(1), ["slot": I, "seq": I];
}

/// The row of op `name`.
pub fn op_def(name: &str) -> Option<&'static OpDef> {
    OPS.iter().find(|d| d.name == name)
}

/// Ops whose effects commit with the pass (the dead-code roots beside inputs and outputs).
pub fn is_committed(op: &str) -> bool {
    matches!(op, "chan_take" | "chan_put")
}

/// Ops that touch a channel slot.
pub fn is_channel(op: &str) -> bool {
    matches!(op, "chan_take" | "chan_read" | "chan_put")
}

// ---- dtype rules of the ops whose inputs share one dtype ------------------------------------------

/// (accepted input dtypes, result: None = same as input, what it needs, the fix).
type DtypeRule = (fn(DType) -> bool, Option<DType>, &'static str, &'static str);

const NUMERIC: &str = "a numeric (f32, i32, u32)";
const NUMERIC_FIX: &str = "cast bool inputs with cast(x, dtype.i32)";
const F32_FIX: &str = "cast with cast(x, dtype.f32)";
const BOOL_FIX: &str = "compare first, e.g. gt(x, 0)";
const INT_FIX: &str = "cast with cast(x, dtype.i32)";

fn dtype_rule(op: &str) -> Option<DtypeRule> {
    let num = |d: DType| d.is_numeric();
    let f32 = |d: DType| d == DType::F32;
    let int = |d: DType| d.is_int();
    let boolean = |d: DType| d == DType::Bool;
    let any = |_d: DType| true;
    Some(match op {
        "neg" | "abs_" | "sign" | "add" | "sub" | "mul" | "div" | "rem" | "maximum" | "minimum" | "reduce_sum"
        | "reduce_max" | "reduce_min" | "cumsum" | "cumprod" => (num, None, NUMERIC, NUMERIC_FIX),
        "recip" | "exp" | "log" | "sqrt" | "rsqrt" | "tanh" | "floor" | "sin" | "cos" | "pow" => (f32, None, "an f32", F32_FIX),
        "isnan" | "isinf" => (f32, Some(DType::Bool), "an f32", F32_FIX),
        "not_" | "and_" | "or_" => (boolean, None, "a bool", BOOL_FIX),
        "bit_not" | "bit_and" | "bit_or" | "bit_xor" | "shl" | "shr" => (int, None, "an i32 or u32", INT_FIX),
        "eq" | "ne" => (any, Some(DType::Bool), "", ""),
        "lt" | "le" | "gt" | "ge" => (num, Some(DType::Bool), NUMERIC, NUMERIC_FIX),
        "reduce_argmax" | "reduce_argmin" => (num, Some(DType::I32), NUMERIC, NUMERIC_FIX),
        _ => return None,
    })
}

fn tt(op: &str, dtype: DType, shape: &[u32]) -> Result<TType, Error> {
    TType::new(op, dtype, shape)
}

fn same_types(op: &str, ins: &[TType]) -> Result<(), Error> {
    let first = ins[0];
    for t in &ins[1..] {
        if t.dtype != first.dtype {
            return Err(invalid(op, format!("dtype mismatch {first} vs {t}"),
                               "cast one side with cast(x, dtype) so both have the same dtype"));
        }
        if t.shape() != first.shape() {
            return Err(invalid(op, format!("shape mismatch {first} vs {t} (core ops take equal shapes)"),
                               "broadcast(x, shape) first; the operators (a + b, a.gt(b), ...) broadcast automatically"));
        }
    }
    Ok(())
}

fn check_index(op: &str, t: &TType) -> Result<(), Error> {
    if !t.dtype.is_int() {
        return Err(invalid(op, format!("indices must be i32 or u32, got {t}"),
                           "cast(idx, DType::I32); float indices are not allowed"));
    }
    Ok(())
}

/// Whether a shape broadcasts to another (right-aligned; each source dim 1 or equal).
pub fn broadcast_ok(src: &[u32], dst: &[u32]) -> bool {
    src.len() <= dst.len() && src.iter().rev().zip(dst.iter().rev()).all(|(&s, &d)| s == 1 || s == d)
}

fn attr<'a>(op: &str, names: &[(&str, AttrKind)], attrs: &'a [Attr], name: &str) -> &'a Attr {
    let i = names.iter().position(|(n, _)| *n == name).unwrap_or_else(|| panic!("{op} has no attribute {name}"));
    &attrs[i]
}

/// Run the type rule of op `name` on input types and attribute values (op-table order).
/// Ok(None) for an effect (chan_put); a ValidationError naming the op and the fix otherwise.
pub fn infer(name: &str, ins: &[TType], attrs: &[Attr]) -> Result<Option<TType>, Error> {
    let def = op_def(name).ok_or_else(|| Error::validation(format!("unknown op {name:?}. Fix: use an op of the table")))?;
    match def.arity {
        Some(n) if ins.len() != n => return Err(invalid(name, format!("takes {n} inputs, got {}", ins.len()),
                                                         "pass the right number of tensors")),
        None if ins.is_empty() => return Err(invalid(name, "takes at least one input", "pass a list of tensors")),
        _ => {}
    }
    if attrs.len() != def.attrs.len() {
        return Err(invalid(name, format!("takes {} attributes, got {}", def.attrs.len(), attrs.len()), "pass them all"));
    }
    let a = |n: &str| attr(name, def.attrs, attrs, n);
    let op = name;
    if let Some((accepts, result, needs, fix)) = dtype_rule(op) {
        let x = ins[0];
        if ins.len() > 1 {
            same_types(op, ins)?;
        }
        if !accepts(x.dtype) {
            return Err(invalid(op, format!("needs {needs} input, got {x}"), fix));
        }
        let dt = result.unwrap_or(x.dtype);
        return Ok(Some(match def.kind {
            "reduce" => {
                if x.rank() == 0 {
                    return Err(invalid(op, format!("cannot reduce a rank-0 tensor {x}"), "reshape(x, &[1]) first"));
                }
                tt(op, dt, &x.shape()[..x.rank() - 1])?
            }
            "scan" => {
                if x.rank() == 0 {
                    return Err(invalid(op, format!("cannot scan a rank-0 tensor {x}"), "reshape(x, &[1]) first"));
                }
                x
            }
            _ => x.with_dtype(dt),
        }));
    }
    let t = |d: DType, s: &[u32]| tt(op, d, s).map(Some);
    match op {
        "select" => {
            let (c, x) = (ins[0], ins[1]);
            if c.dtype != DType::Bool {
                return Err(invalid(op, format!("needs a bool condition input, got {c}"), BOOL_FIX));
            }
            same_types(op, &ins[1..])?;
            if c.shape() != x.shape() {
                return Err(invalid(op, format!("condition shape {c} differs from value shape {x}"), "broadcast the condition"));
            }
            Ok(Some(x))
        }
        "cast" => Ok(Some(ins[0].with_dtype(a("to").dtype()))),
        "bitcast" => {
            let to = a("to").dtype();
            if ins[0].dtype == DType::Bool {
                return Err(invalid(op, format!("needs a 32-bit numeric input, got {}", ins[0]), "cast bools first"));
            }
            if to == DType::Bool {
                return Err(invalid(op, "cannot bitcast to bool", "use ne(x, 0)"));
            }
            Ok(Some(ins[0].with_dtype(to)))
        }
        "reshape" => {
            let x = ins[0];
            let shape = a("shape").shape();
            check_shape(op, shape)?;
            let n: u64 = shape.iter().map(|&d| d as u64).product();
            if n != x.size() {
                return Err(invalid(op, format!("cannot reshape {x} ({} elements) to {} ({n})", x.size(), shape_str(shape)),
                                   "keep the element count equal"));
            }
            t(x.dtype, shape)
        }
        "broadcast" => {
            let x = ins[0];
            let shape = a("shape").shape();
            check_shape(op, shape)?;
            if !broadcast_ok(x.shape(), shape) {
                return Err(invalid(op, format!("cannot broadcast {x} to {}: each source dim (right-aligned) must be 1 or equal",
                                               shape_str(shape)), "reshape to insert size-1 dims where needed"));
            }
            t(x.dtype, shape)
        }
        "transpose" => {
            let x = ins[0];
            if x.rank() != 2 {
                return Err(invalid(op, format!("transpose takes a rank-2 tensor, got {x}"), "reshape to [m, n] first"));
            }
            t(x.dtype, &[x.shape()[1], x.shape()[0]])
        }
        "concat" => {
            let first = ins[0];
            if first.rank() == 0 {
                return Err(invalid(op, "cannot concat rank-0 tensors", "reshape them to [1]"));
            }
            let r = first.rank();
            for x in &ins[1..] {
                if x.dtype != first.dtype || x.rank() != r || x.shape()[..r - 1] != first.shape()[..r - 1] {
                    return Err(invalid(op, format!("inputs {first} and {x} differ in dtype, rank or leading dims"),
                                       "concat joins along the last axis; match dtype and the other dims"));
                }
            }
            let last: u64 = ins.iter().map(|x| x.shape()[r - 1] as u64).sum();
            if last > u32::MAX as u64 {
                return Err(invalid(op, "the result is too long", "concat fewer tensors"));
            }
            let mut shape = first.shape().to_vec();
            shape[r - 1] = last as u32;
            t(first.dtype, &shape)
        }
        "slice_last" => {
            let x = ins[0];
            let (start, size) = (a("start").int() as u64, a("size").int() as u64);
            if x.rank() == 0 || size < 1 || start + size > *x.shape().last().unwrap() as u64 {
                return Err(invalid(op, format!("slice [{start}:{}] out of range for {x}", start + size),
                                   "keep the slice inside the last axis"));
            }
            let mut shape = x.shape().to_vec();
            *shape.last_mut().unwrap() = size as u32;
            t(x.dtype, &shape)
        }
        "gather" => {
            let (src, idx) = (ins[0], ins[1]);
            check_index(op, &idx)?;
            if src.rank() == 0 {
                return Err(invalid(op, "gather needs a source of rank >= 1", "reshape the source to [n]"));
            }
            let shape: Vec<u32> = idx.shape().iter().chain(&src.shape()[1..]).copied().collect();
            t(src.dtype, &shape)
        }
        "gather_row" => {
            let (src, idx) = (ins[0], ins[1]);
            check_index(op, &idx)?;
            if src.rank() != 2 || idx.shape() != [src.shape()[0]] {
                return Err(invalid(op, format!("gather_row takes src[m, n] and idx[m], got {src} and {idx}"),
                                   "reshape to those shapes"));
            }
            t(src.dtype, &[src.shape()[0]])
        }
        "take_last" => {
            let (src, idx) = (ins[0], ins[1]);
            check_index(op, &idx)?;
            let r = src.rank();
            if r == 0 || idx.rank() != r || idx.shape()[..r - 1] != src.shape()[..r - 1] {
                return Err(invalid(op, format!("take_last takes x[..., n] and idx[..., k] with equal leading dims, got {src}, {idx}"),
                                   "match the leading dimensions"));
            }
            t(src.dtype, idx.shape())
        }
        "scatter_set" | "scatter_add" => {
            let (dst, idx, vals) = (ins[0], ins[1], ins[2]);
            check_index(op, &idx)?;
            if dst.rank() == 0 {
                return Err(invalid(op, "scatter needs a destination of rank >= 1", "reshape the destination to [n]"));
            }
            let want: Vec<u32> = idx.shape().iter().chain(&dst.shape()[1..]).copied().collect();
            if vals.dtype != dst.dtype || vals.shape() != want.as_slice() {
                return Err(invalid(op, format!("values {vals} must be {}{} (idx shape + dst.shape[1:])", dst.dtype, shape_str(&want)),
                                   "broadcast or cast the values"));
            }
            if op == "scatter_add" && !dst.dtype.is_numeric() {
                return Err(invalid(op, format!("cannot add into {dst}"), "use scatter_set for bool, or cast to i32"));
            }
            Ok(Some(dst))
        }
        "top_k_idx" => {
            let x = ins[0];
            if x.rank() == 0 {
                return Err(invalid(op, "top_k needs rank >= 1", "reshape to [n]"));
            }
            if !x.dtype.is_numeric() {
                return Err(invalid(op, format!("needs {NUMERIC} input, got {x}"), NUMERIC_FIX));
            }
            let n = *x.shape().last().unwrap();
            let k = a("k").int();
            if !(1..=n).contains(&k) {
                return Err(invalid(op, format!("k={k} is outside 1..{n} for {x}"), format!("pick k <= {n}")));
            }
            let mut shape = x.shape().to_vec();
            *shape.last_mut().unwrap() = k;
            t(DType::I32, &shape)
        }
        "matmul" => {
            let (x, y) = (ins[0], ins[1]);
            if x.dtype != DType::F32 || y.dtype != DType::F32 {
                return Err(invalid(op, format!("matmul is f32 only, got {x} @ {y}"), "cast both to DType::F32"));
            }
            if x.rank() != 2 || y.rank() != 2 || x.shape()[1] != y.shape()[0] {
                return Err(invalid(op, format!("matmul takes a[m, k] and b[k, n], got {x} and {y}"), "reshape or transpose"));
            }
            t(DType::F32, &[x.shape()[0], y.shape()[1]])
        }
        "rng" => {
            let s = ins[0];
            if s.dtype != DType::U32 || s.shape() != [2] {
                return Err(invalid(op, format!("state must be u32[2] = [key, counter], got {s}"), "pass a u32 tensor of shape [2]"));
            }
            t(DType::F32, a("shape").shape())
        }
        "input" | "intrinsic" | "chan_take" | "chan_read" => t(a("dtype").dtype(), a("shape").shape()),
        "const" => t(a("dtype").dtype(), &[]),
        "iota" => {
            let n = a("n").int();
            if n < 1 {
                return Err(invalid(op, format!("iota(n) needs n >= 1, got {n}"), "pass a positive int"));
            }
            t(DType::U32, &[n])
        }
        "chan_put" => Ok(None),
        _ => Err(Error::validation(format!("{op}: this SDK has no type rule for it. Fix: update sdk/rust/src/ops.rs"))),
    }
}
