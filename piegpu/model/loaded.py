"""load_model(): a model ready to run -- config, tokenizer, weights on the device."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ..errors import ModelError, ValidationError
from .config import LlamaConfig
from .gpu_model import GpuModel
from .weights import weights_from_gguf, weights_from_tensors
from .packed import load_packed, save_packed, source_digest
from .tokenizer import chat_prompt, load_chat_template, load_tokenizer

SESSION_ROUND = 256  # the shared session's working set grows in steps of this many tokens


class Model:
    """A loaded model: `tokenizer`, `config`, device weights, and the high-level generate API."""

    def __init__(self, config: LlamaConfig, tokenizer, gpu: GpuModel, source: str, chat_template: str | None):
        self.config = config
        self.tokenizer = tokenizer
        self.gpu = gpu
        self.source = source
        self.chat_template = chat_template
        self._default_pipeline = None
        self._shared_session = None

    def __repr__(self) -> str:
        return f"<piegpu.Model {self.source}: {self.config.num_hidden_layers} layers, vocab {self.config.vocab_size}>"

    def pipeline(self, target: str | None = None, window: int | None = None, record_ahead: bool | None = None):
        """A Pipeline running this model's forward passes (epilogues in WGSL, or `target`).

        `window`: passes run_ahead keeps in flight (default 4 on GPUs, 1 on CPU adapters).
        `record_ahead`: record each next pass while the current one runs (default: GPUs only).
        """
        from ..runtime.pipeline import Pipeline
        return Pipeline(self, target=target, window=window, record_ahead=record_ahead)

    @property
    def default_pipeline(self):
        """The pipeline that generate(), sessions and inferlets share (made on first use)."""
        if self._default_pipeline is None:
            self._default_pipeline = self.pipeline()
        return self._default_pipeline

    def working_set(self, max_tokens: int | None = None):
        """The KV state of one sequence (up to max_tokens positions)."""
        return self.gpu.working_set(max_tokens)

    def session(self, working_set=None, *, tokens: int | None = None):
        """The Session decoding on `working_set` (made on first use; it lives as long as the working set).

        With `tokens=N` instead: the model's shared session for one-sequence inferlets, whose
        working set has room for at least N tokens and keeps the KV of the last call, so a
        prompt sharing a prefix with it (a chat template's system prompt) prefills only the rest.
        """
        from ..runtime.session import Session
        if working_set is not None:
            if tokens is not None:
                raise ValidationError("session(working_set, tokens=...): pass one of them. Fix: drop tokens=")
            if working_set.model is not self.gpu:
                raise ValidationError("session(working_set): the working set belongs to another model. "
                                      "Fix: make it with this model's working_set()")
            if working_set.session is None:
                working_set.session = Session(self, working_set, self.default_pipeline)
            return working_set.session
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            raise ValidationError(f"session(tokens={tokens!r}): pass a working set or tokens=N (an int >= 1)")
        limit = self.config.max_position_embeddings
        if tokens > limit:
            raise ValidationError(f"{tokens} tokens (prompt + max_tokens) exceed the model's context of {limit}. "
                                  "Fix: a shorter prompt or fewer max_tokens")
        s = self._shared_session
        if s is None or s.ws.max_tokens < tokens:
            ws = self.working_set(min(limit, -(-tokens // SESSION_ROUND) * SESSION_ROUND))
            s = self._shared_session = self.session(ws)
        return s

    def chat_prompt(self, messages, add_generation_prompt: bool = True) -> str:
        """The model's chat template applied to a user string or a list of {role, content} messages."""
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        return chat_prompt(messages, add_generation_prompt, self.chat_template)

    def generate(self, prompt: str, max_tokens: int = 128, sampler="greedy", temperature: float = 1.0,
                 seed: int = 0, stop=None, working_set=None, chat: bool = False, **sampler_args):
        """Stream a continuation of `prompt`: iterate (sync or async) for text pieces; see Generation."""
        from ..generate import Generation
        return Generation(self, prompt, max_tokens=max_tokens, sampler=sampler, temperature=temperature,
                          seed=seed, stop=stop, working_set=working_set, chat=chat, **sampler_args)


def _say(verbose: bool, msg: str) -> None:
    if verbose:
        print(f"piegpu: {msg}", file=sys.stderr, flush=True)


def load_model(name_or_path=None, *, verbose: bool = True, device=None) -> Model:
    """Load the default model (None), a GGUF file, or a directory with config.json + safetensors."""
    from .default import DEFAULT_MODEL_NAME, default_gguf_path, prepare_gguf_cached
    t0 = time.perf_counter()
    if name_or_path is None or str(name_or_path) == DEFAULT_MODEL_NAME:
        gguf = default_gguf_path()
        model_dir = prepare_gguf_cached(gguf, DEFAULT_MODEL_NAME, verbose=verbose)
        source = DEFAULT_MODEL_NAME
    else:
        path = Path(name_or_path).expanduser()
        if not path.exists():
            raise ModelError(f"{path}: no such model file or directory. Fix: pass a directory with config.json and "
                             "*.safetensors, a .gguf file, or nothing for the default model")
        if path.is_file() and path.suffix == ".gguf":
            gguf, model_dir = path, prepare_gguf_cached(path, path.stem, verbose=verbose)
        elif path.is_dir():
            gguf, model_dir = None, path
        else:
            raise ModelError(f"{path}: not a .gguf file or a model directory. Fix: pass a directory with config.json and "
                             "*.safetensors, or a file ending in .gguf")
        source = str(path)
    config = LlamaConfig.from_file(model_dir / "config.json")
    tokenizer = load_tokenizer(model_dir)
    template = load_chat_template(model_dir)
    if gguf is not None:
        weights = _gguf_weights(config, gguf, model_dir, verbose)
    else:
        from .checkpoint import load_checkpoint
        _say(verbose, f"reading weights from {model_dir}")
        config, tensors = load_checkpoint(model_dir, raw=True)
        fmt = "f16" if all(getattr(t, "dtype", None) is not None and t.dtype.itemsize == 2
                           for t in tensors.values() if getattr(t, "ndim", 0) == 2) else "f32"
        tensors = {k: _as_float(v) for k, v in tensors.items()}
        weights = weights_from_tensors(config, tensors, fmt)
    _say(verbose, "uploading weights to the device")
    gpu = GpuModel(weights, device)
    _say(verbose, f"{source} ready on {gpu.dev.name} ({gpu.weight_bytes / 1e6:.0f} MB of weights, "
                  f"{time.perf_counter() - t0:.1f} s)")
    return Model(config, tokenizer, gpu, source, template)


def _as_float(v):
    import numpy as np
    if v.dtype == np.uint16:  # bf16 bit patterns from load_checkpoint(raw=True)
        return (v.astype(np.uint32) << 16).view(np.float32)
    return v


def _gguf_weights(config: LlamaConfig, gguf: Path, model_dir: Path, verbose: bool):
    sha = source_digest(gguf)
    w = load_packed(model_dir, config, sha)
    if w is not None:
        return w
    from .gguf_convert import read_gguf_raw
    _say(verbose, f"repacking {gguf.name} for the GPU (once)")
    w = weights_from_gguf(config, read_gguf_raw(gguf))
    try:
        save_packed(model_dir, w, sha)
    except OSError as e:
        _say(True, f"could not cache the packed weights in {model_dir} ({e}); they are rebuilt next time")
    return w
