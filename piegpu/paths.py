"""Where piegpu keeps its caches on disk, and atomic file writes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Iterable


def cache_dir() -> Path:
    """The cache root: $PIEGPU_CACHE_DIR, else ~/.cache/piegpu (not created here)."""
    env = os.environ.get("PIEGPU_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "piegpu"


def atomic_stream_write(path: Path, chunks: Iterable) -> None:
    """Stream chunks into a temp file beside `path`, fsync, then rename over `path`.

    Readers see either the old file or the whole new one; an interrupted write leaves
    only a temp file that nothing trusts.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that readers see either the old file or the whole new one."""
    atomic_stream_write(path, [data])
