"""The programs of the shared golden corpus, written in Python.

sdk/js/test/programs.js writes the same programs with the JS tracer (same names); both
must give the bytes in tests/sdk/golden/corpus.json (regenerate with tests/sdk/make_corpus.py).
Together they cover every op of the op table, channels (take, read, put; named and not),
an intrinsic, constants of every dtype (-inf, NaN, -0.0, u32 above 2^31) and the composites.
"""

from __future__ import annotations

from piegpu import Channel, dtype, eta
from piegpu.eta import IntrinsicContext, intrinsics

F32, I32, U32, BOOL = dtype.f32, dtype.i32, dtype.u32, dtype.bool
S = eta.spec
V = 16  # vocab of the sampler programs


def unary_f32():
    def fn(x):
        return (eta.neg(x), eta.abs_(x), eta.sign(x), eta.recip(x), eta.exp(x), eta.log(x), eta.sqrt(x),
                eta.rsqrt(x), eta.sin(x), eta.cos(x), eta.tanh(x), eta.floor(x), eta.isnan(x), eta.isinf(x), -x)
    return eta.trace(fn, S([2, 3], F32))


def binary_f32():
    def fn(a, b):
        return (a + b, a - b, a * b, a / b, a % b, a // b, a ** b, eta.maximum(a, b), eta.minimum(a, b),
                eta.pow(a, 2.0), 1.0 - a, 2.5 / b)
    return eta.trace(fn, S([4], F32), S([4], F32))


def compare_select():
    def fn(a, b):
        return (eta.eq(a, b), eta.ne(a, b), a < b, a <= b, a > b, a >= b, eta.lt(a, 0.5),
                eta.select(a > b, a, b), eta.select(a > 0.0, 1.0, -1.0))
    return eta.trace(fn, S([5], F32), S([5], F32))


def bool_logic():
    def fn(p, q):
        return (p & q, p | q, ~p, p ^ q, eta.and_(p, True), eta.or_(q, False), eta.not_(q),
                eta.cast(p, I32), eta.select(p, q, True))
    return eta.trace(fn, S([3], BOOL), S([3], BOOL))


def int_i32():
    def fn(a, b):
        return (a + b, a - 7, a * -3, a / b, a // 2, a % b, eta.maximum(a, -(1 << 31)), eta.minimum(a, (1 << 31) - 1),
                a & b, a | 0x0F0F, a ^ b, ~a, a << 3, a >> b, eta.bit_not(b), eta.abs_(a), eta.sign(b), -a)
    return eta.trace(fn, S([4], I32), S([4], I32))


def u32_constants():
    def fn(x):
        return (x + 0xFFFFFFFF, eta.bit_xor(x, 0x80000000), x * 2654435761, eta.bit_and(x, 0xDEADBEEF),
                eta.broadcast(0x80000001, [2]), eta.broadcast(4294967295, []), x >> 31, x < 3000000000)
    return eta.trace(fn, S([4], U32))


def f32_constants():
    def fn(x):
        return (x + float("-inf"), x * float("inf"), x - float("nan"), x * -0.0, x + 0.1, x * 3.4028234663852886e38,
                x + 1e-45, x + 1e40, eta.broadcast(-2.5, [3]), eta.broadcast(float("nan"), []),
                eta.maximum(x, -1e-30))
    return eta.trace(fn, S([3], F32))


def bool_and_i32_constants():
    def fn(x):
        return (eta.broadcast(True, [2]), eta.broadcast(False, []), eta.broadcast(0, [2]),
                eta.broadcast(-(1 << 31), [2]), eta.broadcast((1 << 31) - 1, []), x + 1, x - 1)
    return eta.trace(fn, S([2], I32))


def casts():
    def fn(f, i, u, b):
        return (eta.cast(f, I32), eta.cast(f, U32), eta.cast(f, BOOL), eta.cast(i, F32), eta.cast(i, U32),
                eta.cast(u, F32), eta.cast(u, I32), eta.cast(b, F32), eta.cast(b, U32), eta.cast(i, BOOL),
                eta.bitcast(f, U32), eta.bitcast(i, F32), eta.bitcast(u, I32), eta.cast(f, F32))
    return eta.trace(fn, S([3], F32), S([3], I32), S([3], U32), S([3], BOOL))


def reductions():
    def fn(x, n):
        return (eta.reduce_sum(x), eta.reduce_max(x), eta.reduce_min(x), eta.reduce_argmax(x), eta.reduce_argmin(x),
                eta.reduce_sum(n), eta.reduce_argmax(n), eta.reduce_max(eta.reduce_max(x)))
    return eta.trace(fn, S([3, 5], F32), S([7], U32))


def scans():
    def fn(x, n):
        return eta.cumsum(x), eta.cumprod(x), eta.cumsum(n), eta.cumprod(n)
    return eta.trace(fn, S([2, 4], F32), S([5], I32))


