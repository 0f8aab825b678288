"""generate() at a GPU's window -- 8 passes in flight, submitted 4 to a command buffer -- gives window 1's tokens and
text: greedy and seeded top-p, a stop string, an on_token that stops inside a group, and a working set that goes on
from exactly what was accepted."""

from __future__ import annotations

import pytest

from piegpu.runtime.window import WINDOW, default_group
from tests.helpers import tiny_config, tiny_model

P = "5 17 42 7"


@pytest.fixture(scope="module")
def tiny(gpu):
    return tiny_model(tiny_config(layers=2, vocab=300, max_pos=256), seed=5)[0]


def test_the_gpu_window_submits_groups():
    assert (WINDOW, default_group(WINDOW)) == (8, 4)


@pytest.mark.parametrize("kw", [{}, {"sampler": "top-p", "top_p": 0.9, "temperature": 0.8, "seed": 7}])
def test_tokens_equal_window_1(tiny, kw):
    one = tiny.generate(P, max_tokens=19, stop=[], window=1, **kw)
    eight = tiny.generate(P, max_tokens=19, stop=[], window=WINDOW, **kw)
    assert (eight.run(), eight.tokens) == (one.run(), one.tokens) and len(one.tokens) == 19
    # a host wait a token at window 1; one a group of 4 at window 8 (its later passes are read without one)
    assert one.stats.host_waits == 19 and eight.stats.host_waits == 5


def test_a_stop_string_inside_a_group_emits_no_extra_text(tiny):
    text = tiny.generate(P, max_tokens=16, stop=[], window=1).run()
    stop = text[len(text) // 2: len(text) // 2 + 3]
    assert stop.strip()
    want = tiny.generate(P, max_tokens=16, stop=[stop], window=1)
    got = tiny.generate(P, max_tokens=16, stop=[stop], window=WINDOW)
    assert list(got) == list(want) and got.text == text[: text.index(stop)]


def test_on_token_stops_inside_a_group_and_the_working_set_goes_on(tiny):
    full = tiny.generate(P, max_tokens=20, stop=[], window=1)
    full.run()
    ws = tiny.working_set(128)
    seen: list = []
    g = tiny.generate(P, max_tokens=20, stop=[], window=WINDOW, working_set=ws,
                      on_token=lambda piece: (seen.append(piece), len(seen) < 6)[1])
    g.run()
    assert g.tokens == full.tokens[:6] and g.stats.stop_reason == "cancelled"
    rest = tiny.generate("", max_tokens=14, stop=[], window=WINDOW, working_set=ws)
    rest.run()
    assert g.tokens + rest.tokens == full.tokens
