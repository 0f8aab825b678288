"""DRY as per-row data: every row's history, breakers and settings in channels, one penalty pass for all rows.

The math is DRY.apply/DRY.update of dry.py over a batch: histories i32 [B, L], single-token breaker
flags i32 [B, V], restart keys i32 [B, 1] and multi-token breaker tails i32 [B, K, S] are device
states (the history and the restart key loop-carried, shifted by the drawn token each pass), and
multiplier, base, allowed length, the exponent clamp and the row's window are data. The shapes (L the
longest window present, J the longest repeat length counted, K x S the breaker table) are the
epilogue's; a row with a shorter window sees its older history positions as padding, and counting
longer repeats than its own span changes nothing (its exponent is clamped at the same value), so
each row's penalties are those of the same DRY stage alone.
"""

from __future__ import annotations

import numpy as np

from .. import eta
from ..dtypes import dtype
from ..eta.composites import keep_dims
from .dry import KEY, max_exponent, restart_key

NO_CLAMP = 3.0e38  # the exponent clamp of a base without one (llama.cpp: base <= 1.000001)
FIELDS = 6  # on, multiplier, base, allowed length, exponent clamp, first position of the row's window


def dry_shape(stages) -> tuple:
    """(L, J, K, S) of the rows' DRY stages (resolved): the epilogue's history, span and breaker table sizes."""
    L = max(d.window for d in stages)
    J = max(d.span for d in stages)
    K = max(d._table_rows() for d in stages)  # noqa: SLF001 -- dry.py's own sizing, shared
    S = max(d._table_width() for d in stages)  # noqa: SLF001
    return (L, J, K, S)


