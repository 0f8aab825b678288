"""Encoders on the device against the peer oracle (sentence-transformers / transformers on CPU torch): embeddings for
every pooling mode, Matryoshka dimensions, batches == each text alone, rerank scores for both scoring heads, and the
bad inputs (empty, too long, out-of-range ids, wrong kind of model)."""

from __future__ import annotations

import numpy as np
import pytest

import piegpu
from piegpu import ValidationError
from piegpu.model import encoder_reference as ref
from piegpu.model.encoder_config import EncoderConfig
from piegpu.model.encoder_weights import read_encoder

st = pytest.importorskip("sentence_transformers", reason="sentence-transformers (the embedding oracle) is not "
                         "installed: pip install -e .[test]")
torch = pytest.importorskip("torch", reason="torch (the embedding oracle's backend) is not installed")

from tests.fixtures.encoders import make_embedder, make_reranker, st_modules  # noqa: E402

TEXTS = ["the cat sat on the mat", "paris is the capital of france", "a", "blue sky, rain and a river in the city",
         "what is a gpu model? it is one that runs on the gpu, not the cpu, and it is fast"]
QUERY = "what is the capital of france"
DOCS = ["paris is the capital of france", "the dog sat in the rain", "france has a capital city",
        "blue sky", "a river runs through the old city of paris"]


@pytest.fixture(scope="module")
def embedder_dir(tmp_path_factory):
    return make_embedder(tmp_path_factory.mktemp("bert-embedder"))


@pytest.fixture(scope="module")
def embedder(gpu, embedder_dir):
    with piegpu.load_model(str(embedder_dir), verbose=False) as m:
        yield m


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.mark.parametrize("mode", ["mean", "cls", "lasttoken", "max", "mean_sqrt_len_tokens", "weightedmean"])
def test_every_pooling_matches_sentence_transformers(embedder, embedder_dir, mode):
    mods = st_modules()
    oracle = st.SentenceTransformer(modules=[mods.Transformer(str(embedder_dir / "_hf")),
                                             mods.Pooling(embedder.dimensions, pooling_mode=mode)], device="cpu")
    want = oracle.encode(TEXTS, convert_to_numpy=True)
    ours = {"lasttoken": "last", "mean_sqrt_len_tokens": "mean_sqrt_len"}.get(mode, mode)
    got = embedder.embed(TEXTS, normalize=False, pooling=ours)
    assert got.shape == want.shape and got.dtype == np.float32
    assert np.all(1 - _cosine(got, want) < 1e-4), 1 - _cosine(got, want)
    np.testing.assert_allclose(got, want, atol=2e-3 * np.abs(want).max())


def test_the_models_own_config_and_matryoshka_dimensions(embedder, embedder_dir):
    oracle = st.SentenceTransformer(str(embedder_dir), device="cpu")  # Transformer, mean Pooling, Normalize
    got, want = embedder.embed(TEXTS), oracle.encode(TEXTS)
    assert embedder.info["pooling"] == "mean" and embedder.info["normalize"]
    assert np.all(1 - (got * want).sum(1) < 1e-4)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1, atol=1e-6)
    cut = embedder.embed(TEXTS, dimensions=16)
    want16 = oracle.encode(TEXTS, truncate_dim=16, normalize_embeddings=True)
    assert cut.shape == (len(TEXTS), 16) and np.all(1 - (cut * want16).sum(1) < 1e-4)
    np.testing.assert_allclose(np.linalg.norm(cut, axis=1), 1, atol=1e-6)


def test_a_batch_equals_each_text_alone_and_the_numpy_reference(embedder, embedder_dir):
    together = embedder.embed(TEXTS, normalize=False)
    alone = np.concatenate([embedder.embed([t], normalize=False) for t in TEXTS])
    np.testing.assert_allclose(together, alone, rtol=0, atol=1e-5)
    cfg = EncoderConfig.from_dir(embedder_dir)
    w = read_encoder(embedder_dir, cfg)
    for (ids, types), v in zip(embedder.tokenize(TEXTS), together):
        r = ref.pool(ref.encode(w, ids, types), "mean")
        assert 1 - float(v @ r / np.linalg.norm(v) / np.linalg.norm(r)) < 1e-5


def test_several_passes_and_token_id_inputs(gpu, embedder_dir, embedder):
    many = [TEXTS[i % len(TEXTS)] + f" {i}" for i in range(40)]
    small = piegpu.textgen.encoder_model.load_encoder(embedder_dir, verbose=False, max_pass_tokens=64)
    try:
        np.testing.assert_allclose(small.embed(many), embedder.embed(many), atol=1e-5)  # 64-token passes vs one
    finally:
        small.close()
    ids = embedder.tokenize(TEXTS[1])[0][0]
    np.testing.assert_allclose(embedder.embed(ids), embedder.embed(TEXTS[1]), atol=1e-6)
    np.testing.assert_allclose(embedder.embed([ids, ids]), embedder.embed([TEXTS[1]] * 2), atol=1e-6)


def test_too_long_inputs_fail_unless_truncated_as_sentence_transformers_does(embedder, embedder_dir):
    long = " ".join(["the cat sat on the mat"] * 20)  # ~120 tokens, the model takes 64
    with pytest.raises(ValidationError, match=r"input 1 has \d+ tokens; this model takes at most 64.*truncate=True"):
        embedder.embed(["short", long])
    oracle = st.SentenceTransformer(str(embedder_dir), device="cpu")
    got = embedder.embed([long], truncate=True)
    assert 1 - float(got[0] @ oracle.encode([long])[0]) < 1e-4


