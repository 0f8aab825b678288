//! The tracer: a Copy tensor handle whose operators record ops into the active trace (piegpu/eta/tracer.py).

use crate::error::{check, invalid, quietly, raise, Error};
use crate::ops::{infer, is_committed, Attr};
use crate::program::{ChannelDecl, Node, Program};
use crate::types::{check_channel_name, check_shape, shape_str, DType, TType};
use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};

/// Methods `name(self, o) -> Tensor` recording the binary op of the same name.
macro_rules! binary_methods {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        $($(#[$doc])* pub fn $name(self, o: impl Operand) -> Tensor {
            binary(stringify!($name), Value::Tensor(self), o.value())
        })*
    };
}

static NEXT_TRACE: AtomicU64 = AtomicU64::new(1);

/// What the runtime provides to a trace: readout rows of logits (see [`for_logits`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Context {
    logits: Option<(TType, u32)>,
}

/// The context of a forward pass with `rows` readout rows of `vocab` f32 logits.
pub fn for_logits(vocab: u32, rows: u32) -> Context {
    Context { logits: Some((TType::new("for_logits", DType::F32, &[vocab]).expect("vocab >= 1"), rows.max(1))) }
}

type ConsKey = (&'static str, Vec<u32>, Vec<Attr>);

/// Collects the nodes of one trace; hash-conses identical nodes (as the Python and JS Builders do).
pub(crate) struct Builder {
    id: u64,
    nodes: Vec<Node>,
    cons: HashMap<ConsKey, u32>,
    declared: Vec<ChannelDecl>,
    slots: Vec<usize>, // slot -> declared channel, in first-use order
    takes: HashMap<usize, u32>,
    puts: HashMap<usize, u32>,
    context: Context,
}

thread_local! {
    static STACK: RefCell<Vec<Builder>> = const { RefCell::new(Vec::new()) };
}

/// Run `f` on the active Builder (TraceError outside trace()).
pub(crate) fn with<R>(f: impl FnOnce(&mut Builder) -> R) -> R {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        match s.last_mut() {
            Some(b) => f(b),
            None => {
                drop(s);
                raise(Error::trace("eta ops only work on traced tensors inside trace(|args| ..., &[spec(...)]). \
                                    Fix: call this from the traced function"))
            }
        }
    })
}

impl Builder {
    fn add(&mut self, op: &'static str, inputs: &[Tensor], attrs: Vec<Attr>) -> Result<Option<Tensor>, Error> {
        for t in inputs {
            if t.trace != self.id {
                return Err(Error::trace(format!("{op}: tensor {} belongs to another trace. Fix: do not reuse tensors across traces", t.ty)));
            }
        }
        let types: Vec<TType> = inputs.iter().map(|t| t.ty).collect();
        let ty = infer(op, &types, &attrs)?;
        let ids: Vec<u32> = inputs.iter().map(|t| t.id).collect();
        let key = (op, ids, attrs);
        let id = match self.cons.get(&key) {
            Some(&i) => i,
            None => {
                let i = self.nodes.len() as u32;
                self.nodes.push(Node { op, inputs: key.1.clone(), attrs: key.2.clone(), ty });
                self.cons.insert(key, i);
                i
            }
        };
        Ok(ty.map(|ty| Tensor { trace: self.id, id, ty }))
    }

    fn slot(&mut self, decl: usize) -> usize {
        match self.slots.iter().position(|&d| d == decl) {
            Some(s) => s,
            None => {
                self.slots.push(decl);
                self.slots.len() - 1
            }
        }
    }

