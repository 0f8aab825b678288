"""manifest.json of a prepared model directory: format version and per-file sha256.

A prepared directory is trusted only if its manifest matches, so a file damaged
after preparation (disk error, partial copy, hand edit) is caught at load time.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..errors import ModelError
from ..paths import atomic_write

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "piegpu-model"
# Bump when the converter's output changes meaning (names, layout, dtype), so old
# caches are re-prepared instead of trusted.
MANIFEST_VERSION = 1


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, streamed."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(model_dir: Path, files: list[str], source: dict[str, Any] | None = None) -> Path:
    """Hash `files` (names relative to model_dir) and write manifest.json atomically."""
    model_dir = Path(model_dir)
    entries = {}
    for name in sorted(files):
        p = model_dir / name
        entries[name] = {"sha256": sha256_file(p), "bytes": p.stat().st_size}
    doc = {
        "format": MANIFEST_FORMAT,
        "format_version": MANIFEST_VERSION,
        "source": source or {},
        "files": entries,
    }
    path = model_dir / MANIFEST_NAME
    atomic_write(path, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    return path


def read_manifest(model_dir: Path) -> dict[str, Any] | None:
    """The parsed manifest, or None when the directory has none (a user checkpoint)."""
    path = Path(model_dir) / MANIFEST_NAME
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelError(f"{path}: unreadable manifest ({e}); re-prepare the model directory") from None
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT or not isinstance(doc.get("files"), dict):
        raise ModelError(f"{path}: not a piegpu manifest; re-prepare the model directory")
    return doc


# Directories verified by this process, keyed by their files' (size, mtime) stamp:
# loading the same prepared model twice should not hash 500 MB twice.
_verified: dict[Path, tuple] = {}


def _stamp(model_dir: Path, names: list[str]) -> tuple | None:
    try:
        stats = [(n, (model_dir / n).stat()) for n in [MANIFEST_NAME, *sorted(names)]]
    except OSError:
        return None
    return tuple((n, s.st_size, s.st_mtime_ns, s.st_ino) for n, s in stats)


def verify_manifest(model_dir: Path) -> bool:
    """Check every file listed in manifest.json; False if there is no manifest, ModelError on mismatch."""
    model_dir = Path(model_dir)
    doc = read_manifest(model_dir)
    if doc is None:
        return False
    key = model_dir.resolve()
    stamp = _stamp(model_dir, list(doc["files"]))
    if stamp is not None and _verified.get(key) == stamp:
        return True
    _verified.pop(key, None)
    path = model_dir / MANIFEST_NAME
    if doc.get("format_version") != MANIFEST_VERSION:
        raise ModelError(
            f"{path}: manifest format_version {doc.get('format_version')!r}, this piegpu writes "
            f"{MANIFEST_VERSION}; re-prepare the model directory"
        )
    for name, info in doc["files"].items():
        p = model_dir / name
        if not isinstance(info, dict) or "sha256" not in info:
            raise ModelError(f"{path}: corrupt entry for {name!r}; re-prepare the model directory")
        if not p.is_file():
            raise ModelError(f"{p}: listed in {MANIFEST_NAME} but missing; re-prepare the model directory")
        # Size first: a truncated file is reported without hashing hundreds of MB.
        if "bytes" in info and p.stat().st_size != info["bytes"]:
            raise ModelError(
                f"{p}: size {p.stat().st_size} bytes, manifest says {info['bytes']}; the file is "
                "truncated or replaced -- re-prepare the model directory"
            )
        if sha256_file(p) != info["sha256"]:
            raise ModelError(
                f"{p}: sha256 does not match {MANIFEST_NAME}; the file is corrupt -- re-prepare "
                "the model directory"
            )
    if stamp is not None:
        _verified[key] = stamp
    return True
