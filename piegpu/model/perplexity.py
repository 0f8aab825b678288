"""Perplexity the way llama.cpp's llama-perplexity computes it, over any logits function.

The text's tokens are cut into chunks of `ctx` tokens (the tail that does not fill a chunk is
dropped); each chunk is one prefill from an empty state, its first token replaced by BOS when the
tokenizer adds one; only the second half of each chunk is scored (token j + 1 from the logits at
position j, for j in [ctx/2, ctx - 1)), so every scored token has at least ctx/2 tokens of context.
PPL = exp(mean negative log-likelihood over all scored tokens); the +/- is llama.cpp's error estimate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..errors import ValidationError


@dataclass
class PerplexityResult:
    """Running totals: negative log-likelihood sum, its squares, scored tokens, and the PPL after each chunk."""

    ctx: int
    nll: float = 0.0
    nll2: float = 0.0
    count: int = 0
    running: list = field(default_factory=list)

    @property
    def ppl(self) -> float:
        """exp(mean NLL) over the tokens scored so far."""
        return math.exp(self.nll / self.count)

    @property
    def error(self) -> float:
        """llama.cpp's standard error of the PPL estimate (0 with fewer than two tokens)."""
        mean = self.nll / self.count
        var = self.nll2 / self.count - mean * mean
        return self.ppl * math.sqrt(var / (self.count - 1)) if var > 0 and self.count > 1 else 0.0


def chunk_count(n_tokens: int, ctx: int, chunks: int | None = None) -> int:
    """How many ctx-token chunks are scored (llama.cpp: needs at least 2 * ctx tokens)."""
    if ctx < 4:
        raise ValidationError(f"perplexity: ctx {ctx} is too small. Fix: a context of at least 4 tokens")
    if n_tokens < 2 * ctx:
        raise ValidationError(f"perplexity: the text has {n_tokens} tokens but a context of {ctx} needs at least "
                              f"{2 * ctx} (as llama-perplexity). Fix: a longer text or a smaller --ctx")
    n = n_tokens // ctx
    return n if chunks is None else min(n, chunks)


def log_softmax_rows(logits: np.ndarray) -> np.ndarray:
    """log softmax of each row, in float64."""
    x = np.asarray(logits, np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def perplexity(tokens: Sequence[int], ctx: int, logits_fn: Callable[[list], np.ndarray], bos_id: int | None = None,
               chunks: int | None = None, on_chunk: Callable[[int, PerplexityResult], None] | None = None
               ) -> PerplexityResult:
    """Score `tokens` in ctx-token chunks with `logits_fn(ids) -> [len(ids), vocab]` (see the module doc)."""
    tokens = list(tokens)
    n = chunk_count(len(tokens), ctx, chunks)
    first = ctx // 2
    result = PerplexityResult(ctx)
    for i in range(n):
        ids = tokens[i * ctx: (i + 1) * ctx]
        if bos_id is not None:
            ids[0] = bos_id
        logp = log_softmax_rows(np.asarray(logits_fn(ids))[first: ctx - 1])
        targets = np.asarray(tokens[i * ctx + first + 1: (i + 1) * ctx])
        nll = -logp[np.arange(len(targets)), targets]
        result.nll += float(nll.sum())
        result.nll2 += float((nll * nll).sum())
        result.count += len(targets)
        result.running.append(result.ppl)
        if on_chunk is not None:
            on_chunk(i, result)
    return result
