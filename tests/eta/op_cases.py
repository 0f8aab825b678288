"""One or more small test programs per op of the eta op table, with inputs that hit the edge cases."""

from __future__ import annotations

import numpy as np

from piegpu import dtype, eta

F32, I32, U32, BOOL = dtype.f32, dtype.i32, dtype.u32, dtype.bool
S = eta.spec
R = np.random.default_rng(1234)

FSPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, np.inf, -np.inf, np.nan, 1e-3, 88.0, -100.0, 7.25,
                     2.0, -3.0], np.float32)
ISPECIAL = np.array([0, 1, -1, 7, -7, 2147483647, -2147483648, 3, -3, 100, 31, 32, 33, -100, 5, 2], np.int32)
USPECIAL = np.array([0, 1, 2, 7, 0xFFFFFFFF, 0x80000000, 3, 31, 32, 33, 100, 5, 9, 0x7FFFFFFF, 64, 4], np.uint32)
BSPECIAL = np.array([True, False] * 8)
SPECIALS = {F32: FSPECIAL, I32: ISPECIAL, U32: USPECIAL, BOOL: BSPECIAL}


def pairs(dt):
    """Every pair of the dtype's special values (a: repeated, b: tiled)."""
    v = SPECIALS[dt]
    return np.repeat(v, len(v)), np.tile(v, len(v))


def unary_case(name, dt):
    return (lambda x: getattr(eta, name)(x), [S([16], dt)], [SPECIALS[dt]])


def binary_case(name, dt):
    a, b = pairs(dt)
    return (lambda x, y: getattr(eta, name)(x, y), [S([a.size], dt), S([b.size], dt)], [a, b])


def _f(shape, lo=-3, hi=3):
    return R.uniform(lo, hi, shape).astype(np.float32)


def _ties(shape):
    return R.integers(-3, 4, shape).astype(np.float32)


CASES: dict = {}
for _n in ("neg", "abs_", "sign"):
    CASES[_n] = [unary_case(_n, F32), unary_case(_n, I32), unary_case(_n, U32)]
for _n in ("recip", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "floor", "isnan", "isinf"):
    CASES[_n] = [unary_case(_n, F32)]
CASES["not_"] = [unary_case("not_", BOOL)]
CASES["bit_not"] = [unary_case("bit_not", I32), unary_case("bit_not", U32)]
for _n in ("add", "sub", "mul", "div", "rem", "maximum", "minimum"):
    CASES[_n] = [binary_case(_n, F32), binary_case(_n, I32), binary_case(_n, U32)]
CASES["pow"] = [binary_case("pow", F32)]
for _n in ("eq", "ne"):
    CASES[_n] = [binary_case(_n, F32), binary_case(_n, I32), binary_case(_n, U32), binary_case(_n, BOOL)]
for _n in ("lt", "le", "gt", "ge"):
    CASES[_n] = [binary_case(_n, F32), binary_case(_n, I32), binary_case(_n, U32)]
for _n in ("and_", "or_"):
    CASES[_n] = [binary_case(_n, BOOL)]
for _n in ("bit_and", "bit_or", "bit_xor", "shl", "shr"):
    CASES[_n] = [binary_case(_n, I32), binary_case(_n, U32)]

_c = np.repeat(BSPECIAL, 1)
CASES["select"] = [(lambda c, a, b: eta.select(c, a, b), [S([16], BOOL), S([16], F32), S([16], F32)],
                    [BSPECIAL, FSPECIAL, FSPECIAL[::-1].copy()]),
                   (lambda c, a: eta.select(c, a, 7), [S([16], BOOL), S([16], I32)], [BSPECIAL, ISPECIAL])]
CASES["cast"] = [(lambda x, to=to: eta.cast(x, to), [S([16], src)], [SPECIALS[src]])
                 for src in (F32, I32, U32, BOOL) for to in (F32, I32, U32, BOOL) if src != to]
CASES["cast"].append((lambda x: eta.cast(x, I32), [S([6], F32)],
                      [np.array([3e9, -3e9, 2147483520.0, -2147483648.0, -0.9, 0.9], np.float32)]))
CASES["bitcast"] = [(lambda x, to=to: eta.bitcast(x, to), [S([16], src)], [SPECIALS[src]])
                    for src in (F32, I32, U32) for to in (F32, I32, U32) if src != to and to != F32]

WIDE = 262144  # vocab-sized rows: more than any single workgroup covers
for _n in ("reduce_sum", "reduce_max", "reduce_min", "reduce_argmax", "reduce_argmin"):
    CASES[_n] = [(lambda x, n=_n: getattr(eta, n)(x), [S([4, 33], F32)], [_ties((4, 33))]),
                 (lambda x, n=_n: getattr(eta, n)(x), [S([16], F32)], [FSPECIAL]),
                 (lambda x, n=_n: getattr(eta, n)(x), [S([3, 1000], I32)],
                  [R.integers(-50, 50, (3, 1000)).astype(np.int32)]),
                 (lambda x, n=_n: getattr(eta, n)(x), [S([2, 5000], U32)],
                  [R.integers(0, 1 << 32, (2, 5000), dtype=np.uint64).astype(np.uint32)]),
                 (lambda x, n=_n: getattr(eta, n)(x), [S([WIDE], F32)], [_f(WIDE)])]
