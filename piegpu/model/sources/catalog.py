"""Every model on this machine that piegpu can name: the default model, piegpu's cache, the Hugging Face cache
(GGUF and safetensors repositories), Ollama's store and LM Studio's folder -- what `piegpu models` lists.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ...errors import ModelError
from .quant import SHARD


@dataclass
class Entry:
    """One local model: the name to pass to load_model / -m, its file or folder, where it lives."""

    name: str
    path: Path | None  # None: the name does not resolve (reason says why)
    origin: str  # "piegpu", "hf", "ollama", "lmstudio"
    is_gguf: bool
    reason: str = ""


def entries() -> list[Entry]:
    """Every local model, without reading any of them."""
    out: list[Entry] = []
    for source in (_piegpu, _hf_cache, _ollama, _lmstudio):
        out.extend(source())
    return out


def rows() -> list[dict[str, Any]]:
    """Every local model with its facts (model/facts.py) and whether piegpu can run it."""
    from ..facts import facts_of_dir, facts_of_gguf
    out = []
    for e in entries():
        if e.path is None:
            out.append({"name": e.name, "origin": e.origin, "path": None, "source": None, "size_bytes": 0,
                        "runnable": False, "reason": e.reason})
        elif e.is_gguf:
            out.append(facts_of_gguf(e.path, e.origin, e.name))
        else:
            out.append(facts_of_dir(e.path, e.origin, e.name))
    return out


def _piegpu() -> Iterator[Entry]:
    from ...paths import cache_dir
    from ..default import DEFAULT_MODEL_NAME, default_gguf_path
    try:
        yield Entry(DEFAULT_MODEL_NAME, default_gguf_path(), "piegpu", True)
    except ModelError:
        pass
    root = cache_dir()
    if root.is_dir():  # GGUFs kept there (benchmarks' real shapes), two levels deep
        for p in sorted(list(root.glob("*.gguf")) + list(root.glob("*/*.gguf"))):
            shard = SHARD.match(p.name)
            if shard is None or int(shard["no"]) == 1:
                yield Entry(str(p), p, "piegpu", True)


def _hf_cache() -> Iterator[Entry]:
    from .quant import gguf_groups
    try:
        import huggingface_hub
        from huggingface_hub import constants
        info = huggingface_hub.scan_cache_dir(constants.HF_HUB_CACHE)  # HF_HOME / HF_HUB_CACHE now
    except Exception:  # no cache yet (CacheNotFound), or huggingface_hub missing
        return
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model" or not repo.revisions:
            continue
        main = [r for r in repo.revisions if "main" in r.refs]
        rev = main[0] if main else max(repo.revisions, key=lambda r: r.last_modified)
        at = "" if main else "@" + (sorted(rev.refs)[0] if rev.refs else rev.commit_hash)
        files = {str(f.file_path.relative_to(rev.snapshot_path)).replace(os.sep, "/"): f.size_on_disk
                 for f in rev.files}
        groups = gguf_groups(files)
        yield from _group_entries(groups, rev.snapshot_path, lambda q: f"{repo.repo_id}:{q}{at}", "hf")
        if not groups and "config.json" in files and any(f.endswith(".safetensors") for f in files):
            yield Entry(repo.repo_id + at, rev.snapshot_path, "hf", False)


def _ollama() -> Iterator[Entry]:
    from . import ollama
    for name, _ in ollama.list_models():
        try:
            yield Entry(f"ollama:{name}", ollama.read_model(name).gguf, "ollama", True)
        except ModelError as e:
            yield Entry(f"ollama:{name}", None, "ollama", True, str(e))


def _lmstudio() -> Iterator[Entry]:
    from . import lmstudio
    for repo, folder in lmstudio.list_repos():
        yield from _group_entries(lmstudio.folder_groups(folder), folder, lambda q: f"lmstudio:{repo}:{q}",
                                  "lmstudio")


def _group_entries(groups: list, folder: Path, name_of, origin: str) -> Iterator[Entry]:
    """An entry per GGUF group of one folder: named by its quantization where that is unique there, else by path."""
    quants = [g.quant for g in groups]
    for g in groups:
        unique = g.quant is not None and quants.count(g.quant) == 1
        yield Entry(name_of(g.quant) if unique else str(folder / g.first), folder / g.first, origin, True)
