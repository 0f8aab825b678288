"""Checkpoint save/load: round trips in f32/f16/bf16, shards, and messages for damaged input."""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest
from modeltest_helpers import random_weights, tiny_config

from piegpu.errors import ModelError
from piegpu.model import safetensors_io as st
from piegpu.model.checkpoint import INDEX_NAME, expected_shapes, load_checkpoint, save_checkpoint
from piegpu.model.manifest import verify_manifest, write_manifest


@pytest.fixture
def saved(tmp_path):
    config = tiny_config()
    weights = random_weights(config)
    save_checkpoint(tmp_path, config, weights, "f32")
    return tmp_path, config, weights


def test_f32_round_trip_is_exact(saved):
    model_dir, config, weights = saved
    config2, loaded = load_checkpoint(model_dir)
    assert config2 == config
    assert set(loaded) == set(expected_shapes(config))
    for name, w in weights.items():
        assert loaded[name].dtype == np.float32
        np.testing.assert_array_equal(loaded[name], w)


def test_untied_checkpoint_has_lm_head(tmp_path):
    config = tiny_config(tie_word_embeddings=False)
    weights = random_weights(config)
    save_checkpoint(tmp_path, config, weights)
    _, loaded = load_checkpoint(tmp_path)
    np.testing.assert_array_equal(loaded["lm_head.weight"], weights["lm_head.weight"])


@pytest.mark.parametrize("dtype, raw_dtype, tol", [("f16", np.float16, 1e-3), ("bf16", np.uint16, 8e-3)])
def test_half_precision_round_trip(tmp_path, dtype, raw_dtype, tol):
    config = tiny_config()
    weights = random_weights(config)
    save_checkpoint(tmp_path, config, weights, dtype)
    _, loaded = load_checkpoint(tmp_path)
    _, raw = load_checkpoint(tmp_path, raw=True)
    for name, w in weights.items():
        assert loaded[name].dtype == np.float32 and raw[name].dtype == raw_dtype
        np.testing.assert_allclose(loaded[name], w, rtol=tol, atol=tol)


def test_bf16_rounds_to_nearest_even_and_keeps_specials():
    x = np.array([1.0, 1.00390625, 1.01171875, -2.5, np.inf, -np.inf, 3.0e38, 1e-40], dtype=np.float32)
    bits = st.from_float32(x, "BF16")
    back = st.to_float32(bits, "BF16")
    # 1 + 2^-8 is a tie between 1 and 1 + 2^-7: even mantissa (1.0) wins; 1 + 3*2^-8 ties up to 1 + 2^-6.
    np.testing.assert_array_equal(back[:4], [1.0, 1.0, 1.015625, -2.5])
    assert np.isposinf(back[4]) and np.isneginf(back[5])
    nan = st.to_float32(st.from_float32(np.array([np.nan], np.float32), "BF16"), "BF16")
    assert np.isnan(nan[0])


def test_files_interoperate_with_the_safetensors_package(saved):
    from safetensors.numpy import load_file, save_file

    model_dir, config, weights = saved
    theirs = load_file(str(model_dir / "model.safetensors"))
    for name, w in weights.items():
        np.testing.assert_array_equal(theirs[name], w)
    # ...and the other direction, in f16.
    save_file({k: v.astype(np.float16) for k, v in weights.items()}, str(model_dir / "model.safetensors"))
    _, loaded = load_checkpoint(model_dir)
    for name, w in weights.items():
        np.testing.assert_array_equal(loaded[name], w.astype(np.float16).astype(np.float32))


def test_sharded_round_trip(tmp_path):
    config = tiny_config()
    weights = random_weights(config)
    written = save_checkpoint(tmp_path, config, weights, "f32", max_shard_bytes=8000)
    shards = sorted(p.name for p in tmp_path.glob("*.safetensors"))
    assert len(shards) > 2 and (tmp_path / INDEX_NAME) in written
    assert not (tmp_path / "model.safetensors").exists()
    _, loaded = load_checkpoint(tmp_path)
    for name, w in weights.items():
        np.testing.assert_array_equal(loaded[name], w)
    # A shard that the index lists but that is gone:
    os.unlink(tmp_path / shards[1])
    with pytest.raises(ModelError, match="shard listed in") as e:
        load_checkpoint(tmp_path)
    assert shards[1] in str(e.value)


