"""Model families: what each supported architecture adds to the Llama layer, chosen at load time.

The forward pass (model/forward.py) and the numpy reference (model/reference.py) are one
function each; a family only switches steps on (a QKV bias, per-head q/k RMSNorm, a sliding
window on some layers, Gemma's embedding scale, (1 + w) norms, sandwich norms and GeGLU), it
never brings its own forward.
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
    # "gemma": per layer, from layer_types or sliding_window_pattern (every pattern-th layer global).
    sliding: str = "none"
    act: str = "silu"  # the MLP's gate activation: "silu" (SwiGLU) or "gelu_tanh" (GeGLU with tanh GELU: Gemma)
    embed_scale: bool = False  # embeddings times sqrt(hidden_size) (Gemma)
    norm_offset: bool = False  # RMSNorm weights are stored as w - 1: the norm multiplies by (1 + w) (Gemma)
    sandwich_norms: bool = False  # RMSNorm on the attention and MLP outputs before each residual add (Gemma 3)
    local_rope: bool = False  # sliding-window layers have a RoPE of their own (Gemma 3)
    # config keys this family reads that are refused for the others; class defaults differing from Llama's
    keys: frozenset = frozenset()
    defaults: tuple = ()

    @property
    def ffn_norm(self) -> str:
        """The checkpoint name (within a layer) of the RMSNorm on the MLP's input."""
        return "pre_feedforward_layernorm" if self.sandwich_norms else "post_attention_layernorm"

    @property
    def output_norms(self) -> tuple:
        """Names of the RMSNorms on the attention and MLP outputs (sandwich norms), or ()."""
        return ("post_attention_layernorm", "post_feedforward_layernorm") if self.sandwich_norms else ()


FAMILIES: dict[str, Family] = {
    "LlamaForCausalLM": Family("llama"),
    "MistralForCausalLM": Family("mistral", sliding="all"),
    "Qwen2ForCausalLM": Family("qwen2", qkv_bias=True, sliding="layer_types"),
    "Qwen3ForCausalLM": Family("qwen3", qk_norm=True, sliding="layer_types"),
    "Gemma3ForCausalLM": Family(
        "gemma3_text", qk_norm=True, sliding="gemma", act="gelu_tanh", embed_scale=True, norm_offset=True,
        sandwich_norms=True, local_rope=True, keys=frozenset({"query_pre_attn_scalar", "hidden_activation"}),
        defaults=(("rms_norm_eps", 1e-6), ("tie_word_embeddings", True), ("max_position_embeddings", 131072),
                  ("bos_token_id", 2), ("eos_token_id", 1), ("head_dim", 256), ("query_pre_attn_scalar", 256),
                  ("sliding_window", 4096), ("hidden_activation", "gelu_pytorch_tanh"))),
}
