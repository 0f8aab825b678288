// The golden corpus programs written with the Rust tracer: the same names and the same programs as
// tests/sdk/programs.py (and sdk/js/test/programs.js), so the same container bytes
// (tests/sdk/golden/corpus.json). Shared by tests/corpus.rs and examples/dump_corpus.rs.

use piegpu_eta::*;

const F32: DType = DType::F32;
const I32: DType = DType::I32;
const U32: DType = DType::U32;
const BOOL: DType = DType::Bool;
const V: u32 = 16;

fn s(shape: &[u32], dt: DType) -> Spec {
    spec(shape, dt)
}

pub fn unary_f32() -> Result<Program, Error> {
    trace(|a| {
        let x = a[0];
        vec![neg(x), abs_(x), sign(x), recip(x), exp(x), log(x), sqrt(x), rsqrt(x), sin(x), cos(x), tanh(x), floor(x),
             isnan(x), isinf(x), -x]
    }, &[s(&[2, 3], F32)])
}

pub fn binary_f32() -> Result<Program, Error> {
    trace(|x| {
        let (a, b) = (x[0], x[1]);
        vec![a + b, a - b, a * b, a / b, a % b, a.floordiv(b), a.pow(b), maximum(a, b), minimum(a, b), pow(a, 2.0),
             1.0 - a, 2.5 / b]
    }, &[s(&[4], F32), s(&[4], F32)])
}

pub fn compare_select() -> Result<Program, Error> {
    trace(|x| {
        let (a, b) = (x[0], x[1]);
        vec![eq(a, b), ne(a, b), a.lt(b), a.le(b), a.gt(b), a.ge(b), lt(a, 0.5), select(a.gt(b), a, b),
             select(a.gt(0.0), 1.0, -1.0)]
    }, &[s(&[5], F32), s(&[5], F32)])
}

pub fn bool_logic() -> Result<Program, Error> {
    trace(|x| {
        let (p, q) = (x[0], x[1]);
        vec![p & q, p | q, !p, p ^ q, and_(p, true), or_(q, false), not_(q), cast(p, I32), select(p, q, true)]
    }, &[s(&[3], BOOL), s(&[3], BOOL)])
}

pub fn int_i32() -> Result<Program, Error> {
    trace(|x| {
        let (a, b) = (x[0], x[1]);
        vec![a + b, a - 7, a * -3, a / b, a.floordiv(2), a % b, maximum(a, i32::MIN), minimum(a, i32::MAX),
             a & b, a | 0x0F0F, a ^ b, !a, a << 3, a >> b, bit_not(b), abs_(a), sign(b), -a]
    }, &[s(&[4], I32), s(&[4], I32)])
}

pub fn u32_constants() -> Result<Program, Error> {
    trace(|a| {
        let x = a[0];
        vec![x + 0xFFFF_FFFFu32, bit_xor(x, 0x8000_0000u32), x * 2654435761u32, bit_and(x, 0xDEAD_BEEFu32),
             broadcast(0x8000_0001u32, &[2]), broadcast(4294967295u32, &[]), x >> 31, x.lt(3000000000u32)]
    }, &[s(&[4], U32)])
}

pub fn f32_constants() -> Result<Program, Error> {
    trace(|a| {
        let x = a[0];
        vec![x + f64::NEG_INFINITY, x * f64::INFINITY, x - f64::NAN, x * -0.0, x + 0.1, x * 3.4028234663852886e38,
             x + 1e-45, x + 1e40, broadcast(-2.5, &[3]), broadcast(f64::NAN, &[]), maximum(x, -1e-30)]
    }, &[s(&[3], F32)])
}

pub fn bool_and_i32_constants() -> Result<Program, Error> {
    trace(|a| {
        let x = a[0];
        vec![broadcast(true, &[2]), broadcast(false, &[]), broadcast(0, &[2]), broadcast(i32::MIN, &[2]),
             broadcast(i32::MAX, &[]), x + 1, x - 1]
    }, &[s(&[2], I32)])
}

pub fn casts() -> Result<Program, Error> {
    trace(|a| {
        let (f, i, u, b) = (a[0], a[1], a[2], a[3]);
        vec![cast(f, I32), cast(f, U32), cast(f, BOOL), cast(i, F32), cast(i, U32), cast(u, F32), cast(u, I32),
             cast(b, F32), cast(b, U32), cast(i, BOOL), bitcast(f, U32), bitcast(i, F32), bitcast(u, I32), cast(f, F32)]
    }, &[s(&[3], F32), s(&[3], I32), s(&[3], U32), s(&[3], BOOL)])
}

pub fn reductions() -> Result<Program, Error> {
    trace(|a| {
        let (x, n) = (a[0], a[1]);
        vec![reduce_sum(x), reduce_max(x), reduce_min(x), reduce_argmax(x), reduce_argmin(x), reduce_sum(n),
             reduce_argmax(n), reduce_max(reduce_max(x))]
    }, &[s(&[3, 5], F32), s(&[7], U32)])
}

pub fn scans() -> Result<Program, Error> {
    trace(|a| vec![cumsum(a[0]), cumprod(a[0]), cumsum(a[1]), cumprod(a[1])], &[s(&[2, 4], F32), s(&[5], I32)])
}

pub fn shapes() -> Result<Program, Error> {
    trace(|a| {
        let (x, y) = (a[0], a[1]);
        let r = reshape(x, &[3, 2]);
        vec![r, transpose(x), broadcast(reshape(y, &[1, 3]), &[4, 3]), concat(&[x, x, transpose(r)]),
             slice_last(x, 1, 2), iota(5), reshape(y, &[3]), x + reshape(y, &[1, 3])]
    }, &[s(&[2, 3], F32), s(&[3], F32)])
}

