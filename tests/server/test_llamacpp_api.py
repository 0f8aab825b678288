"""llama.cpp's server API on `piegpu serve` (plain HTTP): /completion equals model.generate, streaming, n_probs,
/tokenize, /detokenize, /apply-template, /props, /metrics (Prometheus text), and 400s naming the bad field."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import piegpu

PROMPT = "Once upon a time"


def call(server, path: str, body=None, method: str | None = None) -> tuple:
    """(status, parsed JSON or text) of one request."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(server.base + path, data=data, method=method or ("GET" if body is None else "POST"),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            status, raw, kind = r.status, r.read().decode(), r.headers.get("content-type", "")
    except urllib.error.HTTPError as e:
        status, raw, kind = e.code, e.read().decode(), e.headers.get("content-type", "")
    return status, json.loads(raw) if "json" in kind else raw


def ok(server, path: str, body=None):
    status, out = call(server, path, body)
    assert status == 200, out
    return out


def sse(server, body: dict) -> list:
    """The JSON objects of a /completion stream's `data:` lines."""
    req = urllib.request.Request(server.base + "/completion", data=json.dumps({**body, "stream": True}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        text = r.read().decode()
    return [json.loads(line[len("data: "):]) for line in text.split("\n") if line.startswith("data: ")]


def bad(server, path: str, body: dict, field: str) -> str:
    """The message of a 400 that names `field` (as its param)."""
    status, out = call(server, path, body)
    assert status == 400, out
    err = out["error"]
    assert err["code"] == 400 and err["type"] == "invalid_request_error"
    assert err.get("param") == field, err
    return err["message"]


def generate(model, prompt, n: int, **kw):
    g = model.generate(prompt, max_tokens=n, **kw)
    g.run()
    return g


# ---- /completion --------------------------------------------------------------------------------------
def test_completion_greedy_equals_generate(server, default_model):
    r = ok(server, "/completion", {"prompt": PROMPT, "n_predict": 12, "temperature": 0, "return_tokens": True})
    g = generate(default_model, PROMPT, 12)
    assert r["content"] == g.text and r["tokens"] == list(g.tokens)
    assert r["stop"] is True and r["stop_type"] == "limit" and r["stopping_word"] == "" and not r["truncated"]
    assert r["tokens_predicted"] == 12
    assert r["tokens_evaluated"] == len(default_model.tokenizer.encode(PROMPT).ids)
    assert r["prompt"] == PROMPT and r["model"] and isinstance(r["tokens_cached"], int)
    gs = r["generation_settings"]
    assert gs["n_predict"] == 12 and gs["temperature"] == 0 and gs["n_ctx"] > 0 and gs["seed"] == 4294967295
    t = r["timings"]
    assert t["predicted_n"] == 12 and t["prompt_n"] + t["cache_n"] == r["tokens_evaluated"]
    assert all(t[k] >= 0 for k in ("prompt_ms", "predicted_ms", "predicted_per_second"))
    plain = ok(server, "/completions", {"prompt": PROMPT, "n_predict": 12, "temperature": 0})  # the alias
    assert plain["content"] == g.text and plain["tokens"] == []  # tokens only with return_tokens (or streaming)


def test_completion_seeded_sampling_equals_generate_and_n_cmpl_uses_seed_plus_i(server, default_model):
    body = {"prompt": PROMPT, "n_predict": 10, "temperature": 0.8, "top_k": 40, "top_p": 1.0, "min_p": 0.0,
            "seed": 7, "n_cmpl": 2}
    rs = ok(server, "/completion", body)
    assert [r["index"] for r in rs] == [0, 1]
    for i, r in enumerate(rs):
        assert r["content"] == generate(default_model, PROMPT, 10, sampler="top-k", k=40, temperature=0.8,
                                        seed=7 + i).text
    again = ok(server, "/completion", {**body, "n_cmpl": 1})
    assert again["content"] == rs[0]["content"] and again["generation_settings"]["seed"] == 7


def test_n_probs_in_llamacpp_layout(server):
    r = ok(server, "/completion", {"prompt": "The capital of France is", "n_predict": 4, "temperature": 0,
                                   "n_probs": 3})
    probs = r["completion_probabilities"]
    assert len(probs) == r["tokens_predicted"] == 4
    assert "".join(p["token"] for p in probs) == r["content"]
    for p in probs:
        assert set(p) == {"id", "token", "bytes", "logprob", "top_logprobs"}
        assert bytes(p["bytes"]).decode("utf-8", "replace") == p["token"]
        top = p["top_logprobs"]
        assert len(top) == 3 and all(set(t) == {"id", "token", "bytes", "logprob"} for t in top)
        lps = [t["logprob"] for t in top]
        assert lps == sorted(lps, reverse=True) and lps[0] <= 0
        assert top[0]["id"] == p["id"] and abs(top[0]["logprob"] - p["logprob"]) < 1e-5  # greedy: the most likely


def test_stream_reassembles_to_the_unstreamed_completion(server):
    body = {"prompt": PROMPT, "n_predict": 10, "temperature": 0}
    whole = ok(server, "/completion", {**body, "return_tokens": True})
    chunks = sse(server, body)
    *steps, last = chunks
    assert all(c["stop"] is False for c in steps) and last["stop"] is True
    assert "".join(c["content"] for c in steps) == whole["content"]
    assert [t for c in steps for t in c["tokens"]] == whole["tokens"]
    assert [c["tokens_predicted"] for c in steps if c["tokens"]] == list(range(1, 11))
    assert last["stop_type"] == "limit" and last["tokens_predicted"] == 10 and last["content"] == ""
    assert last["generation_settings"]["stream"] is True and last["timings"]["predicted_n"] == 10
    probs = sse(server, {**body, "n_predict": 3, "n_probs": 2})
    assert [len(c["completion_probabilities"]) for c in probs[:-1]] == [1, 1, 1]


def test_stop_words_and_stop_type(server, default_model):
    full = generate(default_model, PROMPT, 16).text
    word = full.split()[3]
    r = ok(server, "/completion", {"prompt": PROMPT, "n_predict": 16, "temperature": 0, "stop": [word]})
    assert r["content"] == full[: full.index(word)]
    assert r["stop_type"] == "word" and r["stopping_word"] == word
    assert r["generation_settings"]["stop"] == [word]


def test_prompt_forms_and_several_prompts(server, default_model):
    tok = default_model.tokenizer
    ids = tok.encode(PROMPT).ids
    one = ok(server, "/completion", {"prompt": PROMPT, "n_predict": 4, "temperature": 0})
    as_ids = ok(server, "/completion", {"prompt": ids, "n_predict": 4, "temperature": 0})
    assert as_ids["content"] == one["content"] and as_ids["tokens_evaluated"] == len(ids)
    mixed = ok(server, "/completion", {"prompt": [ids[0], " upon a time"], "n_predict": 4, "temperature": 0})
    assert mixed["tokens_evaluated"] == 1 + len(tok.encode(" upon a time", add_special_tokens=False).ids)
    obj = ok(server, "/completion", {"prompt": {"prompt_string": PROMPT}, "n_predict": 4, "temperature": 0})
    assert obj["content"] == one["content"]
    many = ok(server, "/completion", {"prompt": [PROMPT, "The capital of France is"], "n_predict": 4,
                                      "temperature": 0})
    assert [m["index"] for m in many] == [0, 1] and many[0]["content"] == one["content"]
    assert many[1]["content"] == generate(default_model, "The capital of France is", 4).text
    chunks = sse(server, {"prompt": [PROMPT, "The capital of France is"], "n_predict": 4, "temperature": 0})
    for i in (0, 1):  # a stream of several prompts: chunks carry their prompt's index, each ends with its final
        mine = [c for c in chunks if c["index"] == i]
        assert "".join(c["content"] for c in mine) == many[i]["content"] and mine[-1]["stop"] is True


def test_logit_bias_forms_ban_a_token(server, default_model):
    first = ok(server, "/completion", {"prompt": PROMPT, "n_predict": 1, "temperature": 0,
                                       "return_tokens": True})["tokens"][0]
    text = default_model.tokenizer.decode([first])
    for bias in ([[first, False]], {str(first): -100}, [[text, False]]):
        r = ok(server, "/completion", {"prompt": PROMPT, "n_predict": 1, "temperature": 0, "return_tokens": True,
                                       "logit_bias": bias})
        assert r["tokens"][0] != first, bias
    r = ok(server, "/completion", {"prompt": PROMPT, "n_predict": 1, "temperature": 0, "logit_bias": [[first, 5]]})
    assert r["generation_settings"]["logit_bias"] == [{"bias": 5.0, "token": first}]


def test_samplers_list_picks_the_stages(server, default_model):
    r = ok(server, "/completion", {"prompt": PROMPT, "n_predict": 8, "seed": 5, "temperature": 0.9, "top_k": 5,
                                   "top_p": 0.5, "min_p": 0.3, "samplers": ["top_k", "temperature"]})
    assert r["content"] == generate(default_model, PROMPT, 8, sampler="top-k", k=5, temperature=0.9, seed=5).text
    assert set(r["generation_settings"]["samplers"]) == {"top_k", "temperature"}


# ---- llama.cpp's samplers as per-row data (they pass once protocol._Sampling / Api.row_params carry them) ----
def test_mirostat_2_equals_generate(server, default_model):
    r = ok(server, "/completion", {"prompt": PROMPT, "n_predict": 8, "seed": 3, "temperature": 1.0, "top_k": 0,
                                   "top_p": 1.0, "min_p": 0.0, "mirostat": 2, "mirostat_tau": 5.0,
                                   "mirostat_eta": 0.1})
    assert r["content"] == generate(default_model, PROMPT, 8, mirostat=5.0, mirostat_eta=0.1, temperature=1.0,
                                    seed=3).text
    assert r["generation_settings"]["mirostat"] == 2


def test_xtc_equals_generate(server, default_model):
    r = ok(server, "/completion", {"prompt": PROMPT, "n_predict": 8, "seed": 4, "temperature": 1.0, "top_k": 0,
                                   "top_p": 1.0, "min_p": 0.0, "xtc_probability": 0.5, "xtc_threshold": 0.1})
    assert r["content"] == generate(default_model, PROMPT, 8, xtc_probability=0.5, xtc_threshold=0.1,
                                    temperature=1.0, seed=4).text


def test_dry_equals_generate(server, default_model):
    r = ok(server, "/completion", {"prompt": PROMPT, "n_predict": 8, "temperature": 0, "dry_multiplier": 0.8,
                                   "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": -1})
    assert r["content"] == generate(default_model, PROMPT, 8, dry_multiplier=0.8, dry_base=1.75,
                                    dry_allowed_length=2, dry_penalty_last_n=-1).text


# ---- the other routes ---------------------------------------------------------------------------------
def test_tokenize_detokenize_round_trip(server, default_model):
    tok = default_model.tokenizer
    text = "Hello world! <|im_end|> héllo 日本"
    ids = ok(server, "/tokenize", {"content": text})["tokens"]
    assert ids == tok.encode(text, add_special_tokens=False).ids
    assert ok(server, "/tokenize", {"content": text, "add_special": True})["tokens"] == tok.encode(text).ids
    assert ok(server, "/detokenize", {"tokens": ids})["content"] == text == tok.decode(ids, skip_special_tokens=False)
    plain = ok(server, "/tokenize", {"content": "<|im_end|>", "parse_special": False})["tokens"]
    assert len(plain) > 1 and ok(server, "/detokenize", {"tokens": plain})["content"] == "<|im_end|>"
    pieces = ok(server, "/tokenize", {"content": text, "with_pieces": True})["tokens"]
    assert [p["id"] for p in pieces] == ids
    raw = b"".join(bytes(p["piece"]) if isinstance(p["piece"], list) else p["piece"].encode() for p in pieces)
    assert raw.decode() == text


def test_apply_template_equals_chat_prompt(server, default_model):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]
    assert ok(server, "/apply-template", {"messages": messages})["prompt"] == default_model.chat_prompt(messages)


def test_props(server, default_model):
    p = ok(server, "/props")
    d = p["default_generation_settings"]
    assert d["n_ctx"] > 0 and d["params"]["n_ctx"] == d["n_ctx"]
    assert d["params"]["temperature"] == 0.8 and d["params"]["top_k"] == 40 and d["params"]["n_predict"] == -1
    assert p["total_slots"] >= 1 and p["model_path"] and p["chat_template"] == (default_model.chat_template or "")
    assert piegpu.__version__ in p["build_info"] and p["modalities"] == {"vision": False, "audio": False}
    info = p["model_info"]
    assert info == json.loads(json.dumps(default_model.info)) and info["context"] == d["n_ctx"]
    assert (info["architecture"], info["quantization"], info["chat_template"]) == ("LlamaForCausalLM", "Q4_1", True)


LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")


def parse_prometheus(text: str) -> dict:
    """name (with its labels) -> value of a Prometheus text exposition; every sample has one HELP and one TYPE line
    before it (a histogram's _bucket, _sum and _count samples: its own name's)."""
    helps, types, values = set(), {}, {}
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ")[2]
            assert name not in helps, f"two HELP lines for {name}"
            helps.add(name)
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge", "histogram", "summary", "untyped") and name not in types
            types[name] = kind
        elif line and not line.startswith("#"):
            m = LINE.match(line)
            assert m, f"not a sample line: {line!r}"
            name = m.group(1)
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            if base != name and types.get(base) == "histogram":
                assert (m.group(2) is not None) == name.endswith("_bucket"), line
                values[name + (m.group(2) or "")] = float(m.group(3))
                continue
            assert name in helps and name in types, f"{name} has no HELP/TYPE line"
            values[name] = float(m.group(3))
    return values


def histogram(values: dict, name: str) -> tuple:
    """([(le, cumulative count)], sum, count) of histogram `name` in parse_prometheus' output; the buckets rise to the
    +Inf one, which equals the count."""
    buckets = sorted((float(k.split('le="')[1].rstrip('"}')), v) for k, v in values.items()
                     if k.startswith(name + "_bucket{"))
    counts = [n for _, n in buckets]
    assert buckets and buckets[-1][0] == float("inf") and counts == sorted(counts), buckets
    assert counts[-1] == values[name + "_count"]
    return buckets, values[name + "_sum"], values[name + "_count"]


def test_metrics_prometheus_text_and_counters_increase(server):
    status, text = call(server, "/metrics")
    assert status == 200
    before = parse_prometheus(text)
    for name in ("llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total", "llamacpp:prompt_tokens_seconds",
                 "llamacpp:predicted_tokens_seconds", "llamacpp:requests_processing", "llamacpp:requests_deferred",
                 "piegpu:kv_pages_total", "piegpu:kv_pages_used", "piegpu:requests_waiting"):
        assert name in before, name
    ok(server, "/completion", {"prompt": "Metrics count this prompt, please.", "n_predict": 5, "temperature": 0})
    after = parse_prometheus(call(server, "/metrics")[1])
    assert after["llamacpp:tokens_predicted_total"] >= before["llamacpp:tokens_predicted_total"] + 5
    assert after["llamacpp:prompt_tokens_total"] > before["llamacpp:prompt_tokens_total"]
    assert after["piegpu:requests_finished_total"] >= before["piegpu:requests_finished_total"] + 1
    assert after["llamacpp:predicted_tokens_seconds"] > 0 and after["piegpu:kv_pages_total"] > 0
    grew = {}
    for name in ("time_to_first_token", "inter_token_latency", "request_queue_time", "e2e_request_latency"):
        _, total, count = histogram(after, f"piegpu:{name}_seconds")
        grew[name] = count - histogram(before, f"piegpu:{name}_seconds")[2]
        assert total >= 0
    # this request: one first token, 4 gaps between its 5 tokens, one queue time, one end-to-end (others may overlap)
    assert grew["time_to_first_token"] >= 1 and grew["inter_token_latency"] >= 4, grew
    assert grew["request_queue_time"] >= 1 and grew["e2e_request_latency"] >= 1, grew


def test_bad_inputs_are_400s_naming_the_field(server):
    msg = bad(server, "/completion", {"prompt": "x", "samplers": ["top_k", "bogus"]}, "samplers")
    assert "bogus" in msg
    bad(server, "/completion", {"prompt": "x", "samplers": "kq"}, "samplers")
    bad(server, "/completion", {"prompt": "x", "n_predict": -5}, "n_predict")
    bad(server, "/completion", {"prompt": "x", "n_predict": 10 ** 6}, "n_predict")
    bad(server, "/completion", {"prompt": "x", "n_probs": 50}, "n_probs")
    bad(server, "/completion", {"prompt": "x", "n_cmpl": 99}, "n_cmpl")
    bad(server, "/completion", {"prompt": "x", "logit_bias": [[10 ** 9, 1.0]]}, "logit_bias")
    bad(server, "/completion", {"prompt": "x", "logit_bias": "no"}, "logit_bias")
    bad(server, "/completion", {"prompt": [1.5]}, "prompt")
    bad(server, "/completion", {"n_predict": 3}, "prompt")
    bad(server, "/completion", {"prompt": {"prompt_string": "x", "multimodal_data": ["AAAA"]}},
        "prompt.multimodal_data")
    bad(server, "/completion", {"prompt": "x", "repeat_penalty": 1.1, "repeat_last_n": 64}, "repeat_last_n")
    bad(server, "/completion", {"prompt": "x", "lora": [{"id": 0, "scale": 1.0}]}, "lora")
    bad(server, "/completion", {"prompt": "x", "temperature": "hot"}, "temperature")
    bad(server, "/tokenize", {"text": "x"}, "content")
    bad(server, "/detokenize", {"tokens": [10 ** 9]}, "tokens")
    bad(server, "/apply-template", {"prompt": "x"}, "messages")
    status, out = call(server, "/completion", None, method="POST")
    assert status == 400 and out["error"]["code"] == 400


def test_api_key_guards_the_llamacpp_routes(default_model):
    from tests.server.conftest import ServerProcess
    s = ServerProcess("--api-key", "sekret", "--ctx", "256")
    try:
        status, out = call(s, "/tokenize", {"content": "hi"})
        assert status == 401 and out["error"]["code"] == 401 and out["error"]["type"] == "authentication_error"
        assert call(s, "/metrics")[0] == 401
        for headers in ({"Authorization": "Bearer sekret"}, {"X-Api-Key": "sekret"}):
            req = urllib.request.Request(s.base + "/tokenize", data=b'{"content": "hi"}', headers=headers)
            with urllib.request.urlopen(req, timeout=60) as r:
                assert json.loads(r.read())["tokens"] == default_model.tokenizer.encode("hi",
                                                                                       add_special_tokens=False).ids
    finally:
        assert s.stop() == 0


def test_a_grammar_of_thousands_of_alternatives_works(server):
    """A GBNF alternation of 3000 literals (a product list) generates one of them: llguidance's row limit (2000 items,
    a 500 mid-generation before) is raised (inferlets/grammar.py parser_limits)."""
    items = [f"sku-{i}" for i in range(3000)]
    gbnf = "root ::= " + " | ".join(f'"{s}"' for s in items)
    out = ok(server, "/completion", {"prompt": "Pick a product code:", "grammar": gbnf, "n_predict": 16,
                                     "temperature": 0})
    assert out["content"] in items, out["content"]
