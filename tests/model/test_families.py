"""Model families against transformers: tiny random checkpoints made with transformers' own model classes
(scripts/make_model_fixtures.py; torch is not needed here) whose logits and greedy tokens are stored in
tests/fixtures/models/<family>/expected.npz. piegpu (on the device) and the numpy reference must match them:
logits within 1e-3 max abs error at every position of the 40-token sequence, and 16 greedy tokens exactly.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import piegpu
from piegpu.model.checkpoint import load_checkpoint
from piegpu.model.reference import ReferenceModel
from piegpu.model.rope import Rope

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "models"
FAMILIES = ["llama3", "mistral", "qwen2", "qwen3", "gemma3"]
ARCH = {"llama3": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
        "qwen3": "Qwen3ForCausalLM", "gemma3": "Gemma3ForCausalLM"}
TOL = 1e-3


def expected(family: str) -> dict:
    with np.load(FIXTURES / family / "expected.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def models():
    # exact (f32) K and V: each family's math against transformers' to 1e-3 (f16 rounding: tests/model/test_kv_f16.py)
    loaded = {f: piegpu.load_model(FIXTURES / f, verbose=False, kv_dtype="f32") for f in FAMILIES}
    yield loaded
    for m in loaded.values():
        m.close()


@pytest.mark.parametrize("family", FAMILIES)
def test_fixture_is_the_family_it_claims(family):
    config, _ = load_checkpoint(FIXTURES / family)
    assert config.architecture == ARCH[family]
    e = expected(family)
    assert e["ids"].shape == (40,) and e["logits"].shape == (40, config.vocab_size) and e["greedy"].shape == (16,)


@pytest.mark.parametrize("family", FAMILIES)
def test_device_logits_match_transformers_at_every_position(models, family):
    e = expected(family)
    got = models[family].logits(e["ids"].tolist())
    assert got.dtype == np.float32 and got.shape == e["logits"].shape
    err = np.abs(got - e["logits"]).max(axis=1)
    assert err.max() < TOL, f"{family}: max abs error {err.max():.2e} at position {err.argmax()}"


@pytest.mark.parametrize("family", FAMILIES)
def test_device_greedy_generation_matches_transformers(models, family):
    e = expected(family)
    model = models[family]
    text = model.tokenizer.decode(e["ids"].tolist())
    assert model.tokenizer.encode(text).ids == e["ids"].tolist()  # the prompt re-encodes to the same ids
    gen = model.generate(text, max_tokens=16, sampler="greedy")
    gen.run()
    assert gen.tokens == e["greedy"].tolist()


@pytest.mark.parametrize("family", FAMILIES)
def test_device_batched_greedy_matches_transformers(models, family):
    # two sequences per pass: the family steps in the batched forward (forward_batch) too
    e = expected(family)
    model = models[family]
    text = model.tokenizer.decode(e["ids"].tolist())
    short = model.tokenizer.decode(e["ids"][:25].tolist())
    ref = ReferenceModel.from_dir(FIXTURES / family)
    gens = model.generate_batch([text, short], max_tokens=16, sampler="greedy")
    assert gens[0].tokens == e["greedy"].tolist()
    assert gens[1].tokens == ref.greedy(model.tokenizer.encode(short).ids, 16)


@pytest.mark.parametrize("family", FAMILIES)
def test_reference_matches_transformers(family):
    e = expected(family)
    ref = ReferenceModel.from_dir(FIXTURES / family)
    got = ref.forward(e["ids"], ref.new_cache())
    assert np.abs(got - e["logits"]).max() < TOL
    assert ref.greedy(e["ids"].tolist(), 16) == e["greedy"].tolist()


def _replace(**fields):
    return lambda config, weights: (dataclasses.replace(config, **fields), weights)


def _map_weights(suffixes, fn):
    return lambda config, weights: (config, {k: (fn(v) if k.endswith(suffixes) else v) for k, v in weights.items()})


# family -> the family's own steps, each switched off in turn
QUIRKS = {
    "llama3": {"llama3 rope": lambda c, w: (dataclasses.replace(c, rope=Rope(c.rope_theta)), w)},
    "mistral": {"sliding window": _replace(layer_windows=())},
    "qwen2": {"qkv bias": _map_weights(("_proj.bias",), np.zeros_like)},
    "qwen3": {"q/k norm": _map_weights(("q_norm.weight", "k_norm.weight"), np.ones_like)},
    "gemma3": {"local rope": _replace(rope_local=None), "query_pre_attn_scalar": _replace(query_pre_attn_scalar=None),
               "sliding window": _replace(layer_windows=()),
               "sandwich norms": _map_weights(("post_feedforward_layernorm.weight",), lambda v: v + 5),
               "q/k norm": _map_weights(("q_norm.weight", "k_norm.weight"), lambda v: v + 1)},
}


@pytest.mark.parametrize("family, quirk", [(f, q) for f in FAMILIES for q in QUIRKS[f]])
def test_each_fixture_exercises_its_family_steps(family, quirk):
    # without one of its steps the logits are far off, so the matches above are evidence that the step is
    # implemented (and that the fixture's config really switches it on)
    e = expected(family)
    ref = ReferenceModel(*QUIRKS[family][quirk](*load_checkpoint(FIXTURES / family)))
    assert np.abs(ref.forward(e["ids"], ref.new_cache()) - e["logits"]).max() > 100 * TOL


@pytest.mark.parametrize("family", ["mistral", "gemma3"])
def test_long_decode_with_sliding_windows_matches_reference(models, family):
    """Past SPLIT_FROM positions the decode attention splits its positions (flash-decoding); with sliding-window
    layers each split starts from the window's first position. Against the numpy reference of the same weights."""
    from piegpu.model import gpu_model
    m = models[family]
    ref = ReferenceModel(*load_checkpoint(FIXTURES / family))
    assert any(m.config.window(i) for i in range(m.config.num_hidden_layers))
    n = gpu_model.SPLIT_FROM + 21
    assert n + 8 <= m.config.max_position_embeddings
    ids = [int(x) for x in np.random.default_rng(2).integers(3, m.config.vocab_size, n)]
    ws = m.working_set(n + 8)
    cache = ref.new_cache()
    a, b = ref.forward(ids, cache)[-1], m.gpu.forward(ws, ids)[0]
    errs = [float(np.abs(a - b).max())]
    for _ in range(6):
        tok = int(a.argmax())
        a, b = ref.forward([tok], cache)[-1], m.gpu.forward(ws, [tok])[0]
        errs.append(float(np.abs(a - b).max()))
    assert max(errs) < TOL, errs
