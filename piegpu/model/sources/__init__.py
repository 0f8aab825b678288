"""Where a model comes from: a local path, the default model, or a name people know --
a Hugging Face repo id (`org/repo[:QUANT][@REVISION]`, `hf:` optional), `ollama:NAME[:TAG]` or
`lmstudio:PUBLISHER/REPO[:QUANT]` -- resolved to a GGUF file or a model directory on this machine.

A local path always wins over a name that looks like a repo id. Other tools' stores (Ollama's, LM Studio's) are only
read; Hugging Face downloads go into huggingface_hub's own cache.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ...errors import ModelError

FORMS = ("a .gguf file or a model folder (config.json + *.safetensors), a Hugging Face repo id org/repo[:QUANT]"
         "[@REVISION] (hf: optional), ollama:NAME[:TAG], lmstudio:PUBLISHER/REPO[:QUANT], or nothing for the default "
         "model")
HF_NAME = re.compile(r"^(?:hf:)?(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+?)(?::(?P<q1>[\w.-]+))?(?:@(?P<rev>[^\s:@]+))?"
                     r"(?::(?P<q2>[\w.-]+))?$")
LMSTUDIO_NAME = re.compile(r"^(?P<repo>[^:\s]+/[^:\s]+)(?::(?P<quant>[\w.-]+))?$")


@dataclass
class Resolved:
    """A model on this machine: its GGUF (first shard) or directory, the name it was asked by, and where from."""

    path: Path
    is_gguf: bool
    name: str
    origin: str  # "default", "path", "hf", "ollama", "lmstudio"
    extra: dict = field(default_factory=dict)  # origin-specific facts (Ollama's manifest, template and params)


def parse_hf(text: str) -> tuple[str, str | None, str | None] | None:
    """(repo id, quant, revision) of a Hugging Face model name, or None if `text` is not one."""
    m = HF_NAME.match(text)
    if m is None or (m["q1"] and m["q2"]) or text.lower().endswith(".gguf") and not text.startswith("hf:"):
        return None
    return m["repo"], m["q1"] or m["q2"], m["rev"]


def is_gguf_file(path: Path) -> bool:
    """A .gguf file, or a file that starts with GGUF's magic (Ollama's blobs have no suffix)."""
    if path.suffix.lower() == ".gguf":
        return True
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def resolve(name_or_path, say: Callable[[str], None] = lambda _msg: None) -> Resolved:
    """The model `name_or_path` means on this machine (downloading a Hugging Face model into its cache if needed)."""
    from ..default import DEFAULT_MODEL_NAME, default_gguf_path
    if name_or_path is None or str(name_or_path) == DEFAULT_MODEL_NAME:
        return Resolved(default_gguf_path(), True, DEFAULT_MODEL_NAME, "default")
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.exists():
        if path.is_dir():
            return Resolved(path, False, text, "path")
        if path.is_file() and is_gguf_file(path):
            return Resolved(path, True, text, "path")
        raise ModelError(f"{path}: not a .gguf file or a model directory. Fix: pass a directory with config.json "
                         "and *.safetensors, or a file ending in .gguf")
    if text.startswith("ollama:"):
        from . import ollama
        m = ollama.read_model(text[len("ollama:"):])
        return Resolved(m.gguf, True, f"ollama:{m.name}", "ollama",
                        {"manifest": str(m.manifest), "template": m.template, "params": m.params})
    if text.startswith("lmstudio:"):
        from . import lmstudio
        m = LMSTUDIO_NAME.match(text[len("lmstudio:"):])
        if m is None:
            raise ModelError(f"{text}: not an LM Studio model name. Fix: lmstudio:PUBLISHER/REPO[:QUANT]")
        gguf, group, why = lmstudio.resolve(m["repo"], m["quant"])
        say(f"{text}: {group.label()} ({why})")
        return Resolved(gguf, True, f"lmstudio:{m['repo']}:{group.quant}" if group.quant else text, "lmstudio")
    parsed = parse_hf(text)
    if parsed is None:
        raise unknown(text)
    repo, quant, revision = parsed
    from . import hf
    try:
        local = hf.resolve(repo, quant, revision, say)
    except ModelError as e:
        if text.startswith("hf:"):
            raise
        raise ModelError(f"{e} (nor is {text!r} a local file or folder)") from None
    name = repo + (f":{quant.upper()}" if quant else "") + (f"@{revision}" if revision else "")
    return Resolved(local, local.is_file(), name, "hf")


def unknown(text: str) -> ModelError:
    """The error for a name that is no local path and no known form: what exists here, and the forms expected."""
    from .catalog import entries
    try:
        have = [e.name for e in entries()]
    except Exception as e:  # a listing that fails must not hide the real error
        have = [f"(the local models could not be listed: {e})"]
    listed = ", ".join(have[:30]) + (f" and {len(have) - 30} more" if len(have) > 30 else "") if have else "none"
    return ModelError(f"{text}: no such model file or folder, and not a model name piegpu knows. Models on this "
                      f"machine (`piegpu models`): {listed}. Fix: pass {FORMS}")
