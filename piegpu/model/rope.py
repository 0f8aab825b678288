"""RoPE settings from config.json (transformers 4 and 5 styles) and their inverse frequencies.

transformers 4 writes top-level `rope_theta` and `rope_scaling` ({"rope_type" or "type": ...,
scaling fields}); transformers 5 writes `rope_parameters` holding rope_theta, rope_type and the
scaling fields. Both read the same here; any field that would change the frequencies and is
not implemented is a ModelError, never ignored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ModelError

# rope_type -> the fields it reads (besides rope_type/type and rope_theta), all required.
ROPE_TYPES: dict[str, tuple[str, ...]] = {
    "default": (),
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
}
# Fields transformers accepts in a rope dict without changing the math of these types.
_HARMLESS = {"rope_type", "type", "rope_theta"}


@dataclass(frozen=True)
class Rope:
    """The RoPE of a model: base theta, scaling type and its fields (sorted (name, value) pairs)."""

    theta: float = 10000.0
    type: str = "default"
    fields: tuple = ()

    def field(self, name: str) -> float:
        """One scaling field's value (a KeyError if this type has no such field)."""
        return dict(self.fields)[name]

    def to_hf(self) -> dict[str, Any]:
        """transformers 4 keys: rope_theta and rope_scaling (None for plain RoPE)."""
        if self.type == "factors":
            raise ModelError("this RoPE comes from a GGUF's rope_freqs tensor (a divisor per frequency), which has no "
                             "config.json form; keep using the GGUF file")
        scaling = None if self.type == "default" else {"rope_type": self.type, **dict(self.fields)}
        return {"rope_theta": self.theta, "rope_scaling": scaling}


def parse_rope(data: dict[str, Any], source: str) -> Rope:
    """The Rope of an HF config dict, from rope_parameters (transformers 5) or rope_theta/rope_scaling (4)."""
    params = data.get("rope_parameters")
    theta = data.get("rope_theta")
    scaling = data.get("rope_scaling")
    if params is not None:
        if not isinstance(params, dict):
            raise ModelError(f"{source}: rope_parameters must be an object, got {params!r}; fix the config")
        if params and all(isinstance(v, dict) for v in params.values()):
            raise ModelError(f"{source}: rope_parameters {params!r} gives RoPE per layer type, which this "
                             f"architecture does not have; supported: one rope_parameters object "
                             f"(rope_type one of {', '.join(ROPE_TYPES)})")
        if scaling and dict(scaling) != {k: v for k, v in params.items() if k != "rope_theta"}:
            raise ModelError(f"{source}: the config has both rope_scaling {scaling!r} and rope_parameters "
                             f"{params!r}, and they disagree; keep one (transformers 5 reads rope_parameters)")
        inner = params.get("rope_theta")
        if theta is not None and inner is not None and _number(theta, "rope_theta", source) != \
                _number(inner, "rope_parameters.rope_theta", source):
            raise ModelError(f"{source}: rope_theta {theta!r} and rope_parameters.rope_theta {inner!r} disagree; "
                             "keep one (transformers 5 reads rope_parameters)")
        theta = inner if inner is not None else theta
        spec, where = params, "rope_parameters"
    else:
        if scaling is not None and not isinstance(scaling, dict):
            raise ModelError(f"{source}: rope_scaling must be an object or null, got {scaling!r}; fix the config")
        spec, where = scaling or {}, "rope_scaling"
    return _parse_spec(spec, theta, where, source)


