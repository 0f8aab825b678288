"""Beam search: `width` beams as the rows of one pass, candidates chosen on the device.

Every step is one pass over the beams' working sets (one token each). The epilogue
adds each beam's running score to its row's log-softmax, flattens the width x vocab
candidates and takes their top 2 x width on the device (top_k over width x vocab
values); only those 2 x width scores and ids come back. The host then follows
transformers' beam search: candidates in score order, a candidate ending in EOS that
ranks within the first `width` becomes a finished hypothesis scored
sum_logprobs / generated_length ** length_penalty, the first `width` other candidates
become the next beams; the search ends when `width` hypotheses are finished and no
running beam can beat the worst of them (early_stopping=False), or at max_tokens. The
next beams' KV states are reordered on the device: each beam slot whose parent is
another slot gets that parent's KV copied in (through spare working sets, so a
permutation never reads a slot it already overwrote).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import eta
from ..dtypes import dtype
from ..errors import ValidationError
from ..eta import intrinsics
from ..eta.composites import keep_dims
from ..runtime.channel import Channel
from ..runtime.forward import ForwardPass, StateGeometry
from ..runtime.session import run_sync


@dataclass
class BeamResult:
    """The best hypothesis of a beam search, and every finished one (score, tokens), best first."""

    text: str
    tokens: list
    score: float
    hypotheses: list = field(default_factory=list)


class _Hypotheses:
    """The finished hypotheses of transformers' BeamHypotheses (early_stopping=False)."""

    def __init__(self, width: int, length_penalty: float):
        self.width, self.lp = width, length_penalty
        self.items: list = []  # (score, tokens)

    def add(self, tokens: list, sum_logprobs: float) -> None:
        score = sum_logprobs / (max(len(tokens), 1) ** self.lp)
        self.items.append((score, list(tokens)))
        self.items.sort(key=lambda h: -h[0])
        del self.items[self.width:]

    def done(self, best_running_sum: float, generated: int) -> bool:
        if len(self.items) < self.width:
            return False
        return best_running_sum / (generated ** self.lp) <= self.items[-1][0]


def select_beams(values, indices, vocab: int, width: int, beams: list, scores: list, eos: set,
                 hyps: _Hypotheses) -> tuple:
    """From the top 2*width candidates: (parents, tokens, scores) of the next beams; EOS ones go to hyps."""
    parents, tokens, new_scores = [], [], []
    for rank, (v, i) in enumerate(zip(values, indices)):
        b, t = int(i) // vocab, int(i) % vocab
        if t in eos:
            if rank < width:
                hyps.add(beams[b], float(v))
            continue
        parents.append(b)
        tokens.append(t)
        new_scores.append(float(v))
        if len(parents) == width:
            break
    return parents, tokens, new_scores


async def abeam_search(model, prompt: str, width: int = 4, max_tokens: int = 32, length_penalty: float = 1.0,
                       chat: bool = False) -> BeamResult:
    """Async beam_search()."""
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValidationError(f"beam_search: width must be an int >= 1, got {width!r}")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValidationError(f"beam_search: max_tokens must be an int >= 1, got {max_tokens!r}")
    V = model.config.vocab_size
    if 2 * width > V:
        raise ValidationError(f"beam_search: width {width} needs 2 x width <= vocab ({V}) candidates")
    ids = model.tokenizer.encode(model.chat_prompt(prompt) if chat else prompt).ids
    if not ids:
        raise ValidationError("beam_search: the prompt is empty (no tokens). Fix: pass some text")
    n = len(ids) + max_tokens
    if n > model.context:
        raise ValidationError(f"beam_search: prompt ({len(ids)} tokens) + max_tokens ({max_tokens}) exceed the "
                              f"context of {model.context}. Fix: fewer max_tokens")
    first = model.session(model.working_set(n))
    await first.extend(ids[:-1])
    slots = [first.ws] + [first.ws.fork() for _ in range(width - 1)]
    spare = [model.working_set(n) for _ in range(width)]
    K = 2 * width
    tokens_in = Channel([width], dtype.i32).named("beam:tokens")
    scores_in = Channel([width], dtype.f32).named("beam:scores")
    top_values = Channel([K], dtype.f32).named("beam:candidate-scores")
    top_ids = Channel([K], dtype.i32).named("beam:candidate-ids")
    fwd = ForwardPass()
    fwd.embed(tokens_in, Channel.from_(np.arange(width + 1), dtype.u32))
    fwd.state(slots, StateGeometry.folding())

    @fwd.epilogue
    def _():
        lp = eta.log_softmax(eta.sanitize(intrinsics.outputs("logits")))  # [width, vocab]
        cand = lp + keep_dims(scores_in.take(), lp)
        values, idx = eta.top_k(eta.reshape(cand, [width * V]), K)
        top_values.put(values)
        top_ids.put(idx)

    eos = set(model.config.eos_token_ids)
    hyps = _Hypotheses(width, float(length_penalty))
    beams: list = [[] for _ in range(width)]  # generated tokens of each slot's beam
    scores = [0.0] + [float("-inf")] * (width - 1)  # the first step expands beam 0 only
    pending = [ids[-1]] * width
    pipe = model.default_pipeline
    for step in range(max_tokens):
        tokens_in.put(np.array(pending, np.int32))
        scores_in.put(np.array(scores, np.float32))
        await pipe.submit(fwd)
        values, idx = (await top_values.take()).tolist(), (await top_ids.take()).tolist()
        parents, nxt, new_scores = select_beams(values, idx, V, width, beams, scores, eos, hyps)
        if len(parents) < width or hyps.done(max(new_scores), step + 1):
            break
        moves = [(j, p) for j, p in enumerate(parents) if p != j]
        if moves:  # parents' KV pages shared into their children's slots, through the spares
            model.gpu.copy_working_sets([(slots[p], spare[j]) for j, p in moves]
                                        + [(spare[j], slots[j]) for j, _ in moves])
            for j, _ in moves:  # the spares let go: a beam whose page no other beam shares writes in place
                spare[j].reset()
        beams = [beams[p] + [t] for p, t in zip(parents, nxt)]
        scores, pending = new_scores, nxt
    for b, s in zip(beams, scores):  # running beams count as hypotheses at the end
        if s > float("-inf") and b:
            hyps.add(b, s)
    best_score, best = hyps.items[0] if hyps.items else (float("-inf"), [])
    return BeamResult(model.tokenizer.decode(best), best, best_score, list(hyps.items))


def beam_search(model, prompt: str, width: int = 4, max_tokens: int = 32, length_penalty: float = 1.0,
                chat: bool = False) -> BeamResult:
    """The most likely continuation of `prompt` found by a beam search of `width` beams (see the module docstring)."""
    return run_sync(abeam_search(model, prompt, width, max_tokens, length_penalty, chat))


__all__ = ["beam_search", "abeam_search", "BeamResult", "select_beams"]
