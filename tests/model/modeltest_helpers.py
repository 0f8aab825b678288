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


def add_hparams(w, config: LlamaConfig) -> None:
    """Write the hyperparameters of `config` both writers share (sizes, heads, RoPE, norm eps, vocab) to `w`."""
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


def write_tiny_gguf(path: Path, config: LlamaConfig, weights: dict[str, np.ndarray], quant: str = "F32",
                    split_max_tensors: int = 0) -> Path:
    """Write `weights` (HF names) as a llama.cpp GGUF, permuting Q/K rows like convert_hf_to_gguf
    (split_max_tensors > 0: gguf-split's shards NAME-0000i-of-0000n.gguf beside `path`)."""
    import gguf

    qtype = gguf.GGMLQuantizationType[quant]
    tokens = byte_level_vocab()
    assert len(tokens) == config.vocab_size, (len(tokens), config.vocab_size)
    w = gguf.GGUFWriter(str(path), "llama", split_max_tensors=split_max_tensors)
    w.add_name("tiny test llama")
    add_hparams(w, config)
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


# ---- K-quant writers (gguf 0.19 dequantizes K-quants but cannot quantize them) ------------------------
# Plain min/max encodings in the exact GGUF block layouts (not llama.cpp's error-minimising search):
# valid blocks that gguf.quants.dequantize reads back, good enough to test a model within each format's step.

def _f16(x):
    return np.asarray(x, np.float32).astype(np.float16)


