"""Load and save HF-layout Llama checkpoints: config.json + (sharded) safetensors."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Mapping

import numpy as np

from ..errors import ModelError
from ..paths import atomic_write
from . import safetensors_io as st
from .config import LlamaConfig
from .manifest import verify_manifest

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"

_LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.")


def expected_shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a checkpoint of `config` must hold, with its [out, in] shape."""
    c = config
    h, q, kv, ff = c.hidden_size, c.q_size, c.kv_size, c.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (c.vocab_size, h)}
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (h,)
        shapes[p + "self_attn.q_proj.weight"] = (q, h)
        shapes[p + "self_attn.k_proj.weight"] = (kv, h)
        shapes[p + "self_attn.v_proj.weight"] = (kv, h)
        shapes[p + "self_attn.o_proj.weight"] = (h, q)
        if c.family.qkv_bias:
            shapes.update({p + "self_attn.q_proj.bias": (q,), p + "self_attn.k_proj.bias": (kv,),
                           p + "self_attn.v_proj.bias": (kv,)})
        if c.family.qk_norm:
            shapes.update({p + "self_attn.q_norm.weight": (c.head_dim,), p + "self_attn.k_norm.weight": (c.head_dim,)})
        shapes[p + "post_attention_layernorm.weight"] = (h,)
        for name in (c.family.ffn_norm,) + c.family.output_norms:
            shapes[p + name + ".weight"] = (h,)
        shapes[p + "mlp.gate_proj.weight"] = (ff, h)
        shapes[p + "mlp.up_proj.weight"] = (ff, h)
        shapes[p + "mlp.down_proj.weight"] = (h, ff)
    shapes["model.norm.weight"] = (h,)
    if not c.tie_word_embeddings:
        shapes["lm_head.weight"] = (c.vocab_size, h)
    return shapes


