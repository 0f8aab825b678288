"""One decode run of a Batch (runtime/batch.py): the drawn tokens read a window at a time and accepted per
row, and rows that change hands without draining the window.

A row belongs to one sequence after another (its tenures). When the host reads that a row's
sequence has left (stop token, its max_tokens, a stop string, a cancel), the passes submitted
meanwhile have computed that row for nothing; their tokens are discarded. If a waiting sequence
is ready and the pass fits it as it is (the same sampling key), it takes the row there and then,
with passes still in flight: the pass's uniform names its working set (Pipeline.rebind, live),
its pending token and its sampler state overwrite that row of the cells the next pass reads
(Channel.put_row, RowSampler.restart_row), all queue writes ordered after the passes in flight,
and the leaving sequence's KV is cut back to what it accepted (ordered after them too). From the
next pass on, the row's tokens are the new sequence's. Otherwise the run drains as before: a
row that leaves with nobody to take it, a sequence that joins a batch with room to spare, a grammar
row (the host puts its mask before every pass) or an interrupt end the run after the passes in flight.
"""

from __future__ import annotations

from dataclasses import dataclass

NO_LIMIT = 1 << 30  # passes a run may take: the rows' budgets end it (DecodeRun.draining)


@dataclass(eq=False)
class Tenure:
    """A sequence holding a batch row from pass `first` of the run on (1-based)."""

    seq: object
    first: int
    pending: int  # the token the row embeds next, as the host has accepted
    base: int  # its working set's length when it took the row
    budget: int  # passes it may take: its max_tokens left, or the positions its KV pages hold
    accepted: int = 0


def tenure(s, first: int) -> Tenure:
    """Sequence s taking a row from pass `first` on."""
    ws = s.session.ws
    budget = min(s.max_tokens - len(s.tokens), len(ws.pages) * ws.pool.page - ws.length)
    return Tenure(s, first, s.prompt[-1] if not s.tokens else s.tokens[-1], ws.length, budget)


