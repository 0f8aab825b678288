"""Sampling every row of a batched pass in one epilogue, with each row's parameters as device data.

One compiled epilogue serves any mix of requests: the temperature, every truncation stage
(row_stages.py: top-k, top-p, min-p, typical, top-a, p-less, epsilon/eta cutoffs,
top-n-sigma, XTC, dynamic temperature, tail-free, Mirostat v2 and v1, in each row's own
order), the penalties, logit biases, DRY (row_dry.py), a grammar mask and the RNG state
[seed, draws] of every row come from channels, never from trace-time constants, so a
request with another top_p compiles nothing. Per row the math is the Sampler chain's
(grammar mask -> logit bias -> penalties -> DRY -> temperature -> truncations -> Gumbel-max;
temperature 0 is greedy), and each row draws its Gumbel noise (and XTC its coin) from its
own [seed, draws] state, exactly as a one-sequence generation with that seed does: a row's
tokens do not depend on which other rows share the pass.

The host puts every channel's first cell once per batch composition (start()); after
that the passes run on device data alone, so a batch can run ahead without the host:
the settings are read (not consumed) each pass, and the state that changes as a row
decodes is loop-carried on the device -- each pass takes the RNG state, the seen-token
counts of the penalties (i32 [rows, vocab]), DRY's history and Mirostat's mu and puts them
back advanced by the token it drew. The host keeps its own copy in a RowState (for the next
composition): counts and history from the tokens it reads, mu read back beside them
(carried()). Only a grammar needs the host between tokens: its mask (packed u32 words
[rows, vocab/32]) is taken each pass and put by the host (put_mask()) after it has seen
the row's last token. Only which stages are present (and the order of the truncations)
shapes the epilogue (see row_params.structure_of).
"""

from __future__ import annotations

import numpy as np

from .. import eta
from ..dtypes import dtype
from ..errors import ValidationError
from ..eta.composites import keep_dims
from .chain import F32_MAX, rng_advance
from .llamacpp import NEG_INF
from .row_dry import RowDry
from .row_params import FLAGS, TOP_LOGPROBS, RowKey, RowParams, RowState, structure_of
from .row_stages import Layout, RowContext, row_states

STAGES = RowKey(frozenset(FLAGS))  # every flag, no truncation slots: the default of a RowSampler made by hand


class RowSampling:
    """Makes row samplers for a runtime Batch: one per (batch size, RowKey)."""

    def __init__(self, vocab: int):
        self.vocab = vocab

    def key(self, params: list) -> RowKey:
        """What distinguishes the epilogues these rows need (see structure_of)."""
        return structure_of(params)

    def make(self, rows: int, key: RowKey) -> "RowSampler":
        """A row sampler for `rows` rows with the stages of `key`."""
        return RowSampler(rows, self.vocab, key=key)


