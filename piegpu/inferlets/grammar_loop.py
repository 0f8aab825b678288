"""The decode loop of grammar-constrained generate(): a depth-1 loop over the host's llguidance masks.

The mask for step t+1 needs token t, which the device draws in step t; forced tokens are
prefilled in one pass each run instead of being sampled one by one; when a mask allows few
tokens the next masks are computed while the device draws (see constrained_pieces).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import numpy as np

from .grammar import Matcher

CLOSE_LOOKAHEAD = 32  # in its last this-many tokens a generation checks it can still complete the grammar
SPECULATE = 16  # next masks are computed ahead (during the device pass) when at most this many tokens are allowed
def budget_close(shortest: int | None, left: int) -> str | None:
    """Budget closing with `left` tokens to go and a shortest completion of `shortest` tokens (None: none within
    `left`): "end" (complete now, and one more token could leave it open), "force" (the completion only just fits:
    take it unsampled), or None (go on sampling; also outside the last CLOSE_LOOKAHEAD tokens)."""
    if left > CLOSE_LOOKAHEAD or shortest is None:
        return None
    if shortest == 0:
        return "end" if left == 1 else None
    return "force" if shortest >= left - 2 else None


@dataclass
class GrammarStats:
    """Host time of one constrained generation."""

    mask_s: float = 0.0  # llguidance: computing masks and consuming tokens
    masks: int = 0  # sampled tokens (one mask each)
    forced: int = 0  # tokens the grammar forced (embedded without sampling)
    forced_runs: int = 0  # prefill passes that embedded them
    closing: int = 0  # of the forced tokens, those that closed the grammar before max_tokens ran out
    ahead: int = 0  # sampled tokens whose next mask was computed while the device drew them
    ahead_s: float = 0.0  # host time spent on those branches (hidden behind the device pass)

    @property
    def mask_ms_per_token(self) -> float:
        """Mean llguidance time per sampled token, in ms."""
        return self.mask_s / self.masks * 1e3 if self.masks else 0.0


@dataclass
class _Loop:
    fwd: object
    token_in: object
    token_out: object
    mask: object
    states: object


def _build_loop(sess, sampler, vocab: int) -> _Loop:
    from ..dtypes import dtype
    from ..runtime.channel import Channel
    from ..runtime.loops import decode_loop
    from ..samplers import SamplerStates
    from .token_mask import device_allowed
    mask = Channel([(vocab + 31) // 32], dtype.u32).named("grammar:mask")
    states = SamplerStates(sampler, vocab, "grammar")
    loop = decode_loop(sess.ws, lambda logits: states.step(logits, device_allowed(mask.take(), vocab)),
                       name="grammar:")
    return _Loop(loop.fwd, loop.token_in, loop.token_out, mask, states)


async def _branches(m: Matcher, mask: np.ndarray, st: GrammarStats) -> dict:
    await asyncio.sleep(0)  # let the pass be submitted first: this work overlaps the device's
    t0 = time.perf_counter()
    out = m.branches(mask, SPECULATE)
    st.ahead_s += time.perf_counter() - t0
    return out


async def constrained_pieces(gen, sess):
    """Async generator of text pieces for Generation `gen` with its constraint, after its prompt is prefilled.

    Each step: forced tokens (if any) are prefilled and accepted without sampling; otherwise the
    host writes the mask, one pass draws under it, and the matcher consumes the token. The mask of
    step t+1 depends on token t (drawn on the device in step t). Where the grammar state allows
    it -- at most SPECULATE tokens allowed (enums, booleans, digits, ',' or '}') -- the host computes
    the next mask for every allowed token while the device draws, so the right one is ready when
    the token arrives; where it does not (free text in a string: thousands of allowed tokens) the
    mask is computed after the token. Where the grammar forces tokens, no pass samples at all.
    Budget closing: in the last CLOSE_LOOKAHEAD tokens, when the shortest completion found
    (Matcher.completion) only just fits, it is taken unsampled, so a text that can still be
    finished is finished; one that cannot ends at max_tokens (finish reason "length").
    """
    from ..samplers import SeqContext
    vocab = gen.model.config.vocab_size
    st = gen.grammar_stats = GrammarStats()
    loop = sess.loop(("grammar", gen.sampler.trace_key), lambda: _build_loop(sess, gen.sampler, vocab))
    m = gen.constraint.matcher()
    buf = np.zeros(m.words, np.uint32)
    pending = gen.prompt_ids[-1]
    draws = 0
    for ch in (loop.token_in, loop.token_out, loop.mask):
        ch.clear()
    loop.token_in.put([pending])
    loop.states.seed(SeqContext(tuple(sess.tokens + [pending]), vocab, gen.seed), sampler=gen.sampler)
    try:
        while len(gen.tokens) < gen.budget:
            t0 = time.perf_counter()
            left = gen.budget - len(gen.tokens)
            forced = m.forced_tokens()[:left]
            if not forced and left <= CLOSE_LOOKAHEAD:
                # budget closing: when the shortest completion found barely fits, take it (unsampled)
                path = m.completion(left)
                what = budget_close(None if path is None else len(path), left)
                if what == "end":
                    gen.out.end("grammar complete")
                    return
                if what == "force":
                    forced = path
                    st.closing += len(path)
            st.mask_s += time.perf_counter() - t0
            if forced:
                loop.token_in.clear()  # the pending token is embedded by the prefill instead
                await sess.extend([pending] + forced[:-1])
                pending = forced[-1]
                loop.token_in.put([pending])
                st.forced += len(forced)
                st.forced_runs += 1
                more = True
                for t in forced:
                    m.consume(t)
                    piece, more = gen.accept(t)
                    if piece:
                        yield piece
                    if not more:
                        break
                if not more:
                    return
                # penalties/DRY see the forced tokens; the RNG goes on where it was
                loop.states.seed(SeqContext(tuple(sess.tokens + [pending]), vocab, gen.seed, draws),
                                 sampler=gen.sampler)
                continue
            if m.is_done():
                gen.out.end("grammar complete")
                return
            t0 = time.perf_counter()
            m.mask_into(buf)
            st.mask_s += time.perf_counter() - t0
            loop.mask.put(buf)
            ahead = asyncio.ensure_future(_branches(m, buf.copy(), st))  # runs while the device draws
            try:
                await sess.pipe.submit(loop.fwd)
                tok = await loop.token_out.take_scalar()
            finally:
                branches = await ahead
            sess.embedded([pending])
            pending = tok
            draws += 1
            st.masks += 1
            t0 = time.perf_counter()
            if tok in branches:
                m = branches[tok]
                st.ahead += 1
            else:
                m.consume(tok)  # a token outside the mask raises: device and host disagree
            st.mask_s += time.perf_counter() - t0
            piece, more = gen.accept(tok)
            if piece:
                yield piece
            if not more:
                return
    finally:
        sess.pending = pending


__all__ = ["GrammarStats", "constrained_pieces", "budget_close"]
