"""The family fixtures converted to GGUF (the gguf package's writer, as llama.cpp's converter lays them out) in
every GGML type piegpu reads, loaded in place, against the f32 logits of transformers.

Two checks per (family, type):
- exactness: piegpu's logits equal the numpy reference run on gguf's dequantization of the same file
  (float32 noise only): the native WGSL reads are the format's values, whatever the format.
- the format's own error: the f32 logits are matched within a tolerance derived from the format, not
  fitted to the result. Each format rounds a weight to a grid whose step it defines per block --
  F16 / BF16: 2^-10 / 2^-7 of the weight's magnitude (half of it at most), Q8_0: max|w| / 127 per
  32 weights, Q4_0 / Q5_0: max|w| / 8 / 16, Q4_1 / Q5_1: (max - min) / 15 / 31, Q4_K / Q5_K: the
  32-weight sub-block's range / 15 / 31, Q6_K: max|w| / 32 per 16 weights. The numpy reference run
  on the f32 weights plus uniform noise of half that step (two seeds) predicts the logit error of that
  much rounding for this model; the GGUF must come within 3x of it (rounding is not independent
  noise, so a factor, not equality). The fixtures' rows are 64 or 128 weights, not whole K-quant
  super-blocks: there K types fall back as llama.cpp's quantizer does (Q4_K -> Q5_0, Q5_K -> Q5_1,
  Q6_K -> Q8_0); test_k_quant_models covers K-quant blocks in a model with 256-multiple rows.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from modeltest_helpers import write_checkpoint_gguf
from piegpu.model.gpu_weights import GGML_FORMATS

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "models"
FAMILIES = ["llama3", "mistral", "qwen2", "qwen3", "gemma3"]
TYPES = sorted(GGML_FORMATS)


def rounding_noise(w: np.ndarray, gtype: str, rng) -> np.ndarray:
    """Uniform noise of half the format's grid step, per block (the error model of the docstring)."""
    rows, cols = w.shape
    u = rng.uniform(-0.5, 0.5, w.shape).astype(np.float32)
    if gtype == "F32":
        return np.zeros_like(w)
    if gtype in ("F16", "BF16"):
        return w * u * np.float32(2.0 ** (-10 if gtype == "F16" else -7))
    if gtype == "Q6_K":
        b = w.reshape(rows, -1, 16)
        step = np.abs(b).max(axis=2, keepdims=True) / 32
    else:
        b = w.reshape(rows, -1, 32)
        if gtype in ("Q8_0", "Q4_0", "Q5_0"):
            step = np.abs(b).max(axis=2, keepdims=True) / {"Q8_0": 127, "Q4_0": 8, "Q5_0": 16}[gtype]
        else:
            lo = np.minimum(b.min(axis=2, keepdims=True), 0) if gtype.endswith("_K") else b.min(axis=2, keepdims=True)
            step = (b.max(axis=2, keepdims=True) - lo) / {"Q4_1": 15, "Q5_1": 31, "Q4_K": 15, "Q5_K": 31}[gtype]
    return (u.reshape(b.shape) * step).reshape(rows, cols)


def predicted_error(config, tensors: dict, ids: list, want: np.ndarray, used: dict) -> float:
    """Max abs logit error of the numpy reference with the format's rounding noise on every matrix (2 seeds)."""
    from piegpu.model.reference import ReferenceModel
    from modeltest_helpers import _GGUF_ARCH, _gguf_tensor_name
    arch = _GGUF_ARCH[config.architecture]
    worst = 0.0
    for seed in (0, 1):
        rng = np.random.default_rng(seed)
        noisy = {k: (v + rounding_noise(v, used[_gguf_tensor_name(k, arch)], rng) if v.ndim == 2 else v)
                 for k, v in tensors.items()}
        ref = ReferenceModel(config, noisy)
        worst = max(worst, float(np.abs(ref.forward(ids, ref.new_cache()) - want).max()))
    return worst


def gguf_reference(path: Path, ids: list) -> np.ndarray:
    """Logits of the numpy reference on gguf's dequantization of the file."""
    from piegpu.model.gguf_convert import config_from_gguf, dequantize_gguf, open_gguf
    from piegpu.model.reference import ReferenceModel
    reader = open_gguf(path)
    config = config_from_gguf(reader, str(path))
    ref = ReferenceModel(config, dequantize_gguf(reader, config, str(path)))
    return ref.forward(ids, ref.new_cache())


