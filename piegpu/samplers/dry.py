"""DRY ("Don't Repeat Yourself", llama.cpp's --dry-*): penalize tokens that would extend a repeat of the context.

llama.cpp's llama_sampler_dry_apply (ported from koboldcpp, pi6am): with the last N tokens of the
sequence h, a repeat of length n ends at position e when h[..e] and h share their last n tokens;
the token after it, h[e+1], would extend that repeat, so when n >= allowed_length its logit loses
multiplier * base^(n - allowed_length) (the largest n per token; the exponent is clamped so the
power stays finite). Sequence breakers cut repeats: the most recent breaker occurrence bounds every
n by the number of tokens after it, and a token that is a single-token breaker is never penalized.

Here the whole computation runs in the epilogue from the token history kept in a device channel
(i32[L], shifted by one each pass, older slots padded with unique negative numbers so they never
match): the repeat lengths are a [L-1, J] comparison matrix reduced by a running product (llama.cpp
uses the Z-algorithm, which computes the same numbers), the per-token maximum a sort + scatter_set,
and the breaker bound is a device state too: each pass checks whether the new token completes a
breaker (the [K, S] breaker table against the last tokens) and keeps the latest head's position.
Differences from llama.cpp:

- Repeat lengths are counted up to J = allowed_length + the exponent clamp (every longer repeat gets
  the same clamped penalty, so the logits are the same); with base 1 (no clamp) up to L.
- llama.cpp searches min(penalty_last_n, n_ctx) tokens (-1: n_ctx); here `context_size` stands for
  n_ctx (default 4096, llama-server's default), because the history channel needs a static length.
- The sequence breakers' token sequences come from the tokenizer (llama.cpp's
  get_overlapping_token_sequences: every token containing the string is a single-token breaker, a
  token ending in a prefix of it is a head whose tail is the tokenized rest, at most 20 tokens;
  strings are cut to 40 characters). Token text is the token's bytes (special tokens their text).
  Breakers may also be given as token id sequences (llama.cpp's test interface).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from .. import eta
from ..dtypes import dtype
from ..errors import ValidationError
from .state import Processor, StateSpec

DEFAULT_BREAKERS = ("\n", ":", "\"", "*")  # llama.cpp's common_params_sampling.dry_sequence_breakers
FLOAT_MAX_LOG = 88.7228391  # llama.cpp's bound on the exponent: base^exp stays below FLT_MAX
MAX_CHAR_LEN = 40
MAX_SEQ_LEN = 20
DEFAULT_CONTEXT = 4096
KEY = 64  # the restart state packs (head position p, tail length s <= MAX_SEQ_LEN) as p * KEY + s


def max_exponent(base: float) -> int:
    """llama.cpp's clamp of the penalty exponent (0 = no clamp), computed in float32 as it does."""
    b = np.float32(base)
    if not b > np.float32(1.000001):
        return 0
    return int(np.float32(FLOAT_MAX_LOG) / np.float32(math.log(b)))


