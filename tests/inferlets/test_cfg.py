"""Classifier-free guidance on the device equals a numpy CFG over the reference forward pass."""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import ValidationError
from piegpu.inferlets.cfg import generate_cfg
from tests.helpers import tiny_config, tiny_model


@pytest.fixture(scope="module")
def tiny(gpu):
    return tiny_model(tiny_config(layers=2, vocab=300), seed=5)


def log_softmax(x):
    z = x - x.max()
    return z - np.log(np.exp(z).sum())


def check_numpy_cfg(ref, cond, uncond, scale, tokens, tol=2e-4):
    """Greedy CFG over the reference forward, teacher-forced with `tokens`: each must be the guided argmax.

    Where the reference's best two guided scores are closer than the GPU-vs-reference logit
    error (times the scale), either choice is correct; elsewhere the token must be the argmax.
    """
    caches = [ref.new_cache(), ref.new_cache()]
    rows = [ref.forward(ids, c)[-1] for ids, c in zip((cond, uncond), caches)]
    exact = 0
    for t in tokens:
        lc, lu = log_softmax(rows[0].astype(np.float64)), log_softmax(rows[1].astype(np.float64))
        g = lu + scale * (lc - lu)
        assert g[t] >= g.max() - tol * (1 + 2 * abs(scale)), (t, int(np.argmax(g)), g.max() - g[t])
        exact += t == int(np.argmax(g))
        rows = [ref.forward([t], c)[-1] for c in caches]
    return exact


@pytest.mark.parametrize("scale", [1.0, 1.5, 3.0])
def test_cfg_matches_numpy(tiny, scale):
    model, ref = tiny
    got = generate_cfg(model, "5 17 42 7 9", negative="3 4", scale=scale, max_tokens=10)
    drawn = got.tokens + ([2] if got.stop_reason == "stop token" else [])  # the tiny config's eos is 2
    assert len(drawn) == 10 or got.stop_reason == "stop token"
    assert check_numpy_cfg(ref, [5, 17, 42, 7, 9], [3, 4], scale, drawn) >= len(drawn) - 1


def test_cfg_scale_one_is_plain_greedy(tiny):
    model, _ = tiny
    g = model.generate("5 17 42 7 9", max_tokens=8)
    g.run()
    assert generate_cfg(model, "5 17 42 7 9", negative="3 4", scale=1.0, max_tokens=8).tokens == g.tokens


def test_cfg_sampling_is_seeded_and_bad_input_is_refused(tiny):
    model, _ = tiny
    a = generate_cfg(model, "5 17 42", scale=2.0, max_tokens=6, temperature=0.8, seed=3)
    b = generate_cfg(model, "5 17 42", scale=2.0, max_tokens=6, temperature=0.8, seed=3)
    assert a.tokens == b.tokens
    with pytest.raises(ValidationError, match="max_tokens"):
        generate_cfg(model, "5", max_tokens=0)
    with pytest.raises(ValidationError, match="exceed the context"):
        generate_cfg(model, "5", max_tokens=10_000)