    fn finish(self, outputs: &[Tensor]) -> Program {
        let mut live = vec![false; self.nodes.len()];
        let mut stack: Vec<u32> = (0..self.nodes.len() as u32)
            .filter(|&i| { let op = self.nodes[i as usize].op; op == "input" || is_committed(op) })
            .chain(outputs.iter().map(|t| t.id)).collect();
        while let Some(i) = stack.pop() {
            if !std::mem::replace(&mut live[i as usize], true) {
                stack.extend(&self.nodes[i as usize].inputs);
            }
        }
        let mut remap = vec![u32::MAX; self.nodes.len()];
        let mut nodes = Vec::new();
        for (i, n) in self.nodes.into_iter().enumerate() {
            if live[i] {
                remap[i] = nodes.len() as u32;
                let inputs = n.inputs.iter().map(|&j| remap[j as usize]).collect();
                nodes.push(Node { inputs, ..n });
            }
        }
        let channels = self.slots.iter().map(|&d| self.declared[d].clone()).collect();
        Program { nodes, outputs: outputs.iter().map(|t| remap[t.id as usize]).collect(), channels }
    }
}

/// Record op(inputs, attrs) in the active trace (raises on a type error); None for effects.
pub(crate) fn record(op: &'static str, inputs: &[Tensor], attrs: Vec<Attr>) -> Option<Tensor> {
    check(with(|b| b.add(op, inputs, attrs)))
}

/// Record a value op.
pub(crate) fn value_op(op: &'static str, inputs: &[Tensor], attrs: Vec<Attr>) -> Tensor {
    record(op, inputs, attrs).expect("a value op has a type")
}

/// A traced tensor: a handle to one node of the active trace, with its static dtype and shape.
///
/// Operators (`+ - * / % -x & | ^ ! << >>`) record ops; comparisons are methods (`a.lt(b)`, `a.eq(b)`).
/// `==`, `<`, ... on tensors (a Rust `bool` is needed, but the value is not known while tracing)
/// raise a TraceError at trace time; `if t { .. }` does not compile.
#[derive(Clone, Copy)]
pub struct Tensor {
    trace: u64,
    id: u32,
    ty: TType,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor(%{}: {})", self.id, self.ty)
    }
}

impl Tensor {
    /// Static shape.
    pub fn shape(&self) -> &[u32] {
        self.ty.shape()
    }
    /// Element dtype.
    pub fn dtype(&self) -> DType {
        self.ty.dtype
    }
    /// dtype and shape.
    pub fn ttype(&self) -> TType {
        self.ty
    }
    /// Number of elements.
    pub fn size(&self) -> u64 {
        self.ty.size()
    }
    /// Rank.
    pub fn rank(&self) -> usize {
        self.ty.rank()
    }

    binary_methods! {
        /// `self < o` (bool).
        lt,
        /// `self <= o` (bool).
        le,
        /// `self > o` (bool).
        gt,
        /// `self >= o` (bool).
        ge,
        /// `self == o` (bool; `==` itself is not overloaded, as in Python).
        eq,
        /// `self != o` (bool).
        ne,
    }
    /// Python's `//`: floor(a / b) for f32, truncating division for integers.
    pub fn floordiv(self, o: impl Operand) -> Tensor {
        floordiv(Value::Tensor(self), o.value())
    }
    /// Python's `**`.
    pub fn pow(self, o: impl Operand) -> Tensor {
        binary("pow", Value::Tensor(self), o.value())
    }
    pub fn abs(self) -> Tensor {
        value_op("abs_", &[self], vec![])
    }
}

// ---- literals -----------------------------------------------------------------------------------

/// An operand: a tensor or a Rust literal. Beside a tensor a literal takes the tensor's dtype (the
/// Python rule); alone (`broadcast(2.5, ..)`, `select(c, 1.0, -1.0)`) its Rust type decides:
/// f32/f64 -> f32, i32/i64 -> i32 (u32 when the value does not fit i32), u32 -> u32, bool -> bool.
#[derive(Clone, Copy, Debug)]
pub enum Value {
    Tensor(Tensor),
    Float(f64),
    Int(i64),
    UInt(u32),
    Bool(bool),
}

/// What may stand where a tensor goes: a Tensor or a literal.
pub trait Operand: Copy {
    fn value(self) -> Value;
}

