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
FAMILIES = ["llama3", "mistral", "qwen2", "qwen3"]
ARCH = {"llama3": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
        "qwen3": "Qwen3ForCausalLM"}
TOL = 1e-3


def expected(family: str) -> dict:
    with np.load(FIXTURES / family / "expected.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def models():
    loaded = {f: piegpu.load_model(FIXTURES / f, verbose=False) for f in FAMILIES}
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


def _without_quirk(family: str):
    """The fixture's config and weights with the family's own step switched off."""
    config, weights = load_checkpoint(FIXTURES / family)
    if family == "llama3":
        config = dataclasses.replace(config, rope=Rope(config.rope_theta))
    elif family == "mistral":
        config = dataclasses.replace(config, layer_windows=())
    elif family == "qwen2":
        weights = {k: (np.zeros_like(v) if k.endswith("_proj.bias") else v) for k, v in weights.items()}
    else:
        weights = {k: (np.ones_like(v) if k.endswith(("q_norm.weight", "k_norm.weight")) else v)
                   for k, v in weights.items()}
    return config, weights


@pytest.mark.parametrize("family", FAMILIES)
def test_each_fixture_exercises_its_family_step(family):
    # without its quirk (llama3 RoPE, the sliding window, the QKV bias, the q/k norm) the logits are far off,
    # so the matches above are evidence that the step is implemented
    e = expected(family)
    ref = ReferenceModel(*_without_quirk(family))
    assert np.abs(ref.forward(e["ids"], ref.new_cache()) - e["logits"]).max() > 100 * TOL
