"""`piegpu serve` driven by the official openai client: outputs equal model.generate, streaming, batching."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest

from tests.server.conftest import MODEL_ID

openai = pytest.importorskip("openai", reason="the server tests drive the official openai client: pip install openai")

QUESTIONS = ["What is the capital of France?", "Name a color.", "Count to five.", "Say hello in Spanish.",
             "What is 2 + 2?", "Name a fruit.", "What is water made of?", "Who wrote Hamlet?"]


def alone(model, prompt: str, max_tokens: int, **kw) -> str:
    g = model.generate(prompt, max_tokens=max_tokens, chat=True, **kw)
    g.run()
    return g.text


def health(server) -> dict:
    with urllib.request.urlopen(server.base + "/health", timeout=5) as r:
        return json.loads(r.read())


def test_models_and_health(server):
    c = server.client()
    assert [m.id for m in c.models.list().data] == [MODEL_ID]
    assert health(server)["status"] == "ok"


def test_health_counts_host_waits_at_window_2(server):
    """The shared server runs at --window 2: after a request, one host read per two decode passes at most."""
    c = server.client()
    e0 = health(server)["engine"]
    r = c.completions.create(model=MODEL_ID, prompt="Count: 1, 2, 3,", max_tokens=16, temperature=0)
    e = health(server)["engine"]
    assert e["window"] == 2
    passes, waits = e["decode_passes"] - e0["decode_passes"], e["host_waits"] - e0["host_waits"]
    assert r.usage.completion_tokens <= passes <= r.usage.completion_tokens + 2  # + a stop token, + one run ahead
    assert 0 < waits <= passes // 2 + 1


def test_chat_greedy_equals_generate(server, default_model):
    c = server.client()
    r = c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": QUESTIONS[0]}],
                                  max_tokens=24, temperature=0)
    assert r.choices[0].message.content == alone(default_model, QUESTIONS[0], 24)
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens == len(default_model.tokenizer.encode(default_model.chat_prompt(QUESTIONS[0])).ids)
    assert r.usage.completion_tokens > 0 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


LLAMA_FIELDS = [  # llama.cpp server's sampling fields on the OpenAI routes -> the same library options
    ({"mirostat": 2, "mirostat_tau": 4.0, "mirostat_eta": 0.2}, {"sampler": "mirostat", "value": 4.0,
                                                                   "mirostat_eta": 0.2}),
    ({"mirostat": 1, "mirostat_tau": 3.0}, {"mirostat_v1": 3.0, "mirostat_eta": 0.1}),
    ({"xtc_probability": 0.6, "xtc_threshold": 0.05, "top_k": 40}, {"xtc_probability": 0.6, "xtc_threshold": 0.05,
                                                                     "top_k": 40}),
    ({"dry_multiplier": 0.8, "dry_allowed_length": 1, "top_n_sigma": 1.5},
     {"dry_multiplier": 0.8, "dry_allowed_length": 1, "top_n_sigma": 1.5}),
    # a list without "temperature" samples at temperature 1 (as llama.cpp; the request's 0.9 does not apply)
    ({"samplers": ["top_k", "p_less", "min_p"], "top_k": 30, "min_p": 0.05, "top_p": 0.5, "dynatemp_range": 0.3},
     {"top_k": 30, "p_less": True, "min_p": 0.05, "samplers": "top_k;p_less;min_p", "temperature": 1.0}),
    ({"samplers": ["min_p", "temperature"], "min_p": 0.05, "top_k": 5}, {"min_p": 0.05, "samplers": "min_p"}),
]


@pytest.mark.parametrize("fields, library", LLAMA_FIELDS, ids=lambda v: ",".join(v))
def test_llama_cpp_sampling_fields_equal_the_library(server, default_model, fields, library):
    """Each request (n=2, seeded) runs its samplers as batched rows; choice i equals model.generate with seed + i."""
    c = server.client()
    r = c.completions.create(model=MODEL_ID, prompt="The weather today is", max_tokens=10, temperature=0.9,
                             seed=77, n=2, extra_body=fields)
    for i, ch in enumerate(r.choices):
        g = default_model.generate("The weather today is", max_tokens=10, seed=77 + i,
                                   **({"sampler": "temperature", "temperature": 0.9} | library))
        g.run()
        assert ch.text == g.text, (fields, i)


def test_completions_stream_and_not_stream_agree(server, default_model):
    c = server.client()
    r = c.completions.create(model=MODEL_ID, prompt="Once upon a time", max_tokens=12, temperature=0)
    g = default_model.generate("Once upon a time", max_tokens=12)
    g.run()
    assert r.choices[0].text == g.text and r.choices[0].finish_reason == "length"
    pieces, finish, usage = [], None, None
    for ch in c.completions.create(model=MODEL_ID, prompt="Once upon a time", max_tokens=12, temperature=0,
                                   stream=True, stream_options={"include_usage": True}):
        if ch.choices:
            pieces.append(ch.choices[0].text)
            finish = ch.choices[0].finish_reason or finish
        if ch.usage is not None:
            usage = ch.usage
    assert "".join(pieces) == g.text and finish == "length"
    assert usage.completion_tokens == 12


def test_seeded_sampling_is_reproducible_and_the_seed_matters(server, default_model):
    c = server.client()
    kw = dict(model=MODEL_ID, messages=[{"role": "user", "content": "Write a word."}], max_tokens=16,
              temperature=1.0, top_p=0.95)
    a = [c.chat.completions.create(seed=s, **kw).choices[0].message.content for s in (11, 11, 12, 13)]
    assert a[0] == a[1]
    assert len(set(a[1:])) > 1
    # the row's seed is the generation's seed: the same text as model.generate with that seed
    assert a[0] == alone(default_model, "Write a word.", 16, sampler="top-p", top_p=0.95, temperature=1.0, seed=11)


def test_n_choices_and_stop_strings(server, default_model):
    c = server.client()
    r = c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Write a word."}],
                                  max_tokens=8, temperature=1.0, seed=5, n=3)
    assert [ch.index for ch in r.choices] == [0, 1, 2]
    for i, ch in enumerate(r.choices):  # choice i is seed + i, prompt prefilled once
        assert ch.message.content == alone(default_model, "Write a word.", 8, sampler="temperature", seed=5 + i)
    full = alone(default_model, QUESTIONS[0], 24)
    stop = full.split()[2]  # a word in the middle of the answer
    r = c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": QUESTIONS[0]}],
                                  max_tokens=24, temperature=0, stop=[stop])
    assert r.choices[0].message.content == full[: full.index(stop)] and r.choices[0].finish_reason == "stop"


def test_logprobs_come_from_the_device_top_k(server):
    c = server.client()
    r = c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": QUESTIONS[1]}],
                                  max_tokens=6, temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    assert "".join(t.token for t in content).startswith(r.choices[0].message.content[:3])
    for t in content:
        assert len(t.top_logprobs) == 3
        lps = [x.logprob for x in t.top_logprobs]
        assert lps == sorted(lps, reverse=True) and lps[0] <= 0
        assert t.top_logprobs[0].token == t.token and abs(t.top_logprobs[0].logprob - t.logprob) < 1e-5  # greedy
        assert bytes(t.bytes).decode("utf-8", "replace") == t.token


def test_json_schema_response_format_validates(server):
    jsonschema = pytest.importorskip("jsonschema", reason="pip install jsonschema")
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                               "population": {"type": "integer", "minimum": 0}},
              "required": ["city", "population"], "additionalProperties": False}
    c = server.client()
    r = c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Describe Paris as JSON."}],
                                  max_tokens=60, temperature=0.5, seed=1,
                                  response_format={"type": "json_schema",
                                                   "json_schema": {"name": "city", "schema": schema}})
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)
    r = c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Any JSON object."}],
                                  max_tokens=40, temperature=0, response_format={"type": "json_object"})
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    else:  # cut by max_tokens: still a prefix of an object
        assert r.choices[0].message.content.lstrip().startswith("{")
    with pytest.raises(openai.BadRequestError, match="grammar_mode='device'.*nesting"):  # not a regular language
        c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "JSON."}], max_tokens=8,
                                  response_format={"type": "json_object"}, extra_body={"grammar_mode": "device"})
    for mode in ("device", "host"):  # the schema's automaton in the epilogue, or llguidance's masks: both validate
        r = c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Describe Rome as JSON."}],
                                      max_tokens=60, temperature=0.7, seed=2, extra_body={"grammar_mode": mode},
                                      response_format={"type": "json_schema",
                                                       "json_schema": {"name": "city", "schema": schema}})
        jsonschema.validate(json.loads(r.choices[0].message.content), schema)


def test_sixteen_concurrent_streams_equal_their_requests_alone(server, default_model):
    """16 streaming clients at once (rows of the same passes): each stream is complete and equals its run alone."""
    prompts = [QUESTIONS[i % len(QUESTIONS)] + (" Briefly." if i >= len(QUESTIONS) else "") for i in range(16)]
    out: dict = {}
    errors: list = []

    def run(i):
        try:
            c = server.client()
            pieces, finish = [], None
            for ch in c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": prompts[i]}],
                                                max_tokens=12, temperature=0, stream=True):
                if ch.choices:
                    pieces.append(ch.choices[0].delta.content or "")
                    finish = ch.choices[0].finish_reason or finish
            out[i] = ("".join(pieces), finish)
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    for i, p in enumerate(prompts):
        assert out[i] == (alone(default_model, p, 12), out[i][1]) and out[i][1] in ("stop", "length"), i


def test_a_client_leaving_mid_stream_frees_its_row_and_leaves_others_untouched(server, default_model):
    c = server.client()
    result = {}

    def other():
        r = c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": QUESTIONS[2]}],
                                      max_tokens=20, temperature=0)
        result["text"] = r.choices[0].message.content

    t = threading.Thread(target=other)
    t.start()
    stream = c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Tell a long story."}],
                                       max_tokens=400, temperature=0, stream=True)
    got = 0
    for ch in stream:
        if ch.choices and ch.choices[0].delta.content:
            got += 1
            if got == 3:
                break
    stream.close()  # the client goes away mid-stream
    t.join(300)
    assert result["text"] == alone(default_model, QUESTIONS[2], 20)
    deadline = time.time() + 30
    while time.time() < deadline and health(server)["load"] != 0:
        time.sleep(0.2)
    assert health(server)["load"] == 0, "the abandoned request still holds its row"


def test_a_second_chat_turn_reuses_the_prefix_and_answers_the_same(server, default_model):
    c = server.client()
    turn1 = [{"role": "user", "content": "My name is Ada. Remember it."}]
    r1 = c.chat.completions.create(model=MODEL_ID, messages=turn1, max_tokens=16, temperature=0)
    turn2 = turn1 + [{"role": "assistant", "content": r1.choices[0].message.content},
                     {"role": "user", "content": "What is my name?"}]
    r2 = c.chat.completions.create(model=MODEL_ID, messages=turn2, max_tokens=16, temperature=0)
    assert r2.usage.prompt_tokens_details.cached_tokens > 0
    g = default_model.generate(default_model.chat_prompt(turn2), max_tokens=16)  # no cache: a fresh prefill
    g.run()
    assert r2.choices[0].message.content == g.text


def test_the_example_client_runs_against_the_server(server):
    """examples/openai_client.py, as a user runs it, pointed at the test server through OPENAI_BASE_URL."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    example = Path(__file__).resolve().parents[2] / "examples" / "openai_client.py"
    r = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "none"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"model: {MODEL_ID}" in r.stdout and "JSON: {" in r.stdout and "first token alternatives" in r.stdout


