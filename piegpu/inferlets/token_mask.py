"""Token-level masks from a byte-level grammar: which token ids keep the text a valid prefix.

TokenVocabulary holds each token's bytes (built once per tokenizer) in a trie. For a
grammar state, TokenMasker walks the trie with the automaton (memoized transitions:
a prefix shared by many tokens is stepped once, and an invalid prefix prunes its whole
subtree) and memoizes the result per state. A budget of r tokens keeps only tokens
whose end state can still complete within r - 1 single-byte tokens, so a constrained
text always closes in time. Masks are packed as u32 words, bit i of word i // 32 = token i.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from .. import eta
from ..errors import ValidationError

_VOCABS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _byte_decoder() -> dict:
    """GPT-2's byte-level alphabet inverted: printable stand-in character -> byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def token_bytes(tokenizer, vocab_size: int) -> list:
    """Each token id's bytes (None for special/added tokens, which grammars never allow)."""
    if not callable(getattr(tokenizer, "id_to_token", None)):
        raise ValidationError(f"grammar masks need each token's text, but {type(tokenizer).__name__} has no "
                              "id_to_token(). Fix: use a model with a tokenizers.Tokenizer (tokenizer.json)")
    special = set()
    try:
        special = set(tokenizer.get_added_tokens_decoder())
    except AttributeError:
        pass
    decoder = getattr(tokenizer, "decoder", None)
    kind = type(decoder).__name__ if decoder is not None else ""
    table = _byte_decoder()
    out = []
    for i in range(vocab_size):
        piece = tokenizer.id_to_token(i) if i not in special else None
        if piece is None:
            out.append(None)
            continue
        if "ByteLevel" in kind or repr(decoder).startswith("ByteLevel"):
            try:
                out.append(bytes(table[ch] for ch in piece))
            except KeyError:
                raise ValidationError(f"token {i} ({piece!r}) is not in the byte-level alphabet; the tokenizer's "
                                      "decoder says ByteLevel. Fix: use a consistent tokenizer.json") from None
        elif piece.startswith("<0x") and piece.endswith(">") and len(piece) == 6:  # SentencePiece byte fallback
            out.append(bytes([int(piece[3:5], 16)]))
        else:
            out.append(piece.replace("\u2581", " ").encode("utf-8"))
    return out


class TokenVocabulary:
    """The byte strings of a vocabulary in a trie (children per node sorted by byte)."""

    def __init__(self, pieces: list):
        self.pieces = pieces
        self.size = len(pieces)
        children: list = [{}]
        ends: list = [[]]
        for tid, b in enumerate(pieces):
            if not b:
                continue
            node = 0
            for c in b:
                nxt = children[node].get(c)
                if nxt is None:
                    nxt = len(children)
                    children[node][c] = nxt
                    children.append({})
                    ends.append([])
                node = nxt
            ends[node].append(tid)
        self.children = [tuple(sorted(d.items())) for d in children]
        self.ends = [tuple(e) for e in ends]
        single = {b[0]: tid for tid, b in enumerate(pieces) if b is not None and len(b) == 1}
        self.single_byte = single

    @classmethod
    def of(cls, tokenizer, vocab_size: int) -> "TokenVocabulary":
        """The vocabulary of `tokenizer` (built once per tokenizer object)."""
        try:
            v = _VOCABS.get(tokenizer)
        except TypeError:
            v = None
        if v is None or v.size != vocab_size:
            v = cls(token_bytes(tokenizer, vocab_size))
            try:
                _VOCABS[tokenizer] = v
            except TypeError:
                pass
        return v

    @property
    def words(self) -> int:
        """u32 words of a packed mask."""
        return (self.size + 31) // 32


@dataclass
class _Walk:
    """The tokens valid from one state: ids, end states, and the end states' distances to completion."""

    ids: np.ndarray
    ends: np.ndarray
    dist: np.ndarray
    max_dist: int


