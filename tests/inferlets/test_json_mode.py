"""JSON mode (generate_json) through the llguidance engine: parsed values that satisfy the schema."""

from __future__ import annotations

import jsonschema
import pytest

from piegpu import PieGpuError, ValidationError
from piegpu.inferlets.json_mode import generate_json

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"]}


def test_schema_and_free_object(default_model):
    pieces = []
    text, value = generate_json(default_model, "Describe a person as JSON.", SCHEMA, max_tokens=40, chat=True,
                                on_text=pieces.append)
    jsonschema.validate(value, SCHEMA)
    assert "".join(pieces) == text
    text, value = generate_json(default_model, "List three fruits and their colors in JSON.", max_tokens=40,
                                chat=True, sampler="top-p", top_p=0.9, seed=2)
    assert isinstance(value, dict)


def test_errors(default_model):
    with pytest.raises(ValidationError, match="json_schema"):
        generate_json(default_model, "x", {"type": "foo"})
    with pytest.raises(PieGpuError, match="ended the JSON text before it was complete"):
        generate_json(default_model, "x", {"type": "object", "properties": {"a": {"type": "string",
                                                                                  "minLength": 50}},
                                           "required": ["a"]}, max_tokens=4)
