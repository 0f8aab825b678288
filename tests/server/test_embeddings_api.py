"""`piegpu serve -m ENCODER_DIR` through the official openai client and llama.cpp's shapes: /v1/embeddings (float and
base64, dimensions, token ids), /embedding, /v1/rerank and /rerank ordered as the CrossEncoder orders, concurrent
requests coalesced into fewer embed calls, and clear 400s; a decoder server's /v1/embeddings without pooling."""

from __future__ import annotations

import base64
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.server.conftest import ServerProcess, get, post

st = pytest.importorskip("sentence_transformers", reason="sentence-transformers (the embedding oracle) is not "
                         "installed: pip install -e .[test]")
torch = pytest.importorskip("torch", reason="torch (the oracle's backend) is not installed")
openai = pytest.importorskip("openai", reason="the openai client is not installed: pip install -e .[test]")

from tests.fixtures.encoders import make_embedder, make_reranker  # noqa: E402

TEXTS = ["the cat sat on the mat", "paris is the capital of france", "blue sky and rain"]
QUERY = "what is the capital of france"
DOCS = ["the dog sat in the rain", "paris is the capital of france", "blue sky", "france has a capital city"]


@pytest.fixture(scope="module")
def embedder_dir(tmp_path_factory):
    return make_embedder(tmp_path_factory.mktemp("served-embedder"))


@pytest.fixture(scope="module")
def embed_server(gpu, embedder_dir):
    s = ServerProcess("-m", str(embedder_dir), "--model-id", "tiny-embed")
    yield s
    s.stop()


def test_openai_client_embeddings_float_base64_and_dimensions(embed_server, embedder_dir):
    oracle = st.SentenceTransformer(str(embedder_dir), device="cpu")
    want = oracle.encode(TEXTS)
    client = embed_server.client()
    r = client.embeddings.create(model="tiny-embed", input=TEXTS)
    got = np.array([d.embedding for d in r.data])
    assert [d.index for d in r.data] == [0, 1, 2] and r.usage.prompt_tokens > len(TEXTS)
    assert np.all(1 - (got * want).sum(1) < 1e-4)
    raw = client.embeddings.create(model="tiny-embed", input=TEXTS[1], encoding_format="base64")
    vec = raw.data[0].embedding
    if isinstance(vec, str):  # the client hands base64 through when asked for it explicitly
        vec = np.frombuffer(base64.b64decode(vec), "<f4")
    np.testing.assert_allclose(np.asarray(vec), got[1], atol=1e-6)
    cut = client.embeddings.create(model="tiny-embed", input=TEXTS, dimensions=16)
    c = np.array([d.embedding for d in cut.data])
    want16 = oracle.encode(TEXTS, truncate_dim=16, normalize_embeddings=True)
    assert c.shape == (3, 16) and np.all(1 - (c * want16).sum(1) < 1e-4)
    ids = oracle.tokenizer(TEXTS[0])["input_ids"]
    by_ids = client.embeddings.create(model="tiny-embed", input=[ids])
    np.testing.assert_allclose(by_ids.data[0].embedding, got[0], atol=1e-5)


def test_llamacpp_embedding_and_concurrent_requests_coalesce(embed_server):
    status, body = post(embed_server, "/embedding", {"content": TEXTS[0]})
    assert status == 200 and len(body) == 1 and len(body[0]["embedding"][0]) == 64
    status, raw = post(embed_server, "/embedding", {"content": TEXTS[0], "embd_normalize": -1})
    assert status == 200 and abs(np.linalg.norm(raw[0]["embedding"][0]) - 1) > 1e-3  # not normalized
    before = get(embed_server, "/health")
    client = embed_server.client()
    one = np.array(client.embeddings.create(model="tiny-embed", input=TEXTS[2]).data[0].embedding)
    with ThreadPoolExecutor(16) as pool:
        outs = list(pool.map(lambda i: client.embeddings.create(model="tiny-embed", input=[TEXTS[2]] * 4), range(32)))
    for o in outs:
        for d in o.data:
            np.testing.assert_allclose(d.embedding, one, atol=1e-5)
    after = get(embed_server, "/health")
    assert after["calls"] - before["calls"] < 33  # 33 requests, fewer embed calls: requests ran together


@pytest.mark.parametrize("body, status, match", [
    ({"input": []}, 400, "'input' is empty"),
    ({"input": ""}, 400, "empty string"),
    ({"input": " ".join(["the cat sat on the mat"] * 20)}, 400, r"input 0 has \d+ tokens; this model takes at most 64"),
    ({"input": "x", "dimensions": 65}, 400, "dimensions 65 exceeds this model's 64"),
    ({"input": [[1, 99999]]}, 400, "token ids must be in"),
    ({"input": "x", "model": "other"}, 404, "does not exist"),
])
def test_bad_embedding_requests(embed_server, body, status, match):
    import re
    got, err = post(embed_server, "/v1/embeddings", body)
    assert got == status and re.search(match, err["error"]["message"]), err


def test_truncate_and_rerank_on_an_embedder(embed_server):
    status, body = post(embed_server, "/v1/embeddings",
                         {"input": " ".join(["the cat sat on the mat"] * 20), "truncate": True})
    assert status == 200 and len(body["data"][0]["embedding"]) == 64
    status, err = post(embed_server, "/v1/rerank", {"query": "q", "documents": ["d"]})
    assert status == 400 and "not a reranker" in err["error"]["message"]


def test_rerank_orders_as_the_cross_encoder(gpu, tmp_path):
    path = make_reranker(tmp_path / "reranker")
    oracle = st.CrossEncoder(str(path), device="cpu")
    want = oracle.predict([(QUERY, d) for d in DOCS], activation_fn=torch.nn.Identity())
    s = ServerProcess("-m", str(path), "--model-id", "tiny-rerank")
    try:
        for route in ("/v1/rerank", "/rerank"):
            status, body = post(s, route, {"query": QUERY, "documents": DOCS, "return_documents": True})
            assert status == 200, body
            assert [r["index"] for r in body["results"]] == list(np.argsort(-want))
            for r in body["results"]:
                assert abs(r["relevance_score"] - want[r["index"]]) < 1e-4
                assert r["document"]["text"] == DOCS[r["index"]]
        status, body = post(s, "/v1/rerank", {"query": QUERY, "documents": DOCS, "top_n": 2})
        assert status == 200 and len(body["results"]) == 2 and "document" not in body["results"][0]
        status, err = post(s, "/v1/rerank", {"query": QUERY, "documents": []})
        assert status == 400 and "documents must be a non-empty list" in err["error"]["message"]
    finally:
        s.stop()


def test_a_decoder_server_embeds_only_with_a_pooling(server):
    status, err = post(server, "/v1/embeddings", {"input": "hello"})
    assert status == 400 and "no pooling configured" in err["error"]["message"]
    assert "--pooling last" in err["error"]["message"]
