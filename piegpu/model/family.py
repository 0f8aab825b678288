"""Model families: what each supported architecture adds to the Llama layer, chosen at load time.

The forward pass (model/forward.py) and the numpy reference (model/reference.py) are one
function each; a family only switches steps on (a QKV bias, per-head q/k RMSNorm, a sliding
window on some layers), it never brings its own forward.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    """The per-family steps of a Llama-style decoder layer."""

    model_type: str  # HF config.json "model_type"
    qkv_bias: bool = False  # q/k/v projections carry a bias (Qwen2/2.5); o_proj has none
    qk_norm: bool = False  # RMSNorm over each q and k head before RoPE (Qwen3)
    # Where config.json says which layers attend through a sliding window:
    # "none": the architecture has no sliding window (transformers ignores the key);
    # "all": every layer when sliding_window is set (Mistral);
    # "layer_types": per layer, from layer_types or use_sliding_window + max_window_layers (Qwen2/3).
    sliding: str = "none"


FAMILIES: dict[str, Family] = {
    "LlamaForCausalLM": Family("llama"),
    "MistralForCausalLM": Family("mistral", sliding="all"),
    "Qwen2ForCausalLM": Family("qwen2", qkv_bias=True, sliding="layer_types"),
    "Qwen3ForCausalLM": Family("qwen3", qk_norm=True, sliding="layer_types"),
}