def load_checkpoint(
    model_dir: str | Path, *, raw: bool = False, verify: bool = True
) -> tuple[LlamaConfig, dict[str, np.ndarray]]:
    """Read config.json and the safetensors weights of `model_dir`, checked against the config.

    Tensors come back as float32 arrays keyed by HF name; with `raw=True` in their
    stored dtype (F16 as float16, BF16 as its uint16 bit pattern). When the directory
    has a piegpu manifest.json (a prepared model) its checksums are verified first.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ModelError(
            f"{model_dir}: model directory not found; pass a directory holding config.json "
            "and *.safetensors (or call load_model() with no argument for the default model)"
        )
    if verify:
        verify_manifest(model_dir)
    config = LlamaConfig.from_file(model_dir / "config.json")
    locations = tensor_locations(model_dir)
    _check_names(model_dir, config, locations)

    tensors: dict[str, np.ndarray] = {}
    for name, shape in expected_shapes(config).items():
        path, entry = locations[name]
        if entry.shape != shape:
            raise ModelError(
                f"{path}: tensor {name!r} has shape {list(entry.shape)}, but {model_dir / 'config.json'} "
                f"implies {list(shape)}; the weights and config do not belong together -- fix: use the config.json "
                "that came with these weights"
            )
        tensors[name] = st.read_tensor(path, entry, raw=raw)
    return config, tensors


def tensor_entries(model_dir: str | Path) -> list[st.TensorEntry]:
    """The header entry (name, dtype, shape) of every tensor of a checkpoint directory, no data read."""
    return [entry for _, entry in tensor_locations(Path(model_dir)).values()]


def tensor_locations(model_dir: Path) -> dict[str, tuple[Path, st.TensorEntry]]:
    """Map every tensor name to (file, header entry), via the shard index if there is one."""
    index_path = model_dir / INDEX_NAME
    if index_path.exists():
        files = _files_from_index(index_path)
    elif (model_dir / SINGLE_NAME).exists():
        files = [SINGLE_NAME]
    else:
        files = sorted(p.name for p in model_dir.glob("*.safetensors"))
        if not files:
            raise ModelError(
                f"{model_dir}: no weights found (expected {SINGLE_NAME}, or shards listed in "
                f"{INDEX_NAME}); copy the checkpoint's *.safetensors files here"
            )
    locations: dict[str, tuple[Path, st.TensorEntry]] = {}
    for fname in files:
        path = model_dir / fname
        for name, entry in st.read_header(path).items():
            if name in locations:
                raise ModelError(
                    f"{path}: tensor {name!r} also appears in {locations[name][0]}; remove the "
                    "duplicate shard"
                )
            locations[name] = (path, entry)
    if index_path.exists():
        _check_index_agrees(index_path, locations)
    return locations


def _files_from_index(index_path: Path) -> list[str]:
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
        weight_map = index["weight_map"]
        if not isinstance(weight_map, dict):
            raise TypeError("weight_map is not an object")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise ModelError(
            f"{index_path}: corrupt shard index ({e}); restore the checkpoint's original {INDEX_NAME}"
        ) from None
    files = sorted(set(weight_map.values()))
    for fname in files:
        if not (index_path.parent / fname).is_file():
            raise ModelError(
                f"{index_path.parent / fname}: shard listed in {INDEX_NAME} is missing; "
                "download every shard of the checkpoint"
            )
    return files


def _check_index_agrees(index_path: Path, locations: Mapping[str, tuple[Path, st.TensorEntry]]) -> None:
    weight_map = json.loads(index_path.read_text(encoding="utf-8"))["weight_map"]
    for name, fname in weight_map.items():
        if name not in locations:
            raise ModelError(
                f"{index_path.parent / fname}: tensor {name!r} is listed in {INDEX_NAME} but not "
                "stored in that shard; the shard is incomplete -- re-download it"
            )
        if locations[name][0].name != fname:
            raise ModelError(
                f"{index_path}: tensor {name!r} is mapped to {fname} but stored in "
                f"{locations[name][0].name}; restore the original index"
            )


def _check_names(model_dir: Path, config: LlamaConfig, locations: Mapping[str, tuple[Path, st.TensorEntry]]) -> None:
    expected = expected_shapes(config)
    files = sorted({str(p) for p, _ in locations.values()}) or [str(model_dir)]
    for name in expected:
        if name not in locations:
            raise ModelError(
                f"{', '.join(files)}: tensor {name!r} is missing (the config implies "
                f"{config.num_hidden_layers} layers{', untied lm_head' if not config.tie_word_embeddings else ''}); "
                "the checkpoint is incomplete or does not match config.json -- re-download it, or fix "
                "config.json to describe these weights"
            )
    for name, (path, _) in locations.items():
        if name in expected:
            continue
        m = _LAYER_RE.match(name)
        # Tensors of layers the config does not have, or biases, mean the config is
        # wrong for these weights; running without them would give wrong logits.
        if m and int(m.group(1)) >= config.num_hidden_layers:
            raise ModelError(
                f"{path}: tensor {name!r} belongs to layer {m.group(1)}, but config.json says "
                f"num_hidden_layers={config.num_hidden_layers}; fix the config"
            )
        if m and name.endswith(".bias"):
            raise ModelError(
                f"{path}: tensor {name!r} is a bias; Llama layers have none and piegpu would "
                "ignore it -- this checkpoint is not a plain Llama model"
            )
        # Anything else (rotary inv_freq buffers, a redundant lm_head of a tied
        # model) is derived data the forward pass does not need.


def save_checkpoint(
    model_dir: str | Path,
    config: LlamaConfig,
    tensors: Mapping[str, np.ndarray],
    dtype: str | np.dtype | type = "f32",
    *,
    max_shard_bytes: int | None = None,
) -> list[Path]:
    """Write config.json and the weights (one file, or shards + index) atomically per file."""
    model_dir = Path(model_dir)
    sname = st.storage_dtype_name(dtype)
    shapes = expected_shapes(config)
    for name, shape in shapes.items():
        if name not in tensors:
            raise ModelError(f"save_checkpoint: tensor {name!r} is missing; the config implies shape {list(shape)}")
        got = tuple(np.shape(tensors[name]))
        if got != shape:
            raise ModelError(
                f"save_checkpoint: tensor {name!r} has shape {list(got)}, the config implies {list(shape)}"
            )
    extra = sorted(set(tensors) - set(shapes))
    if extra:
        raise ModelError(f"save_checkpoint: tensors {extra[:5]} are not part of a {config.architecture} checkpoint")

    items = [(name, st.from_float32(np.asarray(tensors[name]), sname), sname) for name in shapes]
    shards: list[list[tuple[str, np.ndarray, str]]] = [[]]
    size = 0
    for item in items:
        if max_shard_bytes is not None and shards[-1] and size + item[1].nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(item)
        size += item[1].nbytes

    model_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if len(shards) == 1:
        path = model_dir / SINGLE_NAME
        st.write_file(path, shards[0])
        written.append(path)
    else:
        weight_map = {}
        for k, shard in enumerate(shards, 1):
            fname = f"model-{k:05d}-of-{len(shards):05d}.safetensors"
            st.write_file(model_dir / fname, shard)
            written.append(model_dir / fname)
            weight_map.update({name: fname for name, _, _ in shard})
        index = {"metadata": {"total_size": sum(a.nbytes for _, a, _ in items)}, "weight_map": weight_map}
        atomic_write(model_dir / INDEX_NAME, (json.dumps(index, indent=2, sort_keys=True) + "\n").encode())
        written.append(model_dir / INDEX_NAME)
    atomic_write(model_dir / "config.json", config.to_json().encode("utf-8"))
    written.append(model_dir / "config.json")
    return written
