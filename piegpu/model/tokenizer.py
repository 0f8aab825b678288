"""The tokenizer: loaded from tokenizer.json (or built from a GGUF's metadata: model/gguf_tokenizer.py).

Also the chat prompt format (SmolLM2-Instruct's ChatML-style template).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Sequence

from tokenizers import Tokenizer

from ..errors import ModelError, ValidationError
from .chat_template import render_chat_template
from .gguf_tokenizer import build_bpe_tokenizer, tokenizer_from_gguf  # noqa: F401  (re-exported: callers import them from here)

TOKENIZER_NAME = "tokenizer.json"
TOKENIZER_CONFIG_NAME = "tokenizer_config.json"


DEFAULT_SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

# SmolLM2-Instruct's template exactly as its GGUF (and HF tokenizer_config.json)
# carries it; `chat_prompt` implements it in Python so that jinja2 is optional.
SMOLLM2_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\n" + DEFAULT_SYSTEM_PROMPT + "<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
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
    special_tokens: Mapping[str, str] | None = None,
    tokenizer_adds_bos: bool = False,
    tools: list | None = None,
) -> str:
    """Render messages ([{"role", "content"}]) with SmolLM2's template, or another jinja `template`.

    `tools` (OpenAI tool definitions) is the template's `tools` variable, as transformers passes it;
    messages may carry tool_calls / tool_call_id keys for templates that render them.

    `special_tokens` (bos_token, eos_token, ...) are the template's variables, as transformers passes
    them. When the tokenizer puts BOS first itself (`tokenizer_adds_bos`), a BOS the template prints
    at the start is left out, so the encoded prompt has one (transformers encodes the rendered chat
    without special tokens instead; the ids are the same).
    """
    for k, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ValidationError(
                f"chat_prompt: messages[{k}] = {m!r}; each message must be a dict with string "
                "'role' and 'content', e.g. {'role': 'user', 'content': 'Hi'}"
            )
    if (template is None or template == SMOLLM2_CHAT_TEMPLATE) and not tools:
        return _smollm2_prompt(messages, add_generation_prompt)
    text = render_chat_template(template or SMOLLM2_CHAT_TEMPLATE, messages, add_generation_prompt, special_tokens,
                                tools=tools or None)
    bos = (special_tokens or {}).get("bos_token")
    if tokenizer_adds_bos and bos and text.startswith(bos):
        text = text[len(bos):]
    return text


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
    return render_chat_template(template, messages, add_generation_prompt)
