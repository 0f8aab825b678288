"""Models in LM Studio's folder, read in place: `lmstudio:PUBLISHER/REPO[:QUANT]`.

LM Studio downloads into $LMSTUDIO_MODELS, else ~/.lmstudio/models (~/.cache/lm-studio/models before 0.3), one folder
per Hugging Face repository: PUBLISHER/REPO/*.gguf.
"""

from __future__ import annotations

import os
from pathlib import Path

from ...errors import ModelError
from .quant import GgufGroup, choose_group, gguf_groups


def store_root() -> Path:
    """LM Studio's model folder: $LMSTUDIO_MODELS, else ~/.lmstudio/models, else the pre-0.3 ~/.cache/lm-studio/models."""
    env = os.environ.get("LMSTUDIO_MODELS")
    if env:
        return Path(env).expanduser()
    new = Path.home() / ".lmstudio" / "models"
    old = Path.home() / ".cache" / "lm-studio" / "models"
    return old if not new.exists() and old.exists() else new


def folder_groups(folder: Path) -> list[GgufGroup]:
    """The GGUF models in one folder (shards grouped), with their sizes."""
    sizes = {str(p.relative_to(folder)).replace(os.sep, "/"): p.stat().st_size
             for p in folder.rglob("*.gguf") if p.is_file()}
    return gguf_groups(sizes)


def resolve(repo: str, quant: str | None, root: Path | None = None) -> tuple[Path, GgufGroup, str]:
    """The GGUF `PUBLISHER/REPO[:QUANT]` names in LM Studio's folder: (path of its first shard, group, why chosen)."""
    root = root or store_root()
    parts = repo.split("/")
    if len(parts) != 2 or not all(parts) or ".." in parts:
        raise ModelError(f"lmstudio:{repo}: not an LM Studio model name. Fix: lmstudio:PUBLISHER/REPO[:QUANT], as "
                         "the folders under ~/.lmstudio/models are named")
    folder = root / parts[0] / parts[1]
    if not folder.is_dir():
        have = ", ".join(f"lmstudio:{name}" for name, _ in list_repos(root)) or f"none in {root}"
        raise ModelError(f"lmstudio:{repo}: no such folder {folder} (LM Studio models here: {have}). Fix: download it "
                         "in LM Studio, or set LMSTUDIO_MODELS to the folder that holds it")
    group, why = choose_group(folder_groups(folder), quant, str(folder), "lmstudio:PUBLISHER/REPO:QUANT")
    return folder / group.first, group, why


def list_repos(root: Path | None = None) -> list[tuple[str, Path]]:
    """(PUBLISHER/REPO, folder) of every folder of LM Studio's that holds a GGUF."""
    root = root or store_root()
    if not root.is_dir():
        return []
    return [(f"{p.parent.name}/{p.name}", p) for p in sorted(root.glob("*/*"))
            if p.is_dir() and any(p.rglob("*.gguf"))]
