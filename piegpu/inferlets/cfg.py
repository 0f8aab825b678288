"""Classifier-free guidance: a conditional and an unconditional sequence in one pass, mixed on the device.

Both sequences are rows of the same forward pass (two working sets, one token each).
The epilogue takes both readout rows, mixes their log-probabilities as transformers'
ClassifierFreeGuidanceLogitsProcessor does -- lu + scale * (lc - lu) with lc, lu the
log-softmax of the conditional and unconditional logits -- draws the next token
(argmax, or Gumbel-max at a temperature), and feeds that one token to BOTH sequences
on the device. The decode loop runs ahead without a host round trip per token; only
the token comes back.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import eta
from ..dtypes import dtype
from ..errors import ValidationError
from ..eta import intrinsics
from ..runtime.channel import Channel
from ..runtime.window import channel_capacity
from ..runtime.forward import ForwardPass, StateGeometry
from ..runtime.session import run_sync
from ..samplers import rng_advance


@dataclass
class GuidedText:
    """The result of generate_cfg."""

    text: str
    tokens: list
    stop_reason: str


def mix(cond, uncond, scale: float):
    """Traced: the guided log-probabilities lu + scale * (lc - lu) (rows of f32 logits)."""
    lc, lu = eta.log_softmax(eta.sanitize(cond)), eta.log_softmax(eta.sanitize(uncond))
    return lu + (lc - lu) * scale


async def agenerate_cfg(model, prompt: str, negative: str = "", scale: float = 1.5, max_tokens: int = 64,
                        temperature: float = 0.0, seed: int = 0, chat: bool = False,
                        window: int | None = None) -> GuidedText:
    """Async generate_cfg() (`window`: passes in flight ahead of the host; None: the adapter's best)."""
    if not isinstance(prompt, str) or not isinstance(negative, str):
        raise ValidationError("generate_cfg: prompt and negative must be str")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValidationError(f"generate_cfg: max_tokens must be an int >= 1, got {max_tokens!r}")
    scale, temperature = float(scale), float(temperature)
    if not np.isfinite(scale) or not (temperature >= 0 and np.isfinite(temperature)):
        raise ValidationError(f"generate_cfg: scale must be finite and temperature a finite number >= 0, got "
                              f"{scale!r}, {temperature!r}")
    tok = model.tokenizer
    cond = tok.encode(model.chat_prompt(prompt) if chat else prompt).ids
    uncond = tok.encode(model.chat_prompt(negative) if chat else negative).ids or [model.config.bos_token_id or 0]
    if not cond:
        raise ValidationError("generate_cfg: the prompt is empty (no tokens). Fix: pass some text")
    limit = model.context
    if max(len(cond), len(uncond)) + max_tokens > limit:
        raise ValidationError(f"generate_cfg: prompt ({len(cond)} tokens) + max_tokens ({max_tokens}) exceed the "
                              f"context of {limit}. Fix: fewer max_tokens")
    sessions = [model.session(model.working_set(len(ids) + max_tokens)) for ids in (cond, uncond)]
    for sess, ids in zip(sessions, (cond, uncond)):
        await sess.extend(ids[:-1])
    token_in = Channel.from_([cond[-1], uncond[-1]], dtype.i32).named("cfg:tokens")
    token_out = Channel([1], dtype.i32).named("cfg:token").capacity(channel_capacity())
    rng = Channel.from_([seed & 0xFFFFFFFF, 0], dtype.u32).named("cfg:rng") if temperature > 0 else None
    fwd = ForwardPass()
    fwd.embed(token_in, Channel.from_([0, 1, 2], dtype.u32))
    fwd.state([s.ws for s in sessions], StateGeometry.folding())

    @fwd.epilogue
    def _():
        guided = mix(intrinsics.output(0), intrinsics.output(1), scale)
        if rng is None:
            t = eta.reduce_argmax(guided)
        else:
            state = rng.take()
            t = eta.gumbel_max(guided * (1.0 / temperature), state)
            rng.put(rng_advance(state))
        t = eta.reshape(eta.cast(t, dtype.i32), [1])
        token_in.put(eta.concat([t, t]))  # the same token continues both sequences
        token_out.put(t)

    out: list = []
    stop = set(model.config.eos_token_ids)
    reason = ["max_tokens"]

    async def on_token():
        t = await token_out.take_scalar()
        if t in stop:
            reason[0] = "stop token"
            return False
        out.append(t)
        return len(out) < max_tokens
    await model.default_pipeline.run_ahead(fwd, max_tokens, on_token, window=window)
    return GuidedText(tok.decode(out), out, reason[0])


def generate_cfg(model, prompt: str, negative: str = "", scale: float = 1.5, max_tokens: int = 64,
                 temperature: float = 0.0, seed: int = 0, chat: bool = False, window: int | None = None) -> GuidedText:
    """Generate `prompt` guided away from `negative` (default: no context) with guidance `scale` (1 = plain)."""
    return run_sync(agenerate_cfg(model, prompt, negative, scale, max_tokens, temperature, seed, chat, window))


__all__ = ["generate_cfg", "agenerate_cfg", "mix", "GuidedText"]
