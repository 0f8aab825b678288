"""The token-level core: one sequence's drawn tokens to text, and admitting a sequence to a runtime Batch.

generate() (one sequence), generate_batch()/n samples and the server engine all turn drawn
tokens into text through a TokenOutput -- stop token ids, the token budget, stop strings held
back (TextStream), cancellation and the on_piece callback -- and admit batched sequences
through admit(), so the three drivers decide a sequence's end in one place.
"""

from __future__ import annotations

import threading
from typing import Callable

from ..samplers.rows import RowState
from .stream import TextStream

# TokenOutput.stop_reason values: the library's names (GenerationStats.stop_reason)
STOP_TOKEN, STOP_STRING, MAX_TOKENS, CANCELLED = "stop token", "stop string", "max_tokens", "cancelled"


class TokenOutput:
    """Where one sequence's drawn tokens go (see the module docstring).

    accept(token) -> (safe text piece, whether to draw another). `tokens` holds the drawn
    tokens (a stop token excluded), `text` the text released so far; finish() releases what
    stop strings held back once the sequence ends. `stop_reason` says why it ended ("" while
    it runs). `on_piece(piece)` is called with every non-empty piece; returning False
    cancels. cancel() may be called from any thread: the next accepted token is the last.
    """

    def __init__(self, tokenizer, stop_ids, stop_strings, budget: int, on_piece: Callable | None = None):
        self.stop_ids = frozenset(stop_ids)
        self.budget = budget
        self.stream = TextStream(tokenizer, stop_strings)
        self.tokens = self.stream.tokens  # drawn so far, a stop token excluded (the stream's list itself)
        self.on_piece = on_piece
        self.stop_reason = ""
        self._cancel = threading.Event()

    @property
    def text(self) -> str:
        """The text released so far."""
        return self.stream.text

    @property
    def cancelled(self) -> bool:
        """Whether cancel() was called."""
        return self._cancel.is_set()

    def cancel(self) -> None:
        """End at the next accepted token (any thread)."""
        self._cancel.set()

    def end(self, reason: str) -> None:
        """Record why the sequence ended, unless a reason is already recorded."""
        self.stop_reason = self.stop_reason or reason

    def accept(self, tok: int) -> tuple:
        """Take the next drawn token: (new safe text piece, whether to go on)."""
        if tok in self.stop_ids:
            self.end(STOP_TOKEN)
            return "", False
        piece = self.stream.push(tok)
        if self.stream.stopped:
            self.end(STOP_STRING)
        elif len(self.tokens) >= self.budget:
            self.end(MAX_TOKENS)
        elif self._cancel.is_set():
            self.end(CANCELLED)
        if piece and self.on_piece is not None and self.on_piece(piece) is False:
            self._cancel.set()
            self.end(CANCELLED)
        return piece, not self.stop_reason

    def finish(self, reason: str = MAX_TOKENS) -> str:
        """The sequence ended (for `reason` if none is recorded): the text still held back, passed to on_piece too."""
        self.end(reason)
        rest = self.stream.finish()
        if rest and self.on_piece is not None:
            self.on_piece(rest)
        return rest


def admit(batch, out: TokenOutput, prompt_ids: list, params, session=None, constraint=None,
          on_token: Callable | None = None, adapter=None, automaton=None):
    """Add a sequence to a runtime Batch; its drawn tokens go through `out`. Returns the runtime Sequence.

    `constraint`: a grammar matcher (mask_into, consume) for the row, or None. `on_token(seq,
    token, piece)`, if given, sees each accepted token with its text piece (the server's
    logprob entries); returning False ends the row. The batch itself ends the row at
    `out.budget` ("length") and at a stop token; `out` ends it at a stop string or a cancel. `adapter`: the
    LoRA the row runs under (textgen/adapters.py LoraUse, or None). `automaton`: the row's device grammar
    (inferlets/automaton.py TokenAutomaton, with params.automaton its padded table size), or None.
    """
    state = RowState(params, batch.model.config.vocab_size, prompt_ids, constraint, automaton)

    def on_drawn(seq, tok):
        piece, more = out.accept(tok)
        if on_token is not None and on_token(seq, tok, piece) is False:
            return False
        return more or out.stop_reason == MAX_TOKENS  # the budget is the batch's "length", not a stop

    return batch.add(prompt_ids, params, out.budget, out.stop_ids, on_drawn, session=session, row_state=state,
                     adapter=adapter)


def finish_reason(seq) -> str:
    """A finished runtime Sequence's end in TokenOutput's words."""
    return {"stop": STOP_TOKEN, "cancelled": CANCELLED, "length": MAX_TOKENS}.get(seq.finish_reason, MAX_TOKENS)


__all__ = ["TokenOutput", "admit", "finish_reason", "STOP_TOKEN", "STOP_STRING", "MAX_TOKENS", "CANCELLED"]