impl Operand for Value {
    fn value(self) -> Value {
        self
    }
}
impl Operand for Tensor {
    fn value(self) -> Value {
        Value::Tensor(self)
    }
}
impl Operand for &Tensor {
    fn value(self) -> Value {
        Value::Tensor(*self)
    }
}
impl Operand for f64 {
    fn value(self) -> Value {
        Value::Float(self)
    }
}
impl Operand for f32 {
    fn value(self) -> Value {
        Value::Float(self as f64)
    }
}
impl Operand for i32 {
    fn value(self) -> Value {
        Value::Int(self as i64)
    }
}
impl Operand for i64 {
    fn value(self) -> Value {
        Value::Int(self)
    }
}
impl Operand for u32 {
    fn value(self) -> Value {
        Value::UInt(self)
    }
}
impl Operand for bool {
    fn value(self) -> Value {
        Value::Bool(self)
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::Tensor(t) => format!("tensor {}", t.ty),
        Value::Float(x) => format!("{x:?}"),
        Value::Int(x) => x.to_string(),
        Value::UInt(x) => format!("{x}u32"),
        Value::Bool(x) => x.to_string(),
    }
}

/// The 32-bit pattern of literal `v` as dtype `dt` (docs/container.md section 4).
pub fn scalar_bits(v: &Value, dt: DType, place: &str) -> Result<u32, Error> {
    let int = match *v {
        Value::Tensor(_) => unreachable!("scalar_bits of a tensor"),
        Value::Bool(b) if dt == DType::Bool => return Ok(b as u32),
        Value::Bool(b) => return Err(Error::validation(format!(
            "{place}: cannot mix the bool {b} with a {dt} tensor. Fix: pass a number, or cast the tensor to bool"))),
        _ if dt == DType::Bool => return Err(Error::validation(format!(
            "{place}: cannot use {} as a bool constant. Fix: pass true or false", show(v)))),
        Value::Float(x) if dt == DType::F32 => {
            return Ok(if x.is_nan() { 0x7FC0_0000 } else { (x as f32).to_bits() });
        }
        Value::Float(x) => {
            if x.fract() != 0.0 || !x.is_finite() {
                return Err(Error::validation(format!(
                    "{place}: cannot mix the fraction {x:?} with a {dt} tensor. Fix: cast the tensor with cast(x, DType::F32)")));
            }
            x as i64
        }
        Value::Int(x) => x,
        Value::UInt(x) => x as i64,
    };
    if dt == DType::F32 {
        return Ok((int as f64 as f32).to_bits());
    }
    if !(-(1i64 << 31)..(1i64 << 32)).contains(&int) {
        return Err(Error::validation(format!("{place}: {int} does not fit in 32 bits. Fix: use a smaller constant")));
    }
    Ok(int as u32)
}

/// The dtype of a literal with no tensor beside it.
fn literal_dtype(v: &Value, place: &str) -> Result<DType, Error> {
    Ok(match *v {
        Value::Tensor(t) => t.ty.dtype,
        Value::Float(_) => DType::F32,
        Value::Bool(_) => DType::Bool,
        Value::UInt(_) => DType::U32,
        Value::Int(x) if i32::try_from(x).is_ok() => DType::I32,
        Value::Int(x) if u32::try_from(x).is_ok() => DType::U32,
        Value::Int(x) => return Err(Error::validation(format!("{place}: {x} does not fit in 32 bits. Fix: use a smaller constant"))),
    })
}

/// A constant tensor of `shape` filled with literal `v` as dtype `dt`.
pub fn constant(v: impl Operand, dt: DType, shape: &[u32]) -> Tensor {
    constant_at(&v.value(), dt, shape, "const")
}

fn constant_at(v: &Value, dt: DType, shape: &[u32], place: &str) -> Tensor {
    let bits = check(scalar_bits(v, dt, place));
    let c = value_op("const", &[], vec![Attr::DType(dt), Attr::Int(bits)]);
    check(check_shape(place, shape));
    if shape.is_empty() { c } else { value_op("broadcast", &[c], vec![Attr::Shape(shape.to_vec())]) }
}