def shapes():
    def fn(x, y):
        r = eta.reshape(x, [3, 2])
        return (r, eta.transpose(x), eta.broadcast(eta.reshape(y, [1, 3]), [4, 3]), eta.concat([x, x, eta.transpose(r)]),
                eta.slice_last(x, 1, 2), eta.iota(5), eta.reshape(y, [3]),
                x + eta.reshape(y, [1, 3]))
    return eta.trace(fn, S([2, 3], F32), S([3], F32))


def indexing():
    def fn(src, idx, rows, col, vals):
        return (eta.gather(src, idx), eta.gather_row(src, col), eta.take_last(src, rows),
                eta.scatter_set(src, idx, vals), eta.scatter_add(src, idx, vals), eta.scatter_set(src, idx, 0.5),
                eta.gather(eta.iota(4), eta.cast(idx, U32)))
    return eta.trace(fn, S([4, 3], F32), S([2], I32), S([4, 2], U32), S([4], I32), S([2, 3], F32))


def ordering():
    def fn(x, n):
        v, i = eta.top_k(x, 3)
        sv, si = eta.sort_desc(n)
        return v, i, sv, si
    return eta.trace(fn, S([2, 6], F32), S([5], I32))


def linear():
    return eta.trace(lambda a, b: eta.matmul(a, b), S([2, 3], F32), S([3, 4], F32))


def random_draws():
    def fn(state):
        return eta.rng(state, [2, 3]), eta.gumbel(state, [4])
    return eta.trace(fn, S([2], U32))


def softmaxes():
    def fn(x):
        p = eta.softmax(x)
        return p, eta.log_softmax(x), eta.entropy(p), eta.sanitize(x)
    return eta.trace(fn, S([2, 8], F32))


def masks():
    def fn(x):
        keep = eta.top_p_mask(x, 0.9)
        return (keep, eta.top_k_mask(x, 3), eta.min_p_mask(x, 0.05), eta.top_a_mask(x, 0.2),
                eta.mask_apply(x, keep), eta.masked_argmax(x, eta.top_k_mask(x, 2)))
    return eta.trace(fn, S([V], F32))


def row_params():
    def fn(x, p, k):
        return eta.top_p_mask(x, p), eta.top_k_mask(x, k), eta.min_p_mask(x, p)
    return eta.trace(fn, S([2, 8], F32), S([2], F32), S([2], I32))


def gumbel_max_sampler():
    return eta.trace(lambda logits, state: eta.gumbel_max(logits, state), S([V], F32), S([2], U32))


def top_a_sampler():
    """The sampler signature (logits f32[vocab], state u32[2]) -> i32 token, as API.md's top-a."""
    def fn(logits, state):
        keep = eta.top_a_mask(logits, 0.2)
        return eta.gumbel_max(eta.mask_apply(logits / 0.8, keep), state)
    return eta.trace(fn, S([V], F32), S([2], U32))


def channels():
    """take, read and put; one named and one unnamed channel (which is called "chan1")."""
    counter = Channel([1], I32).named("counter")
    scratch = Channel([2], F32)
    params = Channel([3], F32).named("params")
    out = Channel([2], F32).named("out")

    def fn(x):
        n = counter.take()
        s = scratch.take()
        p = params.read()
        counter.put(n + 1)
        scratch.put(s * 2.0)
        out.put(x * eta.slice_last(p, 0, 2) + s)
        out.put(eta.cast(eta.broadcast(n, [2]), F32))
        return counter.read()
    return eta.trace(fn, S([2], F32))


def greedy_device_loop():
    """The device loop's epilogue: argmax of readout row 0, fed back and sent to the host."""
    token_in = Channel([1], I32).named("token_in")
    token_out = Channel([1], I32).named("token_out")

    def fn():
        token = eta.reshape(eta.reduce_argmax(intrinsics.output(0, "logits")), [1])
        token_in.put(token)
        token_out.put(token)
    return eta.trace(fn, context=IntrinsicContext.for_logits(V))


def rng_channel_sampler():
    """A sampler that keeps its rng state in a channel and advances the counter every pass."""
    rng = Channel([2], U32).named("rng")
    token_out = Channel([1], I32).named("token_out")

    def fn(logits):
        state = rng.take()
        token = eta.gumbel_max(logits, state)
        rng.put(eta.select(eta.eq(eta.iota(2), 1), state + 1, state))
        token_out.put(token)
    return eta.trace(fn, S([V], F32))


PROGRAMS = {f.__name__: f for f in (
    unary_f32, binary_f32, compare_select, bool_logic, int_i32, u32_constants, f32_constants, bool_and_i32_constants,
    casts, reductions, scans, shapes, indexing, ordering, linear, random_draws, softmaxes, masks, row_params,
    gumbel_max_sampler, top_a_sampler, channels, greedy_device_loop, rng_channel_sampler)}
