"""LoRA adapters of a Model: load_adapter / unload_adapter / merge_adapter, and what a request names.

An Adapter is loaded on the host (model/lora_files.py) and registered by name; it goes to a device slot when a
sequence first runs under it (model/lora_bank.py) and a sequence's adapter is part of its working set
(WorkingSet.run_under), so every path that makes working sets -- generate, generate_batch, n=, Batch, the
server -- applies it the same way, several adapters in one batched pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from ..errors import ValidationError
from ..model.lora_files import LoraWeights, read_adapter


@dataclass(eq=False)
class Adapter:
    """A LoRA adapter loaded for one model: `name`, `path`, `rank`, `alpha`, `targets`, `nbytes` (host copy)."""

    name: str
    path: str
    weights: LoraWeights

    rank = property(lambda self: self.weights.rank, doc="The largest rank of its modules.")
    alpha = property(lambda self: self.weights.alpha, doc="lora_alpha (PEFT) / adapter.lora.alpha (GGUF).")
    targets = property(lambda self: sorted(self.weights.targets), doc="The projections it adapts.")
    nbytes = property(lambda self: self.weights.nbytes, doc="Host bytes of its A and B matrices.")

    def __repr__(self) -> str:
        return f"Adapter({self.name!r}, rank={self.rank}, targets={self.targets}, path={self.path!r})"


class LoraUse(NamedTuple):
    """What a sequence runs under: the adapter's registry key, its weights, the request's adapter_scale."""

    key: str
    weights: LoraWeights
    scale: float


class Adapters:
    """A model's loaded adapters by name."""

    def __init__(self, model):
        self.model = model
        self.loaded: dict = {}  # name -> Adapter

    def load(self, path, name: str | None = None) -> Adapter:
        """Read and check the adapter at `path` and register it as `name` (default: the folder's / file's name)."""
        if name is not None and (not isinstance(name, str) or not name):
            raise ValidationError(f"load_adapter(name={name!r}): a non-empty str")
        w = read_adapter(path, self.model.config, name)
        if w.name in self.loaded:
            raise ValidationError(f"an adapter named {w.name!r} is loaded already (from {self.loaded[w.name].path}). "
                                  "Fix: pass another name=, or unload_adapter it first")
        a = self.loaded[w.name] = Adapter(w.name, str(path), w)
        return a

    def unload(self, adapter) -> None:
        """Forget an adapter (refused while a sequence runs under it)."""
        a = self.get(adapter)
        if self.model.gpu.lora is not None:
            self.model.gpu.lora.evict(a.name)
        del self.loaded[a.name]

    def get(self, adapter) -> Adapter:
        """The loaded Adapter for a name or an Adapter of this model."""
        if isinstance(adapter, Adapter):
            if self.loaded.get(adapter.name) is not adapter:
                raise ValidationError(f"adapter {adapter.name!r} is not loaded on this model. Fix: "
                                      "model.load_adapter(path) on this model")
            return adapter
        if isinstance(adapter, str):
            hit = self.loaded.get(adapter)
            if hit is None:
                raise ValidationError(f"no adapter named {adapter!r} is loaded; loaded: {sorted(self.loaded) or 'none'}."
                                      " Fix: model.load_adapter(path, name=...) first")
            return hit
        raise ValidationError(f"adapter must be an Adapter, a loaded adapter's name or None, got {adapter!r:.60}")

    def use(self, adapter, scale=1.0) -> LoraUse | None:
        """What a request's adapter= / adapter_scale= mean: None for the base model."""
        if adapter is None:
            if scale != 1.0:
                raise ValidationError(f"adapter_scale={scale!r} without an adapter. Fix: pass adapter=NAME too")
            return None
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
            raise ValidationError(f"adapter_scale must be a finite number, got {scale!r}")
        a = self.get(adapter)
        return LoraUse(a.name, a.weights, float(scale))

    def merge(self, adapter, scale: float = 1.0) -> None:
        """Add scale * B A of every adapted projection into the base weights (irreversible for this model)."""
        use = self.use(adapter, scale)
        a = self.loaded[use.key]
        from ..model.lora_merge import merge_into
        gpu = self.model.gpu
        self.unload(use.key)  # refused while a sequence runs under it
        try:
            merge_into(gpu, self.model.source, gpu.merged + [(use.weights, use.scale)])
        except Exception:
            self.loaded[use.key] = a
            raise
        gpu.merged.append((use.weights, use.scale))