/// `v` as a traced tensor; a literal takes `like`'s dtype (or its own) and rank 0.
pub fn to_tensor(v: &Value, like: Option<&Tensor>, place: &str) -> Tensor {
    if let Value::Tensor(t) = v {
        return *t;
    }
    let dt = match like {
        Some(t) => t.ty.dtype,
        None => check(literal_dtype(v, place)),
    };
    constant_at(v, dt, &[], place)
}

/// numpy-style broadcast of two shapes (right-aligned).
pub fn broadcast_shapes(op: &str, a: &[u32], b: &[u32]) -> Result<Vec<u32>, Error> {
    let n = a.len().max(b.len());
    let pad = |s: &[u32]| -> Vec<u32> { std::iter::repeat(1).take(n - s.len()).chain(s.iter().copied()).collect() };
    let (pa, pb) = (pad(a), pad(b));
    pa.iter().zip(&pb).map(|(&x, &y)| {
        if x != y && x != 1 && y != 1 {
            Err(invalid(op, format!("cannot broadcast shapes {} and {}: dims {x} and {y} differ and neither is 1",
                                    shape_str(a), shape_str(b)), "reshape one side, e.g. reshape(m, &[rows, 1])"))
        } else {
            Ok(x.max(y))
        }
    }).collect()
}

/// Broadcast `t` to `shape` (no node when it already has that shape).
pub fn expand(t: Tensor, shape: &[u32]) -> Tensor {
    if t.shape() == shape { t } else { value_op("broadcast", &[t], vec![Attr::Shape(shape.to_vec())]) }
}

/// Record a binary elementwise op with literal promotion and numpy-style broadcasting.
pub fn binary(op: &'static str, a: Value, b: Value) -> Tensor {
    let like = match (a, b) {
        (Value::Tensor(t), _) | (_, Value::Tensor(t)) => t,
        _ => {
            with(|_| ());
            raise(Error::trace(format!("{op}: neither argument is a traced tensor. Fix: pass at least one tensor")))
        }
    };
    let x = to_tensor(&a, Some(&like), op);
    let y = to_tensor(&b, Some(&like), op);
    let shape = check(broadcast_shapes(op, x.shape(), y.shape()));
    value_op(op, &[expand(x, &shape), expand(y, &shape)], vec![])
}

/// Python's `a // b`: floor(a / b) for f32, truncating division for integers.
pub fn floordiv(a: Value, b: Value) -> Tensor {
    let q = binary("div", a, b);
    if q.dtype().is_float() { value_op("floor", &[q], vec![]) } else { q }
}

// ---- operators ----------------------------------------------------------------------------------

macro_rules! binop {
    ($trait:ident, $method:ident, $op:literal) => {
        impl<R: Operand> std::ops::$trait<R> for Tensor {
            type Output = Tensor;
            fn $method(self, r: R) -> Tensor {
                binary($op, Value::Tensor(self), r.value())
            }
        }
        binop!(@rev $trait, $method, $op, f64, f32, i32, i64, u32);
    };
    (@rev $trait:ident, $method:ident, $op:literal, $($t:ty),*) => {$(
        impl std::ops::$trait<Tensor> for $t {
            type Output = Tensor;
            fn $method(self, r: Tensor) -> Tensor {
                binary($op, self.value(), Value::Tensor(r))
            }
        }
    )*};
}

binop!(Add, add, "add");
binop!(Sub, sub, "sub");
binop!(Mul, mul, "mul");
binop!(Div, div, "div");
binop!(Rem, rem, "rem");
binop!(Shl, shl, "shl");
binop!(Shr, shr, "shr");

fn logic(op: &'static str, a: Value, b: Value) -> Tensor {
    let t = match (a, b) {
        (Value::Tensor(t), _) | (_, Value::Tensor(t)) => t,
        _ => unreachable!(),
    };
    let op = match (op, t.dtype().is_int()) {
        ("and_", true) => "bit_and",
        ("or_", true) => "bit_or",
        ("xor", true) => "bit_xor",
        ("xor", false) => "ne",
        (op, _) => op,
    };
    binary(op, a, b)
}

