"""A GGUF model used in place: metadata and tensors read from the memory-mapped file, nothing written to disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from piegpu.errors import ModelError
from piegpu.model.gguf_file import GgufFile

ROOT = Path(__file__).resolve().parents[2]
# Greedy continuation of "Once upon a time" by the default model, recorded at commit d7e43c4 (before
# the GGUF was used in place, when load_model read an f32 safetensors copy and a packed-weights cache).
GREEDY_BEFORE = [28, 260, 2240, 282, 23324, 27108, 436, 253, 15114, 39228, 28, 351, 25854, 41658, 284, 14055]


def same_as_gguf_reader(path: Path) -> None:
    from gguf import GGUFReader
    fast, ref = GgufFile(path), GGUFReader(path)
    assert set(fast.fields) == {k for k in ref.fields if not k.startswith("GGUF.")}
    for k, f in fast.fields.items():
        assert f.contents() == ref.fields[k].contents(), k
    assert [t.name for t in fast.tensors] == [t.name for t in ref.tensors]
    for a, b in zip(fast.tensors, ref.tensors):
        assert a.tensor_type == b.tensor_type and a.shape.tolist() == b.shape.tolist(), a.name
        assert a.data.dtype == b.data.dtype and a.data.shape == b.data.shape, a.name
        assert np.array_equal(a.data.view(np.uint8), b.data.view(np.uint8)), a.name
        assert np.shares_memory(a.data, fast.map), a.name  # a view of the mapped file, not a copy


def test_reader_equals_gguf_reader_on_the_default_model(default_gguf):
    same_as_gguf_reader(default_gguf)


@pytest.mark.parametrize("quant", ["F32", "Q8_0", "Q4_1"])
def test_reader_equals_gguf_reader_on_tiny_files(tmp_path, quant):
    from modeltest_helpers import gguf_tiny_config, random_weights, write_tiny_gguf
    cfg = gguf_tiny_config()
    same_as_gguf_reader(write_tiny_gguf(tmp_path / "t.gguf", cfg, random_weights(cfg), quant))


def test_damaged_files_are_model_errors(tmp_path, default_gguf):
    with open(default_gguf, "rb") as f:
        data = f.read(8 << 20)  # the metadata (~2 MB) and the first tensors
    for name, blob, want in (("short.gguf", data[:5000], "not a readable GGUF file (ValueError"),
                             ("magic.gguf", b"GGUX" + data[4:], "not a readable GGUF file (ValueError"),
                             ("cut.gguf", data, "ends past the end of the file")):
        (tmp_path / name).write_bytes(blob)
        with pytest.raises(ModelError, match=want.replace("(", r"\(")):
            GgufFile(tmp_path / name)
    with pytest.raises(ModelError, match="not found"):
        GgufFile(tmp_path / "none.gguf")


def test_weights_are_views_of_the_file(default_gguf):
    from piegpu.model.gguf_model import open_gguf_model
    from piegpu.model.weights import weights_from_gguf
    g = open_gguf_model(default_gguf)
    w = weights_from_gguf(g.config, g.tensors)
    mapped = next(iter(g.tensors.values())).data.base
    # q|k|v and gate|up are fused (one copy while laying them out); o, down and the embedding are the file's bytes
    for m in (w.layers[0].o, w.layers[0].down, w.embed):
        assert np.shares_memory(m.data, mapped)
    assert g.chat_template is not None and "<|im_start|>" in g.chat_template


LOAD = """
import json, time
t0 = time.perf_counter()
import piegpu
m = piegpu.load_model(verbose=False)
load_s = time.perf_counter() - t0
ids = m.tokenizer.encode("Once upon a time").ids
ws = m.working_set(64)
logits, toks = m.gpu.forward(ws, ids)[0], []
for _ in range(16):
    toks.append(int(logits.argmax()))
    logits = m.gpu.forward(ws, [toks[-1]])[0]
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the parent (pytest, much bigger)
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"load_s": load_s, "peak_rss_mb": hwm / 1024, "greedy": toks,
                  "kv_mb": m.kv_stats()["bytes_total"] / (1 << 20)}))
"""


def test_default_model_loads_in_place_with_the_same_tokens(tmp_path, default_gguf):
    cache = tmp_path / "cache"
    # a cache left by earlier versions (f32 safetensors copy, packed weights): ignored, never broken by
    old = cache / "models" / "SmolLM2-135M-Instruct-b179c9523d0e"
    old.mkdir(parents=True)
    for name in ("model.safetensors", "gpu-weights.bin", "gpu-weights.json", "config.json", "manifest.json"):
        (old / name).write_bytes(b"{not what it should be")
    env = {**os.environ, "PIEGPU_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", LOAD], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"default model, in place: load {r['load_s']:.2f} s, peak RSS {r['peak_rss_mb']:.0f} MB")
    assert r["greedy"] == GREEDY_BEFORE
    written = [p for p in (cache / "models").rglob("*") if p.is_file() and old not in p.parents]
    assert written == []  # no copy of the model on disk
    big = [p for p in cache.rglob("*") if p.is_file() and p.stat().st_size > 8 << 20]
    assert big == [] or all(old in p.parents for p in big)
    # the f32 conversion this replaces peaked at 839 MB; the KV page pool (two whole contexts by default, a
    # deliberate allocation, zeroed on first use) is not the model's weights
    assert r["peak_rss_mb"] - r["kv_mb"] < 600, r


def test_unsupported_quant_type_names_file_tensor_and_type(tmp_path):
    import gguf
    from modeltest_helpers import gguf_tiny_config, random_weights, write_tiny_gguf
    from piegpu.textgen.model import load_model
    cfg = gguf_tiny_config()
    path = write_tiny_gguf(tmp_path / "t.gguf", cfg, random_weights(cfg), "Q8_0")
    data = bytearray(path.read_bytes())
    f = GgufFile(path)
    # retype blk.0.attn_q.weight (Q8_0, 34-byte blocks) as MXFP4 (17-byte blocks: the tensor just gets shorter)
    name = b"blk.0.attn_q.weight"
    at = data.index(name) + len(name)
    n_dims = int.from_bytes(data[at: at + 4], "little")
    type_at = at + 4 + 8 * n_dims
    assert int.from_bytes(data[type_at: type_at + 4], "little") == gguf.GGMLQuantizationType.Q8_0
    data[type_at: type_at + 4] = int(gguf.GGMLQuantizationType.MXFP4).to_bytes(4, "little")
    bad = tmp_path / "iq4.gguf"
    bad.write_bytes(bytes(data))
    assert f.tensors  # the original parses
    with pytest.raises(ModelError, match=r"iq4.gguf: tensor 'blk.0.attn_q.weight' is MXFP4.*Q4_K.*IQ4_NL.*llama-quantize"):
        load_model(bad, verbose=False)
