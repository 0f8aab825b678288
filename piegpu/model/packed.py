"""A cache of the GPU weight layouts next to a prepared model, so later loads skip GGUF parsing.

One binary file of every matrix's words and every norm vector, and a JSON index with
each entry's place and the file's sha256. Written atomically; a file whose checksum
or index does not match is rebuilt, never used.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from ..paths import atomic_write
from .config import LlamaConfig
from .weights import LayerWeights, ModelWeights
from .gpu_weights import HostMatrix

VERSION = 1
DATA, INDEX = "gpu-weights.bin", "gpu-weights.json"


def _entries(w: ModelWeights):
    yield "embed", w.embed
    if w.lm_head is not None:
        yield "lm_head", w.lm_head
    yield "final_norm", w.final_norm
    for i, L in enumerate(w.layers):
        for f in ("qkv", "o", "gate_up", "down", "input_norm", "post_norm"):
            yield f"layers.{i}.{f}", getattr(L, f)


def save_packed(model_dir: Path, w: ModelWeights, source_sha: str) -> None:
    """Write the packed weights of `w` into model_dir (atomically)."""
    index, chunks, off = {"version": VERSION, "source": source_sha, "entries": {}}, [], 0
    for name, v in _entries(w):
        if isinstance(v, HostMatrix):
            data = np.ascontiguousarray(v.words).tobytes()
            index["entries"][name] = {"fmt": v.fmt, "rows": v.rows, "cols": v.cols, "offset": off, "bytes": len(data)}
        else:
            data = np.ascontiguousarray(v, np.float32).tobytes()
            index["entries"][name] = {"vec": int(v.size), "offset": off, "bytes": len(data)}
        chunks.append(data)
        off += len(data)
    blob = b"".join(chunks)
    index["sha256"] = hashlib.sha256(blob).hexdigest()
    atomic_write(Path(model_dir) / DATA, blob)
    atomic_write(Path(model_dir) / INDEX, json.dumps(index).encode())


def load_packed(model_dir: Path, config: LlamaConfig, source_sha: str) -> ModelWeights | None:
    """The packed weights if present, intact and made from `source_sha`; else None."""
    try:
        index = json.loads((Path(model_dir) / INDEX).read_text())
        if index.get("version") != VERSION or index.get("source") != source_sha:
            return None
        blob = np.fromfile(Path(model_dir) / DATA, dtype=np.uint8)
    except (OSError, ValueError):
        return None
    if hashlib.sha256(blob.data).hexdigest() != index.get("sha256"):
        return None
    entries = index["entries"]

    def get(name):
        e = entries[name]
        raw = blob[e["offset"]: e["offset"] + e["bytes"]]
        if "vec" in e:
            return raw.view(np.float32).copy()
        return HostMatrix(e["fmt"], e["rows"], e["cols"], raw.view(np.uint32).reshape(e["rows"], -1))

    try:
        layers = [LayerWeights(*(get(f"layers.{i}.{f}") for f in ("qkv", "o", "gate_up", "down", "input_norm",
                                                                    "post_norm")))
                  for i in range(config.num_hidden_layers)]
        return ModelWeights(config, get("embed"), layers, get("final_norm"),
                            get("lm_head") if "lm_head" in entries else None)
    except (KeyError, ValueError):
        return None


def source_digest(path: Path) -> str:
    """A cheap identity of a source file: size, mtime and path (the manifest already checks content)."""
    st = os.stat(path)
    return hashlib.sha256(f"{Path(path).resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()