class RowDry:
    """The DRY channels of a row sampler and its traced penalty and update."""

    def __init__(self, rows: int, vocab: int, shape: tuple, label: str):
        from ..runtime.channel import Channel
        self.rows, self.vocab = rows, vocab
        self.L, self.J, self.K, self.S = shape
        self.params = Channel([rows, FIELDS], dtype.f32).named(f"{label}:dry")
        self.history = Channel([rows, self.L], dtype.i32).named(f"{label}:dry-history")
        self.flags = Channel([rows, vocab], dtype.i32).named(f"{label}:dry-breakers")
        self.restart = Channel([rows, 1], dtype.i32).named(f"{label}:dry-restart")
        self.tails = Channel([rows, self.K, self.S], dtype.i32).named(f"{label}:dry-tails") if self.K else None

    def channels(self) -> tuple:
        """Every channel (for clear())."""
        return (self.params, self.history, self.flags, self.restart) + ((self.tails,) if self.tails else ())

    # ---- host ------------------------------------------------------------------------------
    def start(self, stages: list, histories: list, put=None) -> None:
        """Host: first cells; stages[i] is row i's resolved DRY (or None), histories[i] its tokens so far.
        `put(channel, cell)` puts each (default: channel.put; a restart passes one row's and overwrites it)."""
        put = put or (lambda ch, cell: ch.put(cell))
        B, L, V = len(stages), self.L, self.vocab
        params = np.zeros((B, FIELDS), np.float32)
        hist = np.tile(-(np.arange(L, dtype=np.int32) + 1), (B, 1))  # unique pads never match
        flags = np.zeros((B, V), np.int32)
        restart = np.full((B, 1), -1, np.int32)
        tails = np.full((B, self.K, self.S), -1, np.int32) if self.K else None
        for b, (d, toks) in enumerate(zip(stages, histories)):
            if d is None:
                continue
            w = d.window
            toks = [int(t) for t in toks][-w:]
            if toks:
                hist[b, L - len(toks):] = toks
            m = max_exponent(d.base)
            params[b] = (1.0, d.multiplier, d.base, d.allowed_length, float(m) if m > 0 else NO_CLAMP, L - w)
            seqs = d._resolved()  # noqa: SLF001
            for s in seqs:
                if len(s) == 1 and s[0] < V:
                    flags[b, s[0]] = 1
            restart[b, 0] = restart_key([int(t) for t in hist[b]], seqs)
            for i, s in enumerate(d._multi()):  # noqa: SLF001
                tails[b, i, :len(s)] = s
        put(self.params, params)
        put(self.history, hist)
        put(self.flags, flags)
        put(self.restart, restart)
        if self.tails is not None:
            put(self.tails, tails)

    # ---- traced ----------------------------------------------------------------------------
    def take(self) -> dict:
        """Traced: this pass's states (the history and restart key are consumed; put() puts the next ones)."""
        return {"params": self.params.read(), "history": self.history.take(), "flags": self.flags.read(),
                "restart": self.restart.take(), "tails": self.tails.read() if self.tails else None}

    def _col(self, st, j: int):
        return eta.reshape(eta.slice_last(st["params"], j, 1), [self.rows])

    def _window(self, h, st):
        """h with the positions before the row's window as padding (-(L + 1 + position): never a token or pad)."""
        B, L = self.rows, self.L
        pos = eta.broadcast(eta.cast(eta.iota(L), dtype.i32), [B, L])
        lo = eta.cast(self._col(st, 5), dtype.i32)
        return eta.select(pos < keep_dims(lo, pos), eta.neg(pos + (L + 1)), h)

    def apply(self, x, st):
        """Traced: the rows' logits after their DRY penalties (rows without DRY unchanged)."""
        B, V, L, J = self.rows, self.vocab, self.L, self.J
        h = self._window(st["history"], st)
        on = self._col(st, 0) > 0.0
        A = eta.cast(self._col(st, 3), dtype.i32)
        lo = eta.cast(self._col(st, 5), dtype.i32)
        n_valid = eta.reduce_sum(eta.cast(h >= 0, dtype.i32))
        key = eta.reshape(st["restart"], [B])
        p, s = key // KEY, key % KEY
        rep_limit = eta.select(key >= lo * KEY, (L - 1) - p - s, n_valid)
        e = eta.cast(eta.iota(L - 1), dtype.i32)
        j = eta.cast(eta.iota(J), dtype.i32)
        idx = eta.broadcast(eta.reshape(e, [L - 1, 1]), [L - 1, J]) - eta.broadcast(j, [L - 1, J])
        flat = eta.broadcast(eta.reshape(eta.maximum(idx, 0), [(L - 1) * J]), [B, (L - 1) * J])
        earlier = eta.reshape(eta.take_last(h, flat), [B, L - 1, J])
        recent = eta.take_last(h, eta.broadcast((L - 1) - j, [B, J]))
        recent = eta.broadcast(eta.reshape(recent, [B, 1, J]), [B, L - 1, J])
        same = eta.and_(eta.eq(earlier, recent), eta.broadcast(idx >= 0, [B, L - 1, J]))
        runs = eta.reduce_sum(eta.cumprod(eta.cast(same, dtype.i32)))  # [B, L - 1]
        runs = eta.minimum(runs, keep_dims(rep_limit, runs))
        nxt = eta.slice_last(h, 1, L - 1)
        live = eta.and_(eta.and_(runs >= keep_dims(A, runs), eta.slice_last(h, 0, L - 1) >= 0), nxt >= 0)
        live = eta.and_(live, keep_dims(eta.and_(n_valid > A, rep_limit >= A), runs))
        order = eta.sort_desc(eta.neg(eta.cast(runs, dtype.f32)))[1]  # ascending length: the last write is the max
        tok = eta.take_last(eta.select(live, nxt, V), order)
        lens = eta.take_last(runs, order)
        base = eta.broadcast(eta.reshape(eta.cast(eta.iota(B), dtype.i32) * V, [B, 1]), [B, L - 1])
        at = eta.reshape(eta.select(tok < V, tok + base, B * V), [B * (L - 1)])  # out of range: skipped
        rep = eta.reshape(eta.scatter_set(eta.broadcast(-1, [B * V]), at, eta.reshape(lens, [B * (L - 1)])), [B, V])
        hit = eta.and_(rep >= 0, eta.eq(st["flags"], 0))
        expo = eta.minimum(eta.cast(rep - keep_dims(A, rep), dtype.f32), keep_dims(self._col(st, 4), x))
        penalty = eta.pow(keep_dims(self._col(st, 2), x), expo) * keep_dims(self._col(st, 1), x)
        return eta.select(keep_dims(on, x), x - eta.select(hit, penalty, 0.0), x)

    def put_next(self, st, token) -> None:
        """Traced: put the next history (shifted by `token`, i32 [B]) and restart key."""
        B, L = self.rows, self.L
        new_h = eta.concat([eta.slice_last(st["history"], 1, L - 1), eta.reshape(eta.cast(token, dtype.i32), [B, 1])])
        self.history.put(new_h)
        h = self._window(new_h, st)
        last = eta.slice_last(h, L - 1, 1)  # [B, 1]
        key = st["restart"] - KEY
        single = eta.ne(eta.take_last(st["flags"], eta.maximum(last, 0)), 0)
        key = eta.maximum(key, eta.select(single, (L - 1) * KEY, -1))
        if st["tails"] is not None:
            tails, K, S = st["tails"], self.K, self.S
            full = eta.reduce_sum(eta.cast(tails >= 0, dtype.i32))  # [B, K]
            col = eta.broadcast(eta.cast(eta.iota(S), dtype.i32), [B, K, S])
            idx = eta.broadcast(eta.reshape(L - full, [B, K, 1]), [B, K, S]) + col
            got = eta.reshape(eta.take_last(h, eta.reshape(eta.maximum(idx, 0), [B, K * S])), [B, K, S])
            ok = eta.or_(eta.and_(eta.eq(got, tails), idx >= 0), tails < 0)
            match = eta.and_(eta.reduce_min(eta.cast(ok, dtype.i32)) > 0, full > 0)
            cand = eta.select(match, (L - full) * KEY + (full - 1), -1)
            key = eta.maximum(key, eta.reshape(eta.reduce_max(cand), [B, 1]))
        self.restart.put(key)


__all__ = ["RowDry", "dry_shape", "NO_CLAMP"]
