"""GGUF conversion on tiny synthetic GGUF files: Q/K un-permutation, raw blocks, atomicity, caching."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import gguf
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs
from modeltest_helpers import gguf_tiny_config, random_weights, write_tiny_gguf

import piegpu.model.gguf_convert as gc
from piegpu.errors import ModelError
from piegpu.model.checkpoint import load_checkpoint
from piegpu.model.default import _prepare_lock, prepare_gguf_cached
from piegpu.model.manifest import MANIFEST_VERSION, sha256_file, verify_manifest
from piegpu.model.tokenizer import SMOLLM2_CHAT_TEMPLATE, load_chat_template, load_tokenizer

REPO = Path(__file__).resolve().parents[2]


# -- the Q/K permutation ---------------------------------------------------------


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Verbatim from llama.cpp's convert_hf_to_gguf.py (LlamaModel.permute)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@settings(max_examples=60, deadline=None)
@given(n_head=hs.integers(1, 12), half=hs.integers(1, 40), cols=hs.integers(1, 9), seed=hs.integers(0, 2**31))
def test_unpermute_inverts_llama_cpp_permute_exactly(n_head, half, cols, seed):
    w = np.random.default_rng(seed).standard_normal((n_head * 2 * half, cols)).astype(np.float32)
    permuted = llama_cpp_permute(w, n_head)
    np.testing.assert_array_equal(gc.permute_qk_rows(w, n_head), permuted)
    np.testing.assert_array_equal(gc.unpermute_qk_rows(permuted, n_head), w)
    np.testing.assert_array_equal(gc.permute_qk_rows(gc.unpermute_qk_rows(w, n_head), n_head), w)


def test_unpermuted_rows_turn_adjacent_pair_rope_into_rotate_half():
    # llama.cpp rotates adjacent pairs (x0,x1),(x2,x3).. of q = W_gguf h; HF rotates
    # (x_i, x_{i+d/2}) of q = W_hf h. The permutation is exactly what makes them agree.
    rng = np.random.default_rng(1)
    n_head, d, pos, theta = 3, 8, 5, 10000.0
    w_hf = rng.standard_normal((n_head * d, 7))
    h = rng.standard_normal(7)
    angles = pos / theta ** (np.arange(0, d, 2) / d)
    cos, sin = np.cos(angles), np.sin(angles)

    q = (gc.permute_qk_rows(w_hf, n_head) @ h).reshape(n_head, d // 2, 2)
    adjacent = np.stack([q[..., 0] * cos - q[..., 1] * sin, q[..., 0] * sin + q[..., 1] * cos], -1).reshape(-1)

    q = (w_hf @ h).reshape(n_head, 2, d // 2)
    halves = np.concatenate([q[:, 0] * cos - q[:, 1] * sin, q[:, 0] * sin + q[:, 1] * cos], -1).reshape(-1)
    np.testing.assert_allclose(gc.unpermute_qk_rows(adjacent, n_head), halves, rtol=1e-12)


# -- conversion ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_gguf")
    config = gguf_tiny_config()
    weights = random_weights(config, seed=3)
    paths = {q: write_tiny_gguf(d / f"tiny-{q}.gguf", config, weights, q) for q in ("F32", "Q8_0", "Q4_1")}
    return config, weights, paths


def test_f32_gguf_converts_back_to_the_exact_hf_weights(tiny, tmp_path, capsys):
    config, weights, paths = tiny
    out = gc.convert_gguf(paths["F32"], tmp_path / "m")
    err = capsys.readouterr().err
    assert "[3/5] dequantizing" in err and "tensor 20/20" in err
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json", "manifest.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    config2, loaded = load_checkpoint(out)
    assert config2 == config
    for name, w in weights.items():
        np.testing.assert_array_equal(loaded[name], w, err_msg=name)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format_version"] == MANIFEST_VERSION and len(manifest["files"]) == 4
    assert load_chat_template(out) == SMOLLM2_CHAT_TEMPLATE
    assert load_tokenizer(out).get_vocab_size() == config.vocab_size


@pytest.mark.parametrize("quant", ["Q8_0", "Q4_1"])
def test_quantized_gguf_converts_to_dequantized_hf_weights(tiny, tmp_path, quant):
    config, weights, paths = tiny
    qtype = gguf.GGMLQuantizationType[quant]
    out = gc.convert_gguf(paths[quant], tmp_path / "m", quiet=True)
    _, loaded = load_checkpoint(out)
    for name, w in weights.items():
        # Blocks never straddle rows, so quantizing permuted rows = quantizing the rows.
        want = w if w.ndim == 1 else gguf.quants.dequantize(gguf.quants.quantize(w, qtype), qtype)
        np.testing.assert_array_equal(loaded[name], want, err_msg=name)


def decode_q4_1(rows: np.ndarray, n: int) -> np.ndarray:
    """Q4_1 as read_gguf_raw's docstring describes it."""
    blocks = rows.reshape(rows.shape[0], n // 32, 20)
    d = blocks[..., 0:2].copy().view(np.float16).astype(np.float32)
    m = blocks[..., 2:4].copy().view(np.float16).astype(np.float32)
    qs = blocks[..., 4:20]
    nibbles = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.float32)
    return (d * nibbles + m).reshape(rows.shape[0], n)