for _n in ("cumsum", "cumprod"):
    CASES[_n] = [(lambda x, n=_n: getattr(eta, n)(x), [S([5, 7], I32)], [R.integers(-5, 5, (5, 7)).astype(np.int32)]),
                 (lambda x, n=_n: getattr(eta, n)(x), [S([3, 40], F32)], [_f((3, 40), 0.9, 1.1)]),
                 (lambda x, n=_n: getattr(eta, n)(x), [S([2, 3000], I32)],
                  [R.integers(-3, 4, (2, 3000)).astype(np.int32)]),
                 (lambda x, n=_n: getattr(eta, n)(x), [S([WIDE], U32)],
                  [R.integers(0, 4, WIDE).astype(np.uint32)])]
CASES["reshape"] = [(lambda x: eta.reshape(x, [3, 2, 4]), [S([4, 6], F32)], [_f((4, 6))])]
CASES["broadcast"] = [(lambda x: eta.broadcast(x, [2, 3, 4]), [S([3, 1], I32)], [np.arange(3, dtype=np.int32)[:, None]]),
                      (lambda x: eta.broadcast(x, [5]), [S([], F32)], [np.array(2.5, np.float32)])]
CASES["transpose"] = [(lambda x: eta.transpose(x), [S([3, 5], U32)], [np.arange(15, dtype=np.uint32).reshape(3, 5)])]
CASES["concat"] = [(lambda a, b: eta.concat([a, b, a]), [S([2, 3], F32), S([2, 1], F32)], [_f((2, 3)), _f((2, 1))])]
CASES["slice_last"] = [(lambda a: eta.slice_last(a, 2, 3), [S([2, 7], I32)], [np.arange(14, dtype=np.int32).reshape(2, 7)])]
CASES["gather"] = [(lambda s, i: eta.gather(s, i), [S([6, 3], F32), S([2, 4], I32)],
                    [_f((6, 3)), np.array([[0, 5, -1, 6], [2, 2, 100, -100]], np.int32)]),
                   (lambda s, i: eta.gather(s, i), [S([6], BOOL), S([5], U32)],
                    [BSPECIAL[:6], np.array([0, 5, 6, 0xFFFFFFFF, 3], np.uint32)])]
CASES["gather_row"] = [(lambda s, i: eta.gather_row(s, i), [S([4, 5], I32), S([4], I32)],
                        [np.arange(20, dtype=np.int32).reshape(4, 5), np.array([0, 4, 5, -1], np.int32)])]
CASES["take_last"] = [(lambda s, i: eta.take_last(s, i), [S([2, 5], F32), S([2, 3], U32)],
                       [_f((2, 5)), np.array([[4, 0, 9], [1, 1, 2]], np.uint32)])]
CASES["scatter_set"] = [(lambda d, i, v: eta.scatter_set(d, i, v), [S([6, 2], F32), S([5], I32), S([5, 2], F32)],
                         [_f((6, 2)), np.array([1, 3, 1, -1, 6], np.int32), _f((5, 2))]),
                        (lambda d, i: eta.scatter_set(d, i, True), [S([6], BOOL), S([3], U32)],
                         [np.zeros(6, bool), np.array([5, 0, 9], np.uint32)])]
CASES["scatter_add"] = [(lambda d, i, v: eta.scatter_add(d, i, v), [S([6], I32), S([8], I32), S([8], I32)],
                         [np.zeros(6, np.int32), np.array([1, 1, 1, 5, 0, 7, -2, 1], np.int32),
                          np.arange(8, dtype=np.int32)]),
                        (lambda d, i, v: eta.scatter_add(d, i, v), [S([4, 3], F32), S([6], U32), S([6, 3], F32)],
                         [_f((4, 3)), np.array([0, 0, 3, 3, 3, 4], np.uint32),
                          np.round(_f((6, 3)) * 4).astype(np.float32)])]
CASES["top_k_idx"] = [(lambda x: eta.top_k(x, 5), [S([3, 40], F32)], [_ties((3, 40))]),
                      (lambda x: eta.top_k(x, 4), [S([16], F32)], [FSPECIAL]),
                      (lambda x: eta.sort_desc(x), [S([16], F32)], [FSPECIAL]),
                      (lambda x: eta.sort_desc(x), [S([2, 33], I32)], [R.integers(-4, 4, (2, 33)).astype(np.int32)]),
                      (lambda x: eta.top_k(x, 40), [S([1000], U32)], [R.integers(0, 100, 1000).astype(np.uint32)]),
                      (lambda x: eta.top_k(x, 50), [S([WIDE], F32)], [_f(WIDE)]),
                      (lambda x: eta.sort_desc(x), [S([WIDE], F32)], [_ties(WIDE)])]
CASES["matmul"] = [(lambda a, b: eta.matmul(a, b), [S([5, 7], F32), S([7, 3], F32)], [_f((5, 7)), _f((7, 3))])]
CASES["rng"] = [(lambda s: eta.rng(s, [3, 1000]), [S([2], U32)], [np.array([42, 7], np.uint32)]),
                (lambda s: eta.rng(s, []), [S([2], U32)], [np.array([0xFFFFFFFF, 0xFFFFFFFF], np.uint32)])]
CASES["input"] = [(lambda x: x, [S([3], I32)], [np.array([1, 2, 3], np.int32)])]
CASES["const"] = [(lambda x: x + 1.5, [S([2], F32)], [_f(2)]),
                  (lambda x: eta.broadcast(-2147483648, [3]) + x, [S([3], I32)], [np.array([0, -1, 1], np.int32)])]
CASES["iota"] = [(lambda x: eta.iota(7) + x, [S([], U32)], [np.array(3, np.uint32)])]


def exact_case(op: str) -> bool:
    """Whether outputs of this op's cases must match bit for bit (transcendentals and sums get a tolerance)."""
    return op not in ("recip", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "pow", "reduce_sum",
                      "cumsum", "cumprod", "matmul", "scatter_add", "div")
