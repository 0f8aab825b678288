"""The numpy reference forward pass: KV-cache consistency, GQA, odd sizes, and an independent oracle."""

from __future__ import annotations

import numpy as np
import pytest
from modeltest_helpers import random_weights, tiny_config

from piegpu.errors import ModelError, ValidationError
from piegpu.model.reference import ReferenceModel

CONFIGS = {
    "gqa": dict(),
    "mha": dict(num_key_value_heads=6),
    "mqa": dict(num_key_value_heads=1),
    "odd": dict(vocab_size=29, hidden_size=30, num_attention_heads=3, num_key_value_heads=3, head_dim=10,
                intermediate_size=17, num_hidden_layers=3, tie_word_embeddings=False, rope_theta=500.0),
    "wide_heads": dict(hidden_size=20, num_attention_heads=4, num_key_value_heads=2, head_dim=6),
}


def naive_logits(config, w, ids):
    """Float64 Llama written with per-token, per-head loops and complex-number RoPE."""
    c = config
    group = c.num_attention_heads // c.num_key_value_heads
    hd = c.head_dim
    inv_freq = 1.0 / c.rope_theta ** (np.arange(hd // 2) * 2 / hd)

    def norm(x, g):
        return x / np.sqrt(np.mean(x**2) + c.rms_norm_eps) * g

    def rope(vec, pos):
        heads = vec.reshape(-1, hd)
        z = (heads[:, : hd // 2] + 1j * heads[:, hd // 2 :]) * np.exp(1j * pos * inv_freq)
        return np.concatenate([z.real, z.imag], axis=1).reshape(-1)

    W = {k: v.astype(np.float64) for k, v in w.items()}
    xs = [W["model.embed_tokens.weight"][t] for t in ids]
    for layer in range(c.num_hidden_layers):
        p = f"model.layers.{layer}."
        keys, values, out = [], [], []
        for pos, x in enumerate(xs):
            h = norm(x, W[p + "input_layernorm.weight"])
            q = rope(W[p + "self_attn.q_proj.weight"] @ h, pos).reshape(-1, hd)
            keys.append(rope(W[p + "self_attn.k_proj.weight"] @ h, pos).reshape(-1, hd))
            values.append((W[p + "self_attn.v_proj.weight"] @ h).reshape(-1, hd))
            heads = []
            for head in range(c.num_attention_heads):
                kv = head // group
                scores = np.array([q[head] @ keys[j][kv] for j in range(pos + 1)]) / np.sqrt(hd)
                probs = np.exp(scores - scores.max())
                probs /= probs.sum()
                heads.append(sum(probs[j] * values[j][kv] for j in range(pos + 1)))
            x = x + W[p + "self_attn.o_proj.weight"] @ np.concatenate(heads)
            h = norm(x, W[p + "post_attention_layernorm.weight"])
            gate = W[p + "mlp.gate_proj.weight"] @ h
            x = x + W[p + "mlp.down_proj.weight"] @ (gate / (1 + np.exp(-gate)) * (W[p + "mlp.up_proj.weight"] @ h))
            out.append(x)
        xs = out
    head = W["model.embed_tokens.weight"] if c.tie_word_embeddings else W["lm_head.weight"]
    return np.stack([head @ norm(x, W["model.norm.weight"]) for x in xs])


def make(kind, dtype=np.float32, seed=0):
    config = tiny_config(**CONFIGS[kind])
    weights = random_weights(config, seed=seed)
    return config, weights, ReferenceModel(config, weights, dtype)


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_matches_an_independent_float64_implementation(kind):
    config, weights, model = make(kind, np.float64)
    ids = np.random.default_rng(1).integers(0, config.vocab_size, 9)
    got = model.forward(ids, model.new_cache())
    np.testing.assert_allclose(got, naive_logits(config, weights, ids), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_prefill_then_decode_equals_full_sequence(kind):
    config, _, model = make(kind)
    ids = np.random.default_rng(2).integers(0, config.vocab_size, 40)  # > initial cache capacity
    full = model.forward(ids, model.new_cache())
    assert full.shape == (40, config.vocab_size) and full.dtype == np.float32

    cache = model.new_cache()
    steps = [model.forward(ids[:13], cache)]
    steps += [model.forward(ids[i : i + 1], cache) for i in range(13, 30)]
    steps += [model.forward(ids[30:], cache)]  # a second multi-token chunk after decoding
    assert cache.length == 40
    assert np.abs(np.concatenate(steps) - full).max() < 1e-4


def test_float32_agrees_with_float64():
    config, weights, m32 = make("gqa")
    m64 = ReferenceModel(config, weights, np.float64)
    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    a = m32.forward(ids, m32.new_cache())
    b = m64.forward(ids, m64.new_cache())
    assert b.dtype == np.float64 and np.abs(a - b).max() < 1e-4


def test_greedy_is_argmax_of_forward_and_honours_stop_ids():
    config, _, model = make("odd")
    prompt = [1, 2, 3]
    out = model.greedy(prompt, 6)
    assert len(out) == 6
    seq = list(prompt)
    for token in out:
        logits = model.forward(seq, model.new_cache())[-1]
        assert token == int(np.argmax(logits))
        seq.append(token)
    stopped = model.greedy(prompt, 6, stop_ids=[out[2]])
    assert stopped == out[: out.index(out[2]) + 1]


def test_bad_inputs():
    config, weights, model = make("gqa")
    with pytest.raises(ValidationError, match="out of range"):
        model.forward([config.vocab_size], model.new_cache())
    with pytest.raises(ValidationError, match="empty"):
        model.forward([], model.new_cache())
    with pytest.raises(ValidationError, match="float32 or float64"):
        ReferenceModel(config, weights, np.float16)
    bad = dict(weights)
    del bad["model.norm.weight"]
    with pytest.raises(ModelError, match="model.norm.weight"):
        ReferenceModel(config, bad)
