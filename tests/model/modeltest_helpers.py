"""Builders for tests/model: tiny random Llama configs and weights, and tiny GGUF files."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from piegpu.model.checkpoint import expected_shapes
from piegpu.model.config import LlamaConfig
from piegpu.model.gguf_convert import permute_qk_rows
from piegpu.model.tokenizer import SMOLLM2_CHAT_TEMPLATE

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a"]


def tiny_config(**overrides) -> LlamaConfig:
    """A small GQA Llama config; override any field."""
    fields = dict(
        vocab_size=37,
        hidden_size=24,
        intermediate_size=40,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=4,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
    )
    fields.update(overrides)
    return LlamaConfig(**fields)


def random_weights(config: LlamaConfig, seed: int = 0, scale: float = 0.3) -> dict[str, np.ndarray]:
    """Random float32 weights of every expected tensor (norm weights around 1)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in expected_shapes(config).items():
        if name.endswith("norm.weight"):
            out[name] = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            out[name] = (scale * rng.standard_normal(shape)).astype(np.float32)
    return out


def byte_level_vocab() -> list[str]:
    """Specials, the 256 byte-level symbols, then the merge results."""
    from tokenizers import pre_tokenizers

    tokens = list(SPECIAL_TOKENS) + sorted(pre_tokenizers.ByteLevel.alphabet())
    tokens += [m.replace(" ", "") for m in MERGES]
    return tokens


def write_tiny_gguf(path: Path, config: LlamaConfig, weights: dict[str, np.ndarray], quant: str = "F32") -> Path:
    """Write `weights` (HF names) as a llama.cpp GGUF, permuting Q/K rows like convert_hf_to_gguf."""
    import gguf

    qtype = gguf.GGMLQuantizationType[quant]
    tokens = byte_level_vocab()
    assert len(tokens) == config.vocab_size, (len(tokens), config.vocab_size)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny test llama")
    w.add_block_count(config.num_hidden_layers)
    w.add_context_length(config.max_position_embeddings)
    w.add_embedding_length(config.hidden_size)
    w.add_feed_forward_length(config.intermediate_size)
    w.add_head_count(config.num_attention_heads)
    w.add_head_count_kv(config.num_key_value_heads)
    w.add_rope_freq_base(config.rope_theta)
    w.add_layer_norm_rms_eps(config.rms_norm_eps)
    w.add_vocab_size(config.vocab_size)
    w.add_rope_dimension_count(config.head_dim)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([3] * len(SPECIAL_TOKENS) + [1] * (len(tokens) - len(SPECIAL_TOKENS)))
    w.add_token_merges(MERGES)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(2)
    w.add_chat_template(SMOLLM2_CHAT_TEMPLATE)

    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    layer_names = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
                   "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
                   "self_attn.o_proj.weight": "attn_output.weight",
                   "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
                   "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}
    for name, arr in weights.items():
        if name.startswith("model.layers."):
            _, _, i, rest = name.split(".", 3)
            gname = f"blk.{i}.{layer_names[rest]}"
        else:
            gname = names[name]
        if name.endswith("q_proj.weight"):
            arr = permute_qk_rows(arr, config.num_attention_heads)
        elif name.endswith("k_proj.weight"):
            arr = permute_qk_rows(arr, config.num_key_value_heads)
        if arr.ndim == 1 or qtype == gguf.GGMLQuantizationType.F32:
            w.add_tensor(gname, np.ascontiguousarray(arr, dtype=np.float32))
        else:
            w.add_tensor(gname, gguf.quants.quantize(np.ascontiguousarray(arr), qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def gguf_tiny_config(**overrides) -> LlamaConfig:
    """A config whose rows are whole 32-weight blocks, with the byte-level test vocabulary."""
    fields = dict(vocab_size=len(byte_level_vocab()), hidden_size=64, intermediate_size=96,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    fields.update(overrides)
    return tiny_config(**fields)


def gguf_tokenizer_fields(tokenizer_json: Path, pre: str | None = None, spm: dict | None = None) -> dict:
    """What llama.cpp's convert_hf_to_gguf writes as tokenizer.ggml.* for an HF tokenizer.json.

    Byte-level BPE: the vocabulary in id order (added tokens included), token types (3 control for
    special added tokens, 4 user-defined for other added ones, 1 normal), merges as "left right",
    tokenizer.ggml.pre naming the split regex. SentencePiece: the pieces, scores and types of
    tokenizer.model (`spm`: the fixture's stand-in for it) and add_space_prefix.
    """
    import json
    doc = json.loads(Path(tokenizer_json).read_text(encoding="utf-8"))
    if spm is not None:
        pieces = spm["pieces"]
        return {"model": "llama", "tokens": [p[0] for p in pieces], "scores": [float(p[1]) for p in pieces],
                "types": [int(p[2]) for p in pieces], "add_space_prefix": spm["add_space_prefix"],
                "bos": spm["bos"], "eos": spm["eos"], "unk": spm["unk"], "add_bos": True}
    vocab = dict(doc["model"]["vocab"])
    kinds = {}
    for a in doc["added_tokens"]:
        vocab[a["content"]] = a["id"]
        kinds[a["id"]] = 3 if a["special"] else 4
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    assert None not in tokens, "ids must be 0..n-1"
    merges = [m if isinstance(m, str) else " ".join(m) for m in doc["model"]["merges"]]
    post = json.dumps(doc.get("post_processor"))
    first = next((a for a in doc["added_tokens"] if a["content"] in post and "Template" in post), None)
    return {"model": "gpt2", "pre": pre, "tokens": tokens, "types": [kinds.get(i, 1) for i in range(len(tokens))],
            "merges": merges, "bos": first["id"] if first else None, "add_bos": first is not None}


def add_tokenizer(w, f: dict) -> None:
    """Write gguf_tokenizer_fields() into a gguf.GGUFWriter."""
    w.add_tokenizer_model(f["model"])
    w.add_token_list(f["tokens"])
    w.add_token_types(f["types"])
    if f["model"] == "gpt2":
        w.add_tokenizer_pre(f["pre"])
        w.add_token_merges(f["merges"])
    else:
        w.add_token_scores(f["scores"])
        w.add_add_space_prefix(f["add_space_prefix"])
        w.add_unk_token_id(f["unk"])
        w.add_eos_token_id(f["eos"])
    if f["bos"] is not None:
        w.add_bos_token_id(f["bos"])
    w.add_add_bos_token(f["add_bos"])