macro_rules! logicop {
    ($trait:ident, $method:ident, $op:literal) => {
        impl<R: Operand> std::ops::$trait<R> for Tensor {
            type Output = Tensor;
            fn $method(self, r: R) -> Tensor {
                logic($op, Value::Tensor(self), r.value())
            }
        }
        impl std::ops::$trait<Tensor> for bool {
            type Output = Tensor;
            fn $method(self, r: Tensor) -> Tensor {
                logic($op, self.value(), Value::Tensor(r))
            }
        }
    };
}

logicop!(BitAnd, bitand, "and_");
logicop!(BitOr, bitor, "or_");
logicop!(BitXor, bitxor, "xor");

impl std::ops::Neg for Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        value_op("neg", &[self], vec![])
    }
}

impl std::ops::Not for Tensor {
    type Output = Tensor;
    /// Python's `~`: bit_not of integers, not_ of bools.
    fn not(self) -> Tensor {
        value_op(if self.dtype().is_int() { "bit_not" } else { "not_" }, &[self], vec![])
    }
}

fn as_bool(t: &Tensor, what: &str) -> ! {
    raise(Error::trace(format!(
        "{what} on a traced tensor {}: a Rust bool is needed, but the value is not known while tracing. \
         Fix: compare with methods (a.lt(b), a.eq(b)) that give bool tensors, and branch with select(cond, if_true, if_false)",
        t.ty)))
}

macro_rules! no_bool_compare {
    ($($t:ty),*) => {$(
        impl PartialEq<$t> for Tensor {
            fn eq(&self, _: &$t) -> bool {
                as_bool(self, "==")
            }
        }
        impl PartialOrd<$t> for Tensor {
            fn partial_cmp(&self, _: &$t) -> Option<std::cmp::Ordering> {
                as_bool(self, "<, <=, > or >=")
            }
        }
    )*};
}

no_bool_compare!(Tensor, f64, f32, i32, u32);

// ---- channels -----------------------------------------------------------------------------------

/// A channel declared inside a trace by name and cell type; a runtime binds it by that name.
#[derive(Clone, Copy, Debug)]
pub struct Channel {
    trace: u64,
    decl: usize,
    cell: TType,
}

/// Declare (or look up) the channel `name` of this trace, with cells of `shape` and `dtype`.
pub fn channel(name: &str, shape: &[u32], dtype: DType) -> Channel {
    let place = format!("channel {name:?}");
    check(check_channel_name(name, "channel"));
    let cell = check(TType::new(&place, dtype, shape));
    with(|b| {
        if let Some(i) = b.declared.iter().position(|c| c.name == name) {
            let prev = b.declared[i].cell;
            if prev != cell {
                return Err(Error::trace(format!(
                    "channel {name:?} is declared twice in this trace, as {prev} and as {cell}. \
                     Fix: one name per channel; give the other channel another name")));
            }
            return Ok(Channel { trace: b.id, decl: i, cell });
        }
        b.declared.push(ChannelDecl { name: name.to_string(), cell });
        Ok(Channel { trace: b.id, decl: b.declared.len() - 1, cell })
    }).unwrap_or_else(|e| raise(e))
}

impl Channel {
    pub fn shape(&self) -> &[u32] {
        self.cell.shape()
    }
    pub fn dtype(&self) -> DType {
        self.cell.dtype
    }
    /// The cell type.
    pub fn cell(&self) -> TType {
        self.cell
    }

    fn slot(&self, b: &mut Builder) -> Result<usize, Error> {
        if self.trace != b.id {
            return Err(Error::trace("a channel of another trace is used here. Fix: declare channels inside the traced function"));
        }
        Ok(b.slot(self.decl))
    }

    /// The name this channel was declared with.
    pub fn name(&self) -> String {
        with(|b| b.declared[self.decl].name.clone())
    }

