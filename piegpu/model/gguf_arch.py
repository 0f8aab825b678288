"""What each GGUF architecture means in HF terms: tensor names, config keys, and llama.cpp's conventions.

llama.cpp's converter writes, per general.architecture:
- "llama" (Llama 2/3.x, Mistral): q/k rows permuted for its adjacent-pair RoPE; Llama 3's RoPE
  scaling as a rope_freqs tensor (a divisor per frequency), not as metadata; a sliding window,
  when {arch}.attention.sliding_window is set, on every layer (Mistral).
- "qwen2" (QKV bias) and "qwen3" (q/k RMSNorm): rows in HF order.
- "gemma3": rows in HF order; every RMSNorm weight stored as 1 + w (what the norm multiplies by);
  the local layers' RoPE base in rope.freq_base_swa (default 10000), which layers are local in
  attention.sliding_window_pattern (default: all but every 6th), the attention scale in
  attention.scale (default as llama.cpp: head_dim ** -0.5, hidden / heads for the 62-layer 27B).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..errors import ModelError
from .gguf_metadata import field_contents
from .rope import Rope

ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                 "gemma3": "Gemma3ForCausalLM"}
GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                "output.weight": "lm_head.weight"}
LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
}
GEMMA3_LAYER_NAMES = {**LAYER_NAMES, "ffn_norm.weight": "pre_feedforward_layernorm.weight",
                      "post_attention_norm.weight": "post_attention_layernorm.weight",
                      "post_ffw_norm.weight": "post_feedforward_layernorm.weight"}
ROPE_FREQS = "rope_freqs.weight"  # Llama 3's RoPE scaling: read into the config, not a weight
_BLOCK_RE = re.compile(r"^blk\.(\d+)\.(.+)$")


def hf_tensor_name(gguf_name: str, source: str = "GGUF file", arch: str = "llama") -> str:
    """The HF checkpoint name of a llama.cpp tensor name."""
    if gguf_name in GLOBAL_NAMES:
        return GLOBAL_NAMES[gguf_name]
    m = _BLOCK_RE.match(gguf_name)
    names = GEMMA3_LAYER_NAMES if arch == "gemma3" else LAYER_NAMES
    if m and m.group(2) in names:
        return f"model.layers.{m.group(1)}.{names[m.group(2)]}"
    raise ModelError(f"{source}: tensor {gguf_name!r} has no equivalent in piegpu's {arch} layer (MoE experts, "
                     f"other architectures' tensors are not supported); supported: {sorted(names)}")


def permutes_qk(arch: str) -> bool:
    """Whether llama.cpp's converter permuted this architecture's q/k rows (for its adjacent-pair RoPE)."""
    return arch == "llama"


def norms_stored_plus_one(arch: str) -> bool:
    """Whether this architecture's GGUF stores RMSNorm weights as 1 + w (llama.cpp's Gemma converters)."""
    return arch == "gemma3"


def field(reader: Any, key: str, source: str, default: Any = ModelError) -> Any:
    """A metadata value; ModelError naming file and key when missing and no default is given."""
    f = reader.fields.get(key)
    if f is None:
        if default is ModelError:
            raise ModelError(f"{source}: GGUF metadata {key!r} is missing; the file is not a complete llama.cpp "
                             "model -- re-download it")
        return default
    return field_contents(f, key, source)


def f32_clean(x: float) -> float:
    """A float32 metadata value as the decimal it was written from (9.999999747378752e-06 -> 1e-05)."""
    return float(str(np.float32(x)))


def config_dict(reader: Any, source: str) -> tuple[dict, str, np.ndarray | None]:
    """(HF config.json keys, GGUF architecture, Llama 3 rope_freqs or None) of an open GGUF."""
    a = field(reader, "general.architecture", source)
    if a not in ARCHITECTURES:
        raise ModelError(f"{source}: general.architecture = {a!r} is not supported; piegpu reads "
                         f"{sorted(ARCHITECTURES)} GGUF files")
    get = lambda key, default=ModelError: field(reader, key, source, default)  # noqa: E731
    tensors = {t.name: t for t in reader.tensors}
    heads = int(get(f"{a}.attention.head_count"))
    hidden = int(get(f"{a}.embedding_length"))
    layers = int(get(f"{a}.block_count"))
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    vocab = get(f"{a}.vocab_size", None)
    if vocab is None:
        vocab = len(tokens.data) if tokens is not None else None
    if vocab is None:
        raise ModelError(f"{source}: neither {a}.vocab_size nor tokenizer.ggml.tokens is present; the file is "
                         "incomplete -- re-download it")
    head_dim = int(get(f"{a}.attention.key_length", hidden // max(heads, 1)))
    rot = int(get(f"{a}.rope.dimension_count", head_dim))
    if rot != head_dim:
        raise ModelError(f"{source}: partial rotary ({a}.rope.dimension_count {rot} < head_dim {head_dim}) is not "
                         "supported")
    d = {
        "architectures": [ARCHITECTURES[a]], "vocab_size": int(vocab), "hidden_size": hidden,
        "intermediate_size": int(get(f"{a}.feed_forward_length")), "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": int(get(f"{a}.attention.head_count_kv", heads)),
        "head_dim": head_dim, "rms_norm_eps": f32_clean(get(f"{a}.attention.layer_norm_rms_epsilon")),
        "rope_theta": f32_clean(get(f"{a}.rope.freq_base", 10000.0)),
        "tie_word_embeddings": "output.weight" not in tensors,
        "max_position_embeddings": int(get(f"{a}.context_length")),
        "bos_token_id": get("tokenizer.ggml.bos_token_id", None),
        "eos_token_id": get("tokenizer.ggml.eos_token_id", None),
    }
    scaling = get(f"{a}.rope.scaling.type", None)
    if scaling == "linear":
        d["rope_scaling"] = {"rope_type": "linear", "factor": f32_clean(get(f"{a}.rope.scaling.factor"))}
    elif scaling not in (None, "none"):
        raise ModelError(f"{source}: {a}.rope.scaling.type = {scaling!r} is not supported; supported: linear, and "
                         "Llama 3's scaling as a rope_freqs tensor")
    window = get(f"{a}.attention.sliding_window", None)
    if a == "llama" and window:
        d["architectures"] = ["MistralForCausalLM"]
        d["sliding_window"] = int(window)
    if a == "gemma3":
        pattern = get(f"{a}.attention.sliding_window_pattern", None)
        local = [bool(p) for p in pattern] if isinstance(pattern, list) else \
            [(i + 1) % int(pattern or 6) != 0 for i in range(layers)]
        if len(local) != layers:
            raise ModelError(f"{source}: {a}.attention.sliding_window_pattern has {len(local)} entries for "
                             f"{layers} layers; the file is corrupt")
        scale = get(f"{a}.attention.scale", None)
        d.update({"sliding_window": int(get(f"{a}.attention.sliding_window")),
                  "layer_types": ["sliding_attention" if s else "full_attention" for s in local],
                  "rope_local_base_freq": f32_clean(get(f"{a}.rope.freq_base_swa", 10000.0)),
                  "query_pre_attn_scalar": (1.0 / float(scale) ** 2) if scale else
                  (hidden / heads if layers == 62 else head_dim),
                  "hidden_activation": "gelu_pytorch_tanh"})
    factors = None
    if ROPE_FREQS in tensors:
        t = tensors[ROPE_FREQS]
        factors = np.asarray(t.data, np.float32).reshape(-1).copy()
        if t.tensor_type.name != "F32" or factors.size != head_dim // 2:
            raise ModelError(f"{source}: {ROPE_FREQS} is {t.tensor_type.name} with {factors.size} values; "
                             f"expected F32 with head_dim / 2 = {head_dim // 2}")
    return d, a, factors


def rope_with_factors(theta: float, factors: np.ndarray) -> Rope:
    """The RoPE of a GGUF with a rope_freqs tensor: each inverse frequency divided by its factor."""
    return Rope(float(theta), "factors", (("factors", tuple(float(f) for f in factors)),))
