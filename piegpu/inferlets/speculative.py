"""Speculative greedy decoding with prompt-lookup drafts, verified on the device.

The host proposes up to k draft tokens by prompt lookup: it finds the most recent
earlier occurrence of the sequence's last n-gram (n = ngram, then shorter) and proposes
the tokens that followed it. One pass embeds the pending token plus the d drafts and
reads out d + 1 logits rows; the epilogue computes each row's argmax, the accepted
prefix (cumprod(eq(drafts, argmax))), keeps accepted + 1 embedded tokens in the KV
state with StateGeometry.accepting (the length advances on the device), and puts
[accepted, argmax...] into a result channel. The host learns the accepted tokens plus
the correction token (argmax of the first rejected row) from that channel, and tells
the working set its new length (ws.note_length). Every emitted token is an argmax of
the model given the tokens before it, so the output is plain greedy decoding's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .. import eta
from ..runtime.channel import Channel
from ..dtypes import dtype
from ..errors import ValidationError
from ..eta import intrinsics
from ..runtime.forward import ForwardPass, StateGeometry
from ..runtime.session import run_sync


@dataclass
class SpeculativeStats:
    """Draft and acceptance counts of one speculative generation."""

    passes: int = 0
    drafted: int = 0
    accepted: int = 0
    generated: int = 0
    decode_s: float = 0.0
    stop_reason: str = ""

    @property
    def acceptance_rate(self) -> float:
        """Accepted drafts over proposed drafts."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_pass(self) -> float:
        """Generated tokens per verification pass (1.0 is plain decoding)."""
        return self.generated / self.passes if self.passes else 0.0


def lookup_drafts(tokens: list, k: int, ngram: int = 3) -> list:
    """Up to k tokens that followed an earlier match of the last n-gram (n = ngram..1).

    The most recent match with k tokens after it wins; in a repetitive tail the most
    recent match overlaps the end and has fewer, so the longest continuation is kept.
    """
    L = len(tokens)
    for n in range(min(ngram, L - 1), 0, -1):
        tail = tokens[L - n:]
        best: list = []
        for start in range(L - n - 1, -1, -1):  # most recent earlier occurrence first
            if tokens[start: start + n] == tail:
                follow = tokens[start + n: start + n + k]
                if len(follow) == k:
                    return follow
                if len(follow) > len(best):
                    best = follow
        if best:
            return best
    return []


@dataclass
class _Verify:
    fwd: ForwardPass
    tokens: Channel
    result: Channel


def _verify_pass(sess, d: int) -> _Verify:
    """The pass that embeds the pending token + d drafts and keeps the accepted prefix (built once per d)."""
    return sess.loop(("speculative", d), lambda: _build_verify_pass(sess, d))


def _build_verify_pass(sess, d: int) -> _Verify:
    toks = Channel([d + 1], dtype.i32).named(f"spec:tokens[{d + 1}]")
    result = Channel([d + 2], dtype.i32).named(f"spec:verdict[{d + 2}]")
    geom = StateGeometry.accepting()
    fwd = ForwardPass()
    fwd.embed(toks, Channel.from_([0, d + 1], dtype.u32))
    fwd.state([sess.ws], geom)
    fwd.readout(d + 1)

    @fwd.epilogue
    def _():
        best = eta.concat([eta.reshape(eta.reduce_argmax(eta.sanitize(intrinsics.output(i))), [1])
                           for i in range(d + 1)])  # [d + 1]: the greedy token after each embedded one
        if d:
            drafts = eta.slice_last(toks.read(), 1, d)
            ok = eta.cast(eta.eq(drafts, eta.slice_last(best, 0, d)), dtype.i32)
            accepted = eta.reduce_sum(eta.cumprod(ok))  # drafts matching until the first miss
        else:
            accepted = eta.broadcast(eta.cast(0, dtype.i32), [])
        geom.keep(accepted + 1)  # the pending token and the accepted drafts stay in the KV state
        result.put(eta.concat([eta.reshape(accepted, [1]), best]))

    return _Verify(fwd, toks, result)


async def agenerate_speculative(model, prompt: str, max_tokens: int = 128, k: int = 4, ngram: int = 3,
                                chat: bool = False, stop_at_eos: bool = True, drafter=None) -> tuple:
    """Async generate_speculative()."""
    if not isinstance(prompt, str):
        raise ValidationError(f"generate_speculative: prompt must be a str, got {type(prompt).__name__}")
    for name, v, lo in (("max_tokens", max_tokens, 1), ("k", k, 1), ("ngram", ngram, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValidationError(f"generate_speculative: {name} must be an int >= {lo}, got {v!r}")
    text = model.chat_prompt(prompt) if chat else prompt
    ids = list(model.tokenizer.encode(text).ids)
    if not ids:
        raise ValidationError("generate_speculative: the prompt is empty (no tokens). Fix: pass some text")
    sess = model.session(tokens=len(ids) + max_tokens + k + 1)
    await sess.start(ids)
    ws = sess.ws
    eos = set(model.config.eos_token_ids) if stop_at_eos else set()
    stats = SpeculativeStats()
    seq = list(ids)  # every token of the sequence; seq[-1] is pending (not yet embedded)
    out: list = []
    t0 = time.perf_counter()
    try:
        while len(out) < max_tokens:
            room = min(k, max_tokens - len(out) - 1, ws.max_tokens - ws.length - 1)
            drafts = (drafter(seq, room) if drafter else lookup_drafts(seq, room, ngram)) if room > 0 else []
            drafts = [int(t) for t in drafts][:room]
            if any(not 0 <= t < model.config.vocab_size for t in drafts):
                raise ValidationError(f"generate_speculative: the drafter proposed token ids outside "
                                      f"[0, {model.config.vocab_size}): {drafts}")
            v = _verify_pass(sess, len(drafts))
            v.tokens.clear()
            v.result.clear()
            v.tokens.put([seq[-1]] + drafts)
            before = ws.length
            await sess.pipe.submit(v.fwd)
            r = (await v.result.take()).tolist()
            acc = r[0]
            new = r[1: acc + 2]  # accepted drafts (equal to their rows' argmax) + the correction token
            ws.note_length(before + acc + 1)
            sess.embedded(seq[-1:] + drafts[:acc])
            stats.passes += 1
            stats.drafted += len(drafts)
            stats.accepted += acc
            stop = next((i for i, t in enumerate(new) if t in eos), None)
            if stop is not None:
                out += new[:stop]
                seq += new[:stop + 1]
                stats.stop_reason = "stop token"
                break
            out += new
            seq += new
        else:
            stats.stop_reason = "max_tokens"
    finally:
        stats.decode_s = time.perf_counter() - t0
    out = out[:max_tokens]
    stats.generated = len(out)
    return out, stats


def generate_speculative(model, prompt: str, max_tokens: int = 128, k: int = 4, ngram: int = 3,
                         chat: bool = False, stop_at_eos: bool = True, drafter=None) -> tuple:
    """(tokens, SpeculativeStats): greedy decoding of `prompt` with prompt-lookup drafts verified on the device.

    `drafter(sequence, k) -> token ids` replaces prompt lookup (e.g. a small draft model).
    """
    return run_sync(agenerate_speculative(model, prompt, max_tokens, k, ngram, chat, stop_at_eos, drafter))


__all__ = ["generate_speculative", "agenerate_speculative", "lookup_drafts", "SpeculativeStats"]
