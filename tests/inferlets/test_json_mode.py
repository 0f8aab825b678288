"""JSON mode on the default model: every output parses and satisfies the schema (the device applies the mask)."""

from __future__ import annotations

import json

import pytest

from piegpu import ValidationError
from piegpu.inferlets.json_mode import generate_json, json_mode
from piegpu.inferlets.json_schema import validate

SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "city": {"type": "string"},
                         "student": {"type": "boolean"}},
          "required": ["name", "age", "city"]}

PROMPTS = ["Describe a person named Alice who lives in Paris as JSON.",
           "Give me a JSON record for a 30 year old teacher.",
           "Create a JSON profile of a student from Tokyo.",
           "Return JSON for Bob, 45, from Berlin.",
           "Output a JSON object about a fictional character.",
           "Invent a person and describe them in JSON.",
           "JSON please: a grandmother who lives in Rome.",
           "Describe yourself as a JSON object.",
           "Write a JSON user record for a new customer.",
           "Make up a JSON entry for a famous scientist."]


def test_ten_prompts_all_parse_and_satisfy_the_schema(default_model):
    outputs = []
    for prompt in PROMPTS:
        text, value = generate_json(default_model, prompt, SCHEMA, max_tokens=40, chat=True)
        assert json.loads(text) == value
        assert validate(value, SCHEMA) == [], (prompt, text)
        assert {"name", "age", "city"} <= set(value) and set(value) <= set(SCHEMA["properties"])
        outputs.append(text)
    stats = json_mode(default_model, SCHEMA).stats
    print(f"\nJSON mode: 10/10 outputs parse and satisfy the schema; last: {outputs[-1]!r}; {stats}")
    assert len(set(outputs)) > 3  # the model, not a fixed template, writes the values


def test_free_json_object_and_sampling(default_model):
    text, value = generate_json(default_model, "List three fruits and their colors in JSON.", max_tokens=32,
                                chat=True)
    assert isinstance(value, dict) and json.loads(text) == value
    schema = {"type": "array", "items": {"type": "number"}}
    for seed in (1, 2):
        text, value = generate_json(default_model, "Give five prime numbers as a JSON array.", schema,
                                    max_tokens=24, sampler="top-p", temperature=0.9, seed=seed, chat=True)
        assert isinstance(value, list) and all(isinstance(v, (int, float)) for v in value)


def test_tight_budget_still_closes(default_model):
    jm = json_mode(default_model, SCHEMA)
    need = jm.min_tokens()
    assert need == len('{"name":"","age":0,"city":""}')
    text, value = generate_json(default_model, PROMPTS[0], SCHEMA, max_tokens=need + 3, chat=True)
    assert not validate(value, SCHEMA) and jm.stats.tokens <= need + 3
    with pytest.raises(ValidationError, match=f"max_tokens >= {need}"):
        generate_json(default_model, PROMPTS[0], SCHEMA, max_tokens=need - 1)


def test_the_mask_is_what_makes_it_json(default_model):
    """Unconstrained greedy decoding of the same chat prompt is not JSON; the masked pass is."""
    g = default_model.generate(PROMPTS[7], max_tokens=12, chat=True)
    free = g.run()
    with pytest.raises(json.JSONDecodeError):
        json.loads(free)
    text, value = generate_json(default_model, PROMPTS[7], SCHEMA, max_tokens=40, chat=True)
    assert not validate(value, SCHEMA)
