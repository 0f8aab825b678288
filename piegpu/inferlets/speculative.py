"""Speculative decoding verified on the device: prompt-lookup drafts, one pass per step, accept/reject in the epilogue.

The host proposes up to k draft tokens by prompt lookup (NgramIndex: the most recent earlier occurrence of the
sequence's last n-gram, n = ngram down to ngram_min, and the tokens that followed it). One pass embeds the pending
token plus the d drafts and reads out d + 1 logits rows; the epilogue runs the row's sampler chain on every row,
decides how many drafts stand, keeps accepted + 1 embedded tokens in the KV state (StateGeometry.accepting: the
length advances on the device, rejected positions are simply past it) and puts [accepted, y_0 .. y_d] into a result
channel; the host emits drafts[:accepted] + [y_accepted].

- Greedy (temperature 0): draft i stands while it equals the argmax of row i; y_i is that argmax. The output is
  plain greedy decoding's, token for token.
- Sampled: row i draws the token a plain run would draw there -- the sampler chain's Gumbel-max draw with the RNG
  state [key, c + i] of the plain loop's (c + i)-th token -- and draft i stands while it equals that draw; the counter
  advances by the tokens emitted. So the output is plain sampling's token for token for the same seed, whatever
  drafts were proposed or how many were verified. This is speculative sampling (Leviathan et al. 2023, Chen et al.
  2023) for a deterministic draft, coupled through the Gumbel noise: a draft stands with probability p(draft), as
  min(1, p/q) with q its one-hot, and the token after the first miss is distributed as the normalized residual.
  Stages with state that depends on the drawn tokens (penalties, DRY, Mirostat, a watermark) do not compose and are
  refused by textgen/speculation.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import eta
from ..dtypes import dtype
from ..errors import ValidationError
from ..eta import intrinsics
from ..runtime.channel import Channel
from ..runtime.forward import ForwardPass, StateGeometry
from ..samplers.state import RNG_STATE

SCAN = 64  # most recent occurrences of an n-gram looked at


class NgramIndex:
    """The positions of every n-gram (n = lo..hi) of a growing token sequence, for O(n) lookups per token."""

    def __init__(self, hi: int = 3, lo: int = 1):
        self.hi, self.lo = hi, lo
        self.tokens: list = []
        self.at: dict = {}  # n-gram tuple -> start positions, oldest first

    def extend(self, tokens) -> None:
        """Append tokens (and index the n-grams that end in them)."""
        for t in tokens:
            self.tokens.append(int(t))
            L = len(self.tokens)
            for n in range(self.lo, self.hi + 1):
                if L >= n:
                    self.at.setdefault(tuple(self.tokens[L - n:]), []).append(L - n)

    def drafts(self, k: int) -> tuple:
        """(up to k tokens that followed an earlier occurrence of the last n-gram, n): the longest n (hi..lo) that
        finds any; ([], 0) where none does."""
        for n in range(min(self.hi, len(self.tokens) - 1), self.lo - 1, -1):
            found = self.drafts_of(n, k)
            if found:
                return found, n
        return [], 0

    def drafts_of(self, n: int, k: int) -> list:
        """Up to k tokens that followed an earlier occurrence of the last n tokens.

        The most recent occurrence with k tokens after it wins; in a repetitive tail the most recent one overlaps
        the end and has fewer, so the longest continuation is kept.
        """
        toks, L = self.tokens, len(self.tokens)
        if k < 1 or not 1 <= n < L:
            return []
        best: list = []
        for start in reversed(self.at.get(tuple(toks[L - n:]), [])[-SCAN - 1:-1]):  # earlier ones, most recent first
            follow = toks[start + n: start + n + k]
            if len(follow) == k:
                return follow
            if len(follow) > len(best):
                best = follow
        return best


def lookup_drafts(tokens: list, k: int, ngram: int = 3) -> list:
    """Up to k tokens that followed an earlier match of the last n-gram (n = ngram..1): NgramIndex.drafts."""
    index = NgramIndex(ngram, 1)
    index.extend(tokens)
    return index.drafts(k)[0]


@dataclass
class Verify:
    """One verify pass: its forward pass, the tokens it embeds ([pending] + d drafts) and its verdict channel."""

    fwd: ForwardPass
    tokens: Channel
    result: Channel  # [accepted, y_0, ..., y_d]


def verify_pass(sess, d: int, sampler, states) -> Verify:
    """The pass that embeds the pending token + d drafts and keeps what stands (built once per d and sampler)."""
    return sess.loop(("speculative", d, sampler.trace_key, id(states)), lambda: _build(sess, d, sampler, states))


def _row_state(state, i: int):
    """[key, counter + i] of an RNG state [key, counter]."""
    return eta.concat([eta.slice_last(state, 0, 1), eta.slice_last(state, 1, 1) + i])


def _sampled_rows(sampler, st: dict, embedded, d: int) -> tuple:
    """Traced: ([y_0] .. [y_d], [ok_0] .. [ok_{d-1}]): row i's draw at RNG counter c + i, and whether it is draft i."""
    ys, oks = [], []
    for i in range(d + 1):
        row = {**st, RNG_STATE: _row_state(st[RNG_STATE], i)}
        y = eta.reshape(eta.cast(eta.gumbel_max(sampler.logits(intrinsics.output(i), row), row[RNG_STATE]),
                                 dtype.i32), [1])
        if i < d:
            oks.append(eta.eq(y, eta.slice_last(embedded, i + 1, 1)))
        ys.append(y)
    return ys, oks


def _build(sess, d: int, sampler, states) -> Verify:
    toks = Channel([d + 1], dtype.i32).named(f"spec:tokens[{d + 1}]")
    result = Channel([d + 2], dtype.i32).named(f"spec:verdict[{d + 2}]")
    geom = StateGeometry.accepting()
    fwd = ForwardPass()
    fwd.embed(toks, Channel.from_([0, d + 1], dtype.u32))
    fwd.state([sess.ws], geom)
    fwd.readout(d + 1)

    @fwd.epilogue
    def _():
        st = states.take() if states is not None else {}
        embedded = toks.read()
        if sampler.greedy:  # every row's argmax in one reduction over [d + 1, vocab]
            best = eta.cast(eta.reduce_argmax(sampler.logits(intrinsics.outputs(), st)), dtype.i32)
            ys = [best]
            oks = [eta.eq(eta.slice_last(best, 0, d), eta.slice_last(embedded, 1, d))] if d else []
        else:
            ys, oks = _sampled_rows(sampler, st, embedded, d)
        if oks:
            accepted = eta.reduce_sum(eta.cumprod(eta.cast(eta.concat(oks), dtype.i32)))
        else:
            accepted = eta.broadcast(eta.cast(0, dtype.i32), [])
        geom.keep(accepted + 1)  # the pending token and the drafts that stand stay in the KV state
        result.put(eta.concat([eta.reshape(accepted, [1])] + ys))
        if states is not None:
            new = {n: v + 0.0 for n, v in st.items() if n != RNG_STATE}  # (logit_bias: device data, kept)
            if RNG_STATE in st:  # the counter moves past the draws of the tokens emitted (accepted + 1)
                s = st[RNG_STATE]
                new[RNG_STATE] = eta.concat([eta.slice_last(s, 0, 1),
                                             eta.slice_last(s, 1, 1) + eta.cast(eta.reshape(accepted, [1]) + 1,
                                                                                dtype.u32)])
            states.put(new)

    return Verify(fwd, toks, result)


__all__ = ["lookup_drafts", "NgramIndex", "verify_pass", "Verify"]
