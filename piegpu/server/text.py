"""Each token's text and bytes for OpenAI's logprob entries (the streamed text itself: piegpu.textgen.stream)."""

from __future__ import annotations

from ..model.token_bytes import is_byte_level, piece_bytes


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
