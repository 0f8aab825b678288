"""Models in Ollama's own store, read in place and never written: `ollama:NAME[:TAG]`.

The store is $OLLAMA_MODELS, else ~/.ollama/models. `ollama pull llama3.2:1b` writes the manifest
manifests/registry.ollama.ai/library/llama3.2/1b (a Docker-style JSON manifest) whose layers name blobs by digest:
the `application/vnd.ollama.image.model` layer is the GGUF, `...template` a Go chat template, `...params` a JSON of
default options; the blobs are blobs/sha256-HEX (sha256:HEX in old stores). A name is [HOST/][NAMESPACE/]MODEL[:TAG]
as Ollama parses it: host registry.ollama.ai, namespace library and tag latest by default.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import ModelError

DEFAULT_HOST, DEFAULT_NAMESPACE, DEFAULT_TAG = "registry.ollama.ai", "library", "latest"
MODEL_LAYER = "application/vnd.ollama.image.model"
TEMPLATE_LAYER = "application/vnd.ollama.image.template"
PARAMS_LAYER = "application/vnd.ollama.image.params"
DIGEST = re.compile(r"^sha256[:-]([0-9a-f]{64})$")


def store_root() -> Path:
    """Ollama's model store: $OLLAMA_MODELS, else ~/.ollama/models."""
    env = os.environ.get("OLLAMA_MODELS")
    return Path(env).expanduser() if env else Path.home() / ".ollama" / "models"


@dataclass
class OllamaModel:
    """One pulled model: its name, manifest, GGUF blob, and the template and params layers (None if absent)."""

    name: str
    manifest: Path
    gguf: Path
    size: int
    template: str | None = None
    params: dict = field(default_factory=dict)


def manifest_path(name: str, root: Path | None = None) -> tuple[str, Path]:
    """The short name (`llama3.2:1b`) and manifest path of `NAME[:TAG]`, as Ollama resolves it."""
    root = root or store_root()
    body, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", DEFAULT_TAG)
    parts = body.split("/")
    if not body or any(not p for p in parts) or len(parts) > 3 or not tag:
        raise ModelError(f"ollama:{name}: not an Ollama model name. Fix: ollama:MODEL[:TAG] as `ollama list` shows "
                         "it, e.g. ollama:llama3.2:1b")
    host = parts[0] if len(parts) == 3 else DEFAULT_HOST
    namespace = parts[-2] if len(parts) >= 2 else DEFAULT_NAMESPACE
    return short_name(host, namespace, parts[-1], tag), root / "manifests" / host / namespace / parts[-1] / tag


def short_name(host: str, namespace: str, model: str, tag: str) -> str:
    """The name as `ollama list` prints it: host and namespace left out where they are the defaults."""
    if host != DEFAULT_HOST:
        return f"{host}/{namespace}/{model}:{tag}"
    return f"{model}:{tag}" if namespace == DEFAULT_NAMESPACE else f"{namespace}/{model}:{tag}"


def blob_path(digest: str, root: Path) -> Path:
    """Where the store keeps the blob of a `sha256:HEX` digest (the sha256:HEX file name of old stores too)."""
    m = DIGEST.match(str(digest))
    if m is None:
        raise ModelError(f"{digest!r} is not a sha256 digest")
    new = root / "blobs" / f"sha256-{m[1]}"
    old = root / "blobs" / f"sha256:{m[1]}"
    return old if not new.exists() and old.exists() else new


def read_model(name: str, root: Path | None = None) -> OllamaModel:
    """The pulled model `NAME[:TAG]` from its manifest; a damaged manifest or a missing blob is a ModelError."""
    root = root or store_root()
    short, path = manifest_path(name, root)
    if not path.is_file():
        have = ", ".join(f"ollama:{n}" for n, _ in list_models(root)) or f"none in {root}"
        raise ModelError(f"ollama:{name}: not pulled ({path} does not exist; Ollama models here: {have}). "
                         f"Fix: `ollama pull {short}`, or set OLLAMA_MODELS to the store that holds it")
    fix = f"Fix: pull it again with `ollama pull {short}`"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        layers = manifest["layers"]
        if not isinstance(layers, list) or not all(isinstance(x, dict) for x in layers):
            raise TypeError("'layers' is not a list of objects")
        by_type = {x["mediaType"]: x for x in layers}
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        raise ModelError(f"ollama:{short}: the manifest {path} is damaged ({type(e).__name__}: {e}). {fix}") from None
    layer = by_type.get(MODEL_LAYER)
    if layer is None:
        raise ModelError(f"ollama:{short}: the manifest {path} has no model layer ({MODEL_LAYER}); its layers: "
                         f"{sorted(by_type)}. {fix}")
    try:
        gguf, size = blob_path(layer.get("digest"), root), int(layer.get("size"))
    except (ModelError, TypeError, ValueError) as e:
        raise ModelError(f"ollama:{short}: the manifest {path} has a bad model layer ({e}). {fix}") from None
    if not gguf.is_file():
        raise ModelError(f"ollama:{short}: the model blob {gguf} named by {path} is missing. {fix}")
    if gguf.stat().st_size != size:
        raise ModelError(f"ollama:{short}: the model blob {gguf} holds {gguf.stat().st_size} bytes, its manifest says "
                         f"{size} (an interrupted pull?). {fix}")
    out = OllamaModel(short, path, gguf, size)
    if TEMPLATE_LAYER in by_type:
        out.template = _layer_text(by_type[TEMPLATE_LAYER], root, short, fix)
    if PARAMS_LAYER in by_type:
        try:
            out.params = json.loads(_layer_text(by_type[PARAMS_LAYER], root, short, fix))
        except ValueError as e:
            raise ModelError(f"ollama:{short}: its params layer is not JSON ({e}). {fix}") from None
    return out


def _layer_text(layer: dict, root: Path, short: str, fix: str) -> str:
    try:
        return blob_path(layer.get("digest"), root).read_text(encoding="utf-8")
    except (ModelError, OSError, UnicodeDecodeError) as e:
        raise ModelError(f"ollama:{short}: its {layer.get('mediaType')} layer cannot be read ({e}). {fix}") from None


def list_models(root: Path | None = None) -> list[tuple[str, Path]]:
    """(short name, manifest path) of every model the store's manifests name."""
    root = root or store_root()
    base = root / "manifests"
    if not base.is_dir():
        return []
    out = []
    for path in sorted(p for p in base.glob("*/*/*/*") if p.is_file()):
        host, namespace, model, tag = path.relative_to(base).parts
        out.append((short_name(host, namespace, model, tag), path))
    return out
