"""Where piegpu keeps its caches on disk, and atomic file writes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def cache_dir() -> Path:
    """The cache root: $PIEGPU_CACHE_DIR, else ~/.cache/piegpu (not created here)."""
    env = os.environ.get("PIEGPU_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "piegpu"


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that readers see either the old file or the whole new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
