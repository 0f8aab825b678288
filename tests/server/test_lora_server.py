"""`piegpu serve --lora NAME=PATH`: adapters as model ids (the official openai client), llama.cpp's /lora-adapters
and /completion `lora`, vLLM's runtime load/unload, several adapters in one batch, the prefix cache kept apart per
adapter. The base is the tiny Llama 3 fixture and the adapters PEFT's (tests/fixtures/lora: PEFT's greedy tokens)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

from tests.server.conftest import ServerProcess, get, post

openai = pytest.importorskip("openai", reason="the server tests drive the official openai client: pip install openai")

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
BASE = "llama3"


def expected(case: str) -> dict:
    with np.load(FIXTURES / "lora" / case / "expected.npz") as z:
        return {k: z[k].tolist() for k in z.files}


@pytest.fixture(scope="module")
def lora_server():
    s = ServerProcess("-m", str(FIXTURES / "models" / BASE), "--kv-dtype", "f32", "--model-id", BASE,
                      "--lora", f"qv={FIXTURES / 'lora' / 'llama3_qv_r8'}",
                      "--lora", f"all={FIXTURES / 'lora' / 'llama3_all_rslora'}")
    yield s
    assert s.stop() == 0


def greedy_ids(server, ids: list, n: int = 16, **body) -> list:
    status, r = post(server, "/completion", {"prompt": ids, "n_predict": n, "temperature": 0, "return_tokens": True,
                                             "ignore_eos": True, **body})
    assert status == 200, r
    return r["tokens"]


def test_adapters_are_model_ids_and_each_matches_peft(lora_server):
    c = lora_server.client()
    models = {m.id: m for m in c.models.list().data}
    assert list(models) == [BASE, "qv", "all"]
    assert models["qv"].model_dump()["parent"] == BASE
    e_qv, e_all = expected("llama3_qv_r8"), expected("llama3_all_rslora")
    base = np.load(FIXTURES / "models" / BASE / "expected.npz")["greedy"].tolist()
    ids = e_qv["ids"]
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(FIXTURES / "models" / BASE / "tokenizer.json"))
    for name, want in (("qv", e_qv["greedy"]), ("all", e_all["greedy"]), (BASE, base)):
        r = c.completions.create(model=name, prompt=ids, max_tokens=16, temperature=0)
        assert r.model == name
        stop = next((i for i, t in enumerate(want) if t == 2), len(want))  # the fixture's eos ends the text
        # (the server holds back a trailing incomplete UTF-8 sequence: the decoder's replacement character)
        assert r.choices[0].text.rstrip("\ufffd") == tok.decode(want[:stop]).rstrip("\ufffd")
        assert greedy_ids(lora_server, ids, model=name) == want, name
    with pytest.raises(openai.NotFoundError, match="This server serves: `llama3`, `qv`, `all`"):
        c.completions.create(model="nope", prompt=ids, max_tokens=2)


def test_a_batch_mixing_adapters_equals_each_alone_and_the_cache_keeps_them_apart(lora_server):
    e = expected("llama3_qv_r8")
    ids = e["ids"]
    alone = {name: greedy_ids(lora_server, ids, model=name) for name in ("qv", "all", BASE)}
    assert len({tuple(v) for v in alone.values()}) == 3  # (the same prompt: the prefix cache must not mix them)
    got: dict = {}

    def run(k: int, name: str):
        got[k] = (name, greedy_ids(lora_server, ids, model=name))
    names = ["qv", "all", BASE, "qv", "all", BASE, "all", "qv"]
    threads = [threading.Thread(target=run, args=(k, n)) for k, n in enumerate(names)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(tokens == alone[name] for name, tokens in got.values()), got


def test_llamacpp_lora_field_and_global_scales(lora_server):
    e = expected("llama3_qv_r8")
    ids = e["ids"]
    listing = get(lora_server, "/lora-adapters")
    assert [(a["id"], a["name"], a["scale"]) for a in listing] == [(0, "qv", 0.0), (1, "all", 0.0)]
    mem = get(lora_server, "/health")["lora"]
    assert mem["loaded"] == 2 and mem["resident"] >= 1 and mem["device_bytes"] > 0 and mem["max_slots"] == 8
    assert greedy_ids(lora_server, ids, lora=[{"id": 0, "scale": 1.0}, {"id": 1, "scale": 0.0}]) == e["greedy"]
    status, r = post(lora_server, "/completion", {"prompt": ids, "n_predict": 2,
                                                  "lora": [{"id": 0, "scale": 1.0}, {"id": 1, "scale": 0.5}]})
    assert status == 400 and "one adapter per request" in json.dumps(r)
    status, r = post(lora_server, "/completion", {"prompt": ids, "n_predict": 2, "lora": [{"id": 7, "scale": 1}]})
    assert status == 400 and "no LoRA adapter has id 7" in json.dumps(r)
    # the global scales apply to llama.cpp requests that name no adapter
    status, _ = post(lora_server, "/lora-adapters", [{"id": 1, "scale": 1.0}])
    assert status == 200
    assert greedy_ids(lora_server, ids) == expected("llama3_all_rslora")["greedy"]
    post(lora_server, "/lora-adapters", [{"id": 1, "scale": 0.0}])
    assert greedy_ids(lora_server, ids) == np.load(FIXTURES / "models" / BASE / "expected.npz")["greedy"].tolist()


def test_adapters_load_and_unload_while_serving(lora_server):
    e = expected("qwen3_qkv_r4")
    status, r = post(lora_server, "/v1/load_lora_adapter", {"lora_name": "wrong", "lora_path":
                                                            str(FIXTURES / "lora" / "gemma3_all_r8")})
    assert status == 400 and "wrong" not in [m["id"] for m in get(lora_server, "/v1/models")["data"]]
    assert "the base model" in r["error"]["message"] or "adapter" in r["error"]["message"]
    status, r = post(lora_server, "/v1/load_lora_adapter", {"lora_name": "qv2", "lora_path":
                                                            str(FIXTURES / "lora" / "llama3_qv_r8")})
    assert status == 200, r
    assert greedy_ids(lora_server, expected("llama3_qv_r8")["ids"], model="qv2") == expected("llama3_qv_r8")["greedy"]
    status, r = post(lora_server, "/v1/unload_lora_adapter", {"lora_name": "qv2"})
    assert status == 200, r
    assert "qv2" not in [m["id"] for m in get(lora_server, "/v1/models")["data"]]
    status, r = post(lora_server, "/completion", {"prompt": e["ids"], "n_predict": 2, "model": "qv2"})
    assert status == 404