pub fn indexing() -> Result<Program, Error> {
    trace(|a| {
        let (src, idx, rows, col, vals) = (a[0], a[1], a[2], a[3], a[4]);
        vec![gather(src, idx), gather_row(src, col), take_last(src, rows), scatter_set(src, idx, vals),
             scatter_add(src, idx, vals), scatter_set(src, idx, 0.5), gather(iota(4), cast(idx, U32))]
    }, &[s(&[4, 3], F32), s(&[2], I32), s(&[4, 2], U32), s(&[4], I32), s(&[2, 3], F32)])
}

pub fn ordering() -> Result<Program, Error> {
    trace(|a| {
        let (v, i) = top_k(a[0], 3);
        let (sv, si) = sort_desc(a[1]);
        [v, i, sv, si]
    }, &[s(&[2, 6], F32), s(&[5], I32)])
}

pub fn linear() -> Result<Program, Error> {
    trace(|a| matmul(a[0], a[1]), &[s(&[2, 3], F32), s(&[3, 4], F32)])
}

pub fn random_draws() -> Result<Program, Error> {
    trace(|a| (rng(a[0], &[2, 3]), gumbel(a[0], &[4])), &[s(&[2], U32)])
}

pub fn softmaxes() -> Result<Program, Error> {
    trace(|a| {
        let x = a[0];
        let p = softmax(x);
        [p, log_softmax(x), entropy(p), sanitize(x)]
    }, &[s(&[2, 8], F32)])
}

pub fn masks() -> Result<Program, Error> {
    trace(|a| {
        let x = a[0];
        let keep = top_p_mask(x, 0.9);
        vec![keep, top_k_mask(x, 3), min_p_mask(x, 0.05), top_a_mask(x, 0.2), mask_apply(x, keep),
             masked_argmax(x, top_k_mask(x, 2))]
    }, &[s(&[V], F32)])
}

pub fn row_params() -> Result<Program, Error> {
    trace(|a| {
        let (x, p, k) = (a[0], a[1], a[2]);
        [top_p_mask(x, p), top_k_mask(x, k), min_p_mask(x, p)]
    }, &[s(&[2, 8], F32), s(&[2], F32), s(&[2], I32)])
}

pub fn gumbel_max_sampler() -> Result<Program, Error> {
    trace(|a| gumbel_max(a[0], a[1]), &[s(&[V], F32), s(&[2], U32)])
}

pub fn top_a_sampler() -> Result<Program, Error> {
    trace(|a| {
        let (logits, state) = (a[0], a[1]);
        let keep = top_a_mask(logits, 0.2);
        gumbel_max(mask_apply(logits / 0.8, keep), state)
    }, &[s(&[V], F32), s(&[2], U32)])
}

pub fn channels() -> Result<Program, Error> {
    trace(|a| {
        let x = a[0];
        let counter = channel("counter", &[1], I32);
        let scratch = channel("chan1", &[2], F32); // the Python side leaves it unnamed: slot 1 -> "chan1"
        let params = channel("params", &[3], F32);
        let out = channel("out", &[2], F32);
        let n = counter.take();
        let s = scratch.take();
        let p = params.read();
        counter.put(n + 1);
        scratch.put(s * 2.0);
        out.put(x * slice_last(p, 0, 2) + s);
        out.put(cast(broadcast(n, &[2]), F32));
        counter.read()
    }, &[s(&[2], F32)])
}

pub fn greedy_device_loop() -> Result<Program, Error> {
    trace_with(for_logits(V, 1), |_| {
        let token_in = channel("token_in", &[1], I32);
        let token_out = channel("token_out", &[1], I32);
        let token = reshape(reduce_argmax(intrinsics::output(0, "logits")), &[1]);
        token_in.put(token);
        token_out.put(token);
    }, &[])
}

pub fn rng_channel_sampler() -> Result<Program, Error> {
    trace(|a| {
        let rng_state = channel("rng", &[2], U32);
        let token_out = channel("token_out", &[1], I32);
        let state = rng_state.take();
        let token = gumbel_max(a[0], state);
        rng_state.put(select(eq(iota(2), 1), state + 1, state));
        token_out.put(token);
    }, &[s(&[V], F32)])
}

/// Builds one corpus program.
pub type Build = fn() -> Result<Program, Error>;

/// name -> builder, in the order of tests/sdk/programs.py.
pub fn programs() -> Vec<(&'static str, Build)> {
    vec![
        ("unary_f32", unary_f32), ("binary_f32", binary_f32), ("compare_select", compare_select),
        ("bool_logic", bool_logic), ("int_i32", int_i32), ("u32_constants", u32_constants),
        ("f32_constants", f32_constants), ("bool_and_i32_constants", bool_and_i32_constants), ("casts", casts),
        ("reductions", reductions), ("scans", scans), ("shapes", shapes), ("indexing", indexing),
        ("ordering", ordering), ("linear", linear), ("random_draws", random_draws), ("softmaxes", softmaxes),
        ("masks", masks), ("row_params", row_params), ("gumbel_max_sampler", gumbel_max_sampler),
        ("top_a_sampler", top_a_sampler), ("channels", channels), ("greedy_device_loop", greedy_device_loop),
        ("rng_channel_sampler", rng_channel_sampler),
    ]
}
