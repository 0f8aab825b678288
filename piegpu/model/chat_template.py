"""Chat templates (tokenizer.chat_template of a GGUF, chat_template of tokenizer_config.json) rendered with
jinja2 as transformers' apply_chat_template renders them.

The same environment: a sandbox with trim_blocks and lstrip_blocks, loop controls, the
{% generation %} tag (transformers tracks assistant spans with it; here it only renders its body),
a tojson filter that does not escape HTML and takes indent/separators/sort_keys, raise_exception()
and strftime_now(); and the same variables: messages, tools, documents, add_generation_prompt and
the special tokens (bos_token, eos_token, ...).
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Mapping, Sequence

from ..errors import ModelError


@lru_cache(maxsize=16)
def _compile(template: str):
    try:
        import jinja2
        from jinja2 import nodes
        from jinja2.ext import Extension
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise ModelError("this model's chat_template needs jinja2 to render -- pip install jinja2") from None

    class Generation(Extension):
        """{% generation %}...{% endgeneration %}: the body, as transformers renders it."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(template)
    except jinja2.exceptions.TemplateSyntaxError as e:
        raise ModelError(f"chat_template does not parse ({e}, line {e.lineno}); check the model's chat template") \
            from None


def render_chat_template(template: str, messages: Sequence[Mapping], add_generation_prompt: bool = True,
                         special_tokens: Mapping[str, str] | None = None, tools: list | None = None) -> str:
    """The prompt text of `messages` under a jinja chat template, as transformers renders it."""
    try:
        return _compile(template).render(messages=[dict(m) for m in messages], tools=tools, documents=None,
                                         add_generation_prompt=add_generation_prompt, **(special_tokens or {}))
    except ModelError:
        raise
    except Exception as e:  # a template error (raise_exception included) is the model's, not the caller's
        raise ModelError(f"chat_template failed to render ({type(e).__name__}: {e}); check the model's chat "
                         "template and the messages' roles") from e


def special_tokens_of(tokenizer, config) -> dict:
    """{"bos_token": ..., "eos_token": ...} from the config's ids (the strings templates print)."""
    out = {}
    for name, tid in (("bos_token", config.bos_token_id), ("eos_token", config.eos_token_id)):
        tid = tid[0] if isinstance(tid, (list, tuple)) and tid else tid
        text = tokenizer.id_to_token(int(tid)) if isinstance(tid, int) else None
        if text is not None:
            out[name] = text
    return out
