"""Tokens to streamed text: incremental detokenization with stop strings held back until they cannot match."""

from __future__ import annotations

from ..model.token_bytes import is_byte_level, piece_bytes


class TextStream:
    """The text of one choice as tokens arrive.

    push(token) returns the new text that is safe to send: a piece never ends inside a
    multi-byte character, and text that could be the start of a stop string is held back
    until it either completes the stop (then it is cut, with everything after it) or stops
    matching. OpenAI does not include the stop sequence in the output; neither does this.
    """

    def __init__(self, tokenizer, stops: list):
        self.tokenizer = tokenizer
        self.stops = [s for s in stops if s]
        self.tokens: list = []
        self.sent = ""  # text already returned
        self.stopped = False  # a stop string matched

    def push(self, token: int) -> str:
        """The token's new safe text ("" while held back)."""
        self.tokens.append(token)
        text = self.tokenizer.decode(self.tokens)
        cut = min((i for i in (text.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            return self._advance(text[:cut])
        if text.endswith("\ufffd"):  # a token may end inside a multi-byte character
            return ""
        hold = max((k for s in self.stops for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
        return self._advance(text[: len(text) - hold])

    def finish(self) -> str:
        """The text held back at the end (no stop string can complete any more).

        A character cut by the end of generation (its last bytes never drawn) is left out, as
        model.generate's text leaves it out.
        """
        if self.stopped:
            return ""
        text = self.tokenizer.decode(self.tokens)
        return self._advance(text.rstrip("\ufffd") if text.endswith("\ufffd") else text)

    def _advance(self, text: str) -> str:
        if not text.startswith(self.sent):  # a decode that rewrote earlier text (rare byte-level merges)
            common = 0
            while common < min(len(text), len(self.sent)) and text[common] == self.sent[common]:
                common += 1
            text = self.sent + text[common:] if len(text) > common else self.sent
        piece = text[len(self.sent):]
        self.sent = text
        return piece


class TokenText:
    """Each token id's text and bytes, for log-probability entries (cached per tokenizer)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._cache: dict = {}

    def __call__(self, token: int) -> tuple:
        """(text, list of byte values) of one token, as OpenAI's logprobs entries carry them."""
        hit = self._cache.get(token)
        if hit is None:
            raw = _token_bytes(self.tokenizer, token)
            hit = self._cache[token] = (raw.decode("utf-8", errors="replace"), list(raw))
        return hit


def _token_bytes(tokenizer, token: int) -> bytes:
    piece = tokenizer.id_to_token(token) if callable(getattr(tokenizer, "id_to_token", None)) else None
    if piece is not None:
        try:
            return piece_bytes(piece, is_byte_level(tokenizer))
        except KeyError:  # a piece outside the byte-level alphabet: its decoded text
            pass
    return tokenizer.decode([token], skip_special_tokens=False).encode("utf-8")