    /// The oldest cell, consumed when the pass commits.
    pub fn take(&self) -> Tensor {
        let c = self.cell;
        check(with(|b| {
            let slot = self.slot(b)?;
            let seq = b.takes.entry(slot).or_insert(0);
            let s = *seq;
            *seq += 1;
            b.add("chan_take", &[], vec![Attr::Int(slot as u32), Attr::Int(s), Attr::DType(c.dtype), Attr::Shape(c.shape().to_vec())])
        })).unwrap()
    }

    /// The oldest cell, not consumed.
    pub fn read(&self) -> Tensor {
        let c = self.cell;
        check(with(|b| {
            let slot = self.slot(b)?;
            b.add("chan_read", &[], vec![Attr::Int(slot as u32), Attr::DType(c.dtype), Attr::Shape(c.shape().to_vec())])
        })).unwrap()
    }

    /// Append a tensor (or a literal of the cell's dtype) as a cell when the pass commits.
    pub fn put(&self, value: impl Operand) {
        let name = self.name();
        let place = format!("put into channel {name:?}");
        let mut v = to_tensor(&value.value(), None, &place);
        if v.dtype() != self.dtype() {
            raise(Error::validation(format!(
                "{place}: tensor {} but its cells are {}. Fix: cast(x, DType::{}) before the put",
                v.ty, self.cell, match self.dtype() { DType::F32 => "F32", DType::I32 => "I32", DType::U32 => "U32", DType::Bool => "Bool" })));
        }
        if v.shape() != self.shape() {
            if v.size() != self.cell.size() {
                raise(Error::validation(format!(
                    "{place}: tensor {} does not fit cells of shape {}. Fix: reshape it to {}",
                    v.ty, shape_str(self.shape()), shape_str(self.shape()))));
            }
            v = value_op("reshape", &[v], vec![Attr::Shape(self.shape().to_vec())]);
        }
        check(with(|b| {
            let slot = self.slot(b)?;
            let seq = b.puts.entry(slot).or_insert(0);
            let s = *seq;
            *seq += 1;
            b.add("chan_put", &[v], vec![Attr::Int(slot as u32), Attr::Int(s)])
        }));
    }
}

// ---- intrinsics ---------------------------------------------------------------------------------

/// Runtime-provided values (piegpu.eta.intrinsics): the logits of the pass's readout rows.
pub mod intrinsics {
    use super::*;

    fn logits(name: &str, index: u32) -> (TType, u32) {
        let ctx = with(|b| b.context);
        let (ty, rows) = match ctx.logits {
            Some(logits) => logits,
            None => raise(Error::trace("intrinsics are only available when the trace says what the runtime provides. \
                                        Fix: trace_with(for_logits(vocab, 1), |_| ..., &[])")),
        };
        if name != "logits" {
            raise(Error::validation(format!("unknown intrinsic {name:?}. Fix: use \"logits\"")));
        }
        if index >= rows {
            raise(Error::validation(format!(
                "intrinsic {name:?} row {index} out of range: this pass has {rows} readout row(s). Fix: pick a row in range")));
        }
        (ty, rows)
    }

    /// The f32 [vocab] `name` ("logits") of readout row `index`.
    pub fn output(index: u32, name: &str) -> Tensor {
        let (ty, _) = logits(name, index);
        value_op("intrinsic", &[], vec![Attr::Str(name.to_string()), Attr::Int(index), Attr::DType(ty.dtype),
                                        Attr::Shape(ty.shape().to_vec())])
    }

    /// The f32 [rows, vocab] `name` of every readout row.
    pub fn outputs(name: &str) -> Tensor {
        let (ty, rows) = logits(name, 0);
        let shape: Vec<u32> = std::iter::once(rows).chain(ty.shape().iter().copied()).collect();
        value_op("intrinsic", &[], vec![Attr::Str(name.to_string()), Attr::Int(0), Attr::DType(ty.dtype), Attr::Shape(shape)])
    }

