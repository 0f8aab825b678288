"""Each vocabulary token's raw bytes: GPT-2's byte-level alphabet, SentencePiece byte fallback, or plain text.

Grammar masks, DRY's sequence breakers and the server's logprob entries read tokens as bytes.
"""

from __future__ import annotations

from functools import lru_cache

from ..errors import ValidationError


@lru_cache(maxsize=None)
def _byte_decoder() -> dict:
    """GPT-2's byte-level alphabet inverted: printable stand-in character -> byte (built once)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def is_byte_level(tokenizer) -> bool:
    """Whether the tokenizer's pieces are in GPT-2's byte-level alphabet (its decoder says ByteLevel)."""
    decoder = getattr(tokenizer, "decoder", None)
    kind = type(decoder).__name__ if decoder is not None else ""
    return "ByteLevel" in kind or repr(decoder).startswith("ByteLevel")


def piece_bytes(piece: str, byte_level: bool) -> bytes:
    """One vocabulary piece's bytes: GPT-2's byte-level alphabet, a SentencePiece byte fallback (<0xAB>),
    or the text with SentencePiece's ▁ as a space. KeyError: a byte-level piece outside the alphabet."""
    if byte_level:
        table = _byte_decoder()
        return bytes(table[ch] for ch in piece)
    if piece.startswith("<0x") and piece.endswith(">") and len(piece) == 6:  # SentencePiece byte fallback
        return bytes([int(piece[3:5], 16)])
    return piece.replace("\u2581", " ").encode("utf-8")


def token_bytes(tokenizer, vocab_size: int) -> list:
    """Each token id's bytes (None for special/added tokens)."""
    if not callable(getattr(tokenizer, "id_to_token", None)):
        raise ValidationError(f"grammar masks need each token's text, but {type(tokenizer).__name__} has no "
                              "id_to_token(). Fix: use a model with a tokenizers.Tokenizer (tokenizer.json)")
    special = set()
    try:
        special = set(tokenizer.get_added_tokens_decoder())
    except AttributeError:
        pass
    byte_level = is_byte_level(tokenizer)
    out = []
    for i in range(vocab_size):
        piece = tokenizer.id_to_token(i) if i not in special else None
        if piece is None:
            out.append(None)
            continue
        try:
            out.append(piece_bytes(piece, byte_level))
        except KeyError:
            raise ValidationError(f"token {i} ({piece!r}) is not in the byte-level alphabet; the tokenizer's "
                                  "decoder says ByteLevel. Fix: use a consistent tokenizer.json") from None
    return out
