"""Embeddings and reranking: the inputs checked and tokenized, pooled vectors normalized and truncated.

`Embedder` is what embed() and rerank() share between an encoder (EncoderModel: BERT,
RoBERTa, XLM-R rerankers) and a decoder (Model.embed: last-token or mean pooling of its final
hidden rows): inputs as text or token ids, the max-length rule (an error unless truncate=True),
Matryoshka `dimensions` (truncate, then normalize), the pooling in force.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import ValidationError
from ..model.encoder_config import POOLINGS, Pooling


def as_inputs(texts) -> list:
    """`texts` (a string, a list of strings, a list of token ids, or a list of those) as a list of inputs, each a
    str or a list of ints; an empty list or an empty string is an error."""
    if isinstance(texts, str):
        texts = [texts]
    elif isinstance(texts, Sequence) and texts and all(isinstance(t, (int, np.integer)) and not isinstance(t, bool)
                                                       for t in texts):
        texts = [list(texts)]  # one input of token ids
    if not isinstance(texts, Sequence) or isinstance(texts, (bytes, bytearray)) or not texts:
        raise ValidationError("embed: no input. Fix: pass a string, a list of strings, or token ids")
    out = []
    for i, t in enumerate(texts):
        if isinstance(t, str):
            if not t:
                raise ValidationError(f"embed: input {i} is an empty string. Fix: drop it or give it text")
            out.append(t)
        elif isinstance(t, Sequence) and t and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                                                   for v in t):
            out.append([int(v) for v in t])
        else:
            raise ValidationError(f"embed: input {i} is {type(t).__name__} {t!r:.60}; each input is a non-empty "
                                  "string or a non-empty list of token ids")
    return out


def finish(vectors: np.ndarray, normalize: bool, dimensions: int | None) -> np.ndarray:
    """Pooled vectors truncated to `dimensions` (Matryoshka), then L2-normalized where asked."""
    if dimensions is not None:
        vectors = vectors[:, :dimensions]
    if normalize:
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return np.ascontiguousarray(vectors, np.float32)


def check_dimensions(dimensions, hidden: int) -> int | None:
    """`dimensions` checked: None or an int in [1, hidden]."""
    if dimensions is None:
        return None
    if isinstance(dimensions, bool) or not isinstance(dimensions, (int, np.integer)) or not 1 <= dimensions <= hidden:
        raise ValidationError(f"embed(dimensions={dimensions!r}): the leading dimensions to keep, an int in "
                              f"[1, {hidden}] (this model's embeddings have {hidden})")
    return int(dimensions)


def resolve_pooling(pooling, configured: Pooling | None, default: str | None, model: str) -> str:
    """The pooling mode in force: the call's, else the model's configured one, else the family's default; none
    at all is an error that says how to set one."""
    if pooling is not None:
        if pooling not in POOLINGS:
            raise ValidationError(f"embed(pooling={pooling!r}): one of {', '.join(POOLINGS)}")
        return pooling
    if configured is not None:
        return configured.mode
    if default is None:
        raise ValidationError(
            f"{model} has no pooling configured (no sentence-transformers modules.json / 1_Pooling/config.json), "
            "so it is not an embedding model as it stands. Fix: pass embed(..., pooling=\"last\") or "
            "pooling=\"mean\" (`piegpu serve --pooling last`), or use an embedding model")
    return default


class Truncating:
    """Cuts encodings to `limit` tokens as transformers' truncation=True does (longest first, the special tokens
    kept): what sentence-transformers feeds its model. tokenizers' own truncation can leave a pair one token over
    (its count of the template's special tokens), so a copy with the budget lowered by the excess is used then."""

    def __init__(self, tokenizer, limit: int):
        self.tokenizer, self.limit = tokenizer, limit
        self._copies: dict = {}

    def _copy(self, budget: int):
        t = self._copies.get(budget)
        if t is None:
            t = self._copies[budget] = type(self.tokenizer).from_str(self.tokenizer.to_str())
            t.no_padding()
            t.enable_truncation(budget)
        return t

    def encode(self, *texts):
        """The encoding of a text or a pair, at most `limit` tokens."""
        enc = self._copy(self.limit).encode(*texts)
        if len(enc.ids) > self.limit:
            enc = self._copy(self.limit - (len(enc.ids) - self.limit)).encode(*texts)
        return enc


def tokenized(tokenizer, cutter, inputs: list, limit: int, truncate: bool) -> list:
    """[(token ids, token type ids)] of inputs (text through the tokenizer with its special tokens, token ids as
    given); one over `limit` tokens is an error unless `truncate` (then cut by `cutter`, token ids to their first
    `limit`)."""
    out = []
    for i, x in enumerate(inputs):
        if isinstance(x, str):
            enc = tokenizer.encode(x)
            if len(enc.ids) > limit and truncate:
                enc = cutter().encode(x)
            ids, types = list(enc.ids), list(enc.type_ids)
        else:
            ids, types = (list(x[:limit]) if truncate else list(x)), [0] * min(len(x), limit if truncate else len(x))
        out.append(_fit(ids, types, limit, f"input {i}"))
    return out


def pair_tokens(tokenizer, cutter, query: str, doc: str, limit: int, truncate: bool, what: str) -> tuple:
    """(token ids, token type ids) of a (query, document) pair as the tokenizer's pair template lays it out; over
    `limit`: an error, or with `truncate` cut by `cutter` (longest first)."""
    enc = tokenizer.encode(query, doc)
    if len(enc.ids) > limit and truncate:
        enc = cutter().encode(query, doc)
    return _fit(list(enc.ids), list(enc.type_ids), limit, what)


def _fit(ids: list, types: list, limit: int, what: str) -> tuple:
    if len(ids) > limit:
        raise ValidationError(f"{what} has {len(ids)} tokens; this model takes at most {limit}. Fix: shorten it, "
                              "split it into passages, or pass truncate=True to keep its first tokens")
    return ids, types