class DecodeRun:
    """One decode run of a composition (see the module docstring)."""

    def __init__(self, batch, d, ready: list):
        self.batch, self.d = batch, d
        self.window = 1 if d.rows.needs_host else batch.window
        self.rows = [[tenure(s, 1)] for s in ready]  # per row, its tenures in order
        self.calls = self.read = 0
        self.drain = False

    @property
    def ready(self) -> list:
        """The sequences holding the rows now."""
        return [r[-1].seq for r in self.rows]

    @property
    def pending(self) -> list:
        """Each row's next token, as the host has accepted."""
        return [r[-1].pending for r in self.rows]

    def _next_pass(self) -> int:
        return self.read + self.d.token_out.count + 1  # passes read + those in flight, + 1

    def draining(self) -> bool:
        """Asked by run_ahead before each submit: True once the composition must change, or the next pass
        would take a row past its budget."""
        nxt = self._next_pass()
        return self.drain or any(nxt >= t.first + t.budget for t in (r[-1] for r in self.rows))

    async def on_pass(self) -> bool:
        """run_ahead's on_token: at the end of a window, read its passes (and, when draining, the rest)."""
        self.calls += 1
        if self.calls <= self.read:  # read already, with the passes of the read that started the drain
            return True
        last = self.draining() and self.d.token_out.count <= self.calls - self.read  # nothing after it comes
        if self.calls % self.window and not last:
            return True  # inside the window: no wait, the next pass goes in
        await self._read(self.calls - self.read)
        batch = self.batch
        if any(not s.ready for s in batch.active):
            await batch._prefill_round()  # between reads, behind the passes in flight
        if not self.d.rows.needs_host:
            for i, r in enumerate(self.rows):
                if r[-1].seq.done:
                    self._hand_over(i)
        if self._changing() or (batch.interrupt is not None and batch.interrupt()):
            self.drain = True
        if self.draining():
            rest = self.d.token_out.count  # the passes submitted meanwhile: read them all with one wait
            if rest:
                await self._read(rest)
        elif self.d.rows.needs_host:
            self.d.rows.put_mask([s.params for s in self.ready], [s.row_state for s in self.ready])
        return True

    def _changing(self) -> bool:
        """A row left with nobody to take it, or a waiting sequence is ready and has room: the next composition
        must start."""
        if any(s.done for s in self.ready):
            return True
        batch = self.batch
        return len(self.rows) < batch.max_batch and any(s.ready and s not in self.ready for s in batch.active)

    def _hand_over(self, i: int) -> None:
        """Row i's sequence has left: a ready waiting sequence the pass fits takes the row now, if there is one."""
        batch, d = self.batch, self.d
        holders = self.ready
        for w in batch.active:
            if not w.ready or w in holders:
                continue
            params = [s.params for s in holders]
            params[i] = w.params
            if batch.sampling.key(params) != d.key:
                continue
            if not batch._reserve_ahead(w, w.max_tokens - len(w.tokens)):
                continue  # (it left with the pool's error)
            old = self.rows[i][-1]
            wss = [s.session.ws for s in holders]
            wss[i] = w.session.ws
            batch.pipe.rebind(d.fwd, wss, live=True)
            d.wss = wss
            t = tenure(w, self._next_pass())
            d.tokens.put_row(i, t.pending)
            d.rows.restart_row(i, w.params, len(w.tokens), w.row_state)
            gone = old.seq.session.ws  # keeps what it accepted (after the passes in flight, in queue order)
            if gone.length > old.base + old.accepted:
                gone.set_length(old.base + old.accepted)
            self.rows[i].append(t)
            batch.stats.handovers += 1
            if batch.on_leave is not None:  # the one that left is done now, not when the run ends
                batch.on_leave()
            return

    def _holder(self, i: int, p: int) -> Tenure:
        """Row i's tenure at pass p."""
        return next(t for t in reversed(self.rows[i]) if t.first <= p)

    async def _read(self, n: int) -> None:
        d, stats = self.d, self.batch.stats
        drawn = [a.tolist() for a in await d.token_out.take_many(n)]
        lps = [a.tolist() for a in await d.lp_out.take_many(n)] if d.lp_out is not None else None
        tops = None
        if d.top_out is not None:
            vals, ids = await d.top_out[0].take_many(n), await d.top_out[1].take_many(n)
            tops = [[list(zip(i, v)) for i, v in zip(a.tolist(), b.tolist())] for a, b in zip(ids, vals)]
        carried = await d.carry_out.take_many(n) if d.carry_out is not None else None
        first = self.read + 1
        self.read += n
        stats.host_waits += 1
        stats.decode_passes += n
        stats.rows += n * len(self.rows)
        for i in range(len(self.rows)):
            waited = set()
            for k in range(n):
                t = self._holder(i, first + k)
                s = t.seq
                if s.done:
                    s.discarded += 1
                    stats.discarded += 1
                    continue
                if s not in waited:
                    waited.add(s)
                    s.host_waits += 1
                self._accept(t, drawn[k][i], lps[k][i] if lps else None, tops[k][i] if tops else None,
                             carried[k][i] if carried is not None else None)

    @staticmethod
    def _accept(t: Tenure, tok: int, lp, top, carried=None) -> None:
        s = t.seq
        if s.cancel_requested:
            s.finish_reason = "cancelled"
            return
        s.session.embedded([t.pending])
        s.session.pending = t.pending = tok
        t.accepted += 1
        if tok in s.stop_ids:
            s.finish_reason = "stop"
            return
        s.tokens.append(tok)
        if s.row_state is not None:
            s.row_state.observe(tok, carried)
        if s.params.logprobs:
            s.logprobs.append(lp)
        if getattr(s.params, "top_logprobs", 0):
            s.top_logprobs.append(top[: s.params.top_logprobs])
        keep = s.on_token(s, tok) if s.on_token is not None else True
        if keep is False or s.cancel_requested:
            s.finish_reason = "stop" if keep is False else "cancelled"
        elif len(s.tokens) >= s.max_tokens:
            s.finish_reason = "length"

    def settle(self) -> None:
        """After the run: a sequence that left keeps only the KV of the passes it accepted."""
        for r in self.rows:
            for t in r:
                ws = t.seq.session.ws
                if t.seq.done and ws.length > t.base + t.accepted:
                    ws.set_length(t.base + t.accepted)
