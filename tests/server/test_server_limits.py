"""Bad requests, limits, authentication, shutdown and the OpenAPI schema of `piegpu serve`."""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.server.conftest import MODEL_ID, ServerProcess

CHAT = "/v1/chat/completions"


def post(server, path: str, body, headers=None, raw: bytes | None = None) -> tuple:
    """(status, parsed JSON body) of a POST."""
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(server.base + path, data=data, method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}"), {k.lower(): v for k, v in e.headers.items()}


def health(server) -> dict:
    with urllib.request.urlopen(server.base + "/health", timeout=10) as r:
        return json.loads(r.read())


def chat(content="Hi", **kw) -> dict:
    return {"model": MODEL_ID, "messages": [{"role": "user", "content": content}], "max_tokens": 4, **kw}


BAD = [
    ("malformed JSON", None, b'{"model": "x", "messages": ['),
    ("messages of the wrong type", {"model": MODEL_ID, "messages": "hi"}, None),
    ("negative max_tokens", chat(max_tokens=-1), None),
    ("temperature -1", chat(temperature=-1), None),
    ("top_p 0", chat(top_p=0), None),
    ("unknown model", {**chat(), "model": "gpt-9"}, None),
    ("empty messages", {"model": MODEL_ID, "messages": []}, None),
    ("a role that does not exist", {"model": MODEL_ID, "messages": [{"role": "wizard", "content": "x"}]}, None),
    ("json_schema that is not a schema", chat(response_format={"type": "json_schema",
                                                               "json_schema": {"name": "x", "schema": 5}}), None),
    ("json_schema without a schema", chat(response_format={"type": "json_schema"}), None),
    ("an unknown response_format type", chat(response_format={"type": "yaml"}), None),
    ("logit_bias key that is not a token id", chat(logit_bias={"hello": 1}), None),
    ("logit_bias token outside the vocabulary", chat(logit_bias={"999999": 1}), None),
    ("top_logprobs without logprobs", chat(top_logprobs=3), None),
    ("n of 100", chat(n=100), None),
    ("five stop strings", chat(stop=["a", "b", "c", "d", "e"]), None),
    ("prompt beyond the context", chat(content="word " * 9000), None),
    ("a samplers list naming an unknown stage", chat(samplers=["top_k", "wiggle"]), None),
    ("mirostat 3 (llama.cpp has 0, 1, 2)", chat(mirostat=3), None),
    ("typical_p 0", chat(typical_p=0), None),
    ("tool_choice naming no tool", chat(tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
                                        tool_choice={"type": "function", "function": {"name": "g"}}), None),
]


@pytest.mark.parametrize("what, body, raw", BAD, ids=[b[0] for b in BAD])
def test_bad_requests_get_openai_shaped_4xx_and_the_server_keeps_serving(server, what, body, raw):
    status, err, *_ = post(server, CHAT, body, raw=raw)
    assert 400 <= status < 500, (what, status, err)
    assert set(err["error"]) == {"message", "type", "param", "code"} and err["error"]["message"], err
    status, ok, *_ = post(server, CHAT, chat())
    assert status == 200 and ok["choices"][0]["message"]["content"] is not None


def test_context_overflow_names_both_numbers(server):
    status, err, *_ = post(server, CHAT, chat(content="hello " * 100, max_tokens=10 ** 6))
    assert status == 400 and err["error"]["code"] == "context_length_exceeded"
    msg = err["error"]["message"]
    assert "8192" in msg and str(10 ** 6) in msg, msg


def test_unknown_fields_are_ignored(server):
    status, ok, *_ = post(server, CHAT, chat(frobnicate=True, metadata={"x": 1}))
    assert status == 200


