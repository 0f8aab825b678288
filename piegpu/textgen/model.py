"""The user-facing Model: a loaded model with its tokenizer, sessions, pipelines and generate().

It sits above the runtime, the model and the samplers (generate() builds sampling
epilogues); piegpu.model.loading reads and uploads what it wraps.
"""

from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING

from ..errors import ValidationError
from ..model.config import LlamaConfig
from ..model.kv_pool import DEFAULT_KV_DTYPE, PAGE_TOKENS
from ..model.loading import load_parts
from ..model.tokenizer import chat_prompt
from ..runtime.device import MODEL_CLOSED, device_lock

if TYPE_CHECKING:
    from .encoder_model import EncoderModel

SESSION_ROUND = 256  # the shared session's working set grows in steps of this many tokens


class Model:
    """A loaded model: `tokenizer`, `config`, device weights, and the high-level generate API.

    Thread-safe for embedding: generate() may run in several threads at once (each on its own
    event loop; device work is serialized pass by pass by the runtime's device lock, see
    runtime.device.device_lock). close() -- or leaving `with piegpu.load_model() as model:` --
    releases its device buffers.
    """

    def __init__(self, config: LlamaConfig, tokenizer, gpu, source: str, chat_template: str | None,
                 info: dict | None = None):
        self.config = config
        self._info = info if info is not None else {"name": source, "source": source}
        self.tokenizer = tokenizer
        self.gpu = gpu
        self.source = source
        self.chat_template = chat_template
        self._default_pipeline = None
        self._shared_session = None
        self._make_lock = threading.RLock()  # the default pipeline and shared session are made once
        from .adapters import Adapters
        self._adapters = Adapters(self)  # LoRA adapters by name (textgen/adapters.py)

    # ---- lifetime ----------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """Whether close() was called."""
        return bool(getattr(self.gpu, "closed", False))

    def check_open(self) -> None:
        """Raise a ValidationError saying so if this model was closed."""
        if self.closed:
            raise ValidationError(MODEL_CLOSED)

    def close(self) -> int:
        """Release the model's device buffers: weights, working sets, scratch; returns the bytes released.

        Call it when no generation of this model is running (one that is gets a clear error at its
        next pass). Afterwards every use of the model or its working sets raises a ValidationError.
        Closing twice does nothing. Other models on the same device are unaffected.
        """
        with device_lock(self.gpu.device):  # no pass of any thread is being recorded or submitted now
            if self.closed:
                return 0
            self._default_pipeline = None
            self._shared_session = None
            return self.gpu.release()

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<piegpu.Model {self.source}: {self.config.num_hidden_layers} layers, vocab {self.config.vocab_size}>"

    def pipeline(self, target: str | None = None, window: int | None = None, record_ahead: bool | None = None,
                 group: int | None = None):
        """A Pipeline running this model's forward passes (epilogues in WGSL, or `target`).

        `window`: passes run_ahead keeps in flight (default 8 on GPUs, 1 on CPU adapters).
        `record_ahead`: record each next pass while the current one runs (default: GPUs only).
        `group`: passes submitted together, in one command buffer (default: half the window).
        """
        from ..runtime.pipeline import Pipeline
        self.check_open()
        return Pipeline(self, target=target, window=window, record_ahead=record_ahead, group=group)

    @property
    def default_pipeline(self):
        """The pipeline that generate(), sessions and inferlets share (made on first use)."""
        pipe = self._default_pipeline
        if pipe is None:
            with self._make_lock:
                if self._default_pipeline is None:
                    self._default_pipeline = self.pipeline()
                pipe = self._default_pipeline
        return pipe

    @property
    def info(self) -> dict:
        """What the model is: name, source, architecture, parameters, quantization (by tensor type too), context,
        vocab_size, layers, chat_template (whether it has one) -- what `piegpu models` and /props print."""
        return dict(self._info, context=self.context, vocab_size=self.config.vocab_size)

    @property
    def context(self) -> int:
        """The longest sequence this model was loaded for (load_model(context=...)), in positions."""
        return self.gpu.context

    def working_set(self, max_tokens: int | None = None):
        """The KV state of one sequence (up to max_tokens positions)."""
        self.check_open()
        return self.gpu.working_set(max_tokens)

    def kv_stats(self) -> dict:
        """The KV page pool's use: pages_total, pages_used, page_tokens, bytes_per_page, bytes_used, ..."""
        return self.gpu.kv_stats()

    def session(self, working_set=None, *, tokens: int | None = None):
        """The Session decoding on `working_set` (made on first use; it lives as long as the working set).

        With `tokens=N` instead: the model's shared session for one-sequence inferlets, whose
        working set has room for at least N tokens and keeps the KV of the last call, so a
        prompt sharing a prefix with it (a chat template's system prompt) prefills only the rest.
        """
        from ..runtime.session import Session
        self.check_open()
        if working_set is not None:
            if tokens is not None:
                raise ValidationError("session(working_set, tokens=...): pass one of them. Fix: drop tokens=")
            if working_set.model is not self.gpu:
                raise ValidationError("session(working_set): the working set belongs to another model. "
                                      "Fix: make it with this model's working_set()")
            if working_set.session is None:
                with self._make_lock:
                    if working_set.session is None:
                        working_set.session = Session(self, working_set, self.default_pipeline)
            return working_set.session
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            raise ValidationError(f"session(tokens={tokens!r}): pass a working set or tokens=N (an int >= 1)")
        limit = self.context
        if tokens > limit:
            raise ValidationError(f"{tokens} tokens (prompt + max_tokens) exceed the model's context of {limit}. "
                                  "Fix: a shorter prompt or fewer max_tokens, or load with a longer context=")
        s = self._shared_session
        if s is None or s.ws.max_tokens < tokens:
            ws = self.working_set(min(limit, -(-tokens // SESSION_ROUND) * SESSION_ROUND))
            s = self._shared_session = self.session(ws)
        return s

    # ---- LoRA adapters (textgen/adapters.py) ---------------------------------------------------
    def load_adapter(self, path, name: str | None = None):
        """Load a LoRA adapter (a PEFT folder or a GGUF LoRA) for this model -> Adapter (use it by object or name)."""
        self.check_open()
        return self._adapters.load(path, name)

    def unload_adapter(self, adapter) -> None:
        """Forget a loaded adapter (refused while a sequence runs under it)."""
        self._adapters.unload(adapter)

    @property
    def adapters(self) -> list:
        """The loaded adapters."""
        return list(self._adapters.loaded.values())

    def merge_adapter(self, adapter, scale: float = 1.0) -> None:
        """Merge an adapter into the weights (W += scale B A), irreversibly for this model object; it is unloaded."""
        self.check_open()
        with device_lock(self.gpu.device):
            self._adapters.merge(adapter, scale)

    def logits(self, token_ids, adapter=None, adapter_scale: float = 1.0) -> "np.ndarray":
        """numpy f32 [len(token_ids), vocab]: the logits at every position of one prefill from an empty state
        (under a LoRA `adapter` times adapter_scale, if given)."""
        import numpy as np
        self.check_open()
        ids = np.asarray(token_ids)
        if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
            raise ValidationError(f"logits(token_ids): pass a non-empty list of int token ids, got {token_ids!r:.80}. "
                                  "Fix: model.tokenizer.encode(text).ids")
        if ids.min() < 0 or ids.max() >= self.config.vocab_size:
            raise ValidationError(f"logits(token_ids): ids must be in [0, {self.config.vocab_size}), got "
                                  f"{ids.min()}..{ids.max()}")
        use = self._adapters.use(adapter, adapter_scale)
        with device_lock(self.gpu.device):
            return self.gpu.logits_all(ids, use)

    @functools.cached_property
    def embed_pooling(self):
        """The pooling (model/encoder_config.Pooling) its files configure for embed(), or None: sentence-transformers'
        files beside the weights or a GGUF's pooling_type (read once)."""
        from .decoder_embed import configured_pooling
        return configured_pooling(self.source)

    def embed(self, texts, normalize: bool = True, dimensions: int | None = None, *, pooling: str | None = None,
              truncate: bool = False) -> "np.ndarray":
        """Embeddings [len(texts), hidden] (float32) from the final-normed hidden rows: pooling "last" / "mean" /
        "cls" / "max" (default: what the model's sentence-transformers files or GGUF pooling_type say; a chat
        model configures none and needs pooling=); `dimensions` keeps the leading ones before `normalize`."""
        from .decoder_embed import embed_decoder
        return embed_decoder(self, texts, normalize, dimensions, pooling, truncate)

    def chat_prompt(self, messages, add_generation_prompt: bool = True, tools: list | None = None) -> str:
        """The model's chat template applied to a user string or a list of {role, content} messages
        (`tools`: OpenAI tool definitions, the template's `tools` variable)."""
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        if self.chat_template is None:
            return chat_prompt(messages, add_generation_prompt, tools=tools)
        from ..model.chat_template import special_tokens_of  # the template's bos_token, eos_token
        bos = self.config.bos_token_id
        adds_bos = isinstance(bos, int) and self.tokenizer.encode("x").ids[:1] == [bos]
        return chat_prompt(messages, add_generation_prompt, self.chat_template,
                           special_tokens_of(self.tokenizer, self.config), adds_bos, tools=tools)

    def generate(self, prompt: str | list, max_tokens: int = 128, sampler="greedy", temperature: float = 1.0,
                 seed: int = 0, stop=None, working_set=None, chat: bool = False, n: int = 1, on_token=None,
                 reuse_prefix: bool = False, window: int | None = None, adapter=None, adapter_scale: float = 1.0,
                 speculative=None, **sampler_args):
        """Stream a continuation of `prompt`: iterate (sync or async) for text pieces; see Generation.

        `adapter`: a LoRA Adapter (or a loaded adapter's name) applied times adapter_scale (load_adapter).

        The synchronous forms (`for piece in ...`, `.run()`) work anywhere: no event loop, inside a
        running one (Jupyter, qasync), any thread. `on_token(piece)` is called with each text piece
        (return False to stop); `.cancel()` stops the generation at its next token, from any thread.

        Multi-turn chat: with chat=True the prompt may be the list of {role, content} messages, and
        with reuse_prefix=True plus a working_set kept across turns only the tokens after the longest
        prefix that the working set already holds are prefilled (stats.reused_tokens, stats.prompt_tokens).

        With n > 1: n samples of the prompt (sample i uses seed + i), the prompt prefilled once and its
        KV forked for each; returns a batching.Samples (.run(), .texts, .samples).

        `sampler` may also be an eta container (eta.Program or its bytes, from the Python, JS or Rust
        tracer) with the signature (logits f32[vocab], state u32[2]) -> i32 token; state = [seed, counter].

        `window`: passes kept in flight ahead of the host (None: what the adapter measures best).

        `speculative="lookup"` (or piegpu.Lookup(k=..., ngram=...)): drafts from n-gram lookup in the prompt and what
        was generated, verified on the device; greedy output is plain greedy's, sampled output is distributed as plain
        sampling's (stats.draft_tokens, stats.accepted_tokens). See textgen/speculation.py.
        """
        if n != 1:
            from .batching import Samples
            if working_set is not None or reuse_prefix:
                raise ValidationError("generate(n=...) makes its own working sets. Fix: drop working_set= "
                                      "and reuse_prefix=")
            if speculative is not None:
                raise ValidationError("generate(n=..., speculative=...): speculative decoding runs one sequence a "
                                      "generate() call for now. Fix: call generate(speculative=..., seed=s) per sample")
            return Samples(self, prompt, n, seed=seed, max_tokens=max_tokens, sampler=sampler,
                           temperature=temperature, stop=stop, chat=chat, on_token=on_token, window=window,
                           adapter=adapter, adapter_scale=adapter_scale, **sampler_args)
        from .generation import Generation
        return Generation(self, prompt, max_tokens=max_tokens, sampler=sampler, temperature=temperature,
                          seed=seed, stop=stop, working_set=working_set, chat=chat, on_token=on_token,
                          reuse_prefix=reuse_prefix, window=window, adapter=adapter, adapter_scale=adapter_scale,
                          speculative=speculative, **sampler_args)

    def generate_batch(self, prompts, max_tokens: int = 128, sampler="greedy", temperature: float = 1.0,
                       seed: int = 0, stop=None, chat: bool = False, max_batch: int = 16, window: int | None = None,
                       adapters: list | None = None, **sampler_args) -> list:
        """One finished Generation per prompt, decoded together (one row per prompt in each pass).

        `window`: passes that run ahead on the device per host read (None: the GPU adapter's best).
        `adapters`: one LoRA adapter (Adapter, name or None) per prompt; rows of different adapters share passes.
        """
        from .batching import generate_batch
        self.check_open()
        if adapters is not None:
            if isinstance(adapters, (str, bytes)) or not hasattr(adapters, "__len__") or len(adapters) != len(prompts):
                raise ValidationError(f"generate_batch(adapters=...): one adapter (or None) per prompt, a list of "
                                      f"{len(prompts)}; got {adapters!r:.80}")
        return generate_batch(self, prompts, max_tokens=max_tokens, sampler=sampler, temperature=temperature,
                              seed=seed, stop=stop, chat=chat, max_batch=max_batch, window=window, adapters=adapters,
                              **sampler_args)


def load_model(name_or_path=None, *, verbose: bool = True, device=None, kv_mb: float | None = None,
               page_tokens: int = PAGE_TOKENS, kv_dtype: str = DEFAULT_KV_DTYPE, context: int | None = None,
               max_loras: int | None = None) -> "Model | EncoderModel":
    """Load the default model (None), a GGUF file, a directory with config.json + safetensors, or a model by name.

    A directory holding an encoder (BERT, RoBERTa, XLM-R, their rerankers) gives an EncoderModel (embed, rerank).

    Names: a Hugging Face repo id "org/repo[:QUANT][@REVISION]" ("hf:" optional; downloaded into huggingface_hub's
    cache if it is not there; without :QUANT, Q4_K_M, else the smallest Q4-Q8 file), "ollama:NAME[:TAG]" (Ollama's
    store, read in place), "lmstudio:PUBLISHER/REPO[:QUANT]" (LM Studio's folder). A local path wins over a name.

    context is the longest sequence (prompt + generated tokens; llama.cpp's -c): None picks the model's own where its
    KV fits the default budget (1 GiB, an eighth of RAM on CPU adapters), else the largest power of two that does
    (at least 4096); 0 is the model's own; `model.context` says what was chosen. kv_mb sizes the KV page pool every sequence draws from (None: two whole contexts, at most 1 GiB,
    and an eighth of RAM on CPU adapters); page_tokens is the positions a page holds; kv_dtype "f16"
    (the default) stores K and V rounded to half precision (half the bytes a position: twice the positions in
    kv_mb), "f32" keeps them exact. max_loras: the most LoRA adapters resident on the device at once (default 8;
    more are loaded on the host and swapped in, least recently used first).
    """
    if max_loras is not None and (isinstance(max_loras, bool) or not isinstance(max_loras, int) or max_loras < 1):
        raise ValidationError(f"load_model(max_loras={max_loras!r}): the most LoRA adapters on the device at once, "
                              "an int >= 1")
    if name_or_path is not None and _is_encoder(name_or_path):  # BERT / RoBERTa / XLM-R: embed() and rerank()
        from .encoder_model import load_encoder
        return load_encoder(name_or_path, verbose=verbose, device=device)
    p = load_parts(name_or_path, verbose=verbose, device=device, kv_mb=kv_mb, page_tokens=page_tokens,
                   kv_dtype=kv_dtype, context=context)
    p.gpu.lora_slots = max_loras
    return Model(p.config, p.tokenizer, p.gpu, p.source, p.chat_template, p.info)


def _is_encoder(name_or_path) -> bool:
    """Whether `name_or_path` is a local directory holding an encoder checkpoint (model/encoder_config.py)."""
    from pathlib import Path
    from ..model.encoder_config import is_encoder_dir
    path = Path(str(name_or_path)).expanduser()
    return path.is_dir() and is_encoder_dir(path)
