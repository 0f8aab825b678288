"""Config parsing cannot silently change the math: both transformers config styles read the same, and
every key that would change the computation and is not implemented is a ModelError naming the file,
the key, the value and what is supported."""

from __future__ import annotations

import json

import numpy as np
import pytest

from piegpu.errors import ModelError
from piegpu.model.config import LlamaConfig
from piegpu.model.rope import Rope, inv_freq

BASE = {
    "architectures": ["LlamaForCausalLM"], "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5,
    "max_position_embeddings": 512, "bos_token_id": 1, "eos_token_id": 2,
}
LLAMA3 = {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def load(tmp_path, **changes):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**BASE, **changes}))
    return LlamaConfig.from_file(path), path


def refused(tmp_path, needles, **changes):
    with pytest.raises(ModelError) as e:
        load(tmp_path, **changes)
    msg = str(e.value)
    assert str(tmp_path / "config.json") in msg, msg
    for n in needles:
        assert n in msg, (n, msg)
    assert "supported" in msg, msg
    return msg


# ---- both config styles ----------------------------------------------------------------------

def test_transformers4_and_5_styles_read_the_same(tmp_path):
    v4, _ = load(tmp_path, rope_theta=500000.0, rope_scaling={"rope_type": "llama3", **LLAMA3})
    v5, _ = load(tmp_path, rope_parameters={"rope_theta": 500000.0, "rope_type": "llama3", **LLAMA3})
    assert v4.rope == v5.rope and v4.rope.type == "llama3" and v4.rope_theta == 500000.0
    plain4, _ = load(tmp_path, rope_theta=100000.0)
    plain5, _ = load(tmp_path, rope_parameters={"rope_theta": 100000.0, "rope_type": "default"})
    assert plain4.rope == plain5.rope == Rope(100000.0)


def test_transformers5_rope_parameters_are_not_ignored(tmp_path):
    # the bug the issue reports: rope_parameters read as nothing -> theta 10000, no scaling
    c, _ = load(tmp_path, rope_parameters={"rope_theta": 1000000.0, "rope_type": "default"})
    assert c.rope_theta == 1000000.0


def test_legacy_type_key_and_linear_scaling(tmp_path):
    c, _ = load(tmp_path, rope_scaling={"type": "linear", "factor": 2.0})
    assert c.rope.type == "linear"
    np.testing.assert_allclose(inv_freq(c.rope, 16), inv_freq(Rope(), 16) / 2, rtol=1e-6)


def test_llama3_inv_freq_matches_transformers_formula():
    # values from transformers' _compute_llama3_parameters for head_dim 64, theta 500000, factor 32
    f = inv_freq(Rope(500000.0, "llama3", tuple(sorted(LLAMA3.items()))), 64)
    base = inv_freq(Rope(500000.0), 64)
    wavelen = 2 * np.pi / base
    assert np.allclose(f[wavelen < 8192 / 4], base[wavelen < 8192 / 4])  # high frequencies unchanged
    assert np.allclose(f[wavelen > 8192], base[wavelen > 8192] / 32)  # low frequencies divided by factor
    mid = (wavelen >= 2048) & (wavelen <= 8192)
    assert mid.any() and np.all(f[mid] < base[mid]) and np.all(f[mid] > base[mid] / 32)


def test_round_trip_keeps_rope_and_windows(tmp_path):
    c, _ = load(tmp_path, rope_parameters={"rope_theta": 500000.0, "rope_type": "llama3", **LLAMA3})
    assert LlamaConfig.from_dict(c.to_dict()) == c
    q, _ = load(tmp_path, architectures=["Qwen2ForCausalLM"], use_sliding_window=True, sliding_window=16,
                max_window_layers=1)
    assert q.layer_windows == (0, 16, 16) and LlamaConfig.from_dict(q.to_dict()) == q


def test_qwen_sliding_window_only_when_used(tmp_path):
    off, _ = load(tmp_path, architectures=["Qwen2ForCausalLM"], use_sliding_window=False, sliding_window=16)
    assert off.layer_windows == ()
    types, _ = load(tmp_path, architectures=["Qwen3ForCausalLM"], use_sliding_window=True, sliding_window=8,
                    layer_types=["sliding_attention", "full_attention", "sliding_attention"])
    assert types.layer_windows == (8, 0, 8)


def test_llama_ignores_sliding_window_as_transformers_does(tmp_path):
    c, _ = load(tmp_path, sliding_window=16)
    assert c.layer_windows == ()


# ---- each math-changing key that is not implemented: a ModelError naming file, key, value, support ----

