"""Sampler programs on the server: registered at /v1/sampler-programs, named by `sampler_program`, run per row."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

import pytest

from piegpu import dtype, eta
from tests.server.conftest import MODEL_ID

V = 49152


def post(server, path: str, data: bytes, ctype: str = "application/json"):
    req = urllib.request.Request(server.base + path, data=data, method="POST", headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def top_a_program() -> bytes:
    return eta.trace(lambda x, s: eta.gumbel_max(eta.mask_apply(x, eta.top_a_mask(x, 0.2)), s),
                     eta.spec([V], dtype.f32), eta.spec([2], dtype.u32)).to_bytes()


def test_a_registered_program_samples_each_choice_as_the_library_does(server, default_model):
    data = top_a_program()
    status, card = post(server, "/v1/sampler-programs", data, "application/octet-stream")
    assert status == 200 and card["object"] == "sampler_program" and card["bytes"] == len(data)
    again = post(server, "/v1/sampler-programs", json.dumps({"program": base64.b64encode(data).decode()}).encode())
    assert again == (200, card)  # the same bytes are the same program
    body = {"model": MODEL_ID, "prompt": "The sky is", "max_tokens": 6, "n": 2, "seed": 40,
            "sampler_program": card["id"]}
    status, r = post(server, "/v1/completions", json.dumps(body).encode())
    assert status == 200, r
    for i, ch in enumerate(r["choices"]):
        g = default_model.generate("The sky is", max_tokens=6, sampler=data, seed=40 + i)
        g.run()
        assert ch["text"] == g.text


@pytest.mark.parametrize("what, body, param", [
    ("an unregistered id", {"sampler_program": "ab" * 32}, "sampler_program"),
    ("a temperature beside the program", {"sampler_program": None, "temperature": 0.5}, "temperature"),
])
def test_bad_program_requests_are_400s_naming_the_field(server, what, body, param):
    status, card = post(server, "/v1/sampler-programs", top_a_program(), "application/octet-stream")
    body = {"model": MODEL_ID, "prompt": "Hi", "max_tokens": 2, **body}
    if body["sampler_program"] is None:
        body["sampler_program"] = card["id"]
    status, err = post(server, "/v1/completions", json.dumps(body).encode())
    assert status == 400 and err["error"]["param"] == param, (what, err)


def test_containers_that_are_not_samplers_are_refused(server):
    wrong = eta.trace(lambda x: eta.reduce_argmax(x), eta.spec([V], dtype.f32)).to_bytes()
    status, err = post(server, "/v1/sampler-programs", wrong, "application/octet-stream")
    assert status == 400 and "signature" in err["error"]["message"]
    status, err = post(server, "/v1/sampler-programs", b"not a container", "application/octet-stream")
    assert status == 400 and err["error"]["param"] == "program"
    status, err = post(server, "/v1/sampler-programs", b'{"program": 5}')
    assert status == 400
