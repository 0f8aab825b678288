"""Best-of-n and self-consistency: n samples of one prompt decoded together, chosen on the host.

The n samples are rows of the same passes (model.generate(prompt, n=N): the prompt is
prefilled once and its KV forked per sample). Each row's epilogue also returns the
model's log-probability of the token it drew (log_softmax of the raw logits, gathered
on the device), so scoring a sample costs no second forward pass: best_of_n picks the
sample with the highest mean token log-probability, self_consistency the answer that
most samples reach (ties: the answer whose samples have the higher mean log-probability).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import ValidationError


@dataclass
class Chosen:
    """The chosen sample (or answer) and what it was chosen from."""

    text: str
    tokens: list
    mean_logprob: float
    samples: list  # every sample (Generation objects with .text, .tokens, .logprobs)
    answer: object = None  # self_consistency: the majority answer
    votes: dict | None = None  # self_consistency: answer -> number of samples


def _sample(model, prompt: str, n: int, **kwargs) -> list:
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ValidationError(f"n must be an int >= 2 (one sample needs no choice), got {n!r}")
    kwargs.setdefault("sampler", "top-p")
    kwargs.setdefault("temperature", 0.8)
    s = model.generate(prompt, n=n, logprobs=True, **kwargs)
    s.run()
    return s.samples


def mean_logprob(g) -> float:
    """Mean log-probability of a sample's tokens (-inf for an empty sample)."""
    return float(np.mean(g.logprobs)) if g.logprobs else float("-inf")


def best_of_n(model, prompt: str, n: int = 4, **kwargs) -> Chosen:
    """The sample of n with the highest mean token log-probability (ties: the lower sample index)."""
    samples = _sample(model, prompt, n, **kwargs)
    best = max(range(n), key=lambda i: (mean_logprob(samples[i]), -i))
    g = samples[best]
    return Chosen(g.text, list(g.tokens), mean_logprob(g), samples)


def self_consistency(model, prompt: str, extract: Callable, n: int = 5, **kwargs) -> Chosen:
    """The answer most of n samples reach; `extract(text)` gives a sample's answer (None: no answer)."""
    if not callable(extract):
        raise ValidationError("self_consistency: extract must be a function text -> answer (or None)")
    samples = _sample(model, prompt, n, **kwargs)
    groups: dict = defaultdict(list)
    for g in samples:
        a = extract(g.text)
        if a is not None:
            groups[a].append(g)
    if not groups:
        raise ValidationError(f"self_consistency: none of the {n} samples had an answer (extract returned None for "
                              "each). Fix: more max_tokens, or an extract that recognises the answers")
    answer = max(groups, key=lambda a: (len(groups[a]), float(np.mean([mean_logprob(g) for g in groups[a]]))))
    g = max(groups[answer], key=mean_logprob)
    return Chosen(g.text, list(g.tokens), mean_logprob(g), samples, answer, {a: len(v) for a, v in groups.items()})


__all__ = ["best_of_n", "self_consistency", "mean_logprob", "Chosen"]
