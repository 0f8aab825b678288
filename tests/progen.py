"""A seeded generator of random eta programs and inputs, shared by the differential tests and fuzzers.

It tracks which values are *exact* (bit-identical on every backend: inputs, integer
math, moves, selects, single comparisons of exact values) and only feeds exact
values into discontinuous ops (floor, comparisons, casts to int, arg-reductions,
sorts), so a mismatch always means a backend bug, never rounding luck.
"""

from __future__ import annotations

import numpy as np

from piegpu import dtype, eta
from piegpu.errors import ValidationError

F32, I32, U32, BOOL = dtype.f32, dtype.i32, dtype.u32, dtype.bool
DIMS = (1, 2, 3, 5, 8, 13, 33)
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0], np.float32)


def random_shape(r: np.random.Generator, max_rank: int = 3) -> tuple:
    """A small random shape of rank 0..max_rank."""
    return tuple(int(r.choice(DIMS)) for _ in range(int(r.integers(0, max_rank + 1))))


def random_input(r: np.random.Generator, ty) -> np.ndarray:
    """Random values for an input spec: moderate floats with some specials, small and wide ints."""
    shape = ty.shape
    if ty.dtype == F32:
        x = (r.standard_normal(shape) * 3).astype(np.float32)
        if r.random() < 0.3:
            mask = r.random(shape) < 0.1
            x = np.where(mask, r.choice(SPECIAL, size=shape), x).astype(np.float32)
        if r.random() < 0.2:  # ties
            x = np.round(x).astype(np.float32)
        return np.asarray(x, np.float32)
    if ty.dtype == BOOL:
        return np.asarray(r.random(shape) < 0.5)
    wide = r.random() < 0.25
    if ty.dtype == I32:
        lo, hi = ((-(1 << 31), (1 << 31) - 1) if wide else (-20, 20))
        return np.asarray(r.integers(lo, hi, size=shape, endpoint=True), np.int32)
    hi = (1 << 32) - 1 if wide else 40
    return np.asarray(r.integers(0, hi, size=shape, endpoint=True, dtype=np.uint64).astype(np.uint32))


UNARY_F = ["neg", "abs_", "sign", "recip", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "floor",
           "isnan", "isinf"]
UNARY_I = ["neg", "abs_", "sign", "bit_not"]
EXACT_UNARY_F = {"neg", "abs_", "sign", "floor", "isnan", "isinf"}
BINARY_NUM = ["add", "sub", "mul", "div", "rem", "maximum", "minimum"]
EXACT_BINARY_F = {"maximum", "minimum"}
CMP = ["eq", "ne", "lt", "le", "gt", "ge"]
INT_ONLY = ["bit_and", "bit_or", "bit_xor", "shl", "shr"]
CHAOTIC_UNARY = {"floor", "sign"}  # discontinuous: need exact inputs
REDUCES = ["reduce_sum", "reduce_max", "reduce_min", "reduce_argmax", "reduce_argmin"]


