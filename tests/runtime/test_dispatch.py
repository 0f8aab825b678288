"""Replaying prepared dispatch plans: the native calls encode exactly what the wgpu-py calls encode."""

from types import SimpleNamespace

import numpy as np
import pytest

from piegpu.runtime import dispatch


def _obj(n):
    return SimpleNamespace(_internal=n)


def test_the_native_plan_skips_only_what_the_dispatch_before_already_set():
    p1, p2, b1, b2 = _obj("p1"), _obj("p2"), _obj("b1"), _obj("b2")
    plan = [(p1, b1, (4,), "a"), (p1, b1, (2, 3), "b"), (p1, b2, (1, 1, 1), "c"), (p2, b2, (5,), "d"),
            (p1, b2, (6,), "e")]
    assert dispatch._native_plan(plan) == [
        ("p1", "b1", 4, 1, 1),
        (None, None, 2, 3, 1),  # same pipeline and bind group: only the dispatch
        (None, "b2", 1, 1, 1),  # same pipeline, another bind group
        ("p2", "b2", 5, 1, 1),  # another pipeline: its bind group again (auto layouts are not compatible)
        ("p1", "b2", 6, 1, 1),
    ]


@pytest.mark.skipif(dispatch._NATIVE is None, reason="this wgpu has no wgpu-native backend to call directly")
def test_native_replay_gives_the_same_logits_and_tokens(default_model, monkeypatch):
    ids = default_model.tokenizer.encode("The quick brown fox jumps over").ids
    native_logits = default_model.logits(ids)
    native_text = default_model.generate("Once upon a time", max_tokens=12, sampler="top-p", p=0.9, seed=3).run()
    monkeypatch.setattr(dispatch, "_NATIVE", None)  # the wgpu-py calls
    assert np.array_equal(default_model.logits(ids), native_logits)
    assert default_model.generate("Once upon a time", max_tokens=12, sampler="top-p", p=0.9, seed=3).run() == \
        native_text
