"""GGUF files of one model folder or repository grouped by quantization, and the choice of one group.

A group is one model file or the shards of a split one (llama.cpp's `NAME-00001-of-00003.gguf`); its quantization
is the GGML type tag in its name (`...-Q4_K_M.gguf`, `q8_0`, `UD-Q4_K_XL`), compared case-insensitively like
llama.cpp's `-hf org/repo:QUANT`. Projector files (`mmproj-*.gguf`) are not models and are left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...errors import ModelError

QUANT_TAG = re.compile(
    r"(?<![A-Za-z0-9])(IQ[1-4]_(?:XXS|XS|NL|S|M)|TQ[12]_0|MXFP4(?:_MOE)?|Q[2-8]_K(?:_XL|_[SML])?|Q[4-8]_[01]|"
    r"BF16|F16|F32)(?![A-Za-z0-9])", re.I)
SHARD = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.I)
DEFAULT_QUANT = "Q4_K_M"
# without a :QUANT and no Q4_K_M: the fewest bits of these, the smaller file among equals
FALLBACK_BITS = {"Q4": 4, "IQ4": 4, "Q5": 5, "Q6": 6, "Q8": 8}


@dataclass
class GgufGroup:
    """One model in a folder: its file (or its shards, in order), quantization tag and total size (None: unknown)."""

    files: list[str]
    quant: str | None
    size: int | None = None
    missing: list[str] = field(default_factory=list)  # shards the folder lacks

    @property
    def first(self) -> str:
        """The file a loader opens (the first shard)."""
        return self.files[0]

    def label(self) -> str:
        """`Q4_K_M (a.gguf)`, `Q8_0 (b-00001-of-00002.gguf + 1 shard)` for messages."""
        more = f" + {len(self.files) - 1} shard{'s' * (len(self.files) > 2)}" if len(self.files) > 1 else ""
        return f"{self.quant or 'untagged'} ({self.first}{more})"


def quant_of(path: str) -> str | None:
    """The quantization tag in a GGUF file name (or its folder's, for shards kept in a folder per type), upper case."""
    for part in reversed(path.replace("\\", "/").split("/")):
        found = QUANT_TAG.findall(part)
        if found:
            return found[-1].upper()
    return None


def gguf_groups(sizes: dict[str, int | None]) -> list[GgufGroup]:
    """The model files among `sizes` (relative path -> bytes or None), shards of one file grouped, projectors left out."""
    groups: dict[str, GgufGroup] = {}
    shards: dict[str, dict[int, str]] = {}
    counts: dict[str, int] = {}
    for path in sorted(sizes):
        name = path.rsplit("/", 1)[-1]
        if not name.lower().endswith(".gguf") or "mmproj" in name.lower():
            continue
        m = SHARD.match(path)
        if m:
            shards.setdefault(m["stem"], {})[int(m["no"])] = path
            counts[m["stem"]] = int(m["count"])
        else:
            groups[path] = GgufGroup([path], quant_of(path), sizes[path])
    for stem, parts in shards.items():
        n = counts[stem]
        files = [parts[i] for i in sorted(parts)]
        missing = [f"{stem}-{i:05d}-of-{n:05d}.gguf" for i in range(1, n + 1) if i not in parts]
        known = [sizes[f] for f in files]
        size = None if any(s is None for s in known) else sum(known)
        groups[stem] = GgufGroup(files, quant_of(stem), size, missing)
    return sorted(groups.values(), key=lambda g: g.first)


def _bits(quant: str | None) -> int | None:
    head = (quant or "").split("_")[0]
    return FALLBACK_BITS.get(head)


def choose_group(groups: list[GgufGroup], quant: str | None, where: str, form: str) -> tuple[GgufGroup, str]:
    """The group a name means: its :QUANT, else Q4_K_M, else the fewest Q4-Q8 bits, else the only file.

    Returns the group and a sentence saying why it was chosen; no match or several is a ModelError listing the
    files there and the form expected (`form`, e.g. "org/repo:QUANT").
    """
    have = ", ".join(g.label() for g in groups) or "no GGUF model files"
    if not groups:
        raise ModelError(f"{where} has no GGUF model files (mmproj projectors are not models). Fix: name a repository "
                         f"or folder that holds a .gguf model, as {form}")
    if quant is not None:
        hits = [g for g in groups if g.quant == quant.upper()]
        if not hits:
            raise ModelError(f"{where} has no GGUF in {quant.upper()}; it has: {have}. Fix: pick one of those, "
                             f"as {form}")
        why = f"{quant.upper()} as asked"
    else:
        hits = [g for g in groups if g.quant == DEFAULT_QUANT]
        why = f"{DEFAULT_QUANT}, the default"
        if not hits:
            ranked = [g for g in groups if _bits(g.quant) is not None]
            if ranked:
                least = min(_bits(g.quant) for g in ranked)
                hits = sorted((g for g in ranked if _bits(g.quant) == least), key=lambda g: (g.size is None, g.size))
                hits = hits[:1]
                why = f"no {DEFAULT_QUANT}: the smallest Q4-Q8 file"
            elif len(groups) == 1:
                hits, why = groups, "the only GGUF there"
    if len(hits) != 1:
        listed = ", ".join(g.label() for g in (hits or groups))
        raise ModelError(f"{where}: which GGUF is meant is ambiguous ({listed}). Fix: name the quantization, as {form}"
                         if hits else f"{where}: no {DEFAULT_QUANT} or Q4-Q8 GGUF to default to; it has: {listed}. "
                         f"Fix: name the quantization, as {form}")
    g = hits[0]
    if g.missing:
        raise ModelError(f"{where}: the split GGUF {g.label()} lacks shard(s) {', '.join(g.missing)}. Fix: download "
                         "every shard of it")
    return g, why