class _Gen:
    def __init__(self, r: np.random.Generator, n_ops: int):
        self.r, self.n_ops = r, n_ops
        self.pool: list = []  # (tensor, exact)

    def pick(self, pred=lambda t, e: True):
        cands = [(t, e) for t, e in self.pool if pred(t, e)]
        if not cands:
            return None
        # prefer recent values so programs are deep, not just wide
        w = np.arange(1, len(cands) + 1, dtype=np.float64)
        return cands[int(self.r.choice(len(cands), p=w / w.sum()))]

    def add(self, t, exact: bool):
        if t is not None:
            self.pool.append((t, exact))

    def step(self):
        r = self.r
        kind = r.choice(["unary", "binary", "binary", "cmp", "select", "cast", "reduce", "scan", "shape",
                         "shape", "index", "order", "matmul", "rng", "const", "intop", "composite"])
        getattr(self, "g_" + kind)()

    # -- generators per kind ----------------------------------------------------------
    def g_unary(self):
        p = self.pick(lambda t, e: t.dtype != BOOL)
        if p is None:
            return
        t, ex = p
        if t.dtype == F32:
            name = str(self.r.choice(UNARY_F))
            if name in CHAOTIC_UNARY and not ex:
                return
            if name == "exp" and not ex:
                # exp turns an absolute error e of its argument into a relative error e: an
                # approximate argument of size ~80 (a matmul with cancellation) carries f32
                # rounding of ~1e-4 that no tolerance can tell from a bug. Keep it bounded.
                t = eta.tanh(t) * 8.0
            if name in ("sin", "cos"):
                # Accurate only for |x| < 2^24 (documented): lavapipe's sin/cos break down
                # above ~2.6e7, e.g. for large ints cast to f32. Clamping is exact.
                t = eta.minimum(eta.maximum(t, -1e6), 1e6)
            self.add(getattr(eta, name)(t), ex and name in EXACT_UNARY_F)
        else:
            self.add(getattr(eta, str(self.r.choice(UNARY_I)))(t), ex)

    def _partner(self, t):
        # Never the same tensor: drivers may fold x - x to 0 even for inf (fast math).
        def ok(u, e):
            if u is t:
                return False
            try:
                eta.api.broadcast_shapes("x", u.shape, t.shape)
                return u.dtype == t.dtype
            except ValidationError:
                return False
        return self.pick(ok)

    def g_binary(self):
        p = self.pick(lambda t, e: t.dtype != BOOL)
        if p is None:
            return
        a, ea = p
        q = self._partner(a) if self.r.random() < 0.8 else None
        if q is None:
            b, eb = (float(np.round(self.r.standard_normal() * 2, 1)) if a.dtype == F32
                     else int(self.r.integers(0, 7))), True
        else:
            b, eb = q
        name = str(self.r.choice(BINARY_NUM + (["pow"] if a.dtype == F32 else INT_ONLY)))
        exact = ea and eb and (a.dtype != F32 or name in EXACT_BINARY_F)
        if a.dtype == F32 and name == "rem" and not (ea and eb):
            return  # fmod is discontinuous in its inputs
        out = getattr(eta, name)(a, b) if self.r.random() < 0.5 or not isinstance(b, eta.Tensor) else \
            getattr(eta, name)(b, a)
        self.add(out, exact)

    def g_cmp(self):
        p = self.pick(lambda t, e: e)
        if p is None:
            return
        a, _ = p
        q = self._partner(a)
        if q is None or not q[1]:
            return
        name = str(self.r.choice(CMP if a.dtype != BOOL else ["eq", "ne"]))
        self.add(getattr(eta, name)(a, q[0]), True)

    def g_select(self):
        c = self.pick(lambda t, e: t.dtype == BOOL and e)
        if c is None:
            return
        a = self.pick()
        b = self._partner(a[0])
        if b is None:
            return
        try:
            self.add(eta.select(c[0], a[0], b[0]), a[1] and b[1])
        except ValidationError:
            pass

    def g_cast(self):
        p = self.pick()
        t, ex = p
        to = self.r.choice([F32, I32, U32, BOOL])
        if t.dtype == F32 and to != F32 and not ex:
            return
        if to == F32 and t.dtype != F32:
            self.add(eta.cast(t, to), ex)
        else:
            self.add(eta.cast(t, to), ex)

    def g_reduce(self):
        p = self.pick(lambda t, e: t.ndim >= 1 and t.dtype != BOOL)
        if p is None:
            return
        t, ex = p
        name = str(self.r.choice(REDUCES))
        if name.startswith("reduce_arg") and not ex:
            return
        exact = ex and (t.dtype != F32 or name != "reduce_sum")
        self.add(getattr(eta, name)(t), exact)

    def g_scan(self):
        p = self.pick(lambda t, e: t.ndim >= 1 and t.dtype != BOOL)
        if p is None:
            return
        t, ex = p
        name = str(self.r.choice(["cumsum", "cumprod"]))
        if name == "cumprod" and t.dtype == F32:
            # Backends may multiply in any order (like sums), so an overflowing product can
            # meet a 0 as 0 * inf = NaN on one and 0 on another: keep float products bounded.
            t = eta.tanh(t) * 1.5
        self.add(getattr(eta, name)(t), ex and t.dtype != F32)

    def g_shape(self):
        t, ex = self.pick()
        r = self.r
        k = r.integers(0, 5)
        if k == 0 and t.size > 1:
            self.add(eta.reshape(t, [t.size] if t.ndim != 1 else [1, t.size]), ex)
        elif k == 1:
            new = (int(r.choice(DIMS[1:4])),) + tuple(t.shape)
            if len(new) <= 4 and np.prod(new) <= 1 << 15:
                self.add(eta.broadcast(t, new), ex)
        elif k == 2 and t.ndim == 2:
            self.add(eta.transpose(t), ex)
        elif k == 3 and t.ndim >= 1:
            q = self.pick(lambda u, e: u.ndim == t.ndim and u.shape[:-1] == t.shape[:-1] and u.dtype == t.dtype)
            if q is not None:
                self.add(eta.concat([t, q[0]]), ex and q[1])
        elif k == 4 and t.ndim >= 1 and t.shape[-1] > 1:
            n = t.shape[-1]
            s = int(r.integers(0, n - 1))
            self.add(eta.slice_last(t, s, int(r.integers(1, n - s + 1))), ex)

    def _indices(self, n: int, shape: tuple):
        vals = self.r.integers(-2, n + 2, size=shape) if shape else self.r.integers(-2, n + 2)
        dt = self.r.choice([I32, U32])
        vals = np.asarray(vals)
        if dt == U32:
            vals = np.where(vals < 0, n + 5, vals)
        return self._const_tensor(vals, dt)

    def _const_tensor(self, vals: np.ndarray, dt):
        flat = [int(v) for v in np.asarray(vals).reshape(-1)]
        if not flat:
            return None
        parts = [eta.broadcast(v if dt == I32 else int(v) & 0xFFFFFFFF, [1]) for v in flat]
        parts = [eta.cast(p, dt) for p in parts]
        t = eta.concat(parts) if len(parts) > 1 else parts[0]
        return eta.reshape(t, list(np.asarray(vals).shape) or [1]) if np.asarray(vals).shape else eta.reshape(t, [])

    def g_index(self):
        r = self.r
        p = self.pick(lambda u, e: u.ndim >= 1)
        if p is None:
            return
        t, ex = p
        k = r.integers(0, 5)
        if k == 0:
            ip = self.pick(lambda u, e: u.dtype in (I32, U32) and u.ndim <= 4 - t.ndim + 1 and e)
            idx = ip[0] if ip is not None and r.random() < 0.5 else self._indices(t.shape[0], (int(r.choice([1, 3, 4])),))
            try:
                self.add(eta.gather(t, idx), ex)
            except ValidationError:
                pass
        elif k == 1 and t.ndim == 2:
            self.add(eta.gather_row(t, self._indices(t.shape[1], (t.shape[0],))), ex)
        elif k == 2:
            kk = int(r.choice([1, 2, 5]))
            self.add(eta.take_last(t, self._indices(t.shape[-1], t.shape[:-1] + (kk,))), ex)
        elif k in (3, 4) and t.dtype != BOOL or k == 3:
            nupd = int(r.choice([1, 3, 6]))
            idx = self._indices(t.shape[0], (nupd,))
            vshape = (nupd,) + t.shape[1:]
            vp = self.pick(lambda u, e: u.dtype == t.dtype and u.shape == vshape)
            vals = vp[0] if vp is not None else eta.broadcast(eta.cast(eta.broadcast(1, []), t.dtype)
                                                              if t.dtype != BOOL else True, vshape)
            vex = vp[1] if vp is not None else True
            if k == 3:
                self.add(eta.scatter_set(t, idx, vals), ex and vex)
            else:
                self.add(eta.scatter_add(t, idx, vals), ex and vex and t.dtype != F32)

    def g_order(self):
        p = self.pick(lambda t, e: t.ndim >= 1 and e and t.dtype != BOOL)
        if p is None:
            return
        t, _ = p
        n = t.shape[-1]
        if self.r.random() < 0.4:
            v, i = eta.sort_desc(t)
        else:
            v, i = eta.top_k(t, int(self.r.integers(1, n + 1)))
        self.add(v, True)
        self.add(i, True)

    def g_matmul(self):
        p = self.pick(lambda t, e: t.ndim == 2 and t.dtype == F32)
        if p is None:
            return
        a = p[0]
        q = self.pick(lambda t, e: t.ndim == 2 and t.dtype == F32 and t.shape[0] == a.shape[1])
        b = q[0] if q is not None else eta.transpose(a)
        self.add(eta.matmul(a, b), False)

    def g_rng(self):
        p = self.pick(lambda t, e: t.dtype == U32 and t.shape == (2,) and e)
        state = p[0] if p is not None else self._const_tensor(self.r.integers(0, 1 << 32, size=2, dtype=np.uint64), U32)
        shape = random_shape(self.r)
        self.add(eta.rng(state, shape), True)

    def g_const(self):
        self.add(eta.cast(eta.iota(int(self.r.choice(DIMS))), self.r.choice([F32, I32, U32])), True)

    def g_intop(self):
        p = self.pick(lambda t, e: t.dtype in (I32, U32))
        if p is None:
            return
        a, ea = p
        q = self._partner(a)
        b, eb = q if q is not None else (int(self.r.integers(0, 40)), True)
        self.add(getattr(eta, str(self.r.choice(INT_ONLY + ["div", "rem"])))(a, b), ea and eb)

    def g_composite(self):
        p = self.pick(lambda t, e: t.dtype == F32 and t.ndim >= 1 and e)
        if p is None:
            return
        t, _ = p
        k = self.r.integers(0, 4)
        if k == 0:
            self.add(eta.softmax(t), False)
        elif k == 1:
            self.add(eta.log_softmax(t), False)
        elif k == 2:
            self.add(eta.top_k_mask(t, int(self.r.integers(1, t.shape[-1] + 1))), True)
        else:
            self.add(eta.mask_apply(t, eta.ge(t, 0.0)), True)


