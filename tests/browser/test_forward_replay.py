"""The default model's forward passes computed by Chromium: a real prefill and the decode step after
it, recorded on lavapipe (tests/browser/model_replay.py) and replayed with Tint-compiled hand-written
shaders on SwiftShader, give lavapipe's logits (the float tolerance of the wgsl tests) and the same
greedy token at every position. The decode reads the KV cache Chromium's own prefill wrote."""

from __future__ import annotations

import numpy as np
import pytest

from piegpu.errors import ModelError
from tests.browser.harness import words_b64
from tests.browser.model_replay import capture_passes
from tests.progen import compare

PROMPT = "Once upon a time, in a small village"


@pytest.fixture(scope="module")
def replayed(browser, gpu):
    """(the recorded passes, Chromium's logits of each pass)."""
    from piegpu.textgen.model import load_model
    try:
        # exact K and V: f16 rounding would turn the two implementations' f32 noise into whole ulps of a half
        rec = capture_passes(lambda: load_model(verbose=False, kv_dtype="f32"), PROMPT, browser.subgroup_lanes)
    except ModelError as e:
        pytest.skip(f"default model unavailable: {e}")
    spec = {"buffers": rec.write_files(browser.data / "passes"), "shaders": rec.shaders,
            "dispatches": rec.dispatches, "reads": rec.reads}
    reply = browser.replay(spec)
    assert not reply["errors"], "Chromium could not replay the passes:\n" + "\n".join(reply["errors"])
    words = words_b64(reply["output"]).view(np.float32)
    got, pos = [], 0
    for x in rec.logits:
        got.append(words[pos: pos + x.size].reshape(x.shape))
        pos += x.size
    return rec, got


def test_the_recorded_passes_are_the_whole_model(replayed):
    rec, _ = replayed
    labels = " ".join(s["label"] for s in rec.shaders)
    for name in ("embed", "rmsnorm", "matmul", "matvec_decode", "attention_tokens", "attention[", "advance"):
        assert name in labels, labels
    assert len(rec.dispatches) > 2 * 30 * 5
    assert rec.logits[0].shape[0] >= 5 and rec.logits[1].shape[0] == 1  # every prefill position, then one token


@pytest.mark.parametrize("which", ["prefill", "decode"])
def test_chromium_computes_lavapipes_logits(replayed, which):
    rec, got = replayed
    i = ["prefill", "decode"].index(which)
    assert np.isfinite(got[i]).all()
    compare(rec.logits[i], got[i], False, f"{which} logits, Chromium vs lavapipe")
    np.testing.assert_array_equal(got[i].argmax(axis=1), rec.logits[i].argmax(axis=1))