def _pack_scales_q4k(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """12 bytes of 6-bit scales and mins per super-block (the layout of gguf's Q4_K.get_scale_min)."""
    out = np.zeros((sc.shape[0], 12), np.uint8)
    out[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = (m[:, 0:4] & 63) | ((m[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 15) | ((m[:, 4:8] & 15) << 4)
    return out


def _q_k_minmax(x: np.ndarray, levels: int):
    """Per 32-weight sub-block: d, dmin (f16), 6-bit sc and m, and the quantized values."""
    n = x.shape[0]
    sub = x.reshape(n, 8, 32)
    mn = np.minimum(sub.min(axis=2), 0)
    scale = (sub.max(axis=2) - mn) / levels
    d = _f16(scale.max(axis=1) / 63)
    dmin = _f16((-mn).max(axis=1) / 63)
    df, dminf = d.astype(np.float32), dmin.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df[:, None] > 0, np.rint(scale / df[:, None]), 0).clip(0, 63).astype(np.uint8)
        m = np.where(dminf[:, None] > 0, np.rint(-mn / dminf[:, None]), 0).clip(0, 63).astype(np.uint8)
        D = df[:, None] * sc
        M = dminf[:, None] * m
        q = np.where(D[:, :, None] > 0, np.rint((sub + M[:, :, None]) / D[:, :, None]), 0)
    return d, dmin, sc, m, q.clip(0, levels).astype(np.uint8)


def quantize_k(w: np.ndarray, qtype: str) -> np.ndarray:
    """A float matrix [rows, cols] (cols % 256 == 0) as Q4_K / Q5_K / Q6_K blocks: uint8 [rows, row_bytes]."""
    rows, cols = w.shape
    x = np.ascontiguousarray(w, np.float32).reshape(-1, 256)
    n = x.shape[0]
    if qtype in ("Q4_K", "Q5_K"):
        d, dmin, sc, m, q = _q_k_minmax(x, 15 if qtype == "Q4_K" else 31)
        lo = (q & 15).reshape(n, 4, 2, 32)
        qs = (lo[:, :, 0] | (lo[:, :, 1] << 4)).reshape(n, 128)
        parts = [d.view(np.uint8).reshape(n, 2), dmin.view(np.uint8).reshape(n, 2), _pack_scales_q4k(sc, m)]
        if qtype == "Q5_K":
            hi = (q >> 4).reshape(n, 8, 32)  # bit s of qh[i] = high bit of sub-block s's weight i
            parts.append(sum((hi[:, s].astype(np.uint8) << s) for s in range(8)).astype(np.uint8))
        out = np.concatenate(parts + [qs], axis=1)
    elif qtype == "Q6_K":
        sub = x.reshape(n, 16, 16)
        amax_i = np.abs(sub).argmax(axis=2)
        scale = -np.take_along_axis(sub, amax_i[:, :, None], axis=2)[:, :, 0] / 32
        d = _f16(np.abs(scale).max(axis=1) / 127)
        df = d.astype(np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            sc = np.where(df[:, None] > 0, np.rint(scale / df[:, None]), 0).clip(-128, 127).astype(np.int8)
            D = df[:, None] * sc.astype(np.float32)
            q = np.where(D[:, :, None] != 0, np.rint(sub / D[:, :, None]), 0)
        q = (q.clip(-32, 31) + 32).astype(np.uint8).reshape(n, 256)
        ql = np.zeros((n, 128), np.uint8)
        qh = np.zeros((n, 64), np.uint8)
        for h in range(2):
            base = 128 * h
            ql[:, 64 * h: 64 * h + 64] = (q[:, base: base + 64] & 15) | ((q[:, base + 64: base + 128] & 15) << 4)
            for s in range(4):
                qh[:, 32 * h: 32 * h + 32] |= ((q[:, base + 32 * s: base + 32 * s + 32] >> 4) & 3) << (2 * s)
        out = np.concatenate([ql, qh, sc.view(np.uint8), d.view(np.uint8).reshape(n, 2)], axis=1)
    else:
        raise ValueError(qtype)
    return out.reshape(rows, -1)


def quantize_iq4_nl(w: np.ndarray) -> np.ndarray:
    """IQ4_NL blocks (uint8 [rows, 18 a block]) of w: d from the block's largest magnitude (it maps to level -127, as
    llama.cpp starts its search), each weight the nearest of the 16 levels (no search over d: a valid, rougher file)."""
    from piegpu.model.gpu_weights import IQ4_NL_LEVELS
    rows, cols = w.shape
    b = np.asarray(w, np.float32).reshape(-1, 32)
    big = b[np.arange(len(b)), np.abs(b).argmax(axis=1)]
    d = (big / np.float32(-127)).astype(np.float16)
    inv = np.where(d != 0, 1 / d.astype(np.float32), 0)[:, None]
    idx = np.abs(b[:, :, None] * inv[:, :, None] - IQ4_NL_LEVELS.astype(np.float32)).argmin(axis=2).astype(np.uint8)
    out = np.empty((len(b), 18), np.uint8)
    out[:, :2] = d.view(np.uint8).reshape(-1, 2)
    out[:, 2:] = idx[:, :16] | (idx[:, 16:] << 4)
    return out.reshape(rows, -1)


def quantize_any(w: np.ndarray, qtype: str) -> tuple:
    """(GGUF data, type actually used) for a matrix: K-quants of rows that are not whole 256-weight
    super-blocks fall back as llama.cpp's quantizer does (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0)."""
    import gguf
    if qtype in ("Q4_K", "Q5_K", "Q6_K"):
        if w.shape[1] % 256 == 0:
            return quantize_k(w, qtype), qtype
        qtype = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}[qtype]
    if qtype == "F32":
        return np.ascontiguousarray(w, np.float32), qtype
    if qtype == "IQ4_NL":  # gguf-py dequantizes IQ4_NL but cannot quantize it
        return quantize_iq4_nl(w), qtype
    t = gguf.GGMLQuantizationType[qtype]
    return gguf.quants.quantize(np.ascontiguousarray(w, np.float32), t), qtype


# ---- HF checkpoints (the family fixtures) as GGUF files, as llama.cpp's convert_hf_to_gguf writes them ---------

_GGUF_ARCH = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
              "Qwen3ForCausalLM": "qwen3", "Gemma3ForCausalLM": "gemma3"}


def llama3_rope_factors(config: LlamaConfig) -> np.ndarray:
    """rope_freqs.weight as convert_hf_to_gguf computes it for rope_type llama3."""
    import math
    r = config.rope
    factor, low, high = r.field("factor"), r.field("low_freq_factor"), r.field("high_freq_factor")
    old = r.field("original_max_position_embeddings")
    freqs = 1.0 / (config.rope_theta ** (np.arange(0, config.head_dim, 2, dtype=np.float32) / config.head_dim))
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, np.float32)


def _gguf_tensor_name(hf: str, arch: str) -> str:
    from piegpu.model.gguf_arch import GEMMA3_LAYER_NAMES, GLOBAL_NAMES, LAYER_NAMES
    inverse = {v: k for k, v in GLOBAL_NAMES.items()}
    if hf in inverse:
        return inverse[hf]
    _, _, i, rest = hf.split(".", 3)
    names = {v: k for k, v in (GEMMA3_LAYER_NAMES if arch == "gemma3" else LAYER_NAMES).items()}
    return f"blk.{i}.{names[rest]}"


def write_checkpoint_gguf(model_dir: Path, path: Path, qtype) -> dict:
    """The HF checkpoint in `model_dir` as a GGUF with every matrix in `qtype` (vectors F32); `qtype` may be
    a function of the HF tensor name (mixes such as Q4_K_M).

    Returns {GGUF tensor name: type used} (K-quants fall back on rows that are not whole super-blocks).
    """
    import gguf
    from piegpu.model.checkpoint import load_checkpoint
    config, tensors = load_checkpoint(model_dir)
    arch = _GGUF_ARCH[config.architecture]
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"{model_dir.name} fixture")
    add_hparams(w, config)
    w.add_key_length(config.head_dim)
    w.add_value_length(config.head_dim)
    if config.rope.type == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(config.rope.field("factor"))
    if config.family.sliding == "all" and config.layer_windows and any(config.layer_windows):
        w.add_sliding_window(max(config.layer_windows))
    if arch == "gemma3":
        w.add_sliding_window(max(config.layer_windows))
        w.add_sliding_window_pattern([bool(config.window(i)) for i in range(config.num_hidden_layers)])
        w.add_rope_freq_base_swa(config.rope_local.theta)
        w.add_attention_scale(config.attention_scale)
    fields = gguf_tokenizer_fields(model_dir / "tokenizer.json", "gpt2")
    add_tokenizer(w, fields)
    w.add_eos_token_id(config.eos_token_ids[0])
    used = {}
    if config.rope.type == "llama3":
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(config))
    for name, arr in tensors.items():
        gname = _gguf_tensor_name(name, arch)
        arr = np.asarray(arr, np.float32)
        if arch == "llama" and name.endswith("q_proj.weight"):
            arr = permute_qk_rows(arr, config.num_attention_heads)
        elif arch == "llama" and name.endswith("k_proj.weight"):
            arr = permute_qk_rows(arr, config.num_key_value_heads)
        if arch == "gemma3" and name.endswith("norm.weight"):
            arr = arr + np.float32(1)  # llama.cpp's Gemma converters store 1 + w
        if arr.ndim == 1:
            w.add_tensor(gname, np.ascontiguousarray(arr))
            continue
        data, used[gname] = quantize_any(arr, qtype(name) if callable(qtype) else qtype)
        if used[gname] == "F32":
            w.add_tensor(gname, data)
        else:
            w.add_tensor(gname, data, raw_dtype=gguf.GGMLQuantizationType[used[gname]])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return used
