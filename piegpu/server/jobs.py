"""What the server's engine keeps per request: jobs, their choices, guarded grammar matchers, the engine's counters."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from ..samplers.rows import RowParams
from ..textgen.tokens import TokenOutput


@dataclass(eq=False)
class Choice:
    """One of a job's n sequences."""

    index: int
    params: RowParams
    out: TokenOutput  # its tokens and text (stop strings held back)
    constraint: object = None
    seq: object = None  # the runtime Sequence once it joined the batch
    finish_reason: str = ""
    tokens: int = 0
    error: str = ""  # what went wrong in this choice alone (its job fails; the batch goes on)
    last_token: float = 0.0  # perf_counter when its latest token was drawn (inter-token latency)


class Guarded:
    """A choice's grammar matcher whose failures end that choice only (never the engine thread)."""

    def __init__(self, choice: Choice, matcher):
        self.choice, self.matcher = choice, matcher

    def mask_into(self, words) -> None:
        """The matcher's mask; on failure every token (the row is dropped before its token is used)."""
        try:
            self.matcher.mask_into(words)
        except Exception as e:  # noqa: BLE001 -- reported to this request's client
            self.choice.error = self.choice.error or f"the output constraint failed: {e}"
            words[:] = 0xFFFFFFFF
            if self.choice.seq is not None:
                self.choice.seq.cancel()

    def consume(self, token: int) -> None:
        """Advance the matcher (a failure ends the choice)."""
        if self.choice.error:
            return
        try:
            self.matcher.consume(token)
        except Exception as e:  # noqa: BLE001
            self.choice.error = f"the output constraint failed: {e}"


@dataclass(eq=False)
class Job:
    """One request: its prompt, its choices' settings, and where its events go.

    `emit(event)` is called from the engine thread with dicts:
    {"type": "piece", "index", "text", "tokens": [(id, logprob, top)]}, {"type": "finish",
    "index", "reason"}, {"type": "done", "usage"} or {"type": "error", "message"}.
    """

    prompt_ids: list
    params: list  # RowParams per choice
    max_tokens: int
    stops: list
    emit: Callable
    constraint: Callable | None = None  # () -> a fresh per-choice constraint (fill_mask, consume)
    stop_ids: frozenset = frozenset()
    adapter: object = None  # the LoRA its choices run under (textgen/adapters.py LoraUse), None: the base model
    automaton: object = None  # the device grammar automaton every choice follows (then constraint is None)
    choices: list = field(default_factory=list)
    cached_tokens: int = 0
    prefilled: int = 0
    session: object = None
    cancelled: bool = False
    submitted: float = field(default_factory=time.perf_counter)
    kv_pages: int = 0  # KV pages set aside for it while admitted (Engine._admit)
    started: float = 0.0  # perf_counter when its prompt began to be processed (its session was made)
    first_token: float = 0.0  # ... when its first token was drawn
    finished: float = 0.0  # ... when it finished

    @property
    def ns(self):
        """Its prefix-cache namespace: KV computed under another adapter (or scale) is never shared with it."""
        return None if self.adapter is None else (self.adapter.key, self.adapter.scale)

    def cancel(self) -> None:
        """Stop every choice at the next pass (callable from any thread)."""
        self.cancelled = True
        for c in self.choices:
            if c.seq is not None:
                c.seq.cancel()


@dataclass
class EngineStats:
    """Where the engine thread's time went (GET /health reports it)."""

    prefill_passes: int = 0
    prefill_tokens: int = 0
    prefill_s: float = 0.0
    decode_passes: int = 0
    decode_rows: int = 0
    decode_s: float = 0.0
    host_waits: int = 0  # host reads of decoded tokens: one per window of passes
    window: int = 1  # decode passes run ahead per host read
    shared_tokens: int = 0  # prompt tokens whose KV pages another sequence or the prefix cache already held
    prompt_tokens: int = 0  # prompt tokens of joined requests that were not already held (llama.cpp's processed)
    tokens_predicted: int = 0  # tokens drawn, every choice
    requests_finished: int = 0  # requests that left the engine (done, failed or cancelled)
    n_tokens_max: int = 0  # the longest sequence so far (prompt + drawn), in positions

    def as_dict(self) -> dict:
        """A JSON-able dict."""
        return dict(self.__dict__)


class QueueFull(Exception):
    """The engine holds max_queue requests already."""


class EngineStopped(Exception):
    """The engine's thread ended with an error (e.g. the device was lost): it takes no more requests."""
