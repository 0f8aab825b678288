"""The default model's forward pass computed by Chromium: a real prefill recorded on lavapipe
(tests/browser/model_replay.py) replayed with Tint-compiled hand-written shaders on SwiftShader
gives the same logits as lavapipe (the float tolerance of the wgsl tests) and the same greedy token
at every position."""

from __future__ import annotations

import numpy as np
import pytest

from piegpu.errors import ModelError
from tests.browser.harness import words_b64
from tests.browser.model_replay import capture_prefill
from tests.progen import compare

PROMPT = "Once upon a time, in a small village"


@pytest.fixture(scope="module")
def replayed(browser, gpu):
    """(the recorded pass, Chromium's logits of it)."""
    from piegpu.loaded import load_model
    try:
        rec = capture_prefill(lambda: load_model(verbose=False), PROMPT)
    except ModelError as e:
        pytest.skip(f"default model unavailable: {e}")
    spec = {"buffers": rec.write_files(browser.data / "prefill"), "shaders": rec.shaders,
            "dispatches": rec.dispatches, "read": [rec.logits_buffer, rec.logits.size]}
    reply = browser.replay(spec)
    assert not reply["errors"], "Chromium could not replay the prefill:\n" + "\n".join(reply["errors"])
    return rec, words_b64(reply["output"]).view(np.float32).reshape(rec.logits.shape)


def test_the_recorded_pass_is_the_whole_model(replayed):
    rec, _ = replayed
    labels = " ".join(s["label"] for s in rec.shaders)
    for name in ("embed", "rmsnorm", "matmul", "attention", "advance"):
        assert name in labels, labels
    assert len(rec.dispatches) > 30 * 5 and rec.logits.shape[0] > 5


def test_chromium_computes_lavapipes_logits(replayed):
    rec, got = replayed
    assert np.isfinite(got).all()
    compare(rec.logits, got, False, "prefill logits, Chromium vs lavapipe")
    np.testing.assert_array_equal(got.argmax(axis=1), rec.logits.argmax(axis=1))
