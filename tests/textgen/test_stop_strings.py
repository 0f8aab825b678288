"""Nothing of a stop string is ever streamed: the library's stream, on_token, generate_batch and n samples."""

from __future__ import annotations

PROMPT = "The capital of France is"
STOP = "s.\n\nThe a"  # greedy continues ' Paris.\n\nThe answer ...': the stop begins inside 'Paris.'


def test_the_stream_holds_back_what_may_begin_a_stop_string(default_model):
    full = default_model.generate(PROMPT, max_tokens=24, sampler="greedy").run()
    assert STOP in full  # the case is real: greedy text contains the stop string
    seen = []
    g = default_model.generate(PROMPT, max_tokens=24, sampler="greedy", stop=[STOP], on_token=seen.append)
    pieces = list(g)
    assert "".join(pieces) == g.text == full[: full.index(STOP)] == " Pari"
    assert seen == pieces
    assert g.stats.stop_reason == "stop string" and g.finish_reason == "stop"


def test_held_back_text_that_never_completes_a_stop_is_released(default_model):
    full = default_model.generate(PROMPT, max_tokens=12, sampler="greedy").run()
    stop = full[5:9] + "\u2603"  # its start occurs in the text, the whole never does
    g = default_model.generate(PROMPT, max_tokens=12, sampler="greedy", stop=[stop])
    assert "".join(g) == g.text == full and g.stats.stop_reason == "max_tokens"


def test_generate_batch_and_n_samples_cut_at_the_stop_string(default_model):
    alone = default_model.generate(PROMPT, max_tokens=24, sampler="greedy", stop=[STOP]).run()
    gens = default_model.generate_batch([PROMPT, "Once upon a time"], max_tokens=24, stop=[STOP])
    assert gens[0].text == alone and gens[0].stats.stop_reason == "stop string" and gens[0].finish_reason == "stop"
    assert gens[1].stats.stop_reason == "max_tokens" and gens[1].finish_reason == "length"  # its budget, not a stop
    assert len(gens[1].tokens) == 24
    s = default_model.generate(PROMPT, n=2, max_tokens=24, stop=[STOP])
    assert s.run() == [alone, alone]
