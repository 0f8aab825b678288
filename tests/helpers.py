"""Shared builders for tests: tiny random Llama models on the GPU, the default model once per session."""

from __future__ import annotations

import numpy as np

from piegpu.model.checkpoint import expected_shapes
from piegpu.model.config import LlamaConfig


def tiny_config(hidden=96, inter=160, layers=2, heads=3, kv_heads=1, vocab=300, max_pos=256, head_dim=None,
                tied=True) -> LlamaConfig:
    """A small Llama config (sizes are multiples of 32 as the GPU path needs)."""
    d = dict(architectures=["LlamaForCausalLM"], vocab_size=vocab, hidden_size=hidden, intermediate_size=inter,
             num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads, rms_norm_eps=1e-5,
             rope_theta=10000.0, tie_word_embeddings=tied, max_position_embeddings=max_pos, bos_token_id=1,
             eos_token_id=2)
    if head_dim is not None:
        d["head_dim"] = head_dim
    return LlamaConfig.from_dict(d)


def random_tensors(cfg: LlamaConfig, seed: int = 0, scale: float = 0.2) -> dict:
    """Random HF-named float32 weights for cfg (norm weights near 1)."""
    rng = np.random.default_rng(seed)
    t = {}
    for k, s in expected_shapes(cfg).items():
        if "norm" in k:
            t[k] = (1 + 0.1 * rng.standard_normal(s)).astype(np.float32)
        else:
            t[k] = (rng.standard_normal(s) * scale).astype(np.float32)
    return t


class AllowTokens:
    """A constraint that allows a fixed set of tokens (a stand-in grammar with a known answer).

    It has what a batch row's grammar needs: mask_into(words) and consume(token), which
    asserts that the token drawn was allowed.
    """

    def __init__(self, allowed):
        self.allowed, self.consumed = sorted(allowed), []

    def mask_into(self, words):
        words[:] = 0
        for t in self.allowed:
            words[t >> 5] |= np.uint32(1 << (t & 31))

    def consume(self, token):
        assert token in self.allowed, f"token {token} was not allowed"
        self.consumed.append(token)


class NullTokenizer:
    """Stands in for a tokenizer in runtime tests of random models (ids are decoded as their numbers)."""

    def encode(self, text):
        class E:
            ids = [int(x) for x in text.split()]
        return E()

    def decode(self, ids):
        return "".join(f"<{i}>" for i in ids)


def tiny_model(cfg: LlamaConfig | None = None, seed: int = 0, fmt: str = "f32", max_binding: int | None = None,
               kv_mb: float | None = None, kv_dtype: str = "f32"):
    """(piegpu Model on the GPU, its numpy ReferenceModel) for a random tiny model."""
    from piegpu.model.gpu_model import GpuModel
    from piegpu.model.weights import weights_from_tensors
    from piegpu.textgen.model import Model
    from piegpu.model.reference import ReferenceModel
    cfg = cfg or tiny_config()
    t = random_tensors(cfg, seed)
    if fmt == "f16":  # the reference sees exactly the f16-rounded weights the GPU uses
        t = {k: (v.astype(np.float16).astype(np.float32) if v.ndim == 2 else v) for k, v in t.items()}
    gpu = GpuModel(weights_from_tensors(cfg, t, fmt), max_binding=max_binding, kv_mb=kv_mb, kv_dtype=kv_dtype)
    return Model(cfg, NullTokenizer(), gpu, "tiny", None), ReferenceModel(cfg, t)


async def run_ahead_tokens(pipe, fwd, token_out, n: int) -> list:
    """The tokens a device decode loop puts into `token_out` over n passes run ahead (one host read each)."""
    out = []

    async def on_token():
        out.append(await token_out.take_scalar())
        return True

    await pipe.run_ahead(fwd, n, on_token)
    return out