def test_missing_weights_file(tmp_path):
    config = tiny_config()
    (tmp_path / "config.json").write_text(config.to_json())
    with pytest.raises(ModelError, match="no weights found") as e:
        load_checkpoint(tmp_path)
    assert str(tmp_path) in str(e.value)


def test_missing_directory_and_config(tmp_path):
    with pytest.raises(ModelError, match="model directory not found"):
        load_checkpoint(tmp_path / "nope")
    with pytest.raises(ModelError, match="config file not found"):
        load_checkpoint(tmp_path)


def test_truncated_file_names_file_and_tensor(saved):
    model_dir, config, _ = saved
    path = model_dir / "model.safetensors"
    entries = st.read_header(path)
    last = max(entries.values(), key=lambda e: e.offset)
    with open(path, "r+b") as f:
        f.truncate(last.offset + last.nbytes - 10)
    with pytest.raises(ModelError, match="truncated") as e:
        load_checkpoint(model_dir)
    assert str(path) in str(e.value) and repr(last.name) in str(e.value)


def test_truncated_inside_header(saved):
    model_dir, _, _ = saved
    path = model_dir / "model.safetensors"
    with open(path, "r+b") as f:
        f.truncate(40)
    with pytest.raises(ModelError, match="corrupt safetensors header") as e:
        load_checkpoint(model_dir)
    assert str(path) in str(e.value)
    with open(path, "r+b") as f:
        f.truncate(3)
    with pytest.raises(ModelError, match="no header"):
        load_checkpoint(model_dir)


def test_corrupt_header_json(saved):
    model_dir, _, _ = saved
    path = model_dir / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[8:12] = b"\xff\xfe{["
    path.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="corrupt safetensors header") as e:
        load_checkpoint(model_dir)
    assert str(path) in str(e.value)


def test_header_size_disagrees_with_shape(saved):
    model_dir, _, _ = saved
    path = model_dir / "model.safetensors"
    data = path.read_bytes()
    (hlen,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + hlen])
    header["model.norm.weight"]["shape"] = [25]  # 24 floats stored
    new = json.dumps(header, separators=(",", ":")).encode()
    assert len(new) <= hlen
    new += b" " * (hlen - len(new))
    path.write_bytes(data[:8] + new + data[8 + hlen :])
    with pytest.raises(ModelError, match="corrupt") as e:
        load_checkpoint(model_dir)
    assert "'model.norm.weight'" in str(e.value) and str(path) in str(e.value)


def test_wrong_shape_names_file_tensor_and_expected_shape(tmp_path):
    config = tiny_config()
    weights = random_weights(config)
    weights["model.layers.1.mlp.up_proj.weight"] = weights["model.layers.1.mlp.up_proj.weight"][:-1]
    triples = [(n, st.from_float32(w, "F32"), "F32") for n, w in weights.items()]
    st.write_file(tmp_path / "model.safetensors", triples)
    (tmp_path / "config.json").write_text(config.to_json())
    with pytest.raises(ModelError) as e:
        load_checkpoint(tmp_path)
    msg = str(e.value)
    assert str(tmp_path / "model.safetensors") in msg
    assert "'model.layers.1.mlp.up_proj.weight'" in msg and "[39, 24]" in msg and "[40, 24]" in msg


def test_config_that_does_not_match_weights(saved):
    model_dir, config, _ = saved
    (model_dir / "config.json").write_text(tiny_config(intermediate_size=44).to_json())
    with pytest.raises(ModelError, match="do not belong together"):
        load_checkpoint(model_dir)


def test_missing_tensor_names_it(tmp_path):
    config = tiny_config()
    weights = random_weights(config)
    del weights["model.layers.0.self_attn.k_proj.weight"]
    st.write_file(tmp_path / "model.safetensors", [(n, w, "F32") for n, w in weights.items()])
    (tmp_path / "config.json").write_text(config.to_json())
    with pytest.raises(ModelError, match="missing") as e:
        load_checkpoint(tmp_path)
    assert "'model.layers.0.self_attn.k_proj.weight'" in str(e.value)
    assert str(tmp_path / "model.safetensors") in str(e.value)