def decode_q8_0(rows: np.ndarray, n: int) -> np.ndarray:
    """Q8_0 as read_gguf_raw's docstring describes it."""
    blocks = rows.reshape(rows.shape[0], n // 32, 34)
    d = blocks[..., 0:2].copy().view(np.float16).astype(np.float32)
    q = blocks[..., 2:34].copy().view(np.int8).astype(np.float32)
    return (d * q).reshape(rows.shape[0], n)


@pytest.mark.parametrize("quant, decode", [("Q4_1", decode_q4_1), ("Q8_0", decode_q8_0)])
def test_raw_blocks_decode_per_docstring_to_converted_weights(tiny, tmp_path, quant, decode):
    config, _, paths = tiny
    raw = gc.read_gguf_raw(paths[quant])
    _, loaded = load_checkpoint(gc.convert_gguf(paths[quant], tmp_path / "m", quiet=True))
    assert set(raw) == set(loaded)
    for name, r in raw.items():
        assert r.shape == loaded[name].shape and r.data.dtype == np.uint8
        if r.ggml_type == "F32":
            np.testing.assert_array_equal(r.data.view(np.float32).reshape(r.shape), loaded[name])
        else:
            assert r.ggml_type == quant
            np.testing.assert_array_equal(decode(r.data, r.shape[-1]), loaded[name], err_msg=name)


def test_interrupted_conversion_leaves_nothing(tiny, tmp_path, monkeypatch):
    _, _, paths = tiny

    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(gc, "save_checkpoint", boom)
    with pytest.raises(KeyboardInterrupt):
        gc.convert_gguf(paths["F32"], tmp_path / "m", quiet=True)
    assert list(tmp_path.iterdir()) == []


def test_existing_target_needs_overwrite(tiny, tmp_path):
    _, _, paths = tiny
    out = gc.convert_gguf(paths["F32"], tmp_path / "m", quiet=True)
    with pytest.raises(ModelError, match="already exists"):
        gc.convert_gguf(paths["F32"], out, quiet=True)
    (out / "model.safetensors").write_bytes(b"junk")
    gc.convert_gguf(paths["Q8_0"], out, quiet=True, overwrite=True)
    assert verify_manifest(out)
    assert [p.name for p in tmp_path.iterdir()] == ["m"]


def test_losing_the_publish_race_keeps_the_winner(tiny, tmp_path, monkeypatch):
    _, _, paths = tiny
    target = tmp_path / "m"
    real = gc._convert_into

    def slow_convert(gguf_path, tmp, quiet, source_info):
        real(gguf_path, tmp, quiet, source_info)
        real(gguf_path, tmp.with_name("winner"), quiet, source_info)
        os.rename(tmp.with_name("winner"), target)  # another process publishes first

    monkeypatch.setattr(gc, "_convert_into", slow_convert)
    assert gc.convert_gguf(paths["F32"], target, quiet=True) == target
    assert verify_manifest(target)
    assert [p.name for p in tmp_path.iterdir()] == ["m"]


def test_damaged_and_foreign_gguf_files(tiny, tmp_path):
    _, _, paths = tiny
    data = paths["F32"].read_bytes()
    bad = tmp_path / "trunc.gguf"
    bad.write_bytes(data[: len(data) // 3])
    with pytest.raises(ModelError, match="not a readable GGUF") as e:
        gc.convert_gguf(bad, tmp_path / "m", quiet=True)
    assert str(bad) in str(e.value)
    with pytest.raises(ModelError, match="GGUF file not found"):
        gc.read_gguf_raw(tmp_path / "missing.gguf")

    w = gguf.GGUFWriter(str(tmp_path / "gpt2.gguf"), "gpt2")
    w.add_tensor("token_embd.weight", np.zeros((4, 32), np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    with pytest.raises(ModelError, match="'gpt2' is not supported"):
        gc.convert_gguf(tmp_path / "gpt2.gguf", tmp_path / "m", quiet=True)
    assert not (tmp_path / "m").exists()


def test_unknown_gguf_tensor_name():
    with pytest.raises(ModelError, match="rope_freqs.weight"):
        gc.hf_tensor_name("rope_freqs.weight")
    assert gc.hf_tensor_name("blk.7.ffn_down.weight") == "model.layers.7.mlp.down_proj.weight"


# -- the prepare-once cache ------------------------------------------------------------


def test_prepare_once_then_reuse_then_repair(tiny, tmp_path, monkeypatch, capsys):
    _, _, paths = tiny
    monkeypatch.setenv("PIEGPU_CACHE_DIR", str(tmp_path))
    first = prepare_gguf_cached(paths["F32"], "Tiny")
    assert first.parent == tmp_path / "models" and first.name.startswith("Tiny-")
    assert "preparing Tiny (one time)" in capsys.readouterr().err
    mtime = (first / "model.safetensors").stat().st_mtime_ns

    assert prepare_gguf_cached(paths["F32"], "Tiny") == first
    assert capsys.readouterr().err == ""
    assert (first / "model.safetensors").stat().st_mtime_ns == mtime

    # A corrupt file and a leftover temp dir of a killed conversion (pid 0 is never a live child).
    blob = bytearray((first / "model.safetensors").read_bytes())
    blob[-1] ^= 0x55
    (first / "model.safetensors").write_bytes(bytes(blob))
    os.utime(first / "model.safetensors", ns=(1, 1))
    stale = tmp_path / "models" / f".{first.name}.tmp-999999999-abcd"
    stale.mkdir()
    assert prepare_gguf_cached(paths["F32"], "Tiny", verbose=True) == first
    err = capsys.readouterr().err
    assert "unusable" in err and "sha256" in err and "preparing it again" in err
    assert verify_manifest(first)
    assert not stale.exists()


def test_prepare_waits_for_the_lock_holder(tiny, tmp_path, monkeypatch):
    _, _, paths = tiny
    monkeypatch.setenv("PIEGPU_CACHE_DIR", str(tmp_path))
    target = prepare_gguf_cached(paths["Q8_0"], "Tiny", verbose=False)
    shutil.rmtree(target)
    result = {}
    with _prepare_lock(target):
        t = threading.Thread(target=lambda: result.setdefault("dir", prepare_gguf_cached(paths["Q8_0"], "Tiny", False)))
        t.start()
        time.sleep(0.3)
        assert t.is_alive(), "prepare must wait for the lock"
        # The lock holder prepares it; the waiter must then reuse it rather than convert again.
        gc.convert_gguf(paths["Q8_0"], target, quiet=True, source_info={"gguf_sha256": sha256_file(paths["Q8_0"])})
        stamp = (target / "model.safetensors").stat().st_mtime_ns
    t.join(30)
    assert result["dir"] == target
    assert (target / "model.safetensors").stat().st_mtime_ns == stamp


def test_concurrent_processes_prepare_one_directory(tiny, tmp_path):
    _, _, paths = tiny
    code = (
        "import sys; from piegpu.model.default import prepare_gguf_cached; "
        "print(prepare_gguf_cached(sys.argv[1], 'Tiny', verbose=False))"
    )
    env = {**os.environ, "PIEGPU_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(paths["Q4_1"])], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    dirs = {o.strip() for o, _ in outs}
    assert len(dirs) == 1
    target = Path(dirs.pop())
    assert verify_manifest(target)
    leftovers = [p.name for p in (tmp_path / "models").iterdir()
                 if p.name != target.name and not p.name.endswith(".lock")]
    assert leftovers == []
