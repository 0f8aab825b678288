"""The tokenizer: built from a GGUF's tokenizer.ggml.* metadata, loaded from tokenizer.json.

Also the chat prompt format (SmolLM2-Instruct's ChatML-style template).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

from ..errors import ModelError, ValidationError
from .gguf_metadata import field_contents

TOKENIZER_NAME = "tokenizer.json"
TOKENIZER_CONFIG_NAME = "tokenizer_config.json"

# llama.cpp's token types (gguf TokenType): which ids are special control tokens.
_TOKEN_NORMAL, _TOKEN_CONTROL, _TOKEN_USER_DEFINED = 1, 3, 4

# llama.cpp pre-tokenizer names whose regex is "split every digit, then GPT-2's
# byte-level regex" (llama-vocab.cpp groups these together).
_DIGIT_SPLIT_PRES = {"smollm", "starcoder", "refact", "codeshell", "exaone", "minerva"}
_PLAIN_GPT2_PRES = {"gpt-2", "gpt2", "default"}

DEFAULT_SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

# SmolLM2-Instruct's template exactly as its GGUF (and HF tokenizer_config.json)
# carries it; `chat_prompt` implements it in Python so that jinja2 is optional.
SMOLLM2_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\n" + DEFAULT_SYSTEM_PROMPT + "<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_bpe_tokenizer(
    tokens: Sequence[str],
    merges: Sequence[str],
    token_types: Sequence[int] | None = None,
    pre: str = "smollm",
) -> Tokenizer:
    """A GPT-2 byte-level BPE `tokenizers.Tokenizer` from llama.cpp-style vocab metadata."""
    vocab = {tok: i for i, tok in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise ModelError("tokenizer.ggml.tokens has duplicate entries; the GGUF's vocabulary is corrupt -- "
                         "re-download it")
    pairs = []
    for k, merge in enumerate(merges):
        left, sep, right = merge.partition(" ")
        if not sep or not left or not right:
            raise ModelError(f"tokenizer.ggml.merges[{k}] = {merge!r} is not 'left right'; the GGUF is corrupt -- re-download it")
        pairs.append((left, right))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    tok.normalizer = None

    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in _DIGIT_SPLIT_PRES:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level]
        )
    elif pre in _PLAIN_GPT2_PRES:
        tok.pre_tokenizer = byte_level
    else:
        raise ModelError(
            f"tokenizer.ggml.pre = {pre!r} is not supported; known byte-level BPE pre-tokenizers: "
            f"{sorted(_DIGIT_SPLIT_PRES | _PLAIN_GPT2_PRES)}"
        )
    tok.decoder = decoders.ByteLevel()
    # Offsets only; the HF SmolLM2 tokenizer.json uses the same post-processor.
    tok.post_processor = processors.ByteLevel(trim_offsets=False)

    types = list(token_types) if token_types is not None else [_TOKEN_NORMAL] * len(tokens)
    added = []
    for i, (text, kind) in enumerate(zip(tokens, types)):
        if kind in (_TOKEN_CONTROL, _TOKEN_USER_DEFINED):
            # Without this, "<|im_start|>" in a prompt would be split into pieces.
            added.append((i, AddedToken(text, special=kind == _TOKEN_CONTROL, normalized=False)))
    tok.add_special_tokens([a for i, a in added if a.special])
    tok.add_tokens([a for i, a in added if not a.special])
    for i, a in added:
        got = tok.token_to_id(a.content)
        if got != i:
            raise ModelError(
                f"special token {a.content!r} maps to id {got}, expected {i}; the GGUF vocabulary is inconsistent -- "
                "re-download it"
            )
    return tok


def tokenizer_from_gguf(reader: Any) -> Tokenizer:
    """Build the tokenizer from an open GGUF's tokenizer.ggml.* fields (gguf.GGUFReader or model.gguf_file.GgufFile)."""
    fields = reader.fields
    where = getattr(reader, "path", None) or getattr(getattr(reader, "data", None), "filename", "GGUF file")

    def field(name: str, required: bool = True) -> Any:
        f = fields.get(name)
        if f is None:
            if required:
                raise ModelError(f"{where}: metadata {name!r} is missing; this GGUF carries no usable tokenizer -- "
                                 "use a GGUF converted with its tokenizer")
            return None
        return field_contents(f, name, str(where))

    model = field("tokenizer.ggml.model")
    if model != "gpt2":
        raise ModelError(
            f"{where}: tokenizer.ggml.model = {model!r}; only GPT-2 byte-level BPE ('gpt2') is supported"
        )
    return build_bpe_tokenizer(
        tokens=field("tokenizer.ggml.tokens"),
        merges=field("tokenizer.ggml.merges"),
        token_types=field("tokenizer.ggml.token_type", required=False),
        pre=field("tokenizer.ggml.pre", required=False) or "default",
    )


def load_tokenizer(model_dir: str | Path) -> Tokenizer:
    """Load `model_dir`/tokenizer.json."""
    path = Path(model_dir) / TOKENIZER_NAME
    if not path.is_file():
        raise ModelError(
            f"{path}: tokenizer file not found; copy the checkpoint's tokenizer.json into the model directory"
        )
    try:
        return Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises plain Exception subclasses
        raise ModelError(f"{path}: cannot parse tokenizer ({e}); restore the checkpoint's tokenizer.json") from e


def load_chat_template(model_dir: str | Path) -> str | None:
    """The chat_template of `model_dir`/tokenizer_config.json, or None if it has none."""
    path = Path(model_dir) / TOKENIZER_CONFIG_NAME
    if not path.is_file():
        return None
    try:
        template = json.loads(path.read_text(encoding="utf-8")).get("chat_template")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as e:
        raise ModelError(
            f"{path}: cannot read chat_template ({e}); restore the checkpoint's tokenizer_config.json"
        ) from None
    return template if isinstance(template, str) else None


def chat_prompt(
    messages: Sequence[Mapping[str, str]],
    add_generation_prompt: bool = True,
    template: str | None = None,
) -> str:
    """Render messages ([{"role", "content"}]) with SmolLM2's template, or another jinja `template`."""
    for k, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ValidationError(
                f"chat_prompt: messages[{k}] = {m!r}; each message must be a dict with string "
                "'role' and 'content', e.g. {'role': 'user', 'content': 'Hi'}"
            )
    if template is None or template == SMOLLM2_CHAT_TEMPLATE:
        return _smollm2_prompt(messages, add_generation_prompt)
    return _render_jinja(template, messages, add_generation_prompt)


def _smollm2_prompt(messages: Sequence[Mapping[str, str]], add_generation_prompt: bool) -> str:
    parts = []
    if messages and messages[0]["role"] != "system":
        parts.append(f"<|im_start|>system\n{DEFAULT_SYSTEM_PROMPT}<|im_end|>\n")
    for m in messages:
        parts.append(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n")
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def _render_jinja(template: str, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool) -> str:
    try:
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise ModelError(
            "this model's chat_template is not SmolLM2's; rendering it needs jinja2 -- pip install jinja2"
        ) from None
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    try:
        return env.from_string(template).render(
            messages=[dict(m) for m in messages], add_generation_prompt=add_generation_prompt
        )
    except Exception as e:  # a template error is the model's, not the caller's
        raise ModelError(f"chat_template failed to render ({e}); check the model's tokenizer_config.json") from e