@pytest.mark.parametrize("bad, match", [
    ([], "no input"), ("", "empty string"), (["ok", ""], "input 1 is an empty string"),
    ([["a"]], "input 0 is list"), ([[5, 99999]], r"token ids must be in \[0, \d+\), got 5..99999"),
    ([[-1]], "token ids must be in"), ([None], "input 0 is NoneType"),
])
def test_bad_inputs_are_clear_errors(embedder, bad, match):
    with pytest.raises(ValidationError, match=match):
        embedder.embed(bad)


def test_bad_options_and_a_closed_model(gpu, embedder_dir, embedder):
    for dims in (0, 65, 2.5, True):
        with pytest.raises(ValidationError, match=r"dimensions=.*an int in \[1, 64\]"):
            embedder.embed("x", dimensions=dims)
    with pytest.raises(ValidationError, match="pooling='sum'.*one of mean, cls, last"):
        embedder.embed("x", pooling="sum")
    with pytest.raises(ValidationError, match="embedding model, not a reranker.*Fix"):
        embedder.rerank("q", ["d"])
    m = piegpu.load_model(str(embedder_dir), verbose=False)
    m.close()
    with pytest.raises(ValidationError, match="closed"):
        m.embed("x")


@pytest.mark.parametrize("arch", ["xlm-roberta", "bert"])
def test_rerank_matches_the_cross_encoder(gpu, tmp_path, arch):
    path = make_reranker(tmp_path / arch, arch=arch)
    oracle = st.CrossEncoder(str(path), device="cpu")
    want = oracle.predict([(QUERY, d) for d in DOCS], activation_fn=torch.nn.Identity())
    with piegpu.load_model(str(path), verbose=False) as m:
        assert m.is_reranker and m.info["kind"] == "reranker"
        got = np.array(m.rerank(QUERY, DOCS))
        np.testing.assert_allclose(got, want, atol=1e-4)
        assert list(np.argsort(-got)) == list(np.argsort(-want))
        assert len(set(np.round(want, 3))) > 1  # the scores differ: the ordering is a real check
        with pytest.raises(ValidationError, match="documents must be a non-empty list"):
            m.rerank(QUERY, [])
        with pytest.raises(ValidationError, match="query must be a non-empty string"):
            m.rerank("", DOCS)
        long = " ".join(["the river runs through the city"] * 12)
        with pytest.raises(ValidationError, match="document 0 has .* tokens.*truncate=True"):
            m.rerank(QUERY, [long])
        cut = m.rerank(QUERY, [long], truncate=True)[0]
        ref_cut = oracle.predict([(QUERY, long)], activation_fn=torch.nn.Identity())[0]
        assert abs(cut - ref_cut) < 1e-4


def test_a_decoder_embeds_by_last_token_and_mean_as_transformers_does(gpu):
    from transformers import LlamaConfig as HFLlamaConfig, LlamaModel
    from tests.helpers import random_tensors, tiny_config, tiny_model
    cfg = tiny_config(layers=2, vocab=300, max_pos=512)
    model, _ = tiny_model(cfg, seed=3)
    hf = LlamaModel(HFLlamaConfig(vocab_size=300, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
                                  num_hidden_layers=2, num_attention_heads=cfg.num_attention_heads,
                                  num_key_value_heads=cfg.num_key_value_heads, rms_norm_eps=cfg.rms_norm_eps,
                                  rope_theta=10000.0, max_position_embeddings=512, tie_word_embeddings=True)).eval()
    state = {k.removeprefix("model."): torch.from_numpy(v) for k, v in random_tensors(cfg, 3).items()
             if k.startswith("model.")}
    hf.load_state_dict(state, strict=True)
    ids = [[5, 17, 42, 7, 99, 3], list(range(10, 300, 1))]  # the second: two prefill passes (256 + 34 tokens)
    try:
        for mode in ("last", "mean"):
            got = model.embed(ids, normalize=False, pooling=mode)
            for row, x in zip(got, ids):
                with torch.no_grad():
                    h = hf(torch.tensor([x])).last_hidden_state[0].numpy()
                want = h[-1] if mode == "last" else h.mean(0)
                assert 1 - float(row @ want / np.linalg.norm(row) / np.linalg.norm(want)) < 1e-5
                np.testing.assert_allclose(row, want, atol=2e-4 * np.abs(want).max())
        with pytest.raises(ValidationError, match="no pooling configured.*Fix: pass embed\\(..., pooling=\"last\"\\)"):
            model.embed(ids)
    finally:
        model.close()


def test_q8_0_weights_stay_close_to_the_checkpoint(gpu, embedder_dir, embedder):
    from piegpu.textgen.encoder_model import load_encoder
    with load_encoder(embedder_dir, verbose=False, dtype="q8_0") as q:
        assert q.info["dtype"] == "q8_0"
        assert np.all((q.embed(TEXTS) * embedder.embed(TEXTS)).sum(1) > 0.999)
    with pytest.raises(ValidationError, match="dtype 'q4'"):
        load_encoder(embedder_dir, verbose=False, dtype="q4")