def test_completion_logprobs_in_the_legacy_layout(server):
    c = server.client()
    r = c.completions.create(model=MODEL_ID, prompt="The capital of France is", max_tokens=5, temperature=0,
                             logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 5
    assert "".join(lp.tokens) == r.choices[0].text
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(5)]
    for tok, v, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert len(top) == 2 and abs(top[tok] - v) < 1e-5  # greedy: the drawn token is the most likely


def test_completion_echo_prepends_the_prompt(server):
    c = server.client()
    plain = c.completions.create(model=MODEL_ID, prompt="Once upon a time", max_tokens=6, temperature=0)
    echoed = c.completions.create(model=MODEL_ID, prompt="Once upon a time", max_tokens=6, temperature=0, echo=True)
    assert echoed.choices[0].text == "Once upon a time" + plain.choices[0].text
    pieces = [ch.choices[0].text for ch in c.completions.create(model=MODEL_ID, prompt="Once upon a time",
                                                                 max_tokens=6, temperature=0, echo=True, stream=True)
              if ch.choices]
    assert "".join(pieces) == echoed.choices[0].text


def test_a_stream_never_carries_text_of_a_stop_string(server, default_model):
    """The stream holds back text that may begin a stop string: ' Pari', never ' Paris.' (the library's case)."""
    prompt, stop = "The capital of France is", "s.\n\nThe a"
    full = default_model.generate(prompt, max_tokens=24, sampler="greedy").run()  # the raw prompt, as /completions
    assert stop in full
    stream = server.client().completions.create(model=MODEL_ID, prompt=prompt, max_tokens=24, temperature=0,
                                                stop=[stop], stream=True)
    deltas = [ch.choices[0].text for ch in stream if ch.choices]
    assert "".join(deltas) == full[: full.index(stop)] == " Pari"