class RowSampler:
    """Parameter channels for `rows` rows and the traced step that samples all of them."""

    def __init__(self, rows: int, vocab: int, label: str = "rows", key: RowKey = STAGES):
        from ..runtime.channel import Channel
        self.rows, self.vocab = rows, vocab
        self.key = key
        self.stages = key.flags
        self.words = -(-vocab // 32)
        self.floats = Channel([rows, 1], dtype.f32).named(f"{label}:inv-temperature")
        self.ints = Channel([rows, 1], dtype.i32).named(f"{label}:greedy")
        self.rng = Channel([rows, 2], dtype.u32).named(f"{label}:rng")
        self.layout = Layout(key.slots) if key.slots and "sample" in self.stages else None
        self.extra = {}  # stage -> its channel, only for the stages this sampler has
        if self.layout is not None:
            self.extra["slots"] = Channel([rows, self.layout.width], dtype.f32).named(f"{label}:truncations")
            if self.layout.mirostat:
                self.extra["mu"] = Channel([rows, 1], dtype.f32).named(f"{label}:mirostat-mu")
        if "penalties" in self.stages:
            self.extra["penalties"] = Channel([rows, 4], dtype.f32).named(f"{label}:1/rep,rep,presence,frequency")
            self.extra["counts"] = Channel([rows, vocab], dtype.i32).named(f"{label}:seen-counts")
        if "bias" in self.stages:
            self.extra["bias"] = Channel([rows, vocab], dtype.f32).named(f"{label}:logit-bias")
        if "mask" in self.stages:
            self.extra["mask"] = Channel([rows, self.words], dtype.u32).named(f"{label}:grammar-mask")
        if key.table:  # device grammar automata (inferlets/automaton.py): tables per row, the state loop-carried
            self.extra["gstate"] = Channel([rows, 2], dtype.i32).named(f"{label}:grammar-state")
            const = lambda shape, what: Channel(shape, dtype.i32, constant=True).named(f"{label}:{what}")  # noqa: E731
            self.extra["class_of"] = const([rows, vocab], "grammar-classes")
            self.extra["table"] = const([rows, key.table], "grammar-table")
        self.dry = RowDry(rows, vocab, key.dry, label) if key.dry is not None else None
        self._mu_next = None  # traced: mu after this pass (carried())
        self._grammar = None  # traced: (state cell, classes, flat tables, row bases) of this pass

    @property
    def needs_host(self) -> bool:
        """Whether a pass needs a host put first (a grammar mask), so passes cannot run ahead."""
        return "mask" in self.extra

    @property
    def carry_width(self) -> int:
        """Columns of the per-row device state read back with each token (Mirostat's mu), 0 for none."""
        return 1 if "mu" in self.extra else 0

    def carried(self):
        """Traced, after step(): f32 [rows, carry_width] the rows' carried state after this pass."""
        return self._mu_next

    def start(self, params: list, draws: list, states: list | None = None, put=None) -> None:
        """Host: every channel's first cell (after clear()); draws[i] = tokens row i has drawn so far.

        `states[i]` is row i's RowState (needed when a row is penalized, constrained, has DRY or Mirostat).
        `put(channel, cell)` puts each cell (default: channel.put; restart_row overwrites one row instead).
        """
        states = [None] * self.rows if states is None else list(states)
        if len(params) != self.rows or len(draws) != self.rows or len(states) != self.rows:
            raise ValidationError(f"RowSampler.put: {len(params)} settings, {len(draws)} draw counts and "
                                  f"{len(states)} row states for {self.rows} rows. Fix: one of each per row")
        self._cells(params, draws, states, put or (lambda ch, cell: ch.put(cell)))
        if "mask" in self.extra:
            self.put_mask(params, states)

    def _cells(self, params: list, draws: list, states: list, put, first: int = 0) -> None:
        """Every channel's cells (but the grammar mask) for the rows of `params`: all of them, or from row
        `first` on (a restart puts one row's)."""
        n = len(params)
        rows = lambda: enumerate(zip(params, states), start=first)  # noqa: E731 -- (row, (params, state))
        f = np.array([[1.0 / p.temperature if p.temperature > 0 else 1.0] for p in params], np.float32)
        i = np.array([[p.temperature == 0] for p in params], np.int32)  # 1/T rounded once, as Sampler's constant is
        r = np.array([[p.seed, d & 0xFFFFFFFF] for p, d in zip(params, draws)], np.uint32)
        put(self.floats, f)
        put(self.ints, i)
        put(self.rng, r)
        if self.layout is not None:
            put(self.extra["slots"], np.stack([self.layout.row(p.truncations) for p in params]))
            if "mu" in self.extra:
                put(self.extra["mu"], np.array([[self._state(st, row, "mu") if p.mirostat else 0.0]
                                               for row, (p, st) in rows()], np.float32))
        if "penalties" in self.extra:
            put(self.extra["penalties"], np.array([[1.0 / p.repetition_penalty, p.repetition_penalty,
                                                   p.presence_penalty, p.frequency_penalty] for p in params],
                                                 np.float32))
            counts = np.zeros((n, self.vocab), np.int32)
            for row, (p, st) in rows():
                if p.penalized:
                    counts[row - first] = self._state(st, row, "counts")
            put(self.extra["counts"], counts)
        if "bias" in self.extra:
            bias = np.zeros((n, self.vocab), np.float32)
            for row, p in enumerate(params):
                for tok, b in p.logit_bias:
                    if tok >= self.vocab:
                        raise ValidationError(f"logit_bias: token {tok} is outside the vocab [0, {self.vocab}). "
                                              "Fix: use ids from this model's tokenizer")
                    bias[row, tok] = b
            put(self.extra["bias"], bias)
        if "gstate" in self.extra:
            self._automata(params, states, put, first)
        if self.dry is not None:
            self.dry.start([p.dry for p in params],
                           [self._state(st, row, "history") if p.dry is not None else ()
                            for row, (p, st) in rows()], put)

    def _automata(self, params: list, states: list, put, first: int) -> None:
        """The grammar cells of rows first.. : a row without an automaton allows every token (one class, state 0,
        table [0] = 0); a row with one starts in its RowState's automaton state."""
        n, T = len(params), self.key.table
        cells = np.tile(np.array([[0, 1]], np.int32), (n, 1))
        classes = np.zeros((n, self.vocab), np.int32)
        tables = np.full((n, T), -1, np.int32)
        tables[:, 0] = 0
        for i, (p, st) in enumerate(zip(params, states)):
            if p.automaton:
                a = self._state(st, first + i, "automaton")
                cells[i] = (st.automaton_state, a.classes)
                classes[i] = a.class_of
                tables[i] = a.device_arrays(T)[1]
        put(self.extra["gstate"], cells)
        put(self.extra["class_of"], classes)
        put(self.extra["table"], tables)

    def restart_row(self, row: int, params, draws: int, state=None) -> None:
        """Host: row `row` starts over as a new sequence (params, tokens drawn so far, its RowState) in the cells
        the next pass reads, while the other rows go on from the device (a batch row changing hands)."""
        self._cells([params], [draws], [state], lambda ch, cell: ch.put_row(row, cell[0]), first=row)

    def clear_mask(self) -> None:
        """Host: drop a queued grammar mask (no pass in flight)."""
        self.extra["mask"].clear()

    def put_mask(self, params: list, states: list) -> None:
        """Host: the grammar mask of every row for the next pass (rows without a grammar allow everything)."""
        words = np.full((self.rows, self.words), 0xFFFFFFFF, np.uint32)
        for row, (p, st) in enumerate(zip(params, states)):
            if p.constrained:
                self._state(st, row, "constraint").mask_into(words[row])
        self.extra["mask"].put(words)

    @staticmethod
    def _state(st, row: int, what: str):
        value = getattr(st, what, None)
        if value is None:
            raise ValidationError(f"RowSampler.put: row {row} needs its RowState's {what}. Fix: give the sequence "
                                  "a RowState made from its params")
        return value

    def clear(self) -> None:
        """Host: drop queued settings (after a stopped pass)."""
        for ch in (self.floats, self.ints, self.rng, *self.extra.values(),
                   *(self.dry.channels() if self.dry is not None else ())):
            ch.clear()

    @property
    def top_logprobs(self) -> bool:
        """Whether this sampler's epilogue also returns every row's TOP_LOGPROBS most likely tokens."""
        return "top_logprobs" in self.stages

    top_count = TOP_LOGPROBS  # K of top()

    def top(self, logits):
        """Traced: (f32 [rows, K] log-probabilities, i32 [rows, K] token ids) of each row's K most likely tokens."""
        vals, idx = eta.top_k(eta.log_softmax(eta.sanitize(logits)), TOP_LOGPROBS)
        return vals, eta.cast(idx, dtype.i32)

    @property
    def logprobs(self) -> bool:
        """Whether this sampler's epilogue also returns the drawn tokens' log-probabilities."""
        return "logprobs" in self.stages

    def logprob(self, logits, tokens):
        """Traced: f32 [rows] log_softmax(logits)[row, token] of each row's drawn token (the model's own)."""
        lp = eta.log_softmax(eta.sanitize(logits))
        return eta.reshape(eta.gather_row(lp, tokens), [self.rows])

    def step(self, logits):
        """Traced: the i32 [rows] tokens drawn from f32 [rows, vocab] logits, each row by its own settings.

        It also puts the next pass's loop-carried states (RNG, seen-token counts, DRY's history, mu).
        """
        counts = self.extra["counts"].take() if "penalties" in self.stages else None
        dry = self.dry.take() if self.dry is not None else None
        r = self.rng.take()
        token = self._draw(logits, r, counts, dry)
        if self.key.programs:
            token = self._programs(logits, r, token)
        if self._grammar is not None:  # each row's automaton advances by its token
            cell, classes, flat, base = self._grammar
            nxt = eta.gather(flat, base + eta.gather_row(classes, token))
            self.extra["gstate"].put(eta.concat([eta.reshape(nxt, [self.rows, 1]), eta.slice_last(cell, 1, 1)]))
        if counts is not None:
            idx = eta.cast(eta.broadcast(eta.iota(self.vocab), [self.rows, self.vocab]), dtype.i32)
            self.extra["counts"].put(counts + eta.cast(eta.eq(idx, keep_dims(token, counts)), dtype.i32))
        if dry is not None:
            self.dry.put_next(dry, token)
        return token

    def _programs(self, logits, r, token):
        """Traced: the rows with a sampler program take its token (the program inlined on the row's logits and
        RNG state); the others keep `token`."""
        from ..runtime.forward import inline_program
        B, V = self.rows, self.vocab
        flat, states = eta.reshape(logits, [B * V]), row_states(r, B)
        parts = []
        for b, prog in enumerate(self.key.programs):
            if prog is None:
                parts.append(eta.slice_last(token, b, 1))
            else:
                (t,) = inline_program(prog, (eta.slice_last(flat, b * V, V), states[b]))
                parts.append(eta.reshape(eta.cast(t, dtype.i32), [1]))
        return eta.concat(parts)

    def _draw(self, logits, r, counts, dry):
        B = self.rows
        col = lambda t, j: eta.reshape(eta.slice_last(t, j, 1), [B])  # noqa: E731
        inv_t, greedy = col(self.floats.read(), 0), col(self.ints.read(), 0) > 0
        self.rng.put(rng_advance(r))
        x = eta.sanitize(logits)
        if "mask" in self.stages:
            idx = eta.broadcast(eta.iota(self.vocab), [B, self.vocab])
            bits = eta.take_last(self.extra["mask"].take(), idx >> 5) >> (idx & 31)
            x = eta.mask_apply(x, eta.ne(bits & 1, 0))
        if "gstate" in self.extra:  # mask by the row's automaton state: table[row, state * classes + class_of] >= 0
            T = self.key.table
            cell, classes = self.extra["gstate"].take(), self.extra["class_of"].read()
            flat = eta.reshape(self.extra["table"].read(), [B * T])
            base = col(cell, 0) * col(cell, 1) + eta.cast(eta.iota(B), dtype.i32) * T
            self._grammar = (cell, classes, flat, base)
            x = eta.mask_apply(x, eta.ge(eta.gather(flat, keep_dims(base, classes) + classes), 0))
        if "bias" in self.stages:
            b = self.extra["bias"].read()
            x = eta.select(eta.eq(b, NEG_INF), NEG_INF, x + b)  # as LogitBias: a ban stays -inf
        if "penalties" in self.stages:
            pen = self.extra["penalties"].read()
            inv_rep, rep, presence, frequency = col(pen, 0), col(pen, 1), col(pen, 2), col(pen, 3)
            seen = counts > 0
            x = eta.select(seen, eta.select(x > 0.0, x * keep_dims(inv_rep, x), x * keep_dims(rep, x)), x)
            x = x - eta.cast(seen, dtype.f32) * keep_dims(presence, x)
            x = x - eta.cast(counts, dtype.f32) * keep_dims(frequency, x)
        if dry is not None:
            x = self.dry.apply(x, dry)
        best = eta.reduce_argmax(x)
        if "sample" not in self.stages:  # every row is greedy
            return best
        x = eta.minimum(x * keep_dims(inv_t, x), F32_MAX)
        ctx = None
        if self.layout is not None:
            mu = self.extra["mu"].take() if "mu" in self.extra else None
            ctx = RowContext(B, r, mu)
            slots = self.extra["slots"].read()
            x = self.layout.apply(x, slots, ctx)
        noise = eta.concat([eta.gumbel(state, [self.vocab]) for state in row_states(r, B)])
        drawn = eta.reduce_argmax(eta.sanitize(x) + eta.reshape(noise, [B, self.vocab]))
        token = eta.select(greedy, best, drawn)
        if ctx is not None and ctx.mu is not None:
            self._mu_next = self.layout.next_mu(slots, ctx, token, x)
            self.extra["mu"].put(self._mu_next)
        return token


__all__ = ["RowParams", "RowState", "RowKey", "RowSampling", "RowSampler", "structure_of", "TOP_LOGPROBS", "STAGES"]
