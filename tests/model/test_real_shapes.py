"""Models at the widths people run, CI-sized (one layer, a small vocabulary): a Llama-3.2-1B-wide and a
Qwen2.5-1.5B-wide decoder (QKV bias, 128-dim heads) in a Q4_K_M-style mix (v, down and the embeddings in Q6_K, the
rest Q4_K), loaded in place with default settings -- the texture layouts on lavapipe -- and checked against the numpy
reference on gguf's dequantization of the same file (the exact oracle), prefill and decode."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from modeltest_helpers import random_weights, write_checkpoint_gguf

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "models"
SHAPES = {  # the widths, heads and FFN of the released models; one layer, vocab 512
    "llama-3.2-1b": dict(architecture="LlamaForCausalLM", hidden_size=2048, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=64, intermediate_size=8192, rope_theta=500000.0,
                         max_position_embeddings=131072, tie_word_embeddings=True),
    "qwen2.5-1.5b": dict(architecture="Qwen2ForCausalLM", hidden_size=1536, num_attention_heads=12,
                         num_key_value_heads=2, head_dim=128, intermediate_size=8960, rope_theta=1000000.0,
                         max_position_embeddings=32768, tie_word_embeddings=True),
}


def q4_k_m(name: str) -> str:
    """llama.cpp's Q4_K_M mix, as far as one layer shows it: v, down and the (tied) embeddings in Q6_K."""
    return "Q6_K" if any(k in name for k in ("v_proj", "down_proj", "embed_tokens", "lm_head")) else "Q4_K"


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_real_width_q4_k_m_equals_the_oracle(tmp_path, gpu, shape):
    import piegpu
    from piegpu.model.checkpoint import save_checkpoint
    from piegpu.model.config import LlamaConfig
    from piegpu.model.kv_pool import resolve_context
    from piegpu.model.reference import ReferenceModel
    from test_family_gguf import gguf_reference
    cfg = LlamaConfig(vocab_size=512, num_hidden_layers=1, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
                      **SHAPES[shape])
    d = tmp_path / shape
    d.mkdir()
    save_checkpoint(d, cfg, random_weights(cfg, seed=5, scale=0.02), "f32")
    shutil.copy(FIXTURES / "llama3" / "tokenizer.json", d / "tokenizer.json")
    path = tmp_path / f"{shape}.Q4_K_M.gguf"
    used = write_checkpoint_gguf(d, path, q4_k_m)
    assert set(used.values()) == {"Q4_K", "Q6_K"}
    ids = [int(i) for i in np.random.default_rng(1).integers(3, 512, 24)]
    want = gguf_reference(path, ids)
    with piegpu.load_model(path, verbose=False, kv_dtype="f32") as m:
        limit = gpu.limits.get("max-storage-buffer-binding-size", 128 << 20)
        assert m.context == resolve_context(m.config, None, gpu.is_cpu, "f32", limit)
        fmts = {c[3] for L in m.gpu.layers for mat in (L.qkv, L.o, L.gate_up, L.down) for c in mat.chunks}
        if gpu.texture_weights:
            assert fmts == {"q4_k_tex", "q6_k_tex"}, fmts
        got = m.logits(ids)  # one prefill, every row read out
        scale = max(1.0, float(np.abs(want).max()))
        assert float(np.abs(got - want).max()) < 2e-4 * scale, shape
        # decode: token by token on a working set (the decode matvecs), the last position's logits
        ws = m.working_set(64)
        m.gpu.forward(ws, ids[:-1])
        last = m.gpu.forward(ws, ids[-1:])
        assert float(np.abs(np.asarray(last).reshape(-1) - want[-1]).max()) < 2e-4 * scale
    if shape == "llama-3.2-1b":  # portable limits: the same logits within WebGPU's default limits (browsers, iGPUs)
        out = tmp_path / "webgpu.npy"
        code = ("import sys, numpy as np, piegpu; m = piegpu.load_model(sys.argv[1], verbose=False, kv_dtype='f32'); "
                "assert m.gpu.dev.limits['max-buffer-size'] == 256 << 20; "
                "np.save(sys.argv[2], m.logits([int(i) for i in sys.argv[3].split(',')]))")
        r = subprocess.run([sys.executable, "-c", code, str(path), str(out), ",".join(map(str, ids))],
                           capture_output=True, text=True, timeout=600, env={**os.environ, "PIEGPU_LIMITS": "webgpu"})
        assert r.returncode == 0, r.stderr[-2000:]
        assert float(np.abs(np.load(out) - want).max()) < 2e-4 * scale
