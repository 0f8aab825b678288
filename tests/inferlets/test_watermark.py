"""Greenlist watermark: device greenlists bit-identical to the host detector's; z-scores separate
watermarked from plain output of the same length on the default model."""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import ValidationError, dtype, eta
from piegpu.inferlets.watermark import Watermark, detect, generate_watermarked, green_mask, is_green, score

THRESHOLD = 4.0  # z-score; about 3e-5 one-sided false-positive rate under the null hypothesis


@pytest.mark.parametrize("gamma", [0.25, 0.5])
def test_device_greenlist_is_bit_identical_to_the_host(gpu, gamma):
    V = 49152
    prog = eta.trace(lambda s: green_mask(s, V, gamma), eta.spec([2], dtype.u32))
    for key, prev in [(0, 0), (12345, 17), (0xFFFFFFFF, 49151), (2 ** 31, 2)]:
        dev = prog.run(np.array([key, prev], np.uint32), backend="wgsl")
        host = is_green(key, np.full(V, prev), np.arange(V), gamma)
        assert dev.tolist() == host.tolist()
        assert abs(dev.mean() - gamma) < 0.01


def test_green_logits_get_delta(gpu):
    V = 64
    wm = Watermark(99, 0.5, 3.0)
    x = np.linspace(-2, 2, V).astype(np.float32)

    def fn(t, st):
        return wm.apply(t, {"watermark": st}), wm.update({"watermark": st}, eta.cast(5, dtype.i32), t)["watermark"]
    out, nxt = eta.trace(fn, eta.spec([V], dtype.f32), eta.spec([2], dtype.u32)).run(
        x, np.array([99, 7], np.uint32), backend="wgsl")
    green = is_green(99, np.full(V, 7), np.arange(V), 0.5)
    np.testing.assert_allclose(out, x + 3.0 * green, rtol=1e-6)
    assert nxt.tolist() == [99, 5]  # the key stays, the drawn token becomes the previous one


def test_detector_statistics():
    rng = np.random.default_rng(0)
    plain = rng.integers(0, 49152, 400).tolist()
    assert abs(detect(plain, key=5, gamma=0.25)) < THRESHOLD  # random text: about N(0, 1)
    s = score(plain, key=5, gamma=0.25)
    assert s.scored == 399 and 0 <= s.green <= 399
    # a sequence that always picks green tokens scores high
    seq = [7]
    for _ in range(50):
        cand = np.arange(49152)
        g = is_green(5, np.full(cand.size, seq[-1]), cand, 0.25)
        seq.append(int(cand[g][rng.integers(g.sum())]))
    assert score(seq, 5, 0.25).green == 50 and detect(seq, 5, 0.25) > 8
    with pytest.raises(ValidationError, match="at least 2 tokens"):
        detect([1], 5)
    with pytest.raises(ValidationError, match="gamma"):
        detect(plain, 5, gamma=1.5)
    with pytest.raises(ValidationError, match="key must be an int"):
        Watermark(-1)


def test_watermarked_output_is_detected_and_plain_output_is_not(default_model):
    key, n = 2024, 64
    prompt = "Write a short story about a lighthouse keeper."
    text, marked = generate_watermarked(default_model, prompt, key, max_tokens=n, seed=3, chat=True)
    g = default_model.generate(prompt, max_tokens=n, sampler="temperature", seed=3, chat=True)
    g.run()
    plain = [g.prompt_ids[-1]] + g.tokens
    z_marked, z_plain = detect(marked, key), detect(plain, key)
    z_other_key = detect(marked, key + 1)
    print(f"\nwatermark z-scores over {len(marked) - 1} and {len(plain) - 1} tokens: watermarked {z_marked:.2f}, "
          f"plain {z_plain:.2f}, watermarked with the wrong key {z_other_key:.2f}")
    assert len(marked) - 1 == n and len(plain) - 1 == n  # same length (no EOS inside the budget)
    assert z_marked > THRESHOLD > z_plain
    assert z_other_key < THRESHOLD