@pytest.fixture(scope="module")
def loaded_fixtures():
    from piegpu.model.checkpoint import load_checkpoint
    out = {}
    for fam in FAMILIES:
        exp = np.load(FIXTURES / fam / "expected.npz")
        config, tensors = load_checkpoint(FIXTURES / fam)
        out[fam] = (config, {k: np.asarray(v, np.float32) for k, v in tensors.items()},
                    [int(i) for i in exp["ids"]], exp["logits"])
    return out


@pytest.mark.parametrize("gtype", TYPES)
@pytest.mark.parametrize("family", FAMILIES)
def test_family_gguf_matches_f32_logits(tmp_path, loaded_fixtures, family, gtype):
    import piegpu
    config, tensors, ids, want = loaded_fixtures[family]
    path = tmp_path / f"{family}-{gtype}.gguf"
    used = write_checkpoint_gguf(FIXTURES / family, path, gtype)
    model = piegpu.load_model(path, verbose=False, kv_dtype="f32")  # exact KV: the weights' error alone
    try:
        got = model.logits(ids)
    finally:
        model.close()
    exact = float(np.abs(got - gguf_reference(path, ids)).max())
    err = float(np.abs(got - want).max())
    types = sorted(set(used.values()))
    if gtype == "F32":
        tol = 1e-3
    else:
        tol = 3 * predicted_error(config, tensors, ids, want, used) + 1e-3
    print(f"{family} {gtype} ({'+'.join(types)}): max abs logit error {err:.4f} (tolerance {tol:.4f}); "
          f"vs numpy on the dequantized file {exact:.1e}")
    assert exact < 2e-4 * max(1.0, float(np.abs(want).max()))
    assert err <= tol


def test_k_quant_models(tmp_path):
    """K-quant blocks in a model: rows of 256 and 512 weights, Q4_K / Q5_K / Q6_K and a Q4_K_M-style mix
    (v and down in Q6_K), against numpy on the dequantized file and on the f32 weights."""
    import piegpu
    from piegpu.model.checkpoint import load_checkpoint, save_checkpoint
    from piegpu.model.config import LlamaConfig
    from piegpu.model.reference import ReferenceModel
    from modeltest_helpers import random_weights
    d = tmp_path / "tiny256"
    d.mkdir()
    cfg = LlamaConfig(vocab_size=320, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=64, rms_norm_eps=1e-5,
                      rope_theta=10000.0, tie_word_embeddings=False, max_position_embeddings=128)
    save_checkpoint(d, cfg, random_weights(cfg, seed=4, scale=0.06), "f32")
    shutil.copy(FIXTURES / "llama3" / "tokenizer.json", d / "tokenizer.json")
    config, tensors = load_checkpoint(d)
    ids = list(range(3, 43))
    ref = ReferenceModel(config, tensors)
    want = ref.forward(ids, ref.new_cache())
    mixes = {"Q4_K": "Q4_K", "Q5_K": "Q5_K", "Q6_K": "Q6_K",
             "Q4_K_M": lambda name: "Q6_K" if ("v_proj" in name or "down_proj" in name or "lm_head" in name)
             else "Q4_K"}
    for label, qtype in mixes.items():
        path = tmp_path / f"{label}.gguf"
        used = write_checkpoint_gguf(d, path, qtype)
        assert set(used.values()) <= {"Q4_K", "Q5_K", "Q6_K"}  # every matrix a K-quant, natively read
        model = piegpu.load_model(path, verbose=False, kv_dtype="f32")
        try:
            got = model.logits(ids)
            fmts = {L.qkv.fmt for L in model.gpu.layers}
        finally:
            model.close()
        exact = float(np.abs(got - gguf_reference(path, ids)).max())
        err = float(np.abs(got - want).max())
        tol = 3 * predicted_error(config, tensors, ids, want, used) + 1e-3
        print(f"{label}: qkv {sorted(fmts)}; max abs logit error {err:.4f} (tolerance {tol:.4f}); "
              f"vs numpy on the dequantized file {exact:.1e}")
        assert exact < 2e-4 * max(1.0, float(np.abs(want).max()))
        assert err <= tol