def parse_layer_type_ropes(data: dict[str, Any], source: str) -> tuple[Rope, Rope]:
    """(global RoPE, sliding-window layers' RoPE) of a Gemma 3 config.

    transformers 5: rope_parameters = {"full_attention": {...}, "sliding_attention": {...}};
    transformers 4: rope_theta + rope_scaling for the global layers, rope_local_base_freq for the local ones.
    Defaults as Gemma3TextConfig: theta 1e6 global, 1e4 local.
    """
    params = data.get("rope_parameters")
    if params is not None:
        if not isinstance(params, dict) or not set(params) <= {"full_attention", "sliding_attention"} or \
                not all(isinstance(v, dict) for v in params.values()):
            raise ModelError(f"{source}: rope_parameters {params!r} is not supported here; supported: "
                             "{\"full_attention\": {...}, \"sliding_attention\": {...}} (RoPE per layer type)")
        full, local = params.get("full_attention", {}), params.get("sliding_attention", {})
        return (_parse_spec(full, full.get("rope_theta", data.get("rope_theta", 1e6)),
                            "rope_parameters.full_attention", source),
                _parse_spec(local, local.get("rope_theta", data.get("rope_local_base_freq", 1e4)),
                            "rope_parameters.sliding_attention", source))
    scaling = data.get("rope_scaling")
    if scaling is not None and not isinstance(scaling, dict):
        raise ModelError(f"{source}: rope_scaling must be an object or null, got {scaling!r}; fix the config")
    theta = data.get("rope_theta")
    local = data.get("rope_local_base_freq")
    return (_parse_spec(scaling or {}, 1e6 if theta is None else theta, "rope_scaling", source),
            _parse_spec({}, 1e4 if local is None else local, "rope_local_base_freq", source))


def _parse_spec(spec: dict[str, Any], theta: Any, where: str, source: str) -> Rope:
    """A Rope from one rope dict (rope_type + its fields) and its theta; refuses what it cannot run."""
    theta = 10000.0 if theta is None else _number(theta, "rope_theta", source)
    if not (math.isfinite(theta) and theta > 0):
        raise ModelError(f"{source}: rope_theta must be a positive number, got {theta!r}; fix the config")
    rtype = spec.get("rope_type", spec.get("type", "default"))
    if rtype not in ROPE_TYPES:
        raise ModelError(f"{source}: {where}.rope_type {rtype!r} is not supported (it changes the rotary "
                         f"frequencies); supported rope types: {', '.join(ROPE_TYPES)}")
    wanted = ROPE_TYPES[rtype]
    for key, value in spec.items():
        if key in _HARMLESS or key in wanted:
            continue
        if key == "partial_rotary_factor" and value in (1, 1.0):
            continue
        raise ModelError(f"{source}: {where}.{key}={value!r} is not supported for rope_type {rtype!r} (it would "
                         f"change the rotary embedding); supported fields: "
                         f"{', '.join(wanted) if wanted else 'none besides rope_theta'}")
    fields = []
    for key in wanted:
        if key not in spec:
            raise ModelError(f"{source}: {where} of rope_type {rtype!r} lacks {key!r}; add it "
                             f"({rtype} needs {', '.join(wanted)})")
        value = _number(spec[key], f"{where}.{key}", source)
        if not (math.isfinite(value) and value > 0):
            raise ModelError(f"{source}: {where}.{key} must be a positive number, got {spec[key]!r}; fix the config")
        fields.append((key, value))
    if rtype == "llama3" and dict(fields)["high_freq_factor"] <= dict(fields)["low_freq_factor"]:
        raise ModelError(f"{source}: {where}: high_freq_factor must exceed low_freq_factor for llama3 RoPE; "
                         "fix the config")
    return Rope(float(theta), rtype, tuple(sorted(fields)))


def inv_freq(rope: Rope, head_dim: int, dtype: type | np.dtype = np.float32) -> np.ndarray:
    """The head_dim / 2 inverse frequencies, as transformers computes them (in float32 there; `dtype` here)."""
    t = np.dtype(dtype).type
    exps = np.arange(0, head_dim, 2, dtype=np.int64).astype(t) / t(head_dim)
    f = (t(1.0) / (t(rope.theta) ** exps)).astype(t)
    if rope.type == "linear":
        return (f / t(rope.field("factor"))).astype(t)
    if rope.type == "factors":  # a GGUF's rope_freqs (llama.cpp writes Llama 3's scaling so)
        return (f / np.asarray(rope.field("factors"), dtype=t)).astype(t)
    if rope.type == "llama3":
        factor, low, high = (t(rope.field(k)) for k in ("factor", "low_freq_factor", "high_freq_factor"))
        old = t(rope.field("original_max_position_embeddings"))
        low_wavelen, high_wavelen = old / low, old / high
        wavelen = t(2 * math.pi) / f
        scaled = np.where(wavelen > low_wavelen, f / factor, f).astype(t)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        return np.where(medium, smoothed, scaled).astype(t)
    return f


def _number(value: Any, key: str, source: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ModelError(f"{source}: {key} must be a number, got {value!r}; fix the config")
    return float(value)