@pytest.mark.parametrize("key, value", [
    ("mlp_bias", True),
    ("partial_rotary_factor", 0.5),
    ("attn_logit_softcapping", 50.0),
    ("final_logit_softcapping", 30.0),
    ("query_pre_attn_scalar", 256),
    ("quantization_config", {"quant_method": "gptq", "bits": 4}),
    ("attention_chunk_size", 8192),
    ("no_rope_layers", [1, 1, 0]),
    ("use_qk_norm", True),
    ("logits_scaling", 8.0),
    ("embedding_multiplier", 12.0),
    ("residual_multiplier", 0.22),
    ("attention_multiplier", 0.015625),
    ("num_experts", 8),
    ("num_local_experts", 8),
    ("hidden_activation", "gelu_pytorch_tanh"),
])
def test_unimplemented_key_is_refused(tmp_path, key, value):
    refused(tmp_path, [key, repr(value)], **{key: value})


def test_neutral_values_of_those_keys_load(tmp_path):
    c, _ = load(tmp_path, mlp_bias=False, partial_rotary_factor=1.0, attn_logit_softcapping=None,
                quantization_config=None, num_experts=0, logits_scaling=1.0, use_qk_norm=False)
    assert c.rope == Rope()


def test_hidden_act_refused(tmp_path):
    refused(tmp_path, ["hidden_act", "'gelu'", "silu"], hidden_act="gelu")


@pytest.mark.parametrize("arch", ["LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM"])
def test_attention_bias_refused_where_not_implemented(tmp_path, arch):
    refused(tmp_path, ["attention_bias", "True", arch, "Qwen2ForCausalLM"], architectures=[arch], attention_bias=True)


@pytest.mark.parametrize("rtype", ["yarn", "dynamic", "longrope", "su", "ntk"])
def test_unsupported_rope_type_refused_in_both_styles(tmp_path, rtype):
    refused(tmp_path, ["rope_scaling.rope_type", repr(rtype), "llama3"],
            rope_scaling={"rope_type": rtype, "factor": 4.0})
    refused(tmp_path, ["rope_parameters.rope_type", repr(rtype), "llama3"],
            rope_parameters={"rope_type": rtype, "rope_theta": 10000.0, "factor": 4.0})


@pytest.mark.parametrize("field, value", [("attention_factor", 1.2), ("beta_fast", 32), ("mscale", 0.7),
                                          ("partial_rotary_factor", 0.25)])
def test_unknown_rope_field_refused(tmp_path, field, value):
    refused(tmp_path, [f"rope_parameters.{field}", repr(value), "llama3"],
            rope_parameters={"rope_theta": 500000.0, "rope_type": "llama3", **LLAMA3, field: value})


def test_missing_llama3_field_refused(tmp_path):
    fields = {k: v for k, v in LLAMA3.items() if k != "low_freq_factor"}
    with pytest.raises(ModelError, match="lacks 'low_freq_factor'"):
        load(tmp_path, rope_scaling={"rope_type": "llama3", **fields})


def test_conflicting_styles_refused(tmp_path):
    with pytest.raises(ModelError, match="disagree"):
        load(tmp_path, rope_theta=10000.0, rope_parameters={"rope_theta": 500000.0, "rope_type": "default"})
    with pytest.raises(ModelError, match="disagree"):
        load(tmp_path, rope_scaling={"rope_type": "linear", "factor": 2.0},
             rope_parameters={"rope_theta": 10000.0, "rope_type": "default"})


def test_per_layer_type_rope_refused(tmp_path):
    refused(tmp_path, ["rope_parameters", "per layer type"],
            rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                             "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}})


def test_bad_layer_types_refused(tmp_path):
    refused(tmp_path, ["layer_types[1]", "'chunked_attention'"], architectures=["Qwen3ForCausalLM"],
            use_sliding_window=True, sliding_window=8,
            layer_types=["full_attention", "chunked_attention", "full_attention"])
    with pytest.raises(ModelError, match="sliding_window is not in effect"):
        load(tmp_path, architectures=["Qwen3ForCausalLM"],
             layer_types=["full_attention", "sliding_attention", "full_attention"])


# ---- Gemma 3: RoPE per layer type, its own defaults and keys ---------------------------------

GEMMA = {**BASE, "architectures": ["Gemma3ForCausalLM"], "num_hidden_layers": 6, "head_dim": 32,
         "query_pre_attn_scalar": 24, "sliding_window": 8, "hidden_activation": "gelu_pytorch_tanh"}


def test_gemma3_both_rope_styles_read_the_same(tmp_path):
    v4 = LlamaConfig.from_dict({**GEMMA, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
                                "rope_scaling": {"rope_type": "linear", "factor": 8.0}})
    v5 = LlamaConfig.from_dict({**GEMMA, "rope_parameters": {
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}})
    assert v4 == v5
    assert v4.rope == Rope(1000000.0, "linear", (("factor", 8.0),)) and v4.rope_local == Rope(10000.0)
    # sliding_window_pattern 6 (the default): layers 0-4 local, layer 5 global
    assert v4.layer_windows == (8, 8, 8, 8, 8, 0)
    assert v4.rope_for(0) == Rope(10000.0) and v4.rope_for(5) == v4.rope
    assert v4.attention_scale == 24 ** -0.5
    assert LlamaConfig.from_dict(v4.to_dict()) == v4


def test_gemma3_defaults_are_gemmas(tmp_path):
    data = {k: v for k, v in GEMMA.items() if k not in ("query_pre_attn_scalar", "sliding_window", "head_dim",
                                                          "rms_norm_eps")}
    c = LlamaConfig.from_dict(data)
    assert c.query_pre_attn_scalar == 256 and c.head_dim == 256 and c.window(0) == 4096 and c.rms_norm_eps == 1e-6
    assert c.rope_theta == 1e6 and c.rope_local == Rope(1e4)


@pytest.mark.parametrize("key, value, needle", [
    ("hidden_activation", "gelu", "gelu_pytorch_tanh"),
    ("use_bidirectional_attention", True, "use_bidirectional_attention"),
    ("final_logit_softcapping", 30.0, "final_logit_softcapping"),
    ("attn_logit_softcapping", 50.0, "attn_logit_softcapping"),
])
def test_gemma3_unimplemented_keys_refused(tmp_path, key, value, needle):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**GEMMA, key: value}))
    with pytest.raises(ModelError) as e:
        LlamaConfig.from_file(path)
    assert str(path) in str(e.value) and needle in str(e.value) and "supported" in str(e.value)


