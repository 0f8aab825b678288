"""The context is the user's choice: load_model(context=N), -c N, a default that fits the memory budget, and the
errors of a context the model, the pool or the adapter cannot hold."""

from __future__ import annotations

import subprocess
import sys

import pytest

from piegpu.errors import ValidationError
from piegpu.model.kv_pool import (DEFAULT_MIN_CONTEXT, kv_bytes_per_position, kv_budget_mb, pool_pages,
                                  resolve_context)

from modeltest_helpers import gguf_tiny_config, random_weights, tiny_config, write_tiny_gguf

LIMIT = 128 << 20  # lavapipe's (and WebGPU's default) max storage buffer binding size


def _llama(hidden: int, layers: int, kv_heads: int, head_dim: int, ctx: int):
    """A config of a real model's KV shape (only the fields the context rules read matter)."""
    return tiny_config(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=hidden // head_dim,
                       num_key_value_heads=kv_heads, head_dim=head_dim, max_position_embeddings=ctx)


def test_default_context_is_the_models_where_it_fits_else_the_budgets():
    smollm = _llama(576, 30, 3, 64, 8192)
    assert resolve_context(smollm, None, True, "f16", LIMIT) == 8192  # 180 MiB: the whole context
    llama8b = _llama(4096, 32, 8, 128, 131072)  # 128 KiB a position in f16: 16 GiB for the whole context
    ctx = resolve_context(llama8b, None, False, "f16", LIMIT)
    assert ctx == 8192 and ctx * kv_bytes_per_position(llama8b, "f16") <= kv_budget_mb(False) << 20
    llama1b = _llama(2048, 16, 8, 64, 131072)  # 32 KiB a position
    assert resolve_context(llama1b, None, False, "f16", LIMIT) == 32768
    # never below DEFAULT_MIN_CONTEXT (a small budget grows the pool instead), never above the model's
    huge = _llama(8192, 80, 64, 128, 131072)
    assert resolve_context(huge, None, False, "f16", 4 << 30) == DEFAULT_MIN_CONTEXT
    assert resolve_context(_llama(256, 2, 2, 64, 2048), None, True, "f16", LIMIT) == 2048
    # one layer's K within one binding: 8 KV heads of 128 f16 dims = 2 KiB a position, 65536 in 128 MiB
    assert resolve_context(llama8b, None, False, "f16", 64 << 20) <= (64 << 20) // 2048


def test_a_context_asked_for_is_checked():
    c = _llama(4096, 32, 8, 128, 131072)
    assert resolve_context(c, 0, False, "f16", 1 << 40) == 131072  # 0: the model's own
    assert resolve_context(c, 4096, False, "f16", LIMIT) == 4096
    with pytest.raises(ValidationError, match=r"context=200000: the model was trained for 131072 positions"):
        resolve_context(c, 200000, False, "f16", 1 << 40)
    for bad in (-1, 2.5, "4096", True, None.__class__):
        with pytest.raises(ValidationError, match="context="):
            resolve_context(c, bad, False, "f16", LIMIT)
    with pytest.raises(ValidationError, match=r"binding limit, which holds 65504. Fix: context <= 65504"):
        resolve_context(c, 131072, False, "f16", LIMIT)
    with pytest.raises(ValidationError, match="kv_dtype"):
        resolve_context(c, 4096, False, "q3", LIMIT)


def test_the_pool_is_sized_for_the_context_not_the_models_maximum():
    c = _llama(4096, 32, 8, 128, 131072)
    P, pages = pool_pages(c, None, 16, False, "f16", 8192, LIMIT)
    assert 8192 // P + 1 <= pages <= 2 * (8192 // P + 4)
    with pytest.raises(ValidationError, match=r"cannot hold one sequence of the context \(8192 positions"):
        pool_pages(c, 512, 16, False, "f16", 8192, LIMIT)
    # the default pool stays within one binding a layer even where two contexts would not
    P, pages = pool_pages(c, None, 16, False, "f16", 65504, LIMIT)
    assert pages * P * 8 * 128 * 2 <= LIMIT


@pytest.fixture(scope="module")
def model_512(gpu):
    from piegpu import load_model
    m = load_model(verbose=False, context=512)
    yield m
    m.close()


def test_load_model_with_a_short_context(model_512, default_model):
    m = model_512
    assert m.context == 512 and default_model.context == m.config.max_position_embeddings == 8192
    s = m.kv_stats()
    assert s["pages_total"] * s["page_tokens"] < 4 * 512  # two contexts of 512, not two of 8192
    g = m.generate("Once upon a time", max_tokens=4)
    g.run()
    assert len(g.tokens) == 4
    with pytest.raises(ValidationError, match=r"the prompt has \d+ tokens but the context has room for 512"):
        m.generate("word " * 600, max_tokens=4)
    with pytest.raises(ValidationError, match=r"working_set\(max_tokens=600\): must be 1..512"):
        m.working_set(600)
    with pytest.raises(ValidationError, match=r"exceed the model's context of 512"):
        m.logits(list(range(100, 700)))


def test_load_model_rejects_bad_contexts_before_the_upload(gpu):
    from piegpu import load_model
    with pytest.raises(ValidationError, match=r"context=9000: the model was trained for 8192 positions"):
        load_model(verbose=False, context=9000)
    with pytest.raises(ValidationError, match=r"context='2k'"):
        load_model(verbose=False, context="2k")
    with pytest.raises(ValidationError, match=r"cannot hold one sequence of the context \(4096 positions"):
        load_model(verbose=False, context=4096, kv_mb=16)


def test_a_131072_position_gguf_loads_with_default_settings(tmp_path, gpu):
    """Llama 3.1's KV shape (8 KV heads of 128 dims) and context: it loads (the default context fits the budget and
    one binding a layer), generates, and says what it chose; context=0 asks for what one binding cannot hold."""
    from piegpu import load_model
    cfg = gguf_tiny_config(hidden_size=1024, intermediate_size=64, num_attention_heads=8, num_key_value_heads=8,
                           head_dim=128, num_hidden_layers=1, max_position_embeddings=131072)
    path = write_tiny_gguf(tmp_path / "long.gguf", cfg, random_weights(cfg, scale=0.05), "Q8_0")
    limit = gpu.limits.get("max-storage-buffer-binding-size", LIMIT)
    with load_model(path, verbose=False) as m:
        assert DEFAULT_MIN_CONTEXT <= m.context < 131072 and m.config.max_position_embeddings == 131072
        assert m.context == resolve_context(m.config, None, gpu.is_cpu, "f16", limit)
        g = m.generate("the", max_tokens=3, sampler="greedy")
        g.run()
        assert len(g.tokens) == 3
    if limit < 131072 * 8 * 128 * 2:
        with pytest.raises(ValidationError, match="binding limit"):
            load_model(path, verbose=False, context=0)


def _piegpu(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "piegpu", *args], capture_output=True, text=True, timeout=600)


def test_cli_context_flag():
    r = _piegpu("generate", "Once upon a time", "-c", "64", "--max-tokens", "3")
    assert r.returncode == 0, r.stderr
    assert "context 64 of the model's 8192" in r.stderr
    r = _piegpu("generate", "Once upon a time", "--ctx-size", "9000", "--max-tokens", "3")
    assert r.returncode != 0 and "context=9000: the model was trained for 8192 positions" in r.stderr
    r = _piegpu("generate", "hi", "-c", "many")
    assert r.returncode == 2 and "invalid int value: 'many'" in r.stderr