MAX_ELEMENTS = 1 << 16


def random_program(seed: int, n_ops: int | None = None):
    """(program, inputs, exact flags per output) for seed; deterministic; every tensor small."""
    for attempt in range(100):
        out = _random_program(seed + attempt * 1_000_003, n_ops)
        if max(n.type.size for n in out[0].nodes if n.type is not None) <= MAX_ELEMENTS:
            return out
    raise AssertionError(f"seed {seed}: no small program in 100 attempts")


def _random_program(seed: int, n_ops: int | None):
    return random_program_from(np.random.default_rng(seed), n_ops)


def random_program_from(r, n_ops: int | None = None):
    """(program, inputs, exact flags) drawn from `r`: a numpy Generator or anything with the same methods
    (tests/reliability/strategies.py feeds hypothesis draws through it so failures shrink)."""
    n_in = int(r.integers(1, 4))
    specs = []
    for _ in range(n_in):
        specs.append(eta.spec(random_shape(r) or [], r.choice([F32, F32, I32, U32, BOOL])))
    n_ops = n_ops or int(r.integers(2, 12))
    flags: list = []

    def fn(*xs):
        g = _Gen(r, n_ops)
        for x in xs:
            g.add(x, True)
        for _ in range(n_ops):
            try:
                g.step()
            except ValidationError:
                pass
        k = int(r.integers(1, 4))
        outs = g.pool[-k:]
        flags.extend(e for _, e in outs)
        return tuple(t for t, _ in outs)

    prog = eta.trace(fn, *specs)
    inputs = [random_input(r, s) for s in specs]
    return prog, inputs, flags


def compare(ref, got, exact: bool, what: str = "") -> None:
    """Assert one backend output equals the interpreter's (bitwise when exact, else a tolerance).

    Approximate outputs are not compared where the reference is inf or NaN: GPU
    drivers may compile float arithmetic with fast-math assumptions (WGSL allows
    it; lavapipe folds 0 * x and x - x to 0 even for inf), so IEEE special values
    are only guaranteed bit-exact through exact ops (moves, selects, comparisons,
    isnan/isinf, max/min, arg-reductions and sorts).
    """
    ref, got = np.asarray(ref), np.asarray(got)
    assert ref.shape == got.shape and ref.dtype == got.dtype, f"{what}: {ref.dtype}{ref.shape} vs {got.dtype}{got.shape}"
    if exact or ref.dtype != np.float32:
        np.testing.assert_array_equal(got, ref, err_msg=what)
        return
    fin = np.isfinite(ref)
    scale = float(np.max(np.abs(ref[fin]))) if fin.any() else 1.0
    np.testing.assert_allclose(got[fin], ref[fin], rtol=3e-4, atol=3e-4 * max(1.0, scale), err_msg=what)