def test_gemma3_unsupported_rope_of_one_layer_type_refused(tmp_path):
    with pytest.raises(ModelError, match=r"rope_parameters.sliding_attention.rope_type 'yarn'"):
        LlamaConfig.from_dict({**GEMMA, "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0}}}, source="g/config.json")


# ---- the released configs the issue names load with the right settings --------------------------

REAL = {
    "Llama-3.2-1B-Instruct": {  # transformers 4 style
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 128000,
        "eos_token_id": [128001, 128008, 128009], "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
        "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": False,
        "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
        "pretraining_tp": 1, "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_cache": True,
        "vocab_size": 128256},
    "Qwen2.5-0.5B-Instruct": {
        "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645,
        "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02, "intermediate_size": 4864,
        "max_position_embeddings": 32768, "max_window_layers": 21, "model_type": "qwen2", "num_attention_heads": 14,
        "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
        "sliding_window": 32768, "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_cache": True,
        "use_sliding_window": False, "vocab_size": 151936},
    "Qwen3-0.6B": {
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 151643,
        "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024, "initializer_range": 0.02,
        "intermediate_size": 3072, "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
        "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
        "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936},
    "gemma-3-270m-it": {
        "_sliding_window_pattern": 6, "architectures": ["Gemma3ForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "attn_logit_softcapping": None, "bos_token_id": 2, "eos_token_id": 1,
        "final_logit_softcapping": None, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 640,
        "initializer_range": 0.02, "intermediate_size": 2048,
        "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 3, "max_position_embeddings": 32768,
        "model_type": "gemma3_text", "num_attention_heads": 4, "num_hidden_layers": 18, "num_key_value_heads": 1,
        "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000.0,
        "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": 512, "torch_dtype": "bfloat16",
        "use_bidirectional_attention": False, "use_cache": True, "vocab_size": 262144},
    "Mistral-7B-v0.1": {
        "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
        "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768,
        "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
        "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": 32000},
}


def test_released_configs_load_with_their_settings():
    c = {name: LlamaConfig.from_dict(data, source=name) for name, data in REAL.items()}
    llama = c["Llama-3.2-1B-Instruct"]
    assert llama.rope.type == "llama3" and llama.rope_theta == 500000.0 and llama.tie_word_embeddings
    assert llama.eos_token_ids == [128001, 128008, 128009] and llama.layer_windows == ()
    qwen2 = c["Qwen2.5-0.5B-Instruct"]
    assert qwen2.family.qkv_bias and qwen2.layer_windows == () and qwen2.rope_theta == 1e6
    qwen3 = c["Qwen3-0.6B"]
    assert qwen3.family.qk_norm and qwen3.q_size == 2048 != qwen3.hidden_size and qwen3.layer_windows == ()
    gemma = c["gemma-3-270m-it"]
    assert gemma.layer_windows == ((512,) * 5 + (0,)) * 3 and gemma.rope_for(0).theta == 1e4
    assert gemma.rope_for(5).theta == 1e6 and gemma.attention_scale == 1 / 16 and gemma.num_key_value_heads == 1
    mistral = c["Mistral-7B-v0.1"]
    assert mistral.layer_windows == (4096,) * 32
    for cfg in c.values():
        assert LlamaConfig.from_dict(cfg.to_dict()) == cfg