class TokenMasker:
    """Masks of the tokens a grammar allows next, memoized per grammar state (and tight budget)."""

    def __init__(self, grammar, vocab: TokenVocabulary, eos_ids=()):
        self.grammar = grammar
        self.vocab = vocab
        self.eos = [int(e) for e in eos_ids if 0 <= int(e) < vocab.size]
        needed = set(b'"{}[],:-0.truefalsn')
        for node in grammar.schema.nodes:
            for key, _ in node.props:
                needed |= set(key)
        missing = sorted(chr(b) for b in needed if b not in vocab.single_byte)
        if missing:
            raise ValidationError(f"the vocabulary has no single-byte tokens for {missing}; JSON mode needs them to "
                                  "guarantee the text can close within the budget")
        self._walks: dict = {}
        self._masks: dict = {}
        self.walk_count = 0

    def walk(self, sid: int) -> _Walk:
        """Every token that is valid from state sid, with its end state (memoized)."""
        w = self._walks.get(sid)
        if w is not None:
            return w
        g = self.grammar
        step = g.step
        trans = g._trans  # the memo of g.step, read directly in the hot loop
        children, ends = self.vocab.children, self.vocab.ends
        ids: list = []
        end_states: list = []
        stack = [(0, sid)]
        while stack:
            node, s = stack.pop()
            e = ends[node]
            if e:
                ids.extend(e)
                end_states.extend([s] * len(e))
            base = s * 256
            for c, child in children[node]:
                n = trans.get(base + c)
                if n is None:
                    n = step(s, c)
                if n >= 0:
                    stack.append((child, n))
        ids_a = np.asarray(ids, np.int64)
        ends_a = np.asarray(end_states, np.int64)
        uniq = {s: g.distance(s) for s in set(end_states)}
        dist = np.asarray([uniq[s] for s in end_states], np.int64)
        w = _Walk(ids_a, ends_a, dist, int(dist.max()) if dist.size else 0)
        self._walks[sid] = w
        self.walk_count += 1
        return w

    def allowed(self, sid: int, budget: int | None = None) -> np.ndarray:
        """Sorted token ids allowed at state sid with `budget` tokens left (this one included; None: no limit)."""
        w = self.walk(sid)
        ids = w.ids
        if budget is not None and budget - 1 < w.max_dist:
            ids = ids[w.dist <= budget - 1]
        if self.grammar.accepting(sid):
            ids = np.concatenate([ids, np.asarray(self.eos, np.int64)])
        return np.unique(ids)

    def mask(self, sid: int, budget: int | None = None) -> np.ndarray:
        """The packed u32 mask of allowed(sid, budget) (memoized)."""
        w = self.walk(sid)
        cap = None if budget is None or budget - 1 >= w.max_dist else budget - 1
        key = (sid, cap)
        m = self._masks.get(key)
        if m is None:
            bits = np.zeros(self.vocab.words * 32, bool)
            bits[self.allowed(sid, budget)] = True
            m = self._masks[key] = np.packbits(bits, bitorder="little").view("<u4").astype(np.uint32)
        return m

    def advance(self, sid: int, token: int) -> int:
        """The state after `token` (ValidationError if the grammar does not allow it)."""
        b = self.vocab.pieces[token] if 0 <= token < self.vocab.size else None
        nxt = self.grammar.feed(sid, b) if b else -1
        if nxt < 0:
            raise ValidationError(f"token {token} ({b!r}) is not allowed by the grammar here")
        return nxt


def unpack_mask(words: np.ndarray, vocab: int) -> np.ndarray:
    """Host: the bool [vocab] mask of packed u32 words (the inverse of TokenMasker.mask)."""
    bits = np.unpackbits(np.asarray(words, "<u4").view(np.uint8), bitorder="little")
    return bits[:vocab].astype(bool)


def device_allowed(words, vocab: int):
    """Traced: the bool [vocab] mask of packed u32 words (bit i of word i >> 5), unpacked on the device."""
    idx = eta.iota(vocab)
    bits = eta.gather(words, idx >> 5) >> (idx & 31)
    return eta.ne(bits & 1, 0)


__all__ = ["TokenVocabulary", "TokenMasker", "token_bytes", "unpack_mask", "device_allowed"]
