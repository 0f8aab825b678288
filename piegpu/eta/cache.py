"""The kernel cache: compiled artifacts by (program hash, target, emitter version, device key).

Two levels: an in-memory dict of loaded objects (pipelines ready to dispatch) and a
disk directory of artifact files under $PIEGPU_CACHE_DIR/kernels. A disk entry carries
its own key and a sha256 of its payload; an entry that is truncated, corrupt or for
another key is discarded and rebuilt, never executed. Write failures (read-only or
full disk) degrade to memory-only caching with one warning.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..paths import atomic_write, cache_dir

MAGIC = b"PIEKC1\n"


@dataclass(frozen=True)
class CacheKey:
    """What a compiled artifact depends on."""

    program: str  # Program.hash
    target: str
    emitter_version: str
    device: str

    def digest(self) -> str:
        """A filename-safe digest of the whole key."""
        raw = json.dumps([self.program, self.target, self.emitter_version, self.device]).encode()
        return hashlib.sha256(raw).hexdigest()


_stats = {"memory_hits": 0, "disk_hits": 0, "misses": 0, "discarded": 0, "write_errors": 0}
_memory: OrderedDict = OrderedDict()  # least recently used first
_lock = threading.Lock()
_warned = False
# Loaded kernels kept in memory. Each holds driver pipelines (~0.5 MB on lavapipe), so an
# app that traces a new epilogue per request must not keep them all; evicted ones reload
# from disk (a disk hit), and passes already prepared keep theirs.
MEMORY_ENTRIES = int(os.environ.get("PIEGPU_MEMORY_KERNELS", "128"))


def cache_stats() -> dict:
    """Counters: memory_hits, disk_hits, misses (emissions), discarded (bad disk entries), write_errors."""
    with _lock:
        s = dict(_stats)
    s["hits"] = s["memory_hits"] + s["disk_hits"]
    s["memory_entries"] = len(_memory)
    s["dir"] = str(kernel_dir())
    return s


def clear_memory_cache() -> None:
    """Forget loaded kernels (the disk cache stays); the next use reloads from disk."""
    with _lock:
        _memory.clear()


def reset_stats() -> None:
    """Zero the counters (tests and benchmarks)."""
    with _lock:
        for k in _stats:
            _stats[k] = 0


def kernel_dir() -> Path:
    """Where artifacts live on disk."""
    return cache_dir() / "kernels"


def _path(key: CacheKey) -> Path:
    return kernel_dir() / f"{key.digest()}.bin"


def pack(key: CacheKey, payload: bytes) -> bytes:
    """An artifact file: magic, key header, payload sha256, payload."""
    head = json.dumps(key.__dict__, sort_keys=True).encode()
    return MAGIC + struct.pack("<I", len(head)) + head + hashlib.sha256(payload).digest() + payload


def unpack(key: CacheKey, data: bytes) -> bytes | None:
    """The payload of an artifact file if it is intact and for `key`, else None."""
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 4:
        return None
    pos = len(MAGIC)
    (n,) = struct.unpack_from("<I", data, pos)
    pos += 4
    if pos + n + 32 > len(data):
        return None
    try:
        head = json.loads(data[pos: pos + n])
    except ValueError:
        return None
    if head != key.__dict__:
        return None
    pos += n
    digest, payload = data[pos: pos + 32], data[pos + 32:]
    return payload if hashlib.sha256(payload).digest() == digest else None


def _discard(path: Path) -> None:
    with _lock:
        _stats["discarded"] += 1
    try:
        path.unlink()
    except OSError:
        pass


def _bump(name: str) -> None:
    with _lock:
        _stats[name] += 1


def get(key: CacheKey, build: Callable[[], bytes], load: Callable[[bytes], object]):
    """The loaded object for `key`: from memory, else from disk, else built (emitted) and stored."""
    global _warned
    with _lock:
        obj = _memory.get(key)
        if obj is not None:
            _memory.move_to_end(key)
            _stats["memory_hits"] += 1
            return obj
    path = _path(key)
    try:
        data = path.read_bytes()
    except OSError:
        data = None
    if data is not None:
        payload = unpack(key, data)
        if payload is None:
            _discard(path)
        else:
            try:
                obj = load(payload)
            except Exception:  # a foreign or stale entry the loader rejects: rebuild it
                _discard(path)
                obj = None
            if obj is not None:
                _bump("disk_hits")
                _remember(key, obj)
                return obj
    _bump("misses")
    payload = build()
    try:
        atomic_write(path, pack(key, payload))
    except OSError as e:
        _bump("write_errors")
        if not _warned:
            _warned = True
            print(f"piegpu: cannot write the kernel cache at {path.parent} ({e}); caching in memory only. "
                  "Fix: set PIEGPU_CACHE_DIR to a writable directory (with free space) to keep compiled kernels "
                  "across runs.",
                  file=sys.stderr)
    obj = load(payload)
    _remember(key, obj)
    return obj


def _remember(key: CacheKey, obj) -> None:
    with _lock:
        _memory[key] = obj
        _memory.move_to_end(key)
        while len(_memory) > max(1, MEMORY_ENTRIES):
            _memory.popitem(last=False)


def disk_entries() -> list:
    """Paths of the artifact files on disk."""
    d = kernel_dir()
    return sorted(d.glob("*.bin")) if d.is_dir() else []


def _env_disabled() -> bool:
    return os.environ.get("PIEGPU_NO_DISK_CACHE", "") not in ("", "0")
