"""What a model is, read from its files without loading it: architecture, parameters, quantization, context, vocab.

model.info, `piegpu models` and the server's /props print these; `facts_of_gguf` and `facts_of_dir` also say whether
piegpu can run the model and, if not, why (the first error a load would raise).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ModelError


def file_type_name(code: int | None, types: Counter) -> str:
    """llama.cpp's name of a GGUF's general.file_type (MOSTLY_Q4_K_M -> Q4_K_M); else the commonest matrix type."""
    if code is not None:
        from gguf.constants import LlamaFileType
        try:
            name = LlamaFileType(int(code)).name
            if name != "GUESSED":
                return name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            pass
    return types.most_common(1)[0][0] if types else "unknown"


def _base(config, path: Path, origin: str, name: str) -> dict[str, Any]:
    return {"name": name, "source": str(path), "path": str(path), "origin": origin,
            "architecture": config.architecture, "layers": config.num_hidden_layers,
            "hidden_size": config.hidden_size, "vocab_size": config.vocab_size,
            "context": config.max_position_embeddings, "context_train": config.max_position_embeddings}


def gguf_facts(reader: Any, config, path: Path, origin: str, name: str, chat_template: bool) -> dict[str, Any]:
    """The facts of an open GGUF whose config has been read."""
    types = Counter(t.tensor_type.name for t in reader.tensors if len(t.shape) > 1)
    ftype = reader.fields.get("general.file_type")
    out = _base(config, path, origin, name)
    out.update(parameters=int(sum(int(np.prod(t.shape, dtype=np.int64)) for t in reader.tensors)),
               quantization=file_type_name(None if ftype is None else ftype.contents(), types),
               tensor_types=dict(sorted(types.items())), chat_template=chat_template, format="gguf")
    return out


def facts_of_gguf(path: Path, origin: str, name: str) -> dict[str, Any]:
    """The facts of a GGUF file and whether it runs (`runnable`, `reason`); never raises for a bad file."""
    from .gguf_convert import config_from_gguf
    from .gguf_file import GgufFile
    from .gguf_model import tensors_in_place
    from .gguf_tokenizer import tokenizer_problem
    out: dict[str, Any] = {"name": name, "source": str(path), "path": str(path), "origin": origin,
                           "size_bytes": shards_size(path), "format": "gguf"}
    try:
        reader = GgufFile(path)
    except ModelError as e:
        return {**out, "runnable": False, "reason": str(e)}
    arch = reader.fields.get("general.architecture")
    out["architecture"] = None if arch is None else arch.contents()
    try:
        config = config_from_gguf(reader, str(path))
        out.update(gguf_facts(reader, config, path, origin, name, "tokenizer.chat_template" in reader.fields))
        tensors_in_place(reader, config, str(path))  # the tensor types and names a load checks
        problem = tokenizer_problem(reader)
        if problem is not None:
            raise ModelError(problem)
    except ModelError as e:
        return {**out, "size_bytes": shards_size(path), "runnable": False, "reason": str(e)}
    return {**out, "size_bytes": shards_size(path), "runnable": True, "reason": ""}


def shards_size(path: Path) -> int:
    """Bytes of a GGUF file and, for the first shard of a split one, of every shard beside it."""
    from .gguf_file import shard_paths
    return sum(p.stat().st_size for p in shard_paths(Path(path)) if p.is_file())


def dir_facts(config, path: Path, origin: str, name: str) -> dict[str, Any]:
    """The facts of a config.json + safetensors directory (dtype of its matrices as the quantization)."""
    from .checkpoint import tensor_entries
    from .tokenizer import load_chat_template
    entries = tensor_entries(path)
    types = Counter(e.dtype for e in entries if len(e.shape) > 1)
    out = _base(config, path, origin, name)
    out.update(parameters=int(sum(int(np.prod(e.shape, dtype=np.int64)) for e in entries)),
               quantization=types.most_common(1)[0][0] if types else "unknown", tensor_types=dict(sorted(types.items())),
               chat_template=load_chat_template(path) is not None, format="safetensors")
    return out


def facts_of_dir(path: Path, origin: str, name: str) -> dict[str, Any]:
    """The facts of a model directory and whether it runs; never raises for a bad directory."""
    from .config import LlamaConfig
    out: dict[str, Any] = {"name": name, "source": str(path), "path": str(path), "origin": origin,
                           "format": "safetensors",
                           "size_bytes": sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())}
    try:
        config = LlamaConfig.from_file(Path(path) / "config.json")
        out.update(dir_facts(config, Path(path), origin, name))
        if not (Path(path) / "tokenizer.json").is_file():
            raise ModelError(f"{path}: no tokenizer.json; piegpu reads a model directory's tokenizer from it")
    except (ModelError, OSError, ValueError) as e:
        return {**out, "runnable": False, "reason": str(e)}
    return {**out, "runnable": True, "reason": ""}