def test_openapi_schema_is_served(server):
    with urllib.request.urlopen(server.base + "/openapi.json", timeout=10) as r:
        spec = json.loads(r.read())
    assert {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health"} <= set(spec["paths"])


def test_limits_auth_queue_and_body_size(default_model):
    """--api-key (401), --max-queue (429 + Retry-After while full), the body size limit (413), and -c (the model's
    context: /props reports it, a longer prompt is a 400 naming it)."""
    s = ServerProcess("--api-key", "sekret", "--max-queue", "1", "-c", "512", "--max-body", "8192")
    try:
        status, err, *_ = post(s, CHAT, chat())
        assert status == 401 and err["error"]["code"] == "invalid_api_key"
        auth = {"Authorization": "Bearer sekret"}
        assert post(s, CHAT, chat(), auth)[0] == 200
        with urllib.request.urlopen(urllib.request.Request(s.base + "/props", headers=auth), timeout=30) as r:
            props = json.loads(r.read())
        assert props["default_generation_settings"]["n_ctx"] == 512 and props["n_ctx_train"] == 8192
        status, err, *_ = post(s, CHAT, chat(content="hello " * 600, max_tokens=8), auth)
        assert status == 400 and err["error"]["code"] == "context_length_exceeded" and "512" in err["error"]["message"]
        done: list = []
        long = threading.Thread(target=lambda: done.append(post(s, CHAT, chat("Tell a long story.", max_tokens=300),
                                                                auth)))
        long.start()
        deadline = time.time() + 60
        while time.time() < deadline and health(s)["load"] == 0:
            time.sleep(0.02)
        got = post(s, CHAT, chat(), auth)  # the queue holds the long request
        assert got[0] == 429 and got[1]["error"]["type"] == "rate_limit_error" and got[2].get("retry-after")
        long.join(300)
        assert done[0][0] == 200
        assert post(s, CHAT, chat(), auth)[0] == 200  # room again once the long one finished
        status, err, *_ = post(s, CHAT, None, auth, raw=b'{"pad": "' + b"x" * 20000 + b'"}')
        assert status == 413 and err["error"]["code"] == "request_too_large"
    finally:
        s.stop()


def test_sigterm_ends_streams_cleanly_and_exits_zero(default_model):
    """SIGTERM during a stream: the stream ends (finished within the grace time, or with an error event), exit 0."""
    s = ServerProcess("--grace", "1")
    lines: list = []

    def stream():
        req = urllib.request.Request(s.base + CHAT, method="POST", headers={"Content-Type": "application/json"},
                                     data=json.dumps(chat("Tell a very long story.", max_tokens=2000,
                                                          stream=True)).encode())
        with urllib.request.urlopen(req, timeout=120) as r:
            for line in r:
                lines.append(line.decode().strip())

    t = threading.Thread(target=stream)
    t.start()
    deadline = time.time() + 60
    while time.time() < deadline and sum(1 for x in lines if x.startswith("data:")) < 3:
        time.sleep(0.05)
    code = s.stop(signal.SIGTERM)
    t.join(60)
    assert code == 0, s.output()
    data = [x for x in lines if x.startswith("data:")]
    assert data[-1] == "data: [DONE]" or "shutting down" in data[-1], data[-3:]


def test_schemathesis_finds_no_server_error(default_model, tmp_path):
    """Property-based requests generated from the served OpenAPI schema (loopback only, bounded): no 5xx."""
    import shutil
    import subprocess
    exe = shutil.which("schemathesis")
    if exe is None:
        pytest.skip("schemathesis is not installed: pip install schemathesis")
    s = ServerProcess("--ctx", "32")  # a small context bounds every generated request's work
    try:
        r = subprocess.run([exe, "run", s.base + "/openapi.json", "--checks", "not_a_server_error",
                            "--max-examples", "12", "--phases", "fuzzing,stateful", "--request-timeout", "60",
                            "--seed", "7"], capture_output=True, text=True, timeout=600,
                           cwd=tmp_path)  # its .schemathesis/ report folder stays out of the checkout
        assert r.returncode == 0, r.stdout[-4000:]
        assert " passed" in r.stdout and "generated" in r.stdout, r.stdout[-2000:]
    finally:
        assert s.stop() == 0