    /// The vocab size of the pass being traced.
    pub fn vocab() -> u32 {
        logits("logits", 0).0.shape()[0]
    }

    /// How many readout rows the pass has.
    pub fn readouts() -> u32 {
        logits("logits", 0).1
    }
}

// ---- trace --------------------------------------------------------------------------------------

/// An input spec for trace: a static shape and a dtype (checked when the trace starts).
#[derive(Clone, Debug)]
pub struct Spec(Result<TType, Error>);

/// An input spec: `spec(&[49152], DType::F32)`.
pub fn spec(shape: &[u32], dtype: DType) -> Spec {
    Spec(TType::new("spec", dtype, shape))
}

/// What a traced function returns: nothing (an epilogue that only puts), a tensor, or several.
pub trait Outputs {
    fn tensors(self) -> Vec<Tensor>;
}

impl Outputs for () {
    fn tensors(self) -> Vec<Tensor> {
        vec![]
    }
}
impl Outputs for Tensor {
    fn tensors(self) -> Vec<Tensor> {
        vec![self]
    }
}
impl Outputs for Vec<Tensor> {
    fn tensors(self) -> Vec<Tensor> {
        self
    }
}
impl<const N: usize> Outputs for [Tensor; N] {
    fn tensors(self) -> Vec<Tensor> {
        self.to_vec()
    }
}
impl Outputs for (Tensor, Tensor) {
    fn tensors(self) -> Vec<Tensor> {
        vec![self.0, self.1]
    }
}

/// Run `f` once on placeholders of `specs`, recording every op into a Program.
///
/// Mistakes inside `f` (shapes, dtypes, `==` on a tensor, a put of the wrong cell type) come back
/// as `Err(Error)` naming the op and the fix.
pub fn trace<O: Outputs>(f: impl FnOnce(&[Tensor]) -> O, specs: &[Spec]) -> Result<Program, Error> {
    trace_with(Context::default(), f, specs)
}

/// trace() with a runtime context, for epilogues that read intrinsics (`for_logits(vocab, rows)`).
pub fn trace_with<O: Outputs>(context: Context, f: impl FnOnce(&[Tensor]) -> O, specs: &[Spec]) -> Result<Program, Error> {
    let types: Vec<TType> = specs.iter().map(|s| s.0.clone()).collect::<Result<_, _>>()?;
    let id = NEXT_TRACE.fetch_add(1, Ordering::Relaxed);
    STACK.with(|s| s.borrow_mut().push(Builder {
        id, nodes: vec![], cons: HashMap::new(), declared: vec![], slots: vec![], takes: HashMap::new(),
        puts: HashMap::new(), context,
    }));
    let run = quietly(|| catch_unwind(AssertUnwindSafe(|| {
        let args: Vec<Tensor> = types.iter().enumerate().map(|(i, t)| {
            value_op("input", &[], vec![Attr::Int(i as u32), Attr::DType(t.dtype), Attr::Shape(t.shape().to_vec())])
        }).collect();
        f(&args).tensors()
    })));
    let b = STACK.with(|s| s.borrow_mut().pop()).expect("the trace's builder");
    let outs = match run {
        Ok(outs) => outs,
        Err(payload) => match payload.downcast::<Error>() {
            Ok(e) => return Err(*e),
            Err(other) => resume_unwind(other),
        },
    };
    if outs.iter().any(|t| t.trace != b.id) {
        return Err(Error::trace("trace: an output is not a tensor of this trace. Fix: return traced tensors"));
    }
    if outs.is_empty() && !b.nodes.iter().any(|n| is_committed(n.op)) {
        return Err(Error::trace("trace: the function has no outputs and no channel puts. \
                                 Fix: return the tensors you want, or put them into channels"));
    }
    if outs.len() > 64 {
        return Err(Error::trace(format!("trace: {} outputs (limit 64). Fix: concat them into fewer tensors", outs.len())));
    }
    Ok(b.finish(&outs))
}
