"""The greedy and top-a epilogues (examples/top_a.py) on real logits of the default model: Chromium's
WebGPU must pick the same tokens as the numpy interpreter.

The logits are every position of one prefill (model.logits), captured once per session. Each
sampler is the traced epilogue body (logits f32[vocab], RNG state u32[2]) -> token; top-a also
returns its probabilities so the float part is compared with the usual tolerance.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from piegpu import dtype, eta
from tests.browser.eta_items import ProgramItem, limits_from
from tests.progen import compare

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "top_a.py"
SEEDS = (1, 7, 42, 1234)


def load_example():
    """examples/top_a.py as a module (it is a script, not a package)."""
    spec = importlib.util.spec_from_file_location("example_top_a", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def greedy(logits):
    """The greedy epilogue of the API's decode loop: the argmax token as a [1] cell."""
    return eta.reshape(eta.reduce_argmax(logits), [1])


@pytest.fixture(scope="module")
def programs(model_capture):
    """(greedy program, top-a program returning (token, probs)) traced for the model's vocab."""
    top_a = load_example()
    vocab = model_capture.logits.shape[1]
    specs = (eta.spec([vocab], dtype.f32), eta.spec([2], dtype.u32))
    assert top_a.top_a.eta_specs == specs, "examples/top_a.py is traced for another vocab"

    def top_a_with_probs(logits, state):
        x = eta.sanitize(logits) * (1.0 / top_a.TEMPERATURE)
        return eta.reshape(top_a.top_a(logits, state), [1]), eta.softmax(x)
    return eta.trace(greedy, specs[0]), eta.trace(top_a_with_probs, *specs)


@pytest.fixture(scope="module")
def results(browser, model_capture, programs):
    """Every logits row through greedy, and through top-a with each seed, in one Chromium batch."""
    g, t = programs
    limits = limits_from(browser.limits)
    cases = [(f"greedy-{i}", g, [row]) for i, row in enumerate(model_capture.logits)]
    cases += [(f"top_a-{i}-{seed}", t, [row, np.array([seed, i], np.uint32)])
              for i, row in enumerate(model_capture.logits) for seed in SEEDS]
    items = [ProgramItem(prog, x, limits, label) for label, prog, x in cases]
    replies = browser.run([it.item for it in items])
    return [(it, x, r) for it, (_, _, x), r in zip(items, cases, replies)]


def test_logits_are_real(model_capture):
    """Captured from the model: finite, one row per prompt token, and not flat."""
    L = model_capture.logits
    assert L.shape == (len(model_capture.prompt_ids), 49152) and np.isfinite(L).all()
    assert (L.max(axis=1) - L.mean(axis=1) > 5).all()


def test_greedy_in_chromium_equals_interpreter(results):
    rows = [(c, x, r) for c, x, r in results if c.label.startswith("greedy")]
    assert rows
    for c, x, r in rows:
        (got,) = c.outputs(r)
        ref = c.prog.run(*x)
        np.testing.assert_array_equal(got, ref, err_msg=c.label)
        assert got[0] == int(np.argmax(x[0]))


def test_top_a_in_chromium_equals_interpreter(results):
    rows = [(c, x, r) for c, x, r in results if c.label.startswith("top_a")]
    tokens = set()
    for c, x, r in rows:
        token, probs = c.outputs(r)
        ref_token, ref_probs = c.prog.run(*x)
        compare(ref_probs, probs, False, f"{c.label} probabilities")
        np.testing.assert_array_equal(token, ref_token, err_msg=c.label)
        tokens.add(int(token[0]))
    assert len(rows) == len(SEEDS) * len({c.label.split("-")[1] for c, _, _ in rows})
    assert len(tokens) > 3, "top-a sampled one token everywhere: the seeds or the logits are not exercised"
