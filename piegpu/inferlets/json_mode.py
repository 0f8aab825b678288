"""JSON mode: a continuation constrained to JSON (any object, or a JSON Schema), parsed for you.

A thin layer over model.generate(json_schema=... / json_object=True), which runs llguidance
on the host (inferlets/grammar.py) and applies its token mask on the device each step; the
hand-written automaton that used to live here was replaced by it (llguidance computed the
same schema's masks ~1000x faster on first sight of a state and supports all of JSON Schema).

    text, value = generate_json(model, "Describe a cat as JSON.", schema, max_tokens=48, chat=True)
"""

from __future__ import annotations

import json

from ..errors import PieGpuError, ValidationError


def generate_json(model, prompt: str, schema=None, max_tokens: int = 128, sampler="greedy",
                  temperature: float = 1.0, seed: int = 0, chat: bool = False, on_text=None, **options) -> tuple:
    """(text, value): a continuation of `prompt` that is JSON (an object when schema is None) satisfying `schema`.

    on_text(piece) streams the text. Raises PieGpuError when max_tokens ends the text before
    the value is complete (the partial text is in the message).
    """
    if on_text is not None and not callable(on_text):
        raise ValidationError(f"generate_json: on_text must be callable, got {on_text!r}")
    request = {"json_object": True} if schema is None else {"json_schema": schema}
    g = model.generate(prompt, max_tokens=max_tokens, sampler=sampler, temperature=temperature, seed=seed,
                       chat=chat, on_token=on_text, **request, **options)
    text = g.run()
    try:
        return text, json.loads(text)
    except json.JSONDecodeError:
        raise PieGpuError(f"generate_json: max_tokens={max_tokens} ended the JSON text before it was complete: "
                          f"{text!r}. Fix: a larger max_tokens") from None


__all__ = ["generate_json"]
