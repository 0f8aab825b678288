"""The user-facing encoder: a BERT / RoBERTa / XLM-R checkpoint that embeds texts and reranks documents.

load_model() returns one for a directory whose config.json names an encoder architecture
(model/encoder_config.py); its passes run on the device (model/encoder_gpu.py), texts of a
call packed end to end into passes of up to max_pass_tokens tokens.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

from ..errors import ModelError, ValidationError
from ..model.encoder_config import EncoderConfig
from ..model.encoder_gpu import DEFAULT_PASS_TOKENS, GpuEncoder
from ..model.encoder_weights import read_encoder
from ..runtime.device import MODEL_CLOSED
from .embedding import as_inputs, check_dimensions, finish, Truncating, pair_tokens, resolve_pooling, tokenized

DEFAULT_POOLING = "mean"  # an encoder without sentence-transformers' config: what sentence-transformers itself uses


class EncoderModel:
    """An encoder on the device: embed(texts) -> vectors, rerank(query, documents) -> scores (cross-encoders)."""

    def __init__(self, config: EncoderConfig, tokenizer, gpu: GpuEncoder, source: str, info: dict):
        self.config = config
        self.tokenizer = tokenizer
        self.gpu = gpu
        self.source = source
        self._info = info
        self._cutter = None

    # ---- lifetime ----------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """Whether close() was called."""
        return self.gpu.closed

    def close(self) -> int:
        """Release the device buffers; returns the weight bytes released. Later calls raise."""
        if self.gpu.closed:
            return 0
        self.gpu.release()
        return self.gpu.weight_bytes

    def __enter__(self) -> "EncoderModel":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EncoderModel({self.source!r}, {self.config.architecture}, dim {self.config.hidden_size})"

    @property
    def info(self) -> dict:
        """What the model is: name, source, architecture, dimensions, pooling, max tokens, parameters."""
        return dict(self._info)

    @property
    def dimensions(self) -> int:
        """The length of its embeddings (before `dimensions` truncation)."""
        return self.config.hidden_size

    @property
    def max_tokens(self) -> int:
        """The most tokens one input (or query + document pair) may have."""
        return self.config.max_tokens

    @property
    def is_reranker(self) -> bool:
        """Whether it has a scoring head (rerank) rather than being an embedder."""
        return self.config.head is not None

    # ---- embeddings and scores --------------------------------------------------------------------
    def tokenize(self, texts, truncate: bool = False) -> list:
        """[(token ids, token type ids)] of each input as embed() feeds them (checked against max_tokens)."""
        return self._types(tokenized(self.tokenizer, self._truncating, as_inputs(texts), self.max_tokens, truncate))

    def embed(self, texts, normalize: bool = True, dimensions: int | None = None, *, pooling: str | None = None,
              truncate: bool = False) -> np.ndarray:
        """Embeddings [len(texts), dimensions] (float32) of a string, a list of strings or of token-id lists.

        pooling: mean / cls / last / max (default: the model's sentence-transformers config, else mean);
        dimensions keeps the leading ones (Matryoshka) before `normalize`; an input over max_tokens is an
        error unless `truncate` (then cut as sentence-transformers cuts it).
        """
        self._check_open()
        dims = check_dimensions(dimensions, self.config.hidden_size)
        mode = resolve_pooling(pooling, self.config.pooling, DEFAULT_POOLING, self.source)
        pooled = self.gpu.run(self.tokenize(texts, truncate), mode)
        return finish(pooled, normalize, dims)

    def rerank(self, query: str, documents, truncate: bool = False) -> list:
        """One relevance score per document (the cross-encoder's logit: higher is more relevant)."""
        self._check_open()
        if not self.is_reranker:
            raise ValidationError(f"{self.source} is an embedding model, not a reranker (its config.json names "
                                  f"{self.config.architecture}, no *ForSequenceClassification head). Fix: load a "
                                  "cross-encoder such as bge-reranker, or rank by embed() cosine similarity")
        if self.config.num_labels != 1:
            raise ValidationError(f"{self.source}: a reranker scores with one label; this head has "
                                  f"{self.config.num_labels}")
        if not isinstance(query, str) or not query:
            raise ValidationError("rerank: the query must be a non-empty string")
        if isinstance(documents, str):
            documents = [documents]
        if not documents or not all(isinstance(d, str) and d for d in documents):
            raise ValidationError("rerank: documents must be a non-empty list of non-empty strings")
        pairs = self._types([pair_tokens(self.tokenizer, self._truncating, query, d, self.max_tokens, truncate, f"document {i}")
                             for i, d in enumerate(documents)])
        return [float(s) for s in self.gpu.run(pairs, "cls", scores=True)[:, 0]]

    def _types(self, encoded: list) -> list:
        """Token types as the model has them: all 0 where it has one type (XLM-R: its own tokenizer gives 0s)."""
        if self.config.type_vocab_size > 1:
            return encoded
        return [(ids, [0] * len(ids)) for ids, _ in encoded]

    def _truncating(self):
        if self._cutter is None:
            self._cutter = Truncating(self.tokenizer, self.max_tokens)
        return self._cutter

    def _check_open(self) -> None:
        if self.gpu.closed:
            raise ValidationError(MODEL_CLOSED)


def encoder_tokenizer(path: Path):
    """tokenizer.json of an encoder directory, else a WordPiece tokenizer from its vocab.txt (older BERT dirs)."""
    from tokenizers import Tokenizer
    if (path / "tokenizer.json").is_file():
        from ..model.tokenizer import load_tokenizer
        t = load_tokenizer(path)
    elif (path / "vocab.txt").is_file():
        import json
        from tokenizers.implementations import BertWordPieceTokenizer
        cfg_file = path / "tokenizer_config.json"
        cfg = json.loads(cfg_file.read_text(encoding="utf-8")) if cfg_file.is_file() else {}
        t = BertWordPieceTokenizer(str(path / "vocab.txt"), lowercase=cfg.get("do_lower_case", True))
        t = Tokenizer.from_str(t.to_str())
    else:
        raise ModelError(f"{path}: no tokenizer.json or vocab.txt. Fix: copy the checkpoint's tokenizer files here")
    t.no_padding()
    t.no_truncation()
    return t


def tokenizer_max_length(path: Path) -> int | None:
    """tokenizer_config.json's model_max_length where it sets a real one (transformers writes 1e30 for none)."""
    import json
    cfg = path / "tokenizer_config.json"
    try:
        value = json.loads(cfg.read_text(encoding="utf-8")).get("model_max_length") if cfg.is_file() else None
    except (OSError, ValueError):
        return None
    return int(value) if isinstance(value, (int, float)) and 0 < value < 1 << 20 else None


def load_encoder(path, verbose: bool = True, device=None, dtype: str | None = None,
                 max_pass_tokens: int = DEFAULT_PASS_TOKENS) -> EncoderModel:
    """Read an encoder directory (config.json + safetensors + tokenizer) and upload it: an EncoderModel (weights
    as f16 or f32 rows: `dtype`, default the checkpoint's own precision)."""
    t0 = time.perf_counter()
    path = Path(path)
    config = EncoderConfig.from_dir(path)
    tokenizer = encoder_tokenizer(path)
    if config.max_seq_length is None and (cap := tokenizer_max_length(path)):  # what sentence-transformers cuts at
        config = dataclasses.replace(config, max_seq_length=cap)
    if verbose:
        print(f"piegpu: reading {config.architecture} weights from {path}", file=sys.stderr, flush=True)
    weights = read_encoder(path, config)
    params = sum(int(np.prod(v.shape)) for v in (weights.word, weights.positions, weights.types)) + sum(
        int(np.prod(m.shape)) for L in weights.layers for m in (L.qkv, L.o, L.up, L.down))
    gpu = GpuEncoder(weights, device, dtype=dtype, max_pass_tokens=max_pass_tokens)
    del weights
    if verbose:
        print(f"piegpu: {path.name} ready on {gpu.dev.name} ({gpu.weight_bytes / 1e6:.0f} MB of weights, "
              f"{time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
    pooling = config.pooling
    info = {"name": path.name, "source": str(path), "architecture": config.architecture, "kind":
            "reranker" if config.head else "embedding", "dimensions": config.hidden_size,
            "pooling": pooling.mode if pooling else DEFAULT_POOLING, "normalize": bool(pooling and pooling.normalize),
            "max_tokens": config.max_tokens, "parameters": params, "dtype": gpu.dtype}
    return EncoderModel(config, tokenizer, gpu, str(path), info)