def _int(v, name: str, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValidationError(f"dry: {name} must be an int >= {lo}, got {v!r}. Fix: pass an int >= {lo}")
    return int(v)


@dataclass(frozen=True)
class DRY(Processor):
    """DRY repetition penalty (llama.cpp semantics); multiplier 0 (llama.cpp's default) is off.

    `sequence_breakers`: strings (tokenized with the model's tokenizer when decoding starts;
    llama.cpp's default is newline, ':', '"' and '*') or token id sequences. penalty_last_n:
    how many recent tokens are searched (-1: `context_size`; 0: off).
    """

    multiplier: float = 0.0
    base: float = 1.75
    allowed_length: int = 2
    penalty_last_n: int = -1
    sequence_breakers: tuple = DEFAULT_BREAKERS
    context_size: int = DEFAULT_CONTEXT
    tails: tuple = None  # resolved breakers: ((head, tail...), ...) of multi-token ones; None: not resolved
    name = "dry"

    def __post_init__(self):
        for nm in ("multiplier", "base"):
            v = getattr(self, nm)
            try:
                f = float(v)
            except (TypeError, ValueError):
                f = float("nan")
            if isinstance(v, bool) or not math.isfinite(f) or f < 0:
                raise ValidationError(f"dry: {nm} must be a finite number >= 0, got {v!r}. "
                                      f"Fix: {'0 = off' if nm == 'multiplier' else 'llama.cpp uses 1.75'}")
            object.__setattr__(self, nm, f)
        object.__setattr__(self, "allowed_length", _int(self.allowed_length, "allowed_length", 0))
        object.__setattr__(self, "penalty_last_n", _int(self.penalty_last_n, "penalty_last_n (-1 = context)", -1))
        object.__setattr__(self, "context_size", _int(self.context_size, "context_size", 1))
        brk = self.sequence_breakers
        if isinstance(brk, (str, bytes)):
            brk = (brk,)
        try:
            brk = tuple(brk)
        except TypeError:
            raise ValidationError(f"dry: sequence_breakers must be a list of strings or of token id lists, "
                                  f"got {self.sequence_breakers!r}") from None
        out = []
        for b in brk:
            if isinstance(b, str):
                out.append(b)
            elif isinstance(b, (list, tuple)) and all(isinstance(t, (int, np.integer)) and not isinstance(t, bool)
                                                       and t >= 0 for t in b):
                if b:
                    out.append(tuple(int(t) for t in b))
            else:
                raise ValidationError(f"dry: a sequence breaker is a string or a list of token ids >= 0, got {b!r}")
        object.__setattr__(self, "sequence_breakers", tuple(out))

    # ---- description -------------------------------------------------------------------------
    @property
    def window(self) -> int:
        """L: the tokens searched for repeats (the history channel's length)."""
        return self.context_size if self.penalty_last_n == -1 else min(self.penalty_last_n, self.context_size)

    @property
    def off(self) -> bool:
        """llama.cpp's off values: multiplier 0, base < 1, penalty_last_n 0 (and a window of one token)."""
        return self.multiplier == 0.0 or self.base < 1.0 or self.penalty_last_n == 0 or self.window < 2

    @property
    def span(self) -> int:
        """J: the longest repeat length counted (longer ones get the same clamped penalty)."""
        m = max_exponent(self.base)
        if self.base == 1.0:
            return max(1, min(self.window - 1, self.allowed_length))
        return max(1, min(self.window - 1, self.allowed_length + m)) if m > 0 else self.window - 1

    @property
    def needs_tokenizer(self) -> bool:
        """Whether string breakers still need the tokenizer (Sampler.for_tokenizer resolves them)."""
        return self.tails is None and any(isinstance(b, str) for b in self.sequence_breakers)

    def resolve(self, tokenizer) -> "DRY":
        """This stage with its breakers as token sequences of `tokenizer` (cached per tokenizer and breakers)."""
        if self.off:
            return self
        seqs = set()
        for b in self.sequence_breakers:
            if isinstance(b, str):
                if tokenizer is None:
                    raise ValidationError("dry: string sequence breakers need the model's tokenizer. Fix: use "
                                          "model.generate(..., dry_multiplier=...), or pass token id lists")
                seqs |= breaker_sequences(tokenizer, b)
            else:
                seqs.add(b)
        return replace(self, tails=tuple(sorted(seqs)))

    def _resolved(self) -> tuple:
        if self.needs_tokenizer:
            raise ValidationError("dry: the string sequence breakers are not tokenized yet. Fix: "
                                  "sampler.for_tokenizer(model.tokenizer) (generate() does it)")
        return self.tails if self.tails is not None else tuple(sorted(set(self.sequence_breakers)))

    def _multi(self) -> tuple:
        return tuple(s for s in self._resolved() if len(s) > 1)

    def _table_width(self) -> int:
        multi = self._multi()
        return max((len(s) for s in multi), default=0)

    def _table_rows(self) -> int:
        n = len(self._multi())
        return 0 if n == 0 else 1 << (n - 1).bit_length()  # a power of two: similar tables trace alike

    def trace_key(self):
        table = ("unresolved",) if self.needs_tokenizer else (self._table_rows(), self._table_width())
        return ("dry", self.multiplier, self.base, self.allowed_length, self.window) + table

    # ---- device state ------------------------------------------------------------------------
    def states(self, vocab):
        specs = [StateSpec("dry_history", (self.window,), dtype.i32), StateSpec("dry_breaker", (vocab,), dtype.i32),
                 StateSpec("dry_restart", (1,), dtype.i32)]
        if not self.needs_tokenizer and self._table_rows():
            specs.append(StateSpec("dry_tails", (self._table_rows(), self._table_width()), dtype.i32))
        return tuple(specs)

    def initial(self, ctx):
        L = self.window
        toks = [int(t) for t in ctx.tokens][-L:]
        hist = np.array([-(i + 1) for i in range(L - len(toks))] + toks, np.int32)  # unique pads never match
        flags = np.zeros(ctx.vocab, np.int32)
        for s in self._resolved():
            if len(s) == 1 and s[0] < ctx.vocab:
                flags[s[0]] = 1
        key = restart_key([int(t) for t in hist], self._resolved())
        out = {"dry_history": hist, "dry_breaker": flags, "dry_restart": np.array([key], np.int32)}
        rows = self._table_rows()
        if rows:
            table = np.full((rows, self._table_width()), -1, np.int32)  # unused rows: head -1 never matches
            for i, s in enumerate(self._multi()):
                table[i, :len(s)] = s
            out["dry_tails"] = table
        return out

    def update(self, states, token, final):
        h = states["dry_history"]
        L = self.window
        tok = eta.reshape(eta.cast(token, dtype.i32), [1])
        new_h = eta.concat([eta.slice_last(h, 1, L - 1), tok])
        new = {"dry_history": new_h, "dry_breaker": states["dry_breaker"] + 0,
               "dry_restart": self._restart_update(new_h, states)}
        if "dry_tails" in states:
            new["dry_tails"] = states["dry_tails"] + 0
        return new

    # ---- traced ------------------------------------------------------------------------------
    def _rep_limit(self, h, restart):
        """Traced i32 scalars: (the repeat bound from the latest breaker, N the valid tokens)."""
        L = self.window
        n_valid = eta.reduce_sum(eta.cast(h >= 0, dtype.i32))
        key = eta.reshape(restart, [])
        p, s = key // KEY, key % KEY
        return eta.select(key >= 0, (L - 1) - p - s, n_valid), n_valid

    def _restart_update(self, new_h, states):
        """Traced: the next restart key [1] once new_h's last token arrived (the latest breaker head, longest tail)."""
        L = self.window
        tok = eta.slice_last(new_h, L - 1, 1)
        key = states["dry_restart"] - KEY  # everything moved one position back; < 0: out of the window
        single = eta.ne(eta.gather(states["dry_breaker"], eta.maximum(tok, 0)), 0)
        key = eta.maximum(key, eta.select(single, (L - 1) * KEY, -1))
        if "dry_tails" in states:
            tails = states["dry_tails"]
            K, S = tails.shape
            full = eta.reduce_sum(eta.cast(tails >= 0, dtype.i32))  # [K] head + tail length
            col = eta.broadcast(eta.cast(eta.iota(S), dtype.i32), [K, S])
            idx = eta.broadcast(eta.reshape(L - full, [K, 1]), [K, S]) + col  # right-aligned on the last tokens
            got = eta.reshape(eta.gather(new_h, eta.reshape(eta.maximum(idx, 0), [K * S])), [K, S])
            ok = eta.or_(eta.and_(eta.eq(got, tails), idx >= 0), tails < 0)
            match = eta.and_(eta.reduce_min(eta.cast(ok, dtype.i32)) > 0, full > 0)
            cand = eta.select(match, (L - full) * KEY + (full - 1), -1)
            key = eta.maximum(key, eta.reshape(eta.reduce_max(cand), [1]))
        return key

    def apply(self, x, states):
        h, flags = states["dry_history"], states["dry_breaker"]
        V = x.shape[-1]
        L, J, A = self.window, self.span, self.allowed_length
        rep_limit, n_valid = self._rep_limit(h, states["dry_restart"])
        # runs[e]: how many tokens ending at e equal the last ones (the suffix of the history), up to J
        e = eta.cast(eta.iota(L - 1), dtype.i32)
        j = eta.cast(eta.iota(J), dtype.i32)
        idx = eta.broadcast(eta.reshape(e, [L - 1, 1]), [L - 1, J]) - eta.broadcast(j, [L - 1, J])
        earlier = eta.reshape(eta.gather(h, eta.reshape(eta.maximum(idx, 0), [(L - 1) * J])), [L - 1, J])
        recent = eta.broadcast(eta.gather(h, (L - 1) - j), [L - 1, J])
        same = eta.and_(eta.eq(earlier, recent), idx >= 0)
        runs = eta.reduce_sum(eta.cumprod(eta.cast(same, dtype.i32)))
        runs = eta.minimum(runs, eta.broadcast(rep_limit, [L - 1]))
        nxt = eta.slice_last(h, 1, L - 1)  # the token after each end position
        live = eta.and_(eta.and_(runs >= A, eta.slice_last(h, 0, L - 1) >= 0), nxt >= 0)
        live = eta.and_(live, eta.broadcast(eta.and_(n_valid > A, rep_limit >= A), [L - 1]))
        # the longest repeat per token: scatter_set in ascending order of length, so the last write is the max
        order = eta.sort_desc(eta.neg(eta.cast(runs, dtype.f32)))[1]
        tok = eta.gather(eta.select(live, nxt, V), order)
        rep = eta.scatter_set(eta.broadcast(-1, [V]), tok, eta.gather(runs, order))
        hit = eta.and_(rep >= 0, eta.eq(flags, 0))
        m = max_exponent(self.base)
        expo = eta.cast(rep - A, dtype.f32)
        if m > 0:
            expo = eta.minimum(expo, float(m))
        penalty = eta.pow(eta.broadcast(self.base, [V]), expo) * self.multiplier
        return x - eta.select(hit, penalty, 0.0)


def restart_key(hist: list, seqs) -> int:
    """Host: the restart key of a history (pads < 0): p * KEY + s for the latest breaker head p with the
    longest complete tail s (llama.cpp's step 1 scan), or -1 when no breaker occurs."""
    L = len(hist)
    for p in range(L - 1, -1, -1):
        if hist[p] < 0:
            break
        best = -1
        for sq in seqs:
            n = len(sq)
            if sq[0] == hist[p] and p + n - 1 <= L - 1 and tuple(hist[p:p + n]) == tuple(sq):
                best = max(best, n - 1)
        if best >= 0:
            return p * KEY + best
    return -1


_BREAKERS: dict = {}


def _token_text(tokenizer, vocab: int) -> list:
    from ..model.token_bytes import token_bytes
    pieces = token_bytes(tokenizer, vocab)
    for i, p in enumerate(pieces):
        if p is None:  # special tokens: llama.cpp detokenizes them with their text
            t = tokenizer.id_to_token(i)
            pieces[i] = (t or "").encode("utf-8")
    return pieces


def breaker_sequences(tokenizer, text: str) -> set:
    """llama.cpp's get_overlapping_token_sequences for one breaker string: {(head, tail...), ...}."""
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    key = (id(tokenizer), vocab, text)
    hit = _BREAKERS.get(key)
    if hit is not None and hit[0] is tokenizer:
        return hit[1]
    s = text[:MAX_CHAR_LEN].encode("utf-8")
    if not s:
        return set()
    out = set()
    for tid, word in enumerate(_token_text(tokenizer, vocab)):
        if s in word:
            out.add((tid,))
            continue
        pos = word.find(s[:1])
        while pos >= 0:
            n = len(word) - pos  # word[pos:] is a prefix of s (it is shorter: s is not in word)
            if s.startswith(word[pos:]):
                rest = s[n:].decode("utf-8", errors="ignore")
                tail = tuple(tokenizer.encode(rest, add_special_tokens=False).ids[:MAX_SEQ_LEN]) if rest else ()
                out.add((tid,) + tail)
            pos = word.find(s[:1], pos + 1)
    _BREAKERS[key] = (tokenizer, out)
    return out


__all__ = ["DRY", "DEFAULT_BREAKERS", "breaker_sequences", "max_exponent"]
