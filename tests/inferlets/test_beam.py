"""Beam search on the device equals a numpy beam search over the reference forward pass."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from piegpu import ValidationError
from piegpu.inferlets.beam import _Hypotheses, beam_search, select_beams
from tests.helpers import tiny_config, tiny_model


def log_softmax(x):
    z = x.astype(np.float64) - x.max()
    return z - np.log(np.exp(z).sum())


def numpy_beam_search(ref, ids, width, max_tokens, eos, length_penalty=1.0):
    """The same algorithm (transformers' beam search, early_stopping=False) over the numpy reference."""
    base = ref.new_cache()
    row = ref.forward(ids, base)[-1]
    caches = [copy.deepcopy(base) for _ in range(width)]
    rows = [row] * width
    hyps = _Hypotheses(width, length_penalty)
    beams, scores = [[] for _ in range(width)], [0.0] + [float("-inf")] * (width - 1)
    V = row.shape[-1]
    for step in range(max_tokens):
        cand = np.concatenate([log_softmax(r) + s for r, s in zip(rows, scores)])
        order = np.argsort(-cand, kind="stable")[: 2 * width]
        parents, nxt, new = select_beams(cand[order], order, V, width, beams, scores, eos, hyps)
        if len(parents) < width or hyps.done(max(new), step + 1):
            break
        caches = [copy.deepcopy(caches[p]) for p in parents]
        beams = [beams[p] + [t] for p, t in zip(parents, nxt)]
        scores = new
        rows = [ref.forward([t], c)[-1] for t, c in zip(nxt, caches)]
    for b, s in zip(beams, scores):
        if s > float("-inf") and b:
            hyps.add(b, s)
    return hyps.items


@pytest.fixture(scope="module")
def tiny(gpu):
    return tiny_model(tiny_config(layers=2, vocab=300), seed=9)


@pytest.mark.parametrize("width, lp", [(2, 1.0), (3, 1.0), (4, 0.5)])
def test_beam_search_matches_numpy_on_a_tiny_model(tiny, width, lp):
    model, ref = tiny
    got = beam_search(model, "5 17 42 7", width=width, max_tokens=8, length_penalty=lp)
    want = numpy_beam_search(ref, [5, 17, 42, 7], width, 8, {2}, lp)
    assert got.tokens == want[0][1]
    assert [h[1] for h in got.hypotheses] == [h[1] for h in want]
    np.testing.assert_allclose([h[0] for h in got.hypotheses], [h[0] for h in want], atol=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("prompt", ["Once upon a time", "The capital of France is"])
def test_beam_search_matches_numpy_on_the_default_model(default_model, prompt):
    from piegpu.model.default import default_model_dir
    from piegpu.model.reference import ReferenceModel
    ref = ReferenceModel.from_dir(default_model_dir(verbose=False))
    got = beam_search(default_model, prompt, width=3, max_tokens=6)
    ids = default_model.tokenizer.encode(prompt).ids
    want = numpy_beam_search(ref, ids, 3, 6, set(default_model.config.eos_token_ids))
    assert got.tokens == want[0][1], (default_model.tokenizer.decode(got.tokens),
                                     default_model.tokenizer.decode(want[0][1]))


def test_beam_search_bad_input(tiny):
    model, _ = tiny
    with pytest.raises(ValidationError, match="width"):
        beam_search(model, "5", width=0)
    with pytest.raises(ValidationError, match="exceed the context"):
        beam_search(model, "5", max_tokens=10_000)