def test_extra_layer_and_bias_are_rejected_but_harmless_extras_ignored(tmp_path):
    config = tiny_config()
    weights = random_weights(config)
    base = [(n, w, "F32") for n, w in weights.items()]
    (tmp_path / "config.json").write_text(config.to_json())

    harmless = base + [("model.layers.0.self_attn.rotary_emb.inv_freq", np.ones(2, np.float32), "F32"),
                       ("lm_head.weight", weights["model.embed_tokens.weight"], "F32")]
    st.write_file(tmp_path / "model.safetensors", harmless)
    load_checkpoint(tmp_path)

    extra_layer = base + [("model.layers.2.input_layernorm.weight", np.ones(24, np.float32), "F32")]
    st.write_file(tmp_path / "model.safetensors", extra_layer)
    with pytest.raises(ModelError, match="num_hidden_layers=2") as e:
        load_checkpoint(tmp_path)
    assert "'model.layers.2.input_layernorm.weight'" in str(e.value)

    bias = base + [("model.layers.0.self_attn.q_proj.bias", np.ones(24, np.float32), "F32")]
    st.write_file(tmp_path / "model.safetensors", bias)
    with pytest.raises(ModelError, match="bias"):
        load_checkpoint(tmp_path)


def test_unsupported_architecture_in_checkpoint(saved):
    model_dir, config, _ = saved
    data = json.loads((model_dir / "config.json").read_text())
    data["architectures"] = ["FalconForCausalLM"]
    (model_dir / "config.json").write_text(json.dumps(data))
    with pytest.raises(ModelError, match="FalconForCausalLM") as e:
        load_checkpoint(model_dir)
    assert str(model_dir / "config.json") in str(e.value)


def test_integer_weights_are_rejected_with_tensor_name(tmp_path):
    config = tiny_config()
    (tmp_path / "config.json").write_text(config.to_json())
    weights = random_weights(config)
    body = [(n, w, "F32") for n, w in weights.items() if n != "model.norm.weight"]
    st.write_file(tmp_path / "model.safetensors", body)
    # Patch the remaining tensor in as I8 by hand: our writer refuses non-float dtypes.
    path = tmp_path / "model.safetensors"
    data = path.read_bytes()
    (hlen,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + hlen])
    end = max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
    header["model.norm.weight"] = {"dtype": "I8", "shape": [24], "data_offsets": [end, end + 24]}
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    path.write_bytes(struct.pack("<Q", len(hb)) + hb + data[8 + hlen :] + bytes(24))
    with pytest.raises(ModelError, match="dtype I8") as e:
        load_checkpoint(tmp_path)
    assert "'model.norm.weight'" in str(e.value)


def test_manifest_detects_corruption(saved):
    model_dir, _, _ = saved
    write_manifest(model_dir, ["config.json", "model.safetensors"])
    assert verify_manifest(model_dir)
    path = model_dir / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(1, 1))  # a different stamp even on coarse-clock file systems
    with pytest.raises(ModelError, match="sha256") as e:
        load_checkpoint(model_dir)
    assert str(path) in str(e.value) and "re-prepare" in str(e.value)
    # Truncation is caught by size before hashing.
    with open(path, "r+b") as f:
        f.truncate(100)
    with pytest.raises(ModelError, match="truncated"):
        verify_manifest(model_dir)


def test_save_refuses_incomplete_or_misshapen_tensors(tmp_path):
    config = tiny_config()
    weights = random_weights(config)
    bad = dict(weights)
    del bad["model.norm.weight"]
    with pytest.raises(ModelError, match="'model.norm.weight' is missing"):
        save_checkpoint(tmp_path, config, bad)
    bad = {**weights, "model.norm.weight": np.ones(5, np.float32)}
    with pytest.raises(ModelError, match=r"shape \[5\]"):
        save_checkpoint(tmp_path, config, bad)
    with pytest.raises(ModelError, match="unsupported weight dtype"):
        save_checkpoint(tmp_path, config, weights, "int8")
    assert not list(tmp_path.iterdir())
