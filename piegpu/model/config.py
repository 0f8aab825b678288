"""The Llama-family model configuration (HF config.json) and its strict validation.

Every key that would change the computation is either implemented (read into a field here)
or a ModelError naming the file, the key, its value and what is supported -- never ignored.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ModelError
from .family import FAMILIES, Family
from .rope import Rope, parse_layer_type_ropes, parse_rope

# Architectures with the Llama layer (RMSNorm, rotate-half RoPE, GQA, SwiGLU) plus their
# family's steps (model/family.py).
SUPPORTED_ARCHITECTURES = tuple(FAMILIES)

# Keys of other architectures (or options of these) that change the math when set, with
# the values that leave it unchanged. A config setting one of them otherwise is refused.
_NEUTRAL: dict[str, tuple] = {
    "mlp_bias": (None, False),
    "partial_rotary_factor": (None, 1, 1.0),
    "attn_logit_softcapping": (None,),
    "final_logit_softcapping": (None,),
    "query_pre_attn_scalar": (None,),
    "quantization_config": (None,),
    "quantization": (None,),  # mlx-lm's quantized checkpoints (mlx-community/...)
    "attention_chunk_size": (None,),
    "no_rope_layers": (None,),
    "use_qk_norm": (None, False),
    "logits_scaling": (None, 1, 1.0),
    "embedding_multiplier": (None, 1, 1.0),
    "residual_multiplier": (None, 1, 1.0),
    "attention_multiplier": (None,),
    "num_experts": (None, 0),
    "num_local_experts": (None, 0),
    "hidden_activation": (None, "silu", "swish"),
    "use_bidirectional_attention": (None, False),
}
_WHY = {
    "mlp_bias": "piegpu's MLP projections have no bias",
    "quantization_config": "pre-quantized HF weights (GPTQ/AWQ/bitsandbytes) are not read; use the "
                           "float checkpoint or a GGUF file",
    "quantization": "MLX-quantized weights (mlx-lm, mlx-community/...) are not read; use the float checkpoint or a "
                    "GGUF file of the model",
    "num_experts": "mixture-of-experts layers are not implemented",
    "num_local_experts": "mixture-of-experts layers are not implemented",
}

# Keys a config.json must carry; everything else has the HF LlamaConfig default.
_REQUIRED_KEYS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
)

# HF LlamaConfig's defaults, used when config.json leaves a key out (as real
# checkpoints do), so a config loads here exactly as it would in transformers.
_HF_DEFAULTS: dict[str, Any] = {
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "max_position_embeddings": 2048,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


@dataclass(frozen=True)
class LlamaConfig:
    """Shapes and hyper-parameters of a Llama-family decoder."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 2048
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    architecture: str = "LlamaForCausalLM"
    layer_windows: tuple = ()  # per layer: sliding window in positions, 0 = full causal attention; () = all full
    rope: Rope | None = None  # RoPE theta + scaling; None: plain RoPE of rope_theta
    rope_local: Rope | None = None  # sliding-window layers' own RoPE (Gemma 3); None: they use `rope`
    query_pre_attn_scalar: float | None = None  # attention scale is this ** -0.5 (Gemma); None: head_dim ** -0.5
    source: str = field(default="<dict>", compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.rope is None:
            object.__setattr__(self, "rope", Rope(float(self.rope_theta)))
        elif self.rope.theta != self.rope_theta:
            raise ModelError(f"{self.source}: rope_theta {self.rope_theta!r} and the RoPE settings' theta "
                             f"{self.rope.theta!r} disagree; pass one")
        self._validate()

    # -- derived sizes -------------------------------------------------------

    @property
    def q_size(self) -> int:
        """Rows of q_proj: query heads times head_dim."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Rows of k_proj and v_proj: KV heads times head_dim."""
        return self.num_key_value_heads * self.head_dim

    @property
    def family(self) -> Family:
        """The architecture's per-family steps (QKV bias, q/k norm, sliding window)."""
        return FAMILIES[self.architecture]

    @property
    def attention_scale(self) -> float:
        """The factor of q . k in attention: query_pre_attn_scalar ** -0.5, else head_dim ** -0.5."""
        return float(self.query_pre_attn_scalar or self.head_dim) ** -0.5

    def rope_for(self, layer: int) -> Rope:
        """Layer `layer`'s RoPE (sliding-window layers have their own in Gemma 3)."""
        return self.rope_local if self.rope_local is not None and self.window(layer) else self.rope

    def window(self, layer: int) -> int:
        """Layer `layer`'s sliding window in positions (a query sees its last `window` positions); 0 = all."""
        return self.layer_windows[layer] if self.layer_windows else 0

    @property
    def eos_token_ids(self) -> list[int]:
        """The end-of-sequence ids as a list (config.json allows an int or a list)."""
        if self.eos_token_id is None:
            return []
        if isinstance(self.eos_token_id, int):
            return [self.eos_token_id]
        return list(self.eos_token_id)

    # -- (de)serialisation ---------------------------------------------------

    @classmethod
    def from_file(cls, path: str | Path) -> "LlamaConfig":
        """Read and validate an HF config.json."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ModelError(
                f"{path}: config file not found; copy the checkpoint's config.json (HF format) next to "
                "its *.safetensors files"
            ) from None
        except UnicodeDecodeError as e:
            raise ModelError(f"{path}: config is not UTF-8 text ({e}); the file is corrupt -- restore the "
                             "original config.json of the checkpoint") from None
        except OSError as e:
            raise ModelError(f"{path}: cannot read config file ({e}); check permissions") from e
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ModelError(
                f"{path}: config is not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); "
                "restore the original config.json of the checkpoint"
            ) from None
        if not isinstance(data, dict):
            raise ModelError(f"{path}: config must be a JSON object, got {type(data).__name__}; restore the "
                             "original config.json of the checkpoint")
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<dict>") -> "LlamaConfig":
        """Build a config from HF config.json keys, with HF class defaults (the family's) for optional keys."""
        arch = _architecture_of(data, source)
        defaults = dict(FAMILIES[arch].defaults)
        data = {**defaults, **{k: v for k, v in data.items() if v is not None or k not in defaults}}
        for key in _REQUIRED_KEYS:
            if key not in data or data[key] is None:
                raise ModelError(
                    f"{source}: required key {key!r} is missing; add it to the config "
                    "(copy it from the model's original config.json)"
                )
        _reject_unsupported_features(data, arch, source)
        if FAMILIES[arch].local_rope:
            rope, rope_local = parse_layer_type_ropes(data, source)
        else:
            rope, rope_local = parse_rope(data, source), None
        scalar = data.get("query_pre_attn_scalar") if "query_pre_attn_scalar" in FAMILIES[arch].keys else None

        heads = _int_key(data, "num_attention_heads", source)
        kv_heads = data.get("num_key_value_heads")
        kv_heads = heads if kv_heads is None else _int_key(data, "num_key_value_heads", source)
        hidden = _int_key(data, "hidden_size", source)
        head_dim = data.get("head_dim")
        if head_dim is None:
            if heads > 0 and hidden % heads != 0:
                raise ModelError(
                    f"{source}: hidden_size {hidden} is not divisible by num_attention_heads "
                    f"{heads}; fix one of them or give head_dim explicitly"
                )
            head_dim = hidden // heads if heads > 0 else 0
        else:
            head_dim = _int_key(data, "head_dim", source)

        # A null value means "use the default", except for the special token ids,
        # where null means "this model has none".
        values = {**_HF_DEFAULTS, **{k: v for k, v in data.items() if v is not None}}
        bos = data.get("bos_token_id", _HF_DEFAULTS["bos_token_id"])
        eos = data.get("eos_token_id", _HF_DEFAULTS["eos_token_id"])
        if isinstance(eos, list):
            eos = [_as_int(e, "eos_token_id", source) for e in eos]
        elif eos is not None:
            eos = _as_int(eos, "eos_token_id", source)
        return cls(
            vocab_size=_int_key(data, "vocab_size", source),
            hidden_size=hidden,
            intermediate_size=_int_key(data, "intermediate_size", source),
            num_hidden_layers=_int_key(data, "num_hidden_layers", source),
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
            rms_norm_eps=_float(values["rms_norm_eps"], "rms_norm_eps", source),
            rope_theta=rope.theta,
            rope=rope,
            rope_local=rope_local,
            query_pre_attn_scalar=None if scalar is None else _float(scalar, "query_pre_attn_scalar", source),
            tie_word_embeddings=bool(values["tie_word_embeddings"]),
            max_position_embeddings=_as_int(values["max_position_embeddings"], "max_position_embeddings", source),
            bos_token_id=None if bos is None else _as_int(bos, "bos_token_id", source),
            eos_token_id=eos,
            architecture=arch,
            layer_windows=_layer_windows(data, FAMILIES[arch], _int_key(data, "num_hidden_layers", source), source),
            source=source,
        )

    def to_dict(self) -> dict[str, Any]:
        """The config as HF config.json keys (loadable by transformers too)."""
        d = asdict(self)
        for key in ("source", "architecture", "rope", "rope_theta", "layer_windows", "rope_local",
                    "query_pre_attn_scalar"):
            d.pop(key)
        out = {"architectures": [self.architecture], "model_type": self.family.model_type, **d, **self.rope.to_hf(),
               "hidden_act": "silu", "mlp_bias": False, "torch_dtype": "float32"}
        if self.family.act == "gelu_tanh":
            out.update(hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh")
        if self.rope_local is not None:
            out["rope_local_base_freq"] = self.rope_local.theta
        if self.query_pre_attn_scalar is not None:
            out["query_pre_attn_scalar"] = self.query_pre_attn_scalar
        if not self.family.qkv_bias:  # Qwen2's bias is part of the architecture, not a key
            out["attention_bias"] = False
        windows = set(self.layer_windows) - {0}
        if self.family.sliding == "all":
            out["sliding_window"] = windows.pop() if windows else None
        elif self.family.sliding == "gemma":
            out.update(sliding_window=windows.pop() if windows else 4096,
                       layer_types=[("sliding_attention" if self.window(i) else "full_attention")
                                    for i in range(self.num_hidden_layers)])
        elif self.family.sliding == "layer_types":
            out.update(use_sliding_window=bool(windows), sliding_window=windows.pop() if windows else None,
                       layer_types=[("sliding_attention" if self.window(i) else "full_attention")
                                    for i in range(self.num_hidden_layers)])
        return out

    def to_json(self) -> str:
        """config.json text (indented, sorted keys: stable bytes for checksums)."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    # -- validation ----------------------------------------------------------

    def _validate(self) -> None:
        src = self.source
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ModelError(f"{src}: {name} must be a positive integer, got {value!r}; fix the config")
        if self.architecture not in SUPPORTED_ARCHITECTURES:
            raise ModelError(_unsupported_arch_message(self.architecture, src))
        if self.num_attention_heads % self.num_key_value_heads != 0:
            raise ModelError(
                f"{src}: num_attention_heads {self.num_attention_heads} is not divisible by "
                f"num_key_value_heads {self.num_key_value_heads}; grouped-query attention needs "
                "every KV head to serve the same number of query heads -- fix the config"
            )
        if self.head_dim % 2 != 0:
            raise ModelError(f"{src}: head_dim {self.head_dim} is odd; rotary embeddings need an even head_dim -- fix the config")
        if not (math.isfinite(self.rms_norm_eps) and self.rms_norm_eps > 0):
            raise ModelError(f"{src}: rms_norm_eps must be a positive number, got {self.rms_norm_eps!r}; fix the config")
        if not (math.isfinite(self.rope_theta) and self.rope_theta > 0):
            raise ModelError(f"{src}: rope_theta must be a positive number, got {self.rope_theta!r}; fix the config")
        if self.query_pre_attn_scalar is not None and not (math.isfinite(self.query_pre_attn_scalar)
                                                           and self.query_pre_attn_scalar > 0):
            raise ModelError(f"{src}: query_pre_attn_scalar must be a positive number, got "
                             f"{self.query_pre_attn_scalar!r}; fix the config")
        if self.layer_windows and len(self.layer_windows) != self.num_hidden_layers:
            raise ModelError(f"{src}: {len(self.layer_windows)} layer windows for {self.num_hidden_layers} layers; "
                             "fix layer_types in the config")
        for tid in ([self.bos_token_id] if self.bos_token_id is not None else []) + self.eos_token_ids:
            if not 0 <= tid < self.vocab_size:
                raise ModelError(f"{src}: special token id {tid} is outside the vocabulary [0, {self.vocab_size}); "
                                 "fix bos_token_id/eos_token_id in the config")


def _architecture_of(data: dict[str, Any], source: str) -> str:
    archs = data.get("architectures")
    if archs is None and "architecture" in data:
        archs = [data["architecture"]]
    if archs is None:
        raise ModelError(
            f"{source}: required key 'architectures' is missing; add "
            '"architectures": ["LlamaForCausalLM"] if this is a Llama-family checkpoint'
        )
    if isinstance(archs, str):
        archs = [archs]
    if not isinstance(archs, list) or len(archs) != 1 or not isinstance(archs[0], str):
        raise ModelError(f"{source}: 'architectures' must list exactly one class name, got {archs!r}; fix the "
                         "config")
    arch = archs[0]
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ModelError(_unsupported_arch_message(arch, source))
    return arch


def _unsupported_arch_message(arch: str, source: str) -> str:
    return (
        f"{source}: architecture {arch!r} is not supported; piegpu runs Llama-family decoders "
        f"({', '.join(SUPPORTED_ARCHITECTURES)}) -- use a checkpoint of one of these"
    )


def _reject_unsupported_features(data: dict[str, Any], arch: str, source: str) -> None:
    """Refuse every key that would change the math and is not implemented (never ignore one)."""
    family = FAMILIES[arch]
    if family.act == "gelu_tanh":  # Gemma reads hidden_activation (hidden_act is ignored by transformers)
        act = data.get("hidden_activation")
        if act not in ("gelu_pytorch_tanh", "gelu_tanh"):
            raise ModelError(f"{source}: hidden_activation {act!r} is not supported for {arch}; supported: "
                             "gelu_pytorch_tanh (GeGLU with the tanh GELU)")
    else:
        act = data.get("hidden_act", "silu")
        if act not in ("silu", "swish"):
            raise ModelError(f"{source}: hidden_act {act!r} is not supported; supported: silu (SwiGLU MLP)")
    if data.get("attention_bias") and not family.qkv_bias:
        raise ModelError(f"{source}: attention_bias={data['attention_bias']!r} is not supported for {arch} (it adds "
                         "biases to q/k/v and o_proj); supported: attention_bias false, or Qwen2ForCausalLM's "
                         "built-in q/k/v bias")
    for key, neutral in _NEUTRAL.items():
        if key in family.keys:
            continue
        value = data.get(key)
        if not _is_neutral(value, neutral):
            why = _WHY.get(key, "it changes the computation and is not implemented")
            ok = " or ".join("null/absent" if n is None else json.dumps(n) for n in neutral)
            raise ModelError(f"{source}: {key}={value!r} is not supported for {arch} ({why}); supported: {ok}")


def _is_neutral(value: Any, neutral: tuple) -> bool:
    if value is None:
        return None in neutral
    if isinstance(value, bool):  # True == 1 in Python; a flag is never a number here
        return value in [n for n in neutral if isinstance(n, bool)]
    return any(n is not None and not isinstance(n, bool) and value == n for n in neutral)


def _layer_windows(data: dict[str, Any], family: Family, layers: int, source: str) -> tuple:
    """Per layer sliding window (0 = full attention), read as transformers reads it for this family."""
    window = data.get("sliding_window")
    if family.sliding == "none":
        return ()  # transformers' Llama ignores sliding_window; so does piegpu
    if family.sliding == "all":
        if window is None:
            return ()
        return (_positive(window, "sliding_window", source),) * layers
    types = data.get("layer_types")
    if family.sliding == "gemma":
        pattern = _positive(data.get("sliding_window_pattern", 6), "sliding_window_pattern", source)
        if types is None:  # transformers: every pattern-th layer is global
            types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers)]
        use = True
    else:
        use = data.get("use_sliding_window", False)
    if not use:
        window = None  # transformers drops sliding_window unless use_sliding_window is true
    if types is None:  # Qwen2/3
        first = _as_int(data.get("max_window_layers", layers), "max_window_layers", source) if use else layers
        types = ["sliding_attention" if window is not None and i >= first else "full_attention"
                 for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers:
        raise ModelError(f"{source}: layer_types must list one entry per layer ({layers}), got {types!r}; fix the "
                         "config")
    out = []
    for i, t in enumerate(types):
        if t == "full_attention":
            out.append(0)
        elif t == "sliding_attention":
            if window is None:
                raise ModelError(f"{source}: layer_types[{i}] is 'sliding_attention' but sliding_window is not in "
                                 "effect (use_sliding_window false or sliding_window null); fix the config")
            out.append(_positive(window, "sliding_window", source))
        else:
            raise ModelError(f"{source}: layer_types[{i}]={t!r} is not supported; supported: 'full_attention', "
                             "'sliding_attention'")
    return tuple(out) if any(out) else ()


def _positive(value: Any, key: str, source: str) -> int:
    v = _as_int(value, key, source)
    if v < 1:
        raise ModelError(f"{source}: {key} must be a positive integer, got {value!r}; fix the config")
    return v


def _as_int(value: Any, key: str, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ModelError(f"{source}: {key} must be an integer, got {value!r}; fix the config")
    return value


def _int_key(data: dict[str, Any], key: str, source: str) -> int:
    return _as_int(data[key], key, source)


def _float(value: Any, key: str, source: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ModelError(f"{source}: {key} must be a number, got {value!r}; fix the config")
    return float(value)
