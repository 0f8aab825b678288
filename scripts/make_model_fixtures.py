"""Regenerate tests/fixtures/models/<family>/: tiny random checkpoints made with transformers' own model classes.

Per family: config.json + model.safetensors (saved by save_pretrained, float32), a tiny byte-level
BPE tokenizer.json, and expected.npz with transformers' logits (torch, CPU, float32) at every
position of a 40-token sequence plus 16 greedy tokens (full recomputation per step, no stop token).
tests/model/test_families.py checks piegpu and the numpy reference against these without torch.

Needs torch and transformers, for this script only (never a test dependency):
    pip install torch==2.13.0 transformers     # the CPU build of torch; never a CUDA one
    python3 scripts/make_model_fixtures.py
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "models"
VOCAB = 320
SEQ, GREEDY = 40, 16
MIN_GAP = 0.01  # greedy steps decided by at least this logit margin: far above f32 noise (~1e-5) on any adapter
# A little text to train the tokenizer on and to take the 40-token sequence from.
TEXT = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
    "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, "
    "it was the season of Darkness, it was the spring of hope, it was the winter of despair. "
    "def add(a, b):\n    return a + b  # 1234567890\n"
)

# family -> (transformers config class name, model class name, config fields: the family's real quirks)
COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)
FAMILIES = {
    # Llama 3.x: llama3 RoPE scaling, tied embeddings, theta 500000 (Llama-3.2-1B's settings, scaled down)
    "llama3": ("LlamaConfig", "LlamaForCausalLM", dict(
        tie_word_embeddings=True, head_dim=16,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    # Mistral: a sliding window shorter than the sequence, untied lm_head
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(
        tie_word_embeddings=False, sliding_window=12, head_dim=16,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    # Qwen2/2.5: q/k/v bias, tied embeddings, no sliding window (use_sliding_window false, as released)
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(
        tie_word_embeddings=True, use_sliding_window=False, max_window_layers=3,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    # Qwen3: per-head q/k RMSNorm, head_dim * heads != hidden_size (as in Qwen3-0.6B), tied embeddings
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(
        tie_word_embeddings=True, head_dim=32, attention_bias=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    # Gemma 3: embedding scale, (1 + w) RMSNorm, sandwich norms, GeGLU-tanh, q/k norm, local sliding-window
    # layers with their own RoPE base between global ones (linear-scaled RoPE, as Gemma 3 4B+), an attention
    # scale from query_pre_attn_scalar that differs from head_dim (as Gemma 3 27B), one KV head (as 270M)
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        tie_word_embeddings=True, head_dim=32, num_key_value_heads=1, query_pre_attn_scalar=24, sliding_window=8,
        hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}})),
}


def make_tokenizer():
    """A byte-level BPE of VOCAB tokens trained on TEXT (tokenizers is a piegpu dependency anyway)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([TEXT] * 4, trainer)
    return tok


def randomize(model, seed: int) -> None:
    """Weights big enough that logits are far from uniform (transformers' 0.02 init gives near-ties)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5 * 1.5)


def greedy(model, ids: list) -> tuple:
    """16 greedy tokens by full recomputation (independent of transformers' cache and stop rules), smallest margin."""
    import torch
    seq, gap = list(ids), float("inf")
    with torch.no_grad():
        for _ in range(GREEDY):
            row = model(torch.tensor([seq])).logits[0, -1]
            top = torch.topk(row, 2).values
            gap = min(gap, float(top[0] - top[1]))
            seq.append(int(row.argmax()))
    return seq[len(ids):], gap


def make_family(name: str, seed: int, tok) -> None:
    import torch
    import transformers
    conf_cls, model_cls, fields = FAMILIES[name]
    config = getattr(transformers, conf_cls)(**{**COMMON, **fields})
    ids = tok.encode(TEXT).ids[:SEQ]
    assert len(ids) == SEQ, len(ids)
    for seed in range(seed, seed + 1000, 100):  # the first seed whose greedy tokens are not near-ties
        torch.manual_seed(seed)
        model = getattr(transformers, model_cls)(config).eval().float()
        randomize(model, seed)
        tokens, gap = greedy(model, ids)
        if gap >= MIN_GAP:
            break
    else:
        raise SystemExit(f"{name}: no seed gave greedy margins >= {MIN_GAP}")
    out = OUT / name
    shutil.rmtree(out, ignore_errors=True)
    model.save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").unlink(missing_ok=True)
    tok.save(str(out / "tokenizer.json"))
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float().numpy()
    np.savez_compressed(out / "expected.npz", ids=np.array(ids, np.int32), logits=logits.astype(np.float32),
                        greedy=np.array(tokens, np.int32))
    meta = {"family": name, "model_class": model_cls, "transformers": transformers.__version__,
            "torch": torch.__version__, "seed": seed, "min_greedy_margin": round(gap, 4)}
    (out / "fixture.json").write_text(json.dumps(meta, indent=2) + "\n")
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"{name}: {model_cls}, {size / 1e3:.0f} kB, greedy {tokens} (smallest margin {gap:.3f})")


def main() -> None:
    """Write every family's fixture directory."""
    tok = make_tokenizer()
    names = sys.argv[1:] or list(FAMILIES)
    for seed, name in enumerate(FAMILIES):
        if name in names:
            make_family(name, seed, tok)


if __name__ == "__main__":
    main()
