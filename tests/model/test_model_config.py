"""LlamaConfig: parsing, HF defaults, round trips and validation messages."""

from __future__ import annotations

import json

import pytest

from piegpu.errors import ModelError
from piegpu.model.config import LlamaConfig

SMOLLM2 = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 49152,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "rms_norm_eps": 1e-5,
    "rope_theta": 100000.0,
    "tie_word_embeddings": True,
    "max_position_embeddings": 8192,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "rope_scaling": None,
    "torch_dtype": "bfloat16",
}


def write_config(tmp_path, data):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


def load_error(tmp_path, data: dict) -> tuple[str, str]:
    """(path, message) of the ModelError that loading config `data` from a file raises."""
    path = write_config(tmp_path, data)
    with pytest.raises(ModelError) as e:
        LlamaConfig.from_file(path)
    return str(path), str(e.value)


def test_smollm2_config_parses_with_derived_head_dim(tmp_path):
    c = LlamaConfig.from_file(write_config(tmp_path, SMOLLM2))
    assert c.head_dim == 64 and c.q_size == 576 and c.kv_size == 192
    assert c.tie_word_embeddings and c.rope_theta == 100000.0 and c.eos_token_ids == [2]


def test_round_trip_through_file(tmp_path):
    c = LlamaConfig.from_dict(SMOLLM2)
    (tmp_path / "config.json").write_text(c.to_json())
    again = LlamaConfig.from_file(tmp_path / "config.json")
    assert again == c
    assert again.to_dict() == c.to_dict()
    assert c.to_dict()["architectures"] == ["LlamaForCausalLM"]


def test_hf_defaults_fill_optional_keys():
    minimal = {k: SMOLLM2[k] for k in ("architectures", "vocab_size", "hidden_size", "intermediate_size",
                                       "num_hidden_layers", "num_attention_heads")}
    c = LlamaConfig.from_dict(minimal)
    assert c.num_key_value_heads == 9  # HF: no GQA unless stated
    assert c.rms_norm_eps == 1e-6 and c.rope_theta == 10000.0 and not c.tie_word_embeddings


def test_eos_list_and_null_bos():
    c = LlamaConfig.from_dict({**SMOLLM2, "eos_token_id": [2, 0], "bos_token_id": None})
    assert c.eos_token_ids == [2, 0] and c.bos_token_id is None
    assert LlamaConfig.from_dict(c.to_dict()) == c


def test_mistral_without_sliding_window_is_accepted():
    c = LlamaConfig.from_dict({**SMOLLM2, "architectures": ["MistralForCausalLM"], "sliding_window": None})
    assert c.architecture == "MistralForCausalLM"
    assert c.to_dict()["model_type"] == "mistral"


def test_mistral_sliding_window_applies_to_every_layer(tmp_path):
    c = LlamaConfig.from_file(write_config(tmp_path, {**SMOLLM2, "architectures": ["MistralForCausalLM"],
                                                      "sliding_window": 4096}))
    assert c.layer_windows == (4096,) * 30 and c.window(7) == 4096
    assert LlamaConfig.from_dict(c.to_dict()) == c


@pytest.mark.parametrize("arch", ["GPT2LMHeadModel", "Gemma3ForConditionalGeneration", "Gemma2ForCausalLM"])
def test_unsupported_architecture_names_file_and_fix(tmp_path, arch):
    path, msg = load_error(tmp_path, {**SMOLLM2, "architectures": [arch]})
    assert path in msg and arch in msg and "LlamaForCausalLM" in msg


def test_hidden_not_divisible_by_heads(tmp_path):
    path, msg = load_error(tmp_path, {**SMOLLM2, "hidden_size": 577})
    assert path in msg and "hidden_size 577" in msg and "num_attention_heads 9" in msg


def test_heads_not_divisible_by_kv_heads(tmp_path):
    path, msg = load_error(tmp_path, {**SMOLLM2, "num_key_value_heads": 4})
    assert path in msg and "num_key_value_heads 4" in msg and "fix the config" in msg


@pytest.mark.parametrize("key", ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                 "num_attention_heads", "architectures"])
def test_missing_key_names_file_key_and_fix(tmp_path, key):
    data = dict(SMOLLM2)
    del data[key]
    path, msg = load_error(tmp_path, data)
    assert path in msg and repr(key) in msg and "add" in msg


@pytest.mark.parametrize("change, needle", [
    ({"rope_scaling": {"type": "llama3", "factor": 8.0}}, "rope_scaling"),
    ({"attention_bias": True}, "attention_bias"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"hidden_size": "576"}, "hidden_size"),
    ({"num_hidden_layers": 0}, "num_hidden_layers"),
    ({"eos_token_id": 50000}, "outside the vocabulary"),
    ({"head_dim": 63}, "odd"),
])
def test_unsupported_or_invalid_values(change, needle):
    with pytest.raises(ModelError, match=needle):
        LlamaConfig.from_dict({**SMOLLM2, **change}, source="x/config.json")


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ModelError, match="config file not found"):
        LlamaConfig.from_file(tmp_path / "config.json")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelError, match="not valid JSON") as e:
        LlamaConfig.from_file(tmp_path / "config.json")
    assert str(tmp_path / "config.json") in str(e.value)
