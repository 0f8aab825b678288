"""Best-of-n and self-consistency: device log-probabilities equal the reference's; the choice follows them."""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import ValidationError
from piegpu.inferlets.best_of_n import best_of_n, mean_logprob, self_consistency
from tests.helpers import tiny_config, tiny_model

PROMPT = "5 17 42 7"


@pytest.fixture(scope="module")
def tiny(gpu):
    return tiny_model(tiny_config(layers=2, vocab=300), seed=3)


def reference_logprobs(ref, prompt_ids, tokens):
    """log_softmax of the reference logits at each generated token (teacher forcing)."""
    logits = ref.forward(prompt_ids + tokens, ref.new_cache())[len(prompt_ids) - 1: len(prompt_ids) - 1 + len(tokens)]
    z = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    lp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return lp[np.arange(len(tokens)), tokens]


def test_best_of_n_picks_the_highest_mean_logprob(tiny):
    model, ref = tiny
    got = best_of_n(model, PROMPT, n=4, max_tokens=6, seed=11)
    assert len(got.samples) == 4 and len({tuple(g.tokens) for g in got.samples}) > 1
    means = []
    for g in got.samples:
        want = reference_logprobs(ref, [5, 17, 42, 7], g.tokens)
        np.testing.assert_allclose(g.logprobs, want, atol=2e-4)
        means.append(float(np.mean(want)))
    assert got.tokens == got.samples[int(np.argmax(means))].tokens
    assert got.mean_logprob == pytest.approx(max(means), abs=2e-4)


def test_self_consistency_takes_the_majority_answer(tiny):
    model, _ = tiny
    extract = lambda text: text.count("<") % 2  # noqa: E731  (an "answer": the parity of the sample's length)
    got = self_consistency(model, PROMPT, extract, n=5, max_tokens=5, seed=2)
    answers = [extract(g.text) for g in got.samples]
    counts = {a: answers.count(a) for a in set(answers)}
    assert got.votes == counts and counts[got.answer] == max(counts.values())
    assert extract(got.text) == got.answer
    assert got.mean_logprob == max(mean_logprob(g) for g in got.samples if extract(g.text) == got.answer)


def test_bad_input(tiny):
    model, _ = tiny
    with pytest.raises(ValidationError, match="n must be an int >= 2"):
        best_of_n(model, PROMPT, n=1)
    with pytest.raises(ValidationError, match="none of the 2 samples had an answer"):
        self_consistency(model, PROMPT, lambda text: None, n=2, max_tokens=2)
